/* 16-bit matmul / dense kernels (matmul_bf16.c) against the f32 kernels on the same inputs.
 * Inputs are drawn in [-1,1) and rounded to the 16-bit dtype, so the f32 kernel sees exactly
 * the values the 16-bit kernel reads; the only differences are the 16-bit kernel's single
 * rounding of the output (2^-9 relative for bf16, 2^-12 for f16) and the summation order.
 * Tolerance: |a - b| <= 1e-2 * (1 + sqrt(K)/4) + 1e-2 |b| for bf16 (K up to 256), a tenth of
 * that for f16. Each case is checked for bf16 (oneDNN native and ref converted) and f16 (both
 * converted); a self-check makes sure the comparison fails on a corrupted output. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/lowp.h"
#include "kernels/matmul.h"
#include "kernels/dnnl_ctx.h"
#include "test_util.h"

static uint64_t seed = 7;

static void *to16(float *x, size_t n, ts_dtype dt) {
  uint16_t *h = malloc(n * 2);
  ts__lp_from_f32(x, h, dt, (int64_t)n);
  ts__lp_to_f32(h, dt, x, (int64_t)n); /* x now holds the representable values */
  return h;
}

static double tol(ts_dtype dt, int64_t K) {
  double t = 1e-2 * (1 + sqrt((double)K) / 4);
  return dt == TS_BF16 ? t : t / 10;
}

static void check_mm(ts_dtype dt, int64_t batch, int64_t M, int64_t N, int64_t K, int ta, int tb,
                     int ab, int bb) {
  ts__mm_desc d = {batch, M, N, K, ta, tb, ab, bb};
  size_t na = (size_t)((ab ? batch : 1) * M * K), nb = (size_t)((bb ? batch : 1) * K * N);
  size_t nc = (size_t)(batch * M * N);
  float *a = malloc(na * 4), *b = malloc(nb * 4), *c32 = malloc(nc * 4), *cf = malloc(nc * 4);
  uint16_t *c16 = malloc(nc * 2);
  ts_test_fill(a, na, seed++, -1, 1);
  ts_test_fill(b, nb, seed++, -1, 1);
  void *a16 = to16(a, na, dt), *b16 = to16(b, nb, dt);
  CHECK_OK(ts__matmul_dnnl(&d, a, b, c32));
  char what[160];
  for (int be = 0; be < 2; be++) {
    CHECK_OK(be ? ts__matmul_lp_dnnl(&d, dt, a16, b16, c16) : ts__matmul_lp_ref(&d, dt, a16, b16, c16));
    ts__lp_to_f32(c16, dt, cf, (int64_t)nc);
    snprintf(what, sizeof what, "matmul %s %s B%lld M%lld N%lld K%lld ta%d tb%d ab%d bb%d", ts_dtype_name(dt),
             be ? "dnnl" : "ref", (long long)batch, (long long)M, (long long)N, (long long)K, ta, tb, ab, bb);
    CHECK_CLOSE(cf, c32, nc, tol(dt, K), dt == TS_BF16 ? 1e-2 : 1e-3, what);
  }
  /* the comparison can fail: one corrupted element is caught */
  cf[nc / 2] += 1.f;
  CHECK(ts_test_close(cf, c32, nc, tol(dt, K), 1e-2, NULL) > 1.0);
  free(a), free(b), free(c32), free(cf), free(c16), free(a16), free(b16);
}

static void check_dense(ts_dtype dt, int64_t M, int64_t N, int64_t K, int with_bias) {
  float *x = malloc((size_t)(M * K) * 4), *w = malloc((size_t)(N * K) * 4), *b = malloc((size_t)N * 4);
  float *y32 = malloc((size_t)(M * N) * 4), *yf = malloc((size_t)(M * N) * 4);
  uint16_t *y16 = malloc((size_t)(M * N) * 2);
  ts_test_fill(x, (size_t)(M * K), seed++, -1, 1);
  ts_test_fill(w, (size_t)(N * K), seed++, -1, 1);
  ts_test_fill(b, (size_t)N, seed++, -1, 1);
  void *x16 = to16(x, (size_t)(M * K), dt), *w16 = to16(w, (size_t)(N * K), dt), *b16 = to16(b, (size_t)N, dt);
  CHECK_OK(ts__dense_dnnl(M, N, K, x, w, with_bias ? b : NULL, y32));
  for (int be = 0; be < 2; be++) {
    char what[160];
    CHECK_OK(be ? ts__dense_lp_dnnl(M, N, K, dt, x16, w16, with_bias ? b16 : NULL, y16)
                : ts__dense_lp_ref(M, N, K, dt, x16, w16, with_bias ? b16 : NULL, y16));
    ts__lp_to_f32(y16, dt, yf, M * N);
    snprintf(what, sizeof what, "dense %s %s M%lld N%lld K%lld bias%d", ts_dtype_name(dt), be ? "dnnl" : "ref",
             (long long)M, (long long)N, (long long)K, with_bias);
    CHECK_CLOSE(yf, y32, (size_t)(M * N), tol(dt, K), dt == TS_BF16 ? 1e-2 : 1e-3, what);
  }
  free(x), free(w), free(b), free(y32), free(yf), free(y16), free(x16), free(w16), free(b16);
}

int main(void) {
  const ts_dtype dts[2] = {TS_BF16, TS_F16};
  for (int i = 0; i < 2; i++) {
    const ts_dtype dt = dts[i];
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        check_mm(dt, 1, 17, 23, 29, ta, tb, 1, 1);
        check_mm(dt, 3, 8, 12, 64, ta, tb, 1, 1);
        check_mm(dt, 3, 8, 12, 64, ta, tb, 1, 0);
        check_mm(dt, 3, 8, 12, 64, ta, tb, 0, 1);
        check_mm(dt, 2, 5, 7, 9, ta, tb, 0, 0);
      }
    check_mm(dt, 1, 128, 192, 256, 0, 1, 1, 1); /* GEMM-sized, K = 256 */
    check_dense(dt, 33, 40, 48, 1);
    check_dense(dt, 64, 96, 256, 1);
    check_dense(dt, 7, 5, 3, 0);
  }
  /* the 16-bit rounding is exact: bf16 inputs whose products sum exactly give the exact result */
  {
    ts__mm_desc d = {1, 2, 2, 2, 0, 0, 1, 1};
    uint16_t a[4], b[4], c[4];
    const float av[4] = {1, 2, 3, 4}, bv[4] = {0.5f, 0.25f, -1, 2};
    for (int k = 0; k < 4; k++) a[k] = ts_f32_to_bf16(av[k]), b[k] = ts_f32_to_bf16(bv[k]);
    CHECK_OK(ts__matmul_lp_dnnl(&d, TS_BF16, a, b, c));
    CHECK(ts_bf16_to_f32(c[0]) == -1.5f && ts_bf16_to_f32(c[1]) == 4.25f);
    CHECK(ts_bf16_to_f32(c[2]) == -2.5f && ts_bf16_to_f32(c[3]) == 8.75f);
  }
  ts__dnnl_cache_clear();
  return ts_test_finish("test_matmul_bf16");
}
