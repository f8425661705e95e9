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
#include "test_util.h"

/* ------------------------------------------------------------ gradient-check harness */

#define MAXIN 4
typedef void (*fwd_fn)(double *const *x, double *y, const void *ctx);

static int ncases;

/* x[k] are the graph inputs (shapes from the graph), y the output; fills inputs with random
 * values in [-1,1) (distinct: a permutation of evenly spaced values, so no two are closer than
 * 2/n and finite differences never flip an arg-max), checks forward and gradients of inputs
 * with want[k] on REF and FAST. Inputs over 256 elements are checked on 256 spread samples. */
static void check_case(const char *what, ts_graph *g, int nin, const ts_val *x, const int *want,
                       ts_val y, fwd_fn fwd, const void *ctx, int distinct) {
  CHECK_MSG(ts_graph_status(g) == TS_OK, "%s: %s", what, ts_graph_error(g));
  if (ts_graph_status(g) != TS_OK) return;
  ncases++;
  const ts_shape ys = ts_val_shape(g, y);
  const size_t ny = (size_t)ts_shape_numel(&ys);
  ts_val r = ts_input(g, "r", TS_F32, ts_shape2(1, (int64_t)ny));
  ts_val_set_requires_grad(g, r, 0);
  for (int k = 0; k < nin; k++)
    if (!want[k]) ts_val_set_requires_grad(g, x[k], 0);
  ts_val loss = ts_dense(g, ts_reshape(g, y, ts_shape2(1, (int64_t)ny)), r, TS_NONE);
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  if (ts_graph_status(g)) {
    fprintf(stderr, "%s: %s\n", what, ts_graph_error(g));
    return;
  }
  ts_val gx[MAXIN];
  float *xv[MAXIN];
  double *xd[MAXIN];
  size_t nx[MAXIN];
  float *rv = malloc(ny * sizeof(float));
  double *yd = malloc(ny * sizeof(double));
  ts_test_fill(rv, ny, 999, -1, 1);
  for (int k = 0; k < nin; k++) {
    ts_shape s = ts_val_shape(g, x[k]);
    nx[k] = (size_t)ts_shape_numel(&s);
    xv[k] = malloc(nx[k] * sizeof(float));
    xd[k] = malloc(nx[k] * sizeof(double));
    ts_test_fill(xv[k], nx[k], 1000 + 17 * (uint64_t)ncases + (uint64_t)k, -1, 1);
    if (distinct) /* 7919 is prime and larger than any n here, so j -> j*7919 mod n permutes */
      for (size_t j = 0; j < nx[k]; j++)
        xv[k][j] = -1.f + 2.f * (float)((j * 7919 + (size_t)k) % nx[k]) / (float)nx[k];
    for (size_t j = 0; j < nx[k]; j++) xd[k][j] = xv[k][j];
    gx[k] = ts_graph_grad(g, x[k]);
    CHECK_MSG((gx[k] != TS_NONE) == (want[k] != 0), "%s: input %d gradient presence", what, k);
  }
  /* central differences in double (the forward is linear or piecewise linear here) */
  const double eps = 1e-3;
  float *fd[MAXIN];
  size_t *idx[MAXIN], ns[MAXIN];
  for (int k = 0; k < nin; k++) {
    ns[k] = nx[k] > 256 ? 256 : nx[k];
    idx[k] = malloc(ns[k] * sizeof(size_t));
    for (size_t i = 0; i < ns[k]; i++) idx[k][i] = i * nx[k] / ns[k];
    fd[k] = malloc(ns[k] * sizeof(float));
    for (size_t i = 0; i < ns[k] && want[k]; i++) {
      const size_t j = idx[k][i];
      double s = xd[k][j], lp = 0, lm = 0;
      xd[k][j] = s + eps;
      fwd(xd, yd, ctx);
      for (size_t i = 0; i < ny; i++) lp += yd[i] * rv[i];
      xd[k][j] = s - eps;
      fwd(xd, yd, ctx);
      for (size_t i = 0; i < ny; i++) lm += yd[i] * rv[i];
      xd[k][j] = s;
      fd[k][i] = (float)((lp - lm) / (2 * eps));
    }
  }
  fwd(xd, yd, ctx);
  float *yref = malloc(ny * sizeof(float));
  double lref = 0;
  for (size_t i = 0; i < ny; i++) yref[i] = (float)yd[i], lref += yd[i] * rv[i];
  for (int be = 0; be < 2; be++) {
    ts_backend_set(be ? TS_BACKEND_FAST : TS_BACKEND_REF);
    ts_val keep[MAXIN + 2];
    int nk = 0;
    keep[nk++] = loss;
    keep[nk++] = y;
    for (int k = 0; k < nin; k++)
      if (gx[k] != TS_NONE) keep[nk++] = gx[k];
    ts_plan *p = NULL;
    CHECK_OK(ts_plan_create(g, keep, nk, &p));
    if (!p) continue;
    for (int k = 0; k < nin; k++) CHECK_OK(ts_plan_bind(p, x[k], xv[k]));
    CHECK_OK(ts_plan_bind(p, r, rv));
    int rc = ts_plan_run(p, 0);
    CHECK_MSG(rc == TS_OK, "%s: run: %s", what, ts_last_error());
    if (rc == TS_OK) {
      char w[256];
      snprintf(w, sizeof w, "%s [%s] forward", what, be ? "fast" : "ref");
      CHECK_CLOSE((const float *)ts_plan_data(p, y), yref, ny, 1e-4, 1e-4, w);
      float lr = (float)lref;
      snprintf(w, sizeof w, "%s [%s] loss", what, be ? "fast" : "ref");
      CHECK_CLOSE((const float *)ts_plan_data(p, loss), &lr, 1, 1e-4, 1e-4, w);
      for (int k = 0; k < nin; k++) {
        if (gx[k] == TS_NONE) continue;
        snprintf(w, sizeof w, "%s [%s] d input %d vs finite differences", what,
                 be ? "fast" : "ref", k);
        const float *gd = ts_plan_data(p, gx[k]);
        float *gs = malloc(ns[k] * sizeof(float));
        for (size_t i = 0; i < ns[k]; i++) gs[i] = gd[idx[k][i]];
        CHECK_CLOSE(gs, fd[k], ns[k], 2e-4, 2e-4, w);
        free(gs);
      }
    }
    ts_plan_free(p);
  }
  ts_backend_set(TS_BACKEND_FAST);
  for (int k = 0; k < nin; k++) free(xv[k]), free(xd[k]), free(fd[k]), free(idx[k]);
  free(rv), free(yd), free(yref);
}

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
  int want[1] = {1};
  check_case(what, g, 1, &x, want, y, pool_fwd, &c, 1);
  ts_graph_free(g);
}

