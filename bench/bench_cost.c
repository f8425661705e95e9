/* The cost model against measurement on this machine (issue 15): calibrates the machine first
 * (ts_calibrate over the job's ranks, as `tessera calibrate` does), then for the MLP, ResNet-20
 * and a small GPT under DP2, PP2 (and TP2 for GPT) trains a few steps and prints the measured
 * median step time next to the one ts_trainer_predict gives for the same config, and their
 * ratio; then auto_parallel (the plan searched for this calibrated machine) measured the same way,
 * against the fastest hand plan measured (issue 15: within 5%). With one rank (no mpirun) the
 * single-process configurations instead.
 *   mpirun -n 2 bench_cost [steps=12] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/comm.h"
#include "tessera/train.h"

#define MAXS 64
typedef struct {
  double ms[MAXS];
  int n;
} rec;
static int rec_cb(ts_trainer *t, const ts_step_info *s, void *u) {
  (void)t;
  rec *r = u;
  if (s->step > 2 && r->n < MAXS) r->ms[r->n++] = s->step_ms; /* the first steps plan and warm up */
  return TS_OK;
}
static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static char text[256], cluster_file[256], auto_par[512];
static const char *tp2 =
    "parallel:\n  mode: semi_auto_parallel\n  full_batch: true\n  strategies:\n"
    "    transformer.embedding: \"((1,1),(2,1))\"\n"
    "    transformer.h.*.attn.c_attn.dense*: \"((1,1,1),(2,1),(2,))\"\n"
    "    transformer.h.*.attn.attention: \"((1,2,1,1),(1,2,1,1),(1,2,1,1))\"\n"
    "    transformer.h.*.attn.c_proj.dense: \"((1,1,2),(1,2))\"\n"
    "    transformer.h.*.mlp.c_fc.dense: \"((1,1,1),(2,1))\"\n"
    "    transformer.h.*.mlp.c_proj.dense: \"((1,1,2),(1,2))\"\n"
    "    dense: \"((1,1,1),(2,1))\"\n"
    "    softmax_ce: \"((1,2),(1,))\"\n";

static void yaml(const char *model, const char *par, int steps, char *y, size_t cap) {
  const char *fm = "/usr/share/datasets/fashion-mnist";
  if (!strcmp(model, "gpt"))
    snprintf(y, cap,
             "model: {name: gpt, n_layer: 4, n_head: 4, n_embd: 128, block_size: 64, vocab_size: 256}\n"
             "data: {name: text, path: '%s', seq_len: 64, val_fraction: 0.1, transforms: []}\n"
             "train: {steps: %d, batch_size: 16, eval_every: -1}\noptimizer: {name: adamw, lr: 0.001}\n"
             "log: {progress: off}\n%s",
             text, steps, par);
  else
    snprintf(y, cap,
             "model: {name: %s}\n"
             "data: {name: fashion_mnist, path: '%s', train_limit: 2048, test_limit: 64, num_workers: 1,\n"
             "       transforms: [{name: to_float, scale: 0.00392156862745098}, hwc_to_chw]}\n"
             "train: {steps: %d, batch_size: %d, eval_every: -1}\noptimizer: {name: momentum, lr: 0.01}\n"
             "log: {progress: off}\n%s",
             !strcmp(model, "resnet20") ? "resnet, depth: 20" : "mlp", fm, steps, !strcmp(model, "mlp") ? 256 : 32,
             par);
}

