/* The GPU's kernel table (gpu_kernels.h): launch shapes from the sizes, then ts__cuda_launch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/gpu_kernels.h"
#include "tessera/ops.h"
#include "kernels/conv.h"
#include "kernels/pool.h"

#define BLOCK 256
#define MAX_GRID 4096 /* grid-stride beyond: the shape, and so a reduction's order, depends on n only */

static unsigned grid_for(int64_t n) {
  int64_t g = (n + BLOCK - 1) / BLOCK;
  return (unsigned)(g < 1 ? 1 : g > MAX_GRID ? MAX_GRID : g);
}

static int launch_n(ts__dev *d, const char *k, unsigned gx, unsigned gy, unsigned bx, ts__dev_stream *s, void **args,
                    int nargs) {
  const unsigned grid[3] = {gx, gy, 1}, block[3] = {bx, 1, 1};
  return ts__cuda_launch(d, k, grid, block, 0, s, args, nargs);
}
/* args: an array of this scope (its count taken here) */
#define launch(d, k, gx, gy, bx, s, args) launch_n(d, k, gx, gy, bx, s, args, (int)(sizeof(args) / sizeof(args[0])))

static int dt_ok(ts_dtype dt, const char *what) {
  return dt == TS_F32 || dt == TS_BF16 ? TS_OK
                                       : ts_error_set(TS_EDTYPE, "GPU %s: dtype %s (f32 or bf16)", what, ts_dtype_name(dt));
}

int ts__gpu_eltwise_fwd(ts__dev *d, int alg, float alpha, ts_dtype dt, const void *x, void *y, int64_t n,
                        ts__dev_stream *s) {
  int rc = dt_ok(dt, "eltwise");
  if (rc || n == 0) return rc;
  void *a[] = {&alg, &alpha, &x, &y, &n};
  return launch(d, dt == TS_F32 ? "ts_k_eltwise_fwd_f32" : "ts_k_eltwise_fwd_bf16", grid_for(n), 1, BLOCK, s, a);
}

int ts__gpu_eltwise_bwd(ts__dev *d, int alg, float alpha, int use_dst, ts_dtype dt, const void *dy, const void *src,
                        void *dx, int64_t n, ts__dev_stream *s) {
  int rc = dt_ok(dt, "eltwise backward");
  if (rc || n == 0) return rc;
  void *a[] = {&alg, &alpha, &use_dst, &dy, &src, &dx, &n};
  return launch(d, dt == TS_F32 ? "ts_k_eltwise_bwd_f32" : "ts_k_eltwise_bwd_bf16", grid_for(n), 1, BLOCK, s, a);
}

int ts__gpu_cast(ts__dev *d, ts_dtype from, ts_dtype to, const void *x, void *y, int64_t n, ts__dev_stream *s) {
  if (n == 0) return TS_OK;
  void *a[] = {&x, &y, &n};
  if (from == TS_F32 && to == TS_BF16) return launch(d, "ts_k_cast_f32_bf16", grid_for(n), 1, BLOCK, s, a);
  if (from == TS_BF16 && to == TS_F32) return launch(d, "ts_k_cast_bf16_f32", grid_for(n), 1, BLOCK, s, a);
  if (from == TS_F32 && to == TS_F16) return launch(d, "ts_k_cast_f32_f16", grid_for(n), 1, BLOCK, s, a);
  if (from == TS_F16 && to == TS_F32) return launch(d, "ts_k_cast_f16_f32", grid_for(n), 1, BLOCK, s, a);
  if (from == TS_F16 && to == TS_BF16) return launch(d, "ts_k_cast_f16_bf16", grid_for(n), 1, BLOCK, s, a);
  if (from == TS_BF16 && to == TS_F16) return launch(d, "ts_k_cast_bf16_f16", grid_for(n), 1, BLOCK, s, a);
  if (from == to) return ts__dev_copy(d, y, x, (size_t)n * ts_dtype_size(from), TS__D2D, s);
  return ts_error_set(TS_EDTYPE, "GPU cast: %s -> %s (between f32, bf16 and f16)", ts_dtype_name(from),
                      ts_dtype_name(to));
}

int ts__gpu_fill(ts__dev *d, float *y, float v, int64_t n, ts__dev_stream *s) {
  if (n == 0) return TS_OK;
  void *a[] = {&y, &v, &n};
  return launch(d, "ts_k_fill_f32", grid_for(n), 1, BLOCK, s, a);
}

int ts__gpu_axpby(ts__dev *d, float a_, const float *x, float b, float *y, int64_t n, ts__dev_stream *s) {
  if (n == 0) return TS_OK;
  void *a[] = {&a_, &x, &b, &y, &n};
  return launch(d, "ts_k_axpby_f32", grid_for(n), 1, BLOCK, s, a);
}

int64_t ts__gpu_sum_scratch(int64_t n) { return grid_for(n); }

/* the partials of x (n) into scratch (grid_for(n) of them) */
static int partials(ts__dev *d, int sq, const float *x, int64_t n, float *scratch, ts__dev_stream *s) {
  void *a[] = {&x, &n, &scratch};
  return launch(d, sq ? "ts_k_sumsq_part_f32" : "ts_k_sum_part_f32", grid_for(n), 1, BLOCK, s, a);
}

int ts__gpu_sum(ts__dev *d, int sq, const float *x, int64_t n, float *scratch, float *out, ts__dev_stream *s) {
  int rc = partials(d, sq, x, n, scratch, s);
  if (rc) return rc;
  /* one block sums the partials (a row of grid_for(n) values) */
  int64_t one = 1, np = grid_for(n);
  void *a[] = {&scratch, &one, &np, &out};
  return launch(d, "ts_k_row_sum_f32", 1, 1, 1024, s, a);
}

int ts__gpu_nonfinite(ts__dev *d, const float *x, int64_t n, int *flag, ts__dev_stream *s) {
  if (n == 0) return TS_OK;
  void *a[] = {&x, &n, &flag};
  return launch(d, "ts_k_nonfinite_f32", grid_for(n), 1, BLOCK, s, a);
}

/* one block per row (grid-stride beyond MAX_GRID rows), a block's threads over the row: a warp for
 * rows of up to 32 (a GPT of width 32: 128 threads left 96 idle at every barrier), two for 64 */
static unsigned row_block(int64_t cols) {
  return cols >= 1024 ? 1024 : cols >= 512 ? 512 : cols >= 256 ? 256 : cols > 64 ? 128 : cols > 32 ? 64 : 32;
}
/* blocks of BLOCK threads for a warp per row */
static unsigned warp_blocks(int64_t rows) {
  int64_t b = (rows + BLOCK / 32 - 1) / (BLOCK / 32);
  return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}
static unsigned row_grid(int64_t rows) { return (unsigned)(rows < 1 ? 1 : rows > 65535 ? 65535 : rows); }

int ts__gpu_softmax_ce_fwd(ts__dev *d, ts_dtype dt, const void *logits, const void *labels, int labels_i64, int64_t N,
                           int64_t C, float smoothing, int64_t ignore_index, float *loss, float *lse, float *count,
                           float *rowloss, int64_t *bad, ts__dev_stream *s) {
  int rc = dt_ok(dt, "softmax_ce");
  if (!rc) rc = ts__dev_memset0(d, bad, sizeof(int64_t), s);
  if (rc) return rc;
  if (N > 0) {
    void *a[] = {&logits, &labels, &labels_i64, &N, &C, &smoothing, &ignore_index, &rowloss, &lse, &bad};
    rc = launch(d, dt == TS_F32 ? "ts_k_softmax_ce_rows_f32" : "ts_k_softmax_ce_rows_bf16", row_grid(N), 1,
                row_block(C), s, a);
  }
  if (rc) return rc;
  void *b[] = {&rowloss, &labels, &labels_i64, &N, &ignore_index, &loss, &count};
  return launch(d, "ts_k_softmax_ce_mean", 1, 1, 1024, s, b);
}

int ts__gpu_softmax_ce_bwd(ts__dev *d, ts_dtype dt, const float *dloss, const void *logits, const void *labels,
                           int labels_i64, const float *lse, int64_t N, int64_t C, float smoothing,
                           int64_t ignore_index, const float *count, void *dlogits, ts__dev_stream *s) {
  return ts__gpu_softmax_ce_shard_bwd(d, dt, dloss, logits, labels, labels_i64, lse, N, C, C, 0, smoothing,
                                      ignore_index, count, dlogits, s);
}

int ts__gpu_softmax_ce_shard_bwd(ts__dev *d, ts_dtype dt, const float *dloss, const void *logits, const void *labels,
                                 int labels_i64, const float *lse, int64_t N, int64_t Cl, int64_t C, int64_t off,
                                 float smoothing, int64_t ignore_index, const float *count, void *dlogits,
                                 ts__dev_stream *s) {
  int rc = dt_ok(dt, "softmax_ce backward");
  if (rc || N == 0 || Cl == 0) return rc;
  void *a[] = {&dloss, &logits, &labels, &labels_i64, &lse, &N, &Cl, &C, &off, &smoothing, &ignore_index, &count, &dlogits};
  unsigned gx = (unsigned)((Cl + BLOCK - 1) / BLOCK);
  if (gx > 64) gx = 64;
  return launch(d, dt == TS_F32 ? "ts_k_softmax_ce_bwd_f32" : "ts_k_softmax_ce_bwd_bf16", gx, row_grid(N), BLOCK, s,
                a);
}

