/* The stage cut (src/parallel/stage.h) at scale: a model whose stage boundary is crossed by
 * many values (300 here; the piece graph's lists were fixed at 256 before, "piece 1 reads more
 * than 256 values of other pieces"). Piece 0 computes v_i = (i + 1) * w for i < 300 from one
 * parameter w; piece 1 sums them into the loss. Checked against the graph itself: every cut edge
 * is found once (300 edges, 0 -> 1, each carrying a gradient), piece 1 receives each exactly once
 * with the producer's dtype and shape and a distinct tag, piece 0 sends each; after backward
 * piece 1 sends every received value's gradient back (300 tokens kept), and the evaluation cut of
 * piece 0 keeps its 300 forward sends. Also: more pieces than the old 512 cap are accepted by
 * ts_stage_assign when the graph has the cut points. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_ir.h"
#include "tessera/graph.h"
#include "tessera/params.h"
#include "parallel/stage.h"
#include "test_util.h"

#define NV 300

typedef struct {
  ts_graph *g;
  ts_params *p;
  ts_val loss;
  int cut; /* nodes [0, cut) are piece 0 */
  ts_val v[NV];
} model;

static int build(model *m) {
  memset(m, 0, sizeof *m);
  if (ts_graph_create(&m->g) || ts_params_create(&m->p)) return 0;
  ts_init init = {TS_INIT_UNIFORM, -1, 1, 0};
  int id = ts_params_add(m->p, "w", ts_shape2(2, 4), init, 0);
  if (id < 0) return 0;
  ts_val w = ts_param_value(m->g, "w", TS_F32, ts_shape2(2, 4), id);
  for (int i = 0; i < NV; i++) m->v[i] = ts_scale(m->g, w, (float)(i + 1), 0);
  m->cut = ts_graph_num_nodes(m->g);
  ts_val s = m->v[0];
  for (int i = 1; i < NV; i++) s = ts_add(m->g, s, m->v[i]);
  m->loss = ts_sum(m->g, s, 0x3, 0);
  return ts_graph_status(m->g) == TS_OK;
}

