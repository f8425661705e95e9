/* Conv family: CONV2D, CONV2D_BWD_DATA, CONV2D_BWD_WEIGHT. NCHW activations, OIHW weights,
 * f32, bf16 or f16: every float input of one node shares one dtype (bias included), and the
 * outputs have it (dx, dw, db in the dtype of dy/x). Padding is symmetric; dilation 1 means
 * none (PyTorch's convention).
 *
 * Attributes (ts_attr_* accessors; tessera/ops.def), shared prefix:
 *   stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
 *   groups
 *   CONV2D            (x (N,C,H,W), w (O,C/groups,KH,KW)[, b (O)]) -> y (N,O,OH,OW)
 *   CONV2D_BWD_DATA   (dy (N,O,OH,OW), w) -> dx (N,C,H,W)           in_h = H, in_w = W
 *   CONV2D_BWD_WEIGHT (x, dy) -> dw (O,C/groups,KH,KW)[, db (O)]    kh = KH, kw = KW,
 *                                                                   has_bias (= nout-1)
 * with OH = (H + 2 pad_h - dil_h (KH-1) - 1) / stride_h + 1 (floor), likewise OW.
 *
 * Gradients: dx = CONV2D_BWD_DATA(dy, w) (skipped when x is marked no-grad, e.g. the image fed
 * to a network's first conv); dw, db = CONV2D_BWD_WEIGHT(x, dy) (one node, two outputs when
 * the conv has a bias). The *_BWD ops are not differentiable. */
#include <string.h>

#include "graph_ir.h"
#include "graph_impl.h"

#define VS(v, buf) ts__vstr(g, (v), buf, sizeof buf)

static int check_attrs(ts_graph *g, const char *op, const ts_attrs *a, int x, int w) {
  char b1[160], b2[160];
  const int64_t v7[7] = {ts_attr_conv2d_stride_h(a), ts_attr_conv2d_stride_w(a), ts_attr_conv2d_pad_h(a),
                         ts_attr_conv2d_pad_w(a),    ts_attr_conv2d_dil_h(a),    ts_attr_conv2d_dil_w(a),
                         ts_attr_conv2d_groups(a)};
  for (int k = 0; k < 7; k++) {
    int64_t v = v7[k], lo = (k == 2 || k == 3) ? 0 : 1;
    if (v < lo || v > (1 << 20))
      return ts__graph_fail(g, TS_EINVAL,
                            "%s: x %s, w %s: invalid attributes stride %lldx%lld, padding "
                            "%lldx%lld, dilation %lldx%lld, groups %lld (strides, dilations and "
                            "groups must be >= 1, paddings >= 0)",
                            op, VS(x, b1), VS(w, b2), (long long)ts_attr_conv2d_stride_h(a), (long long)ts_attr_conv2d_stride_w(a),
                            (long long)ts_attr_conv2d_pad_h(a), (long long)ts_attr_conv2d_pad_w(a), (long long)ts_attr_conv2d_dil_h(a),
                            (long long)ts_attr_conv2d_dil_w(a), (long long)ts_attr_conv2d_groups(a));
  }
  return TS_OK;
}

/* v is 4-D and shares its float dtype with other (f32, bf16 or f16). */
static int check_f32_4d(ts_graph *g, const char *op, const char *what, int v, int other,
                        const char *owhat) {
  char b1[160], b2[160];
  const ts__value *x = ts__val(g, v);
  const int vals[2] = {v, other};
  const char *const nm[2] = {what, owhat};
  if (ts__same_float(g, op, vals, nm, 2, NULL)) return g->status;
  if (x->shape.ndim != 4)
    return ts__graph_fail(g, TS_ESHAPE, "%s: %s %s (%s %s) must be 4-D", op, what, VS(v, b1),
                          owhat, VS(other, b2));
  return TS_OK;
}

/* Output size along one axis (<= 0 if the dilated kernel does not fit). The graph layer does
 * not include kernel headers; this is the same formula as ts__conv_out_size. */
static int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  int64_t num = in + 2 * p - (d * (k - 1) + 1);
  return num < 0 ? 0 : num / s + 1;
}

