/* Executor adapters for the softmax family (SOFTMAX, SOFTMAX_BWD, SOFTMAX_CE, SOFTMAX_CE_BWD).
 *
 * TS_BACKEND_FAST: oneDNN softmax_v2 for a softmax over the last (contiguous) axis; over a
 * middle axis oneDNN 2.6 falls back to its reference implementation, so the vectorised
 * reference kernel is used there. Cross-entropy has no oneDNN primitive: the fused reference
 * kernel serves both backends, on f32 or 16-bit logits (the _lp entry points: loss and lse f32,
 * dlogits in the logits' dtype).
 *
 * Class-sharded cross-entropy (attrs sync = slot + 1, group = group size g, offset = class offset,
 * classes = C; src/graph/op_softmax.c) communicates through the plan's communicator in the slot,
 * which must have exactly g ranks (g == 1 runs the unsharded kernels, without one). Forward: the
 * local row maxima are reduced (MAX) in place in the lse output, then one SUM of the (N,3) row
 * statistics (sum of exp, label logit, sum of logits), then every rank computes the same loss
 * and global lse. Backward: the scalar dloss is summed over the group first (the objective is
 * the sum of every rank's loss, op_coll.c's convention), then each rank writes its block. */
#include <stdlib.h>

#include "graph/graph_ir.h"
#include "run_impl.h"
#include "../kernels/softmax.h"

static void split_axis(const ts_shape *s, int axis, int64_t *outer, int64_t *len, int64_t *inner) {
  ts__outer_inner(s, axis, outer, inner);
  *len = s->dims[axis];
}

static int run_softmax(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int64_t o, l, i;
  split_axis(&in[0].shape, (int)ts_attr_softmax_axis(&n->a), &o, &l, &i);
  if (out[0].dtype != TS_F32)
    return ts__softmax_fwd_lp(out[0].dtype, in[0].data, out[0].data, o, l, i, (int)ts_attr_softmax_log(&n->a),
                              ctx->backend == TS_BACKEND_FAST);
  if (ctx->backend == TS_BACKEND_FAST && i == 1)
    return ts__softmax_fwd_dnnl(in[0].data, out[0].data, o, l, i, (int)ts_attr_softmax_log(&n->a));
  return ts__softmax_fwd_ref(in[0].data, out[0].data, o, l, i, (int)ts_attr_softmax_log(&n->a));
}

static int run_softmax_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int64_t o, l, i;
  split_axis(&in[1].shape, (int)ts_attr_softmax_axis(&n->a), &o, &l, &i);
  if (out[0].dtype != TS_F32)
    return ts__softmax_bwd_lp(out[0].dtype, in[0].data, in[1].data, out[0].data, o, l, i, (int)ts_attr_softmax_log(&n->a),
                              ctx->backend == TS_BACKEND_FAST);
  if (ctx->backend == TS_BACKEND_FAST && i == 1)
    return ts__softmax_bwd_dnnl(in[0].data, in[1].data, out[0].data, o, l, i, (int)ts_attr_softmax_log(&n->a));
  return ts__softmax_bwd_ref(in[0].data, in[1].data, out[0].data, o, l, i, (int)ts_attr_softmax_log(&n->a));
}

/* The communicator of a class-sharded cross-entropy node (*out = NULL when g == 1 and the slot
 * is empty), checked as run_coll.c checks the collectives'. */
static int ce_comm(ts__runctx *ctx, const ts__run_node *n, ts_comm **out) {
  return ts__run_comm(ctx, n, (int)ts_attr_softmax_ce_sync(&n->a) - 1, (int)ts_attr_softmax_ce_group(&n->a), "class-sharded ", out);
}

static int run_ce(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int64_t N = in[0].shape.dims[0], Cl = in[0].shape.dims[1];
  const int i64 = in[1].dtype == TS_I64;
  const float s = ts_attr_softmax_ce_smoothing(&n->a);
  const int64_t ignore = ts_attr_softmax_ce_ignore(&n->a);
  float *lse = n->nout > 1 ? out[1].data : NULL;
  ts_comm *c = NULL;
  if (ts_attr_softmax_ce_sync(&n->a) != 0) {
    int rc = ce_comm(ctx, n, &c);
    if (rc) return rc;
  }
  if (ts_attr_softmax_ce_sync(&n->a) == 0 || ts_attr_softmax_ce_group(&n->a) == 1) /* unsharded, or a group of one: the whole row is here */
    return ts__softmax_ce_fwd_lp(in[0].dtype, in[0].data, in[1].data, i64, N, Cl, s, ignore, out[0].data, lse);
  const int64_t C = ts_attr_softmax_ce_classes(&n->a), offset = ts_attr_softmax_ce_offset(&n->a);
  float *buf = malloc(sizeof(float) * (size_t)(4 * N + 1));
  if (!buf)
    return ts_error_set(TS_ENOMEM, "softmax_ce: out of memory for %lld rows of statistics",
                        (long long)N);
  float *M = lse ? lse : buf + 3 * N, *st = buf;
  int rc = ts__softmax_ce_shard_max_lp(in[0].dtype, in[0].data, in[1].data, i64, N, Cl, C, ignore, M);
  if (!rc) rc = ts_comm_allreduce(c, M, M, (size_t)N, TS_F32, TS_REDUCE_MAX);
  if (!rc)
    rc = ts__softmax_ce_shard_stats_lp(in[0].dtype, in[0].data, in[1].data, i64, N, Cl, offset, ignore, M, st);
  if (!rc) rc = ts_comm_allreduce(c, st, st, (size_t)(3 * N), TS_F32, TS_REDUCE_SUM);
  if (!rc) rc = ts__softmax_ce_shard_loss_ref(in[1].data, i64, N, C, s, ignore, M, st, out[0].data, M);
  free(buf);
  return rc;
}

static int run_ce_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int64_t N = in[1].shape.dims[0], Cl = in[1].shape.dims[1];
  const int i64 = in[2].dtype == TS_I64;
  const float *lse = n->nin > 3 ? in[3].data : NULL;
  float dloss = *(const float *)in[0].data;
  if (ts_attr_softmax_ce_sync(&n->a) == 0)
    return ts__softmax_ce_bwd_lp(in[1].dtype, dloss, in[1].data, in[2].data, i64, lse, N, Cl, ts_attr_softmax_ce_smoothing(&n->a),
                                 ts_attr_softmax_ce_ignore(&n->a), out[0].data);
  ts_comm *c = NULL;
  int rc = ce_comm(ctx, n, &c);
  if (rc) return rc;
  if (ts_attr_softmax_ce_group(&n->a) > 1) { /* d(sum over ranks of the replicated loss) */
    const float mine = dloss;
    rc = ts_comm_allreduce(c, &mine, &dloss, 1, TS_F32, TS_REDUCE_SUM);
    if (rc) return rc;
  }
  return ts__softmax_ce_shard_bwd_lp(in[1].dtype, dloss, in[1].data, in[2].data, i64, lse, N, Cl, ts_attr_softmax_ce_classes(&n->a),
                                     ts_attr_softmax_ce_offset(&n->a), ts_attr_softmax_ce_smoothing(&n->a), ts_attr_softmax_ce_ignore(&n->a), out[0].data);
}

void ts__register_run_softmax(ts__run_fn *tab) {
  tab[TS_OP_SOFTMAX] = run_softmax;
  tab[TS_OP_SOFTMAX_BWD] = run_softmax_bwd;
  tab[TS_OP_SOFTMAX_CE] = run_ce;
  tab[TS_OP_SOFTMAX_CE_BWD] = run_ce_bwd;
}
