/* DROPOUT through the graph, autodiff and executor: gradient against central finite
 * differences of a double forward using the same Philox mask (both backends); the mask is
 * identical for the same (seed, step), different for another step or seed; the keep fraction is
 * 1-p; the backward regenerates exactly the forward's mask (gradient zero exactly where the
 * output is); inference graphs (training off) and p = 0 add no node. Bad p and dtypes give a
 * status naming the op. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/tessera.h"
#include "kernels/dropout.h"
#include "test_util.h"

/* ------------------------------------------------------------ gradient-check harness
 * y = graph output; loss = dense(reshape(y, (1,ny)), r) = sum(y * r) with a fixed random r (no
 * gradient). Float inputs get random values in [-1,1) unless fixed[k] gives them; integer
 * inputs take fixed[k] (i32/i64 data). The forward `fwd` in double sees every input as doubles.
 * Checks y and every wanted input gradient (up to 256 spread samples per input) against central
 * differences of the double forward, on the REF and FAST backends. */
#define MAXIN 6
typedef void (*fwd_fn)(double *const *x, double *y, const void *ctx);

static int ncases;
static uint64_t run_step = 0; /* step given to ts_plan_run (dropout stream) */

static void check_case(const char *what, ts_graph *g, int nin, const ts_val *x, const int *want,
                       const void *const *fixed, ts_val y, fwd_fn fwd, const void *ctx,
                       double eps, double tol) {
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
  void *xv[MAXIN];
  double *xd[MAXIN];
  size_t nx[MAXIN];
  float *rv = malloc(ny * sizeof(float));
  double *yd = malloc(ny * sizeof(double));
  ts_test_fill(rv, ny, 999 + (uint64_t)ncases, -1, 1);
  for (int k = 0; k < nin; k++) {
    ts_shape s = ts_val_shape(g, x[k]);
    ts_dtype dt = ts_val_dtype(g, x[k]);
    nx[k] = (size_t)ts_shape_numel(&s);
    xv[k] = malloc(nx[k] * ts_dtype_size(dt));
    xd[k] = malloc(nx[k] * sizeof(double));
    if (dt == TS_F32) {
      float *f = xv[k];
      if (fixed && fixed[k])
        memcpy(f, fixed[k], nx[k] * sizeof(float));
      else
        ts_test_fill(f, nx[k], 1000 + 17 * (uint64_t)ncases + (uint64_t)k, -1, 1);
      for (size_t j = 0; j < nx[k]; j++) xd[k][j] = f[j];
    } else {
      memcpy(xv[k], fixed[k], nx[k] * ts_dtype_size(dt));
      for (size_t j = 0; j < nx[k]; j++)
        xd[k][j] = dt == TS_I32 ? (double)((int32_t *)xv[k])[j] : (double)((int64_t *)xv[k])[j];
    }
    gx[k] = ts_graph_grad(g, x[k]);
    CHECK_MSG((gx[k] != TS_NONE) == (want[k] != 0), "%s: input %d gradient presence", what, k);
  }
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
      for (size_t t = 0; t < ny; t++) lp += yd[t] * rv[t];
      xd[k][j] = s - eps;
      fwd(xd, yd, ctx);
      for (size_t t = 0; t < ny; t++) lm += yd[t] * rv[t];
      xd[k][j] = s;
      fd[k][i] = (float)((lp - lm) / (2 * eps));
    }
  }
  fwd(xd, yd, ctx);
  float *yref = malloc(ny * sizeof(float));
  for (size_t i = 0; i < ny; i++) yref[i] = (float)yd[i];
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
    int rc = ts_plan_run(p, run_step);
    CHECK_MSG(rc == TS_OK, "%s: run: %s", what, ts_last_error());
    if (rc == TS_OK) {
      char w[256];
      snprintf(w, sizeof w, "%s [%s] forward", what, be ? "fast" : "ref");
      CHECK_CLOSE((const float *)ts_plan_data(p, y), yref, ny, tol, tol, w);
      for (int k = 0; k < nin; k++) {
        if (gx[k] == TS_NONE) continue;
        snprintf(w, sizeof w, "%s [%s] d input %d vs finite differences", what,
                 be ? "fast" : "ref", k);
        const float *gd = ts_plan_data(p, gx[k]);
        float *gs = malloc(ns[k] * sizeof(float));
        for (size_t i = 0; i < ns[k]; i++) gs[i] = gd[idx[k][i]];
        CHECK_CLOSE(gs, fd[k], ns[k], tol, tol, w);
        free(gs);
      }
    }
    ts_plan_free(p);
  }
  ts_backend_set(TS_BACKEND_FAST);
  for (int k = 0; k < nin; k++) free(xv[k]), free(xd[k]), free(fd[k]), free(idx[k]);
  free(rv), free(yd), free(yref);
}

