/* The outer plan search of auto_parallel (src/autoparallel/autoplan.h, ts__autoparallel_search):
 * every (data, tensor, pipeline) degree whose product is the device count, the micro-batch count
 * of a pipeline, the optimizer shard stage and recompute, each built dry as the job would build
 * it (the same distribution objects, no MPI, no step run) and priced by the cost model on the
 * cluster (predict.c); the fastest plan that fits the device memory (and train.max_memory_mb)
 * wins. Tensor parallelism is offered for any model with the per-operator search's strategies
 * (parallel.search_mode, opsearch.c) and for the zoo's GPT also with Megatron-LM's cuts (the
 * zoo's ts_gpt_megatron_strategies: column-parallel q|k|v and c_fc, row-parallel c_proj, heads,
 * the vocabulary of the embedding, head and loss), times the data parallel degree on the batch.
 * A plan is a value (include/tessera/autoparallel.h): its strategies a strategy set, its degrees
 * set on a copy of the caller's distribution config (ts__autoplan_dist). A plan the layouts
 * refuse is kept with the reason. Exhaustive: for the device counts of one host (the candidates
 * grow with the divisors of N). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/text.h"
#include "planner/search.h"
#include "distribution/compat.h"
#include "distribution/query.h"
#include "autoplan.h"

/* ---- the per-operator search's strategies, cached per (dp, tp, micro-batches) ---- */
typedef struct {
  int dp, tp, M, rc;
  ts_strategy_set *st;
  char why[256];
} op_entry;

typedef struct {
  op_entry *e;
  int n, cap;
} op_cache;

/* The strategies of plan p (dc: p applied to the job's distribution config): *set points at them
 * (the cache's, or *own's: the caller frees *own); NULL for tp 1. */
static int plan_strategies(const ts_autoparallel_job *job, const ts_autoplan *p, const ts_dist_config *dc,
                           const ts_cluster *cl, op_cache *cache, const ts_strategy_set **set, ts_strategy_set **own) {
  *set = NULL, *own = NULL;
  if (ts_autoplan_model_ways(p) <= 1) return TS_OK;
  int rc;
  if (p->cp > 1 && !p->megatron)
    return ts_error_set(TS_ECONFIG, "auto_parallel: context parallelism (cp %d) takes Megatron-LM's cuts (cuts=megatron)", p->cp);
  if (p->megatron) {
    if (!job->gpt) return ts_error_set(TS_ECONFIG, "auto_parallel: Megatron-LM's cuts are the zoo GPT's (model.name gpt)");
    int cp = p->cp > 1 ? p->cp : 1;
    if ((rc = ts_strategy_set_create(p->dp * cp * p->tp, 0, own))) return rc;
    if ((rc = ts_gpt_context_strategies(job->gpt, p->dp, cp, p->tp, p->cp_algo, *own))) {
      ts_strategy_set_free(*own);
      *own = NULL;
      return rc;
    }
    *set = *own;
    return TS_OK;
  }
  int M = p->micro_batches > 0 ? p->micro_batches : 1; /* the rows the operators see */
  for (int i = 0; cache && i < cache->n; i++) {
    const op_entry *e = &cache->e[i];
    if (e->dp != p->dp || e->tp != p->tp || e->M != M) continue;
    if (e->rc) return ts_error_set(e->rc, "%s", e->why);
    *set = e->st;
    return TS_OK;
  }
  ts_strategy_set *st = NULL;
  rc = ts__autoparallel_op_search(&job->model, dc->micro_batch, p->dp, p->tp, cl, job->max_memory_mb, job->optim_slots,
                                  job->search_mode, job->fixed, job->nfixed, &st, NULL);
  if (cache && cache->n == cache->cap) {
    int nc = cache->cap ? 2 * cache->cap : 16;
    op_entry *ne = realloc(cache->e, sizeof *ne * (size_t)nc);
    if (ne) cache->e = ne, cache->cap = nc;
  }
  if (cache && cache->n < cache->cap) {
    op_entry *e = &cache->e[cache->n++];
    e->dp = p->dp, e->tp = p->tp, e->M = M, e->rc = rc, e->st = st; /* the cache owns it now */
    snprintf(e->why, sizeof e->why, "%s", rc ? ts_last_error() : "");
    *set = st;
  } else if (!rc) {
    *own = st;
    *set = st;
  }
  return rc;
}

