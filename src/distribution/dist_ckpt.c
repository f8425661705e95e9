/* The training state a rank holds, as pieces of the whole model's tensors (src/distribution/dist.h,
 * region.h): what a sliced checkpoint writes and what a rank loads, in any layout. A parameter or
 * state of the rank's store is its slice's box (layout.h: the cut of a semi_auto, hybrid or
 * pipeline-stage slice) or the whole tensor; under a sharded optimizer (ZeRO, sync.h) the optimizer's work
 * buffer (dist_zero.c) holds whole replicated parameters and the rank's part of every gradient
 * bucket, a range of the store's flat buffer that is cut at parameter boundaries into ranges of
 * each parameter's slice; under stage 3 the parameters themselves live there. */
#include <stdlib.h>
#include <string.h>

#include "dist_impl.h"

/* The whole model's own shape of rank-store entry i (the whole checkpoint's). */
static ts_shape own_shape(const ts_dist *d, ts_params *lp, int i) {
  ts_params *wp = ts__dist_whole_params(d);
  if (wp) {
    int g = ts_params_find(wp, ts_params_name(lp, i));
    if (g >= 0) return ts_params_shape(wp, g);
  }
  return ts_params_is_sharded(lp, i) ? ts_params_init_shape(lp, i) : ts_params_shape(lp, i);
}

/* Where rank-store entry i's elements sit in its tensor. */
static int entry_region(ts_params *lp, int i, ts_region *r) {
  ts_shape ls = ts_params_shape(lp, i);
  if (!ts_params_is_sharded(lp, i)) return ts_region_whole(r, &ls);
  ts_shape gs = ts_params_global_shape(lp, i);
  int64_t off[TS_MAX_DIMS];
  int rc = ts_layout_offsets(ts_params_layout(lp, i), &gs, ts_params_shard_rank(lp, i), off);
  if (!rc) rc = ts_region_box(r, &gs, off, ls.dims);
  return rc ? ts_error_wrap(rc, "checkpoint: the slice of '%s'", ts_params_name(lp, i)) : TS_OK;
}

static int add(ts_piece_list *out, const char *pre, const char *slot, const char *name, const ts_shape *shape,
               const ts_region *r, float *data) {
  char full[1024];
  int n = slot ? snprintf(full, sizeof full, "%s%s.%s", pre, slot, name) : snprintf(full, sizeof full, "%s%s", pre, name);
  if (n < 0 || (size_t)n >= sizeof full) return ts_error_set(TS_ERANGE, "checkpoint: the name of '%s' is too long", name);
  return ts_piece_list_add(out, full, TS_F32, shape, r, data);
}

typedef struct {
  ts_dist *d;
  ts_params *lp;
  int *ids;        /* trainable entries by offset */
  int nids;
  const char *pre, *slot;
  float *base;     /* the work buffer's data (NULL: dry) */
  ts_piece_list *out;
} range_ctx;

/* Store elements [flat, flat + n), at `work` in the work buffer, as one piece per parameter. */
static int add_range(void *user, size_t flat, size_t n, size_t work) {
  range_ctx *c = user;
  int rc = TS_OK;
  size_t end = flat + n;
  /* the first trainable entry ending after flat */
  int lo = 0, hi = c->nids;
  while (lo < hi) {
    int mid = (lo + hi) / 2, id = c->ids[mid];
    ts_shape s = ts_params_shape(c->lp, id);
    if (ts_params_offset(c->lp, id) + (size_t)ts_shape_numel(&s) <= flat) lo = mid + 1;
    else hi = mid;
  }
  for (int k = lo; k < c->nids && !rc; k++) {
    int id = c->ids[k];
    ts_shape s = ts_params_shape(c->lp, id);
    size_t o = ts_params_offset(c->lp, id), e = o + (size_t)ts_shape_numel(&s);
    if (o >= end) break;
    size_t a = o > flat ? o : flat, b = e < end ? e : end;
    if (a >= b) continue;
    ts_region r;
    if ((rc = entry_region(c->lp, id, &r)) || (rc = ts_region_restrict(&r, (int64_t)(a - o), (int64_t)(b - o)))) break;
    ts_shape own = own_shape(c->d, c->lp, id), flat1 = ts_shape1(ts_shape_numel(&own));
    rc = add(c->out, c->pre, c->slot, ts_params_name(c->lp, id), c->slot ? &flat1 : &own, &r,
             c->base ? c->base + work + (a - flat) : NULL);
  }
  return rc;
}

