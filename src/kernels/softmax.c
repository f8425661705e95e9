/* Softmax / log-softmax (reference and oneDNN softmax_v2) and fused sparse cross-entropy (f32 or
 * 16-bit logits). */
#include "softmax.h"
#include "lowp.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "dnnl_ctx.h"
#include "eltwise.h" /* ts__expf */
#include "ksum.h"

#define PAR_MIN 16384 /* elements below which kernels stay on one thread */
#define CHUNK TS__SUM_CHUNK /* float partial sums are flushed to double every CHUNK elements */
#define ICH 256       /* inner-axis chunk for softmax over a non-last axis */

/* ---- row helpers (contiguous rows) ---- */

static inline float row_max(const float *x, int64_t n) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
  return m;
}

/* sum_j exp(x_j - m); also stores the exponentials to e if e != NULL. */
static inline double row_sum_exp(const float *x, float m, float *e, int64_t n) {
  double total = 0;
  for (int64_t j0 = 0; j0 < n; j0 += CHUNK) {
    int64_t j1 = j0 + CHUNK < n ? j0 + CHUNK : n;
    float s = 0;
    if (e) {
#pragma omp simd reduction(+ : s)
      for (int64_t j = j0; j < j1; j++) {
        float v = ts__expf(x[j] - m);
        e[j] = v;
        s += v;
      }
    } else {
#pragma omp simd reduction(+ : s)
      for (int64_t j = j0; j < j1; j++) s += ts__expf(x[j] - m);
    }
    total += s;
  }
  return total;
}

static inline double row_dot(const float *a, const float *b, int64_t n) {
  double total = 0;
  for (int64_t j0 = 0; j0 < n; j0 += CHUNK) {
    int64_t j1 = j0 + CHUNK < n ? j0 + CHUNK : n;
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = j0; j < j1; j++) s += a[j] * b[j];
    total += s;
  }
  return total;
}

static int check_dims(const char *what, int64_t outer, int64_t len, int64_t inner) {
  if (outer < 0 || len < 1 || inner < 0)
    return ts_error_set(TS_ESHAPE, "%s: bad dims outer=%lld len=%lld inner=%lld", what,
                        (long long)outer, (long long)len, (long long)inner);
  return TS_OK;
}

// x (outer,len,inner) -> y (outer,len,inner)
int ts__softmax_fwd_ref(const float *x, float *y, int64_t outer, int64_t len, int64_t inner,
                        int log) {
  int rc = check_dims("softmax", outer, len, inner);
  if (rc) return rc;
  int64_t total = outer * len * inner;
  if (inner == 1) {
#pragma omp parallel for schedule(static) if (total > PAR_MIN)
    for (int64_t r = 0; r < outer; r++) {
      const float *xr = x + r * len;
      float *yr = y + r * len;
      float m = row_max(xr, len);
      if (log) {
        float ls = m + logf((float)row_sum_exp(xr, m, NULL, len));
#pragma omp simd
        for (int64_t j = 0; j < len; j++) yr[j] = xr[j] - ls;
      } else {
        float inv = (float)(1.0 / row_sum_exp(xr, m, yr, len));
#pragma omp simd
        for (int64_t j = 0; j < len; j++) yr[j] *= inv;
      }
    }
    return TS_OK;
  }
  /* Softmax over a middle axis: vectorise across the inner dimension. */
  int64_t nch = (inner + ICH - 1) / ICH;
#pragma omp parallel for schedule(static) if (total > PAR_MIN)
  for (int64_t t = 0; t < outer * nch; t++) {
    int64_t o = t / nch, c0 = (t % nch) * ICH;
    int64_t cn = inner - c0 < ICH ? inner - c0 : ICH;
    const float *xb = x + o * len * inner + c0;
    float *yb = y + o * len * inner + c0;
    float m[ICH], s[ICH];
    for (int64_t c = 0; c < cn; c++) {
      m[c] = -INFINITY;
      s[c] = 0;
    }
    for (int64_t j = 0; j < len; j++) {
      const float *xj = xb + j * inner;
#pragma omp simd
      for (int64_t c = 0; c < cn; c++) m[c] = xj[c] > m[c] ? xj[c] : m[c];
    }
    for (int64_t j = 0; j < len; j++) {
      const float *xj = xb + j * inner;
      float *yj = yb + j * inner;
      if (log) {
#pragma omp simd
        for (int64_t c = 0; c < cn; c++) s[c] += ts__expf(xj[c] - m[c]);
      } else {
#pragma omp simd
        for (int64_t c = 0; c < cn; c++) {
          float e = ts__expf(xj[c] - m[c]);
          yj[c] = e;
          s[c] += e;
        }
      }
    }
    for (int64_t c = 0; c < cn; c++) s[c] = log ? m[c] + logf(s[c]) : 1.0f / s[c];
    for (int64_t j = 0; j < len; j++) {
      const float *xj = xb + j * inner;
      float *yj = yb + j * inner;
      if (log) {
#pragma omp simd
        for (int64_t c = 0; c < cn; c++) yj[c] = xj[c] - s[c];
      } else {
#pragma omp simd
        for (int64_t c = 0; c < cn; c++) yj[c] *= s[c];
      }
    }
  }
  return TS_OK;
}

