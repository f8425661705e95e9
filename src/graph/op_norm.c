/* Norm family: BATCHNORM, BATCHNORM_BWD, LAYERNORM, LAYERNORM_BWD.
 *
 * Attributes (ts_attr_* accessors; tessera/ops.def):
 *   BATCHNORM (x, gamma, beta, rmean, rvar) -> y, mean, var
 *       training (copied from the graph's training flag when the op is built)
 *       sync = 0, or 1 + the plan's communicator slot whose ranks share the training statistics
 *              (ts_graph_set_batchnorm_sync; the backward reduces its sums over them too)
 *       momentum, eps
 *       x (N,C,...) f32; gamma, beta, rmean, rvar (C) f32 -> y like x; mean, var (C).
 *       Training: normalises with the batch mean and biased variance, which become outputs
 *       mean/var, and UPDATES rmean/rvar IN PLACE (running = (1-momentum)*running +
 *       momentum*batch, unbiased variance, as PyTorch); rmean/rvar must therefore be leaf values
 *       (state values from ts_state_value, or inputs). Inference: normalises with rmean/rvar,
 *       which are copied to mean/var.
 *   BATCHNORM_BWD (dy, x, gamma, mean, var) -> dx, dgamma, dbeta
 *       training (1: full derivative through the batch statistics; 0: the statistics
 *       are constants and dx = dy*gamma/sqrt(var+eps), the per-channel scale of eval mode),
 *       sync = the forward's synchronisation slot, eps.
 *   LAYERNORM (x, gamma, beta) -> y, mean, var       eps
 *       x (...,D) f32, gamma, beta (D) -> y like x; mean, var (...) (x's shape without the last
 *       dim): mean and biased variance of each row.
 *   LAYERNORM_BWD (dy, x, gamma, mean, var) -> dx, dgamma, dbeta     eps
 *
 * Dtypes: x, y, dy, dx share one float dtype (f32, bf16, f16); gamma/beta (and dgamma/dbeta)
 * are f32 or x's dtype; mean/var (outputs and saved statistics) and batch norm's running
 * statistics always stay f32 (16-bit rows and channels reduce in f32).
 *
 * Gradients: BATCHNORM -> BATCHNORM_BWD with the forward's training flag (running stats and the
 * saved mean/var get none); LAYERNORM -> LAYERNORM_BWD. The _BWD ops are not differentiable. */
#include <math.h>
#include <string.h>

#include "graph_ir.h"
#include "graph_impl.h"

#define VS(v, buf) ts__vstr(g, (v), buf, sizeof buf)

/* A vector of n floats of dtype f32 (or `alt`: x's dtype, for gamma/beta/dgamma). */
static int is_vec_dt(const ts__value *v, int64_t n, ts_dtype alt) {
  return (v->dtype == TS_F32 || v->dtype == alt) && v->shape.ndim == 1 && v->shape.dims[0] == n;
}

/* x (and dy when dyi >= 0) float of one dtype; gamma (and beta when bi >= 0) of one dtype,
 * f32 or x's. */
static int check_dtypes(ts_graph *g, const char *op, int xi, int dyi, int gi, int bi) {
  char b1[160], b2[160];
  const int xs[2] = {xi, dyi};
  static const char *const nm[2] = {"x", "dy"};
  if (ts__same_float(g, op, xs, nm, dyi >= 0 ? 2 : 1, NULL)) return g->status;
  const ts_dtype xdt = ts__val(g, xi)->dtype, gdt = ts__val(g, gi)->dtype;
  if (gdt != TS_F32 && gdt != xdt)
    return ts__graph_fail(g, TS_EDTYPE, "%s: x %s and gamma %s: gamma/beta must be f32 or x's dtype",
                          op, VS(xi, b1), VS(gi, b2));
  if (bi >= 0 && ts__val(g, bi)->dtype != gdt)
    return ts__graph_fail(g, TS_EDTYPE, "%s: gamma %s and beta %s: mixed dtypes (insert ts_cast)", op,
                          VS(gi, b1), VS(bi, b2));
  return TS_OK;
}

