/* Matmul + bias + gelu in one oneDNN primitive (matmul_act.c, ts__matmul_act_dnnl) against the
 * reference kernels on the same inputs: gelu_ref(matmul_ref(a, b) + bias) (ts__matmul_ref and
 * ts__eltwise_fwd_ref, plain C), for gelu tanh and erf and every batch path of the kernel:
 * a single product with a bias (dense: b (N,K) transposed), a batch of one shared product
 * (computed once and copied), a batched a times a shared b (folded into M) and both batched with
 * both transposed (the primitive's own batch). f32: within 2e-6 (1 + |y|) (f32 sums of K = 80
 * terms ~1 in another order, oneDNN's gelu against libm's); the tanh result is off the erf
 * reference by more than that somewhere (the check can tell the two apart). bf16 operands (the
 * f32 reference sees the same rounded values): an f32 result within the f32 tolerance, a bf16
 * result within one bf16 rounding (|y|/256) of it. Refused with TS_EINVAL and a message: f16
 * operands, a bf16 product into f16, an activation that is not a gelu, a NULL buffer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/eltwise.h"
#include "kernels/lowp.h"
#include "kernels/matmul.h"
#include "test_util.h"

#define KD 80

static uint64_t seed = 11;

/* y = gelu(op(a) op(b) + bias) by the reference kernels */
static void reference(const ts__mm_desc *d, const float *a, const float *b, const float *bias, int act, float *y) {
  const int64_t nc = d->batch * d->M * d->N;
  CHECK_OK(ts__matmul_ref(d, a, b, y));
  if (bias)
    for (int64_t i = 0; i < nc; i++) y[i] += bias[i % d->N];
  CHECK_OK(ts__eltwise_fwd_ref(act, 0, 0, y, y, nc));
}

static void check_case(const char *what, ts__mm_desc d, int with_bias) {
  const size_t na = (size_t)((d.a_batched ? d.batch : 1) * d.M * d.K), nb = (size_t)((d.b_batched ? d.batch : 1) * d.K * d.N);
  const size_t nc = (size_t)(d.batch * d.M * d.N);
  float *a = malloc(na * 4), *b = malloc(nb * 4), *bias = malloc((size_t)d.N * 4), *ref = malloc(nc * 4),
        *alt = malloc(nc * 4), *y = malloc(nc * 4), *y16f = malloc(nc * 4);
  uint16_t *a16 = malloc(na * 2), *b16 = malloc(nb * 2), *bias16 = malloc((size_t)d.N * 2), *y16 = malloc(nc * 2);
  CHECK(a && b && bias && ref && alt && y && y16f && a16 && b16 && bias16 && y16);
  ts_test_fill(a, na, seed++, -1, 1);
  ts_test_fill(b, nb, seed++, -0.3f, 0.3f);
  ts_test_fill(bias, (size_t)d.N, seed++, -0.5f, 0.5f);
  /* bf16-representable values: the f32 and bf16 runs read the same numbers */
  ts__lp_from_f32(a, a16, TS_BF16, (int64_t)na), ts__lp_to_f32(a16, TS_BF16, a, (int64_t)na);
  ts__lp_from_f32(b, b16, TS_BF16, (int64_t)nb), ts__lp_to_f32(b16, TS_BF16, b, (int64_t)nb);
  ts__lp_from_f32(bias, bias16, TS_BF16, d.N), ts__lp_to_f32(bias16, TS_BF16, bias, d.N);
  const float *bp = with_bias ? bias : NULL;
  for (int act = TS_ELT_GELU_TANH; act <= TS_ELT_GELU_ERF; act++) {
    reference(&d, a, b, bp, act, ref);
    reference(&d, a, b, bp, act == TS_ELT_GELU_TANH ? TS_ELT_GELU_ERF : TS_ELT_GELU_TANH, alt);
    const char *an = act == TS_ELT_GELU_TANH ? "gelu_tanh" : "gelu_erf";
    /* f32 */
    CHECK_OK(ts__matmul_act_dnnl(&d, TS_F32, TS_F32, a, b, bp, y, act));
    double worst = 0, apart = 0;
    for (size_t i = 0; i < nc; i++) {
      worst = fmax(worst, fabs((double)y[i] - ref[i]) / (1 + fabs(ref[i])));
      apart = fmax(apart, fabs((double)y[i] - alt[i]) / (1 + fabs(alt[i])));
    }
    printf("%s %s f32: max error %.3g (relative to 1 + |y|), %.3g from the other gelu\n", what, an, worst, apart);
    CHECK_MSG(worst <= 2e-6, "%s %s f32: %.3g off the reference", what, an, worst);
    CHECK_MSG(apart > 2e-6, "%s %s f32: within %.3g of the other gelu too: the check cannot tell them apart", what,
              an, apart);
    /* bf16 operands, f32 result */
    CHECK_OK(ts__matmul_act_dnnl(&d, TS_BF16, TS_F32, a16, b16, with_bias ? bias16 : NULL, y, act));
    worst = 0;
    for (size_t i = 0; i < nc; i++) worst = fmax(worst, fabs((double)y[i] - ref[i]) / (1 + fabs(ref[i])));
    CHECK_MSG(worst <= 2e-6, "%s %s bf16 -> f32: %.3g off the reference", what, an, worst);
    /* bf16 operands, bf16 result: one rounding of the f32 value */
    CHECK_OK(ts__matmul_act_dnnl(&d, TS_BF16, TS_BF16, a16, b16, with_bias ? bias16 : NULL, y16, act));
    ts__lp_to_f32(y16, TS_BF16, y16f, (int64_t)nc);
    int bad = -1;
    for (size_t i = 0; i < nc && bad < 0; i++)
      if (fabs((double)y16f[i] - ref[i]) > fabs(ref[i]) / 256 + 2e-6 * (1 + fabs(ref[i]))) bad = (int)i;
    CHECK_MSG(bad < 0, "%s %s bf16: [%d] %.9g, reference %.9g", what, an, bad, bad < 0 ? 0.0 : (double)y16f[bad],
              bad < 0 ? 0.0 : (double)ref[bad]);
  }
  free(a), free(b), free(bias), free(ref), free(alt), free(y), free(y16f);
  free(a16), free(b16), free(bias16), free(y16);
}

