/* 16-bit float conversion helpers for the kernels (see lowp.h). */
#include "lowp.h"

#include "tessera/base.h"

void ts__lp_to_f32(const void *src, ts_dtype dt, float *dst, int64_t n) {
  if (dt == TS_BF16) {
    const uint16_t *s = src;
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) dst[i] = ts__bf2f(s[i]);
  } else if (dt == TS_F16) {
    const uint16_t *s = src;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) dst[i] = ts_f16_to_f32(s[i]);
  } else {
    memcpy(dst, src, (size_t)n * sizeof(float));
  }
}

void ts__lp_from_f32(const float *src, void *dst, ts_dtype dt, int64_t n) {
  if (dt == TS_BF16) {
    uint16_t *d = dst;
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) d[i] = ts__f2bf(src[i]);
  } else if (dt == TS_F16) {
    uint16_t *d = dst;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) d[i] = ts_f32_to_f16(src[i]);
  } else {
    memcpy(dst, src, (size_t)n * sizeof(float));
  }
}

float *ts__lp_in(const void *src, ts_dtype dt, int64_t n, const char *what) {
  float *p = ts_alloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!p) {
    ts_error_set(TS_ENOMEM, "%s: out of memory for a %lld-element f32 copy", what, (long long)n);
    return NULL;
  }
  if (src) ts__lp_to_f32(src, dt, p, n);
  return p;
}