static void cache_free(op_cache *cache) {
  for (int i = 0; i < cache->n; i++) ts_strategy_set_free(cache->e[i].st);
  free(cache->e);
  memset(cache, 0, sizeof *cache);
}

void ts__autoplan_dist(const ts_autoplan *p, int64_t batch, ts_dist_config *dc, const ts_dist_vt **vt, int *semi) {
  int64_t M = p->micro_batches > 0 ? p->micro_batches : 1, V = p->virtual_stages > 1 ? p->virtual_stages : 1;
  int pp = p->pp > 1 ? p->pp : 1;
  ts__dist_config_set_layout(dc, p->pp, p->zero);
  dc->pipeline_schedule = pp > 1 && V > 1 ? 2 : 1; /* interleaved_1f1b, or 1f1b (ts_sched_kind) */
  dc->virtual_stages = pp > 1 ? (int)V : 1;
  if (pp > 1) { /* the pipeline's micro-batches */
    dc->accum = M;
    dc->micro_batch = batch / M;
  } else { /* without stages, micro-batches are gradient accumulation: rows of one micro-step */
    dc->micro_batch = batch % M ? batch : batch / M;
    dc->accum = batch / dc->micro_batch;
  }
  /* evaluation in micro-batches too (the plan's memory counts its arena) */
  int64_t rows = batch / M;
  if (rows > 0 && (dc->eval_batch == 0 || dc->eval_batch > rows)) dc->eval_batch = rows;
  dc->recompute = p->recompute == 2 ? TS_RECOMPUTE_SELECTIVE : p->recompute ? TS_RECOMPUTE_FULL : TS_RECOMPUTE_NONE;
  dc->sequence_parallel = p->sp && p->tp > 1;
  dc->n_recompute_layers = 0;
  int cut = ts_autoplan_model_ways(p) > 1; /* the operators cut by strategies: semi_auto_parallel */
  if (cut) dc->full_batch = 0;
  dc->pipeline_semi = cut;
  if (semi) *semi = cut;
  if (pp > 1 && p->n_stage_rules > 0) { /* the plan's cut, as a value */
    dc->stage_rules = p->stage_rules;
    dc->n_stage_rules = p->n_stage_rules;
  }
  *vt = ts_dist_find(pp > 1 ? "pipeline" : cut ? "semi_auto_parallel" : p->dp * pp > 1 ? "data_parallel" : "stand_alone");
}

int ts__autoplan_cuts(const ts_autoparallel_job *job, ts_autoplan *p) {
  if (p->pp <= 1) {
    free(p->stage_rules);
    p->stage_rules = NULL;
    p->n_stage_rules = 0;
    return TS_OK;
  }
  ts_dist_config dc = job->base; /* with p's rules when it has any (the cut they make, read back) */
  const ts_dist_vt *vt;
  ts__autoplan_dist(p, job->batch_size, &dc, &vt, NULL);
  dc.dry_allocate = 0; /* sized only */
  ts_dist_model m = job->model;
  m.strategies = p->strategies;
  ts_dist *d = NULL;
  int rc = ts_dist_create(vt, &dc, &m, p->dp * ts_autoplan_model_ways(p) * p->pp, 0, &d);
  if (!rc && (rc = ts_dist_build(d, &m))) rc = ts_error_as_config(rc);
  ts_op_text *rules = NULL;
  int n = 0;
  if (!rc) rc = ts__dist_stage_rules(d, &rules, &n);
  ts_dist_free(d);
  if (rc) return rc;
  free(p->stage_rules);
  p->stage_rules = rules;
  p->n_stage_rules = n;
  return TS_OK;
}

