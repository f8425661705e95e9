/* Batch-norm and layer-norm: reference kernels and oneDNN primitives. */
#include "norm.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "dnnl_ctx.h"
#include "ksum.h"
#include "lowp.h"

#define PAR_MIN 16384 /* elements below which kernels stay on one thread */
#define CHUNK TS__SUM_CHUNK /* float partial sums are flushed to double every CHUNK elements */
#define CCH 256       /* channel chunk for the (N,C) batch-norm path */

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---------------- batch norm (reference loops; f32 and 16-bit x/y) ----------------
 *
 * One set of loops serves the f32 kernels and the 16-bit ones (ts__bn_fwd / ts__bn_bwd, called by
 * norm_bf16.c). x, y, dy, dx are visited in runs of at most CHUNK elements of one (n, c) plane
 * (or of one (N,C) row), and each run goes through one of the k_* kernels below, written once
 * with `lp` a constant at every call: lp = 0 reads and writes f32, lp = 1 reads bf16 and rounds
 * its outputs to bf16 in the loop itself (converting inline streams at twice the rate of
 * widening a run into a buffer first). f16, whose conversions are scalar, is widened into
 * per-thread f32 buffers and run with lp = 0. The f32 arithmetic and its order are the same in
 * every case, so a 16-bit result is the f32 kernel's on the widened values, rounded once (the
 * float reductions say simdlen(16): left to itself the compiler gives the bf16 loop a wider
 * vector, whose partial sums round differently; tests/kernels/test_norm_bf16.c checks equality).
 * Statistics, running statistics, gamma/beta and dgamma/dbeta are f32 (sums in double). */

#define BN_INLINE static inline __attribute__((always_inline))

/* Element j of a run as f32, and the store of an f32 result to it (lp: the run is bf16). */
BN_INLINE float ld(const void *r, int lp, int64_t j) {
  return lp ? ts__bf2f(((const uint16_t *)r)[j]) : ((const float *)r)[j];
}
BN_INLINE void st(void *r, int lp, int64_t j, float v) {
  if (lp) ((uint16_t *)r)[j] = ts__f2bf(v);
  else ((float *)r)[j] = v;
}

/* The run [off, off+len) of a dt tensor as the k_* kernels read it: f32 and bf16 in place, f16
 * widened into buf. lp_of(dt) is the kernels' lp for it. */
static inline int lp_of(ts_dtype dt) { return dt == TS_BF16; }
static inline const void *src_run(const void *t, ts_dtype dt, int64_t off, int64_t len, float *buf) {
  if (dt == TS_F32) return (const float *)t + off;
  if (dt == TS_BF16) return (const uint16_t *)t + off;
  ts__lp_widen((const uint16_t *)t + off, dt, buf, len);
  return buf;
}
/* Where a kernel writes the run at off: in place for f32 and bf16, buf for f16 (dst_done rounds
 * it into the tensor). */
static inline void *dst_run(void *t, ts_dtype dt, int64_t off, float *buf) {
  if (dt == TS_F32) return (float *)t + off;
  if (dt == TS_BF16) return (uint16_t *)t + off;
  return buf;
}
static inline void dst_done(const float *buf, void *t, ts_dtype dt, int64_t off, int64_t len) {
  if (dt == TS_F16) ts__lp_narrow(buf, (uint16_t *)t + off, dt, len);
}
static inline float elem(const void *t, ts_dtype dt, int64_t i) {
  float v;
  ts__lp_widen(dt == TS_F32 ? (const void *)((const float *)t + i) : (const void *)((const uint16_t *)t + i), dt, &v, 1);
  return v;
}

/* Batch norm fused with a following ReLU (the executor's fusion, ts__bn_relu): the ReLU as the
 * unfused ELTWISE node (oneDNN's, the FAST backend's: the only one fused) computes it on the
 * stored batch-norm value z: z > 0 ? z : +0 (not z*0 = -0) for a plain ReLU, z*alpha for a leaky
 * one (f32 only: exec.c fuses bf16 with alpha = 0 only; other cases are refused). For lp, z is v rounded to bf16, and
 * relu(round(v)) = round(v > 0 ? v : +0) (rounding keeps the sign and maps 0 to 0), so the fused
 * output is the unfused one bit for bit without an extra rounding. The backward recomputes v
 * from x and the forward's scale and shift (the same expression: the same rounding) and applies
 * ReLU's gradient as oneDNN's ELTWISE_BWD does from the output y (y > 0 ? dy : dy*alpha) before
 * the batch-norm sums; for lp, y > 0 iff round(v) > 0 iff v > 2^-134 (below that, v rounds to
 * bf16's +0). */
BN_INLINE float bn_relu(float v, int lp, float alpha) {
  if (lp) return v > 0 ? v : 0.0f;
  return v > 0 ? v : alpha == 0.0f ? 0.0f : v * alpha;
}
BN_INLINE float bn_relu_grad(float g, float v, int lp, float alpha) {
  return v > (lp ? 0x1p-134f : 0.0f) ? g : g * alpha;
}

/* The per-run kernels. Plane runs (S > 1) share one channel's scalars; (N,C) row runs (S == 1)
 * index per-channel arrays by the element. */
/* A run's float partial sums in KL lanes: element j adds to lane j % KL, and the lanes are summed
 * in a fixed tree. The order is the code's, not the vectoriser's: every caller (f32, 16-bit, the
 * fused ReLU) and every build (AVX2, AVX-512) adds the same values in the same order. */
