/* The collective family on a plan on a GPU: the CPU adapters' semantics (run_coll.c: a tensor
 * viewed as (outer, len, inner) around the op's dim, blocks along dim 0 for the collective
 * itself) with device buffers, through the slot's device collectives (ts_plan_set_dcoll,
 * runtime/dcoll.h: NCCL or staged MPI) on the compute stream; the staging swaps are
 * ts__gpu_permute into the plan's device scratch. A node over a group of 1 is a copy; a slot
 * without device collectives is refused naming the node. */
#include "graph/graph_ir.h"
#include "device/gpu_kernels.h"
#include "runtime/dcoll.h"
#include "run_impl.h"
#include "../kernels/shape.h"

void ts__run_dcoll_used(ts__runctx *ctx, ts__dcoll *x) {
  for (int k = 0; k < ctx->nused; k++)
    if (ctx->used[k] == x) return;
  if (ctx->nused < (int)(sizeof ctx->used / sizeof ctx->used[0])) ctx->used[ctx->nused++] = x;
  else ctx->used_all = 1;
}

int ts__run_dcoll(ts__runctx *ctx, const ts__run_node *n, int slot, int gs, const char *what, ts__dcoll **out) {
  *out = NULL;
  if (gs == 1) return TS_OK;
  ts__dcoll *x = slot >= 0 && slot < TS_PLAN_MAX_COMMS && ctx->dcolls ? ctx->dcolls[slot] : NULL;
  if (!x)
    return ts_error_set(TS_EINVAL, "%s%s '%s': plan slot %d has no device collectives (ts_plan_set_dcoll), and the "
                        "node is over a group of %d ranks", what, ts_op_name(n->op), n->name ? n->name : "?", slot, gs);
  if (ts__dcoll_size(x) != gs)
    return ts_error_set(TS_EINVAL, "%s%s '%s': the device collectives in plan slot %d have %d rank(s), the node was "
                        "built for a group of %d", what, ts_op_name(n->op), n->name ? n->name : "?", slot,
                        ts__dcoll_size(x), gs);
  ts__run_dcoll_used(ctx, x);
  *out = x;
  return TS_OK;
}

/* the node's device collectives, NULL (a copy) for a group of 1 */
static int dcoll_of(ts__runctx *ctx, const ts__run_node *n, ts__dcoll **out) {
  return ts__run_dcoll(ctx, n, (int)ts_attr_coll_slot(&n->a), (int)ts_attr_coll_group(&n->a), "", out);
}

static int copy_through(ts__runctx *ctx, const ts_tensor *in, ts_tensor *out) {
  if (out[0].data == in[0].data) return TS_OK;
  return ts__dev_copy(ctx->dev, out[0].data, in[0].data, ts_tensor_nbytes(&in[0]), TS__D2D, NULL);
}

/* src (a, b, c) -> dst (b, a, c) on the device */
static int swap01(ts__runctx *ctx, const void *src, void *dst, size_t es, int64_t a, int64_t b, int64_t c) {
  const int64_t dims[3] = {a, b, c};
  const int perm[3] = {1, 0, 2};
  return ts__gpu_permute(ctx->dev, es, src, dst, 3, dims, perm, NULL);
}

static int run_allreduce(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts__dcoll *x;
  int rc = dcoll_of(ctx, n, &x);
  if (rc || !x) return rc ? rc : copy_through(ctx, in, out);
  return ts__dcoll_allreduce(x, in[0].data, out[0].data, (size_t)ts_tensor_numel(&in[0]), in[0].dtype,
                             (ts_reduce_op)ts_attr_allreduce_op(&n->a), NULL);
}

static int run_allgather(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts__dcoll *x;
  int rc = dcoll_of(ctx, n, &x);
  if (rc || !x) return rc ? rc : copy_through(ctx, in, out);
  const int64_t gs = ts_attr_coll_group(&n->a);
  int64_t outer, inner;
  ts__outer_inner(&in[0].shape, (int)ts_attr_allgather_dim(&n->a), &outer, &inner);
  const size_t cnt = (size_t)ts_tensor_numel(&in[0]), es = ts_dtype_size(in[0].dtype);
  if (outer == 1) return ts__dcoll_allgather(x, in[0].data, out[0].data, cnt, in[0].dtype, NULL);
  void *st;
  if ((rc = ts__run_dev_scratch(ctx, cnt * (size_t)gs * es, &st))) return rc;
  rc = ts__dcoll_allgather(x, in[0].data, st, cnt, in[0].dtype, NULL);
  return rc ? rc : swap01(ctx, st, out[0].data, es, gs, outer, (int64_t)cnt / outer);
}

