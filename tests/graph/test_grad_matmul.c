/* Gradients of MATMUL and DENSE through the graph, autodiff and executor, on both backends,
 * against central finite differences of a double-precision forward written in this file.
 * Each case builds y = op(inputs), loss = dense(reshape(y, (1,ny)), r) = sum(y * r) with a
 * fixed random r (no gradient), and compares y, the loss and every input gradient.
 * Tolerance: |a-b| <= 2e-4 + 2e-4 |b| (values O(1), f32 sums of a few dozen terms).
 * Also: bad shapes/dtypes/flags give a status and a message naming the op, never a crash. */
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

/* ------------------------------------------------------------ matmul */

typedef struct {
  int64_t batch, M, N, K;
  int ta, tb, ab, bb;
} mm_ctx;

static void mm_fwd(double *const *x, double *y, const void *vc) {
  const mm_ctx *c = vc;
  for (int64_t i = 0; i < c->batch; i++)
    for (int64_t m = 0; m < c->M; m++)
      for (int64_t n = 0; n < c->N; n++) {
        const double *A = x[0] + (c->ab ? i * c->M * c->K : 0);
        const double *B = x[1] + (c->bb ? i * c->K * c->N : 0);
        double s = 0;
        for (int64_t k = 0; k < c->K; k++)
          s += (c->ta ? A[k * c->M + m] : A[m * c->K + k]) * (c->tb ? B[n * c->K + k] : B[k * c->N + n]);
        y[(i * c->M + m) * c->N + n] = s;
      }
}

/* batch dims bd[0..nbd) for the batched operands; a/b 2-D when ab/bb is 0. */
static void case_matmul(int nbd, const int64_t *bd, int64_t M, int64_t N, int64_t K, int ta,
                        int tb, int ab, int bb) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_shape sa, sb;
  memset(&sa, 0, sizeof sa);
  memset(&sb, 0, sizeof sb);
  mm_ctx c = {1, M, N, K, ta, tb, ab, bb};
  for (int i = 0; i < nbd; i++) {
    c.batch *= bd[i];
    if (ab) sa.dims[sa.ndim++] = bd[i];
    if (bb) sb.dims[sb.ndim++] = bd[i];
  }
  sa.dims[sa.ndim++] = ta ? K : M;
  sa.dims[sa.ndim++] = ta ? M : K;
  sb.dims[sb.ndim++] = tb ? N : K;
  sb.dims[sb.ndim++] = tb ? K : N;
  ts_val x[2] = {ts_input(g, "a", TS_F32, sa), ts_input(g, "b", TS_F32, sb)};
  ts_val y = ts_matmul(g, x[0], x[1], ta, tb);
  char what[160], s1[64], s2[64];
  snprintf(what, sizeof what, "matmul a%s%s b%s%s", ts_shape_str(&sa, s1, sizeof s1),
           ta ? "^T" : "", ts_shape_str(&sb, s2, sizeof s2), tb ? "^T" : "");
  int want[2] = {1, 1};
  check_case(what, g, 2, x, want, y, mm_fwd, &c, 0);
  ts_graph_free(g);
}

/* ------------------------------------------------------------ dense */

typedef struct {
  int64_t M, N, K;
  int bias;
} dense_ctx;

static void dense_fwd(double *const *x, double *y, const void *vc) {
  const dense_ctx *c = vc;
  for (int64_t m = 0; m < c->M; m++)
    for (int64_t n = 0; n < c->N; n++) {
      double s = c->bias ? x[2][n] : 0;
      for (int64_t k = 0; k < c->K; k++) s += x[0][m * c->K + k] * x[1][n * c->K + k];
      y[m * c->N + n] = s;
    }
}

