/* The cost graph of the per-operator strategy search (src/planner/search.h): operators with a
 * sharding rule and their candidate strategies priced on a cluster, and the redistribution cost
 * matrices between them.
 *
 * How the graph is read (the same way the parallel pass reads it, through src/parallel/pass_rules.h):
 *  - every op with a sharding rule is a node; its candidates come from its LOOP AXES (the
 *    dimensions its rule cuts: matmul m,k,n; dense the leading dims of x, k and o; conv N and O;
 *    ...), every assignment of divisors of D to them whose product divides D, kept when the rule
 *    accepts it (the pass's layouts: repeat axis last);
 *  - ops without a rule that follow their input (reshape, permute, split, slice, concat, cast,
 *    copy, scale, dropout) are not nodes: a value reaching a node through a chain of them is
 *    carried through the chain exactly as the pass carries it (ts__pass_view_layout, paying the
 *    conversions the chain itself needs, e.g. a split axis gathered), so the edge producer ->
 *    consumer prices the chain too. Concat's other inputs are not priced (none of the zoo's models
 *    concatenates);
 *  - ops without a rule that do not follow (they run replicated) are sinks: the producer pays the
 *    conversion of its output to replicated; a node reading their output (or a constant) pays the
 *    conversion from replicated;
 *  - a parameter takes the layout its first node asks for (that node pays its memory and its
 *    gradient reduction); a later node reading the same parameter value directly must cut it the
 *    same way (the pass refuses two strategies cutting a shared parameter differently: GPT's tied
 *    embedding and head): an edge with INFINITY for incompatible pairs; one reading it through
 *    views of the same shape pays the conversion (forward and gradient); views of another shape
 *    (GPT's q, k and v pieces of the fused weight are the same shape, so this is rare) are not
 *    priced;
 *  - graph inputs are cut on their batch by the first node reading the first input (the pass's
 *    automatic dataset cut): that node's candidate fixes the input layout, so the other readers of
 *    inputs get an edge to it (forward only: inputs need no gradient).
 * Costs are seconds per step: forward + backward (twice the forward's conversions, as every
 * collective's adjoint moves the same bytes; local slices are free both ways). Values the same
 * conversion serves for several consumers are priced once per consumer (the pass converts once). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../parallel/pass_rules.h"
#include "parallel/parallel.h"
#include "planner/search.h"
#include "search_impl.h"
#include "../base/text.h"


/* ---- small helpers ---- */

static double vbytes_local(const ts_layout *l, const ts_shape *gs, size_t es) {
  ts_shape loc;
  if (ts_layout_local_shape(l, gs, &loc)) return (double)ts_shape_numel(gs) * (double)es;
  return (double)ts_shape_numel(&loc) * (double)es;
}

/* 1 if the ranks of one group over the axes in `mask` of l span several nodes. */
static int spans_axes(const ts_cluster *c, const ts_layout *l, unsigned mask) {
  long long extent = 1, stride = 1;
  for (int a = l->ndev - 1; a >= 0; a--) {
    if (mask & (1u << a)) extent += (long long)(l->dev[a] - 1) * stride;
    stride *= l->dev[a];
  }
  return extent > c->devices_per_node;
}

/* A gradient reduction: bucketed with the others (dist/buckets.c), so its latency is paid per
 * bucket, not per parameter: the bandwidth term only. */
static double grad_reduce_axes(const ts_cluster *c, const ts_layout *l, unsigned mask, double bytes);

static double allreduce_axes(const ts_cluster *c, const ts_layout *l, unsigned mask, double bytes) {
  int g = 1;
  for (int a = 0; a < l->ndev; a++)
    if (mask & (1u << a)) g *= l->dev[a];
  if (g < 2) return 0;
  return ts_cluster_coll_time(c, TS_COST_ALLREDUCE, g, spans_axes(c, l, mask), bytes);
}

static double grad_reduce_axes(const ts_cluster *c, const ts_layout *l, unsigned mask, double bytes) {
  double t = allreduce_axes(c, l, mask, bytes) - allreduce_axes(c, l, mask, 0);
  return t > 0 ? t : 0;
}

double ts__cg_redist_time(const ts_cluster *c, const ts_shape *gs, size_t es, const ts_layout *from,
                          const ts_layout *to) {
  if (ts_layout_equal(from, to)) return 0;
  ts_redist_plan pl;
  if (ts_redist_plan_make(gs, es ? es : 4, from, to, &pl)) {
    ts_error_set(TS_OK, "%s", "");
    return INFINITY;
  }
  double t = 0;
  for (int k = 0; k < pl.nops; k++) {
    const ts_redist_op *op = &pl.ops[k];
    ts_cost_coll kind;
    double b = (double)op->in_bytes;
    switch (op->kind) {
      case TS_REDIST_SLICE: continue;
      case TS_REDIST_ALLREDUCE: kind = TS_COST_ALLREDUCE; break;
      case TS_REDIST_REDUCE_SCATTER: kind = TS_COST_REDUCE_SCATTER; break;
      case TS_REDIST_ALLTOALL: kind = TS_COST_ALLTOALL; break;
      default: kind = TS_COST_ALLGATHER, b = (double)op->out_bytes; break;
    }
    t += ts_cluster_coll_time(c, kind, op->group, spans_axes(c, &pl.from, 1u << op->axis), b);
  }
  return t;
}

/* ---- a memo of conversion times (the same pairs of layouts recur across candidates and edges) ---- */

typedef struct {
  int64_t dims[TS_MAX_DIMS];
  int ndim, es;
  int ndev[2], dev[2][TS_LAYOUT_MAX_AXES], tmap[2][TS_MAX_DIMS];
  unsigned partial[2];
} memo_key;

