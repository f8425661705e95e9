/* The training loop: a distribution object (src/distribution/dist.h) for the layout builds
 * this rank's graphs and reduces what crosses ranks; the trainer feeds batches, accumulates
 * gradients over micro-batches, steps the optimizer and schedule, evaluates, calls back, writes
 * checkpoints of the whole model and resumes exactly. */
#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/checkpoint.h"
#include "tessera/plot.h"
#include "tessera/zoo.h"
#include "config_dist.h"
#include "distribution/query.h"
#include "train_compat.h"
#include "config_impl.h"
#include "io/ckpt_config.h"
#include "train_impl.h"

ts_params *ts_trainer_params(ts_trainer *t) {
  /* a GPU job: the host copy brought up to date first */
  if (ts_dist_to_host(t->dist, t->opt)) ts_log(TS_LOG_WARN, "%s", ts_last_error());
  return t->run->params;
}
int64_t ts_trainer_step(const ts_trainer *t) { return t->step; }
int ts_trainer_rank(const ts_trainer *t) { return t->run->rank; }
int ts_trainer_world_size(const ts_trainer *t) { return t->run->size; }
const char *ts_trainer_reduction_note(const ts_trainer *t) { return ts_dist_reduction_note(t->dist); }
int64_t ts_trainer_num_params(const ts_trainer *t) { return ts_dist_num_params(t->dist); }
int64_t ts_trainer_accum_numel(const ts_trainer *t) { return t->accum > 1 ? (int64_t)ts_dist_accum_numel(t->dist) : 0; }
int64_t ts_trainer_optim_state_numel(const ts_trainer *t) {
  return t->opt ? (int64_t)ts_optim_num_slots(t->opt) * (int64_t)ts_optim_extent(t->opt) : 0;
}
int64_t ts_trainer_steps_per_epoch(const ts_trainer *t) { return t->steps_per_epoch; }
void ts_trainer_request_stop(ts_trainer *t) { t->stop = 1; }

int ts_trainer_add_callback(ts_trainer *t, const ts_callback *cb) {
  if (t->ncb >= MAX_CB) return ts_error_set(TS_ERANGE, "trainer: at most %d callbacks", MAX_CB);
  t->cb[t->ncb++] = *cb;
  return TS_OK;
}

/* ---- model and layout ---- */

/* The zoo model named by the config (user: the ts_config). */
static int zoo_model(ts_nn *nn, ts_val x, ts_val y, const ts_model_info *info, ts_val *logits, ts_val *loss,
                     void *user) {
  (void)info;
  const ts_config *c = user;
  switch (c->model.name) {
    case TS_MODEL_MLP: {
      ts_mlp_config m;
      ts_config_mlp(c, &m);
      return ts_zoo_mlp(nn, &m, x, y, logits, loss);
    }
    case TS_MODEL_LENET5: {
      ts_lenet5_config m;
      ts_config_lenet5(c, &m);
      return ts_zoo_lenet5(nn, &m, x, y, logits, loss);
    }
    case TS_MODEL_CONVNET: {
      ts_convnet_config m;
      ts_config_convnet(c, &m);
      return ts_zoo_convnet(nn, &m, x, y, logits, loss);
    }
    case TS_MODEL_RESNET: {
      ts_resnet_config m;
      ts_config_resnet(c, &m);
      return ts_zoo_resnet(nn, &m, x, y, logits, loss);
    }
    case TS_MODEL_GPT: {
      ts_gpt_config m;
      ts_config_gpt(c, &m);
      return ts_zoo_gpt(nn, &m, x, y, logits, loss);
    }
    default:
      return ts_error_set(TS_ECONFIG, "model.name: unknown model %d", (int)c->model.name);
  }
}

/* Spans the distribution object reports, into the profiler. */
static void dist_span(const char *name, int comm, double t0, double t1, void *user) {
  ts_trainer *t = user;
  ts__tprof_span(t->prof, name, comm ? TS_PROF_COMM : TS_PROF_OTHER, t0, t1);
}

int ts__train_layout(const ts_config *c, ts_model_fn fn, void *user, const ts_dist_vt **vt, ts_dist_config *dc,
                     ts_dist_model *m) {
  /* the one place the layout is chosen: everything after asks the distribution object */
  ts__compat_key key;
  ts__config_compat_key(c, &key);
  int rc = ts__compat_check(TS__COMPAT_LAYOUT, &key); /* the layouts stages run inside */
  if (rc) return rc;
  const char *mode = ts__compat_layout(key.mode, key.stages); /* "pipeline" with stages */
  *vt = ts_dist_find(mode);
  if (!*vt)
    /* auto_parallel has no layout of its own: the trainer and `tessera plan` run the search first
     * (ts__train_auto) and build the layout of the plan it returns */
    return ts_error_set(TS_EUNSUPPORTED, "parallel.mode: %s has no layout of its own (its plan's layout is built "
                        "once the search has run)", mode);
  ts_config_dist(c, dc);
  memset(m, 0, sizeof *m);
  m->fn = fn ? fn : zoo_model;
  m->user = fn ? user : (void *)c;
  m->custom = fn != NULL;
  m->per_rank = fn != NULL && c->parallel.mode == TS_PARALLEL_HYBRID;
  return TS_OK;
}

int ts__train_strategies(const ts_config *c, int ndevices, ts_strategy_set **out) {
  int rc;
  *out = NULL;
  ndevices = ts__config_stage_ranks(c, ndevices); /* with pipeline stages the strategies cut each stage */
  int cp = c->parallel.context_parallel;
  if (cp > 1 && c->parallel.mode == TS_PARALLEL_SEMI_AUTO) {
    /* the zoo's GPT cut cp ways along the sequence, data parallel over the rest */
    if ((rc = ts__config_check_context_parallel(c))) return rc;
    if (ndevices % cp)
      return ts_error_set(TS_ECONFIG, "parallel.context_parallel: %d does not divide the %d ranks%s", cp, ndevices,
                          c->parallel.pipeline_stages > 1 ? " of a pipeline stage" : "");
    ts_gpt_config m;
    ts_config_gpt(c, &m);
    rc = ts_strategy_set_create(ndevices, 0, out);
    if (!rc) rc = ts_gpt_context_strategies(&m, ndevices / cp, cp, 1, c->parallel.context_parallel_algo, *out);
    if (rc) {
      ts_strategy_set_free(*out);
      *out = NULL;
      return ts_error_as_config(ts_error_wrap(rc, "parallel.context_parallel %d", cp));
    }
    return TS_OK;
  }
  if (!c->parallel.strategy_ckpt_load_file[0] && !c->parallel.strategies.n) return TS_OK;
  if (c->parallel.strategy_ckpt_load_file[0])
    rc = ts_strategy_set_load(c->parallel.strategy_ckpt_load_file, ndevices, out);
  else
    rc = ts_strategy_set_create(ndevices, 0, out);
  if (rc) return ts_error_as_config(ts_error_wrap(rc, "parallel.strategy_ckpt_load_file"));
  for (int i = 0; i < c->parallel.strategies.n; i++) {
    rc = ts_strategy_set_put_text(*out, c->parallel.strategies.v[i].op, c->parallel.strategies.v[i].text);
    if (rc) {
      ts_strategy_set_free(*out);
      *out = NULL;
      return ts_error_as_config(ts_error_wrap(rc, "parallel.strategies.%s", c->parallel.strategies.v[i].op));
    }
  }
  return TS_OK;
}

/* optimizer.no_decay_params and optimizer.param_groups name parameters by name, or by a pattern with
 * '*' (fnmatch). */
static int named(const char *pattern, const char *name) { return !fnmatch(pattern, name, 0); }

/* Each entry of optimizer.no_decay_params and optimizer.param_groups must match a trainable parameter
 * of some rank (a pipeline stage holds only its own): one that matches none (a typo) is refused, not
 * ignored. hit: this rank's matches, no_decay_params' entries then param_groups', then one slot this
 * rank sets where it refused the lists already (local_rc: a parameter in two groups, which only the
 * rank holding it sees): every rank takes part in the reduction, and every rank then fails. */
