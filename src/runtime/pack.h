/* Internal: offline placement of temporaries with known lives (src/runtime/pack.c). */
#ifndef TS_RUNTIME_PACK_H
#define TS_RUNTIME_PACK_H

#include <stddef.h>

/* One temporary: `len` bytes alive from node `first` to node `last` (inclusive); `id` indexes
 * the caller's offsets. */
typedef struct {
  size_t len;
  int first, last;
  int id;
} ts__interval;

/* Places items[0..n-1] greedily by size (largest first, each in the smallest gap among the
 * already placed ones alive at the same time, else above them): off[items[k].id] gets each
 * offset, *top the arena's size. Two items whose lives share a node never share a byte; offsets
 * are sums of lens (callers round lens to their alignment). Reorders items. -1 when out of
 * memory (nothing placed), else 0. */
int ts__pack_greedy(ts__interval *items, int n, size_t *off, size_t *top);

#endif
