// Layer normalisation over the last dimension (R rows of D): the forward one block per row (mean,
// then the biased variance of the centred row, as src/kernels/norm.c's ts__ln_fwd_row); the
// backward's dx one block per row, its dgamma/dbeta in two steps (column sums over chunks of rows,
// then over the chunks, both in order: deterministic, no atomics).
#include "ts_cuda.h"


// x (R,D), gamma, beta (D) f32 -> y (R,D), mean, var (R)
template <typename T, typename TG>
DEV void ln_fwd(const T *x, const TG *gamma, const TG *beta, T *y, float *mean, float *var, i64 R, i64 D,
                float eps) {
  __shared__ float sh[32];
  for (i64 r = bid(); r < R; r += nbid()) {
    const T *p = x + r * D;
    float s = 0.0f;
    for (i64 j = tid(); j < D; j += ntid()) s += ld(p, j);
    float m = block_sum(s, sh) / (float)D;
    float q = 0.0f;
    for (i64 j = tid(); j < D; j += ntid()) {
      float d = ld(p, j) - m;
      q += d * d;
    }
    float v = block_sum(q, sh) / (float)D, rs = 1.0f / fsqrt(v + eps);
    for (i64 j = tid(); j < D; j += ntid())
      st(y, r * D + j, (ld(p, j) - m) * rs * (gamma ? ld(gamma, j) : 1.0f) + (beta ? ld(beta, j) : 0.0f));
    if (tid() == 0) {
      mean[r] = m;
      var[r] = v;
    }
  }
}
KERNEL ts_k_layernorm_fwd_f32(const float *x, const float *gamma, const float *beta, float *y, float *mean, float *var,
                              i64 R, i64 D, float eps) {
  ln_fwd(x, gamma, beta, y, mean, var, R, D, eps);
}
KERNEL ts_k_layernorm_fwd_bf16(const bf16 *x, const float *gamma, const float *beta, bf16 *y, float *mean, float *var,
                               i64 R, i64 D, float eps) {
  ln_fwd(x, gamma, beta, y, mean, var, R, D, eps);
}

