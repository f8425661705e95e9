/* bf16 Winograd F(2x2,3x3) convolution (conv_wino.c): every direction against the f32
 * reference kernel (conv.c) on the same bf16-valued inputs, the backward directions against
 * forward by adjointness, bitwise determinism (reruns; fwd/bwd-data also 1 vs 2 threads), the dispatch
 * (conv_dnnl.c: the default bf16 path of a ResNet 3x3 layer is this kernel).
 *
 * Tolerance, derived from bf16 rounding (unit roundoff u = 2^-8, round to nearest even): the
 * kernel rounds each transformed input V and each transformed weight U (forward, backward-data)
 * or V and each transformed gradient dM (backward-weights) once to bf16, sums their products in
 * f32 (K terms: gamma_K ~ K 2^-24) and rounds the output once. So, elementwise,
 *   |out - ref| <= (2u + u^2 + K 2^-24) S + u |ref|,
 * where S is the same Winograd computation run on absolute values with the transforms' absolute
 * matrices (|A^T| (sum_c |G||g||G^T| .* |B^T||d||B|) |A|, abs_wino below), which bounds the sum
 * of the magnitudes of every product the kernel adds. The test demands that bound times 1.05
 * (slack for the f32 rounding inside the transforms, a few 2^-24). That bound is worst-case
 * (random data sits at 1-30% of it), so normwise the relative L2 error must also stay under 2u
 * (measured 0.8-1.3u; oneDNN's direct bf16 primitive, printed beside it, ~0.4u).
 * Adjointness: <dY, conv(x)> = <x, conv_bwd_data(dY)> = <w, conv_bwd_weight(x, dY)> within 5
 * standard deviations of the error terms: <a, e> for an error e of relative L2 size <= 2u,
 * uncorrelated with a, has a standard deviation of about 2u ||a|| ||out|| / sqrt(n). Tight
 * enough that a transposed instead of rotated kernel fails it (checked). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv.h"
#include "kernels/dnnl_ctx.h"
#include "kernels/lowp.h"
#include "test_util.h"

static const double U_BF16 = 1.0 / 256;
static uint64_t seed = 5;

/* |B^T| |d| |B| of a 4x4 tile (B^T rows: 1 0 -1 0 / 0 1 1 0 / 0 -1 1 0 / 0 1 0 -1). */
static void abs_in(const double d[4][4], double v[16]) {
  static const int BT[4][4] = {{1, 0, 1, 0}, {0, 1, 1, 0}, {0, 1, 1, 0}, {0, 1, 0, 1}};
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 4; b++) {
      double s = 0;
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) s += BT[a][i] * d[i][j] * BT[b][j];
      v[4 * a + b] = s;
    }
}

/* |G| |g| |G^T| (G rows: 1 0 0 / .5 .5 .5 / .5 -.5 .5 / 0 0 1). */
static void abs_w(const double g[3][3], double u[16]) {
  static const double G[4][3] = {{1, 0, 0}, {.5, .5, .5}, {.5, .5, .5}, {0, 0, 1}};
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 4; b++) {
      double s = 0;
      for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) s += G[a][i] * g[i][j] * G[b][j];
      u[4 * a + b] = s;
    }
}

static const int AT[2][4] = {{1, 1, 1, 0}, {0, 1, 1, 1}}; /* |A^T| */

