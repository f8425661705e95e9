/* The watchdog of native blocking calls (comm_impl.h; docs/comm.md, "Native blocking calls and
 * the timeout contract").
 *
 * A native call (MPI_Allreduce, ...) cannot be interrupted, so its deadline is kept by one thread
 * per process, started by the first native call that has a deadline. The thread sleeps on a
 * condition variable (CLOCK_MONOTONIC) and wakes only at the moments it has something to do:
 *   - when a call has waited ts__watch_after() seconds (min(1 s, timeout/4)), it announces this
 *     rank to the others of the communicator (the polled path's 16-byte messages, comm.c), so
 *     that a peer which times out can tell this rank reached the collective;
 *   - when a call outlives the timeout, it listens for the others' announcements for a grace,
 *     names the ranks it did not hear from, writes the one-line message through the logging hook
 *     and ends the job: MPI_Abort(MPI_COMM_WORLD, TS_COMM_EXIT_TIMEOUT).
 * Both talk to MPI from this thread while the main thread is inside the blocking call, which MPI
 * allows at MPI_THREAD_MULTIPLE only; at a lower level the thread sends nothing, and the message
 * names what this rank knows (the collective, its sequence number, the communicator, this rank).
 * MPI_Abort is then still called from this thread (OpenMPI ends the job from any thread: tested
 * here at FUNNELED and MULTIPLE, tests/comm/watchdog_test.sh), and _exit follows if it ever
 * returns.
 *
 * Arming costs the main thread a mutex and a few stores; the thread is signalled only when it
 * sleeps past the new call's first moment (it is idle, or waiting for an earlier call's later
 * deadline), so back-to-back calls wake it at most once per ts__watch_after() seconds. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_impl.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv;
static pthread_t g_thread;
static int g_started, g_quit; /* written by the main thread (under g_mu once started) */
static pid_t g_tid;           /* the thread's kernel id (under g_mu) */
static double g_wake;         /* when the thread wakes next (HUGE_VAL: idle; 0: running) */
static struct {
  ts_comm *c;
  ts_coll_sig sig;
  double t0, timeout;
  int armed, announced;
} g_call; /* the native call in flight (under g_mu) */

static int can_probe(const ts_comm *c) {
  return ts__mpi_thread_level() == MPI_THREAD_MULTIPLE && c->mcw != MPI_COMM_NULL;
}

/* The call in g_call outlived its deadline: name what can be named, then end the job. Runs in
 * the watchdog thread with g_mu held; does not return. */
static void expire(void) {
  ts_comm *c = g_call.c;
  char who[96], sg[160], why[512], msg[1024];
  ts__who(c, who, sizeof who);
  ts__sig_str(&g_call.sig, sg, sizeof sg);
  why[0] = 0;
  if (can_probe(c)) {
    ts__watch_diagnose(c, &g_call.sig, g_call.t0, why, sizeof why);
  } else if (c->size > 1) {
    int lv = ts__mpi_thread_level();
    snprintf(why, sizeof why,
             " (which of the other %d rank%s of %s never reached it cannot be told: MPI provides %s, not "
             "MPI_THREAD_MULTIPLE, so the watchdog may not ask them)",
             c->size - 1, c->size > 2 ? "s" : "", c->world_like ? "the job" : "its group",
             lv == MPI_THREAD_SINGLE ? "MPI_THREAD_SINGLE" : lv == MPI_THREAD_FUNNELED ? "MPI_THREAD_FUNNELED"
                                                                                   : "MPI_THREAD_SERIALIZED");
  }
  if (!why[0]) snprintf(why, sizeof why, " (a peer may have died or not have issued it)");
  snprintf(msg, sizeof msg,
           "%s: %s did not complete within %g s%s; the watchdog ends the job (exit %d: a blocking MPI "
           "call cannot be interrupted)",
           who, sg, g_call.timeout, why, TS_COMM_EXIT_TIMEOUT);
  ts_log(TS_LOG_ERROR, "%s", msg);
  MPI_Abort(MPI_COMM_WORLD, TS_COMM_EXIT_TIMEOUT);
  _exit(TS_COMM_EXIT_TIMEOUT);
}

