/* `tessera plan`: the parallel pass run for one rank of a job that need not exist, and the
 * figures a user sizes a job by (include/tessera/train.h, ts_trainer_plan). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"

static const char *human(double bytes, char *buf, size_t cap) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int k = 0;
  while (bytes >= 1024 && k < 4) {
    bytes /= 1024;
    k++;
  }
  snprintf(buf, cap, k ? "%.2f %s" : "%.0f %s", bytes, u[k]);
  return buf;
}

/* The training step's graph (forward + backward) of one rank, planned: activation arena bytes. */
static int step_memory(ts_graph *g, ts_params *p, ts_val loss, float seed, size_t *arena) {
  int rc = ts_graph_backward(g, loss, seed);
  if (rc) return ts_error_set(rc, "plan: backward: %s", ts_graph_error(g));
  ts_val keep[1024];
  int nk = 0;
  if ((rc = ts_params_attach_grads(p, g, keep, 1023, &nk))) return rc;
  keep[nk++] = loss;
  ts_plan *plan;
  if ((rc = ts_plan_create(g, keep, nk, &plan))) return rc;
  *arena = ts_plan_peak_bytes(plan);
  ts_plan_free(plan);
  return TS_OK;
}

static int optim_slots(ts_optim_kind k) {
  return k == TS_OPTIM_SGD ? 0 : k == TS_OPTIM_MOMENTUM ? 1 : 2;
}

