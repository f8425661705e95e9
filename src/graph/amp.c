/* Mixed precision as a graph rewrite (include/tessera/graph.h, ts_graph_amp; docs/mixed-precision.md).
 *
 * The forward graph is copied node by node into a new graph; each node runs in the dtype its
 * class and the level give, and each float input that arrives in another dtype is cast first.
 * The copy keeps names, attributes, strategies and parameter ids, so the parallel pass, stage
 * cuts, recompute patterns and the parameter store see the same model; the casts are ordinary
 * CAST nodes, so autodiff differentiates them (an f32 parameter cast to bf16 gets an f32
 * gradient) and the memory planner sees their buffers.
 *
 *   class    ops                                             O1     O2               O3
 *   white    matmul, dense, conv2d, attention                low    low              low
 *   black    softmax/log-softmax, reduce, sum_to              f32    f32              low
 *   loss     softmax_ce (logits; the loss and lse are f32)    as the logits come     low
 *   norm     batchnorm, layernorm (x; gamma/beta)            f32    low x, f32 g/b   low
 *   other    eltwise, binary, scale, dropout, pooling,        f32    low              low
 *            embedding, broadcast_to
 *   follow   views, copies, concat/split/slice, collectives, p2p: the dtype of their first float
 *            input (others are cast to it); casts written in the model are kept, or folded.
 *
 * Casts: a temporary is cast once per dtype and the cast shared by all its consumers; a leaf
 * (parameter, input) is cast once per consumer node, so a pipeline stage cut never sends a cast
 * copy of a parameter between stages (a tied embedding is cast on each stage that reads it).
 * Folding: a value that is the widening of a 16-bit value (16-bit -> f32, exact) is not narrowed
 * again: its 16-bit original is used; a cast to the dtype a value already has is dropped.
 * State leaves (batch-norm running statistics) stay f32: the norm ops update them in f32.
 * softmax_ce (the loss) reads 16-bit logits natively at every level: its kernel widens each
 * row to f32 and computes the loss, lse and dlogits in f32, the same arithmetic as on an f32
 * copy (bit for bit: tests/kernels/test_softmax_bf16.c), so the cast of the logits to f32 and
 * of dlogits back (2 x 6 bytes per logit: the vocabulary-wide head's largest casts) is saved.
 * 16-bit parameters (ts__graph_amp_ex with TS__AMP_PARAMS_LOW, O2/O3): the trainable parameters'
 * leaves are `low` themselves (a store of 16-bit working weights whose f32 masters the optimizer
 * keeps: ZeRO's mixed-precision layout, docs/memory.md): the low ops read them with no cast, an
 * f32 op through a widening cast per consumer (the leaf rule), and their gradients are `low`
 * (a parameter read twice, a tied embedding, sums its two in `low`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_ir.h"
#include "graph_impl.h"

enum { AMP_FOLLOW, AMP_WHITE, AMP_BLACK, AMP_LOSS, AMP_NORM, AMP_OTHER, AMP_KEEP };

static int op_class(ts_op op) {
  switch (op) {
    case TS_OP_MATMUL: case TS_OP_DENSE: case TS_OP_CONV2D: case TS_OP_ATTENTION: case TS_OP_RING_ATTENTION:
      return AMP_WHITE;
    case TS_OP_SOFTMAX: case TS_OP_REDUCE: case TS_OP_SUM_TO:
      return AMP_BLACK;
    case TS_OP_SOFTMAX_CE:
      return AMP_LOSS;
    case TS_OP_BATCHNORM: case TS_OP_LAYERNORM:
      return AMP_NORM;
    case TS_OP_ELTWISE: case TS_OP_BINARY: case TS_OP_SCALE: case TS_OP_DROPOUT: case TS_OP_MAXPOOL2D:
    case TS_OP_AVGPOOL2D: case TS_OP_EMBEDDING: case TS_OP_BROADCAST_TO:
      return AMP_OTHER;
    case TS_OP_CAST: case TS_OP_CONST: case TS_OP_ONE_HOT:
      return AMP_KEEP;
    default: /* views, copies, concat/split/slice, collectives, p2p, and backward ops */
      return AMP_FOLLOW;
  }
}

/* The dtype the node computes in; -1: follow its inputs. */
static int class_dtype(int cls, int level, ts_dtype low) {
  switch (cls) {
    case AMP_WHITE: return (int)low;
    case AMP_BLACK: return level >= 3 ? (int)low : (int)TS_F32;
    case AMP_LOSS: return level >= 3 ? (int)low : -1; /* below O3: the logits' dtype, no cast */
    case AMP_NORM: case AMP_OTHER: return level >= 2 ? (int)low : (int)TS_F32;
    default: return -1;
  }
}

