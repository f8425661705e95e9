/* Tessera model zoo: builders that emit a model's forward graph (and its loss) through the nn
 * layers, with PyTorch state_dict parameter names, so checkpoints line up with torchvision /
 * nanoGPT ones.
 *
 * Usage (compiled by tests/tools/header_examples_test.sh):
 *   ts_graph *g; ts_graph_create(&g);
 *   ts_params *ps; ts_params_create(&ps);
 *   ts_nn nn = {g, ps};
 *   ts_val x = ts_input(g, "x", TS_F32, ts_shape4(64, 3, 32, 32));
 *   ts_val y = ts_input(g, "labels", TS_I32, ts_shape1(64));
 *   ts_resnet_config cfg = {.depth = 18, .num_classes = 10, .cifar = 1};
 *   ts_val logits, loss;
 *   if (ts_zoo_resnet(&nn, &cfg, x, y, &logits, &loss)) fprintf(stderr, "%s\n", ts_last_error());
 *
 * Every builder returns TS_OK or a status (invalid config: TS_ECONFIG naming the field; graph
 * error: the graph's sticky status, message in ts_last_error() and ts_graph_error()). Labels /
 * targets may be TS_NONE: then only the logits are built and *loss is TS_NONE (inference).
 * `logits` and `loss` may be NULL if not wanted. Config fields left 0 take the default shown.
 *
 * Initialisation follows the reference implementations (torchvision ResNet: Kaiming-normal
 * fan_out convs, BN weight 1 / bias 0, default Linear fc; nanoGPT: N(0,0.02) weights, zero
 * biases, N(0,0.02/sqrt(2*n_layer)) residual projections; others: PyTorch layer defaults). */
#ifndef TESSERA_ZOO_H
#define TESSERA_ZOO_H

#include "tessera/nn.h"
#include "tessera/strategy.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- ResNet ----
 * depth 18, 34 (BasicBlock) and 50, 101, 152 (Bottleneck, expansion 4) are torchvision's
 * ResNets: stem conv1 7x7/2 + bn1 + ReLU + 3x3/2 max-pool (cifar = 0), or conv1 3x3/1 + bn1 +
 * ReLU without max-pool (cifar = 1, the usual CIFAR variant); layer1..layer4 with 64..512
 * (x4) channels; global average pool; fc. Projection shortcuts (downsample.0 1x1 conv stride s,
 * downsample.1 BN) where the shape changes; the stride sits on the 3x3 conv (torchvision v1.5).
 *
 * depth 6n+2 (20, 32, 44, 56, 110, ...) is He et al. 2016's CIFAR ResNet: conv1 3x3 16 + bn1 +
 * ReLU, layer1..layer3 of n BasicBlocks with 16/32/64 channels, global average pool, fc (64 ->
 * classes); projection shortcuts (option B). `cifar` is ignored for these depths.
 *
 * Names: conv1.weight, bn1.{weight,bias,running_mean,running_var}, layer1.0.conv1.weight,
 * layer1.0.bn1.*, ..., layer2.0.downsample.0.weight, layer2.0.downsample.1.*, fc.weight,
 * fc.bias. Input x (N,C,H,W) f32; labels (N) i32/i64; logits (N,num_classes); loss the mean
 * softmax cross-entropy. */
typedef struct {
  int depth;             /* 18, 34, 50, 101, 152, or 6n+2 for the CIFAR family */
  int num_classes;       /* 0 -> 1000 (ImageNet stem) / 10 (CIFAR) */
  int cifar;             /* 1: 3x3 stride-1 stem without max-pool (depth 18..152) */
  int zero_init_residual;/* 1: last BN of each block starts at weight 0 (torchvision option) */
  float bn_momentum;     /* 0 -> 0.1 (PyTorch convention) */
  float bn_eps;          /* 0 -> 1e-5 */
  float label_smoothing; /* 0 */
} ts_resnet_config;

int ts_zoo_resnet(ts_nn *nn, const ts_resnet_config *cfg, ts_val x, ts_val labels, ts_val *logits,
                  ts_val *loss);

/* ---- GPT (GPT-2 / nanoGPT decoder-only transformer) ----
 * ids, targets (B,T) i32/i64 with T <= block_size. h = wte(ids) + wpe[0:T] (a slice of the
 * learned position table, broadcast over B); n_layer pre-LayerNorm blocks
 *   h = h + c_proj(attn(c_attn(ln_1(h))))        causal multi-head attention
 *   h = h + mlp.c_proj(gelu_tanh(mlp.c_fc(ln_2(h))))
 * then ln_f and lm_head (no bias). logits (B,T,vocab); loss = mean cross-entropy over B*T
 * (targets equal to -100 are ignored). Dropout (if > 0) is applied to the embedding sum and to
 * each residual branch (nanoGPT's resid dropout); attention-probability dropout is not
 * supported by ts_attention and is omitted.
 *
 * Names (nanoGPT): transformer.wte.weight, transformer.wpe.weight, transformer.h.<i>.ln_1.*,
 * transformer.h.<i>.attn.c_attn.{weight,bias}, transformer.h.<i>.attn.c_proj.*,
 * transformer.h.<i>.ln_2.*, transformer.h.<i>.mlp.c_fc.*, transformer.h.<i>.mlp.c_proj.*,
 * transformer.ln_f.*, lm_head.weight (absent when tie_weights: the head reuses wte).
 * Linear weights are (out,in) as in PyTorch's nn.Linear (not GPT-2's Conv1D (in,out)). */