// dy, y (outer,len,inner) -> dx (outer,len,inner)
int ts__softmax_bwd_ref(const float *dy, const float *y, float *dx, int64_t outer, int64_t len,
                        int64_t inner, int log) {
  int rc = check_dims("softmax_bwd", outer, len, inner);
  if (rc) return rc;
  int64_t total = outer * len * inner;
  if (inner == 1) {
#pragma omp parallel for schedule(static) if (total > PAR_MIN)
    for (int64_t r = 0; r < outer; r++) {
      const float *g = dy + r * len, *yr = y + r * len;
      float *d = dx + r * len;
      if (log) {
        float s = (float)ts__sum_run(g, len);
#pragma omp simd
        for (int64_t j = 0; j < len; j++) d[j] = g[j] - ts__expf(yr[j]) * s;
      } else {
        float s = (float)row_dot(g, yr, len);
#pragma omp simd
        for (int64_t j = 0; j < len; j++) d[j] = yr[j] * (g[j] - s);
      }
    }
    return TS_OK;
  }
  int64_t nch = (inner + ICH - 1) / ICH;
#pragma omp parallel for schedule(static) if (total > PAR_MIN)
  for (int64_t t = 0; t < outer * nch; t++) {
    int64_t o = t / nch, c0 = (t % nch) * ICH;
    int64_t cn = inner - c0 < ICH ? inner - c0 : ICH;
    int64_t base = o * len * inner + c0;
    float s[ICH];
    for (int64_t c = 0; c < cn; c++) s[c] = 0;
    for (int64_t j = 0; j < len; j++) {
      const float *g = dy + base + j * inner, *yj = y + base + j * inner;
      if (log) {
#pragma omp simd
        for (int64_t c = 0; c < cn; c++) s[c] += g[c];
      } else {
#pragma omp simd
        for (int64_t c = 0; c < cn; c++) s[c] += g[c] * yj[c];
      }
    }
    for (int64_t j = 0; j < len; j++) {
      const float *g = dy + base + j * inner, *yj = y + base + j * inner;
      float *d = dx + base + j * inner;
      if (log) {
#pragma omp simd
        for (int64_t c = 0; c < cn; c++) d[c] = g[c] - ts__expf(yj[c]) * s[c];
      } else {
#pragma omp simd
        for (int64_t c = 0; c < cn; c++) d[c] = yj[c] * (g[c] - s[c]);
      }
    }
  }
  return TS_OK;
}

/* ---------------- fused sparse cross-entropy ---------------- */

static inline int64_t label_at(const void *labels, int i64, int64_t i) {
  return i64 ? ((const int64_t *)labels)[i] : (int64_t)((const int32_t *)labels)[i];
}

/* Counts non-ignored labels and validates the others; returns TS_OK or TS_ERANGE. */
static int ce_count(const void *labels, int i64, int64_t N, int64_t C, int64_t ignore,
                    int64_t *count, const char *what) {
  int64_t cnt = 0, bad = -1;
  for (int64_t i = 0; i < N; i++) {
    int64_t l = label_at(labels, i64, i);
    if (l == ignore) continue;
    if (l < 0 || l >= C) {
      if (bad < 0) bad = i;
      continue;
    }
    cnt++;
  }
  if (bad >= 0)
    return ts_error_set(TS_ERANGE, "%s: label %lld at row %lld is outside [0,%lld) (and not the ignore index %lld)",
                        what, (long long)label_at(labels, i64, bad), (long long)bad, (long long)C,
                        (long long)ignore);
  *count = cnt;
  return TS_OK;
}

#define MAX_THREADS 256

