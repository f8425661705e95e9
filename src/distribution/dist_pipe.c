/* Pipeline parallel as a distribution object (src/distribution/dist.h, layout "pipeline"):
 * parallel.pipeline_stages P, the ranks arranged (dp, pp) with the stage fastest (rank =
 * dp_index * P + stage), data parallel over the dp replicas of each stage.
 *
 * The model is built whole (one micro-batch of the rank's rows), cut into P*V pieces by
 * ts_stage_assign (parallel.stages, or balanced), and the rank builds the graphs of its pieces
 * (piece c*P + stage for its virtual stage c) with SEND/RECV on the cut edges, their backward by
 * autodiff, and as many plans of each as the schedule keeps micro-batches in flight there
 * (ts_schedule_max_inflight): a micro-batch's forward runs nodes [0, nfwd) of a free plan
 * instance, its backward later runs the rest of the same instance, so each instance's arena holds
 * that micro-batch's activations in between. Gradients accumulate over the micro-batches, are
 * averaged over the stage's dp replicas at the step's end, and parameters two stages read (tied
 * embeddings) are summed over the pipeline. Every rank runs only its schedule's list
 * (ts_schedule_ops), which was checked for deadlock freedom before anything ran. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec.h"
#include "graph/graph_ir.h"
#include "compat.h"
#include "pipe_impl.h"

static int pipe_fail(const char *what, int rc) { return ts_error_wrap(rc, "pipeline: %s", what); }

static int check_pipe(const ts_dist_config *c, const ts_dist_model *m) {
  if (c->pipeline_stages < 2)
    return ts_error_set(TS_ECONFIG, "parallel.pipeline_stages: the pipeline layout needs 2 or more stages, got %d",
                        c->pipeline_stages);
  /* a callback building the whole network (C API, Python cells) is cut like a zoo model */
  if (m && m->per_rank)
    return ts_error_set(TS_ECONFIG, "parallel.pipeline_stages: models written per rank (hybrid_parallel) cannot be "
                        "cut into stages; build the whole model");
  ts__compat_key key; /* the compatibility table's rules for stages (full_batch) */
  ts__compat_key_of("pipeline", c, &key);
  int rc = ts__compat_check(TS__COMPAT_STAGES, &key);
  if (rc) return rc;
  if (c->virtual_stages > MAX_CHUNKS)
    return ts_error_set(TS_ECONFIG, "parallel.virtual_stages: at most %d", MAX_CHUNKS);
  return TS_OK;
}

/* ---- build ---- */

/* The ranges of the store's gradient buffer that piece graph g writes. */
static int grad_ranges(ts_params *p, const ts_graph *g, pchunk *c) {
  int n = ts_params_count(p);
  c->roff = malloc(sizeof(size_t) * (size_t)(n + 1));
  c->rlen = malloc(sizeof(size_t) * (size_t)(n + 1));
  if (!c->roff || !c->rlen) return ts_error_set(TS_ENOMEM, "pipeline: out of memory");
  c->nr = 0;
  for (int v = 0; v < ts_graph_num_values(g); v++) {
    int id = ts_graph_value_param_id(g, v);
    if (id < 0 || ts_graph_value_kind(g, v) != TS_VAL_PARAM) continue;
    ts_shape s = ts_params_shape(p, id);
    c->roff[c->nr] = ts_params_offset(p, id);
    c->rlen[c->nr++] = (size_t)ts_shape_numel(&s);
  }
  return TS_OK;
}

/* Times the blocking receives of the pipeline's plans. */
static void recv_hook(const ts_hook_info *e, void *user) {
  struct ts__pipe *pp = user;
  if (!e->op_name || strcmp(e->op_name, "recv")) return;
  if (e->event == TS_HOOK_NODE_BEGIN) pp->recv_t0 = ts_time_now();
  else if (e->event == TS_HOOK_NODE_END) pp->wait_s += ts_time_now() - pp->recv_t0;
}

static int times_pipe(const ts_dist *d, double *wall, double *bubble, double *recv_wait) {
  const struct ts__pipe *pp = PIPE(d);
  *wall = pp ? pp->wall_s : 0;
  *bubble = pp ? pp->wall_s - pp->busy_s : 0;
  *recv_wait = pp ? pp->wait_s : 0;
  return pp != NULL;
}

static int build_chunk_plans_with(ts_dist *d, pchunk *c, ts_val *keep, int cap);

/* The plans of piece c: K training instances and the evaluation plan, bound to the store. */
static int build_chunk_plans(ts_dist *d, pchunk *c) {
  ts_params *p = d->r.params;
  int cap = ts_params_count(p) + 1, rc;
  ts_val *keep = malloc(sizeof *keep * (size_t)(cap + 2 + c->sg.ntokens));
  if (!keep) return ts_error_set(TS_ENOMEM, "pipeline: out of memory");
  rc = build_chunk_plans_with(d, c, keep, cap);
  free(keep);
  return rc;
}

static int build_chunk_plans_with(ts_dist *d, pchunk *c, ts_val *keep, int cap) {
  ts_params *p = d->r.params;
  int nk = 0, rc;
  if ((rc = ts_params_attach_grads(p, c->sg.g, keep, cap, &nk))) return rc;
  if (c->sg.out != TS_NONE) keep[nk++] = c->sg.out;
  keep[nk++] = c->sg.objective; /* the forward sends feed it */
  for (int t = 0; t < c->sg.ntokens; t++) keep[nk++] = c->sg.tokens[t];
  if ((rc = grad_ranges(p, c->sg.g, c))) return rc;
  c->plan = calloc((size_t)c->K, sizeof *c->plan);
  c->free_inst = malloc(sizeof(int) * (size_t)c->K);
  c->inst_of = malloc(sizeof(int) * (size_t)PIPE(d)->M);
  if (!c->plan || !c->free_inst || !c->inst_of) return ts_error_set(TS_ENOMEM, "pipeline: out of memory");
  /* the micro-batches in flight keep only what their backward reads; the forward and backward
   * temporaries of every piece of the rank share one scratch arena (one runs at a time) */
  for (int k = 0; k < c->K; k++) {
    if ((rc = ts__dist_plan_create(d, c->sg.g, keep, nk, &c->plan[k])) || (rc = ts_params_bind(p, c->sg.g, c->plan[k])) ||
        (rc = ts_plan_add_hook(c->plan[k], recv_hook, PIPE(d))))
      return rc;
    ts_plan *owner = PIPE(d)->ch[0].plan ? PIPE(d)->ch[0].plan[0] : c->plan[k];
    if ((rc = ts_plan_share_scratch(c->plan[k], c->sg.nfwd, owner))) return rc;
  }
  ts_val *ke = malloc(sizeof *ke * ((size_t)c->se.ntokens + 1));
  int nke = 0;
  if (!ke) return ts_error_set(TS_ENOMEM, "pipeline: out of memory");
  if (c->se.out != TS_NONE) ke[nke++] = c->se.out;
  for (int t = 0; t < c->se.ntokens; t++) ke[nke++] = c->se.tokens[t];
  rc = ts__dist_plan_create(d, c->se.g, ke, nke, &c->plan_e);
  free(ke);
  if (rc || (rc = ts_params_bind(p, c->se.g, c->plan_e))) return rc;
  return TS_OK;
}

