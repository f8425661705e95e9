/* Internals shared by the files of src/parallel/. */
#ifndef TS_PARALLEL_IMPL_H
#define TS_PARALLEL_IMPL_H

#include <stddef.h>

/* Appends printf output at *n of buf[cap] (cap >= 1): the text is cut at cap-1, *n keeps
 * counting so later appends stay cut. */
void ts__app(char *buf, size_t cap, size_t *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
