/* Element i of f32 or bf16 storage as f32, and back (nearest even; no NaN in the tests): shared
 * by the stand-in libraries (fake_cublas.c, fake_cudnn.c), which compute on the host. */
#ifndef TS_FAKE_BF16_H
#define TS_FAKE_BF16_H
#include <stdint.h>
#include <string.h>

static inline float fake_ld(const void *p, int f32, long long i) {
  if (f32) return ((const float *)p)[i];
  uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline void fake_st(void *p, int f32, long long i, float v) {
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
