/* The resharding matrix of sliced checkpoints (docs/checkpoints.md), under mpirun -n 4: a GPT
 * (2 layers, 32 wide, tied embeddings, adamw, clipping) trained in seven layouts -- one process,
 * DP4, TP4 (Megatron cuts as examples/gpt_tp.yaml), TP2 x DP2, DP4 with optimizer_shard 1 (every
 * parameter sharded, small buckets: parts cross parameters) and 3 (small parameters replicated),
 * PP2 x DP2 (the tied table on both stages), and beyond the list TP2 x DP2 with
 * optimizer_shard 1 (ZeRO parts that are ranges of tensor-parallel slices) and PP2 x TP2 (stages
 * of semi_auto ranks) -- each saving at step 3 a sliced checkpoint and, from
 * the same state, a whole one; then every layout resumes from every layout's sliced checkpoint.
 *  - each save: `ts_ckpt_verify` passes and the merge of the sliced checkpoint is the whole file
 *    byte for byte;
 *  - each load is exact: the loading layout's whole checkpoint, gathered right after the load,
 *    holds the saving layout's tensors bit for bit (parameters, both Adam moments, the step);
 *  - continuing 3 steps: the losses of steps 4-6 equal the uninterrupted one-process run's within
 *    1e-6 relative, and are bitwise those of the saving layout's own uninterrupted run when the
 *    loading layout is the saving one;
 *  - the one-process whole checkpoint loads into every layout exactly (the whole-file path).
 * The sanitized run (TESSERA_TEST_SANITIZED=1, scripts/test.sh --asan; 130 s there for the whole
 * matrix) resumes each layout from itself, from one process and from the next layout of the list,
 * and one process from each: every save and every load path, 32 of the 81 pairs; the Release run
 * makes the whole matrix. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/checkpoint.h"
#include "tessera/comm.h"
#include "tessera/train.h"
#include "test_util.h"

#define STEPS 6
#define SAVE_AT 3
#define NL 9
#define TOL 1e-6

static const char *names[NL] = {"one", "DP4", "TP4", "TP2xDP2", "ZeRO-1", "ZeRO-3", "PP2xDP2", "TPxDP+Z1", "PP2xTP2"};
#define TP2DP2                                                                                                   \
  "parallel.strategies={transformer.embedding: '((2,1),(2,1))', "                                                \
  "transformer.h.*.attn.c_attn.dense*: '((2,1,1),(2,1),(2,))', "                                                \
  "transformer.h.*.attn.attention: '((2,2,1,1),(2,2,1,1),(2,2,1,1))', "                                          \
  "transformer.h.*.attn.c_proj.dense: '((2,1,2),(1,2))', transformer.h.*.mlp.c_fc.dense: '((2,1,1),(2,1))', "    \
  "transformer.h.*.mlp.c_proj.dense: '((2,1,2),(1,2))', dense: '((2,1,1),(2,1))', softmax_ce: '((2,2),(2,))'}"
#define TP2                                                                                                      \
  "parallel.strategies={transformer.embedding: '((1,1),(2,1))', "                                                \
  "transformer.h.*.attn.c_attn.dense*: '((1,1,1),(2,1),(2,))', "                                                \
  "transformer.h.*.attn.attention: '((1,2,1,1),(1,2,1,1),(1,2,1,1))', "                                          \
  "transformer.h.*.attn.c_proj.dense: '((1,1,2),(1,2))', transformer.h.*.mlp.c_fc.dense: '((1,1,1),(2,1))', "    \
  "transformer.h.*.mlp.c_proj.dense: '((1,1,2),(1,2))', dense: '((1,1,1),(2,1))', softmax_ce: '((1,2),(1,))'}"
static const char *const sets[NL][8] = {
    {NULL},
    {"parallel.mode=data_parallel", NULL},
    {"parallel.mode=semi_auto_parallel", "parallel.full_batch=true",
     "parallel.strategies={transformer.embedding: '((1,1),(4,1))', "
     "transformer.h.*.attn.c_attn.dense*: '((1,1,1),(4,1),(4,))', "
     "transformer.h.*.attn.attention: '((1,4,1,1),(1,4,1,1),(1,4,1,1))', "
     "transformer.h.*.attn.c_proj.dense: '((1,1,4),(1,4))', transformer.h.*.mlp.c_fc.dense: '((1,1,1),(4,1))', "
     "transformer.h.*.mlp.c_proj.dense: '((1,1,4),(1,4))', dense: '((1,1,1),(4,1))', softmax_ce: '((1,4),(1,))'}",
     NULL},
    {"parallel.mode=semi_auto_parallel", "parallel.full_batch=false", TP2DP2, NULL},
    {"parallel.mode=data_parallel", "parallel.optimizer_shard=1", "parallel.optimizer_shard_threshold_kb=0",
     "parallel.bucket_size_mb=0.02", NULL},
    {"parallel.mode=data_parallel", "parallel.optimizer_shard=3", "parallel.optimizer_shard_threshold_kb=1",
     "parallel.bucket_size_mb=0.02", NULL},
    {"parallel.mode=data_parallel", "parallel.pipeline_stages=2", "parallel.micro_batches=2", NULL},
    {"parallel.mode=semi_auto_parallel", "parallel.full_batch=false", TP2DP2, "parallel.optimizer_shard=1",
     "parallel.optimizer_shard_threshold_kb=0", "parallel.bucket_size_mb=0.01", NULL},
    {"parallel.mode=semi_auto_parallel", "parallel.full_batch=true", TP2, "parallel.pipeline_stages=2",
     "parallel.micro_batches=2", NULL},
};

static char text_path[512], dir[200];

typedef struct {
  double loss[STEPS + 1];
  int save_at;
  const char *sliced, *whole; /* where to save at save_at */
  int rc;
} rec;

