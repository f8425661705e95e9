/* Matrix-multiplication kernels: batched matmul with transposes and dense (x w^T + b).
 * f32, contiguous row-major. `_ref` kernels are plain C (OpenMP over rows), `_dnnl` kernels go
 * through oneDNN (dnnl_sgemm for single GEMMs, the matmul primitive for batches). */
#ifndef TS_KERNELS_MATMUL_H
#define TS_KERNELS_MATMUL_H

#include <stdint.h>

#include "tessera/tensor.h"

/* c[i] = op(a[i]) @ op(b[i]) for i < batch, where op transposes when the trans flag is set.
 * Stored shapes: a (batch?, M, K) or (batch?, K, M) if trans_a; b (batch?, K, N) or
 * (batch?, N, K) if trans_b; c (batch, M, N). a_batched / b_batched = 0 means the operand is a
 * single matrix shared by every batch entry (stride 0). */
typedef struct {
  int64_t batch, M, N, K;
  int trans_a, trans_b;
  int a_batched, b_batched;
} ts__mm_desc;

/* Validates a descriptor (positive sizes, flags 0/1); TS_EINVAL with a message otherwise. */
int ts__mm_check(const ts__mm_desc *d, const char *what);

// a (B?,M,K)|(B?,K,M), b (B?,K,N)|(B?,N,K) -> c (B,M,N)
int ts__matmul_ref(const ts__mm_desc *d, const float *a, const float *b, float *c);
int ts__matmul_dnnl(const ts__mm_desc *d, const float *a, const float *b, float *c);

// x (M,K), w (N,K), bias (N) or NULL -> y (M,N) = x w^T + bias
int ts__dense_ref(int64_t M, int64_t N, int64_t K, const float *x, const float *w,
                  const float *bias, float *y);
int ts__dense_dnnl(int64_t M, int64_t N, int64_t K, const float *x, const float *w,
                   const float *bias, float *y);

/* 16-bit variants: a, b, c (and bias) all of dtype dt (TS_BF16 or TS_F16; TS_F32 calls the f32
 * kernel above), products accumulated in f32, c rounded once to nearest even.
 *  _dnnl: bf16 runs natively through oneDNN's matmul primitive with bf16 memory descriptors
 *         (brgemm avx512_core_bf16 where the CPU has it; f32 accumulation); f16 converts to f32
 *         around the f32 oneDNN kernel (no f16 compute in oneDNN 2.6 without avx512_core_fp16).
 *  _ref:  converts to f32 around the f32 reference kernel (exact products, f32 sums). */
// a (B?,M,K)|(B?,K,M) dt, b (B?,K,N)|(B?,N,K) dt -> c (B,M,N) dt
int ts__matmul_lp_ref(const ts__mm_desc *d, ts_dtype dt, const void *a, const void *b, void *c);
int ts__matmul_lp_dnnl(const ts__mm_desc *d, ts_dtype dt, const void *a, const void *b, void *c);
// x (M,K) dt, w (N,K) dt, bias (N) dt or NULL -> y (M,N) dt
int ts__dense_lp_ref(int64_t M, int64_t N, int64_t K, ts_dtype dt, const void *x, const void *w,
                     const void *bias, void *y);
int ts__dense_lp_dnnl(int64_t M, int64_t N, int64_t K, ts_dtype dt, const void *x, const void *w,
                      const void *bias, void *y);

#endif
