// Sparse softmax cross-entropy, mean over the rows whose label is not ignore_index, with label
// smoothing s (torch.nn.CrossEntropyLoss): one block per row for the row's log-sum-exp and loss,
// then one block sums the rows' losses and counts in a fixed order; the backward reads dloss and
// the count on the device. CPU reference: src/kernels/softmax.c (ts__softmax_ce_fwd_ref/_bwd_ref).
#include "ts_cuda.h"

DEV i64 label_of(const void *labels, int i64l, i64 r) {
  return i64l ? ((const i64 *)labels)[r] : (i64)((const int *)labels)[r];
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
    float se = 0.0f, sx = 0.0f;
    for (i64 c = tid(); c < C; c += ntid()) {
      float v = ld(row, c);
      se += fexp(v - m);
      sx += v;
    }
    se = block_sum(se, sh);
    sx = block_sum(sx, sh);
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
// dloss[0], logits (N,C), lse (N), count[0] -> dlogits (N,C) = dloss/count (softmax - (1-s) onehot - s/C)
template <typename T>
DEV void ce_bwd(const float *dloss, const T *x, const void *labels, int i64l, const float *lse, i64 N, i64 C, float s,
                i64 ignore, const float *count, T *dx) {
  float k = count[0], f = k > 0 ? dloss[0] / k : 0.0f;
  for (i64 r = bidy(); r < N; r += nbidy()) {
    i64 y = label_of(labels, i64l, r);
    float l = lse[r];
    for (i64 c = gidx(); c < C; c += gstride()) {
      float g = 0.0f;
      if (y != ignore) g = f * (fexp(ld(x, r * C + c) - l) - (c == y ? 1.0f - s : 0.0f) - s / (float)C);
      st(dx, r * C + c, g);
    }
  }
}
KERNEL ts_k_softmax_ce_bwd_f32(const float *dloss, const float *x, const void *labels, int i64l, const float *lse, i64 N,
                               i64 C, float s, i64 ignore, const float *count, float *dx) {
  ce_bwd(dloss, x, labels, i64l, lse, N, C, s, ignore, count, dx);
}
KERNEL ts_k_softmax_ce_bwd_bf16(const float *dloss, const bf16 *x, const void *labels, int i64l, const float *lse,
                                i64 N, i64 C, float s, i64 ignore, const float *count, bf16 *dx) {
  ce_bwd(dloss, x, labels, i64l, lse, N, C, s, ignore, count, dx);
}
