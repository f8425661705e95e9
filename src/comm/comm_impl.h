/* Internals shared by comm.c (communicators, requests, progress, the polled timeout and its
 * announcements, debug check), coll.c (the collectives) and watchdog.c (the thread that keeps the
 * timeout of native blocking calls). */
#ifndef TS_COMM_IMPL_H
#define TS_COMM_IMPL_H

#include <mpi.h>

#include "tessera/comm.h"

typedef enum {
  TS_COLL_ALLREDUCE = 0,
  TS_COLL_ALLGATHER,
  TS_COLL_ALLGATHERV,
  TS_COLL_REDUCE_SCATTER,
  TS_COLL_REDUCE_SCATTER_BLOCK,
  TS_COLL_BROADCAST,
  TS_COLL_ALLTOALL,
  TS_COLL_ALLTOALLV,
  TS_COLL_BARRIER,
  TS_COLL_SEND,
  TS_COLL_RECV,
  TS_COLL_DUP,
  TS_COLL_SPLIT,
  TS_COLL_GROUP,
  TS_COLL_GRID_AXIS,
  TS_COLL_KIND_COUNT
} ts_coll_kind;

/* What one collective call is: exchanged byte-for-byte by the debug check, so fixed-size fields
 * and no padding. count < 0: not compared across ranks (alltoallv, split). */
typedef struct {
  uint64_t seq;
  int64_t count; /* elements shown in messages and compared (see ts__sig) */
  int64_t shown; /* elements shown in messages when count is not compared */
  int32_t kind;
  int32_t op;    /* ts_reduce_op, or -1 */
  int32_t dtype; /* ts_dtype, or -1 */
  int32_t root;  /* broadcast root / peer of send/recv, or -1 */
  int32_t wrank; /* world rank of the issuer (not compared) */
  int32_t flags; /* TS__SIG_NATIVE: issued as MPI's blocking call (compared: MPI does not match a
                    blocking collective with a non-blocking one) */
} ts_coll_sig;
#define TS__SIG_NATIVE 1

struct ts_comm {
  MPI_Comm mc;       /* MPI_COMM_NULL once freed */
  int rank, size, world_rank, world_size;
  int is_world;
  int world_like;    /* same ranks in the same order as the world (the world or a dup) */
  int refs;          /* the user's handle + outstanding requests */
  int failed;
  uint64_t seq;      /* sequence number of the next collective */
  ts_coll_sig last;  /* the last collective issued (for messages) */
  int waiting;       /* a blocking call on c is waiting for `last` */
  int native;        /* ts_comm_set_blocking: blocking calls are MPI's blocking calls (see
                        ts__comm_native for the mode in force) */
  char failmsg[256];
  /* Two-stage requests (bf16/f16 allreduce): stage 2 is issued when stage 1 completes, which
   * happens at different moments on different ranks. MPI needs collectives issued in the same
   * order everywhere, so stage 2 goes on its own communicator (mc2, a dup made at the first
   * such request) and in issue order: the queue holds the requests whose stage 2 is not yet
   * issued, oldest first; progress on any request first advances the queue from its head. */
  MPI_Comm mc2;
  struct ts_comm_req *q_head, *q_tail;
  /* Watchdog (who never reached a collective that timed out): a rank whose wait has lasted a
   * while tells the others, on mcw (= mc, tag ts__watch_tag()), the last collective it issued
   * on c (non-blocking sends of 16 bytes; nothing is sent while collectives complete promptly);
   * a rank that times out collects these for a short grace and names the ranks it did not hear
   * from. peer_seq[i]: the highest sequence number rank i announced, -1 none; peer_t[i]: when. */
  MPI_Comm mcw;
  int64_t *peer_seq;
  double *peer_t;
  struct ts_watch_buf *wb; /* the announcement and its send requests */
  /* Buffered sends (ts_comm_send_copy): requests and the copies they own. */
  struct ts_comm_req **bs_req;
  void **bs_buf;
  size_t *bs_bytes;
  int bs_n, bs_cap;
};

struct ts_comm_req;
/* Called when the MPI request of the current stage has completed: finishes the stage's local
 * work and either issues the next stage (setting r->mr) or sets r->done. */
typedef int (*ts_req_stage_fn)(struct ts_comm_req *r);

struct ts_comm_req {
  ts_comm *c;
  ts_coll_sig sig;
  MPI_Request mr;
  MPI_Status st;
  int stage;
  int done;
  int native;             /* issued by a blocking call on a native communicator: every stage is
                             MPI's blocking call under the watchdog, complete on return */
  int err;                /* sticky failure status */
  ts_req_stage_fn on_stage; /* NULL: one stage, nothing to do */
  /* operation data */
  ts_dtype dtype;
  ts_reduce_op op;
  const void *send;
  void *recv;
  size_t n_local;         /* elements of recv this rank owns after the reduction */
  size_t off_local;       /* their offset in recv (bf16/f16 allreduce) */
  size_t move_to;         /* in-place f32/i32/i64 reduce-scatter: MPI leaves the rank's block at the
                             start of the buffer; moved to this element offset (its own place) */
  void *tmp;              /* library-owned staging buffer */
  int *iarr;              /* counts/displacements passed to MPI (must outlive the request) */
  struct ts_comm_req *next; /* orphan list */
  struct ts_comm_req *qnext; /* c's stage-2 queue */
  int queued;               /* in c's stage-2 queue (stage 1 issued, stage 2 not yet) */
  int s1_done;              /* queued and its stage-1 MPI request has completed */
};

