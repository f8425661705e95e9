/* Gradients of the shape and misc families through the graph, autodiff and executor, on both
 * backends, against central finite differences of double-precision forwards written here:
 * reshape (with -1), flatten, permute, transpose, concat (one input without gradient), split
 * (unused outputs get zero gradients), slice, copy, const, chains of them; casts through bf16
 * (gradient cast back exactly). Bad input (reshape sizes, non-permutations, concat mismatches,
 * slices out of range, split sizes, axes) gives a status and a message naming the op.
 * Tolerance: 1e-5 abs + rel (these ops only move values). */
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

/* ------------------------------------------------------------ double forwards */

typedef struct {
  int nd;
  int64_t dims[8];
  int perm[8];
} perm_ctx;

static void d_permute(const double *x, double *y, int nd, const int64_t *dims, const int *perm) {
  int64_t istr[8], odims[8], numel = 1;
  for (int d = nd - 1; d >= 0; d--) {
    istr[d] = numel;
    numel *= dims[d];
  }
  for (int k = 0; k < nd; k++) odims[k] = dims[perm[k]];
  for (int64_t o = 0; o < numel; o++) {
    int64_t rem = o, off = 0;
    for (int k = nd - 1; k >= 0; k--) {
      off += (rem % odims[k]) * istr[perm[k]];
      rem /= odims[k];
    }
    y[o] = x[off];
  }
}

static void fwd_permute(double *const *x, double *y, const void *c) {
  const perm_ctx *p = c;
  d_permute(x[0], y, p->nd, p->dims, p->perm);
}

static void fwd_identity(double *const *x, double *y, const void *c) {
  memcpy(y, x[0], sizeof(double) * (size_t)*(const int64_t *)c);
}

typedef struct {
  int n;
  int64_t outer, inner, lens[6];
  float fill[6]; /* value of inputs marked as constants (NaN: a real input) */
} cat_ctx;

static void fwd_concat(double *const *x, double *y, const void *c) {
  const cat_ctx *p = c;
  int64_t tot = 0;
  for (int k = 0; k < p->n; k++) tot += p->lens[k];
  int xi = 0;
  for (int64_t o = 0, off; o < p->outer; o++) {
    off = 0;
    xi = 0;
    for (int k = 0; k < p->n; k++) {
      int64_t m = p->lens[k] * p->inner;
      for (int64_t t = 0; t < m; t++)
        y[(o * tot + off) * p->inner + t] = isnan(p->fill[k]) ? x[xi][o * m + t] : p->fill[k];
      if (isnan(p->fill[k])) xi++;
      off += p->lens[k];
    }
  }
}

typedef struct {
  int64_t outer, len, inner;
  int nparts;
  int64_t a[4], b[4]; /* y = concat over parts of x[:, a:b, :] */
} slice_ctx;

static void fwd_slices(double *const *x, double *y, const void *c) {
  const slice_ctx *p = c;
  int64_t tot = 0;
  for (int k = 0; k < p->nparts; k++) tot += p->b[k] - p->a[k];
  for (int64_t o = 0; o < p->outer; o++) {
    int64_t off = 0;
    for (int k = 0; k < p->nparts; k++) {
      int64_t m = (p->b[k] - p->a[k]) * p->inner;
      memcpy(y + (o * tot + off) * p->inner, x[0] + (o * p->len + p->a[k]) * p->inner,
             sizeof(double) * (size_t)m);
      off += p->b[k] - p->a[k];
    }
  }
}

/* reshape (2,3,4,5)->(6,20)->permute(1,0)->slice rows [3,17) of (20,6) */
static void fwd_chain(double *const *x, double *y, const void *c) {
  (void)c;
  double t[120];
  int64_t dims[2] = {6, 20};
  int perm[2] = {1, 0};
  d_permute(x[0], t, 2, dims, perm);
  memcpy(y, t + 3 * 6, sizeof(double) * 14 * 6);
}

/* ------------------------------------------------------------ cases */

static void case_reshape(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_F32, ts_shape3(2, 3, 4));
  ts_val y = ts_reshape(g, x, ts_shape2(4, -1));
  ts_shape ysh = ts_val_shape(g, y);
  CHECK(ysh.ndim == 2 && ysh.dims[0] == 4 && ysh.dims[1] == 6);
  int64_t n = 24;
  int want[1] = {1};
  check_case("reshape (2,3,4)->(4,-1)", g, 1, &x, want, NULL, y, fwd_identity, &n, 1e-3, 1e-5);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape4(2, 3, 2, 2));
  y = ts_flatten(g, x, 1);
  ts_shape s = ts_val_shape(g, y);
  CHECK(s.ndim == 2 && s.dims[0] == 2 && s.dims[1] == 12);
  check_case("flatten (2,3,2,2) from 1", g, 1, &x, want, NULL, y, fwd_identity, &n, 1e-3, 1e-5);
  ts_graph_free(g);
}