#define KL 16
BN_INLINE float lanes_sum(float *v) {
  for (int w = KL / 2; w > 0; w /= 2)
    for (int l = 0; l < w; l++) v[l] += v[l + w];
  return v[0];
}
// fwd statistics: t1 += sum (x - k), t2 += sum (x - k)^2 over a plane run (float partials)
BN_INLINE void k_sums(const void *x, int lp, int64_t len, float k, double *t1, double *t2) {
  float a[KL] = {0}, b[KL] = {0};
  int64_t j = 0;
  for (; j + KL <= len; j += KL) {
#pragma omp simd
    for (int l = 0; l < KL; l++) {
      const float d = ld(x, lp, j + l) - k;
      a[l] += d;
      b[l] += d * d;
    }
  }
  for (int l = 0; j + l < len; l++) {
    const float d = ld(x, lp, j + l) - k;
    a[l] += d;
    b[l] += d * d;
  }
  *t1 += lanes_sum(a);
  *t2 += lanes_sum(b);
}
// the same over a row run of channels, per channel in double
BN_INLINE void k_sums_nc(const void *x, int lp, int64_t len, const float *k, double *a1, double *a2) {
#pragma omp simd
  for (int64_t c = 0; c < len; c++) {
    double d = (double)ld(x, lp, c) - (double)k[c];
    a1[c] += d;
    a2[c] += d * d;
  }
}
// y = x*a + b (relu: then the ReLU of it, negative slope alpha)
BN_INLINE void k_apply(const void *x, void *y, int lp, int64_t len, float a, float b, int relu, float alpha) {
#pragma omp simd
  for (int64_t j = 0; j < len; j++) {
    const float v = ld(x, lp, j) * a + b;
    st(y, lp, j, relu ? bn_relu(v, lp, alpha) : v);
  }
}
BN_INLINE void k_apply_nc(const void *x, void *y, int lp, int64_t len, const float *a, const float *b) {
#pragma omp simd
  for (int64_t c = 0; c < len; c++) st(y, lp, c, ld(x, lp, c) * a[c] + b[c]);
}
// bwd sums: s1 += sum dy, s2 += sum dy*(x - m) (relu: dy through the ReLU of x*ra + rb first)
BN_INLINE void k_bsums(const void *g, const void *p, int lp, int64_t len, float m, double *s1, double *s2, int relu,
                       float ra, float rb, float alpha) {
  float a[KL] = {0}, b[KL] = {0};
  int64_t j = 0;
  for (; j + KL <= len; j += KL) {
#pragma omp simd
    for (int l = 0; l < KL; l++) {
      const float xv = ld(p, lp, j + l);
      float gg = ld(g, lp, j + l);
      if (relu) gg = bn_relu_grad(gg, xv * ra + rb, lp, alpha);
      a[l] += gg;
      b[l] += gg * (xv - m);
    }
  }
  for (int l = 0; j + l < len; l++) {
    const float xv = ld(p, lp, j + l);
    float gg = ld(g, lp, j + l);
    if (relu) gg = bn_relu_grad(gg, xv * ra + rb, lp, alpha);
    a[l] += gg;
    b[l] += gg * (xv - m);
  }
  *s1 += lanes_sum(a);
  *s2 += lanes_sum(b);
}
BN_INLINE void k_bsums_nc(const void *g, const void *p, int lp, int64_t len, const float *m, double *s1, double *s2) {
#pragma omp simd
  for (int64_t c = 0; c < len; c++) {
    float gg = ld(g, lp, c);
    s1[c] += gg;
    s2[c] += (double)gg * (double)(ld(p, lp, c) - m[c]);
  }
}
// dx = a*dy + b*x + k (relu: dy through the ReLU of x*ra + rb first)
BN_INLINE void k_dx(const void *g, const void *p, void *q, int lp, int64_t len, float a, float b, float k, int relu,
                    float ra, float rb, float alpha) {
#pragma omp simd
  for (int64_t j = 0; j < len; j++) {
    const float xv = ld(p, lp, j);
    float gg = ld(g, lp, j);
    if (relu) gg = bn_relu_grad(gg, xv * ra + rb, lp, alpha);
    st(q, lp, j, a * gg + b * xv + k);
  }
}
BN_INLINE void k_dx_nc(const void *g, const void *p, void *q, int lp, int64_t len, const float *a, const float *b,
                       const float *k) {
#pragma omp simd
  for (int64_t c = 0; c < len; c++) st(q, lp, c, a[c] * ld(g, lp, c) + b[c] * ld(p, lp, c) + k[c]);
}

static int bn_check(const char *what, ts_dtype dt, int64_t N, int64_t C, int64_t S, int training) {
  if (dt != TS_F32 && dt != TS_BF16 && dt != TS_F16)
    return ts_error_set(TS_EDTYPE, "%s: x has dtype %s (f32, bf16 or f16)", what, ts_dtype_name(dt));
  if (N < 1 || C < 1 || S < 1)
    return ts_error_set(TS_ESHAPE, "%s: bad dims N=%lld C=%lld S=%lld", what, (long long)N,
                        (long long)C, (long long)S);
  if (training && N * S < 2)
    return ts_error_set(TS_ESHAPE,
                        "%s: training needs more than 1 value per channel (N*spatial = %lld)",
                        what, (long long)(N * S));
  return TS_OK;
}

/* Running-stats update with the unbiased batch variance, as torch.nn.BatchNorm. */
static void bn_update_running(float *rmean, float *rvar, const float *mean, const float *var,
                              int64_t C, int64_t M, float momentum) {
  const float unb = (float)M / (float)(M - 1);
  for (int64_t c = 0; c < C; c++) {
    rmean[c] = (1.0f - momentum) * rmean[c] + momentum * mean[c];
    rvar[c] = (1.0f - momentum) * rvar[c] + momentum * var[c] * unb;
  }
}

/* y = x*a[c] + b[c] over (N,C,S) of dtype dt; relu (S > 1 only): its ReLU. */
static void bn_apply(ts_dtype dt, const void *x, void *y, const float *a, const float *b, int64_t N, int64_t C,
                     int64_t S, const ts__bn_relu *relu) {
  const int lp = lp_of(dt);
  if (S == 1) {
#pragma omp parallel for schedule(static) if (N * C > PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
      float bi[CHUNK] __attribute__((aligned(64))), bo[CHUNK] __attribute__((aligned(64)));
      for (int64_t c0 = 0; c0 < C; c0 += CHUNK) {
        const int64_t len = min64(CHUNK, C - c0), off = n * C + c0;
        const void *p = src_run(x, dt, off, len, bi);
        void *q = dst_run(y, dt, off, bo);
        if (lp) k_apply_nc(p, q, 1, len, a + c0, b + c0);
        else k_apply_nc(p, q, 0, len, a + c0, b + c0);
        dst_done(bo, y, dt, off, len);
      }
    }
    return;
  }
