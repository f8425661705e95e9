/* Internal to kernels/: 16-bit float (bf16, f16) helpers shared by the kernel families.
 *
 * Scalar conversions are inline copies of tensor/'s ts_f32_to_bf16 / ts_bf16_to_f32 (bitwise
 * the same results: round to nearest even, quiet NaNs) so the native 16-bit loops vectorise.
 * f16 has no compute units on the CPUs oneDNN 2.6 targets here (it needs avx512_core_fp16), so
 * every f16 kernel converts around the f32 kernel: ts__lp_in / ts__lp_out below. */
#ifndef TS_KERNELS_LOWP_H
#define TS_KERNELS_LOWP_H

#include <stdint.h>
#include <string.h>

#include "tessera/tensor.h"

static inline float ts__bf2f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t ts__f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);                                       /* nearest even */
  return (uint16_t)(u >> 16);
}

/* 1 for bf16 and f16. */
static inline int ts__is_lowp(ts_dtype dt) { return dt == TS_BF16 || dt == TS_F16; }

/* Converts n elements of a 16-bit (or f32: copied) buffer into f32 dst. */
void ts__lp_to_f32(const void *src, ts_dtype dt, float *dst, int64_t n);
/* Converts n f32 elements to dt (bf16/f16, or f32: copied), rounding once to nearest even. */
void ts__lp_from_f32(const float *src, void *dst, ts_dtype dt, int64_t n);
/* A new f32 buffer (ts_alloc; free with ts_free) holding src converted; NULL (TS_ENOMEM set,
 * naming `what`) when out of memory. */
float *ts__lp_in(const void *src, ts_dtype dt, int64_t n, const char *what);

/* Serial row conversions (f32 copies; bf16/f16 widened or rounded to nearest even), for kernels
 * that process one row at a time in a per-thread f32 buffer. */
void ts__lp_widen(const void *src, ts_dtype dt, float *dst, int64_t n);
void ts__lp_narrow(const float *src, void *dst, ts_dtype dt, int64_t n);

/* Streaming of element-wise work: n elements cut into chunks of TS__LP_CHUNK, processed in
 * parallel. For each chunk, the 16-bit inputs are widened into per-thread f32 buffers that stay
 * in L1 (f32 inputs are passed in place), fn computes the chunk's f32 outputs, and 16-bit outputs
 * are rounded back once, so memory only sees 16-bit traffic. bufs[0..nin) are the inputs,
 * bufs[nin..nin+nout) the outputs of chunk [off, off+len); nin + nout <= 4. fn returns a
 * status; validate arguments before streaming (errors from worker threads are only counted). */
#define TS__LP_CHUNK 1024
typedef int (*ts__lp_chunk_fn)(float *const *bufs, int64_t off, int64_t len, const void *ctx);
int ts__lp_stream(int nin, const void *const *in, const ts_dtype *idt, int nout, void *const *out,
                  const ts_dtype *odt, int64_t n, ts__lp_chunk_fn fn, const void *ctx,
                  const char *what);

#endif
