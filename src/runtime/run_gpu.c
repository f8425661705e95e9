/* The GPU's executor adapters: the kernel table entries of a plan run on a GPU (ts_plan_set_device),
 * one per op the GPU has kernels for, each turning a node and its device tensors into launches of
 * src/device/gpu_kernels.h on the device's compute stream. An op without an entry here is refused
 * when the plan is put on the GPU (naming it). The vocabulary-sharded embedding and cross-entropy
 * run here too (the latter's reductions through the slot's device collectives, runtime/dcoll.h),
 * and the executor's fusions (matmul+cast, BN+ReLU, matmul+bias+gelu). Errors the CPU
 * kernels find by looking at the data (a label or id out of range) are flagged on the device and
 * reported after the run (ts__runctx.flag). */
#include "run_desc.h"
#include "device/gpu_kernels.h"
#include "runtime/dcoll.h"

static int run_const(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  (void)in;
  return ts__gpu_fill_dt(ctx->dev, out[0].dtype, out[0].data, ts_attr_const_value(&n->a), ts_tensor_numel(&out[0]), NULL);
}

static int run_cast(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  (void)n;
  return ts__gpu_cast(ctx->dev, in[0].dtype, out[0].dtype, in[0].data, out[0].data, ts_tensor_numel(&in[0]), NULL);
}

static int run_copy(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  (void)n;
  if (out[0].data == in[0].data) return TS_OK; /* RESHAPE: a view the planner aliased */
  return ts__dev_copy(ctx->dev, out[0].data, in[0].data, ts_tensor_nbytes(&in[0]), TS__D2D, NULL);
}

/* The executor's matmul fusions (exec.c): matmul+cast: out[0] is the cast's f32 result, written by
 * the bf16 GEMM's f32 output (one rounding fewer, as the CPU's); matmul+bias+gelu (plans without
 * backward): out[0] is the gelu's output, the GEMM written there (f32 for O1's widening cast) and
 * the gelu applied in place (z never written; cuBLAS has no GeLU epilogue, cuBLASLt's is not
 * loaded). */
static int mm_gelu_after(ts__runctx *ctx, int rc, ts_tensor *out) {
  if (rc || !ctx->fuse || ctx->fuse->kind != TS__FUSE_MM_GELU) return rc;
  return ts__gpu_eltwise_fwd(ctx->dev, ctx->fuse->act, 0.0f, out[0].dtype, out[0].data, out[0].data,
                             ts_tensor_numel(&out[0]), NULL);
}

static int run_matmul(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts__mm_desc d = ts__run_mm_desc(n, &in[0].shape, &in[1].shape, &out[0].shape);
  return mm_gelu_after(ctx, ts__gpu_gemm(ctx->dev, &d, in[0].dtype, out[0].dtype, in[0].data, in[1].data, NULL,
                                         out[0].data, NULL), out);
}

static int run_dense(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int64_t K = in[1].shape.dims[1], N = in[1].shape.dims[0], M = ts_tensor_numel(&in[0]) / K;
  const ts__mm_desc d = {1, M, N, K, 0, 1, 0, 0}; /* w (N,K) is the (K,N) operand transposed */
  return mm_gelu_after(ctx, ts__gpu_gemm(ctx->dev, &d, in[0].dtype, out[0].dtype, in[0].data, in[1].data,
                                         n->nin == 3 ? in[2].data : NULL, out[0].data, NULL), out);
}

static int run_eltwise(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  return ts__gpu_eltwise_fwd(ctx->dev, (int)ts_attr_eltwise_alg(&n->a), ts_attr_eltwise_alpha(&n->a), out[0].dtype,
                             in[0].data, out[0].data, ts_tensor_numel(&in[0]), NULL);
}

static int run_eltwise_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  return ts__gpu_eltwise_bwd(ctx->dev, (int)ts_attr_eltwise_alg(&n->a), ts_attr_eltwise_alpha(&n->a),
                             (int)ts_attr_eltwise_use_dst(&n->a), out[0].dtype, in[0].data, in[1].data, out[0].data,
                             ts_tensor_numel(&in[0]), NULL);
}

