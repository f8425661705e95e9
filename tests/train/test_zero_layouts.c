/* Optimizer-state sharding (parallel.optimizer_shard 1 and 2) beyond data_parallel, under mpirun
 * -n 2 and -n 4: semi_auto_parallel (the GPT cut Megatron-style, TP2 on 2 ranks and TP2 x DP2 on
 * 4: each slice's data-parallel repeat sharded, slices without a repeat updated by their rank;
 * the MLP cut data-parallel by the pass) and pipeline stages (PP2 on 2 ranks, PP2 x DP2 on 4:
 * sharded over each stage's replicas, the tied embedding summed over the pipeline), each against
 * the same layout unsharded: 12 steps with momentum, adamw and lamb, with accumulation and
 * clipping; every step's loss within 1e-5 relative and the final parameters within 1e-5 (both
 * runs' whole-model checkpoints loaded into one process); the optimizer floats a rank holds are
 * the sharded share of the unsharded run's; a checkpoint saved sharded after 6 steps resumes
 * unsharded and continues as the uninterrupted unsharded run does; under stage 2 no rank holds a
 * whole-model gradient buffer, and every run's grad_bytes is what tessera plan predicts. Stage 3
 * outside data_parallel is refused naming the key.
 * The runs read the first Fashion-MNIST samples, the ones train_limit and test_limit take, from
 * plain files rank 0 writes once (ts_test_fashion_mnist_shared), not the whole set each run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/comm.h"
#include "tessera/train.h"
#include "test_util.h"

#define STEPS 12
#define HALF 6

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

static char text_path[256];
static const char *g_fm; /* the Fashion-MNIST samples the runs take (ts_test_fashion_mnist_shared) */

/* GPT's Megatron cuts (examples/gpt_tp.yaml) on 4 devices as TP2 x DP2 (batch dims cut by 2 too;
 * on 2 devices: ts_test_gpt_tp2) */
static const char *tp2dp2 =
    "parallel.strategies={transformer.embedding: '((2,1),(2,1))', "
    "transformer.h.*.attn.c_attn.dense*: '((2,1,1),(2,1),(2,))', "
    "transformer.h.*.attn.attention: '((2,2,1,1),(2,2,1,1),(2,2,1,1))', "
    "transformer.h.*.attn.c_proj.dense: '((2,1,2),(1,2))', transformer.h.*.mlp.c_fc.dense: '((2,1,1),(2,1))', "
    "transformer.h.*.mlp.c_proj.dense: '((2,1,2),(1,2))', dense: '((2,1,1),(2,1))', softmax_ce: '((2,2),(2,))'}";

#define MAXSETS 12

static ts_config g_cfg; /* the config of the last make() */

static int make(const char *model, const char *opt, const char *const *sets, ts_trainer **t) {
  char y[2048];
  if (!strcmp(model, "gpt"))
    snprintf(y, sizeof y,
             "model: {name: gpt, n_layer: 2, n_head: 2, n_embd: 32, block_size: 16, vocab_size: 256, dropout: 0.0, "
             "tie_weights: true}\n"
             "data: {name: text, path: '%s', seq_len: 16, val_fraction: 0.1, transforms: []}\n"
             "train: {steps: %d, batch_size: 16, seed: 5, eval_every: -1}\n"
             "optimizer: {name: %s, lr: %s, weight_decay: 0.01, clip_grad_norm: 0.5}\n"
             "log: {progress: off}\n",
             text_path, STEPS, opt, !strcmp(opt, "momentum") ? "0.05" : "0.003");
  else
    snprintf(y, sizeof y,
             "model: {name: mlp, hidden: [64]}\n"
             "data: {name: fashion_mnist, path: '%s', train_limit: 1536, test_limit: 256, num_workers: 1,\n"
             "       transforms: [{name: to_float, scale: 0.00392156862745098}, hwc_to_chw]}\n"
             "train: {steps: %d, batch_size: 64, seed: 3, eval_every: -1}\n"
             "optimizer: {name: %s, lr: %s, weight_decay: 1.0e-4, clip_grad_norm: 0.5}\n"
             "log: {progress: off}\n",
             g_fm, STEPS, opt, !strcmp(opt, "adamw") ? "0.002" : "0.05");
  const char *s[MAXSETS];
  int ns = 0;
  for (int k = 0; sets && sets[k] && ns < MAXSETS; k++) s[ns++] = sets[k];
  ts_config cfg;
  int rc = ts_config_load_string(y, "zero-layouts.yaml", s, ns, &cfg);
  ts_config_free(&g_cfg);
  if (!rc) rc = ts_config_copy(&g_cfg, &cfg); /* freed by the next make() and at the end */
  if (!rc) rc = ts_trainer_create(&cfg, t);
  ts_config_free(&cfg);
  return rc;
}

