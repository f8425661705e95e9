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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../train/train_search_bridge.h"

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
  ts_cfg_strategies_free(s);
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
    int rc = ts_cfg_strategies_add(s, r[k].op, t);
    if (rc) return rc;
  }
  return TS_OK;
}

/* ---- opsearch: the per-operator search's strategies (cached per degrees by the search) ---- */
typedef struct {
  int dp, tp, M, rc;
  ts_cfg_strategies st;
  char why[256];
} op_entry;

typedef struct {
  op_entry *e;
  int n, cap;
} op_cache;

/* the network being searched: a builder callback (C API, Python cells), or NULL for the zoo's */
typedef struct {
  ts_model_fn fn;
  void *user;
} model_ref;

static int searched(ts_config *c, const ts_plan_choice *p, const ts_cluster *cl, op_cache *cache,
                    const model_ref *m) {
  int M = p->micro_batches > 0 ? p->micro_batches : 1; /* the rows the operators see */
  for (int i = 0; cache && i < cache->n; i++) {
    const op_entry *e = &cache->e[i];
    if (e->dp != p->dp || e->tp != p->tp || e->M != M) continue;
    if (e->rc) return ts_error_set(e->rc, "%s", e->why);
    return ts_cfg_strategies_assign(&c->parallel.strategies, &e->st);
  }
  ts_cluster own;
  int rc = TS_OK;
  if (!cl && (rc = ts_cluster_load(c->parallel.cluster, &own))) return ts_error_wrap(rc, "parallel.cluster");
  ts_cfg_strategies st = {0, 0, NULL};
  rc = ts__train_op_search(c, p->dp, p->tp, cl ? cl : &own, &st, NULL, m ? m->fn : NULL, m ? m->user : NULL);
  if (!rc) rc = ts_cfg_strategies_assign(&c->parallel.strategies, &st);
  if (cache && cache->n == cache->cap) {
    int nc = cache->cap ? 2 * cache->cap : 16;
    op_entry *ne = realloc(cache->e, sizeof *ne * (size_t)nc);
    if (ne) cache->e = ne, cache->cap = nc;
  }
  if (cache && cache->n < cache->cap) {
    op_entry *e = &cache->e[cache->n++];
    e->dp = p->dp, e->tp = p->tp, e->M = M, e->rc = rc;
    memset(&e->st, 0, sizeof e->st);
    if (!rc) e->st = st, st = (ts_cfg_strategies){0, 0, NULL}; /* the cache owns it now */
    snprintf(e->why, sizeof e->why, "%s", rc ? ts_last_error() : "");
  }
  ts_cfg_strategies_free(&st);
  return rc;
}

static int apply_plan(ts_config *c, const ts_plan_choice *p, const ts_cluster *cl, op_cache *cache,
                      const model_ref *m);

int ts_config_apply_plan(ts_config *c, const ts_plan_choice *p) { return apply_plan(c, p, NULL, NULL, NULL); }
int ts_config_apply_plan_on(ts_config *c, const ts_plan_choice *p, const ts_cluster *cl) {
  return apply_plan(c, p, cl, NULL, NULL);
}
int ts__config_apply_plan_model(ts_config *c, const ts_plan_choice *p, const ts_cluster *cl, ts_model_fn model,
                                void *user) {
  model_ref m = {model, user};
  return apply_plan(c, p, cl, NULL, &m);
}
/* ---- end opsearch ---- */

int ts_plan_choice_micro_batch_size(const ts_config *cfg, const ts_plan_choice *p) {
  int64_t d = (int64_t)(p->dp > 0 ? p->dp : 1) * (p->micro_batches > 0 ? p->micro_batches : 1);
  return (int)(cfg->train.batch_size / d);
}

