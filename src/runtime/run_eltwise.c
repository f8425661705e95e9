/* Executor adapters for the eltwise family (ELTWISE, ELTWISE_BWD). TS_BACKEND_FAST uses
 * oneDNN's eltwise primitives (JIT, ~10x faster than libm for gelu/tanh/sigmoid), except:
 *   neg  a plain loop either way;
 *   log  oneDNN 2.6's log has ~1.5e-6 absolute error, i.e. large relative error near x = 1
 *        (log(1.0197) off by 7e-5 relative), so the forward uses libm's logf (the backward,
 *        dy/x, is exact either way).
 * bf16/f16 nodes call the 16-bit kernels (eltwise.h): native bf16 oneDNN or 16-bit streaming. */
#include "graph/graph_ir.h"
#include "run_impl.h"
#include "../kernels/eltwise.h"

static int run_eltwise(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int alg = (int)ts_attr_eltwise_alg(&n->a);
  const int64_t len = ts_tensor_numel(&in[0]);
  if (out[0].dtype != TS_F32)
    return ts__eltwise_fwd_lp(alg, ts_attr_eltwise_alpha(&n->a), ts_attr_eltwise_beta(&n->a), out[0].dtype,
                              ctx->backend != TS_BACKEND_REF, in[0].data, out[0].data, len);
  if (ctx->backend == TS_BACKEND_REF || alg == TS_ELT_NEG || alg == TS_ELT_LOG)
    return ts__eltwise_fwd_ref(alg, ts_attr_eltwise_alpha(&n->a), ts_attr_eltwise_beta(&n->a), in[0].data, out[0].data, len);
  return ts__eltwise_fwd_dnnl(alg, ts_attr_eltwise_alpha(&n->a), ts_attr_eltwise_beta(&n->a), in[0].data, out[0].data, len);
}

static int run_eltwise_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int alg = (int)ts_attr_eltwise_alg(&n->a), use_dst = (int)ts_attr_eltwise_use_dst(&n->a);
  const int64_t len = ts_tensor_numel(&in[0]);
  if (out[0].dtype != TS_F32)
    return ts__eltwise_bwd_lp(alg, ts_attr_eltwise_alpha(&n->a), ts_attr_eltwise_beta(&n->a), use_dst, out[0].dtype,
                              ctx->backend != TS_BACKEND_REF, in[0].data, in[1].data, out[0].data, len);
  if (ctx->backend == TS_BACKEND_REF || alg == TS_ELT_NEG)
    return ts__eltwise_bwd_ref(alg, ts_attr_eltwise_alpha(&n->a), ts_attr_eltwise_beta(&n->a), use_dst, in[0].data, in[1].data,
                               out[0].data, len);
  return ts__eltwise_bwd_dnnl(alg, ts_attr_eltwise_alpha(&n->a), ts_attr_eltwise_beta(&n->a), use_dst, in[0].data, in[1].data,
                              out[0].data, len);
}

void ts__register_run_eltwise(ts__run_fn *tab) {
  tab[TS_OP_ELTWISE] = run_eltwise;
  tab[TS_OP_ELTWISE_BWD] = run_eltwise_bwd;
}
