/* The parallel pass, phase 2: builds the rank's graph from phase 1's decisions. Parameters are
 * registered as the rank's slices, every operator is emitted on local shapes (attributes that
 * hold shapes or offsets rewritten), and each input is converted into the layout its operator
 * needs by the redistribution plan's collectives. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_ir.h"
#include "pass_impl.h"

/* The index of value h of the rank's graph (-1 for TS_NONE). */
static int vid(const ts_parallel *p, ts_val h) { return ts_graph_value_index(p->lg, h); }

static int lg_fail(ts_parallel *p, const char *what) {
  int rc = ts_graph_status(p->lg) ? ts_graph_status(p->lg) : TS_EGRAPH;
  return ts_error_set(rc, "parallel pass: emitting %s: %s", what, ts_graph_error(p->lg));
}

static void set_scope(ts_parallel *p, int ni) {
  char scope[TS_GRAPH_MAX_SCOPE];
  scope[0] = 0;
  const char *nm = ni < 0 ? NULL : ts_graph_node_name(p->g, ni);
  const char *sl = nm ? strrchr(nm, '/') : NULL;
  if (sl) {
    size_t n = (size_t)(sl - nm);
    if (n >= sizeof scope) n = sizeof scope - 1;
    memcpy(scope, nm, n);
    scope[n] = 0;
  }
  ts_graph_set_scope(p->lg, scope);
}

/* ---- leaves ---- */

static int local_shape(const ts_layout *L, const ts_shape *gs, ts_shape *ls) {
  return ts_layout_local_shape(L, gs, ls);
}

static int emit_leaf(ts_parallel *p, int vi) {
  const ts__pval x_ = ts__pval_get(p->g, vi), *x = &x_;
  ts__vst *v = &p->v[vi];
  ts_shape ls;
  int rc = local_shape(&v->L, &v->gs, &ls);
  if (rc) return ts_error_wrap(rc, "parallel pass: value '%s'", x->name ? x->name : "?");
  char saved[TS_GRAPH_MAX_SCOPE];
  snprintf(saved, sizeof saved, "%s", ts_graph_scope(p->lg));
  ts_graph_set_scope(p->lg, "");
  ts_val h;
  if (x->kind == TS_VAL_INPUT) {
    h = ts_input(p->lg, x->name, x->dtype, ls);
    if (h != TS_NONE && x->no_grad) ts_val_set_requires_grad(p->lg, h, 0);
  } else {
    int lid = p->param_lp[x->param_id];
    h = x->kind == TS_VAL_STATE ? ts_state_value(p->lg, x->name, x->dtype, ls, lid)
                                : ts_param_value(p->lg, x->name, x->dtype, ls, lid);
    if (h != TS_NONE && x->no_grad) ts_val_set_requires_grad(p->lg, h, 0);
  }
  ts_graph_set_scope(p->lg, saved);
  if (h == TS_NONE) return lg_fail(p, x->name ? x->name : "a leaf");
  v->lv = vid(p, h);
  return TS_OK;
}

/* ---- redistribution ---- */

/* Emits the collectives taking local value `cur` (global shape gs) from layout `from` to `to`;
 * *res gets the new value index. */
