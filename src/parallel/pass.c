/* The parallel pass, phase 1 and the public API: decides every value's layout and every
 * operator's strategy on the global graph (pass_rules.c per op), records the redistributions
 * with their cost, then has pass_emit.c build the rank's graph. See src/parallel/parallel.h
 * and docs/parallel-pass.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_ir.h"
#include "pass_impl.h"
#include "../base/text.h"

/* ---- small layout helpers ---- */

void ts__layout_repl(ts_layout *l, int N, int ndim) {
  int dev[1] = {N};
  ts_layout_replicated(l, 1, dev, ndim);
}

void ts__layout_canon(ts_layout *l) {
  for (int d = 0; d < l->ndim; d++)
    if (l->tmap[d] >= 0 && l->dev[l->tmap[d]] == 1) l->tmap[d] = -1;
  for (int a = 0; a < l->ndev; a++)
    if (l->dev[a] == 1) l->partial &= ~(1u << a);
}

void ts__layout_cuts(const ts_layout *l, int64_t *cuts) {
  for (int d = 0; d < l->ndim; d++) cuts[d] = l->tmap[d] >= 0 ? l->dev[l->tmap[d]] : 1;
}

/* ---- operator keys ---- */

static void raw_key(const ts_graph *g, int node, char *buf, size_t cap) {
  const char *nm = ts_graph_node_name(g, node) ? ts_graph_node_name(g, node) : "";
  size_t n = strlen(nm);
  const char *us = strrchr(nm, '_'); /* drop the "_<index>" ts__add_node appends */
  if (us && us > strrchr(nm, '/') + 0 && us[1] >= '0' && us[1] <= '9') n = (size_t)(us - nm);
  if (n >= cap) n = cap - 1;
  for (size_t i = 0; i < n; i++) buf[i] = nm[i] == '/' ? '.' : nm[i];
  buf[n] = 0;
}

char *ts_parallel_op_key(const ts_graph *g, int node, char *buf, size_t cap) {
  if (!buf || !cap) return buf;
  buf[0] = 0;
  if (!g || node < 0 || node >= ts_graph_num_nodes(g)) return buf;
  raw_key(g, node, buf, cap);
  int k = 0;
  char other[512];
  for (int j = 0; j < node; j++) {
    if (ts_graph_node_is_backward(g, j)) continue;
    raw_key(g, j, other, sizeof other);
    if (!strcmp(other, buf)) k++;
  }
  if (k) {
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n, "_%d", k);
  }
  return buf;
}

/* Every node's key at once (nodes 0..n-1 of g; keys[j] malloc'ed, the caller frees them): the
 * same strings as ts_parallel_op_key, counted with a hash table of the raw keys seen so far
 * instead of rescanning the earlier nodes (linear in the graph: a 128-layer GPT has thousands of
 * operators). */
int ts__parallel_op_keys(const ts_graph *g, int n, char **keys) {
  size_t cap = 64;
  while (cap < 2 * (size_t)n + 2) cap *= 2;
  struct slot {
    char *raw;
    int count;
  } *tab = calloc(cap, sizeof *tab);
  if (!tab) return ts_error_set(TS_ENOMEM, "parallel pass: out of memory");
  int rc = TS_OK;
  for (int j = 0; j < n; j++) keys[j] = NULL;
  for (int j = 0; j < n && !rc; j++) {
    char raw[512], buf[540];
    raw_key(g, j, raw, sizeof raw);
    size_t i = (size_t)ts__fnv1a_str(TS__FNV1A_BASIS, raw) & (cap - 1);
    while (tab[i].raw && strcmp(tab[i].raw, raw)) i = (i + 1) & (cap - 1);
    if (!tab[i].raw && !(tab[i].raw = strdup(raw))) {
      rc = ts_error_set(TS_ENOMEM, "parallel pass: out of memory");
      break;
    }
    if (tab[i].count) snprintf(buf, sizeof buf, "%s_%d", raw, tab[i].count);
    else snprintf(buf, sizeof buf, "%s", raw);
    if (!ts_graph_node_is_backward(g, j)) tab[i].count++;
    if (!(keys[j] = strdup(buf))) rc = ts_error_set(TS_ENOMEM, "parallel pass: out of memory");
  }
  for (size_t i = 0; i < cap; i++) free(tab[i].raw);
  free(tab);
  if (rc)
    for (int j = 0; j < n; j++) {
      free(keys[j]);
      keys[j] = NULL;
    }
  return rc;
}

/* ---- communicator slots ---- */

