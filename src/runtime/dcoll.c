/* Collectives on device buffers: NCCL, MPI staged through pinned host memory, or MPI directly on
 * a CPU device (dcoll.h says when each). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/nccl.h"
#include "runtime/dcoll.h"

#define STAGE_DEFAULT ((size_t)4 << 20)
#define TAG 32001 /* the staged send/receive's MPI tag (below 32767, the least MPI_TAG_UB allowed) */

struct ts__dcoll {
  ts_comm *c;
  ts__dev *d;
  int rank, size;
  ts__dcoll_backend b;
  ts__nccl *nccl;
  /* the staged path: two pinned buffers, a copy stream, an event per buffer and the caller's */
  size_t stage;
  char *host[2];
  ts__dev_stream *copy;
  ts__dev_event *ev[2], *ready;
  int broken; /* NCCL aborted after a failure (ts__dcoll_wait): every call fails */
  char what[512];
};

int ts__dcoll_backend_parse(const char *s) {
  return !s ? -1 : !strcmp(s, "auto") ? TS__DCOLL_AUTO : !strcmp(s, "nccl") ? TS__DCOLL_NCCL
       : !strcmp(s, "mpi") ? TS__DCOLL_MPI : -1;
}

const char *ts__dcoll_backend_name(ts__dcoll_backend b) {
  return b == TS__DCOLL_NCCL ? "nccl" : b == TS__DCOLL_MPI ? "mpi" : "auto";
}

ts__dcoll_backend ts__dcoll_backend_of(const ts__dcoll *x) { return x->b; }
int ts__dcoll_rank(const ts__dcoll *x) { return x->rank; }
int ts__dcoll_size(const ts__dcoll *x) { return x->size; }
const char *ts__dcoll_describe(const ts__dcoll *x) { return x->what; }

static int gpu(const ts__dcoll *x) { return x->d->info.kind == TS_DEVICE_GPU; }

void ts__dcoll_free(ts__dcoll *x) {
  if (!x) return;
  ts__nccl_comm_free(x->nccl);
  if (x->copy) ts__dev_stream_sync(x->d, x->copy);
  for (int k = 0; k < 2; k++) {
    if (x->host[k]) ts__dev_host_free(x->d, x->host[k]);
    ts__dev_event_destroy(x->d, x->ev[k]);
  }
  ts__dev_event_destroy(x->d, x->ready);
  if (x->copy) ts__dev_stream_destroy(x->d, x->copy);
  free(x);
}

int ts__dcoll_set_stage_bytes(ts__dcoll *x, size_t bytes) {
  if (bytes < 256) return ts_error_set(TS_EINVAL, "device collectives: a staging chunk of %zu bytes", bytes);
  if (!x->copy || bytes <= x->stage) { /* no buffers yet (NCCL, CPU), or smaller: use part of them */
    x->stage = bytes;
    return TS_OK;
  }
  for (int k = 0; k < 2; k++) {
    ts__dev_host_free(x->d, x->host[k]);
    x->host[k] = NULL;
  }
  x->stage = bytes;
  for (int k = 0; k < 2; k++) {
    int rc = ts__dev_host_alloc(x->d, bytes, (void **)&x->host[k]);
    if (rc) return rc;
  }
  return TS_OK;
}

static int staged_init(ts__dcoll *x) {
  x->stage = STAGE_DEFAULT;
  if (!gpu(x)) return TS_OK;
  int rc = ts__dev_stream_create(x->d, &x->copy);
  for (int k = 0; k < 2 && !rc; k++) rc = ts__dev_host_alloc(x->d, x->stage, (void **)&x->host[k]);
  for (int k = 0; k < 2 && !rc; k++) rc = ts__dev_event_create(x->d, &x->ev[k]);
  if (!rc) rc = ts__dev_event_create(x->d, &x->ready);
  return rc;
}

/* "ranks 0 and 1 share GPU 0" when two ranks' devices have one UUID, into buf; 0 when none do
 * (info: each rank's (is a GPU, its ordinal, has NCCL)) */
static int shared_gpu(const unsigned char *uuids, const int *info, int n, char *buf, size_t cap) {
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if (!memcmp(uuids + 16 * i, uuids + 16 * j, 16)) {
        snprintf(buf, cap, "ranks %d and %d share GPU %d", i, j, info[3 * i + 1]);
        return 1;
      }
  return 0;
}

