/* Embedding family: EMBEDDING, EMBEDDING_BWD, ONE_HOT (the ops indexed by integer ids).
 *
 * Attributes (ts_attr_* accessors; tessera/ops.def):
 *   EMBEDDING     (table (V,D) float, ids i32/i64 of shape S) -> y (S...,D)
 *                 offset = row offset, sharded = 1 vocabulary-sharded (both 0: a whole table)
 *   EMBEDDING_BWD (dy (S...,D) f32, ids S) -> dtable (V,D) f32
 *                 rows = V (local rows), offset = row offset, sharded = 1 vocabulary-sharded
 * Sharded (Megatron's vocab-parallel embedding): the table holds rows [offset, offset+V) of the
 * full table; an id in that range gives row id - offset, any other id >= 0 a row of zeros (so
 * the sum over the shards is the full lookup), and the backward scatter-adds only those ids.
 *
 *   ONE_HOT       (ids i32/i64 of shape S) -> y: S with a dim of `depth` inserted at `axis`
 *                 depth, axis (0..ndim(S)), dtype (y's), on, off: y = on where the id equals
 *                 the index along axis, off elsewhere (ids outside [0,depth): all off)
 *
 * Gradients: table gets EMBEDDING_BWD (a deterministic scatter-add, sharded like the forward),
 * ids get none. Ids outside [0,V) (sharded: negative ids) are caught when the kernel runs
 * (TS_ERANGE naming the position and id). */
#include <string.h>

#include "graph_ir.h"
#include "graph_impl.h"

#define VS(v, buf) ts__vstr(g, (v), buf, sizeof buf)

static int check_ids(ts_graph *g, const char *op, int ids, int table_or_dy, int ids_max_ndim) {
  char b[160], c[160];
  const ts__value *iv = ts__val(g, ids);
  if (iv->dtype != TS_I32 && iv->dtype != TS_I64)
    return ts__graph_fail(g, TS_EDTYPE, "%s: ids %s must be i32 or i64 (table %s)", op,
                          VS(ids, b), VS(table_or_dy, c));
  if (iv->shape.ndim > ids_max_ndim)
    return ts__graph_fail(g, TS_ESHAPE, "%s: ids %s have more than %d dims", op, VS(ids, b),
                          ids_max_ndim);
  return TS_OK;
}

static int infer_embedding(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b[160], c[160];
  if (n->nin != 2 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "embedding: expects 2 inputs (table, ids) and 1 output, got %d/%d",
                          n->nin, n->nout);
  const ts__value *t = ts__val(g, n->in[0]), *ids = ts__val(g, n->in[1]);
  if (t->shape.ndim != 2 || !ts_dtype_is_float(t->dtype))
    return ts__graph_fail(g, TS_ESHAPE, "embedding: table %s must be a 2-D float (V,D) tensor (ids %s)",
                          VS(n->in[0], b), VS(n->in[1], c));
  if (check_ids(g, "embedding", n->in[1], n->in[0], TS_MAX_DIMS - 1)) return g->status;
  if (ts_attr_embedding_sharded(&n->a) != 0 && ts_attr_embedding_sharded(&n->a) != 1)
    return ts__graph_fail(g, TS_EINVAL, "embedding: table %s: sharded flag %lld must be 0 or 1",
                          VS(n->in[0], b), (long long)ts_attr_embedding_sharded(&n->a));
  if (ts_attr_embedding_offset(&n->a) < 0 || (ts_attr_embedding_offset(&n->a) != 0 && !ts_attr_embedding_sharded(&n->a)))
    return ts__graph_fail(g, TS_EINVAL,
                          "embedding: table %s: row offset %lld must be >= 0, and 0 unless sharded",
                          VS(n->in[0], b), (long long)ts_attr_embedding_offset(&n->a));
  odt[0] = t->dtype;
  osh[0] = ids->shape;
  osh[0].dims[osh[0].ndim++] = t->shape.dims[1];
  return TS_OK;
}

ts_val ts_embedding(ts_graph *g, ts_val table, ts_val ids) {
  if (!g) return TS_NONE;
  int in[2];
  in[0] = ts__vidx(g, table, "embedding");
  if (in[0] < 0) return TS_NONE;
  in[1] = ts__vidx(g, ids, "embedding");
  if (in[1] < 0) return TS_NONE;
  return ts__add1(g, TS_OP_EMBEDDING, in, 2, NULL);
}

ts_val ts_embedding_sharded(ts_graph *g, ts_val table, ts_val ids, int64_t row_offset) {
  if (!g) return TS_NONE;
  int in[2];
  in[0] = ts__vidx(g, table, "embedding_sharded");
  if (in[0] < 0) return TS_NONE;
  in[1] = ts__vidx(g, ids, "embedding_sharded");
  if (in[1] < 0) return TS_NONE;
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_embedding_offset(&a, row_offset);
  ts_attr_set_embedding_sharded(&a, 1);
  return ts__add1(g, TS_OP_EMBEDDING, in, 2, &a);
}

static int grad_embedding(ts_graph *g, int node, const int *dy, int *dx) {
  ts__node n = g->nodes[node];
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_embedding_bwd_rows(&a, g->vals[n.in[0]].shape.dims[0]);
  ts_attr_set_embedding_bwd_offset(&a, ts_attr_embedding_offset(&n.a)); /* sharded: the forward's row offset */
  ts_attr_set_embedding_bwd_sharded(&a, ts_attr_embedding_sharded(&n.a));
  int in[2] = {dy[0], n.in[1]};
  dx[0] = ts__emit(g, TS_OP_EMBEDDING_BWD, in, 2, &a);
  dx[1] = -1;
  return dx[0] < 0 ? g->status : TS_OK;
}

