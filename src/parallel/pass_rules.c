/* The parallel pass, per operator: which sharding rule applies to a graph op, which strategy it
 * runs with (the user's, else follow its input, else data parallel, else replicated), and the
 * layouts of its inputs and outputs. Shape ops carry their input's layout through. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_ir.h"
#include "pass_impl.h"

/* ---- reshape: carrying cuts between shapes of the same row-major data ----
 * A cut of dim i of `a` in c blocks is the same set of elements as a cut of dim j of `b` in c
 * blocks when the dims before them have the same product (the same outer index) and both sizes
 * divide by c: block k then covers offsets [k*S/c, (k+1)*S/c) of the inner S elements in both. */
int ts__reshape_layout(const ts_shape *a, const ts_layout *in, const ts_shape *b, ts_layout *outl,
                       int *bad) {
  int tmap[TS_MAX_DIMS];
  for (int j = 0; j < b->ndim; j++) tmap[j] = -1;
  int64_t pa = 1;
  for (int i = 0; i < a->ndim; i++) {
    int ax = in->tmap[i];
    if (ax >= 0 && in->dev[ax] > 1) {
      int64_t c = in->dev[ax], pb = 1;
      int found = -1;
      for (int j = 0; j < b->ndim; j++) {
        if (pb == pa && b->dims[j] % c == 0 && b->dims[j] > 1 && tmap[j] < 0) {
          found = j;
          break;
        }
        pb *= b->dims[j];
        if (pb > pa) break;
      }
      if (found < 0) {
        if (bad) *bad = i;
        return -1;
      }
      tmap[found] = ax;
    }
    pa *= a->dims[i];
  }
  ts_layout_init(outl, in->ndev, in->dev, b->ndim, tmap, in->partial);
  return 0;
}

/* ---- helpers ---- */

static const char *vname(const ts_parallel *p, int vi) {
  const ts__pval v_ = ts__pval_get(p->g, vi), *v = &v_;
  if (v->name) return v->name;
  return v->producer >= 0 ? p->n[v->producer].key : "?";
}

static int is_activation(const ts_parallel *p, int vi) {
  const ts__vst *v = &p->v[vi];
  return v->known && !v->pending;
}

/* Moves a pure repeat axis (axis 0: cuts nothing, not partial, size > 1) to the end of the device
 * matrix, so the data-parallel dim stays the outermost axis and model-parallel groups are
 * neighbouring ranks (Megatron's arrangement); MindSpore puts it first. */
static void repeat_last(ts_layout *ls, int n) {
  if (n <= 0 || ls[0].ndev < 2 || ls[0].dev[0] <= 1) return;
  for (int k = 0; k < n; k++) {
    if (ls[k].partial & 1u) return;
    for (int d = 0; d < ls[k].ndim; d++)
      if (ls[k].tmap[d] == 0) return;
  }
  for (int k = 0; k < n; k++) {
    ts_layout *l = &ls[k];
    int nd = l->ndev, dev[TS_LAYOUT_MAX_AXES], tmap[TS_MAX_DIMS];
    for (int a = 0; a < nd - 1; a++) dev[a] = l->dev[a + 1];
    dev[nd - 1] = l->dev[0];
    for (int d = 0; d < l->ndim; d++) tmap[d] = l->tmap[d] > 0 ? l->tmap[d] - 1 : l->tmap[d];
    unsigned part = l->partial >> 1;
    ts_layout_init(l, nd, dev, l->ndim, tmap, part);
  }
}

int ts__pass_apply_rule(ts_parallel *p, int ni, int sop, const ts_op_strategy *st,
                        const ts_shape *shapes, int nin, const int *attrs, ts_layout *req,
                        ts_layout *out, int report) {
  int rc = ts__pass_rule_layouts(sop, st, p->N, shapes, nin, attrs, req, out);
  if (rc && report) return ts_error_wrap(rc, "operator '%s'", p->n[ni].key);
  return rc;
}

