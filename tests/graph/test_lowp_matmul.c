/* MATMUL and DENSE on bf16 and f16 through graph, autodiff and executor (both backends),
 * against the same graph in f32 on the same (16-bit representable) inputs (tests/lowp_harness.h).
 * Tolerance: |a-b| <= 3e-2 + 1.5e-2 |b| for bf16 (K <= 64: outputs O(3); 16-bit rounding of the
 * output, and of dy = r for the gradients, is 2^-9 relative), a tenth for f16. Also: mixed
 * dtypes fail with TS_EDTYPE naming the op and both values. */
#include "lowp_harness.h"
#include "grad_harness.h"

typedef struct {
  int ta, tb;
} mm_attr;

static ts_val b_matmul(ts_graph *g, const ts_val *x, const void *ctx) {
  const mm_attr *a = ctx;
  return ts_matmul(g, x[0], x[1], a->ta, a->tb);
}
static ts_val b_dense(ts_graph *g, const ts_val *x, const void *ctx) {
  return ts_dense(g, x[0], x[1], ctx ? x[2] : TS_NONE);
}

static lh_case tolc(ts_dtype dt, int nin) {
  lh_case c;
  memset(&c, 0, sizeof c);
  c.nin = nin;
  const double s = dt == TS_BF16 ? 1 : 0.1;
  c.fwd_atol = 3e-2 * s, c.fwd_rtol = 1.5e-2 * s, c.grad_atol = 3e-2 * s, c.grad_rtol = 1.5e-2 * s;
  return c;
}

int main(void) {
  const ts_dtype dts[2] = {TS_BF16, TS_F16};
  for (int i = 0; i < 2; i++) {
    const ts_dtype dt = dts[i];
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        mm_attr at = {ta, tb};
        lh_case c = tolc(dt, 2);
        c.shape[0] = ta ? ts_shape2(64, 12) : ts_shape2(12, 64);
        c.shape[1] = tb ? ts_shape2(20, 64) : ts_shape2(64, 20);
        lh_check("matmul 2-D", dt, b_matmul, &at, &c, 12 * 20);
        c.shape[0] = ta ? ts_shape3(3, 32, 6) : ts_shape3(3, 6, 32);
        c.shape[1] = tb ? ts_shape3(3, 10, 32) : ts_shape3(3, 32, 10);
        lh_check("matmul batched", dt, b_matmul, &at, &c, 3 * 6 * 10);
        c.shape[1] = tb ? ts_shape2(10, 32) : ts_shape2(32, 10);
        lh_check("matmul shared b", dt, b_matmul, &at, &c, 3 * 6 * 10);
      }
    lh_case c = tolc(dt, 3);
    c.shape[0] = ts_shape3(2, 5, 48), c.shape[1] = ts_shape2(24, 48), c.shape[2] = ts_shape1(24);
    lh_check("dense bias", dt, b_dense, "bias", &c, 2 * 5 * 24);
    c.nin = 2;
    lh_check("dense", dt, b_dense, NULL, &c, 2 * 5 * 24);
  }
  /* mixed dtypes: a clear TS_EDTYPE naming the op and both values */
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_BF16, ts_shape2(4, 8)), w = ts_input(g, "w", TS_F32, ts_shape2(3, 8));
  ts_val y = ts_dense(g, x, w, TS_NONE);
  CHECK(y == TS_NONE);
  EXPECT_ERR(ts_graph_status(g), TS_EDTYPE, "dense", "x(4,8):bf16", "w(3,8):f32", "ts_cast");
  ts_graph_free(g);
  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "a", TS_F16, ts_shape2(4, 8)), w = ts_input(g, "b", TS_BF16, ts_shape2(8, 3));
  CHECK(ts_matmul(g, x, w, 0, 0) == TS_NONE);
  EXPECT_ERR(ts_graph_status(g), TS_EDTYPE, "matmul", "a(4,8):f16", "b(8,3):bf16");
  ts_graph_free(g);
  return ts_test_finish("test_lowp_matmul");
}
