/* Internal: the GPU's kernel table (gpu_kernels.c): one host function per kernel family of
 * src/device/cuda/, each choosing the launch shape from the sizes alone (so the reductions'
 * order, and the bits, are the same every run) and launching on stream s (NULL: compute). The
 * signatures mirror the CPU kernels of src/kernels/ they are checked against (tests/device/).
 * Pointers are device pointers; scalars that the step computes on the device (dloss, the clip
 * factor, counts) stay there. dt: TS_F32 or TS_BF16 (TS_EDTYPE otherwise). */
#ifndef TS_DEVICE_GPU_KERNELS_H
#define TS_DEVICE_GPU_KERNELS_H

#include <stdint.h>

#include "tessera/tensor.h"
#include "device/dev.h"
#include "kernels/conv.h"
#include "kernels/matmul.h"
#include "kernels/pool.h"

/* x (n) -> y (n), activation alg (ts_eltwise_alg), alpha the ReLU slope */
int ts__gpu_eltwise_fwd(ts__dev *d, int alg, float alpha, ts_dtype dt, const void *x, void *y, int64_t n,
                        ts__dev_stream *s);
/* dy (n), src = y (use_dst) or x (n) -> dx (n) */
int ts__gpu_eltwise_bwd(ts__dev *d, int alg, float alpha, int use_dst, ts_dtype dt, const void *dy, const void *src,
                        void *dx, int64_t n, ts__dev_stream *s);
/* x (n) of dtype from -> y (n) of dtype to (between f32, bf16 and f16: rounding to nearest even) */
int ts__gpu_cast(ts__dev *d, ts_dtype from, ts_dtype to, const void *x, void *y, int64_t n, ts__dev_stream *s);
/* y (n) = v */
int ts__gpu_fill(ts__dev *d, float *y, float v, int64_t n, ts__dev_stream *s);
/* y = a x + b y */
int ts__gpu_axpby(ts__dev *d, float a, const float *x, float b, float *y, int64_t n, ts__dev_stream *s);
/* out[0] = sum of x (n) (sq: of its squares); scratch: ts__gpu_sum_scratch(n) floats of device
 * memory. Deterministic. */
int64_t ts__gpu_sum_scratch(int64_t n);
int ts__gpu_sum(ts__dev *d, int sq, const float *x, int64_t n, float *scratch, float *out, ts__dev_stream *s);
/* flag[0] = 1 if some x (n) is not finite (flag zeroed by the caller) */
int ts__gpu_nonfinite(ts__dev *d, const float *x, int64_t n, int *flag, ts__dev_stream *s);

/* Sparse softmax cross-entropy (ts__softmax_ce_fwd_ref): logits (N,C) dt, labels (N) i32/i64 ->
 * loss (1), lse (N), and count (1, the rows not ignored) for the backward; scratch: N + 1 floats
 * of device memory (the rows' losses) and 1 int64 (bad: 1 + a row with a label out of range,
 * checked by the caller after synchronising, 0 when none). */
int ts__gpu_softmax_ce_fwd(ts__dev *d, ts_dtype dt, const void *logits, const void *labels, int labels_i64, int64_t N,
                           int64_t C, float smoothing, int64_t ignore_index, float *loss, float *lse, float *count,
                           float *rowloss, int64_t *bad, ts__dev_stream *s);
/* dloss (1, device), logits (N,C), labels, lse (N), count (1) -> dlogits (N,C) */
int ts__gpu_softmax_ce_bwd(ts__dev *d, ts_dtype dt, const float *dloss, const void *logits, const void *labels,
                           int labels_i64, const float *lse, int64_t N, int64_t C, float smoothing,
                           int64_t ignore_index, const float *count, void *dlogits, ts__dev_stream *s);
