/* Element-wise activation kernels (f32, contiguous) and small vectorisable math helpers shared by
 * the softmax / cross-entropy / norm kernels.
 *
 * Algorithms are the ts_eltwise_alg values of tessera/ops.h (the enum is only a list of
 * names; nothing here knows about graphs). `alpha` is the relu negative slope (0 = plain relu);
 * `beta` is unused by the current algorithms and reserved. */
#ifndef TS_KERNELS_ELTWISE_H
#define TS_KERNELS_ELTWISE_H

#include <stdint.h>
#include <string.h>
#include "tessera/ops.h"
#include "tessera/tensor.h"

/* 1 if the backward of `alg` is computed from the forward output y (relu, sigmoid, tanh, exp,
 * sqrt), 0 if from the input x (gelu, log, square, abs, neg). The graph rule feeds ELTWISE_BWD
 * accordingly. */
int ts__eltwise_bwd_uses_dst(int alg);

/* x (n) -> y (n). In place (y == x) is allowed. */
int ts__eltwise_fwd_ref(int alg, float alpha, float beta, const float *x, float *y, int64_t n);
int ts__eltwise_fwd_dnnl(int alg, float alpha, float beta, const float *x, float *y, int64_t n);
/* dy (n), src (n) -> dx (n); src is y when use_dst, else x. use_dst is only valid for the algs
 * where ts__eltwise_bwd_uses_dst() is 1 (the reference also accepts x for them). */
int ts__eltwise_bwd_ref(int alg, float alpha, float beta, int use_dst, const float *dy,
                        const float *src, float *dx, int64_t n);
int ts__eltwise_bwd_dnnl(int alg, float alpha, float beta, int use_dst, const float *dy,
                         const float *src, float *dx, int64_t n);

/* 16-bit variants (dt TS_BF16 or TS_F16), reading and writing 16-bit, computing in f32.
 * dnnl = 1 and bf16: oneDNN's eltwise primitives on bf16 memory (JIT), except neg and log, which
 * stay on the reference loops as in f32; dnnl = 1 and f16, or bf16 where oneDNN has none (CPUs
 * without AVX-512), from TS__LP_CHUNK elements on: the f32 primitive on widened copies (blocks of
 * 2^20 elements in scratch kept by the file), rounded back once. Otherwise (ref backend, neg,
 * log, small tensors): the reference loops over L1-sized chunks widened to f32 and rounded back
 * once (ts__lp_stream), so the traffic is 16-bit. */
// x (n) dt -> y (n) dt
int ts__eltwise_fwd_lp(int alg, float alpha, float beta, ts_dtype dt, int dnnl, const void *x,
                       void *y, int64_t n);
// dy (n) dt, src = x or y (n) dt -> dx (n) dt
int ts__eltwise_bwd_lp(int alg, float alpha, float beta, int use_dst, ts_dtype dt, int dnnl,
                       const void *dy, const void *src, void *dx, int64_t n);

/* exp(x) with ~2 ulp error, written so that loops calling it vectorise (no libm call):
 * Cephes-style range reduction x = n*ln2 + r and a degree-6 polynomial. Underflows to 0 below
 * -87.3, saturates near 1.6e38 above 88.0 (softmax and cross-entropy only feed x <= 0), keeps
 * NaN. */
static inline float ts__expf(float x) {
  const float lo = -87.3365447504f, hi = 88.0f;
  float xc = x > hi ? hi : x;
  xc = xc < lo ? lo : xc;
  xc = xc == xc ? xc : 0.0f; /* NaN: computed on 0, returned as NaN below */
  float t = xc * 1.44269504088896341f;
  float n = (t + 12582912.0f) - 12582912.0f; /* round to nearest */
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  union { uint32_t i; float f; } u;
  u.i = (uint32_t)((int32_t)n + 127) << 23;
  float res = p * u.f;
  res = x < lo ? 0.0f : res;
  return x != x ? x : res;
}

#endif
