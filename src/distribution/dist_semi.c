/* semi_auto_parallel as a distribution object (src/distribution/dist.h): the model is built
 * whole (global shapes), the parallel pass (src/parallel/parallel.h) cuts it for this rank by
 * the strategies, the batch piece the rank reads is the one the pass gives its inputs, gradients
 * are summed over the ranks holding the same slice, and every communicator slot of the rank's
 * graphs gets its group. */
#include <stdlib.h>
#include <string.h>

#include "dist_impl.h"
#include "semi.h"

/* The evaluation graph must hold every parameter exactly as training does: it runs on the
 * training store's memory. */
static int same_params(ts_params *a, ts_params *b) {
  if (ts_params_count(a) != ts_params_count(b))
    return ts_error_set(TS_EGRAPH, "semi_auto_parallel: the evaluation graph has %d parameters, training %d",
                        ts_params_count(b), ts_params_count(a));
  for (int i = 0; i < ts_params_count(a); i++) {
    ts_shape sa = ts_params_shape(a, i), sb = ts_params_shape(b, i);
    const ts_layout *la = ts_params_layout(a, i), *lb = ts_params_layout(b, i);
    int same = !strcmp(ts_params_name(a, i), ts_params_name(b, i)) && ts_shape_equal(&sa, &sb) &&
               (!la) == (!lb) && (!la || ts_layout_equal(la, lb));
    if (!same) {
      char x[160] = "whole", y[160] = "whole";
      if (la) ts_layout_str(la, x, sizeof x);
      if (lb) ts_layout_str(lb, y, sizeof y);
      return ts_error_set(TS_EGRAPH,
                          "semi_auto_parallel: parameter '%s' is cut as %s for training but as %s for "
                          "evaluation (give its operators strategies that do not depend on the batch)",
                          ts_params_name(a, i), x, y);
    }
  }
  return TS_OK;
}

static ts__semi *semi_of(const ts_dist *d) { return d->priv; }

static int build_semi(ts_dist *d, const ts_dist_model *m) {
  (void)m;
  const ts_dist_config *c = &d->cfg;
  ts__semi *S = calloc(1, sizeof *S);
  if (!S) return ts_error_set(TS_ENOMEM, "semi_auto_parallel: out of memory");
  d->priv = S;
  ts_dist_run *r = &d->r;
  int64_t mb = c->micro_batch, eb = c->eval_batch;
  ts_val x, y, loss, logits, xe, le;
  int rc;
  if ((rc = ts_params_create(&S->gp)) || (rc = ts_graph_create(&S->gg)) || (rc = ts_graph_create(&S->gge)))
    return rc;
  ts_graph_set_training(S->gge, 0);
  /* the whole model, global batch */
  ts_nn nn = {S->gg, S->gp};
  ts__dist_inputs(d, S->gg, mb, 1, &x, &y);
  if ((rc = ts__dist_build_model(d, &nn, &x, &y, &logits, &loss))) return rc;
  ts_nn nne = {S->gge, S->gp};
  ts__dist_inputs(d, S->gge, eb, 0, &xe, NULL);
  if ((rc = ts__dist_build_model(d, &nne, &xe, NULL, &le, NULL))) return rc;
  /* the pass: training graph by the user's strategies, evaluation graph by the ones in force */
  ts_parallel_config pc = {r->size, r->rank, d->model.strategies, c->full_batch ? 1 : 0, 0, c->sequence_parallel};
  if ((rc = ts_parallel_run(S->gg, S->gp, &loss, 1, NULL, &pc, &S->pp))) return ts_error_as_config(rc);
  int parts, index;
  ts_parallel_input_piece(S->pp, x, &parts, &index);
  if (mb % parts || eb % parts)
    return ts_error_set(TS_ECONFIG,
                        "semi_auto_parallel: the batch is cut in %d pieces, which must divide "
                        "train.micro_batch_size (%lld) and train.eval_batch_size (%lld)",
                        parts, (long long)mb, (long long)eb);
  int one = 1;
  ts_parallel_config pce = {r->size, r->rank, ts_parallel_strategies(S->pp), parts, 1, c->sequence_parallel};
  if ((rc = ts_parallel_run(S->gge, S->gp, &le, 1, &one, &pce, &S->pe)))
    return ts_error_wrap(rc, "evaluation graph");
  r->g = ts_parallel_graph(S->pp);
  r->params = ts_parallel_params(S->pp);
  r->ge = ts_parallel_graph(S->pe);
  if ((rc = same_params(r->params, ts_parallel_params(S->pe)))) return rc;
  r->x = ts_parallel_value(S->pp, x);
  r->y = ts_parallel_value(S->pp, y);
  r->loss = ts_parallel_value(S->pp, loss);
  r->xe = ts_parallel_value(S->pe, xe);
  r->logits = ts_parallel_value(S->pe, le);
  r->data_parts = parts;
  r->data_index = index;
  r->micro_batch = mb / parts;
  r->eval_split = 0; /* every rank reads every evaluation batch and feeds its piece */
  ts_parallel_input_piece(S->pe, xe, &r->eval_parts, &r->eval_index);
  r->sliced = 1;
  /* the step's loss: each rank's part summed (seeded copies counted once); gradients summed */
  float pseed = ts_parallel_loss_seed(S->pp, loss);
  d->seed = pseed / (float)c->accum;
  d->loss_op = TS_REDUCE_SUM;
  d->loss_weight = pseed;
  d->sync.mean = 0;
  if ((rc = ts__dist_backward(d))) return rc;
  if ((rc = ts__dist_plans(d)) || !d->world) return rc;
  int ns = ts_parallel_num_slots(S->pp), nse = ts_parallel_num_slots(S->pe);
  S->slots = calloc((size_t)ns + 1, sizeof *S->slots);
  S->eslots = calloc((size_t)nse + 1, sizeof *S->eslots);
  if (!S->slots || !S->eslots) return ts_error_set(TS_ENOMEM, "semi_auto_parallel: out of memory (%d communicators)", ns + nse);
  S->nslots = ns;
  if ((rc = ts_dist_slot_comms(S->pp, d->world, r->plan, S->slots))) {
    S->nslots = 0;
    return rc;
  }
  S->neslots = nse;
  if ((rc = ts_dist_slot_comms(S->pe, d->world, r->plan_e, S->eslots))) S->neslots = 0;
  return rc;
}

