/* Layout algebra (include/tessera/layout.h): local shapes and offsets against hand-computed
 * cases and against a brute-force ownership count, validation errors (code and message naming
 * the entry), MindSpore tensor-map conversions, text form, device groups, common refinement of
 * device matrices. */
#include <string.h>

#include "tessera/layout.h"
#include "test_util.h"

#define NOPART 0u


/* ---- local shapes and offsets, by hand ---- */
static void test_hand_slices(void) {
  ts_layout l;
  ts_shape ls;
  int64_t off[TS_MAX_DIMS];
  char buf[128];

  /* dev (2,4), map (1,-1), 8x6: rank r = (r/4, r%4) holds rows [2*(r%4), +2), all columns */
  CHECK_OK(ts_layout_init(&l, 2, (int[]){2, 4}, 2, (int[]){1, -1}, NOPART));
  ts_shape g = ts_shape2(8, 6);
  CHECK_OK(ts_layout_local_shape(&l, &g, &ls));
  CHECK_MSG(ls.ndim == 2 && ls.dims[0] == 2 && ls.dims[1] == 6, "local %s", ts_shape_str(&ls, buf, sizeof buf));
  for (int r = 0; r < 8; r++) {
    CHECK_OK(ts_layout_offsets(&l, &g, r, off));
    CHECK_MSG(off[0] == 2 * (r % 4) && off[1] == 0, "rank %d offsets (%lld,%lld)", r,
              (long long)off[0], (long long)off[1]);
  }
  int co[TS_LAYOUT_MAX_AXES];
  CHECK_OK(ts_layout_rank_coords(&l, 6, co));
  CHECK(co[0] == 1 && co[1] == 2);
  CHECK(ts_layout_ndevices(&l) == 8);
  CHECK(ts_layout_dim_cut(&l, 0) == 4 && ts_layout_dim_cut(&l, 1) == 1 && ts_layout_dim_cut(&l, 2) == 0);

  /* dev (2,4), map (0,1), 8x8: local 4x2; rank 5 = (1,1) at (4,2); rank 7 = (1,3) at (4,6) */
  CHECK_OK(ts_layout_init(&l, 2, (int[]){2, 4}, 2, (int[]){0, 1}, NOPART));
  g = ts_shape2(8, 8);
  CHECK_OK(ts_layout_local_shape(&l, &g, &ls));
  CHECK(ls.dims[0] == 4 && ls.dims[1] == 2);
  static const int64_t want01[8][2] = {{0, 0}, {0, 2}, {0, 4}, {0, 6},
                                       {4, 0}, {4, 2}, {4, 4}, {4, 6}};
  for (int r = 0; r < 8; r++) {
    CHECK_OK(ts_layout_offsets(&l, &g, r, off));
    CHECK_MSG(off[0] == want01[r][0] && off[1] == want01[r][1], "map(0,1) rank %d: (%lld,%lld)", r,
              (long long)off[0], (long long)off[1]);
  }

  /* dev (2,2,2), map (2,-1,0), 4x6x8: local 2x6x4; rank r = (r/4, r/2%2, r%2):
   * dim 0 offset 2*(r%2), dim 2 offset 4*(r/4) */
  CHECK_OK(ts_layout_init(&l, 3, (int[]){2, 2, 2}, 3, (int[]){2, -1, 0}, NOPART));
  g = ts_shape3(4, 6, 8);
  CHECK_OK(ts_layout_local_shape(&l, &g, &ls));
  CHECK(ls.ndim == 3 && ls.dims[0] == 2 && ls.dims[1] == 6 && ls.dims[2] == 4);
  for (int r = 0; r < 8; r++) {
    CHECK_OK(ts_layout_offsets(&l, &g, r, off));
    CHECK_MSG(off[0] == 2 * (r % 2) && off[1] == 0 && off[2] == 4 * (r / 4),
              "map(2,-1,0) rank %d: (%lld,%lld,%lld)", r, (long long)off[0], (long long)off[1],
              (long long)off[2]);
  }

  /* a partial layout has the replicated slice on its partial axis: dev (2,4) map(-1,1)
   * partial{0}, 8x8: rank 6 = (1,2) holds columns [4,6) */
  CHECK_OK(ts_layout_init(&l, 2, (int[]){2, 4}, 2, (int[]){-1, 1}, 1u));
  EXPECT_ERR(ts_layout_offsets(&l, &g, 6, off), TS_ESHAPE, "2 dims", "(4,6,8)"); /* g is 3-d */
  g = ts_shape2(8, 8);
  CHECK_OK(ts_layout_offsets(&l, &g, 6, off));
  CHECK(off[0] == 0 && off[1] == 4);
  CHECK_OK(ts_layout_local_shape(&l, &g, &ls));
  CHECK(ls.dims[0] == 8 && ls.dims[1] == 2);

  /* a scalar */
  CHECK_OK(ts_layout_init(&l, 1, (int[]){4}, 0, NULL, 1u));
  ts_shape sc = ts_shape_make(0, NULL);
  CHECK_OK(ts_layout_local_shape(&l, &sc, &ls));
  CHECK(ls.ndim == 0 && ts_shape_numel(&ls) == 1);

  /* replicated */
  CHECK_OK(ts_layout_replicated(&l, 2, (int[]){2, 2}, 3));
  CHECK(l.ndim == 3 && l.tmap[0] == -1 && l.tmap[1] == -1 && l.tmap[2] == -1 && l.partial == 0);
  printf("hand-computed local shapes and offsets: 3 layouts x 8 ranks, partial, scalar\n");
}

