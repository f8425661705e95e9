/* Graph core: sticky builder errors, cross-graph values, autodiff accumulation and integer
 * values, memory planning by liveness, executor hook and binding errors. */
#include <string.h>

#include "runtime/exec.h"
#include "tessera/tessera.h"
#include "test_util.h"

static int hook_begin, hook_end, run_begin, run_end, second_calls, order_ok = 1;
static void hook(const ts_hook_info *e, void *u) {
  (void)u;
  if (e->event == TS_HOOK_NODE_BEGIN) hook_begin++;
  else if (e->event == TS_HOOK_NODE_END) hook_end++;
  else if (e->event == TS_HOOK_RUN_BEGIN) run_begin++;
  else run_end++;
  if ((e->event >= TS_HOOK_RUN_BEGIN) != (e->node < 0 && !e->op_name)) order_ok = 0;
}
/* a second listener on the same plan: called after the first for every event */
static void hook2(const ts_hook_info *e, void *u) {
  (void)e;
  second_calls++;
  if (*(int *)u + 1 != hook_begin + hook_end + run_begin + run_end) order_ok = 0;
  *(int *)u += 1;
}

static void test_errors(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val a = ts_input(g, "a", TS_F32, ts_shape2(2, 3));
  ts_val b = ts_input(g, "b", TS_F32, ts_shape2(4, 5));
  ts_val c = ts_matmul(g, a, b, 0, 0);
  CHECK(c == TS_NONE);
  CHECK(ts_graph_status(g) == TS_ESHAPE);
  const char *m = ts_graph_error(g);
  CHECK_MSG(strstr(m, "matmul") && strstr(m, "(2,3)") && strstr(m, "(4,5)"), "message: %s", m);
  /* sticky: later ops return TS_NONE and keep the first message */
  ts_val d = ts_relu(g, c);
  CHECK(d == TS_NONE);
  CHECK(strstr(ts_graph_error(g), "matmul") != NULL);
  ts_graph_free(g);

  ts_graph *g1, *g2;
  CHECK_OK(ts_graph_create(&g1));
  CHECK_OK(ts_graph_create(&g2));
  ts_val x1 = ts_input(g1, "x", TS_F32, ts_shape1(4));
  ts_val x2 = ts_input(g2, "x", TS_F32, ts_shape1(4));
  CHECK(ts_add(g2, x1, x2) == TS_NONE);
  CHECK(ts_graph_status(g2) == TS_EGRAPH);
  CHECK_MSG(strstr(ts_graph_error(g2), "another graph") != NULL, "%s", ts_graph_error(g2));
  ts_graph_free(g1);
  ts_graph_free(g2);

  CHECK_OK(ts_graph_create(&g));
  CHECK(ts_input(g, "bad", TS_F32, ts_shape2(0, 3)) == TS_NONE);
  CHECK(ts_graph_status(g) == TS_ESHAPE);
  ts_graph_free(g);
}

static void test_autodiff_and_plan(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  const int n = 1000;
  ts_val x = ts_input(g, "x", TS_F32, ts_shape1(n));
  /* y = sum(x*x + x): x used three times -> grad accumulates to 2x + 1 */
  ts_val y = ts_sum(g, ts_add(g, ts_mul(g, x, x), x), 1u, 0);
  /* a chain of temporaries that die quickly, to exercise buffer reuse */
  ts_val h = x;
  for (int i = 0; i < 8; i++) h = ts_scale(g, h, 1.0f, 0.0f);
  ts_val z = ts_sum(g, h, 1u, 0);
  ts_val loss = ts_add(g, y, ts_scale(g, z, 0.0f, 0.0f));
  CHECK_OK(ts_graph_status(g));
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  ts_val gx = ts_graph_grad(g, x);
  CHECK(gx != TS_NONE);
  ts_plan *p;
  ts_val keep[] = {loss, gx};
  CHECK_OK(ts_plan_create(g, keep, 2, &p));
  int seen = 0;
  CHECK_OK(ts_plan_add_hook(p, hook, NULL));
  CHECK_OK(ts_plan_add_hook(p, hook2, &seen));
  CHECK_OK(ts_plan_add_hook(p, hook, NULL)); /* the same pair again: one entry */
  CHECK(ts_plan_add_hook(p, NULL, NULL) == TS_EINVAL);
  CHECK(ts_plan_run(p, 0) == TS_EINVAL); /* x not bound */
  CHECK_MSG(strstr(ts_last_error(), "input") && strstr(ts_last_error(), "x"), "%s", ts_last_error());
  float xs[1000];
  ts_test_fill(xs, n, 3, -1, 1);
  CHECK_OK(ts_plan_bind(p, x, xs));
  CHECK_OK(ts_plan_run(p, 0));
  CHECK(hook_begin == ts_plan_num_live_nodes(p) && hook_end == hook_begin);
  int nlive = 0; /* node by node, as the ZeRO-3 gather schedule reads it */
  for (int i = 0; i < ts_graph_num_nodes(g); i++) nlive += ts_plan_node_live(p, i) == 1;
  CHECK(nlive == ts_plan_num_live_nodes(p));
  CHECK(ts_plan_node_live(p, -1) == 0 && ts_plan_node_live(p, ts_graph_num_nodes(g)) == 0);
  CHECK(run_begin == 1 && run_end == 1 && order_ok);
  CHECK(second_calls == hook_begin + hook_end + 2);
  ts_plan_remove_hook(p, hook2, &seen);
  CHECK_OK(ts_plan_run(p, 1));
  CHECK(second_calls == 2 * ts_plan_num_live_nodes(p) + 2 && run_begin == 2 && order_ok);
  const float *gd = ts_plan_data(p, gx);
  double expect_loss = 0;
  float ref[1000];
  for (int i = 0; i < n; i++) {
    ref[i] = 2 * xs[i] + 1;
    expect_loss += (double)xs[i] * xs[i] + xs[i];
  }
  CHECK_CLOSE(gd, ref, (size_t)n, 1e-6, 1e-6, "d/dx sum(x*x+x)");
  float l = *(float *)ts_plan_data(p, loss);
  CHECK_MSG(fabs(l - expect_loss) < 1e-3, "loss %g expected %g", l, expect_loss);
  size_t peak = ts_plan_peak_bytes(p), naive = ts_plan_naive_bytes(p);
  CHECK_MSG(peak < naive / 2, "planned peak %zu should be well under naive %zu", peak, naive);
  printf("memory plan: peak %zu bytes vs %zu without reuse (%d nodes)\n", peak, naive,
         ts_graph_num_nodes(g));
  ts_plan_free(p);
  ts_graph_free(g);
}

static void test_integer_no_grad(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val w = ts_input(g, "w", TS_F32, ts_shape2(10, 4));
  ts_val ids = ts_input(g, "ids", TS_I32, ts_shape1(3));
  ts_val e = ts_embedding(g, w, ids);
  ts_val loss = ts_sum(g, e, 3u, 0);
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  CHECK(ts_graph_grad(g, ids) == TS_NONE);
  CHECK(ts_graph_grad(g, w) != TS_NONE);
  ts_graph_free(g);
}

int main(void) {
  test_errors();
  test_autodiff_and_plan();
  test_integer_no_grad();
  printf("checked: sticky errors naming op and shapes, cross-graph values, gradient accumulation, "
         "integer values without gradient, liveness memory plan, node hook, unbound input\n");
  return ts_test_finish("test_graph_core");
}