int ts__pass_rule_layouts(int sop, const ts_op_strategy *st, int N, const ts_shape *shapes, int nin,
                          const int *attrs, ts_layout *req, ts_layout *out) {
  ts_layout all[TS_STRATEGY_MAX_INPUTS + 1];
  if (nin < 0 || nin > TS_STRATEGY_MAX_INPUTS) return ts_error_set(TS_EINVAL, "sharding rule: %d inputs", nin);
  int rc = ts_shard_rule((ts_shard_op)sop, st, N, shapes, nin, attrs, all, &all[nin], NULL);
  if (rc) return rc;
  repeat_last(all, nin + 1);
  for (int k = 0; k <= nin; k++) ts__layout_canon(&all[k]);
  for (int k = 0; k < nin; k++) req[k] = all[k];
  *out = all[nin];
  return TS_OK;
}

/* ---- which rule, which inputs ---- */

typedef ts__opmap opmap;

int ts__pass_map_op(const ts_graph *g, int node, ts__opmap *m) {
  memset(m, 0, sizeof *m);
  m->sop = -1;
  const ts__pnode nd_ = ts__pnode_get(g, node), *nd = &nd_;
  switch (nd->op) {
    case TS_OP_MATMUL:
      if (ts_attr_matmul_trans_a(&nd->a) || ts_attr_matmul_trans_b(&nd->a) || (*ts_graph_value_shape(g, nd->in[0])).ndim != 2 || (*ts_graph_value_shape(g, nd->in[1])).ndim != 2)
        return 0;
      m->sop = TS_SHARD_MATMUL, m->nin = 2, m->gin[0] = 0, m->gin[1] = 1;
      return 1;
    case TS_OP_DENSE:
      m->sop = TS_SHARD_DENSE, m->nin = 2, m->gin[0] = 0, m->gin[1] = 1;
      return 1;
    case TS_OP_ELTWISE:
      m->sop = TS_SHARD_ELEMENTWISE, m->nin = 1;
      return 1;
    case TS_OP_BINARY:
      m->sop = TS_SHARD_BINARY, m->nin = 2, m->gin[1] = 1;
      return 1;
    case TS_OP_REDUCE:
      m->sop = TS_SHARD_REDUCE, m->nin = 1, m->has_attrs = 1;
      m->attrs[0] = (int)ts_attr_reduce_axes(&nd->a);
      m->attrs[1] = (int)ts_attr_reduce_keepdim(&nd->a);
      m->attrs[2] = (int)ts_attr_reduce_alg(&nd->a);
      return 1;
    case TS_OP_SOFTMAX:
      m->sop = TS_SHARD_SOFTMAX, m->nin = 1, m->has_attrs = 1;
      m->attrs[0] = (int)ts_attr_softmax_axis(&nd->a);
      return 1;
    case TS_OP_LAYERNORM:
      m->sop = TS_SHARD_LAYERNORM, m->nin = 3, m->gin[1] = 1, m->gin[2] = 2, m->has_attrs = 1;
      m->attrs[0] = -1;
      return 1;
    case TS_OP_EMBEDDING:
      m->sop = TS_SHARD_EMBEDDING, m->nin = 2, m->gin[0] = 1, m->gin[1] = 0;
      return 1;
    case TS_OP_CONV2D:
      if (ts_attr_conv2d_dil_h(&nd->a) != 1 || ts_attr_conv2d_dil_w(&nd->a) != 1 || ts_attr_conv2d_groups(&nd->a) != 1)
        return 0; /* dilation, groups */
      m->sop = TS_SHARD_CONV2D, m->nin = 2, m->gin[1] = 1, m->has_attrs = 1;
      m->attrs[0] = (int)ts_attr_conv2d_stride_h(&nd->a);
      m->attrs[1] = (int)ts_attr_conv2d_stride_w(&nd->a);
      m->attrs[2] = (int)ts_attr_conv2d_pad_h(&nd->a);
      m->attrs[3] = (int)ts_attr_conv2d_pad_w(&nd->a);
      return 1;
    case TS_OP_BATCHNORM:
      m->sop = TS_SHARD_BATCHNORM, m->nin = 5;
      for (int k = 0; k < 5; k++) m->gin[k] = k;
      return 1;
    case TS_OP_ATTENTION:
      if (ts_attr_attention_layout(&nd->a) > 1) return 0; /* (B,H,T,D) and (B,T,H,D), not packed q|k|v */
      m->sop = TS_SHARD_ATTENTION, m->nin = 3, m->gin[1] = 1, m->gin[2] = 2, m->has_attrs = 1;
      m->attrs[0] = (int)ts_attr_attention_layout(&nd->a);
      return 1;
    case TS_OP_SOFTMAX_CE:
      m->sop = TS_SHARD_SOFTMAX_CE, m->nin = 2, m->gin[1] = 1;
      return 1;
    case TS_OP_MAXPOOL2D:
    case TS_OP_AVGPOOL2D: {
      const ts_shape *os = ts_graph_value_shape(g, nd->out[0]);
      const ts_shape *xs = ts_graph_value_shape(g, nd->in[0]);
      m->sop = TS_SHARD_POOL, m->nin = 1, m->has_attrs = 1;
      m->attrs[0] = (int)os->dims[2];
      m->attrs[1] = (int)os->dims[3];
      /* a global average (one window over the whole, unpadded input) may cut the spatial dims */
      m->attrs[2] = nd->op == TS_OP_AVGPOOL2D && os->dims[2] == 1 && os->dims[3] == 1 &&
                    ts_attr_pool2d_kh(&nd->a) == xs->dims[2] && ts_attr_pool2d_kw(&nd->a) == xs->dims[3] &&
                    ts_attr_pool2d_ph(&nd->a) == 0 && ts_attr_pool2d_pw(&nd->a) == 0;
      return 1;
    }
    default:
      return 0;
  }
}

