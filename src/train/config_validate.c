/* Configuration: cross-key validation, derived defaults, and conversions into the structs the
 * trainer, optimizer, data pipeline and model zoo take. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>
#include "../base/text.h"
#include "tessera/plot.h"
#include "config_dist.h"
#include "config_impl.h"
#include "planner/planner.h"
#include "train_compat.h"

/* ------------------------------------------------------------------ layout keys
 * The config's pipeline and sharding keys are read and written here and in the schema only;
 * the rest of the trainer asks these functions (and the distribution layer's table, compat.h). */
const char *const ts__config_memory_cuts_none = "none of parallel.optimizer_shard or model.recompute applies here";

void ts__config_memory_cuts(const ts_config *c, const ts_dist_memory_info *m, int ranks, char *buf, size_t cap) {
  size_t n = 0;
  char h[32];
  buf[0] = 0;
  /* stages 1 and 2: data_parallel and semi_auto_parallel, with or without pipeline stages (the
   * repeat of each slice; on a stage's replicas); stage 3: data_parallel alone */
  int data = c->parallel.mode == TS_PARALLEL_DATA || c->parallel.mode == TS_PARALLEL_SEMI_AUTO;
  int data3 = c->parallel.mode == TS_PARALLEL_DATA && c->parallel.pipeline_stages < 2;
  int accum = c->train.batch_size / (c->train.micro_batch_size > 0 ? c->train.micro_batch_size : c->train.batch_size);
  if (m->optimizer_state_bytes > 0 && data && ranks > 1 && !c->parallel.optimizer_shard)
    ts__app(buf, cap, &n, "parallel.optimizer_shard: 1 or 2 (the optimizer state, %s, split over the %d ranks%s)",
            ts__human_bytes((double)m->optimizer_state_bytes, h, sizeof h), ranks,
            c->parallel.mode == TS_PARALLEL_DATA && c->parallel.pipeline_stages < 2 ? "" : " holding each slice");
  else if (m->optimizer_state_bytes > 0 && (!data || ranks < 2) && !c->parallel.optimizer_shard)
    ts__app(buf, cap, &n, "parallel.mode: data_parallel or semi_auto_parallel on several ranks with parallel.optimizer_shard (the "
            "optimizer state, %s, split over them)", ts__human_bytes((double)m->optimizer_state_bytes, h, sizeof h));
  if (data && ranks > 1 && c->parallel.optimizer_shard == 1 && accum > 1)
    ts__app(buf, cap, &n, "%sparallel.optimizer_shard: 2 (no whole-model accumulation buffer, %s)", n ? "; " : "",
            ts__human_bytes((double)m->accum_bytes, h, sizeof h));
  if (data3 && ranks > 1 && c->parallel.optimizer_shard && c->parallel.optimizer_shard < 3)
    ts__app(buf, cap, &n, "%sparallel.optimizer_shard: 3 (the parameters, %s, split over the ranks too)", n ? "; " : "",
            ts__human_bytes((double)m->param_bytes, h, sizeof h));
  if (c->model.recompute != TS_CFG_RECOMPUTE_FULL && m->activation_bytes > 0)
    ts__app(buf, cap, &n, "%smodel.recompute: %s (the activations, %s)", n ? "; " : "",
            c->model.recompute == TS_CFG_RECOMPUTE_NONE ? "full or selective" : "full",
            ts__human_bytes((double)m->activation_bytes, h, sizeof h));
  if (m->activation_bytes > 0)
    ts__app(buf, cap, &n, "%sa smaller train.micro_batch_size (%d now; activations scale with it)", n ? "; " : "",
            c->train.micro_batch_size);
}


void ts__config_set_layout(ts_config *c, int stages, int shard_stage) {
  c->parallel.pipeline_stages = stages;
  c->parallel.optimizer_shard = shard_stage;
  c->parallel.enable_parallel_optimizer = shard_stage > 0;
}

int ts__config_stages(const ts_config *c) { return c->parallel.pipeline_stages > 1 ? c->parallel.pipeline_stages : 1; }

int ts__config_check_auto_tp(const ts_config *c, int N) {
  int T = c->parallel.auto_tp, P = ts__config_stages(c);
  if (N % T) return ts_error_set(TS_ECONFIG, "parallel.auto_tp: %d does not divide the %d ranks", T, N);
  if (N % (T * P))
    return ts_error_set(TS_ECONFIG, "parallel.auto_tp: %d x parallel.pipeline_stages %d does not divide the %d ranks",
                        T, P, N);
  return TS_OK;
}

int ts__config_check_context_parallel(const ts_config *c) {
  const typeof(c->parallel) *pl = &c->parallel;
  int cp = pl->context_parallel;
  if (cp <= 1) return TS_OK;
  if (c->model.name != TS_MODEL_GPT)
    return ts_error_set(TS_ECONFIG, "parallel.context_parallel: %d: its cuts are generated for the zoo's GPT "
                        "(model.name gpt); cut another model's sequence with parallel.strategies", cp);
  if (pl->mode == TS_PARALLEL_SEMI_AUTO && (pl->strategies.n || pl->strategy_ckpt_load_file[0]))
    return ts_error_set(TS_ECONFIG, "parallel.context_parallel: %d with parallel.%s given: the strategies say the "
                        "cuts; write the sequence cut into them (docs/parallel-pass.md), or leave them out", cp,
                        pl->strategies.n ? "strategies" : "strategy_ckpt_load_file");
  if (pl->sequence_parallel)
    return ts_error_set(TS_ECONFIG, "parallel.context_parallel: %d with parallel.sequence_parallel: both cut the "
                        "sequence (not done yet: one dim cut by two device axes)", cp);
  return TS_OK;
}

