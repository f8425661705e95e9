/* Shape family: RESHAPE, PERMUTE, CONCAT, SPLIT, SLICE, SLICE_BWD.
 *
 * Attributes (ts_attr_* accessors; tessera/ops.def):
 *   RESHAPE   (x) -> y           shape (resolved: no -1). A view (opdef
 *                                view=1): the executor aliases y to x.
 *   PERMUTE   (x) -> y           perm[0..n-1], n = ndim of x; y.dims[k] = x.dims[perm[k]]
 *   CONCAT    (x1..xn) -> y      axis (normalised, >= 0); n <= TS_GRAPH_MAX_IO inputs
 *   SPLIT     (x) -> y1..yn      axis, sizes[0..n-1] along axis (n <= TS_ATTRS_MAX_I-1)
 *   SLICE     (x) -> y           axis, start, end (0 <= start < end <= dim),
 *                                len = x's length along axis
 *   SLICE_BWD (dy) -> dx         same attrs as SLICE; dx has length len along axis, dy placed at
 *                                [start,end), zeros elsewhere
 *
 * Gradients: reshape -> reshape back; permute -> inverse permute; concat -> one SLICE per input
 * that can take a gradient; split -> CONCAT of the output gradients (zero CONSTs for outputs
 * without one); slice -> SLICE_BWD; slice_bwd -> SLICE. */
#include <stdio.h>
#include <string.h>

#include "graph_ir.h"
#include "graph_impl.h"

#define VS(v, buf) ts__vstr(g, (v), buf, sizeof buf)

static int need_io(ts_graph *g, const ts__node *n, const char *op, int nin, int nout) {
  if ((nin >= 0 && n->nin != nin) || (nout >= 0 && n->nout != nout))
    return ts__graph_fail(g, TS_EINVAL, "%s: expects %d input(s) and %d output(s), got %d/%d", op,
                          nin, nout, n->nin, n->nout);
  return TS_OK;
}

static int norm_axis(ts_graph *g, const char *op, int axis, int ndim, int x) {
  if (axis < -ndim || axis >= ndim) {
    char b[160];
    ts__graph_fail(g, TS_ESHAPE, "%s: axis %d out of range for %s (ndim %d)", op, axis,
                   ts__vstr(g, x, b, sizeof b), ndim);
    return -1;
  }
  return axis < 0 ? axis + ndim : axis;
}

/* ---------------------------------------------------------------- RESHAPE */

static int infer_reshape(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  if (need_io(g, n, "reshape", 1, 1)) return g->status;
  const ts__value *x = ts__val(g, n->in[0]);
  ts_shape s;
  memset(&s, 0, sizeof s);
  char b[160], c[128];
  s = ts_attr_reshape_shape(&n->a);
  if (s.ndim < 0 || s.ndim > TS_MAX_DIMS)
    return ts__graph_fail(g, TS_ESHAPE, "reshape: target ndim %lld out of range 0..%d for %s",
                          (long long)s.ndim, TS_MAX_DIMS, VS(n->in[0], b));
  for (int d = 0; d < s.ndim; d++)
    if (s.dims[d] <= 0)
      return ts__graph_fail(g, TS_ESHAPE, "reshape: target %s of %s has a non-positive dimension",
                            ts_shape_str(&s, c, sizeof c), VS(n->in[0], b));
  if (ts_shape_numel(&s) != ts_shape_numel(&x->shape))
    return ts__graph_fail(g, TS_ESHAPE,
                          "reshape: cannot reshape %s (%lld elements) into %s (%lld elements)",
                          VS(n->in[0], b), (long long)ts_shape_numel(&x->shape),
                          ts_shape_str(&s, c, sizeof c), (long long)ts_shape_numel(&s));
  odt[0] = x->dtype;
  osh[0] = s;
  return TS_OK;
}

