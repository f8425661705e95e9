/* Dropout with a counter-based mask. Philox-4x32-10 is evaluated for 16 counters at a time in a
 * lane-parallel loop the compiler vectorises (same arithmetic as ts_philox4x32; the tests check
 * they agree bit for bit). Elements are grouped in blocks of 64: element 64b + 16w + j uses word w
 * of counter 16b + j, so each word of the 16 lanes covers 16 consecutive elements. */
#include "dropout.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "lowp.h"
#include "tessera/base.h"

#define LANES 16
#define BLOCK_ELEMS (4 * LANES)

static uint32_t keep_threshold(float p) {
  /* u = (w >> 8) * 2^-24 >= p  <=>  (w >> 8) >= ceil(p * 2^24) (exact: powers of two) */
  return (uint32_t)ceil((double)p * 16777216.0);
}

static inline uint64_t ctr_of(uint64_t i) { return (i / BLOCK_ELEMS) * LANES + i % LANES; }
static inline int word_of(uint64_t i) { return (int)((i / LANES) % 4); }

int ts__dropout_keep(uint64_t seed, uint64_t step, uint64_t i, float p) {
  ts_philox_out o = ts_philox4x32(seed, step, ctr_of(i));
  return ts_u32_to_unit(o.v[word_of(i)]) >= p;
}

/* out[w][j] = word w of philox(key, (hi, lo0 + j)), j < LANES. lo0 is a multiple of LANES, so
 * lo0 + j never carries into the high 32 bits. The 32x32->64 multiplies use vpmuludq on the even
 * lanes and on the odd lanes shifted down, recombined with blends (x86 SIMD when the compiler
 * targets it; plain C otherwise). */
#if defined(__AVX512F__)
#include <immintrin.h>
static inline void mulhilo(__m512i c, __m512i m, __m512i *hi, __m512i *lo) {
  __m512i pe = _mm512_mul_epu32(c, m), po = _mm512_mul_epu32(_mm512_srli_epi64(c, 32), m);
  *lo = _mm512_mask_blend_epi32(0xAAAA, pe, _mm512_slli_epi64(po, 32));
  *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe, 32), po);
}
static inline void philox_lanes(uint64_t key, uint64_t hi, uint64_t lo0, uint32_t out[4][LANES]) {
  __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)lo0),
                                _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  __m512i c1 = _mm512_set1_epi32((int)(uint32_t)(lo0 >> 32));
  __m512i c2 = _mm512_set1_epi32((int)(uint32_t)hi), c3 = _mm512_set1_epi32((int)(uint32_t)(hi >> 32));
  const __m512i m0 = _mm512_set1_epi32((int)0xD2511F53u), m1 = _mm512_set1_epi32((int)0xCD9E8D57u);
  uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
  for (int r = 0; r < 10; r++) {
    __m512i h0, l0, h1, l1;
    mulhilo(c0, m0, &h0, &l0);
    mulhilo(c2, m1, &h1, &l1);
    c0 = _mm512_xor_si512(_mm512_xor_si512(h1, c1), _mm512_set1_epi32((int)k0));
    c1 = l1;
    c2 = _mm512_xor_si512(_mm512_xor_si512(h0, c3), _mm512_set1_epi32((int)k1));
    c3 = l0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  _mm512_storeu_si512(out[0], c0);
  _mm512_storeu_si512(out[1], c1);
  _mm512_storeu_si512(out[2], c2);
  _mm512_storeu_si512(out[3], c3);
}
#elif defined(__AVX2__)
#include <immintrin.h>
static inline void mulhilo(__m256i c, __m256i m, __m256i *hi, __m256i *lo) {
  __m256i pe = _mm256_mul_epu32(c, m), po = _mm256_mul_epu32(_mm256_srli_epi64(c, 32), m);
  *lo = _mm256_blend_epi32(pe, _mm256_slli_epi64(po, 32), 0xAA);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
}
static inline void philox_lanes(uint64_t key, uint64_t hi, uint64_t lo0, uint32_t out[4][LANES]) {
  for (int h = 0; h < LANES / 8; h++) {
    uint64_t base = lo0 + 8 * (uint64_t)h;
    __m256i c0 = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)base),
                                  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i c1 = _mm256_set1_epi32((int)(uint32_t)(base >> 32));
    __m256i c2 = _mm256_set1_epi32((int)(uint32_t)hi), c3 = _mm256_set1_epi32((int)(uint32_t)(hi >> 32));
    const __m256i m0 = _mm256_set1_epi32((int)0xD2511F53u), m1 = _mm256_set1_epi32((int)0xCD9E8D57u);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
      __m256i h0, l0, h1, l1;
      mulhilo(c0, m0, &h0, &l0);
      mulhilo(c2, m1, &h1, &l1);
      c0 = _mm256_xor_si256(_mm256_xor_si256(h1, c1), _mm256_set1_epi32((int)k0));
      c1 = l1;
      c2 = _mm256_xor_si256(_mm256_xor_si256(h0, c3), _mm256_set1_epi32((int)k1));
      c3 = l0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    _mm256_storeu_si256((__m256i *)&out[0][8 * h], c0);
    _mm256_storeu_si256((__m256i *)&out[1][8 * h], c1);
    _mm256_storeu_si256((__m256i *)&out[2][8 * h], c2);
    _mm256_storeu_si256((__m256i *)&out[3][8 * h], c3);
  }
}
#else
static inline void philox_lanes(uint64_t key, uint64_t hi, uint64_t lo0, uint32_t out[4][LANES]) {
  for (int j = 0; j < LANES; j++) {
    ts_philox_out o = ts_philox4x32(key, hi, lo0 + (uint64_t)j);
    for (int w = 0; w < 4; w++) out[w][j] = o.v[w];
  }
}
#endif

