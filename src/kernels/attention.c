/* Causal attention kernels: naive reference and fused blocked versions, f32 and 16-bit (see
 * attention.h). */
#include "attention.h"

#include <dnnl.h>
#if defined(__AVX512BF16__) && defined(__AVX512VL__)
#include <immintrin.h>
#endif
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "dnnl_ctx.h"
#include "lowp.h"
#include "matmul.h"
#include "tessera/base.h"
#include "tessera/tensor.h"

#ifndef BQ
#define BQ 64 /* query rows per block */
#endif

/* Offsets of the (b,h) matrices and their row strides, in floats: `in` for q,k,v (dq,dk,dv),
 * `out` for o (do). */
typedef struct { int64_t ioff, ild, ooff, old; } bh_view;
static inline bh_view bh_base(int layout, int64_t H, int64_t T, int64_t D, int64_t bh) {
  int64_t b = bh / H, h = bh % H;
  bh_view w;
  if (layout == TS_ATTN_BTHD) {
    w.ioff = w.ooff = b * T * H * D + h * D;
    w.ild = w.old = H * D;
  } else if (layout == TS_ATTN_QKV) {
    w.ioff = b * T * 3 * H * D + h * D;
    w.ild = 3 * H * D;
    w.ooff = b * T * H * D + h * D;
    w.old = H * D;
  } else {
    w.ioff = w.ooff = bh * T * D;
    w.ild = w.old = D;
  }
  return w;
}

static int check_args(const char *op, int64_t B, int64_t H, int64_t T, int64_t D, int layout) {
  if (B < 0 || H < 0 || T < 0 || D < 0)
    return ts_error_set(TS_EINVAL, "%s: negative size (B=%lld H=%lld T=%lld D=%lld)", op,
                        (long long)B, (long long)H, (long long)T, (long long)D);
  if (layout != TS_ATTN_BHTD && layout != TS_ATTN_BTHD && layout != TS_ATTN_QKV)
    return ts_error_set(TS_EINVAL, "%s: unknown layout %d", op, layout);
  if (T > INT32_MAX || D > INT32_MAX || 3 * H * D > INT32_MAX)
    return ts_error_set(TS_EINVAL, "%s: sizes too large for sgemm (T=%lld D=%lld)", op,
                        (long long)T, (long long)D);
  return TS_OK;
}

/* ------------------------------------------------------------------------- reference */

/* One (b,h) of the reference forward: q, k, v rows at stride ld, o rows at stride old, lse (T).
 * Scratch: s (T), acc (D). */
static void ref_fwd_head(const float *q, const float *k, const float *v, float *o, float *lse, int64_t ld,
                         int64_t old, int64_t T, int64_t D, float scale, double *s, double *acc) {
  for (int64_t i = 0; i < T; i++) {
    const float *qi = q + i * ld;
    double m = -INFINITY;
    for (int64_t j = 0; j <= i; j++) {
      const float *kj = k + j * ld;
      double d = 0;
      for (int64_t c = 0; c < D; c++) d += (double)qi[c] * kj[c];
      s[j] = d * scale;
      if (s[j] > m) m = s[j];
    }
    double sum = 0;
    for (int64_t j = 0; j <= i; j++) sum += exp(s[j] - m);
    double l = m + log(sum);
    for (int64_t c = 0; c < D; c++) acc[c] = 0;
    for (int64_t j = 0; j <= i; j++) {
      double p = exp(s[j] - l);
      const float *vj = v + j * ld;
      for (int64_t c = 0; c < D; c++) acc[c] += p * vj[c];
    }
    for (int64_t c = 0; c < D; c++) o[i * old + c] = (float)acc[c];
    lse[i] = (float)l;
  }
}

/* One (b,h) of the reference backward (strides as ref_fwd_head). Scratch: gq, gk, gv (T*D). */
static void ref_bwd_head(const float *dout, const float *q, const float *k, const float *v, const float *o,
                         const float *lse, float *dq, float *dk, float *dv, int64_t ld, int64_t old, int64_t T,
                         int64_t D, float scale, double *gq, double *gk, double *gv) {
  size_t n = (size_t)(T * D > 0 ? T * D : 1);
  memset(gq, 0, sizeof(double) * n);
  memset(gk, 0, sizeof(double) * n);
  memset(gv, 0, sizeof(double) * n);
  for (int64_t i = 0; i < T; i++) {
    const float *qi = q + i * ld, *doi = dout + i * old, *oi = o + i * old;
    double Di = 0;
    for (int64_t c = 0; c < D; c++) Di += (double)doi[c] * oi[c];
    double l = lse[i];
    for (int64_t j = 0; j <= i; j++) {
      const float *kj = k + j * ld, *vj = v + j * ld;
      double s = 0, dp = 0;
      for (int64_t c = 0; c < D; c++) {
        s += (double)qi[c] * kj[c];
        dp += (double)doi[c] * vj[c];
      }
      double p = exp(s * scale - l);
      double ds = p * (dp - Di);
      for (int64_t c = 0; c < D; c++) {
        gv[j * D + c] += p * doi[c];
        gq[i * D + c] += scale * ds * kj[c];
        gk[j * D + c] += scale * ds * qi[c];
      }
    }
  }
  for (int64_t i = 0; i < T; i++)
    for (int64_t c = 0; c < D; c++) {
      dq[i * ld + c] = (float)gq[i * D + c];
      dk[i * ld + c] = (float)gk[i * D + c];
      dv[i * ld + c] = (float)gv[i * D + c];
    }
}

