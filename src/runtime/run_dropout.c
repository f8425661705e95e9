/* Executor adapter for dropout: the mask stream is keyed by (seed attr, ctx->step). */
#include "run_impl.h"
#include "../kernels/dropout.h"

static int run_dropout(ts__runctx *ctx, const ts__node *n, const ts_tensor *in, ts_tensor *out) {
  return ts__dropout_ref(in[0].data, out[0].data, (size_t)ts_tensor_numel(&in[0]), n->a.f[0],
                         (uint64_t)n->a.i[0], ctx->step, (uint64_t)n->a.i[1]);
}

void ts__register_run_dropout(ts__run_fn *tab) { tab[TS_OP_DROPOUT] = run_dropout; }