/* Message helpers: "allreduce(sum) #12 (f32 x 1000)". */
const char *ts__coll_name(int kind);
void ts__sig_str(const ts_coll_sig *s, char *buf, size_t cap);
/* "rank 3" or "rank 3 (1 of 2 in its group)". */
void ts__who(const ts_comm *c, char *buf, size_t cap);
/* Sets a TS_ECOMM message for an MPI failure of call `fn` in collective s; returns TS_ECOMM. */
int ts__mpi_fail(ts_comm *c, const ts_coll_sig *s, int mpirc, const char *fn);
/* TS_EINVAL with the collective named. */
int ts__arg_fail(ts_comm *c, int code, const ts_coll_sig *s, const char *what);

/* Checks c is usable (not NULL, not freed, not failed); TS_ECOMM/TS_EINVAL otherwise. */
int ts__comm_usable(ts_comm *c, const ts_coll_sig *s);
/* Debug consistency check (if on) and sequence numbering: call before issuing a collective. */
int ts__coll_begin(ts_comm *c, ts_coll_sig *s);

/* Requests. */
ts_comm_req *ts__req_new(ts_comm *c, const ts_coll_sig *s);
void ts__req_release(ts_comm_req *r); /* frees memory of a request that is not in flight */
/* Blocking completion of a request issued by a blocking call; frees it in every case (a timed
 * out request is handed to the orphan list and c marked failed). */
int ts__req_finish_blocking(ts_comm_req *r);

/* Makes c->mc2 if needed (collective over c: call at the same point of the collective sequence
 * on every rank, before issuing the request's stage 1). */
int ts__comm_stage2_ready(ts_comm *c, const ts_coll_sig *s);
/* Appends r, whose stage 1 has just been issued, to its communicator's stage-2 queue. */
void ts__req_enqueue_stage2(ts_comm_req *r);

MPI_Datatype ts__mpi_dtype(ts_dtype dt);

/* ---- native blocking calls (ts_comm_set_blocking) ---- */
/* 1 when blocking calls on c are MPI's blocking calls (its mode, or TESSERA_COMM_BLOCKING). */
int ts__comm_native(const ts_comm *c);
/* Around every MPI blocking call of a native request: arm starts the deadline of collective s on
 * c (the watchdog thread, started by the first call that has a deadline: timeout > 0 and c of
 * two ranks or more); disarm ends it. A call that outlives the timeout never returns: the
 * watchdog writes the one-line message through the logging hook and ends the job with MPI_Abort
 * (TS_COMM_EXIT_TIMEOUT). arm fails (TS_ECOMM, nothing issued) only if the thread cannot start. */
int ts__watchdog_arm(ts_comm *c, const ts_coll_sig *s);
void ts__watchdog_disarm(ts_comm *c);
/* Stops the thread (ts_comm_finalize). */
void ts__watchdog_stop(void);
/* For tests: the watchdog thread's kernel thread id (0: not started) and its CPU seconds. */
int ts__watchdog_tid(void);
double ts__watchdog_cpu_seconds(void);

/* The thread level MPI provides (MPI_THREAD_*); the watchdog calls MPI (the announcements and the
 * diagnosis below) only at MPI_THREAD_MULTIPLE, while the main thread is inside a blocking call. */
int ts__mpi_thread_level(void);
/* The timeout's announcements (comm.c): after watch_after() seconds of waiting a rank tells the
 * others of c the last collective it issued on c; a rank that times out listens for a grace and
 * writes into buf which ranks never reached collective s (the wait began at t0); "" when it cannot
 * tell. Not thread-safe: the caller holds c (the main thread, or the watchdog while the main
 * thread is blocked in a native call on c). */
double ts__watch_after(void);
void ts__watch_announce(ts_comm *c);
void ts__watch_diagnose(ts_comm *c, const ts_coll_sig *s, double t0, char *buf, size_t cap);
/* The tag of the watchdog's messages: MPI's highest; user send/recv tags stay below it. */
int ts__watch_tag(void);

/* The host of world rank r when the job spans several hosts (set by the first topology made over
 * every world rank, topo.c), else NULL: the timeout's messages then name it. */
const char *ts__world_host_name(int world_rank);
/* Forgets them (ts_comm_finalize). */
void ts__world_hosts_free(void);

#endif
