/* Gradient synchronisation by bucketed all-reduce (sync.h, ts__sync_allreduce): the gradients of
 * every parameter several ranks hold are all-reduced over them (grad_reducer.c over buckets.c:
 * buckets in reverse layer order, overlapped with backward through a plan hook when the step has
 * one micro-step); the optimizer works on the rank's whole store; checkpoints move its slots like
 * the parameters. No state of its own beyond the reducer (made by start, real jobs only). */
#include <stdlib.h>
#include <string.h>

#include "dist_impl.h"

static ts_grad_reducer *red_of(const ts_dist *d) { return d->sync.priv; }

static int ar_plan(ts_dist *d) {
  (void)d;
  return TS_OK;
}

static void ar_store(const ts_dist *d, int *no_grads, int *no_params) {
  (void)d;
  *no_grads = 0;
  *no_params = 0;
}

/* The reducer over base (the job's world, or a pipeline stage's ranks; NULL: nothing to reduce),
 * attached to the training plan when the layout allows overlap and the step has one micro-step. */
static int ar_start(ts_dist *d, ts_comm *base, int may_overlap) {
  const ts_dist_config *c = &d->cfg;
  if (!base || d->sync.priv) return TS_OK;
  ts_grad_reducer *red = NULL;
  ts_grad_reducer_config rcfg = {.bucket_mb = c->bucket_mb, .mean = d->sync.mean, .wire = c->wire,
                                 .fusion_splits = c->fusion_splits, .nfusion_splits = c->nfusion_splits,
                                 .allreduce = c->allreduce, .cluster = c->cluster, .price = c->allreduce_price};
  int rc = ts_grad_reducer_create(base, d->r.params, d->r.g, &rcfg, &red);
  if (rc) return rc;
  d->sync.priv = red;
  /* accumulation reduces once, after the last micro-step */
  d->sync.overlap = may_overlap && c->overlap && c->accum == 1;
  return d->sync.overlap ? ts_grad_reducer_attach(red, d->r.plan) : TS_OK;
}

static void ar_begin(ts_dist *d, float *grads) {
  if (red_of(d) && d->sync.overlap) ts_grad_reducer_begin(red_of(d), grads);
}

size_t ts__sync_accum_numel_whole(const ts_dist *d) {
  return d->cfg.accum < 2 ? 0 : ts_params_numel(d->r.params);
}

int ts__sync_accumulate_whole(ts_dist *d, const float *grads, float *acc, int64_t k) {
  size_t n = ts_params_numel(d->r.params);
  if (k == 0) {
    memcpy(acc, grads, n * sizeof(float));
    return TS_OK;
  }
#pragma omp parallel for if (n > 65536)
  for (size_t i = 0; i < n; i++) acc[i] += grads[i];
  return TS_OK;
}

static int ar_reduce(ts_dist *d, float *g, double *wait_ms) {
  ts_grad_reducer *red = red_of(d);
  *wait_ms = 0;
  if (!red) return TS_OK;
  if (!d->sync.overlap) ts_grad_reducer_begin(red, g);
  int rc = ts_grad_reducer_finish(red); /* its errors name the reduction and the group */
  *wait_ms = 1e3 * ts_grad_reducer_wait_seconds(red);
  return rc;
}

static int ar_clip(ts_dist *d, float *g, ts__clip *c, int *mine) {
  (void)d, (void)g, (void)c;
  *mine = 0; /* the reduced gradients are g: the layout's clipping */
  return TS_OK;
}

int ts__sync_optim_create_whole(ts_dist *d, const ts_optim_config *cfg, const ts_optim_segment *segs, int nseg,
                                ts_optim **out) {
  int rc = ts_optim_create(out, cfg, segs, nseg);
  if (!rc && d->world && (rc = ts__lamb_install_sliced(d, *out, segs, nseg))) {
    ts_optim_free(*out);
    *out = NULL;
  }
  return rc;
}

static int ar_optim_step(ts_dist *d, ts_optim *opt, float *params, const float *grads, float lr) {
  (void)d;
  return ts_optim_step(opt, params, grads, lr);
}

static float *ar_held(ts_dist *d) {
  (void)d;
  return NULL;
}

