/* Regions (include/tessera/region.h), exhaustively on small tensors against brute force:
 *  - every box (every offset and extent per dim, empty ones included) and every range of each box
 *    of (2,3), (2,2,2), (6), (3,2) and (2,3,4): the runs cover exactly the region's positions, in
 *    increasing order, each with its element's offset in the piece's data, maximal (a gap between
 *    two runs); a seek to every position (-1 .. the tensor's size) gives the first run ending
 *    after it, also after part of the runs were read (never back);
 *  - every pair of regions of (2,3) and of (2,2,2), every region of (3,4) against every box of
 *    (3,4), every box of (2,3,4) against every box and every range of (2,3,4), and across
 *    reshapes ((6) against (2,3) and (3,2); (24) against (2,3,4)): the intersection's runs map
 *    each shared element's offset in a to its offset in b, cover each shared element once, in
 *    increasing position, and their total is the brute-force count;
 *  - refusals (boxes leaving the tensor, bad ranges, regions of tensors of other sizes) with
 *    messages naming the dim, the text form, local shapes, and pieces (names, copies, hashes). */
#include <stdlib.h>
#include <string.h>

#include "tessera/region.h"
#include "test_util.h"

#define MAXN 64

/* loc[pos]: the element's offset in the region's data, or -1 */
static void brute(const ts_region *r, int64_t *loc) {
  int64_t total = ts_region_space_numel(r);
  for (int64_t p = 0; p < total; p++) loc[p] = -1;
  int64_t idx[TS_MAX_DIMS] = {0}, c = 0, bn = 1;
  for (int d = 0; d < r->ndim; d++) bn *= r->ext[d];
  for (int64_t e = 0; e < bn; e++, c++) {
    int64_t pos = 0;
    for (int d = 0; d < r->ndim; d++) pos = pos * r->dims[d] + r->off[d] + idx[d];
    if (c >= r->lo && c < r->hi) loc[pos] = c - r->lo;
    for (int d = r->ndim - 1; d >= 0; d--) {
      if (++idx[d] < r->ext[d]) break;
      idx[d] = 0;
    }
  }
}

/* Every region of shape s (boxes x ranges when ranges, else whole boxes) into out; their number. */
static int all_regions(const ts_shape *s, int ranges, ts_region *out, int cap) {
  int n = 0, nd = s->ndim;
  int64_t off[TS_MAX_DIMS] = {0}, ext[TS_MAX_DIMS] = {0};
  for (;;) {
    ts_region r;
    int ok = ts_region_box(&r, s, off, ext) == TS_OK;
    CHECK(ok);
    int64_t bn = r.hi;
    if (ok) {
      if (!ranges) {
        if (n < cap) out[n++] = r;
      } else {
        for (int64_t lo = 0; lo <= bn; lo++)
          for (int64_t hi = lo; hi <= bn; hi++) {
            ts_region q = r;
            CHECK_OK(ts_region_restrict(&q, lo, hi));
            if (n < cap) out[n++] = q;
          }
      }
    }
    /* next (off, ext) in odometer order over ext[d] in [0, s - off], off[d] in [0, s] */
    int d = nd - 1;
    for (; d >= 0; d--) {
      if (off[d] + ext[d] < s->dims[d]) {
        ext[d]++;
        break;
      }
      ext[d] = 0;
      if (off[d] < s->dims[d]) {
        off[d]++;
        break;
      }
      off[d] = 0;
    }
    if (d < 0) break;
  }
  CHECK(n < cap);
  return n;
}

static void check_runs(const ts_region *r) {
  int64_t loc[MAXN], total = ts_region_space_numel(r);
  brute(r, loc);
  ts_region_runs it;
  ts_region_runs_init(&it, r);
  int64_t pos, local, len, last_end = -2, seen = 0;
  int good = 1;
  while (ts_region_runs_next(&it, &pos, &local, &len)) {
    good &= len > 0 && pos > last_end && pos + len <= total; /* increasing and maximal: a gap before */
    for (int64_t j = 0; j < len && good; j++) good &= loc[pos + j] == local + j;
    seen += len;
    last_end = pos + len;
  }
  good &= seen == ts_region_numel(r);
  char b[160];
  CHECK_MSG(good, "runs of %s", ts_region_str(r, b, sizeof b));
  /* seek to every position, fresh and after reading some runs */
  for (int64_t p = -1; p <= total && good; p++)
    for (int pre = 0; pre < 3 && good; pre++) {
      ts_region_runs a, z;
      ts_region_runs_init(&a, r);
      ts_region_runs_init(&z, r);
      int64_t read_end = -1;
      for (int q = 0; q < pre; q++)
        if (ts_region_runs_next(&a, &pos, &local, &len)) read_end = pos + len;
      ts_region_runs_seek(&a, p);
      /* expected: the first run after those read that ends after p */
      int64_t ep = -1, el = 0, ell = 0;
      int q = 0;
      while (ts_region_runs_next(&z, &pos, &local, &len)) {
        if (q++ < pre) continue;
        if (pos + len > p) {
          ep = pos, el = local, ell = len;
          break;
        }
      }
      (void)read_end;
      int h = ts_region_runs_next(&a, &pos, &local, &len);
      good &= ep < 0 ? !h : (h && pos == ep && local == el && len == ell);
      CHECK_MSG(good, "seek %lld after %d runs in %s: got %d %lld, expected %lld", (long long)p, pre,
                ts_region_str(r, b, sizeof b), h, (long long)(h ? pos : -1), (long long)ep);
    }
}

