// Embedding: the forward gathers rows of the table; the backward adds each token's gradient row
// into its id's row, tokens in order for every column (thread j owns column j of every row it
// touches): deterministic, and the same order of additions as the CPU's loop over tokens.
// CPU reference: src/kernels/embedding.c.
#include "ts_cuda.h"

DEV i64 e_id(const void *ids, int i64ids, i64 t) { return i64ids ? ((const i64 *)ids)[t] : (i64)((const int *)ids)[t]; }

// table (V, D), ids (T) -> y (T, D): rows [off, off + V) of the whole table (off 0 unsharded); bad[0]
// = 1 + a token whose id is outside [0, V) (sharded: negative; another shard's ids give zero rows)
template <typename T>
DEV void emb_fwd(const T *table, const void *ids, int i64ids, i64 Tn, i64 V, i64 D, i64 off, int sharded, T *y,
                 i64 *bad) {
  for (i64 t = bidy(); t < Tn; t += nbidy()) {
    i64 id = e_id(ids, i64ids, t), r = id - off;
    int ok = r >= 0 && r < V;
    if ((sharded ? id < 0 : !ok) && gidx() == 0) bad[0] = t + 1;
    for (i64 j = gidx(); j < D; j += gstride()) y[t * D + j] = ok ? table[r * D + j] : (T)0;
  }
}
KERNEL ts_k_embedding_fwd_f32(const float *table, const void *ids, int i64ids, i64 Tn, i64 V, i64 D, i64 off,
                              int sharded, float *y, i64 *bad) {
  emb_fwd(table, ids, i64ids, Tn, V, D, off, sharded, y, bad);
}
KERNEL ts_k_embedding_fwd_bf16(const bf16 *table, const void *ids, int i64ids, i64 Tn, i64 V, i64 D, i64 off,
                               int sharded, bf16 *y, i64 *bad) {
  emb_fwd(table, ids, i64ids, Tn, V, D, off, sharded, y, bad);
}
// dy (T, D), ids (T) -> dtable (V, D) += for the ids in [off, off + V) (the caller zeroes it first
// when it is not accumulating)
KERNEL ts_k_embedding_bwd_f32(const float *dy, const void *ids, int i64ids, i64 Tn, i64 V, i64 D, i64 off,
                              float *dtable) {
  for (i64 j = gidx(); j < D; j += gstride())
    for (i64 t = 0; t < Tn; t++) {
      i64 r = e_id(ids, i64ids, t) - off;
      if (r >= 0 && r < V) dtable[r * D + j] += dy[t * D + j];
    }
}
// the same sums from bf16 dy, in f32 (the caller zeroes acc and rounds it to bf16 once)
KERNEL ts_k_embedding_bwd_bf16(const bf16 *dy, const void *ids, int i64ids, i64 Tn, i64 V, i64 D, i64 off,
                               float *acc) {
  for (i64 j = gidx(); j < D; j += gstride())
    for (i64 t = 0; t < Tn; t++) {
      i64 r = e_id(ids, i64ids, t) - off;
      if (r >= 0 && r < V) acc[r * D + j] += bf2f(dy[t * D + j]);
    }
}

// One-hot: ids (outer * inner) -> y (outer, depth, inner) of 4- or 2-byte elements, `on` where the
// id equals the index along depth, `off` elsewhere (the values' bits, converted by the caller).
// CPU reference: ts__one_hot_ref (src/kernels/embedding.c).
template <typename T>
DEV void one_hot(const void *ids, int i64ids, i64 outer, i64 depth, i64 inner, T on, T off, T *y) {
  const i64 n = outer * depth * inner;
  for (i64 k = gidx(); k < n; k += gstride()) {
    const i64 i = k % inner, d = (k / inner) % depth, o = k / (inner * depth);
    y[k] = e_id(ids, i64ids, o * inner + i) == d ? on : off;
  }
}
KERNEL ts_k_one_hot_b32(const void *ids, int i64ids, i64 outer, i64 depth, i64 inner, unsigned on, unsigned off,
                        unsigned *y) {
  one_hot(ids, i64ids, outer, depth, inner, on, off, y);
}
KERNEL ts_k_one_hot_b16(const void *ids, int i64ids, i64 outer, i64 depth, i64 inner, unsigned on, unsigned off,
                        bf16 *y) {
  one_hot(ids, i64ids, outer, depth, inner, (bf16)on, (bf16)off, y);
}
