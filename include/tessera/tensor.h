/* Tessera tensor layer: dtypes, shapes (up to 8 dims), host tensors, dtype conversions.
 * Tensors are dense, row-major (C order), on the host. */
#ifndef TESSERA_TENSOR_H
#define TESSERA_TENSOR_H

#include "tessera/base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TS_MAX_DIMS 8

typedef enum {
  TS_F32 = 0,
  TS_BF16 = 1,
  TS_F16 = 2,
  TS_I32 = 3,
  TS_I64 = 4,
  TS_U8 = 5,
  TS_DTYPE_COUNT
} ts_dtype;

/* Bytes per element; 0 for an invalid dtype. */
size_t ts_dtype_size(ts_dtype dt);
/* "f32", "bf16", ...; "?" for an invalid dtype. */
const char *ts_dtype_name(ts_dtype dt);
/* Parses a dtype name ("f32", "float32", "bf16", ...); returns TS_ENOTFOUND if unknown. */
int ts_dtype_parse(const char *name, ts_dtype *out);
/* 1 for f32/bf16/f16. */
int ts_dtype_is_float(ts_dtype dt);

typedef struct {
  int ndim;
  int64_t dims[TS_MAX_DIMS];
} ts_shape;

/* Builds a shape from ndim sizes: ts_shape_make(2, (int64_t[]){3, 4}). */
ts_shape ts_shape_make(int ndim, const int64_t *dims);
/* Convenience constructors. */
ts_shape ts_shape1(int64_t a);
ts_shape ts_shape2(int64_t a, int64_t b);
ts_shape ts_shape3(int64_t a, int64_t b, int64_t c);
ts_shape ts_shape4(int64_t a, int64_t b, int64_t c, int64_t d);
/* A batch of b samples of shape s: (b, s...). s->ndim must be below TS_MAX_DIMS. */
ts_shape ts_shape_batch(int64_t b, const ts_shape *s);
/* Number of elements (1 for a scalar of ndim 0). */
int64_t ts_shape_numel(const ts_shape *s);
int ts_shape_equal(const ts_shape *a, const ts_shape *b);
/* Writes "(2,3,4)" into buf (always NUL-terminated); returns buf. */
char *ts_shape_str(const ts_shape *s, char *buf, size_t cap);
/* Broadcast per NumPy rules; TS_ESHAPE (with message) if incompatible. */
int ts_shape_broadcast(const ts_shape *a, const ts_shape *b, ts_shape *out);

/* ---- scalar conversions (round to nearest even) ---- */
uint16_t ts_f32_to_bf16(float f);
float ts_bf16_to_f32(uint16_t h);
uint16_t ts_f32_to_f16(float f);
float ts_f16_to_f32(uint16_t h);
/* Converts n elements between any two dtypes (floats to ints truncate toward zero, saturating). */
int ts_convert(const void *src, ts_dtype sdt, void *dst, ts_dtype ddt, size_t n);

/* ---- host tensors ---- */
typedef struct {
  ts_dtype dtype;
  ts_shape shape;
  void *data;
  int owns; /* 1 if data was allocated by ts_tensor_init and is freed by ts_tensor_free */
} ts_tensor;

/* Initialises t in place with zeroed, 64-byte-aligned storage. */
int ts_tensor_init(ts_tensor *t, ts_dtype dt, ts_shape shape);
/* Initialises t as a view of caller-owned memory (not freed). */
void ts_tensor_view(ts_tensor *t, ts_dtype dt, ts_shape shape, void *data);
void ts_tensor_free(ts_tensor *t);
size_t ts_tensor_nbytes(const ts_tensor *t);
int64_t ts_tensor_numel(const ts_tensor *t);

/* 64-byte-aligned allocation helpers (free with ts_free). */
void *ts_alloc(size_t bytes);
void *ts_calloc(size_t bytes);
void ts_free(void *p);

#ifdef __cplusplus
}
#endif
#endif
