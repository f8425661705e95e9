/* A job's training on a GPU (device_target: GPU; docs/gpu.md): the distribution object's store,
 * gradients, optimizer state and plans resident on the device, the steps run there, the host
 * copies kept for what reads them (checkpoints, the store's users) and refreshed on demand.
 * One process, one GPU: the stand_alone layout; data_parallel, semi_auto_parallel and
 * hybrid_parallel over ranks each driving a GPU (or sharing one): the plans' collectives and the
 * gradients' all-reduce over the ranks holding each slice run on the devices through the device
 * collectives (runtime/dcoll.h: NCCL, or MPI staged through pinned memory; one object per group of
 * ranks), the parameters broadcast from rank 0 there, BatchNorm's running statistics averaged there
 * (data_parallel), clipping with sliced parameters counted once, LAMB's norms summed over the
 * ranks between its two passes; optimizer sharding (stages 1 to 3, shard groups) in
 * dist_device_zero.c, the pipeline layout in dist_device_pipe.c.
 *   create: the device opened (ts__dist_dev_open); build: the plans put on it, the store's
 *   buffers mirrored there (parameters, gradients, states; each binding moved to the same offset),
 *   inputs bound to device buffers (ts__dist_dev_bind); a step: the batch copied in, the plan run,
 *   the loss copied out (4 bytes), micro-steps accumulated on the device; clipping and the loss
 *   scale's overflow test from the gradients' sum of squares on the device (8 bytes out); the
 *   optimizer's update per segment on the device (its state there, its step count on the host). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist_device.h"
#include "device/gpu_kernels.h"
#include "optim/optim_mixed.h"
#include "runtime/exec.h"
#include "zero_impl.h"


int ts__dist_dev_check(const char *mode, const ts_dist_config *cfg) {
  if (!strcmp(mode, "stand_alone")) return TS_OK;
  if (!strcmp(mode, "pipeline") || cfg->pipeline_stages > 1) return ts__dist_dev_pipe_check(cfg);
  if (strcmp(mode, "data_parallel") && strcmp(mode, "semi_auto_parallel") && strcmp(mode, "hybrid_parallel"))
    return ts_error_set(TS_ECONFIG, "device_target GPU: parallel.mode %s does not run on GPUs yet (stand_alone, "
                        "data_parallel, semi_auto_parallel and hybrid_parallel do; the others come with issue #29, "
                        "docs/gpu.md)", mode);
  return TS_OK;
}

struct ts__dev *ts__dist_dev_device(const ts_dist *d) { return d->gpu ? d->gpu->dev : NULL; }

int ts__dist_dev_alloc0(ts__dev *v, size_t bytes, void **p) {
  int rc = ts__dev_alloc(v, bytes ? bytes : 64, p);
  return rc ? rc : ts__dev_memset0(v, *p, bytes ? bytes : 64, NULL);
}

/* (dist_device.h) The index in g->grp of the device collectives over c's ranks: the ones made before over the
 * same ranks, else `made` (NULL: made now). Collective over c: its members ask in the same order,
 * and each finds or misses the same group, every communicator of the job partitioning the world
 * (a slot's, a gradient group's). own: c was made for this (kept with a new object, freed when an
 * earlier one serves). On failure nothing is kept (made and an own c freed). */
int ts__dist_dev_group(struct ts__dist_dev *g, ts_comm *c, int own, ts__dcoll *made, int backend, int *idx) {
  int n = ts_comm_size(c), me = ts_comm_world_rank(c);
  int *ranks = malloc(sizeof(int) * (size_t)n);
  int rc = ranks ? ts_comm_allgather(c, &me, ranks, 1, TS_I32) : ts_error_set(TS_ENOMEM, "GPU: out of memory");
  for (int k = 0; !rc && !made && k < g->ngrp; k++)
    if (g->grp[k].n == n && !memcmp(g->grp[k].ranks, ranks, sizeof(int) * (size_t)n)) {
      free(ranks);
      if (own) ts_comm_free(c);
      *idx = k;
      return TS_OK;
    }
  ts__dcoll *x = made;
  if (!rc && !x) rc = ts__dcoll_create(c, g->dev, (ts__dcoll_backend)backend, &x);
  struct ts__dgrp *ng = rc ? NULL : realloc(g->grp, sizeof *ng * (size_t)(g->ngrp + 1));
  if (!rc && !ng) rc = ts_error_set(TS_ENOMEM, "GPU: out of memory (device collectives)");
  if (rc) {
    ts__dcoll_free(x);
    free(ranks);
    if (own) ts_comm_free(c);
    return rc;
  }
  g->grp = ng;
  g->grp[g->ngrp] = (struct ts__dgrp){x, c, own ? c : NULL, ranks, n};
  *idx = g->ngrp++;
  return TS_OK;
}

int ts__dist_dev_open(ts_dist *d) {
  struct ts__dist_dev *g = calloc(1, sizeof *g);
  if (!g) return ts_error_set(TS_ENOMEM, "GPU: out of memory");
  int rc = ts__dev_open(TS_DEVICE_GPU, d->cfg.device_id >= 0 ? d->cfg.device_id : 0, &g->dev), k;
  /* every rank's collectives on the devices (collective over the world: every rank gets here,
   * or fails the same way, the choice agreed inside); the world's group first */
  ts__dcoll *w = NULL;
  if (!rc && d->world) rc = ts__dcoll_create(d->world, g->dev, (ts__dcoll_backend)d->cfg.comm_backend, &w);
  if (!rc && d->world) rc = ts__dist_dev_group(g, d->world, 0, w, d->cfg.comm_backend, &k);
  if (rc) {
    ts__dev_close(g->dev);
    free(g);
    return rc;
  }
  g->coll = w;
  d->gpu = g;
  return TS_OK;
}

int ts__dist_dev_start(ts_dist *d) {
  struct ts__dist_dev *g = G(d);
  ts_params *p = d->r.params;
  if (d->vt == &ts__dist_pipeline) return ts__dist_dev_pipe_start(d); /* over a stage's replicas */
  int rc = ts__dist_broadcast_check(d);
  if (rc) return rc;
  if (d->cfg.parameter_broadcast) { /* rank 0's parameters and states, device to device */
    if (g->hlen[0]) rc = ts__dcoll_broadcast(g->coll, g->dbase[0], ts_params_numel(p), TS_F32, 0, NULL);
    if (!rc && g->hlen[2]) rc = ts__dcoll_broadcast(g->coll, g->dbase[2], ts_params_state_numel(p), TS_F32, 0, NULL);
    if (!rc) rc = ts__dcoll_wait(g->coll, NULL, ts_comm_get_timeout(), "broadcast of the parameters");
    g->host_stale = 1;
  }
  return rc ? ts_error_wrap(rc, "parallel.parameter_broadcast") : TS_OK;
}

