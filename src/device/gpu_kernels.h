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

/* x (n) -> y (n), activation alg (ts_eltwise_alg), alpha the ReLU slope */
int ts__gpu_eltwise_fwd(ts__dev *d, int alg, float alpha, ts_dtype dt, const void *x, void *y, int64_t n,
                        ts__dev_stream *s);
/* dy (n), src = y (use_dst) or x (n) -> dx (n) */
int ts__gpu_eltwise_bwd(ts__dev *d, int alg, float alpha, int use_dst, ts_dtype dt, const void *dy, const void *src,
                        void *dx, int64_t n, ts__dev_stream *s);
/* x (n) of dtype from -> y (n) of dtype to (f32 <-> bf16) */
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

/* Layer norm over rows of D (ts__layernorm_fwd_ref / _bwd_ref): gamma, beta f32 (D) or NULL */
int ts__gpu_layernorm_fwd(ts__dev *d, ts_dtype dt, const void *x, const float *gamma, const float *beta, void *y,
                          float *mean, float *var, int64_t R, int64_t D, float eps, ts__dev_stream *s);
int ts__gpu_layernorm_bwd(ts__dev *d, ts_dtype dt, const void *dy, const void *x, const float *gamma,
                          const float *mean, const float *var, void *dx, float *dgamma, float *dbeta, int64_t R,
                          int64_t D, float eps, ts__dev_stream *s);

/* Optimizer updates over a flat buffer (src/optim/optim.c's k_sgd, k_momentum, k_adam) */
int ts__gpu_sgd(ts__dev *d, float *p, const float *g, int64_t n, float lr, float wd, ts__dev_stream *s);
int ts__gpu_momentum(ts__dev *d, float *p, const float *g, float *buf, int64_t n, float lr, float wd, float mu,
                     float one_m_damp, int first, int nesterov, ts__dev_stream *s);
int ts__gpu_adam(ts__dev *d, float *p, const float *g, float *m, float *v, int64_t n, float l2, float decay_mul,
                 float b1, float one_m_b1, float b2, float one_m_b2, float bc2_sqrt, float eps, float neg_step,
                 ts__dev_stream *s);
/* Global-norm clipping on the device: the norm of g (n) from its partial sums (scratch as
 * ts__gpu_sum's), fs[0] = min(1, max_norm / (norm + 1e-6)) and fs[1] = the norm, then g *= fs[0] */
int ts__gpu_clip(ts__dev *d, float *g, int64_t n, float max_norm, float *scratch, float *fs, ts__dev_stream *s);

#endif
