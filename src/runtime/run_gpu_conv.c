/* The GPU's convolution, pooling and batch-norm adapters, and channels last (PyTorch's
 * channels_last, cuDNN's NHWC) on GPU plans.
 *
 * Channels last: the graph's 4-d activations are (N, C, H, W) and stay so in every shape, message
 * and host copy; a GPU plan may keep some of them in device memory as NHWC, where cuDNN's tensor-
 * core convolutions read and write them without transposing (NCHW ones it transposes inside each
 * call). exec.c decides which (plan_layouts), from what ts__run_gpu_cl says of each node:
 *   - TS__CL_CAN (convolution directions cuDNN runs in NHWC, batch norm, pooling): the node
 *     runs NHWC when any of its activation slots holds an NHWC value; a slot whose value is NCHW is
 *     transposed through device scratch (cl_begin/cl_end), so values of either layout meet here;
 *   - TS__CL_ANY (element-wise ops over same-shape 4-d tensors: ReLU, the residual add, casts,
 *     scaling, their gradients): its values share one layout, whichever it is;
 *   - TS__CL_NO (everything else): its 4-d values stay NCHW.
 * A value bound by the caller, kept, viewed (RESHAPE) or 1x1 / one-channel is NCHW (the last two:
 * both layouts are the same memory). Every kernel here computes each element from the same terms
 * in the same order in either layout (batch norm over (N H W, C, 1) walks a channel's positions
 * in NCHW's order; pooling's windows likewise; the stand-in cuDNN too): a plan's results are
 * bitwise the same channels last or not, on the stand-ins (tests/runtime/test_layout_gpu.c). A
 * real cuDNN may pick another algorithm in NHWC: its results then differ in rounding only. */
#include "run_desc.h"
#include "device/gpu_kernels.h"
#include "runtime/dcoll.h"

static int node_fail(const ts__run_node *n, int rc) {
  return rc == TS_EUNSUPPORTED ? ts_error_wrap(rc, "node %s", n->name) : rc;
}

/* ---- channels last: the staging of the slots in the other layout ---- */

#define CL_ALIGN(b) (((b) + 255) & ~(size_t)255)

typedef struct {
  ts_tensor in[TS_GRAPH_MAX_IO], out[TS_GRAPH_MAX_IO]; /* what the kernels read and write */
  const ts_tensor *vout;                                /* the node's own outputs */
  int nout, cl;
  unsigned back; /* outputs written to scratch, transposed into their values by cl_end */
  void *extra;   /* the node's own scratch */
} cl_stage;

/* t (4-d, its values in layout !to) into dst in layout `to` (1: NHWC) */
static int cl_permute(ts__runctx *ctx, const ts_tensor *t, int to, const void *src, void *dst) {
  const int64_t *d = t->shape.dims;
  const int64_t nchw[4] = {d[0], d[1], d[2], d[3]}, nhwc[4] = {d[0], d[2], d[3], d[1]};
  static const int to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};
  return ts__gpu_permute(ctx->dev, ts_dtype_size(t->dtype), src, dst, 4, to ? nchw : nhwc, to ? to_nhwc : to_nchw,
                         NULL);
}

/* the layout a CAN node runs in: NHWC when one of its activation slots (ain, aout) holds an NHWC
 * value */
static int cl_of(const ts__runctx *ctx, unsigned ain, unsigned aout) {
  return ((ctx->cl_in & ain) | (ctx->cl_out & aout)) != 0;
}

/* Stages the node's activation slots (ain, aout) whose value is in the other layout than cl, and
 * takes `extra` bytes of scratch beside them (st->extra); st->in/out are what the kernels use. */
static int cl_begin(ts__runctx *ctx, int cl, const ts_tensor *in, int nin, unsigned ain, ts_tensor *out, int nout,
                    unsigned aout, size_t extra, cl_stage *st) {
  size_t total = CL_ALIGN(extra);
  unsigned sin = 0;
  st->back = 0, st->vout = out, st->nout = nout, st->cl = cl, st->extra = NULL;
  for (int k = 0; k < nin; k++) {
    st->in[k] = in[k];
    if ((ain >> k & 1) && (int)(ctx->cl_in >> k & 1) != cl && !ts__cl_same(&in[k].shape))
      sin |= 1u << k, total += CL_ALIGN(ts_tensor_nbytes(&in[k]));
  }
  for (int k = 0; k < nout; k++) {
    st->out[k] = out[k];
    if ((aout >> k & 1) && (int)(ctx->cl_out >> k & 1) != cl && !ts__cl_same(&out[k].shape))
      st->back |= 1u << k, total += CL_ALIGN(ts_tensor_nbytes(&out[k]));
  }
  if (!total) return TS_OK;
  char *p = NULL;
  int rc = ts__run_dev_scratch(ctx, total, (void **)&p);
  if (rc) return rc;
  st->extra = extra ? p : NULL;
  p += CL_ALIGN(extra);
  for (int k = 0; k < nin && !rc; k++)
    if (sin >> k & 1) {
      st->in[k].data = p;
      rc = cl_permute(ctx, &in[k], cl, in[k].data, p);
      p += CL_ALIGN(ts_tensor_nbytes(&in[k]));
    }
  for (int k = 0; k < nout; k++)
    if (st->back >> k & 1) {
      st->out[k].data = p;
      p += CL_ALIGN(ts_tensor_nbytes(&out[k]));
    }
  return rc;
}

