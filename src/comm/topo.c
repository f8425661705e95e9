/* Topology: which ranks of a communicator share a host (MPI_Comm_split_type SHARED), a node
 * communicator per host and a communicator of the hosts' leaders, and the hierarchical
 * all-reduce over them (an all-reduce inside each host, one between the leaders, a broadcast
 * inside each host), blocking or non-blocking. include/tessera/comm.h has the contract.
 *
 * The non-blocking one is a chain of three ordinary requests, the next step issued when the
 * previous one completes, which happens at different moments on different ranks. MPI needs the
 * collectives of one communicator issued in the same order on every rank, so each step has a
 * communicator of its own (the broadcasts go on node_b, a dup of node: on node they would
 * interleave with later requests' first steps differently per rank), and the topology's requests
 * advance in the order they were started: a step of a request is issued only once the request
 * before it in the queue has issued the same step. Each communicator then sees its steps in
 * start order everywhere. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "../base/text.h"

#define HOSTNAME_CAP 64

struct ts_comm_topo {
  ts_comm *c;       /* the communicator described (not owned) */
  ts_comm *node;    /* this rank's host */
  ts_comm *leaders; /* the first rank of every host; NULL on the other ranks */
  ts_comm *node_b;  /* a dup of node: the broadcasts of the non-blocking all-reduce */
  struct ts_comm_hier_req *q_head, *q_tail; /* its requests in flight, in start order */
  int nhosts, host, local_rank, local_size;
  int *host_of;     /* per rank of c: its host id (hosts numbered by their lowest rank) */
  int uniform;      /* every host the same number of ranks, each host's ranks consecutive */
  char (*names)[HOSTNAME_CAP]; /* per host: MPI_Get_processor_name of its leader */
};

/* The host names of the world's ranks, for the timeout's messages (comm.c); set by the first
 * topology made over a communicator of every world rank, when it finds more than one host. */
static char (*g_world_hosts)[HOSTNAME_CAP];
static int g_world_nhosts;

const char *ts__world_host_name(int world_rank) {
  if (!g_world_hosts || g_world_nhosts < 2 || world_rank < 0) return NULL;
  ts_comm *w = NULL;
  if (ts_comm_world(&w) || world_rank >= ts_comm_size(w)) return NULL;
  return g_world_hosts[world_rank];
}

void ts__world_hosts_free(void) {
  free(g_world_hosts);
  g_world_hosts = NULL;
  g_world_nhosts = 0;
}

void ts_comm_topo_free(ts_comm_topo *t) {
  if (!t) return;
  while (t->q_head) ts_comm_hier_req_free(t->q_head); /* requests not freed by their owner */
  ts_comm_free(t->node_b);
  ts_comm_free(t->node);
  ts_comm_free(t->leaders);
  free(t->host_of);
  free(t->names);
  free(t);
}

