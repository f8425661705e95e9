/* A plan as a value (include/tessera/autoparallel.h): freeing and copying it, its micro-batch
 * rows, and its text forms for logs and `tessera plan --search`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autoplan.h"

void ts_autoplan_free(ts_autoplan *p) {
  if (!p) return;
  ts_strategy_set_free(p->strategies);
  p->strategies = NULL;
  free(p->stage_rules);
  p->stage_rules = NULL;
  p->n_stage_rules = 0;
}

/* A copy of set s: the same device count, stage, strategies (in order) and layouts. */
static int set_clone(const ts_strategy_set *s, ts_strategy_set **out) {
  int rc = ts_strategy_set_create(ts_strategy_set_device_num(s), ts_strategy_set_stage(s), out);
  for (int i = 0; !rc && i < ts_strategy_set_count(s); i++)
    rc = ts_strategy_set_put(*out, ts_strategy_set_name(s, i), ts_strategy_set_at(s, i));
  for (int i = 0; !rc && i < ts_strategy_set_layout_count(s); i++) {
    const char *param;
    ts_layout l;
    ts_shape shape;
    rc = ts_strategy_set_layout_at(s, i, &param, &l, &shape);
    if (!rc) rc = ts_strategy_set_put_layout(*out, param, &l, &shape);
  }
  if (rc) {
    ts_strategy_set_free(*out);
    *out = NULL;
  }
  return rc;
}

int ts_autoplan_copy(ts_autoplan *dst, const ts_autoplan *src) {
  *dst = *src;
  dst->strategies = NULL;
  dst->stage_rules = NULL;
  dst->n_stage_rules = 0;
  if (src->n_stage_rules > 0) {
    size_t bytes = sizeof *src->stage_rules * (size_t)src->n_stage_rules;
    if (!(dst->stage_rules = malloc(bytes))) return ts_error_set(TS_ENOMEM, "ts_autoplan_copy: out of memory");
    memcpy(dst->stage_rules, src->stage_rules, bytes);
    dst->n_stage_rules = src->n_stage_rules;
  }
  int rc = src->strategies ? set_clone(src->strategies, &dst->strategies) : TS_OK;
  if (rc) ts_autoplan_free(dst);
  return rc;
}

int ts_autoplan_micro_batch_size(const ts_autoplan *p, int64_t batch_size) {
  int64_t d = (int64_t)(p->dp > 0 ? p->dp : 1) * (p->micro_batches > 0 ? p->micro_batches : 1);
  return (int)(batch_size / d);
}

void ts_autoplan_str(const ts_autoplan *p, char *buf, size_t cap) {
  if (!buf || !cap) return;
  snprintf(buf, cap, "dp=%d,tp=%d,pp=%d,micro_batches=%d,zero=%d,recompute=%s", p->dp, p->tp, p->pp, p->micro_batches,
           p->zero, ts_autoplan_recompute_name(p->recompute));
  size_t n = strlen(buf);
  if (p->virtual_stages > 1) {
    snprintf(buf + n, cap > n ? cap - n : 0, ",virtual_stages=%d", p->virtual_stages);
    n = strlen(buf);
  }
  if (p->cp > 1) {
    snprintf(buf + n, cap > n ? cap - n : 0, ",cp=%d%s", p->cp, p->cp_algo == TS_CP_RING ? ",cp_algo=ring" : "");
    n = strlen(buf);
  }
  if (ts_autoplan_model_ways(p) > 1)
    snprintf(buf + n, cap > n ? cap - n : 0, "%s%s", p->megatron ? ",cuts=megatron" : ",cuts=search", p->sp ? ",sp=1" : "");
}

int ts_autoplan_model_ways(const ts_autoplan *p) { return p->tp * (p->cp > 1 ? p->cp : 1); }

const char *ts_autoplan_recompute_name(int recompute) {
  return recompute == 2 ? "selective" : recompute ? "full" : "none";
}

void ts_autoplan_describe(const ts_autoplan *p, char *buf, size_t cap) {
  if (!buf || !cap) return;
  if (p->searched > 0) {
    char s[160];
    ts_autoplan_str(p, s, sizeof s);
    snprintf(buf, cap, "auto_parallel on %d devices of %s: %s (predicted %.3f ms per step, %.2f MiB per device; %d plans "
             "searched)", p->devices, p->cluster, s, 1e3 * p->pred.step_s, p->pred.memory_bytes / 1048576.0, p->searched);
    return;
  }
  static const char *const modes[] = {"dynamic_programming", "sharding_propagation", "recursive_programming"};
  int m = p->search_mode;
  snprintf(buf, cap, "auto_parallel on %d devices of %s: data parallel %d x tensor parallel %d x %d stages "
           "(parallel.auto_tp), operators searched by %s: %d strategies", p->devices, p->cluster, p->dp, p->tp, p->pp,
           m >= 0 && m < 3 ? modes[m] : "?", p->tp > 1 && p->strategies ? ts_strategy_set_count(p->strategies) : 0);
}
