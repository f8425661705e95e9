/* Reduce family: SUM_TO, BROADCAST_TO, REDUCE (sum / mean / max over axes), REDUCE_MAX_BWD.
 *
 * Attributes (ts_attr_* accessors; tessera/ops.def):
 *   SUM_TO (x) -> y          shape = the target shape. The target must
 *                            broadcast to x (NumPy rules: aligned on the last dim, each target
 *                            dim equal to x's or 1; missing leading dims are summed away).
 *   BROADCAST_TO (x) -> y    same layout; x must broadcast to the target.
 *   REDUCE (x) -> y          alg = ts_reduce_alg, axes = bitmask (bit i = axis i),
 *                            keepdim (1: reduced axes stay as size 1; 0: removed).
 *   REDUCE_MAX_BWD (dy, x, y) -> dx      same attrs as the REDUCE it differentiates.
 * f32, bf16 or f16 (y has x's dtype; 16-bit sums accumulate in f32). A reduction over no
 * axis is rejected for ndim > 0 (say which axes to reduce).
 *
 * Gradients (only graph ops):
 *   SUM_TO        dx = BROADCAST_TO(dy, x)
 *   BROADCAST_TO  dx = SUM_TO(dy, x)
 *   REDUCE sum    dx = BROADCAST_TO(RESHAPE(dy, keepdim shape), x)
 *   REDUCE mean   the same with SCALE(1/count) applied to the small dy first
 *   REDUCE max    dx = REDUCE_MAX_BWD(dy, x, y): dy goes to the maxima, split equally between
 *                 ties (like torch.amax). */
#include <string.h>

#include "graph_ir.h"
#include "graph_impl.h"

#define VS(v, buf) ts__vstr(g, (v), buf, sizeof buf)

static const char *red_names[TS_RED_COUNT] = {"sum", "mean", "max"};

static const char *red_name(int64_t alg) {
  return alg >= 0 && alg < TS_RED_COUNT ? red_names[alg] : "reduce";
}

/* The target shape of a SUM_TO or BROADCAST_TO node. */
static ts_shape attr_shape(ts_op op, const ts_attrs *a) {
  return op == TS_OP_SUM_TO ? ts_attr_sum_to_shape(a) : ts_attr_broadcast_to_shape(a);
}

static int check_target(ts_graph *g, const char *op, int xi, const ts_shape *t) {
  char b1[160];
  if (t->ndim < 0 || t->ndim > TS_MAX_DIMS)
    return ts__graph_fail(g, TS_ESHAPE, "%s: x %s: target ndim %lld out of range 0..%d", op,
                          VS(xi, b1), (long long)t->ndim, TS_MAX_DIMS);
  for (int d = 0; d < t->ndim; d++)
    if (t->dims[d] <= 0)
      return ts__graph_fail(g, TS_ESHAPE, "%s: x %s: target dim %d is %lld (must be positive)", op,
                            VS(xi, b1), d, (long long)t->dims[d]);
  static const char *const nm[1] = {"x"};
  return ts__same_float(g, op, &xi, nm, 1, NULL);
}

/* 1 if `small` broadcasts to `big` (NumPy); else 0 with *bad_dim = offending dim of big. */
static int broadcasts_to(const ts_shape *small, const ts_shape *big, int *bad_dim) {
  if (small->ndim > big->ndim) {
    *bad_dim = -1;
    return 0;
  }
  for (int d = 0; d < small->ndim; d++) {
    int bd = d + big->ndim - small->ndim;
    if (small->dims[d] != big->dims[bd] && small->dims[d] != 1) {
      *bad_dim = bd;
      return 0;
    }
  }
  return 1;
}

