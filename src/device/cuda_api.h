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

/* The driver loaded and initialised once per process (thread-safe); NULL when it cannot be, with
 * the reason as the last error (TS_EUNSUPPORTED: "no NVIDIA driver on this machine (libcuda.so.1:
 * ...)", a missing entry point, or cuInit's error, e.g. CUDA_ERROR_NO_DEVICE). */
const ts__cuda_fns *ts__cuda_api(void);
/* The driver's name and text of r ("CUDA_ERROR_OUT_OF_MEMORY: out of memory") into buf. */
const char *ts__cuda_error(CUresult r, char *buf, size_t cap);

#endif
