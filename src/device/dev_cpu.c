/* The CPU as a device (dev.h): host memory, copies done at once (a stream is a name for "in
 * order", which the CPU's single thread of control already is), events timed by the clock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/dev.h"
#include "kernels/dnnl_ctx.h"

struct ts__dev_stream {
  int unused;
};
struct ts__dev_event {
  double t;
};

static int cpu_open(ts__dev *d, int id) {
  if (id != 0 && id != -1) return ts_error_set(TS_EUNSUPPORTED, "device_id %d: the CPU is device 0", id);
  memset(&d->info, 0, sizeof d->info);
  d->info.kind = TS_DEVICE_CPU;
  snprintf(d->info.name, sizeof d->info.name, "CPU");
  return TS_OK;
}
static void cpu_close(ts__dev *d) { (void)d; }
static int cpu_alloc(ts__dev *d, size_t bytes, void **p) {
  (void)d;
  size_t n = (bytes + 63) / 64 * 64;
  *p = aligned_alloc(64, n);
  return *p ? TS_OK : ts_error_set(TS_ENOMEM, "CPU: out of memory allocating %zu bytes", bytes);
}
static void cpu_free(ts__dev *d, void *p) {
  (void)d;
  free(p);
}
static int cpu_copy(ts__dev *d, void *dst, const void *src, size_t n, ts__copy_dir dir, ts__dev_stream *s) {
  (void)d, (void)dir, (void)s;
  memmove(dst, src, n);
  return TS_OK;
}
static int cpu_memset0(ts__dev *d, void *p, size_t n, ts__dev_stream *s) {
  (void)d, (void)s;
  memset(p, 0, n);
  return TS_OK;
}
static int cpu_stream_create(ts__dev *d, ts__dev_stream **s) {
  (void)d;
  *s = calloc(1, sizeof **s);
  return *s ? TS_OK : ts_error_set(TS_ENOMEM, "CPU: out of memory");
}
static int cpu_stream_sync(ts__dev *d, ts__dev_stream *s) {
  (void)d, (void)s;
  return TS_OK;
}
static void cpu_stream_destroy(ts__dev *d, ts__dev_stream *s) {
  (void)d;
  free(s);
}
static int cpu_event_create(ts__dev *d, ts__dev_event **e) {
  (void)d;
  *e = calloc(1, sizeof **e);
  return *e ? TS_OK : ts_error_set(TS_ENOMEM, "CPU: out of memory");
}
static int cpu_event_record(ts__dev *d, ts__dev_event *e, ts__dev_stream *s) {
  (void)d, (void)s;
  e->t = ts_time_now();
  return TS_OK;
}
static int cpu_stream_wait(ts__dev *d, ts__dev_stream *s, ts__dev_event *e) {
  (void)d, (void)s, (void)e;
  return TS_OK;
}
static int cpu_event_elapsed(ts__dev *d, ts__dev_event *a, ts__dev_event *b, double *ms) {
  (void)d;
  *ms = 1e3 * (b->t - a->t);
  return TS_OK;
}
static int cpu_event_sync(ts__dev *d, ts__dev_event *e) {
  (void)d, (void)e;
  return TS_OK;
}
static int cpu_event_query(ts__dev *d, ts__dev_event *e, int *done) {
  (void)d, (void)e;
  *done = 1;
  return TS_OK;
}
static void cpu_event_destroy(ts__dev *d, ts__dev_event *e) {
  (void)d;
  free(e);
}
static int cpu_mem_info(ts__dev *d, size_t *free_bytes, size_t *total) {
  (void)d;
  *free_bytes = *total = 0;
  return TS_OK;
}

const ts__dev_vt ts__dev_cpu = {
    .kind = TS_DEVICE_CPU,
    .open = cpu_open,
    .close = cpu_close,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .copy = cpu_copy,
    .memset0 = cpu_memset0,
    .stream_create = cpu_stream_create,
    .stream_sync = cpu_stream_sync,
    .stream_destroy = cpu_stream_destroy,
    .event_create = cpu_event_create,
    .event_record = cpu_event_record,
    .stream_wait = cpu_stream_wait,
    .event_elapsed = cpu_event_elapsed,
    .event_sync = cpu_event_sync,
    .event_query = cpu_event_query,
    .event_destroy = cpu_event_destroy,
    .mem_info = cpu_mem_info,
};

int ts__dev_cpu_query(int id, ts_device_info *out) {
  snprintf(out->name, sizeof out->name, "CPU");
  out->bf16 = ts__dnnl_bf16(); /* the kernels' own answer: their bf16 route follows it */
  return id == 0 ? TS_OK : ts_error_set(TS_EUNSUPPORTED, "device_id %d: the CPU is device 0", id);
}
