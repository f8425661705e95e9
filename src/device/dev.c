/* The device interface (dev.h) over its implementations, and the public device queries
 * (tessera/device.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/dev.h"

const char *ts_device_kind_name(ts_device_kind k) { return k == TS_DEVICE_GPU ? "GPU" : "CPU"; }

void ts_device_describe(const ts_device_info *d, char *buf, size_t cap) {
  if (!buf || !cap) return;
  if (d->kind == TS_DEVICE_CPU) {
    snprintf(buf, cap, d->bf16 ? "CPU (bf16 in hardware)" : "CPU (no bf16 in hardware: bf16 runs on f32 kernels)");
    return;
  }
  snprintf(buf, cap, "GPU %d: %s, compute capability %d.%d, %d SMs, %.1f GiB (driver %d.%d)", d->id, d->name,
           d->cc_major, d->cc_minor, d->sm_count, (double)d->total_bytes / (1 << 30), d->driver_version / 1000,
           d->driver_version % 1000 / 10);
}

static const ts__dev_vt *vt_of(ts_device_kind k) { return k == TS_DEVICE_GPU ? &ts__dev_cuda : &ts__dev_cpu; }

int ts__dev_open(ts_device_kind k, int id, ts__dev **out) {
  *out = NULL;
  ts__dev *d = calloc(1, sizeof *d);
  if (!d) return ts_error_set(TS_ENOMEM, "device: out of memory");
  d->vt = vt_of(k);
  int rc = d->vt->open(d, id);
  if (rc) {
    free(d);
    return rc;
  }
  *out = d;
  return TS_OK;
}

void ts__dev_close(ts__dev *d) {
  if (!d) return;
  d->vt->close(d);
  free(d->blocks);
  free(d);
}

struct ts__dev_block {
  void *p;
  size_t n;
};

int ts__dev_alloc(ts__dev *d, size_t bytes, void **p) {
  *p = NULL;
  if (!bytes) return ts_error_set(TS_EINVAL, "device alloc: 0 bytes");
  if (d->nblocks == d->cap_blocks) { /* a few hundred at most: the store, the plans' arenas, scratch */
    size_t nc = d->cap_blocks ? 2 * d->cap_blocks : 64;
    struct ts__dev_block *nb = realloc(d->blocks, nc * sizeof *nb);
    if (!nb) return ts_error_set(TS_ENOMEM, "device alloc: out of memory (bookkeeping)");
    d->blocks = nb, d->cap_blocks = nc;
  }
  int rc = d->vt->alloc(d, bytes, p);
  if (rc) return rc;
  d->blocks[d->nblocks++] = (struct ts__dev_block){*p, bytes};
  d->live_bytes += bytes;
  if (d->live_bytes > d->peak_bytes) d->peak_bytes = d->live_bytes;
  return TS_OK;
}

void ts__dev_free(ts__dev *d, void *p) {
  if (!p) return;
  for (size_t k = d->nblocks; k-- > 0;) /* the newest first: scratch grown and freed */
    if (d->blocks[k].p == p) {
      d->live_bytes -= d->blocks[k].n;
      d->blocks[k] = d->blocks[--d->nblocks];
      break;
    }
  d->vt->free(d, p);
}

void ts__dev_mem_counts(const ts__dev *d, size_t *live, size_t *peak) {
  *live = d ? d->live_bytes : 0;
  *peak = d ? d->peak_bytes : 0;
}

int ts__dev_host_alloc(ts__dev *d, size_t bytes, void **p) { return d->vt->host_alloc(d, bytes, p); }
void ts__dev_host_free(ts__dev *d, void *p) {
  if (p) d->vt->host_free(d, p);
}
int ts__dev_copy(ts__dev *d, void *dst, const void *src, size_t n, ts__copy_dir dir, ts__dev_stream *s) {
  return n ? d->vt->copy(d, dst, src, n, dir, s) : TS_OK;
}
int ts__dev_memset0(ts__dev *d, void *p, size_t n, ts__dev_stream *s) { return n ? d->vt->memset0(d, p, n, s) : TS_OK; }
int ts__dev_stream_create(ts__dev *d, ts__dev_stream **s) { return d->vt->stream_create(d, s); }
int ts__dev_stream_sync(ts__dev *d, ts__dev_stream *s) { return d->vt->stream_sync(d, s); }
void ts__dev_stream_destroy(ts__dev *d, ts__dev_stream *s) {
  if (s) d->vt->stream_destroy(d, s);
}
int ts__dev_event_create(ts__dev *d, ts__dev_event **e) { return d->vt->event_create(d, e); }
int ts__dev_event_record(ts__dev *d, ts__dev_event *e, ts__dev_stream *s) { return d->vt->event_record(d, e, s); }
int ts__dev_stream_wait(ts__dev *d, ts__dev_stream *s, ts__dev_event *e) { return d->vt->stream_wait(d, s, e); }
int ts__dev_event_sync(ts__dev *d, ts__dev_event *e) { return d->vt->event_sync(d, e); }
int ts__dev_event_query(ts__dev *d, ts__dev_event *e, int *done) { return d->vt->event_query(d, e, done); }
int ts__dev_event_elapsed(ts__dev *d, ts__dev_event *a, ts__dev_event *b, double *ms) {
  return d->vt->event_elapsed(d, a, b, ms);
}
void ts__dev_event_destroy(ts__dev *d, ts__dev_event *e) {
  if (e) d->vt->event_destroy(d, e);
}
int ts__dev_sync(ts__dev *d) { return d->vt->stream_sync(d, NULL); }
int ts__dev_mem_info(ts__dev *d, size_t *free_bytes, size_t *total) { return d->vt->mem_info(d, free_bytes, total); }