/* Class-sharded (ts__softmax_ce_shard_*_ref, Megatron's vocabulary-parallel loss): logits (N,Cl)
 * are columns [off, off + Cl) of the (N,C) ones; the caller reduces between the steps:
 *   max: rowmax (N) of the block (0 for ignored rows), bad as ts__gpu_softmax_ce_fwd's
 *        -> the caller all-reduces MAX into M;
 *   stats: (N,3) = (sum exp(x - M), x at the label where held else 0, sum x) -> all-reduce SUM;
 *   loss: lse (N), loss (1) and count (1) from M and the reduced stats (M and lse may not alias);
 *   bwd: dloss (1, the group's total) -> dlogits (N,Cl) of the block (Cl = C, off 0: unsharded). */
int ts__gpu_softmax_ce_shard_max(ts__dev *d, ts_dtype dt, const void *logits, const void *labels, int labels_i64,
                                 int64_t N, int64_t Cl, int64_t C, int64_t ignore_index, float *rowmax, int64_t *bad,
                                 ts__dev_stream *s);
int ts__gpu_softmax_ce_shard_stats(ts__dev *d, ts_dtype dt, const void *logits, const void *labels, int labels_i64,
                                   int64_t N, int64_t Cl, int64_t off, int64_t ignore_index, const float *M,
                                   float *stats, ts__dev_stream *s);
int ts__gpu_softmax_ce_shard_loss(ts__dev *d, const void *labels, int labels_i64, int64_t N, int64_t C,
                                  float smoothing, int64_t ignore_index, const float *M, const float *stats, float *loss,
                                  float *lse, float *count, ts__dev_stream *s);
int ts__gpu_softmax_ce_shard_bwd(ts__dev *d, ts_dtype dt, const float *dloss, const void *logits, const void *labels,
                                 int labels_i64, const float *lse, int64_t N, int64_t Cl, int64_t C, int64_t off,
                                 float smoothing, int64_t ignore_index, const float *count, void *dlogits,
                                 ts__dev_stream *s);
/* Evaluation's per-row statistics (ts_k_eval_rows_f32; ts__eval_rows_finish turns them into
 * ts__eval_rows_ref's rows): logits (N,C) f32, labels (N) i32 in [0,C) -> st (N,4). C below 2^24
 * (TS_EUNSUPPORTED otherwise: the caller evaluates on the host). */
#define TS__GPU_EVAL_MAX_C ((int64_t)1 << 24)
int ts__gpu_eval_rows(ts__dev *d, const float *logits, const int32_t *labels, int64_t N, int64_t C, float *st,
                      ts__dev_stream *s);

/* Layer norm over rows of D (ts__layernorm_fwd_ref / _bwd_ref): gamma, beta f32 (D) or NULL;
 * the _g variants take gamma, beta, dgamma, dbeta of dtype gdt (f32, or bf16 with bf16 x); the
 * backward's ws: ts__gpu_layernorm_bwd_workspace(R, D) bytes of device memory (dgamma and dbeta's
 * partial sums) */
size_t ts__gpu_layernorm_bwd_workspace(int64_t R, int64_t D);
int ts__gpu_layernorm_fwd_g(ts__dev *d, ts_dtype dt, ts_dtype gdt, const void *x, const void *gamma, const void *beta,
                            void *y, float *mean, float *var, int64_t R, int64_t D, float eps, ts__dev_stream *s);
int ts__gpu_layernorm_bwd_g(ts__dev *d, ts_dtype dt, ts_dtype gdt, const void *dy, const void *x, const void *gamma,
                            const float *mean, const float *var, void *dx, void *dgamma, void *dbeta, int64_t R,
                            int64_t D, float eps, void *ws, ts__dev_stream *s);
int ts__gpu_layernorm_fwd(ts__dev *d, ts_dtype dt, const void *x, const float *gamma, const float *beta, void *y,
                          float *mean, float *var, int64_t R, int64_t D, float eps, ts__dev_stream *s);