int ts_trainer_plan(const ts_config *cfg, int ndevices, int rank, ts_model_fn model, void *user,
                    char **text) {
  *text = NULL;
  if (ndevices < 1 || rank < 0 || rank >= ndevices)
    return ts_error_set(TS_EINVAL, "plan: rank %d of %d devices", rank, ndevices);
  ts_trainer *t = calloc(1, sizeof *t);
  if (!t) return ts_error_set(TS_ENOMEM, "plan: out of memory");
  t->cfg = *cfg;
  t->model_fn = model;
  t->model_user = user;
  t->rank = rank;
  t->size = ndevices;
  char *mp = NULL;
  size_t mn = 0;
  FILE *b = open_memstream(&mp, &mn); /* the report */
  if (!b) {
    free(t);
    return ts_error_set(TS_ENOMEM, "plan: out of memory");
  }
  ts_strategy_set *set = NULL;
  ts_graph *g = NULL, *g1 = NULL;
  ts_params *gp = NULL, *gp1 = NULL;
  ts_parallel *pp = NULL;
  int rc = ts_config_validate(&t->cfg);
  if (!rc) rc = ts__train_sources(&t->cfg, &t->train_src, &t->test_src);
  if (!rc) {
    rc = ts_config_transforms(&t->cfg, 0, t->tf_test, TS_CFG_MAX_TRANSFORMS);
    if (rc >= 0) {
      t->ntf_test = rc;
      rc = TS_OK;
    }
  }
  if (!rc) rc = ts__train_probe(t);
  if (!rc) rc = ts__semi_strategies(cfg, ndevices, &set);
  int64_t mb = cfg->train.micro_batch_size;
  ts_val x[2], y[2], loss[2], logits;
  for (int k = 0; k < 2 && !rc; k++) { /* k 0: the whole model to cut; 1: one process, for comparison */
    ts_graph **gg = k ? &g1 : &g;
    ts_params **pk = k ? &gp1 : &gp;
    if ((rc = ts_graph_create(gg)) || (rc = ts_params_create(pk))) break;
    ts_nn nn = {*gg, *pk};
    x[k] = ts_input(*gg, "x", t->sample_dtype, ts__batch_shape(mb, &t->sample_shape));
    y[k] = t->text ? ts_input(*gg, "y", TS_I32, ts__batch_shape(mb, &t->sample_shape))
                   : ts_input(*gg, "y", TS_I32, ts_shape1(mb));
    ts_val_set_requires_grad(*gg, x[k], 0);
    rc = ts__train_build_model(t, &nn, x[k], y[k], &logits, &loss[k]);
    if (!rc && ts_graph_status(*gg)) rc = ts__graph_fail_msg(*gg, "model");
  }
  ts_parallel_config pc = {ndevices, rank, set, cfg->parallel.full_batch ? 1 : 0, 0};
  if (!rc && (rc = ts_parallel_run(g, gp, &loss[0], 1, NULL, &pc, &pp))) rc = ts__semi_config_error(rc);
  if (!rc) {
    char h1[32], h2[32], h3[32];
    int parts, index;
    ts_parallel_input_piece(pp, x[0], &parts, &index);
    char piece[96] = "every rank reads the whole batch";
    if (parts > 1) snprintf(piece, sizeof piece, "the batch cut in %d pieces; this rank reads piece %d", parts, index);
    fprintf(b, "plan: %s on %s, semi_auto_parallel on %d devices, rank %d shown; micro-batch %lld (%s)\n\n",
           model ? "custom model" : ts_model_kind_name(cfg->model.name), ts_data_kind_name(cfg->data.name),
           ndevices, rank, (long long)mb, piece);
    size_t need = ts_parallel_report(pp, NULL, 0);
    char *rep = malloc(need + 1);
    if (!rep) rc = ts_error_set(TS_ENOMEM, "plan: out of memory");
    else {
      ts_parallel_report(pp, rep, need + 1);
      fprintf(b, "%s", rep);
      free(rep);
    }
    ts_graph *lg = ts_parallel_graph(pp);
    ts_params *lp = ts_parallel_params(pp);
    float seed = ts_parallel_loss_seed(pp, loss[0]);
    size_t arena = 0, arena1 = 0;
    if (!rc) rc = step_memory(lg, lp, ts_parallel_value(pp, loss[0]), seed, &arena);
    if (!rc) rc = step_memory(g1, gp1, loss[1], 1.0f, &arena1);
    if (!rc) {
      int64_t accum = cfg->train.batch_size / cfg->train.micro_batch_size;
      int64_t fwd = ts_parallel_comm_bytes(lg, 0), bwd = ts_parallel_comm_bytes(lg, 1);
      /* gradient reduction: each parameter over the ranks holding its slice */
      double red = 0;
      int *part = malloc(sizeof(int) * (size_t)ndevices);
      for (int i = 0; part && i < ts_params_count(lp); i++) {
        if (ts_params_flags(lp, i) & TS_PARAM_STATE) continue;
        if (ts_params_rank_partition(lp, i, ndevices, part) < 0) continue;
        int h = 0;
        for (int r = 0; r < ndevices; r++) h += part[r] == part[rank];
        ts_shape s = ts_params_shape(lp, i);
        if (h > 1) red += 2.0 * (h - 1) / h * (double)ts_shape_numel(&s) * 4;
      }
      free(part);
      double pb = (double)ts_params_numel(lp) * 4, pb1 = (double)ts_params_numel(gp1) * 4;
      int slots = optim_slots(cfg->optimizer.name);
      fprintf(b, "\nmemory per rank (rank %d) vs one process:\n", rank);
      fprintf(b, "  parameters           %12s  of %12s  (%.3f)\n", human(pb, h1, sizeof h1), human(pb1, h2, sizeof h2), pb / pb1);
      fprintf(b, "  gradients            %12s  of %12s\n", human(pb, h1, sizeof h1), human(pb1, h2, sizeof h2));
      fprintf(b, "  optimizer state      %12s  of %12s  (%s: %d slot%s)\n", human(pb * slots, h1, sizeof h1),
             human(pb1 * slots, h2, sizeof h2), ts_optim_kind_name(cfg->optimizer.name), slots, slots == 1 ? "" : "s");
      fprintf(b, "  activations (step)   %12s  of %12s  (planned arena of forward + backward, micro-batch %lld)\n",
             human((double)arena, h1, sizeof h1), human((double)arena1, h2, sizeof h2), (long long)mb);
      fprintf(b, "communication per step per rank (%lld micro-batch%s):\n", (long long)accum, accum == 1 ? "" : "es");
      fprintf(b, "  forward collectives  %12s\n", human((double)(fwd * accum), h1, sizeof h1));
      fprintf(b, "  backward collectives %12s  (their adjoints)\n", human((double)(bwd * accum), h1, sizeof h1));
      fprintf(b, "  gradient reduction   %12s  (parameters several ranks hold, summed over them)\n",
             human(red, h3, sizeof h3));
    }
  }
  if (fclose(b) && !rc) rc = ts_error_set(TS_ENOMEM, "plan: out of memory");
  if (!rc) *text = mp;
  else free(mp);
  ts_parallel_free(pp);
  ts_graph_free(g);
  ts_graph_free(g1);
  ts_params_free(gp);
  ts_params_free(gp1);
  ts_strategy_set_free(set);
  ts_source_free(t->train_src);
  ts_source_free(t->test_src);
  free(t);
  return rc;
}
