/* Matmul (+ bias) + GeLU in one oneDNN matmul primitive (see matmul.h, ts__matmul_act_dnnl): the
 * activation is an eltwise post-op applied to the f32 accumulator (after the bias) before the
 * destination is written, so the pre-activation is never stored. This is what the executor's
 * matmul+bias+gelu fusion runs (src/runtime/exec.c, plan_fusions); it is only legal where the
 * pre-activation has no other reader (no backward reads it: evaluation and predict plans).
 *
 * One primitive per (shape, transposes, batch sharing, bias, dtypes, activation), created once
 * and cached. Batches follow the unfused kernels: a product whose operands are both shared is
 * computed once and copied, a batched `a` without transpose times a shared `b` folds into M, and
 * any other batch goes to the primitive with the shared operand as a batch-1 (broadcast)
 * descriptor. */
#include <string.h>

#include "dnnl_ctx.h"
#include "lowp.h"
#include "matmul.h"
#include "tessera/base.h"
#include "tessera/ops.h"

typedef struct {
  char tag[8];
  int64_t batch, M, N, K;
  int32_t ta, tb, ab, bb, bias, ab_dt, c_dt, alg;
} act_key;

static dnnl_data_type_t dnnl_dt(ts_dtype dt) { return dt == TS_BF16 ? dnnl_bf16 : dnnl_f32; }

/* The cached primitive for d; mds[0..3]: a, b, c and bias descriptors. NULL (error set) when
 * oneDNN cannot make it. */
static ts__dnnl_prim *act_prim(const ts__mm_desc *d, ts_dtype ab_dt, ts_dtype c_dt, int bias,
                               dnnl_alg_kind_t alg, dnnl_memory_desc_t *mds) {
  act_key key;
  memset(&key, 0, sizeof key);
  memcpy(key.tag, "mm_act", 7);
  key.batch = d->batch, key.M = d->M, key.N = d->N, key.K = d->K;
  key.ta = d->trans_a, key.tb = d->trans_b, key.ab = d->a_batched, key.bb = d->b_batched;
  key.bias = bias, key.ab_dt = (int32_t)ab_dt, key.c_dt = (int32_t)c_dt, key.alg = (int32_t)alg;
  if (ts__dnnl_md3(&mds[0], d->a_batched ? d->batch : 1, d->M, d->K, d->trans_a, dnnl_dt(ab_dt)) ||
      ts__dnnl_md3(&mds[1], d->b_batched ? d->batch : 1, d->K, d->N, d->trans_b, dnnl_dt(ab_dt)) ||
      ts__dnnl_md3(&mds[2], d->batch, d->M, d->N, 0, dnnl_dt(c_dt)) ||
      ts__dnnl_md3(&mds[3], 1, 1, d->N, 0, dnnl_dt(ab_dt)))
    return NULL;
  ts__dnnl_prim *p = ts__dnnl_cache_get(&key, sizeof key);
  if (p) return p;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_matmul_desc_t md;
  dnnl_primitive_desc_t pd = NULL;
  int rc = ts__dnnl_check(dnnl_matmul_desc_init(&md, &mds[0], &mds[1], bias ? &mds[3] : NULL, &mds[2]),
                          "matmul+activation descriptor") ||
           ts__dnnl_check(dnnl_primitive_attr_create(&attr), "matmul+activation attributes") ||
           ts__dnnl_check(dnnl_post_ops_create(&po), "matmul+activation post-ops") ||
           ts__dnnl_check(dnnl_post_ops_append_eltwise(po, 1.0f, alg, 0.0f, 0.0f), "matmul+activation eltwise post-op") ||
           ts__dnnl_check(dnnl_primitive_attr_set_post_ops(attr, po), "matmul+activation post-ops") ||
           ts__dnnl_check(dnnl_primitive_desc_create(&pd, &md, attr, ts__dnnl_engine(), NULL),
                          "matmul+activation primitive descriptor");
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (rc) return NULL;
  return ts__dnnl_cache_put_pd(&key, sizeof key, pd);
}