int ts__gpu_layernorm_bwd(ts__dev *d, ts_dtype dt, const void *dy, const void *x, const float *gamma,
                          const float *mean, const float *var, void *dx, float *dgamma, float *dbeta, int64_t R,
                          int64_t D, float eps, void *ws, ts__dev_stream *s);

/* Optimizer updates over a flat buffer (src/optim/optim.c's k_sgd, k_momentum, k_adam) */
int ts__gpu_sgd(ts__dev *d, float *p, const float *g, int64_t n, float lr, float wd, ts__dev_stream *s);
int ts__gpu_momentum(ts__dev *d, float *p, const float *g, float *buf, int64_t n, float lr, float wd, float mu,
                     float one_m_damp, int first, int nesterov, ts__dev_stream *s);
int ts__gpu_adam(ts__dev *d, float *p, const float *g, float *m, float *v, int64_t n, float l2, float decay_mul,
                 float b1, float one_m_b1, float b2, float one_m_b2, float bc2_sqrt, float eps, float neg_step,
                 ts__dev_stream *s);
/* SGD, momentum, Adam/AdamW over every segment in one launch (optim.cu's ts_k_optim_multi): ch
 * (device) lists chunks [lo, hi) of the flat buffers, at most TS__GPU_MCHUNK elements each, none
 * across segments, frozen ones absent, each with its segment's decay on or off (ts__gpu_mchunks
 * builds them); a: the step's scalars for a decayed segment (wd for SGD/momentum; l2 and decay_mul
 * for Adam/AdamW: Adam l2 = wd, decay_mul 1; AdamW l2 0, decay_mul = 1 - lr wd), an undecayed one
 * gets wd 0, l2 0, decay_mul 1. Bitwise the per-segment kernels. kind: 0 SGD, 1 momentum, 2 Adam. */
#define TS__GPU_MCHUNK 4096
typedef struct {
  int64_t lo, hi, decay;
} ts__gpu_mchunk;
typedef struct {
  float lr, wd, mu, one_m_damp, l2, decay_mul, b1, omb1, b2, omb2, bc2_sqrt, eps, neg_step;
  int first, nesterov;
} ts__gpu_optim_args;
/* the chunks of segments (offset, numel, decay) into out (capacity cap; NULL: count only); returns
 * how many */
int64_t ts__gpu_mchunks(const int64_t *off, const int64_t *numel, const int *decay, int nseg, ts__gpu_mchunk *out,
                        int64_t cap);
int ts__gpu_optim_multi(ts__dev *d, int kind, float *p, const float *g, float *m, float *v, const ts__gpu_mchunk *ch,
                        int64_t nch, const ts__gpu_optim_args *a, ts__dev_stream *s);
/* LAMB over one segment (optim.c's step_lamb): pass 1 updates m, v and writes the direction u
 * (n floats of scratch), the sums of squares of p and u go to sq[0], sq[1] (device; scratch as
 * ts__gpu_sum's), pass 2 applies the trust ratio (adapt: lamb_always_adapt or wd != 0) */
int ts__gpu_lamb(ts__dev *d, float *p, const float *g, float *m, float *v, int64_t n, float b1, float omb1, float b2,
                 float omb2, float inv_bc1, float inv_bc2, float eps, float wd, float lr, int adapt, float *u,
                 float *scratch, float *sq, ts__dev_stream *s);
/* The two passes apart, for norms summed over ranks in between (sliced parameters, optimizer
 * shards): the direction u and the sums sq[0..1]; then the update from u and the (reduced) sq */
int ts__gpu_lamb_dir(ts__dev *d, float *p, const float *g, float *m, float *v, int64_t n, float b1, float omb1,
                     float b2, float omb2, float inv_bc1, float inv_bc2, float eps, float wd, float *u, float *scratch,
                     float *sq, ts__dev_stream *s);
int ts__gpu_lamb_apply(ts__dev *d, float *p, const float *u, int64_t n, float lr, const float *sq, int adapt,
                       ts__dev_stream *s);
