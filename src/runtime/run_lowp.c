/* 16-bit (bf16, f16) execution for adapters that only know f32.
 *
 * Every op kind runs on bf16/f16 values. Families with their own 16-bit dispatch (native bf16
 * kernels, or dtype-agnostic data movement) are listed in native16[] below and keep their
 * adapter. Every other adapter is wrapped once at ts__run_init: when none of a node's tensors
 * is 16-bit the wrapper calls the f32 adapter directly (f32 runs exactly as before); otherwise
 * it converts each 16-bit input to an f32 copy, runs the f32 adapter with f32 views of the
 * 16-bit outputs, and rounds those outputs once to their dtype (nearest even). f32 inputs and
 * outputs (batch-norm running statistics, layer-norm mean/var, softmax_ce's loss) are passed
 * through untouched, so in-place state updates still land in the caller's memory.
 * This is the "converted" path of docs/mixed-precision.md: correct everywhere, no faster than
 * f32. f16 nodes of the families without native loops take it too (no f16 compute in oneDNN 2.6
 * on CPUs without avx512_core_fp16); the 16-bit kernels listed below convert f16 themselves where
 * they need an f32 oneDNN kernel (matmul, conv, pooling on the fast backend). */
#include "graph/graph_ir.h"
#include "run_impl.h"
#include "../kernels/lowp.h"

static ts__run_fn g_f32[TS_OP_COUNT];

/* Op kinds whose adapters dispatch on dtype themselves. */
static int native16(ts_op op) {
  switch (op) {
    /* dtype-agnostic: element size from the tensor, or conversions */
    case TS_OP_CONST: case TS_OP_CAST: case TS_OP_COPY:
    case TS_OP_RESHAPE: case TS_OP_PERMUTE: case TS_OP_CONCAT: case TS_OP_SPLIT:
    case TS_OP_SLICE: case TS_OP_SLICE_BWD:
    /* communication: comm/ reduces bf16/f16 itself; p2p moves bytes */
    case TS_OP_ALLREDUCE: case TS_OP_ALLGATHER: case TS_OP_REDUCE_SCATTER: case TS_OP_ALLTOALL:
    case TS_OP_RANK_SLICE: case TS_OP_RANK_SLICE_BWD: case TS_OP_HALO: case TS_OP_HALO_BWD:
    case TS_OP_SEND: case TS_OP_RECV:
    case TS_OP_RING_ATTENTION: case TS_OP_RING_ATTENTION_BWD: /* widens per block itself */
    /* native 16-bit kernels (run_<family>.c dispatch on dtype) */
    case TS_OP_ATTENTION: case TS_OP_ATTENTION_BWD:
    case TS_OP_SUM_TO: case TS_OP_BROADCAST_TO: case TS_OP_REDUCE: case TS_OP_REDUCE_MAX_BWD:
    case TS_OP_EMBEDDING: case TS_OP_EMBEDDING_BWD: case TS_OP_ONE_HOT:
    case TS_OP_SOFTMAX_CE: case TS_OP_SOFTMAX_CE_BWD:
    case TS_OP_MATMUL: case TS_OP_DENSE:
    case TS_OP_CONV2D: case TS_OP_CONV2D_BWD_DATA: case TS_OP_CONV2D_BWD_WEIGHT:
    case TS_OP_ELTWISE: case TS_OP_ELTWISE_BWD:
    case TS_OP_BINARY: case TS_OP_SCALE: case TS_OP_DROPOUT:
    case TS_OP_LAYERNORM: case TS_OP_LAYERNORM_BWD: case TS_OP_SOFTMAX: case TS_OP_SOFTMAX_BWD:
    case TS_OP_BATCHNORM: case TS_OP_BATCHNORM_BWD:
    case TS_OP_MAXPOOL2D: case TS_OP_MAXPOOL2D_BWD: case TS_OP_AVGPOOL2D: case TS_OP_AVGPOOL2D_BWD:
      return 1;
    default:
      return 0;
  }
}

static int run_converted(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int any = 0;
  for (int k = 0; k < n->nin; k++) any |= ts__is_lowp(in[k].dtype);
  for (int k = 0; k < n->nout; k++) any |= ts__is_lowp(out[k].dtype);
  if (!any) return g_f32[n->op](ctx, n, in, out);
  ts_tensor fi[TS_GRAPH_MAX_IO], fo[TS_GRAPH_MAX_IO];
  float *buf[2 * TS_GRAPH_MAX_IO] = {0};
  int rc = TS_OK;
  for (int k = 0; k < n->nin + n->nout && rc == TS_OK; k++) {
    const int is_in = k < n->nin;
    const ts_tensor *t = is_in ? &in[k] : &out[k - n->nin];
    ts_tensor *f = is_in ? &fi[k] : &fo[k - n->nin];
    *f = *t;
    if (!ts__is_lowp(t->dtype)) continue;
    /* outputs too: an adapter may read what it updates */
    buf[k] = ts__lp_in(t->data, t->dtype, ts_tensor_numel(t), n->name);
    if (!buf[k]) rc = TS_ENOMEM;
    f->dtype = TS_F32;
    f->data = buf[k];
  }
  if (rc == TS_OK) rc = g_f32[n->op](ctx, n, fi, fo);
  for (int k = 0; rc == TS_OK && k < n->nout; k++)
    if (buf[n->nin + k]) ts__lp_from_f32(buf[n->nin + k], out[k].data, out[k].dtype, ts_tensor_numel(&out[k]));
  for (int k = 0; k < n->nin + n->nout; k++) ts_free(buf[k]);
  return rc;
}

void ts__run_lowp_install(ts__run_fn *tab) {
  for (int op = 0; op < TS_OP_COUNT; op++) {
    if (!tab[op] || native16((ts_op)op) || tab[op] == run_converted) continue;
    g_f32[op] = tab[op];
    tab[op] = run_converted;
  }
}