ts_val ts_reshape(ts_graph *g, ts_val x, ts_shape shape) {
  if (!g) return TS_NONE;
  int xi = ts__vidx(g, x, "reshape");
  if (xi < 0 || g->status) return TS_NONE;
  char b[160], c[128];
  if (shape.ndim < 0 || shape.ndim > TS_MAX_DIMS) {
    ts__graph_fail(g, TS_ESHAPE, "reshape: target ndim %d out of range 0..%d for %s", shape.ndim,
                   TS_MAX_DIMS, VS(xi, b));
    return TS_NONE;
  }
  int64_t numel = ts_shape_numel(&g->vals[xi].shape), known = 1;
  int neg = -1;
  for (int d = 0; d < shape.ndim; d++) {
    if (shape.dims[d] == -1 && neg < 0) {
      neg = d;
    } else if (shape.dims[d] <= 0) {
      ts__graph_fail(g, TS_ESHAPE,
                     "reshape: bad target %s for %s: dims must be positive, with at most one -1",
                     ts_shape_str(&shape, c, sizeof c), VS(xi, b));
      return TS_NONE;
    } else {
      known *= shape.dims[d];
    }
  }
  if (neg >= 0) {
    if (known == 0 || numel % known != 0) {
      ts__graph_fail(g, TS_ESHAPE, "reshape: cannot reshape %s (%lld elements) into %s",
                     VS(xi, b), (long long)numel, ts_shape_str(&shape, c, sizeof c));
      return TS_NONE;
    }
    shape.dims[neg] = numel / known;
  }
  if (ts_shape_equal(&shape, &g->vals[xi].shape)) return x;
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_reshape_shape(&a, &shape);
  return ts__add1(g, TS_OP_RESHAPE, &xi, 1, &a);
}

ts_val ts_flatten(ts_graph *g, ts_val x, int start_dim) {
  if (!g) return TS_NONE;
  int xi = ts__vidx(g, x, "flatten");
  if (xi < 0 || g->status) return TS_NONE;
  ts_shape s = g->vals[xi].shape;
  if (s.ndim == 0) return ts_reshape(g, x, ts_shape1(1));
  int sd = norm_axis(g, "flatten", start_dim, s.ndim, xi);
  if (sd < 0) return TS_NONE;
  ts_shape t;
  memset(&t, 0, sizeof t);
  t.ndim = sd + 1;
  for (int d = 0; d < sd; d++) t.dims[d] = s.dims[d];
  t.dims[sd] = 1;
  for (int d = sd; d < s.ndim; d++) t.dims[sd] *= s.dims[d];
  return ts_reshape(g, x, t);
}

static int grad_reshape(ts_graph *g, int node, const int *dy, int *dx) {
  ts_shape xs = g->vals[g->nodes[node].in[0]].shape;
  dx[0] = ts__emit_reshape(g, dy[0], &xs);
  return dx[0] < 0 ? g->status : TS_OK;
}

/* ---------------------------------------------------------------- PERMUTE */

static int infer_permute(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  if (need_io(g, n, "permute", 1, 1)) return g->status;
  const ts__value *x = ts__val(g, n->in[0]);
  int nd = x->shape.ndim, seen[TS_MAX_DIMS] = {0};
  char b[160], p[96];
  size_t pl = 0;
  p[0] = 0;
  for (int k = 0; k < nd && pl < sizeof p; k++)
    pl += (size_t)snprintf(p + pl, sizeof p - pl, "%s%lld", k ? "," : "", (long long)ts_attr_permute_perm(&n->a, k));
  for (int k = 0; k < nd; k++) {
    int64_t v = ts_attr_permute_perm(&n->a, k);
    if (v < 0 || v >= nd || seen[v])
      return ts__graph_fail(g, TS_ESHAPE,
                            "permute: (%s) is not a permutation of 0..%d for %s", p, nd - 1,
                            VS(n->in[0], b));
    seen[v] = 1;
  }
  odt[0] = x->dtype;
  osh[0] = x->shape;
  for (int k = 0; k < nd; k++) osh[0].dims[k] = x->shape.dims[ts_attr_permute_perm(&n->a, k)];
  return TS_OK;
}

ts_val ts_permute(ts_graph *g, ts_val x, const int *perm) {
  if (!g) return TS_NONE;
  int xi = ts__vidx(g, x, "permute");
  if (xi < 0 || g->status) return TS_NONE;
  int nd = g->vals[xi].shape.ndim, ident = 1;
  if (!perm && nd > 0) {
    ts__graph_fail(g, TS_EINVAL, "permute: perm is NULL");
    return TS_NONE;
  }
  ts_attrs a;
  memset(&a, 0, sizeof a);
  for (int k = 0; k < nd; k++) {
    /* negative entries count from the end, as in PyTorch */
    ts_attr_set_permute_perm(&a, k, perm[k] < 0 && perm[k] >= -nd ? perm[k] + nd : perm[k]);
    ident &= ts_attr_permute_perm(&a, k) == k;
  }
  if (ident) return x;
  return ts__add1(g, TS_OP_PERMUTE, &xi, 1, &a);
}