static void case_permute(int nd, const int64_t *dims, const int *perm, int use_transpose) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  perm_ctx c;
  c.nd = nd;
  for (int d = 0; d < nd; d++) c.dims[d] = dims[d], c.perm[d] = perm[d];
  ts_val x = ts_input(g, "x", TS_F32, ts_shape_make(nd, dims));
  ts_val y;
  if (use_transpose) {
    int d0 = -1, d1 = -1;
    for (int d = 0; d < nd; d++)
      if (perm[d] != d) {
        if (d0 < 0) d0 = d; else d1 = d;
      }
    y = ts_transpose(g, x, d0, d1 - nd); /* negative dim counts from the end */
  } else {
    y = ts_permute(g, x, perm);
  }
  char what[128], s[64];
  ts_shape xs = ts_shape_make(nd, dims);
  snprintf(what, sizeof what, "%s x%s perm (%d,%d,%d,%d)", use_transpose ? "transpose" : "permute",
           ts_shape_str(&xs, s, sizeof s), perm[0], nd > 1 ? perm[1] : -1, nd > 2 ? perm[2] : -1,
           nd > 3 ? perm[3] : -1);
  int want[1] = {1};
  check_case(what, g, 1, &x, want, NULL, y, fwd_permute, &c, 1e-3, 1e-5);
  ts_graph_free(g);
}

static void case_concat(int axis, int with_const, int second_no_grad) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  /* three parts (2,L,3) with L = 1,3,2 along axis 1 (or the same along `axis` otherwise) */
  int64_t L[3] = {1, 3, 2};
  ts_val xs[3], in[3];
  int want[3];
  cat_ctx c;
  memset(&c, 0, sizeof c);
  c.n = 3;
  int nin = 0;
  for (int k = 0; k < 3; k++) {
    ts_shape s = ts_shape3(2, 4, 3);
    s.dims[axis] = L[k];
    c.lens[k] = L[k];
    c.fill[k] = NAN;
    if (with_const && k == 1) {
      xs[k] = ts_const(g, TS_F32, s, 2.5f);
      c.fill[k] = 2.5f;
      continue;
    }
    char nm[8];
    snprintf(nm, sizeof nm, "x%d", k);
    xs[k] = in[nin] = ts_input(g, nm, TS_F32, s);
    want[nin] = !(second_no_grad && k == 1);
    nin++;
  }
  c.outer = 1;
  c.inner = 1;
  ts_shape s0 = ts_shape3(2, 4, 3);
  for (int d = 0; d < axis; d++) c.outer *= s0.dims[d];
  for (int d = axis + 1; d < 3; d++) c.inner *= s0.dims[d];
  ts_val y = ts_concat(g, xs, 3, axis - 3); /* negative axis */
  char what[96];
  snprintf(what, sizeof what, "concat 3 inputs axis %d%s%s", axis, with_const ? " (one const)" : "",
           second_no_grad ? " (one without gradient)" : "");
  check_case(what, g, nin, in, want, NULL, y, fwd_concat, &c, 1e-3, 1e-5);
  ts_graph_free(g);
}

static void case_split(int mode) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_F32, ts_shape3(3, 7, 2));
  int64_t sizes[3] = {2, 4, 1};
  ts_val parts[3];
  CHECK_OK(ts_split(g, x, 1, sizes, 3, parts));
  slice_ctx c = {3, 7, 2, 0, {0}, {0}};
  ts_val y;
  if (mode == 0) { /* only the middle part is used: the others get zero gradients */
    y = parts[1];
    c.nparts = 1;
    c.a[0] = 2; c.b[0] = 6;
  } else { /* parts 2 and 0, swapped */
    ts_val two[2] = {parts[2], parts[0]};
    y = ts_concat(g, two, 2, 1);
    c.nparts = 2;
    c.a[0] = 6; c.b[0] = 7;
    c.a[1] = 0; c.b[1] = 2;
  }
  int want[1] = {1};
  check_case(mode ? "split (3,7,2) -> concat(part2, part0)" : "split (3,7,2) -> middle part only",
             g, 1, &x, want, NULL, y, fwd_slices, &c, 1e-3, 1e-5);
  ts_graph_free(g);
}

