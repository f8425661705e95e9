/* Communicators over MPI, requests and their progress, the polled timeout and its announcements,
 * and the debug consistency check. The collectives themselves are in coll.c, the watchdog thread
 * of native blocking calls in watchdog.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_impl.h"
#include "../base/text.h"

/* ---- process-wide state (set up from the main thread) ---- */
static int g_init;           /* ts_comm_init succeeded and ts_comm_finalize not yet called */
static int g_finalized;
static int g_owns_mpi;       /* MPI_Init was ours: finalize it */
static ts_comm *g_world;
static MPI_Comm g_exit_mc = MPI_COMM_NULL; /* ts_comm_abort_all's barrier only */
static double g_timeout = 300.0;
static int g_check;
static int g_force_blocking = -1; /* TESSERA_COMM_BLOCKING: -1 none, else the ts_comm_blocking in force */
static int g_thread_level = MPI_THREAD_SINGLE; /* what MPI provides */
static ts_comm_req *g_orphans; /* requests that could not complete; freed after MPI_Finalize */

/* ---- announcements of long waits (see struct ts_comm in comm_impl.h) ---- */
/* The announcements use the highest tag MPI allows (user send/recv tags stop below it, coll.c),
 * on c's own communicator: point-to-point messages never interfere with collectives. */
static int g_watch_tag = -1;
int ts__watch_tag(void) {
  if (g_watch_tag < 0) {
    void *ubp = NULL;
    int flag = 0;
    g_watch_tag = 32767;
    if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ubp, &flag) == MPI_SUCCESS && flag && ubp)
      g_watch_tag = *(int *)ubp;
  }
  return g_watch_tag;
}
#define WATCH_TAG ts__watch_tag()
typedef struct { uint64_t seq; int32_t wrank, pad_; } watch_msg;
struct ts_watch_buf {
  watch_msg msg;
  int nreq, posted;
  struct ts_watch_buf *next; /* list of buffers still being sent when their communicator went */
  MPI_Request req[];
};
static struct ts_watch_buf *g_watch_left; /* freed after MPI_Finalize */

/* After how long a wait a rank announces itself, and how long a timed-out rank listens. */
double ts__watch_after(void) { return g_timeout > 0 && g_timeout < 4.0 ? g_timeout / 4 : 1.0; }
static double watch_grace(void) { return g_timeout > 0 && g_timeout < 4.0 ? g_timeout / 4 : 1.0; }

static void watch_setup(ts_comm *c) {
  c->mcw = MPI_COMM_NULL;
  if (c->size < 2) return;
  c->peer_seq = malloc(sizeof *c->peer_seq * (size_t)c->size);
  c->peer_t = calloc((size_t)c->size, sizeof *c->peer_t);
  c->wb = calloc(1, sizeof *c->wb + sizeof(MPI_Request) * (size_t)c->size);
  if (!c->peer_seq || !c->peer_t || !c->wb) {
    free(c->peer_seq); free(c->peer_t); free(c->wb);
    c->peer_seq = NULL; c->peer_t = NULL; c->wb = NULL;
    return;
  }
  c->mcw = c->mc; /* not a communicator of its own (see WATCH_TAG) */
  for (int i = 0; i < c->size; i++) c->peer_seq[i] = -1;
}

static void watch_free(ts_comm *c) {
  if (c->mcw == MPI_COMM_NULL) return;
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) {
    int all = 1;
    if (c->wb->posted && MPI_Testall(c->wb->nreq, c->wb->req, &all, MPI_STATUSES_IGNORE) != MPI_SUCCESS) all = 0;
    if (!all) { /* a send still in progress (a peer not receiving): its buffer outlives c */
      for (int i = 0; i < c->wb->nreq; i++)
        if (c->wb->req[i] != MPI_REQUEST_NULL) MPI_Request_free(&c->wb->req[i]);
      c->wb->next = g_watch_left;
      g_watch_left = c->wb;
      c->wb = NULL;
    }
  }
  c->mcw = MPI_COMM_NULL;
  free(c->wb); free(c->peer_seq); free(c->peer_t);
  c->wb = NULL; c->peer_seq = NULL; c->peer_t = NULL;
}

/* Receives the announcements that have arrived. */
static void watch_drain(ts_comm *c) {
  if (c->mcw == MPI_COMM_NULL) return;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, WATCH_TAG, c->mcw, &flag, &st) != MPI_SUCCESS || !flag) return;
    watch_msg m;
    if (MPI_Recv(&m, (int)sizeof m, MPI_BYTE, st.MPI_SOURCE, WATCH_TAG, c->mcw, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      return;
    int src = st.MPI_SOURCE;
    if (src >= 0 && src < c->size) {
      if ((int64_t)m.seq > c->peer_seq[src]) c->peer_seq[src] = (int64_t)m.seq;
      c->peer_t[src] = ts_time_now();
    }
  }
}

/* Tells every other rank of c the last collective this rank issued on c (non-blocking). */
void ts__watch_announce(ts_comm *c) {
  if (c->mcw == MPI_COMM_NULL || c->seq == 0) return;
  watch_drain(c);
  struct ts_watch_buf *b = c->wb;
  if (b->posted) {
    int all = 0;
    if (MPI_Testall(b->nreq, b->req, &all, MPI_STATUSES_IGNORE) != MPI_SUCCESS || !all) return;
    b->posted = 0;
  }
  b->msg.seq = c->seq - 1;
  b->msg.wrank = c->world_rank;
  b->nreq = 0;
  for (int i = 0; i < c->size; i++) {
    if (i == c->rank) continue;
    if (MPI_Isend(&b->msg, (int)sizeof b->msg, MPI_BYTE, i, WATCH_TAG, c->mcw, &b->req[b->nreq]) != MPI_SUCCESS)
      break;
    b->nreq++;
  }
  b->posted = b->nreq > 0;
}

/* After a timeout of collective s on c (the wait began at t0): listens for a short grace, then
 * writes into buf ": rank 1 of 2 never reached it (stalled or dead)" naming the ranks that did
 * not announce s (or a later one); "" when it cannot tell (one rank, no side communicator). */
