/* 16-bit pooling kernels (pool.c: ts__{max,avg}pool2d_{fwd,bwd}_lp) against the f32 kernels of the
 * same backend on the same inputs: x and dy are drawn in [-1,1) and rounded to the 16-bit dtype
 * first, so the f32 kernel reads exactly the values the 16-bit one does (many ties in a window:
 * bf16 keeps 8 bits). Max pooling's backward uses the workspace of its own forward.
 *
 * - loops (REF backend; bf16 and f16): exact. y and dx equal the f32 outputs rounded once to
 *   the dtype, the workspace equals the f32 reference's byte for byte (same arg-max, first of
 *   ties).
 * - oneDNN bf16 (FAST backend): max y exact (a maximum is not rounded), workspace equal to the
 *   f32 oneDNN kernel's, max dx within 1e-6 + 2^-7 |b| (oneDNN accumulates overlapping windows
 *   in f32 and rounds once, up to 2^-8 relative); avg y and dx within 1e-6 + 2^-7 |b| (f32 sums
 *   in oneDNN's order, one rounding).
 * - f16 on the FAST backend is converted around the f32 oneDNN kernels: exact vs them.
 * Shapes: odd H/W and C, overlapping windows with padding (3x3 stride 2 pad 1, 3x3 stride 1),
 * windows dropping the last row/column (2x2 stride 2 on odd sizes), global average pooling (the
 * whole plane as one window), a 256-element max window (oneDNN's u8 workspace cannot hold it: the
 * loops run in both directions), and a size that takes the parallel path. Every comparison is
 * shown able to fail: one corrupted output element is caught. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dnnl_ctx.h"
#include "kernels/lowp.h"
#include "kernels/pool.h"
#include "test_util.h"

static uint64_t seed = 101;

/* n values in [-1,1) rounded to dt: f32 copy in x, the 16-bit buffer returned */
static void *mk16(float *x, int64_t n, ts_dtype dt) {
  ts_test_fill(x, (size_t)n, seed++, -1, 1);
  void *h = malloc((size_t)n * 2);
  ts__lp_narrow(x, h, dt, n);
  ts__lp_widen(h, dt, x, n);
  return h;
}

/* 1 if out (dt) equals ref rounded to dt, bit for bit */
static int same_bits(const void *out, ts_dtype dt, const float *ref, int64_t n) {
  void *want = malloc((size_t)n * 2);
  ts__lp_narrow(ref, want, dt, n);
  const int eq = memcmp(out, want, (size_t)n * 2) == 0;
  free(want);
  return eq;
}

/* out (dt) vs the f32 ref: exact (atol < 0) or within atol + rtol |ref|; then the same with one
 * element corrupted must fail */
static void cmp(const void *out, ts_dtype dt, const float *ref, int64_t n, double atol, double rtol, const char *what) {
  float *got = malloc((size_t)n * 4);
  ts__lp_widen(out, dt, got, n);
  if (atol < 0) {
    CHECK_MSG(same_bits(out, dt, ref, n), "%s: differs from the rounded f32 result", what);
    uint16_t *bad = malloc((size_t)n * 2);
    memcpy(bad, out, (size_t)n * 2);
    bad[n / 2] ^= 0x0100;
    CHECK_MSG(!same_bits(bad, dt, ref, n), "%s: a corrupted element was not caught", what);
    free(bad);
  } else {
    CHECK_CLOSE(got, ref, (size_t)n, atol, rtol, what);
    got[n / 2] += 0.0625f + 0.0625f * fabsf(got[n / 2]);
    CHECK_MSG(ts_test_close(got, ref, (size_t)n, atol, rtol, NULL) > 1, "%s: a corrupted element was not caught", what);
  }
  free(got);
}

