/* The file-system fault hook of the checkpoint writers' tests (iofault.h). */
#define _GNU_SOURCE
#include "iofault.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tessera/base.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static long long g_call = -1; /* the call to fault (-1: none) */
static int g_fail;            /* fail with EIO rather than kill */
static int g_rank;
static const char *g_trace;
static atomic_llong g_n;

static int env_rank(void) {
  static const char *const keys[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
  for (int i = 0; i < 3; i++) {
    const char *v = getenv(keys[i]);
    if (v && *v) return atoi(v);
  }
  return 0;
}

static void parse(void) {
  g_rank = env_rank();
  const char *t = getenv("TESSERA_IO_TRACE");
  g_trace = t && *t ? t : NULL;
  const char *s = getenv("TESSERA_IO_FAULT");
  if (!s || !*s) return;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  long long call = -1;
  int rank = -1, fail = 0, okay = 1;
  char *save = NULL;
  for (char *kv = strtok_r(buf, ",", &save); kv && okay; kv = strtok_r(NULL, ",", &save)) {
    char *end = NULL;
    if (!strncmp(kv, "call:", 5)) call = strtoll(kv + 5, &end, 10), okay = end && !*end && call > 0;
    else if (!strncmp(kv, "rank:", 5)) rank = (int)strtol(kv + 5, &end, 10), okay = end && !*end && rank >= 0;
    else if (!strcmp(kv, "kind:kill")) fail = 0;
    else if (!strcmp(kv, "kind:fail")) fail = 1;
    else okay = 0;
  }
  if (!okay || call < 0) {
    ts_log(TS_LOG_WARN, "TESSERA_IO_FAULT '%s' ignored: expected call:K[,rank:R][,kind:kill|fail]", s);
    return;
  }
  if (rank >= 0 && rank != g_rank) return;
  g_call = call;
  g_fail = fail;
}

int ts__io_fault(const char *op, const char *path) {
  pthread_once(&g_once, parse);
  if (g_call < 0 && !g_trace) return 0;
  long long n = atomic_fetch_add(&g_n, 1) + 1;
  if (g_trace) {
    char line[4400];
    int main_thread = (pid_t)syscall(SYS_gettid) == getpid();
    int len = snprintf(line, sizeof line, "%d %lld %s %s %s\n", g_rank, n, op, main_thread ? "main" : "thread", path);
    int fd = open(g_trace, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (fd >= 0) {
      if (len > 0) (void)!write(fd, line, (size_t)len < sizeof line ? (size_t)len : sizeof line - 1);
      close(fd);
    }
  }
  if (n != g_call) return 0;
  if (!g_fail) {
    raise(SIGKILL);
    _exit(137);
  }
  errno = EIO;
  return -1;
}
