/* Internal: the CUDA driver API, reached at run time (dlopen of libcuda.so.1), so one build runs
 * on machines with and without an NVIDIA driver and compiles without a CUDA install. Only what
 * Tessera calls is declared, with the driver's C ABI (cuda.h of CUDA 11..13: these entry points
 * and their _v2 names are stable). */
#ifndef TS_DEVICE_CUDA_API_H
#define TS_DEVICE_CUDA_API_H

#include <stddef.h>

typedef int CUresult; /* CUDA_SUCCESS = 0 */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

enum {
  TS__CU_ATTR_SM_COUNT = 16,      /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
  TS__CU_ATTR_CC_MAJOR = 75,      /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
  TS__CU_ATTR_CC_MINOR = 76,      /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR */
  TS__CU_STREAM_NON_BLOCKING = 1, /* CU_STREAM_NON_BLOCKING */
  TS__CU_EVENT_DEFAULT = 0,
  TS__CU_EVENT_DISABLE_TIMING = 2,
  TS__CU_JIT_ERROR_LOG_BUFFER = 5,            /* CU_JIT_ERROR_LOG_BUFFER */
  TS__CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6, /* CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES */
};

/* The driver's entry points, filled by ts__cuda_api(). */
typedef struct {
  CUresult (*Init)(unsigned flags);
  CUresult (*DriverGetVersion)(int *v);
  CUresult (*DeviceGetCount)(int *n);
  CUresult (*DeviceGet)(CUdevice *d, int ordinal);
  CUresult (*DeviceGetName)(char *name, int len, CUdevice d);
  CUresult (*DeviceGetUuid)(unsigned char uuid[16], CUdevice d);          /* _v2 (CUuuid: 16 bytes) */
  CUresult (*DeviceGetAttribute)(int *v, int attr, CUdevice d);
  CUresult (*DeviceTotalMem)(size_t *bytes, CUdevice d);                  /* cuDeviceTotalMem_v2 */
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *c, CUdevice d);
  CUresult (*DevicePrimaryCtxRelease)(CUdevice d);                        /* _v2 */
  CUresult (*CtxSetCurrent)(CUcontext c);
  CUresult (*CtxSynchronize)(void);
  CUresult (*MemGetInfo)(size_t *free_bytes, size_t *total);              /* _v2 */
  CUresult (*MemAlloc)(CUdeviceptr *p, size_t bytes);                     /* _v2 */
  CUresult (*MemFree)(CUdeviceptr p);                                     /* _v2 */
  CUresult (*MemAllocHost)(void **p, size_t bytes);                       /* _v2 */
  CUresult (*MemFreeHost)(void *p);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t n, CUstream s); /* _v2 */
  CUresult (*MemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t n, CUstream s);       /* _v2 */
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s); /* _v2 */
  CUresult (*MemsetD8Async)(CUdeviceptr p, unsigned char v, size_t n, CUstream s);
  CUresult (*StreamCreate)(CUstream *s, unsigned flags);
  CUresult (*StreamSynchronize)(CUstream s);
  CUresult (*StreamDestroy)(CUstream s);                                  /* _v2 */
  CUresult (*StreamWaitEvent)(CUstream s, CUevent e, unsigned flags);
  CUresult (*EventCreate)(CUevent *e, unsigned flags);
  CUresult (*EventRecord)(CUevent e, CUstream s);
  CUresult (*EventSynchronize)(CUevent e);
  CUresult (*EventQuery)(CUevent e); /* CUDA_SUCCESS done, CUDA_ERROR_NOT_READY (600) not yet */
  CUresult (*EventElapsedTime)(float *ms, CUevent start, CUevent end);
  CUresult (*EventDestroy)(CUevent e);                                    /* _v2 */
  CUresult (*ModuleLoadDataEx)(CUmodule *m, const void *image, unsigned n, int *opts, void **vals);
  CUresult (*ModuleGetFunction)(CUfunction *f, CUmodule m, const char *name);
  CUresult (*ModuleUnload)(CUmodule m);
  CUresult (*LaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                           unsigned bz, unsigned shmem, CUstream s, void **params, void **extra);
  CUresult (*GetErrorName)(CUresult r, const char **s);
  CUresult (*GetErrorString)(CUresult r, const char **s);
} ts__cuda_fns;

