/* The per-operator strategy searches on a cost graph (src/planner/search.h).
 *
 * dynamic_programming: MindSpore's elimination (its graph_costmodel: operator, edge, merge,
 * contract, triangle and star eliminations, then pick and replay), written as variable
 * elimination on cost tables so every step is exact:
 *  - the cost graph's nodes own a cost vector, its edges a cost matrix; both are TABLES over the
 *    nodes they mention;
 *  - EDGE elimination: two tables over the same nodes (parallel edges) are added into one;
 *  - a node is eliminated by taking, for every combination of its neighbours' candidates, the
 *    minimum over its own candidates of the sum of the tables mentioning it; the argmin is kept
 *    for the replay. With one neighbour this is MERGE elimination (the node had no incoming edge:
 *    a source leaf folded into its consumer) or CONTRACT elimination (a sink leaf folded into its
 *    producer); with two it is OPERATOR elimination (the node becomes an edge between its
 *    neighbours) or TRIANGLE elimination (the neighbours were already joined: the new edge merges
 *    with theirs); with three or more it is STAR elimination (a table over all the neighbours);
 *    with none, PICK: the cheapest candidate of the last node of a component;
 *  - the next node eliminated is the one with fewest neighbours (then the smallest table, then
 *    the lowest index), so chains go first by operator/merge eliminations as in MindSpore, and
 *    stars only where the graph has no simpler node (residual joins, fan-outs);
 *  - the replay walks the eliminations backwards: each node's candidate is its argmin given its
 *    neighbours' (decided later in elimination order, so earlier in the replay).
 * Because every step keeps the minimum over all the eliminated node's candidates for every
 * combination of the rest, the result is the exact optimum of the cost graph (the brute force of
 * tests/planner/test_search.c checks it). Graphs are never left half eliminated: star
 * elimination always applies; the only failure is a table above 2^26 entries (TS_ERANGE naming
 * the op), which the caller treats as "use another search".
 * The memory limit: candidates whose own memory exceeds it were dropped when the cost graph was
 * built; the result reports the chosen plan's total. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "search_impl.h"

#define MAX_SCOPE 24
#define MAX_TABLE ((size_t)1 << 26)

const char *ts_search_mode_name(ts_search_mode m) {
  switch (m) {
    case TS_SEARCH_DP: return "dynamic_programming";
    case TS_SEARCH_PROPAGATION: return "sharding_propagation";
    case TS_SEARCH_RECURSIVE: return "recursive_programming";
  }
  return "?";
}

int ts_search_mode_parse(const char *name, ts_search_mode *out) {
  for (int m = 0; m <= 2; m++)
    if (name && !strcmp(name, ts_search_mode_name((ts_search_mode)m))) {
      *out = (ts_search_mode)m;
      return TS_OK;
    }
  return ts_error_set(TS_ECONFIG,
                      "search mode '%s': expected dynamic_programming, sharding_propagation or recursive_programming",
                      name ? name : "");
}

/* ---- tables ---- */

typedef struct {
  int n;               /* nodes in scope, ascending */
  int vars[MAX_SCOPE];
  double *t;           /* row-major, the last var fastest */
  int alive;
} table;

typedef struct {
  int v;               /* the node eliminated */
  int n;
  int vars[MAX_SCOPE]; /* its neighbours then */
  int *arg;            /* argmin per combination of the neighbours' candidates */
} step;

typedef struct {
  int n, cap, *t; /* the tables mentioning a node, ascending (dead ones dropped as met) */
} inc_list;

typedef struct {
  const ts_costgraph *cg;
  table *t;
  int nt, capt;
  step *s;
  int ns;
  double constant;
  inc_list *inc; /* per node: so a node's tables are found without scanning them all (#33: the
                  * scans made the search cubic in the layer count) */
} elim;

static size_t scope_size(const ts_costgraph *cg, const int *vars, int n) {
  size_t s = 1;
  for (int i = 0; i < n; i++) {
    s *= (size_t)cg->ops[vars[i]].ncand;
    if (s > MAX_TABLE) return MAX_TABLE + 1;
  }
  return s;
}

