/* 16-bit conv kernels (conv_dnnl.c: ts__conv2d_*_lp) against the f32 oneDNN kernels on the same
 * inputs (drawn in [-1,1) and rounded to the 16-bit dtype): forward (with bias), backward data,
 * backward weights (with bias gradient), for bf16 (oneDNN native and ref converted) and f16
 * (converted both ways). Tolerance, with R = C*KH*KW (fwd), O*KH*KW/stride^2 (bwd data) or
 * N*OH*OW (bwd weights) terms per output:
 *   |a - b| <= 1e-2 * (1 + sqrt(R)/4) + 1e-2 |b|   bf16 (R up to 576 here)
 * and a tenth of that for f16; three times it where the default bf16 path is the Winograd kernel
 * (conv_wino.c). The bf16 fast path must really be bf16 (impl name checked), and a
 * corrupted output must fail the comparison.
 * The bf16 oneDNN path runs in each mode of ts__conv_dnnl_set_lp_mode: native, f32 (the f32
 * primitive between converting reorders) and the default (f32 for backward-weights of spatial
 * layers with >= 32 channels on more than one thread, native elsewhere; checked by the
 * implementation names on 1 and 2 threads). In f32 mode
 * the outputs must be the f32 kernel's, rounded once to nearest even, bit for bit (the inputs are
 * bf16 values, so the f32 kernel sees the same numbers through the same primitive). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv.h"
#include "kernels/dnnl_ctx.h"
#include "kernels/lowp.h"
#include "test_util.h"

static uint64_t seed = 11;

static void *to16(float *x, int64_t n, ts_dtype dt) {
  uint16_t *h = malloc((size_t)n * 2);
  ts__lp_from_f32(x, h, dt, n);
  ts__lp_to_f32(h, dt, x, n);
  return h;
}

/* Scale of the tolerance: 3 where the default bf16 path is the Winograd kernel, which
 * also rounds its transformed operands to bf16 (relative L2 error ~1.1 u against direct's ~0.4 u,
 * test_conv_wino; its error scales with the magnitude of the summed products, not with |out|). */
static double g_abs_scale = 1;

static void cmp16(const void *h, ts_dtype dt, const float *ref, int64_t n, int64_t R, const char *what) {
  float *f = malloc((size_t)n * 4);
  ts__lp_to_f32(h, dt, f, n);
  const double s = (dt == TS_BF16 ? 1 : 0.1) * g_abs_scale;
  CHECK_CLOSE(f, ref, (size_t)n, s * 1e-2 * (1 + sqrt((double)R) / 4), s * 1e-2, what);
  f[n / 2] += 1.f + fabsf(ref[n / 2]);
  CHECK(ts_test_close(f, ref, (size_t)n, s * 1e-2 * (1 + sqrt((double)R) / 4), s * 1e-2, NULL) > 1.0);
  free(f);
}

/* h (16-bit) equals ref rounded once to dt, bit for bit. */
static void exact16(const uint16_t *h, ts_dtype dt, const float *ref, int64_t n, const char *what) {
  uint16_t *r = malloc((size_t)n * 2);
  ts__lp_from_f32(ref, r, dt, n);
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; i++)
    if (h[i] != r[i] && !bad++) first = i;
  CHECK_MSG(bad == 0, "%s: %lld of %lld differ from the rounded f32 result (first at %lld)", what, (long long)bad,
            (long long)n, (long long)first);
  free(r);
}