typedef struct {
  int vocab_size;    /* required */
  int block_size;    /* max sequence length (wpe rows); 0 -> T of the input */
  int n_layer;       /* required */
  int n_head;        /* required; n_embd % n_head == 0 */
  int n_embd;        /* required */
  int mlp_ratio;     /* 0 -> 4 */
  int no_bias;       /* 1: Linear and LayerNorm layers without bias (nanoGPT bias=False) */
  int tie_weights;   /* 1: lm_head uses transformer.wte.weight */
  float dropout;     /* 0 */
  uint64_t dropout_seed; /* base seed of the dropout masks (each site gets seed + index) */
  float ln_eps;      /* 0 -> 1e-5 */
  float init_std;    /* 0 -> 0.02 */
} ts_gpt_config;

int ts_zoo_gpt(ts_nn *nn, const ts_gpt_config *cfg, ts_val ids, ts_val targets, ts_val *logits,
               ts_val *loss);
/* Trainable parameter count of ts_zoo_gpt for this config and sequence length T (block_size
 * if set), counting a tied head once. -1 for an invalid config. */
int64_t ts_zoo_gpt_num_params(const ts_gpt_config *cfg, int64_t T);
/* Megatron-LM's tensor-parallel cuts of ts_zoo_gpt, tp ways, times data parallel dp on the
 * batch, recorded into `out` (a set for dp * tp devices; entries named by the builder's operator
 * keys and '*' rules over the blocks): column-parallel attn.c_attn (q|k|v) and mlp.c_fc,
 * row-parallel attn.c_proj and mlp.c_proj, attention by heads, the vocabulary of the embedding,
 * the head ("dense") and the loss. TS_ECONFIG naming the field when tp does not divide n_head or
 * vocab_size; TS_EINVAL for dp or tp < 1 or a set of another device count. */
int ts_gpt_megatron_strategies(const ts_gpt_config *cfg, int dp, int tp, ts_strategy_set *out);
/* The same with context parallelism the Ulysses way (DeepSpeed-Ulysses) over cp ranks, into a
 * set for dp * cp * tp devices: the sequence cut cp ways from the token ids on (the operators
 * without an entry follow the cut), attention cut by heads cp * tp ways (the pass turns q, k, v
 * from the sequence cut into the heads' with all-to-alls and the output back before c_proj), the
 * loss's rows cut dp * cp ways. cp 1: ts_gpt_megatron_strategies. TS_ECONFIG naming the field
 * when cp * tp does not divide n_head or cp the sequence (block_size). */
/* algo TS_CP_RING instead: attention keeps the sequence cut (heads cut tp ways, the sequence cp
 * ways) and runs as ring attention (ts_ring_attention), no all-to-all; cp need not divide the heads.
 * TS_CP_AUTO: Ulysses where cp * tp divides the heads, else ring (ts_gpt_cp_algo). */
enum { TS_CP_ULYSSES = 0, TS_CP_RING = 1, TS_CP_AUTO = 2 };
int ts_gpt_context_strategies(const ts_gpt_config *cfg, int dp, int cp, int tp, int algo, ts_strategy_set *out);
/* algo as it runs: TS_CP_AUTO resolved (TS_CP_ULYSSES when cp * tp divides cfg's heads, else
 * TS_CP_RING); the others as given. */
int ts_gpt_cp_algo(const ts_gpt_config *cfg, int cp, int tp, int algo);

/* ---- small classifiers ----
 * MLP: x (N,...) is flattened to (N,F); fc1..fc<k> are Linear layers of the hidden sizes, each
 * followed by ReLU, then fc<k+1> to num_classes (PyTorch default init). */
typedef struct {
  int num_classes;   /* required */
  const int *hidden; /* hidden layer sizes (may be NULL with nhidden 0: logistic regression) */
  int nhidden;
  float label_smoothing;
} ts_mlp_config;

int ts_zoo_mlp(ts_nn *nn, const ts_mlp_config *cfg, ts_val x, ts_val labels, ts_val *logits,
               ts_val *loss);

/* LeNet-5 (ReLU + max-pool variant): conv1 5x5 6 (padding 2 for 28x28 inputs, 0 for 32x32) +
 * ReLU + pool 2, conv2 5x5 16 + ReLU + pool 2, fc1 (16*5*5 -> 120), fc2 (-> 84), fc3 (->
 * classes). x (N,C,28,28) or (N,C,32,32). 61,706 parameters for 1x28x28 and 10 classes. */
typedef struct {
  int num_classes; /* 0 -> 10 */
} ts_lenet5_config;

int ts_zoo_lenet5(ts_nn *nn, const ts_lenet5_config *cfg, ts_val x, ts_val labels, ts_val *logits,
                  ts_val *loss);

/* ConvNet: conv1 3x3 c1 (pad 1, no bias) + bn1 + ReLU + max-pool 2, conv2 3x3 c2 + bn2 + ReLU +
 * max-pool 2, flatten, fc to classes. x (N,C,H,W) with H, W divisible by 4 (1x28x28, 3x32x32). */
typedef struct {
  int num_classes; /* 0 -> 10 */
  int c1, c2;      /* 0 -> 32, 64 */
  float bn_momentum, bn_eps; /* 0 -> 0.1, 1e-5 */
} ts_convnet_config;

int ts_zoo_convnet(ts_nn *nn, const ts_convnet_config *cfg, ts_val x, ts_val labels,
                   ts_val *logits, ts_val *loss);

#ifdef __cplusplus
}
#endif
#endif