/* Global-norm clipping on the device: the norm of g (n) from its partial sums (scratch as
 * ts__gpu_sum's), fs[0] = min(1, max_norm / (norm + 1e-6)) and fs[1] = the norm, then g *= fs[0] */
int ts__gpu_clip(ts__dev *d, float *g, int64_t n, float max_norm, float *scratch, float *fs, ts__dev_stream *s);

/* GEMM (src/kernels/matmul.h's ts__mm_desc): c = op(a) op(b) (+ bias (N) broadcast over rows and
 * batch; NULL: none); ab_dt the operands' and bias's dtype (f32, bf16; f16 -> f16 where cuBLAS
 * runs the GEMMs), c_dt c's (ab_dt, or f32 from bf16 operands). Dense y = x w^T + b is
 * {1, M, N, K, 0, 1, 0, 0}. */
int ts__gpu_gemm(ts__dev *d, const ts__mm_desc *m, ts_dtype ab_dt, ts_dtype c_dt, const void *a, const void *b,
                 const void *bias, void *c, ts__dev_stream *s);
/* Which GEMM ts__gpu_gemm runs: cuBLAS where it is found (cublas.c), else Tessera's own kernel
 * (gemm.cu); TESSERA_GPU_GEMM=tessera forces the own kernel, =cublas refuses to run without
 * cuBLAS. The name of the one in use, and the reason when cuBLAS is not ("" else). */
const char *ts__gpu_gemm_impl(const char **why);
/* f32 GEMMs (cuBLAS: CUBLAS_COMPUTE_32F_FAST_TF32) and convolutions (cuDNN: tensor-op math) on TF32
 * tensor cores (1) or in real f32 (0, the default); process-wide, set before the first f32 GEMM or
 * convolution is planned (the trainer: float32_matmul_precision). Tessera's own kernels stay real
 * f32. */
void ts__gpu_set_tf32(int on);
int ts__gpu_tf32(void);
/* The GEMM peak of dtype dt (f32 or bf16, operands and result) on d, in GFLOP/s, and the size
 * n of the n^3 products that gave it (gpu_peak.c: grown while a product takes under 1 ms, then
 * the best of 3 batches of 5, timed with the device's events). */
int ts__gpu_gemm_peak(ts__dev *d, ts_dtype dt, int64_t *n, double *gflops);
/* cuBLAS (cublas.c): loaded at the first call; TS_EUNSUPPORTED with the reason when absent */
int ts__cublas_available(void);
const char *ts__cublas_why(void);
int ts__cublas_gemm(ts__dev *d, const ts__mm_desc *m, ts_dtype ab_dt, ts_dtype c_dt, const void *a, const void *b,
                    const void *bias, void *c, ts__dev_stream *s);
/* y (C) = the column sums of x (R, C) (a bias's gradient), rows in order; f32 or bf16 */
int ts__gpu_col_sum(ts__dev *d, ts_dtype dt, const void *x, int64_t R, int64_t C, void *y, ts__dev_stream *s);
/* Dropout with the CPU's mask bit for bit (ts__dropout_ref): x (n) -> y (n), elements numbered
 * from offset; p in [0, 1] */
int ts__gpu_dropout(ts__dev *d, ts_dtype dt, const void *x, void *y, int64_t n, float p, uint64_t seed, uint64_t step,
                    uint64_t offset, ts__dev_stream *s);
/* One-hot (ts__one_hot_ref): ids (outer*inner, i32 or i64) -> y (outer, depth, inner) of dtype dt
 * (f32, i32, bf16, f16: 4- or 2-byte types; others TS_EDTYPE): on where the id equals the index
 * along depth, off elsewhere. */
int ts__gpu_one_hot(ts__dev *d, ts_dtype dt, const void *ids, int ids_i64, int64_t outer, int64_t depth,
                    int64_t inner, float on, float off, void *y, ts__dev_stream *s);