static int run_binary(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  return ts__gpu_binary(ctx->dev, (int)ts_attr_binary_alg(&n->a), out[0].dtype, in[0].data, &in[0].shape, in[1].data,
                        &in[1].shape, out[0].data, &out[0].shape, NULL);
}

static int run_scale(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  return ts__gpu_scale(ctx->dev, out[0].dtype, in[0].data, out[0].data, ts_tensor_numel(&in[0]),
                       ts_attr_scale_alpha(&n->a), ts_attr_scale_beta(&n->a), NULL);
}

static int run_sum_to(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  (void)n;
  size_t wb = ts__gpu_reduce_workspace(&in[0].shape, &out[0].shape);
  void *ws = NULL;
  int rc = wb ? ts__run_dev_scratch(ctx, wb, &ws) : TS_OK;
  return rc ? rc : ts__gpu_sum_to(ctx->dev, out[0].dtype, in[0].data, &in[0].shape, out[0].data, &out[0].shape, ws, NULL);
}

static int run_reduce(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts_shape ks = ts__run_keep_shape(&in[0].shape, (uint32_t)ts_attr_reduce_axes(&n->a));
  size_t wb = ts__gpu_reduce_workspace(&in[0].shape, &ks);
  void *ws = NULL;
  int rc = wb ? ts__run_dev_scratch(ctx, wb, &ws) : TS_OK;
  return rc ? rc : ts__gpu_reduce(ctx->dev, (int)ts_attr_reduce_alg(&n->a), out[0].dtype, in[0].data, &in[0].shape,
                                  out[0].data, &ks, ws, NULL);
}

static int run_reduce_max_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts_shape ks = ts__run_keep_shape(&in[1].shape, (uint32_t)ts_attr_reduce_axes(&n->a));
  return ts__gpu_reduce_max_bwd(ctx->dev, out[0].dtype, in[0].data, in[1].data, &in[1].shape, in[2].data, &ks,
                                out[0].data, NULL);
}

static int run_broadcast_to(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  (void)n;
  return ts__gpu_broadcast(ctx->dev, out[0].dtype, in[0].data, &in[0].shape, out[0].data, &out[0].shape, NULL);
}

/* softmax_ce: out[0] the loss, out[1] the rows' log-sum-exp (if asked); device scratch for the
 * rows' losses, the count and the range flag. Class-sharded over a group (Megatron's
 * vocabulary-parallel loss, run_softmax.c's steps): the rows' max all-reduced (MAX), their
 * statistics all-reduced (SUM) through the slot's device collectives, the loss from them. */
static int run_ce(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int sync = (int)ts_attr_softmax_ce_sync(&n->a), gs = (int)ts_attr_softmax_ce_group(&n->a);
  const int64_t N = in[0].shape.dims[0], Cl = in[0].shape.dims[1];
  const int i64 = in[1].dtype == TS_I64;
  const float s = ts_attr_softmax_ce_smoothing(&n->a);
  const int64_t ignore = ts_attr_softmax_ce_ignore(&n->a);
  struct ts__dcoll *x = NULL;
  float *tmp = NULL;
  int rc = sync ? ts__run_dcoll(ctx, n, sync - 1, gs, "class-sharded ", &x) : TS_OK;
  if (!rc) rc = ts__run_dev_scratch(ctx, sizeof(float) * (size_t)(5 * N + 2), (void **)&tmp);
  if (rc) return rc;
  float *lse = n->nout > 1 ? out[1].data : tmp + N + 2;
  if (!x) /* unsharded, or a group of one: the whole row is here */
    return ts__gpu_softmax_ce_fwd(ctx->dev, in[0].dtype, in[0].data, in[1].data, i64, N, Cl, s, ignore, out[0].data, lse,
                                  tmp + N + 1, tmp, ctx->flag, NULL);
  const int64_t C = ts_attr_softmax_ce_classes(&n->a), off = ts_attr_softmax_ce_offset(&n->a);
  float *M = tmp, *st = tmp + 2 * N + 2, *count = tmp + N + 1; /* M, count, lse (unless out[1]), stats */
  rc = ts__gpu_softmax_ce_shard_max(ctx->dev, in[0].dtype, in[0].data, in[1].data, i64, N, Cl, C, ignore, M, ctx->flag,
                                    NULL);
  if (!rc) rc = ts__dcoll_allreduce(x, M, M, (size_t)N, TS_F32, TS_REDUCE_MAX, NULL);
  if (!rc) rc = ts__gpu_softmax_ce_shard_stats(ctx->dev, in[0].dtype, in[0].data, in[1].data, i64, N, Cl, off, ignore, M,
                                               st, NULL);
  if (!rc) rc = ts__dcoll_allreduce(x, st, st, (size_t)(3 * N), TS_F32, TS_REDUCE_SUM, NULL);
  if (!rc) rc = ts__gpu_softmax_ce_shard_loss(ctx->dev, in[1].data, i64, N, C, s, ignore, M, st, out[0].data, lse, count,
                                              NULL);
  return rc;
}