struct ts__cg_memo {
  size_t cap, n;
  memo_key *k;
  double *v;
  unsigned char *used;
};

static void make_key(memo_key *k, const ts_shape *gs, size_t es, const ts_layout *a, const ts_layout *b) {
  memset(k, 0, sizeof *k);
  k->ndim = gs->ndim;
  k->es = (int)es;
  for (int d = 0; d < gs->ndim && d < TS_MAX_DIMS; d++) k->dims[d] = gs->dims[d];
  const ts_layout *l[2] = {a, b};
  for (int t = 0; t < 2; t++) {
    k->ndev[t] = l[t]->ndev;
    for (int x = 0; x < l[t]->ndev && x < TS_LAYOUT_MAX_AXES; x++) k->dev[t][x] = l[t]->dev[x];
    for (int d = 0; d < l[t]->ndim && d < TS_MAX_DIMS; d++) k->tmap[t][d] = l[t]->tmap[d];
    k->partial[t] = l[t]->partial;
  }
}

static uint64_t hash_key(const memo_key *k) {
  return ts__fnv1a(TS__FNV1A_BASIS, k, sizeof *k);
}

static int memo_grow(ts__cg_memo *m) {
  size_t nc = m->cap ? 2 * m->cap : 4096;
  memo_key *k = malloc(sizeof *k * nc);
  double *v = malloc(sizeof *v * nc);
  unsigned char *u = calloc(nc, 1);
  if (!k || !v || !u) {
    free(k), free(v), free(u);
    return -1;
  }
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->used[i]) continue;
    size_t j = (size_t)(hash_key(&m->k[i]) & (nc - 1));
    while (u[j]) j = (j + 1) & (nc - 1);
    u[j] = 1, k[j] = m->k[i], v[j] = m->v[i];
  }
  free(m->k), free(m->v), free(m->used);
  m->k = k, m->v = v, m->used = u, m->cap = nc;
  return 0;
}

static void memo_free(ts__cg_memo *m) {
  if (!m) return;
  free(m->k), free(m->v), free(m->used);
  free(m);
}

/* ts__cg_redist_time through the memo (computed directly when it cannot grow). */
static double rt(ts_costgraph *cg, const ts_shape *gs, size_t es, const ts_layout *from, const ts_layout *to) {
  if (ts_layout_equal(from, to)) return 0;
  ts__cg_memo *m = cg->memo;
  if (!m || (2 * (m->n + 1) > m->cap && memo_grow(m))) return ts__cg_redist_time(&cg->cl, gs, es, from, to);
  memo_key k;
  make_key(&k, gs, es, from, to);
  size_t j = (size_t)(hash_key(&k) & (m->cap - 1));
  while (m->used[j]) {
    if (!memcmp(&m->k[j], &k, sizeof k)) return m->v[j];
    j = (j + 1) & (m->cap - 1);
  }
  double t = ts__cg_redist_time(&cg->cl, gs, es, from, to);
  m->used[j] = 1, m->k[j] = k, m->v[j] = t, m->n++;
  return t;
}

static int is_gemm_sop(int sop) {
  return sop == TS_SHARD_MATMUL || sop == TS_SHARD_DENSE || sop == TS_SHARD_CONV2D || sop == TS_SHARD_ATTENTION;
}

/* The loop axes of a rule op: ax[k][d] = the loop axis cutting dim d of rule input k, or -1. */
int ts__cg_loop_axes(int sop, const ts_shape *sh, int nin, const int *attrs, int ax[TS_STRATEGY_MAX_INPUTS][TS_MAX_DIMS]) {
  for (int k = 0; k < TS_STRATEGY_MAX_INPUTS; k++)
    for (int d = 0; d < TS_MAX_DIMS; d++) ax[k][d] = -1;
  int nd = nin > 0 ? sh[0].ndim : 0;
  switch (sop) {
    case TS_SHARD_MATMUL:
      ax[0][0] = 0, ax[0][1] = 1, ax[1][0] = 1, ax[1][1] = 2;
      return 3;
    case TS_SHARD_DENSE:
      for (int i = 0; i < nd; i++) ax[0][i] = i;
      ax[1][0] = nd, ax[1][1] = nd - 1;
      return nd + 1;
    case TS_SHARD_BINARY: {
      int on = sh[0].ndim > sh[1].ndim ? sh[0].ndim : sh[1].ndim;
      for (int t = 0; t < 2; t++)
        for (int d = 0; d < sh[t].ndim; d++) ax[t][d] = sh[t].dims[d] == 1 ? -1 : d + on - sh[t].ndim;
      return on;
    }
    case TS_SHARD_ELEMENTWISE:
    case TS_SHARD_REDUCE:
    case TS_SHARD_SOFTMAX:
    case TS_SHARD_LAYERNORM:
      for (int i = 0; i < nd; i++) ax[0][i] = i;
      return nd;
    case TS_SHARD_EMBEDDING:
      for (int i = 0; i < nd; i++) ax[0][i] = i;
      ax[1][0] = nd, ax[1][1] = nd + 1;
      return nd + 2;
    case TS_SHARD_CONV2D: /* N, C, O, H, W */
      ax[0][0] = 0, ax[0][1] = 1, ax[0][2] = 3, ax[0][3] = 4;
      ax[1][0] = 2, ax[1][1] = 1;
      return 5;
    case TS_SHARD_BATCHNORM: /* N, C, spatial dims */
      for (int i = 0; i < nd; i++) ax[0][i] = i;
      for (int k = 1; k < nin; k++) ax[k][0] = 1;
      return nd;
    case TS_SHARD_ATTENTION: /* B, H (dim 1, or 2 in the (B,T,H,D) layout: attrs {layout}) */
      for (int t = 0; t < nin; t++) ax[t][0] = 0, ax[t][attrs && attrs[0] == 1 ? 2 : 1] = 1;
      return 2;
    case TS_SHARD_SOFTMAX_CE:
      ax[0][0] = 0, ax[0][1] = 1, ax[1][0] = 0;
      return 2;
    default: /* pool: N, C, and H, W (only a global average accepts their cuts) */
      for (int i = 0; i < nd; i++) ax[0][i] = i;
      return nd;
  }
}