static int entries_check(const ts_config *cfg, float *hit, const char *example, int local_rc) {
  const ts_cfg_slist *l = &cfg->optimizer.no_decay_params;
  const ts_cfg_pgroups *gl = &cfg->optimizer.param_groups;
  size_t n = (size_t)l->n + (size_t)gl->n;
  if (n == 0) return local_rc;
  int rank, size, rc = TS_OK;
  ts_job_rank(&rank, &size);
  ts_comm *w = NULL;
  hit[n] = local_rc ? 1.0f : 0.0f;
  if (size > 1 && !(rc = ts_comm_world(&w))) rc = ts_comm_allreduce(w, hit, hit, n + 1, TS_F32, TS_REDUCE_MAX);
  if (local_rc) return local_rc; /* (its message set above) */
  if (!rc && hit[n])
    return ts_error_set(TS_ECONFIG, "%s: optimizer.param_groups: refused on another rank (its message names the "
                        "parameter)", cfg->source[0] ? cfg->source : "config");
  for (size_t i = 0; !rc && i < n; i++)
    if (!hit[i])
      rc = ts_error_set(TS_ECONFIG, "%s: optimizer.%s: '%s' matches no trainable parameter (the model's are named "
                        "like '%s')", cfg->source[0] ? cfg->source : "config",
                        i < (size_t)l->n ? "no_decay_params" : "param_groups",
                        i < (size_t)l->n ? l->v[i] : gl->v[i - (size_t)l->n].pattern, example);
  return rc;
}

int ts__train_optim(const ts_config *cfg, ts_params *p, ts_dist *d, ts_optim **opt, ts_optim_segment **segs,
                    int *nseg) {
  const ts_cfg_slist *nd = &cfg->optimizer.no_decay_params;
  const ts_cfg_pgroups *gl = &cfg->optimizer.param_groups;
  int np = ts_params_count(p), rc = TS_OK;
  *nseg = 0;
  *segs = calloc((size_t)np + 1, sizeof **segs);
  float *hit = calloc((size_t)nd->n + (size_t)gl->n + 1, sizeof *hit);
  ts_optim_group *groups = calloc((size_t)gl->n + 1, sizeof *groups);
  if (!*segs || !hit || !groups) {
    free(*segs), free(hit), free(groups);
    *segs = NULL;
    return ts_error_set(TS_ENOMEM, "trainer: out of memory");
  }
  for (int i = 0; !rc && i < np; i++) {
    int fl = ts_params_flags(p, i);
    if (fl & TS_PARAM_STATE) continue;
    const char *name = ts_params_name(p, i);
    ts_shape s = ts_params_shape(p, i);
    uint32_t sf = cfg->optimizer.exclude_bias_and_norm && (fl & TS_PARAM_NO_DECAY) ? TS_SEG_NO_DECAY : 0;
    for (int k = 0; k < nd->n; k++)
      if (named(nd->v[k], name)) sf |= TS_SEG_NO_DECAY, hit[k] = 1;
    for (int k = 0; k < gl->n && !rc; k++) {
      if (!named(gl->v[k].pattern, name)) continue;
      if (TS_SEG_GROUP_OF(sf))
        rc = ts_error_set(TS_ECONFIG, "%s: optimizer.param_groups: parameter '%s' matches both '%s' and '%s' (a "
                          "parameter is in one group)", cfg->source[0] ? cfg->source : "config", name,
                          gl->v[TS_SEG_GROUP_OF(sf) - 1].pattern, gl->v[k].pattern);
      sf |= TS_SEG_GROUP(k + 1), hit[nd->n + k] = 1;
    }
    (*segs)[(*nseg)++] = (ts_optim_segment){name, ts_params_offset(p, i), (size_t)ts_shape_numel(&s), sf};
  }
  if (d) rc = entries_check(cfg, hit, *nseg ? (*segs)[0].name : "", rc); /* (collective: the job's optimizer) */
  ts_optim_config oc;
  if (!rc) rc = ts_config_optim(cfg, &oc);
  for (int k = 0; !rc && k < gl->n; k++)
    groups[k] = (ts_optim_group){gl->v[k].lr_scale, gl->v[k].weight_decay < 0 ? oc.weight_decay : gl->v[k].weight_decay};
  if (!rc && gl->n) oc.ngroups = gl->n, oc.groups = groups;
  if (!rc) rc = d ? ts_dist_optim_create(d, &oc, *segs, *nseg, opt) : ts_optim_create(opt, &oc, *segs, *nseg);
  free(hit);
  free(groups); /* (the optimizer holds a copy) */
  return rc;
}

/* ---- data ---- */
/* Reads the first training sample through the training transforms: the sample shape and dtype
 * the graphs are built for, text or not. Both splits are checked against it batch by batch. */
static int probe(ts_trainer *t) {
  ts_sample s;
  memset(&s, 0, sizeof s);
  int rc = ts_source_get(t->train_src, 0, &s);
  if (!rc) rc = ts_transforms_apply(t->tf_train, t->ntf_train, &s, 0); /* what training consumes */
  if (rc) {
    ts_sample_free(&s);
    return ts_error_wrap(rc, "reading the first training sample");
  }
  t->model.sample = s.data.shape;
  t->model.dtype = s.data.dtype;
  t->model.values = s.target.data != NULL && s.target.dtype == TS_F32; /* a regression's targets */
  t->model.text = s.target.data != NULL && !t->model.values;
  if (t->model.values) t->model.target = s.target.shape;
  ts_dtype tdt = s.target.dtype;
  int has_target = s.target.data != NULL;
  ts_sample_free(&s);
  if (has_target && !t->model.values && tdt != TS_I32)
    return ts_error_set(TS_ECONFIG, "data: the samples' targets are %s: Tessera takes int32 token ids or float32 values",
                        ts_dtype_name(tdt));
  if (t->model.values) { /* the model's own loss reads them: a custom model's (Python, ts_trainer_create_custom) */
    if (!t->model.custom)
      return ts_error_set(TS_ECONFIG, "model.name: %s trains on class labels, but the samples' targets are float32 "
                          "values (a regression): that needs a model of your own with its loss (Python, or "
                          "ts_trainer_create_custom)", ts_model_kind_name(t->cfg.model.name));
    if (t->model.dtype != TS_F32)
      return ts_error_set(TS_ECONFIG, "data.transforms: the samples are %s: a regression's inputs must be f32",
                          ts_dtype_name(t->model.dtype));
    return TS_OK;
  }
  int is_image_model = t->cfg.model.name != TS_MODEL_GPT;
  if (is_image_model && t->model.dtype != TS_F32)
    return ts_error_set(TS_ECONFIG,
                        "data.transforms: model %s needs f32 samples but they are %s (add to_float, "
                        "normalize and hwc_to_chw transforms)",
                        ts_model_kind_name(t->cfg.model.name), ts_dtype_name(t->model.dtype));
  if (!is_image_model && !t->model.text)
    return ts_error_set(TS_ECONFIG, "model.name: gpt needs a text data set (data.name: text)");
  if (is_image_model && t->model.text)
    return ts_error_set(TS_ECONFIG, "model.name: %s cannot train on text data", ts_model_kind_name(t->cfg.model.name));
  return TS_OK;
}

int ts__train_prepare(ts_trainer *t) {
  int rc;
  if ((rc = ts__train_sources(&t->cfg, &t->train_src, &t->test_src))) return rc;
  ts_config *c = &t->cfg;
  rc = ts_config_transforms(&t->cfg, 1, t->tf_train, TS_CFG_MAX_TRANSFORMS);
  if (rc < 0) return rc;
  t->ntf_train = rc;
  rc = ts_config_transforms(&t->cfg, 0, t->tf_test, TS_CFG_MAX_TRANSFORMS);
  if (rc < 0) return rc;
  t->ntf_test = rc;
  if ((rc = probe(t))) return rc;
  /* 0: the data's own count (not for text, whose vocabulary is the model's, nor for a regression) */
  if (c->model.num_classes == 0 && c->model.name != TS_MODEL_GPT && !t->model.values) {
    c->model.num_classes = ts_source_num_classes(t->train_src);
    if (c->model.num_classes <= 0)
      return ts_error_set(TS_ECONFIG, "model.num_classes: 0 means the data set's own count, but data.name %s "
                          "does not tell it: set model.num_classes", ts_data_kind_name(c->data.name));
  }
  return TS_OK;
}

/* The cap applied as if train.steps = min(the run's steps, N) were set, the run's config (what
 * checkpoints record, the lr schedule) that of the shorter run: t->total_steps is the configured
 * length of the run from step `from` (0 at creation; the continued part of ts_trainer_continue). */
static int apply_max_steps(ts_trainer *t, int64_t from) {
  if (t->max_steps <= 0 || t->total_steps - from <= t->max_steps) return TS_OK;
  int64_t m = t->total_steps - from;
  t->total_steps = from + t->max_steps;
  t->cfg.train.steps = t->total_steps;
  if (t->run->rank == 0)
    ts_log(TS_LOG_WARN, "TESSERA_MAX_STEPS=%lld: the run stops after %lld of its %lld steps", (long long)t->max_steps,
           (long long)t->max_steps, (long long)m);
  if (from) return TS_OK; /* ts_trainer_continue dumps the config itself */
  char *yaml = NULL; /* what checkpoints record: the shorter run's config */
  int rc = ts_config_dump_string(&t->cfg, &yaml);
  if (rc) return rc;
  free(t->cfg_yaml);
  t->cfg_yaml = yaml;
  return TS_OK;
}

