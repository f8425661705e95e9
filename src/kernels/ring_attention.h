/* Blockwise causal attention for ring attention (context parallelism; src/runtime/run_ring_attention.c
 * passes the key/value blocks around the ring, these kernels do one block's work).
 *
 * Every tensor is f32, head-major (BH, T, D) contiguous (BH = B*H heads of T rows); qpos[T] and
 * kpos[T] are the global sequence positions of the query rows and of the block's key rows, each
 * increasing (so a query row sees a prefix of the block's keys); key j is visible to query i iff
 * kpos[j] <= qpos[i].
 *
 *   s_ij = scale q_i . k_j,  visible j only
 *   forward (online softmax): the block's o_b, lse_b merged into the running o, lse:
 *     lse' = log(exp(lse) + exp(lse_b)),  o' = o exp(lse - lse') + o_b exp(lse_b - lse')
 *     (lse -inf: nothing seen yet; a query row that sees none of the block is left as it is)
 *   backward, with the whole output's lse and di_i = do_i . o_i:
 *     p_ij = exp(s_ij - lse_i),  ds_ij = p_ij (do_i . v_j - di_i)
 *     dq_i += scale sum_j ds_ij k_j,  dk_j += scale sum_i ds_ij q_i,  dv_j += sum_i p_ij do_i
 *
 * Blocks of 64 query rows against the visible prefix of the keys on dnnl_sgemm, spread over
 * OpenMP threads by head. 0, or a status with the message set. */
#ifndef TS_KERNELS_RING_ATTENTION_H
#define TS_KERNELS_RING_ATTENTION_H

#include <stdint.h>

int ts__ring_attn_fwd_block(const float *q, const float *k, const float *v, const int64_t *qpos, const int64_t *kpos,
                            int64_t BH, int64_t T, int64_t D, float scale, float *o, float *lse);
int ts__ring_attn_bwd_block(const float *dout, const float *q, const float *k, const float *v, const float *lse,
                            const float *di, const int64_t *qpos, const int64_t *kpos, int64_t BH, int64_t T,
                            int64_t D, float scale, float *dq, float *dk, float *dv);

#endif
