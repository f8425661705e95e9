/* Pipeline stage cuts (src/parallel/stage.h): assigning nodes to pieces, and building one
 * piece's graph with SEND/RECV on its cut edges. Pure: graphs and stores only. */
#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/text.h"
#include "graph/graph_ir.h"
#include "parallel/parallel.h"
#include "parallel/stage.h"

/* ---- assignment ---- */

static int producer(const ts_graph *g, int v) { return ts_graph_value_producer(g, v); }

/* Cost of a node for balancing: FLOPs plus 10 per byte written (memory-bound ops). */
static double node_cost(const ts_graph *g, int j) {
  double bytes = 0;
  for (int k = 0; k < ts_graph_node_num_outputs(g, j); k++) {
    int v = ts_graph_node_output(g, j, k);
    if (ts_graph_value_alias_of(g, v) >= 0) continue; /* views write nothing */
    bytes += (double)ts_shape_numel(ts_graph_value_shape(g, v)) * (double)ts_dtype_size(ts_graph_value_dtype(g, v));
  }
  return ts_graph_node_flops(g, j) + 10 * bytes;
}

void ts_stage_costs(const ts_graph *g, const int *piece, int npieces, double *cost) {
  for (int k = 0; k < npieces; k++) cost[k] = 0;
  for (int j = 0; j < ts_graph_num_nodes(g); j++)
    if (piece[j] >= 0 && piece[j] < npieces) cost[piece[j]] += node_cost(g, j);
}

/* A value flowing backwards, or an empty piece: the first such, as an error. */
static int validate(const ts_graph *g, const int *piece, int npieces, const char *key) {
  int n = ts_graph_num_nodes(g);
  int *count = calloc((size_t)npieces, sizeof(int));
  if (!count) return ts_error_set(TS_ENOMEM, "%s: out of memory", key);
  for (int j = 0; j < n; j++) {
    count[piece[j]]++;
    for (int k = 0; k < ts_graph_node_num_inputs(g, j); k++) {
      int p = producer(g, ts_graph_node_input(g, j, k));
      if (p >= 0 && piece[p] > piece[j]) {
        free(count);
        return ts_error_set(TS_ECONFIG,
                            "%s: op %s is on stage %d but reads the output of op %s on the later stage %d "
                            "(values may only flow to the same or a later stage)",
                            key, ts_graph_node_name(g, j), piece[j], ts_graph_node_name(g, p), piece[p]);
      }
    }
  }
  for (int k = 0; k < npieces; k++)
    if (!count[k]) {
      free(count);
      return ts_error_set(TS_ECONFIG, "%s: stage %d of %d gets no operator", key, k, npieces);
    }
  free(count);
  return TS_OK;
}

/* Unassigned nodes (-1) follow their inputs' latest piece; those reading only leaves take their
 * first consumer's piece; what remains goes to piece 0. */
static void fill_free(const ts_graph *g, int *piece) {
  int n = ts_graph_num_nodes(g);
  for (int j = 0; j < n; j++) {
    if (piece[j] >= 0) continue;
    int best = -1;
    for (int k = 0; k < ts_graph_node_num_inputs(g, j); k++) {
      int p = producer(g, ts_graph_node_input(g, j, k));
      if (p >= 0 && piece[p] > best) best = piece[p];
    }
    piece[j] = best >= 0 ? best : -2; /* -2: leaves only, decided by its consumers */
  }
  for (int j = n - 1; j >= 0; j--) {
    if (piece[j] != -2) continue;
    int first = -1;
    for (int c = j + 1; c < n && first < 0; c++)
      for (int k = 0; k < ts_graph_node_num_inputs(g, c); k++)
        if (producer(g, ts_graph_node_input(g, c, k)) == j && piece[c] >= 0) {
          first = piece[c];
          break;
        }
    piece[j] = first >= 0 ? first : 0;
  }
}

