/* 16-bit (bf16, f16) layer and batch norm.
 *
 * Layer norm: native row loops that read x/dy in 16-bit, compute in f32 (row sums flushed to
 * double as the f32 kernel does) and write y/dx in 16-bit once, so the traffic of this
 * memory-bound op halves. gamma/beta are f32 or x's dtype (widened once, D values); mean/var are
 * f32; dgamma/dbeta have gamma's dtype.
 *
 * Batch norm: the f32 kernel's own loops (ts__bn_fwd / ts__bn_bwd in norm.c) run on 16-bit x/y
 * (bf16 converted in the loops, f16 runs widened); gamma/beta are widened here (C values) and
 * dgamma/dbeta rounded to gamma's dtype. Statistics and running statistics are f32 state, and
 * SyncBatchNorm's exchange (double sums) is the f32 kernel's. oneDNN's bf16 batch normalization
 * is available behind dnnl = 1 (see src/runtime/run_norm.c for which one the executor uses). */
#include <omp.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ksum.h"
#include "dnnl_ctx.h"
#include "lowp.h"
#include "norm.h"
#include "tessera/base.h"

#define PAR_MIN 16384

static const void *row(const void *base, ts_dtype dt, int64_t r, int64_t D) {
  return (const char *)base + (size_t)(r * D) * ts_dtype_size(dt);
}

// x (R,D) dt, gamma, beta (D) gdt -> y (R,D) dt, mean, var (R) f32
int ts__layernorm_fwd_lp(ts_dtype dt, ts_dtype gdt, const void *x, const void *gamma,
                         const void *beta, void *y, float *mean, float *var, int64_t R, int64_t D,
                         float eps, int dnnl) {
  if (R < 0 || D < 1)
    return ts_error_set(TS_ESHAPE, "layernorm (16-bit): bad dims R=%lld D=%lld", (long long)R, (long long)D);
  float *gb = malloc((size_t)(2 * D) * sizeof(float));
  if (!gb) return ts_error_set(TS_ENOMEM, "layernorm (16-bit): out of memory");
  ts__lp_widen(gamma, gdt, gb, D);
  ts__lp_widen(beta, gdt, gb + D, D);
  if (dnnl && dt == TS_BF16 && ts__dnnl_bf16()) {
    int rc = ts__layernorm_fwd_bf16_dnnl(x, gb, gb + D, y, mean, var, R, D, eps);
    free(gb);
    return rc;
  }
  int oom = 0;
#pragma omp parallel if (R * D > PAR_MIN)
  {
    float *buf = malloc((size_t)D * sizeof(float));
    if (!buf) {
#pragma omp atomic write
      oom = 1;
    }
#pragma omp for schedule(static)
    for (int64_t r = 0; r < R; r++) {
      if (!buf) continue;
      ts__lp_widen(row(x, dt, r, D), dt, buf, D);
      ts__ln_fwd_row(buf, gb, gb + D, buf, D, eps, &mean[r], &var[r]);
      ts__lp_narrow(buf, (char *)y + (size_t)(r * D) * ts_dtype_size(dt), dt, D);
    }
    free(buf);
  }
  free(gb);
  return oom ? ts_error_set(TS_ENOMEM, "layernorm (16-bit): out of memory for row buffers") : TS_OK;
}

