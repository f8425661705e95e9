/* Embedding kernels. Forward copies rows in parallel (any element size: f32 and 16-bit alike);
 * backward zeroes the table by rows, then scatter-adds with each thread owning a column range (no
 * atomics, fixed summation order). The 16-bit backward groups the tokens by row first (a stable
 * counting sort) and sums each row's tokens in f32, in token order, writing the row once. The
 * vocabulary-sharded versions (a block of rows at an offset: other ids give zero rows forward and
 * are skipped backward) share the loops. */
#include "embedding.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "lowp.h"

static inline int64_t id_at(const void *ids, ts_dtype idt, int64_t n) {
  return idt == TS_I32 ? (int64_t)((const int32_t *)ids)[n] : ((const int64_t *)ids)[n];
}

/* ids must be in [0,V) (sharded: only >= 0; V < 0 means no upper bound). */
static int check_ids(const void *ids, ts_dtype idt, int64_t N, int64_t V, const char *op) {
  if (idt != TS_I32 && idt != TS_I64)
    return ts_error_set(TS_EDTYPE, "%s: ids must be i32 or i64, got %s", op, ts_dtype_name(idt));
  const int64_t hi = V < 0 ? INT64_MAX : V;
  int64_t bad = -1;
#pragma omp parallel for schedule(static) reduction(max : bad) if (N >= 4096 && !omp_in_parallel())
  for (int64_t n = 0; n < N; n++) {
    int64_t id = id_at(ids, idt, n);
    if (id < 0 || id >= hi) bad = bad > n ? bad : n;
  }
  if (bad >= 0) {
    /* report the first bad position */
    for (int64_t n = 0; n < N; n++) {
      int64_t id = id_at(ids, idt, n);
      if (id >= 0 && id < hi) continue;
      if (V < 0)
        return ts_error_set(TS_ERANGE, "%s: id %lld at position %lld is negative", op, (long long)id,
                            (long long)n);
      return ts_error_set(TS_ERANGE, "%s: id %lld at position %lld is outside the table [0,%lld)",
                          op, (long long)id, (long long)n, (long long)V);
    }
  }
  return TS_OK;
}

/* Rows [offset, offset+V) of the table; other ids give zero rows (only when sharded). */
static int fwd(const void *table, size_t esize, int64_t V, int64_t D, int64_t offset, int sharded,
               const void *ids, ts_dtype idt, int64_t N, void *y) {
  int rc = check_ids(ids, idt, N, sharded ? -1 : V, "embedding");
  if (rc) return rc;
  size_t rb = (size_t)D * esize;
  int par = (size_t)N * rb >= ((size_t)1 << 16) && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
  for (int64_t n = 0; n < N; n++) {
    const int64_t r = id_at(ids, idt, n) - offset;
    if (r >= 0 && r < V)
      memcpy((char *)y + (size_t)n * rb, (const char *)table + (size_t)r * rb, rb);
    else
      memset((char *)y + (size_t)n * rb, 0, rb);
  }
  return TS_OK;
}

int ts__embedding_fwd_ref(const void *table, size_t esize, int64_t V, int64_t D, const void *ids,
                          ts_dtype idt, int64_t N, void *y) {
  return fwd(table, esize, V, D, 0, 0, ids, idt, N, y);
}

int ts__embedding_shard_fwd_ref(const void *table, size_t esize, int64_t Vl, int64_t D,
                                int64_t offset, const void *ids, ts_dtype idt, int64_t N, void *y) {
  if (offset < 0)
    return ts_error_set(TS_EINVAL, "embedding: row offset %lld is negative", (long long)offset);
  return fwd(table, esize, Vl, D, offset, 1, ids, idt, N, y);
}

static int bwd(const float *dy, const void *ids, ts_dtype idt, int64_t N, int64_t V, int64_t D,
               int64_t offset, int sharded, float *dtable) {
  int rc = check_ids(ids, idt, N, sharded ? -1 : V, "embedding_bwd");
  if (rc) return rc;
  int nthr = omp_in_parallel() ? 1 : omp_get_max_threads();
  /* column ranges of at least 16 floats (one cache line) */
  int64_t ncol = (D + 15) / 16;
#pragma omp parallel num_threads(nthr) if (nthr > 1 && V * D + N * D >= (1 << 14))
  {
#pragma omp for schedule(static)
    for (int64_t v = 0; v < V; v++) memset(dtable + v * D, 0, (size_t)D * sizeof(float));
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    int nparts = nt < ncol ? nt : (int)ncol;
    if (t < nparts) {
      int64_t c0 = (ncol * t / nparts) * 16, c1 = (ncol * (t + 1) / nparts) * 16;
      if (c1 > D) c1 = D;
      for (int64_t n = 0; n < N; n++) {
        const int64_t r = id_at(ids, idt, n) - offset;
        if (r < 0 || r >= V) continue; /* another shard's row (sharded only) */
        float *restrict dst = dtable + r * D;
        const float *restrict src = dy + n * D;
#pragma omp simd
        for (int64_t c = c0; c < c1; c++) dst[c] += src[c];
      }
    }
  }
  return TS_OK;
}

int ts__embedding_bwd_ref(const float *dy, const void *ids, ts_dtype idt, int64_t N, int64_t V,
                          int64_t D, float *dtable) {
  return bwd(dy, ids, idt, N, V, D, 0, 0, dtable);
}

int ts__embedding_shard_bwd_ref(const float *dy, const void *ids, ts_dtype idt, int64_t N,
                                int64_t Vl, int64_t D, int64_t offset, float *dtable) {
  if (offset < 0)
    return ts_error_set(TS_EINVAL, "embedding_bwd: row offset %lld is negative", (long long)offset);
  return bwd(dy, ids, idt, N, Vl, D, offset, 1, dtable);
}

