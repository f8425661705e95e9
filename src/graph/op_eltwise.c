/* Eltwise family: ELTWISE, ELTWISE_BWD.
 *
 * Attributes (ts_attr_* accessors; tessera/ops.def):
 *   ELTWISE (x) -> y                 alg = ts_eltwise_alg
 *                                    alpha (relu: negative slope, 0 = plain relu)
 *                                    beta (reserved, 0)
 *   ELTWISE_BWD (dy, src) -> dx      alg, use_dst (1: src is the
 *                                    forward output y; 0: src is the forward input x),
 *                                    alpha, beta as the forward.
 * f32, bf16 or f16 (dy, src and dx share x's dtype), same shape in and out.
 *
 * Gradients: relu, sigmoid, tanh, exp and sqrt are differentiated from their output y (so x can
 * be freed after the forward); gelu, log, square and abs from their input x; neg's gradient is
 * a neg of dy. ELTWISE_BWD itself is not differentiable (no second-order gradients). */
#include <string.h>

#include "graph_ir.h"
#include "graph_impl.h"

#define VS(v, buf) ts__vstr(g, (v), buf, sizeof buf)

static const char *alg_names[TS_ELT_COUNT] = {"relu", "gelu_tanh", "gelu_erf", "sigmoid", "tanh",
                                              "exp", "log", "sqrt", "square", "abs", "neg"};

static const char *alg_name(int64_t alg) {
  return alg >= 0 && alg < TS_ELT_COUNT ? alg_names[alg] : "?";
}

/* Which algorithms differentiate from y (must match the kernels' use_dst support). */
static int bwd_uses_dst(int64_t alg) {
  return alg == TS_ELT_RELU || alg == TS_ELT_SIGMOID || alg == TS_ELT_TANH || alg == TS_ELT_EXP ||
         alg == TS_ELT_SQRT;
}

static int infer_eltwise(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b1[160];
  if (n->nin != 1 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "eltwise: expects 1 input and 1 output, got %d/%d", n->nin,
                          n->nout);
  const int64_t alg = ts_attr_eltwise_alg(&n->a);
  if (alg < 0 || alg >= TS_ELT_COUNT)
    return ts__graph_fail(g, TS_EINVAL, "eltwise: x %s: unknown algorithm %lld (valid 0..%d)",
                          VS(n->in[0], b1), (long long)alg, TS_ELT_COUNT - 1);
  const ts__value *x = ts__val(g, n->in[0]);
  static const char *const nm[1] = {"x"};
  if (ts__same_float(g, alg_name(alg), n->in, nm, 1, NULL)) return g->status;
  if (alg == TS_ELT_RELU && !(ts_attr_eltwise_alpha(&n->a) >= 0))
    return ts__graph_fail(g, TS_EINVAL, "relu: x %s: negative slope %g must be >= 0",
                          VS(n->in[0], b1), ts_attr_eltwise_alpha(&n->a));
  odt[0] = x->dtype;
  osh[0] = x->shape;
  return TS_OK;
}

static int infer_eltwise_bwd(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b1[160], b2[160];
  if (n->nin != 2 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "eltwise_bwd: expects inputs (dy, src) and 1 output, got %d/%d",
                          n->nin, n->nout);
  const int64_t alg = ts_attr_eltwise_alg(&n->a);
  if (alg < 0 || alg >= TS_ELT_COUNT || (ts_attr_eltwise_use_dst(&n->a) && !bwd_uses_dst(alg)))
    return ts__graph_fail(g, TS_EINVAL, "eltwise_bwd: algorithm %lld (%s) with use_dst=%lld is not supported",
                          (long long)alg, alg_name(alg), (long long)ts_attr_eltwise_use_dst(&n->a));
  const ts__value *dy = ts__val(g, n->in[0]), *s = ts__val(g, n->in[1]);
  static const char *const nm[2] = {"dy", "src"};
  if (ts__same_float(g, "eltwise_bwd", n->in, nm, 2, NULL)) return g->status;
  if (!ts_shape_equal(&dy->shape, &s->shape))
    return ts__graph_fail(g, TS_ESHAPE, "%s_bwd: dy %s and src %s must have the same shape",
                          alg_name(alg), VS(n->in[0], b1), VS(n->in[1], b2));
  odt[0] = dy->dtype;
  osh[0] = dy->shape;
  return TS_OK;
}

static int grad_eltwise(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  dx[0] = -1;
  if (dy[0] < 0 || g->vals[n.in[0]].no_grad) return TS_OK;
  ts_attrs a = n.a;
  const int64_t alg = ts_attr_eltwise_alg(&n.a);
  if (alg == TS_ELT_NEG) {
    dx[0] = ts__emit(g, TS_OP_ELTWISE, &dy[0], 1, &a);
  } else {
    ts_attr_set_eltwise_use_dst(&a, bwd_uses_dst(alg));
    int in[2] = {dy[0], ts_attr_eltwise_use_dst(&a) ? n.out[0] : n.in[0]};
    dx[0] = ts__emit(g, TS_OP_ELTWISE_BWD, in, 2, &a);
  }
  return dx[0] < 0 ? (g->status ? g->status : TS_EGRAPH) : TS_OK;
}

static ts_val eltwise(ts_graph *g, ts_val x, int alg, float alpha) {
  if (!g) return TS_NONE;
  int xi = ts__vidx(g, x, alg_name(alg));
  if (xi < 0) return TS_NONE;
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_eltwise_alg(&a, alg);
  ts_attr_set_eltwise_alpha(&a, alpha);
  return ts__add1(g, TS_OP_ELTWISE, &xi, 1, &a);
}

ts_val ts_eltwise(ts_graph *g, ts_val x, ts_eltwise_alg alg) { return eltwise(g, x, (int)alg, 0.0f); }
ts_val ts_relu(ts_graph *g, ts_val x) { return eltwise(g, x, TS_ELT_RELU, 0.0f); }
ts_val ts_gelu(ts_graph *g, ts_val x, int tanh_approx) {
  return eltwise(g, x, tanh_approx ? TS_ELT_GELU_TANH : TS_ELT_GELU_ERF, 0.0f);
}
ts_val ts_sigmoid(ts_graph *g, ts_val x) { return eltwise(g, x, TS_ELT_SIGMOID, 0.0f); }
ts_val ts_tanh(ts_graph *g, ts_val x) { return eltwise(g, x, TS_ELT_TANH, 0.0f); }

void ts__register_eltwise(ts__opdef *tab) {
  tab[TS_OP_ELTWISE] = (ts__opdef){"eltwise", infer_eltwise, grad_eltwise, 0};
  tab[TS_OP_ELTWISE_BWD] = (ts__opdef){"eltwise_bwd", infer_eltwise_bwd, NULL, 0};
}
