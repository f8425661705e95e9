/* Executor adapters for the matmul family (MATMUL, DENSE): derive GEMM sizes from the bound
 * tensors' shapes and call the oneDNN (TS_BACKEND_FAST) or reference kernel. Dispatch on dtype:
 * f32 calls the f32 kernels (unchanged), bf16/f16 the 16-bit kernels (matmul.h). Asked to carry
 * out the executor's matmul+bias+gelu fusion (ctx->fuse), out[0] is the gelu's output and the
 * node runs the fused primitive (ts__matmul_act_dnnl). */
#include "run_desc.h"

static int run_matmul(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts__mm_desc d = ts__run_mm_desc(n, &in[0].shape, &in[1].shape, &out[0].shape);
  const ts_dtype dt = out[0].dtype;
  if (ctx->fuse && ctx->fuse->kind == TS__FUSE_MM_GELU) /* matmul+gelu fusion (exec.c, FAST only) */
    return ts__matmul_act_dnnl(&d, in[0].dtype, dt, in[0].data, in[1].data, NULL, out[0].data, ctx->fuse->act);
  if (dt == TS_F32 && in[0].dtype == TS_BF16) /* the executor's matmul+cast fusion (exec.c, FAST only) */
    return ts__matmul_bf16_f32out_dnnl(&d, in[0].data, in[1].data, out[0].data);
  if (dt != TS_F32) {
    if (ctx->backend == TS_BACKEND_REF) return ts__matmul_lp_ref(&d, dt, in[0].data, in[1].data, out[0].data);
    return ts__matmul_lp_dnnl(&d, dt, in[0].data, in[1].data, out[0].data);
  }
  if (ctx->backend == TS_BACKEND_REF) return ts__matmul_ref(&d, in[0].data, in[1].data, out[0].data);
  return ts__matmul_dnnl(&d, in[0].data, in[1].data, out[0].data);
}

static int run_dense(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int64_t K = in[1].shape.dims[1], N = in[1].shape.dims[0];
  const int64_t M = ts_tensor_numel(&in[0]) / K;
  const float *b = n->nin == 3 ? in[2].data : NULL;
  const ts_dtype dt = out[0].dtype;
  if (ctx->fuse && ctx->fuse->kind == TS__FUSE_MM_GELU) { /* dense+bias+gelu fusion (exec.c, FAST only) */
    const ts__mm_desc d = {1, M, N, K, 0, 1, 0, 0}; /* w (N,K) is the (K,N) operand transposed */
    return ts__matmul_act_dnnl(&d, in[0].dtype, dt, in[0].data, in[1].data, b, out[0].data, ctx->fuse->act);
  }
  if (dt != TS_F32) {
    if (ctx->backend == TS_BACKEND_REF) return ts__dense_lp_ref(M, N, K, dt, in[0].data, in[1].data, b, out[0].data);
    return ts__dense_lp_dnnl(M, N, K, dt, in[0].data, in[1].data, b, out[0].data);
  }
  if (ctx->backend == TS_BACKEND_REF) return ts__dense_ref(M, N, K, in[0].data, in[1].data, b, out[0].data);
  return ts__dense_dnnl(M, N, K, in[0].data, in[1].data, b, out[0].data);
}

void ts__register_run_matmul(ts__run_fn *tab) {
  tab[TS_OP_MATMUL] = run_matmul;
  tab[TS_OP_DENSE] = run_dense;
}