static int emit_redist(ts_parallel *p, int cur, ts_dtype dt, const ts_shape *gs, const ts_layout *from,
                       const ts_layout *to, int *res) {
  *res = cur;
  if (ts_layout_equal(from, to)) return TS_OK;
  ts_redist_plan pl;
  size_t es = ts_dtype_size(dt);
  int rc = ts_redist_plan_make(gs, es ? es : 4, from, to, &pl);
  if (rc) return rc;
  if (pl.nops == 0) return TS_OK;
  ts_graph *lg = p->lg;
  ts_val h = ts_graph_value(lg, cur);
  int refined = !ts_shape_equal(&pl.shape, gs);
  if (refined) {
    ts_shape ls;
    if ((rc = local_shape(&pl.from, &pl.shape, &ls))) return rc;
    h = ts_reshape(lg, h, ls);
  }
  for (int k = 0; k < pl.nops; k++) {
    const ts_redist_op *op = &pl.ops[k];
    if (op->group <= 1) continue;
    int ax = op->kind == TS_REDIST_SLICE ? op->slice_axis : op->axis;
    int slot = ts__slot_for(p, &pl.from, ax);
    if (slot < 0) return slot;
    switch (op->kind) {
      case TS_REDIST_SLICE: h = ts_rank_slice(lg, h, slot, op->group, op->dim); break;
      case TS_REDIST_REDUCE_SCATTER: h = ts_reduce_scatter(lg, h, slot, op->group, op->dim, TS_REDUCE_SUM); break;
      case TS_REDIST_ALLREDUCE: h = ts_allreduce(lg, h, slot, op->group, TS_REDUCE_SUM); break;
      case TS_REDIST_ALLTOALL: h = ts_alltoall(lg, h, slot, op->group, op->dim, op->dim2); break;
      case TS_REDIST_ALLGATHER: h = ts_allgather(lg, h, slot, op->group, op->dim); break;
      default: return ts_error_set(TS_EINVAL, "parallel pass: unknown redistribution op %d", (int)op->kind);
    }
  }
  if (refined) {
    ts_shape ls;
    if ((rc = local_shape(to, gs, &ls))) return rc;
    h = ts_reshape(lg, h, ls);
  }
  if (h == TS_NONE) return lg_fail(p, "a redistribution");
  *res = vid(p, h);
  return TS_OK;
}

/* The rank's value of global value vi in layout `to`. */
static int convert(ts_parallel *p, int vi, const ts_layout *to, int *res) {
  ts__vst *v = &p->v[vi];
  int rc;
  if (v->lv < 0 && (rc = emit_leaf(p, vi))) return rc;
  if (ts_layout_equal(&v->L, to)) {
    *res = v->lv;
    return TS_OK;
  }
  for (int k = 0; k < v->nreach; k++)
    if (v->reach_lv[k] >= 0 && ts_layout_equal(&v->reach[k], to)) {
      *res = v->reach_lv[k];
      return TS_OK;
    }
  if ((rc = emit_redist(p, v->lv, ts_graph_value_dtype(p->g, vi), &v->gs, &v->L, to, res))) {
    const char *nm = ts_graph_value_name(p->g, vi);
    return ts_error_wrap(rc, "parallel pass: converting '%s'", nm ? nm : "value");
  }
  int k;
  for (k = 0; k < v->nreach; k++)
    if (ts_layout_equal(&v->reach[k], to)) break;
  if (k == v->nreach && v->nreach < TS__MAX_REACH) {
    v->reach[k] = *to;
    v->nreach++;
  }
  if (k < TS__MAX_REACH) v->reach_lv[k] = *res;
  return TS_OK;
}

/* ---- parameters ---- */

