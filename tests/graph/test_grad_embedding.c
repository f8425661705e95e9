/* Gradients of EMBEDDING through the graph, autodiff and executor, on both backends, against
 * central finite differences of a double-precision gather: i32 and i64 ids with repeated rows
 * (scatter-add), ids of several shapes, one table used by two lookups (gradients summed), ids
 * never get a gradient. Bad input: float ids, a table that is not 2-D, ids out of range at run
 * time (a status naming the op and the id, not a crash). Tolerance 1e-5. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/tessera.h"
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
  int64_t D, nlook; /* rows looked up per ids input */
  int nids;         /* number of ids inputs (x[1..nids]) sharing table x[0] */
  int64_t nper[2];
} emb_ctx;

static void fwd_embedding(double *const *x, double *y, const void *vc) {
  const emb_ctx *c = vc;
  int64_t off = 0;
  for (int k = 0; k < c->nids; k++)
    for (int64_t n = 0; n < c->nper[k]; n++, off++)
      for (int64_t d = 0; d < c->D; d++) y[off * c->D + d] = x[0][(int64_t)x[1 + k][n] * c->D + d];
}

static void case_embedding(ts_dtype idt, ts_shape ids_shape, const int64_t *ids, int64_t V, int64_t D) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x[2];
  x[0] = ts_param_value(g, "table", TS_F32, ts_shape2(V, D), 0);
  x[1] = ts_input(g, "ids", idt, ids_shape);
  ts_val y = ts_embedding(g, x[0], x[1]);
  ts_shape ys = ts_val_shape(g, y);
  CHECK(ys.ndim == ids_shape.ndim + 1 && ys.dims[ys.ndim - 1] == D);
  int64_t n = ts_shape_numel(&ids_shape);
  int32_t i32[64];
  for (int64_t i = 0; i < n; i++) i32[i] = (int32_t)ids[i];
  const void *fixed[2] = {NULL, idt == TS_I32 ? (const void *)i32 : (const void *)ids};
  emb_ctx c = {D, n, 1, {n, 0}};
  int want[2] = {1, 0};
  char what[128], s[64];
  snprintf(what, sizeof what, "embedding table (%lld,%lld) ids %s %s", (long long)V, (long long)D,
           ts_shape_str(&ids_shape, s, sizeof s), ts_dtype_name(idt));
  check_case(what, g, 2, x, want, fixed, y, fwd_embedding, &c, 1e-3, 1e-5);
  ts_graph_free(g);
}

/* two lookups into one table, concatenated: the table gradient is the sum of both scatters */
static void case_shared_table(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x[3];
  x[0] = ts_param_value(g, "table", TS_F32, ts_shape2(6, 3), 0);
  x[1] = ts_input(g, "ids1", TS_I64, ts_shape1(4));
  x[2] = ts_input(g, "ids2", TS_I64, ts_shape1(3));
  ts_val e[2] = {ts_embedding(g, x[0], x[1]), ts_embedding(g, x[0], x[2])};
  ts_val y = ts_concat(g, e, 2, 0);
  int64_t a[4] = {5, 1, 5, 0}, b[3] = {1, 1, 4};
  const void *fixed[3] = {NULL, a, b};
  emb_ctx c = {3, 0, 2, {4, 3}};
  int want[3] = {1, 0, 0};
  check_case("embedding: one table, two lookups (gradients summed)", g, 3, x, want, fixed, y,
             fwd_embedding, &c, 1e-3, 1e-5);
  ts_graph_free(g);
}

static void bad_inputs(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val t = ts_input(g, "table", TS_F32, ts_shape2(10, 4));
  ts_val fid = ts_input(g, "ids", TS_F32, ts_shape1(3));
  expect_fail(g, ts_embedding(g, t, fid), TS_EDTYPE, "embedding", "i32 or i64");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  t = ts_input(g, "table", TS_F32, ts_shape1(10));
  ts_val ids = ts_input(g, "ids", TS_I32, ts_shape1(3));
  expect_fail(g, ts_embedding(g, t, ids), TS_ESHAPE, "embedding", "2-D");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  t = ts_input(g, "table", TS_I32, ts_shape2(10, 4));
  ids = ts_input(g, "ids", TS_I32, ts_shape1(3));
  expect_fail(g, ts_embedding(g, t, ids), TS_ESHAPE, "embedding", "float");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  t = ts_input(g, "table", TS_F32, ts_shape2(10, 4));
  int64_t d8[8] = {1, 1, 1, 1, 1, 1, 1, 2};
  ids = ts_input(g, "ids", TS_I32, ts_shape_make(8, d8));
  expect_fail(g, ts_embedding(g, t, ids), TS_ESHAPE, "embedding", "more than 7 dims");
  ts_graph_free(g);

  /* out-of-range ids are found when the kernel runs */
  CHECK_OK(ts_graph_create(&g));
  t = ts_input(g, "table", TS_F32, ts_shape2(10, 4));
  ids = ts_input(g, "ids", TS_I32, ts_shape1(3));
  ts_val y = ts_embedding(g, t, ids);
  ts_plan *p = NULL;
  CHECK_OK(ts_plan_create(g, &y, 1, &p));
  if (p) {
    float tab[40] = {0};
    int32_t bad[3] = {1, 10, 2};
    CHECK_OK(ts_plan_bind(p, t, tab));
    CHECK_OK(ts_plan_bind(p, ids, bad));
    CHECK(ts_plan_run(p, 0) == TS_ERANGE);
    CHECK_MSG(strstr(ts_last_error(), "embedding") && strstr(ts_last_error(), "id 10"), "%s", ts_last_error());
    bad[1] = -3;
    CHECK(ts_plan_run(p, 0) == TS_ERANGE);
    bad[1] = 9;
    CHECK_OK(ts_plan_run(p, 0));
    ts_plan_free(p);
  }
  ts_graph_free(g);
  printf("bad input: float ids, 1-D table, integer table, 8-D ids, ids out of range at run time\n");
}

int main(void) {
  int64_t ids6[6] = {3, 0, 3, 10, 3, 7};
  case_embedding(TS_I32, ts_shape2(2, 3), ids6, 11, 5);
  case_embedding(TS_I64, ts_shape2(2, 3), ids6, 11, 5);
  int64_t ids5[5] = {6, 6, 6, 0, 1};
  case_embedding(TS_I64, ts_shape1(5), ids5, 7, 4);
  int64_t ids1[1] = {2};
  case_embedding(TS_I32, ts_shape_make(0, NULL), ids1, 3, 17); /* scalar id -> (D) */
  int64_t ids24[24];
  for (int i = 0; i < 24; i++) ids24[i] = (i * 7) % 9;
  case_embedding(TS_I32, ts_shape3(2, 3, 4), ids24, 9, 40);
  case_shared_table();
  printf("embedding: %d graphs (i32/i64, 0-3 dim ids, repeats, shared table) ref+fast vs FD\n", ncases);
  bad_inputs();
  return ts_test_finish("test_grad_embedding");
}
