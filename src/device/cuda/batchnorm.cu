// Batch normalisation over (N, C, S) as the CPU computes it (src/kernels/norm.c, ts__bn_fwd/_bwd),
// in steps parallel over each channel's M = N S positions (not a block per channel: ResNet-50's
// first layers have 64 channels of 1.6 million positions each at batch 128):
//   forward: the positions of a channel cut into P chunks (ts__gpu_bn_chunks: from the shape only,
//     so the sums are the same on every GPU), a block per (chunk, channel) summing (x - K) and
//     (x - K)^2, K the channel's first value (close to the mean, so the one-pass variance keeps its
//     digits; SyncBatchNorm: the running mean, the same on every rank); the chunks' sums folded in
//     order (double) into part (2C + 1: the sums, then the count); mean = K + s1/M, biased var =
//     s2/M - (s1/M)^2, the running statistics updated with the unbiased one; a = gamma / sqrt(var +
//     eps), b = beta - mean a; then y = x a + b element-wise, over the whole tensor;
//   backward: per (chunk, channel) sum dy and sum dy (x - mean), folded; dbeta = sum dy, dgamma =
//     sum dy (x - mean) / sqrt(var + eps); dx = A dy + B x + K element-wise (A, B, K per channel).
// Fused with a following ReLU (the executor's BN+ReLU fusion, as the CPU's): y = relu(x a + b)
// written in place of the ReLU's output, a and b kept (ab, 2C floats) for the backward, which
// passes dy through the ReLU's gradient recomputed from x a + b: bitwise the unfused nodes
// (eltwise.cu's relu on the rounded value: for bf16, round(v) > 0 iff v > 2^-134).
// f32 and bf16 x/y/dy/dx; gamma, beta, dgamma, dbeta f32 or bf16 (with bf16 x); statistics f32.
// Every sum in a fixed tree: deterministic.
#include "ts_cuda.h"


// x a + b: one expression (a fused multiply-add) for the forward's value and the backward's mask
DEV float bn_v(float x, float a, float b) { return __builtin_fmaf(x, a, b); }
DEV float bn_relu(float v, float alpha) { return v > 0 ? v : alpha * v; } // eltwise.cu's relu
// the ReLU's gradient from its (rounded) output's sign: for bf16, round(v) > 0 iff v > 2^-134 (f32 bits 0x8000)
DEV float bn_relu_grad(float g, float v, int lp, float alpha) { return v > (lp ? i2f(0x8000) : 0.0f) ? g : alpha * g; }
template <typename T> DEV int is_lp(const T *) { return sizeof(T) == 2; }

// channel c of element i of (N, C, S) (32-bit arithmetic while the tensor allows it)
DEV i64 bn_chan(i64 i, i64 C, i64 S, int small) {
  return small ? (i64)(((unsigned)i / (unsigned)S) % (unsigned)C) : (i / S) % C;
}

// chunk p (of P) of channel c's positions [i0, i1): their offsets (n C + c) S + s walked without a
// division per step
struct bn_walk {
  i64 n, s, dn, ds;
};
DEV bn_walk bn_walk_at(i64 i, i64 S) { return bn_walk{i / S, i % S, ntid() / S, ntid() % S}; }
DEV void bn_walk_next(bn_walk &w, i64 S) {
  w.n += w.dn, w.s += w.ds;
  if (w.s >= S) w.s -= S, w.n++;
}

// the blocks' (chunk, channel) pairs: grid (P, C), or with cf (channels fastest: the launcher's
// choice when S is 1, i.e. NHWC, where a chunk's positions hold every channel: the blocks running
// together then read the same lines) grid (C, P). Each pair's sums are the same either way.
#define BN_PAIRS(cf)                                                                                         \
  for (i64 c = (cf) ? bid() : bidy(); c < C; c += (cf) ? nbid() : nbidy())                                  \
    for (i64 p = (cf) ? bidy() : bid(); p < P; p += (cf) ? nbidy() : nbid())

