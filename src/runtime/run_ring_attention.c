/* Executor adapters for ring attention (attribute layouts: src/graph/op_ring_attention.c; the
 * block kernels: src/kernels/ring_attention.h).
 *
 * Rank r of the ring's N holds its rows of q, k, v. Forward, step s = 0..N-1: the key/value block
 * in hand is rank (r - s) mod N's; while its attention is computed (merged into the running output
 * by the online softmax), the block is sent on to rank r+1 and the next one received from r-1
 * (non-blocking, so the exchange overlaps the compute). Backward, same ring: the key/value block
 * is prefetched as in forward; its key/value gradients (f32) follow it one step behind: the partial
 * sum from the rank before is received while this rank computes its share, and the sum sent on
 * while the next step computes; after the N-th step each block's sum reaches its owner. Blocks travel in the op's dtype and layout; the compute is f32, head-major.
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

enum { RING_TAG_KV = 7301, RING_TAG_GRAD = 7302, RING_TAG_ORDER = 7303 /* and 7304 */ };


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

/* Forward on the rank's rows as R->zig places them: q, k, v (dt, layout) -> o (dt), lse (f32). */
static int core_fwd(const ts__run_node *n, const ring *R, ts_dtype dt, const void *qin, const void *kin,
                    const void *vin, void *oout, float *lout) {
  const int64_t ne = R->B * R->H * R->T * R->D, BH = R->B * R->H;
  const size_t tb = (size_t)ne * ts_dtype_size(dt); /* one tensor's bytes as it travels */
  float *f = ts_alloc(sizeof(float) * (size_t)(5 * ne + BH * R->T));
  char *kv = malloc(tb ? 4 * tb : 1); /* two k|v blocks: in hand and arriving */
  int64_t *pos = malloc(sizeof(int64_t) * (size_t)(2 * R->T));
  if (!f || !kv || !pos) {
    ts_free(f), free(kv), free(pos);
    return oom(n);
  }
  int rc = TS_OK;
  float *q = f, *k = f + ne, *v = f + 2 * ne, *o = f + 3 * ne, *tmp = f + 4 * ne, *lse = f + 5 * ne;
  int64_t *qpos = pos, *kpos = pos + R->T;
  positions(R, R->r, qpos);
  to_heads(R, qin, dt, q, tmp);
  memset(o, 0, sizeof(float) * (size_t)ne);
  for (int64_t i = 0; i < BH * R->T; i++) lse[i] = -INFINITY;
  memcpy(kv, kin, tb);
  memcpy(kv + tb, vin, tb);
  for (int s = 0; s < R->N && !rc; s++) {
    char *cur = kv + (size_t)(s % 2) * 2 * tb, *nxt = kv + (size_t)((s + 1) % 2) * 2 * tb;
    ts_comm_req *reqs[2] = {NULL, NULL};
    if (s < R->N - 1) rc = shift(R, cur, nxt, 2 * tb, RING_TAG_KV, reqs);
    if (!rc) {
      positions(R, (R->r - s + R->N) % R->N, kpos);
      to_heads(R, cur, dt, k, tmp);
      to_heads(R, cur + tb, dt, v, tmp);
      rc = ts__ring_attn_fwd_block(q, k, v, qpos, kpos, BH, R->T, R->D, R->scale, o, lse);
    }
    if (reqs[0] || reqs[1]) {
      int wc = settle(reqs);
      if (!rc) rc = wc;
    }
  }
  if (!rc) { /* lse is (B,H,T) in both layouts */
    from_heads(R, o, oout, dt, tmp);
    memcpy(lout, lse, sizeof(float) * (size_t)(BH * R->T));
  }
  ts_free(f);
  free(kv);
  free(pos);
  return rc;
}