/* Embedding: table (V, D) dt, ids (N) i32/i64 -> y (N, D); bad (1 int64 of device memory): 1 + a
 * position whose id is outside [0, V) (its row zeroed), 0 when none (the caller checks it after
 * synchronising). Backward: dy (N, D) f32 -> dtable (V, D) f32, overwritten, as
 * ts__embedding_bwd_ref (each element summed in token order). Vocabulary-sharded (sharded 1, as
 * ts__embedding_shard_fwd_ref / _bwd_ref): the table holds rows [off, off + V) of the whole one,
 * other ids give zero rows forward and nothing backward, only negative ids are bad; unsharded: off
 * 0, sharded 0. */
int ts__gpu_embedding_fwd(ts__dev *d, ts_dtype dt, const void *table, int64_t V, int64_t D, int64_t off, int sharded,
                          const void *ids, int ids_i64, int64_t N, void *y, int64_t *bad, ts__dev_stream *s);
/* dtable (V, D) of dt (f32, bf16) = for each id in [off, off + V) the sum of its tokens' dy rows in
 * token order (f32 sums, bf16 rounded once: ts__embedding_bwd(_lp)'s, bitwise); ws:
 * ts__gpu_embedding_bwd_workspace(dt, N, V, D) bytes of device memory */
size_t ts__gpu_embedding_bwd_workspace(ts_dtype dt, int64_t N, int64_t V, int64_t D);
int ts__gpu_embedding_bwd(ts__dev *d, ts_dtype dt, const void *dy, const void *ids, int ids_i64, int64_t N, int64_t V,
                          int64_t D, int64_t off, void *dtable, void *ws, ts__dev_stream *s);

/* y (ys) = a (as) op b (bs) with numpy broadcasting (ts_binary_alg), f32 or bf16; TS_ESHAPE when
 * an operand does not broadcast to y; at most 8 dims */
int ts__gpu_binary(ts__dev *d, int alg, ts_dtype dt, const void *a, const ts_shape *as, const void *b,
                   const ts_shape *bs, void *y, const ts_shape *ys, ts__dev_stream *s);
/* SUM_TO: x (xs) summed to y (ys: xs with some dims 1, or fewer leading dims). ws (here and in
 * ts__gpu_reduce): ts__gpu_reduce_workspace(xs, ys) bytes of device memory (the partial sums when
 * the reduced dims lead: a bias's gradient), NULL when that is 0 */
size_t ts__gpu_reduce_workspace(const ts_shape *xs, const ts_shape *ys);
int ts__gpu_sum_to(ts__dev *d, ts_dtype dt, const void *x, const ts_shape *xs, void *y, const ts_shape *ys, void *ws,
                   ts__dev_stream *s);
/* REDUCE (src/kernels/reduce.h: ys in keepdim form): alg ts_reduce_alg (sum, mean, max); max's
 * backward (ties share dy equally); BROADCAST_TO (x up to ys, NumPy rules) */
int ts__gpu_reduce(ts__dev *d, int alg, ts_dtype dt, const void *x, const ts_shape *xs, void *y, const ts_shape *ys,
                   void *ws, ts__dev_stream *s);
int ts__gpu_reduce_max_bwd(ts__dev *d, ts_dtype dt, const void *dy, const void *x, const ts_shape *xs, const void *y,
                           const ts_shape *ys, void *dx, ts__dev_stream *s);
int ts__gpu_broadcast(ts__dev *d, ts_dtype dt, const void *x, const ts_shape *xs, void *y, const ts_shape *ys,
                      ts__dev_stream *s);
/* y (n) = alpha x + beta */
int ts__gpu_scale(ts__dev *d, ts_dtype dt, const void *x, void *y, int64_t n, float alpha, float beta,
                  ts__dev_stream *s);
