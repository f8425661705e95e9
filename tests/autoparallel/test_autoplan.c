/* The automatic-parallel search's plan as a value (include/tessera/autoparallel.h,
 * src/autoparallel/): it equals what the config-text path produced before the plan travelled as
 * a value, and the layers consuming it agree on it.
 *   - GPT's Megatron-LM cuts (ts_gpt_megatron_strategies, src/zoo/gpt.c) for dp x tp equal the
 *     strategy strings the search used to print into parallel.strategies, parsed (same entries,
 *     same order, same cuts), for several (dp, tp); a tp the heads cannot take is refused;
 *   - the plan searched for the MLP on 2 and 4 devices of a slow cluster (where cutting pays): its
 *     strategies written as text and parsed back (the old path) give the same set; the same
 *     degrees built alone (`tessera plan --fix`) give the same strategies and the same prediction;
 *     the description names it;
 *   - a plan applied to the distribution config directly (ts__autoplan_dist) gives the same
 *     fields as the plan applied to the config keys and converted (ts_config_apply_autoplan,
 *     ts_config_dist), for plans with and without stages, accumulation, shards, recompute, tp;
 *   - a pipeline plan carries its stage cut as rules (ts__autoplan_cuts): one or more per piece,
 *     the run's distribution config borrows them, the cut they build reads back as the same rules,
 *     and the plan priced with them equals the plan priced with the layout's own balanced cut
 *     (the same pieces: the same step and memory, bitwise); a rule moved to the next piece reads
 *     back moved and changes the first stage's memory (the rules are in force, not ignored);
 *     copies own their rules. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autoparallel/autoplan.h"
#include "tessera/train.h"
#include "train/config_dist.h"
#include "train/train_impl.h"
#include "tessera/zoo.h"
#include "test_util.h"

static const char *k_mlp =
    "model: {name: mlp, hidden: [64, 32]}\n"
    "data: {name: fashion_mnist, path: /nonexistent/fashion}\n"
    "train: {steps: 1, batch_size: 32}\n"
    "optimizer: {name: sgd, lr: 0.01}\n";
static const int64_t k_mlp_params = 784 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10; /* k_mlp's parameters */
static const char *k_gpt =
    "model: {name: gpt, n_layer: 4, n_head: 4, n_embd: 32, block_size: 16, vocab_size: 256}\n"
    "data: {name: text, path: /nonexistent/input.txt, seq_len: 16, transforms: []}\n"
    "train: {steps: 1, batch_size: 16}\n"
    "optimizer: {name: adamw, lr: 0.001}\n";

/* The strategies the search printed for GPT before (trainer_search.c's megatron()), parsed. */
static ts_strategy_set *old_megatron(int dp, int tp) {
  const char *op[] = {"transformer.embedding",          "transformer.h.*.attn.c_attn.dense*",
                      "transformer.h.*.attn.attention", "transformer.h.*.attn.c_proj.dense",
                      "transformer.h.*.mlp.c_fc.dense", "transformer.h.*.mlp.c_proj.dense",
                      "dense",                          "softmax_ce"};
  char t[8][96];
  snprintf(t[0], 96, "((%d,1),(%d,1))", dp, tp);
  snprintf(t[1], 96, "((%d,1,1),(%d,1),(%d,))", dp, tp, tp);
  snprintf(t[2], 96, "((%d,%d,1,1),(%d,%d,1,1),(%d,%d,1,1))", dp, tp, dp, tp, dp, tp);
  snprintf(t[3], 96, "((%d,1,%d),(1,%d))", dp, tp, tp);
  snprintf(t[4], 96, "((%d,1,1),(%d,1))", dp, tp);
  snprintf(t[5], 96, "((%d,1,%d),(1,%d))", dp, tp, tp);
  snprintf(t[6], 96, "((%d,1,1),(%d,1))", dp, tp);
  snprintf(t[7], 96, "((%d,%d),(%d,))", dp, tp, dp);
  ts_strategy_set *s = NULL;
  CHECK_OK(ts_strategy_set_create(dp * tp, 0, &s));
  for (int i = 0; s && i < 8; i++) CHECK_OK(ts_strategy_set_put_text(s, op[i], t[i]));
  return s;
}

