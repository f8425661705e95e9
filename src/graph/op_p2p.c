/* Point-to-point family: SEND and RECV, the cut edges of pipeline stages (src/parallel/stage.c).
 *
 * Like the collectives, the graph knows nothing of MPI: an op records the plan's communicator
 * SLOT, the PEER rank in that communicator and the message TAG; the executor
 * (src/runtime/run_p2p.c) sends a copy without blocking and receives blocking.
 *
 *   SEND (x) -> token                 token: a scalar f32 0 that the stage's objective sums, so
 *                                     autodiff reaches the send
 *   RECV ([dep]) -> y                 y of the recorded dtype and shape; dep (any value, not
 *                                     read) only orders the receive after it
 *
 * Gradients: SEND's is a RECV of x's shape from the same peer on tag + 1, ordered after the
 * token's gradient: the consumer stage sends d(objective)/dx back. RECV's rule gives its dep no
 * gradient; its adjoint (a SEND of dy to the producer on tag + 1) is emitted by the stage cut after
 * backward, since a value the stage does not differentiate must still send zeros back to keep the
 * pair matched. */
#include <string.h>

#include "graph_ir.h"
#include "graph_impl.h"

#define VS(v, buf) ts__vstr(g, (v), buf, sizeof buf)

static int check_p2p(ts_graph *g, const ts__node *n, const char *op) {
  if (ts_attr_p2p_slot(&n->a) < 0 || ts_attr_p2p_slot(&n->a) >= TS_GRAPH_MAX_COMM_SLOTS)
    return ts__graph_fail(g, TS_EINVAL, "%s: communicator slot %lld is outside 0..%d", op,
                          (long long)ts_attr_p2p_slot(&n->a), TS_GRAPH_MAX_COMM_SLOTS - 1);
  if (ts_attr_p2p_peer(&n->a) < 0 || ts_attr_p2p_tag(&n->a) < 0 || ts_attr_p2p_tag(&n->a) > (1 << 20))
    return ts__graph_fail(g, TS_EINVAL, "%s: peer %lld / tag %lld out of range", op,
                          (long long)ts_attr_p2p_peer(&n->a), (long long)ts_attr_p2p_tag(&n->a));
  return TS_OK;
}

static int infer_send(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  if (n->nin != 1 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "send: expects 1 input and 1 output, got %d/%d", n->nin, n->nout);
  if (check_p2p(g, n, "send")) return g->status;
  odt[0] = TS_F32;
  osh[0] = (ts_shape){0, {0}};
  return TS_OK;
}

static int infer_recv(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  if (n->nin > 1 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "recv: expects at most 1 input and 1 output, got %d/%d", n->nin, n->nout);
  if (check_p2p(g, n, "recv")) return g->status;
  ts_shape s = ts_attr_p2p_shape(&n->a);
  int64_t dt = ts_attr_p2p_dtype(&n->a);
  if (s.ndim < 0 || s.ndim > TS_MAX_DIMS || dt < 0 || dt >= TS_DTYPE_COUNT)
    return ts__graph_fail(g, TS_EINVAL, "recv: bad shape (ndim %d) or dtype %lld", s.ndim, (long long)dt);
  for (int d = 0; d < s.ndim; d++)
    if (s.dims[d] < 1) return ts__graph_fail(g, TS_ESHAPE, "recv: dimension %d is %lld", d, (long long)s.dims[d]);
  odt[0] = (ts_dtype)dt;
  osh[0] = s;
  return TS_OK;
}

static int grad_send(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  ts_attrs a = n.a;
  ts_attr_set_p2p_tag(&a, ts_attr_p2p_tag(&n.a) + 1);
  ts_attr_set_p2p_dtype(&a, g->vals[n.in[0]].dtype);
  ts_attr_set_p2p_shape(&a, &g->vals[n.in[0]].shape);
  dx[0] = dy[0] >= 0 ? ts__emit(g, TS_OP_RECV, dy, 1, &a) : ts__emit(g, TS_OP_RECV, NULL, 0, &a);
  return dx[0] < 0 ? g->status : TS_OK;
}

/* RECV is differentiable with respect to nothing it reads (dep only orders it), but it must be
 * differentiable at all so that autodiff carries the gradient of its output, which the stage
 * cut sends back. */
static int grad_recv(ts_graph *g, int node, const int *dy, int *dx) {
  (void)dy;
  for (int k = 0; k < g->nodes[node].nin; k++) dx[k] = -1;
  return TS_OK;
}

static void p2p_attrs(ts_attrs *a, int slot, int peer, int tag) {
  memset(a, 0, sizeof *a);
  ts_attr_set_p2p_slot(a, slot);
  ts_attr_set_p2p_peer(a, peer);
  ts_attr_set_p2p_tag(a, tag);
}

ts_val ts_send(ts_graph *g, ts_val x, int slot, int peer, int tag) {
  if (!g) return TS_NONE;
  int xi = ts__vidx(g, x, "send");
  if (xi < 0 || g->status) return TS_NONE;
  ts_attrs a;
  p2p_attrs(&a, slot, peer, tag);
  return ts__add1(g, TS_OP_SEND, &xi, 1, &a);
}

ts_val ts_recv(ts_graph *g, ts_val dep, int slot, int peer, int tag, ts_dtype dt, ts_shape shape) {
  if (!g) return TS_NONE;
  int di = -1;
  if (dep != TS_NONE && ((di = ts__vidx(g, dep, "recv")) < 0 || g->status)) return TS_NONE;
  ts_attrs a;
  p2p_attrs(&a, slot, peer, tag);
  ts_attr_set_p2p_dtype(&a, dt);
  ts_attr_set_p2p_shape(&a, &shape);
  return ts__add1(g, TS_OP_RECV, di >= 0 ? &di : NULL, di >= 0 ? 1 : 0, &a);
}

void ts__register_p2p(ts__opdef *tab) {
  tab[TS_OP_SEND] = (ts__opdef){"send", infer_send, grad_send, 0};
  tab[TS_OP_RECV] = (ts__opdef){"recv", infer_recv, grad_recv, 0};
}