#pragma omp parallel for schedule(static) if (N * C * S > PAR_MIN)
  for (int64_t nc = 0; nc < N * C; nc++) {
    float bi[CHUNK] __attribute__((aligned(64))), bo[CHUNK] __attribute__((aligned(64)));
    const float ac = a[nc % C], bc = b[nc % C];
    for (int64_t j0 = 0; j0 < S; j0 += CHUNK) {
      const int64_t len = min64(CHUNK, S - j0), off = nc * S + j0;
      const void *p = src_run(x, dt, off, len, bi);
      void *q = dst_run(y, dt, off, bo);
      if (relu) {
        if (lp) k_apply(p, q, 1, len, ac, bc, 1, relu->alpha);
        else k_apply(p, q, 0, len, ac, bc, 1, relu->alpha);
      } else {
        if (lp) k_apply(p, q, 1, len, ac, bc, 0, 0.0f);
        else k_apply(p, q, 0, len, ac, bc, 0, 0.0f);
      }
      dst_done(bo, y, dt, off, len);
    }
  }
}

/* The per-channel sums over (N,C,S) planes, S > 1: x - k and its square (fwd: g = NULL, k = K), or
 * dy and dy*(x - k) (bwd: g = dy, k = mean). Runs are visited in memory order, in parallel over
 * the N*C planes, and each run's float partial sums are kept; then each channel adds them into
 * doubles in (n, run) order, the order of a loop over one channel's planes, so the result does not
 * depend on the traversal or the thread count. (A channel-major traversal jumps to a new short
 * plane N times per channel and streamed bf16 at half the byte rate of this one.) */
static int bn_plane_sums(ts_dtype dt, const void *g, const void *x, int64_t N, int64_t C, int64_t S, const float *k,
                         double *s1, double *s2, const ts__bn_relu *relu) {
  const int lp = lp_of(dt);
  const int64_t nr = (S + CHUNK - 1) / CHUNK; /* runs per plane */
  float *part = malloc(sizeof(float) * (size_t)(N * C * nr * 2));
  if (!part) return ts_error_set(TS_ENOMEM, "batchnorm: out of memory for partial sums");
#pragma omp parallel for schedule(static) if (N * C * S > PAR_MIN)
  for (int64_t nc = 0; nc < N * C; nc++) {
    float bg[CHUNK] __attribute__((aligned(64))), bp[CHUNK] __attribute__((aligned(64)));
    const float kc = k[nc % C];
    const float ra = relu ? relu->ab[nc % C] : 0.0f, rb = relu ? relu->ab[C + nc % C] : 0.0f;
    for (int64_t r = 0; r < nr; r++) {
      const int64_t j0 = r * CHUNK, len = min64(CHUNK, S - j0), off = nc * S + j0;
      const void *p = src_run(x, dt, off, len, bp);
      double a = 0, b = 0; /* the kernels add their float partials to these */
      if (g) {
        const void *q = src_run(g, dt, off, len, bg);
        if (relu) {
          if (lp) k_bsums(q, p, 1, len, kc, &a, &b, 1, ra, rb, relu->alpha);
          else k_bsums(q, p, 0, len, kc, &a, &b, 1, ra, rb, relu->alpha);
        } else {
          if (lp) k_bsums(q, p, 1, len, kc, &a, &b, 0, 0.0f, 0.0f, 0.0f);
          else k_bsums(q, p, 0, len, kc, &a, &b, 0, 0.0f, 0.0f, 0.0f);
        }
      } else {
        if (lp) k_sums(p, 1, len, kc, &a, &b);
        else k_sums(p, 0, len, kc, &a, &b);
      }
      part[(nc * nr + r) * 2] = (float)a; /* exact: a float partial added to 0 */
      part[(nc * nr + r) * 2 + 1] = (float)b;
    }
  }
  for (int64_t c = 0; c < C; c++) {
    double t1 = 0, t2 = 0;
    for (int64_t n = 0; n < N; n++)
      for (int64_t r = 0; r < nr; r++) {
        t1 += part[((n * C + c) * nr + r) * 2];
        t2 += part[((n * C + c) * nr + r) * 2 + 1];
      }
    s1[c] = t1;
    s2[c] = t2;
  }
  free(part);
  return TS_OK;
}

/* Per-channel sums of d = x - K[c] and of d^2 (double), one pass. */
static int bn_sums(ts_dtype dt, const void *x, int64_t N, int64_t C, int64_t S, const float *K, double *s1,
                    double *s2) {
  const int lp = lp_of(dt);
  if (S == 1) {
#pragma omp parallel for schedule(static) if (N * C > PAR_MIN && C > CCH)
    for (int64_t c0 = 0; c0 < C; c0 += CCH) {
      int64_t cn = min64(CCH, C - c0);
      double a1[CCH], a2[CCH];
      float buf[CCH] __attribute__((aligned(64)));
      for (int64_t c = 0; c < cn; c++) a1[c] = a2[c] = 0;
      for (int64_t n = 0; n < N; n++) {
        const void *p = src_run(x, dt, n * C + c0, cn, buf);
        if (lp) k_sums_nc(p, 1, cn, K + c0, a1, a2);
        else k_sums_nc(p, 0, cn, K + c0, a1, a2);
      }
      for (int64_t c = 0; c < cn; c++) {
        s1[c0 + c] = a1[c];
        s2[c0 + c] = a2[c];
      }
    }
    return TS_OK;
  }
  return bn_plane_sums(dt, NULL, x, N, C, S, K, s1, s2, NULL);
}

/* mean = K + s1/M, biased var = s2/M - (s1/M)^2 (clamped at 0). */
static void bn_finish_stats(const float *K, const double *s1, const double *s2, double M, int64_t C,
                            float *mean, float *var) {
  for (int64_t c = 0; c < C; c++) {
    double dm = s1[c] / M, v = s2[c] / M - dm * dm;
    mean[c] = (float)(K[c] + dm);
    var[c] = (float)(v > 0 ? v : 0);
  }
}

/* Normalise with (mean, var), then update the running stats counting M values per channel. */
static void bn_normalise(ts_dtype dt, const void *x, const float *gamma, const float *beta, float *rmean,
                         float *rvar, void *y, const float *mean, const float *var, int64_t N, int64_t C, int64_t S,
                         float momentum, float eps, int training, int64_t M, float *ab, const ts__bn_relu *relu) {
  for (int64_t c = 0; c < C; c++) {
    float a = gamma[c] / sqrtf(var[c] + eps);
    ab[c] = a;
    ab[C + c] = beta[c] - mean[c] * a;
  }
  if (relu) memcpy(relu->ab, ab, sizeof(float) * (size_t)(2 * C)); /* for the fused backward's ReLU mask */
  bn_apply(dt, x, y, ab, ab + C, N, C, S, relu);
  if (training) bn_update_running(rmean, rvar, mean, var, C, M, momentum);
}

