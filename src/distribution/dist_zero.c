/* Optimizer-state sharding (MindSpore's enable_parallel_optimizer, DeepSpeed ZeRO stages 1-3),
 * parallel.optimizer_shard; see docs/memory.md. Under data_parallel, semi_auto_parallel and
 * pipeline stages (stage 3 under data_parallel only).
 *
 * Groups. The base ranks are the job's (data_parallel, semi_auto_parallel) or a pipeline stage's
 * (its data-parallel replicas, or its semi_auto ranks). The trainable parameters of the rank's
 * store are grouped by the partition of the base ranks into those holding the same slice
 * (ts_params_rank_partition, the gradient reducer's groups): a group is the data-parallel repeat
 * of its parameters' slices, and has a communicator (the base one when every rank holds the same
 * slice: data_parallel's one group). A parameter every base rank holds a different slice of (no
 * repeat) is in no group: the rank updates its own slice, nothing is reduced.
 *
 * Layout. In each group, the parameters of at least parallel.optimizer_shard_threshold_kb (f32
 * bytes) are SHARDED, the others REPLICATED (and, under a pipeline, the parameters several stages
 * hold: their gradients are summed over the pipeline after the reduction). A group's sharded
 * parameters are grouped into gradient buckets (buckets.c, parallel.bucket_size_mb: contiguous
 * ranges of the flat buffer, never spanning another parameter), each bucket cut into the group's
 * N parts of ceil(len / N) elements: the rank owns its place's part of every bucket of its groups
 * (a parameter may straddle two ranks, each then holds a segment of it). The rank's optimizer
 * state is laid out as a work buffer of R + P elements, [replicated, group after group, then the
 * unreduced][its parts, group after group, bucket after bucket], so it is (R + P) per slot instead
 * of the store's; the parameters and gradients it updates stay where they live
 * (ts_optim_step_segments): the store's parameters (stage 3: wp, the rank's only copy), the
 * reduced replicated gradients packed in wg, the reduced parts in place in the gradient buffer
 * (stage 1) or in wg after the replicated ones (stages 2 and 3, whose store has no gradients).
 * So the model states per rank are DeepSpeed's: stage 1 4 + 4 + 8/N bytes per parameter (Adam),
 * stage 2 4 + (4 + 8)/N plus the staging slots, stage 3 16/N plus the gather and staging slots.
 *
 * A step. Each bucket is reduce-scattered over its group as soon as backward has written its
 * gradients (the plan hook; after backward when overlap is off, with accumulation or under a
 * pipeline): stage 1 in place (the rank's reduced part at its own place in the gradient buffer,
 * the rest of the bucket left undefined), stages 2 and 3 from the bucket's staging slot into wg;
 * ts_dist_step_end waits for them and all-reduces each group's packed replicated gradients;
 * clipping sums the squares of the rank's parts and of the replicated ones (each weighted by its
 * count over the ranks) over the job; ts_dist_optim_step steps the optimizer on the rank's
 * segments where they live and all-gathers every bucket's parts over its group in place.
 * Communication per step: a reduce-scatter and an all-gather of each group's S (the volume of the
 * all-reduce they replace) plus an all-reduce of its R.
 *
 * Stage 2 (optimizer_shard = 2) keeps gradients only for the rank's part (stage_grads): the store
 * has no gradient buffer; every sharded gradient value of the training plans is bound into its
 * bucket's staging slot (buckets.c, two slots reused in rotation, assigned from the graph), and
 * the hook reduce-scatters each bucket from its slot as soon as it is complete (blocking with
 * overlap off; also during a pipeline's backwards), waiting before a bucket's first writer for
 * its slot's previous reduce-scatter; the replicated gradients are written into the work buffer.
 * With accumulation each micro-step's reduced parts are added to the rank's parts as they
 * complete and the replicated ones are added up from a buffer of R (ts_dist_accumulate), so no
 * whole-model gradient or accumulation buffer exists.
 *
 * Stage 3 (optimizer_shard = 3, ZeRO-3; data_parallel: one group, every rank) shards the
 * parameters too: the store holds no parameters (ts_params_alloc_external); the work buffer's
 * R + P floats ARE the rank's parameters (the replicated ones and its part of every bucket,
 * initialised from the counter-based RNG at their global positions), and the optimizer updates
 * them in place, with no all-gather after the step. The units gathered for the plans are the
 * gradient buckets (gather.c): the training and evaluation plans' parameter values are bound into
 * gather slots, and a plan hook all-gathers each bucket's parts into its slot before the nodes
 * that read it, in forward and again in backward order, the next one prefetched. Gradients and
 * accumulation as stage 2 (staged).
 *
 * Hybrid sharding (parallel.optimizer_shard_group G, FSDP's HYBRID_SHARD): each group's n ranks are
 * cut into n / G shard groups of G consecutive ones (shard_groups): the buckets are cut into G
 * parts, reduce-scattered and all-gathered (stage 3: gathered) over the shard group (scomm), and
 * after the reduction each rank all-reduces its reduced parts over the ranks at its place in every
 * shard group (xcomm) before the update; the replicated parameters are all-reduced over the group
 * (comm). Clipping and LAMB weight the parts 1 / the number of shard groups; checkpoints gather
 * within the shard group. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "buckets.h"
#include "dist_impl.h"
#include "zero_impl.h"
#include "gather.h"
#include "graph/graph_ir.h"
#include "optim/optim_mixed.h"
#include "runtime/exec.h"


static void zero_hook(const ts_hook_info *e, void *user);




static int zero_num_buckets(const ts_dist *d) { return zof(d) ? zof(d)->nb : 0; }

static void zero_settle(struct ts__zero *z);

static void zero_free_state(struct ts__zero *z) {
  if (!z) return;
  zero_settle(z); /* nothing left in flight into the store */
  if (z->settle_p) ts__params_set_settle(z->settle_p, NULL, NULL);
  free(z->rd_start);
  free(z->rd);
  free(z->ag_order);
  free(z->agreq);
  for (int k = 0; z->agring && k < z->nb; k++) ts_comm_ring_req_free(z->agring[k]);
  free(z->agring);
  free(z->ag_t0);
  free(z->agdispl);
  ts__gather_free(z->gt);
  ts_comm_free(z->gcomm);
  free(z->rep_at);
  for (int k = 0; k < z->ng; k++) {
    ts__buckets_free(z->g[k].bk);
    ts_comm_free(z->g[k].rcomm);
    if (z->g[k].sowned) ts_comm_free(z->g[k].scomm);
    ts_comm_free(z->g[k].xcomm);
    if (z->g[k].owned) ts_comm_free(z->g[k].comm);
  }
  free(z->g);
  free(z->rep);
  free(z->pt);
  for (int k = 0; z->agname && k < z->nb; k++) {
    free(z->agname[k]);
    free(z->agargs[k]);
  }
  free(z->agname);
  free(z->agargs);
  for (int k = 0; k < z->nhooked; k++) ts_plan_remove_hook(z->hooked[k], zero_hook, z); /* the plans outlive it */
  free(z->hooked);
  free(z->displs);
  free(z->rg);
  free(z->wp);
  free(z->wg);
  free(z->sp);
  free(z->sg);
  ts__zero16_free(z);
  free(z);
}

int ts__reduce_scatter_ring(int mode, int hosts, double mpi_s, double ring_s) {
  if (mode != TS_REDUCE_SCATTER_AUTO) return mode == TS_REDUCE_SCATTER_RING;
  if (hosts < 2) return 0; /* one host: MPI's */
  return !(isfinite(mpi_s) && isfinite(ring_s) && ring_s >= mpi_s); /* measured: the faster; else the ring */
}

/* Under a pipeline, a parameter several stages hold (GPT's tied embedding) is sharded only over
 * data-parallel stages (every stage's replicas cut it alike: a bucket of its own, so the stages'
 * parts align and are summed over the pipeline after the reduction, zero_reduced_at); under
 * semi_auto stages it stays replicated. */
static int is_sharded(const ts_dist *d, ts_params *p, int i) {
  ts_shape s = ts_params_shape(p, i);
  double n = (double)ts_shape_numel(&s);
  if (ts__dist_tied(d, i) && !ts__dist_tied_shardable(d)) return 0;
  return n > 0 && n * sizeof(float) >= d->cfg.shard_threshold_kb * 1024.0;
}

/* parallel.reduce_scatter for group G's buckets (collective over its shard group): the ring where
 * forced; under auto where the shard group spans several hosts, the one the cluster description
 * (parallel.cluster) measured faster for a bucket of bucket_size_mb on this layout (tessera
 * calibrate), or without such figures the ring (OpenMPI's non-blocking reduce-scatter reduces the
 * whole bucket up a binomial tree and scatters it from one rank: on a link between hosts the
 * ring's (N-1)/N of it, sent once, is what it costs); MPI's on one host. */
static int choose_reduce_scatter(ts_dist *d, struct ts__zero *z, zgroup *G) {
  int mode = d->cfg.reduce_scatter, ring = mode == TS_REDUCE_SCATTER_RING, rc;
  char why[200] = "ring";
  if (!G->scomm || G->N < 2 || mode == TS_REDUCE_SCATTER_MPI) return TS_OK;
  if (mode == TS_REDUCE_SCATTER_AUTO) {
    ts_comm_topo *t = NULL;
    if ((rc = ts_comm_topo_create(G->scomm, &t))) return ts_error_wrap(rc, "parallel.reduce_scatter: learning the hosts");
    int hosts = ts_comm_topo_num_hosts(t), uniform = ts_comm_topo_uniform(t);
    ts_comm_topo_free(t);
    ring = ts__reduce_scatter_ring(mode, hosts, HUGE_VAL, HUGE_VAL);
    snprintf(why, sizeof why, "auto: the ranks span several hosts");
    double mpi = HUGE_VAL, rg = HUGE_VAL, mb = d->cfg.bucket_mb > 0 ? d->cfg.bucket_mb : TS_BUCKET_MB_DEFAULT;
    char cname[64] = "";
    const char *cl = d->cfg.cluster[0] ? d->cfg.cluster : "local";
    if (ring && uniform && d->cfg.reduce_scatter_price &&
        !d->cfg.reduce_scatter_price(cl, hosts, G->N / hosts, mb * 1048576.0, &mpi, &rg, cname, sizeof cname) &&
        isfinite(mpi) && isfinite(rg)) {
      ring = ts__reduce_scatter_ring(mode, hosts, mpi, rg);
      snprintf(why, sizeof why, "auto: a %.3g MiB bucket measured %.3g ms by the ring vs %.3g ms MPI's on cluster %s", mb,
               rg * 1e3, mpi * 1e3, cname);
      if (!ring && !z->note[0])
        snprintf(z->note, sizeof z->note, "optimizer_shard: %d buckets reduce-scattered by MPI's over %d ranks "
                 "(parallel.reduce_scatter %s)", G->nb, G->N, why);
    }
  }
  if (!ring) return TS_OK;
  if ((rc = ts_comm_dup(G->scomm, &G->rcomm))) return ts_error_wrap(rc, "parallel.reduce_scatter: the rings' communicator");
  ts__buckets_set_ring(G->bk, G->rcomm);
  if (!z->note[0]) /* the first group's (the start line) */
    snprintf(z->note, sizeof z->note, "optimizer_shard: %d buckets reduce-scattered by a ring over %d ranks "
             "(parallel.reduce_scatter %s)", G->nb, G->N, why);
  return TS_OK;
}

