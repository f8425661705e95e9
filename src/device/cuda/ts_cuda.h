/* The prelude of Tessera's CUDA kernels (the .cu files of src/device/cuda/). They are compiled to PTX by
 * Debian's clang without a CUDA install (-nocudainc -nocudalib: no CUDA headers, no libdevice),
 * so what CUDA's headers would give is spelled here with clang's NVPTX builtins, and the math
 * functions libdevice would give are written out with PTX's own instructions (ex2/lg2 approx,
 * IEEE sqrt/div) to the accuracy the tests state against the CPU's libm (docs/gpu.md).
 * Conventions: every kernel is extern "C" ts_k_<op>_<dtype>, grid-stride over int64 sizes,
 * deterministic (reductions in a fixed tree per block, no atomics on values). */
#ifndef TS_CUDA_PRELUDE_H
#define TS_CUDA_PRELUDE_H

typedef long long i64;
typedef unsigned short bf16; /* bfloat16 bits */

#if defined(__CUDA__)
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define KERNEL extern "C" __global__ void
/* a kernel launched with blocks of 512 threads: registers held to 128 a thread */
#define KERNEL_512 extern "C" __global__ void __attribute__((launch_bounds(512, 1)))
#define DEV static __device__ inline
/* inlined whatever the compiler's cost model says (helpers taking register arrays: an outlined call
 * would move the arrays to local memory) */
#define DEVI static __device__ inline __attribute__((always_inline))
DEV float i2f(int i) { return __builtin_bit_cast(float, i); }
DEV int f2i(float f) { return __builtin_bit_cast(int, f); }
#else
/* Host C (tests/device/test_cuda_math.c: the math below checked against libm on any machine) and
 * host C++ (TS_CUDA_EMU: the kernels themselves run by the stand-in driver's emulator,
 * tests/device/emu.cpp, one fiber per thread): PTX's approximate exp2/log2 replaced by libm's. */
#include <math.h>
#include <string.h>
#define DEV static inline
#define DEVI static inline
#define __nvvm_ex2_approx_f exp2f
#define __nvvm_lg2_approx_f log2f
#define __nvvm_sqrt_rn_f sqrtf
DEV float i2f(int i) { float f; memcpy(&f, &i, 4); return f; }
DEV int f2i(float f) { int i; memcpy(&i, &f, 4); return i; }
#ifdef TS_CUDA_EMU
#define KERNEL extern "C" void
#define KERNEL_512 KERNEL
#define __shared__ static /* blocks run one at a time: one copy is the block's */
extern "C" {
int ts_emu_sreg(int which); /* 0..2 tid xyz, 3..5 ntid, 6..8 ctaid, 9..11 nctaid */
void ts_emu_sync(void);
float ts_emu_shfl_bfly(float v, int lane_mask);
const float *ts_emu_warp_post(float v); /* posts v; the warp's 32 posted values once all have */
}
#define __syncthreads() ts_emu_sync()
#define __nvvm_shfl_sync_bfly_f32(m, v, o, c) ts_emu_shfl_bfly((v), (o))
#define __nvvm_read_ptx_sreg_tid_x() ts_emu_sreg(0)
#define __nvvm_read_ptx_sreg_ntid_x() ts_emu_sreg(3)
#define __nvvm_read_ptx_sreg_ctaid_x() ts_emu_sreg(6)
#define __nvvm_read_ptx_sreg_ctaid_y() ts_emu_sreg(7)
#define __nvvm_read_ptx_sreg_ctaid_z() ts_emu_sreg(8)
#define __nvvm_read_ptx_sreg_nctaid_x() ts_emu_sreg(9)
#define __nvvm_read_ptx_sreg_nctaid_y() ts_emu_sreg(10)
#endif
#endif

/* a loop fully unrolled on the GPU (register arrays indexed by the loop stay registers) */
#if defined(__CUDA__)
#define UNROLL _Pragma("unroll")
#else
#define UNROLL
#endif