static int apply_plan(ts_config *c, const ts_plan_choice *p, const ts_cluster *cl, op_cache *cache,
                      const model_ref *m) {
  int M = p->micro_batches > 0 ? p->micro_batches : 1, V = p->virtual_stages > 1 ? p->virtual_stages : 1;
  c->parallel.pipeline_stages = p->pp;
  c->parallel.micro_batches = p->pp > 1 ? M : 0;
  c->parallel.pipeline_schedule = p->pp > 1 && V > 1 ? 2 : 1; /* interleaved_1f1b, or 1f1b */
  c->parallel.virtual_stages = p->pp > 1 ? V : 1;
  /* without stages, micro-batches are gradient accumulation: rows of one micro-step */
  if (p->pp <= 1) c->train.micro_batch_size = c->train.batch_size % M ? c->train.batch_size : c->train.batch_size / M;
  /* evaluation in micro-batches too (the plan's memory counts its arena) */
  int rows = c->train.batch_size / M;
  if (rows > 0 && (c->train.eval_batch_size == 0 || c->train.eval_batch_size > rows)) c->train.eval_batch_size = rows;
  c->parallel.optimizer_shard = p->zero;
  c->parallel.enable_parallel_optimizer = p->zero > 0;
  c->model.recompute = p->recompute ? TS_CFG_RECOMPUTE_FULL : TS_CFG_RECOMPUTE_NONE;
  c->model.recompute_layers.n = 0;
  if (p->pp > 1) c->train.micro_batch_size = c->train.batch_size; /* the pipeline's micro-batches */
  if (p->tp > 1) {
    c->parallel.mode = TS_PARALLEL_SEMI_AUTO;
    c->parallel.full_batch = 0;
    if (!p->megatron) return searched(c, p, cl, cache, m); /* opsearch */
    return megatron(c, p->dp, p->tp);
  }
  c->parallel.mode = p->dp * p->pp > 1 ? TS_PARALLEL_DATA : TS_PARALLEL_STAND_ALONE;
  ts_cfg_strategies_free(&c->parallel.strategies);
  return TS_OK;
}

static int better(const ts_plan_choice *a, const ts_plan_choice *b) {
  if (a->fits != b->fits) return a->fits > b->fits;
  if (!a->fits) return 0;
  if (a->pred.step_s < b->pred.step_s * (1 - 1e-9)) return 1;
  /* equally fast (within 1e-9): the one needing less memory */
  return a->pred.step_s <= b->pred.step_s * (1 + 1e-9) && a->pred.memory_bytes < b->pred.memory_bytes;
}

/* ---- arithmetic bounds (GPT): what a plan needs at least, before it is built ----
 * Memory: the parameters of the rank's share of the transformer blocks (12 h^2 per layer; a
 * stage's share taken as 3/4 of l/pp layers, since the balanced cut gives the embedding's stage
 * fewer) at the bytes per parameter of its precision (parameter, gradient, accumulation, the
 * optimizer's slots, over the shard group under optimizer_shard), plus the layer inputs the first
 * stage stashes for min(P, M) micro-batches in flight (s * rows * h each). Step: the model's
 * FLOPs (6, or 8 with recompute, per parameter and token) spread evenly over the N devices at the
 * cluster's GEMM rate, stretched by the pipeline's bubble (1 + (P-1)/(V M)), times 0.9. Both are
 * below what the build gives, so pruning by them never drops a plan that would win. */
static void gpt_bounds(const ts_config *c, const ts_cluster *cl, int N, ts_plan_choice *p) {
  p->mem_bound = p->time_bound = 0;
  if (c->model.name != TS_MODEL_GPT) return;
  double l = c->model.n_layer, h = c->model.n_embd, s = c->data.seq_len > 0 ? c->data.seq_len : 1;
  int M = p->micro_batches > 0 ? p->micro_batches : 1, V = p->virtual_stages > 1 ? p->virtual_stages : 1;
  double rows = (double)ts_plan_choice_micro_batch_size(c, p);
  int amp = c->train.amp_level >= 2, slots = ts_optim_kind_num_slots(c->optimizer.name);
  double layers = 0.75 * l / p->pp, np = layers * 12 * h * h / p->tp;
  double pb = amp ? (c->train.amp_level == 2 ? 6 : 2) : 4, gb = amp ? 2 : 4, ob = 4.0 * slots;
  if (M > 1 && p->zero < 2) gb *= 2; /* the accumulation buffer */
  if (p->zero >= 1) ob /= p->dp;
  if (p->zero >= 3) pb /= p->dp;
  double inflight = p->pp > 1 ? (M < p->pp ? M : p->pp) : 1;
  p->mem_bound = np * (pb + gb + ob) + inflight * layers * s * rows * h * (amp ? 2 : 4);
  double peak = amp || c->train.amp_level == 1 ? (cl->peak_flops_bf16 > 0 ? cl->peak_flops_bf16 : cl->peak_flops_f32)
                                                : cl->peak_flops_f32;
  double flops = (p->recompute ? 8.0 : 6.0) * l * 12 * h * h * s * c->train.batch_size / N;
  p->time_bound = 0.9 * flops / (peak * cl->gemm_efficiency) * (1 + (p->pp - 1.0) / (V * (double)M));
}