int ts__attention_fwd_ref(const float *q, const float *k, const float *v, float *o, float *lse,
                          int64_t B, int64_t H, int64_t T, int64_t D, float scale, int layout) {
  int rc = check_args("attention", B, H, T, D, layout);
  if (rc) return rc;
  int64_t BH = B * H;
  int err = 0;
#pragma omp parallel if (BH > 1 && !omp_in_parallel())
  {
    double *s = malloc(sizeof(double) * (size_t)(T > 0 ? T : 1));
    double *acc = malloc(sizeof(double) * (size_t)(D > 0 ? D : 1));
    if (!s || !acc) {
#pragma omp atomic write
      err = 1;
    }
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < BH; bh++) {
      if (!s || !acc) continue;
      bh_view w = bh_base(layout, H, T, D, bh);
      ref_fwd_head(q + w.ioff, k + w.ioff, v + w.ioff, o + w.ooff, lse + bh * T, w.ild, w.old, T, D, scale, s, acc);
    }
    free(s);
    free(acc);
  }
  if (err) return ts_error_set(TS_ENOMEM, "attention: out of memory for scratch (T=%lld)", (long long)T);
  return TS_OK;
}

int ts__attention_bwd_ref(const float *dout, const float *q, const float *k, const float *v,
                          const float *o, const float *lse, float *dq, float *dk, float *dv,
                          int64_t B, int64_t H, int64_t T, int64_t D, float scale, int layout) {
  int rc = check_args("attention_bwd", B, H, T, D, layout);
  if (rc) return rc;
  int64_t BH = B * H;
  int err = 0;
#pragma omp parallel if (BH > 1 && !omp_in_parallel())
  {
    size_t n = (size_t)(T * D > 0 ? T * D : 1);
    double *gq = malloc(sizeof(double) * n), *gk = malloc(sizeof(double) * n),
           *gv = malloc(sizeof(double) * n);
    if (!gq || !gk || !gv) {
#pragma omp atomic write
      err = 1;
    }
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < BH; bh++) {
      if (!gq || !gk || !gv) continue;
      bh_view w = bh_base(layout, H, T, D, bh);
      int64_t off = w.ioff;
      ref_bwd_head(dout + w.ooff, q + off, k + off, v + off, o + w.ooff, lse + bh * T, dq + off, dk + off, dv + off,
                   w.ild, w.old, T, D, scale, gq, gk, gv);
    }
    free(gq);
    free(gk);
    free(gv);
  }
  if (err) return ts_error_set(TS_ENOMEM, "attention_bwd: out of memory for scratch (T=%lld)", (long long)T);
  return TS_OK;
}

/* ------------------------------------------------------------------------- fused */

/* Row helpers on 8-float vectors (GCC/Clang vector extensions, lowered to AVX/AVX-512 or SSE
 * by the compiler; several accumulators hide the latency of the reductions). */
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
#define VL 8

static inline v8f vload(const float *p) {
  v8f v;
  memcpy(&v, p, sizeof v);
  return v;
}
static inline void vstore(float *p, v8f v) { memcpy(p, &v, sizeof v); }
static inline v8f vsplat(float x) { return (v8f){x, x, x, x, x, x, x, x}; }
static inline v8f vsel(v8i m, v8f a, v8f b) { return (v8f)(((v8i)a & m) | ((v8i)b & ~m)); }
static inline v8f vmax(v8f a, v8f b) { return vsel(a > b, a, b); }

/* exp(x) for x <= 88: Cephes polynomial, relative error ~1e-7 for x >= -87; 0 below -87.3. */
static inline v8f vexp(v8f x) {
  v8i under = x < vsplat(-87.3f);
  v8f xc = vmax(x, vsplat(-87.0f));
  v8f n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
  v8f r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  v8f p = r * 1.9875691500E-4f + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * r * r + r + 1.0f;
  v8i e = (__builtin_convertvector(n, v8i) + 127) << 23;
  v8f y = p * (v8f)e;
  return (v8f)((v8i)y & ~under);
}

/* max of row[0..len) */
static float row_max(const float *row, int64_t len) {
  v8f m0 = vsplat(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
  int64_t j = 0;
  for (; j + 4 * VL <= len; j += 4 * VL) {
    m0 = vmax(m0, vload(row + j));
    m1 = vmax(m1, vload(row + j + VL));
    m2 = vmax(m2, vload(row + j + 2 * VL));
    m3 = vmax(m3, vload(row + j + 3 * VL));
  }
  for (; j + VL <= len; j += VL) m0 = vmax(m0, vload(row + j));
  m0 = vmax(vmax(m0, m1), vmax(m2, m3));
  float mx = m0[0];
  for (int t = 1; t < VL; t++) mx = m0[t] > mx ? m0[t] : mx;
  for (; j < len; j++) mx = row[j] > mx ? row[j] : mx;
  return mx;
}

/* 8 floats rounded to bf16 as ts__f2bf rounds them (nearest even, quiet NaNs), stored at p. With
 * AVX512-BF16 the conversion instruction does it (the same rounding, NaN quieting and overflow to
 * inf), except that it flushes f32 denormals to zero: a vector holding one takes the integer
 * path. (Checked against ts__f2bf on all 2^32 inputs when written.) */
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint16_t v8h __attribute__((vector_size(16)));
static inline void vstore_bf16(uint16_t *p, v8f v) {
  const v8u u = (v8u)v;
#if defined(__AVX512BF16__) && defined(__AVX512VL__)
  const v8i den = ((u & 0x7f800000u) == 0u) & ((u & 0x007fffffu) != 0u);
  if (!_mm256_movemask_ps((__m256)den)) {
    const __m128bh h = _mm256_cvtneps_pbh((__m256)v);
    memcpy(p, &h, sizeof h);
    return;
  }
#endif
  const v8u nan = (v8u)((u & 0x7fffffffu) > 0x7f800000u);
  const v8u r = ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16 & ~nan) | (((u >> 16) | 0x40u) & nan);
  const v8h h = __builtin_convertvector(r, v8h);
  memcpy(p, &h, sizeof h);
}

/* e_j = exp(row[j] - sub) for j < len; returns their sum. The f32 kernel stores e_j back in row
 * (p16 NULL); the bf16 kernel stores them rounded to bf16 in p16 (row untouched). */
