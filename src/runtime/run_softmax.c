/* Executor adapters for the softmax family (SOFTMAX, SOFTMAX_BWD, SOFTMAX_CE, SOFTMAX_CE_BWD).
 *
 * TS_BACKEND_FAST: oneDNN softmax_v2 for a softmax over the last (contiguous) axis; over a
 * middle axis oneDNN 2.6 falls back to its reference implementation, so the vectorised
 * reference kernel is used there. Cross-entropy has no oneDNN primitive: the fused reference
 * kernel serves both backends. */
#include "run_impl.h"
#include "../kernels/softmax.h"

static void split_axis(const ts_shape *s, int axis, int64_t *outer, int64_t *len, int64_t *inner) {
  ts__outer_inner(s, axis, outer, inner);
  *len = s->dims[axis];
}

static int run_softmax(ts__runctx *ctx, const ts__node *n, const ts_tensor *in, ts_tensor *out) {
  int64_t o, l, i;
  split_axis(&in[0].shape, (int)n->a.i[0], &o, &l, &i);
  if (ctx->backend == TS_BACKEND_FAST && i == 1)
    return ts__softmax_fwd_dnnl(in[0].data, out[0].data, o, l, i, (int)n->a.i[1]);
  return ts__softmax_fwd_ref(in[0].data, out[0].data, o, l, i, (int)n->a.i[1]);
}

static int run_softmax_bwd(ts__runctx *ctx, const ts__node *n, const ts_tensor *in, ts_tensor *out) {
  int64_t o, l, i;
  split_axis(&in[1].shape, (int)n->a.i[0], &o, &l, &i);
  if (ctx->backend == TS_BACKEND_FAST && i == 1)
    return ts__softmax_bwd_dnnl(in[0].data, in[1].data, out[0].data, o, l, i, (int)n->a.i[1]);
  return ts__softmax_bwd_ref(in[0].data, in[1].data, out[0].data, o, l, i, (int)n->a.i[1]);
}

static int run_ce(ts__runctx *ctx, const ts__node *n, const ts_tensor *in, ts_tensor *out) {
  (void)ctx;
  const int64_t N = in[0].shape.dims[0], C = in[0].shape.dims[1];
  return ts__softmax_ce_fwd_ref(in[0].data, in[1].data, in[1].dtype == TS_I64, N, C, n->a.f[0],
                                n->a.i[0], out[0].data, n->nout > 1 ? out[1].data : NULL);
}

static int run_ce_bwd(ts__runctx *ctx, const ts__node *n, const ts_tensor *in, ts_tensor *out) {
  (void)ctx;
  const int64_t N = in[1].shape.dims[0], C = in[1].shape.dims[1];
  const float dloss = *(const float *)in[0].data;
  return ts__softmax_ce_bwd_ref(dloss, in[1].data, in[2].data, in[2].dtype == TS_I64,
                                n->nin > 3 ? in[3].data : NULL, N, C, n->a.f[0], n->a.i[0],
                                out[0].data);
}

void ts__register_run_softmax(ts__run_fn *tab) {
  tab[TS_OP_SOFTMAX] = run_softmax;
  tab[TS_OP_SOFTMAX_BWD] = run_softmax_bwd;
  tab[TS_OP_SOFTMAX_CE] = run_ce;
  tab[TS_OP_SOFTMAX_CE_BWD] = run_ce_bwd;
}
