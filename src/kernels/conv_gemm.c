/* bf16 convolution as GEMMs on plain NCHW/OIHW buffers (see conv.h), for the ungrouped layers
 * the Winograd kernel does not take: strided (ResNet's stride-2 3x3), 1x1 (its stride-2
 * downsamples), thin (the RGB stem). oneDNN's bf16 kernels want blocked layouts, so each call
 * there reorders the activations in and out (a third of those layers' time in a ResNet-18 O2
 * step); these kernels read and write NCHW directly and run on the AVX512-BF16 micro-kernel of
 * bf16_mk.h with f32 accumulation, outputs rounded once.
 *
 *   forward, images of >= 28 output pixels: direct (below): rows = 14 output pixels, columns =
 *     32 out-channels, reduction = taps x in-channel pairs of the image staged once;
 *   forward, smaller images: im2col, y[n][o][j] = sum_k W[o][k] col(k, j), A = W, B = a panel
 *     of col (32 columns from several images);
 *   backward-data: direct on dy, per position class of the stride;
 *   backward-weights: dW[o][k] = sum_j dy[n][o][j] col(k, j), A = dy's rows (pixel pairs, in
 *     place), B = col^T [pixel pairs][32 k][2].
 * The im2col matrix: row k = (c KH + kh) KW + kw (the OIHW weight order, K = C KH KW rows),
 * column j = a pixel (n, oh, ow) of the output; col(k, j) = x[n][c][oh sh - ph + kh dh]
 * [ow sw - pw + kw dw], zero in the padding. Columns go in panels of 32 (a panel never splits an
 * image's pixels across threads: P = OH OW >= 32 gives ceil(P / 32) panels per image; smaller
 * images are grouped whole, 32 / P of them per panel), gathered straight from the NCHW rows with
 * masked vector loads.
 * Threads: OpenMP static schedules, no atomics; forward and backward-data give every output
 * element to one thread, backward-weights gives every thread its own 32-column panels of dW, each
 * summed over the images in order: the bits are the same for any thread count. */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16_mk.h"
#include "conv.h"
#include "dnnl_ctx.h"
#include "lowp.h"
#include "tessera/base.h"
#include "tessera/tensor.h"

enum { KBLK = 256 }; /* pairs of the reduction per micro-kernel call (B block in L1) */

typedef struct {
  int64_t N, C, H, W, O, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw;
  int64_t K, K2, P; /* rows of im2col, its pairs, pixels per image */
  int64_t ppi, gi;  /* panels per image (P >= 32), else images per panel */
  int64_t npan;
  int nthr;
} cg;

static void cg_init(cg *g, const ts__conv_desc *d) {
  g->N = d->N, g->C = d->C, g->H = d->H, g->W = d->W, g->O = d->O, g->KH = d->KH, g->KW = d->KW;
  g->OH = d->OH, g->OW = d->OW, g->sh = d->sh, g->sw = d->sw, g->ph = d->ph, g->pw = d->pw, g->dh = d->dh, g->dw = d->dw;
  g->K = d->C * d->KH * d->KW, g->K2 = (g->K + 1) / 2, g->P = d->OH * d->OW;
  if (g->P >= 32) g->ppi = (g->P + 31) / 32, g->gi = 1, g->npan = g->N * g->ppi;
  else g->ppi = 0, g->gi = 32 / g->P, g->npan = (g->N + g->gi - 1) / g->gi;
  g->nthr = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (g->nthr < 1) g->nthr = 1;
}

/* Process-wide scratch, grown to the largest size seen (kernels run from one thread at a time). */
static void *g_scr[4];
static size_t g_scap[4];
static void *scratch(int i, size_t bytes) { return ts__scratch_grow(&g_scr[i], &g_scap[i], bytes); }


int ts__conv_gemm_shape(const ts__conv_desc *d) {
  /* P even: backward-weights reads dy's pixel pairs in place */
  return d->groups == 1 && d->N >= 1 && d->C >= 1 && d->O >= 1 && (d->OH * d->OW) % 2 == 0 &&
         d->C * d->KH * d->KW < ((int64_t)1 << 28) && d->O < ((int64_t)1 << 28);
}

/* ---------------------------------------------------------------- panels */

/* A run of a panel's columns inside one output row: image n, row oh, columns ow0.. (len of
 * them), at panel lanes jj0.. */
typedef struct {
  int64_t n, oh, ow0;
  int jj0, len;
} seg;

/* The runs of panel i (at most 32); *cols: its columns; *n0, *nimg: its images. */
static int panel_segs(const cg *g, int64_t i, seg *s, int *cols, int64_t *n0, int64_t *nimg) {
  int64_t q0, nc;
  if (g->ppi) *n0 = i / g->ppi, *nimg = 1, q0 = i % g->ppi * 32, nc = g->P - q0 < 32 ? g->P - q0 : 32;
  else *n0 = i * g->gi, *nimg = g->N - *n0 < g->gi ? g->N - *n0 : g->gi, q0 = 0, nc = *nimg * g->P;
  int ns = 0;
  for (int64_t jj = 0; jj < nc;) {
    const int64_t n = *n0 + (q0 + jj) / g->P, q = (q0 + jj) % g->P, oh = q / g->OW, ow = q % g->OW;
    const int64_t len = g->OW - ow < nc - jj ? g->OW - ow : nc - jj;
    s[ns++] = (seg){n, oh, ow, (int)jj, (int)len};
    jj += len;
  }
  *cols = (int)nc;
  return ns;
}