static int infer_batchnorm(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b1[160], b2[160];
  static const char *names[5] = {"x", "gamma", "beta", "running_mean", "running_var"};
  if (n->nin != 5 || n->nout != 3)
    return ts__graph_fail(g, TS_EINVAL, "batchnorm: expects inputs (x, gamma, beta, rmean, rvar) and outputs (y, mean, var), got %d/%d",
                          n->nin, n->nout);
  const int xi = n->in[0];
  const ts__value *x = ts__val(g, xi);
  if (x->shape.ndim < 2)
    return ts__graph_fail(g, TS_ESHAPE, "batchnorm: x %s must have at least 2 dims (N,C,...)",
                          VS(xi, b1));
  if (check_dtypes(g, "batchnorm", xi, -1, n->in[1], n->in[2])) return g->status;
  const int64_t C = x->shape.dims[1], M = ts_shape_numel(&x->shape) / C;
  for (int k = 1; k < 5; k++)
    if (!is_vec_dt(ts__val(g, n->in[k]), C, k < 3 ? x->dtype : TS_F32))
      return ts__graph_fail(g, TS_ESHAPE, "batchnorm: x %s has %lld channels but %s %s is not %s (%lld)",
                            VS(xi, b1), (long long)C, names[k], VS(n->in[k], b2),
                            k < 3 ? "f32 or x's dtype" : "f32", (long long)C);
  const float mom = ts_attr_batchnorm_momentum(&n->a), eps = ts_attr_batchnorm_eps(&n->a);
  if (!(mom >= 0.0f && mom <= 1.0f) || !(eps >= 0.0f) || !isfinite(eps))
    return ts__graph_fail(g, TS_EINVAL, "batchnorm: x %s: momentum %g must be in [0,1] and eps %g >= 0",
                          VS(xi, b1), mom, eps);
  if (ts_attr_batchnorm_training(&n->a)) {
    if (M < 2)
      return ts__graph_fail(g, TS_ESHAPE,
                            "batchnorm: x %s: training needs more than 1 value per channel (got %lld)",
                            VS(xi, b1), (long long)M);
    for (int k = 3; k < 5; k++)
      if (ts__val(g, n->in[k])->producer >= 0)
        return ts__graph_fail(g, TS_EGRAPH,
                              "batchnorm: x %s: %s %s is updated in place in training mode and must "
                              "be a state value (ts_state_value), not computed by another op",
                              VS(xi, b1), names[k], VS(n->in[k], b2));
  }
  odt[0] = x->dtype;
  odt[1] = odt[2] = TS_F32;
  osh[0] = x->shape;
  osh[1] = osh[2] = ts_shape1(C);
  return TS_OK;
}

static int infer_batchnorm_bwd(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b1[160], b2[160];
  if (n->nin != 5 || n->nout != 3)
    return ts__graph_fail(g, TS_EINVAL, "batchnorm_bwd: expects inputs (dy, x, gamma, mean, var) and outputs (dx, dgamma, dbeta), got %d/%d",
                          n->nin, n->nout);
  const ts__value *dy = ts__val(g, n->in[0]), *x = ts__val(g, n->in[1]);
  if (check_dtypes(g, "batchnorm_bwd", n->in[1], n->in[0], n->in[2], -1)) return g->status;
  if (x->shape.ndim < 2 || !ts_shape_equal(&dy->shape, &x->shape))
    return ts__graph_fail(g, TS_ESHAPE, "batchnorm_bwd: dy %s and x %s must be of the same shape (N,C,...)",
                          VS(n->in[0], b1), VS(n->in[1], b2));
  const int64_t C = x->shape.dims[1];
  for (int k = 2; k < 5; k++)
    if (!is_vec_dt(ts__val(g, n->in[k]), C, k == 2 ? x->dtype : TS_F32))
      return ts__graph_fail(g, TS_ESHAPE, "batchnorm_bwd: x %s: input %d %s must be f32 (gamma: or x's dtype) of shape (%lld)",
                            VS(n->in[1], b1), k, VS(n->in[k], b2), (long long)C);
  if (ts_attr_batchnorm_training(&n->a) && ts_shape_numel(&x->shape) / C < 2)
    return ts__graph_fail(g, TS_ESHAPE, "batchnorm_bwd: x %s: training needs more than 1 value per channel",
                          VS(n->in[1], b1));
  odt[0] = x->dtype;
  odt[1] = odt[2] = ts__val(g, n->in[2])->dtype; /* dgamma, dbeta: gamma's dtype */
  osh[0] = x->shape;
  osh[1] = osh[2] = ts_shape1(C);
  return TS_OK;
}

