/* 16-bit softmax / log-softmax kernels (softmax.c ts__softmax_*_lp) against the f32 reference on
 * the same (16-bit representable) inputs. Along the last axis the native row loops run the f32
 * row kernel on widened rows, and along a middle axis the f32 kernel runs on f32 copies, so the
 * tolerance is zero: outputs equal the f32 outputs rounded once, bit for bit. The bf16 oneDNN
 * path (fast backend, last axis) is compared with the f32 oneDNN kernel on the same inputs within
 * |a-b| <= 1e-6 + 2^-7 |b| forward (one bf16 rounding plus oneDNN's own exp) and 1e-4 + 2^-7 |b|
 * backward (dx = y (dy - sum(dy y)) cancels near 0).
 * Cross-entropy on 16-bit logits (ts__softmax_ce_*_lp, whole and class-sharded): each row is
 * widened and runs the f32 row code, so the tolerance is zero again: loss, lse, row maxima and
 * statistics equal the f32 kernels' on the same logits exactly, dlogits equal theirs rounded
 * once, bit for bit (with and without the saved lse, with label smoothing, ignored rows, i32 and
 * i64 labels, rows longer than a sum chunk); a corrupted dlogits element is caught. */
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

/* number of elements of out (dt) differing from ref rounded to dt */
static int64_t ndiff(const uint16_t *out, ts_dtype dt, const float *ref, int64_t n) {
  uint16_t *want = malloc((size_t)n * 2);
  ts__lp_narrow(ref, want, dt, n);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) bad += out[i] != want[i];
  free(want);
  return bad;
}

static void check_ce(ts_dtype dt, int64_t N, int64_t C, float smoothing, int i64) {
  const int64_t n = N * C;
  float *x = malloc((size_t)n * 4), *d = malloc((size_t)n * 4), lse[2][4096], loss[2];
  uint16_t *xh = malloc((size_t)n * 2), *dh = malloc((size_t)n * 2);
  ts_test_fill(x, (size_t)n, seed++, -6, 6);
  ts__lp_narrow(x, xh, dt, n), ts__lp_widen(xh, dt, x, n);
  void *lab = malloc((size_t)N * 8);
  for (int64_t i = 0; i < N; i++) {
    const int64_t l = i % 7 == 3 ? TS_CE_IGNORE_INDEX : (i * 31 + 5) % C;
    if (i64) ((int64_t *)lab)[i] = l;
    else ((int32_t *)lab)[i] = (int32_t)l;
  }
  char what[128];
  snprintf(what, sizeof what, "softmax_ce %s N%lld C%lld s%.2f %s", ts_dtype_name(dt), (long long)N, (long long)C,
           smoothing, i64 ? "i64" : "i32");
  CHECK_OK(ts__softmax_ce_fwd_ref(x, lab, i64, N, C, smoothing, TS_CE_IGNORE_INDEX, &loss[0], lse[0]));
  CHECK_OK(ts__softmax_ce_fwd_lp(dt, xh, lab, i64, N, C, smoothing, TS_CE_IGNORE_INDEX, &loss[1], lse[1]));
  CHECK_MSG(loss[0] == loss[1] && !memcmp(lse[0], lse[1], (size_t)N * 4), "%s: loss %.9g vs %.9g, or lse differ", what,
            loss[1], loss[0]);
  for (int with_lse = 0; with_lse < 2; with_lse++) {
    CHECK_OK(ts__softmax_ce_bwd_ref(0.75f, x, lab, i64, with_lse ? lse[0] : NULL, N, C, smoothing, TS_CE_IGNORE_INDEX, d));
    memset(dh, 0xff, (size_t)n * 2);
    CHECK_OK(ts__softmax_ce_bwd_lp(dt, 0.75f, xh, lab, i64, with_lse ? lse[1] : NULL, N, C, smoothing,
                                   TS_CE_IGNORE_INDEX, dh));
    CHECK_MSG(ndiff(dh, dt, d, n) == 0, "%s: dlogits (%s lse) differ from the rounded f32 result", what,
              with_lse ? "saved" : "recomputed");
  }
  dh[n / 2] ^= 0x0100; /* the comparison can fail */
  CHECK_MSG(ndiff(dh, dt, d, n) == 1, "%s: a corrupted element is not caught", what);
  /* class-sharded steps on the block of columns [C/3, C/3 + Cl) */
  const int64_t off = C / 3, Cl = C - off > 1 ? (C - off) / 2 + 1 : 1;
  float *xb = malloc((size_t)(N * Cl) * 4), *db = malloc((size_t)(N * Cl) * 4), m[2][4096], st[2][3 * 4096];
  uint16_t *xbh = malloc((size_t)(N * Cl) * 2), *dbh = malloc((size_t)(N * Cl) * 2);
  for (int64_t i = 0; i < N; i++)
    for (int64_t j = 0; j < Cl; j++) xb[i * Cl + j] = x[i * C + off + j], xbh[i * Cl + j] = xh[i * C + off + j];
  CHECK_OK(ts__softmax_ce_shard_max_ref(xb, lab, i64, N, Cl, C, TS_CE_IGNORE_INDEX, m[0]));
  CHECK_OK(ts__softmax_ce_shard_max_lp(dt, xbh, lab, i64, N, Cl, C, TS_CE_IGNORE_INDEX, m[1]));
  CHECK_OK(ts__softmax_ce_shard_stats_ref(xb, lab, i64, N, Cl, off, TS_CE_IGNORE_INDEX, m[0], st[0]));
  CHECK_OK(ts__softmax_ce_shard_stats_lp(dt, xbh, lab, i64, N, Cl, off, TS_CE_IGNORE_INDEX, m[0], st[1]));
  CHECK_MSG(!memcmp(m[0], m[1], (size_t)N * 4) && !memcmp(st[0], st[1], (size_t)N * 12), "%s: sharded max/stats", what);
  CHECK_OK(ts__softmax_ce_shard_bwd_ref(0.75f, xb, lab, i64, lse[0], N, Cl, C, off, smoothing, TS_CE_IGNORE_INDEX, db));
  CHECK_OK(ts__softmax_ce_shard_bwd_lp(dt, 0.75f, xbh, lab, i64, lse[0], N, Cl, C, off, smoothing, TS_CE_IGNORE_INDEX,
                                       dbh));
  CHECK_MSG(ndiff(dbh, dt, db, N * Cl) == 0, "%s: sharded dlogits", what);
  free(x), free(d), free(xh), free(dh), free(lab), free(xb), free(db), free(xbh), free(dbh);
}

