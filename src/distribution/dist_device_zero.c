/* Optimizer-state sharding, stages 1 to 3 (ZeRO-1/2/3, parallel.optimizer_shard), on GPU ranks: the layout
 * the CPU's sync object planned (dist_zero.c's head, zero_impl.h: the ranks holding the same
 * slices in groups; each group's sharded parameters in buckets cut into N parts of ceil(len / N)
 * elements, the rank owning its place's part of each; the replicated parameters packed into a
 * work buffer of R) run on the devices through each group's device collectives (runtime/dcoll.h):
 *   reduce: every bucket reduce-scattered over its group (padded to N equal parts in a scratch;
 *     the rank's reduced part written back in place in the gradients, as the CPU's stage 1), the
 *     replicated gradients packed as the CPU packs them and all-reduced per group;
 *   clip: the parts' squares summed over the job in one float, the replicated ones counted as the
 *     CPU counts them (locally under data_parallel, else weighted by their holders);
 *   step: the optimizer over the rank's segments (ts_optim's, in the work layout: its state is
 *     R + P floats a slot, as on the CPU), then every bucket all-gathered in place.
 * The optimizer's host copy keeps the CPU's layout, so checkpoints (the sync object's moves) and
 * ts_dist_to_host / ts_dist_to_device work unchanged; a GPU job's checkpoint resumes on CPU ranks
 * and back.
 * Stage 2 (ZeRO-2; z->staged): no whole gradient buffer. The CPU's staging slots get device copies
 * (mirrors: the plans' bindings into the host slots, the work buffer and the micro-step's
 * replicated gradients moved onto them, dist_device.c's bind_one); a hook on the training plan
 * queues, after the node completing a bucket, its reduce-scatter from the slot on the compute
 * stream (before any later writer of the slot, in the nodes' order on every rank), the rank's part
 * written into the work buffer (micro-steps after the first: added); the replicated gradients,
 * bound into the work buffer (with accumulation: a buffer of R added up there after each
 * micro-step), are all-reduced per group at the step's end; clipping and the update read the parts
 * there.
 * Stage 3 (ZeRO-3): the rank's parameters (wp, the work layout) and the gather slots get device
 * copies too; the host's gather hooks are removed and a hook on each plan (training, evaluation)
 * queues each gather of gather.c's list on the compute stream before the node it names (the rank's
 * part padded, all-gathered over the group, the unit copied into its slot); the update runs on wp
 * in place, nothing gathered after it.
 * Hybrid shard groups (parallel.optimizer_shard_group): the buckets over the shard group, the
 * rank's reduced parts then all-reduced across the shard groups, the replicated gradients over the
 * whole group (three device collectives a group), each part counted 1 / the shard groups in the
 * norm. 16-bit working weights and LAMB are refused before training (below). */
#include <stdlib.h>
#include <string.h>

#include "dist_device.h"
#include "device/gpu_kernels.h"
#include "zero_impl.h"

/* group grp's device collectives: over its shard group's ranks (the buckets: reduce-scatter,
 * all-gather), the ranks at its place in every shard group (optimizer_shard_group: the parts'
 * all-reduce; NULL without), all its ranks (the replicated gradients) */
static ts__dcoll *zx(struct ts__dist_dev *g, int grp) { return g->grp[g->zgrp[3 * grp]].x; }
static ts__dcoll *zxx(struct ts__dist_dev *g, int grp) { return g->zgrp[3 * grp + 1] < 0 ? NULL : g->grp[g->zgrp[3 * grp + 1]].x; }
static ts__dcoll *zxr(struct ts__dist_dev *g, int grp) { return g->grp[g->zgrp[3 * grp + 2]].x; }

/* the rank's reduced gradient of its part of bucket k on the device: in place (stage 1) or in the
 * work buffer (stage 2) */
static float *part_dev(const struct ts__dist_dev *g, const struct ts__zero *z, const float *gd, int k) {
  return z->staged ? g->zwg + z->pt[k].work : (float *)gd + z->pt[k].flat + z->pt[k].lo;
}

