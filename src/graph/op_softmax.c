/* Softmax family: SOFTMAX, SOFTMAX_BWD, SOFTMAX_CE, SOFTMAX_CE_BWD.
 *
 * Attributes (ts_attr_* accessors; tessera/ops.def):
 *   SOFTMAX (x) -> y               axis (normalised to 0..ndim-1 by shape inference),
 *                                  log (1: log-softmax)
 *   SOFTMAX_BWD (dy, y) -> dx      same attrs; y is the forward output
 *   (x, y, dy, dx share one float dtype: f32, bf16 or f16; 16-bit rows reduce in f32)
 *   SOFTMAX_CE (logits, labels) -> loss, lse
 *                                  smoothing = label smoothing in [0,1], ignore = ignore index (-100)
 *       logits (N,C) f32/bf16/f16, labels (N) i32/i64 -> loss () f32 whatever the logits' dtype
 *       (16-bit logits are read in f32; dlogits has the logits' dtype): mean over non-ignored rows of
 *       torch.nn.CrossEntropyLoss(ignore_index=-100, label_smoothing=smoothing); 0 if every row is
 *       ignored. Second output lse (N) f32 = logsumexp of each row, saved for the backward
 *       (no gradient flows through it).
 *   SOFTMAX_CE_BWD (dloss, logits, labels[, lse]) -> dlogits (N,C)   same attrs as SOFTMAX_CE;
 *       without lse the row statistics are recomputed.
 *   Class-sharded mode of both (Megatron's vocabulary-parallel loss; all zero: unsharded):
 *       sync = communicator slot + 1 (0: not sharded), group = group size g >= 1,
 *       offset = class offset of this rank's block, classes = global class count C, with C % g == 0,
 *       logits (N, C/g) = columns [offset, offset+C/g) of the global logits, labels global class ids.
 *       SOFTMAX_CE: loss () = the loss of the full logits (the same on every rank of the group),
 *       lse (N) = the global lse (src/runtime/run_softmax.c: allreduce MAX of the row maxima, one
 *       allreduce SUM of the (N,3) row statistics). SOFTMAX_CE_BWD (lse required): dloss is
 *       first summed over the group (the objective is the sum of every rank's loss, op_coll.c's
 *       convention), then dlogits = this rank's block of the full gradient for that dloss.
 *
 * Gradients: SOFTMAX -> SOFTMAX_BWD(dy, y); SOFTMAX_CE -> SOFTMAX_CE_BWD(dloss, logits, labels,
 * lse), labels get none. The _BWD ops are not differentiable. */
#include <string.h>

#include "graph_ir.h"
#include "graph_impl.h"

#define VS(v, buf) ts__vstr(g, (v), buf, sizeof buf)

static int infer_softmax_common(ts_graph *g, ts__node *n, const char *op, int xi) {
  char b1[160];
  const ts__value *x = ts__val(g, xi);
  const int nd = x->shape.ndim;
  static const char *const nm[1] = {"x"};
  if (ts__same_float(g, op, &xi, nm, 1, NULL)) return g->status;
  if (nd < 1)
    return ts__graph_fail(g, TS_ESHAPE, "%s: x %s: needs at least 1 dim", op, VS(xi, b1));
  int64_t ax = ts_attr_softmax_axis(&n->a);
  if (ax < -nd || ax >= nd)
    return ts__graph_fail(g, TS_EINVAL, "%s: x %s: axis %lld out of range [%d,%d)", op, VS(xi, b1),
                          (long long)ax, -nd, nd);
  if (ts_attr_softmax_log(&n->a) != 0 && ts_attr_softmax_log(&n->a) != 1)
    return ts__graph_fail(g, TS_EINVAL, "%s: x %s: log flag must be 0 or 1", op, VS(xi, b1));
  ts_attr_set_softmax_axis(&n->a, ax < 0 ? ax + nd : ax);
  return TS_OK;
}