static float row_exp_sum(float *row, int64_t len, float sub, uint16_t *p16) {
  v8f s0 = vsplat(0.0f), s1 = s0, vs = vsplat(sub);
  int64_t j = 0;
  for (; j + 2 * VL <= len; j += 2 * VL) {
    v8f a = vexp(vload(row + j) - vs), b = vexp(vload(row + j + VL) - vs);
    if (p16) {
      vstore_bf16(p16 + j, a);
      vstore_bf16(p16 + j + VL, b);
    } else {
      vstore(row + j, a);
      vstore(row + j + VL, b);
    }
    s0 += a;
    s1 += b;
  }
  if (j + VL <= len) {
    v8f a = vexp(vload(row + j) - vs);
    if (p16) vstore_bf16(p16 + j, a);
    else vstore(row + j, a);
    s0 += a;
    j += VL;
  }
  s0 += s1;
  float sum = 0.0f;
  for (int t = 0; t < VL; t++) sum += s0[t];
  if (j < len) {
    float tmp[VL] = {0};
    memcpy(tmp, row + j, sizeof(float) * (size_t)(len - j));
    v8f a = vexp(vload(tmp) - vs);
    if (p16) {
      uint16_t t16[VL];
      vstore_bf16(t16, a);
      memcpy(p16 + j, t16, sizeof(uint16_t) * (size_t)(len - j));
    }
    for (int64_t t = 0; t < len - j; t++) {
      if (!p16) row[j + t] = a[t];
      sum += a[t];
    }
  }
  return sum;
}

/* p = exp(prow - l), d = p * (drow - di) for j < len. The f32 kernel stores p in prow and d in
 * drow (p16 NULL); the bf16 kernel stores p and dscale * d rounded to bf16 in p16 and d16. */
static void row_bwd(float *prow, float *drow, int64_t len, float l, float di, uint16_t *p16, uint16_t *d16,
                    float dscale) {
  v8f vl = vsplat(l), vd = vsplat(di);
  int64_t j = 0;
  for (; j + VL <= len; j += VL) {
    v8f p = vexp(vload(prow + j) - vl);
    v8f d = p * (vload(drow + j) - vd);
    if (p16) {
      vstore_bf16(p16 + j, p);
      vstore_bf16(d16 + j, d * dscale);
    } else {
      vstore(prow + j, p);
      vstore(drow + j, d);
    }
  }
  if (j < len) {
    float tp[VL] = {0}, td[VL] = {0};
    size_t nb = sizeof(float) * (size_t)(len - j);
    memcpy(tp, prow + j, nb);
    memcpy(td, drow + j, nb);
    v8f p = vexp(vload(tp) - vl);
    v8f d = p * (vload(td) - vd);
    if (p16) {
      uint16_t tp16[VL], td16[VL];
      vstore_bf16(tp16, p);
      vstore_bf16(td16, d * dscale);
      memcpy(p16 + j, tp16, sizeof(uint16_t) * (size_t)(len - j));
      memcpy(d16 + j, td16, sizeof(uint16_t) * (size_t)(len - j));
    } else {
      memcpy(prow + j, &p, nb);
      memcpy(drow + j, &d, nb);
    }
  }
}

static inline int sgemm(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                        const float *A, int64_t lda, const float *Bm, int64_t ldb, float beta,
                        float *C, int64_t ldc) {
  return dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, Bm, ldb, beta, C, ldc) == dnnl_success ? 0 : 1;
}

/* One block of queries [r0, r1) of one (b,h): o rows and lse. S is scratch (BQ x T). */
static int fwd_block(const float *q, const float *k, const float *v, float *o, float *lse,
                     int64_t ld, int64_t old, int64_t D, int64_t r0, int64_t r1, float scale,
                     float *S, float *rinv) {
  int64_t m = r1 - r0, kend = r1;
  if (sgemm('N', 'T', m, kend, D, scale, q + r0 * ld, ld, k, ld, 0.0f, S, kend)) return 1;
  for (int64_t i = 0; i < m; i++) {
    float *row = S + i * kend;
    int64_t len = r0 + i + 1;
    float mx = row_max(row, len);
    float sum = row_exp_sum(row, len, mx, NULL);
    if (len < kend) memset(row + len, 0, sizeof(float) * (size_t)(kend - len));
    lse[r0 + i] = mx + logf(sum);
    rinv[i] = 1.0f / sum;
  }
  if (sgemm('N', 'N', m, D, kend, 1.0f, S, kend, v, ld, 0.0f, o + r0 * old, old)) return 1;
  for (int64_t i = 0; i < m; i++) {
    float *orow = o + (r0 + i) * old, ri = rinv[i];
#pragma omp simd
    for (int64_t c = 0; c < D; c++) orow[c] *= ri;
  }
  return 0;
}

int ts__attention_fwd_dnnl(const float *q, const float *k, const float *v, float *o, float *lse,
                           int64_t B, int64_t H, int64_t T, int64_t D, float scale, int layout) {
  int rc = check_args("attention", B, H, T, D, layout);
  if (rc) return rc;
  int64_t BH = B * H;
  if (BH == 0 || T == 0) return TS_OK;
  if (D == 0) {
    for (int64_t i = 0; i < BH * T; i++) lse[i] = logf((float)(i % T + 1));
    return TS_OK;
  }
  int64_t nqb = (T + BQ - 1) / BQ, items = BH * nqb;
  int err = 0, oom = 0;
  int nthr = omp_in_parallel() ? 1 : omp_get_max_threads();
#pragma omp parallel if (nthr > 1 && items > 1)
  {
    float *S = ts_alloc(sizeof(float) * (size_t)(BQ * T + BQ));
    if (!S) {
#pragma omp atomic write
      oom = 1;
    }
    /* largest (latest) query blocks first so dynamic scheduling balances the causal triangle */
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; it++) {
      if (!S) continue;
      int64_t bh = it % BH, qb = nqb - 1 - it / BH;
      bh_view w = bh_base(layout, H, T, D, bh);
      int64_t r0 = qb * BQ, r1 = r0 + BQ < T ? r0 + BQ : T;
      if (fwd_block(q + w.ioff, k + w.ioff, v + w.ioff, o + w.ooff, lse + bh * T, w.ild, w.old, D,
                    r0, r1, scale, S, S + BQ * T)) {
#pragma omp atomic write
        err = 1;
      }
    }
    ts_free(S);
  }
  if (oom) return ts_error_set(TS_ENOMEM, "attention: out of memory for scratch (T=%lld)", (long long)T);
  if (err) return ts_error_set(TS_EBACKEND, "attention: dnnl_sgemm failed (T=%lld D=%lld)", (long long)T, (long long)D);
  return TS_OK;
}

