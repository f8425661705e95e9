// Causal scaled-dot-product attention (src/kernels/attention.h's definition and layouts), one warp
// per query row (forward, and dq) or key row (dk, dv), the head dimension across the lanes (D <=
// 256), the keys (queries) in order with an online softmax: nothing T x T is stored, every sum
// runs in a fixed order (deterministic). The layouts come as strides: element (b, h, t, d) of q
// (likewise k, v) is at b * sb + h * sh + t * st + d from its base (BHTD, BTHD, or a block of a
// packed q|k|v row); o and do have their own; lse is (B, H, T). This is the correctness kernel;
// a tiled (flash-attention) one is the performance work to come (docs/gpu.md).
#include "ts_cuda.h"

#define MAXL 8 // D / 32 per lane
struct astr {
  i64 sb, sh, st;    // q, k, v (and dq, dk, dv)
  i64 ob, oh, ot;    // o, do
  i64 B, H, T, D;
};


// rows: blockIdx.x over (b, h, t) rows (grid-stride), a block of 32 threads
template <typename T>
DEV void attn_fwd(const T *q, const T *k, const T *v, T *o, float *lse, astr s, float scale) {
  int l = tid();
  i64 rows = s.B * s.H * s.T;
  for (i64 row = bid(); row < rows; row += nbid()) {
    i64 t = row % s.T, h = (row / s.T) % s.H, b = row / (s.T * s.H);
    i64 qb = b * s.sb + h * s.sh, ob = b * s.ob + h * s.oh;
    float qv[MAXL], acc[MAXL];
    int nl = 0;
    for (i64 d = l; d < s.D; d += 32) qv[nl] = ld(q, qb + t * s.st + d), acc[nl++] = 0.0f;
    float m = -3.402823466e38f, den = 0.0f;
    for (i64 j = 0; j <= t; j++) {
      float p = 0.0f;
      int c = 0;
      for (i64 d = l; d < s.D; d += 32) p += qv[c++] * ld(k, qb + j * s.st + d);
      float sc = warp_sum(p) * scale, mn = fmax_(m, sc);
      float corr = fexp(m - mn), e = fexp(sc - mn);
      den = den * corr + e;
      c = 0;
      for (i64 d = l; d < s.D; d += 32) {
        acc[c] = acc[c] * corr + e * ld(v, qb + j * s.st + d);
        c++;
      }
      m = mn;
    }
    int c = 0;
    for (i64 d = l; d < s.D; d += 32) st(o, ob + t * s.ot + d, acc[c++] / den);
    if (l == 0) lse[row] = m + flog(den);
  }
}
KERNEL ts_k_attention_fwd_f32(const float *q, const float *k, const float *v, float *o, float *lse, astr s, float scale) {
  attn_fwd(q, k, v, o, lse, s, scale);
}
KERNEL ts_k_attention_fwd_bf16(const bf16 *q, const bf16 *k, const bf16 *v, bf16 *o, float *lse, astr s, float scale) {
  attn_fwd(q, k, v, o, lse, s, scale);
}

// Dr (B, H, T) = do . o per row
template <typename T> DEV void attn_dot(const T *dout, const T *o, float *Dr, astr s) {
  int l = tid();
  i64 rows = s.B * s.H * s.T;
  for (i64 row = bid(); row < rows; row += nbid()) {
    i64 t = row % s.T, h = (row / s.T) % s.H, b = row / (s.T * s.H);
    i64 ob = b * s.ob + h * s.oh + t * s.ot;
    float p = 0.0f;
    for (i64 d = l; d < s.D; d += 32) p += ld(dout, ob + d) * ld(o, ob + d);
    p = warp_sum(p);
    if (l == 0) Dr[row] = p;
  }
}
KERNEL ts_k_attention_dot_f32(const float *dout, const float *o, float *Dr, astr s) { attn_dot(dout, o, Dr, s); }
KERNEL ts_k_attention_dot_bf16(const bf16 *dout, const bf16 *o, float *Dr, astr s) { attn_dot(dout, o, Dr, s); }

