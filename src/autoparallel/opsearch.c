/* auto_parallel's per-operator strategies (parallel.search_mode, include/tessera/search.h): the
 * config's model built once as one process's forward graph (global shapes, the micro-batch's
 * rows), its cost graph on the devices of one pipeline stage (data x tensor degrees) of the
 * cluster, the search, and the chosen strategies written as parallel.strategies (operator keys,
 * folded into '*' rules where every layer takes the same strategy) so the semi_auto pass runs
 * them, strategy files save them and `tessera plan` shows them. */
#include <stdlib.h>
#include <string.h>

#include "tessera/search.h"
#include "../train/train_search_bridge.h"

/* "transformer.h.12.attn.c_attn.dense_1" -> "transformer.h.*.attn.c_attn.dense_1": every part
 * made only of digits becomes '*'. */
static void generalise(const char *key, char *out, size_t cap) {
  size_t n = 0;
  const char *p = key;
  while (*p && n + 2 < cap) {
    const char *e = strchr(p, '.');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    int digits = len > 0;
    for (size_t i = 0; i < len; i++) digits &= p[i] >= '0' && p[i] <= '9';
    if (digits) out[n++] = '*';
    else
      for (size_t i = 0; i < len && n + 2 < cap; i++) out[n++] = p[i];
    if (!e) break;
    out[n++] = '.';
    p = e + 1;
  }
  out[n] = 0;
}

/* Whether rule `pat` matches exactly the keys marked in `want` among all forward node keys. */
static int rule_exact(const ts_graph *g, char **keys, int nk, const char *pat, const char *want, int D) {
  ts_strategy_set *one;
  ts_op_strategy st, any;
  memset(&any, 0, sizeof any);
  if (ts_strategy_set_create(D, 0, &one) || ts_strategy_set_put(one, pat, &any)) {
    ts_strategy_set_free(one);
    return 0;
  }
  int ok = 1;
  for (int j = 0; j < nk && ok; j++) {
    int hit = ts_strategy_set_get(one, keys[j], &st) == TS_OK;
    if (hit != (want[j] != 0)) ok = 0;
  }
  (void)g;
  ts_strategy_set_free(one);
  ts_error_set(TS_OK, "%s", "");
  return ok;
}

/* The chosen strategies as parallel.strategies, folded into rules where safe. */
static int write_strategies(const ts_graph *g, const ts_costgraph *cg, const int *choice, int D, ts_cfg_strategies *out) {
  int n = ts_costgraph_num_ops(cg), nk = ts_graph_num_nodes(g), rc = TS_OK;
  char **keys = calloc((size_t)nk + 1, sizeof *keys);
  char *want = calloc((size_t)nk + 1, 1), *done = calloc((size_t)n + 1, 1);
  if (!keys || !want || !done) {
    rc = ts_error_set(TS_ENOMEM, "auto_parallel: out of memory");
    goto out;
  }
  for (int j = 0; j < nk && !rc; j++) {
    char k[512];
    ts_parallel_op_key(g, j, k, sizeof k);
    if (!(keys[j] = strdup(k))) rc = ts_error_set(TS_ENOMEM, "auto_parallel: out of memory");
  }
  memset(out, 0, sizeof *out); /* *out is the caller's to free (also on error) */
  for (int i = 0; i < n && !rc; i++) {
    if (done[i]) continue;
    char pat[512], other[512], text[256];
    generalise(ts_costgraph_op_key(cg, i), pat, sizeof pat);
    const ts_op_strategy *st = ts_costgraph_candidate(cg, i, choice[i]);
    /* the group: the ops with the same pattern; a rule if they all take st and it matches them only */
    int same = 1, members = 0;
    memset(want, 0, (size_t)nk);
    for (int q = i; q < n; q++) {
      generalise(ts_costgraph_op_key(cg, q), other, sizeof other);
      if (strcmp(pat, other)) continue;
      members++;
      want[ts_costgraph_op_node(cg, q)] = 1;
      if (!ts_op_strategy_equal(st, ts_costgraph_candidate(cg, q, choice[q]))) same = 0;
    }
    int rule = members > 1 && same && strcmp(pat, ts_costgraph_op_key(cg, i)) && rule_exact(g, keys, nk, pat, want, D);
    if (rule)
      for (int q = i; q < n; q++) {
        generalise(ts_costgraph_op_key(cg, q), other, sizeof other);
        if (!strcmp(pat, other)) done[q] = 1;
      }
    else done[i] = 1;
    const char *name = rule ? pat : ts_costgraph_op_key(cg, i);
    if (strlen(name) >= sizeof out->v[0].op) {
      rc = ts_error_set(TS_ECONFIG, "auto_parallel: operator key '%s' is longer than %zu characters", name,
                        sizeof out->v[0].op - 1);
      break;
    }
    ts_op_strategy_str(st, text, sizeof text);
    if (strlen(text) >= sizeof out->v[0].text) {
      rc = ts_error_set(TS_ECONFIG, "auto_parallel: the strategy %s of '%s' is too long", text, name);
      break;
    }
    if ((rc = ts_cfg_strategies_add(out, name, text))) rc = ts_error_wrap(rc, "auto_parallel: parallel.strategies");
  }
out:
  for (int j = 0; keys && j < nk; j++) free(keys[j]);
  free(keys);
  free(want);
  free(done);
  return rc;
}

