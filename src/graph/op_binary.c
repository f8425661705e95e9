/* Binary family: BINARY (add/sub/mul/div with NumPy broadcasting), SCALE.
 *
 * Attributes (ts_attr_* accessors; tessera/ops.def):
 *   BINARY (a, b) -> y        alg = ts_binary_alg. a and b broadcast (NumPy rules: aligned on
 *                             the last dim, each dim equal or 1) to y. a, b share one float
 *                             dtype (f32, bf16, f16), y has it.
 *   SCALE  (x) -> y           alpha, beta: y = alpha*x + beta. Any float dtype, y has x's.
 *
 * Gradients (only graph ops; SUM_TO folds the broadcast dims back, skipped when shapes agree):
 *   add  da = SUM_TO(dy, a)            db = SUM_TO(dy, b)
 *   sub  da = SUM_TO(dy, a)            db = SCALE(SUM_TO(dy, b), -1)
 *   mul  da = SUM_TO(dy*b, a)          db = SUM_TO(dy*a, b)
 *   div  q = dy/b:  da = SUM_TO(q, a)  db = SCALE(SUM_TO(q*y, b), -1)     (d/db a/b = -y/b)
 *   scale dx = SCALE(dy, alpha, 0)
 * Inputs marked no-grad get no gradient ops. */
#include <string.h>

#include "graph_ir.h"
#include "graph_impl.h"

#define VS(v, buf) ts__vstr(g, (v), buf, sizeof buf)

static const char *bin_names[TS_BIN_COUNT] = {"add", "sub", "mul", "div"};

static const char *bin_name(int64_t alg) {
  return alg >= 0 && alg < TS_BIN_COUNT ? bin_names[alg] : "binary";
}

static int infer_binary(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b1[160], b2[160];
  if (n->nin != 2 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "binary: expects inputs (a, b) and 1 output, got %d/%d",
                          n->nin, n->nout);
  const int64_t alg = ts_attr_binary_alg(&n->a);
  const int ai = n->in[0], bi = n->in[1];
  if (alg < 0 || alg >= TS_BIN_COUNT)
    return ts__graph_fail(g, TS_EINVAL, "binary: a %s, b %s: unknown algorithm %lld (valid 0..%d)",
                          VS(ai, b1), VS(bi, b2), (long long)alg, TS_BIN_COUNT - 1);
  const ts__value *a = ts__val(g, ai), *b = ts__val(g, bi);
  static const char *const nm[2] = {"a", "b"};
  if (ts__same_float(g, bin_name(alg), n->in, nm, 2, NULL)) return g->status;
  ts_shape y;
  memset(&y, 0, sizeof y);
  const int na = a->shape.ndim, nb = b->shape.ndim, ny = na > nb ? na : nb;
  for (int d = 0; d < ny; d++) {
    int da = d - (ny - na), db = d - (ny - nb);
    int64_t sa = da >= 0 ? a->shape.dims[da] : 1, sb = db >= 0 ? b->shape.dims[db] : 1;
    if (sa != sb && sa != 1 && sb != 1)
      return ts__graph_fail(g, TS_ESHAPE,
                            "%s: a %s and b %s do not broadcast: dim %d (from the left of the "
                            "result) is %lld vs %lld; each must be equal or 1",
                            bin_name(alg), VS(ai, b1), VS(bi, b2), d, (long long)sa, (long long)sb);
    y.dims[d] = sa == 1 ? sb : sa;
  }
  y.ndim = ny;
  odt[0] = a->dtype;
  osh[0] = y;
  return TS_OK;
}

static int infer_scale(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b1[160];
  if (n->nin != 1 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "scale: expects 1 input and 1 output, got %d/%d", n->nin,
                          n->nout);
  const ts__value *x = ts__val(g, n->in[0]);
  static const char *const nm[1] = {"x"};
  if (ts__same_float(g, "scale", n->in, nm, 1, NULL)) return g->status;
  (void)b1;
  odt[0] = x->dtype;
  osh[0] = x->shape;
  return TS_OK;
}

static int emit_bin(ts_graph *g, int a, int b, int alg) {
  if (a < 0 || b < 0) return -1;
  ts_attrs at;
  memset(&at, 0, sizeof at);
  ts_attr_set_binary_alg(&at, alg);
  int in[2] = {a, b};
  return ts__emit(g, TS_OP_BINARY, in, 2, &at);
}