/* Backward on the rank's rows as R->zig places them: (do, q, k, v, o: dt; lse f32) -> dq, dk, dv. */
static int core_bwd(const ts__run_node *n, const ring *R, ts_dtype dt, const void *doin, const void *qin,
                    const void *kin, const void *vin, const void *oin, const float *lse, void *dqo, void *dko,
                    void *dvo) {
  const int64_t ne = R->B * R->H * R->T * R->D, BH = R->B * R->H;
  const size_t tb = (size_t)ne * ts_dtype_size(dt), gb = sizeof(float) * (size_t)ne;
  /* f32: q, do, k, v, dq, tmp, di; the k|v blocks (dt) and the dk|dv accumulators (f32), two each */
  float *f = ts_alloc(sizeof(float) * (size_t)(6 * ne + BH * R->T));
  /* gr: the block's dk|dv contributions computed here, two in turn (one may still be sending),
   * and the partial sums arriving from the rank before */
  char *kv = malloc(tb ? 4 * tb : 1), *gr = malloc(gb ? 6 * gb : 1);
  int64_t *pos = malloc(sizeof(int64_t) * (size_t)(2 * R->T));
  if (!f || !kv || !gr || !pos) {
    ts_free(f), free(kv), free(gr), free(pos);
    return oom(n);
  }
  int rc = TS_OK;
  float *q = f, *dout = f + ne, *k = f + 2 * ne, *v = f + 3 * ne, *dq = f + 4 * ne, *tmp = f + 5 * ne,
        *di = f + 6 * ne;
  int64_t *qpos = pos, *kpos = pos + R->T;
  positions(R, R->r, qpos);
  /* di = rowsum(do * o), with o in k's room for now */
  to_heads(R, doin, dt, dout, tmp);
  to_heads(R, oin, dt, k, tmp);
  for (int64_t i = 0; i < BH * R->T; i++) {
    double sum = 0;
    for (int64_t c = 0; c < R->D; c++) sum += (double)dout[i * R->D + c] * k[i * R->D + c];
    di[i] = (float)sum;
  }
  to_heads(R, qin, dt, q, tmp);
  memset(dq, 0, gb);
  memcpy(kv, kin, tb);
  memcpy(kv + tb, vin, tb);
  /* The gradients of the block in hand at step s: the partial sum from the rank before (which
   * held it at step s-1; received while this step computes its share from zero), plus the share,
   * sent on to the next rank while the next step computes. The sum arriving after the last step
   * is this rank's own block's, complete. */
  const int nx = (R->r + 1) % R->N, pv = (R->r + R->N - 1) % R->N;
  char *in = gr + 4 * gb;
  ts_comm_req *sent[2] = {NULL, NULL};
  for (int s = 0; s < R->N && !rc; s++) {
    char *cur = kv + (size_t)(s % 2) * 2 * tb, *nxt = kv + (size_t)((s + 1) % 2) * 2 * tb;
    char *mine = gr + (size_t)(s % 2) * 2 * gb;
    ts_comm_req *reqs[2] = {NULL, NULL}, *got = NULL;
    if (s < R->N - 1) rc = shift(R, cur, nxt, 2 * tb, RING_TAG_KV, reqs);
    if (!rc && s > 0) rc = ts_comm_irecv(R->c, in, 2 * gb, TS_U8, pv, RING_TAG_GRAD, &got);
    if (!rc && sent[s % 2]) { /* the send of step s-2 from this buffer */
      rc = ts_comm_wait(sent[s % 2]);
      ts_comm_req_free(sent[s % 2]);
      sent[s % 2] = NULL;
    }
    if (!rc) {
      memset(mine, 0, 2 * gb);
      positions(R, (R->r - s + R->N) % R->N, kpos);
      to_heads(R, cur, dt, k, tmp);
      to_heads(R, cur + tb, dt, v, tmp);
      rc = ts__ring_attn_bwd_block(dout, q, k, v, lse, di, qpos, kpos, BH, R->T, R->D, R->scale, dq, (float *)mine,
                                   (float *)(mine + gb));
    }
    if (got) {
      int wc = ts_comm_wait(got);
      ts_comm_req_free(got);
      if (!rc) rc = wc;
      if (!rc) {
        float *a = (float *)mine;
        const float *b = (const float *)in;
        for (int64_t i = 0; i < 2 * ne; i++) a[i] += b[i];
      }
    }
    if (!rc && R->N > 1) rc = ts_comm_isend(R->c, mine, 2 * gb, TS_U8, nx, RING_TAG_GRAD, &sent[s % 2]);
    if (reqs[0] || reqs[1]) {
      int wc = settle(reqs);
      if (!rc) rc = wc;
    }
  }
  const char *g = gr; /* one rank: its own share is the whole */
  if (!rc && R->N > 1) {
    ts_comm_req *got = NULL;
    rc = ts_comm_irecv(R->c, in, 2 * gb, TS_U8, pv, RING_TAG_GRAD, &got);
    if (!rc) rc = ts_comm_wait(got);
    ts_comm_req_free(got);
    g = in;
  }
  int wc = settle(sent);
  if (!rc) rc = wc;
  if (!rc) {
    from_heads(R, dq, dqo, dt, tmp);
    from_heads(R, (const float *)g, dko, dt, tmp);
    from_heads(R, (const float *)(g + gb), dvo, dt, tmp);
  }
  ts_free(f);
  free(kv);
  free(gr);
  free(pos);
  return rc;
}