static int run_ce_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int sync = (int)ts_attr_softmax_ce_sync(&n->a), gs = (int)ts_attr_softmax_ce_group(&n->a);
  if (n->nin < 4) return ts_error_set(TS_EUNSUPPORTED, "softmax_ce_bwd (node %s): without lse on the GPU", n->name);
  const int64_t N = in[1].shape.dims[0], Cl = in[1].shape.dims[1];
  const int i64 = in[2].dtype == TS_I64;
  const int64_t ignore = ts_attr_softmax_ce_ignore(&n->a);
  struct ts__dcoll *x = NULL;
  float *tmp = NULL;
  int rc = sync ? ts__run_dcoll(ctx, n, sync - 1, gs, "class-sharded ", &x) : TS_OK;
  if (!rc) rc = ts__run_dev_scratch(ctx, 2 * sizeof(float), (void **)&tmp);
  if (!rc) rc = ts__gpu_label_count(ctx->dev, in[2].data, i64, N, ignore, tmp, NULL);
  if (rc) return rc;
  const float *dl = in[0].data;
  int64_t C = Cl, off = 0;
  if (sync) C = ts_attr_softmax_ce_classes(&n->a), off = ts_attr_softmax_ce_offset(&n->a);
  if (x) { /* d(sum over ranks of the replicated loss) */
    rc = ts__dcoll_allreduce(x, in[0].data, tmp + 1, 1, TS_F32, TS_REDUCE_SUM, NULL);
    dl = tmp + 1;
  }
  if (!x && sync && gs == 1) C = Cl, off = 0; /* a group of one: the whole row */
  return rc ? rc : ts__gpu_softmax_ce_shard_bwd(ctx->dev, in[1].dtype, dl, in[1].data, in[2].data, i64, in[3].data, N,
                                                Cl, C, off, ts_attr_softmax_ce_smoothing(&n->a), ignore, tmp,
                                                out[0].data, NULL);
}

static int run_layernorm(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int64_t D = in[0].shape.dims[in[0].shape.ndim - 1], R = ts_tensor_numel(&in[0]) / D;
  return ts__gpu_layernorm_fwd_g(ctx->dev, in[0].dtype, in[1].dtype, in[0].data, in[1].data, in[2].data, out[0].data,
                                 out[1].data, out[2].data, R, D, ts_attr_layernorm_eps(&n->a), NULL);
}

static int run_layernorm_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int64_t D = in[1].shape.dims[in[1].shape.ndim - 1], R = ts_tensor_numel(&in[1]) / D;
  void *ws = NULL;
  int rc = ts__run_dev_scratch(ctx, ts__gpu_layernorm_bwd_workspace(R, D), &ws);
  return rc ? rc : ts__gpu_layernorm_bwd_g(ctx->dev, in[1].dtype, in[2].dtype, in[0].data, in[1].data, in[2].data,
                                           in[3].data, in[4].data, out[0].data, out[1].data, out[2].data, R, D,
                                           ts_attr_layernorm_eps(&n->a), ws, NULL);
}

