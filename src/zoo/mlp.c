/* Small classifiers: MLP, LeNet-5, a two-conv ConvNet (PyTorch default initialisers). */
#include <stdio.h>

#include "tessera/zoo.h"

static int graph_rc(ts_graph *g) {
  int rc = ts_graph_status(g);
  if (rc) ts_error_set(rc, "%s", ts_graph_error(g));
  return rc;
}

static int check_common(ts_nn *nn, const void *cfg, const char *model, ts_val x) {
  if (!nn || !nn->g || !nn->p || !cfg)
    return ts_error_set(TS_EINVAL, "%s: null argument", model);
  if (ts_graph_status(nn->g)) return graph_rc(nn->g);
  if (x == TS_NONE) return ts_error_set(TS_EINVAL, "%s: input x is TS_NONE", model);
  if (ts_val_dtype(nn->g, x) != TS_F32)
    return ts_error_set(TS_EDTYPE, "%s: input x must be f32, not %s", model,
                        ts_dtype_name(ts_val_dtype(nn->g, x)));
  return TS_OK;
}

/* Loss (if labels given), then the graph status; outputs set only on success. */
static int finish(ts_graph *g, ts_val out, ts_val labels, float smoothing, ts_val *logits,
                  ts_val *loss) {
  ts_val l = TS_NONE;
  if (labels != TS_NONE) l = ts_softmax_cross_entropy(g, out, labels, smoothing);
  int rc = graph_rc(g);
  if (rc) return rc;
  if (logits) *logits = out;
  if (loss) *loss = l;
  return TS_OK;
}

static ts_val flatten(ts_graph *g, ts_val x) {
  return ts_val_shape(g, x).ndim > 2 ? ts_flatten(g, x, 1) : x;
}

int ts_zoo_mlp(ts_nn *nn, const ts_mlp_config *cfg, ts_val x, ts_val labels, ts_val *logits,
               ts_val *loss) {
  if (logits) *logits = TS_NONE;
  if (loss) *loss = TS_NONE;
  int rc = check_common(nn, cfg, "mlp", x);
  if (rc) return rc;
  ts_graph *g = nn->g;
  if (cfg->num_classes < 1 || cfg->nhidden < 0 || (cfg->nhidden > 0 && !cfg->hidden))
    return ts_error_set(TS_ECONFIG, "mlp: num_classes (%d) must be positive and hidden must list "
                        "nhidden (%d) sizes", cfg->num_classes, cfg->nhidden);
  for (int i = 0; i < cfg->nhidden; i++)
    if (cfg->hidden[i] < 1)
      return ts_error_set(TS_ECONFIG, "mlp: hidden[%d] = %d must be positive", i, cfg->hidden[i]);
  if (ts_val_shape(g, x).ndim < 2)
    return ts_error_set(TS_ESHAPE, "mlp: input x must be (N,...) with at least 2 dims");
  ts_val h = flatten(g, x);
  char name[32];
  for (int i = 0; i < cfg->nhidden; i++) {
    snprintf(name, sizeof name, "fc%d", i + 1);
    h = ts_relu(g, ts_nn_dense(nn, name, h, cfg->hidden[i], 1));
  }
  snprintf(name, sizeof name, "fc%d", cfg->nhidden + 1);
  ts_val out = ts_nn_dense(nn, name, h, cfg->num_classes, 1);
  return finish(g, out, labels, cfg->label_smoothing, logits, loss);
}

int ts_zoo_lenet5(ts_nn *nn, const ts_lenet5_config *cfg, ts_val x, ts_val labels, ts_val *logits,
                  ts_val *loss) {
  if (logits) *logits = TS_NONE;
  if (loss) *loss = TS_NONE;
  int rc = check_common(nn, cfg, "lenet5", x);
  if (rc) return rc;
  ts_graph *g = nn->g;
  int classes = cfg->num_classes ? cfg->num_classes : 10;
  if (classes < 1)
    return ts_error_set(TS_ECONFIG, "lenet5: num_classes must be positive (got %d)", classes);
  ts_shape xs = ts_val_shape(g, x);
  char s[96];
  if (xs.ndim != 4 || xs.dims[2] != xs.dims[3] || (xs.dims[2] != 28 && xs.dims[2] != 32))
    return ts_error_set(TS_ESHAPE, "lenet5: input x%s must be (N,C,28,28) or (N,C,32,32)",
                        ts_shape_str(&xs, s, sizeof s));
  int pad = xs.dims[2] == 28 ? 2 : 0;
  ts_val h = ts_relu(g, ts_nn_conv2d(nn, "conv1", x, 6, 5, 1, pad, 1, 1, 1));
  h = ts_maxpool2d(g, h, 2, 2, 2, 2, 0, 0);
  h = ts_relu(g, ts_nn_conv2d(nn, "conv2", h, 16, 5, 1, 0, 1, 1, 1));
  h = ts_flatten(g, ts_maxpool2d(g, h, 2, 2, 2, 2, 0, 0), 1); /* (N,16*5*5) */
  h = ts_relu(g, ts_nn_dense(nn, "fc1", h, 120, 1));
  h = ts_relu(g, ts_nn_dense(nn, "fc2", h, 84, 1));
  ts_val out = ts_nn_dense(nn, "fc3", h, classes, 1);
  return finish(g, out, labels, 0.0f, logits, loss);
}

int ts_zoo_convnet(ts_nn *nn, const ts_convnet_config *cfg, ts_val x, ts_val labels,
                   ts_val *logits, ts_val *loss) {
  if (logits) *logits = TS_NONE;
  if (loss) *loss = TS_NONE;
  int rc = check_common(nn, cfg, "convnet", x);
  if (rc) return rc;
  ts_graph *g = nn->g;
  int classes = cfg->num_classes ? cfg->num_classes : 10;
  int c1 = cfg->c1 ? cfg->c1 : 32, c2 = cfg->c2 ? cfg->c2 : 64;
  float mom = cfg->bn_momentum > 0 ? cfg->bn_momentum : 0.1f;
  float eps = cfg->bn_eps > 0 ? cfg->bn_eps : 1e-5f;
  if (classes < 1 || c1 < 1 || c2 < 1 || mom > 1 || cfg->bn_momentum < 0 || cfg->bn_eps < 0)
    return ts_error_set(TS_ECONFIG, "convnet: num_classes (%d), c1 (%d), c2 (%d) must be positive, "
                        "bn_momentum in [0,1], bn_eps >= 0", classes, c1, c2);
  ts_shape xs = ts_val_shape(g, x);
  char s[96];
  if (xs.ndim != 4 || xs.dims[2] % 4 || xs.dims[3] % 4 || xs.dims[2] < 4 || xs.dims[3] < 4)
    return ts_error_set(TS_ESHAPE, "convnet: input x%s must be (N,C,H,W) with H, W multiples of 4",
                        ts_shape_str(&xs, s, sizeof s));
  ts_val h = ts_nn_conv2d(nn, "conv1", x, c1, 3, 1, 1, 1, 1, 0);
  h = ts_maxpool2d(g, ts_relu(g, ts_nn_batchnorm(nn, "bn1", h, mom, eps)), 2, 2, 2, 2, 0, 0);
  h = ts_nn_conv2d(nn, "conv2", h, c2, 3, 1, 1, 1, 1, 0);
  h = ts_maxpool2d(g, ts_relu(g, ts_nn_batchnorm(nn, "bn2", h, mom, eps)), 2, 2, 2, 2, 0, 0);
  ts_val out = ts_nn_dense(nn, "fc", ts_flatten(g, h, 1), classes, 1);
  return finish(g, out, labels, 0.0f, logits, loss);
}
