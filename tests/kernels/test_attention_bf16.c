/* 16-bit causal attention (attention.c ts__attention_*_lp) against the f32 kernels on the same
 * (16-bit representable) inputs, for the three layouts (BHTD, BTHD, packed QKV), T ragged
 * against the 64-row block, T = 1, one head (the backward's sequential path) and more heads
 * than threads; bf16 and f16.
 *  - REF backend (both dtypes): each head widened, the reference loops, outputs rounded once,
 *    so the tolerance is zero: o, dq, dk, dv equal the f32 reference's outputs rounded to the
 *    dtype bit for bit, and lse equals it exactly.
 *  - FAST backend, f16: heads widened around the f32 fused blocks (dnnl_sgemm): against the f32
 *    fused kernel on the same inputs within one f16 rounding, |a-b| <= 1e-6 + 2^-10 |b|
 *    (lse 1e-6 relative).
 *  - FAST backend, bf16: native bf16 GEMMs; against the double-accumulating f32 reference on
 *    the same inputs (the backward of both reads the bf16 o and the lse of the bf16 forward):
 *      o:  |a-b| <= 1e-2 + 2^-7 |b|     lse: 1e-5 + 1e-5 |b|
 *      dq, dk, dv: |a-b| <= 1e-2 (1 + sqrt(T)/8) + 2^-7 |b|
 *    (q, k in [-2,2), v, do in [-1,1), scale 1/sqrt(D); the rows of P and dS are rounded to bf16
 *    before the P.v, P^T.do, dS.k and dS^T.q products, 2^-9 relative per term; measured worst
 *    ratios are printed and are about a quarter of these.)
 * Each comparison that has a tolerance is also shown to fail on one corrupted element. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/lowp.h"
#include "test_util.h"

typedef struct {
  int64_t B, H, T, D;
  int layout;
} acase;

static double worst[3]; /* measured worst ratio of the bf16 fast comparisons: o, lse, grads */

/* n f32 values in [lo,hi) rounded to dt: f32 copy in *f, 16-bit copy returned */
static uint16_t *mk(size_t n, ts_dtype dt, uint64_t seed, float lo, float hi, float **f) {
  *f = malloc(n * 4);
  uint16_t *h = malloc(n * 2);
  ts_test_fill(*f, n, seed, lo, hi);
  ts__lp_narrow(*f, h, dt, (int64_t)n);
  ts__lp_widen(h, dt, *f, (int64_t)n);
  return h;
}

/* out (dt) == ref rounded to dt, bit for bit */
static void same(const uint16_t *out, ts_dtype dt, const float *ref, size_t n, const char *what) {
  uint16_t *want = malloc(n * 2);
  ts__lp_narrow(ref, want, dt, (int64_t)n);
  size_t bad = 0;
  while (bad < n && out[bad] == want[bad]) bad++;
  CHECK_MSG(bad == n, "%s: element %zu is 0x%04x, the rounded f32 result 0x%04x", what, bad, bad < n ? out[bad] : 0,
            bad < n ? want[bad] : 0);
  free(want);
}

/* a (16-bit) close to b (f32) within (atol, rtol); the comparison fails on a corrupted element */
static double close16(const uint16_t *a, ts_dtype dt, const float *b, size_t n, double atol, double rtol,
                      const char *what) {
  float *af = malloc(n * 4);
  ts__lp_widen(a, dt, af, (int64_t)n);
  CHECK_CLOSE(af, b, n, atol, rtol, what);
  double r = ts_test_close(af, b, n, atol, rtol, NULL);
  af[n / 2] = b[n / 2] + 1.0f + 4.0f * (float)(atol + rtol * fabs(b[n / 2]));
  CHECK_MSG(ts_test_close(af, b, n, atol, rtol, NULL) > 1.0, "%s: a corrupted element is not caught", what);
  free(af);
  return r;
}