/* ---- building ---- */

static void free_op(ts__cg_op *o) {
  free(o->key);
  free(o->cand);
  free(o->req);
  free(o->out);
  free(o->cost);
  free(o->mem);
}

void ts_costgraph_free(ts_costgraph *cg) {
  if (!cg) return;
  for (int i = 0; i < cg->nops; i++) free_op(&cg->ops[i]);
  for (int e = 0; e < cg->nedges; e++) free(cg->edges[e].m);
  free(cg->ops);
  free(cg->edges);
  free(cg->op_of_node);
  free(cg->chain);
  free(cg->chain_rev);
  memo_free(cg->memo);
  free(cg);
}

typedef struct {
  ts_costgraph *cg;
  ts__cg_op *o;
  int naxes;
  int ax[TS_STRATEGY_MAX_INPUTS][TS_MAX_DIMS];
  int divs[64], ndivs;
  int64_t cut[TS_MAX_DIMS * 2];
  int cap;
} enum_ctx;

static int add_candidate(enum_ctx *E, int64_t prod) {
  ts__cg_op *o = E->o;
  ts_costgraph *cg = E->cg;
  int D = cg->cfg.ndevices;
  if (cg->cfg.full_devices && prod != D) return TS_OK;
  if (o->ncand >= E->cap) return TS_OK;
  ts_op_strategy st;
  memset(&st, 0, sizeof st);
  st.ninputs = o->m.nin;
  for (int k = 0; k < o->m.nin; k++) {
    st.ndim[k] = o->shapes[k].ndim;
    for (int d = 0; d < o->shapes[k].ndim; d++) st.cuts[k][d] = E->ax[k][d] >= 0 ? E->cut[E->ax[k][d]] : 1;
  }
  if (cg->cfg.batch_cut > 0 && o->dataset_input >= 0) {
    const ts_op_strategy *s = &st;
    if (s->ndim[o->dataset_input] < 1 || s->cuts[o->dataset_input][0] != cg->cfg.batch_cut) return TS_OK;
  }
  ts_layout req[TS_STRATEGY_MAX_INPUTS], out;
  if (ts__pass_rule_layouts(o->m.sop, &st, D, o->shapes, o->m.nin, o->m.has_attrs ? o->m.attrs : NULL, req, &out)) {
    ts_error_set(TS_OK, "%s", "");
    return TS_OK;
  }
  int c = o->ncand++;
  o->cand[c] = st;
  for (int k = 0; k < o->m.nin; k++) o->req[c * TS_STRATEGY_MAX_INPUTS + k] = req[k];
  o->out[c] = out;
  o->cost[c] = (double)prod; /* the product of the cuts, until priced */
  return TS_OK;
}

static int enum_axes(enum_ctx *E, int a, int64_t prod) {
  if (a == E->naxes) return add_candidate(E, prod);
  int D = E->cg->cfg.ndevices;
  for (int i = 0; i < E->ndivs; i++) {
    int64_t c = E->divs[i];
    if (D % (prod * c)) continue;
    int ok = 1;
    for (int k = 0; k < E->o->m.nin && ok; k++)
      for (int d = 0; d < E->o->shapes[k].ndim; d++)
        if (E->ax[k][d] == a && E->o->shapes[k].dims[d] % c) ok = 0;
    if (!ok) continue;
    E->cut[a] = c;
    int rc = enum_axes(E, a + 1, prod * c);
    if (rc) return rc;
  }
  return TS_OK;
}

/* Traces value v back through follow ops; returns the origin value and the chain (forward order)
 * in cg->chain (scratch of the graph's node count: a chain of any length; the caller reads it
 * before the next trace). */
static int trace(const ts_costgraph *cg, int v, int *nchain) {
  const ts_graph *g = cg->g;
  int n = 0, *rev = cg->chain_rev, *chain = cg->chain, nn = ts_graph_num_nodes(g);
  for (;;) {
    int p = ts_graph_value_producer(g, v);
    if (p < 0 || cg->op_of_node[p] >= 0 || !ts__pass_is_follow_op(ts_graph_node_op(g, p)) || n == nn) break;
    rev[n++] = p;
    v = ts_graph_node_input(g, p, 0);
  }
  for (int i = 0; i < n; i++) chain[i] = rev[n - 1 - i];
  *nchain = n;
  return v;
}

/* Carries layout L0 of the chain's first input through the chain: the layout at its end and the
 * conversions the chain itself needs. */
static double chain_apply(ts_costgraph *cg, const int *chain, int n, const ts_layout *L0, ts_layout *Lend) {
  const ts_graph *g = cg->g;
  ts_layout L = *L0;
  double t = 0;
  for (int i = 0; i < n; i++) {
    int x = ts_graph_node_input(g, chain[i], 0);
    const ts_shape *xs = ts_graph_value_shape(g, x);
    ts_layout req, out;
    ts__pass_view_layout(g, chain[i], xs, &L, &req, &out);
    t += rt(cg, xs, ts_dtype_size(ts_graph_value_dtype(g, x)), &L, &req);
    L = out;
  }
  *Lend = L;
  return t;
}