static void strat_ones(ts_op_strategy *st, const ts_shape *shapes, int nin) {
  memset(st, 0, sizeof *st);
  st->ninputs = nin;
  for (int k = 0; k < nin; k++) {
    st->ndim[k] = shapes[k].ndim;
    for (int d = 0; d < shapes[k].ndim; d++) st->cuts[k][d] = 1;
  }
}

/* Follow: the cuts the primary input already has, the others made consistent with them. */
static int strat_follow(const ts_parallel *p, const ts__pnode *nd, const opmap *m,
                        const ts_shape *shapes, ts_op_strategy *st) {
  strat_ones(st, shapes, m->nin);
  int pv = nd->in[m->gin[m->primary]];
  if (!is_activation(p, pv)) return -1;
  int64_t c[TS_MAX_DIMS];
  ts__layout_cuts(&p->v[pv].L, c);
  const ts_shape *x = &shapes[m->primary];
  for (int d = 0; d < x->ndim; d++) st->cuts[m->primary][d] = c[d];
  int nd0 = x->ndim;
  switch (m->sop) {
    case TS_SHARD_MATMUL: st->cuts[1][0] = c[1]; break;
    case TS_SHARD_DENSE: st->cuts[1][1] = c[nd0 - 1]; break;
    case TS_SHARD_BATCHNORM:
      for (int k = 1; k < 5; k++) st->cuts[k][0] = nd0 > 1 ? c[1] : 1;
      break;
    case TS_SHARD_ATTENTION:
    case TS_SHARD_SOFTMAX_CE:
      for (int k = 1; k < m->nin; k++)
        for (int d = 0; d < shapes[k].ndim; d++) st->cuts[k][d] = c[d];
      break;
    case TS_SHARD_BINARY: {
      /* output dims aligned from the right; the other operand takes the cut where it is not
       * broadcast, and gives its own where the primary broadcasts */
      int o = 1 - m->primary;
      int ov = nd->in[m->gin[o]];
      int64_t oc[TS_MAX_DIMS];
      for (int d = 0; d < TS_MAX_DIMS; d++) oc[d] = 1;
      if (is_activation(p, ov)) ts__layout_cuts(&p->v[ov].L, oc);
      const ts_shape *y = &shapes[o];
      for (int d = 0; d < y->ndim; d++) {
        int dx = d + x->ndim - y->ndim;
        if (y->dims[d] == 1) continue;
        if (dx >= 0 && x->dims[dx] == y->dims[d])
          st->cuts[o][d] = c[dx];
        else
          st->cuts[o][d] = oc[d];
      }
      break;
    }
    default: break;
  }
  return 0;
}