/* Rows of 16-bit logits (bf16, f16) are widened into a per-thread f32 row buffer and go through
 * the same f32 row code; 16-bit dlogits rows are computed in f32 and rounded once. f32 rows are
 * used in place. */
static const float *row_in(const void *x, ts_dtype dt, int64_t i, int64_t C, float *buf) {
  if (dt == TS_F32) return (const float *)x + i * C;
  ts__lp_widen((const char *)x + (size_t)(i * C) * ts_dtype_size(dt), dt, buf, C);
  return buf;
}

/* a per-thread row buffer of n floats for 16-bit dt (NULL for f32, which needs none); *oom set
 * when it cannot be allocated */
static float *row_buf(ts_dtype dt, int64_t n, int *oom) {
  if (dt == TS_F32) return NULL;
  float *b = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  if (!b) {
#pragma omp atomic write
    *oom = 1;
  }
  return b;
}
#define ROW_OK(dt, buf) ((dt) == TS_F32 || (buf) != NULL)

static int lp_oom(const char *what, int64_t C) {
  return ts_error_set(TS_ENOMEM, "%s (16-bit): out of memory for a row of %lld logits", what, (long long)C);
}

// logits (N,C) dt, labels (N) -> loss (), lse (N)
static int ce_fwd(ts_dtype dt, const void *logits, const void *labels, int labels_i64, int64_t N, int64_t C,
                  float smoothing, int64_t ignore_index, float *loss, float *lse) {
  if (N < 0 || C < 1)
    return ts_error_set(TS_ESHAPE, "softmax_ce: bad dims N=%lld C=%lld", (long long)N, (long long)C);
  int64_t count = 0;
  int rc = ce_count(labels, labels_i64, N, C, ignore_index, &count, "softmax_ce");
  if (rc) return rc;
  double part[MAX_THREADS];
  int nt = 1, oom = 0;
  const double s = smoothing;
#pragma omp parallel if (N * C > PAR_MIN)
  {
    int t = omp_get_thread_num();
#pragma omp single
    nt = omp_get_num_threads() < MAX_THREADS ? omp_get_num_threads() : MAX_THREADS;
    float *buf = row_buf(dt, C, &oom);
    double acc = 0;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < N; i++) {
      int64_t l = label_at(labels, labels_i64, i);
      if (l == ignore_index) {
        if (lse) lse[i] = 0;
        continue;
      }
      if (!ROW_OK(dt, buf)) continue;
      const float *x = row_in(logits, dt, i, C, buf);
      float m = row_max(x, C);
      double ls = (double)m + log(row_sum_exp(x, m, NULL, C));
      if (lse) lse[i] = (float)ls;
      double li = (1.0 - s) * (ls - x[l]);
      if (s != 0) li += s * (ls - ts__sum_run(x, C) / (double)C);
      acc += li;
    }
    if (t < MAX_THREADS) part[t] = acc;
    free(buf);
  }
  if (oom) return lp_oom("softmax_ce", C);
  double total = 0;
  for (int t = 0; t < nt; t++) total += part[t];
  *loss = count ? (float)(total / (double)count) : 0.0f;
  return TS_OK;
}

// logits (N,C), labels (N) -> loss (), lse (N)
int ts__softmax_ce_fwd_ref(const float *logits, const void *labels, int labels_i64, int64_t N,
                           int64_t C, float smoothing, int64_t ignore_index, float *loss,
                           float *lse) {
  return ce_fwd(TS_F32, logits, labels, labels_i64, N, C, smoothing, ignore_index, loss, lse);
}

#define CE_CHUNK 512 /* classes per chunk of a 16-bit backward row (2 x 2 KiB of f32 in L1) */