/* ---- brute force: every element of the global tensor is held by exactly dev-product/cut ranks,
 * and each rank holds a box of the local shape at its offsets ---- */
static void test_ownership(void) {
  const int nds[] = {1, 1, 2, 2, 3};
  const int dm[][3] = {{2}, {8}, {2, 4}, {4, 2}, {2, 2, 2}};
  ts_shape g = ts_shape3(8, 8, 8);
  int count[512];
  int layouts = 0;
  for (int d = 0; d < 5; d++) {
    int nd = nds[d];
    for (int m = 0; m < (nd + 1) * (nd + 1) * (nd + 1); m++) {
      int tmap[3] = {m % (nd + 1) - 1, m / (nd + 1) % (nd + 1) - 1, m / (nd + 1) / (nd + 1) - 1};
      ts_layout l;
      int rc = ts_layout_init(&l, nd, dm[d], 3, tmap, NOPART);
      int dup = (tmap[0] >= 0 && (tmap[0] == tmap[1] || tmap[0] == tmap[2])) ||
                (tmap[1] >= 0 && tmap[1] == tmap[2]);
      CHECK_MSG((rc == TS_OK) == !dup, "map (%d,%d,%d): rc %d", tmap[0], tmap[1], tmap[2], rc);
      if (rc) continue;
      layouts++;
      memset(count, 0, sizeof count);
      ts_shape ls;
      CHECK_OK(ts_layout_local_shape(&l, &g, &ls));
      int P = ts_layout_ndevices(&l), cut = 1;
      for (int i = 0; i < 3; i++) cut *= ts_layout_dim_cut(&l, i);
      for (int r = 0; r < P; r++) {
        int64_t off[3];
        CHECK_OK(ts_layout_offsets(&l, &g, r, off));
        int inside = 1;
        for (int i = 0; i < 3; i++) inside &= off[i] >= 0 && off[i] + ls.dims[i] <= g.dims[i];
        CHECK_MSG(inside, "rank %d box outside the tensor", r);
        if (!inside) continue;
        for (int64_t a = 0; a < ls.dims[0]; a++)
          for (int64_t b = 0; b < ls.dims[1]; b++)
            for (int64_t c = 0; c < ls.dims[2]; c++)
              count[((off[0] + a) * 8 + off[1] + b) * 8 + off[2] + c]++;
      }
      int bad = 0;
      for (int e = 0; e < 512; e++) bad += count[e] != P / cut;
      CHECK_MSG(bad == 0, "dev #%d map (%d,%d,%d): %d elements not held by %d ranks", d, tmap[0],
                tmap[1], tmap[2], bad, P / cut);
    }
  }
  printf("ownership: %d valid 3-d layouts over 5 device matrices, each element held by N/cut ranks\n",
         layouts);
}