// x (N,C,S), gamma, beta (C), rmean, rvar (C) -> y (N,C,S), mean, var (C)
int ts__batchnorm_fwd_ref(const float *x, const float *gamma, const float *beta, float *rmean,
                          float *rvar, float *y, float *mean, float *var, int64_t N, int64_t C,
                          int64_t S, float momentum, float eps, int training) {
  return ts__bn_fwd(TS_F32, x, gamma, beta, rmean, rvar, y, mean, var, N, C, S, momentum, eps, training, NULL, NULL);
}

int ts__batchnorm_fwd_sync(const float *x, const float *gamma, const float *beta, float *rmean,
                           float *rvar, float *y, float *mean, float *var, int64_t N, int64_t C,
                           int64_t S, float momentum, float eps, int training, const ts__bn_reducer *red) {
  return ts__bn_fwd(TS_F32, x, gamma, beta, rmean, rvar, y, mean, var, N, C, S, momentum, eps, training, red, NULL);
}

// x (N,C,S) dt, gamma, beta (C), rmean, rvar (C) -> y (N,C,S) dt, mean, var (C)
int ts__bn_fwd(ts_dtype dt, const void *x, const float *gamma, const float *beta, float *rmean, float *rvar,
               void *y, float *mean, float *var, int64_t N, int64_t C, int64_t S, float momentum, float eps,
               int training, const ts__bn_reducer *red, const ts__bn_relu *relu) {
  int rc = bn_check("batchnorm", dt, N, C, S, training);
  if (rc) return rc;
  if (relu && (S == 1 || dt == TS_F16 || (dt == TS_BF16 && relu->alpha != 0.0f)))
    return ts_error_set(TS_EUNSUPPORTED,
                        "batchnorm+relu: fused only for f32 or bf16 (plain relu) with spatial dims (x %s, S=%lld)",
                        ts_dtype_name(dt), (long long)S);
  /* ab: 2C floats (scale, shift); K: C shifts; sums: s1, s2 (C each) and the count */
  float *ab = malloc(sizeof(float) * (size_t)(3 * C));
  double *sums = malloc(sizeof(double) * (size_t)(2 * C + 1));
  if (!ab || !sums) {
    free(ab);
    free(sums);
    return ts_error_set(TS_ENOMEM, "batchnorm: out of memory");
  }
  int64_t M = N * S;
  if (training) {
    /* The shift: locally the channel's first value (close to the mean, so the one-pass variance
     * keeps its digits); across ranks it must be the same everywhere: the running mean. */
    float *K = ab + 2 * C;
    for (int64_t c = 0; c < C; c++) K[c] = red ? rmean[c] : elem(x, dt, S == 1 ? c : c * S);
    rc = bn_sums(dt, x, N, C, S, K, sums, sums + C);
    sums[2 * C] = (double)M;
    if (rc || (red && (rc = red->sum(sums, 2 * C + 1, red->user)))) {
      free(ab);
      free(sums);
      return rc;
    }
    M = (int64_t)sums[2 * C];
    bn_finish_stats(K, sums, sums + C, (double)M, C, mean, var);
  } else {
    if (mean != rmean) memcpy(mean, rmean, sizeof(float) * (size_t)C);
    if (var != rvar) memcpy(var, rvar, sizeof(float) * (size_t)C);
  }
  bn_normalise(dt, x, gamma, beta, rmean, rvar, y, mean, var, N, C, S, momentum, eps, training, M, ab, relu);
  free(ab);
  free(sums);
  return TS_OK;
}

// dy, x (N,C,S), gamma, mean, var (C) -> dx (N,C,S), dgamma, dbeta (C)
int ts__batchnorm_bwd_ref(const float *dy, const float *x, const float *gamma, const float *mean,
                          const float *var, float *dx, float *dgamma, float *dbeta, int64_t N,
                          int64_t C, int64_t S, float eps, int training) {
  return ts__bn_bwd(TS_F32, dy, x, gamma, mean, var, dx, dgamma, dbeta, N, C, S, eps, training, NULL, NULL);
}

int ts__batchnorm_bwd_sync(const float *dy, const float *x, const float *gamma, const float *mean,
                           const float *var, float *dx, float *dgamma, float *dbeta, int64_t N,
                           int64_t C, int64_t S, float eps, int training, const ts__bn_reducer *red) {
  return ts__bn_bwd(TS_F32, dy, x, gamma, mean, var, dx, dgamma, dbeta, N, C, S, eps, training, red, NULL);
}

