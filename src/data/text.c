/* Text source for language models: the bytes of a file (memory-mapped) as token ids 0..255.
 * Sample i starts at byte i*stride: data = bytes [s, s+seq_len) and target = bytes [s+1, s+seq_len+1),
 * both i32 (seq_len); label -1. The last sequence must have its full target, so a file of B bytes
 * gives (B - seq_len - 1) / stride + 1 samples. */
#include <stdlib.h>

#include "source_internal.h"

typedef struct {
  ts__mapped map;
  int64_t n, seq, stride;
} text_src;

static int64_t text_len(void *self) { return ((text_src *)self)->n; }

static int text_get(void *self, int64_t i, ts_sample *out) {
  text_src *t = self;
  int rc = ts_tensor_init(&out->data, TS_I32, ts_shape1(t->seq));
  if (!rc) rc = ts_tensor_init(&out->target, TS_I32, ts_shape1(t->seq));
  if (rc) return rc;
  const uint8_t *p = t->map.data + (size_t)(i * t->stride);
  int32_t *d = out->data.data, *g = out->target.data;
  for (int64_t k = 0; k < t->seq; k++) {
    d[k] = p[k];
    g[k] = p[k + 1];
  }
  out->label = -1;
  return TS_OK;
}

static int64_t text_label(void *self, int64_t i) { return -1; }

static void text_destroy(void *self) {
  text_src *t = self;
  ts__unmap_file(&t->map);
  free(t);
}

int ts_source_text(const char *path, int seq_len, int stride, ts_source **out) {
  *out = NULL;
  if (!path) return ts_error_set(TS_EINVAL, "ts_source_text: NULL path");
  if (seq_len <= 0 || stride < 0)
    return ts_error_set(TS_EINVAL, "%s: text source needs seq_len > 0 and stride >= 0 (got %d, %d)", path,
                        seq_len, stride);
  text_src *t = calloc(1, sizeof *t);
  if (!t) return ts_error_set(TS_ENOMEM, "ts_source_text: out of memory");
  int rc = ts__map_file(path, &t->map);
  if (rc) {
    free(t);
    return rc;
  }
  t->seq = seq_len;
  t->stride = stride ? stride : seq_len;
  if ((int64_t)t->map.size < t->seq + 1) {
    rc = ts_error_set(TS_EFORMAT, "%s: %zu bytes is too short for one sequence of %d tokens plus its target", path,
                      t->map.size, seq_len);
  } else {
    t->n = ((int64_t)t->map.size - t->seq - 1) / t->stride + 1;
    static const ts_source_vtable vt = {"text", text_len, text_get, text_label, NULL, text_destroy, NULL};
    rc = ts_source_create(&vt, t, out);
  }
  if (rc) text_destroy(t);
  return rc;
}