/* the staged outputs transposed into their values (after the node's kernels, on the same stream) */
static int cl_end(ts__runctx *ctx, const cl_stage *st, int rc) {
  for (int k = 0; k < st->nout && !rc; k++)
    if (st->back >> k & 1) rc = cl_permute(ctx, &st->out[k], !st->cl, st->out[k].data, st->vout[k].data);
  return rc;
}

/* The node's direction (0 forward, 1 backward data, 2 backward weight) and descriptor */
static int conv_dir(const ts__run_node *n, const ts_tensor *in, const ts_tensor *out, ts__conv_desc *d) {
  const int dir = n->op == TS_OP_CONV2D ? 0 : n->op == TS_OP_CONV2D_BWD_DATA ? 1 : 2;
  *d = dir == 0   ? ts__run_conv_desc(n, &in[0].shape, &in[1].shape, &out[0].shape)
       : dir == 1 ? ts__run_conv_desc(n, &out[0].shape, &in[1].shape, &in[0].shape)
                  : ts__run_conv_desc(n, &in[0].shape, &out[0].shape, &in[1].shape);
  return dir;
}

ts__cl_kind ts__run_gpu_cl(const ts__run_node *n, const ts_tensor *in, const ts_tensor *out, unsigned *ain,
                           unsigned *aout) {
  *ain = *aout = 0;
  switch (n->op) {
  case TS_OP_CONV2D:
  case TS_OP_CONV2D_BWD_DATA:
  case TS_OP_CONV2D_BWD_WEIGHT: {
    ts__conv_desc d;
    const int dir = conv_dir(n, in, out, &d);
    if (!ts__gpu_conv2d_on_cudnn(&d, out[0].dtype, 1, dir)) return TS__CL_NO;
    *ain = dir == 2 ? 3u : 1u; /* x; dy; x and dy */
    *aout = dir == 2 ? 0u : 1u; /* y; dx; (dw, db: parameters' layouts) */
    return TS__CL_CAN;
  }
  case TS_OP_BATCHNORM:
  case TS_OP_BATCHNORM_BWD:
    if (in[0].shape.ndim != 4) return TS__CL_NO;
    *ain = n->op == TS_OP_BATCHNORM ? 1u : 3u; /* x; dy and x */
    *aout = 1u;                                /* y; dx */
    return TS__CL_CAN;
  case TS_OP_AVGPOOL2D:
  case TS_OP_AVGPOOL2D_BWD:
  case TS_OP_MAXPOOL2D:     /* x -> y and its window indices (u8, laid out as y) */
  case TS_OP_MAXPOOL2D_BWD: /* dy and the indices -> dx */
    *ain = n->op == TS_OP_MAXPOOL2D_BWD ? 3u : 1u;
    *aout = n->op == TS_OP_MAXPOOL2D ? 3u : 1u;
    return TS__CL_CAN;
  case TS_OP_ELTWISE:
  case TS_OP_ELTWISE_BWD:
  case TS_OP_BINARY:
  case TS_OP_SCALE:
  case TS_OP_CAST:
  case TS_OP_CONST:
  case TS_OP_COPY: { /* element-wise: every slot of out[0]'s 4-d shape */
    if (n->nout != 1 || out[0].shape.ndim != 4) return TS__CL_NO;
    for (int k = 0; k < n->nin; k++)
      if (!ts_shape_equal(&in[k].shape, &out[0].shape)) return TS__CL_NO;
    *ain = (1u << n->nin) - 1u, *aout = 1u;
    return TS__CL_ANY;
  }
  default:
    return TS__CL_NO;
  }
}

/* ---- convolution ---- */