int ts__slot_for(ts_parallel *p, const ts_layout *l, int axis) {
  int N = p->N, g = l->dev[axis];
  if (g <= 1) return -1;
  int *part = malloc(sizeof(int) * (size_t)N);
  int *first = malloc(sizeof(int) * (size_t)N);
  if (!part || !first) {
    free(part);
    free(first);
    return ts_error_set(TS_ENOMEM, "parallel pass: out of memory");
  }
  /* part[r] = index of the group of rank r (groups numbered by first appearance); first[lo]: the
   * group whose lowest rank is lo, so one pass over the ranks */
  int ngr = 0;
  for (int r = 0; r < N; r++) first[r] = -1;
  for (int r = 0; r < N; r++) {
    int coords[TS_LAYOUT_MAX_AXES];
    ts_layout_rank_coords(l, r, coords);
    coords[axis] = 0;
    /* the group's lowest rank: coordinate 0 on the axis */
    int lo = 0;
    for (int a = 0; a < l->ndev; a++) lo = lo * l->dev[a] + coords[a];
    if (first[lo] < 0) first[lo] = ngr++;
    part[r] = first[lo];
  }
  free(first);
  for (int s = 0; s < p->nslots; s++) {
    if (p->slots[s].group != g) continue;
    if (!memcmp(p->slots[s].part, part, sizeof(int) * (size_t)N)) {
      free(part);
      return s;
    }
  }
  if (p->nslots >= TS_GRAPH_MAX_COMM_SLOTS) {
    free(part);
    return ts_error_set(TS_ERANGE,
                        "parallel pass: the strategies need more than %d communicator groups",
                        TS_GRAPH_MAX_COMM_SLOTS);
  }
  ts__slot *ns = realloc(p->slots, sizeof(ts__slot) * (size_t)(p->nslots + 1));
  if (!ns) {
    free(part);
    return ts_error_set(TS_ENOMEM, "parallel pass: out of memory");
  }
  p->slots = ns;
  ts__slot *s = &p->slots[p->nslots];
  s->ndev = l->ndev;
  memcpy(s->dev, l->dev, sizeof s->dev);
  s->axis = axis;
  s->group = g;
  s->part = part;
  return p->nslots++;
}

/* ---- redistribution bookkeeping (phase 1) ---- */

int ts__layout_same(const ts_shape *gs, const ts_layout *a, const ts_layout *b, int *equiv) {
  *equiv = 0;
  if (ts_layout_equal(a, b)) {
    *equiv = 1;
    return TS_OK;
  }
  ts_redist_plan pl;
  int rc = ts_redist_plan_make(gs, 4, a, b, &pl);
  if (rc) return rc;
  *equiv = pl.nops == 0;
  return TS_OK;
}

int ts__pass_record(ts_parallel *p, int node, int input, int vi, const ts_redist_plan *plp) {
  const ts_redist_plan pl = *plp;
  int rc;
  for (int k = 0; k < pl.nops; k++) {
    const ts_redist_op *op = &pl.ops[k];
    int ax = op->kind == TS_REDIST_SLICE ? op->slice_axis : op->axis;
    if (op->group > 1 && (rc = ts__slot_for(p, &pl.from, ax)) < 0) return rc;
  }
  if (p->nrd == p->caprd) {
    int nc = p->caprd ? 2 * p->caprd : 32;
    ts__redist_rec *q = realloc(p->rd, sizeof *q * (size_t)nc);
    if (!q) return ts_error_set(TS_ENOMEM, "parallel pass: out of memory");
    p->rd = q;
    p->caprd = nc;
  }
  ts__redist_rec *r = &p->rd[p->nrd++];
  memset(r, 0, sizeof *r);
  r->node = node;
  r->input = input;
  r->value = vi;
  r->gs = pl.orig_shape;
  r->from = pl.from;
  r->to = pl.to;
  r->nops = pl.nops;
  r->cost = pl.total_cost;
  char buf[4096];
  buf[0] = 0;
  size_t n = 0;
  for (int k = 0; k < pl.nops && n < sizeof buf - 200; k++) {
    char ob[256];
    n += (size_t)snprintf(buf + n, sizeof buf - n, "      %s\n", ts_redist_op_str(&pl.ops[k], ob, sizeof ob));
  }
  r->text = strdup(buf);
  p->stats.nredist++;
  p->stats.fwd_comm_bytes += (int64_t)pl.total_cost;
  for (int k = 0; k < pl.nops; k++)
    if (pl.ops[k].kind != TS_REDIST_SLICE && pl.ops[k].group > 1) p->stats.ncollectives++;
  return TS_OK;
}