/* bucket k's all-reduce on the communication stream, after what the compute stream has queued */
static int issue_bucket(ts_dist *d, int k) {
  struct ts__dist_dev *g = G(d);
  const struct ts__gbucket *b = &g->bk[k];
  float *gd = (float *)g->dbase[1];
  int rc = ts__dev_event_record(g->dev, g->ev_node, NULL);
  if (!rc) rc = ts__dev_stream_wait(g->dev, g->comm_s, g->ev_node);
  if (!rc) rc = ts__dcoll_allreduce(g->bkx, gd + b->off, gd + b->off, b->n, TS_F32,
                                    d->sync.mean ? TS_REDUCE_MEAN : TS_REDUCE_SUM, g->comm_s);
  return rc;
}

/* the training plan's hook: at a run's start no bucket is out; after node i, the buckets it
 * completes (their order is the nodes', the same on every rank) */
static void bucket_hook(const ts_hook_info *e, void *user) {
  ts_dist *d = user;
  struct ts__dist_dev *g = G(d);
  if (e->event == TS_HOOK_RUN_BEGIN) g->next_bk = 0, g->async_rc = TS_OK;
  if (e->event != TS_HOOK_NODE_END || g->async_rc) return;
  while (g->next_bk < g->nbk && g->bk[g->next_bk].ready >= 0 && g->bk[g->next_bk].ready <= e->node)
    if ((g->async_rc = issue_bucket(d, g->next_bk++))) return;
}

/* every communicator slot of plan p: the device collectives over its ranks */
static int plan_dcolls(ts_dist *d, ts_plan *p) {
  int rc = TS_OK, k;
  for (int s = 0; p && s < TS_PLAN_MAX_COMMS && !rc; s++) {
    ts_comm *c = ts_plan_comm(p, s);
    if (!c) continue;
    rc = ts__dist_dev_group(G(d), c, 0, NULL, d->cfg.comm_backend, &k);
    if (!rc) rc = ts_plan_set_dcoll(p, s, G(d)->grp[k].x);
  }
  return rc ? ts_error_wrap(rc, "the device collectives of the plans' communicator slots") : TS_OK;
}

typedef struct {
  const ts_graph *graph;
  const char *h;
  size_t hlen;
  struct ts__gbucket *b; /* each gradient binding: its offset and producer */
  int n, cap;
} grad_ctx;

static int grad_one(ts_val v, void *data, void *user) {
  grad_ctx *c = user;
  if (!data || (const char *)data < c->h || (const char *)data >= c->h + c->hlen || c->n == c->cap) return TS_OK;
  c->b[c->n].off = (size_t)((const char *)data - c->h) / sizeof(float);
  c->b[c->n].ready = ts_graph_producer(c->graph, v);
  c->n++;
  return TS_OK;
}

static int by_ready(const void *a, const void *b) { /* -1 (none) last; then by offset */
  const struct ts__gbucket *x = a, *y = b;
  int rx = x->ready < 0 ? 1 << 30 : x->ready, ry = y->ready < 0 ? 1 << 30 : y->ready;
  if (rx != ry) return rx < ry ? -1 : 1;
  return x->off < y->off ? -1 : x->off > y->off;
}

/* The gradients' reduction, as the CPU's reducer groups them (grad_reducer.c): the trainable
 * parameters grouped by the partition of the ranks into those holding the same slice
 * (ts_params_rank_partition; none where every rank holds its own), each group's device
 * collectives over this rank's part (the world's where all hold it), each parameter's range
 * reduced over them, neighbours of one group merged. With one group through NCCL, one
 * micro-batch and parallel.overlap: ranges of about
 * bucket_size_mb, each ready after the last node writing into it, issued by the training plan's
 * hook on the communication stream. The ranks are base's (N of them, this one R): the world's, or
 * a pipeline stage's (ts__dist_dev_reduce_plan, no overlap there). */
static int reduce_plan_over(ts_dist *d, ts_comm *base, int N, int R, int may_overlap) {
  struct ts__dist_dev *g = G(d);
  const ts_dist_run *r = &d->r;
  ts_params *p = r->params;
  int np = ts_params_count(p), rc = TS_OK, nparts = 0;
  if (!base || N < 2 || !g->hlen[1]) return TS_OK;
  int *part = malloc(sizeof(int) * (size_t)N), *parts = malloc(sizeof(int) * (size_t)N * (size_t)(np + 1));
  int *pg = malloc(sizeof(int) * (size_t)(np + 1)), *gi = malloc(sizeof(int) * (size_t)(np + 1));
  grad_ctx c = {r->g, g->hbase[1], g->hlen[1], calloc((size_t)(2 * np + 2), sizeof *c.b), 0, 2 * np + 2};
  g->bk = calloc((size_t)np + 1, sizeof *g->bk);
  if (!part || !parts || !pg || !gi || !c.b || !g->bk) rc = ts_error_set(TS_ENOMEM, "GPU: out of memory (gradient reduction)");
  for (int i = 0; i < np && !rc; i++) {
    pg[i] = -1;
    if (ts_params_flags(p, i) & TS_PARAM_STATE) continue;
    int n = ts_params_rank_partition(p, i, N, part), k;
    if (n < 0) rc = n;
    if (n < 0 || n == N) continue; /* every rank holds its own slice: nothing to reduce */
    for (k = 0; k < nparts; k++)
      if (!memcmp(parts + (size_t)k * N, part, sizeof(int) * (size_t)N)) break;
    if (k == nparts) memcpy(parts + (size_t)nparts++ * N, part, sizeof(int) * (size_t)N);
    pg[i] = k;
  }
  /* the groups in the same order on every rank (each split collective over base) */
  for (int k = 0; k < nparts && !rc; k++) {
    int whole = 1;
    for (int q = 0; q < N; q++) whole &= parts[(size_t)k * N + q] == parts[(size_t)k * N];
    ts_comm *sub = NULL;
    if (whole) rc = ts__dist_dev_group(g, base, 0, NULL, d->cfg.comm_backend, &gi[k]); /* base's (the world's: 0) */
    else if (!(rc = ts_comm_split(base, parts[(size_t)k * N + R], R, &sub)))
      rc = ts__dist_dev_group(g, sub, 1, NULL, d->cfg.comm_backend, &gi[k]);
  }
  if (!rc && r->plan) rc = ts_params_each_binding(p, r->g, grad_one, &c);
  int ov = !rc && may_overlap && r->plan && nparts == 1 && d->cfg.accum == 1 && d->cfg.overlap &&
           ts__dcoll_backend_of(g->grp[gi[0]].x) == TS__DCOLL_NCCL;
  double mb = d->cfg.bucket_mb > 0 ? d->cfg.bucket_mb : TS_BUCKET_MB_DEFAULT;
  size_t cap = ov ? (size_t)(mb * 1048576.0 / sizeof(float)) : (size_t)-1;
  int next = 1; /* the last range ends at the previous parameter (only states, or empty ones, between) */
  for (int i = 0; i < np && !rc; i++) {
    ts_shape sh = ts_params_shape(p, i);
    if (ts_params_flags(p, i) & TS_PARAM_STATE || !ts_shape_numel(&sh)) continue;
    if (pg[i] < 0) {
      next = 0;
      continue;
    }
    struct ts__gbucket b = {ts_params_offset(p, i), (size_t)ts_shape_numel(&sh), -1, gi[pg[i]]};
    for (int j = 0; j < c.n; j++)
      if (c.b[j].off == b.off) b.ready = c.b[j].ready;
    struct ts__gbucket *last = g->nbk ? &g->bk[g->nbk - 1] : NULL;
    size_t end = b.off + b.n; /* merged across the store's alignment gaps (zeros, no one's) */
    if (last && next && last->grp == b.grp && b.off >= last->off + last->n && end - last->off <= cap &&
        (!ov || (last->ready >= 0 && b.ready >= 0)))
      last->n = end - last->off, last->ready = b.ready > last->ready ? b.ready : last->ready;
    else g->bk[g->nbk++] = b;
    next = 1;
  }
  free(part), free(parts), free(pg), free(gi), free(c.b);
  if (rc || !ov) return rc;
  qsort(g->bk, (size_t)g->nbk, sizeof *g->bk, by_ready);
  /* their own communicator: the plan's collectives (SyncBatchNorm's, a layout's) may use the
   * group's on the compute stream meanwhile, and NCCL's on one communicator from two streams
   * could interleave differently on two ranks */
  rc = ts_comm_dup(g->grp[g->bk[0].grp].c, &g->bkc);
  if (!rc) rc = ts__dcoll_create(g->bkc, g->dev, TS__DCOLL_NCCL, &g->bkx);
  if (!rc) rc = ts__dev_stream_create(g->dev, &g->comm_s);
  if (!rc) rc = ts__dev_event_create(g->dev, &g->ev_node);
  if (!rc) rc = ts__dev_event_create(g->dev, &g->ev_comm);
  if (!rc) rc = ts_plan_add_hook(r->plan, bucket_hook, d);
  g->overlap = !rc;
  return rc;
}

