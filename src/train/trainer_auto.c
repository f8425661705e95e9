/* The trainer's side of auto_parallel: what the search (src/autoparallel/) needs of the job, made
 * from the config (the model's builder and sample, the distribution config of the user's keys,
 * the batch, the budget, the zoo GPT's dimensions), and the plan it returns applied to the config
 * (its scalars: the run's record, which checkpoints and reports read) as a value; the plan's
 * strategies reach the distribution object as a strategy set (trainer.c, trainer_plan.c), never
 * as parallel.strategies text. */
#include <stdlib.h>
#include <string.h>

#include "train_compat.h"
#include "train_impl.h"

int ts_config_apply_autoplan(ts_config *c, const ts_autoplan *p) {
  int M = p->micro_batches > 0 ? p->micro_batches : 1, V = p->virtual_stages > 1 ? p->virtual_stages : 1;
  int pp = p->pp > 1 ? p->pp : 1;
  ts__config_set_layout(c, p->pp, p->zero);
  c->parallel.micro_batches = pp > 1 ? M : 0;
  c->parallel.pipeline_schedule = pp > 1 && V > 1 ? 2 : 1; /* interleaved_1f1b, or 1f1b */
  c->parallel.virtual_stages = pp > 1 ? V : 1;
  /* without stages, micro-batches are gradient accumulation: rows of one micro-step; with them,
   * the pipeline's micro-batches */
  c->train.micro_batch_size = pp > 1 || c->train.batch_size % M ? c->train.batch_size : c->train.batch_size / M;
  /* evaluation in micro-batches too (the plan's memory counts its arena) */
  int rows = c->train.batch_size / M;
  if (rows > 0 && (c->train.eval_batch_size == 0 || c->train.eval_batch_size > rows)) c->train.eval_batch_size = rows;
  c->model.recompute = p->recompute == 2 ? TS_CFG_RECOMPUTE_SELECTIVE : p->recompute ? TS_CFG_RECOMPUTE_FULL
                                                                                  : TS_CFG_RECOMPUTE_NONE;
  c->parallel.sequence_parallel = p->sp && p->tp > 1;
  if (p->cp > 1 || c->parallel.context_parallel == 0) { /* the degree the search chose (1: none) */
    c->parallel.context_parallel = p->cp > 1 ? p->cp : 1;
    if (p->cp > 1) c->parallel.context_parallel_algo = p->cp_algo;
  }
  c->model.recompute_layers.n = 0;
  if (ts_autoplan_model_ways(p) > 1) {
    c->parallel.mode = TS_PARALLEL_SEMI_AUTO;
    c->parallel.full_batch = 0;
  } else {
    c->parallel.mode = p->dp * pp > 1 ? TS_PARALLEL_DATA : TS_PARALLEL_STAND_ALONE;
  }
  /* the plan's strategies travel as its set (ts_dist_model.strategies), not as config text */
  ts_cfg_strategies_free(&c->parallel.strategies);
  return TS_OK;
}

/* The caller's keys refusing plan p: a copy of them with p applied, validated (user: the config). */
static int check_plan(const ts_autoplan *p, void *user) {
  ts_config k;
  int rc = ts_config_copy(&k, (const ts_config *)user);
  if (!rc) rc = ts_config_apply_autoplan(&k, p);
  if (!rc) rc = ts_config_validate(&k);
  ts_config_free(&k);
  return rc;
}

int ts__train_auto_job(const ts_config *c, ts_model_fn fn, void *user, ts__auto_job *a) {
  memset(a, 0, sizeof *a);
  ts_trainer *t = a->t = calloc(1, sizeof *t);
  if (!t) return ts_error_set(TS_ENOMEM, "auto_parallel: out of memory");
  t->cfg = *c; /* a view of c (not freed here): only scalars change */
  t->cfg.parallel.mode = TS_PARALLEL_DATA; /* the candidates set their own layout */
  const ts_dist_vt *vt;
  ts_autoparallel_job *j = &a->job;
  int rc = ts__config_check_context_parallel(c); /* every plan takes it */
  if (!rc) rc = ts__train_layout(&t->cfg, fn, user, &vt, &j->base, &t->model);
  int have = 0; /* the sample's shape without opening a data set where the config tells it */
  if (!rc) rc = ts__train_dry_sample(t, &have);
  if (!rc && !have) rc = ts__train_prepare(t);
  if (rc) return rc;
  j->model = t->model;
  j->model.strategies = NULL;
  j->batch_size = c->train.batch_size;
  j->max_memory_mb = c->train.max_memory_mb;
  j->optim_slots = ts_optim_kind_num_slots(c->optimizer.name);
  j->amp_level = c->train.amp_level;
  j->search_mode = c->parallel.search_mode;
  j->time_budget = c->parallel.search_time_budget;
  if (c->model.name == TS_MODEL_GPT) {
    ts_config_gpt(c, &a->gpt);
    j->gpt = &a->gpt;
  }
  j->seq_len = c->data.seq_len;
  j->cp = c->parallel.context_parallel;
  j->cp_algo = c->parallel.context_parallel_algo;
  j->fixed = c->parallel.strategies.v;
  j->nfixed = c->parallel.strategies.n;
  j->check = check_plan;
  j->check_user = (void *)c;
  return TS_OK;
}

