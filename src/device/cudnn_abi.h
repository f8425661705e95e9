/* The part of cuDNN's C ABI Tessera uses (cudnn.h of cuDNN 8 and 9: the legacy convolution API),
 * declared here because no CUDA install is needed to build: handles and descriptors as opaque
 * pointers, enums as int, the stream as the driver's CUstream (a pointer). src/device/cudnn.c
 * loads these entry points at run time; tests/device/test_cuda_abi.cpp checks every declaration
 * here against NVIDIA's own headers where they are installed (parameter count, and each
 * parameter's and result's kind and size; the enum values; the perf struct's layout). */
#ifndef TS_DEVICE_CUDNN_ABI_H
#define TS_DEVICE_CUDNN_ABI_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int ts__dnn_status;
typedef void *ts__dnn_handle, *ts__dnn_tensor, *ts__dnn_filter, *ts__dnn_conv;
/* cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t: the same layout for the three */
typedef struct {
  int algo;
  ts__dnn_status status;
  float time;
  size_t memory;
  int determinism;
  int mathType;
  int reserved[3];
} ts__dnn_perf;

enum {
  TS__DNN_DATA_FLOAT = 0,      /* CUDNN_DATA_FLOAT */
  TS__DNN_DATA_BFLOAT16 = 9,   /* CUDNN_DATA_BFLOAT16 */
  TS__DNN_DATA_HALF = 2,       /* CUDNN_DATA_HALF */
  TS__DNN_NCHW = 0,            /* CUDNN_TENSOR_NCHW */
  TS__DNN_NHWC = 1,            /* CUDNN_TENSOR_NHWC */
  TS__DNN_CROSS_CORRELATION = 1,
  TS__DNN_DEFAULT_MATH = 0,
  TS__DNN_TENSOR_OP_MATH = 1,
  TS__DNN_TENSOR_OP_MATH_ALLOW_CONVERSION = 2,
  TS__DNN_FMA_MATH = 3,
  TS__DNN_DETERMINISTIC = 1    /* CUDNN_DETERMINISTIC */
};

/* the entry points */
typedef struct {
  size_t (*GetVersion)(void);
  const char *(*GetErrorString)(ts__dnn_status);
  ts__dnn_status (*Create)(ts__dnn_handle *);
  ts__dnn_status (*SetStream)(ts__dnn_handle, void *stream);
  ts__dnn_status (*CreateTensorDescriptor)(ts__dnn_tensor *);
  ts__dnn_status (*SetTensor4dDescriptor)(ts__dnn_tensor, int format, int dt, int n, int c, int h, int w);
  ts__dnn_status (*DestroyTensorDescriptor)(ts__dnn_tensor);
  ts__dnn_status (*CreateFilterDescriptor)(ts__dnn_filter *);
  ts__dnn_status (*SetFilter4dDescriptor)(ts__dnn_filter, int dt, int format, int k, int c, int h, int w);
  ts__dnn_status (*DestroyFilterDescriptor)(ts__dnn_filter);
  ts__dnn_status (*CreateConvolutionDescriptor)(ts__dnn_conv *);
  ts__dnn_status (*SetConvolution2dDescriptor)(ts__dnn_conv, int ph, int pw, int sh, int sw, int dh, int dw, int mode,
                                               int compute);
  ts__dnn_status (*SetConvolutionGroupCount)(ts__dnn_conv, int groups);
  ts__dnn_status (*SetConvolutionMathType)(ts__dnn_conv, int math);
  ts__dnn_status (*DestroyConvolutionDescriptor)(ts__dnn_conv);
  ts__dnn_status (*GetFwdAlgo)(ts__dnn_handle, ts__dnn_tensor x, ts__dnn_filter w, ts__dnn_conv, ts__dnn_tensor y,
                               int want, int *got, ts__dnn_perf *perf);
  ts__dnn_status (*GetFwdWs)(ts__dnn_handle, ts__dnn_tensor x, ts__dnn_filter w, ts__dnn_conv, ts__dnn_tensor y,
                             int algo, size_t *bytes);
  ts__dnn_status (*Fwd)(ts__dnn_handle, const void *alpha, ts__dnn_tensor xd, const void *x, ts__dnn_filter wd,
                        const void *w, ts__dnn_conv, int algo, void *ws, size_t wsb, const void *beta,
                        ts__dnn_tensor yd, void *y);
  ts__dnn_status (*GetBwdDataAlgo)(ts__dnn_handle, ts__dnn_filter w, ts__dnn_tensor dy, ts__dnn_conv,
                                   ts__dnn_tensor dx, int want, int *got, ts__dnn_perf *perf);
  ts__dnn_status (*GetBwdDataWs)(ts__dnn_handle, ts__dnn_filter w, ts__dnn_tensor dy, ts__dnn_conv, ts__dnn_tensor dx,
                                 int algo, size_t *bytes);
  ts__dnn_status (*BwdData)(ts__dnn_handle, const void *alpha, ts__dnn_filter wd, const void *w, ts__dnn_tensor dyd,
                            const void *dy, ts__dnn_conv, int algo, void *ws, size_t wsb, const void *beta,
                            ts__dnn_tensor dxd, void *dx);
  ts__dnn_status (*GetBwdFilterAlgo)(ts__dnn_handle, ts__dnn_tensor x, ts__dnn_tensor dy, ts__dnn_conv,
                                     ts__dnn_filter dw, int want, int *got, ts__dnn_perf *perf);
  ts__dnn_status (*GetBwdFilterWs)(ts__dnn_handle, ts__dnn_tensor x, ts__dnn_tensor dy, ts__dnn_conv,
                                   ts__dnn_filter dw, int algo, size_t *bytes);
  ts__dnn_status (*BwdFilter)(ts__dnn_handle, const void *alpha, ts__dnn_tensor xd, const void *x, ts__dnn_tensor dyd,
                              const void *dy, ts__dnn_conv, int algo, void *ws, size_t wsb, const void *beta,
                              ts__dnn_filter dwd, void *dw);
} ts__dnn_api;

