#include <math.h>
#include <string.h>

#include "tessera/tensor.h"

static const struct { const char *name; size_t size; } k_dt[TS_DTYPE_COUNT] = {
    [TS_F32] = {"f32", 4}, [TS_BF16] = {"bf16", 2}, [TS_F16] = {"f16", 2},
    [TS_I32] = {"i32", 4}, [TS_I64] = {"i64", 8},   [TS_U8] = {"u8", 1},
};

size_t ts_dtype_size(ts_dtype dt) { return (unsigned)dt < TS_DTYPE_COUNT ? k_dt[dt].size : 0; }
const char *ts_dtype_name(ts_dtype dt) { return (unsigned)dt < TS_DTYPE_COUNT ? k_dt[dt].name : "?"; }
int ts_dtype_is_float(ts_dtype dt) { return dt == TS_F32 || dt == TS_BF16 || dt == TS_F16; }

int ts_dtype_parse(const char *name, ts_dtype *out) {
  static const struct { const char *n; ts_dtype d; } alias[] = {
      {"f32", TS_F32},  {"float32", TS_F32}, {"float", TS_F32},   {"bf16", TS_BF16},
      {"bfloat16", TS_BF16}, {"f16", TS_F16}, {"float16", TS_F16}, {"half", TS_F16},
      {"i32", TS_I32},  {"int32", TS_I32},   {"i64", TS_I64},     {"int64", TS_I64},
      {"u8", TS_U8},    {"uint8", TS_U8},    {"F32", TS_F32},     {"BF16", TS_BF16},
      {"F16", TS_F16},  {"I32", TS_I32},     {"I64", TS_I64},     {"U8", TS_U8},
  };
  for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
    if (strcmp(alias[i].n, name) == 0) {
      *out = alias[i].d;
      return TS_OK;
    }
  return ts_error_set(TS_ENOTFOUND, "unknown dtype '%s' (expected f32, bf16, f16, i32, i64, u8)", name);
}

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

uint16_t ts_f32_to_bf16(float f) {
  uint32_t u = f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(u >> 16);
}

float ts_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t ts_f32_to_f16(float f) {
  uint32_t u = f2u(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);            /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);           /* overflow -> inf */
  if (a < 0x38800000u) {                                             /* subnormal or zero */
    /* value = a_float; f16 subnormal unit = 2^-24. Round to nearest even in integer units. */
    float v = u2f(a) * 16777216.0f; /* exact scaling by 2^24 */
    uint32_t q = (uint32_t)v;
    float rem = v - (float)q;
    if (rem > 0.5f || (rem == 0.5f && (q & 1u))) q++;
    return (uint16_t)(sign | q);
  }
  /* normal: rebias exponent 127 -> 15, keep 10 mantissa bits with RNE */
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
  r -= (112u << 23);
  return (uint16_t)(sign | (r >> 13));
}

float ts_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    float v = (float)m * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (e == 31) return u2f(sign | 0x7f800000u | (m << 13));
  return u2f(sign | ((e + 112u) << 23) | (m << 13));
}

static double load(const void *p, ts_dtype dt, size_t i) {
  switch (dt) {
    case TS_F32: return ((const float *)p)[i];
    case TS_BF16: return ts_bf16_to_f32(((const uint16_t *)p)[i]);
    case TS_F16: return ts_f16_to_f32(((const uint16_t *)p)[i]);
    case TS_I32: return ((const int32_t *)p)[i];
    case TS_I64: return (double)((const int64_t *)p)[i];
    case TS_U8: return ((const uint8_t *)p)[i];
    default: return 0;
  }
}

static double sat(double v, double lo, double hi) {
  if (isnan(v)) return 0;
  v = trunc(v);
  return v < lo ? lo : v > hi ? hi : v;
}

int ts_convert(const void *src, ts_dtype sdt, void *dst, ts_dtype ddt, size_t n) {
  if ((unsigned)sdt >= TS_DTYPE_COUNT || (unsigned)ddt >= TS_DTYPE_COUNT)
    return ts_error_set(TS_EDTYPE, "ts_convert: invalid dtype %d -> %d", (int)sdt, (int)ddt);
  if (sdt == ddt) {
    memmove(dst, src, n * ts_dtype_size(sdt));
    return TS_OK;
  }
  /* the float <-> 16-bit pairs (gradient compression, mixed precision) without the per-element
   * dispatch of the general loop below; same results */
  const float *fs = src;
  const uint16_t *hs = src;
  float *fd = dst;
  uint16_t *hd = dst;
  if (sdt == TS_F32 && ddt == TS_BF16) {
    for (size_t i = 0; i < n; i++) hd[i] = ts_f32_to_bf16(fs[i]);
    return TS_OK;
  }
  if (sdt == TS_F32 && ddt == TS_F16) {
    for (size_t i = 0; i < n; i++) hd[i] = ts_f32_to_f16(fs[i]);
    return TS_OK;
  }
  if (sdt == TS_BF16 && ddt == TS_F32) {
    for (size_t i = 0; i < n; i++) fd[i] = ts_bf16_to_f32(hs[i]);
    return TS_OK;
  }
  if (sdt == TS_F16 && ddt == TS_F32) {
    for (size_t i = 0; i < n; i++) fd[i] = ts_f16_to_f32(hs[i]);
    return TS_OK;
  }
  for (size_t i = 0; i < n; i++) {
    double v = load(src, sdt, i);
    switch (ddt) {
      case TS_F32: ((float *)dst)[i] = (sdt == TS_BF16 || sdt == TS_F16 || sdt == TS_F32) ? (float)v : (float)v; break;
      case TS_BF16: ((uint16_t *)dst)[i] = ts_f32_to_bf16((float)v); break;
      case TS_F16: ((uint16_t *)dst)[i] = ts_f32_to_f16((float)v); break;
      case TS_I32: ((int32_t *)dst)[i] = (int32_t)sat(v, -2147483648.0, 2147483647.0); break;
      case TS_I64: ((int64_t *)dst)[i] = (int64_t)sat(v, -9223372036854775808.0, 9223372036854774784.0); break;
      case TS_U8: ((uint8_t *)dst)[i] = (uint8_t)sat(v, 0, 255); break;
      default: break;
    }
  }
  return TS_OK;
}
