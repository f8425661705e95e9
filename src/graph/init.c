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
