/* auto_parallel's per-operator strategies (parallel.search_mode, include/tessera/search.h): the
 * model built once as one process's forward graph (global shapes, the micro-batch's rows), its
 * cost graph on the devices of one pipeline stage (data x tensor degrees) of the cluster, the
 * search, and the chosen strategies as a strategy set (operator keys, folded into '*' rules where
 * every layer takes the same strategy), the value the semi_auto pass runs, strategy files save
 * and `tessera plan` shows. */
#include <stdlib.h>
#include <string.h>

#include "planner/search.h"
#include "autoplan.h"

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

/* The chosen strategies as a set for D devices, folded into rules where safe (in the order of
 * the cost graph's operators, each rule where its first member stands). */
static int write_strategies(const ts_graph *g, const ts_costgraph *cg, const int *choice, int D, ts_strategy_set **out) {
  int n = ts_costgraph_num_ops(cg), nk = ts_graph_num_nodes(g), rc = TS_OK;
  char **keys = calloc((size_t)nk + 1, sizeof *keys);
  char *want = calloc((size_t)nk + 1, 1), *done = calloc((size_t)n + 1, 1);
  *out = NULL;
  if (!keys || !want || !done) {
    rc = ts_error_set(TS_ENOMEM, "auto_parallel: out of memory");
    goto out;
  }
  if (!rc) rc = ts__parallel_op_keys(g, nk, keys); /* linear: per node it was quadratic in depth (#33) */
  if (!rc) rc = ts_strategy_set_create(D, 0, out);
  for (int i = 0; i < n && !rc; i++) {
    if (done[i]) continue;
    char pat[512], other[512];
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
    if ((rc = ts_strategy_set_put(*out, name, st))) rc = ts_error_wrap(rc, "auto_parallel: the strategy of %s", name);
  }
out:
  for (int j = 0; keys && j < nk; j++) free(keys[j]);
  free(keys);
  free(want);
  free(done);
  if (rc) {
    ts_strategy_set_free(*out);
    *out = NULL;
  }
  return rc;
}

int ts__autoparallel_op_search(const ts_dist_model *m, int64_t rows, int dp, int tp, const ts_cluster *cl,
                               double max_memory_mb, int optim_slots, int mode, const ts_op_text *fixed, int nfixed,
                               ts_strategy_set **out, double *cost) {
  int D = dp * tp, rc = TS_OK;
  *out = NULL;
  ts_graph *g = NULL;
  ts_params *p = NULL;
  ts_costgraph *cg = NULL;
  int *choice = NULL;
  if (!(rc = ts_graph_create(&g)) && !(rc = ts_params_create(&p))) {
    ts_nn nn = {g, p};
    ts_val x = ts_input(g, "x", m->dtype, ts_shape_batch(rows, &m->sample));
    ts_val_set_requires_grad(g, x, 0);
    ts_val y = m->values ? ts_input(g, "y", TS_F32, ts_shape_batch(rows, &m->target))
               : m->text ? ts_input(g, "y", TS_I32, ts_shape_batch(rows, &m->sample))
                         : ts_input(g, "y", TS_I32, ts_shape1(rows));
    ts_model_info info = {0, D, 1, NULL};
    ts_val lg = TS_NONE, ls = TS_NONE;
    rc = m->fn(&nn, x, y, &info, &lg, &ls, m->user);
    if (!rc && ts_graph_status(g)) rc = ts_error_set(TS_EGRAPH, "auto_parallel: model: %s", ts_graph_error(g));
  }
  if (!rc) {
    double lim = cl->mem_bytes;
    if (max_memory_mb > 0 && max_memory_mb * 1048576.0 < lim) lim = max_memory_mb * 1048576.0;
    ts_costgraph_config cc = {.ndevices = D, .cluster = cl, .mem_limit = lim, .batch_cut = dp, .opt_slots = optim_slots};
    rc = ts_costgraph_build(g, &cc, &cg);
  }
  if (!rc && !(choice = calloc((size_t)ts_costgraph_num_ops(cg) + 1, sizeof(int))))
    rc = ts_error_set(TS_ENOMEM, "auto_parallel: out of memory");
  ts_search_result res;
  ts_strategy_set *fix = NULL;
  if (!rc && mode == TS_SEARCH_PROPAGATION && nfixed > 0) { /* the user's own, as written */
    rc = ts_strategy_set_create(D, 0, &fix);
    for (int i = 0; !rc && i < nfixed; i++) rc = ts_strategy_set_put_text(fix, fixed[i].op, fixed[i].text);
    if (rc) rc = ts_error_wrap(rc, "parallel.strategies (sharding_propagation's fixed operators)");
  }
  if (!rc) rc = ts_search_run(cg, (ts_search_mode)mode, fix, choice, &res);
  if (rc == TS_ERANGE && mode == TS_SEARCH_DP) { /* an elimination table too big: not exact, said so */
    ts_log(TS_LOG_WARN, "auto_parallel: %s; the operators are searched by sharding_propagation instead", ts_last_error());
    rc = ts_search_run(cg, TS_SEARCH_PROPAGATION, NULL, choice, &res);
  }
  if (!rc) rc = write_strategies(g, cg, choice, D, out);
  if (!rc && cost) *cost = res.cost;
  ts_strategy_set_free(fix);
  free(choice);
  ts_costgraph_free(cg);
  ts_graph_free(g);
  ts_params_free(p);
  return rc;
}