static int make_train_pipe(ts_trainer *t) {
  ts_pipeline_config pc = ts_pipeline_config_default();
  pc.source = t->train_src;
  /* the same global order on any number of ranks: rank r takes positions r, r+S, ... */
  pc.sampler.kind = t->cfg.data.sampler == 1 ? TS_SAMPLER_STRATIFIED : TS_SAMPLER_DISTRIBUTED;
  pc.sampler.shuffle = t->cfg.data.shuffle;
  pc.sampler.num_shards = t->run->data_parts;
  pc.sampler.shard_id = t->run->data_index;
  pc.sampler.drop_last = t->cfg.data.drop_last;
  pc.transforms = t->tf_train;
  pc.ntransforms = t->ntf_train;
  pc.num_workers = t->cfg.data.num_workers;
  pc.batch_size = t->cfg.train.batch_size / t->run->data_parts;
  pc.drop_remainder = 1; /* fixed graph shapes; a partial batch would change the math */
  pc.shuffle_buffer = t->cfg.data.shuffle_buffer;
  pc.prefetch = t->cfg.data.prefetch;
  pc.epochs = -1;
  pc.seed = t->cfg.train.seed;
  pc.expect_shape = t->model.sample; /* what the graphs were built for */
  pc.expect_dtype = t->model.dtype;
  pc.name = "training split";
  int rc = ts_pipeline_create(&pc, &t->train_pipe);
  if (rc && t->cfg.data.sampler == 1) /* said with the key that asked for it */
    return ts_error_wrap(TS_ECONFIG, "%s: data.sampler: stratified needs a labelled data set (%s)",
                         t->cfg.source[0] ? t->cfg.source : "config", ts_data_kind_name(t->cfg.data.name));
  if (rc) return rc;
  t->steps_per_epoch = ts_pipeline_batches_per_epoch(t->train_pipe);
  if (t->steps_per_epoch <= 0)
    return ts_error_set(TS_ECONFIG, "train.batch_size %d is larger than the %lld training samples",
                        t->cfg.train.batch_size, (long long)ts_source_len(t->train_src));
  t->total_steps = ts_config_total_steps(&t->cfg, t->steps_per_epoch);
  return apply_max_steps(t, 0);
}

/* ---- checkpoints: the whole model, whatever the layout ---- */
void ts__trainer_ckpt_state(ts_trainer *t, ts_ckpt_state *st) {
  memset(st, 0, sizeof *st);
  st->params = t->run->params;
  st->optim = t->opt;
  st->pos.step = t->step;
  st->pos.epoch = t->epoch;
  st->pos.batch_index = t->batch;
  st->pos.seed = t->cfg.train.seed;
  st->pos.rng_counter = (uint64_t)t->step;
  st->pos.loss_scale = t->scaler.scale; /* 1 without loss scaling */
  st->pos.loss_scale_growth_tracker = t->scaler.growth;
  st->model = ts_model_kind_name(t->cfg.model.name);
  st->config_hash = ts_config_hash(&t->cfg);
  st->config_yaml = t->cfg_yaml;
}

/* The whole model's store and, with the optimizer, an optimizer over it with the same slots (the
 * rank's own when nothing is sliced). */
typedef struct {
  ts_params *full;
  int owned;
  ts_optim *fopt;
  ts_optim_segment *segs;
  int nseg;
} whole_model;

static int whole_open(ts_trainer *t, int with_optimizer, whole_model *w) {
  memset(w, 0, sizeof *w);
  int rc = ts_dist_whole_store(t->dist, &w->full, &w->owned);
  if (!rc && with_optimizer && t->opt)
    rc = w->owned ? ts__train_optim(&t->cfg, w->full, NULL, &w->fopt, &w->segs, &w->nseg) : TS_OK;
  return rc;
}

static void whole_close(whole_model *w) {
  ts_optim_free(w->fopt);
  free(w->segs);
  if (w->owned) ts_params_free(w->full);
}

/* Opens the whole model and moves every rank's slices into it; on rank 0 fills *st with it.
 * The caller closes w whatever the result. Collective. */
static int whole_gather(ts_trainer *t, whole_model *w, ts_ckpt_state *st) {
  memset(w, 0, sizeof *w);
  int rc = ts_dist_to_host(t->dist, t->opt); /* a GPU job: the device's state is the newest */
  if (!rc) rc = whole_open(t, 1, w);
  if (!rc) rc = ts_dist_move(t->dist, w->full, t->opt, w->fopt, 1); /* every rank's slices */
  if (!rc && t->run->rank == 0) {
    ts__trainer_ckpt_state(t, st);
    st->params = w->full;
    st->optim = w->owned ? w->fopt : t->opt;
  }
  return rc;
}

/* Whether the layout leaves the whole state on this rank (computed once, at creation: the
 * whole store is built here only to be freed). */
static int whole_is_local(ts_trainer *t) {
  ts_params *full = NULL;
  int owned = 0;
  size_t rep = 0, sh = 0;
  if (ts_dist_whole_store(t->dist, &full, &owned)) return 0;
  if (owned) ts_params_free(full);
  return !owned && !ts_dist_optim_sharded(t->dist, &rep, &sh) && ts__dist_stages(t->dist) <= 1;
}

int ts_trainer_whole_is_local(ts_trainer *t) { return t->whole_local; }

/* The whole checkpoint written by this rank from its own state (whole_is_local). */
static int save_local(ts_trainer *t, const char *path) {
  ts_ckpt_state st;
  int rc = ts_dist_to_host(t->dist, t->opt); /* a GPU job: the device's state is the newest */
  if (rc) return rc;
  ts__trainer_ckpt_state(t, &st);
  return ts_ckpt_save(path, &st);
}

/* Gathered from every rank (collective), written by rank 0 and copied to every rank whose path
 * differs from those of the ranks before it (per-rank directories). arrive: first waits at most
 * min(parallel.comm_timeout, 30 s) for every rank to call it, so a save called on one rank only
 * fails promptly naming the ranks missing and the call, not a collective inside it. */
static int save_gathered(ts_trainer *t, const char *path, int arrive) {
  ts_comm *wc = ts_dist_world(t->dist);
  int rc = TS_OK;
  if (arrive && wc && ts_comm_size(wc) > 1) {
    double g = ts_comm_get_timeout(), lim = g > 0 && g < 30 ? g : 30;
    int32_t one = 1, n = 0;
    ts_comm_req *req = NULL;
    ts_comm_set_timeout(lim); /* polled (a blocking barrier's timeout ends the job): the ranks missing named */
    rc = ts_comm_iallreduce(wc, &one, &n, 1, TS_I32, TS_REDUCE_SUM, &req);
    if (!rc) rc = ts_comm_wait(req);
    ts_comm_set_timeout(g);
    if (!rc) ts_comm_req_free(req);
    /* on a timeout the request stays in flight (the job is broken: the caller ends it) */
    if (rc)
      return ts_error_wrap(rc, "saving checkpoint %s: under %s the checkpoint is gathered from every rank, so every "
                           "rank must call the save (not only rank 0)", path, ts_parallel_mode_name(t->cfg.parallel.mode));
  }
  whole_model w;
  ts_ckpt_state st;
  rc = whole_gather(t, &w, &st);
  if (!rc && t->run->rank == 0) rc = ts_ckpt_save(path, &st);
  whole_close(&w);
  return ts__ckpt_copy_out(wc, path, rc);
}

int ts_trainer_save(ts_trainer *t, const char *path) {
  if (ts_trainer_whole_is_local(t)) return save_local(t, path);
  return save_gathered(t, path, 1);
}

int ts__trainer_whole_snapshot(ts_trainer *t, ts_ckpt_snapshot **snap) {
  whole_model w;
  ts_ckpt_state st;
  int rc = whole_gather(t, &w, &st);
  if (!rc && t->run->rank == 0) rc = ts_ckpt_snapshot_take(&st, snap);
  whole_close(&w);
  return rc;
}