/* y (n) of dtype dt (f32, bf16, f16) = v */
int ts__gpu_fill_dt(ts__dev *d, ts_dtype dt, void *y, float v, int64_t n, ts__dev_stream *s);
/* count[0] = the labels (N) that are not ignore_index */
int ts__gpu_label_count(ts__dev *d, const void *labels, int labels_i64, int64_t N, int64_t ignore_index, float *count,
                        ts__dev_stream *s);

/* PERMUTE (ts__permute_ref): x (dims, ndim <= 8) -> y with y.dims[k] = dims[perm[k]]; elements
 * of esize 1 (max pooling's window indices), 2, 4 or 8 bytes */
int ts__gpu_permute(ts__dev *d, size_t esize, const void *x, void *y, int ndim, const int64_t *dims, const int *perm,
                    ts__dev_stream *s);
/* rows of len elements: y[r * ystride + yoff + c] = x[r * xstride + xoff + c] (concat, split,
 * slice and slice's backward are made of it); esize 2, 4 or 8 */
int ts__gpu_blocks(ts__dev *d, size_t esize, const void *x, int64_t xstride, int64_t xoff, void *y, int64_t ystride,
                   int64_t yoff, int64_t rows, int64_t len, ts__dev_stream *s);
/* Causal attention (src/kernels/attention.h: layouts TS_ATTN_BHTD, BTHD, QKV with q, k, v the
 * blocks of the packed tensor), f32 or bf16, D <= 256: q, k, v -> o, lse (B, H, T) */
int ts__gpu_attention_fwd(ts__dev *d, ts_dtype dt, const void *q, const void *k, const void *v, void *o, float *lse,
                          int64_t B, int64_t H, int64_t T, int64_t D, float scale, int layout, ts__dev_stream *s);
/* (do, q, k, v, o, lse) -> dq, dk, dv (overwritten); Dr: B*H*T floats of device scratch */
int ts__gpu_attention_bwd(ts__dev *d, ts_dtype dt, const void *dout, const void *q, const void *k, const void *v,
                          const void *o, const float *lse, void *dq, void *dk, void *dv, float *Dr, int64_t B,
                          int64_t H, int64_t T, int64_t D, float scale, int layout, ts__dev_stream *s);

/* Convolution (src/kernels/conv.h's ts__conv_desc; NCHW, OIHW, groups, dilation), pooling
 * (pool.h's ts__pool_desc; max with its u8 window-index workspace, average excluding padding),
 * batch norm (norm.h: training statistics and running averages, or inference), softmax (log
 * when lg) over (outer, len, inner): one thread per output element (direct kernels). Storage of
 * dtype dt, f32 or bf16 (every buffer of it, the convolution's bias and db included, as the CPU's
 * 16-bit kernels; f32 sums, each output rounded once); batch norm's gamma, beta, dgamma, dbeta of
 * gdt (f32, or bf16 with bf16 x), its statistics and running averages f32. Other dtypes:
 * TS_EUNSUPPORTED naming the op. */
/* The convolutions run through cuDNN where it is found (cudnn.c: its heuristics' first
 * deterministic algorithm, real f32 or bf16 with f32 compute), else through the direct kernels
 * (conv.cu); ws is device scratch of at least ts__gpu_conv2d_workspace's bytes for the direction
 * (0 forward, 1 backward data, 2 backward weight; 0 bytes with the direct kernels).
 * dt: f32, bf16, or f16 (cuDNN only).
 * cl (channels last, PyTorch's channels_last): x, y, dy, dx are NHWC and w, dw OHWI (KRSC); cuDNN
 * only (ts__gpu_conv2d_on_cudnn says whether it runs the direction so; TS_EUNSUPPORTED otherwise). */
int ts__gpu_conv2d_workspace(const ts__conv_desc *c, ts_dtype dt, int cl, int dir, size_t *bytes);
int ts__gpu_conv2d_fwd(ts__dev *d, const ts__conv_desc *c, ts_dtype dt, int cl, const void *x, const void *w,
                       const void *b, void *y, void *ws, size_t ws_bytes, ts__dev_stream *s);