static void case_slice(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_F32, ts_shape3(3, 5, 2));
  ts_val y = ts_slice(g, x, -2, 1, 4);
  slice_ctx c = {3, 5, 2, 1, {1}, {4}};
  int want[1] = {1};
  check_case("slice (3,5,2) axis -2 [1,4)", g, 1, &x, want, NULL, y, fwd_slices, &c, 1e-3, 1e-5);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape2(4, 6));
  y = ts_slice(g, x, 0, 3, 4);
  slice_ctx c2 = {1, 4, 6, 1, {3}, {4}};
  check_case("slice (4,6) axis 0 [3,4)", g, 1, &x, want, NULL, y, fwd_slices, &c2, 1e-3, 1e-5);
  ts_graph_free(g);
}

static void case_copy_chain(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_F32, ts_shape2(3, 4));
  ts_val y = ts_copy(g, x);
  int64_t n = 12;
  int want[1] = {1};
  check_case("copy (3,4)", g, 1, &x, want, NULL, y, fwd_identity, &n, 1e-3, 1e-5);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape4(2, 3, 4, 5));
  y = ts_reshape(g, x, ts_shape2(6, 20));
  y = ts_transpose(g, y, 0, 1);
  y = ts_slice(g, y, 0, 3, 17);
  check_case("chain reshape->transpose->slice", g, 1, &x, want, NULL, y, fwd_chain, NULL, 1e-3, 1e-5);
  ts_graph_free(g);
}

/* f32 -> bf16 -> f32: the gradient is r cast to bf16 and back, exactly. */
static void case_cast(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  const int n = 37;
  ts_val x = ts_input(g, "x", TS_F32, ts_shape1(n));
  ts_val h = ts_cast(g, x, TS_BF16);
  CHECK(ts_val_dtype(g, h) == TS_BF16);
  CHECK(ts_cast(g, x, TS_F32) == x); /* same dtype: no node */
  ts_val y = ts_cast(g, h, TS_F32);
  ts_val r = ts_input(g, "r", TS_F32, ts_shape2(1, n));
  ts_val_set_requires_grad(g, r, 0);
  ts_val loss = ts_dense(g, ts_reshape(g, y, ts_shape2(1, n)), r, TS_NONE);
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  ts_val gx = ts_graph_grad(g, x);
  CHECK(gx != TS_NONE);
  float xv[37], rv[37];
  ts_test_fill(xv, n, 5, -3, 3);
  ts_test_fill(rv, n, 6, -3, 3);
  for (int be = 0; be < 2; be++) {
    ts_backend_set(be ? TS_BACKEND_FAST : TS_BACKEND_REF);
    ts_val keep[2] = {y, gx};
    ts_plan *p = NULL;
    CHECK_OK(ts_plan_create(g, keep, 2, &p));
    if (!p) continue;
    CHECK_OK(ts_plan_bind(p, x, xv));
    CHECK_OK(ts_plan_bind(p, r, rv));
    CHECK_OK(ts_plan_run(p, 0));
    const float *yv = ts_plan_data(p, y), *gv = ts_plan_data(p, gx);
    int ok = yv && gv;
    for (int i = 0; ok && i < n; i++) {
      ok &= yv[i] == ts_bf16_to_f32(ts_f32_to_bf16(xv[i]));
      ok &= gv[i] == ts_bf16_to_f32(ts_f32_to_bf16(rv[i]));
    }
    CHECK_MSG(ok, "cast f32->bf16->f32 values/gradients [%s]", be ? "fast" : "ref");
    ts_plan_free(p);
  }
  ts_backend_set(TS_BACKEND_FAST);
  ts_graph_free(g);
  printf("cast f32->bf16->f32: forward rounds, gradient is r rounded through bf16 (exact)\n");
}

/* ------------------------------------------------------------ bad input */

