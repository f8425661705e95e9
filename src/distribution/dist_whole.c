/* The whole model from the ranks' slices (src/distribution/dist.h): the store checkpoints hold
 * (interchangeable between layouts and device counts), moving slices into it and back, and
 * global-norm clipping with each slice counted once. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist_impl.h"

int ts_dist_whole_store(ts_dist *d, ts_params **full, int *owned) {
  *full = NULL;
  *owned = 0;
  ts_params *lp = d->r.params;
  if (!d->r.sliced && !d->sync.vt->sharded(d, NULL, NULL)) {
    *full = lp;
    return TS_OK;
  }
  /* names, shapes, initialisers: of the whole model's store under semi_auto_parallel; of the
   * slices' own shapes when a model registers sharded parameters itself */
  ts_params *src = ts__dist_whole_params(d) ? ts__dist_whole_params(d) : lp;
  int rc = ts_params_create(full);
  for (int i = 0; i < ts_params_count(src) && !rc; i++) {
    ts_shape sh = ts__dist_whole_params(d) ? ts_params_shape(src, i) : ts_params_init_shape(src, i);
    int id = ts_params_add(*full, ts_params_name(src, i), sh, ts_params_init_of(src, i), ts_params_flags(src, i));
    if (id < 0) rc = id;
  }
  if (!rc) rc = ts_params_alloc(*full, d->cfg.seed);
  if (rc) {
    ts_params_free(*full);
    *full = NULL;
    return rc;
  }
  *owned = 1;
  return TS_OK;
}

/* One sharded entry i of lp between the rank's slice l and the whole tensor w: gather = 1
 * all-gathers every rank's slice over c (nranks ranks, the layout's devices) into w; 0 cuts the
 * slice of `rank` out of w. */
int ts__dist_move_slices(ts_comm *c, int N, int rank, ts_params *lp, int i, float *l, float *w, int gather) {
  ts_shape ls = ts_params_shape(lp, i);
  int64_t n = ts_shape_numel(&ls);
  int rc = TS_OK;
  const ts_layout *L = ts_params_layout(lp, i);
  ts_shape gs = ts_params_global_shape(lp, i); /* same memory as the full shape */
  float *all = NULL;
  if (gather) {
    if (!c) return ts_error_set(TS_EINVAL, "checkpoint: gathering slices needs the job's ranks");
    all = malloc(sizeof(float) * (size_t)(n * N));
    if (!all) return ts_error_set(TS_ENOMEM, "checkpoint: out of memory gathering '%s'", ts_params_name(lp, i));
    rc = ts_comm_allgather(c, l, all, (size_t)n, TS_F32);
    if (rc) {
      free(all);
      return ts_error_wrap(rc, "checkpoint: gathering '%s'", ts_params_name(lp, i));
    }
  }
  for (int r = gather ? 0 : rank; r < (gather ? N : rank + 1); r++) {
    int64_t off[TS_MAX_DIMS], idx[TS_MAX_DIMS] = {0};
    ts_layout_offsets(L, &gs, r, off);
    const float *src = gather ? all + r * n : NULL;
    for (int64_t e = 0; e < n; e++) {
      int64_t gi = 0;
      for (int k = 0; k < gs.ndim; k++) gi = gi * gs.dims[k] + off[k] + idx[k];
      if (gather) w[gi] = src[e];
      else l[e] = w[gi];
      for (int k = ls.ndim - 1; k >= 0; k--) {
        if (++idx[k] < ls.dims[k]) break;
        idx[k] = 0;
      }
    }
  }
  free(all);
  return rc;
}

int ts__dist_move_flat(ts_dist *d, ts_params *full, float *loc, float *whole, int states, int gather) {
  ts_params *lp = d->r.params;
  int N = d->r.size, rc = TS_OK;
  for (int i = 0; i < ts_params_count(lp) && !rc; i++) {
    if (!!(ts_params_flags(lp, i) & TS_PARAM_STATE) != states) continue;
    ts_shape ls = ts_params_shape(lp, i);
    int64_t n = ts_shape_numel(&ls);
    float *l = loc + ts_params_offset(lp, i), *w = whole + ts_params_offset(full, i);
    if (!ts_params_is_sharded(lp, i)) {
      if (gather) memcpy(w, l, sizeof(float) * (size_t)n);
      else memcpy(l, w, sizeof(float) * (size_t)n);
      continue;
    }
    rc = ts__dist_move_slices(d->world, N, d->r.rank, lp, i, l, w, gather);
  }
  return rc;
}

