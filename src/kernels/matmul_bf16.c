/* 16-bit (bf16, f16) matmul and dense kernels (see matmul.h).
 *
 * bf16 on the fast path is native: oneDNN's matmul primitive with bf16 src/weights/dst (and
 * bias) memory descriptors, created once per shape and cached; oneDNN accumulates in f32 and
 * rounds dst once. Dense is the same primitive with the (N,K) weights described as a (K,N)
 * matrix with swapped strides, and the bias as a (1,N) broadcast. f16, and any shape the bf16
 * primitive rejects, converts to f32 around the f32 kernel (ts__lp_in / ts__lp_from_f32). */
#include <string.h>

#include "dnnl_ctx.h"
#include "lowp.h"
#include "matmul.h"
#include "tessera/base.h"

static int64_t a_elems(const ts__mm_desc *d) { return (d->a_batched ? d->batch : 1) * d->M * d->K; }
static int64_t b_elems(const ts__mm_desc *d) { return (d->b_batched ? d->batch : 1) * d->K * d->N; }

/* ---------------------------------------------------------------- converted (f32 inside) */

static int matmul_conv(const ts__mm_desc *d, ts_dtype dt, const void *a, const void *b, void *c,
                       int dnnl) {
  const char *what = dnnl ? "matmul (16-bit, oneDNN f32)" : "matmul (16-bit, ref)";
  int rc = ts__mm_check(d, what);
  if (rc) return rc;
  if (!a || !b || !c) return ts_error_set(TS_EINVAL, "%s: NULL buffer", what);
  const int64_t nc = d->batch * d->M * d->N;
  float *fa = ts__lp_in(a, dt, a_elems(d), what), *fb = fa ? ts__lp_in(b, dt, b_elems(d), what) : NULL;
  float *fc = fb ? ts__lp_in(NULL, dt, nc, what) : NULL;
  rc = !fc ? TS_ENOMEM : dnnl ? ts__matmul_dnnl(d, fa, fb, fc) : ts__matmul_ref(d, fa, fb, fc);
  if (rc == TS_OK) ts__lp_from_f32(fc, c, dt, nc);
  ts_free(fa);
  ts_free(fb);
  ts_free(fc);
  return rc;
}

static int dense_conv(int64_t M, int64_t N, int64_t K, ts_dtype dt, const void *x, const void *w,
                      const void *bias, void *y, int dnnl) {
  const char *what = dnnl ? "dense (16-bit, oneDNN f32)" : "dense (16-bit, ref)";
  if (M < 1 || N < 1 || K < 1)
    return ts_error_set(TS_EINVAL, "%s: invalid sizes M=%lld N=%lld K=%lld", what, (long long)M,
                        (long long)N, (long long)K);
  if (!x || !w || !y) return ts_error_set(TS_EINVAL, "%s: NULL buffer", what);
  float *fx = ts__lp_in(x, dt, M * K, what), *fw = fx ? ts__lp_in(w, dt, N * K, what) : NULL;
  float *fb = fw && bias ? ts__lp_in(bias, dt, N, what) : NULL;
  float *fy = fw && (!bias || fb) ? ts__lp_in(NULL, dt, M * N, what) : NULL;
  int rc = !fy ? TS_ENOMEM
           : dnnl ? ts__dense_dnnl(M, N, K, fx, fw, fb, fy)
                  : ts__dense_ref(M, N, K, fx, fw, fb, fy);
  if (rc == TS_OK) ts__lp_from_f32(fy, y, dt, M * N);
  ts_free(fx);
  ts_free(fw);
  ts_free(fb);
  ts_free(fy);
  return rc;
}

int ts__matmul_lp_ref(const ts__mm_desc *d, ts_dtype dt, const void *a, const void *b, void *c) {
  if (dt == TS_F32) return ts__matmul_ref(d, a, b, c);
  return matmul_conv(d, dt, a, b, c, 0);
}

int ts__dense_lp_ref(int64_t M, int64_t N, int64_t K, ts_dtype dt, const void *x, const void *w,
                     const void *bias, void *y) {
  if (dt == TS_F32) return ts__dense_ref(M, N, K, x, w, bias, y);
  return dense_conv(M, N, K, dt, x, w, bias, y, 0);
}

/* ---------------------------------------------------------------- native bf16 (oneDNN) */

typedef struct {
  char tag[8];
  int64_t batch, M, N, K;
  int32_t ta, tb, ab, bb, bias, dt;
} lp_key;

/* The cached bf16 matmul primitive for d (bias: a (1,1,N) bf16 broadcast); mds[0..3] get the
 * src, weights, dst and bias descriptors. NULL (error set) when oneDNN cannot make it. */
