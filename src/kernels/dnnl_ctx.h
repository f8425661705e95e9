/* Shared oneDNN state for the fast kernels: one CPU engine and stream per process, and a cache
 * of primitives keyed by the bytes of their description (op kind, shapes, attributes), so each
 * primitive is created once per shape and reused. Not thread-safe: kernels are launched from one
 * thread (oneDNN parallelises inside). */
#ifndef TS_DNNL_CTX_H
#define TS_DNNL_CTX_H

#include <dnnl.h>
#include "tessera/base.h"

dnnl_engine_t ts__dnnl_engine(void);
dnnl_stream_t ts__dnnl_stream(void);

typedef struct {
  dnnl_primitive_desc_t pd;
  dnnl_primitive_t prim;
  void *aux;      /* kernel-specific extra data (freed with free()) */
} ts__dnnl_prim;

/* Entries never move: a pointer from get/put stays valid until ts__dnnl_cache_clear().
 * Looks up the primitive for `key` (any bytes, compared exactly). Returns NULL if absent. */
ts__dnnl_prim *ts__dnnl_cache_get(const void *key, size_t keylen);
/* Inserts: takes ownership of pd/prim/aux. Returns the cached entry (never NULL unless OOM). */
ts__dnnl_prim *ts__dnnl_cache_put(const void *key, size_t keylen, dnnl_primitive_desc_t pd,
                                  dnnl_primitive_t prim, void *aux);
/* Creates a primitive from pd and inserts it (pd ownership passes to the cache). */
ts__dnnl_prim *ts__dnnl_cache_put_pd(const void *key, size_t keylen, dnnl_primitive_desc_t pd);
/* Releases all cached primitives (e.g. at exit or in tests). */
void ts__dnnl_cache_clear(void);

/* 1 when oneDNN computes bf16 on this CPU (oneDNN 2.x: AVX-512 cores and newer), else 0: the bf16
 * kernels then take their other route (f32 kernels on widened values, or their own row loops).
 * Probed once (a small bf16 matmul's primitive descriptor); ONEDNN_MAX_CPU_ISA=AVX2 makes any
 * CPU answer 0, which is how the tests reach that route on AVX-512 machines. */
int ts__dnnl_bf16(void);

/* A process-wide scratch buffer (kept in *buf, *cap bytes) grown to at least `bytes` (its
 * contents are not kept when it grows); NULL when out of memory. Kernels run from one thread at
 * a time, so each kernel file keeps a few such slots of its own. */
void *ts__scratch_grow(void **buf, size_t *cap, size_t bytes);
size_t ts__dnnl_cache_size(void);

/* Wraps a plain user buffer as a oneDNN memory for descriptor md (no copy). */
dnnl_memory_t ts__dnnl_mem(const dnnl_memory_desc_t *md, void *data);
/* Plain row-major f32 (or given type) memory descriptor for dims. */
int ts__dnnl_md_plain(dnnl_memory_desc_t *md, int ndims, const int64_t *dims, dnnl_data_type_t dt);
/* Executes prim with args on the stream and waits; then destroys the memories in args.
 * Returns TS_OK or TS_EBACKEND with a message naming `what`. */
int ts__dnnl_run(ts__dnnl_prim *p, int nargs, dnnl_exec_arg_t *args, const char *what);
/* Turns a dnnl status into TS_OK / TS_EBACKEND with a message naming `what`. */
int ts__dnnl_check(dnnl_status_t st, const char *what);
/* A 3-D (batch, rows, cols) descriptor of type dt of a stored row-major matrix; trans: the memory
 * holds the (cols, rows) matrix, so the logical view gets swapped strides (matmul operands). */
int ts__dnnl_md3(dnnl_memory_desc_t *md, int64_t batch, int64_t rows, int64_t cols, int trans, dnnl_data_type_t dt);

#endif