static int build_pipe(ts_dist *d, const ts_dist_model *m) {
  (void)m;
  const ts_dist_config *c = &d->cfg;
  ts_dist_run *r = &d->r;
  struct ts__pipe *pp = calloc(1, sizeof *pp);
  if (!pp) return ts_error_set(TS_ENOMEM, "pipeline: out of memory");
  d->priv = pp;
  int P = c->pipeline_stages, V = c->virtual_stages > 0 ? c->virtual_stages : 1, rc;
  if (r->size % P)
    return ts_error_set(TS_ECONFIG, "parallel.pipeline_stages: %d stages do not divide the %d ranks", P, r->size);
  pp->P = P;
  pp->V = V;
  pp->M = (int)c->accum;
  pp->semi = c->pipeline_semi;
  if (pp->semi) { /* (pp, stage's ranks): a stage's ranks are neighbours */
    pp->sub = r->size / P;
    pp->dp = 1;
    pp->stage = r->rank / pp->sub;
    pp->j = r->rank % pp->sub;
  } else { /* (dp, pp): the replicas of a stage are P ranks apart */
    pp->sub = 1;
    pp->dp = r->size / P;
    pp->stage = r->rank % P;
    pp->dpi = r->rank / P;
  }
  if ((rc = ts_schedule_create((ts_sched_kind)c->pipeline_schedule, P, pp->M, V, &pp->sched))) return rc;
  if ((rc = ts_schedule_check(pp->sched))) return pipe_fail("the schedule", rc);
  if (c->micro_batch % pp->dp)
    return ts_error_set(TS_ECONFIG,
                        "train.batch_size: each of the %d micro-batches (%lld rows) must divide by the %d data-parallel "
                        "replicas of a stage",
                        pp->M, (long long)c->micro_batch, pp->dp);
  r->data_parts = pp->dp;
  r->data_index = pp->dpi;
  r->micro_batch = c->micro_batch / pp->dp; /* semi: the pass cuts the batch below */
  r->eval_parts = 1;
  r->eval_index = 0;
  r->eval_split = 0;
  r->sliced = 1; /* the rank holds a part of the model: checkpoints collect it */
  d->loss_op = TS_REDUCE_SUM;
  d->sync.mean = c->gradients_mean;
  d->seed = 1.0f / (float)c->accum;
  /* the whole model, one micro-batch of the rank's rows */
  ts_val x, y, loss, logits, xe, le;
  if ((rc = ts_params_create(&PIPE(d)->pass.gp)) || (rc = ts_graph_create(&PIPE(d)->pass.gg)) || (rc = ts_graph_create(&PIPE(d)->pass.gge)) ||
      (rc = ts_params_create(&r->params)))
    return rc;
  ts_graph_set_training(PIPE(d)->pass.gge, 0);
  if (d->vt->world && c->sync_batchnorm && !c->pipeline_semi)
    ts_graph_set_batchnorm_sync(PIPE(d)->pass.gg, 0); /* slot 0: the stage's replicas */
  ts_nn nn = {PIPE(d)->pass.gg, PIPE(d)->pass.gp};
  ts__dist_inputs(d, PIPE(d)->pass.gg, r->micro_batch, 1, &x, &y);
  if ((rc = ts__dist_build_model(d, &nn, &x, &y, &logits, &loss))) return rc;
  ts_nn nne = {PIPE(d)->pass.gge, PIPE(d)->pass.gp};
  ts__dist_inputs(d, PIPE(d)->pass.gge, c->eval_batch, 0, &xe, NULL);
  if ((rc = ts__dist_build_model(d, &nne, &xe, NULL, &le, NULL))) return rc;
  r->logits_shape = ts_val_shape(PIPE(d)->pass.gge, le);
  /* semi_auto inside the stages: the parallel pass cuts the whole model for the stage's ranks
   * first; the pipeline then cuts the rank's graph into pieces (every stage's ranks run the
   * same pass, so the pieces of one pipeline agree) */
  pp->cg = PIPE(d)->pass.gg;
  pp->cge = PIPE(d)->pass.gge;
  pp->cp = PIPE(d)->pass.gp;
  if (pp->semi) {
    ts_parallel_config pc = {pp->sub, pp->j, d->model.strategies, c->full_batch ? 1 : 0, 0, c->sequence_parallel};
      if ((rc = ts_parallel_run(PIPE(d)->pass.gg, PIPE(d)->pass.gp, &loss, 1, NULL, &pc, &PIPE(d)->pass.pp))) return ts_error_as_config(rc);
    int parts, index, one = 1;
    ts_parallel_input_piece(PIPE(d)->pass.pp, x, &parts, &index);
    if (c->micro_batch % parts || c->eval_batch % parts)
      return ts_error_set(TS_ECONFIG,
                          "semi_auto_parallel: the batch is cut in %d pieces, which must divide each micro-batch "
                          "(%lld rows) and train.eval_batch_size (%lld)",
                          parts, (long long)c->micro_batch, (long long)c->eval_batch);
    ts_parallel_config pce = {pp->sub, pp->j, ts_parallel_strategies(PIPE(d)->pass.pp), parts, 1, c->sequence_parallel};
      if ((rc = ts_parallel_run(PIPE(d)->pass.gge, PIPE(d)->pass.gp, &le, 1, &one, &pce, &PIPE(d)->pass.pe))) return ts_error_wrap(rc, "evaluation graph");
    pp->cg = ts_parallel_graph(PIPE(d)->pass.pp);
    pp->cp = ts_parallel_params(PIPE(d)->pass.pp);
    pp->cge = ts_parallel_graph(PIPE(d)->pass.pe);
    float pseed = ts_parallel_loss_seed(PIPE(d)->pass.pp, loss);
    loss = ts_parallel_value(PIPE(d)->pass.pp, loss);
    le = ts_parallel_value(PIPE(d)->pass.pe, le);
    r->data_parts = parts;
    r->data_index = index;
    r->micro_batch = c->micro_batch / parts;
    ts_parallel_input_piece(PIPE(d)->pass.pe, xe, &r->eval_parts, &r->eval_index);
    d->seed = pseed / (float)c->accum;
    d->sync.mean = 0; /* the pass's seeds make the sum right (as semi_auto_parallel) */
    pp->semi_seed = pseed;
  }
  /* the cut */
  const ts_graph *cg = pp->cg, *cge = pp->cge;
  int n = ts_graph_num_nodes(cg), ne = ts_graph_num_nodes(cge), np = P * V;
  pp->piece = malloc(sizeof(int) * (size_t)n);
  pp->piece_e = malloc(sizeof(int) * (size_t)ne);
  if (!pp->piece || !pp->piece_e) return ts_error_set(TS_ENOMEM, "pipeline: out of memory");
  ts_stage_rule *rules = malloc(sizeof *rules * (size_t)(c->n_stage_rules + 1));
  if (!rules) return ts_error_set(TS_ENOMEM, "pipeline: out of memory");
  for (int i = 0; i < c->n_stage_rules; i++) rules[i] = (ts_stage_rule){c->stage_rules[i].op, atoi(c->stage_rules[i].text)};
  rc = ts_stage_assign(cg, np, rules, c->n_stage_rules, pp->piece);
  free(rules);
  if (rc) return rc;
  if ((rc = ts_stage_assign_like(cg, pp->piece, cge, np, pp->piece_e))) return rc;
  pp->last_piece_e = pp->piece_e[ts_graph_producer(cge, le)];
  int ntrain_edges = 0;
  ts_stage_edge *edges = NULL;
  if ((rc = ts_stage_edges(cg, pp->piece, &edges, &ntrain_edges))) return rc;
  free(edges);
  /* after the passes' slots (semi_auto inside the stages) and slot 0 (SyncBatchNorm) */
  pp->slot = 1;
  if (pp->semi) {
    int ns = ts_parallel_num_slots(PIPE(d)->pass.pp), nse = ts_parallel_num_slots(PIPE(d)->pass.pe);
    pp->slot = ns > nse ? ns : nse;
    if (pp->slot < 1) pp->slot = 1;
  }
  ts_stage_p2p net = {PIPE_SLOT, P, 0}, nete = {PIPE_SLOT, P, 2 * ntrain_edges + 2};
  for (int cc = 0; cc < V; cc++) {
    pchunk *ch = &pp->ch[cc];
    int k = cc * P + pp->stage;
    if ((rc = ts_stage_build(cg, pp->cp, pp->piece, k, &net, loss, 1, r->params, &ch->sg)) ||
        (rc = ts_stage_build(cge, pp->cp, pp->piece_e, k, &nete, le, 0, r->params, &ch->se)))
      return rc;
    pp->p2p_bytes += ch->sg.send_bytes;
    ts_graph *g = ch->sg.g;
    if (ts_graph_backward(g, ch->sg.objective, d->seed)) return ts__dist_graph_fail(g, "backward");
    /* the seed of a piece without the loss only orders the receive of its sends' gradients (which
     * come scaled from the piece after), so every piece gets the loss scale alike */
    ch->seed = ts_graph_grad(g, ch->sg.objective);
    const char *pat[TS_DIST_MAX_RECOMPUTE];
    int nr = c->n_recompute_layers < TS_DIST_MAX_RECOMPUTE ? c->n_recompute_layers : TS_DIST_MAX_RECOMPUTE;
    for (int i = 0; i < nr; i++) pat[i] = c->recompute_layers[i];
    if (ts_graph_recompute(g, pat, nr, c->recompute | (c->sequence_parallel ? TS_RECOMPUTE_REGATHER : 0))) return ts__dist_graph_fail(g, "model.recompute_layers");
    if ((rc = ts_stage_finish_backward(&ch->sg, &net))) return rc;
    ch->K = ts_schedule_max_inflight(pp->sched, pp->stage, cc);
    if (ch->K < 1) ch->K = 1;
  }
  if ((rc = ts__dist_alloc_store(d, r->params))) return rc;
  for (int cc = 0; cc < V; cc++)
    if ((rc = build_chunk_plans(d, &pp->ch[cc]))) return rc;
  /* what the trainer and the profiler look at: the first piece */
  r->g = pp->ch[0].sg.g;
  r->ge = pp->ch[0].se.g;
  r->plan = pp->ch[0].plan[0];
  r->plan_e = pp->ch[0].plan_e;
  r->x = pp->ch[0].sg.x;
  r->y = pp->ch[0].sg.y;
  r->loss = pp->ch[0].sg.out;
  r->xe = pp->ch[0].se.x;
  r->logits = pp->ch[0].se.out;
  /* parameters held by several stages, and who counts / saves each */
  int nw = ts_params_count(PIPE(d)->pass.gp), nl = ts_params_count(r->params);
  pp->owner = malloc(sizeof(int) * (size_t)(nw + 1));
  pp->tied = calloc((size_t)nl + 1, sizeof(int));
  pp->count_once = calloc((size_t)nl + 1, sizeof(int));
  int *lo = malloc(sizeof(int) * (size_t)(nw + 1)), *hi = malloc(sizeof(int) * (size_t)(nw + 1));
  if (!pp->owner || !pp->tied || !pp->count_once || !lo || !hi) {
    free(lo);
    free(hi);
    return ts_error_set(TS_ENOMEM, "pipeline: out of memory");
  }
  for (int i = 0; i < nw; i++) lo[i] = P, hi[i] = -1;
  const ts_graph *gs[2] = {cg, cge};
  const int *ps[2] = {pp->piece, pp->piece_e};
  for (int q = 0; q < 2; q++)
    for (int j = 0; j < ts_graph_num_nodes(gs[q]); j++)
      for (int k = 0; k < ts_graph_node_num_inputs(gs[q], j); k++) {
        int cid = ts_graph_value_param_id(gs[q], ts_graph_node_input(gs[q], j, k));
        int id = cid < 0 ? -1 : ts_params_find(PIPE(d)->pass.gp, ts_params_name(pp->cp, cid));
        if (id < 0) continue;
        int st = ps[q][j] % P;
        lo[id] = st < lo[id] ? st : lo[id];
        hi[id] = st > hi[id] ? st : hi[id];
      }
  pp->tied_local = malloc(sizeof(int) * (size_t)(nw + 1));
  pp->tied_off = malloc(sizeof(size_t) * (size_t)(nw + 1));
  if (!pp->tied_local || !pp->tied_off) {
    free(lo);
    free(hi);
    return ts_error_set(TS_ENOMEM, "pipeline: out of memory");
  }
  for (int i = 0; i < nw; i++) {
    pp->owner[i] = lo[i] < P ? lo[i] : 0;
    int l = ts_params_find(r->params, ts_params_name(PIPE(d)->pass.gp, i));
    if (hi[i] > lo[i]) { /* the size of this rank position's slice, held here or not */
      int c = ts_params_find(pp->cp, ts_params_name(PIPE(d)->pass.gp, i));
      if (c < 0) {
        free(lo);
        free(hi);
        return ts_error_set(TS_EGRAPH, "pipeline: parameter '%s' is not in the rank's cut model",
                            ts_params_name(PIPE(d)->pass.gp, i));
      }
      ts_shape sh = ts_params_shape(pp->cp, c);
      pp->tied_local[pp->ntied] = l;
      pp->tied_off[pp->ntied++] = pp->tied_total;
      pp->tied_total += (size_t)ts_shape_numel(&sh);
    }
    if (l < 0) continue;
    pp->tied[l] = hi[i] > lo[i];
    pp->count_once[l] = lo[i] == pp->stage;
  }
  free(lo);
  free(hi);
  pp->logits_n = (size_t)ts_shape_numel(&r->logits_shape);
  pp->logits = malloc(sizeof(float) * (pp->logits_n && !ts__dist_sizing(d) ? pp->logits_n : 1));
  if (!pp->logits) return ts_error_set(TS_ENOMEM, "pipeline: out of memory");
  /* the step's loss: the ranks holding the loss, averaged over the dp replicas */
  float w = pp->semi ? pp->semi_seed : 1.0f / (float)pp->dp; /* each rank's part, copies once */
  d->loss_weight = 0;
  for (int cc = 0; cc < V; cc++)
    if (pp->ch[cc].sg.out != TS_NONE) d->loss_weight = w;
  /* clipping: each slice counted once over the stage's ranks holding it */
  pp->holders_w = malloc(sizeof(float) * (size_t)(nl + 1));
  int *part = malloc(sizeof(int) * (size_t)(pp->sub + 1));
  if (!pp->holders_w || !part) {
    free(part);
    return ts_error_set(TS_ENOMEM, "pipeline: out of memory");
  }
  for (int i = 0; i < nl; i++) {
    int h = pp->dp;
    if (pp->semi) {
      if ((rc = ts_params_rank_partition(r->params, i, pp->sub, part)) < 0) {
        free(part);
        return rc;
      }
      h = 0;
      for (int q = 0; q < pp->sub; q++) h += part[q] == part[pp->j];
    }
    pp->holders_w[i] = 1.0f / (float)(h > 0 ? h : 1);
  }
  free(part);
  rc = TS_OK;
  if (!d->world) return TS_OK;
  /* communicators: the pipeline (same place in every stage, by stage), its p2p copy, the
   * stage's group (its replicas; or its semi_auto ranks, whose slots the pass numbered) */
  const int ddims[2] = {pp->dp, P}, sdims[2] = {P, pp->sub};
  if (pp->semi) {
    if ((rc = ts_comm_grid_axis(d->world, 2, sdims, 0, &pp->pp)) || (rc = ts_comm_grid_axis(d->world, 2, sdims, 1, &pp->dpc)))
      return rc;
    int ns = ts_parallel_num_slots(PIPE(d)->pass.pp), nse = ts_parallel_num_slots(PIPE(d)->pass.pe);
    if (ns > PIPE_SLOT || nse > PIPE_SLOT) /* the slot was placed after them (build_pipe): 0..ns-1 */
      return ts_error_set(TS_EGRAPH, "pipeline: the passes' %d and %d communicator slots reach the pipeline's slot %d",
                          ns, nse, PIPE_SLOT);
    PIPE(d)->pass.slots = calloc((size_t)ns + 1, sizeof *PIPE(d)->pass.slots);
    PIPE(d)->pass.eslots = calloc((size_t)nse + 1, sizeof *PIPE(d)->pass.eslots);
    if (!PIPE(d)->pass.slots || !PIPE(d)->pass.eslots) return ts_error_set(TS_ENOMEM, "pipeline: out of memory (%d communicators)", ns + nse);
    PIPE(d)->pass.nslots = ns;
    PIPE(d)->pass.neslots = nse;
    if ((rc = ts_dist_slot_comms(PIPE(d)->pass.pp, pp->dpc, NULL, PIPE(d)->pass.slots))) {
      PIPE(d)->pass.nslots = 0;
      return rc;
    }
    if ((rc = ts_dist_slot_comms(PIPE(d)->pass.pe, pp->dpc, NULL, PIPE(d)->pass.eslots))) {
      PIPE(d)->pass.neslots = 0;
      return rc;
    }
  } else if ((rc = ts_comm_grid_axis(d->world, 2, ddims, 1, &pp->pp)) ||
             (rc = ts_comm_grid_axis(d->world, 2, ddims, 0, &pp->dpc))) {
    return rc;
  }
  if ((rc = ts_comm_dup(pp->pp, &pp->p2p))) return rc;
  for (int cc = 0; cc < V && !rc; cc++) {
    pchunk *ch = &pp->ch[cc];
    for (int k = 0; k < ch->K && !rc; k++) {
      rc = ts_plan_set_comm(ch->plan[k], PIPE_SLOT, pp->p2p);
      if (!rc && !pp->semi) rc = ts_plan_set_comm(ch->plan[k], 0, pp->dpc); /* SyncBatchNorm */
      for (int q = 0; !rc && q < PIPE(d)->pass.nslots; q++) rc = ts_plan_set_comm(ch->plan[k], q, PIPE(d)->pass.slots[q]);
    }
    if (!rc) rc = ts_plan_set_comm(ch->plan_e, PIPE_SLOT, pp->p2p);
    if (!rc && !pp->semi) rc = ts_plan_set_comm(ch->plan_e, 0, pp->dpc);
    for (int q = 0; !rc && q < PIPE(d)->pass.neslots; q++) rc = ts_plan_set_comm(ch->plan_e, q, PIPE(d)->pass.eslots[q]);
  }
  return rc;
}