static int run_reduce_scatter(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts__dcoll *x;
  int rc = dcoll_of(ctx, n, &x);
  if (rc || !x) return rc ? rc : copy_through(ctx, in, out);
  const int64_t gs = ts_attr_coll_group(&n->a);
  int64_t outer, inner;
  ts__outer_inner(&in[0].shape, (int)ts_attr_reduce_scatter_dim(&n->a), &outer, &inner);
  const size_t cnt = (size_t)ts_tensor_numel(&out[0]), es = ts_dtype_size(in[0].dtype);
  const ts_reduce_op op = (ts_reduce_op)ts_attr_reduce_scatter_op(&n->a);
  if (outer == 1) return ts__dcoll_reduce_scatter(x, in[0].data, out[0].data, cnt, in[0].dtype, op, NULL);
  void *st;
  if ((rc = ts__run_dev_scratch(ctx, cnt * (size_t)gs * es, &st))) return rc;
  rc = swap01(ctx, in[0].data, st, es, outer, gs, (int64_t)cnt / outer);
  return rc ? rc : ts__dcoll_reduce_scatter(x, st, out[0].data, cnt, in[0].dtype, op, NULL);
}

static int run_alltoall(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts__dcoll *x;
  int rc = dcoll_of(ctx, n, &x);
  if (rc || !x) return rc ? rc : copy_through(ctx, in, out);
  const int64_t gs = ts_attr_coll_group(&n->a);
  const int s = (int)ts_attr_alltoall_split_dim(&n->a), cd = (int)ts_attr_alltoall_concat_dim(&n->a);
  const size_t total = (size_t)ts_tensor_numel(&in[0]), es = ts_dtype_size(in[0].dtype), blk = total / (size_t)gs;
  int64_t outer_s, inner_s, outer_c, inner_c;
  ts__outer_inner(&in[0].shape, s, &outer_s, &inner_s);
  ts_shape bs = in[0].shape; /* a received block: x's shape with dim s divided by g */
  bs.dims[s] /= gs;
  ts__outer_inner(&bs, cd, &outer_c, &inner_c);
  const int stage_send = outer_s != 1, stage_recv = outer_c != 1;
  char *st = NULL;
  if ((stage_send || stage_recv) &&
      (rc = ts__run_dev_scratch(ctx, total * es * (size_t)(stage_send + stage_recv), (void **)&st)))
    return rc;
  const void *send = in[0].data;
  void *recv = stage_recv ? st + (stage_send ? total * es : 0) : out[0].data;
  if (stage_send) {
    rc = swap01(ctx, in[0].data, st, es, outer_s, gs, (int64_t)blk / outer_s);
    send = st;
  }
  if (!rc) rc = ts__dcoll_alltoall(x, send, recv, blk, in[0].dtype, NULL);
  if (!rc && stage_recv) rc = swap01(ctx, recv, out[0].data, es, gs, outer_c, (int64_t)blk / outer_c);
  return rc;
}

/* this rank's block along dim d of the full shape: [rank*B, (rank+1)*B) */
static int rank_block(ts__runctx *ctx, const ts__run_node *n, const ts_shape *full, int64_t *outer, int64_t *inner,
                      int64_t *len, int64_t *start, int64_t *B, ts__dcoll **x) {
  int rc = dcoll_of(ctx, n, x);
  if (rc) return rc;
  const int d = (int)ts_attr_rank_slice_dim(&n->a);
  ts__outer_inner(full, d, outer, inner);
  *len = full->dims[d];
  *B = *len / ts_attr_coll_group(&n->a);
  *start = (*x ? ts__dcoll_rank(*x) : 0) * *B;
  return TS_OK;
}

static int run_rank_slice(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int64_t outer, inner, len, a, B;
  ts__dcoll *x;
  int rc = rank_block(ctx, n, &in[0].shape, &outer, &inner, &len, &a, &B, &x);
  if (rc || !x) return rc ? rc : copy_through(ctx, in, out);
  return ts__gpu_blocks(ctx->dev, ts_dtype_size(in[0].dtype), in[0].data, len * inner, a * inner, out[0].data,
                        B * inner, 0, outer, B * inner, NULL);
}

static int run_rank_slice_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int64_t outer, inner, len, a, B;
  ts__dcoll *x;
  int rc = rank_block(ctx, n, &out[0].shape, &outer, &inner, &len, &a, &B, &x);
  if (rc || !x) return rc ? rc : copy_through(ctx, in, out);
  rc = ts__dev_memset0(ctx->dev, out[0].data, ts_tensor_nbytes(&out[0]), NULL);
  return rc ? rc : ts__gpu_blocks(ctx->dev, ts_dtype_size(out[0].dtype), in[0].data, B * inner, 0, out[0].data,
                                  len * inner, a * inner, outer, B * inner, NULL);
}

void ts__register_run_gpu_coll(ts__run_fn *tab) {
  tab[TS_OP_ALLREDUCE] = run_allreduce;
  tab[TS_OP_ALLGATHER] = run_allgather;
  tab[TS_OP_REDUCE_SCATTER] = run_reduce_scatter;
  tab[TS_OP_ALLTOALL] = run_alltoall;
  tab[TS_OP_RANK_SLICE] = run_rank_slice;
  tab[TS_OP_RANK_SLICE_BWD] = run_rank_slice_bwd;
}