static void check(ts_dtype dt, int dnnl, int is_max, int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh,
                  int64_t kw, int64_t s, int64_t p) {
  ts__pool_desc d = {N, C, H, W, ts__pool_out_size(H, kh, s, p), ts__pool_out_size(W, kw, s, p), kh, kw, s, s, p, p};
  const int64_t nx = N * C * H * W, ny = N * C * d.OH * d.OW;
  float *x = malloc((size_t)nx * 4), *dy = malloc((size_t)ny * 4), *y = malloc((size_t)ny * 4),
        *dx = malloc((size_t)nx * 4);
  void *xh = mk16(x, nx, dt), *dyh = mk16(dy, ny, dt), *yh = malloc((size_t)ny * 2), *dxh = malloc((size_t)nx * 2);
  uint8_t *ws = malloc((size_t)ny), *wsh = malloc((size_t)ny);
  const int onednn_bf16 = dnnl && dt == TS_BF16;
  char what[200];
  snprintf(what, sizeof what, "%s %s %s (%lld,%lld,%lld,%lld) k%lldx%lld s%lld p%lld", is_max ? "maxpool" : "avgpool",
           ts_dtype_name(dt), dnnl ? "fast" : "ref", (long long)N, (long long)C, (long long)H, (long long)W,
           (long long)kh, (long long)kw, (long long)s, (long long)p);
  char w2[240];
  if (is_max) {
    CHECK_OK(dnnl ? ts__maxpool2d_fwd_dnnl(&d, x, y, ws) : ts__maxpool2d_fwd_ref(&d, x, y, ws));
    CHECK_OK(dnnl ? ts__maxpool2d_bwd_dnnl(&d, dy, ws, dx) : ts__maxpool2d_bwd_ref(&d, dy, ws, dx));
    CHECK_OK(ts__maxpool2d_fwd_lp(&d, dt, dnnl, xh, yh, wsh));
    CHECK_OK(ts__maxpool2d_bwd_lp(&d, dt, dnnl, dyh, wsh, dxh));
    snprintf(w2, sizeof w2, "%s: y", what);
    cmp(yh, dt, y, ny, -1, 0, w2);
    CHECK_MSG(!memcmp(ws, wsh, (size_t)ny), "%s: workspace differs from the f32 kernel's", what);
    snprintf(w2, sizeof w2, "%s: dx", what);
    cmp(dxh, dt, dx, nx, onednn_bf16 ? 1e-6 : -1, 1.0 / 128, w2);
  } else {
    CHECK_OK(dnnl ? ts__avgpool2d_fwd_dnnl(&d, x, y) : ts__avgpool2d_fwd_ref(&d, x, y));
    CHECK_OK(dnnl ? ts__avgpool2d_bwd_dnnl(&d, dy, dx) : ts__avgpool2d_bwd_ref(&d, dy, dx));
    CHECK_OK(ts__avgpool2d_fwd_lp(&d, dt, dnnl, xh, yh));
    CHECK_OK(ts__avgpool2d_bwd_lp(&d, dt, dnnl, dyh, dxh));
    snprintf(w2, sizeof w2, "%s: y", what);
    cmp(yh, dt, y, ny, onednn_bf16 ? 1e-6 : -1, 1.0 / 128, w2);
    snprintf(w2, sizeof w2, "%s: dx", what);
    cmp(dxh, dt, dx, nx, onednn_bf16 ? 1e-6 : -1, 1.0 / 128, w2);
  }
  free(x), free(dy), free(y), free(dx), free(xh), free(dyh), free(yh), free(dxh), free(ws), free(wsh);
}

int main(void) {
  const ts_dtype dts[2] = {TS_BF16, TS_F16};
  for (int i = 0; i < 2; i++)
    for (int dnnl = 0; dnnl < 2; dnnl++)
      for (int is_max = 1; is_max >= 0; is_max--) {
        const ts_dtype dt = dts[i];
        check(dt, dnnl, is_max, 2, 3, 7, 9, 3, 3, 2, 1);     /* overlapping windows, padding */
        check(dt, dnnl, is_max, 2, 4, 9, 7, 3, 3, 1, 1);     /* stride 1: up to 9 windows per x */
        check(dt, dnnl, is_max, 3, 5, 11, 13, 2, 2, 2, 0);   /* last row/column dropped */
        check(dt, dnnl, is_max, 2, 5, 7, 9, 7, 9, 1, 0);     /* global: the whole plane */
        check(dt, dnnl, is_max, 1, 3, 17, 16, 16, 16, 1, 0); /* 256-element window */
        check(dt, dnnl, is_max, 4, 6, 57, 55, 3, 3, 2, 1);   /* parallel, ResNet stem-like */
      }
  printf("pooling 16-bit: loops exact vs f32 ref; oneDNN bf16 vs f32 oneDNN (max exact, sums 2^-7); f16 fast "
         "converted, exact\n");
  /* bad input */
  {
    ts__pool_desc d = {1, 1, 4, 4, 2, 2, 2, 2, 2, 2, 0, 0};
    uint16_t a[16] = {0}, b[4];
    uint8_t w[4];
    CHECK(ts__maxpool2d_fwd_lp(&d, TS_I32, 0, a, b, w) == TS_EDTYPE);
    CHECK(ts__maxpool2d_fwd_lp(&d, TS_BF16, 1, a, b, NULL) == TS_EINVAL);
    d.OH = 3;
    CHECK(ts__avgpool2d_fwd_lp(&d, TS_BF16, 0, a, b) == TS_EINVAL);
  }
  ts__dnnl_cache_clear();
  return ts_test_finish("test_pool_bf16");
}