/* a and b: the same entries in the same order (names and cuts), and equal as sets. */
static void check_same_set(const char *what, const ts_strategy_set *a, const ts_strategy_set *b) {
  CHECK_MSG(a && b, "%s: a set is missing", what);
  if (!a || !b) return;
  CHECK_MSG(ts_strategy_set_equal(a, b), "%s: the sets differ", what);
  CHECK_MSG(ts_strategy_set_count(a) == ts_strategy_set_count(b), "%s: %d entries, %d expected", what,
            ts_strategy_set_count(a), ts_strategy_set_count(b));
  for (int i = 0; i < ts_strategy_set_count(a) && i < ts_strategy_set_count(b); i++) {
    char x[256], y[256];
    ts_op_strategy_str(ts_strategy_set_at(a, i), x, sizeof x);
    ts_op_strategy_str(ts_strategy_set_at(b, i), y, sizeof y);
    CHECK_MSG(!strcmp(ts_strategy_set_name(a, i), ts_strategy_set_name(b, i)) && !strcmp(x, y),
              "%s: entry %d is %s %s, expected %s %s", what, i, ts_strategy_set_name(a, i), x,
              ts_strategy_set_name(b, i), y);
  }
}

static void test_megatron(void) {
  ts_gpt_config g = {.vocab_size = 256, .n_layer = 2, .n_head = 4, .n_embd = 32};
  const int cases[][2] = {{1, 2}, {2, 2}, {1, 4}, {4, 2}, {2, 1}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int dp = cases[k][0], tp = cases[k][1];
    ts_strategy_set *want = old_megatron(dp, tp), *got = NULL;
    CHECK_OK(ts_strategy_set_create(dp * tp, 0, &got));
    CHECK_OK(ts_gpt_megatron_strategies(&g, dp, tp, got));
    char what[64];
    snprintf(what, sizeof what, "megatron dp %d tp %d", dp, tp);
    check_same_set(what, got, want);
    ts_strategy_set_free(got);
    ts_strategy_set_free(want);
  }
  /* through the search's layer, as `tessera plan --fix ...,cuts=megatron` and the search build it */
  ts_config cfg;
  CHECK_OK(ts_config_load_string(k_gpt, "gpt", NULL, 0, &cfg));
  ts_cluster cl;
  CHECK_OK(ts_cluster_builtin("dgx-a100-80g", &cl));
  ts_autoplan p;
  memset(&p, 0, sizeof p);
  p.dp = 2, p.tp = 2, p.pp = 1, p.micro_batches = 1, p.megatron = 1;
  CHECK_OK(ts_trainer_autoplan_build(&cfg, &cl, &p));
  ts_strategy_set *want = old_megatron(2, 2);
  check_same_set("megatron plan dp 2 tp 2", p.strategies, want);
  ts_strategy_set_free(want);
  ts_autoplan_free(&p);
  CHECK(p.strategies == NULL);
  ts_config_free(&cfg);
  ts_strategy_set *s = NULL;
  CHECK_OK(ts_strategy_set_create(3, 0, &s));
  EXPECT_ERR(ts_gpt_megatron_strategies(&g, 1, 3, s), TS_ECONFIG, "n_head", "3");
  EXPECT_ERR(ts_gpt_megatron_strategies(&g, 1, 2, s), TS_EINVAL, "3 devices");
  ts_strategy_set_free(s);
}

/* A cluster whose devices are slow and whose links are free: cutting the work pays. */
static void slow_cluster(ts_cluster *c) {
  CHECK_OK(ts_cluster_builtin("dgx-a100-80g", c));
  snprintf(c->name, sizeof c->name, "slow");
  c->devices_per_node = 8, c->nodes = 1;
  c->peak_flops_f32 = 1e9, c->peak_flops_bf16 = 0, c->gemm_efficiency = 1, c->mem_bandwidth = 1e9;
  c->mem_bytes = 8e9, c->intra_bw = c->inter_bw = 1e11, c->intra_latency = c->inter_latency = 0;
  c->op_overhead = 0;
}

