/* Pipeline parallel (parallel.pipeline_stages) against one process, under mpirun -n 2 and 4:
 * the zoo's GPT (tied embeddings: the table on the first and the last stage) and ResNet-20 cut
 * into stages, with gpipe, 1f1b and interleaved_1f1b schedules, 1 to 8 micro-batches, data
 * parallel replicas of each stage (PP2 x DP2 on 4 ranks), gradient clipping by the global norm
 * over the stages: every step's loss within 1e-5 relative of the single process with the same
 * global batch cut into the same micro-batches, the final parameters within 1e-5 (the pipeline's
 * whole-model checkpoint loaded into a one-process trainer), the evaluation the same, and the
 * same configuration twice bitwise identical; LAMB (whose trust ratio needs whole-parameter norms)
 * under semi_auto_parallel alone and with stages. Bad stage assignments are refused before
 * anything runs, naming the key. The stage cut a searched plan carries (ts_autoplan.stage_rules)
 * given as parallel.stages trains the same losses and evaluation bitwise as the pipeline's own
 * balanced cut (GPT: 2 and 4 stages, and interleaved). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/autoparallel.h"
#include "tessera/cluster.h"
#include "tessera/comm.h"
#include "tessera/train.h"
#include "test_util.h"

#define STEPS 6

typedef struct {
  double loss[STEPS + 1];
} rec;
static int rec_cb(ts_trainer *t, const ts_step_info *s, void *u) {
  (void)t;
  rec *r = u;
  if (s->step >= 1 && s->step <= STEPS) r->loss[s->step] = s->loss;
  return TS_OK;
}

static char text_path[256];

/* The test's config of `model` with the overrides sets[0..nsets-1]. */
static int load(const char *model, const char *const *sets, int nsets, ts_config *cfg) {
  char y[2048];
  if (!strcmp(model, "gpt"))
    snprintf(y, sizeof y,
             "model: {name: gpt, n_layer: 4, n_head: 2, n_embd: 32, block_size: 16, vocab_size: 256, dropout: 0.0, "
             "tie_weights: true}\n"
             "data: {name: text, path: '%s', seq_len: 16, val_fraction: 0.1, transforms: []}\n"
             "train: {steps: %d, batch_size: 16, seed: 5, eval_every: -1}\n"
             "optimizer: {name: adamw, lr: 0.003, weight_decay: 0.01, clip_grad_norm: 0.5}\n"
             "log: {progress: off}\n",
             text_path, STEPS);
  else
    snprintf(y, sizeof y,
             "model: {name: resnet, depth: 20}\n"
             "data: {name: fashion_mnist, path: '%s', train_limit: 512, test_limit: 128, num_workers: 1,\n"
             "       transforms: [{name: center_crop, size: 16}, {name: to_float, scale: 0.00392156862745098},\n"
             "                    hwc_to_chw]}\n" /* 16 x 16: a third of 28 x 28's work, the same layers */
             "train: {steps: %d, batch_size: 16, seed: 3, eval_every: -1}\n"
             "optimizer: {name: momentum, lr: 0.05, momentum: 0.9}\n"
             "log: {progress: off}\n",
             ts_test_fashion_mnist_dir(), STEPS);
  return ts_config_load_string(y, "pipe-test.yaml", sets, nsets, cfg);
}

static int make(const char *model, const char *const *sets, int nsets, ts_trainer **t) {
  ts_config cfg;
  int rc = load(model, sets, nsets, &cfg);
  if (!rc) rc = ts_trainer_create(&cfg, t);
  ts_config_free(&cfg);
  return rc;
}

/* The stage cut of the plan dp x P stages (M micro-batches, V pieces per rank) for `model`, as
 * the search's plan carries it (ts_autoplan.stage_rules), written as a parallel.stages override
 * into buf. */
