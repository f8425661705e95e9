/* Reductions over any set of axes (reference engine and oneDNN reduction), broadcast_to and the
 * backward of max.
 *
 * The reference engine collapses x into alternating groups of kept and reduced dims. If the
 * innermost group is reduced, each output sums contiguous runs (vectorised, float partials
 * flushed to double); if it is kept, each output row accumulates whole contiguous vectors in a
 * double buffer. Work is split over outputs, or over the reduced space when there are too few
 * outputs, with partial results combined in a fixed order (deterministic).
 *
 * 16-bit x (bf16, f16) runs through the same engine: each contiguous piece it reads (a run of
 * at most TS__SUM_CHUNK elements, or a kept-inner vector of at most KCH) is widened into an
 * L1-sized f32 buffer and handed to the same f32 helpers, and outputs are rounded once, so the
 * results are the f32 engine's on the widened values, rounded (memory sees 16-bit traffic). */
#include "reduce.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "binary.h"
#include "dnnl_ctx.h"
#include "ksum.h"
#include "lowp.h"

#define PAR_MIN 32768 /* elements below which kernels stay on one thread */
#define CHUNK TS__SUM_CHUNK /* float partial sums are flushed to double every CHUNK elements */
#define KCH 512       /* output vector chunk in the kept-inner case */
#define SEG_MIN 8192  /* minimum elements per task when splitting the reduced space */

typedef struct {
  int nk, nr;                           /* kept / reduced groups other than the innermost */
  int64_t kd[TS_MAX_DIMS], ks[TS_MAX_DIMS];
  int64_t rd[TS_MAX_DIMS], rs[TS_MAX_DIMS];
  int inner_red;                        /* innermost group reduced? */
  int64_t L;                            /* innermost group length (stride 1) */
  int64_t O, R;                         /* outputs, reduced elements per output */
} rplan;

static int plan(const ts_shape *xs, const ts_shape *ys, rplan *p, const char *what) {
  char s1[96], s2[96];
  if (ys->ndim > xs->ndim) goto bad;
  int64_t gd[TS_MAX_DIMS];
  int gf[TS_MAX_DIMS], m = 0;
  for (int d = 0; d < xs->ndim; d++) {
    int yd_i = d - (xs->ndim - ys->ndim);
    int64_t xd = xs->dims[d], yd = yd_i >= 0 ? ys->dims[yd_i] : 1;
    if (yd != xd && yd != 1) goto bad;
    if (xd == 1) continue;
    int f = yd == 1;
    if (m > 0 && gf[m - 1] == f) {
      gd[m - 1] *= xd;
    } else {
      gd[m] = xd;
      gf[m] = f;
      m++;
    }
  }
  memset(p, 0, sizeof *p);
  if (m == 0) { /* everything is size 1 */
    gd[0] = 1;
    gf[0] = 0;
    m = 1;
  }
  int64_t gs[TS_MAX_DIMS], s = 1;
  for (int i = m - 1; i >= 0; i--) {
    gs[i] = s;
    s *= gd[i];
  }
  p->inner_red = gf[m - 1];
  p->L = gd[m - 1];
  p->O = p->R = 1;
  for (int i = 0; i < m; i++) {
    if (gf[i]) p->R *= gd[i];
    else p->O *= gd[i];
    if (i == m - 1) break;
    if (gf[i]) {
      p->rd[p->nr] = gd[i];
      p->rs[p->nr++] = gs[i];
    } else {
      p->kd[p->nk] = gd[i];
      p->ks[p->nk++] = gs[i];
    }
  }
  return TS_OK;
bad:
  return ts_error_set(TS_ESHAPE, "%s: cannot reduce %s to %s (each dim must match or be 1)", what,
                      ts_shape_str(xs, s1, sizeof s1), ts_shape_str(ys, s2, sizeof s2));
}

