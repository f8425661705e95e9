/* 16-bit reductions, sum_to, broadcast_to and max backward (reduce.c ts__*_lp) against the f32
 * kernels on the same (16-bit representable) inputs, bf16 and f16. The native loops widen what
 * they read and run the f32 engine's helpers, so the tolerance is zero: every output equals the
 * f32 kernel's output rounded once to the dtype, bit for bit (sum, mean, max over every axis
 * subset of a 4-d tensor; runs longer than a sum chunk; kept-inner rows longer than a vector
 * chunk; few outputs (the reduced space split over threads); sum_to of dense-layer gradients;
 * broadcast_to; the max backward with ties). The f32 kernels themselves are checked against
 * naive double loops in tests/kernels/test_reduce.c. Each family's comparison is also shown
 * to fail on one corrupted output element. */
#include <stdlib.h>
#include <string.h>

#include "kernels/lowp.h"
#include "kernels/reduce.h"
#include "test_util.h"

static const char *names[3] = {"sum", "mean", "max"};
static int ncase;

static ts_shape kshape(ts_shape x, unsigned mask) {
  for (int d = 0; d < x.ndim; d++)
    if (mask >> d & 1) x.dims[d] = 1;
  return x;
}

/* n values in [lo,hi) rounded to dt (16-bit copy returned, *f the f32 copy); ties > 0 draws
 * from `ties` distinct values only (the max backward's ties) */
static uint16_t *mk(int64_t n, ts_dtype dt, uint64_t seed, int ties, float **f) {
  *f = malloc((size_t)n * 4);
  uint16_t *h = malloc((size_t)n * 2);
  ts_test_fill(*f, (size_t)n, seed, -1, 1);
  if (ties)
    for (int64_t i = 0; i < n; i++) (*f)[i] = (float)(int)((*f)[i] * (float)ties) / (float)ties;
  ts__lp_narrow(*f, h, dt, n);
  ts__lp_widen(h, dt, *f, n);
  return h;
}

/* number of elements of out (dt) that differ from ref rounded to dt */
static int64_t ndiff(const uint16_t *out, ts_dtype dt, const float *ref, int64_t n) {
  uint16_t *want = malloc((size_t)n * 2);
  ts__lp_narrow(ref, want, dt, n);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) bad += out[i] != want[i];
  free(want);
  return bad;
}

/* out == ref rounded, and a corrupted element of out is caught */
static void same(uint16_t *out, ts_dtype dt, const float *ref, int64_t n, const char *what) {
  int64_t bad = ndiff(out, dt, ref, n);
  CHECK_MSG(bad == 0, "%s: %lld of %lld elements differ from the rounded f32 result", what, (long long)bad,
            (long long)n);
  out[n / 2] ^= 0x0100;
  CHECK_MSG(ndiff(out, dt, ref, n) == bad + 1, "%s: a corrupted element is not caught", what);
  out[n / 2] ^= 0x0100;
}

static void one(ts_dtype dt, ts_shape xs, ts_shape ys) {
  const int64_t nx = ts_shape_numel(&xs), ny = ts_shape_numel(&ys);
  float *x, *y = malloc((size_t)(ny > 0 ? ny : 1) * 4);
  uint16_t *xh = mk(nx, dt, 17 + (uint64_t)nx, 0, &x), *yh = malloc((size_t)(ny > 0 ? ny : 1) * 2);
  for (int alg = 0; alg < 3; alg++) {
    char what[200], s1[64], s2[64];
    snprintf(what, sizeof what, "%s %s %s -> %s", ts_dtype_name(dt), names[alg], ts_shape_str(&xs, s1, sizeof s1),
             ts_shape_str(&ys, s2, sizeof s2));
    CHECK_OK(ts__reduce_ref(alg, x, &xs, y, &ys));
    memset(yh, 0xff, (size_t)ny * 2);
    CHECK_OK(ts__reduce_lp(alg, dt, xh, &xs, yh, &ys));
    same(yh, dt, y, ny, what);
  }
  ncase++;
  free(x), free(y), free(xh), free(yh);
}

static void broadcast(ts_dtype dt, ts_shape xs, ts_shape ys) {
  const int64_t nx = ts_shape_numel(&xs), ny = ts_shape_numel(&ys);
  float *x, *y = malloc((size_t)ny * 4);
  uint16_t *xh = mk(nx, dt, 5, 0, &x), *yh = malloc((size_t)ny * 2);
  char what[200], s1[64], s2[64];
  snprintf(what, sizeof what, "%s broadcast_to %s -> %s", ts_dtype_name(dt), ts_shape_str(&xs, s1, sizeof s1),
           ts_shape_str(&ys, s2, sizeof s2));
  CHECK_OK(ts__broadcast_ref(x, &xs, y, &ys));
  CHECK_OK(ts__broadcast_lp(dt, xh, &xs, yh, &ys));
  same(yh, dt, y, ny, what);
  free(x), free(y), free(xh), free(yh);
}