/* The backward on columns [offset, offset+Cl) of (N,C) logits (Cl == C, offset 0: unsharded). */
static int ce_bwd(ts_dtype dt, float dloss, const void *logits, const void *labels, int labels_i64,
                  const float *lse, int64_t N, int64_t Cl, int64_t C, int64_t offset,
                  float smoothing, int64_t ignore_index, void *dlogits, const char *what) {
  if (N < 0 || C < 1 || Cl < 1 || offset < 0 || offset + Cl > C)
    return ts_error_set(TS_ESHAPE, "%s: bad dims N=%lld C=%lld (block of %lld at %lld)", what,
                        (long long)N, (long long)C, (long long)Cl, (long long)offset);
  int64_t count = 0;
  int rc = ce_count(labels, labels_i64, N, C, ignore_index, &count, what);
  if (rc) return rc;
  const float g = count ? dloss / (float)count : 0.0f;
  const float gs = g * smoothing / (float)C, gt = g * (1.0f - smoothing);
  const size_t es = ts_dtype_size(dt);
  int oom = 0;
#pragma omp parallel if (N * Cl > PAR_MIN)
  {
    float *buf = row_buf(dt, 2 * Cl, &oom);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < N; i++) {
      int64_t l = label_at(labels, labels_i64, i);
      void *drow = (char *)dlogits + (size_t)(i * Cl) * es;
      if (l == ignore_index || g == 0.0f) {
        memset(drow, 0, es * (size_t)Cl);
        continue;
      }
      if (!ROW_OK(dt, buf)) continue;
      if (dt != TS_F32 && lse) {
        /* 16-bit with the forward's lse: the row in chunks of CE_CHUNK, widened, computed and
         * rounded while in L1 (the same f32 expression as below, so the same bits); a whole
         * widened row and its f32 gradient (8 bytes per class, 64 KiB at 8192 classes) would
         * stream through L2 three times */
        const float ls = lse[i];
        const char *xrow = (const char *)logits + (size_t)(i * Cl) * es;
        for (int64_t j0 = 0; j0 < Cl; j0 += CE_CHUNK) {
          const int64_t n = Cl - j0 < CE_CHUNK ? Cl - j0 : CE_CHUNK;
          float *x = buf, *d = buf + n; /* n <= Cl: within the 2 Cl floats of buf */
          ts__lp_widen(xrow + (size_t)j0 * es, dt, x, n);
#pragma omp simd
          for (int64_t j = 0; j < n; j++) d[j] = g * ts__expf(x[j] - ls) - gs;
          if (l >= offset + j0 && l < offset + j0 + n) d[l - offset - j0] -= gt;
          ts__lp_narrow(d, (char *)drow + (size_t)j0 * es, dt, n);
        }
        continue;
      }
      const float *x = row_in(logits, dt, i, Cl, buf);
      float *d = dt == TS_F32 ? drow : buf + Cl;
      float ls;
      if (lse) {
        ls = lse[i];
      } else {
        float m = row_max(x, Cl);
        ls = (float)((double)m + log(row_sum_exp(x, m, NULL, Cl)));
      }
#pragma omp simd
      for (int64_t j = 0; j < Cl; j++) d[j] = g * ts__expf(x[j] - ls) - gs;
      if (l >= offset && l < offset + Cl) d[l - offset] -= gt;
      if (dt != TS_F32) ts__lp_narrow(d, drow, dt, Cl);
    }
    free(buf);
  }
  if (oom) return lp_oom(what, Cl);
  return TS_OK;
}

// dloss (), logits (N,C), labels (N), lse (N) or NULL -> dlogits (N,C)
int ts__softmax_ce_bwd_ref(float dloss, const float *logits, const void *labels, int labels_i64,
                           const float *lse, int64_t N, int64_t C, float smoothing,
                           int64_t ignore_index, float *dlogits) {
  return ce_bwd(TS_F32, dloss, logits, labels, labels_i64, lse, N, C, C, 0, smoothing, ignore_index,
                dlogits, "softmax_ce_bwd");
}

/* ---------------- class-sharded cross-entropy (the caller reduces between the steps) ---------------- */

// logits (N,Cl) dt, labels (N) -> rowmax (N)
static int ce_shard_max(ts_dtype dt, const void *logits, const void *labels, int labels_i64, int64_t N, int64_t Cl,
                        int64_t C, int64_t ignore_index, float *rowmax) {
  if (N < 0 || Cl < 1 || C < Cl)
    return ts_error_set(TS_ESHAPE, "softmax_ce (sharded): bad dims N=%lld C=%lld block %lld",
                        (long long)N, (long long)C, (long long)Cl);
  int64_t count = 0;
  int rc = ce_count(labels, labels_i64, N, C, ignore_index, &count, "softmax_ce");
  if (rc) return rc;
  int oom = 0;
#pragma omp parallel if (N * Cl > PAR_MIN)
  {
    float *buf = row_buf(dt, Cl, &oom);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < N; i++)
      if (ROW_OK(dt, buf))
        rowmax[i] = label_at(labels, labels_i64, i) == ignore_index ? 0.0f : row_max(row_in(logits, dt, i, Cl, buf), Cl);
    free(buf);
  }
  return oom ? lp_oom("softmax_ce", Cl) : TS_OK;
}