/* each member and the symbol loaded into it */
#define TS__DNN_SYMBOLS(F)                                                                                            \
  F(GetVersion, cudnnGetVersion) F(GetErrorString, cudnnGetErrorString) F(Create, cudnnCreate)                       \
  F(SetStream, cudnnSetStream) F(CreateTensorDescriptor, cudnnCreateTensorDescriptor)                                \
  F(SetTensor4dDescriptor, cudnnSetTensor4dDescriptor) F(DestroyTensorDescriptor, cudnnDestroyTensorDescriptor)      \
  F(CreateFilterDescriptor, cudnnCreateFilterDescriptor) F(SetFilter4dDescriptor, cudnnSetFilter4dDescriptor)        \
  F(DestroyFilterDescriptor, cudnnDestroyFilterDescriptor)                                                           \
  F(CreateConvolutionDescriptor, cudnnCreateConvolutionDescriptor)                                                   \
  F(SetConvolution2dDescriptor, cudnnSetConvolution2dDescriptor)                                                     \
  F(SetConvolutionGroupCount, cudnnSetConvolutionGroupCount) F(SetConvolutionMathType, cudnnSetConvolutionMathType)  \
  F(DestroyConvolutionDescriptor, cudnnDestroyConvolutionDescriptor)                                                 \
  F(GetFwdAlgo, cudnnGetConvolutionForwardAlgorithm_v7) F(GetFwdWs, cudnnGetConvolutionForwardWorkspaceSize)         \
  F(Fwd, cudnnConvolutionForward) F(GetBwdDataAlgo, cudnnGetConvolutionBackwardDataAlgorithm_v7)                     \
  F(GetBwdDataWs, cudnnGetConvolutionBackwardDataWorkspaceSize) F(BwdData, cudnnConvolutionBackwardData)             \
  F(GetBwdFilterAlgo, cudnnGetConvolutionBackwardFilterAlgorithm_v7)                                                 \
  F(GetBwdFilterWs, cudnnGetConvolutionBackwardFilterWorkspaceSize) F(BwdFilter, cudnnConvolutionBackwardFilter)

#ifdef __cplusplus
}
#endif
#endif