/* Whether a, then b, is the order to price in: the smaller step bound first (generation order on
 * ties: deterministic). */
static int cmp_bound(const void *x, const void *y) {
  const ts_plan_choice *a = *(ts_plan_choice *const *)x, *b = *(ts_plan_choice *const *)y;
  if (a->time_bound != b->time_bound) return a->time_bound < b->time_bound ? -1 : 1;
  return a < b ? -1 : a > b;
}

/* ---- the candidates (delimited: the per-operator search of tp > 1 plugs in here) ---- */

/* Appends the plans for degrees (dp, tp, pp): micro-batch counts, shard stages, recompute. */
static int add_degrees(const ts_config *cfg, const ts_cluster *cl, int dp, int tp, int pp, ts_plan_choice *out,
                       int cap, int *n) {
  int B = cfg->train.batch_size;
  /* tensor parallel: the per-operator search's cuts (any model), and Megatron-LM's for GPT. A GPT
   * job spanning nodes takes Megatron's only: its graphs are large (an operator search per split
   * of the devices would take minutes, and its elimination tables outgrow the exact search) and
   * Megatron's cuts are what such jobs are known to run best with; a tp their cuts cannot take (it
   * divides not the heads or the vocabulary) is then not offered either (it fell back to the
   * operator search: GPT-145B's tp 64 took over 10 minutes and 7 GB) */
  int gpt = cfg->model.name == TS_MODEL_GPT;
  int mega = gpt && cfg->model.n_head % tp == 0 && cfg->model.vocab_size % tp == 0;
  int searched_ok = !(gpt && dp * tp * pp > cl->devices_per_node);
  int Ms[16], nm = 0;
  /* a pipeline's P, 2P, 4P micro-batches; and 1, 2, 4, 8 rows per replica (Megatron-LM's 1..8) */
  int cand[7] = {pp > 1 ? pp : 1, 2 * pp, 4 * pp, 0, 0, 0, 0};
  int nc = pp > 1 ? 3 : 1;
  for (int r = 1; r <= 8; r *= 2)
    if (B % ((int64_t)dp * r) == 0) cand[nc++] = B / (dp * r);
  for (int k = 0; k < nc; k++) {
    int M = cand[k], dup = 0;
    if (M < 1 || B % M || (B / M) % dp || (pp > 1 && M < pp)) continue;
    for (int q = 0; q < nm; q++) dup |= Ms[q] == M;
    if (!dup) Ms[nm++] = M;
  }
  for (int mi = 0; mi < nm; mi++)
    for (int zero = 0; zero <= 3; zero++) {
      /* shard over the data-parallel repeat: stage 3 under data parallel alone */
      if (zero && (dp < 2 || (zero == 3 && (tp > 1 || pp > 1)))) continue;
      for (int rec = 0; rec <= 1; rec++)
        /* interleaved 1F1B with 2 pieces per rank: M a multiple of P, a layer or more per piece */
        for (int V = 1; V <= 2; V++)
          for (int mg = 0; mg <= 1; mg++) { /* Megatron's cuts (1) or the search's (0) */
            if ((tp == 1 && mg) || (tp > 1 && mg && !mega) || (tp > 1 && !mg && !searched_ok)) continue;
            if (V > 1 && (pp < 2 || Ms[mi] % pp || (cfg->model.name == TS_MODEL_GPT && cfg->model.n_layer < 2 * pp)))
              continue;
            if (*n == cap) return ts_error_set(TS_ERANGE, "search: more than %d candidate plans", cap);
            ts_plan_choice *p = &out[(*n)++];
            memset(p, 0, sizeof *p);
            p->dp = dp, p->tp = tp, p->pp = pp, p->micro_batches = Ms[mi], p->zero = zero, p->recompute = rec;
            p->virtual_stages = V;
            p->megatron = mg;
          }
    }
  return TS_OK;
}

/* Builds plan p dry and prices it (its fit against the limits). */
static void price_candidate(const ts_config *cfg, int N, const ts_cluster *cl, double limit, double budget,
                            ts_plan_choice *p, op_cache *cache, const model_ref *m) {
  ts_config c;
  int rc = ts_config_copy(&c, cfg); /* its own: the plan replaces the strategies */
  if (!rc) rc = apply_plan(&c, p, cl, cache, m);
  if (!rc) rc = ts_config_validate(&c);
  if (!rc) rc = ts__trainer_predict_model(&c, N, 0, cl, &p->pred, m->fn, m->user);
  ts_config_free(&c);
  if (rc) {
    snprintf(p->why, sizeof p->why, "%s", ts_last_error());
    return;
  }
  p->priced = 1;
  double total = (double)p->pred.memory_bytes;
  p->fits = total <= limit && (budget <= 0 || total <= budget);
  if (!p->fits)
    snprintf(p->why, sizeof p->why, "needs %.1f MiB per device, over %s (%.1f MiB)", total / 1048576.0,
             budget > 0 && total > budget ? "train.max_memory_mb" : "the device memory",
             (budget > 0 && total > budget ? budget : limit) / 1048576.0);
}

