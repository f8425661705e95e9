/* Philox-4x32-10 (Salmon et al., SC'11), the counter-based generator also used by cuRAND and
 * PyTorch's CUDA generator. Output is a pure function of (key, counter). */
#include <math.h>

#include "tessera/base.h"
#include "text.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

ts_philox_out ts_philox4x32(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo) {
  uint32_t c0 = (uint32_t)ctr_lo, c1 = (uint32_t)(ctr_lo >> 32);
  uint32_t c2 = (uint32_t)ctr_hi, c3 = (uint32_t)(ctr_hi >> 32);
  uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
    uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  ts_philox_out o = {{c0, c1, c2, c3}};
  return o;
}

uint64_t ts_hash_name(const char *name, uint64_t seed) {
  uint64_t h = ts__fnv1a_str(TS__FNV1A_BASIS_V0 ^ (seed * 0x9E3779B97F4A7C15ULL), name);
  /* final avalanche (splitmix64) */
  h ^= h >> 30; h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 27; h *= 0x94D049BB133111EBULL;
  h ^= h >> 31;
  return h;
}

float ts_rng_uniform_at(uint64_t key, uint64_t index) {
  return ts_u32_to_unit(ts_philox4x32(key, 0, index).v[0]);
}

float ts_rng_normal_at(uint64_t key, uint64_t index) {
  /* Box-Muller on two independent words of the same counter. */
  ts_philox_out o = ts_philox4x32(key, 0, index);
  double u1 = ((double)(o.v[0] >> 8) + 1.0) * (1.0 / 16777217.0); /* (0,1] */
  double u2 = (double)(o.v[1] >> 8) * (1.0 / 16777216.0);
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
