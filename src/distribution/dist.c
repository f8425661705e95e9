/* Distribution objects (src/distribution/dist.h): the object every layout shares, and the layouts
 * whose model is built per rank: stand_alone (one process), data_parallel (the batch cut over
 * the ranks, every parameter replicated, gradients averaged) and hybrid_parallel (the model
 * written per rank with hand-placed collectives; parameters several ranks hold are summed).
 * semi_auto_parallel is in dist_semi.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_ir.h"
#include "runtime/exec.h"
#include "compat.h"
#include "dist_impl.h"

/* ---- models built per rank: their private state ---- */

/* The state of stand_alone, data_parallel and hybrid_parallel (d->priv): the groups a hybrid
 * model asked for (ts_model_group) and their communicators. */
typedef struct {
  int ngroups, groups_cap; /* any number (grown by ts_model_group) */
  struct ts__dist_group {
    int ndev, dev[TS_LAYOUT_MAX_AXES], axis;
  } *group;
  ts_comm **group_comm; /* ngroups, made by the build in a real job */
} per_rank;

static const ts_dist_vt stand_alone, data_parallel, hybrid_parallel;

/* The per-rank state of d, NULL for layouts that build the whole model. */
static per_rank *per_rank_of(const ts_dist *d) {
  int mine = d->vt == &stand_alone || d->vt == &data_parallel || d->vt == &hybrid_parallel;
  return mine ? d->priv : NULL;
}

/* ---- the model builder, with this object's rank and groups ---- */

int ts_model_group(const ts_model_info *info, int ndev, const int *dev, int axis) {
  ts_dist *d = info ? info->priv : NULL;
  if (!d || ndev < 1 || ndev > TS_LAYOUT_MAX_AXES || axis < 0 || axis >= ndev)
    return ts_error_set(TS_EINVAL, "ts_model_group: bad device matrix or axis");
  per_rank *pr = per_rank_of(d);
  if (!pr)
    return ts_error_set(TS_EINVAL, "ts_model_group: parallel.mode %s builds the whole model (groups are for models "
                        "written per rank: hybrid_parallel)", d->vt->name);
  int prod = 1;
  for (int a = 0; a < ndev; a++) prod *= dev[a] > 0 ? dev[a] : 0;
  if (prod != info->size)
    return ts_error_set(TS_EINVAL, "ts_model_group: the device matrix has %d devices, the job %d ranks", prod,
                        info->size);
  for (int k = 0; k < pr->ngroups; k++)
    if (pr->group[k].ndev == ndev && pr->group[k].axis == axis &&
        !memcmp(pr->group[k].dev, dev, sizeof(int) * (size_t)ndev))
      return k + 1;
  if (pr->ngroups + 1 >= TS_PLAN_MAX_COMMS)
    return ts_error_set(TS_ERANGE, "ts_model_group: at most %d groups (plan communicator slots)", TS_PLAN_MAX_COMMS - 1);
  if (pr->ngroups == pr->groups_cap) {
    int nc = pr->groups_cap ? 2 * pr->groups_cap : 8;
    struct ts__dist_group *ng = realloc(pr->group, sizeof *ng * (size_t)nc);
    if (!ng) return ts_error_set(TS_ENOMEM, "ts_model_group: out of memory");
    pr->group = ng;
    pr->groups_cap = nc;
  }
  int k = pr->ngroups++;
  pr->group[k].ndev = ndev;
  memcpy(pr->group[k].dev, dev, sizeof(int) * (size_t)ndev);
  pr->group[k].axis = axis;
  return k + 1;
}

int ts__dist_graph_fail(ts_graph *g, const char *what) {
  int rc = ts_graph_status(g) ? ts_graph_status(g) : TS_EGRAPH;
  return ts_error_set(rc, "%s: %s", what, ts_graph_error(g));
}

int ts__dist_build_model(ts_dist *d, ts_nn *nn, ts_val *x, ts_val *y, ts_val *logits, ts_val *loss) {
  ts_val yv = y ? *y : TS_NONE;
  ts_model_info info = {d->r.rank, d->r.size, yv != TS_NONE, d};
  ts_val lg = TS_NONE, ls = TS_NONE;
  int rc = d->model.fn(nn, *x, yv, &info, &lg, &ls, d->model.user);
  if (!rc && (lg == TS_NONE || (yv != TS_NONE && ls == TS_NONE)) && !ts_graph_status(nn->g))
    rc = ts_error_set(TS_EINVAL, "model: the builder returned no %s", lg == TS_NONE ? "logits" : "loss");
  /* mixed precision: the forward graph rewritten with casts (train.amp_level), before autodiff,
   * the parallel pass and the stage cut see it */
  ts_dtype low = TS_F32; /* ZeRO in mixed precision: the trainable parameters' leaves 16-bit (dist_zero16.c) */
  if (!rc && !ts_graph_status(nn->g) && d->sync.vt == &ts__sync_zero) rc = ts__zero16_dtype(d, &low);
  if (!rc && !ts_graph_status(nn->g) && d->cfg.amp_level > 0) {
    ts_val v[4] = {*x, yv, lg, ls};
    int flags = low != TS_F32 ? TS__AMP_PARAMS_LOW : 0;
    if (!ts__graph_amp_ex(nn->g, d->cfg.amp_level, d->cfg.amp_dtype, flags, v, 4)) {
      *x = v[0];
      if (y) *y = v[1];
      lg = v[2];
      ls = v[3];
    }
  }
  if (logits) *logits = lg;
  if (loss) *loss = ls;
  if (rc || ts_graph_status(nn->g))
    return rc && !ts_graph_status(nn->g) ? rc : ts__dist_graph_fail(nn->g, yv != TS_NONE ? "model" : "eval model");
  return TS_OK;
}