/* Group k's buckets and this rank's part of each (in dry runs too: buckets without a
 * communicator). */
static int plan_parts(ts_dist *d, struct ts__zero *z, int k, const int *member) {
  zgroup *G = &z->g[k];
  /* mixed precision: the gradients are 16-bit already (ts__buckets_set_low later, no wire slots) */
  ts_dtype wire = z->low != TS_F32 ? z->low : d->cfg.wire;
  int rc = ts__buckets_create_split(G->scomm, d->r.params, d->r.g,
                                    d->cfg.bucket_mb > 0 ? d->cfg.bucket_mb : TS_BUCKET_MB_DEFAULT, d->sync.mean, wire,
                                    member, d->cfg.fusion_splits, d->cfg.nfusion_splits, &G->bk);
  if (!rc) rc = ts__buckets_scatter(G->bk, G->N, G->rank, &G->P);
  size_t wn = 0; /* parallel.comm_dtype bf16/f16: the buckets travel in 16 bits through the wire slots */
  if (!rc && z->low == TS_F32) rc = ts__buckets_set_wire_slots(G->bk, ts__dist_sizing(d), &wn);
  if (rc) return rc;
  z->wire_numel += wn;
  G->nb = ts__buckets_num_buckets(G->bk);
  if ((rc = choose_reduce_scatter(d, z, G))) return rc;
  G->first = z->nb;
  G->out = z->P;
  part *np = realloc(z->pt, sizeof *z->pt * ((size_t)z->nb + (size_t)G->nb + 1));
  if (!np) return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard: out of memory");
  z->pt = np;
  for (int b = 0; b < G->nb; b++) {
    part *q = &z->pt[z->nb + b];
    size_t out_off;
    memset(q, 0, sizeof *q);
    ts__buckets_part(G->bk, b, &q->flat, &q->len, &q->counts, &out_off);
    for (int r = 0; r < G->rank; r++) q->lo += q->counts[r];
    q->n = q->counts[G->rank];
    q->work = z->R + G->out + out_off;
    q->grp = k;
    q->cw = 1;
    if (ts__dist_stages(d) > 1) /* a tied parameter is a bucket of its own: counted by one stage only */
      for (int i = 0; i < ts_params_count(d->r.params); i++)
        if (!(ts_params_flags(d->r.params, i) & TS_PARAM_STATE) && ts_params_offset(d->r.params, i) == q->flat &&
            ts__dist_tied(d, i))
          q->cw = ts__dist_norm_weight(d, i) > 0 ? 1.0f : 0.0f;
  }
  z->nb += G->nb;
  z->P += G->P;
  return TS_OK;
}

/* ---- stage 3: the parameters sharded ---- */

typedef struct {
  struct ts__zero *z;
  const ts_graph *g;
  ts_plan *plan;
  ts_params *p;
} binder;

/* A value of the plan's graph into its memory: parameters into wp (replicated) or their unit's
 * gather slot; states where the store has them; gradients are left as stage_grads bound them
 * (the store has no gradient buffer). */
static int bind3(ts_val v, void *data, void *user) {
  binder *b = user;
  ts_val_kind kind = ts_val_kind_of(b->g, v);
  if (kind != TS_VAL_PARAM && kind != TS_VAL_STATE) return TS_OK;
  int id = ts_val_param_id(b->g, v);
  if (id >= 0 && ts_val_kind_of(b->g, v) == TS_VAL_PARAM) {
    data = b->z->rep_at[id] != SIZE_MAX ? b->z->wp + b->z->rep_at[id] : ts__gather_addr(b->z->gt, id);
    if (!data)
      return ts_error_set(TS_EINVAL, "parallel.optimizer_shard 3: parameter '%s' is in no gather unit",
                          ts_params_name(b->p, id));
  }
  return ts_plan_bind(b->plan, v, data);
}

/* The rank's parameters initialised in wp from the counter-based RNG (the values the whole
 * model has at those positions), as ts_params_alloc would fill a whole store. */
/* z->rep_at: per parameter id, its offset in [0, R) if replicated, else SIZE_MAX. */
static int rep_offsets(ts_params *p, struct ts__zero *z) {
  int np = ts_params_count(p);
  if (z->rep_at) return TS_OK;
  if (!(z->rep_at = malloc(sizeof(size_t) * ((size_t)np + 1))))
    return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard: out of memory");
  for (int i = 0; i < np; i++) {
    z->rep_at[i] = SIZE_MAX;
    for (int k = 0; k < z->nrep && !(ts_params_flags(p, i) & TS_PARAM_STATE); k++)
      if (z->rep[k].flat == ts_params_offset(p, i)) z->rep_at[i] = z->rep[k].packed;
  }
  return TS_OK;
}

int ts__zero_init_shard(ts_dist *d, struct ts__zero *z) {
  ts_params *p = d->r.params;
  int np = ts_params_count(p), rc0 = rep_offsets(p, z);
  if (rc0) return rc0;
  for (int i = 0; i < np; i++) {
    if (ts_params_flags(p, i) & TS_PARAM_STATE) continue;
    ts_shape sh = ts_params_shape(p, i);
    size_t off = ts_params_offset(p, i), n = (size_t)ts_shape_numel(&sh);
    int rc = TS_OK;
    if (z->rep_at[i] != SIZE_MAX) rc = ts_params_fill(p, i, d->cfg.seed, 0, (int64_t)n, z->wp + z->rep_at[i]);
    for (int k = 0; k < z->nb && !rc && z->rep_at[i] == SIZE_MAX; k++) {
      const part *q = &z->pt[k];
      size_t lo = q->flat + q->lo, hi = lo + q->n, a = off > lo ? off : lo, b = off + n < hi ? off + n : hi;
      if (a < b) rc = ts_params_fill(p, i, d->cfg.seed, (int64_t)(a - off), (int64_t)(b - a), z->wp + q->work + (a - lo));
    }
    if (rc) return rc;
  }
  return TS_OK;
}

/* The gathers over the plans (the units are the buckets), and in a real job the rank's shard
 * initialised, every parameter value bound and the gather hooks on the plans. */
static int plan_stage3(ts_dist *d, struct ts__zero *z) {
  ts_dist_run *r = &d->r;
  ts_params *p = r->params;
  int rc = TS_OK;
  if (r->sliced)
    return ts_error_set(TS_ECONFIG, "parallel.optimizer_shard: 3 shards whole parameters; this model registers "
                        "slices of its own (ts_params_add_sharded)");
  z->stage3 = 1;
  /* the gathers are collective: every rank runs the evaluation plan on the same batches */
  r->eval_split = 0;
  ts__gather_unit *u = calloc((size_t)z->nb + 1, sizeof *u);
  if (!u) return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard: out of memory");
  if ((rc = rep_offsets(p, z))) {
    free(u);
    return rc;
  }
  for (int k = 0; k < z->nb; k++) u[k] = (ts__gather_unit){z->pt[k].flat, z->pt[k].len, z->pt[k].counts, z->pt[k].work};
  if (d->world) rc = ts_comm_dup(z->g[0].scomm, &z->gcomm); /* the shard group's ranks */
  if (!rc) rc = ts__gather_create(z->gcomm, z->g[0].N, p, u, z->nb, &z->gt);
  free(u);
  if (!rc && r->plan) rc = ts__gather_add_plan(z->gt, r->g, r->plan);
  if (!rc && r->plan_e) rc = ts__gather_add_plan(z->gt, r->ge, r->plan_e);
  if (!rc) rc = ts__gather_layout(z->gt);
  if (rc || !d->world) return rc;
  if (ts_params_data(p)) /* ts__dist_plans allocates it without them: wp is the only copy */
    return ts_error_set(TS_EINVAL, "parallel.optimizer_shard 3: the store was allocated with its parameters");
  if ((rc = ts__zero_init_shard(d, z))) return rc;
  binder bt = {z, r->g, r->plan, p}, be = {z, r->ge, r->plan_e, p};
  if ((rc = ts_params_each_binding(p, r->g, bind3, &bt)) || (rc = ts_params_each_binding(p, r->ge, bind3, &be)))
    return rc;
  return ts__gather_attach(z->gt, z->wp);
}

/* ---- stages 2 and 3: the gradients in the buckets' staging slots ---- */


/* Stages 2 and 3 (also in dry runs: the binding is what the plans' figures see): the store has no
 * gradient buffer (ts__dist_plans); each group's buckets get staging slots, and every gradient
 * value of the training plans is bound to its place in its bucket's slot, or, for the replicated
 * (and unreduced) parameters, in the work buffer (without accumulation: that is where their
 * reduced gradients go) or in rg (with accumulation: added up there micro-step by micro-step). */
static int stage_grads(ts_dist *d, struct ts__zero *z) { /* before anything plans the memory (stage 3's gathers) */
  ts_params *p = d->r.params;
  int acc = d->cfg.accum > 1, rc = TS_OK;
  if (ts_params_grads(p))
    return ts_error_set(TS_EINVAL, "parallel.optimizer_shard %d: the store was allocated with a gradient buffer",
                        d->cfg.optimizer_shard);
  for (int k = 0; k < z->ng && !rc; k++) {
    size_t n = 0;
    rc = ts__buckets_stage(z->g[k].bk, acc, ts__dist_sizing(d), &n);
    z->stage_numel += n;
  }
  if (rc) return ts_error_wrap(rc, "parallel.optimizer_shard %d: the gradient buckets' staging slots",
                               d->cfg.optimizer_shard);
  if (acc && !(z->rg = calloc(z->R + 1, sizeof(float))))
    return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard: out of memory");
  z->staged = 1;
  ts_plan **plans;
  int np = ts__dist_train_plans(d, &plans);
  for (int i = 0; i < ts_params_count(p) && !rc; i++) {
    ts_val gv = ts_params_grad_value(p, i);
    if ((ts_params_flags(p, i) & TS_PARAM_STATE) || gv == TS_NONE) continue;
    size_t off = ts_params_offset(p, i);
    float *at = NULL;
    for (int k = 0; k < z->nrep && !at; k++)
      if (z->rep[k].flat == off) at = (acc ? z->rg : z->wg) + z->rep[k].packed;
    for (int k = 0; k < z->ng && !at; k++) at = ts__buckets_grad_addr(z->g[k].bk, off);
    if (!at)
      return ts_error_set(TS_EINVAL, "parallel.optimizer_shard %d: the gradient of '%s' is in no bucket and not "
                          "replicated", d->cfg.optimizer_shard, ts_params_name(p, i));
    for (int q = 0; q < np && !rc; q++) rc = ts_plan_bind(plans[q], gv, at);
  }
  return rc;
}