ts_val ts_transpose(ts_graph *g, ts_val x, int dim0, int dim1) {
  if (!g) return TS_NONE;
  int xi = ts__vidx(g, x, "transpose");
  if (xi < 0 || g->status) return TS_NONE;
  int nd = g->vals[xi].shape.ndim;
  int d0 = norm_axis(g, "transpose", dim0, nd, xi);
  int d1 = d0 < 0 ? -1 : norm_axis(g, "transpose", dim1, nd, xi);
  if (d0 < 0 || d1 < 0) return TS_NONE;
  int perm[TS_MAX_DIMS];
  for (int k = 0; k < nd; k++) perm[k] = k;
  perm[d0] = d1;
  perm[d1] = d0;
  return ts_permute(g, x, perm);
}

static int grad_permute(ts_graph *g, int node, const int *dy, int *dx) {
  ts__node n = g->nodes[node];
  int nd = g->vals[n.in[0]].shape.ndim;
  ts_attrs a;
  memset(&a, 0, sizeof a);
  for (int k = 0; k < nd; k++) ts_attr_set_permute_perm(&a, (int)ts_attr_permute_perm(&n.a, k), k);
  int in = dy[0];
  dx[0] = ts__emit(g, TS_OP_PERMUTE, &in, 1, &a);
  return dx[0] < 0 ? g->status : TS_OK;
}

/* ---------------------------------------------------------------- CONCAT */

static int infer_concat(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b[160], c[160];
  if (n->nin < 1 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "concat: needs at least 1 input and 1 output, got %d/%d",
                          n->nin, n->nout);
  const ts__value *x0 = ts__val(g, n->in[0]);
  int64_t axis = ts_attr_concat_axis(&n->a);
  if (axis < 0 || axis >= x0->shape.ndim)
    return ts__graph_fail(g, TS_ESHAPE, "concat: axis %lld out of range for %s", (long long)axis,
                          VS(n->in[0], b));
  ts_shape s = x0->shape;
  for (int k = 1; k < n->nin; k++) {
    const ts__value *xk = ts__val(g, n->in[k]);
    if (xk->dtype != x0->dtype)
      return ts__graph_fail(g, TS_EDTYPE, "concat: input %d %s has a different dtype than input 0 %s",
                            k, VS(n->in[k], b), VS(n->in[0], c));
    int ok = xk->shape.ndim == x0->shape.ndim;
    for (int d = 0; ok && d < s.ndim; d++)
      if (d != axis && xk->shape.dims[d] != x0->shape.dims[d]) ok = 0;
    if (!ok)
      return ts__graph_fail(g, TS_ESHAPE,
                            "concat: input %d %s does not match input 0 %s in every dim but axis %lld",
                            k, VS(n->in[k], b), VS(n->in[0], c), (long long)axis);
    s.dims[axis] += xk->shape.dims[axis];
  }
  odt[0] = x0->dtype;
  osh[0] = s;
  return TS_OK;
}

ts_val ts_concat(ts_graph *g, const ts_val *xs, int n, int axis) {
  if (!g || g->status) return TS_NONE;
  if (n < 1 || n > TS_GRAPH_MAX_IO || !xs) {
    ts__graph_fail(g, TS_EINVAL, "concat: %d inputs (need 1..%d)", n, TS_GRAPH_MAX_IO);
    return TS_NONE;
  }
  int ins[TS_GRAPH_MAX_IO];
  for (int k = 0; k < n; k++) {
    ins[k] = ts__vidx(g, xs[k], "concat");
    if (ins[k] < 0) return TS_NONE;
  }
  int ax = norm_axis(g, "concat", axis, g->vals[ins[0]].shape.ndim, ins[0]);
  if (ax < 0) return TS_NONE;
  if (n == 1) return xs[0];
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_concat_axis(&a, ax);
  return ts__add1(g, TS_OP_CONCAT, ins, n, &a);
}

static int emit_slice(ts_graph *g, ts_op op, int x, int axis, int64_t start, int64_t end, int64_t len) {
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_slice_axis(&a, axis);
  ts_attr_set_slice_start(&a, start);
  ts_attr_set_slice_end(&a, end);
  ts_attr_set_slice_len(&a, len);
  return ts__emit(g, op, &x, 1, &a);
}

static int grad_concat(ts_graph *g, int node, const int *dy, int *dx) {
  ts__node n = g->nodes[node];
  int axis = (int)ts_attr_concat_axis(&n.a);
  int64_t off = 0, tot = g->vals[n.out[0]].shape.dims[axis];
  for (int k = 0; k < n.nin; k++) {
    int64_t len = g->vals[n.in[k]].shape.dims[axis];
    if (!g->vals[n.in[k]].no_grad) {
      dx[k] = emit_slice(g, TS_OP_SLICE, dy[0], axis, off, off + len, tot);
      if (dx[k] < 0) return g->status;
    }
    off += len;
  }
  return TS_OK;
}

