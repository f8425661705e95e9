// Sparse softmax cross-entropy, mean over the rows whose label is not ignore_index, with label
// smoothing s (torch.nn.CrossEntropyLoss): one block per row for the row's log-sum-exp and loss,
// then one block sums the rows' losses and counts in a fixed order; the backward reads dloss and
// the count on the device. CPU reference: src/kernels/softmax.c (ts__softmax_ce_fwd_ref/_bwd_ref).
#include "ts_cuda.h"

DEV i64 label_of(const void *labels, int i64l, i64 r) {
  return i64l ? ((const i64 *)labels)[r] : (i64)((const int *)labels)[r];
}

// a row's sum exp(x - m) and sum x over the block (every thread gets them)
template <typename T> DEV void row_sums(const T *row, i64 n, float m, float *sh, float *se_out, float *sx_out) {
  float se = 0.0f, sx = 0.0f;
  for (i64 c = tid(); c < n; c += ntid()) {
    float v = ld(row, c);
    se += fexp(v - m);
    sx += v;
  }
  *se_out = block_sum(se, sh);
  *sx_out = block_sum(sx, sh);
}

// logits (N,C), labels (N) -> rowloss (N) (0 for ignored rows), lse (N); bad[0] = 1 + the first
// row whose label is out of [0,C) and not ignored (kept as the smallest such row: the host names it)
template <typename T>
DEV void ce_rows(const T *x, const void *labels, int i64l, i64 N, i64 C, float s, i64 ignore, float *rowloss,
                 float *lse, i64 *bad) {
  __shared__ float sh[32];
  for (i64 r = bid(); r < N; r += nbid()) {
    const T *row = x + r * C;
    float m = -3.402823466e38f;
    for (i64 c = tid(); c < C; c += ntid()) m = fmax_(m, ld(row, c));
    m = block_max(m, sh);
    float se, sx;
    row_sums(row, C, m, sh, &se, &sx);
    if (tid() == 0) {
      float l = m + flog(se);
      i64 y = label_of(labels, i64l, r);
      float loss = 0.0f;
      if (y != ignore) {
        if (y < 0 || y >= C) {
          if (bad[0] == 0 || bad[0] > r + 1) bad[0] = r + 1; // a benign race: the host rechecks
        } else {
          loss = (1.0f - s) * (l - ld(row, y)) + s * (l - sx / (float)C);
        }
      }
      rowloss[r] = loss;
      lse[r] = y == ignore ? 0.0f : l;
    }
  }
}
KERNEL ts_k_softmax_ce_rows_f32(const float *x, const void *labels, int i64l, i64 N, i64 C, float s, i64 ignore,
                                float *rowloss, float *lse, i64 *bad) {
  ce_rows(x, labels, i64l, N, C, s, ignore, rowloss, lse, bad);
}
KERNEL ts_k_softmax_ce_rows_bf16(const bf16 *x, const void *labels, int i64l, i64 N, i64 C, float s, i64 ignore,
                                 float *rowloss, float *lse, i64 *bad) {
  ce_rows(x, labels, i64l, N, C, s, ignore, rowloss, lse, bad);
}
// one block: loss[0] = sum(rowloss) / count (0 when every row is ignored), count[0] = count
KERNEL ts_k_softmax_ce_mean(const float *rowloss, const void *labels, int i64l, i64 N, i64 ignore, float *loss,
                            float *count) {
  __shared__ float sh[32];
  float v = 0.0f, k = 0.0f;
  for (i64 r = tid(); r < N; r += ntid()) {
    v += rowloss[r];
    k += label_of(labels, i64l, r) != ignore ? 1.0f : 0.0f;
  }
  v = block_sum(v, sh);
  k = block_sum(k, sh);
  if (tid() == 0) {
    loss[0] = k > 0 ? v / k : 0.0f;
    count[0] = k;
  }
}
// dloss[0], logits (N,Cl): columns [off, off + Cl) of the (N,C) logits (unsharded: Cl = C, off 0),
// lse (N), count[0] -> dlogits (N,Cl) = dloss/count (softmax - (1-s) onehot - s/C)
template <typename T>
DEV void ce_bwd(const float *dloss, const T *x, const void *labels, int i64l, const float *lse, i64 N, i64 Cl, i64 C,
                i64 off, float s, i64 ignore, const float *count, T *dx) {
  float k = count[0], f = k > 0 ? dloss[0] / k : 0.0f;
  for (i64 r = bidy(); r < N; r += nbidy()) {
    i64 y = label_of(labels, i64l, r);
    float l = lse[r];
    for (i64 c = gidx(); c < Cl; c += gstride()) {
      float g = 0.0f;
      if (y != ignore) g = f * (fexp(ld(x, r * Cl + c) - l) - (c + off == y ? 1.0f - s : 0.0f) - s / (float)C);
      st(dx, r * Cl + c, g);
    }
  }
}
KERNEL ts_k_softmax_ce_bwd_f32(const float *dloss, const float *x, const void *labels, int i64l, const float *lse, i64 N,
                               i64 Cl, i64 C, i64 off, float s, i64 ignore, const float *count, float *dx) {
  ce_bwd(dloss, x, labels, i64l, lse, N, Cl, C, off, s, ignore, count, dx);
}
KERNEL ts_k_softmax_ce_bwd_bf16(const float *dloss, const bf16 *x, const void *labels, int i64l, const float *lse,
                                i64 N, i64 Cl, i64 C, i64 off, float s, i64 ignore, const float *count, bf16 *dx) {
  ce_bwd(dloss, x, labels, i64l, lse, N, Cl, C, off, s, ignore, count, dx);
}