static int infer_softmax(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  const char *op = ts_attr_softmax_log(&n->a) ? "log_softmax" : "softmax";
  if (n->nin != 1 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "%s: expects 1 input and 1 output, got %d/%d", op, n->nin,
                          n->nout);
  int rc = infer_softmax_common(g, n, op, n->in[0]);
  if (rc) return rc;
  odt[0] = ts__val(g, n->in[0])->dtype;
  osh[0] = ts__val(g, n->in[0])->shape;
  return TS_OK;
}

static int infer_softmax_bwd(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b1[160], b2[160];
  if (n->nin != 2 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "softmax_bwd: expects inputs (dy, y) and 1 output, got %d/%d",
                          n->nin, n->nout);
  int rc = infer_softmax_common(g, n, "softmax_bwd", n->in[1]);
  if (rc) return rc;
  const ts__value *dy = ts__val(g, n->in[0]), *y = ts__val(g, n->in[1]);
  static const char *const nm[2] = {"dy", "y"};
  if (ts__same_float(g, "softmax_bwd", n->in, nm, 2, NULL)) return g->status;
  if (!ts_shape_equal(&dy->shape, &y->shape))
    return ts__graph_fail(g, TS_ESHAPE, "softmax_bwd: dy %s and y %s must have the same shape",
                          VS(n->in[0], b1), VS(n->in[1], b2));
  odt[0] = y->dtype;
  osh[0] = y->shape;
  return TS_OK;
}

static int grad_softmax(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  dx[0] = -1;
  if (dy[0] < 0 || g->vals[n.in[0]].no_grad) return TS_OK;
  int in[2] = {dy[0], n.out[0]};
  dx[0] = ts__emit(g, TS_OP_SOFTMAX_BWD, in, 2, &n.a);
  return dx[0] < 0 ? (g->status ? g->status : TS_EGRAPH) : TS_OK;
}

/* ---------------------------------------------------------------- cross-entropy */

/* Largest group size accepted (as op_coll.c). */
#define MAX_GROUP (1 << 24)

/* The class-sharding attributes (sync, group, offset, classes) against logits li (N, C/g). */
static int check_shard(ts_graph *g, const ts__node *n, int li) {
  char b1[160];
  const char *op = "softmax_cross_entropy_sharded";
  const int64_t slot1 = ts_attr_softmax_ce_sync(&n->a), gs = ts_attr_softmax_ce_group(&n->a), off = ts_attr_softmax_ce_offset(&n->a), C = ts_attr_softmax_ce_classes(&n->a);
  if (slot1 == 0) {
    if (gs || off || C)
      return ts__graph_fail(g, TS_EINVAL,
                            "softmax_cross_entropy: logits %s: class-sharding attributes (group size "
                            "%lld, offset %lld, %lld classes) without a communicator slot",
                            VS(li, b1), (long long)gs, (long long)off, (long long)C);
    return TS_OK;
  }
  if (slot1 < 1 || slot1 > TS_GRAPH_MAX_COMM_SLOTS)
    return ts__graph_fail(g, TS_EINVAL, "%s: logits %s: communicator slot %lld is outside 0..%d", op,
                          VS(li, b1), (long long)(slot1 - 1), TS_GRAPH_MAX_COMM_SLOTS - 1);
  if (gs < 1 || gs > MAX_GROUP)
    return ts__graph_fail(g, TS_EINVAL, "%s: logits %s: group size %lld must be in 1..%d", op,
                          VS(li, b1), (long long)gs, MAX_GROUP);
  if (C < 1 || C % gs != 0)
    return ts__graph_fail(g, TS_ESHAPE,
                          "%s: logits %s: %lld classes are not divisible into %lld equal blocks "
                          "(group size)",
                          op, VS(li, b1), (long long)C, (long long)gs);
  const int64_t Cl = C / gs, cols = ts__val(g, li)->shape.dims[1];
  if (cols != Cl)
    return ts__graph_fail(g, TS_ESHAPE,
                          "%s: logits %s have %lld columns, but a block of %lld classes over a group "
                          "of %lld has %lld",
                          op, VS(li, b1), (long long)cols, (long long)C, (long long)gs, (long long)Cl);
  if (off < 0 || off > C - Cl)
    return ts__graph_fail(g, TS_ESHAPE,
                          "%s: logits %s: class offset %lld puts the block [%lld,%lld) outside the "
                          "%lld classes",
                          op, VS(li, b1), (long long)off, (long long)off, (long long)(off + Cl),
                          (long long)C);
  return TS_OK;
}