int ts__dist_dev_reduce_plan(ts_dist *d, ts_comm *base, int N, int R) { return reduce_plan_over(d, base, N, R, 0); }

/* Clipping with sliced parameters (as ts__dist_clip_sliced): the ranges of the flat gradients
 * whose slices the same number of ranks hold, neighbours merged; a device float for each sum. */
static int clip_plan(ts_dist *d) {
  struct ts__dist_dev *g = G(d);
  ts_params *p = d->r.params;
  int N = d->r.size, np = ts_params_count(p), rc = TS_OK;
  if (!d->r.sliced || !g->hlen[1]) return TS_OK;
  int *part = malloc(sizeof(int) * (size_t)N);
  g->cr = calloc((size_t)np + 1, sizeof *g->cr);
  if (!part || !g->cr) rc = ts_error_set(TS_ENOMEM, "GPU: out of memory (gradient clipping)");
  for (int i = 0; i < np && !rc; i++) {
    ts_shape sh = ts_params_shape(p, i);
    if (ts_params_flags(p, i) & TS_PARAM_STATE || !ts_shape_numel(&sh)) continue;
    int n = ts_params_rank_partition(p, i, N, part), holders = 0;
    if (n < 0) {
      rc = n;
      break;
    }
    for (int q = 0; q < N; q++) holders += part[q] == part[d->r.rank];
    size_t off = ts_params_offset(p, i), end = off + (size_t)ts_shape_numel(&sh);
    struct ts__crange *last = g->ncr ? &g->cr[g->ncr - 1] : NULL;
    float w = 1.0f / (float)holders;
    if (last && last->w == w && off >= last->off + last->n) last->n = end - last->off;
    else g->cr[g->ncr++] = (struct ts__crange){off, end - off, w};
  }
  free(part);
  if (!rc) rc = ts__dist_dev_alloc0(g->dev, sizeof(float) * (size_t)(g->ncr + 1), (void **)&g->cres);
  if (!rc) rc = ts__dev_host_alloc(g->dev, sizeof(float) * (size_t)(g->ncr + 1), (void **)&g->cres_h);
  return rc;
}

int ts__dist_dev_reduce(ts_dist *d, float *gd, double *wait_ms) {
  struct ts__dist_dev *g = G(d);
  double t0 = ts_time_now();
  const int pipe = d->vt == &ts__dist_pipeline;
  int rc = pipe ? ts__dist_dev_pipe_flush(d) : TS_OK; /* a pipeline's sends complete first */
  if (rc) return rc;
  if (g->zgrp) { /* optimizer_shard: reduce-scattered, the replicated ones all-reduced */
    rc = ts__dist_dev_zero_reduce(d, gd);
  } else {
    if (g->overlap && gd == (float *)g->dbase[1]) { /* the buckets backward left, then the compute stream after them */
      rc = g->async_rc;
      while (!rc && g->next_bk < g->nbk) rc = issue_bucket(d, g->next_bk++);
      if (!rc) rc = ts__dev_event_record(g->dev, g->ev_comm, g->comm_s);
      if (!rc) rc = ts__dev_stream_wait(g->dev, NULL, g->ev_comm);
    } else {
      for (int k = 0; k < g->nbk && !rc; k++)
        rc = ts__dcoll_allreduce(g->grp[g->bk[k].grp].x, gd + g->bk[k].off, gd + g->bk[k].off, g->bk[k].n, TS_F32,
                                 d->sync.mean ? TS_REDUCE_MEAN : TS_REDUCE_SUM, NULL);
    }
    /* done within parallel.comm_timeout, as the CPU's blocking collectives (NCCL's is queued on
     * the stream: polled, aborted past it): the buckets' own communicator, or each group's once */
    if (g->overlap && !rc) rc = ts__dcoll_wait(g->bkx, NULL, ts_comm_get_timeout(), "all-reduce of the gradients");
    for (int k = 0; k < g->nbk && !g->overlap && !rc; k++) {
      int seen = 0;
      for (int j = 0; j < k; j++) seen |= g->bk[j].grp == g->bk[k].grp;
      if (!seen) rc = ts__dcoll_wait(g->grp[g->bk[k].grp].x, NULL, ts_comm_get_timeout(), "all-reduce of the gradients");
    }
    if (rc) rc = ts_error_wrap(rc, "the gradients over the %d ranks", pipe ? ts__dist_dev_pipe_stage_ranks(d) : d->r.size);
  }
  if (!rc && pipe) rc = ts__dist_dev_pipe_tied(d, gd); /* then summed over the pipeline where several stages hold them */
  *wait_ms = 1e3 * (ts_time_now() - t0);
  return rc;
}