int ts__pass_need(ts_parallel *p, int vi, const ts_layout *to, int node, int input) {
  ts__vst *v = &p->v[vi];
  int eq;
  int rc = ts__layout_same(&v->gs, &v->L, to, &eq);
  if (rc) goto fail;
  if (eq) return TS_OK;
  for (int k = 0; k < v->nreach; k++) {
    rc = ts__layout_same(&v->gs, &v->reach[k], to, &eq);
    if (rc) goto fail;
    if (eq) return TS_OK;
  }
  if (v->nreach >= TS__MAX_REACH)
    return ts_error_set(TS_EUNSUPPORTED, "parallel pass: value '%s' is needed in more than %d layouts",
                        ts_graph_value_name(p->g, vi) ? ts_graph_value_name(p->g, vi) : "?", TS__MAX_REACH);
  ts_redist_plan pl;
  size_t es = ts_dtype_size(ts_graph_value_dtype(p->g, vi));
  rc = ts_redist_plan_make(&v->gs, es ? es : 4, &v->L, to, &pl);
  if (rc) goto fail;
  v->reach[v->nreach] = *to;
  v->reach_lv[v->nreach] = -1;
  v->nreach++;
  if ((rc = ts__pass_record(p, node, input, vi, &pl))) return rc;
  return TS_OK;
fail: {
  char a[160], b[160], s[96];
  const char *nm = ts_graph_value_name(p->g, vi) ? ts_graph_value_name(p->g, vi) : "value";
  return ts_error_wrap(rc, "parallel pass: converting %s%s from %s to %s for operator '%s'", nm,
                       ts_shape_str(&v->gs, s, sizeof s), ts_layout_str(&v->L, a, sizeof a),
                       ts_layout_str(to, b, sizeof b), node >= 0 ? p->n[node].key : "output");
}
}

/* ---- pending parameters ---- */

/* Lays out every deferred shape op hanging off parameter `root`, in node order. */
static int flush_deferred(ts_parallel *p, int root) {
  /* def_lo/def_hi re-read: laying a node out may defer or flush others (they keep the range a
   * superset of the deferred nodes) */
  for (int j = p->def_lo; j <= p->def_hi && j < p->nfwd; j++) {
    ts__nst *ns = &p->n[j];
    if (!ns->deferred) continue;
    const ts__pnode nd_ = ts__pnode_get(p->g, j), *nd = &nd_;
    if (p->v[nd->in[0]].from_param != root) continue;
    if (p->v[nd->in[0]].pending) continue; /* a sibling branch still waits */
    ns->deferred = 0;
    int rc = ts__pass_node(p, j);
    if (rc) return rc;
  }
  /* narrow the range to the deferred nodes left (at most what was just scanned) */
  while (p->def_lo <= p->def_hi && !p->n[p->def_lo].deferred) p->def_lo++;
  while (p->def_hi >= p->def_lo && !p->n[p->def_hi].deferred) p->def_hi--;
  if (p->def_lo > p->def_hi) p->def_lo = p->nfwd, p->def_hi = -1;
  return TS_OK;
}

static int make_known(ts_parallel *p, int vi, const ts_layout *L, int node) {
  ts__vst *v = &p->v[vi];
  v->L = *L;
  v->known = 1;
  v->pending = 0;
  if (node >= 0 && p->n[node].how == TS__HOW_USER) v->user_node = node;
  return TS_OK;
}

int ts__pass_resolve(ts_parallel *p, int vi, const ts_layout *to, int node) {
  const ts_graph *g = p->g;
  ts__vst *v = &p->v[vi];
  if (!v->pending) return TS_OK;
  int root = v->from_param;
  int pn = ts_graph_value_producer(g, vi);
  if (pn < 0) { /* the parameter itself */
    make_known(p, vi, to, node);
    return flush_deferred(p, vi);
  }
  const ts__pnode nd_ = ts__pnode_get(g, pn), *nd = &nd_;
  int u = nd->in[0];
  ts_layout lu;
  int ok = 1;
  switch (nd->op) {
    case TS_OP_RESHAPE: {
      int bad;
      if (ts__reshape_layout(&v->gs, to, &p->v[u].gs, &lu, &bad)) {
        ok = 0;
        if (u == root && p->v[u].pending) {
          /* hold the parameter in this reshaped form: same memory, a layout that says it */
          p->v[u].gs = v->gs;
          make_known(p, u, to, node);
          return flush_deferred(p, root);
        }
      }
      break;
    }
    case TS_OP_PERMUTE:
      lu = *to;
      for (int k = 0; k < to->ndim; k++) lu.tmap[ts_attr_permute_perm(&nd->a, k)] = to->tmap[k];
      break;
    case TS_OP_CAST: /* element-wise: the same cut */
    case TS_OP_COPY:
      lu = *to;
      break;
    case TS_OP_SPLIT:
    case TS_OP_SLICE:
      lu = *to;
      const int64_t ax = nd->op == TS_OP_SPLIT ? ts_attr_split_axis(&nd->a) : ts_attr_slice_axis(&nd->a);
      if (to->tmap[ax] >= 0 && to->dev[to->tmap[ax]] > 1) ok = 0;
      break;
    default:
      ok = 0;
  }
  if (!ok) { /* cannot carry the cut back: the parameter stays whole */
    ts_layout r;
    ts__layout_repl(&r, p->N, p->v[root].gs.ndim);
    make_known(p, root, &r, -1);
    return flush_deferred(p, root);
  }
  return ts__pass_resolve(p, u, &lu, node);
}