void ts__dist_inputs(ts_dist *d, ts_graph *g, int64_t rows, int targets, ts_val *x, ts_val *y) {
  const ts_dist_model *m = &d->model;
  *x = ts_input(g, "x", m->dtype, ts_shape_batch(rows, &m->sample));
  ts_val_set_requires_grad(g, *x, 0);
  if (y)
    *y = !targets  ? TS_NONE
         : m->values ? ts_input(g, "y", TS_F32, ts_shape_batch(rows, &m->target))
         : m->text   ? ts_input(g, "y", TS_I32, ts_shape_batch(rows, &m->sample))
                     : ts_input(g, "y", TS_I32, ts_shape1(rows));
}

int ts__dist_backward(ts_dist *d) {
  ts_dist_run *r = &d->r;
  const ts_dist_config *c = &d->cfg;
  if (ts_graph_backward(r->g, r->loss, d->seed)) return ts__dist_graph_fail(r->g, "backward");
  d->seed_val = ts_graph_grad(r->g, r->loss); /* the CONST seeding backward (the loss scale goes there) */
  const char *pat[TS_DIST_MAX_RECOMPUTE];
  int n = c->n_recompute_layers < TS_DIST_MAX_RECOMPUTE ? c->n_recompute_layers : TS_DIST_MAX_RECOMPUTE;
  for (int i = 0; i < n; i++) pat[i] = c->recompute_layers[i];
  if (ts_graph_recompute(r->g, pat, n, c->recompute | (c->sequence_parallel ? TS_RECOMPUTE_REGATHER : 0))) return ts__dist_graph_fail(r->g, "model.recompute_layers");
  return TS_OK;
}

/* Dry runs are sized, not allocated: the store is laid out (ts_params_alloc_dry) and the plans
 * are dry (ts_plan_create_dry: liveness and arena layout computed, nothing allocated), so the
 * figures (ts_dist_memory) come from exactly the layouts a real job allocates, and a
 * trillion-parameter model on thousands of devices is priced without its bytes. cfg.dry_allocate
 * makes a dry run allocate as the job would (tests compare the two). */
int ts__dist_sizing(const ts_dist *d) { return d->dry > 0 && !d->cfg.dry_allocate; }

int ts__dist_alloc_store(ts_dist *d, ts_params *p) {
  /* the sync object may bind the gradients (and, in a real job, the parameter values) itself */
  int no_grads = 0, no_params = 0;
  d->sync.vt->store(d, &no_grads, &no_params);
  int rc = ts_params_set_grads_external(p, no_grads);
  if (rc) return rc;
  if (ts__dist_sizing(d)) return ts_params_alloc_dry(p);
  return no_params ? ts_params_alloc_external(p, d->cfg.seed) : ts_params_alloc(p, d->cfg.seed);
}

int ts_dist_grad_buckets(const ts_dist *d) { return d ? d->sync.vt->num_buckets(d) : 0; }
int ts_dist_set_prof(ts_dist *d, ts_prof *p) { return d ? d->sync.vt->set_prof(d, p) : TS_OK; }

int ts__dist_plan_create(const ts_dist *d, ts_graph *g, const ts_val *keep, int nkeep, ts_plan **out) {
  if (ts__dist_sizing(d)) return ts_plan_create_dry(g, keep, nkeep, out);
  int rc = ts_plan_create(g, keep, nkeep, out);
  /* a GPU job's on its device from the start (before plans share a scratch arena) */
  if (!rc && d->gpu && (rc = ts_plan_set_device(*out, ts__dist_dev_device(d)))) {
    ts_plan_free(*out);
    *out = NULL;
  }
  return rc;
}

int ts__dist_plans(ts_dist *d) {
  ts_dist_run *r = &d->r;
  int rc = ts__dist_alloc_store(d, r->params);
  if (rc) return rc;
  int cap = ts_params_count(r->params) + 1, nk = 0;
  ts_val *keep = malloc(sizeof *keep * (size_t)(cap + 1));
  if (!keep) return ts_error_set(TS_ENOMEM, "plans: out of memory");
  if ((rc = ts_params_attach_grads(r->params, r->g, keep, cap, &nk))) {
    free(keep);
    return rc;
  }
  keep[nk++] = r->loss;
  rc = ts__dist_plan_create(d, r->g, keep, nk, &r->plan);
  free(keep);
  if (rc) return rc;
  if ((rc = ts_params_bind(r->params, r->g, r->plan)) ||
      (rc = ts__dist_plan_create(d, r->ge, &r->logits, 1, &r->plan_e)) ||
      (rc = ts_params_bind(r->params, r->ge, r->plan_e)))
    return rc;
  for (int i = 0; i < ts_params_count(r->params); i++) r->sliced |= ts_params_is_sharded(r->params, i);
  r->logits_shape = ts_val_shape(r->ge, r->logits);
  return TS_OK;
}

