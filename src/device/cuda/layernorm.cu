// Layer normalisation over the last dimension (R rows of D): the forward one block per row (mean,
// then the biased variance of the centred row, as src/kernels/norm.c's ts__ln_fwd_row); the
// backward's dx one block per row, its dgamma/dbeta one thread per column summing the rows in
// order (deterministic, no atomics).
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
// dgamma (D) = sum_r dy xhat, dbeta (D) = sum_r dy: thread j sums its column over the rows in order
template <typename T, typename TG>
DEV void ln_bwd_params(const T *dy, const T *x, const float *mean, const float *var, TG *dgamma, TG *dbeta, i64 R,
                       i64 D, float eps) {
  for (i64 j = gidx(); j < D; j += gstride()) {
    float sg = 0.0f, sb = 0.0f;
    for (i64 r = 0; r < R; r++) {
      float g = ld(dy, r * D + j);
      sg += g * (ld(x, r * D + j) - mean[r]) * (1.0f / fsqrt(var[r] + eps));
      sb += g;
    }
    if (dgamma) st(dgamma, j, sg);
    if (dbeta) st(dbeta, j, sb);
  }
}
KERNEL ts_k_layernorm_bwd_dx_f32(const float *dy, const float *x, const float *gamma, const float *mean,
                                 const float *var, float *dx, i64 R, i64 D, float eps) {
  ln_bwd_dx(dy, x, gamma, mean, var, dx, R, D, eps);
}
KERNEL ts_k_layernorm_bwd_dx_bf16(const bf16 *dy, const bf16 *x, const float *gamma, const float *mean,
                                  const float *var, bf16 *dx, i64 R, i64 D, float eps) {
  ln_bwd_dx(dy, x, gamma, mean, var, dx, R, D, eps);
}
KERNEL ts_k_layernorm_bwd_params_f32(const float *dy, const float *x, const float *mean, const float *var, float *dgamma,
                                     float *dbeta, i64 R, i64 D, float eps) {
  ln_bwd_params(dy, x, mean, var, dgamma, dbeta, R, D, eps);
}
KERNEL ts_k_layernorm_bwd_params_bf16(const bf16 *dy, const bf16 *x, const float *mean, const float *var,
                                      float *dgamma, float *dbeta, i64 R, i64 D, float eps) {
  ln_bwd_params(dy, x, mean, var, dgamma, dbeta, R, D, eps);
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
KERNEL ts_k_layernorm_bwd_params_bf16g(const bf16 *dy, const bf16 *x, const float *mean, const float *var, bf16 *dgamma,
                                       bf16 *dbeta, i64 R, i64 D, float eps) {
  ln_bwd_params(dy, x, mean, var, dgamma, dbeta, R, D, eps);
}
