/* The outer plan search of auto_parallel (include/tessera/train.h, ts_trainer_search): every
 * (data, tensor, pipeline) degree whose product is the device count, the micro-batch count of a
 * pipeline, the optimizer shard stage and recompute, each built dry as the job would build it
 * (the same distribution objects, no MPI, no step run) and priced by the cost model on the
 * cluster; the fastest plan that fits the device memory (and train.max_memory_mb) wins. Tensor
 * parallelism is offered for any model with the per-operator search's strategies
 * (parallel.search_mode, trainer_opsearch.c) and for the zoo's GPT also with Megatron-LM's cuts
 * (column-parallel q|k|v and c_fc, row-parallel c_proj, heads, the vocabulary of the embedding,
 * head and loss), times the data parallel degree on the batch. A plan the layouts refuse is kept with the reason. Exhaustive: for
 * the device counts of one host (the candidates grow with the divisors of N). */
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"

/* parallel.strategies for GPT: tensor parallel tp, data parallel dp on the batch dimension. */
static int megatron(ts_config *c, int dp, int tp) {
  struct {
    const char *op, *fmt;
  } r[] = {
      {"transformer.embedding", "((%d,1),(%d,1))"},
      {"transformer.h.*.attn.c_attn.dense*", "((%d,1,1),(%d,1),(%d,))"},
      {"transformer.h.*.attn.attention", "((%d,%d,1,1),(%d,%d,1,1),(%d,%d,1,1))"},
      {"transformer.h.*.attn.c_proj.dense", "((%d,1,%d),(1,%d))"},
      {"transformer.h.*.mlp.c_fc.dense", "((%d,1,1),(%d,1))"},
      {"transformer.h.*.mlp.c_proj.dense", "((%d,1,%d),(1,%d))"},
      {"dense", "((%d,1,1),(%d,1))"},
      {"softmax_ce", "((%d,%d),(%d,))"},
  };
  ts_cfg_strategies *s = &c->parallel.strategies;
  memset(s, 0, sizeof *s);
  for (size_t k = 0; k < sizeof r / sizeof r[0]; k++) {
    char t[96];
    switch (k) {
      case 0: snprintf(t, sizeof t, r[k].fmt, dp, tp); break;
      case 1: snprintf(t, sizeof t, r[k].fmt, dp, tp, tp); break;
      case 2: snprintf(t, sizeof t, r[k].fmt, dp, tp, dp, tp, dp, tp); break;
      case 3:
      case 5: snprintf(t, sizeof t, r[k].fmt, dp, tp, tp); break;
      case 4:
      case 6: snprintf(t, sizeof t, r[k].fmt, dp, tp); break;
      default: snprintf(t, sizeof t, r[k].fmt, dp, tp, dp); break;
    }
    snprintf(s->v[s->n].op, sizeof s->v[0].op, "%s", r[k].op);
    snprintf(s->v[s->n].text, sizeof s->v[0].text, "%s", t);
    s->n++;
  }
  return TS_OK;
}

/* ---- opsearch: the per-operator search's strategies (cached per degrees by the search) ---- */
typedef struct {
  int dp, tp, M, rc;
  ts_cfg_strategies st;
  char why[256];
} op_cache;

static int searched(ts_config *c, const ts_plan_choice *p, const ts_cluster *cl, op_cache *cache) {
  int M = p->pp > 1 ? p->micro_batches : 1;
  if (cache && cache->dp == p->dp && cache->tp == p->tp && cache->M == M) {
    if (cache->rc) return ts_error_set(cache->rc, "%s", cache->why);
    c->parallel.strategies = cache->st;
    return TS_OK;
  }
  ts_cluster own;
  int rc = TS_OK;
  if (!cl && (rc = ts_cluster_load(c->parallel.cluster, &own))) return ts_error_wrap(rc, "parallel.cluster");
  ts_cfg_strategies *st = malloc(sizeof *st);
  if (!st) return ts_error_set(TS_ENOMEM, "auto_parallel: out of memory");
  rc = ts__train_op_search(c, p->dp, p->tp, cl ? cl : &own, st, NULL);
  if (!rc) c->parallel.strategies = *st;
  if (cache) {
    cache->dp = p->dp, cache->tp = p->tp, cache->M = M, cache->rc = rc;
    if (!rc) cache->st = *st;
    snprintf(cache->why, sizeof cache->why, "%s", rc ? ts_last_error() : "");
  }
  free(st);
  return rc;
}