/* ---- models built per rank: stand_alone, data_parallel, hybrid_parallel ---- */

/* cut: the batch is cut over the ranks; seed_mean: the loss seed is divided by the ranks */
static int build_per_rank(ts_dist *d, int cut, int seed_mean) {
  const ts_dist_config *c = &d->cfg;
  ts_dist_run *r = &d->r;
  int rc;
  if (cut && (c->micro_batch * c->accum % r->size || c->micro_batch % r->size))
    return ts_error_set(TS_ECONFIG,
                        "train.batch_size %lld (micro_batch_size %lld) is the global batch and must divide "
                        "by the %d ranks",
                        (long long)(c->micro_batch * c->accum), (long long)c->micro_batch, r->size);
  per_rank *pr = calloc(1, sizeof *pr);
  if (!pr) return ts_error_set(TS_ENOMEM, "%s: out of memory", d->vt->name);
  d->priv = pr;
  r->data_parts = cut ? r->size : 1;
  r->data_index = cut ? r->rank : 0;
  r->eval_parts = 1;
  r->eval_split = r->data_parts > 1;
  r->micro_batch = c->micro_batch / r->data_parts;
  if ((rc = ts_params_create(&r->params)) || (rc = ts_graph_create(&r->g)) || (rc = ts_graph_create(&r->ge)))
    return rc;
  ts_graph_set_training(r->ge, 0);
  /* training graph */
  ts_nn nn = {r->g, r->params};
  ts_val logits;
  ts__dist_inputs(d, r->g, r->micro_batch, 1, &r->x, &r->y);
  if (d->vt->world && c->sync_batchnorm) ts_graph_set_batchnorm_sync(r->g, 0);
  if ((rc = ts__dist_build_model(d, &nn, &r->x, &r->y, &logits, &r->loss))) return rc;
  /* every rank's loss is its own variable of the objective (the collectives' adjoints sum over
   * ranks): hybrid_parallel seeds 1/N and SUMs the gradients of parameters several ranks hold,
   * so data- and model-parallel copies both come out right (docs/parallel-pass.md) */
  d->seed = 1.0f / (float)c->accum;
  if (seed_mean) d->seed /= (float)r->size;
  if ((rc = ts__dist_backward(d))) return rc;
  /* evaluation graph: same parameters (by name), inference mode */
  ts_nn nne = {r->ge, r->params};
  ts__dist_inputs(d, r->ge, c->eval_batch, 0, &r->xe, NULL);
  if ((rc = ts__dist_build_model(d, &nne, &r->xe, NULL, &r->logits, NULL))) return rc;
  if ((rc = ts__dist_plans(d)) || !d->world) return rc;
  /* communicators: slot 0 every rank, then the groups a hybrid model asked for */
  if (pr->ngroups > 0 && !(pr->group_comm = calloc((size_t)pr->ngroups, sizeof *pr->group_comm)))
    return ts_error_set(TS_ENOMEM, "hybrid_parallel: out of memory (%d groups)", pr->ngroups);
  for (int k = 0; k < pr->ngroups && !rc; k++)
    rc = ts_comm_grid_axis(d->world, pr->group[k].ndev, pr->group[k].dev, pr->group[k].axis, &pr->group_comm[k]);
  ts_plan *plans[2] = {r->plan, r->plan_e};
  for (int p = 0; p < 2 && !rc; p++) {
    rc = ts_plan_set_comm(plans[p], 0, d->world);
    for (int k = 0; k < pr->ngroups && !rc; k++) rc = ts_plan_set_comm(plans[p], k + 1, pr->group_comm[k]);
  }
  return rc;
}

static int build_stand_alone(ts_dist *d, const ts_dist_model *m) {
  (void)m;
  d->loss_op = TS_REDUCE_COUNT; /* one process: nothing to reduce */
  return build_per_rank(d, 0, 0);
}

static int build_data(ts_dist *d, const ts_dist_model *m) {
  (void)m;
  d->loss_op = TS_REDUCE_MEAN;
  d->loss_weight = 1;
  d->sync.mean = d->cfg.gradients_mean;
  int rc = build_per_rank(d, 1, 0);
  if (!rc) rc = d->sync.vt->plan(d); /* the sync object's layout of the store (ZeRO's shards), for plans too */
  return rc;
}

static int build_hybrid(ts_dist *d, const ts_dist_model *m) {
  (void)m;
  d->loss_op = TS_REDUCE_MEAN; /* the ranks' losses averaged, as data parallel */
  d->loss_weight = 1;
  d->sync.mean = 0;
  return build_per_rank(d, !d->cfg.full_batch, d->cfg.gradients_mean);
}