// forward partials: pp[c P + p] = sum (x - K), pp[(C + c) P + p] = sum (x - K)^2 over chunk p of
// channel c; K = Kin[c] (or the channel's first value), written to Kout[c]
template <typename T>
DEV void bn_psums(const T *x, const float *Kin, float *Kout, i64 N, i64 C, i64 S, i64 P, int cf, float *pp) {
  __shared__ float sh[32];
  const i64 M = N * S, L = (M + P - 1) / P;
  BN_PAIRS(cf) {
      const float k = Kin ? Kin[c] : ld(x, c * S);
      const i64 i0 = p * L, i1 = i0 + L < M ? i0 + L : M;
      float s1 = 0.0f, s2 = 0.0f;
      bn_walk w = bn_walk_at(i0 + tid(), S);
      for (i64 i = i0 + tid(); i < i1; i += ntid(), bn_walk_next(w, S)) {
        float v = ld(x, (w.n * C + c) * S + w.s) - k;
        s1 += v;
        s2 += v * v;
      }
      s1 = block_sum(s1, sh);
      s2 = block_sum(s2, sh);
      if (tid() == 0) {
        pp[c * P + p] = s1, pp[(C + c) * P + p] = s2;
        if (p == 0 && Kout) Kout[c] = k;
      }
    }
}
KERNEL ts_k_bn_psums_f32(const float *x, const float *Kin, float *Kout, i64 N, i64 C, i64 S, i64 P, int cf, float *pp) {
  bn_psums(x, Kin, Kout, N, C, S, P, cf, pp);
}
KERNEL ts_k_bn_psums_bf16(const bf16 *x, const float *Kin, float *Kout, i64 N, i64 C, i64 S, i64 P, int cf, float *pp) {
  bn_psums(x, Kin, Kout, N, C, S, P, cf, pp);
}

// backward partials: sum g and sum g (x - mean), g = dy (through the fused ReLU's gradient when ab)
template <typename T>
DEV void bn_bpsums(const T *dy, const T *x, const float *mean, const float *ab, float alpha, i64 N, i64 C, i64 S, i64 P,
                   int cf, float *pp) {
  __shared__ float sh[32];
  const i64 M = N * S, L = (M + P - 1) / P;
  const int lp = is_lp(x);
  BN_PAIRS(cf) {
      const float m = mean[c], ra = ab ? ab[c] : 0.0f, rb = ab ? ab[C + c] : 0.0f;
      const i64 i0 = p * L, i1 = i0 + L < M ? i0 + L : M;
      float s1 = 0.0f, s2 = 0.0f;
      bn_walk w = bn_walk_at(i0 + tid(), S);
      for (i64 i = i0 + tid(); i < i1; i += ntid(), bn_walk_next(w, S)) {
        i64 k = (w.n * C + c) * S + w.s;
        float xv = ld(x, k), g = ld(dy, k);
        if (ab) g = bn_relu_grad(g, bn_v(xv, ra, rb), lp, alpha);
        s1 += g;
        s2 += g * (xv - m);
      }
      s1 = block_sum(s1, sh);
      s2 = block_sum(s2, sh);
      if (tid() == 0) pp[c * P + p] = s1, pp[(C + c) * P + p] = s2;
    }
}
KERNEL ts_k_bn_bpsums_f32(const float *dy, const float *x, const float *mean, const float *ab, float alpha, i64 N,
                          i64 C, i64 S, i64 P, int cf, float *pp) {
  bn_bpsums(dy, x, mean, ab, alpha, N, C, S, P, cf, pp);
}
KERNEL ts_k_bn_bpsums_bf16(const bf16 *dy, const bf16 *x, const float *mean, const float *ab, float alpha, i64 N,
                           i64 C, i64 S, i64 P, int cf, float *pp) {
  bn_bpsums(dy, x, mean, ab, alpha, N, C, S, P, cf, pp);
}