int ts_comm_topo_create(ts_comm *c, ts_comm_topo **out) {
  *out = NULL;
  ts_coll_sig s = {0};
  s.kind = TS_COLL_SPLIT;
  s.op = s.dtype = s.root = -1;
  s.count = -1;
  int rc = ts__comm_usable(c, &s);
  if (rc) return rc;
  ts_comm_topo *t = calloc(1, sizeof *t);
  int n = c->size;
  char (*rank_names)[HOSTNAME_CAP] = calloc((size_t)n, HOSTNAME_CAP);
  int *leader_of = malloc(sizeof(int) * (size_t)n);
  if (!t || !rank_names || !leader_of || !(t->host_of = malloc(sizeof(int) * (size_t)n)) ||
      !(t->names = calloc((size_t)n, HOSTNAME_CAP))) {
    free(rank_names);
    free(leader_of);
    ts_comm_topo_free(t);
    return ts_error_set(TS_ENOMEM, "topology: out of memory");
  }
  t->c = c;
  /* the ranks MPI puts on one shared-memory node; the lowest rank of c among them leads */
  MPI_Comm shm = MPI_COMM_NULL;
  int mrc = MPI_Comm_split_type(c->mc, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &shm);
  int lead = c->rank;
  if (mrc == MPI_SUCCESS) mrc = MPI_Allreduce(&c->rank, &lead, 1, MPI_INT, MPI_MIN, shm);
  if (shm != MPI_COMM_NULL) MPI_Comm_free(&shm);
  char me[MPI_MAX_PROCESSOR_NAME + 1] = "";
  int len = 0;
  if (mrc == MPI_SUCCESS) mrc = MPI_Get_processor_name(me, &len);
  char mine[HOSTNAME_CAP];
  const size_t nlen = strnlen(me, sizeof mine - 1); /* a longer host name is cut to the cap */
  memcpy(mine, me, nlen);
  mine[nlen] = 0;
  if (mrc == MPI_SUCCESS) mrc = MPI_Allgather(&lead, 1, MPI_INT, leader_of, 1, MPI_INT, c->mc);
  if (mrc == MPI_SUCCESS) mrc = MPI_Allgather(mine, HOSTNAME_CAP, MPI_CHAR, rank_names, HOSTNAME_CAP, MPI_CHAR, c->mc);
  if (mrc != MPI_SUCCESS) {
    free(rank_names);
    free(leader_of);
    ts_comm_topo_free(t);
    return ts__mpi_fail(c, &s, mrc, "MPI_Comm_split_type(SHARED)");
  }
  /* hosts numbered in the order of their leaders */
  for (int r = 0; r < n; r++) {
    if (leader_of[r] == r) {
      snprintf(t->names[t->nhosts], HOSTNAME_CAP, "%s", rank_names[r]);
      t->host_of[r] = t->nhosts++;
    } else {
      t->host_of[r] = t->host_of[leader_of[r]];
    }
  }
  t->host = t->host_of[c->rank];
  t->local_size = 0;
  for (int r = 0; r < n; r++) {
    if (t->host_of[r] != t->host) continue;
    if (r == c->rank) t->local_rank = t->local_size;
    t->local_size++;
  }
  /* uniform: host h holds ranks h*L .. h*L+L-1 */
  t->uniform = n % t->nhosts == 0;
  for (int r = 0; r < n && t->uniform; r++) t->uniform = t->host_of[r] == r / (n / t->nhosts);
  if (c->world_like && t->nhosts > 1 && !g_world_hosts) {
    g_world_hosts = rank_names;
    g_world_nhosts = t->nhosts;
    rank_names = NULL;
  }
  free(rank_names);
  free(leader_of);
  rc = ts_comm_split(c, t->host, c->rank, &t->node);
  if (!rc) rc = ts_comm_split(c, t->local_rank == 0 ? 0 : -1, c->rank, &t->leaders);
  if (!rc) rc = ts_comm_dup(t->node, &t->node_b);
  if (rc) {
    ts_comm_topo_free(t);
    return ts_error_wrap(rc, "topology: the node and leader communicators");
  }
  *out = t;
  return TS_OK;
}

int ts_comm_topo_num_hosts(const ts_comm_topo *t) { return t ? t->nhosts : 0; }
int ts_comm_topo_host(const ts_comm_topo *t, int rank) {
  return t && rank >= 0 && rank < t->c->size ? t->host_of[rank] : -1;
}
const char *ts_comm_topo_host_name(const ts_comm_topo *t, int host) {
  return t && host >= 0 && host < t->nhosts ? t->names[host] : "?";
}
int ts_comm_topo_local_size(const ts_comm_topo *t) { return t ? t->local_size : 0; }
int ts_comm_topo_uniform(const ts_comm_topo *t) { return t ? t->uniform : 0; }
ts_comm *ts_comm_topo_node(const ts_comm_topo *t) { return t ? t->node : NULL; }
ts_comm *ts_comm_topo_leaders(const ts_comm_topo *t) { return t ? t->leaders : NULL; }

