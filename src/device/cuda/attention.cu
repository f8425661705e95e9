// Causal scaled-dot-product attention (src/kernels/attention.h's definition and layouts), one warp
// per query row (forward, and dq) or key row (dk, dv), the head dimension across the lanes (D <=
// 256), the keys (queries) in order with an online softmax: nothing T x T is stored, every sum
// runs in a fixed order (deterministic). The layouts come as strides: element (b, h, t, d) of q
// (likewise k, v) is at b * sb + h * sh + t * st + d from its base (BHTD, BTHD, or a block of a
// packed q|k|v row); o and do have their own; lse is (B, H, T). These row kernels serve any D up
// to 256; the tiled kernels below (D <= 64: GPT-2's heads and the zoo's) are the faster path.
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

// ---- tiled kernels (D <= 64): a block owns TBR rows (queries for the forward and dq, keys for
// dk/dv), two threads per row each holding half of the head dimension in registers (dims 2 i +
// half: the pair reads neighbouring banks), and walks the other side in tiles of TBC rows staged
// in shared memory; the pair's dot products meet through one shuffle. Every loop has the same
// trip count on every thread (causality and the sequence's end are masks, not bounds), so the
// shuffles and barriers stay convergent. The sums over keys (queries) run in order: as
// deterministic as the row kernels, and nothing T x T is stored. (SIMT f32 arithmetic: tensor
// cores are later work.)
#define TBR 64
#define TBC 32
#define TDH 32
#define TNT (2 * TBR)
#define NEG_BIG -3.402823466e38f

DEV float pair_sum(float v) { return v + __nvvm_shfl_sync_bfly_f32(0xffffffffu, v, 1, 31); }

// rows r0 .. r0 + TBC - 1 of x (row r at base + r * rs, dims contiguous) into sh as f32; rows at or
// beyond n and dims at or beyond D as zeros
template <typename T> DEV void tile_load(const T *x, i64 base, i64 rs, i64 r0, i64 n, i64 D, float (*sh)[64]) {
  for (int e = tid(); e < TBC * 64; e += TNT) {
    int r = e >> 6, d = e & 63;
    sh[r][d] = (r0 + r < n && d < D) ? ld(x, base + (r0 + r) * rs + d) : 0.0f;
  }
}

template <typename T>
DEV void attn_fwd_t(const T *q, const T *k, const T *v, T *o, float *lse, astr s, float scale) {
  __shared__ float ks[TBC][64], vs[TBC][64];
  const int half = tid() & 1;
  const i64 ntile = (s.T + TBR - 1) / TBR;
  for (i64 bh = bidy(); bh < s.B * s.H; bh += nbidy())
    for (i64 qt = bid(); qt < ntile; qt += nbid()) {
      i64 b = bh / s.H, h = bh % s.H, qb = b * s.sb + h * s.sh, ob = b * s.ob + h * s.oh;
      i64 row = qt * TBR + (tid() >> 1), kend = qt * TBR + TBR < s.T ? qt * TBR + TBR : s.T;
      int live = row < s.T;
      float qv[TDH], acc[TDH];
UNROLL
      for (int i = 0; i < TDH; i++) {
        i64 d = 2 * i + half;
        qv[i] = live && d < s.D ? ld(q, qb + row * s.st + d) : 0.0f;
        acc[i] = 0.0f;
      }
      float m = NEG_BIG, den = 0.0f;
      for (i64 j0 = 0; j0 < kend; j0 += TBC) {
        __syncthreads(); // the previous tile read by all
        tile_load(k, qb, s.st, j0, s.T, s.D, ks);
        tile_load(v, qb, s.st, j0, s.T, s.D, vs);
        __syncthreads();
        float sc[TBC], mt = m;
UNROLL
        for (int jj = 0; jj < TBC; jj++) {
          float p = 0.0f;
UNROLL
          for (int i = 0; i < TDH; i++) p += qv[i] * ks[jj][2 * i + half];
          p = pair_sum(p) * scale;
          sc[jj] = live && j0 + jj <= row ? p : NEG_BIG;
          mt = fmax_(mt, sc[jj]);
        }
        float corr = fexp(m - mt);
        den *= corr;
UNROLL
        for (int i = 0; i < TDH; i++) acc[i] *= corr;
UNROLL
        for (int jj = 0; jj < TBC; jj++) {
          float e = sc[jj] > NEG_BIG ? fexp(sc[jj] - mt) : 0.0f;
          den += e;
UNROLL
          for (int i = 0; i < TDH; i++) acc[i] += e * vs[jj][2 * i + half];
        }
        m = mt;
      }
      if (live) {
UNROLL
        for (int i = 0; i < TDH; i++)
          if (2 * i + half < s.D) st(o, ob + row * s.ot + 2 * i + half, acc[i] / den);
        if (!half) lse[bh * s.T + row] = m + flog(den);
      }
    }
}
KERNEL ts_k_attention_fwd_t_f32(const float *q, const float *k, const float *v, float *o, float *lse, astr s,
                                float scale) {
  attn_fwd_t(q, k, v, o, lse, s, scale);
}
KERNEL ts_k_attention_fwd_t_bf16(const bf16 *q, const bf16 *k, const bf16 *v, bf16 *o, float *lse, astr s,
                                 float scale) {
  attn_fwd_t(q, k, v, o, lse, s, scale);
}

