/* Internal: one device behind one interface (src/device/). The executor and the trainer ask an
 * opened device for memory, copies, streams and events; the CPU implementation (dev_cpu.c) does
 * them with host memory at once, the CUDA one (dev_cuda.c) through the driver (cuda_api.h) on
 * the GPU, asynchronously on streams. Device pointers are void * on both (a CUdeviceptr is 64
 * bits); on the CPU they are host pointers.
 *
 *   ts__dev *d;  ts__dev_open(TS_DEVICE_GPU, 0, &d);
 *   void *x;     ts__dev_alloc(d, bytes, &x);
 *   ts__dev_copy(d, x, host, bytes, TS__H2D, NULL);       // on the device's compute stream
 *   ts__cuda_launch(d, "ts_k_fill_f32", grid, block, 0, NULL, args, 3);   // GPU kernels (cuda/)
 *   ts__dev_copy(d, host, x, bytes, TS__D2H, NULL);  ts__dev_sync(d);
 *   ts__dev_free(d, x);  ts__dev_close(d);
 */
#ifndef TS_DEVICE_DEV_H
#define TS_DEVICE_DEV_H

#include <stddef.h>

#include "tessera/base.h"
#include "tessera/device.h"

typedef struct ts__dev ts__dev;
typedef struct ts__dev_stream ts__dev_stream;
typedef struct ts__dev_event ts__dev_event;

typedef enum { TS__H2D = 0, TS__D2H = 1, TS__D2D = 2 } ts__copy_dir;

/* The operations a device kind implements (dev_cpu.c, dev_cuda.c). */
typedef struct {
  ts_device_kind kind;
  int (*open)(ts__dev *d, int id); /* fills d->info and d->impl */
  void (*close)(ts__dev *d);
  int (*alloc)(ts__dev *d, size_t bytes, void **p);
  void (*free)(ts__dev *d, void *p);
  int (*host_alloc)(ts__dev *d, size_t bytes, void **p); /* pinned: copies from it overlap compute */
  void (*host_free)(ts__dev *d, void *p);
  int (*copy)(ts__dev *d, void *dst, const void *src, size_t n, ts__copy_dir dir, ts__dev_stream *s);
  int (*memset0)(ts__dev *d, void *p, size_t n, ts__dev_stream *s);
  int (*stream_create)(ts__dev *d, ts__dev_stream **s);
  int (*stream_sync)(ts__dev *d, ts__dev_stream *s);
  void (*stream_destroy)(ts__dev *d, ts__dev_stream *s);
  int (*event_create)(ts__dev *d, ts__dev_event **e);
  int (*event_record)(ts__dev *d, ts__dev_event *e, ts__dev_stream *s);
  int (*stream_wait)(ts__dev *d, ts__dev_stream *s, ts__dev_event *e);
  int (*event_elapsed)(ts__dev *d, ts__dev_event *a, ts__dev_event *b, double *ms);
  int (*event_sync)(ts__dev *d, ts__dev_event *e);
  int (*event_query)(ts__dev *d, ts__dev_event *e, int *done);
  void (*event_destroy)(ts__dev *d, ts__dev_event *e);
  int (*mem_info)(ts__dev *d, size_t *free_bytes, size_t *total);
} ts__dev_vt;

struct ts__dev {
  const ts__dev_vt *vt;
  ts_device_info info;
  unsigned char uuid[16]; /* the GPU's UUID (cuDeviceGetUuid_v2: a MIG instance's own); the CPU: 0 */
  void *impl;             /* the implementation's state */
  /* ts__dev_alloc's bookkeeping: each live allocation's size, the bytes live and their peak */
  struct ts__dev_block *blocks;
  size_t nblocks, cap_blocks, live_bytes, peak_bytes;
};

/* Opens device `id` of kind k (the GPU's primary context; the CPU: id 0). The errors of
 * ts_device_query (TS_EUNSUPPORTED with the reason), TS_ENOMEM. */
int ts__dev_open(ts_device_kind k, int id, ts__dev **out);
/* Waits for the device's work, releases what the device holds of it; NULL is fine. Memory not
 * freed by then is the caller's leak (the GPU's is returned with the context). */