int ts__autoplan_strategies(const ts_autoparallel_job *job, const ts_cluster *cl, ts_autoplan *p) {
  ts_strategy_set_free(p->strategies);
  p->strategies = NULL;
  p->devices = p->dp * ts_autoplan_model_ways(p) * p->pp;
  p->search_mode = job->search_mode;
  snprintf(p->cluster, sizeof p->cluster, "%s", cl->name);
  if (p->cp > 1) p->cp_algo = ts_gpt_cp_algo(job->gpt, p->cp, p->tp, p->cp_algo); /* auto: as it runs */
  ts_dist_config dc = job->base;
  const ts_dist_vt *vt;
  ts__autoplan_dist(p, job->batch_size, &dc, &vt, NULL);
  const ts_strategy_set *set;
  ts_strategy_set *own;
  int rc = plan_strategies(job, p, &dc, cl, NULL, &set, &own);
  if (!rc) p->strategies = own;
  return rc;
}

static int better(const ts_autoplan *a, const ts_autoplan *b) {
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
 * optimizer's slots, over the shard group under optimizer-state sharding), plus the layer inputs the first
 * stage stashes for min(P, M) micro-batches in flight (s * rows * h each). Step: the model's
 * FLOPs (6, or 8 with recompute, per parameter and token) spread evenly over the N devices at the
 * cluster's GEMM rate, stretched by the pipeline's bubble (1 + (P-1)/(V M)), times 0.9, plus 0.9 times
 * context parallelism's exchanges that are never hidden (below). Both are
 * below what the build gives, so pruning by them never drops a plan that would win. */
static void gpt_bounds(const ts_autoparallel_job *job, const ts_cluster *cl, int N, ts_autoplan *p) {
  p->mem_bound = p->time_bound = 0;
  if (!job->gpt) return;
  double l = job->gpt->n_layer, h = job->gpt->n_embd, s = job->seq_len > 0 ? job->seq_len : 1;
  int M = p->micro_batches > 0 ? p->micro_batches : 1, V = p->virtual_stages > 1 ? p->virtual_stages : 1;
  double rows = (double)ts_autoplan_micro_batch_size(p, job->batch_size);
  int amp = job->amp_level >= 2, slots = job->optim_slots;
  double layers = 0.75 * l / p->pp, np = layers * 12 * h * h / p->tp;
  double pb = amp ? (job->amp_level == 2 ? 6 : 2) : 4, gb = amp ? 2 : 4, ob = 4.0 * slots;
  if (M > 1 && p->zero < 2) gb *= 2; /* the accumulation buffer */
  if (p->zero >= 1) ob /= p->dp;
  if (p->zero >= 3) pb /= p->dp;
  double inflight = p->pp > 1 ? (M < p->pp ? M : p->pp) : 1;
  p->mem_bound = np * (pb + gb + ob) + inflight * layers * s * rows * h * (amp ? 2 : 4) / (p->cp > 1 ? p->cp : 1);
  double peak = amp || job->amp_level == 1 ? (cl->peak_flops_bf16 > 0 ? cl->peak_flops_bf16 : cl->peak_flops_f32)
                                            : cl->peak_flops_f32;
  double flops = (p->recompute == 1 ? 8.0 : 6.0) * l * 12 * h * h * s * (double)job->batch_size / N;
  p->time_bound = 0.9 * flops / (peak * cl->gemm_efficiency) * (1 + (p->pp - 1.0) / (V * (double)M));
  if (p->cp > 1) {
    /* the sequence's exchanges the cost model does not hide, for each of the stage's l/pp layers
     * and M micro-batches: Ulysses' 8 all-to-alls (q, k, v and the output, forward and backward)
     * of the rank's (rows, s/C, h/tp) activation; the ring's backward passing the blocks' f32 key
     * and value gradients C times */
    int C = p->cp, span = ts_cluster_spans(cl, C, 1);
    double x = rows * (s / C) * (h / p->tp), by = job->amp_level >= 1 ? 2 : 4;
    double per = p->cp_algo == TS_CP_RING ? C * ts_cluster_coll_time(cl, TS_COST_P2P, 2, span, 8 * x)
                                          : 8 * ts_cluster_coll_time(cl, TS_COST_ALLTOALL, C, span, x * by);
    p->time_bound += 0.9 * M * (l / p->pp) * per;
  }
}

/* Whether a, then b, is the order to price in: the smaller step bound first (generation order on
 * ties: deterministic). */
static int cmp_bound(const void *x, const void *y) {
  const ts_autoplan *a = *(ts_autoplan *const *)x, *b = *(ts_autoplan *const *)y;
  if (a->time_bound != b->time_bound) return a->time_bound < b->time_bound ? -1 : 1;
  return a < b ? -1 : a > b;
}

/* ---- the candidates (delimited: the per-operator search of tp > 1 plugs in here) ---- */

static int64_t gcd(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b, b = t;
  }
  return a;
}