static int on_step(ts_trainer *t, const ts_step_info *s, void *u) {
  rec *r = u;
  if (s->step >= 1 && s->step <= STEPS) r->loss[s->step] = s->loss;
  if (r->save_at && s->step == r->save_at) {
    int rc = ts_trainer_save_sliced(t, r->sliced);
    if (!rc) rc = ts_trainer_save(t, r->whole);
    if (rc) r->rc = rc;
    return rc;
  }
  return TS_OK;
}

static int make(int layout, const char *resume, ts_trainer **t) {
  char y[1024];
  snprintf(y, sizeof y,
           "model: {name: gpt, n_layer: 2, n_head: 4, n_embd: 32, block_size: 16, vocab_size: 256, dropout: 0.0, "
           "tie_weights: true}\n"
           "data: {name: text, path: '%s', seq_len: 16, val_fraction: 0.1, transforms: []}\n"
           "train: {steps: %d, batch_size: 8, seed: 5, eval_every: -1}\n"
           "optimizer: {name: adamw, lr: 0.002, weight_decay: 0.01, clip_grad_norm: 1.0}\n"
           "log: {progress: off}\n",
           text_path, STEPS);
  const char *s[10];
  int n = 0;
  for (int k = 0; sets[layout][k]; k++) s[n++] = sets[layout][k];
  char res[400];
  if (resume) {
    snprintf(res, sizeof res, "checkpoint.resume=%s", resume);
    s[n++] = res;
  }
  ts_config cfg;
  int rc = ts_config_load_string(y, "ckpt-reshard.yaml", s, n, &cfg);
  if (!rc) rc = ts_trainer_create(&cfg, t);
  ts_config_free(&cfg);
  CHECK_MSG(rc == TS_OK, "%s%s%s: %s", names[layout], resume ? " from " : "", resume ? resume : "", ts_last_error());
  return rc;
}