// Channels last (S 1: x as (M, C), a position's channels side by side), a block per (32 channels,
// chunk) instead of per (channel, chunk): each warp reads one position's 32 channels together
// (one coalesced line) where the kernels above read one value every C elements. The same sums,
// bit for bit: a block of 1024 threads, thread (channel cx, warp w) keeps the 8 partial sums that
// threads w, w + 32, ..., w + 224 of the kernels above keep for its channel (thread t of 256
// summing the chunk's positions t, t + 256, ... in order); warp w then folds channel w's 256
// partials through block_sum's tree (warp_sum over each 32, then over the 8 warp sums). Forward
// (BWD false): sums of (x - K) and (x - K)^2, K = Kin[c] or the channel's first value (written to
// Kout); backward: of g and g (x - mean), g = dy through the fused ReLU's gradient when ab.
#define BN_CL_W 32 // channels a block (a warp's lanes), and warps a block
#define BN_CL_NW 16 // warps a block
#define BN_CL_J (256 / BN_CL_NW) // partial sums a thread: the 256 of the kernels above over the warps
// The block's partials s (BN_CL_J a thread) folded per channel as block_sum folds a block of 256:
// warp w folds channels w, w + NW, ... (warp_sum over each 32 of the 256, then over the 8 warp
// sums) into pp[c P + p].
DEVI void bn_cl_fold(float (*red)[256 + 1], const float *s, i64 g, i64 C, i64 P, i64 p, float *pp) {
  const int cx = tid() & 31, w = tid() >> 5;
  __syncthreads(); // red free from the last use
  UNROLL for (int j = 0; j < BN_CL_J; j++) red[cx][w + BN_CL_NW * j] = s[j];
  __syncthreads();
  for (int q = 0; q < BN_CL_W / BN_CL_NW; q++) {
    const int ch = w + BN_CL_NW * q;
    float mine = 0.0f;
    for (int jw = 0; jw < 8; jw++) {
      float v = warp_sum(red[ch][32 * jw + cx]);
      if (cx == jw) mine = v;
    }
    const float tot = warp_sum(cx < 8 ? mine : 0.0f);
    if (cx == 0 && g * BN_CL_W + ch < C) pp[(g * BN_CL_W + ch) * P + p] = tot;
  }
}
// a thread's partial sums over positions from, from + 256, ... below i1 (offsets unsigned: the
// launcher takes this path for tensors of at most 2^32 - 1 elements; 32-bit offsets keep the
// loads' addresses out of 64-bit registers: no spills)
template <bool BWD, typename T>
DEVI void bn_cl_acc(const T *x, const T *dy, i64 from, i64 i1, i64 C, i64 c, int on, float k, const float *ab, float ra,
                    float rb, float alpha, float (&s1)[BN_CL_J], float (&s2)[BN_CL_J]) {
  const int lp = is_lp(x);
  const unsigned step = (unsigned)(BN_CL_NW * C); // from one of the thread's positions to its next
  for (i64 base = from; base < i1 && on; base += 256) {
    // positions base + NW j: what thread w + NW j of the per-channel kernels reads
    const int nj = (int)((i1 - base + BN_CL_NW - 1) / BN_CL_NW); // of them in the chunk
    const unsigned o0 = (unsigned)(base * C + c);
    UNROLL for (int j = 0; j < BN_CL_J; j++) {
      if (j < nj) {
        const unsigned o = o0 + (unsigned)j * step;
        if (BWD) {
          float xv = ld(x, o), gv = ld(dy, o);
          if (ab) gv = bn_relu_grad(gv, bn_v(xv, ra, rb), lp, alpha);
          s1[j] += gv;
          s2[j] += gv * (xv - k);
        } else {
          float v = ld(x, o) - k;
          s1[j] += v;
          s2[j] += v * v;
        }
      }
    }
  }
}
template <bool BWD, typename T>
DEVI void bn_cl_psums(const T *x, const T *dy, const float *Kin, float *Kout, const float *mean, const float *ab,
                      float alpha, i64 M, i64 C, i64 P, float *pp) {
  __shared__ float red[BN_CL_W][256 + 1]; // a channel's 256 partials (+1: no bank conflicts)
  const int cx = tid() & 31, w = tid() >> 5;
  const i64 L = (M + P - 1) / P;
  for (i64 g = bid(); g * BN_CL_W < C; g += nbid())
    for (i64 p = bidy(); p < P; p += nbidy()) {
      const i64 c = g * BN_CL_W + cx, i0 = p * L, i1 = i0 + L < M ? i0 + L : M;
      const int on = c < C;
      float k = 0.0f, ra = 0.0f, rb = 0.0f;
      if (on && BWD) k = mean[c], ra = ab ? ab[c] : 0.0f, rb = ab ? ab[C + c] : 0.0f;
      else if (on) k = Kin ? Kin[c] : ld(x, c);
      float s1[BN_CL_J], s2[BN_CL_J];
      UNROLL for (int j = 0; j < BN_CL_J; j++) s1[j] = s2[j] = 0.0f;
      bn_cl_acc<BWD>(x, dy, i0 + w, i1, C, c, on, k, ab, ra, rb, alpha, s1, s2);
      bn_cl_fold(red, s1, g, C, P, p, pp);
      bn_cl_fold(red, s2, g, C, P, p, pp + C * P);
      if (p == 0 && w == 0 && on && !BWD && Kout) Kout[c] = k;
    }
}
KERNEL_512 ts_k_bn_cl_psums_f32(const float *x, const float *Kin, float *Kout, i64 M, i64 C, i64 P, float *pp) {
  bn_cl_psums<false>(x, (const float *)0, Kin, Kout, (const float *)0, (const float *)0, 0.0f, M, C, P, pp);
}
KERNEL_512 ts_k_bn_cl_psums_bf16(const bf16 *x, const float *Kin, float *Kout, i64 M, i64 C, i64 P, float *pp) {
  bn_cl_psums<false>(x, (const bf16 *)0, Kin, Kout, (const float *)0, (const float *)0, 0.0f, M, C, P, pp);
}
KERNEL_512 ts_k_bn_cl_bpsums_f32(const float *dy, const float *x, const float *mean, const float *ab, float alpha,
                                  i64 M, i64 C, i64 P, float *pp) {
  bn_cl_psums<true>(x, dy, (const float *)0, (float *)0, mean, ab, alpha, M, C, P, pp);
}
KERNEL_512 ts_k_bn_cl_bpsums_bf16(const bf16 *dy, const bf16 *x, const float *mean, const float *ab, float alpha,
                                   i64 M, i64 C, i64 P, float *pp) {
  bn_cl_psums<true>(x, dy, (const float *)0, (float *)0, mean, ab, alpha, M, C, P, pp);
}

