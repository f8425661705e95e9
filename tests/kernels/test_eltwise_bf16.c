/* 16-bit element-wise kernels: eltwise fwd/bwd (eltwise.c), binary and scale (binary.c), dropout
 * (dropout.c) on bf16 and f16, over sizes that span one chunk, many chunks, and the parallel
 * threshold (ts__lp_stream). Their streamed reference paths compute exactly the f32 kernel's
 * arithmetic on the widened inputs, so the tolerance is zero: the 16-bit output must equal the
 * f32 kernel's output rounded once to the dtype, bit for bit. The bf16 oneDNN eltwise primitives
 * (fast path) compute in f32 with oneDNN's own approximations, so they are compared to the f32
 * oneDNN output within one bf16 rounding: |a - b| <= 1e-6 + 2^-8 |b|; where the fast path is the
 * f32 primitive on widened copies (f16; bf16 without AVX-512), bit for bit its output rounded. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/binary.h"
#include "kernels/dnnl_ctx.h"
#include "kernels/dropout.h"
#include "kernels/eltwise.h"
#include "kernels/lowp.h"
#include "test_util.h"

static uint64_t seed = 21;

static void fill16(float *x, uint16_t *h, int64_t n, ts_dtype dt, float lo, float hi) {
  ts_test_fill(x, (size_t)n, seed++, lo, hi);
  ts__lp_from_f32(x, h, dt, n);
  ts__lp_to_f32(h, dt, x, n);
}

/* h (16-bit) equals f32 ref rounded to dt, bit for bit (NaN matches NaN) */
static void exact(const uint16_t *h, const float *ref, int64_t n, ts_dtype dt, const char *what) {
  int64_t bad = -1;
  for (int64_t i = 0; i < n && bad < 0; i++) {
    const uint16_t want = dt == TS_BF16 ? ts_f32_to_bf16(ref[i]) : ts_f32_to_f16(ref[i]);
    const float v = dt == TS_BF16 ? ts_bf16_to_f32(h[i]) : ts_f16_to_f32(h[i]);
    if (ref[i] != ref[i] ? v == v : h[i] != want) bad = i;
  }
  CHECK_MSG(bad < 0, "%s: element %lld: 0x%04x vs rounded f32 %.8g", what, (long long)bad,
            bad >= 0 ? h[bad] : 0, bad >= 0 ? (double)ref[bad] : 0.0);
}

/* dnnl = 1 on the converted route (f16, or bf16 without oneDNN's bf16; from one chunk on): the f32
 * primitive on the widened inputs, so the output is its f32 output rounded once, bit for bit;
 * otherwise oneDNN's bf16 primitive, or the reference loops (small n), within a bf16 rounding */
static int converted(ts_dtype dt, int64_t n) { return n >= TS__LP_CHUNK && (dt == TS_F16 || !ts__dnnl_bf16()); }