int main(int argc, char **argv) {
  if (ts_comm_init(&argc, &argv)) return 1;
  ts_comm *w;
  ts_comm_world(&w);
  int rank = ts_comm_rank(w), N = ts_comm_size(w), steps = argc > 1 ? atoi(argv[1]) : 12;
  if (steps < 4 || steps > MAXS) steps = 12;
  snprintf(text, sizeof text, "/tmp/bench_cost_%d.txt", (int)getppid());
  if (rank == 0) {
    FILE *f = fopen(text, "w");
    uint32_t s = 11;
    for (int i = 0; f && i < 1 << 18; i++) {
      s = s * 1103515245u + 12345u;
      fputc("etaoin shrdlu cmfwyp\n"[(s >> 16) % 21], f);
    }
    if (f) fclose(f);
  }
  ts_comm_barrier(w);
  ts_cluster c;
  if (ts_calibrate(N > 1 ? w : NULL, &c)) {
    fprintf(stderr, "bench_cost: %s\n", ts_last_error());
    return 1;
  }
  if (rank == 0) ts_cluster_describe(&c, stdout);
  /* auto_parallel searches for this calibrated machine */
  snprintf(cluster_file, sizeof cluster_file, "/tmp/bench_cost_%d.yaml", (int)getppid());
  if (rank == 0 && ts_cluster_save(&c, cluster_file)) {
    fprintf(stderr, "bench_cost: %s\n", ts_last_error());
    return 1;
  }
  ts_comm_barrier(w);
  snprintf(auto_par, sizeof auto_par, "parallel: {mode: auto_parallel, cluster: '%s'}\n", cluster_file);
  struct {
    const char *model, *name, *par;
  } runs[] = {
      {"mlp", "DP2", "parallel: {mode: data_parallel}\n"},
      {"mlp", "PP2 M=4", "parallel: {mode: data_parallel, pipeline_stages: 2, micro_batches: 4}\n"},
      {"resnet20", "DP2", "parallel: {mode: data_parallel}\n"},
      {"resnet20", "PP2 M=4", "parallel: {mode: data_parallel, pipeline_stages: 2, micro_batches: 4}\n"},
      {"gpt", "DP2", "parallel: {mode: data_parallel}\n"},
      {"gpt", "TP2", tp2},
      {"gpt", "PP2 M=4", "parallel: {mode: data_parallel, pipeline_stages: 2, micro_batches: 4}\n"},
      {"mlp", "auto", auto_par},
      {"resnet20", "auto", auto_par},
      {"gpt", "auto", auto_par},
      {"mlp", "1 process", ""},
      {"resnet20", "1 process", ""},
      {"gpt", "1 process", ""},
  };
  int n = (int)(sizeof runs / sizeof runs[0]);
  double best[3] = {0, 0, 0}, autom[3] = {0, 0, 0};
  const char *bestn[3] = {"", "", ""}, *models[3] = {"mlp", "resnet20", "gpt"};
  if (rank == 0) printf("%-10s %-10s %12s %12s %8s\n", "model", "layout", "measured ms", "predicted ms", "pred/meas");
  for (int i = 0; i < n; i++) {
    int alone = !strcmp(runs[i].name, "1 process");
    if (alone != (N == 1)) continue;
    char y[4096];
    yaml(runs[i].model, runs[i].par, steps, y, sizeof y);
    ts_config cfg;
    ts_trainer *t = NULL;
    rec r;
    memset(&r, 0, sizeof r);
    int rc = ts_config_load_string(y, "bench_cost.yaml", NULL, 0, &cfg);
    ts_step_prediction p;
    memset(&p, 0, sizeof p);
    if (!rc) rc = ts_trainer_predict(&cfg, N, 0, &c, &p);
    if (!rc) rc = ts_trainer_create(&cfg, &t);
    ts_config_free(&cfg);
    ts_callback cb = {"rec", rec_cb, NULL, NULL, NULL, &r};
    if (!rc) rc = ts_trainer_add_callback(t, &cb);
    if (!rc) rc = ts_trainer_fit(t);
    ts_trainer_free(t);
    if (rc) {
      fprintf(stderr, "bench_cost: %s %s: %s\n", runs[i].model, runs[i].name, ts_last_error());
      return 1;
    }
    qsort(r.ms, (size_t)r.n, sizeof r.ms[0], cmp);
    double med = r.n ? r.ms[r.n / 2] : 0;
    if (rank == 0)
      printf("%-10s %-10s %12.2f %12.2f %8.2f\n", runs[i].model, runs[i].name, med, 1e3 * p.step_s,
             med > 0 ? 1e3 * p.step_s / med : 0);
    for (int k = 0; k < 3 && !alone; k++) {
      if (strcmp(runs[i].model, models[k])) continue;
      if (!strcmp(runs[i].name, "auto")) autom[k] = med;
      else if (best[k] == 0 || med < best[k]) best[k] = med, bestn[k] = runs[i].name;
    }
  }
  for (int k = 0; k < 3 && rank == 0 && N > 1; k++)
    if (autom[k] > 0 && best[k] > 0)
      printf("%-10s auto_parallel %.2f ms vs the fastest hand plan (%s) %.2f ms: %.3fx\n", models[k], autom[k],
             bestn[k], best[k], autom[k] / best[k]);
  ts_comm_barrier(w);
  if (rank == 0) {
    unlink(text);
    unlink(cluster_file);
  }
  ts_comm_finalize();
  return 0;
}
