/* The ring reduce-scatter (issue 32): OpenMPI's non-blocking reduce-scatter (coll/libnbc) is a
 * binomial reduce to rank 0 followed by a linear scatter from it, whatever the size and whether
 * in place or not: every round carries the whole message, and rank 0 sends every part out. A
 * ring of N ranks sends each rank's part once around instead: N - 1 steps, in step k rank r
 * passes the partial sum of block (r - k - 1) mod N to rank r + 1 and receives block
 * (r - k - 2) mod N from rank r - 1, adds its own contribution to it and passes that on; after
 * the last step it holds the whole sum of its own block. Each rank sends (N - 1) / N of the
 * message over one link, once, which is what a link-bound cluster wants.
 *
 * Built on the communicator's point-to-point calls (isend/irecv/test/wait: every wait under the
 * timeout): nothing of MPI's here. The steps advance as the request is tested; the partial sums
 * live in two scratch buffers of the largest block (one received into while the other is sent).
 * The sum's order is the ring's: rank r's block is ((r+1) + (r+2) + ... + (r-1)) + r, in f32;
 * bitwise the same on every run, not MPI's order. bf16 and f16 data travel in 16 bits: each hop
 * widens the partial it receives, adds the rank's data in f32 and rounds once for the next (N - 1
 * roundings, as NCCL's ring does; MPI's 16-bit reduce-scatter rounds once, comm.c).
 *
 * The ring all-gather the same way: in step k rank r passes block (r - k) on to r + 1 and receives
 * block (r - k - 1) from r - 1, each straight from and into its place in the result. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/comm.h"

struct ts_comm_ring_req {
  ts_comm *c;
  int gather;              /* the all-gather (else the reduce-scatter) */
  size_t esize;            /* element bytes */
  ts_dtype dtype;
  const void *send;
  void *recv;
  size_t *counts, *displs; /* n each */
  int n, rank, tag, step;  /* step: the one in flight (n - 1: done) */
  ts_reduce_op op;
  void *tmp[2];            /* the reduce-scatter's partial sums (its dtype) */
  ts_comm_req *sreq, *rreq;
  int err;
  char errmsg[512];
};

static int blk(const ts_comm_ring_req *r, int k) { return ((k % r->n) + r->n) % r->n; }

static int ring_fail(ts_comm_ring_req *r, int rc) {
  r->err = rc;
  snprintf(r->errmsg, sizeof r->errmsg, "ring %s (%d ranks), step %d of %d: %s", r->gather ? "all-gather" : "reduce-scatter",
           r->n, r->step + 1, r->n - 1, ts_last_error());
  return rc;
}

/* The all-gather's step k: block (rank - k) to the next rank, block (rank - k - 1) from the one
 * before, each straight from / into its place in recv. */
static int issue_gather(ts_comm_ring_req *r, int k) {
  int sb = blk(r, r->rank - k), rb = blk(r, r->rank - k - 1);
  char *base = (char *)r->recv;
  int rc = ts_comm_irecv(r->c, base + r->displs[rb] * r->esize, r->counts[rb], r->dtype, blk(r, r->rank - 1), r->tag,
                         &r->rreq);
  if (!rc)
    rc = ts_comm_isend(r->c, base + r->displs[sb] * r->esize, r->counts[sb], r->dtype, blk(r, r->rank + 1), r->tag, &r->sreq);
  return rc;
}

/* Issues step k: the partial of block (rank - k - 1) to the next rank (the rank's own data at
 * step 0, else the partial the last step made), block (rank - k - 2) from the one before. */
static int issue(ts_comm_ring_req *r, int k) {
  if (r->gather) return issue_gather(r, k);
  int sb = blk(r, r->rank - k - 1), rb = blk(r, r->rank - k - 2);
  const void *src = k == 0 ? (const char *)r->send + r->displs[sb] * r->esize : r->tmp[(k - 1) % 2];
  int rc = ts_comm_irecv(r->c, r->tmp[k % 2], r->counts[rb], r->dtype, blk(r, r->rank - 1), r->tag, &r->rreq);
  if (!rc) rc = ts_comm_isend(r->c, src, r->counts[sb], r->dtype, blk(r, r->rank + 1), r->tag, &r->sreq);
  return rc;
}

