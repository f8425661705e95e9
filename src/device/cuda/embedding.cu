// Embedding: the forward gathers rows of the table; the backward sums each id's tokens' gradient
// rows in token order (below): deterministic, and the same order of additions as the CPU's loop
// over tokens.
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
// The backward in two steps (not a thread per column over every token: GPT-2's 768 columns would
// be 3 blocks, each walking 8192 tokens with a dependent read-add-write per token):
//  1. each token's list: nxt[t] = the next token with the same id (-1: none), head[t] = 1 when
//     no earlier token has it; ids outside [off, off + V) (another shard's, or bad) neither. A
//     block of 256 tokens compares its ids with every token's, 256 at a time through shared
//     memory (T^2 comparisons: used up to 65536 tokens, ts__gpu_embedding_bwd);
//  2. a block per (head token, 256 columns): row id - off of dtable = its tokens' dy rows summed in
//     token order (f32; rounded once into bf16), the same additions in the same order as the CPU's
//     loop over tokens into a zeroed table: bitwise. Rows no token has stay as the caller zeroed them.
#define EMB_TILE 256
KERNEL ts_k_embedding_lists(const void *ids, int i64ids, i64 Tn, i64 V, i64 off, int *nxt, int *head) {
  __shared__ i64 sid[EMB_TILE];
  for (i64 t0 = (i64)bid() * EMB_TILE; t0 < Tn; t0 += (i64)nbid() * EMB_TILE) {
    const i64 t = t0 + tid(), my = t < Tn ? e_id(ids, i64ids, t) - off : -1;
    const int valid = t < Tn && my >= 0 && my < V;
    i64 next = -1;
    int earlier = 0;
    for (i64 u0 = 0; u0 < Tn; u0 += EMB_TILE) {
      __syncthreads(); // the previous tile read by all
      if (u0 + tid() < Tn) sid[tid()] = e_id(ids, i64ids, u0 + tid()) - off;
      __syncthreads();
      const i64 un = Tn - u0 < EMB_TILE ? Tn - u0 : EMB_TILE;
      if (valid)
        for (i64 k = 0; k < un; k++)
          if (sid[k] == my) {
            const i64 u = u0 + k;
            if (u < t) earlier = 1;
            else if (u > t && next < 0) next = u;
          }
    }
    if (t < Tn) nxt[t] = valid ? (int)next : -1, head[t] = valid && !earlier;
  }
}
template <typename T>
DEV void emb_bwd(const T *dy, const void *ids, int i64ids, i64 Tn, i64 D, i64 off, const int *nxt, const int *head,
                 T *dtable) {
  for (i64 t = bidy(); t < Tn; t += nbidy()) {
    if (!head[t]) continue;
    const i64 r = e_id(ids, i64ids, t) - off;
    for (i64 j = gidx(); j < D; j += gstride()) {
      float acc = 0.0f;
      for (i64 u = t; u >= 0; u = nxt[u]) acc += ld(dy, u * D + j);
      st(dtable, r * D + j, acc);
    }
  }
}
KERNEL ts_k_embedding_bwd_lists_f32(const float *dy, const void *ids, int i64ids, i64 Tn, i64 D, i64 off, const int *nxt,
                                    const int *head, float *dtable) {
  emb_bwd(dy, ids, i64ids, Tn, D, off, nxt, head, dtable);
}
KERNEL ts_k_embedding_bwd_lists_bf16(const bf16 *dy, const void *ids, int i64ids, i64 Tn, i64 D, i64 off, const int *nxt,
                                     const int *head, bf16 *dtable) {
  emb_bwd(dy, ids, i64ids, Tn, D, off, nxt, head, dtable);
}

// beyond 65536 tokens: a thread per column walking the tokens in order (dtable zeroed by the caller)
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