/* 1 if every tensor of file a is in b with the same bytes (the metadata aside). */
static int same_tensors(const char *a, const char *b, char *why, size_t cap) {
  ts_st_file *fa = NULL, *fb = NULL;
  int ok = !ts_st_open(a, &fa) && !ts_st_open(b, &fb) && ts_st_count(fa) == ts_st_count(fb);
  snprintf(why, cap, "%s", ok ? "" : ts_last_error());
  for (int i = 0; ok && i < ts_st_count(fa); i++) {
    ts_tensor x, z;
    ok = !ts_st_get(fa, i, &x) && !ts_st_find(fb, ts_st_name(fa, i), &z) && x.dtype == z.dtype &&
         ts_shape_equal(&x.shape, &z.shape) && !memcmp(x.data, z.data, ts_tensor_nbytes(&x));
    if (!ok) snprintf(why, cap, "tensor %s differs", ts_st_name(fa, i));
  }
  ts_st_close(fa);
  ts_st_close(fb);
  return ok;
}

static int same_bytes(const char *a, const char *b) {
  FILE *x = fopen(a, "rb"), *y = fopen(b, "rb");
  int same = x && y;
  while (same) {
    int c = fgetc(x), d = fgetc(y);
    same = c == d;
    if (c == EOF) break;
  }
  if (x) fclose(x);
  if (y) fclose(y);
  return same;
}

