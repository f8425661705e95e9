/* Executor adapter for dropout: the mask stream is keyed by (seed attr, ctx->step). */
#include "graph/graph_ir.h"
#include "run_impl.h"
#include "../kernels/dropout.h"

static int run_dropout(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  if (out[0].dtype != TS_F32) /* 16-bit: streamed, same mask */
    return ts__dropout_lp(out[0].dtype, in[0].data, out[0].data, (size_t)ts_tensor_numel(&in[0]), ts_attr_dropout_p(&n->a),
                          (uint64_t)ts_attr_dropout_seed(&n->a), ctx->step, (uint64_t)ts_attr_dropout_offset(&n->a));
  return ts__dropout_ref(in[0].data, out[0].data, (size_t)ts_tensor_numel(&in[0]), ts_attr_dropout_p(&n->a),
                         (uint64_t)ts_attr_dropout_seed(&n->a), ctx->step, (uint64_t)ts_attr_dropout_offset(&n->a));
}

void ts__register_run_dropout(ts__run_fn *tab) { tab[TS_OP_DROPOUT] = run_dropout; }
