/* The trainer under semi_auto_parallel: the zoo (or custom) model is built whole, the parallel
 * pass (include/tessera/parallel.h) cuts it for this rank by parallel.strategies, gradients are
 * summed over the ranks holding the same slice, and checkpoints hold the whole model (gathered
 * from the slices; loading re-cuts them), so they are interchangeable with stand_alone and
 * data_parallel ones and across device counts and strategies. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"

int ts__semi_config_error(int rc) {
  if (rc != TS_EINVAL && rc != TS_ESHAPE && rc != TS_EUNSUPPORTED) return rc;
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", ts_last_error());
  return ts_error_set(TS_ECONFIG, "%s", msg);
}

int ts__semi_strategies(const ts_config *c, int ndevices, ts_strategy_set **out) {
  int rc;
  *out = NULL;
  if (c->parallel.strategy_ckpt_load_file[0])
    rc = ts_strategy_set_load(c->parallel.strategy_ckpt_load_file, ndevices, out);
  else
    rc = ts_strategy_set_create(ndevices, 0, out);
  if (rc) return ts__semi_config_error(ts_error_wrap(rc, "parallel.strategy_ckpt_load_file"));
  for (int i = 0; i < c->parallel.strategies.n; i++) {
    rc = ts_strategy_set_put_text(*out, c->parallel.strategies.v[i].op, c->parallel.strategies.v[i].text);
    if (rc) {
      ts_strategy_set_free(*out);
      *out = NULL;
      return ts__semi_config_error(ts_error_wrap(rc, "parallel.strategies.%s", c->parallel.strategies.v[i].op));
    }
  }
  return TS_OK;
}

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

int ts__semi_build(ts_trainer *t) {
  const ts_config *c = &t->cfg;
  ts_strategy_set *set = NULL;
  int rc = ts__semi_strategies(c, t->size, &set);
  if (rc) return rc;
  ts_val x, y, loss, logits, xe, le;
  if ((rc = ts_params_create(&t->gp)) || (rc = ts_graph_create(&t->gg)) || (rc = ts_graph_create(&t->gge)))
    goto done;
  ts_graph_set_training(t->gge, 0);
  /* the whole model, global batch */
  int64_t mb = c->train.micro_batch_size, eb = c->train.eval_batch_size;
  ts_nn nn = {t->gg, t->gp};
  x = ts_input(t->gg, "x", t->sample_dtype, ts__batch_shape(mb, &t->sample_shape));
  y = t->text ? ts_input(t->gg, "y", TS_I32, ts__batch_shape(mb, &t->sample_shape))
              : ts_input(t->gg, "y", TS_I32, ts_shape1(mb));
  ts_val_set_requires_grad(t->gg, x, 0);
  rc = ts__train_build_model(t, &nn, x, y, &logits, &loss);
  if (rc || ts_graph_status(t->gg)) {
    rc = rc && !ts_graph_status(t->gg) ? rc : ts__graph_fail_msg(t->gg, "model");
    goto done;
  }
  ts_nn nne = {t->gge, t->gp};
  xe = ts_input(t->gge, "x", t->sample_dtype, ts__batch_shape(eb, &t->sample_shape));
  rc = ts__train_build_model(t, &nne, xe, TS_NONE, &le, NULL);
  if (rc || ts_graph_status(t->gge)) {
    rc = rc && !ts_graph_status(t->gge) ? rc : ts__graph_fail_msg(t->gge, "eval model");
    goto done;
  }
  /* the pass: training graph by the user's strategies, evaluation graph by the ones in force */
  ts_parallel_config pc = {t->size, t->rank, set, c->parallel.full_batch ? 1 : 0, 0};
  if ((rc = ts_parallel_run(t->gg, t->gp, &loss, 1, NULL, &pc, &t->pp))) {
    rc = ts__semi_config_error(rc);
    goto done;
  }
  int parts, index;
  ts_parallel_input_piece(t->pp, x, &parts, &index);
  if (mb % parts || eb % parts) {
    rc = ts_error_set(TS_ECONFIG,
                      "semi_auto_parallel: the batch is cut in %d pieces, which must divide "
                      "train.micro_batch_size (%lld) and train.eval_batch_size (%lld)",
                      parts, (long long)mb, (long long)eb);
    goto done;
  }
  int one = 1;
  ts_parallel_config pce = {t->size, t->rank, ts_parallel_strategies(t->pp), parts, 1};
  if ((rc = ts_parallel_run(t->gge, t->gp, &le, 1, &one, &pce, &t->pe))) {
    rc = ts_error_wrap(rc, "evaluation graph");
    goto done;
  }
  t->g = ts_parallel_graph(t->pp);
  t->params = ts_parallel_params(t->pp);
  t->ge = ts_parallel_graph(t->pe);
  if ((rc = same_params(t->params, ts_parallel_params(t->pe)))) goto done;
  t->x = ts_parallel_value(t->pp, x);
  t->y = ts_parallel_value(t->pp, y);
  t->loss = ts_parallel_value(t->pp, loss);
  t->xe = ts_parallel_value(t->pe, xe);
  t->logits_e = ts_parallel_value(t->pe, le);
  t->dshards = parts;
  t->dshard = index;
  t->mb = mb / parts;
  ts_parallel_input_piece(t->pe, xe, &t->eparts, &t->eindex);
  t->seed = ts_parallel_loss_seed(t->pp, loss);
  if (ts_graph_backward(t->g, t->loss, t->seed / (float)t->accum)) {
    rc = ts__graph_fail_msg(t->g, "backward");
    goto done;
  }
  if ((rc = ts__train_plans(t))) goto done;
  t->nslots = ts_parallel_num_slots(t->pp);
  t->neslots = ts_parallel_num_slots(t->pe);
  if ((rc = ts_dist_slot_comms(t->pp, t->comm, t->plan, t->slots))) {
    t->nslots = 0;
    goto done;
  }
  if ((rc = ts_dist_slot_comms(t->pe, t->comm, t->plan_e, t->eslots))) {
    t->neslots = 0;
    goto done;
  }
  if (c->parallel.strategy_ckpt_save_file[0] && t->rank == 0) {
    rc = ts_strategy_set_save(ts_parallel_strategies(t->pp), c->parallel.strategy_ckpt_save_file);
    if (rc) rc = ts_error_wrap(rc, "parallel.strategy_ckpt_save_file");
  }
