/* A stand-in for the NVIDIA driver (libcuda.so.1) on machines without one, loaded through
 * TESSERA_LIBCUDA by tests/device/test_device.c: the entry points src/device/cuda_api.c loads,
 * over host memory. It lets the CPU machine run the GPU device's host side (context, memory,
 * copies, streams, events, module loading, launches) under the sanitizers, and checks what only
 * the driver would: that the PTX loads (its header), that a launched kernel exists in it and is
 * given as many parameters as its .entry declares. It runs no kernel (a launch records its name).
 * Its GPU is set by the environment, read at each call: FAKE_CUDA_INIT (cuInit's result, default
 * 0), FAKE_CUDA_COUNT (GPUs, default 1), FAKE_CUDA_CC ("major.minor", default 9.0).
 * Launches run the kernel itself, compiled for the host, through the emulator (emu.cpp: CUDA's
 * block and barrier semantics on fibers), so the GPU paths compute; FAKE_CUDA_EMULATE=0 only
 * records them. Not under AddressSanitizer (its stack checks and fiber switches do not mix):
 * there launches are recorded only, and fake_cuda_emulates says so. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, INVALID_IMAGE = 200, NOT_FOUND = 500, INVALID_HANDLE = 400 };

static int envi(const char *k, int def) {
  const char *v = getenv(k);
  return v && *v ? atoi(v) : def;
}

#include "emu.h"

#if defined(__SANITIZE_ADDRESS__)
#define NO_EMU 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NO_EMU 1
#endif
#endif
#ifndef NO_EMU
#define NO_EMU 0
#endif

/* what the tests ask of the stand-in (dlsym) */
char fake_cuda_last_kernel[160];
int fake_cuda_launches, fake_cuda_live_allocs;
/* 1 when launches run the kernels (the emulator), 0 when they are only recorded */
int fake_cuda_emulates = !NO_EMU;

CUresult cuInit(unsigned f) { (void)f; return envi("FAKE_CUDA_INIT", 0); }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return OK; }
CUresult cuDeviceGetCount(int *n) { *n = envi("FAKE_CUDA_COUNT", 1); return OK; }
CUresult cuDeviceGet(int *d, int i) {
  if (i < 0 || i >= envi("FAKE_CUDA_COUNT", 1)) return INVALID_VALUE;
  *d = i;
  return OK;
}
CUresult cuDeviceGetName(char *s, int n, int d) { snprintf(s, (size_t)n, "Fake GPU %d", d); return OK; }
CUresult cuDeviceGetAttribute(int *v, int a, int d) {
  (void)d;
  const char *cc = getenv("FAKE_CUDA_CC");
  int ma = 9, mi = 0;
  if (cc && *cc) sscanf(cc, "%d.%d", &ma, &mi);
  *v = a == 75 ? ma : a == 76 ? mi : a == 16 ? 4 : 0;
  return OK;
}
/* each GPU's UUID: "FAKEGPU" and its ordinal (two processes opening GPU 0 share it) */
CUresult cuDeviceGetUuid_v2(unsigned char u[16], int d) {
  memset(u, 0, 16);
  memcpy(u, "FAKEGPU", 7);
  u[15] = (unsigned char)d;
  return OK;
}
CUresult cuDeviceTotalMem_v2(size_t *b, int d) { (void)d; *b = (size_t)1 << 30; return OK; }
static int ctx_token;
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { (void)d; *c = &ctx_token; return OK; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return OK; }
CUresult cuCtxSetCurrent(void *c) { return c == &ctx_token ? OK : INVALID_HANDLE; }
CUresult cuCtxSynchronize(void) { return OK; }
CUresult cuMemGetInfo_v2(size_t *f, size_t *t) { *f = (size_t)1 << 29; *t = (size_t)1 << 30; return OK; }
CUresult cuMemAlloc_v2(unsigned long long *p, size_t n) {
  if (n > ((size_t)1 << 30)) return OUT_OF_MEMORY;
  void *x = malloc(n);
  if (!x) return OUT_OF_MEMORY;
  fake_cuda_live_allocs++;
  *p = (unsigned long long)(uintptr_t)x;
  return OK;
}
CUresult cuMemFree_v2(unsigned long long p) { fake_cuda_live_allocs--; free((void *)(uintptr_t)p); return OK; }
CUresult cuMemAllocHost_v2(void **p, size_t n) { *p = malloc(n); return *p ? OK : OUT_OF_MEMORY; }
CUresult cuMemFreeHost(void *p) { free(p); return OK; }
CUresult cuMemcpyHtoDAsync_v2(unsigned long long d, const void *s, size_t n, void *st) {
  (void)st;
  memcpy((void *)(uintptr_t)d, s, n);
  return OK;
}
CUresult cuMemcpyDtoHAsync_v2(void *d, unsigned long long s, size_t n, void *st) {
  (void)st;
  memcpy(d, (const void *)(uintptr_t)s, n);
  return OK;
}
CUresult cuMemcpyDtoDAsync_v2(unsigned long long d, unsigned long long s, size_t n, void *st) {
  (void)st;
  memmove((void *)(uintptr_t)d, (const void *)(uintptr_t)s, n);
  return OK;
}
CUresult cuMemsetD8Async(unsigned long long p, unsigned char v, size_t n, void *st) {
  (void)st;
  memset((void *)(uintptr_t)p, v, n);
  return OK;
}
typedef struct { int magic; } stream;
typedef struct { double t; } event;
CUresult cuStreamCreate(void **s, unsigned f) { (void)f; *s = calloc(1, sizeof(stream)); return OK; }
CUresult cuStreamSynchronize(void *s) { (void)s; return OK; }
CUresult cuStreamDestroy_v2(void *s) { free(s); return OK; }
CUresult cuStreamWaitEvent(void *s, void *e, unsigned f) { (void)s, (void)e, (void)f; return OK; }
CUresult cuEventCreate(void **e, unsigned f) { (void)f; *e = calloc(1, sizeof(event)); return OK; }
CUresult cuEventRecord(void *e, void *s) {
  (void)s;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ((event *)e)->t = ts.tv_sec + 1e-9 * ts.tv_nsec;
  return OK;
}
CUresult cuEventSynchronize(void *e) { (void)e; return OK; }
/* the stand-in's work is done when queued; FAKE_CUDA_EVENT_PENDING=1: never (a stalled stream) */
CUresult cuEventQuery(void *e) { (void)e; return envi("FAKE_CUDA_EVENT_PENDING", 0) ? 600 : OK; }
CUresult cuEventElapsedTime(float *ms, void *a, void *b) { *ms = (float)(1e3 * (((event *)b)->t - ((event *)a)->t)); return OK; }
CUresult cuEventDestroy_v2(void *e) { free(e); return OK; }