int ts__dist_dev_sync_states(ts_dist *d) {
  struct ts__dist_dev *g = G(d);
  ts_params *p = d->r.params;
  if (d->vt == &ts__dist_pipeline) return ts__dist_dev_pipe_sync_states(d);
  if (d->r.size < 2 || d->cfg.sync_batchnorm || !g->hlen[2]) return TS_OK;
  int rc = ts__dcoll_allreduce(g->coll, g->dbase[2], g->dbase[2], ts_params_state_numel(p), TS_F32, TS_REDUCE_MEAN,
                               NULL);
  if (!rc) rc = ts__dcoll_wait(g->coll, NULL, ts_comm_get_timeout(), "all-reduce of the running statistics");
  g->host_stale = 1;
  return rc ? ts_error_wrap(rc, "averaging BatchNorm running statistics over the ranks") : TS_OK;
}

void ts__dist_dev_free(ts_dist *d) {
  struct ts__dist_dev *g = G(d);
  if (!g) return;
  ts__dev *v = g->dev;
  ts__dev_sync(v);
  for (int k = 0; k < 3; k++) ts__dev_free(v, g->dbase[k]);
  ts__dev_free(v, g->acc), ts__dev_free(v, g->x), ts__dev_free(v, g->y), ts__dev_free(v, g->xe);
  ts__dev_free(v, g->scratch), ts__dev_free(v, g->slots[0]), ts__dev_free(v, g->slots[1]);
  ts__dev_free(v, g->lamb_u), ts__dev_free(v, g->lamb_part), ts__dev_free(v, g->lamb_sq);
  ts__dev_free(v, g->cres), ts__dev_free(v, g->mch);
  ts__dev_free(v, g->elab), ts__dev_free(v, g->est);
  ts__dev_host_free(v, g->logits), ts__dev_host_free(v, g->est_h);
  ts__dev_host_free(v, g->cres_h);
  free(g->segs);
  free(g->lamb_h);
  free(g->bk);
  free(g->cr);
  ts__dev_event_destroy(v, g->ev_node), ts__dev_event_destroy(v, g->ev_comm);
  if (g->comm_s) ts__dev_stream_destroy(v, g->comm_s);
  d->gpu = NULL;
  /* the plans hold device memory: they go first (ts_dist_free frees them after this: moved here) */
  if (d->vt == &ts__dist_pipeline) ts__dist_dev_pipe_free_plans(d); /* its pieces' (but the first, below) */
  ts__dev_free(v, g->tied);
  ts_plan_free(d->r.plan);
  ts_plan_free(d->r.plan_e);
  d->r.plan = d->r.plan_e = NULL;
  ts__dcoll_free(g->bkx);
  ts_comm_free(g->bkc);
  ts__dist_dev_zero_free(g);
  for (int k = 0; k < g->ngrp; k++) { /* the device collectives, then the communicators made for them */
    ts__dcoll_free(g->grp[k].x);
    ts_comm_free(g->grp[k].own);
    free(g->grp[k].ranks);
  }
  free(g->grp);
  ts__dev_close(v);
  free(g);
}

/* each binding of the store moved to the same offset of its device copy */
typedef struct {
  struct ts__dist_dev *g;
  ts_plan *plan;
} bind_ctx;

static int bind_one(ts_val v, void *data, void *user) {
  bind_ctx *b = user;
  /* no store address (optimizer_shard 2's gradients): where the sync object bound it */
  const char *h = data ? data : ts_plan_data(b->plan, v);
  for (int k = 0; h && k < 3; k++)
    if (h >= b->g->hbase[k] && h < b->g->hbase[k] + b->g->hlen[k])
      return ts_plan_bind(b->plan, v, b->g->dbase[k] + (h - b->g->hbase[k]));
  for (int k = 0; h && k < b->g->nmir; k++) /* the sync object's buffers (ZeRO-2's staging slots) */
    if (h >= b->g->mir[k].h && h < b->g->mir[k].h + b->g->mir[k].n)
      return ts_plan_bind(b->plan, v, b->g->mir[k].d + (h - b->g->mir[k].h));
  return ts_error_set(TS_EINVAL, "GPU: a value of the plan is bound outside the parameter store");
}

int ts__dist_dev_put_plan(ts_dist *d, ts_plan *p, const ts_graph *g) {
  bind_ctx b = {G(d), p};
  int rc = ts_plan_set_device(p, G(d)->dev);
  if (!rc) rc = ts_params_each_binding(d->r.params, g, bind_one, &b);
  return rc;
}

int ts__dist_dev_bind(ts_dist *d) {
  struct ts__dist_dev *g = G(d);
  ts_dist_run *r = &d->r;
  ts__dev *v = g->dev;
  g->hbase[0] = (const char *)ts_params_data(r->params); /* none under optimizer_shard 3: the shards */
  g->hlen[0] = g->hbase[0] ? sizeof(float) * ts_params_numel(r->params) : 0;
  g->hbase[1] = (const char *)ts_params_grads(r->params); /* none under optimizer_shard 2: the staging slots */
  g->hlen[1] = g->hbase[1] ? sizeof(float) * ts_params_numel(r->params) : 0;
  g->hbase[2] = (const char *)ts_params_states(r->params), g->hlen[2] = sizeof(float) * ts_params_state_numel(r->params);
  int rc = TS_OK;
  for (int k = 0; k < 3 && !rc; k++) {
    if (!g->hlen[k]) continue;
    rc = ts__dist_dev_alloc0(v, g->hlen[k], (void **)&g->dbase[k]);
    if (!rc && k != 1) rc = ts__dev_copy(v, g->dbase[k], g->hbase[k], g->hlen[k], TS__H2D, NULL);
  }
  size_t xs, ys;
  ts__dist_row_bytes(d, &xs, &ys);
  g->xs = xs * (size_t)r->micro_batch, g->ys = ys * (size_t)r->micro_batch;
  g->xes = xs * (size_t)(d->cfg.eval_batch / (r->eval_parts > 0 ? r->eval_parts : 1));
  g->nlogits = (size_t)ts_shape_numel(&r->logits_shape);
  g->nscratch = (size_t)ts__gpu_sum_scratch((int64_t)ts_params_numel(r->params)) + 2;
  const int pipe = d->vt == &ts__dist_pipeline;
  size_t mult = pipe ? (size_t)d->cfg.accum : 1; /* a pipeline's step copies every micro-batch in at once */
  if (!rc) rc = ts__dist_dev_alloc0(v, g->xs * mult, &g->x);
  if (!rc) rc = ts__dist_dev_alloc0(v, g->ys * mult, &g->y);
  if (!rc) rc = ts__dist_dev_alloc0(v, g->xes, &g->xe);
  if (!rc) rc = ts__dist_dev_alloc0(v, sizeof(float) * g->nscratch, (void **)&g->scratch);
  if (!rc && d->cfg.accum > 1 && g->hlen[1]) rc = ts__dist_dev_alloc0(v, g->hlen[1], (void **)&g->acc);
  if (!rc) rc = ts__dist_dev_zero_mirror(d); /* optimizer_shard 2: what its plans bind, on the device */
  /* evaluation's metrics: 4 bytes in and 16 out a row (buffers made at the first evaluation, on
   * the rank that holds the logits; the logits copied out where the kernel cannot take their classes) */
  g->eC = r->logits_shape.ndim ? r->logits_shape.dims[r->logits_shape.ndim - 1] : 1;
  if (pipe) { /* its pieces' plans, the stages' collectives */
    if (!rc) rc = ts__dist_dev_pipe_bind(d);
    if (!rc) rc = ts__dev_sync(v);
    if (rc == TS_ECONFIG) return rc;
    return rc ? ts_error_wrap(rc, "device_target GPU: putting the pipeline's pieces on %s", v->info.name) : TS_OK;
  }
  if (!rc && r->plan) rc = ts__dist_dev_put_plan(d, r->plan, r->g);
  if (!rc && r->plan) rc = ts_plan_bind(r->plan, r->x, g->x);
  if (!rc && r->plan) rc = ts_plan_bind(r->plan, r->y, g->y);
  if (!rc && r->plan_e) rc = ts__dist_dev_put_plan(d, r->plan_e, r->ge);
  if (!rc && r->plan_e) rc = ts_plan_bind(r->plan_e, r->xe, g->xe);
  /* planned now: an op without a GPU kernel is refused before the first step, naming the node */
  int l = 0;
  if (!rc && r->plan && (l = ts_plan_node_live(r->plan, 0)) < 0) rc = l;
  if (!rc && r->plan_e && (l = ts_plan_node_live(r->plan_e, 0)) < 0) rc = l;
  if (rc == TS_EUNSUPPORTED) return ts_error_wrap(rc, "device_target GPU");
  /* the plans' collectives and the gradients' reduction on the devices (collective over the
   * world, in the same order on every rank), clipping's ranges */
  if (!rc) rc = plan_dcolls(d, r->plan);
  if (!rc) rc = plan_dcolls(d, r->plan_e);
  if (!rc && ts__zof(d)) rc = ts__dist_dev_zero_bind(d); /* optimizer_shard: the CPU object's layout */
  else if (!rc && d->world) rc = reduce_plan_over(d, d->world, r->size, r->rank, 1);
  if (!rc && !ts__zof(d)) rc = clip_plan(d);
  if (!rc) rc = ts__dev_sync(v);
  return rc ? ts_error_wrap(rc, "device_target GPU: putting the model on %s", v->info.name) : TS_OK;
}