int ts__gpu_conv2d_bwd_data(ts__dev *d, const ts__conv_desc *c, ts_dtype dt, int cl, const void *dy, const void *w,
                            void *dx, void *ws, size_t ws_bytes, ts__dev_stream *s);
int ts__gpu_conv2d_bwd_weight(ts__dev *d, const ts__conv_desc *c, ts_dtype dt, int cl, const void *x, const void *dy,
                              void *dw, void *db, void *ws, size_t ws_bytes, ts__dev_stream *s);
/* 1 when cuDNN is the convolution in use and runs this direction of the shape in dt, NCHW (cl 0)
 * or channels last (cl 1), with a deterministic (real-f32) algorithm: where it does, GPU plans keep
 * the convolution's activations NHWC (runtime/run_gpu_conv.c) and f16 convolutions skip their f32
 * copies (runtime/run_gpu_lowp.c) */
int ts__gpu_conv2d_on_cudnn(const ts__conv_desc *c, ts_dtype dt, int cl, int dir);
/* Which convolution runs: cuDNN where it is found, else Tessera's direct kernels;
 * TESSERA_GPU_CONV=tessera forces the own kernels, =cudnn refuses to run without cuDNN. The name
 * of the one in use ("cudnn" or "tessera"), and the reason when cuDNN is not ("" else). */
const char *ts__gpu_conv_impl(const char **why);
/* cuDNN (cudnn.c): loaded at the first call; TS_EUNSUPPORTED with the reason when absent.
 * ts__cudnn_conv: dir 0 a = x, b = w, out = y; 1 a = dy, b = w, out = dx; 2 a = x, b = dy,
 * out = dw; out = conv + beta out. */
int ts__cudnn_available(void);
const char *ts__cudnn_why(void);
int ts__cudnn_conv_workspace(const ts__conv_desc *c, ts_dtype dt, int cl, int dir, size_t *bytes);
/* 0 when cuDNN has no deterministic (real-f32) algorithm within the workspace bound for the shape
 * and direction (its convolutions then run on the direct kernels), else 1 (other errors surface at
 * the call) */
int ts__cudnn_conv_has_algo(const ts__conv_desc *c, ts_dtype dt, int cl, int dir);
/* cl: NHWC tensors and OHWI filters (cuDNN's CUDNN_TENSOR_NHWC for all three) */
int ts__cudnn_conv(ts__dev *d, const ts__conv_desc *c, ts_dtype dt, int cl, int dir, const void *a, const void *b,
                   void *out, float beta, void *ws, size_t ws_bytes, ts__dev_stream *s);
/* Pooling; cl: x, y, dy, dx (and max pooling's window indices) NHWC, the same sums in the same
 * order as NCHW (bitwise the same values) */
int ts__gpu_maxpool_fwd(ts__dev *d, const ts__pool_desc *p, ts_dtype dt, int cl, const void *x, void *y, uint8_t *ws,
                        ts__dev_stream *s);
int ts__gpu_maxpool_bwd(ts__dev *d, const ts__pool_desc *p, ts_dtype dt, int cl, const void *dy, const uint8_t *ws,
                        void *dx, ts__dev_stream *s);
int ts__gpu_avgpool_fwd(ts__dev *d, const ts__pool_desc *p, ts_dtype dt, int cl, const void *x, void *y,
                        ts__dev_stream *s);
int ts__gpu_avgpool_bwd(ts__dev *d, const ts__pool_desc *p, ts_dtype dt, int cl, const void *dy, void *dx,
                        ts__dev_stream *s);