/* The base ranks the groups partition: the job's, or a pipeline stage's (its replicas or its
 * semi_auto ranks); *n of them, this rank *r; NULL in dry runs. */
static ts_comm *base_ranks(ts_dist *d, int *n, int *r) {
  ts_comm *c = NULL;
  ts__dist_shard_base(d, &c, n, r); /* the layout's: the world, or a pipeline stage's ranks */
  return c;
}

/* Hybrid sharding (parallel.optimizer_shard_group G): the group's NF ranks cut into NF / G shard
 * groups of G consecutive ones (by their place in the group): the buckets are reduce-scattered and
 * all-gathered over the shard group, and the ranks at the same place of every shard group (strided)
 * all-reduce their reduced parts. Without it (or G = NF) the shard group is the group. */
static int shard_groups(ts_dist *d, struct ts__zero *z, zgroup *G) {
  int gs = d->cfg.shard_group;
  G->NF = G->N;
  G->X = 1;
  G->scomm = G->comm;
  if (gs <= 0 || gs == G->N) return TS_OK;
  if (G->N % gs)
    return ts_error_set(TS_ECONFIG, "parallel.optimizer_shard_group: %d does not divide the %d %s (shard groups of "
                        "G consecutive ranks; G must divide them, or 0 for the whole group)", gs, G->N,
                        z->plain ? "data-parallel ranks" : "ranks holding the same parameter slices");
  int sub = G->rank / gs, pos = G->rank % gs, rc = TS_OK;
  if (G->comm) {
    rc = ts_comm_split(G->comm, sub, pos, &G->scomm);
    G->sowned = !rc;
    if (!rc) rc = ts_comm_split(G->comm, pos, sub, &G->xcomm);
    if (rc) return ts_error_wrap(rc, "parallel.optimizer_shard_group: the shard groups of %d ranks", gs);
  }
  G->X = G->N / gs;
  G->N = gs;
  G->rank = pos;
  return TS_OK;
}

/* Every trainable parameter's group (by the partition of the base ranks into those holding the
 * same slice; -1: each rank its own slice), the groups' communicators, the replicated parameters
 * packed group after group, and each group's buckets. */
static int plan_groups(ts_dist *d, struct ts__zero *z, int *grp, int *member, int *part, int **partsp, int *hold,
                       int *sh) {
  int *parts = *partsp; /* z->gcap partitions of NB ranks, grown with the groups */
  ts_params *p = d->r.params;
  int np = ts_params_count(p), NB = z->N, rb = z->rank, rc = TS_OK;
  for (int i = 0; i < np; i++) {
    grp[i] = -2;
    if (ts_params_flags(p, i) & TS_PARAM_STATE) continue;
    int n = ts_params_rank_partition(p, i, NB, part);
    if (n < 0) return n;
    hold[i] = 0;
    for (int q = 0; q < NB; q++) hold[i] += part[q] == part[rb];
    if (n == NB && NB > 1) { /* no repeat: this rank alone updates its slice */
      grp[i] = -1;
      continue;
    }
    int k;
    for (k = 0; k < z->ng; k++)
      if (!memcmp(parts + (size_t)k * NB, part, sizeof(int) * (size_t)NB)) break;
    if (k == z->ng) {
      if (k == z->gcap) { /* the groups grow with the layout (any number) */
        int nc = z->gcap ? 2 * z->gcap : 8;
        zgroup *ng = realloc(z->g, sizeof *ng * (size_t)nc);
        if (ng) z->g = ng;
        int *np2 = ng ? realloc(parts, sizeof(int) * (size_t)NB * (size_t)nc + 1) : NULL;
        if (!np2) return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard: out of memory (%d groups)", nc);
        *partsp = parts = np2;
        memset(z->g + z->gcap, 0, sizeof *z->g * (size_t)(nc - z->gcap));
        z->gcap = nc;
      }
      memcpy(parts + (size_t)k * NB, part, sizeof(int) * (size_t)NB);
      z->ng++;
    }
    grp[i] = k;
  }
  /* communicators: split in the same order on every base rank (the same store on each) */
  for (int k = 0; k < z->ng && !rc; k++) {
    zgroup *G = &z->g[k];
    const int *pk = parts + (size_t)k * NB;
    int all = 1;
    for (int q = 0; q < NB; q++) {
      all &= pk[q] == pk[0];
      G->N += pk[q] == pk[rb];
      G->rank += q < rb && pk[q] == pk[rb];
    }
    if (all) G->comm = z->base;
    else if (z->base) {
      rc = ts_comm_split(z->base, pk[rb], rb, &G->comm);
      G->owned = !rc;
      if (rc) rc = ts_error_wrap(rc, "parallel.optimizer_shard: the group of ranks holding the same slices");
    }
    if (!rc) rc = shard_groups(d, z, G);
  }
  /* replicated (and unreduced) parameters, group after group, then those of no group */
  for (int k = 0; k <= z->ng && !rc; k++) {
    int kk = k < z->ng ? k : -1;
    size_t r0 = z->R;
    for (int i = 0; i < np; i++) {
      if (grp[i] != kk) continue;
      ts_shape s = ts_params_shape(p, i);
      size_t n = (size_t)ts_shape_numel(&s);
      if (kk >= 0 && (sh[i] = is_sharded(d, p, i))) {
        z->S += n;
        z->g[kk].S += n;
        continue;
      }
      float lw = 1.0f / (float)(hold[i] > 0 ? hold[i] : 1);
      float cw = ts__dist_stages(d) > 1 ? ts__dist_norm_weight(d, i) : lw;
      z->rep[z->nrep++] = (piece){ts_params_offset(p, i), n, z->R, kk, cw, lw};
      z->R += n;
    }
    if (kk >= 0) {
      z->g[kk].rlo = r0;
      z->g[kk].rn = z->R - r0;
    }
  }
  for (int k = 0; k < z->ng && !rc; k++) {
    for (int i = 0; i < np; i++) member[i] = grp[i] == k && sh[i] ? (ts__dist_tied(d, i) ? 2 : 1) : 0;
    rc = plan_parts(d, z, k, member);
  }
  return rc;
}

int ts__zero_plan(ts_dist *d) {
  if (zof(d)) return TS_OK;
  ts_params *p = d->r.params;
  if (!p) return ts_error_set(TS_EINVAL, "parallel.optimizer_shard: the model is not built");
  struct ts__zero *z = calloc(1, sizeof *z);
  int np = ts_params_count(p), NB = 1, rb = 0;
  ts_comm *B = base_ranks(d, &NB, &rb);
  int *grp = calloc((size_t)np + 1, sizeof(int)), *member = calloc((size_t)np + 1, sizeof(int));
  int *hold = calloc((size_t)np + 1, sizeof(int)), *sh = calloc((size_t)np + 1, sizeof(int));
  int *part = calloc((size_t)NB + 1, sizeof(int)), *parts = calloc(1, sizeof(int));
  int rc = TS_OK;
  if (!z || !grp || !member || !hold || !sh || !part || !parts || !(z->rep = calloc((size_t)np + 1, sizeof *z->rep)) ||
      !(z->displs = calloc((size_t)NB + 1, sizeof(size_t))))
    rc = ts_error_set(TS_ENOMEM, "parallel.optimizer_shard: out of memory");
  if (!rc) {
    z->N = NB;
    z->rank = rb;
    z->base = B;
    z->plain = ts__dist_stages(d) == 1 && !d->r.sliced;
    rc = ts__zero16_dtype(d, &z->low);
    if (!rc) rc = plan_groups(d, z, grp, member, part, &parts, hold, sh);
  }
  free(grp);
  free(member);
  free(hold);
  free(sh);
  free(part);
  free(parts);
  if (!rc) { /* stage 1 reduces the parts in place: wg holds the replicated gradients only */
    z->inplace = d->cfg.optimizer_shard == 1;
    int low = z->low != TS_F32, own = d->cfg.optimizer_shard >= 3 || low; /* wp: the rank's f32 parameters */
    z->wg = calloc((z->inplace || low ? z->R : z->R + z->P) + 1, sizeof(float)); /* low: the parts stay 16-bit */
    if (own) z->wp = calloc(z->R + z->P + 1, sizeof(float));
    if (!z->wg || (own && !z->wp))
      rc = ts_error_set(TS_ENOMEM, "parallel.optimizer_shard: out of memory (%zu elements)", z->R + z->P);
  }
  for (int k = 0; !rc && k < z->ng && z->low == TS_F32; k++) ts__buckets_set_out(z->g[k].bk, zero_out(z, k));
  if (!rc && z->low != TS_F32) {
    rc = ts__zero16_plan(d, z);
  } else if (!rc && d->cfg.optimizer_shard >= 3) {
    if (!z->plain || z->ng != 1 || z->N != d->r.size)
      rc = ts_error_set(TS_ECONFIG, "parallel.optimizer_shard: 3 (parameters sharded) is implemented for "
                        "parallel.mode data_parallel only");
    else rc = stage_grads(d, z);
    if (!rc) rc = plan_stage3(d, z);
  } else if (!rc && d->cfg.optimizer_shard == 2) {
    rc = stage_grads(d, z);
  }
  if (rc) {
    zero_free_state(z);
    return rc;
  }
  d->sync.priv = z;
  return TS_OK;
}

/* One prefetched all-gather complete: its span recorded, the request freed. */
static void ag_done(struct ts__zero *z, int k) {
  if (ts_prof_active(z->prof) && z->agname && z->agname[k]) {
    ts_prof_event e;
    memset(&e, 0, sizeof e);
    e.name = z->agname[k];
    e.cat = "allgather";
    e.args = z->agargs[k];
    e.t0 = z->ag_t0[k];
    e.t1 = ts_time_now();
    e.bytes = (int64_t)(z->pt[k].len * ts_dtype_size(z->low)); /* f32, or mixed precision's 16 bits */
    e.group = z->g[z->pt[k].grp].N;
    e.kind = TS_PROF_COLLECTIVE;
    e.coll = 1;
    e.track = (uint16_t)(1 + z->nb + k < 65536 ? 1 + z->nb + k : 0);
    ts_prof_record(z->prof, &e);
  }
  ts_comm_req_free(z->agreq[k]);
  z->agreq[k] = NULL;
  ts_comm_ring_req_free(z->agring[k]);
  z->agring[k] = NULL;
}

