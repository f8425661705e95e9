/* Element i of f32, bf16 or f16 storage as f32, and back (nearest even; no NaN in the tests):
 * shared by the stand-in libraries (fake_cublas.c, fake_cudnn.c), which compute on the host.
 * f32: 1 for f32, 0 for bf16, FAKE_F16 for f16 (IEEE half: src/tensor/dtype.c's conversions). */
#ifndef TS_FAKE_BF16_H
#define TS_FAKE_BF16_H
#include <stdint.h>
#include <string.h>

#define FAKE_F16 2
static inline float fake_h2f(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
  float f;
  if (e == 0) {
    f = (float)m * (1.0f / 16777216.0f);
    return sign ? -f : f;
  }
  u = e == 31 ? sign | 0x7f800000u | (m << 13) : sign | ((e + 112u) << 23) | (m << 13);
  memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t fake_f2h(float f) {
  uint32_t u, a;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (a < 0x38800000u) {
    float af;
    memcpy(&af, &a, 4);
    float v = af * 16777216.0f;
    uint32_t q = (uint32_t)v;
    float rem = v - (float)q;
    if (rem > 0.5f || (rem == 0.5f && (q & 1u))) q++;
    return (uint16_t)(sign | q);
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
  return (uint16_t)(sign | (r >> 13));
}
static inline float fake_ld(const void *p, int f32, long long i) {
  if (f32 == FAKE_F16) return fake_h2f(((const uint16_t *)p)[i]);
  if (f32) return ((const float *)p)[i];
  uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline void fake_st(void *p, int f32, long long i, float v) {
  if (f32 == FAKE_F16) {
    ((uint16_t *)p)[i] = fake_f2h(v);
    return;
  }
  if (f32) {
    ((float *)p)[i] = v;
    return;
  }
  uint32_t u;
  memcpy(&u, &v, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
}
#endif
