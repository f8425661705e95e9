/* Misc-family kernels: constant fill and dtype conversion. */
#include "misc.h"

#include <omp.h>
#include <string.h>

#define PAR_MIN_ELEMS ((size_t)1 << 15)
#define CHUNK ((size_t)1 << 14)

int ts__fill_ref(void *y, ts_dtype dt, size_t n, float value) {
  size_t es = ts_dtype_size(dt);
  if (!es) return ts_error_set(TS_EDTYPE, "fill: invalid dtype %d", (int)dt);
  if (n == 0) return TS_OK;
  unsigned char pat[8];
  int rc = ts_convert(&value, TS_F32, pat, dt, 1);
  if (rc) return rc;
  int zero = 1;
  for (size_t b = 0; b < es; b++) zero &= pat[b] == 0;
  int par = n >= PAR_MIN_ELEMS && !omp_in_parallel();
  if (zero) {
    size_t bytes = n * es, nch = (bytes + CHUNK * 4 - 1) / (CHUNK * 4);
#pragma omp parallel for schedule(static) if (par)
    for (size_t c = 0; c < nch; c++) {
      size_t b0 = c * CHUNK * 4, nb = bytes - b0 < CHUNK * 4 ? bytes - b0 : CHUNK * 4;
      memset((char *)y + b0, 0, nb);
    }
    return TS_OK;
  }
  switch (es) {
    case 4: {
      uint32_t v; memcpy(&v, pat, 4);
      uint32_t *p = y;
#pragma omp parallel for simd schedule(static) if (par)
      for (size_t i = 0; i < n; i++) p[i] = v;
      break;
    }
    case 2: {
      uint16_t v; memcpy(&v, pat, 2);
      uint16_t *p = y;
#pragma omp parallel for simd schedule(static) if (par)
      for (size_t i = 0; i < n; i++) p[i] = v;
      break;
    }
    case 8: {
      uint64_t v; memcpy(&v, pat, 8);
      uint64_t *p = y;
#pragma omp parallel for simd schedule(static) if (par)
      for (size_t i = 0; i < n; i++) p[i] = v;
      break;
    }
    default: memset(y, pat[0], n); break;
  }
  return TS_OK;
}

/* Same rounding as ts_f32_to_bf16 / ts_bf16_to_f32, written so the compiler can vectorise. */
static inline uint16_t f2bf(float f) {
  union { float f; uint32_t u; } c = {f};
  uint32_t u = c.u;
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t nan = (u >> 16) | 0x40u;
  return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u) ? nan : r);
}
static inline float bf2f(uint16_t h) {
  union { uint32_t u; float f; } c = {(uint32_t)h << 16};
  return c.f;
}

int ts__cast_ref(const void *x, ts_dtype sdt, void *y, ts_dtype ddt, size_t n) {
  if (!ts_dtype_size(sdt) || !ts_dtype_size(ddt))
    return ts_error_set(TS_EDTYPE, "cast: invalid dtype %d -> %d", (int)sdt, (int)ddt);
  if (n == 0) return TS_OK;
  int par = n >= PAR_MIN_ELEMS && !omp_in_parallel();
  if (sdt == TS_F32 && ddt == TS_BF16) {
    const float *s = x;
    uint16_t *d = y;
#pragma omp parallel for simd schedule(static) if (par)
    for (size_t i = 0; i < n; i++) d[i] = f2bf(s[i]);
    return TS_OK;
  }
  if (sdt == TS_BF16 && ddt == TS_F32) {
    const uint16_t *s = x;
    float *d = y;
#pragma omp parallel for simd schedule(static) if (par)
    for (size_t i = 0; i < n; i++) d[i] = bf2f(s[i]);
    return TS_OK;
  }
  size_t ses = ts_dtype_size(sdt), des = ts_dtype_size(ddt);
  size_t nch = (n + CHUNK - 1) / CHUNK;
  int rc = TS_OK;
#pragma omp parallel for schedule(static) if (par)
  for (size_t c = 0; c < nch; c++) {
    size_t i0 = c * CHUNK, m = n - i0 < CHUNK ? n - i0 : CHUNK;
    int r = ts_convert((const char *)x + i0 * ses, sdt, (char *)y + i0 * des, ddt, m);
    if (r) {
#pragma omp atomic write
      rc = r;
    }
  }
  return rc;
}