char *ts_comm_topo_describe(const ts_comm_topo *t, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  if (!t) return buf;
  ts__app(buf, cap, &len, "%d host%s:", t->nhosts, t->nhosts == 1 ? "" : "s");
  for (int h = 0; h < t->nhosts; h++) {
    if (h == 8) {
      ts__app(buf, cap, &len, " ...");
      break;
    }
    ts__app(buf, cap, &len, "%s %s (rank%s", h ? "," : "", t->names[h], "s");
    int first = 1, run_lo = -1, prev = -2;
    for (int r = 0; r <= t->c->size; r++) {
      int in = r < t->c->size && t->host_of[r] == h;
      if (in && r == prev + 1) { prev = r; continue; }
      if (run_lo >= 0) {
        if (prev > run_lo) ts__app(buf, cap, &len, "%s %d-%d", first ? "" : ",", run_lo, prev);
        else ts__app(buf, cap, &len, "%s %d", first ? "" : ",", run_lo);
        first = 0;
        run_lo = -1;
      }
      if (in) run_lo = prev = r;
    }
    ts__app(buf, cap, &len, ")");
  }
  return buf;
}

int ts_comm_allreduce_hier(ts_comm_topo *t, void *buf, size_t count, ts_dtype dtype, ts_reduce_op op) {
  if (!t) return ts_error_set(TS_EINVAL, "hierarchical all-reduce: no topology");
  if (dtype != TS_F32 || (op != TS_REDUCE_SUM && op != TS_REDUCE_MEAN))
    return ts_error_set(TS_EDTYPE, "hierarchical all-reduce: %s %s (f32 sum or mean only)", ts_dtype_name(dtype),
                        ts_reduce_op_name(op));
  int rc = ts_comm_allreduce(t->node, buf, buf, count, TS_F32, TS_REDUCE_SUM);
  if (!rc && t->leaders) rc = ts_comm_allreduce(t->leaders, buf, buf, count, TS_F32, TS_REDUCE_SUM);
  if (!rc) rc = ts_comm_broadcast(t->node, buf, count, TS_F32, 0);
  if (!rc && op == TS_REDUCE_MEAN) { /* one division after the sum, as the flat MEAN */
    float *f = buf, n = (float)t->c->size;
    for (size_t i = 0; i < count; i++) f[i] /= n;
  }
  return rc;
}

/* ---- the non-blocking hierarchical all-reduce ---- */
enum { H_NODE, H_LEADERS, H_BCAST, H_DONE }; /* the step issued last (H_DONE: complete) */

struct ts_comm_hier_req {
  ts_comm_topo *t;
  float *buf;
  size_t count;
  ts_reduce_op op;
  int step;          /* H_*: the step issued last */
  ts_comm_req *cur;  /* its request; NULL once it completed (or was skipped: not a leader) */
  int err;           /* sticky */
  char errmsg[512];
  struct ts_comm_hier_req *next; /* t's queue (in flight only) */
  int queued;
};

static void hq_remove(ts_comm_hier_req *r) {
  if (!r->queued) return;
  ts_comm_topo *t = r->t;
  ts_comm_hier_req **pp = &t->q_head, *prev = NULL;
  while (*pp && *pp != r) {
    prev = *pp;
    pp = &(*pp)->next;
  }
  if (*pp) *pp = r->next;
  if (t->q_tail == r) t->q_tail = prev;
  r->next = NULL;
  r->queued = 0;
}

static int hq_fail(ts_comm_hier_req *r, int rc) {
  r->err = rc;
  snprintf(r->errmsg, sizeof r->errmsg, "hierarchical all-reduce (f32 x %zu), %s: %s", r->count,
           r->step == H_NODE ? "inside the host" : r->step == H_LEADERS ? "between the hosts" : "broadcast inside the host",
           ts_last_error());
  return rc;
}

/* Advances r as far as it can without waiting: tests its step, issues the next one when the step
 * completed and `prev_step` (the step the request before it in the queue has issued; H_DONE when
 * it is the oldest) allows. */
