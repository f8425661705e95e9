/* Batch normalisation and layer normalisation kernels (f32, contiguous).
 *
 * Batch-norm sees its input as (N, C, S) with S the product of the spatial dims (S = 1 for
 * BatchNorm1d on (N,C)); statistics are per channel over N*S values. Layer-norm sees (R, D) and
 * normalises each row of D values. Saved statistics are the mean and the biased variance (what
 * oneDNN produces and consumes); rstd = 1/sqrt(var + eps) is recomputed where needed. */
#ifndef TS_KERNELS_NORM_H
#define TS_KERNELS_NORM_H

#include <stdint.h>

#include "tessera/tensor.h"

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
/* Synchronised batch-norm (statistics over several ranks): `sum` replaces v[0..n) by its
 * element-wise sum over every participant, identically everywhere (TS_OK or an error status). */
typedef struct {
  int (*sum)(double *v, int64_t n, void *user);
  void *user;
} ts__bn_reducer;
/* As ts__batchnorm_fwd_ref, with the training statistics over every participant of `red` (NULL:
 * this call's data only): per-channel sums around the running mean and the count are reduced,
 * so every rank normalises with the statistics of the union of their batches, and M in the
 * running-variance correction is the total count. */
int ts__batchnorm_fwd_sync(const float *x, const float *gamma, const float *beta, float *rmean,
                           float *rvar, float *y, float *mean, float *var, int64_t N, int64_t C,
                           int64_t S, float momentum, float eps, int training, const ts__bn_reducer *red);
/* training = 1: full derivative through the batch statistics; 0: statistics are constants
 *   (dx = dy * gamma / sqrt(var + eps)). dgamma = sum dy*xhat, dbeta = sum dy either way. */
// dy, x (N,C,S), gamma, mean, var (C) -> dx (N,C,S), dgamma, dbeta (C)
int ts__batchnorm_bwd_ref(const float *dy, const float *x, const float *gamma, const float *mean,
                          const float *var, float *dx, float *dgamma, float *dbeta, int64_t N,
                          int64_t C, int64_t S, float eps, int training);
/* As ts__batchnorm_bwd_ref after ts__batchnorm_fwd_sync: dx uses sum dy and sum dy*(x-mean)
 * reduced over every participant (the derivative of the union's statistics); dgamma, dbeta are
 * this call's own sums. */
int ts__batchnorm_bwd_sync(const float *dy, const float *x, const float *gamma, const float *mean,
                           const float *var, float *dx, float *dgamma, float *dbeta, int64_t N,
                           int64_t C, int64_t S, float eps, int training, const ts__bn_reducer *red);
int ts__batchnorm_bwd_dnnl(const float *dy, const float *x, const float *gamma, const float *mean,
                           const float *var, float *dx, float *dgamma, float *dbeta, int64_t N,
                           int64_t C, int64_t S, float eps, int training);

/* Batch norm fused with the ReLU that follows it (the executor's BN+ReLU fusion, exec.c): the
 * forward writes y = relu(bn(x)) (negative slope alpha) and copies its per-channel scale and shift
 * (y = relu(x*ab[c] + ab[C+c]), 2C floats) to ab; the backward takes dy of the ReLU's output and
 * the same ab, recomputes where the ReLU's output was positive from x, and gives the pair's dx,
 * dgamma, dbeta. Each result is bitwise that of batch norm, then ELTWISE relu / its ELTWISE_BWD
 * (from the output) on the stored tensors. f32 and bf16 with spatial dims (S > 1) only. */
typedef struct {
  float alpha;
  float *ab; /* 2C floats: written by the forward, read by the backward */
} ts__bn_relu;

/* The batch-norm loops behind the f32 reference/sync kernels above, for x/y (dy/dx) of dtype dt
 * (f32, bf16 or f16: bf16 converted inside the same loops, f16 runs widened into f32 buffers;
 * the f32 arithmetic either way, each 16-bit output rounded once); gamma, beta, the statistics
 * and dgamma/dbeta f32. red as in the _sync kernels
 * (NULL: local statistics); the statistics exchange is in double whatever dt is. */