static int infer_embedding_bwd(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b[160], c[160];
  if (n->nin != 2 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "embedding_bwd: expects 2 inputs (dy, ids) and 1 output, got %d/%d",
                          n->nin, n->nout);
  const ts__value *dy = ts__val(g, n->in[0]), *ids = ts__val(g, n->in[1]);
  if (check_ids(g, "embedding_bwd", n->in[1], n->in[0], TS_MAX_DIMS - 1)) return g->status;
  static const char *const nm[1] = {"dy"};
  if (ts__same_float(g, "embedding_bwd", n->in, nm, 1, NULL)) return g->status;
  int ok = dy->shape.ndim == ids->shape.ndim + 1;
  for (int d = 0; ok && d < ids->shape.ndim; d++) ok = dy->shape.dims[d] == ids->shape.dims[d];
  if (!ok)
    return ts__graph_fail(g, TS_ESHAPE, "embedding_bwd: dy %s must have the ids' shape %s plus one dim",
                          VS(n->in[0], b), VS(n->in[1], c));
  if (ts_attr_embedding_bwd_rows(&n->a) <= 0)
    return ts__graph_fail(g, TS_ESHAPE, "embedding_bwd: vocabulary size %lld must be positive",
                          (long long)ts_attr_embedding_bwd_rows(&n->a));
  if ((ts_attr_embedding_bwd_sharded(&n->a) != 0 && ts_attr_embedding_bwd_sharded(&n->a) != 1) || ts_attr_embedding_bwd_offset(&n->a) < 0 || (ts_attr_embedding_bwd_offset(&n->a) != 0 && !ts_attr_embedding_bwd_sharded(&n->a)))
    return ts__graph_fail(g, TS_EINVAL,
                          "embedding_bwd: dy %s: sharded flag %lld must be 0 or 1 and row offset "
                          "%lld >= 0 (0 unless sharded)",
                          VS(n->in[0], b), (long long)ts_attr_embedding_bwd_sharded(&n->a), (long long)ts_attr_embedding_bwd_offset(&n->a));
  odt[0] = dy->dtype;
  osh[0] = ts_shape2(ts_attr_embedding_bwd_rows(&n->a), dy->shape.dims[dy->shape.ndim - 1]);
  return TS_OK;
}

/* ---------------------------------------------------------------- ONE_HOT */

static int infer_one_hot(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b[160];
  if (n->nin != 1 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "one_hot: expects 1 input (ids) and 1 output, got %d/%d", n->nin, n->nout);
  const ts__value *ids = ts__val(g, n->in[0]);
  if (ids->dtype != TS_I32 && ids->dtype != TS_I64)
    return ts__graph_fail(g, TS_EDTYPE, "one_hot: ids %s must be i32 or i64 (class ids)", VS(n->in[0], b));
  if (ids->shape.ndim >= TS_MAX_DIMS)
    return ts__graph_fail(g, TS_ESHAPE, "one_hot: ids %s have more than %d dims", VS(n->in[0], b), TS_MAX_DIMS - 1);
  int64_t depth = ts_attr_one_hot_depth(&n->a), axis = ts_attr_one_hot_axis(&n->a), dt = ts_attr_one_hot_dtype(&n->a);
  if (depth <= 0)
    return ts__graph_fail(g, TS_EINVAL, "one_hot: depth %lld must be positive (ids %s)", (long long)depth,
                          VS(n->in[0], b));
  if (axis < 0 || axis > ids->shape.ndim)
    return ts__graph_fail(g, TS_EINVAL, "one_hot: axis %lld out of range 0..%d for ids %s", (long long)axis,
                          ids->shape.ndim, VS(n->in[0], b));
  if (dt < 0 || dt >= TS_DTYPE_COUNT)
    return ts__graph_fail(g, TS_EDTYPE, "one_hot: invalid dtype %lld", (long long)dt);
  ts_shape s = ids->shape;
  for (int d = s.ndim; d > axis; d--) s.dims[d] = s.dims[d - 1];
  s.dims[axis] = depth;
  s.ndim++;
  odt[0] = (ts_dtype)dt;
  osh[0] = s;
  return TS_OK;
}

ts_val ts_one_hot(ts_graph *g, ts_val ids, int64_t depth, int axis, float on_value, float off_value, ts_dtype dt) {
  if (!g) return TS_NONE;
  int in = ts__vidx(g, ids, "one_hot");
  if (in < 0) return TS_NONE;
  int nd = g->vals[in].shape.ndim;
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_one_hot_depth(&a, depth);
  ts_attr_set_one_hot_axis(&a, axis < 0 ? axis + nd + 1 : axis);
  if (axis < -(nd + 1)) ts_attr_set_one_hot_axis(&a, -1); /* out of range either way: the message says so */
  ts_attr_set_one_hot_dtype(&a, dt);
  ts_attr_set_one_hot_on(&a, on_value);
  ts_attr_set_one_hot_off(&a, off_value);
  return ts__add1(g, TS_OP_ONE_HOT, &in, 1, &a);
}

void ts__register_embedding(ts__opdef *tab) {
  tab[TS_OP_EMBEDDING] = (ts__opdef){"embedding", infer_embedding, grad_embedding, 0};
  tab[TS_OP_EMBEDDING_BWD] = (ts__opdef){"embedding_bwd", infer_embedding_bwd, NULL, 0};
  tab[TS_OP_ONE_HOT] = (ts__opdef){"one_hot", infer_one_hot, NULL, 0};
}
