/* `tessera plan`: the job's distribution object built for one rank of a job that need not exist
 * (the same build path as training, without MPI), and the figures a user sizes a job by
 * (include/tessera/train.h, ts_trainer_plan). */
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

static int optim_slots(ts_optim_kind k) {
  return k == TS_OPTIM_SGD ? 0 : k == TS_OPTIM_MOMENTUM ? 1 : 2;
}

/* The figures of one built layout: parameters and the planned activation arena of the step. */
static void figures(const ts_dist *d, double *param_bytes, double *arena) {
  const ts_dist_run *r = ts_dist_get(d);
  *param_bytes = (double)ts_params_numel(r->params) * 4;
  *arena = (double)ts_plan_peak_bytes(r->plan);
}

int ts_trainer_plan(const ts_config *cfg, int ndevices, int rank, ts_model_fn model, void *user,
                    char **text) {
  *text = NULL;
  if (ndevices < 1 || rank < 0 || rank >= ndevices)
    return ts_error_set(TS_EINVAL, "plan: rank %d of %d devices", rank, ndevices);
  ts_trainer *t = calloc(1, sizeof *t);
  if (!t) return ts_error_set(TS_ENOMEM, "plan: out of memory");
  t->cfg = *cfg;
  char *mp = NULL;
  size_t mn = 0;
  FILE *b = open_memstream(&mp, &mn); /* the report */
  if (!b) {
    free(t);
    return ts_error_set(TS_ENOMEM, "plan: out of memory");
  }
  const ts_dist_vt *vt = NULL;
  ts_dist_config dc;
  ts_strategy_set *set = NULL;
  ts_dist *d = NULL, *d1 = NULL; /* the job's rank; one process, for comparison */
  int rc = ts_config_validate(&t->cfg);
  if (!rc) rc = ts__train_layout(&t->cfg, model, user, &vt, &dc, &t->model);
  if (!rc) rc = ts__train_prepare(t);
  if (!rc) rc = ts__train_strategies(&t->cfg, ndevices, &set);
  t->model.strategies = set;
  if (!rc) rc = ts_dist_create(vt, &dc, &t->model, ndevices, rank, &d);
  if (!rc && (rc = ts_dist_build(d, &t->model))) rc = ts_error_as_config(rc);
  t->model.strategies = NULL;
  ts_dist_config dc1 = dc;
  dc1.optimizer_shard = 0; /* one process: nothing to shard over */
  if (!rc) rc = ts_dist_create(ts_dist_find("stand_alone"), &dc1, &t->model, 1, 0, &d1);
  if (!rc) rc = ts_dist_build(d1, &t->model);
  if (!rc) {
    const ts_dist_run *r = ts_dist_get(d);
    char h1[32], h2[32], h3[32];
    char piece[96] = "every rank reads the whole batch";
    if (r->data_parts > 1)
      snprintf(piece, sizeof piece, "the batch cut in %d pieces; this rank reads piece %d", r->data_parts,
               r->data_index);
    int64_t mb = cfg->train.micro_batch_size;
    fprintf(b, "plan: %s on %s, %s on %d devices, rank %d shown; micro-batch %lld (%s)\n\n",
            model ? "custom model" : ts_model_kind_name(cfg->model.name), ts_data_kind_name(cfg->data.name),
            ts_dist_name(vt), ndevices, rank, (long long)mb, piece);
    double red = 0;
    rc = ts_dist_describe(d, b, &red);
    if (!rc) {
      int64_t accum = cfg->train.batch_size / cfg->train.micro_batch_size, fwd, bwd;
      ts_dist_comm_bytes(d, &fwd, &bwd);
      double pb, pb1, arena, arena1;
      figures(d, &pb, &arena);
      figures(d1, &pb1, &arena1);
      int slots = optim_slots(cfg->optimizer.name);
      size_t rep, sh;
      double ob = pb * slots; /* optimizer state: of the rank's parameters, or of its shard */
      if (ts_dist_optim_sharded(d, &rep, &sh))
        ob = 4.0 * slots * (double)(rep + (sh + (size_t)ndevices - 1) / (size_t)ndevices);
      fprintf(b, "\nmemory per rank (rank %d) vs one process:\n", rank);
      fprintf(b, "  parameters           %12s  of %12s  (%.3f)\n", human(pb, h1, sizeof h1), human(pb1, h2, sizeof h2), pb / pb1);
      fprintf(b, "  gradients            %12s  of %12s\n", human(pb, h1, sizeof h1), human(pb1, h2, sizeof h2));
      fprintf(b, "  optimizer state      %12s  of %12s  (%s: %d slot%s%s)\n", human(ob, h1, sizeof h1),
              human(pb1 * slots, h2, sizeof h2), ts_optim_kind_name(cfg->optimizer.name), slots, slots == 1 ? "" : "s",
              ob < pb * slots ? ", sharded" : "");
      fprintf(b, "  activations (step)   %12s  of %12s  (planned arena of forward + backward, micro-batch %lld)\n",
              human(arena, h1, sizeof h1), human(arena1, h2, sizeof h2), (long long)mb);
      fprintf(b, "communication per step per rank (%lld micro-batch%s):\n", (long long)accum, accum == 1 ? "" : "es");
      fprintf(b, "  forward collectives  %12s\n", human((double)(fwd * accum), h1, sizeof h1));
      fprintf(b, "  backward collectives %12s  (their adjoints)\n", human((double)(bwd * accum), h1, sizeof h1));
      fprintf(b, "  gradient reduction   %12s  (parameters several ranks hold, reduced over them)\n",
              human(red, h3, sizeof h3));
    }
  }
  if (fclose(b) && !rc) rc = ts_error_set(TS_ENOMEM, "plan: out of memory");
  if (!rc) *text = mp;
  else free(mp);
  ts_dist_free(d);
  ts_dist_free(d1);
  ts_strategy_set_free(set);
  ts_source_free(t->train_src);
  ts_source_free(t->test_src);
  free(t);
  return rc;
}
