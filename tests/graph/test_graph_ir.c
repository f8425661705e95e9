/* The public IR read API (graph/graph_ir.h): generated attribute accessors round-trip, nodes
 * and values read back as built, handles and indices convert, ts_graph_add_node builds a node
 * that runs like the builder's, and ts_graph_fail records a sticky error. */
#include <string.h>

#include "graph/graph_ir.h"
#include "tessera/tessera.h"
#include "test_util.h"

static void test_accessors(void) {
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_softmax_ce_smoothing(&a, 0.25f);
  ts_attr_set_softmax_ce_ignore(&a, -100);
  ts_attr_set_softmax_ce_classes(&a, 1000);
  CHECK(ts_attr_softmax_ce_smoothing(&a) == 0.25f);
  CHECK(ts_attr_softmax_ce_ignore(&a) == -100);
  CHECK(ts_attr_softmax_ce_classes(&a) == 1000);
  CHECK(ts_attr_softmax_ce_sync(&a) == 0);

  memset(&a, 0, sizeof a);
  ts_shape s = ts_shape3(2, 3, 4);
  ts_attr_set_const_shape(&a, &s);
  ts_attr_set_const_dtype(&a, TS_BF16);
  ts_shape r = ts_attr_const_shape(&a);
  CHECK(ts_shape_equal(&r, &s));
  CHECK(ts_attr_const_dtype(&a) == TS_BF16); /* after the shape's slots: no overlap */

  memset(&a, 0, sizeof a);
  for (int k = 0; k < 3; k++) ts_attr_set_permute_perm(&a, k, 2 - k);
  CHECK(ts_attr_permute_perm(&a, 0) == 2 && ts_attr_permute_perm(&a, 2) == 0);
}

static void test_read_and_build(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_F32, ts_shape2(2, 3));
  ts_val w = ts_input(g, "w", TS_F32, ts_shape2(3, 4));
  ts_val y = ts_matmul(g, x, w, 0, 0);
  ts_val z = ts_softmax(g, y, -1);
  CHECK(ts_graph_status(g) == TS_OK);
  CHECK(ts_graph_num_nodes(g) == 2);

  const int xi = ts_graph_value_index(g, x), yi = ts_graph_value_index(g, y);
  CHECK(xi >= 0 && ts_graph_value(g, xi) == x);
  CHECK(ts_graph_value_index(g, TS_NONE) == -1);
  CHECK(ts_graph_value_kind(g, xi) == TS_VAL_INPUT && ts_graph_value_producer(g, xi) == -1);
  CHECK(ts_graph_value_dtype(g, xi) == TS_F32 && !strcmp(ts_graph_value_name(g, xi), "x"));
  CHECK(ts_graph_value_requires_grad(g, xi));

  const int mm = ts_graph_value_producer(g, yi);
  CHECK(mm == 0 && ts_graph_node_op(g, mm) == TS_OP_MATMUL);
  CHECK(!strcmp(ts_op_name(ts_graph_node_op(g, mm)), "matmul"));
  CHECK(ts_graph_node_num_inputs(g, mm) == 2 && ts_graph_node_input(g, mm, 0) == xi);
  CHECK(ts_graph_node_num_outputs(g, mm) == 1 && ts_graph_node_output(g, mm, 0) == yi);
  CHECK(ts_graph_value_shape(g, yi)->ndim == 2 && ts_graph_value_shape(g, yi)->dims[1] == 4);
  CHECK(!ts_graph_node_is_backward(g, mm) && ts_graph_node_strategy(g, mm) == NULL);
  CHECK(ts_graph_node_name(g, mm) && strstr(ts_graph_node_name(g, mm), "matmul"));
  const ts_attrs *sa = ts_graph_node_attrs(g, ts_graph_producer(g, z));
  CHECK(ts_attr_softmax_axis(sa) == 1 && ts_attr_softmax_log(sa) == 0); /* axis normalised */

  /* the same softmax through the generic builder */
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_softmax_axis(&a, 1);
  int nd = ts_graph_add_node(g, TS_OP_SOFTMAX, &yi, 1, 1, &a);
  CHECK(nd == 2);
  ts_val z2 = ts_graph_value(g, ts_graph_node_output(g, nd, 0));

  ts_plan *p;
  CHECK_OK(ts_plan_create(g, (ts_val[]){z, z2}, 2, &p));
  float xv[6], wv[12];
  ts_test_fill(xv, 6, 1, -1, 1);
  ts_test_fill(wv, 12, 2, -1, 1);
  CHECK_OK(ts_plan_bind(p, x, xv));
  CHECK_OK(ts_plan_bind(p, w, wv));
  CHECK_OK(ts_plan_run(p, 0));
  CHECK(!memcmp(ts_plan_data(p, z), ts_plan_data(p, z2), 8 * sizeof(float)));
  ts_plan_free(p);

  /* a bad node: -1, sticky error, nothing added */
  CHECK(ts_graph_add_node(g, TS_OP_MATMUL, &xi, 1, 1, NULL) == -1);
  CHECK(ts_graph_status(g) != TS_OK && ts_graph_num_nodes(g) == 3);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  CHECK(ts_graph_fail(g, TS_ESHAPE, "layer %s: bad", "fc1") == TS_ESHAPE);
  CHECK(ts_graph_status(g) == TS_ESHAPE && strstr(ts_graph_error(g), "layer fc1: bad"));
  ts_graph_fail(g, TS_EINVAL, "second");
  CHECK(ts_graph_status(g) == TS_ESHAPE); /* the first error wins */
  ts_graph_set_scope(g, "a/b");
  CHECK(!strcmp(ts_graph_scope(g), "a/b"));
  ts_graph_free(g);
}

int main(void) {
  test_accessors();
  test_read_and_build();
  printf("checked: attribute accessors (scalar, shape, vector), node and value reads, handle/index "
         "conversion, ts_graph_add_node runs like the builder, sticky ts_graph_fail, scope\n");
  return ts_test_finish("test_graph_ir");
}
