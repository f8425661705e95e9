/* Topology: which ranks of a communicator share a host (MPI_Comm_split_type SHARED), a node
 * communicator per host and a communicator of the hosts' leaders, and the hierarchical
 * all-reduce over them (reduce inside each host, all-reduce between the leaders, broadcast inside
 * each host). include/tessera/comm.h has the contract. */
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