static void case_dense(ts_shape xs, int64_t out, int bias, int want_x) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  const int64_t in = xs.dims[xs.ndim - 1];
  dense_ctx c = {ts_shape_numel(&xs) / in, out, in, bias};
  ts_val x[3] = {ts_input(g, "x", TS_F32, xs), ts_input(g, "w", TS_F32, ts_shape2(out, in)),
                 bias ? ts_input(g, "b", TS_F32, ts_shape1(out)) : TS_NONE};
  ts_val y = ts_dense(g, x[0], x[1], bias ? x[2] : TS_NONE);
  char what[160], s1[64];
  snprintf(what, sizeof what, "dense x%s out %lld bias %d%s", ts_shape_str(&xs, s1, sizeof s1),
           (long long)out, bias, want_x ? "" : " (x no-grad)");
  int want[3] = {want_x, 1, 1};
  check_case(what, g, bias ? 3 : 2, x, want, y, dense_fwd, &c, 0);
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
#define FRESH() (ts_graph_create(&g))
  FRESH();
  ts_val a = ts_input(g, "a", TS_F32, ts_shape2(2, 3)), b = ts_input(g, "b", TS_F32, ts_shape2(4, 5));
  expect_fail(g, ts_matmul(g, a, b, 0, 0), TS_ESHAPE, "matmul", "inner dims 3 != 4");
  ts_graph_free(g);
  FRESH();
  a = ts_input(g, "a", TS_F32, ts_shape3(2, 3, 4));
  b = ts_input(g, "b", TS_F32, ts_shape3(3, 4, 5));
  expect_fail(g, ts_matmul(g, a, b, 0, 0), TS_ESHAPE, "matmul", "batch dims");
  ts_graph_free(g);
  FRESH();
  a = ts_input(g, "a", TS_F32, ts_shape1(3));
  b = ts_input(g, "b", TS_F32, ts_shape2(3, 5));
  expect_fail(g, ts_matmul(g, a, b, 0, 0), TS_ESHAPE, "matmul", "at least 2 dims");
  ts_graph_free(g);
  FRESH();
  a = ts_input(g, "a", TS_I32, ts_shape2(3, 3));
  b = ts_input(g, "b", TS_F32, ts_shape2(3, 3));
  expect_fail(g, ts_matmul(g, a, b, 0, 0), TS_EDTYPE, "matmul", "f32");
  ts_graph_free(g);
  FRESH();
  a = ts_input(g, "a", TS_F32, ts_shape2(3, 3));
  expect_fail(g, ts_matmul(g, a, a, 2, 0), TS_EINVAL, "matmul", "transpose");
  ts_graph_free(g);
  FRESH();
  expect_fail(g, ts_matmul(g, TS_NONE, TS_NONE, 0, 0), TS_EINVAL, "matmul", NULL);
  ts_graph_free(g);
  FRESH();
  ts_val x = ts_input(g, "x", TS_F32, ts_shape2(8, 6));
  ts_val w = ts_input(g, "w", TS_F32, ts_shape2(4, 5));
  expect_fail(g, ts_dense(g, x, w, TS_NONE), TS_ESHAPE, "dense", "6 != w's in-features 5");
  ts_graph_free(g);
  FRESH();
  x = ts_input(g, "x", TS_F32, ts_shape2(8, 5));
  w = ts_input(g, "w", TS_F32, ts_shape2(4, 5));
  ts_val bb = ts_input(g, "bias", TS_F32, ts_shape1(5));
  expect_fail(g, ts_dense(g, x, w, bb), TS_ESHAPE, "dense", "bias");
  ts_graph_free(g);
  FRESH();
  x = ts_input(g, "x", TS_F32, ts_shape2(8, 5));
  w = ts_input(g, "w", TS_F32, ts_shape3(1, 4, 5));
  expect_fail(g, ts_dense(g, x, w, TS_NONE), TS_ESHAPE, "dense", "2-D");
  ts_graph_free(g);
#undef FRESH
  printf("bad input: inner/batch/rank mismatch, dtype, transpose flag, TS_NONE, dense "
         "in-features/bias/weight rank -> status + message naming the op\n");
}

int main(void) {
  const int64_t b2[1] = {2}, b23[2] = {2, 3};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      case_matmul(0, NULL, 3, 5, 4, ta, tb, 1, 1);     /* 2-D */
      case_matmul(1, b2, 3, 4, 5, ta, tb, 1, 1);       /* batched */
      case_matmul(1, b2, 3, 2, 4, ta, tb, 1, 0);       /* shared b (folded when !ta) */
      case_matmul(1, b2, 2, 3, 4, ta, tb, 0, 1);       /* shared a (batched + sum_to) */
    }
  case_matmul(2, b23, 2, 3, 3, 0, 1, 1, 1);            /* 4-D equal batches */
  case_matmul(2, b23, 3, 2, 2, 0, 0, 1, 0);            /* 4-D with shared b */
  case_matmul(2, b23, 1, 1, 2, 1, 0, 0, 1);            /* 4-D with shared a, M=N=1 */
  case_matmul(0, NULL, 1, 1, 1, 0, 0, 1, 1);           /* 1x1x1 */
  printf("matmul: 20 graphs (2-D, batched, shared a/b, 4-D, every transpose) ref+fast vs FD\n");
  case_dense(ts_shape2(4, 3), 5, 1, 1);
  case_dense(ts_shape3(2, 3, 4), 5, 1, 1);
  case_dense(ts_shape1(4), 3, 0, 1);
  case_dense(ts_shape2(6, 4), 2, 0, 1);
  case_dense(ts_shape2(3, 7), 4, 1, 0);
  printf("dense: 5 graphs (2-D, 3-D, 1-D x, with/without bias, x without gradient) ref+fast vs FD\n");
  bad_inputs();
  printf("graph cases run: %d\n", ncases);
  return ts_test_finish("test_grad_matmul");
}
