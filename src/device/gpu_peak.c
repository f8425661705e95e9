/* The GPU's measured GEMM peak, the denominator of the profiler's %peak column on a GPU (as the
 * sgemm calibration is on the CPU): square products through ts__gpu_gemm (cuBLAS where found,
 * else Tessera's kernel: whichever the plans run), timed with the device's events on its compute
 * stream. The size grows from 128 while one product takes under 1 ms (a GPU reaches its peak only
 * on large products; a slow device, the emulator among them, stops at once), up to 8192; then the
 * best of 3 batches of 5 products. Operands are a fixed pattern (not zeros: a GPU's clocks and
 * power differ on zeros). */
#include <stdlib.h>

#include "device/gpu_kernels.h"

static int fill(ts__dev *d, void *dst, ts_dtype dt, int64_t numel) {
  size_t es = ts_dtype_size(dt), bytes = (size_t)numel * es;
  void *h = malloc(bytes);
  if (!h) return ts_error_set(TS_ENOMEM, "GPU GEMM peak: out of memory (%zu bytes)", bytes);
  for (int64_t i = 0; i < numel; i++) {
    float v = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
    if (dt == TS_BF16) ((uint16_t *)h)[i] = ts_f32_to_bf16(v);
    else ((float *)h)[i] = v;
  }
  int rc = ts__dev_copy(d, dst, h, bytes, TS__H2D, NULL);
  if (!rc) rc = ts__dev_sync(d);
  free(h);
  return rc;
}

/* ms of `reps` n^3 products (events around them on the compute stream) */
static int timed(ts__dev *d, int64_t n, ts_dtype dt, const void *a, const void *b, void *c, int reps,
                 ts__dev_event *e0, ts__dev_event *e1, double *ms) {
  ts__mm_desc m = {1, n, n, n, 0, 0, 0, 0};
  int rc = ts__dev_event_record(d, e0, NULL);
  for (int r = 0; !rc && r < reps; r++) rc = ts__gpu_gemm(d, &m, dt, dt, a, b, NULL, c, NULL);
  if (!rc) rc = ts__dev_event_record(d, e1, NULL);
  if (!rc) rc = ts__dev_sync(d);
  if (!rc) rc = ts__dev_event_elapsed(d, e0, e1, ms);
  return rc;
}

int ts__gpu_gemm_peak(ts__dev *d, ts_dtype dt, int64_t *n_out, double *gflops) {
  *gflops = 0;
  *n_out = 0;
  if (dt != TS_F32 && dt != TS_BF16)
    return ts_error_set(TS_EDTYPE, "GPU GEMM peak: %s (f32 or bf16)", ts_dtype_name(dt));
  ts__dev_event *e0 = NULL, *e1 = NULL;
  void *a = NULL, *b = NULL, *c = NULL;
  int64_t n = 128;
  double ms = 0, best = 0;
  int rc = ts__dev_event_create(d, &e0);
  if (!rc) rc = ts__dev_event_create(d, &e1);
  for (;;) {
    size_t bytes = (size_t)(n * n) * ts_dtype_size(dt);
    if (!rc) rc = ts__dev_alloc(d, bytes, &a);
    if (!rc) rc = ts__dev_alloc(d, bytes, &b);
    if (!rc) rc = ts__dev_alloc(d, bytes, &c);
    if (!rc) rc = fill(d, a, dt, n * n);
    if (!rc) rc = fill(d, b, dt, n * n);
    if (!rc) rc = timed(d, n, dt, a, b, c, 1, e0, e1, &ms); /* warm-up: the kernel's load, the library's choice */
    if (!rc) rc = timed(d, n, dt, a, b, c, 1, e0, e1, &ms);
    if (rc || ms >= 1.0 || n >= 8192) break;
    ts__dev_free(d, a), ts__dev_free(d, b), ts__dev_free(d, c);
    a = b = c = NULL;
    n *= 2;
  }
  for (int rep = 0; !rc && rep < 3; rep++) {
    if ((rc = timed(d, n, dt, a, b, c, 5, e0, e1, &ms))) break;
    double gf = ms > 0 ? 5 * 2.0 * (double)n * (double)n * (double)n / (ms * 1e-3) / 1e9 : 0;
    best = gf > best ? gf : best;
  }
  if (a) ts__dev_free(d, a);
  if (b) ts__dev_free(d, b);
  if (c) ts__dev_free(d, c);
  if (e0) ts__dev_event_destroy(d, e0);
  if (e1) ts__dev_event_destroy(d, e1);
  if (rc) return ts_error_wrap(rc, "GPU GEMM peak (%s, %lld^3)", ts_dtype_name(dt), (long long)n);
  *gflops = best;
  *n_out = n;
  return TS_OK;
}