/* ------------------------------------------------------------ bad input */

static void expect_fail(ts_graph *g, ts_val v, int code, const char *needle1, const char *needle2) {
  CHECK(v == TS_NONE);
  CHECK_MSG(ts_graph_status(g) == code, "status %d (%s), wanted %d", ts_graph_status(g),
            ts_graph_error(g), code);
  const char *m = ts_graph_error(g);
  CHECK_MSG(strstr(m, needle1) && (!needle2 || strstr(m, needle2)), "message: %s", m);
}

static void bad_inputs(void) {
  ts_graph *g;
  ts_val x;
#define SETUP(xs)          \
  ts_graph_create(&g);     \
  x = ts_input(g, "x", TS_F32, xs)
  SETUP(ts_shape3(3, 8, 8));
  expect_fail(g, ts_maxpool2d(g, x, 2, 2, 2, 2, 0, 0), TS_ESHAPE, "maxpool2d", "4-D");
  ts_graph_free(g);
  SETUP(ts_shape4(1, 3, 8, 8));
  expect_fail(g, ts_avgpool2d(g, x, 3, 3, 2, 2, 2, 1), TS_EINVAL, "avgpool2d", "half the window");
  ts_graph_free(g);
  SETUP(ts_shape4(1, 3, 4, 4));
  expect_fail(g, ts_maxpool2d(g, x, 5, 5, 1, 1, 0, 0), TS_ESHAPE, "maxpool2d", "does not fit");
  ts_graph_free(g);
  SETUP(ts_shape4(1, 3, 8, 8));
  expect_fail(g, ts_maxpool2d(g, x, 2, 2, 0, 2, 0, 0), TS_EINVAL, "maxpool2d", "stride 0x2");
  ts_graph_free(g);
  SETUP(ts_shape4(1, 3, 20, 20));
  expect_fail(g, ts_maxpool2d(g, x, 20, 20, 1, 1, 0, 0), TS_EUNSUPPORTED, "maxpool2d", "256");
  ts_graph_free(g);
  SETUP(ts_shape4(1, 3, 20, 20)); /* averages have no window limit */
  CHECK(ts_avgpool2d(g, x, 20, 20, 1, 1, 0, 0) != TS_NONE);
  CHECK(ts_global_avgpool(g, x) != TS_NONE);
  ts_graph_free(g);
  SETUP(ts_shape2(3, 8));
  expect_fail(g, ts_global_avgpool(g, x), TS_ESHAPE, "global_avgpool", "4-D");
  ts_graph_free(g);
  ts_graph_create(&g);
  x = ts_input(g, "x", TS_I64, ts_shape4(1, 3, 8, 8));
  expect_fail(g, ts_avgpool2d(g, x, 2, 2, 2, 2, 0, 0), TS_EDTYPE, "avgpool2d", "f32");
  ts_graph_free(g);
  ts_graph_create(&g);
  expect_fail(g, ts_maxpool2d(g, TS_NONE, 2, 2, 2, 2, 0, 0), TS_EINVAL, "maxpool2d", NULL);
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
  printf("pool: %d graphs (max, avg, global avg) ref+fast vs finite differences\n", ncases);
  bad_inputs();
  return ts_test_finish("test_grad_pool");
}
