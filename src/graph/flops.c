/* Floating-point operations of a node (ts_graph_node_flops, graph_ir.h): the profiler's
 * achieved-FLOP/s column and the pipeline's stage balancing read the same count. */
#include "graph/graph_ir.h"

static int64_t numel_of(const ts_graph *g, int v) { return ts_shape_numel(ts_graph_value_shape(g, v)); }

double ts_graph_node_flops(const ts_graph *g, int j) {
  ts_op op = ts_graph_node_op(g, j);
  const ts_shape *s0 = ts_graph_node_num_inputs(g, j) > 0 ? ts_graph_value_shape(g, ts_graph_node_input(g, j, 0)) : NULL;
  const ts_shape *s1 = ts_graph_node_num_inputs(g, j) > 1 ? ts_graph_value_shape(g, ts_graph_node_input(g, j, 1)) : NULL;
  double y = (double)numel_of(g, ts_graph_node_output(g, j, 0));
  switch (op) {
    case TS_OP_MATMUL: {
      if (!s0 || s0->ndim < 2) return 0;
      int64_t K = ts_attr_matmul_trans_a(ts_graph_node_attrs(g, j)) ? s0->dims[s0->ndim - 2] : s0->dims[s0->ndim - 1];
      return 2 * y * (double)K;
    }
    case TS_OP_DENSE: return s1 && s1->ndim == 2 ? 2 * y * (double)s1->dims[1] : 0;
    case TS_OP_CONV2D: /* w (O, I/groups, kh, kw) */
      return s1 && s1->ndim == 4 ? 2 * y * (double)(s1->dims[1] * s1->dims[2] * s1->dims[3]) : 0;
    case TS_OP_CONV2D_BWD_DATA: /* (dy, w): the forward's count */
      return s0 && s1 && s1->ndim == 4 ? 2 * (double)ts_shape_numel(s0) * (double)(s1->dims[1] * s1->dims[2] * s1->dims[3])
                                       : 0;
    case TS_OP_CONV2D_BWD_WEIGHT: { /* (x, dy) -> dw (O, I, kh, kw) */
      const ts_shape *w = ts_graph_value_shape(g, ts_graph_node_output(g, j, 0));
      return s1 && w->ndim == 4 && w->dims[0] > 0 ? 2 * (double)ts_shape_numel(s1) * (double)(ts_shape_numel(w) / w->dims[0])
                                                  : 0;
    }
    case TS_OP_ATTENTION:
    case TS_OP_ATTENTION_BWD:
    case TS_OP_RING_ATTENTION:
    case TS_OP_RING_ATTENTION_BWD: {
      /* causal: QK^T and PV over half the (T, T) scores; backward twice. Ring attention: the
       * rank's T queries against half the N T keys (zigzag: the same on every rank; in order,
       * their average) */
      const int fwd = op == TS_OP_ATTENTION || op == TS_OP_RING_ATTENTION;
      int lse = fwd ? ts_graph_node_output(g, j, 1)
                    : (ts_graph_node_num_inputs(g, j) > 5 ? ts_graph_node_input(g, j, 5) : -1);
      if (lse < 0 || !s0) return 0;
      const ts_shape *l = ts_graph_value_shape(g, lse);
      if (l->ndim != 3 || ts_shape_numel(l) <= 0) return 0;
      double N = op == TS_OP_RING_ATTENTION || op == TS_OP_RING_ATTENTION_BWD
                     ? (double)ts_attr_ring_attention_group(ts_graph_node_attrs(g, j)) : 1.0;
      double bht = (double)ts_shape_numel(l), T = (double)l->dims[2];
      double D = (double)ts_shape_numel(s0) / bht, f = 2 * bht * N * T * D;
      return fwd ? f : 2 * f;
    }
    default: return 0;
  }
}

