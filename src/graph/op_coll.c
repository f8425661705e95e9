/* Collective family: ALLREDUCE, ALLGATHER, REDUCE_SCATTER, ALLTOALL, RANK_SLICE, RANK_SLICE_BWD,
 * HALO, HALO_BWD.
 *
 * Collectives are ordinary differentiable graph ops (docs/layout.md, "Collective ops in the
 * graph"). The graph knows nothing of MPI: an op records the plan's communicator SLOT (filled at
 * run time with ts_plan_set_comm) and the GROUP SIZE g its output shape is inferred for; the
 * executor (src/runtime/run_coll.c) checks that the slot holds a communicator of exactly g ranks.
 * Shapes are this rank's local shapes; "rank" below is the rank within the group.
 *
 * Attributes (tessera/ops.def; ts_attr_coll_* shared by every op of the family):
 *   slot  = communicator slot, 0..TS_GRAPH_MAX_COMM_SLOTS-1
 *   group = group size g >= 1
 *   ALLREDUCE      (x) -> y                 op = reduce op (ts_reduce_op: 0 sum, 1 mean, 2 max, 3 min)
 *                  y like x
 *   ALLGATHER      (x) -> y                 dim d; y.shape[d] = g * x.shape[d]
 *   REDUCE_SCATTER (x) -> y                 dim d, op = reduce op;
 *                  x.shape[d] % g == 0, y.shape[d] = x.shape[d] / g
 *   ALLTOALL       (x) -> y                 split_dim s, concat_dim c (s != c);
 *                  x.shape[s] % g == 0, y.shape[s] = x.shape[s] / g, y.shape[c] = g * x.shape[c]
 *   RANK_SLICE     (x) -> y                 dim d; x.shape[d] % g == 0,
 *                  y.shape[d] = x.shape[d] / g (block `rank` of x along d; no communication)
 *   RANK_SLICE_BWD (dy) -> dx               dim d; dx.shape[d] = g * dy.shape[d], dy placed
 *                  at block `rank` along d, zeros elsewhere
 *   HALO           (x) -> y                 dim d, lo, hi (0 <= lo, hi <= x.shape[d]);
 *                  y.shape[d] = lo + x.shape[d] + hi: the previous rank's last lo rows, x, the
 *                  next rank's first hi rows (zeros beyond the group's first and last rank)
 *   HALO_BWD       (dy) -> dx               dim d, lo, hi; dx.shape[d] = dy.shape[d] - lo - hi:
 *                  dy's middle, plus the next rank's first lo rows of dy added to the last lo
 *                  rows and the previous rank's last hi rows added to the first hi
 * Reductions take f32, bf16, f16 (accumulated in f32 by comm/), i32, i64; the other ops any dtype.
 *
 * Gradients (exact adjoints over the group: each rank's x is its own variable and the objective
 * is the sum of every rank's loss):
 *   ALLREDUCE sum -> ALLREDUCE sum of dy; mean -> ALLREDUCE mean of dy; max, min: TS_EUNSUPPORTED
 *   ALLGATHER d -> REDUCE_SCATTER d sum
 *   REDUCE_SCATTER d sum -> ALLGATHER d; mean -> ALLGATHER d then a scale by 1/g; max, min:
 *   TS_EUNSUPPORTED
 *   ALLTOALL (s, c) -> ALLTOALL (c, s)
 *   RANK_SLICE d -> RANK_SLICE_BWD d; RANK_SLICE_BWD d -> RANK_SLICE d
 *   HALO (d, lo, hi) -> HALO_BWD (d, lo, hi); HALO_BWD -> HALO */
#include <stdint.h>
#include <string.h>

#include "graph_ir.h"
#include "graph_impl.h"

#define VS(v, buf) ts__vstr(g, (v), buf, sizeof buf)

/* The values of ts_reduce_op (tessera/comm.h, which the graph layer does not include;
 * src/runtime/run_coll.c checks that they agree). */
enum { RED_SUM = 0, RED_MEAN = 1, RED_MAX = 2, RED_MIN = 3, RED_COUNT = 4 };
static const char *red_name(int64_t op) {
  static const char *names[RED_COUNT] = {"sum", "mean", "max", "min"};
  return op >= 0 && op < RED_COUNT ? names[op] : "?";
}

/* Largest group size accepted (a sanity bound: shapes multiply by it). */
#define MAX_GROUP (1 << 24)

/* ---------------------------------------------------------------- checks */