int ts_trainer_load(ts_trainer *t, const char *path, int strict, int with_optimizer) {
  whole_model w;
  ts_ckpt_state st;
  int sliced = ts_ckpt_is_sliced(path), rc;
  memset(&w, 0, sizeof w);
  ts__trainer_ckpt_state(t, &st);
  if (!with_optimizer) st.config_hash = 0; /* evaluating with another config (batch size, epochs) is fine */
  if (sliced) { /* each rank reads its own pieces */
    rc = ts__trainer_load_sliced(t, path, strict, with_optimizer, &st);
  } else {
    rc = whole_open(t, with_optimizer, &w);
    if (!rc) {
      st.params = w.full;
      st.optim = !with_optimizer ? NULL : w.owned ? w.fopt : t->opt;
      rc = ts_ckpt_load(path, &st, strict);
    }
    if (!rc) rc = ts_dist_move(t->dist, w.full, with_optimizer ? t->opt : NULL, w.fopt, 0); /* cut into slices */
  }
  if (!rc && with_optimizer) {
    t->step = st.pos.step;
    t->epoch = st.pos.epoch;
    t->batch = st.pos.batch_index;
    if (t->train_pipe) rc = ts_pipeline_seek(t->train_pipe, t->epoch, t->batch);
    /* a dynamic scale continues where it was (fixed: the configured one) */
    if (!rc) rc = ts_loss_scaler_restore(&t->scaler, st.pos.loss_scale, st.pos.loss_scale_growth_tracker);
    if (rc) rc = ts_error_wrap(rc, "%s: tessera.loss_scale", path);
    if (!rc) rc = ts_dist_set_loss_scale(t->dist, (float)t->scaler.scale);
  }
  if (!rc) rc = ts_dist_to_device(t->dist, t->opt); /* a GPU job: the loaded state onto the device */
  if (!sliced) whole_close(&w);
  return rc;
}

static int save_checkpoint(ts_trainer *t) {
  const ts_config *c = &t->cfg;
  int src = ts_dist_sync_states(t->dist);
  if (src) return src;
  char path[2200];
  int sliced = ts__trainer_ckpt_format(t) == TS_CFG_CKPT_SLICED;
  int rc = sliced ? ts_ckpt_dir_path(path, sizeof path, c->checkpoint.dir, c->checkpoint.prefix, t->step)
                  : ts_ckpt_path(path, sizeof path, c->checkpoint.dir, c->checkpoint.prefix, t->step);
  /* per-rank directories (t->ckpt_copies): written synchronously, a copy in each */
  if (!rc && c->checkpoint.async && !t->ckpt_copies) return ts__ckpt_async_save(t, path, sliced, 1);
  if (!rc) {
    if (sliced) rc = ts_trainer_save_sliced(t, path);                    /* collective; every rank writes its pieces */
    else if (!ts_trainer_whole_is_local(t)) rc = save_gathered(t, path, 0); /* collective; rank 0 writes, copies */
    else if (t->ckpt_writer) rc = save_local(t, path); /* rank 0, and each rank with its own directory */
  }
  if (rc || !t->ckpt_writer) return rc;
  int r = ts_ckpt_series_saved(c->checkpoint.dir, c->checkpoint.prefix, path, c->checkpoint.keep_max); /* latest, keep_max */
  if (r < 0) rc = r;
  if (!rc) ts__progress_message(&t->prog, "checkpoint %s", path);
  return rc;
}

/* checkpoint.resume: auto. The newest checkpoint of the series that loads; one that fails its
 * checks (truncated, corrupt: its CRC-32, header or sizes; ts_ckpt_load says TS_EFORMAT, or
 * TS_EIO reading it) is skipped with a warning and the next older one tried, so a job killed
 * while its newest file was damaged still resumes from the last good one. Every rank reads the
 * same files, so every rank makes the same choice. *resumed = 0 (and path "") when the series is
 * empty; when it has checkpoints but none loads, TS_EFORMAT naming the newest and why. Other
 * failures (another model or config under checkpoint.strict) are returned as they are: an older
 * checkpoint of the same run would fail the same way. */
static int resume_auto(ts_trainer *t, char *path, size_t cap, int *resumed) {
  const ts_config *c = &t->cfg;
  *resumed = 0;
  int64_t before = INT64_MAX, step = 0;
  int skipped = 0;
  char first[2200] = "", why[1024] = "";
  for (;;) {
    int rc = ts_ckpt_find(c->checkpoint.dir, c->checkpoint.prefix, before, path, cap, &step);
    if (rc == TS_ENOTFOUND && !skipped) return TS_OK; /* nothing saved yet: a fresh start */
    if (rc == TS_ENOTFOUND)
      return ts_error_set(TS_EFORMAT, "checkpoint.resume: auto: none of the %d checkpoint%s in %s can be read; "
                          "the newest, %s: %s", skipped, skipped == 1 ? "" : "s", c->checkpoint.dir, first, why);
    if (rc) return rc;
    rc = ts_trainer_load(t, path, c->checkpoint.strict, 1);
    if (rc != TS_EFORMAT && rc != TS_EIO) {
      if (!rc) *resumed = 1;
      return rc;
    }
    if (!skipped++) {
      snprintf(first, sizeof first, "%s", path);
      snprintf(why, sizeof why, "%s", ts_last_error());
    }
    if (t->run->rank == 0)
      ts_log(TS_LOG_WARN, "checkpoint.resume: auto: skipping a checkpoint that cannot be read: %s; trying the "
             "one before it", ts_last_error());
    before = step;
  }
}

