/* bf16 im2col GEMM convolution (conv_gemm.c): every direction against the f32 reference kernel
 * (conv.c) on the same bf16-valued inputs, over the shapes its index arithmetic distinguishes
 * (odd K, odd O, strides 1, 2 and 3 (the vector and the scalar gathers), dilation, asymmetric
 * kernels, output images of more and of fewer than 32 pixels, panels crossing output rows and
 * images, a partial last group); bitwise determinism on 1 and 2 threads; the dispatch.
 *
 * Forward runs direct for images of >= 28 output pixels and as im2col for smaller ones,
 * backward-data direct (per position class of the stride), backward-weights as im2col^T; the
 * shapes below take every path.
 *
 * Tolerance: the kernel multiplies bf16 values exactly into f32 and sums K products in f32, as
 * the reference does in another order, then rounds once to bf16 (unit roundoff u = 2^-8). So
 * elementwise |out - ref| <= u |ref| + 2 (K + 2) 2^-24 S, with S the same convolution on
 * absolute values (the sum of the magnitudes of the products), times 1.05; and normwise the
 * relative L2 error stays under u (one rounding, about u / sqrt(12) ~ 0.3u on random data). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv.h"
#include "kernels/dnnl_ctx.h"
#include "kernels/lowp.h"
#include "test_util.h"

static const double U_BF16 = 1.0 / 256;
static uint64_t seed = 11;

static float *absv(const float *x, int64_t n) {
  float *a = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++) a[i] = fabsf(x[i]);
  return a;
}

/* largest |out - ref| / bound (> 1 fails; NaN fails) */
static double bound_ratio(const float *out, const float *ref, const float *S, int64_t n, int64_t K) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    const double b = 1.05 * (U_BF16 * fabs(ref[i]) + 2.0 * (double)(K + 2) * ldexp(1, -24) * S[i]) + 1e-30;
    const double r = fabs((double)out[i] - ref[i]) / b;
    if (!(r <= worst)) worst = r;
  }
  return worst;
}
static void check(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t KH, int64_t KW, int64_t sh, int64_t sw,
                  int64_t ph, int64_t pw, int64_t dh, int64_t dw, int bias) {
  const int64_t OH = ts__conv_out_size(H, KH, sh, ph, dh), OW = ts__conv_out_size(W, KW, sw, pw, dw);
  ts__conv_desc d = {N, C, H, W, O, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw, 1};
  const int64_t nx = N * C * H * W, nw = O * C * KH * KW, ny = N * O * OH * OW;
  char what[200];
  snprintf(what, sizeof what, "gemm N%lld C%lld %lldx%lld O%lld k%lldx%lld s%lld,%lld p%lld,%lld d%lld,%lld%s", (long long)N,
           (long long)C, (long long)H, (long long)W, (long long)O, (long long)KH, (long long)KW, (long long)sh, (long long)sw,
           (long long)ph, (long long)pw, (long long)dh, (long long)dw, bias ? " +bias" : "");
  CHECK_MSG(ts__conv_gemm_shape(&d), "%s: shape refused", what);
  float *x = malloc((size_t)nx * 4), *w = malloc((size_t)nw * 4), *b = malloc((size_t)O * 4), *dy = malloc((size_t)ny * 4);
  ts_test_fill(x, (size_t)nx, seed++, -1, 1);
  ts_test_fill(w, (size_t)nw, seed++, -1, 1);
  ts_test_fill(b, (size_t)O, seed++, -1, 1);
  ts_test_fill(dy, (size_t)ny, seed++, -1, 1);
  uint16_t *x16 = ts_test_to_bf16(x, nx), *w16 = ts_test_to_bf16(w, nw), *b16 = ts_test_to_bf16(b, O), *dy16 = ts_test_to_bf16(dy, ny);
  float *yr = malloc((size_t)ny * 4), *dxr = malloc((size_t)nx * 4), *dwr = malloc((size_t)nw * 4), *dbr = malloc((size_t)O * 4);
  float *Sy = malloc((size_t)ny * 4), *Sdx = malloc((size_t)nx * 4), *Sdw = malloc((size_t)nw * 4), *Sdb = malloc((size_t)O * 4);
  CHECK_OK(ts__conv2d_fwd_ref(&d, x, w, bias ? b : NULL, yr));
  CHECK_OK(ts__conv2d_bwd_data_ref(&d, dy, w, dxr));
  CHECK_OK(ts__conv2d_bwd_weight_ref(&d, x, dy, dwr, dbr));
  float *ax = absv(x, nx), *aw = absv(w, nw), *ab = absv(b, O), *ady = absv(dy, ny);
  CHECK_OK(ts__conv2d_fwd_ref(&d, ax, aw, bias ? ab : NULL, Sy));
  CHECK_OK(ts__conv2d_bwd_data_ref(&d, ady, aw, Sdx));
  CHECK_OK(ts__conv2d_bwd_weight_ref(&d, ax, ady, Sdw, Sdb));
  /* the kernel, twice on 2 threads and twice on 1 */
  uint16_t *y16[4], *dx16[4], *dw16[4], *db16[4];
  for (int r = 0; r < 4; r++) {
    omp_set_num_threads(r >= 2 ? 1 : 2);
    y16[r] = malloc((size_t)ny * 2), dx16[r] = malloc((size_t)nx * 2), dw16[r] = malloc((size_t)nw * 2), db16[r] = malloc((size_t)O * 2);
    memset(y16[r], 0xff, (size_t)ny * 2), memset(dx16[r], 0xff, (size_t)nx * 2), memset(dw16[r], 0xff, (size_t)nw * 2);
    CHECK_OK(ts__conv2d_fwd_gemm(&d, x16, w16, bias ? b16 : NULL, y16[r]));
    CHECK_OK(ts__conv2d_bwd_data_gemm(&d, dy16, w16, dx16[r]));
    CHECK_OK(ts__conv2d_bwd_weight_gemm(&d, x16, dy16, dw16[r], bias ? db16[r] : NULL));
  }
  omp_set_num_threads(2);
  for (int r = 1; r < 4; r++) {
    CHECK_MSG(!memcmp(y16[0], y16[r], (size_t)ny * 2), "%s: fwd differs between runs (run %d)", what, r);
    CHECK_MSG(!memcmp(dx16[0], dx16[r], (size_t)nx * 2), "%s: bwd_data differs (run %d)", what, r);
    CHECK_MSG(!memcmp(dw16[0], dw16[r], (size_t)nw * 2), "%s: bwd_weight differs (run %d)", what, r);
    if (bias) CHECK_MSG(!memcmp(db16[0], db16[r], (size_t)O * 2), "%s: db differs (run %d)", what, r);
  }
  float *y = ts_test_from_bf16(y16[0], ny), *dx = ts_test_from_bf16(dx16[0], nx), *dwv = ts_test_from_bf16(dw16[0], nw);
  const double ry = bound_ratio(y, yr, Sy, ny, C * KH * KW), rdx = bound_ratio(dx, dxr, Sdx, nx, O * KH * KW),
               rdw = bound_ratio(dwv, dwr, Sdw, nw, N * OH * OW);
  const double l2[3] = {ts_test_rel_l2(y, yr, ny), ts_test_rel_l2(dx, dxr, nx), ts_test_rel_l2(dwv, dwr, nw)};
  printf("%s: error / bound fwd %.3f bwd_data %.3f bwd_weight %.3f; relative L2 error %.2e %.2e %.2e (u = %.2e)\n", what, ry,
         rdx, rdw, l2[0], l2[1], l2[2], U_BF16);
  CHECK_MSG(ry <= 1, "%s: fwd error %.3f x the bound", what, ry);
  CHECK_MSG(rdx <= 1, "%s: bwd_data error %.3f x the bound", what, rdx);
  CHECK_MSG(rdw <= 1, "%s: bwd_weight error %.3f x the bound", what, rdw);
  for (int k = 0; k < 3; k++) CHECK_MSG(l2[k] <= U_BF16, "%s: dir %d relative L2 error %.3g", what, k, l2[k]);
  if (bias) {
    float *db = ts_test_from_bf16(db16[0], O);
    CHECK_MSG(bound_ratio(db, dbr, Sdb, O, N * OH * OW) <= 1, "%s: db", what);
    free(db);
  }
  /* the bound can fail: one output element off by one product of the largest size breaks it */
  const float keep = y[ny / 3];
  y[ny / 3] += 0.25f;
  CHECK(bound_ratio(y, yr, Sy, ny, C * KH * KW) > 1);
  y[ny / 3] = keep;
  for (int r = 0; r < 4; r++) free(y16[r]), free(dx16[r]), free(dw16[r]), free(db16[r]);
  free(x), free(w), free(b), free(dy), free(x16), free(w16), free(b16), free(dy16), free(yr), free(dxr), free(dwr), free(dbr);
  free(Sy), free(Sdx), free(Sdw), free(Sdb), free(ax), free(aw), free(ab), free(ady), free(y), free(dx), free(dwv);
}