/* One input, one output, a valid slot and group size. */
/* The attributes of collective `op`: slot, group size and its own arguments a2 (reduce op or
 * dim; alltoall's split dim) and a3 (reduce_scatter's reduce op, alltoall's concat dim). */
static void coll_attrs(ts_attrs *a, ts_op op, int64_t slot, int64_t group, int64_t a2, int64_t a3) {
  memset(a, 0, sizeof *a);
  ts_attr_set_coll_slot(a, slot);
  ts_attr_set_coll_group(a, group);
  switch (op) {
    case TS_OP_ALLREDUCE: ts_attr_set_allreduce_op(a, a2); break;
    case TS_OP_ALLGATHER: ts_attr_set_allgather_dim(a, a2); break;
    case TS_OP_REDUCE_SCATTER:
      ts_attr_set_reduce_scatter_dim(a, a2);
      ts_attr_set_reduce_scatter_op(a, a3);
      break;
    case TS_OP_ALLTOALL:
      ts_attr_set_alltoall_split_dim(a, a2);
      ts_attr_set_alltoall_concat_dim(a, a3);
      break;
    default: ts_attr_set_rank_slice_dim(a, a2); break; /* RANK_SLICE, RANK_SLICE_BWD */
  }
}

static int check_common(ts_graph *g, const ts__node *n, const char *op) {
  char b[160];
  if (n->nin != 1 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "%s: expects 1 input and 1 output, got %d/%d", op, n->nin,
                          n->nout);
  if (ts_attr_coll_slot(&n->a) < 0 || ts_attr_coll_slot(&n->a) >= TS_GRAPH_MAX_COMM_SLOTS)
    return ts__graph_fail(g, TS_EINVAL, "%s: communicator slot %lld of x %s is outside 0..%d", op,
                          (long long)ts_attr_coll_slot(&n->a), VS(n->in[0], b), TS_GRAPH_MAX_COMM_SLOTS - 1);
  if (ts_attr_coll_group(&n->a) < 1 || ts_attr_coll_group(&n->a) > MAX_GROUP)
    return ts__graph_fail(g, TS_EINVAL, "%s: group size %lld of x %s must be in 1..%d", op,
                          (long long)ts_attr_coll_group(&n->a), VS(n->in[0], b), MAX_GROUP);
  return TS_OK;
}

static int check_dim(ts_graph *g, const char *op, const char *what, int64_t d, int x) {
  char b[160];
  const int nd = g->vals[x].shape.ndim;
  if (d < 0 || d >= nd)
    return ts__graph_fail(g, TS_ESHAPE, "%s: %s %lld out of range for x %s (ndim %d)", op, what,
                          (long long)d, VS(x, b), nd);
  return TS_OK;
}

static int check_divisible(ts_graph *g, const char *op, const char *what, int64_t d, int64_t gs, int x) {
  char b[160];
  const int64_t len = g->vals[x].shape.dims[d];
  if (len % gs != 0)
    return ts__graph_fail(g, TS_ESHAPE,
                          "%s: x %s has length %lld along %s %lld, which is not divisible by the "
                          "group size %lld",
                          op, VS(x, b), (long long)len, what, (long long)d, (long long)gs);
  return TS_OK;
}

static int check_multiply(ts_graph *g, const char *op, int64_t d, int64_t gs, int x) {
  char b[160];
  if (g->vals[x].shape.dims[d] > INT64_MAX / 2 / gs)
    return ts__graph_fail(g, TS_ESHAPE, "%s: x %s times the group size %lld along dim %lld overflows",
                          op, VS(x, b), (long long)gs, (long long)d);
  return TS_OK;
}

static int check_reduce(ts_graph *g, const char *op, int64_t red, int x) {
  char b[160];
  if (red < 0 || red >= RED_COUNT)
    return ts__graph_fail(g, TS_EINVAL, "%s: reduce op %lld for x %s is not one of 0 sum, 1 mean, 2 max, 3 min",
                          op, (long long)red, VS(x, b));
  const ts_dtype dt = g->vals[x].dtype;
  if (dt != TS_F32 && dt != TS_BF16 && dt != TS_F16 && dt != TS_I32 && dt != TS_I64)
    return ts__graph_fail(g, TS_EDTYPE, "%s: x %s: reductions take f32, bf16, f16, i32 or i64", op,
                          VS(x, b));
  return TS_OK;
}

/* ---------------------------------------------------------------- shape inference */