int ts__run_gpu_conv_native(const ts__run_node *n, const ts_tensor *in, const ts_tensor *out) {
  if (n->op != TS_OP_CONV2D && n->op != TS_OP_CONV2D_BWD_DATA && n->op != TS_OP_CONV2D_BWD_WEIGHT) return 0;
  for (int k = 0; k < n->nin; k++)
    if (in[k].dtype != TS_F16) return 0;
  for (int k = 0; k < n->nout; k++)
    if (out[k].dtype != TS_F16) return 0;
  ts__conv_desc d;
  const int dir = conv_dir(n, in, out, &d);
  return ts__gpu_conv2d_on_cudnn(&d, TS_F16, 0, dir);
}

/* The three directions. Channels last: the direction's cuDNN workspace, then room for the filter
 * as OHWI in the node's scratch (the parameter stays OIHW: transposed in before the forward and
 * backward data, the weight gradient transposed out after; a 1x1 filter is the same memory) */
static int run_conv(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts__conv_desc d;
  const int dir = conv_dir(n, in, out, &d);
  const unsigned ain = dir == 2 ? 3u : 1u, aout = dir == 2 ? 0u : 1u; /* x; dy; x and dy -> y; dx */
  const int cl = cl_of(ctx, ain, aout);
  const ts_dtype dt = out[0].dtype;
  const ts_tensor *w = dir == 2 ? &out[0] : &in[1];
  cl_stage st;
  size_t wsb = 0;
  int rc = ts__gpu_conv2d_workspace(&d, dt, cl, dir, &wsb);
  const size_t wb = cl && !ts__cl_same(&w->shape) ? ts_tensor_nbytes(w) : 0;
  if (!rc) rc = cl_begin(ctx, cl, in, n->nin, ain, out, n->nout, aout, CL_ALIGN(wsb) + wb, &st);
  if (rc) return node_fail(n, rc);
  void *wt = wb ? (char *)st.extra + CL_ALIGN(wsb) : NULL;
  if (wt && dir < 2) rc = cl_permute(ctx, w, 1, w->data, wt);
  const void *wk = wt ? wt : in[1].data;
  if (!rc && dir == 0)
    rc = ts__gpu_conv2d_fwd(ctx->dev, &d, dt, cl, st.in[0].data, wk, n->nin == 3 ? in[2].data : NULL, st.out[0].data,
                            st.extra, wsb, NULL);
  else if (!rc && dir == 1)
    rc = ts__gpu_conv2d_bwd_data(ctx->dev, &d, dt, cl, st.in[0].data, wk, st.out[0].data, st.extra, wsb, NULL);
  else if (!rc)
    rc = ts__gpu_conv2d_bwd_weight(ctx->dev, &d, dt, cl, st.in[0].data, st.in[1].data, wt ? wt : out[0].data,
                                   n->nout == 2 ? out[1].data : NULL, st.extra, wsb, NULL);
  if (!rc && wt && dir == 2) rc = cl_permute(ctx, w, 0, wt, w->data); /* OHWI: the NHWC of (O, C/g, KH, KW) */
  return node_fail(n, cl_end(ctx, &st, rc));
}

/* ---- pooling ---- */

/* Max and average pooling, forward and backward: max pooling's window indices (u8) are laid out
 * as its y (forward: out[1]; backward: in[1]) */
static int run_pool(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  const int fwd = n->op == TS_OP_MAXPOOL2D || n->op == TS_OP_AVGPOOL2D;
  const int mx = n->op == TS_OP_MAXPOOL2D || n->op == TS_OP_MAXPOOL2D_BWD;
  ts__pool_desc d = fwd ? ts__run_pool_desc(n, &in[0].shape, &out[0].shape) : ts__run_pool_desc(n, &out[0].shape, &in[0].shape);
  const unsigned ain = mx && !fwd ? 3u : 1u, aout = mx && fwd ? 3u : 1u;
  const int cl = cl_of(ctx, ain, aout);
  cl_stage st;
  int rc = cl_begin(ctx, cl, in, n->nin, ain, out, n->nout, aout, 0, &st);
  const ts_dtype dt = in[0].dtype;
  void *x = st.in[0].data, *y = st.out[0].data;
  if (!rc)
    rc = n->op == TS_OP_MAXPOOL2D   ? ts__gpu_maxpool_fwd(ctx->dev, &d, dt, cl, x, y, st.out[1].data, NULL)
         : n->op == TS_OP_AVGPOOL2D ? ts__gpu_avgpool_fwd(ctx->dev, &d, dt, cl, x, y, NULL)
         : mx                       ? ts__gpu_maxpool_bwd(ctx->dev, &d, dt, cl, x, st.in[1].data, y, NULL)
                                    : ts__gpu_avgpool_bwd(ctx->dev, &d, dt, cl, x, y, NULL);
  return node_fail(n, cl_end(ctx, &st, rc));
}

