/* Executor adapters for ring attention (attribute layouts: src/graph/op_ring_attention.c; the
 * block kernels: src/kernels/ring_attention.h).
 *
 * Rank r of the ring's N holds its rows of q, k, v. Forward, step s = 0..N-1: the key/value block
 * in hand is rank (r - s) mod N's; while its attention is computed (merged into the running output
 * by the online softmax), the block is sent on to rank r+1 and the next one received from r-1
 * (non-blocking, so the exchange overlaps the compute). Backward, same ring: the key/value block
 * is prefetched as in forward, the block's key/value gradients (f32 accumulators) are summed into
 * as it passes and follow it one step behind the compute; after the N-th step they have reached
 * its owner. Blocks travel in the op's dtype and layout; the compute is f32, head-major.
 *
 * Global row positions: zigzag 0, rank r's row i is r T + i; zigzag 1 (T = 2c), rows i < c are
 * chunk r's (r c + i), the rest chunk 2N-1-r's ((2N-1-r) c + i - c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_ir.h"
#include "run_impl.h"
#include "../kernels/lowp.h"
#include "../kernels/ring_attention.h"
#include "../kernels/shape.h"

enum { RING_TAG_KV = 7301, RING_TAG_GRAD = 7302 };


typedef struct {
  int64_t B, H, T, D;
  int layout, zig, N, r;
  float scale;
  ts_comm *c;
} ring;

static int setup(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *q, ring *R) {
  R->layout = (int)ts_attr_ring_attention_layout(&n->a);
  R->zig = (int)ts_attr_ring_attention_zigzag(&n->a);
  R->N = (int)ts_attr_ring_attention_group(&n->a);
  R->scale = ts_attr_ring_attention_scale(&n->a);
  R->B = q->shape.dims[0];
  R->D = q->shape.dims[3];
  R->T = q->shape.dims[R->layout == 1 ? 1 : 2];
  R->H = q->shape.dims[R->layout == 1 ? 2 : 1];
  int rc = ts__run_comm(ctx, n, (int)ts_attr_ring_attention_slot(&n->a), R->N, "", &R->c);
  R->r = R->c ? ts_comm_rank(R->c) : 0;
  return rc;
}

static void positions(const ring *R, int rank, int64_t *pos) {
  int64_t c = R->T / 2;
  for (int64_t i = 0; i < R->T; i++)
    pos[i] = !R->zig ? rank * R->T + i : i < c ? rank * c + i : (2 * (int64_t)R->N - 1 - rank) * c + (i - c);
}

/* x (dt, layout) -> f32 (B,H,T,D) head-major; tmp: scratch of n floats for (B,T,H,D). */
static void to_heads(const ring *R, const void *x, ts_dtype dt, float *dst, float *tmp) {
  int64_t n = R->B * R->H * R->T * R->D;
  if (R->layout == 0) {
    ts__lp_to_f32(x, dt, dst, n);
    return;
  }
  ts__lp_to_f32(x, dt, tmp, n);
  const int64_t dims[4] = {R->B, R->T, R->H, R->D};
  const int perm[4] = {0, 2, 1, 3};
  ts__permute_ref(tmp, dst, sizeof(float), 4, dims, perm);
}

/* f32 (B,H,T,D) -> y (dt, layout). */
static void from_heads(const ring *R, const float *src, void *y, ts_dtype dt, float *tmp) {
  int64_t n = R->B * R->H * R->T * R->D;
  if (R->layout == 0) {
    ts__lp_from_f32(src, y, dt, n);
    return;
  }
  const int64_t dims[4] = {R->B, R->H, R->T, R->D};
  const int perm[4] = {0, 2, 1, 3};
  ts__permute_ref(src, tmp, sizeof(float), 4, dims, perm);
  ts__lp_from_f32(tmp, y, dt, n);
}