static void test_searched(const char *name, const char *yaml, int N) {
  ts_config cfg;
  int rc = ts_config_load_string(yaml, name, NULL, 0, &cfg);
  CHECK_MSG(rc == TS_OK, "%s: %s", name, ts_last_error());
  if (rc) return;
  ts_cluster cl;
  slow_cluster(&cl);
  int cap = 4096, n = 0;
  ts_autoplan *all = calloc((size_t)cap, sizeof *all), best;
  rc = ts_trainer_autoplan_search(&cfg, N, &cl, all, cap, &n, &best);
  CHECK_MSG(rc == TS_OK, "%s on %d: %s", name, N, ts_last_error());
  if (!rc) {
    char s[160], line[512];
    ts_autoplan_str(&best, s, sizeof s);
    printf("%s on %d devices: %s, %.3f ms, %lld bytes, %d strategies\n", name, N, s, 1e3 * best.pred.step_s,
           (long long)best.pred.memory_bytes, best.strategies ? ts_strategy_set_count(best.strategies) : 0);
    CHECK(n > 1 && best.fits && best.priced && best.dp * best.tp * best.pp == N && best.searched == n);
    CHECK(best.devices == N && !strcmp(best.cluster, "slow"));
    CHECK_MSG((best.tp > 1) == (best.strategies != NULL), "%s: tp %d with%s strategies", name, best.tp,
              best.strategies ? "" : "out");
    for (int i = 0; i < n; i++) CHECK(all[i].strategies == NULL); /* the listing carries none */
    ts_autoplan_describe(&best, line, sizeof line);
    char head[256];
    snprintf(head, sizeof head, "auto_parallel on %d devices of slow: %s (predicted", N, s);
    CHECK_MSG(!strncmp(line, head, strlen(head)) && strstr(line, "plans searched)"), "describe: %s", line);
    if (best.strategies) {
      /* the old path: each strategy as text (parallel.strategies), parsed again */
      ts_strategy_set *old = NULL;
      CHECK_OK(ts_strategy_set_create(ts_strategy_set_device_num(best.strategies), 0, &old));
      CHECK(ts_strategy_set_device_num(best.strategies) == best.dp * best.tp);
      for (int i = 0; old && i < ts_strategy_set_count(best.strategies); i++) {
        char t[256];
        ts_op_strategy_str(ts_strategy_set_at(best.strategies, i), t, sizeof t);
        CHECK_OK(ts_strategy_set_put_text(old, ts_strategy_set_name(best.strategies, i), t));
      }
      check_same_set("searched vs text", best.strategies, old);
      ts_strategy_set_free(old);
    }
    /* the same degrees alone (tessera plan --fix): the same strategies, the same prediction */
    ts_autoplan fix;
    memset(&fix, 0, sizeof fix);
    fix.dp = best.dp, fix.tp = best.tp, fix.pp = best.pp, fix.micro_batches = best.micro_batches;
    fix.zero = best.zero, fix.recompute = best.recompute, fix.virtual_stages = best.virtual_stages;
    fix.megatron = best.megatron, fix.sp = best.sp, fix.cp = best.cp, fix.cp_algo = best.cp_algo;
    CHECK_OK(ts_trainer_autoplan_build(&cfg, &cl, &fix));
    if (best.strategies) check_same_set("searched vs built alone", fix.strategies, best.strategies);
    ts_step_prediction p;
    CHECK_OK(ts_trainer_predict_autoplan(&cfg, &fix, N, 0, &cl, &p));
    CHECK_MSG(p.step_s == best.pred.step_s && p.memory_bytes == best.pred.memory_bytes,
              "%s: predicted alone %.9f s %lld B, searched %.9f s %lld B", name, p.step_s, (long long)p.memory_bytes,
              best.pred.step_s, (long long)best.pred.memory_bytes);
    ts_autoplan copy;
    CHECK_OK(ts_autoplan_copy(&copy, &best));
    CHECK(copy.strategies != best.strategies || !best.strategies);
    if (best.strategies) check_same_set("copy", copy.strategies, best.strategies);
    ts_autoplan_free(&copy);
    ts_autoplan_free(&fix);
    ts_autoplan_free(&best);
  }
  free(all);
  ts_config_free(&cfg);
}