int ts__gpu_softmax_ce_shard_max(ts__dev *d, ts_dtype dt, const void *logits, const void *labels, int labels_i64,
                                 int64_t N, int64_t Cl, int64_t C, int64_t ignore_index, float *rowmax, int64_t *bad,
                                 ts__dev_stream *s) {
  int rc = dt_ok(dt, "softmax_ce (sharded)");
  if (!rc && (Cl < 1 || C < Cl))
    rc = ts_error_set(TS_ESHAPE, "GPU softmax_ce (sharded): a block of %lld of %lld classes", (long long)Cl, (long long)C);
  if (!rc) rc = ts__dev_memset0(d, bad, sizeof(int64_t), s);
  if (rc || N == 0) return rc;
  void *a[] = {&logits, &labels, &labels_i64, &N, &Cl, &C, &ignore_index, &rowmax, &bad};
  return launch(d, dt == TS_F32 ? "ts_k_softmax_ce_shard_max_f32" : "ts_k_softmax_ce_shard_max_bf16", row_grid(N), 1,
                row_block(Cl), s, a);
}

int ts__gpu_softmax_ce_shard_stats(ts__dev *d, ts_dtype dt, const void *logits, const void *labels, int labels_i64,
                                   int64_t N, int64_t Cl, int64_t off, int64_t ignore_index, const float *M,
                                   float *stats, ts__dev_stream *s) {
  int rc = dt_ok(dt, "softmax_ce (sharded)");
  if (rc || N == 0) return rc;
  void *a[] = {&logits, &labels, &labels_i64, &N, &Cl, &off, &ignore_index, &M, &stats};
  return launch(d, dt == TS_F32 ? "ts_k_softmax_ce_shard_stats_f32" : "ts_k_softmax_ce_shard_stats_bf16", row_grid(N),
                1, row_block(Cl), s, a);
}

int ts__gpu_softmax_ce_shard_loss(ts__dev *d, const void *labels, int labels_i64, int64_t N, int64_t C,
                                  float smoothing, int64_t ignore_index, const float *M, const float *stats, float *loss,
                                  float *lse, float *count, ts__dev_stream *s) {
  void *a[] = {&labels, &labels_i64, &N, &C, &smoothing, &ignore_index, &M, &stats, &loss, &lse, &count};
  return launch(d, "ts_k_softmax_ce_shard_loss", 1, 1, 1024, s, a);
}

int ts__gpu_eval_rows(ts__dev *d, const float *logits, const int32_t *labels, int64_t N, int64_t C, float *st,
                      ts__dev_stream *s) {
  if (C < 1 || C >= TS__GPU_EVAL_MAX_C || N < 0)
    return ts_error_set(TS_EUNSUPPORTED, "evaluation metrics on the GPU: %lld rows of %lld classes (at most 2^24 - 1)",
                        (long long)N, (long long)C);
  if (N == 0) return TS_OK;
  void *a[] = {&logits, &labels, &N, &C, &st};
  return launch(d, "ts_k_eval_rows_f32", row_grid(N), 1, row_block(C), s, a);
}

int ts__gpu_layernorm_fwd(ts__dev *d, ts_dtype dt, const void *x, const float *gamma, const float *beta, void *y,
                          float *mean, float *var, int64_t R, int64_t D, float eps, ts__dev_stream *s) {
  int rc = dt_ok(dt, "layernorm");
  if (rc || R == 0) return rc;
  void *a[] = {&x, &gamma, &beta, &y, &mean, &var, &R, &D, &eps};
  return launch(d, dt == TS_F32 ? "ts_k_layernorm_fwd_f32" : "ts_k_layernorm_fwd_bf16", row_grid(R), 1, row_block(D),
                s, a);
}

/* dgamma, dbeta (layernorm.cu): the column sums over chunks of 64 rows, then over the chunks */
#define LN_CHUNK 64
size_t ts__gpu_layernorm_bwd_workspace(int64_t R, int64_t D) {
  return sizeof(float) * (size_t)(2 * D * ((R + LN_CHUNK - 1) / LN_CHUNK));
}
static int ln_params(ts__dev *d, ts_dtype dt, ts_dtype gdt, const void *dy, const void *x, const float *mean,
                     const float *var, void *dgamma, void *dbeta, int64_t R, int64_t D, float eps, float *part,
                     ts__dev_stream *s) {
  if (!dgamma && !dbeta) return TS_OK;
  int64_t P = (R + LN_CHUNK - 1) / LN_CHUNK;
  unsigned gx = (unsigned)((D + BLOCK - 1) / BLOCK);
  void *a[] = {&dy, &x, &mean, &var, &R, &D, &eps, &P, &part};
  int rc = launch(d, dt == TS_F32 ? "ts_k_layernorm_bwd_parts_f32" : "ts_k_layernorm_bwd_parts_bf16", gx > 64 ? 64 : gx,
                  row_grid(P), BLOCK, s, a);
  void *b[] = {&part, &D, &P, &dgamma, &dbeta};
  return rc ? rc : launch(d, gdt == TS_F32 ? "ts_k_layernorm_bwd_fold_f32" : "ts_k_layernorm_bwd_fold_bf16", grid_for(D),
                          1, BLOCK, s, b);
}

int ts__gpu_layernorm_bwd(ts__dev *d, ts_dtype dt, const void *dy, const void *x, const float *gamma,
                          const float *mean, const float *var, void *dx, float *dgamma, float *dbeta, int64_t R,
                          int64_t D, float eps, void *ws, ts__dev_stream *s) {
  int rc = dt_ok(dt, "layernorm backward");
  if (rc || R == 0) return rc;
  int f32 = dt == TS_F32;
  void *a[] = {&dy, &x, &gamma, &mean, &var, &dx, &R, &D, &eps};
  rc = launch(d, f32 ? "ts_k_layernorm_bwd_dx_f32" : "ts_k_layernorm_bwd_dx_bf16", row_grid(R), 1, row_block(D), s, a);
  return rc ? rc : ln_params(d, dt, TS_F32, dy, x, mean, var, dgamma, dbeta, R, D, eps, ws, s);
}

int ts__gpu_sgd(ts__dev *d, float *p, const float *g, int64_t n, float lr, float wd, ts__dev_stream *s) {
  if (n == 0) return TS_OK;
  void *a[] = {&p, &g, &n, &lr, &wd};
  return launch(d, "ts_k_sgd_f32", grid_for(n), 1, BLOCK, s, a);
}

int ts__gpu_momentum(ts__dev *d, float *p, const float *g, float *buf, int64_t n, float lr, float wd, float mu,
                     float one_m_damp, int first, int nesterov, ts__dev_stream *s) {
  if (n == 0) return TS_OK;
  void *a[] = {&p, &g, &buf, &n, &lr, &wd, &mu, &one_m_damp, &first, &nesterov};
  return launch(d, "ts_k_momentum_f32", grid_for(n), 1, BLOCK, s, a);
}

int ts__gpu_adam(ts__dev *d, float *p, const float *g, float *m, float *v, int64_t n, float l2, float decay_mul,
                 float b1, float one_m_b1, float b2, float one_m_b2, float bc2_sqrt, float eps, float neg_step,
                 ts__dev_stream *s) {
  if (n == 0) return TS_OK;
  void *a[] = {&p, &g, &m, &v, &n, &l2, &decay_mul, &b1, &one_m_b1, &b2, &one_m_b2, &bc2_sqrt, &eps, &neg_step};
  return launch(d, "ts_k_adam_f32", grid_for(n), 1, BLOCK, s, a);
}

int64_t ts__gpu_mchunks(const int64_t *off, const int64_t *numel, const int *decay, int nseg, ts__gpu_mchunk *out,
                        int64_t cap) {
  int64_t k = 0;
  for (int i = 0; i < nseg; i++)
    for (int64_t lo = off[i]; lo < off[i] + numel[i]; lo += TS__GPU_MCHUNK, k++)
      if (out && k < cap) {
        int64_t hi = lo + TS__GPU_MCHUNK < off[i] + numel[i] ? lo + TS__GPU_MCHUNK : off[i] + numel[i];
        out[k] = (ts__gpu_mchunk){lo, hi, decay[i] != 0};
      }
  return k;
}

int ts__gpu_optim_multi(ts__dev *d, int kind, float *p, const float *g, float *m, float *v, const ts__gpu_mchunk *ch,
                        int64_t nch, const ts__gpu_optim_args *args, ts__dev_stream *s) {
  if (kind < 0 || kind > 2) return ts_error_set(TS_EINVAL, "GPU optimizer: kind %d", kind);
  if (nch == 0) return TS_OK;
  ts__gpu_optim_args a = *args;
  void *k[] = {&kind, &p, &g, &m, &v, &ch, &nch, &a};
  return launch(d, "ts_k_optim_multi_f32", row_grid(nch), 1, BLOCK, s, k);
}

int ts__gpu_clip(ts__dev *d, float *g, int64_t n, float max_norm, float *scratch, float *fs, ts__dev_stream *s) {
  int rc = partials(d, 1, g, n, scratch, s);
  if (rc) return rc;
  int np = (int)grid_for(n);
  void *a[] = {&scratch, &np, &max_norm, &fs};
  if ((rc = launch(d, "ts_k_clip_factor_f32", 1, 1, 1024, s, a))) return rc;
  void *b[] = {&g, &n, &fs};
  return launch(d, "ts_k_scale_by_f32", grid_for(n), 1, BLOCK, s, b);
}

const char *ts__gpu_gemm_impl(const char **why) {
  const char *force = getenv("TESSERA_GPU_GEMM");
  if (why) *why = ts__cublas_why();
  if (force && !strcmp(force, "tessera")) return "tessera";
  if (force && !strcmp(force, "cublas")) return "cublas";
  return ts__cublas_available() ? "cublas" : "tessera";
}

static int g_tf32;
void ts__gpu_set_tf32(int on) { g_tf32 = on != 0; }
int ts__gpu_tf32(void) { return g_tf32; }

