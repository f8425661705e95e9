/* Gradients of MAXPOOL2D / AVGPOOL2D (through MAXPOOL2D_BWD / AVGPOOL2D_BWD) and
 * ts_global_avgpool via the graph, autodiff and executor, on both backends (each backend's
 * max-pool backward reads its own forward's workspace), against central finite differences of
 * a double-precision pooling written in this file. Inputs are distinct values at least 2/n
 * apart, so the finite-difference step (1e-3) never changes a window's arg-max. Average pooling
 * excludes padding from the divisor (count_include_pad = False).
 * loss = dense(reshape(y, (1,ny)), r) = sum(y * r) with a fixed random r (no gradient).
 * Tolerance: |a-b| <= 2e-4 + 2e-4 |b|. Also: bad shapes/attributes give a status and a message
 * naming the op, never a crash. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/tessera.h"
#include "grad_harness.h"

/* ------------------------------------------------------------ pooling */

typedef struct {
  int64_t N, C, H, W, OH, OW, kh, kw, sh, sw, ph, pw;
  int is_max;
} pool_ctx;

static void pool_fwd(double *const *x, double *y, const void *vc) {
  const pool_ctx *c = vc;
  for (int64_t p = 0; p < c->N * c->C; p++)
    for (int64_t oh = 0; oh < c->OH; oh++)
      for (int64_t ow = 0; ow < c->OW; ow++) {
        double s = 0, m = -INFINITY;
        int64_t cnt = 0;
        for (int64_t i = 0; i < c->kh; i++)
          for (int64_t j = 0; j < c->kw; j++) {
            int64_t h = oh * c->sh - c->ph + i, w = ow * c->sw - c->pw + j;
            if (h < 0 || h >= c->H || w < 0 || w >= c->W) continue;
            double v = x[0][(p * c->H + h) * c->W + w];
            s += v, cnt++;
            if (v > m) m = v;
          }
        y[(p * c->OH + oh) * c->OW + ow] = c->is_max ? m : s / (double)cnt;
      }
}

/* global: ts_global_avgpool (kh/kw/strides/pads ignored). */
static void case_pool(int is_max, int global, int64_t N, int64_t C, int64_t H, int64_t W,
                      int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  if (global) kh = sh = H, kw = sw = W, ph = pw = 0;
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  pool_ctx c = {N, C, H, W, (H + 2 * ph - kh) / sh + 1, (W + 2 * pw - kw) / sw + 1,
                kh, kw, sh, sw, ph, pw, is_max};
  ts_val x = ts_input(g, "x", TS_F32, ts_shape4(N, C, H, W));
  ts_val y = global   ? ts_global_avgpool(g, x)
             : is_max ? ts_maxpool2d(g, x, (int)kh, (int)kw, (int)sh, (int)sw, (int)ph, (int)pw)
                      : ts_avgpool2d(g, x, (int)kh, (int)kw, (int)sh, (int)sw, (int)ph, (int)pw);
  ts_shape ys = ts_val_shape(g, y);
  CHECK(ys.ndim == 4 && ys.dims[0] == N && ys.dims[1] == C && ys.dims[2] == c.OH && ys.dims[3] == c.OW);
  char what[200];
  snprintf(what, sizeof what, "%s x(%lld,%lld,%lld,%lld) k%lldx%lld s%lldx%lld p%lldx%lld",
           global ? "global_avgpool" : is_max ? "maxpool2d" : "avgpool2d", (long long)N,
           (long long)C, (long long)H, (long long)W, (long long)kh, (long long)kw, (long long)sh,
           (long long)sw, (long long)ph, (long long)pw);
  gh_check(what, g, y, 1, &x,
           &(gh_opts){.fwd = pool_fwd, .ctx = &c, .distinct = 1, .tol = 1e-4, .loss_tol = 1e-4,
                      .grad_atol = 2e-4});
  ts_graph_free(g);
}

/* ------------------------------------------------------------ bad input */