int ts__dist_dev_fwd_bwd(ts_dist *d, const void *x, const void *y, int64_t step, double *loss, float **gout) {
  struct ts__dist_dev *g = G(d);
  if (d->vt == &ts__dist_pipeline) return ts__dist_dev_pipe_fwd_bwd(d, x, y, step, loss, gout);
  const ts_dist_run *r = &d->r;
  int64_t accum = d->cfg.accum;
  size_t n = ts_params_numel(r->params);
  double sum = 0;
  for (int64_t k = 0; k < accum; k++) {
    int rc = ts__dev_copy(g->dev, g->x, (const char *)x + (size_t)k * g->xs, g->xs, TS__H2D, NULL);
    if (!rc) rc = ts__dev_copy(g->dev, g->y, (const char *)y + (size_t)k * g->ys, g->ys, TS__H2D, NULL);
    if (g->zord) ts__dist_dev_zero_before(d, k); /* optimizer_shard 2: the hook reduces during backward */
    if (!rc) rc = ts_plan_run(r->plan, (uint64_t)(step * accum + k)); /* ends synchronised */
    if (!rc && g->zord) rc = ts__dist_dev_zero_after(d, k);
    float l = 0;
    if (!rc) rc = ts__dev_copy(g->dev, &l, ts_plan_data(r->plan, r->loss), sizeof l, TS__D2H, NULL);
    if (!rc) rc = ts__dev_sync(g->dev);
    if (!rc && g->acc) /* acc = grads (k 0), acc += grads */
      rc = ts__gpu_axpby(g->dev, 1.0f, (const float *)g->dbase[1], k ? 1.0f : 0.0f, g->acc, (int64_t)n, NULL);
    if (rc) return rc;
    sum += l;
  }
  g->host_stale = 1;
  *loss = sum / (double)accum;
  *gout = g->acc ? g->acc : (float *)g->dbase[1]; /* device memory: only this file reads it (NULL: staged) */
  return TS_OK;
}

int ts__dist_dev_eval_out(ts_dist *d, const float *lg, const ts__eval_out *o, float *host) {
  struct ts__dist_dev *g = G(d);
  ts__dev *v = g->dev;
  int rc = TS_OK;
  if (o->rows && g->eC < TS__GPU_EVAL_MAX_C) { /* each row's statistics on the device */
    const int64_t nr = o->nr;
    if (!g->elab) { /* first evaluation here: room for every row of a batch's logits */
      size_t erows = g->nlogits / (size_t)(g->eC > 0 ? g->eC : 1) + 1;
      rc = ts__dist_dev_alloc0(v, sizeof(int32_t) * erows, (void **)&g->elab);
      if (!rc) rc = ts__dist_dev_alloc0(v, 4 * sizeof(float) * erows, (void **)&g->est);
      if (!rc) rc = ts__dev_host_alloc(v, 4 * sizeof(float) * erows, (void **)&g->est_h);
      if (rc) { /* all three or none */
        ts__dev_free(v, g->elab), ts__dev_free(v, g->est), ts__dev_host_free(v, g->est_h);
        g->elab = NULL, g->est = g->est_h = NULL;
        return ts_error_wrap(rc, "evaluation metrics on %s: buffers for %zu rows", v->info.name, erows);
      }
    }
    if (nr) rc = ts__dev_copy(v, g->elab, o->lab, sizeof(int32_t) * (size_t)nr, TS__H2D, NULL);
    if (!rc) rc = ts__gpu_eval_rows(v, lg, g->elab, nr, g->eC, g->est, NULL);
    if (!rc && nr) rc = ts__dev_copy(v, g->est_h, g->est, 4 * sizeof(float) * (size_t)nr, TS__D2H, NULL);
    if (!rc) rc = ts__dev_sync(v);
    if (!rc) ts__eval_rows_finish(g->est_h, nr, o->rows);
    return rc ? ts_error_wrap(rc, "evaluation metrics on %s", v->info.name) : TS_OK;
  }
  if (!host && !g->logits) /* the logits on the host: predictions (or classes beyond the kernel's) */
    rc = ts__dev_host_alloc(v, sizeof(float) * (g->nlogits ? g->nlogits : 1), (void **)&g->logits);
  if (!host) host = g->logits;
  if (!rc) rc = ts__dev_copy(v, host, lg, sizeof(float) * g->nlogits, TS__D2H, NULL);
  if (!rc) rc = ts__dev_sync(v);
  if (!rc) ts__dist_eval_out(d, host, o);
  return rc;
}