// x (N,C,S) dt, gamma, beta (C), rmean, rvar (C, in/out) -> y (N,C,S) dt, mean, var (C)
int ts__bn_fwd(ts_dtype dt, const void *x, const float *gamma, const float *beta, float *rmean, float *rvar,
               void *y, float *mean, float *var, int64_t N, int64_t C, int64_t S, float momentum, float eps,
               int training, const ts__bn_reducer *red, const ts__bn_relu *relu);
// dy, x (N,C,S) dt, gamma, mean, var (C) -> dx (N,C,S) dt, dgamma, dbeta (C)
int ts__bn_bwd(ts_dtype dt, const void *dy, const void *x, const float *gamma, const float *mean, const float *var,
               void *dx, float *dgamma, float *dbeta, int64_t N, int64_t C, int64_t S, float eps, int training,
               const ts__bn_reducer *red, const ts__bn_relu *relu);

/* 16-bit batch norm (norm_bf16.c): x, y, dy, dx of dtype dt (TS_BF16/TS_F16); gamma/beta and
 * dgamma/dbeta of gdt (f32 or dt; widened once, C values); rmean/rvar/mean/var f32. With dnnl = 1,
 * bf16 and no reducer: oneDNN's batch normalization on bf16 x/y (ncsp_bnorm on plain NCHW in
 * oneDNN 2.6); otherwise the native loops of ts__bn_fwd/ts__bn_bwd (SyncBatchNorm always). */
// x (N,C,S) dt, gamma, beta (C) gdt, rmean, rvar (C) f32 in/out -> y (N,C,S) dt, mean, var (C) f32
int ts__batchnorm_fwd_lp(ts_dtype dt, ts_dtype gdt, const void *x, const void *gamma, const void *beta,
                         float *rmean, float *rvar, void *y, float *mean, float *var, int64_t N, int64_t C,
                         int64_t S, float momentum, float eps, int training, const ts__bn_reducer *red, int dnnl);
// dy, x (N,C,S) dt, gamma (C) gdt, mean, var (C) f32 -> dx (N,C,S) dt, dgamma, dbeta (C) gdt
int ts__batchnorm_bwd_lp(ts_dtype dt, ts_dtype gdt, const void *dy, const void *x, const void *gamma,
                         const float *mean, const float *var, void *dx, void *dgamma, void *dbeta, int64_t N,
                         int64_t C, int64_t S, float eps, int training, const ts__bn_reducer *red, int dnnl);
/* The same with the ReLU fused (ts__bn_relu above; relu not NULL), for x of dt f32 or bf16 and
 * gamma of gdt f32 or dt; always the native loops (no oneDNN). */
// x (N,C,S) dt, gamma, beta (C) gdt, rmean, rvar (C) f32 in/out -> y = relu(bn(x)) (N,C,S) dt, mean, var (C) f32
int ts__batchnorm_relu_fwd(ts_dtype dt, ts_dtype gdt, const void *x, const void *gamma, const void *beta,
                           float *rmean, float *rvar, void *y, float *mean, float *var, int64_t N, int64_t C,
                           int64_t S, float momentum, float eps, int training, const ts__bn_reducer *red,
                           const ts__bn_relu *relu);
// dy (of the ReLU's output), x (N,C,S) dt, gamma (C) gdt, mean, var (C) f32 -> dx (N,C,S) dt, dgamma, dbeta (C) gdt
int ts__batchnorm_relu_bwd(ts_dtype dt, ts_dtype gdt, const void *dy, const void *x, const void *gamma,
                           const float *mean, const float *var, void *dx, void *dgamma, void *dbeta, int64_t N,
                           int64_t C, int64_t S, float eps, int training, const ts__bn_reducer *red,
                           const ts__bn_relu *relu);
