/* Batch normalisation and layer normalisation kernels (f32, contiguous).
 *
 * Batch-norm sees its input as (N, C, S) with S the product of the spatial dims (S = 1 for
 * BatchNorm1d on (N,C)); statistics are per channel over N*S values. Layer-norm sees (R, D) and
 * normalises each row of D values. Saved statistics are the mean and the biased variance (what
 * oneDNN produces and consumes); rstd = 1/sqrt(var + eps) is recomputed where needed. */
#ifndef TS_KERNELS_NORM_H
#define TS_KERNELS_NORM_H

#include <stdint.h>

/* training = 1: batch statistics are written to mean/var (biased) and the running stats are
 *   updated in place: running = (1-momentum)*running + momentum*batch, with the unbiased batch
 *   variance var*M/(M-1), M = N*S (as PyTorch). Requires M > 1.
 * training = 0: normalises with rmean/rvar, which are copied to mean/var (so the backward can
 *   read the statistics it was normalised with from the same place). */
// x (N,C,S), gamma, beta (C), rmean, rvar (C, in/out) -> y (N,C,S), mean, var (C)
int ts__batchnorm_fwd_ref(const float *x, const float *gamma, const float *beta, float *rmean,
                          float *rvar, float *y, float *mean, float *var, int64_t N, int64_t C,
                          int64_t S, float momentum, float eps, int training);
int ts__batchnorm_fwd_dnnl(const float *x, const float *gamma, const float *beta, float *rmean,
                           float *rvar, float *y, float *mean, float *var, int64_t N, int64_t C,
                           int64_t S, float momentum, float eps, int training);
/* training = 1: full derivative through the batch statistics; 0: statistics are constants
 *   (dx = dy * gamma / sqrt(var + eps)). dgamma = sum dy*xhat, dbeta = sum dy either way. */
// dy, x (N,C,S), gamma, mean, var (C) -> dx (N,C,S), dgamma, dbeta (C)
int ts__batchnorm_bwd_ref(const float *dy, const float *x, const float *gamma, const float *mean,
                          const float *var, float *dx, float *dgamma, float *dbeta, int64_t N,
                          int64_t C, int64_t S, float eps, int training);
int ts__batchnorm_bwd_dnnl(const float *dy, const float *x, const float *gamma, const float *mean,
                           const float *var, float *dx, float *dgamma, float *dbeta, int64_t N,
                           int64_t C, int64_t S, float eps, int training);

// x (R,D), gamma, beta (D) -> y (R,D), mean, var (R)
int ts__layernorm_fwd_ref(const float *x, const float *gamma, const float *beta, float *y,
                          float *mean, float *var, int64_t R, int64_t D, float eps);
int ts__layernorm_fwd_dnnl(const float *x, const float *gamma, const float *beta, float *y,
                           float *mean, float *var, int64_t R, int64_t D, float eps);
// dy, x (R,D), gamma (D), mean, var (R) -> dx (R,D), dgamma, dbeta (D)
int ts__layernorm_bwd_ref(const float *dy, const float *x, const float *gamma, const float *mean,
                          const float *var, float *dx, float *dgamma, float *dbeta, int64_t R,
                          int64_t D, float eps);
int ts__layernorm_bwd_dnnl(const float *dy, const float *x, const float *gamma, const float *mean,
                           const float *var, float *dx, float *dgamma, float *dbeta, int64_t R,
                           int64_t D, float eps);

#endif
