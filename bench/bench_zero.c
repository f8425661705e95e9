/* bench_zero: step time of data_parallel with parallel.optimizer_shard off, 1, 2 and 3 (ZeRO
 * stages; docs/memory.md), on the job's ranks, and the bytes each rank sends per step.
 *
 *   OMP_NUM_THREADS=1 mpirun -n 2 build/bench_zero [--model mlp|gpt] [--steps S] [--warmup W]
 *                                                  [--set key=value]...
 *
 * Interleaved step by step: the four trainers (the same model, seed, data and steps under each
 * stage) live side by side and take one step each in turn, the order rotating every step, so load
 * from other processes on the machine hits all alike. Per stage: the median step_ms of the steps
 * after the warm-up, the median over those steps of the ratio to plain data parallel's same step,
 * the interquartile range, the bytes one rank sends per optimizer step through the gradient
 * reduction and the parameter gathers (counted as ring algorithms send them: (N-1)/N of an
 * all-gather's or a reduce-scatter's elements, 2(N-1)/N of an all-reduce's; stage 3 from its list
 * of gathers), the parameter bytes a rank holds (ts__zero_param_bytes), its gradient bytes
 * (ts_trainer_memory's grad_bytes: stages 2 and 3 hold no whole-model buffer), the time per step waiting
 * for the gradient reduction (wait_ms) and, stage 3, for parameter gathers (gather_ms: not hidden
 * behind compute) and the final loss. Models: mlp (bench/zero_mlp.yaml: 784-2048-2048-1024-10 on
 * Fashion-MNIST, adamw, batch 128) and gpt (6 layers, width 128, T 64, vocab 256 on a generated
 * text, adamw, batch 16, bucket 0.5 MiB: 26 gathered units); no evaluation. A table on rank 0's
 * stdout, then one JSON line per stage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "distribution/dist_impl.h"
#include "tessera/comm.h"
#include "tessera/data.h"
#include "tessera/train.h"
#include "train/train_impl.h"

#define MAX_SETS 16
#define NSTAGE 4

static void die(const char *what) {
  fprintf(stderr, "bench_zero: %s: %s\n", what, ts_last_error());
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
  double *ms, loss, wait, gwait;
} rec;

static int on_step(ts_trainer *t, const ts_step_info *s, void *u) {
  rec *r = u;
  double g = 1e3 * ts__zero_take_gather_wait(t->dist); /* stage 3's exposed gathers */
  if (s->step > r->warmup) {
    r->ms[r->n++] = s->step_ms;
    r->wait += s->comm_wait_ms;
    r->gwait += g;
  }
  r->loss = s->loss;
  return TS_OK;
}

static const char *k_mlp =
    "model: {name: mlp, hidden: [2048, 2048, 1024]}\n"
    "data: {name: fashion_mnist, path: '%s', train_limit: 8192, test_limit: 256, num_workers: 1,\n"
    "       transforms: [{name: to_float, scale: 0.00392156862745098}, hwc_to_chw]}\n"
    "train: {steps: %d, batch_size: 128, seed: 1, eval_every: -1}\n"
    "optimizer: {name: adamw, lr: 0.001}\n"
    "parallel: {mode: data_parallel}\n"
    "log: {progress: off}\n";

static const char *k_gpt =
    "model: {name: gpt, n_layer: 6, n_head: 4, n_embd: 128, vocab_size: 256}\n"
    "data: {name: text, path: '%s', seq_len: 64, val_fraction: 0.01, transforms: []}\n"
    "train: {steps: %d, batch_size: 16, seed: 1, eval_every: -1}\n"
    "optimizer: {name: adamw, lr: 0.001}\n"
    "parallel: {mode: data_parallel, bucket_size_mb: 0.5}\n"
    "log: {progress: off}\n";

