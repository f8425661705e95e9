/* bench_loss_scale: what loss scaling (train.loss_scale, docs/mixed-precision.md) costs a GPT
 * training step at amp_level O0.
 *
 *   OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive build/bench_loss_scale [--steps S] [--warmup W]
 *                                                                     [--reps R] [--set key=value]...
 *
 * Five trainers side by side (the same model, seed and data): loss_scale none, fixed (1024) and
 * dynamic, with clipping off, and none and fixed with clipping at 1.0; they take one step each in
 * turn, the order rotating every step, so load from other processes on the machine hits all
 * alike. Per variant: the median step_ms after the warm-up and the median over the steps of its
 * ratio to the same step of `none` with the same clipping. Then the isolated cost of the one
 * thing scaling adds, the unscaling pass: ts_dist_clip_scaled on the trained model's gradients
 * with 1/scale = 1 (the norm only, what clipping-off computes anyway) against 1/1024 (the norm and
 * one multiply pass), R repeats each, interleaved; with clipping on both make one pass. A table,
 * then JSON lines. The model: GPT 6 layers, width 128, T 64, vocab 256, batch 16 on a generated
 * text, adamw, stand_alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "distribution/dist_impl.h"
#include "tessera/data.h"
#include "tessera/train.h"
#include "train/train_impl.h"

#define MAX_SETS 16
#define NV 5

static void die(const char *what) {
  fprintf(stderr, "bench_loss_scale: %s: %s\n", what, ts_last_error());
  exit(1);
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n < 1 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct {
  int warmup, n;
  double *ms, loss;
} rec;

static int on_step(ts_trainer *t, const ts_step_info *s, void *u) {
  (void)t;
  rec *r = u;
  if (s->step > r->warmup) r->ms[r->n++] = s->step_ms;
  r->loss = s->loss;
  return TS_OK;
}

static const char *k_gpt =
    "model: {name: gpt, n_layer: 6, n_head: 4, n_embd: 128, vocab_size: 256}\n"
    "data: {name: text, path: '%s', seq_len: 64, val_fraction: 0.01, transforms: []}\n"
    "train: {steps: %d, batch_size: 16, seed: 1, eval_every: -1}\n"
    "optimizer: {name: adamw, lr: 0.001}\n"
    "log: {progress: off}\n";

int main(int argc, char **argv) {
  int steps = 60, warmup = 10, reps = 200, nsets = 0;
  const char *sets[MAX_SETS + 2];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v || (strcmp(a, "--steps") && strcmp(a, "--warmup") && strcmp(a, "--reps") && strcmp(a, "--set"))) {
      fprintf(stderr, "usage: bench_loss_scale [--steps S] [--warmup W] [--reps R] [--set key=value]...\n");
      return 2;
    }
    i++;
    if (!strcmp(a, "--steps")) steps = atoi(v);
    else if (!strcmp(a, "--warmup")) warmup = atoi(v);
    else if (!strcmp(a, "--reps")) reps = atoi(v);
    else if (nsets < MAX_SETS) sets[nsets++] = v;
  }
  if (steps <= warmup || warmup < 0 || reps < 1) {
    fprintf(stderr, "bench_loss_scale: --steps > --warmup >= 0, --reps >= 1\n");
    return 2;
  }
  char text[128];
  snprintf(text, sizeof text, "/tmp/bench_loss_scale_%d.txt", (int)getpid());
  FILE *f = fopen(text, "wb");
  if (!f) die("writing the text");
  uint64_t x = 7;
  for (int i = 0; i < 400000; i++) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    fputc(i % 61 == 60 ? '\n' : "etaoin shrdlu cmfwyp vbgkqj xz"[(x >> 33) % 30], f);
  }
  fclose(f);
  char yaml[2048];
  snprintf(yaml, sizeof yaml, k_gpt, text, steps);
  static const char *const mode[NV] = {"train.loss_scale=none", "train.loss_scale=fixed", "train.loss_scale=dynamic",
                                       "train.loss_scale=none", "train.loss_scale=fixed"};
  static const char *const clip[NV] = {"optimizer.clip_grad_norm=0", "optimizer.clip_grad_norm=0",
                                       "optimizer.clip_grad_norm=0", "optimizer.clip_grad_norm=1.0",
                                       "optimizer.clip_grad_norm=1.0"};
  static const char *const name[NV] = {"none", "fixed 1024", "dynamic 2^16", "none, clip 1.0", "fixed 1024, clip 1.0"};
  static const int base[NV] = {0, 0, 0, 3, 3}; /* the variant each is compared with */
  ts_trainer *t[NV];
  rec r[NV];
  for (int v = 0; v < NV; v++) {
    sets[nsets] = mode[v];
    sets[nsets + 1] = clip[v];
    ts_config cfg;
    if (ts_config_load_string(yaml, "bench_loss_scale.yaml", sets, nsets + 2, &cfg)) die(name[v]);
    if (ts_trainer_create(&cfg, &t[v])) die(name[v]);
    ts_source_free(t[v]->test_src); /* no evaluation at each call's "last" step */
    t[v]->test_src = NULL;
    r[v] = (rec){warmup, 0, malloc(sizeof(double) * (size_t)steps + 1), 0};
    ts_callback cb = {"bench", on_step, NULL, NULL, NULL, &r[v]};
    ts_trainer_add_callback(t[v], &cb);
  }
  for (int k = 0; k < steps; k++)
    for (int j = 0; j < NV; j++) {
      int v = (j + k) % NV;
      t[v]->total_steps = k + 1; /* one more step */
      if (ts_trainer_fit(t[v])) die("training");
    }
  double ratio[NV], med[NV], *q = malloc(sizeof(double) * (size_t)steps + 1);
  for (int v = 0; v < NV; v++) {
    for (int i = 0; i < r[v].n; i++) q[i] = r[v].ms[i] / r[base[v]].ms[i];
    ratio[v] = median(q, r[v].n);
  }
  for (int v = 0; v < NV; v++) med[v] = median(r[v].ms, r[v].n); /* sorts */
  free(q);
  /* the unscaling pass alone: the norm (1/scale = 1, clipping off: no pass) vs norm + pass */
  ts_dist *d = t[1]->dist;
  size_t n = ts_params_numel(t[1]->run->params);
  float *g = ts_params_grads(t[1]->run->params);
  double *tn = malloc(sizeof(double) * (size_t)reps), *ts = malloc(sizeof(double) * (size_t)reps);
  for (int i = 0; i < reps; i++) {
    float norm;
    int ov;
    for (int w = 0; w < 2; w++) {
      double t0 = ts_time_now();
      if (ts_dist_clip_scaled(d, g, 0, w ? 1.0f / 1024 : 1.0f, &norm, &ov)) die("clipping");
      (w ? ts : tn)[i] = 1e3 * (ts_time_now() - t0);
      if (w) ts_scale_f32(g, n, 1024.0f); /* back (exact): the same values every repeat */
    }
  }
  double mn = median(tn, reps), msc = median(ts, reps);
  printf("bench_loss_scale: gpt (%lld parameters), stand_alone, %d threads; %d steps each (%d warm-up), the %d "
         "variants one step each in turn\n",
         (long long)ts_trainer_num_params(t[0]), ts_threads_get(), steps, warmup, NV);
  printf("%-22s %9s %12s %10s\n", "loss_scale", "step_ms", "x unscaled", "loss");
  for (int v = 0; v < NV; v++) printf("%-22s %9.2f %12.4f %10.6f\n", name[v], med[v], ratio[v], r[v].loss);
  printf("the unscaling pass alone over %zu gradients: norm only %.3f ms, norm + unscale %.3f ms: +%.3f ms "
         "(%.2f%% of the unscaled step)\n",
         n, mn, msc, msc - mn, 100 * (msc - mn) / med[0]);
  for (int v = 0; v < NV; v++)
    printf("{\"name\":\"loss_scale_step\",\"variant\":\"%s\",\"step_ms\":%.3f,\"x_unscaled\":%.4f}\n", name[v], med[v],
           ratio[v]);
  printf("{\"name\":\"loss_scale_unscale_pass\",\"numel\":%zu,\"norm_ms\":%.4f,\"norm_unscale_ms\":%.4f}\n", n, mn, msc);
  free(tn);
  free(ts);
  for (int v = 0; v < NV; v++) {
    ts_trainer_free(t[v]);
    free(r[v].ms);
  }
  unlink(text);
  return 0;
}