/* The pass, then the sync object's layout (ZeRO's shards over the slices' data-parallel repeats;
 * in dry runs too, for the plan's figures). */
static int build_semi_zero(ts_dist *d, const ts_dist_model *m) {
  int rc = build_semi(d, m);
  if (!rc) rc = d->sync.vt->plan(d);
  return rc;
}

static int describe_semi(ts_dist *d, FILE *out) {
  ts_parallel *pp = semi_of(d)->pp;
  size_t need = ts_parallel_report(pp, NULL, 0);
  char *rep = malloc(need + 1);
  if (!rep) return ts_error_set(TS_ENOMEM, "plan: out of memory");
  ts_parallel_report(pp, rep, need + 1);
  fputs(rep, out);
  free(rep);
  d->sync.vt->describe(d, out);
  return TS_OK;
}

void ts__semi_release(ts__semi *S) {
  for (int s = 0; s < S->nslots; s++) ts_comm_free(S->slots[s]);
  for (int s = 0; s < S->neslots; s++) ts_comm_free(S->eslots[s]);
  free(S->slots);
  free(S->eslots);
  ts_parallel_free(S->pp); /* owns the rank's graphs and store */
  ts_parallel_free(S->pe);
  ts_graph_free(S->gg);
  ts_graph_free(S->gge);
  ts_params_free(S->gp);
}

static void free_semi(ts_dist *d) {
  if (d->priv) ts__semi_release(semi_of(d));
  free(d->priv);
  d->priv = NULL;
}

static const ts_strategy_set *strategies_semi(const ts_dist *d) {
  return semi_of(d) && semi_of(d)->pp ? ts_parallel_strategies(semi_of(d)->pp) : NULL;
}

static ts_params *whole_semi(const ts_dist *d) { return semi_of(d) ? semi_of(d)->gp : NULL; }

const ts_dist_vt ts__dist_semi_auto = {.name = "semi_auto_parallel", .world = 1,
                                       .build = build_semi_zero, .start = ts__dist_start_world,
                                       .describe = describe_semi, .free = free_semi,
                                       .strategies = strategies_semi, .whole_params = whole_semi};
