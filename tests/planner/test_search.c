/* The per-operator strategy searches (src/planner/search.h) on small graphs where the optimum
 * is known: an exhaustive search over every combination of the cost graph's candidates (a
 * depth-first enumeration that skips only branches whose cost already exceeds the best found,
 * costs being non-negative) gives the minimum, and dynamic_programming must reach it on every
 * graph and device count; the chosen strategies' total recomputed here from the nodes' and edges'
 * costs must equal what the search reports. sharding_propagation keeps the user's strategies and
 * is never below the optimum; recursive_programming's strategies are accepted by the parallel
 * pass on every rank; two runs give the same strategies; and the cost graph prefers what is
 * obviously right (model parallel for a huge weight and a tiny batch, data parallel for the
 * opposite). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/nn.h"
#include "parallel/parallel.h"
#include "planner/search.h"
#include "tessera/tessera.h"
#include "test_util.h"

typedef struct {
  const char *name;
  ts_graph *g;
  ts_params *p;
  ts_val loss;
} model;

static void begin(model *m, const char *name) {
  m->name = name;
  CHECK_OK(ts_graph_create(&m->g));
  CHECK_OK(ts_params_create(&m->p));
}

static void model_free(model *m) {
  ts_graph_free(m->g);
  ts_params_free(m->p);
}

/* dense + relu chain, then the loss */
static void mlp(model *m, int layers, int64_t B, int64_t W) {
  begin(m, "mlp");
  ts_nn nn = {m->g, m->p};
  ts_val x = ts_input(m->g, "x", TS_F32, ts_shape2(B, W)), y = ts_input(m->g, "y", TS_I32, ts_shape1(B));
  char nm[32];
  for (int l = 0; l < layers; l++) {
    snprintf(nm, sizeof nm, "fc%d", l);
    x = ts_nn_dense(&nn, nm, x, l == layers - 1 ? 16 : W, 1);
    if (l < layers - 1) x = ts_relu(m->g, x);
  }
  m->loss = ts_softmax_cross_entropy(m->g, x, y, 0);
}

/* h = dense(x); y = dense(relu(dense(h))) + h; layernorm; head; loss */
static void residual(model *m, int64_t B) {
  begin(m, "residual");
  ts_nn nn = {m->g, m->p};
  ts_val x = ts_input(m->g, "x", TS_F32, ts_shape2(B, 32)), y = ts_input(m->g, "y", TS_I32, ts_shape1(B));
  ts_val h = ts_nn_dense(&nn, "in", x, 64, 1);
  ts_val r = ts_relu(m->g, ts_nn_dense(&nn, "fc1", h, 128, 1));
  ts_val s = ts_add(m->g, ts_nn_dense(&nn, "fc2", r, 64, 1), h);
  s = ts_nn_layernorm(&nn, "ln", s, 1e-5f);
  m->loss = ts_softmax_cross_entropy(m->g, ts_nn_dense(&nn, "head", s, 16, 1), y, 0);
}

/* two branches joined by add */
static void branches(model *m, int64_t B) {
  begin(m, "branches");
  ts_nn nn = {m->g, m->p};
  ts_val x = ts_input(m->g, "x", TS_F32, ts_shape2(B, 64)), y = ts_input(m->g, "y", TS_I32, ts_shape1(B));
  ts_val h = ts_nn_dense(&nn, "in", x, 64, 1);
  ts_val a = ts_relu(m->g, ts_nn_dense(&nn, "a", h, 256, 1));
  ts_val b = ts_sigmoid(m->g, ts_nn_dense(&nn, "b", h, 256, 0));
  ts_val s = ts_add(m->g, a, b);
  m->loss = ts_softmax_cross_entropy(m->g, ts_nn_dense(&nn, "head", s, 8, 1), y, 0);
}

