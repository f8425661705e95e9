/* Executor adapter for dropout: the mask stream is keyed by (seed attr, ctx->step). */
#include "graph/graph_ir.h"
#include "run_impl.h"
#include "../kernels/dropout.h"

static int run_dropout(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  size_t numel = (size_t)ts_tensor_numel(&in[0]), run = (size_t)ts_attr_dropout_run(&n->a), es = ts_dtype_size(out[0].dtype);
  if (!run) run = numel ? numel : 1;
  int rc = TS_OK;
  for (size_t k = 0; k * run < numel && !rc; k++) { /* a slice of the global numbering: run by run */
    const char *x = (const char *)in[0].data + k * run * es;
    char *y = (char *)out[0].data + k * run * es;
    uint64_t at = ts_attr_dropout_run_at(&n->a, k); /* run k's first element */
    if (out[0].dtype != TS_F32) /* 16-bit: streamed, same mask */
      rc = ts__dropout_lp(out[0].dtype, x, y, run, ts_attr_dropout_p(&n->a), (uint64_t)ts_attr_dropout_seed(&n->a),
                          ctx->step, at);
    else
      rc = ts__dropout_ref((const float *)x, (float *)y, run, ts_attr_dropout_p(&n->a),
                           (uint64_t)ts_attr_dropout_seed(&n->a), ctx->step, at);
  }
  return rc;
}

void ts__register_run_dropout(ts__run_fn *tab) { tab[TS_OP_DROPOUT] = run_dropout; }
