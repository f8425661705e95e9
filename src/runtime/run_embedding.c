/* Executor adapters for the embedding family (attribute layouts: src/graph/op_embedding.c). The
 * forward gathers rows of any element size (f32 or 16-bit); the backward dispatches on dtype. */
#include "graph/graph_ir.h"
#include "run_impl.h"
#include "../kernels/embedding.h"

static int run_embedding(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  if (ts_attr_embedding_sharded(&n->a)) /* vocabulary-sharded: rows [offset, offset+Vl) */
    return ts__embedding_shard_fwd_ref(in[0].data, ts_dtype_size(in[0].dtype), in[0].shape.dims[0],
                                       in[0].shape.dims[1], ts_attr_embedding_offset(&n->a), in[1].data, in[1].dtype,
                                       ts_tensor_numel(&in[1]), out[0].data);
  return ts__embedding_fwd_ref(in[0].data, ts_dtype_size(in[0].dtype), in[0].shape.dims[0],
                               in[0].shape.dims[1], in[1].data, in[1].dtype,
                               ts_tensor_numel(&in[1]), out[0].data);
}

static int run_embedding_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  if (ts_attr_embedding_bwd_sharded(&n->a))
    return ts__embedding_shard_bwd_lp(out[0].dtype, in[0].data, in[1].data, in[1].dtype, ts_tensor_numel(&in[1]),
                                      out[0].shape.dims[0], out[0].shape.dims[1], ts_attr_embedding_bwd_offset(&n->a),
                                      out[0].data);
  return ts__embedding_bwd_lp(out[0].dtype, in[0].data, in[1].data, in[1].dtype, ts_tensor_numel(&in[1]),
                              out[0].shape.dims[0], out[0].shape.dims[1], out[0].data);
}

static int run_one_hot(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  (void)ctx;
  const int64_t axis = ts_attr_one_hot_axis(&n->a), depth = ts_attr_one_hot_depth(&n->a);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < in[0].shape.ndim; d++) *(d < axis ? &outer : &inner) *= in[0].shape.dims[d];
  return ts__one_hot_ref(in[0].data, in[0].dtype, outer, depth, inner, ts_attr_one_hot_on(&n->a),
                         ts_attr_one_hot_off(&n->a), out[0].data, out[0].dtype);
}

void ts__register_run_embedding(ts__run_fn *tab) {
  tab[TS_OP_EMBEDDING] = run_embedding;
  tab[TS_OP_EMBEDDING_BWD] = run_embedding_bwd;
  tab[TS_OP_ONE_HOT] = run_one_hot;
}
