/* bf16 Winograd F(2x2,3x3) convolution for 3x3 stride-1 pad-1 layers (see conv.h).
 *
 * Transforms (Lavin & Gray), 1-D, applied along rows then columns (input tile d 4x4, kernel g
 * 3x3, output tile y 2x2; position p = 4a + b of the 4x4 transformed tile):
 *   input   V = B^T d B:  v0 = d0 - d2, v1 = d1 + d2, v2 = d2 - d1, v3 = d1 - d3
 *   weights U = G g G^T:  u0 = g0, u1 = (g0 + g1 + g2)/2, u2 = (g0 - g1 + g2)/2, u3 = g2
 *   output  y = A^T M A:  y0 = m0 + m1 + m2, y1 = m1 - m2 - m3
 * with M_p = V_p U_p a GEMM per position (tiles x in-channels times in-channels x out-channels).
 * Backward-data is the same forward with the kernel rotated 180 degrees and the channels swapped.
 * Backward-weights is the adjoint: dM = A dY A^T (dm0 = y0, dm1 = y0 + y1, dm2 = y0 - y1,
 * dm3 = -y1), dU_p = V_p^T dM_p (a GEMM whose K is the tile count), dW = G^T dU G.
 *
 * Numbers: the activations and weights arrive in bf16; the transforms run in f32 (AVX-512, 16
 * channels per vector: the plain NCHW planes are transposed 16x16 into pixel-major staging
 * buffers and back, so no separate reorder pass exists); V, U and dM are stored rounded to bf16
 * (round to nearest even); the GEMMs are AVX512-BF16 dot products (vdpbf16ps) accumulating in
 * f32; M and dU stay f32; outputs are rounded to bf16 once. F(2x2,3x3)'s transforms have
 * entries 0, +-1/2 and +-1, so the rounding of V and U (or V and dM) adds about one bf16 unit
 * roundoff relative to the output (docs/mixed-precision.md, test_conv_wino have the figures).
 *
 * Layouts (bf16 pairs are what vdpbf16ps multiplies: element 2i with 2i, 2i+1 with 2i+1):
 *   U  [p][Op/32][Cp/2][32][2]  forward weights in 32-column panels (each GEMM's B is one
 *                          contiguous panel: no cache-set conflicts from an Op-word stride):
 *                          in-channel pairs, in-channels padded to 16,
 *                          out-channels to 32 (the whole array, per call)
 *   Vl [p][tile][Cp]       forward, per thread, for one chunk of tile rows (phase_fwd): the
 *                          transformed input never goes to memory
 *   V2 [p][pair][Cp][2]    backward-weights, tile pairs; dM [p][pair][Op][2]; dU [p][Cp][Op] f32
 *                          (per chunk and per thread when dU is small, else whole arrays)
 * Tiles: t = (n TH + th) TW + tw. Position strides are padded by a cache line.
 * Threads: OpenMP (oneDNN's thread count, omp_get_max_threads()), static schedules, no atomics.
 * Forward and backward-data: every output element is computed by one thread in a fixed order, so
 * the bits are the same for any thread count. Backward-weights: fused layers sum per-thread
 * partial dU in thread order (the same bits run to run for a given thread count); the others
 * give every dU element to one thread. */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "bf16_mk.h"
#include "conv.h"
#include "dnnl_ctx.h"
#include "lowp.h"
#include "tessera/base.h"
#include "tessera/tensor.h"


enum { NP = 16, KB = 256 }; /* positions; bwd-weights K block */

int ts__conv_wino_cpu(void) {
  static int v = -1;
  if (v < 0) {
    __builtin_cpu_init();
    v = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bf16");
  }
  return v;
}

int ts__conv_wino_shape(const ts__conv_desc *d) {
  return d->KH == 3 && d->KW == 3 && d->sh == 1 && d->sw == 1 && d->ph == 1 && d->pw == 1 && d->dh == 1 &&
         d->dw == 1 && d->groups == 1 && d->OH == d->H && d->OW == d->W && d->N >= 1 && d->C >= 1 && d->O >= 1 &&
         d->O * d->C * 9 < ((int64_t)1 << 30) && d->H >= 1 && d->W >= 1;
}

static double g_wstat[3][3];
void ts__conv_wino_stats(double out[3][3], int reset) {
  if (out) memcpy(out, g_wstat, sizeof g_wstat);
  if (reset) memset(g_wstat, 0, sizeof g_wstat);
}

/* Process-wide scratch, grown to the largest size seen (kernels run from one thread at a time). */
static void *g_scr[4];
static size_t g_scap[4];
static void *scratch(int i, size_t bytes) { return ts__scratch_grow(&g_scr[i], &g_scap[i], bytes); }

/* Equivalent forward convolution: Ci in-channels, Co out-channels, H x W in and out. */
typedef struct {
  int64_t N, Ci, Co, H, W;
  int64_t TH, TW, TI, T, T2; /* tiles per column / row / image, total, pairs */
  int64_t Cp, Op;            /* Ci padded to 16, Co padded to 32 */
  int64_t vps, mps, ups;     /* position strides of V2, dM (bf16) and dU (f32): padded by a cache
                              * line so the 16 positions of a tile do not share an L1 set */
  int nthr;
} geom;

static void geom_init(geom *g, int64_t N, int64_t Ci, int64_t Co, int64_t H, int64_t W) {
  g->N = N, g->Ci = Ci, g->Co = Co, g->H = H, g->W = W;
  g->TH = (H + 1) / 2, g->TW = (W + 1) / 2, g->TI = g->TH * g->TW, g->T = N * g->TI, g->T2 = (g->T + 1) / 2;
  g->Cp = (Ci + 15) / 16 * 16, g->Op = (Co + 31) / 32 * 32;
  g->vps = g->T2 * g->Cp * 2 + 32, g->mps = g->T2 * g->Op * 2 + 32, g->ups = g->Cp * g->Op + 16;
  g->nthr = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (g->nthr < 1) g->nthr = 1;
}