void ts__watch_diagnose(ts_comm *c, const ts_coll_sig *s, double t0, char *buf, size_t cap) {
  buf[0] = 0;
  if (!c || c->mcw == MPI_COMM_NULL || s->kind == TS_COLL_SEND || s->kind == TS_COLL_RECV) return;
  ts__watch_announce(c);
  double end = ts_time_now() + watch_grace();
  int missing = 0;
  for (;;) {
    watch_drain(c);
    missing = 0;
    for (int i = 0; i < c->size; i++)
      if (i != c->rank && c->peer_seq[i] < (int64_t)s->seq) missing++;
    if (!missing || ts_time_now() >= end) break;
    struct timespec ts = {0, 1000000L};
    nanosleep(&ts, NULL);
  }
  if (!missing) {
    snprintf(buf, cap, ": all %d ranks reached it (the transfer itself did not finish)", c->size);
    return;
  }
  /* world ranks of c's members, for sub-communicators */
  int *wr = NULL;
  if (!c->world_like) {
    wr = malloc(sizeof *wr * 2 * (size_t)c->size);
    MPI_Group g = MPI_GROUP_NULL, gw = MPI_GROUP_NULL;
    if (wr && MPI_Comm_group(c->mc, &g) == MPI_SUCCESS && MPI_Comm_group(MPI_COMM_WORLD, &gw) == MPI_SUCCESS) {
      for (int i = 0; i < c->size; i++) wr[c->size + i] = i;
      if (MPI_Group_translate_ranks(g, c->size, wr + c->size, gw, wr) != MPI_SUCCESS) {
        free(wr);
        wr = NULL;
      }
    } else {
      free(wr);
      wr = NULL;
    }
    if (g != MPI_GROUP_NULL) MPI_Group_free(&g);
    if (gw != MPI_GROUP_NULL) MPI_Group_free(&gw);
  }
  size_t len = 0;
  ts__app(buf, cap, &len, ": %s ", missing > 1 ? "ranks" : "rank");
  int shown = 0, fresh = 0;
  for (int i = 0; i < c->size; i++) {
    if (i == c->rank || c->peer_seq[i] >= (int64_t)s->seq) continue;
    if (shown == 8) {
      ts__app(buf, cap, &len, ", ...");
      break;
    }
    ts__app(buf, cap, &len, "%s", shown ? ", " : "");
    if (c->world_like) ts__app(buf, cap, &len, "%d", i);
    else if (wr) ts__app(buf, cap, &len, "%d (%d in the group)", wr[i], i);
    else ts__app(buf, cap, &len, "%d in the group", i);
    const char *host = ts__world_host_name(c->world_like ? i : wr ? wr[i] : -1);
    if (host) ts__app(buf, cap, &len, " (host %s)", host); /* a job on several hosts */
    /* heard from during this wait, about a collective it may still be in: an announcement is
     * received only when this rank next waits long, so one from long ago (a slow start) can arrive
     * now; a rank whose last collective is before s's predecessor, which completed here, has
     * since moved on (seen under load: "waiting in #4" during #23) */
    if (c->peer_seq[i] >= 0 && c->peer_t[i] >= t0 && c->peer_seq[i] + 1 >= (int64_t)s->seq) {
      ts__app(buf, cap, &len, " (waiting in #%lld)", (long long)c->peer_seq[i]);
      fresh++;
    }
    shown++;
  }
  if (c->world_like) ts__app(buf, cap, &len, " of %d", c->size);
  else ts__app(buf, cap, &len, " of the group of %d", c->size);
  ts__app(buf, cap, &len, " never reached it (%s)",
          fresh == missing ? "waiting in an earlier collective" : fresh ? "stalled, dead or in an earlier collective"
                                                                        : "stalled or dead");
  free(wr);
}

const char *ts_reduce_op_name(ts_reduce_op op) {
  switch (op) {
    case TS_REDUCE_SUM: return "sum";
    case TS_REDUCE_MEAN: return "mean";
    case TS_REDUCE_MAX: return "max";
    case TS_REDUCE_MIN: return "min";
    default: return "?";
  }
}

const char *ts__coll_name(int kind) {
  static const char *const names[TS_COLL_KIND_COUNT] = {
      [TS_COLL_ALLREDUCE] = "allreduce",
      [TS_COLL_ALLGATHER] = "allgather",
      [TS_COLL_ALLGATHERV] = "allgatherv",
      [TS_COLL_REDUCE_SCATTER] = "reduce_scatter",
      [TS_COLL_REDUCE_SCATTER_BLOCK] = "reduce_scatter_block",
      [TS_COLL_BROADCAST] = "broadcast",
      [TS_COLL_ALLTOALL] = "alltoall",
      [TS_COLL_ALLTOALLV] = "alltoallv",
      [TS_COLL_BARRIER] = "barrier",
      [TS_COLL_SEND] = "send",
      [TS_COLL_RECV] = "recv",
      [TS_COLL_DUP] = "comm_dup",
      [TS_COLL_SPLIT] = "comm_split",
      [TS_COLL_GROUP] = "comm_group",
      [TS_COLL_GRID_AXIS] = "comm_grid_axis",
  };
  return kind >= 0 && kind < TS_COLL_KIND_COUNT ? names[kind] : "?";
}

void ts__sig_str(const ts_coll_sig *s, char *buf, size_t cap) {
  char opb[16] = "", rootb[32] = "", cnt[64] = "";
  if (s->op >= 0) snprintf(opb, sizeof opb, "(%s)", ts_reduce_op_name((ts_reduce_op)s->op));
  if (s->root >= 0)
    snprintf(rootb, sizeof rootb, ", %s %d",
             s->kind == TS_COLL_BROADCAST ? "root" : s->kind == TS_COLL_SEND ? "to" : "from",
             (int)s->root);
  if (s->dtype >= 0)
    snprintf(cnt, sizeof cnt, " (%s x %lld%s)", ts_dtype_name((ts_dtype)s->dtype),
             (long long)s->shown, rootb);
  if (s->kind == TS_COLL_SEND || s->kind == TS_COLL_RECV)
    snprintf(buf, cap, "%s%s", ts__coll_name(s->kind), cnt);
  else
    snprintf(buf, cap, "%s%s #%llu%s", ts__coll_name(s->kind), opb, (unsigned long long)s->seq,
             cnt);
}

/* Short form used by the debug check: "allreduce(sum) f32 x 1000"; `how`: with the way it waits
 * (" (native blocking)" or " (polled)"). */
static void sig_short(const ts_coll_sig *s, int how, char *buf, size_t cap) {
  char opb[16] = "", rootb[32] = "";
  if (s->op >= 0) snprintf(opb, sizeof opb, "(%s)", ts_reduce_op_name((ts_reduce_op)s->op));
  if (s->kind == TS_COLL_BROADCAST) snprintf(rootb, sizeof rootb, " root %d", (int)s->root);
  const char *hw = !how ? "" : s->flags & TS__SIG_NATIVE ? " (native blocking)" : " (polled)";
  if (s->dtype >= 0)
    snprintf(buf, cap, "%s%s %s x %lld%s%s", ts__coll_name(s->kind), opb,
             ts_dtype_name((ts_dtype)s->dtype), (long long)s->shown, rootb, hw);
  else
    snprintf(buf, cap, "%s%s%s", ts__coll_name(s->kind), opb, hw);
}