/* attention-like fan-out: q, k, v from one layernorm, heads, projection, residual, loss */
static void attention(model *m, int64_t B) {
  begin(m, "attention");
  ts_nn nn = {m->g, m->p};
  int64_t T = 8, C = 32, H = 4;
  ts_val x = ts_input(m->g, "x", TS_F32, ts_shape3(B, T, C)), y = ts_input(m->g, "y", TS_I32, ts_shape1(B * T));
  ts_val h = ts_nn_layernorm(&nn, "ln", x, 1e-5f);
  ts_val qkv[3];
  const char *nm[3] = {"q", "k", "v"};
  int perm[4] = {0, 2, 1, 3};
  for (int i = 0; i < 3; i++) {
    qkv[i] = ts_nn_dense(&nn, nm[i], h, C, 1);
    qkv[i] = ts_permute(m->g, ts_reshape(m->g, qkv[i], ts_shape4(B, T, H, C / H)), perm);
  }
  ts_val o = ts_attention(m->g, qkv[0], qkv[1], qkv[2], 0.5f);
  o = ts_reshape(m->g, ts_permute(m->g, o, perm), ts_shape3(B, T, C));
  o = ts_add(m->g, ts_nn_dense(&nn, "proj", o, C, 1), x);
  ts_val logits = ts_reshape(m->g, ts_nn_dense(&nn, "head", o, 16, 0), ts_shape2(B * T, 16));
  m->loss = ts_softmax_cross_entropy(m->g, logits, y, 0);
}

/* tied embedding and head: the table is the head's weight */
static void tied(model *m, int64_t B) {
  begin(m, "tied");
  ts_nn nn = {m->g, m->p};
  int64_t T = 4, V = 64, C = 32;
  ts_val ids = ts_input(m->g, "ids", TS_I32, ts_shape2(B, T)), y = ts_input(m->g, "y", TS_I32, ts_shape1(B * T));
  ts_val wte = ts_nn_param(&nn, "wte", ts_shape2(V, C), (ts_init){0}, 0);
  ts_val h = ts_embedding(m->g, wte, ids);
  h = ts_nn_layernorm(&nn, "ln", h, 1e-5f);
  h = ts_gelu(m->g, ts_nn_dense(&nn, "fc", h, C, 1), 0);
  ts_val logits = ts_dense(m->g, h, wte, TS_NONE);
  m->loss = ts_softmax_cross_entropy(m->g, ts_reshape(m->g, logits, ts_shape2(B * T, V)), y, 0);
}

/* a, b, c from h, joined pairwise: after the adds go (operator eliminations) h, a, b and c are
 * all joined (a clique of 4): only star elimination applies */
static void clique(model *m, int64_t B) {
  begin(m, "clique");
  ts_nn nn = {m->g, m->p};
  ts_val x = ts_input(m->g, "x", TS_F32, ts_shape2(B, 32)), y = ts_input(m->g, "y", TS_I32, ts_shape1(B));
  ts_val h = ts_nn_dense(&nn, "in", x, 32, 0);
  ts_val a = ts_nn_dense(&nn, "a", h, 32, 0), b = ts_nn_dense(&nn, "b", h, 32, 0), c = ts_nn_dense(&nn, "c", h, 32, 0);
  ts_val s = ts_add(m->g, ts_add(m->g, ts_mul(m->g, a, b), ts_mul(m->g, b, c)), ts_mul(m->g, a, c));
  m->loss = ts_softmax_cross_entropy(m->g, s, y, 0);
}

/* a residual convolution block: conv, batch-norm, relu, conv, batch-norm, add, global average,
 * head (convolutions cut by batch, input or output channels, rows or columns) */