static inline __mmask32 rmask32(int64_t lo, int64_t hi) { /* bits [lo, hi) */
  const uint32_t a = hi >= 32 ? 0xffffffffu : (1u << hi) - 1, b = lo >= 32 ? 0xffffffffu : (1u << lo) - 1;
  return (__mmask32)(a & ~b);
}
static inline __mmask64 rmask64(int64_t lo, int64_t hi) {
  const uint64_t a = hi >= 64 ? ~0ull : (1ull << hi) - 1, b = lo >= 64 ? ~0ull : (1ull << lo) - 1;
  return (__mmask64)(a & ~b);
}
/* p + i elements as an address (i may be negative: only lanes inside the buffer are touched by
 * the masked accesses that use it) */
#define AT(p, i) ((void *)((uintptr_t)(p) + (uintptr_t)((i) * (int64_t)sizeof *(p))))

/* Where a panel's run gets row (c, kh, kw) of the im2col matrix from, for one (kh, kw): lanes
 * lm of the panel, from the elements at plane c + off (lane j0 + l: + l sw; sw 1 and 2 read
 * vectors, sw 2 the even words of the 64-word span sm, other strides element by element). No
 * lanes: the run's row is in the padding. Computed once per panel (the divisions stay out of
 * the per-channel loop). */
typedef struct {
  int64_t off;
  __mmask64 sm;
  __mmask32 lm;
  int lo, hi, j0;
} tap;

/* taps [kh][kw][run] of a panel's ns runs, for a source of Cs channels, H x W. */
static void plan_taps(const seg *s, int ns, int64_t Cs, int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t sh, int64_t sw,
                      int64_t ph, int64_t pw, int64_t dh, int64_t dw, tap *t) {
  for (int64_t kh = 0; kh < KH; kh++)
    for (int64_t kw = 0; kw < KW; kw++)
      for (int i = 0; i < ns; i++) {
        tap *q = t + (kh * KW + kw) * ns + i;
        memset(q, 0, sizeof *q);
        const int64_t ih = s[i].oh * sh - ph + kh * dh, iw0 = s[i].ow0 * sw - pw + kw * dw;
        if (ih < 0 || ih >= H) continue;
        int64_t lo = iw0 < 0 ? (-iw0 + sw - 1) / sw : 0, hi = iw0 >= W ? 0 : (W - 1 - iw0) / sw + 1;
        if (hi > s[i].len) hi = s[i].len;
        if (lo >= hi) continue;
        const int64_t j0 = s[i].jj0, row = (s[i].n * Cs * H + ih) * W;
        q->lm = rmask32(j0 + lo, j0 + hi), q->lo = (int)lo, q->hi = (int)hi, q->j0 = (int)j0;
        if (sw == 1) q->off = row + iw0 - j0;
        else if (sw == 2) q->off = row + iw0 - 2 * j0, q->sm = rmask64(2 * (j0 + lo), 2 * (j0 + hi) - 1);
        else q->off = row + iw0;
      }
}

/* Row (c, kh, kw) of the im2col matrix of src (plane = H W elements per channel) over a panel's
 * runs (t: their taps for this kh, kw): 32 bf16 lanes, zero outside the runs and in the padding. */
TGT AI __m512i krow(const uint16_t *src, int64_t plane, int64_t c, const tap *t, int ns, int64_t sw, __m512i ev) {
  __m512i v = _mm512_setzero_si512();
  const uint16_t *base = src + c * plane;
  for (int i = 0; i < ns; i++) {
    if (!t[i].lm) continue;
    if (sw == 1) {
      v = _mm512_mask_loadu_epi16(v, t[i].lm, AT(base, t[i].off));
    } else if (sw == 2) { /* lane jj <- the span's word 2 jj */
      const uint16_t *b = AT(base, t[i].off);
      const __m512i a0 = _mm512_maskz_loadu_epi16((__mmask32)t[i].sm, b), a1 = _mm512_maskz_loadu_epi16((__mmask32)(t[i].sm >> 32), AT(b, 32));
      v = _mm512_mask_mov_epi16(v, t[i].lm, _mm512_permutex2var_epi16(a0, ev, a1));
    } else {
      uint16_t tmp[32] = {0};
      const uint16_t *r = base + t[i].off;
      for (int l = t[i].lo; l < t[i].hi; l++) tmp[t[i].j0 + l] = r[l * sw];
      v = _mm512_mask_mov_epi16(v, t[i].lm, _mm512_loadu_si512(tmp));
    }
  }
  return v;
}

static const short g_ev[32] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
                               32, 34, 36, 38, 40, 42, 44, 46, 48, 50, 52, 54, 56, 58, 60, 62};