// dq_i = scale sum_{j <= i} ds_ij k_j (a block per TBR query rows, key tiles in shared memory)
template <typename T>
DEV void attn_dq_t(const T *dout, const T *q, const T *k, const T *v, const float *lse, const float *Dr, T *dq, astr s,
                   float scale) {
  __shared__ float ks[TBC][64], vs[TBC][64];
  const int half = tid() & 1;
  const i64 ntile = (s.T + TBR - 1) / TBR;
  for (i64 bh = bidy(); bh < s.B * s.H; bh += nbidy())
    for (i64 qt = bid(); qt < ntile; qt += nbid()) {
      i64 b = bh / s.H, h = bh % s.H, qb = b * s.sb + h * s.sh, ob = b * s.ob + h * s.oh;
      i64 row = qt * TBR + (tid() >> 1), kend = qt * TBR + TBR < s.T ? qt * TBR + TBR : s.T;
      int live = row < s.T;
      float qv[TDH], dov[TDH], acc[TDH];
UNROLL
      for (int i = 0; i < TDH; i++) {
        i64 d = 2 * i + half;
        qv[i] = live && d < s.D ? ld(q, qb + row * s.st + d) : 0.0f;
        dov[i] = live && d < s.D ? ld(dout, ob + row * s.ot + d) : 0.0f;
        acc[i] = 0.0f;
      }
      float li = live ? lse[bh * s.T + row] : 0.0f, Di = live ? Dr[bh * s.T + row] : 0.0f;
      for (i64 j0 = 0; j0 < kend; j0 += TBC) {
        __syncthreads();
        tile_load(k, qb, s.st, j0, s.T, s.D, ks);
        tile_load(v, qb, s.st, j0, s.T, s.D, vs);
        __syncthreads();
UNROLL
        for (int jj = 0; jj < TBC; jj++) {
          float pq = 0.0f, pv = 0.0f;
UNROLL
          for (int i = 0; i < TDH; i++) {
            pq += qv[i] * ks[jj][2 * i + half];
            pv += dov[i] * vs[jj][2 * i + half];
          }
          pq = pair_sum(pq), pv = pair_sum(pv);
          float p = live && j0 + jj <= row ? fexp(pq * scale - li) : 0.0f, ds = p * (pv - Di);
UNROLL
          for (int i = 0; i < TDH; i++) acc[i] += ds * ks[jj][2 * i + half];
        }
      }
      if (live) {
UNROLL
        for (int i = 0; i < TDH; i++)
          if (2 * i + half < s.D) st(dq, qb + row * s.st + 2 * i + half, scale * acc[i]);
      }
    }
}
KERNEL ts_k_attention_dq_t_f32(const float *dout, const float *q, const float *k, const float *v, const float *lse,
                               const float *Dr, float *dq, astr s, float scale) {
  attn_dq_t(dout, q, k, v, lse, Dr, dq, s, scale);
}
KERNEL ts_k_attention_dq_t_bf16(const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
                                const float *Dr, bf16 *dq, astr s, float scale) {
  attn_dq_t(dout, q, k, v, lse, Dr, dq, s, scale);
}

