/* Optimizer sharding in mixed precision (DeepSpeed's ZeRO stages 1 and 2 under bf16/fp16;
 * parallel.optimizer_shard_weights, docs/memory.md): 2 + 2 + 12/N and 2 + 14/N bytes a parameter
 * with Adam.
 *
 * The amp pass gives the trainable parameters 16-bit leaves (ts__graph_amp_ex with
 * TS__AMP_PARAMS_LOW: no per-use casts of the weights) and autodiff gives them 16-bit gradients.
 * The store holds no parameters and no gradients (as stage 3): the plans' weights are bound into
 * w16, one whole 16-bit copy of the model; the rank's f32 master weights are the work buffer's
 * R + P floats (wp: the replicated parameters, then its part of every bucket; initialised from the
 * counter-based RNG as stage 3's, and w16 from the same values rounded). Stage 1 binds the
 * gradients into g16, a whole 16-bit buffer, and each bucket is reduce-scattered there in place in
 * 16 bits (the rank's part stays at its own place); stage 2 into the buckets' 16-bit staging slots
 * (the replicated ones into r16), each bucket reduce-scattered into p16, the rank's 16-bit parts.
 * After the reduction the replicated gradients are widened into wg (R floats) and all-reduced in
 * f32. Clipping reads the 16-bit parts; its factor (and 1 / the loss scale) is applied as the
 * optimizer widens them (ts__optim_step_mixed: chunk by chunk, no f32 copy of the parts); the
 * update writes the master weights, their rounding goes into w16 at the rank's places, and every
 * bucket is all-gathered in 16 bits (half the bytes of f32), prefetched into the next forward as
 * f32's. Checkpoints hold the master weights (stage 3's path, held_params); a load refills w16
 * from them (zero_loaded). Data parallel only, one micro-step per update, not LAMB, no shard
 * groups (ts__zero16_dtype says why). */
#include <stdlib.h>
#include <string.h>

#include "zero_impl.h"

ts_dtype ts__zero16_config_dtype(const ts_dist_config *c, const char *mode, int ranks, const char **why) {
  const char *w = NULL;
  if (c->shard_weights == TS_SHARD_WEIGHTS_F32) w = "parallel.optimizer_shard_weights f32";
  else if (c->optimizer_shard < 1 || c->optimizer_shard > 2)
    w = c->optimizer_shard ? "stage 3 keeps f32 parameters (its 16 bytes a parameter over N are mixed precision's "
                             "formula already)"
                           : "parallel.optimizer_shard 1 or 2 (it shards the f32 master weights)";
  else if (c->amp_level < 2) w = "train.amp_level O2 or O3 (below O2, f32 ops would read rounded weights)";
  else if (!mode || strcmp(mode, "data_parallel") || c->pipeline_stages > 1) w = "parallel.mode data_parallel";
  else if (c->accum > 1) w = "one micro-step per update (train.accumulation_steps 1: 16-bit gradients are not "
                             "accumulated)";
  else if (c->lamb) w = "an optimizer other than LAMB (its trust ratios need whole f32 gradients)";
  else if (c->shard_group > 0 && c->shard_group != ranks) w = "parallel.optimizer_shard_group 0";
  else if (c->device) w = "device_target CPU";
  if (why) *why = w;
  return w ? TS_F32 : c->amp_dtype;
}

int ts__zero16_dtype(const ts_dist *d, ts_dtype *dt) {
  const char *why = NULL;
  *dt = ts__zero16_config_dtype(&d->cfg, d->vt->name, d->r.size, &why);
  if (!why || d->cfg.shard_weights != TS_SHARD_WEIGHTS_LOW) return TS_OK;
  return ts_error_set(TS_ECONFIG, "parallel.optimizer_shard_weights: low (16-bit working weights and gradients, f32 "
                      "master weights sharded) needs %s", why);
}