/* Step r->step has completed: its block gets the rank's own contribution (the last step's, the
 * rank's own block, lands in recv, a MEAN divided there). */
static void absorb(ts_comm_ring_req *r) {
  if (r->gather) return; /* received in place */
  int k = r->step, rb = blk(r, r->rank - k - 2), last = k == r->n - 2, mean = last && r->op == TS_REDUCE_MEAN;
  size_t m = r->counts[rb];
  float inv = 1.0f / (float)r->n;
  if (r->dtype == TS_F32) {
    const float *own = (const float *)r->send + r->displs[rb];
    float *acc = r->tmp[k % 2], *dst = last ? r->recv : acc;
    for (size_t i = 0; i < m; i++) dst[i] = mean ? (acc[i] + own[i]) * inv : acc[i] + own[i];
    return;
  }
  /* 16-bit: each partial widened, the rank's data added in f32, rounded once for the next hop */
  const uint16_t *own = (const uint16_t *)r->send + r->displs[rb];
  uint16_t *acc = r->tmp[k % 2], *dst = last ? r->recv : acc;
  float a[256], b[256];
  for (size_t i = 0; i < m; i += 256) {
    size_t c = m - i < 256 ? m - i : 256;
    ts_convert(acc + i, r->dtype, a, TS_F32, c);
    ts_convert(own + i, r->dtype, b, TS_F32, c);
    for (size_t j = 0; j < c; j++) a[j] = mean ? (a[j] + b[j]) * inv : a[j] + b[j];
    ts_convert(a, TS_F32, dst + i, r->dtype, c);
  }
}

/* Advances r without waiting. */
static int advance(ts_comm_ring_req *r) {
  while (!r->err && r->step < r->n - 1) {
    int ds = 0, dr = 0, rc = ts_comm_test(r->rreq, &dr);
    if (!rc) rc = ts_comm_test(r->sreq, &ds);
    if (rc) return ring_fail(r, rc);
    if (!dr || !ds) return TS_OK;
    ts_comm_req_free(r->rreq);
    ts_comm_req_free(r->sreq);
    r->rreq = r->sreq = NULL;
    absorb(r);
    if (++r->step < r->n - 1 && (rc = issue(r, r->step))) return ring_fail(r, rc);
  }
  return r->err;
}

void ts_comm_ring_req_free(ts_comm_ring_req *r) {
  if (!r) return;
  ts_comm_req_free(r->rreq); /* in flight: its communicator is marked failed (ts_comm_req_free) */
  ts_comm_req_free(r->sreq);
  free(r->tmp[0]);
  free(r->counts);
  free(r);
}

/* A request over c with its copies of counts and displs (NULL: packed); *big: the largest count. */
static ts_comm_ring_req *ring_new(ts_comm *c, const size_t *counts, const size_t *displs, int tag, size_t *big) {
  ts_comm_ring_req *r = calloc(1, sizeof *r);
  int n = ts_comm_size(c);
  if (r) r->counts = malloc(sizeof(size_t) * 2 * (size_t)n);
  if (!r || !r->counts) {
    free(r);
    return NULL;
  }
  r->c = c, r->n = n, r->rank = ts_comm_rank(c), r->tag = tag, r->displs = r->counts + n;
  size_t at = 0;
  *big = 0;
  for (int i = 0; i < n; i++) {
    r->counts[i] = counts[i], r->displs[i] = displs ? displs[i] : at;
    at += counts[i];
    if (counts[i] > *big) *big = counts[i];
  }
  return r;
}

/* Issues r's first step (n > 1); *out = r, or r freed on failure. */
static int ring_start(ts_comm_ring_req *r, ts_comm_ring_req **out) {
  int rc = r->n > 1 ? issue(r, 0) : TS_OK;
  if (rc) {
    ts_comm_ring_req_free(r);
    return rc;
  }
  *out = r;
  return TS_OK;
}