/* Offset of linear index idx over groups (d, s); fills the counters. */
static inline int64_t decomp(int64_t idx, int n, const int64_t *d, const int64_t *s, int64_t *cnt) {
  int64_t off = 0;
  for (int i = n - 1; i >= 0; i--) {
    cnt[i] = idx % d[i];
    idx /= d[i];
    off += cnt[i] * s[i];
  }
  return off;
}

static inline int64_t odo_next(int n, const int64_t *d, const int64_t *s, int64_t *cnt, int64_t off) {
  for (int i = n - 1; i >= 0; i--) {
    cnt[i]++;
    off += s[i];
    if (cnt[i] < d[i]) return off;
    off -= s[i] * d[i];
    cnt[i] = 0;
  }
  return off;
}

static inline float run_max(const float *x, int64_t n) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
  return m;
}

/* A run x[0..n) of dtype dt: its max (is_max) or its sum as ts__sum_run sums it. 16-bit runs are
 * widened chunk by chunk; the chunks are ts__sum_run's, so the sum is bitwise the f32 one. */
static double run_reduce(const void *x, ts_dtype dt, int64_t n, int is_max) {
  if (dt == TS_F32) return is_max ? (double)run_max(x, n) : ts__sum_run(x, n);
  float buf[CHUNK], m = -INFINITY;
  double t = 0;
  const size_t es = ts_dtype_size(dt);
  for (int64_t j0 = 0; j0 < n; j0 += CHUNK) {
    const int64_t len = n - j0 < CHUNK ? n - j0 : CHUNK;
    ts__lp_widen((const char *)x + (size_t)j0 * es, dt, buf, len);
    if (is_max) {
      const float c = run_max(buf, len);
      m = c > m ? c : m;
    } else {
      t += ts__sum_run(buf, len);
    }
  }
  return is_max ? (double)m : t;
}

/* Innermost group reduced: reduces elements [e0,e1) of output o's reduced space. */
static double seg_reduce_rinner(const rplan *p, const void *x, ts_dtype dt, int64_t o, int64_t e0, int64_t e1,
                                int is_max) {
  int64_t cnt[TS_MAX_DIMS];
  int64_t base = decomp(o, p->nk, p->kd, p->ks, cnt);
  int64_t L = p->L, j = e0 % L;
  int64_t off = decomp(e0 / L, p->nr, p->rd, p->rs, cnt);
  const size_t es = ts_dtype_size(dt);
  double acc = is_max ? -INFINITY : 0;
  for (int64_t e = e0; e < e1;) {
    int64_t n = L - j < e1 - e ? L - j : e1 - e;
    const double r = run_reduce((const char *)x + (size_t)(base + off + j) * es, dt, n, is_max);
    if (is_max) {
      float m = (float)r;
      acc = m > acc ? m : acc;
    } else {
      acc += r;
    }
    e += n;
    j = 0;
    off = odo_next(p->nr, p->rd, p->rs, cnt, off);
  }
  return acc;
}

/* Innermost group kept: acc[0..cn) = reduction over reduced indices [r0,r1) of the vectors at
 * output row oo, columns c0..c0+cn (cn <= KCH; 16-bit vectors are widened first). */
static void seg_reduce_kinner(const rplan *p, const void *x, ts_dtype dt, int64_t oo, int64_t c0, int64_t cn,
                              int64_t r0, int64_t r1, int is_max, double *acc) {
  int64_t cnt[TS_MAX_DIMS];
  int64_t base = decomp(oo, p->nk, p->kd, p->ks, cnt) + c0;
  int64_t off = decomp(r0, p->nr, p->rd, p->rs, cnt);
  const size_t es = ts_dtype_size(dt);
  float buf[KCH];
  for (int64_t c = 0; c < cn; c++) acc[c] = is_max ? -INFINITY : 0;
  for (int64_t r = r0; r < r1; r++) {
    const float *v = (const float *)x + base + off;
    if (dt == TS_BF16 && !is_max) { /* the sum below, on bf16 values widened in the loop */
      const uint16_t *h = (const uint16_t *)x + base + off;
#pragma omp simd
      for (int64_t c = 0; c < cn; c++) acc[c] += ts__bf2f(h[c]);
      off = odo_next(p->nr, p->rd, p->rs, cnt, off);
      continue;
    }
    if (dt != TS_F32) {
      ts__lp_widen((const char *)x + (size_t)(base + off) * es, dt, buf, cn);
      v = buf;
    }
    if (is_max) {
#pragma omp simd
      for (int64_t c = 0; c < cn; c++) acc[c] = v[c] > acc[c] ? v[c] : acc[c];
    } else {
#pragma omp simd
      for (int64_t c = 0; c < cn; c++) acc[c] += v[c];
    }
    off = odo_next(p->nr, p->rd, p->rs, cnt, off);
  }
}