/* The stages, then optimizer sharding's layout over each stage's ranks (dist_zero.c; in dry
 * runs too, for the plan's figures). */
static int build_pipe_zero(ts_dist *d, const ts_dist_model *m) {
  int rc = build_pipe(d, m);
  if (!rc) rc = d->sync.vt->plan(d);
  return rc;
}

static int start_pipe(ts_dist *d) {
  struct ts__pipe *pp = PIPE(d);
  ts_params *p = d->r.params;
  const ts_dist_config *c = &d->cfg;
  int rc = TS_OK;
  if (c->parameter_broadcast && pp->semi)
    return ts_error_set(TS_ECONFIG, "parallel.parameter_broadcast: the parameters are held as slices (each rank "
                        "initialises its own from the counter-based RNG, identical to the whole model's)");
  if (c->parameter_broadcast) { /* the first replica's parameters to the others of the stage */
    rc = ts_comm_broadcast(pp->dpc, ts_params_data(p), ts_params_numel(p), TS_F32, 0);
    if (!rc && ts_params_state_numel(p))
      rc = ts_comm_broadcast(pp->dpc, ts_params_states(p), ts_params_state_numel(p), TS_F32, 0);
    if (rc) return rc;
  }
  /* over the stage's ranks (none when the stage has one), after its last backward (no overlap;
   * ZeRO reduce-scatters over the stage's groups, staged buckets as they complete) */
  d->sync.overlap = 0;
  return d->sync.vt->start(d, pp->dp * pp->sub < 2 ? NULL : pp->dpc, 0);
}