static void ag_fail(struct ts__zero *z) {
  if (!z->ag_err) {
    z->ag_err = TS_ECOMM;
    snprintf(z->ag_msg, sizeof z->ag_msg, "%s", ts_last_error());
  }
}

static void ag_wait(struct ts__zero *z, int k) {
  if (!z->agreq[k] && !z->agring[k]) return;
  double t0 = ts_time_now();
  if (z->agring[k] ? ts_comm_ring_wait(z->agring[k]) : ts_comm_wait(z->agreq[k])) ag_fail(z);
  z->ag_wait_s += ts_time_now() - t0;
  ag_done(z, k);
}

/* Every prefetched all-gather complete (the store's settle hook calls it too). */
static void zero_settle(struct ts__zero *z) {
  if (!z || !z->ag_pending) return;
  for (int j = 0; j < z->nb; j++) ag_wait(z, z->ag_order[j]);
  z->ag_pending = 0;
}

static void settle_cb(void *user) { zero_settle(user); }

static void zero_hook(const ts_hook_info *e, void *user) {
  struct ts__zero *z = user;
  if (z->ag_pending && e->g == z->pg && e->node >= 0 && e->node < z->pnodes) {
    if (e->event == TS_HOOK_NODE_BEGIN) /* the buckets this node is the first to read */
      for (int j = z->rd_start[e->node]; j < z->rd_start[e->node + 1]; j++) ag_wait(z, z->rd[j]);
    else if (e->event == TS_HOOK_NODE_END) { /* MPI progresses the rest only inside its calls */
      int left = 0;
      for (int j = 0; j < z->nb; j++) {
        int k = z->ag_order[j], done = 0;
        if (!z->agreq[k] && !z->agring[k]) continue;
        if (z->agring[k] ? ts_comm_ring_test(z->agring[k], &done) : ts_comm_test(z->agreq[k], &done)) ag_fail(z);
        if (done) ag_done(z, k);
        else left = 1;
      }
      z->ag_pending = left;
    }
  }
  for (int k = 0; z->rs_hook && k < z->ng; k++) ts__buckets_hook(e, z->g[k].bk);
}

/* Prefetch's schedule from the training plan: each bucket's first live reader (its inputs and
 * outputs, views followed to the parameter they show), the buckets in that order (never read:
 * last, waited for by zero_settle). */
static int plan_prefetch(ts_dist *d, struct ts__zero *z) {
  const ts_graph *g = d->r.g;
  ts_params *p = d->r.params;
  int nn = ts_graph_num_nodes(g), np = ts_params_count(p), rc = TS_OK;
  int *first = malloc(sizeof(int) * ((size_t)z->nb + 1)), *bof = malloc(sizeof(int) * ((size_t)np + 1));
  z->rd_start = calloc((size_t)nn + 2, sizeof(int));
  z->rd = malloc(sizeof(int) * ((size_t)z->nb + 1));
  z->ag_order = malloc(sizeof(int) * ((size_t)z->nb + 1));
  z->agreq = calloc((size_t)z->nb + 1, sizeof *z->agreq);
  z->agring = calloc((size_t)z->nb + 1, sizeof *z->agring);
  z->ag_t0 = calloc((size_t)z->nb + 1, sizeof(double));
  z->agdispl = malloc(sizeof(size_t) * ((size_t)z->nb * (size_t)z->N + 1));
  if (!first || !bof || !z->rd_start || !z->rd || !z->ag_order || !z->agreq || !z->agring || !z->ag_t0 || !z->agdispl) {
    free(first);
    free(bof);
    return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard: out of memory");
  }
  for (int i = 0; i < np; i++) { /* parameter -> its bucket */
    bof[i] = -1;
    if (ts_params_flags(p, i) & TS_PARAM_STATE) continue;
    size_t o = ts_params_offset(p, i);
    for (int k = 0; k < z->nb && bof[i] < 0; k++)
      if (o >= z->pt[k].flat && o < z->pt[k].flat + z->pt[k].len) bof[i] = k;
  }
  for (int k = 0; k < z->nb; k++) {
    first[k] = nn;
    const zgroup *G = &z->g[z->pt[k].grp];
    size_t o = 0;
    for (int r = 0; r < G->N; r++) {
      z->agdispl[(size_t)k * (size_t)z->N + (size_t)r] = o;
      o += z->pt[k].counts[r];
    }
  }
  for (int n = 0; n < nn && !rc; n++) {
    int live = ts_plan_node_live(d->r.plan, n);
    if (live < 0) rc = ts_error_wrap(live, "parallel.optimizer_shard: planning the prefetch");
    int nin = ts_graph_node_num_inputs(g, n), nout = ts_graph_node_num_outputs(g, n);
    for (int j = 0; live > 0 && j < nin + nout; j++) {
      int v = j < nin ? ts_graph_node_input(g, n, j) : ts_graph_node_output(g, n, j - nin);
      for (int a; (a = ts_graph_value_alias_of(g, v)) >= 0;) v = a;
      if (ts_graph_value_kind(g, v) != TS_VAL_PARAM) continue;
      int id = ts_graph_value_param_id(g, v), k = id >= 0 && id < np ? bof[id] : -1;
      if (k >= 0 && first[k] > n) first[k] = n;
    }
  }
  for (int k = 0; k < z->nb; k++) z->ag_order[k] = k;
  for (int a = 1; a < z->nb; a++) /* stable insertion sort by first reader (a few dozen buckets) */
    for (int b = a; b > 0 && first[z->ag_order[b - 1]] > first[z->ag_order[b]]; b--) {
      int t = z->ag_order[b];
      z->ag_order[b] = z->ag_order[b - 1];
      z->ag_order[b - 1] = t;
    }
  for (int k = 0; k < z->nb; k++)
    if (first[k] < nn) z->rd_start[first[k] + 1]++;
  for (int n = 0; n < nn; n++) z->rd_start[n + 1] += z->rd_start[n];
  int *fill = calloc((size_t)nn + 1, sizeof(int));
  if (!fill) rc = ts_error_set(TS_ENOMEM, "parallel.optimizer_shard: out of memory");
  for (int j = 0; !rc && j < z->nb; j++) {
    int k = z->ag_order[j];
    if (first[k] < nn) z->rd[z->rd_start[first[k]] + fill[first[k]]++] = k;
  }
  free(fill);
  free(first);
  free(bof);
  z->pg = g;
  z->pnodes = nn;
  return rc;
}

/* The reduce-scatter buckets attached to the training plans (the groups are the plan's: base is
 * not read). */
static int zero_start(ts_dist *d, ts_comm *base, int may_overlap) {
  (void)base;
  int rc = ts__zero_plan(d);
  if (rc || !d->world) return rc;
  struct ts__zero *z = zof(d);
  /* stage 1 reduces once per step (after the last micro-step with accumulation); stage 2 each
   * micro-step, so it overlaps with accumulation too; a pipeline (!may_overlap) reduces after its
   * schedule (stage 1) or, staged, as each bucket completes (staged_overlap) */
  d->sync.overlap = may_overlap && d->cfg.overlap && (d->cfg.accum == 1 || d->cfg.optimizer_shard >= 2);
  /* the all-gathers after the update prefetched into the next forward: data_parallel's one
   * training plan, stages 1 and 2 (stage 3 gathers before use) */
  if (!z->prefetch && may_overlap && d->cfg.overlap && z->plain && !z->stage3 && d->r.plan && d->r.g &&
      ts__dist_stages(d) == 1) {
    ts_plan **plans;
    if (ts__dist_train_plans(d, &plans) == 1 && plans[0] == d->r.plan) {
      if ((rc = plan_prefetch(d, z))) return rc;
      z->prefetch = 1;
    }
  }
  /* staged (stages 2 and 3) the hook runs whatever the overlap: the slots are reused within backward */
  z->rs_hook = d->sync.overlap || z->staged;
  if ((z->rs_hook || z->prefetch) && !z->attached) {
    ts_plan **plans;
    int np = ts__dist_train_plans(d, &plans);
    if (!(z->hooked = calloc((size_t)np + 1, sizeof *z->hooked)))
      return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard: out of memory");
    for (int q = 0; q < np && !rc; q++)
      if (!(rc = ts_plan_add_hook(plans[q], zero_hook, z))) z->hooked[z->nhooked++] = plans[q];
    z->attached = !rc;
  }
  return rc;
}

/* Staged: each bucket's reduce-scatter runs non-blocking behind the rest of backward (also in a
 * pipeline's backwards, which otherwise reduce after the schedule), or with parallel.overlap
 * false blocking as soon as the bucket is complete. */
static int staged_overlap(const ts_dist *d) { return d->cfg.overlap; }

/* Arms the overlapped reduce-scatter of a run writing its gradients into grads. */
static void zero_begin(ts_dist *d, float *grads) {
  struct ts__zero *z = zof(d);
  if (!z || !d->world || (!d->sync.overlap && !z->staged)) return;
  z->accumulated = 0;
  for (int k = 0; k < z->ng; k++) {
    if (z->low == TS_F32) ts__buckets_set_out(z->g[k].bk, zero_out(z, k)); /* micro-step 0 writes the parts */
    if (z->staged) ts__buckets_set_mode(z->g[k].bk, !staged_overlap(d), 0);
    ts__buckets_begin(z->g[k].bk, grads);
  }
}

/* The rank's optimizer over its work buffer: each segment the replicated parameter or the rank's
 * part of it. */