/* Appends the plans for degrees (dp, tp, pp) and context parallelism C (1: none): micro-batch
 * counts, shard stages, recompute; with C > 1 attention's algorithms (job->cp_algo, or both when
 * TS_CP_AUTO: Ulysses where the heads divide by tp * C). */
static int add_degrees(const ts_autoparallel_job *job, const ts_cluster *cl, int dp, int tp, int pp, int C,
                       ts_autoplan *out, int cap, int *n) {
  int64_t B = job->batch_size;
  /* tensor parallel: the per-operator search's cuts (any model), and Megatron-LM's for GPT. A GPT
   * job spanning nodes takes Megatron's only: its graphs are large (an operator search per split
   * of the devices would take minutes, and its elimination tables outgrow the exact search) and
   * Megatron's cuts are what such jobs are known to run best with; a tp their cuts cannot take (it
   * divides not the heads or the vocabulary) is then not offered either (it fell back to the
   * operator search: GPT-145B's tp 64 took over 10 minutes and 7 GB) */
  int gpt = job->gpt != NULL;
  int mega = gpt && job->gpt->n_head % tp == 0 && job->gpt->vocab_size % tp == 0 && job->seq_len % C == 0;
  /* attention's algorithms over the sequence cut: Ulysses needs the heads to divide by tp * C */
  int algos[2], na = 0;
  if (C <= 1) algos[na++] = 0;
  else if (mega) {
    int ul = job->gpt->n_head % (tp * C) == 0;
    if (job->cp_algo == TS_CP_AUTO) {
      if (ul) algos[na++] = TS_CP_ULYSSES;
      algos[na++] = TS_CP_RING;
    } else if (job->cp_algo == TS_CP_RING || ul) {
      algos[na++] = job->cp_algo;
    }
  }
  if (C > 1 && !na) return TS_OK; /* the sequence cut cannot be made at these degrees */
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
    /* a searched sequence cut C whose micro-batch rows r (B / M / dp) share a factor k with it is
     * not offered: the plan (dp k, C / k, rows r / k, the same M, zero, recompute and pieces)
     * gives every device the same tokens (the same GEMMs, causal attention FLOPs and
     * activations), its gradients reduced over the same ranks and the optimizer state sharded
     * over more, and its exchanges move less over a smaller group (none at k = C): never slower,
     * never larger. Context parallelism pays where a micro-batch has fewer rows than C (a long
     * sequence's one row) */
    if (C > 1 && job->cp == 0 && gcd(B / M / dp, C) > 1) continue;
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
          for (int a = 0; a < na; a++)
          for (int mg = 0; mg <= 1; mg++) { /* Megatron's cuts (1) or the search's (0) */
            /* context parallelism: Megatron's cuts with the sequence cut (any tp) */
            if (C > 1 ? !mg || !mega : (tp == 1 && mg) || (tp > 1 && mg && !mega) || (tp > 1 && !mg && !searched_ok))
              continue;
            if (V > 1 && (pp < 2 || Ms[mi] % pp || (gpt && job->gpt->n_layer < 2 * pp)))
              continue;
            if (*n == cap) return ts_error_set(TS_ERANGE, "search: more than %d candidate plans", cap);
            ts_autoplan *p = &out[(*n)++];
            memset(p, 0, sizeof *p);
            p->dp = dp, p->tp = tp, p->pp = pp, p->micro_batches = Ms[mi], p->zero = zero, p->recompute = rec;
            p->virtual_stages = V;
            p->megatron = mg;
            p->sp = tp > 1 && job->base.sequence_parallel; /* the caller's parallel.sequence_parallel */
            p->cp = C > 1 ? C : 0;
            p->cp_algo = C > 1 ? algos[a] : 0;
          }
    }
  return TS_OK;
}

