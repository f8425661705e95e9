/* Executor adapters for the norm family (BATCHNORM, BATCHNORM_BWD, LAYERNORM, LAYERNORM_BWD).
 *
 * Layer-norm: TS_BACKEND_FAST uses oneDNN (about 2x the reference on (8192,768)).
 * Batch-norm: both backends use the reference kernels. On plain NCHW data oneDNN 2.6 only has
 * its generic ncsp kernel, which measured about 2x slower than ours on a ResNet-18 layer
 * ((32,64,56,56) training: fwd 2.8 vs 5.4 ms, bwd 3.2 vs 7.3 ms, 2 threads) and computes the
 * variance in one unshifted pass (loses ~1e-3 relative on data far from 0).
 * ts__batchnorm_*_dnnl stay available and tested (tests/kernels/test_norm.c).
 * bf16/f16 batch norm runs the same reference loops on 16-bit x/y (ts__batchnorm_*_lp; the
 * statistics, running statistics and SyncBatchNorm's exchange stay f32) on
 * both backends. oneDNN 2.6 does have bf16 batch norm, but on plain NCHW it is the same generic
 * ncsp_bnorm:any, ~27x slower than the bf16 loops on (32,64,56,56) (bench_bf16 batchnorm,
 * docs/mixed-precision.md), so TS_BATCHNORM_BF16_DNNL is 0; it is tested in test_norm_bf16.c.
 * The executor's BN+ReLU fusion (exec.c, ctx->fuse) runs the same loops with the ReLU inside
 * (ts__batchnorm_relu_fwd/_bwd): bitwise the unfused pair. */
#include <stdlib.h>
#include <string.h>

#include "graph/graph_ir.h"
#include "run_desc.h"
#include "../kernels/norm.h"

#define TS_BATCHNORM_DNNL 0
#define TS_BATCHNORM_BF16_DNNL 0

/* SyncBatchNorm's reduction: every rank's doubles gathered (as bytes, so nothing is rounded)
 * and summed in rank order, which gives the same result on every rank. */
typedef struct {
  ts_comm *c[3]; /* summed over each in turn (the batch and spatial cuts' axes) */
  int nc;
  const char *name;
} bn_sync;

static int bn_sum(double *v, int64_t n, void *user) {
  bn_sync *s = user;
  for (int k = 0; k < s->nc; k++) {
    int p = ts_comm_size(s->c[k]);
    double *all = malloc(sizeof(double) * (size_t)n * (size_t)p);
    if (!all) return ts_error_set(TS_ENOMEM, "batchnorm '%s': out of memory for the synchronised statistics", s->name);
    int rc = ts_comm_allgather(s->c[k], v, all, (size_t)n * sizeof(double), TS_U8);
    if (rc) {
      free(all);
      return ts_error_wrap(rc, "batchnorm '%s': synchronising statistics", s->name);
    }
    for (int64_t i = 0; i < n; i++) {
      double t = 0;
      for (int r = 0; r < p; r++) t += all[(size_t)r * (size_t)n + (size_t)i];
      v[i] = t;
    }
    free(all);
  }
  return TS_OK;
}

/* The reducer for a node synchronised over communicator slots, or NULL (local statistics). */
static const ts__bn_reducer *bn_reducer(ts__runctx *ctx, const ts__run_node *n, bn_sync *s, ts__bn_reducer *r) {
  int64_t slots[3] = {ts_attr_batchnorm_sync(&n->a), ts_attr_batchnorm_sync2(&n->a), ts_attr_batchnorm_sync3(&n->a)};
  s->nc = 0;
  for (int k = 0; k < 3; k++) {
    int slot = (int)slots[k] - 1;
    if (slot >= 0 && slot < ctx->ncomms && ctx->comms && ctx->comms[slot]) s->c[s->nc++] = ctx->comms[slot];
  }
  if (!s->nc) return NULL;
  s->name = n->name ? n->name : "";
  r->sum = bn_sum;
  r->user = s;
  return r;
}