/* Output spatial size; fails naming the op if the (dilated) kernel does not fit. */
static int out_hw(ts_graph *g, const char *op, const ts_attrs *a, int64_t H, int64_t W,
                  int64_t KH, int64_t KW, int x, int w, int64_t *OH, int64_t *OW) {
  char b1[160], b2[160];
  *OH = conv_out(H, KH, ts_attr_conv2d_stride_h(a), ts_attr_conv2d_pad_h(a), ts_attr_conv2d_dil_h(a));
  *OW = conv_out(W, KW, ts_attr_conv2d_stride_w(a), ts_attr_conv2d_pad_w(a), ts_attr_conv2d_dil_w(a));
  if (*OH < 1 || *OW < 1)
    return ts__graph_fail(g, TS_ESHAPE,
                          "%s: x %s, w %s: kernel %lldx%lld (dilation %lldx%lld) does not fit the "
                          "padded input %lldx%lld",
                          op, VS(x, b1), VS(w, b2), (long long)KH, (long long)KW,
                          (long long)ts_attr_conv2d_dil_h(a), (long long)ts_attr_conv2d_dil_w(a), (long long)(H + 2 * ts_attr_conv2d_pad_h(a)),
                          (long long)(W + 2 * ts_attr_conv2d_pad_w(a)));
  return TS_OK;
}

/* Checks channel/group consistency of activations with C channels, O output channels and
 * weights w. */
static int check_channels(ts_graph *g, const char *op, const ts_attrs *a, int64_t C, int64_t O,
                          int x, int w) {
  char b1[160], b2[160];
  const ts_shape *ws = &ts__val(g, w)->shape;
  const int64_t G = ts_attr_conv2d_groups(a);
  if (C % G || O % G)
    return ts__graph_fail(g, TS_ESHAPE, "%s: x %s, w %s: groups %lld must divide channels %lld and %lld",
                          op, VS(x, b1), VS(w, b2), (long long)G, (long long)C, (long long)O);
  if (ws->dims[0] != O || ws->dims[1] * G != C)
    return ts__graph_fail(g, TS_ESHAPE,
                          "%s: x %s, w %s: weights must be (O=%lld, C/groups=%lld, KH, KW) for "
                          "%lld input channels and groups %lld",
                          op, VS(x, b1), VS(w, b2), (long long)O, (long long)(C / G), (long long)C,
                          (long long)G);
  return TS_OK;
}

/* ---------------------------------------------------------------- CONV2D */

static int infer_conv2d(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b1[160], b2[160], b3[160];
  if ((n->nin != 2 && n->nin != 3) || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "conv2d: expects inputs (x, w[, b]) and 1 output, got %d/%d",
                          n->nin, n->nout);
  const int x = n->in[0], w = n->in[1];
  if (check_f32_4d(g, "conv2d", "x", x, w, "w") || check_f32_4d(g, "conv2d", "w", w, x, "x") ||
      check_attrs(g, "conv2d", &n->a, x, w))
    return g->status;
  const ts_shape xs = ts__val(g, x)->shape, ws = ts__val(g, w)->shape;
  const int64_t O = ws.dims[0];
  if (check_channels(g, "conv2d", &n->a, xs.dims[1], O, x, w)) return g->status;
  if (n->nin == 3) {
    const ts__value *b = ts__val(g, n->in[2]);
    const int xb[2] = {x, n->in[2]};
    static const char *const nm[2] = {"x", "bias"};
    if (ts__same_float(g, "conv2d", xb, nm, 2, NULL)) return g->status;
    if (b->shape.ndim != 1 || b->shape.dims[0] != O)
      return ts__graph_fail(g, TS_ESHAPE, "conv2d: w %s and bias %s: bias must be of shape (%lld)",
                            VS(w, b2), VS(n->in[2], b3), (long long)O);
  }
  int64_t OH, OW;
  if (out_hw(g, "conv2d", &n->a, xs.dims[2], xs.dims[3], ws.dims[2], ws.dims[3], x, w, &OH, &OW))
    return g->status;
  (void)b1;
  odt[0] = ts__val(g, x)->dtype;
  osh[0] = ts_shape4(xs.dims[0], O, OH, OW);
  return TS_OK;
}