static int assign_rules(const ts_graph *g, int npieces, const ts_stage_rule *rules, int nrules, int *piece) {
  int n = ts_graph_num_nodes(g);
  int *who = malloc(sizeof(int) * (size_t)(n ? n : 1));
  if (!who) return ts_error_set(TS_ENOMEM, "parallel.stages: out of memory");
  for (int r = 0; r < nrules; r++)
    if (rules[r].piece < 0 || rules[r].piece >= npieces) {
      free(who);
      return ts_error_set(TS_ECONFIG, "parallel.stages: '%s' is given stage %d; stages are 0..%d", rules[r].pattern,
                          rules[r].piece, npieces - 1);
    }
  int *used = calloc((size_t)(nrules ? nrules : 1), sizeof(int));
  if (!used) {
    free(who);
    return ts_error_set(TS_ENOMEM, "parallel.stages: out of memory");
  }
  for (int j = 0; j < n; j++) {
    piece[j] = -1;
    who[j] = -1;
    /* the operator's name as parallel.strategies and `tessera plan` write it; a pattern of k
     * parts matches its first k parts ("transformer.h.0" covers the block) */
    char nm[512], cut[512];
    ts_parallel_op_key(g, j, nm, sizeof nm);
    for (int r = 0; r < nrules; r++) {
      int parts = 1;
      for (const char *c = rules[r].pattern; *c; c++) parts += *c == '.';
      snprintf(cut, sizeof cut, "%s", nm);
      int seen = 1;
      for (char *c = cut; *c; c++)
        if (*c == '.' && ++seen > parts) {
          *c = 0;
          break;
        }
      if (seen < parts || !ts__name_match(rules[r].pattern, cut)) continue;
      used[r] = 1;
      if (piece[j] >= 0 && piece[j] != rules[r].piece) {
        int rc = ts_error_set(TS_ECONFIG,
                              "parallel.stages: op %s is assigned twice: stage %d by '%s' and stage %d by '%s'", nm,
                              piece[j], rules[who[j]].pattern, rules[r].piece, rules[r].pattern);
        free(who);
        free(used);
        return rc;
      }
      piece[j] = rules[r].piece;
      who[j] = r;
    }
  }
  for (int r = 0; r < nrules; r++)
    if (!used[r]) {
      int rc = ts_error_set(TS_ECONFIG, "parallel.stages: '%s' matches no operator of the model", rules[r].pattern);
      free(who);
      free(used);
      return rc;
    }
  free(who);
  free(used);
  fill_free(g, piece);
  return validate(g, piece, npieces, "parallel.stages");
}

/* Balanced cut: cut points are the positions (between node c-1 and c) crossed by the fewest
 * activations; among them, the P-1 that minimise the largest piece's cost (dynamic program). */
