/* Executor adapters for causal attention: fused blocked kernels (FAST) or naive loops (REF).
 * Attribute layouts: src/graph/op_attention.c. */
#include "run_impl.h"
#include "../kernels/attention.h"

/* B,H,T,D of q's shape under the node's layout. */
static void dims_of(const ts_shape *s, int layout, int64_t *B, int64_t *H, int64_t *T, int64_t *D) {
  *B = s->dims[0];
  *D = s->dims[3];
  if (layout == TS_ATTN_BTHD) {
    *T = s->dims[1];
    *H = s->dims[2];
  } else {
    *H = s->dims[1];
    *T = s->dims[2];
  }
}

static int run_attention(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int layout = (int)ts_attr_attention_layout(&n->a);
  int64_t B, H, T, D;
  if (layout == TS_ATTN_QKV) {
    const float *qkv = in[0].data;
    B = in[0].shape.dims[0];
    T = in[0].shape.dims[1];
    H = ts_attr_attention_heads(&n->a);
    int64_t C = in[0].shape.dims[2] / 3;
    D = C / H;
    if (ctx->backend == TS_BACKEND_REF)
      return ts__attention_fwd_ref(qkv, qkv + C, qkv + 2 * C, out[0].data, out[1].data, B, H, T, D,
                                   ts_attr_attention_scale(&n->a), layout);
    return ts__attention_fwd_dnnl(qkv, qkv + C, qkv + 2 * C, out[0].data, out[1].data, B, H, T, D,
                                  ts_attr_attention_scale(&n->a), layout);
  }
  dims_of(&in[0].shape, layout, &B, &H, &T, &D);
  if (ctx->backend == TS_BACKEND_REF)
    return ts__attention_fwd_ref(in[0].data, in[1].data, in[2].data, out[0].data, out[1].data, B,
                                 H, T, D, ts_attr_attention_scale(&n->a), layout);
  return ts__attention_fwd_dnnl(in[0].data, in[1].data, in[2].data, out[0].data, out[1].data, B,
                                H, T, D, ts_attr_attention_scale(&n->a), layout);
}

static int run_attention_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int layout = (int)ts_attr_attention_layout(&n->a);
  int64_t B, H, T, D;
  if (layout == TS_ATTN_QKV) { /* (do, qkv, o, lse) -> dqkv */
    const float *qkv = in[1].data;
    float *d = out[0].data;
    B = in[1].shape.dims[0];
    T = in[1].shape.dims[1];
    H = ts_attr_attention_heads(&n->a);
    int64_t C = in[1].shape.dims[2] / 3;
    D = C / H;
    if (ctx->backend == TS_BACKEND_REF)
      return ts__attention_bwd_ref(in[0].data, qkv, qkv + C, qkv + 2 * C, in[2].data, in[3].data, d,
                                   d + C, d + 2 * C, B, H, T, D, ts_attr_attention_scale(&n->a), layout);
    return ts__attention_bwd_dnnl(in[0].data, qkv, qkv + C, qkv + 2 * C, in[2].data, in[3].data, d,
                                  d + C, d + 2 * C, B, H, T, D, ts_attr_attention_scale(&n->a), layout);
  }
  dims_of(&in[1].shape, layout, &B, &H, &T, &D);
  if (ctx->backend == TS_BACKEND_REF)
    return ts__attention_bwd_ref(in[0].data, in[1].data, in[2].data, in[3].data, in[4].data,
                                 in[5].data, out[0].data, out[1].data, out[2].data, B, H, T, D,
                                 ts_attr_attention_scale(&n->a), layout);
  return ts__attention_bwd_dnnl(in[0].data, in[1].data, in[2].data, in[3].data, in[4].data,
                                in[5].data, out[0].data, out[1].data, out[2].data, B, H, T, D,
                                ts_attr_attention_scale(&n->a), layout);
}

void ts__register_run_attention(ts__run_fn *tab) {
  tab[TS_OP_ATTENTION] = run_attention;
  tab[TS_OP_ATTENTION_BWD] = run_attention_bwd;
}