static int infer_layernorm(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b1[160], b2[160];
  if (n->nin != 3 || n->nout != 3)
    return ts__graph_fail(g, TS_EINVAL, "layernorm: expects inputs (x, gamma, beta) and outputs (y, mean, var), got %d/%d",
                          n->nin, n->nout);
  const int xi = n->in[0];
  const ts__value *x = ts__val(g, xi);
  if (x->shape.ndim < 1)
    return ts__graph_fail(g, TS_ESHAPE, "layernorm: x %s must have at least 1 dim", VS(xi, b1));
  if (check_dtypes(g, "layernorm", xi, -1, n->in[1], n->in[2])) return g->status;
  const int64_t D = x->shape.dims[x->shape.ndim - 1];
  for (int k = 1; k < 3; k++)
    if (!is_vec_dt(ts__val(g, n->in[k]), D, x->dtype))
      return ts__graph_fail(g, TS_ESHAPE, "layernorm: x %s normalises over its last dim (%lld) but %s %s is not (%lld)",
                            VS(xi, b1), (long long)D, k == 1 ? "gamma" : "beta", VS(n->in[k], b2),
                            (long long)D);
  if (!(ts_attr_layernorm_eps(&n->a) >= 0.0f) || !isfinite(ts_attr_layernorm_eps(&n->a)))
    return ts__graph_fail(g, TS_EINVAL, "layernorm: x %s: eps %g must be >= 0", VS(xi, b1), ts_attr_layernorm_eps(&n->a));
  ts_shape st = x->shape;
  st.dims[--st.ndim] = 0;
  odt[0] = x->dtype;
  odt[1] = odt[2] = TS_F32; /* statistics stay f32 */
  osh[0] = x->shape;
  osh[1] = osh[2] = st;
  return TS_OK;
}

static int infer_layernorm_bwd(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b1[160], b2[160];
  if (n->nin != 5 || n->nout != 3)
    return ts__graph_fail(g, TS_EINVAL, "layernorm_bwd: expects inputs (dy, x, gamma, mean, var) and outputs (dx, dgamma, dbeta), got %d/%d",
                          n->nin, n->nout);
  const ts__value *dy = ts__val(g, n->in[0]), *x = ts__val(g, n->in[1]);
  if (check_dtypes(g, "layernorm_bwd", n->in[1], n->in[0], n->in[2], -1)) return g->status;
  if (x->shape.ndim < 1 || !ts_shape_equal(&dy->shape, &x->shape))
    return ts__graph_fail(g, TS_ESHAPE, "layernorm_bwd: dy %s and x %s must be of the same shape",
                          VS(n->in[0], b1), VS(n->in[1], b2));
  const int64_t D = x->shape.dims[x->shape.ndim - 1];
  ts_shape st = x->shape;
  st.dims[--st.ndim] = 0;
  const ts__value *gm = ts__val(g, n->in[2]), *m = ts__val(g, n->in[3]), *v = ts__val(g, n->in[4]);
  if (!is_vec_dt(gm, D, x->dtype) || m->dtype != TS_F32 || v->dtype != TS_F32 || !ts_shape_equal(&m->shape, &st) ||
      !ts_shape_equal(&v->shape, &st))
    return ts__graph_fail(g, TS_ESHAPE, "layernorm_bwd: x %s: gamma must be (D), mean/var x's shape without the last dim",
                          VS(n->in[1], b1));
  odt[0] = x->dtype;
  odt[1] = odt[2] = gm->dtype; /* dgamma, dbeta: gamma's dtype */
  osh[0] = x->shape;
  osh[1] = osh[2] = ts_shape1(D);
  return TS_OK;
}