static int mirror(struct ts__dist_dev *g, const void *h, size_t bytes, void *dv) {
  if (!h || !bytes) return TS_OK;
  struct ts__dmir *m = realloc(g->mir, sizeof *m * (size_t)(g->nmir + 1));
  if (!m) return ts_error_set(TS_ENOMEM, "GPU: out of memory (optimizer shards)");
  g->mir = m;
  g->mir[g->nmir++] = (struct ts__dmir){(const char *)h, bytes, (char *)dv};
  return TS_OK;
}

int ts__dist_dev_zero_mirror(ts_dist *d) {
  struct ts__dist_dev *g = G(d);
  struct ts__zero *z = ts__zof(d);
  if (!d->world || !z || !z->staged || z->low != TS_F32) return TS_OK; /* (the others refused in bind) */
  int ns = 0, rc = TS_OK;
  if (!(g->zslot0 = calloc((size_t)z->ng + 1, sizeof(int)))) return ts_error_set(TS_ENOMEM, "GPU: out of memory");
  for (int k = 0; k < z->ng; k++) g->zslot0[k] = ns, ns += ts__buckets_num_slots(z->g[k].bk);
  if (!(g->zslot = calloc((size_t)ns + 1, sizeof(float *)))) return ts_error_set(TS_ENOMEM, "GPU: out of memory");
  g->nzslot = ns;
  for (int k = 0; k < z->ng && !rc; k++)
    for (int q = 0; q < ts__buckets_num_slots(z->g[k].bk) && !rc; q++) {
      size_t n = 0;
      float *h = ts__buckets_slot_data(z->g[k].bk, q, &n);
      if (!h) continue;
      rc = ts__dist_dev_alloc0(g->dev, sizeof(float) * n, (void **)&g->zslot[g->zslot0[k] + q]);
      if (!rc) rc = mirror(g, h, sizeof(float) * n, g->zslot[g->zslot0[k] + q]);
    }
  /* the work buffer: the replicated gradients (bound there without accumulation), then the parts */
  if (!rc) rc = ts__dist_dev_alloc0(g->dev, sizeof(float) * (z->R + z->P + 1), (void **)&g->zwg);
  if (!rc) rc = mirror(g, z->wg, sizeof(float) * (z->R + z->P), g->zwg);
  if (!rc && z->rg) rc = ts__dist_dev_alloc0(g->dev, sizeof(float) * (z->R + 1), (void **)&g->zrg);
  if (!rc && z->rg) rc = mirror(g, z->rg, sizeof(float) * z->R, g->zrg);
  if (!rc && z->stage3) { /* the rank's parameters (initialised on the host) and the gather slots */
    rc = ts__dist_dev_alloc0(g->dev, sizeof(float) * (z->R + z->P + 1), (void **)&g->zwp);
    if (!rc) rc = ts__dev_copy(g->dev, g->zwp, z->wp, sizeof(float) * (z->R + z->P), TS__H2D, NULL);
    if (!rc) rc = mirror(g, z->wp, sizeof(float) * (z->R + z->P), g->zwp);
    int nq = ts__gather_num_slots(z->gt);
    if (!rc && !(g->zgslot = calloc((size_t)nq + 1, sizeof(float *)))) rc = ts_error_set(TS_ENOMEM, "GPU: out of memory");
    g->nzgslot = rc ? 0 : nq;
    for (int q = 0; q < nq && !rc; q++) {
      size_t n = 0;
      float *h = ts__gather_slot_buf(z->gt, q, &n);
      if (!h) continue;
      rc = ts__dist_dev_alloc0(g->dev, sizeof(float) * n, (void **)&g->zgslot[q]);
      if (!rc) rc = mirror(g, h, sizeof(float) * n, g->zgslot[q]);
    }
  }
  return rc ? ts_error_wrap(rc, "parallel.optimizer_shard %d: the staging slots on the GPU", d->cfg.optimizer_shard)
            : TS_OK;
}