// logits (N,Cl), labels (N) -> rowmax (N)
int ts__softmax_ce_shard_max_ref(const float *logits, const void *labels, int labels_i64, int64_t N,
                                 int64_t Cl, int64_t C, int64_t ignore_index, float *rowmax) {
  return ce_shard_max(TS_F32, logits, labels, labels_i64, N, Cl, C, ignore_index, rowmax);
}

// logits (N,Cl) dt, labels (N), M (N) -> stats (N,3)
static int ce_shard_stats(ts_dtype dt, const void *logits, const void *labels, int labels_i64, int64_t N, int64_t Cl,
                          int64_t offset, int64_t ignore_index, const float *M, float *stats) {
  if (N < 0 || Cl < 1 || offset < 0)
    return ts_error_set(TS_ESHAPE, "softmax_ce (sharded): bad dims N=%lld block %lld at %lld",
                        (long long)N, (long long)Cl, (long long)offset);
  int oom = 0;
#pragma omp parallel if (N * Cl > PAR_MIN)
  {
    float *buf = row_buf(dt, Cl, &oom);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < N; i++) {
      const int64_t l = label_at(labels, labels_i64, i);
      float *st = stats + 3 * i;
      if (l == ignore_index) {
        st[0] = st[1] = st[2] = 0.0f;
        continue;
      }
      if (!ROW_OK(dt, buf)) continue;
      const float *x = row_in(logits, dt, i, Cl, buf);
      st[0] = (float)row_sum_exp(x, M[i], NULL, Cl);
      st[1] = l >= offset && l < offset + Cl ? x[l - offset] : 0.0f;
      st[2] = (float)ts__sum_run(x, Cl);
    }
    free(buf);
  }
  return oom ? lp_oom("softmax_ce", Cl) : TS_OK;
}

// logits (N,Cl), labels (N), M (N) -> stats (N,3)
int ts__softmax_ce_shard_stats_ref(const float *logits, const void *labels, int labels_i64,
                                   int64_t N, int64_t Cl, int64_t offset, int64_t ignore_index,
                                   const float *M, float *stats) {
  return ce_shard_stats(TS_F32, logits, labels, labels_i64, N, Cl, offset, ignore_index, M, stats);
}

// labels (N), M (N), stats (N,3) -> loss (), lse (N)
int ts__softmax_ce_shard_loss_ref(const void *labels, int labels_i64, int64_t N, int64_t C,
                                  float smoothing, int64_t ignore_index, const float *M,
                                  const float *stats, float *loss, float *lse) {
  if (N < 0 || C < 1)
    return ts_error_set(TS_ESHAPE, "softmax_ce (sharded): bad dims N=%lld C=%lld", (long long)N,
                        (long long)C);
  const double s = smoothing;
  double total = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < N; i++) { /* sequential: the same loss on every rank */
    const float *st = stats + 3 * i;
    if (label_at(labels, labels_i64, i) == ignore_index) {
      lse[i] = 0;
      continue;
    }
    const double ls = (double)M[i] + log((double)st[0]);
    lse[i] = (float)ls;
    double li = (1.0 - s) * (ls - st[1]);
    if (s != 0) li += s * (ls - (double)st[2] / (double)C);
    total += li;
    count++;
  }
  *loss = count ? (float)(total / (double)count) : 0.0f;
  return TS_OK;
}

// dloss (), logits (N,Cl), labels (N), lse (N) -> dlogits (N,Cl)
int ts__softmax_ce_shard_bwd_ref(float dloss, const float *logits, const void *labels,
                                 int labels_i64, const float *lse, int64_t N, int64_t Cl, int64_t C,
                                 int64_t offset, float smoothing, int64_t ignore_index,
                                 float *dlogits) {
  if (!lse)
    return ts_error_set(TS_EINVAL, "softmax_ce_bwd (sharded): needs the forward's global lse");
  return ce_bwd(TS_F32, dloss, logits, labels, labels_i64, lse, N, Cl, C, offset, smoothing, ignore_index,
                dlogits, "softmax_ce_bwd");
}


/* ---------------- cross-entropy on 16-bit logits ---------------- */

static int ce_dtype(ts_dtype dt, const char *what) {
  if (dt == TS_F32 || dt == TS_BF16 || dt == TS_F16) return TS_OK;
  return ts_error_set(TS_EDTYPE, "%s: logits must be f32, bf16 or f16, got %s", what, ts_dtype_name(dt));
}

