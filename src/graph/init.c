/* Initialisers drawn from Philox by global element position (see DESIGN.md). */
#include <math.h>

#include "tessera/params.h"

void ts_init_fans(ts_shape s, int64_t *fan_in, int64_t *fan_out) {
  int64_t rf = 1;
  for (int i = 2; i < s.ndim; i++) rf *= s.dims[i];
  if (s.ndim == 0) {
    *fan_in = *fan_out = 1;
  } else if (s.ndim == 1) {
    *fan_in = *fan_out = s.dims[0];
  } else {
    *fan_in = s.dims[1] * rf;
    *fan_out = s.dims[0] * rf;
  }
}

/* The standard normal's quantile: Acklam's rational approximation (relative error 1.2e-9), then
 * one Halley step on erfc, which brings it to double precision. 0 < p < 1. */
static double norm_ppf(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                             1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01,  -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  double x, q, r;
  if (p < 0.02425) {
    q = sqrt(-2 * log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p > 1 - 0.02425) {
    q = sqrt(-2 * log(1 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else {
    q = p - 0.5;
    r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  }
  double e = 0.5 * erfc(-x / sqrt(2.0)) - p, u = e * sqrt(2.0 * M_PI) * exp(x * x / 2);
  return x - u / (1 + x * u / 2);
}

int ts_init_fill(const ts_init *init, ts_shape global, uint64_t key, float *dst, int64_t begin,
                 int64_t count) {
  int64_t fi, fo;
  ts_init_fans(global, &fi, &fo);
  if (begin < 0 || count < 0 || begin + count > ts_shape_numel(&global))
    return ts_error_set(TS_ERANGE, "ts_init_fill: range [%lld,%lld) outside %lld elements",
                        (long long)begin, (long long)(begin + count),
                        (long long)ts_shape_numel(&global));
  double lo = 0, hi = 0, mean = 0, std = 0;
  int normal = 0, uniform = 0;
  float gain_a = init->a;
  switch (init->kind) {
    case TS_INIT_ZEROS:
      for (int64_t i = 0; i < count; i++) dst[i] = 0;
      return TS_OK;
    case TS_INIT_ONES:
      for (int64_t i = 0; i < count; i++) dst[i] = 1;
      return TS_OK;
    case TS_INIT_CONST:
      for (int64_t i = 0; i < count; i++) dst[i] = init->a;
      return TS_OK;
    case TS_INIT_UNIFORM: uniform = 1; lo = init->a; hi = init->b; break;
    case TS_INIT_NORMAL: normal = 1; mean = init->a; std = init->b; break;
    case TS_INIT_XAVIER_UNIFORM: {
      double g = gain_a ? gain_a : 1.0, b = g * sqrt(6.0 / (double)(fi + fo));
      uniform = 1; lo = -b; hi = b;
      break;
    }
    case TS_INIT_XAVIER_NORMAL:
      normal = 1;
      std = (gain_a ? gain_a : 1.0) * sqrt(2.0 / (double)(fi + fo));
      break;
    case TS_INIT_KAIMING_UNIFORM: {
      double g = sqrt(2.0 / (1.0 + (double)gain_a * gain_a)), b = sqrt(3.0) * g / sqrt((double)fi);
      uniform = 1; lo = -b; hi = b;
      break;
    }
    case TS_INIT_KAIMING_NORMAL:
      normal = 1;
      std = sqrt(2.0 / (1.0 + (double)gain_a * gain_a)) / sqrt((double)fi);
      break;
    case TS_INIT_TORCH_DEFAULT: {
      double f = init->fan_in > 0 ? (double)init->fan_in : (double)fi, b = 1.0 / sqrt(f);
      uniform = 1; lo = -b; hi = b;
      break;
    }
    case TS_INIT_TRUNC_NORMAL: { /* p uniform in (Phi(-2), Phi(2)), x = mean + std Phi^-1(p) */
      const double lo_p = 0.5 * erfc(2.0 / sqrt(2.0)), span = 1.0 - 2.0 * lo_p, m = init->a, sd = init->b;
#pragma omp parallel for if (count > 65536)
      for (int64_t i = 0; i < count; i++) {
        double p = lo_p + span * ts_rng_uniform_at(key, (uint64_t)(begin + i));
        double x = norm_ppf(p);
        x = x < -2.0 ? -2.0 : x > 2.0 ? 2.0 : x; /* (the quantile's last ulp) */
        dst[i] = (float)(m + sd * x);
      }
      return TS_OK;
    }
    default:
      return ts_error_set(TS_EINVAL, "ts_init_fill: unknown initialiser %d", (int)init->kind);
  }
  if (uniform) {
#pragma omp parallel for if (count > 65536)
    for (int64_t i = 0; i < count; i++)
      dst[i] = (float)(lo + (hi - lo) * ts_rng_uniform_at(key, (uint64_t)(begin + i)));
  } else if (normal) {
#pragma omp parallel for if (count > 65536)
    for (int64_t i = 0; i < count; i++)
      dst[i] = (float)(mean + std * ts_rng_normal_at(key, (uint64_t)(begin + i)));
  }
  return TS_OK;
}