static void expect_fail(ts_graph *g, ts_val v, int code, const char *needle1, const char *needle2) {
  CHECK(v == TS_NONE);
  CHECK_MSG(ts_graph_status(g) == code, "status %d (%s), wanted %d", ts_graph_status(g),
            ts_graph_error(g), code);
  const char *m = ts_graph_error(g);
  CHECK_MSG(strstr(m, needle1) && (!needle2 || strstr(m, needle2)), "message: %s", m);
}

typedef struct {
  int64_t n;
  float p;
  uint64_t seed;
} drop_ctx;

static void fwd_dropout(double *const *x, double *y, const void *vc) {
  const drop_ctx *c = vc;
  for (int64_t i = 0; i < c->n; i++)
    y[i] = ts__dropout_keep(c->seed, run_step, (uint64_t)i, c->p) ? x[0][i] / (1.0 - c->p) : 0.0;
}

static void case_fd(ts_shape s, float p, uint64_t seed, uint64_t step) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_F32, s);
  ts_val y = ts_dropout(g, x, p, seed);
  CHECK(y != x);
  drop_ctx c = {ts_shape_numel(&s), p, seed};
  run_step = step;
  int want[1] = {1};
  char what[96], b[64];
  snprintf(what, sizeof what, "dropout %s p=%.2f seed %llu step %llu", ts_shape_str(&s, b, sizeof b),
           (double)p, (unsigned long long)seed, (unsigned long long)step);
  check_case(what, g, 1, &x, want, NULL, y, fwd_dropout, &c, 1e-3, 1e-5);
  run_step = 0;
  ts_graph_free(g);
}

/* y = dropout(x); loss = sum(y * r): checks masks across steps, keep fraction, and that the
 * gradient (= mask * r / (1-p)) uses the forward's mask. */