static int plan_rules(const char *model, int dp, int P, int M, int V, char *buf, size_t cap) {
  ts_config cfg;
  const char *sets[] = {"parallel.mode=data_parallel"};
  int rc = load(model, sets, 1, &cfg);
  ts_cluster cl;
  if (!rc) rc = ts_cluster_builtin("dgx-a100-80g", &cl); /* priced anywhere; the cut is the model's */
  ts_autoplan p = {.dp = dp, .tp = 1, .pp = P, .micro_batches = M, .virtual_stages = V};
  if (!rc) rc = ts_trainer_autoplan_build(&cfg, &cl, &p);
  ts_config_free(&cfg);
  size_t n = (size_t)snprintf(buf, cap, "parallel.stages={");
  for (int i = 0; !rc && i < p.n_stage_rules && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s'%s': %s", i ? ", " : "", p.stage_rules[i].op, p.stage_rules[i].text);
  if (!rc && n < cap) snprintf(buf + n, cap - n, "}");
  if (!rc && (p.n_stage_rules < P * V || n >= cap))
    rc = ts_error_set(TS_EINVAL, "%d stage rules for %d pieces (%zu bytes)", p.n_stage_rules, P * V, n);
  ts_autoplan_free(&p);
  return rc;
}

/* Trains; saves the whole model to `save` if not NULL; the evaluation at the end into *ev. */
static int train(const char *model, const char *const *sets, int nsets, rec *r, const char *save, ts_eval_info *ev) {
  ts_trainer *t = NULL;
  int rc = make(model, sets, nsets, &t);
  CHECK_MSG(rc == TS_OK, "%s: %s", model, ts_last_error());
  if (rc) return rc;
  ts_callback cb = {"rec", rec_cb, NULL, NULL, NULL, r};
  ts_trainer_add_callback(t, &cb);
  CHECK_OK(rc = ts_trainer_fit(t));
  if (!rc) CHECK_OK(rc = ts_trainer_evaluate(t, ev));
  if (!rc && save) CHECK_OK(rc = ts_trainer_save(t, save));
  ts_trainer_free(t);
  return rc;
}

/* The parameters of a one-process trainer of `model` loaded from `path` (NULL: as trained by
 * ref_sets), into a malloc'd copy. */
static float *params_of(const char *model, const char *const *sets, int nsets, const char *path, size_t *n,
                        int trainable_only) {
  ts_trainer *t = NULL;
  if (make(model, sets, nsets, &t)) return NULL;
  if (path) CHECK_OK(ts_trainer_load(t, path, 1, 0));
  ts_params *p = ts_trainer_params(t);
  *n = ts_params_numel(p) + (trainable_only ? 0 : ts_params_state_numel(p));
  float *out = malloc(sizeof(float) * (*n + 1));
  memcpy(out, ts_params_data(p), sizeof(float) * ts_params_numel(p));
  if (!trainable_only) memcpy(out + ts_params_numel(p), ts_params_states(p), sizeof(float) * ts_params_state_numel(p));
  ts_trainer_free(t);
  return out;
}

/* One pipeline layout against the single process: P stages x dp replicas (or, tp, stages of 2
 * semi_auto_parallel ranks cut by ts_test_gpt_tp2), schedule, M, V. */
static const char *opt_set = "optimizer.name=adamw";

static void compare_rules(ts_comm *w, const char *model, int P, const char *sched, int M, int V, int tp, int rules) {
  int rank = ts_comm_rank(w), N = ts_comm_size(w), dp = tp ? 1 : N / P;
  char what[160], s1[64], s2[64], s3[64], s4[64], s5[64], path[256], refp[256];
  if (tp) snprintf(what, sizeof what, "%s PP%d x TP%d %s M=%d V=%d %s", model, P, N / P, sched, M, V, opt_set + 15);
  else snprintf(what, sizeof what, "%s PP%d x DP%d %s M=%d V=%d", model, P, dp, sched, M, V);
  snprintf(path, sizeof path, "/tmp/ts_test_pipe_%d.safetensors", (int)getppid());
  snprintf(refp, sizeof refp, "/tmp/ts_test_pipe_ref_%d.safetensors", (int)getppid());
  snprintf(s1, sizeof s1, "parallel.pipeline_stages=%d", P);
  snprintf(s2, sizeof s2, "parallel.pipeline_schedule=%s", sched);
  snprintf(s3, sizeof s3, "parallel.micro_batches=%d", M);
  snprintf(s4, sizeof s4, "parallel.virtual_stages=%d", V);
  /* The single process's micro-batches are the replicas' micro-batches (16 / (M * dp) rows each,
   * BatchNorm statistics over each). BatchNorm's running statistics then follow a different
   * sequence of updates (each replica its own, averaged before evaluation and checkpoints):
   * with replicas, ResNet's trainable parameters and losses are compared, not its statistics
   * and evaluation. */
  int bnrep = strcmp(model, "gpt") != 0 && dp > 1;
  snprintf(s5, sizeof s5, "train.micro_batch_size=%d", 16 / (M * dp));
  const char *pipe[] = {tp ? "parallel.mode=semi_auto_parallel" : "parallel.mode=data_parallel",
                        tp ? "parallel.full_batch=true" : "parallel.full_batch=false", tp ? ts_test_gpt_tp2 : "parallel.strategies={}",
                        opt_set, s1, s2, s3, s4};
  const char *ref[] = {s5, opt_set};
  int npipe = P > 1 ? 8 : 4; /* P = 1: semi_auto_parallel alone */
  rec ra, rb, rc2;
  memset(&ra, 0, sizeof ra);
  memset(&rb, 0, sizeof rb);
  memset(&rc2, 0, sizeof rc2);
  ts_eval_info ea, eb, ec;
  /* the reference on rank 0 alone (one process, no collectives) */
  if (rank == 0) train(model, ref, 2, &ra, refp, &ea);
  train(model, pipe, npipe, &rb, path, &eb);
  train(model, pipe, npipe, &rc2, NULL, &ec);
  /* the plan's stage cut as a value (its rules) builds the pipeline's own balanced cut: the same
   * run, bitwise */
  rec rr;
  memset(&rr, 0, sizeof rr);
  ts_eval_info er;
  static char srules[8192];
  if (rules) {
    int rc = plan_rules(model, dp, P, M, V, srules, sizeof srules);
    CHECK_MSG(rc == TS_OK, "%s: the plan's stage rules: %s", what, ts_last_error());
    const char *with[9];
    memcpy(with, pipe, sizeof(const char *) * 8);
    with[8] = srules;
    if (!rc) train(model, with, 9, &rr, NULL, &er);
    if (rank == 0 && !rc) {
      for (int k = 1; k <= STEPS; k++)
        CHECK_MSG(rr.loss[k] == rb.loss[k], "%s: with the plan's stage rules, step %d: %.9g vs %.9g", what, k,
                  rr.loss[k], rb.loss[k]);
      CHECK_MSG(er.loss == eb.loss && er.top1 == eb.top1, "%s: evaluation differs with the plan's stage rules", what);
      printf("%-44s the plan's stage rules: the same losses bitwise (%s)\n", what, srules);
    }
  }
  ts_comm_barrier(w); /* rank 0 has written the checkpoint */
  if (rank == 0) {
    double worst = 0;
    for (int k = 1; k <= STEPS; k++) {
      CHECK_MSG(ra.loss[k] > 0 && rb.loss[k] > 0, "%s: no loss at step %d", what, k);
      double r = fabs(ra.loss[k] - rb.loss[k]) / fabs(ra.loss[k]);
      worst = r > worst ? r : worst;
      CHECK_MSG(rb.loss[k] == rc2.loss[k], "%s: step %d not bitwise repeatable: %.9g vs %.9g", what, k, rb.loss[k],
                rc2.loss[k]);
    }
    CHECK_MSG(worst <= 1e-5, "%s: loss rel diff %.3g", what, worst);
    size_t na = 0, nb = 0, wi = 0;
    float *pa = params_of(model, ref, 2, refp, &na, bnrep), *pb = params_of(model, ref, 2, path, &nb, bnrep);
    CHECK(pa && pb && na == nb);
    double ratio = pa && pb ? ts_test_close(pb, pa, na, 1e-5, 1e-5, &wi) : 9;
    CHECK_MSG(ratio <= 1, "%s: parameters differ at %zu: %.8g vs %.8g", what, wi, pb ? pb[wi] : 0, pa ? pa[wi] : 0);
    if (!bnrep) {
      CHECK_MSG(fabs(ea.loss - eb.loss) <= 1e-5 * fabs(ea.loss) && fabs(ea.top1 - eb.top1) <= 1.0 / (double)ea.samples,
                "%s: evaluation %.7g / %.4f vs %.7g / %.4f", what, eb.loss, eb.top1, ea.loss, ea.top1);
    }
    CHECK_MSG(eb.loss == ec.loss && eb.top1 == ec.top1, "%s: evaluation not repeatable", what);
    printf("%-44s loss rel %.1e, params within 1e-5 (ratio %.2f), eval %.5f/%.4f vs %.5f/%.4f\n", what, worst, ratio,
           eb.loss, eb.top1, ea.loss, ea.top1);
    free(pa);
    free(pb);
    unlink(path);
    unlink(refp);
  }
  ts_comm_barrier(w);
}

static void compare(ts_comm *w, const char *model, int P, const char *sched, int M, int V, int tp) {
  compare_rules(w, model, P, sched, M, V, tp, 0);
}

static void refused(const char *const *sets, int n, const char *key) {
  ts_trainer *t = NULL;
  int rc = make("gpt", sets, n, &t);
  CHECK_MSG(rc == TS_ECONFIG && strstr(ts_last_error(), key), "%s: rc %d '%s'", key, rc, ts_last_error());
  ts_trainer_free(t);
}

int main(int argc, char **argv) {
  CHECK_OK(ts_comm_init(&argc, &argv));
  ts_comm *w;
  CHECK_OK(ts_comm_world(&w));
  int rank = ts_comm_rank(w), N = ts_comm_size(w);
  if (N < 2) {
    ts_test_skip("pipelines need 2 or more ranks (run under mpirun -n 2 or 4)");
    return ts_test_finish_job("test_pipe");
  }
  snprintf(text_path, sizeof text_path, "/tmp/ts_test_pipe_%d.txt", (int)getppid());
  if (rank == 0) CHECK_MSG(ts_test_write_text(text_path, 12345, 24576) == 0, "cannot write %s", text_path); /* 24 KiB */
  ts_comm_barrier(w);
  /* GPT: 2 stages on 2 ranks, or 4 stages and 2 x 2 on 4 */
  compare(w, "gpt", 2, "gpipe", 1, 1, 0);
  compare_rules(w, "gpt", 2, "1f1b", 4, 1, 0, 1);
  if (N == 2) {
    compare(w, "gpt", 2, "gpipe", 4, 1, 0);
    compare(w, "gpt", 2, "1f1b", 8, 1, 0);
    compare_rules(w, "gpt", 2, "interleaved_1f1b", 4, 2, 0, 1);
  }
  if (N == 4) {
    compare_rules(w, "gpt", 4, "1f1b", 4, 1, 0, 1);
    compare(w, "gpt", 4, "gpipe", 8, 1, 0);
    compare(w, "gpt", 4, "1f1b", 8, 1, 0);
    compare(w, "gpt", 2, "1f1b", 4, 1, 1); /* PP2 x TP2 */
    opt_set = "optimizer.name=lamb";         /* LAMB's norms over the stage's slices */
    compare(w, "gpt", 2, "1f1b", 4, 1, 1);
    opt_set = "optimizer.name=adamw";
  }
  if (N == 2) { /* LAMB under semi_auto_parallel alone: norms over the slices */
    opt_set = "optimizer.name=lamb";
    compare(w, "gpt", 1, "1f1b", 1, 1, 1);
    opt_set = "optimizer.name=adamw";
  }
  /* ResNet-20 one replica per stage (with replicas, BatchNorm's micro-batch statistics group
   * rows differently from one process; GPT covers PP x DP) */
  if (ts_test_have_fashion_mnist()) compare(w, "resnet", N, N == 2 ? "1f1b" : "gpipe", N == 2 ? 2 : 4, 1, 0);
  /* bad input, refused before anything runs */
  const char *empty[] = {"parallel.mode=data_parallel", "parallel.pipeline_stages=2", "parallel.stages={transformer: 0}"};
  refused(empty, 3, "parallel.stages");
  const char *twice[] = {"parallel.mode=data_parallel", "parallel.pipeline_stages=2",
                         "parallel.stages={transformer.h.0: 0, transformer.h.*: 1}"};
  refused(twice, 3, "parallel.stages");
  const char *nodiv[] = {"parallel.mode=data_parallel", "parallel.pipeline_stages=3"};
  if (N % 3) refused(nodiv, 2, "parallel.pipeline_stages");
  const char *inter[] = {"parallel.mode=data_parallel", "parallel.pipeline_stages=2",
                         "parallel.pipeline_schedule=interleaved_1f1b", "parallel.virtual_stages=2",
                         "parallel.micro_batches=1"};
  refused(inter, 5, "parallel.micro_batches");
  ts_comm_barrier(w);
  if (rank == 0) unlink(text_path);
  return ts_test_finish_job("test_pipe");
}