static int zero_optim_create(ts_dist *d, const ts_optim_config *cfg, const ts_optim_segment *segs, int nseg,
                             ts_optim **out) {
  *out = NULL;
  int rc = ts__zero_plan(d);
  if (rc) return rc;
  struct ts__zero *z = zof(d);
  ts_optim_segment *ws = calloc((size_t)nseg + 1, sizeof *ws);
  /* LAMB: each of the rank's segments is a whole replicated parameter (weight 1 / the base ranks
   * holding it) or the rank's part of one (weight 1); their norms are summed by parameter over
   * the base ranks (segment s of every base rank's store is the same parameter's slice) */
  int *glob = malloc(sizeof(int) * (size_t)(nseg + 1));
  float *wt = malloc(sizeof(float) * (size_t)(nseg + 1));
  if (!ws || !glob || !wt) {
    free(ws);
    free(glob);
    free(wt);
    return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard: out of memory");
  }
  int nw = 0;
  for (int s = 0; s < nseg && !rc; s++) {
    int found = 0;
    size_t so = segs[s].offset, se = so + segs[s].numel;
    for (int k = 0; k < z->nrep && !found; k++)
      if (z->rep[k].flat == so && z->rep[k].n == segs[s].numel) {
        found = 1;
        glob[nw] = s;
        wt[nw] = z->rep[k].lw;
        ws[nw++] = (ts_optim_segment){segs[s].name, z->rep[k].packed, segs[s].numel, segs[s].flags};
      }
    for (int k = 0; k < z->nb && !found; k++) {
      const part *q = &z->pt[k];
      if (so < q->flat || se > q->flat + q->len) continue;
      found = 1;
      size_t lo = q->flat + q->lo, hi = lo + q->n, a = so > lo ? so : lo, b = se < hi ? se : hi;
      if (a < b) {
        glob[nw] = s;
        wt[nw] = 1.0f / (float)z->g[q->grp].X; /* every shard group holds the part */
        ws[nw++] = (ts_optim_segment){segs[s].name, q->work + (a - lo), b - a, segs[s].flags};
      }
    }
    if (!found)
      rc = ts_error_set(TS_EINVAL, "parallel.optimizer_shard: optimizer segment '%s' is not one whole parameter",
                        segs[s].name);
  }
  if (!rc) rc = ts_optim_create(out, cfg, ws, nw);
  if (!rc && z->base && (rc = ts__lamb_install(d, *out, z->base, nseg, nw, glob, wt))) {
    ts_optim_free(*out);
    *out = NULL;
  }
  free(ws);
  free(glob);
  free(wt);
  return rc;
}

/* Stages 2 and 3 (staged): micro-step k's gradients were reduce-scattered bucket by bucket
 * during its backward (the hook; k > 0 added to the rank's parts as each completes): wait for
 * them; the replicated ones added up locally (all-reduced once, at the step's end); the next
 * micro-step's reduce-scatters armed, adding. */
static int zero_accumulate_staged(ts_dist *d, int64_t k) {
  struct ts__zero *z = zof(d);
  if (!d->world) return ts_error_set(TS_EINVAL, "parallel.optimizer_shard: reducing needs the job's ranks");
  if (!z->staged || !z->rg)
    return ts_error_set(TS_EINVAL, "parallel.optimizer_shard %d: accumulation without staged gradients",
                        d->cfg.optimizer_shard);
  int rc = TS_OK;
  for (int q = 0; q < z->ng && !rc; q++) rc = ts__buckets_finish(z->g[q].bk);
  if (rc) return ts_error_wrap(rc, "parallel.optimizer_shard: reduce-scatter of micro-step %lld's gradients",
                               (long long)k + 1);
  for (int q = 0; q < z->nrep; q++) {
    float *w = z->wg + z->rep[q].packed;
    const float *g = z->rg + z->rep[q].packed;
    if (k == 0) memcpy(w, g, z->rep[q].n * sizeof(float));
    else
      for (size_t i = 0; i < z->rep[q].n; i++) w[i] += g[i];
  }
  if (k + 1 < d->cfg.accum)
    for (int q = 0; q < z->ng; q++) { /* micro-step k + 1 adds its reduced parts */
      ts__buckets_set_mode(z->g[q].bk, !staged_overlap(d), 1);
      ts__buckets_begin(z->g[q].bk, NULL);
    }
  z->accumulated = 1;
  return TS_OK;
}

static int zero_reduce_parts(ts_dist *d, const float *g) {
  struct ts__zero *z = zof(d);
  ts_reduce_op op = d->sync.mean ? TS_REDUCE_MEAN : TS_REDUCE_SUM;
  int rc = z->gt ? ts__gather_status(z->gt) : TS_OK; /* a parameter gather of the step failed */
  if (rc) return rc;
  if (!z->accumulated) {
    for (int k = 0; k < z->ng && !rc; k++) {
      if (!d->sync.overlap && !z->staged) ts__buckets_begin(z->g[k].bk, (float *)g);
      rc = ts__buckets_finish(z->g[k].bk);
    }
    if (rc) return ts_error_wrap(rc, "parallel.optimizer_shard: reduce-scatter of the sharded gradients");
    /* staged: backward wrote the replicated gradients into the work buffer; mixed precision:
     * widened into it */
    if (z->low != TS_F32) ts__zero16_widen_rep(z);
    for (int k = 0; k < z->nrep && !z->staged && z->low == TS_F32; k++)
      memcpy(z->wg + z->rep[k].packed, g + z->rep[k].flat, z->rep[k].n * sizeof(float));
  }
  z->accumulated = 0;
  for (int k = 0; k < z->ng && !rc; k++) /* hybrid: the shard groups' reduced parts over the groups */
    if (z->g[k].X > 1 && z->g[k].P) {
      const zgroup *G = &z->g[k];
      if (!z->inplace) rc = ts_comm_allreduce(G->xcomm, z->wg + z->R + G->out, z->wg + z->R + G->out, G->P, TS_F32, op);
      for (int b = G->first; z->inplace && b < G->first + G->nb && !rc; b++) /* each part where it is */
        if (z->pt[b].n) rc = ts_comm_allreduce(G->xcomm, part_grad(z, g, b), part_grad(z, g, b), z->pt[b].n, TS_F32, op);
      if (rc) return ts_error_wrap(rc, "parallel.optimizer_shard_group: all-reduce of the reduced parts across the "
                                   "%d shard groups", z->g[k].X);
    }
  for (int k = 0; k < z->ng && !rc; k++)
    if (z->g[k].rn) rc = ts_comm_allreduce(z->g[k].comm, z->wg + z->g[k].rlo, z->wg + z->g[k].rlo, z->g[k].rn, TS_F32, op);
  return rc ? ts_error_wrap(rc, "parallel.optimizer_shard: all-reduce of the replicated gradients") : TS_OK;
}

static int zero_clip_parts(ts_dist *d, float *g, ts__clip *c) {
  struct ts__zero *z = zof(d);
  int hybrid = 0;
  for (int k = 0; k < z->ng; k++) hybrid |= z->g[k].X > 1;
  /* squares unscaled (x inv_scale^2) before each narrowing to f32: a large loss scale stays in range */
  double is2 = (double)c->inv_scale * c->inv_scale, ps = 0;
  if (z->low != TS_F32) ps = ts__zero16_part_squares(z); /* plain: no ties, no shard groups */
  else if (z->inplace)
    for (int k = 0; k < z->nb; k++) ps += ts_sum_squares(part_grad(z, g, k), z->pt[k].n);
  else ps = ts_sum_squares(z->wg + z->R, z->P);
  float sq = (float)(ps * is2);
  int tied = 0; /* a pipeline's tied parameter sharded: its parts counted by one stage */
  for (int k = 0; k < z->nb; k++) tied |= z->pt[k].cw != 1;
  if (tied) {
    double s = 0;
    for (int k = 0; k < z->nb; k++)
      s += ts_sum_squares(part_grad(z, g, k), z->pt[k].n) * z->pt[k].cw / z->g[z->pt[k].grp].X;
    sq = (float)(s * is2);
  } else if (hybrid) { /* every shard group holds every part: each counted once over the job */
    double s = 0;
    for (int k = 0; k < z->nb; k++) s += ts_sum_squares(part_grad(z, g, k), z->pt[k].n) / z->g[z->pt[k].grp].X;
    sq = (float)(s * is2);
  }
  double rep = 0;
  if (z->plain) { /* every replicated parameter on every rank: counted once, locally (reduced
                     already: the same on every rank) */
    rep = ts_sum_squares(z->wg, z->R) * is2;
  } else { /* each counted once over the job: weighted by its holders (and stages) */
    double s = sq;
    for (int k = 0; k < z->nrep; k++)
      s += ts_sum_squares(z->wg + z->rep[k].packed, z->rep[k].n) * z->rep[k].cw * is2;
    sq = (float)s;
  }
  /* the parts' squares summed over the ranks in one all-reduce: a rank's inf or NaN is every rank's */
  int rc = ts_comm_allreduce(d->world, &sq, &sq, 1, TS_F32, TS_REDUCE_SUM);
  if (rc) return ts_error_wrap(rc, "gradient clipping: the global norm over the optimizer shards");
  float f = ts__dist_clip_factor((float)((double)sq + rep), c);
  if (z->low != TS_F32) { /* applied as the update widens the 16-bit parts (and to the replicated ones) */
    z->gscale = f;
    return TS_OK;
  }
  if (f != 1.0f) {
    ts_scale_f32(z->wg, z->inplace ? z->R : z->R + z->P, f);
    for (int k = 0; z->inplace && k < z->nb; k++) ts_scale_f32(part_grad(z, g, k), z->pt[k].n, f);
  }
  return TS_OK;
}

/* Every bucket's parts, each rank's from send (at its part of the bucket, or at the work offset
 * when from_work), gathered over its group into dst (at the bucket's flat offset); elements of
 * dtype dt (mixed precision: the 16-bit weights). */
static int gather_parts(ts_dist *d, const void *send, int from_work, void *dst, ts_dtype dt, int record) {
  struct ts__zero *z = zof(d);
  record = record && ts_prof_active(z->prof);
  for (int k = 0; k < z->nb; k++) {
    double t0 = record ? ts_time_now() : 0;
    const part *q = &z->pt[k];
    const zgroup *G = &z->g[q->grp];
    size_t o = 0;
    for (int r = 0; r < G->N; r++) {
      z->displs[r] = o;
      o += q->counts[r];
    }
    size_t es = ts_dtype_size(dt);
    const char *sb = (const char *)send + es * (from_work ? q->work : q->flat + q->lo);
    int rc = ts_comm_allgatherv(G->scomm, sb, (char *)dst + es * q->flat, q->counts, z->displs, dt);
    if (rc) return rc;
    if (record) { /* the bucket's all-gather: a blocking call, its own span */
      ts_prof_event e;
      memset(&e, 0, sizeof e);
      e.name = z->agname[k];
      e.cat = "allgather";
      e.args = z->agargs[k];
      e.t0 = t0;
      e.t1 = ts_time_now();
      e.bytes = (int64_t)(q->len * es);
      e.group = G->N;
      e.kind = TS_PROF_COLLECTIVE;
      e.coll = 1;
      e.track = (uint16_t)(1 + z->nb + k < 65536 ? 1 + z->nb + k : 0);
      ts_prof_record(z->prof, &e);
    }
  }
  return TS_OK;
}

/* Profiling: the buckets' reduce-scatters (buckets.c, bucket k on track 1 + k) and their
 * all-gathers after the update (track 1 + nb + k). */