#if defined(__CUDA__) || defined(TS_CUDA_EMU)
DEV int tid() { return __nvvm_read_ptx_sreg_tid_x(); }
DEV int ntid() { return __nvvm_read_ptx_sreg_ntid_x(); }
DEV int bid() { return __nvvm_read_ptx_sreg_ctaid_x(); }
DEV int nbid() { return __nvvm_read_ptx_sreg_nctaid_x(); }
DEV int bidy() { return __nvvm_read_ptx_sreg_ctaid_y(); }
DEV int nbidy() { return __nvvm_read_ptx_sreg_nctaid_y(); }
DEV int bidz() { return __nvvm_read_ptx_sreg_ctaid_z(); }
/* this thread's first index and the stride of a grid-stride loop */
DEV i64 gidx() { return (i64)bid() * ntid() + tid(); }
DEV i64 gstride() { return (i64)nbid() * ntid(); }
#endif

/* ---- math (f32) ---- */
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f
DEV float fexp(float x) { return __nvvm_ex2_approx_f(x * LOG2E); }
DEV float flog(float x) { return __nvvm_lg2_approx_f(x) * LN2; }
DEV float fsqrt(float x) { return __nvvm_sqrt_rn_f(x); }
#if defined(__CUDA__)
DEV double dsqrt(double x) { return __nvvm_sqrt_rn_d(x); }
#else
DEV double dsqrt(double x) { return sqrt(x); }
#endif
DEV float fabs_(float x) { return x < 0 ? -x : x; }
DEV float fmax_(float a, float b) { return a > b ? a : b; }
/* tanh through exp, the sign folded out (no overflow for large |x|) */
DEV float ftanh(float x) {
  float a = fabs_(x);
  if (a < 0.3f) { /* its Taylor series (1 - e cancels here); the next term is below 2e-9 */
    float z = x * x;
    return x + x * z * (-0.333333333f + z * (0.133333333f + z * (-0.053968254f + z * (0.021869489f + z * -0.008863236f))));
  }
  float e = fexp(-2.0f * a), t = (1.0f - e) / (1.0f + e);
  return x < 0 ? -t : t;
}
DEV float fsigmoid(float x) {
  if (x >= 0) return 1.0f / (1.0f + fexp(-x));
  float e = fexp(x);
  return e / (1.0f + e);
}
/* erf(x): Abramowitz & Stegun 7.1.26 is too coarse (1.5e-7 absolute is fine, but its relative
 * error near 0 is not); this is W. J. Cody's rational form as in glibc's float erf, split at
 * |x| = 0.84375: for small x, x + x*P(x^2)/Q(x^2); beyond, 1 - erfc via exp(-x^2) times a
 * rational function. Max error against glibc's erff about 2 ulp. */
DEV float ferf(float x) {
  float a = fabs_(x);
  if (a < 0.84375f) {
    float z = x * x;
    float r = 1.28379166e-01f + z * (-3.25042099e-01f + z * (-2.84817495e-02f + z * (-5.77027029e-03f + z * -2.37630166e-05f)));
    float s = 1.0f + z * (3.97917223e-01f + z * (6.50222525e-02f + z * (5.08130631e-03f + z * (1.32494737e-04f + z * -3.96022827e-06f))));
    return x + x * (r / s);
  }
  if (a < 1.25f) {
    float s = a - 1.0f;
    float P = -2.36211856e-03f + s * (4.14856118e-01f + s * (-3.72207475e-01f + s * (3.18346621e-01f + s * (-1.10894695e-01f + s * (3.54783031e-02f + s * -2.16637552e-03f)))));
    float Q = 1.0f + s * (1.06420882e-01f + s * (5.40397918e-01f + s * (7.18286526e-02f + s * (1.26171222e-01f + s * (1.36370844e-02f + s * 1.19844998e-02f)))));
    float e = 8.45062911e-01f + P / Q;
    return x < 0 ? -e : e;
  }
  if (a >= 6.0f) return x < 0 ? -1.0f : 1.0f;
  float s = 1.0f / (a * a), R, S;
  if (a < 2.85714285f) {
    R = -9.86494403e-03f + s * (-6.93858172e-01f + s * (-1.05586262e+01f + s * (-6.23753357e+01f + s * (-1.62396660e+02f + s * (-1.84605094e+02f + s * (-8.12874374e+01f + s * -9.81432915e+00f))))));
    S = 1.0f + s * (1.96512716e+01f + s * (1.37657754e+02f + s * (4.34565887e+02f + s * (6.45387268e+02f + s * (4.29008148e+02f + s * (1.08635002e+02f + s * (6.57024976e+00f + s * -6.04244152e-02f)))))));
  } else {
    R = -9.86494310e-03f + s * (-7.99283242e-01f + s * (-1.77579546e+01f + s * (-1.60636383e+02f + s * (-6.37566467e+02f + s * (-1.02509510e+03f + s * -4.83519192e+02f)))));
    S = 1.0f + s * (3.03380604e+01f + s * (3.25792511e+02f + s * (1.53672961e+03f + s * (3.19985815e+03f + s * (2.55305029e+03f + s * (4.74528542e+02f + s * -2.24409524e+01f))))));
  }
  /* erfc(a) = exp(-a^2 - 0.5625 + R/S) / a, with a^2 split as glibc does (z = a rounded to 12 bits) */
  float z = i2f(f2i(a) & (int)0xfffff000);
  float r = fexp(-z * z - 0.5625f) * fexp((z - a) * (z + a) + R / S);
  float e = 1.0f - r / a;
  return x < 0 ? -e : e;
}