static int train_plans_pipe(const ts_dist *d, ts_plan ***plans) {
  *plans = PIPE(d)->ch[0].plan;
  return PIPE(d)->ch[0].K;
}

/* ---- a step ---- */

static void span(ts_dist *d, const char *name, int comm, double t0) {
  if (d->span) d->span(name, comm, t0, ts_time_now(), d->span_user);
}

static int fwd_bwd_pipe(ts_dist *d, const void *x, const void *y, int64_t step, float *acc, double *loss, float **g) {
  struct ts__pipe *pp = PIPE(d);
  const ts_dist_run *r = &d->r;
  size_t xs, ys;
  ts__dist_row_bytes(d, &xs, &ys);
  float *grads = ts_params_grads(r->params);
  const ts_sched_op *ops;
  int nops = ts_schedule_ops(pp->sched, pp->stage, &ops), rc = TS_OK;
  double sum = 0, t_begin = ts_time_now(), busy = 0;
  pp->wait_s = 0;
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
      if (ch->sg.x != TS_NONE) rc = ts_plan_bind(ch->plan[k], ch->sg.x, (char *)x + (size_t)mi * (size_t)r->micro_batch * xs);
      if (!rc && ch->sg.y != TS_NONE)
        rc = ts_plan_bind(ch->plan[k], ch->sg.y, (char *)y + (size_t)mi * (size_t)r->micro_batch * ys);
      if (!rc) rc = ts_plan_run_range(ch->plan[k], seed, 0, ch->sg.nfwd);
      if (!rc && ch->sg.out != TS_NONE) sum += *(const float *)ts_plan_data(ch->plan[k], ch->sg.out);
      busy += ts_time_now() - t0;
      span(d, "pipeline_forward", 0, t0);
    } else {
      if ((rc = ts__pipe_give_back(ch, mi, &k))) return rc;
      rc = ts_plan_run_range(ch->plan[k], seed, ch->sg.nfwd, -1);
      busy += ts_time_now() - t0;
      span(d, "pipeline_backward", 0, t0);
      if (rc || pp->M < 2) continue;
      double ta = ts_time_now();
      if (!d->sync.vt->accum_numel(d)) { /* the sync object's: reduce-scattered now, the stage's parts accumulate */
        rc = d->sync.vt->accumulate(d, grads, NULL, ch->nbwd++);
        span(d, "grad_accumulate", 1, ta);
        if (rc) rc = ts_error_wrap(rc, "pipeline stage %d, backward of micro-batch %d", op->chunk * pp->P + pp->stage, mi);
        continue;
      }
      /* accumulate the ranges this piece wrote: its first backward of the step copies */
      int first = ch->nbwd++ == 0;
      for (int q = 0; q < ch->nr; q++) {
        float *a = acc + ch->roff[q];
        const float *s = grads + ch->roff[q];
        size_t len = ch->rlen[q];
        if (first) memcpy(a, s, len * sizeof(float));
        else
          for (size_t e = 0; e < len; e++) a[e] += s[e];
      }
      span(d, "grad_accumulate", 0, ta);
    }
    if (rc) rc = ts_error_wrap(rc, "pipeline stage %d, %s of micro-batch %d", op->chunk * pp->P + pp->stage,
                               op->bwd ? "backward" : "forward", mi);
  }
  pp->wall_s = ts_time_now() - t_begin;
  pp->busy_s = busy - pp->wait_s; /* the ops' time minus their blocked receives */
  *loss = sum / (double)pp->M;
  *g = pp->M > 1 && acc ? acc : grads;
  return rc;
}