static int apply_plan(ts_config *c, const ts_plan_choice *p, const ts_cluster *cl, op_cache *cache);

int ts_config_apply_plan(ts_config *c, const ts_plan_choice *p) { return apply_plan(c, p, NULL, NULL); }
int ts_config_apply_plan_on(ts_config *c, const ts_plan_choice *p, const ts_cluster *cl) {
  return apply_plan(c, p, cl, NULL);
}
/* ---- end opsearch ---- */

static int apply_plan(ts_config *c, const ts_plan_choice *p, const ts_cluster *cl, op_cache *cache) {
  c->parallel.pipeline_stages = p->pp;
  c->parallel.micro_batches = p->pp > 1 ? p->micro_batches : 0;
  c->parallel.pipeline_schedule = 1; /* 1f1b */
  c->parallel.virtual_stages = 1;
  c->parallel.optimizer_shard = p->zero;
  c->parallel.enable_parallel_optimizer = p->zero > 0;
  c->model.recompute = p->recompute ? TS_CFG_RECOMPUTE_FULL : TS_CFG_RECOMPUTE_NONE;
  c->model.recompute_layers.n = 0;
  if (p->pp > 1) c->train.micro_batch_size = c->train.batch_size; /* the pipeline's micro-batches */
  if (p->tp > 1) {
    c->parallel.mode = TS_PARALLEL_SEMI_AUTO;
    c->parallel.full_batch = 0;
    if (!p->megatron) return searched(c, p, cl, cache); /* opsearch */
    return megatron(c, p->dp, p->tp);
  }
  c->parallel.mode = p->dp * p->pp > 1 ? TS_PARALLEL_DATA : TS_PARALLEL_STAND_ALONE;
  c->parallel.strategies.n = 0;
  return TS_OK;
}

static int better(const ts_plan_choice *a, const ts_plan_choice *b) {
  if (a->fits != b->fits) return a->fits > b->fits;
  if (!a->fits) return 0;
  return a->pred.step_s < b->pred.step_s * (1 - 1e-9);
}