/* Data parallel: dim 0 of the primary input cut by the largest divisor of N that divides it. */
static int strat_dp(const ts_parallel *p, const ts__pnode *nd, const opmap *m, const ts_shape *shapes,
                    ts_op_strategy *st) {
  (void)nd;
  strat_ones(st, shapes, m->nin);
  const ts_shape *x = &shapes[m->primary];
  if (x->ndim == 0) return -1;
  int64_t c = ts__gcd64(x->dims[0], p->N);
  if (c <= 1) return -1;
  st->cuts[m->primary][0] = c;
  switch (m->sop) {
    case TS_SHARD_ATTENTION:
    case TS_SHARD_SOFTMAX_CE:
      for (int k = 1; k < m->nin; k++) st->cuts[k][0] = c;
      break;
    case TS_SHARD_BINARY: {
      int o = 1 - m->primary;
      const ts_shape *y = &shapes[o];
      int d = 0, dx = d + x->ndim - y->ndim;
      if (y->ndim == x->ndim && dx == 0 && y->dims[0] == x->dims[0]) st->cuts[o][0] = c;
      break;
    }
    default: break;
  }
  return 0;
}

/* ---- per node ---- */

static int out_replicated(ts_parallel *p, int ni) {
  const ts__pnode nd_ = ts__pnode_get(p->g, ni), *nd = &nd_;
  ts__nst *ns = &p->n[ni];
  ns->nout = nd->nout;
  for (int k = 0; k < nd->nout; k++) ts__layout_repl(&ns->out[k], p->N, (*ts_graph_value_shape(p->g, nd->out[k])).ndim);
  return TS_OK;
}

/* Inputs of a node without rule: whole on every rank. */
static int all_replicated(ts_parallel *p, int ni) {
  const ts__pnode nd_ = ts__pnode_get(p->g, ni), *nd = &nd_;
  ts__nst *ns = &p->n[ni];
  ns->nin = nd->nin;
  for (int k = 0; k < nd->nin; k++) ts__layout_repl(&ns->req[k], p->N, p->v[nd->in[k]].gs.ndim);
  return out_replicated(p, ni);
}

static ts_layout no_partial(const ts_layout *l) {
  ts_layout r = *l;
  r.partial = 0;
  return r;
}

/* sequence_parallel: l's values are partial sums over exactly one device axis a of size > 1, the
 * value is (batch, sequence, hidden) with the sequence uncut and divisible by a's size, and a cuts
 * no other dim: *sq = l reduce-scattered onto the sequence (dim 1 cut by a). 1 if so, else 0. */
static int seq_cut_of(const ts_layout *l, const ts_shape *s, ts_layout *sq) {
  if (!l->partial || (l->partial & (l->partial - 1)) || l->ndim != 3 || !s || s->ndim != 3) return 0;
  int a = 0;
  while (!(l->partial & (1u << a))) a++;
  if (a >= l->ndev || l->dev[a] < 2 || l->tmap[1] >= 0 || s->dims[1] % l->dev[a]) return 0;
  for (int d = 0; d < 3; d++)
    if (l->tmap[d] == a) return 0;
  *sq = *l;
  sq->partial = 0;
  sq->tmap[1] = a;
  return 1;
}

static void uncut(ts_layout *l, int dim) {
  if (dim >= 0 && dim < l->ndim) l->tmap[dim] = -1;
}