static void repl_layout(ts_layout *l, int D, int ndim) {
  int dev[1] = {D};
  ts_layout_replicated(l, 1, dev, ndim);
}

static ts__cg_edge *new_edge(ts_costgraph *cg, int u, int v) {
  if (cg->nedges == cg->capedges) {
    int nc = cg->capedges ? 2 * cg->capedges : 64;
    ts__cg_edge *q = realloc(cg->edges, sizeof *q * (size_t)nc);
    if (!q) return NULL;
    cg->edges = q;
    cg->capedges = nc;
  }
  ts__cg_edge *e = &cg->edges[cg->nedges];
  e->u = u, e->v = v;
  e->m = calloc((size_t)cg->ops[u].ncand * (size_t)cg->ops[v].ncand, sizeof(double));
  if (!e->m) return NULL;
  cg->nedges++;
  return e;
}

/* The layout graph inputs have when the dataset cut is dc. */
static void input_layout(ts_layout *l, int D, int dc, int ndim) {
  if (dc <= 1 || ndim == 0) {
    repl_layout(l, D, ndim);
    return;
  }
  int dev[2] = {dc, D / dc}, tmap[TS_MAX_DIMS];
  for (int d = 0; d < ndim; d++) tmap[d] = -1;
  tmap[0] = 0;
  ts_layout_init(l, D / dc > 1 ? 2 : 1, dev, ndim, tmap, 0);
  for (int a = 0; a < l->ndev; a++)
    if (l->dev[a] == 1)
      for (int d = 0; d < ndim; d++)
        if (l->tmap[d] == a) l->tmap[d] = -1;
}

static int dataset_cut_of(const ts_costgraph *cg, int c) {
  if (cg->dataset_op < 0) return cg->dataset_default;
  const ts__cg_op *o = &cg->ops[cg->dataset_op];
  const ts_op_strategy *s = &o->cand[c];
  int si = o->dataset_input;
  if (si < 0 || si >= s->ninputs || s->ndim[si] < 1) return cg->dataset_default;
  int64_t v = s->cuts[si][0];
  return v >= 1 && cg->cfg.ndevices % v == 0 ? (int)v : cg->dataset_default;
}

/* The dataset op: the first node reading the first input (in value order) whose first reader is a
 * rule op (auto_dataset_cut in the pass). */
static void find_dataset_op(ts_costgraph *cg) {
  const ts_graph *g = cg->g;
  int64_t dp = cg->cfg.ndevices;
  cg->dataset_op = -1;
  for (int i = 0; i < ts_graph_num_values(g); i++)
    if (ts_graph_value_kind(g, i) == TS_VAL_INPUT && ts_graph_value_producer(g, i) < 0 && ts_graph_value_shape(g, i)->ndim > 0) {
      int64_t a = dp, b = ts_graph_value_shape(g, i)->dims[0];
      while (b) {
        int64_t t = a % b;
        a = b, b = t;
      }
      dp = a;
    }
  cg->dataset_default = (int)dp;
  for (int i = 0; i < ts_graph_num_values(g) && cg->dataset_op < 0; i++) {
    if (ts_graph_value_kind(g, i) != TS_VAL_INPUT || ts_graph_value_producer(g, i) >= 0 || ts_graph_value_shape(g, i)->ndim == 0)
      continue;
    for (int j = 0; j < ts_graph_num_nodes(g); j++) {
      int k, nin = ts_graph_node_num_inputs(g, j);
      for (k = 0; k < nin; k++)
        if (ts_graph_node_input(g, j, k) == i) break;
      if (k == nin) continue;
      int oi = cg->op_of_node[j];
      if (oi < 0) break;
      ts__cg_op *o = &cg->ops[oi];
      int si = -1;
      for (int r = 0; r < o->m.nin; r++)
        if (o->m.gin[r] == k) si = r;
      if (si < 0 || o->shapes[si].ndim < 1) break;
      cg->dataset_op = oi;
      o->dataset_input = si;
      break;
    }
  }
}