static int infer_allreduce(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  if (check_common(g, n, "allreduce") || check_reduce(g, "allreduce", ts_attr_allreduce_op(&n->a), n->in[0]))
    return g->status;
  odt[0] = g->vals[n->in[0]].dtype;
  osh[0] = g->vals[n->in[0]].shape;
  return TS_OK;
}

static int infer_allgather(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  const int64_t d = ts_attr_allgather_dim(&n->a), gs = ts_attr_coll_group(&n->a);
  if (check_common(g, n, "allgather") || check_dim(g, "allgather", "dim", d, n->in[0]) ||
      check_multiply(g, "allgather", d, gs, n->in[0]))
    return g->status;
  odt[0] = g->vals[n->in[0]].dtype;
  osh[0] = g->vals[n->in[0]].shape;
  osh[0].dims[d] *= gs;
  return TS_OK;
}

static int infer_reduce_scatter(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  const int64_t d = ts_attr_reduce_scatter_dim(&n->a), gs = ts_attr_coll_group(&n->a);
  if (check_common(g, n, "reduce_scatter") || check_reduce(g, "reduce_scatter", ts_attr_reduce_scatter_op(&n->a), n->in[0]) ||
      check_dim(g, "reduce_scatter", "dim", d, n->in[0]) ||
      check_divisible(g, "reduce_scatter", "dim", d, gs, n->in[0]))
    return g->status;
  odt[0] = g->vals[n->in[0]].dtype;
  osh[0] = g->vals[n->in[0]].shape;
  osh[0].dims[d] /= gs;
  return TS_OK;
}

static int infer_alltoall(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  const int64_t s = ts_attr_alltoall_split_dim(&n->a), c = ts_attr_alltoall_concat_dim(&n->a), gs = ts_attr_coll_group(&n->a);
  char b[160];
  if (check_common(g, n, "alltoall") || check_dim(g, "alltoall", "split dim", s, n->in[0]) ||
      check_dim(g, "alltoall", "concat dim", c, n->in[0]))
    return g->status;
  if (s == c)
    return ts__graph_fail(g, TS_EINVAL,
                          "alltoall: split dim and concat dim are both %lld for x %s; they must differ",
                          (long long)s, VS(n->in[0], b));
  if (check_divisible(g, "alltoall", "split dim", s, gs, n->in[0]) ||
      check_multiply(g, "alltoall", c, gs, n->in[0]))
    return g->status;
  odt[0] = g->vals[n->in[0]].dtype;
  osh[0] = g->vals[n->in[0]].shape;
  osh[0].dims[s] /= gs;
  osh[0].dims[c] *= gs;
  return TS_OK;
}

static int infer_rank_slice(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  const int64_t d = ts_attr_rank_slice_dim(&n->a), gs = ts_attr_coll_group(&n->a);
  if (check_common(g, n, "rank_slice") || check_dim(g, "rank_slice", "dim", d, n->in[0]) ||
      check_divisible(g, "rank_slice", "dim", d, gs, n->in[0]))
    return g->status;
  odt[0] = g->vals[n->in[0]].dtype;
  osh[0] = g->vals[n->in[0]].shape;
  osh[0].dims[d] /= gs;
  return TS_OK;
}

static int infer_rank_slice_bwd(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  const int64_t d = ts_attr_rank_slice_dim(&n->a), gs = ts_attr_coll_group(&n->a);
  if (check_common(g, n, "rank_slice_bwd") || check_dim(g, "rank_slice_bwd", "dim", d, n->in[0]) ||
      check_multiply(g, "rank_slice_bwd", d, gs, n->in[0]))
    return g->status;
  odt[0] = g->vals[n->in[0]].dtype;
  osh[0] = g->vals[n->in[0]].shape;
  osh[0].dims[d] *= gs;
  return TS_OK;
}

static int infer_halo(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  const int bwd = n->op == TS_OP_HALO_BWD;
  const char *op = bwd ? "halo_bwd" : "halo";
  const int64_t d = ts_attr_halo_dim(&n->a), lo = ts_attr_halo_lo(&n->a), hi = ts_attr_halo_hi(&n->a);
  char b[160];
  if (check_common(g, n, op) || check_dim(g, op, "dim", d, n->in[0])) return g->status;
  const int64_t len = g->vals[n->in[0]].shape.dims[d], core = bwd ? len - lo - hi : len;
  if (lo < 0 || hi < 0 || lo > core || hi > core)
    return ts__graph_fail(g, TS_ESHAPE, "%s: halo rows lo %lld, hi %lld along dim %lld of x %s must be in 0..%lld "
                          "(the rows one rank holds)", op, (long long)lo, (long long)hi, (long long)d, VS(n->in[0], b),
                          (long long)core);
  odt[0] = g->vals[n->in[0]].dtype;
  osh[0] = g->vals[n->in[0]].shape;
  osh[0].dims[d] = bwd ? core : len + lo + hi;
  return TS_OK;
}