int main(int argc, char **argv) {
  CHECK_OK(ts_comm_init(&argc, &argv));
  ts_comm *w;
  CHECK_OK(ts_comm_world(&w));
  int rank = ts_comm_rank(w), N = ts_comm_size(w);
  if (N != 4) {
    ts_test_skip("the resharding matrix runs under mpirun -n 4");
    ts_comm_free(w);
    return ts_test_finish_job("test_ckpt_reshard");
  }
  snprintf(dir, sizeof dir, "/tmp/ts_test_ckr_%d", (int)getppid());
  snprintf(text_path, sizeof text_path, "%s/input.txt", dir);
  if (rank == 0) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    CHECK(system(cmd) == 0);
    CHECK_MSG(ts_test_write_text(text_path, 777, 16384) == 0, "cannot write %s", text_path);
  }
  ts_comm_barrier(w);
  /* every layout: 6 steps, saving at step 3 (sliced and whole, from the same state) */
  static char sliced[NL][300], whole[NL][300];
  rec own[NL];
  memset(own, 0, sizeof own);
  for (int a = 0; a < NL; a++) {
    snprintf(sliced[a], sizeof sliced[a], "%s/s%d", dir, a);
    snprintf(whole[a], sizeof whole[a], "%s/w%d.safetensors", dir, a);
    if (a == 0 && rank != 0) continue; /* one process: rank 0 alone */
    ts_trainer *t = NULL;
    own[a] = (rec){.save_at = SAVE_AT, .sliced = sliced[a], .whole = whole[a]};
    if (!make(a, NULL, &t)) {
      ts_callback cb = {"rec", on_step, NULL, NULL, NULL, &own[a]};
      ts_trainer_add_callback(t, &cb);
      CHECK_MSG(ts_trainer_fit(t) == TS_OK, "%s: %s", names[a], ts_last_error());
    }
    ts_trainer_free(t);
  }
  ts_comm_barrier(w);
  if (rank == 0)
    for (int a = 0; a < NL; a++) {
      char sum[1200], m[400];
      CHECK_MSG(ts_ckpt_verify(sliced[a], sum, sizeof sum) == TS_OK, "%s: %s", names[a], ts_last_error());
      snprintf(m, sizeof m, "%s/merged%d.safetensors", dir, a);
      CHECK_MSG(ts_ckpt_merge(sliced[a], m, NULL) == TS_OK, "%s: %s", names[a], ts_last_error());
      CHECK_MSG(same_bytes(m, whole[a]), "%s: the merged sliced checkpoint is not the whole one byte for byte", names[a]);
    }
  /* the matrix: layout b resumes from layout a's sliced checkpoint */
  double worst[NL][NL];
  int exact[NL][NL], some = getenv("TESSERA_TEST_SANITIZED") && *getenv("TESSERA_TEST_SANITIZED");
  for (int a = 0; a < NL; a++)
    for (int b = 0; b < NL; b++) {
      worst[a][b] = -1;
      exact[a][b] = 0;
      if (some && a != b && a != 0 && b != 0 && b != (a + 1) % NL) continue; /* the head of this file */
      if (b == 0 && rank != 0) {
        ts_comm_barrier(w);
        continue;
      }
      ts_trainer *t = NULL;
      rec r;
      memset(&r, 0, sizeof r);
      char g[300], why[300];
      snprintf(g, sizeof g, "%s/g_%d_%d.safetensors", dir, a, b);
      if (!make(b, sliced[a], &t)) {
        CHECK(ts_trainer_step(t) == SAVE_AT);
        /* exact: what b holds after the load, gathered whole, is a's state */
        CHECK_OK(ts_trainer_save(t, g));
        ts_callback cb = {"rec", on_step, NULL, NULL, NULL, &r};
        ts_trainer_add_callback(t, &cb);
        CHECK_MSG(ts_trainer_fit(t) == TS_OK, "%s from %s: %s", names[b], names[a], ts_last_error());
      }
      ts_trainer_free(t);
      if (rank == 0) {
        exact[a][b] = same_tensors(whole[a], g, why, sizeof why);
        CHECK_MSG(exact[a][b], "%s loaded %s's checkpoint: %s", names[b], names[a], why);
        double m = 0;
        for (int k = SAVE_AT + 1; k <= STEPS; k++) {
          double ref = own[0].loss[k], d = fabs(r.loss[k] - ref) / fabs(ref);
          m = r.loss[k] > 0 && d == d ? fmax(m, d) : INFINITY;
        }
        worst[a][b] = m;
        CHECK_MSG(m <= TOL, "%s resumed from %s: losses of steps %d-%d differ from one process's by %.3g relative",
                  names[b], names[a], SAVE_AT + 1, STEPS, m);
        if (a == b)
          for (int k = SAVE_AT + 1; k <= STEPS; k++)
            CHECK_MSG(r.loss[k] == own[a].loss[k], "%s resumed from itself: step %d loss %.9g, uninterrupted %.9g",
                      names[a], k, r.loss[k], own[a].loss[k]);
      }
      ts_comm_barrier(w);
    }
  /* the one-process whole file into every layout */
  for (int b = 1; b < NL; b++) {
    ts_trainer *t = NULL;
    char g[300], why[300];
    snprintf(g, sizeof g, "%s/gw_%d.safetensors", dir, b);
    if (!make(b, whole[0], &t)) CHECK_OK(ts_trainer_save(t, g));
    ts_trainer_free(t);
    ts_comm_barrier(w);
    if (rank == 0) CHECK_MSG(same_tensors(whole[0], g, why, sizeof why), "%s loaded the whole file: %s", names[b], why);
  }
  if (rank == 0) {
    printf("losses of steps %d-%d resumed from step %d, max relative difference to one process (rows: saved by, "
           "columns: loaded by; * = not exact, - not run)\n%-9s", SAVE_AT + 1, STEPS, SAVE_AT, "");
    for (int b = 0; b < NL; b++) printf(" %9s", names[b]);
    printf("\n");
    for (int a = 0; a < NL; a++) {
      printf("%-9s", names[a]);
      for (int b = 0; b < NL; b++)
        if (worst[a][b] < 0) printf(" %9s", "-");
        else printf(" %8.1e%s", worst[a][b], exact[a][b] ? " " : "*");
      printf("\n");
    }
    printf("own runs vs one process, steps 1-%d:", STEPS);
    for (int a = 1; a < NL; a++) {
      double m = 0;
      for (int k = 1; k <= STEPS; k++) m = fmax(m, fabs(own[a].loss[k] - own[0].loss[k]) / own[0].loss[k]);
      printf(" %s %.1e", names[a], m);
    }
    printf("\n");
    if (!getenv("TS_KEEP")) {
      char cmd[600];
      snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
      if (system(cmd)) {
      }
    }
  }
  ts_comm_barrier(w);
  ts_comm_free(w);
  return ts_test_finish_job("test_ckpt_reshard");
}