/* Layouts for shape ops (input 0 known). */
void ts__pass_view_layout(const ts_graph *g, int ni, const ts_shape *in_shape, const ts_layout *in,
                          ts_layout *req, ts_layout *out) {
  const ts__pnode nd_ = ts__pnode_get(g, ni), *nd = &nd_;
  ts_layout L = no_partial(in);
  switch (nd->op) {
    case TS_OP_RESHAPE: {
      const ts_shape *os = ts_graph_value_shape(g, nd->out[0]);
      int bad;
      while (ts__reshape_layout(in_shape, &L, os, out, &bad)) uncut(&L, bad);
      *req = L;
      return;
    }
    case TS_OP_PERMUTE:
      *req = L;
      *out = L;
      for (int k = 0; k < L.ndim; k++) out->tmap[k] = L.tmap[ts_attr_permute_perm(&nd->a, k)];
      return;
    case TS_OP_SPLIT:
    case TS_OP_SLICE:
      uncut(&L, (int)(nd->op == TS_OP_SPLIT ? ts_attr_split_axis(&nd->a) : ts_attr_slice_axis(&nd->a)));
      *req = L;
      *out = L;
      return;
    case TS_OP_CONCAT:
      uncut(&L, (int)ts_attr_concat_axis(&nd->a));
      *req = L;
      *out = L;
      return;
    default: /* CAST, COPY, SCALE, DROPOUT: elementwise on one input */
      *req = L;
      *out = L;
      return;
  }
}

static int view_node(ts_parallel *p, int ni) {
  const ts__pnode nd_ = ts__pnode_get(p->g, ni), *nd = &nd_;
  ts__nst *ns = &p->n[ni];
  const ts__vst *x = &p->v[nd->in[0]];
  ns->how = TS__HOW_VIEW;
  ns->nin = nd->nin;
  ns->nout = nd->nout;
  ts_layout req, out;
  ts__pass_view_layout(p->g, ni, &x->gs, &x->L, &req, &out);
  for (int k = 0; k < nd->nin; k++) ns->req[k] = req;
  for (int k = 0; k < nd->nout; k++) ns->out[k] = out;
  return TS_OK;
}

static int is_view_op(ts_op op) {
  return op == TS_OP_RESHAPE || op == TS_OP_PERMUTE || op == TS_OP_SPLIT || op == TS_OP_SLICE;
}

int ts__pass_is_follow_op(ts_op op) {
  return is_view_op(op) || op == TS_OP_CONCAT || op == TS_OP_CAST || op == TS_OP_COPY ||
         op == TS_OP_SCALE || op == TS_OP_DROPOUT;
}

/* Settles the node's inputs: pending parameters take their required layout, the others record
 * the redistribution (phase 1 costs). */
static int settle_inputs(ts_parallel *p, int ni) {
  const ts__pnode nd_ = ts__pnode_get(p->g, ni), *nd = &nd_;
  ts__nst *ns = &p->n[ni];
  for (int k = 0; k < nd->nin; k++) {
    int vi = nd->in[k];
    ts__vst *v = &p->v[vi];
    ts__layout_canon(&ns->req[k]);
    if (v->pending) {
      int rc = ts__pass_resolve(p, vi, &ns->req[k], ni);
      if (rc) return rc;
    } else if (ns->how == TS__HOW_USER && v->user_node >= 0 && v->user_node != ni &&
               ts_graph_value_producer(p->g, vi) < 0) {
      /* a parameter two user strategies cut differently */
      char a[256], b[256];
      int same = 0;
      if (ts__layout_same(&v->gs, &v->L, &ns->req[k], &same)) same = 0; /* not convertible: differ */
      if (!same)
        return ts_error_set(TS_EINVAL,
                            "parallel: parameter '%s' is cut as %s by operator '%s' and as %s by "
                            "operator '%s': a parameter shared by two operators needs the same "
                            "strategy for it in both",
                            vname(p, vi), ts_layout_str(&v->L, a, sizeof a), p->n[v->user_node].key,
                            ts_layout_str(&ns->req[k], b, sizeof b), ns->key);
    }
    if (!v->known)
      return ts_error_set(TS_EGRAPH, "parallel pass: input %d (%s) of '%s' has no layout", k,
                          vname(p, vi), ns->key);
    if (nd->op != TS_OP_RESHAPE && !ts_shape_equal(&v->gs, ts_graph_value_shape(p->g, vi))) {
      char s1[96], s2[96];
      if (!ts_shape_equal(&v->gs, ts_graph_value_shape(p->g, vi)))
        return ts_error_set(TS_EUNSUPPORTED,
                            "parallel: parameter '%s' is held reshaped as %s for one operator and used "
                            "as %s by operator '%s'",
                            vname(p, vi), ts_shape_str(&v->gs, s1, sizeof s1),
                            ts_shape_str(ts_graph_value_shape(p->g, vi), s2, sizeof s2), ns->key);
    }
    int rc = ts__pass_need(p, vi, &ns->req[k], ni, k);
    if (rc) return rc;
  }
  return TS_OK;
}