/* NCCL over c: rank 0's unique id broadcast, every rank's communicator, the outcome agreed */
static int nccl_start(ts__dcoll *x, char *why, size_t cap) {
  unsigned char id[TS__NCCL_ID_BYTES] = {0};
  int rc = x->rank == 0 ? ts__nccl_unique_id(id) : TS_OK;
  int ok = !rc;
  int rc2 = ts_comm_allreduce(x->c, &ok, &ok, 1, TS_I32, TS_REDUCE_MIN);
  if (rc2) return rc2;
  if (!ok) {
    snprintf(why, cap, "ncclGetUniqueId failed on rank 0");
    return rc ? rc : ts_error_set(TS_EBACKEND, "%s", why);
  }
  if ((rc = ts_comm_broadcast(x->c, id, sizeof id, TS_U8, 0))) return rc;
  rc = ts__nccl_comm_init(x->d, x->size, id, x->rank, &x->nccl);
  if (rc) snprintf(why, cap, "%s", ts_last_error());
  int mine = !rc, all = mine;
  if ((rc2 = ts_comm_allreduce(x->c, &all, &all, 1, TS_I32, TS_REDUCE_MIN))) return rc2;
  if (all) return TS_OK;
  ts__nccl_comm_abort(x->nccl); /* a peer failed: ours would wait for it in every call */
  x->nccl = NULL;
  if (mine) snprintf(why, cap, "NCCL did not start on another rank");
  return rc ? rc : ts_error_set(TS_EBACKEND, "%s", why);
}

int ts__dcoll_create(ts_comm *c, ts__dev *d, ts__dcoll_backend want, ts__dcoll **out) {
  *out = NULL;
  if (!c || !d) return ts_error_set(TS_EINVAL, "device collectives: no communicator or device");
  ts__dcoll *x = calloc(1, sizeof *x);
  if (!x) return ts_error_set(TS_ENOMEM, "device collectives: out of memory");
  x->c = c, x->d = d, x->rank = ts_comm_rank(c), x->size = ts_comm_size(c), x->b = TS__DCOLL_MPI;
  int n = x->size, rc = TS_OK;
  /* what every rank has: a GPU (its UUID and ordinal), NCCL */
  int *info = calloc((size_t)n * 3, sizeof *info);
  unsigned char *uuids = calloc((size_t)n, 16);
  int mine[3] = {gpu(x), d->info.id, gpu(x) && ts__nccl_available()};
  if (!info || !uuids) rc = ts_error_set(TS_ENOMEM, "device collectives: out of memory");
  if (!rc) rc = ts_comm_allgather(c, mine, info, 3, TS_I32);
  if (!rc) rc = ts_comm_allgather(c, d->uuid, uuids, 16, TS_U8);
  int all_gpu = 1, all_nccl = 1, no_nccl = -1;
  for (int r = 0; !rc && r < n; r++) {
    all_gpu &= info[3 * r];
    if (!info[3 * r + 2] && no_nccl < 0) no_nccl = r;
    all_nccl &= info[3 * r + 2];
  }
  char share[120] = "", why[300] = "";
  int shared = !rc && all_gpu && shared_gpu(uuids, info, n, share, sizeof share);
  if (!rc && !all_gpu && want == TS__DCOLL_NCCL)
    rc = ts_error_set(TS_ECONFIG, "parallel.comm_backend nccl: rank %d runs on the CPU (NCCL needs a GPU per rank)",
                      no_nccl);
  else if (!rc && shared && want == TS__DCOLL_NCCL)
    rc = ts_error_set(TS_ECONFIG, "parallel.comm_backend nccl: %s (NCCL needs one GPU per rank; comm_backend mpi or "
                      "auto stages through host memory)", share);
  else if (!rc && !all_nccl && all_gpu && want == TS__DCOLL_NCCL)
    rc = ts_error_set(TS_ECONFIG, "parallel.comm_backend nccl: rank %d: %s", no_nccl,
                      !info[3 * x->rank + 2] ? ts__nccl_why() : "NCCL is not available there");
  if (!rc && all_gpu && !shared && all_nccl && want != TS__DCOLL_MPI) {
    rc = nccl_start(x, why, sizeof why);
    if (!rc) {
      x->b = TS__DCOLL_NCCL;
      snprintf(x->what, sizeof x->what, "NCCL %s, %d rank%s, one GPU each", ts__nccl_version(), n, n > 1 ? "s" : "");
    } else if (want == TS__DCOLL_NCCL) {
      rc = ts_error_wrap(TS_ECONFIG, "parallel.comm_backend nccl");
    } else {
      rc = TS_OK; /* auto: staged MPI, saying why */
    }
  }
  if (!rc && x->b == TS__DCOLL_MPI) {
    rc = staged_init(x);
    if (!all_gpu) snprintf(x->what, sizeof x->what, "MPI (CPU buffers)");
    else {
      char other[64];
      snprintf(other, sizeof other, "NCCL is not available on rank %d", no_nccl);
      const char *reason = want == TS__DCOLL_MPI ? "parallel.comm_backend mpi" : shared ? share : why[0] ? why
                         : !info[3 * x->rank + 2] ? ts__nccl_why() : other;
      snprintf(x->what, sizeof x->what, "MPI staged through pinned host memory (%.440s)", reason);
    }
  }
  free(info), free(uuids);
  if (rc) {
    ts__dcoll_free(x);
    return rc;
  }
  *out = x;
  return TS_OK;
}

