/* Executor adapters for the reduce family (SUM_TO, BROADCAST_TO, REDUCE, REDUCE_MAX_BWD).
 *
 * Both backends use the reference kernels: oneDNN 2.6's reduction primitive only has its
 * reference implementation for these plain layouts and measured 20-70x slower (sum of
 * (32,64,56,56) to (64,1,1): 0.7 vs 46 ms; (8,1024,768) to (768): 1.2 vs 70 ms, 2 threads).
 * ts__reduce_dnnl stays available and tested (tests/kernels/test_reduce.c). 16-bit tensors run
 * the reference kernels' native 16-bit versions (the _lp entry points; f32 goes to the f32
 * kernels as before). */
#include "graph/graph_ir.h"
#include "run_desc.h"
#include "../kernels/reduce.h"

static int run_sum_to(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  (void)ctx, (void)n;
  return ts__reduce_lp(0, out[0].dtype, in[0].data, &in[0].shape, out[0].data, &out[0].shape);
}

static int run_broadcast_to(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  (void)ctx, (void)n;
  return ts__broadcast_lp(out[0].dtype, in[0].data, &in[0].shape, out[0].data, &out[0].shape);
}

static int run_reduce(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  (void)ctx;
  ts_shape ks = ts__run_keep_shape(&in[0].shape, (uint32_t)ts_attr_reduce_axes(&n->a));
  return ts__reduce_lp((int)ts_attr_reduce_alg(&n->a), out[0].dtype, in[0].data, &in[0].shape, out[0].data, &ks);
}

static int run_reduce_max_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  (void)ctx;
  ts_shape ks = ts__run_keep_shape(&in[1].shape, (uint32_t)ts_attr_reduce_axes(&n->a));
  return ts__reduce_max_bwd_lp(out[0].dtype, in[0].data, in[1].data, &in[1].shape, in[2].data, &ks, out[0].data);
}

void ts__register_run_reduce(ts__run_fn *tab) {
  tab[TS_OP_SUM_TO] = run_sum_to;
  tab[TS_OP_BROADCAST_TO] = run_broadcast_to;
  tab[TS_OP_REDUCE] = run_reduce;
  tab[TS_OP_REDUCE_MAX_BWD] = run_reduce_max_bwd;
}
