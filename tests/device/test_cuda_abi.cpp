// Tessera declares the C ABIs of NVIDIA's libraries itself (no CUDA install is needed to build):
// src/device/cuda_api.h (the driver), cublas_abi.h, cudnn_abi.h, nccl_abi.h. Where a CUDA toolkit with cuDNN
// is installed (CMake finds cudnn.h; elsewhere the test is SKIPPED), this checks every
// declaration against NVIDIA's own headers: each entry point's parameter count, each parameter's
// and the result's kind (pointer, integer or enum, floating point) and size; the enum values; the
// cuDNN perf struct's size and field offsets; and that every symbol Tessera loads is exported by
// NVIDIA's libraries (the driver's link stub, cuBLAS, cuDNN) where CMake found them. A
// declaration that disagrees would pass every stand-in test and corrupt the stack on a GPU.
#include <cublas_v2.h>
#include <cudnn.h>
#include <dlfcn.h>

#include <cstddef>
#include <cstdio>
#include <cstring>

#include "abi_check.h"
#include "device/cublas_abi.h"
#include "device/cudnn_abi.h"

void abi_report::symbol(void *lib, const char *name) {
  if (!lib) return;
  char m[200];
  std::snprintf(m, sizeof m, "%s: not exported by NVIDIA's library", name);
  check(dlsym(lib, name) != nullptr, m);
}

template <class P> static void perf_layout(abi_report *r, const char *what) {
  char m[160];
  std::snprintf(m, sizeof m, "%s: ts__dnn_perf's layout differs", what);
  r->check(sizeof(P) == sizeof(ts__dnn_perf) && offsetof(P, algo) == offsetof(ts__dnn_perf, algo) &&
               offsetof(P, status) == offsetof(ts__dnn_perf, status) &&
               offsetof(P, time) == offsetof(ts__dnn_perf, time) &&
               offsetof(P, memory) == offsetof(ts__dnn_perf, memory) &&
               offsetof(P, determinism) == offsetof(ts__dnn_perf, determinism) &&
               offsetof(P, mathType) == offsetof(ts__dnn_perf, mathType) && sizeof(P::memory) == sizeof(size_t) &&
               sizeof(P::algo) == sizeof(int) && sizeof(P::mathType) == sizeof(int),
           m);
}

static void *open_lib(const char *path, const char *what) {
  if (!path || !*path) {
    std::printf("note: %s not found by CMake: its symbols unchecked\n", what);
    return nullptr;
  }
  void *h = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
  if (!h) std::printf("note: %s (%s) does not load here (%s): its symbols unchecked\n", what, path, dlerror());
  return h;
}