int ts__dist_dev_eval(ts_dist *d, const void *x, const ts__eval_out *o) {
  struct ts__dist_dev *g = G(d);
  if (d->vt == &ts__dist_pipeline) return ts__dist_dev_pipe_eval(d, x, o);
  const ts_dist_run *r = &d->r;
  size_t xs, ys;
  ts__dist_row_bytes(d, &xs, &ys);
  const char *src = (const char *)x + xs * (size_t)(d->cfg.eval_batch / r->eval_parts * r->eval_index);
  int rc = ts__dev_copy(g->dev, g->xe, src, g->xes, TS__H2D, NULL);
  if (!rc) rc = ts_plan_run(r->plan_e, 0);
  if (!rc) rc = ts__dist_dev_zero_gathered(d, 1); /* optimizer_shard 3's gathers */
  if (!rc) rc = ts__dist_dev_eval_out(d, ts_plan_data(r->plan_e, r->logits), o, NULL);
  return rc;
}

/* clipping as ts__dist_clip_finish: the norm of the (scaled) gradients from their sum of squares
 * on the device; not finite: an overflow, nothing changed; else one pass scaling by the clip
 * coefficient times 1 / the loss scale */
int ts__dist_dev_clip(ts_dist *d, float *gd, ts__clip *c) {
  struct ts__dist_dev *g = G(d);
  int64_t n = (int64_t)ts_params_numel(d->r.params);
  float *res = g->scratch + g->nscratch - 2, sq = 0;
  int rc = TS_OK;
  if (g->zgrp) return ts__dist_dev_zero_clip(d, gd, c); /* the rank's parts and the replicated ones */
  if (g->cr) { /* sliced: each range's sum of squares, 1 / its holders, summed over the ranks */
    for (int k = 0; k < g->ncr && !rc; k++)
      rc = ts__gpu_sum(g->dev, 1, gd + g->cr[k].off, (int64_t)g->cr[k].n, g->scratch, g->cres + k, NULL);
    if (!rc) rc = ts__dev_copy(g->dev, g->cres_h, g->cres, sizeof(float) * (size_t)g->ncr, TS__D2H, NULL);
    if (!rc) rc = ts__dev_sync(g->dev);
    double s = 0;
    for (int k = 0; k < g->ncr && !rc; k++) s += (double)g->cres_h[k] * g->cr[k].w;
    /* unscaled before narrowing, as the CPU's (a rank's inf or NaN makes every rank's sum so) */
    float f = (float)(s * c->inv_scale * c->inv_scale);
    if (!rc && d->world) rc = ts_comm_allreduce(d->world, &f, &f, 1, TS_F32, TS_REDUCE_SUM);
    if (rc) return ts_error_wrap(rc, "gradient clipping: the global norm");
    float fac = ts__dist_clip_factor(f, c);
    return !c->overflow && fac != 1.0f ? ts__gpu_scale(g->dev, TS_F32, gd, gd, n, fac, 0.0f, NULL) : TS_OK;
  }
  rc = ts__gpu_sum(g->dev, 1, gd, n, g->scratch, res, NULL);
  if (!rc) rc = ts__dev_copy(g->dev, &sq, res, sizeof sq, TS__D2H, NULL);
  if (!rc) rc = ts__dev_sync(g->dev);
  if (rc) return rc;
  double s = (double)c->inv_scale;
  double nrm = sqrt((double)sq * s * s);
  c->norm = (float)nrm;
  c->overflow = !isfinite(c->norm);
  if (c->overflow) return TS_OK;
  float f = c->max_norm > 0 ? ts_clip_coef(c->norm, c->max_norm) : 1.0f;
  if (c->inv_scale != 1.0f) f *= c->inv_scale;
  return f != 1.0f ? ts__gpu_scale(g->dev, TS_F32, gd, gd, n, f, 0.0f, NULL) : TS_OK;
}

int ts__dist_dev_optim_create(ts_dist *d, const ts_optim_segment *segs, int nseg, ts_optim *o) {
  struct ts__dist_dev *g = G(d);
  g->segs = malloc(sizeof *segs * (size_t)(nseg ? nseg : 1));
  if (!g->segs) return ts_error_set(TS_ENOMEM, "GPU: out of memory");
  memcpy(g->segs, segs, sizeof *segs * (size_t)nseg);
  for (int i = 0; i < nseg; i++) g->segs[i].name = NULL; /* the caller's strings: not kept */
  g->nseg = nseg;
  size_t ext = ts_optim_extent(o);
  int rc = TS_OK;
  for (int k = 0; k < ts_optim_num_slots(o) && k < 2 && !rc; k++) {
    rc = ts__dist_dev_alloc0(g->dev, sizeof(float) * ext, (void **)&g->slots[k]);
    if (!rc) rc = ts__dev_copy(g->dev, g->slots[k], ts_optim_slot_data(o, k), sizeof(float) * ext, TS__H2D, NULL);
  }
  if (!rc && ts_optim_get_config(o)->kind == TS_OPTIM_LAMB) {
    int none = 1, ns = ts_optim_num_segments(o) > nseg ? ts_optim_num_segments(o) : nseg; /* (ZeRO's work segments) */
    ts__optim_reduce_norms(o, NULL, 0, &none);
    g->lamb_all = !none; /* the norms summed over ranks: every direction kept for the second phase */
    g->lamb_nseg = ns;
    size_t most = 1;
    for (int i = 0; i < nseg; i++) most = segs[i].numel > most ? segs[i].numel : most;
    for (int i = 0; i < ts_optim_num_segments(o); i++)
      most = ts_optim_segment_at(o, i)->numel > most ? ts_optim_segment_at(o, i)->numel : most;
    rc = ts__dist_dev_alloc0(g->dev, sizeof(float) * (g->lamb_all ? ext + 1 : most), (void **)&g->lamb_u);
    if (!rc) rc = ts__dist_dev_alloc0(g->dev, sizeof(float) * (size_t)ts__gpu_sum_scratch((int64_t)most), (void **)&g->lamb_part);
    if (!rc) rc = ts__dist_dev_alloc0(g->dev, sizeof(float) * 2 * (size_t)(ns ? ns : 1), (void **)&g->lamb_sq);
    if (!rc && g->lamb_all && !(g->lamb_h = calloc(2 * (size_t)ns + 1, sizeof(double))))
      rc = ts_error_set(TS_ENOMEM, "GPU: out of memory");
  }
  return rc;
}

/* LAMB's norms summed over the ranks between the two phases, as the CPU's optimizer does (its norm
 * reduction: sliced parameters' slices, optimizer shards' parts): the sums copied out, reduced and
 * copied back (2 floats a segment) */
