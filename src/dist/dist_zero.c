/* Optimizer-state sharding under data_parallel (MindSpore's enable_parallel_optimizer, DeepSpeed
 * ZeRO stage 1), parallel.optimizer_shard = 1; see docs/memory.md.
 *
 * Layout. The trainable parameters are split in two by size: those of at least
 * parallel.optimizer_shard_threshold_kb (f32 bytes) are SHARDED, the others REPLICATED. The
 * sharded parameters, in store order, are packed into one range of S elements, padded to N equal
 * chunks of `chunk` elements; rank r owns packed elements [r chunk, (r+1) chunk) (element ranges:
 * a parameter may straddle two ranks, each then holds a segment of it). The replicated parameters
 * are packed into R elements. The rank's optimizer sees a work buffer of R + chunk elements:
 * [replicated parameters][its chunk], with one segment per replicated parameter and one per
 * piece of a sharded parameter in its chunk, so its state is (R + S/N) per slot instead of R + S.
 *
 * A step. ts_dist_step_end packs the sharded gradients into the chunked range and
 * reduce-scatters it (each rank receives its reduced chunk), and all-reduces the packed
 * replicated gradients; ts_dist_clip sums the squares of the rank's chunk over the ranks and adds
 * the replicated ones once; ts_dist_optim_step copies the rank's parameters into the work buffer,
 * steps the optimizer there, copies the replicated parameters back and all-gathers the chunks
 * into every rank's whole parameters. Communication per step: one reduce-scatter + one
 * all-gather of S (the volume of the all-reduce it replaces) plus an all-reduce of R. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist_impl.h"

typedef struct {
  size_t flat;   /* offset in the store's flat buffers */
  size_t n;      /* elements */
  size_t packed; /* offset in the packed sharded range (sharded) or in [0, R) (replicated) */
  int param;     /* index in the store */
} piece;

struct ts__zero {
  int N, rank;
  size_t S, chunk, R;
  int nsh, nrep;
  piece *sh, *rep;
  float *gbuf;   /* N * chunk: packed sharded gradients, then the gathered parameters */
  float *wp, *wg;/* R + chunk: the rank's parameters and reduced gradients, as its optimizer sees them */
};

void ts__zero_free(struct ts__zero *z) {
  if (!z) return;
  free(z->sh);
  free(z->rep);
  free(z->gbuf);
  free(z->wp);
  free(z->wg);
  free(z);
}

int ts__zero_plan(ts_dist *d) {
  if (d->zero) return TS_OK;
  ts_params *p = d->r.params;
  if (!p) return ts_error_set(TS_EINVAL, "parallel.optimizer_shard: the model is not built");
  struct ts__zero *z = calloc(1, sizeof *z);
  int np = ts_params_count(p);
  if (!z || !(z->sh = calloc((size_t)np + 1, sizeof *z->sh)) || !(z->rep = calloc((size_t)np + 1, sizeof *z->rep))) {
    ts__zero_free(z);
    return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard: out of memory");
  }
  z->N = d->r.size;
  z->rank = d->r.rank;
  double thr = d->cfg.shard_threshold_kb * 1024.0;
  for (int i = 0; i < np; i++) {
    if (ts_params_flags(p, i) & TS_PARAM_STATE) continue;
    ts_shape s = ts_params_shape(p, i);
    size_t n = (size_t)ts_shape_numel(&s);
    if (n > 0 && (double)n * sizeof(float) >= thr) {
      z->sh[z->nsh++] = (piece){ts_params_offset(p, i), n, z->S, i};
      z->S += n;
    } else {
      z->rep[z->nrep++] = (piece){ts_params_offset(p, i), n, z->R, i};
      z->R += n;
    }
  }
  z->chunk = (z->S + (size_t)z->N - 1) / (size_t)z->N;
  z->gbuf = calloc((size_t)z->N * z->chunk + 1, sizeof(float));
  z->wp = calloc(z->R + z->chunk + 1, sizeof(float));
  z->wg = calloc(z->R + z->chunk + 1, sizeof(float));
  if (!z->gbuf || !z->wp || !z->wg) {
    ts__zero_free(z);
    return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard: out of memory for %zu + %zu elements", z->S, z->R);
  }
  d->zero = z;
  return TS_OK;
}