/* ---- phase 1 driver ---- */

/* dataset_cut 0: the cut the user's strategy of the first operator reading an input gives its
 * dim 0 (so the batch arrives where that operator wants it), else the largest divisor of N that
 * divides every input's dim 0 (data parallel). */
static int auto_dataset_cut(ts_parallel *p) {
  const ts_graph *g = p->g;
  int64_t dp = p->N;
  for (int i = 0; i < ts_graph_num_values(g); i++)
    if (ts_graph_value_kind(g, i) == TS_VAL_INPUT && ts_graph_value_producer(g, i) < 0 && (*ts_graph_value_shape(g, i)).ndim > 0)
      dp = ts__gcd64(dp, (*ts_graph_value_shape(g, i)).dims[0]);

  for (int i = 0; i < ts_graph_num_values(g); i++) {
    if (ts_graph_value_kind(g, i) != TS_VAL_INPUT || ts_graph_value_producer(g, i) >= 0 || (*ts_graph_value_shape(g, i)).ndim == 0) continue;
    for (int j = 0; j < ts_graph_num_nodes(g); j++) {
      const ts__pnode nd_ = ts__pnode_get(g, j), *nd = &nd_;
      int k;
      for (k = 0; k < nd->nin; k++)
        if (nd->in[k] == i) break;
      if (k == nd->nin) continue;
      ts_op_strategy st;
      if (ts__pass_user_strategy(p, j, &st) != 1) break;
      /* the strategy input describing graph input k (embedding lists ids first) */
      int si = nd->op == TS_OP_EMBEDDING ? 1 - k : k;
      if (si < 0 || si >= st.ninputs || st.ndim[si] < 1) break;
      int64_t c = st.cuts[si][0];
      if (c >= 1 && p->N % c == 0) return (int)c;
      break;
    }
  }
  ts_error_set(TS_OK, "%s", "");
  return (int)dp;
}

static int input_layout(ts_parallel *p, int vi) {
  const ts__pval x_ = ts__pval_get(p->g, vi), *x = &x_;
  int N = p->N, dp = p->cfg.dataset_cut;
  ts_layout L;
  if (dp <= 0) dp = p->cfg.dataset_cut = auto_dataset_cut(p);
  if (dp < 1 || N % dp) {
    return ts_error_set(TS_ECONFIG, "parallel: the dataset cut %d does not divide the %d devices", dp, N);
  }
  if (dp == 1 || x->shape.ndim == 0) {
    ts__layout_repl(&L, N, x->shape.ndim);
  } else {
    char s[96];
    if (x->shape.dims[0] % dp)
      return ts_error_set(TS_ECONFIG,
                          "parallel: input '%s'%s: its batch dim 0 (%lld) is not divisible by the "
                          "dataset cut %d (the global batch must divide by the data-parallel degree)",
                          x->name ? x->name : "?", ts_shape_str(&x->shape, s, sizeof s),
                          (long long)x->shape.dims[0], dp);
    int dev[2] = {dp, N / dp}, tmap[TS_MAX_DIMS];
    for (int d = 0; d < x->shape.ndim; d++) tmap[d] = -1;
    tmap[0] = 0;
    ts_layout_init(&L, N / dp > 1 ? 2 : 1, dev, x->shape.ndim, tmap, 0);
  }
  return make_known(p, vi, &L, -1);
}