static void convnet(model *m, int64_t B) {
  begin(m, "convnet");
  ts_nn nn = {m->g, m->p};
  ts_val x = ts_input(m->g, "x", TS_F32, ts_shape4(B, 4, 8, 8)), y = ts_input(m->g, "y", TS_I32, ts_shape1(B));
  ts_val h = ts_relu(m->g, ts_nn_batchnorm(&nn, "bn1", ts_nn_conv2d(&nn, "conv1", x, 8, 3, 1, 1, 1, 1, 0), 0.1f, 1e-5f));
  ts_val r = ts_nn_batchnorm(&nn, "bn2", ts_nn_conv2d(&nn, "conv2", h, 8, 3, 1, 1, 1, 1, 0), 0.1f, 1e-5f);
  ts_val p = ts_global_avgpool(m->g, ts_add(m->g, r, h));
  m->loss = ts_softmax_cross_entropy(m->g, ts_nn_dense(&nn, "fc", ts_reshape(m->g, p, ts_shape2(B, 8)), 4, 1), y, 0);
}

/* ---- the exhaustive search ---- */

typedef struct {
  const ts_costgraph *cg;
  int n;
  int *cur, *best;
  double best_cost;
  double *minrest; /* minrest[i]: sum over ops >= i of their cheapest own cost */
  long long visited;
} brute;

/* The cost the ops 0..i add given the choice of 0..i (op i's own cost and its edges to ops < i). */
static double added(const brute *b, int i) {
  double t = ts_costgraph_candidate_cost(b->cg, i, b->cur[i]);
  for (int e = 0; e < ts_costgraph_num_edges(b->cg); e++) {
    int u, v;
    ts_costgraph_edge(b->cg, e, &u, &v);
    if ((u == i && v <= i) || (v == i && u < i)) t += ts_costgraph_edge_cost(b->cg, e, b->cur[u], b->cur[v]);
  }
  return t;
}

static void dfs(brute *b, int i, double acc) {
  if (acc + b->minrest[i] >= b->best_cost * (1 + 1e-12) && isfinite(b->best_cost)) return;
  if (i == b->n) {
    b->best_cost = acc;
    memcpy(b->best, b->cur, sizeof(int) * (size_t)b->n);
    return;
  }
  b->visited++;
  for (int c = 0; c < ts_costgraph_num_candidates(b->cg, i); c++) {
    b->cur[i] = c;
    dfs(b, i + 1, acc + added(b, i));
  }
}

static double brute_force(const ts_costgraph *cg, int *best, long long *visited) {
  brute b = {cg, ts_costgraph_num_ops(cg), NULL, best, INFINITY, NULL, 0};
  b.cur = calloc((size_t)b.n + 1, sizeof(int));
  b.minrest = calloc((size_t)b.n + 2, sizeof(double));
  for (int i = b.n - 1; i >= 0; i--) {
    double m = INFINITY;
    for (int c = 0; c < ts_costgraph_num_candidates(cg, i); c++)
      if (ts_costgraph_candidate_cost(cg, i, c) < m) m = ts_costgraph_candidate_cost(cg, i, c);
    b.minrest[i] = b.minrest[i + 1] + m;
  }
  dfs(&b, 0, 0);
  free(b.cur);
  free(b.minrest);
  *visited = b.visited;
  return b.best_cost;
}

/* The total of a choice, from the nodes' and edges' costs. */
static double recompute(const ts_costgraph *cg, const int *ch) {
  double t = 0;
  for (int i = 0; i < ts_costgraph_num_ops(cg); i++) t += ts_costgraph_candidate_cost(cg, i, ch[i]);
  for (int e = 0; e < ts_costgraph_num_edges(cg); e++) {
    int u, v;
    ts_costgraph_edge(cg, e, &u, &v);
    t += ts_costgraph_edge_cost(cg, e, ch[u], ch[v]);
  }
  return t;
}

/* Plain enumeration of every combination (no pruning at all), for the smaller spaces. */
static double enumerate_all(const ts_costgraph *cg) {
  int n = ts_costgraph_num_ops(cg), *c = calloc((size_t)n + 1, sizeof(int));
  double best = INFINITY;
  for (;;) {
    double t = recompute(cg, c);
    if (t < best) best = t;
    int i = n - 1;
    while (i >= 0 && ++c[i] == ts_costgraph_num_candidates(cg, i)) c[i--] = 0;
    if (i < 0) break;
  }
  free(c);
  return best;
}

