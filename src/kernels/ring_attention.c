/* Blockwise causal attention for ring attention (see ring_attention.h). */
#include "ring_attention.h"

#include <dnnl.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/base.h"
#include "tessera/tensor.h"

#define RQ 64 /* query rows per block */

static inline int sgemm(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                        const float *Bm, int64_t ldb, float beta, float *C, int64_t ldc) {
  return dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, Bm, ldb, beta, C, ldc) == dnnl_success ? 0 : 1;
}

/* Keys of kpos[0..T) at or before position p (kpos increasing). */
static int64_t visible(const int64_t *kpos, int64_t T, int64_t p) {
  int64_t lo = 0, hi = T;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (kpos[mid] <= p) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* One head, query rows [r0, r1): the block's scores against the keys' visible prefix, merged into
 * o (T,D) and lse (T). S: scratch RQ x T; ob: RQ x D. */
static int fwd_rows(const float *q, const float *k, const float *v, const int64_t *qpos, const int64_t *kpos,
                    int64_t T, int64_t D, float scale, int64_t r0, int64_t r1, float *o, float *lse, float *S,
                    float *ob) {
  const int64_t m = r1 - r0, kend = visible(kpos, T, qpos[r1 - 1]);
  if (kend == 0) return 0;
  if (sgemm('N', 'T', m, kend, D, scale, q + r0 * D, D, k, D, 0.0f, S, kend)) return 1;
  float lb[RQ];
  for (int64_t i = 0; i < m; i++) {
    float *row = S + i * kend;
    int64_t len = visible(kpos, kend, qpos[r0 + i]);
    if (len == 0) {
      memset(row, 0, sizeof(float) * (size_t)kend);
      lb[i] = -INFINITY;
      continue;
    }
    float mx = row[0];
    for (int64_t j = 1; j < len; j++) mx = row[j] > mx ? row[j] : mx;
    double sum = 0;
    for (int64_t j = 0; j < len; j++) sum += (row[j] = expf(row[j] - mx));
    float inv = (float)(1.0 / sum);
    for (int64_t j = 0; j < len; j++) row[j] *= inv;
    if (len < kend) memset(row + len, 0, sizeof(float) * (size_t)(kend - len));
    lb[i] = mx + (float)log(sum);
  }
  if (sgemm('N', 'N', m, D, kend, 1.0f, S, kend, v, D, 0.0f, ob, D)) return 1;
  for (int64_t i = 0; i < m; i++) {
    if (lb[i] == -INFINITY) continue;
    float *orow = o + (r0 + i) * D, *brow = ob + i * D, l = lse[r0 + i];
    if (l == -INFINITY) {
      memcpy(orow, brow, sizeof(float) * (size_t)D);
      lse[r0 + i] = lb[i];
      continue;
    }
    float mx = l > lb[i] ? l : lb[i];
    float nl = mx + log1pf(expf((l > lb[i] ? lb[i] : l) - mx));
    float a = expf(l - nl), b = expf(lb[i] - nl);
    for (int64_t c = 0; c < D; c++) orow[c] = orow[c] * a + brow[c] * b;
    lse[r0 + i] = nl;
  }
  return 0;
}

/* The work of one call: its arguments and, per item, the function that does it. */
typedef struct {
  const float *q, *k, *v, *dout, *lse, *di;
  const int64_t *qpos, *kpos;
  int64_t BH, T, D, nqb;
  float scale;
  float *o, *olse, *dq, *dk, *dv;
} job;

typedef int (*item_fn)(const job *J, int64_t item, float *scratch);

/* Runs fn over items 0..n-1 on the OpenMP threads (dynamic, one at a time), each thread with
 * `scratch` floats of its own; the message names `op` on failure. */
static int for_items(const char *op, const job *J, int64_t n, size_t scratch, item_fn fn) {
  int err = 0, oom = 0;
  int nthr = omp_in_parallel() ? 1 : omp_get_max_threads();
#pragma omp parallel if (nthr > 1 && n > 1)
  {
    float *S = ts_alloc(sizeof(float) * scratch);
    if (!S) {
#pragma omp atomic write
      oom = 1;
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < n; it++) {
      if (!S) continue;
      if (fn(J, it, S)) {
#pragma omp atomic write
        err = 1;
      }
    }
    ts_free(S);
  }
  if (oom) return ts_error_set(TS_ENOMEM, "%s: out of memory for scratch (T=%lld)", op, (long long)J->T);
  if (err) return ts_error_set(TS_EBACKEND, "%s: dnnl_sgemm failed (T=%lld D=%lld)", op, (long long)J->T, (long long)J->D);
  return TS_OK;
}

/* A head's block of query rows, the latest first (they see the most keys). */
static int fwd_item(const job *J, int64_t it, float *S) {
  const int64_t T = J->T, D = J->D, bh = it % J->BH, qb = J->nqb - 1 - it / J->BH, r0 = qb * RQ;
  const int64_t r1 = r0 + RQ < T ? r0 + RQ : T;
  const size_t off = (size_t)(bh * T * D);
  return fwd_rows(J->q + off, J->k + off, J->v + off, J->qpos, J->kpos, T, D, J->scale, r0, r1, J->o + off,
                  J->olse + bh * T, S, S + RQ * T);
}

int ts__ring_attn_fwd_block(const float *q, const float *k, const float *v, const int64_t *qpos, const int64_t *kpos,
                            int64_t BH, int64_t T, int64_t D, float scale, float *o, float *lse) {
  if (BH <= 0 || T <= 0 || D <= 0) return TS_OK;
  job J = {.q = q, .k = k, .v = v, .qpos = qpos, .kpos = kpos, .BH = BH, .T = T, .D = D, .nqb = (T + RQ - 1) / RQ,
           .scale = scale, .o = o, .olse = lse};
  return for_items("ring_attention", &J, BH * J.nqb, (size_t)(RQ * T + RQ * D), fwd_item);
}

/* One head, all query blocks (the key gradients of a head are summed over them: one thread per
 * head). P, dP: scratch RQ x T. */
static int bwd_head(const float *dout, const float *q, const float *k, const float *v, const float *lse,
                    const float *di, const int64_t *qpos, const int64_t *kpos, int64_t T, int64_t D, float scale,
                    float *dq, float *dk, float *dv, float *P, float *dP) {
  for (int64_t r0 = 0; r0 < T; r0 += RQ) {
    const int64_t r1 = r0 + RQ < T ? r0 + RQ : T, m = r1 - r0, kend = visible(kpos, T, qpos[r1 - 1]);
    if (kend == 0) continue;
    if (sgemm('N', 'T', m, kend, D, scale, q + r0 * D, D, k, D, 0.0f, P, kend)) return 1;
    if (sgemm('N', 'T', m, kend, D, 1.0f, dout + r0 * D, D, v, D, 0.0f, dP, kend)) return 1;
    for (int64_t i = 0; i < m; i++) {
      float *prow = P + i * kend, *drow = dP + i * kend, l = lse[r0 + i], d = di[r0 + i];
      int64_t len = visible(kpos, kend, qpos[r0 + i]);
      for (int64_t j = 0; j < len; j++) {
        float p = expf(prow[j] - l);
        prow[j] = p;
        drow[j] = p * (drow[j] - d);
      }
      if (len < kend) {
        memset(prow + len, 0, sizeof(float) * (size_t)(kend - len));
        memset(drow + len, 0, sizeof(float) * (size_t)(kend - len));
      }
    }
    /* dv[0:kend] += P^T do; dq += scale dS k; dk[0:kend] += scale dS^T q */
    if (sgemm('T', 'N', kend, D, m, 1.0f, P, kend, dout + r0 * D, D, 1.0f, dv, D)) return 1;
    if (sgemm('N', 'N', m, D, kend, scale, dP, kend, k, D, 1.0f, dq + r0 * D, D)) return 1;
    if (sgemm('T', 'N', kend, D, m, scale, dP, kend, q + r0 * D, D, 1.0f, dk, D)) return 1;
  }
  return 0;
}

static int bwd_item(const job *J, int64_t bh, float *P) {
  const int64_t T = J->T, D = J->D;
  const size_t off = (size_t)(bh * T * D);
  return bwd_head(J->dout + off, J->q + off, J->k + off, J->v + off, J->lse + bh * T, J->di + bh * T, J->qpos, J->kpos,
                  T, D, J->scale, J->dq + off, J->dk + off, J->dv + off, P, P + RQ * T);
}

int ts__ring_attn_bwd_block(const float *dout, const float *q, const float *k, const float *v, const float *lse,
                            const float *di, const int64_t *qpos, const int64_t *kpos, int64_t BH, int64_t T,
                            int64_t D, float scale, float *dq, float *dk, float *dv) {
  if (BH <= 0 || T <= 0 || D <= 0) return TS_OK;
  job J = {.q = q, .k = k, .v = v, .dout = dout, .lse = lse, .di = di, .qpos = qpos, .kpos = kpos, .BH = BH, .T = T,
           .D = D, .scale = scale, .dq = dq, .dk = dk, .dv = dv};
  /* one thread per head: a head's key gradients are summed over its query blocks */
  return for_items("ring_attention_bwd", &J, BH, (size_t)(2 * RQ * T), bwd_item);
}