// dq_i = scale sum_{j <= i} ds_ij k_j, ds_ij = p_ij (do_i . v_j - D_i), p_ij = exp(s_ij - lse_i)
template <typename T>
DEV void attn_dq(const T *dout, const T *q, const T *k, const T *v, const float *lse, const float *Dr, T *dq, astr s,
                 float scale) {
  int l = tid();
  i64 rows = s.B * s.H * s.T;
  for (i64 row = bid(); row < rows; row += nbid()) {
    i64 t = row % s.T, h = (row / s.T) % s.H, b = row / (s.T * s.H);
    i64 qb = b * s.sb + h * s.sh, ob = b * s.ob + h * s.oh;
    float qv[MAXL], dov[MAXL], acc[MAXL];
    int nl = 0;
    for (i64 d = l; d < s.D; d += 32) {
      qv[nl] = ld(q, qb + t * s.st + d);
      dov[nl] = ld(dout, ob + t * s.ot + d);
      acc[nl++] = 0.0f;
    }
    float li = lse[row], Di = Dr[row];
    for (i64 j = 0; j <= t; j++) {
      float pq = 0.0f, pv = 0.0f;
      int c = 0;
      for (i64 d = l; d < s.D; d += 32) {
        pq += qv[c] * ld(k, qb + j * s.st + d);
        pv += dov[c] * ld(v, qb + j * s.st + d);
        c++;
      }
      float p = fexp(warp_sum(pq) * scale - li), ds = p * (warp_sum(pv) - Di);
      c = 0;
      for (i64 d = l; d < s.D; d += 32) acc[c++] += ds * ld(k, qb + j * s.st + d);
    }
    int c = 0;
    for (i64 d = l; d < s.D; d += 32) st(dq, qb + t * s.st + d, scale * acc[c++]);
  }
}
KERNEL ts_k_attention_dq_f32(const float *dout, const float *q, const float *k, const float *v, const float *lse,
                             const float *Dr, float *dq, astr s, float scale) {
  attn_dq(dout, q, k, v, lse, Dr, dq, s, scale);
}
KERNEL ts_k_attention_dq_bf16(const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
                              const float *Dr, bf16 *dq, astr s, float scale) {
  attn_dq(dout, q, k, v, lse, Dr, dq, s, scale);
}

// dk_j = scale sum_{i >= j} ds_ij q_i, dv_j = sum_{i >= j} p_ij do_i (one warp per key row j)
template <typename T>
DEV void attn_dkv(const T *dout, const T *q, const T *k, const T *v, const float *lse, const float *Dr, T *dk, T *dv,
                  astr s, float scale) {
  int l = tid();
  i64 rows = s.B * s.H * s.T;
  for (i64 row = bid(); row < rows; row += nbid()) {
    i64 j = row % s.T, h = (row / s.T) % s.H, b = row / (s.T * s.H);
    i64 qb = b * s.sb + h * s.sh, ob = b * s.ob + h * s.oh, lb = (b * s.H + h) * s.T;
    float kv[MAXL], vv[MAXL], ak[MAXL], av[MAXL];
    int nl = 0;
    for (i64 d = l; d < s.D; d += 32) {
      kv[nl] = ld(k, qb + j * s.st + d);
      vv[nl] = ld(v, qb + j * s.st + d);
      ak[nl] = av[nl] = 0.0f;
      nl++;
    }
    for (i64 i = j; i < s.T; i++) {
      float pq = 0.0f, pv = 0.0f;
      int c = 0;
      for (i64 d = l; d < s.D; d += 32) {
        pq += ld(q, qb + i * s.st + d) * kv[c];
        pv += ld(dout, ob + i * s.ot + d) * vv[c];
        c++;
      }
      float p = fexp(warp_sum(pq) * scale - lse[lb + i]), ds = p * (warp_sum(pv) - Dr[lb + i]);
      c = 0;
      for (i64 d = l; d < s.D; d += 32) {
        ak[c] += ds * ld(q, qb + i * s.st + d);
        av[c] += p * ld(dout, ob + i * s.ot + d);
        c++;
      }
    }
    int c = 0;
    for (i64 d = l; d < s.D; d += 32) {
      st(dk, qb + j * s.st + d, scale * ak[c]);
      st(dv, qb + j * s.st + d, av[c]);
      c++;
    }
  }
}
KERNEL ts_k_attention_dkv_f32(const float *dout, const float *q, const float *k, const float *v, const float *lse,
                              const float *Dr, float *dk, float *dv, astr s, float scale) {
  attn_dkv(dout, q, k, v, lse, Dr, dk, dv, s, scale);
}
KERNEL ts_k_attention_dkv_bf16(const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
                               const float *Dr, bf16 *dk, bf16 *dv, astr s, float scale) {
  attn_dkv(dout, q, k, v, lse, Dr, dk, dv, s, scale);
}
