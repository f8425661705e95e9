// Element-wise kernels: activations forward and backward (the algorithms of tessera/ops.h's
// ts_eltwise_alg, as src/kernels/eltwise.c computes them), casts between f32 and bf16, fill,
// scale and axpy; f32 and bf16 storage, f32 arithmetic. CPU reference: src/kernels/eltwise.c,
// src/kernels/lowp.c.
#include "ts_cuda.h"

// ts_eltwise_alg
enum { RELU, GELU_TANH, GELU_ERF, SIGMOID, TANH, EXP, LOG, SQRT, SQUARE, ABS, NEG };
#define SQRT_2_OVER_PI 0.79788456080286535588f
#define GELU_C 0.044715f
#define INV_SQRT2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f


DEV float fwd1(int alg, float alpha, float v) {
  switch (alg) {
    case RELU: return v > 0 ? v : alpha * v;
    case GELU_TANH: return 0.5f * v * (1.0f + ftanh(SQRT_2_OVER_PI * (v + GELU_C * v * v * v)));
    case GELU_ERF: return 0.5f * v * (1.0f + ferf(v * INV_SQRT2));
    case SIGMOID: return fsigmoid(v);
    case TANH: return ftanh(v);
    case EXP: return fexp(v);
    case LOG: return flog(v);
    case SQRT: return fsqrt(v);
    case SQUARE: return v * v;
    case ABS: return fabs_(v);
    default: return -v; // NEG
  }
}

// the derivative's factor from s = y (use_dst) or x
DEV float bwd1(int alg, float alpha, int use_dst, float g, float s) {
  switch (alg) {
    case RELU: return s > 0 ? g : alpha * g;
    case GELU_TANH: {
      float t = ftanh(SQRT_2_OVER_PI * (s + GELU_C * s * s * s));
      return g * (0.5f * (1.0f + t) + 0.5f * s * (1.0f - t * t) * SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_C * s * s));
    }
    case GELU_ERF: return g * (0.5f * (1.0f + ferf(s * INV_SQRT2)) + s * INV_SQRT_2PI * fexp(-0.5f * s * s));
    case SIGMOID: {
      float y = use_dst ? s : fsigmoid(s);
      return g * y * (1.0f - y);
    }
    case TANH: {
      float y = use_dst ? s : ftanh(s);
      return g * (1.0f - y * y);
    }
    case EXP: return g * (use_dst ? s : fexp(s));
    case LOG: return g / s;
    case SQRT: return g / (2.0f * (use_dst ? s : fsqrt(s)));
    case SQUARE: return 2.0f * s * g;
    case ABS: return s > 0 ? g : (s < 0 ? -g : 0.0f);
    default: return -g; // NEG
  }
}

template <typename T> DEV void eltwise_fwd(int alg, float alpha, const T *x, T *y, i64 n) {
  for (i64 i = gidx(); i < n; i += gstride()) st(y, i, fwd1(alg, alpha, ld(x, i)));
}
template <typename T> DEV void eltwise_bwd(int alg, float alpha, int use_dst, const T *dy, const T *s, T *dx, i64 n) {
  for (i64 i = gidx(); i < n; i += gstride()) st(dx, i, bwd1(alg, alpha, use_dst, ld(dy, i), ld(s, i)));
}

// x (n) -> y (n); y may be x
KERNEL ts_k_eltwise_fwd_f32(int alg, float alpha, const float *x, float *y, i64 n) { eltwise_fwd(alg, alpha, x, y, n); }
KERNEL ts_k_eltwise_fwd_bf16(int alg, float alpha, const bf16 *x, bf16 *y, i64 n) { eltwise_fwd(alg, alpha, x, y, n); }
// dy (n), s = y (use_dst) or x (n) -> dx (n)
KERNEL ts_k_eltwise_bwd_f32(int alg, float alpha, int use_dst, const float *dy, const float *s, float *dx, i64 n) {
  eltwise_bwd(alg, alpha, use_dst, dy, s, dx, n);
}
KERNEL ts_k_eltwise_bwd_bf16(int alg, float alpha, int use_dst, const bf16 *dy, const bf16 *s, bf16 *dx, i64 n) {
  eltwise_bwd(alg, alpha, use_dst, dy, s, dx, n);
}

// f32 (n) <-> bf16 (n), rounding to nearest even
KERNEL ts_k_cast_f32_bf16(const float *x, bf16 *y, i64 n) {
  for (i64 i = gidx(); i < n; i += gstride()) y[i] = f2bf(x[i]);
}
KERNEL ts_k_cast_bf16_f32(const bf16 *x, float *y, i64 n) {
  for (i64 i = gidx(); i < n; i += gstride()) y[i] = bf2f(x[i]);
}
// f32 <-> f16 (IEEE half bits), rounding to nearest even; f16 <-> bf16 through f32 (exact, then one rounding)
KERNEL ts_k_cast_f32_f16(const float *x, unsigned short *y, i64 n) {
  for (i64 i = gidx(); i < n; i += gstride()) y[i] = f2h(x[i]);
}
KERNEL ts_k_cast_f16_f32(const unsigned short *x, float *y, i64 n) {
  for (i64 i = gidx(); i < n; i += gstride()) y[i] = h2f(x[i]);
}
KERNEL ts_k_cast_f16_bf16(const unsigned short *x, bf16 *y, i64 n) {
  for (i64 i = gidx(); i < n; i += gstride()) y[i] = f2bf(h2f(x[i]));
}
KERNEL ts_k_cast_bf16_f16(const bf16 *x, unsigned short *y, i64 n) {
  for (i64 i = gidx(); i < n; i += gstride()) y[i] = f2h(bf2f(x[i]));
}
// y (n) = v
KERNEL ts_k_fill_f32(float *y, float v, i64 n) {
  for (i64 i = gidx(); i < n; i += gstride()) y[i] = v;
}
// y (n) = a * x + b * y   (b = 0: y = a x, y not read)
KERNEL ts_k_axpby_f32(float a, const float *x, float b, float *y, i64 n) {
  for (i64 i = gidx(); i < n; i += gstride()) y[i] = b == 0.0f ? a * x[i] : a * x[i] + b * y[i];
}