static int run_embedding(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int sh = ts_attr_embedding_sharded(&n->a) != 0; /* vocabulary-sharded: rows [offset, offset+Vl) */
  const int64_t off = sh ? ts_attr_embedding_offset(&n->a) : 0;
  if (off < 0) return ts_error_set(TS_EINVAL, "embedding (node %s): row offset %lld is negative", n->name, (long long)off);
  return ts__gpu_embedding_fwd(ctx->dev, in[0].dtype, in[0].data, in[0].shape.dims[0], in[0].shape.dims[1], off, sh,
                               in[1].data, in[1].dtype == TS_I64, ts_tensor_numel(&in[1]), out[0].data, ctx->flag, NULL);
}

static int run_embedding_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int64_t off = ts_attr_embedding_bwd_sharded(&n->a) ? ts_attr_embedding_bwd_offset(&n->a) : 0;
  if (off < 0) return ts_error_set(TS_EINVAL, "embedding_bwd (node %s): row offset %lld is negative", n->name, (long long)off);
  if (out[0].dtype != TS_F32 && out[0].dtype != TS_BF16)
    return ts_error_set(TS_EUNSUPPORTED, "embedding_bwd (node %s): %s on the GPU", n->name, ts_dtype_name(out[0].dtype));
  const int64_t N = ts_tensor_numel(&in[1]), V = out[0].shape.dims[0], D = out[0].shape.dims[1];
  void *ws = NULL;
  int rc = ts__run_dev_scratch(ctx, ts__gpu_embedding_bwd_workspace(out[0].dtype, N, V, D) + 64, &ws);
  return rc ? rc : ts__gpu_embedding_bwd(ctx->dev, out[0].dtype, in[0].data, in[1].data, in[1].dtype == TS_I64, N, V, D,
                                         off, out[0].data, ws, NULL);
}

static int run_dropout(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int64_t numel = ts_tensor_numel(&in[0]), run = ts_attr_dropout_run(&n->a);
  size_t es = ts_dtype_size(out[0].dtype);
  if (!run) run = numel ? numel : 1;
  int rc = TS_OK;
  for (int64_t k = 0; k * run < numel && !rc; k++) /* a slice of the global numbering: run by run (run_dropout.c) */
    rc = ts__gpu_dropout(ctx->dev, out[0].dtype, (const char *)in[0].data + (size_t)(k * run) * es,
                         (char *)out[0].data + (size_t)(k * run) * es, run, ts_attr_dropout_p(&n->a),
                         (uint64_t)ts_attr_dropout_seed(&n->a), ctx->step,
                         ts_attr_dropout_run_at(&n->a, (uint64_t)k), NULL);
  return rc;
}

static int run_permute(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int perm[TS_MAX_DIMS];
  for (int k = 0; k < in[0].shape.ndim; k++) perm[k] = (int)ts_attr_permute_perm(&n->a, k);
  return ts__gpu_permute(ctx->dev, ts_dtype_size(in[0].dtype), in[0].data, out[0].data, in[0].shape.ndim,
                         in[0].shape.dims, perm, NULL);
}

/* concat: each input's rows (outer, len_k * inner) into its place in y's rows */
static int run_concat(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int axis = (int)ts_attr_concat_axis(&n->a), rc = TS_OK;
  int64_t outer, inner, off = 0, total = out[0].shape.dims[axis];
  ts__outer_inner(&out[0].shape, axis, &outer, &inner);
  for (int k = 0; k < n->nin && !rc; k++) {
    int64_t len = in[k].shape.dims[axis] * inner;
    rc = ts__gpu_blocks(ctx->dev, ts_dtype_size(out[0].dtype), in[k].data, len, 0, out[0].data, total * inner, off, outer,
                        len, NULL);
    off += len;
  }
  return rc;
}

static int run_split(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int axis = (int)ts_attr_split_axis(&n->a), rc = TS_OK;
  int64_t outer, inner, off = 0, total = in[0].shape.dims[axis];
  ts__outer_inner(&in[0].shape, axis, &outer, &inner);
  for (int k = 0; k < n->nout && !rc; k++) {
    int64_t len = out[k].shape.dims[axis] * inner;
    rc = ts__gpu_blocks(ctx->dev, ts_dtype_size(in[0].dtype), in[0].data, total * inner, off, out[k].data, len, 0, outer,
                        len, NULL);
    off += len;
  }
  return rc;
}