static int infer_sum_to(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b1[160], s1[96];
  if (n->nin != 1 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "sum_to: expects 1 input and 1 output, got %d/%d", n->nin,
                          n->nout);
  ts_shape t = attr_shape(n->op, &n->a);
  int rc = check_target(g, "sum_to", n->in[0], &t);
  if (rc) return rc;
  const ts_shape *xs = &ts__val(g, n->in[0])->shape;
  int bad;
  if (!broadcasts_to(&t, xs, &bad))
    return ts__graph_fail(g, TS_ESHAPE,
                          "sum_to: x %s cannot be summed to %s: the target must broadcast to x "
                          "(%s)", VS(n->in[0], b1), ts_shape_str(&t, s1, sizeof s1),
                          bad < 0 ? "target has more dims" : "a target dim differs from x's and is not 1");
  odt[0] = ts__val(g, n->in[0])->dtype;
  osh[0] = t;
  return TS_OK;
}

static int infer_broadcast_to(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b1[160], s1[96];
  if (n->nin != 1 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "broadcast_to: expects 1 input and 1 output, got %d/%d",
                          n->nin, n->nout);
  ts_shape t = attr_shape(n->op, &n->a);
  int rc = check_target(g, "broadcast_to", n->in[0], &t);
  if (rc) return rc;
  const ts_shape *xs = &ts__val(g, n->in[0])->shape;
  int bad;
  if (!broadcasts_to(xs, &t, &bad))
    return ts__graph_fail(g, TS_ESHAPE,
                          "broadcast_to: x %s does not broadcast to %s (%s)", VS(n->in[0], b1),
                          ts_shape_str(&t, s1, sizeof s1),
                          bad < 0 ? "x has more dims" : "a dim of x differs from the target's and is not 1");
  odt[0] = ts__val(g, n->in[0])->dtype;
  osh[0] = t;
  return TS_OK;
}

static void pack_shape(ts_op op, ts_attrs *a, const ts_shape *s) {
  memset(a, 0, sizeof *a);
  if (op == TS_OP_SUM_TO)
    ts_attr_set_sum_to_shape(a, s);
  else
    ts_attr_set_broadcast_to_shape(a, s);
}

static int emit_broadcast_to(ts_graph *g, int x, const ts_shape *s) {
  if (x < 0) return -1;
  if (ts_shape_equal(&g->vals[x].shape, s)) return x;
  ts_attrs a;
  pack_shape(TS_OP_BROADCAST_TO, &a, s);
  return ts__emit(g, TS_OP_BROADCAST_TO, &x, 1, &a);
}

static int grad_sum_to(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  dx[0] = -1;
  if (dy[0] < 0 || g->vals[n.in[0]].no_grad) return TS_OK;
  const ts_shape xs = g->vals[n.in[0]].shape;
  dx[0] = emit_broadcast_to(g, dy[0], &xs);
  return dx[0] < 0 ? (g->status ? g->status : TS_EGRAPH) : TS_OK;
}

static int grad_broadcast_to(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  dx[0] = -1;
  if (dy[0] < 0 || g->vals[n.in[0]].no_grad) return TS_OK;
  const ts_shape xs = g->vals[n.in[0]].shape;
  dx[0] = ts__emit_sum_to(g, dy[0], &xs);
  return dx[0] < 0 ? (g->status ? g->status : TS_EGRAPH) : TS_OK;
}

/* ---------------------------------------------------------------- REDUCE */

/* keepdim shape of x reduced over mask; *count = number of reduced elements per output */
static ts_shape keep_shape(const ts_shape *xs, uint32_t mask, int64_t *count) {
  ts_shape k = *xs;
  int64_t c = 1;
  for (int d = 0; d < xs->ndim; d++)
    if (mask >> d & 1) {
      c *= xs->dims[d];
      k.dims[d] = 1;
    }
  if (count) *count = c;
  return k;
}

static ts_shape out_shape(const ts_shape *xs, uint32_t mask, int keepdim) {
  if (keepdim) return keep_shape(xs, mask, NULL);
  ts_shape o;
  memset(&o, 0, sizeof o);
  for (int d = 0; d < xs->ndim; d++)
    if (!(mask >> d & 1)) o.dims[o.ndim++] = xs->dims[d];
  return o;
}

