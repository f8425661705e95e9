/* A step in two halves (ts_trainer_grad_batch, then ts_trainer_apply_grads: MindSpore's
 * value_and_grad then optimizer(grads)) against whole steps (ts_trainer_step_batch) of a second
 * trainer of the same config: every step's loss, learning rate and gradient norm, and the
 * parameters after 4 steps, bitwise, with momentum, clipping and a learning-rate table (the
 * schedule's per-step rates reach the optimizer at the right step in both). And the order the
 * halves keep: apply without gradients, a second grad_batch, a step_batch or a fit while
 * gradients are pending are refused (nothing changed: the pending step then applies as usual). */
#include <stdlib.h>
#include <string.h>

#include "tessera/train.h"
#include "test_util.h"

#define STEPS 4
#define B 8

static const char *k_yaml =
    "model: {name: mlp, hidden: [24]}\n"
    "data: {name: fashion_mnist, train_limit: 32, test_limit: 16, num_workers: 1}\n"
    "train: {steps: 4, batch_size: 8, seed: 3, eval_every: -1, log_every: 1}\n"
    "optimizer: {name: momentum, momentum: 0.9, clip_grad_norm: 0.5,\n"
    "            schedule: {name: table, values: [0.2, 0.1, 0.05, 0.3]}}\n"
    "log: {progress: off}\n"
    "checkpoint: {dir: \"\", save_last: false}\n";

static ts_trainer *make(const char *data) {
  char dp[300];
  snprintf(dp, sizeof dp, "data.path=%s", data);
  const char *sets[] = {dp};
  ts_config cfg;
  ts_trainer *t = NULL;
  CHECK_OK(ts_config_load_string(k_yaml, "split.yaml", sets, 1, &cfg));
  CHECK_OK(ts_trainer_create(&cfg, &t));
  ts_config_free(&cfg);
  return t;
}

/* A batch of B samples 1x28x28 (deterministic values) and labels. */
static void batch(int k, float *x, int32_t *y, ts_batch *b) {
  for (int i = 0; i < B * 784; i++) x[i] = (float)((i * 7 + k * 131) % 97) / 97.0f - 0.5f;
  for (int i = 0; i < B; i++) y[i] = (i * 3 + k) % 10;
  memset(b, 0, sizeof *b);
  b->size = B;
  b->data.dtype = TS_F32;
  b->data.shape = (ts_shape){4, {B, 1, 28, 28}};
  b->data.data = x;
  b->labels.dtype = b->target.dtype = TS_I32;
  b->labels.shape = b->target.shape = (ts_shape){1, {B}};
  b->labels.data = b->target.data = y;
}

int main(void) {
  if (!ts_test_have_fashion_mnist()) return ts_test_finish("test_step_split");
  const char *data = ts_test_fashion_mnist_dir();
  ts_trainer *whole = make(data), *half = make(data);
  if (!whole || !half) return ts_test_finish("test_step_split");
  static float x[B * 784];
  static int32_t y[B];
  const float rates[STEPS] = {0.2f, 0.1f, 0.05f, 0.3f};
  for (int k = 0; k < STEPS; k++) {
    ts_batch b;
    ts_step_info a, g, h;
    batch(k, x, y, &b);
    CHECK_OK(ts_trainer_step_batch(whole, &b, &a));
    if (k == 1) /* nothing pending: refused */
      EXPECT_ERR(ts_trainer_apply_grads(half, &h), TS_EINVAL, "no gradients to apply");
    CHECK_OK(ts_trainer_grad_batch(half, &b, &g));
    CHECK(g.loss == a.loss && ts_trainer_step(half) == k); /* the loss known, the step not counted yet */
    if (k == 2) { /* pending: a second half, a whole step and a fit are refused */
      EXPECT_ERR(ts_trainer_grad_batch(half, &b, &h), TS_EINVAL, "are pending");
      EXPECT_ERR(ts_trainer_step_batch(half, &b, &h), TS_EINVAL, "are pending");
      EXPECT_ERR(ts_trainer_fit(half), TS_EINVAL, "are pending");
    }
    CHECK_OK(ts_trainer_apply_grads(half, &h));
    CHECK_MSG(h.loss == a.loss && h.lr == a.lr && h.grad_norm == a.grad_norm && h.step == a.step &&
                  h.step == k + 1,
              "step %d: loss %.9g/%.9g lr %g/%g norm %.9g/%.9g", k + 1, h.loss, a.loss, h.lr, a.lr, h.grad_norm,
              a.grad_norm);
    CHECK(a.lr == rates[k]);
    CHECK(a.grad_norm > 0.5f); /* clipping acts */
  }
  ts_params *pa = ts_trainer_params(whole), *pb = ts_trainer_params(half);
  size_t n = ts_params_numel(pa);
  CHECK(n == ts_params_numel(pb) && n > 0);
  CHECK_MSG(!memcmp(ts_params_data(pa), ts_params_data(pb), sizeof(float) * n), "parameters differ after %d steps",
            STEPS);
  ts_trainer_free(whole);
  ts_trainer_free(half);
  return ts_test_finish("test_step_split");
}