static int run_batchnorm(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int64_t N, C, S;
  ts__run_bn_dims(&in[0].shape, &N, &C, &S);
  bn_sync bs;
  ts__bn_reducer rb;
  const ts__bn_reducer *red = bn_reducer(ctx, n, &bs, &rb);
  if (ctx->fuse && ctx->fuse->kind == TS__FUSE_BN_RELU) { /* out[0]: the ReLU's output (exec.c) */
    const ts__bn_relu r = {ctx->fuse->alpha, ctx->fuse->ab};
    return ts__batchnorm_relu_fwd(in[0].dtype, in[1].dtype, in[0].data, in[1].data, in[2].data, in[3].data,
                                  in[4].data, out[0].data, out[1].data, out[2].data, N, C, S,
                                  ts_attr_batchnorm_momentum(&n->a), ts_attr_batchnorm_eps(&n->a),
                                  (int)ts_attr_batchnorm_training(&n->a), red, &r);
  }
  if (in[0].dtype != TS_F32) /* 16-bit x/y; gamma/beta f32 or x's dtype; statistics f32 */
    return ts__batchnorm_fwd_lp(in[0].dtype, in[1].dtype, in[0].data, in[1].data, in[2].data, in[3].data, in[4].data,
                                out[0].data, out[1].data, out[2].data, N, C, S, ts_attr_batchnorm_momentum(&n->a),
                                ts_attr_batchnorm_eps(&n->a), (int)ts_attr_batchnorm_training(&n->a), red,
                                TS_BATCHNORM_BF16_DNNL && ctx->backend == TS_BACKEND_FAST);
  if (red)
    return ts__batchnorm_fwd_sync(in[0].data, in[1].data, in[2].data, in[3].data, in[4].data,
                                  out[0].data, out[1].data, out[2].data, N, C, S, ts_attr_batchnorm_momentum(&n->a), ts_attr_batchnorm_eps(&n->a),
                                  (int)ts_attr_batchnorm_training(&n->a), red);
  /* in[3], in[4] (running stats, bound state memory) are updated in place when training */
  if (TS_BATCHNORM_DNNL && ctx->backend == TS_BACKEND_FAST)
    return ts__batchnorm_fwd_dnnl(in[0].data, in[1].data, in[2].data, in[3].data, in[4].data,
                                  out[0].data, out[1].data, out[2].data, N, C, S, ts_attr_batchnorm_momentum(&n->a),
                                  ts_attr_batchnorm_eps(&n->a), (int)ts_attr_batchnorm_training(&n->a));
  return ts__batchnorm_fwd_ref(in[0].data, in[1].data, in[2].data, in[3].data, in[4].data,
                               out[0].data, out[1].data, out[2].data, N, C, S, ts_attr_batchnorm_momentum(&n->a), ts_attr_batchnorm_eps(&n->a),
                               (int)ts_attr_batchnorm_training(&n->a));
}