static int price_op(ts_costgraph *cg, int i) {
  ts__cg_op *o = &cg->ops[i];
  const ts_graph *g = cg->g;
  const ts_cluster *c = &cg->cl;
  int node = o->node;
  ts_op op = ts_graph_node_op(g, node);
  int outv = ts_graph_node_output(g, node, 0);
  const ts_shape *os = ts_graph_value_shape(g, outv);
  size_t oes = ts_dtype_size(ts_graph_value_dtype(g, outv));
  double flops = ts_graph_node_flops(g, node);
  int has_bias = (op == TS_OP_DENSE || op == TS_OP_CONV2D) && ts_graph_node_num_inputs(g, node) > 2;
  for (int s = 0; s < o->ncand; s++) {
    double prod = o->cost[s];
    const ts_layout *req = &o->req[s * TS_STRATEGY_MAX_INPUTS];
    ts_layout out = o->out[s];
    double t = 2 * c->op_overhead, mem = 0;
    if (is_gemm_sop(o->m.sop)) {
      t += 3 * flops / prod / (c->peak_flops_f32 * ts_cluster_efficiency(c, op));
    } else {
      double b = vbytes_local(&out, os, oes);
      for (int k = 0; k < o->m.nin; k++)
        b += vbytes_local(&req[k], &o->shapes[k], ts_dtype_size(ts_graph_value_dtype(g, ts_graph_node_input(g, node, o->m.gin[k]))));
      t += 2 * b / c->mem_bandwidth;
    }
    if (has_bias && out.partial) { /* the partial sums reduced before the bias, and the adjoint */
      t += 2 * allreduce_axes(c, &out, out.partial, vbytes_local(&out, os, oes));
      out.partial = 0;
      o->out[s] = out;
    }
    if (o->m.sop == TS_SHARD_SOFTMAX_CE && req[0].tmap[1] >= 0) { /* max, sum of exps, target logit */
      double rows = (double)o->shapes[0].dims[0] / (double)o->cand[s].cuts[0][0];
      t += 3 * allreduce_axes(c, &req[0], 1u << req[0].tmap[1], rows * 4);
    }
    if (o->m.sop == TS_SHARD_BATCHNORM && ts_graph_training(g)) { /* SyncBN over the batch and spatial cuts */
      unsigned mask = 0;
      for (int d = 0; d < req[0].ndim; d++)
        if (d != 1 && req[0].tmap[d] >= 0) mask |= 1u << req[0].tmap[d];
      double ch = (double)o->shapes[0].dims[1] / (double)o->cand[s].cuts[0][1];
      if (mask) t += 2 * allreduce_axes(c, &req[0], mask, 2 * ch * 4);
    }
    if (o->m.sop == TS_SHARD_CONV2D) /* a spatial cut: the halo rows from both neighbours, and back */
      for (int k = 0; k < 2; k++) {
        int64_t cut = o->cand[s].cuts[0][2 + k];
        int lo = 0, hi = 0, st = o->m.has_attrs ? o->m.attrs[k] : 1, pad = o->m.has_attrs ? o->m.attrs[2 + k] : 0;
        if (cut <= 1 || ts_conv2d_halo(o->shapes[0].dims[2 + k], o->shapes[1].dims[2 + k], st, pad, cut, &lo, &hi)) {
          ts_error_set(TS_OK, "%s", "");
          continue;
        }
        ts_shape loc;
        if (ts_layout_local_shape(&req[0], &o->shapes[0], &loc)) continue;
        double row = (double)ts_shape_numel(&loc) / (double)loc.dims[2 + k] * 4;
        int span = spans_axes(c, &req[0], 1u << req[0].tmap[2 + k]);
        t += 2 * (ts_cluster_coll_time(c, TS_COST_P2P, 2, span, lo * row) + ts_cluster_coll_time(c, TS_COST_P2P, 2, span, hi * row));
      }
    mem += vbytes_local(&out, os, oes); /* the output, kept for the backward */
    /* parameters this op owns: slices, gradients, optimizer state; gradient reduction over the
     * ranks holding the same slice */
    for (int k = 0; k < o->m.nin; k++) {
      if (!(o->owns & (1u << k))) continue;
      const ts_layout *l = &req[k];
      double b = vbytes_local(l, &o->shapes[k], 4);
      unsigned rep = 0;
      for (int a = 0; a < l->ndev; a++) rep |= 1u << a;
      for (int d = 0; d < l->ndim; d++)
        if (l->tmap[d] >= 0) rep &= ~(1u << l->tmap[d]);
      t += grad_reduce_axes(c, l, rep, b);
      mem += b * (2 + cg->cfg.opt_slots);
    }
    if (has_bias && o->owns_bias) {
      const ts_layout *w = &req[1];
      int tm[1] = {w->tmap[0]};
      ts_layout bl;
      ts_layout_init(&bl, w->ndev, w->dev, 1, tm, 0);
      const ts_shape *bs = ts_graph_value_shape(g, ts_graph_node_input(g, node, 2));
      double b = vbytes_local(&bl, bs, 4);
      unsigned rep = 0;
      for (int a = 0; a < bl.ndev; a++)
        if (a != bl.tmap[0]) rep |= 1u << a;
      t += grad_reduce_axes(c, &bl, rep, b);
      mem += b * (2 + cg->cfg.opt_slots);
    }
    o->cost[s] = t;
    o->mem[s] = mem;
  }
  return TS_OK;
}

/* Drops the candidates whose own memory is over the limit (keeping the smallest if none fits). */
static void prune_memory(ts_costgraph *cg, ts__cg_op *o) {
  double lim = cg->cfg.mem_limit;
  if (lim <= 0 || o->ncand == 0) return;
  int best = 0, n = 0;
  for (int s = 0; s < o->ncand; s++)
    if (o->mem[s] < o->mem[best]) best = s;
  for (int s = 0; s < o->ncand; s++) {
    if (o->mem[s] > lim && s != best) continue;
    if (o->mem[best] > lim && s != best) continue;
    o->cand[n] = o->cand[s];
    memmove(&o->req[n * TS_STRATEGY_MAX_INPUTS], &o->req[s * TS_STRATEGY_MAX_INPUTS], sizeof(ts_layout) * TS_STRATEGY_MAX_INPUTS);
    o->out[n] = o->out[s];
    o->cost[n] = o->cost[s];
    o->mem[n] = o->mem[s];
    n++;
  }
  o->ncand = n;
}

typedef struct {
  int op, input; /* owner node and rule input */
  int value;     /* the value the owner reads */
} owner_t;