/* Backward of one (b,h). P, dP: scratch (BQ x T); Dv: BQ. */
static int bwd_head(const float *dout, const float *q, const float *k, const float *v,
                    const float *o, const float *lse, float *dq, float *dk, float *dv, int64_t ld,
                    int64_t old, int64_t T, int64_t D, float scale, float *P, float *dP, float *Dv) {
  /* Query blocks from last to first: the last one sees every key, so it initialises dk and dv
   * (beta 0) and the others accumulate into their visible prefix. */
  int64_t nqb = (T + BQ - 1) / BQ;
  for (int64_t qb = nqb - 1; qb >= 0; qb--) {
    int64_t r0 = qb * BQ, r1 = r0 + BQ < T ? r0 + BQ : T, m = r1 - r0, kend = r1;
    float beta = qb == nqb - 1 ? 0.0f : 1.0f;
    const float *qb_ = q + r0 * ld, *dob = dout + r0 * old;
    if (sgemm('N', 'T', m, kend, D, scale, qb_, ld, k, ld, 0.0f, P, kend)) return 1;
    if (sgemm('N', 'T', m, kend, D, 1.0f, dob, old, v, ld, 0.0f, dP, kend)) return 1;
    for (int64_t i = 0; i < m; i++) {
      const float *doi = dob + i * old, *oi = o + (r0 + i) * old;
      float di = 0.0f;
#pragma omp simd reduction(+ : di)
      for (int64_t c = 0; c < D; c++) di += doi[c] * oi[c];
      Dv[i] = di;
    }
    for (int64_t i = 0; i < m; i++) {
      float *prow = P + i * kend, *drow = dP + i * kend;
      int64_t len = r0 + i + 1;
      row_bwd(prow, drow, len, lse[r0 + i], Dv[i], NULL, NULL, 1.0f);
      if (len < kend) {
        memset(prow + len, 0, sizeof(float) * (size_t)(kend - len));
        memset(drow + len, 0, sizeof(float) * (size_t)(kend - len));
      }
    }
    /* dv[0:kend] += P^T do_blk; dq_blk = scale dS k; dk[0:kend] += scale dS^T q_blk */
    if (sgemm('T', 'N', kend, D, m, 1.0f, P, kend, dob, old, beta, dv, ld)) return 1;
    if (sgemm('N', 'N', m, D, kend, scale, dP, kend, k, ld, 0.0f, dq + r0 * ld, ld)) return 1;
    if (sgemm('T', 'N', kend, D, m, scale, dP, kend, qb_, ld, beta, dk, ld)) return 1;
  }
  return 0;
}

int ts__attention_bwd_dnnl(const float *dout, const float *q, const float *k, const float *v,
                           const float *o, const float *lse, float *dq, float *dk, float *dv,
                           int64_t B, int64_t H, int64_t T, int64_t D, float scale, int layout) {
  int rc = check_args("attention_bwd", B, H, T, D, layout);
  if (rc) return rc;
  int64_t BH = B * H;
  if (BH == 0 || T == 0 || D == 0) return TS_OK;
  int err = 0, oom = 0;
  int nthr = omp_in_parallel() ? 1 : omp_get_max_threads();
  /* With fewer heads than threads, run heads one after another and let sgemm use the threads. */
#pragma omp parallel if (nthr > 1 && BH >= nthr)
  {
    float *P = ts_alloc(sizeof(float) * (size_t)(2 * BQ * T + BQ));
    if (!P) {
#pragma omp atomic write
      oom = 1;
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < BH; bh++) {
      if (!P) continue;
      bh_view w = bh_base(layout, H, T, D, bh);
      int64_t off = w.ioff;
      if (bwd_head(dout + w.ooff, q + off, k + off, v + off, o + w.ooff, lse + bh * T, dq + off,
                   dk + off, dv + off, w.ild, w.old, T, D, scale, P, P + BQ * T, P + 2 * BQ * T)) {
#pragma omp atomic write
        err = 1;
      }
    }
    ts_free(P);
  }
  if (oom) return ts_error_set(TS_ENOMEM, "attention_bwd: out of memory for scratch (T=%lld)", (long long)T);
  if (err) return ts_error_set(TS_EBACKEND, "attention_bwd: dnnl_sgemm failed (T=%lld D=%lld)", (long long)T, (long long)D);
  return TS_OK;
}

/* ------------------------------------------------------------------------- 16-bit */

static inline const void *at(const void *p, size_t es, int64_t off) { return (const char *)p + (size_t)off * es; }
static inline void *atw(void *p, size_t es, int64_t off) { return (char *)p + (size_t)off * es; }

/* rows (rows, D) of a view at row stride ld (elements of dt) -> dense f32 (rows, D), and back */
static void rows_widen(const void *src, ts_dtype dt, int64_t ld, int64_t rows, int64_t D, float *dst) {
  const size_t es = ts_dtype_size(dt);
  for (int64_t r = 0; r < rows; r++) ts__lp_widen(at(src, es, r * ld), dt, dst + r * D, D);
}
static void rows_narrow(const float *src, void *dst, ts_dtype dt, int64_t ld, int64_t rows, int64_t D) {
  const size_t es = ts_dtype_size(dt);
  for (int64_t r = 0; r < rows; r++) ts__lp_narrow(src + r * D, atw(dst, es, r * ld), dt, D);
}

