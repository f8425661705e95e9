/* The cost model of one rank's graph on a cluster (src/planner/planner.h). Compute: GEMM-like
 * ops (matmul, dense, convolution and its backward, attention) at their family's achieved fraction
 * (ts_cluster_efficiency: efficiency_matmul/conv/attention, else gemm_efficiency) of the peak of
 * the dtype they run in (their first input's: a graph rewritten by the amp pass is priced as it
 * runs; dt 16-bit prices every f32 value as 16-bit, for graphs built in f32), every other op by the bytes it reads and writes at mem_bandwidth (views
 * move nothing). Collectives: the alpha-beta model of ring algorithms over their group, placed on
 * neighbouring ranks (tensor-parallel groups: inside a node while they fit). */
#include <math.h>
#include <string.h>

#include "planner/planner.h"

static int is_gemm(ts_op op) {
  switch (op) {
    case TS_OP_MATMUL:
    case TS_OP_DENSE:
    case TS_OP_CONV2D:
    case TS_OP_CONV2D_BWD_DATA:
    case TS_OP_CONV2D_BWD_WEIGHT:
    case TS_OP_ATTENTION:
    case TS_OP_ATTENTION_BWD:
    case TS_OP_RING_ATTENTION:
    case TS_OP_RING_ATTENTION_BWD: return 1;
    default: return 0;
  }
}

/* The bytes of value v, f32 values as `dt` when the graph is priced as if in mixed precision. */
static double vbytes(const ts_graph *g, int v, ts_dtype dt) {
  ts_dtype vd = ts_graph_value_dtype(g, v);
  if (vd == TS_F32) vd = dt;
  return (double)ts_shape_numel(ts_graph_value_shape(g, v)) * (double)ts_dtype_size(vd);
}

/* The collective kind of op, or -1. */
static int coll_kind(ts_op op) {
  switch (op) {
    case TS_OP_ALLREDUCE: return TS_COST_ALLREDUCE;
    case TS_OP_ALLGATHER: return TS_COST_ALLGATHER;
    case TS_OP_REDUCE_SCATTER: return TS_COST_REDUCE_SCATTER;
    case TS_OP_ALLTOALL: return TS_COST_ALLTOALL;
    case TS_OP_SEND:
    case TS_OP_RECV:
    case TS_OP_HALO:
    case TS_OP_HALO_BWD: return TS_COST_P2P;
    default: return -1;
  }
}

int ts_cost_graph(const ts_cluster *c, const ts_graph *g, ts_dtype dt, const char *live, ts_cost_breakdown *out) {
  memset(out, 0, sizeof *out);
  if (!c || !g) return ts_error_set(TS_EINVAL, "ts_cost_graph: no cluster or graph");
  int low = dt == TS_BF16 || dt == TS_F16;
  if (!low) dt = TS_F32;
  for (int j = 0; j < ts_graph_num_nodes(g); j++) {
    if (live && !live[j]) continue;
    ts_op op = ts_graph_node_op(g, j);
    out->nodes++;
    if (ts_graph_value_alias_of(g, ts_graph_node_output(g, j, 0)) < 0) out->other_s += c->op_overhead;
    int ck = coll_kind(op);
    if (ck >= 0) {
      const ts_attrs *a = ts_graph_node_attrs(g, j);
      if (op == TS_OP_HALO || op == TS_OP_HALO_BWD) { /* two exchanges with the neighbours: the halo rows */
        double b = fabs(vbytes(g, ts_graph_node_output(g, j, 0), dt) - vbytes(g, ts_graph_node_input(g, j, 0), dt));
        int grp = (int)ts_attr_coll_group(a);
        if (grp > 1) out->comm_s += 2 * ts_cluster_coll_time(c, TS_COST_P2P, 2, ts_cluster_spans(c, grp, 1), b / 2);
        continue;
      }
      if (ck == TS_COST_P2P) { /* the message: SEND's input, RECV's output */
        double b = op == TS_OP_SEND ? vbytes(g, ts_graph_node_input(g, j, 0), dt) : vbytes(g, ts_graph_node_output(g, j, 0), dt);
        out->comm_s += ts_cluster_coll_time(c, TS_COST_P2P, 2, 1, b) / 2; /* each end pays half */
        continue;
      }
      int grp = (int)ts_attr_coll_group(a);
      /* the whole tensor the ring moves: all-gather's output, the others' input */
      double b = ck == TS_COST_ALLGATHER ? vbytes(g, ts_graph_node_output(g, j, 0), dt) : vbytes(g, ts_graph_node_input(g, j, 0), dt);
      out->comm_s += ts_cluster_coll_time(c, (ts_cost_coll)ck, grp, ts_cluster_spans(c, grp, 1), b);
      continue;
    }
    if (is_gemm(op)) { /* at the peak of the dtype it runs in (an amp graph's own, or dt) */
      double f = ts_graph_node_flops(g, j);
      ts_dtype nd = ts_graph_value_dtype(g, ts_graph_node_input(g, j, 0));
      int lp = low || nd == TS_BF16 || nd == TS_F16;
      out->flops += f;
      double t = f / ((lp && c->peak_flops_bf16 > 0 ? c->peak_flops_bf16 : c->peak_flops_f32) *
                      ts_cluster_efficiency(c, op));
      out->gemm_s += t;
      if (op == TS_OP_RING_ATTENTION || op == TS_OP_RING_ATTENTION_BWD) {
        /* N-1 key|value blocks passed on (a p2p each, hidden behind the blocks' attention but
         * what exceeds it); backward also passes the blocks' f32 gradients N times, not hidden */
        int N = (int)ts_attr_ring_attention_group(ts_graph_node_attrs(g, j));
        int kin = op == TS_OP_RING_ATTENTION ? 1 : 2;
        double kv = vbytes(g, ts_graph_node_input(g, j, kin), dt) * 2;
        double elems = (double)ts_shape_numel(ts_graph_value_shape(g, ts_graph_node_input(g, j, kin)));
        int span = ts_cluster_spans(c, N, 1);
        double pass = N > 1 ? (N - 1) * ts_cluster_coll_time(c, TS_COST_P2P, 2, span, kv) : 0;
        out->comm_s += pass > t ? pass - t : 0;
        if (op == TS_OP_RING_ATTENTION_BWD && N > 1) out->comm_s += N * ts_cluster_coll_time(c, TS_COST_P2P, 2, span, 8 * elems);
      }
      continue;
    }
    int v0 = ts_graph_node_output(g, j, 0);
    if (ts_graph_value_alias_of(g, v0) >= 0) continue; /* views move nothing */
    double b = 0;
    for (int k = 0; k < ts_graph_node_num_inputs(g, j); k++) b += vbytes(g, ts_graph_node_input(g, j, k), dt);
    for (int k = 0; k < ts_graph_node_num_outputs(g, j); k++) b += vbytes(g, ts_graph_node_output(g, j, k), dt);
    out->bytes += b;
    out->other_s += b / c->mem_bandwidth;
  }
  out->compute_s = out->gemm_s + out->other_s;
  return TS_OK;
}