int main() {
  abi_report r;
  r.libcuda = open_lib(TS_LIBCUDA_STUB, "the driver's link stub (libcuda.so)");
  r.libcublas = open_lib(TS_LIBCUBLAS, "cuBLAS");
  r.libcudnn = open_lib(TS_LIBCUDNN, "cuDNN");
  // cuDNN
#define F(member, sym)                                                                                                \
  r.check(same_abi((decltype(ts__dnn_api::member)) nullptr, (decltype(&sym)) nullptr),                               \
          #sym ": Tessera's declaration differs from cudnn.h's");                                                    \
  r.symbol(r.libcudnn, #sym);
  TS__DNN_SYMBOLS(F)
#undef F
  perf_layout<cudnnConvolutionFwdAlgoPerf_t>(&r, "cudnnConvolutionFwdAlgoPerf_t");
  perf_layout<cudnnConvolutionBwdDataAlgoPerf_t>(&r, "cudnnConvolutionBwdDataAlgoPerf_t");
  perf_layout<cudnnConvolutionBwdFilterAlgoPerf_t>(&r, "cudnnConvolutionBwdFilterAlgoPerf_t");
  r.check((int)TS__DNN_DATA_FLOAT == (int)CUDNN_DATA_FLOAT && (int)TS__DNN_DATA_BFLOAT16 == (int)CUDNN_DATA_BFLOAT16 &&
              (int)TS__DNN_DATA_HALF == (int)CUDNN_DATA_HALF,
          "cudnnDataType_t values");
  r.check((int)TS__DNN_NCHW == (int)CUDNN_TENSOR_NCHW && (int)TS__DNN_NHWC == (int)CUDNN_TENSOR_NHWC && (int)TS__DNN_CROSS_CORRELATION == (int)CUDNN_CROSS_CORRELATION,
          "cudnnTensorFormat_t and cudnnConvolutionMode_t values");
  r.check((int)TS__DNN_DEFAULT_MATH == (int)CUDNN_DEFAULT_MATH && (int)TS__DNN_TENSOR_OP_MATH == (int)CUDNN_TENSOR_OP_MATH &&
              (int)TS__DNN_TENSOR_OP_MATH_ALLOW_CONVERSION == (int)CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
              (int)TS__DNN_FMA_MATH == (int)CUDNN_FMA_MATH,
          "cudnnMathType_t values");
  r.check((int)TS__DNN_DETERMINISTIC == (int)CUDNN_DETERMINISTIC, "cudnnDeterminism_t values");
  r.check(sizeof(cudnnStatus_t) == sizeof(ts__dnn_status), "cudnnStatus_t size");
  // cuBLAS (its C++ overloads, e.g. a legacy computeType as cudaDataType, need the C prototype
  // spelled out with the header's own types: overload resolution then checks it exists)
  using gemm_ex_t = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                                       const void *, cudaDataType, int, long long, const void *, cudaDataType, int,
                                       long long, const void *, void *, cudaDataType, int, long long, int,
                                       cublasComputeType_t, cublasGemmAlgo_t);
// (decltype: unevaluated, so nothing here references NVIDIA's symbols at link time)
#define CUBLAS_FN_cublasCreate_v2 (decltype(&cublasCreate_v2)) nullptr
#define CUBLAS_FN_cublasDestroy_v2 (decltype(&cublasDestroy_v2)) nullptr
#define CUBLAS_FN_cublasSetStream_v2 (decltype(&cublasSetStream_v2)) nullptr
#define CUBLAS_FN_cublasGemmStridedBatchedEx (decltype(static_cast<gemm_ex_t>(&cublasGemmStridedBatchedEx))) nullptr
#define F(member, sym)                                                                                                \
  r.check(same_abi((decltype(ts__cublas_api::member)) nullptr, CUBLAS_FN_##sym),                                     \
          #sym ": Tessera's declaration differs from cublas_api.h's");                                               \
  r.symbol(r.libcublas, #sym);
  TS__CUBLAS_SYMBOLS(F)
#undef F
  r.check((int)TS__CUBLAS_OP_N == (int)CUBLAS_OP_N && (int)TS__CUBLAS_OP_T == (int)CUBLAS_OP_T, "cublasOperation_t values");
  r.check((int)TS__CUDA_R_32F == (int)CUDA_R_32F && (int)TS__CUDA_R_16BF == (int)CUDA_R_16BF &&
              (int)TS__CUDA_R_16F == (int)CUDA_R_16F, "cudaDataType values");
  r.check((int)TS__CUBLAS_COMPUTE_32F == (int)CUBLAS_COMPUTE_32F && (int)TS__CUBLAS_GEMM_DEFAULT == (int)CUBLAS_GEMM_DEFAULT &&
              (int)TS__CUBLAS_COMPUTE_32F_FAST_TF32 == (int)CUBLAS_COMPUTE_32F_FAST_TF32,
          "cublasComputeType_t and cublasGemmAlgo_t values");
  // the driver (its own translation unit: cuda.h's type names clash with Tessera's)
  check_driver(&r);
  check_nccl(&r, open_lib(TS_LIBNCCL, "NCCL"));
  std::printf("checked against the headers of cuDNN %d.%d.%d, cuBLAS %d.%d and CUDA's runtime %d\ntest_cuda_abi: %d checks, %d failures\n",
              CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL, CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUDART_VERSION, r.checks,
              r.failures);
  return r.failures ? 1 : 0;
}