/* ---- balanced (zigzag 2): rows in order on the ranks, zigzag inside the op ----
 * Half-chunk h (of 2N, c = T/2 rows each) is held in order by rank h/2 (its half h%2) and zigzag
 * by rank z(h) = h < N ? h : 2N-1-h (its half h < N ? 0 : 1). The tensors are viewed as (outer, T,
 * inner) with T the sequence dim (layout (B,H,T,D): outer B*H, inner D; (B,T,H,D): B, H*D; lse:
 * B*H, 1); all n tensors' rows of one half travel as one message. */
typedef struct {
  const void *src;
  void *dst;
  size_t es;
  int64_t outer, inner;
} part;

static int zrank(const ring *R, int h) { return h < R->N ? h : 2 * R->N - 1 - h; }

/* Copies half `hs` of every part's src into buf (pack) or buf into half `hd` of every dst. */
static size_t halves(const ring *R, const part *p, int np, int hs, char *buf, int pack) {
  const int64_t c = R->T / 2;
  size_t at = 0;
  for (int j = 0; j < np; j++) {
    const size_t row = (size_t)p[j].inner * p[j].es, blk = (size_t)c * row;
    for (int64_t o = 0; o < p[j].outer; o++) {
      const size_t off = ((size_t)o * (size_t)R->T + (size_t)hs * (size_t)c) * row;
      if (pack) memcpy(buf + at, (const char *)p[j].src + off, blk);
      else memcpy((char *)p[j].dst + off, buf + at, blk);
      at += blk;
    }
  }
  return at;
}

/* to_zig 1: every part's src (rows in order) -> dst (zigzag rows); 0: back. */
static int reorder(const ring *R, const part *p, int np, int to_zig) {
  size_t bytes = 0;
  for (int j = 0; j < np; j++) bytes += (size_t)(p[j].outer * (R->T / 2) * p[j].inner) * p[j].es;
  char *buf = malloc(bytes ? 4 * bytes : 1);
  if (!buf) return ts_error_set(TS_ENOMEM, "ring_attention: out of memory reordering the rows (%zu bytes)", 4 * bytes);
  ts_comm_req *reqs[4] = {NULL, NULL, NULL, NULL};
  int rc = TS_OK, N = R->N, r = R->r;
  for (int k = 0; k < 2 && !rc; k++) { /* receive into buf[2 + k]: my half k of the target order */
    int h = to_zig ? (k ? 2 * N - 1 - r : r) : 2 * r + k;
    int from = to_zig ? h / 2 : zrank(R, h);
    rc = ts_comm_irecv(R->c, buf + (size_t)(2 + k) * bytes, bytes, TS_U8, from, RING_TAG_ORDER + k, &reqs[k]);
  }
  for (int k = 0; k < 2 && !rc; k++) { /* send my half k of the source order */
    int h = to_zig ? 2 * r + k : (k ? 2 * N - 1 - r : r);
    int to = to_zig ? zrank(R, h) : h / 2, slot = to_zig ? (h < N ? 0 : 1) : h % 2;
    halves(R, p, np, k, buf + (size_t)k * bytes, 1);
    rc = ts_comm_isend(R->c, buf + (size_t)k * bytes, bytes, TS_U8, to, RING_TAG_ORDER + slot, &reqs[2 + k]);
  }
  int wc = ts_comm_wait_all(reqs, 4);
  if (!rc) rc = wc;
  for (int k = 0; k < 4; k++) ts_comm_req_free(reqs[k]);
  if (!rc)
    for (int k = 0; k < 2; k++) halves(R, p, np, k, buf + (size_t)(2 + k) * bytes, 0);
  free(buf);
  return rc;
}