// dy, x (R,D), gamma (D), mean, var (R) -> dx (R,D):
// dx = rs (g - mean_j g - xhat mean_j(g xhat)), g = dy gamma, xhat = (x - m) rs
template <typename T, typename TG>
DEV void ln_bwd_dx(const T *dy, const T *x, const TG *gamma, const float *mean, const float *var, T *dx, i64 R,
                   i64 D, float eps) {
  __shared__ float sh[32];
  for (i64 r = bid(); r < R; r += nbid()) {
    float m = mean[r], rs = 1.0f / fsqrt(var[r] + eps), a = 0.0f, b = 0.0f;
    for (i64 j = tid(); j < D; j += ntid()) {
      float g = ld(dy, r * D + j) * (gamma ? ld(gamma, j) : 1.0f), xh = (ld(x, r * D + j) - m) * rs;
      a += g;
      b += g * xh;
    }
    a = block_sum(a, sh) / (float)D;
    b = block_sum(b, sh) / (float)D;
    for (i64 j = tid(); j < D; j += ntid()) {
      float g = ld(dy, r * D + j) * (gamma ? ld(gamma, j) : 1.0f), xh = (ld(x, r * D + j) - m) * rs;
      st(dx, r * D + j, rs * (g - a - xh * b));
    }
  }
}
// dgamma (D) = sum_r dy xhat, dbeta (D) = sum_r dy in two steps (not a thread per column over
// every row: GPT-2's 768 columns would be 3 blocks): a block per (256 columns, chunk of LNC rows)
// sums its columns over the chunk's rows in order into part (P chunks x 2D: sums of dy xhat, then
// of dy); then each column's chunk sums in chunk order. Deterministic; P from the shape only.
#define LNC 64
template <typename T>
DEV void ln_bwd_parts(const T *dy, const T *x, const float *mean, const float *var, i64 R, i64 D, float eps, i64 P,
                      float *part) {
  __shared__ float sm[LNC], srs[LNC];
  for (i64 p = bidy(); p < P; p += nbidy()) {
    const i64 r0 = p * LNC, n = R - r0 < LNC ? R - r0 : LNC;
    __syncthreads(); // the previous chunk's rows read by all
    for (int k = tid(); k < n; k += ntid()) sm[k] = mean[r0 + k], srs[k] = 1.0f / fsqrt(var[r0 + k] + eps);
    __syncthreads();
    for (i64 j = gidx(); j < D; j += gstride()) {
      float sg = 0.0f, sb = 0.0f;
      for (i64 k = 0; k < n; k++) {
        float g = ld(dy, (r0 + k) * D + j);
        sg += g * (ld(x, (r0 + k) * D + j) - sm[k]) * srs[k];
        sb += g;
      }
      part[p * 2 * D + j] = sg;
      part[p * 2 * D + D + j] = sb;
    }
  }
}
template <typename TG> DEV void ln_bwd_fold(const float *part, i64 D, i64 P, TG *dgamma, TG *dbeta) {
  for (i64 j = gidx(); j < D; j += gstride()) {
    float sg = 0.0f, sb = 0.0f;
    for (i64 p = 0; p < P; p++) sg += part[p * 2 * D + j], sb += part[p * 2 * D + D + j];
    if (dgamma) st(dgamma, j, sg);
    if (dbeta) st(dbeta, j, sb);
  }
}
KERNEL ts_k_layernorm_bwd_parts_f32(const float *dy, const float *x, const float *mean, const float *var, i64 R, i64 D,
                                    float eps, i64 P, float *part) {
  ln_bwd_parts(dy, x, mean, var, R, D, eps, P, part);
}
KERNEL ts_k_layernorm_bwd_parts_bf16(const bf16 *dy, const bf16 *x, const float *mean, const float *var, i64 R, i64 D,
                                     float eps, i64 P, float *part) {
  ln_bwd_parts(dy, x, mean, var, R, D, eps, P, part);
}
KERNEL ts_k_layernorm_bwd_fold_f32(const float *part, i64 D, i64 P, float *dgamma, float *dbeta) {
  ln_bwd_fold(part, D, P, dgamma, dbeta);
}
KERNEL ts_k_layernorm_bwd_fold_bf16(const float *part, i64 D, i64 P, bf16 *dgamma, bf16 *dbeta) {
  ln_bwd_fold(part, D, P, dgamma, dbeta);
}
KERNEL ts_k_layernorm_bwd_dx_f32(const float *dy, const float *x, const float *gamma, const float *mean,
                                 const float *var, float *dx, i64 R, i64 D, float eps) {
  ln_bwd_dx(dy, x, gamma, mean, var, dx, R, D, eps);
}
KERNEL ts_k_layernorm_bwd_dx_bf16(const bf16 *dy, const bf16 *x, const float *gamma, const float *mean,
                                  const float *var, bf16 *dx, i64 R, i64 D, float eps) {
  ln_bwd_dx(dy, x, gamma, mean, var, dx, R, D, eps);
}
// bf16 gamma and beta (amp O3: every parameter bf16); dgamma, dbeta rounded once
KERNEL ts_k_layernorm_fwd_bf16g(const bf16 *x, const bf16 *gamma, const bf16 *beta, bf16 *y, float *mean, float *var,
                                i64 R, i64 D, float eps) {
  ln_fwd(x, gamma, beta, y, mean, var, R, D, eps);
}
KERNEL ts_k_layernorm_bwd_dx_bf16g(const bf16 *dy, const bf16 *x, const bf16 *gamma, const float *mean, const float *var,
                                   bf16 *dx, i64 R, i64 D, float eps) {
  ln_bwd_dx(dy, x, gamma, mean, var, dx, R, D, eps);
}
