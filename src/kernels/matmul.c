/* Matmul and dense kernels (see matmul.h).
 *
 * Fast path choices (measured with bench/bench_kernels.c):
 *  - a single GEMM (batch 1, or a batched `a` without transpose times a shared `b`, which
 *    folds into one (batch*M, K) x (K, N) GEMM) calls dnnl_sgemm directly: that is exactly
 *    oneDNN's own sgemm speed, with no primitive creation or memory objects;
 *  - a real batch goes through the matmul primitive (created once per shape, cached), which
 *    parallelises across the batch; a shared operand is a batch-1 descriptor (broadcast).
 *  - dense writes the bias into y and runs sgemm with beta = 1 (y = x w^T + y). */
#include "matmul.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "dnnl_ctx.h"
#include "tessera/base.h"

int ts__mm_check(const ts__mm_desc *d, const char *what) {
  if (!d || d->batch < 1 || d->M < 1 || d->N < 1 || d->K < 1)
    return ts_error_set(TS_EINVAL, "%s: invalid sizes batch=%lld M=%lld N=%lld K=%lld", what,
                        d ? (long long)d->batch : 0LL, d ? (long long)d->M : 0LL,
                        d ? (long long)d->N : 0LL, d ? (long long)d->K : 0LL);
  if ((d->trans_a & ~1) || (d->trans_b & ~1) || (d->a_batched & ~1) || (d->b_batched & ~1))
    return ts_error_set(TS_EINVAL, "%s: transpose/batch flags must be 0 or 1", what);
  return TS_OK;
}

/* ------------------------------------------------------------------ reference */

int ts__matmul_ref(const ts__mm_desc *d, const float *a, const float *b, float *c) {
  int rc = ts__mm_check(d, "matmul (ref)");
  if (rc) return rc;
  if (!a || !b || !c) return ts_error_set(TS_EINVAL, "matmul (ref): NULL buffer");
  const int64_t B = d->batch, M = d->M, N = d->N, K = d->K;
  const int64_t sa = d->a_batched ? M * K : 0, sb = d->b_batched ? K * N : 0;
  const int ta = d->trans_a, tb = d->trans_b;
  const int nt = omp_get_max_threads();
  float *tmp = ta ? malloc((size_t)nt * (size_t)K * sizeof(float)) : NULL;
  if (ta && !tmp) return ts_error_set(TS_ENOMEM, "matmul (ref): out of memory");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < B * M; r++) {
    const int64_t bi = r / M, m = r % M;
    const float *A = a + bi * sa, *Bm = b + bi * sb;
    float *crow = c + r * N;
    const float *arow;
    if (!ta) {
      arow = A + m * K;
    } else { /* gather column m of the stored (K, M) matrix */
      float *t = tmp + (size_t)omp_get_thread_num() * (size_t)K;
      for (int64_t k = 0; k < K; k++) t[k] = A[k * M + m];
      arow = t;
    }
    if (!tb) {
      for (int64_t n = 0; n < N; n++) crow[n] = 0.f;
      for (int64_t k = 0; k < K; k++) {
        const float av = arow[k];
        const float *brow = Bm + k * N;
        for (int64_t n = 0; n < N; n++) crow[n] += av * brow[n];
      }
    } else {
      for (int64_t n = 0; n < N; n++) {
        const float *brow = Bm + n * K;
        float s = 0.f;
        for (int64_t k = 0; k < K; k++) s += arow[k] * brow[k];
        crow[n] = s;
      }
    }
  }
  free(tmp);
  return TS_OK;
}

int ts__dense_ref(int64_t M, int64_t N, int64_t K, const float *x, const float *w,
                  const float *bias, float *y) {
  if (M < 1 || N < 1 || K < 1)
    return ts_error_set(TS_EINVAL, "dense (ref): invalid sizes M=%lld N=%lld K=%lld",
                        (long long)M, (long long)N, (long long)K);
  if (!x || !w || !y) return ts_error_set(TS_EINVAL, "dense (ref): NULL buffer");
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++) {
    const float *xr = x + m * K;
    for (int64_t n = 0; n < N; n++) {
      const float *wr = w + n * K;
      float s = 0.f;
      for (int64_t k = 0; k < K; k++) s += xr[k] * wr[k];
      y[m * N + n] = s + (bias ? bias[n] : 0.f);
    }
  }
  return TS_OK;
}

/* ------------------------------------------------------------------ oneDNN */