static int zero_set_prof(ts_dist *d, ts_prof *p) {
  struct ts__zero *z = zof(d);
  if (!z) return TS_OK;
  z->prof = NULL;
  for (int k = 0; k < z->ng; k++) {
    int rc = z->g[k].bk ? ts__buckets_set_prof(z->g[k].bk, p, z->g[k].first, 1 + z->g[k].first) : TS_OK;
    if (rc) return rc;
  }
  if (!p || !d->world || z->stage3) return TS_OK; /* stage 3 gathers parameters before use, not after */
  if (!z->agname && (!(z->agname = calloc((size_t)z->nb + 1, sizeof(char *))) ||
                     !(z->agargs = calloc((size_t)z->nb + 1, sizeof(char *)))))
    return ts_error_set(TS_ENOMEM, "log.profile: out of memory");
  for (int k = 0; k < z->nb; k++) {
    char nm[64], a[256];
    if (z->agname[k]) continue;
    snprintf(nm, sizeof nm, "allgather bucket %d", k);
    snprintf(a, sizeof a,
             "\"bucket\":%d,\"elements\":%zu,\"dtype\":\"%s\",\"ranks\":%d,\"call\":\"%s\",%s"
             "\"observed_at\":\"%s\"", k, z->pt[k].len, ts_dtype_name(z->low), z->g[z->pt[k].grp].N,
             z->prefetch ? "iallgatherv" : "allgatherv",
             z->prefetch ? "\"prefetched\":true," : "", z->prefetch ? "wait" : "blocking");
    if (!(z->agname[k] = strdup(nm)) || !(z->agargs[k] = strdup(a)))
      return ts_error_set(TS_ENOMEM, "log.profile: out of memory");
  }
  z->prof = p;
  return TS_OK;
}

/* Work-buffer offset w (of an optimizer segment) -> the store's flat offset *flat; returns the
 * part holding it (k >= 0), -1 for a replicated parameter, INT_MIN for none. Both lists are in
 * increasing work order. */
static int work_locate(const struct ts__zero *z, size_t w, size_t *flat) {
  *flat = 0;
  if (w < z->R) {
    int lo = 0, hi = z->nrep - 1;
    while (lo < hi) { /* the last piece starting at or before w */
      int m = (lo + hi + 1) / 2;
      if (z->rep[m].packed <= w) lo = m;
      else hi = m - 1;
    }
    if (z->nrep && w >= z->rep[lo].packed && w < z->rep[lo].packed + z->rep[lo].n) {
      *flat = z->rep[lo].flat + (w - z->rep[lo].packed);
      return -1;
    }
    return INT_MIN;
  }
  int lo = 0, hi = z->nb - 1;
  while (lo < hi) {
    int m = (lo + hi + 1) / 2;
    if (z->pt[m].work <= w) lo = m;
    else hi = m - 1;
  }
  if (!z->nb || w < z->pt[lo].work || w >= z->pt[lo].work + z->pt[lo].n) return INT_MIN;
  *flat = z->pt[lo].flat + z->pt[lo].lo + (w - z->pt[lo].work);
  return lo;
}

/* Mixed precision: the f32 masters the rank holds (the replicated ones packed, its part of each
 * bucket) rounded into the 16-bit weights at their places; the other ranks' places come by the
 * all-gather that follows. */
static int round_masters(struct ts__zero *z) {
  int rc = TS_OK;
  for (int k = 0; k < z->nrep && !rc; k++)
    rc = ts_convert(z->wp + z->rep[k].packed, TS_F32, z->w16 + z->rep[k].flat, z->low, z->rep[k].n);
  for (int k = 0; k < z->nb && !rc; k++)
    rc = ts_convert(z->wp + z->pt[k].work, TS_F32, z->w16 + z->pt[k].flat + z->pt[k].lo, z->low, z->pt[k].n);
  return rc;
}

/* The update of the rank's segments, then the all-gather of the updated parameters (stage 3: in
 * place, nothing gathered). */
static int zero_optim_step(ts_dist *d, ts_optim *opt, float *params, const float *grads, float lr) {
  struct ts__zero *z = zof(d);
  if (!z) return ts_optim_step(opt, params, grads, lr);
  if (!d->world) return ts_error_set(TS_EINVAL, "parallel.optimizer_shard: stepping needs the job's ranks");
  if (z->stage3) return ts_optim_step(opt, z->wp, z->wg, lr); /* in place; the next run gathers them */
  zero_settle(z); /* the last update's all-gathers (read by the forward already) */
  if (z->ag_err) return ts_error_set(z->ag_err, "parallel.optimizer_shard: all-gather of the updated parameters: %s",
                                     z->ag_msg);
  /* each segment (its state at its work offset) updated where its parameters and gradients are */
  int ns = ts_optim_num_segments(opt), rc = TS_OK;
  if (ns > z->nsp) {
    float **sp = realloc(z->sp, sizeof *sp * (size_t)ns);
    if (sp) z->sp = sp;
    const float **sg = sp ? realloc(z->sg, sizeof *sg * (size_t)ns) : NULL;
    if (!sg) return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard: out of memory (%d segments)", ns);
    z->sg = sg;
    z->nsp = ns;
  }
  int low = z->low != TS_F32;
  if (low && ns > 0 && (!(z->mg = realloc(z->mg, sizeof *z->mg * (size_t)ns)) ||
                        !(z->mdt = realloc(z->mdt, sizeof *z->mdt * (size_t)ns))))
    return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard: out of memory (%d segments)", ns);
  for (int s = 0; s < ns && !rc; s++) {
    size_t w = ts_optim_segment_at(opt, s)->offset, flat;
    int k = work_locate(z, w, &flat);
    if (k == INT_MIN) rc = ts_error_set(TS_EINVAL, "parallel.optimizer_shard: optimizer segment '%s' (at %zu) is in no "
                                         "part of this rank", ts_optim_segment_at(opt, s)->name, w);
    if (low) { /* the master weights in wp; the part's 16-bit gradients, or the replicated f32 ones */
      z->sp[s] = z->wp + w;
      z->mg[s] = k >= 0 ? (const void *)(ts__part16(z, k) + (w - z->pt[k].work)) : (const void *)(z->wg + w);
      z->mdt[s] = k >= 0 ? z->low : TS_F32;
      continue;
    }
    z->sp[s] = params + flat;
    z->sg[s] = k >= 0 ? part_grad(z, grads, k) + (w - z->pt[k].work) : z->wg + w;
  }
  if (!rc && low) rc = ts__optim_step_mixed(opt, z->sp, z->mg, z->mdt, z->gscale, lr);
  else if (!rc) rc = ts_optim_step_segments(opt, z->sp, z->sg, lr);
  if (rc) return rc;
  /* mixed precision: the masters' rounding into the 16-bit weights at the rank's places */
  if (low && (rc = round_masters(z))) return rc;
  ts_dtype dt = low ? z->low : TS_F32;
  char *base = low ? (char *)z->w16 : (char *)params; /* what is gathered, in place */
  size_t es = ts_dtype_size(dt);
  if (z->prefetch) { /* non-blocking, in the next forward's order; it waits for each before use */
    for (int j = 0; j < z->nb && !rc; j++) {
      int k = z->ag_order[j];
      const part *q = &z->pt[k];
      const zgroup *G = &z->g[q->grp];
      z->ag_t0[k] = ts_time_now(); /* also while the profiler is off: it may start before they complete */
      if (G->rcomm) /* the ring too (parallel.reduce_scatter): tags after the reduce-scatters' */
        rc = ts_comm_iallgatherv_ring(G->rcomm, NULL, base + es * q->flat, q->counts, z->agdispl + (size_t)k * (size_t)z->N,
                                      dt, G->nb + (k - G->first), &z->agring[k]);
      else
        rc = ts_comm_iallgatherv(G->scomm, base + es * (q->flat + q->lo), base + es * q->flat, q->counts,
                                 z->agdispl + (size_t)k * (size_t)z->N, dt, &z->agreq[k]);
    }
    z->ag_pending = 1;
    z->settle_p = d->r.params;
    ts__params_set_settle(d->r.params, settle_cb, z); /* any other reader of the store waits for them */
    if (rc) zero_settle(z);
    return rc ? ts_error_wrap(rc, "parallel.optimizer_shard: all-gather of the updated parameters") : TS_OK;
  }
  rc = gather_parts(d, base, 0, base, dt, 1); /* in place: each rank's part already sits there */
  return rc ? ts_error_wrap(rc, "parallel.optimizer_shard: all-gather of the updated parameters") : TS_OK;
}

/* One slot of the rank's optimizer (loc) <-> the same slot over the rank's store (whole: the
 * store's layout; gathering is collective over the groups). full, when not NULL, is checked to
 * have the store's layout. */
static int zero_move_slot(ts_dist *d, ts_params *full, float *loc, float *whole, int gather) {
  struct ts__zero *z = zof(d);
  ts_params *lp = d->r.params;
  for (int i = 0; full && i < ts_params_count(lp); i++)
    if (ts_params_offset(full, i) != ts_params_offset(lp, i))
      return ts_error_set(TS_EINVAL, "checkpoint: the whole store's layout differs from the rank's at '%s'",
                          ts_params_name(lp, i));
  if (gather) {
    if (!d->world) return ts_error_set(TS_EINVAL, "checkpoint: gathering optimizer shards needs the job's ranks");
    int rc = gather_parts(d, loc, 1, whole, TS_F32, 0);
    if (rc) return ts_error_wrap(rc, "checkpoint: gathering the optimizer state's shards");
    for (int k = 0; k < z->nrep; k++) memcpy(whole + z->rep[k].flat, loc + z->rep[k].packed, z->rep[k].n * sizeof(float));
    return TS_OK;
  }
  for (int k = 0; k < z->nb; k++)
    memcpy(loc + z->pt[k].work, whole + z->pt[k].flat + z->pt[k].lo, z->pt[k].n * sizeof(float));
  for (int k = 0; k < z->nrep; k++) memcpy(loc + z->rep[k].packed, whole + z->rep[k].flat, z->rep[k].n * sizeof(float));
  return TS_OK;
}

/* A parameter sharded in a bucket of its own (a pipeline's tied one): the rank's reduced part in
 * the work buffer, elements [*lo, *lo + *n) of it; a replicated one: its whole reduced gradient
 * there; NULL otherwise. */
static float *zero_reduced_at(ts_dist *d, float *g, size_t flat, size_t numel, size_t *lo, size_t *n) {
  struct ts__zero *z = zof(d);
  for (int k = 0; z && k < z->nb; k++)
    if (z->pt[k].flat == flat && z->pt[k].len == numel) { /* the parameter's own bucket */
      *lo = z->pt[k].lo;
      *n = z->pt[k].n;
      return part_grad(z, g, k);
    }
  for (int k = 0; z && k < z->nrep; k++)
    if (z->rep[k].flat == flat) return z->wg + z->rep[k].packed; /* [lo, n) stay the whole */
  return NULL;
}

static int zero_sharded(const ts_dist *d, size_t *replicated, size_t *sharded) {
  const struct ts__zero *z = zof(d);
  if (replicated) *replicated = z ? z->R : 0;
  if (sharded) *sharded = z ? z->S : 0;
  return z != NULL;
}

