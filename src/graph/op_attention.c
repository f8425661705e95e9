/* Attention family: ATTENTION, ATTENTION_BWD (causal scaled-dot-product attention).
 *
 * Attributes (ts_attr_* accessors; tessera/ops.def), shared by both ops:
 *   scale (resolved: 1/sqrt(D) when the builder got 0)
 *   layout: 0 = (B,H,T,D) (ts_attention), 1 = (B,T,H,D) (ts_attention_bthd),
 *          2 = packed (B,T,3*H*D) q|k|v (ts_attention_qkv)
 *   heads = H (layout 2 only)
 *   layouts 0, 1:
 *   ATTENTION     (q,k,v) -> o (same shape as q), lse (B,H,T) f32 (log-sum-exp of each score row)
 *   q, k, v, o and the gradients share one float dtype (f32, bf16, f16); lse is always f32.
 *   ATTENTION_BWD (do,q,k,v,o,lse) -> dq, dk, dv
 *   layout 2:
 *   ATTENTION     (qkv (B,T,3C)) -> o (B,T,C), lse (B,H,T)        C = H*D
 *   ATTENTION_BWD (do,qkv,o,lse) -> dqkv (B,T,3C)
 *
 * Gradient: one ATTENTION_BWD node, which recomputes the probabilities from q, k and lse (no
 * T x T tensor is ever stored). lse is an auxiliary output; a gradient flowing into it is
 * rejected. */
#include <math.h>
#include <string.h>

#include "graph_ir.h"
#include "graph_impl.h"

#define VS(v, buf) ts__vstr(g, (v), buf, sizeof buf)

/* Checks that inputs ins[0..n-1] are 4-D tensors of one shape and one float dtype. */
static int same_qkv(ts_graph *g, const char *op, const int *ins, const char *const *names, int n) {
  char b[160], c[160];
  const ts__value *q = ts__val(g, ins[0]);
  if (ts__same_float(g, op, ins, names, n, NULL)) return g->status;
  for (int k = 0; k < n; k++) {
    const ts__value *x = ts__val(g, ins[k]);
    if (x->shape.ndim != 4)
      return ts__graph_fail(g, TS_ESHAPE, "%s: %s %s must be 4-D", op, names[k], VS(ins[k], b));
    if (!ts_shape_equal(&x->shape, &q->shape))
      return ts__graph_fail(g, TS_ESHAPE, "%s: %s %s does not have the shape of %s %s", op,
                            names[k], VS(ins[k], b), names[0], VS(ins[0], c));
  }
  return TS_OK;
}

static ts_shape lse_shape(const ts_shape *q, int64_t layout) {
  /* (B,H,T,D) -> (B,H,T);  (B,T,H,D) -> (B,H,T) */
  return layout == 1 ? ts_shape3(q->dims[0], q->dims[2], q->dims[1])
                     : ts_shape3(q->dims[0], q->dims[1], q->dims[2]);
}

static int check_attrs(ts_graph *g, const char *op, const ts__node *n) {
  if (ts_attr_attention_layout(&n->a) < 0 || ts_attr_attention_layout(&n->a) > 2)
    return ts__graph_fail(g, TS_EINVAL, "%s: unknown layout %lld (0 = BHTD, 1 = BTHD, 2 = QKV)", op,
                          (long long)ts_attr_attention_layout(&n->a));
  if (!(isfinite(ts_attr_attention_scale(&n->a)) && ts_attr_attention_scale(&n->a) > 0.0f))
    return ts__graph_fail(g, TS_EINVAL, "%s: scale %g must be positive and finite", op, (double)ts_attr_attention_scale(&n->a));
  return TS_OK;
}

/* Packed layout: qkv (B,T,3*H*D) f32 with H = heads; returns C = H*D (or -1 after failing). */
static int64_t check_packed(ts_graph *g, const char *op, const ts__node *n, int qkv) {
  char b[160];
  const ts__value *x = ts__val(g, qkv);
  int64_t H = ts_attr_attention_heads(&n->a);
  static const char *const nm[1] = {"qkv"};
  if (ts__same_float(g, op, &qkv, nm, 1, NULL)) return -1;
  if (x->shape.ndim != 3)
    return ts__graph_fail(g, TS_ESHAPE, "%s: qkv %s must be 3-D (B,T,3*C)", op, VS(qkv, b)), -1;
  if (H <= 0 || x->shape.dims[2] % (3 * H) != 0)
    return ts__graph_fail(g, TS_ESHAPE, "%s: last dim of qkv %s is not 3 * n_head (%lld) * head dim",
                          op, VS(qkv, b), (long long)H), -1;
  if (check_attrs(g, op, n)) return -1;
  return x->shape.dims[2] / 3;
}