static int sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *a,
                 const float *b, float beta, float *c, const char *what) {
  dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.f, a, ta ? M : K, b,
                                tb ? K : N, beta, c, N);
  return ts__dnnl_check(st, what);
}

typedef struct {
  char tag[8];
  int64_t batch, M, N, K;
  int32_t ta, tb, ab, bb;
} mm_key;

static int matmul_prim(const ts__mm_desc *d, ts__dnnl_prim **out, dnnl_memory_desc_t *mds) {
  mm_key key;
  memset(&key, 0, sizeof key);
  memcpy(key.tag, "matmul", 7);
  key.batch = d->batch, key.M = d->M, key.N = d->N, key.K = d->K;
  key.ta = d->trans_a, key.tb = d->trans_b, key.ab = d->a_batched, key.bb = d->b_batched;
  int rc;
  if ((rc = ts__dnnl_md3(&mds[0], d->a_batched ? d->batch : 1, d->M, d->K, d->trans_a, dnnl_f32)) ||
      (rc = ts__dnnl_md3(&mds[1], d->b_batched ? d->batch : 1, d->K, d->N, d->trans_b, dnnl_f32)) ||
      (rc = ts__dnnl_md3(&mds[2], d->batch, d->M, d->N, 0, dnnl_f32)))
    return rc;
  ts__dnnl_prim *p = ts__dnnl_cache_get(&key, sizeof key);
  if (!p) {
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    if ((rc = ts__dnnl_check(dnnl_matmul_desc_init(&md, &mds[0], &mds[1], NULL, &mds[2]),
                             "matmul descriptor")))
      return rc;
    if ((rc = ts__dnnl_check(dnnl_primitive_desc_create(&pd, &md, NULL, ts__dnnl_engine(), NULL),
                             "matmul primitive descriptor")))
      return rc;
    p = ts__dnnl_cache_put_pd(&key, sizeof key, pd);
    if (!p) return TS_EBACKEND;
  }
  *out = p;
  return TS_OK;
}

int ts__matmul_dnnl(const ts__mm_desc *d, const float *a, const float *b, float *c) {
  int rc = ts__mm_check(d, "matmul (oneDNN)");
  if (rc) return rc;
  if (!a || !b || !c) return ts_error_set(TS_EINVAL, "matmul (oneDNN): NULL buffer");
  if (d->batch == 1 || (!d->a_batched && !d->b_batched))
    { /* one GEMM; repeat it if neither operand is batched (broadcast of both) */
      rc = sgemm(d->trans_a, d->trans_b, d->M, d->N, d->K, a, b, 0.f, c, "sgemm");
      for (int64_t i = 1; rc == TS_OK && i < d->batch; i++)
        memcpy(c + i * d->M * d->N, c, (size_t)(d->M * d->N) * sizeof(float));
      return rc;
    }
  if (d->a_batched && !d->b_batched && !d->trans_a) /* fold the batch into M */
    return sgemm(0, d->trans_b, d->batch * d->M, d->N, d->K, a, b, 0.f, c, "sgemm");
  ts__dnnl_prim *p;
  dnnl_memory_desc_t mds[3];
  if ((rc = matmul_prim(d, &p, mds))) return rc;
  dnnl_exec_arg_t args[3] = {
      {DNNL_ARG_SRC, ts__dnnl_mem(&mds[0], (void *)a)},
      {DNNL_ARG_WEIGHTS, ts__dnnl_mem(&mds[1], (void *)b)},
      {DNNL_ARG_DST, ts__dnnl_mem(&mds[2], c)},
  };
  return ts__dnnl_run(p, 3, args, "matmul");
}

int ts__dense_dnnl(int64_t M, int64_t N, int64_t K, const float *x, const float *w,
                   const float *bias, float *y) {
  if (M < 1 || N < 1 || K < 1)
    return ts_error_set(TS_EINVAL, "dense (oneDNN): invalid sizes M=%lld N=%lld K=%lld",
                        (long long)M, (long long)N, (long long)K);
  if (!x || !w || !y) return ts_error_set(TS_EINVAL, "dense (oneDNN): NULL buffer");
  if (bias) {
#pragma omp parallel for schedule(static) if (M * N > 65536)
    for (int64_t m = 0; m < M; m++) memcpy(y + m * N, bias, (size_t)N * sizeof(float));
  }
  return sgemm(0, 1, M, N, K, x, w, bias ? 1.f : 0.f, y, "dense sgemm");
}
