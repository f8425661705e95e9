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
#include "grad_harness.h"

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
  gh_check(what, g, y, 2, x,
           &(gh_opts){.fwd = mm_fwd, .ctx = &c, .tol = 1e-4, .loss_tol = 1e-4, .grad_atol = 2e-4});
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
  gh_check(what, g, y, bias ? 3 : 2, x,
           &(gh_opts){.fwd = dense_fwd, .ctx = &c, .want = want, .tol = 1e-4, .loss_tol = 1e-4,
                      .grad_atol = 2e-4});
  ts_graph_free(g);
}

/* ------------------------------------------------------------ bad input */

static void bad_inputs(void) {
  ts_graph *g;
#define FRESH() (ts_graph_create(&g))
  FRESH();
  ts_val a = ts_input(g, "a", TS_F32, ts_shape2(2, 3)), b = ts_input(g, "b", TS_F32, ts_shape2(4, 5));
  CHECK_GRAPH_ERROR(g, ts_matmul(g, a, b, 0, 0), TS_ESHAPE, "matmul", "inner dims 3 != 4", NULL);
  ts_graph_free(g);
  FRESH();
  a = ts_input(g, "a", TS_F32, ts_shape3(2, 3, 4));
  b = ts_input(g, "b", TS_F32, ts_shape3(3, 4, 5));
  CHECK_GRAPH_ERROR(g, ts_matmul(g, a, b, 0, 0), TS_ESHAPE, "matmul", "batch dims", NULL);
  ts_graph_free(g);
  FRESH();
  a = ts_input(g, "a", TS_F32, ts_shape1(3));
  b = ts_input(g, "b", TS_F32, ts_shape2(3, 5));
  CHECK_GRAPH_ERROR(g, ts_matmul(g, a, b, 0, 0), TS_ESHAPE, "matmul", "at least 2 dims", NULL);
  ts_graph_free(g);
  FRESH();
  a = ts_input(g, "a", TS_I32, ts_shape2(3, 3));
  b = ts_input(g, "b", TS_F32, ts_shape2(3, 3));
  CHECK_GRAPH_ERROR(g, ts_matmul(g, a, b, 0, 0), TS_EDTYPE, "matmul", "f32", NULL);
  ts_graph_free(g);
  FRESH();
  a = ts_input(g, "a", TS_F32, ts_shape2(3, 3));
  CHECK_GRAPH_ERROR(g, ts_matmul(g, a, a, 2, 0), TS_EINVAL, "matmul", "transpose", NULL);
  ts_graph_free(g);
  FRESH();
  CHECK_GRAPH_ERROR(g, ts_matmul(g, TS_NONE, TS_NONE, 0, 0), TS_EINVAL, "matmul", NULL, NULL);
  ts_graph_free(g);
  FRESH();
  ts_val x = ts_input(g, "x", TS_F32, ts_shape2(8, 6));
  ts_val w = ts_input(g, "w", TS_F32, ts_shape2(4, 5));
  CHECK_GRAPH_ERROR(g, ts_dense(g, x, w, TS_NONE), TS_ESHAPE, "dense", "6 != w's in-features 5",
                    NULL);
  ts_graph_free(g);
  FRESH();
  x = ts_input(g, "x", TS_F32, ts_shape2(8, 5));
  w = ts_input(g, "w", TS_F32, ts_shape2(4, 5));
  ts_val bb = ts_input(g, "bias", TS_F32, ts_shape1(5));
  CHECK_GRAPH_ERROR(g, ts_dense(g, x, w, bb), TS_ESHAPE, "dense", "bias", NULL);
  ts_graph_free(g);
  FRESH();
  x = ts_input(g, "x", TS_F32, ts_shape2(8, 5));
  w = ts_input(g, "w", TS_F32, ts_shape3(1, 4, 5));
  CHECK_GRAPH_ERROR(g, ts_dense(g, x, w, TS_NONE), TS_ESHAPE, "dense", "2-D", NULL);
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
  printf("graph cases run: %d\n", gh_cases());
  return ts_test_finish("test_grad_matmul");
}