int ts__dcoll_check(ts__dcoll *x) { return x->nccl ? ts__nccl_check(x->nccl) : TS_OK; }

int ts__dcoll_wait(ts__dcoll *x, ts__dev_stream *s, double timeout, const char *what) {
  if (x->broken) return ts_error_set(TS_ECOMM, "device %s: the communicator failed earlier (NCCL aborted)", what);
  if (!x->nccl) return gpu(x) ? ts__dev_stream_sync(x->d, s) : TS_OK;
  int rc = x->ready ? TS_OK : ts__dev_event_create(x->d, &x->ready); /* (the staged path made its own) */
  if (!rc) rc = ts__dev_event_record(x->d, x->ready, s);
  double t0 = ts_time_now();
  for (int spin = 0; !rc; spin++) {
    int done = 0;
    if ((rc = ts__dev_event_query(x->d, x->ready, &done)) || done) break;
    if ((rc = ts__nccl_check(x->nccl))) break; /* a peer died: NCCL says so */
    if (timeout > 0 && ts_time_now() - t0 > timeout) {
      rc = ts_error_set(TS_ECOMM, "device %s over %d ranks (NCCL): not finished after %g s (a rank stalled or died; "
                        "parallel.comm_timeout)", what, x->size, timeout);
      break;
    }
    if (spin < 100) sched_yield();
    else nanosleep(&(struct timespec){0, 200000}, NULL);
  }
  if (rc) {
    char msg[600];
    snprintf(msg, sizeof msg, "%s", ts_last_error());
    ts__nccl_comm_abort(x->nccl); /* its queued work returns; every later call fails */
    x->nccl = NULL;
    x->broken = 1;
    return ts_error_set(TS_ECOMM, "%s", msg);
  }
  return TS_OK;
}

/* ---- the staged path ----
 * A collective is cut into chunks along each rank's block (elements a..b of it); a chunk's
 * copies in (device -> host buffer k), its MPI call on the host buffer, its copies out (host
 * buffer k -> device). The copies run on the copy stream, after the caller's stream s: chunk
 * i+1's copy in is queued before chunk i's MPI call, so the two overlap; the buffers alternate. */
typedef struct {
  ts__dcoll *x;
  const char *send;
  char *recv;
  size_t count, es; /* elements of a block, bytes of one */
  ts_dtype dt;
  ts_reduce_op op;
  int root, peer;
  size_t rcount; /* sendrecv: elements received */
} job;

typedef int (*stage_fn)(job *j, size_t a, size_t b, char *host);

static int copy_in(ts__dcoll *x, char *host, const char *dev, size_t n) {
  return n ? ts__dev_copy(x->d, host, dev, n, TS__D2H, x->copy) : TS_OK;
}
static int copy_out(ts__dcoll *x, char *dev, const char *host, size_t n) {
  return n ? ts__dev_copy(x->d, dev, host, n, TS__H2D, x->copy) : TS_OK;
}

