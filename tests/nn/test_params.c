/* Parameter store and initialisers: slices equal the full tensor's range (the property sharded
 * initialisation relies on), PyTorch-default bounds, kaiming/xavier statistics, errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/tessera.h"
#include "test_util.h"

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

int main(void) {
  ts_shape s = ts_shape2(256, 128);
  int64_t n = ts_shape_numel(&s);
  float *full = malloc(sizeof(float) * (size_t)n), *part = malloc(sizeof(float) * (size_t)n);
  uint64_t key = ts_hash_name("layer.weight", 7);
  ts_init kinds[] = {{TS_INIT_NORMAL, 0, 1, 0}, {TS_INIT_KAIMING_UNIFORM, 0, 0, 0},
                     {TS_INIT_XAVIER_NORMAL, 0, 0, 0}, {TS_INIT_TRUNC_NORMAL, 0.5f, 0.1f, 0},
                     {TS_INIT_TORCH_DEFAULT, 0, 0, 0}};
  for (int k = 0; k < 5; k++) {
    CHECK_OK(ts_init_fill(&kinds[k], s, key, full, 0, n));
    /* four slices produced independently */
    for (int r = 0; r < 4; r++) CHECK_OK(ts_init_fill(&kinds[k], s, key, part + r * n / 4, r * n / 4, n / 4));
    CHECK(memcmp(full, part, sizeof(float) * (size_t)n) == 0);
  }
  /* torch default: U(-1/sqrt(128), 1/sqrt(128)) */
  double mx = 0;
  for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(full[i]));
  CHECK(mx <= 1.0 / sqrt(128.0) && mx > 0.95 / sqrt(128.0));
  /* kaiming normal (a=0): std sqrt(2/fan_in) */
  ts_init kn = {TS_INIT_KAIMING_NORMAL, 0, 0, 0};
  CHECK_OK(ts_init_fill(&kn, s, key, full, 0, n));
  double v = 0;
  for (int64_t i = 0; i < n; i++) v += (double)full[i] * full[i];
  v /= (double)n;
  CHECK_MSG(fabs(v - 2.0 / 128) < 0.05 * 2.0 / 128, "kaiming var %g", v);
  CHECK(ts_init_fill(&kn, s, key, full, n - 2, 4) == TS_ERANGE);

  /* truncated normal N(0.5, 0.1) on [0.3, 0.7] (kinds[3]): bounds, mean, the truncated std
   * (0.1 x 0.8796256610342398, as MindSpore's VarianceScaling divides by it) and the
   * Kolmogorov-Smirnov distance to the truncated normal's CDF (0.0136: p = 1e-5 for n = 32768) */
  CHECK_OK(ts_init_fill(&kinds[3], s, key, full, 0, n));
  double lo = 1, hi = 0, m = 0, m2 = 0;
  for (int64_t i = 0; i < n; i++) {
    lo = fmin(lo, full[i]), hi = fmax(hi, full[i]);
    m += full[i], m2 += (double)full[i] * full[i];
  }
  m /= (double)n, m2 = sqrt(m2 / (double)n - m * m);
  CHECK_MSG(lo >= 0.3f && hi <= 0.7f && lo < 0.301 && hi > 0.699, "trunc normal range [%g, %g]", lo, hi);
  CHECK_MSG(fabs(m - 0.5) < 0.002 && fabs(m2 - 0.1 * 0.8796256610342398) < 0.002, "trunc normal mean %g std %g", m, m2);
  float *sorted = malloc(sizeof(float) * (size_t)n);
  memcpy(sorted, full, sizeof(float) * (size_t)n);
  qsort(sorted, (size_t)n, sizeof(float), cmp_float);
  double ks = 0, z2 = 0.5 * erfc(2.0 / sqrt(2.0));
  for (int64_t i = 0; i < n; i++) {
    double cdf = (0.5 * erfc(-((sorted[i] - 0.5) / 0.1) / sqrt(2.0)) - z2) / (1 - 2 * z2);
    ks = fmax(ks, fmax(fabs(cdf - (double)i / (double)n), fabs(cdf - (double)(i + 1) / (double)n)));
  }
  CHECK_MSG(ks < 0.0136, "trunc normal: KS distance %g", ks);
  free(sorted);

  ts_params *p;
  CHECK_OK(ts_params_create(&p));
  ts_init z = {TS_INIT_ZEROS, 0, 0, 0}, one = {TS_INIT_ONES, 0, 0, 0};
  int a = ts_params_add(p, "a", ts_shape2(3, 4), kinds[0], 0);
  int b = ts_params_add(p, "b", ts_shape1(4), z, TS_PARAM_NO_DECAY);
  int st = ts_params_add(p, "bn.running_var", ts_shape1(5), one, TS_PARAM_STATE);
  CHECK(a == 0 && b == 1 && st == 2);
  CHECK(ts_params_add(p, "a", ts_shape1(2), z, 0) < 0);
  CHECK(strstr(ts_last_error(), "duplicate") != NULL);
  CHECK(ts_params_add(p, "c", ts_shape2(0, 2), z, 0) == TS_ESHAPE);
  CHECK_OK(ts_params_alloc(p, 1));
  CHECK(ts_params_numel(p) == 16 && ts_params_state_numel(p) == 5);
  CHECK(ts_params_offset(p, b) == 12 && ts_params_ptr(p, b) == ts_params_data(p) + 12);
  CHECK(ts_params_ptr(p, st)[4] == 1.0f && ts_params_grad_ptr(p, st) == NULL);
  /* deterministic: same seed -> same values; different seed -> different */
  float first = ts_params_ptr(p, a)[0];
  CHECK_OK(ts_params_alloc(p, 1));
  CHECK(ts_params_ptr(p, a)[0] == first);
  CHECK_OK(ts_params_alloc(p, 2));
  CHECK(ts_params_ptr(p, a)[0] != first);
  ts_params_free(p);
  free(full);
  free(part);
  printf("checked: sliced init == full init for 5 initialisers, truncated normal's range, moments and KS distance, torch-default bound, kaiming variance, "
         "store offsets/flags/errors, seed determinism\n");
  return ts_test_finish("test_params");
}
