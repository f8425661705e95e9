/* Internal: a node's kernel descriptor from its attributes and its tensors' shapes, shared by the
 * CPU adapters (run_matmul.c, run_conv.c, run_pool.c, run_norm.c, run_reduce.c) and the GPU's
 * (run_gpu.c), so both kernel tables read a node the same way. */
#ifndef TS_RUN_DESC_H
#define TS_RUN_DESC_H

#include "graph/graph_ir.h"
#include "run_impl.h"
#include "../kernels/conv.h"
#include "../kernels/matmul.h"
#include "../kernels/pool.h"

/* MATMUL: a (as), b (bs) -> y (ys); the batch from y, an operand batched when it has > 2 dims */
static inline ts__mm_desc ts__run_mm_desc(const ts__run_node *n, const ts_shape *as, const ts_shape *bs,
                                          const ts_shape *ys) {
  ts__mm_desc d;
  d.trans_a = (int)ts_attr_matmul_trans_a(&n->a);
  d.trans_b = (int)ts_attr_matmul_trans_b(&n->a);
  d.M = ys->dims[ys->ndim - 2];
  d.N = ys->dims[ys->ndim - 1];
  d.K = as->dims[as->ndim - (d.trans_a ? 2 : 1)];
  d.batch = ts_shape_numel(ys) / (d.M * d.N);
  d.a_batched = as->ndim > 2;
  d.b_batched = bs->ndim > 2;
  return d;
}

/* CONV2D family: x (N,C,H,W), w (O,C/g,KH,KW), y (N,O,OH,OW); attrs as documented in op_conv.c */
static inline ts__conv_desc ts__run_conv_desc(const ts__run_node *n, const ts_shape *x, const ts_shape *w,
                                              const ts_shape *y) {
  ts__conv_desc d;
  d.N = x->dims[0], d.C = x->dims[1], d.H = x->dims[2], d.W = x->dims[3];
  d.O = w->dims[0], d.KH = w->dims[2], d.KW = w->dims[3];
  d.OH = y->dims[2], d.OW = y->dims[3];
  d.sh = ts_attr_conv2d_stride_h(&n->a), d.sw = ts_attr_conv2d_stride_w(&n->a), d.ph = ts_attr_conv2d_pad_h(&n->a),
  d.pw = ts_attr_conv2d_pad_w(&n->a);
  d.dh = ts_attr_conv2d_dil_h(&n->a), d.dw = ts_attr_conv2d_dil_w(&n->a), d.groups = ts_attr_conv2d_groups(&n->a);
  return d;
}

/* pooling: x (N,C,H,W), y (N,C,OH,OW); attrs as documented in op_pool.c */
static inline ts__pool_desc ts__run_pool_desc(const ts__run_node *n, const ts_shape *x, const ts_shape *y) {
  ts__pool_desc d;
  d.N = x->dims[0], d.C = x->dims[1], d.H = x->dims[2], d.W = x->dims[3];
  d.OH = y->dims[2], d.OW = y->dims[3];
  d.kh = ts_attr_pool2d_kh(&n->a), d.kw = ts_attr_pool2d_kw(&n->a), d.sh = ts_attr_pool2d_sh(&n->a),
  d.sw = ts_attr_pool2d_sw(&n->a);
  d.ph = ts_attr_pool2d_ph(&n->a), d.pw = ts_attr_pool2d_pw(&n->a);
  return d;
}

/* batch norm's x (N, C, spatial...) as (N, C, S) */
static inline void ts__run_bn_dims(const ts_shape *s, int64_t *N, int64_t *C, int64_t *S) {
  *N = s->dims[0];
  *C = s->dims[1];
  *S = 1;
  for (int d = 2; d < s->ndim; d++) *S *= s->dims[d];
}

/* the keepdim shape of a REDUCE node's output (its memory layout): xs with the masked dims 1 */
static inline ts_shape ts__run_keep_shape(const ts_shape *xs, uint32_t mask) {
  ts_shape k = *xs;
  for (int d = 0; d < xs->ndim; d++)
    if (mask >> d & 1) k.dims[d] = 1;
  return k;
}

#endif