int ts__dist_dev_lamb_reduce(ts_dist *d, ts_optim *o, int nseg) {
  struct ts__dist_dev *g = G(d);
  size_t n = 2 * (size_t)nseg;
  float *h = malloc(sizeof(float) * (n + 1));
  if (!h) return ts_error_set(TS_ENOMEM, "GPU: out of memory");
  int rc = ts__dev_copy(g->dev, h, g->lamb_sq, sizeof(float) * n, TS__D2H, NULL), none = 0;
  if (!rc) rc = ts__dev_sync(g->dev);
  for (size_t k = 0; k < n && !rc; k++) g->lamb_h[k] = h[k];
  if (!rc) rc = ts__optim_reduce_norms(o, g->lamb_h, (int)n, &none);
  for (size_t k = 0; k < n && !rc; k++) h[k] = (float)g->lamb_h[k];
  if (!rc) rc = ts__dev_copy(g->dev, g->lamb_sq, h, sizeof(float) * n, TS__H2D, NULL);
  if (!rc) rc = ts__dev_sync(g->dev);
  free(h);
  return rc ? ts_error_wrap(rc, "LAMB: the norms over the ranks") : TS_OK;
}

/* The step's scalars for a segment (sg NULL: a decayed one of the default group) as optim.c computes
 * them (in double, rounded to f32 there): its learning rate, SGD/momentum's wd, Adam's l2 (= wd),
 * AdamW's decay_mul (= 1 - lr wd); the per-segment kernels and the one-launch update both take them
 * from here. */
static ts__gpu_optim_args step_args(ts_optim *o, float lr, const ts_optim_segment *sg) {
  const ts_optim_config *c = ts_optim_get_config(o);
  double t = (double)ts_optim_get_step(o); /* the count already advanced */
  double bc1 = 1.0 - pow(c->beta1, t), bc2 = 1.0 - pow(c->beta2, t), wd = sg ? ts_optim_segment_wd(c, sg) : c->weight_decay;
  lr = ts_optim_segment_lr(c, sg, lr);
  ts__gpu_optim_args a = {lr, (float)wd, (float)c->momentum, (float)(1.0 - c->dampening), 0.0f, 1.0f,
                          (float)c->beta1, (float)(1.0 - c->beta1), (float)c->beta2, (float)(1.0 - c->beta2),
                          (float)sqrt(bc2), (float)c->eps, (float)(-((double)lr / bc1)), ts_optim_get_step(o) == 1,
                          c->nesterov};
  if (c->kind == TS_OPTIM_ADAM) a.l2 = (float)wd;
  if (c->kind == TS_OPTIM_ADAMW) a.decay_mul = (float)(1.0 - (double)lr * wd);
  return a;
}

int ts__dist_dev_update(ts_dist *d, ts_optim *o, float *p, const float *gr, size_t w, int64_t n, const ts_optim_segment *sg,
                        int seg, float lr) {
  struct ts__dist_dev *g = G(d);
  const ts_optim_config *c = ts_optim_get_config(o);
  if (sg->flags & TS_SEG_FROZEN) return TS_OK;
  const ts__gpu_optim_args a = step_args(o, lr, sg);
  lr = a.lr; /* the segment's */
  switch (c->kind) {
    case TS_OPTIM_SGD: return ts__gpu_sgd(g->dev, p, gr, n, lr, a.wd, NULL);
    case TS_OPTIM_MOMENTUM:
      return ts__gpu_momentum(g->dev, p, gr, g->slots[0] + w, n, lr, a.wd, a.mu, a.one_m_damp, a.first, a.nesterov, NULL);
    case TS_OPTIM_ADAM:
    case TS_OPTIM_ADAMW:
      return ts__gpu_adam(g->dev, p, gr, g->slots[0] + w, g->slots[1] + w, n, a.l2, a.decay_mul, a.b1, a.omb1, a.b2, a.omb2,
                          a.bc2_sqrt, a.eps, a.neg_step, NULL);
    case TS_OPTIM_LAMB: {
      double t = (double)ts_optim_get_step(o), wd = ts_optim_segment_wd(c, sg);
      float ib1 = (float)(1.0 / (1.0 - pow(c->beta1, t))), ib2 = (float)(1.0 / (1.0 - pow(c->beta2, t)));
      int adapt = c->lamb_always_adapt || wd != 0.0;
      if (!g->lamb_all)
        return ts__gpu_lamb(g->dev, p, gr, g->slots[0] + w, g->slots[1] + w, n, a.b1, a.omb1, a.b2, a.omb2, ib1, ib2, a.eps,
                            (float)wd, lr, adapt, g->lamb_u, g->lamb_part, g->lamb_sq + 2 * seg, NULL);
      if (g->lamb_phase == 1) /* every segment's direction and sums, then (reduced) every update */
        return ts__gpu_lamb_dir(g->dev, p, gr, g->slots[0] + w, g->slots[1] + w, n, a.b1, a.omb1, a.b2, a.omb2, ib1, ib2,
                                a.eps, (float)wd, g->lamb_u + w, g->lamb_part, g->lamb_sq + 2 * seg, NULL);
      return ts__gpu_lamb_apply(g->dev, p, g->lamb_u + w, n, lr, g->lamb_sq + 2 * seg, adapt, NULL);
    }
    default: return ts_error_set(TS_EUNSUPPORTED, "GPU: optimizer %d has no GPU update", (int)c->kind);
  }
}

/* SGD, momentum, Adam/AdamW: every segment in one launch (ts__gpu_optim_multi), its chunks listed
 * on the device at the first step; the scalars as ts__dist_dev_update computes them. 1: done, 0:
 * not this optimizer (the per-segment loop runs), < 0: an error. */
static int multi_step(struct ts__dist_dev *g, ts_optim *o, float *p, const float *gd, float lr) {
  const ts_optim_config *c = ts_optim_get_config(o);
  const int kind = c->kind == TS_OPTIM_SGD ? 0 : c->kind == TS_OPTIM_MOMENTUM ? 1
                   : c->kind == TS_OPTIM_ADAM || c->kind == TS_OPTIM_ADAMW ? 2 : -1;
  if (kind < 0 || g->nmch < 0) return 0;
  if (!g->mch) { /* the chunks: frozen segments left out (TESSERA_GPU_OPTIM_SEGMENTS, or a segment in a parameter
                  * group of its own: none, per segment) */
    int grouped = 0;
    for (int s = 0; s < g->nseg; s++) grouped |= TS_SEG_GROUP_OF(g->segs[s].flags) != 0;
    if (grouped || getenv("TESSERA_GPU_OPTIM_SEGMENTS")) {
      g->nmch = -1;
      return 0;
    }
    int64_t *off = malloc(sizeof(int64_t) * (size_t)(g->nseg + 1)), *num = malloc(sizeof(int64_t) * (size_t)(g->nseg + 1));
    int *dec = malloc(sizeof(int) * (size_t)(g->nseg + 1)), ns = 0;
    ts__gpu_mchunk *h = NULL;
    int rc = off && num && dec ? TS_OK : ts_error_set(TS_ENOMEM, "GPU optimizer: out of memory");
    for (int s = 0; !rc && s < g->nseg; s++)
      if (!(g->segs[s].flags & TS_SEG_FROZEN))
        off[ns] = (int64_t)g->segs[s].offset, num[ns] = (int64_t)g->segs[s].numel,
        dec[ns++] = !(g->segs[s].flags & TS_SEG_NO_DECAY);
    int64_t n = rc ? 0 : ts__gpu_mchunks(off, num, dec, ns, NULL, 0);
    if (!rc && !(h = malloc(sizeof *h * (size_t)(n + 1)))) rc = ts_error_set(TS_ENOMEM, "GPU optimizer: out of memory");
    if (!rc) ts__gpu_mchunks(off, num, dec, ns, h, n);
    if (!rc) rc = ts__dev_alloc(g->dev, sizeof *h * (size_t)(n + 1), &g->mch);
    if (!rc) rc = ts__dev_copy(g->dev, g->mch, h, sizeof *h * (size_t)n, TS__H2D, NULL);
    if (!rc) rc = ts__dev_sync(g->dev); /* h is freed below */
    free(off), free(num), free(dec), free(h);
    if (rc) {
      ts__dev_free(g->dev, g->mch), g->mch = NULL;
      return rc;
    }
    g->nmch = n;
  }
  const ts__gpu_optim_args a = step_args(o, lr, NULL); /* (the chunks of undecayed segments: wd 0, l2 0, decay_mul 1) */
  int rc = ts__gpu_optim_multi(g->dev, kind, p, gd, g->slots[0], g->slots[1], g->mch, g->nmch, &a, NULL);
  return rc ? rc : 1;
}