int ts__gpu_gemm(ts__dev *d, const ts__mm_desc *m, ts_dtype ab_dt, ts_dtype c_dt, const void *a, const void *b,
                 const void *bias, void *c, ts__dev_stream *s) {
  int rc = ts__mm_check(m, "GPU gemm");
  if (rc) return rc;
  const char *k = ab_dt == TS_F32 && c_dt == TS_F32     ? "ts_k_gemm_f32"
                  : ab_dt == TS_BF16 && c_dt == TS_BF16 ? "ts_k_gemm_bf16"
                  : ab_dt == TS_BF16 && c_dt == TS_F32  ? "ts_k_gemm_bf16_f32"
                                                        : NULL;
  const int cublas = !strcmp(ts__gpu_gemm_impl(NULL), "cublas");
  if (cublas && ab_dt == TS_F16 && c_dt == TS_F16) return ts__cublas_gemm(d, m, ab_dt, c_dt, a, b, bias, c, s);
  if (!k)
    return ts_error_set(TS_EDTYPE, "GPU gemm: %s operands -> %s (f32, bf16, bf16 -> f32; f16 through cuBLAS)",
                        ts_dtype_name(ab_dt), ts_dtype_name(c_dt));
  if (cublas) return ts__cublas_gemm(d, m, ab_dt, c_dt, a, b, bias, c, s);
  if (m->batch > 65535 || (m->M + 63) / 64 > 65535)
    return ts_error_set(TS_ERANGE, "GPU gemm: batch %lld x %lld rows is beyond the launch grid", (long long)m->batch,
                        (long long)m->M);
  int64_t M = m->M, N = m->N, K = m->K;
  int ta = m->trans_a, tb = m->trans_b, ab = m->a_batched, bb = m->b_batched;
  void *args[] = {&a, &b, &bias, &c, &M, &N, &K, &ta, &tb, &ab, &bb};
  const unsigned grid[3] = {(unsigned)((N + 63) / 64), (unsigned)((M + 63) / 64), (unsigned)m->batch};
  const unsigned block[3] = {256, 1, 1};
  return ts__cuda_launch(d, k, grid, block, 0, s, args, 11);
}

int ts__gpu_col_sum(ts__dev *d, ts_dtype dt, const void *x, int64_t R, int64_t C, void *y, ts__dev_stream *s) {
  int rc = dt_ok(dt, "column sum");
  if (rc || C == 0) return rc;
  void *a[] = {&x, &R, &C, &y};
  return launch(d, dt == TS_F32 ? "ts_k_col_sum_f32" : "ts_k_col_sum_bf16", grid_for(C), 1, BLOCK, s, a);
}

int ts__gpu_dropout(ts__dev *d, ts_dtype dt, const void *x, void *y, int64_t n, float p, uint64_t seed, uint64_t step,
                    uint64_t offset, ts__dev_stream *s) {
  int rc = dt_ok(dt, "dropout");
  if (rc || n == 0) return rc;
  if (!(p >= 0.0f && p <= 1.0f)) return ts_error_set(TS_EINVAL, "GPU dropout: probability %g outside [0,1]", (double)p);
  size_t es = ts_dtype_size(dt);
  if (p == 0.0f) return x == y ? TS_OK : ts__dev_copy(d, y, x, (size_t)n * es, TS__D2D, s);
  if (p >= 1.0f) return ts__dev_memset0(d, y, (size_t)n * es, s);
  unsigned thr = (unsigned)ceil((double)p * 16777216.0); /* as src/kernels/dropout.c */
  float scale = 1.0f / (1.0f - p);
  unsigned long long sd = seed, st = step, of = offset;
  void *a[] = {&x, &y, &n, &thr, &scale, &sd, &st, &of};
  return launch(d, dt == TS_F32 ? "ts_k_dropout_f32" : "ts_k_dropout_bf16", grid_for(n), 1, BLOCK, s, a);
}

int ts__gpu_embedding_fwd(ts__dev *d, ts_dtype dt, const void *table, int64_t V, int64_t D, int64_t off, int sharded,
                          const void *ids, int ids_i64, int64_t N, void *y, int64_t *bad, ts__dev_stream *s) {
  int rc = dt_ok(dt, "embedding");
  if (!rc) rc = ts__dev_memset0(d, bad, sizeof(int64_t), s);
  if (rc || N == 0) return rc;
  void *a[] = {&table, &ids, &ids_i64, &N, &V, &D, &off, &sharded, &y, &bad};
  unsigned gx = (unsigned)((D + BLOCK - 1) / BLOCK);
  return launch(d, dt == TS_F32 ? "ts_k_embedding_fwd_f32" : "ts_k_embedding_fwd_bf16", gx > 64 ? 64 : gx, row_grid(N),
                BLOCK, s, a);
}

/* embedding.cu's token lists up to this many tokens (T^2 comparisons), a thread per column beyond */
#define EMB_LISTS_MAX 65536
size_t ts__gpu_embedding_bwd_workspace(ts_dtype dt, int64_t N, int64_t V, int64_t D) {
  if (N <= EMB_LISTS_MAX) return sizeof(int) * (size_t)(2 * N);
  return dt == TS_BF16 ? sizeof(float) * (size_t)(V * D) : 0;
}

int ts__gpu_embedding_bwd(ts__dev *d, ts_dtype dt, const void *dy, const void *ids, int ids_i64, int64_t N, int64_t V,
                          int64_t D, int64_t off, void *dtable, void *ws, ts__dev_stream *s) {
  int rc = dt_ok(dt, "embedding backward");
  if (!rc) rc = ts__dev_memset0(d, dtable, (size_t)V * (size_t)D * ts_dtype_size(dt), s);
  if (rc || N == 0 || D == 0) return rc;
  const int f32 = dt == TS_F32;
  unsigned gx = (unsigned)((D + BLOCK - 1) / BLOCK);
  if (N <= EMB_LISTS_MAX) {
    int *nxt = ws, *head = nxt + N;
    void *a[] = {&ids, &ids_i64, &N, &V, &off, &nxt, &head};
    rc = launch(d, "ts_k_embedding_lists", (unsigned)((N + 255) / 256), 1, 256, s, a);
    void *b[] = {&dy, &ids, &ids_i64, &N, &D, &off, &nxt, &head, &dtable};
    return rc ? rc : launch(d, f32 ? "ts_k_embedding_bwd_lists_f32" : "ts_k_embedding_bwd_lists_bf16", gx > 64 ? 64 : gx,
                            row_grid(N), BLOCK, s, b);
  }
  float *acc = f32 ? dtable : ws;
  if (!f32 && (rc = ts__dev_memset0(d, acc, (size_t)V * (size_t)D * sizeof(float), s))) return rc;
  void *a[] = {&dy, &ids, &ids_i64, &N, &V, &D, &off, &acc};
  rc = launch(d, f32 ? "ts_k_embedding_bwd_f32" : "ts_k_embedding_bwd_bf16", grid_for(D), 1, BLOCK, s, a);
  return rc || f32 ? rc : ts__gpu_cast(d, TS_F32, TS_BF16, acc, dtable, V * D, s);
}

int ts__gpu_one_hot(ts__dev *d, ts_dtype dt, const void *ids, int ids_i64, int64_t outer, int64_t depth,
                    int64_t inner, float on, float off, void *y, ts__dev_stream *s) {
  size_t es = ts_dtype_size(dt);
  if (es != 4 && es != 2)
    return ts_error_set(TS_EDTYPE, "GPU one_hot: dtype %s (a 4- or 2-byte type)", ts_dtype_name(dt));
  int64_t n = outer * depth * inner;
  if (n == 0) return TS_OK;
  unsigned char pon[8] = {0}, poff[8] = {0};
  int rc = ts_convert(&on, TS_F32, pon, dt, 1);
  if (!rc) rc = ts_convert(&off, TS_F32, poff, dt, 1);
  if (rc) return rc;
  unsigned won = 0, woff = 0;
  memcpy(&won, pon, es);
  memcpy(&woff, poff, es);
  void *a[] = {&ids, &ids_i64, &outer, &depth, &inner, &won, &woff, &y};
  return launch(d, es == 4 ? "ts_k_one_hot_b32" : "ts_k_one_hot_b16", grid_for(n), 1, BLOCK, s, a);
}

/* the kernels' shape struct (binary.cu: struct bshape) */
#define MAXD 8
typedef struct {
  int nd;
  int64_t dims[MAXD], sa[MAXD], sb[MAXD];
} bshape;

/* strides of operand shape o (right-aligned) against y's dims, 0 where o broadcasts */
static int bstrides(const ts_shape *o, const ts_shape *y, int64_t *st, const char *what) {
  int off = y->ndim - o->ndim;
  if (off < 0) return ts_error_set(TS_ESHAPE, "GPU %s: an operand has more dims (%d) than the result (%d)", what, o->ndim, y->ndim);
  int64_t stride = 1;
  for (int d = y->ndim - 1; d >= 0; d--) {
    int od = d - off;
    int64_t n = od >= 0 ? o->dims[od] : 1;
    if (n != 1 && n != y->dims[d])
      return ts_error_set(TS_ESHAPE, "GPU %s: dim %d of size %lld does not broadcast to %lld", what, d, (long long)n,
                          (long long)y->dims[d]);
    st[d] = n == 1 ? 0 : stride;
    stride *= n;
  }
  return TS_OK;
}

/* Adjacent dims merged where both operands walk them as one (contiguous across the pair, or
 * broadcast along both): the same elements with fewer index divisions per element in the kernel
 * (a residual add becomes one contiguous dim, a bias add two). */