/* chunk: elements of a block per chunk; total: elements of a block */
static int staged(job *j, ts__dev_stream *s, size_t total, size_t chunk, stage_fn in, stage_fn mpi, stage_fn out) {
  ts__dcoll *x = j->x;
  size_t nch = chunk ? (total + chunk - 1) / chunk : 0;
  int rc = ts__dev_event_record(x->d, x->ready, s);
  if (!rc) rc = ts__dev_stream_wait(x->d, x->copy, x->ready);
  if (!rc && nch && in) rc = in(j, 0, chunk < total ? chunk : total, x->host[0]);
  if (!rc && nch) rc = ts__dev_event_record(x->d, x->ev[0], x->copy);
  for (size_t i = 0; i < nch && !rc; i++) {
    size_t a = i * chunk, b = a + chunk < total ? a + chunk : total;
    if (i + 1 < nch) {
      size_t a1 = b, b1 = a1 + chunk < total ? a1 + chunk : total;
      if (in) rc = in(j, a1, b1, x->host[(i + 1) % 2]);
      if (!rc) rc = ts__dev_event_record(x->d, x->ev[(i + 1) % 2], x->copy);
    }
    if (!rc) rc = ts__dev_event_sync(x->d, x->ev[i % 2]);
    if (!rc) rc = mpi(j, a, b, x->host[i % 2]);
    if (!rc && out) rc = out(j, a, b, x->host[i % 2]);
  }
  int rc2 = ts__dev_stream_sync(x->d, x->copy);
  return rc ? rc : rc2;
}

/* all-reduce and broadcast: one block, the chunk in place in the host buffer */
static int ar_in(job *j, size_t a, size_t b, char *h) {
  return j->root >= 0 && j->x->rank != j->root ? TS_OK : copy_in(j->x, h, j->send + a * j->es, (b - a) * j->es);
}
static int ar_mpi(job *j, size_t a, size_t b, char *h) {
  return ts_comm_allreduce(j->x->c, h, h, b - a, j->dt, j->op);
}
static int bc_mpi(job *j, size_t a, size_t b, char *h) { return ts_comm_broadcast(j->x->c, h, b - a, j->dt, j->root); }
static int ar_out(job *j, size_t a, size_t b, char *h) { return copy_out(j->x, j->recv + a * j->es, h, (b - a) * j->es); }

/* all-gather: the rank's piece in, size pieces out (laid out [rank][chunk] in the host buffer) */
static int ag_in(job *j, size_t a, size_t b, char *h) {
  size_t m = b - a;
  return copy_in(j->x, h + (size_t)j->x->rank * m * j->es, j->send + a * j->es, m * j->es);
}
static int ag_mpi(job *j, size_t a, size_t b, char *h) {
  size_t m = b - a;
  return ts_comm_allgather(j->x->c, h + (size_t)j->x->rank * m * j->es, h, m, j->dt);
}
static int blocks_out(job *j, size_t a, size_t b, char *h) {
  size_t m = b - a;
  int rc = TS_OK;
  for (int r = 0; r < j->x->size && !rc; r++)
    rc = copy_out(j->x, j->recv + ((size_t)r * j->count + a) * j->es, h + (size_t)r * m * j->es, m * j->es);
  return rc;
}
/* reduce-scatter and all-to-all: size pieces in ([rank][chunk]), one out (after them) */
static int blocks_in(job *j, size_t a, size_t b, char *h) {
  size_t m = b - a;
  int rc = TS_OK;
  for (int r = 0; r < j->x->size && !rc; r++)
    rc = copy_in(j->x, h + (size_t)r * m * j->es, j->send + ((size_t)r * j->count + a) * j->es, m * j->es);
  return rc;
}
static int rs_mpi(job *j, size_t a, size_t b, char *h) {
  size_t m = b - a;
  return ts_comm_reduce_scatter_block(j->x->c, h, h + (size_t)j->x->size * m * j->es, m, j->dt, j->op);
}
static int rs_out(job *j, size_t a, size_t b, char *h) {
  size_t m = b - a;
  return copy_out(j->x, j->recv + a * j->es, h + (size_t)j->x->size * m * j->es, m * j->es);
}
static int a2a_mpi(job *j, size_t a, size_t b, char *h) {
  size_t m = b - a;
  return ts_comm_alltoall(j->x->c, h, h + (size_t)j->x->size * m * j->es, m, j->dt);
}
static int a2a_out(job *j, size_t a, size_t b, char *h) {
  size_t m = b - a;
  int rc = TS_OK;
  for (int r = 0; r < j->x->size && !rc; r++)
    rc = copy_out(j->x, j->recv + ((size_t)r * j->count + a) * j->es, h + (size_t)(j->x->size + r) * m * j->es,
                  m * j->es);
  return rc;
}
/* send and receive: chunk i of each way (either may be shorter), the message to send first in
 * the buffer, the one received after it */