/* The oneDNN bf16 kernels behind them (norm.c); running statistics as ts__batchnorm_fwd_dnnl. */
// x (N,C,S) bf16, gamma, beta (C) f32, rmean, rvar (C) f32 -> y (N,C,S) bf16, mean, var (C) f32
int ts__batchnorm_fwd_bf16_dnnl(const void *x, const float *gamma, const float *beta, float *rmean, float *rvar,
                                void *y, float *mean, float *var, int64_t N, int64_t C, int64_t S, float momentum,
                                float eps, int training);
// dy, x (N,C,S) bf16, gamma, mean, var (C) f32 -> dx (N,C,S) bf16, dgamma, dbeta (C) f32
int ts__batchnorm_bwd_bf16_dnnl(const void *dy, const void *x, const float *gamma, const float *mean,
                                const float *var, void *dx, float *dgamma, float *dbeta, int64_t N, int64_t C,
                                int64_t S, float eps, int training);
/* The name of the implementation oneDNN picks for batch norm of this shape (bwd: the backward;
 * bf16: on bf16 data), e.g. "ncsp_bnorm:any"; "(none)" when it has none. For benchmarks. */
const char *ts__batchnorm_dnnl_impl(int bwd, int training, int64_t N, int64_t C, int64_t S, int bf16);

/* One row of layer norm in f32, shared by the f32 reference and the 16-bit kernels (which widen
 * a row, run it in place and narrow the result): forward p -> q with the row's mean and var;
 * backward (dy g, x p) -> dx q with dgamma, dbeta accumulated into dg, db. q may be p. */
void ts__ln_fwd_row(const float *p, const float *gamma, const float *beta, float *q, int64_t D, float eps,
                    float *mean, float *var);
void ts__ln_bwd_row(const float *g, const float *p, const float *gamma, float m, float var, float eps, int64_t D,
                    float *q, double *dg, double *db);

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

/* 16-bit layer norm (norm_bf16.c): x, y, dy, dx of dtype dt (TS_BF16/TS_F16), gamma/beta and
 * dgamma/dbeta of gdt (f32 or dt), mean/var f32. bf16 with dnnl = 1: oneDNN's layer
 * normalization on bf16 x/y (f32 statistics and scale/shift; a bf16 gamma is widened, D values).
 * Otherwise native row loops: 16-bit reads/writes, f32 math (row sums in double), one rounding
 * per output. */
// x (R,D) dt, gamma, beta (D) gdt -> y (R,D) dt, mean, var (R) f32
int ts__layernorm_fwd_lp(ts_dtype dt, ts_dtype gdt, const void *x, const void *gamma,
                         const void *beta, void *y, float *mean, float *var, int64_t R, int64_t D,
                         float eps, int dnnl);
// dy, x (R,D) dt, gamma (D) gdt, mean, var (R) f32 -> dx (R,D) dt, dgamma, dbeta (D) gdt
int ts__layernorm_bwd_lp(ts_dtype dt, ts_dtype gdt, const void *dy, const void *x,
                         const void *gamma, const float *mean, const float *var, void *dx,
                         void *dgamma, void *dbeta, int64_t R, int64_t D, float eps, int dnnl);
/* The oneDNN bf16 kernels behind them (norm.c). */
// x (R,D) bf16, gamma, beta (D) f32 -> y (R,D) bf16, mean, var (R) f32
int ts__layernorm_fwd_bf16_dnnl(const void *x, const float *gamma, const float *beta, void *y,
                                float *mean, float *var, int64_t R, int64_t D, float eps);
// dy, x (R,D) bf16, gamma (D) f32, mean, var (R) f32 -> dx (R,D) bf16, dgamma, dbeta (D) f32
int ts__layernorm_bwd_bf16_dnnl(const void *dy, const void *x, const float *gamma, const float *mean,
                                const float *var, void *dx, float *dgamma, float *dbeta, int64_t R,
                                int64_t D, float eps);

#endif