/* The plan on the distribution config directly equals the plan on the config keys, converted. */
static void test_dist_fields(void) {
  ts_config cfg;
  CHECK_OK(ts_config_load_string(k_gpt, "gpt", NULL, 0, &cfg));
  const ts_autoplan plans[] = {
      {.dp = 4, .tp = 1, .pp = 1, .micro_batches = 1},
      {.dp = 2, .tp = 1, .pp = 1, .micro_batches = 4, .zero = 2, .recompute = 1},
      {.dp = 1, .tp = 1, .pp = 1, .micro_batches = 3}, /* 16 rows do not split 3 ways: no accumulation */
      {.dp = 1, .tp = 2, .pp = 2, .micro_batches = 4, .virtual_stages = 2, .recompute = 1},
      {.dp = 2, .tp = 1, .pp = 2, .micro_batches = 8, .zero = 1},
      {.dp = 2, .tp = 2, .pp = 1, .micro_batches = 2, .zero = 1, .megatron = 1},
  };
  ts_dist_config base;
  ts_config view = cfg;
  view.parallel.mode = TS_PARALLEL_DATA;
  ts_config_dist(&view, &base);
  for (size_t k = 0; k < sizeof plans / sizeof plans[0]; k++) {
    ts_config c;
    CHECK_OK(ts_config_copy(&c, &cfg));
    CHECK_OK(ts_config_apply_autoplan(&c, &plans[k]));
    CHECK_MSG(ts_config_validate(&c) == TS_OK, "plan %zu: %s", k, ts_last_error());
    CHECK(c.parallel.strategies.n == 0); /* no strategy text */
    ts_dist_config want, got = base;
    ts_config_dist(&c, &want);
    const ts_dist_vt *vt;
    int semi = -1;
    ts__autoplan_dist(&plans[k], cfg.train.batch_size, &got, &vt, &semi);
    const char *mode = c.parallel.pipeline_stages > 1 ? "pipeline" : ts_parallel_mode_name(c.parallel.mode);
    CHECK_MSG(vt == ts_dist_find(mode), "plan %zu: layout %s, expected %s", k, vt ? ts_dist_name(vt) : "none", mode);
    CHECK(semi == (plans[k].tp > 1));
    long long a[] = {got.micro_batch, got.eval_batch, got.accum, got.pipeline_stages, got.pipeline_semi,
                     got.pipeline_schedule, got.virtual_stages, got.optimizer_shard, got.recompute,
                     got.n_recompute_layers, got.full_batch};
    long long b[] = {want.micro_batch, want.eval_batch, want.accum, want.pipeline_stages, want.pipeline_semi,
                     want.pipeline_schedule, want.virtual_stages, want.optimizer_shard, want.recompute,
                     want.n_recompute_layers, want.full_batch};
    const char *f[] = {"micro_batch", "eval_batch", "accum", "pipeline_stages", "pipeline_semi", "pipeline_schedule",
                       "virtual_stages", "optimizer_shard", "recompute", "n_recompute_layers", "full_batch"};
    for (int i = 0; i < 11; i++)
      CHECK_MSG(a[i] == b[i], "plan %zu: %s %lld on the distribution config, %lld from the config keys", k, f[i], a[i],
                b[i]);
    ts_config_free(&c);
  }
  ts_config_free(&cfg);
}