done:
  ts_strategy_set_free(set);
  return rc;
}

int ts__semi_setup_reduction(ts_trainer *t) {
  const ts_config *c = &t->cfg;
  static const ts_dtype wire[] = {TS_F32, TS_BF16, TS_F16};
  /* the seed makes every rank's gradient its part of the whole: sum them */
  ts_grad_reducer_config rc_ = {c->parallel.bucket_size_mb, 0, wire[c->parallel.comm_dtype]};
  int rc = ts_grad_reducer_create(t->comm, t->params, t->g, &rc_, &t->red);
  if (rc) return rc;
  t->overlap = c->parallel.overlap && t->accum == 1;
  if (t->overlap) rc = ts_grad_reducer_attach(t->red, t->plan);
  return rc;
}

int ts__semi_clip(ts_trainer *t, float *grads, float max_norm, float *norm) {
  *norm = 0;
  if (!(max_norm > 0)) return TS_OK;
  /* each slice counted once: a parameter n ranks hold weighs 1/n on each */
  int np = ts_params_count(t->params);
  int *part = malloc(sizeof(int) * (size_t)t->size);
  if (!part) return ts_error_set(TS_ENOMEM, "gradient clipping: out of memory");
  double sq = 0;
  for (int i = 0; i < np; i++) {
    if (ts_params_flags(t->params, i) & TS_PARAM_STATE) continue;
    int nparts = ts_params_rank_partition(t->params, i, t->size, part);
    if (nparts < 0) {
      free(part);
      return nparts;
    }
    int holders = 0;
    for (int r = 0; r < t->size; r++) holders += part[r] == part[t->rank];
    ts_shape s = ts_params_shape(t->params, i);
    sq += ts_sum_squares(grads + ts_params_offset(t->params, i), (size_t)ts_shape_numel(&s)) / holders;
  }
  free(part);
  float f = (float)sq;
  int rc = ts_comm_allreduce(t->comm, &f, &f, 1, TS_F32, TS_REDUCE_SUM);
  if (rc) return ts_error_wrap(rc, "gradient clipping: the global norm");
  *norm = sqrtf(f);
  float c = ts_clip_coef(*norm, max_norm);
  if (c != 1.0f) ts_scale_f32(grads, ts_params_numel(t->params), c);
  return TS_OK;
}

/* ---- whole-model checkpoints from slices ---- */

/* A store of the whole parameters (names, shapes, initialisers: of the global graph's store under
 * semi_auto_parallel; of the slices' own shapes under hybrid_parallel). */
static int full_store(ts_trainer *t, ts_params **out) {
  int rc = ts_params_create(out);
  ts_params *src = t->gp ? t->gp : t->params;
  for (int i = 0; i < ts_params_count(src) && !rc; i++) {
    ts_shape sh = t->gp ? ts_params_shape(src, i) : ts_params_init_shape(src, i);
    int id = ts_params_add(*out, ts_params_name(src, i), sh, ts_params_init_of(src, i), ts_params_flags(src, i));
    if (id < 0) rc = id;
  }
  if (!rc) rc = ts_params_alloc(*out, t->cfg.train.seed);
  if (rc) {
    ts_params_free(*out);
    *out = NULL;
  }
  return rc;
}

/* For each entry of kind `states` (0 trainable, 1 state): whole[...] <-> the rank's slice loc[...].
 * Gathering is collective (every rank's slice travels); scattering is local. */