/* The part of sharded piece q in this rank's chunk: [*a, *b) in packed coordinates (empty: a >= b). */
static void clip_piece(const struct ts__zero *z, const piece *q, size_t *a, size_t *b) {
  size_t lo = (size_t)z->rank * z->chunk, hi = lo + z->chunk;
  *a = q->packed > lo ? q->packed : lo;
  *b = q->packed + q->n < hi ? q->packed + q->n : hi;
}

int ts_dist_optim_create(ts_dist *d, const ts_optim_config *cfg, const ts_optim_segment *segs, int nseg,
                         ts_optim **out) {
  *out = NULL;
  if (!d->cfg.optimizer_shard) return ts_optim_create(out, cfg, segs, nseg);
  int rc = ts__zero_plan(d);
  if (rc) return rc;
  struct ts__zero *z = d->zero;
  ts_optim_segment *ws = calloc((size_t)nseg + 1, sizeof *ws);
  if (!ws) return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard: out of memory");
  int nw = 0;
  for (int s = 0; s < nseg && !rc; s++) {
    int found = 0;
    for (int k = 0; k < z->nrep && !found; k++)
      if (z->rep[k].flat == segs[s].offset && z->rep[k].n == segs[s].numel) {
        found = 1;
        ws[nw++] = (ts_optim_segment){segs[s].name, z->rep[k].packed, segs[s].numel, segs[s].flags};
      }
    for (int k = 0; k < z->nsh && !found; k++)
      if (z->sh[k].flat == segs[s].offset && z->sh[k].n == segs[s].numel) {
        found = 1;
        size_t a, b;
        clip_piece(z, &z->sh[k], &a, &b);
        if (a < b)
          ws[nw++] = (ts_optim_segment){segs[s].name, z->R + a - (size_t)z->rank * z->chunk, b - a, segs[s].flags};
      }
    if (!found)
      rc = ts_error_set(TS_EINVAL, "parallel.optimizer_shard: optimizer segment '%s' is not one whole parameter",
                        segs[s].name);
  }
  if (!rc) rc = ts_optim_create(out, cfg, ws, nw);
  free(ws);
  return rc;
}

int ts__zero_reduce(ts_dist *d, const float *g) {
  struct ts__zero *z = d->zero;
  ts_reduce_op op = d->reduce_mean ? TS_REDUCE_MEAN : TS_REDUCE_SUM;
  for (int k = 0; k < z->nsh; k++) memcpy(z->gbuf + z->sh[k].packed, g + z->sh[k].flat, z->sh[k].n * sizeof(float));
  memset(z->gbuf + z->S, 0, ((size_t)z->N * z->chunk - z->S) * sizeof(float));
  int rc = TS_OK;
  if (z->chunk) rc = ts_comm_reduce_scatter_block(d->world, z->gbuf, z->wg + z->R, z->chunk, TS_F32, op);
  if (rc) return ts_error_wrap(rc, "parallel.optimizer_shard: reduce-scatter of the sharded gradients");
  for (int k = 0; k < z->nrep; k++) memcpy(z->wg + z->rep[k].packed, g + z->rep[k].flat, z->rep[k].n * sizeof(float));
  if (z->R) rc = ts_comm_allreduce(d->world, z->wg, z->wg, z->R, TS_F32, op);
  return rc ? ts_error_wrap(rc, "parallel.optimizer_shard: all-reduce of the replicated gradients") : TS_OK;
}

int ts__zero_clip(ts_dist *d, float max_norm, float *norm) {
  struct ts__zero *z = d->zero;
  float sq = (float)ts_sum_squares(z->wg + z->R, z->chunk); /* padding is zero */
  int rc = ts_comm_allreduce(d->world, &sq, &sq, 1, TS_F32, TS_REDUCE_SUM);
  if (rc) return ts_error_wrap(rc, "gradient clipping: the global norm over the optimizer shards");
  *norm = sqrtf((float)((double)sq + ts_sum_squares(z->wg, z->R)));
  if (!(max_norm > 0)) return TS_OK;
  float c = ts_clip_coef(*norm, max_norm);
  if (c != 1.0f) ts_scale_f32(z->wg, z->R + z->chunk, c);
  return TS_OK;
}