static int close_rel(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)) + 1e-18; }

/* The strategies of choice ch, applied by the parallel pass on every rank. */
static void pass_accepts(const model *m, const ts_costgraph *cg, const int *ch, int D, const char *what) {
  ts_strategy_set *s;
  CHECK_OK(ts_strategy_set_create(D, 0, &s));
  CHECK_OK(ts_costgraph_put_strategies(cg, ch, s));
  for (int r = 0; r < D; r++) {
    ts_parallel_config pc = {D, r, s, 0, 0, 0};
    ts_parallel *pp = NULL;
    int rc = ts_parallel_run(m->g, m->p, &m->loss, 1, NULL, &pc, &pp);
    CHECK_MSG(rc == TS_OK, "%s %s D=%d rank %d: the pass refuses: %s", m->name, what, D, r, ts_last_error());
    ts_parallel_free(pp);
    if (rc) break;
  }
  ts_strategy_set_free(s);
}

static int plain; /* graphs also checked by plain enumeration */

static void check_graph(model *m, int D, const ts_cluster *cl, int maxc, int full) {
  ts_costgraph_config cc = {.ndevices = D, .cluster = cl, .opt_slots = 2, .max_candidates = maxc, .full_devices = full};
  ts_costgraph *cg;
  CHECK_OK(ts_costgraph_build(m->g, &cc, &cg));
  if (!cg) return;
  int n = ts_costgraph_num_ops(cg);
  double space = 1;
  for (int i = 0; i < n; i++) space *= ts_costgraph_num_candidates(cg, i);
  int *dp = calloc((size_t)n, sizeof(int)), *dp2 = calloc((size_t)n, sizeof(int)), *bf = calloc((size_t)n, sizeof(int));
  int *pr = calloc((size_t)n, sizeof(int)), *rec = calloc((size_t)n, sizeof(int)), *rec2 = calloc((size_t)n, sizeof(int));
  ts_search_result r, r2;
  CHECK_OK(ts_search_run(cg, TS_SEARCH_DP, NULL, dp, &r));
  long long visited;
  double opt = brute_force(cg, bf, &visited);
  CHECK_MSG(close_rel(r.cost, opt), "%s D=%d: dynamic_programming %.12g, brute force %.12g", m->name, D, r.cost, opt);
  if (space <= 3e6) { /* and without any pruning where the space is small enough */
    double all = enumerate_all(cg);
    CHECK_MSG(close_rel(all, opt), "%s D=%d: every combination %.12g, depth first %.12g", m->name, D, all, opt);
    plain++;
  }
  CHECK_MSG(close_rel(r.elim_cost, r.cost), "%s D=%d: the elimination's minimum %.12g, its choice's total %.12g",
            m->name, D, r.elim_cost, r.cost);
  CHECK_MSG(close_rel(recompute(cg, dp), r.cost), "%s D=%d: recomputed %.12g, reported %.12g", m->name, D,
            recompute(cg, dp), r.cost);
  CHECK(r.nops == n && isfinite(r.cost) && r.memory > 0);
  /* determinism */
  CHECK_OK(ts_search_run(cg, TS_SEARCH_DP, NULL, dp2, &r2));
  CHECK(!memcmp(dp, dp2, sizeof(int) * (size_t)n));
  pass_accepts(m, cg, dp, D, "dynamic_programming");
  if (!strcmp(m->name, "tied")) { /* the shared table cut the same way by both its users */
    ts_strategy_set *s;
    CHECK_OK(ts_strategy_set_create(D, 0, &s));
    CHECK_OK(ts_costgraph_put_strategies(cg, dp, s));
    ts_param_use uses[2] = {{"embedding", 1, "wte"}, {"dense", 1, "wte"}};
    CHECK_OK(ts_strategy_check_shared(s, 2, uses));
    ts_strategy_set_free(s);
  }
  /* sharding_propagation from the user's strategy of the last op (the loss: its second candidate) */
  ts_strategy_set *fixed;
  CHECK_OK(ts_strategy_set_create(D, 0, &fixed));
  int fo = n - 1, fc = ts_costgraph_num_candidates(cg, fo) > 1 ? 1 : 0;
  CHECK_OK(ts_strategy_set_put(fixed, ts_costgraph_op_key(cg, fo), ts_costgraph_candidate(cg, fo, fc)));
  CHECK_OK(ts_search_run(cg, TS_SEARCH_PROPAGATION, fixed, pr, &r2));
  CHECK_MSG(pr[fo] == fc, "%s D=%d: sharding_propagation changed the user's strategy", m->name, D);
  CHECK_MSG(isfinite(r2.cost), "%s D=%d: sharding_propagation's plan is refused (infinite cost)", m->name, D);
  CHECK_MSG(r2.cost >= opt * (1 - 1e-9), "%s D=%d: sharding_propagation %.12g below the optimum %.12g", m->name, D,
            r2.cost, opt);
  double prop = r2.cost;
  if (!isfinite(prop))
    for (int e = 0; e < ts_costgraph_num_edges(cg); e++) {
      int u, v;
      char a[128], b[128];
      ts_costgraph_edge(cg, e, &u, &v);
      if (isinf(ts_costgraph_edge_cost(cg, e, pr[u], pr[v])))
        fprintf(stderr, "  infinite edge %s %s -> %s %s\n", ts_costgraph_op_key(cg, u),
                ts_op_strategy_str(ts_costgraph_candidate(cg, u, pr[u]), a, sizeof a), ts_costgraph_op_key(cg, v),
                ts_op_strategy_str(ts_costgraph_candidate(cg, v, pr[v]), b, sizeof b));
    }
  ts_strategy_set_free(fixed);
  /* recursive_programming: valid, deterministic */
  CHECK_OK(ts_search_run(cg, TS_SEARCH_RECURSIVE, NULL, rec, &r2));
  CHECK_OK(ts_search_run(cg, TS_SEARCH_RECURSIVE, NULL, rec2, NULL));
  CHECK(!memcmp(rec, rec2, sizeof(int) * (size_t)n));
  CHECK_MSG(r2.cost >= opt * (1 - 1e-9) && isfinite(r2.cost), "%s D=%d: recursive %.12g, optimum %.12g", m->name, D,
            r2.cost, opt);
  pass_accepts(m, cg, rec, D, "recursive_programming");
  printf("%-10s D=%d: %2d ops %2d edges, %.3g combinations (%lld visited): optimum %.6g ms = dynamic_programming "
         "(eliminations: %d operator %d edge %d merge %d contract %d triangle %d star %d pick); propagation %.6g, "
         "recursive %.6g\n",
         m->name, D, n, ts_costgraph_num_edges(cg), space, visited, 1e3 * opt, r.eliminated[0], r.eliminated[1],
         r.eliminated[2], r.eliminated[3], r.eliminated[4], r.eliminated[5], r.eliminated[6], 1e3 * prop, 1e3 * r2.cost);
  free(dp), free(dp2), free(bf), free(pr), free(rec), free(rec2);
  ts_costgraph_free(cg);
}