/* ---------------------------------------------------------------- vector helpers */



// src: nc (<= 16) channel rows of W bf16 pixels, plane stride ps -> dst: W pixels x 16 channels f32.
// 32 pixels at a time: each row loaded as 16 words of pixel pairs, one 16x16 transpose of the
// words gives per pixel pair the 16 channels' pairs, split into the two pixels by a shift and a
// mask (half the shuffles of transposing widened floats 16 pixels at a time)
TGT static void stage_row(const uint16_t *src, int64_t ps, int nc, int64_t W, float *dst) {
  const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
  for (int64_t w0 = 0; w0 < W; w0 += 32) {
    const int nw = W - w0 < 32 ? (int)(W - w0) : 32;
    const __mmask32 m = nw >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << nw) - 1);
    __m512 r[16];
    #pragma GCC unroll 16
    for (int c = 0; c < 16; c++) r[c] = c < nc ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(m, src + c * ps + w0)) : _mm512_setzero_ps();
    tr16(r);
    for (int j = 0; 2 * j < nw; j++) {
      const __m512i v = _mm512_castps_si512(r[j]);
      _mm512_storeu_ps(dst + (w0 + 2 * j) * 16, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
      if (2 * j + 1 < nw) _mm512_storeu_ps(dst + (w0 + 2 * j + 1) * 16, _mm512_castsi512_ps(_mm512_and_si512(v, hi)));
    }
  }
}

// src: W pixels x 16 channels f32 -> dst: nc channel rows of W bf16 pixels, plane stride ps
TGT static void unstage_row(const float *src, int64_t W, uint16_t *dst, int64_t ps, int nc) {
  for (int64_t w0 = 0; w0 < W; w0 += 16) {
    const int nw = W - w0 < 16 ? (int)(W - w0) : 16;
    const __mmask16 m = lanes(nw);
    __m512 r[16];
    #pragma GCC unroll 16
    for (int k = 0; k < 16; k++) r[k] = k < nw ? _mm512_loadu_ps(src + (w0 + k) * 16) : _mm512_setzero_ps();
    tr16(r);
    for (int c = 0; c < nc; c++) _mm256_mask_storeu_epi16(dst + c * ps + w0, m, narrow16(r[c]));
  }
}

/* Stores 16 bf16 values of tile t into a pair layout row (base points at pair t/2, channel c0). */
TGT AI void store_pair(uint16_t *base, int64_t t, __m512 v) {
  __m512i e = _mm512_cvtepu16_epi32(narrow16(v));
  if (t & 1) e = _mm512_slli_epi32(e, 16);
  _mm512_mask_storeu_epi16(base, (t & 1) ? (__mmask32)0xAAAAAAAAu : (__mmask32)0x55555555u, e);
}


/* ---------------------------------------------------------------- transforms */

/* V (16 vectors, p = 4a + b) of the 4x4 input tile whose top-left pixel is S (16 floats per
 * pixel, row stride ws pixels). */
TGT AI void in_tf(const float *S, int64_t ws, __m512 v[NP]) {
  __m512 d[4][4], t[4][4];
  #pragma GCC unroll 16
  for (int i = 0; i < 4; i++)
    #pragma GCC unroll 16
    for (int j = 0; j < 4; j++) d[i][j] = _mm512_loadu_ps(S + (i * ws + j) * 16);
  #pragma GCC unroll 16
  for (int j = 0; j < 4; j++) {
    t[0][j] = _mm512_sub_ps(d[0][j], d[2][j]);
    t[1][j] = _mm512_add_ps(d[1][j], d[2][j]);
    t[2][j] = _mm512_sub_ps(d[2][j], d[1][j]);
    t[3][j] = _mm512_sub_ps(d[1][j], d[3][j]);
  }
  #pragma GCC unroll 16
  for (int a = 0; a < 4; a++) {
    v[4 * a + 0] = _mm512_sub_ps(t[a][0], t[a][2]);
    v[4 * a + 1] = _mm512_add_ps(t[a][1], t[a][2]);
    v[4 * a + 2] = _mm512_sub_ps(t[a][2], t[a][1]);
    v[4 * a + 3] = _mm512_sub_ps(t[a][1], t[a][3]);
  }
}


/* Input transform of every tile into the pair layout (backward-weights): src (N, Ci, H, W) bf16
 * -> V2 [p][T2][Cp][2]. One task per image; tiles in pairs where both are in the image. */
TGT static void phase_in_pairs_team(const geom *g, const uint16_t *src, uint16_t *V2, float *loc, size_t locf) {
  const int64_t ncb = g->Cp / 16, Ws = 2 * g->TW + 2, Hs = 2 * g->TH + 2, HW = g->H * g->W, cbs = Hs * Ws * 16;
  {
    float *S = loc + (size_t)omp_get_thread_num() * locf; /* [cb][Hs][Ws][16] */
    memset(S, 0, sizeof(float) * (size_t)(ncb * cbs));  /* the border stays zero: the padding */
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g->N; n++) {
      for (int64_t cb = 0; cb < ncb; cb++) {
        const int nc = g->Ci - cb * 16 < 16 ? (int)(g->Ci - cb * 16) : 16;
        for (int64_t h = 0; h < g->H; h++)
          stage_row(src + ((n * g->Ci + cb * 16) * g->H + h) * g->W, HW, nc, g->W, S + cb * cbs + ((h + 1) * Ws + 1) * 16);
      }
      for (int64_t ti = 0; ti < g->TI;) {
        const int64_t t = n * g->TI + ti;
        const int two = !(t & 1) && ti + 1 < g->TI;
        for (int64_t cb = 0; cb < ncb; cb++) {
          __m512 va[NP], vb[NP];
          const int64_t th = ti / g->TW, tw = ti % g->TW;
          in_tf(S + cb * cbs + (2 * th * Ws + 2 * tw) * 16, Ws, va);
          if (two) {
            const int64_t th1 = (ti + 1) / g->TW, tw1 = (ti + 1) % g->TW;
            in_tf(S + cb * cbs + (2 * th1 * Ws + 2 * tw1) * 16, Ws, vb);
            #pragma GCC unroll 16
            for (int p = 0; p < NP; p++)
              _mm512_storeu_si512(V2 + p * g->vps + (t / 2 * g->Cp + cb * 16) * 2, interleave_bf16(va[p], vb[p]));
          } else {
            #pragma GCC unroll 16
            for (int p = 0; p < NP; p++) store_pair(V2 + p * g->vps + (t / 2 * g->Cp + cb * 16) * 2, t, va[p]);
          }
        }
        ti += two ? 2 : 1;
      }
    }
  }
}
static void phase_in_pairs(const geom *g, const uint16_t *src, uint16_t *V2, float *loc, size_t locf) {
#pragma omp parallel num_threads(g->nthr) if (g->nthr > 1)
  phase_in_pairs_team(g, src, V2, loc, locf);
}

