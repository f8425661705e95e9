/* Bounded text building (src/base/text.h). */
#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"

void ts__app(char *buf, size_t cap, size_t *n, const char *fmt, ...) {
  if (*n >= cap - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(buf + *n, cap - *n, fmt, ap);
  va_end(ap);
  if (k > 0) *n += (size_t)k;
}

const char *ts__human_bytes(double bytes, char *buf, size_t cap) {
  static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int k = 0;
  while (bytes >= 1024 && k < 4) {
    bytes /= 1024;
    k++;
  }
  snprintf(buf, cap, k ? "%.2f %s" : "%.0f %s", bytes, u[k]);
  return buf;
}

/* One name part (no '.'): pat[0..pn) against s[0..sn), '*' any run of characters. Greedy, going
 * back to the last '*' on a mismatch: O(pn * sn), where trying every split was exponential in the
 * stars ("a*****...*b" against a long name). */
static int part_match(const char *pat, size_t pn, const char *s, size_t sn) {
  size_t i = 0, j = 0, star = (size_t)-1, from = 0;
  while (j < sn) {
    if (i < pn && pat[i] == '*') {
      star = i++;
      from = j;
    } else if (i < pn && pat[i] == s[j]) {
      i++;
      j++;
    } else if (star != (size_t)-1) {
      i = star + 1; /* the last '*' takes one more character */
      j = ++from;
    } else {
      return 0;
    }
  }
  while (i < pn && pat[i] == '*') i++;
  return i == pn;
}

int ts__name_match(const char *pat, const char *s) {
  /* '*' never matches '.', so the pattern's parts and the name's parts pair up one to one */
  for (;;) {
    const char *pe = strchr(pat, '.'), *se = strchr(s, '.');
    size_t pn = pe ? (size_t)(pe - pat) : strlen(pat), sn = se ? (size_t)(se - s) : strlen(s);
    if (!part_match(pat, pn, s, sn)) return 0;
    if (!pe || !se) return !pe && !se;
    pat = pe + 1;
    s = se + 1;
  }
}

void ts__sb_put(ts__sb *b, const char *s, size_t n) {
  if (b->failed) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n + 1) cap *= 2;
    char *t = realloc(b->s, cap);
    if (!t) {
      b->failed = 1;
      return;
    }
    b->s = t;
    b->cap = cap;
  }
  memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = 0;
}

char *ts__str_vprintf(const char *fmt, va_list ap) {
  va_list aq;
  va_copy(aq, ap);
  int k = vsnprintf(NULL, 0, fmt, aq);
  va_end(aq);
  if (k < 0) return NULL;
  char *s = malloc((size_t)k + 1);
  if (s) vsnprintf(s, (size_t)k + 1, fmt, ap);
  return s;
}

char *ts__str_printf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = ts__str_vprintf(fmt, ap);
  va_end(ap);
  return s;
}

void ts__sb_printf(ts__sb *b, const char *fmt, ...) {
  char tmp[1024];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (k < 0) return;
  if ((size_t)k < sizeof tmp) {
    ts__sb_put(b, tmp, (size_t)k);
    return;
  }
  char *big = malloc((size_t)k + 1);
  if (!big) {
    b->failed = 1;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)k + 1, fmt, ap);
  va_end(ap);
  ts__sb_put(b, big, (size_t)k);
  free(big);
}

void ts__sb_json_str(ts__sb *b, const char *s) {
  if (!s) return;
  const char *run = s;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p >= 0x20 && *p != '"' && *p != '\\') continue;
    ts__sb_put(b, run, (size_t)((const char *)p - run));
    if (*p == '"' || *p == '\\') ts__sb_printf(b, "\\%c", *p);
    else ts__sb_printf(b, "\\u%04x", *p);
    run = (const char *)p + 1;
  }
  ts__sb_put(b, run, strlen(run));
}

void ts__sb_puts(ts__sb *b, const char *s) { ts__sb_put(b, s, strlen(s)); }

/* ---- did you mean ---- */

static int lev(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  if (na > 127) na = 127;
  if (nb > 127) nb = 127;
  int row[128];
  for (size_t j = 0; j <= nb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= na; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= nb; j++) {
      int up = row[j];
      int cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
      int v = diag + cost;
      if (up + 1 < v) v = up + 1;
      if (row[j - 1] + 1 < v) v = row[j - 1] + 1;
      row[j] = v;
      diag = up;
    }
  }
  return row[nb];
}

static int close_enough(const char *typed, const char *cand, int d) {
  int lt = (int)strlen(typed), lc = (int)strlen(cand);
  int lim = (lt + 1) / 3 > 1 ? (lt + 1) / 3 : 1;
  return d <= lim && d < (lt > lc ? lt : lc);
}

const char *ts__text_closest(const char *typed, const char *const *names, int n) {
  const char *best = NULL;
  int bd = INT_MAX;
  for (int i = 0; i < n; i++) {
    int d = lev(typed, names[i]);
    if (d < bd) {
      bd = d;
      best = names[i];
    }
  }
  return best && close_enough(typed, best, bd) ? best : NULL;
}
