/* Ring attention family: RING_ATTENTION, RING_ATTENTION_BWD (context parallelism's attention over
 * a sequence cut across a communicator's ranks; include/tessera/graph.h ts_ring_attention).
 *
 * Attributes (ts_attr_ring_attention_*; tessera/ops.def), shared by both ops:
 *   slot, group (N)    the communicator slot of the ring and its size
 *   layout             0 = (B,H,T,D), 1 = (B,T,H,D); T is the rank's rows (N T in all)
 *   zigzag             0: rank r holds rows [rT, (r+1)T); 1: chunks r and 2N-1-r of 2N chunks of T/2;
 *                      2: rows in order as 0, reordered to 1's inside the op (balanced work) and back
 *   scale              resolved: 1/sqrt(D) when the builder got 0
 *   RING_ATTENTION     (q,k,v) -> o (q's shape and dtype), lse (B,H,T) f32
 *   RING_ATTENTION_BWD (do,q,k,v,o,lse) -> dq, dk, dv
 * q, k, v, o and the gradients share one float dtype (f32, bf16, f16). Gradient: one
 * RING_ATTENTION_BWD node; a gradient flowing into lse is rejected (as ATTENTION's). */
#include <math.h>
#include <string.h>

#include "graph_ir.h"
#include "graph_impl.h"

#define VS(v, buf) ts__vstr(g, (v), buf, sizeof buf)

/* In k = 0..n-1: 4-D tensors of one shape and one float dtype; the attributes in range. */
static int check(ts_graph *g, const char *op, const ts__node *n, const int *ins, const char *const *names, int cnt) {
  char b[160], c[160];
  if (ts__same_float(g, op, ins, names, cnt, NULL)) return g->status;
  const ts__value *q = ts__val(g, ins[0]);
  for (int k = 0; k < cnt; k++) {
    const ts__value *x = ts__val(g, ins[k]);
    if (x->shape.ndim != 4)
      return ts__graph_fail(g, TS_ESHAPE, "%s: %s %s must be 4-D", op, names[k], VS(ins[k], b));
    if (!ts_shape_equal(&x->shape, &q->shape))
      return ts__graph_fail(g, TS_ESHAPE, "%s: %s %s does not have the shape of %s %s", op, names[k],
                            VS(ins[k], b), names[0], VS(ins[0], c));
  }
  const ts_attrs *a = &n->a;
  int64_t layout = ts_attr_ring_attention_layout(a), N = ts_attr_ring_attention_group(a);
  if (layout != 0 && layout != 1)
    return ts__graph_fail(g, TS_EINVAL, "%s: unknown layout %lld (0 = BHTD, 1 = BTHD)", op, (long long)layout);
  if (N < 1 || ts_attr_ring_attention_slot(a) < 0)
    return ts__graph_fail(g, TS_EINVAL, "%s: group %lld and slot %lld must be positive", op, (long long)N,
                          (long long)ts_attr_ring_attention_slot(a));
  float s = ts_attr_ring_attention_scale(a);
  if (!(isfinite(s) && s > 0.0f))
    return ts__graph_fail(g, TS_EINVAL, "%s: scale %g must be positive and finite", op, (double)s);
  int64_t T = q->shape.dims[layout == 1 ? 1 : 2], zig = ts_attr_ring_attention_zigzag(a);
  if (zig < 0 || zig > 2)
    return ts__graph_fail(g, TS_EINVAL, "%s: zigzag %lld (0 in order, 1 zigzag rows, 2 balanced)", op, (long long)zig);
  if (zig && T % 2)
    return ts__graph_fail(g, TS_ESHAPE, "%s: zigzag needs an even number of rows per rank, %s has %lld", op,
                          VS(ins[0], b), (long long)T);
  return TS_OK;
}

static ts_shape lse_shape(const ts_shape *q, int64_t layout) {
  return layout == 1 ? ts_shape3(q->dims[0], q->dims[2], q->dims[1]) : ts_shape3(q->dims[0], q->dims[1], q->dims[2]);
}