static int set_outputs(ts_parallel *p, int ni) {
  const ts__pnode nd_ = ts__pnode_get(p->g, ni), *nd = &nd_;
  ts__nst *ns = &p->n[ni];
  for (int k = 0; k < nd->nout; k++) {
    ts__vst *o = &p->v[nd->out[k]];
    ts__layout_canon(&ns->out[k]);
    o->L = ns->out[k];
    o->known = 1;
    o->pending = 0;
  }
  return TS_OK;
}

/* The extra outputs of rule ops, from the main output's or the inputs' layouts. */
static void rule_extras(ts_parallel *p, int ni, const opmap *m) {
  const ts__pnode nd_ = ts__pnode_get(p->g, ni), *nd = &nd_;
  ts__nst *ns = &p->n[ni];
  const ts_layout *x = &ns->req[0];
  int tm[TS_MAX_DIMS];
  ns->nout = nd->nout;
  switch (m->sop) {
    case TS_SHARD_LAYERNORM: /* mean, var: the leading dims */
      for (int k = 1; k < nd->nout; k++) ts_layout_init(&ns->out[k], x->ndev, x->dev, x->ndim - 1, x->tmap, 0);
      break;
    case TS_SHARD_BATCHNORM: /* mean, var (C) */
      tm[0] = x->tmap[1];
      for (int k = 1; k < nd->nout; k++) ts_layout_init(&ns->out[k], x->ndev, x->dev, 1, tm, 0);
      break;
    case TS_SHARD_SOFTMAX_CE: /* lse (N) */
      tm[0] = x->tmap[0];
      for (int k = 1; k < nd->nout; k++) ts_layout_init(&ns->out[k], x->ndev, x->dev, 1, tm, 0);
      break;
    case TS_SHARD_ATTENTION: /* lse (B,H,T) */
      { /* (the sequence cut of ring attention too) */
        int bthd = ts_attr_attention_layout(&nd->a) == 1;
        tm[0] = x->tmap[0], tm[1] = x->tmap[bthd ? 2 : 1], tm[2] = x->tmap[bthd ? 1 : 2];
      }
      for (int k = 1; k < nd->nout; k++) ts_layout_init(&ns->out[k], x->ndev, x->dev, 3, tm, 0);
      break;
    default: /* maxpool's workspace: like y */
      for (int k = 1; k < nd->nout; k++) ns->out[k] = ns->out[0];
  }
}

/* The user's strategy for node ni: its own (ts_shard) or the set's entry for its name. 1 if there
 * is one (in *st), 0 if none, a negative status for a text that does not parse. */
int ts__pass_user_strategy(const ts_parallel *p, int ni, ts_op_strategy *st) {
  const ts__pnode nd_ = ts__pnode_get(p->g, ni), *nd = &nd_;
  if (nd->strategy) {
    int rc = ts_op_strategy_parse(nd->strategy, st);
    if (rc) return ts_error_wrap(rc, "operator '%s' (ts_shard)", p->n[ni].key);
    return 1;
  }
  if (p->cfg.strategies && ts_strategy_set_get(p->cfg.strategies, p->n[ni].key, st) == TS_OK) return 1;
  ts_error_set(TS_OK, "%s", "");
  return 0;
}