// part (2C + 1) = the chunks' sums in chunk order (double), then the count M
KERNEL ts_k_bn_fold(const float *pp, i64 C, i64 P, i64 M, float *part) {
  for (i64 r = gidx(); r < 2 * C; r += gstride()) {
    double t = 0.0;
    for (i64 p = 0; p < P; p++) t += (double)pp[r * P + p];
    part[r] = (float)t;
  }
  if (gidx() == 0) part[2 * C] = (float)M;
}

// out (n) = the sum over the P rows of all (P, n), row after row (rank order: SyncBatchNorm's
// totals, the same on every rank)
KERNEL ts_k_sum_rows(const float *all, i64 P, i64 n, float *out) {
  for (i64 i = gidx(); i < n; i += gstride()) {
    float t = 0.0f;
    for (i64 r = 0; r < P; r++) t += all[r * n + i];
    out[i] = t;
  }
}

// the statistics from part (mean = K + s1/M, biased variance), the running ones updated with the
// unbiased variance of the M values
KERNEL ts_k_bn_sync_stats(const float *tot, const float *K, i64 C, float momentum, float *rmean, float *rvar,
                          float *mean, float *var) {
  double M = tot[2 * C];
  for (i64 c = gidx(); c < C; c += gstride()) {
    double dm = tot[c] / M, v = tot[C + c] / M - dm * dm;
    float m = (float)(K[c] + dm), vf = (float)(v > 0 ? v : 0);
    mean[c] = m, var[c] = vf;
    rmean[c] = (1.0f - momentum) * rmean[c] + momentum * m;
    rvar[c] = (1.0f - momentum) * rvar[c] + momentum * vf * ((float)M / (float)(M - 1));
  }
}

// scale and shift: a = gamma / sqrt(var + eps), b = beta - mean a (mean, var: the batch's, or the
// running statistics copied into them when not training)
template <typename TG>
DEV void bn_ab(const float *rmean, const float *rvar, float *mean, float *var, const TG *gamma, const TG *beta, i64 C,
               float eps, int copy, float *ab) {
  for (i64 c = gidx(); c < C; c += gstride()) {
    if (copy) mean[c] = rmean[c], var[c] = rvar[c];
    float ga = gamma ? ld(gamma, c) : 1.0f, be = beta ? ld(beta, c) : 0.0f;
    float a = ga / fsqrt(var[c] + eps);
    ab[c] = a, ab[C + c] = be - mean[c] * a;
  }
}
KERNEL ts_k_bn_ab_f32(const float *rmean, const float *rvar, float *mean, float *var, const float *gamma,
                      const float *beta, i64 C, float eps, int copy, float *ab) {
  bn_ab(rmean, rvar, mean, var, gamma, beta, C, eps, copy, ab);
}
KERNEL ts_k_bn_ab_bf16(const float *rmean, const float *rvar, float *mean, float *var, const bf16 *gamma,
                       const bf16 *beta, i64 C, float eps, int copy, float *ab) {
  bn_ab(rmean, rvar, mean, var, gamma, beta, C, eps, copy, ab);
}

