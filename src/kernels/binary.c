/* Broadcasting binary kernels: reference engine (also used by broadcast_to / reduce_max_bwd)
 * and oneDNN binary primitive. */
#include "binary.h"

#include <omp.h>
#include <string.h>

#include "dnnl_ctx.h"
#include "lowp.h"

#define PAR_MIN 32768 /* elements below which kernels stay on one thread */
#define BCH 16384     /* max elements of the innermost dim handled by one task */

int ts__bcast_plan(const ts_shape *a, const ts_shape *b, const ts_shape *y, ts__bcast *p) {
  char s1[96], s2[96], s3[96];
  const ts_shape *ops[2] = {a, b};
  int64_t st[2][TS_MAX_DIMS];
  if (a->ndim > y->ndim || b->ndim > y->ndim) goto bad;
  for (int k = 0; k < 2; k++) {
    const ts_shape *s = ops[k];
    int64_t stride = 1;
    for (int d = y->ndim - 1; d >= 0; d--) {
      int sd = d - (y->ndim - s->ndim);
      int64_t n = sd >= 0 ? s->dims[sd] : 1;
      if (n != y->dims[d] && n != 1) goto bad;
      st[k][d] = n == 1 ? 0 : stride;
      stride *= n;
    }
  }
  memset(p, 0, sizeof *p);
  /* Drop size-1 output dims, then merge an outer dim into the running inner one when both
   * operands stay linear across the pair. Built from the inside out. */
  int64_t dims[TS_MAX_DIMS], sa[TS_MAX_DIMS], sb[TS_MAX_DIMS];
  int n = 0; /* collapsed dims, innermost first */
  for (int d = y->ndim - 1; d >= 0; d--) {
    if (y->dims[d] == 1) continue;
    if (n > 0 && st[0][d] == sa[n - 1] * dims[n - 1] && st[1][d] == sb[n - 1] * dims[n - 1]) {
      dims[n - 1] *= y->dims[d];
      continue;
    }
    dims[n] = y->dims[d];
    sa[n] = st[0][d];
    sb[n] = st[1][d];
    n++;
  }
  if (n == 0) {
    dims[0] = 1;
    sa[0] = sb[0] = 1;
    n = 1;
  }
  p->nd = n;
  for (int i = 0; i < n; i++) {
    p->dims[i] = dims[n - 1 - i];
    p->sa[i] = sa[n - 1 - i];
    p->sb[i] = sb[n - 1 - i];
  }
  return TS_OK;
bad:
  return ts_error_set(TS_ESHAPE, "binary: %s and %s do not broadcast to %s",
                      ts_shape_str(a, s1, sizeof s1), ts_shape_str(b, s2, sizeof s2),
                      ts_shape_str(y, s3, sizeof s3));
}

/* Innermost loop: n elements; a and b advance by 0 or 1. One specialised loop per case so each
 * vectorises. */
#define INNER_CASES(OP)                                                           \
  if (ia && ib) {                                                                 \
    _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                         \
      float u = a[i], v = b[i];                                                   \
      y[i] = (OP);                                                                \
    }                                                                             \
  } else if (ia) {                                                                \
    const float v = b[0];                                                         \
    _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                         \
      float u = a[i];                                                             \
      y[i] = (OP);                                                                \
    }                                                                             \
  } else if (ib) {                                                                \
    const float u = a[0];                                                         \
    _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                         \
      float v = b[i];                                                             \
      y[i] = (OP);                                                                \
    }                                                                             \
  } else {                                                                        \
    const float u = a[0], v = b[0];                                               \
    const float r = (OP);                                                         \
    for (int64_t i = 0; i < n; i++) y[i] = r;                                     \
  }

static void inner(int alg, const float *a, const float *b, float *y, int64_t n, int ia, int ib) {
  switch (alg) {
    case 0: INNER_CASES(u + v) break;
    case 1: INNER_CASES(u - v) break;
    case 2: INNER_CASES(u * v) break;
    case 3: INNER_CASES(u / v) break;
    case TS__BIN_COPY:
      if (ia) {
        memmove(y, a, sizeof(float) * (size_t)n);
      } else {
        const float u = a[0];
        for (int64_t i = 0; i < n; i++) y[i] = u;
      }
      break;
    case TS__BIN_EQ: INNER_CASES(u == v ? 1.0f : 0.0f) break;
    default: break;
  }
}

