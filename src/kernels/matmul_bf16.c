/* 16-bit (bf16, f16) matmul and dense kernels (see matmul.h).
 *
 * bf16 on the fast path is native: oneDNN's matmul primitive with bf16 src/weights/dst (and
 * bias) memory descriptors, created once per shape and cached; oneDNN accumulates in f32 and
 * rounds dst once. Dense is the same primitive with the (N,K) weights described as a (K,N)
 * matrix with swapped strides, and the bias as a (1,N) broadcast. f16, and any shape the bf16
 * primitive rejects, converts to f32 around the f32 kernel (ts__lp_in / ts__lp_from_f32).
 * Last: the strided bf16 GEMMs (ts__gemm_bf16_*) that kernels with their own threads call, like
 * dnnl_sgemm for f32. */
#include <stdlib.h>
#include <string.h>

#include "dnnl_ctx.h"
#include "lowp.h"
#include "matmul.h"
#include "tessera/base.h"

/* ---------------------------------------------------------------- converted (f32 inside) */

static int matmul_conv(const ts__mm_desc *d, ts_dtype dt, const void *a, const void *b, void *c,
                       int dnnl) {
  const char *what = dnnl ? "matmul (16-bit, oneDNN f32)" : "matmul (16-bit, ref)";
  int rc = ts__mm_check(d, what);
  if (rc) return rc;
  if (!a || !b || !c) return ts_error_set(TS_EINVAL, "%s: NULL buffer", what);
  const int64_t nc = ts__mm_c_elems(d);
  float *fa = ts__lp_in(a, dt, ts__mm_a_elems(d), what), *fb = fa ? ts__lp_in(b, dt, ts__mm_b_elems(d), what) : NULL;
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
static ts__dnnl_prim *lp_prim(const ts__mm_desc *d, int bias, int c_f32, dnnl_memory_desc_t *mds) {
  lp_key key;
  memset(&key, 0, sizeof key);
  memcpy(key.tag, "mm_bf16", 8);
  key.batch = d->batch, key.M = d->M, key.N = d->N, key.K = d->K;
  key.ta = d->trans_a, key.tb = d->trans_b, key.ab = d->a_batched, key.bb = d->b_batched;
  key.bias = bias, key.dt = c_f32 ? TS_F32 : TS_BF16; /* the destination's dtype */
  if (ts__dnnl_md3(&mds[0], d->a_batched ? d->batch : 1, d->M, d->K, d->trans_a, dnnl_bf16) ||
      ts__dnnl_md3(&mds[1], d->b_batched ? d->batch : 1, d->K, d->N, d->trans_b, dnnl_bf16) ||
      ts__dnnl_md3(&mds[2], d->batch, d->M, d->N, 0, c_f32 ? dnnl_f32 : dnnl_bf16) ||
      ts__dnnl_md3(&mds[3], 1, 1, d->N, 0, dnnl_bf16))
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

static int run_lp(const ts__mm_desc *d, const void *a, const void *b, const void *bias, void *c, int c_f32,
                  const char *what) {
  dnnl_memory_desc_t mds[4];
  ts__dnnl_prim *p = lp_prim(d, bias != NULL, c_f32, mds);
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
  if (dt != TS_BF16 || !ts__dnnl_bf16()) return matmul_conv(d, dt, a, b, c, 1); /* f16, or no bf16 in oneDNN: converted */
  int rc = ts__mm_check(d, "matmul (bf16, oneDNN)");
  if (rc) return rc;
  if (!a || !b || !c) return ts_error_set(TS_EINVAL, "matmul (bf16, oneDNN): NULL buffer");
  if (d->batch > 1 && !d->a_batched && !d->b_batched) { /* one product, repeated */
    ts__mm_desc d1 = *d;
    d1.batch = 1;
    rc = run_lp(&d1, a, b, NULL, c, 0, "matmul (bf16, oneDNN)");
    for (int64_t i = 1; rc == TS_OK && i < d->batch; i++)
      memcpy((uint16_t *)c + i * d->M * d->N, c, (size_t)(d->M * d->N) * 2);
    return rc;
  }
  if (d->batch > 1 && d->a_batched && !d->b_batched && !d->trans_a) { /* fold the batch into M */
    ts__mm_desc d1 = *d;
    d1.M = d->batch * d->M;
    d1.batch = 1;
    return run_lp(&d1, a, b, NULL, c, 0, "matmul (bf16, oneDNN)");
  }
  return run_lp(d, a, b, NULL, c, 0, "matmul (bf16, oneDNN)");
}

int ts__matmul_bf16_f32out_dnnl(const ts__mm_desc *d, const void *a, const void *b, float *c) {
  int rc = ts__mm_check(d, "matmul (bf16 -> f32, oneDNN)");
  if (rc) return rc;
  if (!a || !b || !c) return ts_error_set(TS_EINVAL, "matmul (bf16 -> f32, oneDNN): NULL buffer");
  if (!ts__dnnl_bf16()) { /* no bf16 in this CPU's oneDNN: the f32 product of the widened values */
    float *fa = ts__lp_in(a, TS_BF16, ts__mm_a_elems(d), "matmul (bf16 -> f32)");
    float *fb = fa ? ts__lp_in(b, TS_BF16, ts__mm_b_elems(d), "matmul (bf16 -> f32)") : NULL;
    rc = fb ? ts__matmul_dnnl(d, fa, fb, c) : TS_ENOMEM;
    ts_free(fa), ts_free(fb);
    return rc;
  }
  if (d->batch > 1 && !d->a_batched && !d->b_batched) { /* one product, repeated */
    ts__mm_desc d1 = *d;
    d1.batch = 1;
    rc = run_lp(&d1, a, b, NULL, c, 1, "matmul (bf16 -> f32, oneDNN)");
    for (int64_t i = 1; rc == TS_OK && i < d->batch; i++)
      memcpy(c + i * d->M * d->N, c, (size_t)(d->M * d->N) * sizeof(float));
    return rc;
  }
  return run_lp(d, a, b, NULL, c, 1, "matmul (bf16 -> f32, oneDNN)");
}

int ts__dense_lp_dnnl(int64_t M, int64_t N, int64_t K, ts_dtype dt, const void *x, const void *w,
                      const void *bias, void *y) {
  if (dt == TS_F32) return ts__dense_dnnl(M, N, K, x, w, bias, y);
  if (dt != TS_BF16 || !ts__dnnl_bf16()) return dense_conv(M, N, K, dt, x, w, bias, y, 1); /* f16, or no bf16 in oneDNN */
  if (M < 1 || N < 1 || K < 1)
    return ts_error_set(TS_EINVAL, "dense (bf16, oneDNN): invalid sizes M=%lld N=%lld K=%lld",
                        (long long)M, (long long)N, (long long)K);
  if (!x || !w || !y) return ts_error_set(TS_EINVAL, "dense (bf16, oneDNN): NULL buffer");
  /* y = x w^T: w stored (N,K) is the (K,N) matrix transposed */
  ts__mm_desc d = {1, M, N, K, 0, 1, 0, 0};
  return run_lp(&d, x, w, bias, y, 0, "dense (bf16, oneDNN)");
}

/* ---------------------------------------------------------------- bf16 GEMMs (see matmul.h) */

typedef struct {
  char tag[8];
  int64_t M, N, K, lda, ldb, ldc;
  int32_t ta, tb, acc, cbf;
  float alpha;
  int32_t pad_;
} gemm_key;

struct ts__gemm_bf16 {
  ts__dnnl_prim *p;
  dnnl_memory_desc_t md[4]; /* A, B, C, scratchpad */
  size_t scratch;
};

/* (rows, cols) of a matrix stored row-major with leading dimension ld, or its transpose. */
static int md2(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, int64_t ld, int trans, dnnl_data_type_t dt) {
  dnnl_dims_t dims = {rows, cols}, strides = {trans ? 1 : ld, trans ? ld : 1};
  return ts__dnnl_check(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides), "bf16 gemm memory descriptor");
}

const ts__gemm_bf16 *ts__gemm_bf16_get(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                                       int64_t lda, int64_t ldb, int accumulate, int64_t ldc, int c_bf16) {
  gemm_key key;
  memset(&key, 0, sizeof key);
  memcpy(key.tag, "gemmbf", 7);
  key.M = M, key.N = N, key.K = K, key.lda = lda, key.ldb = ldb, key.ldc = ldc;
  key.ta = ta == 'T', key.tb = tb == 'T', key.acc = accumulate != 0, key.cbf = c_bf16 != 0;
  key.alpha = alpha;
  ts__dnnl_prim *p = ts__dnnl_cache_get(&key, sizeof key);
  if (p) return p->aux;
  if (M < 1 || N < 1 || K < 1) {
    ts_error_set(TS_EINVAL, "bf16 gemm: invalid sizes M=%lld N=%lld K=%lld", (long long)M, (long long)N, (long long)K);
    return NULL;
  }
  struct ts__gemm_bf16 *g = calloc(1, sizeof *g);
  if (!g) {
    ts_error_set(TS_ENOMEM, "bf16 gemm: out of memory");
    return NULL;
  }
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_matmul_desc_t mmd;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t prim = NULL;
  int rc = md2(&g->md[0], M, K, lda, key.ta, dnnl_bf16) || md2(&g->md[1], K, N, ldb, key.tb, dnnl_bf16) ||
           md2(&g->md[2], M, N, ldc, 0, c_bf16 ? dnnl_bf16 : dnnl_f32) ||
           ts__dnnl_check(dnnl_matmul_desc_init(&mmd, &g->md[0], &g->md[1], NULL, &g->md[2]), "bf16 gemm descriptor") ||
           ts__dnnl_check(dnnl_primitive_attr_create(&attr), "bf16 gemm attributes") ||
           ts__dnnl_check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "bf16 gemm scratchpad");
  if (!rc && alpha != 1.0f)
    rc = ts__dnnl_check(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha), "bf16 gemm output scale");
  if (!rc && accumulate)
    rc = ts__dnnl_check(dnnl_post_ops_create(&po), "bf16 gemm post-ops") ||
         ts__dnnl_check(dnnl_post_ops_append_sum(po, 1.0f), "bf16 gemm sum post-op") ||
         ts__dnnl_check(dnnl_primitive_attr_set_post_ops(attr, po), "bf16 gemm post-ops");
  if (!rc)
    rc = ts__dnnl_check(dnnl_primitive_desc_create(&pd, &mmd, attr, ts__dnnl_engine(), NULL),
                        "bf16 gemm primitive descriptor");
  if (!rc) {
    g->md[3] = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    g->scratch = dnnl_memory_desc_get_size(&g->md[3]);
    rc = ts__dnnl_check(dnnl_primitive_create(&prim, pd), "bf16 gemm primitive");
  }
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (!rc && !(g->p = ts__dnnl_cache_put(&key, sizeof key, pd, prim, g))) rc = ts_error_set(TS_ENOMEM, "bf16 gemm: out of memory");
  if (rc) {
    if (prim) dnnl_primitive_destroy(prim);
    if (pd) dnnl_primitive_desc_destroy(pd);
    free(g);
    ts_error_wrap(TS_EBACKEND, "bf16 gemm (%c%c M=%lld N=%lld K=%lld)", ta, tb, (long long)M, (long long)N, (long long)K);
    return NULL;
  }
  return g;
}

