/* Reduction kernels: reference vs naive double loops and vs oneDNN over many axis patterns
 * (inner reduced / inner kept, few / many outputs), broadcast_to, max backward with ties. */
#include <stdlib.h>
#include <string.h>

#include "kernels/reduce.h"
#include "test_util.h"

static const char *names[3] = {"sum", "mean", "max"};

/* keepdim shape of x reduced over mask */
static ts_shape kshape(ts_shape x, unsigned mask) {
  for (int d = 0; d < x.ndim; d++)
    if (mask >> d & 1) x.dims[d] = 1;
  return x;
}

static void naive(int alg, const float *x, const ts_shape *xs, double *y, const ts_shape *ys) {
  int64_t ny = ts_shape_numel(ys), nx = ts_shape_numel(xs);
  int64_t *cnt = calloc(ny, 8);
  for (int64_t o = 0; o < ny; o++) y[o] = alg == 2 ? -INFINITY : 0;
  for (int64_t i = 0; i < nx; i++) {
    int64_t r = i, o = 0, so = 1;
    for (int d = xs->ndim - 1; d >= 0; d--) {
      int64_t k = r % xs->dims[d];
      r /= xs->dims[d];
      int yd = d - (xs->ndim - ys->ndim);
      if (yd >= 0) {
        if (ys->dims[yd] != 1) o += k * so;
        so *= ys->dims[yd];
      }
    }
    if (alg == 2) y[o] = x[i] > y[o] ? x[i] : y[o];
    else y[o] += x[i];
    cnt[o]++;
  }
  if (alg == 1)
    for (int64_t o = 0; o < ny; o++) y[o] /= cnt[o];
  free(cnt);
}

static int ncase;

static void one(ts_shape xs, ts_shape ys) {
  int64_t nx = ts_shape_numel(&xs), ny = ts_shape_numel(&ys);
  float *x = malloc(4 * nx), *y = malloc(4 * ny), *y2 = malloc(4 * ny), *yd = malloc(4 * ny);
  double *t = malloc(8 * ny);
  ts_test_fill(x, nx, 17 + nx, -1, 1);
  for (int alg = 0; alg < 3; alg++) {
    char what[200], s1[64], s2[64];
    snprintf(what, sizeof what, "%s %s -> %s", names[alg], ts_shape_str(&xs, s1, sizeof s1),
             ts_shape_str(&ys, s2, sizeof s2));
    naive(alg, x, &xs, t, &ys);
    for (int64_t o = 0; o < ny; o++) yd[o] = (float)t[o];
    double atol = alg == 2 ? 0 : 1e-6 * sqrt((double)(nx / ny));
    CHECK_OK(ts__reduce_ref(alg, x, &xs, y, &ys));
    CHECK_CLOSE(y, yd, ny, atol, 1e-6, what);
    CHECK_OK(ts__reduce_dnnl(alg, x, &xs, y2, &ys));
    strcat(what, " [oneDNN]");
    CHECK_CLOSE(y2, yd, ny, 10 * atol + 1e-6, 1e-5, what);
  }
  ncase++;
  free(x), free(y), free(y2), free(yd), free(t);
}

int main(void) {
  ts_shape s4 = ts_shape4(3, 5, 7, 11);
  for (unsigned m = 0; m < 16; m++) one(s4, kshape(s4, m)); /* every axis subset */
  one(ts_shape2(4, 6), ts_shape1(6));                        /* sum_to with fewer dims */
  one(ts_shape3(2, 3, 4), ts_shape_make(0, NULL));            /* to a scalar */
  one(ts_shape1(300000), ts_shape1(1));                       /* full, split over threads */
  one(ts_shape2(70000, 3), ts_shape2(1, 3));                  /* few outputs, kept inner */
  one(ts_shape2(3, 70000), ts_shape2(3, 1));                  /* few outputs, reduced inner */
  one(ts_shape4(8, 64, 14, 14), ts_shape3(64, 1, 1));         /* per-channel (BN/bias grads) */
  one(ts_shape3(16, 128, 768), ts_shape1(768));               /* bias grad of a dense layer */
  one(ts_shape3(1, 1, 5), ts_shape3(1, 1, 5));                /* nothing to reduce */
  printf("reduce: sum/mean/max over %d axis patterns, ref vs naive double, oneDNN vs naive\n", ncase);

  /* broadcast_to */
  {
    float x[3] = {1, 2, 3}, y[12];
    ts_shape xs = ts_shape2(3, 1), ys = ts_shape3(2, 3, 2);
    CHECK_OK(ts__broadcast_ref(x, &xs, y, &ys));
    float want[12] = {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3};
    CHECK(memcmp(y, want, sizeof want) == 0);
    ts_shape bad = ts_shape2(4, 2);
    CHECK(ts__broadcast_ref(x, &xs, y, &bad) == TS_ESHAPE);
  }
  /* max backward: ties share the gradient */
  {
    float x[6] = {1, 3, 3, 2, 0, -1}, y[2], dy[2] = {6, 5}, dx[6];
    ts_shape xs = ts_shape2(2, 3), ys = ts_shape2(2, 1);
    CHECK_OK(ts__reduce_ref(2, x, &xs, y, &ys));
    CHECK(y[0] == 3 && y[1] == 2);
    CHECK_OK(ts__reduce_max_bwd_ref(dy, x, &xs, y, &ys, dx));
    float want[6] = {0, 3, 3, 5, 0, 0};
    CHECK(memcmp(dx, want, sizeof want) == 0);
  }
  /* bad input */
  {
    float x[6] = {0}, y[6];
    ts_shape xs = ts_shape2(2, 3), ys = ts_shape2(2, 2);
    CHECK(ts__reduce_ref(0, x, &xs, y, &ys) == TS_ESHAPE);
    CHECK(strstr(ts_last_error(), "reduce") != NULL);
    CHECK(ts__reduce_ref(7, x, &xs, y, &xs) == TS_EINVAL);
    CHECK(ts__reduce_dnnl(0, x, &xs, y, &ys) == TS_ESHAPE);
  }
  /* timing, informational, with TS_TEST_TIMING=1 */
  if (getenv("TS_TEST_TIMING")) {
    struct { ts_shape x, y; const char *what; } cases[] = {
        {ts_shape4(32, 64, 56, 56), ts_shape3(64, 1, 1), "(32,64,56,56)->(64,1,1)"},
        {ts_shape3(8, 1024, 768), ts_shape1(768), "(8,1024,768)->(768)"},
        {ts_shape2(8192, 768), ts_shape2(8192, 1), "(8192,768)->(8192,1)"},
    };
    for (int k = 0; k < 3; k++) {
      int64_t nx = ts_shape_numel(&cases[k].x);
      float *x = malloc(4 * nx), *y = malloc(4 * ts_shape_numel(&cases[k].y));
      ts_test_fill(x, nx, 1, -1, 1);
      double t[2];
      for (int b = 0; b < 2; b++) {
        (b ? ts__reduce_dnnl : ts__reduce_ref)(0, x, &cases[k].x, y, &cases[k].y);
        double t0 = ts_time_now();
        for (int r = 0; r < 3; r++) (b ? ts__reduce_dnnl : ts__reduce_ref)(0, x, &cases[k].x, y, &cases[k].y);
        t[b] = (ts_time_now() - t0) / 3;
      }
      printf("  sum %s: ref %.2f ms, oneDNN %.2f ms\n", cases[k].what, t[0] * 1e3, t[1] * 1e3);
      free(x), free(y);
    }
  }
  return ts_test_finish("test_reduce");
}