static int check_user_keys(ts_parallel *p) {
  const ts_strategy_set *s = p->cfg.strategies;
  if (!s || p->cfg.allow_unmatched) return TS_OK;
  int n = ts_strategy_set_count(s);
  for (int i = 0; i < n; i++) {
    const char *name = ts_strategy_set_name(s, i);
    int hit = 0;
    for (int j = 0; j < p->nfwd && !hit; j++) {
      if (!p->n[j].key) continue;
      ts_strategy_set *one;
      int rc = ts_strategy_set_create(ts_strategy_set_device_num(s), 0, &one);
      if (rc) return rc;
      ts_op_strategy st;
      rc = ts_strategy_set_put(one, name, ts_strategy_set_at(s, i));
      if (!rc) rc = ts_strategy_set_get(one, p->n[j].key, &st);
      ts_strategy_set_free(one);
      hit = rc == TS_OK;
    }
    if (!hit)
      return ts_error_set(TS_ECONFIG,
                          "parallel: strategy for '%s' matches no operator of the model (operator "
                          "names are scopes joined by '.' and the op, e.g. '%s'; `tessera plan` lists them)",
                          name, p->nfwd && p->n[p->nfwd - 1].key ? p->n[p->nfwd - 1].key : "fc.dense");
  }
  return TS_OK;
}

static int phase1(ts_parallel *p) {
  const ts_graph *g = p->g;
  int rc;
  char **keys = malloc(sizeof(char *) * ((size_t)p->nfwd + 1));
  if (!keys) return ts_error_set(TS_ENOMEM, "parallel pass: out of memory");
  rc = ts__parallel_op_keys(g, p->nfwd, keys);
  for (int j = 0; j < p->nfwd; j++) {
    p->n[j].key = rc ? NULL : keys[j]; /* owned by the node from here */
    p->n[j].sop = -1;
  }
  free(keys);
  if (rc) return rc;
  if ((rc = check_user_keys(p))) return rc;
  for (int i = 0; i < ts_graph_num_values(g); i++) {
    p->v[i].lv = -1;
    p->v[i].user_node = -1;
    p->v[i].from_param = -1;
    p->v[i].gs = (*ts_graph_value_shape(g, i));
    if (ts_graph_value_producer(g, i) >= 0) continue;
    if (ts_graph_value_kind(g, i) == TS_VAL_INPUT) {
      if ((rc = input_layout(p, i))) return rc;
    } else if (ts_graph_value_kind(g, i) == TS_VAL_PARAM || ts_graph_value_kind(g, i) == TS_VAL_STATE) {
      p->v[i].pending = 1;
      p->v[i].from_param = i;
    }
  }
  for (int j = 0; j < p->nfwd; j++) {
    if (p->n[j].visited) continue;
    if ((rc = ts__pass_node(p, j))) return rc;
  }
  /* parameters no operator used: whole */
  for (int i = 0; i < ts_graph_num_values(g); i++)
    if (p->v[i].pending && ts_graph_value_producer(g, i) < 0) {
      ts_layout r;
      ts__layout_repl(&r, p->N, p->v[i].gs.ndim);
      make_known(p, i, &r, -1);
      if ((rc = flush_deferred(p, i))) return rc;
    }
  /* outputs */
  for (int k = 0; k < p->nouts; k++) {
    int vi = p->outs[k];
    if (!p->v[vi].known)
      return ts_error_set(TS_EGRAPH, "parallel pass: output %d (%s) was not laid out", k,
                          ts_graph_value_name(g, vi) ? ts_graph_value_name(g, vi) : "?");
    p->out_L[k] = p->v[vi].L;
    if (p->replicate && p->replicate[k]) {
      ts__layout_repl(&p->out_L[k], p->N, p->v[vi].gs.ndim);
      if ((rc = ts__pass_need(p, vi, &p->out_L[k], -1, k))) return rc;
    }
  }
  return TS_OK;
}

int64_t ts_parallel_comm_bytes(const ts_graph *g, int which) {
  if (!g) return 0;
  double total = 0;
  for (int j = 0; j < ts_graph_num_nodes(g); j++) {
    const ts__pnode nd_ = ts__pnode_get(g, j), *nd = &nd_;
    int halo = nd->op == TS_OP_HALO || nd->op == TS_OP_HALO_BWD;
    if ((nd->op < TS_OP_ALLREDUCE || nd->op > TS_OP_ALLTOALL) && !halo) continue;
    if ((which == 0 && nd->is_backward) || (which == 1 && !nd->is_backward)) continue;
    const ts__pval x_ = ts__pval_get(g, nd->in[0]), *x = &x_;
    double s = (double)ts_shape_numel(&x->shape) * (double)ts_dtype_size(x->dtype);
    double gs = (double)ts_attr_coll_group(&nd->a);
    if (gs <= 1) continue;
    if (halo) { /* the halo rows, at most: the ranks at the ends send one side only */
      const ts_shape *xs = &x->shape;
      int64_t outer_inner = ts_shape_numel(xs) / (xs->dims[ts_attr_halo_dim(&nd->a)] ? xs->dims[ts_attr_halo_dim(&nd->a)] : 1);
      total += (double)(ts_attr_halo_lo(&nd->a) + ts_attr_halo_hi(&nd->a)) * (double)outer_inner * (double)ts_dtype_size(x->dtype);
      continue;
    }
    switch (nd->op) {
      case TS_OP_ALLREDUCE: total += 2 * (gs - 1) / gs * s; break;
      case TS_OP_ALLGATHER: total += (gs - 1) * s; break;
      default: total += (gs - 1) / gs * s; break; /* reduce-scatter, all-to-all */
    }
  }
  return (int64_t)total;
}