/* A 16-bit pointer i elements on. */
static uint16_t *at16(uint16_t *b, size_t i) { return b ? b + i : NULL; }

/* The plans' values: each trainable parameter's leaf (16-bit) into w16 at its flat offset; states
 * where the store has them. */
typedef struct {
  struct ts__zero *z;
  const ts_graph *g;
  ts_plan *plan;
  ts_params *p;
} binder16;

static int bind16(ts_val v, void *data, void *user) {
  binder16 *b = user;
  ts_val_kind kind = ts_val_kind_of(b->g, v);
  if (kind != TS_VAL_PARAM && kind != TS_VAL_STATE) return TS_OK;
  if (kind == TS_VAL_PARAM) {
    int id = ts_val_param_id(b->g, v);
    if (ts_val_dtype(b->g, v) != b->z->low)
      return ts_error_set(TS_EINVAL, "parallel.optimizer_shard_weights: the plans' leaf of '%s' is %s, not %s",
                          ts_params_name(b->p, id), ts_dtype_name(ts_val_dtype(b->g, v)), ts_dtype_name(b->z->low));
    data = at16(b->z->w16, ts_params_offset(b->p, id));
  }
  return ts_plan_bind(b->plan, v, data);
}

/* w16: every trainable parameter's initial values (the counter-based RNG's, as ts_params_alloc
 * fills a store) rounded to 16 bits, chunk by chunk. */
static int fill16(ts_dist *d, struct ts__zero *z) {
  ts_params *p = d->r.params;
  enum { CH = 65536 };
  float *buf = malloc(CH * sizeof(float));
  int rc = buf ? TS_OK : ts_error_set(TS_ENOMEM, "parallel.optimizer_shard_weights: out of memory");
  for (int i = 0; i < ts_params_count(p) && !rc; i++) {
    if (ts_params_flags(p, i) & TS_PARAM_STATE) continue;
    ts_shape sh = ts_params_shape(p, i);
    size_t off = ts_params_offset(p, i), n = (size_t)ts_shape_numel(&sh);
    for (size_t a = 0; a < n && !rc; a += CH) {
      size_t m = n - a < CH ? n - a : CH;
      rc = ts_params_fill(p, i, d->cfg.seed, (int64_t)a, (int64_t)m, buf);
      if (!rc) rc = ts_convert(buf, TS_F32, z->w16 + off + a, z->low, m);
    }
  }
  free(buf);
  return rc;
}

