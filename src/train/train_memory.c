/* The trainer's memory figures (include/tessera/train.h, docs/memory.md): the rank's buffers
 * measured where they were allocated (ts_trainer_memory), the train.max_memory_mb check before the
 * parameters are allocated (predicted, ts__train_memory_precheck), before step 1 and in `tessera plan`
 * (ts__train_memory_budget), and the fields of the metrics' end
 * record with the maximum over the ranks (ts__train_memory_record). The per-buffer figures come
 * from the distribution object (ts_dist_memory). */
#include <string.h>

#include "../base/text.h"
#include "train_compat.h"
#include "train_impl.h"

int ts_trainer_memory(ts_trainer *t, ts_dist_memory_info *out) {
  int rc = ts_dist_memory(t->dist, ts_optim_num_slots(t->opt), out);
  if (rc) return rc;
  /* what the trainer itself allocated: the optimizer's slots, the accumulation buffer, and the
   * arenas the plans hold (ts_dist_memory has planned them if they were not yet) */
  out->optimizer_state_bytes = ts_trainer_optim_state_numel(t) * (int64_t)sizeof(float);
  int64_t acc = (int64_t)(t->acc_numel * sizeof(float));
  out->grad_bytes += acc - out->accum_bytes;
  out->accum_bytes = acc;
  ts_dist_activation_bytes(t->dist, 1, &out->activation_bytes, &out->eval_activation_bytes);
  out->total_bytes = ts_dist_memory_sum(out);
  return TS_OK;
}

int ts__train_memory_budget(const ts_config *c, const ts_dist_memory_info *m, int ranks, int max_over_ranks) {
  double budget = c->train.max_memory_mb * 1024.0 * 1024.0;
  int64_t need = ts_dist_memory_sum(m);
  if (!(c->train.max_memory_mb > 0) || (double)need <= budget) return TS_OK;
  char line[512], how[900], hn[32];
  ts_dist_memory_format(m, line, sizeof line);
  ts__config_memory_cuts(c, m, ranks, how, sizeof how);
  return ts_error_set(TS_ECONFIG,
                      "train.max_memory_mb: %g MiB per rank is less than the %s the plan needs %s (%s); "
                      "settings that cut it: %s",
                      c->train.max_memory_mb,
                      ts__human_bytes((double)need, hn, sizeof hn),
                      max_over_ranks ? "on the largest rank" : "on this rank", line,
                      how[0] ? how : ts__config_memory_cuts_none);
}

/* The rank's figures, and with several ranks each field's maximum over them (collective). */
static int job_max(ts_trainer *t, int64_t *v, int n) {
  ts_comm *w = ts_dist_world(t->dist);
  if (!w || t->run->size < 2) return TS_OK;
  int rc = ts_comm_allreduce(w, v, v, (size_t)n, TS_I64, TS_REDUCE_MAX);
  return rc ? ts_error_wrap(rc, "memory figures: the maximum over the ranks") : TS_OK;
}

int ts__train_memory_check(ts_trainer *t) {
  const ts_config *c = &t->cfg;
  if (!(c->train.max_memory_mb > 0)) return TS_OK;
  ts_dist_memory_info m;
  int rc = ts_dist_memory(t->dist, ts_optim_kind_num_slots(c->optimizer.name), &m);
  if (rc) return rc;
  /* every rank decides on the largest rank's figures, so the ranks refuse together */
  int64_t v[7] = {m.param_bytes, m.grad_bytes, m.accum_bytes, m.optimizer_state_bytes, m.activation_bytes,
                  m.eval_activation_bytes, m.total_bytes};
  if ((rc = job_max(t, v, 7))) return rc;
  m = (ts_dist_memory_info){v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
  return ts__train_memory_budget(c, &m, t->run->size, t->run->size > 1);
}

int ts__train_memory_precheck(ts_trainer *t, ts_model_fn fn, void *user) {
  const ts_config *c = &t->cfg;
  if (!(c->train.max_memory_mb > 0)) return TS_OK;
  /* the rank's figures as `tessera plan` predicts them: the same build, sized, nothing allocated;
   * a model over the budget is refused here naming it, not by the allocator of its parameters */
  ts_dist_memory_info m;
  /* what the dry build refuses, the real build says again in its own words: figures of 0, and the
   * rank still takes part in the maximum (collective) */
  if (ts_trainer_plan_memory(c, t->run->size, t->run->rank, fn, user, &m)) memset(&m, 0, sizeof m);
  int rc;
  int64_t v[7] = {m.param_bytes, m.grad_bytes, m.accum_bytes, m.optimizer_state_bytes, m.activation_bytes,
                  m.eval_activation_bytes, m.total_bytes};
  if ((rc = job_max(t, v, 7))) return rc;
  m = (ts_dist_memory_info){v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
  return ts__train_memory_budget(c, &m, t->run->size, t->run->size > 1);
}

int ts__train_memory_record(ts_trainer *t, char *buf, size_t cap) {
  ts_dist_memory_info m;
  int rc = ts_trainer_memory(t, &m);
  if (rc) return rc;
  int64_t rss = ts_mem_peak_rss();
  int64_t v[7] = {m.param_bytes, m.grad_bytes, m.optimizer_state_bytes, m.activation_bytes, m.eval_activation_bytes,
                  m.total_bytes, rss};
  size_t n = 0;
  static const char *const name[7] = {"param_bytes", "grad_bytes", "optimizer_state_bytes", "activation_peak_bytes",
                                      "eval_activation_bytes", "memory_total_bytes", "peak_rss_bytes"};
  buf[0] = 0;
  for (int k = 0; k < 7; k++) ts__app(buf, cap, &n, "\"%s\":%lld,", name[k], (long long)v[k]);
  int64_t dpeak = 0, dused = 0; /* a GPU: what the device layer allocated at most, and the driver's figure */
  if (ts_dist_device_memory(t->dist, &dpeak, &dused))
    ts__app(buf, cap, &n, "\"device_peak_bytes\":%lld,\"device_used_bytes\":%lld,", (long long)dpeak, (long long)dused);
  if (t->run->size < 2 || !t->job_metrics) return TS_OK;
  if ((rc = job_max(t, v, 7))) return rc;
  ts__app(buf, cap, &n, "\"memory_max_over_ranks\":{\"ranks\":%d", t->run->size);
  for (int k = 0; k < 7; k++) ts__app(buf, cap, &n, ",\"%s\":%lld", name[k], (long long)v[k]);
  ts__app(buf, cap, &n, "},");
  return TS_OK;
}