/* ---- lifetime ---- */
static int trainer_create(const ts_config *cfg_in, ts_model_fn fn, void *user, ts_trainer **out) {
  *out = NULL;
  ts_trainer *t = calloc(1, sizeof *t);
  if (!t) return ts_error_set(TS_ENOMEM, "trainer: out of memory");
  ts_config *c = &t->cfg;
  const ts_dist_vt *vt;
  ts_dist_config dc;
  ts_strategy_set *set = NULL;
  int rc = ts_config_copy(c, cfg_in); /* the trainer's own (freed by ts_trainer_free) */
  if (!rc) rc = ts_config_validate(c);
  if (!rc) rc = ts_config_max_steps(&t->max_steps); /* TESSERA_MAX_STEPS */
  ts__ckpt_set_config_diff(ts__config_diff); /* a resume refused for another config names the keys */
  int jr, jn; /* warnings about the config are said once, by rank 0 of the job */
  ts_job_rank(&jr, &jn);
  if (!rc) { /* keys set that change nothing */
    char unused[1500];
    if (ts__config_unused(c, unused, sizeof unused) && jr == 0)
      ts_log(TS_LOG_WARN, "%s: keys set but unused: %s", c->source[0] ? c->source : "config", unused);
  }
  t->cap_steps0 = c->train.steps;
  int gpu_id = -1;
  if (!rc) rc = ts__train_device_check(c, &gpu_id); /* before anything is built */
  if (!rc && jr == 0) ts__train_amp_note(c);
  if (!rc && c->parallel.mode == TS_PARALLEL_AUTO) { /* the searched plan for the job's ranks */
    ts_comm *w = NULL;
    /* a callback's model (the whole network: C API, Python cells) is built through it for every
     * candidate, as the zoo's is */
    rc = ts_comm_init(NULL, NULL);
    if (!rc) rc = ts_comm_world(&w);
    if (!rc) rc = ts__train_auto(c, ts_comm_size(w), fn, user, &t->plan);
    t->has_plan = !rc;
  }
  if (!rc) rc = ts__train_layout(c, fn, user, &vt, &dc, &t->model);
  /* a searched plan goes to the distribution config as a value (its degrees, micro-batching,
   * shard stage, recompute) and its strategies as a set, below */
  if (!rc && t->has_plan) ts__autoplan_dist(&t->plan, c->train.batch_size, &dc, &vt, NULL);
  if (!rc && gpu_id >= 0) dc.device = 1, dc.device_id = gpu_id; /* the layout runs the job there */
  if (rc) goto fail;
  ts_comm_set_timeout(c->parallel.comm_timeout);
  if (c->parallel.debug_check) ts_comm_set_debug_check(1);
  if ((rc = ts_dist_create(vt, &dc, &t->model, 0, 0, &t->dist))) goto fail;
  t->run = ts_dist_get(t->dist);
  if (c->parallel.device_num > 0 && c->parallel.device_num != t->run->size) {
    rc = ts_error_set(TS_ECONFIG, "%s: parallel.device_num is %d, but the job has %d rank%s (mpirun -n / tessera launch "
                      "-n %d, or set parallel.device_num: %d or 0)", c->source[0] ? c->source : "config",
                      c->parallel.device_num, t->run->size, t->run->size == 1 ? "" : "s", c->parallel.device_num,
                      t->run->size);
    goto fail;
  }
  t->job_metrics = c->log.metrics[0] != 0; /* the end record's maximum over the ranks needs every rank */
  if (t->run->rank != 0) { /* only rank 0 talks and writes */
    c->log.progress = TS_PROGRESS_OFF;
    c->log.metrics[0] = 0;
    c->log.plot[0] = 0;
    c->log.tensorboard[0] = 0;
  }
  /* checkpoint.dir per rank: who writes the trainer's checkpoints (collective) */
  if ((rc = ts__ckpt_dirs(t))) goto fail;
  /* temp files of saves a killed run left behind (only the atomic writer's own names) */
  if (t->ckpt_writer && c->checkpoint.dir[0] && ts_ckpt_clean_temps(c->checkpoint.dir, c->checkpoint.prefix) < 0)
    ts_log(TS_LOG_WARN, "%s", ts_last_error());
  if (c->train.threads > 0) ts_threads_set(c->train.threads);
  ts_callback lm = ts_callback_loss_monitor();
  ts_trainer_add_callback(t, &lm);
  t->eb = c->train.eval_batch_size;
  t->accum = dc.accum; /* micro-steps per step (a pipeline's micro-batches) */
  if ((rc = ts__train_prepare(t)) || (!t->has_plan && (rc = ts__train_strategies(c, t->run->size, &set)))) goto fail;
  if ((rc = ts_config_dump_string(c, &t->cfg_yaml))) goto fail; /* with what prepare resolved */
  t->model.strategies = t->has_plan ? t->plan.strategies : set; /* the user's (parsed), or the plan's */
  ts_dist_set_span(t->dist, dist_span, t);
  if (!t->has_plan && (rc = ts__train_memory_precheck(t, fn, user))) { /* a searched plan fits it already */
    t->model.strategies = NULL;
    ts_strategy_set_free(set);
    goto fail;
  }
  rc = ts_dist_build(t->dist, &t->model);
  t->model.strategies = NULL;
  ts_strategy_set_free(set);
  if (rc || (rc = ts__train_memory_check(t))) goto fail; /* train.max_memory_mb, before anything large */
  const ts_strategy_set *inforce = ts_dist_strategies(t->dist);
  if (c->parallel.strategy_ckpt_save_file[0] && inforce && t->run->rank == 0 &&
      (rc = ts_strategy_set_save(inforce, c->parallel.strategy_ckpt_save_file))) {
    rc = ts_error_wrap(rc, "parallel.strategy_ckpt_save_file");
    goto fail;
  }
  if ((rc = make_train_pipe(t))) goto fail;
  if ((rc = ts__train_optim(c, t->run->params, t->dist, &t->opt, &t->segs, &t->nseg)) ||
      (rc = ts_config_lr_schedule(c, t->steps_per_epoch, &t->sched)))
    goto fail;
  if ((rc = ts_dist_start(t->dist))) {
    if (rc == TS_ECONFIG) rc = ts_error_wrap(rc, "%s", c->source[0] ? c->source : "config");
    goto fail;
  }
  t->whole_local = whole_is_local(t);
  ts_loss_scale_config lsc;
  ts_config_loss_scale(c, &lsc); /* auto and the default value resolved */
  if ((rc = ts_loss_scaler_init(&t->scaler, &lsc)) || (rc = ts_dist_set_loss_scale(t->dist, (float)t->scaler.scale))) {
    rc = ts_error_as_config(ts_error_wrap(rc, "train.loss_scale"));
    goto fail;
  }
  if (t->accum > 1) {
    size_t n = ts_dist_accum_numel(t->dist); /* 0: the dist accumulates the reduced shard itself */
    t->acc = ts_alloc(sizeof(float) * (n ? n : 1));
    t->acc_numel = n;
    if (!t->acc) {
      rc = ts_error_set(TS_ENOMEM, "trainer: cannot allocate the gradient accumulator");
      goto fail;
    }
  }
  if ((rc = ts__tprof_create(t))) goto fail; /* log.profile (collective: clocks aligned) */
  /* resume */
  const char *res = c->checkpoint.resume;
  int resumed = 0;
  char path[2200]; /* outlives the block: res may point here when the progress line is printed */
  if (!strcmp(res, "auto")) {
    if ((rc = resume_auto(t, path, sizeof path, &resumed))) goto fail;
    res = path;
  } else if (res[0]) {
    if ((rc = ts_trainer_load(t, res, c->checkpoint.strict, 1))) goto fail;
    resumed = 1;
  }
  if ((rc = ts__progress_open(&t->prog, c, t->total_steps, t->steps_per_epoch, resumed))) goto fail;
  if (c->parallel.all_reduce_fusion_config.n) { /* every split point (any number: 12 bytes each at most) */
    int np = c->parallel.all_reduce_fusion_config.n;
    size_t cap = 13 * (size_t)np + 1, n = 0;
    char *pts = malloc(cap);
    for (int i = 0; pts && i < np && n < cap; i++)
      n += (size_t)snprintf(pts + n, cap - n, "%s%d", i ? ", " : "", c->parallel.all_reduce_fusion_config.v[i]);
    ts__progress_message(&t->prog, "gradient buckets: %d, split at gradients [%s] (parallel.all_reduce_fusion_config)",
                         ts_dist_grad_buckets(t->dist), pts ? pts : "...");
    free(pts);
  }
  if (resumed) ts__progress_message(&t->prog, "resumed from %s at step %lld (epoch %lld, batch %lld)", res,
                                    (long long)t->step, (long long)t->epoch + 1, (long long)t->batch);
  *out = t;
  return TS_OK;
fail:
  ts_trainer_free(t);
  return rc;
}

int ts_trainer_create(const ts_config *cfg, ts_trainer **out) { return trainer_create(cfg, NULL, NULL, out); }

int ts_trainer_create_custom(const ts_config *cfg, ts_model_fn model, void *user, ts_trainer **out) {
  if (!model) {
    *out = NULL;
    return ts_error_set(TS_EINVAL, "ts_trainer_create_custom: no model builder");
  }
  return trainer_create(cfg, model, user, out);
}

void ts_trainer_free(ts_trainer *t) {
  if (!t) return;
  ts__ckpt_async_free(t); /* joins a writer still running (an error path) */
  ts__progress_close(&t->prog);
  ts__tprof_free(t->prof); /* before the plan it hooks */
  ts_pipeline_free(t->train_pipe);
  ts_optim_free(t->opt);
  ts_dist_free(t->dist);
  ts_source_free(t->train_src);
  ts_source_free(t->test_src);
  ts_free(t->acc);
  free(t->segs);
  free(t->cfg_yaml);
  ts_autoplan_free(&t->plan);
  ts_config_free(&t->cfg);
  free(t);
}

/* ---- evaluation ---- */
static size_t sample_bytes(const ts_trainer *t) {
  return (size_t)ts_shape_numel(&t->model.sample) * ts_dtype_size(t->model.dtype);
}
/* Row r's label (the target token of a text model) in batch b. */
static int64_t eval_label(const ts_trainer *t, const ts_batch *b, int64_t r) {
  return t->model.text ? ((const int32_t *)b->target.data)[r] : ((const int32_t *)b->labels.data)[r];
}

/* An evaluation batch's input: n <= t->eb samples x into xbuf (room for t->eb), the rest zeros. */
static void eval_input(const ts_trainer *t, char *xbuf, const void *x, int64_t n) {
  size_t xbytes = sample_bytes(t);
  if (n) memcpy(xbuf, x, xbytes * (size_t)n);
  if (n < t->eb) memset(xbuf + xbytes * (size_t)n, 0, xbytes * (size_t)(t->eb - n));
}

/* One evaluation batch: n <= t->eb samples x; the forward (the rank feeds its piece) and the
 * metrics of its first nr rows against lab into rows, computed where the logits are
 * (ts_dist_eval_rows). */
static int eval_batch(ts_trainer *t, char *xbuf, const void *x, int64_t n, const int32_t *lab, int64_t nr,
                      ts__eval_row *rows) {
  eval_input(t, xbuf, x, n);
  return ts_dist_eval_rows(t->dist, xbuf, lab, nr, rows);
}