/* ---- batch norm ---- */

/* SyncBatchNorm (the node's synchronised slots, up to 3, summed over in turn, as run_norm.c: a
 * slot without a communicator keeps the statistics local): each slot's device collectives */
static int bn_dcolls(ts__runctx *ctx, const ts__run_node *n, struct ts__dcoll **x, int *nx, int *most) {
  const int64_t slots[3] = {ts_attr_batchnorm_sync(&n->a), ts_attr_batchnorm_sync2(&n->a), ts_attr_batchnorm_sync3(&n->a)};
  *nx = 0, *most = 1;
  for (int k = 0; k < 3; k++) {
    const int slot = (int)slots[k] - 1;
    if (slot < 0 || slot >= ctx->ncomms || !ctx->comms || !ctx->comms[slot]) continue;
    struct ts__dcoll *d = ctx->dcolls ? ctx->dcolls[slot] : NULL;
    if (!d)
      return ts_error_set(TS_EINVAL, "batchnorm '%s': plan slot %d has a communicator but no device collectives "
                          "(ts_plan_set_dcoll)", n->name ? n->name : "?", slot);
    x[(*nx)++] = d;
    ts__run_dcoll_used(ctx, d);
    if (ts__dcoll_size(d) > *most) *most = ts__dcoll_size(d);
  }
  return TS_OK;
}

/* part (cnt floats, device) replaced by its sum over each group in turn: every rank's part
 * gathered into all, summed in rank order (the same totals on every rank) */
static int bn_exchange(ts__runctx *ctx, struct ts__dcoll **x, int nx, float *part, int64_t cnt, float *all) {
  int rc = TS_OK;
  for (int k = 0; k < nx && !rc; k++) {
    rc = ts__dcoll_allgather(x[k], part, all, (size_t)cnt, TS_F32, NULL);
    if (!rc) rc = ts__gpu_sum_rows(ctx->dev, all, ts__dcoll_size(x[k]), cnt, part, NULL);
  }
  return rc;
}

/* the BN+ReLU fusion's parameters (exec.c: ctx->fuse, its ab in device memory), NULL: none */
static const ts__gpu_bn_relu *bn_relu_of(const ts__runctx *ctx, ts__fuse_kind kind, ts__gpu_bn_relu *r) {
  if (!ctx->fuse || ctx->fuse->kind != kind) return NULL;
  r->alpha = ctx->fuse->alpha, r->ab = ctx->fuse->ab;
  return r;
}

/* (N, C, S) of batch norm's x, and channels last (N S, C, 1): the same positions of a channel in
 * the same order, every sum and element the same */
static void bn_dims(const ts_shape *x, int cl, int64_t *N, int64_t *C, int64_t *S) {
  ts__run_bn_dims(x, N, C, S);
  if (cl) *N *= *S, *S = 1;
}

/* What a batch-norm node's kernels take: its layout and dims, the fused ReLU, SyncBatchNorm's
 * device collectives, and the node's scratch: the staged tensors (channels last), the exchange's
 * buffers (part), then batchnorm.cu's workspace (ws) */
typedef struct {
  int64_t N, C, S, cnt;
  int training, nx;
  float eps;
  ts__gpu_bn_relu rr;
  const ts__gpu_bn_relu *relu;
  struct ts__dcoll *x[3];
  float *part;
  void *ws;
  cl_stage st;
} bn_node;

/* bwd: BATCHNORM_BWD (dy, x, ...) -> dx, else BATCHNORM x -> y */
static int bn_begin(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out, int bwd, bn_node *b) {
  const ts_tensor *x = &in[bwd ? 1 : 0];
  const unsigned ain = bwd ? 3u : 1u;
  const int cl = x->shape.ndim == 4 && cl_of(ctx, ain, 1u);
  bn_dims(&x->shape, cl, &b->N, &b->C, &b->S);
  b->eps = ts_attr_batchnorm_eps(&n->a);
  b->training = (int)ts_attr_batchnorm_training(&n->a);
  b->relu = bn_relu_of(ctx, bwd ? TS__FUSE_BN_RELU_BWD : TS__FUSE_BN_RELU, &b->rr);
  int most = 1;
  b->nx = 0;
  int rc = b->training ? bn_dcolls(ctx, n, b->x, &b->nx, &most) : TS_OK;
  b->cnt = 2 * b->C + 1;
  const int64_t nexch = b->nx ? b->cnt * (1 + most) : 0;
  if (!rc)
    rc = cl_begin(ctx, cl, in, n->nin, ain, out, n->nout, 1u,
                  sizeof(float) * (size_t)nexch + ts__gpu_bn_workspace(b->N, b->C, b->S), &b->st);
  if (rc) return rc;
  b->part = b->st.extra;
  b->ws = b->part + nexch;
  return TS_OK;
}

