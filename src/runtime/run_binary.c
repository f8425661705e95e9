/* Executor adapters for the binary family (BINARY, SCALE).
 *
 * Both backends use the reference broadcast engine: on this memory-bound op it measured as fast
 * as or faster than oneDNN's binary primitive (residual add (32,64,56,56): 7.1 vs 8.0 ms;
 * per-channel (64,1,1) operand: 1.3 vs 2.3 ms, 2 threads), and it handles a broadcasting first
 * operand, which oneDNN does not. ts__binary_dnnl stays available and tested
 * (tests/kernels/test_binary.c); set TS_BINARY_DNNL to 1 below to route FAST through it.
 * bf16/f16 nodes call the 16-bit kernels (binary.h) on either backend. */
#include "graph/graph_ir.h"
#include "run_impl.h"
#include "../kernels/binary.h"

#define TS_BINARY_DNNL 0

static int run_binary(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int alg = (int)ts_attr_binary_alg(&n->a);
  if (out[0].dtype != TS_F32)
    return ts__binary_lp(alg, out[0].dtype, in[0].data, &in[0].shape, in[1].data, &in[1].shape, out[0].data,
                         &out[0].shape);
  if (TS_BINARY_DNNL && ctx->backend == TS_BACKEND_FAST)
    return ts__binary_dnnl(alg, in[0].data, &in[0].shape, in[1].data, &in[1].shape, out[0].data,
                           &out[0].shape);
  return ts__binary_ref(alg, in[0].data, &in[0].shape, in[1].data, &in[1].shape, out[0].data,
                        &out[0].shape);
}

static int run_scale(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  (void)ctx;
  if (out[0].dtype != TS_F32)
    return ts__scale_lp(out[0].dtype, in[0].data, out[0].data, ts_tensor_numel(&in[0]), ts_attr_scale_alpha(&n->a),
                        ts_attr_scale_beta(&n->a));
  return ts__scale_ref(in[0].data, out[0].data, ts_tensor_numel(&in[0]), ts_attr_scale_alpha(&n->a), ts_attr_scale_beta(&n->a));
}

void ts__register_run_binary(ts__run_fn *tab) {
  tab[TS_OP_BINARY] = run_binary;
  tab[TS_OP_SCALE] = run_scale;
}