// dy, x (R,D) dt, gamma (D) gdt, mean, var (R) f32 -> dx (R,D) dt, dgamma, dbeta (D) gdt
int ts__layernorm_bwd_lp(ts_dtype dt, ts_dtype gdt, const void *dy, const void *x,
                         const void *gamma, const float *mean, const float *var, void *dx,
                         void *dgamma, void *dbeta, int64_t R, int64_t D, float eps, int dnnl) {
  if (R < 0 || D < 1)
    return ts_error_set(TS_ESHAPE, "layernorm_bwd (16-bit): bad dims R=%lld D=%lld", (long long)R, (long long)D);
  int T = R * D > PAR_MIN ? omp_get_max_threads() : 1;
  if (T > R) T = R > 0 ? (int)R : 1;
  /* per-thread partial dgamma/dbeta (double), combined in thread order: deterministic */
  double *part = calloc((size_t)T * 2 * (size_t)D, sizeof(double));
  float *gm = malloc((size_t)D * sizeof(float)), *out = malloc((size_t)(2 * D) * sizeof(float));
  if (!part || !gm || !out) {
    free(part), free(gm), free(out);
    return ts_error_set(TS_ENOMEM, "layernorm_bwd (16-bit): out of memory");
  }
  ts__lp_widen(gamma, gdt, gm, D);
  if (dnnl && dt == TS_BF16 && ts__dnnl_bf16()) {
    int rc = ts__layernorm_bwd_bf16_dnnl(dy, x, gm, mean, var, dx, out, out + D, R, D, eps);
    if (rc == TS_OK) {
      ts__lp_narrow(out, dgamma, gdt, D);
      ts__lp_narrow(out + D, dbeta, gdt, D);
    }
    free(part), free(gm), free(out);
    return rc;
  }
  int nt_used = 1, oom = 0;
#pragma omp parallel num_threads(T) if (T > 1)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    if (t == 0) nt_used = nt;
    double *dg = part + (size_t)t * 2 * (size_t)D, *db = dg + D;
    float *g = malloc((size_t)(2 * D) * sizeof(float)), *p = g ? g + D : NULL;
    if (!g) {
#pragma omp atomic write
      oom = 1;
    }
    const int64_t r0 = R * t / nt, r1 = R * (t + 1) / nt;
    for (int64_t r = r0; g && r < r1; r++) {
      ts__lp_widen(row(dy, dt, r, D), dt, g, D);
      ts__lp_widen(row(x, dt, r, D), dt, p, D);
      ts__ln_bwd_row(g, p, gm, mean[r], var[r], eps, D, p, dg, db); /* dx, in place of x */
      ts__lp_narrow(p, (char *)dx + (size_t)(r * D) * ts_dtype_size(dt), dt, D);
    }
    free(g);
  }
  for (int64_t j = 0; j < D; j++) {
    double a = 0, b = 0;
    for (int t = 0; t < nt_used; t++) {
      a += part[(size_t)t * 2 * (size_t)D + (size_t)j];
      b += part[(size_t)t * 2 * (size_t)D + (size_t)D + (size_t)j];
    }
    out[j] = (float)a;
    out[D + j] = (float)b;
  }
  ts__lp_narrow(out, dgamma, gdt, D);
  ts__lp_narrow(out + D, dbeta, gdt, D);
  free(part), free(gm), free(out);
  return oom ? ts_error_set(TS_ENOMEM, "layernorm_bwd (16-bit): out of memory for row buffers") : TS_OK;
}

/* ---------------------------------------------------------------- batch norm */

/* The 16-bit entry points and the fused BN+ReLU ones (relu not NULL; dnnl 0) share these. */
static int bn_fwd_gdt(ts_dtype dt, ts_dtype gdt, const void *x, const void *gamma, const void *beta, float *rmean,
                      float *rvar, void *y, float *mean, float *var, int64_t N, int64_t C, int64_t S, float momentum,
                      float eps, int training, const ts__bn_reducer *red, int dnnl, const ts__bn_relu *relu);
static int bn_bwd_gdt(ts_dtype dt, ts_dtype gdt, const void *dy, const void *x, const void *gamma, const float *mean,
                      const float *var, void *dx, void *dgamma, void *dbeta, int64_t N, int64_t C, int64_t S,
                      float eps, int training, const ts__bn_reducer *red, int dnnl, const ts__bn_relu *relu);

// x (N,C,S) dt, gamma, beta (C) gdt, rmean, rvar (C) f32 in/out -> y (N,C,S) dt, mean, var (C) f32
int ts__batchnorm_fwd_lp(ts_dtype dt, ts_dtype gdt, const void *x, const void *gamma, const void *beta,
                         float *rmean, float *rvar, void *y, float *mean, float *var, int64_t N, int64_t C,
                         int64_t S, float momentum, float eps, int training, const ts__bn_reducer *red, int dnnl) {
  return bn_fwd_gdt(dt, gdt, x, gamma, beta, rmean, rvar, y, mean, var, N, C, S, momentum, eps, training, red, dnnl,
                    NULL);
}

// x (N,C,S) dt, gamma, beta (C) gdt, rmean, rvar (C) f32 in/out -> y = relu(bn(x)) (N,C,S) dt, mean, var (C) f32
int ts__batchnorm_relu_fwd(ts_dtype dt, ts_dtype gdt, const void *x, const void *gamma, const void *beta,
                           float *rmean, float *rvar, void *y, float *mean, float *var, int64_t N, int64_t C,
                           int64_t S, float momentum, float eps, int training, const ts__bn_reducer *red,
                           const ts__bn_relu *relu) {
  if (!relu || !relu->ab) return ts_error_set(TS_EINVAL, "batchnorm+relu: no scale/shift buffer");
  return bn_fwd_gdt(dt, gdt, x, gamma, beta, rmean, rvar, y, mean, var, N, C, S, momentum, eps, training, red, 0,
                    relu);
}