/* ---- Philox-4x32-10 (src/base/rng.c's ts_philox4x32): word w of (key; ctr_hi, ctr_lo) ---- */
DEV unsigned philox_word(unsigned long long key, unsigned long long hi, unsigned long long lo, int w) {
  unsigned c0 = (unsigned)lo, c1 = (unsigned)(lo >> 32), c2 = (unsigned)hi, c3 = (unsigned)(hi >> 32);
  unsigned k0 = (unsigned)key, k1 = (unsigned)(key >> 32);
  for (int r = 0; r < 10; r++) {
    unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
    unsigned n0 = (unsigned)(p1 >> 32) ^ c1 ^ k0, n2 = (unsigned)(p0 >> 32) ^ c3 ^ k1;
    c1 = (unsigned)p1;
    c3 = (unsigned)p0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return w == 0 ? c0 : w == 1 ? c1 : w == 2 ? c2 : c3;
}

/* ---- bf16 (round to nearest even, NaN kept quiet: as src/kernels/lowp.c) ---- */
DEV float bf2f(bf16 h) { return i2f((int)((unsigned)h << 16)); }
DEV bf16 f2bf(float f) {
  unsigned u = (unsigned)f2i(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x40); /* NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (bf16)(u >> 16);
}

/* ---- f16 (IEEE binary16 bits; round to nearest even, overflow to inf, subnormals, NaN quiet:
 * bitwise src/tensor/dtype.c's ts_f32_to_f16 / ts_f16_to_f32) ---- */
DEV float h2f(unsigned short h) {
  unsigned sign = (unsigned)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    float v = (float)m * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (e == 31) return i2f((int)(sign | 0x7f800000u | (m << 13)));
  return i2f((int)(sign | ((e + 112u) << 23) | (m << 13)));
}
DEV unsigned short f2h(float f) {
  unsigned u = (unsigned)f2i(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);  /* NaN */
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u); /* overflow -> inf */
  if (a < 0x38800000u) {                                         /* subnormal or zero: units of 2^-24 */
    float v = i2f((int)a) * 16777216.0f;
    unsigned q = (unsigned)v;
    float rem = v - (float)q;
    if (rem > 0.5f || (rem == 0.5f && (q & 1u))) q++;
    return (unsigned short)(sign | q);
  }
  unsigned r = a + 0xfffu + ((a >> 13) & 1u);
  r -= 112u << 23;
  return (unsigned short)(sign | (r >> 13));
}

#if defined(__CUDA__) || defined(TS_CUDA_EMU)
/* ---- element i of f32 or bf16 storage as f32, and back (C++ overloads: the kernels' templates
 * over the storage type call these) ---- */
DEV float ld(const float *p, i64 i) { return p[i]; }
DEV float ld(const bf16 *p, i64 i) { return bf2f(p[i]); }
DEV void st(float *p, i64 i, float v) { p[i] = v; }
DEV void st(bf16 *p, i64 i, float v) { p[i] = f2bf(v); }
/* f16 storage: a type of its own for the overloads (bf16 is the unsigned short) */
struct half16 {
  unsigned short x;
};
DEV float ld(const half16 *p, i64 i) { return h2f(p[i].x); }
DEV void st(half16 *p, i64 i, float v) { p[i].x = f2h(v); }

/* ---- block reductions: a fixed tree (warp shuffles, then the warps' sums), deterministic ---- */
#ifndef TS_CUDA_EMU
DEV float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __nvvm_shfl_sync_bfly_f32(0xffffffffu, v, o, 31);
  return v;
}
DEV float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmax_(v, __nvvm_shfl_sync_bfly_f32(0xffffffffu, v, o, 31));
  return v;
}
#else
/* the emulator's: one exchange of the warp's 32 values (not five), then the butterfly's five
 * steps computed on each lane for the whole warp: the same operations on the same values as the
 * shuffles above, so the same bits */
