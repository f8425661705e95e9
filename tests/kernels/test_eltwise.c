/* Eltwise kernels: reference vs a double-precision formula, reference vs oneDNN, and backward
 * vs central finite differences of the double formula. */
#include <stdlib.h>
#include <string.h>

#include "kernels/eltwise.h"
#include "test_util.h"

static const char *names[TS_ELT_COUNT] = {"relu", "gelu_tanh", "gelu_erf", "sigmoid", "tanh", "exp",
                                          "log", "sqrt", "square", "abs", "neg"};

static double f64(int alg, double x) {
  switch (alg) {
    case TS_ELT_RELU: return x > 0 ? x : 0;
    case TS_ELT_GELU_TANH:
      return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case TS_ELT_GELU_ERF: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case TS_ELT_SIGMOID: return 1 / (1 + exp(-x));
    case TS_ELT_TANH: return tanh(x);
    case TS_ELT_EXP: return exp(x);
    case TS_ELT_LOG: return log(x);
    case TS_ELT_SQRT: return sqrt(x);
    case TS_ELT_SQUARE: return x * x;
    case TS_ELT_ABS: return fabs(x);
    case TS_ELT_NEG: return -x;
  }
  return 0;
}

/* Inputs: positive for log/sqrt; kept away from the kinks of relu/abs for finite differences. */
static void fill_input(int alg, float *x, int64_t n, uint64_t seed) {
  int pos = alg == TS_ELT_LOG || alg == TS_ELT_SQRT;
  ts_test_fill(x, (size_t)n, seed, pos ? 0.2f : -3.0f, 3.0f);
  if (alg == TS_ELT_RELU || alg == TS_ELT_ABS)
    for (int64_t i = 0; i < n; i++)
      if (fabsf(x[i]) < 0.01f) x[i] = 0.5f;
}

static void test_alg(int alg, int64_t n) {
  float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n),
        *y2 = malloc(sizeof(float) * n), *yd = malloc(sizeof(float) * n),
        *dy = malloc(sizeof(float) * n), *dx = malloc(sizeof(float) * n),
        *dx2 = malloc(sizeof(float) * n), *dxd = malloc(sizeof(float) * n);
  char what[128];
  fill_input(alg, x, n, 100 + alg);
  ts_test_fill(dy, (size_t)n, 200 + alg, -1, 1);
  for (int64_t i = 0; i < n; i++) {
    yd[i] = (float)f64(alg, x[i]);
    double h = 1e-4 * (fabs(x[i]) > 1 ? fabs(x[i]) : 1);
    dxd[i] = (float)(dy[i] * (f64(alg, x[i] + h) - f64(alg, x[i] - h)) / (2 * h));
  }
  CHECK_OK(ts__eltwise_fwd_ref(alg, 0, 0, x, y, n));
  snprintf(what, sizeof what, "%s fwd ref vs double (n=%lld)", names[alg], (long long)n);
  CHECK_CLOSE(y, yd, (size_t)n, 1e-6, 2e-6, what);
  CHECK_OK(ts__eltwise_fwd_dnnl(alg, 0, 0, x, y2, n));
  snprintf(what, sizeof what, "%s fwd oneDNN vs ref (n=%lld)", names[alg], (long long)n);
  CHECK_CLOSE(y2, y, (size_t)n, 1e-5, 1e-5, what);
  /* backward from x, and from y where the algorithm supports it */
  for (int use_dst = 0; use_dst <= ts__eltwise_bwd_uses_dst(alg); use_dst++) {
    const float *src = use_dst ? y : x;
    CHECK_OK(ts__eltwise_bwd_ref(alg, 0, 0, use_dst, dy, src, dx, n));
    snprintf(what, sizeof what, "%s bwd ref (use_dst=%d) vs finite differences", names[alg], use_dst);
    CHECK_CLOSE(dx, dxd, (size_t)n, 1e-4, 1e-3, what);
    CHECK_OK(ts__eltwise_bwd_dnnl(alg, 0, 0, use_dst, dy, src, dx2, n));
    snprintf(what, sizeof what, "%s bwd oneDNN (use_dst=%d) vs ref", names[alg], use_dst);
    CHECK_CLOSE(dx2, dx, (size_t)n, 1e-5, 1e-5, what);
  }
  free(x), free(y), free(y2), free(yd), free(dy), free(dx), free(dx2), free(dxd);
}