// dy, x (N,C,S) dt, gamma, mean, var (C) -> dx (N,C,S) dt, dgamma, dbeta (C)
int ts__bn_bwd(ts_dtype dt, const void *dy, const void *x, const float *gamma, const float *mean, const float *var,
               void *dx, float *dgamma, float *dbeta, int64_t N, int64_t C, int64_t S, float eps, int training,
               const ts__bn_reducer *red, const ts__bn_relu *relu) {
  int rc = bn_check("batchnorm_bwd", dt, N, C, S, training);
  if (rc) return rc;
  if (relu && (S == 1 || dt == TS_F16 || (dt == TS_BF16 && relu->alpha != 0.0f)))
    return ts_error_set(TS_EUNSUPPORTED,
                        "batchnorm_bwd+relu: fused only for f32 or bf16 (plain relu) with spatial dims (x %s, S=%lld)",
                        ts_dtype_name(dt), (long long)S);
  const int lp = lp_of(dt);
  /* Per channel: sdy = sum dy, sdx = sum dy*(x-mean); then the count; then the reduced copy. */
  double *sums = malloc(sizeof(double) * (size_t)(4 * C + 2));
  float *abk = malloc(sizeof(float) * (size_t)(3 * C));
  if (!sums || !abk) {
    free(sums);
    free(abk);
    return ts_error_set(TS_ENOMEM, "batchnorm_bwd: out of memory");
  }
  if (S == 1) {
#pragma omp parallel for schedule(static) if (N * C > PAR_MIN && C > CCH)
    for (int64_t c0 = 0; c0 < C; c0 += CCH) {
      int64_t cn = min64(CCH, C - c0);
      double s1[CCH], s2[CCH];
      float bg[CCH] __attribute__((aligned(64))), bp[CCH] __attribute__((aligned(64)));
      for (int64_t c = 0; c < cn; c++) s1[c] = s2[c] = 0;
      for (int64_t n = 0; n < N; n++) {
        const void *g = src_run(dy, dt, n * C + c0, cn, bg), *p = src_run(x, dt, n * C + c0, cn, bp);
        if (lp) k_bsums_nc(g, p, 1, cn, mean + c0, s1, s2);
        else k_bsums_nc(g, p, 0, cn, mean + c0, s1, s2);
      }
      for (int64_t c = 0; c < cn; c++) {
        sums[c0 + c] = s1[c];
        sums[C + c0 + c] = s2[c];
      }
    }
  } else if ((rc = bn_plane_sums(dt, dy, x, N, C, S, mean, sums, sums + C, relu))) {
    free(sums);
    free(abk);
    return rc;
  }
  /* dgamma, dbeta: this rank's sums (data-parallel gradient averaging combines them); dx: the
   * sums over every rank when synchronised (the statistics were computed over all of them). */
  double *gs = sums;
  double M = (double)(N * S);
  if (training && red) {
    gs = sums + 2 * C + 1;
    memcpy(gs, sums, sizeof(double) * (size_t)(2 * C));
    gs[2 * C] = M;
    if ((rc = red->sum(gs, 2 * C + 1, red->user))) {
      free(sums);
      free(abk);
      return rc;
    }
    M = gs[2 * C];
  }
  /* dx = A*dy + B*x + K per channel. */
  for (int64_t c = 0; c < C; c++) {
    double rstd = 1.0 / sqrt((double)var[c] + (double)eps);
    double sdy = gs[c], sdx = gs[C + c];
    dbeta[c] = (float)sums[c];
    dgamma[c] = (float)(sums[C + c] * rstd);
    double A = gamma[c] * rstd, B = 0, K = 0;
    if (training) {
      B = -gamma[c] * rstd * rstd * rstd * sdx / M;
      K = -A * sdy / M - B * mean[c];
    }
    abk[c] = (float)A;
    abk[C + c] = (float)B;
    abk[2 * C + c] = (float)K;
  }
  const float *A = abk, *B = abk + C, *K = abk + 2 * C;
  if (S == 1) {
#pragma omp parallel for schedule(static) if (N * C > PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
      float bg[CHUNK] __attribute__((aligned(64))), bp[CHUNK] __attribute__((aligned(64))),
          bq[CHUNK] __attribute__((aligned(64)));
      for (int64_t c0 = 0; c0 < C; c0 += CHUNK) {
        const int64_t len = min64(CHUNK, C - c0), off = n * C + c0;
        const void *g = src_run(dy, dt, off, len, bg), *p = src_run(x, dt, off, len, bp);
        void *q = dst_run(dx, dt, off, bq);
        if (lp) k_dx_nc(g, p, q, 1, len, A + c0, B + c0, K + c0);
        else k_dx_nc(g, p, q, 0, len, A + c0, B + c0, K + c0);
        dst_done(bq, dx, dt, off, len);
      }
    }
  } else {
#pragma omp parallel for schedule(static) if (N * C * S > PAR_MIN)
    for (int64_t nc = 0; nc < N * C; nc++) {
      float bg[CHUNK] __attribute__((aligned(64))), bp[CHUNK] __attribute__((aligned(64))),
          bq[CHUNK] __attribute__((aligned(64)));
      const int64_t c = nc % C;
      const float a = A[c], b = B[c], k = K[c];
      const float ra = relu ? relu->ab[c] : 0.0f, rb = relu ? relu->ab[C + c] : 0.0f;
      for (int64_t j0 = 0; j0 < S; j0 += CHUNK) {
        const int64_t len = min64(CHUNK, S - j0), off = nc * S + j0;
        const void *g = src_run(dy, dt, off, len, bg), *p = src_run(x, dt, off, len, bp);
        void *q = dst_run(dx, dt, off, bq);
        if (relu) {
          if (lp) k_dx(g, p, q, 1, len, a, b, k, 1, ra, rb, relu->alpha);
          else k_dx(g, p, q, 0, len, a, b, k, 1, ra, rb, relu->alpha);
        } else {
          if (lp) k_dx(g, p, q, 1, len, a, b, k, 0, 0.0f, 0.0f, 0.0f);
          else k_dx(g, p, q, 0, len, a, b, k, 0, 0.0f, 0.0f, 0.0f);
        }
        dst_done(bq, dx, dt, off, len);
      }
    }
  }
  free(sums);
  free(abk);
  return TS_OK;
}

/* ---------------- layer norm (reference) ---------------- */

static inline double row_sqdev(const float *x, float m, int64_t n) {
  double total = 0;
  for (int64_t j0 = 0; j0 < n; j0 += CHUNK) {
    int64_t j1 = min64(n, j0 + CHUNK);
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = j0; j < j1; j++) s += (x[j] - m) * (x[j] - m);
    total += s;
  }
  return total;
}

// p (D), gamma, beta (D) -> q (D) (may be p), *mean, *var
void ts__ln_fwd_row(const float *p, const float *gamma, const float *beta, float *q, int64_t D, float eps,
                    float *mean, float *var) {
  const float m = (float)(ts__sum_run(p, D) / (double)D);
  const float v = (float)(row_sqdev(p, m, D) / (double)D);
  const float rs = 1.0f / sqrtf(v + eps);
#pragma omp simd
  for (int64_t j = 0; j < D; j++) q[j] = (p[j] - m) * rs * gamma[j] + beta[j];
  *mean = m;
  *var = v;
}

// g = dy, p = x (D), gamma (D), the row's mean and var -> q = dx (D) (may be p); dg, db (D) += the row's terms
void ts__ln_bwd_row(const float *g, const float *p, const float *gamma, float m, float var, float eps, int64_t D,
                    float *q, double *dg, double *db) {
  const float rs = 1.0f / sqrtf(var + eps);
  double sg = 0, sgx = 0;
  for (int64_t j0 = 0; j0 < D; j0 += CHUNK) {
    int64_t j1 = min64(D, j0 + CHUNK);
    float a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
    for (int64_t j = j0; j < j1; j++) {
      float gg = g[j] * gamma[j];
      a += gg;
      b += gg * (p[j] - m);
    }
    sg += a;
    sgx += b;
  }
  const float mg = (float)(sg / (double)D), mgx = (float)(sgx * rs / (double)D);
#pragma omp simd
  for (int64_t j = 0; j < D; j++) {
    float xh = (p[j] - m) * rs; /* read before q[j] is written: q may be p */
    dg[j] += (double)(g[j] * xh);
    db[j] += (double)g[j];
    q[j] = rs * (g[j] * gamma[j] - mg - xh * mgx);
  }
}

