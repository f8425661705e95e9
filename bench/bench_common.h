/* Shared by the benchmark programs (header-only: each bench program is its own executable): timing
 * helpers and the benchmark models (ResNet-18 CIFAR, the GPT of the core issue, the
 * Fashion-MNIST MLP) as a graph + parameter store + plan + optimizer on a fixed random batch. */
#ifndef TS_BENCH_COMMON_H
#define TS_BENCH_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/optim.h"
#include "tessera/tessera.h"
#include "tessera/zoo.h"

static const char *bench_prog = "bench";

static void die(const char *what) {
  fprintf(stderr, "%s: %s: %s\n", bench_prog, what, ts_last_error());
  exit(1);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void fill_uniform(float *x, size_t n, uint64_t seed) {
  uint64_t key = ts_hash_name("bench", seed);
  for (size_t i = 0; i < n; i++) x[i] = 2.0f * ts_rng_uniform_at(key, i) - 1.0f;
}

typedef struct {
  ts_graph *g;
  ts_params *ps;
  ts_plan *plan;
  ts_optim *opt;
  float lr;
  ts_val loss;
  void *inputs[2];
} trainer;

/* After the forward graph with loss is built: backward, parameter store, plan, optimizer. */
static void trainer_setup(trainer *t, const ts_optim_config *oc, float lr) {
  if (ts_graph_backward(t->g, t->loss, 1.0f)) die("backward");
  int cap = ts_params_count(t->ps) + 1, nk = 0;
  ts_val *keep = malloc(sizeof(ts_val) * (size_t)cap);
  keep[0] = t->loss;
  if (ts_params_attach_grads(t->ps, t->g, keep + 1, cap - 1, &nk)) die("attaching gradients");
  if (ts_params_alloc(t->ps, 1234)) die("allocating parameters");
  if (ts_plan_create(t->g, keep, nk + 1, &t->plan)) die("planning the training step");
  free(keep);
  if (ts_params_bind(t->ps, t->g, t->plan)) die("binding parameters");
  int np = ts_params_count(t->ps), ns = 0;
  ts_optim_segment *segs = malloc(sizeof *segs * (size_t)np);
  for (int i = 0; i < np; i++) {
    int fl = ts_params_flags(t->ps, i);
    if (fl & TS_PARAM_STATE) continue;
    ts_shape sh = ts_params_shape(t->ps, i);
    segs[ns].name = ts_params_name(t->ps, i);
    segs[ns].offset = ts_params_offset(t->ps, i);
    segs[ns].numel = (size_t)ts_shape_numel(&sh);
    segs[ns].flags = (fl & TS_PARAM_NO_DECAY) ? TS_SEG_NO_DECAY : 0;
    ns++;
  }
  if (ts_optim_create(&t->opt, oc, segs, ns)) die("creating the optimizer");
  free(segs);
  t->lr = lr;
}

static void trainer_free(trainer *t) {
  ts_optim_free(t->opt);
  ts_plan_free(t->plan);
  ts_params_free(t->ps);
  ts_graph_free(t->g);
  for (int i = 0; i < 2; i++) ts_free(t->inputs[i]);
}

typedef struct {
  int batch, seq; /* per-process batch; sequence length (gpt) */
  uint64_t data_seed;
  int amp_level;      /* 0: f32; 1..3: train.amp_level O1..O3 (ts_graph_amp) */
  ts_dtype amp_dtype; /* TS_BF16 or TS_F16 */
} bench_model_opts;

/* Builds model `name` ("resnet18", "gpt", "mlp") into *t with a random batch bound: ResNet-18
 * (CIFAR stem) on (B,3,32,32), SGD momentum 0.9, lr 0.1, wd 5e-4; GPT 6 layers, d 384, 6 heads,
 * vocab 8192, seq T, AdamW lr 6e-4 (0.9, 0.95) wd 0.1; MLP 784-512-256-10, momentum 0.9, lr
 * 0.05 (the same recipes as bench/torch_step.py and bench/torch_ddp.py). */
static void bench_model_build(trainer *t, const char *name, const bench_model_opts *mo) {
  int B = mo->batch;
  memset(t, 0, sizeof *t);
  if (ts_graph_create(&t->g) || ts_params_create(&t->ps)) die("creating the graph");
  ts_nn nn = {t->g, t->ps};
  ts_val x, y;
  ts_optim_config oc;
  float lr;
  size_t xn;
  if (!strcmp(name, "gpt")) {
    int T = mo->seq, V = 8192;
    x = ts_input(t->g, "ids", TS_I32, ts_shape2(B, T));
    y = ts_input(t->g, "targets", TS_I32, ts_shape2(B, T));
    ts_gpt_config cfg = {.vocab_size = V, .block_size = T, .n_layer = 6, .n_head = 6, .n_embd = 384};
    if (ts_zoo_gpt(&nn, &cfg, x, y, NULL, &t->loss)) die("building the GPT");
    oc = ts_optim_config_default(TS_OPTIM_ADAMW);
    oc.beta1 = 0.9;
    oc.beta2 = 0.95;
    oc.weight_decay = 0.1;
    lr = 6e-4f;
    int32_t *id = ts_alloc(sizeof(int32_t) * (size_t)B * T), *td = ts_alloc(sizeof(int32_t) * (size_t)B * T);
    uint64_t key = ts_hash_name("gpt-batch", 7 + mo->data_seed);
    for (int64_t i = 0; i < (int64_t)B * T; i++) {
      id[i] = (int32_t)(ts_rng_uniform_at(key, (uint64_t)(2 * i)) * V) % V;
      td[i] = (int32_t)(ts_rng_uniform_at(key, (uint64_t)(2 * i + 1)) * V) % V;
    }
    t->inputs[0] = id;
    t->inputs[1] = td;
  } else {
    int resnet = !strcmp(name, "resnet18");
    if (!resnet && strcmp(name, "mlp")) {
      fprintf(stderr, "%s: unknown model '%s' (resnet18, gpt, mlp)\n", bench_prog, name);
      exit(2);
    }
    x = resnet ? ts_input(t->g, "x", TS_F32, ts_shape4(B, 3, 32, 32)) : ts_input(t->g, "x", TS_F32, ts_shape2(B, 784));
    y = ts_input(t->g, "labels", TS_I32, ts_shape1(B));
    ts_val_set_requires_grad(t->g, x, 0);
    if (resnet) {
      ts_resnet_config cfg = {.depth = 18, .num_classes = 10, .cifar = 1};
      if (ts_zoo_resnet(&nn, &cfg, x, y, NULL, &t->loss)) die("building ResNet-18");
    } else {
      static const int hidden[2] = {512, 256};
      ts_mlp_config cfg = {.num_classes = 10, .hidden = hidden, .nhidden = 2};
      if (ts_zoo_mlp(&nn, &cfg, x, y, NULL, &t->loss)) die("building the MLP");
    }
    oc = ts_optim_config_default(TS_OPTIM_MOMENTUM);
    oc.momentum = 0.9;
    oc.weight_decay = resnet ? 5e-4 : 0;
    lr = resnet ? 0.1f : 0.05f;
    xn = resnet ? (size_t)B * 3 * 32 * 32 : (size_t)B * 784;
    float *xd = ts_alloc(sizeof(float) * xn);
    int32_t *yd = ts_alloc(sizeof(int32_t) * (size_t)B);
    fill_uniform(xd, xn, 3 + mo->data_seed);
    for (int i = 0; i < B; i++) yd[i] = i % 10;
    t->inputs[0] = xd;
    t->inputs[1] = yd;
  }
  if (mo->amp_level > 0) { /* mixed precision: the pass the trainer runs on every forward graph */
    ts_val v[3] = {x, y, t->loss};
    if (ts_graph_amp(t->g, mo->amp_level, mo->amp_dtype, v, 3)) die("the amp pass");
    x = v[0], y = v[1], t->loss = v[2];
  }
  trainer_setup(t, &oc, lr);
  if (ts_plan_bind(t->plan, x, t->inputs[0]) || ts_plan_bind(t->plan, y, t->inputs[1])) die("binding the batch");
}

#endif