/* ---------------------------------------------------------------- gradients */

/* Emits collective `op` on value x with the slot and group size of node n and op arguments a2, a3
 * (see coll_attrs). */
static int emit_coll(ts_graph *g, const ts__node *n, ts_op op, int x, int64_t a2, int64_t a3) {
  ts_attrs a;
  coll_attrs(&a, op, ts_attr_coll_slot(&n->a), ts_attr_coll_group(&n->a), a2, a3);
  return ts__emit(g, op, &x, 1, &a);
}

static int not_differentiable(ts_graph *g, const ts__node *n, const char *op, int64_t red) {
  char b[160];
  return ts__graph_fail(g, TS_EUNSUPPORTED,
                        "%s: reduce op %s has no gradient (only sum and mean are differentiable); "
                        "node %s, x %s",
                        op, red_name(red), n->name ? n->name : "", VS(n->in[0], b));
}

static int grad_allreduce(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  const int64_t red = ts_attr_allreduce_op(&n.a);
  if (red != RED_SUM && red != RED_MEAN) return not_differentiable(g, &n, "allreduce", red);
  dx[0] = emit_coll(g, &n, TS_OP_ALLREDUCE, dy[0], red, 0);
  return dx[0] < 0 ? g->status : TS_OK;
}

static int grad_allgather(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  dx[0] = emit_coll(g, &n, TS_OP_REDUCE_SCATTER, dy[0], ts_attr_allgather_dim(&n.a), RED_SUM);
  return dx[0] < 0 ? g->status : TS_OK;
}

/* v * alpha in v's float dtype (SCALE is f32: other dtypes go through f32 and are rounded once). */
static int emit_scale_any(ts_graph *g, int v, float alpha) {
  const ts_dtype dt = g->vals[v].dtype;
  ts_attrs a;
  memset(&a, 0, sizeof a);
  if (dt != TS_F32) {
    ts_attr_set_cast_dtype(&a, TS_F32);
    v = ts__emit(g, TS_OP_CAST, &v, 1, &a);
    if (v < 0) return -1;
  }
  memset(&a, 0, sizeof a);
  ts_attr_set_scale_alpha(&a, alpha);
  v = ts__emit(g, TS_OP_SCALE, &v, 1, &a);
  if (v < 0 || dt == TS_F32) return v;
  memset(&a, 0, sizeof a);
  ts_attr_set_cast_dtype(&a, dt);
  return ts__emit(g, TS_OP_CAST, &v, 1, &a);
}

static int grad_reduce_scatter(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  const int64_t red = ts_attr_reduce_scatter_op(&n.a);
  if (red != RED_SUM && red != RED_MEAN) return not_differentiable(g, &n, "reduce_scatter", red);
  dx[0] = emit_coll(g, &n, TS_OP_ALLGATHER, dy[0], ts_attr_reduce_scatter_dim(&n.a), 0);
  if (dx[0] >= 0 && red == RED_MEAN && ts_attr_coll_group(&n.a) > 1) dx[0] = emit_scale_any(g, dx[0], 1.0f / (float)ts_attr_coll_group(&n.a));
  return dx[0] < 0 ? g->status : TS_OK;
}

static int grad_alltoall(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  dx[0] = emit_coll(g, &n, TS_OP_ALLTOALL, dy[0], ts_attr_alltoall_concat_dim(&n.a), ts_attr_alltoall_split_dim(&n.a));
  return dx[0] < 0 ? g->status : TS_OK;
}

static int grad_rank_slice(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  dx[0] = emit_coll(g, &n, TS_OP_RANK_SLICE_BWD, dy[0], ts_attr_rank_slice_dim(&n.a), 0);
  return dx[0] < 0 ? g->status : TS_OK;
}

static int grad_rank_slice_bwd(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  dx[0] = emit_coll(g, &n, TS_OP_RANK_SLICE, dy[0], ts_attr_rank_slice_dim(&n.a), 0);
  return dx[0] < 0 ? g->status : TS_OK;
}