static int emit_scale(ts_graph *g, int x, float alpha, float beta) {
  if (x < 0) return -1;
  ts_attrs at;
  memset(&at, 0, sizeof at);
  ts_attr_set_scale_alpha(&at, alpha);
  ts_attr_set_scale_beta(&at, beta);
  return ts__emit(g, TS_OP_SCALE, &x, 1, &at);
}

static int grad_binary(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  const int a = n.in[0], b = n.in[1], d = dy[0], y = n.out[0];
  const ts_shape as = g->vals[a].shape, bs = g->vals[b].shape;
  const int need_a = !g->vals[a].no_grad, need_b = !g->vals[b].no_grad;
  dx[0] = dx[1] = -1;
  if (d < 0) return TS_OK;
  switch ((int)ts_attr_binary_alg(&n.a)) {
    case TS_BIN_ADD:
    case TS_BIN_SUB:
      if (need_a) dx[0] = ts__emit_sum_to(g, d, &as);
      if (need_b) {
        dx[1] = ts__emit_sum_to(g, d, &bs);
        if (ts_attr_binary_alg(&n.a) == TS_BIN_SUB) dx[1] = emit_scale(g, dx[1], -1.0f, 0.0f);
      }
      break;
    case TS_BIN_MUL:
      if (need_a) dx[0] = ts__emit_sum_to(g, emit_bin(g, d, b, TS_BIN_MUL), &as);
      if (need_b) dx[1] = ts__emit_sum_to(g, emit_bin(g, d, a, TS_BIN_MUL), &bs);
      break;
    case TS_BIN_DIV: {
      int q = emit_bin(g, d, b, TS_BIN_DIV);
      if (need_a) dx[0] = ts__emit_sum_to(g, q, &as);
      if (need_b) dx[1] = emit_scale(g, ts__emit_sum_to(g, emit_bin(g, q, y, TS_BIN_MUL), &bs), -1.0f, 0.0f);
      break;
    }
    default:
      return ts__graph_fail(g, TS_EINVAL, "binary: unknown algorithm %lld", (long long)ts_attr_binary_alg(&n.a));
  }
  if ((need_a && dx[0] < 0) || (need_b && dx[1] < 0)) return g->status ? g->status : TS_EGRAPH;
  return TS_OK;
}

static int grad_scale(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  dx[0] = -1;
  if (dy[0] < 0 || g->vals[n.in[0]].no_grad) return TS_OK;
  dx[0] = emit_scale(g, dy[0], ts_attr_scale_alpha(&n.a), 0.0f);
  return dx[0] < 0 ? (g->status ? g->status : TS_EGRAPH) : TS_OK;
}

ts_val ts_binary(ts_graph *g, ts_val a, ts_val b, ts_binary_alg alg) {
  if (!g) return TS_NONE;
  int in[2];
  const char *nm = bin_name(alg);
  if ((in[0] = ts__vidx(g, a, nm)) < 0 || (in[1] = ts__vidx(g, b, nm)) < 0) return TS_NONE;
  ts_attrs at;
  memset(&at, 0, sizeof at);
  ts_attr_set_binary_alg(&at, alg);
  return ts__add1(g, TS_OP_BINARY, in, 2, &at);
}

ts_val ts_add(ts_graph *g, ts_val a, ts_val b) { return ts_binary(g, a, b, TS_BIN_ADD); }
ts_val ts_sub(ts_graph *g, ts_val a, ts_val b) { return ts_binary(g, a, b, TS_BIN_SUB); }
ts_val ts_mul(ts_graph *g, ts_val a, ts_val b) { return ts_binary(g, a, b, TS_BIN_MUL); }
ts_val ts_div(ts_graph *g, ts_val a, ts_val b) { return ts_binary(g, a, b, TS_BIN_DIV); }

ts_val ts_scale(ts_graph *g, ts_val x, float alpha, float beta) {
  if (!g) return TS_NONE;
  int xi = ts__vidx(g, x, "scale");
  if (xi < 0) return TS_NONE;
  ts_attrs at;
  memset(&at, 0, sizeof at);
  ts_attr_set_scale_alpha(&at, alpha);
  ts_attr_set_scale_beta(&at, beta);
  return ts__add1(g, TS_OP_SCALE, &xi, 1, &at);
}

void ts__register_binary(ts__opdef *tab) {
  tab[TS_OP_BINARY] = (ts__opdef){"binary", infer_binary, grad_binary, 0};
  tab[TS_OP_SCALE] = (ts__opdef){"scale", infer_scale, grad_scale, 0};
}
