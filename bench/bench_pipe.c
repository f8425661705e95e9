/* Pipeline parallel on 2 ranks: GPT with 8 layers (128 wide, 4 heads, T 64, vocab 256, batch 32)
 * trained by the trainer as PP2 (1f1b, 8 micro-batches), DP2 and TP2 (semi_auto_parallel, the
 * Megatron cuts of examples/gpt_tp.yaml on 2 devices), in interleaved rounds; prints each
 * layout's median step time and its ratio to DP2. Then the pipeline's measured bubble (this
 * rank's idle time in the schedule over its wall time, averaged over the ranks, median over the
 * steps) against the formula (P-1)/(M+P-1) for gpipe and 1f1b with M = 2, 4, 8, 16.
 *   mpirun -n 2 bench_pipe [rounds=3] [steps=8] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/comm.h"
#include "parallel/schedule.h"
#include "tessera/train.h"

#define MAXS 64
typedef struct {
  double ms[MAXS], bub[MAXS];
  int n;
} rec;
static int rec_cb(ts_trainer *t, const ts_step_info *s, void *u) {
  (void)t;
  rec *r = u;
  if (s->step > 1 && r->n < MAXS) { /* the first step plans and warms up */
    r->ms[r->n] = s->step_ms;
    r->bub[r->n++] = s->bubble_fraction;
  }
  return TS_OK;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static double median(double *v, int n) {
  if (n < 1) return 0;
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static char text[256];

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

/* Runs `steps` steps of the layout; *ms median step time, *bub median bubble fraction. */
static int run(const char *parallel, const char *const *sets, int nsets, int steps, double *ms, double *bub) {
  char y[4096];
  snprintf(y, sizeof y,
           "model: {name: gpt, n_layer: 8, n_head: 4, n_embd: 128, block_size: 64, vocab_size: 256, dropout: 0.0}\n"
           "data: {name: text, path: '%s', seq_len: 64, val_fraction: 0.1, transforms: []}\n"
           "train: {steps: %d, batch_size: 32, seed: 1, eval_every: -1}\n"
           "optimizer: {name: adamw, lr: 0.001}\n"
           "log: {progress: off}\n%s",
           text, steps, parallel);
  ts_config cfg;
  ts_trainer *t = NULL;
  rec r;
  memset(&r, 0, sizeof r);
  int rc = ts_config_load_string(y, "bench_pipe.yaml", sets, nsets, &cfg);
  if (!rc) rc = ts_trainer_create(&cfg, &t);
  ts_config_free(&cfg);
  ts_callback cb = {"rec", rec_cb, NULL, NULL, NULL, &r};
  if (!rc) rc = ts_trainer_add_callback(t, &cb);
  if (!rc) rc = ts_trainer_fit(t);
  ts_trainer_free(t);
  if (rc) {
    fprintf(stderr, "bench_pipe: %s\n", ts_last_error());
    return rc;
  }
  *ms = median(r.ms, r.n);
  *bub = median(r.bub, r.n);
  return TS_OK;
}

int main(int argc, char **argv) {
  if (ts_comm_init(&argc, &argv)) return 1;
  ts_comm *w;
  ts_comm_world(&w);
  int rank = ts_comm_rank(w), N = ts_comm_size(w);
  int rounds = argc > 1 ? atoi(argv[1]) : 3, steps = argc > 2 ? atoi(argv[2]) : 8;
  if (N != 2 || rounds < 1 || steps < 3) {
    if (rank == 0) fprintf(stderr, "usage: mpirun -n 2 bench_pipe [rounds>=1] [steps>=3]\n");
    ts_comm_finalize();
    return 2;
  }
  snprintf(text, sizeof text, "/tmp/bench_pipe_%d.txt", (int)getppid());
  if (rank == 0) {
    FILE *f = fopen(text, "w");
    uint32_t s = 7;
    for (int i = 0; f && i < 1 << 18; i++) {
      s = s * 1103515245u + 12345u;
      fputc("etaoin shrdlu cmfwyp\n"[(s >> 16) % 21], f);
    }
    if (f) fclose(f);
  }
  ts_comm_barrier(w);
  const char *names[3] = {"DP2", "TP2", "PP2 1f1b M=8"};
  const char *par[3] = {"parallel: {mode: data_parallel}\n", tp2,
                        "parallel: {mode: data_parallel, pipeline_stages: 2, micro_batches: 8}\n"};
  double t[3][16], b;
  int R = rounds > 16 ? 16 : rounds;
  for (int r = 0; r < R; r++)
    for (int k = 0; k < 3; k++)
      if (run(par[k], NULL, 0, steps, &t[k][r], &b)) return 1;
  if (rank == 0) {
    printf("GPT 8 layers x 128, T 64, batch 32, adamw, 2 ranks; median step time over %d interleaved rounds of "
           "%d steps\n", R, steps - 1);
    double dp = 0;
    for (int k = 0; k < 3; k++) {
      double m = median(t[k], R);
      if (k == 0) dp = m;
      printf("  %-14s %8.1f ms   x%.2f of DP2\n", names[k], m, m / dp);
    }
    printf("bubble: this rank's idle time in the schedule / its wall time, mean over the 2 ranks, median over steps\n");
    printf("  %-6s %4s %10s %10s %10s\n", "sched", "M", "measured", "formula", "step ms");
  }
  const char *sk[2] = {"gpipe", "1f1b"};
  for (int s = 0; s < 2; s++)
    for (int M = 2; M <= 16; M *= 2) {
      char a[64], c[64];
      snprintf(a, sizeof a, "parallel.micro_batches=%d", M);
      snprintf(c, sizeof c, "parallel.pipeline_schedule=%s", sk[s]);
      const char *sets[2] = {a, c};
      double ms, bub;
      if (run("parallel: {mode: data_parallel, pipeline_stages: 2}\n", sets, 2, steps, &ms, &bub)) return 1;
      float fb = (float)bub, mean = 0;
      ts_comm_allreduce(w, &fb, &mean, 1, TS_F32, TS_REDUCE_MEAN);
      if (rank == 0)
        printf("  %-6s %4d %9.1f%% %9.1f%% %10.1f\n", sk[s], M, 100 * mean,
               100 * ts_schedule_bubble_formula(s ? TS_SCHED_1F1B : TS_SCHED_GPIPE, 2, M, 1), ms);
    }
  ts_comm_barrier(w);
  if (rank == 0) unlink(text);
  ts_comm_finalize();
  return 0;
}