static int push_table(elim *E, int n, const int *vars, double *t) {
  if (E->nt == E->capt) {
    int nc = E->capt ? 2 * E->capt : 64;
    table *q = realloc(E->t, sizeof *q * (size_t)nc);
    if (!q) return ts_error_set(TS_ENOMEM, "search: out of memory");
    E->t = q;
    E->capt = nc;
  }
  for (int k = 0; k < n; k++) {
    inc_list *l = &E->inc[vars[k]];
    if (l->n == l->cap) {
      int nc = l->cap ? 2 * l->cap : 8;
      int *q = realloc(l->t, sizeof *q * (size_t)nc);
      if (!q) return ts_error_set(TS_ENOMEM, "search: out of memory");
      l->t = q;
      l->cap = nc;
    }
    l->t[l->n++] = E->nt;
  }
  table *x = &E->t[E->nt++];
  x->n = n;
  memcpy(x->vars, vars, sizeof(int) * (size_t)n);
  x->t = t;
  x->alive = 1;
  return TS_OK;
}

/* The alive tables mentioning v, ascending (the list compacted in place). */
static const inc_list *live(const elim *E, int v) {
  inc_list *l = &E->inc[v];
  int k = 0;
  for (int i = 0; i < l->n; i++)
    if (E->t[l->t[i]].alive) l->t[k++] = l->t[i];
  l->n = k;
  return l;
}

/* Adds table b into a (same scope). */
static void add_into(const ts_costgraph *cg, table *a, const table *b) {
  size_t s = scope_size(cg, a->vars, a->n);
  for (size_t i = 0; i < s; i++) a->t[i] += b->t[i];
}

