#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/tensor.h"
#include "../base/text.h"

ts_shape ts_shape_make(int ndim, const int64_t *dims) {
  ts_shape s;
  memset(&s, 0, sizeof s);
  if (ndim < 0) ndim = 0;
  if (ndim > TS_MAX_DIMS) ndim = TS_MAX_DIMS;
  s.ndim = ndim;
  for (int i = 0; i < ndim; i++) s.dims[i] = dims[i];
  return s;
}
ts_shape ts_shape1(int64_t a) { return ts_shape_make(1, (int64_t[]){a}); }
ts_shape ts_shape2(int64_t a, int64_t b) { return ts_shape_make(2, (int64_t[]){a, b}); }
ts_shape ts_shape3(int64_t a, int64_t b, int64_t c) { return ts_shape_make(3, (int64_t[]){a, b, c}); }
ts_shape ts_shape4(int64_t a, int64_t b, int64_t c, int64_t d) {
  return ts_shape_make(4, (int64_t[]){a, b, c, d});
}

ts_shape ts_shape_batch(int64_t b, const ts_shape *s) {
  ts_shape r;
  memset(&r, 0, sizeof r);
  r.ndim = s->ndim + 1;
  r.dims[0] = b;
  for (int i = 0; i < s->ndim; i++) r.dims[i + 1] = s->dims[i];
  return r;
}

int64_t ts_shape_numel(const ts_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->ndim; i++) n *= s->dims[i];
  return n;
}

int ts_shape_equal(const ts_shape *a, const ts_shape *b) {
  if (a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

char *ts_shape_str(const ts_shape *s, char *buf, size_t cap) {
  size_t n = 0;
  if (!cap) return buf;
  buf[0] = 0;
  ts__app(buf, cap, &n, "(");
  for (int i = 0; i < s->ndim; i++) ts__app(buf, cap, &n, i ? ",%lld" : "%lld", (long long)s->dims[i]);
  ts__app(buf, cap, &n, ")");
  return buf;
}

int ts_shape_broadcast(const ts_shape *a, const ts_shape *b, ts_shape *out) {
  ts_shape r;
  memset(&r, 0, sizeof r);
  r.ndim = a->ndim > b->ndim ? a->ndim : b->ndim;
  for (int i = 0; i < r.ndim; i++) {
    int ia = a->ndim - r.ndim + i, ib = b->ndim - r.ndim + i;
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      char sa[96], sb[96];
      return ts_error_set(TS_ESHAPE, "shapes %s and %s do not broadcast (dim %d: %lld vs %lld)",
                          ts_shape_str(a, sa, sizeof sa), ts_shape_str(b, sb, sizeof sb), i,
                          (long long)da, (long long)db);
    }
    r.dims[i] = da == 1 ? db : da;
  }
  *out = r;
  return TS_OK;
}

void *ts_alloc(size_t bytes) {
  void *p = NULL;
  size_t sz = (bytes + 63) & ~(size_t)63;
  if (posix_memalign(&p, 64, sz ? sz : 64) != 0) return NULL;
  return p;
}

void *ts_calloc(size_t bytes) {
  void *p = ts_alloc(bytes);
  if (p) memset(p, 0, bytes);
  return p;
}

void ts_free(void *p) { free(p); }

int ts_tensor_init(ts_tensor *t, ts_dtype dt, ts_shape shape) {
  memset(t, 0, sizeof *t);
  if (!ts_dtype_size(dt)) return ts_error_set(TS_EDTYPE, "ts_tensor_init: invalid dtype %d", (int)dt);
  for (int i = 0; i < shape.ndim; i++)
    if (shape.dims[i] < 0) {
      char s[128];
      return ts_error_set(TS_ESHAPE, "ts_tensor_init: negative dimension in %s",
                          ts_shape_str(&shape, s, sizeof s));
    }
  t->dtype = dt;
  t->shape = shape;
  size_t nb = (size_t)ts_shape_numel(&shape) * ts_dtype_size(dt);
  t->data = ts_calloc(nb);
  if (!t->data) return ts_error_set(TS_ENOMEM, "ts_tensor_init: cannot allocate %zu bytes", nb);
  t->owns = 1;
  return TS_OK;
}

void ts_tensor_view(ts_tensor *t, ts_dtype dt, ts_shape shape, void *data) {
  t->dtype = dt;
  t->shape = shape;
  t->data = data;
  t->owns = 0;
}

void ts_tensor_free(ts_tensor *t) {
  if (t->owns) ts_free(t->data);
  t->data = NULL;
  t->owns = 0;
}

size_t ts_tensor_nbytes(const ts_tensor *t) {
  return (size_t)ts_shape_numel(&t->shape) * ts_dtype_size(t->dtype);
}
int64_t ts_tensor_numel(const ts_tensor *t) { return ts_shape_numel(&t->shape); }
