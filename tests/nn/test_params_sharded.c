/* Sharded parameters (ts_params_add_sharded): every rank's slice, for every initialiser, shape,
 * device matrix and dividing tensor map, is bit for bit the matching block of the unsharded
 * parameter; all ranks' slices stitch back to the full tensor; accessors; refusals name the
 * parameter, the layout and the shape; unsharded entries in a mixed store are unchanged. */
#include <stdlib.h>
#include <string.h>

#include "tessera/tessera.h"
#include "test_util.h"

static int n_layouts, n_slices, n_elems;

/* Full tensor of parameter `name` from an unsharded store. */
static void full_values(const char *name, ts_shape s, ts_init init, uint64_t seed, float *out) {
  ts_params *p;
  CHECK_OK(ts_params_create(&p));
  int id = ts_params_add(p, name, s, init, 0);
  CHECK(id == 0);
  CHECK_OK(ts_params_alloc(p, seed));
  memcpy(out, ts_params_ptr(p, id), sizeof(float) * (size_t)ts_shape_numel(&s));
  ts_params_free(p);
}

/* Checks every rank of layout l against the full tensor, then the stitched tensor. */
static void check_layout(const char *name, ts_shape g, const ts_layout *l, ts_init init,
                         uint64_t seed, const float *full, float *stitch, unsigned char *seen) {
  int64_t n = ts_shape_numel(&g);
  memset(seen, 0, (size_t)n);
  int nd = ts_layout_ndevices(l);
  char ls[160];
  ts_layout_str(l, ls, sizeof ls);
  for (int r = 0; r < nd; r++) {
    ts_params *p;
    CHECK_OK(ts_params_create(&p));
    /* an unsharded neighbour on each side: offsets and their values must not be disturbed */
    ts_init u = {TS_INIT_UNIFORM, -1, 1, 0};
    int a = ts_params_add(p, "before", ts_shape1(5), u, 0);
    int id = ts_params_add_sharded(p, name, g, l, r, init, 0);
    CHECK_MSG(id == 1, "%s %s rank %d: %s", name, ls, r, ts_last_error());
    if (id != 1) {
      ts_params_free(p);
      continue;
    }
    int b = ts_params_add(p, "after", ts_shape1(3), u, TS_PARAM_NO_DECAY);
    CHECK_OK(ts_params_alloc(p, seed));
    ts_shape loc = ts_params_shape(p, id), want;
    CHECK_OK(ts_layout_local_shape(l, &g, &want));
    ts_shape gs = ts_params_global_shape(p, id);
    CHECK(ts_shape_equal(&loc, &want) && ts_shape_equal(&gs, &g));
    CHECK(ts_params_is_sharded(p, id) && !ts_params_is_sharded(p, a));
    CHECK(ts_params_layout(p, id) && ts_layout_equal(ts_params_layout(p, id), l));
    CHECK(ts_params_layout(p, a) == NULL && ts_params_shard_rank(p, id) == r &&
          ts_params_shard_rank(p, b) == -1);
    CHECK(ts_params_offset(p, id) == 5 &&
          ts_params_offset(p, b) == 5 + (size_t)ts_shape_numel(&loc) &&
          ts_params_numel(p) == 8 + (size_t)ts_shape_numel(&loc));
    CHECK(ts_params_find(p, name) == id);
    /* element by element: local index -> global index, compared bit for bit */
    int64_t off[TS_MAX_DIMS], idx[TS_MAX_DIMS] = {0};
    CHECK_OK(ts_layout_offsets(l, &g, r, off));
    const float *x = ts_params_ptr(p, id);
    int64_t ln = ts_shape_numel(&loc), bad = 0;
    for (int64_t k = 0; k < ln; k++) {
      int64_t gi = 0;
      for (int i = 0; i < g.ndim; i++) gi = gi * g.dims[i] + off[i] + idx[i];
      if (memcmp(&x[k], &full[gi], sizeof(float)) != 0) bad++;
      if (seen[gi] && memcmp(&stitch[gi], &x[k], sizeof(float)) != 0) bad++;
      stitch[gi] = x[k];
      seen[gi] = 1;
      for (int i = g.ndim - 1; i >= 0; i--) {
        if (++idx[i] < loc.dims[i]) break;
        idx[i] = 0;
      }
    }
    CHECK_MSG(bad == 0, "%s %s rank %d init %d: %lld elements differ", name, ls, r, (int)init.kind,
              (long long)bad);
    n_slices++;
    n_elems += (int)ln;
    ts_params_free(p);
  }
  int64_t missing = 0;
  for (int64_t i = 0; i < n; i++) missing += !seen[i];
  CHECK_MSG(missing == 0 && memcmp(stitch, full, sizeof(float) * (size_t)n) == 0,
            "%s %s: stitched slices differ from the full tensor (%lld missing)", name, ls,
            (long long)missing);
  n_layouts++;
}