static int run_act(const ts__mm_desc *d, ts_dtype ab_dt, ts_dtype c_dt, const void *a, const void *b,
                   const void *bias, void *c, dnnl_alg_kind_t alg, const char *what) {
  dnnl_memory_desc_t mds[4];
  ts__dnnl_prim *p = act_prim(d, ab_dt, c_dt, bias != NULL, alg, mds);
  if (!p)
    return ts_error_wrap(TS_EBACKEND, "%s (batch %lld, M %lld, N %lld, K %lld)", what, (long long)d->batch,
                         (long long)d->M, (long long)d->N, (long long)d->K);
  dnnl_exec_arg_t args[4] = {
      {DNNL_ARG_SRC, ts__dnnl_mem(&mds[0], (void *)a)},
      {DNNL_ARG_WEIGHTS, ts__dnnl_mem(&mds[1], (void *)b)},
      {DNNL_ARG_DST, ts__dnnl_mem(&mds[2], c)},
      {DNNL_ARG_BIAS, bias ? ts__dnnl_mem(&mds[3], (void *)bias) : NULL},
  };
  return ts__dnnl_run(p, bias ? 4 : 3, args, what);
}

int ts__matmul_act_dnnl(const ts__mm_desc *d, ts_dtype ab_dt, ts_dtype c_dt, const void *a, const void *b,
                        const void *bias, void *c, int act) {
  const char *what = "matmul+gelu (oneDNN)";
  int rc = ts__mm_check(d, what);
  if (rc) return rc;
  if (!a || !b || !c) return ts_error_set(TS_EINVAL, "%s: NULL buffer", what);
  if ((ab_dt != TS_F32 && ab_dt != TS_BF16) || (c_dt != TS_F32 && c_dt != ab_dt))
    return ts_error_set(TS_EINVAL, "%s: operands %s with result %s (expected f32 or bf16 operands, the result f32 or theirs)",
                        what, ts_dtype_name(ab_dt), ts_dtype_name(c_dt));
  dnnl_alg_kind_t alg;
  if (act == TS_ELT_GELU_TANH)
    alg = dnnl_eltwise_gelu_tanh;
  else if (act == TS_ELT_GELU_ERF)
    alg = dnnl_eltwise_gelu_erf;
  else
    return ts_error_set(TS_EINVAL, "%s: activation %d is not a gelu", what, act);
  if (ab_dt == TS_BF16 && !ts__dnnl_bf16()) { /* no bf16 in this CPU's oneDNN: f32 on the widened values */
    const int64_t na = ts__mm_a_elems(d), nb = ts__mm_b_elems(d), nc = ts__mm_c_elems(d);
    float *fa = ts__lp_in(a, TS_BF16, na, what), *fb = fa ? ts__lp_in(b, TS_BF16, nb, what) : NULL;
    float *fbias = fb && bias ? ts__lp_in(bias, TS_BF16, d->N, what) : NULL;
    float *fc = fb && (!bias || fbias) ? (c_dt == TS_F32 ? (float *)c : ts__lp_in(NULL, TS_BF16, nc, what)) : NULL;
    rc = fc ? ts__matmul_act_dnnl(d, TS_F32, TS_F32, fa, fb, fbias, fc, act) : TS_ENOMEM;
    if (rc == TS_OK && c_dt != TS_F32) ts__lp_from_f32(fc, c, TS_BF16, nc);
    if (fc != c) ts_free(fc);
    ts_free(fa), ts_free(fb), ts_free(fbias);
    return rc;
  }
  if (d->batch > 1 && !d->a_batched && !d->b_batched) { /* one product, repeated */
    ts__mm_desc d1 = *d;
    d1.batch = 1;
    rc = run_act(&d1, ab_dt, c_dt, a, b, bias, c, alg, what);
    const size_t bytes = (size_t)(d->M * d->N) * ts_dtype_size(c_dt);
    for (int64_t i = 1; rc == TS_OK && i < d->batch; i++) memcpy((char *)c + (size_t)i * bytes, c, bytes);
    return rc;
  }
  if (d->batch > 1 && d->a_batched && !d->b_batched && !d->trans_a) { /* fold the batch into M */
    ts__mm_desc d1 = *d;
    d1.M = d->batch * d->M;
    d1.batch = 1;
    return run_act(&d1, ab_dt, c_dt, a, b, bias, c, alg, what);
  }
  return run_act(d, ab_dt, c_dt, a, b, bias, c, alg, what);
}
