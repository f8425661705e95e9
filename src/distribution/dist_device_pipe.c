/* The pipeline layout (dist_pipe.c) on GPU ranks: every piece's plan instances and evaluation
 * plan on the rank's GPU, run in the order of the rank's schedule as on the CPU.
 *   bind: the plans put on the device (the store's bindings moved onto its device copy; dist_pipe.c
 *     put them there before sharing one scratch arena), the stage's replicas' device collectives
 *     (BatchNorm's statistics, the parameters' broadcast), semi_auto's slots inside the stages,
 *     the gradients' groups over the stage's ranks and, with parameters several stages hold, the
 *     pipeline's (their gradients summed); clipping's ranges (each parameter weighted as clip_pipe
 *     weighs it: counted by one stage, 1 / its holders);
 *   a step: the rank's rows of every micro-batch copied in once, each forward bound to its
 *     micro-batch's rows, the loss copied out where the piece computes it, each backward's gradient
 *     ranges added up on the device; the activations cross between stages through the SEND/RECV
 *     nodes' GPU adapters (runtime/run_p2p.c: staged through host memory over the pipeline's
 *     communicator, the CPU's messages);
 *   the reduction: the step's sends completed, the gradients all-reduced over the stage's ranks
 *   holding the same slice (dist_device.c's groups), the tied ones summed over the pipeline, on
 *   the devices;
 *   evaluation: the pieces in order; the rows' metrics computed on the last one's GPU (or its
 *     logits copied out) and sent to the other stages as on the CPU.
 * semi_auto_parallel inside the stages: the pass's slots get device collectives, the gradients are
 * reduced over the stage's ranks holding the same slice (ts__dist_dev_reduce_plan over the stage).
 * Optimizer sharding (stages 1 and 2, as the CPU allows them under a pipeline) over each stage's
 * groups (dist_device_zero.c), the tied parameters' parts summed over the pipeline. */
#include <stdlib.h>
#include <string.h>

#include "dist_device.h"
#include "device/gpu_kernels.h"
#include "pipe_impl.h"
#include "runtime/exec.h"
#include "zero_impl.h"

int ts__dist_dev_pipe_check(const ts_dist_config *cfg) {
  (void)cfg; /* (the CPU's refusals cover what the GPU's pipeline would) */
  return TS_OK;
}

/* plan p of graph gr on the device; its slots' device collectives: semi_auto's (grp indices
 * slot[0..ns)), or slot 0 the stage's replicas (SyncBatchNorm); the pipeline's slot is its host
 * messages' */
static int put(ts_dist *d, ts_plan *p, const ts_graph *gr, const int *slot, int ns) {
  struct ts__dist_dev *g = G(d);
  int rc = ts__dist_dev_put_plan(d, p, gr), l;
  for (int q = 0; q < ns && !rc; q++) rc = ts_plan_set_dcoll(p, q, g->grp[slot[q]].x);
  if (!rc && !ns && g->pdp >= 0) rc = ts_plan_set_dcoll(p, 0, g->grp[g->pdp].x);
  if (!rc && (l = ts_plan_node_live(p, 0)) < 0) rc = l;
  return rc;
}

int ts__dist_dev_pipe_stage_ranks(const ts_dist *d) { return PIPE(d)->dp * PIPE(d)->sub; }

