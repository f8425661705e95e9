/* Reverse-mode autodiff as a graph-to-graph pass. The per-op rules live with their ops
 * (ts__opdef.grad in src/graph/op_<family>.c); this file walks the graph backwards, calls them
 * and sums the gradients of values used several times. */
#include <stdlib.h>
#include <string.h>

#include "graph_ir.h"
#include "graph_impl.h"

static int fail_oom(ts_graph *g) { return ts__graph_fail(g, TS_ENOMEM, "backward: out of memory"); }

/* Backward nodes are named after the forward node they differentiate: nodes [from, g->nnodes)
 * get "<forward name>:bwd" (fc1/dense_1 -> fc1/dense_1:bwd; the profiler's tables and trace show
 * them so), instead of the generic "<op>_<index>" ts__add_node gave them. Several backward nodes
 * of one forward node (a dense's dx, dw and db) share the name; their ops tell them apart. */
static int name_backward(ts_graph *g, int from, const char *fwd) {
  if (!fwd) return TS_OK;
  size_t n = strlen(fwd);
  for (int j = from; j < g->nnodes; j++) {
    char *nm = malloc(n + sizeof ":bwd");
    if (!nm) return fail_oom(g);
    memcpy(nm, fwd, n);
    memcpy(nm + n, ":bwd", sizeof ":bwd");
    free(g->nodes[j].name);
    g->nodes[j].name = nm;
  }
  return TS_OK;
}

