/* Pooling kernels: reference max/avg pooling (fwd, bwd) vs naive implementations written from
 * the definition (max: gradient to the arg-max; avg: padding excluded from the divisor), and
 * oneDNN vs reference. The oneDNN max-pool backward consumes the oneDNN forward's workspace,
 * the reference backward the reference one. Random inputs (no ties). Tolerance 1e-5 abs/rel
 * (max pooling is exact; averages differ only in summation order). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dnnl_ctx.h"
#include "kernels/pool.h"
#include "test_util.h"

static int nshapes;

static void naive(const ts__pool_desc *d, int is_max, const float *x, const float *dy, float *y,
                  float *dx) {
  const int64_t H = d->H, W = d->W, OH = d->OH, OW = d->OW;
  memset(dx, 0, (size_t)(d->N * d->C * H * W) * 4);
  for (int64_t p = 0; p < d->N * d->C; p++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        double s = 0, m = -INFINITY;
        int64_t cnt = 0, am = -1;
        for (int64_t i = 0; i < d->kh; i++)
          for (int64_t j = 0; j < d->kw; j++) {
            int64_t h = oh * d->sh - d->ph + i, w = ow * d->sw - d->pw + j;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            double v = x[(p * H + h) * W + w];
            s += v;
            cnt++;
            if (v > m) m = v, am = (p * H + h) * W + w;
          }
        const int64_t yi = (p * OH + oh) * OW + ow;
        y[yi] = (float)(is_max ? m : s / (double)cnt);
        if (is_max) {
          dx[am] += dy[yi];
        } else {
          for (int64_t i = 0; i < d->kh; i++)
            for (int64_t j = 0; j < d->kw; j++) {
              int64_t h = oh * d->sh - d->ph + i, w = ow * d->sw - d->pw + j;
              if (h < 0 || h >= H || w < 0 || w >= W) continue;
              dx[(p * H + h) * W + w] += (float)(dy[yi] / (double)cnt);
            }
        }
      }
}

static void check_pool(int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw,
                       int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  ts__pool_desc d = {N, C, H, W, ts__pool_out_size(H, kh, sh, ph), ts__pool_out_size(W, kw, sw, pw),
                     kh, kw, sh, sw, ph, pw};
  CHECK_OK(ts__pool_check(&d, 0, "test"));
  size_t nx = (size_t)(N * C * H * W), ny = (size_t)(N * C * d.OH * d.OW);
  float *x = malloc(nx * 4), *dy = malloc(ny * 4), *y0 = malloc(ny * 4), *y1 = malloc(ny * 4);
  float *dx0 = malloc(nx * 4), *dx1 = malloc(nx * 4);
  uint8_t *ws = malloc(ny);
  ts_test_fill(x, nx, 7 + nshapes, -1, 1);
  ts_test_fill(dy, ny, 8 + nshapes, -1, 1);
  nshapes++;
  char what[200];
  for (int is_max = 0; is_max < (kh * kw <= 256 ? 2 : 1); is_max++) {
    naive(&d, is_max, x, dy, y0, dx0);
    for (int impl = 0; impl < 2; impl++) {
      memset(y1, 0xff, ny * 4);
      memset(dx1, 0xff, nx * 4);
      memset(ws, 0xee, ny);
      if (is_max) {
        CHECK_OK(impl ? ts__maxpool2d_fwd_dnnl(&d, x, y1, ws) : ts__maxpool2d_fwd_ref(&d, x, y1, ws));
        CHECK_OK(impl ? ts__maxpool2d_bwd_dnnl(&d, dy, ws, dx1) : ts__maxpool2d_bwd_ref(&d, dy, ws, dx1));
      } else {
        CHECK_OK(impl ? ts__avgpool2d_fwd_dnnl(&d, x, y1) : ts__avgpool2d_fwd_ref(&d, x, y1));
        CHECK_OK(impl ? ts__avgpool2d_bwd_dnnl(&d, dy, dx1) : ts__avgpool2d_bwd_ref(&d, dy, dx1));
      }
      snprintf(what, sizeof what, "%s %s N%lld C%lld %lldx%lld k%lldx%lld s%lldx%lld p%lldx%lld",
               is_max ? "maxpool" : "avgpool", impl ? "dnnl" : "ref", (long long)N, (long long)C,
               (long long)H, (long long)W, (long long)kh, (long long)kw, (long long)sh,
               (long long)sw, (long long)ph, (long long)pw);
      CHECK_CLOSE(y1, y0, ny, 1e-5, 1e-5, what);
      CHECK_CLOSE(dx1, dx0, nx, 1e-5, 1e-5, what);
    }
  }
  free(x), free(dy), free(y0), free(y1), free(dx0), free(dx1), free(ws);
}

int main(void) {
  /*         N  C   H   W  kh kw sh sw ph pw */
  check_pool(2, 3, 8, 8, 2, 2, 2, 2, 0, 0);    /* classic 2x2/2 */
  check_pool(1, 4, 7, 9, 3, 3, 2, 2, 1, 1);    /* 3x3/2 pad 1, odd sizes (ResNet stem) */
  check_pool(3, 2, 5, 6, 3, 2, 1, 1, 1, 1);    /* overlapping windows, pads per axis */
  check_pool(2, 5, 4, 4, 4, 4, 4, 4, 0, 0);    /* global 4x4 (ts_global_avgpool) */
  check_pool(1, 1, 1, 1, 1, 1, 1, 1, 0, 0);    /* 1x1 */
  check_pool(2, 16, 11, 10, 5, 4, 3, 2, 2, 2); /* big window, stride 3x2 */
  check_pool(1, 2, 16, 16, 16, 16, 1, 1, 0, 0); /* 256-element window (oneDNN: ref fallback) */
  check_pool(2, 3, 20, 20, 20, 20, 20, 20, 0, 0); /* global 20x20 (avg only beyond 256) */
  printf("pool: %d shapes x {max, avg} x {ref, oneDNN} fwd+bwd vs naive (avg excludes padding)\n",
         nshapes);

  ts__pool_desc bad = {1, 1, 4, 4, 2, 2, 3, 3, 1, 1, 2, 2};
  float z[64] = {0};
  uint8_t wz[64] = {0};
  CHECK(ts__maxpool2d_fwd_ref(&bad, z, z, wz) == TS_EINVAL); /* pad 2 > half of window 3 */
  CHECK(strstr(ts_last_error(), "maxpool2d") != NULL);
  CHECK(ts__avgpool2d_fwd_dnnl(&bad, z, z) == TS_EINVAL);
  CHECK(strstr(ts_last_error(), "avgpool2d") != NULL);
  ts__pool_desc bad2 = {1, 1, 4, 4, 3, 3, 3, 3, 2, 2, 0, 0}; /* OH should be 1 */
  CHECK(ts__maxpool2d_bwd_dnnl(&bad2, z, wz, z) == TS_EINVAL);
  CHECK(ts__avgpool2d_bwd_ref(&bad2, z, z) == TS_EINVAL);
  ts__pool_desc big = {1, 1, 17, 17, 1, 1, 17, 17, 1, 1, 0, 0}; /* 289 > 256 */
  CHECK(ts__maxpool2d_fwd_dnnl(&big, z, z, wz) == TS_EINVAL);
  CHECK(ts__pool_check(&big, 0, "avgpool2d") == TS_OK); /* no window limit for averages */
  printf("bad input: padding over half the window, wrong output size, window > 256\n");
  ts__dnnl_cache_clear();
  return ts_test_finish("test_pool");
}