static int check_ce(ts_graph *g, const ts__node *n, int li, int yi) {
  char b1[160], b2[160];
  const ts__value *l = ts__val(g, li), *y = ts__val(g, yi);
  const char *op = "softmax_cross_entropy";
  static const char *const nm[1] = {"logits"};
  if (ts__same_float(g, op, &li, nm, 1, NULL)) return g->status;
  if (l->shape.ndim != 2)
    return ts__graph_fail(g, TS_ESHAPE, "%s: logits %s must be of shape (N,C)", op, VS(li, b1));
  if (y->dtype != TS_I32 && y->dtype != TS_I64)
    return ts__graph_fail(g, TS_EDTYPE, "%s: labels %s must be i32 or i64 (class indices), logits %s",
                          op, VS(yi, b2), VS(li, b1));
  if (y->shape.ndim != 1 || y->shape.dims[0] != l->shape.dims[0])
    return ts__graph_fail(g, TS_ESHAPE, "%s: labels %s must have shape (N) = (%lld) to match logits %s",
                          op, VS(yi, b2), (long long)l->shape.dims[0], VS(li, b1));
  if (!(ts_attr_softmax_ce_smoothing(&n->a) >= 0.0f && ts_attr_softmax_ce_smoothing(&n->a) <= 1.0f))
    return ts__graph_fail(g, TS_EINVAL, "%s: logits %s: label smoothing %g must be in [0,1]", op,
                          VS(li, b1), ts_attr_softmax_ce_smoothing(&n->a));
  return check_shard(g, n, li);
}

static int infer_ce(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  if (n->nin != 2 || n->nout != 2)
    return ts__graph_fail(g, TS_EINVAL, "softmax_cross_entropy: expects inputs (logits, labels) and outputs (loss, lse), got %d/%d",
                          n->nin, n->nout);
  int rc = check_ce(g, n, n->in[0], n->in[1]);
  if (rc) return rc;
  odt[0] = TS_F32;
  memset(&osh[0], 0, sizeof osh[0]); /* scalar */
  odt[1] = TS_F32;
  osh[1] = ts_shape1(ts__val(g, n->in[0])->shape.dims[0]);
  return TS_OK;
}

static int infer_ce_bwd(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b1[160], b2[160];
  if ((n->nin != 3 && n->nin != 4) || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "softmax_ce_bwd: expects inputs (dloss, logits, labels[, lse]) and 1 output, got %d/%d",
                          n->nin, n->nout);
  int rc = check_ce(g, n, n->in[1], n->in[2]);
  if (rc) return rc;
  const ts__value *d = ts__val(g, n->in[0]), *l = ts__val(g, n->in[1]);
  if (d->dtype != TS_F32 || ts_shape_numel(&d->shape) != 1)
    return ts__graph_fail(g, TS_ESHAPE, "softmax_ce_bwd: dloss %s must be an f32 scalar", VS(n->in[0], b1));
  if (ts_attr_softmax_ce_sync(&n->a) != 0 && n->nin != 4)
    return ts__graph_fail(g, TS_EINVAL,
                          "softmax_ce_bwd: logits %s: the class-sharded backward needs the forward's "
                          "global lse as input 3",
                          VS(n->in[1], b1));
  if (n->nin == 4) {
    const ts__value *s = ts__val(g, n->in[3]);
    if (s->dtype != TS_F32 || s->shape.ndim != 1 || s->shape.dims[0] != l->shape.dims[0])
      return ts__graph_fail(g, TS_ESHAPE, "softmax_ce_bwd: lse %s must be f32 (N) for logits %s",
                            VS(n->in[3], b1), VS(n->in[1], b2));
  }
  odt[0] = l->dtype;
  osh[0] = l->shape;
  return TS_OK;
}

