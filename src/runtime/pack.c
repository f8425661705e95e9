/* Offline placement of a plan's temporaries in its arena (the memory planner's last step).
 *
 * Every temporary's life is known before the step runs (the node that writes it, the last that
 * reads it), so placing them is the dynamic storage allocation problem solved offline: give each
 * an offset so that no two whose lives overlap share a byte, with the arena's top as low as
 * possible. The lower bound is the largest sum of sizes alive at one node. An online best-fit
 * free list (the order the nodes run) leaves holes where a training step's short-lived backward
 * temporaries (weight gradients, casts) are cut between the long-lived activations: 12-14% above
 * the bound for a GPT layer. Greedy by size (Pisarchyk & Lee 2020, "Efficient Memory Management
 * for Deep Neural Net Inference", TFLite's planner) places the largest first, each in the
 * smallest gap left by the already placed ones it overlaps in time, which on training graphs
 * lands within a few percent of the bound. The planner runs both and keeps the lower top. */
#include <stdlib.h>

#include "pack.h"

typedef struct {
  size_t off, len;
  int first, last;
} placed;

static int by_size(const void *a, const void *b) {
  const ts__interval *x = a, *y = b;
  if (x->len != y->len) return x->len > y->len ? -1 : 1;
  if (x->first != y->first) return x->first < y->first ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

static int by_off(const void *a, const void *b) {
  const placed *x = *(const placed *const *)a, *y = *(const placed *const *)b;
  return x->off < y->off ? -1 : x->off > y->off;
}

int ts__pack_greedy(ts__interval *items, int n, size_t *off, size_t *top) {
  *top = 0;
  if (n <= 0) return 0;
  placed *pl = malloc(sizeof(placed) * (size_t)n);
  placed **ov = malloc(sizeof(placed *) * (size_t)n);
  if (!pl || !ov) {
    free(pl);
    free(ov);
    return -1;
  }
  qsort(items, (size_t)n, sizeof *items, by_size);
  int np = 0;
  for (int i = 0; i < n; i++) {
    const ts__interval *it = &items[i];
    int no = 0; /* the placed ones alive at some node of its life */
    for (int k = 0; k < np; k++)
      if (pl[k].first <= it->last && it->first <= pl[k].last) ov[no++] = &pl[k];
    qsort(ov, (size_t)no, sizeof *ov, by_off);
    size_t at = 0, best = (size_t)-1, best_gap = (size_t)-1;
    for (int k = 0; k < no; k++) {
      if (ov[k]->off > at) { /* a gap [at, off) */
        size_t gap = ov[k]->off - at;
        if (gap >= it->len && gap < best_gap) best = at, best_gap = gap;
      }
      if (ov[k]->off + ov[k]->len > at) at = ov[k]->off + ov[k]->len;
    }
    if (best == (size_t)-1) best = at; /* above every one it overlaps */
    pl[np].off = best;
    pl[np].len = it->len;
    pl[np].first = it->first;
    pl[np].last = it->last;
    np++;
    off[it->id] = best;
    if (best + it->len > *top) *top = best + it->len;
  }
  free(pl);
  free(ov);
  return 0;
}