int ts__train_op_search(const ts_config *c, int dp, int tp, const ts_cluster *cl, ts_cfg_strategies *out,
                        double *cost, ts_model_fn model, void *user) {
  int D = dp * tp;
  ts_search_mode mode = (ts_search_mode)c->parallel.search_mode;
  int rc = TS_OK;
  ts_trainer *t = calloc(1, sizeof *t);
  if (!t) return ts_error_set(TS_ENOMEM, "auto_parallel: out of memory");
  t->cfg = *c; /* a view of c (not freed here): only scalars change, and the strategies are hidden */
  /* the rows one pass sees: a pipeline's micro-batch, else train.micro_batch_size (0: the batch) */
  int64_t rows = c->parallel.pipeline_stages > 1 && c->parallel.micro_batches > 0
                     ? c->train.batch_size / c->parallel.micro_batches
                 : c->train.micro_batch_size > 0 ? c->train.micro_batch_size
                                                 : c->train.batch_size;
  t->cfg.parallel.mode = TS_PARALLEL_SEMI_AUTO;
  t->cfg.parallel.pipeline_stages = 1;
  memset(&t->cfg.parallel.strategies, 0, sizeof t->cfg.parallel.strategies);
  t->cfg.parallel.strategy_ckpt_load_file[0] = 0;
  const ts_dist_vt *vt;
  ts_dist_config dc;
  ts_graph *g = NULL;
  ts_params *p = NULL;
  ts_costgraph *cg = NULL;
  int *choice = NULL;
  rc = ts__train_layout(&t->cfg, model, user, &vt, &dc, &t->model);
  int have = 0; /* the sample's shape without opening a data set where the config tells it */
  if (!rc) rc = ts__train_dry_sample(t, &have);
  if (!rc && !have) rc = ts__train_prepare(t);
  if (!rc && (!(rc = ts_graph_create(&g))) && !(rc = ts_params_create(&p))) {
    ts_nn nn = {g, p};
    ts_val x = ts_input(g, "x", t->model.dtype, ts_shape_batch(rows, &t->model.sample));
    ts_val_set_requires_grad(g, x, 0);
    ts_val y = t->model.text ? ts_input(g, "y", TS_I32, ts_shape_batch(rows, &t->model.sample))
                             : ts_input(g, "y", TS_I32, ts_shape1(rows));
    ts_model_info info = {0, D, 1, NULL};
    ts_val lg = TS_NONE, ls = TS_NONE;
    rc = t->model.fn(&nn, x, y, &info, &lg, &ls, t->model.user);
    if (!rc && ts_graph_status(g)) rc = ts_error_set(TS_EGRAPH, "auto_parallel: model: %s", ts_graph_error(g));
  }
  if (!rc) {
    double lim = cl->mem_bytes;
    if (c->train.max_memory_mb > 0 && c->train.max_memory_mb * 1048576.0 < lim) lim = c->train.max_memory_mb * 1048576.0;
    ts_costgraph_config cc = {.ndevices = D, .cluster = cl, .mem_limit = lim, .batch_cut = dp,
                              .opt_slots = ts_optim_kind_num_slots(c->optimizer.name)};
    rc = ts_costgraph_build(g, &cc, &cg);
  }
  if (!rc && !(choice = calloc((size_t)ts_costgraph_num_ops(cg) + 1, sizeof(int))))
    rc = ts_error_set(TS_ENOMEM, "auto_parallel: out of memory");
  ts_search_result res;
  ts_strategy_set *fixed = NULL;
  if (!rc && mode == TS_SEARCH_PROPAGATION && c->parallel.strategies.n > 0) {
    rc = ts_strategy_set_create(D, 0, &fixed);
    for (int i = 0; !rc && i < c->parallel.strategies.n; i++)
      rc = ts_strategy_set_put_text(fixed, c->parallel.strategies.v[i].op, c->parallel.strategies.v[i].text);
    if (rc) rc = ts_error_wrap(rc, "parallel.strategies (sharding_propagation's fixed operators)");
  }
  if (!rc) rc = ts_search_run(cg, mode, fixed, choice, &res);
  if (rc == TS_ERANGE && mode == TS_SEARCH_DP) { /* an elimination table too big: not exact, said so */
    ts_log(TS_LOG_WARN, "auto_parallel: %s; the operators are searched by sharding_propagation instead", ts_last_error());
    rc = ts_search_run(cg, TS_SEARCH_PROPAGATION, NULL, choice, &res);
  }
  if (!rc) rc = write_strategies(g, cg, choice, D, out);
  if (!rc && cost) *cost = res.cost;
  ts_strategy_set_free(fixed);
  free(choice);
  ts_costgraph_free(cg);
  ts_graph_free(g);
  ts_params_free(p);
  ts_source_free(t->train_src);
  ts_source_free(t->test_src);
  free(t);
  return rc;
}

