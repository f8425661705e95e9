/* bf16 GEMM micro-kernel and vector helpers shared by the AVX512-BF16 convolution kernels
 * (conv_wino.c, conv_gemm.c). Everything here is static inline and compiled for the target
 * below, so each kernel file calls it only behind a CPU check (ts__conv_wino_cpu). */
#ifndef TS_KERNELS_BF16_MK_H
#define TS_KERNELS_BF16_MK_H

#include <immintrin.h>
#include <stdint.h>

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define AI static inline __attribute__((always_inline))

enum { MR = 14 }; /* GEMM micro-kernel rows: 28 accumulators + 2 B vectors + 1 broadcast */

TGT AI __m512 widen16(__mmask16 m, const uint16_t *p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
TGT AI __m256i narrow16(__m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }
static inline __mmask16 lanes(int64_t n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

/* r[i] = row i of a 16x16 f32 block -> r[j] = column j. */
TGT AI void tr16(__m512 r[16]) {
  __m512 t[16], u[16];
  #pragma GCC unroll 16
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  #pragma GCC unroll 16
  for (int i = 0; i < 4; i++) {
    u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  #pragma GCC unroll 16
  for (int c = 0; c < 4; c++) { /* u[c], u[4+c], u[8+c], u[12+c] hold columns c, c+4, c+8, c+12 */
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), v1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 w0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD), w1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    r[c] = _mm512_shuffle_f32x4(v0, v1, 0x88);
    r[c + 8] = _mm512_shuffle_f32x4(v0, v1, 0xDD);
    r[c + 4] = _mm512_shuffle_f32x4(w0, w1, 0x88);
    r[c + 12] = _mm512_shuffle_f32x4(w0, w1, 0xDD);
  }
}

/* bf16 pairs (a_i, b_i) of two vectors: 32 words a0 b0 a1 b1 ... (cvtne2ps_pbh(b, a) puts a in
 * words 0-15 and b in words 16-31; the permutation interleaves them). */
static const short g_pidx[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
TGT AI __m512i interleave_bf16(__m512 a, __m512 b) {
  return _mm512_permutexvar_epi16(_mm512_loadu_si512(g_pidx), (__m512i)_mm512_cvtne2ps_pbh(b, a));
}

/* ---------------------------------------------------------------- GEMM micro-kernel */

/* C (R x 32, f32, row stride ldc) (+)= A (R x 2K bf16) B (2K x 32 bf16), K counted in bf16 pairs.
 * A row r, pair k: the 32-bit word A[r ars + k aks]; B pair k, columns 16 j..16 j+15: the 16
 * words at B + k bks + 16 j (each word the pair of one column). */
TGT AI void mk(const int R, int64_t K, const uint32_t *A, int64_t ars, int64_t aks, const uint32_t *B, int64_t bks,
               float *C, int64_t ldc, int acc) {
  __m512 c0[MR], c1[MR];
#pragma GCC unroll 14
  for (int r = 0; r < R; r++) {
    c0[r] = acc ? _mm512_loadu_ps(C + r * ldc) : _mm512_setzero_ps();
    c1[r] = acc ? _mm512_loadu_ps(C + r * ldc + 16) : _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < K; k++) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(B + k * bks), b1 = (__m512bh)_mm512_loadu_si512(B + k * bks + 16);
    const uint32_t *a = A + k * aks;
#pragma GCC unroll 14
    for (int r = 0; r < R; r++) {
      const __m512bh ar = (__m512bh)_mm512_set1_epi32((int)a[r * ars]);
      c0[r] = _mm512_dpbf16_ps(c0[r], ar, b0);
      c1[r] = _mm512_dpbf16_ps(c1[r], ar, b1);
    }
  }
#pragma GCC unroll 14
  for (int r = 0; r < R; r++) {
    _mm512_storeu_ps(C + r * ldc, c0[r]);
    _mm512_storeu_ps(C + r * ldc + 16, c1[r]);
  }
}

TGT static inline void gemm_rows(int R, int64_t K, const uint32_t *A, int64_t ars, int64_t aks, const uint32_t *B, int64_t bks,
                          float *C, int64_t ldc, int acc) {
  switch (R) {
#define MKC(n) \
  case n: mk(n, K, A, ars, aks, B, bks, C, ldc, acc); break;
    MKC(1) MKC(2) MKC(3) MKC(4) MKC(5) MKC(6) MKC(7) MKC(8) MKC(9) MKC(10) MKC(11) MKC(12) MKC(13) MKC(14)
#undef MKC
    default: break;
  }
}

#endif