/* S (N,Co,H,W): abs-Winograd of |x| (N,Ci,H,W) with |w| (Co,Ci,3,3) (forward-equivalent). */
static void abs_wino(int64_t N, int64_t Ci, int64_t Co, int64_t H, int64_t W, const float *x, const float *w, double *S) {
  const int64_t TH = (H + 1) / 2, TW = (W + 1) / 2;
  double *Ua = malloc(sizeof(double) * (size_t)(Co * Ci * 16)), *Va = malloc(sizeof(double) * (size_t)(Ci * 16));
  for (int64_t o = 0; o < Co; o++)
    for (int64_t c = 0; c < Ci; c++) {
      double g[3][3];
      for (int k = 0; k < 9; k++) g[k / 3][k % 3] = fabs(w[(o * Ci + c) * 9 + k]);
      abs_w(g, Ua + (o * Ci + c) * 16);
    }
  for (int64_t n = 0; n < N; n++)
    for (int64_t th = 0; th < TH; th++)
      for (int64_t tw = 0; tw < TW; tw++) {
        for (int64_t c = 0; c < Ci; c++) {
          double d[4][4];
          for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) {
              const int64_t h = 2 * th - 1 + i, ww = 2 * tw - 1 + j;
              d[i][j] = h >= 0 && h < H && ww >= 0 && ww < W ? fabs(x[((n * Ci + c) * H + h) * W + ww]) : 0;
            }
          abs_in(d, Va + c * 16);
        }
        for (int64_t o = 0; o < Co; o++) {
          double m[16] = {0};
          for (int64_t c = 0; c < Ci; c++)
            for (int p = 0; p < 16; p++) m[p] += Ua[(o * Ci + c) * 16 + p] * Va[c * 16 + p];
          for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++) {
              const int64_t h = 2 * th + i, ww = 2 * tw + j;
              if (h >= H || ww >= W) continue;
              double s = 0;
              for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++) s += AT[i][a] * m[4 * a + b] * AT[j][b];
              S[((n * Co + o) * H + h) * W + ww] = s;
            }
        }
      }
  free(Ua), free(Va);
}

/* S (Co,Ci,3,3): abs-Winograd bound of the weight gradient: |G^T| (sum_t |V| .* |A||dy||A^T|) |G|. */
static void abs_wino_dw(int64_t N, int64_t Ci, int64_t Co, int64_t H, int64_t W, const float *x, const float *dy, double *S) {
  const int64_t TH = (H + 1) / 2, TW = (W + 1) / 2;
  double *acc = calloc((size_t)(Co * Ci * 16), sizeof(double)), *Va = malloc(sizeof(double) * (size_t)(Ci * 16)),
         *Ma = malloc(sizeof(double) * (size_t)(Co * 16));
  for (int64_t n = 0; n < N; n++)
    for (int64_t th = 0; th < TH; th++)
      for (int64_t tw = 0; tw < TW; tw++) {
        for (int64_t c = 0; c < Ci; c++) {
          double d[4][4];
          for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) {
              const int64_t h = 2 * th - 1 + i, ww = 2 * tw - 1 + j;
              d[i][j] = h >= 0 && h < H && ww >= 0 && ww < W ? fabs(x[((n * Ci + c) * H + h) * W + ww]) : 0;
            }
          abs_in(d, Va + c * 16);
        }
        for (int64_t o = 0; o < Co; o++)
          for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++) {
              double s = 0;
              for (int i = 0; i < 2; i++)
                for (int j = 0; j < 2; j++) {
                  const int64_t h = 2 * th + i, ww = 2 * tw + j;
                  if (h < H && ww < W) s += AT[i][a] * fabs(dy[((n * Co + o) * H + h) * W + ww]) * AT[j][b];
                }
              Ma[o * 16 + 4 * a + b] = s;
            }
        for (int64_t o = 0; o < Co; o++)
          for (int64_t c = 0; c < Ci; c++)
            for (int p = 0; p < 16; p++) acc[(o * Ci + c) * 16 + p] += Va[c * 16 + p] * Ma[o * 16 + p];
      }
  static const double G[4][3] = {{1, 0, 0}, {.5, .5, .5}, {.5, .5, .5}, {0, 0, 1}};
  for (int64_t oc = 0; oc < Co * Ci; oc++)
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 3; j++) {
        double s = 0;
        for (int a = 0; a < 4; a++)
          for (int b = 0; b < 4; b++) s += G[a][i] * acc[oc * 16 + 4 * a + b] * G[b][j];
        S[oc * 9 + i * 3 + j] = s;
      }
  free(acc), free(Va), free(Ma);
}

/* Elementwise: |out - ref| <= 1.05 ((2u + u^2 + K 2^-24) S + u |ref|). Returns the largest
 * error / bound ratio (> 1 fails), and the bound per element in bnd (may be NULL). */