int ts__softmax_ce_fwd_lp(ts_dtype dt, const void *logits, const void *labels, int labels_i64, int64_t N, int64_t C,
                          float smoothing, int64_t ignore_index, float *loss, float *lse) {
  int rc = ce_dtype(dt, "softmax_ce");
  return rc ? rc : ce_fwd(dt, logits, labels, labels_i64, N, C, smoothing, ignore_index, loss, lse);
}

int ts__softmax_ce_bwd_lp(ts_dtype dt, float dloss, const void *logits, const void *labels, int labels_i64,
                          const float *lse, int64_t N, int64_t C, float smoothing, int64_t ignore_index,
                          void *dlogits) {
  int rc = ce_dtype(dt, "softmax_ce_bwd");
  return rc ? rc : ce_bwd(dt, dloss, logits, labels, labels_i64, lse, N, C, C, 0, smoothing, ignore_index, dlogits,
                          "softmax_ce_bwd");
}

int ts__softmax_ce_shard_max_lp(ts_dtype dt, const void *logits, const void *labels, int labels_i64, int64_t N,
                                int64_t Cl, int64_t C, int64_t ignore_index, float *rowmax) {
  int rc = ce_dtype(dt, "softmax_ce");
  return rc ? rc : ce_shard_max(dt, logits, labels, labels_i64, N, Cl, C, ignore_index, rowmax);
}

int ts__softmax_ce_shard_stats_lp(ts_dtype dt, const void *logits, const void *labels, int labels_i64, int64_t N,
                                  int64_t Cl, int64_t offset, int64_t ignore_index, const float *M, float *stats) {
  int rc = ce_dtype(dt, "softmax_ce");
  return rc ? rc : ce_shard_stats(dt, logits, labels, labels_i64, N, Cl, offset, ignore_index, M, stats);
}

int ts__softmax_ce_shard_bwd_lp(ts_dtype dt, float dloss, const void *logits, const void *labels, int labels_i64,
                                const float *lse, int64_t N, int64_t Cl, int64_t C, int64_t offset, float smoothing,
                                int64_t ignore_index, void *dlogits) {
  int rc = ce_dtype(dt, "softmax_ce_bwd");
  if (!rc && !lse) rc = ts_error_set(TS_EINVAL, "softmax_ce_bwd (sharded): needs the forward's global lse");
  return rc ? rc : ce_bwd(dt, dloss, logits, labels, labels_i64, lse, N, Cl, C, offset, smoothing, ignore_index,
                          dlogits, "softmax_ce_bwd");
}

/* ---------------- oneDNN softmax_v2 ---------------- */

typedef struct {
  int kind, log;
  int64_t outer, len, inner;
  int32_t dt, pad_; /* dnnl data type */
} sm_key;

static ts__dnnl_prim *sm_prim(int kind, int log, int64_t outer, int64_t len, int64_t inner,
                              dnnl_data_type_t dt) {
  sm_key key;
  memset(&key, 0, sizeof key);
  key.dt = (int32_t)dt;
  key.kind = kind;
  key.log = log;
  key.outer = outer;
  key.len = len;
  key.inner = inner;
  ts__dnnl_prim *p = ts__dnnl_cache_get(&key, sizeof key);
  if (p) return p;
  dnnl_memory_desc_t md;
  int64_t dims[3] = {outer, len, inner};
  if (ts__dnnl_md_plain(&md, 3, dims, dt)) return NULL;
  dnnl_alg_kind_t alg = log ? dnnl_softmax_log : dnnl_softmax_accurate;
  dnnl_softmax_v2_desc_t fd, bd;
  dnnl_primitive_desc_t fpd = NULL, pd = NULL;
  if (ts__dnnl_check(dnnl_softmax_v2_forward_desc_init(&fd, dnnl_forward_training, alg, &md, &md, 1),
                     "softmax forward descriptor") ||
      ts__dnnl_check(dnnl_primitive_desc_create(&fpd, &fd, NULL, ts__dnnl_engine(), NULL),
                     "softmax forward primitive descriptor"))
    return NULL;
  if (kind == 0) return ts__dnnl_cache_put_pd(&key, sizeof key, fpd);
  int rc = ts__dnnl_check(dnnl_softmax_v2_backward_desc_init(&bd, alg, &md, &md, &md, 1),
                          "softmax backward descriptor");
  if (!rc)
    rc = ts__dnnl_check(dnnl_primitive_desc_create(&pd, &bd, NULL, ts__dnnl_engine(), fpd),
                        "softmax backward primitive descriptor");
  dnnl_primitive_desc_destroy(fpd);
  if (rc) return NULL;
  return ts__dnnl_cache_put_pd(&key, sizeof key, pd);
}