/* Packs rows 0..K-1 (K/2 pairs) of the im2col matrix of x over a panel into B [K/2][32][2]. */
TGT static void pack_panel(const cg *g, const uint16_t *x, int64_t K, const seg *s, int ns, tap *t, uint16_t *B) {
  static const short lo_i[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                 8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  static const short hi_i[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                 24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i il = _mm512_loadu_si512(lo_i), ih = _mm512_loadu_si512(hi_i), ev = _mm512_loadu_si512(g_ev);
  plan_taps(s, ns, g->C, g->H, g->W, g->KH, g->KW, g->sh, g->sw, g->ph, g->pw, g->dh, g->dw, t);
  __m512i a = _mm512_setzero_si512();
  int64_t c = 0, kh = 0, kw = 0; /* row k = (c KH + kh) KW + kw, counted up */
  for (int64_t k = 0; k < K; k++) {
    const __m512i v = krow(x, g->H * g->W, c, t + (kh * g->KW + kw) * ns, ns, g->sw, ev);
    if (++kw == g->KW) kw = 0, kh = kh + 1 == g->KH ? (c++, 0) : kh + 1;
    if (!(k & 1)) {
      a = v;
      if (k + 1 < K) continue;
    }
    const __m512i b = k & 1 ? v : _mm512_setzero_si512();
    _mm512_storeu_si512(B + (k & ~(int64_t)1) * 32, _mm512_permutex2var_epi16(a, il, b));
    _mm512_storeu_si512(B + (k & ~(int64_t)1) * 32 + 32, _mm512_permutex2var_epi16(a, ih, b));
  }
}

/* Balanced row blocks of at most MR rows for R rows. */
static int64_t rows_per_block(int64_t R) { return (R + (R + MR - 1) / MR - 1) / ((R + MR - 1) / MR); }

/* C (R x 32) = A (R rows, K2 pairs, row stride ars words) B (K2 x 32), K blocked by KBLK. */
TGT static void gemm_k(int R, int64_t K2, const uint32_t *A, int64_t ars, const uint16_t *B, float *C) {
  for (int64_t k0 = 0; k0 < K2; k0 += KBLK) {
    const int64_t kn = K2 - k0 < KBLK ? K2 - k0 : KBLK;
    gemm_rows(R, kn, A + k0, ars, 1, (const uint32_t *)B + k0 * 32, 32, C, 32, k0 > 0);
  }
}

/* ---------------------------------------------------------------- direct (forward, backward-data) */
/* Forward and backward-data run as direct convolutions: the source image staged once as channel
 * pairs, pixel-major, with a zero border (xs [Hs][Ws][C2p] 32-bit words), the weights packed per
 * 32 output channels and tap as B [tap][pairs][32][2]; the micro-kernel's rows are any 14 output
 * pixels (a pointer each into xs), its reduction the taps times the channel pairs, so nothing is
 * expanded 9-fold as in im2col. Results go to a pixel-major f32 buffer and out to NCHW planes by
 * 16x16 transposes. Backward-data with stride s splits the input pixels into s x s classes by
 * position mod s; each class is a stride-1 direct convolution of the staged dy with the taps that
 * reach it. */

/* Stages src (Cs, H, W) bf16 as channel pairs: dst [Hs][Ws][C2p] words (pair p: channels 2p,
 * 2p + 1), the image at row bh, column bw; border, extra rows/columns and channels past Cs zero. */
TGT static void stage_pairs(const uint16_t *src, int64_t Cs, int64_t H, int64_t W, int64_t Hs, int64_t Ws, int64_t bh,
                            int64_t bw, int64_t C2p, uint32_t *dst) {
  memset(dst, 0, (size_t)(Hs * Ws * C2p) * 4);
  for (int64_t h = 0; h < H; h++)
    for (int64_t cb = 0; cb * 32 < Cs; cb++)
      for (int64_t w0 = 0; w0 < W; w0 += 16) {
        const int nw = W - w0 < 16 ? (int)(W - w0) : 16;
        const __mmask16 m = lanes(nw);
        __m512 r[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
          const int64_t c = cb * 32 + 2 * i;
          const __m512i e = c < Cs ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + (c * H + h) * W + w0)) : _mm512_setzero_si512();
          const __m512i o = c + 1 < Cs ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + ((c + 1) * H + h) * W + w0))
                                       : _mm512_setzero_si512();
          r[i] = _mm512_castsi512_ps(_mm512_or_si512(e, _mm512_slli_epi32(o, 16)));
        }
        tr16(r);
        for (int w = 0; w < nw; w++) _mm512_storeu_ps((float *)(dst + ((h + bh) * Ws + w0 + w + bw) * C2p + cb * 16), r[w]);
      }
}

/* C (R x 32, f32, rows of 32) = sum over taps t < nt and pairs k < K of A[ap[r] + toff[t] + k]
 * B_t[k] (B_t: bt[t], K rows of 32 pair words). */
TGT AI void mkd(const int R, int nt, const int64_t *toff, const uint32_t *const *bt, int64_t K, const uint32_t *const *ap,
                float *C) {
  __m512 c0[MR], c1[MR];
#pragma GCC unroll 14
  for (int r = 0; r < R; r++) c0[r] = _mm512_setzero_ps(), c1[r] = _mm512_setzero_ps();
  for (int t = 0; t < nt; t++) {
    const uint32_t *a[MR], *b = bt[t];
#pragma GCC unroll 14
    for (int r = 0; r < R; r++) a[r] = ap[r] + toff[t];
    for (int64_t k = 0; k < K; k++) {
      const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + k * 32), b1 = (__m512bh)_mm512_loadu_si512(b + k * 32 + 16);
#pragma GCC unroll 14
      for (int r = 0; r < R; r++) {
        const __m512bh ar = (__m512bh)_mm512_set1_epi32((int)a[r][k]);
        c0[r] = _mm512_dpbf16_ps(c0[r], ar, b0);
        c1[r] = _mm512_dpbf16_ps(c1[r], ar, b1);
      }
    }
  }