/* Heads widened to f32 (REF backend; f16 on the FAST backend): per (b,h), the head's rows are
 * widened into per-thread dense f32 buffers, the f32 kernel's per-head code runs on them (fused:
 * fwd_block / bwd_head on dnnl_sgemm; else the reference loops) and the outputs are rounded once. */
static int fwd_heads_f32(ts_dtype dt, const void *q, const void *k, const void *v, void *o, float *lse, int64_t B,
                         int64_t H, int64_t T, int64_t D, float scale, int layout, int fused) {
  const int64_t BH = B * H, TD = T * D, nqb = (T + BQ - 1) / BQ;
  int err = 0, oom = 0;
  int nthr = omp_in_parallel() ? 1 : omp_get_max_threads();
#pragma omp parallel if (nthr > 1 && BH > 1)
  {
    float *f = ts_alloc(sizeof(float) * (size_t)(4 * TD + (fused ? BQ * T + BQ : 0) + 1));
    double *dbl = fused ? NULL : malloc(sizeof(double) * (size_t)(T + D + 1));
    if (!f || (!fused && !dbl)) {
#pragma omp atomic write
      oom = 1;
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < BH; bh++) {
      if (!f || (!fused && !dbl)) continue;
      bh_view w = bh_base(layout, H, T, D, bh);
      const size_t es = ts_dtype_size(dt);
      float *fq = f, *fk = f + TD, *fv = f + 2 * TD, *fo = f + 3 * TD;
      rows_widen(at(q, es, w.ioff), dt, w.ild, T, D, fq);
      rows_widen(at(k, es, w.ioff), dt, w.ild, T, D, fk);
      rows_widen(at(v, es, w.ioff), dt, w.ild, T, D, fv);
      if (!fused) {
        ref_fwd_head(fq, fk, fv, fo, lse + bh * T, D, D, T, D, scale, dbl, dbl + T);
      } else {
        for (int64_t qb = 0; qb < nqb; qb++) {
          int64_t r0 = qb * BQ, r1 = r0 + BQ < T ? r0 + BQ : T;
          if (fwd_block(fq, fk, fv, fo, lse + bh * T, D, D, D, r0, r1, scale, f + 4 * TD, f + 4 * TD + BQ * T)) {
#pragma omp atomic write
            err = 1;
          }
        }
      }
      rows_narrow(fo, atw(o, es, w.ooff), dt, w.old, T, D);
    }
    ts_free(f);
    free(dbl);
  }
  if (oom) return ts_error_set(TS_ENOMEM, "attention (16-bit): out of memory for scratch (T=%lld)", (long long)T);
  if (err) return ts_error_set(TS_EBACKEND, "attention (16-bit): dnnl_sgemm failed (T=%lld D=%lld)", (long long)T, (long long)D);
  return TS_OK;
}

static int bwd_heads_f32(ts_dtype dt, const void *dout, const void *q, const void *k, const void *v, const void *o,
                         const float *lse, void *dq, void *dk, void *dv, int64_t B, int64_t H, int64_t T, int64_t D,
                         float scale, int layout, int fused) {
  const int64_t BH = B * H, TD = T * D;
  int err = 0, oom = 0;
  int nthr = omp_in_parallel() ? 1 : omp_get_max_threads();
#pragma omp parallel if (nthr > 1 && BH > 1)
  {
    float *f = ts_alloc(sizeof(float) * (size_t)(8 * TD + (fused ? 2 * BQ * T + BQ : 0) + 1));
    double *dbl = fused ? NULL : malloc(sizeof(double) * (size_t)(3 * TD + 3));
    if (!f || (!fused && !dbl)) {
#pragma omp atomic write
      oom = 1;
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < BH; bh++) {
      if (!f || (!fused && !dbl)) continue;
      bh_view w = bh_base(layout, H, T, D, bh);
      const size_t es = ts_dtype_size(dt);
      float *fdo = f, *fq = f + TD, *fk = f + 2 * TD, *fv = f + 3 * TD, *fo = f + 4 * TD;
      float *gq = f + 5 * TD, *gk = f + 6 * TD, *gv = f + 7 * TD;
      rows_widen(at(dout, es, w.ooff), dt, w.old, T, D, fdo);
      rows_widen(at(q, es, w.ioff), dt, w.ild, T, D, fq);
      rows_widen(at(k, es, w.ioff), dt, w.ild, T, D, fk);
      rows_widen(at(v, es, w.ioff), dt, w.ild, T, D, fv);
      rows_widen(at(o, es, w.ooff), dt, w.old, T, D, fo);
      if (!fused)
        ref_bwd_head(fdo, fq, fk, fv, fo, lse + bh * T, gq, gk, gv, D, D, T, D, scale, dbl, dbl + TD, dbl + 2 * TD);
      else if (bwd_head(fdo, fq, fk, fv, fo, lse + bh * T, gq, gk, gv, D, D, T, D, scale, f + 8 * TD,
                        f + 8 * TD + BQ * T, f + 8 * TD + 2 * BQ * T)) {
#pragma omp atomic write
        err = 1;
      }
      rows_narrow(gq, atw(dq, es, w.ioff), dt, w.ild, T, D);
      rows_narrow(gk, atw(dk, es, w.ioff), dt, w.ild, T, D);
      rows_narrow(gv, atw(dv, es, w.ioff), dt, w.ild, T, D);
    }
    ts_free(f);
    free(dbl);
  }
  if (oom) return ts_error_set(TS_ENOMEM, "attention_bwd (16-bit): out of memory for scratch (T=%lld)", (long long)T);
  if (err) return ts_error_set(TS_EBACKEND, "attention_bwd (16-bit): dnnl_sgemm failed (T=%lld D=%lld)", (long long)T, (long long)D);
  return TS_OK;
}