int ts_trainer_evaluate(ts_trainer *t, ts_eval_info *out) {
  memset(out, 0, sizeof *out);
  if (!t->test_src) return ts_error_set(TS_ENOTFOUND, "evaluate: the data set has no test split");
  if (t->model.values)
    return ts_error_set(TS_EINVAL, "evaluate: the targets are float32 values (a regression), and the trainer's "
                        "evaluation computes classification figures (loss of the softmax, top-1, top-5): compute "
                        "the figures from the model's outputs (ts_trainer_forward; Python: Model.predict, or "
                        "Model.eval with metrics such as nn.MSE())");
  double t0 = ts_time_now();
  const ts_dist_run *r = t->run;
  int src = ts_dist_sync_states(t->dist);
  if (src) return src;
  ts_source *view = NULL; /* each rank evaluates one contiguous part, or every rank everything */
  int split = r->eval_split;
  int64_t total = ts_source_len(t->test_src), all = total;
  if (t->max_steps > 0 && total > t->max_steps * t->eb) { /* TESSERA_MAX_STEPS: its first N batches */
    total = t->max_steps * t->eb;
    if (!t->eval_capped_said && r->rank == 0)
      ts_log(TS_LOG_WARN, "TESSERA_MAX_STEPS=%lld: evaluations cover the test split's first %lld of its %lld samples",
             (long long)t->max_steps, (long long)total, (long long)all);
    t->eval_capped_said = 1;
  }
  if (split || total < all) {
    int64_t lo = split ? total * r->rank / r->size : 0, hi = split ? total * (r->rank + 1) / r->size : total;
    int e = ts__source_view(t->test_src, lo, hi - lo, &view);
    if (e) return e;
  }
  ts_pipeline_config pc = ts_pipeline_config_default();
  pc.source = view ? view : t->test_src;
  pc.transforms = t->tf_test;
  pc.ntransforms = t->ntf_test;
  pc.num_workers = t->cfg.data.num_workers;
  pc.batch_size = (int)t->eb;
  pc.drop_remainder = 0;
  pc.epochs = 1;
  pc.seed = t->cfg.train.seed;
  pc.expect_shape = t->model.sample;
  pc.expect_dtype = t->model.dtype;
  pc.name = "test split";
  ts_pipeline *p = NULL;
  int rc = ts_source_len(pc.source) > 0 ? ts_pipeline_create(&pc, &p) : TS_OK;
  if (rc) {
    ts_source_free(view);
    return rc;
  }
  ts_shape ls = r->logits_shape;
  int64_t C = ls.dims[ls.ndim - 1];
  int64_t rows_per_sample = ts_shape_numel(&ls) / C / t->eb;
  char *xbuf = ts_calloc(sample_bytes(t) * (size_t)t->eb);
  ts__eval_row *rows = malloc(sizeof(ts__eval_row) * (size_t)(t->eb * rows_per_sample)); /* a batch's */
  if (!xbuf || !rows) {
    ts_free(xbuf), free(rows);
    ts_pipeline_free(p);
    ts_source_free(view);
    return ts_error_set(TS_ENOMEM, "evaluation: out of memory");
  }
  int64_t first = split ? total * r->rank / r->size : 0; /* dataset index of the view's 0 */
  double loss = 0;
  int64_t n = 0, c1 = 0, c5 = 0, bad = 0; /* bad: rows with non-finite logits, counted as wrong */
  ts_batch b;
  while (p && rc == TS_OK && (rc = ts_pipeline_next(p, &b)) == TS_OK && b.size > 0) {
    const int64_t nr = (int64_t)b.size * rows_per_sample;
    for (int64_t r = 0; r < nr; r++) { /* the labels first, in order: the first out of range is the error */
      int64_t lab = eval_label(t, &b, r);
      if (lab < 0 || lab >= C) {
        rc = ts_error_set(TS_ERANGE, "test split (%s): sample %lld has %s %lld, outside the model's [0, %lld)",
                          ts_source_kind(t->test_src), (long long)(first + b.index * t->eb + r / rows_per_sample),
                          t->model.text ? "target token" : "label", (long long)lab, (long long)C);
        break;
      }
    }
    if (rc) break;
    const int32_t *lab = t->model.text ? (const int32_t *)b.target.data : (const int32_t *)b.labels.data;
    if ((rc = eval_batch(t, xbuf, b.data.data, b.size, lab, nr, rows))) break;
    for (int64_t r = 0; r < nr; r++) { /* summed in row order: the same sums whatever computed the rows */
      n++;
      if (!rows[r].finite) { /* neither a prediction nor a loss: wrong, and said */
        bad++;
        continue;
      }
      loss += rows[r].nll;
      c1 += rows[r].above < 1;
      c5 += rows[r].above < 5;
    }
  }
  ts_pipeline_free(p);
  ts_source_free(view);
  ts_free(xbuf);
  free(rows);
  if (rc) return ts_error_wrap(rc, "evaluation");
  if (split) { /* sum the counts and losses of every rank's part */
    int64_t cnt[4] = {n, c1, c5, bad};
    if ((rc = ts_dist_sum(t->dist, cnt, 4, &loss))) return ts_error_wrap(rc, "evaluation: reducing metrics");
    n = cnt[0];
    c1 = cnt[1];
    c5 = cnt[2];
    bad = cnt[3];
  }
  if (bad) {
    ts_log(TS_LOG_WARN, "evaluation at step %lld: %lld of %lld rows have non-finite logits (NaN or Inf): counted "
           "as wrong; the loss is NaN", (long long)t->step, (long long)bad, (long long)n);
    loss = NAN;
  }
  out->step = t->step;
  out->epoch = t->epoch > 0 && t->batch == 0 ? t->epoch - 1 : t->epoch;
  out->samples = n;
  out->loss = n ? loss / (double)n : NAN;
  out->top1 = n ? (double)c1 / (double)n : 0;
  out->top5 = n ? (double)c5 / (double)n : 0;
  out->seconds = ts_time_now() - t0;
  return TS_OK;
}

static int run_eval(ts_trainer *t) {
  if (!t->test_src) return TS_OK;
  int rc = ts_trainer_evaluate(t, &t->last_eval);
  if (rc) return rc;
  t->have_eval = 1;
  if ((rc = ts__progress_eval(&t->prog, &t->last_eval))) return rc;
  for (int i = 0; i < t->ncb; i++)
    if (t->cb[i].on_eval_end && (rc = t->cb[i].on_eval_end(t, &t->last_eval, t->cb[i].user))) return rc;
  return TS_OK;
}

/* ---- one optimizer step over `accum` micro-batches of one batch ---- */
/* A step's first half: forward and backward of the batch (the layout's micro-steps) and the
 * gradients reduced over the ranks into *g; info's loss and communication times. */
static int train_grads(ts_trainer *t, const ts_batch *b, ts_step_info *info, float **gout) {
  const ts_dist_run *r = t->run;
  const char *lab = t->model.text || t->model.values ? b->target.data : b->labels.data;
  double loss = 0;
  float *g = NULL;
  ts_dist_step_begin(t->dist, ts_params_grads(r->params));
  /* the layout runs the micro-steps (in order, or by its pipeline schedule) */
  int rc = ts_dist_forward_backward(t->dist, b->data.data, lab, t->step, t->acc, &loss, &g);
  if (rc) return ts_error_wrap(rc, "step %lld", (long long)t->step + 1);
  double t0 = ts_time_now();
  rc = ts_dist_step_end(t->dist, g, &loss, &info->comm_wait_ms);
  double wall, bubble, recv_wait;
  if ((info->pipelined = ts_dist_pipeline_times(t->dist, &wall, &bubble, &recv_wait))) {
    info->bubble_ms = 1e3 * bubble;
    info->p2p_wait_ms = 1e3 * recv_wait;
    info->bubble_fraction = wall > 0 ? bubble / wall : 0;
  }
  if (rc) return ts_error_wrap(rc, "step %lld", (long long)t->step + 1);
  if (r->size > 1) ts__tprof_span(t->prof, "grad_reduce_wait", TS_PROF_COMM, t0, ts_time_now());
  info->loss = loss;
  *gout = g;
  return TS_OK;
}

/* The second half: the global norm, clipping, the loss scale and the optimizer step with g. */
static int train_apply(ts_trainer *t, float *g, ts_step_info *info) {
  const ts_dist_run *r = t->run;
  int rc;
  double t1 = ts_time_now();
  /* the global norm, unscaled and clipped in one pass; an overflow (inf/NaN in some gradient of
   * some rank) is seen by every rank alike (the norm is global) */
  float norm = 0;
  int overflow = 0;
  double scale = t->scaler.scale;
  if ((rc = ts_dist_clip_scaled(t->dist, g, (float)t->cfg.optimizer.clip_grad_norm, (float)(1.0 / scale), &norm,
                                &overflow)))
    return rc;
  double t2 = ts_time_now();
  ts__tprof_span(t->prof, "grad_norm", TS_PROF_OPTIMIZER, t1, t2);
  float lr = ts_lr_at(&t->sched, t->step);
  int skip = ts_loss_scaler_update(&t->scaler, overflow);
  /* skipped: no update at all (parameters, optimizer state and its step count as they were; under
   * a sharded optimizer nothing changed, so nothing is gathered) */
  if (!skip && (rc = ts_dist_optim_step(t->dist, t->opt, ts_params_data(r->params), g, lr))) return rc;
  ts__tprof_span(t->prof, "optimizer", TS_PROF_OPTIMIZER, t2, ts_time_now());
  info->lr = lr;
  info->grad_norm = norm;
  info->loss_scale = scale;
  info->overflow = overflow;
  info->skipped = skip;
  if (skip && t->scaler.cfg.kind == TS_LOSS_SCALE_DYNAMIC && !(scale > t->scaler.cfg.min_scale))
    return ts_error_set(TS_EDIVERGED, "step %lld: the gradients are not finite at the minimum loss scale %g "
                        "(train.loss_scale_min): training diverged", (long long)t->step + 1, scale);
  if (skip)
    ts_log(TS_LOG_WARN, "step %lld: gradients overflowed (inf/NaN) at loss scale %g: step skipped; loss scale %g",
           (long long)t->step + 1, scale, t->scaler.scale);
  if (t->scaler.scale != scale && (rc = ts_dist_set_loss_scale(t->dist, (float)t->scaler.scale))) return rc;
  return TS_OK;
}