/* a module: its PTX text; a function: its entry's name and parameter count */
typedef struct { const char *ptx; } module;
typedef struct { char name[128]; int nparams; ts_emu_fn emu; } function;
CUresult cuModuleLoadDataEx(void **m, const void *image, unsigned n, int *o, void **v) {
  (void)n, (void)o, (void)v;
  const char *p = image;
  if (!strstr(p, ".version ") || !strstr(p, ".target sm_") || !strstr(p, ".address_size 64")) return INVALID_IMAGE;
  module *x = malloc(sizeof *x);
  x->ptx = p;
  *m = x;
  return OK;
}
CUresult cuModuleUnload(void *m) { free(m); return OK; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
  char want[160];
  snprintf(want, sizeof want, ".entry %s(", name);
  const char *e = strstr(((module *)m)->ptx, want);
  if (!e) return NOT_FOUND;
  const char *end = strchr(e, ')');
  static function fns[512]; /* no allocation: nothing for a leak checker to find */
  static int nfns;
  for (int i = 0; i < nfns; i++)
    if (!strcmp(fns[i].name, name)) {
      *f = &fns[i];
      return OK;
    }
  if (nfns == 512) return OUT_OF_MEMORY;
  function *fn = &fns[nfns++];
  snprintf(fn->name, sizeof fn->name, "%s", name);
  fn->nparams = 0;
  for (const char *q = strstr(e, ".param"); q && q < end; q = strstr(q + 1, ".param")) fn->nparams++;
  fn->emu = ts_emu_find(name);
  *f = fn;
  return OK;
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned sh, void *s, void **params, void **extra) {
  (void)s, (void)extra;
  function *fn = f;
  if (!gx || !gy || !gz || !bx || !by || !bz || bx * by * bz > 1024 || sh > 232448 || gy > 65535 || gz > 65535)
    return INVALID_VALUE;
  for (int i = 0; i < fn->nparams; i++)
    if (!params || !params[i]) return INVALID_VALUE;
  /* (that the launcher gave exactly nparams is checked by src/device/dev_cuda.c itself) */
  snprintf(fake_cuda_last_kernel, sizeof fake_cuda_last_kernel, "%.120s:%d", fn->name, fn->nparams);
  fake_cuda_launches++;
  const char *e = getenv("FAKE_CUDA_EMULATE");
  fake_cuda_emulates = !NO_EMU && !(e && !strcmp(e, "0"));
  if (fake_cuda_emulates) {
    if (!fn->emu) return NOT_FOUND; /* a kernel of the PTX the emulator was not built with */
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    if (ts_emu_launch(fn->emu, params, grid, block)) return INVALID_VALUE;
  }
  return OK;
}
CUresult cuGetErrorName(CUresult r, const char **s) {
  *s = r == 100 ? "CUDA_ERROR_NO_DEVICE" : r == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_FAKE";
  return OK;
}
CUresult cuGetErrorString(CUresult r, const char **s) {
  *s = r == 100 ? "no CUDA-capable device is detected" : r == 2 ? "out of memory" : "an error of the stand-in driver";
  return OK;
}