int main(void) {
  const ts_dtype dts[2] = {TS_BF16, TS_F16};
  for (int i = 0; i < 2; i++)
    for (int log = 0; log < 2; log++) {
      check(dts[i], 4, 10, 1, log);
      check(dts[i], 96, 1000, 1, log); /* parallel rows */
      check(dts[i], 3, 9, 5, log);     /* middle axis */
    }
  for (int i = 0; i < 2; i++) {
    check_ce(dts[i], 7, 10, 0.0f, 0);
    check_ce(dts[i], 4096, 256, 0.0f, 1); /* the GPT example's logits: parallel rows */
    check_ce(dts[i], 40, 256, 0.1f, 0);   /* label smoothing */
    check_ce(dts[i], 5, 5000, 0.1f, 1);   /* rows longer than a sum chunk */
    check_ce(dts[i], 64, 8192, 0.0f, 1);  /* bench_step GPT's vocabulary: 16 backward chunks of 512 */
  }
  uint16_t z[4] = {0};
  int32_t lz[1] = {0};
  float fl;
  CHECK(ts__softmax_ce_fwd_lp(TS_I32, z, lz, 0, 1, 4, 0.0f, TS_CE_IGNORE_INDEX, &fl, NULL) == TS_EDTYPE);
  lz[0] = 9; /* bad label: a status naming the row */
  CHECK(ts__softmax_ce_bwd_lp(TS_BF16, 1.0f, z, lz, 0, NULL, 1, 4, 0.0f, TS_CE_IGNORE_INDEX, z) == TS_ERANGE);
  return ts_test_finish("test_softmax_bf16");
}