/* ---- native bf16 (FAST backend) ---- */

/* The (rows, D) rows of a bf16 view at row stride ld as a dense matrix: the view itself when
 * ld == D, else a copy in buf (oneDNN's brgemm takes dense operands only). */
static const uint16_t *dense_rows(const uint16_t *src, int64_t ld, int64_t rows, int64_t D, uint16_t *buf) {
  if (ld == D) return src;
  for (int64_t r = 0; r < rows; r++) memcpy(buf + r * D, src + r * ld, sizeof(uint16_t) * (size_t)D);
  return buf;
}
static void rows_out(const uint16_t *src, uint16_t *dst, int64_t ld, int64_t rows, int64_t D) {
  if (src == dst) return;
  for (int64_t r = 0; r < rows; r++) memcpy(dst + r * ld, src + r * D, sizeof(uint16_t) * (size_t)D);
}

/* The products of query block qb (rows [r0,r1), keys [0,r1)), all operands dense. Forward:
 *   [0] S (m,kend) f32 = scale q_blk k^T         [1] O (m,D) f32 = P_bf16 v (o = O / sum)
 * backward, in addition:
 *   [1] dP (m,kend) f32 = do_blk v^T             [2] dV (kend,D) f32 (+)= P_bf16^T do_blk
 *   [3] dq_blk (m,D) bf16 = dS_bf16 k            [4] dK (kend,D) f32 (+)= dS_bf16^T q_blk
 * (P_bf16: exp(s - max) forward, exp(s - lse) backward; dS_bf16 holds scale * dS; (+)=
 * accumulates except in the last block, which sees every key). */
enum { G_S, G_O, G_NF = 2 };
enum { G_DP = 1, G_DV, G_DQ, G_DK, G_NB };
static int gemms_bf16(int bwd, int64_t T, int64_t D, float scale, const ts__gemm_bf16 **g, size_t *scratch) {
  const int64_t nqb = (T + BQ - 1) / BQ;
  const int ng = bwd ? G_NB : G_NF;
  *scratch = 0;
  for (int64_t qb = 0; qb < nqb; qb++) {
    const int64_t r0 = qb * BQ, kend = r0 + BQ < T ? r0 + BQ : T, m = kend - r0;
    const int acc = qb != nqb - 1;
    const ts__gemm_bf16 **gq = g + qb * ng;
    gq[G_S] = ts__gemm_bf16_get('N', 'T', m, kend, D, scale, D, D, 0, kend, 0);
    if (!bwd) {
      gq[G_O] = ts__gemm_bf16_get('N', 'N', m, D, kend, 1.0f, kend, D, 0, D, 0);
    } else {
      gq[G_DP] = ts__gemm_bf16_get('N', 'T', m, kend, D, 1.0f, D, D, 0, kend, 0);
      gq[G_DV] = ts__gemm_bf16_get('T', 'N', kend, D, m, 1.0f, kend, D, acc, D, 0);
      gq[G_DQ] = ts__gemm_bf16_get('N', 'N', m, D, kend, 1.0f, kend, D, 0, D, 1);
      gq[G_DK] = ts__gemm_bf16_get('T', 'N', kend, D, m, 1.0f, kend, D, acc, D, 0);
    }
    for (int i = 0; i < ng; i++) {
      if (!gq[i]) return ts_error_wrap(TS_EBACKEND, "attention (bf16): T=%lld D=%lld", (long long)T, (long long)D);
      if (ts__gemm_bf16_scratch(gq[i]) > *scratch) *scratch = ts__gemm_bf16_scratch(gq[i]);
    }
  }
  return TS_OK;
}

/* Per-thread scratch of the bf16 kernels. */
typedef struct {
  ts__gemm_thr *t;
  float *S, *dS, *aux, *dk, *dv, *O; /* (BQ,T) f32 x2, BQ, (T,D) f32 x2, (BQ,D) */
  uint16_t *P, *dSb, *q, *k, *v, *dout, *blk; /* (BQ,T) x2, (T,D) x4, (BQ,D) */
} bf16_scratch;

static int bf16_scratch_new(bf16_scratch *w, int nslot, size_t gscratch, int64_t T, int64_t D) {
  memset(w, 0, sizeof *w);
  const size_t bt = (size_t)(BQ * T), td = (size_t)(T * D);
  w->S = ts_alloc(sizeof(float) * (2 * bt + BQ + 2 * td + (size_t)(BQ * D) + 1));
  w->P = ts_alloc(sizeof(uint16_t) * (2 * bt + 4 * td + (size_t)(BQ * D) + 1));
  w->t = ts__gemm_thr_new(nslot, gscratch);
  if (!w->S || !w->P || !w->t) return 1;
  w->dS = w->S + bt, w->aux = w->S + 2 * bt, w->dk = w->aux + BQ, w->dv = w->dk + td, w->O = w->dv + td;
  w->dSb = w->P + bt, w->q = w->P + 2 * bt, w->k = w->q + td, w->v = w->k + td, w->dout = w->v + td;
  w->blk = w->dout + td;
  return 0;
}
static void bf16_scratch_free(bf16_scratch *w) {
  ts_free(w->S);
  ts_free(w->P);
  ts__gemm_thr_free(w->t);
}