int ts__dist_dev_pipe_bind(ts_dist *d) {
  struct ts__dist_dev *g = G(d);
  struct ts__pipe *pp = PIPE(d);
  ts_params *p = d->r.params;
  int rc = ts__dist_dev_pipe_check(&d->cfg);
  if (rc) return rc;
  g->pdp = g->ppg = -1;
  /* the device collectives (each collective over its ranks, in this order on every rank): the
   * stage's replicas', semi_auto's slots inside the stage (training, evaluation), the groups
   * reducing the gradients over the stage's ranks, the pipeline's */
  int ns = pp->semi ? pp->pass.nslots : 0, nse = pp->semi ? pp->pass.neslots : 0;
  int *slot = calloc((size_t)(ns + nse) + 1, sizeof(int));
  if (!slot) return ts_error_set(TS_ENOMEM, "GPU: out of memory");
  if (d->world && !pp->semi && pp->dp > 1) rc = ts__dist_dev_group(g, pp->dpc, 0, NULL, d->cfg.comm_backend, &g->pdp);
  for (int q = 0; q < ns + nse && !rc; q++)
    rc = ts__dist_dev_group(g, q < ns ? pp->pass.slots[q] : pp->pass.eslots[q - ns], 0, NULL, d->cfg.comm_backend,
                            &slot[q]);
  if (!rc && d->world && ts__zof(d)) rc = ts__dist_dev_zero_bind(d); /* optimizer_shard over the stage's groups */
  else if (!rc && d->world) rc = ts__dist_dev_reduce_plan(d, pp->dpc, pp->dp * pp->sub, pp->semi ? pp->j : pp->dpi);
  if (!rc && d->world && pp->tied_total) rc = ts__dist_dev_group(g, pp->pp, 0, NULL, d->cfg.comm_backend, &g->ppg);
  for (int cc = 0; cc < pp->V && !rc; cc++) {
    pchunk *ch = &pp->ch[cc];
    for (int k = 0; k < ch->K && !rc; k++) rc = put(d, ch->plan[k], ch->sg.g, slot, ns);
    if (!rc) rc = put(d, ch->plan_e, ch->se.g, slot + ns, nse);
    if (!rc && ch->se.x != TS_NONE) rc = ts_plan_bind(ch->plan_e, ch->se.x, g->xe);
  }
  free(slot);
  if (rc == TS_EUNSUPPORTED) return ts_error_wrap(rc, "device_target GPU");
  if (!rc && pp->tied_total) rc = ts__dist_dev_alloc0(g->dev, sizeof(float) * pp->tied_total, (void **)&g->tied);
  /* clipping: each parameter the stage counts, weighted 1 / the stage's ranks holding it */
  int np = ts_params_count(p);
  if (!rc && !(g->cr = calloc((size_t)np + 1, sizeof *g->cr))) rc = ts_error_set(TS_ENOMEM, "GPU: out of memory");
  for (int i = 0; i < np && !rc; i++) {
    ts_shape sh = ts_params_shape(p, i);
    if ((ts_params_flags(p, i) & TS_PARAM_STATE) || !pp->count_once[i] || !ts_shape_numel(&sh)) continue;
    g->cr[g->ncr++] = (struct ts__crange){ts_params_offset(p, i), (size_t)ts_shape_numel(&sh), pp->holders_w[i]};
  }
  if (!rc) rc = ts__dist_dev_alloc0(g->dev, sizeof(float) * (size_t)(g->ncr + 1), (void **)&g->cres);
  if (!rc) rc = ts__dev_host_alloc(g->dev, sizeof(float) * (size_t)(g->ncr + 1), (void **)&g->cres_h);
  return rc;
}

int ts__dist_dev_pipe_start(ts_dist *d) {
  struct ts__dist_dev *g = G(d);
  struct ts__pipe *pp = PIPE(d);
  ts_params *p = d->r.params;
  if (d->cfg.parameter_broadcast && pp->semi)
    return ts_error_set(TS_ECONFIG, "parallel.parameter_broadcast: the parameters are held as slices (each rank "
                        "initialises its own from the counter-based RNG, identical to the whole model's)");
  if (!d->cfg.parameter_broadcast || g->pdp < 0) return TS_OK;
  /* the first replica's parameters and states to the others of the stage */
  ts__dcoll *x = g->grp[g->pdp].x;
  int rc = g->hlen[0] ? ts__dcoll_broadcast(x, g->dbase[0], ts_params_numel(p), TS_F32, 0, NULL) : TS_OK;
  if (!rc && g->hlen[2]) rc = ts__dcoll_broadcast(x, g->dbase[2], ts_params_state_numel(p), TS_F32, 0, NULL);
  if (!rc) rc = ts__dcoll_wait(x, NULL, ts_comm_get_timeout(), "broadcast of the parameters");
  g->host_stale = 1;
  return rc ? ts_error_wrap(rc, "parallel.parameter_broadcast over a pipeline stage's replicas") : TS_OK;
}

static void span(ts_dist *d, const char *name, int comm, double t0) {
  if (d->span) d->span(name, comm, t0, ts_time_now(), d->span_user);
}