static int ar_move(ts_dist *d, ts_params *full, float *loc, float *whole, int gather) {
  if (!full) { /* a slot over the rank's own store: the optimizer's is one */
    size_t n = ts_params_numel(d->r.params);
    if (gather) memcpy(whole, loc, n * sizeof(float));
    else memcpy(loc, whole, n * sizeof(float));
    return TS_OK;
  }
  return ts__dist_move_flat(d, full, loc, whole, 0, gather);
}

static float *ar_reduced_at(ts_dist *d, float *g, size_t flat, size_t numel, size_t *lo, size_t *n) {
  (void)d, (void)g, (void)flat, (void)numel, (void)lo, (void)n;
  return NULL; /* in the gradient buffer */
}

static int ar_each_range(const ts_dist *d, int (*fn)(void *user, size_t flat, size_t n, size_t work), void *user) {
  (void)d, (void)fn, (void)user;
  return TS_OK;
}

static int ar_memory(ts_dist *d, ts_dist_memory_info *m, int64_t *opt_elems) {
  (void)opt_elems; /* the optimizer covers the store */
  /* accumulation over micro-steps: a whole-model buffer */
  if (d->cfg.accum > 1) m->accum_bytes = (int64_t)ts_params_numel(d->r.params) * (int64_t)sizeof(float);
  /* the send slots, where buckets are all-reduced from a separate send buffer (a real job's
   * choice: it depends on the hosts the ranks run on) */
  m->grad_bytes += (int64_t)ts_grad_reducer_send_bytes(red_of(d));
  return TS_OK;
}

static int ar_num_buckets(const ts_dist *d) { return red_of(d) ? ts_grad_reducer_num_buckets(red_of(d)) : 0; }
static int ar_set_prof(ts_dist *d, ts_prof *p) { return ts_grad_reducer_set_prof(red_of(d), p); }

static int ar_sharded(const ts_dist *d, size_t *replicated, size_t *sharded) {
  (void)d;
  if (replicated) *replicated = 0;
  if (sharded) *sharded = 0;
  return 0;
}

/* Each parameter over the ranks holding its slice (ring all-reduce). */
static int ar_comm_bytes(const ts_dist *d, double *bytes) {
  const ts_dist_run *r = &d->r;
  double red = 0;
  *bytes = 0;
  for (int i = 0; i < ts_params_count(r->params); i++) {
    if (ts_params_flags(r->params, i) & TS_PARAM_STATE) continue;
    int h = ts_params_holders(r->params, i, r->size, r->rank);
    if (h == TS_ENOMEM) return ts_error_wrap(h, "plan");
    ts_shape s = ts_params_shape(r->params, i);
    if (h > 1) red += 2.0 * (h - 1) / h * (double)ts_shape_numel(&s) * 4;
  }
  *bytes = red;
  return TS_OK;
}

static void ar_describe(const ts_dist *d, FILE *out) { (void)d, (void)out; }

static const char *ar_params_note(const ts_dist *d) {
  (void)d;
  return NULL;
}

static const char *ar_note(const ts_dist *d) { return red_of(d) ? ts_grad_reducer_note(red_of(d)) : ""; }

static void ar_free(ts_dist *d) {
  ts_grad_reducer_free(red_of(d));
  d->sync.priv = NULL;
}

const ts__sync_vt ts__sync_allreduce = {.name = "allreduce", .plan = ar_plan, .store = ar_store, .start = ar_start,
                                        .begin = ar_begin, .accum_numel = ts__sync_accum_numel_whole,
                                        .accumulate = ts__sync_accumulate_whole, .reduce = ar_reduce,
                                        .clip = ar_clip, .optim_create = ts__sync_optim_create_whole,
                                        .optim_step = ar_optim_step, .held_params = ar_held, .move = ar_move,
                                        .reduced_at = ar_reduced_at, .each_range = ar_each_range,
                                        .memory = ar_memory, .num_buckets = ar_num_buckets,
                                        .set_prof = ar_set_prof, .sharded = ar_sharded,
                                        .comm_bytes = ar_comm_bytes, .describe = ar_describe,
                                        .params_note = ar_params_note, .note = ar_note, .free = ar_free};