static void bad_inputs(void) {
  ts_graph *g;
  ts_val x, a, b;
  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape2(2, 3));
  expect_fail(g, ts_reshape(g, x, ts_shape2(4, 2)), TS_ESHAPE, "reshape", "(2,3)");
  CHECK(ts_permute(g, x, (int[]){1, 0}) == TS_NONE); /* sticky */
  CHECK(strstr(ts_graph_error(g), "reshape") != NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape2(2, 3));
  expect_fail(g, ts_reshape(g, x, ts_shape2(-1, -1)), TS_ESHAPE, "reshape", "at most one -1");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape3(2, 3, 5));
  expect_fail(g, ts_reshape(g, x, ts_shape2(4, -1)), TS_ESHAPE, "reshape", "30 elements");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape3(2, 3, 4));
  expect_fail(g, ts_permute(g, x, (int[]){0, 0, 1}), TS_ESHAPE, "permute", "not a permutation");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape3(2, 3, 4));
  expect_fail(g, ts_permute(g, x, (int[]){0, 1, 5}), TS_ESHAPE, "permute", "(2,3,4)");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape3(2, 3, 4));
  expect_fail(g, ts_transpose(g, x, 0, 3), TS_ESHAPE, "transpose", "axis 3");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  a = ts_input(g, "a", TS_F32, ts_shape2(2, 3));
  b = ts_input(g, "b", TS_F32, ts_shape2(3, 3));
  expect_fail(g, ts_concat(g, (ts_val[]){a, b}, 2, 1), TS_ESHAPE, "concat", "(3,3)");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  a = ts_input(g, "a", TS_F32, ts_shape2(2, 3));
  b = ts_input(g, "b", TS_BF16, ts_shape2(2, 3));
  expect_fail(g, ts_concat(g, (ts_val[]){a, b}, 2, 0), TS_EDTYPE, "concat", "dtype");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  a = ts_input(g, "a", TS_F32, ts_shape2(2, 3));
  b = ts_input(g, "b", TS_F32, ts_shape3(2, 3, 1));
  expect_fail(g, ts_concat(g, (ts_val[]){a, b}, 2, 0), TS_ESHAPE, "concat", "(2,3,1)");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  a = ts_input(g, "a", TS_F32, ts_shape2(2, 3));
  expect_fail(g, ts_concat(g, (ts_val[]){a, a}, 2, 2), TS_ESHAPE, "concat", "axis 2");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape2(4, 6));
  expect_fail(g, ts_slice(g, x, 1, 2, 9), TS_ESHAPE, "slice", "[2,9)");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape2(4, 6));
  expect_fail(g, ts_slice(g, x, 1, 3, 3), TS_ESHAPE, "slice", "empty");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape2(4, 6));
  expect_fail(g, ts_slice(g, x, -3, 0, 1), TS_ESHAPE, "slice", "axis -3");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape2(4, 6));
  ts_val outs[2];
  CHECK(ts_split(g, x, 1, (int64_t[]){2, 3}, 2, outs) == TS_ESHAPE);
  CHECK(outs[0] == TS_NONE && outs[1] == TS_NONE);
  CHECK_MSG(strstr(ts_graph_error(g), "split") && strstr(ts_graph_error(g), "sum to 5"), "%s", ts_graph_error(g));
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  expect_fail(g, ts_const(g, TS_F32, ts_shape2(3, 0), 1.0f), TS_ESHAPE, "const", "positive");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape2(4, 6));
  expect_fail(g, ts_cast(g, x, (ts_dtype)99), TS_EDTYPE, "cast", "x(4,6)");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  expect_fail(g, ts_reshape(g, TS_NONE, ts_shape1(3)), TS_EINVAL, "reshape", NULL);
  ts_graph_free(g);
  printf("bad input: reshape sizes / two -1, non-permutations, transpose dim, concat shape/dtype/"
         "rank/axis, slice range/empty/axis, split sizes, const shape, cast dtype, TS_NONE\n");
}

int main(void) {
  case_reshape();
  case_permute(2, (int64_t[]){3, 5}, (int[]){1, 0}, 0);
  case_permute(3, (int64_t[]){2, 3, 4}, (int[]){2, 0, 1}, 0);
  case_permute(4, (int64_t[]){2, 3, 4, 5}, (int[]){0, 2, 1, 3}, 0);
  case_permute(4, (int64_t[]){2, 3, 4, 5}, (int[]){3, 1, 0, 2}, 0);
  case_permute(4, (int64_t[]){2, 3, 4, 5}, (int[]){0, 3, 2, 1}, 1);
  case_concat(1, 0, 0);
  case_concat(0, 0, 1);
  case_concat(2, 1, 0);
  case_split(0);
  case_split(1);
  case_slice();
  case_copy_chain();
  printf("reshape/flatten/permute/transpose/concat/split/slice/copy/const/chain: %d graphs, "
         "ref+fast vs FD\n", ncases);
  case_cast();
  bad_inputs();
  return ts_test_finish("test_grad_shape");
}
