/* Internal: bounded text building shared by the layers (reports, messages, layouts). */
#ifndef TS_BASE_TEXT_H
#define TS_BASE_TEXT_H

#include <stddef.h>

/* Appends printf output at *n of buf[cap] (cap >= 1): the text is cut at cap-1, *n keeps
 * counting so later appends stay cut. */
void ts__app(char *buf, size_t cap, size_t *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Operator-name patterns (parallel.strategies, model.recompute_layers): 1 if s matches pat, where
 * '*' matches any run (possibly empty) of characters other than '.', i.e. within one name part. */
int ts__name_match(const char *pat, const char *s);

#endif
