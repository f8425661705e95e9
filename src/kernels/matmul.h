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

/* Elements stored in a, b and c of a descriptor. */
static inline int64_t ts__mm_a_elems(const ts__mm_desc *d) { return (d->a_batched ? d->batch : 1) * d->M * d->K; }
static inline int64_t ts__mm_b_elems(const ts__mm_desc *d) { return (d->b_batched ? d->batch : 1) * d->K * d->N; }
static inline int64_t ts__mm_c_elems(const ts__mm_desc *d) { return d->batch * d->M * d->N; }

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
/* bf16 a, b with an f32 c (oneDNN; f32 accumulation, c not rounded to bf16): a bf16 product
 * whose only use is its widening to f32 (a weight gradient cast to its f32 master, the
 * executor's matmul+cast fusion, src/runtime/exec.c) written straight in f32. */
// a (B?,M,K)|(B?,K,M) bf16, b (B?,K,N)|(B?,N,K) bf16 -> c (B,M,N) f32
int ts__matmul_bf16_f32out_dnnl(const ts__mm_desc *d, const void *a, const void *b, float *c);
// x (M,K) dt, w (N,K) dt, bias (N) dt or NULL -> y (M,N) dt
int ts__dense_lp_ref(int64_t M, int64_t N, int64_t K, ts_dtype dt, const void *x, const void *w,
                     const void *bias, void *y);
int ts__dense_lp_dnnl(int64_t M, int64_t N, int64_t K, ts_dtype dt, const void *x, const void *w,
                      const void *bias, void *y);

/* c = act(op(a) op(b) + bias) in one oneDNN matmul primitive (matmul_act.c): `act` a gelu
 * (TS_ELT_GELU_TANH or TS_ELT_GELU_ERF, tessera/ops.h) applied as an eltwise post-op to the f32
 * accumulator, c rounded once to its dtype; the pre-activation is never stored. a, b and bias
 * (N, broadcast over rows and batch; NULL: none) of dtype ab_dt (TS_F32 or TS_BF16); c of c_dt
 * (ab_dt or TS_F32). Dense is d = {1, M, N, K, 0, 1, 0, 0} with w (N,K). The executor's
 * matmul+bias+gelu fusion (src/runtime/exec.c). */
// a (B?,M,K)|(B?,K,M) ab_dt, b (B?,K,N)|(B?,N,K) ab_dt, bias (N) ab_dt or NULL -> c (B,M,N) c_dt
int ts__matmul_act_dnnl(const ts__mm_desc *d, ts_dtype ab_dt, ts_dtype c_dt, const void *a, const void *b,
                        const void *bias, void *c, int act);

/* bf16 GEMMs for kernels that run many small products inside their own OpenMP regions (the
 * fused attention): C (M,N) = alpha op(A) op(B), or C += alpha op(A) op(B) with `accumulate`;
 * row-major with leading dimensions as dnnl_sgemm's ('N'/'T'), A and B bf16, f32 accumulation,
 * C f32 or bf16 (c_bf16 = 1: rounded once). Each shape is one oneDNN matmul primitive (alpha an
 * output scale, accumulate a sum post-op), cached; oneDNN 2.6 runs its brgemm kernel only on
 * dense operands (lda/ldb/ldc equal to the row length), strided ones get its slower jit gemm.
 * The primitives use a user scratchpad, so threads can run one primitive at the same time.
 *   ts__gemm_bf16_get: creates or finds the product; not thread-safe (the primitive cache is
 *     not): get every product a parallel region needs before entering it. NULL (error set) if
 *     oneDNN cannot make it.
 *   ts__gemm_thr: one per thread: a stream, a scratchpad of `scratch` bytes (at least the
 *     largest ts__gemm_bf16_scratch of the products it runs) and `nslot` slots of memory
 *     objects, created on a slot's first run and re-pointed afterwards; a caller gives each
 *     product it runs its own slot.
 *   ts__gemm_bf16_run: status (TS_EBACKEND); sets no error message, so it can run on worker
 *     threads: the caller reports after its region. */
typedef struct ts__gemm_bf16 ts__gemm_bf16;
typedef struct ts__gemm_thr ts__gemm_thr;
const ts__gemm_bf16 *ts__gemm_bf16_get(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                                       int64_t lda, int64_t ldb, int accumulate, int64_t ldc, int c_bf16);
size_t ts__gemm_bf16_scratch(const ts__gemm_bf16 *g);
/* NULL when out of memory or oneDNN fails (no message: may run on a worker thread). */
ts__gemm_thr *ts__gemm_thr_new(int nslot, size_t scratch);
void ts__gemm_thr_free(ts__gemm_thr *t);
// A (M,K)|(K,M) bf16, B (K,N)|(N,K) bf16 -> C (M,N) f32|bf16
int ts__gemm_bf16_run(const ts__gemm_bf16 *g, ts__gemm_thr *t, int slot, const void *A, const void *B,
                      void *C);

#endif
