/* Softmax, log-softmax and fused sparse softmax cross-entropy kernels (f32, contiguous).
 *
 * A softmax over axis k of a tensor of shape (d0..dn) sees it as (outer, len, inner) with
 * outer = d0*..*d(k-1), len = dk, inner = d(k+1)*..*dn. */
#ifndef TS_KERNELS_SOFTMAX_H
#define TS_KERNELS_SOFTMAX_H

#include <stdint.h>

#define TS_CE_IGNORE_INDEX (-100)

// x (outer,len,inner) -> y (outer,len,inner); softmax (log=0) or log-softmax (log=1) along len
int ts__softmax_fwd_ref(const float *x, float *y, int64_t outer, int64_t len, int64_t inner,
                        int log);
int ts__softmax_fwd_dnnl(const float *x, float *y, int64_t outer, int64_t len, int64_t inner,
                         int log);
// dy, y (outer,len,inner) -> dx (outer,len,inner); y is the forward output
int ts__softmax_bwd_ref(const float *dy, const float *y, float *dx, int64_t outer, int64_t len,
                        int64_t inner, int log);
int ts__softmax_bwd_dnnl(const float *dy, const float *y, float *dx, int64_t outer, int64_t len,
                         int64_t inner, int log);

/* Mean sparse softmax cross-entropy, as torch.nn.CrossEntropyLoss(ignore_index, label_smoothing=s):
 *   loss = sum_{i: label_i != ignore} [(1-s)*(lse_i - x_{i,label_i}) + s*(lse_i - mean_c x_ic)]
 *          / #{i: label_i != ignore}
 * with lse_i = log sum_c exp(x_ic). If every label is ignored the loss (and gradient) is 0 (PyTorch
 * gives NaN). Labels outside [0,C) other than ignore_index: TS_ERANGE naming the row.
 * The per-row lse is written for the backward (0 for ignored rows). Deterministic for a fixed
 * thread count (per-thread partial sums combined in order). */
// logits (N,C), labels (N) i32 (labels_i64=0) or i64 -> loss (), lse (N) (lse may be NULL)
int ts__softmax_ce_fwd_ref(const float *logits, const void *labels, int labels_i64, int64_t N,
                           int64_t C, float smoothing, int64_t ignore_index, float *loss,
                           float *lse);
// dloss (), logits (N,C), labels (N), lse (N) or NULL (recomputed) -> dlogits (N,C)
int ts__softmax_ce_bwd_ref(float dloss, const float *logits, const void *labels, int labels_i64,
                           const float *lse, int64_t N, int64_t C, float smoothing,
                           int64_t ignore_index, float *dlogits);

#endif
