/* ResNet family: torchvision's ResNet-18/34/50/101/152 (ImageNet or CIFAR stem) and He et al.
 * 2016's CIFAR ResNet-20/32/44/56/110 (projection shortcuts), with torchvision parameter names. */
#include <math.h>
#include <stdio.h>

#include "tessera/zoo.h"

typedef struct {
  ts_nn *nn;
  float momentum, eps;
  int zero_init_residual;
} rn_ctx;

/* Graph status after building, with the graph's message as the thread's last error. */
static int graph_rc(ts_graph *g) {
  int rc = ts_graph_status(g);
  if (rc) ts_error_set(rc, "%s", ts_graph_error(g));
  return rc;
}

/* Bias-free conv with torchvision's init: kaiming_normal_(mode="fan_out", nonlinearity="relu"). */
static ts_val conv(rn_ctx *c, const char *name, ts_val x, int64_t out, int k, int stride, int pad) {
  ts_graph *g = c->nn->g;
  if (x == TS_NONE || ts_graph_status(g)) return TS_NONE;
  ts_shape xs = ts_val_shape(g, x);
  double std = sqrt(2.0 / (double)(out * k * k));
  ts_init wi = {TS_INIT_NORMAL, 0.0f, (float)std, 0};
  ts_graph_push_scope(g, name);
  ts_val w = ts_nn_param(c->nn, "weight", ts_shape4(out, xs.dims[1], k, k), wi, 0);
  ts_val y = ts_conv2d(g, x, w, TS_NONE, stride, stride, pad, pad, 1, 1, 1);
  ts_graph_pop_scope(g);
  return y;
}

/* BatchNorm2d: weight (1, or 0 for zero-init residual), bias 0, running_mean 0, running_var 1. */
static ts_val bn(rn_ctx *c, const char *name, ts_val x, int zero_weight) {
  ts_graph *g = c->nn->g;
  if (x == TS_NONE || ts_graph_status(g)) return TS_NONE;
  int64_t ch = ts_val_shape(g, x).dims[1];
  ts_init one = {TS_INIT_ONES, 0, 0, 0}, zero = {TS_INIT_ZEROS, 0, 0, 0};
  ts_graph_push_scope(g, name);
  ts_val gm = ts_nn_param(c->nn, "weight", ts_shape1(ch), zero_weight ? zero : one, TS_PARAM_NO_DECAY);
  ts_val bt = ts_nn_param(c->nn, "bias", ts_shape1(ch), zero, TS_PARAM_NO_DECAY);
  ts_val rm = ts_nn_param(c->nn, "running_mean", ts_shape1(ch), zero, TS_PARAM_STATE);
  ts_val rv = ts_nn_param(c->nn, "running_var", ts_shape1(ch), one, TS_PARAM_STATE);
  ts_val y = ts_batchnorm(g, x, gm, bt, rm, rv, c->momentum, c->eps);
  ts_graph_pop_scope(g);
  return y;
}

/* Projection shortcut: downsample.0 (1x1 conv, stride s) + downsample.1 (BN). */
static ts_val downsample(rn_ctx *c, ts_val x, int64_t out, int stride) {
  ts_graph *g = c->nn->g;
  ts_graph_push_scope(g, "downsample");
  ts_val y = bn(c, "1", conv(c, "0", x, out, 1, stride, 0), 0);
  ts_graph_pop_scope(g);
  return y;
}

static ts_val basic_block(rn_ctx *c, ts_val x, int64_t planes, int stride) {
  ts_graph *g = c->nn->g;
  if (x == TS_NONE || ts_graph_status(g)) return TS_NONE;
  int64_t inplanes = ts_val_shape(g, x).dims[1];
  ts_val out = ts_relu(g, bn(c, "bn1", conv(c, "conv1", x, planes, 3, stride, 1), 0));
  out = bn(c, "bn2", conv(c, "conv2", out, planes, 3, 1, 1), c->zero_init_residual);
  ts_val id = x;
  if (stride != 1 || inplanes != planes) id = downsample(c, x, planes, stride);
  return ts_relu(g, ts_add(g, out, id));
}

static ts_val bottleneck(rn_ctx *c, ts_val x, int64_t planes, int stride) {
  ts_graph *g = c->nn->g;
  if (x == TS_NONE || ts_graph_status(g)) return TS_NONE;
  int64_t inplanes = ts_val_shape(g, x).dims[1], outp = planes * 4;
  ts_val out = ts_relu(g, bn(c, "bn1", conv(c, "conv1", x, planes, 1, 1, 0), 0));
  out = ts_relu(g, bn(c, "bn2", conv(c, "conv2", out, planes, 3, stride, 1), 0));
  out = bn(c, "bn3", conv(c, "conv3", out, outp, 1, 1, 0), c->zero_init_residual);
  ts_val id = x;
  if (stride != 1 || inplanes != outp) id = downsample(c, x, outp, stride);
  return ts_relu(g, ts_add(g, out, id));
}

