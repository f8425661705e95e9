/* Pool family: MAXPOOL2D, MAXPOOL2D_BWD, AVGPOOL2D, AVGPOOL2D_BWD. NCHW, f32, symmetric
 * padding, floor output size OH = (H + 2 pad_h - kh) / stride_h + 1. Padding may be at most
 * half the window (as in PyTorch), so every window holds a real element.
 *
 * Attributes (ts_attr_* accessors; tessera/ops.def), shared prefix:
 *   kh, kw, sh, sw (strides), ph, pw (paddings)
 *   MAXPOOL2D     (x (N,C,H,W)) -> y (N,C,OH,OW) f32, ws (N,C,OH,OW) u8 (the arg-max within
 *                 each window, in the encoding of the backend that ran the forward; the
 *                 executor runs forward and backward with the same backend). kh*kw <= 256.
 *   MAXPOOL2D_BWD (dy (N,C,OH,OW), ws) -> dx (N,C,H,W)     in_h = H, in_w = W
 *   AVGPOOL2D     (x) -> y (N,C,OH,OW)  padded positions are excluded from the divisor
 *                 (count_include_pad = False, PyTorch's nn.AvgPool2d(count_include_pad=False)).
 *   AVGPOOL2D_BWD (dy) -> dx (N,C,H,W)                     in_h = H, in_w = W
 *   ts_global_avgpool builds AVGPOOL2D with kernel = stride = (H, W), no padding.
 *
 * Gradients: MAXPOOL2D -> MAXPOOL2D_BWD(dy, ws); AVGPOOL2D -> AVGPOOL2D_BWD(dy). The
 * workspace output gets no gradient (u8); the *_BWD ops are not differentiable. */
#include <string.h>

#include "graph_ir.h"
#include "graph_impl.h"

#define VS(v, buf) ts__vstr(g, (v), buf, sizeof buf)

static int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p) {
  int64_t num = in + 2 * p - k;
  return num < 0 ? 0 : num / s + 1;
}

/* Validates x (f32 4-D) and the attributes against spatial size H x W; writes OH, OW. */
static int check_pool(ts_graph *g, const char *op, const ts_attrs *a, int x, int64_t H, int64_t W,
                      int is_max, int64_t *OH, int64_t *OW) {
  char b1[160];
  const int64_t kh = ts_attr_pool2d_kh(a), kw = ts_attr_pool2d_kw(a), sh = ts_attr_pool2d_sh(a), sw = ts_attr_pool2d_sw(a), ph = ts_attr_pool2d_ph(a), pw = ts_attr_pool2d_pw(a);
  if (kh < 1 || kw < 1 || sh < 1 || sw < 1 || ph < 0 || pw < 0 || kh > (1 << 20) ||
      kw > (1 << 20) || sh > (1 << 20) || sw > (1 << 20))
    return ts__graph_fail(g, TS_EINVAL,
                          "%s: x %s: invalid window %lldx%lld, stride %lldx%lld, padding %lldx%lld "
                          "(window and stride must be >= 1, padding >= 0)",
                          op, VS(x, b1), (long long)kh, (long long)kw, (long long)sh, (long long)sw,
                          (long long)ph, (long long)pw);
  if (2 * ph > kh || 2 * pw > kw)
    return ts__graph_fail(g, TS_EINVAL, "%s: x %s: padding %lldx%lld exceeds half the window %lldx%lld",
                          op, VS(x, b1), (long long)ph, (long long)pw, (long long)kh, (long long)kw);
  if (is_max && kh * kw > 256)
    return ts__graph_fail(g, TS_EUNSUPPORTED,
                          "%s: x %s: window %lldx%lld has more than 256 elements (the arg-max "
                          "workspace is u8)", op, VS(x, b1), (long long)kh, (long long)kw);
  *OH = pool_out(H, kh, sh, ph);
  *OW = pool_out(W, kw, sw, pw);
  if (*OH < 1 || *OW < 1)
    return ts__graph_fail(g, TS_ESHAPE, "%s: x %s: window %lldx%lld does not fit the padded input %lldx%lld",
                          op, VS(x, b1), (long long)kh, (long long)kw, (long long)(H + 2 * ph),
                          (long long)(W + 2 * pw));
  return TS_OK;
}