/* The exhaustive minimum under a memory limit (the plan's total memory at most lim). */
typedef struct {
  const ts_costgraph *cg;
  int n, *cur;
  double lim, best, *minrest, *minmem;
} cbrute;

static void cdfs(cbrute *b, int i, double acc, double mem) {
  if (acc + b->minrest[i] >= b->best || mem + b->minmem[i] > b->lim) return;
  if (i == b->n) {
    b->best = acc;
    return;
  }
  brute tmp = {b->cg, b->n, b->cur, NULL, 0, NULL, 0};
  for (int c = 0; c < ts_costgraph_num_candidates(b->cg, i); c++) {
    b->cur[i] = c;
    cdfs(b, i + 1, acc + added(&tmp, i), mem + ts_costgraph_candidate_memory(b->cg, i, c));
  }
}

/* dynamic_programming under a plan-level memory limit halfway between the least memory any plan
 * needs and the unconstrained optimum's: the plan fits, costs at least the unconstrained optimum
 * and at least the constrained exhaustive minimum. */
static void memory_limit(const ts_cluster *cl) {
  model m;
  mlp(&m, 4, 64, 256);
  ts_costgraph_config cc = {.ndevices = 4, .cluster = cl, .opt_slots = 2};
  ts_costgraph *cg;
  CHECK_OK(ts_costgraph_build(m.g, &cc, &cg));
  int n = ts_costgraph_num_ops(cg), ch[16];
  ts_search_result r0, r1;
  CHECK_OK(ts_search_run(cg, TS_SEARCH_DP, NULL, ch, &r0));
  cbrute b = {cg, n, calloc((size_t)n + 1, sizeof(int)), 0, INFINITY, calloc((size_t)n + 2, sizeof(double)),
              calloc((size_t)n + 2, sizeof(double))};
  for (int i = n - 1; i >= 0; i--) {
    double mc = INFINITY, mm = INFINITY;
    for (int c = 0; c < ts_costgraph_num_candidates(cg, i); c++) {
      mc = fmin(mc, ts_costgraph_candidate_cost(cg, i, c));
      mm = fmin(mm, ts_costgraph_candidate_memory(cg, i, c));
    }
    b.minrest[i] = b.minrest[i + 1] + mc;
    b.minmem[i] = b.minmem[i + 1] + mm;
  }
  double least = b.minmem[0], lim = 0.5 * (least + r0.memory);
  CHECK_MSG(least < r0.memory, "the optimum already uses the least memory (%g): no test", least);
  ts_costgraph_free(cg);
  cc.mem_limit = lim;
  CHECK_OK(ts_costgraph_build(m.g, &cc, &cg));
  CHECK_OK(ts_search_run(cg, TS_SEARCH_DP, NULL, ch, &r1));
  b.cg = cg;
  b.lim = lim;
  cdfs(&b, 0, 0, 0);
  CHECK_MSG(r1.memory <= lim && r1.cost >= r0.cost * (1 - 1e-9) && r1.cost >= b.best * (1 - 1e-9),
            "limit %g: plan memory %g, cost %g (unconstrained %g, constrained exhaustive %g)", lim, r1.memory, r1.cost,
            r0.cost, b.best);
  printf("memory limit %.3g MiB (unconstrained plan %.3g MiB, least possible %.3g MiB): dynamic_programming %.6g ms "
         "in %.3g MiB; exhaustive under the limit %.6g ms\n", lim / 1048576, r0.memory / 1048576, least / 1048576,
         1e3 * r1.cost, r1.memory / 1048576, 1e3 * b.best);
  free(b.cur), free(b.minrest), free(b.minmem);
  ts_costgraph_free(cg);
  model_free(&m);
}