// dy (of the ReLU's output), x (N,C,S) dt, gamma (C) gdt, mean, var (C) f32 -> dx (N,C,S) dt, dgamma, dbeta (C) gdt
int ts__batchnorm_relu_bwd(ts_dtype dt, ts_dtype gdt, const void *dy, const void *x, const void *gamma,
                           const float *mean, const float *var, void *dx, void *dgamma, void *dbeta, int64_t N,
                           int64_t C, int64_t S, float eps, int training, const ts__bn_reducer *red,
                           const ts__bn_relu *relu) {
  if (!relu || !relu->ab) return ts_error_set(TS_EINVAL, "batchnorm_bwd+relu: no scale/shift buffer");
  return bn_bwd_gdt(dt, gdt, dy, x, gamma, mean, var, dx, dgamma, dbeta, N, C, S, eps, training, red, 0, relu);
}

static int bn_fwd_gdt(ts_dtype dt, ts_dtype gdt, const void *x, const void *gamma, const void *beta, float *rmean,
                      float *rvar, void *y, float *mean, float *var, int64_t N, int64_t C, int64_t S, float momentum,
                      float eps, int training, const ts__bn_reducer *red, int dnnl, const ts__bn_relu *relu) {
  if (C < 1)
    return ts_error_set(TS_ESHAPE, "batchnorm (16-bit): bad dims N=%lld C=%lld S=%lld", (long long)N, (long long)C,
                        (long long)S);
  float *gb = malloc((size_t)(2 * C) * sizeof(float));
  if (!gb) return ts_error_set(TS_ENOMEM, "batchnorm (16-bit): out of memory");
  ts__lp_widen(gamma, gdt, gb, C);
  ts__lp_widen(beta, gdt, gb + C, C);
  const int rc = dnnl && dt == TS_BF16 && ts__dnnl_bf16() && !red
                     ? ts__batchnorm_fwd_bf16_dnnl(x, gb, gb + C, rmean, rvar, y, mean, var, N, C, S, momentum, eps,
                                                   training)
                     : ts__bn_fwd(dt, x, gb, gb + C, rmean, rvar, y, mean, var, N, C, S, momentum, eps, training, red,
                                  relu);
  free(gb);
  return rc;
}

// dy, x (N,C,S) dt, gamma (C) gdt, mean, var (C) f32 -> dx (N,C,S) dt, dgamma, dbeta (C) gdt
int ts__batchnorm_bwd_lp(ts_dtype dt, ts_dtype gdt, const void *dy, const void *x, const void *gamma,
                         const float *mean, const float *var, void *dx, void *dgamma, void *dbeta, int64_t N,
                         int64_t C, int64_t S, float eps, int training, const ts__bn_reducer *red, int dnnl) {
  return bn_bwd_gdt(dt, gdt, dy, x, gamma, mean, var, dx, dgamma, dbeta, N, C, S, eps, training, red, dnnl, NULL);
}

static int bn_bwd_gdt(ts_dtype dt, ts_dtype gdt, const void *dy, const void *x, const void *gamma, const float *mean,
                      const float *var, void *dx, void *dgamma, void *dbeta, int64_t N, int64_t C, int64_t S,
                      float eps, int training, const ts__bn_reducer *red, int dnnl, const ts__bn_relu *relu) {
  if (C < 1)
    return ts_error_set(TS_ESHAPE, "batchnorm_bwd (16-bit): bad dims N=%lld C=%lld S=%lld", (long long)N,
                        (long long)C, (long long)S);
  /* gamma, then dgamma and dbeta in f32 */
  float *buf = malloc((size_t)(3 * C) * sizeof(float));
  if (!buf) return ts_error_set(TS_ENOMEM, "batchnorm_bwd (16-bit): out of memory");
  ts__lp_widen(gamma, gdt, buf, C);
  float *dg = buf + C, *db = buf + 2 * C;
  const int rc = dnnl && dt == TS_BF16 && ts__dnnl_bf16() && !red
                     ? ts__batchnorm_bwd_bf16_dnnl(dy, x, buf, mean, var, dx, dg, db, N, C, S, eps, training)
                     : ts__bn_bwd(dt, dy, x, buf, mean, var, dx, dg, db, N, C, S, eps, training, red, relu);
  if (rc == TS_OK) {
    ts__lp_narrow(dg, dgamma, gdt, C);
    ts__lp_narrow(db, dbeta, gdt, C);
  }
  free(buf);
  return rc;
}