static int assign_auto(const ts_graph *g, int npieces, int *piece) {
  int n = ts_graph_num_nodes(g), rc = TS_OK;
  if (npieces == 1) {
    for (int j = 0; j < n; j++) piece[j] = 0;
    return TS_OK;
  }
  int *cross = calloc((size_t)n + 1, sizeof(int)), *cand = malloc(sizeof(int) * (size_t)(n + 1));
  double *pre = calloc((size_t)n + 1, sizeof(double));
  if (!cross || !cand || !pre) {
    rc = ts_error_set(TS_ENOMEM, "parallel.pipeline_stages: out of memory");
    goto done;
  }
  /* crossing count by a difference array: value of node p last read by node L crosses p+1..L */
  int *last = malloc(sizeof(int) * (size_t)ts_graph_num_values(g));
  if (!last) {
    rc = ts_error_set(TS_ENOMEM, "parallel.pipeline_stages: out of memory");
    goto done;
  }
  for (int v = 0; v < ts_graph_num_values(g); v++) last[v] = -1;
  for (int j = 0; j < n; j++)
    for (int k = 0; k < ts_graph_node_num_inputs(g, j); k++) last[ts_graph_node_input(g, j, k)] = j;
  for (int v = 0; v < ts_graph_num_values(g); v++) {
    int p = producer(g, v);
    if (p >= 0 && last[v] > p) {
      cross[p + 1]++;
      cross[last[v] + 1]--;
    }
  }
  free(last);
  for (int c = 1; c <= n; c++) cross[c] += cross[c - 1];
  for (int j = 0; j < n; j++) pre[j + 1] = pre[j] + node_cost(g, j);
  int minc = 1 << 30;
  for (int c = 1; c < n; c++)
    if (cross[c] < minc) minc = cross[c];
  /* widen the crossing bound until there are enough cut points */
  int nc = 0;
  for (int bound = minc; nc < npieces - 1 && bound <= minc + 64; bound++) {
    nc = 0;
    for (int c = 1; c < n; c++)
      if (cross[c] <= bound) cand[nc++] = c;
  }
  if (nc < npieces - 1) {
    rc = ts_error_set(TS_ECONFIG,
                      "parallel.pipeline_stages: %d stages, but the model has only %d places to cut (%d operators); "
                      "use fewer stages",
                      npieces, nc + 1, n);
    goto done;
  }
  {
    /* best[s][i]: the least largest cost of s+1 pieces covering nodes [0, cand[i]) (i < nc),
     * with the last cut at cand[i]; the last piece runs to n */
    int P = npieces;
    double *best = malloc(sizeof(double) * (size_t)P * (size_t)nc);
    int *from = malloc(sizeof(int) * (size_t)P * (size_t)nc);
    if (!best || !from) {
      free(best);
      free(from);
      rc = ts_error_set(TS_ENOMEM, "parallel.pipeline_stages: out of memory");
      goto done;
    }
    for (int i = 0; i < nc; i++) {
      best[i] = pre[cand[i]];
      from[i] = -1;
    }
    for (int s = 1; s < P - 1; s++)
      for (int i = 0; i < nc; i++) {
        double b = DBL_MAX;
        int f = -1;
        for (int q = s - 1; q < i; q++) {
          double prev = best[(size_t)(s - 1) * (size_t)nc + (size_t)q];
          if (prev == DBL_MAX) continue;
          double piece_cost = pre[cand[i]] - pre[cand[q]], m = prev > piece_cost ? prev : piece_cost;
          if (m < b) {
            b = m;
            f = q;
          }
        }
        best[(size_t)s * (size_t)nc + (size_t)i] = b;
        from[(size_t)s * (size_t)nc + (size_t)i] = f;
      }
    /* the last cut */
    double b = DBL_MAX;
    int li = -1;
    for (int i = P - 2; i < nc; i++) {
      double prev = best[(size_t)(P - 2) * (size_t)nc + (size_t)i];
      if (prev == DBL_MAX) continue;
      double tail = pre[n] - pre[cand[i]], m = prev > tail ? prev : tail;
      if (m < b) {
        b = m;
        li = i;
      }
    }
    int *cuts = malloc(sizeof(int) * (size_t)P);
    if (!cuts || li < 0) {
      free(best);
      free(from);
      free(cuts);
      rc = cuts ? ts_error_set(TS_ECONFIG, "parallel.pipeline_stages: no balanced cut into %d stages", P)
                : ts_error_set(TS_ENOMEM, "parallel.pipeline_stages: out of memory");
      goto done;
    }
    cuts[P - 1] = n;
    for (int s = P - 2, i = li; s >= 0; s--) {
      cuts[s] = cand[i];
      i = from[(size_t)s * (size_t)nc + (size_t)i];
    }
    for (int s = 0, j = 0; s < P; s++)
      for (; j < cuts[s]; j++) piece[j] = s;
    free(cuts);
    free(best);
    free(from);
  }
  rc = validate(g, piece, npieces, "parallel.pipeline_stages");
done:
  free(cross);
  free(cand);
  free(pre);
  return rc;
}