static void bcollapse(bshape *sh) {
  int m = 0;
  for (int d = 0; d < sh->nd; d++) {
    if (m > 0 && sh->sa[m - 1] == sh->sa[d] * sh->dims[d] && sh->sb[m - 1] == sh->sb[d] * sh->dims[d]) {
      sh->dims[m - 1] *= sh->dims[d];
      sh->sa[m - 1] = sh->sa[d], sh->sb[m - 1] = sh->sb[d];
    } else {
      sh->dims[m] = sh->dims[d], sh->sa[m] = sh->sa[d], sh->sb[m] = sh->sb[d];
      m++;
    }
  }
  sh->nd = m;
}

int ts__gpu_binary(ts__dev *d, int alg, ts_dtype dt, const void *a, const ts_shape *as, const void *b,
                   const ts_shape *bs, void *y, const ts_shape *ys, ts__dev_stream *s) {
  int rc = dt_ok(dt, "binary");
  if (rc) return rc;
  if (ys->ndim > MAXD) return ts_error_set(TS_EUNSUPPORTED, "GPU binary: %d dims (at most %d)", ys->ndim, MAXD);
  if (alg < 0 || alg >= TS_BIN_COUNT) return ts_error_set(TS_EINVAL, "GPU binary: algorithm %d", alg);
  bshape sh;
  memset(&sh, 0, sizeof sh);
  sh.nd = ys->ndim;
  for (int k = 0; k < ys->ndim; k++) sh.dims[k] = ys->dims[k];
  if ((rc = bstrides(as, ys, sh.sa, "binary")) || (rc = bstrides(bs, ys, sh.sb, "binary"))) return rc;
  int64_t n = ts_shape_numel(ys);
  if (n == 0) return TS_OK;
  bcollapse(&sh);
  void *args[] = {&alg, &a, &b, &y, &sh, &n};
  return launch(d, dt == TS_F32 ? "ts_k_binary_f32" : "ts_k_binary_bf16", grid_for(n), 1, BLOCK, s, args);
}

/* the reduce kernels' shape: x's dims, 0 along the dims y reduces, the elements per y element */
static int reduce_shape(const ts_shape *xs, const ts_shape *ys, bshape *sh, const char *what) {
  if (xs->ndim > MAXD) return ts_error_set(TS_EUNSUPPORTED, "GPU %s: %d dims (at most %d)", what, xs->ndim, MAXD);
  memset(sh, 0, sizeof *sh);
  sh->nd = xs->ndim;
  int off = xs->ndim - ys->ndim;
  if (off < 0) return ts_error_set(TS_ESHAPE, "GPU %s: the result has more dims than x", what);
  int64_t per = 1;
  for (int k = 0; k < xs->ndim; k++) {
    int64_t yd = k - off >= 0 ? ys->dims[k - off] : 1;
    if (yd != 1 && yd != xs->dims[k])
      return ts_error_set(TS_ESHAPE, "GPU %s: dim %d: %lld to %lld", what, k, (long long)xs->dims[k], (long long)yd);
    sh->dims[k] = xs->dims[k];
    sh->sa[k] = yd == 1 && xs->dims[k] > 1 ? 0 : 1; /* 0: reduced */
    if (!sh->sa[k]) per *= xs->dims[k];
  }
  sh->sb[0] = per;
  return TS_OK;
}

/* Which reduction kernel (binary.cu): the reduced dims (size > 1) all before the kept ones: x is
 * (R, ny) reduced over its rows (RED_COLS); all after them: x is (ny, per) reduced along its rows
 * (RED_ROWS); else the general kernel (a thread per result, ix_of's index arithmetic). */
enum { RED_ANY, RED_COLS, RED_ROWS };
#define RED_CHUNK 64 /* rows a block reduces in RED_COLS's first step */
static int red_layout(const bshape *sh) {
  int first_kept = -1, last_red = -1, first_red = -1, last_kept = -1;
  for (int k = 0; k < sh->nd; k++) {
    if (sh->dims[k] == 1) continue;
    if (sh->sa[k]) {
      if (first_kept < 0) first_kept = k;
      last_kept = k;
    } else {
      if (first_red < 0) first_red = k;
      last_red = k;
    }
  }
  if (first_red < 0) return RED_ROWS; /* nothing reduced: rows of one */
  if (first_kept < 0 || last_red < first_kept) return RED_COLS;
  return first_red > last_kept ? RED_ROWS : RED_ANY;
}
size_t ts__gpu_reduce_workspace(const ts_shape *xs, const ts_shape *ys) {
  bshape sh;
  if (reduce_shape(xs, ys, &sh, "reduce")) return 0; /* ts__gpu_reduce refuses the shapes */
  if (red_layout(&sh) != RED_COLS) return 0;
  int64_t R = sh.sb[0], P = (R + RED_CHUNK - 1) / RED_CHUNK;
  return sizeof(float) * (size_t)(P * ts_shape_numel(ys));
}

int ts__gpu_reduce(ts__dev *d, int alg, ts_dtype dt, const void *x, const ts_shape *xs, void *y, const ts_shape *ys,
                   void *ws, ts__dev_stream *s) {
  bshape sh;
  int rc = dt_ok(dt, "reduce");
  if (!rc && (alg < 0 || alg > 2)) rc = ts_error_set(TS_EINVAL, "GPU reduce: algorithm %d", alg);
  if (!rc) rc = reduce_shape(xs, ys, &sh, "reduce");
  int64_t ny = ts_shape_numel(ys);
  if (rc || ny == 0) return rc;
  const int f32 = dt == TS_F32, lay = red_layout(&sh);
  int64_t per = sh.sb[0];
  if (lay == RED_COLS && ws) {
    int64_t L = RED_CHUNK, P = (per + L - 1) / L;
    unsigned gx = (unsigned)((ny + BLOCK - 1) / BLOCK);
    void *a[] = {&x, &per, &ny, &L, &P, &alg, &ws};
    rc = launch(d, f32 ? "ts_k_reduce_cols_part_f32" : "ts_k_reduce_cols_part_bf16", gx > 64 ? 64 : gx, row_grid(P), BLOCK,
                s, a);
    void *b[] = {&ws, &per, &ny, &P, &alg, &y};
    return rc ? rc : launch(d, f32 ? "ts_k_reduce_cols_fold_f32" : "ts_k_reduce_cols_fold_bf16", grid_for(ny), 1, BLOCK, s, b);
  }
  if (lay == RED_ROWS) {
    void *a[] = {&x, &y, &ny, &per, &alg};
    return launch(d, f32 ? "ts_k_reduce_rows_f32" : "ts_k_reduce_rows_bf16", warp_blocks(ny), 1, BLOCK, s, a);
  }
  void *args[] = {&x, &y, &sh, &ny, &alg};
  return launch(d, f32 ? "ts_k_reduce_f32" : "ts_k_reduce_bf16", grid_for(ny), 1, BLOCK, s, args);
}

int ts__gpu_sum_to(ts__dev *d, ts_dtype dt, const void *x, const ts_shape *xs, void *y, const ts_shape *ys, void *ws,
                   ts__dev_stream *s) {
  return ts__gpu_reduce(d, 0, dt, x, xs, y, ys, ws, s);
}

int ts__gpu_reduce_max_bwd(ts__dev *d, ts_dtype dt, const void *dy, const void *x, const ts_shape *xs, const void *y,
                           const ts_shape *ys, void *dx, ts__dev_stream *s) {
  bshape sh;
  int rc = dt_ok(dt, "reduce max backward");
  if (!rc) rc = reduce_shape(xs, ys, &sh, "reduce max backward");
  int64_t ny = ts_shape_numel(ys);
  if (rc || ny == 0) return rc;
  void *args[] = {&dy, &x, &y, &dx, &sh, &ny};
  return launch(d, dt == TS_F32 ? "ts_k_reduce_max_bwd_f32" : "ts_k_reduce_max_bwd_bf16", grid_for(ny), 1, BLOCK, s,
                args);
}

int ts__gpu_broadcast(ts__dev *d, ts_dtype dt, const void *x, const ts_shape *xs, void *y, const ts_shape *ys,
                      ts__dev_stream *s) {
  int rc = dt_ok(dt, "broadcast");
  if (rc) return rc;
  if (ys->ndim > MAXD) return ts_error_set(TS_EUNSUPPORTED, "GPU broadcast: %d dims (at most %d)", ys->ndim, MAXD);
  bshape sh;
  memset(&sh, 0, sizeof sh);
  sh.nd = ys->ndim;
  for (int k = 0; k < ys->ndim; k++) sh.dims[k] = ys->dims[k];
  if ((rc = bstrides(xs, ys, sh.sa, "broadcast"))) return rc;
  int64_t n = ts_shape_numel(ys);
  if (n == 0) return TS_OK;
  void *args[] = {&x, &y, &sh, &n};
  return launch(d, dt == TS_F32 ? "ts_k_broadcast_f32" : "ts_k_broadcast_bf16", grid_for(n), 1, BLOCK, s, args);
}

int ts__gpu_scale(ts__dev *d, ts_dtype dt, const void *x, void *y, int64_t n, float alpha, float beta,
                  ts__dev_stream *s) {
  int rc = dt_ok(dt, "scale");
  if (rc || n == 0) return rc;
  void *a[] = {&x, &y, &n, &alpha, &beta};
  return launch(d, dt == TS_F32 ? "ts_k_scale_f32" : "ts_k_scale_bf16", grid_for(n), 1, BLOCK, s, a);
}

int ts__gpu_fill_dt(ts__dev *d, ts_dtype dt, void *y, float v, int64_t n, ts__dev_stream *s) {
  int rc = dt == TS_F16 ? TS_OK : dt_ok(dt, "fill");
  if (rc || n == 0) return rc;
  if (dt == TS_F32) return ts__gpu_fill(d, y, v, n, s);
  void *a[] = {&y, &v, &n};
  return launch(d, dt == TS_F16 ? "ts_k_fill_f16" : "ts_k_fill_bf16", grid_for(n), 1, BLOCK, s, a);
}