typedef struct {
  ts_graph *g, *h;  /* source, copy */
  int *map;         /* source value -> its value in h */
  int *memo;        /* source value * 3 + dtype slot -> a cast of it in h, -1 none */
  int level;
  ts_dtype low;
} amp_ctx;

static int dslot(ts_dtype dt) { return dt == TS_F32 ? 0 : dt == TS_BF16 ? 1 : 2; }

/* The source of h's value v if v is the exact widening (16-bit -> f32) of another value, else -1. */
static int widened_from(const ts_graph *h, int v) {
  int p = h->vals[v].producer;
  if (p < 0 || h->nodes[p].op != TS_OP_CAST || h->vals[v].dtype != TS_F32) return -1;
  int u = h->nodes[p].in[0];
  ts_dtype du = h->vals[u].dtype;
  return du == TS_BF16 || du == TS_F16 ? u : -1;
}

/* Adds a CAST of h's value v to dt, named in the scope of the consumer `name`. */
static int emit_cast(amp_ctx *c, int v, ts_dtype dt, const char *name) {
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_cast_dtype(&a, dt);
  int nd = ts__add_node(c->h, TS_OP_CAST, &v, 1, 1, &a);
  if (nd < 0) return -1;
  const char *slash = name ? strrchr(name, '/') : NULL;
  size_t n = slash ? (size_t)(slash - name) + 1 : 0;
  char *nm = malloc(n + 32);
  if (!nm) {
    ts__graph_fail(c->h, TS_ENOMEM, "amp: out of memory");
    return -1;
  }
  memcpy(nm, name, n);
  snprintf(nm + n, 32, "amp_cast_%d", nd);
  free(c->h->nodes[nd].name);
  c->h->nodes[nd].name = nm;
  return c->h->nodes[nd].out[0];
}

/* Source value s as consumer `name` needs it in dtype dt. */
static int value_as(amp_ctx *c, int s, ts_dtype dt, const char *name) {
  int v = c->map[s];
  if (c->h->vals[v].dtype == dt) return v;
  int w = widened_from(c->h, v);
  if (w >= 0 && c->h->vals[w].dtype == dt) return w; /* fold: narrowing a widening */
  int leaf = c->g->vals[s].producer < 0;
  int *m = &c->memo[s * 3 + dslot(dt)];
  if (!leaf && *m >= 0) return *m;
  int r = emit_cast(c, v, dt, name);
  if (!leaf) *m = r;
  return r;
}

static int copy_node(amp_ctx *c, int i) {
  const ts__node *n = &c->g->nodes[i];
  ts_graph *g = c->g, *h = c->h;
  int cls = op_class(n->op);
  int ins[TS_GRAPH_MAX_IO];
  int want = class_dtype(cls, c->level, c->low);
  if (cls == AMP_FOLLOW || cls == AMP_LOSS)
    for (int k = 0; k < n->nin && want < 0; k++)
      if (ts_dtype_is_float(h->vals[c->map[n->in[k]]].dtype) && g->vals[n->in[k]].kind != TS_VAL_STATE)
        want = (int)h->vals[c->map[n->in[k]]].dtype;
  if (cls == AMP_KEEP && n->op == TS_OP_CAST) { /* a cast written in the model: fold or keep */
    ts_dtype to = (ts_dtype)ts_attr_cast_dtype(&n->a);
    int v = c->map[n->in[0]], w = widened_from(h, v);
    if (h->vals[v].dtype == to || (w >= 0 && h->vals[w].dtype == to)) {
      c->map[n->out[0]] = h->vals[v].dtype == to ? v : w;
      return TS_OK;
    }
  }
  for (int k = 0; k < n->nin; k++) {
    int s = n->in[k];
    ts_dtype dt = h->vals[c->map[s]].dtype;
    int norm_param = cls == AMP_NORM && k > 0; /* gamma, beta (and running statistics) */
    if (want < 0 || !ts_dtype_is_float(dt) || g->vals[s].kind == TS_VAL_STATE || dt == (ts_dtype)want ||
        (norm_param && c->level < 3)) {
      ins[k] = c->map[s];
      continue;
    }
    if ((ins[k] = value_as(c, s, (ts_dtype)want, n->name)) < 0) return h->status;
  }
  int nd = ts__add_node(h, n->op, ins, n->nin, n->nout, &n->a);
  if (nd < 0) return h->status;
  ts__node *m = &h->nodes[nd];
  char *nm = strdup(n->name ? n->name : "");
  char *st = n->strategy ? strdup(n->strategy) : NULL;
  if (!nm || (n->strategy && !st)) {
    free(nm);
    free(st);
    return ts__graph_fail(h, TS_ENOMEM, "amp: out of memory");
  }
  free(m->name);
  m->name = nm;
  m->strategy = st;
  for (int k = 0; k < n->nout; k++) {
    c->map[n->out[k]] = m->out[k];
    h->vals[m->out[k]].no_grad |= g->vals[n->out[k]].no_grad;
  }
  return TS_OK;
}