int ts_stage_assign(const ts_graph *g, int npieces, const ts_stage_rule *rules, int nrules, int *piece) {
  if (npieces < 1) return ts_error_set(TS_ECONFIG, "parallel.pipeline_stages: %d pieces; at least 1", npieces);
  if (ts_graph_num_nodes(g) < npieces)
    return ts_error_set(TS_ECONFIG, "parallel.pipeline_stages: %d stages for a model of %d operators", npieces,
                        ts_graph_num_nodes(g));
  return nrules > 0 ? assign_rules(g, npieces, rules, nrules, piece) : assign_auto(g, npieces, piece);
}

static uint64_t name_hash(const char *s) {
  return ts__fnv1a_str(TS__FNV1A_BASIS, s);
}

int ts_stage_assign_like(const ts_graph *ref, const int *ref_piece, const ts_graph *g, int npieces, int *piece) {
  int n = ts_graph_num_nodes(g), nr = ts_graph_num_nodes(ref);
  /* names are unique per graph: each node takes its namesake's piece, found through a hash of the
   * reference's names (a scan per node was quadratic where g has nodes ref lacks: a search
   * building hundreds of plans of a deep model spent a third of its time here, #33) */
  size_t cap = 16;
  while (cap < 2 * (size_t)nr + 1) cap *= 2;
  int *slot = malloc(sizeof(int) * cap);
  if (!slot) return ts_error_set(TS_ENOMEM, "stage cut: out of memory");
  for (size_t i = 0; i < cap; i++) slot[i] = -1;
  for (int r = 0; r < nr; r++) {
    size_t h = (size_t)name_hash(ts_graph_node_name(ref, r)) & (cap - 1);
    while (slot[h] >= 0) h = (h + 1) & (cap - 1);
    slot[h] = r;
  }
  for (int j = 0; j < n; j++) {
    piece[j] = -1;
    const char *nm = ts_graph_node_name(g, j);
    for (size_t h = (size_t)name_hash(nm) & (cap - 1); slot[h] >= 0; h = (h + 1) & (cap - 1))
      if (!strcmp(ts_graph_node_name(ref, slot[h]), nm)) {
        piece[j] = ref_piece[slot[h]];
        break;
      }
  }
  free(slot);
  fill_free(g, piece);
  /* an evaluation graph may lack the last pieces' loss-only nodes: do not require every piece */
  for (int j = 0; j < n; j++)
    for (int k = 0; k < ts_graph_node_num_inputs(g, j); k++) {
      int p = producer(g, ts_graph_node_input(g, j, k));
      if (p >= 0 && piece[p] > piece[j]) piece[j] = piece[p]; /* follow, never send backwards */
    }
  (void)npieces;
  return TS_OK;
}

/* ---- edges ---- */

