/* CONV2D (and its backward ops) on bf16 and f16 through graph, autodiff and executor (both
 * backends) against the same graph in f32 on the same 16-bit representable inputs
 * (tests/lowp_harness.h). Tolerance |a-b| <= 5e-2 + 1.5e-2 |b| for bf16 (sums of up to 144 terms
 * of O(1): outputs O(5)), a tenth for f16. Also a mixed-dtype bias fails with TS_EDTYPE. */
#include "lowp_harness.h"

typedef struct {
  int s, p, g, bias;
} cv_attr;

static ts_val b_conv(ts_graph *g, const ts_val *x, const void *ctx) {
  const cv_attr *a = ctx;
  return ts_conv2d(g, x[0], x[1], a->bias ? x[2] : TS_NONE, a->s, a->s, a->p, a->p, 1, 1, a->g);
}

static void run(ts_dtype dt, int64_t N, int64_t C, int64_t H, int64_t O, int64_t K, cv_attr a) {
  lh_case c;
  memset(&c, 0, sizeof c);
  const double s = dt == TS_BF16 ? 1 : 0.1;
  c.fwd_atol = c.grad_atol = 5e-2 * s, c.fwd_rtol = c.grad_rtol = 1.5e-2 * s;
  c.nin = a.bias ? 3 : 2;
  c.shape[0] = ts_shape4(N, C, H, H);
  c.shape[1] = ts_shape4(O, C / a.g, K, K);
  c.shape[2] = ts_shape1(O);
  const int64_t OH = (H + 2 * a.p - K) / a.s + 1;
  lh_check("conv2d", dt, b_conv, &a, &c, N * O * OH * OH);
}

int main(void) {
  const ts_dtype dts[2] = {TS_BF16, TS_F16};
  for (int i = 0; i < 2; i++) {
    run(dts[i], 2, 16, 6, 16, 3, (cv_attr){1, 1, 1, 1});
    run(dts[i], 2, 4, 7, 8, 3, (cv_attr){2, 1, 1, 0});
    run(dts[i], 1, 8, 5, 8, 3, (cv_attr){1, 1, 2, 1});
  }
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_BF16, ts_shape4(1, 3, 8, 8)), w = ts_input(g, "w", TS_BF16, ts_shape4(4, 3, 3, 3));
  ts_val b = ts_input(g, "b", TS_F32, ts_shape1(4));
  CHECK(ts_conv2d(g, x, w, b, 1, 1, 1, 1, 1, 1, 1) == TS_NONE);
  EXPECT_ERR(ts_graph_status(g), TS_EDTYPE, "conv2d", "x(1,3,8,8):bf16", "b(4):f32");
  ts_graph_free(g);
  return ts_test_finish("test_lowp_conv");
}
