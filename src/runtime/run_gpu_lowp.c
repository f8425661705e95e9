/* f16 on the GPU (amp_dtype: f16). The GPU's kernels are f32 and bf16; an f16 node runs as the
 * CPU runs its f16 nodes (run_lowp.c, src/kernels/lowp.h: "every f16 kernel converts around the
 * f32 kernel"): each f16 input widened to an f32 copy (exact), the node's f32 adapter run on the
 * copies, each f16 output rounded once to nearest even (src/tensor/dtype.c's rounding, bitwise:
 * ts_cuda.h's f2h). f32 and integer tensors pass through untouched (batch norm's running
 * statistics are updated in place, softmax_ce's loss is f32). The copies live in a device scratch
 * of their own (ts__run_dev_wide), the adapter keeping ts__run_dev_scratch for itself.
 * Adapters that move bytes (copies, views, permutes, block copies), the casts, fills, collectives
 * (comm/ and NCCL reduce f16 themselves) and point-to-point transfers handle f16 directly, and so
 * do cuBLAS the f16 GEMMs (matmul, dense) and cuDNN the f16 convolutions where they run them. The
 * rest is correct, no faster than f32: bf16 is the GPU's fast 16-bit type. */
#include <string.h>

#include "run_impl.h"
#include "device/gpu_kernels.h"

static ts__run_fn g_f32[TS_OP_COUNT];

static int f16_direct(ts_op op) {
  switch (op) {
    case TS_OP_CONST: case TS_OP_CAST: case TS_OP_COPY: case TS_OP_RESHAPE: case TS_OP_PERMUTE:
    case TS_OP_CONCAT: case TS_OP_SPLIT: case TS_OP_SLICE: case TS_OP_SLICE_BWD:
    case TS_OP_ALLREDUCE: case TS_OP_ALLGATHER: case TS_OP_REDUCE_SCATTER: case TS_OP_ALLTOALL:
    case TS_OP_RANK_SLICE: case TS_OP_RANK_SLICE_BWD: case TS_OP_SEND: case TS_OP_RECV:
      return 1;
    default:
      return 0;
  }
}

#define WIDE_ALIGN(b) (((b) + 255) & ~(size_t)255)

/* an f16 GEMM cuBLAS runs itself (f16 operands and result, f32 products and sums: one rounding of
 * each result, as the converted path; on the tensor cores) */
static int f16_gemm(const ts__run_node *n, const ts_tensor *in, const ts_tensor *out) {
  if ((n->op != TS_OP_MATMUL && n->op != TS_OP_DENSE) || n->nout != 1 || out[0].dtype != TS_F16) return 0;
  for (int k = 0; k < n->nin; k++)
    if (in[k].dtype != TS_F16) return 0;
  return !strcmp(ts__gpu_gemm_impl(NULL), "cublas");
}

static int run_widened(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  if (f16_gemm(n, in, out) || ts__run_gpu_conv_native(n, in, out)) return g_f32[n->op](ctx, n, in, out);
  size_t total = 0;
  for (int k = 0; k < n->nin; k++)
    if (in[k].dtype == TS_F16) total += WIDE_ALIGN((size_t)ts_tensor_numel(&in[k]) * 4);
  for (int k = 0; k < n->nout; k++)
    if (out[k].dtype == TS_F16) total += WIDE_ALIGN((size_t)ts_tensor_numel(&out[k]) * 4);
  if (!total) return g_f32[n->op](ctx, n, in, out);
  char *p = NULL;
  int rc = ts__run_dev_wide(ctx, total, (void **)&p);
  ts_tensor wi[TS_GRAPH_MAX_IO], wo[TS_GRAPH_MAX_IO];
  for (int k = 0; k < n->nin && !rc; k++) {
    wi[k] = in[k];
    if (in[k].dtype != TS_F16) continue;
    ts_tensor_view(&wi[k], TS_F32, in[k].shape, p);
    rc = ts__gpu_cast(ctx->dev, TS_F16, TS_F32, in[k].data, p, ts_tensor_numel(&in[k]), NULL);
    p += WIDE_ALIGN((size_t)ts_tensor_numel(&in[k]) * 4);
  }
  for (int k = 0; k < n->nout && !rc; k++) {
    wo[k] = out[k];
    if (out[k].dtype != TS_F16) continue;
    ts_tensor_view(&wo[k], TS_F32, out[k].shape, p);
    p += WIDE_ALIGN((size_t)ts_tensor_numel(&out[k]) * 4);
  }
  if (!rc) rc = g_f32[n->op](ctx, n, wi, wo);
  for (int k = 0; k < n->nout && !rc; k++)
    if (out[k].dtype == TS_F16)
      rc = ts__gpu_cast(ctx->dev, TS_F32, TS_F16, wo[k].data, out[k].data, ts_tensor_numel(&out[k]), NULL);
  return rc;
}

void ts__run_gpu_f16_install(ts__run_fn *tab) {
  for (int op = 0; op < TS_OP_COUNT; op++) {
    if (!tab[op] || f16_direct((ts_op)op) || tab[op] == run_widened) continue;
    g_f32[op] = tab[op];
    tab[op] = run_widened;
  }
}