// y = x a[c] + b[c] (relu: then the ReLU, slope alpha), element-wise over (N, C, S)
template <typename T> DEV void bn_apply(const T *x, const float *ab, T *y, i64 N, i64 C, i64 S, int relu, float alpha) {
  const i64 n = N * C * S;
  const int small = n < 0x7fffffff;
  for (i64 i = gidx(); i < n; i += gstride()) {
    i64 c = bn_chan(i, C, S, small);
    float v = bn_v(ld(x, i), ab[c], ab[C + c]);
    st(y, i, relu ? bn_relu(v, alpha) : v);
  }
}
KERNEL ts_k_bn_apply_f32(const float *x, const float *ab, float *y, i64 N, i64 C, i64 S, int relu, float alpha) {
  bn_apply(x, ab, y, N, C, S, relu, alpha);
}
KERNEL ts_k_bn_apply_bf16(const bf16 *x, const float *ab, bf16 *y, i64 N, i64 C, i64 S, int relu, float alpha) {
  bn_apply(x, ab, y, N, C, S, relu, alpha);
}

// the backward's coefficients: from loc (this rank's sums; NULL: none) dgamma = sdx rstd and dbeta
// = sdy; from tot (the sums over every rank's positions, or loc) A = gamma rstd and, training, B =
// -gamma rstd^3 sdx / M, K = -A sdy / M - B mean, into abk (3C)
template <typename TG>
DEV void bn_coef(const float *loc, const float *tot, const TG *gamma, const float *mean, const float *var, i64 C,
                 float eps, int training, TG *dgamma, TG *dbeta, float *abk) {
  for (i64 c = gidx(); c < C; c += gstride()) {
    double rstd = 1.0 / dsqrt((double)var[c] + (double)eps);
    if (loc) {
      if (dbeta) st(dbeta, c, loc[c]);
      if (dgamma) st(dgamma, c, (float)((double)loc[C + c] * rstd));
    }
    if (tot) {
      double M = tot[2 * C], ga = gamma ? ld(gamma, c) : 1.0f, A = ga * rstd, B = 0, K = 0;
      if (training) {
        B = -ga * rstd * rstd * rstd * (double)tot[C + c] / M;
        K = -A * (double)tot[c] / M - B * mean[c];
      }
      abk[c] = (float)A, abk[C + c] = (float)B, abk[2 * C + c] = (float)K;
    }
  }
}
KERNEL ts_k_bn_coef_f32(const float *loc, const float *tot, const float *gamma, const float *mean, const float *var,
                        i64 C, float eps, int training, float *dgamma, float *dbeta, float *abk) {
  bn_coef(loc, tot, gamma, mean, var, C, eps, training, dgamma, dbeta, abk);
}
KERNEL ts_k_bn_coef_bf16(const float *loc, const float *tot, const bf16 *gamma, const float *mean, const float *var,
                         i64 C, float eps, int training, bf16 *dgamma, bf16 *dbeta, float *abk) {
  bn_coef(loc, tot, gamma, mean, var, C, eps, training, dgamma, dbeta, abk);
}

// dx = A g + B x + K element-wise, g = dy (through the fused ReLU's gradient when ab)
template <typename T>
DEV void bn_dx(const T *dy, const T *x, const float *abk, const float *ab, float alpha, T *dx, i64 N, i64 C, i64 S) {
  const i64 n = N * C * S;
  const int small = n < 0x7fffffff, lp = is_lp(x);
  for (i64 i = gidx(); i < n; i += gstride()) {
    i64 c = bn_chan(i, C, S, small);
    float xv = ld(x, i), g = ld(dy, i);
    if (ab) g = bn_relu_grad(g, bn_v(xv, ab[c], ab[C + c]), lp, alpha);
    st(dx, i, abk[c] * g + abk[C + c] * xv + abk[2 * C + c]);
  }
}
KERNEL ts_k_bn_dx_f32(const float *dy, const float *x, const float *abk, const float *ab, float alpha, float *dx, i64 N,
                      i64 C, i64 S) {
  bn_dx(dy, x, abk, ab, alpha, dx, N, C, S);
}
KERNEL ts_k_bn_dx_bf16(const bf16 *dy, const bf16 *x, const float *abk, const float *ab, float alpha, bf16 *dx, i64 N,
                       i64 C, i64 S) {
  bn_dx(dy, x, abk, ab, alpha, dx, N, C, S);
}
