/* Recomputation (activation checkpointing) as a graph pass, run after ts_graph_backward and
 * before planning. Backward nodes that read an activation produced inside a recompute segment
 * read a copy re-emitted (same op, same attributes, marked backward) just before the first of
 * them; the planner then frees the forward original after its last forward use.
 *
 * Segments: a pattern matches a node when it matches the node's first name parts (its op key,
 * "transformer.h.0.mlp.c_fc.dense", cut to as many '.'-parts as the pattern has; '*' is one
 * part); the matched prefix is the node's segment. Without patterns each node's segment is its
 * key up to its first all-digit part ("transformer.h.0"), or "" (the rest of the model). A value
 * is recomputed only if every forward consumer is in its producer's segment: values crossing a
 * segment boundary (and the loss's inputs) are the checkpoints that stay in memory, so a
 * re-emitted chain never leaves its segment. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "graph_ir.h"
#include "../base/text.h"
#include "graph_impl.h"

/* The op key of a node: its name with '/' as '.' and without the "_<index>" suffix. */
static void op_key(const char *nm, char *buf, size_t cap) {
  size_t n = strlen(nm);
  const char *us = strrchr(nm, '_'), *sl = strrchr(nm, '/');
  if (us && (!sl || us > sl) && isdigit((unsigned char)us[1])) n = (size_t)(us - nm);
  if (n >= cap) n = cap - 1;
  for (size_t i = 0; i < n; i++) buf[i] = nm[i] == '/' ? '.' : nm[i];
  buf[n] = 0;
}

static int num_parts(const char *s) {
  int n = 1;
  for (; *s; s++) n += *s == '.';
  return n;
}

/* Cuts key after its first `parts` parts (in place); 0 if it has fewer. */
static int cut_parts(char *key, int parts) {
  int seen = 1;
  for (char *c = key; *c; c++)
    if (*c == '.' && ++seen > parts) {
      *c = 0;
      return 1;
    }
  return seen == parts;
}

/* Default segment: up to and including the first all-digit part, else "". */
static void default_segment(char *key) {
  char *part = key;
  for (char *c = key;; c++) {
    if (*c == '.' || *c == 0) {
      int digits = c > part;
      for (char *d = part; d < c; d++) digits &= isdigit((unsigned char)*d) != 0;
      if (digits) {
        *c = 0;
        return;
      }
      if (!*c) break;
      part = c + 1;
    }
  }
  key[0] = 0;
}

static int never_recomputed(const ts_graph *g, const ts__node *n, int mode) {
  switch (n->op) {
    case TS_OP_ALLREDUCE:      /* tensor/context parallelism's collectives: redone by full */
    case TS_OP_REDUCE_SCATTER: /* recomputation only (Megatron reruns the layer's forward, its */
    case TS_OP_ALLTOALL:       /* all-reduces included: else their outputs stay as checkpoints) */
    case TS_OP_RING_ATTENTION: /* (context parallelism: the ring's exchanges) */
      return mode != TS_RECOMPUTE_FULL;
    case TS_OP_BATCHNORM:      /* updates running statistics: once per step */
    case TS_OP_SOFTMAX_CE:     /* the loss */
    case TS_OP_RANK_SLICE:
    case TS_OP_HALO:
    case TS_OP_SEND:           /* pipeline stage cuts */
    case TS_OP_RECV:
      return 1;
    default: break;
  }
  for (int k = 0; k < n->nin; k++)
    if (g->vals[n->in[k]].kind == TS_VAL_STATE) return 1;
  return 0;
}

/* Cheap to redo compared to matmul/conv (Megatron's selective recompute). */
static int cheap(ts_op op) {
  switch (op) {
    case TS_OP_CONST: case TS_OP_CAST: case TS_OP_COPY: case TS_OP_LAYERNORM: case TS_OP_ELTWISE:
    case TS_OP_SOFTMAX: case TS_OP_BINARY: case TS_OP_SCALE: case TS_OP_BROADCAST_TO:
    case TS_OP_RESHAPE: case TS_OP_PERMUTE: case TS_OP_CONCAT: case TS_OP_SPLIT: case TS_OP_SLICE:
    case TS_OP_DROPOUT: case TS_OP_ONE_HOT:
    case TS_OP_ALLGATHER: /* sequence parallelism's gather of the sequence: gathered again, not kept */
      return 1;
    default: return 0;
  }
}

/* Ops that make a parameter-derived value from parameter-derived inputs (below). */
static int param_shape_op(ts_op op) {
  switch (op) {
    case TS_OP_CONST: case TS_OP_CAST: case TS_OP_COPY: case TS_OP_RESHAPE: case TS_OP_PERMUTE:
    case TS_OP_SPLIT: case TS_OP_SLICE: case TS_OP_CONCAT: case TS_OP_BROADCAST_TO:
      return 1;
    default: return 0;
  }
}

typedef struct {
  ts_graph *g;
  int n0;          /* nodes before the pass */
  char *rec;       /* per original value: backward reads a recomputed copy */
  int *clone;      /* per original node: its copy, -1 none yet */
} rctx;

