/* The watchdog of native blocking calls (src/comm/watchdog.c).
 *
 * Without arguments (ctest: test_watchdog as the 1-rank singleton, test_watchdog_np2/np4 under
 * mpirun), the thread's life in a job that runs normally:
 *   - no thread while nothing has a deadline (timeout 0), nor on one rank (nobody to wait for);
 *   - then exactly one thread for the process, however many native calls;
 *   - it sleeps: its CPU time over 2000 native calls, and over a native call that waits 1.5 s
 *     for a late rank, stays under a few milliseconds (a busy thread would take the wait's 1.5 s);
 *   - the late call completes with the right result; ts_comm_finalize stops the thread.
 *
 * With --stuck MODE (tests/comm/watchdog_test.sh runs these under mpirun and expects the job to
 * end with exit 75 and the watchdog's message within a bounded time), one rank never reaches a
 * native all-reduce that the others wait in under a 2 s timeout:
 *   sleep     rank 1 sleeps (outside MPI);
 *   stop      rank 1 stops itself with SIGSTOP;
 *   group     4 ranks, the odd ones' communicator: rank 3 sleeps, rank 1 waits (group ranks named);
 *   funneled  as sleep, but the program initialises MPI at MPI_THREAD_FUNNELED itself: the watchdog
 *             cannot ask the others, and says what it knows.
 *
 * With --abort MODE (watchdog_test.sh too), ranks end the job with ts_comm_abort_all(5, 20 s; one: 3 s):
 *   all  every rank fails, rank r after r x 0.7 s, prints "rank r failed" and calls it: every
 *        rank's line must be out before the job ends (ts_comm_abort would cut the later ones off);
 *   one  only rank 1 fails; the others wait in an all-reduce: the job still ends, exit 5. */
#define _GNU_SOURCE
#include <dirent.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_impl.h"
#include "tessera/comm.h"
#include "test_util.h"

static int R, P;
static ts_comm *W;

static int count_tasks(int *has_tid, int tid) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  if (has_tid) *has_tid = 0;
  if (!d) return -1;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    n++;
    if (has_tid && tid && atoi(e->d_name) == tid) *has_tid = 1;
  }
  closedir(d);
  return n;
}

static void normal_run(void) {
  ts_comm *c = NULL;
  CHECK_OK(ts_comm_dup(W, &c));
  if (!c) return;
  CHECK_OK(ts_comm_set_blocking(c, TS_COMM_BLOCKING_NATIVE));
  float v[64];
  for (int i = 0; i < 64; i++) v[i] = (float)(R + i);

  /* no deadline: no thread */
  ts_comm_set_timeout(0);
  for (int k = 0; k < 10; k++) CHECK_OK(ts_comm_allreduce(c, v, v, 64, TS_F32, TS_REDUCE_MAX));
  CHECK_MSG(ts__watchdog_tid() == 0, "rank %d: a watchdog thread started for calls without a deadline", R);

  ts_comm_set_timeout(30);
  int before = count_tasks(NULL, 0);
  double t0 = ts_time_now();
  for (int k = 0; k < 2000; k++) CHECK_OK(ts_comm_allreduce(c, v, v, 64, TS_F32, TS_REDUCE_MAX));
  double dt = ts_time_now() - t0;
  int tid = ts__watchdog_tid(), seen = 0;
  int after = count_tasks(&seen, tid);
  if (P == 1) {
    CHECK_MSG(tid == 0, "a watchdog thread started on a single rank");
    CHECK(after == before);
  } else {
    CHECK_MSG(tid > 0 && seen, "rank %d: no watchdog thread (tid %d) in /proc/self/task", R, tid);
    CHECK_MSG(after == before + 1, "rank %d: %d threads before 2000 native calls, %d after (one watchdog expected)", R,
              before, after);
    double cpu = ts__watchdog_cpu_seconds();
    CHECK_MSG(cpu >= 0 && cpu < 0.02, "rank %d: the watchdog used %.4f s of CPU over 2000 calls (%.3f s)", R, cpu, dt);

    /* a call that waits 1.5 s for a late rank: the watchdog sleeps through it */
    float x[1000], want = 0;
    for (int r = 0; r < P; r++) want += (float)(r + 1);
    for (int i = 0; i < 1000; i++) x[i] = (float)(R + 1);
    double c0 = ts__watchdog_cpu_seconds();
    CHECK_OK(ts_comm_barrier(c));
    if (R == 0) usleep(1500000);
    t0 = ts_time_now();
    CHECK_OK(ts_comm_allreduce(c, x, x, 1000, TS_F32, TS_REDUCE_SUM));
    dt = ts_time_now() - t0;
    double c1 = ts__watchdog_cpu_seconds();
    CHECK_MSG(x[0] == want && x[999] == want, "rank %d: %g, want %g", R, (double)x[0], (double)want);
    if (R != 0) CHECK_MSG(dt > 1.2, "rank %d: the late call took %.3f s", R, dt);
    CHECK_MSG(c1 - c0 < 0.01, "rank %d: the watchdog used %.4f s of CPU during a %.2f s wait", R, c1 - c0, dt);
    CHECK_MSG(count_tasks(NULL, 0) == after, "rank %d: a thread more after the late call", R);
    if (R == 1)
      printf("watchdog: 1 thread; CPU %.2f ms over 2000 native calls, %.2f ms over rank 1's %.2f s wait\n", cpu * 1e3,
             (c1 - c0) * 1e3, dt);
  }
  ts_comm_set_timeout(300);
  ts_comm_free(c);
}