// dk_j = scale sum_{i >= j} ds_ij q_i, dv_j = sum_{i >= j} p_ij do_i (a block per TBR key rows,
// query tiles (q, do, lse, D) in shared memory, from the block's first key on)
template <typename T>
DEV void attn_dkv_t(const T *dout, const T *q, const T *k, const T *v, const float *lse, const float *Dr, T *dk, T *dv,
                    astr s, float scale) {
  __shared__ float qs[TBC][64], dos[TBC][64], ls[TBC], drs[TBC];
  const int half = tid() & 1;
  const i64 ntile = (s.T + TBR - 1) / TBR;
  for (i64 bh = bidy(); bh < s.B * s.H; bh += nbidy())
    for (i64 kt = bid(); kt < ntile; kt += nbid()) {
      i64 b = bh / s.H, h = bh % s.H, qb = b * s.sb + h * s.sh, ob = b * s.ob + h * s.oh;
      i64 j = kt * TBR + (tid() >> 1);
      int live = j < s.T;
      float kv[TDH], vv[TDH], ak[TDH], av[TDH];
UNROLL
      for (int i = 0; i < TDH; i++) {
        i64 d = 2 * i + half;
        kv[i] = live && d < s.D ? ld(k, qb + j * s.st + d) : 0.0f;
        vv[i] = live && d < s.D ? ld(v, qb + j * s.st + d) : 0.0f;
        ak[i] = av[i] = 0.0f;
      }
      for (i64 i0 = kt * TBR; i0 < s.T; i0 += TBC) {
        __syncthreads();
        tile_load(q, qb, s.st, i0, s.T, s.D, qs);
        tile_load(dout, ob, s.ot, i0, s.T, s.D, dos);
        for (int e = tid(); e < TBC; e += TNT) {
          ls[e] = i0 + e < s.T ? lse[bh * s.T + i0 + e] : 0.0f;
          drs[e] = i0 + e < s.T ? Dr[bh * s.T + i0 + e] : 0.0f;
        }
        __syncthreads();
UNROLL
        for (int ii = 0; ii < TBC; ii++) {
          float pq = 0.0f, pv = 0.0f;
UNROLL
          for (int i = 0; i < TDH; i++) {
            pq += qs[ii][2 * i + half] * kv[i];
            pv += dos[ii][2 * i + half] * vv[i];
          }
          pq = pair_sum(pq), pv = pair_sum(pv);
          float p = live && i0 + ii >= j && i0 + ii < s.T ? fexp(pq * scale - ls[ii]) : 0.0f, ds = p * (pv - drs[ii]);
UNROLL
          for (int i = 0; i < TDH; i++) {
            ak[i] += ds * qs[ii][2 * i + half];
            av[i] += p * dos[ii][2 * i + half];
          }
        }
      }
      if (live) {
UNROLL
        for (int i = 0; i < TDH; i++)
          if (2 * i + half < s.D) {
            st(dk, qb + j * s.st + 2 * i + half, scale * ak[i]);
            st(dv, qb + j * s.st + 2 * i + half, av[i]);
          }
      }
    }
}
KERNEL ts_k_attention_dkv_t_f32(const float *dout, const float *q, const float *k, const float *v, const float *lse,
                                const float *Dr, float *dk, float *dv, astr s, float scale) {
  attn_dkv_t(dout, q, k, v, lse, Dr, dk, dv, s, scale);
}
KERNEL ts_k_attention_dkv_t_bf16(const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
                                 const float *Dr, bf16 *dk, bf16 *dv, astr s, float scale) {
  attn_dkv_t(dout, q, k, v, lse, Dr, dk, dv, s, scale);
}

// ---- tensor-core kernels (bf16, D <= 64): flash attention 2's structure on mma.sync m16n8k16
// (ts_cuda.h's mma_bf16: bf16 operands, f32 accumulation). A block of 4 warps owns 64 rows
// (queries for the forward and dq, keys for dk/dv), a warp 16 of them, their operand fragments
// in registers (the head dimension padded with zeros to 64); the other side's rows come in tiles
// of 64 staged in shared memory as bf16 (rows padded to 72 elements, so a warp's fragment loads
// hit 32 different banks), natural for products over the head dimension, transposed for products
// over the rows. Scores, probabilities and their gradients stay in the accumulators: P and dS
// are rounded to bf16 only as the next product's A operand (the CPU's bf16 kernel rounds the same
// operands). Row statistics (max, sum) meet across the 4 lanes of a row through two shuffles.
// Every loop has the same trip count in every warp of a block (masks, not bounds, for causality
// and the sequence's end); sums run in a fixed order: deterministic, nothing T x T stored.
#define TCR 64 // rows a block owns, and the other side's tile
#define TCP 72 // a staged row's stride (bf16 elements)

