/* Tessera nn: layers that create named parameters in a store (include/tessera/params.h) and
 * emit ops.
 *
 * Usage (compiled by tests/tools/header_examples_test.sh):
 *   ts_params *ps; ts_params_create(&ps);
 *   ts_nn nn = {g, ps};
 *   ts_val h = ts_relu(g, ts_nn_dense(&nn, "fc1", x, 128, 1));
 *   ts_val labels = ts_input(g, "labels", TS_I32, ts_shape1(64));
 *   ts_val loss = ts_softmax_cross_entropy(g, ts_nn_dense(&nn, "fc2", h, 10, 1), labels, 0.0f);
 *   ts_graph_backward(g, loss, 1);
 *   ts_params_alloc(ps, seed);            // allocate + initialise
 */
#ifndef TESSERA_NN_H
#define TESSERA_NN_H

#include "tessera/graph.h"
#include "tessera/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- layers: create named parameters in the store and emit ops ---- */
typedef struct {
  ts_graph *g;
  ts_params *p;
} ts_nn;

/* A parameter value named `name` (registered in the store if new; reused if it exists). */
ts_val ts_nn_param(ts_nn *nn, const char *name, ts_shape shape, ts_init init, int flags);
/* Dense: x (...,in) -> (...,out); params <name>.weight (out,in), <name>.bias (out). */
ts_val ts_nn_dense(ts_nn *nn, const char *name, ts_val x, int64_t out, int bias);
/* Conv2d: x (N,C,H,W) -> (N,out,OH,OW); square kernel k; params <name>.weight, <name>.bias. */
ts_val ts_nn_conv2d(ts_nn *nn, const char *name, ts_val x, int64_t out, int k, int stride, int pad,
                    int dilation, int groups, int bias);
/* BatchNorm over channel dim 1: <name>.weight, .bias, .running_mean, .running_var (states). */
ts_val ts_nn_batchnorm(ts_nn *nn, const char *name, ts_val x, float momentum, float eps);
/* LayerNorm over the last dim: <name>.weight, <name>.bias. */
ts_val ts_nn_layernorm(ts_nn *nn, const char *name, ts_val x, float eps);
/* Embedding: ids -> (...,dim); <name>.weight (vocab,dim) ~ N(0,1) like PyTorch. */
ts_val ts_nn_embedding(ts_nn *nn, const char *name, ts_val ids, int64_t vocab, int64_t dim);

#ifdef __cplusplus
}
#endif
#endif