/* ---- errors ---- */
static void test_errors(void) {
  ts_layout l;
  ts_shape ls;
  int64_t off[8];
  ts_shape g86 = ts_shape2(8, 6);

  CHECK_OK(ts_layout_init(&l, 2, (int[]){2, 4}, 2, (int[]){0, 1}, NOPART));
  EXPECT_ERR(ts_layout_local_shape(&l, &g86, &ls), TS_ESHAPE, "dim 1", "size 6", "cut 4",
             "device axis 1", "dev(2,4) map(0,1)");
  EXPECT_ERR(ts_layout_check_shape(&l, &g86), TS_ESHAPE, "dim 1", "size 6");
  EXPECT_ERR(ts_layout_offsets(&l, &g86, 0, off), TS_ESHAPE, "dim 1");
  ts_shape g3 = ts_shape3(8, 8, 8);
  EXPECT_ERR(ts_layout_check_shape(&l, &g3), TS_ESHAPE, "2 dims", "(8,8,8)", "3");
  ts_shape g88 = ts_shape2(8, 8);
  EXPECT_ERR(ts_layout_offsets(&l, &g88, 8, off), TS_EINVAL, "rank 8", "0..7");
  EXPECT_ERR(ts_layout_offsets(&l, &g88, -1, off), TS_EINVAL, "rank -1");

  EXPECT_ERR(ts_layout_init(&l, 2, (int[]){2, 4}, 2, (int[]){1, 1}, NOPART), TS_EINVAL,
             "device axis 1", "dim 0", "dim 1");
  EXPECT_ERR(ts_layout_init(&l, 3, (int[]){2, 2, 2}, 3, (int[]){-1, 2, 2}, NOPART), TS_EINVAL,
             "device axis 2", "dim 1", "dim 2");
  EXPECT_ERR(ts_layout_init(&l, 2, (int[]){2, 4}, 2, (int[]){2, -1}, NOPART), TS_EINVAL,
             "entry 0", "is 2", "-1..1");
  EXPECT_ERR(ts_layout_init(&l, 2, (int[]){2, 4}, 3, (int[]){-1, -1, -2}, NOPART), TS_EINVAL,
             "entry 2", "is -2");
  EXPECT_ERR(ts_layout_init(&l, 2, (int[]){2, 4}, 2, (int[]){0, -1}, 1u), TS_EINVAL,
             "device axis 0", "dim 0", "partial");
  EXPECT_ERR(ts_layout_init(&l, 2, (int[]){2, 4}, 2, (int[]){-1, 1}, 2u), TS_EINVAL,
             "device axis 1", "dim 1", "partial");
  EXPECT_ERR(ts_layout_init(&l, 2, (int[]){2, 4}, 1, (int[]){-1}, 4u), TS_EINVAL, "partial mask",
             "0x4");
  EXPECT_ERR(ts_layout_init(&l, 2, (int[]){2, 0}, 1, (int[]){-1}, NOPART), TS_EINVAL, "axis 1",
             "size 0");
  EXPECT_ERR(ts_layout_init(&l, 0, (int[]){2}, 1, (int[]){-1}, NOPART), TS_EINVAL, "0 axes");
  EXPECT_ERR(ts_layout_init(&l, 9, (int[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, 1, (int[]){-1}, NOPART),
             TS_EINVAL, "9 axes");
  EXPECT_ERR(ts_layout_init(&l, 1, (int[]){2}, 9, (int[]){-1, -1, -1, -1, -1, -1, -1, -1, -1},
                            NOPART),
             TS_EINVAL, "9 dims");
  EXPECT_ERR(ts_layout_init(&l, 2, (int[]){65536, 65536}, 1, (int[]){-1}, NOPART), TS_EINVAL,
             "devices");
  EXPECT_ERR(ts_layout_validate(NULL), TS_EINVAL, "NULL");
  /* validate catches a struct edited by hand */
  CHECK_OK(ts_layout_init(&l, 2, (int[]){2, 4}, 2, (int[]){0, -1}, NOPART));
  l.tmap[1] = 0;
  EXPECT_ERR(ts_layout_validate(&l), TS_EINVAL, "device axis 0", "dim 0", "dim 1");
  CHECK_OK(ts_layout_init(&l, 2, (int[]){2, 4}, 2, (int[]){0, -1}, NOPART));
  EXPECT_ERR(ts_layout_axis_group(&l, 0, 2, (int[8]){0}), TS_EINVAL, "device axis 2");
  printf("errors: indivisible dim, rank range, axis twice, axis out of range, partial+cut, "
         "bad mask, bad device matrix: codes and messages\n");
}

/* ---- equality ---- */
static void test_equal(void) {
  ts_layout a, b;
  CHECK_OK(ts_layout_init(&a, 2, (int[]){2, 4}, 2, (int[]){1, -1}, 1u));
  CHECK_OK(ts_layout_init(&b, 2, (int[]){2, 4}, 2, (int[]){1, -1}, 1u));
  CHECK(ts_layout_equal(&a, &b));
  b.partial = 0;
  CHECK(!ts_layout_equal(&a, &b));
  CHECK_OK(ts_layout_init(&b, 2, (int[]){4, 2}, 2, (int[]){1, -1}, 1u));
  CHECK(!ts_layout_equal(&a, &b));
  CHECK_OK(ts_layout_init(&b, 2, (int[]){2, 4}, 2, (int[]){-1, 1}, 1u));
  CHECK(!ts_layout_equal(&a, &b));
  CHECK_OK(ts_layout_init(&b, 2, (int[]){2, 4}, 3, (int[]){1, -1, -1}, 1u));
  CHECK(!ts_layout_equal(&a, &b));
  CHECK_OK(ts_layout_init(&b, 3, (int[]){2, 4, 1}, 2, (int[]){1, -1}, 1u));
  CHECK(!ts_layout_equal(&a, &b));
  /* entries past ndev/ndim do not matter */
  CHECK_OK(ts_layout_init(&b, 2, (int[]){2, 4}, 2, (int[]){1, -1}, 1u));
  b.dev[5] = 7;
  b.tmap[6] = 3;
  CHECK(ts_layout_equal(&a, &b));
  printf("equality: device matrix, map, partial mask, ndim each distinguish\n");
}

/* ---- MindSpore conversions ---- */
static void test_mindspore(void) {
  int t[8], ms[8], back[8];
  /* dev of 3 axes: MindSpore 2 = our 0, 0 = our 2 */
  CHECK_OK(ts_layout_tmap_from_mindspore(3, 3, (int[]){2, -1, 0}, t));
  CHECK(t[0] == 0 && t[1] == -1 && t[2] == 2);
  CHECK_OK(ts_layout_tmap_to_mindspore(2, 2, (int[]){1, -1}, ms));
  CHECK(ms[0] == 0 && ms[1] == -1);
  /* MindSpore's usual MatMul example: dev (2,4), weight map (1,0) in MindSpore = our (0,1) */
  CHECK_OK(ts_layout_tmap_from_mindspore(2, 2, (int[]){1, 0}, t));
  CHECK(t[0] == 0 && t[1] == 1);
  /* in place */
  int io[2] = {1, -1};
  CHECK_OK(ts_layout_tmap_from_mindspore(4, 2, io, io));
  CHECK(io[0] == 2 && io[1] == -1);
  int n = 0;
  for (int nd = 1; nd <= 4; nd++)
    for (int m = 0; m < (nd + 1) * (nd + 1) * (nd + 1); m++) {
      int tm[3] = {m % (nd + 1) - 1, m / (nd + 1) % (nd + 1) - 1, m / (nd + 1) / (nd + 1) - 1};
      CHECK_OK(ts_layout_tmap_to_mindspore(nd, 3, tm, ms));
      CHECK_OK(ts_layout_tmap_from_mindspore(nd, 3, ms, back));
      int ok = 1;
      for (int i = 0; i < 3; i++)
        ok &= back[i] == tm[i] && (tm[i] < 0 ? ms[i] == -1 : ms[i] == nd - 1 - tm[i]);
      CHECK_MSG(ok, "nd %d map (%d,%d,%d) -> ms (%d,%d,%d) -> (%d,%d,%d)", nd, tm[0], tm[1], tm[2],
                ms[0], ms[1], ms[2], back[0], back[1], back[2]);
      n++;
    }
  EXPECT_ERR(ts_layout_tmap_from_mindspore(2, 3, (int[]){0, 2, -1}, t), TS_EINVAL, "entry 1",
             "is 2", "-1..1");
  EXPECT_ERR(ts_layout_tmap_to_mindspore(2, 2, (int[]){-3, 0}, t), TS_EINVAL, "entry 0", "is -3");
  EXPECT_ERR(ts_layout_tmap_to_mindspore(0, 2, (int[]){-1, 0}, t), TS_EINVAL, "0 axes");
  printf("MindSpore tensor maps: %d maps round-trip, hand cases, bad entries refused\n", n);
}

/* ---- text form ---- */
static void test_str(void) {
  ts_layout l;
  char buf[128];
  CHECK_OK(ts_layout_init(&l, 2, (int[]){2, 4}, 2, (int[]){1, -1}, 1u));
  CHECK_MSG(!strcmp(ts_layout_str(&l, buf, sizeof buf), "dev(2,4) map(1,-1) partial{0}"), "%s", buf);
  CHECK_OK(ts_layout_init(&l, 3, (int[]){2, 2, 2}, 3, (int[]){-1, 2, -1}, 3u));
  CHECK_MSG(!strcmp(ts_layout_str(&l, buf, sizeof buf), "dev(2,2,2) map(-1,2,-1) partial{0,1}"),
            "%s", buf);
  CHECK_OK(ts_layout_init(&l, 1, (int[]){8}, 0, NULL, 0));
  CHECK_MSG(!strcmp(ts_layout_str(&l, buf, sizeof buf), "dev(8) map()"), "%s", buf);
  CHECK_OK(ts_layout_init(&l, 2, (int[]){2, 4}, 2, (int[]){1, -1}, 1u));
  char small[8];
  memset(small, 'x', sizeof small);
  ts_layout_str(&l, small, sizeof small);
  CHECK_MSG(!strcmp(small, "dev(2,4"), "truncated: %.8s", small);
  printf("text form: \"dev(2,4) map(1,-1) partial{0}\", several axes, scalar, truncation\n");
}

/* ---- groups ---- */
static void test_groups(void) {
  ts_layout l;
  int m[8];
  CHECK_OK(ts_layout_init(&l, 2, (int[]){2, 4}, 1, (int[]){-1}, 0));
  CHECK_OK(ts_layout_axis_group(&l, 6, 0, m));
  CHECK(m[0] == 2 && m[1] == 6);
  CHECK_OK(ts_layout_axis_group(&l, 6, 1, m));
  CHECK(m[0] == 4 && m[1] == 5 && m[2] == 6 && m[3] == 7);
  CHECK_OK(ts_layout_init(&l, 3, (int[]){2, 2, 2}, 1, (int[]){-1}, 0));
  CHECK_OK(ts_layout_axis_group(&l, 5, 1, m)); /* 5 = (1,0,1): (1,0,1),(1,1,1) = 5,7 */
  CHECK(m[0] == 5 && m[1] == 7);
  CHECK_OK(ts_layout_axis_group(&l, 3, 0, m)); /* 3 = (0,1,1): 3, 7 */
  CHECK(m[0] == 3 && m[1] == 7);
  printf("device groups: dev(2,4) rows/columns, dev(2,2,2) middle and first axes\n");
}

/* ---- common refinement ---- */
static void expect_refine(int line, int na, const int *a, int nb, const int *b, int nw,
                          const int *w) {
  int out[8], n = -1;
  int rc = ts_layout_common_devmat(na, a, nb, b, &n, out);
  int ok = rc == TS_OK && n == nw;
  for (int k = 0; ok && k < n; k++) ok = out[k] == w[k];
  ts_test_checks++;
  if (!ok) {
    ts_test_failures++;
    fprintf(stderr, "%s:%d: common_devmat: rc %d (%s), %d axes:", __FILE__, line, rc,
            ts_last_error(), n);
    for (int k = 0; k >= 0 && k < n && k < 8; k++) fprintf(stderr, " %d", out[k]);
    fputc('\n', stderr);
  }
}
#define EXPECT_REFINE(...) expect_refine(__LINE__, __VA_ARGS__)

static void test_refine(void) {
  EXPECT_REFINE(1, (int[]){4}, 2, (int[]){2, 2}, 2, (int[]){2, 2});
  EXPECT_REFINE(2, (int[]){2, 2}, 1, (int[]){4}, 2, (int[]){2, 2});
  EXPECT_REFINE(1, (int[]){8}, 2, (int[]){2, 4}, 2, (int[]){2, 4});
  EXPECT_REFINE(1, (int[]){8}, 3, (int[]){2, 2, 2}, 3, (int[]){2, 2, 2});
  EXPECT_REFINE(2, (int[]){2, 4}, 2, (int[]){4, 2}, 3, (int[]){2, 2, 2});
  EXPECT_REFINE(2, (int[]){2, 4}, 2, (int[]){2, 4}, 2, (int[]){2, 4});
  EXPECT_REFINE(2, (int[]){1, 4}, 2, (int[]){4, 1}, 1, (int[]){4});
  EXPECT_REFINE(1, (int[]){1}, 2, (int[]){1, 1}, 1, (int[]){1});
  EXPECT_REFINE(1, (int[]){6}, 2, (int[]){2, 3}, 2, (int[]){2, 3});
  EXPECT_REFINE(2, (int[]){4, 4}, 2, (int[]){2, 8}, 3, (int[]){2, 2, 4});
  EXPECT_REFINE(8, (int[]){2, 2, 2, 2, 2, 2, 2, 2}, 1, (int[]){256}, 8, (int[]){2, 2, 2, 2, 2, 2, 2, 2});
  int out[8], n;
  EXPECT_ERR(ts_layout_common_devmat(2, (int[]){2, 3}, 2, (int[]){3, 2}, &n, out), TS_EUNSUPPORTED,
             "(2,3)", "(3,2)", "no common refinement");
  EXPECT_ERR(ts_layout_common_devmat(1, (int[]){4}, 2, (int[]){2, 4}, &n, out), TS_EINVAL,
             "(4)", "(2,4)", "device count");
  EXPECT_ERR(ts_layout_common_devmat(8, (int[]){4, 4, 4, 4, 4, 4, 4, 4}, 8,
                                     (int[]){2, 4, 4, 4, 4, 4, 4, 8}, &n, out),
             TS_ERANGE, "more than 8 axes");
  EXPECT_ERR(ts_layout_common_devmat(1, (int[]){0}, 1, (int[]){0}, &n, out), TS_EINVAL, "size 0");
  printf("common device matrices: 11 refinements, no-refinement / count / too-many-axes errors\n");
}

int main(void) {
  test_hand_slices();
  test_ownership();
  test_errors();
  test_equal();
  test_mindspore();
  test_str();
  test_groups();
  test_refine();
  return ts_test_finish("test_layout");
}