static void case_n(ts_dtype dt, int64_t n) {
  float *x = malloc((size_t)n * 4), *x2 = malloc((size_t)n * 4), *dy = malloc((size_t)n * 4),
        *y = malloc((size_t)n * 4), *yf = malloc((size_t)n * 4);
  uint16_t *xh = malloc((size_t)n * 2), *x2h = malloc((size_t)n * 2), *dyh = malloc((size_t)n * 2),
           *yh = malloc((size_t)n * 2), *srch = malloc((size_t)n * 2);
  char what[128];
  for (int alg = 0; alg < TS_ELT_COUNT; alg++) {
    const int pos = alg == TS_ELT_LOG || alg == TS_ELT_SQRT;
    fill16(x, xh, n, dt, pos ? 0.1f : -3.f, 3.f);
    fill16(dy, dyh, n, dt, -1.f, 1.f);
    /* reference stream: exact */
    CHECK_OK(ts__eltwise_fwd_ref(alg, 0.f, 0.f, x, y, n));
    CHECK_OK(ts__eltwise_fwd_lp(alg, 0.f, 0.f, dt, 0, xh, yh, n));
    snprintf(what, sizeof what, "eltwise %d fwd %s n=%lld", alg, ts_dtype_name(dt), (long long)n);
    exact(yh, y, n, dt, what);
    for (int use_dst = 0; use_dst <= ts__eltwise_bwd_uses_dst(alg); use_dst++) {
      const uint16_t *src = use_dst ? yh : xh;
      float *srcf = use_dst ? yf : x;
      if (use_dst) ts__lp_to_f32(yh, dt, yf, n);
      CHECK_OK(ts__eltwise_bwd_ref(alg, 0.f, 0.f, use_dst, dy, srcf, y, n));
      CHECK_OK(ts__eltwise_bwd_lp(alg, 0.f, 0.f, use_dst, dt, 0, dyh, src, srch, n));
      snprintf(what, sizeof what, "eltwise %d bwd use_dst %d %s n=%lld", alg, use_dst, ts_dtype_name(dt), (long long)n);
      exact(srch, y, n, dt, what);
      if (alg != TS_ELT_NEG && alg != TS_ELT_LOG) { /* oneDNN */
        CHECK_OK(ts__eltwise_bwd_dnnl(alg, 0.f, 0.f, use_dst, dy, srcf, y, n));
        CHECK_OK(ts__eltwise_bwd_lp(alg, 0.f, 0.f, use_dst, dt, 1, dyh, src, srch, n));
        snprintf(what, sizeof what, "eltwise %d bwd use_dst %d %s oneDNN n=%lld", alg, use_dst, ts_dtype_name(dt),
                 (long long)n);
        if (converted(dt, n)) {
          exact(srch, y, n, dt, what);
        } else {
          ts__lp_to_f32(srch, dt, yf, n);
          CHECK_CLOSE(yf, y, (size_t)n, 1e-6, 1.0 / 256, what);
        }
      }
    }
    if (alg != TS_ELT_NEG && alg != TS_ELT_LOG) {
      CHECK_OK(ts__eltwise_fwd_dnnl(alg, 0.f, 0.f, x, y, n));
      CHECK_OK(ts__eltwise_fwd_lp(alg, 0.f, 0.f, dt, 1, xh, yh, n));
      snprintf(what, sizeof what, "eltwise %d fwd %s oneDNN n=%lld", alg, ts_dtype_name(dt), (long long)n);
      if (converted(dt, n)) {
        exact(yh, y, n, dt, what);
      } else {
        ts__lp_to_f32(yh, dt, yf, n);
        CHECK_CLOSE(yf, y, (size_t)n, 1e-6, 1.0 / 256, what);
      }
    }
  }
  /* binary (same shape) and scale */
  const ts_shape s = ts_shape2(1, n);
  for (int alg = 0; alg < 4; alg++) {
    fill16(x, xh, n, dt, -2.f, 2.f);
    fill16(x2, x2h, n, dt, alg == 3 ? 0.5f : -2.f, 2.f);
    CHECK_OK(ts__binary_ref(alg, x, &s, x2, &s, y, &s));
    CHECK_OK(ts__binary_lp(alg, dt, xh, &s, x2h, &s, yh, &s));
    snprintf(what, sizeof what, "binary %d %s n=%lld", alg, ts_dtype_name(dt), (long long)n);
    exact(yh, y, n, dt, what);
  }
  /* broadcasting operand: f32 copies, still exact */
  {
    const ts_shape bs = ts_shape2(1, 1);
    CHECK_OK(ts__binary_ref(2, x, &s, x2, &bs, y, &s));
    CHECK_OK(ts__binary_lp(2, dt, xh, &s, x2h, &bs, yh, &s));
    exact(yh, y, n, dt, "binary mul broadcast scalar");
  }
  CHECK_OK(ts__scale_ref(x, y, n, 1.5f, -0.25f));
  CHECK_OK(ts__scale_lp(dt, xh, yh, n, 1.5f, -0.25f));
  snprintf(what, sizeof what, "scale %s n=%lld", ts_dtype_name(dt), (long long)n);
  exact(yh, y, n, dt, what);
  /* dropout: the same mask, at an element offset */
  CHECK_OK(ts__dropout_ref(x, y, (size_t)n, 0.3f, 99, 5, 77));
  CHECK_OK(ts__dropout_lp(dt, xh, yh, (size_t)n, 0.3f, 99, 5, 77));
  snprintf(what, sizeof what, "dropout %s n=%lld", ts_dtype_name(dt), (long long)n);
  exact(yh, y, n, dt, what);
  /* the check can fail */
  yh[n / 2] ^= 1;
  const int before = ts_test_failures;
  exact(yh, y, n, dt, "corrupted (expected to fail)");
  CHECK(ts_test_failures == before + 1);
  if (ts_test_failures == before + 1) ts_test_failures--;
  free(x), free(x2), free(dy), free(y), free(yf), free(xh), free(x2h), free(dyh), free(yh), free(srch);
}

int main(void) {
  const ts_dtype dts[2] = {TS_BF16, TS_F16};
  const int64_t ns[5] = {1, 1000, 5000, 70001, (1 << 20) + 3001}; /* the last: 2 blocks of the converted route */
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 5; k++) case_n(dts[i], ns[k]);
  ts__dnnl_cache_clear();
  return ts_test_finish("test_eltwise_bf16");
}
