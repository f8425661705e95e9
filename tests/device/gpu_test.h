/* What the GPU kernel tests share (test_device.c, test_device_conv.c): a GPU under test, copies to
 * and from it, and the comparison with the CPU's result (skipped where the stand-in driver only
 * records launches). */
#ifndef TS_TESTS_GPU_TEST_H
#define TS_TESTS_GPU_TEST_H
#include <dlfcn.h>
#include <stddef.h>

#include "device/dev.h"
#include "test_util.h"

typedef struct {
  ts__dev *d;
  int fake;   /* the stand-in driver: kernels are not run, only launched */
  int cublas; /* GEMMs through cuBLAS (under the stand-in: fake_cublas.c, which computes them) */
  void *bnws; /* batch norm's workspace (ts__gpu_bn_workspace of the largest shape checked) */
} gpu;

static inline void *up(gpu *G, const void *h, size_t bytes) {
  void *p = NULL;
  CHECK_OK(ts__dev_alloc(G->d, bytes, &p));
  if (p && h) CHECK_OK(ts__dev_copy(G->d, p, h, bytes, TS__H2D, NULL));
  else if (p) CHECK_OK(ts__dev_memset0(G->d, p, bytes, NULL));
  return p;
}
static inline void down(gpu *G, void *h, const void *p, size_t bytes) {
  CHECK_OK(ts__dev_copy(G->d, h, p, bytes, TS__D2H, NULL));
  CHECK_OK(ts__dev_sync(G->d));
}

/* GPU result vs CPU reference: f32 within (atol, rtol); skipped under the stand-in */
static inline void same(gpu *G, const char *what, const float *got, const float *want, size_t n, double atol, double rtol) {
  if (G->fake) return;
  CHECK_CLOSE(got, want, n, atol, rtol, what);
}

/* The stand-in driver's end: every device allocation freed (its count of live ones, read through
 * fk, its dlopen handle), the device closed, the handle released. */
static inline void gpu_fake_close(ts__dev *d, void *fk) {
  int *live = fk ? (int *)dlsym(fk, "fake_cuda_live_allocs") : NULL;
  CHECK_MSG(live && *live == 0, "%d device allocations not freed", live ? *live : -1);
  ts__dev_close(d);
  if (fk) dlclose(fk);
}

#endif