int main(int argc, char **argv) {
  const char *model = "mlp";
  int steps = 60, warmup = 10, nsets = 0;
  const char *sets[MAX_SETS + 1];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v || (strcmp(a, "--model") && strcmp(a, "--steps") && strcmp(a, "--warmup") && strcmp(a, "--set"))) {
      fprintf(stderr, "usage: bench_zero [--model mlp|gpt] [--steps S] [--warmup W] [--set key=value]...\n");
      return 2;
    }
    i++;
    if (!strcmp(a, "--model")) model = v;
    else if (!strcmp(a, "--steps")) steps = atoi(v);
    else if (!strcmp(a, "--warmup")) warmup = atoi(v);
    else if (nsets < MAX_SETS) sets[nsets++] = v;
  }
  if (steps <= warmup || warmup < 0) {
    fprintf(stderr, "bench_zero: --steps > --warmup >= 0\n");
    return 2;
  }
  int gpt = !strcmp(model, "gpt");
  if (!gpt && strcmp(model, "mlp")) {
    fprintf(stderr, "bench_zero: --model mlp or gpt\n");
    return 2;
  }
  if (ts_comm_init(&argc, &argv)) die("MPI");
  ts_comm *w;
  if (ts_comm_world(&w)) die("MPI");
  int rank = ts_comm_rank(w), N = ts_comm_size(w);
  char text[128] = "";
  if (gpt) { /* a generated text (same on every run): rank 0 writes it */
    snprintf(text, sizeof text, "/tmp/bench_zero_%d.txt", (int)getppid());
    if (rank == 0) {
      FILE *f = fopen(text, "wb");
      if (!f) die("writing the text");
      uint64_t x = 7;
      for (int i = 0; i < 400000; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        fputc(i % 61 == 60 ? '\n' : "etaoin shrdlu cmfwyp vbgkqj xz"[(x >> 33) % 30], f);
      }
      fclose(f);
    }
    if (ts_comm_barrier(w)) die("MPI");
  }
  char yaml[2048];
  snprintf(yaml, sizeof yaml, gpt ? k_gpt : k_mlp, gpt ? text : TS_FASHION_MNIST_DIR, steps);
  static const char *const stage_set[NSTAGE] = {"parallel.optimizer_shard=off", "parallel.optimizer_shard=1",
                                                "parallel.optimizer_shard=2", "parallel.optimizer_shard=3"};
  /* the four trainers side by side, one step each in turn (the order rotating every step) */
  ts_trainer *t[NSTAGE];
  rec r[NSTAGE];
  int total = steps;
  for (int s = 0; s < NSTAGE; s++) {
    sets[nsets] = stage_set[s];
    ts_config cfg;
    if (ts_config_load_string(yaml, "bench_zero.yaml", sets, nsets + 1, &cfg)) die(stage_set[s]);
    cfg.train.steps = total;
    if (ts_trainer_create(&cfg, &t[s])) die(stage_set[s]);
    /* no evaluation: each call of ts_trainer_fit below ends at its "last" step, which evaluates */
    ts_source_free(t[s]->test_src);
    t[s]->test_src = NULL;
    r[s] = (rec){warmup, 0, malloc(sizeof(double) * (size_t)total + 1), 0, 0, 0};
    ts_callback cb = {"bench", on_step, NULL, NULL, NULL, &r[s]};
    ts_trainer_add_callback(t[s], &cb);
  }
  for (int k = 0; k < total; k++)
    for (int j = 0; j < NSTAGE; j++) {
      int s = (j + k) % NSTAGE;
      t[s]->total_steps = k + 1; /* one more step */
      if (ts_trainer_fit(t[s])) die("training");
    }
  int64_t nparams = ts_trainer_num_params(t[0]), accum = t[0]->accum;
  double med[NSTAGE], ratio[NSTAGE], comm[NSTAGE], pbytes[NSTAGE], gbytes[NSTAGE];
  double *q = malloc(sizeof(double) * (size_t)total + 1);
  for (int s = 0; s < NSTAGE; s++) {
    comm[s] = ts__zero_comm_bytes(t[s]->dist);
    pbytes[s] = (double)ts__zero_param_bytes(t[s]->dist);
    ts_dist_memory_info m;
    if (ts_trainer_memory(t[s], &m)) die("memory figures");
    gbytes[s] = (double)m.grad_bytes; /* stages 2, 3: staging slots + the rank's parts, no whole buffer */
    for (int i = 0; i < r[s].n; i++) q[i] = r[s].ms[i] / r[0].ms[i]; /* the same step of plain */
    ratio[s] = median(q, r[s].n);
  }
  free(q);
  if (rank == 0) {
    printf("bench_zero: %s (%lld parameters) on %d ranks, accumulation %lld; %d steps each (%d warm-up), the four "
           "stages one step each in turn\n", model, (long long)nparams, N, (long long)accum, total, warmup);
    printf("%-6s %9s %9s %9s %10s %8s %12s %10s %9s %9s %10s\n", "stage", "step_ms", "x plain", "IQR ms", "comm MiB",
           "x plain", "params MiB", "grads MiB", "wait_ms", "gather_ms", "loss");
    for (int s = 0; s < NSTAGE; s++) {
      int n = r[s].n;
      med[s] = median(r[s].ms, n); /* sorts */
      double iqr = n >= 4 ? r[s].ms[3 * n / 4] - r[s].ms[n / 4] : 0;
      printf("%-6s %9.1f %9.3f %9.1f %10.2f %8.3f %12.2f %10.2f %9.1f %9.1f %10.6f\n", s ? stage_set[s] + 25 : "plain",
             med[s], ratio[s], iqr, comm[s] / 1048576.0, comm[s] / comm[0], pbytes[s] / 1048576.0,
             gbytes[s] / 1048576.0, r[s].wait / n, r[s].gwait / n, r[s].loss);
    }
    for (int s = 0; s < NSTAGE; s++)
      printf("{\"name\":\"zero_step\",\"model\":\"%s\",\"ranks\":%d,\"stage\":%d,\"step_ms\":%.3f,\"x_plain\":%.4f,"
             "\"comm_bytes\":%.0f,\"comm_x_plain\":%.4f,\"param_bytes\":%.0f,\"grad_bytes\":%.0f,\"loss\":%.6f}\n",
             model, N, s, med[s], ratio[s], comm[s], comm[s] / comm[0], pbytes[s], gbytes[s], r[s].loss);
  }
  for (int s = 0; s < NSTAGE; s++) {
    ts_trainer_free(t[s]);
    free(r[s].ms);
  }
  ts_comm_barrier(w);
  if (gpt && rank == 0) unlink(text);
  ts_comm_free(w);
  ts_comm_finalize();
  return 0;
}
