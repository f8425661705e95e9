/* Executor adapters for the collective family (attribute layouts: src/graph/op_coll.c).
 *
 * Each op takes the communicator of its slot (ctx->comms[slot]), which must have exactly the
 * group size the op was built for; g == 1 runs without one, as a copy. comm/ works on whole
 * buffers (blocks along dim 0), so ops along another dim go through a staging buffer: a tensor
 * viewed as (outer, len, inner) around dim d is moved with one swap of its first two axes
 * (rows of len/g*inner elements stay contiguous):
 *   ALLGATHER d:      gather (g, outer, L*inner) into staging, swap into y (outer, g*L, inner)
 *   REDUCE_SCATTER d: swap x (outer, g, B*inner) into staging (g, outer, B*inner), reduce-scatter
 *   ALLTOALL (s, c):  swap x (outer_s, g, rest) into (g, outer_s, rest), all-to-all, swap the
 *                     received (g, outer_c, C*inner_c) into y (outer_c, g*C, inner_c)
 * with no staging when outer == 1 (dim 0, or leading dims of size 1). */
#include <stdlib.h>
#include <string.h>

#include "graph/graph_ir.h"
#include "run_impl.h"
#include "../kernels/shape.h"

_Static_assert(TS_REDUCE_SUM == 0 && TS_REDUCE_MEAN == 1 && TS_REDUCE_MAX == 2 && TS_REDUCE_MIN == 3,
               "op_coll.c records ts_reduce_op values as 0 sum, 1 mean, 2 max, 3 min");

static const char *opname(const ts__run_node *n) { return ts_op_name(n->op); }

int ts__run_comm(ts__runctx *ctx, const ts__run_node *n, int slot, int gs, const char *what, ts_comm **out) {
  ts_comm *c = slot >= 0 && slot < ctx->ncomms && ctx->comms ? ctx->comms[slot] : NULL;
  *out = NULL;
  if (!c) {
    if (gs == 1) return TS_OK;
    return ts_error_set(TS_EINVAL,
                        "plan slot %d holds no communicator, and this %s%s is over a group of %d "
                        "ranks (ts_plan_set_comm)",
                        slot, what, ts_op_name(n->op), gs);
  }
  if (ts_comm_size(c) != gs)
    return ts_error_set(TS_EINVAL,
                        "the communicator in plan slot %d has %d rank(s), but this %s%s was built "
                        "for a group of %d",
                        slot, ts_comm_size(c), what, ts_op_name(n->op), gs);
  *out = c;
  return TS_OK;
}

/* The node's communicator: *out = NULL (run as a copy) when g == 1 and the slot is empty. */
static int get_comm(ts__runctx *ctx, const ts__run_node *n, ts_comm **out) {
  return ts__run_comm(ctx, n, (int)ts_attr_coll_slot(&n->a), (int)ts_attr_coll_group(&n->a), "", out);
}

/* src (a, b, c) -> dst (b, a, c), elements of esize bytes. */
static int swap01(const void *src, void *dst, size_t esize, int64_t a, int64_t b, int64_t c) {
  const int64_t dims[3] = {a, b, c};
  const int perm[3] = {1, 0, 2};
  return ts__permute_ref(src, dst, esize, 3, dims, perm);
}

static void *staging(const ts__run_node *n, size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) ts_error_set(TS_ENOMEM, "%s: out of memory for a %zu-byte staging buffer", opname(n), bytes);
  return p;
}

static int copy_through(const ts_tensor *in, ts_tensor *out) {
  return ts__copy_ref(in[0].data, out[0].data, ts_tensor_nbytes(&in[0]));
}

static int run_allreduce(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts_comm *c;
  int rc = get_comm(ctx, n, &c);
  if (rc) return rc;
  if (ts_attr_coll_group(&n->a) == 1) return copy_through(in, out);
  return ts_comm_allreduce(c, in[0].data, out[0].data, (size_t)ts_tensor_numel(&in[0]), in[0].dtype,
                           (ts_reduce_op)ts_attr_allreduce_op(&n->a));
}