DEV unsigned ld32(const bf16 *p) { // two neighbouring bf16 (p even-aligned) as one .b32
#if defined(__CUDA__)
  return *(const unsigned *)p;
#else
  unsigned u;
  memcpy(&u, p, 4);
  return u;
#endif
}

// element (r, d) of x (row r at base + r * rs), zero at or beyond n rows or D dims
DEV bf16 tc_at(const bf16 *x, i64 base, i64 rs, i64 r, i64 n, i64 D, int d) {
  return r < n && d < D ? x[base + r * rs + d] : (bf16)0;
}

// rows r0 .. r0 + 63 of x into nat[r][d] and (unless NULL) tr[d][r]; zeros beyond n rows or D
DEV void tc_stage(const bf16 *x, i64 base, i64 rs, i64 r0, i64 n, i64 D, bf16 (*nat)[TCP], bf16 (*tr)[TCP]) {
  for (int e = tid(); e < TCR * 64; e += 128) {
    int r = e >> 6, d = e & 63;
    bf16 v = tc_at(x, base, rs, r0 + r, n, D, d);
    if (nat) nat[r][d] = v;
    if (tr) tr[d][r] = v;
  }
}

// the A fragments of rows r0 .. r0 + 15 of x over the (padded) head dimension: a[kc] covers dims
// 16 kc .. 16 kc + 15
DEVI void tc_afrag(const bf16 *x, i64 base, i64 rs, i64 r0, i64 n, i64 D, unsigned a[4][4]) {
  const int g = (tid() & 31) >> 2, t = tid() & 3;
UNROLL
  for (int kc = 0; kc < 4; kc++)
UNROLL
    for (int h = 0; h < 2; h++) {
      int d = 16 * kc + 2 * t + 8 * h;
      a[kc][2 * h] = pack2(tc_at(x, base, rs, r0 + g, n, D, d), tc_at(x, base, rs, r0 + g, n, D, d + 1));
      a[kc][2 * h + 1] = pack2(tc_at(x, base, rs, r0 + g + 8, n, D, d), tc_at(x, base, rs, r0 + g + 8, n, D, d + 1));
    }
}

// the B fragment of a k16 x n8 block whose column n is row nb + n of a staged tile M (B[k][n] =
// M[nb + n][kb + k])
DEVI void tc_bfrag(bf16 (*M)[TCP], int nb, int kb, unsigned b[2]) {
  const int g = (tid() & 31) >> 2, t = tid() & 3;
  b[0] = ld32(&M[nb + g][kb + 2 * t]);
  b[1] = ld32(&M[nb + g][kb + 2 * t + 8]);
}

// acc[nt] (8 n-tiles: 64 columns) += a (16 rows x k16) times the staged tile M's k16 block at kb
DEVI void tc_mma_row(float acc[8][4], const unsigned a[4], bf16 (*M)[TCP], int kb) {
UNROLL
  for (int nt = 0; nt < 8; nt++) {
    unsigned bb[2];
    tc_bfrag(M, 8 * nt, kb, bb);
    mma_bf16(acc[nt], a, bb);
  }
}
DEVI void tc_zero(float acc[8][4]) {
UNROLL
  for (int nt = 0; nt < 8; nt++)
UNROLL
    for (int i = 0; i < 4; i++) acc[nt][i] = 0.0f;
}
// acc's rows row[0], row[1] (and their 64 columns) times mul into x (row r at base + r rs), rows
// at or beyond T and dims at or beyond D left out
template <typename T>
DEVI void tc_store(T *x, i64 base, i64 rs, const i64 row[2], i64 Tn, i64 D, const float acc[8][4], const float mul[2]) {
  const int t = tid() & 3;
UNROLL
  for (int nt = 0; nt < 8; nt++)
UNROLL
    for (int i = 0; i < 4; i++) {
      i64 r = row[i >> 1];
      int d = 8 * nt + 2 * t + (i & 1);
      if (r < Tn && d < D) st(x, base + r * rs + d, mul[i >> 1] * acc[nt][i]);
    }
}

