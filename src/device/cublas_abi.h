/* The part of cuBLAS's C ABI Tessera uses (cublas_api.h of CUDA 11..13), declared here because no
 * CUDA install is needed to build: the handle opaque, enums as int, the stream as a pointer.
 * src/device/cublas.c loads these at run time; tests/device/test_cuda_abi.cpp checks them against
 * NVIDIA's headers and library where installed. */
#ifndef TS_DEVICE_CUBLAS_ABI_H
#define TS_DEVICE_CUBLAS_ABI_H

#ifdef __cplusplus
extern "C" {
#endif

typedef int ts__cublas_status;
typedef void *ts__cublas_handle;
enum {
  TS__CUBLAS_OP_N = 0,          /* CUBLAS_OP_N */
  TS__CUBLAS_OP_T = 1,          /* CUBLAS_OP_T */
  TS__CUDA_R_32F = 0,           /* cudaDataType CUDA_R_32F */
  TS__CUDA_R_16BF = 14,         /* CUDA_R_16BF */
  TS__CUDA_R_16F = 2,           /* CUDA_R_16F */
  TS__CUBLAS_COMPUTE_32F = 68,  /* CUBLAS_COMPUTE_32F (real f32: not _FAST_TF32) */
  TS__CUBLAS_COMPUTE_32F_FAST_TF32 = 77, /* f32 operands on TF32 tensor cores (float32_matmul_precision: high) */
  TS__CUBLAS_GEMM_DEFAULT = -1  /* CUBLAS_GEMM_DEFAULT */
};

typedef struct {
  ts__cublas_status (*Create)(ts__cublas_handle *h);
  ts__cublas_status (*Destroy)(ts__cublas_handle h);
  ts__cublas_status (*SetStream)(ts__cublas_handle h, void *stream);
  ts__cublas_status (*GemmStridedBatchedEx)(ts__cublas_handle h, int ta, int tb, int m, int n, int k, const void *alpha,
                                            const void *A, int Atype, int lda, long long sA, const void *B, int Btype,
                                            int ldb, long long sB, const void *beta, void *C, int Ctype, int ldc,
                                            long long sC, int batch, int compute, int algo);
} ts__cublas_api;

/* each member and the symbol loaded into it */
#define TS__CUBLAS_SYMBOLS(F)                                                                                         \
  F(Create, cublasCreate_v2) F(Destroy, cublasDestroy_v2) F(SetStream, cublasSetStream_v2)                           \
  F(GemmStridedBatchedEx, cublasGemmStridedBatchedEx)

#ifdef __cplusplus
}
#endif
#endif
