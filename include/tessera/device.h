/* Tessera devices: where a job's graphs run (the config's device_target and device_id, as in
 * MindSpore's context). The CPU is the default and the reference; an NVIDIA GPU is reached
 * through the CUDA driver found at run time (libcuda.so.1), so one build serves machines with and
 * without one. docs/gpu.md says what runs on the GPU so far.
 *
 *   ts_device_info gi;
 *   if (ts_device_query(TS_DEVICE_GPU, 0, &gi)) puts(ts_last_error()); // why there is none
 *   else { char s[256]; ts_device_describe(&gi, s, sizeof s); puts(s); }
 */
#ifndef TESSERA_DEVICE_H
#define TESSERA_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TS_DEVICE_CPU = 0, TS_DEVICE_GPU = 1 } ts_device_kind;

/* The lowest compute capability Tessera's GPU kernels are built for (sm_80: A100, H100, H200). */
#define TS_GPU_MIN_CC_MAJOR 8

typedef struct {
  ts_device_kind kind;
  int id;
  char name[128];          /* "NVIDIA H200", or "CPU" */
  int cc_major, cc_minor;  /* GPU: compute capability */
  int sm_count;            /* GPU: multiprocessors */
  int64_t total_bytes;     /* GPU: device memory */
  int64_t free_bytes;      /* GPU: free device memory when queried (0 if not asked of the driver) */
  int driver_version;      /* GPU: the CUDA driver's version (13000 = 13.0) */
  int bf16;                /* 1: bf16 arithmetic in hardware (a GPU of compute capability 8.0 or newer; a
                            * CPU whose oneDNN computes bf16: AVX-512 cores); 0: bf16 runs as f32
                            * kernels with conversions around them (correct, slower than f32) */
} ts_device_info;

/* "CPU" or "GPU". */
const char *ts_device_kind_name(ts_device_kind k);
/* Devices of kind k this process can use into *n: 1 for the CPU; for GPUs the driver's count.
 * TS_EUNSUPPORTED with the reason in one line ("no NVIDIA driver on this machine (libcuda.so.1:
 * cannot open shared object file...)", "the NVIDIA driver does not start (cuInit: ...)") when
 * there is no GPU to use (*n = 0). */
int ts_device_count(ts_device_kind k, int *n);
/* What device `id` of kind k is, into *out. GPU: TS_EUNSUPPORTED with the reason as for
 * ts_device_count, or when id is not one of the GPUs ("GPU 3 of 2"), or its compute capability
 * is below TS_GPU_MIN_CC_MAJOR.0 ("compute capability 7.0, below 8.0"). */
int ts_device_query(ts_device_kind k, int id, ts_device_info *out);
/* One line: "GPU 0: NVIDIA H200, compute capability 9.0, 132 SMs, 139.8 GiB (driver 13.0)". */
void ts_device_describe(const ts_device_info *d, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