static int ln_check(const char *what, int64_t R, int64_t D) {
  if (R < 0 || D < 1)
    return ts_error_set(TS_ESHAPE, "%s: bad dims R=%lld D=%lld", what, (long long)R, (long long)D);
  return TS_OK;
}

// x (R,D), gamma, beta (D) -> y (R,D), mean, var (R)
int ts__layernorm_fwd_ref(const float *x, const float *gamma, const float *beta, float *y,
                          float *mean, float *var, int64_t R, int64_t D, float eps) {
  int rc = ln_check("layernorm", R, D);
  if (rc) return rc;
#pragma omp parallel for schedule(static) if (R * D > PAR_MIN)
  for (int64_t r = 0; r < R; r++) ts__ln_fwd_row(x + r * D, gamma, beta, y + r * D, D, eps, &mean[r], &var[r]);
  return TS_OK;
}

// dy, x (R,D), gamma (D), mean, var (R) -> dx (R,D), dgamma, dbeta (D)
int ts__layernorm_bwd_ref(const float *dy, const float *x, const float *gamma, const float *mean,
                          const float *var, float *dx, float *dgamma, float *dbeta, int64_t R,
                          int64_t D, float eps) {
  int rc = ln_check("layernorm_bwd", R, D);
  if (rc) return rc;
  int T = R * D > PAR_MIN ? omp_get_max_threads() : 1;
  if (T > R) T = R > 0 ? (int)R : 1;
  /* per-thread partial dgamma/dbeta, combined in thread order (deterministic) */
  double *part = calloc((size_t)T * 2 * (size_t)D, sizeof(double));
  if (!part) return ts_error_set(TS_ENOMEM, "layernorm_bwd: out of memory");
  int nt_used = 1;
#pragma omp parallel num_threads(T) if (T > 1)
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    if (t == 0) nt_used = nt;
    double *dg = part + (size_t)t * 2 * (size_t)D, *db = dg + D;
    int64_t r0 = R * t / nt, r1 = R * (t + 1) / nt;
    for (int64_t r = r0; r < r1; r++)
      ts__ln_bwd_row(dy + r * D, x + r * D, gamma, mean[r], var[r], eps, D, dx + r * D, dg, db);
  }
  for (int64_t j = 0; j < D; j++) {
    double a = 0, b = 0;
    for (int t = 0; t < nt_used; t++) {
      a += part[(size_t)t * 2 * (size_t)D + (size_t)j];
      b += part[(size_t)t * 2 * (size_t)D + (size_t)D + (size_t)j];
    }
    dgamma[j] = (float)a;
    dbeta[j] = (float)b;
  }
  free(part);
  return TS_OK;
}

/* ---------------- oneDNN ---------------- */

typedef struct {
  int op;   /* 0 bn fwd, 1 bn bwd, 2 ln fwd, 3 ln bwd */
  int mode; /* bn: training */
  int dt;   /* the data type of x/y (dnnl_data_type_t) */
  int64_t a, b, c;
  float eps;
} norm_key;

static ts__dnnl_prim *bn_prim(int bwd, int training, int64_t N, int64_t C, int64_t S, float eps,
                              dnnl_data_type_t dt) {
  norm_key key;
  memset(&key, 0, sizeof key);
  key.op = bwd;
  key.mode = training;
  key.dt = (int)dt;
  key.a = N, key.b = C, key.c = S;
  key.eps = eps;
  ts__dnnl_prim *p = ts__dnnl_cache_get(&key, sizeof key);
  if (p) return p;
  /* (N,C) or (N,C,S,1): oneDNN 2.6 has its fast ncsp kernel for 2-D and 4-D data only. */
  dnnl_memory_desc_t md;
  int64_t dims[4] = {N, C, S, 1};
  if (ts__dnnl_md_plain(&md, S == 1 ? 2 : 4, dims, dt)) return NULL;
  unsigned flags = dnnl_use_scale | dnnl_use_shift | (training ? 0u : (unsigned)dnnl_use_global_stats);
  dnnl_batch_normalization_desc_t fd, bd;
  dnnl_primitive_desc_t fpd = NULL, pd = NULL;
  dnnl_prop_kind_t prop = (training || bwd) ? dnnl_forward_training : dnnl_forward_inference;
  if (ts__dnnl_check(dnnl_batch_normalization_forward_desc_init(&fd, prop, &md, eps, flags),
                     "batchnorm forward descriptor") ||
      ts__dnnl_check(dnnl_primitive_desc_create(&fpd, &fd, NULL, ts__dnnl_engine(), NULL),
                     "batchnorm forward primitive descriptor"))
    return NULL;
  if (!bwd) return ts__dnnl_cache_put_pd(&key, sizeof key, fpd);
  int rc = ts__dnnl_check(dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &md, &md,
                                                                      eps, flags),
                          "batchnorm backward descriptor");
  if (!rc)
    rc = ts__dnnl_check(dnnl_primitive_desc_create(&pd, &bd, NULL, ts__dnnl_engine(), fpd),
                        "batchnorm backward primitive descriptor");
  dnnl_primitive_desc_destroy(fpd);
  if (rc) return NULL;
  return ts__dnnl_cache_put_pd(&key, sizeof key, pd);
}

static dnnl_memory_t vec_mem(int64_t n, const float *data) {
  dnnl_memory_desc_t md;
  if (ts__dnnl_md_plain(&md, 1, &n, dnnl_f32)) return NULL;
  return ts__dnnl_mem(&md, (void *)data);
}

/* oneDNN batch normalisation of x/y (dy/dx) in dt (f32 or bf16); gamma, beta, statistics and
 * dgamma/dbeta f32; the running statistics are updated here (oneDNN does not keep them). */
