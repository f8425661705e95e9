/* Step-time overhead of recomputation on the GPT of examples/gpt_text.yaml (4 layers, 128 wide,
 * 4 heads, T 128, vocab 256, dropout 0.1): the same forward+backward planned with model.recompute
 * none, full and selective, run interleaved (none, full, selective, none, ...) on one batch;
 * prints each mode's median step time, its ratio to none (also the median of each round's ratio
 * to that round's none run), and the planned arena.
 *   bench_recompute [batch=32] [rounds=10] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tessera/tessera.h"
#include "tessera/zoo.h"

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct {
  ts_graph *g;
  ts_params *p;
  ts_plan *plan;
} run;

static void build(run *r, int B, int mode, int32_t *ids, int32_t *tg) {
  enum { T = 128 };
  ts_graph_create(&r->g);
  ts_params_create(&r->p);
  ts_nn nn = {r->g, r->p};
  ts_val x = ts_input(r->g, "x", TS_I32, ts_shape2(B, T)), y = ts_input(r->g, "y", TS_I32, ts_shape2(B, T)), loss;
  ts_gpt_config c = {.vocab_size = 256, .block_size = T, .n_layer = 4, .n_head = 4, .n_embd = 128,
                     .dropout = 0.1f, .dropout_seed = 1337};
  ts_val keep[256];
  int nk = 0;
  if (ts_zoo_gpt(&nn, &c, x, y, NULL, &loss) || ts_graph_backward(r->g, loss, 1.0f) ||
      ts_graph_recompute(r->g, NULL, 0, mode) || ts_params_alloc(r->p, 1) ||
      ts_params_attach_grads(r->p, r->g, keep, 255, &nk)) {
    fprintf(stderr, "bench_recompute: %s\n", ts_last_error());
    exit(1);
  }
  keep[nk++] = loss;
  if (ts_plan_create(r->g, keep, nk, &r->plan) || ts_params_bind(r->p, r->g, r->plan) ||
      ts_plan_bind(r->plan, x, ids) || ts_plan_bind(r->plan, y, tg)) {
    fprintf(stderr, "bench_recompute: %s\n", ts_last_error());
    exit(1);
  }
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv) {
  int B = argc > 1 ? atoi(argv[1]) : 32, rounds = argc > 2 ? atoi(argv[2]) : 10;
  if (B < 1 || rounds < 1) return 2;
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)B * 128), *tg = malloc(sizeof(int32_t) * (size_t)B * 128);
  for (int i = 0; i < B * 128; i++) {
    ids[i] = (i * 7 + 3) % 256;
    tg[i] = (i * 13 + 1) % 256;
  }
  static const char *const names[3] = {"none", "full", "selective"};
  run r[3];
  double *t[3];
  for (int m = 0; m < 3; m++) {
    build(&r[m], B, m, ids, tg);
    t[m] = malloc(sizeof(double) * (size_t)rounds);
    ts_plan_run(r[m].plan, 0); /* warm-up: primitives created, pages touched */
  }
  for (int k = 0; k < rounds; k++)
    for (int m = 0; m < 3; m++) {
      double t0 = now();
      if (ts_plan_run(r[m].plan, (uint64_t)k + 1)) {
        fprintf(stderr, "bench_recompute: %s\n", ts_last_error());
        return 1;
      }
      t[m][k] = now() - t0;
    }
  /* per-round ratio to the adjacent none run (load from other processes hits both alike) */
  double pr[3];
  for (int m = 0; m < 3; m++) {
    double *q = malloc(sizeof(double) * (size_t)rounds);
    for (int k = 0; k < rounds; k++) q[k] = t[m][k] / t[0][k];
    qsort(q, (size_t)rounds, sizeof(double), cmp);
    pr[m] = q[rounds / 2];
    free(q);
  }
  double med[3];
  for (int m = 0; m < 3; m++) {
    qsort(t[m], (size_t)rounds, sizeof(double), cmp);
    med[m] = t[m][rounds / 2];
  }
  printf("gpt_text GPT, batch %d, %d interleaved rounds (median step: forward + backward)\n", B, rounds);
  for (int m = 0; m < 3; m++)
    printf("  recompute %-9s %8.2f ms  x%.3f (median of per-round ratios x%.3f)  arena %7.2f MiB (%.1f%% of none)\n", names[m], 1e3 * med[m],
           med[m] / med[0], pr[m], ts_plan_peak_bytes(r[m].plan) / 1048576.0,
           100.0 * (double)ts_plan_peak_bytes(r[m].plan) / (double)ts_plan_peak_bytes(r[0].plan));
  for (int m = 0; m < 3; m++) {
    ts_plan_free(r[m].plan);
    ts_params_free(r[m].p);
    ts_graph_free(r[m].g);
    free(t[m]);
  }
  free(ids);
  free(tg);
  return 0;
}