int ts_dist_optim_step(ts_dist *d, ts_optim *opt, float *params, const float *grads, float lr) {
  struct ts__zero *z = d->zero;
  if (!z) return ts_optim_step(opt, params, grads, lr);
  if (!d->world) return ts_error_set(TS_EINVAL, "parallel.optimizer_shard: stepping needs the job's ranks");
  size_t lo = (size_t)z->rank * z->chunk;
  for (int k = 0; k < z->nrep; k++) memcpy(z->wp + z->rep[k].packed, params + z->rep[k].flat, z->rep[k].n * sizeof(float));
  for (int k = 0; k < z->nsh; k++) {
    size_t a, b;
    clip_piece(z, &z->sh[k], &a, &b);
    if (a < b) memcpy(z->wp + z->R + a - lo, params + z->sh[k].flat + (a - z->sh[k].packed), (b - a) * sizeof(float));
  }
  int rc = ts_optim_step(opt, z->wp, z->wg, lr);
  if (rc) return rc;
  for (int k = 0; k < z->nrep; k++) memcpy(params + z->rep[k].flat, z->wp + z->rep[k].packed, z->rep[k].n * sizeof(float));
  if (z->chunk && (rc = ts_comm_allgather(d->world, z->wp + z->R, z->gbuf, z->chunk, TS_F32)))
    return ts_error_wrap(rc, "parallel.optimizer_shard: all-gather of the updated parameters");
  for (int k = 0; k < z->nsh; k++) memcpy(params + z->sh[k].flat, z->gbuf + z->sh[k].packed, z->sh[k].n * sizeof(float));
  return TS_OK;
}

int ts__zero_move_slot(ts_dist *d, ts_params *full, float *loc, float *whole, int gather) {
  struct ts__zero *z = d->zero;
  size_t lo = (size_t)z->rank * z->chunk;
  if (gather) {
    /* the rank's chunk of the slot (its optimizer's extent may end before the chunk does) */
    memset(z->wp + z->R, 0, z->chunk * sizeof(float));
    for (int k = 0; k < z->nsh; k++) {
      size_t a, b;
      clip_piece(z, &z->sh[k], &a, &b);
      if (a < b) memcpy(z->wp + z->R + a - lo, loc + z->R + a - lo, (b - a) * sizeof(float));
    }
    int rc = TS_OK;
    if (z->chunk) {
      if (!d->world) return ts_error_set(TS_EINVAL, "checkpoint: gathering optimizer shards needs the job's ranks");
      rc = ts_comm_allgather(d->world, z->wp + z->R, z->gbuf, z->chunk, TS_F32);
    }
    if (rc) return ts_error_wrap(rc, "checkpoint: gathering the optimizer state's shards");
    for (int k = 0; k < z->nsh; k++)
      memcpy(whole + ts_params_offset(full, z->sh[k].param), z->gbuf + z->sh[k].packed, z->sh[k].n * sizeof(float));
    for (int k = 0; k < z->nrep; k++)
      memcpy(whole + ts_params_offset(full, z->rep[k].param), loc + z->rep[k].packed, z->rep[k].n * sizeof(float));
    return TS_OK;
  }
  for (int k = 0; k < z->nsh; k++) {
    size_t a, b;
    clip_piece(z, &z->sh[k], &a, &b);
    if (a < b)
      memcpy(loc + z->R + a - lo, whole + ts_params_offset(full, z->sh[k].param) + (a - z->sh[k].packed),
             (b - a) * sizeof(float));
  }
  for (int k = 0; k < z->nrep; k++)
    memcpy(loc + z->rep[k].packed, whole + ts_params_offset(full, z->rep[k].param), z->rep[k].n * sizeof(float));
  return TS_OK;
}

int ts_dist_optim_sharded(const ts_dist *d, size_t *replicated, size_t *sharded) {
  const struct ts__zero *z = d->zero;
  if (replicated) *replicated = z ? z->R : 0;
  if (sharded) *sharded = z ? z->S : 0;
  return z != NULL;
}