int ts__dist_dev_pipe_fwd_bwd(ts_dist *d, const void *x, const void *y, int64_t step, double *loss, float **gout) {
  struct ts__dist_dev *g = G(d);
  struct ts__pipe *pp = PIPE(d);
  const ts_sched_op *ops;
  int nops = ts_schedule_ops(pp->sched, pp->stage, &ops), rc = TS_OK;
  float *grads = (float *)g->dbase[1];
  double sum = 0, t_begin = ts_time_now(), busy = 0;
  pp->wait_s = 0;
  /* the rank's rows of every micro-batch, once */
  rc = ts__dev_copy(g->dev, g->x, x, g->xs * (size_t)pp->M, TS__H2D, NULL);
  if (!rc) rc = ts__dev_copy(g->dev, g->y, y, g->ys * (size_t)pp->M, TS__H2D, NULL);
  ts__pipe_begin(pp);
  for (int i = 0; i < nops && !rc; i++) {
    const ts_sched_op *op = &ops[i];
    pchunk *ch = &pp->ch[op->chunk];
    int mi = op->micro;
    uint64_t seed = (uint64_t)(step * pp->M + mi);
    double t0 = ts_time_now();
    int k = -1;
    if (!op->bwd) {
      if ((rc = ts__pipe_take(ch, mi, &k))) return rc;
      if (ch->sg.x != TS_NONE) rc = ts_plan_bind(ch->plan[k], ch->sg.x, (char *)g->x + (size_t)mi * g->xs);
      if (!rc && ch->sg.y != TS_NONE) rc = ts_plan_bind(ch->plan[k], ch->sg.y, (char *)g->y + (size_t)mi * g->ys);
      if (!rc) rc = ts_plan_run_range(ch->plan[k], seed, 0, ch->sg.nfwd); /* ends synchronised */
      float l = 0;
      if (!rc && ch->sg.out != TS_NONE) {
        rc = ts__dev_copy(g->dev, &l, ts_plan_data(ch->plan[k], ch->sg.out), sizeof l, TS__D2H, NULL);
        if (!rc) rc = ts__dev_sync(g->dev);
        sum += l;
      }
      busy += ts_time_now() - t0;
      span(d, "pipeline_forward", 0, t0);
    } else {
      if ((rc = ts__pipe_give_back(ch, mi, &k))) return rc;
      if (g->zord) ts__dist_dev_zero_before(d, ch->nbwd); /* optimizer_shard 2: reduced during backward */
      rc = ts_plan_run_range(ch->plan[k], seed, ch->sg.nfwd, -1);
      if (!rc && g->zord) rc = ts__dist_dev_zero_after(d, ch->nbwd++);
      busy += ts_time_now() - t0;
      span(d, "pipeline_backward", 0, t0);
      if (rc || pp->M < 2 || g->zord) continue;
      /* the ranges this piece wrote added up: its first backward of the step copies */
      double ta = ts_time_now();
      int first = ch->nbwd++ == 0;
      for (int q = 0; q < ch->nr && !rc; q++)
        rc = ts__gpu_axpby(g->dev, 1.0f, grads + ch->roff[q], first ? 0.0f : 1.0f, g->acc + ch->roff[q],
                           (int64_t)ch->rlen[q], NULL);
      span(d, "grad_accumulate", 0, ta);
    }
    if (rc) rc = ts_error_wrap(rc, "pipeline stage %d, %s of micro-batch %d", op->chunk * pp->P + pp->stage,
                               op->bwd ? "backward" : "forward", mi);
  }
  if (!rc) rc = ts__dev_sync(g->dev);
  pp->wall_s = ts_time_now() - t_begin;
  pp->busy_s = busy - pp->wait_s;
  g->host_stale = 1;
  *loss = sum / (double)pp->M;
  *gout = pp->M > 1 && g->acc ? g->acc : grads; /* (NULL under optimizer_shard 2: the rank's parts) */
  return rc;
}

/* Where rank-store entry l's reduced gradient is on the device, elements [*lo, *lo + *n) of it:
 * the whole in gd, or (optimizer_shard) where the sharding holds it (dist_pipe.c's tied_grad). */
static float *tied_grad(ts_dist *d, float *gd, int l, size_t *lo, size_t *n) {
  ts_shape s = ts_params_shape(d->r.params, l);
  size_t off = ts_params_offset(d->r.params, l), numel = (size_t)ts_shape_numel(&s);
  *lo = 0;
  *n = numel;
  float *w = ts__zof(d) ? ts__dist_dev_zero_reduced_at(d, gd, off, numel, lo, n) : NULL;
  return w ? w : gd + off;
}

int ts__dist_dev_pipe_flush(ts_dist *d) {
  struct ts__pipe *pp = PIPE(d);
  double tf = ts_time_now();
  int rc = pp->p2p ? ts_comm_flush_sends(pp->p2p) : TS_OK;
  span(d, "pipeline_p2p_flush", 1, tf);
  return rc ? ts_error_wrap(rc, "pipeline: completing the step's sends") : TS_OK;
}

