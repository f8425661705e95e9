/* Causal attention kernels: naive reference and fused blocked versions (see attention.h). */
#include "attention.h"

#include <dnnl.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

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
      int64_t off = w.ioff, ld = w.ild;
      for (int64_t i = 0; i < T; i++) {
        const float *qi = q + off + i * ld;
        double m = -INFINITY;
        for (int64_t j = 0; j <= i; j++) {
          const float *kj = k + off + j * ld;
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
          const float *vj = v + off + j * ld;
          for (int64_t c = 0; c < D; c++) acc[c] += p * vj[c];
        }
        for (int64_t c = 0; c < D; c++) o[w.ooff + i * w.old + c] = (float)acc[c];
        lse[bh * T + i] = (float)l;
      }
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
      int64_t off = w.ioff, ld = w.ild;
      memset(gq, 0, sizeof(double) * n);
      memset(gk, 0, sizeof(double) * n);
      memset(gv, 0, sizeof(double) * n);
      for (int64_t i = 0; i < T; i++) {
        const float *qi = q + off + i * ld, *doi = dout + w.ooff + i * w.old,
                    *oi = o + w.ooff + i * w.old;
        double Di = 0;
        for (int64_t c = 0; c < D; c++) Di += (double)doi[c] * oi[c];
        double l = lse[bh * T + i];
        for (int64_t j = 0; j <= i; j++) {
          const float *kj = k + off + j * ld, *vj = v + off + j * ld;
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
          dq[off + i * ld + c] = (float)gq[i * D + c];
          dk[off + i * ld + c] = (float)gk[i * D + c];
          dv[off + i * ld + c] = (float)gv[i * D + c];
        }
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

/* row[j] = exp(row[j] - sub) for j < len; returns their sum. */
static float row_exp_sum(float *row, int64_t len, float sub) {
  v8f s0 = vsplat(0.0f), s1 = s0, vs = vsplat(sub);
  int64_t j = 0;
  for (; j + 2 * VL <= len; j += 2 * VL) {
    v8f a = vexp(vload(row + j) - vs), b = vexp(vload(row + j + VL) - vs);
    vstore(row + j, a);
    vstore(row + j + VL, b);
    s0 += a;
    s1 += b;
  }
  if (j + VL <= len) {
    v8f a = vexp(vload(row + j) - vs);
    vstore(row + j, a);
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
    for (int64_t t = 0; t < len - j; t++) {
      row[j + t] = a[t];
      sum += a[t];
    }
  }
  return sum;
}

/* p = exp(prow - l); drow = p * (drow - di); prow = p, for j < len. */
static void row_bwd(float *prow, float *drow, int64_t len, float l, float di) {
  v8f vl = vsplat(l), vd = vsplat(di);
  int64_t j = 0;
  for (; j + VL <= len; j += VL) {
    v8f p = vexp(vload(prow + j) - vl);
    vstore(prow + j, p);
    vstore(drow + j, p * (vload(drow + j) - vd));
  }
  if (j < len) {
    float tp[VL] = {0}, td[VL] = {0};
    size_t nb = sizeof(float) * (size_t)(len - j);
    memcpy(tp, prow + j, nb);
    memcpy(td, drow + j, nb);
    v8f p = vexp(vload(tp) - vl);
    v8f d = p * (vload(td) - vd);
    memcpy(prow + j, &p, nb);
    memcpy(drow + j, &d, nb);
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
    float sum = row_exp_sum(row, len, mx);
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
      row_bwd(prow, drow, len, lse[r0 + i], Dv[i]);
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