static int register_params(ts_parallel *p) {
  const ts_graph *g = p->g;
  int np = ts_params_count(p->gp);
  p->param_lp = malloc(sizeof(int) * (size_t)(np + 1));
  if (!p->param_lp) return ts_error_set(TS_ENOMEM, "parallel pass: out of memory");
  int *val_of = malloc(sizeof(int) * (size_t)(np + 1));
  if (!val_of) return ts_error_set(TS_ENOMEM, "parallel pass: out of memory");
  for (int i = 0; i < np; i++) val_of[i] = -1;
  for (int i = 0; i < ts_graph_num_values(g); i++)
    if (ts_graph_value_producer(g, i) < 0 && ts_graph_value_param_id(g, i) >= 0 && ts_graph_value_param_id(g, i) < np &&
        (ts_graph_value_kind(g, i) == TS_VAL_PARAM || ts_graph_value_kind(g, i) == TS_VAL_STATE))
      val_of[ts_graph_value_param_id(g, i)] = i;
  int rc = TS_OK;
  for (int i = 0; i < np && !rc; i++) {
    const char *name = ts_params_name(p->gp, i);
    ts_shape full = ts_params_shape(p->gp, i);
    ts_init init = ts_params_init_of(p->gp, i);
    int flags = ts_params_flags(p->gp, i);
    int vi = val_of[i], id;
    const ts_layout *L = vi >= 0 ? &p->v[vi].L : NULL;
    int cut = 0;
    if (L)
      for (int d = 0; d < L->ndim; d++) cut |= L->tmap[d] >= 0 && L->dev[L->tmap[d]] > 1;
    if (!cut && (!L || ts_shape_equal(&p->v[vi].gs, &full))) {
      id = ts_params_add(p->lp, name, full, init, flags);
    } else {
      id = ts_params_add_sharded(p->lp, name, p->v[vi].gs, L, p->rank, init, flags);
      if (id >= 0 && !ts_shape_equal(&p->v[vi].gs, &full)) rc = ts_params_set_init_shape(p->lp, id, full);
    }
    if (id < 0) rc = id;
    p->param_lp[i] = id;
    if (vi >= 0 && id >= 0) {
      ts_shape ls = ts_params_shape(p->lp, id);
      p->stats.param_bytes += (flags & TS_PARAM_STATE) ? 0 : ts_shape_numel(&ls) * 4;
    }
    if (!(flags & TS_PARAM_STATE)) p->stats.param_full_bytes += ts_shape_numel(&full) * 4;
  }
  free(val_of);
  return rc;
}

/* ---- operators ---- */

static int scale_value(ts_parallel *p, int v, float s) {
  ts_val h = ts_scale(p->lg, ts_graph_value(p->lg, v), s, 0.0f);
  return h == TS_NONE ? -1 : vid(p, h);
}