static int hq_advance(ts_comm_hier_req *r, int prev_step) {
  while (!r->err && r->step < H_DONE) {
    if (r->cur) {
      int done = 0, rc = ts_comm_test(r->cur, &done);
      if (rc) return hq_fail(r, rc);
      if (!done) return TS_OK;
      ts_comm_req_free(r->cur);
      r->cur = NULL;
    }
    int next = r->step + 1, rc = TS_OK;
    if (prev_step < next) return TS_OK; /* the request before it has not issued that step yet */
    r->step = next;
    if (next == H_LEADERS && r->t->leaders)
      rc = ts_comm_iallreduce(r->t->leaders, r->buf, r->buf, r->count, TS_F32, TS_REDUCE_SUM, &r->cur);
    else if (next == H_BCAST)
      rc = ts_comm_ibroadcast(r->t->node_b, r->buf, r->count, TS_F32, 0, &r->cur);
    else if (next == H_DONE && r->op == TS_REDUCE_MEAN) { /* one division after the sum, as the flat MEAN */
      float n = (float)r->t->c->size;
      for (size_t i = 0; i < r->count; i++) r->buf[i] /= n;
    }
    if (rc) return hq_fail(r, rc);
  }
  if (r->step == H_DONE) hq_remove(r);
  return r->err;
}

/* One pass over t's requests in start order; the first failure. */
static int hq_progress(ts_comm_topo *t) {
  int prev = H_DONE, first = TS_OK;
  char msg[512] = "";
  for (ts_comm_hier_req *q = t->q_head, *nx; q; q = nx) {
    nx = q->next; /* q leaves the queue when it completes */
    int rc = q->err ? q->err : hq_advance(q, prev);
    if (rc && !first) {
      first = rc;
      snprintf(msg, sizeof msg, "%s", q->errmsg);
    }
    prev = q->step;
  }
  return first ? ts_error_set(first, "%s", msg) : TS_OK;
}

int ts_comm_iallreduce_hier(ts_comm_topo *t, void *buf, size_t count, ts_dtype dtype, ts_reduce_op op,
                            ts_comm_hier_req **out) {
  if (!out) return ts_error_set(TS_EINVAL, "ts_comm_iallreduce_hier: request pointer is NULL");
  *out = NULL;
  if (!t) return ts_error_set(TS_EINVAL, "hierarchical all-reduce: no topology");
  if (dtype != TS_F32 || (op != TS_REDUCE_SUM && op != TS_REDUCE_MEAN))
    return ts_error_set(TS_EDTYPE, "hierarchical all-reduce: %s %s (f32 sum or mean only)", ts_dtype_name(dtype),
                        ts_reduce_op_name(op));
  ts_comm_hier_req *r = calloc(1, sizeof *r);
  if (!r) return ts_error_set(TS_ENOMEM, "hierarchical all-reduce: out of memory");
  r->t = t;
  r->buf = buf;
  r->count = count;
  r->op = op;
  r->step = H_NODE; /* the first steps go in start order: issued now */
  int rc = ts_comm_iallreduce(t->node, buf, buf, count, TS_F32, TS_REDUCE_SUM, &r->cur);
  if (rc) {
    free(r);
    return rc;
  }
  r->queued = 1;
  if (t->q_tail) t->q_tail->next = r;
  else t->q_head = r;
  t->q_tail = r;
  *out = r;
  return TS_OK;
}

int ts_comm_hier_test(ts_comm_hier_req *r, int *done) {
  if (!r || !done) return ts_error_set(TS_EINVAL, "ts_comm_hier_test: NULL argument");
  *done = 0;
  if (r->err) return ts_error_set(r->err, "%s", r->errmsg);
  int rc = hq_progress(r->t);
  if (r->err) return ts_error_set(r->err, "%s", r->errmsg);
  if (rc) return rc;
  *done = r->step == H_DONE;
  return TS_OK;
}

int ts_comm_hier_wait(ts_comm_hier_req *r) {
  if (!r) return ts_error_set(TS_EINVAL, "ts_comm_hier_wait: request is NULL");
  for (;;) {
    int done = 0, rc = ts_comm_hier_test(r, &done);
    if (rc || done) return rc;
    /* the oldest request can always advance: wait for its step (under the timeout) */
    ts_comm_hier_req *h = r->t->q_head;
    if (h && h->cur && (rc = ts_comm_wait(h->cur))) {
      hq_fail(h, rc);
      return ts_error_set(rc, "%s", h->errmsg);
    }
  }
}

void ts_comm_hier_req_free(ts_comm_hier_req *r) {
  if (!r) return;
  hq_remove(r);
  ts_comm_req_free(r->cur); /* in flight: its communicator is marked failed (ts_comm_req_free) */
  free(r);
}