/* Prices p unless its bounds rule it out (over the memory; or its step bound above the best
 * plan priced so far), keeping *best. */
static void price_one(const ts_config *cfg, int N, const ts_cluster *cl, double limit, double budget, double cut,
                      ts_plan_choice *p, ts_plan_choice *out, int *best, op_cache *cache, const model_ref *m) {
  if (p->mem_bound > cut) {
    snprintf(p->why, sizeof p->why, "not built: needs at least %.1f MiB per device (parameters, gradients, "
             "optimizer state, stashed layer inputs), over %.1f MiB", p->mem_bound / 1048576.0, cut / 1048576.0);
    return;
  }
  if (*best >= 0 && out[*best].fits && p->time_bound > out[*best].pred.step_s) {
    snprintf(p->why, sizeof p->why, "not built: its step is at least %.3f s, above the best plan's %.3f s",
             p->time_bound, out[*best].pred.step_s);
    return;
  }
  price_candidate(cfg, N, cl, limit, budget, p, cache, m);
  if (p->priced && (*best < 0 || better(p, &out[*best]))) *best = (int)(p - out);
}

int ts_trainer_search(const ts_config *cfg, int N, const ts_cluster *cl, ts_plan_choice *out, int cap, int *nout,
                      int *best) {
  return ts__trainer_search_model(cfg, N, cl, out, cap, nout, best, NULL, NULL);
}

int ts__trainer_search_model(const ts_config *cfg, int N, const ts_cluster *cl, ts_plan_choice *out, int cap,
                             int *nout, int *best, ts_model_fn model, void *user) {
  model_ref m = {model, user};
  *nout = 0;
  *best = -1;
  if (N < 1) return ts_error_set(TS_EINVAL, "search: %d devices", N);
  int gpt = cfg->model.name == TS_MODEL_GPT;
  int B = cfg->train.batch_size, rc = TS_OK;
  double budget = cfg->train.max_memory_mb > 0 ? cfg->train.max_memory_mb * 1048576.0 : 0;
  double limit = cl->mem_bytes, cut = budget > 0 && budget < limit ? budget : limit;
  for (int tp = 1; tp <= N && !rc; tp++) {
    if (N % tp) continue;
    /* tensor parallelism inside a node once the job spans nodes (its all-reduces are per layer) */
    if (tp > 1 && N > cl->devices_per_node && tp > cl->devices_per_node) continue;
    for (int pp = 1; pp <= N / tp && !rc; pp++) {
      if ((N / tp) % pp) continue;
      if (gpt && pp > cfg->model.n_layer + 1) continue;
      int dp = N / tp / pp;
      if (B % dp) continue;
      rc = add_degrees(cfg, cl, dp, tp, pp, out, cap, nout);
    }
  }
  if (rc) return rc;
  op_cache cache = {0}; /* the per-operator search's strategies per (dp, tp, micro-batches) */
  ts_plan_choice **order = malloc(sizeof *order * ((size_t)*nout + 1));
  if (!order) return ts_error_set(TS_ENOMEM, "search: out of memory");
  for (int i = 0; i < *nout; i++) {
    gpt_bounds(cfg, cl, N, &out[i]);
    order[i] = &out[i];
  }
  qsort(order, (size_t)*nout, sizeof *order, cmp_bound);
  /* first, each (dp, tp, pp) group's most frugal plan (the most micro-batches, recompute, the
   * highest shard stage, one piece per rank): memory only grows from it, so when it does not fit none of the group
   * does; then every plan in the order of its step bound */
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < *nout; i++) {
      ts_plan_choice *p = order[i];
      if (p->priced || p->why[0]) continue;
      int frugal = 1, over = 0;
      for (int q = 0; q < *nout; q++) {
        const ts_plan_choice *o = &out[q];
        if (o == p || o->dp != p->dp || o->tp != p->tp || o->pp != p->pp) continue;
        if (o->micro_batches > p->micro_batches || o->recompute > p->recompute || o->zero > p->zero ||
            o->virtual_stages < p->virtual_stages)
          frugal = 0;
        if (o->priced && !o->fits && o->micro_batches >= p->micro_batches && o->recompute >= p->recompute &&
            o->zero >= p->zero && o->virtual_stages <= p->virtual_stages)
          over = 1 + q;
      }
      if (pass == 0 && !frugal) continue;
      if (over) {
        char s[160];
        ts_plan_choice_str(&out[over - 1], s, sizeof s);
        snprintf(p->why, sizeof p->why, "not built: needs more memory than %s, which does not fit", s);
        continue;
      }
      price_one(cfg, N, cl, limit, budget, cut, p, out, best, &cache, &m);
    }
  free(order);
  for (int i = 0; i < cache.n; i++) ts_cfg_strategies_free(&cache.e[i].st);
  free(cache.e);
  if (*best < 0 || !out[*best].fits) {
    double least = 0, lb = 0;
    for (int i = 0; i < *nout; i++) {
      if (out[i].pred.memory_bytes > 0 && (least == 0 || out[i].pred.memory_bytes < least))
        least = (double)out[i].pred.memory_bytes;
      if (out[i].mem_bound > 0 && (lb == 0 || out[i].mem_bound < lb)) lb = out[i].mem_bound;
    }
    *best = -1;
    if (least > 0)
      return ts_error_set(TS_ECONFIG, "auto_parallel: no plan fits %d devices of %s: the smallest needs %.1f MiB per "
                          "device, %.1f MiB over the limit of %.1f MiB",
                          N, cl->name, least / 1048576.0, (least - cut) / 1048576.0, cut / 1048576.0);
    if (lb > 0)
      return ts_error_set(TS_ECONFIG, "auto_parallel: no plan fits %d devices of %s: the smallest needs at least "
                          "%.1f MiB per device, %.1f MiB over the limit of %.1f MiB",
                          N, cl->name, lb / 1048576.0, (lb - cut) / 1048576.0, cut / 1048576.0);
    return ts_error_set(TS_ECONFIG, "auto_parallel: no plan for %d devices can be built (%s)", N,
                        *nout ? out[0].why : "no candidate");
  }
  return TS_OK;
}