static int check_hybrid(const ts_dist_config *c, const ts_dist_model *m) {
  (void)c;
  if (!m || !m->fn || !m->custom)
    return ts_error_set(TS_ECONFIG, "parallel.mode: hybrid_parallel runs models written with the C API for one rank "
                        "(ts_trainer_create_custom, examples/hybrid_mlp.c); for zoo models use semi_auto_parallel");
  return TS_OK;
}

static void free_per_rank(ts_dist *d) {
  per_rank *pr = d->priv;
  for (int k = 0; pr && pr->group_comm && k < pr->ngroups; k++) ts_comm_free(pr->group_comm[k]);
  if (pr) {
    free(pr->group);
    free(pr->group_comm);
    free(pr);
  }
  d->priv = NULL;
  ts_graph_free(d->r.g);
  ts_graph_free(d->r.ge);
  ts_params_free(d->r.params);
}

int ts__dist_broadcast_check(const ts_dist *d) {
  if (d->cfg.parameter_broadcast && d->r.sliced)
    return ts_error_set(TS_ECONFIG, "parallel.parameter_broadcast: the parameters are held as slices (each rank "
                        "initialises its own from the counter-based RNG, identical to the whole model's)");
  return TS_OK;
}

int ts__dist_start_world(ts_dist *d) {
  const ts_dist_config *c = &d->cfg;
  ts_params *p = d->r.params;
  int rc = ts__dist_broadcast_check(d);
  if (rc) return rc;
  if (c->parameter_broadcast) {
    /* a sync object holding the parameters (ZeRO-3): no whole copy to send; each rank's shard is
     * initialised from the counter-based RNG at its global positions, the values rank 0 has there */
    if (ts_params_data(p)) rc = ts_comm_broadcast(d->world, ts_params_data(p), ts_params_numel(p), TS_F32, 0);
    if (!rc && ts_params_state_numel(p))
      rc = ts_comm_broadcast(d->world, ts_params_states(p), ts_params_state_numel(p), TS_F32, 0);
    if (rc) return rc;
  }
  return d->sync.vt->start(d, d->world, 1); /* over every rank, overlapped with backward where it can */
}

/* Without sync_batchnorm each rank's running statistics follow its own batches; before they are
 * used (evaluation) or saved, every rank takes their mean over the ranks, as one set. */
static int sync_data(ts_dist *d) {
  ts_params *p = d->r.params;
  if (!d->world || d->r.size < 2 || d->cfg.sync_batchnorm || !ts_params_state_numel(p)) return TS_OK;
  int rc = ts_comm_allreduce(d->world, ts_params_states(p), ts_params_states(p), ts_params_state_numel(p), TS_F32,
                             TS_REDUCE_MEAN);
  return rc ? ts_error_wrap(rc, "averaging BatchNorm running statistics over the ranks") : TS_OK;
}

static int describe_per_rank(ts_dist *d, FILE *out) {
  const ts_dist_run *r = &d->r;
  int sharded = 0;
  for (int i = 0; i < ts_params_count(r->params); i++) sharded += ts_params_is_sharded(r->params, i);
  fprintf(out, "every parameter %s; the batch %s; gradients of parameters several ranks hold %s over them\n",
          sharded                                    ? "as the model registers it (slices where it registers them sharded)"
          : d->sync.vt->params_note(d) ? d->sync.vt->params_note(d)
                                     : "replicated",
          r->data_parts > 1 ? "cut over the ranks" : "read whole by every rank",
          d->sync.mean ? "averaged" : "summed");
  d->sync.vt->describe(d, out);
  return TS_OK;
}

static const ts_dist_vt stand_alone = {.name = "stand_alone", .build = build_stand_alone,
                                       .describe = describe_per_rank, .free = free_per_rank};
static const ts_dist_vt data_parallel = {.name = "data_parallel", .world = 1, .build = build_data,
                                         .start = ts__dist_start_world, .sync_states = sync_data,
                                         .describe = describe_per_rank, .free = free_per_rank};
static const ts_dist_vt hybrid_parallel = {.name = "hybrid_parallel", .world = 1, .check = check_hybrid,
                                           .build = build_hybrid, .start = ts__dist_start_world,
                                           .describe = describe_per_rank, .free = free_per_rank};

const ts_dist_vt *ts_dist_find(const char *mode) {
  const ts_dist_vt *all[] = {&stand_alone, &data_parallel, &ts__dist_semi_auto, &hybrid_parallel, &ts__dist_pipeline};
  for (size_t k = 0; mode && k < sizeof all / sizeof all[0]; k++)
    if (!strcmp(all[k]->name, mode)) return all[k];
  return NULL;
}

const char *ts_dist_name(const ts_dist_vt *vt) { return vt ? vt->name : "?"; }

/* ---- the object ---- */

