/* Dropout with a counter-based mask. Philox-4x32-10 is evaluated for 16 counters at a time in a
 * lane-parallel loop the compiler vectorises (same arithmetic as ts_philox4x32; the tests check
 * they agree bit for bit). */
#include "dropout.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "tessera/base.h"

#define LANES 16
#define BLOCK_ELEMS (4 * LANES)

static uint32_t keep_threshold(float p) {
  /* u = (w >> 8) * 2^-24 >= p  <=>  (w >> 8) >= ceil(p * 2^24) (exact: powers of two) */
  return (uint32_t)ceil((double)p * 16777216.0);
}

int ts__dropout_keep(uint64_t seed, uint64_t step, uint64_t i, float p) {
  ts_philox_out o = ts_philox4x32(seed, step, i / 4);
  return ts_u32_to_unit(o.v[i % 4]) >= p;
}

/* out[w][j] = word w of philox(key, (hi, lo0 + j)), j < LANES. */
static inline void philox_lanes(uint64_t key, uint64_t hi, uint64_t lo0, uint32_t out[4][LANES]) {
#pragma omp simd
  for (int j = 0; j < LANES; j++) {
    uint64_t lo = lo0 + (uint64_t)j;
    uint32_t c0 = (uint32_t)lo, c1 = (uint32_t)(lo >> 32);
    uint32_t c2 = (uint32_t)hi, c3 = (uint32_t)(hi >> 32);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
      uint64_t p0 = (uint64_t)0xD2511F53u * c0;
      uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
      uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n1 = (uint32_t)p1;
      uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1, n3 = (uint32_t)p0;
      c0 = n0; c1 = n1; c2 = n2; c3 = n3;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    out[0][j] = c0; out[1][j] = c1; out[2][j] = c2; out[3][j] = c3;
  }
}

/* Elements [e0, e1) of the global numbering, e0 a multiple of BLOCK_ELEMS; x/y point at e0. */
static void dropout_span(const float *x, float *y, uint64_t e0, uint64_t e1, uint32_t thr,
                         float scale, uint64_t seed, uint64_t step) {
  uint32_t w[4][LANES];
  for (uint64_t b = e0; b < e1; b += BLOCK_ELEMS) {
    philox_lanes(seed, step, b / 4, w);
    size_t m = e1 - b < BLOCK_ELEMS ? (size_t)(e1 - b) : BLOCK_ELEMS;
    const float *xs = x + (b - e0);
    float *ys = y + (b - e0);
    if (m == BLOCK_ELEMS) {
#pragma omp simd
      for (int e = 0; e < BLOCK_ELEMS; e++)
        ys[e] = (w[e & 3][e >> 2] >> 8) >= thr ? xs[e] * scale : 0.0f;
    } else {
      for (size_t e = 0; e < m; e++) ys[e] = (w[e & 3][e >> 2] >> 8) >= thr ? xs[e] * scale : 0.0f;
    }
  }
}

int ts__dropout_ref(const float *x, float *y, size_t n, float p, uint64_t seed, uint64_t step,
                    uint64_t offset) {
  if (!(p >= 0.0f && p <= 1.0f))
    return ts_error_set(TS_EINVAL, "dropout: probability %g outside [0,1]", (double)p);
  if (n == 0) return TS_OK;
  if (p == 0.0f) {
    if (x != y) memcpy(y, x, n * sizeof(float));
    return TS_OK;
  }
  if (p >= 1.0f) {
    memset(y, 0, n * sizeof(float));
    return TS_OK;
  }
  uint32_t thr = keep_threshold(p);
  float scale = 1.0f / (1.0f - p);
  /* Head: elements before the first block boundary, handled element by element. */
  uint64_t first = (offset + BLOCK_ELEMS - 1) / BLOCK_ELEMS * BLOCK_ELEMS;
  size_t head = (size_t)(first - offset) < n ? (size_t)(first - offset) : n;
  for (size_t e = 0; e < head; e++) {
    ts_philox_out o = ts_philox4x32(seed, step, (offset + e) / 4);
    y[e] = (o.v[(offset + e) % 4] >> 8) >= thr ? x[e] * scale : 0.0f;
  }
  if (head == n) return TS_OK;
  const float *xb = x + head;
  float *yb = y + head;
  uint64_t total = n - head;
  uint64_t nblk = (total + BLOCK_ELEMS - 1) / BLOCK_ELEMS;
  const uint64_t per = 64; /* blocks per work item: 4096 elements */
  uint64_t nitems = (nblk + per - 1) / per;
  int par = total >= 16384 && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
  for (uint64_t it = 0; it < nitems; it++) {
    uint64_t s = it * per * BLOCK_ELEMS, e = s + per * BLOCK_ELEMS;
    if (e > total) e = total;
    dropout_span(xb + s, yb + s, first + s, first + e, thr, scale, seed, step);
  }
  return TS_OK;
}
