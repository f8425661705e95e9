/* `tessera train`: trains an MLP on an MNIST-format data set (Fashion-MNIST by default), shows
 * per-epoch loss, evaluates on the test split. (The trainer issue replaces the flag interface
 * with YAML configs and the full trainer loop.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tessera/data.h"
#include "tessera/optim.h"
#include "tessera/tessera.h"

typedef struct {
  const char *data_dir;
  int epochs, batch, hidden, threads;
  float lr;
  const char *optimizer;
  uint64_t seed;
  int limit; /* use only the first N training images (0 = all) */
} opts;

static int usage(FILE *f) {
  fprintf(f,
          "usage: tessera train [--data DIR] [--epochs N] [--batch-size B] [--hidden H]\n"
          "                     [--lr LR] [--optimizer sgd|momentum|adam|adamw|lamb] [--seed S]\n"
          "                     [--threads T] [--limit N]\n"
          "Trains an MLP (784-H-H-10, ReLU) on MNIST-format data and reports test accuracy.\n"
          "example: tessera train --epochs 3 --batch-size 128 --lr 0.1 --optimizer momentum\n"
          "default data: %s\n",
          TS_FASHION_MNIST_DIR);
  return f == stderr ? 2 : 0;
}

/* images u8 (N,28,28) rows [i0, i0+B) by index list -> x (B,784) in [0,1] normalised */
static void make_batch(const ts_tensor *img, const ts_tensor *lab, const int32_t *order, int64_t i0,
                       int B, float *x, int32_t *y) {
  const uint8_t *im = img->data, *lb = lab->data;
  for (int b = 0; b < B; b++) {
    int64_t r = order ? order[i0 + b] : i0 + b;
    for (int k = 0; k < 784; k++) x[(size_t)b * 784 + k] = ((float)im[r * 784 + k] / 255.0f - 0.2860f) / 0.3530f;
    y[b] = lb[r];
  }
}

static ts_val build_mlp(ts_nn *nn, ts_val x, int hidden) {
  ts_val h = ts_relu(nn->g, ts_nn_dense(nn, "fc1", x, hidden, 1));
  h = ts_relu(nn->g, ts_nn_dense(nn, "fc2", h, hidden, 1));
  return ts_nn_dense(nn, "fc3", h, 10, 1);
}