int ts__gpu_label_count(ts__dev *d, const void *labels, int labels_i64, int64_t N, int64_t ignore_index, float *count,
                        ts__dev_stream *s) {
  void *a[] = {&labels, &labels_i64, &N, &ignore_index, &count};
  return launch(d, "ts_k_label_count", 1, 1, 1024, s, a);
}

typedef struct {
  int nd;
  int64_t ydims[MAXD], xs[MAXD];
} pshape;

static const char *sized(const char *base, size_t esize, char *buf, size_t cap) {
  snprintf(buf, cap, "%s_%zu", base, esize);
  return buf;
}

int ts__gpu_permute(ts__dev *d, size_t esize, const void *x, void *y, int ndim, const int64_t *dims, const int *perm,
                    ts__dev_stream *s) {
  if (esize != 1 && esize != 2 && esize != 4 && esize != 8)
    return ts_error_set(TS_EDTYPE, "GPU permute: %zu-byte elements", esize);
  if (ndim > MAXD) return ts_error_set(TS_EUNSUPPORTED, "GPU permute: %d dims (at most %d)", ndim, MAXD);
  pshape sh;
  memset(&sh, 0, sizeof sh);
  sh.nd = ndim;
  int64_t xst[MAXD], st = 1, n = 1;
  for (int k = ndim - 1; k >= 0; k--) xst[k] = st, st *= dims[k];
  for (int k = 0; k < ndim; k++) sh.ydims[k] = dims[perm[k]], sh.xs[k] = xst[perm[k]], n *= dims[k];
  if (n == 0) return TS_OK;
  char k[32];
  void *a[] = {&x, &y, &sh, &n};
  return launch(d, sized("ts_k_permute", esize, k, sizeof k), grid_for(n), 1, BLOCK, s, a);
}

int ts__gpu_blocks(ts__dev *d, size_t esize, const void *x, int64_t xstride, int64_t xoff, void *y, int64_t ystride,
                   int64_t yoff, int64_t rows, int64_t len, ts__dev_stream *s) {
  if (esize != 2 && esize != 4 && esize != 8) return ts_error_set(TS_EDTYPE, "GPU copy: %zu-byte elements", esize);
  if (rows * len == 0) return TS_OK;
  char k[32];
  void *a[] = {&x, &xstride, &xoff, &y, &ystride, &yoff, &rows, &len};
  return launch(d, sized("ts_k_blocks", esize, k, sizeof k), grid_for(rows * len), 1, BLOCK, s, a);
}

/* the kernels' strides (attention.cu: struct astr) of a layout */
typedef struct {
  int64_t sb, sh, st, ob, oh, ot, B, H, T, D;
} astr;

static int astrides(int layout, int64_t B, int64_t H, int64_t T, int64_t D, astr *a) {
  a->B = B, a->H = H, a->T = T, a->D = D;
  int64_t C = H * D;
  switch (layout) {
    case 0: a->sb = H * T * D, a->sh = T * D, a->st = D; break;     /* BHTD */
    case 1: a->sb = T * C, a->sh = D, a->st = C; break;             /* BTHD */
    case 2: a->sb = T * 3 * C, a->sh = D, a->st = 3 * C; break;     /* QKV */
    default: return ts_error_set(TS_EINVAL, "GPU attention: layout %d", layout);
  }
  if (layout == 2) a->ob = T * C, a->oh = D, a->ot = C;
  else a->ob = a->sb, a->oh = a->sh, a->ot = a->st;
  if (D > 256) return ts_error_set(TS_EUNSUPPORTED, "GPU attention: head dimension %lld (at most 256)", (long long)D);
  return TS_OK;
}

static unsigned row_blocks(int64_t rows) { return (unsigned)(rows < 1 ? 1 : rows > (1 << 20) ? (1 << 20) : rows); }

/* Which attention kernels (attention.cu): for heads up to 64 wide, bf16 on tensor cores (_tc:
 * blocks of 64 rows, 128 threads) and f32 on the SIMT tiled kernels (_t: blocks of 64 rows, 128
 * threads); wider heads on the row kernels (one warp per row, D <= 256). TESSERA_GPU_ATTENTION=simt
 * puts bf16 on the SIMT tiled kernels too, =rows everything on the row kernels. */
enum { ATTN_ROWS, ATTN_SIMT, ATTN_TC };
static int attn_kind(ts_dtype dt, int64_t D) {
  const char *e = getenv("TESSERA_GPU_ATTENTION");
  if (D > 64 || (e && !strcmp(e, "rows"))) return ATTN_ROWS;
  return dt == TS_BF16 && !(e && !strcmp(e, "simt")) ? ATTN_TC : ATTN_SIMT;
}
#define ATTN_TBR 64 /* attention.cu's TBR and TCR */

int ts__gpu_attention_fwd(ts__dev *d, ts_dtype dt, const void *q, const void *k, const void *v, void *o, float *lse,
                          int64_t B, int64_t H, int64_t T, int64_t D, float scale, int layout, ts__dev_stream *s) {
  astr st;
  int rc = dt_ok(dt, "attention");
  if (!rc) rc = astrides(layout, B, H, T, D, &st);
  if (rc || B * H * T == 0) return rc;
  void *a[] = {&q, &k, &v, &o, &lse, &st, &scale};
  int f32 = dt == TS_F32, kind = attn_kind(dt, D);
  if (kind != ATTN_ROWS)
    return launch(d, kind == ATTN_TC ? "ts_k_attention_fwd_tc_bf16" : f32 ? "ts_k_attention_fwd_t_f32" : "ts_k_attention_fwd_t_bf16",
                  row_blocks((T + ATTN_TBR - 1) / ATTN_TBR), (unsigned)(B * H < 65535 ? B * H : 65535), 2 * ATTN_TBR, s, a);
  return launch(d, f32 ? "ts_k_attention_fwd_f32" : "ts_k_attention_fwd_bf16", row_blocks(B * H * T), 1, 32, s, a);
}

int ts__gpu_attention_bwd(ts__dev *d, ts_dtype dt, const void *dout, const void *q, const void *k, const void *v,
                          const void *o, const float *lse, void *dq, void *dk, void *dv, float *Dr, int64_t B,
                          int64_t H, int64_t T, int64_t D, float scale, int layout, ts__dev_stream *s) {
  astr st;
  int rc = dt_ok(dt, "attention backward");
  if (!rc) rc = astrides(layout, B, H, T, D, &st);
  if (rc || B * H * T == 0) return rc;
  int f32 = dt == TS_F32;
  unsigned g = row_blocks(B * H * T);
  void *a0[] = {&dout, &o, &Dr, &st};
  if ((rc = launch(d, f32 ? "ts_k_attention_dot_f32" : "ts_k_attention_dot_bf16", g, 1, 32, s, a0))) return rc;
  void *a1[] = {&dout, &q, &k, &v, &lse, &Dr, &dq, &st, &scale};
  void *a2[] = {&dout, &q, &k, &v, &lse, &Dr, &dk, &dv, &st, &scale};
  const int kind = attn_kind(dt, D);
  if (kind != ATTN_ROWS) {
    unsigned gx = row_blocks((T + ATTN_TBR - 1) / ATTN_TBR), gy = (unsigned)(B * H < 65535 ? B * H : 65535);
    if ((rc = launch(d, kind == ATTN_TC ? "ts_k_attention_dq_tc_bf16" : f32 ? "ts_k_attention_dq_t_f32" : "ts_k_attention_dq_t_bf16",
                     gx, gy, 2 * ATTN_TBR, s, a1)))
      return rc;
    return launch(d, kind == ATTN_TC ? "ts_k_attention_dkv_tc_bf16" : f32 ? "ts_k_attention_dkv_t_f32" : "ts_k_attention_dkv_t_bf16",
                  gx, gy, 2 * ATTN_TBR, s, a2);
  }
  if ((rc = launch(d, f32 ? "ts_k_attention_dq_f32" : "ts_k_attention_dq_bf16", g, 1, 32, s, a1))) return rc;
  return launch(d, f32 ? "ts_k_attention_dkv_f32" : "ts_k_attention_dkv_bf16", g, 1, 32, s, a2);
}

/* conv.cu's struct cdesc and pdesc: the descriptors' fields in the kernels' order */
typedef struct {
  int64_t N, C, H, W, O, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw, groups;
} cdesc;
typedef struct {
  int64_t N, C, H, W, OH, OW, kh, kw, sh, sw, ph, pw, cl;
} pdesc;

static int conv_of(const ts__conv_desc *c, cdesc *k) {
  int rc = ts__conv_check(c, "GPU conv2d");
  *k = (cdesc){c->N, c->C, c->H, c->W, c->O, c->KH, c->KW, c->OH, c->OW, c->sh, c->sw, c->ph, c->pw, c->dh, c->dw, c->groups};
  return rc;
}
static pdesc pool_of(const ts__pool_desc *p, int cl) {
  return (pdesc){p->N, p->C, p->H, p->W, p->OH, p->OW, p->kh, p->kw, p->sh, p->sw, p->ph, p->pw, cl != 0};
}

/* The kernel of a storage dtype: f32 or bf16 (f16: refused, naming the op). */
static int kname(char *buf, size_t cap, const char *base, ts_dtype dt, const char *what) {
  if (dt != TS_F32 && dt != TS_BF16)
    return ts_error_set(TS_EUNSUPPORTED, "GPU %s: %s (f32 and bf16 on the GPU)", what, ts_dtype_name(dt));
  snprintf(buf, cap, "%s_%s", base, dt == TS_F32 ? "f32" : "bf16");
  return TS_OK;
}