static void test_many_cut_edges(void) {
  model m;
  CHECK_MSG(build(&m), "model: %s", m.g ? ts_graph_error(m.g) : "out of memory");
  int n = ts_graph_num_nodes(m.g);
  int *piece = malloc(sizeof(int) * (size_t)n);
  CHECK(piece != NULL);
  if (!piece) return;
  for (int j = 0; j < n; j++) piece[j] = j < m.cut ? 0 : 1;

  ts_stage_edge *e = NULL;
  int ne = 0;
  CHECK_OK(ts_stage_edges(m.g, piece, &e, &ne));
  CHECK_MSG(ne == NV, "%d cut edges, want %d", ne, NV);
  int ok = 1;
  for (int t = 0; t < ne; t++) ok &= e[t].from == 0 && e[t].to == 1 && e[t].grad && e[t].bytes == 2 * 4 * 4;
  CHECK_MSG(ok, "every edge 0 -> 1, with a gradient, 32 bytes");
  for (int i = 0; i < NV; i++) { /* each v_i is the value of exactly one edge */
    int hits = 0, vi = ts_graph_value_index(m.g, m.v[i]);
    for (int t = 0; t < ne; t++) hits += e[t].value == vi;
    if (hits != 1) ok = 0;
  }
  CHECK_MSG(ok, "each of the %d values crosses once", NV);
  free(e);

  /* training: piece 1 receives all, sends every gradient back; piece 0 sends all */
  ts_stage_p2p net = {0, 2, 0};
  ts_stage_graph s1, s0;
  int rc = ts_stage_build(m.g, m.p, piece, 1, &net, m.loss, 1, NULL, &s1);
  CHECK_MSG(rc == TS_OK, "piece 1: %s", ts_last_error());
  if (!rc) {
    CHECK_MSG(s1.nrecv == NV && s1.nsend == 0, "piece 1: %d receives, %d sends", s1.nrecv, s1.nsend);
    char *seen = calloc(NV, 1);
    ok = seen != NULL;
    for (int i = 0; ok && i < s1.nrecv; i++) {
      int ei = s1.recv_edge[i];
      ok &= ei >= 0 && ei < NV && !seen[ei] && s1.recv_from[i] == 0 && s1.recv_grad[i] == 1;
      if (ok) seen[ei] = 1;
      ts_shape sh = ts_val_shape(s1.g, s1.recv[i]);
      ok &= ts_val_dtype(s1.g, s1.recv[i]) == TS_F32 && sh.ndim == 2 && sh.dims[0] == 2 && sh.dims[1] == 4;
    }
    free(seen);
    CHECK_MSG(ok, "piece 1 receives every edge once, f32 (2,4), from piece 0, with its gradient");
    CHECK(s1.out != TS_NONE && s1.objective != TS_NONE);
    CHECK_OK(ts_graph_backward(s1.g, s1.objective, 1.0f));
    CHECK_OK(ts_stage_finish_backward(&s1, &net));
    CHECK_MSG(s1.ntokens == NV, "piece 1 keeps %d gradient sends, want %d", s1.ntokens, NV);
    ts_graph_free(s1.g);
    ts_params_free(s1.params);
    ts_stage_graph_release(&s1);
    ts_stage_graph_release(&s1); /* twice is harmless */
  }
  rc = ts_stage_build(m.g, m.p, piece, 0, &net, m.loss, 1, NULL, &s0);
  CHECK_MSG(rc == TS_OK, "piece 0: %s", ts_last_error());
  if (!rc) {
    CHECK_MSG(s0.nsend == NV && s0.nrecv == 0 && s0.out == TS_NONE, "piece 0: %d sends, %d receives", s0.nsend,
              s0.nrecv);
    CHECK(s0.objective != TS_NONE); /* the sends' tokens: what backward differentiates */
    ts_graph_free(s0.g);
    ts_params_free(s0.params);
    ts_stage_graph_release(&s0);
  }
  /* evaluation: piece 0 keeps its forward sends as tokens */
  rc = ts_stage_build(m.g, m.p, piece, 0, &net, m.loss, 0, NULL, &s0);
  CHECK_MSG(rc == TS_OK, "piece 0 (evaluation): %s", ts_last_error());
  if (!rc) {
    CHECK_MSG(s0.ntokens == NV && s0.objective == TS_NONE, "piece 0 (evaluation): %d tokens, want %d", s0.ntokens, NV);
    ts_graph_free(s0.g);
    ts_params_free(s0.params);
    ts_stage_graph_release(&s0);
  }
  free(piece);

  /* more pieces than the old cap (512): a chain of 1200 operators cut into 600 balanced pieces,
   * each a contiguous run (the chain's order) */
  ts_graph *cg = NULL;
  CHECK_OK(ts_graph_create(&cg));
  if (cg) {
    ts_val c = ts_input(cg, "x", TS_F32, ts_shape2(2, 4));
    for (int i = 0; i < 1200; i++) c = ts_scale(cg, c, 1.0f + 1e-3f * (float)(i % 7), 0);
    int np = 600, nc = ts_graph_num_nodes(cg);
    int *pc = malloc(sizeof(int) * (size_t)nc);
    CHECK(pc != NULL && ts_graph_status(cg) == TS_OK);
    if (pc) {
      rc = ts_stage_assign(cg, np, NULL, 0, pc);
      CHECK_MSG(rc == TS_OK, "600 pieces of a 1200-operator chain: %s", ts_last_error());
      int maxp = -1, mono = 1;
      for (int j = 0; !rc && j < nc; j++) {
        if (pc[j] > maxp) maxp = pc[j];
        if (j && (pc[j] < pc[j - 1] || pc[j] > pc[j - 1] + 1)) mono = 0;
      }
      CHECK_MSG(rc != TS_OK || (maxp == np - 1 && mono && pc[0] == 0), "600 pieces: last piece %d, contiguous %d", maxp,
                mono);
    }
    free(pc);
    ts_graph_free(cg);
  }
  ts_graph_free(m.g);
  ts_params_free(m.p);
  printf("stage cut: %d values across one boundary: %d edges, %d receives, %d gradient sends, %d evaluation sends\n",
         NV, ne, NV, NV, NV);
}

int main(void) {
  test_many_cut_edges();
  return ts_test_finish("test_stage_cut");
}
