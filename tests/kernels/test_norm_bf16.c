/* 16-bit layer norm (norm_bf16.c) against the f32 reference kernel on the same (16-bit
 * representable) inputs. The native row loops do the f32 kernel's arithmetic on the widened
 * rows, so the tolerance is zero: y, dx (and dgamma/dbeta when gamma is 16-bit) equal the f32
 * outputs rounded once, mean/var/dgamma/dbeta (f32 gamma) equal them exactly. Sizes cover one
 * thread and the parallel path, short and long rows; bf16 and f16; gamma f32 or 16-bit.
 * The bf16 oneDNN path (fast backend) is compared with the f32 oneDNN kernel on the same inputs:
 * y and dgamma within 1e-2 + 2^-7 |b|, dx within 2e-2 + 2^-6 |b| (oneDNN computes dx from the
 * bf16 inputs in its own order; dx cancels), mean within 1e-5 relative. */
#include <stdlib.h>
#include <string.h>

#include "kernels/lowp.h"
#include "kernels/norm.h"
#include "test_util.h"

static uint64_t seed = 31;

static void *mk16(float *x, int64_t n, ts_dtype dt, float lo, float hi) {
  ts_test_fill(x, (size_t)n, seed++, lo, hi);
  void *h = malloc((size_t)n * ts_dtype_size(dt));
  ts__lp_narrow(x, h, dt, n);
  ts__lp_widen(h, dt, x, n);
  return h;
}

/* out (dtype dt) == ref rounded to dt, bit for bit */
static void same(const void *out, ts_dtype dt, const float *ref, int64_t n, const char *what) {
  void *want = malloc((size_t)n * ts_dtype_size(dt));
  ts__lp_narrow(ref, want, dt, n);
  CHECK_MSG(memcmp(out, want, (size_t)n * ts_dtype_size(dt)) == 0, "%s: differs from the rounded f32 result", what);
  free(want);
}

static void check(ts_dtype dt, ts_dtype gdt, int64_t R, int64_t D) {
  const int64_t n = R * D;
  float *x = malloc((size_t)n * 4), *dy = malloc((size_t)n * 4), *g = malloc((size_t)D * 4),
        *b = malloc((size_t)D * 4), *y = malloc((size_t)n * 4), *dx = malloc((size_t)n * 4),
        *m = malloc((size_t)R * 4), *v = malloc((size_t)R * 4), *m2 = malloc((size_t)R * 4),
        *v2 = malloc((size_t)R * 4), *dg = malloc((size_t)D * 4), *db = malloc((size_t)D * 4);
  void *xh = mk16(x, n, dt, -2, 3), *dyh = mk16(dy, n, dt, -1, 1), *gh = mk16(g, D, gdt, 0.5f, 1.5f),
       *bh = mk16(b, D, gdt, -0.5f, 0.5f);
  void *yh = malloc((size_t)n * 2), *dxh = malloc((size_t)n * 2), *dgh = malloc((size_t)D * 4), *dbh = malloc((size_t)D * 4);
  char what[128];
  snprintf(what, sizeof what, "layernorm %s gamma %s R%lld D%lld", ts_dtype_name(dt), ts_dtype_name(gdt), (long long)R,
           (long long)D);
  CHECK_OK(ts__layernorm_fwd_ref(x, g, b, y, m, v, R, D, 1e-5f));
  CHECK_OK(ts__layernorm_fwd_lp(dt, gdt, xh, gh, bh, yh, m2, v2, R, D, 1e-5f, 0));
  same(yh, dt, y, n, what);
  CHECK_MSG(!memcmp(m, m2, (size_t)R * 4) && !memcmp(v, v2, (size_t)R * 4), "%s: mean/var", what);
  CHECK_OK(ts__layernorm_bwd_ref(dy, x, g, m, v, dx, dg, db, R, D, 1e-5f));
  CHECK_OK(ts__layernorm_bwd_lp(dt, gdt, dyh, xh, gh, m, v, dxh, dgh, dbh, R, D, 1e-5f, 0));
  same(dxh, dt, dx, n, what);
  same(dgh, gdt, dg, D, what);
  same(dbh, gdt, db, D, what);
  if (dt == TS_BF16) { /* oneDNN bf16 vs oneDNN f32 on the same inputs */
    float *got = malloc((size_t)n * 4), *gd = malloc((size_t)D * 4);
    char w2[160];
    CHECK_OK(ts__layernorm_fwd_dnnl(x, g, b, y, m, v, R, D, 1e-5f));
    CHECK_OK(ts__layernorm_fwd_lp(dt, gdt, xh, gh, bh, yh, m2, v2, R, D, 1e-5f, 1));
    ts__lp_widen(yh, dt, got, n);
    snprintf(w2, sizeof w2, "%s: oneDNN bf16 y", what);
    CHECK_CLOSE(got, y, (size_t)n, 1e-2, 1.0 / 128, w2);
    snprintf(w2, sizeof w2, "%s: oneDNN bf16 mean", what);
    CHECK_CLOSE(m2, m, (size_t)R, 1e-5, 1e-5, w2);
    CHECK_OK(ts__layernorm_bwd_dnnl(dy, x, g, m, v, dx, dg, db, R, D, 1e-5f));
    CHECK_OK(ts__layernorm_bwd_lp(dt, gdt, dyh, xh, gh, m, v, dxh, dgh, dbh, R, D, 1e-5f, 1));
    ts__lp_widen(dxh, dt, got, n);
    snprintf(w2, sizeof w2, "%s: oneDNN bf16 dx", what);
    CHECK_CLOSE(got, dx, (size_t)n, 2e-2, 1.0 / 64, w2);
    ts__lp_widen(dgh, gdt, gd, D);
    snprintf(w2, sizeof w2, "%s: oneDNN bf16 dgamma", what);
    CHECK_CLOSE(gd, dg, (size_t)D, 1e-2, 1.0 / 128, w2);
    free(got), free(gd);
  }
  free(x), free(dy), free(g), free(b), free(y), free(dx), free(m), free(v), free(m2), free(v2), free(dg), free(db);
  free(xh), free(dyh), free(gh), free(bh), free(yh), free(dxh), free(dgh), free(dbh);
}

int main(void) {
  const ts_dtype dts[2] = {TS_BF16, TS_F16};
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 2; k++) {
      const ts_dtype gdt = k ? dts[i] : TS_F32;
      check(dts[i], gdt, 3, 7);
      check(dts[i], gdt, 64, 768);   /* GPT-2 rows: parallel */
      check(dts[i], gdt, 5, 5000);   /* rows longer than a sum chunk */
    }
  return ts_test_finish("test_norm_bf16");
}