/* ---------------------------------------------------------------- SPLIT */

static int infer_split(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b[160];
  if (n->nin != 1 || n->nout < 1 || n->nout > TS_ATTRS_MAX_I - 1)
    return ts__graph_fail(g, TS_EINVAL, "split: expects 1 input and 1..%d outputs, got %d/%d",
                          TS_ATTRS_MAX_I - 1, n->nin, n->nout);
  const ts__value *x = ts__val(g, n->in[0]);
  int64_t axis = ts_attr_split_axis(&n->a), tot = 0;
  if (axis < 0 || axis >= x->shape.ndim)
    return ts__graph_fail(g, TS_ESHAPE, "split: axis %lld out of range for %s", (long long)axis,
                          VS(n->in[0], b));
  for (int k = 0; k < n->nout; k++) {
    int64_t sz = ts_attr_split_sizes(&n->a, k);
    if (sz <= 0)
      return ts__graph_fail(g, TS_ESHAPE, "split: part %d of %s has non-positive size %lld", k,
                            VS(n->in[0], b), (long long)sz);
    tot += sz;
    odt[k] = x->dtype;
    osh[k] = x->shape;
    osh[k].dims[axis] = sz;
  }
  if (tot != x->shape.dims[axis])
    return ts__graph_fail(g, TS_ESHAPE, "split: sizes sum to %lld but %s has %lld along axis %lld",
                          (long long)tot, VS(n->in[0], b), (long long)x->shape.dims[axis],
                          (long long)axis);
  return TS_OK;
}

int ts_split(ts_graph *g, ts_val x, int axis, const int64_t *sizes, int n, ts_val *outs) {
  if (!g) return TS_EINVAL;
  for (int k = 0; outs && k < n && k < TS_GRAPH_MAX_IO; k++) outs[k] = TS_NONE;
  int xi = ts__vidx(g, x, "split");
  if (xi < 0 || g->status) return g->status ? g->status : TS_EINVAL;
  if (n < 1 || n > TS_ATTRS_MAX_I - 1 || !sizes || !outs)
    return ts__graph_fail(g, TS_EINVAL, "split: %d parts (need 1..%d, with sizes and outs)", n,
                          TS_ATTRS_MAX_I - 1);
  int ax = norm_axis(g, "split", axis, g->vals[xi].shape.ndim, xi);
  if (ax < 0) return g->status;
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_split_axis(&a, ax);
  for (int k = 0; k < n; k++) ts_attr_set_split_sizes(&a, k, sizes[k]);
  int nd = ts__add_node(g, TS_OP_SPLIT, &xi, 1, n, &a);
  if (nd < 0) return g->status;
  for (int k = 0; k < n; k++) outs[k] = ts__handle(g, g->nodes[nd].out[k]);
  return TS_OK;
}

static int grad_split(ts_graph *g, int node, const int *dy, int *dx) {
  ts__node n = g->nodes[node];
  int parts[TS_GRAPH_MAX_IO];
  for (int k = 0; k < n.nout; k++) {
    parts[k] = dy[k];
    if (parts[k] < 0) {
      const ts__value *y = &g->vals[n.out[k]];
      ts_attrs a;
      memset(&a, 0, sizeof a);
      ts_attr_set_const_shape(&a, &y->shape);
      ts_attr_set_const_dtype(&a, y->dtype);
      parts[k] = ts__emit(g, TS_OP_CONST, NULL, 0, &a);
      if (parts[k] < 0) return g->status;
    }
  }
  if (n.nout == 1) {
    dx[0] = parts[0];
    return TS_OK;
  }
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_concat_axis(&a, ts_attr_split_axis(&n.a));
  dx[0] = ts__emit(g, TS_OP_CONCAT, parts, n.nout, &a);
  return dx[0] < 0 ? g->status : TS_OK;
}

/* ---------------------------------------------------------------- SLICE / SLICE_BWD */

static int check_slice(ts_graph *g, const char *op, const ts__node *n, int64_t ndim, int x) {
  char b[160];
  int64_t axis = ts_attr_slice_axis(&n->a), st = ts_attr_slice_start(&n->a), en = ts_attr_slice_end(&n->a), len = ts_attr_slice_len(&n->a);
  if (axis < 0 || axis >= ndim)
    return ts__graph_fail(g, TS_ESHAPE, "%s: axis %lld out of range for %s", op, (long long)axis,
                          VS(x, b));
  if (st < 0 || en > len || st >= en)
    return ts__graph_fail(g, TS_ESHAPE,
                          "%s: range [%lld,%lld) is empty or outside [0,%lld) along axis %lld of %s",
                          op, (long long)st, (long long)en, (long long)len, (long long)axis, VS(x, b));
  return TS_OK;
}

