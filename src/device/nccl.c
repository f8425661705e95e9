/* NCCL loaded at run time (nccl.h says what and how). Calls check NCCL's result and turn it into
 * Tessera's status naming the collective; the stream is the rank's device stream. */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/cuda_api.h"
#include "device/nccl.h"
#include "device/nccl_abi.h"

struct ts__nccl {
  ts__nccl_comm_t comm;
  ts__dev *dev;
  int nranks, rank;
};

static ts__nccl_api nc;
static int nc_rc = 1;
static char nc_msg[400], nc_ver[32];
static pthread_once_t nc_once = PTHREAD_ONCE_INIT;

static void nc_load(void) {
  /* TESSERA_LIBNCCL, when set, is the library: one that does not load is said, not replaced */
  const char *env = getenv("TESSERA_LIBNCCL");
  void *h = dlopen(env && *env ? env : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    if (env && *env) snprintf(nc_msg, sizeof nc_msg, "NCCL not found (TESSERA_LIBNCCL: %s)", e ? e : env);
    else snprintf(nc_msg, sizeof nc_msg, "NCCL not found (libnccl.so.2, or TESSERA_LIBNCCL)");
    nc_rc = TS_EUNSUPPORTED;
    return;
  }
  static const ts__dl_sym want[] = {
#define F(field, sym) {#sym, offsetof(ts__nccl_api, field)},
      TS__NCCL_SYMBOLS(F)
#undef F
  };
  const char *miss = ts__dl_fill(h, want, sizeof want / sizeof want[0], &nc);
  if (miss) {
    snprintf(nc_msg, sizeof nc_msg, "NCCL lacks %s", miss);
    nc_rc = TS_EUNSUPPORTED;
    memset(&nc, 0, sizeof nc);
    return;
  }
  int v = 0;
  nc.GetVersion(&v); /* 2.x: major*10000 + minor*100 + patch (before 2.9: major*1000 + minor*100 + patch) */
  if (v >= 10000) snprintf(nc_ver, sizeof nc_ver, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
  else snprintf(nc_ver, sizeof nc_ver, "%d.%d.%d", v / 1000, v / 100 % 10, v % 100);
  if (v < 21000) { /* ncclAvg and ncclBfloat16 came with 2.10 */
    snprintf(nc_msg, sizeof nc_msg, "NCCL %s is older than 2.10", nc_ver);
    nc_rc = TS_EUNSUPPORTED;
    return;
  }
  nc_rc = TS_OK;
}

int ts__nccl_available(void) {
  pthread_once(&nc_once, nc_load);
  return nc_rc == TS_OK;
}

const char *ts__nccl_why(void) {
  pthread_once(&nc_once, nc_load);
  return nc_rc == TS_OK ? "" : nc_msg;
}

const char *ts__nccl_version(void) { return ts__nccl_available() ? nc_ver : ""; }

static int fail(ts__nccl_result r, const char *what) {
  const char *s = nc.GetErrorString ? nc.GetErrorString(r) : NULL;
  return ts_error_set(TS_EBACKEND, "NCCL: %s: %s (%d)", what, s ? s : "error", r);
}

int ts__nccl_unique_id(unsigned char id[TS__NCCL_ID_BYTES]) {
  if (!ts__nccl_available()) return ts_error_set(TS_EUNSUPPORTED, "%s", nc_msg);
  ts__nccl_id_t u;
  ts__nccl_result r = nc.GetUniqueId(&u);
  if (r) return fail(r, "ncclGetUniqueId");
  memcpy(id, u.internal, TS__NCCL_ID_BYTES);
  return TS_OK;
}

int ts__nccl_comm_init(ts__dev *d, int nranks, const unsigned char id[TS__NCCL_ID_BYTES], int rank, ts__nccl **out) {
  *out = NULL;
  if (!d || d->info.kind != TS_DEVICE_GPU) return ts_error_set(TS_EINVAL, "NCCL: a communicator needs a GPU device");
  if (nranks < 1 || rank < 0 || rank >= nranks) return ts_error_set(TS_EINVAL, "NCCL: rank %d of %d", rank, nranks);
  if (!ts__nccl_available()) return ts_error_set(TS_EUNSUPPORTED, "%s", nc_msg);
  ts__nccl *c = calloc(1, sizeof *c);
  if (!c) return ts_error_set(TS_ENOMEM, "NCCL: out of memory");
  ts__nccl_id_t u;
  memcpy(u.internal, id, TS__NCCL_ID_BYTES);
  /* NCCL binds the communicator to the current context's device: the device's own */
  int rc = ts__dev_sync(d);
  if (rc) {
    free(c);
    return rc;
  }
  ts__nccl_result r = nc.CommInitRank(&c->comm, nranks, u, rank);
  if (r) {
    free(c);
    char what[80];
    snprintf(what, sizeof what, "ncclCommInitRank (rank %d of %d, GPU %d)", rank, nranks, d->info.id);
    return fail(r, what);
  }
  c->dev = d, c->nranks = nranks, c->rank = rank;
  *out = c;
  return TS_OK;
}

void ts__nccl_comm_free(ts__nccl *c) {
  if (!c) return;
  nc.CommDestroy(c->comm);
  free(c);
}

void ts__nccl_comm_abort(ts__nccl *c) {
  if (!c) return;
  nc.CommAbort(c->comm);
  free(c);
}

int ts__nccl_check(ts__nccl *c) {
  ts__nccl_result e = TS__NCCL_SUCCESS;
  ts__nccl_result r = nc.CommGetAsyncError(c->comm, &e);
  if (r) return fail(r, "ncclCommGetAsyncError");
  return e && e != TS__NCCL_IN_PROGRESS ? fail(e, "the communicator failed") : TS_OK;
}

static int dtype_of(ts_dtype dt) {
  switch (dt) {
  case TS_F32: return TS__NCCL_FLOAT32;
  case TS_BF16: return TS__NCCL_BFLOAT16;
  case TS_F16: return TS__NCCL_FLOAT16;
  case TS_I32: return TS__NCCL_INT32;
  case TS_I64: return TS__NCCL_INT64;
  case TS_U8: return TS__NCCL_UINT8;
  default: return -1;
  }
}

static int op_of(ts_reduce_op op) {
  return op == TS_REDUCE_SUM ? TS__NCCL_SUM : op == TS_REDUCE_MEAN ? TS__NCCL_AVG : op == TS_REDUCE_MAX ? TS__NCCL_MAX
       : op == TS_REDUCE_MIN ? TS__NCCL_MIN : -1;
}

/* the checks every call makes: its dtype (and op), and NCCL's stream of the device */
static int args(ts__nccl *c, const char *what, ts_dtype dt, int with_op, ts_reduce_op op, int *ndt, int *nop) {
  if (!c) return ts_error_set(TS_EINVAL, "NCCL %s: no communicator", what);
  *ndt = dtype_of(dt);
  if (*ndt < 0) return ts_error_set(TS_EDTYPE, "NCCL %s: dtype %s", what, ts_dtype_name(dt));
  *nop = with_op ? op_of(op) : 0;
  if (*nop < 0) return ts_error_set(TS_EINVAL, "NCCL %s: reduction %d", what, (int)op);
  return TS_OK;
}

#define STREAM(c, s) ts__cuda_stream((c)->dev, (s))

int ts__nccl_allreduce(ts__nccl *c, const void *send, void *recv, size_t count, ts_dtype dt, ts_reduce_op op,
                       ts__dev_stream *s) {
  int ndt = 0, nop = 0, rc = args(c, "all-reduce", dt, 1, op, &ndt, &nop);
  if (rc) return rc;
  ts__nccl_result r = nc.AllReduce(send, recv, count, ndt, nop, c->comm, STREAM(c, s));
  return r ? fail(r, "ncclAllReduce") : TS_OK;
}

int ts__nccl_allgather(ts__nccl *c, const void *send, void *recv, size_t count, ts_dtype dt, ts__dev_stream *s) {
  int ndt = 0, nop = 0, rc = args(c, "all-gather", dt, 0, TS_REDUCE_SUM, &ndt, &nop);
  if (rc) return rc;
  ts__nccl_result r = nc.AllGather(send, recv, count, ndt, c->comm, STREAM(c, s));
  return r ? fail(r, "ncclAllGather") : TS_OK;
}

int ts__nccl_reduce_scatter(ts__nccl *c, const void *send, void *recv, size_t count, ts_dtype dt, ts_reduce_op op,
                            ts__dev_stream *s) {
  int ndt = 0, nop = 0, rc = args(c, "reduce-scatter", dt, 1, op, &ndt, &nop);
  if (rc) return rc;
  ts__nccl_result r = nc.ReduceScatter(send, recv, count, ndt, nop, c->comm, STREAM(c, s));
  return r ? fail(r, "ncclReduceScatter") : TS_OK;
}

int ts__nccl_broadcast(ts__nccl *c, void *buf, size_t count, ts_dtype dt, int root, ts__dev_stream *s) {
  int ndt = 0, nop = 0, rc = args(c, "broadcast", dt, 0, TS_REDUCE_SUM, &ndt, &nop);
  if (rc) return rc;
  if (root < 0 || root >= c->nranks) return ts_error_set(TS_EINVAL, "NCCL broadcast: root %d of %d", root, c->nranks);
  ts__nccl_result r = nc.Broadcast(buf, buf, count, ndt, root, c->comm, STREAM(c, s));
  return r ? fail(r, "ncclBroadcast") : TS_OK;
}

int ts__nccl_send(ts__nccl *c, const void *buf, size_t count, ts_dtype dt, int peer, ts__dev_stream *s) {
  int ndt = 0, nop = 0, rc = args(c, "send", dt, 0, TS_REDUCE_SUM, &ndt, &nop);
  if (rc) return rc;
  if (peer < 0 || peer >= c->nranks) return ts_error_set(TS_EINVAL, "NCCL send: peer %d of %d", peer, c->nranks);
  ts__nccl_result r = nc.Send(buf, count, ndt, peer, c->comm, STREAM(c, s));
  return r ? fail(r, "ncclSend") : TS_OK;
}

int ts__nccl_recv(ts__nccl *c, void *buf, size_t count, ts_dtype dt, int peer, ts__dev_stream *s) {
  int ndt = 0, nop = 0, rc = args(c, "recv", dt, 0, TS_REDUCE_SUM, &ndt, &nop);
  if (rc) return rc;
  if (peer < 0 || peer >= c->nranks) return ts_error_set(TS_EINVAL, "NCCL recv: peer %d of %d", peer, c->nranks);
  ts__nccl_result r = nc.Recv(buf, count, ndt, peer, c->comm, STREAM(c, s));
  return r ? fail(r, "ncclRecv") : TS_OK;
}

int ts__nccl_group_begin(void) {
  if (!ts__nccl_available()) return ts_error_set(TS_EUNSUPPORTED, "%s", nc_msg);
  ts__nccl_result r = nc.GroupStart();
  return r ? fail(r, "ncclGroupStart") : TS_OK;
}

int ts__nccl_group_end(void) {
  if (!ts__nccl_available()) return ts_error_set(TS_EUNSUPPORTED, "%s", nc_msg);
  ts__nccl_result r = nc.GroupEnd();
  return r ? fail(r, "ncclGroupEnd") : TS_OK;
}