#pragma GCC unroll 14
  for (int r = 0; r < R; r++) _mm512_storeu_ps(C + r * 32, c0[r]), _mm512_storeu_ps(C + r * 32 + 16, c1[r]);
}

TGT static void gemm_direct(int R, int nt, const int64_t *toff, const uint32_t *const *bt, int64_t K, const uint32_t *const *ap,
                            float *C) {
  switch (R) {
#define MKD(n) \
  case n: mkd(n, nt, toff, bt, K, ap, C); break;
    MKD(1) MKD(2) MKD(3) MKD(4) MKD(5) MKD(6) MKD(7) MKD(8) MKD(9) MKD(10) MKD(11) MKD(12) MKD(13) MKD(14)
#undef MKD
    default: break;
  }
}

/* Writes channels c0 .. c0 + 31 (< Cn) of a pixel-major buffer ys [P][32] f32 (+ bias) to the
 * NCHW planes of one image (dst: its channel 0), rounded to bf16. */
TGT static void store_planes(const float *ys, int64_t P, int64_t Cn, int64_t c0, const uint16_t *bias, uint16_t *dst) {
  for (int hf = 0; hf < 2; hf++) {
    const int64_t cb = c0 + hf * 16;
    if (cb >= Cn) break;
    const int nc = Cn - cb < 16 ? (int)(Cn - cb) : 16;
    const __m512 bv = bias ? widen16(lanes(nc), bias + cb) : _mm512_setzero_ps();
    for (int64_t q0 = 0; q0 < P; q0 += 16) {
      const int nq = P - q0 < 16 ? (int)(P - q0) : 16;
      __m512 r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; i++) r[i] = i < nq ? _mm512_add_ps(_mm512_loadu_ps(ys + (q0 + i) * 32 + hf * 16), bv) : _mm512_setzero_ps();
      tr16(r);
      const __mmask16 m = lanes(nq);
      for (int c = 0; c < nc; c++) _mm256_mask_storeu_epi16(dst + (cb + c) * P + q0, m, narrow16(r[c]));
    }
  }
}

/* Packs w (O, C, KH, KW) bf16 as B [O/32 panels][tap][C/2 pairs][32][2] (trans 0: output
 * channels as columns, input-channel pairs; trans 1 (backward-data): input channels as columns,
 * output-channel pairs); zero past the edges. */
static void pack_weights(const uint16_t *w, int64_t O, int64_t C, int64_t KH, int64_t KW, int trans, uint32_t *B, int nthr) {
  const int64_t T = KH * KW, cols = trans ? C : O, rows = trans ? O : C, K = (rows + 1) / 2, np = (cols + 31) / 32;
#pragma omp parallel for num_threads(nthr) if (nthr > 1) schedule(static)
  for (int64_t pt = 0; pt < np * T; pt++) {
    const int64_t pn = pt / T, t = pt % T;
    uint32_t *b = B + pt * K * 32;
    for (int64_t k = 0; k < K; k++)
      for (int64_t j = 0; j < 32; j++) {
        const int64_t col = pn * 32 + j, r0 = 2 * k, r1 = 2 * k + 1;
        uint32_t lo = 0, hi = 0;
        if (col < cols) {
          const int64_t o0 = trans ? r0 : col, c0 = trans ? col : r0, o1 = trans ? r1 : col, c1 = trans ? col : r1;
          lo = w[(o0 * C + c0) * T + t];
          if (r1 < rows) hi = w[(o1 * C + c1) * T + t];
        }
        b[k * 32 + j] = lo | hi << 16;
      }
  }
}