/* The copy of original value v (recomputed if rec[v], else v itself); -1 on error. */
static int clone_value(rctx *c, int v);

static int clone_node(rctx *c, int p) {
  if (c->clone[p] >= 0) return c->clone[p];
  ts_graph *g = c->g;
  ts__node src = g->nodes[p]; /* copy: the array grows */
  int ins[TS_GRAPH_MAX_IO];
  for (int k = 0; k < src.nin; k++)
    if ((ins[k] = clone_value(c, src.in[k])) < 0) return -1;
  int ni = ts__add_node(g, src.op, ins, src.nin, src.nout, &src.a);
  if (ni < 0) return -1;
  ts__node *n = &g->nodes[ni];
  n->is_backward = 1;
  size_t len = strlen(src.name) + sizeof ":recompute";
  char *nm = malloc(len);
  if (!nm) {
    ts__graph_fail(g, TS_ENOMEM, "recompute: out of memory");
    return -1;
  }
  memcpy(nm, src.name, strlen(src.name));
  memcpy(nm + strlen(src.name), ":recompute", sizeof ":recompute");
  free(n->name);
  n->name = nm;
  c->clone[p] = ni;
  return ni;
}

static int clone_value(rctx *c, int v) {
  if (v >= c->g->nvals || !c->rec[v]) return v;
  int p = c->g->vals[v].producer;
  int ni = clone_node(c, p);
  return ni < 0 ? -1 : c->g->nodes[ni].out[c->g->vals[v].out_index];
}