int ts_dist_create(const ts_dist_vt *vt, const ts_dist_config *cfg, const ts_dist_model *m, int dry, int rank,
                   ts_dist **out) {
  *out = NULL;
  int rc = TS_OK;
  if (!vt || !cfg) return ts_error_set(TS_EINVAL, "ts_dist_create: no layout or configuration");
  if (dry < 0 || (dry && (rank < 0 || rank >= dry)))
    return ts_error_set(TS_EINVAL, "plan: rank %d of %d devices", rank, dry);
  if (cfg->micro_batch < 1 || cfg->eval_batch < 1 || cfg->accum < 1)
    return ts_error_set(TS_EINVAL, "ts_dist_create: batch sizes must be positive");
  if (dry > 1 && !vt->world)
    return ts_error_set(TS_ECONFIG, "parallel.mode: %s runs on one device; set parallel.mode (data_parallel, "
                        "semi_auto_parallel) to plan for %d", vt->name, dry);
  if (cfg->device == 1 && !dry && (rc = ts__dist_dev_check(vt->name, cfg))) return rc; /* before MPI starts */
  ts__compat_key key; /* the compatibility table's refusals, then the layout's own */
  ts__compat_key_of(vt->name, cfg, &key);
  rc = ts__compat_check(TS__COMPAT_OBJECT, &key);
  if (!rc && vt->check) rc = vt->check(cfg, m);
  if (rc) return rc;
  ts_dist *d = calloc(1, sizeof *d);
  if (!d) return ts_error_set(TS_ENOMEM, "ts_dist_create: out of memory");
  d->vt = vt;
  d->cfg = *cfg;
  d->sync.vt = ts__sync_choose(cfg); /* all-reduce buckets, or ZeRO's sharding */
  /* the config's lists are the caller's: the object keeps copies */
  if (cfg->nfusion_splits > 0) {
    d->own_splits = malloc(sizeof(int) * (size_t)cfg->nfusion_splits);
    if (d->own_splits) memcpy(d->own_splits, cfg->fusion_splits, sizeof(int) * (size_t)cfg->nfusion_splits);
  }
  if (cfg->n_stage_rules > 0) {
    d->own_rules = malloc(sizeof *d->own_rules * (size_t)cfg->n_stage_rules);
    if (d->own_rules) memcpy(d->own_rules, cfg->stage_rules, sizeof *d->own_rules * (size_t)cfg->n_stage_rules);
  }
  d->cfg.fusion_splits = d->own_splits;
  d->cfg.stage_rules = d->own_rules;
  if ((cfg->nfusion_splits > 0 && !d->own_splits) || (cfg->n_stage_rules > 0 && !d->own_rules)) {
    ts_dist_free(d);
    return ts_error_set(TS_ENOMEM, "ts_dist_create: out of memory");
  }
  d->loss_scale = 1;
  d->seed_val = TS_NONE;
  d->dry = dry;
  d->r.rank = dry ? rank : 0;
  d->r.size = dry ? dry : 1;
  if (vt->world && !dry) {
    rc = ts_comm_init(NULL, NULL);
    if (!rc) rc = ts_comm_world(&d->world);
    /* the job's blocking collectives (the buckets left after backward, ZeRO's at the step's end,
     * the loss, clipping's norm, the plans' collectives) are MPI's blocking calls under the
     * watchdog, and so are those of every communicator made from the world from now on: a
     * training job ends on a timeout either way (docs/comm.md, the timeout contract) */
    if (!rc) rc = ts_comm_set_blocking(d->world, TS_COMM_BLOCKING_NATIVE);
    if (rc) {
      ts_dist_free(d);
      return rc;
    }
    d->r.rank = ts_comm_rank(d->world);
    d->r.size = ts_comm_size(d->world);
  }
  if (cfg->device == 1 && !dry && (rc = ts__dist_dev_open(d))) {
    ts_dist_free(d);
    return rc;
  }
  *out = d;
  return TS_OK;
}

void ts_dist_free(ts_dist *d) {
  if (!d) return;
  ts__dist_dev_free(d); /* the plans' device memory first (a GPU job) */
  if (d->sync.vt) d->sync.vt->free(d);
  ts__lamb_free(d->sync.lamb);
  ts_plan_free(d->r.plan);
  ts_plan_free(d->r.plan_e);
  if (d->vt->free) d->vt->free(d);
  ts_comm_free(d->world);
  free(d->own_splits);
  free(d->own_rules);
  free(d);
}

ts_comm *ts_dist_world(ts_dist *d) { return d ? d->world : NULL; }
const ts_dist_run *ts_dist_get(const ts_dist *d) { return &d->r; }

int ts_dist_build(ts_dist *d, const ts_dist_model *m) {
  if (!m || !m->fn) return ts_error_set(TS_EINVAL, "ts_dist_build: no model builder");
  if (d->r.g) return ts_error_set(TS_EINVAL, "ts_dist_build: already built");
  d->model = *m;
  int rc = d->vt->build(d, m);
  d->model.strategies = NULL; /* read during the build only */
  if (!rc && d->gpu) rc = ts__dist_dev_bind(d);
  return rc;
}