/* The dispatch: the bf16 default for the layers Winograd does not take is this kernel where it
 * was measured faster (forward >= 32 output channels, backward-data >= 32 input channels,
 * backward-weights C KH KW >= 256 or 1x1), with the same bits as a direct call;
 * TS_CONV_LP_NATIVE turns it off; an odd output pixel count falls back. */
static void check_dispatch(void) {
  ts__conv_desc wino = {2, 64, 8, 8, 64, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1, 1};
  ts__conv_desc stem = {2, 3, 8, 8, 64, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1, 1};
  ts__conv_desc thin = {2, 16, 8, 8, 16, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1, 1};
  ts__conv_desc ds = {2, 16, 8, 8, 32, 1, 1, 4, 4, 2, 2, 0, 0, 1, 1, 1};
  ts__conv_desc s2 = {2, 32, 16, 16, 64, 3, 3, 8, 8, 2, 2, 1, 1, 1, 1, 1};
  ts__conv_desc s2small = {2, 32, 8, 8, 64, 3, 3, 4, 4, 2, 2, 1, 1, 1, 1, 1}; /* 16 output pixels */
  ts__conv_desc odd = {2, 8, 5, 5, 8, 3, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1}; /* 3x3 output */
  ts__conv_desc grp = {2, 32, 8, 8, 64, 3, 3, 4, 4, 2, 2, 1, 1, 1, 1, 2};
  CHECK(!ts__conv_gemm_shape(&odd) && !ts__conv_gemm_shape(&grp));
  for (int dir = 0; dir < 3; dir++) {
    /* the RGB stem: forward only (3 input channels; a K of 27 is one dW panel) */
    CHECK_MSG(!strcmp(ts__conv_dnnl_impl_bf16(&stem, dir), TS_CONV_GEMM_IMPL) == (dir == 0), "dir %d: %s", dir,
              ts__conv_dnnl_impl_bf16(&stem, dir));
    CHECK(strcmp(ts__conv_dnnl_impl_bf16(&thin, dir), TS_CONV_GEMM_IMPL) != 0); /* 16 channels in and out */
    CHECK(!strcmp(ts__conv_dnnl_impl_bf16(&ds, dir), TS_CONV_GEMM_IMPL) == (dir != 1)); /* 1x1, 16 in */
    /* a 3x3 layer with 16-pixel outputs: its forward stays on oneDNN */
    CHECK(!strcmp(ts__conv_dnnl_impl_bf16(&s2small, dir), TS_CONV_GEMM_IMPL) == (dir != 0));
    CHECK(!strcmp(ts__conv_dnnl_impl_bf16(&s2, dir), TS_CONV_GEMM_IMPL));
    CHECK(!strcmp(ts__conv_dnnl_impl_bf16(&wino, dir), TS_CONV_WINO_IMPL));
    CHECK(strcmp(ts__conv_dnnl_impl_bf16(&odd, dir), TS_CONV_GEMM_IMPL) != 0);
    ts__conv_dnnl_set_lp_mode(dir, TS_CONV_LP_NATIVE);
    CHECK(strcmp(ts__conv_dnnl_impl_bf16(&s2, dir), TS_CONV_GEMM_IMPL) != 0);
    ts__conv_dnnl_set_lp_mode(dir, TS_CONV_LP_GEMM);
    CHECK(!strcmp(ts__conv_dnnl_impl_bf16(&wino, dir), TS_CONV_GEMM_IMPL));
    ts__conv_dnnl_set_lp_mode(dir, TS_CONV_LP_DEFAULT);
  }
  const int64_t nx = 2 * 32 * 256, nw = 64 * 32 * 9, ny = 2 * 64 * 64;
  float *x = malloc(nx * 4), *w = malloc(nw * 4), *dy = malloc(ny * 4);
  ts_test_fill(x, nx, 1, -1, 1), ts_test_fill(w, nw, 2, -1, 1), ts_test_fill(dy, ny, 3, -1, 1);
  uint16_t *x16 = ts_test_to_bf16(x, nx), *w16 = ts_test_to_bf16(w, nw), *dy16 = ts_test_to_bf16(dy, ny), *a = malloc(nx * 2), *b = malloc(nx * 2),
           *dwa = malloc(nw * 2), *dwb = malloc(nw * 2);
  CHECK_OK(ts__conv2d_fwd_lp(&s2, TS_BF16, 1, x16, w16, NULL, a));
  CHECK_OK(ts__conv2d_fwd_gemm(&s2, x16, w16, NULL, b));
  CHECK(!memcmp(a, b, ny * 2));
  CHECK_OK(ts__conv2d_bwd_data_lp(&s2, TS_BF16, 1, dy16, w16, a));
  CHECK_OK(ts__conv2d_bwd_data_gemm(&s2, dy16, w16, b));
  CHECK(!memcmp(a, b, nx * 2));
  CHECK_OK(ts__conv2d_bwd_weight_lp(&s2, TS_BF16, 1, x16, dy16, dwa, NULL));
  CHECK_OK(ts__conv2d_bwd_weight_gemm(&s2, x16, dy16, dwb, NULL));
  CHECK(!memcmp(dwa, dwb, nw * 2));
  EXPECT_ERR(ts__conv2d_fwd_gemm(&odd, x16, w16, NULL, a), TS_EINVAL, "GEMM", "not supported", "N2 C8 5x5 O8");
  free(x), free(w), free(dy), free(x16), free(w16), free(dy16), free(a), free(b), free(dwa), free(dwb);
}