static int infer_slice(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  if (need_io(g, n, "slice", 1, 1)) return g->status;
  const ts__value *x = ts__val(g, n->in[0]);
  char b[160];
  if (ts_attr_slice_axis(&n->a) >= 0 && ts_attr_slice_axis(&n->a) < x->shape.ndim && ts_attr_slice_len(&n->a) != x->shape.dims[ts_attr_slice_axis(&n->a)])
    return ts__graph_fail(g, TS_ESHAPE, "slice: attribute length %lld does not match %s",
                          (long long)ts_attr_slice_len(&n->a), VS(n->in[0], b));
  if (check_slice(g, "slice", n, x->shape.ndim, n->in[0])) return g->status;
  odt[0] = x->dtype;
  osh[0] = x->shape;
  osh[0].dims[ts_attr_slice_axis(&n->a)] = ts_attr_slice_end(&n->a) - ts_attr_slice_start(&n->a);
  return TS_OK;
}

ts_val ts_slice(ts_graph *g, ts_val x, int axis, int64_t start, int64_t end) {
  if (!g) return TS_NONE;
  int xi = ts__vidx(g, x, "slice");
  if (xi < 0 || g->status) return TS_NONE;
  int ax = norm_axis(g, "slice", axis, g->vals[xi].shape.ndim, xi);
  if (ax < 0) return TS_NONE;
  int64_t len = g->vals[xi].shape.dims[ax];
  if (start == 0 && end == len) return x;
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_slice_axis(&a, ax);
  ts_attr_set_slice_start(&a, start);
  ts_attr_set_slice_end(&a, end);
  ts_attr_set_slice_len(&a, len);
  return ts__add1(g, TS_OP_SLICE, &xi, 1, &a);
}

static int grad_slice(ts_graph *g, int node, const int *dy, int *dx) {
  ts__node n = g->nodes[node];
  dx[0] = emit_slice(g, TS_OP_SLICE_BWD, dy[0], (int)ts_attr_slice_axis(&n.a), ts_attr_slice_start(&n.a), ts_attr_slice_end(&n.a), ts_attr_slice_len(&n.a));
  return dx[0] < 0 ? g->status : TS_OK;
}

static int infer_slice_bwd(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  if (need_io(g, n, "slice_bwd", 1, 1)) return g->status;
  const ts__value *dy = ts__val(g, n->in[0]);
  char b[160];
  if (check_slice(g, "slice_bwd", n, dy->shape.ndim, n->in[0])) return g->status;
  if (dy->shape.dims[ts_attr_slice_axis(&n->a)] != ts_attr_slice_end(&n->a) - ts_attr_slice_start(&n->a))
    return ts__graph_fail(g, TS_ESHAPE, "slice_bwd: %s has length %lld along axis %lld, expected %lld",
                          VS(n->in[0], b), (long long)dy->shape.dims[ts_attr_slice_axis(&n->a)],
                          (long long)ts_attr_slice_axis(&n->a), (long long)(ts_attr_slice_end(&n->a) - ts_attr_slice_start(&n->a)));
  odt[0] = dy->dtype;
  osh[0] = dy->shape;
  osh[0].dims[ts_attr_slice_axis(&n->a)] = ts_attr_slice_len(&n->a);
  return TS_OK;
}

static int grad_slice_bwd(ts_graph *g, int node, const int *dy, int *dx) {
  ts__node n = g->nodes[node];
  dx[0] = emit_slice(g, TS_OP_SLICE, dy[0], (int)ts_attr_slice_axis(&n.a), ts_attr_slice_start(&n.a), ts_attr_slice_end(&n.a), ts_attr_slice_len(&n.a));
  return dx[0] < 0 ? g->status : TS_OK;
}

void ts__register_shape(ts__opdef *tab) {
  tab[TS_OP_RESHAPE] = (ts__opdef){"reshape", infer_reshape, grad_reshape, 1};
  tab[TS_OP_PERMUTE] = (ts__opdef){"permute", infer_permute, grad_permute, 0};
  tab[TS_OP_CONCAT] = (ts__opdef){"concat", infer_concat, grad_concat, 0};
  tab[TS_OP_SPLIT] = (ts__opdef){"split", infer_split, grad_split, 0};
  tab[TS_OP_SLICE] = (ts__opdef){"slice", infer_slice, grad_slice, 0};
  tab[TS_OP_SLICE_BWD] = (ts__opdef){"slice_bwd", infer_slice_bwd, grad_slice_bwd, 0};
}