/* A single dense layer and its loss: which cut does the search give the dense? */
static void sanity(const ts_cluster *cl) {
  for (int big = 0; big <= 1; big++) {
    model m;
    begin(&m, big ? "big weight" : "big batch");
    ts_nn nn = {m.g, m.p};
    int64_t B = big ? 8 : 65536, W = big ? 4096 : 64;
    ts_val x = ts_input(m.g, "x", TS_F32, ts_shape2(B, W)), y = ts_input(m.g, "y", TS_I32, ts_shape1(B));
    ts_val h = ts_nn_dense(&nn, "fc", x, W, 1);
    m.loss = ts_softmax_cross_entropy(m.g, h, y, 0);
    ts_costgraph_config cc = {.ndevices = 8, .cluster = cl, .opt_slots = 2};
    ts_costgraph *cg;
    CHECK_OK(ts_costgraph_build(m.g, &cc, &cg));
    int ch[8];
    ts_search_result r;
    CHECK_OK(ts_search_run(cg, TS_SEARCH_DP, NULL, ch, &r));
    const ts_op_strategy *st = ts_costgraph_candidate(cg, 0, ch[0]);
    char buf[128];
    ts_op_strategy_str(st, buf, sizeof buf);
    int64_t wcut = st->cuts[1][0] * st->cuts[1][1];
    if (big) CHECK_MSG(wcut == 8, "a 64 MiB weight and a batch of 8: the dense should cut the weight 8 ways, got %s", buf);
    else CHECK_MSG(st->cuts[0][0] == 8 && wcut == 1, "a tiny weight and a batch of 65536: data parallel, got %s", buf);
    printf("%s: the dense takes %s\n", m.name, buf);
    ts_costgraph_free(cg);
    model_free(&m);
  }
}

