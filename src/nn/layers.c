/* Layers: named parameters + ops. Names follow PyTorch's state_dict convention
 * (<layer>.weight, <layer>.bias, <bn>.running_mean, ...), prefixed with the graph's scope. */
#include <stdio.h>
#include <string.h>

#include "graph/graph_ir.h"
#include "tessera/nn.h"

static void full_name(ts_nn *nn, const char *name, char *buf, size_t cap) {
  /* graph scope uses '/', parameter names use '.' */
  const char *scope = ts_graph_scope(nn->g);
  if (scope[0]) {
    snprintf(buf, cap, "%s.%s", scope, name);
    for (char *c = buf; *c; c++)
      if (*c == '/') *c = '.';
  } else {
    snprintf(buf, cap, "%s", name);
  }
}

ts_val ts_nn_param(ts_nn *nn, const char *name, ts_shape shape, ts_init init, int flags) {
  ts_graph *g = nn->g;
  if (!g || ts_graph_status(g)) return TS_NONE;
  char full[600];
  full_name(nn, name, full, sizeof full);
  int id = ts_params_find(nn->p, full);
  if (id >= 0) {
    ts_shape have = ts_params_shape(nn->p, id);
    if (!ts_shape_equal(&have, &shape)) {
      char a[128], b[128];
      ts_graph_fail(g, TS_ESHAPE, "parameter '%s' reused with shape %s, registered as %s", full,
                     ts_shape_str(&shape, a, sizeof a), ts_shape_str(&have, b, sizeof b));
      return TS_NONE;
    }
    const int v = ts_graph_param_leaf(g, id);
    if (v >= 0) return ts_graph_value(g, v);
  } else {
    id = ts_params_add(nn->p, full, shape, init, flags);
    if (id < 0) {
      ts_graph_fail(g, id, "%s", ts_last_error());
      return TS_NONE;
    }
  }
  /* the value's name is the full name; avoid double scoping */
  char saved[TS_GRAPH_MAX_SCOPE];
  snprintf(saved, sizeof saved, "%s", ts_graph_scope(g));
  ts_graph_set_scope(g, "");
  ts_val v = (flags & TS_PARAM_STATE) ? ts_state_value(g, full, TS_F32, shape, id)
                                      : ts_param_value(g, full, TS_F32, shape, id);
  ts_graph_set_scope(g, saved);
  return v;
}

static int64_t last_dim(ts_nn *nn, ts_val x) {
  ts_shape s = ts_val_shape(nn->g, x);
  return s.ndim ? s.dims[s.ndim - 1] : 0;
}

ts_val ts_nn_dense(ts_nn *nn, const char *name, ts_val x, int64_t out, int bias) {
  if (!nn->g || ts_graph_status(nn->g) || x == TS_NONE) return TS_NONE;
  int64_t in = last_dim(nn, x);
  char n[256];
  ts_graph_push_scope(nn->g, name);
  ts_init wi = {TS_INIT_TORCH_DEFAULT, 0, 0, 0};
  ts_val w = ts_nn_param(nn, "weight", ts_shape2(out, in), wi, 0);
  ts_val b = TS_NONE;
  if (bias) {
    ts_init bi = {TS_INIT_TORCH_DEFAULT, 0, 0, in};
    b = ts_nn_param(nn, "bias", ts_shape1(out), bi, TS_PARAM_NO_DECAY);
  }
  ts_val y = ts_dense(nn->g, x, w, b);
  ts_graph_pop_scope(nn->g);
  (void)n;
  return y;
}