int main(void) {
  check_case("dense (M 64, N 96) + bias", (ts__mm_desc){1, 64, 96, KD, 0, 1, 0, 0}, 1);
  check_case("batch 3 of one shared product", (ts__mm_desc){3, 16, 48, KD, 0, 0, 0, 0}, 1);
  check_case("batched a x shared b (folded)", (ts__mm_desc){4, 16, 40, KD, 0, 0, 1, 0}, 0);
  check_case("both batched, a^T b^T", (ts__mm_desc){2, 24, 32, KD, 1, 1, 1, 1}, 1);

  /* refusals */
  float x[4 * KD] = {0}, w[4 * KD] = {0}, out[16];
  const ts__mm_desc d = {1, 4, 4, KD, 0, 1, 0, 0};
  EXPECT_ERR(ts__matmul_act_dnnl(&d, TS_F16, TS_F16, x, w, NULL, out, TS_ELT_GELU_TANH), TS_EINVAL, "matmul+gelu",
             "f16");
  EXPECT_ERR(ts__matmul_act_dnnl(&d, TS_BF16, TS_F16, x, w, NULL, out, TS_ELT_GELU_TANH), TS_EINVAL, "bf16", "f16");
  EXPECT_ERR(ts__matmul_act_dnnl(&d, TS_F32, TS_F32, x, w, NULL, out, TS_ELT_RELU), TS_EINVAL, "not a gelu");
  EXPECT_ERR(ts__matmul_act_dnnl(&d, TS_F32, TS_F32, NULL, w, NULL, out, TS_ELT_GELU_ERF), TS_EINVAL, "NULL");
  const ts__mm_desc bad = {1, 0, 4, KD, 0, 1, 0, 0};
  EXPECT_ERR(ts__matmul_act_dnnl(&bad, TS_F32, TS_F32, x, w, NULL, out, TS_ELT_GELU_ERF), TS_EINVAL, "M=0");
  return ts_test_finish("matmul_act");
}