/* Stage 2's gradient memory in this layout (the last train()): no whole-model gradient buffer;
 * grad_bytes measured and as tessera plan predicts it */
typedef struct {
  int whole_buffer;
  int64_t meas, pred;
} gmem;
static gmem g_mem;

/* Trains under sets (from checkpoint `from`; saving to `save`); *state: this rank's optimizer
 * floats. */
static int train(const char *model, const char *opt, const char *const *sets, rec *r, const char *from,
                 const char *save, int64_t *state) {
  ts_trainer *t = NULL;
  int rc = make(model, opt, sets, &t);
  CHECK_MSG(rc == TS_OK, "%s %s: %s", model, opt, ts_last_error());
  if (rc) return rc;
  ts_callback cb = {"rec", rec_cb, NULL, NULL, NULL, r};
  ts_trainer_add_callback(t, &cb);
  if (from) CHECK_OK(rc = ts_trainer_load(t, from, 1, 1));
  if (!rc) CHECK_OK(rc = ts_trainer_fit(t));
  if (!rc && save) CHECK_OK(rc = ts_trainer_save(t, save));
  if (state) *state = ts_trainer_optim_state_numel(t);
  ts_dist_memory_info m, pm;
  int rank = 0, size = 1;
  ts_job_rank(&rank, &size);
  memset(&g_mem, 0, sizeof g_mem);
  if (!rc && !ts_trainer_memory(t, &m) && !ts_trainer_plan_memory(&g_cfg, size, rank, NULL, NULL, &pm))
    g_mem = (gmem){ts_params_grads(ts_trainer_params(t)) != NULL, m.grad_bytes, pm.grad_bytes};
  ts_trainer_free(t);
  return rc;
}

/* The trainable parameters of a one-process trainer loaded from path (malloc'd). */
static float *params_of(const char *model, const char *opt, const char *path, size_t *n) {
  ts_trainer *t = NULL;
  if (make(model, opt, NULL, &t)) return NULL;
  CHECK_OK(ts_trainer_load(t, path, 1, 0));
  ts_params *p = ts_trainer_params(t);
  *n = ts_params_numel(p);
  float *out = malloc(sizeof(float) * (*n + 1));
  memcpy(out, ts_params_data(p), sizeof(float) * *n);
  ts_trainer_free(t);
  return out;
}

static double loss_diff(const char *what, const rec *a, const rec *b, int lo) {
  double worst = 0;
  for (int k = lo; k <= STEPS; k++) {
    CHECK_MSG(a->loss[k] > 0 && b->loss[k] > 0, "%s: no loss at step %d (%g, %g)", what, k, a->loss[k], b->loss[k]);
    double r = fabs(a->loss[k] - b->loss[k]) / fabs(a->loss[k]);
    worst = r > worst ? r : worst;
  }
  CHECK_MSG(worst <= 1e-5, "%s: loss rel diff %.3g", what, worst);
  return worst;
}

/* a further set of the sharded runs (parallel.optimizer_shard_group), or NULL */
static const char *g_shard_extra;

/* layout: NULL-terminated sets shared by both runs; stage: "parallel.optimizer_shard=1|2";
 * share: the most of the unsharded optimizer floats a rank may hold sharded */