/* One bf16 weight element per lane: elements e (lanes in m) of w, through 32-bit gathers. */
TGT AI __m512 gather_bf16(const uint16_t *w, __m512i e, __mmask16 m) {
  const __m512i zero = _mm512_setzero_si512();
  const __mmask16 z = _mm512_cmpeq_epi32_mask(e, zero);
  /* the word ending at element e (so nothing past the buffer is read); element 0: the word at 0 */
  __m512i off = _mm512_mask_mov_epi32(_mm512_sub_epi32(_mm512_slli_epi32(e, 1), _mm512_set1_epi32(2)), z, zero);
  __m512i v = _mm512_mask_i32gather_epi32(zero, m, off, (const void *)w, 1);
  __m512i hi = _mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u));
  return _mm512_castsi512_ps(_mm512_mask_mov_epi32(hi, z, _mm512_slli_epi32(v, 16)));
}

/* Weight transform of the equivalent forward conv: element (i in, j out), tap k (kh 3 + kw) is
 * w[j sj + i si + (rot ? 8 - k : k)] -> U [p][Op/32][Cp/2][32][2]; zero outside Ci x Co. */
TGT static void phase_wtf_team(const geom *g, const uint16_t *w, int64_t si, int64_t sj, int rot, uint16_t *U) {
  const int64_t nkk = g->Cp / 2, njb = g->Op / 16;
#pragma omp for schedule(static)
  for (int64_t task = 0; task < nkk * njb; task++) {
    /* the order that reads w sequentially: forward (lanes j a row apart) kk inner; backward-data
     * (lanes j 9 elements apart, rows i = kk) j inner */
    const int64_t kk = rot ? task / njb : task % nkk, j0 = (rot ? task % njb : task / nkk) * 16;
    __m512 u[2][NP];
    #pragma GCC unroll 16
    for (int e = 0; e < 2; e++) {
      const int64_t i = 2 * kk + e;
      const __mmask16 m = i < g->Ci ? lanes(g->Co - j0) : 0;
      const __m512i base = _mm512_add_epi32(
          _mm512_mullo_epi32(_mm512_add_epi32(_mm512_set1_epi32((int)j0), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)),
                             _mm512_set1_epi32((int)sj)),
          _mm512_set1_epi32((int)(i * si)));
      __m512 gk[3][3], t[4][3];
      #pragma GCC unroll 16
      for (int k = 0; k < 9; k++)
        gk[k / 3][k % 3] = gather_bf16(w, _mm512_add_epi32(base, _mm512_set1_epi32(rot ? 8 - k : k)), m);
      const __m512 half = _mm512_set1_ps(0.5f);
      #pragma GCC unroll 16
      for (int j = 0; j < 3; j++) {
        t[0][j] = gk[0][j];
        t[1][j] = _mm512_mul_ps(_mm512_add_ps(_mm512_add_ps(gk[0][j], gk[1][j]), gk[2][j]), half);
        t[2][j] = _mm512_mul_ps(_mm512_add_ps(_mm512_sub_ps(gk[0][j], gk[1][j]), gk[2][j]), half);
        t[3][j] = gk[2][j];
      }
      #pragma GCC unroll 16
      for (int a = 0; a < 4; a++) {
        u[e][4 * a + 0] = t[a][0];
        u[e][4 * a + 1] = _mm512_mul_ps(_mm512_add_ps(_mm512_add_ps(t[a][0], t[a][1]), t[a][2]), half);
        u[e][4 * a + 2] = _mm512_mul_ps(_mm512_add_ps(_mm512_sub_ps(t[a][0], t[a][1]), t[a][2]), half);
        u[e][4 * a + 3] = t[a][2];
      }
    }
    #pragma GCC unroll 16
    for (int p = 0; p < NP; p++) _mm512_storeu_si512(U + (((p * njb / 2 + j0 / 32) * nkk + kk) * 32 + j0 % 32) * 2, interleave_bf16(u[0][p], u[1][p]));
  }
}
static void phase_wtf(const geom *g, const uint16_t *w, int64_t si, int64_t sj, int rot, uint16_t *U) {
#pragma omp parallel num_threads(g->nthr) if (g->nthr > 1)
  phase_wtf_team(g, w, si, sj, rot, U);
}

/* Stages the input rows of tile rows [gr0, gr1) (global: n TH + th) of src (N, Cs, H, W) bf16,
 * 16 channels per block (nb blocks, zero past Cs): S [block][SR][ws][16] f32. pad 1: the rows
 * 2 th - 1 .. 2 th + 2 of each tile row with a zero column left and zeros right (forward input);
 * pad 0: rows 2 th, 2 th + 1 from column 0 (output gradient). Rows outside the image are zero.
 * rb[k]: the staged row of tile row gr0 + k's first row. */