int main(void) {
  if (!ts__conv_wino_cpu()) {
    ts_test_skip("the CPU has no AVX512-BF16 (the im2col GEMM kernel is not used here)");
    return TS_TEST_SKIPPED;
  }
  /* N, C, H, W, O, KH, KW, sh, sw, ph, pw, dh, dw, bias */
  check(2, 3, 32, 32, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1);  /* RGB stem: K = 27 (odd), 1024-pixel images */
  check(3, 16, 16, 16, 32, 3, 3, 2, 2, 1, 1, 1, 1, 0); /* stride-2 3x3, 64-pixel images (two panels) */
  check(3, 16, 8, 8, 33, 1, 1, 2, 2, 0, 0, 1, 1, 1);   /* 1x1 stride 2: 16-pixel images grouped 2 per panel,
                                                          a partial last group; odd O */
  check(5, 8, 4, 4, 8, 3, 3, 2, 2, 1, 1, 1, 1, 0);     /* 2x2 outputs, 8 images per panel */
  check(2, 6, 10, 14, 12, 5, 5, 1, 1, 2, 2, 1, 1, 1);  /* 5x5, non-square: panels crossing output rows */
  check(2, 4, 13, 13, 6, 3, 3, 3, 3, 1, 1, 2, 2, 0);   /* stride 3 (the scalar gather), dilation 2 */
  check(2, 8, 12, 10, 16, 3, 1, 2, 1, 1, 0, 1, 1, 0);  /* asymmetric kernel, stride and padding */
  check(2, 32, 6, 6, 32, 1, 1, 1, 1, 0, 0, 1, 1, 0);   /* 36 pixels: a 4-column last panel */
  check(2, 40, 9, 11, 24, 3, 3, 2, 2, 1, 1, 1, 1, 1);  /* 5x6 output: odd row count, 30-pixel images one per panel */
  /* backward-data's direct path (C >= 32): position classes a 1x1 stride-2 kernel never reaches
   * (zero), stride 3 with dilation 2 and an odd channel count */
  check(2, 32, 8, 8, 16, 1, 1, 2, 2, 0, 0, 1, 1, 0);
  check(2, 33, 13, 13, 8, 3, 3, 3, 3, 1, 1, 2, 2, 1);
  check_dispatch();
  ts__dnnl_cache_clear();
  return ts_test_finish("test_conv_gemm");
}