/* ---- public API ---- */

void ts_parallel_free(ts_parallel *p) {
  if (!p) return;
  if (p->n)
    for (int j = 0; j < p->nfwd; j++) free(p->n[j].key);
  for (int i = 0; i < p->nrd; i++) free(p->rd[i].text);
  for (int s = 0; s < p->nslots; s++) free(p->slots[s].part);
  free(p->slots);
  free(p->rd);
  free(p->v);
  free(p->n);
  free(p->outs);
  free(p->replicate);
  free(p->out_lv);
  free(p->out_L);
  free(p->param_lp);
  ts_graph_free(p->lg);
  ts_params_free(p->lp);
  ts_strategy_set_free(p->inforce);
  free(p);
}

int ts_parallel_run(const ts_graph *g, const ts_params *gp, const ts_val *outs, int nout,
                    const int *replicate, const ts_parallel_config *cfg, ts_parallel **out) {
  if (out) *out = NULL;
  if (!g || !gp || !cfg || !out || (nout > 0 && !outs) || nout < 0)
    return ts_error_set(TS_EINVAL, "ts_parallel_run: null argument");
  if (ts_graph_status(g))
    return ts_error_set(TS_EGRAPH, "ts_parallel_run: the graph has an error: %s", ts_graph_error(g));
  if (cfg->ndevices < 1 || cfg->rank < 0 || cfg->rank >= cfg->ndevices)
    return ts_error_set(TS_EINVAL, "ts_parallel_run: rank %d of %d devices", cfg->rank, cfg->ndevices);
  if (cfg->strategies && ts_strategy_set_device_num(cfg->strategies) != cfg->ndevices)
    return ts_error_set(TS_ECONFIG, "parallel: the strategies are for %d devices, the job has %d",
                        ts_strategy_set_device_num(cfg->strategies), cfg->ndevices);
  for (int j = 0; j < ts_graph_num_nodes(g); j++)
    if (ts_graph_node_is_backward(g, j))
      return ts_error_set(TS_EINVAL,
                          "ts_parallel_run: the graph already has a backward (node %s); run the pass "
                          "on the forward graph and differentiate its result",
                          ts_graph_node_name(g, j));
  ts_parallel *p = calloc(1, sizeof *p);
  if (!p) return ts_error_set(TS_ENOMEM, "parallel pass: out of memory");
  p->g = g;
  p->gp = gp;
  p->cfg = *cfg;
  p->N = cfg->ndevices;
  p->rank = cfg->rank;
  p->nfwd = ts_graph_num_nodes(g);
  p->def_lo = p->nfwd, p->def_hi = -1;
  p->nouts = nout;
  p->v = calloc((size_t)ts_graph_num_values(g) + 1, sizeof *p->v);
  p->n = calloc((size_t)ts_graph_num_nodes(g) + 1, sizeof *p->n);
  p->outs = calloc((size_t)nout + 1, sizeof(int));
  p->replicate = calloc((size_t)nout + 1, sizeof(int));
  p->out_lv = calloc((size_t)nout + 1, sizeof(int));
  p->out_L = calloc((size_t)nout + 1, sizeof(ts_layout));
  int rc = TS_OK;
  if (!p->v || !p->n || !p->outs || !p->replicate || !p->out_lv || !p->out_L) {
    rc = ts_error_set(TS_ENOMEM, "parallel pass: out of memory");
    goto fail;
  }
  for (int k = 0; k < nout; k++) {
    int i = ts_graph_value_index(g, outs[k]);
    if (i < 0) {
      rc = ts_error_set(TS_EINVAL, "ts_parallel_run: output %d is not a value of the graph", k);
      goto fail;
    }
    p->outs[k] = i;
    p->replicate[k] = replicate ? replicate[k] : 0;
  }
  if ((rc = phase1(p))) goto fail;
  if ((rc = ts__pass_emit(p))) goto fail;
  *out = p;
  return TS_OK;
fail:
  ts_parallel_free(p);
  return rc;
}