typedef struct {
  const int64_t *pa, *pb; /* local -> position */
  int64_t last;
  int bad;
  int64_t count;
  char *hit;
} ictx;

static int on_common(int64_t la, int64_t lb, int64_t n, void *u) {
  ictx *c = u;
  if (n <= 0) c->bad = 1;
  for (int64_t j = 0; j < n; j++) {
    int64_t p = c->pa[la + j];
    if (p != c->pb[lb + j] || p <= c->last || c->hit[p]) c->bad = 1;
    c->last = p;
    c->hit[p] = 1;
  }
  c->count += n;
  return 0;
}

static int pairs_checked;

static void check_pair(const ts_region *a, const ts_region *b) {
  int64_t la[MAXN], lb[MAXN], pa[MAXN], pb[MAXN];
  int64_t total = ts_region_space_numel(a);
  brute(a, la);
  brute(b, lb);
  int64_t expect = 0;
  for (int64_t p = 0; p < total; p++) {
    if (la[p] >= 0) pa[la[p]] = p;
    if (lb[p] >= 0) pb[lb[p]] = p;
    expect += la[p] >= 0 && lb[p] >= 0;
  }
  char hit[MAXN] = {0};
  ictx c = {pa, pb, -1, 0, 0, hit};
  int64_t got = ts_region_intersect(a, b, on_common, &c);
  pairs_checked++;
  if (got != expect || c.bad || c.count != expect) {
    char x[160], y[160];
    CHECK_MSG(0, "%s and %s: %lld common (%lld reported), expected %lld%s", ts_region_str(a, x, sizeof x),
              ts_region_str(b, y, sizeof y), (long long)got, (long long)c.count, (long long)expect,
              c.bad ? ", runs wrong" : "");
  }
}

#define CAP 40000

