/* The GPU kernels' math (src/device/cuda/ts_cuda.h), compiled here as host C with libm's exp2
 * and log2 standing in for PTX's approximations: erf against glibc's erff (relative 2e-7 over
 * [-7, 7] and down to 1e-30), tanh against tanhf (relative 5e-7, the small-argument series
 * included), sigmoid against its definition in double (1e-6: f32's exp), Philox-4x32-10
 * against src/base/rng.c's (dropout's mask on the GPU is the CPU's, bit for bit), and the bf16 rounding against the CPU kernels'
 * (src/kernels/lowp.c: round to nearest even, NaN kept a NaN) on every f32 pattern of a stride,
 * the f16 rounding and widening against src/tensor/dtype.c's bitwise. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "device/cuda/ts_cuda.h"
#include "kernels/lowp.h"
#include "tessera/tensor.h"
#include "test_util.h"

static double rel(double got, double want) { return want == 0 ? fabs(got) : fabs(got - want) / fabs(want); }

int main(void) {
  double we = 0, wt = 0, ws = 0;
  float xe = 0, xt = 0;
  for (float x = -7.0f; x <= 7.0f; x += 0.000371f) {
    double e = rel(ferf(x), erff(x)), t = rel(ftanh(x), tanhf(x)), s = rel(fsigmoid(x), 1.0 / (1.0 + exp(-(double)x)));
    if (e > we) we = e, xe = x;
    if (t > wt) wt = t, xt = x;
    if (s > ws) ws = s;
  }
  for (float x = 1e-30f; x < 1.0f; x *= 1.37f) {
    double e = rel(ferf(x), erff(x)), t = rel(ftanh(-x), tanhf(-x));
    if (e > we) we = e, xe = x;
    if (t > wt) wt = t, xt = -x;
  }
  printf("erf: worst relative error %.3g at %g; tanh %.3g at %g; sigmoid %.3g\n", we, xe, wt, xt, ws);
  CHECK_MSG(we <= 2e-7, "erf: %.3g at %g", we, xe);
  CHECK_MSG(wt <= 5e-7, "tanh: %.3g at %g", wt, xt);
  CHECK_MSG(ws <= 1e-6, "sigmoid: %.3g", ws); /* f32 exp near -7: as the CPU's sigmoidf */
  CHECK(ferf(INFINITY) == 1.0f && ferf(-INFINITY) == -1.0f && ftanh(50.0f) == 1.0f && ftanh(-50.0f) == -1.0f);
  /* Philox: every word of (key; hi, lo) as src/base/rng.c's */
  int pbad = 0;
  for (uint64_t i = 0; i < 5000; i++) {
    uint64_t key = 0x9E3779B97F4A7C15ull * (i + 1), hi = i * 7, lo = i * 0x100000001ull;
    ts_philox_out o = ts_philox4x32(key, hi, lo);
    for (int w = 0; w < 4; w++) pbad += philox_word(key, hi, lo, w) != o.v[w];
  }
  CHECK_MSG(pbad == 0, "philox: %d words differ from ts_philox4x32", pbad);
  /* bf16: every 997th f32 pattern (both signs, denormals, infinities, NaNs) */
  int64_t bad = 0, n = 0;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 997, n++) {
    uint32_t b = (uint32_t)u;
    float f;
    memcpy(&f, &b, 4);
    uint16_t mine = f2bf(f), cpu;
    ts__lp_from_f32(&f, &cpu, TS_BF16, 1);
    int same = mine == cpu || (isnan(f) && (mine & 0x7fff) > 0x7f80 && (cpu & 0x7fff) > 0x7f80);
    if (!same && bad++ < 3) fprintf(stderr, "bf16 of %08x: GPU %04x, CPU %04x\n", b, mine, cpu);
    float back = bf2f(cpu), want;
    uint32_t wb = (uint32_t)cpu << 16;
    memcpy(&want, &wb, 4);
    if (memcmp(&back, &want, 4) && bad++ < 3) fprintf(stderr, "f32 of bf16 %04x differs\n", cpu);
  }
  CHECK_MSG(bad == 0, "bf16 rounding: %lld of %lld patterns differ from the CPU's", (long long)bad, (long long)n);
  /* f16 (amp_dtype f16 on the GPU, run_gpu_lowp.c): every 997th f32 pattern rounded as
   * src/tensor/dtype.c's ts_f32_to_f16 (bitwise, NaN included), every f16 pattern widened as its
   * ts_f16_to_f32 */
  bad = 0, n = 0;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 997, n++) {
    uint32_t b = (uint32_t)u;
    float f;
    memcpy(&f, &b, 4);
    uint16_t mine = f2h(f), cpu = ts_f32_to_f16(f);
    if (mine != cpu && bad++ < 3) fprintf(stderr, "f16 of %08x: GPU %04x, CPU %04x\n", b, mine, cpu);
  }
  for (uint32_t h = 0; h <= 0xffffu; h++) {
    float mine = h2f((unsigned short)h), cpu = ts_f16_to_f32((uint16_t)h);
    if (memcmp(&mine, &cpu, 4) && bad++ < 3) fprintf(stderr, "f32 of f16 %04x: GPU %a, CPU %a\n", h, mine, cpu);
  }
  CHECK_MSG(bad == 0, "f16 conversions: %lld of %lld patterns differ from the CPU's", (long long)bad, (long long)n + 65536);
  return ts_test_finish("test_cuda_math");
}
