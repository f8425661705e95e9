/* Misc family: CONST, CAST, COPY.
 *
 * Attributes (ts_attr_* accessors; tessera/ops.def):
 *   CONST  (no inputs) -> y    shape, dtype (ts_dtype), value = fill value
 *                               (the same layout autodiff uses for the loss seed)
 *   CAST   (x) -> y            dtype = target ts_dtype
 *   COPY   (x) -> y            none
 *
 * Gradients: CONST none; CAST casts dy back to x's dtype (float->float only; integer sides get
 * none); COPY passes dy through. */
#include <string.h>

#include "graph_ir.h"
#include "graph_impl.h"

/* ---------------------------------------------------------------- CONST */

static int infer_const(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  const ts_shape want = ts_attr_const_shape(&n->a);
  int64_t nd = want.ndim, dt = ts_attr_const_dtype(&n->a);
  if (n->nin != 0 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "const: takes no inputs and has 1 output, got %d/%d", n->nin, n->nout);
  if (dt < 0 || dt >= TS_DTYPE_COUNT)
    return ts__graph_fail(g, TS_EDTYPE, "const: invalid dtype %lld", (long long)dt);
  if (nd < 0 || nd > TS_MAX_DIMS)
    return ts__graph_fail(g, TS_ESHAPE, "const: ndim %lld out of range 0..%d", (long long)nd, TS_MAX_DIMS);
  ts_shape s;
  memset(&s, 0, sizeof s);
  s.ndim = (int)nd;
  for (int d = 0; d < s.ndim; d++) {
    s.dims[d] = want.dims[d];
    if (s.dims[d] <= 0) {
      char b[128];
      return ts__graph_fail(g, TS_ESHAPE, "const: dimension %d of %s must be positive", d,
                            ts_shape_str(&s, b, sizeof b));
    }
  }
  odt[0] = (ts_dtype)dt;
  osh[0] = s;
  return TS_OK;
}

ts_val ts_const(ts_graph *g, ts_dtype dt, ts_shape shape, float value) {
  if (!g || g->status) return TS_NONE;
  if (shape.ndim < 0 || shape.ndim > TS_MAX_DIMS) {
    ts__graph_fail(g, TS_ESHAPE, "const: ndim %d out of range 0..%d", shape.ndim, TS_MAX_DIMS);
    return TS_NONE;
  }
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_const_shape(&a, &shape);
  ts_attr_set_const_dtype(&a, dt);
  ts_attr_set_const_value(&a, value);
  return ts__add1(g, TS_OP_CONST, NULL, 0, &a);
}

/* ---------------------------------------------------------------- CAST */

static int infer_cast(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  int64_t dt = ts_attr_cast_dtype(&n->a);
  if (n->nin != 1 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "cast: expects 1 input and 1 output, got %d/%d", n->nin, n->nout);
  if (dt < 0 || dt >= TS_DTYPE_COUNT) {
    char b[160];
    return ts__graph_fail(g, TS_EDTYPE, "cast: invalid target dtype %lld for %s", (long long)dt,
                          ts__vstr(g, n->in[0], b, sizeof b));
  }
  odt[0] = (ts_dtype)dt;
  osh[0] = ts__val(g, n->in[0])->shape;
  return TS_OK;
}

ts_val ts_cast(ts_graph *g, ts_val x, ts_dtype dt) {
  if (!g) return TS_NONE;
  int xi = ts__vidx(g, x, "cast");
  if (xi < 0) return TS_NONE;
  if (g->vals[xi].dtype == dt) return x;
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_cast_dtype(&a, dt);
  return ts__add1(g, TS_OP_CAST, &xi, 1, &a);
}

static int grad_cast(ts_graph *g, int node, const int *dy, int *dx) {
  ts__node n = g->nodes[node];
  ts_dtype xdt = g->vals[n.in[0]].dtype;
  if (dy[0] < 0 || !ts_dtype_is_float(xdt) || !ts_dtype_is_float(g->vals[dy[0]].dtype)) return TS_OK;
  if (g->vals[dy[0]].dtype == xdt) {
    dx[0] = dy[0];
    return TS_OK;
  }
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_cast_dtype(&a, xdt);
  int in = dy[0];
  dx[0] = ts__emit(g, TS_OP_CAST, &in, 1, &a);
  return dx[0] < 0 ? g->status : TS_OK;
}

/* ---------------------------------------------------------------- COPY */

static int infer_copy(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  if (n->nin != 1 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "copy: expects 1 input and 1 output, got %d/%d", n->nin, n->nout);
  odt[0] = ts__val(g, n->in[0])->dtype;
  osh[0] = ts__val(g, n->in[0])->shape;
  return TS_OK;
}

ts_val ts_copy(ts_graph *g, ts_val x) {
  if (!g) return TS_NONE;
  int xi = ts__vidx(g, x, "copy");
  if (xi < 0) return TS_NONE;
  return ts__add1(g, TS_OP_COPY, &xi, 1, NULL);
}

static int grad_copy(ts_graph *g, int node, const int *dy, int *dx) {
  dx[0] = dy[0];
  return TS_OK;
}

void ts__register_misc(ts__opdef *tab) {
  tab[TS_OP_CONST] = (ts__opdef){"const", infer_const, NULL, 0};
  tab[TS_OP_CAST] = (ts__opdef){"cast", infer_cast, grad_cast, 0};
  tab[TS_OP_COPY] = (ts__opdef){"copy", infer_copy, grad_copy, 0};
}