static int check_reduce_attrs(ts_graph *g, const char *op, int xi, const ts_attrs *a) {
  char b1[160];
  const ts__value *x = ts__val(g, xi);
  const int64_t alg = ts_attr_reduce_alg(a), mask = ts_attr_reduce_axes(a), keep = ts_attr_reduce_keepdim(a);
  if (alg < 0 || alg >= TS_RED_COUNT)
    return ts__graph_fail(g, TS_EINVAL, "%s: x %s: unknown reduction %lld (valid 0..%d)", op,
                          VS(xi, b1), (long long)alg, TS_RED_COUNT - 1);
  if (keep != 0 && keep != 1)
    return ts__graph_fail(g, TS_EINVAL, "%s: x %s: keepdim must be 0 or 1 (got %lld)", op,
                          VS(xi, b1), (long long)keep);
  static const char *const nm[1] = {"x"};
  if (ts__same_float(g, op, &xi, nm, 1, NULL)) return g->status;
  if (mask < 0 || (mask >> x->shape.ndim) != 0) {
    int bad = 0;
    while (bad < 63 && !((mask >> bad & 1) && bad >= x->shape.ndim)) bad++;
    return ts__graph_fail(g, TS_EINVAL,
                          "%s: x %s: axes mask 0x%llx names axis %d, out of range for %d dims", op,
                          VS(xi, b1), (unsigned long long)mask, bad, x->shape.ndim);
  }
  if (mask == 0 && x->shape.ndim > 0)
    return ts__graph_fail(g, TS_EINVAL,
                          "%s: x %s: empty axes mask (set bit i to reduce axis i; all axes: 0x%x)",
                          op, VS(xi, b1), (1u << x->shape.ndim) - 1);
  return TS_OK;
}

static int infer_reduce(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  if (n->nin != 1 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "reduce: expects 1 input and 1 output, got %d/%d", n->nin,
                          n->nout);
  int rc = check_reduce_attrs(g, red_name(ts_attr_reduce_alg(&n->a)), n->in[0], &n->a);
  if (rc) return rc;
  odt[0] = ts__val(g, n->in[0])->dtype;
  osh[0] = out_shape(&ts__val(g, n->in[0])->shape, (uint32_t)ts_attr_reduce_axes(&n->a), (int)ts_attr_reduce_keepdim(&n->a));
  return TS_OK;
}

static int infer_reduce_max_bwd(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b1[160], b2[160], b3[160];
  if (n->nin != 3 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "reduce_max_bwd: expects inputs (dy, x, y) and 1 output, got %d/%d",
                          n->nin, n->nout);
  int rc = check_reduce_attrs(g, "reduce_max_bwd", n->in[1], &n->a);
  if (rc) return rc;
  const ts__value *dy = ts__val(g, n->in[0]), *x = ts__val(g, n->in[1]), *y = ts__val(g, n->in[2]);
  ts_shape want = out_shape(&x->shape, (uint32_t)ts_attr_reduce_axes(&n->a), (int)ts_attr_reduce_keepdim(&n->a));
  static const char *const nm[3] = {"dy", "x", "y"};
  if (ts__same_float(g, "reduce_max_bwd", n->in, nm, 3, NULL)) return g->status;
  if (!ts_shape_equal(&dy->shape, &want) || !ts_shape_equal(&y->shape, &want))
    return ts__graph_fail(g, TS_ESHAPE, "reduce_max_bwd: dy %s and y %s must be shaped like the reduction of x %s",
                          VS(n->in[0], b1), VS(n->in[2], b2), VS(n->in[1], b3));
  odt[0] = x->dtype;
  osh[0] = x->shape;
  return TS_OK;
}