void ts__who(const ts_comm *c, char *buf, size_t cap) {
  if (!c) {
    snprintf(buf, cap, "rank ?");
  } else if (c->world_like) {
    snprintf(buf, cap, "rank %d", c->world_rank);
  } else {
    snprintf(buf, cap, "rank %d (%d of %d in its group)", c->world_rank, c->rank, c->size);
  }
}

int ts__mpi_fail(ts_comm *c, const ts_coll_sig *s, int mpirc, const char *fn) {
  char who[96], what[160], es[MPI_MAX_ERROR_STRING + 1] = "";
  int len = 0;
  if (MPI_Error_string(mpirc, es, &len) != MPI_SUCCESS) snprintf(es, sizeof es, "error %d", mpirc);
  ts__who(c, who, sizeof who);
  ts__sig_str(s, what, sizeof what);
  ts_error_set(TS_ECOMM, "%s: %s: %s failed: %s", who, what, fn, es);
  if (c && !c->failed && s->kind != TS_COLL_RECV) {
    c->failed = 1;
    snprintf(c->failmsg, sizeof c->failmsg, "%s: %s failed", what, fn);
  }
  return TS_ECOMM;
}

int ts__arg_fail(ts_comm *c, int code, const ts_coll_sig *s, const char *what) {
  char who[96], sg[160];
  ts__who(c, who, sizeof who);
  ts__sig_str(s, sg, sizeof sg);
  return ts_error_set(code, "%s: %s: %s", who, sg, what);
}

MPI_Datatype ts__mpi_dtype(ts_dtype dt) {
  switch (dt) {
    case TS_F32: return MPI_FLOAT;
    case TS_BF16:
    case TS_F16: return MPI_UINT16_T;
    case TS_I32: return MPI_INT32_T;
    case TS_I64: return MPI_INT64_T;
    case TS_U8: return MPI_UINT8_T;
    default: return MPI_DATATYPE_NULL;
  }
}

/* ---- settings ---- */
void ts_comm_set_timeout(double seconds) { g_timeout = (seconds > 0 && isfinite(seconds)) ? seconds : 0; }
double ts_comm_get_timeout(void) { return g_timeout; }
void ts_comm_set_debug_check(int on) { g_check = on != 0; }
int ts_comm_get_debug_check(void) { return g_check; }

int ts_comm_set_blocking(ts_comm *c, ts_comm_blocking mode) {
  if (!c) return ts_error_set(TS_EINVAL, "ts_comm_set_blocking: communicator is NULL");
  if (mode != TS_COMM_BLOCKING_POLLED && mode != TS_COMM_BLOCKING_NATIVE)
    return ts_error_set(TS_EINVAL, "ts_comm_set_blocking: mode %d is neither polled (0) nor native (1)", (int)mode);
  c->native = mode == TS_COMM_BLOCKING_NATIVE;
  return TS_OK;
}

int ts__comm_native(const ts_comm *c) { return g_force_blocking >= 0 ? g_force_blocking == TS_COMM_BLOCKING_NATIVE : c->native; }

ts_comm_blocking ts_comm_get_blocking(const ts_comm *c) {
  return c && ts__comm_native(c) ? TS_COMM_BLOCKING_NATIVE : TS_COMM_BLOCKING_POLLED;
}

int ts__mpi_thread_level(void) { return g_thread_level; }

/* ---- init / finalize ---- */
static ts_comm *comm_wrap(MPI_Comm mc, int is_world) {
  ts_comm *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->mc = mc;
  MPI_Comm_rank(mc, &c->rank);
  MPI_Comm_size(mc, &c->size);
  MPI_Comm_rank(MPI_COMM_WORLD, &c->world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c->world_size);
  c->is_world = is_world;
  /* messages then say just "rank R" (this rank's world and group ranks are the same number) */
  c->world_like = is_world || (c->size == c->world_size && c->rank == c->world_rank);
  c->refs = 1;
  c->last.kind = -1;
  c->mc2 = MPI_COMM_NULL;
  watch_setup(c);
  return c;
}

static void comm_unref(ts_comm *c) {
  if (c && --c->refs == 0) {
    watch_free(c);
    free(c);
  }
}

static int read_env(void) {
  const char *e = getenv("TESSERA_COMM_TIMEOUT");
  if (e && *e) {
    char *end = NULL;
    errno = 0;
    double v = strtod(e, &end);
    while (end && (*end == ' ' || *end == '\t')) end++;
    if (errno || end == e || *end || !isfinite(v) || v < 0)
      return ts_error_set(TS_ECONFIG,
                          "TESSERA_COMM_TIMEOUT='%s': expected a number of seconds >= 0 "
                          "(0 = no timeout)", e);
    ts_comm_set_timeout(v);
  }
  e = getenv("TESSERA_COMM_BLOCKING");
  if (e && *e) {
    if (!strcmp(e, "polled")) g_force_blocking = TS_COMM_BLOCKING_POLLED;
    else if (!strcmp(e, "native")) g_force_blocking = TS_COMM_BLOCKING_NATIVE;
    else return ts_error_set(TS_ECONFIG, "TESSERA_COMM_BLOCKING='%s': expected polled or native", e);
  }
  e = getenv("TESSERA_COMM_CHECK");
  if (e && *e) {
    if (!strcmp(e, "1") || !strcmp(e, "on") || !strcmp(e, "true"))
      g_check = 1;
    else if (!strcmp(e, "0") || !strcmp(e, "off") || !strcmp(e, "false"))
      g_check = 0;
    else
      return ts_error_set(TS_ECONFIG, "TESSERA_COMM_CHECK='%s': expected 0 or 1", e);
  }
  return TS_OK;
}

/* ---- other launchers' variables (ts_comm_check_env) ---- */

/* The families: MindSpore's (its run.sh starts one process per device) and torchrun's. */
static const char *const k_env[2][2] = {{"RANK_ID", "RANK_SIZE"}, {"RANK", "WORLD_SIZE"}};
enum { ENV_UNSET = -1, ENV_BAD = -2, ENV_N = 4 };

/* A variable as a number >= 0, ENV_UNSET, or ENV_BAD (not a whole number). */
static int env_value(const char *name) {
  const char *e = getenv(name);
  if (!e || !*e) return ENV_UNSET;
  char *end = NULL;
  errno = 0;
  long v = strtol(e, &end, 10);
  while (end && (*end == ' ' || *end == '\t' || *end == '\n')) end++;
  return errno || end == e || *end || v < 0 || v > INT_MAX ? ENV_BAD : (int)v;
}