/* The part moving tensor x (dt, the layout's (outer, T, inner) view) from src to dst; lse f32 (B*H, T, 1). */
static part tensor_part(const ring *R, const void *src, void *dst, ts_dtype dt) {
  return R->layout == 1 ? (part){src, dst, ts_dtype_size(dt), R->B, R->H * R->D}
                        : (part){src, dst, ts_dtype_size(dt), R->B * R->H, R->D};
}
static part lse_part(const ring *R, const void *src, void *dst) { return (part){src, dst, sizeof(float), R->B * R->H, 1}; }

static int run_ring(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ring R;
  int rc = setup(ctx, n, &in[0], &R);
  if (rc) return rc;
  const ts_dtype dt = in[0].dtype;
  if (R.zig != 2 || R.N == 1) {
    if (R.zig == 2) R.zig = 0;
    return core_fwd(n, &R, dt, in[0].data, in[1].data, in[2].data, out[0].data, out[1].data);
  }
  const size_t tb = ts_tensor_nbytes(&in[0]), lb = ts_tensor_nbytes(&out[1]);
  char *z = malloc(4 * tb + lb + 1);
  if (!z) return oom(n);
  part pin[3];
  for (int j = 0; j < 3; j++) pin[j] = tensor_part(&R, in[j].data, z + (size_t)j * tb, dt);
  R.zig = 1;
  rc = reorder(&R, pin, 3, 1);
  if (!rc) rc = core_fwd(n, &R, dt, z, z + tb, z + 2 * tb, z + 3 * tb, (float *)(z + 4 * tb));
  part pout[2] = {tensor_part(&R, z + 3 * tb, out[0].data, dt), lse_part(&R, z + 4 * tb, out[1].data)};
  if (!rc) rc = reorder(&R, pout, 2, 0);
  free(z);
  return rc;
}

static int run_ring_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ring R;
  int rc = setup(ctx, n, &in[1], &R);
  if (rc) return rc;
  const ts_dtype dt = in[1].dtype;
  if (R.zig != 2 || R.N == 1) {
    if (R.zig == 2) R.zig = 0;
    return core_bwd(n, &R, dt, in[0].data, in[1].data, in[2].data, in[3].data, in[4].data, in[5].data,
                    out[0].data, out[1].data, out[2].data);
  }
  const size_t tb = ts_tensor_nbytes(&in[1]), lb = ts_tensor_nbytes(&in[5]);
  char *z = malloc(8 * tb + lb + 1);
  if (!z) return oom(n);
  part pin[6];
  for (int j = 0; j < 5; j++) pin[j] = tensor_part(&R, in[j].data, z + (size_t)j * tb, dt);
  pin[5] = lse_part(&R, in[5].data, z + 8 * tb);
  R.zig = 1;
  rc = reorder(&R, pin, 6, 1);
  if (!rc)
    rc = core_bwd(n, &R, dt, z, z + tb, z + 2 * tb, z + 3 * tb, z + 4 * tb, (const float *)(z + 8 * tb), z + 5 * tb,
                  z + 6 * tb, z + 7 * tb);
  part pout[3];
  for (int j = 0; j < 3; j++) pout[j] = tensor_part(&R, z + (size_t)(5 + j) * tb, out[j].data, dt);
  if (!rc) rc = reorder(&R, pout, 3, 0);
  free(z);
  return rc;
}

void ts__register_run_ring_attention(ts__run_fn *tab) {
  tab[TS_OP_RING_ATTENTION] = run_ring;
  tab[TS_OP_RING_ATTENTION_BWD] = run_ring_bwd;
}