static int run_allgather(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts_comm *c;
  int rc = get_comm(ctx, n, &c);
  if (rc) return rc;
  const int64_t gs = ts_attr_coll_group(&n->a);
  if (gs == 1) return copy_through(in, out);
  int64_t outer, inner;
  ts__outer_inner(&in[0].shape, (int)ts_attr_allgather_dim(&n->a), &outer, &inner);
  const size_t cnt = (size_t)ts_tensor_numel(&in[0]), es = ts_dtype_size(in[0].dtype);
  if (outer == 1) return ts_comm_allgather(c, in[0].data, out[0].data, cnt, in[0].dtype);
  void *st = staging(n, cnt * (size_t)gs * es);
  if (!st) return TS_ENOMEM;
  rc = ts_comm_allgather(c, in[0].data, st, cnt, in[0].dtype);
  if (!rc) rc = swap01(st, out[0].data, es, gs, outer, (int64_t)cnt / outer);
  free(st);
  return rc;
}

static int run_reduce_scatter(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts_comm *c;
  int rc = get_comm(ctx, n, &c);
  if (rc) return rc;
  const int64_t gs = ts_attr_coll_group(&n->a);
  if (gs == 1) return copy_through(in, out);
  int64_t outer, inner;
  ts__outer_inner(&in[0].shape, (int)ts_attr_reduce_scatter_dim(&n->a), &outer, &inner);
  const size_t cnt = (size_t)ts_tensor_numel(&out[0]), es = ts_dtype_size(in[0].dtype);
  const ts_reduce_op op = (ts_reduce_op)ts_attr_reduce_scatter_op(&n->a);
  if (outer == 1) return ts_comm_reduce_scatter_block(c, in[0].data, out[0].data, cnt, in[0].dtype, op);
  void *st = staging(n, cnt * (size_t)gs * es);
  if (!st) return TS_ENOMEM;
  rc = swap01(in[0].data, st, es, outer, gs, (int64_t)cnt / outer);
  if (!rc) rc = ts_comm_reduce_scatter_block(c, st, out[0].data, cnt, in[0].dtype, op);
  free(st);
  return rc;
}

static int run_alltoall(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts_comm *c;
  int rc = get_comm(ctx, n, &c);
  if (rc) return rc;
  const int64_t gs = ts_attr_coll_group(&n->a);
  if (gs == 1) return copy_through(in, out);
  const int s = (int)ts_attr_alltoall_split_dim(&n->a), cd = (int)ts_attr_alltoall_concat_dim(&n->a);
  const size_t total = (size_t)ts_tensor_numel(&in[0]), es = ts_dtype_size(in[0].dtype);
  const size_t blk = total / (size_t)gs; /* elements sent to each rank */
  int64_t outer_s, inner_s, outer_c, inner_c;
  ts__outer_inner(&in[0].shape, s, &outer_s, &inner_s);
  /* the received blocks have x's shape with dim s divided by g; y concatenates them along c */
  ts_shape bs = in[0].shape;
  bs.dims[s] /= gs;
  ts__outer_inner(&bs, cd, &outer_c, &inner_c);
  const int stage_send = outer_s != 1, stage_recv = outer_c != 1;
  char *st = NULL;
  if (stage_send || stage_recv) {
    st = staging(n, total * es * (size_t)(stage_send + stage_recv));
    if (!st) return TS_ENOMEM;
  }
  const void *send = in[0].data;
  void *recv = out[0].data;
  if (stage_send) {
    rc = swap01(in[0].data, st, es, outer_s, gs, (int64_t)blk / outer_s);
    send = st;
  }
  if (stage_recv) recv = st + (stage_send ? total * es : 0);
  if (!rc) rc = ts_comm_alltoall(c, send, recv, blk, in[0].dtype);
  if (!rc && stage_recv) rc = swap01(recv, out[0].data, es, gs, outer_c, (int64_t)blk / outer_c);
  free(st);
  return rc;
}

/* This rank's block along dim d: [rank*B, (rank+1)*B) of a length g*B. */
static int rank_block(ts__runctx *ctx, const ts__run_node *n, const ts_shape *full, int64_t *outer,
                      int64_t *inner, int64_t *len, int64_t *start, int64_t *end) {
  ts_comm *c;
  int rc = get_comm(ctx, n, &c);
  if (rc) return rc;
  const int d = (int)ts_attr_rank_slice_dim(&n->a);
  ts__outer_inner(full, d, outer, inner);
  *len = full->dims[d];
  const int64_t B = *len / ts_attr_coll_group(&n->a);
  const int r = c ? ts_comm_rank(c) : 0;
  *start = r * B;
  *end = *start + B;
  return TS_OK;
}

static int run_rank_slice(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int64_t outer, inner, len, st, en;
  int rc = rank_block(ctx, n, &in[0].shape, &outer, &inner, &len, &st, &en);
  if (rc) return rc;
  if (ts_attr_coll_group(&n->a) == 1) return copy_through(in, out);
  return ts__slice_ref(in[0].data, out[0].data, ts_dtype_size(in[0].dtype), outer, len, inner, st, en);
}