// x (N,C,S), gamma, beta (C), rmean, rvar (C) -> y (N,C,S), mean, var (C)
static int bn_fwd_dnnl(const void *x, const float *gamma, const float *beta, float *rmean, float *rvar, void *y,
                       float *mean, float *var, int64_t N, int64_t C, int64_t S, float momentum, float eps,
                       int training, dnnl_data_type_t dt, const char *what) {
  int rc = bn_check(what, TS_F32, N, C, S, training);
  if (rc) return rc;
  ts__dnnl_prim *p = bn_prim(0, training, N, C, S, eps, dt);
  if (!p) return ts_error_wrap(TS_EBACKEND, "%s forward", what);
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(p->pd, dnnl_query_src_md, 0);
  dnnl_exec_arg_t args[6] = {{DNNL_ARG_SRC, ts__dnnl_mem(md, (void *)x)},
                             {DNNL_ARG_DST, ts__dnnl_mem(md, y)},
                             {DNNL_ARG_SCALE, vec_mem(C, gamma)},
                             {DNNL_ARG_SHIFT, vec_mem(C, beta)},
                             {DNNL_ARG_MEAN, vec_mem(C, training ? mean : rmean)},
                             {DNNL_ARG_VARIANCE, vec_mem(C, training ? var : rvar)}};
  rc = ts__dnnl_run(p, 6, args, what);
  if (rc) return rc;
  if (training) {
    bn_update_running(rmean, rvar, mean, var, C, N * S, momentum);
  } else {
    if (mean != rmean) memcpy(mean, rmean, sizeof(float) * (size_t)C);
    if (var != rvar) memcpy(var, rvar, sizeof(float) * (size_t)C);
  }
  return TS_OK;
}

// dy, x (N,C,S), gamma, mean, var (C) -> dx (N,C,S), dgamma, dbeta (C)
static int bn_bwd_dnnl(const void *dy, const void *x, const float *gamma, const float *mean, const float *var,
                       void *dx, float *dgamma, float *dbeta, int64_t N, int64_t C, int64_t S, float eps,
                       int training, dnnl_data_type_t dt, const char *what) {
  int rc = bn_check(what, TS_F32, N, C, S, training);
  if (rc) return rc;
  ts__dnnl_prim *p = bn_prim(1, training, N, C, S, eps, dt);
  if (!p) return ts_error_wrap(TS_EBACKEND, "%s", what);
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(p->pd, dnnl_query_src_md, 0);
  /* oneDNN 2.6 insists on a shift argument in backward too (unused): pass gamma. */
  dnnl_exec_arg_t args[9] = {{DNNL_ARG_SRC, ts__dnnl_mem(md, (void *)x)},
                             {DNNL_ARG_DIFF_DST, ts__dnnl_mem(md, (void *)dy)},
                             {DNNL_ARG_DIFF_SRC, ts__dnnl_mem(md, dx)},
                             {DNNL_ARG_MEAN, vec_mem(C, mean)},
                             {DNNL_ARG_VARIANCE, vec_mem(C, var)},
                             {DNNL_ARG_SCALE, vec_mem(C, gamma)},
                             {DNNL_ARG_SHIFT, vec_mem(C, gamma)},
                             {DNNL_ARG_DIFF_SCALE, vec_mem(C, dgamma)},
                             {DNNL_ARG_DIFF_SHIFT, vec_mem(C, dbeta)}};
  return ts__dnnl_run(p, 9, args, what);
}

int ts__batchnorm_fwd_dnnl(const float *x, const float *gamma, const float *beta, float *rmean,
                           float *rvar, float *y, float *mean, float *var, int64_t N, int64_t C,
                           int64_t S, float momentum, float eps, int training) {
  return bn_fwd_dnnl(x, gamma, beta, rmean, rvar, y, mean, var, N, C, S, momentum, eps, training, dnnl_f32,
                     "batchnorm");
}

int ts__batchnorm_bwd_dnnl(const float *dy, const float *x, const float *gamma, const float *mean,
                           const float *var, float *dx, float *dgamma, float *dbeta, int64_t N,
                           int64_t C, int64_t S, float eps, int training) {
  return bn_bwd_dnnl(dy, x, gamma, mean, var, dx, dgamma, dbeta, N, C, S, eps, training, dnnl_f32,
                     "batchnorm_bwd");
}

// x (N,C,S) bf16, gamma, beta (C) f32, rmean, rvar (C) f32 -> y (N,C,S) bf16, mean, var (C) f32
int ts__batchnorm_fwd_bf16_dnnl(const void *x, const float *gamma, const float *beta, float *rmean, float *rvar,
                                void *y, float *mean, float *var, int64_t N, int64_t C, int64_t S, float momentum,
                                float eps, int training) {
  return bn_fwd_dnnl(x, gamma, beta, rmean, rvar, y, mean, var, N, C, S, momentum, eps, training, dnnl_bf16,
                     "batchnorm (bf16)");
}

// dy, x (N,C,S) bf16, gamma, mean, var (C) f32 -> dx (N,C,S) bf16, dgamma, dbeta (C) f32
int ts__batchnorm_bwd_bf16_dnnl(const void *dy, const void *x, const float *gamma, const float *mean,
                                const float *var, void *dx, float *dgamma, float *dbeta, int64_t N, int64_t C,
                                int64_t S, float eps, int training) {
  return bn_bwd_dnnl(dy, x, gamma, mean, var, dx, dgamma, dbeta, N, C, S, eps, training, dnnl_bf16,
                     "batchnorm_bwd (bf16)");
}