static void check(ts_dtype dt, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t K,
                  int64_t s, int64_t p, int64_t g) {
  ts__conv_desc d = {N, C, H, W, O, K, K, 0, 0, s, s, p, p, 1, 1, g};
  d.OH = ts__conv_out_size(H, K, s, p, 1), d.OW = ts__conv_out_size(W, K, s, p, 1);
  const int64_t nx = N * C * H * W, nw = O * (C / g) * K * K, ny = N * O * d.OH * d.OW;
  float *x = malloc((size_t)nx * 4), *w = malloc((size_t)nw * 4), *b = malloc((size_t)O * 4),
        *dy = malloc((size_t)ny * 4), *y = malloc((size_t)ny * 4), *dx = malloc((size_t)nx * 4),
        *dw = malloc((size_t)nw * 4), *db = malloc((size_t)O * 4);
  ts_test_fill(x, (size_t)nx, seed++, -1, 1);
  ts_test_fill(w, (size_t)nw, seed++, -1, 1);
  ts_test_fill(b, (size_t)O, seed++, -1, 1);
  ts_test_fill(dy, (size_t)ny, seed++, -1, 1);
  void *x16 = to16(x, nx, dt), *w16 = to16(w, nw, dt), *b16 = to16(b, O, dt), *dy16 = to16(dy, ny, dt);
  CHECK_OK(ts__conv2d_fwd_dnnl(&d, x, w, b, y));
  CHECK_OK(ts__conv2d_bwd_data_dnnl(&d, dy, w, dx));
  CHECK_OK(ts__conv2d_bwd_weight_dnnl(&d, x, dy, dw, db));
  uint16_t *y16 = malloc((size_t)ny * 2), *dx16 = malloc((size_t)nx * 2), *dw16 = malloc((size_t)nw * 2),
           *db16 = malloc((size_t)O * 2);
  /* ref; dnnl in the lp modes default, native, f32 (bf16 only: f16 is converted either way) */
  for (int v = 0; v < (dt == TS_BF16 ? 4 : 2); v++) {
    const int dn = v > 0, mode = v == 2 ? TS_CONV_LP_NATIVE : v == 3 ? TS_CONV_LP_F32 : TS_CONV_LP_DEFAULT;
    for (int k = 0; k < 3; k++) ts__conv_dnnl_set_lp_mode(k, mode);
    char what[200];
    snprintf(what, sizeof what, "conv %s %s%s N%lld C%lld %lldx%lld O%lld K%lld s%lld p%lld g%lld", ts_dtype_name(dt),
             dn ? "dnnl" : "ref", v == 2 ? " native" : v == 3 ? " f32" : "", (long long)N, (long long)C, (long long)H, (long long)W, (long long)O, (long long)K,
             (long long)s, (long long)p, (long long)g);
    char w2[240];
    g_abs_scale = dt == TS_BF16 && v == 1 && !strcmp(ts__conv_dnnl_impl_bf16(&d, 0), TS_CONV_WINO_IMPL) ? 3 : 1;
    CHECK_OK(ts__conv2d_fwd_lp(&d, dt, dn, x16, w16, b16, y16));
    snprintf(w2, sizeof w2, "%s: fwd", what);
    cmp16(y16, dt, y, ny, C / g * K * K, w2);
    CHECK_OK(ts__conv2d_bwd_data_lp(&d, dt, dn, dy16, w16, dx16));
    snprintf(w2, sizeof w2, "%s: bwd data", what);
    cmp16(dx16, dt, dx, nx, O / g * K * K, w2);
    CHECK_OK(ts__conv2d_bwd_weight_lp(&d, dt, dn, x16, dy16, dw16, db16));
    snprintf(w2, sizeof w2, "%s: bwd weights", what);
    cmp16(dw16, dt, dw, nw, N * d.OH * d.OW, w2);
    snprintf(w2, sizeof w2, "%s: bias gradient", what);
    cmp16(db16, dt, db, O, N * d.OH * d.OW, w2);
    g_abs_scale = 1;
    if (v == 3) {
      exact16(y16, dt, y, ny, "f32 mode: fwd");
      exact16(dx16, dt, dx, nx, "f32 mode: bwd data");
      exact16(dw16, dt, dw, nw, "f32 mode: bwd weights");
      exact16(db16, dt, db, O, "f32 mode: bias gradient");
    }
  }
  for (int k = 0; k < 3; k++) ts__conv_dnnl_set_lp_mode(k, TS_CONV_LP_DEFAULT);
  free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db);
  free(x16), free(w16), free(b16), free(dy16), free(y16), free(dx16), free(dw16), free(db16);
}