/* the same, f16 too (the kernels around cuDNN's convolutions) */
static int kname16(char *buf, size_t cap, const char *base, ts_dtype dt, const char *what) {
  if (dt != TS_F16) return kname(buf, cap, base, dt, what);
  snprintf(buf, cap, "%s_f16", base);
  return TS_OK;
}

const char *ts__gpu_conv_impl(const char **why) {
  const char *force = getenv("TESSERA_GPU_CONV");
  if (why) *why = ts__cudnn_why();
  if (force && !strcmp(force, "tessera")) return "tessera";
  if (force && !strcmp(force, "cudnn")) return "cudnn";
  return ts__cudnn_available() ? "cudnn" : "tessera";
}

/* cuDNN runs this direction of this shape: it is the convolution in use and (unless forced by
 * TESSERA_GPU_CONV=cudnn) has a deterministic algorithm for it */
static int conv_cudnn(const ts__conv_desc *c, ts_dtype dt, int cl, int dir) {
  if (strcmp(ts__gpu_conv_impl(NULL), "cudnn")) return 0;
  const char *force = getenv("TESSERA_GPU_CONV");
  return (force && !strcmp(force, "cudnn")) || ts__cudnn_conv_has_algo(c, dt, cl, dir);
}

int ts__gpu_conv2d_on_cudnn(const ts__conv_desc *c, ts_dtype dt, int cl, int dir) {
  cdesc k;
  size_t b = 0;
  if (conv_of(c, &k) || (dt != TS_F32 && dt != TS_BF16 && dt != TS_F16)) return 0;
  if (strcmp(ts__gpu_conv_impl(NULL), "cudnn")) return 0;
  /* cuDNN takes the descriptors and has a deterministic algorithm for them (any refusal: the
   * other route, where the same refusal is reported when the node runs) */
  return ts__cudnn_conv_workspace(c, dt, cl, dir, &b) == TS_OK;
}

/* the direction runs on cuDNN (in the layout asked for), or on the direct kernels (NCHW, f32 and
 * bf16 only) */
static int conv_route(const ts__conv_desc *c, ts_dtype dt, int cl, int dir, const char *what, char *kn, size_t cap,
                      int *cudnn) {
  cdesc k;
  int rc = conv_of(c, &k);
  if (!rc && dt != TS_F16)
    rc = kname(kn, cap, dir == 0 ? "ts_k_conv2d_fwd" : dir == 1 ? "ts_k_conv2d_bwd_data" : "ts_k_conv2d_bwd_weight",
               dt, what);
  if (rc) return rc;
  *cudnn = conv_cudnn(c, dt, cl, dir);
  if (dt == TS_F16 && !*cudnn)
    return ts_error_set(TS_EUNSUPPORTED, "GPU %s: f16 runs on cuDNN only (%s)", what,
                        strcmp(ts__gpu_conv_impl(NULL), "cudnn") ? "not in use" : "no deterministic algorithm");
  if (cl && !*cudnn)
    return ts_error_set(TS_EUNSUPPORTED, "GPU %s channels last: cuDNN does not run it (x %lldx%lldx%lldx%lld, w "
                        "%lldx%lldx%lldx%lld)", what, (long long)c->N, (long long)c->C, (long long)c->H,
                        (long long)c->W, (long long)c->O, (long long)(c->C / c->groups), (long long)c->KH,
                        (long long)c->KW);
  return TS_OK;
}

int ts__gpu_conv2d_workspace(const ts__conv_desc *c, ts_dtype dt, int cl, int dir, size_t *bytes) {
  *bytes = 0;
  char kn[64];
  int cudnn = 0, rc = conv_route(c, dt, cl, dir, "conv2d", kn, sizeof kn, &cudnn);
  if (rc || !cudnn) return rc;
  return ts__cudnn_conv_workspace(c, dt, cl, dir, bytes);
}

int ts__gpu_conv2d_fwd(ts__dev *d, const ts__conv_desc *c, ts_dtype dt, int cl, const void *x, const void *w,
                       const void *b, void *y, void *ws, size_t ws_bytes, ts__dev_stream *s) {
  cdesc k;
  char kn[64];
  int cudnn = 0, rc = conv_route(c, dt, cl, 0, "conv2d", kn, sizeof kn, &cudnn);
  if (rc) return rc;
  conv_of(c, &k);
  if (cudnn) { /* the bias first, then y += the convolution (one rounding) */
    /* NHWC is (N OH OW, O, 1): the same kernels, the same sums */
    int64_t N = cl ? c->N * c->OH * c->OW : c->N, O = c->O, S = cl ? 1 : c->OH * c->OW;
    if (b && !(rc = kname16(kn, sizeof kn, "ts_k_conv_bias_fill", dt, "conv2d"))) {
      void *a[] = {&b, &y, &N, &O, &S};
      rc = launch(d, kn, grid_for(N * O * S), 1, BLOCK, s, a);
    }
    return rc ? rc : ts__cudnn_conv(d, c, dt, cl, 0, x, w, y, b ? 1.0f : 0.0f, ws, ws_bytes, s);
  }
  void *a[] = {&x, &w, &b, &y, &k};
  return launch(d, kn, grid_for(c->N * c->O * c->OH * c->OW), 1, BLOCK, s, a);
}

int ts__gpu_conv2d_bwd_data(ts__dev *d, const ts__conv_desc *c, ts_dtype dt, int cl, const void *dy, const void *w,
                            void *dx, void *ws, size_t ws_bytes, ts__dev_stream *s) {
  cdesc k;
  char kn[64];
  int cudnn = 0, rc = conv_route(c, dt, cl, 1, "conv2d backward data", kn, sizeof kn, &cudnn);
  if (rc) return rc;
  conv_of(c, &k);
  if (cudnn) return ts__cudnn_conv(d, c, dt, cl, 1, dy, w, dx, 0.0f, ws, ws_bytes, s);
  void *a[] = {&dy, &w, &dx, &k};
  return launch(d, kn, grid_for(c->N * c->C * c->H * c->W), 1, BLOCK, s, a);
}

int ts__gpu_conv2d_bwd_weight(ts__dev *d, const ts__conv_desc *c, ts_dtype dt, int cl, const void *x, const void *dy,
                              void *dw, void *db, void *ws, size_t ws_bytes, ts__dev_stream *s) {
  cdesc k;
  char kn[64];
  int cudnn = 0, rc = conv_route(c, dt, cl, 2, "conv2d backward weight", kn, sizeof kn, &cudnn);
  if (rc) return rc;
  conv_of(c, &k);
  if (cudnn) { /* dw from cuDNN, db a sum per channel */
    if ((rc = ts__cudnn_conv(d, c, dt, cl, 2, x, dy, dw, 0.0f, ws, ws_bytes, s)) || !db) return rc;
    int64_t N = cl ? c->N * c->OH * c->OW : c->N, O = c->O, S = cl ? 1 : c->OH * c->OW;
    if ((rc = kname16(kn, sizeof kn, "ts_k_conv_bias_grad", dt, "conv2d backward bias"))) return rc;
    void *a[] = {&dy, &db, &N, &O, &S};
    return launch(d, kn, (unsigned)(O < MAX_GRID ? O : MAX_GRID), 1, BLOCK, s, a);
  }
  void *a[] = {&x, &dy, &dw, &db, &k};
  return launch(d, kn, grid_for(c->O * (c->C / c->groups) * c->KH * c->KW + c->O), 1, BLOCK, s, a);
}

int ts__gpu_maxpool_fwd(ts__dev *d, const ts__pool_desc *p, ts_dtype dt, int cl, const void *x, void *y, uint8_t *ws,
                        ts__dev_stream *s) {
  if (p->kh * p->kw > 256) return ts_error_set(TS_EUNSUPPORTED, "GPU max pooling: a %lldx%lld window", (long long)p->kh,
                                               (long long)p->kw);
  char kn[64];
  int rc = kname(kn, sizeof kn, "ts_k_maxpool_fwd", dt, "max pooling");
  if (rc) return rc;
  pdesc k = pool_of(p, cl);
  void *a[] = {&x, &y, &ws, &k};
  return launch(d, kn, grid_for(p->N * p->C * p->OH * p->OW), 1, BLOCK, s, a);
}

int ts__gpu_maxpool_bwd(ts__dev *d, const ts__pool_desc *p, ts_dtype dt, int cl, const void *dy, const uint8_t *ws,
                        void *dx, ts__dev_stream *s) {
  char kn[64];
  int rc = kname(kn, sizeof kn, "ts_k_maxpool_bwd", dt, "max pooling backward");
  if (rc) return rc;
  pdesc k = pool_of(p, cl);
  void *a[] = {&dy, &ws, &dx, &k};
  return launch(d, kn, grid_for(p->N * p->C * p->H * p->W), 1, BLOCK, s, a);
}

int ts__gpu_avgpool_fwd(ts__dev *d, const ts__pool_desc *p, ts_dtype dt, int cl, const void *x, void *y,
                        ts__dev_stream *s) {
  char kn[64];
  int rc = kname(kn, sizeof kn, "ts_k_avgpool_fwd", dt, "average pooling");
  if (rc) return rc;
  pdesc k = pool_of(p, cl);
  void *a[] = {&x, &y, &k};
  return launch(d, kn, grid_for(p->N * p->C * p->OH * p->OW), 1, BLOCK, s, a);
}

int ts__gpu_avgpool_bwd(ts__dev *d, const ts__pool_desc *p, ts_dtype dt, int cl, const void *dy, void *dx,
                        ts__dev_stream *s) {
  char kn[64];
  int rc = kname(kn, sizeof kn, "ts_k_avgpool_bwd", dt, "average pooling backward");
  if (rc) return rc;
  pdesc k = pool_of(p, cl);
  void *a[] = {&dy, &dx, &k};
  return launch(d, kn, grid_for(p->N * p->C * p->H * p->W), 1, BLOCK, s, a);
}