// the backward's two products of one n-tile over the head dimension: x (16 x 8) = a's rows times
// the staged tile M's rows nb .. nb + 7, y likewise from b and N (S and dO v^T for dq; S^T and
// v dO^T for dk/dv), from zero
DEVI void tc_two(const unsigned a[4][4], bf16 (*M)[TCP], const unsigned b[4][4], bf16 (*N)[TCP], int nb, float x[4],
                 float y[4]) {
UNROLL
  for (int i = 0; i < 4; i++) x[i] = y[i] = 0.0f;
UNROLL
  for (int dc = 0; dc < 4; dc++) {
    unsigned bm[2], bn[2];
    tc_bfrag(M, nb, 16 * dc, bm);
    tc_bfrag(N, nb, 16 * dc, bn);
    mma_bf16(x, a[dc], bm);
    mma_bf16(y, b[dc], bn);
  }
}

// the four lanes of a row (lanes 4 g .. 4 g + 3) combined
DEV float quad_max(float v) {
  v = fmax_(v, __nvvm_shfl_sync_bfly_f32(0xffffffffu, v, 1, 31));
  return fmax_(v, __nvvm_shfl_sync_bfly_f32(0xffffffffu, v, 2, 31));
}
DEV float quad_sum(float v) {
  v += __nvvm_shfl_sync_bfly_f32(0xffffffffu, v, 1, 31);
  return v + __nvvm_shfl_sync_bfly_f32(0xffffffffu, v, 2, 31);
}

// o, lse: a block per 64 queries; key tiles up to the block's diagonal (online softmax per row)
KERNEL ts_k_attention_fwd_tc_bf16(const bf16 *q, const bf16 *k, const bf16 *v, bf16 *o, float *lse, astr s,
                                  float scale) {
  __shared__ __attribute__((aligned(16))) bf16 ks[TCR][TCP], vt[64][TCP]; // 16: the .b32 fragment loads
  const int w = tid() >> 5, g = (tid() & 31) >> 2, t = tid() & 3;
  const i64 ntile = (s.T + TCR - 1) / TCR;
  for (i64 bh = bidy(); bh < s.B * s.H; bh += nbidy())
    for (i64 qt = bid(); qt < ntile; qt += nbid()) {
      i64 b = bh / s.H, h = bh % s.H, qb = b * s.sb + h * s.sh, ob = b * s.ob + h * s.oh;
      i64 q0 = qt * TCR, r0 = q0 + 16 * w, row[2] = {r0 + g, r0 + g + 8};
      i64 kend = q0 + TCR < s.T ? q0 + TCR : s.T;
      unsigned qa[4][4];
      tc_afrag(q, qb, s.st, r0, s.T, s.D, qa);
      float acc[8][4], m[2] = {NEG_BIG, NEG_BIG}, den[2] = {0.0f, 0.0f};
      tc_zero(acc);
      for (i64 j0 = 0; j0 < kend; j0 += TCR) {
        __syncthreads(); // the previous tiles read by all
        tc_stage(k, qb, s.st, j0, s.T, s.D, ks, 0);
        tc_stage(v, qb, s.st, j0, s.T, s.D, 0, vt);
        __syncthreads();
        float sc[8][4], mt[2] = {m[0], m[1]};
UNROLL
        for (int nt = 0; nt < 8; nt++) {
UNROLL
          for (int i = 0; i < 4; i++) sc[nt][i] = 0.0f;
UNROLL
          for (int kc = 0; kc < 4; kc++) {
            unsigned bb[2];
            tc_bfrag(ks, 8 * nt, 16 * kc, bb);
            mma_bf16(sc[nt], qa[kc], bb);
          }
UNROLL
          for (int i = 0; i < 4; i++) {
            i64 r = row[i >> 1], c = j0 + 8 * nt + 2 * t + (i & 1);
            sc[nt][i] = r < s.T && c <= r ? sc[nt][i] * scale : NEG_BIG;
            mt[i >> 1] = fmax_(mt[i >> 1], sc[nt][i]);
          }
        }
        float corr[2];
UNROLL
        for (int r = 0; r < 2; r++) {
          mt[r] = quad_max(mt[r]);
          corr[r] = fexp(m[r] - mt[r]);
          den[r] *= corr[r];
          m[r] = mt[r];
        }
UNROLL
        for (int nt = 0; nt < 8; nt++)
UNROLL
          for (int i = 0; i < 4; i++) acc[nt][i] *= corr[i >> 1];
UNROLL
        for (int kc = 0; kc < 4; kc++) { // P (16 rows x keys 16 kc ..) as the A operand of P v
          unsigned pa[4];
UNROLL
          for (int hi = 0; hi < 2; hi++) {
            float e[4];
UNROLL
            for (int i = 0; i < 4; i++) {
              float x = sc[2 * kc + hi][i];
              e[i] = x > NEG_BIG ? fexp(x - mt[i >> 1]) : 0.0f;
            }
            den[0] += e[0] + e[1];
            den[1] += e[2] + e[3];
            pa[2 * hi] = pack_bf16(e[0], e[1]);
            pa[2 * hi + 1] = pack_bf16(e[2], e[3]);
          }
          tc_mma_row(acc, pa, vt, 16 * kc);
        }
      }
      float inv[2];
UNROLL
      for (int r = 0; r < 2; r++) den[r] = quad_sum(den[r]), inv[r] = 1.0f / den[r];
      tc_store(o, ob, s.ot, row, s.T, s.D, acc, inv);
      if (t == 0)
UNROLL
        for (int r = 0; r < 2; r++)
          if (row[r] < s.T) lse[bh * s.T + row[r]] = m[r] + flog(den[r]);
    }
}