/* layer<idx>: nblocks blocks, the first with `stride`. */
static ts_val make_layer(rn_ctx *c, int idx, ts_val x, int64_t planes, int nblocks, int stride,
                         int bottle) {
  ts_graph *g = c->nn->g;
  char name[32];
  snprintf(name, sizeof name, "layer%d", idx);
  ts_graph_push_scope(g, name);
  for (int b = 0; b < nblocks; b++) {
    char bn_[16];
    snprintf(bn_, sizeof bn_, "%d", b);
    ts_graph_push_scope(g, bn_);
    int s = b == 0 ? stride : 1;
    x = bottle ? bottleneck(c, x, planes, s) : basic_block(c, x, planes, s);
    ts_graph_pop_scope(g);
  }
  ts_graph_pop_scope(g);
  return x;
}

int ts_zoo_resnet(ts_nn *nn, const ts_resnet_config *cfg, ts_val x, ts_val labels, ts_val *logits,
                  ts_val *loss) {
  if (logits) *logits = TS_NONE;
  if (loss) *loss = TS_NONE;
  if (!nn || !nn->g || !nn->p || !cfg)
    return ts_error_set(TS_EINVAL, "ts_zoo_resnet: null argument");
  ts_graph *g = nn->g;
  if (ts_graph_status(g)) return graph_rc(g);
  int depth = cfg->depth;
  static const int blocks18[4] = {2, 2, 2, 2}, blocks34[4] = {3, 4, 6, 3},
                   blocks101[4] = {3, 4, 23, 3}, blocks152[4] = {3, 8, 36, 3};
  const int *blocks = NULL;
  int bottle = 0, he_n = 0;
  switch (depth) {
    case 18: blocks = blocks18; break;
    case 34: blocks = blocks34; break;
    case 50: blocks = blocks34; bottle = 1; break;
    case 101: blocks = blocks101; bottle = 1; break;
    case 152: blocks = blocks152; bottle = 1; break;
    default:
      if (depth >= 8 && (depth - 2) % 6 == 0) he_n = (depth - 2) / 6;
  }
  if (!blocks && !he_n)
    return ts_error_set(TS_ECONFIG,
                        "resnet: depth %d is not supported (18, 34, 50, 101, 152, or 6n+2 such as "
                        "20, 32, 44, 56, 110 for the CIFAR ResNets)", depth);
  int num_classes = cfg->num_classes ? cfg->num_classes : ((he_n || cfg->cifar) ? 10 : 1000);
  if (num_classes < 1)
    return ts_error_set(TS_ECONFIG, "resnet: num_classes must be positive (got %d)", num_classes);
  if (cfg->bn_momentum < 0 || cfg->bn_momentum > 1 || cfg->bn_eps < 0)
    return ts_error_set(TS_ECONFIG, "resnet: bn_momentum %g must be in [0,1] and bn_eps %g >= 0",
                        (double)cfg->bn_momentum, (double)cfg->bn_eps);
  if (x == TS_NONE) return ts_error_set(TS_EINVAL, "resnet: input x is TS_NONE");
  ts_shape xs = ts_val_shape(g, x);
  if (xs.ndim != 4 || ts_val_dtype(g, x) != TS_F32) {
    char s[96];
    return ts_error_set(TS_ESHAPE, "resnet: input x%s:%s must be (N,C,H,W) f32",
                        ts_shape_str(&xs, s, sizeof s), ts_dtype_name(ts_val_dtype(g, x)));
  }

  rn_ctx c = {nn, cfg->bn_momentum > 0 ? cfg->bn_momentum : 0.1f,
              cfg->bn_eps > 0 ? cfg->bn_eps : 1e-5f, cfg->zero_init_residual};
  ts_val h;
  if (he_n) {
    h = ts_relu(g, bn(&c, "bn1", conv(&c, "conv1", x, 16, 3, 1, 1), 0));
    h = make_layer(&c, 1, h, 16, he_n, 1, 0);
    h = make_layer(&c, 2, h, 32, he_n, 2, 0);
    h = make_layer(&c, 3, h, 64, he_n, 2, 0);
  } else {
    if (cfg->cifar) {
      h = ts_relu(g, bn(&c, "bn1", conv(&c, "conv1", x, 64, 3, 1, 1), 0));
    } else {
      h = ts_relu(g, bn(&c, "bn1", conv(&c, "conv1", x, 64, 7, 2, 3), 0));
      h = ts_maxpool2d(g, h, 3, 3, 2, 2, 1, 1);
    }
    static const int64_t planes[4] = {64, 128, 256, 512};
    for (int l = 0; l < 4; l++) h = make_layer(&c, l + 1, h, planes[l], blocks[l], l ? 2 : 1, bottle);
  }
  h = ts_flatten(g, ts_global_avgpool(g, h), 1);
  ts_val out = ts_nn_dense(nn, "fc", h, num_classes, 1);
  ts_val l = TS_NONE;
  if (labels != TS_NONE) l = ts_softmax_cross_entropy(g, out, labels, cfg->label_smoothing);
  int rc = graph_rc(g);
  if (rc) return rc;
  if (logits) *logits = out;
  if (loss) *loss = l;
  return TS_OK;
}