/* A step or a fit while a ts_trainer_grad_batch's gradients wait for ts_trainer_apply_grads. */
static int pending_refused(const ts_trainer *t) {
  return ts_error_set(TS_EINVAL, "step %lld: the gradients of a ts_trainer_grad_batch are pending: apply them "
                      "(ts_trainer_apply_grads) first", (long long)t->step + 1);
}

static int train_step(ts_trainer *t, const ts_batch *b, ts_step_info *info) {
  float *g = NULL;
  int rc = train_grads(t, b, info, &g);
  return rc ? rc : train_apply(t, g, info);
}

int ts_trainer_fit(ts_trainer *t) {
  int rc = TS_OK;
  if (t->grads_pending) return pending_refused(t);
  const ts_config *c = &t->cfg;
  ts_batch b;
  double t_prev = ts_time_now();
  int64_t step0 = t->step, applied = 0; /* the end line: steps trained here, steps not skipped */
  while (t->step < t->total_steps && !t->stop) {
    ts__tprof_step_begin(t->prof, t->step + 1, t_prev);
    double td = ts_time_now();
    if ((rc = ts_pipeline_next(t->train_pipe, &b))) break;
    ts__tprof_span(t->prof, "data", TS_PROF_DATA, td, ts_time_now());
    if (b.size != c->train.batch_size / t->run->data_parts) {
      rc = ts_error_set(TS_EINVAL, "trainer: pipeline gave a batch of %d, expected %d", b.size,
                        c->train.batch_size / t->run->data_parts);
      break;
    }
    ts_step_info info;
    memset(&info, 0, sizeof info);
    info.epoch = t->epoch;
    info.batch = t->batch;
    if ((rc = train_step(t, &b, &info))) break;
    t->step++;
    t->batch++;
    double now = ts_time_now();
    ts__tprof_step_end(t->prof, now, &info);
    info.step = t->step;
    info.step_ms = 1e3 * (now - t_prev);
    info.samples_per_s = (double)c->train.batch_size / (now - t_prev);
    t_prev = now;
    t->last_loss = info.loss;
    applied += !info.skipped;
    if ((rc = ts__progress_step(&t->prog, &info))) break;
    for (int i = 0; i < t->ncb && rc == TS_OK; i++)
      if (t->cb[i].on_step_end) rc = t->cb[i].on_step_end(t, &info, t->cb[i].user);
    if (rc) break;
    int epoch_end = t->batch == t->steps_per_epoch;
    if (epoch_end) {
      t->epoch++;
      t->batch = 0;
    }
    int last = t->step == t->total_steps;
    int do_eval = (c->train.eval_every > 0 && t->step % c->train.eval_every == 0) ||
                  (c->train.eval_every == 0 && epoch_end) || (last && c->train.eval_every >= -1);
    double te = ts_time_now();
    if (do_eval && (rc = run_eval(t))) break;
    if (do_eval) ts__tprof_span(t->prof, "evaluation", TS_PROF_EVAL, te, ts_time_now());
    if (epoch_end)
      for (int i = 0; i < t->ncb && rc == TS_OK; i++)
        if (t->cb[i].on_epoch_end) rc = t->cb[i].on_epoch_end(t, t->epoch - 1, t->cb[i].user);
    if (rc) break;
    if (c->checkpoint.dir[0]) {
      int save = (c->checkpoint.save_steps > 0 && t->step % c->checkpoint.save_steps == 0) ||
                 (c->checkpoint.save_steps <= 0 && c->checkpoint.save_epochs > 0 && epoch_end &&
                  t->epoch % c->checkpoint.save_epochs == 0) ||
                 (last && c->checkpoint.save_last);
      double tc = ts_time_now();
      if (save && (rc = save_checkpoint(t))) break;
      if (save) ts__tprof_span(t->prof, "checkpoint", TS_PROF_CKPT, tc, ts_time_now());
    }
    t_prev = ts_time_now(); /* evaluation and checkpoints are not step time */
  }
  if (rc == TS_OK && t->stop && c->checkpoint.dir[0] && c->checkpoint.save_last) rc = save_checkpoint(t);
  /* the background writer's last save: done before the end is reported (collective when every
   * rank got here without an error; an error path only joins it and logs its failure) */
  int arc = ts__ckpt_async_wait(t, rc == TS_OK);
  if (rc == TS_OK) rc = arc;
  for (int i = 0; i < t->ncb && rc == TS_OK; i++)
    if (t->cb[i].on_train_end) rc = t->cb[i].on_train_end(t, t->cb[i].user);
  if (rc == TS_OK) rc = ts__tprof_finish(t); /* collective; rank 0 reports */
  char mem[1024] = "";
  if (rc == TS_OK) rc = ts__train_memory_record(t, mem, sizeof mem); /* collective with metrics: the max over the ranks */
  if (rc == TS_OK) /* a failed run reports its error, not a summary */
    rc = ts__progress_end(&t->prog, t->step, t->last_loss, t->have_eval ? t->last_eval.top1 : 0, t->have_eval, mem,
                          t->step - step0, applied);
  if (rc == TS_OK && c->log.plot[0] && c->log.metrics[0]) {
    if (t->prog.metrics) fflush(t->prog.metrics);
    ts_plot_options po = {0};
    if (c->log.plot_size[0]) rc = ts_plot_parse_size(c->log.plot_size, "log.plot_size", &po.width, &po.height);
    if (!rc) rc = ts_plot_metrics_with(c->log.metrics, c->log.plot, &po);
    if (!rc) ts__progress_message(&t->prog, "curves: %s", c->log.plot);
  }
  return rc;
}

/* A caller's batch: this rank's rows of the model's sample shape and dtype, with labels. */
static int batch_check(const ts_trainer *t, const ts_batch *b) {
  int64_t want = t->cfg.train.batch_size / t->run->data_parts;
  ts_shape s = b->data.shape;
  int tg = t->model.text || t->model.values; /* targets, not labels */
  int ok = b->size == want && b->data.dtype == t->model.dtype && s.ndim == t->model.sample.ndim + 1 &&
           s.dims[0] == want && (tg ? b->target.data != NULL : b->labels.data != NULL);
  for (int k = 0; ok && k < t->model.sample.ndim; k++) ok = s.dims[k + 1] == t->model.sample.dims[k];
  if (ok && t->model.values) { /* a regression's targets: (rows, target...) f32 */
    ts_shape want_t = ts_shape_batch(want, &t->model.target);
    if (b->target.dtype != TS_F32 || !ts_shape_equal(&b->target.shape, &want_t)) {
      char got[96], exp[96];
      ts_shape_str(&b->target.shape, got, sizeof got);
      ts_shape_str(&want_t, exp, sizeof exp);
      return ts_error_set(TS_ESHAPE, "step %lld: the batch's targets are %s %s, the model was built for %s f32",
                          (long long)t->step + 1, got, ts_dtype_name(b->target.dtype), exp);
    }
  }
  if (!ok) {
    char got[96], exp[96];
    ts_shape e = t->model.sample;
    ts_shape_str(&s, got, sizeof got);
    ts_shape_str(&e, exp, sizeof exp);
    return ts_error_set(TS_ESHAPE, "step %lld: a batch of %d samples %s %s%s, but this rank's batch is %lld samples of "
                        "%s %s (train.batch_size %d over %d data-parallel part%s)", (long long)t->step + 1, b->size, got,
                        ts_dtype_name(b->data.dtype), (tg ? b->target.data : b->labels.data) ? "" : " without labels",
                        (long long)want, exp, ts_dtype_name(t->model.dtype), t->cfg.train.batch_size,
                        t->run->data_parts, t->run->data_parts == 1 ? "" : "s");
  }
  if (t->grads_pending) return pending_refused(t);
  return TS_OK;
}

/* A caller's step done: the count, its times (from t0), the step callbacks. */
static int step_done(ts_trainer *t, ts_step_info *info, double t0) {
  int rc = TS_OK;
  t->step++;
  double now = ts_time_now();
  info->step = t->step;
  info->step_ms = 1e3 * (now - t0);
  info->samples_per_s = (double)t->cfg.train.batch_size / (now - t0);
  t->last_loss = info->loss;
  for (int i = 0; i < t->ncb && rc == TS_OK; i++)
    if (t->cb[i].on_step_end) rc = t->cb[i].on_step_end(t, info, t->cb[i].user);
  return rc;
}