static double bound_ratio(const float *out, const float *ref, const double *S, int64_t n, int64_t K, double *bnd) {
  const double u = U_BF16, c = 2 * u + u * u + (double)K * ldexp(1, -24);
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    const double b = 1.05 * (c * S[i] + u * fabs(ref[i])) + 1e-30;
    const double r = fabs((double)out[i] - ref[i]) / b;
    if (bnd) bnd[i] = b;
    if (!(r <= worst)) worst = r; /* NaN counts as a failure */
  }
  return worst;
}

static double dot(const float *a, const float *b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
  return s;
}
static double nrm(const float *a, int64_t n) { return sqrt(dot(a, a, n)); }

static void check(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int bias) {
  ts__conv_desc d = {N, C, H, W, O, 3, 3, H, W, 1, 1, 1, 1, 1, 1, 1};
  const int64_t nx = N * C * H * W, nw = O * C * 9, ny = N * O * H * W;
  char what[160];
  snprintf(what, sizeof what, "wino N%lld C%lld %lldx%lld O%lld%s", (long long)N, (long long)C, (long long)H, (long long)W,
           (long long)O, bias ? " +bias" : "");
  float *x = malloc((size_t)nx * 4), *w = malloc((size_t)nw * 4), *b = malloc((size_t)O * 4), *dy = malloc((size_t)ny * 4);
  ts_test_fill(x, (size_t)nx, seed++, -1, 1);
  ts_test_fill(w, (size_t)nw, seed++, -1, 1);
  ts_test_fill(b, (size_t)O, seed++, -1, 1);
  ts_test_fill(dy, (size_t)ny, seed++, -1, 1);
  uint16_t *x16 = ts_test_to_bf16(x, nx), *w16 = ts_test_to_bf16(w, nw), *b16 = ts_test_to_bf16(b, O), *dy16 = ts_test_to_bf16(dy, ny);
  /* f32 references on the bf16 values */
  float *yr = malloc((size_t)ny * 4), *dxr = malloc((size_t)nx * 4), *dwr = malloc((size_t)nw * 4), *dbr = malloc((size_t)O * 4);
  CHECK_OK(ts__conv2d_fwd_ref(&d, x, w, bias ? b : NULL, yr));
  CHECK_OK(ts__conv2d_bwd_data_ref(&d, dy, w, dxr));
  CHECK_OK(ts__conv2d_bwd_weight_ref(&d, x, dy, dwr, dbr));
  /* the kernel, twice on 2 threads and twice on 1 */
  uint16_t *y16[4], *dx16[4], *dw16[4], *db16[4];
  for (int r = 0; r < 4; r++) {
    omp_set_num_threads(r >= 2 ? 1 : 2);
    y16[r] = malloc((size_t)ny * 2), dx16[r] = malloc((size_t)nx * 2), dw16[r] = malloc((size_t)nw * 2), db16[r] = malloc((size_t)O * 2);
    memset(y16[r], 0xff, (size_t)ny * 2), memset(dx16[r], 0xff, (size_t)nx * 2), memset(dw16[r], 0xff, (size_t)nw * 2);
    CHECK_OK(ts__conv2d_fwd_wino(&d, x16, w16, bias ? b16 : NULL, y16[r], NULL));
    CHECK_OK(ts__conv2d_bwd_data_wino(&d, dy16, w16, dx16[r], NULL));
    CHECK_OK(ts__conv2d_bwd_weight_wino(&d, x16, dy16, dw16[r], bias ? db16[r] : NULL, NULL));
  }
  omp_set_num_threads(2);
  /* forward and backward-data: the same bits on any thread count; backward-weights: the same bits
   * run to run on a thread count (its small layers sum per-thread partials in thread order) */
  for (int r = 1; r < 4; r++) {
    CHECK_MSG(!memcmp(y16[0], y16[r], (size_t)ny * 2), "%s: fwd differs between runs (run %d)", what, r);
    CHECK_MSG(!memcmp(dx16[0], dx16[r], (size_t)nx * 2), "%s: bwd_data differs (run %d)", what, r);
    if (bias) CHECK_MSG(!memcmp(db16[0], db16[r], (size_t)O * 2), "%s: db differs (run %d)", what, r);
  }
  CHECK_MSG(!memcmp(dw16[0], dw16[1], (size_t)nw * 2), "%s: bwd_weight differs between runs on 2 threads", what);
  CHECK_MSG(!memcmp(dw16[2], dw16[3], (size_t)nw * 2), "%s: bwd_weight differs between runs on 1 thread", what);
  float *dw1 = ts_test_from_bf16(dw16[2], nw);
  float *y = ts_test_from_bf16(y16[0], ny), *dx = ts_test_from_bf16(dx16[0], nx), *dw = ts_test_from_bf16(dw16[0], nw);
  /* bounds: forward (x, w); backward-data = forward of dy with w rotated and transposed */
  double *Sy = malloc(sizeof(double) * (size_t)ny), *Sdx = malloc(sizeof(double) * (size_t)nx), *Sdw = malloc(sizeof(double) * (size_t)nw);
  double *By = malloc(sizeof(double) * (size_t)ny), *Bdx = malloc(sizeof(double) * (size_t)nx), *Bdw = malloc(sizeof(double) * (size_t)nw);
  float *wr = malloc((size_t)nw * 4);
  for (int64_t o = 0; o < O; o++)
    for (int64_t c = 0; c < C; c++)
      for (int k = 0; k < 9; k++) wr[(c * O + o) * 9 + k] = w[(o * C + c) * 9 + 8 - k];
  abs_wino(N, C, O, H, W, x, w, Sy);
  if (bias)
    for (int64_t i = 0; i < ny; i++) Sy[i] += fabs(b[(i / (H * W)) % O]);
  abs_wino(N, O, C, H, W, dy, wr, Sdx);
  abs_wino_dw(N, C, O, H, W, x, dy, Sdw);
  const int64_t T = N * ((H + 1) / 2) * ((W + 1) / 2);
  const double ry = bound_ratio(y, yr, Sy, ny, 16 * C, By), rdx = bound_ratio(dx, dxr, Sdx, nx, 16 * O, Bdx),
               rdw = bound_ratio(dw, dwr, Sdw, nw, T, Bdw), rdw1 = bound_ratio(dw1, dwr, Sdw, nw, T, NULL);
  CHECK_MSG(rdw1 <= 1, "%s: bwd_weight on 1 thread: error %.3f x the bound", what, rdw1);
  free(dw1);
  /* normwise: the kernel's relative L2 error against oneDNN's direct bf16 primitive's (both
   * against the f32 reference), and at most 2u */
  uint16_t *yn16 = malloc((size_t)ny * 2), *dxn16 = malloc((size_t)nx * 2), *dwn16 = malloc((size_t)nw * 2);
  for (int k = 0; k < 3; k++) ts__conv_dnnl_set_lp_mode(k, TS_CONV_LP_NATIVE);
  CHECK_OK(ts__conv2d_fwd_lp(&d, TS_BF16, 1, x16, w16, bias ? b16 : NULL, yn16));
  CHECK_OK(ts__conv2d_bwd_data_lp(&d, TS_BF16, 1, dy16, w16, dxn16));
  CHECK_OK(ts__conv2d_bwd_weight_lp(&d, TS_BF16, 1, x16, dy16, dwn16, NULL));
  for (int k = 0; k < 3; k++) ts__conv_dnnl_set_lp_mode(k, TS_CONV_LP_DEFAULT);
  float *yn = ts_test_from_bf16(yn16, ny), *dxn = ts_test_from_bf16(dxn16, nx), *dwn = ts_test_from_bf16(dwn16, nw);
  const double l2[3] = {ts_test_rel_l2(y, yr, ny), ts_test_rel_l2(dx, dxr, nx), ts_test_rel_l2(dw, dwr, nw)};
  printf("%s: error / bound fwd %.3f, bwd_data %.3f, bwd_weight %.3f; relative L2 error wino (direct bf16): fwd %.2e "
         "(%.2e) bwd_data %.2e (%.2e) bwd_weight %.2e (%.2e)\n",
         what, ry, rdx, rdw, l2[0], ts_test_rel_l2(yn, yr, ny), l2[1], ts_test_rel_l2(dxn, dxr, nx), l2[2], ts_test_rel_l2(dwn, dwr, nw));
  for (int k = 0; k < 3; k++) CHECK_MSG(l2[k] <= 2 * U_BF16, "%s: dir %d relative L2 error %.3g", what, k, l2[k]);
  free(yn16), free(dxn16), free(dwn16), free(yn), free(dxn), free(dwn);
  CHECK_MSG(ry <= 1, "%s: fwd error %.3f x the bound", what, ry);
  CHECK_MSG(rdx <= 1, "%s: bwd_data error %.3f x the bound", what, rdx);
  CHECK_MSG(rdw <= 1, "%s: bwd_weight error %.3f x the bound", what, rdw);
  if (bias) {
    float *db = ts_test_from_bf16(db16[0], O);
    /* an f32 sum of K = N H W terms of magnitude <= 1, rounded once to bf16 */
    CHECK_CLOSE(db, dbr, (size_t)O, (double)(N * H * W) * (double)(N * H * W) * ldexp(1, -24), U_BF16, "wino db");
    free(db);
  }
  /* the check can fail: one wrong output element breaks the bound */
  y[ny / 2] += (float)(4 * By[ny / 2]) + 1e-3f;
  CHECK(bound_ratio(y, yr, Sy, ny, 16 * C, NULL) > 1);
  y[ny / 2] -= (float)(4 * By[ny / 2]) + 1e-3f;
  /* adjointness (no reference kernel involved): <dy, y> = <x, dx> = <w, dw> (bias off), within
   * 5 standard deviations of the sums of the elementwise errors (each bounded as above) */
  if (!bias) {
    const double a = dot(dy, y, ny), bx = dot(x, dx, nx), bw = dot(w, dw, nw);
    const double ey = 5 * 2 * U_BF16 * nrm(dy, ny) * nrm(y, ny) / sqrt((double)ny),
                 ex = 5 * 2 * U_BF16 * nrm(x, nx) * nrm(dx, nx) / sqrt((double)nx),
                 ew = 5 * 2 * U_BF16 * nrm(w, nw) * nrm(dw, nw) / sqrt((double)nw);
    CHECK_MSG(fabs(a - bx) <= ey + ex, "%s: <dy, conv(x)> %.6g vs <x, bwd_data(dy)> %.6g (allowed %.3g)", what, a, bx, ey + ex);
    CHECK_MSG(fabs(a - bw) <= ey + ew, "%s: <dy, conv(x)> %.6g vs <w, bwd_weight(x, dy)> %.6g (allowed %.3g)", what, a, bw, ey + ew);
    /* and the adjoint test itself can fail: a transposed kernel (no 180-degree rotation) breaks it */
    if (C == O && C >= 16) {
      float *wt = malloc((size_t)nw * 4), *y2 = malloc((size_t)ny * 4);
      for (int64_t o = 0; o < O; o++)
        for (int64_t c = 0; c < C; c++)
          for (int k = 0; k < 9; k++) wt[(o * C + c) * 9 + k] = w[(c * O + o) * 9 + k];
      CHECK_OK(ts__conv2d_fwd_ref(&d, x, wt, NULL, y2));
      CHECK(fabs(dot(dy, y2, ny) - bx) > ey + ex);
      free(wt), free(y2);
    }
  }
  for (int r = 0; r < 4; r++) free(y16[r]), free(dx16[r]), free(dw16[r]), free(db16[r]);
  free(x), free(w), free(b), free(dy), free(x16), free(w16), free(b16), free(dy16), free(yr), free(dxr), free(dwr), free(dbr);
  free(y), free(dx), free(dw), free(Sy), free(Sdx), free(Sdw), free(By), free(Bdx), free(Bdw), free(wr);
}