static int by_last(const void *a, const void *b) { /* by the node completing it, then bucket order */
  const struct ts__zbk *x = a, *y = b;
  return x->last != y->last ? (x->last > y->last) - (x->last < y->last) : (x->k > y->k) - (x->k < y->k);
}

/* Stage 2: bucket zord[j] reduce-scattered from its staging slot on the compute stream (after the
 * nodes that wrote it, before any later writer of the slot): copied into the scratch with its
 * parameters without a gradient zeroed and padded to N equal parts, the rank's reduced part
 * written into (or, micro-steps after the first, added to) its place in the work buffer. */
static int issue(ts_dist *d, int j) {
  struct ts__dist_dev *g = G(d);
  struct ts__zero *z = ts__zof(d);
  const int k = g->zord[j].k;
  const part *q = &z->pt[k];
  const zgroup *G = &z->g[q->grp];
  int last, s = ts__buckets_slot_of(G->bk, k - G->first, &last), hk;
  size_t c = q->counts[0], N = (size_t)G->N, off, len;
  if (s < 0 || !g->zslot[g->zslot0[q->grp] + s])
    return ts_error_set(TS_EINVAL, "parallel.optimizer_shard %d: bucket %d has no staging slot on the GPU",
                        d->cfg.optimizer_shard, k);
  int rc = ts__dev_copy(g->dev, g->zpad, g->zslot[g->zslot0[q->grp] + s], sizeof(float) * q->len, TS__D2D, NULL);
  for (int h = 0; !rc && ts__buckets_hole(G->bk, h, &hk, &off, &len); h++)
    if (hk == k - G->first) rc = ts__dev_memset0(g->dev, g->zpad + (off - q->flat), sizeof(float) * len, NULL);
  if (!rc && N * c > q->len) rc = ts__dev_memset0(g->dev, g->zpad + q->len, sizeof(float) * (N * c - q->len), NULL);
  if (!rc)
    rc = ts__dcoll_reduce_scatter(zx(g, q->grp), g->zpad, g->zpad + N * c, c, TS_F32,
                                  d->sync.mean ? TS_REDUCE_MEAN : TS_REDUCE_SUM, NULL);
  float *dst = g->zwg + q->work;
  if (!rc && q->n && g->zacc) rc = ts__gpu_axpby(g->dev, 1.0f, g->zpad + N * c, 1.0f, dst, (int64_t)q->n, NULL);
  else if (!rc && q->n) rc = ts__dev_copy(g->dev, dst, g->zpad + N * c, sizeof(float) * q->n, TS__D2D, NULL);
  return rc ? ts_error_wrap(rc, "parallel.optimizer_shard %d: reduce-scatter of gradient bucket %d", d->cfg.optimizer_shard, k)
            : TS_OK;
}

/* the training plan's hook (stage 2): after node i, the buckets it completes, in the order every
 * rank of their groups issues them (the nodes', from the same graph) */
static void zero_hook(const ts_hook_info *e, void *user) {
  ts_dist *d = user;
  struct ts__dist_dev *g = G(d);
  if (e->event == TS_HOOK_RUN_BEGIN) g->znext = 0, g->zrc = TS_OK;
  if (e->event != TS_HOOK_NODE_END || g->zrc) return;
  while (g->znext < g->nzord && g->zord[g->znext].last <= e->node)
    if ((g->zrc = issue(d, g->znext++))) return;
}

/* Stage 3: unit u (bucket u) all-gathered into its slot on the compute stream, before the node
 * that reads it first (after every earlier reader of the slot's previous unit): the rank's part
 * padded to the group's equal parts, the N parts gathered, the unit's elements copied in. */