/* This rank's values: RANK_ID, RANK_SIZE, RANK, WORLD_SIZE. */
static void env_values(int v[ENV_N]) {
  for (int f = 0; f < 2; f++)
    for (int k = 0; k < 2; k++) v[2 * f + k] = env_value(k_env[f][k]);
}

/* This process's command line ("python3 train.py"), cut to fit, or "COMMAND". */
static void own_command(char *buf, size_t cap) {
  snprintf(buf, cap, "COMMAND");
  FILE *f = fopen("/proc/self/cmdline", "r");
  if (!f) return;
  char raw[512];
  size_t n = fread(raw, 1, sizeof raw - 1, f);
  int whole = feof(f);
  fclose(f);
  if (n == 0) return;
  raw[n] = 0;
  size_t len = 0;
  buf[0] = 0;
  for (size_t i = 0; i < n;) {
    const char *a = raw + i;
    size_t al = strnlen(a, n - i);
    int quote = strpbrk(a, " \t'\"$") != NULL || al == 0;
    ts__app(buf, cap, &len, "%s%s%s%s", len ? " " : "", quote ? "'" : "", a, quote ? "'" : "");
    i += al + 1;
  }
  if (!whole) ts__app(buf, cap, &len, " ...");
}

/* The verdict on rank r's values v (of a job of `size` ranks): TS_OK, or TS_ECONFIG with the
 * message; self: r is this process (the message may quote its variables and command line). */
static int env_verdict(int r, int size, const int v[ENV_N], int self) {
  char who[64] = "";
  if (!self) snprintf(who, sizeof who, "rank %d: ", r);
  for (int f = 0; f < 2; f++) {
    const char *rn = k_env[f][0], *sn = k_env[f][1];
    int R = v[2 * f], S = v[2 * f + 1];
    const char *owner = f ? "torchrun's" : "MindSpore's";
    for (int k = 0; k < 2; k++)
      if (v[2 * f + k] == ENV_BAD) {
        const char *name = k_env[f][k], *text = self ? getenv(name) : NULL;
        return ts_error_set(TS_ECONFIG, "%s%s%s%s%s in the environment is not a whole number (%s %s): unset it, "
                            "or start the job with `tessera launch`, which sets it", who, name, text ? "='" : "",
                            text ? text : "", text ? "'" : "", owner, k ? "rank count" : "rank");
      }
    if (S > 1 && size == 1) { /* started alone: one of S separate jobs */
      char cmd[400], how[600];
      own_command(cmd, sizeof cmd);
      const char *table = getenv("RANK_TABLE_FILE");
      if (!f && table && *table)
        snprintf(how, sizeof how, "tessera launch --rank-table %s -- %s", table, cmd);
      else
        snprintf(how, sizeof how, "tessera launch -n %d -- %s", S, cmd);
      return ts_error_set(TS_ECONFIG, "%s%s=%d in the environment (%s), but this process was not started by mpirun: "
                          "it would train alone, one of %d separate jobs (%s); start the job with `%s` (or mpirun "
                          "-n %d), one command for all its ranks", who, sn, S, owner, S,
                          f ? "Tessera joins ranks through MPI, not torchrun's rendezvous"
                            : "processes started one by one, as MindSpore's run.sh does, are not joined",
                          how, S);
    }
    if (S >= 0 && S != size)
      return ts_error_set(TS_ECONFIG, "%s%s=%d in the environment (%s), but MPI started %d rank%s: unset %s, or "
                          "start %d ranks (tessera launch -n %d sets it)", who, sn, S, owner, size,
                          size == 1 ? "" : "s", sn, S, S);
    if (R >= 0 && R != r)
      return ts_error_set(TS_ECONFIG, "%s%s=%d in the environment (%s), but MPI made %s process rank %d of %d: unset "
                          "%s (tessera launch sets it for each rank)", who, rn, R, owner, self ? "this" : "that", r, size, rn);
  }
  return TS_OK;
}

int ts_comm_check_env(int rank, int size) {
  int v[ENV_N];
  env_values(v);
  return env_verdict(rank, size, v, 1);
}

/* ts_comm_check_env on every rank of the world (dup), all ranks agreeing: the first rank whose
 * variables disagree fails them all, with its message. Collective. */
static int check_env_world(MPI_Comm dup) {
  int r = 0, n = 1;
  MPI_Comm_rank(dup, &r);
  MPI_Comm_size(dup, &n);
  int mine[ENV_N];
  env_values(mine);
  if (n == 1) return env_verdict(r, n, mine, 1);
  int *all = malloc(sizeof(int) * ENV_N * (size_t)n);
  if (!all) return ts_error_set(TS_ENOMEM, "ts_comm_init: out of memory");
  int mrc = MPI_Allgather(mine, ENV_N, MPI_INT, all, ENV_N, MPI_INT, dup);
  int rc = mrc == MPI_SUCCESS ? TS_OK : ts_error_set(TS_ECOMM, "ts_comm_init: MPI_Allgather failed (%d)", mrc);
  for (int q = 0; q < n && !rc; q++) rc = env_verdict(q, n, all + ENV_N * q, q == r);
  free(all);
  return rc;
}