/* after the stage's reduction: the tied gradients summed over the pipeline (every rank of it with
 * the same layout: a rank without one adds zeros) */
int ts__dist_dev_pipe_tied(ts_dist *d, float *gd) {
  struct ts__dist_dev *g = G(d);
  struct ts__pipe *pp = PIPE(d);
  if (!pp->tied_total || g->ppg < 0) return TS_OK;
  int rc = ts__dev_memset0(g->dev, g->tied, sizeof(float) * pp->tied_total, NULL);
  for (int pass = 0; pass < 2 && !rc; pass++) { /* in, then (after the sum) back */
    if (pass) rc = ts__dcoll_allreduce(g->grp[g->ppg].x, g->tied, g->tied, pp->tied_total, TS_F32, TS_REDUCE_SUM, NULL);
    for (int t = 0; t < pp->ntied && !rc; t++) {
      int l = pp->tied_local[t];
      if (l < 0) continue;
      size_t lo = 0, n = 0;
      float *at = tied_grad(d, gd, l, &lo, &n);
      float *in = g->tied + pp->tied_off[t] + lo;
      rc = ts__dev_copy(g->dev, pass ? at : in, pass ? in : at, sizeof(float) * n, TS__D2D, NULL);
    }
  }
  ts__dcoll *x = g->grp[g->ppg].x;
  if (!rc) rc = ts__dcoll_wait(x, NULL, ts_comm_get_timeout(), "sum of the tied gradients");
  return rc ? ts_error_wrap(rc, "pipeline: summing the gradients of parameters several stages hold") : TS_OK;
}

int ts__dist_dev_pipe_eval(ts_dist *d, const void *x, const ts__eval_out *o) {
  struct ts__dist_dev *g = G(d);
  struct ts__pipe *pp = PIPE(d);
  size_t xs, ys;
  ts__dist_row_bytes(d, &xs, &ys);
  int rc = ts__dev_copy(g->dev, g->xe, (const char *)x + xs * (size_t)(d->cfg.eval_batch / d->r.eval_parts *
                                                                      d->r.eval_index), g->xes, TS__H2D, NULL);
  for (int cc = 0; cc < pp->V && !rc; cc++) {
    pchunk *ch = &pp->ch[cc];
    rc = ts_plan_run(ch->plan_e, 0);
    if (!rc && ch->se.out != TS_NONE) rc = ts__dist_dev_eval_out(d, ts_plan_data(ch->plan_e, ch->se.out), o, pp->logits);
    if (!rc) rc = ts__dev_sync(g->dev);
  }
  if (!rc && pp->pp) rc = ts_comm_flush_sends(pp->p2p);
  if (!rc && pp->pp) rc = ts__dist_pipe_send_eval(pp, o);
  return rc ? ts_error_wrap(rc, "pipeline evaluation") : TS_OK;
}

int ts__dist_dev_pipe_sync_states(ts_dist *d) {
  struct ts__dist_dev *g = G(d);
  ts_params *p = d->r.params;
  if (g->pdp < 0 || d->cfg.sync_batchnorm || !g->hlen[2]) return TS_OK;
  ts__dcoll *x = g->grp[g->pdp].x;
  int rc = ts__dcoll_allreduce(x, g->dbase[2], g->dbase[2], ts_params_state_numel(p), TS_F32, TS_REDUCE_MEAN, NULL);
  if (!rc) rc = ts__dcoll_wait(x, NULL, ts_comm_get_timeout(), "all-reduce of the running statistics");
  g->host_stale = 1;
  return rc ? ts_error_wrap(rc, "averaging BatchNorm running statistics over a stage's replicas") : TS_OK;
}

void ts__dist_dev_pipe_free_plans(ts_dist *d) {
  struct ts__pipe *pp = PIPE(d);
  for (int cc = 0; pp && cc < pp->V; cc++) {
    pchunk *ch = &pp->ch[cc];
    for (int k = 0; ch->plan && k < ch->K; k++) {
      if (ch->plan[k] != d->r.plan) ts_plan_free(ch->plan[k]);
      ch->plan[k] = NULL;
    }
    if (ch->plan_e != d->r.plan_e) ts_plan_free(ch->plan_e);
    ch->plan_e = NULL;
  }
}