// Class-sharded (Megatron's vocabulary-parallel loss; CPU reference: ts__softmax_ce_shard_*_ref):
// this rank holds columns [off, off + Cl) of the (N,C) logits; the caller reduces between steps.
// 1. rowmax (N): the block's max of each row (0 for ignored rows); bad[0] = 1 + the first row
//    whose label is out of [0,C) and not ignored           caller: all-reduce MAX -> M
template <typename T>
DEV void ce_shard_max(const T *x, const void *labels, int i64l, i64 N, i64 Cl, i64 C, i64 ignore, float *rowmax,
                      i64 *bad) {
  __shared__ float sh[32];
  for (i64 r = bid(); r < N; r += nbid()) {
    i64 y = label_of(labels, i64l, r);
    float m = -3.402823466e38f;
    for (i64 c = tid(); c < Cl; c += ntid()) m = fmax_(m, ld(x + r * Cl, c));
    m = block_max(m, sh);
    if (tid() == 0) {
      if (y != ignore && (y < 0 || y >= C) && (bad[0] == 0 || bad[0] > r + 1)) bad[0] = r + 1;
      rowmax[r] = y == ignore ? 0.0f : m;
    }
  }
}
KERNEL ts_k_softmax_ce_shard_max_f32(const float *x, const void *labels, int i64l, i64 N, i64 Cl, i64 C, i64 ignore,
                                     float *rowmax, i64 *bad) {
  ce_shard_max(x, labels, i64l, N, Cl, C, ignore, rowmax, bad);
}
KERNEL ts_k_softmax_ce_shard_max_bf16(const bf16 *x, const void *labels, int i64l, i64 N, i64 Cl, i64 C, i64 ignore,
                                      float *rowmax, i64 *bad) {
  ce_shard_max(x, labels, i64l, N, Cl, C, ignore, rowmax, bad);
}
// 2. stats (N,3) = (sum exp(x - M), x at the label if this rank holds its column else 0, sum x),
//    0 for ignored rows                                     caller: all-reduce SUM
template <typename T>
DEV void ce_shard_stats(const T *x, const void *labels, int i64l, i64 N, i64 Cl, i64 off, i64 ignore, const float *M,
                        float *stats) {
  __shared__ float sh[32];
  for (i64 r = bid(); r < N; r += nbid()) {
    i64 y = label_of(labels, i64l, r);
    const T *row = x + r * Cl;
    float se, sx;
    row_sums(row, Cl, M[r], sh, &se, &sx);
    if (tid() == 0) {
      int ig = y == ignore;
      stats[3 * r] = ig ? 0.0f : se;
      stats[3 * r + 1] = !ig && y >= off && y < off + Cl ? ld(row, y - off) : 0.0f;
      stats[3 * r + 2] = ig ? 0.0f : sx;
    }
  }
}
KERNEL ts_k_softmax_ce_shard_stats_f32(const float *x, const void *labels, int i64l, i64 N, i64 Cl, i64 off, i64 ignore,
                                       const float *M, float *stats) {
  ce_shard_stats(x, labels, i64l, N, Cl, off, ignore, M, stats);
}
KERNEL ts_k_softmax_ce_shard_stats_bf16(const bf16 *x, const void *labels, int i64l, i64 N, i64 Cl, i64 off,
                                        i64 ignore, const float *M, float *stats) {
  ce_shard_stats(x, labels, i64l, N, Cl, off, ignore, M, stats);
}
// 3. one block: lse (N) = M + log S (0 for ignored rows), loss[0] = the mean over the rows not
//    ignored of (1-s)(lse - z) + s(lse - sum x / C), count[0] = their number; a fixed order, so the
//    ranks holding the same reduced values compute the same loss
KERNEL ts_k_softmax_ce_shard_loss(const void *labels, int i64l, i64 N, i64 C, float s, i64 ignore, const float *M,
                                  const float *stats, float *loss, float *lse, float *count) {
  __shared__ float sh[32];
  float v = 0.0f, k = 0.0f;
  for (i64 r = tid(); r < N; r += ntid()) {
    const float *q = stats + 3 * r;
    if (label_of(labels, i64l, r) == ignore) {
      lse[r] = 0.0f;
      continue;
    }
    float l = M[r] + flog(q[0]);
    lse[r] = l;
    v += (1.0f - s) * (l - q[1]) + s * (l - q[2] / (float)C);
    k += 1.0f;
  }
  v = block_sum(v, sh);
  k = block_sum(k, sh);
  if (tid() == 0) {
    loss[0] = k > 0 ? v / k : 0.0f;
    count[0] = k;
  }
}