/* Pipeline plans' stage cuts as values. */
static void test_stage_cuts(void) {
  ts_config cfg;
  CHECK_OK(ts_config_load_string(k_gpt, "gpt", NULL, 0, &cfg));
  ts_cluster cl;
  slow_cluster(&cl);
  const ts_autoplan plans[] = {
      {.dp = 1, .tp = 1, .pp = 2, .micro_batches = 4},
      {.dp = 1, .tp = 1, .pp = 4, .micro_batches = 4},
      {.dp = 2, .tp = 1, .pp = 2, .micro_batches = 4, .zero = 1},
      {.dp = 1, .tp = 1, .pp = 2, .micro_batches = 4, .virtual_stages = 2},
      {.dp = 1, .tp = 2, .pp = 2, .micro_batches = 4, .megatron = 1},
  };
  for (size_t k = 0; k < sizeof plans / sizeof plans[0]; k++) {
    ts_autoplan p = plans[k], bare, copy;
    char s[160];
    ts_autoplan_str(&p, s, sizeof s);
    int rc = ts_trainer_autoplan_build(&cfg, &cl, &p);
    CHECK_MSG(rc == TS_OK, "%s: %s", s, ts_last_error());
    if (rc) continue;
    int V = p.virtual_stages > 1 ? p.virtual_stages : 1, np = p.pp * V;
    CHECK_MSG(p.n_stage_rules >= np && p.stage_rules, "%s: %d stage rules for %d pieces", s, p.n_stage_rules, np);
    int *seen = calloc((size_t)np, sizeof(int));
    for (int i = 0; i < p.n_stage_rules; i++) {
      int piece = atoi(p.stage_rules[i].text);
      CHECK_MSG(piece >= 0 && piece < np, "%s: rule %s -> %s", s, p.stage_rules[i].op, p.stage_rules[i].text);
      if (piece >= 0 && piece < np) seen[piece] = 1;
    }
    for (int i = 0; i < np; i++) CHECK_MSG(seen[i], "%s: no rule puts anything on piece %d", s, i);
    free(seen);
    /* the distribution config borrows them */
    ts_dist_config dc;
    ts_config view = cfg;
    view.parallel.mode = TS_PARALLEL_DATA;
    ts_config_dist(&view, &dc);
    const ts_dist_vt *vt;
    ts__autoplan_dist(&p, cfg.train.batch_size, &dc, &vt, NULL);
    CHECK(dc.stage_rules == p.stage_rules && dc.n_stage_rules == p.n_stage_rules);
    /* the cut the rules build reads back as the same rules */
    CHECK_OK(ts_autoplan_copy(&copy, &p));
    CHECK(copy.stage_rules != p.stage_rules && copy.n_stage_rules == p.n_stage_rules &&
          !memcmp(copy.stage_rules, p.stage_rules, sizeof *p.stage_rules * (size_t)p.n_stage_rules));
    ts__auto_job a;
    CHECK_OK(ts__train_auto_job(&cfg, NULL, NULL, &a));
    CHECK_OK(ts__autoplan_cuts(&a.job, &copy)); /* built with copy's rules, read back */
    ts__train_auto_job_free(&a);
    CHECK_MSG(copy.n_stage_rules == p.n_stage_rules &&
              !memcmp(copy.stage_rules, p.stage_rules, sizeof *p.stage_rules * (size_t)p.n_stage_rules),
              "%s: the rules' cut reads back as %d other rules", s, copy.n_stage_rules);
    /* priced with the rules and with the layout's balanced cut: the same pieces, the same figures */
    CHECK_OK(ts_autoplan_copy(&bare, &p));
    free(bare.stage_rules);
    bare.stage_rules = NULL;
    bare.n_stage_rules = 0;
    ts_step_prediction with, without;
    int N = p.dp * p.tp * p.pp;
    CHECK_OK(ts_trainer_predict_autoplan(&cfg, &p, N, 0, &cl, &with));
    CHECK_OK(ts_trainer_predict_autoplan(&cfg, &bare, N, 0, &cl, &without));
    CHECK_MSG(with.step_s == without.step_s && with.memory_bytes == without.memory_bytes &&
                  with.flops == without.flops && with.collectives_s == without.collectives_s,
              "%s: with its rules %.9g s %lld B, balanced %.9g s %lld B", s, with.step_s, (long long)with.memory_bytes,
              without.step_s, (long long)without.memory_bytes);
    /* the rules are in force: the last rule of piece 0 moved to piece 1 reads back moved, and
     * the first stage holds less */
    if (k == 0) {
      ts_autoplan moved;
      CHECK_OK(ts_autoplan_copy(&moved, &p));
      int last0 = -1;
      for (int i = 0; i < moved.n_stage_rules; i++)
        if (!strcmp(moved.stage_rules[i].text, "0")) last0 = i;
      CHECK(last0 > 0);
      if (last0 > 0) {
        snprintf(moved.stage_rules[last0].text, sizeof moved.stage_rules[last0].text, "1");
        char op[160];
        snprintf(op, sizeof op, "%s", moved.stage_rules[last0].op);
        ts_step_prediction mp;
        CHECK_OK(ts_trainer_predict_autoplan(&cfg, &moved, N, 0, &cl, &mp));
        CHECK_OK(ts__train_auto_job(&cfg, NULL, NULL, &a));
        CHECK_OK(ts__autoplan_cuts(&a.job, &moved));
        ts__train_auto_job_free(&a);
        int back = -1;
        for (int i = 0; i < moved.n_stage_rules; i++)
          if (!strncmp(op, moved.stage_rules[i].op, strlen(moved.stage_rules[i].op)) &&
              (op[strlen(moved.stage_rules[i].op)] == '.' || !op[strlen(moved.stage_rules[i].op)]))
            back = atoi(moved.stage_rules[i].text);
        CHECK_MSG(back == 1, "%s: %s moved to piece 1 reads back on piece %d", s, op, back);
        CHECK_MSG(mp.memory_bytes != with.memory_bytes, "%s: moving %s changed nothing (%lld bytes)", s, op,
                  (long long)mp.memory_bytes);
      }
      ts_autoplan_free(&moved);
    }
    printf("%s: %d stage rules (first %s -> %s, last %s -> %s)\n", s, p.n_stage_rules, p.stage_rules[0].op,
           p.stage_rules[0].text, p.stage_rules[p.n_stage_rules - 1].op, p.stage_rules[p.n_stage_rules - 1].text);
    ts_autoplan_free(&bare);
    ts_autoplan_free(&copy);
    ts_autoplan_free(&p);
    CHECK(p.stage_rules == NULL && p.n_stage_rules == 0);
  }
  /* a plan without stages has none */
  ts_autoplan flat = {.dp = 2, .tp = 1, .pp = 1, .micro_batches = 1};
  CHECK_OK(ts_trainer_autoplan_build(&cfg, &cl, &flat));
  CHECK(flat.stage_rules == NULL && flat.n_stage_rules == 0);
  ts_autoplan_free(&flat);
  ts_config_free(&cfg);
}

