#include <stdarg.h>
#include <stdio.h>

#include "tessera/base.h"

static ts_log_fn g_hook;
static void *g_user;
static ts_log_level g_level = TS_LOG_INFO;

static void default_hook(ts_log_level level, const char *msg, void *user) {
  (void)user;
  static const char *names[] = {"debug", "info", "warning", "error"};
  if (level >= TS_LOG_WARN) fprintf(stderr, "tessera %s: %s\n", names[level], msg);
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