/* The edges and extra unary costs of one rule input of op i. */
static int connect_input(ts_costgraph *cg, int i, int k, owner_t *owner) {
  const ts_graph *g = cg->g;
  ts__cg_op *o = &cg->ops[i];
  int D = cg->cfg.ndevices;
  int gv = ts_graph_node_input(g, o->node, o->m.gin[k]);
  int nch;
  int v0 = trace(cg, gv, &nch);
  const int *chain = cg->chain;
  const ts_shape *gs = ts_graph_value_shape(g, gv), *s0 = ts_graph_value_shape(g, v0);
  size_t es = ts_dtype_size(ts_graph_value_dtype(g, gv));
  double mult = ts_graph_value_requires_grad(g, gv) ? 2 : 1;
  int p = ts_graph_value_producer(g, v0);
  ts_layout Lend;
  if (p >= 0 && cg->op_of_node[p] >= 0 && ts_graph_node_output(g, p, 0) == v0) { /* a rule op's output */
    int u = cg->op_of_node[p];
    ts__cg_op *po = &cg->ops[u];
    ts__cg_edge *e = new_edge(cg, u, i);
    if (!e) return ts_error_set(TS_ENOMEM, "search: out of memory");
    for (int a = 0; a < po->ncand; a++) {
      double ct = chain_apply(cg, chain, nch, &po->out[a], &Lend);
      for (int b = 0; b < o->ncand; b++)
        e->m[(size_t)a * o->ncand + b] =
            mult * (ct + rt(cg, gs, es, &Lend, &o->req[b * TS_STRATEGY_MAX_INPUTS + k]));
    }
    return TS_OK;
  }
  if (p < 0 && ts_graph_value_kind(g, v0) == TS_VAL_INPUT) { /* the batch, cut by the dataset op */
    int ds = cg->dataset_op;
    if (ds < 0 || ds == i) {
      for (int b = 0; b < o->ncand; b++) {
        ts_layout L0;
        input_layout(&L0, D, dataset_cut_of(cg, b), s0->ndim);
        if (ds < 0) input_layout(&L0, D, cg->dataset_default, s0->ndim);
        double ct = chain_apply(cg, chain, nch, &L0, &Lend);
        o->cost[b] += mult * (ct + rt(cg, gs, es, &Lend, &o->req[b * TS_STRATEGY_MAX_INPUTS + k]));
      }
      return TS_OK;
    }
    ts__cg_op *dop = &cg->ops[ds];
    ts__cg_edge *e = new_edge(cg, ds, i);
    if (!e) return ts_error_set(TS_ENOMEM, "search: out of memory");
    for (int a = 0; a < dop->ncand; a++) {
      ts_layout L0;
      input_layout(&L0, D, dataset_cut_of(cg, a), s0->ndim);
      double ct = chain_apply(cg, chain, nch, &L0, &Lend);
      for (int b = 0; b < o->ncand; b++)
        e->m[(size_t)a * o->ncand + b] =
            mult * (ct + rt(cg, gs, es, &Lend, &o->req[b * TS_STRATEGY_MAX_INPUTS + k]));
    }
    return TS_OK;
  }
  if (p < 0 && (ts_graph_value_kind(g, v0) == TS_VAL_PARAM || ts_graph_value_kind(g, v0) == TS_VAL_STATE)) {
    owner_t *w = &owner[v0];
    if (w->op < 0) { /* the first user: the parameter takes its layout */
      w->op = i, w->input = k, w->value = gv;
      o->owns |= 1u << k;
      return TS_OK;
    }
    if (w->op == i) return TS_OK;
    ts__cg_op *wo = &cg->ops[w->op];
    int direct = gv == v0 && w->value == v0;
    if (!direct && !ts_shape_equal(ts_graph_value_shape(g, w->value), gs)) return TS_OK; /* not priced */
    ts__cg_edge *e = new_edge(cg, w->op, i);
    if (!e) return ts_error_set(TS_ENOMEM, "search: out of memory");
    for (int a = 0; a < wo->ncand; a++)
      for (int b = 0; b < o->ncand; b++) {
        const ts_layout *la = &wo->req[a * TS_STRATEGY_MAX_INPUTS + w->input], *lb = &o->req[b * TS_STRATEGY_MAX_INPUTS + k];
        double t;
        if (direct) {
          ts_redist_plan pl;
          int same = ts_layout_equal(la, lb) || (!ts_redist_plan_make(gs, es, la, lb, &pl) && pl.nops == 0);
          ts_error_set(TS_OK, "%s", "");
          t = same ? 0 : INFINITY;
        } else {
          t = 2 * rt(cg, gs, es, la, lb);
        }
        e->m[(size_t)a * o->ncand + b] = t;
      }
    return TS_OK;
  }
  /* a replicated source: a constant, an op without a rule, a rule op's second output */
  ts_layout L0;
  repl_layout(&L0, D, s0->ndim);
  double ct = chain_apply(cg, chain, nch, &L0, &Lend);
  for (int b = 0; b < o->ncand; b++)
    o->cost[b] += mult * (ct + rt(cg, gs, es, &Lend, &o->req[b * TS_STRATEGY_MAX_INPUTS + k]));
  return TS_OK;
}

/* Ops without a rule that do not follow: their inputs gathered whole, paid by the producer. */
static void connect_sinks(ts_costgraph *cg) {
  const ts_graph *g = cg->g;
  for (int j = 0; j < ts_graph_num_nodes(g); j++) {
    ts_op op = ts_graph_node_op(g, j);
    if (cg->op_of_node[j] >= 0 || ts__pass_is_follow_op(op) || op == TS_OP_CONST) continue;
    for (int k = 0; k < ts_graph_node_num_inputs(g, j); k++) {
      int gv = ts_graph_node_input(g, j, k), nch;
      int v0 = trace(cg, gv, &nch);
      const int *chain = cg->chain;
      int p = ts_graph_value_producer(g, v0);
      if (p < 0 || cg->op_of_node[p] < 0 || ts_graph_node_output(g, p, 0) != v0) continue;
      ts__cg_op *po = &cg->ops[cg->op_of_node[p]];
      const ts_shape *gs = ts_graph_value_shape(g, gv);
      size_t es = ts_dtype_size(ts_graph_value_dtype(g, gv));
      double mult = ts_graph_value_requires_grad(g, gv) ? 2 : 1;
      ts_layout R, Lend;
      repl_layout(&R, cg->cfg.ndevices, gs->ndim);
      for (int a = 0; a < po->ncand; a++) {
        double ct = chain_apply(cg, chain, nch, &po->out[a], &Lend);
        po->cost[a] += mult * (ct + rt(cg, gs, es, &Lend, &R));
      }
    }
  }
}