int ts_graph_backward(ts_graph *g, ts_val loss, float dloss) {
  if (!g) return ts_error_set(TS_EINVAL, "ts_graph_backward: null graph");
  if (g->status) return g->status;
  int L = ts__vidx(g, loss, "backward");
  if (L < 0) return g->status;
  char s[160];
  if (!ts_dtype_is_float(g->vals[L].dtype) || ts_shape_numel(&g->vals[L].shape) != 1)
    return ts__graph_fail(g, TS_ESHAPE, "backward: loss %s must be a float scalar",
                          ts__vstr(g, L, s, sizeof s));
  if (g->grad)
    return ts__graph_fail(g, TS_EGRAPH, "backward: the graph already has a backward pass");
  int nv = g->nvals, nfwd = g->nnodes;
  char *reach = calloc((size_t)nv, 1), *live = calloc((size_t)nv, 1);
  int *grad = malloc(sizeof(int) * (size_t)nv);
  if (!reach || !live || !grad) {
    free(reach); free(live); free(grad);
    return fail_oom(g);
  }
  for (int v = 0; v < nv; v++) grad[v] = -1;
  /* reach: the value depends (through differentiable ops) on a leaf that wants a gradient. */
  for (int v = 0; v < nv; v++) {
    const ts__value *x = &g->vals[v];
    if (x->producer < 0 && !x->no_grad && (x->kind == TS_VAL_PARAM || x->kind == TS_VAL_INPUT))
      reach[v] = 1;
  }
  for (int i = 0; i < nfwd; i++) {
    const ts__node *n = &g->nodes[i];
    int r = 0;
    if (ts__ops[n->op].grad)
      for (int k = 0; k < n->nin; k++) r |= reach[n->in[k]];
    /* a received activation wants its gradient like a leaf (the producing stage waits for it) */
    if (n->op == TS_OP_RECV) r = 1;
    for (int k = 0; k < n->nout; k++) reach[n->out[k]] = r && !g->vals[n->out[k]].no_grad;
  }
  /* live: the loss depends on the value. */
  live[L] = 1;
  for (int i = nfwd - 1; i >= 0; i--) {
    const ts__node *n = &g->nodes[i];
    int l = 0;
    for (int k = 0; k < n->nout; k++) l |= live[n->out[k]];
    if (l)
      for (int k = 0; k < n->nin; k++) live[n->in[k]] = 1;
  }
  int rc = TS_OK;
  if (!reach[L]) {
    rc = ts__graph_fail(g, TS_EGRAPH, "backward: loss %s does not depend on any parameter",
                        ts__vstr(g, L, s, sizeof s));
    goto done;
  }
  ts_attrs ca;
  memset(&ca, 0, sizeof ca);
  ts_attr_set_const_value(&ca, dloss);
  ts_attr_set_const_shape(&ca, &g->vals[L].shape);
  ts_attr_set_const_dtype(&ca, g->vals[L].dtype);
  {
    int seed = ts__add_node(g, TS_OP_CONST, NULL, 0, 1, &ca);
    if (seed < 0) { rc = g->status; goto done; }
    g->nodes[seed].is_backward = 1;
    grad[L] = g->nodes[seed].out[0];
    /* the seed d loss / d loss: named after the loss's producer ("loss" for a leaf) */
    int lp = g->vals[L].producer;
    if ((rc = name_backward(g, seed, lp >= 0 ? g->nodes[lp].name : "loss"))) goto done;
  }
  for (int i = nfwd - 1; i >= 0 && rc == TS_OK; i--) {
    ts__node n = g->nodes[i]; /* copy: the node array may grow while rules emit */
    int any_dy = 0, any_dx = 0;
    int dy[TS_GRAPH_MAX_IO], dx[TS_GRAPH_MAX_IO];
    for (int k = 0; k < n.nout; k++) {
      dy[k] = grad[n.out[k]];
      any_dy |= dy[k] >= 0;
    }
    for (int k = 0; k < n.nin; k++) {
      dx[k] = -1;
      any_dx |= reach[n.in[k]] && live[n.in[k]];
    }
    if (!any_dy || !any_dx) continue;
    if (!ts__ops[n.op].grad) continue;
    int first_new = g->nnodes;
    rc = ts__ops[n.op].grad(g, i, dy, dx);
    if (rc == TS_OK && g->status) rc = g->status;
    if (rc != TS_OK) {
      if (g->status == TS_OK) ts__graph_fail(g, rc, "backward of %s failed", n.name);
      break;
    }
    for (int j = first_new; j < g->nnodes; j++) {
      g->nodes[j].is_backward = 1;
    }
    for (int k = 0; k < n.nin; k++) {
      int in = n.in[k];
      if (dx[k] < 0 || !reach[in]) continue;
      if (!ts_shape_equal(&g->vals[dx[k]].shape, &g->vals[in].shape)) {
        char a[160], b[160];
        rc = ts__graph_fail(g, TS_EGRAPH, "backward of %s: gradient %s for input %d %s has the wrong shape",
                            n.name, ts__vstr(g, dx[k], a, sizeof a), k, ts__vstr(g, in, b, sizeof b));
        break;
      }
      if (grad[in] < 0) {
        grad[in] = dx[k];
      } else {
        int before = g->nnodes;
        grad[in] = ts__emit_add(g, grad[in], dx[k]);
        for (int j = before; j < g->nnodes; j++) g->nodes[j].is_backward = 1;
        if (grad[in] < 0) { rc = g->status ? g->status : TS_EGRAPH; break; }
      }
    }
    /* the rule's nodes and the sums of gradients it fed: the forward node's backward */
    if (rc == TS_OK) rc = name_backward(g, first_new, n.name);
  }
  if (rc == TS_OK) {
    g->grad = malloc(sizeof(int) * (size_t)g->nvals);
    if (!g->grad) {
      rc = fail_oom(g);
      goto done;
    }
    g->grad_len = g->nvals;
    for (int v = 0; v < g->nvals; v++) g->grad[v] = v < nv ? grad[v] : -1;
  }
done:
  free(reach);
  free(live);
  free(grad);
  return rc;
}

ts_val ts_graph_grad(const ts_graph *g, ts_val v) {
  int i = v & ((1 << TS__VAL_BITS) - 1);
  if (!g || !g->grad || v < 0 || i >= g->grad_len || g->grad[i] < 0) return TS_NONE;
  return ts__handle(g, g->grad[i]);
}

void ts_val_set_requires_grad(ts_graph *g, ts_val v, int requires) {
  int i = v & ((1 << TS__VAL_BITS) - 1);
  if (!g || v < 0 || i >= g->nvals) return;
  g->vals[i].no_grad = requires ? !ts_dtype_is_float(g->vals[i].dtype) : 1;
}
