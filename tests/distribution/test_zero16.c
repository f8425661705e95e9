/* Optimizer sharding in mixed precision (parallel.optimizer_shard_weights, src/distribution/
 * dist_zero16.c) under data_parallel on this job's ranks (mpirun -n 2 and 4; one process too):
 * - a GPT (2 layers, 64 wide, T 32) trained 4 steps under amp O2 with stages 1 and 2, its working
 *   weights and gradients 16-bit (auto), against the same run with f32 ones (f32: per-use casts of
 *   f32 parameters): the losses within 2e-3 relative (the gradients are rounded to 16 bits before
 *   the reduction instead of after), and the store holds neither parameters nor gradients;
 * - the model-state bytes per rank against DeepSpeed's mixed-precision formulas (Adam: stage 1
 *   2 + 2 + 12/N, stage 2 2 + 14/N bytes a sharded parameter; a replicated one 20: its 16-bit
 *   weight and gradient, f32 master, widened gradient and two moments) within 5%, plus stage 2's
 *   staging slots (two of a bucket, 16-bit), and tessera plan's prediction equal to the measurement;
 * - f16 with dynamic loss scaling (the scale's inverse and the clipping applied as the update
 *   widens the gradients), the ring reduce-scatter, overlap off (no prefetched all-gathers);
 * - bitwise repeatable; a checkpoint saved after 2 steps resumes and continues bitwise as the
 *   uninterrupted run (the master weights are the checkpoint's parameters, the 16-bit copy is
 *   refilled from them), and resumes under f32 weights and under stage 2 alike;
 * - low where it does not apply (O0, stage 3, accumulation, LAMB) is refused naming the key;
 * - under amp with f32 weights, stage 2 (the gradients in two staging slots reused within
 *   backward) trains bitwise as stage 1: a weight's bf16 gradient matmul fused with its cast
 *   writes the f32 gradient into the slot before the cast node runs, so the slot is claimed from
 *   the matmul on (before, the previous bucket's reduce-scatter read a slot being overwritten). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/comm.h"
#include "tessera/train.h"
#include "test_util.h"

#define STEPS 4

static char g_txt[128];

typedef struct {
  double loss[STEPS + 1];
  int stop_at;
} rec;

static int rec_cb(ts_trainer *t, const ts_step_info *s, void *u) {
  rec *r = u;
  if (s->step >= 1 && s->step <= STEPS) r->loss[s->step] = s->loss;
  if (r->stop_at && s->step == r->stop_at) ts_trainer_request_stop(t);
  return TS_OK;
}

typedef struct {
  rec r;
  ts_dist_memory_info meas, pred;
  int64_t n, rep; /* trainable elements; replicated ones (under the threshold) */
  int store_params, store_grads;
} run;

static const char *yaml(char *y, size_t cap, const char *opt) {
  snprintf(y, cap,
           "model: {name: gpt, n_layer: 2, n_head: 2, n_embd: 64, vocab_size: 256, dropout: 0.0}\n"
           "data: {name: text, path: '%s', seq_len: 32, val_fraction: 0.1, transforms: [], num_workers: 1}\n"
           "train: {steps: %d, batch_size: 8, seed: 5, eval_every: -1, amp_level: O2}\n"
           "optimizer: {name: %s, lr: 0.003, clip_grad_norm: 1.0}\n"
           "parallel: {mode: data_parallel, bucket_size_mb: 0.02}\n"
           "log: {progress: off}\n",
           g_txt, STEPS, opt);
  return y;
}

/* sets: up to 6 "key=value" (NULL entries skipped) */
static int make(const char *opt, const char *const *sets6, ts_config *cfg, ts_trainer **t) {
  char y[1024];
  const char *sets[6];
  int ns = 0;
  for (int k = 0; k < 6; k++)
    if (sets6[k]) sets[ns++] = sets6[k];
  int rc = ts_config_load_string(yaml(y, sizeof y, opt), "zero16.yaml", sets, ns, cfg);
  return rc ? rc : ts_trainer_create(cfg, t);
}

/* Trains (from checkpoint `from`, saving to `save` after r->stop_at steps, each when not NULL). */
static int train(const char *const *sets, run *c, const char *from, const char *save) {
  ts_config cfg;
  ts_trainer *t = NULL;
  int rc = make("adamw", sets, &cfg, &t);
  CHECK_MSG(!rc, "%s", ts_last_error());
  if (rc) return 0;
  int N = 1, rank = 0;
  ts_job_rank(&rank, &N);
  CHECK_OK(ts_trainer_plan_memory(&cfg, N, rank, NULL, NULL, &c->pred));
  ts_callback cb = {"rec", rec_cb, NULL, NULL, NULL, &c->r};
  ts_trainer_add_callback(t, &cb);
  if (from) CHECK_OK(ts_trainer_load(t, from, 1, 1));
  CHECK_OK(ts_trainer_fit(t));
  if (save) CHECK_OK(ts_trainer_save(t, save));
  CHECK_OK(ts_trainer_memory(t, &c->meas));
  ts_params *p = ts_trainer_params(t);
  c->store_params = ts_params_data(p) != NULL;
  c->store_grads = ts_params_grads(p) != NULL;
  c->n = c->rep = 0;
  for (int i = 0; i < ts_params_count(p); i++) {
    if (ts_params_flags(p, i) & TS_PARAM_STATE) continue;
    ts_shape s = ts_params_shape(p, i);
    c->n += ts_shape_numel(&s);
    if ((double)ts_shape_numel(&s) * 4 < 64 * 1024) c->rep += ts_shape_numel(&s); /* the default threshold */
  }
  ts_trainer_free(t);
  return 1;
}