ts_graph *ts_parallel_graph(ts_parallel *p) { return p ? p->lg : NULL; }
ts_params *ts_parallel_params(ts_parallel *p) { return p ? p->lp : NULL; }

static int gidx(const ts_parallel *p, ts_val v) {
  if (!p || v < 0) return -1;
  return ts_graph_value_index(p->g, v);
}

ts_val ts_parallel_value(const ts_parallel *p, ts_val v) {
  int i = gidx(p, v);
  if (i < 0) return TS_NONE;
  for (int k = 0; k < p->nouts; k++)
    if (p->outs[k] == i && p->out_lv[k] >= 0) return ts_graph_value(p->lg, p->out_lv[k]);
  return p->v[i].lv >= 0 ? ts_graph_value(p->lg, p->v[i].lv) : TS_NONE;
}

const ts_layout *ts_parallel_layout(const ts_parallel *p, ts_val v, ts_shape *gshape) {
  int i = gidx(p, v);
  if (i < 0 || !p->v[i].known) return NULL;
  if (gshape) *gshape = p->v[i].gs;
  for (int k = 0; k < p->nouts; k++)
    if (p->outs[k] == i) return &p->out_L[k];
  return &p->v[i].L;
}

int ts_parallel_input_piece(const ts_parallel *p, ts_val v, int *parts, int *index) {
  int i = gidx(p, v);
  if (i < 0 || ts_graph_value_kind(p->g, i) != TS_VAL_INPUT)
    return ts_error_set(TS_EINVAL, "ts_parallel_input_piece: not an input of the graph");
  const ts_layout *L = &p->v[i].L;
  *parts = 1;
  *index = 0;
  if (L->ndim > 0 && L->tmap[0] >= 0) {
    int coords[TS_LAYOUT_MAX_AXES];
    ts_layout_rank_coords(L, p->rank, coords);
    *parts = L->dev[L->tmap[0]];
    *index = coords[L->tmap[0]];
  }
  return TS_OK;
}

float ts_parallel_loss_seed(const ts_parallel *p, ts_val v) {
  const ts_layout *L = ts_parallel_layout(p, v, NULL);
  if (!L) return 1.0f;
  int parts = 1;
  for (int a = 0; a < L->ndev; a++)
    if (L->partial & (1u << a)) parts *= L->dev[a];
  for (int d = 0; d < L->ndim; d++)
    if (L->tmap[d] >= 0) parts *= L->dev[L->tmap[d]];
  return (float)parts / (float)p->N;
}

int ts_parallel_num_slots(const ts_parallel *p) { return p ? p->nslots : 0; }

int ts_parallel_slot(const ts_parallel *p, int s, int *ndev, int *dev, int *axis) {
  if (!p || s < 0 || s >= p->nslots)
    return ts_error_set(TS_EINVAL, "ts_parallel_slot: slot %d outside 0..%d", s, p ? p->nslots - 1 : -1);
  *ndev = p->slots[s].ndev;
  memcpy(dev, p->slots[s].dev, sizeof(int) * (size_t)p->slots[s].ndev);
  *axis = p->slots[s].axis;
  return TS_OK;
}

int ts_parallel_slot_color(const ts_parallel *p, int s) {
  if (!p || s < 0 || s >= p->nslots) return ts_error_set(TS_EINVAL, "parallel: no communicator slot %d", s);
  return p->slots[s].part[p->rank];
}

int ts_parallel_ndevices(const ts_parallel *p) { return p ? p->N : 0; }
int ts_parallel_rank(const ts_parallel *p) { return p ? p->rank : -1; }

const ts_strategy_set *ts_parallel_strategies(const ts_parallel *p) { return p ? p->inforce : NULL; }

void ts_parallel_get_stats(const ts_parallel *p, ts_parallel_stats *st) {
  memset(st, 0, sizeof *st);
  if (p) *st = p->stats;
}

static const char *how_name(ts__how h) {
  static const char *const n[] = {"-", "user", "follow", "data parallel", "replicated", "view", "no rule (replicated)"};
  return (unsigned)h < sizeof n / sizeof n[0] ? n[h] : "?";
}

#define OUT(...)                                                              \
  do {                                                                        \
    int w_ = snprintf(buf ? buf + (n < cap ? n : cap) : NULL,                 \
                      n < cap ? cap - n : 0, __VA_ARGS__);                    \
    if (w_ > 0) n += (size_t)w_;                                              \
  } while (0)

