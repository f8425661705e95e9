/* Embedding-family kernels: row gather and its deterministic scatter-add backward. */
#ifndef TS_KERNELS_EMBEDDING_H
#define TS_KERNELS_EMBEDDING_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/tensor.h"

/* table (V,D) rows of `esize`-byte elements, ids (N) i32/i64 -> y (N,D): y[n] = table[ids[n]].
 * An id outside [0,V) gives TS_ERANGE naming the position and the id (y is then undefined). */
int ts__embedding_fwd_ref(const void *table, size_t esize, int64_t V, int64_t D, const void *ids,
                          ts_dtype idt, int64_t N, void *y);
/* dy (N,D) f32, ids (N) -> dtable (V,D) f32 = sum over n with ids[n]==v of dy[n] (overwritten,
 * rows never hit are zero). Deterministic and independent of the thread count: threads own
 * column ranges and each element is summed in token order. */
int ts__embedding_bwd_ref(const float *dy, const void *ids, ts_dtype idt, int64_t N, int64_t V,
                          int64_t D, float *dtable);

/* Vocabulary-sharded versions: the table (Vl,D) holds rows [offset, offset+Vl) of the full table.
 * table (Vl,D), ids (N) -> y (N,D): y[n] = table[ids[n] - offset] for ids in range, zeros (all
 * bits 0) for other ids >= 0; a negative id gives TS_ERANGE naming the position and the id. */
int ts__embedding_shard_fwd_ref(const void *table, size_t esize, int64_t Vl, int64_t D,
                                int64_t offset, const void *ids, ts_dtype idt, int64_t N, void *y);
/* dy (N,D) f32, ids (N) -> dtable (Vl,D) f32: the scatter-add of the ids in range (at id - offset),
 * others ignored; negative ids TS_ERANGE. Deterministic as ts__embedding_bwd_ref. */
int ts__embedding_shard_bwd_ref(const float *dy, const void *ids, ts_dtype idt, int64_t N,
                                int64_t Vl, int64_t D, int64_t offset, float *dtable);

/* 16-bit backward: dy (N,D) and dtable of dtype dt (TS_BF16, TS_F16; TS_F32 calls the f32
 * kernel). Each row's tokens are summed in f32 in token order (the f32 kernel's sums, rounded
 * once to dt) and the row is written once; rows never hit are zero. The tokens are grouped by
 * row with a stable counting sort (V + N indices of scratch), rows run in parallel. */
// dy (N,D) dt, ids (N) -> dtable (V,D) dt
int ts__embedding_bwd_lp(ts_dtype dt, const void *dy, const void *ids, ts_dtype idt, int64_t N, int64_t V, int64_t D,
                         void *dtable);
// dy (N,D) dt, ids (N) -> dtable (Vl,D) dt (rows [offset, offset+Vl))
int ts__embedding_shard_bwd_lp(ts_dtype dt, const void *dy, const void *ids, ts_dtype idt, int64_t N, int64_t Vl,
                               int64_t D, int64_t offset, void *dtable);

/* One-hot: ids (outer*inner) i32/i64 -> y (outer, depth, inner) of dtype dt: y[o,d,i] = on if
 * ids[o*inner+i] == d else off (values converted to dt as ts__fill_ref does); ids outside
 * [0,depth) give all off. Never fails but for a bad dtype (TS_EDTYPE). */
int ts__one_hot_ref(const void *ids, ts_dtype idt, int64_t outer, int64_t depth, int64_t inner, float on, float off,
                    void *y, ts_dtype dt);

#endif