static int run_batchnorm_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int64_t N, C, S;
  ts__run_bn_dims(&in[1].shape, &N, &C, &S);
  bn_sync bs;
  ts__bn_reducer rb;
  const ts__bn_reducer *red = bn_reducer(ctx, n, &bs, &rb);
  if (ctx->fuse && ctx->fuse->kind == TS__FUSE_BN_RELU_BWD) { /* in[0]: dy of the ReLU's output (exec.c) */
    const ts__bn_relu r = {ctx->fuse->alpha, ctx->fuse->ab};
    return ts__batchnorm_relu_bwd(in[1].dtype, in[2].dtype, in[0].data, in[1].data, in[2].data, in[3].data,
                                  in[4].data, out[0].data, out[1].data, out[2].data, N, C, S,
                                  ts_attr_batchnorm_eps(&n->a), (int)ts_attr_batchnorm_training(&n->a), red, &r);
  }
  if (in[1].dtype != TS_F32)
    return ts__batchnorm_bwd_lp(in[1].dtype, in[2].dtype, in[0].data, in[1].data, in[2].data, in[3].data, in[4].data,
                                out[0].data, out[1].data, out[2].data, N, C, S, ts_attr_batchnorm_eps(&n->a),
                                (int)ts_attr_batchnorm_training(&n->a), red,
                                TS_BATCHNORM_BF16_DNNL && ctx->backend == TS_BACKEND_FAST);
  if (red)
    return ts__batchnorm_bwd_sync(in[0].data, in[1].data, in[2].data, in[3].data, in[4].data,
                                  out[0].data, out[1].data, out[2].data, N, C, S, ts_attr_batchnorm_eps(&n->a),
                                  (int)ts_attr_batchnorm_training(&n->a), red);
  if (TS_BATCHNORM_DNNL && ctx->backend == TS_BACKEND_FAST)
    return ts__batchnorm_bwd_dnnl(in[0].data, in[1].data, in[2].data, in[3].data, in[4].data,
                                  out[0].data, out[1].data, out[2].data, N, C, S, ts_attr_batchnorm_eps(&n->a),
                                  (int)ts_attr_batchnorm_training(&n->a));
  return ts__batchnorm_bwd_ref(in[0].data, in[1].data, in[2].data, in[3].data, in[4].data,
                               out[0].data, out[1].data, out[2].data, N, C, S, ts_attr_batchnorm_eps(&n->a),
                               (int)ts_attr_batchnorm_training(&n->a));
}

static int run_layernorm(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int64_t D = in[0].shape.dims[in[0].shape.ndim - 1], R = ts_tensor_numel(&in[0]) / D;
  if (out[0].dtype != TS_F32 || in[1].dtype != TS_F32) /* 16-bit: native row loops */
    return ts__layernorm_fwd_lp(in[0].dtype, in[1].dtype, in[0].data, in[1].data, in[2].data, out[0].data,
                                out[1].data, out[2].data, R, D, ts_attr_layernorm_eps(&n->a), ctx->backend == TS_BACKEND_FAST);
  if (ctx->backend == TS_BACKEND_FAST)
    return ts__layernorm_fwd_dnnl(in[0].data, in[1].data, in[2].data, out[0].data, out[1].data,
                                  out[2].data, R, D, ts_attr_layernorm_eps(&n->a));
  return ts__layernorm_fwd_ref(in[0].data, in[1].data, in[2].data, out[0].data, out[1].data,
                               out[2].data, R, D, ts_attr_layernorm_eps(&n->a));
}

static int run_layernorm_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int64_t D = in[1].shape.dims[in[1].shape.ndim - 1], R = ts_tensor_numel(&in[1]) / D;
  if (out[0].dtype != TS_F32 || in[2].dtype != TS_F32)
    return ts__layernorm_bwd_lp(in[1].dtype, in[2].dtype, in[0].data, in[1].data, in[2].data, in[3].data,
                                in[4].data, out[0].data, out[1].data, out[2].data, R, D, ts_attr_layernorm_eps(&n->a),
                                ctx->backend == TS_BACKEND_FAST);
  if (ctx->backend == TS_BACKEND_FAST)
    return ts__layernorm_bwd_dnnl(in[0].data, in[1].data, in[2].data, in[3].data, in[4].data,
                                  out[0].data, out[1].data, out[2].data, R, D, ts_attr_layernorm_eps(&n->a));
  return ts__layernorm_bwd_ref(in[0].data, in[1].data, in[2].data, in[3].data, in[4].data,
                               out[0].data, out[1].data, out[2].data, R, D, ts_attr_layernorm_eps(&n->a));
}

void ts__register_run_norm(ts__run_fn *tab) {
  tab[TS_OP_BATCHNORM] = run_batchnorm;
  tab[TS_OP_BATCHNORM_BWD] = run_batchnorm_bwd;
  tab[TS_OP_LAYERNORM] = run_layernorm;
  tab[TS_OP_LAYERNORM_BWD] = run_layernorm_bwd;
}