// Evaluation's metrics (CPU reference: ts__eval_rows_ref; the host finishes with
// ts__eval_rows_finish): one block per row of the (N,C) f32 logits, labels (N) i32 in [0,C) ->
// st (N,4) = (max, sum exp(z - max), z[label], the count of logits above z[label], or -1 when a
// logit is not finite): 16 bytes a row go back to the host instead of 4 a logit. The counts are
// f32 sums of ones, exact while C < 2^24 (the launcher's bound).
KERNEL ts_k_eval_rows_f32(const float *x, const int *labels, i64 N, i64 C, float *st) {
  __shared__ float sh[32];
  for (i64 r = bid(); r < N; r += nbid()) {
    const float *row = x + r * C;
    float m = -3.402823466e38f, bad = 0.0f;
    for (i64 c = tid(); c < C; c += ntid()) {
      float v = row[c];
      bad += (f2i(v) & 0x7f800000) == 0x7f800000 ? 1.0f : 0.0f; // Inf or NaN
      m = fmax_(m, v);
    }
    m = block_max(m, sh);
    bad = block_sum(bad, sh); // the same on every thread: the branch below is the block's
    float zl = row[labels[r]], se = 0.0f, ab = 0.0f;
    if (bad == 0.0f) {
      for (i64 c = tid(); c < C; c += ntid()) {
        float v = row[c];
        se += fexp(v - m);
        ab += v > zl ? 1.0f : 0.0f;
      }
      se = block_sum(se, sh);
      ab = block_sum(ab, sh);
    }
    if (tid() == 0) {
      float *q = st + 4 * r;
      q[0] = m, q[1] = se, q[2] = zl, q[3] = bad == 0.0f ? ab : -1.0f;
    }
  }
}