TGT static void stage_chunk(const geom *g, const uint16_t *src, int64_t Cs, int64_t nb, int64_t gr0, int64_t gr1,
                            int pad, float *S, int64_t SR, int64_t ws, int64_t *rb) {
  const int64_t HW = g->H * g->W, bs = SR * ws * 16;
  int64_t srow = 0;
  for (int64_t gr = gr0; gr < gr1;) {
    const int64_t n = gr / g->TH, th0 = gr % g->TH, nth = g->TH - th0 < gr1 - gr ? g->TH - th0 : gr1 - gr;
    for (int64_t r = 0; r < 2 * nth + 2 * pad; r++) {
      const int64_t h = 2 * th0 - pad + r;
      for (int64_t cb = 0; cb < nb; cb++) {
        float *row = S + cb * bs + (srow + r) * ws * 16;
        if (h < 0 || h >= g->H) {
          memset(row, 0, sizeof(float) * (size_t)(ws * 16));
          continue;
        }
        const int nc = Cs - cb * 16 < 16 ? (int)(Cs - cb * 16) : 16;
        if (pad) memset(row, 0, sizeof(float) * 16);
        stage_row(src + ((n * Cs + cb * 16) * g->H + h) * g->W, HW, nc, g->W, row + pad * 16);
        if (ws > g->W + pad) memset(row + (g->W + pad) * 16, 0, sizeof(float) * (size_t)((ws - pad - g->W) * 16));
      }
    }
    for (int64_t k = 0; k < nth; k++) rb[gr - gr0 + k] = srow + 2 * k;
    srow += 2 * nth + 2 * pad, gr += nth;
  }
}

/* The equivalent forward conv, fused per chunk of rpc tile rows (which may span images), all in
 * per-thread buffers: stage the chunk's input rows (with their zero padding), input transform
 * -> Vl [p][tile][Cp] bf16, then per 32 out-channels the 16 GEMMs -> Ml [p][tile][32] f32 and
 * the output transform (+ bias) -> So [row][col][16] -> dst (N, Co, H, W) bf16. */
typedef struct {
  int64_t rpc, TB, SR, Ws, Wo; /* tile rows and tiles per chunk; staged rows per 16 channels; widths */
  int64_t VP, MP;               /* position strides of Vl (bf16) and Ml (f32), a line over a multiple */
  size_t s, v, m, o;            /* floats of each per-thread buffer */
} fwd_plan;

static void fwd_plan_init(const geom *g, fwd_plan *f) {
  const int64_t target = g->Cp <= 128 ? 64 : 32; /* tiles per chunk: Vl and Ml in L2 */
  f->rpc = g->TW >= target ? 1 : target / g->TW;
  if (f->rpc > 64) f->rpc = 64;
  f->TB = f->rpc * g->TW, f->SR = 4 * f->rpc + 2, f->Ws = 2 * g->TW + 2, f->Wo = 2 * g->TW;
  f->VP = f->TB * g->Cp + 32, f->MP = f->TB * 32 + 16;
  f->s = (size_t)(g->Cp / 16 * f->SR * f->Ws * 16), f->v = (size_t)(NP * f->VP / 2);
  f->m = (size_t)(NP * f->MP), f->o = (size_t)(2 * f->rpc * f->Wo * 16);
}
static size_t fwd_plan_floats(const fwd_plan *f) { return f->s + f->v + f->m + f->o + 64; }

TGT static void phase_fwd_team(const geom *g, const fwd_plan *f, const uint16_t *src, const uint16_t *U, const uint16_t *bias,
                               uint16_t *dst, float *loc) {
  const int64_t NTH = g->N * g->TH, nch = (NTH + f->rpc - 1) / f->rpc, Ws = f->Ws, Wo = f->Wo;
  const int64_t HW = g->H * g->W, K2 = g->Cp / 2, ncb = g->Cp / 16, cbs = f->SR * Ws * 16;
  {
    float *S = loc + (size_t)omp_get_thread_num() * fwd_plan_floats(f), *Ml = S + f->s + f->v, *So = Ml + f->m;
    uint16_t *Vl = (uint16_t *)(S + f->s);
    int64_t rb[64]; /* staged row of each tile row's first input row */
#pragma omp for schedule(static)
    for (int64_t ch = 0; ch < nch; ch++) {
      const int64_t gr0 = ch * f->rpc, gr1 = gr0 + f->rpc < NTH ? gr0 + f->rpc : NTH, nt = (gr1 - gr0) * g->TW;
      stage_chunk(g, src, g->Ci, ncb, gr0, gr1, 1, S, f->SR, Ws, rb);
      for (int64_t tl = 0; tl < nt; tl++) {
        const int64_t lr = tl / g->TW, tw = tl % g->TW;
        for (int64_t cb = 0; cb < ncb; cb++) {
          __m512 v[NP];
          in_tf(S + cb * cbs + (rb[lr] * Ws + 2 * tw) * 16, Ws, v);
          #pragma GCC unroll 16
          for (int p = 0; p < NP; p++) _mm256_storeu_si256((__m256i *)(Vl + p * f->VP + tl * g->Cp + cb * 16), narrow16(v[p]));
        }
      }
      const int64_t rpb = (nt + (nt + MR - 1) / MR - 1) / ((nt + MR - 1) / MR); /* balanced row blocks */
      for (int64_t ob = 0; ob < g->Op; ob += 32) {
        for (int p = 0; p < NP; p++)
          for (int64_t r0 = 0; r0 < nt; r0 += rpb)
            gemm_rows(nt - r0 < rpb ? (int)(nt - r0) : (int)rpb, K2, (const uint32_t *)(Vl + p * f->VP + r0 * g->Cp), K2, 1,
                      (const uint32_t *)U + (p * g->Op + ob) * K2, 32, Ml + p * f->MP + r0 * 32, 32, 0);
        #pragma GCC unroll 16
        for (int hf = 0; hf < 2; hf++) {
          const int64_t og = ob + hf * 16;
          if (og >= g->Co) break;
          const int nc = g->Co - og < 16 ? (int)(g->Co - og) : 16;
          const __m512 bv = bias ? widen16(lanes(nc), bias + og) : _mm512_setzero_ps();
          for (int64_t tl = 0; tl < nt; tl++) {
            const int64_t lr = tl / g->TW, tw = tl % g->TW;
            __m512 m[NP], s[2][4];
            #pragma GCC unroll 16
            for (int p = 0; p < NP; p++) m[p] = _mm512_loadu_ps(Ml + p * f->MP + tl * 32 + hf * 16);
            #pragma GCC unroll 16
            for (int b = 0; b < 4; b++) {
              s[0][b] = _mm512_add_ps(_mm512_add_ps(m[b], m[4 + b]), m[8 + b]);
              s[1][b] = _mm512_sub_ps(_mm512_sub_ps(m[4 + b], m[8 + b]), m[12 + b]);
            }
            #pragma GCC unroll 16
            for (int i = 0; i < 2; i++) {
              float *o = So + ((lr * 2 + i) * Wo + 2 * tw) * 16;
              _mm512_storeu_ps(o, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s[i][0], s[i][1]), s[i][2]), bv));
              _mm512_storeu_ps(o + 16, _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(s[i][1], s[i][2]), s[i][3]), bv));
            }
          }
          for (int64_t lr = 0; lr < gr1 - gr0; lr++) {
            const int64_t gr = gr0 + lr, n = gr / g->TH, th = gr % g->TH;
            #pragma GCC unroll 16
            for (int i = 0; i < 2; i++) {
              const int64_t h = 2 * th + i;
              if (h < g->H)
                unstage_row(So + (lr * 2 + i) * Wo * 16, g->W, dst + ((n * g->Co + og) * g->H + h) * g->W, HW, nc);
            }
          }
        }
      }
    }
  }
}
static void phase_fwd(const geom *g, const fwd_plan *f, const uint16_t *src, const uint16_t *U, const uint16_t *bias,
                      uint16_t *dst, float *loc) {
#pragma omp parallel num_threads(g->nthr) if (g->nthr > 1)
  phase_fwd_team(g, f, src, U, bias, dst, loc);
}

