/* Matmul family: MATMUL, DENSE.
 *
 * Attributes (ts_attr_* accessors; tessera/ops.def):
 *   MATMUL (a, b) -> y    trans_a, trans_b (transpose the last two dims)
 *       a (...,M,K) (or (...,K,M) if trans_a), b (...,K,N) (or (...,N,K) if trans_b) ->
 *       y (...,M,N). Batch dims (all but the last two) must be equal, or one operand is 2-D and
 *       shared by every batch entry. a and b share one float dtype (f32, bf16
 *       or f16), which y has (16-bit products accumulate in f32).
 *   DENSE  (x, w[, b]) -> y = x w^T + b     no attrs
 *       x (...,in), w (out,in), b (out) -> y (...,out). x, w, b share one float dtype, y's.
 *
 * Gradients (only graph ops):
 *   MATMUL  with A = op(a), B = op(b): dA = dY B^T, dB = A^T dY, written as MATMULs with the
 *           transposes folded in. When an operand was 2-D and shared across a batch, its
 *           gradient is summed over the batch: a single folded GEMM (batch*M rows) when the
 *           layout allows it (shared b, untransposed a), otherwise a batched MATMUL + SUM_TO.
 *   DENSE   over x flattened to (M,in): dx = dy w; dw = dy^T x (one GEMM over all leading dims);
 *           db = SUM_TO(dy, (out)).
 *   Inputs marked no-grad (ts_val_set_requires_grad) get no gradient ops. */
#include <string.h>

#include "graph_ir.h"
#include "graph_impl.h"

#define VS(v, buf) ts__vstr(g, (v), buf, sizeof buf)

/* ---------------------------------------------------------------- MATMUL */

static int infer_matmul(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b1[160], b2[160];
  if (n->nin != 2 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "matmul: expects 2 inputs (a, b) and 1 output, got %d/%d",
                          n->nin, n->nout);
  const int ai = n->in[0], bi = n->in[1];
  const ts__value *a = ts__val(g, ai), *b = ts__val(g, bi);
  const int64_t ta = ts_attr_matmul_trans_a(&n->a), tb = ts_attr_matmul_trans_b(&n->a);
  if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
    return ts__graph_fail(g, TS_EINVAL, "matmul: a %s and b %s: transpose flags must be 0 or 1 (got %lld, %lld)",
                          VS(ai, b1), VS(bi, b2), (long long)ta, (long long)tb);
  ts_dtype dt;
  static const char *const nm[2] = {"a", "b"};
  if (ts__same_float(g, "matmul", n->in, nm, 2, &dt)) return g->status;
  if (a->shape.ndim < 2 || b->shape.ndim < 2)
    return ts__graph_fail(g, TS_ESHAPE, "matmul: a %s and b %s: both operands need at least 2 dims",
                          VS(ai, b1), VS(bi, b2));
  const int na = a->shape.ndim, nb = b->shape.ndim;
  const int64_t M = a->shape.dims[na - (ta ? 1 : 2)], Ka = a->shape.dims[na - (ta ? 2 : 1)];
  const int64_t Kb = b->shape.dims[nb - (tb ? 1 : 2)], N = b->shape.dims[nb - (tb ? 2 : 1)];
  if (Ka != Kb)
    return ts__graph_fail(g, TS_ESHAPE, "matmul: a %s%s and b %s%s: inner dims %lld != %lld",
                          VS(ai, b1), ta ? " (transposed)" : "", VS(bi, b2),
                          tb ? " (transposed)" : "", (long long)Ka, (long long)Kb);
  if (na > 2 && nb > 2) {
    int ok = na == nb;
    for (int d = 0; ok && d < na - 2; d++) ok = a->shape.dims[d] == b->shape.dims[d];
    if (!ok)
      return ts__graph_fail(g, TS_ESHAPE,
                            "matmul: a %s and b %s: batch dims differ (they must be equal, or one "
                            "operand must be 2-D)", VS(ai, b1), VS(bi, b2));
  }
  const ts__value *big = na >= nb ? a : b;
  ts_shape s = big->shape;
  s.dims[s.ndim - 2] = M;
  s.dims[s.ndim - 1] = N;
  odt[0] = dt;
  osh[0] = s;
  return TS_OK;
}

ts_val ts_matmul(ts_graph *g, ts_val a, ts_val b, int trans_a, int trans_b) {
  if (!g) return TS_NONE;
  int in[2];
  if ((in[0] = ts__vidx(g, a, "matmul")) < 0 || (in[1] = ts__vidx(g, b, "matmul")) < 0)
    return TS_NONE;
  ts_attrs at;
  memset(&at, 0, sizeof at);
  ts_attr_set_matmul_trans_a(&at, trans_a);
  ts_attr_set_matmul_trans_b(&at, trans_b);
  return ts__add1(g, TS_OP_MATMUL, in, 2, &at);
}

static int emit_mm(ts_graph *g, int a, int b, int ta, int tb) {
  if (a < 0 || b < 0) return -1;
  ts_attrs at;
  memset(&at, 0, sizeof at);
  ts_attr_set_matmul_trans_a(&at, ta);
  ts_attr_set_matmul_trans_b(&at, tb);
  int in[2] = {a, b};
  return ts__emit(g, TS_OP_MATMUL, in, 2, &at);
}

/* Shape (rows, cols) with rows = product of all but the last dim. */
static ts_shape flat2(const ts_shape *s) {
  int64_t last = s->dims[s->ndim - 1];
  return ts_shape2(ts_shape_numel(s) / last, last);
}