int ts_stage_edges(const ts_graph *g, const int *piece, ts_stage_edge **out, int *nedges) {
  int n = ts_graph_num_nodes(g), nv = ts_graph_num_values(g), cap = 16, ne = 0;
  ts_stage_edge *e = malloc(sizeof *e * (size_t)cap);
  char *seen = NULL;
  *out = NULL;
  *nedges = 0;
  if (!e) return ts_error_set(TS_ENOMEM, "stage cut: out of memory");
  /* (value, to) pairs in value order, then piece order */
  int maxp = 0;
  for (int j = 0; j < n; j++) maxp = piece[j] > maxp ? piece[j] : maxp;
  seen = calloc((size_t)maxp + 1, 1);
  if (!seen) {
    free(e);
    return ts_error_set(TS_ENOMEM, "stage cut: out of memory");
  }
  /* a simple O(values x nodes) scan is too slow for big graphs: bucket readers per value */
  int *head = malloc(sizeof(int) * (size_t)(nv ? nv : 1)), nin = 0;
  for (int j = 0; j < n; j++) nin += ts_graph_node_num_inputs(g, j);
  int *next = malloc(sizeof(int) * (size_t)(nin ? nin : 1)), *rnode = malloc(sizeof(int) * (size_t)(nin ? nin : 1));
  if (!head || !next || !rnode) {
    free(e), free(seen), free(head), free(next), free(rnode);
    return ts_error_set(TS_ENOMEM, "stage cut: out of memory");
  }
  for (int v = 0; v < nv; v++) head[v] = -1;
  for (int j = n - 1, q = 0; j >= 0; j--)
    for (int k = 0; k < ts_graph_node_num_inputs(g, j); k++, q++) {
      int v = ts_graph_node_input(g, j, k);
      rnode[q] = j;
      next[q] = head[v];
      head[v] = q;
    }
  for (int v = 0; v < nv; v++) {
    int p = producer(g, v);
    if (p < 0) continue;
    memset(seen, 0, (size_t)maxp + 1);
    for (int q = head[v]; q >= 0; q = next[q]) {
      int to = piece[rnode[q]];
      if (to <= piece[p] || seen[to]) continue;
      seen[to] = 1;
    }
    for (int to = piece[p] + 1; to <= maxp; to++) {
      if (!seen[to]) continue;
      if (ne == cap) {
        cap *= 2;
        ts_stage_edge *ne_ = realloc(e, sizeof *e * (size_t)cap);
        if (!ne_) {
          free(e), free(seen), free(head), free(next), free(rnode);
          return ts_error_set(TS_ENOMEM, "stage cut: out of memory");
        }
        e = ne_;
      }
      ts_dtype dt = ts_graph_value_dtype(g, v);
      e[ne++] = (ts_stage_edge){v, piece[p], to,
                                ts_shape_numel(ts_graph_value_shape(g, v)) * (int64_t)ts_dtype_size(dt),
                                ts_graph_value_requires_grad(g, v) && (dt == TS_F32 || dt == TS_BF16 || dt == TS_F16)};
    }
  }
  free(seen), free(head), free(next), free(rnode);
  *out = e;
  *nedges = ne;
  return TS_OK;
}

/* ---- building a piece ---- */

static int fail(ts_graph *g, const char *what) {
  int rc = ts_graph_status(g) ? ts_graph_status(g) : TS_EGRAPH;
  return ts_error_set(rc, "stage cut: %s: %s", what, ts_graph_error(g));
}

/* The piece store's entry for whole-store entry id (registered on first use). */
static int piece_param(const ts_params *wp, ts_params *sp, int id) {
  const char *name = ts_params_name(wp, id);
  int have = ts_params_find(sp, name);
  if (have >= 0) return have;
  ts_init init = ts_params_init_of(wp, id);
  int flags = ts_params_flags(wp, id);
  if (!ts_params_is_sharded(wp, id)) return ts_params_add(sp, name, ts_params_shape(wp, id), init, flags);
  int nid = ts_params_add_sharded(sp, name, ts_params_global_shape(wp, id), ts_params_layout(wp, id),
                                  ts_params_shard_rank(wp, id), init, flags);
  ts_shape is = ts_params_init_shape(wp, id), gs = ts_params_global_shape(wp, id);
  if (nid >= 0 && !ts_shape_equal(&is, &gs)) {
    int rc = ts_params_set_init_shape(sp, nid, is);
    if (rc) return rc;
  }
  return nid;
}