void ts__pipe_begin(struct ts__pipe *pp) {
  for (int cc = 0; cc < pp->V; cc++) {
    pchunk *ch = &pp->ch[cc];
    ch->nfree = ch->K;
    ch->nbwd = 0;
    for (int k = 0; k < ch->K; k++) ch->free_inst[k] = ch->K - 1 - k;
    for (int mi = 0; mi < pp->M; mi++) ch->inst_of[mi] = -1;
  }
}

int ts__pipe_take(pchunk *ch, int mi, int *k) {
  if (!ch->nfree) return ts_error_set(TS_EINVAL, "pipeline: no free plan instance for micro-batch %d", mi);
  *k = ch->free_inst[--ch->nfree];
  ch->inst_of[mi] = *k;
  return TS_OK;
}

int ts__pipe_give_back(pchunk *ch, int mi, int *k) {
  *k = ch->inst_of[mi];
  if (*k < 0) return ts_error_set(TS_EINVAL, "pipeline: backward of micro-batch %d before its forward", mi);
  ch->free_inst[ch->nfree++] = *k;
  ch->inst_of[mi] = -1;
  return TS_OK;
}

/* Where rank-store entry l's reduced gradient is, elements [*lo, *lo + *n) of it: the whole in g,
 * or where the sync object holds it (ZeRO's work buffer): the whole (replicated) or, sharded over the stage's
 * replicas, the rank's part (the same part on every stage at this replica place: the pipeline sums
 * the parts). */
static float *tied_grad(ts_dist *d, float *g, int l, size_t *lo, size_t *n) {
  ts_shape s = ts_params_shape(d->r.params, l);
  size_t off = ts_params_offset(d->r.params, l), numel = (size_t)ts_shape_numel(&s);
  *lo = 0;
  *n = numel;
  float *w = d->sync.vt->reduced_at(d, g, off, numel, lo, n); /* ZeRO's part of it */
  return w ? w : g + off;
}

static int reduce_pipe(ts_dist *d, float *g) {
  struct ts__pipe *pp = PIPE(d);
  /* the step's last sends (gradients to the previous stage) complete while the stage's replicas
   * reduce; wait for them before the next step reuses nothing but their copies */
  double tf = ts_time_now();
  int frc = pp->p2p ? ts_comm_flush_sends(pp->p2p) : TS_OK;
  span(d, "pipeline_p2p_flush", 1, tf);
  if (frc) return ts_error_wrap(frc, "pipeline: completing the step's sends");
  if (!pp->tied_total) return TS_OK;
  /* every rank of the pipeline takes part with the same layout (pp->tied_off); a rank without
   * one of the parameters adds zeros there */
  float *buf = calloc(pp->tied_total, sizeof(float));
  if (!buf) return ts_error_set(TS_ENOMEM, "pipeline: out of memory");
  for (int t = 0; t < pp->ntied; t++) {
    int l = pp->tied_local[t];
    if (l < 0) continue;
    size_t lo = 0, n = 0;
    float *at = tied_grad(d, g, l, &lo, &n);
    memcpy(buf + pp->tied_off[t] + lo, at, sizeof(float) * n);
  }
  int rc = ts_comm_allreduce(pp->pp, buf, buf, pp->tied_total, TS_F32, TS_REDUCE_SUM);
  for (int t = 0; !rc && t < pp->ntied; t++) {
    int l = pp->tied_local[t];
    if (l < 0) continue;
    size_t lo = 0, n = 0;
    float *at = tied_grad(d, g, l, &lo, &n);
    memcpy(at, buf + pp->tied_off[t] + lo, sizeof(float) * n);
  }
  free(buf);
  return rc ? ts_error_wrap(rc, "pipeline: summing the gradients of parameters several stages hold") : TS_OK;
}

