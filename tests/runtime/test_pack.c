/* Offline placement of temporaries (ts__pack_greedy, src/runtime/pack.c): no two temporaries
 * alive at one node share a byte, the top is at least the largest sum alive at one node (the
 * lower bound) and, on a training step's shape of lives (activations kept from forward to
 * backward, short-lived temporaries between them), within 5% of that bound; every offset the one
 * the algorithm's textbook form (Pisarchyk & Lee: for each item by size, the placed ones alive with
 * it sorted by offset, the smallest gap that fits, else above them all) gives. */
#include <stdlib.h>
#include <string.h>

#include "runtime/pack.h"
#include "test_util.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) { /* xorshift64 */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static int ref_by_size(const void *a, const void *b) {
  const ts__interval *x = a, *y = b;
  if (x->len != y->len) return x->len > y->len ? -1 : 1;
  if (x->first != y->first) return x->first < y->first ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}
static const size_t *ref_off_of;
static int ref_by_off(const void *a, const void *b) {
  const size_t x = ref_off_of[((const ts__interval *)a)->id], y = ref_off_of[((const ts__interval *)b)->id];
  return x < y ? -1 : x > y;
}

/* the textbook form: offsets of items[0..n-1] (by id) */
static void ref_pack(const ts__interval *items, int n, size_t *off) {
  ts__interval *s = malloc(sizeof *s * (size_t)n), *ov = malloc(sizeof *ov * (size_t)n);
  memcpy(s, items, sizeof *s * (size_t)n);
  qsort(s, (size_t)n, sizeof *s, ref_by_size);
  ref_off_of = off;
  for (int i = 0; i < n; i++) {
    int no = 0;
    for (int k = 0; k < i; k++)
      if (s[k].first <= s[i].last && s[i].first <= s[k].last) ov[no++] = s[k];
    qsort(ov, (size_t)no, sizeof *ov, ref_by_off);
    size_t at = 0, best = (size_t)-1, best_gap = (size_t)-1;
    for (int k = 0; k < no; k++) {
      const size_t o = off[ov[k].id];
      if (o > at && o - at >= s[i].len && o - at < best_gap) best = at, best_gap = o - at;
      if (o + ov[k].len > at) at = o + ov[k].len;
    }
    off[s[i].id] = best == (size_t)-1 ? at : best;
  }
  free(s);
  free(ov);
}

/* Places items[0..n-1] (nodes 0..nodes-1); checks overlaps, returns top / lower bound. */
static double place(const char *what, ts__interval *items, int n, int nodes) {
  ts__interval *orig = malloc(sizeof *orig * (size_t)n);
  size_t *off = malloc(sizeof *off * (size_t)n), top = 0, bound = 0;
  memcpy(orig, items, sizeof *orig * (size_t)n);
  CHECK(ts__pack_greedy(items, n, off, &top) == 0);
  size_t *want = malloc(sizeof *want * (size_t)n);
  ref_pack(orig, n, want);
  int differ = 0;
  for (int k = 0; k < n; k++) differ += off[k] != want[k];
  CHECK_MSG(differ == 0, "%s: %d offsets differ from the textbook form's", what, differ);
  free(want);
  int clashes = 0;
  for (int a = 0; a < n; a++)
    for (int b = a + 1; b < n; b++) {
      const ts__interval *x = &orig[a], *y = &orig[b];
      int time = x->first <= y->last && y->first <= x->last;
      int space = off[x->id] < off[y->id] + y->len && off[y->id] < off[x->id] + x->len;
      clashes += time && space;
    }
  for (int k = 0; k < n; k++) CHECK(off[orig[k].id] + orig[k].len <= top);
  for (int t = 0; t < nodes; t++) {
    size_t live = 0;
    for (int k = 0; k < n; k++) live += orig[k].first <= t && t <= orig[k].last ? orig[k].len : 0;
    if (live > bound) bound = live;
  }
  CHECK_MSG(clashes == 0, "%s: %d pairs alive together share bytes", what, clashes);
  CHECK_MSG(top >= bound, "%s: top %zu under the bound %zu", what, top, bound);
  printf("%s: %d temporaries, top %zu, bound %zu (%.4f)\n", what, n, top, bound, (double)top / (double)bound);
  free(orig);
  free(off);
  return (double)top / (double)bound;
}

int main(void) {
  /* random lives and sizes */
  enum { N = 400, NODES = 200 };
  ts__interval *it = malloc(sizeof *it * N);
  for (int k = 0; k < N; k++) {
    int a = (int)(next() % NODES), l = (int)(next() % 40);
    it[k] = (ts__interval){64 * (1 + next() % 1000), a, a + l < NODES ? a + l : NODES - 1, k};
  }
  place("random", it, N, NODES);
  /* a training step: L layers; layer i's forward (nodes 2i, 2i+1) keeps 3 activations until its
   * backward (nodes 4L-1-2i and the one before), and every node makes temporaries that die at
   * the next node (forward: half an activation; backward: a weight gradient 4x, an input
   * gradient 1x) */
  enum { L = 24 };
  int n = 0, nodes = 4 * L;
  for (int i = 0; i < L; i++) {
    int f = 2 * i, b = 4 * L - 2 - 2 * i;
    size_t act = 64 * (size_t)(1000 + 37 * (i % 5));
    for (int k = 0; k < 3; k++) it[n] = (ts__interval){act * (size_t)(1 + k), f + (k > 0), b + (k == 0), n}, n++;
    it[n] = (ts__interval){act / 2, f, f + 1, n}, n++;
    it[n] = (ts__interval){4 * act, b, b + 1, n}, n++;
    it[n] = (ts__interval){act, b + 1, b + 2 < nodes ? b + 2 : nodes - 1, n}, n++;
  }
  double r = place("training step", it, n, nodes);
  CHECK_MSG(r <= 1.05, "training step: top %.4f x the bound (want <= 1.05)", r);
  /* nothing to place */
  size_t top = 7;
  CHECK(ts__pack_greedy(it, 0, NULL, &top) == 0 && top == 0);
  free(it);
  return ts_test_finish("pack");
}