static void run_case(ts_dtype dt, acase c) {
  const int64_t B = c.B, H = c.H, T = c.T, D = c.D, C = H * D;
  const int packed = c.layout == TS_ATTN_QKV;
  const size_t n = (size_t)(B * H * T * D), nl = (size_t)(B * H * T), nin = packed ? 3 * n : n;
  const float scale = 1.0f / sqrtf((float)D);
  static uint64_t seed = 100;
  /* inputs: q, k, v (three buffers, or one packed buffer), do */
  float *xf[3], *dof;
  uint16_t *xh[3], *doh = mk(n, dt, seed++, -1, 1, &dof);
  for (int j = 0; j < (packed ? 1 : 3); j++) xh[j] = mk(nin, dt, seed++, j < 2 ? -2 : -1, j < 2 ? 2 : 1, &xf[j]);
  const float *qf = xf[0], *kf = packed ? xf[0] + C : xf[1], *vf = packed ? xf[0] + 2 * C : xf[2];
  const uint16_t *qh = xh[0], *kh = packed ? xh[0] + C : xh[1], *vh = packed ? xh[0] + 2 * C : xh[2];
  /* gradients: three buffers of n, or one packed buffer */
  float *g32 = malloc(3 * n * 4);
  uint16_t *g16 = malloc(3 * n * 2);
  float *gq = g32, *gk = packed ? g32 + C : g32 + n, *gv = packed ? g32 + 2 * C : g32 + 2 * n;
  uint16_t *hq = g16, *hk = packed ? g16 + C : g16 + n, *hv = packed ? g16 + 2 * C : g16 + 2 * n;
  float *o32 = malloc(n * 4), *l32 = malloc(nl * 4), *ow = malloc(n * 4), *l16 = malloc(nl * 4);
  uint16_t *o16 = malloc(n * 2);
  char what[160];
  const char *lname[3] = {"BHTD", "BTHD", "QKV"};
  for (int fast = 0; fast < 2; fast++) {
    snprintf(what, sizeof what, "attention %s %s (%lld,%lld,%lld,%lld) %s", ts_dtype_name(dt), fast ? "fast" : "ref",
             (long long)B, (long long)H, (long long)T, (long long)D, lname[c.layout]);
    memset(o16, 0xff, n * 2);
    memset(g16, 0xff, 3 * n * 2); /* NaN garbage: the kernels must overwrite */
    CHECK_OK(ts__attention_fwd_lp(dt, qh, kh, vh, o16, l16, B, H, T, D, scale, c.layout, fast));
    ts__lp_widen(o16, dt, ow, (int64_t)n); /* the backward reads the 16-bit o */
    CHECK_OK(ts__attention_bwd_lp(dt, doh, qh, kh, vh, o16, l16, hq, hk, hv, B, H, T, D, scale, c.layout, fast));
    if (!fast || dt == TS_BF16) { /* the reference: double accumulation */
      CHECK_OK(ts__attention_fwd_ref(qf, kf, vf, o32, l32, B, H, T, D, scale, c.layout));
      CHECK_OK(ts__attention_bwd_ref(dof, qf, kf, vf, ow, l16, gq, gk, gv, B, H, T, D, scale, c.layout));
    } else { /* f16 fast: the f32 fused kernel */
      CHECK_OK(ts__attention_fwd_dnnl(qf, kf, vf, o32, l32, B, H, T, D, scale, c.layout));
      CHECK_OK(ts__attention_bwd_dnnl(dof, qf, kf, vf, ow, l16, gq, gk, gv, B, H, T, D, scale, c.layout));
    }
    const size_t ng = 3 * n;
    char w2[200];
    if (!fast) {
      snprintf(w2, sizeof w2, "%s: o", what);
      same(o16, dt, o32, n, w2);
      CHECK_MSG(!memcmp(l16, l32, nl * 4), "%s: lse differs from the f32 reference", what);
      snprintf(w2, sizeof w2, "%s: dq|dk|dv", what);
      same(g16, dt, g32, ng, w2);
    } else if (dt == TS_F16) {
      snprintf(w2, sizeof w2, "%s: o", what);
      close16(o16, dt, o32, n, 1e-6, 1.0 / 1024, w2);
      snprintf(w2, sizeof w2, "%s: lse", what);
      CHECK_CLOSE(l16, l32, nl, 1e-6, 1e-6, w2);
      snprintf(w2, sizeof w2, "%s: dq|dk|dv", what);
      close16(g16, dt, g32, ng, 1e-6, 1.0 / 1024, w2);
    } else {
      const double ga = 1e-2 * (1 + sqrt((double)T) / 8);
      snprintf(w2, sizeof w2, "%s: o", what);
      double r = close16(o16, dt, o32, n, 1e-2, 1.0 / 128, w2);
      worst[0] = r > worst[0] ? r : worst[0];
      snprintf(w2, sizeof w2, "%s: lse", what);
      CHECK_CLOSE(l16, l32, nl, 1e-5, 1e-5, w2);
      r = ts_test_close(l16, l32, nl, 1e-5, 1e-5, NULL);
      worst[1] = r > worst[1] ? r : worst[1];
      snprintf(w2, sizeof w2, "%s: dq|dk|dv", what);
      r = close16(g16, dt, g32, ng, ga, 1.0 / 128, w2);
      worst[2] = r > worst[2] ? r : worst[2];
    }
  }
  for (int j = 0; j < (packed ? 1 : 3); j++) free(xf[j]), free(xh[j]);
  free(dof), free(doh), free(g32), free(g16), free(o32), free(l32), free(ow), free(l16), free(o16);
}

int main(void) {
  static const acase cases[] = {
      {2, 3, 100, 16, TS_ATTN_BHTD}, /* two blocks, ragged */
      {1, 2, 130, 32, TS_ATTN_BTHD}, /* three blocks, strided rows */
      {2, 2, 70, 16, TS_ATTN_QKV},   /* packed q|k|v */
      {3, 1, 1, 8, TS_ATTN_BHTD},    /* T = 1 */
      {1, 1, 200, 64, TS_ATTN_BHTD}, /* one head: the backward runs heads in sequence */
      {4, 4, 64, 32, TS_ATTN_QKV},   /* exactly one block, more heads than threads */
      {2, 2, 128, 32, TS_ATTN_BTHD},
  };
  const ts_dtype dts[2] = {TS_BF16, TS_F16};
  for (int i = 0; i < 2; i++)
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) run_case(dts[i], cases[k]);
  printf("bf16 fast vs f32 reference, worst ratio to the tolerance: o %.3f, lse %.3f, dq|dk|dv %.3f\n", worst[0],
         worst[1], worst[2]);
  /* f32 through the 16-bit entry points is the f32 kernel */
  float z[4] = {0};
  CHECK(ts__attention_fwd_lp(TS_F32, z, z, z, z, z, 1, 1, 1, 4, 1.0f, 7, 1) == TS_EINVAL);
  CHECK(ts__attention_fwd_lp(TS_I32, z, z, z, z, z, 1, 1, 1, 4, 1.0f, 0, 1) == TS_EDTYPE);
  return ts_test_finish("test_attention_bf16");
}