int main(void) {
  ts_region *ra = malloc(sizeof *ra * CAP), *rb = malloc(sizeof *rb * CAP);
  if (!ra || !rb) return 1;
  /* runs and seeks of every region of small shapes */
  ts_shape shapes[] = {ts_shape2(2, 3), ts_shape3(2, 2, 2), ts_shape1(6), ts_shape2(3, 2), ts_shape3(2, 3, 4),
                       ts_shape_make(0, NULL)};
  int nregions = 0;
  for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++) {
    int n = all_regions(&shapes[s], 1, ra, CAP);
    nregions += n;
    for (int i = 0; i < n; i++) check_runs(&ra[i]);
  }
  /* every pair of regions of (2,3) and of (2,2,2) */
  for (int s = 0; s < 2; s++) {
    int n = all_regions(&shapes[s], 1, ra, CAP);
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++) check_pair(&ra[i], &ra[j]);
  }
  /* every region of (3,4) against every box of (3,4) */
  ts_shape s34 = ts_shape2(3, 4);
  int n34 = all_regions(&s34, 1, ra, CAP), b34 = all_regions(&s34, 0, rb, CAP);
  for (int i = 0; i < n34; i++)
    for (int j = 0; j < b34; j++) {
      check_pair(&ra[i], &rb[j]);
      check_pair(&rb[j], &ra[i]);
    }
  /* every box of (2,3,4) against every box and every range of (2,3,4) */
  ts_shape s234 = ts_shape3(2, 3, 4);
  int nb = all_regions(&s234, 0, ra, CAP);
  for (int i = 0; i < nb; i++)
    for (int j = 0; j < nb; j++) check_pair(&ra[i], &ra[j]);
  for (int64_t lo = 0; lo <= 24; lo++)
    for (int64_t hi = lo; hi <= 24; hi++) {
      ts_region q;
      CHECK_OK(ts_region_range(&q, &s234, lo, hi));
      for (int i = 0; i < nb; i++) check_pair(&ra[i], &q);
      ts_shape s24 = ts_shape1(24); /* the same tensor seen flat */
      CHECK_OK(ts_region_range(&q, &s24, lo, hi));
      for (int i = 0; i < nb; i++) check_pair(&q, &ra[i]);
    }
  /* across reshapes of a 6-element tensor: (6) against (2,3) and (3,2), every region */
  ts_shape s6 = ts_shape1(6), s23 = ts_shape2(2, 3), s32 = ts_shape2(3, 2);
  int n6 = all_regions(&s6, 1, ra, CAP);
  int n23 = all_regions(&s23, 1, rb, CAP / 2), n32 = all_regions(&s32, 1, rb + n23, CAP / 2);
  for (int i = 0; i < n6; i++)
    for (int j = 0; j < n23 + n32; j++) check_pair(&ra[i], &rb[j]);
  for (int i = 0; i < n23; i++)
    for (int j = 0; j < n32; j++) check_pair(&rb[i], &rb[n23 + j]);
  printf("regions: %d checked (runs, seeks), %d pairs intersected\n", nregions, pairs_checked);

  /* refusals and text */
  ts_region r;
  ts_shape s816 = ts_shape2(8, 16);
  EXPECT_ERR(ts_region_box(&r, &s816, (int64_t[]){4, 0}, (int64_t[]){6, 16}), TS_EINVAL, "dim 0", "[4, 10)", "8");
  EXPECT_ERR(ts_region_box(&r, &s816, (int64_t[]){0, -1}, (int64_t[]){8, 4}), TS_EINVAL, "dim 1", "negative");
  EXPECT_ERR(ts_region_range(&r, &s816, 100, 200), TS_EINVAL, "[100, 200)", "128");
  CHECK_OK(ts_region_box(&r, &s816, (int64_t[]){0, 4}, (int64_t[]){8, 4}));
  char buf[160];
  CHECK(!strcmp(ts_region_str(&r, buf, sizeof buf), "(8,16)[0:8,4:8]"));
  ts_shape ls = ts_region_local_shape(&r);
  CHECK(ls.ndim == 2 && ls.dims[0] == 8 && ls.dims[1] == 4);
  EXPECT_ERR(ts_region_restrict(&r, 5, 40), TS_EINVAL, "[5, 40)", "32");
  CHECK_OK(ts_region_restrict(&r, 5, 20));
  CHECK(!strcmp(ts_region_str(&r, buf, sizeof buf), "(8,16)[0:8,4:8] elements [5, 20)"));
  ls = ts_region_local_shape(&r);
  CHECK(ls.ndim == 1 && ls.dims[0] == 15 && ts_region_numel(&r) == 15);
  CHECK_OK(ts_region_whole(&r, &s816));
  CHECK(ts_region_is_whole(&r) && !strcmp(ts_region_str(&r, buf, sizeof buf), "(8,16) whole"));
  CHECK_OK(ts_region_range(&r, &s816, 0, 128));
  CHECK(ts_region_is_whole(&r));
  CHECK_OK(ts_region_range(&r, &s816, 10, 20));
  CHECK(!ts_region_is_whole(&r) && !strcmp(ts_region_str(&r, buf, sizeof buf), "(8,16) elements [10, 20)"));
  ts_region q;
  ts_shape s127 = ts_shape1(127);
  CHECK_OK(ts_region_whole(&q, &s127));
  CHECK(ts_region_intersect(&r, &q, NULL, NULL) == TS_ESHAPE);
  ts_region bad = r;
  bad.hi = 1000;
  EXPECT_ERR(ts_region_check(&bad), TS_EINVAL, "[10, 1000)");
  bad = r;
  bad.ndim = 9;
  EXPECT_ERR(ts_region_check(&bad), TS_EINVAL, "9 dims");
  /* pieces */
  ts_piece_list l = {0};
  float data[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  CHECK_OK(ts_piece_list_add(&l, "param.w", TS_F32, &s816, &r, data));
  CHECK_OK(ts_piece_list_add_copy(&l, "optim.exp_avg.w", TS_F32, &s816, &r, data));
  EXPECT_ERR(ts_piece_list_add(&l, "param.x", TS_F32, &s127, &r, data), TS_EINVAL, "param.x", "(127)");
  CHECK(l.n == 2 && l.v[1].owned && l.v[1].data != data && ((float *)l.v[1].data)[9] == 10);
  CHECK(ts_piece_nbytes(&l.v[0]) == 40);
  CHECK(ts_piece_list_find(&l, "optim.exp_avg.w") == 1 && ts_piece_list_find(&l, "nope") == -1);
  ts_piece p0 = l.v[0], p1 = l.v[0];
  CHECK(ts_piece_hash(&p0) == ts_piece_hash(&p1));
  p1.region.lo = 11;
  CHECK(ts_piece_hash(&p0) != ts_piece_hash(&p1));
  p1 = p0;
  p1.name = "param.v";
  CHECK(ts_piece_hash(&p0) != ts_piece_hash(&p1));
  ts_piece_list_free(&l);
  CHECK(l.n == 0 && !l.v);
  free(ra);
  free(rb);
  return ts_test_finish("test_region");
}