static int wino_fwd(const geom *g, const uint16_t *src, const uint16_t *w, int64_t si, int64_t sj, int rot,
                    const uint16_t *bias, uint16_t *dst, double st[3], int dir, const char *what) {
  fwd_plan f;
  fwd_plan_init(g, &f);
  uint16_t *U = scratch(1, (size_t)(NP * g->Cp * g->Op) * 2);
  float *loc = scratch(3, fwd_plan_floats(&f) * sizeof(float) * (size_t)g->nthr);
  if (!U || !loc) return ts_error_set(TS_ENOMEM, "%s: out of memory for Winograd buffers", what);
  double t0 = ts_time_now();
  phase_wtf(g, w, si, sj, rot, U);
  double t1 = ts_time_now();
  phase_fwd(g, &f, src, U, bias, dst, loc);
  double t2 = ts_time_now();
  if (st) st[0] += t1 - t0, st[1] += t2 - t1;
  g_wstat[dir][0] += t1 - t0, g_wstat[dir][1] += t2 - t1;
  return TS_OK;
}

static int check(const ts__conv_desc *d, const void *a, const void *b, const void *c, const char *what) {
  int rc = ts__conv_check(d, what);
  if (rc) return rc;
  if (!ts__conv_wino_shape(d))
    return ts_error_set(TS_EINVAL, "%s: not a 3x3 stride-1 pad-1 ungrouped conv (N%lld C%lld %lldx%lld O%lld K%lldx%lld)",
                        what, (long long)d->N, (long long)d->C, (long long)d->H, (long long)d->W, (long long)d->O,
                        (long long)d->KH, (long long)d->KW);
  if (!ts__conv_wino_cpu()) return ts_error_set(TS_EBACKEND, "%s: the CPU has no AVX512-BF16", what);
  if (!a || !b || !c) return ts_error_set(TS_EINVAL, "%s: NULL buffer", what);
  return TS_OK;
}

int ts__conv2d_fwd_wino(const ts__conv_desc *d, const void *x, const void *w, const void *b, void *y, double st[3]) {
  const char *what = "conv2d (bf16 Winograd)";
  int rc = check(d, x, w, y, what);
  if (rc) return rc;
  geom g;
  geom_init(&g, d->N, d->C, d->O, d->H, d->W);
  return wino_fwd(&g, x, w, 9, d->C * 9, 0, b, y, st, 0, what);
}

int ts__conv2d_bwd_data_wino(const ts__conv_desc *d, const void *dy, const void *w, void *dx, double st[3]) {
  const char *what = "conv2d_bwd_data (bf16 Winograd)";
  int rc = check(d, dy, w, dx, what);
  if (rc) return rc;
  geom g;
  geom_init(&g, d->N, d->O, d->C, d->H, d->W);
  return wino_fwd(&g, dy, w, d->C * 9, 9, 1, NULL, dx, st, 1, what);
}

/* ---------------------------------------------------------------- backward weights */

/* dM = A dY A^T of every tile: dy (N, Co, H, W) bf16 -> dM [p][T2][Op][2]. One task per image,
 * tiles in pairs where both are in the image. */
TGT AI void dm_tf(const float *s, int64_t Ws, __m512 out[NP]) {
  __m512 y[2][2], r[4][2];
  #pragma GCC unroll 16
  for (int i = 0; i < 2; i++)
    #pragma GCC unroll 16
    for (int j = 0; j < 2; j++) y[i][j] = _mm512_loadu_ps(s + (i * Ws + j) * 16);
  #pragma GCC unroll 16
  for (int j = 0; j < 2; j++) {
    r[0][j] = y[0][j];
    r[1][j] = _mm512_add_ps(y[0][j], y[1][j]);
    r[2][j] = _mm512_sub_ps(y[0][j], y[1][j]);
    r[3][j] = _mm512_sub_ps(_mm512_setzero_ps(), y[1][j]);
  }
  #pragma GCC unroll 16
  for (int a = 0; a < 4; a++) {
    out[4 * a] = r[a][0];
    out[4 * a + 1] = _mm512_add_ps(r[a][0], r[a][1]);
    out[4 * a + 2] = _mm512_sub_ps(r[a][0], r[a][1]);
    out[4 * a + 3] = _mm512_sub_ps(_mm512_setzero_ps(), r[a][1]);
  }
}

