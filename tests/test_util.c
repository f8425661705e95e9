#include <string.h>
#include "test_util.h"

int ts_test_failures = 0;
int ts_test_checks = 0;

void ts_test_fill(float *x, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * ts_rng_uniform_at(seed, i);
}

double ts_test_close(const float *a, const float *b, size_t n, double atol, double rtol,
                     size_t *worst) {
  double wr = 0;
  size_t wi = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    double r = d / (atol + rtol * fabs((double)b[i]));
    if (!(r <= wr) ) { /* also catches NaN */
      if (isnan(r)) { wr = INFINITY; wi = i; break; }
      wr = r;
      wi = i;
    }
  }
  if (worst) *worst = wi;
  return wr;
}

void ts_test_expect_err(const char *file, int line, int rc, int code, const char *const *subs) {
  ts_test_checks++;
  if (rc != code) {
    ts_test_failures++;
    fprintf(stderr, "%s:%d: expected status %d (%s), got %d (%s): %s\n", file, line, code,
            ts_strerror(code), rc, ts_strerror(rc), ts_last_error());
    return;
  }
  for (int k = 0; subs[k]; k++) {
    ts_test_checks++;
    if (!strstr(ts_last_error(), subs[k])) {
      ts_test_failures++;
      fprintf(stderr, "%s:%d: message \"%s\" lacks \"%s\"\n", file, line, ts_last_error(), subs[k]);
    }
  }
}

int ts_test_finish(const char *name) {
  printf("%s: %d checks, %d failures\n", name, ts_test_checks, ts_test_failures);
  return ts_test_failures ? 1 : 0;
}