static void compare(ts_comm *w, const char *what, const char *model, const char *opt, const char *const *layout,
                    const char *stage, double share) {
  int rank = ts_comm_rank(w);
  char pa[256], pb[256];
  snprintf(pa, sizeof pa, "/tmp/ts_test_zl_a_%d.safetensors", (int)getppid());
  snprintf(pb, sizeof pb, "/tmp/ts_test_zl_b_%d.safetensors", (int)getppid());
  const char *sa[MAXSETS + 2] = {0}, *sb[MAXSETS + 2] = {0};
  int n = 0;
  for (; layout[n] && n < MAXSETS - 2; n++) sa[n] = sb[n] = layout[n];
  sb[n] = stage;
  sb[n + 1] = "parallel.optimizer_shard_threshold_kb=0";
  sb[n + 2] = g_shard_extra;
  rec ra, rb;
  memset(&ra, 0, sizeof ra);
  memset(&rb, 0, sizeof rb);
  int64_t fa = 0, fb = 0;
  int rc = train(model, opt, sa, &ra, NULL, pa, &fa);
  gmem ga = g_mem;
  if (!rc) rc = train(model, opt, sb, &rb, NULL, pb, &fb);
  gmem gb = g_mem;
  /* stage 2: no whole-model gradient buffer on any rank (each group's buckets' staging slots, the
   * replicated remainder in the work buffer); measured = predicted */
  int st2 = !strcmp(stage, "parallel.optimizer_shard=2");
  if (!rc) {
    CHECK_MSG(ga.whole_buffer && gb.whole_buffer == !st2, "%s: whole-model gradient buffer %d (unsharded) / %d (%s)",
              what, ga.whole_buffer, gb.whole_buffer, stage);
    CHECK_MSG(gb.meas == gb.pred && gb.meas > 0, "%s: grad_bytes measured %lld, predicted %lld", what,
              (long long)gb.meas, (long long)gb.pred);
  }
  ts_comm_barrier(w); /* rank 0 has written the checkpoints */
  double mx = (double)fb / (double)(fa > 0 ? fa : 1);
  float ws = (float)mx;
  ts_comm_allreduce(w, &ws, &ws, 1, TS_F32, TS_REDUCE_MAX);
  double worst_share = ws;
  if (rank == 0 && !rc) {
    double worst = loss_diff(what, &ra, &rb, 1);
    size_t na = 0, nb = 0, wi = 0;
    float *a = params_of(model, opt, pa, &na), *b = params_of(model, opt, pb, &nb);
    CHECK(a && b && na == nb);
    double ratio = a && b ? ts_test_close(b, a, na, 1e-5, 1e-5, &wi) : 9, maxd = 0;
    CHECK_MSG(ratio <= 1, "%s: parameters differ at %zu: %.8g vs %.8g", what, wi, b ? b[wi] : 0, a ? a[wi] : 0);
    for (size_t i = 0; a && b && i < na; i++) maxd = fmax(maxd, fabs((double)a[i] - b[i]));
    CHECK_MSG(worst_share <= share, "%s: a rank holds %.4f of the unsharded optimizer state (at most %.4f)", what,
              worst_share, share);
    printf("%-50s loss rel %.1e, params abs %.1e; optimizer floats rank 0 %lld of %lld (%.3f; max over ranks %.3f); "
           "grad_bytes rank 0 %lld of %lld (%.3f)\n", what, worst, maxd, (long long)fb, (long long)fa, mx, worst_share,
           (long long)gb.meas, (long long)ga.meas, (double)gb.meas / (double)(ga.meas > 0 ? ga.meas : 1));
    free(a);
    free(b);
    unlink(pa);
    unlink(pb);
  }
  ts_comm_barrier(w);
}

/* Saved sharded after HALF steps, resumed unsharded: steps HALF+1.. as the unsharded run's. */
static void resume(ts_comm *w, const char *what, const char *model, const char *opt, const char *const *layout,
                   const char *stage) {
  int rank = ts_comm_rank(w);
  char path[256];
  snprintf(path, sizeof path, "/tmp/ts_test_zl_r_%d.safetensors", (int)getppid());
  const char *sa[MAXSETS + 2] = {0}, *sb[MAXSETS + 2] = {0};
  int n = 0;
  for (; layout[n] && n < MAXSETS - 2; n++) sa[n] = sb[n] = layout[n];
  sb[n] = stage;
  sb[n + 1] = "parallel.optimizer_shard_threshold_kb=0";
  rec ra, rb, rc2;
  memset(&ra, 0, sizeof ra);
  memset(&rb, 0, sizeof rb);
  memset(&rc2, 0, sizeof rc2);
  rb.stop_at = HALF;
  int rc = train(model, opt, sa, &ra, NULL, NULL, NULL);
  if (!rc) rc = train(model, opt, sb, &rb, NULL, path, NULL);
  ts_comm_barrier(w);
  if (!rc) rc = train(model, opt, sa, &rc2, path, NULL, NULL);
  if (rank == 0 && !rc) {
    double worst = loss_diff(what, &ra, &rc2, HALF + 1);
    printf("%-50s steps %d..%d loss rel %.1e\n", what, HALF + 1, STEPS, worst);
  }
  ts_comm_barrier(w);
  if (rank == 0) unlink(path);
}