static int check_x(ts_graph *g, const char *op, const char *what, int x) {
  char b1[160];
  const ts__value *v = ts__val(g, x);
  const char *const nm[1] = {what};
  if (ts__same_float(g, op, &x, nm, 1, NULL)) return g->status;
  if (v->shape.ndim != 4)
    return ts__graph_fail(g, TS_ESHAPE, "%s: %s %s must be 4-D (N,C,H,W)", op, what, VS(x, b1));
  return TS_OK;
}

/* ---------------------------------------------------------------- forward */

static int infer_pool_fwd(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh, int is_max) {
  const char *op = is_max ? "maxpool2d" : "avgpool2d";
  const int nout = is_max ? 2 : 1;
  if (n->nin != 1 || n->nout != nout)
    return ts__graph_fail(g, TS_EINVAL, "%s: expects 1 input and %d output(s), got %d/%d", op,
                          nout, n->nin, n->nout);
  const int x = n->in[0];
  if (check_x(g, op, "x", x)) return g->status;
  const ts_shape xs = ts__val(g, x)->shape;
  int64_t OH, OW;
  if (check_pool(g, op, &n->a, x, xs.dims[2], xs.dims[3], is_max, &OH, &OW)) return g->status;
  odt[0] = ts__val(g, x)->dtype;
  osh[0] = ts_shape4(xs.dims[0], xs.dims[1], OH, OW);
  if (is_max) {
    odt[1] = TS_U8;
    osh[1] = osh[0];
  }
  return TS_OK;
}

static int infer_maxpool2d(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  return infer_pool_fwd(g, n, odt, osh, 1);
}
static int infer_avgpool2d(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  return infer_pool_fwd(g, n, odt, osh, 0);
}

static ts_val add_pool(ts_graph *g, ts_op op, ts_val x, int64_t kh, int64_t kw, int64_t sh,
                       int64_t sw, int64_t ph, int64_t pw) {
  if (!g) return TS_NONE;
  int in = ts__vidx(g, x, ts__ops[op].name ? ts__ops[op].name : "pool");
  if (in < 0) return TS_NONE;
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_pool2d_kh(&a, kh), ts_attr_set_pool2d_kw(&a, kw), ts_attr_set_pool2d_sh(&a, sh), ts_attr_set_pool2d_sw(&a, sw), ts_attr_set_pool2d_ph(&a, ph), ts_attr_set_pool2d_pw(&a, pw);
  int nd = ts__add_node(g, op, &in, 1, op == TS_OP_MAXPOOL2D ? 2 : 1, &a);
  return nd < 0 ? TS_NONE : ts__handle(g, g->nodes[nd].out[0]);
}

ts_val ts_maxpool2d(ts_graph *g, ts_val x, int kh, int kw, int sh, int sw, int ph, int pw) {
  return add_pool(g, TS_OP_MAXPOOL2D, x, kh, kw, sh, sw, ph, pw);
}

ts_val ts_avgpool2d(ts_graph *g, ts_val x, int kh, int kw, int sh, int sw, int ph, int pw) {
  return add_pool(g, TS_OP_AVGPOOL2D, x, kh, kw, sh, sw, ph, pw);
}

ts_val ts_global_avgpool(ts_graph *g, ts_val x) {
  if (!g) return TS_NONE;
  int xi = ts__vidx(g, x, "global_avgpool");
  if (xi < 0) return TS_NONE;
  const ts__value *v = ts__val(g, xi);
  if (v->shape.ndim != 4) {
    char b1[160];
    ts__graph_fail(g, TS_ESHAPE, "global_avgpool: x %s must be 4-D (N,C,H,W)", VS(xi, b1));
    return TS_NONE;
  }
  const int64_t H = v->shape.dims[2], W = v->shape.dims[3];
  return add_pool(g, TS_OP_AVGPOOL2D, x, H, W, H, W, 0, 0);
}