/* Plain data parallel across the hosts of a cluster whose flat all-reduces were measured on this
 * layout (tessera calibrate): the reduction priced as the reducer runs it, bucket by bucket
 * (buckets of bucket_size_mb, each its latency): in place, from a send buffer (flat_send, and auto
 * when it is faster), hierarchical; each overlapped with backward alike (the same share hidden:
 * the hierarchical one's steps are chained during backward too); without the measurement the
 * ring formula. */
/* The slow cluster as 2 hosts x 2 devices with a slow link between them, named "measured". */
static void two_hosts(ts_cluster *c) {
  slow_cluster(c);
  snprintf(c->name, sizeof c->name, "measured");
  c->devices_per_node = 2, c->nodes = 2;
  c->inter_bw = 6e7, c->inter_latency = 0, c->intra_bw = 2e9, c->intra_latency = 0;
}

static void test_reduce_measured(void) {
  ts_cluster c;
  two_hosts(&c);
  c.flat_allreduce_latency = 1e-4, c.flat_allreduce_bw = 4e7;
  c.flat_allreduce_send_latency = 2e-4, c.flat_allreduce_send_bw = 1e8;
  const int64_t W = k_mlp_params;
  const double msg = 4.0 * (double)W, mb = 0.05, nb = ceil(msg / (mb * 1024 * 1024)), per = msg / nb;
  struct {
    const char *mode;
    double want;
  } cs[] = {
      {"flat", nb * (1e-4 + per / 4e7)},
      {"flat_send", nb * (2e-4 + per / 1e8)},
      {"auto", nb * fmin(1e-4 + per / 4e7, 2e-4 + per / 1e8)},
      {"hierarchical", nb * ts_cluster_allreduce_hier(&c, 2, 2, per)},
  };
  double hidden = -1; /* the share of the reduction hidden behind backward (flat's) */
  for (int k = 0; k < 4; k++) {
    char y[1024], m[64];
    snprintf(y, sizeof y, "%sparallel: {mode: data_parallel, bucket_size_mb: %g}\n", k_mlp, mb);
    snprintf(m, sizeof m, "parallel.allreduce=%s", cs[k].mode);
    const char *sets[1] = {m};
    ts_config cfg;
    CHECK_OK(ts_config_load_string(y, "measured.yaml", sets, 1, &cfg));
    ts_step_prediction p;
    CHECK_OK(ts_trainer_predict(&cfg, 4, 0, &c, &p));
    CHECK_MSG(fabs(p.reduce_s - cs[k].want) <= 1e-9 * cs[k].want, "allreduce %s: reduce %.9f s, want %.9f",
              cs[k].mode, p.reduce_s, cs[k].want);
    double h = p.reduce_s - p.reduce_exposed_s;
    if (k == 0) hidden = h;
    CHECK_MSG(h > 0 && (p.reduce_exposed_s > 0 ? fabs(h - hidden) <= 1e-9 * hidden : h <= hidden * (1 + 1e-9)),
              "allreduce %s: %.9f s of %.9f hidden, flat %.9f", cs[k].mode, h, p.reduce_s, hidden);
    printf("measured cluster, allreduce %-12s: reduction %.3f ms (%g buckets of %.0f bytes), exposed %.3f ms\n",
           cs[k].mode, 1e3 * p.reduce_s, nb, per, 1e3 * p.reduce_exposed_s);
    ts_config_free(&cfg);
  }
  /* without the measurement: the ring's bytes over the link, as before */
  c.flat_allreduce_bw = c.flat_allreduce_latency = c.flat_allreduce_send_bw = c.flat_allreduce_send_latency = 0;
  char y[1024];
  snprintf(y, sizeof y, "%sparallel: {mode: data_parallel, bucket_size_mb: %g}\n", k_mlp, mb);
  ts_config cfg;
  CHECK_OK(ts_config_load_string(y, "ring.yaml", NULL, 0, &cfg));
  ts_step_prediction p;
  CHECK_OK(ts_trainer_predict(&cfg, 4, 0, &c, &p));
  double ring = 2.0 * 3 / 4 * msg / c.inter_bw;
  CHECK_MSG(fabs(p.reduce_s - ring) <= 1e-9 * ring, "unmeasured: reduce %.9f s, ring %.9f", p.reduce_s, ring);
  ts_config_free(&cfg);
}