ts_val ts_conv2d(ts_graph *g, ts_val x, ts_val w, ts_val b, int stride_h, int stride_w,
                 int pad_h, int pad_w, int dil_h, int dil_w, int groups) {
  if (!g) return TS_NONE;
  int in[3], nin = b == TS_NONE ? 2 : 3;
  if ((in[0] = ts__vidx(g, x, "conv2d")) < 0 || (in[1] = ts__vidx(g, w, "conv2d")) < 0)
    return TS_NONE;
  if (nin == 3 && (in[2] = ts__vidx(g, b, "conv2d")) < 0) return TS_NONE;
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_conv2d_stride_h(&a, stride_h), ts_attr_set_conv2d_stride_w(&a, stride_w), ts_attr_set_conv2d_pad_h(&a, pad_h), ts_attr_set_conv2d_pad_w(&a, pad_w);
  ts_attr_set_conv2d_dil_h(&a, dil_h), ts_attr_set_conv2d_dil_w(&a, dil_w), ts_attr_set_conv2d_groups(&a, groups);
  return ts__add1(g, TS_OP_CONV2D, in, nin, &a);
}

static int grad_conv2d(ts_graph *g, int node, const int *dy, int *dx) {
  const ts__node n = g->nodes[node];
  const int x = n.in[0], w = n.in[1];
  const int with_bias = n.nin == 3;
  dx[0] = dx[1] = dx[2] = -1;
  if (dy[0] < 0) return TS_OK;
  const ts_shape xs = g->vals[x].shape, ws = g->vals[w].shape;
  if (!g->vals[x].no_grad) {
    ts_attrs a = n.a;
    ts_attr_set_conv2d_bwd_data_in_h(&a, xs.dims[2]);
    ts_attr_set_conv2d_bwd_data_in_w(&a, xs.dims[3]);
    int in[2] = {dy[0], w};
    dx[0] = ts__emit(g, TS_OP_CONV2D_BWD_DATA, in, 2, &a);
    if (dx[0] < 0) return g->status ? g->status : TS_EGRAPH;
  }
  const int need_w = !g->vals[w].no_grad, need_b = with_bias && !g->vals[n.in[2]].no_grad;
  if (need_w || need_b) {
    ts_attrs a = n.a;
    ts_attr_set_conv2d_bwd_weight_kh(&a, ws.dims[2]);
    ts_attr_set_conv2d_bwd_weight_kw(&a, ws.dims[3]);
    ts_attr_set_conv2d_bwd_weight_has_bias(&a, need_b);
    int in[2] = {x, dy[0]};
    int nd = ts__add_node(g, TS_OP_CONV2D_BWD_WEIGHT, in, 2, 1 + need_b, &a);
    if (nd < 0) return g->status ? g->status : TS_EGRAPH;
    if (need_w) dx[1] = g->nodes[nd].out[0];
    if (need_b) dx[2] = g->nodes[nd].out[1];
  }
  return TS_OK;
}

/* ---------------------------------------------------------------- CONV2D_BWD_DATA */

static int infer_conv2d_bwd_data(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b1[160], b2[160];
  const char *op = "conv2d_bwd_data";
  if (n->nin != 2 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "%s: expects inputs (dy, w) and 1 output, got %d/%d", op,
                          n->nin, n->nout);
  const int dy = n->in[0], w = n->in[1];
  if (check_f32_4d(g, op, "dy", dy, w, "w") || check_f32_4d(g, op, "w", w, dy, "dy") ||
      check_attrs(g, op, &n->a, dy, w))
    return g->status;
  const ts_shape ys = ts__val(g, dy)->shape, ws = ts__val(g, w)->shape;
  const int64_t H = ts_attr_conv2d_bwd_data_in_h(&n->a), W = ts_attr_conv2d_bwd_data_in_w(&n->a), C = ws.dims[1] * ts_attr_conv2d_groups(&n->a);
  if (H < 1 || W < 1)
    return ts__graph_fail(g, TS_EINVAL, "%s: dy %s, w %s: input size %lldx%lld must be positive",
                          op, VS(dy, b1), VS(w, b2), (long long)H, (long long)W);
  if (check_channels(g, op, &n->a, C, ys.dims[1], dy, w)) return g->status;
  int64_t OH, OW;
  if (out_hw(g, op, &n->a, H, W, ws.dims[2], ws.dims[3], dy, w, &OH, &OW)) return g->status;
  if (OH != ys.dims[2] || OW != ys.dims[3])
    return ts__graph_fail(g, TS_ESHAPE, "%s: dy %s, w %s: dy's spatial size must be %lldx%lld for input %lldx%lld",
                          op, VS(dy, b1), VS(w, b2), (long long)OH, (long long)OW, (long long)H,
                          (long long)W);
  odt[0] = ts__val(g, dy)->dtype;
  osh[0] = ts_shape4(ys.dims[0], C, H, W);
  return TS_OK;
}