/* y = conv(x, w) + b, direct (see above); one task per image. */
static int fwd_direct(const cg *g, const uint16_t *x, const uint16_t *w, const uint16_t *bias, uint16_t *y, const char *what) {
  const int64_t T = g->KH * g->KW, K = (g->C + 1) / 2, C2p = (g->C + 31) / 32 * 16, np = (g->O + 31) / 32;
  const int64_t Hs = g->H + 2 * g->ph, Ws = g->W + 2 * g->pw, P = g->P;
  const size_t xsw = (size_t)(Hs * Ws * C2p), ysf = (size_t)(P * 32), bw = (size_t)(np * T * K * 32);
  uint32_t *B = scratch(0, bw * 4), *XS = scratch(1, xsw * 4 * (size_t)g->nthr);
  float *YS = scratch(2, ysf * sizeof(float) * (size_t)g->nthr);
  int64_t *TO = scratch(3, (size_t)(T + P) * sizeof(int64_t) * (size_t)g->nthr);
  if (!B || !XS || !YS || !TO) return ts_error_set(TS_ENOMEM, "%s: out of memory", what);
  if (T > 1024) return ts_error_set(TS_EINVAL, "%s: kernel of %lld taps (at most 1024)", what, (long long)T);
  pack_weights(w, g->O, g->C, g->KH, g->KW, 0, B, g->nthr);
  const int64_t rpb = rows_per_block(P);
#pragma omp parallel num_threads(g->nthr) if (g->nthr > 1)
  {
    const int tid = omp_get_thread_num();
    uint32_t *xs = XS + xsw * (size_t)tid;
    float *ys = YS + ysf * (size_t)tid;
    int64_t *toff = TO + (size_t)(T + P) * (size_t)tid, *aoff = toff + T;
    for (int64_t t = 0; t < T; t++) toff[t] = ((t / g->KW) * g->dh * Ws + (t % g->KW) * g->dw) * C2p;
    for (int64_t q = 0; q < P; q++) aoff[q] = ((q / g->OW) * g->sh * Ws + (q % g->OW) * g->sw) * C2p;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g->N; n++) {
      stage_pairs(x + n * g->C * g->H * g->W, g->C, g->H, g->W, Hs, Ws, g->ph, g->pw, C2p, xs);
      for (int64_t pn = 0; pn < np; pn++) {
        const uint32_t *btp[1024];
        for (int64_t t = 0; t < T; t++) btp[t] = B + (pn * T + t) * K * 32;
        for (int64_t q0 = 0; q0 < P; q0 += rpb) {
          const int R = (int)(P - q0 < rpb ? P - q0 : rpb);
          const uint32_t *ap[MR];
          for (int r = 0; r < R; r++) ap[r] = xs + aoff[q0 + r];
          gemm_direct(R, (int)T, toff, btp, K, ap, ys + q0 * 32);
        }
        store_planes(ys, P, g->O, pn * 32, bias, y + n * g->O * P);
      }
    }
  }
  return TS_OK;
}

/* dx = conv^T(dy, w), direct per position class (see above); one task per image. */
static int bwd_data_direct(const cg *g, const uint16_t *dy, const uint16_t *w, uint16_t *dx, const char *what) {
  const int64_t T = g->KH * g->KW, K = (g->O + 1) / 2, O2p = (g->O + 31) / 32 * 16, np = (g->C + 31) / 32;
  const int64_t eh = ((g->KH - 1) * g->dh + g->sh - 1) / g->sh, ew = ((g->KW - 1) * g->dw + g->sw - 1) / g->sw;
  const int64_t hn = (g->H - 1 + g->ph) / g->sh + 1, wn = (g->W - 1 + g->pw) / g->sw + 1;
  const int64_t Hs = 2 * eh + (g->OH > hn ? g->OH : hn), Ws = 2 * ew + (g->OW > wn ? g->OW : wn), PI = g->H * g->W;
  const size_t xsw = (size_t)(Hs * Ws * O2p), ysf = (size_t)(PI * 32), bw = (size_t)(np * T * K * 32);
  uint32_t *B = scratch(0, bw * 4), *XS = scratch(1, xsw * 4 * (size_t)g->nthr);
  float *YS = scratch(2, ysf * sizeof(float) * (size_t)g->nthr);
  if (!B || !XS || !YS) return ts_error_set(TS_ENOMEM, "%s: out of memory", what);
  if (T > 1024) return ts_error_set(TS_EINVAL, "%s: kernel of %lld taps (at most 1024)", what, (long long)T);
  pack_weights(w, g->O, g->C, g->KH, g->KW, 1, B, g->nthr);
#pragma omp parallel num_threads(g->nthr) if (g->nthr > 1)
  {
    const int tid = omp_get_thread_num();
    uint32_t *xs = XS + xsw * (size_t)tid;
    float *ys = YS + ysf * (size_t)tid;
    int64_t toff[1024];
    const uint32_t *btp[1024];
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g->N; n++) {
      stage_pairs(dy + n * g->O * g->P, g->O, g->OH, g->OW, Hs, Ws, eh, ew, O2p, xs);
      for (int64_t pn = 0; pn < np; pn++) {
        for (int64_t a = 0; a < g->sh && a < g->H; a++)
          for (int64_t b = 0; b < g->sw && b < g->W; b++) {
            /* class (a, b): input pixels (a + sh i, b + sw j); tap (kh, kw) reaches them when
             * a + ph - kh dh and b + pw - kw dw are multiples of the strides, from dy row
             * i + (a + ph - kh dh) / sh (column likewise) */
            int nt = 0;
            for (int64_t kh = 0; kh < g->KH; kh++) {
              const int64_t rh = g->ph + a - kh * g->dh;
              if (((rh % g->sh) + g->sh) % g->sh) continue;
              for (int64_t kw = 0; kw < g->KW; kw++) {
                const int64_t rw = g->pw + b - kw * g->dw;
                if (((rw % g->sw) + g->sw) % g->sw) continue;
                toff[nt] = ((rh / g->sh + eh) * Ws + rw / g->sw + ew) * O2p;
                btp[nt++] = B + (pn * T + kh * g->KW + kw) * K * 32;
              }
            }
            const int64_t ni = (g->H - 1 - a) / g->sh + 1, nj = (g->W - 1 - b) / g->sw + 1, nc = ni * nj, rpb = rows_per_block(nc);
            for (int64_t r0 = 0; r0 < nc; r0 += rpb) {
              const int R = (int)(nc - r0 < rpb ? nc - r0 : rpb);
              const uint32_t *ap[MR];
              float C[MR * 32];
              for (int r = 0; r < R; r++) ap[r] = xs + ((r0 + r) / nj * Ws + (r0 + r) % nj) * O2p;
              if (nt) gemm_direct(R, nt, toff, btp, K, ap, C);
              else memset(C, 0, sizeof C);
              for (int r = 0; r < R; r++) {
                const int64_t ih = a + (r0 + r) / nj * g->sh, iw = b + (r0 + r) % nj * g->sw;
                memcpy(ys + (ih * g->W + iw) * 32, C + r * 32, 32 * sizeof(float));
              }
            }
          }
        store_planes(ys, PI, g->C, pn * 32, NULL, dx + n * g->C * PI);
      }
    }
  }
  return TS_OK;
}