int ts_graph_recompute(ts_graph *g, const char *const *patterns, int npat, int mode) {
  if (!g) return ts_error_set(TS_EINVAL, "ts_graph_recompute: null graph");
  if (g->status) return g->status;
  const int regather = (mode & TS_RECOMPUTE_REGATHER) != 0;
  mode &= ~TS_RECOMPUTE_REGATHER;
  if (mode != TS_RECOMPUTE_NONE && mode != TS_RECOMPUTE_FULL && mode != TS_RECOMPUTE_SELECTIVE)
    return ts_graph_fail(g, TS_EINVAL, "recompute: unknown mode %d (none 0, full 1, selective 2)", mode);
  if (!g->grad) {
    if (mode == TS_RECOMPUTE_NONE) return TS_OK;
    return ts_graph_fail(g, TS_EGRAPH, "recompute: run ts_graph_backward first");
  }
  if (mode == TS_RECOMPUTE_NONE) npat = 0; /* no segments: only the values below */
  if (npat < 0 || (npat > 0 && !patterns))
    return ts_graph_fail(g, TS_EINVAL, "recompute: bad pattern list");
  const int n0 = g->nnodes, nv0 = g->nvals;
  int rc = TS_OK;
  rctx c = {g, n0, calloc((size_t)nv0 + 1, 1), malloc(sizeof(int) * ((size_t)n0 + 1))};
  int *seg = malloc(sizeof(int) * ((size_t)n0 + 1));
  char *mark = calloc((size_t)n0 + 1, 1), *cross = calloc((size_t)nv0 + 1, 1);
  char (*segs)[160] = malloc(sizeof *segs * ((size_t)n0 + 1));
  char *hit = calloc((size_t)npat + 1, 1);
  int *order = malloc(sizeof(int) * ((size_t)2 * n0 + 1));
  int nsegs = 0;
  if (!c.rec || !c.clone || !seg || !mark || !cross || !segs || !hit || !order) {
    rc = ts_graph_fail(g, TS_ENOMEM, "recompute: out of memory");
    goto done;
  }
  /* segments and marks of forward nodes */
  for (int i = 0; i < n0; i++) {
    c.clone[i] = -1;
    seg[i] = -1;
    const ts__node *n = &g->nodes[i];
    if (n->is_backward) continue;
    char key[160];
    op_key(n->name ? n->name : "", key, sizeof key);
    int found = npat == 0;
    if (npat == 0) default_segment(key);
    for (int k = 0; k < npat && !found; k++) {
      char cut[160];
      memcpy(cut, key, sizeof cut);
      if (patterns[k] && cut_parts(cut, num_parts(patterns[k])) && ts__name_match(patterns[k], cut)) {
        found = 1;
        hit[k] = 1;
        memcpy(key, cut, sizeof key);
      }
    }
    if (!found || mode == TS_RECOMPUTE_NONE) continue;
    int s = 0;
    while (s < nsegs && strcmp(segs[s], key)) s++;
    if (s == nsegs) memcpy(segs[nsegs++], key, sizeof key);
    seg[i] = s;
    mark[i] = !never_recomputed(g, n, mode) && (mode == TS_RECOMPUTE_FULL || cheap(n->op));
  }
  for (int k = 0; k < npat; k++)
    if (!hit[k]) {
      rc = ts_graph_fail(g, TS_ENOTFOUND, "recompute: pattern '%s' matches no operator (names are scopes "
                         "joined by '.' and the op, e.g. 'transformer.h.0.mlp.c_fc.dense')",
                         patterns[k] ? patterns[k] : "(null)");
      goto done;
    }
  /* values read by a forward node of another segment stay (checkpoints) */
  for (int i = 0; i < n0; i++) {
    const ts__node *n = &g->nodes[i];
    if (n->is_backward) continue;
    for (int k = 0; k < n->nin; k++) {
      int p = g->vals[n->in[k]].producer;
      /* the loss's inputs too: backward starts right after it, a copy would save nothing */
      if (p >= 0 && (seg[p] < 0 || seg[p] != seg[i] || n->op == TS_OP_SOFTMAX_CE)) cross[n->in[k]] = 1;
    }
  }
  for (int i = 0; i < n0; i++) {
    const ts__node *n = &g->nodes[i];
    if (!mark[i]) continue;
    for (int k = 0; k < n->nout; k++) {
      int v = n->out[k];
      /* a view of a value that stays costs nothing: backward reads it */
      c.rec[v] = !cross[v] && (!ts__ops[n->op].view || c.rec[n->in[0]]);
    }
  }
  /* At every mode: values made from parameters alone by cheap ops (amp's 16-bit weights, the
   * pieces of a split weight, broadcast biases) are made again from the parameters, whose bytes
   * stay anyway; with TS_RECOMPUTE_REGATHER the all-gathers of activations are gathered again
   * from the slice they gathered (which then stays). A view of such a value is made again too
   * (else it would keep its original alive). `cross` does not apply: their inputs stay. */
  {
    char *pd = calloc((size_t)nv0 + 1, 1); /* per value: made from parameters alone */
    if (!pd) {
      rc = ts_graph_fail(g, TS_ENOMEM, "recompute: out of memory");
      goto done;
    }
    for (int v = 0; v < nv0; v++) pd[v] = g->vals[v].kind == TS_VAL_PARAM;
    for (int i = 0; i < n0; i++) {
      const ts__node *n = &g->nodes[i];
      if (n->is_backward) continue;
      int from_params = param_shape_op(n->op), any_rec = 0;
      for (int k = 0; k < n->nin; k++) {
        from_params &= pd[n->in[k]];
        any_rec |= c.rec[n->in[k]];
      }
      int again = from_params || (regather && n->op == TS_OP_ALLGATHER && n->nin == 1 && !pd[n->in[0]]) ||
                  (ts__ops[n->op].view && any_rec);
      for (int k = 0; k < n->nout; k++) {
        pd[n->out[k]] = (char)from_params;
        if (again) c.rec[n->out[k]] = 1;
      }
    }
    free(pd);
  }
  /* backward nodes read the copies, emitted before the first of them */
  int *owner_end = malloc(sizeof(int) * ((size_t)n0 + 1)); /* nodes count after node i's copies */
  if (!owner_end) {
    rc = ts_graph_fail(g, TS_ENOMEM, "recompute: out of memory");
    goto done;
  }
  for (int i = 0; i < n0 && rc == TS_OK; i++) {
    owner_end[i] = g->nnodes;
    if (!g->nodes[i].is_backward) continue;
    int nin = g->nodes[i].nin;
    for (int k = 0; k < nin; k++) {
      int v = g->nodes[i].in[k];
      if (v >= nv0 || !c.rec[v]) continue;
      int nv = clone_value(&c, v);
      if (nv < 0) {
        rc = g->status ? g->status : TS_EGRAPH;
        break;
      }
      g->nodes[i].in[k] = nv;
      if (k == 0 && ts__ops[g->nodes[i].op].view)
        for (int o = 0; o < g->nodes[i].nout; o++)
          if (g->vals[g->nodes[i].out[o]].alias_of == v) g->vals[g->nodes[i].out[o]].alias_of = nv;
    }
    owner_end[i] = g->nnodes;
  }
  if (rc == TS_OK && g->nnodes > n0) {
    /* order: forward as is; before each backward node, the copies emitted for it */
    int m = 0, next = n0;
    for (int i = 0; i < n0; i++) {
      while (next < owner_end[i]) order[m++] = next++;
      order[m++] = i;
    }
    ts__node *tmp = malloc(sizeof(ts__node) * (size_t)m);
    if (!tmp) {
      rc = ts_graph_fail(g, TS_ENOMEM, "recompute: out of memory");
    } else {
      for (int k = 0; k < m; k++) tmp[k] = g->nodes[order[k]];
      memcpy(g->nodes, tmp, sizeof(ts__node) * (size_t)m);
      free(tmp);
      for (int k = 0; k < m; k++)
        for (int o = 0; o < g->nodes[k].nout; o++) g->vals[g->nodes[k].out[o]].producer = k;
    }
  }
  free(owner_end);
done:
  free(c.rec);
  free(c.clone);
  free(seg);
  free(mark);
  free(cross);
  free(segs);
  free(hit);
  free(order);
  return rc;
}