int ts_graph_amp(ts_graph *g, int level, ts_dtype low, ts_val *vals, int nvals) {
  return ts__graph_amp_ex(g, level, low, 0, vals, nvals);
}

int ts__graph_amp_ex(ts_graph *g, int level, ts_dtype low, int flags, ts_val *vals, int nvals) {
  if (!g || (nvals && !vals)) return ts_error_set(TS_EINVAL, "ts_graph_amp: NULL argument");
  if (g->status) return g->status;
  if (level < 0 || level > 3)
    return ts__graph_fail(g, TS_EINVAL, "amp: level O%d: expected O0, O1, O2 or O3", level);
  if (level > 0 && low != TS_BF16 && low != TS_F16)
    return ts__graph_fail(g, TS_EDTYPE, "amp: the low dtype must be bf16 or f16, not %s", ts_dtype_name(low));
  if (g->grad)
    return ts__graph_fail(g, TS_EGRAPH, "amp: the graph already has its backward (run the pass before "
                          "ts_graph_backward)");
  int idx[TS_GRAPH_MAX_IO * 4];
  if (nvals > (int)(sizeof idx / sizeof idx[0]))
    return ts__graph_fail(g, TS_ERANGE, "amp: at most %d values to remap", (int)(sizeof idx / sizeof idx[0]));
  for (int k = 0; k < nvals; k++)
    if (vals[k] != TS_NONE && (idx[k] = ts__vidx(g, vals[k], "amp")) < 0) return g->status;
  if ((flags & TS__AMP_PARAMS_LOW) && level < 2)
    return ts__graph_fail(g, TS_EINVAL, "amp: 16-bit parameters need level O2 or O3 (not O%d): below, f32 ops would read "
                          "rounded weights", level);
  if (level == 0) return TS_OK;

  amp_ctx c = {g, NULL, NULL, NULL, level, low};
  int rc = ts_graph_create(&c.h);
  if (rc) return ts__graph_fail(g, rc, "amp: %s", ts_last_error());
  c.map = malloc(sizeof(int) * (size_t)(g->nvals ? g->nvals : 1));
  c.memo = malloc(sizeof(int) * 3 * (size_t)(g->nvals ? g->nvals : 1));
  if (!c.map || !c.memo) {
    rc = ts__graph_fail(g, TS_ENOMEM, "amp: out of memory");
    goto out;
  }
  for (int v = 0; v < g->nvals; v++) c.map[v] = -1;
  for (int v = 0; v < 3 * g->nvals; v++) c.memo[v] = -1;
  ts_graph *h = c.h;
  h->training = g->training;
  h->bn_sync = g->bn_sync;
  /* leaves first (their names are already scoped: copied verbatim) */
  for (int v = 0; v < g->nvals; v++) {
    const ts__value *s = &g->vals[v];
    if (s->producer >= 0) continue;
    ts_dtype dt = s->dtype; /* TS__AMP_PARAMS_LOW: a trainable parameter's leaf is 16-bit itself */
    if ((flags & TS__AMP_PARAMS_LOW) && s->kind == TS_VAL_PARAM && dt == TS_F32) dt = low;
    int u = ts__new_value(h, dt, s->shape, s->kind, NULL);
    if (u < 0) break;
    h->vals[u].param_id = s->param_id;
    h->vals[u].no_grad = s->no_grad;
    if (s->name && !(h->vals[u].name = strdup(s->name))) {
      ts__graph_fail(h, TS_ENOMEM, "amp: out of memory");
      break;
    }
    c.map[v] = u;
  }
  for (int i = 0; i < g->nnodes && !h->status; i++) copy_node(&c, i);
  /* the remapped values; a 16-bit logits or loss comes back in f32 (MindSpore's _OutputTo32) */
  for (int k = 0; k < nvals && !h->status; k++) {
    if (vals[k] == TS_NONE) continue;
    int v = c.map[idx[k]];
    ts_dtype dt = h->vals[v].dtype;
    if ((dt == TS_BF16 || dt == TS_F16) && (v = value_as(&c, idx[k], TS_F32, "amp_output")) < 0) break;
    idx[k] = v;
  }
  if (h->status) {
    rc = ts__graph_fail(g, h->status, "amp: %s", h->errmsg);
    goto out;
  }
  /* h takes g's place (g keeps its id: handles are tagged with it) */
  {
    ts_graph tmp = *g;
    uint32_t gid = g->id, hid = h->id;
    *g = *h;
    *h = tmp;
    g->id = gid;
    h->id = hid;
  }
  for (int k = 0; k < nvals; k++)
    if (vals[k] != TS_NONE) vals[k] = ts__handle(g, idx[k]);
out:
  free(c.map);
  free(c.memo);
  ts_graph_free(c.h);
  return rc;
}