int ts_trainer_search(const ts_config *cfg, int N, const ts_cluster *cl, ts_plan_choice *out, int cap, int *nout,
                      int *best) {
  *nout = 0;
  *best = -1;
  if (N < 1) return ts_error_set(TS_EINVAL, "search: %d devices", N);
  int gpt = cfg->model.name == TS_MODEL_GPT;
  int B = cfg->train.batch_size;
  double budget = cfg->train.max_memory_mb > 0 ? cfg->train.max_memory_mb * 1048576.0 : 0;
  double limit = cl->mem_bytes;
  op_cache *cache = calloc(1, sizeof *cache); /* opsearch: the strategies of the last (dp, tp) searched */
  if (!cache) return ts_error_set(TS_ENOMEM, "search: out of memory");
  for (int tp = 1; tp <= N; tp++) {
    if (N % tp) continue;
    /* tensor parallel: the per-operator search (any model), and Megatron-LM's cuts for GPT */
    int mega = gpt && cfg->model.n_head % tp == 0 && cfg->model.vocab_size % tp == 0;
    for (int pp = 1; pp <= N / tp; pp++) {
      if ((N / tp) % pp) continue;
      if (gpt && pp > cfg->model.n_layer + 1) continue;
      int dp = N / tp / pp;
      if (B % dp) continue;
      int Ms[3] = {pp, 2 * pp, 4 * pp}, nm = pp > 1 ? 3 : 1;
      for (int mi = 0; mi < nm; mi++) {
        int M = pp > 1 ? Ms[mi] : 1;
        if (pp > 1 && (B % M || (B / M) % dp)) continue;
        for (int zero = 0; zero <= 3; zero++) {
          /* shard over the data-parallel repeat: stage 3 under data parallel alone */
          if (zero && (dp < 2 || (zero == 3 && (tp > 1 || pp > 1)))) continue;
          for (int rm = 0; rm < 4; rm++) {
            int rec = rm & 1, mg = rm >> 1; /* recompute; Megatron's cuts (1) or the search's (0) */
            if ((tp == 1 && mg) || (tp > 1 && mg && !mega)) continue;
            if (*nout == cap) {
              free(cache);
              return ts_error_set(TS_ERANGE, "search: more than %d candidate plans", cap);
            }
            ts_plan_choice *p = &out[(*nout)++];
            memset(p, 0, sizeof *p);
            p->dp = dp, p->tp = tp, p->pp = pp, p->micro_batches = M, p->zero = zero, p->recompute = rec;
            p->megatron = mg;
            ts_config c = *cfg;
            int rc = apply_plan(&c, p, cl, cache);
            if (!rc) rc = ts_config_validate(&c);
            if (!rc) rc = ts_trainer_predict(&c, N, 0, cl, &p->pred);
            if (rc) {
              snprintf(p->why, sizeof p->why, "%s", ts_last_error());
              continue;
            }
            double total = (double)p->pred.memory_bytes;
            p->fits = total <= limit && (budget <= 0 || total <= budget);
            if (!p->fits)
              snprintf(p->why, sizeof p->why, "needs %.1f MiB per device, over %s (%.1f MiB)", total / 1048576.0,
                       budget > 0 && total > budget ? "train.max_memory_mb" : "the device memory",
                       (budget > 0 && total > budget ? budget : limit) / 1048576.0);
            if (*best < 0 || better(p, &out[*best])) *best = (int)(p - out);
          }
        }
      }
    }
  }
  free(cache);
  if (*best < 0 || !out[*best].fits) {
    double least = 0;
    for (int i = 0; i < *nout; i++)
      if (out[i].pred.memory_bytes > 0 && (least == 0 || out[i].pred.memory_bytes < least))
        least = (double)out[i].pred.memory_bytes;
    *best = -1;
    if (least > 0)
      return ts_error_set(TS_ECONFIG, "auto_parallel: no plan fits %d devices of %s: the smallest needs %.1f MiB per "
                          "device, %.1f MiB over the limit of %.1f MiB",
                          N, cl->name, least / 1048576.0, (least - (budget > 0 && budget < limit ? budget : limit)) / 1048576.0,
                          (budget > 0 && budget < limit ? budget : limit) / 1048576.0);
    return ts_error_set(TS_ECONFIG, "auto_parallel: no plan for %d devices can be built (%s)", N,
                        *nout ? out[0].why : "no candidate");
  }
  return TS_OK;
}

void ts_plan_choice_str(const ts_plan_choice *p, char *buf, size_t cap) {
  snprintf(buf, cap, "dp=%d,tp=%d,pp=%d,micro_batches=%d,zero=%d,recompute=%s%s", p->dp, p->tp, p->pp, p->micro_batches,
           p->zero, p->recompute ? "full" : "none", p->tp > 1 ? (p->megatron ? ",cuts=megatron" : ",cuts=search") : "");
}

int ts__train_auto(ts_config *c, int N) {
  ts_cluster cl;
  int rc = ts_cluster_load(c->parallel.cluster, &cl);
  if (rc) return ts_error_wrap(rc, "parallel.cluster");
  if (c->parallel.auto_tp > 0) return ts__train_auto_tp(c, N, &cl); /* opsearch: the degrees given */
  int cap = 4096, cnt = 0, best = -1;
  ts_plan_choice *all = calloc((size_t)cap, sizeof *all);
  if (!all) return ts_error_set(TS_ENOMEM, "auto_parallel: out of memory");
  ts_config base = *c;
  base.parallel.mode = TS_PARALLEL_DATA; /* the candidates set their own layout */
  rc = ts_trainer_search(&base, N, &cl, all, cap, &cnt, &best);
  if (!rc) {
    char s[160];
    ts_plan_choice_str(&all[best], s, sizeof s);
    rc = ts_config_apply_plan_on(c, &all[best], &cl);
    if (!rc) rc = ts_config_validate(c);
    if (!rc)
      ts_log(TS_LOG_INFO, "auto_parallel on %d devices of %s: %s (predicted %.3f ms per step, %.2f MiB per device; "
             "%d plans searched)", N, cl.name, s, 1e3 * all[best].pred.step_s, all[best].pred.memory_bytes / 1048576.0, cnt);
  }
  free(all);
  return rc;
}