size_t ts_parallel_report(const ts_parallel *p, char *buf, size_t cap) {
  size_t n = 0;
  if (buf && cap) buf[0] = 0;
  if (!p) return 0;
  const ts_graph *g = p->g;
  OUT("operators (%d devices; strategy source: user, follow = keeps its input's cuts, data parallel, "
      "replicated):\n", p->N);
  for (int j = 0; j < p->nfwd; j++) {
    const ts__nst *ns = &p->n[j];
    const ts__pnode nd_ = ts__pnode_get(g, j), *nd = &nd_;
    char st[256] = "", l[256];
    if (ns->sop >= 0) ts_op_strategy_str(&ns->st, st, sizeof st);
    OUT("  %-44s %-14s %-14s %s", ns->key, ts_op_name(nd->op), how_name(ns->how), st);
    if (nd->nout > 0 && p->v[nd->out[0]].known) {
      char s[96];
      OUT("  -> %s %s%s", ts_shape_str(&p->v[nd->out[0]].gs, s, sizeof s),
          ts_layout_str(&p->v[nd->out[0]].L, l, sizeof l), ns->seq_cut ? (ns->bias_after ? " (reduce-scattered onto the sequence, bias added after)"
                                                  : " (reduce-scattered onto the sequence)")
                   : ns->bias_after ? " (bias added after the reduction)" : "");
      int td = nd->op == TS_OP_ATTENTION && ts_attr_attention_layout(&nd->a) == 1 ? 1 : 2;
      if (nd->op == TS_OP_ATTENTION && ns->req[0].tmap[td] >= 0 && ns->req[0].dev[ns->req[0].tmap[td]] > 1)
        OUT(" (ring attention over the sequence cut: key/value blocks passed around %d ranks)",
            (int)ns->req[0].dev[ns->req[0].tmap[td]]);
    }
    OUT("\n");
  }
  OUT("parameters (global shape, layout, bytes on this rank / whole):\n");
  for (int i = 0; i < ts_graph_num_values(g); i++) {
    if (ts_graph_value_producer(g, i) >= 0 || (ts_graph_value_kind(g, i) != TS_VAL_PARAM && ts_graph_value_kind(g, i) != TS_VAL_STATE)) continue;
    const ts__vst *v = &p->v[i];
    char s[96], l[256];
    ts_shape loc;
    ts_layout_local_shape(&v->L, &v->gs, &loc);
    OUT("  %-44s %-16s %-34s %lld / %lld\n", ts_graph_value_name(g, i), ts_shape_str(&v->gs, s, sizeof s),
        ts_layout_str(&v->L, l, sizeof l), (long long)ts_shape_numel(&loc) * 4,
        (long long)ts_shape_numel(&v->gs) * 4);
  }
  OUT("redistributions inserted (forward; the backward runs their adjoints):\n");
  for (int i = 0; i < p->nrd; i++) {
    const ts__redist_rec *r = &p->rd[i];
    char s[96], a[256], b[256];
    const char *vn = ts_graph_value_name(g, r->value);
    char pn[64] = "";
    if (!vn && ts_graph_value_producer(g, r->value) >= 0) {
      snprintf(pn, sizeof pn, "output of");
      vn = p->n[ts_graph_value_producer(g, r->value)].key;
    }
    if (r->input == -2) { /* inside the node: partial sums reduced before its bias */
      snprintf(pn, sizeof pn, "partial sums of");
      vn = p->n[r->node].key;
    }
    OUT("  %s %s%s for %s: %s -> %s, %d op(s), %.0f bytes per rank\n%s", pn, vn ? vn : "?",
        ts_shape_str(&r->gs, s, sizeof s),
        r->input == -2 ? (p->n[r->node].seq_cut ? "the sequence cut" : "its bias")
                       : r->node >= 0 ? p->n[r->node].key : "the output",
        ts_layout_str(&r->from, a, sizeof a), ts_layout_str(&r->to, b, sizeof b), r->nops, r->cost,
        r->text ? r->text : "");
  }
  OUT("communicator groups: %d\n", p->nslots);
  for (int s = 0; s < p->nslots; s++) {
    const ts__slot *sl = &p->slots[s];
    OUT("  slot %d: dev(", s);
    for (int a = 0; a < sl->ndev; a++) OUT("%s%d", a ? "," : "", sl->dev[a]);
    OUT(") axis %d, groups of %d\n", sl->axis, sl->group);
  }
  return n;
}