static int emit_node(ts_parallel *p, int ni) {
  const ts_graph *g = p->g;
  const ts__pnode nd_ = ts__pnode_get(g, ni), *nd = &nd_;
  ts__nst *ns = &p->n[ni];
  ts_graph *lg = p->lg;
  int li[TS_GRAPH_MAX_IO], rc;
  for (int k = 0; k < nd->nin; k++)
    if ((rc = convert(p, nd->in[k], &ns->req[k], &li[k]))) return ts_error_wrap(rc, "operator '%s'", ns->key);
  set_scope(p, ni);
  ts_attrs a = nd->a;
  ts_op op = nd->op;
  int nin = nd->nin, lout[TS_GRAPH_MAX_IO];
  int64_t off[TS_MAX_DIMS];
  switch (nd->op) {
    case TS_OP_ATTENTION: {
      /* a sequence cut: ring attention over the cut's ranks (their rows in order along the axis) */
      const ts_layout *l = &ns->req[0];
      const int layout = (int)ts_attr_attention_layout(&nd->a), td = layout == 1 ? 1 : 2;
      int ax = l->tmap[td];
      if (ax < 0 || l->dev[ax] <= 1) break;
      int slot = ts__slot_for(p, l, ax);
      if (slot < 0) return slot;
      float sc = ts_attr_attention_scale(&nd->a);
      memset(&a, 0, sizeof a);
      ts_attr_set_ring_attention_scale(&a, sc);
      ts_attr_set_ring_attention_layout(&a, layout);
      ts_attr_set_ring_attention_slot(&a, slot);
      ts_attr_set_ring_attention_group(&a, l->dev[ax]);
      /* the causal work balanced over the ring (zigzag order inside the op) when the rank's
       * rows halve */
      ts_attr_set_ring_attention_zigzag(&a, (p->v[nd->in[0]].gs.dims[td] / l->dev[ax]) % 2 == 0 ? 2 : 0);
      op = TS_OP_RING_ATTENTION;
      break;
    }
    case TS_OP_RESHAPE: {
      ts_shape ls;
      if ((rc = local_shape(&ns->out[0], &p->v[nd->out[0]].gs, &ls))) return rc;
      ts_attr_set_reshape_shape(&a, &ls);
      break;
    }
    case TS_OP_EMBEDDING: {
      const ts_layout *t = &ns->req[0];
      if (t->tmap[0] >= 0 && t->dev[t->tmap[0]] > 1) {
        ts_layout_offsets(t, &p->v[nd->in[0]].gs, p->rank, off);
        ts_attr_set_embedding_offset(&a, off[0]);
        ts_attr_set_embedding_sharded(&a, 1);
      }
      break;
    }
    case TS_OP_SOFTMAX_CE: {
      const ts_layout *l = &ns->req[0];
      if (l->tmap[1] >= 0 && l->dev[l->tmap[1]] > 1) {
        ts_layout_offsets(l, &p->v[nd->in[0]].gs, p->rank, off);
        ts_attr_set_softmax_ce_sync(&a, ts__slot_for(p, l, l->tmap[1]) + 1);
        ts_attr_set_softmax_ce_group(&a, l->dev[l->tmap[1]]);
        ts_attr_set_softmax_ce_offset(&a, off[1]);
        ts_attr_set_softmax_ce_classes(&a, p->v[nd->in[0]].gs.dims[1]);
      }
      break;
    }
    case TS_OP_BATCHNORM: {
      /* statistics summed over every axis that cuts the batch or the spatial dims */
      const ts_layout *l = &ns->req[0];
      ts_attr_set_batchnorm_sync(&a, 0);
      ts_attr_set_batchnorm_sync2(&a, 0);
      ts_attr_set_batchnorm_sync3(&a, 0);
      int ns_ = 0;
      for (int d = 0; d < l->ndim && ts_graph_training(g); d++) {
        if (d == 1 || l->tmap[d] < 0 || l->dev[l->tmap[d]] <= 1) continue;
        int slot = ts__slot_for(p, l, l->tmap[d]) + 1;
        if (ns_ == 0) ts_attr_set_batchnorm_sync(&a, slot);
        else if (ns_ == 1) ts_attr_set_batchnorm_sync2(&a, slot);
        else ts_attr_set_batchnorm_sync3(&a, slot);
        ns_++;
      }
      break;
    }
    case TS_OP_CONV2D: {
      /* a spatial cut: the neighbours' halo rows around the band, then no padding on that dim */
      const ts_layout *l = &ns->req[0];
      const ts_shape *xs = &p->v[nd->in[0]].gs, *ws = &p->v[nd->in[1]].gs;
      for (int k = 0; k < 2; k++) {
        int ax = l->tmap[2 + k], lo, hi;
        if (ax < 0 || l->dev[ax] <= 1) continue;
        int st = (int)(k ? ts_attr_conv2d_stride_w(&a) : ts_attr_conv2d_stride_h(&a));
        int pad = (int)(k ? ts_attr_conv2d_pad_w(&a) : ts_attr_conv2d_pad_h(&a));
        if ((rc = ts_conv2d_halo(xs->dims[2 + k], ws->dims[2 + k], st, pad, l->dev[ax], &lo, &hi)))
          return ts_error_wrap(rc, "operator '%s': x dim %d", ns->key, 2 + k);
        int slot = ts__slot_for(p, l, ax);
        if (slot < 0) return slot;
        ts_val h = ts_halo(lg, ts_graph_value(lg, li[0]), slot, l->dev[ax], 2 + k, lo, hi);
        if (h == TS_NONE) return lg_fail(p, ns->key);
        li[0] = vid(p, h);
        if (k) ts_attr_set_conv2d_pad_w(&a, 0);
        else ts_attr_set_conv2d_pad_h(&a, 0);
      }
      break;
    }
    case TS_OP_AVGPOOL2D: {
      /* global average over cut spatial dims: the mean of the rank's band (the sum over the
       * group, scaled below, is the global mean) */
      const ts_layout *l = &ns->req[0];
      const ts_shape *xs = &p->v[nd->in[0]].gs;
      for (int k = 0; k < 2; k++) {
        int ax = l->tmap[2 + k];
        if (ax < 0 || l->dev[ax] <= 1) continue;
        int64_t band = xs->dims[2 + k] / l->dev[ax];
        if (k) ts_attr_set_pool2d_kw(&a, band), ts_attr_set_pool2d_sw(&a, band);
        else ts_attr_set_pool2d_kh(&a, band), ts_attr_set_pool2d_sh(&a, band);
      }
      break;
    }
    case TS_OP_DROPOUT: {
      /* the slice's first element in the global numbering; cut in a dim k > 0 (sequence
       * parallelism: (batch, sequence/t, hidden)) it is runs over dims k.. (the dims after k
       * uncut), one per index of dims 0..k-1, run j starting j * (the global size of dims k..)
       * further (exact when dims 1..k-1 are uncut); cut in two dims a < k after the first
       * ((batch, sequence/c, hidden/t)), the runs come in groups, one per index of dims 0..a-1,
       * of the local size of dims a..k-1 runs each: group i starts i * (the global size of dims
       * a..) further (exact when the dims between are uncut); a third cut after the first is
       * refused */
      const ts_layout *l = &ns->req[0];
      const ts_shape *gs = &p->v[nd->in[0]].gs;
      ts_layout_offsets(l, gs, p->rank, off);
      int64_t st = 1, o = 0;
      for (int d = gs->ndim - 1; d >= 0; d--) {
        o += off[d] * st;
        st *= gs->dims[d];
      }
      ts_attr_set_dropout_offset(&a, ts_attr_dropout_offset(&nd->a) + o);
      int last = -1, first = -1, ncut = 0;
      for (int d = 1; d < gs->ndim; d++)
        if (l->tmap[d] >= 0 && l->dev[l->tmap[d]] > 1) {
          if (first < 0) first = d;
          last = d;
          ncut++;
        }
      if (ncut > 2)
        return ts_error_set(TS_EUNSUPPORTED, "parallel: operator '%s' (dropout): cut in %d dims after the first of %d; "
                            "a dropout input may be cut in dim 0 and two other dims", ns->key, ncut, gs->ndim);
      if (last > 0) {
        int64_t run = 1, stride = 1, grp = 1, gst = 1;
        for (int d = last; d < gs->ndim; d++) {
          int64_t c = l->tmap[d] >= 0 ? l->dev[l->tmap[d]] : 1;
          run *= gs->dims[d] / c;
          stride *= gs->dims[d];
        }
        ts_attr_set_dropout_run(&a, run);
        ts_attr_set_dropout_stride(&a, stride);
        if (ncut == 2) { /* groups over dims first..last-1 (the rank's sizes), one per index before */
          for (int d = first; d < gs->ndim; d++) {
            int64_t c = l->tmap[d] >= 0 ? l->dev[l->tmap[d]] : 1;
            if (d < last) grp *= gs->dims[d] / c;
            gst *= gs->dims[d];
          }
          ts_attr_set_dropout_group(&a, grp);
          ts_attr_set_dropout_gstride(&a, gst);
        }
      }
      break;
    }
    default:
      break;
  }
  if (ns->bias_after) nin = 2; /* dense/conv without its bias: added after the reduction */
  int node = ts_graph_add_node(lg, op, li, nin, nd->nout, &a);
  if (node < 0) return lg_fail(p, ns->key);
  for (int k = 0; k < nd->nout; k++) lout[k] = ts_graph_node_output(lg, node, k);
  if (ns->reduce_after) { /* all-reduced, or reduce-scattered onto the sequence */
    int y;
    if ((rc = emit_redist(p, lout[0], ts_graph_value_dtype(lg, lout[0]), &p->v[nd->out[0]].gs,
                          &ns->pre_bias, &ns->out[0], &y)))
      return ts_error_wrap(rc, "operator '%s': reducing the partial sums", ns->key);
    lout[0] = y;
  }
  if (ns->bias_after) {
    int y = lout[0];
    ts_val b = ts_graph_value(lg, li[2]);
    if (nd->op == TS_OP_CONV2D) {
      ts_shape bs = (*ts_graph_value_shape(lg, li[2]));
      b = ts_reshape(lg, b, ts_shape3(bs.dims[0], 1, 1));
    }
    ts_val h = ts_add(lg, ts_graph_value(lg, y), b);
    if (h == TS_NONE) return lg_fail(p, ns->key);
    lout[0] = vid(p, h);
  }
  /* means over cut rows: each rank's part divided by the cut, so the parts sum to the mean */
  if (nd->op == TS_OP_SOFTMAX_CE) {
    const ts_layout *l = &ns->req[0];
    int c = l->tmap[0] >= 0 ? l->dev[l->tmap[0]] : 1;
    if (c > 1 && (lout[0] = scale_value(p, lout[0], 1.0f / (float)c)) < 0) return lg_fail(p, ns->key);
  }
  if (nd->op == TS_OP_AVGPOOL2D) {
    const ts_layout *l = &ns->req[0];
    int c = 1;
    for (int d = 2; d < 4; d++)
      if (l->tmap[d] >= 0) c *= l->dev[l->tmap[d]];
    if (c > 1 && (lout[0] = scale_value(p, lout[0], 1.0f / (float)c)) < 0) return lg_fail(p, ns->key);
  }
  if (nd->op == TS_OP_REDUCE && ts_attr_reduce_alg(&nd->a) == TS_RED_MEAN) {
    const ts_layout *l = &ns->req[0];
    int c = 1;
    for (int d = 0; d < l->ndim; d++)
      if (((ts_attr_reduce_axes(&nd->a) >> d) & 1) && l->tmap[d] >= 0) c *= l->dev[l->tmap[d]];
    if (c > 1 && (lout[0] = scale_value(p, lout[0], 1.0f / (float)c)) < 0) return lg_fail(p, ns->key);
  }
  for (int k = 0; k < nd->nout; k++) p->v[nd->out[k]].lv = lout[k];
  return TS_OK;
}