static int set_seed_pipe(ts_dist *d, float seed) {
  struct ts__pipe *pp = PIPE(d);
  for (int cc = 0; cc < pp->V; cc++)
    for (int k = 0; pp->ch[cc].plan && k < pp->ch[cc].K; k++) {
      int rc = ts_plan_set_const(pp->ch[cc].plan[k], pp->ch[cc].seed, seed);
      if (rc) return rc;
    }
  return TS_OK;
}

static int clip_pipe(ts_dist *d, float *g, ts__clip *c) {
  struct ts__pipe *pp = PIPE(d);
  int mine = 0, rc = d->sync.vt->clip(d, g, c, &mine); /* ZeRO's parts and replicated, weighted the same */
  if (rc || mine) return rc;
  ts_params *p = d->r.params;
  double sq = 0;
  for (int i = 0; i < ts_params_count(p); i++) {
    if ((ts_params_flags(p, i) & TS_PARAM_STATE) || !pp->count_once[i]) continue;
    ts_shape s = ts_params_shape(p, i);
    sq += ts_sum_squares(g + ts_params_offset(p, i), (size_t)ts_shape_numel(&s)) * pp->holders_w[i];
  }
  /* every rank's share (the stage's holders of a slice split it), unscaled before narrowing; one
   * all-reduce over every stage: each rank gets the same global sum (an overflow anywhere is
   * everyone's) */
  float f = (float)(sq * c->inv_scale * c->inv_scale);
  rc = d->world ? ts_comm_allreduce(d->world, &f, &f, 1, TS_F32, TS_REDUCE_SUM) : TS_OK;
  if (rc) return ts_error_wrap(rc, "gradient clipping: the global norm over the stages");
  ts__dist_clip_finish(f, g, ts_params_numel(p), c);
  return TS_OK;
}

/* ---- evaluation: the pieces in order; the last one's rows' metrics (16 bytes a row) or logits
 * sent from it to the other stages ---- */
static int eval_pipe(ts_dist *d, const void *x, const ts__eval_out *o) {
  struct ts__pipe *pp = PIPE(d);
  int rc = TS_OK;
  size_t xs, ys;
  ts__dist_row_bytes(d, &xs, &ys);
  for (int cc = 0; cc < pp->V && !rc; cc++) {
    pchunk *ch = &pp->ch[cc];
    if (ch->se.x != TS_NONE) /* the rank's piece of the batch */
      rc = ts_plan_bind(ch->plan_e, ch->se.x,
                        (char *)x + xs * (size_t)(d->cfg.eval_batch / d->r.eval_parts * d->r.eval_index));
    if (!rc) rc = ts_plan_run(ch->plan_e, 0);
    if (!rc && ch->se.out != TS_NONE) {
      const float *lg = ts_plan_data(ch->plan_e, ch->se.out);
      if (!o->rows) memcpy(pp->logits, lg, pp->logits_n * sizeof(float));
      ts__dist_eval_out(d, o->rows ? lg : pp->logits, o);
    }
  }
  if (!rc && pp->pp) rc = ts_comm_flush_sends(pp->p2p);
  if (!rc && pp->pp) rc = ts__dist_pipe_send_eval(pp, o);
  return rc ? ts_error_wrap(rc, "pipeline evaluation") : TS_OK;
}

int ts__dist_pipe_send_eval(struct ts__pipe *pp, const ts__eval_out *o) {
  const int root = pp->last_piece_e % pp->P;
  if (o->rows) return ts_comm_broadcast(pp->pp, o->rows, sizeof(ts__eval_row) * (size_t)o->nr, TS_U8, root);
  *o->logits = pp->logits;
  return ts_comm_broadcast(pp->pp, pp->logits, pp->logits_n, TS_F32, root);
}

static int sync_pipe(ts_dist *d) {
  struct ts__pipe *pp = PIPE(d);
  ts_params *p = d->r.params;
  if (!pp->dpc || pp->dp < 2 || pp->semi || d->cfg.sync_batchnorm || !ts_params_state_numel(p)) return TS_OK;
  int rc = ts_comm_allreduce(pp->dpc, ts_params_states(p), ts_params_states(p), ts_params_state_numel(p), TS_F32,
                             TS_REDUCE_MEAN);
  return rc ? ts_error_wrap(rc, "averaging BatchNorm running statistics over a stage's replicas") : TS_OK;
}

/* ---- checkpoints: each entry broadcast over the pipeline from the stage that holds it ---- */
static int move_one(ts_dist *d, const char *name, float *loc_base, ts_params *lp, int lid, float *whole, size_t n,
                    int owner, int gather) {
  struct ts__pipe *pp = PIPE(d);
  float *loc = lid >= 0 ? loc_base + ts_params_offset(lp, lid) : NULL;
  int sliced = lid >= 0 && ts_params_is_sharded(lp, lid), rc;
  if (!gather) {
    if (sliced) return ts__dist_move_slices(NULL, pp->sub, pp->j, lp, lid, loc, whole, 0);
    if (lid >= 0) memcpy(loc, whole, n * sizeof(float));
    return TS_OK;
  }
  if (sliced && pp->stage == owner) { /* the stage's slices into the whole tensor */
    if ((rc = ts__dist_move_slices(pp->dpc, pp->sub, pp->j, lp, lid, loc, whole, 1))) return rc;
  } else if (lid >= 0 && pp->stage == owner) {
    memcpy(whole, loc, n * sizeof(float));
  }
  if (!pp->pp) return TS_OK;
  rc = ts_comm_broadcast(pp->pp, whole, n, TS_F32, owner);
  return rc ? ts_error_wrap(rc, "checkpoint: collecting '%s' from pipeline stage %d", name, owner) : TS_OK;
}