/* Every tensor map over dev that divides g (each dim: -1 or an unused axis whose size divides). */
static void each_tmap(const char *name, ts_shape g, int ndev, const int *dev, int dim, int *tmap,
                      unsigned used, ts_init init, uint64_t seed, const float *full, float *stitch,
                      unsigned char *seen) {
  if (dim == g.ndim) {
    ts_layout l;
    CHECK_OK(ts_layout_init(&l, ndev, dev, g.ndim, tmap, 0));
    check_layout(name, g, &l, init, seed, full, stitch, seen);
    return;
  }
  tmap[dim] = -1;
  each_tmap(name, g, ndev, dev, dim + 1, tmap, used, init, seed, full, stitch, seen);
  for (int a = 0; a < ndev; a++) {
    if ((used >> a) & 1u || g.dims[dim] % dev[a]) continue;
    tmap[dim] = a;
    each_tmap(name, g, ndev, dev, dim + 1, tmap, used | (1u << a), init, seed, full, stitch,
              seen);
  }
}

/* ts_params_holders: on dev(2,4), a weight cut on both axes is held by 1 rank, on the inner axis
 * only by the 2 ranks that differ on the outer one, on the outer axis by 4, a whole one by all 8;
 * the same counts as ts_params_rank_partition's pieces give; refusals for a bad rank or device
 * count. */
static void check_holders(void) {
  ts_params *p;
  CHECK_OK(ts_params_create(&p));
  ts_init init = {TS_INIT_NORMAL, 0, 1, 0};
  int dev[2] = {2, 4}, maps[3][2] = {{0, 1}, {-1, 1}, {0, -1}}, want[3] = {1, 2, 4};
  char name[32];
  for (int k = 0; k < 3; k++) {
    ts_layout l;
    CHECK_OK(ts_layout_init(&l, 2, dev, 2, maps[k], 0));
    snprintf(name, sizeof name, "w%d", k);
    CHECK(ts_params_add_sharded(p, name, ts_shape2(8, 8), &l, 0, init, 0) == k);
  }
  CHECK(ts_params_add(p, "whole", ts_shape2(8, 8), init, 0) == 3);
  for (int k = 0; k < 4; k++) {
    int part[8];
    CHECK(ts_params_rank_partition(p, k, 8, part) > 0);
    for (int r = 0; r < 8; r++) {
      int same = 0;
      for (int q = 0; q < 8; q++) same += part[q] == part[r];
      int h = ts_params_holders(p, k, 8, r);
      CHECK_MSG(h == (k < 3 ? want[k] : 8) && h == same, "entry %d rank %d: %d holders, want %d", k, r, h,
                k < 3 ? want[k] : 8);
    }
  }
  CHECK(ts_params_holders(p, 0, 8, 8) == TS_EINVAL && ts_params_holders(p, 0, 8, -1) == TS_EINVAL);
  CHECK(ts_params_holders(p, 0, 4, 0) == TS_EINVAL && strstr(ts_last_error(), "w0"));
  CHECK(ts_params_holders(p, 9, 8, 0) == TS_EINVAL);
  ts_params_free(p);
}