/* ---- the strategies in force ---- */

static int record_inforce(ts_parallel *p) {
  int rc = ts_strategy_set_create(p->N, 0, &p->inforce);
  if (rc) return rc;
  for (int j = 0; j < p->nfwd && !rc; j++)
    if (p->n[j].sop >= 0) rc = ts_strategy_set_put(p->inforce, p->n[j].key, &p->n[j].st);
  const ts_graph *g = p->g;
  for (int i = 0; i < ts_graph_num_values(g) && !rc; i++) {
    if (ts_graph_value_producer(g, i) >= 0 || (ts_graph_value_kind(g, i) != TS_VAL_PARAM && ts_graph_value_kind(g, i) != TS_VAL_STATE))
      continue;
    ts_layout L = p->v[i].L;
    L.partial = 0;
    rc = ts_strategy_set_put_layout(p->inforce, ts_graph_value_name(g, i), &L, &p->v[i].gs);
  }
  return rc;
}

int ts__pass_emit(ts_parallel *p) {
  int rc;
  if ((rc = ts_graph_create(&p->lg)) || (rc = ts_params_create(&p->lp))) return rc;
  ts_graph_set_training(p->lg, ts_graph_training(p->g));
  if ((rc = register_params(p))) return rc;
  for (int j = 0; j < p->nfwd; j++)
    if ((rc = emit_node(p, j))) return rc;
  set_scope(p, -1);
  /* inputs nobody reads still exist on the rank (the caller binds them) */
  for (int i = 0; i < ts_graph_num_values(p->g); i++)
    if (ts_graph_value_kind(p->g, i) == TS_VAL_INPUT && p->v[i].lv < 0 && (rc = emit_leaf(p, i))) return rc;
  for (int k = 0; k < p->nouts; k++)
    if ((rc = convert(p, p->outs[k], &p->out_L[k], &p->out_lv[k]))) return rc;
  if (ts_graph_status(p->lg)) return lg_fail(p, "the graph");
  return record_inforce(p);
}