int ts_costgraph_build(const ts_graph *g, const ts_costgraph_config *cfg, ts_costgraph **out) {
  if (out) *out = NULL;
  if (!g || !cfg || !out || !cfg->cluster || cfg->ndevices < 1)
    return ts_error_set(TS_EINVAL, "ts_costgraph_build: a null argument or %d devices", cfg ? cfg->ndevices : 0);
  if (ts_graph_status(g)) return ts_error_set(TS_EGRAPH, "search: the graph has an error: %s", ts_graph_error(g));
  ts_costgraph *cg = calloc(1, sizeof *cg);
  if (!cg) return ts_error_set(TS_ENOMEM, "search: out of memory");
  cg->g = g;
  cg->cfg = *cfg;
  cg->cl = *cfg->cluster;
  int nn = ts_graph_num_nodes(g), nv = ts_graph_num_values(g), D = cfg->ndevices, rc = TS_OK;
  int cap = cfg->max_candidates > 0 ? cfg->max_candidates : 4096;
  cg->memo = calloc(1, sizeof *cg->memo); /* NULL: no memo, times computed each time */
  cg->op_of_node = malloc(sizeof(int) * (size_t)(nn + 1));
  cg->chain = malloc(sizeof(int) * (size_t)(nn + 1));
  cg->chain_rev = malloc(sizeof(int) * (size_t)(nn + 1));
  cg->ops = calloc((size_t)nn + 1, sizeof *cg->ops);
  owner_t *owner = malloc(sizeof *owner * (size_t)(nv + 1));
  char **keys = NULL;
  if (!cg->op_of_node || !cg->chain || !cg->chain_rev || !cg->ops || !owner) {
    rc = ts_error_set(TS_ENOMEM, "search: out of memory");
    goto done;
  }
  for (int v = 0; v < nv; v++) owner[v].op = -1;
  /* every node's key at once (per node, a rescan of the nodes before it: quadratic in depth, #33) */
  keys = calloc((size_t)nn + 1, sizeof *keys);
  if (!keys) rc = ts_error_set(TS_ENOMEM, "search: out of memory");
  if (rc || (rc = ts__parallel_op_keys(g, nn, keys))) goto done;
  for (int j = 0; j < nn; j++) {
    cg->op_of_node[j] = -1;
    if (ts_graph_node_is_backward(g, j)) {
      rc = ts_error_set(TS_EINVAL, "search: the graph has a backward (node %s); search the forward graph",
                        ts_graph_node_name(g, j));
      goto done;
    }
    ts__cg_op *o = &cg->ops[cg->nops];
    memset(o, 0, sizeof *o);
    if (!ts__pass_map_op(g, j, &o->m)) continue;
    o->node = j;
    o->key = keys[j]; /* taken */
    keys[j] = NULL;
    o->dataset_input = -1;
    for (int k = 0; k < o->m.nin; k++) o->shapes[k] = *ts_graph_value_shape(g, ts_graph_node_input(g, j, o->m.gin[k]));
    cg->op_of_node[j] = cg->nops++;
    if (!o->key) {
      rc = ts_error_set(TS_ENOMEM, "search: out of memory");
      goto done;
    }
  }
  find_dataset_op(cg);
  for (int i = 0; i < cg->nops; i++) {
    ts__cg_op *o = &cg->ops[i];
    enum_ctx E;
    memset(&E, 0, sizeof E);
    E.cg = cg, E.o = o, E.cap = cap;
    E.naxes = ts__cg_loop_axes(o->m.sop, o->shapes, o->m.nin, o->m.has_attrs ? o->m.attrs : NULL, E.ax);
    for (int d = 1; d <= D && E.ndivs < 64; d++)
      if (D % d == 0) E.divs[E.ndivs++] = d;
    size_t n = 16;
    for (int a = 0; a < E.naxes && n < (size_t)cap; a++) n *= (size_t)E.ndivs;
    if (n > (size_t)cap) n = (size_t)cap;
    o->cand = malloc(sizeof *o->cand * n);
    o->req = malloc(sizeof *o->req * n * TS_STRATEGY_MAX_INPUTS);
    o->out = malloc(sizeof *o->out * n);
    o->cost = malloc(sizeof(double) * n);
    o->mem = malloc(sizeof(double) * n);
    if (!o->cand || !o->req || !o->out || !o->cost || !o->mem) {
      rc = ts_error_set(TS_ENOMEM, "search: out of memory");
      goto done;
    }
    E.cap = (int)n;
    if (E.naxes > TS_MAX_DIMS * 2) {
      rc = ts_error_set(TS_EUNSUPPORTED, "search: operator '%s' has %d loop axes", o->key, E.naxes);
      goto done;
    }
    if ((rc = enum_axes(&E, 0, 1))) goto done;
    if (o->ncand == 0) { /* nothing valid (or nothing with the batch cut asked): replicated */
      int bc = cg->cfg.batch_cut, fd = cg->cfg.full_devices;
      cg->cfg.batch_cut = 0, cg->cfg.full_devices = 0;
      for (int a = 0; a < E.naxes; a++) E.cut[a] = 1;
      add_candidate(&E, 1);
      cg->cfg.batch_cut = bc, cg->cfg.full_devices = fd;
      if (o->ncand == 0) {
        rc = ts_error_set(TS_EUNSUPPORTED, "search: operator '%s' has no valid strategy on %d devices", o->key, D);
        goto done;
      }
    }
  }
  /* ownership of parameters first (the first op in graph order), then prices, then edges */
  for (int i = 0; i < cg->nops; i++) {
    ts__cg_op *o = &cg->ops[i];
    for (int k = 0; k < o->m.nin; k++) {
      int gv = ts_graph_node_input(g, o->node, o->m.gin[k]), nch;
      int v0 = trace(cg, gv, &nch);
      if (ts_graph_value_producer(g, v0) < 0 &&
          (ts_graph_value_kind(g, v0) == TS_VAL_PARAM || ts_graph_value_kind(g, v0) == TS_VAL_STATE) && owner[v0].op < 0) {
        owner[v0].op = i, owner[v0].input = k, owner[v0].value = gv;
        o->owns |= 1u << k;
      }
    }
    ts_op op = ts_graph_node_op(g, o->node);
    o->owns_bias = (op == TS_OP_DENSE || op == TS_OP_CONV2D) && ts_graph_node_num_inputs(g, o->node) > 2;
  }
  for (int i = 0; i < cg->nops; i++) price_op(cg, i);
  for (int i = 0; i < cg->nops; i++) prune_memory(cg, &cg->ops[i]);
  for (int i = 0; i < cg->nops && !rc; i++)
    for (int k = 0; k < cg->ops[i].m.nin && !rc; k++) rc = connect_input(cg, i, k, owner);
  if (!rc) connect_sinks(cg);
done:
  for (int j = 0; keys && j < nn; j++) free(keys[j]);
  free(keys);
  free(owner);
  if (rc) {
    ts_costgraph_free(cg);
    return rc;
  }
  *out = cg;
  return TS_OK;
}