int ts_stage_build(const ts_graph *whole, const ts_params *wp, const int *piece, int k, const ts_stage_p2p *net,
                   ts_val out, int training, ts_params *store, ts_stage_graph *sg) {
  memset(sg, 0, sizeof *sg);
  sg->piece = k;
  sg->objective = sg->out = sg->x = sg->y = TS_NONE;
  int rc, n = ts_graph_num_nodes(whole), nv = ts_graph_num_values(whole), ne = 0;
  ts_stage_edge *e = NULL;
  if ((rc = ts_stage_edges(whole, piece, &e, &ne))) return rc;
  /* the piece's lists, sized by its cut edges (a receive each edge into it; a token each send,
   * for evaluation's forward sends or training's gradients sent back) */
  int nin = 0, nout = 0;
  for (int t = 0; t < ne; t++) nin += e[t].to == k, nout += e[t].from == k;
  size_t ri = (size_t)nin + 1, ti = (size_t)nin + (size_t)nout + 1;
  sg->recv = malloc(sizeof *sg->recv * ri);
  sg->recv_edge = malloc(sizeof(int) * ri);
  sg->recv_from = malloc(sizeof(int) * ri);
  sg->recv_grad = malloc(sizeof(int) * ri);
  sg->tokens = malloc(sizeof *sg->tokens * ti);
  int *map = malloc(sizeof(int) * (size_t)(nv ? nv : 1));
  sg->params = store;
  int lists = sg->recv && sg->recv_edge && sg->recv_from && sg->recv_grad && sg->tokens;
  if (!map || !lists || (rc = ts_graph_create(&sg->g)) || (!store && (rc = ts_params_create(&sg->params)))) {
    free(e);
    free(map);
    ts_stage_graph_release(sg);
    if (sg->g) ts_graph_free(sg->g);
    sg->g = NULL;
    sg->params = NULL;
    return map && lists ? rc : ts_error_set(TS_ENOMEM, "stage cut: out of memory");
  }
  ts_graph *g = sg->g;
  ts_graph_set_training(g, ts_graph_training(whole));
  for (int v = 0; v < nv; v++) map[v] = -1;
  int outi = ts_graph_value_index(whole, out);
  for (int j = 0; j < n && !rc; j++) {
    if (piece[j] != k) continue;
    int ins[TS_GRAPH_MAX_IO], nin = ts_graph_node_num_inputs(whole, j);
    for (int q = 0; q < nin && !rc; q++) {
      int v = ts_graph_node_input(whole, j, q);
      if (map[v] < 0) {
        int p = producer(whole, v);
        ts_val_kind kind = ts_graph_value_kind(whole, v);
        ts_dtype dt = ts_graph_value_dtype(whole, v);
        ts_shape sh = *ts_graph_value_shape(whole, v);
        const char *nm = ts_graph_value_name(whole, v);
        ts_val nvl = TS_NONE;
        if (p >= 0) { /* from an earlier piece */
          int ei = -1;
          for (int t = 0; t < ne && ei < 0; t++)
            if (e[t].value == v && e[t].to == k) ei = t;
          if (ei < 0) {
            rc = ts_error_set(TS_EGRAPH, "stage cut: piece %d reads value %d of op %s, which is no cut edge", k, v,
                              ts_graph_node_name(whole, j));
            break;
          }
          nvl = ts_recv(g, TS_NONE, net->slot, e[ei].from % net->stages, net->tag_base + 2 * ei, dt, sh);
          if (nvl != TS_NONE) {
            ts_val_set_requires_grad(g, nvl, e[ei].grad);
            ts_graph_set_node_name(g, ts_graph_num_nodes(g) - 1, ts_graph_node_name(whole, p));
          }
          sg->recv[sg->nrecv] = nvl;
          sg->recv_edge[sg->nrecv] = ei;
          sg->recv_from[sg->nrecv] = e[ei].from;
          sg->recv_grad[sg->nrecv++] = e[ei].grad;
          sg->recv_bytes += e[ei].bytes;
        } else if (kind == TS_VAL_INPUT) {
          nvl = ts_input(g, nm ? nm : "input", dt, sh);
          ts_val_set_requires_grad(g, nvl, ts_graph_value_requires_grad(whole, v));
          if (nm && !strcmp(nm, "x")) sg->x = nvl;
          if (nm && !strcmp(nm, "y")) sg->y = nvl;
        } else if (kind == TS_VAL_PARAM || kind == TS_VAL_STATE) {
          int id = piece_param(wp, sg->params, ts_graph_value_param_id(whole, v));
          if (id < 0) {
            rc = id;
            break;
          }
          nvl = kind == TS_VAL_PARAM ? ts_param_value(g, nm, dt, sh, id) : ts_state_value(g, nm, dt, sh, id);
        } else {
          rc = ts_error_set(TS_EGRAPH, "stage cut: value %d of op %s has no producer", v, ts_graph_node_name(whole, j));
          break;
        }
        if (nvl == TS_NONE || ts_graph_status(g)) {
          rc = fail(g, ts_graph_node_name(whole, j));
          break;
        }
        map[v] = ts_graph_value_index(g, nvl);
      }
      ins[q] = map[v];
    }
    if (rc) break;
    int nout = ts_graph_node_num_outputs(whole, j);
    int ni = ts_graph_add_node(g, ts_graph_node_op(whole, j), ins, nin, nout, ts_graph_node_attrs(whole, j));
    if (ni < 0) {
      rc = fail(g, ts_graph_node_name(whole, j));
      break;
    }
    if ((rc = ts_graph_set_node_name(g, ni, ts_graph_node_name(whole, j)))) break;
    for (int o = 0; o < nout; o++) map[ts_graph_node_output(whole, j, o)] = ts_graph_node_output(g, ni, o);
  }
  /* sends of the values later pieces read */
  ts_val obj = TS_NONE;
  if (!rc && outi >= 0 && map[outi] >= 0) sg->out = obj = ts_graph_value(g, map[outi]);
  for (int t = 0; t < ne && !rc; t++) {
    if (e[t].from != k) continue;
    ts_val tok = ts_send(g, ts_graph_value(g, map[e[t].value]), net->slot, e[t].to % net->stages, net->tag_base + 2 * t);
    if (tok == TS_NONE) {
      rc = fail(g, "send");
      break;
    }
    ts_graph_set_node_name(g, ts_graph_num_nodes(g) - 1, ts_graph_node_name(whole, producer(whole, e[t].value)));
    sg->nsend++;
    sg->send_bytes += e[t].bytes;
    if (training) {
      obj = obj == TS_NONE ? tok : ts_add(g, obj, tok);
    } else {
      sg->tokens[sg->ntokens++] = tok; /* room: the piece's sends and receives (ts_stage_build) */
    }
  }
  if (!rc && ts_graph_status(g)) rc = fail(g, "objective");
  if (!rc && training && obj == TS_NONE)
    rc = ts_error_set(TS_ECONFIG, "parallel.stages: stage %d neither computes the loss nor feeds a later stage", k);
  sg->objective = training ? obj : TS_NONE;
  sg->nfwd = ts_graph_num_nodes(g);
  free(map);
  free(e);
  if (rc) {
    ts_graph_free(sg->g);
    if (!store) ts_params_free(sg->params);
    ts_stage_graph_release(sg);
    sg->g = NULL;
    sg->params = NULL;
  }
  return rc;
}