static int grad_matmul(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  const int a = n.in[0], b = n.in[1], dc = dy[0];
  const int ta = (int)ts_attr_matmul_trans_a(&n.a), tb = (int)ts_attr_matmul_trans_b(&n.a);
  dx[0] = dx[1] = -1;
  if (dc < 0) return TS_OK;
  const ts_shape as = g->vals[a].shape, bs = g->vals[b].shape;
  const int a_shared = as.ndim == 2 && g->vals[dc].shape.ndim > 2;
  const int b_shared = bs.ndim == 2 && g->vals[dc].shape.ndim > 2;
  if (!g->vals[a].no_grad) {
    dx[0] = ta ? emit_mm(g, b, dc, tb, 1) : emit_mm(g, dc, b, 0, !tb);
    if (a_shared) dx[0] = ts__emit_sum_to(g, dx[0], &as);
    if (dx[0] < 0) return g->status ? g->status : TS_EGRAPH;
  }
  if (!g->vals[b].no_grad) {
    if (b_shared && !ta) { /* fold the batch into the rows: one GEMM does the batch sum */
      ts_shape a2 = flat2(&as), c2 = flat2(&g->vals[dc].shape);
      int af = ts__emit_reshape(g, a, &a2), cf = ts__emit_reshape(g, dc, &c2);
      dx[1] = tb ? emit_mm(g, cf, af, 1, 0) : emit_mm(g, af, cf, 1, 0);
    } else {
      dx[1] = tb ? emit_mm(g, dc, a, 1, ta) : emit_mm(g, a, dc, !ta, 0);
      if (b_shared) dx[1] = ts__emit_sum_to(g, dx[1], &bs);
    }
    if (dx[1] < 0) return g->status ? g->status : TS_EGRAPH;
  }
  return TS_OK;
}

/* ---------------------------------------------------------------- DENSE */

static int infer_dense(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b1[160], b2[160], b3[160];
  if ((n->nin != 2 && n->nin != 3) || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "dense: expects inputs (x, w[, b]) and 1 output, got %d/%d",
                          n->nin, n->nout);
  const int xi = n->in[0], wi = n->in[1];
  const ts__value *x = ts__val(g, xi), *w = ts__val(g, wi);
  ts_dtype dt;
  static const char *const nm[3] = {"x", "w", "bias"};
  if (ts__same_float(g, "dense", n->in, nm, n->nin, &dt)) return g->status;
  if (x->shape.ndim < 1 || w->shape.ndim != 2)
    return ts__graph_fail(g, TS_ESHAPE, "dense: x %s and w %s: x needs at least 1 dim and w must be 2-D (out,in)",
                          VS(xi, b1), VS(wi, b2));
  const int64_t in = x->shape.dims[x->shape.ndim - 1], out = w->shape.dims[0];
  if (w->shape.dims[1] != in)
    return ts__graph_fail(g, TS_ESHAPE, "dense: x %s and w %s: x's last dim %lld != w's in-features %lld",
                          VS(xi, b1), VS(wi, b2), (long long)in, (long long)w->shape.dims[1]);
  if (n->nin == 3) {
    const ts__value *b = ts__val(g, n->in[2]);
    if (b->shape.ndim != 1 || b->shape.dims[0] != out)
      return ts__graph_fail(g, TS_ESHAPE, "dense: w %s and bias %s: bias must be 1-D of size %lld",
                            VS(wi, b2), VS(n->in[2], b3), (long long)out);
  }
  ts_shape s = x->shape;
  s.dims[s.ndim - 1] = out;
  odt[0] = dt;
  osh[0] = s;
  return TS_OK;
}

ts_val ts_dense(ts_graph *g, ts_val x, ts_val w, ts_val b) {
  if (!g) return TS_NONE;
  int in[3], nin = b == TS_NONE ? 2 : 3;
  if ((in[0] = ts__vidx(g, x, "dense")) < 0 || (in[1] = ts__vidx(g, w, "dense")) < 0)
    return TS_NONE;
  if (nin == 3 && (in[2] = ts__vidx(g, b, "dense")) < 0) return TS_NONE;
  return ts__add1(g, TS_OP_DENSE, in, nin, NULL);
}

static int grad_dense(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  const int x = n.in[0], w = n.in[1];
  const ts_shape xs = g->vals[x].shape;
  dx[0] = dx[1] = dx[2] = -1;
  if (dy[0] < 0) return TS_OK;
  ts_shape x2 = flat2(&xs), y2 = flat2(&g->vals[dy[0]].shape);
  int dy2 = ts__emit_reshape(g, dy[0], &y2);
  if (!g->vals[x].no_grad) {
    dx[0] = ts__emit_reshape(g, emit_mm(g, dy2, w, 0, 0), &xs);
    if (dx[0] < 0) return g->status ? g->status : TS_EGRAPH;
  }
  if (!g->vals[w].no_grad) {
    dx[1] = emit_mm(g, dy2, ts__emit_reshape(g, x, &x2), 1, 0);
    if (dx[1] < 0) return g->status ? g->status : TS_EGRAPH;
  }
  if (n.nin == 3 && !g->vals[n.in[2]].no_grad) {
    ts_shape bs = g->vals[n.in[2]].shape;
    dx[2] = ts__emit_sum_to(g, dy2, &bs);
    if (dx[2] < 0) return g->status ? g->status : TS_EGRAPH;
  }
  return TS_OK;
}

void ts__register_matmul(ts__opdef *tab) {
  tab[TS_OP_MATMUL] = (ts__opdef){"matmul", infer_matmul, grad_matmul, 0};
  tab[TS_OP_DENSE] = (ts__opdef){"dense", infer_dense, grad_dense, 0};
}
