/* The training loop: model graphs from the zoo, flat parameters, optimizer and schedule,
 * gradient accumulation over micro-batches, evaluation, callbacks, checkpoints, exact resume. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/checkpoint.h"
#include "tessera/plot.h"
#include "tessera/tessera.h"
#include "tessera/zoo.h"
#include "../dist/dp.h"
#include "train_impl.h"

ts_params *ts_trainer_params(ts_trainer *t) { return t->params; }
int64_t ts_trainer_step(const ts_trainer *t) { return t->step; }
int ts_trainer_rank(const ts_trainer *t) { return t->rank; }
int ts_trainer_world_size(const ts_trainer *t) { return t->size; }
int64_t ts_trainer_num_params(const ts_trainer *t) {
  const ts_params *p = t->pp ? t->gp : t->params;
  int64_t n = 0;
  for (int i = 0; i < ts_params_count(p); i++)
    if (!(ts_params_flags(p, i) & TS_PARAM_STATE)) {
      ts_shape s = t->pp ? ts_params_shape(p, i) : ts_params_init_shape(p, i);
      n += ts_shape_numel(&s);
    }
  return n;
}
int64_t ts_trainer_steps_per_epoch(const ts_trainer *t) { return t->steps_per_epoch; }
void ts_trainer_request_stop(ts_trainer *t) { t->stop = 1; }

int ts_trainer_add_callback(ts_trainer *t, const ts_callback *cb) {
  if (t->ncb >= MAX_CB) return ts_error_set(TS_ERANGE, "trainer: at most %d callbacks", MAX_CB);
  t->cb[t->ncb++] = *cb;
  return TS_OK;
}

/* ---- model ---- */
int ts_model_group(const ts_model_info *info, int ndev, const int *dev, int axis) {
  ts_trainer *t = info ? info->priv : NULL;
  if (!t || ndev < 1 || ndev > TS_LAYOUT_MAX_AXES || axis < 0 || axis >= ndev)
    return ts_error_set(TS_EINVAL, "ts_model_group: bad device matrix or axis");
  int prod = 1;
  for (int a = 0; a < ndev; a++) prod *= dev[a] > 0 ? dev[a] : 0;
  if (prod != info->size)
    return ts_error_set(TS_EINVAL, "ts_model_group: the device matrix has %d devices, the job %d ranks", prod,
                        info->size);
  for (int k = 0; k < t->nhybrid; k++)
    if (t->hybrid_req[k].ndev == ndev && t->hybrid_req[k].axis == axis &&
        !memcmp(t->hybrid_req[k].dev, dev, sizeof(int) * (size_t)ndev))
      return k + 1;
  if (t->nhybrid + 1 >= TS_PLAN_MAX_COMMS)
    return ts_error_set(TS_ERANGE, "ts_model_group: at most %d groups", TS_PLAN_MAX_COMMS - 1);
  int k = t->nhybrid++;
  t->hybrid_req[k].ndev = ndev;
  memcpy(t->hybrid_req[k].dev, dev, sizeof(int) * (size_t)ndev);
  t->hybrid_req[k].axis = axis;
  return k + 1;
}