static int grad_reduce(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  const int x = n.in[0];
  dx[0] = -1;
  if (dy[0] < 0 || g->vals[x].no_grad) return TS_OK;
  const ts_shape xs = g->vals[x].shape;
  if (ts_attr_reduce_alg(&n.a) == TS_RED_MAX) {
    int in[3] = {dy[0], x, n.out[0]};
    dx[0] = ts__emit(g, TS_OP_REDUCE_MAX_BWD, in, 3, &n.a);
  } else {
    int64_t count;
    ts_shape ks = keep_shape(&xs, (uint32_t)ts_attr_reduce_axes(&n.a), &count);
    int d = ts__emit_reshape(g, dy[0], &ks);
    if (ts_attr_reduce_alg(&n.a) == TS_RED_MEAN && d >= 0) {
      ts_attrs a;
      memset(&a, 0, sizeof a);
      ts_attr_set_scale_alpha(&a, (float)(1.0 / (double)count));
      d = ts__emit(g, TS_OP_SCALE, &d, 1, &a);
    }
    dx[0] = emit_broadcast_to(g, d, &xs);
  }
  return dx[0] < 0 ? (g->status ? g->status : TS_EGRAPH) : TS_OK;
}

/* ---------------------------------------------------------------- builders */

static ts_val shape_op(ts_graph *g, ts_val x, ts_shape shape, ts_op op, const char *name) {
  if (!g) return TS_NONE;
  int xi = ts__vidx(g, x, name);
  if (xi < 0) return TS_NONE;
  if (shape.ndim < 0 || shape.ndim > TS_MAX_DIMS) {
    char b1[160];
    ts__graph_fail(g, TS_ESHAPE, "%s: x %s: target ndim %d out of range 0..%d", name, VS(xi, b1),
                   shape.ndim, TS_MAX_DIMS);
    return TS_NONE;
  }
  ts_attrs a;
  pack_shape(op, &a, &shape);
  return ts__add1(g, op, &xi, 1, &a);
}

ts_val ts_sum_to(ts_graph *g, ts_val x, ts_shape shape) {
  return shape_op(g, x, shape, TS_OP_SUM_TO, "sum_to");
}
ts_val ts_broadcast_to(ts_graph *g, ts_val x, ts_shape shape) {
  return shape_op(g, x, shape, TS_OP_BROADCAST_TO, "broadcast_to");
}

ts_val ts_reduce(ts_graph *g, ts_val x, ts_reduce_alg alg, uint32_t axes_mask, int keepdim) {
  if (!g) return TS_NONE;
  int xi = ts__vidx(g, x, red_name(alg));
  if (xi < 0) return TS_NONE;
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_reduce_alg(&a, alg);
  ts_attr_set_reduce_axes(&a, axes_mask);
  ts_attr_set_reduce_keepdim(&a, keepdim ? 1 : 0);
  return ts__add1(g, TS_OP_REDUCE, &xi, 1, &a);
}
ts_val ts_sum(ts_graph *g, ts_val x, uint32_t axes_mask, int keepdim) {
  return ts_reduce(g, x, TS_RED_SUM, axes_mask, keepdim);
}
ts_val ts_mean(ts_graph *g, ts_val x, uint32_t axes_mask, int keepdim) {
  return ts_reduce(g, x, TS_RED_MEAN, axes_mask, keepdim);
}
ts_val ts_max(ts_graph *g, ts_val x, uint32_t axes_mask, int keepdim) {
  return ts_reduce(g, x, TS_RED_MAX, axes_mask, keepdim);
}

void ts__register_reduce(ts__opdef *tab) {
  tab[TS_OP_SUM_TO] = (ts__opdef){"sum_to", infer_sum_to, grad_sum_to, 0};
  tab[TS_OP_BROADCAST_TO] = (ts__opdef){"broadcast_to", infer_broadcast_to, grad_broadcast_to, 0};
  tab[TS_OP_REDUCE] = (ts__opdef){"reduce", infer_reduce, grad_reduce, 0};
  tab[TS_OP_REDUCE_MAX_BWD] = (ts__opdef){"reduce_max_bwd", infer_reduce_max_bwd, NULL, 0};
}