static void check_refusals(void) {
  ts_params *p;
  CHECK_OK(ts_params_create(&p));
  ts_init init = {TS_INIT_NORMAL, 0, 1, 0};
  ts_layout l;
  int dev[2] = {2, 4}, tm[2] = {0, 1};
  CHECK_OK(ts_layout_init(&l, 2, dev, 2, tm, 0));
  const char *e;

  /* 6 columns cannot be cut in 4 */
  CHECK(ts_params_add_sharded(p, "fc.weight", ts_shape2(8, 6), &l, 0, init, 0) == TS_ESHAPE);
  e = ts_last_error();
  CHECK_MSG(strstr(e, "fc.weight") && strstr(e, "dev(2,4)") && strstr(e, "(8,6)") && strstr(e, "divisible"), "%s", e);
  /* partial mask */
  ts_layout lp;
  int tmp[2] = {-1, 1};
  CHECK_OK(ts_layout_init(&lp, 2, dev, 2, tmp, 1u));
  CHECK(ts_params_add_sharded(p, "fc.weight", ts_shape2(8, 8), &lp, 0, init, 0) == TS_EINVAL);
  e = ts_last_error();
  CHECK_MSG(strstr(e, "fc.weight") && strstr(e, "partial") && strstr(e, "dev(2,4)") && strstr(e, "(8,8)"), "%s", e);
  /* ranks outside 0..7 */
  CHECK(ts_params_add_sharded(p, "fc.weight", ts_shape2(8, 8), &l, 8, init, 0) == TS_EINVAL);
  e = ts_last_error();
  CHECK_MSG(strstr(e, "fc.weight") && strstr(e, "rank 8") && strstr(e, "dev(2,4)") && strstr(e, "(8,8)"), "%s", e);
  CHECK(ts_params_add_sharded(p, "fc.weight", ts_shape2(8, 8), &l, -1, init, 0) == TS_EINVAL);
  CHECK_MSG(strstr(ts_last_error(), "fc.weight") != NULL, "%s", ts_last_error());
  /* dims mismatch, NULL layout, invalid layout, non-positive dims */
  CHECK(ts_params_add_sharded(p, "conv.weight", ts_shape3(8, 8, 3), &l, 0, init, 0) == TS_ESHAPE);
  e = ts_last_error();
  CHECK_MSG(strstr(e, "conv.weight") && strstr(e, "dev(2,4)"), "%s", e);
  CHECK(ts_params_add_sharded(p, "fc.weight", ts_shape2(8, 8), NULL, 0, init, 0) == TS_EINVAL);
  CHECK_MSG(strstr(ts_last_error(), "fc.weight") != NULL, "%s", ts_last_error());
  ts_layout bad = l;
  bad.tmap[1] = 0; /* axis 0 cuts two dims */
  CHECK(ts_params_add_sharded(p, "fc.weight", ts_shape2(8, 8), &bad, 0, init, 0) == TS_EINVAL);
  CHECK_MSG(strstr(ts_last_error(), "fc.weight") != NULL, "%s", ts_last_error());
  CHECK(ts_params_add_sharded(p, "fc.weight", ts_shape2(0, 8), &l, 0, init, 0) == TS_ESHAPE);
  CHECK_MSG(strstr(ts_last_error(), "fc.weight") != NULL, "%s", ts_last_error());
  CHECK(ts_params_count(p) == 0 && ts_params_numel(p) == 0);
  /* duplicates (either way) and after alloc */
  CHECK(ts_params_add_sharded(p, "fc.weight", ts_shape2(8, 8), &l, 5, init, 0) == 0);
  CHECK(ts_params_add_sharded(p, "fc.weight", ts_shape2(8, 8), &l, 5, init, 0) == TS_EINVAL);
  CHECK(strstr(ts_last_error(), "duplicate") && strstr(ts_last_error(), "fc.weight"));
  CHECK(ts_params_add(p, "fc.weight", ts_shape2(4, 2), init, 0) == TS_EINVAL);
  CHECK(ts_params_numel(p) == 8); /* local 4x2 */
  CHECK_OK(ts_params_alloc(p, 3));
  CHECK(ts_params_add_sharded(p, "fc.bias", ts_shape1(8), &l, 0, init, 0) < 0);
  CHECK(strstr(ts_last_error(), "fc.bias") && strstr(ts_last_error(), "after"));
  /* accessors on invalid ids */
  CHECK(ts_params_layout(p, 7) == NULL && !ts_params_is_sharded(p, -1) &&
        ts_params_global_shape(p, 9).ndim == 0 && ts_params_shard_rank(p, 9) == -1);
  ts_params_free(p);
}

/* A store mixing unsharded entries with a sharded one holds the same unsharded values as a store
 * without it, and a replicated layout (nothing cut) equals the full tensor. */