static int run_rank_slice_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int64_t outer, inner, len, st, en;
  int rc = rank_block(ctx, n, &out[0].shape, &outer, &inner, &len, &st, &en);
  if (rc) return rc;
  if (ts_attr_coll_group(&n->a) == 1) return copy_through(in, out);
  return ts__slice_bwd_ref(in[0].data, out[0].data, ts_dtype_size(out[0].dtype), outer, len, inner,
                           st, en);
}

/* ---- halo exchange: rows moved between neighbouring ranks of the group along dim d ----
 * A tensor viewed as (outer, len, inner) around d; a block of rows [a, a+n) is outer runs of
 * n*inner elements, packed into a contiguous message. */
enum { HALO_TAG_DOWN = 0x7a10, HALO_TAG_UP, HALO_TAG_BACK_UP, HALO_TAG_BACK_DOWN };

static void rows_copy(const char *src, int64_t ls, int64_t a, char *dst, int64_t ld, int64_t b, int64_t n,
                      int64_t outer, int64_t inner, size_t es) {
  const size_t run = (size_t)(n * inner) * es;
  for (int64_t o = 0; o < outer; o++)
    memcpy(dst + (size_t)((o * ld + b) * inner) * es, src + (size_t)((o * ls + a) * inner) * es, run);
}

/* dst rows [b, b+n) of (outer, ld, inner) += the packed rows of src (outer, n, inner). */
static int rows_add(const char *src, char *dst, int64_t ld, int64_t b, int64_t n, int64_t outer, int64_t inner,
                    ts_dtype dt) {
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < n * inner; i++) {
      const size_t s = (size_t)(o * n * inner + i), t = (size_t)((o * ld + b) * inner + i);
      switch (dt) {
        case TS_F32: ((float *)dst)[t] += ((const float *)src)[s]; break;
        case TS_BF16:
          ((uint16_t *)dst)[t] = ts_f32_to_bf16(ts_bf16_to_f32(((uint16_t *)dst)[t]) + ts_bf16_to_f32(((const uint16_t *)src)[s]));
          break;
        case TS_F16:
          ((uint16_t *)dst)[t] = ts_f32_to_f16(ts_f16_to_f32(((uint16_t *)dst)[t]) + ts_f16_to_f32(((const uint16_t *)src)[s]));
          break;
        default: return ts_error_set(TS_EDTYPE, "halo_bwd: gradients of dtype %s cannot be summed", ts_dtype_name(dt));
      }
    }
  return TS_OK;
}

/* Sends rows [a, a+n) of x (outer, len, inner) to `peer` and receives n rows from `from` into
 * the packed buffer rbuf (either peer may be -1: nothing sent / received). */
static int halo_swap(ts_comm *c, const char *x, int64_t len, int64_t a, int64_t n, int peer, int from, int tag,
                     char *sbuf, char *rbuf, int64_t outer, int64_t inner, ts_dtype dt) {
  const size_t cnt = (size_t)(outer * n * inner), es = ts_dtype_size(dt);
  if (n == 0) return TS_OK;
  ts_comm_req *req = NULL;
  int rc = TS_OK;
  if (peer >= 0) {
    rows_copy(x, len, a, sbuf, n, 0, n, outer, inner, es);
    rc = ts_comm_isend(c, sbuf, cnt, dt, peer, tag, &req);
  }
  if (!rc && from >= 0) rc = ts_comm_recv(c, rbuf, cnt, dt, from, tag);
  if (req) {
    int w = ts_comm_wait(req);
    ts_comm_req_free(req);
    if (!rc) rc = w;
  }
  return rc;
}