int ts_dist_pieces(ts_dist *d, int nslots, const char *const *slot_names, float *const *slot_data, ts_piece_list *out) {
  ts_params *lp = d->r.params;
  if (!lp) return ts_error_set(TS_EINVAL, "checkpoint: the model is not built");
  int rc = d->sync.vt->plan(d); /* the sync object's slot layout (idempotent) */
  if (rc) return rc;
  int np = ts_params_count(lp), *ids = malloc(sizeof(int) * ((size_t)np + 1)), nids = 0;
  if (!ids) return ts_error_set(TS_ENOMEM, "checkpoint: out of memory");
  for (int i = 0; i < np; i++)
    if (!(ts_params_flags(lp, i) & TS_PARAM_STATE)) ids[nids++] = i; /* offsets grow with the ids */
  float *held = d->sync.vt->held_params(d); /* ZeRO-3: the parameters are the work buffer's */
  for (int i = 0; i < np && !rc; i++) {
    int state = ts_params_flags(lp, i) & TS_PARAM_STATE;
    if (!state && held) continue;
    ts_region r;
    ts_shape own = own_shape(d, lp, i);
    if (!(rc = entry_region(lp, i, &r))) rc = add(out, state ? "state." : "param.", NULL, ts_params_name(lp, i), &own, &r,
                                                  ts_params_ptr(lp, i));
  }
  range_ctx c = {d, lp, ids, nids, "param.", NULL, NULL, out};
  if (!rc && held) {
    c.base = ts_params_is_dry(lp) ? NULL : held;
    rc = d->sync.vt->each_range(d, add_range, &c);
  }
  for (int k = 0; k < nslots && !rc; k++) {
    c.pre = "optim.";
    c.slot = slot_names[k];
    c.base = slot_data ? slot_data[k] : NULL;
    if (d->sync.vt->sharded(d, NULL, NULL)) { /* the slots are laid out as the sync object's */
      rc = d->sync.vt->each_range(d, add_range, &c);
      continue;
    }
    for (int q = 0; q < nids && !rc; q++) {
      int id = ids[q];
      ts_region r;
      ts_shape own = own_shape(d, lp, id), flat1 = ts_shape1(ts_shape_numel(&own));
      if (!(rc = entry_region(lp, id, &r)))
        rc = add(out, "optim.", c.slot, ts_params_name(lp, id), &flat1, &r, c.base ? c.base + ts_params_offset(lp, id) : NULL);
    }
  }
  free(ids);
  return rc;
}

int ts_dist_tensors(ts_dist *d, int with_optimizer, int nslots, const char *const *slot_names, ts_piece_list *out) {
  ts_params *src = ts__dist_whole_params(d) ? ts__dist_whole_params(d) : d->r.params;
  if (!src) return ts_error_set(TS_EINVAL, "checkpoint: the model is not built");
  int np = ts_params_count(src), rc = TS_OK;
  for (int i = 0; i < np && !rc; i++) {
    ts_shape s = ts__dist_whole_params(d) ? ts_params_shape(src, i) : ts_params_init_shape(src, i);
    ts_region r;
    ts_region_whole(&r, &s);
    rc = add(out, ts_params_flags(src, i) & TS_PARAM_STATE ? "state." : "param.", NULL, ts_params_name(src, i), &s, &r,
             NULL);
  }
  if (!with_optimizer) return rc;
  ts_shape s0 = ts_shape_make(0, NULL);
  ts_region r0;
  ts_region_whole(&r0, &s0);
  if (!rc) rc = ts_piece_list_add(out, "optim.step", TS_I64, &s0, &r0, NULL);
  for (int k = 0; k < nslots && !rc; k++)
    for (int i = 0; i < np && !rc; i++) {
      if (ts_params_flags(src, i) & TS_PARAM_STATE) continue;
      ts_shape s = ts__dist_whole_params(d) ? ts_params_shape(src, i) : ts_params_init_shape(src, i), f = ts_shape1(ts_shape_numel(&s));
      ts_region r;
      ts_region_whole(&r, &f);
      rc = add(out, "optim.", slot_names[k], ts_params_name(src, i), &f, &r, NULL);
    }
  return rc;
}

void ts__dist_manifest_layout(const ts_dist_config *c, const char *mode, int world, int sliced, int strategy_file,
                              char *buf, size_t cap) {
  char stages[64], shard[128];
  ts__pipe_manifest_key(c, stages, sizeof stages); /* the pipeline layout's key */
  ts__sync_manifest_keys(c, shard, sizeof shard);  /* the sync object's keys */
  snprintf(buf, cap, "{\"mode\": \"%s\", \"world_size\": %d, %s, %s, \"sliced_parameters\": %s%s}", mode, world, stages,
           shard, sliced ? "true" : "false", strategy_file ? ", \"strategy_file\": \"strategy.json\"" : "");
}