/* Builds plan p dry and prices it (its fit against the limits). */
static void price_candidate(const ts_autoparallel_job *job, int N, const ts_cluster *cl, double limit, double budget,
                            ts_autoplan *p, op_cache *cache) {
  ts_dist_config dc = job->base;
  const ts_dist_vt *vt;
  ts__autoplan_dist(p, job->batch_size, &dc, &vt, NULL);
  const ts_strategy_set *set = NULL;
  ts_strategy_set *own = NULL;
  int rc = plan_strategies(job, p, &dc, cl, cache, &set, &own);
  if (!rc && job->check) rc = job->check(p, job->check_user);
  ts_dist_model m = job->model;
  m.strategies = set;
  if (!rc) rc = ts__autoparallel_predict(vt, &dc, &m, job->optim_slots, job->batch_size, N, 0, cl, &p->pred);
  ts_strategy_set_free(own);
  if (rc) {
    snprintf(p->why, sizeof p->why, "%s", ts_last_error());
    return;
  }
  p->priced = 1;
  double total = (double)p->pred.memory_bytes;
  p->fits = total <= limit && (budget <= 0 || total <= budget);
  if (!p->fits) {
    char h1[32], h2[32];
    snprintf(p->why, sizeof p->why, "needs %s per device, over %s (%s)", ts__human_bytes(total, h1, sizeof h1),
             budget > 0 && total > budget ? "train.max_memory_mb" : "the device memory",
             ts__human_bytes(budget > 0 && total > budget ? budget : limit, h2, sizeof h2));
  }
}

/* Prices p unless its bounds rule it out (over the memory; or its step bound above the best
 * plan priced so far), keeping *best. */
static void price_one(const ts_autoparallel_job *job, int N, const ts_cluster *cl, double limit, double budget,
                      double cut, ts_autoplan *p, ts_autoplan *out, int *best, op_cache *cache) {
  if (p->mem_bound > cut) {
    char h1[32], h2[32];
    snprintf(p->why, sizeof p->why, "not built: needs at least %s per device (parameters, gradients, "
             "optimizer state, stashed layer inputs), over %s", ts__human_bytes(p->mem_bound, h1, sizeof h1),
             ts__human_bytes(cut, h2, sizeof h2));
    return;
  }
  if (*best >= 0 && out[*best].fits && p->time_bound > out[*best].pred.step_s) {
    snprintf(p->why, sizeof p->why, "not built: its step is at least %.3f s, above the best plan's %.3f s",
             p->time_bound, out[*best].pred.step_s);
    return;
  }
  price_candidate(job, N, cl, limit, budget, p, cache);
  if (p->priced && (*best < 0 || better(p, &out[*best]))) *best = (int)(p - out);
}

/* Appends the candidates of context-parallel phase `phase` (0: the degree given, job->cp > 1, or
 * none; 1: the searched degrees C > 1) to out[*nout..]. */
static int enumerate(const ts_autoparallel_job *job, int N, const ts_cluster *cl, int phase, ts_autoplan *out, int cap,
                     int *nout) {
  int G = job->cp > 1 ? job->cp : 1, rc = TS_OK;
  int64_t B = job->batch_size;
  for (int C = 1; C <= N && !rc; C++) {
    if (N % C || (phase == 0 ? C != G : C == 1 || job->seq_len % C)) continue;
    int n = N / C; /* the devices of the other degrees */
    for (int tp = 1; tp <= n && !rc; tp++) {
      if (n % tp) continue;
      /* tensor parallelism inside a node once the job spans nodes (its all-reduces are per layer) */
      int span = G > 1 ? tp : tp * C;
      if (span > 1 && N > cl->devices_per_node && span > cl->devices_per_node) continue;
      for (int pp = 1; pp <= n / tp && !rc; pp++) {
        if ((n / tp) % pp) continue;
        if (job->gpt && pp > job->gpt->n_layer + 1) continue;
        int dp = n / tp / pp;
        if (B % dp) continue;
        rc = add_degrees(job, cl, dp, tp, pp, C, out, cap, nout);
      }
    }
  }
  return rc;
}