static int infer_attention(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  static const char *const names[] = {"q", "k", "v"};
  if (ts_attr_attention_layout(&n->a) == 2) {
    if (n->nin != 1 || n->nout != 2)
      return ts__graph_fail(g, TS_EINVAL, "attention: packed layout expects 1 input (qkv) and 2 outputs, got %d/%d",
                            n->nin, n->nout);
    int64_t C = check_packed(g, "attention", n, n->in[0]);
    if (C < 0) return g->status;
    const ts_shape *x = &ts__val(g, n->in[0])->shape;
    odt[0] = ts__val(g, n->in[0])->dtype;
    odt[1] = TS_F32;
    osh[0] = ts_shape3(x->dims[0], x->dims[1], C);
    osh[1] = ts_shape3(x->dims[0], ts_attr_attention_heads(&n->a), x->dims[1]);
    return TS_OK;
  }
  if (n->nin != 3 || n->nout != 2)
    return ts__graph_fail(g, TS_EINVAL, "attention: expects 3 inputs (q,k,v) and 2 outputs, got %d/%d",
                          n->nin, n->nout);
  if (same_qkv(g, "attention", n->in, names, 3) || check_attrs(g, "attention", n)) return g->status;
  const ts_shape *q = &ts__val(g, n->in[0])->shape;
  odt[0] = ts__val(g, n->in[0])->dtype;
  osh[0] = *q;
  odt[1] = TS_F32;
  osh[1] = lse_shape(q, ts_attr_attention_layout(&n->a));
  return TS_OK;
}

int ts__attention_inputs(ts_graph *g, ts_val q, ts_val k, ts_val v, const char *op, int *in, float *scale) {
  ts_val h[3] = {q, k, v};
  for (int j = 0; j < 3; j++) {
    in[j] = ts__vidx(g, h[j], op);
    if (in[j] < 0) return -1;
  }
  if (g->status) return -1;
  const ts__value *qv = ts__val(g, in[0]);
  if (*scale == 0.0f && qv->shape.ndim == 4 && qv->shape.dims[3] > 0)
    *scale = (float)(1.0 / sqrt((double)qv->shape.dims[3]));
  return 0;
}

static ts_val attention(ts_graph *g, ts_val q, ts_val k, ts_val v, float scale, int layout) {
  int in[3];
  if (!g || ts__attention_inputs(g, q, k, v, "attention", in, &scale)) return TS_NONE;
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_attention_scale(&a, scale);
  ts_attr_set_attention_layout(&a, layout);
  int nd = ts__add_node(g, TS_OP_ATTENTION, in, 3, 2, &a);
  return nd < 0 ? TS_NONE : ts__handle(g, g->nodes[nd].out[0]);
}

ts_val ts_attention(ts_graph *g, ts_val q, ts_val k, ts_val v, float scale) {
  return attention(g, q, k, v, scale, 0);
}

ts_val ts_attention_bthd(ts_graph *g, ts_val q, ts_val k, ts_val v, float scale) {
  return attention(g, q, k, v, scale, 1);
}

ts_val ts_attention_qkv(ts_graph *g, ts_val qkv, int n_head, float scale) {
  if (!g) return TS_NONE;
  int in = ts__vidx(g, qkv, "attention");
  if (in < 0 || g->status) return TS_NONE;
  const ts__value *x = ts__val(g, in);
  if (scale == 0.0f && n_head > 0 && x->shape.ndim == 3 && x->shape.dims[2] % (3 * n_head) == 0 &&
      x->shape.dims[2] > 0)
    scale = (float)(1.0 / sqrt((double)(x->shape.dims[2] / (3 * n_head))));
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_attention_scale(&a, scale);
  ts_attr_set_attention_layout(&a, 2);
  ts_attr_set_attention_heads(&a, n_head);
  int nd = ts__add_node(g, TS_OP_ATTENTION, &in, 1, 2, &a);
  return nd < 0 ? TS_NONE : ts__handle(g, g->nodes[nd].out[0]);
}