// x (outer,len,inner) -> y (outer,len,inner)
int ts__softmax_fwd_dnnl(const float *x, float *y, int64_t outer, int64_t len, int64_t inner,
                         int log) {
  int rc = check_dims("softmax", outer, len, inner);
  if (rc) return rc;
  if (outer == 0 || inner == 0) return TS_OK;
  ts__dnnl_prim *p = sm_prim(0, log, outer, len, inner, dnnl_f32);
  if (!p) return ts_error_wrap(TS_EBACKEND, "softmax forward");
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(p->pd, dnnl_query_src_md, 0);
  dnnl_exec_arg_t args[2] = {{DNNL_ARG_SRC, ts__dnnl_mem(md, (void *)x)},
                             {DNNL_ARG_DST, ts__dnnl_mem(md, y)}};
  return ts__dnnl_run(p, 2, args, "softmax forward");
}

// dy, y (outer,len,inner) -> dx (outer,len,inner)
int ts__softmax_bwd_dnnl(const float *dy, const float *y, float *dx, int64_t outer, int64_t len,
                         int64_t inner, int log) {
  int rc = check_dims("softmax_bwd", outer, len, inner);
  if (rc) return rc;
  if (outer == 0 || inner == 0) return TS_OK;
  ts__dnnl_prim *p = sm_prim(1, log, outer, len, inner, dnnl_f32);
  if (!p) return ts_error_wrap(TS_EBACKEND, "softmax backward");
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(p->pd, dnnl_query_diff_src_md, 0);
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_DST, ts__dnnl_mem(md, (void *)y)},
                             {DNNL_ARG_DIFF_DST, ts__dnnl_mem(md, (void *)dy)},
                             {DNNL_ARG_DIFF_SRC, ts__dnnl_mem(md, dx)}};
  return ts__dnnl_run(p, 3, args, "softmax backward");
}

/* ---------------- 16-bit (bf16, f16) ---------------- */

/* bf16 on the fast path along the last axis: oneDNN softmax_v2 on bf16 memory (f32 inside). */
static int softmax_bf16_dnnl(int bwd, const void *a, const void *b, void *out, int64_t outer,
                             int64_t len, int log) {
  ts__dnnl_prim *p = sm_prim(bwd, log, outer, len, 1, dnnl_bf16);
  if (!p) return ts_error_wrap(TS_EBACKEND, "softmax (bf16)");
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(p->pd, bwd ? dnnl_query_diff_src_md : dnnl_query_src_md, 0);
  if (!bwd) {
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_SRC, ts__dnnl_mem(md, (void *)a)}, {DNNL_ARG_DST, ts__dnnl_mem(md, out)}};
    return ts__dnnl_run(p, 2, args, "softmax forward (bf16)");
  }
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_DST, ts__dnnl_mem(md, (void *)b)},
                             {DNNL_ARG_DIFF_DST, ts__dnnl_mem(md, (void *)a)},
                             {DNNL_ARG_DIFF_SRC, ts__dnnl_mem(md, out)}};
  return ts__dnnl_run(p, 3, args, "softmax backward (bf16)");
}

/* Rows along the last axis (inner == 1): each row is widened into a per-thread f32 buffer, run
 * through the f32 row kernel and rounded back once (16-bit traffic). Another axis: f32 copies. */