TGT static void phase_dm_team(const geom *g, const uint16_t *dy, uint16_t *dM, float *loc, size_t locf) {
  const int64_t nob = g->Op / 16, Ws = 2 * g->TW, Hs = 2 * g->TH, HW = g->H * g->W, obs = Hs * Ws * 16;
  {
    float *S = loc + (size_t)omp_get_thread_num() * locf; /* [ob][Hs][Ws][16] */
    memset(S, 0, sizeof(float) * (size_t)(nob * obs));   /* rows and columns past H, W stay zero */
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g->N; n++) {
      for (int64_t ob = 0; ob < nob; ob++) {
        const int nc = g->Co - ob * 16 < 16 ? (int)(g->Co - ob * 16) : 16;
        for (int64_t h = 0; h < g->H; h++)
          stage_row(dy + ((n * g->Co + ob * 16) * g->H + h) * g->W, HW, nc, g->W, S + ob * obs + h * Ws * 16);
      }
      for (int64_t ti = 0; ti < g->TI;) {
        const int64_t t = n * g->TI + ti;
        const int two = !(t & 1) && ti + 1 < g->TI;
        for (int64_t ob = 0; ob < nob; ob++) {
          __m512 va[NP], vb[NP];
          const int64_t th = ti / g->TW, tw = ti % g->TW;
          dm_tf(S + ob * obs + (2 * th * Ws + 2 * tw) * 16, Ws, va);
          if (two) {
            const int64_t th1 = (ti + 1) / g->TW, tw1 = (ti + 1) % g->TW;
            dm_tf(S + ob * obs + (2 * th1 * Ws + 2 * tw1) * 16, Ws, vb);
            #pragma GCC unroll 16
            for (int p = 0; p < NP; p++)
              _mm512_storeu_si512(dM + p * g->mps + (t / 2 * g->Op + ob * 16) * 2, interleave_bf16(va[p], vb[p]));
          } else {
            #pragma GCC unroll 16
            for (int p = 0; p < NP; p++) store_pair(dM + p * g->mps + (t / 2 * g->Op + ob * 16) * 2, t, va[p]);
          }
        }
        ti += two ? 2 : 1;
      }
    }
  }
}
static void phase_dm(const geom *g, const uint16_t *dy, uint16_t *dM, float *loc, size_t locf) {
#pragma omp parallel num_threads(g->nthr) if (g->nthr > 1)
  phase_dm_team(g, dy, dM, loc, locf);
}

/* dU [p][Cp][Op] = sum over tiles of V2_p^T dM_p: one task per (position, 32 out-channels),
 * the tile sum in blocks of KB pairs, each in the same order every run. */
TGT static void phase_du_team(const geom *g, const uint16_t *V2, const uint16_t *dM, float *dU) {
  const int64_t nob = g->Op / 32, cpb = (g->Cp + (g->Cp + MR - 1) / MR - 1) / ((g->Cp + MR - 1) / MR);
#pragma omp for schedule(static)
  for (int64_t task = 0; task < NP * nob; task++) {
    const int64_t p = task / nob, ob = task % nob * 32;
    for (int64_t k0 = 0; k0 < g->T2; k0 += KB) {
      const int64_t kn = g->T2 - k0 < KB ? g->T2 - k0 : KB;
      for (int64_t c0 = 0; c0 < g->Cp; c0 += cpb)
        gemm_rows(g->Cp - c0 < cpb ? (int)(g->Cp - c0) : (int)cpb, kn, (const uint32_t *)V2 + p * g->vps / 2 + k0 * g->Cp + c0, 1,
                  g->Cp, (const uint32_t *)dM + p * g->mps / 2 + k0 * g->Op + ob, g->Op, dU + p * g->ups + c0 * g->Op + ob,
                  g->Op, k0 > 0);
    }
  }
}
static void phase_du(const geom *g, const uint16_t *V2, const uint16_t *dM, float *dU) {
#pragma omp parallel num_threads(g->nthr) if (g->nthr > 1)
  phase_du_team(g, V2, dM, dU);
}

/* dW = G^T dU G per (o, c) -> dw (Co, Ci, 3, 3) bf16: one task per 16 in-channels, vectors over
 * 16 out-channels (contiguous in dU), through a small buffer so dw is written row by row. */