/* The progress of a search (its log and time budget). */
typedef struct {
  double t0, next_log;
  int done_n, out_of_time, jr;
} progress;

/* Prices out[from..n-1] (bounds first: see search), keeping *best. */
static void price_all(const ts_autoparallel_job *job, int N, const ts_cluster *cl, double limit, double budget,
                      double cut, ts_autoplan *out, int from, int n, int *best, op_cache *cache, progress *pg,
                      ts_autoplan **order) {
  int k = 0;
  for (int i = from; i < n; i++) {
    gpt_bounds(job, cl, N, &out[i]);
    order[k++] = &out[i];
  }
  qsort(order, (size_t)k, sizeof *order, cmp_bound);
  /* first, each (dp, cp, tp, pp) group's most frugal plan (the most micro-batches, recompute, the
   * highest shard stage, one piece per rank): memory only grows from it, so when it does not fit none of the group
   * does; then every plan in the order of its step bound */
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < k; i++) {
      ts_autoplan *p = order[i];
      if (p->priced || p->why[0]) continue;
      int frugal = 1, over = 0;
      for (int q = from; q < n; q++) {
        const ts_autoplan *o = &out[q];
        if (o == p || o->dp != p->dp || o->tp != p->tp || o->pp != p->pp || o->cp != p->cp || o->cp_algo != p->cp_algo)
          continue;
        if (o->micro_batches > p->micro_batches || o->recompute > p->recompute || o->zero > p->zero ||
            o->virtual_stages < p->virtual_stages)
          frugal = 0;
        if (o->priced && !o->fits && o->micro_batches >= p->micro_batches && o->recompute >= p->recompute &&
            o->zero >= p->zero && o->virtual_stages <= p->virtual_stages)
          over = 1 + q;
      }
      if (pass == 0 && !frugal) continue;
      double now = ts_time_now();
      if (!pg->out_of_time && job->time_budget > 0 && now - pg->t0 >= job->time_budget) pg->out_of_time = 1;
      if (pg->out_of_time) {
        snprintf(p->why, sizeof p->why, "not built: the search's time budget (%g s, parallel.search_time_budget) "
                 "ran out first", job->time_budget);
        continue;
      }
      if (now >= pg->next_log && pg->jr == 0) {
        char bs[160] = "none yet";
        if (*best >= 0 && out[*best].fits) {
          char ps[128];
          ts_autoplan_str(&out[*best], ps, sizeof ps);
          snprintf(bs, sizeof bs, "%s, %.3f ms per step", ps, 1e3 * out[*best].pred.step_s);
        }
        ts_log(TS_LOG_WARN, "auto_parallel: searching %d devices of %s: %d of %d plans done in %.0f s%s; the best so "
               "far: %s", N, cl->name, pg->done_n, n, now - pg->t0,
               job->time_budget > 0 ? " (parallel.search_time_budget / --time-budget stops it)" : "", bs);
        pg->next_log = now + 5;
      }
      pg->done_n++;
      if (over) {
        char s[160];
        ts_autoplan_str(&out[over - 1], s, sizeof s);
        snprintf(p->why, sizeof p->why, "not built: needs more memory than %s, which does not fit", s);
        continue;
      }
      price_one(job, N, cl, limit, budget, cut, p, out, best, cache);
    }
}