static int grad_attention(ts_graph *g, int node, const int *dy, int *dx) {
  ts__node n = g->nodes[node];
  if (dy[1] >= 0)
    return ts__graph_fail(g, TS_EUNSUPPORTED,
                          "attention: gradient through the lse output of %s is not supported", n.name);
  if (dy[0] < 0) return TS_OK;
  if (ts_attr_attention_layout(&n.a) == 2) {
    int in4[4] = {dy[0], n.in[0], n.out[0], n.out[1]};
    dx[0] = ts__emit(g, TS_OP_ATTENTION_BWD, in4, 4, &n.a);
    return dx[0] < 0 ? g->status : TS_OK;
  }
  int in[6] = {dy[0], n.in[0], n.in[1], n.in[2], n.out[0], n.out[1]};
  int nb = ts__add_node(g, TS_OP_ATTENTION_BWD, in, 6, 3, &n.a);
  if (nb < 0) return g->status;
  for (int k = 0; k < 3; k++) dx[k] = g->nodes[nb].out[k];
  return TS_OK;
}

static int infer_attention_bwd(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  static const char *const names[] = {"do", "q", "k", "v", "o"};
  char b[160];
  if (ts_attr_attention_layout(&n->a) == 2) {
    if (n->nin != 4 || n->nout != 1)
      return ts__graph_fail(g, TS_EINVAL,
                            "attention_bwd: packed layout expects 4 inputs (do,qkv,o,lse) and 1 output, got %d/%d",
                            n->nin, n->nout);
    int64_t C = check_packed(g, "attention_bwd", n, n->in[1]);
    if (C < 0) return g->status;
    const ts_shape *x = &ts__val(g, n->in[1])->shape;
    ts_shape os = ts_shape3(x->dims[0], x->dims[1], C), ls = ts_shape3(x->dims[0], ts_attr_attention_heads(&n->a), x->dims[1]);
    for (int k = 0; k < 3; k += 2) { /* do and o */
      const ts__value *v = ts__val(g, n->in[k]);
      const int pair[2] = {n->in[1], n->in[k]};
      const char *const nm[2] = {"qkv", k ? "o" : "do"};
      if (ts__same_float(g, "attention_bwd", pair, nm, 2, NULL)) return g->status;
      if (!ts_shape_equal(&v->shape, &os))
        return ts__graph_fail(g, TS_ESHAPE, "attention_bwd: %s %s must be (B,T,C)",
                              k ? "o" : "do", VS(n->in[k], b));
    }
    const ts__value *lse = ts__val(g, n->in[3]);
    if (lse->dtype != TS_F32 || !ts_shape_equal(&lse->shape, &ls))
      return ts__graph_fail(g, TS_ESHAPE, "attention_bwd: lse %s must be f32 (B,H,T)", VS(n->in[3], b));
    odt[0] = ts__val(g, n->in[1])->dtype;
    osh[0] = *x;
    return TS_OK;
  }
  if (n->nin != 6 || n->nout != 3)
    return ts__graph_fail(g, TS_EINVAL,
                          "attention_bwd: expects 6 inputs (do,q,k,v,o,lse) and 3 outputs, got %d/%d",
                          n->nin, n->nout);
  if (same_qkv(g, "attention_bwd", n->in, names, 5) || check_attrs(g, "attention_bwd", n))
    return g->status;
  const ts_shape *q = &ts__val(g, n->in[1])->shape;
  ts_shape ls = lse_shape(q, ts_attr_attention_layout(&n->a));
  const ts__value *lse = ts__val(g, n->in[5]);
  if (lse->dtype != TS_F32 || !ts_shape_equal(&lse->shape, &ls))
    return ts__graph_fail(g, TS_ESHAPE, "attention_bwd: lse %s must be f32 (B,H,T)", VS(n->in[5], b));
  for (int k = 0; k < 3; k++) {
    odt[k] = ts__val(g, n->in[1])->dtype;
    osh[k] = *q;
  }
  return TS_OK;
}

void ts__register_attention(ts__opdef *tab) {
  tab[TS_OP_ATTENTION] = (ts__opdef){"attention", infer_attention, grad_attention, 0};
  tab[TS_OP_ATTENTION_BWD] = (ts__opdef){"attention_bwd", infer_attention_bwd, NULL, 0};
}