/* One block of queries [r0, r1) of one (b,h) (views and strides as fwd_block): o rows and lse. */
static int fwd_block_bf16(const ts__gemm_bf16 *const *g, int slot, const uint16_t *q, const uint16_t *k,
                          const uint16_t *v, uint16_t *o, float *lse, int64_t ld, int64_t old, int64_t D, int64_t r0,
                          int64_t r1, bf16_scratch *w) {
  const int64_t m = r1 - r0, kend = r1;
  const uint16_t *qb = dense_rows(q + r0 * ld, ld, m, D, w->blk);
  const uint16_t *kb = dense_rows(k, ld, kend, D, w->k), *vb = dense_rows(v, ld, kend, D, w->v);
  if (ts__gemm_bf16_run(g[G_S], w->t, slot + G_S, qb, kb, w->S)) return 1;
  for (int64_t i = 0; i < m; i++) {
    float *row = w->S + i * kend;
    uint16_t *prow = w->P + i * kend;
    const int64_t len = r0 + i + 1;
    const float mx = row_max(row, len);
    const float sum = row_exp_sum(row, len, mx, prow); /* exp(s - max) rounded to bf16 */
    if (len < kend) memset(prow + len, 0, sizeof(uint16_t) * (size_t)(kend - len));
    lse[r0 + i] = mx + logf(sum);
    w->aux[i] = 1.0f / sum;
  }
  if (ts__gemm_bf16_run(g[G_O], w->t, slot + G_O, w->P, vb, w->O)) return 1; /* (m,D) f32 */
  for (int64_t i = 0; i < m; i++) { /* o = (P v) / sum, rounded once */
    const float *orow = w->O + i * D, ri = w->aux[i];
    uint16_t *dst = o + (r0 + i) * old;
#pragma omp simd
    for (int64_t c = 0; c < D; c++) dst[c] = ts__f2bf(orow[c] * ri);
  }
  return 0;
}

static int fwd_bf16(const uint16_t *q, const uint16_t *k, const uint16_t *v, uint16_t *o, float *lse, int64_t B,
                    int64_t H, int64_t T, int64_t D, float scale, int layout) {
  const int64_t BH = B * H, nqb = (T + BQ - 1) / BQ, items = BH * nqb;
  const ts__gemm_bf16 **g = malloc(sizeof *g * (size_t)(nqb * G_NF));
  if (!g) return ts_error_set(TS_ENOMEM, "attention (bf16): out of memory");
  size_t gs = 0;
  int rc = gemms_bf16(0, T, D, scale, g, &gs);
  if (rc) {
    free(g);
    return rc;
  }
  int err = 0, oom = 0;
  int nthr = omp_in_parallel() ? 1 : omp_get_max_threads();
#pragma omp parallel if (nthr > 1 && items > 1)
  {
    bf16_scratch w;
    const int bad = bf16_scratch_new(&w, (int)(nqb * G_NF), gs, T, D);
    if (bad) {
#pragma omp atomic write
      oom = 1;
    }
    /* largest (latest) query blocks first, as the f32 kernel */
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; it++) {
      if (bad) continue;
      const int64_t bh = it % BH, qb = nqb - 1 - it / BH;
      bh_view v_ = bh_base(layout, H, T, D, bh);
      const int64_t r0 = qb * BQ, r1 = r0 + BQ < T ? r0 + BQ : T;
      if (fwd_block_bf16(g + qb * G_NF, (int)(qb * G_NF), q + v_.ioff, k + v_.ioff, v + v_.ioff, o + v_.ooff,
                         lse + bh * T, v_.ild, v_.old, D, r0, r1, &w)) {
#pragma omp atomic write
        err = 1;
      }
    }
    bf16_scratch_free(&w);
  }
  free(g);
  if (oom) return ts_error_set(TS_ENOMEM, "attention (bf16): out of memory for scratch (T=%lld)", (long long)T);
  if (err) return ts_error_set(TS_EBACKEND, "attention (bf16): oneDNN bf16 matmul failed (T=%lld D=%lld)", (long long)T, (long long)D);
  return TS_OK;
}

/* Backward of one (b,h) (views and strides as bwd_head). */
static int bwd_head_bf16(const ts__gemm_bf16 *const *g, const uint16_t *dout, const uint16_t *q, const uint16_t *k,
                         const uint16_t *v, const uint16_t *o, const float *lse, uint16_t *dq, uint16_t *dk,
                         uint16_t *dv, int64_t ld, int64_t old, int64_t T, int64_t D, float scale, bf16_scratch *w) {
  const int64_t nqb = (T + BQ - 1) / BQ;
  const uint16_t *qh = dense_rows(q, ld, T, D, w->q), *kh = dense_rows(k, ld, T, D, w->k);
  const uint16_t *vh = dense_rows(v, ld, T, D, w->v), *doh = dense_rows(dout, old, T, D, w->dout);
  for (int64_t qb = nqb - 1; qb >= 0; qb--) {
    const int64_t r0 = qb * BQ, r1 = r0 + BQ < T ? r0 + BQ : T, m = r1 - r0, kend = r1;
    const ts__gemm_bf16 *const *gq = g + qb * G_NB;
    const int slot = (int)(qb * G_NB);
    const uint16_t *qb_ = qh + r0 * D, *dob = doh + r0 * D;
    if (ts__gemm_bf16_run(gq[G_S], w->t, slot + G_S, qb_, kh, w->S) ||
        ts__gemm_bf16_run(gq[G_DP], w->t, slot + G_DP, dob, vh, w->dS))
      return 1;
    for (int64_t i = 0; i < m; i++) {
      const uint16_t *doi = dout + (r0 + i) * old, *oi = o + (r0 + i) * old;
      float di = 0.0f;
#pragma omp simd reduction(+ : di)
      for (int64_t c = 0; c < D; c++) di += ts__bf2f(doi[c]) * ts__bf2f(oi[c]);
      const int64_t len = r0 + i + 1;
      float *prow = w->S + i * kend, *drow = w->dS + i * kend;
      uint16_t *p16 = w->P + i * kend, *d16 = w->dSb + i * kend;
      row_bwd(prow, drow, len, lse[r0 + i], di, p16, d16, scale);
      if (len < kend) {
        memset(p16 + len, 0, sizeof(uint16_t) * (size_t)(kend - len));
        memset(d16 + len, 0, sizeof(uint16_t) * (size_t)(kend - len));
      }
    }
    uint16_t *dqb = ld == D ? dq + r0 * ld : w->blk;
    if (ts__gemm_bf16_run(gq[G_DV], w->t, slot + G_DV, w->P, dob, w->dv) ||
        ts__gemm_bf16_run(gq[G_DQ], w->t, slot + G_DQ, w->dSb, kh, dqb) ||
        ts__gemm_bf16_run(gq[G_DK], w->t, slot + G_DK, w->dSb, qb_, w->dk))
      return 1;
    rows_out(dqb, dq + r0 * ld, ld, m, D);
  }
  if (ld == D) {
    ts__lp_narrow(w->dk, dk, TS_BF16, T * D);
    ts__lp_narrow(w->dv, dv, TS_BF16, T * D);
  } else {
    rows_narrow(w->dk, dk, TS_BF16, ld, T, D);
    rows_narrow(w->dv, dv, TS_BF16, ld, T, D);
  }
  return 0;
}