/* one update of every segment, as ts_optim_step computes it (optim.c: the step count first, the
 * scalars in double rounded to f32 as there) */
int ts__dist_dev_optim_step(ts_dist *d, ts_optim *o, const float *gd, float lr) {
  struct ts__dist_dev *g = G(d);
  ts_optim_set_step(o, ts_optim_get_step(o) + 1);
  g->host_stale = 1;
  if (g->zgrp) return ts__dist_dev_zero_step(d, o, gd, lr); /* the rank's parts, then gathered */
  float *p = (float *)g->dbase[0];
  int rc = multi_step(g, o, p, gd, lr);
  if (rc) return rc > 0 ? TS_OK : rc;
  for (int ph = g->lamb_all ? 1 : 0; ph <= (g->lamb_all ? 2 : 0) && !rc; ph++) { /* (LAMB reduced: two phases) */
    g->lamb_phase = ph;
    for (int s = 0; s < g->nseg && !rc; s++) {
      const ts_optim_segment *sg = &g->segs[s];
      rc = ts__dist_dev_update(d, o, p + sg->offset, gd + sg->offset, sg->offset, (int64_t)sg->numel, sg, s, lr);
    }
    if (!rc && ph == 1) rc = ts__dist_dev_lamb_reduce(d, o, g->nseg);
  }
  return rc;
}

int ts_dist_to_host(ts_dist *d, ts_optim *o) {
  struct ts__dist_dev *g = d ? G(d) : NULL;
  if (!g || !g->host_stale) return TS_OK;
  int rc = TS_OK;
  for (int k = 0; k < 3 && !rc; k++)
    if (g->hlen[k] && k != 1) rc = ts__dev_copy(g->dev, (void *)g->hbase[k], g->dbase[k], g->hlen[k], TS__D2H, NULL);
  size_t ext = o ? ts_optim_extent(o) : 0;
  for (int k = 0; o && k < ts_optim_num_slots(o) && k < 2 && g->slots[k] && !rc; k++)
    rc = ts__dev_copy(g->dev, ts_optim_slot_data(o, k), g->slots[k], sizeof(float) * ext, TS__D2H, NULL);
  if (!rc) rc = ts__dist_dev_zero_move(d, 1); /* optimizer_shard 3's parameters */
  if (!rc) rc = ts__dev_sync(g->dev);
  if (!rc) g->host_stale = 0;
  return rc ? ts_error_wrap(rc, "copying the model from the GPU") : TS_OK;
}

int ts_dist_to_device(ts_dist *d, ts_optim *o) {
  int rc = d && d->sync.vt && d->sync.vt->loaded ? d->sync.vt->loaded(d) : TS_OK; /* ZeRO's 16-bit weights */
  struct ts__dist_dev *g = d ? G(d) : NULL;
  if (rc || !g) return rc;
  for (int k = 0; k < 3 && !rc; k++)
    if (g->hlen[k] && k != 1) rc = ts__dev_copy(g->dev, g->dbase[k], g->hbase[k], g->hlen[k], TS__H2D, NULL);
  size_t ext = o ? ts_optim_extent(o) : 0;
  for (int k = 0; o && k < ts_optim_num_slots(o) && k < 2 && g->slots[k] && !rc; k++)
    rc = ts__dev_copy(g->dev, g->slots[k], ts_optim_slot_data(o, k), sizeof(float) * ext, TS__H2D, NULL);
  if (!rc) rc = ts__dist_dev_zero_move(d, 0);
  if (!rc) rc = ts__dev_sync(g->dev);
  if (!rc) g->host_stale = 0;
  return rc ? ts_error_wrap(rc, "copying the model to the GPU") : TS_OK;
}

int ts_dist_device_info(const ts_dist *d, char *buf, size_t cap) {
  if (!d || !d->gpu) {
    if (cap) buf[0] = 0;
    return 0;
  }
  ts_device_describe(&d->gpu->dev->info, buf, cap);
  size_t n = strlen(buf);
  if (d->gpu->coll && n < cap) snprintf(buf + n, cap - n, "; collectives: %s", ts__dcoll_describe(d->gpu->coll));
  n = strlen(buf);
  if (d->gpu->ngrp > 1 && n < cap)
    snprintf(buf + n, cap - n, " (and over %d group%s of ranks: the plans' and the gradients')", d->gpu->ngrp - 1,
             d->gpu->ngrp > 2 ? "s" : "");
  n = strlen(buf);
  if (d->gpu->overlap && n < cap)
    snprintf(buf + n, cap - n, "; gradients in %d bucket%s overlapped with backward", d->gpu->nbk, d->gpu->nbk > 1 ? "s" : "");
  n = strlen(buf);
  if (d->vt == &ts__dist_pipeline && d->world && n < cap)
    snprintf(buf + n, cap - n, "; the pipeline's activations staged through host memory (MPI send/recv)");
  return 1;
}

int ts_dist_device_memory(ts_dist *d, int64_t *peak, int64_t *used) {
  *peak = *used = 0;
  if (!d || !d->gpu) return 0;
  size_t live = 0, pk = 0, fr = 0, tot = 0;
  ts__dev_mem_counts(d->gpu->dev, &live, &pk);
  if (ts__dev_mem_info(d->gpu->dev, &fr, &tot)) fr = tot = 0; /* the driver's figure unknown: 0 */
  *peak = (int64_t)pk;
  *used = (int64_t)(tot - fr);
  return 1;
}