static int move_pipe(ts_dist *d, ts_params *full, ts_optim *opt, ts_optim *fopt, int gather) {
  struct ts__pipe *pp = PIPE(d);
  ts_params *lp = d->r.params;
  if (gather && !d->world && pp->P > 1 && d->dry == 0)
    return ts_error_set(TS_EINVAL, "checkpoint: collecting the stages needs the job's ranks");
  int nslots = opt && fopt ? ts_optim_num_slots(fopt) : 0, rc = TS_OK;
  /* a sharded optimizer (ZeRO): each slot through one over the rank's store, its parts gathered
   * over the stage's groups first (or cut out of it after) */
  int sharded = d->sync.vt->sharded(d, NULL, NULL);
  float **sl = sharded && nslots ? calloc((size_t)nslots, sizeof(float *)) : NULL;
  if (sharded && nslots && !sl) return ts_error_set(TS_ENOMEM, "checkpoint: out of memory");
  for (int k = 0; sl && k < nslots && !rc; k++) {
    if (!(sl[k] = calloc(ts_params_numel(lp) + 1, sizeof(float)))) rc = ts_error_set(TS_ENOMEM, "checkpoint: out of memory");
    else if (gather) rc = d->sync.vt->move(d, NULL, ts_optim_slot_data(opt, k), sl[k], 1);
  }
  for (int i = 0; i < ts_params_count(full) && !rc; i++) {
    const char *name = ts_params_name(full, i);
    int w = ts_params_find(PIPE(d)->pass.gp, name), lid = ts_params_find(lp, name);
    if (w < 0) {
      rc = ts_error_set(TS_EINVAL, "checkpoint: '%s' is not a parameter of the model", name);
      break;
    }
    ts_shape s = ts_params_shape(full, i);
    size_t n = (size_t)ts_shape_numel(&s);
    int state = ts_params_flags(full, i) & TS_PARAM_STATE;
    float *loc = state ? ts_params_states(lp) : ts_params_data(lp);
    float *wh = (state ? ts_params_states(full) : ts_params_data(full)) + ts_params_offset(full, i);
    rc = move_one(d, name, loc, lp, lid, wh, n, pp->owner[w], gather);
    for (int k = 0; !rc && !state && k < nslots; k++)
      rc = move_one(d, name, sl ? sl[k] : ts_optim_slot_data(opt, k), lp, lid,
                    ts_optim_slot_data(fopt, k) + ts_params_offset(full, i), n, pp->owner[w], gather);
  }
  for (int k = 0; sl && k < nslots; k++) {
    if (!rc && !gather) rc = d->sync.vt->move(d, NULL, ts_optim_slot_data(opt, k), sl[k], 0);
    free(sl[k]);
  }
  free(sl);
  if (rc) return rc;
  if (!rc && opt && fopt) {
    if (gather) ts_optim_set_step(fopt, ts_optim_get_step(opt));
    else ts_optim_set_step(opt, ts_optim_get_step(fopt));
  }
  return rc;
}

static const ts_graph *piece_pipe(const ts_dist *d, int i, const ts_plan **plan) {
  const struct ts__pipe *pp = PIPE(d);
  if (i < 0 || i >= pp->V || !pp->ch[i].sg.g) return NULL;
  if (plan) *plan = pp->ch[i].plan ? pp->ch[i].plan[0] : NULL;
  return pp->ch[i].sg.g;
}

static void activation_bytes_pipe(const ts_dist *d, int measured, int64_t *train, int64_t *eval) {
  const struct ts__pipe *pp = PIPE(d);
  *train = *eval = 0;
  size_t scratch = 0; /* shared by the rank's training plans: the largest need, held once */
  for (int cc = 0; cc < pp->V; cc++) {
    const pchunk *ch = &pp->ch[cc];
    for (int k = 0; ch->plan && k < ch->K; k++) {
      if (!ch->plan[k]) continue;
      *train += (int64_t)(measured ? ts_plan_arena_bytes(ch->plan[k]) : ts_plan_peak_bytes(ch->plan[k]));
      size_t sb = measured ? ts_plan_scratch_arena_bytes(ch->plan[k]) : ts_plan_scratch_bytes(ch->plan[k]);
      if (sb > scratch) scratch = sb;
    }
    if (ch->plan_e) *eval += (int64_t)(measured ? ts_plan_arena_bytes(ch->plan_e) : ts_plan_peak_bytes(ch->plan_e));
  }
  *train += (int64_t)scratch;
}

static int norm_group_pipe(ts_dist *d, ts_comm **c, int *n) {
  struct ts__pipe *pp = PIPE(d);
  if (!pp->semi || !pp->dpc) return 0;
  *c = pp->dpc;
  *n = pp->sub;
  return 1;
}

static void shard_base_pipe(const ts_dist *d, ts_comm **c, int *n, int *r) {
  const struct ts__pipe *pp = PIPE(d);
  *c = pp->dpc;
  *n = pp->semi ? pp->sub : pp->dp;
  *r = pp->semi ? pp->j : pp->dpi;
}

static int tied_pipe(const ts_dist *d, int i) { return PIPE(d)->tied && PIPE(d)->tied[i]; }

static int tied_shardable_pipe(const ts_dist *d) { return !PIPE(d)->semi; }

static float norm_weight_pipe(const ts_dist *d, int i) {
  const struct ts__pipe *pp = PIPE(d);
  return pp->count_once[i] ? pp->holders_w[i] : 0.0f;
}

static int reduce_bytes_pipe(const ts_dist *d, double *bytes) {
  const struct ts__pipe *pp = PIPE(d);
  ts_params *p = d->r.params;
  double red = 0, tied = 0;
  for (int i = 0; i < ts_params_count(p); i++) {
    if (ts_params_flags(p, i) & TS_PARAM_STATE) continue;
    ts_shape s = ts_params_shape(p, i);
    double b = 4.0 * (double)ts_shape_numel(&s);
    if (pp->dp > 1) red += 2.0 * (pp->dp - 1) / pp->dp * b;
    if (pp->tied[i]) tied += 2.0 * (pp->P - 1) / pp->P * b;
  }
  *bytes = red + tied;
  return TS_OK;
}