/* The search over cands[0..cap-1] (*nout written, *best the index of the chosen, -1 if none fits). */
static int search(const ts_autoparallel_job *job, int N, const ts_cluster *cl, ts_autoplan *out, int cap, int *nout,
                  int *best, op_cache *cache) {
  *nout = 0;
  *best = -1;
  if (N < 1) return ts_error_set(TS_EINVAL, "search: %d devices", N);
  int gpt = job->gpt != NULL;
  double budget = job->max_memory_mb > 0 ? job->max_memory_mb * 1048576.0 : 0;
  double limit = cl->mem_bytes, cut = budget > 0 && budget < limit ? budget : limit;
  /* context parallelism: a degree given (job->cp > 1) takes its share of the devices from every
   * plan; 1: none; 0 (auto), for the zoo's GPT, not beside parallel.sequence_parallel (both cut
   * the sequence): a second phase offers every degree C > 1 dividing the devices and the
   * sequence (C x tp inside a node once the job spans nodes: attention's exchanges are per
   * layer, like tensor parallelism's all-reduces), when the first found no plan that fits or its
   * best runs one row a micro-batch (the sequence's activations are what limits it; with more
   * rows a micro-batch, the sequence cut would only trade rows for exchanges: see add_degrees) */
  int G = job->cp > 1 ? job->cp : 1;
  if (N % G) return ts_error_set(TS_ECONFIG, "parallel.context_parallel: %d does not divide the %d devices", G, N);
  if (G > 1 && !gpt) /* the caller checked the config (the trainer: ts__config_check_context_parallel) */
    return ts_error_set(TS_ECONFIG, "parallel.context_parallel: %d: its cuts are generated for the zoo's GPT", G);
  int searched_cp = job->cp == 0 && gpt && !job->base.sequence_parallel;
  int rc = enumerate(job, N, cl, 0, out, cap, nout);
  if (rc) return rc;
  ts_autoplan **order = malloc(sizeof *order * ((size_t)cap + 1));
  if (!order) return ts_error_set(TS_ENOMEM, "search: out of memory");
  /* progress after 3 s, then every 5 s (rank 0; through the logging hook), and the time budget:
   * checked between plans, so one plan's build and operator search may overrun it */
  progress pg = {.t0 = ts_time_now()};
  pg.next_log = pg.t0 + 3;
  int jn = 1;
  ts_job_rank(&pg.jr, &jn);
  price_all(job, N, cl, limit, budget, cut, out, 0, *nout, best, cache, &pg, order);
  if (searched_cp && !pg.out_of_time &&
      (*best < 0 || !out[*best].fits || ts_autoplan_micro_batch_size(&out[*best], job->batch_size) == 1)) {
    int from = *nout;
    if (!(rc = enumerate(job, N, cl, 1, out, cap, nout)))
      price_all(job, N, cl, limit, budget, cut, out, from, *nout, best, cache, &pg, order);
  }
  free(order);
  if (rc) return rc;
  int out_of_time = pg.out_of_time, done_n = pg.done_n;
  /* Megatron's sequence parallelism, searched: the twin with it of the best plan with Megatron's
   * tensor-parallel cuts (its activations between the tensor-parallel blocks cut by tp, the
   * reduce-scatters and all-gathers priced as the all-reduces they replace, the gathers again in
   * backward), taken when it is at least as fast as the best of all (then the less memory).
   * parallel.sequence_parallel true gives it to every plan instead. */
  int bm = -1;
  for (int i = 0; i < *nout; i++)
    if (out[i].priced && out[i].fits && out[i].megatron && out[i].tp > 1 && !out[i].sp && out[i].cp <= 1 &&
        (bm < 0 || better(&out[i], &out[bm])))
      bm = i;
  if (bm >= 0 && !out_of_time && *nout < cap) {
    ts_autoplan *t = &out[(*nout)++];
    *t = out[bm];
    t->sp = 1;
    t->priced = t->fits = 0;
    t->why[0] = 0;
    memset(&t->pred, 0, sizeof t->pred);
    price_candidate(job, N, cl, limit, budget, t, cache);
    if (t->priced && better(t, &out[*best])) *best = (int)(t - out);
  }
  if (out_of_time && pg.jr == 0 && *best >= 0 && out[*best].fits) {
    char ps[128];
    ts_autoplan_str(&out[*best], ps, sizeof ps);
    ts_log(TS_LOG_WARN, "auto_parallel: the time budget of %g s (parallel.search_time_budget) ran out after %d of %d "
           "plans: taking the best plan found so far, %s (%.3f ms per step); it may not be the fastest",
           job->time_budget, done_n, *nout, ps, 1e3 * out[*best].pred.step_s);
  }
  if (out_of_time && (*best < 0 || !out[*best].fits))
    return ts_error_set(TS_ECONFIG, "auto_parallel: no plan that fits was found within the time budget of %g s "
                        "(parallel.search_time_budget; %d of %d plans done): raise it, or 0 for no limit",
                        job->time_budget, done_n, *nout);
  if (*best < 0 || !out[*best].fits) {
    double least = 0, lb = 0;
    for (int i = 0; i < *nout; i++) {
      if (out[i].pred.memory_bytes > 0 && (least == 0 || out[i].pred.memory_bytes < least))
        least = (double)out[i].pred.memory_bytes;
      if (out[i].mem_bound > 0 && (lb == 0 || out[i].mem_bound < lb)) lb = out[i].mem_bound;
    }
    *best = -1;
    char h1[32], h2[32], h3[32]; /* in a unit that shows the numbers (bytes to TiB) */
    if (least > 0)
      return ts_error_set(TS_ECONFIG, "auto_parallel: no plan fits %d devices of %s: the smallest needs %s per "
                          "device, %s over the limit of %s",
                          N, cl->name, ts__human_bytes(least, h1, sizeof h1), ts__human_bytes(least - cut, h2, sizeof h2),
                          ts__human_bytes(cut, h3, sizeof h3));
    if (lb > 0)
      return ts_error_set(TS_ECONFIG, "auto_parallel: no plan fits %d devices of %s: the smallest needs at least "
                          "%s per device, %s over the limit of %s",
                          N, cl->name, ts__human_bytes(lb, h1, sizeof h1), ts__human_bytes(lb - cut, h2, sizeof h2),
                          ts__human_bytes(cut, h3, sizeof h3));
    return ts_error_set(TS_ECONFIG, "auto_parallel: no plan for %d devices can be built (%s)", N,
                        *nout ? out[0].why : "no candidate");
  }
  return TS_OK;
}