static int gather(ts_dist *d, int u) {
  struct ts__dist_dev *g = G(d);
  struct ts__zero *z = ts__zof(d);
  int q = -1;
  const ts__gather_unit *un = ts__gather_unit_at(z->gt, u, &q);
  if (!un || u >= z->nb || q < 0 || q >= g->nzgslot || !g->zgslot[q])
    return ts_error_set(TS_EINVAL, "parallel.optimizer_shard 3: gather unit %d has no slot on the GPU", u);
  const part *pt = &z->pt[u];
  size_t c = pt->counts[0], N = (size_t)z->g[pt->grp].N;
  float *mine = g->zpad + N * c;
  int rc = pt->n ? ts__dev_copy(g->dev, mine, g->zwp + un->src, sizeof(float) * pt->n, TS__D2D, NULL) : TS_OK;
  if (!rc && pt->n < c) rc = ts__dev_memset0(g->dev, mine + pt->n, sizeof(float) * (c - pt->n), NULL);
  if (!rc) rc = ts__dcoll_allgather(zx(g, pt->grp), mine, g->zpad, c, TS_F32, NULL);
  if (!rc) rc = ts__dev_copy(g->dev, g->zgslot[q], g->zpad, sizeof(float) * un->len, TS__D2D, NULL);
  return rc ? ts_error_wrap(rc, "parallel.optimizer_shard 3: all-gather of parameter unit %d", u) : TS_OK;
}

/* a plan's gathers (stage 3): each queued as the node waiting for it is about to be, in the order
 * every rank's same plan has them */
static void gather_hook(const ts_hook_info *e, void *user) {
  struct ts__zgat *a = user;
  struct ts__zero *z = ts__zof(a->d);
  int node, unit;
  if (e->event == TS_HOOK_RUN_BEGIN) a->next = 0, a->rc = TS_OK;
  if (e->event != TS_HOOK_NODE_BEGIN || a->rc) return;
  while (ts__gather_op(z->gt, a->plan, a->next, &node, &unit) && node <= e->node) {
    a->next++;
    if ((a->rc = gather(a->d, unit))) return;
  }
}

float *ts__dist_dev_zero_reduced_at(ts_dist *d, float *gd, size_t flat, size_t numel, size_t *lo, size_t *n) {
  struct ts__dist_dev *g = G(d);
  struct ts__zero *z = ts__zof(d);
  for (int k = 0; z && k < z->nb; k++)
    if (z->pt[k].flat == flat && z->pt[k].len == numel) { /* the parameter's own bucket */
      *lo = z->pt[k].lo;
      *n = z->pt[k].n;
      return part_dev(g, z, gd, k);
    }
  for (int k = 0; z && k < z->nrep; k++)
    if (z->rep[k].flat == flat) return g->zwg + z->rep[k].packed; /* [lo, n) stay the whole */
  return NULL;
}

int ts__dist_dev_zero_gathered(ts_dist *d, int which) {
  const struct ts__zgat *a = &G(d)->zgat[which & 1];
  return a->plan ? a->rc : TS_OK;
}

int ts__dist_dev_zero_move(ts_dist *d, int to_host) {
  struct ts__dist_dev *g = G(d);
  struct ts__zero *z = ts__zof(d);
  if (!g || !z || !g->zwp) return TS_OK;
  size_t b = sizeof(float) * (z->R + z->P);
  return to_host ? ts__dev_copy(g->dev, z->wp, g->zwp, b, TS__D2H, NULL) : ts__dev_copy(g->dev, g->zwp, z->wp, b, TS__H2D, NULL);
}

void ts__dist_dev_zero_before(ts_dist *d, int64_t k) { G(d)->zacc = k > 0; }

int ts__dist_dev_zero_after(ts_dist *d, int64_t k) {
  struct ts__dist_dev *g = G(d);
  struct ts__zero *z = ts__zof(d);
  int rc = g->zrc ? g->zrc : ts__dist_dev_zero_gathered(d, 0);
  while (!rc && g->znext < g->nzord) rc = issue(d, g->znext++); /* those no node completed */
  if (!rc && g->zrg && z->R) /* the micro-steps' replicated gradients added up in the work buffer */
    rc = ts__gpu_axpby(g->dev, 1.0f, g->zrg, k ? 1.0f : 0.0f, g->zwg, (int64_t)z->R, NULL);
  return rc;
}