static int sr_in(job *j, size_t a, size_t b, char *h) {
  size_t e = b < j->count ? b : j->count;
  return a < e ? copy_in(j->x, h, j->send + a * j->es, (e - a) * j->es) : TS_OK;
}
static int sr_mpi(job *j, size_t a, size_t b, char *h) {
  size_t se = b < j->count ? b : j->count, re = b < j->rcount ? b : j->rcount;
  size_t ns = se > a ? se - a : 0, nr = re > a ? re - a : 0;
  ts_comm_req *req = NULL;
  int rc = ns ? ts_comm_isend(j->x->c, h, ns, j->dt, j->peer, TAG, &req) : TS_OK;
  if (!rc && nr) rc = ts_comm_recv(j->x->c, h + (b - a) * j->es, nr, j->dt, j->peer, TAG);
  if (req) {
    int rw = ts_comm_wait(req);
    ts_comm_req_free(req);
    if (!rc) rc = rw;
  }
  return rc;
}
static int sr_out(job *j, size_t a, size_t b, char *h) {
  size_t e = b < j->rcount ? b : j->rcount;
  return a < e ? copy_out(j->x, j->recv + a * j->es, h + (b - a) * j->es, (e - a) * j->es) : TS_OK;
}

/* elements of a block per chunk when `parts` chunks of it share one buffer */
static size_t chunk_of(const ts__dcoll *x, size_t es, size_t parts) {
  size_t m = x->stage / (es * parts);
  return m ? m : 1;
}

static int check_dt(const ts__dcoll *x, const char *what, ts_dtype dt) {
  if (x->broken) return ts_error_set(TS_ECOMM, "device %s: the communicator failed earlier (NCCL aborted)", what);
  switch (dt) {
  case TS_F32: case TS_BF16: case TS_F16: case TS_I32: case TS_I64: case TS_U8: return TS_OK;
  default: return ts_error_set(TS_EDTYPE, "device %s: dtype %s", what, ts_dtype_name(dt));
  }
}

#define WRAP(rc, what) ((rc) ? ts_error_wrap((rc), "device %s (%s)", (what), x->b == TS__DCOLL_NCCL ? "NCCL" : "MPI") : TS_OK)

int ts__dcoll_allreduce(ts__dcoll *x, const void *send, void *recv, size_t count, ts_dtype dt, ts_reduce_op op,
                        ts__dev_stream *s) {
  int rc = check_dt(x, "all-reduce", dt);
  if (rc) return rc;
  if (x->nccl) rc = ts__nccl_allreduce(x->nccl, send, recv, count, dt, op, s);
  else if (!gpu(x)) rc = ts_comm_allreduce(x->c, send, recv, count, dt, op);
  else {
    job j = {x, send, recv, count, ts_dtype_size(dt), dt, op, -1, -1, 0};
    rc = staged(&j, s, count, chunk_of(x, j.es, 1), ar_in, ar_mpi, ar_out);
  }
  return WRAP(rc, "all-reduce");
}

int ts__dcoll_broadcast(ts__dcoll *x, void *buf, size_t count, ts_dtype dt, int root, ts__dev_stream *s) {
  int rc = check_dt(x, "broadcast", dt);
  if (rc) return rc;
  if (root < 0 || root >= x->size) return ts_error_set(TS_EINVAL, "device broadcast: root %d of %d", root, x->size);
  if (x->nccl) rc = ts__nccl_broadcast(x->nccl, buf, count, dt, root, s);
  else if (!gpu(x)) rc = ts_comm_broadcast(x->c, buf, count, dt, root);
  else {
    job j = {x, buf, buf, count, ts_dtype_size(dt), dt, TS_REDUCE_SUM, root, -1, 0};
    rc = staged(&j, s, count, chunk_of(x, j.es, 1), ar_in, bc_mpi, x->rank == root ? NULL : ar_out);
  }
  return WRAP(rc, "broadcast");
}