TGT static void phase_dw_team(const geom *g, const float *dU, uint16_t *dw, float *loc, size_t locf) {
  const int64_t pst = g->ups, ncb = (g->Ci + 15) / 16;
  {
    float *tmp = loc + (size_t)omp_get_thread_num() * locf; /* [16 c][9][16 o] */
#pragma omp for schedule(static)
    for (int64_t cb = 0; cb < ncb; cb++) {
      const int64_t c0 = cb * 16, ncc = g->Ci - c0 < 16 ? g->Ci - c0 : 16;
      for (int64_t o0 = 0; o0 < g->Co; o0 += 16) {
        for (int64_t c = 0; c < ncc; c++) {
          const float *u = dU + (c0 + c) * g->Op + o0;
          __m512 r[4][3];
          const __m512 half = _mm512_set1_ps(0.5f);
          #pragma GCC unroll 16
          for (int a = 0; a < 4; a++) {
            const __m512 u0 = _mm512_loadu_ps(u + 4 * a * pst), u1 = _mm512_loadu_ps(u + (4 * a + 1) * pst),
                         u2 = _mm512_loadu_ps(u + (4 * a + 2) * pst), u3 = _mm512_loadu_ps(u + (4 * a + 3) * pst);
            const __m512 s = _mm512_mul_ps(half, _mm512_add_ps(u1, u2));
            r[a][0] = _mm512_add_ps(u0, s), r[a][1] = _mm512_mul_ps(half, _mm512_sub_ps(u1, u2)), r[a][2] = _mm512_add_ps(s, u3);
          }
          float *q = tmp + c * 9 * 16;
          #pragma GCC unroll 16
          for (int j = 0; j < 3; j++) {
            const __m512 s = _mm512_mul_ps(half, _mm512_add_ps(r[1][j], r[2][j]));
            _mm512_storeu_ps(q + j * 16, _mm512_add_ps(r[0][j], s));
            _mm512_storeu_ps(q + (3 + j) * 16, _mm512_mul_ps(half, _mm512_sub_ps(r[1][j], r[2][j])));
            _mm512_storeu_ps(q + (6 + j) * 16, _mm512_add_ps(s, r[3][j]));
          }
        }
        const int64_t no = g->Co - o0 < 16 ? g->Co - o0 : 16, ne = ncc * 9;
        for (int64_t e0 = 0; e0 < ne; e0 += 16) { /* [e][16 o] -> [o][e], 16 x 16 at a time */
          __m512 r[16];
          for (int k = 0; k < 16; k++) r[k] = e0 + k < ne ? _mm512_loadu_ps(tmp + (e0 + k) * 16) : _mm512_setzero_ps();
          tr16(r);
          const __mmask16 m = lanes(ne - e0);
          for (int64_t o = 0; o < no; o++) _mm256_mask_storeu_epi16(dw + ((o0 + o) * g->Ci + c0) * 9 + e0, m, narrow16(r[o]));
        }
      }
    }
  }
}
static void phase_dw(const geom *g, const float *dU, uint16_t *dw, float *loc, size_t locf) {
#pragma omp parallel num_threads(g->nthr) if (g->nthr > 1)
  phase_dw_team(g, dU, dw, loc, locf);
}

/* Backward-weights fused per chunk of tile rows, for layers whose dU fits in L2: each thread
 * transforms its chunks' x and dy into per-thread pair layouts (V2l, dMl) and accumulates
 * dU_t [p][Cp][Op] += V2l_p^T dMl_p; the threads' dU_t are then summed in thread order (so the
 * result is the same run to run for a given thread count). */
typedef struct {
  int64_t rpc, SRx, SRy, wx, wy, LVP, LMP; /* tile rows per chunk; staged rows / widths of x, dy */
  size_t sx, sy, v, m;                      /* floats of each per-thread buffer */
} bww_plan;

static void bww_plan_init(const geom *g, bww_plan *f) {
  f->rpc = g->TW >= 64 ? 1 : 64 / g->TW;
  if (f->rpc > 64) f->rpc = 64;
  const int64_t TB2 = (f->rpc * g->TW + 1) / 2;
  f->SRx = 4 * f->rpc + 2, f->SRy = 2 * f->rpc, f->wx = 2 * g->TW + 2, f->wy = 2 * g->TW;
  f->LVP = TB2 * g->Cp * 2 + 32, f->LMP = TB2 * g->Op * 2 + 32;
  f->sx = (size_t)(g->Cp / 16 * f->SRx * f->wx * 16), f->sy = (size_t)(g->Op / 16 * f->SRy * f->wy * 16);
  f->v = (size_t)(NP * f->LVP / 2), f->m = (size_t)(NP * f->LMP / 2);
}
static size_t bww_plan_floats(const bww_plan *f) { return f->sx + f->sy + f->v + f->m + 64; }

TGT static void phase_bww_fused_team(const geom *g, const bww_plan *f, const uint16_t *x, const uint16_t *dy, float *dUt,
                                     float *loc) {
  const int64_t NTH = g->N * g->TH, nch = (NTH + f->rpc - 1) / f->rpc, ncb = g->Cp / 16, nob = g->Op / 16;
  const int64_t xbs = f->SRx * f->wx * 16, ybs = f->SRy * f->wy * 16;
  const int64_t cpb = (g->Cp + (g->Cp + MR - 1) / MR - 1) / ((g->Cp + MR - 1) / MR); /* balanced row blocks */
  {
    const int tid = omp_get_thread_num();
    float *Sx = loc + (size_t)tid * bww_plan_floats(f), *Sy = Sx + f->sx, *dU = dUt + (size_t)tid * (size_t)(NP * g->ups);
    uint16_t *V2 = (uint16_t *)(Sy + f->sy), *dM = (uint16_t *)(Sy + f->sy + f->v);
    int64_t rbx[64], rby[64];
    memset(dU, 0, sizeof(float) * (size_t)(NP * g->ups));
#pragma omp for schedule(static)
    for (int64_t ch = 0; ch < nch; ch++) {
      const int64_t gr0 = ch * f->rpc, gr1 = gr0 + f->rpc < NTH ? gr0 + f->rpc : NTH, nt = (gr1 - gr0) * g->TW;
      stage_chunk(g, x, g->Ci, ncb, gr0, gr1, 1, Sx, f->SRx, f->wx, rbx);
      stage_chunk(g, dy, g->Co, nob, gr0, gr1, 0, Sy, f->SRy, f->wy, rby);
      for (int64_t tl = 0; tl < nt; tl += 2) {
        const int two = tl + 1 < nt;
        const int64_t l0 = tl / g->TW, w0 = tl % g->TW, l1 = (tl + 1) / g->TW, w1 = (tl + 1) % g->TW;
        for (int64_t cb = 0; cb < ncb; cb++) {
          __m512 va[NP], vb[NP];
          in_tf(Sx + cb * xbs + (rbx[l0] * f->wx + 2 * w0) * 16, f->wx, va);
          if (two) in_tf(Sx + cb * xbs + (rbx[l1] * f->wx + 2 * w1) * 16, f->wx, vb);
#pragma GCC unroll 16
          for (int p = 0; p < NP; p++) {
            if (!two) vb[p] = _mm512_setzero_ps();
            _mm512_storeu_si512(V2 + p * f->LVP + (tl / 2 * g->Cp + cb * 16) * 2, interleave_bf16(va[p], vb[p]));
          }
        }
        for (int64_t ob = 0; ob < nob; ob++) {
          __m512 va[NP], vb[NP];
          dm_tf(Sy + ob * ybs + (rby[l0] * f->wy + 2 * w0) * 16, f->wy, va);
          if (two) dm_tf(Sy + ob * ybs + (rby[l1] * f->wy + 2 * w1) * 16, f->wy, vb);
#pragma GCC unroll 16
          for (int p = 0; p < NP; p++) {
            if (!two) vb[p] = _mm512_setzero_ps();
            _mm512_storeu_si512(dM + p * f->LMP + (tl / 2 * g->Op + ob * 16) * 2, interleave_bf16(va[p], vb[p]));
          }
        }
      }
      const int64_t kn = (nt + 1) / 2;
      for (int p = 0; p < NP; p++)
        for (int64_t ob = 0; ob < g->Op; ob += 32)
          for (int64_t c0 = 0; c0 < g->Cp; c0 += cpb)
            gemm_rows(g->Cp - c0 < cpb ? (int)(g->Cp - c0) : (int)cpb, kn, (const uint32_t *)V2 + p * f->LVP / 2 + c0, 1, g->Cp,
                      (const uint32_t *)dM + p * f->LMP / 2 + ob, g->Op, dU + p * g->ups + c0 * g->Op + ob, g->Op, 1);
    }
  }
}
static void phase_bww_fused(const geom *g, const bww_plan *f, const uint16_t *x, const uint16_t *dy, float *dUt,
                            float *loc) {
#pragma omp parallel num_threads(g->nthr) if (g->nthr > 1)
  phase_bww_fused_team(g, f, x, dy, dUt, loc);
  /* dUt[0] += dUt[1] + ... in thread order */
  const int64_t n = NP * g->ups;
#pragma omp parallel for num_threads(g->nthr) if (g->nthr > 1) schedule(static)
  for (int64_t i0 = 0; i0 < n; i0 += 1024) {
    const int64_t i1 = i0 + 1024 < n ? i0 + 1024 : n;
    for (int t = 1; t < g->nthr; t++)
      for (int64_t i = i0; i < i1; i++) dUt[i] += dUt[(size_t)t * (size_t)n + (size_t)i];
  }
}

