/* checkpoint.async: saves written by a background thread while training goes on
 * (docs/checkpoints.md, "Asynchronous saves").
 *
 * At a save point the main thread first waits for the previous background save and agrees on its
 * status with the other ranks (one small allreduce over the world: a failed write is an error
 * here on every rank, naming the file); then it takes this save's snapshot:
 *   - sliced: phase 1 of the save (ts__sliced_begin: the staging directory, the id, the pieces'
 *     hashes, rank 0's manifest skeleton; collective over the world, on the main thread, like
 *     every other collective of the step), and the pieces this rank writes copied into a host
 *     buffer kept between saves;
 *   - whole: the whole model gathered as the synchronous save gathers it (collective), copied on
 *     rank 0 into a snapshot kept between saves (ts_ckpt_snapshot).
 * and starts the writer thread, which runs phases 2 and 3 (the rank file with its SHA-256, fsync
 * and rename; the records to rank 0 and rank 0's manifest, written last, and commit) or writes the
 * whole file, then on rank 0 writes the `latest` pointer and removes the checkpoints beyond keep_max. Phase 3's collectives run on
 * the writer's own communicator, a duplicate of the world made by the first save (collectively,
 * on the main thread), polled rather than native so that they never share the watchdog's one slot
 * with the main thread's native calls: no collective of the writer is ever on a communicator
 * training uses. MPI allows this at MPI_THREAD_MULTIPLE, which ts_comm_init requests (OpenMPI and
 * MPICH provide it); a job where the duplicate is forced native (TESSERA_COMM_BLOCKING=native)
 * saves synchronously, with a warning. */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/checkpoint.h"
#include "train_impl.h"

struct ts__ckpt_async {
  pthread_t th;
  int running;          /* a writer was started and not joined */
  int used;             /* a save was handed over since the last wait (for the message) */
  int sync_only;        /* the writer cannot have its own polled communicator: save in the caller */
  ts_comm *comm;        /* the writer's duplicate of the world (NULL: one process) */
  int sliced;
  ts__sliced_job job;
  unsigned char *buf;   /* the sliced pieces' snapshot (kept between saves) */
  size_t cap;
  ts_ckpt_snapshot *snap; /* the whole model's snapshot (rank 0; kept between saves) */
  char path[2200];
  char dir[4096], prefix[256];
  int keep_max, rank;
  int series;           /* a save of checkpoint.dir's series: `latest` and keep_max after it */
  int rc;               /* the writer's status */
  char msg[1200];
  double t0, t1;        /* the writer's start and end */
};

static void *writer(void *arg) {
  struct ts__ckpt_async *a = arg;
  a->t0 = ts_time_now();
  int rc = a->sliced ? ts__sliced_finish(&a->job, a->comm) : a->rank == 0 ? ts_ckpt_snapshot_save(a->snap, a->path) : TS_OK;
  if (!rc && a->rank == 0 && a->series) { /* the `latest` pointer, then keep_max */
    int r = ts_ckpt_series_saved(a->dir, a->prefix, a->path, a->keep_max);
    if (r < 0) rc = r;
  }
  if (rc) snprintf(a->msg, sizeof a->msg, "%s", ts_last_error());
  if (a->sliced) ts__sliced_job_free(&a->job);
  a->rc = rc;
  a->t1 = ts_time_now();
  return NULL;
}

int ts__ckpt_async_wait(ts_trainer *t, int agree) {
  struct ts__ckpt_async *a = t->async;
  if (!a) return TS_OK;
  if (a->running) {
    pthread_join(a->th, NULL);
    a->running = 0;
  }
  int local = a->rc, used = a->used;
  char msg[1200];
  snprintf(msg, sizeof msg, "%s", a->msg);
  a->rc = TS_OK;
  a->msg[0] = 0;
  a->used = 0;
  if (!agree) {
    if (local) ts_log(TS_LOG_ERROR, "checkpoint %s: the background write failed: %s", a->path, msg);
    return local ? ts_error_set(local, "%s", msg) : TS_OK;
  }
  ts_comm *w = ts_dist_world(t->dist);
  int32_t bad = local ? (int32_t)a->rank : INT32_MAX;
  if (w) {
    int crc = ts_comm_allreduce(w, &bad, &bad, 1, TS_I32, TS_REDUCE_MIN);
    if (crc) return ts_error_wrap(crc, "checkpoint %s: agreeing on the background write", a->path);
  }
  if (local) return ts_error_set(local, "%s", msg);
  if (bad != INT32_MAX)
    return ts_error_set(TS_EIO, "checkpoint %s: the background write failed on rank %d (its message names the file)",
                        a->path, (int)bad);
  if (used && a->rank == 0)
    ts__progress_message(&t->prog, "checkpoint %s (written in the background in %.2f s)", a->path, a->t1 - a->t0);
  return TS_OK;
}