static int softmax_lp(int bwd, ts_dtype dt, const void *a, const void *b, void *out, int64_t outer,
                      int64_t len, int64_t inner, int log, int dnnl) {
  const char *what = bwd ? "softmax_bwd (16-bit)" : "softmax (16-bit)";
  if (outer < 0 || len < 1 || inner < 1)
    return ts_error_set(TS_ESHAPE, "%s: bad dims outer=%lld len=%lld inner=%lld", what, (long long)outer,
                        (long long)len, (long long)inner);
  if (dnnl && dt == TS_BF16 && ts__dnnl_bf16() && inner == 1 && outer > 0) return softmax_bf16_dnnl(bwd, a, b, out, outer, len, log);
  const size_t es = ts_dtype_size(dt);
  if (inner != 1) {
    const int64_t n = outer * len * inner;
    float *fa = ts__lp_in(a, dt, n, what), *fb = fa && bwd ? ts__lp_in(b, dt, n, what) : NULL;
    float *fo = fa && (!bwd || fb) ? ts__lp_in(NULL, dt, n, what) : NULL;
    int rc = !fo ? TS_ENOMEM
             : bwd ? ts__softmax_bwd_ref(fa, fb, fo, outer, len, inner, log)
                   : ts__softmax_fwd_ref(fa, fo, outer, len, inner, log);
    if (rc == TS_OK) ts__lp_from_f32(fo, out, dt, n);
    ts_free(fa), ts_free(fb), ts_free(fo);
    return rc;
  }
  int oom = 0, code = TS_OK;
#pragma omp parallel if (outer * len > 16384)
  {
    float *buf = malloc((size_t)(3 * len) * sizeof(float));
    if (!buf) {
#pragma omp atomic write
      oom = 1;
    }
#pragma omp for schedule(static)
    for (int64_t r = 0; r < outer; r++) {
      if (!buf) continue;
      float *fa = buf, *fb = buf + len, *fo = buf + 2 * len;
      ts__lp_widen((const char *)a + (size_t)(r * len) * es, dt, fa, len);
      if (bwd) ts__lp_widen((const char *)b + (size_t)(r * len) * es, dt, fb, len);
      const int rc = bwd ? ts__softmax_bwd_ref(fa, fb, fo, 1, len, 1, log) : ts__softmax_fwd_ref(fa, fo, 1, len, 1, log);
      if (rc) {
#pragma omp atomic write
        code = rc;
      }
      ts__lp_narrow(fo, (char *)out + (size_t)(r * len) * es, dt, len);
    }
    free(buf);
  }
  if (oom) return ts_error_set(TS_ENOMEM, "%s: out of memory for row buffers", what);
  if (code) return ts_error_set(code, "%s: a row failed (status %d)", what, code);
  return TS_OK;
}

// x (outer,len,inner) dt -> y dt
int ts__softmax_fwd_lp(ts_dtype dt, const void *x, void *y, int64_t outer, int64_t len, int64_t inner,
                       int log, int dnnl) {
  return softmax_lp(0, dt, x, NULL, y, outer, len, inner, log, dnnl);
}

// dy, y (outer,len,inner) dt -> dx dt
int ts__softmax_bwd_lp(ts_dtype dt, const void *dy, const void *y, void *dx, int64_t outer,
                       int64_t len, int64_t inner, int log, int dnnl) {
  return softmax_lp(1, dt, dy, y, dx, outer, len, inner, log, dnnl);
}

/* ---- evaluation's metrics ---- */
/* one row: 0 when a logit is not finite, else 1 with nll = logsumexp(z) - z[lab] and above */
static int eval_row(const float *z, int64_t C, int64_t lab, double *nll, int64_t *above) {
  int finite = 1;
  for (int64_t k = 0; k < C; k++) finite &= isfinite(z[k]) != 0;
  if (!finite) return 0;
  double m = z[0];
  for (int64_t k = 1; k < C; k++) m = z[k] > m ? z[k] : m;
  double s = 0;
  int64_t a = 0;
  for (int64_t k = 0; k < C; k++) {
    s += exp((double)z[k] - m);
    a += z[k] > z[lab];
  }
  *nll = m + log(s) - z[lab];
  *above = a;
  return 1;
}

void ts__eval_rows_ref(const float *logits, const int32_t *labels, int64_t N, int64_t C, ts__eval_row *rows) {
  /* a GPT-2 batch is 8192 rows of 50257 logits: the threads share them */
#pragma omp parallel for schedule(static) if (N * C >= 65536)
  for (int64_t r = 0; r < N; r++) {
    double nll = 0;
    int64_t above = 0;
    int fin = eval_row(logits + r * C, C, labels[r], &nll, &above);
    rows[r].nll = fin ? nll : 0;
    rows[r].above = fin ? (int32_t)above : 0;
    rows[r].finite = fin;
  }
}

void ts__eval_rows_finish(const float *st, int64_t N, ts__eval_row *rows) {
  for (int64_t r = 0; r < N; r++) {
    const float *q = st + 4 * r;
    const int fin = q[3] >= 0;
    rows[r].nll = fin ? (double)q[0] + log((double)q[1]) - (double)q[2] : 0;
    rows[r].above = fin ? (int32_t)q[3] : 0;
    rows[r].finite = fin;
  }
}
