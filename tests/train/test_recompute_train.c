/* model.recompute through the trainer: a small GPT (dropout on, text file) and the convnet
 * (BatchNorm, Fashion-MNIST subset) trained a few steps with recompute full and selective end
 * with bitwise the losses of every step, the parameters, BatchNorm running statistics (updated
 * once per step) and step of recompute none. Alone it runs stand_alone; under mpirun (ctest
 * test_recompute_train_np2) data_parallel, the gradient reduction overlapped with the recomputing
 * backward. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/train.h"
#include "test_util.h"

static const char *k_gpt =
    "model: {name: gpt, n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 256, dropout: 0.1}\n"
    "data: {name: text, seq_len: 32, val_fraction: 0.1, transforms: []}\n"
    "train: {steps: 4, batch_size: 8, seed: 11, eval_every: -1}\n"
    "optimizer: {name: adamw, lr: 0.003}\n"
    "log: {progress: off}\n";

static const char *k_conv =
    "model: {name: convnet, channels: [4, 8]}\n"
    "data: {name: fashion_mnist, train_limit: 128, test_limit: 64}\n"
    "train: {steps: 4, batch_size: 32, seed: 7, eval_every: -1}\n"
    "optimizer: {name: momentum, lr: 0.05}\n"
    "log: {progress: off}\n";

#define STEPS 4
static int g_size = 1;

static int rec_loss(ts_trainer *t, const ts_step_info *s, void *u) {
  (void)t;
  if (s->step >= 1 && s->step <= STEPS) ((double *)u)[s->step - 1] = s->loss;
  return TS_OK;
}

/* Final parameters + states + step, then the losses of the STEPS steps (as floats' bits), of a run
 * with model.recompute = mode. */
static float *run(const char *yaml, const char *data, const char *dir, const char *mode, size_t *n_out) {
  char s1[300], s2[4200], s3[64];
  snprintf(s1, sizeof s1, "checkpoint.dir=%s", dir);
  snprintf(s2, sizeof s2, "data.path=%s", data);
  snprintf(s3, sizeof s3, "model.recompute=%s", mode);
  const char *sets[] = {s1, s2, s3, "checkpoint.save_last=false", "parallel.mode=data_parallel"};
  ts_config cfg;
  CHECK_OK(ts_config_load_string(yaml, "recompute-test.yaml", sets, g_size > 1 ? 5 : 4, &cfg));
  ts_trainer *t = NULL;
  CHECK_OK(ts_trainer_create(&cfg, &t));
  if (!t) return NULL;
  double loss[STEPS] = {0};
  ts_callback cb = {"losses", rec_loss, NULL, NULL, NULL, loss};
  CHECK_OK(ts_trainer_add_callback(t, &cb));
  CHECK_OK(ts_trainer_fit(t));
  ts_params *p = ts_trainer_params(t);
  size_t np = ts_params_numel(p), ns = ts_params_state_numel(p);
  float *out = malloc(sizeof(float) * (np + ns + 1) + sizeof loss);
  memcpy(out, ts_params_data(p), np * sizeof(float));
  if (ns) memcpy(out + np, ts_params_states(p), ns * sizeof(float));
  out[np + ns] = (float)ts_trainer_step(t);
  memcpy(out + np + ns + 1, loss, sizeof loss);
  *n_out = np + ns + 1 + STEPS * (sizeof(double) / sizeof(float));
  ts_trainer_free(t);
  return out;
}

static void compare(const char *name, const char *yaml, const char *data, const char *dir) {
  size_t n[3] = {0, 0, 0};
  static const char *const modes[3] = {"none", "full", "selective"};
  float *w[3];
  for (int k = 0; k < 3; k++) w[k] = run(yaml, data, dir, modes[k], &n[k]);
  size_t nl = 2 * STEPS; /* the losses (doubles) after the step */
  for (int k = 1; k < 3; k++)
    if (w[0] && w[k])
      CHECK_MSG(n[0] == n[k] && !memcmp(w[0], w[k], n[0] * sizeof(float)), "%s: recompute %s differs from none",
                name, modes[k]);
  if (w[0]) CHECK(w[0][n[0] - nl - 1] == STEPS);
  printf("%s (%s, %d rank%s): %zu values (parameters, states, step) and %d losses bitwise equal across "
         "none/full/selective\n", name, g_size > 1 ? "data_parallel" : "stand_alone", g_size, g_size > 1 ? "s" : "",
         n[0] - nl - 1, STEPS);
  for (int k = 0; k < 3; k++) free(w[k]);
}

int main(void) {
  int rank;
  ts_job_rank(&rank, &g_size);
  char dir[] = "/tmp/ts_recompute_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char txt[400];
  snprintf(txt, sizeof txt, "%s/input.txt", dir);
  FILE *f = fopen(txt, "wb");
  CHECK(f != NULL);
  if (f) {
    for (int i = 0; i < 400; i++) fprintf(f, "line %d: the quick brown fox jumps over the lazy dog %d.\n", i, i * 7);
    fclose(f);
  }
  compare("gpt", k_gpt, txt, dir);
  if (ts_test_have_fashion_mnist()) compare("convnet", k_conv, ts_test_fashion_mnist_dir(), dir);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
  return ts_test_finish_job("test_recompute_train");
}
