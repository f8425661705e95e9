/* Embedding kernels. Forward copies rows in parallel; backward zeroes the table by rows, then
 * scatter-adds with each thread owning a column range (no atomics, fixed summation order). The
 * vocabulary-sharded versions (a block of rows at an offset: other ids give zero rows forward and
 * are skipped backward) share the loops. */
#include "embedding.h"

#include <omp.h>
#include <string.h>

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
