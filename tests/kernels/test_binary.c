/* Binary broadcasting kernels: reference vs a naive N-d double loop, oneDNN vs reference, on
 * many broadcast patterns; scale; bad shapes. */
#include <stdlib.h>
#include <string.h>

#include "kernels/binary.h"
#include "test_util.h"

static const char *names[4] = {"add", "sub", "mul", "div"};

/* naive: for each output index, locate a and b by NumPy rules */
static void naive(int alg, const float *a, const ts_shape *as, const float *b, const ts_shape *bs,
                  float *y, const ts_shape *ys) {
  int64_t n = ts_shape_numel(ys);
  for (int64_t i = 0; i < n; i++) {
    int64_t r = i, ia = 0, ib = 0, sa = 1, sb = 1;
    for (int d = ys->ndim - 1; d >= 0; d--) {
      int64_t k = r % ys->dims[d];
      r /= ys->dims[d];
      int da = d - (ys->ndim - as->ndim), db = d - (ys->ndim - bs->ndim);
      if (da >= 0) {
        if (as->dims[da] != 1) ia += k * sa;
        sa *= as->dims[da];
      }
      if (db >= 0) {
        if (bs->dims[db] != 1) ib += k * sb;
        sb *= bs->dims[db];
      }
    }
    double u = a[ia], v = b[ib];
    y[i] = (float)(alg == 0 ? u + v : alg == 1 ? u - v : alg == 2 ? u * v : u / v);
  }
}

static int ncase = 0;

static void one(ts_shape as, ts_shape bs) {
  ts_shape ys;
  CHECK_OK(ts_shape_broadcast(&as, &bs, &ys));
  int64_t na = ts_shape_numel(&as), nb = ts_shape_numel(&bs), ny = ts_shape_numel(&ys);
  float *a = malloc(4 * na), *b = malloc(4 * nb), *y = malloc(4 * ny), *y1 = malloc(4 * ny),
        *y2 = malloc(4 * ny);
  ts_test_fill(a, na, 3, -2, 2);
  ts_test_fill(b, nb, 4, 0.5f, 2); /* away from 0 for div */
  for (int alg = 0; alg < 4; alg++) {
    char what[200], s1[64], s2[64];
    snprintf(what, sizeof what, "%s %s %s", names[alg], ts_shape_str(&as, s1, sizeof s1),
             ts_shape_str(&bs, s2, sizeof s2));
    naive(alg, a, &as, b, &bs, y, &ys);
    CHECK_OK(ts__binary_ref(alg, a, &as, b, &bs, y1, &ys));
    CHECK_CLOSE(y1, y, ny, 0, 1e-6, what);
    CHECK_OK(ts__binary_dnnl(alg, a, &as, b, &bs, y2, &ys));
    strcat(what, " [oneDNN]");
    CHECK_CLOSE(y2, y, ny, 1e-7, 1e-6, what);
  }
  ncase++;
  free(a), free(b), free(y), free(y1), free(y2);
}

int main(void) {
  one(ts_shape2(3, 4), ts_shape2(3, 4));
  one(ts_shape4(2, 3, 5, 7), ts_shape3(3, 1, 1));     /* per-channel bias */
  one(ts_shape3(3, 1, 1), ts_shape4(2, 3, 5, 7));     /* src0 broadcasts */
  one(ts_shape2(6, 9), ts_shape1(9));                 /* row vector */
  one(ts_shape2(6, 1), ts_shape2(1, 9));              /* outer product */
  one(ts_shape1(1), ts_shape3(4, 5, 6));              /* scalar-like */
  one(ts_shape_make(0, NULL), ts_shape2(5, 3));       /* true scalar */
  one(ts_shape4(2, 1, 5, 1), ts_shape4(1, 3, 1, 7));  /* both broadcast */
  one(ts_shape3(2, 40000, 1), ts_shape3(1, 1, 3));    /* tiny inner, many rows */
  one(ts_shape2(3, 70000), ts_shape2(3, 1));          /* long rows, threads */
  one(ts_shape3(16, 64, 300), ts_shape3(16, 64, 300));
  printf("binary: %d broadcast patterns x 4 ops, ref vs naive double (rtol 1e-6), oneDNN "
         "(or its fallback when src0 broadcasts) vs naive (1e-6)\n", ncase);
  /* in place: y aliases a */
  {
    float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, 30};
    ts_shape s = ts_shape2(2, 3), t = ts_shape1(3);
    CHECK_OK(ts__binary_ref(0, a, &s, b, &t, a, &s));
    CHECK(a[0] == 11 && a[5] == 36);
    CHECK_OK(ts__binary_dnnl(2, a, &s, b, &t, a, &s));
    CHECK(a[0] == 110 && a[5] == 1080);
  }
  /* scale */
  {
    float x[5] = {1, 2, 3, 4, 5}, y[5];
    CHECK_OK(ts__scale_ref(x, y, 5, 2, -1));
    CHECK(y[0] == 1 && y[4] == 9);
  }
  /* bad shapes and algorithms */
  {
    float a[12] = {0}, y[12];
    ts_shape s1 = ts_shape2(3, 4), s2 = ts_shape2(2, 4), s3 = ts_shape2(3, 4);
    CHECK(ts__binary_ref(0, a, &s1, a, &s2, y, &s3) == TS_ESHAPE);
    CHECK(strstr(ts_last_error(), "binary") && strstr(ts_last_error(), "(2,4)"));
    CHECK(ts__binary_dnnl(0, a, &s1, a, &s2, y, &s3) == TS_ESHAPE);
    CHECK(ts__binary_ref(9, a, &s1, a, &s1, y, &s1) == TS_EINVAL);
  }
  /* timing, informational, with TS_TEST_TIMING=1: ResNet-like residual add and per-channel bias */
  if (getenv("TS_TEST_TIMING")) {
    ts_shape s = ts_shape4(32, 64, 56, 56), c = ts_shape3(64, 1, 1);
    int64_t n = ts_shape_numel(&s);
    float *a = malloc(4 * n), *b = malloc(4 * n), *y = malloc(4 * n);
    ts_test_fill(a, n, 1, -1, 1);
    ts_test_fill(b, n, 2, -1, 1);
    memset(y, 0, 4 * n);
    double t[4];
    for (int k = 0; k < 4; k++) {
      const ts_shape *bs = k < 2 ? &s : &c;
      int (*f)(int, const float *, const ts_shape *, const float *, const ts_shape *, float *,
               const ts_shape *) = k % 2 ? ts__binary_dnnl : ts__binary_ref;
      f(0, a, &s, b, bs, y, &s);
      double t0 = ts_time_now();
      for (int r = 0; r < 3; r++) f(0, a, &s, b, bs, y, &s);
      t[k] = (ts_time_now() - t0) / 3;
    }
    printf("  add (32,64,56,56): full ref %.2f / oneDNN %.2f ms; +(64,1,1) ref %.2f / oneDNN %.2f ms\n",
           t[0] * 1e3, t[1] * 1e3, t[2] * 1e3, t[3] * 1e3);
    free(a), free(b), free(y);
  }
  return ts_test_finish("test_binary");
}