/* 16-bit: rows [offset, offset+V) of dtable (dt) from dy (dt); other ids skipped (sharded). */
static int bwd_lp(ts_dtype dt, const void *dy, const void *ids, ts_dtype idt, int64_t N, int64_t V, int64_t D,
                  int64_t offset, int sharded, void *dtable) {
  if (dt != TS_BF16 && dt != TS_F16)
    return ts_error_set(TS_EDTYPE, "embedding_bwd: 16-bit kernel called with %s", ts_dtype_name(dt));
  int rc = check_ids(ids, idt, N, sharded ? -1 : V, "embedding_bwd");
  if (rc) return rc;
  /* tokens grouped by row, in token order: row r's tokens are tok[start[r] .. start[r+1]) */
  int64_t *start = calloc((size_t)(V + 1), sizeof(int64_t)), *tok = malloc(sizeof(int64_t) * (size_t)(N > 0 ? N : 1));
  if (!start || !tok) {
    free(start), free(tok);
    return ts_error_set(TS_ENOMEM, "embedding_bwd (16-bit): out of memory for %lld token indices", (long long)N);
  }
  for (int64_t n = 0; n < N; n++) {
    const int64_t r = id_at(ids, idt, n) - offset;
    if (r >= 0 && r < V) start[r + 1]++;
  }
  for (int64_t r = 0; r < V; r++) start[r + 1] += start[r];
  for (int64_t n = 0, *fill = start; n < N; n++) { /* start[r] advances to start[r+1] while filling */
    const int64_t r = id_at(ids, idt, n) - offset;
    if (r >= 0 && r < V) tok[fill[r]++] = n;
  }
  for (int64_t r = V; r > 0; r--) start[r] = start[r - 1]; /* back to the starts */
  start[0] = 0;
  const size_t rb = (size_t)D * 2;
  int oom = 0;
  int nthr = omp_in_parallel() ? 1 : omp_get_max_threads();
#pragma omp parallel num_threads(nthr) if (nthr > 1 && V * D + N * D >= (1 << 14))
  {
    float *acc = malloc(sizeof(float) * (size_t)(2 * D + 1)), *row = acc + D;
    if (!acc) {
#pragma omp atomic write
      oom = 1;
    }
#pragma omp for schedule(dynamic, 16) /* rows hit by many tokens (frequent ids) balance */
    for (int64_t r = 0; r < V; r++) {
      uint16_t *dst = (uint16_t *)dtable + r * D;
      if (!acc || start[r] == start[r + 1]) {
        memset(dst, 0, rb);
        continue;
      }
      memset(acc, 0, sizeof(float) * (size_t)D);
      for (int64_t t = start[r]; t < start[r + 1]; t++) {
        const uint16_t *src = (const uint16_t *)dy + tok[t] * D;
        if (dt == TS_BF16) { /* widened in the loop */
#pragma omp simd
          for (int64_t c = 0; c < D; c++) acc[c] += ts__bf2f(src[c]);
          continue;
        }
        ts__lp_widen(src, dt, row, D);
#pragma omp simd
        for (int64_t c = 0; c < D; c++) acc[c] += row[c];
      }
      ts__lp_narrow(acc, dst, dt, D);
    }
    free(acc);
  }
  free(start), free(tok);
  if (oom) return ts_error_set(TS_ENOMEM, "embedding_bwd (16-bit): out of memory for row buffers");
  return TS_OK;
}

int ts__embedding_bwd_lp(ts_dtype dt, const void *dy, const void *ids, ts_dtype idt, int64_t N, int64_t V, int64_t D,
                         void *dtable) {
  if (dt == TS_F32) return ts__embedding_bwd_ref(dy, ids, idt, N, V, D, dtable);
  return bwd_lp(dt, dy, ids, idt, N, V, D, 0, 0, dtable);
}

int ts__embedding_shard_bwd_lp(ts_dtype dt, const void *dy, const void *ids, ts_dtype idt, int64_t N, int64_t Vl,
                               int64_t D, int64_t offset, void *dtable) {
  if (dt == TS_F32) return ts__embedding_shard_bwd_ref(dy, ids, idt, N, Vl, D, offset, dtable);
  if (offset < 0)
    return ts_error_set(TS_EINVAL, "embedding_bwd: row offset %lld is negative", (long long)offset);
  return bwd_lp(dt, dy, ids, idt, N, Vl, D, offset, 1, dtable);
}

/* ---- one-hot ---- */

int ts__one_hot_ref(const void *ids, ts_dtype idt, int64_t outer, int64_t depth, int64_t inner, float on, float off,
                    void *y, ts_dtype dt) {
  size_t es = ts_dtype_size(dt);
  if (!es || es > 8) return ts_error_set(TS_EDTYPE, "one_hot: invalid dtype %d", (int)dt);
  unsigned char pon[8], poff[8];
  int rc = ts_convert(&on, TS_F32, pon, dt, 1);
  if (!rc) rc = ts_convert(&off, TS_F32, poff, dt, 1);
  if (rc) return rc;
  unsigned char *out = y;
#pragma omp parallel for schedule(static) if (outer * depth * inner >= (1 << 15) && !omp_in_parallel())
  for (int64_t o = 0; o < outer; o++)
    for (int64_t d = 0; d < depth; d++) {
      unsigned char *row = out + (size_t)((o * depth + d) * inner) * es;
      for (int64_t i = 0; i < inner; i++)
        memcpy(row + (size_t)i * es, id_at(ids, idt, o * inner + i) == d ? pon : poff, es);
    }
  return TS_OK;
}