/* ------------------------------------------------------------------ validation */
static int vfail(const ts_config *cfg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int vfail(const ts_config *cfg, const char *fmt, ...) {
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return ts_error_set(TS_ECONFIG, "%s: %s", cfg->source[0] ? cfg->source : "config", msg);
}

void ts__config_compat_key(const ts_config *cfg, ts__compat_key *k) {
  const typeof(cfg->parallel) *pl = &cfg->parallel;
  static const ts_dtype wire[] = {TS_F32, TS_BF16, TS_F16};
  memset(k, 0, sizeof *k);
  k->mode = ts_parallel_mode_name(pl->mode);
  k->stages = pl->pipeline_stages;
  k->semi = pl->mode == TS_PARALLEL_SEMI_AUTO;
  k->shard = pl->optimizer_shard;
  k->shard_group = pl->optimizer_shard_group;
  k->virtual_stages = pl->virtual_stages;
  k->interleaved = pl->pipeline_schedule == 2;
  k->wire = pl->comm_dtype >= 0 && pl->comm_dtype < 3 ? wire[pl->comm_dtype] : TS_F32;
  k->micro_batches = pl->micro_batches;
  k->stage_rules = pl->stages.n > 0;
  k->full_batch = pl->full_batch;
  k->seq_parallel = pl->sequence_parallel;
  k->context_parallel = pl->context_parallel;
}

int ts__config_stage_ranks(const ts_config *cfg, int ndevices) {
  int p = cfg->parallel.pipeline_stages;
  return p > 1 && ndevices % p == 0 ? ndevices / p : ndevices;
}

/* The compatibility table's refusal of phase ph (src/distribution/compat.c), as vfail's. */
static int compat(const ts_config *cfg, ts__compat_phase ph) {
  ts__compat_key k;
  char msg[512];
  ts__config_compat_key(cfg, &k);
  return ts__compat_find(ph, &k, msg, sizeof msg) < 0 ? TS_OK : vfail(cfg, "%s", msg);
}

static int data_channels(ts_data_kind k) {
  switch (k) {
    case TS_DATA_FASHION_MNIST:
    case TS_DATA_MNIST: return 1;
    case TS_DATA_CIFAR10:
    case TS_DATA_CIFAR100: return 3;
    default: return 0;
  }
}

static int check_transforms(const ts_config *cfg, const char *key, const ts_cfg_transforms *t) {
  int is_float = 0, is_chw = 0, nch = data_channels(cfg->data.name);
  for (int i = 0; i < t->n; i++) {
    const ts_transform *x = &t->v[i];
    const tfdef *d = ts__cfg_tf_by_kind(x->kind);
    const char *name = d ? d->name : "?";
    switch (x->kind) {
      case TS_TF_TO_FLOAT: is_float = 1; break;
      case TS_TF_CAST: is_float = ts_dtype_is_float(x->dtype); break;
      case TS_TF_HWC_TO_CHW:
        if (is_chw) return vfail(cfg, "%s[%d] (hwc_to_chw): the samples are already CHW", key, i);
        is_chw = 1;
        break;
      case TS_TF_NORMALIZE:
        if (!is_float)
          return vfail(cfg, "%s[%d] (normalize): needs float samples: put to_float before it",
                       key, i);
        if (nch && x->nch != nch)
          return vfail(cfg,
                       "%s[%d] (normalize): %d mean/std values but data.name '%s' has %d "
                       "channel%s",
                       key, i, x->nch, ts_data_kind_name(cfg->data.name), nch, nch > 1 ? "s" : "");
        break;
      default:
        (void)name;
        break;
    }
  }
  return TS_OK;
}

int ts_config_validate(ts_config *cfg) {
  if (!cfg) return ts_error_set(TS_EINVAL, "ts_config_validate: NULL config");
  /* enums in range (a program may have set fields directly) */
  for (int i = 0; i < ts__cfg_nkeys; i++) {
    const ts__cfg_key *k = &ts__cfg_keys[i];
    if (k->type != CT_ENUM) continue;
    int v = *(const int *)((const char *)cfg + k->off);
    if (v < 0 || v >= ts__cfg_enum_count(k->names)) return vfail(cfg, "%s: invalid value %d", k->path, v);
  }
  /* ---- log ---- */
  if (cfg->log.plot[0] && !cfg->log.metrics[0])
    return vfail(cfg, "log.plot: the curves are drawn from the metrics file: set log.metrics too "
                 "(e.g. log.metrics: runs/metrics.jsonl)");
  if (cfg->log.plot_size[0]) {
    int w, h;
    if (ts_plot_parse_size(cfg->log.plot_size, "log.plot_size", &w, &h)) return vfail(cfg, "%s", ts_last_error());
  }
  /* ---- train ---- */
  if (cfg->train.epochs <= 0 && cfg->train.steps <= 0)
    return vfail(cfg, "train.epochs and train.steps are both 0: set one of them");
  if (cfg->train.batch_size <= 0)
    return vfail(cfg, "train.batch_size (%d) must be positive", cfg->train.batch_size);
  if (cfg->train.micro_batch_size == 0) cfg->train.micro_batch_size = cfg->train.batch_size;
  if (cfg->train.micro_batch_size > cfg->train.batch_size)
    return vfail(cfg, "train.micro_batch_size (%d) is larger than train.batch_size (%d)",
                 cfg->train.micro_batch_size, cfg->train.batch_size);
  if (cfg->train.batch_size % cfg->train.micro_batch_size)
    return vfail(cfg, "train.batch_size (%d) must be divisible by train.micro_batch_size (%d)",
                 cfg->train.batch_size, cfg->train.micro_batch_size);
  int rc;
  if ((rc = compat(cfg, TS__COMPAT_CONFIG_MICRO))) return rc;
  if (cfg->parallel.micro_batches > 0) {
    if (cfg->train.batch_size % cfg->parallel.micro_batches)
      return vfail(cfg, "parallel.micro_batches (%d) must divide train.batch_size (%d)", cfg->parallel.micro_batches,
                   cfg->train.batch_size);
    if (cfg->train.micro_batch_size != cfg->train.batch_size &&
        cfg->train.micro_batch_size * cfg->parallel.micro_batches != cfg->train.batch_size)
      return vfail(cfg, "parallel.micro_batches (%d) and train.micro_batch_size (%d) disagree for train.batch_size %d; "
                   "give one of them", cfg->parallel.micro_batches, cfg->train.micro_batch_size, cfg->train.batch_size);
  }
  if ((rc = compat(cfg, TS__COMPAT_CONFIG_PIPE))) return rc;
  if (cfg->train.eval_batch_size == 0) cfg->train.eval_batch_size = cfg->train.batch_size;
  /* loss scaling: f16 gradients underflow without it; a dynamic scale starts at or above its floor */
  const typeof(cfg->train) *tr = &cfg->train;
  if (tr->loss_scale == TS_CFG_LOSS_SCALE_NONE && tr->amp_level >= 1 && tr->amp_dtype == 1)
    return vfail(cfg, "train.loss_scale: none is refused with train.amp_level O%d and train.amp_dtype f16: f16's "
                 "range (smallest normal 6.1e-5) underflows small gradients to 0; use dynamic (auto's choice) or "
                 "fixed, or amp_dtype bf16", tr->amp_level);
  ts_loss_scale_config lsc;
  ts_config_loss_scale(cfg, &lsc);
  if (!cfg->train.loss_scale_drop_overflow && lsc.kind != TS_LOSS_SCALE_FIXED)
    return vfail(cfg, "train.loss_scale_drop_overflow: false applies to train.loss_scale: fixed only (a dynamic scale "
                 "always skips the step whose gradients overflowed, as MindSpore's DynamicLossScaleManager does)");
  if (lsc.kind == TS_LOSS_SCALE_DYNAMIC && lsc.init_scale < lsc.min_scale)
    return vfail(cfg, "train.loss_scale_value (%g%s) is below train.loss_scale_min (%g): the dynamic scale starts "
                 "at or above its minimum", lsc.init_scale, tr->loss_scale_value > 0 ? "" : ", dynamic's default",
                 lsc.min_scale);
  /* ---- optimizer ---- */
  const typeof(cfg->optimizer) *o = &cfg->optimizer;
  if (o->nesterov) {
    if (o->name != TS_OPTIM_MOMENTUM)
      return vfail(cfg, "optimizer.nesterov: only for optimizer.name 'momentum' (not '%s')",
                   ts_optim_kind_name(o->name));
    if (!(o->momentum > 0) || o->dampening != 0)
      return vfail(cfg, "optimizer.nesterov needs optimizer.momentum > 0 and "
                   "optimizer.dampening = 0 (got %g and %g)", o->momentum, o->dampening);
  }
  if (o->betas.n != 2) return vfail(cfg, "optimizer.betas: expected 2 values, got %d", o->betas.n);
  const typeof(o->schedule) *s = &o->schedule;
  if (s->min_lr > o->lr)
    return vfail(cfg, "optimizer.schedule.min_lr (%g) is larger than optimizer.lr (%g)", s->min_lr,
                 o->lr);
  if (s->warmup_steps > 0 && s->warmup_epochs > 0)
    return vfail(cfg, "optimizer.schedule: set warmup_steps or warmup_epochs, not both");
  if (s->name == TS_LR_STEP && s->step_size <= 0)
    return vfail(cfg, "optimizer.schedule.step_size: must be > 0 for schedule 'step'");
  if (s->name == TS_LR_MULTISTEP) {
    if (s->milestones.n == 0)
      return vfail(cfg, "optimizer.schedule.milestones: needed (non-empty) for schedule "
                   "'multistep'");
    for (int i = 1; i < s->milestones.n; i++)
      if (s->milestones.v[i] <= s->milestones.v[i - 1])
        return vfail(cfg, "optimizer.schedule.milestones: must increase ([%d] = %d after %d)", i,
                     s->milestones.v[i], s->milestones.v[i - 1]);
  }
  if (s->name == TS_LR_TABLE) {
    if (s->values.n == 0)
      return vfail(cfg, "optimizer.schedule.values: needed (the rate of each step) for schedule 'table'");
    if (s->warmup_steps > 0 || s->warmup_epochs > 0)
      return vfail(cfg, "optimizer.schedule: schedule 'table' gives every step's rate, warm-up included: "
                   "drop warmup_%s", s->warmup_steps > 0 ? "steps" : "epochs");
  }
  /* a warm-up longer than the run is clipped to it where the schedule is built (ts_config_lr_schedule) */
  /* ---- model vs data ---- */
  typeof(cfg->model) *m = &cfg->model;
  typeof(cfg->data) *d = &cfg->data;
  const char *mn = ts_model_kind_name(m->name), *dn = ts_data_kind_name(d->name);
  if ((m->name == TS_MODEL_GPT) != (d->name == TS_DATA_TEXT)) {
    if (m->name == TS_MODEL_GPT)
      return vfail(cfg, "model.name 'gpt' needs data.name 'text' (got '%s')", dn);
    return vfail(cfg, "data.name 'text' needs model.name 'gpt' (got '%s')", mn);
  }
  switch (m->name) {
    case TS_MODEL_RESNET: {
      int dp = m->depth;
      if (!(dp == 18 || dp == 34 || dp == 50 || dp == 101 || dp == 152 ||
            (dp >= 8 && (dp - 2) % 6 == 0)))
        return vfail(cfg, "model.depth: %d is not a ResNet depth (18, 34, 50, 101, 152, or 6n+2 "
                     "such as 20, 32, 44, 56, 110)", dp);
      break;
    }
    case TS_MODEL_GPT:
      if (m->n_embd % m->n_head)
        return vfail(cfg, "model.n_embd (%d) must be divisible by model.n_head (%d)", m->n_embd,
                     m->n_head);
      if (m->vocab_size < 256)
        return vfail(cfg, "model.vocab_size (%d): the text source yields byte ids 0..255, so at "
                     "least 256", m->vocab_size);
      if (m->block_size == 0) m->block_size = d->seq_len;
      if (m->block_size < d->seq_len)
        return vfail(cfg, "model.block_size (%d) is smaller than data.seq_len (%d)", m->block_size,
                     d->seq_len);
      break;
    default: break;
  }
  if (m->name != TS_MODEL_GPT) {
    int known = d->name == TS_DATA_CIFAR100 ? 100 : data_channels(d->name) ? 10 : 0;
    if (m->num_classes == 0) m->num_classes = known;
    if (known && m->num_classes != known)
      return vfail(cfg, "model.num_classes (%d) does not match data.name '%s' (%d classes)",
                   m->num_classes, dn, known);
  }
  if (m->recompute == TS_CFG_RECOMPUTE_NONE && m->recompute_layers.n > 0)
    return vfail(cfg, "model.recompute_layers is given (%d pattern%s, first '%s') but model.recompute is "
                 "none, so nothing would be recomputed: set model.recompute: full (or selective) to "
                 "recompute those segments, or remove model.recompute_layers",
                 m->recompute_layers.n, m->recompute_layers.n == 1 ? "" : "s", m->recompute_layers.v[0]);
  /* ---- data ---- */
  if (!d->path[0]) {
    if (d->name == TS_DATA_FASHION_MNIST)
      snprintf(d->path, sizeof d->path, "%s", TS_FASHION_MNIST_DIR);
    else
      return vfail(cfg, "data.path: required for data.name '%s'", dn);
  }
  if ((rc = check_transforms(cfg, "data.transforms", &d->transforms))) return rc;
  if (d->test_transforms.n >= 0 &&
      (rc = check_transforms(cfg, "data.test_transforms", &d->test_transforms)))
    return rc;
  /* ---- parallel ---- */
  /* enable_parallel_optimizer is optimizer_shard's alias (MindSpore's switch; the stage is
   * optimizer_shard's): given alone it decides, given with it they must agree, and afterwards it
   * mirrors optimizer_shard, so a dumped config loads again */
  typeof(cfg->parallel) *pl = &cfg->parallel;
  int ge = ts_config_given(cfg, "parallel.enable_parallel_optimizer");
  int gs = ts_config_given(cfg, "parallel.optimizer_shard");
  if (ge && gs && !pl->enable_parallel_optimizer != !pl->optimizer_shard) {
    char stage[16] = "off";
    if (pl->optimizer_shard) snprintf(stage, sizeof stage, "%d", pl->optimizer_shard);
    return vfail(cfg, "parallel.enable_parallel_optimizer: %s disagrees with parallel.optimizer_shard: %s "
                 "(the first is the second's alias: true = 1 or a stage given there, false = off); set one "
                 "of them", pl->enable_parallel_optimizer ? "true" : "false", stage);
  }
  if (pl->enable_parallel_optimizer && !pl->optimizer_shard && !gs) pl->optimizer_shard = 1;
  if (ge && !gs && !pl->enable_parallel_optimizer) pl->optimizer_shard = 0;
  pl->enable_parallel_optimizer = pl->optimizer_shard != 0;
  if ((rc = compat(cfg, TS__COMPAT_CONFIG_SHARD))) return rc;
  if ((rc = compat(cfg, TS__COMPAT_CONFIG_SEQ))) return rc;
  /* ---- checkpoint ---- */
  if (!cfg->checkpoint.prefix[0] || strchr(cfg->checkpoint.prefix, '/'))
    return vfail(cfg, "checkpoint.prefix: must be a non-empty file-name prefix without '/' "
                 "(got \"%s\")", cfg->checkpoint.prefix);
  if (!strcmp(cfg->checkpoint.resume, "auto") && !cfg->checkpoint.dir[0])
    return vfail(cfg, "checkpoint.resume: 'auto' needs checkpoint.dir");
  return TS_OK;
}

/* ------------------------------------------------------------------ conversions */
int ts_config_optim(const ts_config *cfg, ts_optim_config *out) {
  if (!cfg || !out) return ts_error_set(TS_EINVAL, "ts_config_optim: NULL argument");
  const typeof(cfg->optimizer) *o = &cfg->optimizer;
  if ((unsigned)o->name >= TS_OPTIM_COUNT)
    return ts_error_set(TS_ECONFIG, "optimizer.name: invalid value %d", (int)o->name);
  *out = ts_optim_config_default(o->name);
  out->weight_decay = o->weight_decay;
  out->momentum = o->momentum;
  out->dampening = o->dampening;
  out->nesterov = o->nesterov;
  out->beta1 = o->betas.n > 0 ? o->betas.v[0] : out->beta1;
  out->beta2 = o->betas.n > 1 ? o->betas.v[1] : out->beta2;
  out->eps = o->eps;
  out->lamb_always_adapt = o->lamb_always_adapt;
  return TS_OK;
}

void ts_config_loss_scale(const ts_config *cfg, ts_loss_scale_config *out) {
  const typeof(cfg->train) *t = &cfg->train;
  int mode = t->loss_scale;
  if (mode == TS_CFG_LOSS_SCALE_AUTO) /* f16 needs a scale; bf16 has f32's range */
    mode = t->amp_level >= 1 && t->amp_dtype == 1 ? TS_CFG_LOSS_SCALE_DYNAMIC : TS_CFG_LOSS_SCALE_NONE;
  memset(out, 0, sizeof *out);
  out->kind = mode == TS_CFG_LOSS_SCALE_FIXED     ? TS_LOSS_SCALE_FIXED
              : mode == TS_CFG_LOSS_SCALE_DYNAMIC ? TS_LOSS_SCALE_DYNAMIC
                                                  : TS_LOSS_SCALE_NONE;
  out->init_scale = t->loss_scale_value > 0                 ? t->loss_scale_value
                    : out->kind == TS_LOSS_SCALE_FIXED   ? TS_LOSS_SCALE_FIXED_DEFAULT
                    : out->kind == TS_LOSS_SCALE_DYNAMIC ? TS_LOSS_SCALE_DYNAMIC_DEFAULT
                                                         : 1.0;
  out->factor = t->loss_scale_factor;
  out->window = t->loss_scale_window;
  out->min_scale = t->loss_scale_min;
  out->keep_overflow = out->kind == TS_LOSS_SCALE_FIXED && !t->loss_scale_drop_overflow;
}

int64_t ts_config_total_steps(const ts_config *cfg, int64_t steps_per_epoch) {
  if (cfg->train.steps > 0) return cfg->train.steps;
  return (int64_t)cfg->train.epochs * (steps_per_epoch > 0 ? steps_per_epoch : 0);
}

/* Keys set explicitly (given, and not at their default) that have no effect given another key's
 * value: "key (why), key (why), ..." into out; returns how many. */
typedef struct {
  const ts_config *cfg, *def;
  char *out;
  size_t cap, len;
  int n;
} unused_list;

static void unused_if(unused_list *u, int cond, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void unused_if(unused_list *u, int cond, const char *key, const char *fmt, ...) {
  if (!cond || !ts_config_given(u->cfg, key)) return;
  char a[256], b[256];
  if (ts_config_get(u->cfg, key, a, sizeof a) || ts_config_get(u->def, key, b, sizeof b) || !strcmp(a, b)) return;
  char why[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  ts__app(u->out, u->cap, &u->len, "%s%s (%s)", u->n ? ", " : "", key, why);
  u->n++;
}

int ts__config_unused(const ts_config *cfg, char *out, size_t cap) {
  if (cap) out[0] = 0;
  ts_config *def = malloc(sizeof *def);
  if (!def) return 0;
  ts_config_defaults(def);
  (void)ts_config_validate(def); /* resolved like a loaded config */
  unused_list u = {cfg, def, out, cap, 0, 0};
  const typeof(cfg->optimizer) *o = &cfg->optimizer;
  const typeof(cfg->optimizer.schedule) *s = &o->schedule;
  const typeof(cfg->train) *t = &cfg->train;
  const char *sn = ts_lr_kind_name(s->name), *on = ts_optim_kind_name(o->name);
  int stepped = s->name == TS_LR_STEP || s->name == TS_LR_MULTISTEP;
  unused_if(&u, s->name != TS_LR_MULTISTEP, "optimizer.schedule.milestones", "schedule %s uses none", sn);
  unused_if(&u, s->name != TS_LR_STEP, "optimizer.schedule.step_size", "schedule %s has none", sn);
  unused_if(&u, !stepped, "optimizer.schedule.gamma", "schedule %s has no decay steps", sn);
  unused_if(&u, !stepped, "optimizer.schedule.unit", "it counts step_size and milestones; schedule %s has neither", sn);
  unused_if(&u, s->name != TS_LR_COSINE, "optimizer.schedule.min_lr", "only cosine decays to it, not %s", sn);
  if (s->name != TS_LR_TABLE && s->values.n > 0) { /* unused_if's text compare: a table may be long */
    ts__app(u.out, u.cap, &u.len, "%soptimizer.schedule.values (only schedule table reads them, not %s)",
            u.n ? ", " : "", sn);
    u.n++;
  }
  unused_if(&u, s->name == TS_LR_TABLE, "optimizer.lr", "schedule table gives every step's rate");
  unused_if(&u, o->name != TS_OPTIM_MOMENTUM, "optimizer.momentum", "optimizer %s has none", on);
  unused_if(&u, o->name != TS_OPTIM_MOMENTUM, "optimizer.dampening", "optimizer %s has no momentum", on);
  int adam = o->name == TS_OPTIM_ADAM || o->name == TS_OPTIM_ADAMW || o->name == TS_OPTIM_LAMB;
  unused_if(&u, !adam, "optimizer.betas", "optimizer %s has no moments", on);
  unused_if(&u, !adam, "optimizer.eps", "optimizer %s has no second moment", on);
  unused_if(&u, o->name != TS_OPTIM_LAMB, "optimizer.lamb_always_adapt", "optimizer %s", on);
  unused_if(&u, t->amp_level == 0, "train.amp_dtype", "train.amp_level is O0: no mixed precision");
  ts_loss_scale_config lsc;
  ts_config_loss_scale(cfg, &lsc);
  const char *ln = lsc.kind == TS_LOSS_SCALE_NONE ? "none" : lsc.kind == TS_LOSS_SCALE_FIXED ? "fixed" : "dynamic";
  unused_if(&u, lsc.kind == TS_LOSS_SCALE_NONE, "train.loss_scale_value", "the loss scale is none");
  unused_if(&u, lsc.kind != TS_LOSS_SCALE_DYNAMIC, "train.loss_scale_factor", "the loss scale is %s, not dynamic", ln);
  unused_if(&u, lsc.kind != TS_LOSS_SCALE_DYNAMIC, "train.loss_scale_window", "the loss scale is %s, not dynamic", ln);
  unused_if(&u, lsc.kind != TS_LOSS_SCALE_DYNAMIC, "train.loss_scale_min", "the loss scale is %s, not dynamic", ln);
  unused_if(&u, t->steps > 0, "train.epochs", "train.steps %lld sets the run's length", (long long)t->steps);
  unused_if(&u, !cfg->log.plot[0], "log.plot_size", "log.plot is empty: no curves drawn");
  ts_config_free(def);
  free(def);
  return u.n;
}

int ts_config_max_steps(int64_t *out) {
  *out = 0;
  const char *e = getenv("TESSERA_MAX_STEPS");
  if (!e || !*e) return TS_OK;
  char *end;
  errno = 0;
  long long n = strtoll(e, &end, 10);
  if (*end || end == e || errno || n <= 0 || e[0] < '0' || e[0] > '9')
    return ts_error_set(TS_ECONFIG, "TESSERA_MAX_STEPS: '%.40s' is not a positive integer (the most optimizer steps "
                        "a run takes; unset it for the config's own length)", e);
  *out = n;
  return TS_OK;
}

int ts_config_lr_schedule(const ts_config *cfg, int64_t spe, ts_lr_schedule *out) {
  if (!cfg || !out) return ts_error_set(TS_EINVAL, "ts_config_lr_schedule: NULL argument");
  const typeof(cfg->optimizer.schedule) *s = &cfg->optimizer.schedule;
  int64_t unit = s->unit == TS_SCHED_UNIT_EPOCHS ? spe : 1;
  const char *src = cfg->source[0] ? cfg->source : "config";
  if (unit <= 0 || ((s->warmup_epochs > 0) && spe <= 0))
    return ts_error_set(TS_ECONFIG, "%s: optimizer.schedule: epoch units need a positive number of "
                        "steps per epoch (got %lld)", src, (long long)spe);
  memset(out, 0, sizeof *out);
  out->kind = s->name;
  out->base_lr = cfg->optimizer.lr;
  out->warmup_steps =
      s->warmup_epochs > 0 ? (int64_t)llround(s->warmup_epochs * (double)spe) : s->warmup_steps;
  /* epochs to steps: a config's step_size (up to 1e18) times the steps per epoch may not fit */
  if (__builtin_mul_overflow(s->step_size, unit, &out->step_size))
    return ts_error_set(TS_ECONFIG, "%s: optimizer.schedule.step_size: %lld epochs x %lld steps per epoch is more "
                        "steps than a run can have", src, (long long)s->step_size, (long long)spe);
  out->gamma = s->gamma;
  out->nmilestones = s->milestones.n;
  for (int i = 0; i < s->milestones.n && i < TS_LR_MAX_MILESTONES; i++)
    if (__builtin_mul_overflow((int64_t)s->milestones.v[i], unit, &out->milestones[i]))
      return ts_error_set(TS_ECONFIG, "%s: optimizer.schedule.milestones[%d]: %lld epochs x %lld steps per epoch is "
                          "more steps than a run can have", src, i, (long long)s->milestones.v[i], (long long)spe);
  out->total_steps = ts_config_total_steps(cfg, spe);
  out->min_lr = s->min_lr;
  if (s->name == TS_LR_TABLE) {
    out->table = s->values.v;
    out->ntable = s->values.n;
    if (out->ntable < out->total_steps) {
      char tot[160];
      if (cfg->train.steps > 0)
        snprintf(tot, sizeof tot, "train.steps %lld", (long long)cfg->train.steps);
      else
        snprintf(tot, sizeof tot, "train.epochs %d x %lld steps per epoch", cfg->train.epochs, (long long)spe);
      return ts_error_set(TS_ECONFIG, "%s: optimizer.schedule.values: %lld rates for a run of %lld steps (%s): "
                          "give one rate per step", src, (long long)out->ntable, (long long)out->total_steps, tot);
    }
  }
  if (out->total_steps > 0 && out->total_steps < out->warmup_steps) {
    /* a warm-up longer than the run (a run shortened by --set train.steps or TESSERA_MAX_STEPS, an
     * epoch-based warm-up over a few steps): clipped to the run, said once with both keys */
    char w[160], tot[160];
    if (s->warmup_epochs > 0)
      snprintf(w, sizeof w, "optimizer.schedule.warmup_epochs %g x %lld steps per epoch = %lld warm-up steps",
               s->warmup_epochs, (long long)spe, (long long)out->warmup_steps);
    else
      snprintf(w, sizeof w, "optimizer.schedule.warmup_steps %lld", (long long)out->warmup_steps);
    if (cfg->train.steps > 0)
      snprintf(tot, sizeof tot, "train.steps %lld", (long long)cfg->train.steps);
    else
      snprintf(tot, sizeof tot, "train.epochs %d x %lld steps per epoch = %lld steps", cfg->train.epochs,
               (long long)spe, (long long)out->total_steps);
    int rank, size;
    ts_job_rank(&rank, &size);
    if (rank == 0)
      ts_log(TS_LOG_WARN, "%s: optimizer.schedule (%s): %s is longer than the run (%s): the warm-up is clipped to "
             "the run's %lld steps", src, ts_lr_kind_name(s->name), w, tot, (long long)out->total_steps);
    out->warmup_steps = out->total_steps;
  }
  int rc = ts_lr_check(out);
  if (rc) return ts_error_wrap(TS_ECONFIG, "%s: optimizer.schedule", src);
  return TS_OK;
}

int ts_config_transforms(const ts_config *cfg, int train, ts_transform *out, int cap) {
  if (!cfg || (!out && cap)) return ts_error_set(TS_EINVAL, "ts_config_transforms: NULL argument");
  const ts_cfg_transforms *src = train ? &cfg->data.transforms : &cfg->data.test_transforms;
  const ts_cfg_transforms *all = &cfg->data.transforms;
  int n = 0;
  if (!train && src->n < 0) {
    for (int i = 0; i < all->n; i++) {
      const tfdef *d = ts__cfg_tf_by_kind(all->v[i].kind);
      if (d && d->random) continue;
      if (n >= cap) return ts_error_set(TS_ERANGE, "ts_config_transforms: room for %d", cap);
      out[n] = all->v[i];
      out[n].list = "data.transforms"; /* messages name the transform where it was written */
      out[n++].list_index = i;
    }
    return n;
  }
  for (int i = 0; i < src->n; i++) {
    if (n >= cap) return ts_error_set(TS_ERANGE, "ts_config_transforms: room for %d", cap);
    out[n] = src->v[i];
    out[n].list = train ? "data.transforms" : "data.test_transforms";
    out[n++].list_index = i;
  }
  return n;
}

void ts_config_mlp(const ts_config *cfg, ts_mlp_config *out) {
  memset(out, 0, sizeof *out);
  out->num_classes = cfg->model.num_classes;
  out->hidden = cfg->model.hidden.v;
  out->nhidden = cfg->model.hidden.n;
  out->label_smoothing = (float)cfg->model.label_smoothing;
}

void ts_config_lenet5(const ts_config *cfg, ts_lenet5_config *out) {
  memset(out, 0, sizeof *out);
  out->num_classes = cfg->model.num_classes;
}

void ts_config_convnet(const ts_config *cfg, ts_convnet_config *out) {
  memset(out, 0, sizeof *out);
  out->num_classes = cfg->model.num_classes;
  out->c1 = cfg->model.channels.n > 0 ? cfg->model.channels.v[0] : 0;
  out->c2 = cfg->model.channels.n > 1 ? cfg->model.channels.v[1] : 0;
  out->bn_momentum = (float)cfg->model.bn_momentum;
  out->bn_eps = (float)cfg->model.bn_eps;
}

void ts_config_resnet(const ts_config *cfg, ts_resnet_config *out) {
  memset(out, 0, sizeof *out);
  out->depth = cfg->model.depth;
  out->num_classes = cfg->model.num_classes;
  out->cifar = cfg->model.cifar_stem;
  out->zero_init_residual = cfg->model.zero_init_residual;
  out->bn_momentum = (float)cfg->model.bn_momentum;
  out->bn_eps = (float)cfg->model.bn_eps;
  out->label_smoothing = (float)cfg->model.label_smoothing;
}

void ts_config_gpt(const ts_config *cfg, ts_gpt_config *out) {
  memset(out, 0, sizeof *out);
  out->vocab_size = cfg->model.vocab_size;
  out->block_size = cfg->model.block_size;
  out->n_layer = cfg->model.n_layer;
  out->n_head = cfg->model.n_head;
  out->n_embd = cfg->model.n_embd;
  out->mlp_ratio = cfg->model.mlp_ratio;
  out->no_bias = !cfg->model.bias;
  out->tie_weights = cfg->model.tie_weights;
  out->dropout = (float)cfg->model.dropout;
  out->dropout_seed = cfg->train.seed;
}

/* parallel.allreduce auto: the planner's prices of the two all-reduces (dist/ cannot call it) */
static int allreduce_price(const char *cluster, int hosts, int local, double bytes, double *flat, double *hier,
                           double *flat_send, char *name, size_t cap) {
  ts_cluster c;
  int rc = ts_cluster_load(cluster, &c);
  if (rc) return rc;
  *flat = ts_cluster_allreduce_flat(&c, hosts, local, bytes);
  *hier = ts_cluster_allreduce_hier(&c, hosts, local, bytes);
  *flat_send = ts_cluster_allreduce_flat_send(&c, hosts, local, bytes);
  snprintf(name, cap, "%s", c.name);
  return TS_OK;
}

/* parallel.reduce_scatter auto: the two reduce-scatters as calibrated (dist/ cannot call the planner) */
static int reduce_scatter_price(const char *cluster, int hosts, int local, double bytes, double *mpi, double *ring,
                                char *name, size_t cap) {
  ts_cluster c;
  int rc = ts_cluster_load(cluster, &c);
  if (rc) return rc;
  *mpi = ts_cluster_reduce_scatter_measured(&c, hosts, local, bytes, 0);
  *ring = ts_cluster_reduce_scatter_measured(&c, hosts, local, bytes, 1);
  snprintf(name, cap, "%s", c.name);
  return TS_OK;
}

void ts_config_dist(const ts_config *cfg, ts_dist_config *out) {
  static const ts_dtype wire[] = {TS_F32, TS_BF16, TS_F16};
  memset(out, 0, sizeof *out);
  out->micro_batch = cfg->train.micro_batch_size;
  out->eval_batch = cfg->train.eval_batch_size;
  out->accum = cfg->train.batch_size / cfg->train.micro_batch_size;
  out->seed = cfg->train.seed;
  out->gradients_mean = cfg->parallel.gradients_mean;
  out->overlap = cfg->parallel.overlap;
  out->allreduce = cfg->parallel.allreduce;
  out->reduce_scatter = cfg->parallel.reduce_scatter;
  out->comm_backend = cfg->parallel.comm_backend;
  out->reduce_scatter_price = reduce_scatter_price;
  out->allreduce_price = allreduce_price;
  snprintf(out->cluster, sizeof out->cluster, "%s", cfg->parallel.cluster);
  out->sync_batchnorm = cfg->parallel.sync_batchnorm;
  out->full_batch = cfg->parallel.full_batch;
  out->sequence_parallel = cfg->parallel.sequence_parallel;
  out->parameter_broadcast = cfg->parallel.parameter_broadcast;
  out->bucket_mb = cfg->parallel.bucket_size_mb;
  out->fusion_splits = cfg->parallel.all_reduce_fusion_config.v; /* borrowed; ts_dist_create copies */
  out->nfusion_splits = cfg->parallel.all_reduce_fusion_config.n;
  out->wire = wire[cfg->parallel.comm_dtype];
  out->lamb = cfg->optimizer.name == TS_OPTIM_LAMB;
  out->recompute = (int)cfg->model.recompute;
  for (int i = 0; i < cfg->model.recompute_layers.n && i < TS_DIST_MAX_RECOMPUTE; i++)
    snprintf(out->recompute_layers[out->n_recompute_layers++], sizeof out->recompute_layers[0], "%s",
             cfg->model.recompute_layers.v[i]);
  out->amp_level = cfg->train.amp_level;
  out->amp_dtype = cfg->train.amp_dtype == 1 ? TS_F16 : TS_BF16;
  out->optimizer_shard = cfg->parallel.optimizer_shard;
  out->shard_threshold_kb = cfg->parallel.optimizer_shard_threshold_kb;
  out->shard_group = cfg->parallel.optimizer_shard_group;
  out->shard_weights = cfg->parallel.optimizer_shard_weights;
  out->pipeline_stages = cfg->parallel.pipeline_stages;
  out->pipeline_semi = cfg->parallel.mode == TS_PARALLEL_SEMI_AUTO;
  out->pipeline_schedule = cfg->parallel.pipeline_schedule;
  out->virtual_stages = cfg->parallel.virtual_stages;
  if (cfg->parallel.pipeline_stages > 1 && cfg->parallel.micro_batches > 0) { /* M micro-batches per step */
    out->accum = cfg->parallel.micro_batches;
    out->micro_batch = cfg->train.batch_size / cfg->parallel.micro_batches;
  }
  out->stage_rules = cfg->parallel.stages.v; /* borrowed; ts_dist_create copies */
  out->n_stage_rules = cfg->parallel.stages.n;
}