static int infer_ring(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  static const char *const names[] = {"q", "k", "v"};
  if (n->nin != 3 || n->nout != 2)
    return ts__graph_fail(g, TS_EINVAL, "ring_attention: expects 3 inputs (q,k,v) and 2 outputs, got %d/%d", n->nin,
                          n->nout);
  if (check(g, "ring_attention", n, n->in, names, 3)) return g->status;
  const ts_shape *q = &ts__val(g, n->in[0])->shape;
  odt[0] = ts__val(g, n->in[0])->dtype;
  osh[0] = *q;
  odt[1] = TS_F32;
  osh[1] = lse_shape(q, ts_attr_ring_attention_layout(&n->a));
  return TS_OK;
}

static int infer_ring_bwd(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  static const char *const names[] = {"q", "k", "v", "do", "o"};
  char b[160];
  if (n->nin != 6 || n->nout != 3)
    return ts__graph_fail(g, TS_EINVAL,
                          "ring_attention_bwd: expects 6 inputs (do,q,k,v,o,lse) and 3 outputs, got %d/%d", n->nin,
                          n->nout);
  const int ins[5] = {n->in[1], n->in[2], n->in[3], n->in[0], n->in[4]};
  if (check(g, "ring_attention_bwd", n, ins, names, 5)) return g->status;
  const ts_shape *q = &ts__val(g, n->in[1])->shape;
  ts_shape ls = lse_shape(q, ts_attr_ring_attention_layout(&n->a));
  const ts__value *lse = ts__val(g, n->in[5]);
  if (lse->dtype != TS_F32 || !ts_shape_equal(&lse->shape, &ls))
    return ts__graph_fail(g, TS_ESHAPE, "ring_attention_bwd: lse %s must be f32 (B,H,T)", VS(n->in[5], b));
  for (int k = 0; k < 3; k++) {
    odt[k] = ts__val(g, n->in[1])->dtype;
    osh[k] = *q;
  }
  return TS_OK;
}

static int grad_ring(ts_graph *g, int node, const int *dy, int *dx) {
  ts__node n = g->nodes[node];
  if (dy[1] >= 0)
    return ts__graph_fail(g, TS_EUNSUPPORTED, "ring_attention: gradient through the lse output of %s is not supported",
                          n.name);
  if (dy[0] < 0) return TS_OK;
  int in[6] = {dy[0], n.in[0], n.in[1], n.in[2], n.out[0], n.out[1]};
  int nb = ts__add_node(g, TS_OP_RING_ATTENTION_BWD, in, 6, 3, &n.a);
  if (nb < 0) return g->status;
  for (int k = 0; k < 3; k++) dx[k] = g->nodes[nb].out[k];
  return TS_OK;
}

ts_val ts_ring_attention(ts_graph *g, ts_val q, ts_val k, ts_val v, float scale, int layout, int slot, int group_size,
                         int zigzag) {
  int in[3];
  if (!g || ts__attention_inputs(g, q, k, v, "ring_attention", in, &scale)) return TS_NONE;
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_ring_attention_scale(&a, scale);
  ts_attr_set_ring_attention_layout(&a, layout);
  ts_attr_set_ring_attention_slot(&a, slot);
  ts_attr_set_ring_attention_group(&a, group_size);
  ts_attr_set_ring_attention_zigzag(&a, zigzag);
  int nd = ts__add_node(g, TS_OP_RING_ATTENTION, in, 3, 2, &a);
  return nd < 0 ? TS_NONE : ts__handle(g, g->nodes[nd].out[0]);
}

void ts__register_ring_attention(ts__opdef *tab) {
  tab[TS_OP_RING_ATTENTION] = (ts__opdef){"ring_attention", infer_ring, grad_ring, 0};
  tab[TS_OP_RING_ATTENTION_BWD] = (ts__opdef){"ring_attention_bwd", infer_ring_bwd, NULL, 0};
}