// dq = scale dS k, dS = P (do v^T - D): a block per 64 queries, key tiles up to its diagonal, a
// 16-key slice of a tile at a time (its scores and do . v in 2 n-tiles, then dS as an A operand)
KERNEL ts_k_attention_dq_tc_bf16(const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
                                 const float *Dr, bf16 *dq, astr s, float scale) {
  __shared__ __attribute__((aligned(16))) bf16 ks[TCR][TCP], vs[TCR][TCP], kt[64][TCP];
  const int w = tid() >> 5, g = (tid() & 31) >> 2, t = tid() & 3;
  const i64 ntile = (s.T + TCR - 1) / TCR;
  for (i64 bh = bidy(); bh < s.B * s.H; bh += nbidy())
    for (i64 qt = bid(); qt < ntile; qt += nbid()) {
      i64 b = bh / s.H, h = bh % s.H, qb = b * s.sb + h * s.sh, ob = b * s.ob + h * s.oh;
      i64 q0 = qt * TCR, r0 = q0 + 16 * w, row[2] = {r0 + g, r0 + g + 8};
      i64 kend = q0 + TCR < s.T ? q0 + TCR : s.T;
      unsigned qa[4][4], da[4][4];
      tc_afrag(q, qb, s.st, r0, s.T, s.D, qa);
      tc_afrag(dout, ob, s.ot, r0, s.T, s.D, da);
      float li[2], Di[2], acc[8][4];
UNROLL
      for (int r = 0; r < 2; r++) {
        li[r] = row[r] < s.T ? lse[bh * s.T + row[r]] : 0.0f;
        Di[r] = row[r] < s.T ? Dr[bh * s.T + row[r]] : 0.0f;
      }
      tc_zero(acc);
      for (i64 j0 = 0; j0 < kend; j0 += TCR) {
        __syncthreads();
        tc_stage(k, qb, s.st, j0, s.T, s.D, ks, kt);
        tc_stage(v, qb, s.st, j0, s.T, s.D, vs, 0);
        __syncthreads();
UNROLL
        for (int kc = 0; kc < 4; kc++) { // keys j0 + 16 kc ..
          unsigned dsa[4];
UNROLL
          for (int hi = 0; hi < 2; hi++) {
            int nt = 2 * kc + hi;
            float sc[4], dp[4], ds[4];
            tc_two(qa, ks, da, vs, 8 * nt, sc, dp);
UNROLL
            for (int i = 0; i < 4; i++) {
              i64 r = row[i >> 1], c = j0 + 8 * nt + 2 * t + (i & 1);
              float p = r < s.T && c <= r ? fexp(sc[i] * scale - li[i >> 1]) : 0.0f;
              ds[i] = p * (dp[i] - Di[i >> 1]);
            }
            dsa[2 * hi] = pack_bf16(ds[0], ds[1]);
            dsa[2 * hi + 1] = pack_bf16(ds[2], ds[3]);
          }
          tc_mma_row(acc, dsa, kt, 16 * kc);
        }
      }
      const float sc2[2] = {scale, scale};
      tc_store(dq, qb, s.st, row, s.T, s.D, acc, sc2);
    }
}