static int grad_halo(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  ts_attrs a = n.a; /* slot, group, dim, lo, hi */
  dx[0] = ts__emit(g, n.op == TS_OP_HALO ? TS_OP_HALO_BWD : TS_OP_HALO, &dy[0], 1, &a);
  return dx[0] < 0 ? g->status : TS_OK;
}

/* ---------------------------------------------------------------- builders */

/* Adds collective `op` on x. Negative dims count from the end (PyTorch); out-of-range ones are
 * left for shape inference to report. */
static ts_val build(ts_graph *g, ts_op op, const char *name, ts_val x, int slot, int group_size,
                    int64_t a2, int a2_is_dim, int64_t a3, int a3_is_dim) {
  if (!g) return TS_NONE;
  int xi = ts__vidx(g, x, name);
  if (xi < 0 || g->status) return TS_NONE;
  const int nd = g->vals[xi].shape.ndim;
  if (a2_is_dim && a2 < 0 && a2 >= -nd) a2 += nd;
  if (a3_is_dim && a3 < 0 && a3 >= -nd) a3 += nd;
  ts_attrs a;
  coll_attrs(&a, op, slot, group_size, a2, a3);
  return ts__add1(g, op, &xi, 1, &a);
}

ts_val ts_allreduce(ts_graph *g, ts_val x, int slot, int group_size, int op) {
  return build(g, TS_OP_ALLREDUCE, "allreduce", x, slot, group_size, op, 0, 0, 0);
}

ts_val ts_allgather(ts_graph *g, ts_val x, int slot, int group_size, int dim) {
  return build(g, TS_OP_ALLGATHER, "allgather", x, slot, group_size, dim, 1, 0, 0);
}

ts_val ts_reduce_scatter(ts_graph *g, ts_val x, int slot, int group_size, int dim, int op) {
  return build(g, TS_OP_REDUCE_SCATTER, "reduce_scatter", x, slot, group_size, dim, 1, op, 0);
}

ts_val ts_alltoall(ts_graph *g, ts_val x, int slot, int group_size, int split_dim, int concat_dim) {
  return build(g, TS_OP_ALLTOALL, "alltoall", x, slot, group_size, split_dim, 1, concat_dim, 1);
}

ts_val ts_rank_slice(ts_graph *g, ts_val x, int slot, int group_size, int dim) {
  return build(g, TS_OP_RANK_SLICE, "rank_slice", x, slot, group_size, dim, 1, 0, 0);
}

ts_val ts_halo(ts_graph *g, ts_val x, int slot, int group_size, int dim, int lo, int hi) {
  if (!g) return TS_NONE;
  int xi = ts__vidx(g, x, "halo");
  if (xi < 0 || g->status) return TS_NONE;
  const int nd = g->vals[xi].shape.ndim;
  if (dim < 0 && dim >= -nd) dim += nd;
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_coll_slot(&a, slot);
  ts_attr_set_coll_group(&a, group_size);
  ts_attr_set_halo_dim(&a, dim);
  ts_attr_set_halo_lo(&a, lo);
  ts_attr_set_halo_hi(&a, hi);
  return ts__add1(g, TS_OP_HALO, &xi, 1, &a);
}

void ts__register_coll(ts__opdef *tab) {
  tab[TS_OP_HALO] = (ts__opdef){"halo", infer_halo, grad_halo, 0};
  tab[TS_OP_HALO_BWD] = (ts__opdef){"halo_bwd", infer_halo, grad_halo, 0};
  tab[TS_OP_ALLREDUCE] = (ts__opdef){"allreduce", infer_allreduce, grad_allreduce, 0};
  tab[TS_OP_ALLGATHER] = (ts__opdef){"allgather", infer_allgather, grad_allgather, 0};
  tab[TS_OP_REDUCE_SCATTER] = (ts__opdef){"reduce_scatter", infer_reduce_scatter, grad_reduce_scatter, 0};
  tab[TS_OP_ALLTOALL] = (ts__opdef){"alltoall", infer_alltoall, grad_alltoall, 0};
  tab[TS_OP_RANK_SLICE] = (ts__opdef){"rank_slice", infer_rank_slice, grad_rank_slice, 0};
  tab[TS_OP_RANK_SLICE_BWD] = (ts__opdef){"rank_slice_bwd", infer_rank_slice_bwd, grad_rank_slice_bwd, 0};
}