/* The entry points' checks (shape, CPU, buffers) and geometry. */
static int entry(const ts__conv_desc *d, const void *a, const void *b, const void *c, const char *what, cg *g) {
  int rc = ts__conv_check(d, what);
  if (rc) return rc;
  if (!ts__conv_gemm_shape(d) || !ts__conv_wino_cpu())
    return ts_error_set(TS_EINVAL, "%s: shape or CPU not supported (ungrouped, an even number of output pixels, "
                        "AVX512-BF16; N%lld C%lld %lldx%lld O%lld K%lldx%lld groups %lld)", what, (long long)d->N,
                        (long long)d->C, (long long)d->H, (long long)d->W, (long long)d->O, (long long)d->KH,
                        (long long)d->KW, (long long)d->groups);
  if (!a || !b || !c) return ts_error_set(TS_EINVAL, "%s: NULL buffer", what);
  cg_init(g, d);
  return TS_OK;
}

/* ---------------------------------------------------------------- forward */

/* The GEMM's rows [0, R) (output channels o0 ..) of the panel's f32 block C (32 columns a row),
 * plus each channel's bias, rounded to bf16 and stored at the panel's segments s of y. (Its own
 * function: the intrinsics need the target attribute, which an OpenMP region's body does not
 * inherit from its function.) */
TGT static void store_rows(const cg *g, int R, int64_t o0, const float *C, const uint16_t *bias, const seg *s, int ns,
                           uint16_t *y) {
  for (int r = 0; r < R; r++) {
    const int64_t o = o0 + r;
    const __m512 bo = bias ? _mm512_set1_ps(ts__bf2f(bias[o])) : _mm512_setzero_ps();
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(narrow16(_mm512_add_ps(_mm512_loadu_ps(C + r * 32), bo))),
                                         narrow16(_mm512_add_ps(_mm512_loadu_ps(C + r * 32 + 16), bo)), 1);
    for (int i = 0; i < ns; i++) {
      uint16_t *dst = y + ((s[i].n * g->O + o) * g->OH + s[i].oh) * g->OW + s[i].ow0;
      _mm512_mask_storeu_epi16(AT(dst, -(int64_t)s[i].jj0), rmask32(s[i].jj0, s[i].jj0 + s[i].len), v);
    }
  }
}

int ts__conv2d_fwd_gemm(const ts__conv_desc *d, const void *xv, const void *wv, const void *bv, void *yv) {
  const char *what = "conv2d (bf16 GEMM)";
  cg g;
  int rc = entry(d, xv, wv, yv, what, &g);
  if (rc) return rc;
  const uint16_t *x = xv, *w = wv, *bias = bv;
  uint16_t *y = yv;
  if (g.P >= 28) { /* direct; small images fill the micro-kernel's rows better as im2col panels of several images */
    rc = fwd_direct(&g, x, w, bias, y, what);
    return rc;
  }
  /* A: the weights as rows of K2 pairs (a zero column appended when K is odd) */
  const uint16_t *Wp = w;
  if (g.K & 1) {
    uint16_t *t = scratch(0, (size_t)(g.O * g.K2 * 2) * 2);
    if (!t) return ts_error_set(TS_ENOMEM, "%s: out of memory", what);
    for (int64_t o = 0; o < g.O; o++) {
      memcpy(t + o * g.K2 * 2, w + o * g.K, (size_t)g.K * 2);
      t[o * g.K2 * 2 + g.K] = 0;
    }
    Wp = t;
  }
  const size_t bw = (size_t)(g.K2 * 64);
  uint16_t *Bs = scratch(1, bw * 2 * (size_t)g.nthr);
  float *Cs = scratch(2, (size_t)(MR * 32) * sizeof(float) * (size_t)g.nthr);
  tap *Ts = scratch(3, sizeof(tap) * (size_t)(32 * g.KH * g.KW) * (size_t)g.nthr);
  if (!Bs || !Cs || !Ts) return ts_error_set(TS_ENOMEM, "%s: out of memory", what);
  const int64_t rpb = rows_per_block(g.O);
#pragma omp parallel num_threads(g.nthr) if (g.nthr > 1)
  {
    const int tid = omp_get_thread_num();
    uint16_t *B = Bs + bw * (size_t)tid;
    float *C = Cs + (size_t)(MR * 32) * (size_t)tid;
    tap *t = Ts + (size_t)(32 * g.KH * g.KW) * (size_t)tid;
    seg s[32];
#pragma omp for schedule(static)
    for (int64_t pi = 0; pi < g.npan; pi++) {
      int cols;
      int64_t n0, ni;
      const int ns = panel_segs(&g, pi, s, &cols, &n0, &ni);
      pack_panel(&g, x, g.K, s, ns, t, B);
      for (int64_t o0 = 0; o0 < g.O; o0 += rpb) {
        const int R = (int)(g.O - o0 < rpb ? g.O - o0 : rpb);
        gemm_k(R, g.K2, (const uint32_t *)Wp + o0 * g.K2, g.K2, B, C);
        store_rows(&g, R, o0, C, bias, s, ns, y);
      }
    }
  }
  return TS_OK;
}