ts_val ts_nn_conv2d(ts_nn *nn, const char *name, ts_val x, int64_t out, int k, int stride, int pad,
                    int dilation, int groups, int bias) {
  if (!nn->g || ts_graph_status(nn->g) || x == TS_NONE) return TS_NONE;
  ts_shape xs = ts_val_shape(nn->g, x);
  if (xs.ndim != 4 || groups <= 0 || xs.dims[1] % groups) {
    char s[128];
    ts_graph_fail(nn->g, TS_ESHAPE, "conv2d layer '%s': input %s must be (N,C,H,W) with C divisible by groups %d",
                   name, ts_shape_str(&xs, s, sizeof s), groups);
    return TS_NONE;
  }
  int64_t cin = xs.dims[1] / groups;
  ts_graph_push_scope(nn->g, name);
  ts_init wi = {TS_INIT_TORCH_DEFAULT, 0, 0, 0};
  ts_val w = ts_nn_param(nn, "weight", ts_shape4(out, cin, k, k), wi, 0);
  ts_val b = TS_NONE;
  if (bias) {
    ts_init bi = {TS_INIT_TORCH_DEFAULT, 0, 0, cin * k * k};
    b = ts_nn_param(nn, "bias", ts_shape1(out), bi, TS_PARAM_NO_DECAY);
  }
  ts_val y = ts_conv2d(nn->g, x, w, b, stride, stride, pad, pad, dilation, dilation, groups);
  ts_graph_pop_scope(nn->g);
  return y;
}

ts_val ts_nn_batchnorm(ts_nn *nn, const char *name, ts_val x, float momentum, float eps) {
  if (!nn->g || ts_graph_status(nn->g) || x == TS_NONE) return TS_NONE;
  ts_shape xs = ts_val_shape(nn->g, x);
  if (xs.ndim < 2) {
    ts_graph_fail(nn->g, TS_ESHAPE, "batchnorm layer '%s': input needs a channel dim 1", name);
    return TS_NONE;
  }
  int64_t c = xs.dims[1];
  ts_graph_push_scope(nn->g, name);
  ts_init one = {TS_INIT_ONES, 0, 0, 0}, zero = {TS_INIT_ZEROS, 0, 0, 0};
  ts_val gm = ts_nn_param(nn, "weight", ts_shape1(c), one, TS_PARAM_NO_DECAY);
  ts_val bt = ts_nn_param(nn, "bias", ts_shape1(c), zero, TS_PARAM_NO_DECAY);
  ts_val rm = ts_nn_param(nn, "running_mean", ts_shape1(c), zero, TS_PARAM_STATE);
  ts_val rv = ts_nn_param(nn, "running_var", ts_shape1(c), one, TS_PARAM_STATE);
  ts_val y = ts_batchnorm(nn->g, x, gm, bt, rm, rv, momentum, eps);
  ts_graph_pop_scope(nn->g);
  return y;
}

ts_val ts_nn_layernorm(ts_nn *nn, const char *name, ts_val x, float eps) {
  if (!nn->g || ts_graph_status(nn->g) || x == TS_NONE) return TS_NONE;
  int64_t d = last_dim(nn, x);
  ts_graph_push_scope(nn->g, name);
  ts_init one = {TS_INIT_ONES, 0, 0, 0}, zero = {TS_INIT_ZEROS, 0, 0, 0};
  ts_val gm = ts_nn_param(nn, "weight", ts_shape1(d), one, TS_PARAM_NO_DECAY);
  ts_val bt = ts_nn_param(nn, "bias", ts_shape1(d), zero, TS_PARAM_NO_DECAY);
  ts_val y = ts_layernorm(nn->g, x, gm, bt, eps);
  ts_graph_pop_scope(nn->g);
  return y;
}

ts_val ts_nn_embedding(ts_nn *nn, const char *name, ts_val ids, int64_t vocab, int64_t dim) {
  if (!nn->g || ts_graph_status(nn->g) || ids == TS_NONE) return TS_NONE;
  ts_graph_push_scope(nn->g, name);
  ts_init ni = {TS_INIT_NORMAL, 0, 1, 0};
  ts_val w = ts_nn_param(nn, "weight", ts_shape2(vocab, dim), ni, 0);
  ts_val y = ts_embedding(nn->g, w, ids);
  ts_graph_pop_scope(nn->g);
  return y;
}