/* The dispatch: ResNet 3x3 layers' bf16 path is the Winograd kernel by default (same bits as a
 * direct call), TS_CONV_LP_NATIVE turns it off, thin or strided layers never take it. */
static void check_dispatch(void) {
  ts__conv_desc d = {2, 64, 8, 8, 64, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1, 1};
  ts__conv_desc stem = {2, 3, 9, 9, 8, 3, 3, 9, 9, 1, 1, 1, 1, 1, 1, 1};
  ts__conv_desc s2 = {2, 32, 8, 8, 64, 3, 3, 4, 4, 2, 2, 1, 1, 1, 1, 1};
  for (int dir = 0; dir < 3; dir++) {
    CHECK_MSG(!strcmp(ts__conv_dnnl_impl_bf16(&d, dir), TS_CONV_WINO_IMPL), "dir %d: %s", dir, ts__conv_dnnl_impl_bf16(&d, dir));
    CHECK(strcmp(ts__conv_dnnl_impl_bf16(&stem, dir), TS_CONV_WINO_IMPL) != 0);
    CHECK(strcmp(ts__conv_dnnl_impl_bf16(&s2, dir), TS_CONV_WINO_IMPL) != 0);
    ts__conv_dnnl_set_lp_mode(dir, TS_CONV_LP_NATIVE);
    CHECK(strcmp(ts__conv_dnnl_impl_bf16(&d, dir), TS_CONV_WINO_IMPL) != 0);
    ts__conv_dnnl_set_lp_mode(dir, TS_CONV_LP_WINO);
    CHECK(!strcmp(ts__conv_dnnl_impl_bf16(&d, dir), TS_CONV_WINO_IMPL));
    CHECK(strcmp(ts__conv_dnnl_impl_bf16(&s2, dir), TS_CONV_WINO_IMPL) != 0); /* not its shape: falls back */
    ts__conv_dnnl_set_lp_mode(dir, TS_CONV_LP_DEFAULT);
  }
  const int64_t nx = 2 * 64 * 64, nw = 64 * 64 * 9;
  float *x = malloc(nx * 4), *w = malloc(nw * 4);
  ts_test_fill(x, nx, 1, -1, 1), ts_test_fill(w, nw, 2, -1, 1);
  uint16_t *x16 = ts_test_to_bf16(x, nx), *w16 = ts_test_to_bf16(w, nw), *a = malloc(nx * 2), *b = malloc(nx * 2), *dwa = malloc(nw * 2),
           *dwb = malloc(nw * 2);
  CHECK_OK(ts__conv2d_fwd_lp(&d, TS_BF16, 1, x16, w16, NULL, a));
  CHECK_OK(ts__conv2d_fwd_wino(&d, x16, w16, NULL, b, NULL));
  CHECK(!memcmp(a, b, nx * 2));
  CHECK_OK(ts__conv2d_bwd_data_lp(&d, TS_BF16, 1, x16, w16, a));
  CHECK_OK(ts__conv2d_bwd_data_wino(&d, x16, w16, b, NULL));
  CHECK(!memcmp(a, b, nx * 2));
  CHECK_OK(ts__conv2d_bwd_weight_lp(&d, TS_BF16, 1, x16, x16, dwa, NULL));
  CHECK_OK(ts__conv2d_bwd_weight_wino(&d, x16, x16, dwb, NULL, NULL));
  CHECK(!memcmp(dwa, dwb, nw * 2));
  /* a shape it does not take is refused with a message naming it */
  EXPECT_ERR(ts__conv2d_fwd_wino(&s2, x16, w16, NULL, a, NULL), TS_EINVAL, "Winograd", "3x3 stride-1");
  free(x), free(w), free(x16), free(w16), free(a), free(b), free(dwa), free(dwb);
}

int main(void) {
  if (!ts__conv_wino_cpu()) {
    ts_test_skip("the CPU has no AVX512-BF16 (the Winograd kernel is not used here)");
    return TS_TEST_SKIPPED;
  }
  check(1, 16, 1, 1, 16, 0);   /* 1x1 spatial: one tile, only its centre */
  check(2, 16, 2, 2, 32, 1);   /* 2x2 spatial, bias */
  check(1, 32, 5, 7, 48, 0);   /* odd sizes: partial tiles at the bottom and right */
  check(3, 64, 8, 8, 64, 0);   /* ResNet-like */
  check(4, 40, 9, 6, 24, 1);   /* channels not multiples of 16 / 32, odd tile count */
  check(2, 128, 4, 4, 256, 0); /* ResNet stage 3/4 widths */
  check(1, 256, 3, 5, 128, 0);
  check(2, 64, 33, 17, 64, 0); /* rows of more than 16 pixels (two transposes per row) */
  check_dispatch();
  ts__dnnl_cache_clear();
  return ts_test_finish("test_conv_wino");
}