/* Batch norm (and with the executor's BN+ReLU fusion, the ReLU after it): local statistics, or
 * synchronised over the node's groups (SyncBatchNorm: each rank's sums exchanged) */
static int run_batchnorm(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  bn_node b;
  int rc = bn_begin(ctx, n, in, out, 0, &b);
  if (rc) return rc;
  const float mom = ts_attr_batchnorm_momentum(&n->a);
  const int64_t N = b.N, C = b.C, S = b.S;
  void *xd = b.st.in[0].data, *yd = b.st.out[0].data;
  if (!b.nx) /* local statistics */
    rc = ts__gpu_batchnorm_fwd(ctx->dev, in[0].dtype, in[1].dtype, xd, in[1].data, in[2].data, in[3].data, in[4].data,
                               yd, out[1].data, out[2].data, N, C, S, mom, b.eps, b.training, b.relu, b.ws, NULL);
  else { /* synchronised: the sums, exchanged, the statistics, then normalised by them */
    rc = ts__gpu_bn_fwd_sums(ctx->dev, in[0].dtype, xd, in[3].data, N, C, S, b.part, b.ws, NULL);
    if (!rc) rc = bn_exchange(ctx, b.x, b.nx, b.part, b.cnt, b.part + b.cnt);
    if (!rc) rc = ts__gpu_bn_sync_stats(ctx->dev, b.part, in[3].data, C, mom, in[3].data, in[4].data, out[1].data,
                                        out[2].data, NULL);
    if (!rc) rc = ts__gpu_batchnorm_fwd(ctx->dev, in[0].dtype, in[1].dtype, xd, in[1].data, in[2].data, out[1].data,
                                        out[2].data, yd, out[1].data, out[2].data, N, C, S, mom, b.eps, 0, b.relu, b.ws,
                                        NULL);
  }
  return node_fail(n, cl_end(ctx, &b.st, rc));
}

static int run_batchnorm_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  bn_node b;
  int rc = bn_begin(ctx, n, in, out, 1, &b);
  if (rc) return rc;
  const int64_t N = b.N, C = b.C, S = b.S;
  void *dyd = b.st.in[0].data, *xd = b.st.in[1].data, *dxd = b.st.out[0].data;
  if (!b.nx)
    rc = ts__gpu_batchnorm_bwd(ctx->dev, in[1].dtype, in[2].dtype, dyd, xd, in[2].data, in[3].data, in[4].data, dxd,
                               out[1].data, out[2].data, N, C, S, b.eps, b.training, b.relu, b.ws, NULL);
  else { /* synchronised: this rank's sums (dgamma, dbeta from them), exchanged, dx through the totals */
    rc = ts__gpu_bn_bwd_sums(ctx->dev, in[1].dtype, in[2].dtype, dyd, xd, in[3].data, in[4].data, out[1].data,
                             out[2].data, N, C, S, b.eps, b.relu, b.part, b.ws, NULL);
    if (!rc) rc = bn_exchange(ctx, b.x, b.nx, b.part, b.cnt, b.part + b.cnt);
    if (!rc) rc = ts__gpu_bn_bwd_dx(ctx->dev, in[1].dtype, in[2].dtype, dyd, xd, in[2].data, in[3].data, in[4].data,
                                    b.part, dxd, N, C, S, b.eps, b.relu, b.ws, NULL);
  }
  return node_fail(n, cl_end(ctx, &b.st, rc));
}

void ts__register_run_gpu_conv(ts__run_fn *tab) {
  tab[TS_OP_CONV2D] = run_conv;
  tab[TS_OP_CONV2D_BWD_DATA] = run_conv;
  tab[TS_OP_CONV2D_BWD_WEIGHT] = run_conv;
  tab[TS_OP_MAXPOOL2D] = run_pool;
  tab[TS_OP_MAXPOOL2D_BWD] = run_pool;
  tab[TS_OP_AVGPOOL2D] = run_pool;
  tab[TS_OP_AVGPOOL2D_BWD] = run_pool;
  tab[TS_OP_BATCHNORM] = run_batchnorm;
  tab[TS_OP_BATCHNORM_BWD] = run_batchnorm_bwd;
}