static int rule_node(ts_parallel *p, int ni, opmap *m) {
  const ts_graph *g = p->g;
  const ts__pnode nd_ = ts__pnode_get(g, ni), *nd = &nd_;
  ts__nst *ns = &p->n[ni];
  ts_shape shapes[TS_STRATEGY_MAX_INPUTS];
  for (int k = 0; k < m->nin; k++) shapes[k] = (*ts_graph_value_shape(g, nd->in[m->gin[k]]));
  if (m->sop == TS_SHARD_EMBEDDING) m->primary = 0; /* ids */
  const int *attrs = m->has_attrs ? m->attrs : NULL;
  ts_layout req[TS_STRATEGY_MAX_INPUTS], out;
  int rc;
  ts_op_strategy st;
  int has = ts__pass_user_strategy(p, ni, &st);
  if (has < 0) return has;
  if (has) {
    ns->how = TS__HOW_USER;
    if ((rc = ts_op_strategy_validate(ns->key, &st, p->N))) return rc;
    if (st.ninputs == 3 && m->nin == 2 && (nd->op == TS_OP_DENSE || nd->op == TS_OP_CONV2D)) {
      /* the bias's cut given too: it must be the output channels' */
      int64_t o = st.cuts[1][0];
      if (nd->nin < 3 || st.ndim[2] != 1 || st.cuts[2][0] != o)
        return ts_error_set(TS_EINVAL,
                            "parallel: operator '%s': strategy input 2 (bias) must be (%lld,), the "
                            "cut of the weight's output dim", ns->key, (long long)o);
      st.ninputs = 2;
    }
    if (nd->op == TS_OP_CONV2D && ts_attr_conv2d_groups(&nd->a) != 1 && st.cuts[1][0] > 1)
      return ts_error_set(TS_EUNSUPPORTED, "parallel: operator '%s': a grouped convolution's output "
                          "channels cannot be cut", ns->key);
    if ((rc = ts__pass_apply_rule(p, ni, m->sop, &st, shapes, m->nin, attrs, req, &out, 1))) return rc;
  } else {
    int done = 0;
    if (!strat_follow(p, nd, m, shapes, &st) &&
        !ts__pass_apply_rule(p, ni, m->sop, &st, shapes, m->nin, attrs, req, &out, 0)) {
      ns->how = TS__HOW_FOLLOW;
      done = 1;
    }
    if (!done && !strat_dp(p, nd, m, shapes, &st) &&
        !ts__pass_apply_rule(p, ni, m->sop, &st, shapes, m->nin, attrs, req, &out, 0)) {
      ns->how = TS__HOW_DP;
      done = 1;
    }
    if (!done) {
      strat_ones(&st, shapes, m->nin);
      if ((rc = ts__pass_apply_rule(p, ni, m->sop, &st, shapes, m->nin, attrs, req, &out, 1))) return rc;
      ns->how = TS__HOW_REPLICATED;
    }
    ts_error_set(TS_OK, "%s", ""); /* the refusals tried above are not errors */
  }
  ns->sop = m->sop;
  ns->st = st;
  ns->nin = nd->nin;
  for (int k = 0; k < m->nin; k++) ns->req[m->gin[k]] = req[k];
  /* inputs outside the rule: dense/conv bias follows the weight's output channels */
  if ((nd->op == TS_OP_DENSE || nd->op == TS_OP_CONV2D) && nd->nin > 2) {
    int tm[1] = {req[1].tmap[0]};
    ts_layout_init(&ns->req[2], req[1].ndev, req[1].dev, 1, tm, 0);
  }
  ns->out[0] = out;
  ts_layout sq;
  ns->seq_cut = p->cfg.sequence_parallel && seq_cut_of(&out, ts_graph_value_shape(g, nd->out[0]), &sq);
  if (((nd->op == TS_OP_DENSE || nd->op == TS_OP_CONV2D) && nd->nin > 2 && out.partial) || ns->seq_cut) {
    ns->bias_after = (nd->op == TS_OP_DENSE || nd->op == TS_OP_CONV2D) && nd->nin > 2;
    ns->reduce_after = 1;
    ns->pre_bias = out;
    ns->out[0] = ns->seq_cut ? sq : no_partial(&out);
  }
  rule_extras(p, ni, m);
  if ((rc = settle_inputs(p, ni))) return rc;
  if (ns->reduce_after) { /* the partial sum is reduced inside the node, before the bias */
    ts_redist_plan pl;
    int oc = nd->out[0];
    if ((rc = ts_redist_plan_make(ts_graph_value_shape(g, oc), 4, &ns->pre_bias, &ns->out[0], &pl)) ||
        (rc = ts__pass_record(p, ni, -2, oc, &pl)))
      return ts_error_wrap(rc, "operator '%s': reducing its partial sums", ns->key);
  }
  /* communicators the op itself uses */
  if (m->sop == TS_SHARD_SOFTMAX_CE && ns->req[0].tmap[1] >= 0 && ns->req[0].dev[ns->req[0].tmap[1]] > 1)
    if ((rc = ts__slot_for(p, &ns->req[0], ns->req[0].tmap[1])) < 0) return rc;
  for (int d = 0; d < ns->req[0].ndim; d++) {
    /* batch-norm statistics over the batch and spatial cuts; a convolution's halo exchange */
    const ts_layout *l = &ns->req[0];
    int bn = m->sop == TS_SHARD_BATCHNORM && ts_graph_training(g) && d != 1, conv = m->sop == TS_SHARD_CONV2D && d >= 2;
    if ((bn || conv) && l->tmap[d] >= 0 && l->dev[l->tmap[d]] > 1 && (rc = ts__slot_for(p, l, l->tmap[d])) < 0) return rc;
  }
  return set_outputs(p, ni);
}