/* ---------------------------------------------------------------- backward data */

int ts__conv2d_bwd_data_gemm(const ts__conv_desc *d, const void *dyv, const void *wv, void *dxv) {
  const char *what = "conv2d_bwd_data (bf16 GEMM)";
  cg g;
  int rc = entry(d, dyv, wv, dxv, what, &g);
  if (rc) return rc;
  return bwd_data_direct(&g, dyv, wv, dxv, what);
}

/* ---------------------------------------------------------------- backward weights */

/* One thread's part of the weight gradient (ts__conv2d_bwd_weight_gemm): dW's panels
 * [tid kpt, (tid + 1) kpt) summed over the blocks of images in order. (Its own function: the
 * intrinsics need the target attribute, which an OpenMP region's body does not inherit with
 * every compiler.) */
typedef struct {
  const cg *g;
  const uint16_t *x, *dy;
  uint16_t *dw, *Bs;
  float *Cs;
  tap *Ts;
  int64_t *Ps;
  size_t bw, aw, cw, tw;
  int64_t ipb, nblk, T, nkp, ppb, kpt, rpb;
} bww_job;

TGT static void bww_thread(const bww_job *j, int tid) {
  const cg *g = j->g;
  const uint16_t *x = j->x, *dy = j->dy;
  uint16_t *dw = j->dw;
  const size_t bw = j->bw, aw = j->aw, cw = j->cw, tw = j->tw;
  const int64_t ipb = j->ipb, nblk = j->nblk, T = j->T, nkp = j->nkp, ppb = j->ppb, kpt = j->kpt, rpb = j->rpb;
  uint16_t *Bs = j->Bs;
  float *Cs = j->Cs;
  tap *Ts = j->Ts;
  int64_t *Ps = j->Ps;
  uint16_t *B = Bs + (bw + aw) * (size_t)tid, *Ap = B + bw;
  float *C = Cs + cw * (size_t)tid;
  tap *tt = Ts + tw * (size_t)tid;
  int64_t *pns = Ps + (size_t)(2 * ppb) * (size_t)tid, *prow = pns + ppb; /* per panel: runs, first B row */
  const __m512i ev = _mm512_loadu_si512(g_ev);
  const int64_t kp0 = tid * kpt, kp1 = kp0 + kpt < nkp ? kp0 + kpt : nkp;
  seg s[32];
  if (kp1 > kp0) memset(C, 0, sizeof(float) * (size_t)((kp1 - kp0) * g->O * 32));
  for (int64_t blk = 0; blk < nblk && kp1 > kp0; blk++) {
    const int64_t n0 = blk * ipb, n1 = n0 + ipb < g->N ? n0 + ipb : g->N, bp = (n1 - n0) * g->P / 2;
    const int64_t pa = g->ppi ? n0 * g->ppi : n0 / g->gi, pb = g->ppi ? n1 * g->ppi : (n1 + g->gi - 1) / g->gi;
    for (int64_t pi = pa; pi < pb; pi++) {
      int cols;
      int64_t pn0, ni;
      const int ns = panel_segs(g, pi, s, &cols, &pn0, &ni);
      pns[pi - pa] = ns;
      prow[pi - pa] = ((pn0 - n0) * g->P + (g->ppi ? pi % g->ppi * 32 : 0)) / 2;
      plan_taps(s, ns, g->C, g->H, g->W, g->KH, g->KW, g->sh, g->sw, g->ph, g->pw, g->dh, g->dw, tt + (pi - pa) * 32 * T);
    }
    const uint32_t *A = (const uint32_t *)(dy + n0 * g->O * g->P);
    int64_t ars = g->P / 2;
    if (n1 - n0 > 1) { /* the block's rows o side by side */
      for (int64_t o = 0; o < g->O; o++)
        for (int64_t n = n0; n < n1; n++) memcpy(Ap + (o * (n1 - n0) + n - n0) * g->P, dy + (n * g->O + o) * g->P, (size_t)g->P * 2);
      A = (const uint32_t *)Ap, ars = bp;
    }
    for (int64_t kp = kp0; kp < kp1; kp++) {
      const int64_t k0 = kp * 32, nk = g->K - k0 < 32 ? g->K - k0 : 32;
      for (int64_t pi = pa; pi < pb; pi++) { /* B rows prow .. prow + 16 (a partial panel's extra rows are overwritten next) */
        const int ns = (int)pns[pi - pa];
        const tap *t = tt + (pi - pa) * 32 * T;
        __m512 r[2][16];
        int64_t c = k0 / T, kh = k0 / g->KW % g->KH, kw = k0 % g->KW;
        for (int64_t kk = 0; kk < 32; kk++) {
          const __m512i v = kk < nk ? krow(x, g->H * g->W, c, t + (kh * g->KW + kw) * ns, ns, g->sw, ev) : _mm512_setzero_si512();
          if (++kw == g->KW) kw = 0, kh = kh + 1 == g->KH ? (c++, 0) : kh + 1;
          r[kk / 16][kk % 16] = _mm512_castsi512_ps(v);
        }
        tr16(r[0]), tr16(r[1]); /* r[h][jp]: pixel pair jp of k's 16 h .. 16 h + 15 */
        uint16_t *Bp = B + prow[pi - pa] * 64;
        for (int jp = 0; jp < 16; jp++) {
          _mm512_storeu_ps((float *)(Bp + jp * 64), r[0][jp]);
          _mm512_storeu_ps((float *)(Bp + jp * 64 + 32), r[1][jp]);
        }
      }
      float *Ck = C + (kp - kp0) * g->O * 32;
      for (int64_t o0 = 0; o0 < g->O; o0 += rpb) { /* dW[o][k0 ..] += dy rows x B */
        const int R = (int)(g->O - o0 < rpb ? g->O - o0 : rpb);
        for (int64_t q0 = 0; q0 < bp; q0 += KBLK) {
          const int64_t qn = bp - q0 < KBLK ? bp - q0 : KBLK;
          gemm_rows(R, qn, A + o0 * ars + q0, ars, 1, (const uint32_t *)B + q0 * 32, 32, Ck + o0 * 32, 32, 1);
        }
      }
    }
  }
  for (int64_t kp = kp0; kp < kp1; kp++) {
    const int64_t k0 = kp * 32, nk = g->K - k0 < 32 ? g->K - k0 : 32;
    const float *Ck = C + (kp - kp0) * g->O * 32;
    for (int64_t o = 0; o < g->O; o++) {
      const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(narrow16(_mm512_loadu_ps(Ck + o * 32))),
                                           narrow16(_mm512_loadu_ps(Ck + o * 32 + 16)), 1);
      _mm512_mask_storeu_epi16(dw + o * g->K + k0, rmask32(0, nk), v);
    }
  }
}