/* Merges table `ti` with an alive table over the same nodes (edge elimination). 1 if merged. */
static int merge_same(elim *E, int ti) {
  table *x = &E->t[ti];
  const inc_list *l = live(E, x->vars[0]); /* a table over the same nodes mentions the first */
  for (int li = 0; li < l->n; li++) {
    int j = l->t[li];
    table *y = &E->t[j];
    if (j == ti || !y->alive || y->n != x->n || memcmp(y->vars, x->vars, sizeof(int) * (size_t)x->n)) continue;
    add_into(E->cg, y, x);
    free(x->t);
    x->t = NULL;
    x->alive = 0;
    return 1;
  }
  return 0;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static void free_elim(elim *E) {
  for (int i = 0; i < E->nt; i++) free(E->t[i].t);
  for (int i = 0; i < E->ns; i++) free(E->s[i].arg);
  for (int v = 0; E->inc && v < E->cg->nops; v++) free(E->inc[v].t);
  free(E->inc);
  free(E->t);
  free(E->s);
}

/* The neighbours of v among the alive tables (ascending), their count. */
static int neighbours(const elim *E, int v, int *nb) {
  int n = 0;
  const inc_list *l = live(E, v);
  for (int li = 0; li < l->n; li++) {
    const table *x = &E->t[l->t[li]];
    for (int k = 0; k < x->n; k++) {
      int w = x->vars[k], dup = w == v;
      for (int q = 0; q < n && !dup; q++) dup = nb[q] == w;
      if (!dup) {
        if (n == MAX_SCOPE) return MAX_SCOPE + 1;
        nb[n++] = w;
      }
    }
  }
  qsort(nb, (size_t)n, sizeof(int), cmp_int);
  return n;
}

static int joined(const elim *E, int a, int b) {
  const inc_list *l = live(E, a);
  for (int li = 0; li < l->n; li++) {
    const table *x = &E->t[l->t[li]];
    for (int k = 0; k < x->n; k++)
      if (x->vars[k] == b) return 1;
  }
  return 0;
}

static int eliminate(elim *E, int v, const char *in_edge, ts_search_result *res) {
  const ts_costgraph *cg = E->cg;
  int nb[MAX_SCOPE + 1];
  int n = neighbours(E, v, nb);
  if (n > MAX_SCOPE) return ts_error_set(TS_ERANGE, "search: operator '%s' has more than %d neighbours left", cg->ops[v].key, MAX_SCOPE);
  size_t P = scope_size(cg, nb, n);
  int dv = cg->ops[v].ncand;
  if (P > MAX_TABLE || P * (size_t)dv > MAX_TABLE)
    return ts_error_set(TS_ERANGE, "search: eliminating operator '%s' needs a table of more than 2^26 entries (%d neighbours)",
                        cg->ops[v].key, n);
  int kind;
  if (n == 0) kind = 6;
  else if (n == 1) kind = in_edge[v] ? 3 : 2;
  else if (n == 2) kind = joined(E, nb[0], nb[1]) ? 4 : 0;
  else kind = 5;
  /* the tables mentioning v, with each var's stride in them */
  const inc_list *lv = live(E, v);
  int nf = 0, *fi = malloc(sizeof(int) * ((size_t)lv->n + 1));
  size_t *stride = malloc(sizeof(size_t) * ((size_t)lv->n + 1) * (MAX_SCOPE + 1)); /* [f][pos in nb, then v] */
  double *nt = malloc(sizeof(double) * P);
  int *arg = malloc(sizeof(int) * P);
  if (!fi || !stride || !nt || !arg) {
    free(fi), free(stride), free(nt), free(arg);
    return ts_error_set(TS_ENOMEM, "search: out of memory");
  }
  for (int li = 0; li < lv->n; li++) {
    int i = lv->t[li];
    table *x = &E->t[i];
    size_t *st = &stride[(size_t)nf * (MAX_SCOPE + 1)];
    for (int q = 0; q <= n; q++) st[q] = 0;
    size_t s = 1;
    for (int k = x->n - 1; k >= 0; k--) {
      int w = x->vars[k];
      if (w == v) st[n] = s;
      else
        for (int q = 0; q < n; q++)
          if (nb[q] == w) st[q] = s;
      s *= (size_t)cg->ops[w].ncand;
    }
    fi[nf++] = i;
  }
  int idx[MAX_SCOPE];
  for (int q = 0; q < n; q++) idx[q] = 0;
  for (size_t p = 0; p < P; p++) {
    double best = INFINITY;
    int bx = 0;
    for (int x = 0; x < dv; x++) {
      double sum = 0;
      for (int f = 0; f < nf; f++) {
        const size_t *st = &stride[(size_t)f * (MAX_SCOPE + 1)];
        size_t o = (size_t)x * st[n];
        for (int q = 0; q < n; q++) o += (size_t)idx[q] * st[q];
        sum += E->t[fi[f]].t[o];
      }
      if (sum < best) best = sum, bx = x;
    }
    nt[p] = best;
    arg[p] = bx;
    for (int q = n - 1; q >= 0; q--) { /* odometer, last fastest */
      if (++idx[q] < cg->ops[nb[q]].ncand) break;
      idx[q] = 0;
    }
  }
  for (int f = 0; f < nf; f++) {
    free(E->t[fi[f]].t);
    E->t[fi[f]].t = NULL;
    E->t[fi[f]].alive = 0;
  }
  free(fi);
  free(stride);
  step *s = &E->s[E->ns++];
  s->v = v, s->n = n, s->arg = arg;
  memcpy(s->vars, nb, sizeof(int) * (size_t)n);
  if (res) res->eliminated[kind]++;
  if (n == 0) {
    E->constant += nt[0];
    free(nt);
    return TS_OK;
  }
  int rc = push_table(E, n, nb, nt);
  if (rc) {
    free(nt);
    return rc;
  }
  if (merge_same(E, E->nt - 1) && res) res->eliminated[1]++;
  return TS_OK;
}

static int run_dp(const ts_costgraph *cg, int *choice, ts_search_result *res, double lambda) {
  elim E;
  memset(&E, 0, sizeof E);
  E.cg = cg;
  int N = cg->nops, rc = TS_OK;
  E.s = calloc((size_t)N + 1, sizeof *E.s);
  E.inc = calloc((size_t)N + 1, sizeof *E.inc);
  char *done = calloc((size_t)N + 1, 1), *in_edge = calloc((size_t)N + 1, 1);
  int *kn = malloc(sizeof(int) * ((size_t)N + 1));
  size_t *ks = malloc(sizeof(size_t) * ((size_t)N + 1));
  if (!E.s || !E.inc || !done || !in_edge || !kn || !ks) {
    free(done), free(in_edge), free(kn), free(ks);
    free(E.s), free(E.inc);
    return ts_error_set(TS_ENOMEM, "search: out of memory");
  }
  for (int e = 0; e < cg->nedges; e++) in_edge[cg->edges[e].v] = 1; /* it consumes another op's output */
  for (int i = 0; i < N && !rc; i++) {
    double *t = malloc(sizeof(double) * (size_t)cg->ops[i].ncand);
    if (!t) rc = ts_error_set(TS_ENOMEM, "search: out of memory");
    else {
      for (int c = 0; c < cg->ops[i].ncand; c++) t[c] = cg->ops[i].cost[c] + lambda * cg->ops[i].mem[c];
      rc = push_table(&E, 1, &i, t);
      if (rc) free(t);
    }
  }
  for (int e = 0; e < cg->nedges && !rc; e++) {
    const ts__cg_edge *x = &cg->edges[e];
    int nu = cg->ops[x->u].ncand, nv = cg->ops[x->v].ncand;
    double *t = malloc(sizeof(double) * (size_t)nu * (size_t)nv);
    if (!t) {
      rc = ts_error_set(TS_ENOMEM, "search: out of memory");
      break;
    }
    int vars[2];
    if (x->u < x->v) {
      vars[0] = x->u, vars[1] = x->v;
      memcpy(t, x->m, sizeof(double) * (size_t)nu * (size_t)nv);
    } else {
      vars[0] = x->v, vars[1] = x->u;
      for (int a = 0; a < nu; a++)
        for (int b = 0; b < nv; b++) t[(size_t)b * nu + a] = x->m[(size_t)a * nv + b];
    }
    if ((rc = push_table(&E, 2, vars, t))) {
      free(t);
      break;
    }
    if (merge_same(&E, E.nt - 1) && res) res->eliminated[1]++;
  }
  /* eliminate: fewest neighbours, then the smallest table, then the lowest index. Each node's
   * (neighbours, table size) is kept and recomputed only for the eliminated node's neighbours (the
   * only nodes whose tables changed): linear work per step where recomputing every node's from
   * every table was cubic in the graph's size overall */
  int nb[MAX_SCOPE + 1];
  for (int v = 0; v < N && !rc; v++) {
    kn[v] = neighbours(&E, v, nb);
    ks[v] = kn[v] > MAX_SCOPE ? MAX_TABLE + 1 : scope_size(cg, nb, kn[v]);
  }
  for (int it = 0; it < N && !rc; it++) {
    int best = -1, bn = 0;
    size_t bs = 0;
    for (int v = 0; v < N; v++) {
      if (done[v]) continue;
      if (best < 0 || kn[v] < bn || (kn[v] == bn && ks[v] < bs)) best = v, bn = kn[v], bs = ks[v];
    }
    done[best] = 1;
    int n = neighbours(&E, best, nb), around[MAX_SCOPE + 1];
    if (n > MAX_SCOPE) n = 0; /* eliminate refuses it below */
    memcpy(around, nb, sizeof(int) * (size_t)n);
    rc = eliminate(&E, best, in_edge, res);
    for (int q = 0; q < n && !rc; q++) {
      int w = around[q];
      kn[w] = neighbours(&E, w, nb);
      ks[w] = kn[w] > MAX_SCOPE ? MAX_TABLE + 1 : scope_size(cg, nb, kn[w]);
    }
  }
  if (!rc) {
    /* replay backwards */
    for (int i = E.ns - 1; i >= 0; i--) {
      const step *s = &E.s[i];
      size_t o = 0;
      for (int q = 0; q < s->n; q++) o = o * (size_t)cg->ops[s->vars[q]].ncand + (size_t)choice[s->vars[q]];
      choice[s->v] = s->arg[o];
    }
    if (res) res->elim_cost = E.constant;
  }
  free(done), free(in_edge), free(kn), free(ks);
  free_elim(&E);
  return rc;
}

/* ---- shared by the greedy searches ---- */

typedef struct {
  int n, *e; /* incident edges */
} adj;

static int build_adj(const ts_costgraph *cg, adj **out) {
  adj *A = calloc((size_t)cg->nops + 1, sizeof *A);
  if (!A) return ts_error_set(TS_ENOMEM, "search: out of memory");
  for (int e = 0; e < cg->nedges; e++) A[cg->edges[e].u].n++, A[cg->edges[e].v].n++;
  for (int i = 0; i < cg->nops; i++) {
    A[i].e = malloc(sizeof(int) * (size_t)(A[i].n + 1));
    if (!A[i].e) {
      for (int j = 0; j <= i; j++) free(A[j].e);
      free(A);
      return ts_error_set(TS_ENOMEM, "search: out of memory");
    }
    A[i].n = 0;
  }
  for (int e = 0; e < cg->nedges; e++) {
    int u = cg->edges[e].u, v = cg->edges[e].v;
    A[u].e[A[u].n++] = e;
    A[v].e[A[v].n++] = e;
  }
  *out = A;
  return TS_OK;
}

static void free_adj(const ts_costgraph *cg, adj *A) {
  if (!A) return;
  for (int i = 0; i < cg->nops; i++) free(A[i].e);
  free(A);
}

/* The candidate of op w minimising its own cost + the edges to its decided neighbours. */
static int best_given(const ts_costgraph *cg, const adj *A, int w, const int *choice, const char *decided) {
  const ts__cg_op *o = &cg->ops[w];
  int bx = 0;
  double best = INFINITY;
  for (int c = 0; c < o->ncand; c++) {
    double t = o->cost[c];
    for (int k = 0; k < A[w].n; k++) {
      const ts__cg_edge *x = &cg->edges[A[w].e[k]];
      int other = x->u == w ? x->v : x->u;
      if (!decided[other]) continue;
      t += x->u == w ? x->m[(size_t)c * cg->ops[x->v].ncand + choice[other]]
                     : x->m[(size_t)choice[other] * o->ncand + c];
    }
    if (t < best) best = t, bx = c;
  }
  return bx;
}

/* The candidate of op i equal to st (a dense/conv strategy may give the bias too), or -1. */
static int find_candidate(const ts_costgraph *cg, int i, const ts_op_strategy *st) {
  ts_op_strategy s = *st;
  const ts__cg_op *o = &cg->ops[i];
  if (s.ninputs == o->m.nin + 1 && (o->m.sop == TS_SHARD_DENSE || o->m.sop == TS_SHARD_CONV2D)) s.ninputs--;
  for (int c = 0; c < o->ncand; c++)
    if (ts_op_strategy_equal(&o->cand[c], &s)) return c;
  return -1;
}

/* The op not yet decided with the largest cheapest cost (the heaviest), -1 if none. */
static int heaviest(const ts_costgraph *cg, const char *decided) {
  int bi = -1;
  double bw = -1;
  for (int i = 0; i < cg->nops; i++) {
    if (decided[i]) continue;
    double m = INFINITY;
    for (int c = 0; c < cg->ops[i].ncand; c++)
      if (cg->ops[i].cost[c] < m) m = cg->ops[i].cost[c];
    if (m > bw) bw = m, bi = i;
  }
  return bi;
}

static int run_propagation(const ts_costgraph *cg, const ts_strategy_set *fixed, int *choice) {
  adj *A = NULL;
  int rc = build_adj(cg, &A), N = cg->nops;
  if (rc) return rc;
  char *decided = calloc((size_t)N + 1, 1);
  int *queue = malloc(sizeof(int) * (size_t)(N + 1));
  if (!decided || !queue) {
    rc = ts_error_set(TS_ENOMEM, "search: out of memory");
    goto out;
  }
  int head = 0, tail = 0;
  for (int i = 0; i < N && fixed; i++) {
    ts_op_strategy st;
    if (ts_strategy_set_get(fixed, cg->ops[i].key, &st)) {
      ts_error_set(TS_OK, "%s", "");
      continue;
    }
    int c = find_candidate(cg, i, &st);
    if (c < 0) {
      char b[256];
      rc = ts_error_set(TS_ECONFIG, "sharding_propagation: the strategy %s given for operator '%s' is not one of its "
                        "%d valid strategies on %d devices", ts_op_strategy_str(&st, b, sizeof b), cg->ops[i].key,
                        cg->ops[i].ncand, cg->cfg.ndevices);
      goto out;
    }
    choice[i] = c;
    decided[i] = 1;
    queue[tail++] = i;
  }
  for (;;) {
    while (head < tail) {
      int u = queue[head++];
      for (int k = 0; k < A[u].n; k++) {
        const ts__cg_edge *x = &cg->edges[A[u].e[k]];
        int w = x->u == u ? x->v : x->u;
        if (decided[w]) continue;
        choice[w] = best_given(cg, A, w, choice, decided);
        decided[w] = 1;
        queue[tail++] = w;
      }
    }
    int s = heaviest(cg, decided); /* a component nobody configured: start at its heaviest op */
    if (s < 0) break;
    choice[s] = best_given(cg, A, s, choice, decided);
    decided[s] = 1;
    queue[tail++] = s;
  }
out:
  free(decided);
  free(queue);
  free_adj(cg, A);
  return rc;
}

/* ---- recursive_programming ---- */

/* The symbolic cost of a strategy: the bytes its tensors keep per device, a partial output counted
 * twice (it must be reduced). */
static double symbolic(const ts_costgraph *cg, int i, const ts_op_strategy *st, int *ok) {
  const ts__cg_op *o = &cg->ops[i];
  ts_layout req[TS_STRATEGY_MAX_INPUTS], out;
  *ok = 0;
  if (ts__pass_rule_layouts(o->m.sop, st, cg->cfg.ndevices, o->shapes, o->m.nin, o->m.has_attrs ? o->m.attrs : NULL,
                            req, &out)) {
    ts_error_set(TS_OK, "%s", "");
    return INFINITY;
  }
  *ok = 1;
  double b = 0;
  for (int k = 0; k < o->m.nin; k++) {
    ts_shape loc;
    if (!ts_layout_local_shape(&req[k], &o->shapes[k], &loc)) b += (double)ts_shape_numel(&loc);
  }
  const ts_shape *os = ts_graph_value_shape(cg->g, ts_graph_node_output(cg->g, o->node, 0));
  ts_shape loc;
  if (!ts_layout_local_shape(&out, os, &loc)) b += (double)ts_shape_numel(&loc) * (out.partial ? 2 : 1);
  return b;
}

static int run_recursive(const ts_costgraph *cg, int *choice) {
  int D = cg->cfg.ndevices, N = cg->nops;
  int fac[32], nfac = 0;
  for (int d = D, p = 2; d > 1 && nfac < 32;) { /* the prime factors of D, smallest first */
    if (d % p == 0) fac[nfac++] = p, d /= p;
    else p++;
  }
  for (int i = 0; i < N; i++) {
    const ts__cg_op *o = &cg->ops[i];
    ts_op_strategy st;
    memset(&st, 0, sizeof st);
    st.ninputs = o->m.nin;
    for (int k = 0; k < o->m.nin; k++) {
      st.ndim[k] = o->shapes[k].ndim;
      for (int d = 0; d < st.ndim[k]; d++) st.cuts[k][d] = 1;
    }
    int ax[TS_STRATEGY_MAX_INPUTS][TS_MAX_DIMS];
    int na = ts__cg_loop_axes(o->m.sop, o->shapes, o->m.nin, o->m.has_attrs ? o->m.attrs : NULL, ax);
    for (int r = 0; r < nfac; r++) {
      int ba = -1;
      double bc = INFINITY;
      ts_op_strategy bst = st;
      for (int a = 0; a < na; a++) {
        ts_op_strategy t = st;
        int used = 0;
        for (int k = 0; k < o->m.nin; k++)
          for (int d = 0; d < t.ndim[k]; d++)
            if (ax[k][d] == a) t.cuts[k][d] *= fac[r], used = 1;
        if (!used) continue;
        int ok;
        double c = symbolic(cg, i, &t, &ok);
        if (ok && c < bc) bc = c, ba = a, bst = t;
      }
      if (ba < 0) break;
      st = bst;
    }
    int c = find_candidate(cg, i, &st);
    if (c < 0) { /* not a candidate (batch cut asked, memory): the cheapest one */
      c = 0;
      for (int k = 1; k < o->ncand; k++)
        if (o->cost[k] < o->cost[c]) c = k;
    }
    choice[i] = c;
  }
  return TS_OK;
}

/* 1 if candidate c of op i leaves every neighbour at least one candidate at a finite edge cost. */
static int completable(const ts_costgraph *cg, const adj *A, int i, int c) {
  for (int k = 0; k < A[i].n; k++) {
    const ts__cg_edge *x = &cg->edges[A[i].e[k]];
    int other = x->u == i ? x->v : x->u, any = 0;
    for (int d = 0; d < cg->ops[other].ncand && !any; d++)
      any = isfinite(x->u == i ? x->m[(size_t)c * cg->ops[x->v].ncand + d] : x->m[(size_t)d * cg->ops[i].ncand + c]);
    if (!any) return 0;
  }
  return 1;
}

/* Ops whose choice conflicts with an earlier op (an infinite edge: a shared parameter cut two
 * ways) take their best candidate given the earlier ones; first, a choice that leaves a neighbour
 * no compatible candidate at all (an embedding cutting a tied table as no head can) is replaced by
 * the cheapest that does. */
static int repair(const ts_costgraph *cg, int *choice) {
  adj *A = NULL;
  int rc = build_adj(cg, &A);
  if (rc) return rc;
  char *decided = calloc((size_t)cg->nops + 1, 1);
  if (!decided) {
    free_adj(cg, A);
    return ts_error_set(TS_ENOMEM, "search: out of memory");
  }
  for (int i = 0; i < cg->nops; i++) {
    if (completable(cg, A, i, choice[i])) continue;
    int best = -1;
    for (int c = 0; c < cg->ops[i].ncand; c++)
      if (completable(cg, A, i, c) && (best < 0 || cg->ops[i].cost[c] < cg->ops[i].cost[best])) best = c;
    if (best >= 0) choice[i] = best;
  }
  for (int i = 0; i < cg->nops; i++) {
    int bad = 0;
    for (int k = 0; k < A[i].n; k++) {
      const ts__cg_edge *x = &cg->edges[A[i].e[k]];
      int other = x->u == i ? x->v : x->u;
      if (other < i && isinf(ts_costgraph_edge_cost(cg, A[i].e[k], choice[x->u], choice[x->v]))) bad = 1;
    }
    if (bad) choice[i] = best_given(cg, A, i, choice, decided);
    decided[i] = 1;
  }
  free(decided);
  free_adj(cg, A);
  return TS_OK;
}

/* dynamic_programming under the memory limit (the plan's total, ts_costgraph_memory): when the
 * cheapest plan is over it, MindSpore keeps (cost, memory) pairs per strategy; here the memory is
 * priced instead (a Lagrangian: each candidate costs cost + lambda x memory, every run exact for
 * that price), lambda raised until the plan fits and then bisected towards the cheapest plan that
 * still fits. Not exact for the constrained problem (a plan between two prices can be missed), but
 * every plan returned fits when any price makes one fit; else the smallest-memory plan found is
 * returned and the result's memory says by how much it is over. */
static int run_dp_limited(const ts_costgraph *cg, int *choice, ts_search_result *r) {
  int rc = run_dp(cg, choice, r, 0);
  double lim = cg->cfg.mem_limit;
  if (rc || lim <= 0 || ts_costgraph_memory(cg, choice) <= lim) return rc;
  int n = cg->nops;
  int *cur = malloc(sizeof(int) * (size_t)(n + 1)), *best = malloc(sizeof(int) * (size_t)(n + 1));
  if (!cur || !best) {
    free(cur), free(best);
    return ts_error_set(TS_ENOMEM, "search: out of memory");
  }
  double cost0 = ts_costgraph_total(cg, choice), lo = 0, hi = (cost0 > 0 && isfinite(cost0) ? cost0 : 1) / lim;
  double best_cost = INFINITY, least_mem = ts_costgraph_memory(cg, choice);
  memcpy(best, choice, sizeof(int) * (size_t)n);
  int fits = 0;
  for (int it = 0; it < 60 && !rc && !fits; it++, hi *= 4) { /* raise the price until the plan fits */
    ts_search_result t;
    memset(&t, 0, sizeof t);
    if ((rc = run_dp(cg, cur, &t, hi))) break;
    double m = ts_costgraph_memory(cg, cur);
    if (m <= lim) {
      fits = 1;
      best_cost = ts_costgraph_total(cg, cur);
      memcpy(best, cur, sizeof(int) * (size_t)n);
    } else {
      lo = hi;
      if (m < least_mem) least_mem = m, memcpy(best, cur, sizeof(int) * (size_t)n);
    }
  }
  if (fits) hi /= 4;
  for (int it = 0; it < 30 && !rc && fits; it++) { /* the cheapest that fits between the prices */
    double mid = 0.5 * (lo + hi);
    ts_search_result t;
    memset(&t, 0, sizeof t);
    if ((rc = run_dp(cg, cur, &t, mid))) break;
    if (ts_costgraph_memory(cg, cur) <= lim) {
      hi = mid;
      double c = ts_costgraph_total(cg, cur);
      if (c < best_cost) best_cost = c, memcpy(best, cur, sizeof(int) * (size_t)n);
    } else {
      lo = mid;
    }
  }
  if (!rc) memcpy(choice, best, sizeof(int) * (size_t)n);
  r->elim_cost = ts_costgraph_total(cg, choice); /* the plan's own total (the elimination priced memory too) */
  free(cur), free(best);
  return rc;
}

int ts_search_run(const ts_costgraph *cg, ts_search_mode mode, const ts_strategy_set *fixed, int *choice,
                  ts_search_result *res) {
  if (!cg || !choice) return ts_error_set(TS_EINVAL, "ts_search_run: null argument");
  ts_search_result r;
  memset(&r, 0, sizeof r);
  for (int i = 0; i < cg->nops; i++) choice[i] = 0;
  int rc;
  switch (mode) {
    case TS_SEARCH_DP: rc = run_dp_limited(cg, choice, &r); break;
    case TS_SEARCH_PROPAGATION: rc = run_propagation(cg, fixed, choice); break;
    case TS_SEARCH_RECURSIVE:
      rc = run_recursive(cg, choice);
      if (!rc) rc = repair(cg, choice);
      break;
    default: rc = ts_error_set(TS_EINVAL, "search: mode %d", (int)mode);
  }
  if (rc) return rc;
  r.cost = ts_costgraph_total(cg, choice);
  r.memory = ts_costgraph_memory(cg, choice);
  r.nops = cg->nops;
  r.nedges = cg->nedges;
  if (mode != TS_SEARCH_DP) r.elim_cost = r.cost;
  if (res) *res = r;
  return TS_OK;
}