/* Stage 3: the rank's parameters (the layout of an optimizer slot: replicated, then its parts);
 * NULL under other stages (the store holds them). */
static float *zero_held_params(ts_dist *d) {
  return zof(d) && (zof(d)->stage3 || zof(d)->low != TS_F32) ? zof(d)->wp : NULL;
}

/* Each replicated (or unreduced) parameter whole, then the rank's part of every bucket. */
static int zero_each_range(const ts_dist *d, int (*fn)(void *user, size_t flat, size_t n, size_t work), void *user) {
  const struct ts__zero *z = zof(d);
  int rc = TS_OK;
  for (int k = 0; z && k < z->nrep && !rc; k++) rc = fn(user, z->rep[k].flat, z->rep[k].n, z->rep[k].packed);
  for (int k = 0; z && k < z->nb && !rc; k++)
    if (z->pt[k].n) rc = fn(user, z->pt[k].flat + z->pt[k].lo, z->pt[k].n, z->pt[k].work);
  return rc;
}

/* Bytes of parameters the rank holds persistently: the store's (the whole model) without
 * sharding and under stages 1 and 2 (the optimizer updates the rank's part in it); under stage 3
 * its part and the replicated parameters plus the gather slots (no whole copy). Dry runs: the
 * job's. */
static size_t zero_param_bytes(const ts_dist *d) {
  const struct ts__zero *z = zof(d);
  size_t whole = ts_params_numel(d->r.params);
  if (z && z->low != TS_F32) /* mixed precision: the whole 16-bit copy and the rank's f32 masters */
    return whole * ts_dtype_size(z->low) + (z->R + z->P) * sizeof(float);
  if (!z || !z->stage3) return whole * sizeof(float);
  return (z->R + z->P + ts__gather_slot_numel(z->gt, NULL, NULL)) * sizeof(float);
}

/* Stages 2 and 3: seconds backward waited for a staging slot (its previous bucket's
 * reduce-scatter) since the last call; 0 otherwise. */
static double zero_take_slot_wait(ts_dist *d) {
  double t = 0;
  for (int k = 0; zof(d) && k < zof(d)->ng; k++) t += ts__buckets_take_claim_wait(zof(d)->g[k].bk);
  return t;
}

/* Stages 2 and 3: bytes of gradients the rank holds besides the optimizer's work buffer (whose
 * R + P floats take the reduced gradients): the buckets' staging slots (with accumulation, each
 * with room for a reduced part) and, with accumulation, the replicated gradients of a
 * micro-step (R). No whole-model gradient buffer exists. 0 under stage 1. */
static size_t zero_staged_grad_bytes(const ts_dist *d) {
  const struct ts__zero *z = zof(d);
  if (!z || !z->staged) return 0;
  if (z->low != TS_F32) return (z->stage_numel + z->P + z->R) * ts_dtype_size(z->low); /* slots, p16, r16 */
  return (z->stage_numel + (z->rg ? z->R : 0)) * sizeof(float);
}

/* Bytes one rank sends per optimizer step through the data-parallel gradient reduction and
 * parameter gathers, counted as ring algorithms send them ((N-1)/N of an all-gather's or a
 * reduce-scatter's elements, 2(N-1)/N of an all-reduce's): stages 1 and 2 the volume of the
 * all-reduce they replace; stage 3 the gathers of the training plan's runs instead of one
 * all-gather (about 1.5x). Before the sharding is planned: the all-reduce's figure. */
static int zero_comm_bytes(const ts_dist *d, double *bytes) {
  const struct ts__zero *z = zof(d);
  double f = (double)(d->r.size - 1) / (double)d->r.size, A = (double)d->cfg.accum;
  if (!z) return ts__sync_allreduce.comm_bytes(d, bytes);
  double rs = f * (double)z->S * (d->cfg.optimizer_shard >= 2 ? A : 1), ar = 2 * f * (double)z->R;
  double ag = z->stage3 ? A * f * (double)ts__gather_run_numel(z->gt, 0, NULL) : f * (double)z->S;
  int hybrid = 0;
  for (int k = 0; k < z->ng; k++) hybrid |= z->g[k].X > 1;
  if (hybrid) { /* per group: reduce-scatter and all-gather over its shard group, parts across them */
    double fa = z->stage3 ? A * (double)ts__gather_run_numel(z->gt, 0, NULL) / (double)(z->S ? z->S : 1) : 1;
    rs = ag = 0;
    for (int k = 0; k < z->ng; k++) {
      const zgroup *G = &z->g[k];
      double fs = (double)(G->N - 1) / (double)G->N, fx = (double)(G->X - 1) / (double)G->X;
      rs += fs * (double)G->S * (d->cfg.optimizer_shard >= 2 ? A : 1) + 2 * fx * (double)G->P;
      ag += fs * (double)G->S * fa;
    }
  }
  if (z->low != TS_F32) { /* mixed precision: the buckets reduce-scattered and all-gathered in 16 bits */
    *bytes = (rs + ag) * ts_dtype_size(z->low) + ar * sizeof(float);
    return TS_OK;
  }
  *bytes = rs * ts_dtype_size(d->cfg.wire) + (ar + ag) * sizeof(float); /* the reduce-scatters on the wire's dtype */
  return TS_OK;
}

/* The line(s) of `tessera plan` for the sharding. */
static void zero_describe(const ts_dist *d, FILE *out) {
  const struct ts__zero *z = zof(d);
  if (!z) return;
  int st = d->cfg.optimizer_shard;
  if (z->ng && z->g[0].X > 1 && z->plain) {
    fprintf(out, "optimizer state sharded over shard groups of %d consecutive ranks (optimizer_shard %d, "
            "optimizer_shard_group %d): %d shard groups among the %d ranks, each holding every part; %zu parameter "
            "elements reduce-scattered by gradient bucket within the shard group (%zu on this rank, all-reduced "
            "across the %d shard groups), %zu (parameters under %g KiB) replicated\n",
            z->g[0].N, st, z->g[0].N, z->g[0].X, d->r.size, z->S, z->P, z->g[0].X, z->R, d->cfg.shard_threshold_kb);
  } else if (z->plain) {
    fprintf(out, "optimizer state sharded over the %d ranks (optimizer_shard %d): %zu parameter elements "
            "reduce-scattered by gradient bucket (%zu on this rank), %zu (parameters under %g KiB) replicated\n",
            d->r.size, st, z->S, z->P, z->R, d->cfg.shard_threshold_kb);
  } else {
    size_t alone = 0;
    for (int k = 0; k < z->nrep; k++) alone += z->rep[k].grp < 0 ? z->rep[k].n : 0;
    fprintf(out, "optimizer state sharded over the data-parallel repeat of each parameter slice (optimizer_shard %d): "
            "%d group%s of ranks holding the same slices among %s%d ranks; this rank's optimizer covers %zu of its "
            "store's %zu trainable elements\n",
            st, z->ng, z->ng == 1 ? "" : "s", ts__dist_stages(d) > 1 ? "the stage's " : "the ", z->N, z->R + z->P,
            ts_params_numel(d->r.params));
    for (int k = 0; k < z->ng; k++) {
      fprintf(out, "  group %d: %d ranks, %zu elements reduce-scattered by gradient bucket (%zu on this rank), %zu "
              "replicated (parameters under %g KiB%s) all-reduced\n",
              k, z->g[k].NF, z->g[k].S, z->g[k].P, z->g[k].rn, d->cfg.shard_threshold_kb,
              ts__dist_stages(d) > 1 && !ts__dist_tied_shardable(d) ? ", or held by several stages" : "");
      if (z->g[k].X > 1)
        fprintf(out, "    in %d shard groups of %d ranks (optimizer_shard_group): parts all-reduced across them\n",
                z->g[k].X, z->g[k].N);
    }
    if (alone) fprintf(out, "  %zu elements of slices no other rank holds: updated by this rank alone\n", alone);
  }
  if (z->staged) {
    int nsl = 0;
    for (int k = 0; k < z->ng; k++) nsl += ts__buckets_num_slots(z->g[k].bk);
    fprintf(out, "gradients (optimizer_shard %d): no whole-model buffer; backward writes the %d buckets' gradients into "
            "%d staging slot%s (%zu %s%s), each bucket reduce-scattered from its slot as soon as it is complete; "
            "the replicated ones into the optimizer's work buffer%s\n",
            st, z->nb, nsl, nsl == 1 ? "" : "s", z->stage_numel, z->low != TS_F32 ? "16-bit elements" : "floats",
            z->rg ? ", with room for each slot's reduced part: micro-steps add them" : "",
            z->rg ? " (added up over the micro-steps from a buffer of their size)"
                  : z->low != TS_F32 ? " (16-bit, widened there after the reduction)" : "");
  }
  if (z->low != TS_F32) {
    size_t es = ts_dtype_size(z->low);
    fprintf(out, "mixed precision (parallel.optimizer_shard_weights): the plans' weights and gradients in %s (%zu elements "
            "each, no f32 copy of either); this rank's f32 master weights %zu elements (replicated + its parts); "
            "%s, then each bucket reduce-scattered and all-gathered in %s (%zu bytes an element)\n",
            ts_dtype_name(z->low), z->numel, z->R + z->P,
            z->staged ? "gradients in the 16-bit staging slots, the rank's reduced parts kept 16-bit"
                      : "gradients in one whole 16-bit buffer, the rank's parts reduced in place",
            ts_dtype_name(z->low), es);
  }
  if (z->wire_numel)
    fprintf(out, "gradients on the wire in %s (parallel.comm_dtype): each bucket rounded into one of %d wire slots (%zu "
            "elements) and reduce-scattered there, the rank's part widened to f32\n", ts_dtype_name(d->cfg.wire),
            TS__BUCKET_WIRE_SLOTS, z->wire_numel);
  if (!z->stage3) return;
  int ns = 0, ded = 0, ng = 0, nge = 0;
  size_t slots = ts__gather_slot_numel(z->gt, &ns, &ded);
  size_t run = ts__gather_run_numel(z->gt, 0, &ng), rune = ts__gather_run_numel(z->gt, 1, &nge);
  fprintf(out, "parameters sharded (optimizer_shard 3): this rank holds %zu of the %zu parameter elements; %d "
          "gradient buckets all-gathered into %d slot%s of %zu elements (%d for one bucket each) before use: %d "
          "gathers (%zu elements) per training micro-step, %d (%zu) per evaluation batch\n",
          z->R + z->P, ts_params_numel(d->r.params), z->nb, ns, ns == 1 ? "" : "s", slots, ded, ng, run, nge, rune);
}

/* ---- the sync interface (sync.h) ---- */