/* y[i] = v in dtype dt (16-bit: rounded to nearest even) */
static inline void put(void *y, ts_dtype dt, int64_t i, float v) {
  if (dt == TS_F32) ((float *)y)[i] = v;
  else if (dt == TS_BF16) ((uint16_t *)y)[i] = ts__f2bf(v);
  else ((uint16_t *)y)[i] = ts_f32_to_f16(v);
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The engine: x (xs) of dtype xdt -> y (ys, keepdim form) of dtype ydt. */
static int reduce_any(int alg, ts_dtype xdt, const void *x, const ts_shape *xs, ts_dtype ydt, void *y,
                      const ts_shape *ys) {
  if (alg < 0 || alg > 2) return ts_error_set(TS_EINVAL, "reduce: unknown algorithm %d", alg);
  rplan p;
  int rc = plan(xs, ys, &p, "reduce");
  if (rc) return rc;
  const int is_max = alg == 2;
  const double scale = alg == 1 ? 1.0 / (double)p.R : 1.0;
  const int64_t total = p.O * p.R;
  int T = total > PAR_MIN ? omp_get_max_threads() : 1;
  if (p.inner_red) {
    /* parts per output: split the reduced space when there are few outputs */
    int64_t P = p.O >= 2 * T ? 1 : (2 * T + p.O - 1) / p.O;
    P = min64(P, p.R / SEG_MIN > 1 ? p.R / SEG_MIN : 1);
    double *buf = NULL;
    if (P > 1 && !(buf = malloc(sizeof(double) * (size_t)(p.O * P))))
      return ts_error_set(TS_ENOMEM, "reduce: out of memory");
#pragma omp parallel for schedule(static) if (T > 1)
    for (int64_t t = 0; t < p.O * P; t++) {
      int64_t o = t / P, part = t % P;
      double r = seg_reduce_rinner(&p, x, xdt, o, p.R * part / P, p.R * (part + 1) / P, is_max);
      if (P == 1) put(y, ydt, o, (float)(r * scale));
      else buf[t] = r;
    }
    if (P > 1) {
      for (int64_t o = 0; o < p.O; o++) {
        double r = buf[o * P];
        for (int64_t k = 1; k < P; k++) {
          double v = buf[o * P + k];
          if (is_max) r = v > r ? v : r;
          else r += v;
        }
        put(y, ydt, o, (float)(r * scale));
      }
      free(buf);
    }
    return TS_OK;
  }
  /* kept innermost group: outputs are Oo rows of L contiguous values */
  const int64_t L = p.L, Oo = p.O / L, nch = (L + KCH - 1) / KCH, nt = Oo * nch;
  int64_t P = nt >= 2 * T ? 1 : (2 * T + nt - 1) / nt;
  P = min64(P, (p.R * min64(L, KCH)) / SEG_MIN > 1 ? (p.R * min64(L, KCH)) / SEG_MIN : 1);
  P = min64(P, p.R);
  double *buf = NULL;
  if (P > 1 && !(buf = malloc(sizeof(double) * (size_t)(nt * P * KCH))))
    return ts_error_set(TS_ENOMEM, "reduce: out of memory");
#pragma omp parallel for schedule(static) if (T > 1)
  for (int64_t t = 0; t < nt * P; t++) {
    int64_t task = t / P, part = t % P;
    int64_t oo = task / nch, c0 = (task % nch) * KCH, cn = min64(KCH, L - c0);
    double local[KCH];
    double *acc = P > 1 ? buf + t * KCH : local;
    seg_reduce_kinner(&p, x, xdt, oo, c0, cn, p.R * part / P, p.R * (part + 1) / P, is_max, acc);
    if (P == 1)
      for (int64_t c = 0; c < cn; c++) put(y, ydt, oo * L + c0 + c, (float)(acc[c] * scale));
  }
  if (P > 1) {
    for (int64_t task = 0; task < nt; task++) {
      int64_t oo = task / nch, c0 = (task % nch) * KCH, cn = min64(KCH, L - c0);
      double *a0 = buf + task * P * KCH;
      for (int64_t k = 1; k < P; k++) {
        const double *ak = a0 + k * KCH;
        for (int64_t c = 0; c < cn; c++) {
          if (is_max) a0[c] = ak[c] > a0[c] ? ak[c] : a0[c];
          else a0[c] += ak[c];
        }
      }
      for (int64_t c = 0; c < cn; c++) put(y, ydt, oo * L + c0 + c, (float)(a0[c] * scale));
    }
    free(buf);
  }
  return TS_OK;
}

// x (xs) -> y (ys, keepdim form)
int ts__reduce_ref(int alg, const float *x, const ts_shape *xs, float *y, const ts_shape *ys) {
  return reduce_any(alg, TS_F32, x, xs, TS_F32, y, ys);
}

// x (xs) -> y (ys)
int ts__broadcast_ref(const float *x, const ts_shape *xs, float *y, const ts_shape *ys) {
  return ts__binary_ref(TS__BIN_COPY, x, xs, x, xs, y, ys);
}

// dy (ys), x (xs), y (ys) -> dx (xs)
int ts__reduce_max_bwd_ref(const float *dy, const float *x, const ts_shape *xs, const float *y,
                           const ts_shape *ys, float *dx) {
  int rc = ts__binary_ref(TS__BIN_EQ, x, xs, y, ys, dx, xs);
  if (rc) return ts_error_wrap(rc, "reduce_max_bwd");
  int64_t O = ts_shape_numel(ys);
  float *w = malloc(sizeof(float) * (size_t)(O > 0 ? O : 1));
  if (!w) return ts_error_set(TS_ENOMEM, "reduce_max_bwd: out of memory");
  rc = ts__reduce_ref(0, dx, xs, w, ys);
  if (!rc) {
    for (int64_t o = 0; o < O; o++) w[o] = w[o] > 0 ? dy[o] / w[o] : 0.0f;
    rc = ts__binary_ref(2, dx, xs, w, ys, dx, xs);
  }
  free(w);
  return rc;
}

/* ---------------- 16-bit (bf16, f16) ---------------- */

static int lp_dtype(ts_dtype dt, const char *what) {
  if (dt == TS_BF16 || dt == TS_F16) return TS_OK;
  return ts_error_set(TS_EDTYPE, "%s: 16-bit kernel called with %s", what, ts_dtype_name(dt));
}

static inline float get(const void *x, ts_dtype dt, int64_t i) {
  return dt == TS_BF16 ? ts__bf2f(((const uint16_t *)x)[i]) : ts_f16_to_f32(((const uint16_t *)x)[i]);
}

/* Walks a tensor of shape bs row by row against a tensor of shape ss that broadcasts to it
 * (NumPy rules, collapsed as the binary engine collapses them): for every contiguous row of bs,
 * fn(ctx, offset of the row in bs, offset in ss, ss's stride along the row (0 or 1), length). */
typedef void (*walk_fn)(const void *ctx, int64_t boff, int64_t soff, int64_t sst, int64_t n);
static int bcast_walk(const ts_shape *ss, const ts_shape *bs, walk_fn fn, const void *ctx, const char *what) {
  ts__bcast p;
  int rc = ts__bcast_plan(ss, ss, bs, &p);
  if (rc) return ts_error_wrap(rc, "%s", what);
  const int nd = p.nd;
  const int64_t inner = p.dims[nd - 1], sst = p.sa[nd - 1] != 0;
  int64_t total = 1;
  for (int d = 0; d < nd; d++) total *= p.dims[d];
  if (total == 0) return TS_OK;
#pragma omp parallel for schedule(static) if (total > PAR_MIN)
  for (int64_t r = 0; r < total / inner; r++) {
    int64_t q = r, so = 0;
    for (int d = nd - 2; d >= 0; d--) {
      so += (q % p.dims[d]) * p.sa[d];
      q /= p.dims[d];
    }
    fn(ctx, r * inner, so, sst, inner);
  }
  return TS_OK;
}

typedef struct {
  ts_dtype dt;
  const void *a, *b; /* big, small */
  void *out;         /* big */
} walk_ctx;

static void copy_row(const void *c_, int64_t boff, int64_t soff, int64_t sst, int64_t n) {
  const walk_ctx *c = c_;
  const uint16_t *x = (const uint16_t *)c->b + soff;
  uint16_t *y = (uint16_t *)c->out + boff;
  if (sst) {
    memcpy(y, x, sizeof(uint16_t) * (size_t)n);
  } else {
    const uint16_t v = x[0];
    for (int64_t i = 0; i < n; i++) y[i] = v;
  }
}

static void eq_row(const void *c_, int64_t boff, int64_t soff, int64_t sst, int64_t n) { /* out = (a == b) */
  const walk_ctx *c = c_;
  for (int64_t i = 0; i < n; i++)
    put(c->out, c->dt, boff + i, get(c->a, c->dt, boff + i) == get(c->b, c->dt, soff + i * sst) ? 1.0f : 0.0f);
}

static void mul_row(const void *c_, int64_t boff, int64_t soff, int64_t sst, int64_t n) { /* out *= b (f32) */
  const walk_ctx *c = c_;
  const float *w = c->b;
  for (int64_t i = 0; i < n; i++) put(c->out, c->dt, boff + i, get(c->out, c->dt, boff + i) * w[soff + i * sst]);
}

// x (xs) dt -> y (ys, keepdim form) dt
int ts__reduce_lp(int alg, ts_dtype dt, const void *x, const ts_shape *xs, void *y, const ts_shape *ys) {
  if (dt == TS_F32) return ts__reduce_ref(alg, x, xs, y, ys);
  int rc = lp_dtype(dt, "reduce");
  return rc ? rc : reduce_any(alg, dt, x, xs, dt, y, ys);
}

// x (xs) dt -> y (ys) dt
int ts__broadcast_lp(ts_dtype dt, const void *x, const ts_shape *xs, void *y, const ts_shape *ys) {
  if (dt == TS_F32) return ts__broadcast_ref(x, xs, y, ys);
  int rc = lp_dtype(dt, "broadcast_to");
  walk_ctx c = {dt, NULL, x, y};
  return rc ? rc : bcast_walk(xs, ys, copy_row, &c, "broadcast_to (16-bit)");
}

// dy (ys) dt, x (xs) dt, y (ys) dt -> dx (xs) dt
int ts__reduce_max_bwd_lp(ts_dtype dt, const void *dy, const void *x, const ts_shape *xs, const void *y,
                          const ts_shape *ys, void *dx) {
  if (dt == TS_F32) return ts__reduce_max_bwd_ref(dy, x, xs, y, ys, dx);
  int rc = lp_dtype(dt, "reduce_max_bwd");
  if (rc) return rc;
  /* the f32 kernel's steps: tie mask, tie counts (f32), dy / count, times the mask */
  walk_ctx c = {dt, x, y, dx};
  rc = bcast_walk(ys, xs, eq_row, &c, "reduce_max_bwd (16-bit)");
  if (rc) return rc;
  const int64_t O = ts_shape_numel(ys);
  float *w = malloc(sizeof(float) * (size_t)(O > 0 ? O : 1));
  if (!w) return ts_error_set(TS_ENOMEM, "reduce_max_bwd (16-bit): out of memory");
  rc = reduce_any(0, dt, dx, xs, TS_F32, w, ys);
  if (!rc) {
    for (int64_t o = 0; o < O; o++) w[o] = w[o] > 0 ? get(dy, dt, o) / w[o] : 0.0f;
    walk_ctx m = {dt, NULL, w, dx};
    rc = bcast_walk(ys, xs, mul_row, &m, "reduce_max_bwd (16-bit)");
  }
  free(w);
  return rc;
}

/* ---------------- oneDNN ---------------- */

typedef struct {
  int alg, nd;
  int64_t xd[TS_MAX_DIMS], yd[TS_MAX_DIMS];
} red_key;

// x (xs) -> y (ys, keepdim form)
int ts__reduce_dnnl(int alg, const float *x, const ts_shape *xs, float *y, const ts_shape *ys) {
  if (alg < 0 || alg > 2) return ts_error_set(TS_EINVAL, "reduce: unknown algorithm %d", alg);
  rplan p;
  int rc = plan(xs, ys, &p, "reduce");
  if (rc) return rc;
  /* Describe the collapsed problem: kept/reduced groups in their original order. */
  red_key key;
  memset(&key, 0, sizeof key);
  key.alg = alg;
  {
    int64_t gd[TS_MAX_DIMS];
    int gf[TS_MAX_DIMS], m = 0;
    for (int d = 0; d < xs->ndim; d++) {
      int yi = d - (xs->ndim - ys->ndim);
      int64_t xd = xs->dims[d], yd = yi >= 0 ? ys->dims[yi] : 1;
      if (xd == 1) continue;
      int f = yd == 1;
      if (m > 0 && gf[m - 1] == f) gd[m - 1] *= xd;
      else gd[m] = xd, gf[m] = f, m++;
    }
    if (m == 0) gd[0] = 1, gf[0] = 0, m = 1;
    key.nd = m;
    for (int i = 0; i < m; i++) {
      key.xd[i] = gd[i];
      key.yd[i] = gf[i] ? 1 : gd[i];
    }
  }
  if (p.R == 1) { /* nothing to reduce */
    memmove(y, x, sizeof(float) * (size_t)p.O);
    return TS_OK;
  }
  ts__dnnl_prim *pr = ts__dnnl_cache_get(&key, sizeof key);
  if (!pr) {
    static const dnnl_alg_kind_t algs[3] = {dnnl_reduction_sum, dnnl_reduction_mean,
                                            dnnl_reduction_max};
    dnnl_memory_desc_t mx, my;
    dnnl_reduction_desc_t rd;
    dnnl_primitive_desc_t pd = NULL;
    if (ts__dnnl_md_plain(&mx, key.nd, key.xd, dnnl_f32) ||
        ts__dnnl_md_plain(&my, key.nd, key.yd, dnnl_f32) ||
        ts__dnnl_check(dnnl_reduction_desc_init(&rd, algs[alg], &mx, &my, 0.0f, 0.0f),
                       "reduction descriptor") ||
        ts__dnnl_check(dnnl_primitive_desc_create(&pd, &rd, NULL, ts__dnnl_engine(), NULL),
                       "reduction primitive descriptor"))
      return ts_error_wrap(TS_EBACKEND, "reduce");
    pr = ts__dnnl_cache_put_pd(&key, sizeof key, pd);
    if (!pr) return ts_error_wrap(TS_EBACKEND, "reduce");
  }
  const dnnl_memory_desc_t *m0 = dnnl_primitive_desc_query_md(pr->pd, dnnl_query_src_md, 0);
  const dnnl_memory_desc_t *m1 = dnnl_primitive_desc_query_md(pr->pd, dnnl_query_dst_md, 0);
  dnnl_exec_arg_t args[2] = {{DNNL_ARG_SRC, ts__dnnl_mem(m0, (void *)x)},
                             {DNNL_ARG_DST, ts__dnnl_mem(m1, y)}};
  return ts__dnnl_run(pr, 2, args, "reduce");
}