int ts_dist_start(ts_dist *d) {
  if (d->gpu && d->world) return ts__dist_dev_start(d); /* the devices' collectives, not the host's buckets */
  return d->world && d->vt->start ? d->vt->start(d) : TS_OK;
}

void ts_dist_step_begin(ts_dist *d, float *grads) {
  if (!d->gpu) d->sync.vt->begin(d, grads); /* arms overlapped reductions */
}

void ts_dist_set_span(ts_dist *d, ts_dist_span_fn fn, void *user) {
  d->span = fn;
  d->span_user = user;
}

void ts__dist_row_bytes(const ts_dist *d, size_t *xs, size_t *ys) {
  const ts_dist_model *m = &d->model;
  *xs = (size_t)ts_shape_numel(&m->sample) * ts_dtype_size(m->dtype);
  *ys = m->values ? (size_t)ts_shape_numel(&m->target) * sizeof(float)
        : m->text ? (size_t)ts_shape_numel(&m->sample) * sizeof(int32_t)
                  : sizeof(int32_t);
}

int ts_dist_forward_backward(ts_dist *d, const void *x, const void *y, int64_t step, float *acc, double *loss,
                             float **g) {
  if (d->gpu) return ts__dist_dev_fwd_bwd(d, x, y, step, loss, g);
  if (d->vt->forward_backward) return d->vt->forward_backward(d, x, y, step, acc, loss, g);
  const ts_dist_run *r = &d->r;
  size_t xs, ys;
  ts__dist_row_bytes(d, &xs, &ys);
  int64_t accum = d->cfg.accum;
  float *grads = ts_params_grads(r->params);
  double sum = 0;
  for (int64_t k = 0; k < accum; k++) {
    int rc = ts_plan_bind(r->plan, r->x, (char *)x + (size_t)(k * r->micro_batch) * xs);
    if (!rc) rc = ts_plan_bind(r->plan, r->y, (char *)y + (size_t)(k * r->micro_batch) * ys);
    if (!rc) rc = ts_plan_run(r->plan, (uint64_t)(step * accum + k));
    if (rc) return rc;
    sum += *(const float *)ts_plan_data(r->plan, r->loss);
    if (accum > 1) {
      double ta = ts_time_now();
      rc = ts_dist_accumulate(d, grads, acc, k); /* the sync object may reduce it now (ZeRO-2) */
      if (rc) return rc;
      if (d->span) d->span("grad_accumulate", 0, ta, ts_time_now(), d->span_user);
    }
  }
  *loss = sum / (double)accum;
  *g = accum > 1 ? acc : grads;
  return TS_OK;
}

void ts__dist_eval_out(const ts_dist *d, const float *lg, const ts__eval_out *o) {
  const ts_shape *ls = &d->r.logits_shape;
  if (o->rows) ts__eval_rows_ref(lg, o->lab, o->nr, ls->dims[ls->ndim - 1], o->rows);
  else *o->logits = lg;
}

static int eval(ts_dist *d, const void *x, const ts__eval_out *o) {
  if (d->gpu) return ts__dist_dev_eval(d, x, o);
  int rc0 = d->sync.vt->settle ? d->sync.vt->settle(d) : TS_OK; /* the parameters' updates landed */
  if (rc0) return rc0;
  if (d->vt->eval) return d->vt->eval(d, x, o);
  const ts_dist_run *r = &d->r;
  size_t xs, ys;
  ts__dist_row_bytes(d, &xs, &ys);
  /* the rank feeds its piece of the batch (all of it in most layouts); the logits come back whole */
  int rc = ts_plan_bind(r->plan_e, r->xe, (char *)x + xs * (size_t)(d->cfg.eval_batch / r->eval_parts * r->eval_index));
  if (!rc) rc = ts_plan_run(r->plan_e, 0);
  if (!rc) ts__dist_eval_out(d, ts_plan_data(r->plan_e, r->logits), o);
  return rc;
}

int ts_dist_eval_rows(ts_dist *d, const void *x, const int32_t *lab, int64_t nr, ts__eval_row *rows) {
  const ts__eval_out o = {lab, nr, rows, NULL};
  return eval(d, x, &o);
}

int ts_dist_eval_forward(ts_dist *d, const void *x, const float **logits) {
  *logits = NULL;
  const ts__eval_out o = {NULL, 0, NULL, logits};
  return eval(d, x, &o);
}

int ts_dist_step_end(ts_dist *d, float *g, double *loss, double *wait_ms) {
  *wait_ms = 0;
  if (!d->world) return TS_OK;
  int src = d->gpu ? ts__dist_dev_reduce(d, g, wait_ms) /* on the devices */
                   : d->sync.vt->reduce(d, g, wait_ms); /* its errors name the reduction and the group */
  if (src) return src;
  if (d->vt->reduce && !d->gpu) { /* (a GPU job's: in ts__dist_dev_reduce) */
    int rc = d->vt->reduce(d, g);
    if (rc) return rc;
  }
  if (d->loss_op != TS_REDUCE_COUNT) {
    float l = (float)*loss * d->loss_weight;
    int rc = ts_comm_allreduce(d->world, &l, &l, 1, TS_F32, d->loss_op);
    if (rc) return ts_error_wrap(rc, "the step's loss over the ranks");
    *loss = l;
  }
  return TS_OK;
}

