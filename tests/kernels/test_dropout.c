/* Dropout kernel: the vectorised Philox mask agrees bit for bit with ts_philox4x32; same
 * (seed, step) gives the same mask, another step or seed a different one; the keep fraction is
 * 1-p; kept values are scaled by 1/(1-p); a tensor processed in pieces (element offsets) or with
 * other thread counts gives the identical result; p = 0, p = 1 and bad p. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dropout.h"
#include "test_util.h"

static void test_matches_scalar_philox(void) {
  size_t n = 10007;
  float *x = malloc(n * 4), *y = malloc(n * 4);
  for (size_t i = 0; i < n; i++) x[i] = 1.0f + (float)(i % 5);
  float p = 0.3f, scale = 1.0f / (1.0f - p);
  uint64_t offsets[] = {0, 13, 64, 1000003};
  for (int t = 0; t < 4; t++) {
    CHECK_OK(ts__dropout_ref(x, y, n, p, 0xC0FFEEull, 7, offsets[t]));
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
      int keep = ts__dropout_keep(0xC0FFEEull, 7, offsets[t] + i, p);
      ok &= keep ? y[i] == x[i] * scale : y[i] == 0.0f;
    }
    CHECK_MSG(ok, "mask at offset %llu differs from ts_philox4x32", (unsigned long long)offsets[t]);
  }
  /* the keep rule itself: element 64b+16w+j <- word w of counter 16b+j, kept iff u >= p */
  for (uint64_t i = 0; i < 300; i++) {
    ts_philox_out o = ts_philox4x32(0xC0FFEEull, 7, (i / 64) * 16 + i % 16);
    CHECK(ts__dropout_keep(0xC0FFEEull, 7, i, p) == (ts_u32_to_unit(o.v[(i / 16) % 4]) >= p));
  }
  free(x);
  free(y);
  printf("vectorised mask == ts_philox4x32 mask at 4 element offsets\n");
}

static void test_statistics_and_steps(void) {
  size_t n = 1 << 20;
  float *x = malloc(n * 4), *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4), *d = malloc(n * 4);
  for (size_t i = 0; i < n; i++) x[i] = 1.0f;
  float p = 0.1f;
  CHECK_OK(ts__dropout_ref(x, a, n, p, 42, 3, 0));
  CHECK_OK(ts__dropout_ref(x, b, n, p, 42, 3, 0));
  CHECK_OK(ts__dropout_ref(x, c, n, p, 42, 4, 0));
  CHECK_OK(ts__dropout_ref(x, d, n, p, 43, 3, 0));
  CHECK(memcmp(a, b, n * 4) == 0);
  size_t kept = 0, diff_step = 0, diff_seed = 0;
  for (size_t i = 0; i < n; i++) {
    kept += a[i] != 0.0f;
    diff_step += (a[i] != 0.0f) != (c[i] != 0.0f);
    diff_seed += (a[i] != 0.0f) != (d[i] != 0.0f);
  }
  double frac = (double)kept / (double)n, sd = sqrt(p * (1 - p) / (double)n);
  CHECK_MSG(fabs(frac - (1 - p)) < 5 * sd, "keep fraction %.5f, expected %.5f", frac, 1 - p);
  /* independent masks differ in a fraction 2p(1-p) of positions */
  double expect = 2 * p * (1 - p);
  CHECK_MSG(fabs((double)diff_step / n - expect) < 0.01, "step change differs in %.4f", (double)diff_step / n);
  CHECK_MSG(fabs((double)diff_seed / n - expect) < 0.01, "seed change differs in %.4f", (double)diff_seed / n);
  /* mean is preserved by the 1/(1-p) scaling */
  double mean = 0;
  for (size_t i = 0; i < n; i++) mean += a[i];
  mean /= (double)n;
  CHECK_MSG(fabs(mean - 1.0) < 5 * sd / (1 - p), "mean %.5f", mean);
  /* "backward": dropout of dy with the same seed/step zeroes exactly the same positions */
  for (size_t i = 0; i < n; i++) c[i] = 0.5f + (float)(i % 3);
  CHECK_OK(ts__dropout_ref(c, d, n, p, 42, 3, 0));
  int same = 1;
  for (size_t i = 0; i < n; i++) same &= (d[i] == 0.0f) == (a[i] == 0.0f);
  CHECK(same);
  /* pieces with offsets == whole; in place; one thread == many */
  size_t cut = 1000 * 64 + 37;
  CHECK_OK(ts__dropout_ref(x, b, cut, p, 42, 3, 0));
  CHECK_OK(ts__dropout_ref(x + cut, b + cut, n - cut, p, 42, 3, cut));
  CHECK(memcmp(a, b, n * 4) == 0);
  memcpy(b, x, n * 4);
  CHECK_OK(ts__dropout_ref(b, b, n, p, 42, 3, 0));
  CHECK(memcmp(a, b, n * 4) == 0);
  int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  CHECK_OK(ts__dropout_ref(x, b, n, p, 42, 3, 0));
  omp_set_num_threads(nt);
  CHECK(memcmp(a, b, n * 4) == 0);
  printf("keep fraction %.5f (p=%.2f), same seed/step identical, step/seed change %.4f/%.4f\n",
         frac, p, (double)diff_step / n, (double)diff_seed / n);
  free(x); free(a); free(b); free(c); free(d);
}

static void test_edges(void) {
  float x[5] = {1, 2, 3, 4, 5}, y[5];
  CHECK_OK(ts__dropout_ref(x, y, 5, 0.0f, 1, 1, 0));
  CHECK(memcmp(x, y, sizeof x) == 0);
  CHECK_OK(ts__dropout_ref(x, y, 5, 1.0f, 1, 1, 0));
  CHECK(y[0] == 0 && y[4] == 0);
  CHECK(ts__dropout_ref(x, y, 5, 1.5f, 1, 1, 0) == TS_EINVAL);
  CHECK(ts__dropout_ref(x, y, 5, NAN, 1, 1, 0) == TS_EINVAL);
  CHECK_MSG(strstr(ts_last_error(), "dropout") != NULL, "%s", ts_last_error());
  printf("p = 0 copies, p = 1 zeroes, p outside [0,1] rejected\n");
}

int main(void) {
  test_matches_scalar_philox();
  test_statistics_and_steps();
  test_edges();
  return ts_test_finish("test_dropout");
}