void ts_plan_choice_str(const ts_plan_choice *p, char *buf, size_t cap) {
  snprintf(buf, cap, "dp=%d,tp=%d,pp=%d,micro_batches=%d,zero=%d,recompute=%s", p->dp, p->tp, p->pp, p->micro_batches,
           p->zero, p->recompute ? "full" : "none");
  size_t n = strlen(buf);
  if (p->virtual_stages > 1) {
    snprintf(buf + n, cap > n ? cap - n : 0, ",virtual_stages=%d", p->virtual_stages);
    n = strlen(buf);
  }
  if (p->tp > 1) snprintf(buf + n, cap > n ? cap - n : 0, "%s", p->megatron ? ",cuts=megatron" : ",cuts=search");
}

int ts__train_auto(ts_config *c, int N, ts_model_fn model, void *user) {
  ts_cluster cl;
  int rc = ts_cluster_load(c->parallel.cluster, &cl);
  if (rc) return ts_error_wrap(rc, "parallel.cluster");
  if (c->parallel.auto_tp > 0) return ts__train_auto_tp(c, N, &cl, model, user); /* opsearch: the degrees given */
  int cap = 16384, cnt = 0, best = -1;
  ts_plan_choice *all = calloc((size_t)cap, sizeof *all);
  if (!all) return ts_error_set(TS_ENOMEM, "auto_parallel: out of memory");
  ts_config base = *c; /* a view of c: only scalars change */
  base.parallel.mode = TS_PARALLEL_DATA; /* the candidates set their own layout */
  rc = ts__trainer_search_model(&base, N, &cl, all, cap, &cnt, &best, model, user);
  if (!rc) {
    char s[160];
    ts_plan_choice_str(&all[best], s, sizeof s);
    rc = ts__config_apply_plan_model(c, &all[best], &cl, model, user);
    if (!rc) rc = ts_config_validate(c);
    if (!rc)
      ts_log(TS_LOG_INFO, "auto_parallel on %d devices of %s: %s (predicted %.3f ms per step, %.2f MiB per device; "
             "%d plans searched)", N, cl.name, s, 1e3 * all[best].pred.step_s, all[best].pred.memory_bytes / 1048576.0, cnt);
  }
  free(all);
  return rc;
}