/* ---- queries ---- */

int ts_costgraph_num_ops(const ts_costgraph *cg) { return cg ? cg->nops : 0; }
int ts_costgraph_op_node(const ts_costgraph *cg, int i) { return cg && i >= 0 && i < cg->nops ? cg->ops[i].node : -1; }
const char *ts_costgraph_op_key(const ts_costgraph *cg, int i) {
  return cg && i >= 0 && i < cg->nops ? cg->ops[i].key : NULL;
}
int ts_costgraph_num_candidates(const ts_costgraph *cg, int i) {
  return cg && i >= 0 && i < cg->nops ? cg->ops[i].ncand : 0;
}
const ts_op_strategy *ts_costgraph_candidate(const ts_costgraph *cg, int i, int c) {
  if (!cg || i < 0 || i >= cg->nops || c < 0 || c >= cg->ops[i].ncand) return NULL;
  return &cg->ops[i].cand[c];
}
double ts_costgraph_candidate_cost(const ts_costgraph *cg, int i, int c) {
  return ts_costgraph_candidate(cg, i, c) ? cg->ops[i].cost[c] : INFINITY;
}
double ts_costgraph_candidate_memory(const ts_costgraph *cg, int i, int c) {
  return ts_costgraph_candidate(cg, i, c) ? cg->ops[i].mem[c] : INFINITY;
}
int ts_costgraph_num_edges(const ts_costgraph *cg) { return cg ? cg->nedges : 0; }
void ts_costgraph_edge(const ts_costgraph *cg, int e, int *u, int *v) {
  *u = *v = -1;
  if (cg && e >= 0 && e < cg->nedges) *u = cg->edges[e].u, *v = cg->edges[e].v;
}
double ts_costgraph_edge_cost(const ts_costgraph *cg, int e, int cu, int cv) {
  if (!cg || e < 0 || e >= cg->nedges) return INFINITY;
  const ts__cg_edge *x = &cg->edges[e];
  if (cu < 0 || cu >= cg->ops[x->u].ncand || cv < 0 || cv >= cg->ops[x->v].ncand) return INFINITY;
  return x->m[(size_t)cu * cg->ops[x->v].ncand + cv];
}

double ts_costgraph_total(const ts_costgraph *cg, const int *choice) {
  double t = 0;
  for (int i = 0; i < cg->nops; i++) t += ts_costgraph_candidate_cost(cg, i, choice[i]);
  for (int e = 0; e < cg->nedges; e++) t += ts_costgraph_edge_cost(cg, e, choice[cg->edges[e].u], choice[cg->edges[e].v]);
  return t;
}

double ts_costgraph_memory(const ts_costgraph *cg, const int *choice) {
  double m = 0;
  for (int i = 0; i < cg->nops; i++) m += ts_costgraph_candidate_memory(cg, i, choice[i]);
  return m;
}

int ts_costgraph_put_strategies(const ts_costgraph *cg, const int *choice, ts_strategy_set *s) {
  if (!cg || !choice || !s) return ts_error_set(TS_EINVAL, "ts_costgraph_put_strategies: null argument");
  if (ts_strategy_set_device_num(s) != cg->cfg.ndevices)
    return ts_error_set(TS_EINVAL, "search: the strategy set is for %d devices, the search for %d",
                        ts_strategy_set_device_num(s), cg->cfg.ndevices);
  for (int i = 0; i < cg->nops; i++) {
    const ts_op_strategy *st = ts_costgraph_candidate(cg, i, choice[i]);
    if (!st) return ts_error_set(TS_EINVAL, "search: operator '%s': no candidate %d", cg->ops[i].key, choice[i]);
    int rc = ts_strategy_set_put(s, cg->ops[i].key, st);
    if (rc) return rc;
  }
  return TS_OK;
}