int ts__dcoll_allgather(ts__dcoll *x, const void *send, void *recv, size_t count, ts_dtype dt, ts__dev_stream *s) {
  int rc = check_dt(x, "all-gather", dt);
  if (rc) return rc;
  if (x->nccl) rc = ts__nccl_allgather(x->nccl, send, recv, count, dt, s);
  else if (!gpu(x)) rc = ts_comm_allgather(x->c, send, recv, count, dt);
  else {
    job j = {x, send, recv, count, ts_dtype_size(dt), dt, TS_REDUCE_SUM, -1, -1, 0};
    rc = staged(&j, s, count, chunk_of(x, j.es, (size_t)x->size), ag_in, ag_mpi, blocks_out);
  }
  return WRAP(rc, "all-gather");
}

int ts__dcoll_reduce_scatter(ts__dcoll *x, const void *send, void *recv, size_t count, ts_dtype dt, ts_reduce_op op,
                             ts__dev_stream *s) {
  int rc = check_dt(x, "reduce-scatter", dt);
  if (rc) return rc;
  if (x->nccl) rc = ts__nccl_reduce_scatter(x->nccl, send, recv, count, dt, op, s);
  else if (!gpu(x)) rc = ts_comm_reduce_scatter_block(x->c, send, recv, count, dt, op);
  else {
    job j = {x, send, recv, count, ts_dtype_size(dt), dt, op, -1, -1, 0};
    rc = staged(&j, s, count, chunk_of(x, j.es, (size_t)x->size + 1), blocks_in, rs_mpi, rs_out);
  }
  return WRAP(rc, "reduce-scatter");
}

int ts__dcoll_alltoall(ts__dcoll *x, const void *send, void *recv, size_t count, ts_dtype dt, ts__dev_stream *s) {
  int rc = check_dt(x, "all-to-all", dt);
  if (rc) return rc;
  if (x->nccl) {
    size_t es = ts_dtype_size(dt);
    rc = ts__nccl_group_begin();
    for (int r = 0; r < x->size && !rc; r++) {
      rc = ts__nccl_send(x->nccl, (const char *)send + (size_t)r * count * es, count, dt, r, s);
      if (!rc) rc = ts__nccl_recv(x->nccl, (char *)recv + (size_t)r * count * es, count, dt, r, s);
    }
    int rc2 = ts__nccl_group_end();
    if (!rc) rc = rc2;
  } else if (!gpu(x)) {
    rc = ts_comm_alltoall(x->c, send, recv, count, dt);
  } else {
    job j = {x, send, recv, count, ts_dtype_size(dt), dt, TS_REDUCE_SUM, -1, -1, 0};
    rc = staged(&j, s, count, chunk_of(x, j.es, 2 * (size_t)x->size), blocks_in, a2a_mpi, a2a_out);
  }
  return WRAP(rc, "all-to-all");
}

int ts__dcoll_sendrecv(ts__dcoll *x, const void *send, size_t send_count, void *recv, size_t recv_count, ts_dtype dt,
                       int peer, ts__dev_stream *s) {
  int rc = check_dt(x, "send/receive", dt);
  if (rc) return rc;
  if (peer < 0 || peer >= x->size || peer == x->rank)
    return ts_error_set(TS_EINVAL, "device send/receive: peer %d (rank %d of %d)", peer, x->rank, x->size);
  if (x->nccl) {
    rc = ts__nccl_group_begin();
    if (!rc && send_count) rc = ts__nccl_send(x->nccl, send, send_count, dt, peer, s);
    if (!rc && recv_count) rc = ts__nccl_recv(x->nccl, recv, recv_count, dt, peer, s);
    int rc2 = ts__nccl_group_end();
    if (!rc) rc = rc2;
  } else {
    /* the host's (CPU device) or the staged chunks: each way up to the longer message */
    job j = {x, send, recv, send_count, ts_dtype_size(dt), dt, TS_REDUCE_SUM, -1, peer, recv_count};
    size_t total = send_count > recv_count ? send_count : recv_count;
    if (!gpu(x)) {
      ts_comm_req *req = NULL;
      rc = send_count ? ts_comm_isend(x->c, send, send_count, dt, peer, TAG, &req) : TS_OK;
      if (!rc && recv_count) rc = ts_comm_recv(x->c, recv, recv_count, dt, peer, TAG);
      if (req) {
        int rw = ts_comm_wait(req);
        ts_comm_req_free(req);
        if (!rc) rc = rw;
      }
    } else {
      rc = staged(&j, s, total, chunk_of(x, j.es, 2), sr_in, sr_mpi, sr_out);
    }
  }
  return WRAP(rc, "send/receive");
}