const char *ts__batchnorm_dnnl_impl(int bwd, int training, int64_t N, int64_t C, int64_t S, int bf16) {
  ts__dnnl_prim *p = bn_prim(bwd, training, N, C, S, 1e-5f, bf16 ? dnnl_bf16 : dnnl_f32);
  const char *impl = NULL;
  if (!p || dnnl_primitive_desc_query(p->pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
    return "(none)";
  return impl;
}

static ts__dnnl_prim *ln_prim(int bwd, int64_t R, int64_t D, float eps, dnnl_data_type_t dt) {
  norm_key key;
  memset(&key, 0, sizeof key);
  key.op = 2 + bwd;
  key.dt = (int)dt;
  key.a = R, key.b = D;
  key.eps = eps;
  ts__dnnl_prim *p = ts__dnnl_cache_get(&key, sizeof key);
  if (p) return p;
  dnnl_memory_desc_t md;
  int64_t dims[2] = {R, D};
  if (ts__dnnl_md_plain(&md, 2, dims, dt)) return NULL;
  unsigned flags = dnnl_use_scale | dnnl_use_shift;
  dnnl_layer_normalization_desc_t fd, bd;
  dnnl_primitive_desc_t fpd = NULL, pd = NULL;
  if (ts__dnnl_check(dnnl_layer_normalization_forward_desc_init(&fd, dnnl_forward_training, &md,
                                                                NULL, eps, flags),
                     "layernorm forward descriptor") ||
      ts__dnnl_check(dnnl_primitive_desc_create(&fpd, &fd, NULL, ts__dnnl_engine(), NULL),
                     "layernorm forward primitive descriptor"))
    return NULL;
  if (!bwd) return ts__dnnl_cache_put_pd(&key, sizeof key, fpd);
  int rc = ts__dnnl_check(dnnl_layer_normalization_backward_desc_init(&bd, dnnl_backward, &md, &md,
                                                                      NULL, eps, flags),
                          "layernorm backward descriptor");
  if (!rc)
    rc = ts__dnnl_check(dnnl_primitive_desc_create(&pd, &bd, NULL, ts__dnnl_engine(), fpd),
                        "layernorm backward primitive descriptor");
  dnnl_primitive_desc_destroy(fpd);
  if (rc) return NULL;
  return ts__dnnl_cache_put_pd(&key, sizeof key, pd);
}

/* The oneDNN layer normalisation of x/y (and dy/dx) in dt (f32 or bf16); gamma, beta, the
 * statistics and dgamma/dbeta f32. `what` names the op in errors. */
// x (R,D), gamma, beta (D) -> y (R,D), mean, var (R)
static int ln_fwd_dnnl(const void *x, const float *gamma, const float *beta, void *y, float *mean, float *var,
                       int64_t R, int64_t D, float eps, dnnl_data_type_t dt, const char *what) {
  int rc = ln_check(what, R, D);
  if (rc || R == 0) return rc;
  ts__dnnl_prim *p = ln_prim(0, R, D, eps, dt);
  if (!p) return ts_error_wrap(TS_EBACKEND, "%s forward", what);
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(p->pd, dnnl_query_src_md, 0);
  dnnl_exec_arg_t args[6] = {{DNNL_ARG_SRC, ts__dnnl_mem(md, (void *)x)},
                             {DNNL_ARG_DST, ts__dnnl_mem(md, y)},
                             {DNNL_ARG_SCALE, vec_mem(D, gamma)},
                             {DNNL_ARG_SHIFT, vec_mem(D, beta)},
                             {DNNL_ARG_MEAN, vec_mem(R, mean)},
                             {DNNL_ARG_VARIANCE, vec_mem(R, var)}};
  return ts__dnnl_run(p, 6, args, what);
}

// dy, x (R,D), gamma (D), mean, var (R) -> dx (R,D), dgamma, dbeta (D)
static int ln_bwd_dnnl(const void *dy, const void *x, const float *gamma, const float *mean, const float *var,
                       void *dx, float *dgamma, float *dbeta, int64_t R, int64_t D, float eps, dnnl_data_type_t dt,
                       const char *what) {
  int rc = ln_check(what, R, D);
  if (rc) return rc;
  if (R == 0) {
    memset(dgamma, 0, sizeof(float) * (size_t)D);
    memset(dbeta, 0, sizeof(float) * (size_t)D);
    return TS_OK;
  }
  ts__dnnl_prim *p = ln_prim(1, R, D, eps, dt);
  if (!p) return ts_error_wrap(TS_EBACKEND, "%s", what);
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(p->pd, dnnl_query_src_md, 0);
  dnnl_exec_arg_t args[9] = {{DNNL_ARG_SRC, ts__dnnl_mem(md, (void *)x)},
                             {DNNL_ARG_DIFF_DST, ts__dnnl_mem(md, (void *)dy)},
                             {DNNL_ARG_DIFF_SRC, ts__dnnl_mem(md, dx)},
                             {DNNL_ARG_MEAN, vec_mem(R, mean)},
                             {DNNL_ARG_VARIANCE, vec_mem(R, var)},
                             {DNNL_ARG_SCALE, vec_mem(D, gamma)},
                             {DNNL_ARG_SHIFT, vec_mem(D, gamma)}, /* required, unused */
                             {DNNL_ARG_DIFF_SCALE, vec_mem(D, dgamma)},
                             {DNNL_ARG_DIFF_SHIFT, vec_mem(D, dbeta)}};
  return ts__dnnl_run(p, 9, args, what);
}

int ts__layernorm_fwd_dnnl(const float *x, const float *gamma, const float *beta, float *y,
                           float *mean, float *var, int64_t R, int64_t D, float eps) {
  return ln_fwd_dnnl(x, gamma, beta, y, mean, var, R, D, eps, dnnl_f32, "layernorm");
}

int ts__layernorm_bwd_dnnl(const float *dy, const float *x, const float *gamma, const float *mean,
                           const float *var, float *dx, float *dgamma, float *dbeta, int64_t R,
                           int64_t D, float eps) {
  return ln_bwd_dnnl(dy, x, gamma, mean, var, dx, dgamma, dbeta, R, D, eps, dnnl_f32, "layernorm_bwd");
}

/* ---------------- oneDNN, bf16 x/y (norm.h) ---------------- */

// x (R,D) bf16, gamma, beta (D) f32 -> y (R,D) bf16, mean, var (R) f32
int ts__layernorm_fwd_bf16_dnnl(const void *x, const float *gamma, const float *beta, void *y,
                                float *mean, float *var, int64_t R, int64_t D, float eps) {
  return ln_fwd_dnnl(x, gamma, beta, y, mean, var, R, D, eps, dnnl_bf16, "layernorm (bf16)");
}

// dy, x (R,D) bf16, gamma (D) f32, mean, var (R) f32 -> dx (R,D) bf16, dgamma, dbeta (D) f32
int ts__layernorm_bwd_bf16_dnnl(const void *dy, const void *x, const float *gamma, const float *mean,
                                const float *var, void *dx, float *dgamma, float *dbeta, int64_t R,
                                int64_t D, float eps) {
  return ln_bwd_dnnl(dy, x, gamma, mean, var, dx, dgamma, dbeta, R, D, eps, dnnl_bf16, "layernorm_bwd (bf16)");
}
