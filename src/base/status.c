#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tessera/base.h"

static _Thread_local char tl_msg[1024];

const char *ts_strerror(int code) {
  switch (code) {
#define TS__ERR_STR(name, val, str) \
  case val:                         \
    return str;
    TS_ERRNO_MAP(TS__ERR_STR)
#undef TS__ERR_STR
  }
  return "unknown error";
}

const char *ts_last_error(void) { return tl_msg; }

int ts_error_set(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tl_msg, sizeof tl_msg, fmt, ap);
  va_end(ap);
  return code;
}

int ts_error_wrap(int code, const char *fmt, ...) {
  char prefix[512], old[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, tl_msg, sizeof old);
  /* bounded parts: a long chain of wraps keeps its head and the start of the original message */
  snprintf(tl_msg, sizeof tl_msg, "%.500s: %.500s", prefix, old[0] ? old : ts_strerror(code));
  return code;
}

int ts_error_as_config(int rc) {
  if (rc != TS_EINVAL && rc != TS_ESHAPE && rc != TS_EUNSUPPORTED) return rc;
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", ts_last_error());
  return ts_error_set(TS_ECONFIG, "%s", msg);
}

const char *ts_version(void) {
#ifdef TS_VERSION_STRING
  return TS_VERSION_STRING;
#else
  return "0.0.0";
#endif
}