/* ---------------------------------------------------------------- CONV2D_BWD_WEIGHT */

static int infer_conv2d_bwd_weight(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b1[160], b2[160];
  const char *op = "conv2d_bwd_weight";
  if (n->nin != 2 || n->nout < 1 || n->nout > 2 || ts_attr_conv2d_bwd_weight_has_bias(&n->a) != n->nout - 1)
    return ts__graph_fail(g, TS_EINVAL,
                          "%s: expects inputs (x, dy) and outputs dw[, db] matching with_bias=%lld, got %d/%d",
                          op, (long long)ts_attr_conv2d_bwd_weight_has_bias(&n->a), n->nin, n->nout);
  const int x = n->in[0], dy = n->in[1];
  if (check_f32_4d(g, op, "x", x, dy, "dy") || check_f32_4d(g, op, "dy", dy, x, "x") ||
      check_attrs(g, op, &n->a, x, dy))
    return g->status;
  const ts_shape xs = ts__val(g, x)->shape, ys = ts__val(g, dy)->shape;
  const int64_t KH = ts_attr_conv2d_bwd_weight_kh(&n->a), KW = ts_attr_conv2d_bwd_weight_kw(&n->a), G = ts_attr_conv2d_groups(&n->a), C = xs.dims[1], O = ys.dims[1];
  if (KH < 1 || KW < 1)
    return ts__graph_fail(g, TS_EINVAL, "%s: x %s, dy %s: kernel size %lldx%lld must be positive",
                          op, VS(x, b1), VS(dy, b2), (long long)KH, (long long)KW);
  if (C % G || O % G)
    return ts__graph_fail(g, TS_ESHAPE, "%s: x %s, dy %s: groups %lld must divide channels %lld and %lld",
                          op, VS(x, b1), VS(dy, b2), (long long)G, (long long)C, (long long)O);
  int64_t OH, OW;
  if (out_hw(g, op, &n->a, xs.dims[2], xs.dims[3], KH, KW, x, dy, &OH, &OW)) return g->status;
  if (ys.dims[0] != xs.dims[0] || OH != ys.dims[2] || OW != ys.dims[3])
    return ts__graph_fail(g, TS_ESHAPE, "%s: x %s, dy %s: dy must be (%lld, O, %lld, %lld)", op,
                          VS(x, b1), VS(dy, b2), (long long)xs.dims[0], (long long)OH,
                          (long long)OW);
  odt[0] = ts__val(g, x)->dtype;
  osh[0] = ts_shape4(O, C / G, KH, KW);
  if (n->nout == 2) {
    odt[1] = ts__val(g, x)->dtype;
    osh[1] = ts_shape1(O);
  }
  return TS_OK;
}

void ts__register_conv(ts__opdef *tab) {
  tab[TS_OP_CONV2D] = (ts__opdef){"conv2d", infer_conv2d, grad_conv2d, 0};
  tab[TS_OP_CONV2D_BWD_DATA] = (ts__opdef){"conv2d_bwd_data", infer_conv2d_bwd_data, NULL, 0};
  tab[TS_OP_CONV2D_BWD_WEIGHT] =
      (ts__opdef){"conv2d_bwd_weight", infer_conv2d_bwd_weight, NULL, 0};
}
