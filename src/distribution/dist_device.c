/* A job's training on a GPU (device_target: GPU; docs/gpu.md): the distribution object's store,
 * gradients, optimizer state and plans resident on the device, the steps run there, the host
 * copies kept for what reads them (checkpoints, the store's users) and refreshed on demand.
 * One process, one GPU: the stand_alone layout; data_parallel over ranks each driving a GPU (or
 * sharing one), the gradients all-reduced on the devices after backward through the device
 * collectives (runtime/dcoll.h: NCCL, or MPI staged through pinned memory), the parameters
 * broadcast from rank 0 there, BatchNorm's running statistics averaged there (the other layouts
 * over several ranks stay on the CPU until their collectives run on device buffers, issue #29).
 *   create: the device opened (ts__dist_dev_open); build: the plans put on it, the store's
 *   buffers mirrored there (parameters, gradients, states; each binding moved to the same offset),
 *   inputs bound to device buffers (ts__dist_dev_bind); a step: the batch copied in, the plan run,
 *   the loss copied out (4 bytes), micro-steps accumulated on the device; clipping and the loss
 *   scale's overflow test from the gradients' sum of squares on the device (8 bytes out); the
 *   optimizer's update per segment on the device (its state there, its step count on the host). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist_impl.h"
#include "device/dev.h"
#include "device/gpu_kernels.h"
#include "runtime/dcoll.h"
#include "runtime/exec.h"

struct ts__dist_dev {
  ts__dev *dev;
  ts__dcoll *coll;         /* data_parallel: the collectives over the world on device buffers */
  /* data_parallel through NCCL, one micro-batch: the gradients in buckets all-reduced on a stream
   * of their own as backward completes them (each bucket: a range of the flat gradients, the
   * plan's node after which all of it is written), waited for at the step's end */
  struct ts__gbucket {
    size_t off, n;
    int ready; /* the node after which it is complete (-1: none writes it: issued at the end) */
  } *bk;
  int nbk, next_bk, async_rc;
  ts__dev_stream *comm_s;
  ts__dev_event *ev_node, *ev_comm;
  /* the store's buffers: parameters, gradients, states (host base, bytes, device copy) */
  const char *hbase[3];
  size_t hlen[3];
  char *dbase[3];
  float *acc;              /* accumulated gradients (accum > 1) */
  void *x, *y, *xe;        /* the inputs of a micro-step and of an evaluation batch */
  size_t xs, ys, xes;
  float *logits;           /* an evaluation batch's logits, copied out */
  size_t nlogits;
  float *scratch;          /* partial sums (clipping) and the results (2 floats) */
  size_t nscratch;
  float *slots[2];         /* the optimizer's state on the device */
  float *lamb_u, *lamb_part, *lamb_sq; /* LAMB: a segment's direction, sums' partials, sums (2 a segment) */
  ts_optim_segment *segs;  /* its segments (offsets into the flat buffers) */
  int nseg;
  int host_stale;          /* the host copies are older than the device's */
};

#define G(d) ((d)->gpu)

int ts__dist_dev_check(const char *mode, const ts_dist_config *cfg) {
  if (!strcmp(mode, "stand_alone")) return TS_OK;
  if (strcmp(mode, "data_parallel"))
    return ts_error_set(TS_ECONFIG, "device_target GPU: parallel.mode %s does not run on GPUs yet (stand_alone and "
                        "data_parallel do; the other layouts come with issue #29, docs/gpu.md)", mode);
  if (cfg->optimizer_shard)
    return ts_error_set(TS_ECONFIG, "device_target GPU: parallel.optimizer_shard %d does not run on GPUs yet "
                        "(data_parallel does without it; docs/gpu.md)", cfg->optimizer_shard);
  if (cfg->sync_batchnorm)
    return ts_error_set(TS_ECONFIG, "device_target GPU: parallel.sync_batchnorm does not run on GPUs yet (each rank's "
                        "batch statistics; the running statistics are averaged over the ranks; docs/gpu.md)");
  return TS_OK;
}