static int run_slice(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int axis = (int)ts_attr_slice_axis(&n->a);
  int64_t outer, inner, L = in[0].shape.dims[axis], a = ts_attr_slice_start(&n->a), b = ts_attr_slice_end(&n->a);
  ts__outer_inner(&in[0].shape, axis, &outer, &inner);
  return ts__gpu_blocks(ctx->dev, ts_dtype_size(in[0].dtype), in[0].data, L * inner, a * inner, out[0].data,
                        (b - a) * inner, 0, outer, (b - a) * inner, NULL);
}

static int run_slice_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int axis = (int)ts_attr_slice_axis(&n->a);
  int64_t outer, inner, L = out[0].shape.dims[axis], a = ts_attr_slice_start(&n->a), b = ts_attr_slice_end(&n->a);
  ts__outer_inner(&out[0].shape, axis, &outer, &inner);
  int rc = ts__dev_memset0(ctx->dev, out[0].data, ts_tensor_nbytes(&out[0]), NULL);
  return rc ? rc : ts__gpu_blocks(ctx->dev, ts_dtype_size(out[0].dtype), in[0].data, (b - a) * inner, 0, out[0].data,
                                  L * inner, a * inner, outer, (b - a) * inner, NULL);
}

/* B, H, T, D of q's shape under the node's layout */
static void attn_dims(const ts_shape *s, int layout, int heads, int64_t *B, int64_t *H, int64_t *T, int64_t *D) {
  *B = s->dims[0];
  if (layout == 2) { /* QKV: (B, T, 3C) */
    *T = s->dims[1], *H = heads, *D = s->dims[2] / 3 / heads;
  } else if (layout == 1) { /* BTHD */
    *T = s->dims[1], *H = s->dims[2], *D = s->dims[3];
  } else { /* BHTD */
    *H = s->dims[1], *T = s->dims[2], *D = s->dims[3];
  }
}

static const void *blk(const ts_tensor *t, int j, int64_t C) {
  return (const char *)t->data + (size_t)(j * C) * ts_dtype_size(t->dtype);
}

static int run_attention(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int layout = (int)ts_attr_attention_layout(&n->a);
  int64_t B, H, T, D;
  attn_dims(&in[0].shape, layout, (int)ts_attr_attention_heads(&n->a), &B, &H, &T, &D);
  const float scale = ts_attr_attention_scale(&n->a);
  if (layout == 2) {
    int64_t C = H * D;
    return ts__gpu_attention_fwd(ctx->dev, out[0].dtype, blk(&in[0], 0, C), blk(&in[0], 1, C), blk(&in[0], 2, C),
                                 out[0].data, out[1].data, B, H, T, D, scale, layout, NULL);
  }
  return ts__gpu_attention_fwd(ctx->dev, out[0].dtype, in[0].data, in[1].data, in[2].data, out[0].data, out[1].data, B,
                               H, T, D, scale, layout, NULL);
}

static int run_attention_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int layout = (int)ts_attr_attention_layout(&n->a);
  int64_t B, H, T, D;
  attn_dims(&in[1].shape, layout, (int)ts_attr_attention_heads(&n->a), &B, &H, &T, &D);
  const float scale = ts_attr_attention_scale(&n->a);
  float *Dr = NULL;
  int rc = ts__run_dev_scratch(ctx, sizeof(float) * (size_t)(B * H * T), (void **)&Dr);
  if (rc) return rc;
  if (layout == 2) { /* (do, qkv, o, lse) -> dqkv */
    int64_t C = H * D;
    return ts__gpu_attention_bwd(ctx->dev, out[0].dtype, in[0].data, blk(&in[1], 0, C), blk(&in[1], 1, C),
                                 blk(&in[1], 2, C), in[2].data, in[3].data, (void *)blk(&out[0], 0, C),
                                 (void *)blk(&out[0], 1, C), (void *)blk(&out[0], 2, C), Dr, B, H, T, D, scale, layout,
                                 NULL);
  }
  return ts__gpu_attention_bwd(ctx->dev, out[0].dtype, in[0].data, in[1].data, in[2].data, in[3].data, in[4].data,
                               in[5].data, out[0].data, out[1].data, out[2].data, Dr, B, H, T, D, scale, layout, NULL);
}