/* Each member of ts__cuda_fns and the driver's symbol loaded into it (the _v2 names where cuda.h
 * maps the plain name to one): cuda_api.c loads them; tests/device/test_cuda_abi.cpp checks each
 * member's prototype against cuda.h's and each symbol in NVIDIA's libcuda stub, where installed. */
#define TS__CUDA_SYMBOLS(F)                                                                                           \
  F(Init, cuInit) F(DriverGetVersion, cuDriverGetVersion) F(DeviceGetCount, cuDeviceGetCount)                        \
  F(DeviceGet, cuDeviceGet) F(DeviceGetName, cuDeviceGetName) F(DeviceGetUuid, cuDeviceGetUuid_v2)                  \
  F(DeviceGetAttribute, cuDeviceGetAttribute)                                                                         \
  F(DeviceTotalMem, cuDeviceTotalMem_v2) F(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain)                         \
  F(DevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2) F(CtxSetCurrent, cuCtxSetCurrent)                         \
  F(CtxSynchronize, cuCtxSynchronize) F(MemGetInfo, cuMemGetInfo_v2) F(MemAlloc, cuMemAlloc_v2)                      \
  F(MemFree, cuMemFree_v2) F(MemAllocHost, cuMemAllocHost_v2) F(MemFreeHost, cuMemFreeHost)                          \
  F(MemcpyHtoDAsync, cuMemcpyHtoDAsync_v2) F(MemcpyDtoHAsync, cuMemcpyDtoHAsync_v2)                                  \
  F(MemcpyDtoDAsync, cuMemcpyDtoDAsync_v2) F(MemsetD8Async, cuMemsetD8Async) F(StreamCreate, cuStreamCreate)         \
  F(StreamSynchronize, cuStreamSynchronize) F(StreamDestroy, cuStreamDestroy_v2)                                     \
  F(StreamWaitEvent, cuStreamWaitEvent) F(EventCreate, cuEventCreate) F(EventRecord, cuEventRecord)                  \
  F(EventSynchronize, cuEventSynchronize) F(EventQuery, cuEventQuery) F(EventElapsedTime, cuEventElapsedTime) F(EventDestroy, cuEventDestroy_v2) \
  F(ModuleLoadDataEx, cuModuleLoadDataEx) F(ModuleGetFunction, cuModuleGetFunction) F(ModuleUnload, cuModuleUnload)  \
  F(LaunchKernel, cuLaunchKernel) F(GetErrorName, cuGetErrorName) F(GetErrorString, cuGetErrorString)

/* A library's entry points into a struct of function pointers (each entry made from an X-macro's
 * F(member, symbol): {#symbol, offsetof(struct, member)}): the address of want[i].name in h is
 * stored at want[i].off of table; returns the first name h does not export (table then partly
 * filled), or NULL. Shared by the driver's, cuBLAS's and NCCL's loaders. */
typedef struct {
  const char *name;
  size_t off;
} ts__dl_sym;
const char *ts__dl_fill(void *h, const ts__dl_sym *want, size_t n, void *table);

/* The driver loaded and initialised once per process (thread-safe); NULL when it cannot be, with
 * the reason as the last error (TS_EUNSUPPORTED: "no NVIDIA driver on this machine (libcuda.so.1:
 * ...)", a missing entry point, or cuInit's error, e.g. CUDA_ERROR_NO_DEVICE). */
const ts__cuda_fns *ts__cuda_api(void);
/* The driver's name and text of r ("CUDA_ERROR_OUT_OF_MEMORY: out of memory") into buf. */
const char *ts__cuda_error(CUresult r, char *buf, size_t cap);

#endif