static void zero_store(const ts_dist *d, int *no_grads, int *no_params) {
  /* stages 2 and 3: no whole-model gradient buffer (every gradient is bound into its bucket's
   * staging slot or the replicated remainder by ts__zero_plan); stage 3 in a real job: no whole
   * copy of the parameters (each rank's shard and the gather slots are bound into the plans) */
  ts_dtype low = TS_F32;
  if (ts__zero16_dtype(d, &low)) low = TS_F32; /* refused at planning */
  *no_grads = d->cfg.optimizer_shard >= 2 || low != TS_F32;
  *no_params = (d->cfg.optimizer_shard >= 3 || low != TS_F32) && d->world;
}

/* Stages 2 and 3 in a real job accumulate the rank's reduced part (no caller's buffer). */
static int zero_own_accum(const ts_dist *d) { return zof(d) && d->world && d->cfg.optimizer_shard >= 2; }

static size_t zero_accum_numel(const ts_dist *d) {
  if (d->cfg.accum < 2 || zero_own_accum(d)) return 0;
  return ts__sync_accum_numel_whole(d);
}

static int zero_accumulate(ts_dist *d, const float *grads, float *acc, int64_t k) {
  if (zero_own_accum(d)) return zero_accumulate_staged(d, k);
  return ts__sync_accumulate_whole(d, grads, acc, k);
}

static int zero_settle_vt(ts_dist *d) {
  struct ts__zero *z = zof(d);
  zero_settle(z);
  if (z && z->ag_err) return ts_error_set(z->ag_err, "parallel.optimizer_shard: all-gather of the updated parameters: "
                                          "%s", z->ag_msg);
  return TS_OK;
}

/* The reduce-scatter of the sharded gradients and the all-reduce of the replicated ones into the
 * work buffer; the wait includes what backward waited for a staging slot and what the forward
 * waited for the prefetched all-gathers. */
static int zero_reduce(ts_dist *d, float *g, double *wait_ms) {
  double t0 = ts_time_now();
  if (zof(d)) zof(d)->gscale = 1; /* mixed precision: until clipping says otherwise */
  int rc = zero_settle_vt(d); /* buckets the forward never read */
  if (!rc) rc = zero_reduce_parts(d, g);
  double ag = zof(d) ? zof(d)->ag_wait_s : 0;
  if (zof(d)) zof(d)->ag_wait_s = 0;
  *wait_ms = 1e3 * (ts_time_now() - t0 + zero_take_slot_wait(d) + ag);
  return rc;
}

static int zero_clip(ts_dist *d, float *g, ts__clip *c, int *mine) {
  (void)g;
  *mine = zof(d) && d->world; /* the reduced parts are the work buffer's */
  return *mine ? zero_clip_parts(d, g, c) : TS_OK;
}

/* A sharded optimizer slot (the work buffer loc) <-> the whole model's (whole) where the store
 * holds slices (semi_auto_parallel): through a slot over the rank's store, its groups' parts
 * gathered (or cut) first, then its slices moved as the parameters are. */
static int zero_move_sliced(ts_dist *d, ts_params *full, float *loc, float *whole, int gather) {
  float *st = calloc(ts_params_numel(d->r.params) + 1, sizeof(float));
  if (!st) return ts_error_set(TS_ENOMEM, "checkpoint: out of memory");
  int rc = gather ? zero_move_slot(d, NULL, loc, st, 1) : ts__dist_move_flat(d, full, st, whole, 0, 0);
  if (!rc) rc = gather ? ts__dist_move_flat(d, full, st, whole, 0, 1) : zero_move_slot(d, NULL, loc, st, 0);
  free(st);
  return rc;
}

static int zero_move(ts_dist *d, ts_params *full, float *loc, float *whole, int gather) {
  if (!full || !d->r.sliced) return zero_move_slot(d, full, loc, whole, gather); /* the store is whole */
  return zero_move_sliced(d, full, loc, whole, gather);
}

/* The elements of the rank's optimizer work buffer (replicated + its parts), as the extent of a
 * stateless optimizer over the store's parameters built through ts_dist_optim_create (the very
 * cut the rank's optimizer gets, in a real job or a dry run). */
static int zero_work(ts_dist *d, size_t *work) {
  ts_params *p = d->r.params;
  int np = ts_params_count(p), nseg = 0;
  ts_optim_segment *segs = calloc((size_t)np + 1, sizeof *segs);
  if (!segs) return ts_error_set(TS_ENOMEM, "memory figures: out of memory");
  for (int i = 0; i < np; i++) {
    if (ts_params_flags(p, i) & TS_PARAM_STATE) continue;
    ts_shape s = ts_params_shape(p, i);
    segs[nseg++] = (ts_optim_segment){ts_params_name(p, i), ts_params_offset(p, i), (size_t)ts_shape_numel(&s), 0};
  }
  ts_optim_config sgd = ts_optim_config_default(TS_OPTIM_SGD); /* no slots: nothing large allocated */
  ts_optim *o = NULL;
  int rc = ts_dist_optim_create(d, &sgd, segs, nseg, &o);
  *work = rc ? 0 : ts_optim_extent(o);
  ts_optim_free(o);
  free(segs);
  return rc;
}

/* The optimizer's state covers [replicated][the rank's parts] (R + P); the reduced gradients: the
 * whole buffer (stage 1: the parts reduced in place) and the replicated ones packed; stages 2 and 3 have no whole-model gradient buffer: backward writes
 * the sharded gradients into the buckets' staging slots (with accumulation, each with room for a
 * reduced part) and the replicated ones into the work buffer (with accumulation, into a buffer
 * of R they are added up from); accumulation over micro-steps is a whole-model buffer only under
 * stage 1 (stages 2, 3: the rank's reduced part accumulates; the job's figure, also dry). */
static int zero_memory(ts_dist *d, ts_dist_memory_info *m, int64_t *opt_elems) {
  size_t work = 0;
  const int64_t f = (int64_t)sizeof(float);
  int rc = zero_work(d, &work);
  if (rc) return rc;
  /* stages 1, 2: the store and the optimizer's copy of the part; stage 3: the part and the
   * replicated parameters, plus the gather slots, no whole copy */
  m->param_bytes += (int64_t)zero_param_bytes(d) - (int64_t)ts_params_numel(d->r.params) * f;
  const struct ts__zero *z = zof(d);
  if (z->low != TS_F32) { /* mixed precision: 16-bit gradients (whole, or slots + parts + replicated) and R widened */
    int64_t es = (int64_t)ts_dtype_size(z->low);
    m->grad_bytes = (z->staged ? (int64_t)(z->stage_numel + z->P + z->R) : (int64_t)z->numel) * es + (int64_t)z->R * f;
    *opt_elems = (int64_t)work;
    return TS_OK;
  }
  if (d->cfg.optimizer_shard >= 2) m->grad_bytes = (int64_t)zero_staged_grad_bytes(d);
  /* the reduced gradients apart from the store's: the replicated ones (stage 1: the parts are
   * reduced in place), or all of the work buffer's */
  m->grad_bytes += (int64_t)(zof(d)->inplace ? zof(d)->R : work) * f;
  m->grad_bytes += (int64_t)(zof(d)->wire_numel * ts_dtype_size(d->cfg.wire)); /* 16-bit wire slots */
  *opt_elems = (int64_t)work;
  if (d->cfg.accum > 1 && d->cfg.optimizer_shard < 2) m->accum_bytes = (int64_t)ts_params_numel(d->r.params) * f;
  return TS_OK;
}

/* Mixed precision, after the master weights were written (a checkpoint loaded): their rounding
 * into the 16-bit weights at the rank's places, every bucket all-gathered (collective). */
static int zero_loaded(ts_dist *d) {
  struct ts__zero *z = zof(d);
  if (!z || z->low == TS_F32 || !d->world || !z->w16) return TS_OK;
  zero_settle(z);
  int rc = round_masters(z);
  if (!rc) rc = gather_parts(d, z->w16, 0, z->w16, z->low, 0);
  return rc ? ts_error_wrap(rc, "parallel.optimizer_shard_weights: the 16-bit weights from the loaded masters") : TS_OK;
}

static const char *zero_params_note(const ts_dist *d) {
  return zof(d) && d->cfg.optimizer_shard >= 3 ? "cut over the ranks (optimizer_shard 3, below)" : NULL;
}

static const char *zero_note(const ts_dist *d) { return zof(d) ? zof(d)->note : ""; }

void ts__sync_manifest_keys(const ts_dist_config *c, char *buf, size_t cap) {
  snprintf(buf, cap, "\"optimizer_shard\": %d, \"optimizer_shard_group\": %d", c->optimizer_shard, c->shard_group);
}

static void zero_free(ts_dist *d) {
  zero_free_state(zof(d));
  d->sync.priv = NULL;
}

const ts__sync_vt ts__sync_zero = {.name = "zero", .plan = ts__zero_plan, .store = zero_store, .start = zero_start,
                                   .begin = zero_begin, .accum_numel = zero_accum_numel,
                                   .accumulate = zero_accumulate, .reduce = zero_reduce, .clip = zero_clip,
                                   .optim_create = zero_optim_create, .optim_step = zero_optim_step,
                                   .held_params = zero_held_params, .move = zero_move, .loaded = zero_loaded,
                                   .reduced_at = zero_reduced_at, .each_range = zero_each_range,
                                   .memory = zero_memory, .num_buckets = zero_num_buckets,
                                   .set_prof = zero_set_prof, .settle = zero_settle_vt, .sharded = zero_sharded,
                                   .comm_bytes = zero_comm_bytes, .describe = zero_describe,
                                   .params_note = zero_params_note, .note = zero_note, .free = zero_free};

const ts__sync_vt *ts__sync_choose(const ts_dist_config *c) {
  return c->optimizer_shard ? &ts__sync_zero : &ts__sync_allreduce;
}

/* ---- ZeRO's own figures (dist_impl.h; tests and benchmarks read them) ---- */

size_t ts__zero_param_bytes(const ts_dist *d) { return zero_param_bytes(d); }

size_t ts__zero_slot_bytes(const ts_dist *d) {
  const struct ts__zero *z = zof(d);
  return z && z->stage3 ? ts__gather_slot_numel(z->gt, NULL, NULL) * sizeof(float) : 0;
}

double ts__zero_comm_bytes(const ts_dist *d) {
  double b = 0, f = (double)(d->r.size - 1) / (double)d->r.size;
  if (!zof(d)) return 2 * f * (double)ts_params_numel(d->r.params) * sizeof(float); /* ring all-reduce */
  zero_comm_bytes(d, &b);
  return b;
}

void ts__zero_describe(const ts_dist *d, FILE *out) { zero_describe(d, out); }

double ts__zero_take_gather_wait(ts_dist *d) { return zof(d) && zof(d)->gt ? ts__gather_take_wait(zof(d)->gt) : 0; }