static void *watchdog_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_mu);
  g_tid = (pid_t)syscall(SYS_gettid);
  while (!g_quit) {
    double now = ts_time_now(), wake = HUGE_VAL;
    if (g_call.armed) {
      if (now - g_call.t0 >= g_call.timeout) expire();
      wake = g_call.t0 + g_call.timeout;
      if (!g_call.announced && can_probe(g_call.c)) {
        double at = g_call.t0 + ts__watch_after();
        if (now >= at) {
          ts__watch_announce(g_call.c); /* the main thread is inside the call on this communicator */
          g_call.announced = 1;
        } else if (at < wake) {
          wake = at;
        }
      }
    }
    g_wake = wake;
    if (wake == HUGE_VAL) {
      pthread_cond_wait(&g_cv, &g_mu);
    } else {
      struct timespec ts;
      ts.tv_sec = (time_t)wake;
      ts.tv_nsec = (long)((wake - (double)ts.tv_sec) * 1e9);
      if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
      pthread_cond_timedwait(&g_cv, &g_mu, &ts);
    }
    g_wake = 0; /* running */
  }
  pthread_mutex_unlock(&g_mu);
  return NULL;
}

/* Starts the thread (g_mu held). Signals are blocked in it: they keep going to the other threads. */
static int start_locked(void) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int e = pthread_cond_init(&g_cv, &ca);
  pthread_condattr_destroy(&ca);
  if (e) return ts_error_set(TS_ECOMM, "the watchdog of native blocking calls: pthread_cond_init: %s", strerror(e));
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  e = pthread_create(&g_thread, NULL, watchdog_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (e) {
    pthread_cond_destroy(&g_cv);
    return ts_error_set(TS_ECOMM, "the watchdog of native blocking calls could not start: pthread_create: %s",
                        strerror(e));
  }
  g_started = 1;
  g_quit = 0;
  g_wake = 0; /* it looks at g_call as soon as it runs */
  return TS_OK;
}

int ts__watchdog_arm(ts_comm *c, const ts_coll_sig *s) {
  c->waiting = 1;
  double timeout = ts_comm_get_timeout();
  if (!(timeout > 0) || c->size < 2) return TS_OK; /* no deadline, or nobody to wait for */
  pthread_mutex_lock(&g_mu);
  if (!g_started) {
    int rc = start_locked();
    if (rc) {
      pthread_mutex_unlock(&g_mu);
      c->waiting = 0;
      char who[96], sg[160];
      ts__who(c, who, sizeof who);
      ts__sig_str(s, sg, sizeof sg);
      return ts_error_wrap(rc, "%s: %s (not issued)", who, sg);
    }
  }
  g_call.c = c;
  g_call.sig = *s;
  g_call.t0 = ts_time_now();
  g_call.timeout = timeout;
  g_call.armed = 1;
  g_call.announced = 0;
  double first = g_call.t0 + (can_probe(c) && ts__watch_after() < timeout ? ts__watch_after() : timeout);
  if (first < g_wake) pthread_cond_signal(&g_cv);
  pthread_mutex_unlock(&g_mu);
  return TS_OK;
}

void ts__watchdog_disarm(ts_comm *c) {
  c->waiting = 0;
  if (!g_started) return;
  pthread_mutex_lock(&g_mu); /* waits for an announcement the thread is making on c */
  g_call.armed = 0;
  g_call.c = NULL;
  pthread_mutex_unlock(&g_mu);
}

void ts__watchdog_stop(void) {
  if (!g_started) return;
  pthread_mutex_lock(&g_mu);
  g_quit = 1;
  pthread_cond_signal(&g_cv);
  pthread_mutex_unlock(&g_mu);
  pthread_join(g_thread, NULL);
  pthread_cond_destroy(&g_cv);
  g_started = 0;
  g_quit = 0;
  g_tid = 0;
  g_wake = 0;
}

int ts__watchdog_tid(void) {
  if (!g_started) return 0;
  for (int i = 0; i < 1000; i++) { /* it records its id as it starts */
    pthread_mutex_lock(&g_mu);
    pid_t t = g_tid;
    pthread_mutex_unlock(&g_mu);
    if (t) return (int)t;
    struct timespec ts = {0, 1000000L};
    nanosleep(&ts, NULL);
  }
  return 0;
}

double ts__watchdog_cpu_seconds(void) {
  clockid_t id;
  struct timespec ts;
  if (!g_started || pthread_getcpuclockid(g_thread, &id) || clock_gettime(id, &ts)) return -1;
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
