/* Executor adapters for causal attention: fused blocked kernels (FAST) or naive loops (REF), on
 * f32 or 16-bit tensors (the _lp entry points call the f32 kernels for f32; lse is always f32).
 * Attribute layouts: src/graph/op_attention.c. */
#include "graph/graph_ir.h"
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

/* The column block j of a packed (B,T,3C) q|k|v tensor (or its gradient). */
static void *block(const ts_tensor *t, int j, int64_t C) {
  return (char *)t->data + (size_t)(j * C) * ts_dtype_size(t->dtype);
}

static int run_attention(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int layout = (int)ts_attr_attention_layout(&n->a), fast = ctx->backend != TS_BACKEND_REF;
  const float scale = ts_attr_attention_scale(&n->a);
  const ts_dtype dt = out[0].dtype;
  int64_t B, H, T, D;
  if (layout == TS_ATTN_QKV) {
    B = in[0].shape.dims[0];
    T = in[0].shape.dims[1];
    H = ts_attr_attention_heads(&n->a);
    int64_t C = in[0].shape.dims[2] / 3;
    D = C / H;
    return ts__attention_fwd_lp(dt, block(&in[0], 0, C), block(&in[0], 1, C), block(&in[0], 2, C), out[0].data,
                                out[1].data, B, H, T, D, scale, layout, fast);
  }
  dims_of(&in[0].shape, layout, &B, &H, &T, &D);
  return ts__attention_fwd_lp(dt, in[0].data, in[1].data, in[2].data, out[0].data, out[1].data, B, H, T, D, scale,
                              layout, fast);
}

static int run_attention_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int layout = (int)ts_attr_attention_layout(&n->a), fast = ctx->backend != TS_BACKEND_REF;
  const float scale = ts_attr_attention_scale(&n->a);
  const ts_dtype dt = out[0].dtype;
  int64_t B, H, T, D;
  if (layout == TS_ATTN_QKV) { /* (do, qkv, o, lse) -> dqkv */
    B = in[1].shape.dims[0];
    T = in[1].shape.dims[1];
    H = ts_attr_attention_heads(&n->a);
    int64_t C = in[1].shape.dims[2] / 3;
    D = C / H;
    return ts__attention_bwd_lp(dt, in[0].data, block(&in[1], 0, C), block(&in[1], 1, C), block(&in[1], 2, C),
                                in[2].data, in[3].data, block(&out[0], 0, C), block(&out[0], 1, C),
                                block(&out[0], 2, C), B, H, T, D, scale, layout, fast);
  }
  dims_of(&in[1].shape, layout, &B, &H, &T, &D);
  return ts__attention_bwd_lp(dt, in[0].data, in[1].data, in[2].data, in[3].data, in[4].data, in[5].data,
                              out[0].data, out[1].data, out[2].data, B, H, T, D, scale, layout, fast);
}

void ts__register_run_attention(ts__run_fn *tab) {
  tab[TS_OP_ATTENTION] = run_attention;
  tab[TS_OP_ATTENTION_BWD] = run_attention_bwd;
}