/* Elements [e0, e1) of the global numbering, e0 a multiple of BLOCK_ELEMS; x/y point at e0. */
static void dropout_span(const float *x, float *y, uint64_t e0, uint64_t e1, int32_t thr,
                         float scale, uint64_t seed, uint64_t step) {
  uint32_t w[4][LANES];
  const uint32_t *wf = &w[0][0]; /* element e of the block <-> wf[e] */
  for (uint64_t b = e0; b < e1; b += BLOCK_ELEMS) {
    philox_lanes(seed, step, ctr_of(b), w);
    size_t m = e1 - b < BLOCK_ELEMS ? (size_t)(e1 - b) : BLOCK_ELEMS;
    const float *xs = x + (b - e0);
    float *ys = y + (b - e0);
    if (m == BLOCK_ELEMS) {
#pragma omp simd
      for (int e = 0; e < BLOCK_ELEMS; e++) {
        /* select by masking the bits: vectorises without masked loads */
        float v = xs[e] * scale;
        uint32_t b;
        memcpy(&b, &v, 4);
        b &= 0u - (uint32_t)((int32_t)(wf[e] >> 8) >= thr);
        memcpy(&ys[e], &b, 4);
      }
    } else {
      for (size_t e = 0; e < m; e++) ys[e] = (int32_t)(wf[e] >> 8) >= thr ? xs[e] * scale : 0.0f;
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
  int32_t thr = (int32_t)keep_threshold(p); /* <= 2^24: signed compares are exact */
  float scale = 1.0f / (1.0f - p);
  /* Head: elements before the first block boundary, handled element by element. */
  uint64_t first = (offset + BLOCK_ELEMS - 1) / BLOCK_ELEMS * BLOCK_ELEMS;
  size_t head = (size_t)(first - offset) < n ? (size_t)(first - offset) : n;
  for (size_t e = 0; e < head; e++) {
    ts_philox_out o = ts_philox4x32(seed, step, ctr_of(offset + e));
    y[e] = (int32_t)(o.v[word_of(offset + e)] >> 8) >= thr ? x[e] * scale : 0.0f;
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

/* ---------------- 16-bit (bf16, f16) ---------------- */

static inline float lp_get(const uint16_t *x, size_t i, int bf) {
  return bf ? ts__bf2f(x[i]) : ts_f16_to_f32(x[i]);
}
static inline uint16_t lp_put(float v, int bf) { return bf ? ts__f2bf(v) : ts_f32_to_f16(v); }

/* dropout_span on 16-bit memory: the same mask words, x*scale in f32, one rounding. */
static void dropout_span_lp(const uint16_t *x, uint16_t *y, uint64_t e0, uint64_t e1, int32_t thr,
                            float scale, uint64_t seed, uint64_t step, int bf) {
  uint32_t w[4][LANES];
  const uint32_t *wf = &w[0][0];
  for (uint64_t b = e0; b < e1; b += BLOCK_ELEMS) {
    philox_lanes(seed, step, ctr_of(b), w);
    size_t m = e1 - b < BLOCK_ELEMS ? (size_t)(e1 - b) : BLOCK_ELEMS;
    const uint16_t *xs = x + (b - e0);
    uint16_t *ys = y + (b - e0);
    if (m == BLOCK_ELEMS && bf) { /* widen, the f32 span's masked multiply, narrow */
      float t[BLOCK_ELEMS];
#pragma omp simd
      for (int e = 0; e < BLOCK_ELEMS; e++) t[e] = ts__bf2f(xs[e]);
#pragma omp simd
      for (int e = 0; e < BLOCK_ELEMS; e++) {
        float v = t[e] * scale;
        uint32_t u;
        memcpy(&u, &v, 4);
        u &= 0u - (uint32_t)((int32_t)(wf[e] >> 8) >= thr);
        memcpy(&t[e], &u, 4);
      }
#pragma omp simd
      for (int e = 0; e < BLOCK_ELEMS; e++) ys[e] = ts__f2bf(t[e]);
    } else {
      for (size_t e = 0; e < m; e++)
        ys[e] = (int32_t)(wf[e] >> 8) >= thr ? lp_put(lp_get(xs, e, bf) * scale, bf) : (uint16_t)0;
    }
  }
}

int ts__dropout_lp(ts_dtype dt, const void *xv, void *yv, size_t n, float p, uint64_t seed,
                   uint64_t step, uint64_t offset) {
  if (!(p >= 0.0f && p <= 1.0f))
    return ts_error_set(TS_EINVAL, "dropout (16-bit): probability %g outside [0,1]", (double)p);
  if (dt != TS_BF16 && dt != TS_F16)
    return ts_error_set(TS_EDTYPE, "dropout (16-bit): dtype %s is not bf16 or f16", ts_dtype_name(dt));
  const uint16_t *x = xv;
  uint16_t *y = yv;
  const int bf = dt == TS_BF16;
  if (n == 0) return TS_OK;
  if (p == 0.0f) {
    if (x != y) memcpy(y, x, n * 2);
    return TS_OK;
  }
  if (p >= 1.0f) {
    memset(y, 0, n * 2); /* +0 in both formats */
    return TS_OK;
  }
  const int32_t thr = (int32_t)keep_threshold(p);
  const float scale = 1.0f / (1.0f - p);
  uint64_t first = (offset + BLOCK_ELEMS - 1) / BLOCK_ELEMS * BLOCK_ELEMS;
  size_t head = (size_t)(first - offset) < n ? (size_t)(first - offset) : n;
  for (size_t e = 0; e < head; e++) {
    ts_philox_out o = ts_philox4x32(seed, step, ctr_of(offset + e));
    y[e] = (int32_t)(o.v[word_of(offset + e)] >> 8) >= thr ? lp_put(lp_get(x, e, bf) * scale, bf) : (uint16_t)0;
  }
  if (head == n) return TS_OK;
  const uint16_t *xb = x + head;
  uint16_t *yb = y + head;
  const uint64_t total = n - head, nblk = (total + BLOCK_ELEMS - 1) / BLOCK_ELEMS, per = 64;
  const uint64_t nitems = (nblk + per - 1) / per;
  const int par = total >= 16384 && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
  for (uint64_t it = 0; it < nitems; it++) {
    uint64_t s = it * per * BLOCK_ELEMS, e = s + per * BLOCK_ELEMS;
    if (e > total) e = total;
    dropout_span_lp(xb + s, yb + s, first + s, first + e, thr, scale, seed, step, bf);
  }
  return TS_OK;
}
