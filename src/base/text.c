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

int ts__name_match(const char *pat, const char *s) {
  while (*pat) {
    if (*pat == '*') {
      pat++;
      for (const char *t = s;; t++) {
        if (ts__name_match(pat, t)) return 1;
        if (!*t || *t == '.') return 0;
      }
    }
    if (*pat != *s) return 0;
    pat++;
    s++;
  }
  return *s == 0;
}