/* Batch norm over x (N,C,S) of dtype dt (f32, bf16), gamma/beta (and dgamma/dbeta) of gdt (f32,
 * or bf16 with bf16 x), as the CPU's ts__bn_fwd/_bwd (batchnorm.cu: sums parallel over each
 * channel's positions, folded in a fixed order; y = x a + b; dx = A dy + B x + K). ws: device
 * memory of ts__gpu_bn_workspace(N, C, S) bytes. relu (NULL: none): the following ReLU fused as the
 * executor's BN+ReLU fusion: the forward writes relu(x a + b) and keeps a, b in relu->ab (2C floats
 * of device memory); the backward takes dy of the ReLU's output and its gradient through the
 * ReLU recomputed from x and ab (bitwise the unfused BN and ReLU nodes). */
typedef struct {
  float alpha; /* the ReLU's negative slope */
  float *ab;   /* 2C floats (device) */
} ts__gpu_bn_relu;
size_t ts__gpu_bn_workspace(int64_t N, int64_t C, int64_t S);
int ts__gpu_batchnorm_fwd(ts__dev *d, ts_dtype dt, ts_dtype gdt, const void *x, const void *gamma, const void *beta,
                          float *rmean, float *rvar, void *y, float *mean, float *var, int64_t N, int64_t C, int64_t S,
                          float momentum, float eps, int training, const ts__gpu_bn_relu *relu, void *ws,
                          ts__dev_stream *s);
int ts__gpu_batchnorm_bwd(ts__dev *d, ts_dtype dt, ts_dtype gdt, const void *dy, const void *x, const void *gamma,
                          const float *mean, const float *var, void *dx, void *dgamma, void *dbeta, int64_t N, int64_t C,
                          int64_t S, float eps, int training, const ts__gpu_bn_relu *relu, void *ws, ts__dev_stream *s);
/* SyncBatchNorm's steps around the caller's exchange (an all-gather of every rank's part, summed in
 * rank order by ts__gpu_sum_rows: the same totals on every rank); ws as above:
 *   forward: part (2C+1 floats) = per channel sum (x - K), sum (x - K)^2 (K: the running mean, the
 *     same shift on every rank) and the count; ts__gpu_bn_sync_stats: mean and biased variance from
 *     the totals, the running ones updated; then ts__gpu_batchnorm_fwd with them as its running
 *     statistics (training 0);
 *   backward: part = per channel sum dy and sum dy (x - mean) and the count, dgamma and dbeta from
 *     this rank's sums; ts__gpu_bn_bwd_dx: dx through the totals. */
int ts__gpu_bn_fwd_sums(ts__dev *d, ts_dtype dt, const void *x, const float *K, int64_t N, int64_t C, int64_t S,
                        float *part, void *ws, ts__dev_stream *s);
int ts__gpu_sum_rows(ts__dev *d, const float *all, int64_t P, int64_t n, float *out, ts__dev_stream *s);
int ts__gpu_bn_sync_stats(ts__dev *d, const float *tot, const float *K, int64_t C, float momentum, float *rmean,
                          float *rvar, float *mean, float *var, ts__dev_stream *s);
int ts__gpu_bn_bwd_sums(ts__dev *d, ts_dtype dt, ts_dtype gdt, const void *dy, const void *x, const float *mean,
                        const float *var, void *dgamma, void *dbeta, int64_t N, int64_t C, int64_t S, float eps,
                        const ts__gpu_bn_relu *relu, float *part, void *ws, ts__dev_stream *s);
int ts__gpu_bn_bwd_dx(ts__dev *d, ts_dtype dt, ts_dtype gdt, const void *dy, const void *x, const void *gamma,
                      const float *mean, const float *var, const float *tot, void *dx, int64_t N, int64_t C, int64_t S,
                      float eps, const ts__gpu_bn_relu *relu, void *ws, ts__dev_stream *s);
int ts__gpu_softmax_fwd(ts__dev *d, ts_dtype dt, const void *x, void *y, int64_t outer, int64_t len, int64_t inner, int lg,
                        ts__dev_stream *s);
int ts__gpu_softmax_bwd(ts__dev *d, ts_dtype dt, const void *dy, const void *y, void *dx, int64_t outer, int64_t len,
                        int64_t inner, int lg, ts__dev_stream *s);

#endif