/* ---- tessera plan ---- */
static int describe_pipe(ts_dist *d, FILE *out) {
  struct ts__pipe *pp = PIPE(d);
  const ts_dist_config *c = &d->cfg;
  int np = pp->P * pp->V;
  double *cost = calloc((size_t)np, sizeof(double));
  if (!cost) return ts_error_set(TS_ENOMEM, "plan: out of memory");
  ts_stage_costs(pp->cg, pp->piece, np, cost);
  double tot = 0;
  for (int k = 0; k < np; k++) tot += cost[k];
  if (pp->semi) {
    size_t need = ts_parallel_report(PIPE(d)->pass.pp, NULL, 0);
    char *rep = malloc(need + 1);
    if (!rep) return ts_error_set(TS_ENOMEM, "plan: out of memory");
    ts_parallel_report(PIPE(d)->pass.pp, rep, need + 1);
    fprintf(out, "inside each stage, semi_auto_parallel on its %d ranks (rank = stage * %d + its place):\n%s\n",
            pp->sub, pp->sub, rep);
    free(rep);
    fprintf(out, "pipeline: %d stages of %d semi_auto_parallel ranks, %s schedule, %d micro-batches of %lld rows\n",
            pp->P, pp->sub, ts_sched_kind_name((ts_sched_kind)c->pipeline_schedule), pp->M,
            (long long)c->micro_batch);
  } else {
    fprintf(out, "pipeline: %d stages x %d data-parallel replicas (rank = replica * %d + stage), %s schedule, %d "
            "micro-batches of %lld rows per replica\n",
            pp->P, pp->dp, pp->P, ts_sched_kind_name((ts_sched_kind)c->pipeline_schedule), pp->M,
            (long long)d->r.micro_batch);
  }
  if (pp->V > 1) fprintf(out, "  %d virtual stages per rank: piece k runs on stage k %% %d\n", pp->V, pp->P);
  d->sync.vt->describe(d, out);
  fprintf(out, "  %-6s %-44s %-44s %8s %6s\n", "piece", "first op", "last op", "ops", "cost");
  int n = ts_graph_num_nodes(pp->cg);
  for (int k = 0; k < np; k++) {
    int first = -1, last = -1, cnt = 0;
    for (int j = 0; j < n; j++)
      if (pp->piece[j] == k) {
        if (first < 0) first = j;
        last = j;
        cnt++;
      }
    fprintf(out, "  %-6d %-44s %-44s %8d %5.1f%%\n", k, first >= 0 ? ts_graph_node_name(pp->cg, first) : "-",
            last >= 0 ? ts_graph_node_name(pp->cg, last) : "-", cnt, tot > 0 ? 100 * cost[k] / tot : 0);
  }
  free(cost);
  ts_stage_edge *e = NULL;
  int ne = 0;
  int rc = ts_stage_edges(pp->cg, pp->piece, &e, &ne);
  if (rc) return rc;
  int64_t bytes = 0;
  for (int t = 0; t < ne; t++) bytes += e[t].bytes * (e[t].grad ? 2 : 1);
  free(e);
  fprintf(out, "  cut edges %d; p2p per micro-batch over the whole pipeline %.1f KiB (activations forward, their "
          "gradients back); this rank sends %.1f KiB of activations per micro-batch\n",
          ne, (double)bytes / 1024, (double)pp->p2p_bytes / 1024);
  for (int cc = 0; cc < pp->V; cc++)
    fprintf(out, "  this rank, piece %d: %d activation set%s in flight (plan instances)\n", cc * pp->P + pp->stage,
            pp->ch[cc].K, pp->ch[cc].K == 1 ? "" : "s");
  ts_sched_sim sim;
  if (!ts_schedule_simulate(pp->sched, NULL, NULL, 0, &sim))
    fprintf(out, "  bubble %.1f%% of the step ((P-1)/(V*M+P-1) = %.1f%%)\n", 100 * sim.bubble,
            100 * ts_schedule_bubble_formula((ts_sched_kind)c->pipeline_schedule, pp->P, pp->M, pp->V));
  return ts_schedule_draw(pp->sched, out, 120);
}

static void free_pipe(ts_dist *d) {
  struct ts__pipe *pp = PIPE(d);
  if (pp) {
    for (int cc = 0; cc < pp->V; cc++) {
      pchunk *ch = &pp->ch[cc];
      for (int k = 0; ch->plan && k < ch->K; k++)
        if (ch->plan[k] != d->r.plan) ts_plan_free(ch->plan[k]);
      if (ch->plan_e != d->r.plan_e) ts_plan_free(ch->plan_e);
      free(ch->plan);
      free(ch->free_inst);
      free(ch->inst_of);
      free(ch->roff);
      free(ch->rlen);
      ts_graph_free(ch->sg.g);
      ts_graph_free(ch->se.g);
      ts_stage_graph_release(&ch->sg);
      ts_stage_graph_release(&ch->se);
    }
    ts_schedule_free(pp->sched);
    ts_comm_free(pp->p2p);
    ts_comm_free(pp->pp);
    ts_comm_free(pp->dpc);
    free(pp->piece);
    free(pp->piece_e);
    free(pp->owner);
    free(pp->tied);
    free(pp->tied_local);
    free(pp->tied_off);
    free(pp->count_once);
    free(pp->logits);
    free(pp->holders_w);
    ts__semi_release(&pp->pass);
    free(pp);
  }
  d->priv = NULL;
  ts_params_free(d->r.params);
}

/* Stages of the pipeline (the configured number before the build). */
static int stages_pipe(const ts_dist *d) { return PIPE(d) ? PIPE(d)->P : d->cfg.pipeline_stages; }

/* The strategies in force inside the stages (semi_auto_parallel's pass), NULL otherwise. */
static const ts_strategy_set *strategies_pipe(const ts_dist *d) {
  return PIPE(d) && PIPE(d)->pass.pp ? ts_parallel_strategies(PIPE(d)->pass.pp) : NULL;
}

/* The cut as parallel.stages rules (after the build; none before). */
static int stage_rules_pipe(const ts_dist *d, ts_op_text **rules, int *n) {
  const struct ts__pipe *pp = PIPE(d);
  *rules = NULL;
  *n = 0;
  return pp && pp->piece ? ts_stage_rules_of(pp->cg, pp->piece, pp->P * pp->V, rules, n) : TS_OK;
}

/* The whole model's store the stages were cut from. */
static ts_params *whole_pipe(const ts_dist *d) { return PIPE(d) ? PIPE(d)->pass.gp : NULL; }

void ts__pipe_manifest_key(const ts_dist_config *c, char *buf, size_t cap) {
  snprintf(buf, cap, "\"pipeline_stages\": %d", c->pipeline_stages > 1 ? c->pipeline_stages : 1);
}

const ts_dist_vt ts__dist_pipeline = {
    .name = "pipeline",
    .world = 1,
    .check = check_pipe,
    .build = build_pipe_zero,
    .start = start_pipe,
    .sync_states = sync_pipe,
    .describe = describe_pipe,
    .free = free_pipe,
    .forward_backward = fwd_bwd_pipe,
    .eval = eval_pipe,
    .reduce = reduce_pipe,
    .clip = clip_pipe,
    .move = move_pipe,
    .stages = stages_pipe,
    .stage_rules = stage_rules_pipe,
    .set_seed = set_seed_pipe,
    .reduce_bytes = reduce_bytes_pipe,
    .activation_bytes = activation_bytes_pipe,
    .train_piece = piece_pipe,
    .strategies = strategies_pipe,
    .whole_params = whole_pipe,
    .times = times_pipe,
    .train_plans = train_plans_pipe,
    .shard_base = shard_base_pipe,
    .tied = tied_pipe,
    .tied_shardable = tied_shardable_pipe,
    .norm_weight = norm_weight_pipe,
    .norm_group = norm_group_pipe,
};