static void check_mixed(void) {
  ts_init kn = {TS_INIT_KAIMING_UNIFORM, 0, 0, 0}, tb = {TS_INIT_TORCH_DEFAULT, 0, 0, 12};
  ts_params *a, *b;
  CHECK_OK(ts_params_create(&a));
  CHECK_OK(ts_params_create(&b));
  ts_layout l, rep;
  int dev[2] = {2, 2}, tm[2] = {1, 0};
  CHECK_OK(ts_layout_init(&l, 2, dev, 2, tm, 0));
  CHECK_OK(ts_layout_replicated(&rep, 2, dev, 1));
  CHECK(ts_params_add(a, "l1.weight", ts_shape2(6, 12), kn, 0) == 0);
  CHECK(ts_params_add(a, "l1.bias", ts_shape1(6), tb, 0) == 1);
  CHECK(ts_params_add(b, "l1.weight", ts_shape2(6, 12), kn, 0) == 0);
  CHECK(ts_params_add_sharded(b, "l2.weight", ts_shape2(8, 4), &l, 3, kn, 0) == 1);
  CHECK(ts_params_add(b, "l1.bias", ts_shape1(6), tb, 0) == 2);
  CHECK(ts_params_add_sharded(b, "l2.bias", ts_shape1(8), &rep, 2, tb, 0) == 3);
  CHECK_OK(ts_params_alloc(a, 11));
  CHECK_OK(ts_params_alloc(b, 11));
  CHECK(memcmp(ts_params_ptr(a, 0), ts_params_ptr(b, 0), sizeof(float) * 72) == 0);
  CHECK(memcmp(ts_params_ptr(a, 1), ts_params_ptr(b, 2), sizeof(float) * 6) == 0);
  ts_shape g = ts_params_global_shape(b, 0), s = ts_params_shape(b, 3);
  CHECK(ts_shape_equal(&g, &(ts_shape){2, {6, 12}}) && s.ndim == 1 && s.dims[0] == 8);
  float full[8];
  full_values("l2.bias", ts_shape1(8), tb, 11, full);
  CHECK(memcmp(full, ts_params_ptr(b, 3), sizeof full) == 0);
  ts_params_free(a);
  ts_params_free(b);
}

int main(void) {
  ts_init inits[] = {
      {TS_INIT_UNIFORM, -0.5f, 2.0f, 0},  {TS_INIT_NORMAL, 0.25f, 3.0f, 0},
      {TS_INIT_KAIMING_UNIFORM, 0, 0, 0}, {TS_INIT_KAIMING_NORMAL, 0.1f, 0, 0},
      {TS_INIT_XAVIER_UNIFORM, 0, 0, 0},  {TS_INIT_XAVIER_NORMAL, 2.0f, 0, 0},
      {TS_INIT_CONST, 0.75f, 0, 0},       {TS_INIT_TORCH_DEFAULT, 0, 0, 0},
      {TS_INIT_TRUNC_NORMAL, 0.1f, 0.02f, 0},
  };
  int ninit = (int)(sizeof inits / sizeof inits[0]);
  ts_shape shapes[] = {ts_shape2(8, 12), ts_shape3(4, 6, 8), ts_shape4(8, 4, 3, 3),
                       ts_shape4(4, 8, 2, 4)};
  const char *names[] = {"fc.weight", "attn.qkv", "conv1.weight", "conv2.weight"};
  struct {
    int n, d[3];
  } devs[] = {{1, {2}}, {1, {4}}, {2, {2, 2}}, {2, {2, 4}}, {3, {2, 2, 2}}};
  float *full = malloc(sizeof(float) * 4096), *stitch = malloc(sizeof(float) * 4096);
  unsigned char *seen = malloc(4096);
  for (int si = 0; si < 4; si++)
    for (int k = 0; k < ninit; k++) {
      uint64_t seed = 1234 + (uint64_t)k;
      full_values(names[si], shapes[si], inits[k], seed, full);
      for (int d = 0; d < 5; d++) {
        int tmap[TS_MAX_DIMS];
        each_tmap(names[si], shapes[si], devs[d].n, devs[d].d, 0, tmap, 0, inits[k], seed, full,
                  stitch, seen);
      }
    }
  printf("checked: %d (shape, init, layout) cases, %d rank slices (%d elements) bit-equal to the "
         "unsharded parameter and stitching back to it, for %d initialisers x 2-D/3-D/4-D shapes x "
         "dev (2),(4),(2,2),(2,4),(2,2,2) with every dividing tensor map; local/global shape, "
         "layout, rank, offset accessors\n",
         n_layouts, n_slices, n_elems, ninit);
  check_mixed();
  printf("checked: unsharded entries unchanged next to sharded ones; replicated layout == full\n");
  check_holders();
  check_refusals();
  printf("checked: refusals (indivisible, partial, bad rank, dims mismatch, NULL/invalid layout, "
         "non-positive dim, duplicate, after alloc) name the parameter, layout and shape\n");
  free(full);
  free(stitch);
  free(seen);
  return ts_test_finish("test_params_sharded");
}