/* stage 2: the buckets in the order they complete, the hook on the training plan */
static int stage_order(ts_dist *d, struct ts__zero *z) {
  struct ts__dist_dev *g = G(d);
  ts_plan **plans; /* one, or a pipeline's instances of its one piece (one graph: the buckets' nodes) */
  int np = ts__dist_train_plans(d, &plans);
  if (np < 1 || plans[0] != d->r.plan || (d->vt == &ts__dist_pipeline && d->cfg.virtual_stages > 1))
    return ts_error_set(TS_ECONFIG, "device_target GPU: parallel.optimizer_shard %d: the training plans are not one "
                        "piece's (docs/gpu.md)", d->cfg.optimizer_shard);
  if (!(g->zord = calloc((size_t)z->nb + 1, sizeof *g->zord))) return ts_error_set(TS_ENOMEM, "GPU: out of memory");
  for (int k = 0; k < z->nb; k++) {
    const zgroup *G = &z->g[z->pt[k].grp];
    g->zord[k].k = k;
    ts__buckets_slot_of(G->bk, k - G->first, &g->zord[k].last);
  }
  g->nzord = z->nb;
  qsort(g->zord, (size_t)g->nzord, sizeof *g->zord, by_last);
  int rc = TS_OK;
  if (z->stage3) { /* the gathers: the device's hooks instead of the host's (before the buckets' on the plan) */
    ts__gather_detach(z->gt);
    ts_plan *pl[2] = {d->r.plan, d->r.plan_e};
    for (int k = 0; k < 2 && !rc; k++) {
      g->zgat[k] = (struct ts__zgat){d, pl[k], 0, TS_OK};
      if (pl[k]) rc = ts_plan_add_hook(pl[k], gather_hook, &g->zgat[k]);
    }
  }
  for (int q = 0; q < np && !rc; q++) rc = ts_plan_add_hook(plans[q], zero_hook, d);
  return rc;
}

int ts__dist_dev_zero_bind(ts_dist *d) {
  struct ts__dist_dev *g = G(d);
  struct ts__zero *z = ts__zof(d);
  if (!d->world || !z) return TS_OK;
  if (z->low != TS_F32)
    return ts_error_set(TS_ECONFIG, "device_target GPU: parallel.optimizer_shard with 16-bit working weights "
                        "(parallel.optimizer_shard_weights under amp O2/O3) does not run on GPUs yet; set "
                        "parallel.optimizer_shard_weights: f32 (docs/gpu.md)");
  if (!z->staged && !z->inplace)
    return ts_error_set(TS_ECONFIG, "device_target GPU: parallel.optimizer_shard %d does not run on GPUs yet (docs/gpu.md)",
                        d->cfg.optimizer_shard);
  int rc = TS_OK;
  g->zgrp = malloc(sizeof(int) * (size_t)(3 * z->ng + 1));
  if (!g->zgrp) return ts_error_set(TS_ENOMEM, "GPU: out of memory (optimizer shards)");
  /* each group's device collectives (each collective over its ranks; the groups, and in each the
   * shard group, the cross one and the whole, in the same order on every rank) */
  for (int k = 0; k < z->ng && !rc; k++) {
    const int b = d->cfg.comm_backend;
    g->zgrp[3 * k + 1] = -1;
    rc = ts__dist_dev_group(g, z->g[k].scomm, 0, NULL, b, &g->zgrp[3 * k]);
    if (!rc && z->g[k].X > 1) rc = ts__dist_dev_group(g, z->g[k].xcomm, 0, NULL, b, &g->zgrp[3 * k + 1]);
    if (!rc) rc = ts__dist_dev_group(g, z->g[k].comm, 0, NULL, b, &g->zgrp[3 * k + 2]);
  }
  size_t most = 1;
  for (int k = 0; k < z->nb; k++) { /* a bucket padded to its group's N equal parts, and one part */
    size_t c = z->pt[k].counts[0], n = c * (size_t)z->g[z->pt[k].grp].N + c;
    most = n > most ? n : most;
  }
  if (!rc) rc = ts__dist_dev_alloc0(g->dev, sizeof(float) * most, (void **)&g->zpad);
  if (!rc && !z->staged) rc = ts__dist_dev_alloc0(g->dev, sizeof(float) * (z->R + 1), (void **)&g->zwg);
  size_t nres = (size_t)z->nb + (size_t)z->nrep + 1;
  if (!rc) rc = ts__dist_dev_alloc0(g->dev, sizeof(float) * nres, (void **)&g->zres);
  if (!rc) rc = ts__dev_host_alloc(g->dev, sizeof(float) * nres, (void **)&g->zres_h);
  if (!rc && z->staged) rc = stage_order(d, z);
  return rc ? ts_error_wrap(rc, "parallel.optimizer_shard on the GPUs") : TS_OK;
}