int ts_cli_train(int argc, char **argv) {
  opts o = {TS_FASHION_MNIST_DIR, 3, 128, 256, 0, 0.05f, "momentum", 1, 0};
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
#define OPT(name, stmt)                                                       \
  if (!strcmp(a, name)) {                                                     \
    if (!v) return ts_cli_fail(2, "train: option %s needs a value", name);    \
    stmt;                                                                     \
    i++;                                                                      \
    continue;                                                                 \
  }
    OPT("--data", o.data_dir = v)
    OPT("--epochs", o.epochs = atoi(v))
    OPT("--batch-size", o.batch = atoi(v))
    OPT("--hidden", o.hidden = atoi(v))
    OPT("--lr", o.lr = (float)atof(v))
    OPT("--optimizer", o.optimizer = v)
    OPT("--seed", o.seed = strtoull(v, NULL, 10))
    OPT("--threads", o.threads = atoi(v))
    OPT("--limit", o.limit = atoi(v))
#undef OPT
    return ts_cli_fail(2, "train: unknown option '%s' (see tessera train --help)", a);
  }
  if (o.epochs <= 0 || o.batch <= 0 || o.hidden <= 0 || !(o.lr > 0))
    return ts_cli_fail(2, "train: --epochs, --batch-size, --hidden and --lr must be positive");
  ts_optim_kind kind;
  if (ts_optim_kind_parse(o.optimizer, &kind))
    return ts_cli_fail(2, "train: --optimizer: %s", ts_last_error());
  if (o.threads > 0) ts_threads_set(o.threads);

  ts_tensor tr_x, tr_y, te_x, te_y;
  if (ts_mnist_load(o.data_dir, "train", &tr_x, &tr_y)) return ts_cli_fail(1, "%s", ts_last_error());
  if (ts_mnist_load(o.data_dir, "t10k", &te_x, &te_y)) return ts_cli_fail(1, "%s", ts_last_error());
  int64_t ntrain = tr_x.shape.dims[0], ntest = te_x.shape.dims[0];
  if (o.limit > 0 && o.limit < ntrain) ntrain = o.limit;
  const int B = o.batch;

  /* training graph and an inference graph sharing the parameter store */
  ts_params *ps;
  ts_graph *g, *ge;
  ts_params_create(&ps);
  ts_graph_create(&g);
  ts_graph_create(&ge);
  ts_graph_set_training(ge, 0);
  ts_nn nn = {g, ps}, nne = {ge, ps};
  ts_val x = ts_input(g, "x", TS_F32, ts_shape2(B, 784));
  ts_val y = ts_input(g, "y", TS_I32, ts_shape1(B));
  ts_val_set_requires_grad(g, x, 0);
  ts_val loss = ts_softmax_cross_entropy(g, build_mlp(&nn, x, o.hidden), y, 0.0f);
  const int EB = 500;
  ts_val xe = ts_input(ge, "x", TS_F32, ts_shape2(EB, 784));
  ts_val logits_e = build_mlp(&nne, xe, o.hidden);
  int rc = ts_graph_status(g) ? ts_graph_status(g) : ts_graph_status(ge);
  if (rc) return ts_cli_fail(1, "train: building the model: %s", ts_graph_status(g) ? ts_graph_error(g) : ts_graph_error(ge));
  if (ts_graph_backward(g, loss, 1.0f)) return ts_cli_fail(1, "train: backward: %s", ts_graph_error(g));
  ts_val keep[64];
  int nkeep = 0;
  if (ts_params_alloc(ps, o.seed) || ts_params_attach_grads(ps, g, keep, 63, &nkeep))
    return ts_cli_fail(1, "train: %s", ts_last_error());
  keep[nkeep++] = loss;
  ts_plan *plan, *plan_e;
  if (ts_plan_create(g, keep, nkeep, &plan) || ts_params_bind(ps, g, plan) ||
      ts_plan_create(ge, &logits_e, 1, &plan_e) || ts_params_bind(ps, ge, plan_e))
    return ts_cli_fail(1, "train: planning: %s", ts_last_error());

  int np = ts_params_count(ps);
  ts_optim_segment *segs = calloc((size_t)np, sizeof *segs);
  int nseg = 0;
  for (int i = 0; i < np; i++) {
    if (ts_params_flags(ps, i) & TS_PARAM_STATE) continue;
    ts_shape s = ts_params_shape(ps, i);
    segs[nseg++] = (ts_optim_segment){ts_params_name(ps, i), ts_params_offset(ps, i),
                                      (size_t)ts_shape_numel(&s),
                                      (ts_params_flags(ps, i) & TS_PARAM_NO_DECAY) ? TS_SEG_NO_DECAY : 0};
  }
  ts_optim_config cfg = ts_optim_config_default(kind);
  if (kind == TS_OPTIM_MOMENTUM) cfg.weight_decay = 5e-4f;
  ts_optim *opt;
  if (ts_optim_create(&opt, &cfg, segs, nseg)) return ts_cli_fail(1, "train: optimizer: %s", ts_last_error());
  int64_t steps_per_epoch = ntrain / B;
  ts_lr_schedule sched = {.kind = TS_LR_COSINE, .base_lr = o.lr, .warmup_steps = steps_per_epoch / 4,
                          .total_steps = steps_per_epoch * o.epochs, .min_lr = 0};

  printf("tessera %s: MLP 784-%d-%d-10 on %s (%lld train, %lld test), %zu parameters, %s, batch %d, "
         "%d epochs, %d threads\n",
         ts_version(), o.hidden, o.hidden, o.data_dir, (long long)ntrain, (long long)ntest,
         ts_params_numel(ps), ts_optim_kind_name(kind), B, o.epochs, ts_threads_get());
  float *xb = ts_alloc(sizeof(float) * (size_t)EB * 784);
  int32_t *yb = ts_alloc(sizeof(int32_t) * (size_t)EB);
  int32_t *order = malloc(sizeof(int32_t) * (size_t)ntrain);
  ts_plan_bind(plan, x, xb);
  ts_plan_bind(plan, y, yb);
  ts_plan_bind(plan_e, xe, xb);
  int64_t step = 0;
  double t0 = ts_time_now();
  float acc = 0;
  for (int ep = 0; ep < o.epochs; ep++) {
    /* seeded Fisher-Yates shuffle from Philox, reproducible per epoch */
    for (int64_t i = 0; i < ntrain; i++) order[i] = (int32_t)i;
    uint64_t key = ts_hash_name("shuffle", o.seed + (uint64_t)ep);
    for (int64_t i = ntrain - 1; i > 0; i--) {
      int64_t j = (int64_t)(ts_philox4x32(key, 0, (uint64_t)i).v[0] % (uint64_t)(i + 1));
      int32_t t = order[i]; order[i] = order[j]; order[j] = t;
    }
    double sum = 0;
    for (int64_t s = 0; s < steps_per_epoch; s++, step++) {
      make_batch(&tr_x, &tr_y, order, s * B, B, xb, yb);
      if (ts_plan_run(plan, (uint64_t)step)) return ts_cli_fail(1, "train: step %lld: %s", (long long)step, ts_last_error());
      float l = *(float *)ts_plan_data(plan, loss);
      if (!isfinite(l)) return ts_cli_fail(1, "train: loss diverged (%g) at step %lld", l, (long long)step);
      sum += l;
      ts_optim_step(opt, ts_params_data(ps), ts_params_grads(ps), ts_lr_at(&sched, step));
    }
    /* evaluate */
    int64_t correct = 0;
    for (int64_t i0 = 0; i0 + EB <= ntest; i0 += EB) {
      make_batch(&te_x, &te_y, NULL, i0, EB, xb, yb);
      if (ts_plan_run(plan_e, 0)) return ts_cli_fail(1, "train: eval: %s", ts_last_error());
      const float *lg = ts_plan_data(plan_e, logits_e);
      for (int b = 0; b < EB; b++) {
        int best = 0;
        for (int c = 1; c < 10; c++)
          if (lg[b * 10 + c] > lg[b * 10 + best]) best = c;
        correct += best == yb[b];
      }
    }
    acc = (float)correct / (float)(ntest / EB * EB);
    printf("epoch %d/%d  loss %.4f  test accuracy %.2f%%  (%.1f s)\n", ep + 1, o.epochs,
           sum / (double)steps_per_epoch, 100.0 * acc, ts_time_now() - t0);
    fflush(stdout);
  }
  printf("final test accuracy %.2f%% after %lld steps in %.1f s\n", 100.0 * acc, (long long)step,
         ts_time_now() - t0);
  ts_free(xb);
  ts_free(yb);
  free(order);
  free(segs);
  ts_optim_free(opt);
  ts_plan_free(plan);
  ts_plan_free(plan_e);
  ts_graph_free(g);
  ts_graph_free(ge);
  ts_params_free(ps);
  ts_tensor_free(&tr_x); ts_tensor_free(&tr_y); ts_tensor_free(&te_x); ts_tensor_free(&te_y);
  return 0;
}