int ts_dist_move(ts_dist *d, ts_params *full, ts_optim *opt, ts_optim *fopt, int gather) {
  ts_params *lp = d->r.params;
  if (full == lp) return TS_OK;
  if (d->vt->move) return d->vt->move(d, full, opt, fopt, gather);
  float *held = d->sync.vt->held_params(d); /* ZeRO-3: the rank's part, not the store */
  int rc = held ? d->sync.vt->move(d, full, held, ts_params_data(full), gather)
                : ts__dist_move_flat(d, full, ts_params_data(lp), ts_params_data(full), 0, gather);
  if (rc && held) rc = ts_error_wrap(rc, "checkpoint: %s the parameters' shards", gather ? "gathering" : "cutting");
  if (!rc && ts_params_state_numel(lp))
    rc = ts__dist_move_flat(d, full, ts_params_states(lp), ts_params_states(full), 1, gather);
  for (int k = 0; opt && fopt && !rc && k < ts_optim_num_slots(fopt); k++) {
    float *loc = ts_optim_slot_data(opt, k), *whole = ts_optim_slot_data(fopt, k);
    rc = d->sync.vt->move(d, full, loc, whole, gather); /* the slot's layout is the sync object's */
  }
  if (!rc && opt && fopt) {
    if (gather) ts_optim_set_step(fopt, ts_optim_get_step(opt));
    else ts_optim_set_step(opt, ts_optim_get_step(fopt));
  }
  return rc;
}

int ts__dist_clip_sliced(ts_dist *d, float *g, ts__clip *c) {
  ts_params *p = d->r.params;
  int N = d->r.size, np = ts_params_count(p);
  /* each slice counted once: a parameter n ranks hold weighs 1/n on each */
  int *part = malloc(sizeof(int) * (size_t)N);
  if (!part) return ts_error_set(TS_ENOMEM, "gradient clipping: out of memory");
  double sq = 0;
  for (int i = 0; i < np; i++) {
    if (ts_params_flags(p, i) & TS_PARAM_STATE) continue;
    int nparts = ts_params_rank_partition(p, i, N, part);
    if (nparts < 0) {
      free(part);
      return nparts;
    }
    int holders = 0;
    for (int r = 0; r < N; r++) holders += part[r] == part[d->r.rank];
    ts_shape s = ts_params_shape(p, i);
    sq += ts_sum_squares(g + ts_params_offset(p, i), (size_t)ts_shape_numel(&s)) / holders;
  }
  free(part);
  /* unscaled before narrowing (a large loss scale's squares stay in range); a rank's inf or NaN
   * makes the sum every rank gets inf or NaN */
  float f = (float)(sq * c->inv_scale * c->inv_scale);
  int rc = d->world ? ts_comm_allreduce(d->world, &f, &f, 1, TS_F32, TS_REDUCE_SUM) : TS_OK;
  if (rc) return ts_error_wrap(rc, "gradient clipping: the global norm");
  ts__dist_clip_finish(f, g, ts_params_numel(p), c);
  return TS_OK;
}

int64_t ts_dist_num_params(const ts_dist *d) {
  const ts_params *p = ts__dist_whole_params(d) ? ts__dist_whole_params(d) : d->r.params;
  int64_t n = 0;
  for (int i = 0; p && i < ts_params_count(p); i++)
    if (!(ts_params_flags(p, i) & TS_PARAM_STATE)) {
      ts_shape s = ts__dist_whole_params(d) ? ts_params_shape(p, i) : ts_params_init_shape(p, i);
      n += ts_shape_numel(&s);
    }
  return n;
}

int ts__dist_clip_default(ts_dist *d, float *g, ts__clip *c) {
  if (d->r.sliced) return ts__dist_clip_sliced(d, g, c);
  /* every gradient whole on every rank (reduced already): the norm locally */
  size_t n = ts_params_numel(d->r.params);
  double s = (double)c->inv_scale;
  ts__dist_clip_finish(ts_sum_squares(g, n) * s * s, g, n, c);
  return TS_OK;
}