static void bcast_run(const ts__bcast *p, int alg, const float *a, const float *b, float *y) {
  const int nd = p->nd;
  const int64_t inner_n = p->dims[nd - 1];
  const int ia = p->sa[nd - 1] != 0, ib = p->sb[nd - 1] != 0;
  int64_t total = 1;
  for (int d = 0; d < nd; d++) total *= p->dims[d];
  if (total == 0) return;
  const int64_t nch = (inner_n + BCH - 1) / BCH, rows = total / inner_n, tasks = rows * nch;
#pragma omp parallel if (total > PAR_MIN)
  {
    int T = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t t0 = tasks * t / T, t1 = tasks * (t + 1) / T;
    if (t0 < t1) {
      int64_t row = t0 / nch, ch = t0 % nch;
      int64_t idx[TS_MAX_DIMS] = {0}, oa = 0, ob = 0, r = row;
      for (int d = nd - 2; d >= 0; d--) {
        idx[d] = r % p->dims[d];
        r /= p->dims[d];
        oa += idx[d] * p->sa[d];
        ob += idx[d] * p->sb[d];
      }
      for (int64_t k = t0; k < t1; k++) {
        int64_t c0 = ch * BCH, c1 = c0 + BCH < inner_n ? c0 + BCH : inner_n;
        inner(alg, a + oa + (ia ? c0 : 0), b + ob + (ib ? c0 : 0), y + row * inner_n + c0, c1 - c0,
              ia, ib);
        if (++ch == nch) {
          ch = 0;
          row++;
          for (int d = nd - 2; d >= 0; d--) {
            idx[d]++;
            oa += p->sa[d];
            ob += p->sb[d];
            if (idx[d] < p->dims[d]) break;
            oa -= p->sa[d] * p->dims[d];
            ob -= p->sb[d] * p->dims[d];
            idx[d] = 0;
          }
        }
      }
    }
  }
}

static int check_alg(int alg) {
  if ((alg >= 0 && alg <= 3) || alg == TS__BIN_COPY || alg == TS__BIN_EQ) return TS_OK;
  return ts_error_set(TS_EINVAL, "binary: unknown algorithm %d", alg);
}

// a (as), b (bs) -> y (ys)
int ts__binary_ref(int alg, const float *a, const ts_shape *as, const float *b,
                   const ts_shape *bs, float *y, const ts_shape *ys) {
  int rc = check_alg(alg);
  if (rc) return rc;
  ts__bcast p;
  if ((rc = ts__bcast_plan(as, bs, ys, &p))) return rc;
  bcast_run(&p, alg, a, b, y);
  return TS_OK;
}

// x (n) -> y (n)
int ts__scale_ref(const float *x, float *y, int64_t n, float alpha, float beta) {
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++) y[i] = alpha * x[i] + beta;
  return TS_OK;
}

/* ---------------- oneDNN ---------------- */

typedef struct {
  int alg, nd;
  int64_t dims[TS_MAX_DIMS], bdims[TS_MAX_DIMS];
} bin_key;

// a (as) == y's shape, b (bs) broadcast -> y (ys)
int ts__binary_dnnl(int alg, const float *a, const ts_shape *as, const float *b,
                    const ts_shape *bs, float *y, const ts_shape *ys) {
  int rc = check_alg(alg);
  if (rc) return rc;
  if (alg > 3) return ts__binary_ref(alg, a, as, b, bs, y, ys);
  if (!ts_shape_equal(as, ys)) {
    if ((alg == 0 || alg == 2) && ts_shape_equal(bs, ys)) {
      const float *t = a;
      const ts_shape *ts = as;
      a = b, as = bs, b = t, bs = ts;
    } else {
      return ts__binary_ref(alg, a, as, b, bs, y, ys);
    }
  }
  ts__bcast p;
  if ((rc = ts__bcast_plan(as, bs, ys, &p))) return rc;
  int64_t total = 1;
  for (int d = 0; d < p.nd; d++) total *= p.dims[d];
  if (total == 0) return TS_OK;
  bin_key key;
  memset(&key, 0, sizeof key);
  key.alg = alg;
  key.nd = p.nd;
  for (int d = 0; d < p.nd; d++) {
    key.dims[d] = p.dims[d];
    key.bdims[d] = p.sb[d] ? p.dims[d] : 1;
  }
  ts__dnnl_prim *pr = ts__dnnl_cache_get(&key, sizeof key);
  if (!pr) {
    static const dnnl_alg_kind_t algs[4] = {dnnl_binary_add, dnnl_binary_sub, dnnl_binary_mul,
                                            dnnl_binary_div};
    dnnl_memory_desc_t md0, md1;
    dnnl_binary_desc_t bd;
    dnnl_primitive_desc_t pd = NULL;
    if (ts__dnnl_md_plain(&md0, p.nd, key.dims, dnnl_f32) ||
        ts__dnnl_md_plain(&md1, p.nd, key.bdims, dnnl_f32) ||
        ts__dnnl_check(dnnl_binary_desc_init(&bd, algs[alg], &md0, &md1, &md0), "binary descriptor") ||
        ts__dnnl_check(dnnl_primitive_desc_create(&pd, &bd, NULL, ts__dnnl_engine(), NULL),
                       "binary primitive descriptor"))
      return ts_error_wrap(TS_EBACKEND, "binary");
    pr = ts__dnnl_cache_put_pd(&key, sizeof key, pd);
    if (!pr) return ts_error_wrap(TS_EBACKEND, "binary");
  }
  const dnnl_memory_desc_t *m0 = dnnl_primitive_desc_query_md(pr->pd, dnnl_query_src_md, 0);
  const dnnl_memory_desc_t *m1 = dnnl_primitive_desc_query_md(pr->pd, dnnl_query_src_md, 1);
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC_0, ts__dnnl_mem(m0, (void *)a)},
                             {DNNL_ARG_SRC_1, ts__dnnl_mem(m1, (void *)b)},
                             {DNNL_ARG_DST, ts__dnnl_mem(m0, y)}};
  return ts__dnnl_run(pr, 3, args, "binary");
}