static double worst_loss(const rec *a, const rec *b, int lo) {
  double w = 0;
  for (int s = lo; s <= STEPS; s++) {
    CHECK_MSG(a->loss[s] > 0 && b->loss[s] > 0, "no loss at step %d (%g, %g)", s, a->loss[s], b->loss[s]);
    w = fmax(w, fabs(a->loss[s] - b->loss[s]) / fabs(a->loss[s]));
  }
  return w;
}

/* 16-bit weights under `sets` against the same run with f32 ones; the model states against the
 * formula; predicted = measured. */
static void against_f32(int N, int rank, const char *what, int stage, const char *s1, const char *s2) {
  const char *st = stage == 1 ? "parallel.optimizer_shard=1" : "parallel.optimizer_shard=2";
  const char *lo[6] = {st, s1, s2, NULL, NULL, NULL}, *hi[6] = {st, s1, s2, "parallel.optimizer_shard_weights=f32",
                                                                NULL, NULL};
  run a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  if (!train(lo, &a, NULL, NULL) || !train(hi, &b, NULL, NULL)) return;
  double w = worst_loss(&b.r, &a.r, 1);
  CHECK_MSG(w <= 2e-3, "%s: 16-bit weights' losses vs f32 weights' rel %.3g", what, w);
  CHECK_MSG(!a.store_params && !a.store_grads, "%s: the store holds %s", what, a.store_params ? "parameters" : "gradients");
  CHECK_MSG(b.store_params, "%s: f32 weights without the store's parameters", what);
  CHECK_MSG(a.meas.param_bytes == a.pred.param_bytes && a.meas.grad_bytes == a.pred.grad_bytes &&
                a.meas.optimizer_state_bytes == a.pred.optimizer_state_bytes &&
                a.meas.activation_bytes == a.pred.activation_bytes && a.meas.total_bytes == a.pred.total_bytes,
            "%s: measured params %lld grads %lld optimizer %lld total %lld; tessera plan predicts %lld %lld %lld %lld", what,
            (long long)a.meas.param_bytes, (long long)a.meas.grad_bytes, (long long)a.meas.optimizer_state_bytes,
            (long long)a.meas.total_bytes, (long long)a.pred.param_bytes, (long long)a.pred.grad_bytes,
            (long long)a.pred.optimizer_state_bytes, (long long)a.pred.total_bytes);
  /* DeepSpeed's formula over the sharded elements S, 20 bytes a replicated one; stage 2's two
   * 16-bit staging slots of a bucket (0.02 MiB of f32 elements, or the largest parameter) on top */
  double S = (double)(a.n - a.rep), R = (double)a.rep;
  double per = stage == 1 ? 2 + 2 + 12.0 / N : 2 + 14.0 / N, formula = per * S + 20 * R;
  double big = 256 * 64; /* the largest parameter (the embedding) */
  double staging = stage == 2 ? 2 * 2 * fmax(0.02 * 1024 * 1024 / 4, big) : 0;
  double states = (double)(a.meas.param_bytes + a.meas.grad_bytes + a.meas.optimizer_state_bytes);
  CHECK_MSG(states >= formula * 0.95 && states <= formula * 1.05 + staging,
            "%s on %d ranks: model states %.0f B, the formula %.0f B (+ staging up to %.0f)", what, N, states, formula,
            staging);
  double f32states = (double)(b.meas.param_bytes + b.meas.grad_bytes + b.meas.optimizer_state_bytes);
  if (rank == 0)
    printf("%-40s model states %.0f B = %.3f x formula %.0f (+ staging bound %.0f); f32 weights %.0f B; loss rel %.1e\n",
           what, states, states / formula, formula, staging, f32states, w);
}

/* The same run twice: bitwise; resumed from a checkpoint after 2 steps: bitwise the uninterrupted
 * run; resumed under f32 weights and under stage 2: close. */