static void bad_inputs(void) {
  ts_graph *g;
  ts_val x;
#define SETUP(xs)          \
  ts_graph_create(&g);     \
  x = ts_input(g, "x", TS_F32, xs)
  SETUP(ts_shape3(3, 8, 8));
  CHECK_GRAPH_ERROR(g, ts_maxpool2d(g, x, 2, 2, 2, 2, 0, 0), TS_ESHAPE, "maxpool2d", "4-D", NULL);
  ts_graph_free(g);
  SETUP(ts_shape4(1, 3, 8, 8));
  CHECK_GRAPH_ERROR(g, ts_avgpool2d(g, x, 3, 3, 2, 2, 2, 1), TS_EINVAL, "avgpool2d",
                    "half the window", NULL);
  ts_graph_free(g);
  SETUP(ts_shape4(1, 3, 4, 4));
  CHECK_GRAPH_ERROR(g, ts_maxpool2d(g, x, 5, 5, 1, 1, 0, 0), TS_ESHAPE, "maxpool2d", "does not fit",
                    NULL);
  ts_graph_free(g);
  SETUP(ts_shape4(1, 3, 8, 8));
  CHECK_GRAPH_ERROR(g, ts_maxpool2d(g, x, 2, 2, 0, 2, 0, 0), TS_EINVAL, "maxpool2d", "stride 0x2",
                    NULL);
  ts_graph_free(g);
  SETUP(ts_shape4(1, 3, 20, 20));
  CHECK_GRAPH_ERROR(g, ts_maxpool2d(g, x, 20, 20, 1, 1, 0, 0), TS_EUNSUPPORTED, "maxpool2d", "256",
                    NULL);
  ts_graph_free(g);
  SETUP(ts_shape4(1, 3, 20, 20)); /* averages have no window limit */
  CHECK(ts_avgpool2d(g, x, 20, 20, 1, 1, 0, 0) != TS_NONE);
  CHECK(ts_global_avgpool(g, x) != TS_NONE);
  ts_graph_free(g);
  SETUP(ts_shape2(3, 8));
  CHECK_GRAPH_ERROR(g, ts_global_avgpool(g, x), TS_ESHAPE, "global_avgpool", "4-D", NULL);
  ts_graph_free(g);
  ts_graph_create(&g);
  x = ts_input(g, "x", TS_I64, ts_shape4(1, 3, 8, 8));
  CHECK_GRAPH_ERROR(g, ts_avgpool2d(g, x, 2, 2, 2, 2, 0, 0), TS_EDTYPE, "avgpool2d", "f32", NULL);
  ts_graph_free(g);
  ts_graph_create(&g);
  CHECK_GRAPH_ERROR(g, ts_maxpool2d(g, TS_NONE, 2, 2, 2, 2, 0, 0), TS_EINVAL, "maxpool2d", NULL,
                    NULL);
  ts_graph_free(g);
#undef SETUP
  printf("bad input: rank, padding over half the window, window too big, stride 0, max window "
         "> 256, dtype, TS_NONE -> status + message naming the op\n");
}

int main(void) {
  for (int is_max = 1; is_max >= 0; is_max--) {
    /*                    N  C  H  W kh kw sh sw ph pw */
    case_pool(is_max, 0, 2, 3, 4, 4, 2, 2, 2, 2, 0, 0); /* 2x2/2 */
    case_pool(is_max, 0, 1, 2, 7, 7, 3, 3, 2, 2, 1, 1); /* 3x3/2 pad 1 (ResNet stem) */
    case_pool(is_max, 0, 2, 1, 5, 6, 3, 2, 1, 1, 1, 1); /* overlapping, pads per axis */
    case_pool(is_max, 0, 1, 2, 9, 5, 4, 3, 3, 2, 2, 1); /* odd sizes, stride 3x2 */
  }
  case_pool(0, 1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0);     /* global average */
  case_pool(0, 1, 1, 2, 1, 1, 0, 0, 0, 0, 0, 0);     /* global average of 1x1 */
  printf("pool: %d graphs (max, avg, global avg) ref+fast vs finite differences\n", gh_cases());
  bad_inputs();
  return ts_test_finish("test_grad_pool");
}