/* softmax: f32 or bf16 (the kernels refuse others, naming the op; here the node too) */
static int node_fail(const ts__run_node *n, int rc) {
  return rc == TS_EUNSUPPORTED ? ts_error_wrap(rc, "node %s", n->name) : rc;
}

static int run_softmax(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int axis = (int)ts_attr_softmax_axis(&n->a);
  int64_t o, i;
  ts__outer_inner(&in[0].shape, axis, &o, &i);
  return node_fail(n, ts__gpu_softmax_fwd(ctx->dev, out[0].dtype, in[0].data, out[0].data, o, in[0].shape.dims[axis], i,
                                          (int)ts_attr_softmax_log(&n->a), NULL));
}

static int run_softmax_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int axis = (int)ts_attr_softmax_axis(&n->a);
  int64_t o, i;
  ts__outer_inner(&in[1].shape, axis, &o, &i);
  return node_fail(n, ts__gpu_softmax_bwd(ctx->dev, out[0].dtype, in[0].data, in[1].data, out[0].data, o,
                                          in[1].shape.dims[axis], i, (int)ts_attr_softmax_log(&n->a), NULL));
}

static int run_one_hot(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int64_t axis = ts_attr_one_hot_axis(&n->a);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < in[0].shape.ndim; d++) *(d < axis ? &outer : &inner) *= in[0].shape.dims[d];
  return ts__gpu_one_hot(ctx->dev, out[0].dtype, in[0].data, in[0].dtype == TS_I64, outer,
                         ts_attr_one_hot_depth(&n->a), inner, ts_attr_one_hot_on(&n->a), ts_attr_one_hot_off(&n->a),
                         out[0].data, NULL);
}

void ts__register_run_gpu(ts__run_fn *tab) {
  ts__register_run_gpu_conv(tab);
  tab[TS_OP_SOFTMAX] = run_softmax;
  tab[TS_OP_SOFTMAX_BWD] = run_softmax_bwd;
  tab[TS_OP_PERMUTE] = run_permute;
  tab[TS_OP_CONCAT] = run_concat;
  tab[TS_OP_SPLIT] = run_split;
  tab[TS_OP_SLICE] = run_slice;
  tab[TS_OP_SLICE_BWD] = run_slice_bwd;
  tab[TS_OP_ATTENTION] = run_attention;
  tab[TS_OP_ATTENTION_BWD] = run_attention_bwd;
  tab[TS_OP_CONST] = run_const;
  tab[TS_OP_CAST] = run_cast;
  tab[TS_OP_COPY] = run_copy;
  tab[TS_OP_RESHAPE] = run_copy;
  tab[TS_OP_MATMUL] = run_matmul;
  tab[TS_OP_DENSE] = run_dense;
  tab[TS_OP_ELTWISE] = run_eltwise;
  tab[TS_OP_ELTWISE_BWD] = run_eltwise_bwd;
  tab[TS_OP_BINARY] = run_binary;
  tab[TS_OP_SCALE] = run_scale;
  tab[TS_OP_SUM_TO] = run_sum_to;
  tab[TS_OP_REDUCE] = run_reduce;
  tab[TS_OP_REDUCE_MAX_BWD] = run_reduce_max_bwd;
  tab[TS_OP_BROADCAST_TO] = run_broadcast_to;
  tab[TS_OP_SOFTMAX_CE] = run_ce;
  tab[TS_OP_SOFTMAX_CE_BWD] = run_ce_bwd;
  tab[TS_OP_LAYERNORM] = run_layernorm;
  tab[TS_OP_LAYERNORM_BWD] = run_layernorm_bwd;
  tab[TS_OP_EMBEDDING] = run_embedding;
  tab[TS_OP_EMBEDDING_BWD] = run_embedding_bwd;
  tab[TS_OP_ONE_HOT] = run_one_hot;
  tab[TS_OP_DROPOUT] = run_dropout;
}
