/* Bounded text building (src/base/text.h). */
#include <stdarg.h>
#include <stdio.h>

#include "text.h"

void ts__app(char *buf, size_t cap, size_t *n, const char *fmt, ...) {
  if (*n >= cap - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(buf + *n, cap - *n, fmt, ap);
  va_end(ap);
  if (k > 0) *n += (size_t)k;
}