int ts_comm_ireduce_scatter_ring(ts_comm *c, const void *send, void *recv, const size_t *counts, ts_dtype dtype,
                                 ts_reduce_op op, int tag, ts_comm_ring_req **out) {
  if (!out) return ts_error_set(TS_EINVAL, "ts_comm_ireduce_scatter_ring: request pointer is NULL");
  *out = NULL;
  if (!c || !counts || (!send && !recv))
    return ts_error_set(TS_EINVAL, "ring reduce-scatter: NULL communicator, counts or buffers");
  if ((dtype != TS_F32 && dtype != TS_BF16 && dtype != TS_F16) || (op != TS_REDUCE_SUM && op != TS_REDUCE_MEAN))
    return ts_error_set(TS_EDTYPE, "ring reduce-scatter: %s %s (f32, bf16 or f16 sum or mean only)", ts_dtype_name(dtype),
                        ts_reduce_op_name(op));
  size_t big = 0;
  ts_comm_ring_req *r = ring_new(c, counts, NULL, tag, &big);
  if (!r) return ts_error_set(TS_ENOMEM, "ring reduce-scatter: out of memory");
  r->send = send, r->recv = recv, r->op = op, r->dtype = dtype, r->esize = ts_dtype_size(dtype);
  if (r->n > 1 && !(r->tmp[0] = malloc(r->esize * 2 * (big ? big : 1)))) {
    ts_comm_ring_req_free(r);
    return ts_error_set(TS_ENOMEM, "ring reduce-scatter: cannot allocate 2 x %zu elements", big);
  }
  r->tmp[1] = (char *)r->tmp[0] + r->esize * (big ? big : 1);
  if (r->n == 1 && r->recv != r->send) memmove(r->recv, r->send, r->esize * counts[0]); /* the result */
  return ring_start(r, out);
}

int ts_comm_iallgatherv_ring(ts_comm *c, const void *send, void *recv, const size_t *counts, const size_t *displs,
                             ts_dtype dtype, int tag, ts_comm_ring_req **out) {
  if (!out) return ts_error_set(TS_EINVAL, "ts_comm_iallgatherv_ring: request pointer is NULL");
  *out = NULL;
  if (!c || !counts || !recv) return ts_error_set(TS_EINVAL, "ring all-gather: NULL communicator, counts or buffer");
  size_t big = 0;
  ts_comm_ring_req *r = ring_new(c, counts, displs, tag, &big);
  if (!r) return ts_error_set(TS_ENOMEM, "ring all-gather: out of memory");
  r->gather = 1, r->esize = ts_dtype_size(dtype), r->dtype = dtype, r->recv = recv;
  char *mine = (char *)recv + r->displs[r->rank] * r->esize;
  if (send && (const char *)send != mine) memmove(mine, send, counts[r->rank] * r->esize);
  return ring_start(r, out);
}

int ts_comm_ring_test(ts_comm_ring_req *r, int *done) {
  if (!r || !done) return ts_error_set(TS_EINVAL, "ts_comm_ring_test: NULL argument");
  *done = 0;
  if (r->err) return ts_error_set(r->err, "%s", r->errmsg);
  int rc = r->n > 1 ? advance(r) : TS_OK;
  if (rc) return ts_error_set(rc, "%s", r->errmsg);
  *done = r->n == 1 || r->step == r->n - 1;
  return TS_OK;
}

int ts_comm_ring_wait(ts_comm_ring_req *r) {
  if (!r) return ts_error_set(TS_EINVAL, "ts_comm_ring_wait: request is NULL");
  for (;;) {
    int done = 0, rc = ts_comm_ring_test(r, &done);
    if (rc || done) return rc;
    /* the step's receive, then its send (each under the timeout) */
    if (r->rreq && (rc = ts_comm_wait(r->rreq))) {
      ring_fail(r, rc);
      return ts_error_set(rc, "%s", r->errmsg);
    }
    if (r->sreq && (rc = ts_comm_wait(r->sreq))) {
      ring_fail(r, rc);
      return ts_error_set(rc, "%s", r->errmsg);
    }
  }
}