static ts__dnnl_prim *lp_prim(const ts__mm_desc *d, int bias, dnnl_memory_desc_t *mds) {
  lp_key key;
  memset(&key, 0, sizeof key);
  memcpy(key.tag, "mm_bf16", 8);
  key.batch = d->batch, key.M = d->M, key.N = d->N, key.K = d->K;
  key.ta = d->trans_a, key.tb = d->trans_b, key.ab = d->a_batched, key.bb = d->b_batched;
  key.bias = bias, key.dt = TS_BF16;
  if (ts__dnnl_md3(&mds[0], d->a_batched ? d->batch : 1, d->M, d->K, d->trans_a, dnnl_bf16) ||
      ts__dnnl_md3(&mds[1], d->b_batched ? d->batch : 1, d->K, d->N, d->trans_b, dnnl_bf16) ||
      ts__dnnl_md3(&mds[2], d->batch, d->M, d->N, 0, dnnl_bf16) || ts__dnnl_md3(&mds[3], 1, 1, d->N, 0, dnnl_bf16))
    return NULL;
  ts__dnnl_prim *p = ts__dnnl_cache_get(&key, sizeof key);
  if (p) return p;
  dnnl_matmul_desc_t md;
  dnnl_primitive_desc_t pd = NULL;
  if (ts__dnnl_check(dnnl_matmul_desc_init(&md, &mds[0], &mds[1], bias ? &mds[3] : NULL, &mds[2]),
                     "bf16 matmul descriptor") ||
      ts__dnnl_check(dnnl_primitive_desc_create(&pd, &md, NULL, ts__dnnl_engine(), NULL),
                     "bf16 matmul primitive descriptor"))
    return NULL;
  return ts__dnnl_cache_put_pd(&key, sizeof key, pd);
}

static int run_lp(const ts__mm_desc *d, const void *a, const void *b, const void *bias, void *c,
                  const char *what) {
  dnnl_memory_desc_t mds[4];
  ts__dnnl_prim *p = lp_prim(d, bias != NULL, mds);
  if (!p) return ts_error_wrap(TS_EBACKEND, "%s", what);
  dnnl_exec_arg_t args[4] = {
      {DNNL_ARG_SRC, ts__dnnl_mem(&mds[0], (void *)a)},
      {DNNL_ARG_WEIGHTS, ts__dnnl_mem(&mds[1], (void *)b)},
      {DNNL_ARG_DST, ts__dnnl_mem(&mds[2], c)},
      {DNNL_ARG_BIAS, bias ? ts__dnnl_mem(&mds[3], (void *)bias) : NULL},
  };
  return ts__dnnl_run(p, bias ? 4 : 3, args, what);
}

int ts__matmul_lp_dnnl(const ts__mm_desc *d, ts_dtype dt, const void *a, const void *b, void *c) {
  if (dt == TS_F32) return ts__matmul_dnnl(d, a, b, c);
  if (dt != TS_BF16) return matmul_conv(d, dt, a, b, c, 1); /* f16: converted */
  int rc = ts__mm_check(d, "matmul (bf16, oneDNN)");
  if (rc) return rc;
  if (!a || !b || !c) return ts_error_set(TS_EINVAL, "matmul (bf16, oneDNN): NULL buffer");
  if (d->batch > 1 && !d->a_batched && !d->b_batched) { /* one product, repeated */
    ts__mm_desc d1 = *d;
    d1.batch = 1;
    rc = run_lp(&d1, a, b, NULL, c, "matmul (bf16, oneDNN)");
    for (int64_t i = 1; rc == TS_OK && i < d->batch; i++)
      memcpy((uint16_t *)c + i * d->M * d->N, c, (size_t)(d->M * d->N) * 2);
    return rc;
  }
  if (d->batch > 1 && d->a_batched && !d->b_batched && !d->trans_a) { /* fold the batch into M */
    ts__mm_desc d1 = *d;
    d1.M = d->batch * d->M;
    d1.batch = 1;
    return run_lp(&d1, a, b, NULL, c, "matmul (bf16, oneDNN)");
  }
  return run_lp(d, a, b, NULL, c, "matmul (bf16, oneDNN)");
}

int ts__dense_lp_dnnl(int64_t M, int64_t N, int64_t K, ts_dtype dt, const void *x, const void *w,
                      const void *bias, void *y) {
  if (dt == TS_F32) return ts__dense_dnnl(M, N, K, x, w, bias, y);
  if (dt != TS_BF16) return dense_conv(M, N, K, dt, x, w, bias, y, 1); /* f16: converted */
  if (M < 1 || N < 1 || K < 1)
    return ts_error_set(TS_EINVAL, "dense (bf16, oneDNN): invalid sizes M=%lld N=%lld K=%lld",
                        (long long)M, (long long)N, (long long)K);
  if (!x || !w || !y) return ts_error_set(TS_EINVAL, "dense (bf16, oneDNN): NULL buffer");
  /* y = x w^T: w stored (N,K) is the (K,N) matrix transposed */
  ts__mm_desc d = {1, M, N, K, 0, 1, 0, 0};
  return run_lp(&d, x, w, bias, y, "dense (bf16, oneDNN)");
}