/* Batch norm (batchnorm.cu): the kernels over x take x's dtype, those over gamma/beta gdt's (f32,
 * or bf16 with bf16 x). */
static int bn_types(ts_dtype dt, ts_dtype gdt, const char **xs, const char **gs) {
  *xs = *gs = "";
  if (dt != TS_F32 && dt != TS_BF16) return ts_error_set(TS_EUNSUPPORTED, "GPU batch norm: %s x (f32 and bf16 only)", ts_dtype_name(dt));
  if (gdt != TS_F32 && !(gdt == TS_BF16 && dt == TS_BF16))
    return ts_error_set(TS_EUNSUPPORTED, "GPU batch norm: %s x with %s gamma/beta", ts_dtype_name(dt), ts_dtype_name(gdt));
  *xs = dt == TS_F32 ? "f32" : "bf16";
  *gs = gdt == TS_F32 ? "f32" : "bf16";
  return TS_OK;
}
static int bn_launch_n(ts__dev *d, const char *base, const char *sfx, unsigned gx, unsigned gy, unsigned block,
                       ts__dev_stream *s, void **a, int na) {
  char kn[48];
  snprintf(kn, sizeof kn, "%s_%s", base, sfx);
  return launch_n(d, kn, gx, gy, block, s, a, na);
}
#define bn_launch(d, base, sfx, gx, gy, bx, s, args) \
  bn_launch_n(d, base, sfx, gx, gy, bx, s, args, (int)(sizeof(args) / sizeof(args[0])))
/* the chunks a channel's positions are cut into: about 4096 positions a block, at most 512 (from
 * the shape only: the same sums on every GPU) */
static int64_t bn_chunks(int64_t M) {
  int64_t P = (M + 4095) / 4096;
  return P < 1 ? 1 : P > 512 ? 512 : P;
}
/* the workspace: the chunks' sums (2 C P), the shifts K (C), part (2C + 1), a and b (2C), A, B, K (3C) */
typedef struct {
  float *pp, *K, *part, *ab, *abk;
} bn_ws;
static bn_ws bn_carve(void *ws, int64_t N, int64_t C, int64_t S) {
  bn_ws w;
  w.pp = ws;
  w.K = w.pp + 2 * C * bn_chunks(N * S);
  w.part = w.K + C;
  w.ab = w.part + 2 * C + 1;
  w.abk = w.ab + 2 * C;
  return w;
}
size_t ts__gpu_bn_workspace(int64_t N, int64_t C, int64_t S) {
  return sizeof(float) * (size_t)(2 * C * bn_chunks(N * S) + C + 2 * C + 1 + 2 * C + 3 * C);
}
/* Channels last's per-channel sums (S 1) run a block per 32 channels reading whole rows
 * (ts_k_bn_cl_psums, the same sums bit for bit; tensors of up to 2^32 - 1 elements: its offsets
 * are 32-bit); TESSERA_GPU_BN_CL=strided runs the kernels of
 * NCHW instead, a block per channel reading every C-th value (for comparing their speed). */
#define BN_CL_BLOCK 512 /* batchnorm.cu's BN_CL_NW warps */
static int bn_cl_tiles(int64_t M, int64_t C) {
  const char *e = getenv("TESSERA_GPU_BN_CL");
  return M * C <= (int64_t)UINT32_MAX && !(e && !strcmp(e, "strided")); /* its offsets are 32-bit */
}
/* part (2C + 1): the sums over every chunk of (x - K) and (x - K)^2 (Kin: the shifts; NULL: each
 * channel's first value, written to Kout), then the count */
static int bn_fwd_part(ts__dev *d, const char *xs, const void *x, const float *Kin, float *Kout, int64_t N, int64_t C,
                       int64_t S, float *pp, float *part, ts__dev_stream *s) {
  int64_t P = bn_chunks(N * S), M = N * S, C2 = 2 * C;
  int cf = S == 1, rc; /* NHWC (or (N, C)): the channels of a chunk in neighbouring blocks (batchnorm.cu) */
  if (cf && bn_cl_tiles(M, C)) { /* a block per 32 channels, reading rows (the same sums) */
    void *a[] = {&x, &Kin, &Kout, &M, &C, &P, &pp};
    rc = bn_launch(d, "ts_k_bn_cl_psums", xs, (unsigned)((C + 31) / 32), row_grid(P), BN_CL_BLOCK, s, a);
  } else {
    void *a[] = {&x, &Kin, &Kout, &N, &C, &S, &P, &cf, &pp};
    rc = bn_launch(d, "ts_k_bn_psums", xs, cf ? (unsigned)C : (unsigned)P, cf ? row_grid(P) : row_grid(C), BLOCK, s, a);
  }
  void *f[] = {&pp, &C, &P, &M, &part};
  return rc ? rc : launch(d, "ts_k_bn_fold", grid_for(C2), 1, BLOCK, s, f);
}
/* part (2C + 1): the sums of g and g (x - mean) (g: dy, through the ReLU's gradient when fused) */
static int bn_bwd_part(ts__dev *d, const char *xs, const void *dy, const void *x, const float *mean,
                       const ts__gpu_bn_relu *relu, int64_t N, int64_t C, int64_t S, float *pp, float *part,
                       ts__dev_stream *s) {
  int64_t P = bn_chunks(N * S), M = N * S, C2 = 2 * C;
  const float *ab = relu ? relu->ab : NULL;
  float alpha = relu ? relu->alpha : 0.0f;
  int cf = S == 1, rc;
  if (cf && bn_cl_tiles(M, C)) {
    void *a[] = {&dy, &x, &mean, &ab, &alpha, &M, &C, &P, &pp};
    rc = bn_launch(d, "ts_k_bn_cl_bpsums", xs, (unsigned)((C + 31) / 32), row_grid(P), BN_CL_BLOCK, s, a);
  } else {
    void *a[] = {&dy, &x, &mean, &ab, &alpha, &N, &C, &S, &P, &cf, &pp};
    rc = bn_launch(d, "ts_k_bn_bpsums", xs, cf ? (unsigned)C : (unsigned)P, cf ? row_grid(P) : row_grid(C), BLOCK, s, a);
  }
  void *f[] = {&pp, &C, &P, &M, &part};
  return rc ? rc : launch(d, "ts_k_bn_fold", grid_for(C2), 1, BLOCK, s, f);
}
/* ab from (mean, var) (copy: from the running statistics, copied into mean, var), then y = x a + b */
static int bn_normalise(ts__dev *d, const char *xs, const char *gs, const void *x, const void *gamma, const void *beta,
                        const float *rmean, const float *rvar, float *mean, float *var, void *y, int64_t N, int64_t C,
                        int64_t S, float eps, int copy, const ts__gpu_bn_relu *relu, float *ab, ts__dev_stream *s) {
  if (relu) ab = relu->ab;
  void *a[] = {&rmean, &rvar, &mean, &var, &gamma, &beta, &C, &eps, &copy, &ab};
  int rc = bn_launch(d, "ts_k_bn_ab", gs, grid_for(C), 1, BLOCK, s, a);
  int on = relu != NULL;
  float alpha = relu ? relu->alpha : 0.0f;
  void *b[] = {&x, &ab, &y, &N, &C, &S, &on, &alpha};
  return rc || N * C * S == 0 ? rc : bn_launch(d, "ts_k_bn_apply", xs, grid_for(N * C * S), 1, BLOCK, s, b);
}
/* the coefficients (dgamma, dbeta from loc; A, B, K from tot), then dx */
static int bn_backward(ts__dev *d, const char *xs, const char *gs, const void *dy, const void *x, const void *gamma,
                       const float *mean, const float *var, const float *loc, const float *tot, void *dx, void *dgamma,
                       void *dbeta, int64_t N, int64_t C, int64_t S, float eps, int training,
                       const ts__gpu_bn_relu *relu, float *abk, ts__dev_stream *s) {
  void *a[] = {&loc, &tot, &gamma, &mean, &var, &C, &eps, &training, &dgamma, &dbeta, &abk};
  int rc = bn_launch(d, "ts_k_bn_coef", gs, grid_for(C), 1, BLOCK, s, a);
  if (rc || !tot || N * C * S == 0) return rc;
  const float *ab = relu ? relu->ab : NULL;
  float alpha = relu ? relu->alpha : 0.0f;
  void *b[] = {&dy, &x, &abk, &ab, &alpha, &dx, &N, &C, &S};
  return bn_launch(d, "ts_k_bn_dx", xs, grid_for(N * C * S), 1, BLOCK, s, b);
}

int ts__gpu_batchnorm_fwd(ts__dev *d, ts_dtype dt, ts_dtype gdt, const void *x, const void *gamma, const void *beta,
                          float *rmean, float *rvar, void *y, float *mean, float *var, int64_t N, int64_t C, int64_t S,
                          float momentum, float eps, int training, const ts__gpu_bn_relu *relu, void *ws,
                          ts__dev_stream *s) {
  if (training && N * S < 2) return ts_error_set(TS_EINVAL, "GPU batch norm: training statistics of %lld values",
                                                 (long long)(N * S));
  const char *xs, *gs;
  int rc = bn_types(dt, gdt, &xs, &gs);
  if (rc || C == 0) return rc;
  bn_ws w = bn_carve(ws, N, C, S);
  if (training) {
    rc = bn_fwd_part(d, xs, x, NULL, w.K, N, C, S, w.pp, w.part, s);
    if (!rc) rc = ts__gpu_bn_sync_stats(d, w.part, w.K, C, momentum, rmean, rvar, mean, var, s);
  }
  return rc ? rc : bn_normalise(d, xs, gs, x, gamma, beta, rmean, rvar, mean, var, y, N, C, S, eps, !training, relu,
                                w.ab, s);
}