int ts__zero16_plan(ts_dist *d, struct ts__zero *z) {
  ts_dist_run *r = &d->r;
  ts_params *p = r->params;
  int sizing = ts__dist_sizing(d), st2 = d->cfg.optimizer_shard == 2, rc = TS_OK;
  if (!z->plain || z->ng != 1 || z->g[0].X > 1 || r->sliced)
    return ts_error_set(TS_ECONFIG, "parallel.optimizer_shard_weights: low needs one data-parallel group of whole "
                        "parameters (this model registers slices of its own)");
  if (ts_params_grads(p) || (!sizing && d->world && ts_params_data(p)))
    return ts_error_set(TS_EINVAL, "parallel.optimizer_shard_weights: the store was allocated with its %s",
                        ts_params_grads(p) ? "gradients" : "parameters");
  z->numel = ts_params_numel(p);
  z->gscale = 1;
  zgroup *G = &z->g[0];
  /* the 16-bit buffers: sized, not allocated, in dry runs (the store's are not either), except
   * stage 2's slots and replicated gradients, which are bucket- and R-sized */
  if (!sizing && !(z->w16 = ts_alloc((z->numel + 1) * sizeof(uint16_t))))
    return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard_weights: cannot allocate the %zu 16-bit weights", z->numel);
  if (!st2 && !sizing && !(z->g16 = ts_calloc((z->numel + 1) * sizeof(uint16_t))))
    return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard_weights: cannot allocate the %zu 16-bit gradients",
                        z->numel);
  if (st2 && (!(z->p16 = ts_calloc((z->P + 1) * sizeof(uint16_t))) || !(z->r16 = ts_calloc((z->R + 1) * sizeof(uint16_t)))))
    return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard_weights: out of memory");
  if ((rc = ts__buckets_set_low(G->bk, z->g16, st2 ? z->p16 + G->out : NULL))) return rc;
  if (st2) {
    size_t n = 0;
    if ((rc = ts__buckets_stage(G->bk, 0, sizing, &n)))
      return ts_error_wrap(rc, "parallel.optimizer_shard 2: the gradient buckets' 16-bit staging slots");
    z->stage_numel = n;
    z->staged = 1;
  }
  /* the gradients: stage 1 at their places in g16; stage 2 in their bucket's slot, or r16 */
  ts_plan **plans;
  int npl = ts__dist_train_plans(d, &plans);
  for (int i = 0; i < ts_params_count(p) && !rc; i++) {
    ts_val gv = ts_params_grad_value(p, i);
    if ((ts_params_flags(p, i) & TS_PARAM_STATE) || gv == TS_NONE) continue;
    size_t off = ts_params_offset(p, i);
    void *at = st2 ? NULL : at16(z->g16, off);
    for (int k = 0; k < z->nrep && st2 && !at; k++)
      if (z->rep[k].flat == off) at = z->r16 + z->rep[k].packed;
    if (st2 && !at) at = ts__buckets_grad_ptr(G->bk, off);
    if (st2 && !at)
      return ts_error_set(TS_EINVAL, "parallel.optimizer_shard 2: the gradient of '%s' is in no bucket and not "
                          "replicated", ts_params_name(p, i));
    for (int q = 0; q < npl && !rc; q++) {
      const ts_graph *g = r->g;
      if (ts_val_dtype(g, gv) != z->low)
        return ts_error_set(TS_EINVAL, "parallel.optimizer_shard_weights: the gradient of '%s' is %s, not %s",
                            ts_params_name(p, i), ts_dtype_name(ts_val_dtype(g, gv)), ts_dtype_name(z->low));
      rc = ts_plan_bind(plans[q], gv, at);
    }
  }
  if (rc) return rc;
  binder16 bt = {z, r->g, r->plan, p}, be = {z, r->ge, r->plan_e, p};
  if (r->plan && (rc = ts_params_each_binding(p, r->g, bind16, &bt))) return rc;
  if (r->plan_e && (rc = ts_params_each_binding(p, r->ge, bind16, &be))) return rc;
  if (sizing || !d->world) return TS_OK;
  if ((rc = ts__zero_init_shard(d, z))) return rc; /* the f32 masters */
  return fill16(d, z);
}

void ts__zero16_widen_rep(struct ts__zero *z) {
  for (int k = 0; k < z->nrep; k++) {
    const uint16_t *src = z->r16 ? z->r16 + z->rep[k].packed : z->g16 + z->rep[k].flat;
    ts_convert(src, z->low, z->wg + z->rep[k].packed, TS_F32, z->rep[k].n);
  }
}

double ts__zero16_part_squares(const struct ts__zero *z) {
  enum { CH = 4096 };
  float buf[CH];
  double s = 0;
  for (int k = 0; k < z->nb; k++) {
    const uint16_t *g = ts__part16(z, k);
    for (size_t a = 0; a < z->pt[k].n; a += CH) {
      size_t m = z->pt[k].n - a < CH ? z->pt[k].n - a : CH;
      ts_convert(g + a, z->low, buf, TS_F32, m);
      s += ts_sum_squares(buf, m);
    }
  }
  return s;
}

void ts__zero16_free(struct ts__zero *z) {
  ts_free(z->w16);
  ts_free(z->g16);
  ts_free(z->p16);
  ts_free(z->r16);
  free(z->mp);
  free(z->mg);
  free(z->mdt);
}