static int run_halo(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts_comm *c;
  int rc = get_comm(ctx, n, &c);
  if (rc) return rc;
  const int d = (int)ts_attr_halo_dim(&n->a);
  const int64_t lo = ts_attr_halo_lo(&n->a), hi = ts_attr_halo_hi(&n->a), len = in[0].shape.dims[d];
  int64_t outer, inner;
  ts__outer_inner(&in[0].shape, d, &outer, &inner);
  const size_t es = ts_dtype_size(in[0].dtype);
  const int g = c ? ts_comm_size(c) : 1, r = c ? ts_comm_rank(c) : 0;
  const int64_t ly = lo + len + hi, mx = lo > hi ? lo : hi;
  char *y = out[0].data;
  memset(y, 0, (size_t)ts_tensor_nbytes(&out[0])); /* the halo past the group's ends: zeros */
  rows_copy(in[0].data, len, 0, y, ly, lo, len, outer, inner, es);
  if (g == 1 || mx == 0) return TS_OK;
  char *buf = staging(n, 2 * (size_t)(outer * mx * inner) * es);
  if (!buf) return TS_ENOMEM;
  char *sb = buf, *rb = buf + (size_t)(outer * mx * inner) * es;
  /* my last lo rows go down to r+1 (its top halo); r-1's come to me */
  rc = halo_swap(c, in[0].data, len, len - lo, lo, r + 1 < g ? r + 1 : -1, r > 0 ? r - 1 : -1, HALO_TAG_DOWN, sb,
                 rb, outer, inner, in[0].dtype);
  if (!rc && r > 0 && lo) rows_copy(rb, lo, 0, y, ly, 0, lo, outer, inner, es);
  /* my first hi rows go up to r-1 (its bottom halo); r+1's come to me */
  if (!rc)
    rc = halo_swap(c, in[0].data, len, 0, hi, r > 0 ? r - 1 : -1, r + 1 < g ? r + 1 : -1, HALO_TAG_UP, sb, rb,
                   outer, inner, in[0].dtype);
  if (!rc && r + 1 < g && hi) rows_copy(rb, hi, 0, y, ly, lo + len, hi, outer, inner, es);
  free(buf);
  return rc ? ts_error_wrap(rc, "halo of '%s' along dim %d", n->name ? n->name : "", d) : TS_OK;
}

static int run_halo_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts_comm *c;
  int rc = get_comm(ctx, n, &c);
  if (rc) return rc;
  const int d = (int)ts_attr_halo_dim(&n->a);
  const int64_t lo = ts_attr_halo_lo(&n->a), hi = ts_attr_halo_hi(&n->a), ly = in[0].shape.dims[d];
  const int64_t len = ly - lo - hi, mx = lo > hi ? lo : hi;
  int64_t outer, inner;
  ts__outer_inner(&out[0].shape, d, &outer, &inner);
  const size_t es = ts_dtype_size(in[0].dtype);
  const int g = c ? ts_comm_size(c) : 1, r = c ? ts_comm_rank(c) : 0;
  char *dx = out[0].data;
  rows_copy(in[0].data, ly, lo, dx, len, 0, len, outer, inner, es);
  if (g == 1 || mx == 0) return TS_OK;
  char *buf = staging(n, 2 * (size_t)(outer * mx * inner) * es);
  if (!buf) return TS_ENOMEM;
  char *sb = buf, *rb = buf + (size_t)(outer * mx * inner) * es;
  /* the gradient of my top halo belongs to r-1's last lo rows; r+1's to mine */
  rc = halo_swap(c, in[0].data, ly, 0, lo, r > 0 ? r - 1 : -1, r + 1 < g ? r + 1 : -1, HALO_TAG_BACK_UP, sb, rb,
                 outer, inner, in[0].dtype);
  if (!rc && r + 1 < g && lo) rc = rows_add(rb, dx, len, len - lo, lo, outer, inner, in[0].dtype);
  /* the gradient of my bottom halo belongs to r+1's first hi rows; r-1's to mine */
  if (!rc)
    rc = halo_swap(c, in[0].data, ly, lo + len, hi, r + 1 < g ? r + 1 : -1, r > 0 ? r - 1 : -1, HALO_TAG_BACK_DOWN,
                   sb, rb, outer, inner, in[0].dtype);
  if (!rc && r > 0 && hi) rc = rows_add(rb, dx, len, 0, hi, outer, inner, in[0].dtype);
  free(buf);
  return rc ? ts_error_wrap(rc, "halo_bwd of '%s' along dim %d", n->name ? n->name : "", d) : TS_OK;
}

void ts__register_run_coll(ts__run_fn *tab) {
  tab[TS_OP_HALO] = run_halo;
  tab[TS_OP_HALO_BWD] = run_halo_bwd;
  tab[TS_OP_ALLREDUCE] = run_allreduce;
  tab[TS_OP_ALLGATHER] = run_allgather;
  tab[TS_OP_REDUCE_SCATTER] = run_reduce_scatter;
  tab[TS_OP_ALLTOALL] = run_alltoall;
  tab[TS_OP_RANK_SLICE] = run_rank_slice;
  tab[TS_OP_RANK_SLICE_BWD] = run_rank_slice_bwd;
}