DEV float warp_sum(float v) {
  float a[32], b[32];
  memcpy(a, ts_emu_warp_post(v), sizeof a);
  for (int o = 16; o > 0; o >>= 1) {
    for (int l = 0; l < 32; l++) b[l] = a[l] + a[l ^ o];
    memcpy(a, b, sizeof a);
  }
  return a[tid() & 31];
}
DEV float warp_max(float v) {
  float a[32], b[32];
  memcpy(a, ts_emu_warp_post(v), sizeof a);
  for (int o = 16; o > 0; o >>= 1) {
    for (int l = 0; l < 32; l++) b[l] = fmax_(a[l], a[l ^ o]);
    memcpy(a, b, sizeof a);
  }
  return a[tid() & 31];
}
#endif
/* the sum over the block (blockDim a multiple of 32, at most 1024), on every thread; sh: 32 floats */
DEV float block_sum(float v, float *sh) {
  v = warp_sum(v);
  int w = tid() >> 5, l = tid() & 31, nw = ntid() >> 5;
  __syncthreads(); /* sh free from an earlier use */
  if (l == 0) sh[w] = v;
  __syncthreads();
  v = l < nw ? sh[l] : 0.0f;
  return warp_sum(v);
}
DEV float block_max(float v, float *sh) {
  v = warp_max(v);
  int w = tid() >> 5, l = tid() & 31, nw = ntid() >> 5;
  __syncthreads();
  if (l == 0) sh[w] = v;
  __syncthreads();
  v = l < nw ? sh[l] : -3.402823466e38f;
  return warp_max(v);
}

/* ---- tensor cores: mma.sync m16n8k16, bf16 operands, f32 accumulation (sm_80 and newer) ----
 * d (16 x 8) += a (16 x 16) b (16 x 8) over one warp; every lane of the warp calls it together.
 * The fragments as PTX defines them (lane = 4 g + t, g = lane / 4, t = lane % 4; a .b32 holds two
 * bf16, the lower-indexed element in its low half):
 *   a[0] = A[g][2t, 2t+1]   a[1] = A[g+8][2t, 2t+1]   a[2] = A[g][2t+8, 2t+9]   a[3] = A[g+8][2t+8, 2t+9]
 *   b[0] = B[2t, 2t+1][g]   b[1] = B[2t+8, 2t+9][g]
 *   d[0] = D[g][2t]   d[1] = D[g][2t+1]   d[2] = D[g+8][2t]   d[3] = D[g+8][2t+1]
 * so the accumulator of an m16n8 product, two n-tiles side by side, packs into the A fragment of
 * the next product's 16-wide k step (flash attention's P and dS never leave the registers). On the
 * stand-in driver the emulator computes the warp's product from every lane's fragments. */
DEV unsigned pack_bf16(float lo, float hi) { return (unsigned)f2bf(lo) | ((unsigned)f2bf(hi) << 16); }
DEV unsigned pack2(bf16 lo, bf16 hi) { return (unsigned)lo | ((unsigned)hi << 16); }
#if defined(__CUDA__)
DEV void mma_bf16(float d[4], const unsigned a[4], const unsigned b[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#else
extern "C" void ts_emu_mma_bf16(float *d, const unsigned *a, const unsigned *b);
DEV void mma_bf16(float d[4], const unsigned a[4], const unsigned b[2]) { ts_emu_mma_bf16(d, a, b); }
#endif

#endif /* __CUDA__ || TS_CUDA_EMU */

#endif