/* Optimizer sharding on a cluster whose reduce-scatters and all-gathers were measured on the job's
 * layout (2 hosts x 2): the reduction is each bucket's reduce-scatter and all-gather as measured, by
 * the algorithm the sharding runs (auto: the reduce-scatter measured faster for a bucket of
 * bucket_size_mb; mpi; ring), stage 2's reduce-scatters once per micro-step; without the lines,
 * priced from the links as before. */
static void test_zero_measured(void) {
  ts_cluster c;
  two_hosts(&c);
  c.reduce_scatter_latency = 1e-4, c.reduce_scatter_bw = 4e7;       /* MPI's: less latency, less bandwidth */
  c.reduce_scatter_ring_latency = 5e-4, c.reduce_scatter_ring_bw = 1e8;
  c.allgather_latency = 2e-4, c.allgather_bw = 5e7;
  c.allgather_ring_latency = 3e-4, c.allgather_ring_bw = 9e7;
  const int64_t W = k_mlp_params; /* every one sharded */
  struct {
    const char *rs;
    double mb;
    int stage, accum, ring, amp;
  } cs[] = {
      {"auto", 0.05, 1, 1, 1, 0},  /* auto compares a 52 KB bucket: the ring's 0.52 + 0.5 ms, MPI's 0.1 + 1.3 ms */
      {"auto", 0.002, 1, 1, 0, 0}, /* 2 KB: MPI's 0.15 ms against the ring's 0.52 ms */
      {"mpi", 0.05, 1, 1, 0, 0},
      {"ring", 0.002, 2, 4, 1, 0}, /* stage 2, 4 micro-steps: 4 reduce-scatters a bucket, one all-gather */
      {"mpi", 0.05, 1, 1, 0, 1},   /* amp O2: 16-bit weights and gradients, the buckets in half the bytes */
      {"ring", 0.05, 2, 1, 1, 1},
  };
  for (int k = 0; k < 6; k++) {
    const double bytes = (cs[k].amp ? 2.0 : 4.0) * (double)W;
    char y[1024], m1[64], m2[64], m3[64], m4[64];
    snprintf(y, sizeof y, "%sparallel: {mode: data_parallel, bucket_size_mb: %g, optimizer_shard_threshold_kb: 0}\n",
             k_mlp, cs[k].mb);
    snprintf(m1, sizeof m1, "parallel.reduce_scatter=%s", cs[k].rs);
    snprintf(m2, sizeof m2, "parallel.optimizer_shard=%d", cs[k].stage);
    snprintf(m3, sizeof m3, "train.micro_batch_size=%d", 32 / cs[k].accum);
    snprintf(m4, sizeof m4, "train.amp_level=%s", cs[k].amp ? "O2" : "O0");
    const char *sets[4] = {m1, m2, m3, m4};
    ts_config cfg;
    CHECK_OK(ts_config_load_string(y, "measured.yaml", sets, 4, &cfg));
    ts_step_prediction p;
    CHECK_OK(ts_trainer_predict(&cfg, 4, 0, &c, &p));
    int nb = p.zero_buckets, r = cs[k].ring;
    double rs = cs[k].accum * (nb * (r ? 5e-4 : 1e-4) + bytes / (r ? 1e8 : 4e7));
    double ag = nb * (r ? 3e-4 : 2e-4) + bytes / (r ? 9e7 : 5e7);
    /* (a bucket never cuts a parameter: between 1 and the 6 parameters) */
    CHECK_MSG(nb >= 1 && nb <= 6 && p.zero_ring == r, "reduce_scatter %s, %g MiB buckets: %d buckets, ring %d (want %d)",
              cs[k].rs, cs[k].mb, nb, p.zero_ring, r);
    CHECK_MSG(fabs(p.zero_reduce_scatter_s - rs) <= 1e-9 * rs && fabs(p.zero_allgather_s - ag) <= 1e-9 * ag &&
                  fabs(p.reduce_s - rs - ag) <= 1e-9 * (rs + ag),
              "reduce_scatter %s stage %d: reduce-scatters %.9f s (want %.9f), all-gathers %.9f s (want %.9f), reduction "
              "%.9f s", cs[k].rs, cs[k].stage, p.zero_reduce_scatter_s, rs, p.zero_allgather_s, ag, p.reduce_s);
    printf("measured cluster, optimizer_shard %d%s, reduce_scatter %-4s, %g MiB: %d buckets, reduce-scatters %.3f ms + "
           "all-gathers %.3f ms by %s\n", cs[k].stage, cs[k].amp ? " (amp O2: 16-bit buckets)" : "", cs[k].rs, cs[k].mb,
           nb, 1e3 * p.zero_reduce_scatter_s, 1e3 * p.zero_allgather_s, r ? "the ring" : "MPI's");
    ts_config_free(&cfg);
  }
  /* without the lines: from the links (no buckets priced as measured) */
  c.reduce_scatter_bw = c.reduce_scatter_ring_bw = c.allgather_bw = c.allgather_ring_bw = 0;
  char y[1024];
  snprintf(y, sizeof y, "%sparallel: {mode: data_parallel, optimizer_shard: 1, optimizer_shard_threshold_kb: 0}\n", k_mlp);
  ts_config cfg;
  CHECK_OK(ts_config_load_string(y, "links.yaml", NULL, 0, &cfg));
  ts_step_prediction p;
  CHECK_OK(ts_trainer_predict(&cfg, 4, 0, &c, &p));
  double ring = 2.0 * 3 / 4 * 4.0 * (double)W / c.inter_bw;
  CHECK_MSG(p.zero_buckets == 0 && fabs(p.reduce_s - ring) <= 1e-6 * ring, "unmeasured: %d buckets, reduce %.9f s, ring %.9f",
            p.zero_buckets, p.reduce_s, ring);
  ts_config_free(&cfg);
  /* amp O2: the 16-bit buckets' bytes (half) over the links */
  const char *o2[1] = {"train.amp_level=O2"};
  CHECK_OK(ts_config_load_string(y, "links.yaml", o2, 1, &cfg));
  CHECK_OK(ts_trainer_predict(&cfg, 4, 0, &c, &p));
  CHECK_MSG(fabs(p.reduce_s - ring / 2) <= 1e-6 * ring, "unmeasured, amp O2: reduce %.9f s, want half the ring's %.9f",
            p.reduce_s, ring);
  ts_config_free(&cfg);
}

int main(void) {
  test_reduce_measured();
  test_zero_measured();
  test_stage_cuts();
  test_megatron();
  test_dist_fields();
  test_searched("mlp", k_mlp, 2);
  test_searched("mlp", k_mlp, 4);
  test_searched("gpt", k_gpt, 4);
  return ts_test_finish("test_autoplan");
}