void ts__ckpt_async_free(ts_trainer *t) {
  struct ts__ckpt_async *a = t->async;
  if (!a) return;
  ts__ckpt_async_wait(t, 0);
  ts__sliced_job_free(&a->job);
  ts_ckpt_snapshot_free(a->snap);
  free(a->buf);
  ts_comm_free(a->comm);
  free(a);
  t->async = NULL;
}

/* The writer's state, made by the first save (collective: the communicator's duplicate). */
static int setup(ts_trainer *t) {
  if (t->async) return TS_OK;
  struct ts__ckpt_async *a = calloc(1, sizeof *a);
  if (!a) return ts_error_set(TS_ENOMEM, "checkpoint.async: out of memory");
  t->async = a;
  ts_comm *w = ts_dist_world(t->dist);
  a->rank = w ? ts_comm_rank(w) : 0;
  if (w) {
    int rc = ts_comm_dup(w, &a->comm);
    if (!rc) rc = ts_comm_set_blocking(a->comm, TS_COMM_BLOCKING_POLLED);
    if (rc) return ts_error_wrap(rc, "checkpoint.async: the writer's communicator");
    if (ts_comm_get_blocking(a->comm) != TS_COMM_BLOCKING_POLLED) {
      a->sync_only = 1;
      if (a->rank == 0)
        ts_log(TS_LOG_WARN, "checkpoint.async: the writer's collectives would be native blocking calls "
               "(TESSERA_COMM_BLOCKING=native), which the watchdog follows one at a time: saving synchronously");
    }
  }
  return TS_OK;
}

int ts_trainer_save_async(ts_trainer *t, const char *path, int sliced) {
  if (!t || !path || !*path) return ts_error_set(TS_EINVAL, "ts_trainer_save_async: NULL argument");
  int rc = ts_dist_sync_states(t->dist);
  return rc ? rc : ts__ckpt_async_save(t, path, sliced, 0);
}

int ts_trainer_save_wait(ts_trainer *t) { return t ? ts__ckpt_async_wait(t, 1) : TS_OK; }

int ts__ckpt_async_save(ts_trainer *t, const char *path, int sliced, int rotate) {
  int rc = ts__ckpt_async_wait(t, 1); /* the previous save first: its status on every rank */
  if (rc) return rc;
  if ((rc = setup(t))) return rc;
  struct ts__ckpt_async *a = t->async;
  const ts_config *c = &t->cfg;
  snprintf(a->path, sizeof a->path, "%s", path);
  snprintf(a->dir, sizeof a->dir, "%s", c->checkpoint.dir);
  snprintf(a->prefix, sizeof a->prefix, "%s", c->checkpoint.prefix);
  a->keep_max = rotate ? c->checkpoint.keep_max : 0;
  a->series = rotate;
  a->sliced = sliced;
  if (sliced) {
    if ((rc = ts__sliced_begin(t, path, &a->job))) return rc; /* the job's communication failed */
    size_t need = ts__sliced_job_bytes(&a->job);
    if (need > a->cap) {
      unsigned char *b = realloc(a->buf, need);
      if (b) {
        a->buf = b;
        a->cap = need;
      } else if (!a->job.rc) { /* reported through phase 3 like any failure of this rank */
        a->job.rc = ts_error_set(TS_ENOMEM, "checkpoint %s: out of memory for the snapshot (%zu bytes)", path, need);
        snprintf(a->job.msg, sizeof a->job.msg, "%s", ts_last_error());
      }
    }
    if (!a->job.rc) ts__sliced_job_snapshot(&a->job, a->buf);
  } else {
    /* a failed gather or copy fails this save now, on the main thread; every rank returns the
     * same (the gather is collective, the copy is rank 0's: agreed below) */
    rc = ts__trainer_whole_snapshot(t, &a->snap);
    ts_comm *w = ts_dist_world(t->dist);
    int32_t bad = rc ? (int32_t)a->rank : INT32_MAX;
    char keep[1200];
    snprintf(keep, sizeof keep, "%s", rc ? ts_last_error() : "");
    if (w) {
      int crc = ts_comm_allreduce(w, &bad, &bad, 1, TS_I32, TS_REDUCE_MIN);
      if (crc) return ts_error_wrap(crc, "checkpoint %s", path);
    }
    if (rc) return ts_error_set(rc, "%s", keep);
    if (bad != INT32_MAX) return ts_error_set(TS_EIO, "checkpoint %s: rank %d could not take its snapshot", path, (int)bad);
  }
  a->used = 1;
  if (a->sync_only || pthread_create(&a->th, NULL, writer, a) != 0) {
    writer(a); /* in this thread: the same result, reported at the same point, only not overlapped */
    return TS_OK;
  }
  a->running = 1;
  return TS_OK;
}