void ts__dist_dev_zero_free(struct ts__dist_dev *g) {
  ts__dev_free(g->dev, g->zwg), ts__dev_free(g->dev, g->zpad), ts__dev_free(g->dev, g->zres);
  ts__dev_free(g->dev, g->zrg), ts__dev_free(g->dev, g->zwp);
  for (int k = 0; k < g->nzslot; k++) ts__dev_free(g->dev, g->zslot[k]);
  for (int k = 0; k < g->nzgslot; k++) ts__dev_free(g->dev, g->zgslot[k]);
  free(g->zgslot);
  g->zgslot = NULL, g->zwp = NULL, g->nzgslot = 0;
  ts__dev_host_free(g->dev, g->zres_h);
  free(g->zgrp), free(g->zslot), free(g->zslot0), free(g->zord), free(g->mir);
  g->zgrp = NULL, g->zslot = NULL, g->zslot0 = NULL, g->zord = NULL, g->mir = NULL;
  g->nzslot = g->nzord = g->nmir = 0;
}

/* every group's queued work finished within parallel.comm_timeout (NCCL's polled) */
static int wait_groups(struct ts__dist_dev *g, const struct ts__zero *z, const char *what) {
  int rc = TS_OK;
  for (int k = 0; k < z->ng && !rc; k++) {
    rc = ts__dcoll_wait(zx(g, k), NULL, ts_comm_get_timeout(), what);
    if (!rc && zxx(g, k)) rc = ts__dcoll_wait(zxx(g, k), NULL, ts_comm_get_timeout(), what);
    if (!rc && zxr(g, k) != zx(g, k)) rc = ts__dcoll_wait(zxr(g, k), NULL, ts_comm_get_timeout(), what);
  }
  return rc;
}