size_t ts__gemm_bf16_scratch(const ts__gemm_bf16 *g) { return g->scratch; }

struct ts__gemm_thr {
  dnnl_stream_t stream;
  void *scratch;
  int nslot;
  struct {
    const ts__gemm_bf16 *g;
    dnnl_memory_t m[4];
  } *slot;
};

ts__gemm_thr *ts__gemm_thr_new(int nslot, size_t scratch) {
  ts__gemm_thr *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->nslot = nslot;
  t->slot = calloc((size_t)(nslot > 0 ? nslot : 1), sizeof *t->slot);
  t->scratch = ts_alloc(scratch > 0 ? scratch : 64);
  if (!t->slot || !t->scratch || !ts__dnnl_engine() ||
      dnnl_stream_create(&t->stream, ts__dnnl_engine(), dnnl_stream_default_flags) != dnnl_success) {
    t->stream = NULL;
    ts__gemm_thr_free(t);
    return NULL;
  }
  return t;
}

void ts__gemm_thr_free(ts__gemm_thr *t) {
  if (!t) return;
  for (int i = 0; t->slot && i < t->nslot; i++)
    for (int k = 0; k < 4; k++)
      if (t->slot[i].m[k]) dnnl_memory_destroy(t->slot[i].m[k]);
  if (t->stream) dnnl_stream_destroy(t->stream);
  free(t->slot);
  ts_free(t->scratch);
  free(t);
}