size_t ts_dist_accum_numel(const ts_dist *d) { return d->cfg.accum < 2 ? 0 : d->sync.vt->accum_numel(d); }

int ts_dist_accumulate(ts_dist *d, const float *grads, float *acc, int64_t k) {
  return d->sync.vt->accumulate(d, grads, acc, k); /* acc, or the sync object's reduced part */
}

/* ---- loss scaling and global-norm clipping ----
 * The loss scale S multiplies the seed of every training plan's backward, so the gradients come
 * out multiplied by S. Clipping (every layout's, all through ts__dist_clip_finish) computes the
 * norm of the scaled gradients as it always did, divides it by S, and multiplies the gradients
 * once by (1/S) * the clipping coefficient of the true norm: unscaling costs no extra pass where
 * clipping scales anyway, and no communication at all. A norm that is not finite is an overflow.
 * Every rank sees the same: the norm each path computes is global. Data parallel (and every
 * replicated parameter) computes it from the reduced gradients, identical on every rank (the
 * replicas' parameters would drift apart otherwise), and an inf or NaN of any rank's gradient
 * is inf or NaN in the reduced sum, in any summation order; sliced, sharded and pipelined
 * gradients sum their squares over the ranks in one all-reduce of one float, whose result every
 * rank shares. */

int ts_dist_set_loss_scale(ts_dist *d, float scale) {
  if (!d) return ts_error_set(TS_EINVAL, "ts_dist_set_loss_scale: NULL object");
  float seed = d->seed * scale;
  if (!(scale > 0) || !isfinite(scale) || !isfinite(seed) || !(seed > 0))
    return ts_error_set(TS_EINVAL, "loss scale %g: the loss seed %g x the scale must be a finite positive f32",
                        (double)scale, (double)d->seed);
  int rc = TS_OK;
  if (d->vt->set_seed) rc = d->vt->set_seed(d, seed); /* e.g. every pipeline piece's every instance */
  else if (d->r.plan) rc = ts_plan_set_const(d->r.plan, d->seed_val, seed);
  if (rc) return ts_error_wrap(rc, "setting the loss scale %g", (double)scale);
  d->loss_scale = scale;
  return TS_OK;
}

float ts_dist_loss_scale(const ts_dist *d) { return d->loss_scale; }

float ts__dist_clip_factor(double sq, ts__clip *c) {
  double nrm = sqrt(sq);
  c->norm = (float)nrm;
  c->overflow = !isfinite(c->norm);
  if (c->overflow) return 1.0f;
  float f = c->max_norm > 0 ? ts_clip_coef(c->norm, c->max_norm) : 1.0f;
  if (c->inv_scale != 1.0f) f *= c->inv_scale; /* one pass: unscaled and clipped */
  return f;
}

void ts__dist_clip_finish(double sq, float *g, size_t n, ts__clip *c) {
  float f = ts__dist_clip_factor(sq, c);
  if (f != 1.0f) ts_scale_f32(g, n, f);
}

int ts_dist_clip_scaled(ts_dist *d, float *g, float max_norm, float inv_scale, float *norm, int *overflow) {
  ts__clip c = {max_norm, inv_scale, 0, 0};
  *norm = 0;
  if (overflow) *overflow = 0;
  if (!(inv_scale > 0) || !isfinite(inv_scale))
    return ts_error_set(TS_EINVAL, "gradient clipping: 1 / the loss scale is %g", (double)inv_scale);
  int rc, mine = 0;
  if (d->gpu) rc = ts__dist_dev_clip(d, g, &c);
  else if (d->vt->clip) rc = d->vt->clip(d, g, &c);
  else { /* the sync object's parts, or the layout's reduced gradients g */
    rc = d->sync.vt->clip(d, g, &c, &mine);
    if (!rc && !mine) rc = ts__dist_clip_default(d, g, &c);
  }
  *norm = c.norm;
  if (overflow) *overflow = c.overflow;
  return rc;
}

int ts_dist_clip(ts_dist *d, float *g, float max_norm, float *norm) {
  return ts_dist_clip_scaled(d, g, max_norm, 1.0f, norm, NULL);
}

int ts_dist_sync_states(ts_dist *d) {
  if (d->gpu) return d->world && d->vt->sync_states ? ts__dist_dev_sync_states(d) : TS_OK; /* data_parallel's */
  return d->vt->sync_states ? d->vt->sync_states(d) : TS_OK;
}

int ts_dist_sum(ts_dist *d, int64_t *cnt, int n, double *x) {
  if (!d->world) return TS_OK;
  float f = (float)*x;
  int rc = ts_comm_allreduce(d->world, cnt, cnt, (size_t)n, TS_I64, TS_REDUCE_SUM);
  if (!rc) rc = ts_comm_allreduce(d->world, &f, &f, 1, TS_F32, TS_REDUCE_SUM);
  *x = f;
  return rc;
}