/* Emits a 3-output backward node and hands out the gradients wanted by x, gamma, beta. */
static int emit_bwd3(ts_graph *g, ts_op op, const int *in, const ts_attrs *a, const int *fwd_in, int *dx) {
  int nd = ts__add_node(g, op, in, 5, 3, a);
  if (nd < 0) return g->status ? g->status : TS_EGRAPH;
  for (int k = 0; k < 3; k++) dx[k] = g->vals[fwd_in[k]].no_grad ? -1 : g->nodes[nd].out[k];
  return TS_OK;
}

static int grad_batchnorm(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  for (int k = 0; k < 5; k++) dx[k] = -1;
  if (dy[0] < 0) return TS_OK;
  if (g->vals[n.in[0]].no_grad && g->vals[n.in[1]].no_grad && g->vals[n.in[2]].no_grad) return TS_OK;
  int in[5] = {dy[0], n.in[0], n.in[1], n.out[1], n.out[2]};
  return emit_bwd3(g, TS_OP_BATCHNORM_BWD, in, &n.a, n.in, dx);
}

static int grad_layernorm(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  for (int k = 0; k < 3; k++) dx[k] = -1;
  if (dy[0] < 0) return TS_OK;
  if (g->vals[n.in[0]].no_grad && g->vals[n.in[1]].no_grad && g->vals[n.in[2]].no_grad) return TS_OK;
  int in[5] = {dy[0], n.in[0], n.in[1], n.out[1], n.out[2]};
  return emit_bwd3(g, TS_OP_LAYERNORM_BWD, in, &n.a, n.in, dx);
}

ts_val ts_batchnorm(ts_graph *g, ts_val x, ts_val gamma, ts_val beta, ts_val rmean, ts_val rvar,
                    float momentum, float eps) {
  if (!g) return TS_NONE;
  ts_val h[5] = {x, gamma, beta, rmean, rvar};
  int in[5];
  for (int k = 0; k < 5; k++)
    if ((in[k] = ts__vidx(g, h[k], "batchnorm")) < 0) return TS_NONE;
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_batchnorm_training(&a, g->training ? 1 : 0);
  ts_attr_set_batchnorm_sync(&a, g->bn_sync);
  ts_attr_set_batchnorm_momentum(&a, momentum);
  ts_attr_set_batchnorm_eps(&a, eps);
  int nd = ts__add_node(g, TS_OP_BATCHNORM, in, 5, 3, &a);
  if (nd < 0) return TS_NONE;
  g->vals[g->nodes[nd].out[1]].no_grad = 1; /* saved statistics: for the backward only */
  g->vals[g->nodes[nd].out[2]].no_grad = 1;
  return ts__handle(g, g->nodes[nd].out[0]);
}

ts_val ts_layernorm(ts_graph *g, ts_val x, ts_val gamma, ts_val beta, float eps) {
  if (!g) return TS_NONE;
  ts_val h[3] = {x, gamma, beta};
  int in[3];
  for (int k = 0; k < 3; k++)
    if ((in[k] = ts__vidx(g, h[k], "layernorm")) < 0) return TS_NONE;
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_layernorm_eps(&a, eps);
  int nd = ts__add_node(g, TS_OP_LAYERNORM, in, 3, 3, &a);
  if (nd < 0) return TS_NONE;
  g->vals[g->nodes[nd].out[1]].no_grad = 1;
  g->vals[g->nodes[nd].out[2]].no_grad = 1;
  return ts__handle(g, g->nodes[nd].out[0]);
}

void ts__register_norm(ts__opdef *tab) {
  tab[TS_OP_BATCHNORM] = (ts__opdef){"batchnorm", infer_batchnorm, grad_batchnorm, 0};
  tab[TS_OP_BATCHNORM_BWD] = (ts__opdef){"batchnorm_bwd", infer_batchnorm_bwd, NULL, 0};
  tab[TS_OP_LAYERNORM] = (ts__opdef){"layernorm", infer_layernorm, grad_layernorm, 0};
  tab[TS_OP_LAYERNORM_BWD] = (ts__opdef){"layernorm_bwd", infer_layernorm_bwd, NULL, 0};
}