int ts__dist_dev_open(ts_dist *d) {
  struct ts__dist_dev *g = calloc(1, sizeof *g);
  if (!g) return ts_error_set(TS_ENOMEM, "GPU: out of memory");
  int rc = ts__dev_open(TS_DEVICE_GPU, d->cfg.device_id >= 0 ? d->cfg.device_id : 0, &g->dev);
  /* every rank's collectives on the devices (collective over the world: every rank gets here,
   * or fails the same way, the choice agreed inside) */
  if (!rc && d->world) rc = ts__dcoll_create(d->world, g->dev, (ts__dcoll_backend)d->cfg.comm_backend, &g->coll);
  if (rc) {
    ts__dev_close(g->dev);
    free(g);
    return rc;
  }
  d->gpu = g;
  return TS_OK;
}

int ts__dist_dev_start(ts_dist *d) {
  struct ts__dist_dev *g = G(d);
  ts_params *p = d->r.params;
  int rc = TS_OK;
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
  if (!rc) rc = ts__dcoll_allreduce(g->coll, gd + b->off, gd + b->off, b->n, TS_F32,
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

typedef struct {
  struct ts__dist_dev *g;
  const ts_graph *graph;
  struct ts__gbucket *pg; /* each gradient binding: its range and producer */
  int n;
} grad_ctx;

static int grad_one(ts_val v, void *data, void *user) {
  grad_ctx *c = user;
  const char *h = c->g->hbase[1];
  if (!data || (const char *)data < h || (const char *)data >= h + c->g->hlen[1]) return TS_OK;
  ts_shape sh = ts_val_shape(c->graph, v);
  c->pg[c->n].off = (size_t)((const char *)data - h) / sizeof(float);
  c->pg[c->n].n = (size_t)ts_shape_numel(&sh);
  c->pg[c->n].ready = ts_graph_producer(c->graph, v);
  c->n++;
  return TS_OK;
}

static int by_off(const void *a, const void *b) {
  const struct ts__gbucket *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}
static int by_ready(const void *a, const void *b) { /* -1 (none) last; then by offset */
  const struct ts__gbucket *x = a, *y = b;
  int rx = x->ready < 0 ? 1 << 30 : x->ready, ry = y->ready < 0 ? 1 << 30 : y->ready;
  return rx != ry ? (rx < ry ? -1 : 1) : by_off(a, b);
}

/* The buckets of the flat gradients (NCCL, one micro-batch, parallel.overlap): ranges of about
 * bucket_mb cut at the parameters' boundaries, covering every element, each ready after the last
 * node writing into it; the hook on the training plan. Nothing when overlap does not apply. */
static int buckets_plan(ts_dist *d) {
  struct ts__dist_dev *g = G(d);
  const ts_dist_run *r = &d->r;
  if (!g->coll || r->size < 2 || ts__dcoll_backend_of(g->coll) != TS__DCOLL_NCCL || d->cfg.accum > 1 ||
      !d->cfg.overlap || !r->plan || !g->hlen[1])
    return TS_OK;
  int np = ts_params_count(r->params);
  grad_ctx c = {g, r->g, calloc((size_t)np + 1, sizeof *c.pg), 0};
  if (!c.pg) return ts_error_set(TS_ENOMEM, "GPU: out of memory (gradient buckets)");
  int rc = ts_params_each_binding(r->params, r->g, grad_one, &c);
  qsort(c.pg, (size_t)c.n, sizeof *c.pg, by_off);
  size_t total = g->hlen[1] / sizeof(float);
  double mb = d->cfg.bucket_mb > 0 ? d->cfg.bucket_mb : TS_BUCKET_MB_DEFAULT;
  size_t cap = (size_t)(mb * 1048576.0 / sizeof(float));
  g->bk = calloc((size_t)(2 * c.n + 2), sizeof *g->bk);
  if (!rc && !g->bk) rc = ts_error_set(TS_ENOMEM, "GPU: out of memory (gradient buckets)");
  size_t at = 0;
  for (int i = 0; i <= c.n && !rc; i++) {
    size_t start = i < c.n ? c.pg[i].off : total;
    if (start > at) { /* elements no binding covers: their own bucket, at the end */
      g->bk[g->nbk++] = (struct ts__gbucket){at, start - at, -1};
      at = start;
    }
    if (i == c.n) break;
    struct ts__gbucket *last = g->nbk ? &g->bk[g->nbk - 1] : NULL;
    if (last && last->ready >= 0 && last->off + last->n == c.pg[i].off && last->n + c.pg[i].n <= cap && c.pg[i].ready >= 0)
      last->n += c.pg[i].n, last->ready = c.pg[i].ready > last->ready ? c.pg[i].ready : last->ready;
    else g->bk[g->nbk++] = c.pg[i];
    at = c.pg[i].off + c.pg[i].n;
  }
  free(c.pg);
  if (rc) return rc;
  qsort(g->bk, (size_t)g->nbk, sizeof *g->bk, by_ready);
  rc = ts__dev_stream_create(g->dev, &g->comm_s);
  if (!rc) rc = ts__dev_event_create(g->dev, &g->ev_node);
  if (!rc) rc = ts__dev_event_create(g->dev, &g->ev_comm);
  if (!rc) rc = ts_plan_add_hook(r->plan, bucket_hook, d);
  return rc;
}

int ts__dist_dev_reduce(ts_dist *d, float *gd, double *wait_ms) {
  struct ts__dist_dev *g = G(d);
  double t0 = ts_time_now();
  int rc = TS_OK;
  if (g->nbk && gd == (float *)g->dbase[1]) { /* the buckets backward left, then the compute stream after them */
    rc = g->async_rc;
    while (!rc && g->next_bk < g->nbk) rc = issue_bucket(d, g->next_bk++);
    if (!rc) rc = ts__dev_event_record(g->dev, g->ev_comm, g->comm_s);
    if (!rc) rc = ts__dev_stream_wait(g->dev, NULL, g->ev_comm);
  } else if (d->r.size > 1) {
    rc = ts__dcoll_allreduce(g->coll, gd, gd, ts_params_numel(d->r.params), TS_F32,
                             d->sync.mean ? TS_REDUCE_MEAN : TS_REDUCE_SUM, NULL);
  }
  /* done within parallel.comm_timeout, as the CPU's blocking collectives (NCCL's is queued on
   * the stream: polled, aborted past it) */
  if (!rc && d->r.size > 1) rc = ts__dcoll_wait(g->coll, NULL, ts_comm_get_timeout(), "all-reduce of the gradients");
  *wait_ms = 1e3 * (ts_time_now() - t0);
  return rc ? ts_error_wrap(rc, "the gradients over the %d ranks", d->r.size) : TS_OK;
}

int ts__dist_dev_sync_states(ts_dist *d) {
  struct ts__dist_dev *g = G(d);
  ts_params *p = d->r.params;
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
  ts__dev_host_free(v, g->logits);
  free(g->segs);
  free(g->bk);
  ts__dev_event_destroy(v, g->ev_node), ts__dev_event_destroy(v, g->ev_comm);
  if (g->comm_s) ts__dev_stream_destroy(v, g->comm_s);
  d->gpu = NULL;
  /* the plans hold device memory: they go first (ts_dist_free frees them after this: moved here) */
  ts_plan_free(d->r.plan);
  ts_plan_free(d->r.plan_e);
  d->r.plan = d->r.plan_e = NULL;
  ts__dcoll_free(g->coll);
  ts__dev_close(v);
  free(g);
}

static int alloc0(ts__dev *v, size_t bytes, void **p) {
  int rc = ts__dev_alloc(v, bytes ? bytes : 64, p);
  return rc ? rc : ts__dev_memset0(v, *p, bytes ? bytes : 64, NULL);
}

/* each binding of the store moved to the same offset of its device copy */
typedef struct {
  struct ts__dist_dev *g;
  ts_plan *plan;
} bind_ctx;

static int bind_one(ts_val v, void *data, void *user) {
  bind_ctx *b = user;
  for (int k = 0; k < 3; k++)
    if (data && (const char *)data >= b->g->hbase[k] && (const char *)data < b->g->hbase[k] + b->g->hlen[k])
      return ts_plan_bind(b->plan, v, b->g->dbase[k] + ((const char *)data - b->g->hbase[k]));
  return ts_error_set(TS_EINVAL, "GPU: a value of the plan is bound outside the parameter store");
}

static int put_plan(ts_dist *d, ts_plan *p, const ts_graph *g) {
  bind_ctx b = {G(d), p};
  int rc = ts_plan_set_device(p, G(d)->dev);
  if (!rc) rc = ts_params_each_binding(d->r.params, g, bind_one, &b);
  return rc;
}

int ts__dist_dev_bind(ts_dist *d) {
  struct ts__dist_dev *g = G(d);
  ts_dist_run *r = &d->r;
  ts__dev *v = g->dev;
  g->hbase[0] = (const char *)ts_params_data(r->params), g->hlen[0] = sizeof(float) * ts_params_numel(r->params);
  g->hbase[1] = (const char *)ts_params_grads(r->params), g->hlen[1] = sizeof(float) * ts_params_numel(r->params);
  g->hbase[2] = (const char *)ts_params_states(r->params), g->hlen[2] = sizeof(float) * ts_params_state_numel(r->params);
  int rc = TS_OK;
  for (int k = 0; k < 3 && !rc; k++) {
    if (!g->hlen[k]) continue;
    rc = alloc0(v, g->hlen[k], (void **)&g->dbase[k]);
    if (!rc && k != 1) rc = ts__dev_copy(v, g->dbase[k], g->hbase[k], g->hlen[k], TS__H2D, NULL);
  }
  size_t xs, ys;
  ts__dist_row_bytes(d, &xs, &ys);
  g->xs = xs * (size_t)r->micro_batch, g->ys = ys * (size_t)r->micro_batch;
  g->xes = xs * (size_t)(d->cfg.eval_batch / (r->eval_parts > 0 ? r->eval_parts : 1));
  g->nlogits = (size_t)ts_shape_numel(&r->logits_shape);
  g->nscratch = (size_t)ts__gpu_sum_scratch((int64_t)ts_params_numel(r->params)) + 2;
  if (!rc) rc = alloc0(v, g->xs, &g->x);
  if (!rc) rc = alloc0(v, g->ys, &g->y);
  if (!rc) rc = alloc0(v, g->xes, &g->xe);
  if (!rc) rc = alloc0(v, sizeof(float) * g->nscratch, (void **)&g->scratch);
  if (!rc && d->cfg.accum > 1) rc = alloc0(v, g->hlen[1], (void **)&g->acc);
  if (!rc) rc = ts__dev_host_alloc(v, sizeof(float) * (g->nlogits ? g->nlogits : 1), (void **)&g->logits);
  if (!rc && r->plan) rc = put_plan(d, r->plan, r->g);
  if (!rc && r->plan) rc = ts_plan_bind(r->plan, r->x, g->x);
  if (!rc && r->plan) rc = ts_plan_bind(r->plan, r->y, g->y);
  if (!rc && r->plan_e) rc = put_plan(d, r->plan_e, r->ge);
  if (!rc && r->plan_e) rc = ts_plan_bind(r->plan_e, r->xe, g->xe);
  /* planned now: an op without a GPU kernel is refused before the first step, naming the node */
  int l = 0;
  if (!rc && r->plan && (l = ts_plan_node_live(r->plan, 0)) < 0) rc = l;
  if (!rc && r->plan_e && (l = ts_plan_node_live(r->plan_e, 0)) < 0) rc = l;
  if (rc == TS_EUNSUPPORTED) return ts_error_wrap(rc, "device_target GPU");
  if (!rc) rc = buckets_plan(d);
  if (!rc) rc = ts__dev_sync(v);
  return rc ? ts_error_wrap(rc, "device_target GPU: putting the model on %s", v->info.name) : TS_OK;
}

int ts__dist_dev_fwd_bwd(ts_dist *d, const void *x, const void *y, int64_t step, double *loss, float **gout) {
  struct ts__dist_dev *g = G(d);
  const ts_dist_run *r = &d->r;
  int64_t accum = d->cfg.accum;
  size_t n = ts_params_numel(r->params);
  double sum = 0;
  for (int64_t k = 0; k < accum; k++) {
    int rc = ts__dev_copy(g->dev, g->x, (const char *)x + (size_t)k * g->xs, g->xs, TS__H2D, NULL);
    if (!rc) rc = ts__dev_copy(g->dev, g->y, (const char *)y + (size_t)k * g->ys, g->ys, TS__H2D, NULL);
    if (!rc) rc = ts_plan_run(r->plan, (uint64_t)(step * accum + k)); /* ends synchronised */
    float l = 0;
    if (!rc) rc = ts__dev_copy(g->dev, &l, ts_plan_data(r->plan, r->loss), sizeof l, TS__D2H, NULL);
    if (!rc) rc = ts__dev_sync(g->dev);
    if (!rc && accum > 1) /* acc = grads (k 0), acc += grads */
      rc = ts__gpu_axpby(g->dev, 1.0f, (const float *)g->dbase[1], k ? 1.0f : 0.0f, g->acc, (int64_t)n, NULL);
    if (rc) return rc;
    sum += l;
  }
  g->host_stale = 1;
  *loss = sum / (double)accum;
  *gout = accum > 1 ? g->acc : (float *)g->dbase[1]; /* device memory: only this file reads it */
  return TS_OK;
}

int ts__dist_dev_eval(ts_dist *d, const void *x, const float **logits) {
  struct ts__dist_dev *g = G(d);
  const ts_dist_run *r = &d->r;
  size_t xs, ys;
  ts__dist_row_bytes(d, &xs, &ys);
  const char *src = (const char *)x + xs * (size_t)(d->cfg.eval_batch / r->eval_parts * r->eval_index);
  int rc = ts__dev_copy(g->dev, g->xe, src, g->xes, TS__H2D, NULL);
  if (!rc) rc = ts_plan_run(r->plan_e, 0);
  if (!rc) rc = ts__dev_copy(g->dev, g->logits, ts_plan_data(r->plan_e, r->logits), sizeof(float) * g->nlogits,
                             TS__D2H, NULL);
  if (!rc) rc = ts__dev_sync(g->dev);
  *logits = rc ? NULL : g->logits;
  return rc;
}

/* clipping as ts__dist_clip_finish: the norm of the (scaled) gradients from their sum of squares
 * on the device; not finite: an overflow, nothing changed; else one pass scaling by the clip
 * coefficient times 1 / the loss scale */
int ts__dist_dev_clip(ts_dist *d, float *gd, ts__clip *c) {
  struct ts__dist_dev *g = G(d);
  int64_t n = (int64_t)ts_params_numel(d->r.params);
  float *res = g->scratch + g->nscratch - 2, sq = 0;
  int rc = ts__gpu_sum(g->dev, 1, gd, n, g->scratch, res, NULL);
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
    rc = alloc0(g->dev, sizeof(float) * ext, (void **)&g->slots[k]);
    if (!rc) rc = ts__dev_copy(g->dev, g->slots[k], ts_optim_slot_data(o, k), sizeof(float) * ext, TS__H2D, NULL);
  }
  if (!rc && ts_optim_get_config(o)->kind == TS_OPTIM_LAMB) {
    size_t most = 1;
    for (int i = 0; i < nseg; i++) most = segs[i].numel > most ? segs[i].numel : most;
    rc = alloc0(g->dev, sizeof(float) * most, (void **)&g->lamb_u);
    if (!rc) rc = alloc0(g->dev, sizeof(float) * (size_t)ts__gpu_sum_scratch((int64_t)most), (void **)&g->lamb_part);
    if (!rc) rc = alloc0(g->dev, sizeof(float) * 2 * (size_t)(nseg ? nseg : 1), (void **)&g->lamb_sq);
  }
  return rc;
}

/* one update of every segment, as ts_optim_step computes it (optim.c: the step count first, the
 * scalars in double rounded to f32 as there) */
int ts__dist_dev_optim_step(ts_dist *d, ts_optim *o, const float *gd, float lr) {
  struct ts__dist_dev *g = G(d);
  const ts_optim_config *c = ts_optim_get_config(o);
  int64_t step = ts_optim_get_step(o) + 1;
  ts_optim_set_step(o, step);
  double t = (double)step;
  float b1 = (float)c->beta1, b2 = (float)c->beta2, eps = (float)c->eps;
  float omb1 = (float)(1.0 - c->beta1), omb2 = (float)(1.0 - c->beta2);
  double bc1 = 1.0 - pow(c->beta1, t), bc2 = 1.0 - pow(c->beta2, t);
  float neg_step = (float)(-((double)lr / bc1)), bc2_sqrt = (float)sqrt(bc2);
  float *p = (float *)g->dbase[0];
  int rc = TS_OK;
  for (int s = 0; s < g->nseg && !rc; s++) {
    const ts_optim_segment *sg = &g->segs[s];
    if (sg->flags & TS_SEG_FROZEN) continue;
    double wd = (sg->flags & TS_SEG_NO_DECAY) ? 0.0 : c->weight_decay;
    size_t off = sg->offset;
    int64_t n = (int64_t)sg->numel;
    switch (c->kind) {
      case TS_OPTIM_SGD: rc = ts__gpu_sgd(g->dev, p + off, gd + off, n, lr, (float)wd, NULL); break;
      case TS_OPTIM_MOMENTUM:
        rc = ts__gpu_momentum(g->dev, p + off, gd + off, g->slots[0] + off, n, lr, (float)wd, (float)c->momentum,
                              (float)(1.0 - c->dampening), step == 1, c->nesterov, NULL);
        break;
      case TS_OPTIM_ADAM:
        rc = ts__gpu_adam(g->dev, p + off, gd + off, g->slots[0] + off, g->slots[1] + off, n, (float)wd, 1.0f, b1, omb1,
                          b2, omb2, bc2_sqrt, eps, neg_step, NULL);
        break;
      case TS_OPTIM_ADAMW:
        rc = ts__gpu_adam(g->dev, p + off, gd + off, g->slots[0] + off, g->slots[1] + off, n, 0.0f,
                          (float)(1.0 - (double)lr * wd), b1, omb1, b2, omb2, bc2_sqrt, eps, neg_step, NULL);
        break;
      case TS_OPTIM_LAMB: {
        float ib1 = (float)(1.0 / bc1), ib2 = (float)(1.0 / bc2);
        int adapt = c->lamb_always_adapt || wd != 0.0;
        rc = ts__gpu_lamb(g->dev, p + off, gd + off, g->slots[0] + off, g->slots[1] + off, n, b1, omb1, b2, omb2, ib1,
                          ib2, eps, (float)wd, lr, adapt, g->lamb_u, g->lamb_part, g->lamb_sq + 2 * s, NULL);
        break;
      }
      default: rc = ts_error_set(TS_EUNSUPPORTED, "GPU: optimizer %d has no GPU update", (int)c->kind);
    }
  }
  g->host_stale = 1;
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
  if (d->gpu->nbk && n < cap)
    snprintf(buf + n, cap - n, "; gradients in %d bucket%s overlapped with backward", d->gpu->nbk, d->gpu->nbk > 1 ? "s" : "");
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