static int bwd_bf16(const uint16_t *dout, const uint16_t *q, const uint16_t *k, const uint16_t *v, const uint16_t *o,
                    const float *lse, uint16_t *dq, uint16_t *dk, uint16_t *dv, int64_t B, int64_t H, int64_t T,
                    int64_t D, float scale, int layout) {
  const int64_t BH = B * H, nqb = (T + BQ - 1) / BQ;
  const ts__gemm_bf16 **g = malloc(sizeof *g * (size_t)(nqb * G_NB));
  if (!g) return ts_error_set(TS_ENOMEM, "attention_bwd (bf16): out of memory");
  size_t gs = 0;
  int rc = gemms_bf16(1, T, D, scale, g, &gs);
  if (rc) {
    free(g);
    return rc;
  }
  int err = 0, oom = 0;
  int nthr = omp_in_parallel() ? 1 : omp_get_max_threads();
  /* With fewer heads than threads, heads run one after another and oneDNN uses the threads. */
#pragma omp parallel if (nthr > 1 && BH >= nthr)
  {
    bf16_scratch w;
    const int bad = bf16_scratch_new(&w, (int)(nqb * G_NB), gs, T, D);
    if (bad) {
#pragma omp atomic write
      oom = 1;
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < BH; bh++) {
      if (bad) continue;
      bh_view v_ = bh_base(layout, H, T, D, bh);
      const int64_t off = v_.ioff;
      if (bwd_head_bf16(g, dout + v_.ooff, q + off, k + off, v + off, o + v_.ooff, lse + bh * T, dq + off, dk + off,
                        dv + off, v_.ild, v_.old, T, D, scale, &w)) {
#pragma omp atomic write
        err = 1;
      }
    }
    bf16_scratch_free(&w);
  }
  free(g);
  if (oom) return ts_error_set(TS_ENOMEM, "attention_bwd (bf16): out of memory for scratch (T=%lld)", (long long)T);
  if (err) return ts_error_set(TS_EBACKEND, "attention_bwd (bf16): oneDNN bf16 matmul failed (T=%lld D=%lld)", (long long)T, (long long)D);
  return TS_OK;
}

/* ---- entry points ---- */

static int lp_dtype(ts_dtype dt, const char *op) {
  if (dt == TS_BF16 || dt == TS_F16) return TS_OK;
  return ts_error_set(TS_EDTYPE, "%s: 16-bit kernel called with %s", op, ts_dtype_name(dt));
}

int ts__attention_fwd_lp(ts_dtype dt, const void *q, const void *k, const void *v, void *o, float *lse, int64_t B,
                         int64_t H, int64_t T, int64_t D, float scale, int layout, int dnnl) {
  if (dt == TS_F32)
    return dnnl ? ts__attention_fwd_dnnl(q, k, v, o, lse, B, H, T, D, scale, layout)
                : ts__attention_fwd_ref(q, k, v, o, lse, B, H, T, D, scale, layout);
  int rc = lp_dtype(dt, "attention");
  if (!rc) rc = check_args("attention", B, H, T, D, layout);
  if (rc) return rc;
  if (B * H == 0 || T == 0) return TS_OK;
  if (dnnl && D == 0) { /* as the f32 fused kernel */
    for (int64_t i = 0; i < B * H * T; i++) lse[i] = logf((float)(i % T + 1));
    return TS_OK;
  }
  if (dnnl && dt == TS_BF16 && ts__dnnl_bf16()) return fwd_bf16(q, k, v, o, lse, B, H, T, D, scale, layout);
  return fwd_heads_f32(dt, q, k, v, o, lse, B, H, T, D, scale, layout, dnnl);
}

int ts__attention_bwd_lp(ts_dtype dt, const void *dout, const void *q, const void *k, const void *v, const void *o,
                         const float *lse, void *dq, void *dk, void *dv, int64_t B, int64_t H, int64_t T, int64_t D,
                         float scale, int layout, int dnnl) {
  if (dt == TS_F32)
    return dnnl ? ts__attention_bwd_dnnl(dout, q, k, v, o, lse, dq, dk, dv, B, H, T, D, scale, layout)
                : ts__attention_bwd_ref(dout, q, k, v, o, lse, dq, dk, dv, B, H, T, D, scale, layout);
  int rc = lp_dtype(dt, "attention_bwd");
  if (!rc) rc = check_args("attention_bwd", B, H, T, D, layout);
  if (rc) return rc;
  if (B * H == 0 || T == 0 || D == 0) return TS_OK;
  if (dnnl && dt == TS_BF16 && ts__dnnl_bf16()) return bwd_bf16(dout, q, k, v, o, lse, dq, dk, dv, B, H, T, D, scale, layout);
  return bwd_heads_f32(dt, dout, q, k, v, o, lse, dq, dk, dv, B, H, T, D, scale, layout, dnnl);
}