int ts_dist_reduce_bytes(const ts_dist *d, double *reduce_bytes) {
  *reduce_bytes = 0;
  if (d->vt->reduce_bytes) return d->vt->reduce_bytes(d, reduce_bytes); /* e.g. over a stage's replicas */
  /* the sync object's: each parameter over the ranks holding its slice (ring all-reduce), or
   * ZeRO's reduce-scatter, all-gather and stage 3's gathers */
  return d->sync.vt->comm_bytes(d, reduce_bytes);
}

int ts_dist_describe(ts_dist *d, FILE *out, double *reduce_bytes) {
  int rc = d->vt->describe ? d->vt->describe(d, out) : TS_OK;
  if (!rc) rc = ts_dist_reduce_bytes(d, reduce_bytes);
  return rc;
}

void ts_dist_activation_bytes(const ts_dist *d, int measured, int64_t *train, int64_t *eval) {
  if (d->vt->activation_bytes) {
    d->vt->activation_bytes(d, measured, train, eval);
    return;
  }
  const ts_dist_run *r = &d->r;
  *train = !r->plan ? 0 : (int64_t)(measured ? ts_plan_arena_bytes(r->plan) : ts_plan_peak_bytes(r->plan));
  *eval = !r->plan_e ? 0 : (int64_t)(measured ? ts_plan_arena_bytes(r->plan_e) : ts_plan_peak_bytes(r->plan_e));
}

const ts_graph *ts_dist_train_piece(const ts_dist *d, int i, const ts_plan **plan) {
  if (plan) *plan = NULL;
  if (d->vt->train_piece) return d->vt->train_piece(d, i, plan);
  if (i != 0 || !d->r.g) return NULL;
  if (plan) *plan = d->r.plan;
  return d->r.g;
}

void ts_dist_comm_bytes(const ts_dist *d, int64_t *fwd, int64_t *bwd) {
  *fwd = ts_parallel_comm_bytes(d->r.g, 0);
  *bwd = ts_parallel_comm_bytes(d->r.g, 1);
}

const char *ts_dist_reduction_note(const ts_dist *d) { return d ? d->sync.vt->note(d) : ""; }

/* ---- the optimizer, through the sync object ---- */

int ts_dist_optim_create(ts_dist *d, const ts_optim_config *cfg, const ts_optim_segment *segs, int nseg,
                         ts_optim **out) {
  *out = NULL;
  int rc = d->sync.vt->optim_create(d, cfg, segs, nseg, out);
  if (!rc && d->gpu && (rc = ts__dist_dev_optim_create(d, segs, nseg, *out))) {
    ts_optim_free(*out);
    *out = NULL;
  }
  return rc;
}

int ts_dist_optim_step(ts_dist *d, ts_optim *opt, float *params, const float *grads, float lr) {
  if (d->gpu) return ts__dist_dev_optim_step(d, opt, grads, lr); /* params and grads on the device */
  return d->sync.vt->optim_step(d, opt, params, grads, lr);
}

int ts_dist_optim_sharded(const ts_dist *d, size_t *replicated, size_t *sharded) {
  return d->sync.vt->sharded(d, replicated, sharded);
}

/* ---- the layout's answers (dist_impl.h, query.h) ---- */

int ts__dist_stages(const ts_dist *d) { return d->vt->stages ? d->vt->stages(d) : 1; }

int ts__dist_stage_rules(const ts_dist *d, ts_op_text **rules, int *n) {
  *rules = NULL;
  *n = 0;
  return d->vt->stage_rules ? d->vt->stage_rules(d, rules, n) : TS_OK;
}

int ts__dist_train_plans(const ts_dist *d, ts_plan ***plans) {
  if (d->vt->train_plans) return d->vt->train_plans(d, plans);
  *plans = (ts_plan **)&d->r.plan;
  return d->r.plan ? 1 : 0;
}

void ts__dist_shard_base(const ts_dist *d, ts_comm **c, int *n, int *r) {
  if (d->vt->shard_base) {
    d->vt->shard_base(d, c, n, r);
    return;
  }
  *c = d->world;
  *n = d->r.size;
  *r = d->r.rank;
}

int ts__dist_tied(const ts_dist *d, int i) { return d->vt->tied ? d->vt->tied(d, i) : 0; }
int ts__dist_tied_shardable(const ts_dist *d) { return d->vt->tied_shardable ? d->vt->tied_shardable(d) : 1; }
float ts__dist_norm_weight(const ts_dist *d, int i) { return d->vt->norm_weight ? d->vt->norm_weight(d, i) : 1; }
ts_params *ts__dist_whole_params(const ts_dist *d) { return d->vt->whole_params ? d->vt->whole_params(d) : NULL; }

int ts_dist_pipeline_times(const ts_dist *d, double *wall, double *bubble, double *recv_wait) {
  if (d->vt->times) return d->vt->times(d, wall, bubble, recv_wait);
  *wall = *bubble = *recv_wait = 0;
  return 0;
}

const ts_strategy_set *ts_dist_strategies(const ts_dist *d) { return d->vt->strategies ? d->vt->strategies(d) : NULL; }