/* Sends `send` (bytes) to rank r+1 and receives `recv` from r-1, non-blocking: reqs[0..1]. */
static int shift(const ring *R, const void *send, void *recv, size_t bytes, int tag, ts_comm_req **reqs) {
  int nx = (R->r + 1) % R->N, pv = (R->r + R->N - 1) % R->N;
  int rc = ts_comm_irecv(R->c, recv, bytes, TS_U8, pv, tag, &reqs[0]);
  if (!rc) rc = ts_comm_isend(R->c, send, bytes, TS_U8, nx, tag, &reqs[1]);
  return rc;
}

/* Waits for both and releases them; the first failure. */
static int settle(ts_comm_req **reqs) {
  int rc = ts_comm_wait_all(reqs, 2);
  for (int k = 0; k < 2; k++) ts_comm_req_free(reqs[k]), reqs[k] = NULL;
  return rc;
}

static int oom(const ts__run_node *n) {
  return ts_error_set(TS_ENOMEM, "%s %s: out of memory for its buffers", ts_op_name(n->op), n->name);
}

static int run_ring(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ring R;
  int rc = setup(ctx, n, &in[0], &R);
  if (rc) return rc;
  const ts_dtype dt = in[0].dtype;
  const int64_t ne = R.B * R.H * R.T * R.D, BH = R.B * R.H;
  const size_t tb = (size_t)ne * ts_dtype_size(dt); /* one tensor's bytes as it travels */
  float *f = ts_alloc(sizeof(float) * (size_t)(5 * ne + BH * R.T));
  char *kv = malloc(tb ? 4 * tb : 1); /* two k|v blocks: in hand and arriving */
  int64_t *pos = malloc(sizeof(int64_t) * (size_t)(2 * R.T));
  if (!f || !kv || !pos) {
    ts_free(f), free(kv), free(pos);
    return oom(n);
  }
  float *q = f, *k = f + ne, *v = f + 2 * ne, *o = f + 3 * ne, *tmp = f + 4 * ne, *lse = f + 5 * ne;
  int64_t *qpos = pos, *kpos = pos + R.T;
  positions(&R, R.r, qpos);
  to_heads(&R, in[0].data, dt, q, tmp);
  memset(o, 0, sizeof(float) * (size_t)ne);
  for (int64_t i = 0; i < BH * R.T; i++) lse[i] = -INFINITY;
  memcpy(kv, in[1].data, tb);
  memcpy(kv + tb, in[2].data, tb);
  for (int s = 0; s < R.N && !rc; s++) {
    char *cur = kv + (size_t)(s % 2) * 2 * tb, *nxt = kv + (size_t)((s + 1) % 2) * 2 * tb;
    ts_comm_req *reqs[2] = {NULL, NULL};
    if (s < R.N - 1) rc = shift(&R, cur, nxt, 2 * tb, RING_TAG_KV, reqs);
    if (!rc) {
      positions(&R, (R.r - s + R.N) % R.N, kpos);
      to_heads(&R, cur, dt, k, tmp);
      to_heads(&R, cur + tb, dt, v, tmp);
      rc = ts__ring_attn_fwd_block(q, k, v, qpos, kpos, BH, R.T, R.D, R.scale, o, lse);
    }
    if (reqs[0] || reqs[1]) {
      int wc = settle(reqs);
      if (!rc) rc = wc;
    }
  }
  if (!rc) { /* lse is (B,H,T) in both layouts */
    from_heads(&R, o, out[0].data, dt, tmp);
    memcpy(out[1].data, lse, sizeof(float) * (size_t)(BH * R.T));
  }
  ts_free(f);
  free(kv);
  free(pos);
  return rc;
}