// A (M,K)|(K,M) bf16, B (K,N)|(N,K) bf16 -> C (M,N) f32|bf16
int ts__gemm_bf16_run(const ts__gemm_bf16 *g, ts__gemm_thr *t, int slot, const void *A, const void *B,
                      void *C) {
  if (!g || !t || slot < 0 || slot >= t->nslot) return TS_EINVAL;
  void *ptr[4] = {(void *)A, (void *)B, C, t->scratch};
  const int nargs = g->scratch ? 4 : 3;
  if (t->slot[slot].g != g) { /* first run of this slot, or another product: new memory objects */
    for (int k = 0; k < 4; k++) {
      if (t->slot[slot].m[k]) dnnl_memory_destroy(t->slot[slot].m[k]);
      t->slot[slot].m[k] = NULL;
    }
    t->slot[slot].g = NULL;
    for (int k = 0; k < nargs; k++)
      if (dnnl_memory_create(&t->slot[slot].m[k], &g->md[k], ts__dnnl_engine(), ptr[k]) != dnnl_success)
        return TS_EBACKEND;
    t->slot[slot].g = g;
  } else {
    for (int k = 0; k < nargs; k++)
      if (dnnl_memory_set_data_handle(t->slot[slot].m[k], ptr[k]) != dnnl_success) return TS_EBACKEND;
  }
  static const int argk[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD};
  dnnl_exec_arg_t args[4];
  for (int k = 0; k < nargs; k++) args[k] = (dnnl_exec_arg_t){argk[k], t->slot[slot].m[k]};
  if (dnnl_primitive_execute(g->p->prim, t->stream, nargs, args) != dnnl_success ||
      dnnl_stream_wait(t->stream) != dnnl_success)
    return TS_EBACKEND;
  return TS_OK;
}
