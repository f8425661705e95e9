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
#include "grad_harness.h"

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
  gh_check("reshape (2,3,4)->(4,-1)", g, y, 1, &x,
           &(gh_opts){.fwd = fwd_identity, .ctx = &n, .tol = 1e-5});
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape4(2, 3, 2, 2));
  y = ts_flatten(g, x, 1);
  ts_shape s = ts_val_shape(g, y);
  CHECK(s.ndim == 2 && s.dims[0] == 2 && s.dims[1] == 12);
  gh_check("flatten (2,3,2,2) from 1", g, y, 1, &x,
           &(gh_opts){.fwd = fwd_identity, .ctx = &n, .tol = 1e-5});
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
  gh_check(what, g, y, 1, &x, &(gh_opts){.fwd = fwd_permute, .ctx = &c, .tol = 1e-5});
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
  gh_check(what, g, y, nin, in,
           &(gh_opts){.fwd = fwd_concat, .ctx = &c, .want = want, .tol = 1e-5});
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
  gh_check(mode ? "split (3,7,2) -> concat(part2, part0)" : "split (3,7,2) -> middle part only", g,
           y, 1, &x, &(gh_opts){.fwd = fwd_slices, .ctx = &c, .tol = 1e-5});
  ts_graph_free(g);
}

static void case_slice(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_F32, ts_shape3(3, 5, 2));
  ts_val y = ts_slice(g, x, -2, 1, 4);
  slice_ctx c = {3, 5, 2, 1, {1}, {4}};
  gh_check("slice (3,5,2) axis -2 [1,4)", g, y, 1, &x,
           &(gh_opts){.fwd = fwd_slices, .ctx = &c, .tol = 1e-5});
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape2(4, 6));
  y = ts_slice(g, x, 0, 3, 4);
  slice_ctx c2 = {1, 4, 6, 1, {3}, {4}};
  gh_check("slice (4,6) axis 0 [3,4)", g, y, 1, &x,
           &(gh_opts){.fwd = fwd_slices, .ctx = &c2, .tol = 1e-5});
  ts_graph_free(g);
}

static void case_copy_chain(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_F32, ts_shape2(3, 4));
  ts_val y = ts_copy(g, x);
  int64_t n = 12;
  gh_check("copy (3,4)", g, y, 1, &x, &(gh_opts){.fwd = fwd_identity, .ctx = &n, .tol = 1e-5});
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape4(2, 3, 4, 5));
  y = ts_reshape(g, x, ts_shape2(6, 20));
  y = ts_transpose(g, y, 0, 1);
  y = ts_slice(g, y, 0, 3, 17);
  gh_check("chain reshape->transpose->slice", g, y, 1, &x,
           &(gh_opts){.fwd = fwd_chain, .tol = 1e-5});
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
  ts_val r, loss = gh_weighted_loss(g, y, &r);
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
  CHECK_GRAPH_ERROR(g, ts_reshape(g, x, ts_shape2(4, 2)), TS_ESHAPE, "reshape", "(2,3)", NULL);
  CHECK(ts_permute(g, x, (int[]){1, 0}) == TS_NONE); /* sticky */
  CHECK(strstr(ts_graph_error(g), "reshape") != NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape2(2, 3));
  CHECK_GRAPH_ERROR(g, ts_reshape(g, x, ts_shape2(-1, -1)), TS_ESHAPE, "reshape", "at most one -1",
                    NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape3(2, 3, 5));
  CHECK_GRAPH_ERROR(g, ts_reshape(g, x, ts_shape2(4, -1)), TS_ESHAPE, "reshape", "30 elements",
                    NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape3(2, 3, 4));
  CHECK_GRAPH_ERROR(g, ts_permute(g, x, (int[]){0, 0, 1}), TS_ESHAPE, "permute",
                    "not a permutation", NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape3(2, 3, 4));
  CHECK_GRAPH_ERROR(g, ts_permute(g, x, (int[]){0, 1, 5}), TS_ESHAPE, "permute", "(2,3,4)", NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape3(2, 3, 4));
  CHECK_GRAPH_ERROR(g, ts_transpose(g, x, 0, 3), TS_ESHAPE, "transpose", "axis 3", NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  a = ts_input(g, "a", TS_F32, ts_shape2(2, 3));
  b = ts_input(g, "b", TS_F32, ts_shape2(3, 3));
  CHECK_GRAPH_ERROR(g, ts_concat(g, (ts_val[]){a, b}, 2, 1), TS_ESHAPE, "concat", "(3,3)", NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  a = ts_input(g, "a", TS_F32, ts_shape2(2, 3));
  b = ts_input(g, "b", TS_BF16, ts_shape2(2, 3));
  CHECK_GRAPH_ERROR(g, ts_concat(g, (ts_val[]){a, b}, 2, 0), TS_EDTYPE, "concat", "dtype", NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  a = ts_input(g, "a", TS_F32, ts_shape2(2, 3));
  b = ts_input(g, "b", TS_F32, ts_shape3(2, 3, 1));
  CHECK_GRAPH_ERROR(g, ts_concat(g, (ts_val[]){a, b}, 2, 0), TS_ESHAPE, "concat", "(2,3,1)", NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  a = ts_input(g, "a", TS_F32, ts_shape2(2, 3));
  CHECK_GRAPH_ERROR(g, ts_concat(g, (ts_val[]){a, a}, 2, 2), TS_ESHAPE, "concat", "axis 2", NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape2(4, 6));
  CHECK_GRAPH_ERROR(g, ts_slice(g, x, 1, 2, 9), TS_ESHAPE, "slice", "[2,9)", NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape2(4, 6));
  CHECK_GRAPH_ERROR(g, ts_slice(g, x, 1, 3, 3), TS_ESHAPE, "slice", "empty", NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape2(4, 6));
  CHECK_GRAPH_ERROR(g, ts_slice(g, x, -3, 0, 1), TS_ESHAPE, "slice", "axis -3", NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape2(4, 6));
  ts_val outs[2];
  CHECK(ts_split(g, x, 1, (int64_t[]){2, 3}, 2, outs) == TS_ESHAPE);
  CHECK(outs[0] == TS_NONE && outs[1] == TS_NONE);
  CHECK_MSG(strstr(ts_graph_error(g), "split") && strstr(ts_graph_error(g), "sum to 5"), "%s", ts_graph_error(g));
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  CHECK_GRAPH_ERROR(g, ts_const(g, TS_F32, ts_shape2(3, 0), 1.0f), TS_ESHAPE, "const", "positive",
                    NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape2(4, 6));
  CHECK_GRAPH_ERROR(g, ts_cast(g, x, (ts_dtype)99), TS_EDTYPE, "cast", "x(4,6)", NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  CHECK_GRAPH_ERROR(g, ts_reshape(g, TS_NONE, ts_shape1(3)), TS_EINVAL, "reshape", NULL, NULL);
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
         "ref+fast vs FD\n", gh_cases());
  case_cast();
  bad_inputs();
  return ts_test_finish("test_grad_shape");
}