static int move_flat(ts_trainer *t, ts_params *full, float *loc, float *whole, int states, int gather) {
  ts_params *lp = t->params;
  int N = t->size, rc = TS_OK;
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
    const ts_layout *L = ts_params_layout(lp, i);
    ts_shape gs = ts_params_global_shape(lp, i); /* same memory as the full shape */
    float *all = NULL;
    if (gather) {
      all = malloc(sizeof(float) * (size_t)(n * N));
      if (!all) return ts_error_set(TS_ENOMEM, "checkpoint: out of memory gathering '%s'", ts_params_name(lp, i));
      rc = ts_comm_allgather(t->comm, l, all, (size_t)n, TS_F32);
      if (rc) {
        free(all);
        return ts_error_wrap(rc, "checkpoint: gathering '%s'", ts_params_name(lp, i));
      }
    }
    for (int r = gather ? 0 : t->rank; r < (gather ? N : t->rank + 1); r++) {
      int64_t off[TS_MAX_DIMS], idx[TS_MAX_DIMS] = {0};
      ts_layout_offsets(L, &gs, r, off);
      const float *src = gather ? all + r * n : NULL;
      for (int64_t e = 0; e < n; e++) {
        int64_t gi = 0;
        for (int d = 0; d < gs.ndim; d++) gi = gi * gs.dims[d] + off[d] + idx[d];
        if (gather) w[gi] = src[e];
        else l[e] = w[gi];
        for (int d = ls.ndim - 1; d >= 0; d--) {
          if (++idx[d] < ls.dims[d]) break;
          idx[d] = 0;
        }
      }
    }
    free(all);
  }
  return rc;
}

static int move_all(ts_trainer *t, ts_params *full, ts_optim *fopt, int gather) {
  int rc = move_flat(t, full, ts_params_data(t->params), ts_params_data(full), 0, gather);
  if (!rc && ts_params_state_numel(t->params))
    rc = move_flat(t, full, ts_params_states(t->params), ts_params_states(full), 1, gather);
  for (int k = 0; fopt && !rc && k < ts_optim_num_slots(fopt); k++)
    rc = move_flat(t, full, ts_optim_slot_data(t->opt, k), ts_optim_slot_data(fopt, k), 0, gather);
  return rc;
}

int ts__semi_save(ts_trainer *t, const char *path, int write) {
  ts_params *full = NULL;
  ts_optim *fopt = NULL;
  ts_optim_segment *segs = NULL;
  int nseg = 0;
  int rc = full_store(t, &full);
  if (!rc && t->opt) rc = ts__train_optim(&t->cfg, full, &fopt, &segs, &nseg); /* slots line up with full */
  if (!rc) rc = move_all(t, full, fopt, 1);
  if (!rc && write) {
    if (fopt) ts_optim_set_step(fopt, ts_optim_get_step(t->opt));
    ts_ckpt_state st;
    ts__trainer_ckpt_state(t, &st);
    st.params = full;
    st.optim = fopt;
    rc = ts_ckpt_save(path, &st);
  }
  ts_optim_free(fopt);
  free(segs);
  ts_params_free(full);
  return rc;
}

int ts__semi_load(ts_trainer *t, const char *path, int strict, int with_optimizer) {
  ts_params *full = NULL;
  ts_optim *fopt = NULL;
  ts_optim_segment *segs = NULL;
  int nseg = 0;
  int rc = full_store(t, &full);
  if (!rc && with_optimizer && t->opt) rc = ts__train_optim(&t->cfg, full, &fopt, &segs, &nseg);
  ts_ckpt_state st;
  if (!rc) {
    ts__trainer_ckpt_state(t, &st);
    st.params = full;
    st.optim = fopt;
    if (!with_optimizer) st.config_hash = 0;
    rc = ts_ckpt_load(path, &st, strict);
  }
  if (!rc) rc = move_all(t, full, fopt, 0);
  if (!rc && fopt) ts_optim_set_step(t->opt, ts_optim_get_step(fopt));
  if (!rc && with_optimizer) {
    t->step = st.step;
    t->epoch = st.epoch;
    t->batch = st.batch_index;
    if (t->train_pipe) rc = ts_pipeline_seek(t->train_pipe, t->epoch, t->batch);
  }
  ts_optim_free(fopt);
  free(segs);
  ts_params_free(full);
  return rc;
}

void ts__semi_free(ts_trainer *t) {
  for (int s = 0; s < t->nslots; s++) ts_comm_free(t->slots[s]);
  for (int s = 0; s < t->neslots; s++) ts_comm_free(t->eslots[s]);
  ts_parallel_free(t->pp);
  ts_parallel_free(t->pe);
  ts_graph_free(t->gg);
  ts_graph_free(t->gge);
  ts_params_free(t->gp);
  t->pp = t->pe = NULL;
}