static void refusals(const ts_cluster *cl) {
  model m;
  mlp(&m, 2, 16, 32);
  ts_costgraph_config cc = {.ndevices = 4, .cluster = cl};
  ts_costgraph *cg;
  CHECK_OK(ts_costgraph_build(m.g, &cc, &cg));
  ts_strategy_set *fixed;
  CHECK_OK(ts_strategy_set_create(4, 0, &fixed));
  CHECK_OK(ts_strategy_set_put_text(fixed, "fc0.dense", "((1,1),(1,1))"));
  CHECK_OK(ts_strategy_set_put_text(fixed, "fc1.dense", "((2,1),(1,1))")); /* fine */
  int ch[8];
  CHECK_OK(ts_search_run(cg, TS_SEARCH_PROPAGATION, fixed, ch, NULL));
  ts_strategy_set_free(fixed);
  CHECK_OK(ts_strategy_set_create(4, 0, &fixed));
  CHECK_OK(ts_strategy_set_put_text(fixed, "fc0.dense", "((1,4),(1,1))"));
  int rc = ts_search_run(cg, TS_SEARCH_PROPAGATION, fixed, ch, NULL);
  CHECK_MSG(rc == TS_ECONFIG && strstr(ts_last_error(), "fc0.dense"), "rc %d: %s", rc, ts_last_error());
  ts_strategy_set_free(fixed);
  ts_search_mode md;
  CHECK(ts_search_mode_parse("dynamic_programming", &md) == TS_OK && md == TS_SEARCH_DP);
  CHECK(ts_search_mode_parse("greedy", &md) == TS_ECONFIG && strstr(ts_last_error(), "sharding_propagation"));
  ts_costgraph_free(cg);
  model_free(&m);
}

int main(void) {
  ts_cluster cl;
  CHECK_OK(ts_cluster_builtin("dgx-a100-80g", &cl));
  int Ds[3] = {2, 4, 8};
  for (int di = 0; di < 3; di++) {
    int D = Ds[di];
    model m;
    mlp(&m, 6, 16 * D, 32); /* 12 ops */
    check_graph(&m, D, &cl, 0, D == 8);
    model_free(&m);
    residual(&m, 8 * D);
    check_graph(&m, D, &cl, 0, D == 8);
    model_free(&m);
    branches(&m, 8 * D);
    check_graph(&m, D, &cl, 0, D == 8);
    model_free(&m);
    attention(&m, 2 * D);
    check_graph(&m, D, &cl, 0, D >= 4);
    model_free(&m);
    tied(&m, 2 * D);
    check_graph(&m, D, &cl, 0, D == 8);
    model_free(&m);
    clique(&m, 4 * D);
    check_graph(&m, D, &cl, 0, D >= 4);
    model_free(&m);
    convnet(&m, 2 * D);
    check_graph(&m, D, &cl, 0, D >= 4);
    model_free(&m);
  }
  printf("%d of the graphs also enumerated without pruning\n", plain);
  CHECK(plain >= 8);
  sanity(&cl);
  memory_limit(&cl);
  refusals(&cl);
  return ts_test_finish("test_search");
}