int ts__conv2d_bwd_weight_gemm(const ts__conv_desc *d, const void *xv, const void *dyv, void *dwv, void *dbv) {
  const char *what = "conv2d_bwd_weight (bf16 GEMM)";
  cg g;
  int rc = entry(d, xv, dyv, dwv, what, &g);
  if (rc) return rc;
  const uint16_t *x = xv, *dy = dyv;
  uint16_t *dw = dwv;
  /* Blocks of whole images with >= 256 output pixels between them (their panels pa .. pb): per
   * block, A is dy (in place for one image, else the images' rows copied side by side) and B
   * col^T [pixel pairs][32 k][2] for one 32-row panel of dW, built 16 pixel pairs x 16 k at a
   * time by transposing krow's 32-bit pixel pairs. Every thread owns a contiguous range of dW's
   * panels and sums them over the blocks in order (dy's block stays in L2 across them). */
  int64_t ipb = (256 + g.P - 1) / g.P;
  if (!g.ppi) ipb = (ipb + g.gi - 1) / g.gi * g.gi;
  if (ipb > g.N) ipb = g.N;
  const int64_t nblk = (g.N + ipb - 1) / ipb, T = g.KH * g.KW, nkp = (g.K + 31) / 32;
  const int64_t ppb = g.ppi ? ipb * g.ppi : (ipb + g.gi - 1) / g.gi, bpmax = ipb * g.P / 2;
  const int64_t kpt = (nkp + g.nthr - 1) / g.nthr; /* dW panels per thread */
  const size_t bw = (size_t)((bpmax + 16) * 64), aw = ipb > 1 ? (size_t)(g.O * ipb * g.P) : 0, cw = (size_t)(kpt * g.O * 32),
               tw = (size_t)(ppb * 32 * T);
  uint16_t *Bs = scratch(0, (bw + aw) * 2 * (size_t)g.nthr);
  float *Cs = scratch(2, cw * sizeof(float) * (size_t)g.nthr);
  tap *Ts = scratch(3, sizeof(tap) * tw * (size_t)g.nthr);
  int64_t *Ps = scratch(1, sizeof(int64_t) * (size_t)(2 * ppb) * (size_t)g.nthr);
  if (!Bs || !Cs || !Ts || !Ps) return ts_error_set(TS_ENOMEM, "%s: out of memory", what);
  const bww_job job = {&g, x, dy, dw, Bs, Cs, Ts, Ps, bw, aw, cw, tw, ipb, nblk, T, nkp, ppb, kpt, rows_per_block(g.O)};
#pragma omp parallel num_threads(g.nthr) if (g.nthr > 1)
  bww_thread(&job, omp_get_thread_num());
  if (dbv) { /* bias gradient: per out-channel sums over (n, h, w) in a fixed order */
    uint16_t *db = dbv;
#pragma omp parallel for num_threads(g.nthr) if (g.nthr > 1) schedule(static)
    for (int64_t o = 0; o < g.O; o++) {
      float sum = 0;
      for (int64_t n = 0; n < g.N; n++) {
        const uint16_t *q = dy + (n * g.O + o) * g.P;
        float sn = 0;
        for (int64_t i = 0; i < g.P; i++) sn += ts__bf2f(q[i]);
        sum += sn;
      }
      db[o] = ts__f2bf(sum);
    }
  }
  return TS_OK;
}