/* One rank never reaches a native all-reduce the others wait in (2 s): the job must end. */
static void stuck(const char *mode) {
  ts_comm *c = NULL;
  int group = !strcmp(mode, "group");
  if (group) CHECK_OK(ts_comm_split(W, R % 2, R, &c));
  else CHECK_OK(ts_comm_dup(W, &c));
  if (!c) exit(1);
  CHECK_OK(ts_comm_set_blocking(c, TS_COMM_BLOCKING_NATIVE));
  ts_comm_set_timeout(2);
  float x[1000];
  for (int i = 0; i < 1000; i++) x[i] = 1;
  CHECK_OK(ts_comm_allreduce(c, x, x, 1000, TS_F32, TS_REDUCE_SUM)); /* #0: every rank */
  int late = group ? 3 : 1;
  if (group && R % 2 == 0) { /* not in the stuck group: out of MPI until the job is ended */
    sleep(60);
  } else if (R == late) {
    if (!strcmp(mode, "stop")) raise(SIGSTOP);
    sleep(60);
  } else {
    ts_comm_allreduce(c, x, x, 1000, TS_F32, TS_REDUCE_SUM); /* #1: does not return */
    fprintf(stderr, "rank %d: the native all-reduce returned: %s\n", R, ts_last_error());
  }
  exit(1); /* the watchdog should have ended the job */
}

/* Ranks fail and end the job with ts_comm_abort_all (see the top). */
static void abort_all(const char *mode) {
  if (!strcmp(mode, "one") && R != 1) {
    float x = 1;
    ts_comm_allreduce(W, &x, &x, 1, TS_F32, TS_REDUCE_SUM); /* does not return: rank 1 never comes */
    exit(1);
  }
  usleep(700000u * (unsigned)R);
  fprintf(stderr, "rank %d failed\n", R);
  fflush(stderr);
  ts_comm_abort_all(5, strcmp(mode, "one") ? 20.0 : 3.0);
  exit(1);
}

int main(int argc, char **argv) {
  const char *mode = argc > 2 && !strcmp(argv[1], "--stuck") ? argv[2] : NULL;
  const char *abort_mode = argc > 2 && !strcmp(argv[1], "--abort") ? argv[2] : NULL;
  if (mode && !strcmp(mode, "funneled")) { /* the application initialises MPI, at FUNNELED */
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  }
  CHECK_OK(ts_comm_init(&argc, &argv));
  CHECK_OK(ts_comm_world(&W));
  if (!W) return 1;
  R = ts_comm_rank(W);
  P = ts_comm_size(W);
  if (mode) {
    if (P < 2 || (!strcmp(mode, "group") && P != 4)) {
      fprintf(stderr, "test_watchdog --stuck %s: needs 2 ranks (group: 4)\n", mode);
      return 2;
    }
    stuck(mode);
  }
  if (abort_mode) abort_all(abort_mode);
  normal_run();
  int started = ts__watchdog_tid() != 0;
  CHECK_OK(ts_comm_finalize());
  CHECK_MSG(ts__watchdog_tid() == 0, "the watchdog thread outlived ts_comm_finalize");
  CHECK(count_tasks(NULL, 0) >= 1);
  char name[64];
  snprintf(name, sizeof name, "test_watchdog (rank %d of %d%s)", R, P, started ? ", thread stopped" : "");
  return ts_test_finish(name);
}