/* ---------------------------------------------------------------- backward */

static int grad_pool(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  const int is_max = n.op == TS_OP_MAXPOOL2D;
  dx[0] = -1;
  if (dy[0] < 0) return TS_OK;
  const ts_shape xs = g->vals[n.in[0]].shape;
  ts_attrs a = n.a;
  ts_attr_set_pool2d_in_h(&a, xs.dims[2]);
  ts_attr_set_pool2d_in_w(&a, xs.dims[3]);
  int in[2] = {dy[0], n.out[1]};
  dx[0] = ts__emit(g, is_max ? TS_OP_MAXPOOL2D_BWD : TS_OP_AVGPOOL2D_BWD, in, is_max ? 2 : 1, &a);
  return dx[0] < 0 ? (g->status ? g->status : TS_EGRAPH) : TS_OK;
}

static int infer_pool_bwd(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh, int is_max) {
  char b1[160], b2[160];
  const char *op = is_max ? "maxpool2d_bwd" : "avgpool2d_bwd";
  const int nin = is_max ? 2 : 1;
  if (n->nin != nin || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "%s: expects %d input(s) and 1 output, got %d/%d", op, nin,
                          n->nin, n->nout);
  const int dy = n->in[0];
  if (check_x(g, op, "dy", dy)) return g->status;
  const ts_shape ys = ts__val(g, dy)->shape;
  const int64_t H = ts_attr_pool2d_in_h(&n->a), W = ts_attr_pool2d_in_w(&n->a);
  if (H < 1 || W < 1)
    return ts__graph_fail(g, TS_EINVAL, "%s: dy %s: input size %lldx%lld must be positive", op,
                          VS(dy, b1), (long long)H, (long long)W);
  int64_t OH, OW;
  if (check_pool(g, op, &n->a, dy, H, W, is_max, &OH, &OW)) return g->status;
  if (OH != ys.dims[2] || OW != ys.dims[3])
    return ts__graph_fail(g, TS_ESHAPE, "%s: dy %s: spatial size must be %lldx%lld for input %lldx%lld",
                          op, VS(dy, b1), (long long)OH, (long long)OW, (long long)H, (long long)W);
  if (is_max) {
    const ts__value *ws = ts__val(g, n->in[1]);
    if (ws->dtype != TS_U8 || !ts_shape_equal(&ws->shape, &ys))
      return ts__graph_fail(g, TS_ESHAPE, "%s: dy %s and workspace %s: workspace must be u8 of dy's shape",
                            op, VS(dy, b1), VS(n->in[1], b2));
  }
  odt[0] = ts__val(g, dy)->dtype;
  osh[0] = ts_shape4(ys.dims[0], ys.dims[1], H, W);
  return TS_OK;
}

static int infer_maxpool2d_bwd(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  return infer_pool_bwd(g, n, odt, osh, 1);
}
static int infer_avgpool2d_bwd(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  return infer_pool_bwd(g, n, odt, osh, 0);
}

void ts__register_pool(ts__opdef *tab) {
  tab[TS_OP_MAXPOOL2D] = (ts__opdef){"maxpool2d", infer_maxpool2d, grad_pool, 0};
  tab[TS_OP_MAXPOOL2D_BWD] = (ts__opdef){"maxpool2d_bwd", infer_maxpool2d_bwd, NULL, 0};
  tab[TS_OP_AVGPOOL2D] = (ts__opdef){"avgpool2d", infer_avgpool2d, grad_pool, 0};
  tab[TS_OP_AVGPOOL2D_BWD] = (ts__opdef){"avgpool2d_bwd", infer_avgpool2d_bwd, NULL, 0};
}