int main(void) {
  const ts_dtype dts[2] = {TS_BF16, TS_F16};
  for (int i = 0; i < 2; i++) {
    check(dts[i], 2, 3, 9, 9, 8, 3, 1, 1, 1);   /* RGB stem-like */
    check(dts[i], 2, 64, 8, 8, 64, 3, 1, 1, 1); /* ResNet 3x3 (R = 576) */
    check(dts[i], 2, 16, 8, 8, 32, 1, 2, 0, 1); /* 1x1 stride-2 downsample */
    check(dts[i], 2, 32, 8, 8, 64, 3, 2, 1, 1); /* 3x3 stride-2 (f32 direct in f32 mode) */
    check(dts[i], 1, 8, 7, 7, 8, 3, 1, 1, 4);   /* grouped */
  }
  /* the bf16 fast path is native bf16, not a conversion, except where the default rule runs
   * f32 (backward-weights of a 3x3 layer with >= 32 channels: Winograd there, as f32) or, for
   * 3x3 stride-1 layers on AVX512-BF16 CPUs, the bf16 Winograd kernel */
  ts__conv_desc d = {2, 64, 8, 8, 64, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1, 1};
  ts__conv_desc stem = {2, 3, 9, 9, 8, 3, 3, 9, 9, 1, 1, 1, 1, 1, 1, 1};
  ts__conv_desc ds = {2, 64, 8, 8, 128, 1, 1, 4, 4, 2, 2, 0, 0, 1, 1, 1};
  if (!ts__dnnl_bf16()) { /* no bf16 in this CPU's oneDNN: the f32 primitive on widened values */
    printf("oneDNN has no bf16 on this CPU: the bf16 convolutions ran as f32 on widened values (checked above); "
           "the route checks below SKIPPED\n");
    for (int dir = 0; dir < 3; dir++) { /* (Tessera's own AVX512-BF16 kernels need no oneDNN bf16: an
                                        * AVX-512 machine under ONEDNN_MAX_CPU_ISA=AVX2 keeps them) */
      const char *impl = ts__conv_dnnl_impl_bf16(&d, dir);
      CHECK_MSG(!strcmp(impl, "converted") ||
                    (ts__conv_wino_cpu() && (!strcmp(impl, TS_CONV_WINO_IMPL) || !strcmp(impl, TS_CONV_GEMM_IMPL))),
                "dir %d: %s", dir, impl);
    }
  }
  for (int nt = 1; nt <= 2 && ts__dnnl_bf16(); nt++)
  for (int mode = TS_CONV_LP_DEFAULT; mode <= TS_CONV_LP_F32; mode++) {
    omp_set_num_threads(nt); /* the default runs f32 backward-weights on > 1 thread only */
    for (int k = 0; k < 3; k++) ts__conv_dnnl_set_lp_mode(k, mode);
    for (int dir = 0; dir < 3; dir++) {
      const char *impl = ts__conv_dnnl_impl_bf16(&d, dir);
      printf("bf16 conv, %d thread(s), mode %d dir %d: %s\n", nt, mode, dir, impl);
      CHECK_MSG(impl[0] != 0 && strstr(impl, "ref") == NULL, "dir %d impl '%s'", dir, impl);
      /* the default runs the bf16 Winograd kernel (conv_wino.c) on this 3x3 stride-1 layer where
       * the CPU has AVX512-BF16 (test_conv_wino checks it) */
      const int wino = mode == TS_CONV_LP_DEFAULT && ts__conv_wino_cpu();
      if (wino) CHECK_MSG(!strcmp(impl, TS_CONV_WINO_IMPL), "default dir %d impl '%s'", dir, impl);
      const int f32 = mode == TS_CONV_LP_F32 || (mode == TS_CONV_LP_DEFAULT && !wino && dir == 2 && nt > 1);
      CHECK_MSG(f32 == (strstr(impl, "bf16") == NULL), "mode %d dir %d impl '%s'", mode, dir, impl);
      if (f32) CHECK_MSG(strstr(impl, "wino") != NULL, "mode %d dir %d: f32 should run Winograd: '%s'", mode, dir, impl);
      if (mode == TS_CONV_LP_DEFAULT) { /* the stem-like layer (81 output pixels: odd) keeps the native
                                         * primitive; the 1x1 downsample runs the GEMM kernel
                                         * (conv_gemm.c, test_conv_gemm) where the CPU has AVX512-BF16 */
        char a[2][64];
        snprintf(a[0], 64, "%s", ts__conv_dnnl_impl_bf16(&stem, dir));
        snprintf(a[1], 64, "%s", ts__conv_dnnl_impl_bf16(&ds, dir));
        ts__conv_dnnl_set_lp_mode(dir, TS_CONV_LP_NATIVE);
        CHECK_MSG(!strcmp(a[0], ts__conv_dnnl_impl_bf16(&stem, dir)), "stem dir %d: %s", dir, a[0]);
        if (ts__conv_wino_cpu()) CHECK_MSG(!strcmp(a[1], TS_CONV_GEMM_IMPL), "1x1 dir %d: %s", dir, a[1]);
        else CHECK_MSG(!strcmp(a[1], ts__conv_dnnl_impl_bf16(&ds, dir)), "1x1 dir %d: %s", dir, a[1]);
        ts__conv_dnnl_set_lp_mode(dir, TS_CONV_LP_DEFAULT);
      }
    }
  }
  for (int k = 0; k < 3; k++) ts__conv_dnnl_set_lp_mode(k, TS_CONV_LP_DEFAULT);
  ts__dnnl_cache_clear();
  return ts_test_finish("test_conv_bf16");
}