static void case_masks(void) {
  const int64_t R = 64, C = 1024, n = R * C;
  const float p = 0.25f;
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_F32, ts_shape2(R, C));
  ts_val y = ts_dropout(g, x, p, 1234);
  ts_val y2 = ts_dropout(g, x, p, 1235); /* another layer: another seed */
  ts_val r = ts_input(g, "r", TS_F32, ts_shape2(1, n));
  ts_val_set_requires_grad(g, r, 0);
  ts_val loss = ts_dense(g, ts_reshape(g, y, ts_shape2(1, n)), r, TS_NONE);
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  ts_val gx = ts_graph_grad(g, x);
  CHECK(gx != TS_NONE);
  float *xv = malloc((size_t)n * 4), *rv = malloc((size_t)n * 4), *y5 = malloc((size_t)n * 4),
        *y6 = malloc((size_t)n * 4), *g5 = malloc((size_t)n * 4);
  ts_test_fill(xv, (size_t)n, 3, 0.5f, 1.5f); /* nonzero */
  ts_test_fill(rv, (size_t)n, 4, 0.5f, 1.5f);
  ts_val keep[3] = {y, y2, gx};
  ts_plan *p5 = NULL;
  CHECK_OK(ts_plan_create(g, keep, 3, &p5));
  if (!p5) return;
  CHECK_OK(ts_plan_bind(p5, x, xv));
  CHECK_OK(ts_plan_bind(p5, r, rv));
  CHECK_OK(ts_plan_run(p5, 5));
  memcpy(y5, ts_plan_data(p5, y), (size_t)n * 4);
  memcpy(g5, ts_plan_data(p5, gx), (size_t)n * 4);
  const float *yo = ts_plan_data(p5, y2);
  size_t kept = 0, diff_seed = 0, bad_grad = 0;
  float scale = 1.0f / (1.0f - p);
  for (int64_t i = 0; i < n; i++) {
    kept += y5[i] != 0.0f;
    diff_seed += (y5[i] != 0.0f) != (yo[i] != 0.0f);
    float want = y5[i] != 0.0f ? rv[i] * scale : 0.0f;
    bad_grad += g5[i] != want;
  }
  double frac = (double)kept / (double)n, sd = sqrt(p * (1 - p) / (double)n);
  CHECK_MSG(fabs(frac - (1 - p)) < 5 * sd, "keep fraction %.4f, expected %.4f", frac, 1 - p);
  CHECK_MSG(bad_grad == 0, "%zu gradient elements not mask * r / (1-p)", bad_grad);
  CHECK_MSG(fabs((double)diff_seed / n - 2 * p * (1 - p)) < 0.01, "seeds differ in %.4f", (double)diff_seed / n);
  /* same step again: identical; next step: a different mask, gradient follows it */
  CHECK_OK(ts_plan_run(p5, 5));
  CHECK(memcmp(y5, ts_plan_data(p5, y), (size_t)n * 4) == 0);
  CHECK(memcmp(g5, ts_plan_data(p5, gx), (size_t)n * 4) == 0);
  CHECK_OK(ts_plan_run(p5, 6));
  memcpy(y6, ts_plan_data(p5, y), (size_t)n * 4);
  const float *g6 = ts_plan_data(p5, gx);
  size_t diff_step = 0;
  bad_grad = 0;
  for (int64_t i = 0; i < n; i++) {
    diff_step += (y5[i] != 0.0f) != (y6[i] != 0.0f);
    bad_grad += (g6[i] != 0.0f) != (y6[i] != 0.0f);
  }
  CHECK_MSG(fabs((double)diff_step / n - 2 * p * (1 - p)) < 0.01, "steps differ in %.4f", (double)diff_step / n);
  CHECK_MSG(bad_grad == 0, "step 6: gradient mask != forward mask at %zu elements", bad_grad);
  /* the reference backend gives the same bits (same kernel) */
  ts_backend_set(TS_BACKEND_REF);
  CHECK_OK(ts_plan_run(p5, 6));
  CHECK(memcmp(y6, ts_plan_data(p5, y), (size_t)n * 4) == 0);
  ts_backend_set(TS_BACKEND_FAST);
  ts_plan_free(p5);
  printf("masks: keep %.4f (p=%.2f), same step identical, step change %.4f, seed change %.4f, "
         "gradient == forward mask * r/(1-p)\n", frac, (double)p, (double)diff_step / n,
         (double)diff_seed / n);
  free(xv); free(rv); free(y5); free(y6); free(g5);
  ts_graph_free(g);
}

static void case_inference(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_F32, ts_shape2(3, 4));
  CHECK(ts_dropout(g, x, 0.0f, 1) == x);
  int nn = ts_graph_num_nodes(g);
  ts_graph_set_training(g, 0);
  CHECK(ts_dropout(g, x, 0.5f, 1) == x);
  CHECK(ts_graph_num_nodes(g) == nn);
  CHECK(ts_graph_status(g) == TS_OK);
  ts_graph_free(g);
  printf("inference mode and p = 0: identity, no node\n");
}

static void bad_inputs(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_F32, ts_shape2(3, 4));
  expect_fail(g, ts_dropout(g, x, 1.5f, 1), TS_EINVAL, "dropout", "outside [0,1]");
  ts_graph_free(g);
  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape2(3, 4));
  expect_fail(g, ts_dropout(g, x, NAN, 1), TS_EINVAL, "dropout", "x(3,4)");
  ts_graph_free(g);
  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_I32, ts_shape2(3, 4));
  expect_fail(g, ts_dropout(g, x, 0.5f, 1), TS_EDTYPE, "dropout", "f32");
  ts_graph_free(g);
  CHECK_OK(ts_graph_create(&g));
  expect_fail(g, ts_dropout(g, TS_NONE, 0.5f, 1), TS_EINVAL, "dropout", NULL);
  ts_graph_free(g);
  printf("bad input: p = 1.5, p = NaN, i32 input, TS_NONE\n");
}

int main(void) {
  case_fd(ts_shape2(5, 7), 0.3f, 42, 5);
  case_fd(ts_shape3(2, 3, 50), 0.5f, 7, 123456789);
  case_fd(ts_shape1(1000), 0.1f, 0xDEADBEEFCAFEull, 0);
  printf("dropout: %d graphs ref+fast vs FD with the Philox mask\n", ncases);
  case_masks();
  case_inference();
  bad_inputs();
  return ts_test_finish("test_grad_dropout");
}