void ts__train_auto_job_free(ts__auto_job *a) {
  if (a->t) {
    ts_source_free(a->t->train_src);
    ts_source_free(a->t->test_src);
  }
  free(a->t);
  memset(a, 0, sizeof *a);
}

/* parallel.auto_tp > 0: the plan dp = N / (auto_tp x stages) x tp = auto_tp x the pipeline stages
 * (micro-batches: parallel.micro_batches, else the stages; no shard, no recompute), its operators
 * searched on cl. */
static int auto_tp(const ts_config *c, int N, const ts_cluster *cl, const ts__auto_job *a, ts_autoplan *out) {
  int rc = ts__config_check_auto_tp(c, N);
  if (rc) return rc;
  if (c->parallel.context_parallel > 1)
    return ts_error_set(TS_ECONFIG, "parallel.auto_tp %d with parallel.context_parallel %d: the per-operator search "
                        "does not cut the sequence (leave auto_tp 0: the search takes Megatron's cuts with it)",
                        c->parallel.auto_tp, c->parallel.context_parallel);
  int T = c->parallel.auto_tp, P = ts__config_stages(c);
  ts_autoplan *p = out;
  memset(p, 0, sizeof *p);
  p->dp = N / T / P, p->tp = T, p->pp = P;
  p->micro_batches = P > 1 ? (c->parallel.micro_batches > 0 ? c->parallel.micro_batches : P) : 1;
  int rc2 = ts__autoplan_strategies(&a->job, cl, p);
  return rc2 ? rc2 : ts__autoplan_cuts(&a->job, p);
}

int ts__train_auto(ts_config *c, int N, ts_model_fn model, void *user, ts_autoplan *out) {
  memset(out, 0, sizeof *out);
  ts_cluster cl;
  int rc = ts_cluster_load(c->parallel.cluster, &cl);
  if (rc) return ts_error_wrap(rc, "parallel.cluster");
  ts__auto_job a;
  rc = ts__train_auto_job(c, model, user, &a);
  if (!rc && c->parallel.auto_tp > 0) rc = auto_tp(c, N, &cl, &a, out); /* opsearch: the degrees given */
  else if (!rc) rc = ts__autoparallel_search(&a.job, N, &cl, NULL, 0, NULL, out);
  ts__train_auto_job_free(&a);
  if (!rc) rc = ts_config_apply_autoplan(c, out); /* the run's record of what it runs */
  if (!rc) rc = ts_config_validate(c);
  if (rc) {
    ts_autoplan_free(out);
    return rc;
  }
  char line[512];
  ts_autoplan_describe(out, line, sizeof line);
  ts_log(TS_LOG_INFO, "%s", line);
  return TS_OK;
}

int ts_trainer_autoplan_search(const ts_config *cfg, int N, const ts_cluster *cl, ts_autoplan *cands, int cap, int *n,
                               ts_autoplan *chosen) {
  memset(chosen, 0, sizeof *chosen);
  if (n) *n = 0;
  ts__auto_job a;
  int rc = ts__train_auto_job(cfg, NULL, NULL, &a);
  if (!rc) rc = ts__autoparallel_search(&a.job, N, cl, cands, cap, n, chosen);
  ts__train_auto_job_free(&a);
  return rc;
}

int ts_trainer_autoplan_build(const ts_config *cfg, const ts_cluster *cl, ts_autoplan *p) {
  ts__auto_job a;
  p->strategies = NULL;
  p->stage_rules = NULL; /* the caller's degrees: nothing of ours yet */
  p->n_stage_rules = 0;
  int rc = ts__train_auto_job(cfg, NULL, NULL, &a);
  if (!rc) rc = ts__autoplan_strategies(&a.job, cl, p);
  if (!rc) rc = ts__autoplan_cuts(&a.job, p);
  if (!rc) rc = check_plan(p, (void *)cfg);
  ts__train_auto_job_free(&a);
  if (rc) ts_autoplan_free(p);
  return rc;
}

const ts_autoplan *ts_trainer_autoplan(const ts_trainer *t) { return t->has_plan ? &t->plan : NULL; }