// dk = scale dS^T q, dv = P^T do: a block per 64 keys, query tiles from its diagonal to the end,
// a 16-query slice at a time (S^T = k q^T and v do^T in 2 n-tiles, then P^T and dS^T as A operands)
KERNEL ts_k_attention_dkv_tc_bf16(const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
                                  const float *Dr, bf16 *dk, bf16 *dv, astr s, float scale) {
  __shared__ __attribute__((aligned(16))) bf16 qs[TCR][TCP], dos[TCR][TCP], qt[64][TCP], dot[64][TCP];
  __shared__ float ls[TCR], drs[TCR];
  const int w = tid() >> 5, g = (tid() & 31) >> 2, t = tid() & 3;
  const i64 ntile = (s.T + TCR - 1) / TCR;
  for (i64 bh = bidy(); bh < s.B * s.H; bh += nbidy())
    for (i64 ktile = bid(); ktile < ntile; ktile += nbid()) {
      i64 b = bh / s.H, h = bh % s.H, qb = b * s.sb + h * s.sh, ob = b * s.ob + h * s.oh;
      i64 k0 = ktile * TCR, r0 = k0 + 16 * w, row[2] = {r0 + g, r0 + g + 8};
      unsigned ka[4][4], va[4][4];
      tc_afrag(k, qb, s.st, r0, s.T, s.D, ka);
      tc_afrag(v, qb, s.st, r0, s.T, s.D, va);
      float ak[8][4], av[8][4];
      tc_zero(ak);
      tc_zero(av);
      for (i64 i0 = k0; i0 < s.T; i0 += TCR) {
        __syncthreads();
        tc_stage(q, qb, s.st, i0, s.T, s.D, qs, qt);
        tc_stage(dout, ob, s.ot, i0, s.T, s.D, dos, dot);
        for (int e = tid(); e < TCR; e += 128) {
          ls[e] = i0 + e < s.T ? lse[bh * s.T + i0 + e] : 0.0f;
          drs[e] = i0 + e < s.T ? Dr[bh * s.T + i0 + e] : 0.0f;
        }
        __syncthreads();
UNROLL
        for (int qc = 0; qc < 4; qc++) { // queries i0 + 16 qc ..
          unsigned pa[4], dsa[4];
UNROLL
          for (int hi = 0; hi < 2; hi++) {
            int nt = 2 * qc + hi;
            float sc[4], dp[4], p[4], ds[4];
            tc_two(ka, qs, va, dos, 8 * nt, sc, dp);
UNROLL
            for (int i = 0; i < 4; i++) {
              i64 j = row[i >> 1];
              int c = 8 * nt + 2 * t + (i & 1);
              p[i] = j < s.T && i0 + c >= j && i0 + c < s.T ? fexp(sc[i] * scale - ls[c]) : 0.0f;
              ds[i] = p[i] * (dp[i] - drs[c]);
            }
            pa[2 * hi] = pack_bf16(p[0], p[1]);
            pa[2 * hi + 1] = pack_bf16(p[2], p[3]);
            dsa[2 * hi] = pack_bf16(ds[0], ds[1]);
            dsa[2 * hi + 1] = pack_bf16(ds[2], ds[3]);
          }
          tc_mma_row(av, pa, dot, 16 * qc);
          tc_mma_row(ak, dsa, qt, 16 * qc);
        }
      }
      const float sc2[2] = {scale, scale}, one[2] = {1.0f, 1.0f};
      tc_store(dk, qb, s.st, row, s.T, s.D, ak, sc2);
      tc_store(dv, qb, s.st, row, s.T, s.D, av, one);
    }
}
