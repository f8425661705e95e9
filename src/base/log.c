#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/base.h"

static ts_log_fn g_hook;
static void *g_user;
static ts_log_level g_level = TS_LOG_INFO;

/* A decimal environment variable >= lo, or -1. */
static long env_num(const char *name, long lo) {
  const char *e = getenv(name);
  if (!e || !*e) return -1;
  char *end = NULL;
  errno = 0;
  long v = strtol(e, &end, 10);
  return errno || *end || v < lo ? -1 : v;
}

void ts_job_rank(int *rank, int *size) {
  static const char *const vars[][2] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, {"PMIX_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMI_RANK", "PMI_SIZE"}, {"SLURM_PROCID", "SLURM_NTASKS"}};
  *rank = 0;
  *size = 1;
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    long r = env_num(vars[i][0], 0), n = env_num(vars[i][1], 1);
    if (r >= 0 && n >= 1 && r < n && n < (1L << 30)) {
      *rank = (int)r;
      *size = (int)n;
      return;
    }
  }
}

static void default_hook(ts_log_level level, const char *msg, void *user) {
  (void)user;
  static const char *names[] = {"debug", "info", "warning", "error"};
  if (level < TS_LOG_WARN) return;
  int r, n;
  ts_job_rank(&r, &n);
  char line[2300], who[48] = "";
  if (n > 1) snprintf(who, sizeof who, "[rank %d of %d] ", r, n);
  int len = snprintf(line, sizeof line, "tessera %s: %s%s\n", names[level], who, msg);
  if (len < 0) return;
  if ((size_t)len >= sizeof line) {
    len = (int)sizeof line - 1;
    line[len - 1] = '\n';
  }
  /* one write per message: lines of several processes on one stream stay whole */
  for (size_t off = 0; off < (size_t)len;) {
    ssize_t w = write(2, line + off, (size_t)len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    off += (size_t)w;
  }
}

void ts_log_set_hook(ts_log_fn fn, void *user) {
  g_hook = fn;
  g_user = user;
}

void ts_log_set_level(ts_log_level level) { g_level = level; }

void ts_log(ts_log_level level, const char *fmt, ...) {
  if (level < g_level) return;
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (g_hook)
    g_hook(level, buf, g_user);
  else
    default_hook(level, buf, NULL);
}