int ts__pass_node(ts_parallel *p, int ni) {
  const ts_graph *g = p->g;
  const ts__pnode nd_ = ts__pnode_get(g, ni), *nd = &nd_;
  ts__nst *ns = &p->n[ni];
  ns->visited = 1;
  if (nd->op >= TS_OP_ALLREDUCE && nd->op <= TS_OP_HALO_BWD)
    return ts_error_set(TS_EUNSUPPORTED,
                        "parallel: operator '%s' is a collective; semi_auto_parallel inserts the "
                        "collectives itself (place them by hand in hybrid_parallel mode)",
                        ns->key);
  if (nd->op == TS_OP_CONST) {
    ns->how = TS__HOW_REPLICATED;
    out_replicated(p, ni);
    return set_outputs(p, ni);
  }
  /* shape ops (and casts: mixed precision's 16-bit copy of a weight) on a parameter whose layout
   * is not known yet wait for the parameter's consumer */
  if ((is_view_op(nd->op) || nd->op == TS_OP_CAST || nd->op == TS_OP_COPY) && p->v[nd->in[0]].pending) {
    ns->deferred = 1;
    if (ni < p->def_lo) p->def_lo = ni;
    if (ni > p->def_hi) p->def_hi = ni;
    ns->how = TS__HOW_VIEW;
    for (int k = 0; k < nd->nout; k++) {
      ts__vst *o = &p->v[nd->out[k]];
      o->pending = 1;
      o->from_param = p->v[nd->in[0]].from_param;
    }
    return TS_OK;
  }
  opmap m;
  ts_op_strategy dummy;
  int has_user = ts__pass_user_strategy(p, ni, &dummy);
  if (has_user < 0) return has_user;
  if (ts__pass_map_op(g, ni, &m)) return rule_node(p, ni, &m);
  if (has_user)
    return ts_error_set(TS_EUNSUPPORTED,
                        "parallel: operator '%s' (%s) has a strategy but no sharding rule; it runs "
                        "replicated (remove its strategy)",
                        ns->key, ts_op_name(nd->op));
  int rc;
  if (ts__pass_is_follow_op(nd->op)) {
    /* a pending input here is a parameter used whole */
    for (int k = 0; k < nd->nin; k++)
      if (p->v[nd->in[k]].pending) {
        ts_layout r;
        ts__layout_repl(&r, p->N, p->v[nd->in[k]].gs.ndim);
        if ((rc = ts__pass_resolve(p, nd->in[k], &r, ni))) return rc;
      }
    if ((rc = view_node(p, ni))) return rc;
  } else {
    ns->how = TS__HOW_NORULE;
    if ((rc = all_replicated(p, ni))) return rc;
  }
  if ((rc = settle_inputs(p, ni))) return rc;
  return set_outputs(p, ni);
}
