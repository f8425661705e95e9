/* Softmax, log-softmax and fused sparse softmax cross-entropy kernels (f32, contiguous).
 *
 * A softmax over axis k of a tensor of shape (d0..dn) sees it as (outer, len, inner) with
 * outer = d0*..*d(k-1), len = dk, inner = d(k+1)*..*dn. */
#ifndef TS_KERNELS_SOFTMAX_H
#define TS_KERNELS_SOFTMAX_H

#include <stdint.h>

#include "tessera/tensor.h"

#define TS_CE_IGNORE_INDEX (-100)

/* 16-bit softmax / log-softmax (dt TS_BF16 or TS_F16). Along the last axis: bf16 with dnnl = 1
 * runs oneDNN softmax_v2 on bf16 memory (as f32 does on the fast path); otherwise native row
 * loops (each row widened to f32 in a per-thread buffer, the f32 row kernel, one rounding:
 * 16-bit traffic). Along another axis: f32 copies around the f32 reference kernel. */
// x (outer,len,inner) dt -> y dt
int ts__softmax_fwd_lp(ts_dtype dt, const void *x, void *y, int64_t outer, int64_t len, int64_t inner,
                       int log, int dnnl);
// dy, y (outer,len,inner) dt -> dx dt
int ts__softmax_bwd_lp(ts_dtype dt, const void *dy, const void *y, void *dx, int64_t outer,
                       int64_t len, int64_t inner, int log, int dnnl);

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

/* Class-sharded cross-entropy (Megatron's vocabulary-parallel loss). This rank holds the columns
 * [offset, offset+Cl) of the global (N,C) logits; labels are global class ids in [0,C) or
 * ignore_index (others: TS_ERANGE, checked by step 1 before the caller communicates). The loss is
 * the one of ts__softmax_ce_fwd_ref over the full logits, assembled from three local steps around
 * the caller's two allreduces over the group of ranks holding the blocks:
 *   1. rowmax_i = max_j x_ij over the local block           caller: allreduce MAX -> M (N)
 *   2. stats_i = (sum_j exp(x_ij - M_i), x_{i,label_i} if this rank holds that column else 0,
 *      sum_j x_ij)                                           caller: allreduce SUM -> stats (N,3)
 *   3. lse_i = M_i + log(S_i), loss = mean over non-ignored rows of
 *      (1-s)(lse_i - z_i) + s(lse_i - sum_i/C)  (0 if every row is ignored)
 * Ignored rows get rowmax 0, stats 0 and lse 0. Step 3 runs in a fixed order, so ranks holding the
 * same reduced values compute the same loss bit for bit. */
// logits (N,Cl), labels (N) -> rowmax (N)
int ts__softmax_ce_shard_max_ref(const float *logits, const void *labels, int labels_i64, int64_t N,
                                 int64_t Cl, int64_t C, int64_t ignore_index, float *rowmax);
// logits (N,Cl), labels (N), M (N) -> stats (N,3)
int ts__softmax_ce_shard_stats_ref(const float *logits, const void *labels, int labels_i64,
                                   int64_t N, int64_t Cl, int64_t offset, int64_t ignore_index,
                                   const float *M, float *stats);
// labels (N), M (N), stats (N,3) -> loss (), lse (N) (lse may be M itself)
int ts__softmax_ce_shard_loss_ref(const void *labels, int labels_i64, int64_t N, int64_t C,
                                  float smoothing, int64_t ignore_index, const float *M,
                                  const float *stats, float *loss, float *lse);
/* Backward on this rank's block: dlogits = (exp(x - lse) - (1-s)*onehot(label - offset) - s/C)
 * * dloss / count, count = non-ignored rows (of the global labels), ignored rows 0. dloss is the
 * total over the group (the caller reduces it), lse the global one from the forward. With Cl == C
 * and offset 0 it is ts__softmax_ce_bwd_ref, bit for bit. */
// dloss (), logits (N,Cl), labels (N), lse (N) -> dlogits (N,Cl)
int ts__softmax_ce_shard_bwd_ref(float dloss, const float *logits, const void *labels,
                                 int labels_i64, const float *lse, int64_t N, int64_t Cl, int64_t C,
                                 int64_t offset, float smoothing, int64_t ignore_index,
                                 float *dlogits);

/* Cross-entropy on 16-bit logits (dt TS_BF16 or TS_F16; TS_F32 runs the f32 kernels above): native
 * row loops, each row widened into a per-thread f32 buffer and run through the f32 kernels' row
 * code, so loss, lse, rowmax and stats (f32 as always) are the f32 kernels' on the widened
 * logits, and dlogits (dtype dt) are theirs rounded once. Same contracts as the f32 kernels. */
// logits (N,C) dt, labels (N) -> loss (), lse (N) (lse may be NULL)
int ts__softmax_ce_fwd_lp(ts_dtype dt, const void *logits, const void *labels, int labels_i64, int64_t N, int64_t C,
                          float smoothing, int64_t ignore_index, float *loss, float *lse);
// dloss (), logits (N,C) dt, labels (N), lse (N) or NULL -> dlogits (N,C) dt
int ts__softmax_ce_bwd_lp(ts_dtype dt, float dloss, const void *logits, const void *labels, int labels_i64,
                          const float *lse, int64_t N, int64_t C, float smoothing, int64_t ignore_index,
                          void *dlogits);
// logits (N,Cl) dt, labels (N) -> rowmax (N)
int ts__softmax_ce_shard_max_lp(ts_dtype dt, const void *logits, const void *labels, int labels_i64, int64_t N,
                                int64_t Cl, int64_t C, int64_t ignore_index, float *rowmax);
// logits (N,Cl) dt, labels (N), M (N) -> stats (N,3)
int ts__softmax_ce_shard_stats_lp(ts_dtype dt, const void *logits, const void *labels, int labels_i64, int64_t N,
                                  int64_t Cl, int64_t offset, int64_t ignore_index, const float *M, float *stats);
// dloss (), logits (N,Cl) dt, labels (N), lse (N) -> dlogits (N,Cl) dt
int ts__softmax_ce_shard_bwd_lp(ts_dtype dt, float dloss, const void *logits, const void *labels, int labels_i64,
                                const float *lse, int64_t N, int64_t Cl, int64_t C, int64_t offset, float smoothing,
                                int64_t ignore_index, void *dlogits);

/* Evaluation's metrics of one row of logits against its label (ts__eval_rows_ref; a GPU's from
 * ts__eval_rows_finish of its per-row statistics). */
typedef struct {
  double nll;     /* logsumexp(z) - z[label], in double (0 when not finite) */
  int32_t above;  /* how many logits exceed the label's (0: a top-1 hit, < 5: top-5) */
  int32_t finite; /* 1 when every logit of the row is finite, else 0 (neither a loss nor a prediction) */
} ts__eval_row;
/* Each row alone (exp and the sums in double), the rows shared by the threads: the same values
 * whatever the thread count. Labels must be in [0,C) (the caller checks them, naming the sample). */
// logits (N,C), labels (N) i32 -> rows (N)
void ts__eval_rows_ref(const float *logits, const int32_t *labels, int64_t N, int64_t C, ts__eval_row *rows);
/* A GPU's rows from its per-row statistics (ts_k_eval_rows_f32): st (N,4) = (max, sum exp(z - max),
 * z[label], the count of logits above z[label], or -1 when a logit is not finite); nll =
 * max + log(sum) - z[label] in double. */
// st (N,4) -> rows (N)
void ts__eval_rows_finish(const float *st, int64_t N, ts__eval_row *rows);

#endif