int ts__train_auto_tp(ts_config *c, int N, const ts_cluster *cl, ts_model_fn model, void *user) {
  int T = c->parallel.auto_tp, P = c->parallel.pipeline_stages > 1 ? c->parallel.pipeline_stages : 1;
  if (N % T)
    return ts_error_set(TS_ECONFIG, "parallel.auto_tp: %d does not divide the %d ranks", T, N);
  if (N % (T * P))
    return ts_error_set(TS_ECONFIG, "parallel.auto_tp: %d x parallel.pipeline_stages %d does not divide the %d ranks",
                        T, P, N);
  ts_plan_choice p;
  memset(&p, 0, sizeof p);
  p.dp = N / T / P, p.tp = T, p.pp = P;
  p.micro_batches = P > 1 ? (c->parallel.micro_batches > 0 ? c->parallel.micro_batches : P) : 1;
  static const char *const modes[] = {"dynamic_programming", "sharding_propagation", "recursive_programming"};
  int m = c->parallel.search_mode;
  int rc = ts__config_apply_plan_model(c, &p, cl, model, user);
  if (!rc) rc = ts_config_validate(c);
  if (!rc)
    ts_log(TS_LOG_INFO, "auto_parallel on %d devices of %s: data parallel %d x tensor parallel %d x %d stages (parallel.auto_tp), "
           "operators searched by %s: %d strategies", N, cl->name, p.dp, p.tp, p.pp, m >= 0 && m < 3 ? modes[m] : "?",
           T > 1 ? c->parallel.strategies.n : 0);
  return rc;
}
