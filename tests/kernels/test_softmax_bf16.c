/* 16-bit softmax / log-softmax kernels (softmax.c ts__softmax_*_lp) against the f32 reference on
 * the same (16-bit representable) inputs. Along the last axis the native row loops run the f32
 * row kernel on widened rows, and along a middle axis the f32 kernel runs on f32 copies, so the
 * tolerance is zero: outputs equal the f32 outputs rounded once, bit for bit. The bf16 oneDNN
 * path (fast backend, last axis) is compared with the f32 oneDNN kernel on the same inputs within
 * |a-b| <= 1e-6 + 2^-7 |b| forward (one bf16 rounding plus oneDNN's own exp) and 1e-4 + 2^-7 |b|
 * backward (dx = y (dy - sum(dy y)) cancels near 0). */
#include <stdlib.h>
#include <string.h>

#include "kernels/lowp.h"
#include "kernels/softmax.h"
#include "test_util.h"

static uint64_t seed = 41;

static void check(ts_dtype dt, int64_t o, int64_t l, int64_t in, int log) {
  const int64_t n = o * l * in;
  float *x = malloc((size_t)n * 4), *dy = malloc((size_t)n * 4), *y = malloc((size_t)n * 4), *dx = malloc((size_t)n * 4);
  uint16_t *xh = malloc((size_t)n * 2), *dyh = malloc((size_t)n * 2), *yh = malloc((size_t)n * 2),
           *dxh = malloc((size_t)n * 2), *want = malloc((size_t)n * 2);
  ts_test_fill(x, (size_t)n, seed++, -4, 4);
  ts_test_fill(dy, (size_t)n, seed++, -1, 1);
  ts__lp_narrow(x, xh, dt, n), ts__lp_widen(xh, dt, x, n);
  ts__lp_narrow(dy, dyh, dt, n), ts__lp_widen(dyh, dt, dy, n);
  char what[128];
  snprintf(what, sizeof what, "%s %s (%lld,%lld,%lld)", log ? "log_softmax" : "softmax", ts_dtype_name(dt), (long long)o,
           (long long)l, (long long)in);
  CHECK_OK(ts__softmax_fwd_ref(x, y, o, l, in, log));
  CHECK_OK(ts__softmax_fwd_lp(dt, xh, yh, o, l, in, log, 0));
  ts__lp_narrow(y, want, dt, n);
  CHECK_MSG(!memcmp(yh, want, (size_t)n * 2), "%s: forward", what);
  ts__lp_widen(yh, dt, y, n); /* the backward reads the 16-bit y */
  CHECK_OK(ts__softmax_bwd_ref(dy, y, dx, o, l, in, log));
  CHECK_OK(ts__softmax_bwd_lp(dt, dyh, yh, dxh, o, l, in, log, 0));
  ts__lp_narrow(dx, want, dt, n);
  CHECK_MSG(!memcmp(dxh, want, (size_t)n * 2), "%s: backward", what);
  if (dt == TS_BF16 && in == 1) { /* oneDNN bf16: within one bf16 rounding of the f32 oneDNN result */
    float *got = malloc((size_t)n * 4);
    CHECK_OK(ts__softmax_fwd_dnnl(x, y, o, l, in, log));
    CHECK_OK(ts__softmax_fwd_lp(dt, xh, yh, o, l, in, log, 1));
    ts__lp_widen(yh, dt, got, n);
    char w2[160];
    snprintf(w2, sizeof w2, "%s: oneDNN bf16 forward", what);
    CHECK_CLOSE(got, y, (size_t)n, 1e-6, 1.0 / 128, w2);
    ts__lp_widen(yh, dt, y, n);
    CHECK_OK(ts__softmax_bwd_dnnl(dy, y, dx, o, l, in, log));
    CHECK_OK(ts__softmax_bwd_lp(dt, dyh, yh, dxh, o, l, in, log, 1));
    ts__lp_widen(dxh, dt, got, n);
    snprintf(w2, sizeof w2, "%s: oneDNN bf16 backward", what);
    CHECK_CLOSE(got, dx, (size_t)n, 1e-4, 1.0 / 128, w2);
    free(got);
  }
  free(x), free(dy), free(y), free(dx), free(xh), free(dyh), free(yh), free(dxh), free(want);
}

int main(void) {
  const ts_dtype dts[2] = {TS_BF16, TS_F16};
  for (int i = 0; i < 2; i++)
    for (int log = 0; log < 2; log++) {
      check(dts[i], 4, 10, 1, log);
      check(dts[i], 96, 1000, 1, log); /* parallel rows */
      check(dts[i], 3, 9, 5, log);     /* middle axis */
    }
  return ts_test_finish("test_softmax_bf16");
}