/* ---------------- 16-bit (bf16, f16) ---------------- */

/* Native loops: read 16-bit, compute in f32, round once, write 16-bit (vectorised). */
#define BF_LOOP(expr)                                                       \
  do {                                                                      \
    _Pragma("omp parallel for simd schedule(static) if (n > PAR_MIN)")      \
    for (int64_t i = 0; i < n; i++) {                                       \
      const float u = ts__bf2f(a[i]), v = ts__bf2f(b[i]);                   \
      y[i] = ts__f2bf(expr);                                                \
    }                                                                       \
  } while (0)
#define H_LOOP(expr)                                                        \
  do {                                                                      \
    _Pragma("omp parallel for schedule(static) if (n > PAR_MIN)")           \
    for (int64_t i = 0; i < n; i++) {                                       \
      const float u = ts_f16_to_f32(a[i]), v = ts_f16_to_f32(b[i]);         \
      y[i] = ts_f32_to_f16(expr);                                           \
    }                                                                       \
  } while (0)

static void bin_same(int alg, ts_dtype dt, const uint16_t *a, const uint16_t *b, uint16_t *y,
                     int64_t n) {
  if (dt == TS_BF16) {
    switch (alg) {
      case 0: BF_LOOP(u + v); break;
      case 1: BF_LOOP(u - v); break;
      case 2: BF_LOOP(u * v); break;
      default: BF_LOOP(u / v); break;
    }
  } else {
    switch (alg) {
      case 0: H_LOOP(u + v); break;
      case 1: H_LOOP(u - v); break;
      case 2: H_LOOP(u * v); break;
      default: H_LOOP(u / v); break;
    }
  }
}

int ts__binary_lp(int alg, ts_dtype dt, const void *a, const ts_shape *as, const void *b,
                  const ts_shape *bs, void *y, const ts_shape *ys) {
  const int64_t n = ts_shape_numel(ys);
  if (ts_shape_numel(as) == n && ts_shape_numel(bs) == n && ts_shape_equal(as, ys) && ts_shape_equal(bs, ys)) {
    ts__bcast bp;
    int rc = ts__bcast_plan(as, bs, ys, &bp);
    if (rc) return rc;
    if (alg < 0 || alg >= 4) return ts_error_set(TS_EINVAL, "binary (16-bit): unknown algorithm %d", alg);
    bin_same(alg, dt, a, b, y, n);
    return TS_OK;
  }
  /* broadcasting: f32 copies around the broadcast engine */
  const char *what = "binary (16-bit, broadcast)";
  float *fa = ts__lp_in(a, dt, ts_shape_numel(as), what);
  float *fb = fa ? ts__lp_in(b, dt, ts_shape_numel(bs), what) : NULL;
  float *fy = fb ? ts__lp_in(NULL, dt, n, what) : NULL;
  int rc = fy ? ts__binary_ref(alg, fa, as, fb, bs, fy, ys) : TS_ENOMEM;
  if (rc == TS_OK) ts__lp_from_f32(fy, y, dt, n);
  ts_free(fa);
  ts_free(fb);
  ts_free(fy);
  return rc;
}

int ts__scale_lp(ts_dtype dt, const void *x, void *y, int64_t n, float alpha, float beta) {
  const uint16_t *a = x;
  uint16_t *o = y;
  if (dt == TS_BF16) {
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) o[i] = ts__f2bf(alpha * ts__bf2f(a[i]) + beta);
  } else {
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) o[i] = ts_f32_to_f16(alpha * ts_f16_to_f32(a[i]) + beta);
  }
  return TS_OK;
}