/* max over mask, then its backward, x drawn with ties */
static void max_bwd(ts_dtype dt, ts_shape xs, unsigned mask) {
  const ts_shape ys = kshape(xs, mask);
  const int64_t nx = ts_shape_numel(&xs), ny = ts_shape_numel(&ys);
  float *x, *dy, *y = malloc((size_t)ny * 4), *dx = malloc((size_t)nx * 4);
  uint16_t *xh = mk(nx, dt, 9, 4, &x), *dyh = mk(ny, dt, 10, 0, &dy), *yh = malloc((size_t)ny * 2),
           *dxh = malloc((size_t)nx * 2);
  char what[200], s1[64];
  snprintf(what, sizeof what, "%s max_bwd %s mask %u", ts_dtype_name(dt), ts_shape_str(&xs, s1, sizeof s1), mask);
  CHECK_OK(ts__reduce_lp(2, dt, xh, &xs, yh, &ys));
  ts__lp_widen(yh, dt, y, ny); /* exact: the max is one of the inputs */
  CHECK_OK(ts__reduce_max_bwd_ref(dy, x, &xs, y, &ys, dx));
  CHECK_OK(ts__reduce_max_bwd_lp(dt, dyh, xh, &xs, yh, &ys, dxh));
  same(dxh, dt, dx, nx, what);
  int64_t shared = 0; /* the case has ties: some gradient is split */
  for (int64_t i = 0; i < nx; i++) shared += dx[i] != 0;
  CHECK_MSG(shared > ny, "%s: no ties drawn", what);
  free(x), free(dy), free(y), free(dx), free(xh), free(dyh), free(yh), free(dxh);
}

int main(void) {
  const ts_dtype dts[2] = {TS_BF16, TS_F16};
  for (int i = 0; i < 2; i++) {
    const ts_dtype dt = dts[i];
    ts_shape s4 = ts_shape4(3, 5, 7, 11);
    for (unsigned m = 0; m < 16; m++) one(dt, s4, kshape(s4, m)); /* every axis subset */
    one(dt, ts_shape2(4, 6), ts_shape1(6));                        /* sum_to with fewer dims */
    one(dt, ts_shape3(2, 3, 4), ts_shape_make(0, NULL));            /* to a scalar */
    one(dt, ts_shape1(300000), ts_shape1(1));                       /* full, split over threads */
    one(dt, ts_shape2(70000, 3), ts_shape2(1, 3));                  /* few outputs, kept inner */
    one(dt, ts_shape2(3, 70000), ts_shape2(3, 1));                  /* few outputs, reduced inner */
    one(dt, ts_shape2(40, 5000), ts_shape2(40, 1));                 /* rows longer than a sum chunk */
    one(dt, ts_shape2(64, 1500), ts_shape2(1, 1500));               /* kept rows longer than a vector chunk */
    one(dt, ts_shape2(4096, 512), ts_shape1(512));                  /* sum_to: a GPT MLP bias gradient */
    one(dt, ts_shape4(8, 64, 14, 14), ts_shape3(64, 1, 1));         /* per-channel */
    one(dt, ts_shape3(1, 1, 5), ts_shape3(1, 1, 5));                /* nothing to reduce */
    broadcast(dt, ts_shape2(3, 1), ts_shape3(2, 3, 2));
    broadcast(dt, ts_shape1(512), ts_shape2(300, 512));
    broadcast(dt, ts_shape3(5, 1, 7), ts_shape4(2, 5, 3000, 7));
    broadcast(dt, ts_shape_make(0, NULL), ts_shape2(40, 50));
    max_bwd(dt, ts_shape3(6, 7, 9), 0x2);
    max_bwd(dt, ts_shape3(6, 7, 9), 0x5);
    max_bwd(dt, ts_shape2(300, 400), 0x1);
  }
  printf("reduce (16-bit): sum/mean/max over %d shape patterns, broadcast_to, max backward: bit for bit\n", ncase);
  /* bad input: a status, not a crash */
  uint16_t z[6] = {0};
  ts_shape xs = ts_shape2(2, 3), bad = ts_shape2(2, 2);
  CHECK(ts__reduce_lp(0, TS_BF16, z, &xs, z, &bad) == TS_ESHAPE);
  CHECK(ts__broadcast_lp(TS_BF16, z, &xs, z, &bad) == TS_ESHAPE);
  CHECK(ts__reduce_lp(0, TS_I32, z, &xs, z, &xs) == TS_EDTYPE);
  return ts_test_finish("test_reduce_bf16");
}