void ts_stage_graph_release(ts_stage_graph *sg) {
  if (!sg) return;
  free(sg->recv);
  free(sg->recv_edge);
  free(sg->recv_from);
  free(sg->recv_grad);
  free(sg->tokens);
  sg->recv = sg->tokens = NULL;
  sg->recv_edge = sg->recv_from = sg->recv_grad = NULL;
  sg->nrecv = sg->ntokens = 0;
}

int ts_stage_finish_backward(ts_stage_graph *sg, const ts_stage_p2p *net) {
  ts_graph *g = sg->g;
  for (int i = 0; i < sg->nrecv; i++) {
    if (!sg->recv_grad[i]) continue;
    ts_val gv = ts_graph_grad(g, sg->recv[i]);
    if (gv == TS_NONE) gv = ts_const(g, ts_val_dtype(g, sg->recv[i]), ts_val_shape(g, sg->recv[i]), 0);
    ts_val tok = ts_send(g, gv, net->slot, sg->recv_from[i] % net->stages, net->tag_base + 2 * sg->recv_edge[i] + 1);
    if (tok == TS_NONE || ts_graph_status(g)) return fail(g, "sending a gradient back");
    sg->tokens[sg->ntokens++] = tok; /* room: the piece's sends and receives (ts_stage_build) */
  }
  return TS_OK;
}