int ts__dist_dev_zero_reduce(ts_dist *d, float *gd) {
  struct ts__dist_dev *g = G(d);
  struct ts__zero *z = ts__zof(d);
  ts_reduce_op op = d->sync.mean ? TS_REDUCE_MEAN : TS_REDUCE_SUM;
  int rc = TS_OK;
  for (int k = 0; k < z->nb && !rc && !z->staged; k++) { /* the bucket padded with zeros to N parts of c, scattered */
    const part *q = &z->pt[k];
    size_t c = q->counts[0], N = (size_t)z->g[q->grp].N;
    rc = ts__dev_copy(g->dev, g->zpad, gd + q->flat, sizeof(float) * q->len, TS__D2D, NULL);
    if (!rc && N * c > q->len) rc = ts__dev_memset0(g->dev, g->zpad + q->len, sizeof(float) * (N * c - q->len), NULL);
    if (!rc) rc = ts__dcoll_reduce_scatter(zx(g, q->grp), g->zpad, g->zpad + N * c, c, TS_F32, op, NULL);
    if (!rc && q->n) rc = ts__dev_copy(g->dev, gd + q->flat + q->lo, g->zpad + N * c, sizeof(float) * q->n, TS__D2D, NULL);
  }
  if (rc) return ts_error_wrap(rc, "parallel.optimizer_shard: reduce-scatter of the sharded gradients");
  for (int k = 0; k < z->nrep && !rc && !z->staged; k++) /* packed as the CPU's work buffer (staged: bound there) */
    rc = ts__dev_copy(g->dev, g->zwg + z->rep[k].packed, gd + z->rep[k].flat, sizeof(float) * z->rep[k].n, TS__D2D, NULL);
  for (int k = 0; k < z->ng && !rc; k++) /* optimizer_shard_group: the reduced parts across the shard groups */
    for (int b = z->g[k].first; zxx(g, k) && b < z->g[k].first + z->g[k].nb && !rc; b++)
      if (z->pt[b].n) rc = ts__dcoll_allreduce(zxx(g, k), part_dev(g, z, gd, b), part_dev(g, z, gd, b), z->pt[b].n, TS_F32, op, NULL);
  for (int k = 0; k < z->ng && !rc; k++)
    if (z->g[k].rn) rc = ts__dcoll_allreduce(zxr(g, k), g->zwg + z->g[k].rlo, g->zwg + z->g[k].rlo, z->g[k].rn, TS_F32, op, NULL);
  if (!rc) rc = wait_groups(g, z, "reduction of the sharded gradients");
  return rc ? ts_error_wrap(rc, "parallel.optimizer_shard: the gradients over the groups") : TS_OK;
}

int ts__dist_dev_zero_clip(ts_dist *d, float *gd, ts__clip *c) {
  struct ts__dist_dev *g = G(d);
  struct ts__zero *z = ts__zof(d);
  int rc = TS_OK;
  for (int k = 0; k < z->nb && !rc; k++)
    if (z->pt[k].n)
      rc = ts__gpu_sum(g->dev, 1, part_dev(g, z, gd, k), (int64_t)z->pt[k].n, g->scratch, g->zres + k, NULL);
    else rc = ts__dev_memset0(g->dev, g->zres + k, sizeof(float), NULL);
  for (int k = 0; k < z->nrep && !rc; k++)
    rc = ts__gpu_sum(g->dev, 1, g->zwg + z->rep[k].packed, (int64_t)z->rep[k].n, g->scratch, g->zres + z->nb + k, NULL);
  size_t nres = (size_t)z->nb + (size_t)z->nrep;
  if (!rc && nres) rc = ts__dev_copy(g->dev, g->zres_h, g->zres, sizeof(float) * nres, TS__D2H, NULL);
  if (!rc) rc = ts__dev_sync(g->dev);
  if (rc) return rc;
  /* as zero_clip_parts: squares unscaled before each narrowing */
  double is2 = (double)c->inv_scale * c->inv_scale, ps = 0, rep = 0;
  /* each part counted once over the job: 1 / the shard groups holding it (optimizer_shard_group) */
  for (int k = 0; k < z->nb; k++) ps += (double)g->zres_h[k] * z->pt[k].cw / z->g[z->pt[k].grp].X;
  float sq = (float)(ps * is2);
  if (z->plain) { /* every replicated parameter on every rank, reduced already: counted once, locally */
    for (int k = 0; k < z->nrep; k++) rep += (double)g->zres_h[z->nb + k];
    rep *= is2;
  } else {
    double s = sq;
    for (int k = 0; k < z->nrep; k++) s += (double)g->zres_h[z->nb + k] * z->rep[k].cw * is2;
    sq = (float)s;
  }
  rc = ts_comm_allreduce(d->world, &sq, &sq, 1, TS_F32, TS_REDUCE_SUM);
  if (rc) return ts_error_wrap(rc, "gradient clipping: the global norm over the optimizer shards");
  float f = ts__dist_clip_factor((float)((double)sq + rep), c);
  if (c->overflow || f == 1.0f) return TS_OK;
  if (z->R) rc = ts__gpu_scale(g->dev, TS_F32, g->zwg, g->zwg, (int64_t)z->R, f, 0.0f, NULL);
  for (int k = 0; k < z->nb && !rc; k++)
    if (z->pt[k].n) {
      float *p = part_dev(g, z, gd, k);
      rc = ts__gpu_scale(g->dev, TS_F32, p, p, (int64_t)z->pt[k].n, f, 0.0f, NULL);
    }
  return rc;
}