int ts__conv2d_bwd_weight_wino(const ts__conv_desc *d, const void *x, const void *dy, void *dw, void *db,
                               double st[3]) {
  const char *what = "conv2d_bwd_weight (bf16 Winograd)";
  int rc = check(d, x, dy, dw, what);
  if (rc) return rc;
  geom g;
  geom_init(&g, d->N, d->C, d->O, d->H, d->W);
  const size_t in = (size_t)(g.Cp / 16 * (2 * g.TH + 2) * (2 * g.TW + 2) * 16),
               dm = (size_t)(g.Op / 16 * (2 * g.TH) * (2 * g.TW) * 16), dwf = 16 * 9 * 16;
  size_t locf = (in > dm ? in : dm) + dwf + 64;
  /* fused when every thread's dU fits in a 1 MiB L2 (ResNet's first two stages: 0.26 and 1.05 MB;
   * the 256-channel stage's 4.2 MB per thread ran 4% slower fused, bench_bf16 resnet_conv) */
  const int fused = (size_t)(NP * g.ups) * sizeof(float) <= (size_t)1100000;
  bww_plan f;
  bww_plan_init(&g, &f);
  if (fused && bww_plan_floats(&f) > locf) locf = bww_plan_floats(&f);
  uint16_t *V2 = fused ? NULL : scratch(0, (size_t)(NP * g.vps) * 2), *dM = fused ? NULL : scratch(1, (size_t)(NP * g.mps) * 2);
  float *dU = scratch(2, (size_t)(NP * g.ups) * sizeof(float) * (size_t)(fused ? g.nthr : 1)),
        *loc = scratch(3, locf * sizeof(float) * (size_t)g.nthr);
  if ((!fused && (!V2 || !dM)) || !dU || !loc) return ts_error_set(TS_ENOMEM, "%s: out of memory for Winograd buffers", what);
  double t0 = ts_time_now(), t1 = t0;
  if (fused) {
    phase_bww_fused(&g, &f, x, dy, dU, loc);
  } else {
    if (g.T & 1) { /* the pad tile of the last pair is zero */
      for (int p = 0; p < NP; p++) {
        memset(V2 + p * g.vps + (g.T2 - 1) * g.Cp * 2, 0, (size_t)g.Cp * 4);
        memset(dM + p * g.mps + (g.T2 - 1) * g.Op * 2, 0, (size_t)g.Op * 4);
      }
    }
    phase_in_pairs(&g, x, V2, loc, locf);
    phase_dm(&g, dy, dM, loc, locf);
    t1 = ts_time_now();
    phase_du(&g, V2, dM, dU);
  }
  double t2 = ts_time_now();
  phase_dw(&g, dU, dw, loc, locf);
  if (db) { /* bias gradient: per out-channel sums over (n, h, w) in a fixed order */
    const uint16_t *y = dy;
    uint16_t *b = db;
    const int64_t HW = d->H * d->W;
#pragma omp parallel for num_threads(g.nthr) if (g.nthr > 1) schedule(static)
    for (int64_t o = 0; o < d->O; o++) {
      float s = 0;
      for (int64_t n = 0; n < d->N; n++) {
        const uint16_t *q = y + (n * d->O + o) * HW;
        float sn = 0;
        for (int64_t i = 0; i < HW; i++) sn += ts__bf2f(q[i]);
        s += sn;
      }
      b[o] = ts__f2bf(s);
    }
  }
  double t3 = ts_time_now();
  if (st) st[0] += t1 - t0, st[1] += t2 - t1, st[2] += t3 - t2;
  g_wstat[2][0] += t1 - t0, g_wstat[2][1] += t2 - t1, g_wstat[2][2] += t3 - t2;
  return TS_OK;
}
