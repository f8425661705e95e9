/* Causal scaled-dot-product attention kernels (f32).
 *
 * Layouts: q, k, v, o, do, dq, dk, dv are (B,H,T,D) for layout TS_ATTN_BHTD, or (B,T,H,D) for
 * TS_ATTN_BTHD (the layout a (B,T,H*D) projection has before any permute, which saves the
 * permutes around the op). TS_ATTN_QKV: q, k, v are the three column blocks of one packed
 * (B,T,3*H*D) tensor (q = qkv, k = qkv + H*D, v = qkv + 2*H*D, row stride 3*H*D: the output of
 * a fused q|k|v projection, no split needed), likewise dq, dk, dv inside one (B,T,3*H*D)
 * gradient; o and do are (B,T,H*D). lse is always (B,H,T).
 *
 *   s_ij = scale * q_i . k_j,  j <= i
 *   o_i  = sum_j softmax_j(s_i.) v_j,     lse_i = log sum_{j<=i} exp(s_ij)
 *
 * Backward (recomputes the probabilities from q, k and lse; nothing T x T is stored):
 *   p_ij = exp(s_ij - lse_i),  D_i = do_i . o_i,  ds_ij = p_ij (do_i . v_j - D_i)
 *   dq_i = scale sum_j ds_ij k_j,  dk_j = scale sum_i ds_ij q_i,  dv_j = sum_i p_ij do_i
 *
 * `_ref` kernels are naive loops accumulating in double (for tests and the reference backend);
 * `_dnnl` kernels are fused and blocked: per (b,h) and block of 64 queries the scores against the
 * causally visible keys are computed with dnnl_sgemm, softmax'd in place and multiplied by v, so
 * fully-masked key blocks are never touched. Work is spread over OpenMP threads by (b,h,block)
 * (forward) or (b,h) (backward); dnnl_sgemm runs single-threaded inside those regions.
 *
 * `_lp` kernels take q, k, v, o, do, dq, dk, dv of a 16-bit dtype dt (bf16, f16; TS_F32 calls the
 * f32 kernels) in the same layouts; lse stays f32.
 *   bf16, dnnl = 1: the fused blocked kernel on bf16 GEMMs (oneDNN matmul, bf16 operands, f32
 *     accumulation; ts__gemm_bf16_* in matmul.h): the scores S = scale q k^T land in f32
 *     scratch, the softmax rows and their backward run in f32 (the f32 kernel's row helpers),
 *     and the rows of P (normalised forward, exp(s - lse) backward) and of scale * dS are
 *     rounded to bf16 for the P v, P^T do, dS k and dS^T q products. o and dq come out of their
 *     GEMM rounded once; dk and dv accumulate over query blocks in f32 scratch and are rounded
 *     once. Strided views (BTHD, QKV) are copied to dense per-thread rows first (oneDNN's
 *     brgemm takes dense operands only); BHTD heads are used in place.
 *   otherwise (REF backend, and f16 on the FAST backend: no f16 compute in oneDNN 2.6 here):
 *     each (b,h) head is widened to dense f32 per thread, the f32 kernel's per-head code runs
 *     (reference loops, or the fused blocks on dnnl_sgemm) and the outputs are rounded once:
 *     the f32 kernel's results on the widened inputs, rounded. */
#ifndef TS_KERNELS_ATTENTION_H
#define TS_KERNELS_ATTENTION_H

#include <stdint.h>

#include "tessera/tensor.h"

enum { TS_ATTN_BHTD = 0, TS_ATTN_BTHD = 1, TS_ATTN_QKV = 2 };

/* q,k,v -> o, lse. */
int ts__attention_fwd_ref(const float *q, const float *k, const float *v, float *o, float *lse,
                          int64_t B, int64_t H, int64_t T, int64_t D, float scale, int layout);
int ts__attention_fwd_dnnl(const float *q, const float *k, const float *v, float *o, float *lse,
                           int64_t B, int64_t H, int64_t T, int64_t D, float scale, int layout);
/* (do,q,k,v,o,lse) -> dq,dk,dv (overwritten). */
int ts__attention_bwd_ref(const float *dout, const float *q, const float *k, const float *v,
                          const float *o, const float *lse, float *dq, float *dk, float *dv,
                          int64_t B, int64_t H, int64_t T, int64_t D, float scale, int layout);
int ts__attention_bwd_dnnl(const float *dout, const float *q, const float *k, const float *v,
                           const float *o, const float *lse, float *dq, float *dk, float *dv,
                           int64_t B, int64_t H, int64_t T, int64_t D, float scale, int layout);

/* 16-bit: q,k,v (dt) -> o (dt), lse (f32). dnnl: 1 for the FAST backend. */
int ts__attention_fwd_lp(ts_dtype dt, const void *q, const void *k, const void *v, void *o, float *lse, int64_t B,
                         int64_t H, int64_t T, int64_t D, float scale, int layout, int dnnl);
/* 16-bit: (do,q,k,v,o (dt), lse (f32)) -> dq,dk,dv (dt, overwritten). */
int ts__attention_bwd_lp(ts_dtype dt, const void *dout, const void *q, const void *k, const void *v, const void *o,
                         const float *lse, void *dq, void *dk, void *dv, int64_t B, int64_t H, int64_t T, int64_t D,
                         float scale, int layout, int dnnl);

#endif