/* Where work offset w lives: its parameters' store offset (*flat) and its reduced gradient's
 * device address (*gr); TS_EINVAL when no replicated piece or part holds it. */
static int locate(struct ts__dist_dev *g, const struct ts__zero *z, const float *gd, size_t w, size_t *flat,
                  const float **gr) {
  for (int k = 0; k < z->nrep; k++)
    if (w >= z->rep[k].packed && w < z->rep[k].packed + z->rep[k].n) {
      *flat = z->rep[k].flat + (w - z->rep[k].packed);
      *gr = g->zwg + w;
      return TS_OK;
    }
  for (int k = 0; k < z->nb; k++)
    if (w >= z->pt[k].work && w < z->pt[k].work + z->pt[k].n) {
      *flat = z->pt[k].flat + z->pt[k].lo + (w - z->pt[k].work);
      *gr = part_dev(g, z, gd, k) + (w - z->pt[k].work);
      return TS_OK;
    }
  return TS_EINVAL;
}

int ts__dist_dev_zero_step(ts_dist *d, ts_optim *o, const float *gd, float lr) {
  struct ts__dist_dev *g = G(d);
  struct ts__zero *z = ts__zof(d);
  float *params = (float *)g->dbase[0];
  int rc = TS_OK, ns = ts_optim_num_segments(o);
  for (int ph = g->lamb_all ? 1 : 0; ph <= (g->lamb_all ? 2 : 0) && !rc; ph++) { /* (LAMB: its norms over the parts) */
    g->lamb_phase = ph;
    for (int s = 0; s < ns && !rc; s++) { /* the rank's segments where they live */
      const ts_optim_segment *sg = ts_optim_segment_at(o, s);
      size_t flat = 0;
      const float *gr = NULL;
      if (locate(g, z, gd, sg->offset, &flat, &gr))
        return ts_error_set(TS_EINVAL, "parallel.optimizer_shard: optimizer segment '%s' (at %zu) is in no part of "
                            "this rank", sg->name, sg->offset);
      float *pw = z->stage3 ? g->zwp + sg->offset : params + flat; /* stage 3: the work layout is the parameters' */
      rc = ts__dist_dev_update(d, o, pw, gr, sg->offset, (int64_t)sg->numel, sg, s, lr);
    }
    if (!rc && ph == 1) rc = ts__dist_dev_lamb_reduce(d, o, ns);
  }
  if (z->stage3) return rc; /* gathered before use, not after the update */
  /* every bucket all-gathered in place: the rank's part padded to c, the N parts gathered */
  for (int k = 0; k < z->nb && !rc; k++) {
    const part *q = &z->pt[k];
    size_t c = q->counts[0], N = (size_t)z->g[q->grp].N;
    float *mine = g->zpad + N * c;
    if (q->n) rc = ts__dev_copy(g->dev, mine, params + q->flat + q->lo, sizeof(float) * q->n, TS__D2D, NULL);
    if (!rc && q->n < c) rc = ts__dev_memset0(g->dev, mine + q->n, sizeof(float) * (c - q->n), NULL);
    if (!rc) rc = ts__dcoll_allgather(zx(g, q->grp), mine, g->zpad, c, TS_F32, NULL);
    if (!rc) rc = ts__dev_copy(g->dev, params + q->flat, g->zpad, sizeof(float) * q->len, TS__D2D, NULL);
  }
  if (!rc) rc = wait_groups(g, z, "all-gather of the updated parameters");
  return rc ? ts_error_wrap(rc, "parallel.optimizer_shard: the update and the all-gather of the parameters") : TS_OK;
}
