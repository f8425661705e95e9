/* Internal: bounded text building shared by the layers (reports, messages, layouts). */
#ifndef TS_BASE_TEXT_H
#define TS_BASE_TEXT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* FNV-1a (64-bit), the one hash of names and keys across the layers (hash tables, caches,
 * digests): start from TS__FNV1A_BASIS, or continue a running hash by passing it back.
 * TS__FNV1A_BASIS_V0 (a digit short of FNV's basis) starts the two hashes whose values outlive a
 * run and so never change: parameters' name-derived seeds (ts_hash_name) and the config digest
 * that checkpoints record (ts_config_hash). */
#define TS__FNV1A_BASIS 14695981039346656037ull
#define TS__FNV1A_BASIS_V0 1469598103934665603ull
static inline uint64_t ts__fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = (const unsigned char *)p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}
static inline uint64_t ts__fnv1a_str(uint64_t h, const char *s) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* Appends printf output at *n of buf[cap] (cap >= 1): the text is cut at cap-1, *n keeps
 * counting so later appends stay cut. */
void ts__app(char *buf, size_t cap, size_t *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* A byte count in binary units, "812 B", "1.20 MiB" (two decimals from KiB up), into buf; returns buf. */
const char *ts__human_bytes(double bytes, char *buf, size_t cap);

/* Operator-name patterns (parallel.strategies, model.recompute_layers): 1 if s matches pat, where
 * '*' matches any run (possibly empty) of characters other than '.', i.e. within one name part. */
int ts__name_match(const char *pat, const char *s);

/* The closest of names[0..n) to typed by edit distance (case-insensitive), or NULL when none is
 * close enough to suggest (at most about a third of typed's letters differ): "did you mean". */
const char *ts__text_closest(const char *typed, const char *const *names, int n);

/* printf output in a new string (malloc'd, the caller frees it), or NULL when out of memory.
 * Tessera's code uses this rather than asprintf: glibc's asprintf allocates inside libc, where
 * the sanitizers' fast unwinder cannot follow (scripts/lsan.supp suppresses such stacks: they
 * come from the MPI runtime). */
char *ts__str_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *ts__str_vprintf(const char *fmt, va_list ap);

/* A growing text buffer (not for hot paths); on allocation failure `failed` is set and later
 * appends do nothing. Start from {0}; the text is b.s (NUL-terminated once anything was put),
 * freed by the owner. */
typedef struct {
  char *s;
  size_t n, cap;
  int failed;
} ts__sb;
void ts__sb_put(ts__sb *b, const char *s, size_t n);
void ts__sb_puts(ts__sb *b, const char *s);
void ts__sb_printf(ts__sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as a JSON string body (quotes not included), control characters escaped. */
void ts__sb_json_str(ts__sb *b, const char *s);

#endif