void ts__dev_close(ts__dev *d);
/* Device memory of `bytes` (> 0) into *p; TS_ENOMEM naming the size and what is free. */
int ts__dev_alloc(ts__dev *d, size_t bytes, void **p);
void ts__dev_free(ts__dev *d, void *p);
/* Page-locked host memory (the CPU: ordinary memory). */
int ts__dev_host_alloc(ts__dev *d, size_t bytes, void **p);
void ts__dev_host_free(ts__dev *d, void *p);
/* Copies n bytes in direction dir, ordered on stream s (NULL: the device's compute stream); the
 * host side of an asynchronous copy must stay valid until the stream is synchronised. */
int ts__dev_copy(ts__dev *d, void *dst, const void *src, size_t n, ts__copy_dir dir, ts__dev_stream *s);
/* Zeroes n bytes of device memory, ordered on s. */
int ts__dev_memset0(ts__dev *d, void *p, size_t n, ts__dev_stream *s);
/* A stream of its own (a copy stream beside compute), its synchronisation, its end. */
int ts__dev_stream_create(ts__dev *d, ts__dev_stream **s);
int ts__dev_stream_sync(ts__dev *d, ts__dev_stream *s);
void ts__dev_stream_destroy(ts__dev *d, ts__dev_stream *s);
/* Events: recorded on a stream (NULL: compute), waited on by another, timed between two. */
int ts__dev_event_create(ts__dev *d, ts__dev_event **e);
int ts__dev_event_record(ts__dev *d, ts__dev_event *e, ts__dev_stream *s);
int ts__dev_stream_wait(ts__dev *d, ts__dev_stream *s, ts__dev_event *e);
/* Waits on the host until the work before e's last record has completed. */
int ts__dev_event_sync(ts__dev *d, ts__dev_event *e);
/* *done = 1 when that work has completed, 0 while it runs (never waits). */
int ts__dev_event_query(ts__dev *d, ts__dev_event *e, int *done);
/* Milliseconds between a and b once b completed (waits for it). */
int ts__dev_event_elapsed(ts__dev *d, ts__dev_event *a, ts__dev_event *b, double *ms);
void ts__dev_event_destroy(ts__dev *d, ts__dev_event *e);
/* Waits for all work on the compute stream. */
int ts__dev_sync(ts__dev *d);
/* The driver's figures of free and total device memory (the CPU: 0, 0). */
int ts__dev_mem_info(ts__dev *d, size_t *free_bytes, size_t *total);
/* Bytes of device memory ts__dev_alloc holds now and at most since the device was opened. */
void ts__dev_mem_counts(const ts__dev *d, size_t *live, size_t *peak);

/* GPU kernels (the .cu files of src/device/cuda/, compiled to PTX by every build and loaded by the driver at
 * the first launch): kernel `name` on device d (a GPU) with grid x block threads, `shmem` bytes of
 * dynamic shared memory, on stream s (NULL: compute), args[i] pointing at each parameter's value
 * (nargs of them: TS_EINVAL unless the kernel's PTX declares as many). TS_EUNSUPPORTED on the
 * CPU; TS_ENOTFOUND for an unknown kernel; the driver's error, naming the kernel, otherwise. */
int ts__cuda_launch(ts__dev *d, const char *name, const unsigned grid[3], const unsigned block[3], unsigned shmem,
                    ts__dev_stream *s, void **args, int nargs);

/* The CUstream of s (NULL: compute) on a GPU device, for libraries that take one (cuBLAS); NULL
 * on the CPU. */
void *ts__cuda_stream(ts__dev *d, ts__dev_stream *s);

extern const ts__dev_vt ts__dev_cpu, ts__dev_cuda;
/* ts_device_query's CPU part (out zeroed, kind and id set by the caller): its name, whether its
 * oneDNN computes bf16; TS_EUNSUPPORTED for an id other than 0. */
int ts__dev_cpu_query(int id, ts_device_info *out);

#endif