int ts__gpu_batchnorm_bwd(ts__dev *d, ts_dtype dt, ts_dtype gdt, const void *dy, const void *x, const void *gamma,
                          const float *mean, const float *var, void *dx, void *dgamma, void *dbeta, int64_t N, int64_t C,
                          int64_t S, float eps, int training, const ts__gpu_bn_relu *relu, void *ws, ts__dev_stream *s) {
  const char *xs, *gs;
  int rc = bn_types(dt, gdt, &xs, &gs);
  if (rc || C == 0) return rc;
  bn_ws w = bn_carve(ws, N, C, S);
  rc = bn_bwd_part(d, xs, dy, x, mean, relu, N, C, S, w.pp, w.part, s);
  return rc ? rc : bn_backward(d, xs, gs, dy, x, gamma, mean, var, w.part, w.part, dx, dgamma, dbeta, N, C, S, eps,
                               training, relu, w.abk, s);
}

int ts__gpu_bn_fwd_sums(ts__dev *d, ts_dtype dt, const void *x, const float *K, int64_t N, int64_t C, int64_t S,
                        float *part, void *ws, ts__dev_stream *s) {
  const char *xs, *gs;
  int rc = bn_types(dt, TS_F32, &xs, &gs);
  if (rc || C == 0) return rc;
  bn_ws w = bn_carve(ws, N, C, S);
  return bn_fwd_part(d, xs, x, K, NULL, N, C, S, w.pp, part, s);
}

int ts__gpu_sum_rows(ts__dev *d, const float *all, int64_t P, int64_t n, float *out, ts__dev_stream *s) {
  if (n == 0) return TS_OK;
  void *a[] = {&all, &P, &n, &out};
  return launch(d, "ts_k_sum_rows", grid_for(n), 1, BLOCK, s, a);
}

int ts__gpu_bn_sync_stats(ts__dev *d, const float *tot, const float *K, int64_t C, float momentum, float *rmean,
                          float *rvar, float *mean, float *var, ts__dev_stream *s) {
  void *a[] = {&tot, &K, &C, &momentum, &rmean, &rvar, &mean, &var};
  return launch(d, "ts_k_bn_sync_stats", grid_for(C), 1, BLOCK, s, a);
}

int ts__gpu_bn_bwd_sums(ts__dev *d, ts_dtype dt, ts_dtype gdt, const void *dy, const void *x, const float *mean,
                        const float *var, void *dgamma, void *dbeta, int64_t N, int64_t C, int64_t S, float eps,
                        const ts__gpu_bn_relu *relu, float *part, void *ws, ts__dev_stream *s) {
  const char *xs, *gs;
  int rc = bn_types(dt, gdt, &xs, &gs);
  if (rc || C == 0) return rc;
  bn_ws w = bn_carve(ws, N, C, S);
  rc = bn_bwd_part(d, xs, dy, x, mean, relu, N, C, S, w.pp, part, s);
  return rc ? rc : bn_backward(d, xs, gs, dy, x, NULL, mean, var, part, NULL, NULL, dgamma, dbeta, N, C, S, eps, 1,
                               relu, w.abk, s);
}

int ts__gpu_bn_bwd_dx(ts__dev *d, ts_dtype dt, ts_dtype gdt, const void *dy, const void *x, const void *gamma,
                      const float *mean, const float *var, const float *tot, void *dx, int64_t N, int64_t C, int64_t S,
                      float eps, const ts__gpu_bn_relu *relu, void *ws, ts__dev_stream *s) {
  const char *xs, *gs;
  int rc = bn_types(dt, gdt, &xs, &gs);
  if (rc || C == 0) return rc;
  bn_ws w = bn_carve(ws, N, C, S);
  return bn_backward(d, xs, gs, dy, x, gamma, mean, var, NULL, tot, dx, NULL, NULL, N, C, S, eps, 1, relu, w.abk, s);
}

int ts__gpu_softmax_fwd(ts__dev *d, ts_dtype dt, const void *x, void *y, int64_t outer, int64_t len, int64_t inner, int lg,
                        ts__dev_stream *s) {
  char kn[64];
  int rc = kname(kn, sizeof kn, inner == 1 ? "ts_k_softmax_fwd_rows" : "ts_k_softmax_fwd", dt, "softmax");
  if (rc || outer * inner == 0) return rc;
  if (inner == 1) { /* the last axis: a warp per row */
    void *a[] = {&x, &y, &outer, &len, &lg};
    return launch(d, kn, warp_blocks(outer), 1, BLOCK, s, a);
  }
  void *a[] = {&x, &y, &outer, &len, &inner, &lg};
  return launch(d, kn, grid_for(outer * inner), 1, BLOCK, s, a);
}

int ts__gpu_softmax_bwd(ts__dev *d, ts_dtype dt, const void *dy, const void *y, void *dx, int64_t outer, int64_t len,
                        int64_t inner, int lg, ts__dev_stream *s) {
  char kn[64];
  int rc = kname(kn, sizeof kn, inner == 1 ? "ts_k_softmax_bwd_rows" : "ts_k_softmax_bwd", dt, "softmax backward");
  if (rc || outer * inner == 0) return rc;
  if (inner == 1) {
    void *a[] = {&dy, &y, &dx, &outer, &len, &lg};
    return launch(d, kn, warp_blocks(outer), 1, BLOCK, s, a);
  }
  void *a[] = {&dy, &y, &dx, &outer, &len, &inner, &lg};
  return launch(d, kn, grid_for(outer * inner), 1, BLOCK, s, a);
}

int ts__gpu_layernorm_fwd_g(ts__dev *d, ts_dtype dt, ts_dtype gdt, const void *x, const void *gamma, const void *beta,
                            void *y, float *mean, float *var, int64_t R, int64_t D, float eps, ts__dev_stream *s) {
  if (gdt == TS_F32) return ts__gpu_layernorm_fwd(d, dt, x, gamma, beta, y, mean, var, R, D, eps, s);
  if (gdt != TS_BF16 || dt != TS_BF16)
    return ts_error_set(TS_EDTYPE, "GPU layernorm: %s x with %s gamma", ts_dtype_name(dt), ts_dtype_name(gdt));
  if (R == 0) return TS_OK;
  void *a[] = {&x, &gamma, &beta, &y, &mean, &var, &R, &D, &eps};
  return launch(d, "ts_k_layernorm_fwd_bf16g", row_grid(R), 1, row_block(D), s, a);
}

int ts__gpu_layernorm_bwd_g(ts__dev *d, ts_dtype dt, ts_dtype gdt, const void *dy, const void *x, const void *gamma,
                            const float *mean, const float *var, void *dx, void *dgamma, void *dbeta, int64_t R,
                            int64_t D, float eps, void *ws, ts__dev_stream *s) {
  if (gdt == TS_F32) return ts__gpu_layernorm_bwd(d, dt, dy, x, gamma, mean, var, dx, dgamma, dbeta, R, D, eps, ws, s);
  if (gdt != TS_BF16 || dt != TS_BF16)
    return ts_error_set(TS_EDTYPE, "GPU layernorm backward: %s x with %s gamma", ts_dtype_name(dt), ts_dtype_name(gdt));
  if (R == 0) return TS_OK;
  void *a[] = {&dy, &x, &gamma, &mean, &var, &dx, &R, &D, &eps};
  int rc = launch(d, "ts_k_layernorm_bwd_dx_bf16g", row_grid(R), 1, row_block(D), s, a);
  return rc ? rc : ln_params(d, dt, gdt, dy, x, mean, var, dgamma, dbeta, R, D, eps, ws, s);
}

int ts__gpu_lamb(ts__dev *d, float *p, const float *g, float *m, float *v, int64_t n, float b1, float omb1, float b2,
                 float omb2, float inv_bc1, float inv_bc2, float eps, float wd, float lr, int adapt, float *u,
                 float *scratch, float *sq, ts__dev_stream *s) {
  int rc = ts__gpu_lamb_dir(d, p, g, m, v, n, b1, omb1, b2, omb2, inv_bc1, inv_bc2, eps, wd, u, scratch, sq, s);
  return rc ? rc : ts__gpu_lamb_apply(d, p, u, n, lr, sq, adapt, s);
}

int ts__gpu_lamb_dir(ts__dev *d, float *p, const float *g, float *m, float *v, int64_t n, float b1, float omb1,
                     float b2, float omb2, float inv_bc1, float inv_bc2, float eps, float wd, float *u, float *scratch,
                     float *sq, ts__dev_stream *s) {
  if (n == 0) return ts__dev_memset0(d, sq, 2 * sizeof(float), s); /* (an empty part: its sums are 0) */
  void *a[] = {&p, &g, &m, &v, &n, &b1, &omb1, &b2, &omb2, &inv_bc1, &inv_bc2, &eps, &wd, &u};
  int rc = launch(d, "ts_k_lamb1_f32", grid_for(n), 1, BLOCK, s, a);
  if (!rc) rc = ts__gpu_sum(d, 1, p, n, scratch, sq, s);
  if (!rc) rc = ts__gpu_sum(d, 1, u, n, scratch, sq + 1, s);
  return rc;
}

int ts__gpu_lamb_apply(ts__dev *d, float *p, const float *u, int64_t n, float lr, const float *sq, int adapt,
                       ts__dev_stream *s) {
  if (n == 0) return TS_OK;
  void *b[] = {&p, &u, &n, &lr, &sq, &adapt};
  return launch(d, "ts_k_lamb2_f32", grid_for(n), 1, BLOCK, s, b);
}