int ts_comm_init(int *argc, char ***argv) {
  if (g_init) return TS_OK;
  if (g_finalized) return ts_error_set(TS_ECOMM, "ts_comm_init: MPI was already finalized");
  int rc = read_env();
  if (rc) return rc;
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (fin) return ts_error_set(TS_ECOMM, "ts_comm_init: MPI was already finalized");
  if (!inited) {
    int provided = 0;
    /* MULTIPLE: the watchdog thread asks the other ranks who is missing while the main thread is
     * inside a native blocking call (docs/comm.md: measured no slower than FUNNELED here) */
    int mrc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    if (mrc != MPI_SUCCESS) return ts_error_set(TS_ECOMM, "ts_comm_init: MPI_Init_thread failed (%d)", mrc);
    g_owns_mpi = 1;
    g_thread_level = provided;
    /* OpenMPI reports some failures of non-blocking collectives (e.g. a message that does not
     * fit, from collectives issued out of order) on MPI_COMM_WORLD: make them statuses too. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  if (inited) MPI_Query_thread(&g_thread_level); /* the application's MPI_Init */
  MPI_Comm dup = MPI_COMM_NULL;
  int mrc = MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  if (mrc != MPI_SUCCESS) return ts_error_set(TS_ECOMM, "ts_comm_init: MPI_Comm_dup failed (%d)", mrc);
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  if ((rc = check_env_world(dup))) { /* refused: MPI is left as it was found */
    MPI_Comm_free(&dup);
    if (g_owns_mpi) {
      MPI_Finalize();
      g_owns_mpi = 0;
      g_finalized = 1;
    }
    return rc;
  }
  g_world = comm_wrap(dup, 1);
  if (!g_world) {
    MPI_Comm_free(&dup);
    return ts_error_set(TS_ENOMEM, "ts_comm_init: out of memory");
  }
  if (MPI_Comm_dup(MPI_COMM_WORLD, &g_exit_mc) != MPI_SUCCESS) g_exit_mc = MPI_COMM_NULL; /* then no grace */
  g_init = 1;
  return TS_OK;
}

int ts_comm_initialized(void) { return g_init; }

int ts_comm_finalize(void) {
  if (!g_init) return TS_OK;
  ts__watchdog_stop();
  watch_free(g_world); /* its sends use mc */
  if (g_world->mc2 != MPI_COMM_NULL) MPI_Comm_free(&g_world->mc2);
  if (g_world->mc != MPI_COMM_NULL) MPI_Comm_free(&g_world->mc);
  if (g_exit_mc != MPI_COMM_NULL) MPI_Comm_free(&g_exit_mc);
  int rc = TS_OK;
  if (g_owns_mpi) {
    int mrc = MPI_Finalize();
    if (mrc != MPI_SUCCESS) rc = ts_error_set(TS_ECOMM, "ts_comm_finalize: MPI_Finalize failed (%d)", mrc);
  }
  /* MPI no longer touches the orphans' buffers. */
  while (g_watch_left) {
    struct ts_watch_buf *b = g_watch_left;
    g_watch_left = b->next;
    free(b);
  }
  while (g_orphans) {
    ts_comm_req *r = g_orphans;
    g_orphans = r->next;
    ts__req_release(r);
  }
  comm_unref(g_world);
  g_world = NULL;
  ts__world_hosts_free();
  g_init = 0;
  g_finalized = 1;
  return rc;
}

int ts_comm_abort(ts_comm *c, int code) {
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (!inited || fin) return ts_error_set(TS_EINVAL, "ts_comm_abort: MPI is not initialised");
  MPI_Abort(c && c->mc != MPI_COMM_NULL ? c->mc : MPI_COMM_WORLD, code);
  return TS_ECOMM; /* not reached */
}

int ts_comm_abort_all(int code, double grace_s) {
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (!inited || fin) return ts_error_set(TS_EINVAL, "ts_comm_abort_all: MPI is not initialised");
  /* A barrier on a communicator nothing else uses: it completes only if every rank is here, i.e.
   * every rank failed and has said why; then nobody's message is cut off by the abort. */
  MPI_Request q = MPI_REQUEST_NULL;
  if (g_exit_mc != MPI_COMM_NULL && grace_s > 0 && MPI_Ibarrier(g_exit_mc, &q) == MPI_SUCCESS) {
    double t0 = MPI_Wtime();
    int done = 0;
    while (MPI_Test(&q, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done && MPI_Wtime() - t0 < grace_s) {
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
  }
  MPI_Abort(MPI_COMM_WORLD, code);
  return TS_ECOMM; /* not reached */
}

/* ---- accessors ---- */
int ts_comm_world(ts_comm **out) {
  if (!out) return ts_error_set(TS_EINVAL, "ts_comm_world: out is NULL");
  *out = NULL;
  if (!g_init) return ts_error_set(TS_EINVAL, "ts_comm_world: ts_comm_init has not been called");
  *out = g_world;
  return TS_OK;
}

int ts_comm_rank(const ts_comm *c) { return c ? c->rank : -1; }
int ts_comm_size(const ts_comm *c) { return c ? c->size : 0; }
int ts_comm_world_rank(const ts_comm *c) { return c ? c->world_rank : -1; }
uint64_t ts_comm_seq(const ts_comm *c) { return c ? c->seq : 0; }
int ts_comm_failed(const ts_comm *c) { return c ? c->failed : 0; }

char *ts_comm_describe(const ts_comm *c, char *buf, size_t cap) {
  if (!buf || !cap) return buf;
  if (!c) {
    snprintf(buf, cap, "no communicator");
    return buf;
  }
  char who[96], sg[160];
  ts__who(c, who, sizeof who);
  if (c->last.kind < 0) {
    snprintf(buf, cap, "%s: no collective issued yet", who);
    return buf;
  }
  ts__sig_str(&c->last, sg, sizeof sg);
  snprintf(buf, cap, "%s: %llu collectives issued, last %s, %s%s%s", who,
           (unsigned long long)c->seq, sg, c->waiting ? "waiting for it" : "done",
           c->failed ? "; failed: " : "", c->failed ? c->failmsg : "");
  return buf;
}

void ts_comm_block_counts(size_t total, int n, size_t *counts) {
  if (n <= 0) return;
  size_t q = total / (size_t)n, r = total % (size_t)n;
  for (int i = 0; i < n; i++) counts[i] = q + ((size_t)i < r ? 1 : 0);
}

int ts__comm_usable(ts_comm *c, const ts_coll_sig *s) {
  if (!c) return ts_error_set(TS_EINVAL, "%s: communicator is NULL", ts__coll_name(s->kind));
  if (!g_init || c->mc == MPI_COMM_NULL)
    return ts_error_set(TS_EINVAL, "%s: communicator was freed (or MPI finalized)",
                        ts__coll_name(s->kind));
  if (c->failed) {
    char who[96], sg[160];
    ts__who(c, who, sizeof who);
    ts__sig_str(s, sg, sizeof sg);
    return ts_error_set(TS_ECOMM, "%s: %s: communicator unusable after an earlier failure (%s)",
                        who, sg, c->failmsg);
  }
  return TS_OK;
}

/* ---- requests and progress ---- */
ts_comm_req *ts__req_new(ts_comm *c, const ts_coll_sig *s) {
  ts_comm_req *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->c = c;
  c->refs++;
  r->sig = *s;
  r->mr = MPI_REQUEST_NULL;
  return r;
}

static void dequeue(ts_comm_req *r) {
  if (!r->queued) return;
  ts_comm *c = r->c;
  ts_comm_req **pp = &c->q_head, *prev = NULL;
  while (*pp && *pp != r) {
    prev = *pp;
    pp = &(*pp)->qnext;
  }
  if (*pp) *pp = r->qnext;
  if (c->q_tail == r) c->q_tail = prev;
  r->qnext = NULL;
  r->queued = 0;
}

int ts__comm_stage2_ready(ts_comm *c, const ts_coll_sig *s) {
  if (c->mc2 != MPI_COMM_NULL) return TS_OK;
  int mrc = MPI_Comm_dup(c->mc, &c->mc2);
  if (mrc == MPI_SUCCESS) return TS_OK;
  c->mc2 = MPI_COMM_NULL;
  return ts__mpi_fail(c, s, mrc, "MPI_Comm_dup (stage-2 communicator)");
}

void ts__req_enqueue_stage2(ts_comm_req *r) {
  ts_comm *c = r->c;
  r->queued = 1;
  r->s1_done = 0;
  r->qnext = NULL;
  if (c->q_tail) c->q_tail->qnext = r;
  else c->q_head = r;
  c->q_tail = r;
}

/* Tests the stage 1 of every queued request, then issues stage 2 of those at the head whose
 * stage 1 is complete, in queue order (the same order on every rank). */
static void queue_progress(ts_comm *c) {
  for (ts_comm_req *q = c->q_head; q; q = q->qnext) {
    if (q->s1_done || q->err) continue;
    int flag = 0;
    int mrc = MPI_Test(&q->mr, &flag, &q->st);
    if (mrc != MPI_SUCCESS) {
      if (mrc == MPI_ERR_IN_STATUS) mrc = q->st.MPI_ERROR;
      q->err = ts__mpi_fail(c, &q->sig, mrc, "MPI_Test");
      continue;
    }
    if (flag) q->s1_done = 1;
  }
  while (c->q_head && (c->q_head->s1_done || c->q_head->err)) {
    ts_comm_req *q = c->q_head;
    dequeue(q);
    if (q->err) continue;
    q->stage++;
    int rc = q->on_stage(q); /* the local reduction, then stage 2 on mc2 */
    if (rc) q->err = rc;
  }
}

void ts__req_release(ts_comm_req *r) {
  if (!r) return;
  dequeue(r);
  free(r->tmp);
  free(r->iarr);
  comm_unref(r->c);
  free(r);
}

static void orphan(ts_comm_req *r) {
  r->next = g_orphans;
  g_orphans = r;
}

/* One non-blocking step: tests the current stage and runs the stage hooks. */
static int req_progress(ts_comm_req *r, int *done) {
  *done = 0;
  if (r->err) {
    char sg[160];
    ts__sig_str(&r->sig, sg, sizeof sg);
    return ts_error_set(r->err, "%s: request failed earlier", sg);
  }
  if (r->c->q_head) {
    queue_progress(r->c);
    if (r->err) {
      char sg[160];
      ts__sig_str(&r->sig, sg, sizeof sg);
      return ts_error_set(r->err, "%s: %s", sg, ts_last_error());
    }
    if (r->queued) return TS_OK; /* stage 2 waits for an earlier request's stage 1 */
  }
  while (!r->done) {
    int flag = 0;
    int mrc = MPI_Test(&r->mr, &flag, &r->st);
    if (mrc != MPI_SUCCESS) {
      if (mrc == MPI_ERR_IN_STATUS) mrc = r->st.MPI_ERROR;
      r->err = ts__mpi_fail(r->c, &r->sig, mrc, "MPI_Test");
      return r->err;
    }
    if (!flag) return TS_OK;
    r->stage++;
    if (r->on_stage) {
      int rc = r->on_stage(r);
      if (rc) {
        r->err = rc;
        return rc;
      }
    } else {
      r->done = 1;
    }
  }
  *done = 1;
  return TS_OK;
}

static void pause_for(double waited) {
  if (waited < 100e-6) return; /* spin: the peer is usually about to arrive */
  if (waited < 5e-3) {
    sched_yield();
    return;
  }
  struct timespec ts = {0, waited < 1.0 ? 50000L : 1000000L};
  nanosleep(&ts, NULL);
}

/* Start of the last wait that timed out (for the watchdog's "heard during this wait"); per thread,
 * as the checkpoint writer waits on its own communicator from its own thread. */
static _Thread_local double g_wait_t0;

/* Polls until done or the timeout: returns TS_OK, an error, or 1 on timeout (no message). A wait
 * that lasts ts__watch_after() seconds announces this rank to the others once. */
static int req_wait_deadline(ts_comm_req *r, double timeout) {
  double t0 = ts_time_now();
  int announced = 0;
  g_wait_t0 = t0;
  for (;;) {
    int done = 0;
    int rc = req_progress(r, &done);
    if (rc) return rc;
    if (done) return TS_OK;
    double waited = ts_time_now() - t0;
    if (timeout > 0 && waited >= timeout) return 1;
    if (!announced && waited >= ts__watch_after()) {
      ts__watch_announce(r->c);
      announced = 1;
    }
    pause_for(waited);
  }
}

static int timeout_msg(ts_comm_req *r, const char *during) {
  char who[96], sg[160], why[512];
  ts__who(r->c, who, sizeof who);
  ts__sig_str(&r->sig, sg, sizeof sg);
  ts__watch_diagnose(r->c, &r->sig, g_wait_t0, why, sizeof why);
  if (why[0])
    return ts_error_set(TS_ECOMM, "%s: %s did not complete within %g s%s%s", who, sg, g_timeout, during, why);
  return ts_error_set(TS_ECOMM, "%s: %s did not complete within %g s%s (a peer may have died "
                      "or not have issued it)", who, sg, g_timeout, during);
}

static void mark_failed(ts_comm *c, const ts_coll_sig *s, const char *why) {
  if (c->failed) return;
  char sg[160];
  ts__sig_str(s, sg, sizeof sg);
  c->failed = 1;
  snprintf(c->failmsg, sizeof c->failmsg, "%s %s", sg, why);
}

int ts__req_finish_blocking(ts_comm_req *r) {
  if (r->native) { /* stage 1 completed in its MPI call; the local work and any later stage now */
    int rc = TS_OK;
    while (!rc && !r->done) {
      r->stage++;
      if (r->on_stage) rc = r->on_stage(r);
      else r->done = 1;
    }
    ts__req_release(r);
    return rc;
  }
  r->c->waiting = 1;
  int rc = req_wait_deadline(r, g_timeout);
  r->c->waiting = 0;
  if (rc == TS_OK || rc < 0) {
    if (rc < 0 && !r->done && r->mr != MPI_REQUEST_NULL) {
      orphan(r); /* still in flight after an error: MPI may use its buffers */
      return rc;
    }
    ts__req_release(r);
    return rc;
  }
  /* timeout */
  if (r->sig.kind == TS_COLL_RECV) {
    /* A receive can be cancelled; then the communicator stays usable. */
    MPI_Cancel(&r->mr);
    MPI_Wait(&r->mr, &r->st);
    int cancelled = 0;
    MPI_Test_cancelled(&r->st, &cancelled);
    if (!cancelled) { /* the message arrived meanwhile */
      r->stage++;
      rc = r->on_stage ? r->on_stage(r) : TS_OK;
      ts__req_release(r);
      return rc;
    }
    rc = timeout_msg(r, "");
    ts__req_release(r);
    return rc;
  }
  rc = timeout_msg(r, "");
  mark_failed(r->c, &r->sig, "timed out");
  orphan(r);
  return rc;
}

int ts_comm_test(ts_comm_req *req, int *done) {
  if (!req || !done) return ts_error_set(TS_EINVAL, "ts_comm_test: NULL argument");
  return req_progress(req, done);
}

int ts_comm_wait(ts_comm_req *req) {
  if (!req) return ts_error_set(TS_EINVAL, "ts_comm_wait: request is NULL");
  int rc = req_wait_deadline(req, g_timeout);
  if (rc == 1) return timeout_msg(req, " (ts_comm_wait; the request is still in flight)");
  return rc;
}

int ts_comm_wait_all(ts_comm_req **reqs, int n) {
  int first = TS_OK;
  char msg[1024] = "";
  for (int i = 0; i < n; i++) {
    if (!reqs || !reqs[i]) continue;
    int rc = ts_comm_wait(reqs[i]);
    if (rc && !first) {
      first = rc;
      snprintf(msg, sizeof msg, "%s", ts_last_error());
    }
  }
  if (first) ts_error_set(first, "%s", msg);
  return first;
}

void ts_comm_req_free(ts_comm_req *req) {
  if (!req) return;
  if (!req->done && req->mr != MPI_REQUEST_NULL) {
    mark_failed(req->c, &req->sig, "was freed while in flight");
    orphan(req);
    return;
  }
  ts__req_release(req);
}

/* ---- debug consistency check ---- */
static int sig_match(const ts_coll_sig *a, const ts_coll_sig *b) {
  if (a->kind != b->kind || a->op != b->op || a->dtype != b->dtype || a->root != b->root ||
      a->seq != b->seq || a->flags != b->flags)
    return 0;
  if (a->count >= 0 && b->count >= 0 && a->count != b->count) return 0;
  return 1;
}

/* Allgathers s over c (guarded by the timeout) and compares; TS_ECOMM naming the first rank that
 * differs from rank 0. Used for every collective when the debug check is on, and always for
 * communicator creation. */
static int check_sig(ts_comm *c, const ts_coll_sig *s) {
  ts_comm_req *r = ts__req_new(c, s);
  if (!r) return ts_error_set(TS_ENOMEM, "debug check: out of memory");
  ts_coll_sig *all = calloc((size_t)c->size, sizeof *all);
  if (!all) {
    ts__req_release(r);
    return ts_error_set(TS_ENOMEM, "debug check: out of memory");
  }
  r->tmp = all;
  r->sig.wrank = c->world_rank;
  /* send from the request's own copy: it outlives this call if the request is orphaned */
  int mrc = MPI_Iallgather(&r->sig, (int)sizeof *s, MPI_BYTE, all, (int)sizeof *s, MPI_BYTE, c->mc,
                           &r->mr);
  if (mrc != MPI_SUCCESS) {
    ts__req_release(r);
    return ts__mpi_fail(c, s, mrc, "MPI_Iallgather (consistency check)");
  }
  int rc = req_wait_deadline(r, g_timeout);
  if (rc == 1) {
    rc = timeout_msg(r, " (in the consistency check before it)");
    mark_failed(c, s, "timed out in the consistency check");
    orphan(r);
    return rc;
  }
  if (rc) {
    if (!r->done) orphan(r);
    else ts__req_release(r);
    return rc;
  }
  for (int i = 1; i < c->size; i++) {
    if (sig_match(&all[0], &all[i])) continue;
    char a[128], b[128];
    int how = all[0].flags != all[i].flags; /* MPI matches no blocking call with a non-blocking one */
    sig_short(&all[0], how, a, sizeof a);
    sig_short(&all[i], how, b, sizeof b);
    /* ranks named by their world rank */
    if (all[0].seq == all[i].seq)
      rc = ts_error_set(TS_ECOMM, "collective #%llu: rank %d issued %s, rank %d issued %s",
                        (unsigned long long)all[0].seq, (int)all[0].wrank, a, (int)all[i].wrank, b);
    else
      rc = ts_error_set(TS_ECOMM,
                        "collectives out of step: rank %d issued #%llu %s, rank %d issued #%llu %s",
                        (int)all[0].wrank, (unsigned long long)all[0].seq, a, (int)all[i].wrank,
                        (unsigned long long)all[i].seq, b);
    break;
  }
  ts__req_release(r);
  return rc;
}

int ts__coll_begin(ts_comm *c, ts_coll_sig *s) {
  int rc = ts__comm_usable(c, s);
  if (rc) return rc;
  s->seq = c->seq;
  c->last = *s;
  if (g_check) {
    rc = check_sig(c, s);
    c->seq++;
    return rc;
  }
  c->seq++;
  return TS_OK;
}

/* ---- communicator creation ---- */
static uint64_t hash_ints(uint64_t h, const int *v, int n) {
  for (int i = 0; i < n; i++) {
    h ^= (uint64_t)(uint32_t)v[i];
    h *= 1099511628211ULL;
  }
  return h;
}

/* Guard (all ranks arrive, with the same arguments where `args` >= 0), then MPI_Comm_split. */
static int create(ts_comm *c, int kind, int64_t args, int color, int key, ts_comm **out) {
  ts_coll_sig s;
  memset(&s, 0, sizeof s);
  s.kind = kind;
  s.count = args;
  s.shown = -1;
  s.op = s.dtype = s.root = -1;
  int rc = ts__comm_usable(c, &s);
  if (rc) return rc;
  s.seq = c->seq++;
  c->last = s;
  rc = check_sig(c, &s);
  if (rc) {
    if (!c->failed) {
      char who[96];
      ts__who(c, who, sizeof who);
      ts_error_wrap(rc, "%s: %s: ranks passed different arguments", who, ts__coll_name(kind));
    }
    return rc;
  }
  MPI_Comm nc = MPI_COMM_NULL;
  int mrc = MPI_Comm_split(c->mc, color < 0 ? MPI_UNDEFINED : color, key, &nc);
  if (mrc != MPI_SUCCESS) return ts__mpi_fail(c, &s, mrc, "MPI_Comm_split");
  if (nc == MPI_COMM_NULL) return TS_OK;
  MPI_Comm_set_errhandler(nc, MPI_ERRORS_RETURN);
  ts_comm *w = comm_wrap(nc, 0);
  if (!w) {
    MPI_Comm_free(&nc);
    return ts_error_set(TS_ENOMEM, "%s: out of memory", ts__coll_name(kind));
  }
  w->native = c->native; /* a communicator made from c waits as c does */
  *out = w;
  return TS_OK;
}

int ts_comm_dup(ts_comm *c, ts_comm **out) {
  if (!out) return ts_error_set(TS_EINVAL, "comm_dup: out is NULL");
  *out = NULL;
  if (!c) return ts_error_set(TS_EINVAL, "comm_dup: communicator is NULL");
  return create(c, TS_COLL_DUP, 0, 0, c->rank, out);
}

int ts_comm_split(ts_comm *c, int color, int key, ts_comm **out) {
  if (!out) return ts_error_set(TS_EINVAL, "comm_split: out is NULL");
  *out = NULL;
  if (!c) return ts_error_set(TS_EINVAL, "comm_split: communicator is NULL");
  return create(c, TS_COLL_SPLIT, -1, color, key, out);
}

int ts_comm_group(ts_comm *c, const int *ranks, int n, ts_comm **out) {
  if (!out) return ts_error_set(TS_EINVAL, "comm_group: out is NULL");
  *out = NULL;
  if (!c) return ts_error_set(TS_EINVAL, "comm_group: communicator is NULL");
  if (n <= 0 || !ranks)
    return ts_error_set(TS_EINVAL, "comm_group: empty rank list (n = %d)", n);
  int pos = -1;
  for (int i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= c->size)
      return ts_error_set(TS_EINVAL, "comm_group: ranks[%d] = %d is not a rank of a communicator of %d",
                          i, ranks[i], c->size);
    for (int j = 0; j < i; j++)
      if (ranks[j] == ranks[i])
        return ts_error_set(TS_EINVAL, "comm_group: rank %d is listed twice (ranks[%d] and ranks[%d])",
                            ranks[i], j, i);
    if (ranks[i] == c->rank) pos = i;
  }
  uint64_t h = hash_ints(1469598103934665603ULL, &n, 1);
  h = hash_ints(h, ranks, n);
  return create(c, TS_COLL_GROUP, (int64_t)(h >> 1), pos >= 0 ? 0 : -1, pos, out);
}

int ts_comm_grid_coords(int rank, int ndim, const int *dims, int *coords) {
  if (ndim <= 0 || ndim > TS_MAX_DIMS || !dims || !coords)
    return ts_error_set(TS_EINVAL, "grid: ndim = %d (expected 1..%d)", ndim, TS_MAX_DIMS);
  int64_t total = 1;
  for (int k = 0; k < ndim; k++) {
    if (dims[k] <= 0) return ts_error_set(TS_EINVAL, "grid: dims[%d] = %d must be positive", k, dims[k]);
    total *= dims[k];
    if (total > INT_MAX) return ts_error_set(TS_ERANGE, "grid: too many devices");
  }
  if (rank < 0 || rank >= total)
    return ts_error_set(TS_EINVAL, "grid: rank %d outside a grid of %lld devices", rank, (long long)total);
  for (int k = ndim - 1; k >= 0; k--) {
    coords[k] = rank % dims[k];
    rank /= dims[k];
  }
  return TS_OK;
}

int ts_comm_grid_axis(ts_comm *c, int ndim, const int *dims, int axis, ts_comm **out) {
  if (!out) return ts_error_set(TS_EINVAL, "comm_grid_axis: out is NULL");
  *out = NULL;
  if (!c) return ts_error_set(TS_EINVAL, "comm_grid_axis: communicator is NULL");
  if (ndim <= 0 || ndim > TS_MAX_DIMS || !dims)
    return ts_error_set(TS_EINVAL, "comm_grid_axis: ndim = %d (expected 1..%d)", ndim, TS_MAX_DIMS);
  int64_t total = 1;
  char shape[128];
  size_t len = 0;
  shape[0] = 0;
  for (int k = 0; k < ndim; k++) {
    if (dims[k] <= 0)
      return ts_error_set(TS_EINVAL, "comm_grid_axis: dims[%d] = %d must be positive", k, dims[k]);
    total *= dims[k];
    if (total > INT_MAX) return ts_error_set(TS_ERANGE, "comm_grid_axis: grid too large");
    ts__app(shape, sizeof shape, &len, "%s%d", k ? "x" : "", dims[k]);
  }
  if (total != c->size)
    return ts_error_set(TS_EINVAL, "comm_grid_axis: grid %s has %lld devices but the communicator has %d ranks",
                        shape, (long long)total, c->size);
  if (axis < 0 || axis >= ndim)
    return ts_error_set(TS_EINVAL, "comm_grid_axis: axis %d outside grid %s", axis, shape);
  int coords[TS_MAX_DIMS];
  int rc = ts_comm_grid_coords(c->rank, ndim, dims, coords);
  if (rc) return rc;
  int stride = 1;
  for (int k = ndim - 1; k > axis; k--) stride *= dims[k];
  int color = c->rank - coords[axis] * stride; /* the rank with coordinate 0 on axis */
  uint64_t h = hash_ints(1469598103934665603ULL, &ndim, 1);
  h = hash_ints(h, dims, ndim);
  h = hash_ints(h, &axis, 1);
  return create(c, TS_COLL_GRID_AXIS, (int64_t)(h >> 1), color, coords[axis], out);
}

void ts_comm_free(ts_comm *c) {
  if (!c || c->is_world) return;
  /* buffered sends: completed ones are freed; copies still in flight stay with MPI (leaked) */
  if (c->bs_n && c->mc != MPI_COMM_NULL && ts_comm_flush_sends(c) != TS_OK) {
    for (int k = 0; k < c->bs_n; k++) ts_comm_req_free(c->bs_req[k]);
    c->bs_n = 0;
  }
  free(c->bs_req);
  free(c->bs_buf);
  free(c->bs_bytes);
  c->bs_req = NULL;
  c->bs_buf = NULL;
  c->bs_bytes = NULL;
  if (c->mc != MPI_COMM_NULL) {
    int fin = 0;
    MPI_Finalized(&fin);
    watch_free(c); /* its sends use mc */
    if (!fin) {
      if (c->mc2 != MPI_COMM_NULL) MPI_Comm_free(&c->mc2);
      MPI_Comm_free(&c->mc);
    }
    c->mc = MPI_COMM_NULL;
    c->mc2 = MPI_COMM_NULL;
  }
  comm_unref(c);
}
