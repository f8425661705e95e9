/* Executor adapters for the pool family. Max pooling's forward and backward always run on the
 * same backend (the plan's) and dtype (dy has y's), so each backward reads the workspace encoding
 * its forward wrote. bf16/f16 nodes call the 16-bit kernels (pool.h). Global average pooling is
 * AVGPOOL2D with the whole plane as the window. */
#include "run_desc.h"

static int run_maxpool2d(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts__pool_desc d = ts__run_pool_desc(n, &in[0].shape, &out[0].shape);
  if (in[0].dtype != TS_F32)
    return ts__maxpool2d_fwd_lp(&d, in[0].dtype, ctx->backend != TS_BACKEND_REF, in[0].data, out[0].data, out[1].data);
  if (ctx->backend == TS_BACKEND_REF) return ts__maxpool2d_fwd_ref(&d, in[0].data, out[0].data, out[1].data);
  return ts__maxpool2d_fwd_dnnl(&d, in[0].data, out[0].data, out[1].data);
}

/* (dy, ws) -> dx */
static int run_maxpool2d_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts__pool_desc d = ts__run_pool_desc(n, &out[0].shape, &in[0].shape);
  if (in[0].dtype != TS_F32)
    return ts__maxpool2d_bwd_lp(&d, in[0].dtype, ctx->backend != TS_BACKEND_REF, in[0].data, in[1].data, out[0].data);
  if (ctx->backend == TS_BACKEND_REF) return ts__maxpool2d_bwd_ref(&d, in[0].data, in[1].data, out[0].data);
  return ts__maxpool2d_bwd_dnnl(&d, in[0].data, in[1].data, out[0].data);
}

static int run_avgpool2d(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts__pool_desc d = ts__run_pool_desc(n, &in[0].shape, &out[0].shape);
  if (in[0].dtype != TS_F32)
    return ts__avgpool2d_fwd_lp(&d, in[0].dtype, ctx->backend != TS_BACKEND_REF, in[0].data, out[0].data);
  if (ctx->backend == TS_BACKEND_REF) return ts__avgpool2d_fwd_ref(&d, in[0].data, out[0].data);
  return ts__avgpool2d_fwd_dnnl(&d, in[0].data, out[0].data);
}

/* (dy) -> dx */
static int run_avgpool2d_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts__pool_desc d = ts__run_pool_desc(n, &out[0].shape, &in[0].shape);
  if (in[0].dtype != TS_F32)
    return ts__avgpool2d_bwd_lp(&d, in[0].dtype, ctx->backend != TS_BACKEND_REF, in[0].data, out[0].data);
  if (ctx->backend == TS_BACKEND_REF) return ts__avgpool2d_bwd_ref(&d, in[0].data, out[0].data);
  return ts__avgpool2d_bwd_dnnl(&d, in[0].data, out[0].data);
}

void ts__register_run_pool(ts__run_fn *tab) {
  tab[TS_OP_MAXPOOL2D] = run_maxpool2d;
  tab[TS_OP_MAXPOOL2D_BWD] = run_maxpool2d_bwd;
  tab[TS_OP_AVGPOOL2D] = run_avgpool2d;
  tab[TS_OP_AVGPOOL2D_BWD] = run_avgpool2d_bwd;
}
