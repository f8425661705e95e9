/* Executor adapters for the conv family: build a ts__conv_desc from the node's attributes and
 * the bound tensors' shapes, then call the oneDNN (TS_BACKEND_FAST) or reference kernel; bf16/f16
 * nodes call the 16-bit kernels (conv.h), f32 ones the f32 kernels. */
#include "graph/graph_ir.h"
#include "run_impl.h"
#include "../kernels/conv.h"

/* x (N,C,H,W), w (O,C/g,KH,KW), y (N,O,OH,OW): attrs as documented in op_conv.c. */
static ts__conv_desc desc(const ts__run_node *n, const ts_shape *x, const ts_shape *w, const ts_shape *y) {
  ts__conv_desc d;
  d.N = x->dims[0], d.C = x->dims[1], d.H = x->dims[2], d.W = x->dims[3];
  d.O = w->dims[0], d.KH = w->dims[2], d.KW = w->dims[3];
  d.OH = y->dims[2], d.OW = y->dims[3];
  d.sh = ts_attr_conv2d_stride_h(&n->a), d.sw = ts_attr_conv2d_stride_w(&n->a), d.ph = ts_attr_conv2d_pad_h(&n->a), d.pw = ts_attr_conv2d_pad_w(&n->a);
  d.dh = ts_attr_conv2d_dil_h(&n->a), d.dw = ts_attr_conv2d_dil_w(&n->a), d.groups = ts_attr_conv2d_groups(&n->a);
  return d;
}

static int run_conv2d(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts__conv_desc d = desc(n, &in[0].shape, &in[1].shape, &out[0].shape);
  const float *b = n->nin == 3 ? in[2].data : NULL;
  if (out[0].dtype != TS_F32)
    return ts__conv2d_fwd_lp(&d, out[0].dtype, ctx->backend != TS_BACKEND_REF, in[0].data, in[1].data, b, out[0].data);
  if (ctx->backend == TS_BACKEND_REF) return ts__conv2d_fwd_ref(&d, in[0].data, in[1].data, b, out[0].data);
  return ts__conv2d_fwd_dnnl(&d, in[0].data, in[1].data, b, out[0].data);
}

/* (dy, w) -> dx */
static int run_conv2d_bwd_data(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts__conv_desc d = desc(n, &out[0].shape, &in[1].shape, &in[0].shape);
  if (out[0].dtype != TS_F32)
    return ts__conv2d_bwd_data_lp(&d, out[0].dtype, ctx->backend != TS_BACKEND_REF, in[0].data, in[1].data, out[0].data);
  if (ctx->backend == TS_BACKEND_REF) return ts__conv2d_bwd_data_ref(&d, in[0].data, in[1].data, out[0].data);
  return ts__conv2d_bwd_data_dnnl(&d, in[0].data, in[1].data, out[0].data);
}

/* (x, dy) -> dw[, db] */
static int run_conv2d_bwd_weight(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts__conv_desc d = desc(n, &in[0].shape, &out[0].shape, &in[1].shape);
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