int ts_trainer_step_batch(ts_trainer *t, const ts_batch *b, ts_step_info *info) {
  if (!t || !b || !info) return ts_error_set(TS_EINVAL, "ts_trainer_step_batch: NULL argument");
  memset(info, 0, sizeof *info);
  int rc = batch_check(t, b);
  if (rc) return rc;
  info->epoch = t->epoch;
  info->batch = t->batch;
  double t0 = ts_time_now();
  if ((rc = train_step(t, b, info))) return rc;
  return step_done(t, info, t0);
}

int ts_trainer_grad_batch(ts_trainer *t, const ts_batch *b, ts_step_info *info) {
  if (!t || !b || !info) return ts_error_set(TS_EINVAL, "ts_trainer_grad_batch: NULL argument");
  memset(info, 0, sizeof *info);
  int rc = batch_check(t, b);
  if (rc) return rc;
  info->epoch = t->epoch;
  info->batch = t->batch;
  t->pending_t0 = ts_time_now();
  if ((rc = train_grads(t, b, info, &t->pending_g))) return rc;
  t->pending_info = *info;
  t->grads_pending = 1;
  return TS_OK;
}

int ts_trainer_apply_grads(ts_trainer *t, ts_step_info *info) {
  if (!t || !info) return ts_error_set(TS_EINVAL, "ts_trainer_apply_grads: NULL argument");
  if (!t->grads_pending)
    return ts_error_set(TS_EINVAL, "step %lld: no gradients to apply (ts_trainer_grad_batch computes them)",
                        (long long)t->step + 1);
  *info = t->pending_info;
  t->grads_pending = 0;
  int rc = train_apply(t, t->pending_g, info);
  return rc ? rc : step_done(t, info, t->pending_t0);
}

int ts_trainer_forward(ts_trainer *t, const void *x, int64_t n, float *logits, size_t cap) {
  if (!t || (!x && n) || (!logits && n)) return ts_error_set(TS_EINVAL, "ts_trainer_forward: NULL argument");
  if (n < 0 || n > t->eb)
    return ts_error_set(TS_EINVAL, "ts_trainer_forward: %lld samples, at most the evaluation batch %lld "
                        "(train.eval_batch_size) at a time", (long long)n, (long long)t->eb);
  int rc = ts_dist_sync_states(t->dist);
  if (rc) return rc;
  ts_shape ls = t->run->logits_shape;
  size_t per = (size_t)(ts_shape_numel(&ls) / t->eb); /* logits per sample */
  if (cap < per * (size_t)n)
    return ts_error_set(TS_EINVAL, "ts_trainer_forward: room for %zu logits, %lld samples need %zu", cap, (long long)n,
                        per * (size_t)n);
  char *xbuf = ts_alloc(sample_bytes(t) * (size_t)t->eb);
  if (!xbuf) return ts_error_set(TS_ENOMEM, "ts_trainer_forward: out of memory");
  const float *lg = NULL;
  eval_input(t, xbuf, x, n);
  rc = ts_dist_eval_forward(t->dist, xbuf, &lg);
  if (!rc && n) memcpy(logits, lg, sizeof(float) * per * (size_t)n);
  ts_free(xbuf);
  return rc;
}

int64_t ts_trainer_forward_batch(const ts_trainer *t) { return t ? t->eb : 0; }

void ts_trainer_sample(const ts_trainer *t, ts_shape *shape, ts_dtype *dtype) {
  if (shape) *shape = t->model.sample;
  if (dtype) *dtype = t->model.dtype;
}

size_t ts_trainer_logits_per_sample(const ts_trainer *t) {
  if (!t || t->eb <= 0) return 0;
  ts_shape ls = t->run->logits_shape;
  return (size_t)(ts_shape_numel(&ls) / t->eb);
}

int ts_trainer_continue(ts_trainer *t, int64_t epochs) {
  ts_config *c = &t->cfg;
  int64_t spe = t->steps_per_epoch > 0 ? t->steps_per_epoch : 1;
  if (epochs < 0 || epochs > (INT64_C(1) << 40) / spe)
    return ts_error_set(TS_EINVAL, "ts_trainer_continue: %lld more epochs", (long long)epochs);
  int64_t steps0 = c->train.steps, total0 = t->total_steps;
  int capped = t->max_steps > 0 && t->cap_steps0 <= 0 && steps0 > 0; /* train.steps is TESSERA_MAX_STEPS's */
  if (steps0 > 0 && !capped)
    return ts_error_set(TS_EINVAL, "ts_trainer_continue: train.steps (%lld) fixes the run's length; continue by "
                        "epochs without it", (long long)c->train.steps);
  int64_t total = t->step + epochs * spe, ep = (total + spe - 1) / spe;
  if (ep > 1000000000) return ts_error_set(TS_EINVAL, "ts_trainer_continue: %lld epochs in all", (long long)ep);
  int old = c->train.epochs;
  c->train.epochs = (int)ep; /* the run's length as checkpoints and the schedule see it */
  c->train.steps = 0;
  t->total_steps = total;
  apply_max_steps(t, t->step); /* at most TESSERA_MAX_STEPS more (train.steps then says where it stops) */
  ts_lr_schedule s;
  char *yaml = NULL; /* what checkpoints record: the longer run's config */
  int rc = ts_config_lr_schedule(c, t->steps_per_epoch, &s);
  if (!rc) rc = ts_config_dump_string(c, &yaml);
  if (rc) {
    c->train.epochs = old;
    c->train.steps = steps0;
    t->total_steps = total0;
    return rc;
  }
  free(t->cfg_yaml);
  t->cfg_yaml = yaml;
  t->sched = s;
  t->prog.total_steps = t->total_steps;
  t->prog.epochs = (t->total_steps + spe - 1) / spe;
  t->stop = 0;
  return TS_OK;
}

int ts_trainer_set_lr_table(ts_trainer *t, const float *rates, int64_t n) {
  if (!t || !rates || n <= 0 || n > INT_MAX)
    return ts_error_set(TS_EINVAL, "ts_trainer_set_lr_table: %lld rates", (long long)n);
  ts_config *c = &t->cfg;
  typeof(c->optimizer.schedule) old = c->optimizer.schedule; /* its values stay owned until the end */
  float *v = malloc(sizeof(float) * (size_t)n);
  if (!v) return ts_error_set(TS_ENOMEM, "ts_trainer_set_lr_table: %lld rates: out of memory", (long long)n);
  memcpy(v, rates, sizeof(float) * (size_t)n);
  c->optimizer.schedule.name = TS_LR_TABLE;
  c->optimizer.schedule.values.v = v;
  c->optimizer.schedule.values.n = (int)n;
  c->optimizer.schedule.warmup_steps = 0;
  c->optimizer.schedule.warmup_epochs = 0;
  ts_lr_schedule s;
  char *yaml = NULL;
  int rc = ts_config_lr_schedule(c, t->steps_per_epoch, &s);
  if (!rc) rc = ts_config_dump_string(c, &yaml);
  if (rc) {
    free(v);
    c->optimizer.schedule = old;
    return rc;
  }
  free(old.values.v);
  free(t->cfg_yaml);
  t->cfg_yaml = yaml;
  t->sched = s;
  return TS_OK;
}

int64_t ts_trainer_lr_steps(const ts_trainer *t) { return t ? t->sched.total_steps : 0; }

/* ---- built-in callbacks ---- */
static int loss_monitor(ts_trainer *t, const ts_step_info *s, void *u) {
  (void)t;
  (void)u;
  if (!isfinite(s->loss) && !s->skipped) /* a skipped step changed nothing (train.loss_scale) */
    return ts_error_set(TS_EDIVERGED, "training diverged: loss is %g at step %lld (lr %g)", s->loss,
                        (long long)s->step, s->lr);
  return TS_OK;
}

ts_callback ts_callback_loss_monitor(void) {
  ts_callback cb = {"loss_monitor", loss_monitor, NULL, NULL, NULL, NULL};
  return cb;
}

static int early_stop(ts_trainer *t, const ts_eval_info *e, void *u) {
  ts_early_stop_state *s = u;
  if (e->top1 > s->best + s->min_delta) {
    s->best = e->top1;
    s->bad = 0;
  } else if (++s->bad >= s->patience) {
    ts_trainer_request_stop(t);
  }
  return TS_OK;
}

ts_callback ts_callback_early_stop(ts_early_stop_state *state) {
  ts_callback cb = {"early_stop", NULL, early_stop, NULL, NULL, state};
  return cb;
}

int ts__trainer_stages(const ts_trainer *t) { return t && t->dist ? ts__dist_stages(t->dist) : 1; }