int ts__autoparallel_search(const ts_autoparallel_job *job, int N, const ts_cluster *cl, ts_autoplan *cands, int cap,
                            int *n, ts_autoplan *out) {
  memset(out, 0, sizeof *out);
  int own = !cands, cnt = 0, best = -1;
  if (own) {
    cap = 16384;
    if (!(cands = calloc((size_t)cap, sizeof *cands))) return ts_error_set(TS_ENOMEM, "auto_parallel: out of memory");
  }
  op_cache cache = {0}; /* the per-operator search's strategies per (dp, tp, micro-batches) */
  int rc = search(job, N, cl, cands, cap, &cnt, &best, &cache);
  if (n) *n = cnt;
  for (int i = 0; i < cnt; i++) {
    cands[i].devices = N, cands[i].searched = cnt, cands[i].search_mode = job->search_mode;
    snprintf(cands[i].cluster, sizeof cands[i].cluster, "%s", cl->name);
  }
  if (!rc) {
    *out = cands[best];
    out->strategies = NULL;
    /* the chosen plan's strategies: the cache's (taken from it), or built again (Megatron's) */
    int M = out->micro_batches > 0 ? out->micro_batches : 1;
    for (int i = 0; out->tp > 1 && out->cp <= 1 && !out->megatron && i < cache.n; i++)
      if (cache.e[i].dp == out->dp && cache.e[i].tp == out->tp && cache.e[i].M == M && !cache.e[i].rc) {
        out->strategies = cache.e[i].st;
        cache.e[i].st = NULL;
      }
    if (ts_autoplan_model_ways(out) > 1 && !out->strategies) rc = ts__autoplan_strategies(job, cl, out);
    if (!rc) rc = ts__autoplan_cuts(job, out);
    out->searched = cnt;
  }
  cache_free(&cache);
  if (own) free(cands);
  if (rc) {
    ts_autoplan_free(out);
    memset(out, 0, sizeof *out);
  }
  return rc;
}