int ts__train_build_model(ts_trainer *t, ts_nn *nn, ts_val x, ts_val y, ts_val *logits, ts_val *loss) {
  const ts_config *c = &t->cfg;
  if (t->model_fn) {
    ts_model_info info = {t->rank, t->size, y != TS_NONE, t};
    ts_val lg = TS_NONE, ls = TS_NONE;
    int rc = t->model_fn(nn, x, y, &info, &lg, &ls, t->model_user);
    if (logits) *logits = lg;
    if (loss) *loss = ls;
    if (!rc && (lg == TS_NONE || (y != TS_NONE && ls == TS_NONE)) && !ts_graph_status(nn->g))
      rc = ts_error_set(TS_EINVAL, "custom model: the builder returned no %s", lg == TS_NONE ? "logits" : "loss");
    return rc;
  }
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

ts_shape ts__batch_shape(int64_t b, const ts_shape *s) {
  ts_shape r;
  memset(&r, 0, sizeof r);
  r.ndim = s->ndim + 1;
  r.dims[0] = b;
  for (int i = 0; i < s->ndim; i++) r.dims[i + 1] = s->dims[i];
  return r;
}

int ts__graph_fail_msg(ts_graph *g, const char *what) {
  int rc = ts_graph_status(g) ? ts_graph_status(g) : TS_EGRAPH;
  return ts_error_set(rc, "%s: %s", what, ts_graph_error(g));
}

int ts__train_plans(ts_trainer *t) {
  int rc = ts_params_alloc(t->params, t->cfg.train.seed);
  if (rc) return rc;
  ts_val keep[1024];
  int nk = 0;
  if ((rc = ts_params_attach_grads(t->params, t->g, keep, 1023, &nk))) return rc;
  keep[nk++] = t->loss;
  if ((rc = ts_plan_create(t->g, keep, nk, &t->plan)) || (rc = ts_params_bind(t->params, t->g, t->plan)) ||
      (rc = ts_plan_create(t->ge, &t->logits_e, 1, &t->plan_e)) || (rc = ts_params_bind(t->params, t->ge, t->plan_e)))
    return rc;
  return TS_OK;
}

static int build_graphs(ts_trainer *t) {
  int rc;
  ts_val logits;
  if (t->cfg.parallel.mode == TS_PARALLEL_SEMI_AUTO) return ts__semi_build(t);
  if ((rc = ts_params_create(&t->params)) || (rc = ts_graph_create(&t->g)) || (rc = ts_graph_create(&t->ge)))
    return rc;
  ts_graph_set_training(t->ge, 0);
  /* training graph */
  ts_nn nn = {t->g, t->params};
  t->x = ts_input(t->g, "x", t->sample_dtype, ts__batch_shape(t->mb, &t->sample_shape));
  t->y = t->text ? ts_input(t->g, "y", TS_I32, ts__batch_shape(t->mb, &t->sample_shape))
                 : ts_input(t->g, "y", TS_I32, ts_shape1(t->mb));
  ts_val_set_requires_grad(t->g, t->x, 0);
  if (t->comm && t->cfg.parallel.sync_batchnorm) ts_graph_set_batchnorm_sync(t->g, 0);
  rc = ts__train_build_model(t, &nn, t->x, t->y, &logits, &t->loss);
  if (rc || ts_graph_status(t->g)) return rc && !ts_graph_status(t->g) ? rc : ts__graph_fail_msg(t->g, "model");
  /* hybrid_parallel: every rank's loss is its own variable of the objective (the collectives'
   * adjoints sum over ranks), so seed 1/N and SUM the gradients of the parameters several ranks
   * hold: data- and model-parallel copies both come out right (docs/parallel-pass.md) */
  float seed = 1.0f / (float)t->accum;
  if (t->cfg.parallel.mode == TS_PARALLEL_HYBRID && t->cfg.parallel.gradients_mean) seed /= (float)t->size;
  if (ts_graph_backward(t->g, t->loss, seed)) return ts__graph_fail_msg(t->g, "backward");
  /* evaluation graph: same parameters (by name), inference mode */
  ts_nn nne = {t->ge, t->params};
  t->xe = ts_input(t->ge, "x", t->sample_dtype, ts__batch_shape(t->eb, &t->sample_shape));
  ts_val none = TS_NONE;
  rc = ts__train_build_model(t, &nne, t->xe, none, &t->logits_e, &none);
  if (rc || ts_graph_status(t->ge)) return rc && !ts_graph_status(t->ge) ? rc : ts__graph_fail_msg(t->ge, "eval model");
  if ((rc = ts__train_plans(t))) return rc;
  if (t->comm && (rc = ts_plan_set_comm(t->plan, 0, t->comm))) return rc;
  for (int k = 0; k < t->nhybrid; k++) { /* groups a hybrid model asked for */
    rc = ts_comm_grid_axis(t->comm, t->hybrid_req[k].ndev, t->hybrid_req[k].dev, t->hybrid_req[k].axis,
                           &t->hybrid_slots[k]);
    if (rc) return rc;
    if ((rc = ts_plan_set_comm(t->plan, k + 1, t->hybrid_slots[k]))) return rc;
  }
  if (t->comm && (rc = ts_plan_set_comm(t->plan_e, 0, t->comm))) return rc;
  for (int k = 0; k < t->nhybrid && !rc; k++) rc = ts_plan_set_comm(t->plan_e, k + 1, t->hybrid_slots[k]);
  return rc;
}

int ts__train_optim(const ts_config *cfg, ts_params *p, ts_optim **opt, ts_optim_segment **segs, int *nseg) {
  int np = ts_params_count(p);
  *nseg = 0;
  *segs = calloc((size_t)np + 1, sizeof **segs);
  if (!*segs) return ts_error_set(TS_ENOMEM, "trainer: out of memory");
  for (int i = 0; i < np; i++) {
    int fl = ts_params_flags(p, i);
    if (fl & TS_PARAM_STATE) continue;
    ts_shape s = ts_params_shape(p, i);
    uint32_t sf = (cfg->optimizer.exclude_bias_and_norm && (fl & TS_PARAM_NO_DECAY)) ? TS_SEG_NO_DECAY : 0;
    (*segs)[(*nseg)++] = (ts_optim_segment){ts_params_name(p, i), ts_params_offset(p, i), (size_t)ts_shape_numel(&s), sf};
  }
  ts_optim_config oc;
  int rc = ts_config_optim(cfg, &oc);
  if (!rc) rc = ts_optim_create(opt, &oc, *segs, *nseg);
  return rc;
}

static int build_optimizer(ts_trainer *t) {
  int rc = ts__train_optim(&t->cfg, t->params, &t->opt, &t->segs, &t->nseg);
  if (!rc) rc = ts_config_lr_schedule(&t->cfg, t->steps_per_epoch, &t->sched);
  return rc;
}

/* ---- data ---- */
int ts__train_probe(ts_trainer *t) {
  ts_sample s;
  memset(&s, 0, sizeof s);
  int rc = ts_source_get(t->train_src, 0, &s);
  if (!rc) rc = ts_transforms_apply(t->tf_test, t->ntf_test, &s, 0);
  if (rc) return ts_error_wrap(rc, "reading the first training sample");
  t->sample_shape = s.data.shape;
  t->sample_dtype = s.data.dtype;
  t->text = s.target.data != NULL;
  ts_sample_free(&s);
  int is_image_model = t->cfg.model.name != TS_MODEL_GPT;
  if (is_image_model && t->sample_dtype != TS_F32)
    return ts_error_set(TS_ECONFIG,
                        "data.transforms: model %s needs f32 samples but they are %s (add to_float, "
                        "normalize and hwc_to_chw transforms)",
                        ts_model_kind_name(t->cfg.model.name), ts_dtype_name(t->sample_dtype));
  if (!is_image_model && !t->text)
    return ts_error_set(TS_ECONFIG, "model.name: gpt needs a text data set (data.name: text)");
  if (is_image_model && t->text)
    return ts_error_set(TS_ECONFIG, "model.name: %s cannot train on text data", ts_model_kind_name(t->cfg.model.name));
  return TS_OK;
}

static int make_train_pipe(ts_trainer *t) {
  ts_pipeline_config pc = ts_pipeline_config_default();
  pc.source = t->train_src;
  /* the same global order on any number of ranks: rank r takes positions r, r+S, ... */
  pc.sampler.kind = TS_SAMPLER_DISTRIBUTED;
  pc.sampler.shuffle = t->cfg.data.shuffle;
  pc.sampler.num_shards = t->dshards;
  pc.sampler.shard_id = t->dshard;
  pc.sampler.drop_last = t->cfg.data.drop_last;
  pc.transforms = t->tf_train;
  pc.ntransforms = t->ntf_train;
  pc.num_workers = t->cfg.data.num_workers;
  pc.batch_size = t->cfg.train.batch_size / t->dshards;
  pc.drop_remainder = 1; /* fixed graph shapes; a partial batch would change the math */
  pc.shuffle_buffer = t->cfg.data.shuffle_buffer;
  pc.prefetch = t->cfg.data.prefetch;
  pc.epochs = -1;
  pc.seed = t->cfg.train.seed;
  int rc = ts_pipeline_create(&pc, &t->train_pipe);
  if (rc) return rc;
  t->steps_per_epoch = ts_pipeline_batches_per_epoch(t->train_pipe);
  if (t->steps_per_epoch <= 0)
    return ts_error_set(TS_ECONFIG, "train.batch_size %d is larger than the %lld training samples",
                        t->cfg.train.batch_size, (long long)ts_source_len(t->train_src));
  t->total_steps = ts_config_total_steps(&t->cfg, t->steps_per_epoch);
  return TS_OK;
}

/* ---- checkpoints ---- */
void ts__trainer_ckpt_state(ts_trainer *t, ts_ckpt_state *st) {
  memset(st, 0, sizeof *st);
  st->params = t->params;
  st->optim = t->opt;
  st->step = t->step;
  st->epoch = t->epoch;
  st->batch_index = t->batch;
  st->seed = t->cfg.train.seed;
  st->rng_counter = (uint64_t)t->step;
  st->loss_scale = 1.0;
  st->model = ts_model_kind_name(t->cfg.model.name);
  st->config_hash = ts_config_hash(&t->cfg);
  st->config_yaml = t->cfg_yaml;
}

int ts_trainer_save(ts_trainer *t, const char *path) {
  if (t->sliced) return ts__semi_save(t, path, t->rank == 0);
  ts_ckpt_state st;
  ts__trainer_ckpt_state(t, &st);
  return ts_ckpt_save(path, &st);
}

int ts_trainer_load(ts_trainer *t, const char *path, int strict, int with_optimizer) {
  if (t->sliced) return ts__semi_load(t, path, strict, with_optimizer);
  ts_ckpt_state st;
  ts__trainer_ckpt_state(t, &st);
  if (!with_optimizer) {
    st.optim = NULL;
    st.config_hash = 0; /* evaluating with another config (batch size, epochs) is fine */
  }
  int rc = ts_ckpt_load(path, &st, strict);
  if (rc) return rc;
  if (with_optimizer) {
    t->step = st.step;
    t->epoch = st.epoch;
    t->batch = st.batch_index;
    if (t->train_pipe) rc = ts_pipeline_seek(t->train_pipe, t->epoch, t->batch);
  }
  return rc;
}

/* Without sync_batchnorm each rank's running statistics follow its own batches; before they are
 * used (evaluation) or saved, every rank takes their mean over the ranks, as one set. */
static int sync_states(ts_trainer *t) {
  if (!t->comm || t->size < 2 || t->cfg.parallel.sync_batchnorm || !ts_params_state_numel(t->params) ||
      t->cfg.parallel.mode != TS_PARALLEL_DATA)
    return TS_OK;
  int rc = ts_comm_allreduce(t->comm, ts_params_states(t->params), ts_params_states(t->params),
                             ts_params_state_numel(t->params), TS_F32, TS_REDUCE_MEAN);
  return rc ? ts_error_wrap(rc, "averaging BatchNorm running statistics over the ranks") : TS_OK;
}

static int save_checkpoint(ts_trainer *t) {
  const ts_config *c = &t->cfg;
  int src = sync_states(t);
  if (src) return src;
  char path[2200];
  int rc = ts_ckpt_path(path, sizeof path, c->checkpoint.dir, c->checkpoint.prefix, t->step);
  if (rc) return rc;
  if (t->sliced) { /* every rank sends its slices; rank 0 writes the whole model */
    rc = ts__semi_save(t, path, t->rank == 0);
    if (rc || t->rank != 0) return rc;
  } else {
    if (t->rank != 0) return TS_OK; /* parameters are identical on every rank */
    rc = ts_trainer_save(t, path);
  }
  if (!rc && c->checkpoint.keep_max > 0) {
    int r = ts_ckpt_rotate(c->checkpoint.dir, c->checkpoint.prefix, c->checkpoint.keep_max);
    if (r < 0) rc = r;
  }
  if (!rc) ts__progress_message(&t->prog, "checkpoint %s", path);
  return rc;
}

/* ---- data parallel ---- */
static int setup_data_parallel(ts_trainer *t) {
  ts_config *c = &t->cfg;
  int rc = ts_comm_init(NULL, NULL);
  if (!rc) rc = ts_comm_world(&t->comm);
  if (rc) return rc;
  t->rank = ts_comm_rank(t->comm);
  t->size = ts_comm_size(t->comm);
  ts_comm_set_timeout(c->parallel.comm_timeout);
  if (c->parallel.debug_check) ts_comm_set_debug_check(1);
  int cut = c->parallel.mode == TS_PARALLEL_DATA ||
            (c->parallel.mode == TS_PARALLEL_HYBRID && !c->parallel.full_batch);
  t->dshards = cut ? t->size : 1;
  t->dshard = cut ? t->rank : 0;
  if (cut && (c->train.batch_size % t->size || c->train.micro_batch_size % t->size))
    return ts_error_set(TS_ECONFIG,
                        "train.batch_size %d (micro_batch_size %d) is the global batch and must divide "
                        "by the %d ranks",
                        c->train.batch_size, c->train.micro_batch_size, t->size);
  if (t->rank != 0) { /* only rank 0 talks and writes */
    c->log.progress = TS_PROGRESS_OFF;
    c->log.metrics[0] = 0;
    c->log.plot[0] = 0;
  }
  return TS_OK;
}

static int setup_reduction(ts_trainer *t) {
  const ts_config *c = &t->cfg;
  int rc = TS_OK;

  if (c->parallel.parameter_broadcast && t->sliced)
    return ts_error_set(TS_ECONFIG, "parallel.parameter_broadcast: the parameters are held as slices (each rank "
                        "initialises its own from the counter-based RNG, identical to the whole model's)");
  if (c->parallel.mode == TS_PARALLEL_SEMI_AUTO) return ts__semi_setup_reduction(t);
  if (c->parallel.parameter_broadcast) {
    rc = ts_comm_broadcast(t->comm, ts_params_data(t->params), ts_params_numel(t->params), TS_F32, 0);
    if (!rc && ts_params_state_numel(t->params))
      rc = ts_comm_broadcast(t->comm, ts_params_states(t->params), ts_params_state_numel(t->params), TS_F32, 0);
    if (rc) return rc;
  }
  static const ts_dtype wire[] = {TS_F32, TS_BF16, TS_F16};
  t->overlap = c->parallel.overlap && t->accum == 1;
  if (c->parallel.mode == TS_PARALLEL_HYBRID) { /* parameters several ranks hold, by layout */
    ts_grad_reducer_config rc_ = {c->parallel.bucket_size_mb, 0, wire[c->parallel.comm_dtype]}; /* seeded 1/N */
    if ((rc = ts_grad_reducer_create(t->comm, t->params, t->g, &rc_, &t->red))) return rc;
    if (t->overlap) rc = ts_grad_reducer_attach(t->red, t->plan);
    return rc;
  }
  rc = ts__dp_create(t->comm, t->params, t->g, c->parallel.bucket_size_mb, c->parallel.gradients_mean,
                     wire[c->parallel.comm_dtype], NULL, &t->dp);
  if (rc) return rc;
  t->overlap = c->parallel.overlap && t->accum == 1; /* accumulation reduces once, after the last micro-step */
  if (t->overlap && (rc = ts_plan_add_hook(t->plan, ts__dp_hook, t->dp))) return rc;
  return TS_OK;
}

/* ---- lifetime ---- */
static int trainer_create(const ts_config *cfg_in, ts_model_fn fn, void *user, ts_trainer **out) {
  *out = NULL;
  ts_trainer *t = calloc(1, sizeof *t);
  if (!t) return ts_error_set(TS_ENOMEM, "trainer: out of memory");
  t->model_fn = fn;
  t->model_user = user;
  t->cfg = *cfg_in;
  int rc = ts_config_validate(&t->cfg);
  if (rc) goto fail;
  t->size = 1;
  t->dshards = 1;
  ts_parallel_mode mode = t->cfg.parallel.mode;
  if (mode == TS_PARALLEL_AUTO) {
    rc = ts_error_set(TS_EUNSUPPORTED, "parallel.mode: auto_parallel (the strategy search) is not available yet "
                      "(use semi_auto_parallel with parallel.strategies, data_parallel or hybrid_parallel)");
    goto fail;
  }
  if (mode == TS_PARALLEL_HYBRID && !t->model_fn) {
    rc = ts_error_set(TS_ECONFIG, "parallel.mode: hybrid_parallel runs models written with the C API for one rank "
                      "(ts_trainer_create_custom, examples/hybrid_mlp.c); for zoo models use semi_auto_parallel");
    goto fail;
  }
  if (mode == TS_PARALLEL_SEMI_AUTO && t->cfg.optimizer.name == TS_OPTIM_LAMB) {
    rc = ts_error_set(TS_EUNSUPPORTED, "optimizer.name: lamb under semi_auto_parallel needs per-parameter norms "
                      "over the slices of the ranks; not available yet (use adamw)");
    goto fail;
  }
  if (mode != TS_PARALLEL_STAND_ALONE && (rc = setup_data_parallel(t))) goto fail;
  if (t->cfg.train.threads > 0) ts_threads_set(t->cfg.train.threads);
  ts_callback lm = ts_callback_loss_monitor();
  ts_trainer_add_callback(t, &lm);
  if ((rc = ts_config_dump_string(&t->cfg, &t->cfg_yaml))) goto fail;
  t->mb = t->cfg.train.micro_batch_size / t->dshards; /* semi_auto_parallel: set by the pass */
  t->eb = t->cfg.train.eval_batch_size;
  t->accum = t->cfg.train.batch_size / t->cfg.train.micro_batch_size;
  if ((rc = ts__train_sources(&t->cfg, &t->train_src, &t->test_src))) goto fail;
  rc = ts_config_transforms(&t->cfg, 1, t->tf_train, TS_CFG_MAX_TRANSFORMS);
  if (rc < 0) goto fail;
  t->ntf_train = rc;
  rc = ts_config_transforms(&t->cfg, 0, t->tf_test, TS_CFG_MAX_TRANSFORMS);
  if (rc < 0) goto fail;
  t->ntf_test = rc;
  if ((rc = ts__train_probe(t)) || (rc = build_graphs(t))) goto fail;
  t->sliced = t->pp != NULL;
  for (int i = 0; i < ts_params_count(t->params); i++) t->sliced |= ts_params_is_sharded(t->params, i);
  if ((rc = make_train_pipe(t)) || (rc = build_optimizer(t))) goto fail;
  if (t->comm && (rc = setup_reduction(t))) goto fail;
  if (t->accum > 1) {
    t->acc = ts_alloc(sizeof(float) * (ts_params_numel(t->params) ? ts_params_numel(t->params) : 1));
    if (!t->acc) {
      rc = ts_error_set(TS_ENOMEM, "trainer: cannot allocate the gradient accumulator");
      goto fail;
    }
  }
  /* resume */
  const char *res = t->cfg.checkpoint.resume;
  int resumed = 0;
  char path[2200]; /* outlives the block: res may point here when the progress line is printed */
  if (res[0]) {
    if (!strcmp(res, "auto")) {
      if (ts_ckpt_latest(t->cfg.checkpoint.dir, t->cfg.checkpoint.prefix, path, sizeof path) == TS_OK) res = path;
      else res = NULL;
    }
    if (res) {
      if ((rc = ts_trainer_load(t, res, t->cfg.checkpoint.strict, 1))) goto fail;
      resumed = 1;
    }
  }
  if ((rc = ts__progress_open(&t->prog, &t->cfg, t->total_steps, t->steps_per_epoch, resumed))) goto fail;
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
  ts__dp_free(t->dp);
  ts_grad_reducer_free(t->red);
  for (int k = 0; k < t->nhybrid; k++) ts_comm_free(t->hybrid_slots[k]);
  ts_comm_free(t->comm);
  ts__progress_close(&t->prog);
  ts_pipeline_free(t->train_pipe);
  ts_plan_free(t->plan);
  ts_plan_free(t->plan_e);
  if (!t->pp) { /* under semi_auto_parallel the pass owns the rank's graphs and store */
    ts_graph_free(t->g);
    ts_graph_free(t->ge);
    ts_params_free(t->params);
  }
  ts_optim_free(t->opt);
  ts__semi_free(t);
  ts_source_free(t->train_src);
  ts_source_free(t->test_src);
  ts_free(t->acc);
  free(t->segs);
  free(t->cfg_yaml);
  free(t);
}

/* ---- evaluation ---- */
int ts_trainer_evaluate(ts_trainer *t, ts_eval_info *out) {
  memset(out, 0, sizeof *out);
  if (!t->test_src) return ts_error_set(TS_ENOTFOUND, "evaluate: the data set has no test split");
  double t0 = ts_time_now();
  int src = sync_states(t);
  if (src) return src;
  ts_source *view = NULL; /* with several ranks, each evaluates one contiguous part */
  int split = t->size > 1 && t->dshards > 1 && !t->pp; /* else every rank evaluates everything */
  if (split) {
    int64_t n = ts_source_len(t->test_src), lo = n * t->rank / t->size, hi = n * (t->rank + 1) / t->size;
    int r = ts__source_view(t->test_src, lo, hi - lo, &view);
    if (r) return r;
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
  ts_pipeline *p = NULL;
  int rc = ts_source_len(pc.source) > 0 ? ts_pipeline_create(&pc, &p) : TS_OK;
  if (rc) {
    ts_source_free(view);
    return rc;
  }
  size_t xbytes = (size_t)ts_shape_numel(&t->sample_shape) * ts_dtype_size(t->sample_dtype);
  char *xbuf = ts_calloc(xbytes * (size_t)t->eb);
  ts_shape ls = ts_val_shape(t->ge, t->logits_e);
  int64_t C = ls.dims[ls.ndim - 1];
  int64_t rows_per_sample = ts_shape_numel(&ls) / C / t->eb;
  double loss = 0;
  int64_t n = 0, c1 = 0, c5 = 0;
  /* semi_auto_parallel: the rank feeds its piece of each batch; the logits come back whole */
  ts_plan_bind(t->plan_e, t->xe, xbuf + (t->pe ? xbytes * (size_t)(t->eb / t->eparts * t->eindex) : 0));
  ts_batch b;
  while (p && rc == TS_OK && (rc = ts_pipeline_next(p, &b)) == TS_OK && b.size > 0) {
    memcpy(xbuf, b.data.data, xbytes * (size_t)b.size);
    if (b.size < t->eb) memset(xbuf + xbytes * (size_t)b.size, 0, xbytes * (size_t)(t->eb - b.size));
    if ((rc = ts_plan_run(t->plan_e, 0))) break;
    const float *lg = ts_plan_data(t->plan_e, t->logits_e);
    for (int64_t r = 0; r < (int64_t)b.size * rows_per_sample; r++) {
      int64_t lab = t->text ? ((const int32_t *)b.target.data)[r] : ((const int32_t *)b.labels.data)[r];
      if (lab < 0 || lab >= C) continue;
      const float *z = lg + r * C;
      double m = z[0];
      for (int64_t k = 1; k < C; k++) m = z[k] > m ? z[k] : m;
      double s = 0;
      int64_t above = 0;
      for (int64_t k = 0; k < C; k++) {
        s += exp((double)z[k] - m);
        above += z[k] > z[lab];
      }
      loss += m + log(s) - z[lab];
      c1 += above < 1;
      c5 += above < 5;
      n++;
    }
  }
  ts_pipeline_free(p);
  ts_source_free(view);
  ts_free(xbuf);
  if (rc) return ts_error_wrap(rc, "evaluation");
  if (split) { /* sum the counts and losses of every rank's part */
    int64_t cnt[3] = {n, c1, c5};
    float ls = (float)loss;
    rc = ts_comm_allreduce(t->comm, cnt, cnt, 3, TS_I64, TS_REDUCE_SUM);
    if (!rc) rc = ts_comm_allreduce(t->comm, &ls, &ls, 1, TS_F32, TS_REDUCE_SUM);
    if (rc) return ts_error_wrap(rc, "evaluation: reducing metrics");
    n = cnt[0];
    c1 = cnt[1];
    c5 = cnt[2];
    loss = ls;
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
  ts__progress_eval(&t->prog, &t->last_eval);
  for (int i = 0; i < t->ncb; i++)
    if (t->cb[i].on_eval_end && (rc = t->cb[i].on_eval_end(t, &t->last_eval, t->cb[i].user))) return rc;
  return TS_OK;
}

/* ---- one optimizer step over `accum` micro-batches of one batch ---- */
static int train_step(ts_trainer *t, const ts_batch *b, ts_step_info *info) {
  size_t xs = (size_t)ts_shape_numel(&t->sample_shape) * ts_dtype_size(t->sample_dtype);
  size_t ys = t->text ? (size_t)ts_shape_numel(&t->sample_shape) * sizeof(int32_t) : sizeof(int32_t);
  const char *lab = t->text ? b->target.data : b->labels.data;
  size_t n = ts_params_numel(t->params);
  float *grads = ts_params_grads(t->params);
  double loss = 0;
  if (t->dp && t->overlap) ts__dp_begin(t->dp, grads);
  if (t->red && t->overlap) ts_grad_reducer_begin(t->red, grads);
  for (int64_t k = 0; k < t->accum; k++) {
    int rc = ts_plan_bind(t->plan, t->x, (char *)b->data.data + (size_t)(k * t->mb) * xs);
    if (!rc) rc = ts_plan_bind(t->plan, t->y, (char *)lab + (size_t)(k * t->mb) * ys);
    if (!rc) rc = ts_plan_run(t->plan, (uint64_t)(t->step * t->accum + k));
    if (rc) return ts_error_wrap(rc, "step %lld", (long long)t->step + 1);
    loss += *(const float *)ts_plan_data(t->plan, t->loss);
    if (t->accum > 1) {
      if (k == 0)
        memcpy(t->acc, grads, n * sizeof(float));
      else
#pragma omp parallel for if (n > 65536)
        for (size_t i = 0; i < n; i++) t->acc[i] += grads[i];
    }
  }
  float *g = t->accum > 1 ? t->acc : grads;
  if (t->red) {
    if (!t->overlap) ts_grad_reducer_begin(t->red, g);
    int rc = ts_grad_reducer_finish(t->red);
    info->comm_wait_ms = 1e3 * ts_grad_reducer_wait_seconds(t->red);
    /* the step's loss: semi_auto_parallel sums each rank's part (seeded copies counted once);
     * hybrid_parallel averages the ranks' losses, as data parallel */
    float l = (float)(loss / (double)t->accum) * (t->pp ? t->seed : 1.0f);
    if (!rc) rc = ts_comm_allreduce(t->comm, &l, &l, 1, TS_F32, t->pp ? TS_REDUCE_SUM : TS_REDUCE_MEAN);
    if (rc) return ts_error_wrap(rc, "step %lld: gradient reduction", (long long)t->step + 1);
    loss = (double)l * (double)t->accum;
  } else if (t->dp) {
    if (!t->overlap) ts__dp_begin(t->dp, g);
    int rc = ts__dp_finish(t->dp);
    info->comm_wait_ms = 1e3 * ts__dp_wait_seconds(t->dp);
    float l = (float)(loss / (double)t->accum);
    if (!rc) rc = ts_comm_allreduce(t->comm, &l, &l, 1, TS_F32, TS_REDUCE_MEAN);
    if (rc) return ts_error_wrap(rc, "step %lld: gradient all-reduce", (long long)t->step + 1);
    loss = (double)l * (double)t->accum;
  }
  float norm = 0;
  if (t->sliced) {
    int rc = ts__semi_clip(t, g, (float)t->cfg.optimizer.clip_grad_norm, &norm);
    if (rc) return rc;
  } else if (t->cfg.optimizer.clip_grad_norm > 0) {
    ts_clip_grad_norm(g, n, (float)t->cfg.optimizer.clip_grad_norm, &norm);
  }
  float lr = ts_lr_at(&t->sched, t->step);
  int rc = ts_optim_step(t->opt, ts_params_data(t->params), g, lr);
  if (rc) return rc;
  info->loss = loss / (double)t->accum;
  info->lr = lr;
  info->grad_norm = norm;
  return TS_OK;
}

int ts_trainer_fit(ts_trainer *t) {
  int rc = TS_OK;
  const ts_config *c = &t->cfg;
  ts_batch b;
  double t_prev = ts_time_now();
  while (t->step < t->total_steps && !t->stop) {
    if ((rc = ts_pipeline_next(t->train_pipe, &b))) break;
    if (b.size != c->train.batch_size / t->dshards) {
      rc = ts_error_set(TS_EINVAL, "trainer: pipeline gave a batch of %d, expected %d", b.size,
                        c->train.batch_size / t->dshards);
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
    info.step = t->step;
    info.step_ms = 1e3 * (now - t_prev);
    info.samples_per_s = (double)c->train.batch_size / (now - t_prev);
    t_prev = now;
    t->last_loss = info.loss;
    ts__progress_step(&t->prog, &info);
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
    if (do_eval && (rc = run_eval(t))) break;
    if (epoch_end)
      for (int i = 0; i < t->ncb && rc == TS_OK; i++)
        if (t->cb[i].on_epoch_end) rc = t->cb[i].on_epoch_end(t, t->epoch - 1, t->cb[i].user);
    if (rc) break;
    if (c->checkpoint.dir[0]) {
      int save = (c->checkpoint.save_steps > 0 && t->step % c->checkpoint.save_steps == 0) ||
                 (c->checkpoint.save_steps <= 0 && c->checkpoint.save_epochs > 0 && epoch_end &&
                  t->epoch % c->checkpoint.save_epochs == 0) ||
                 (last && c->checkpoint.save_last);
      if (save && (rc = save_checkpoint(t))) break;
    }
    t_prev = ts_time_now(); /* evaluation and checkpoints are not step time */
  }
  if (rc == TS_OK && t->stop && c->checkpoint.dir[0] && c->checkpoint.save_last) rc = save_checkpoint(t);
  for (int i = 0; i < t->ncb && rc == TS_OK; i++)
    if (t->cb[i].on_train_end) rc = t->cb[i].on_train_end(t, t->cb[i].user);
  ts__progress_end(&t->prog, t->step, t->last_loss, t->have_eval ? t->last_eval.top1 : 0, t->have_eval);
  if (rc == TS_OK && c->log.plot[0] && c->log.metrics[0]) {
    if (t->prog.metrics) fflush(t->prog.metrics);
    rc = ts_plot_metrics(c->log.metrics, c->log.plot);
    if (!rc) ts__progress_message(&t->prog, "curves: %s", c->log.plot);
  }
  return rc;
}

/* ---- built-in callbacks ---- */
static int loss_monitor(ts_trainer *t, const ts_step_info *s, void *u) {
  (void)t;
  (void)u;
  if (!isfinite(s->loss))
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
