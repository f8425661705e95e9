/* Executor adapters for the conv family: build a ts__conv_desc from the node's attributes and
 * the bound tensors' shapes, then call the oneDNN (TS_BACKEND_FAST) or reference kernel; bf16/f16
 * nodes call the 16-bit kernels (conv.h), f32 ones the f32 kernels. */
#include "run_desc.h"

static int run_conv2d(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts__conv_desc d = ts__run_conv_desc(n, &in[0].shape, &in[1].shape, &out[0].shape);
  const float *b = n->nin == 3 ? in[2].data : NULL;
  if (out[0].dtype != TS_F32)
    return ts__conv2d_fwd_lp(&d, out[0].dtype, ctx->backend != TS_BACKEND_REF, in[0].data, in[1].data, b, out[0].data);
  if (ctx->backend == TS_BACKEND_REF) return ts__conv2d_fwd_ref(&d, in[0].data, in[1].data, b, out[0].data);
  return ts__conv2d_fwd_dnnl(&d, in[0].data, in[1].data, b, out[0].data);
}

/* (dy, w) -> dx */
static int run_conv2d_bwd_data(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts__conv_desc d = ts__run_conv_desc(n, &out[0].shape, &in[1].shape, &in[0].shape);
  if (out[0].dtype != TS_F32)
    return ts__conv2d_bwd_data_lp(&d, out[0].dtype, ctx->backend != TS_BACKEND_REF, in[0].data, in[1].data, out[0].data);
  if (ctx->backend == TS_BACKEND_REF) return ts__conv2d_bwd_data_ref(&d, in[0].data, in[1].data, out[0].data);
  return ts__conv2d_bwd_data_dnnl(&d, in[0].data, in[1].data, out[0].data);
}

/* (x, dy) -> dw[, db] */
static int run_conv2d_bwd_weight(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts__conv_desc d = ts__run_conv_desc(n, &in[0].shape, &out[0].shape, &in[1].shape);
  float *db = n->nout == 2 ? out[1].data : NULL;
  if (out[0].dtype != TS_F32)
    return ts__conv2d_bwd_weight_lp(&d, out[0].dtype, ctx->backend != TS_BACKEND_REF, in[0].data, in[1].data,
                                    out[0].data, db);
  if (ctx->backend == TS_BACKEND_REF)
    return ts__conv2d_bwd_weight_ref(&d, in[0].data, in[1].data, out[0].data, db);
  return ts__conv2d_bwd_weight_dnnl(&d, in[0].data, in[1].data, out[0].data, db);
}

void ts__register_run_conv(ts__run_fn *tab) {
  tab[TS_OP_CONV2D] = run_conv2d;
  tab[TS_OP_CONV2D_BWD_DATA] = run_conv2d_bwd_data;
  tab[TS_OP_CONV2D_BWD_WEIGHT] = run_conv2d_bwd_weight;
}