static int run_ring_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ring R;
  int rc = setup(ctx, n, &in[1], &R);
  if (rc) return rc;
  const ts_dtype dt = in[1].dtype;
  const int64_t ne = R.B * R.H * R.T * R.D, BH = R.B * R.H;
  const size_t tb = (size_t)ne * ts_dtype_size(dt), gb = sizeof(float) * (size_t)ne;
  /* f32: q, do, k, v, dq, tmp, di; the k|v blocks (dt) and the dk|dv accumulators (f32), two each */
  float *f = ts_alloc(sizeof(float) * (size_t)(6 * ne + BH * R.T));
  char *kv = malloc(tb ? 4 * tb : 1), *gr = malloc(gb ? 4 * gb : 1);
  int64_t *pos = malloc(sizeof(int64_t) * (size_t)(2 * R.T));
  if (!f || !kv || !gr || !pos) {
    ts_free(f), free(kv), free(gr), free(pos);
    return oom(n);
  }
  float *q = f, *dout = f + ne, *k = f + 2 * ne, *v = f + 3 * ne, *dq = f + 4 * ne, *tmp = f + 5 * ne,
        *di = f + 6 * ne;
  int64_t *qpos = pos, *kpos = pos + R.T;
  positions(&R, R.r, qpos);
  /* di = rowsum(do * o), with o in k's room for now */
  to_heads(&R, in[0].data, dt, dout, tmp);
  to_heads(&R, in[4].data, dt, k, tmp);
  for (int64_t i = 0; i < BH * R.T; i++) {
    double s = 0;
    for (int64_t c = 0; c < R.D; c++) s += (double)dout[i * R.D + c] * k[i * R.D + c];
    di[i] = (float)s;
  }
  to_heads(&R, in[1].data, dt, q, tmp);
  memset(dq, 0, gb);
  memset(gr, 0, 2 * gb);
  memcpy(kv, in[2].data, tb);
  memcpy(kv + tb, in[3].data, tb);
  const float *lse = in[5].data;
  for (int s = 0; s < R.N && !rc; s++) {
    char *cur = kv + (size_t)(s % 2) * 2 * tb, *nxt = kv + (size_t)((s + 1) % 2) * 2 * tb;
    char *gcur = gr + (size_t)(s % 2) * 2 * gb, *gnxt = gr + (size_t)((s + 1) % 2) * 2 * gb;
    ts_comm_req *reqs[2] = {NULL, NULL}, *greqs[2] = {NULL, NULL};
    if (s < R.N - 1) rc = shift(&R, cur, nxt, 2 * tb, RING_TAG_KV, reqs);
    if (!rc) {
      positions(&R, (R.r - s + R.N) % R.N, kpos);
      to_heads(&R, cur, dt, k, tmp);
      to_heads(&R, cur + tb, dt, v, tmp);
      rc = ts__ring_attn_bwd_block(dout, q, k, v, lse, di, qpos, kpos, BH, R.T, R.D, R.scale, dq, (float *)gcur,
                                   (float *)(gcur + gb));
    }
    /* the block's gradients follow it (the last step brings each home) */
    if (!rc && R.N > 1) {
      rc = shift(&R, gcur, gnxt, 2 * gb, RING_TAG_GRAD, greqs);
      int wc = settle(greqs);
      if (!rc) rc = wc;
    }
    if (reqs[0] || reqs[1]) {
      int wc = settle(reqs);
      if (!rc) rc = wc;
    }
  }
  if (!rc) {
    /* after N steps the accumulators in hand are this rank's block's: in gr's slot N % 2 */
    const char *g = gr + (size_t)(R.N > 1 ? R.N % 2 : 0) * 2 * gb;
    from_heads(&R, dq, out[0].data, dt, tmp);
    from_heads(&R, (const float *)g, out[1].data, dt, tmp);
    from_heads(&R, (const float *)(g + gb), out[2].data, dt, tmp);
  }
  ts_free(f);
  free(kv);
  free(gr);
  free(pos);
  return rc;
}

void ts__register_run_ring_attention(ts__run_fn *tab) {
  tab[TS_OP_RING_ATTENTION] = run_ring;
  tab[TS_OP_RING_ATTENTION_BWD] = run_ring_bwd;
}