static void refused(const char *const *sets, const char *key) {
  ts_trainer *t = NULL;
  int rc = make("gpt", "adamw", sets, &t);
  CHECK_MSG(rc == TS_ECONFIG && strstr(ts_last_error(), key), "%s: rc %d '%s'", key, rc, ts_last_error());
  ts_trainer_free(t);
}

int main(int argc, char **argv) {
  CHECK_OK(ts_comm_init(&argc, &argv));
  ts_comm *w;
  CHECK_OK(ts_comm_world(&w));
  int rank = ts_comm_rank(w), N = ts_comm_size(w);
  if (N != 2 && N != 4) {
    ts_test_skip("optimizer sharding over layouts runs under mpirun -n 2 or 4");
    ts_comm_free(w);
    return ts_test_finish_job("test_zero_layouts");
  }
  snprintf(text_path, sizeof text_path, "/tmp/ts_test_zl_%d.txt", (int)getppid());
  if (rank == 0) CHECK_MSG(ts_test_write_text(text_path, 12345, 24576) == 0, "cannot write %s", text_path); /* 24 KiB */
  ts_comm_barrier(w);
  g_fm = ts_test_fashion_mnist_shared(w, "ts_test_zl", 1536, 256);
  if (rank == 0) printf("optimizer_shard vs the same layout unsharded on %d ranks, %d steps\n", N, STEPS);
  const char *s1 = "parallel.optimizer_shard=1", *s2 = "parallel.optimizer_shard=2";
  /* semi_auto_parallel, GPT: TP2 (2 ranks: the sliced parameters have no repeat, the replicated
   * ones are sharded over 2) or TP2 x DP2 (4 ranks: every slice's repeat of 2 sharded) */
  const char *semi_gpt[] = {"parallel.mode=semi_auto_parallel", N == 2 ? "parallel.full_batch=true" : "parallel.full_batch=false",
                            N == 2 ? ts_test_gpt_tp2 : tp2dp2, "train.micro_batch_size=8", NULL};
  double gshare = N == 2 ? 0.98 : 0.51; /* TP2: only the replicated parameters (norms, biases) repeat */
  compare(w, N == 2 ? "semi TP2 gpt adamw accum 2 clip, stage 1" : "semi TP2xDP2 gpt adamw accum 2 clip, stage 1", "gpt",
          "adamw", semi_gpt, s1, gshare);
  compare(w, N == 2 ? "semi TP2 gpt adamw accum 2 clip, stage 2" : "semi TP2xDP2 gpt adamw accum 2 clip, stage 2", "gpt",
          "adamw", semi_gpt, s2, gshare);
  compare(w, N == 2 ? "semi TP2 gpt lamb accum 2 clip, stage 1" : "semi TP2xDP2 gpt lamb accum 2 clip, stage 1", "gpt",
          "lamb", semi_gpt, s1, gshare);
  resume(w, "semi gpt adamw: saved sharded, resumed unsharded", "gpt", "adamw", semi_gpt, s2);
  /* semi_auto_parallel, MLP cut data-parallel by the pass: every parameter's repeat is the job */
  int mnist = ts_test_have_fashion_mnist();
  const char *semi_mlp[] = {"parallel.mode=semi_auto_parallel", "parallel.strategies={}", "train.micro_batch_size=32",
                            NULL};
  if (mnist) {
    compare(w, "semi mlp momentum accum 2 clip, stage 1", "mlp", "momentum", semi_mlp, s1, 1.0 / N + 0.01);
    compare(w, "semi mlp momentum accum 2 clip, stage 2", "mlp", "momentum", semi_mlp, s2, 1.0 / N + 0.01);
  }
  /* pipeline stages: PP2 (2 ranks: one replica per stage) or PP2 x DP2 (4), 1f1b, 4 micro-batches;
   * the tied embedding table is sharded too (a bucket of its own on both stages holding it, its
   * parts summed over the pipeline): half of the state on each rank of PP2 x DP2 */
  const char *pipe_gpt[] = {"parallel.mode=data_parallel", "parallel.pipeline_stages=2", "parallel.pipeline_schedule=1f1b",
                            "parallel.micro_batches=4", NULL};
  double pshare = N == 2 ? 1.0 : 0.51;
  compare(w, N == 2 ? "pipeline PP2 gpt adamw M=4 clip, stage 1" : "pipeline PP2xDP2 gpt adamw M=4 clip, stage 1", "gpt",
          "adamw", pipe_gpt, s1, pshare);
  compare(w, N == 2 ? "pipeline PP2 gpt adamw M=4 clip, stage 2" : "pipeline PP2xDP2 gpt adamw M=4 clip, stage 2", "gpt",
          "adamw", pipe_gpt, s2, pshare);
  compare(w, N == 2 ? "pipeline PP2 gpt lamb M=4 clip, stage 1" : "pipeline PP2xDP2 gpt lamb M=4 clip, stage 1", "gpt",
          "lamb", pipe_gpt, s1, pshare);
  resume(w, "pipeline gpt adamw: saved sharded, resumed unsharded", "gpt", "adamw", pipe_gpt, s2);
  const char *pipe_mlp[] = {"parallel.mode=data_parallel", "parallel.pipeline_stages=2", "parallel.micro_batches=2", NULL};
  if (mnist && N == 4) compare(w, "pipeline PP2xDP2 mlp momentum M=2 clip, stage 2", "mlp", "momentum", pipe_mlp, s2, 0.51);
  /* PP2 x TP2 (4 ranks): stages of semi_auto_parallel ranks, sharded over each slice's repeat */
  const char *pipe_tp[] = {"parallel.mode=semi_auto_parallel", "parallel.full_batch=true", ts_test_gpt_tp2, "parallel.pipeline_stages=2",
                           "parallel.micro_batches=4", NULL};
  if (N == 4) compare(w, "pipeline PP2xTP2 gpt adamw M=4 clip, stage 1", "gpt", "adamw", pipe_tp, s1, 1.0);
  /* hybrid sharding (parallel.optimizer_shard_group 2) on 4 ranks, per group of ranks holding the
   * same slices: the MLP's group of 4 cut into two shard groups of 2; TP2 x DP2's norms and biases
   * (held by all 4) likewise, its slices' repeats of 2 are one shard group each */
  if (N == 4) {
    g_shard_extra = "parallel.optimizer_shard_group=2";
    if (mnist) {
      compare(w, "semi mlp momentum accum 2 clip, stage 1, groups of 2", "mlp", "momentum", semi_mlp, s1, 0.51);
      compare(w, "semi mlp momentum accum 2 clip, stage 2, groups of 2", "mlp", "momentum", semi_mlp, s2, 0.51);
    }
    compare(w, "semi TP2xDP2 gpt adamw accum 2 clip, stage 2, groups of 2", "gpt", "adamw", semi_gpt, s2, 0.52);
    compare(w, "semi TP2xDP2 gpt lamb accum 2 clip, stage 1, groups of 2", "gpt", "lamb", semi_gpt, s1, 0.52);
    g_shard_extra = NULL;
    /* 4 does not divide the 2 ranks holding each tensor-parallel slice */
    const char *semi_g4[] = {"parallel.mode=semi_auto_parallel", "parallel.full_batch=false", tp2dp2,
                             "parallel.optimizer_shard=1", "parallel.optimizer_shard_group=4", NULL};
    refused(semi_g4, "parallel.optimizer_shard_group");
  }
  /* refusals, before anything runs */
  const char *semi3[] = {"parallel.mode=semi_auto_parallel", "parallel.optimizer_shard=3", NULL};
  refused(semi3, "parallel.optimizer_shard");
  const char *pipe3[] = {"parallel.mode=data_parallel", "parallel.pipeline_stages=2", "parallel.optimizer_shard=3", NULL};
  refused(pipe3, "parallel.optimizer_shard");
  const char *inter2[] = {"parallel.mode=data_parallel", "parallel.pipeline_stages=2",
                          "parallel.pipeline_schedule=interleaved_1f1b", "parallel.virtual_stages=2",
                          "parallel.micro_batches=4", "parallel.optimizer_shard=2", NULL};
  refused(inter2, "parallel.optimizer_shard");
  ts_comm_barrier(w);
  if (rank == 0) unlink(text_path);
  ts_test_fashion_mnist_shared_done(w);
  ts_comm_free(w);
  ts_config_free(&g_cfg);
  return ts_test_finish_job("test_zero_layouts");
}