int main(void) {
  const int64_t sizes[] = {1, 37, 4099, 100003};
  for (int alg = 0; alg < TS_ELT_COUNT; alg++)
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) test_alg(alg, sizes[k]);
  printf("eltwise: %d algorithms x %zu sizes: ref vs double formula (1e-6/2e-6), oneDNN vs ref "
         "(1e-5), backward vs finite differences (1e-4/1e-3)\n",
         (int)TS_ELT_COUNT, sizeof sizes / sizeof *sizes);

  /* relu with a negative slope (leaky) */
  {
    float x[4] = {-2, -0.5f, 0.5f, 2}, y[4], y2[4], dx[4], dy[4] = {1, 1, 1, 1};
    CHECK_OK(ts__eltwise_fwd_ref(TS_ELT_RELU, 0.1f, 0, x, y, 4));
    CHECK_OK(ts__eltwise_fwd_dnnl(TS_ELT_RELU, 0.1f, 0, x, y2, 4));
    CHECK(fabsf(y[0] + 0.2f) < 1e-6f && fabsf(y[3] - 2) < 1e-6f);
    CHECK_CLOSE(y2, y, 4, 1e-6, 1e-6, "leaky relu oneDNN vs ref");
    CHECK_OK(ts__eltwise_bwd_ref(TS_ELT_RELU, 0.1f, 0, 1, dy, y, dx, 4));
    CHECK(fabsf(dx[0] - 0.1f) < 1e-6f && dx[3] == 1.0f);
  }
  /* the vectorisable exp used by softmax: relative error over a wide range */
  {
    double worst = 0;
    for (int i = 0; i <= 200000; i++) {
      float v = -87.0f + 175.0f * (float)i / 200000.0f;
      double r = fabs((double)ts__expf(v) - exp((double)v)) / exp((double)v);
      if (r > worst) worst = r;
    }
    CHECK_MSG(worst < 3e-7, "ts__expf worst relative error %.3g", worst);
    CHECK(ts__expf(-200.0f) == 0.0f);
    CHECK(isnan(ts__expf(NAN)));
    printf("ts__expf: worst relative error %.3g on [-87,88]\n", worst);
  }
  /* bad input: unknown algorithm, use_dst where unsupported */
  {
    float a = 1, b = 0;
    CHECK(ts__eltwise_fwd_ref(99, 0, 0, &a, &b, 1) == TS_EINVAL);
    CHECK(ts__eltwise_bwd_ref(TS_ELT_GELU_ERF, 0, 0, 1, &a, &a, &b, 1) == TS_EINVAL);
    CHECK(strstr(ts_last_error(), "eltwise") != NULL);
    CHECK(ts__eltwise_fwd_dnnl(99, 0, 0, &a, &b, 1) != TS_OK);
  }
  /* timing, informational, with TS_TEST_TIMING=1 */
  if (getenv("TS_TEST_TIMING")) {
    int64_t n = 1 << 22;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    ts_test_fill(x, (size_t)n, 7, -3, 3);
    for (int alg = TS_ELT_RELU; alg <= TS_ELT_GELU_TANH; alg++) {
      double t[2];
      for (int k = 0; k < 2; k++) {
        (k ? ts__eltwise_fwd_dnnl : ts__eltwise_fwd_ref)(alg, 0, 0, x, y, n);
        double t0 = ts_time_now();
        for (int r = 0; r < 5; r++) (k ? ts__eltwise_fwd_dnnl : ts__eltwise_fwd_ref)(alg, 0, 0, x, y, n);
        t[k] = (ts_time_now() - t0) / 5;
      }
      printf("  %s fwd 4M: ref %.2f ms, oneDNN %.2f ms\n", names[alg], t[0] * 1e3, t[1] * 1e3);
    }
    free(x), free(y);
  }
  return ts_test_finish("test_eltwise");
}
