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
#define _GNU_SOURCE /* qsort_r */
#include <stdlib.h>
#include <string.h>

#include "pack.h"

typedef struct {
  size_t off, len;
  int first, last;
} placed;

/* The placed ones alive with an item are read in offset order, from one of two indexes kept as
 * they are placed: every placed one in offset order (ord), or, by time, the nodes cut into windows
 * of CHUNK nodes, each with the list of placed ones alive at a node of it. A temporary's life in a
 * training step is mostly a few nodes, so those alive with it are a few among thousands: reading
 * its windows' lists and sorting what they hold by offset is then far less than the scan of all,
 * and gives the same gaps (1 per cent of the pairs overlap in a 100-layer GPT's plan: the search
 * over its plans spent a third of its time here). */
enum { CHUNK = 16 };

typedef struct {
  int *ix, n, cap;
} bucket;

static int by_size(const void *a, const void *b) {
  const ts__interval *x = a, *y = b;
  if (x->len != y->len) return x->len > y->len ? -1 : 1;
  if (x->first != y->first) return x->first < y->first ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

static int by_off(const void *a, const void *b, void *ctx) { /* indexes into ctx, the placed ones */
  const placed *pl = ctx;
  const size_t x = pl[*(const int *)a].off, y = pl[*(const int *)b].off;
  return x < y ? -1 : x > y;
}

static int bucket_push(bucket *b, int v) {
  if (b->n == b->cap) {
    int nc = b->cap ? 2 * b->cap : 16;
    int *p = realloc(b->ix, sizeof *p * (size_t)nc);
    if (!p) return -1;
    b->ix = p, b->cap = nc;
  }
  b->ix[b->n++] = v;
  return 0;
}

int ts__pack_greedy(ts__interval *items, int n, size_t *off, size_t *top) {
  *top = 0;
  if (n <= 0) return 0;
  int nodes = 0;
  for (int i = 0; i < n; i++)
    if (items[i].last + 1 > nodes) nodes = items[i].last + 1;
  const int nb = nodes / CHUNK + 1;
  placed *pl = malloc(sizeof(placed) * (size_t)n); /* in the order placed */
  int *ov = malloc(sizeof(int) * (size_t)n), *ord = malloc(sizeof(int) * (size_t)n);
  bucket *bk = calloc((size_t)nb, sizeof *bk);
  int rc = pl && ov && ord && bk ? 0 : -1;
  qsort(items, (size_t)n, sizeof *items, by_size);
  for (int i = 0; i < n && !rc; i++) {
    const ts__interval *it = &items[i];
    const int b0 = it->first / CHUNK, b1 = it->last / CHUNK;
    int no = 0, via = 0; /* the placed ones alive at a node of its life */
    for (int c = b0; c <= b1; c++) via += bk[c].n;
    if (8 * via < i) { /* its windows hold few: gathered, then sorted */
      for (int c = b0; c <= b1; c++)
        for (int k = 0; k < bk[c].n; k++) {
          const placed *q = &pl[bk[c].ix[k]];
          /* listed in every window of its life: counted in the first one both lives share */
          if (q->first <= it->last && it->first <= q->last &&
              (q->first > it->first ? q->first : it->first) / CHUNK == c)
            ov[no++] = bk[c].ix[k];
        }
      qsort_r(ov, (size_t)no, sizeof *ov, by_off, pl); /* equal offsets in any order: the same gaps */
    } else {
      for (int k = 0; k < i; k++)
        if (pl[ord[k]].first <= it->last && it->first <= pl[ord[k]].last) ov[no++] = ord[k];
    }
    size_t at = 0, best = (size_t)-1, best_gap = (size_t)-1;
    for (int k = 0; k < no; k++) {
      const placed *q = &pl[ov[k]];
      if (q->off > at) { /* a gap [at, off) */
        size_t gap = q->off - at;
        if (gap >= it->len && gap < best_gap) best = at, best_gap = gap;
      }
      if (q->off + q->len > at) at = q->off + q->len;
    }
    if (best == (size_t)-1) best = at; /* above every one it overlaps */
    pl[i] = (placed){best, it->len, it->first, it->last};
    int pos = i; /* after the placed ones at offsets <= best */
    while (pos > 0 && pl[ord[pos - 1]].off > best) pos--;
    memmove(&ord[pos + 1], &ord[pos], sizeof *ord * (size_t)(i - pos));
    ord[pos] = i;
    for (int c = b0; c <= b1 && !rc; c++) rc = bucket_push(&bk[c], i);
    off[it->id] = best;
    if (best + it->len > *top) *top = best + it->len;
  }
  for (int c = 0; bk && c < nb; c++) free(bk[c].ix);
  free(bk);
  free(pl);
  free(ov);
  free(ord);
  return rc;
}