static void repeat_and_resume(ts_comm *w) {
  int rank = ts_comm_rank(w);
  char path[256];
  snprintf(path, sizeof path, "/tmp/ts_test_zero16_%d.safetensors", (int)getppid());
  const char *s1[6] = {"parallel.optimizer_shard=1", NULL, NULL, NULL, NULL, NULL};
  run a, b, half, c;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  memset(&half, 0, sizeof half);
  half.r.stop_at = 2;
  if (!train(s1, &a, NULL, NULL) || !train(s1, &b, NULL, NULL) || !train(s1, &half, NULL, path)) return;
  for (int s = 1; s <= STEPS; s++)
    CHECK_MSG(a.r.loss[s] == b.r.loss[s], "stage 1, 16-bit weights: step %d loss %.9g then %.9g (not repeatable)", s,
              a.r.loss[s], b.r.loss[s]);
  ts_comm_barrier(w); /* the checkpoint is written */
  memset(&c, 0, sizeof c);
  if (!train(s1, &c, path, NULL)) return;
  for (int s = 3; s <= STEPS; s++)
    CHECK_MSG(a.r.loss[s] == c.r.loss[s], "resumed at step 2: step %d loss %.9g, uninterrupted %.9g", s, c.r.loss[s],
              a.r.loss[s]);
  const char *f32[6] = {"parallel.optimizer_shard=1", "parallel.optimizer_shard_weights=f32", NULL, NULL, NULL, NULL};
  const char *s2[6] = {"parallel.optimizer_shard=2", NULL, NULL, NULL, NULL, NULL};
  run d, e;
  memset(&d, 0, sizeof d);
  memset(&e, 0, sizeof e);
  if (!train(f32, &d, path, NULL) || !train(s2, &e, path, NULL)) return;
  double wd = worst_loss(&a.r, &d.r, 3), we = worst_loss(&a.r, &e.r, 3);
  CHECK_MSG(wd <= 2e-3, "resumed under f32 weights: loss rel %.3g", wd);
  CHECK_MSG(we == 0, "resumed under stage 2: loss rel %.3g (the same reduction in another place)", we);
  if (rank == 0)
    printf("repeatable; resumed at step 2: steps 3..%d bitwise; under f32 weights loss rel %.1e, under stage 2 %.1e\n",
           STEPS, wd, we);
  ts_comm_barrier(w);
  if (rank == 0) unlink(path);
}

static void fused_slots(int rank) {
  const char *s1[6] = {"parallel.optimizer_shard=1", "parallel.optimizer_shard_weights=f32", NULL, NULL, NULL, NULL};
  const char *s2[6] = {"parallel.optimizer_shard=2", "parallel.optimizer_shard_weights=f32", NULL, NULL, NULL, NULL};
  run a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  if (!train(s1, &a, NULL, NULL) || !train(s2, &b, NULL, NULL)) return;
  for (int s = 1; s <= STEPS; s++)
    CHECK_MSG(a.r.loss[s] == b.r.loss[s], "amp O2, f32 weights: stage 2's loss at step %d %.9g, stage 1's %.9g", s,
              b.r.loss[s], a.r.loss[s]);
  if (rank == 0) printf("amp O2 with f32 weights: stage 2 bitwise stage 1 over %d steps\n", STEPS);
}

static void refused(const char *opt, const char *a, const char *b) {
  const char *sets[6] = {"parallel.optimizer_shard_weights=low", a, b, NULL, NULL, NULL};
  ts_config cfg;
  ts_trainer *t = NULL;
  int rc = make(opt, sets, &cfg, &t);
  CHECK_MSG(rc == TS_ECONFIG && strstr(ts_last_error(), "parallel.optimizer_shard_weights"), "%s %s %s: rc %d '%s'", opt,
            a, b ? b : "", rc, ts_last_error());
  ts_trainer_free(t);
}

int main(int argc, char **argv) {
  CHECK_OK(ts_comm_init(&argc, &argv));
  ts_comm *w;
  CHECK_OK(ts_comm_world(&w));
  int rank = ts_comm_rank(w), N = ts_comm_size(w);
  snprintf(g_txt, sizeof g_txt, "/tmp/ts_test_zero16_%d.txt", (int)getppid());
  if (rank == 0) CHECK(ts_test_write_text(g_txt, 16, 24000) == 0);
  ts_comm_barrier(w);
  if (rank == 0) printf("optimizer_shard in mixed precision on %d rank(s)\n", N);
  against_f32(N, rank, "stage 1, bf16", 1, NULL, NULL);
  against_f32(N, rank, "stage 2, bf16", 2, NULL, NULL);
  against_f32(N, rank, "stage 1, f16, dynamic loss scale", 1, "train.amp_dtype=f16", "train.loss_scale=dynamic");
  against_f32(N, rank, "stage 2, f16, dynamic loss scale", 2, "train.amp_dtype=f16", "train.loss_scale=dynamic");
  against_f32(N, rank, "stage 1, bf16, ring reduce-scatter", 1, "parallel.reduce_scatter=ring", NULL);
  against_f32(N, rank, "stage 2, bf16, overlap off", 2, "parallel.overlap=false", NULL);
  repeat_and_resume(w);
  fused_slots(rank);
  refused("adamw", "parallel.optimizer_shard=1", "train.amp_level=O0");
  refused("adamw", "parallel.optimizer_shard=3", NULL);
  refused("adamw", "parallel.optimizer_shard=1", "train.micro_batch_size=4");
  refused("lamb", "parallel.optimizer_shard=2", NULL);
  ts_comm_barrier(w);
  if (rank == 0) unlink(g_txt);
  ts_comm_free(w);
  return ts_test_finish_job("test_zero16");
}