static int grad_ce(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  dx[0] = dx[1] = -1;
  if (dy[0] < 0 || g->vals[n.in[0]].no_grad) return TS_OK;
  int in[4] = {dy[0], n.in[0], n.in[1], n.out[1]};
  dx[0] = ts__emit(g, TS_OP_SOFTMAX_CE_BWD, in, 4, &n.a);
  return dx[0] < 0 ? (g->status ? g->status : TS_EGRAPH) : TS_OK;
}

/* ---------------------------------------------------------------- builders */

static ts_val softmax(ts_graph *g, ts_val x, int axis, int log) {
  if (!g) return TS_NONE;
  int xi = ts__vidx(g, x, log ? "log_softmax" : "softmax");
  if (xi < 0) return TS_NONE;
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_softmax_axis(&a, axis);
  ts_attr_set_softmax_log(&a, log);
  return ts__add1(g, TS_OP_SOFTMAX, &xi, 1, &a);
}

ts_val ts_softmax(ts_graph *g, ts_val x, int axis) { return softmax(g, x, axis, 0); }
ts_val ts_log_softmax(ts_graph *g, ts_val x, int axis) { return softmax(g, x, axis, 1); }

static ts_val cross_entropy(ts_graph *g, ts_val logits, ts_val labels, const ts_attrs *a,
                            const char *op) {
  if (!g) return TS_NONE;
  int in[2];
  if ((in[0] = ts__vidx(g, logits, op)) < 0 || (in[1] = ts__vidx(g, labels, op)) < 0)
    return TS_NONE;
  int nd = ts__add_node(g, TS_OP_SOFTMAX_CE, in, 2, 2, a);
  if (nd < 0) return TS_NONE;
  g->vals[g->nodes[nd].out[1]].no_grad = 1; /* lse: saved for the backward only */
  return ts__handle(g, g->nodes[nd].out[0]);
}

ts_val ts_softmax_cross_entropy(ts_graph *g, ts_val logits, ts_val labels, float label_smoothing) {
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_softmax_ce_smoothing(&a, label_smoothing);
  ts_attr_set_softmax_ce_ignore(&a, -100);
  return cross_entropy(g, logits, labels, &a, "softmax_cross_entropy");
}

ts_val ts_softmax_cross_entropy_sharded(ts_graph *g, ts_val logits, ts_val labels,
                                        float label_smoothing, int slot, int group_size,
                                        int64_t class_offset, int64_t num_classes) {
  const char *op = "softmax_cross_entropy_sharded";
  if (!g) return TS_NONE;
  if (slot < 0 || slot >= TS_GRAPH_MAX_COMM_SLOTS) { /* sync = slot + 1 must not read as "unsharded" */
    char b1[160];
    int li = ts__vidx(g, logits, op);
    if (li < 0) return TS_NONE;
    ts__graph_fail(g, TS_EINVAL, "%s: logits %s: communicator slot %d is outside 0..%d", op,
                   VS(li, b1), slot, TS_GRAPH_MAX_COMM_SLOTS - 1);
    return TS_NONE;
  }
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_softmax_ce_smoothing(&a, label_smoothing);
  ts_attr_set_softmax_ce_ignore(&a, -100);
  ts_attr_set_softmax_ce_sync(&a, slot + 1);
  ts_attr_set_softmax_ce_group(&a, group_size);
  ts_attr_set_softmax_ce_offset(&a, class_offset);
  ts_attr_set_softmax_ce_classes(&a, num_classes);
  return cross_entropy(g, logits, labels, &a, op);
}

void ts__register_softmax(ts__opdef *tab) {
  tab[TS_OP_SOFTMAX] = (ts__opdef){"softmax", infer_softmax, grad_softmax, 0};
  tab[TS_OP_SOFTMAX_BWD] = (ts__opdef){"softmax_bwd", infer_softmax_bwd, NULL, 0};
  tab[TS_OP_SOFTMAX_CE] = (ts__opdef){"softmax_ce", infer_ce, grad_ce, 0};
  tab[TS_OP_SOFTMAX_CE_BWD] = (ts__opdef){"softmax_ce_bwd", infer_ce_bwd, NULL, 0};
}
