/* A stage cut written as parallel.stages rules (ts_stage_rules_of, src/parallel/stage_rules.c):
 * the zoo GPT's forward graph (8 blocks) cut by the balanced assignment into 2..8 pieces, and
 * by hand-written rules (blocks split unevenly, a cut inside a block between attention and MLP):
 *   - the rules rebuild the cut node for node through ts_stage_assign (checked against the
 *     piece array itself, not against the function's own check);
 *   - they are few: a whole block on one piece is one rule ("transformer.h.3"), never one per
 *     operator; each prefix appears once; pieces appear in order;
 *   - a cut given by rules reads back as rules that give the same cut (a fixed point);
 *   - one piece gives no rules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_ir.h"
#include "parallel/parallel.h"
#include "parallel/stage.h"
#include "tessera/graph.h"
#include "tessera/params.h"
#include "tessera/zoo.h"
#include "test_util.h"

#define LAYERS 8

static ts_graph *gpt(ts_params **ps) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  CHECK_OK(ts_params_create(ps));
  ts_nn nn = {g, *ps};
  ts_val ids = ts_input(g, "ids", TS_I32, ts_shape2(2, 16)), tg = ts_input(g, "targets", TS_I32, ts_shape2(2, 16));
  ts_gpt_config cfg = {.vocab_size = 64, .block_size = 16, .n_layer = LAYERS, .n_head = 2, .n_embd = 32};
  ts_val logits, loss;
  CHECK_OK(ts_zoo_gpt(&nn, &cfg, ids, tg, &logits, &loss));
  return g;
}

/* rules -> piece array through ts_stage_assign */
static int assign(const ts_graph *g, int np, const ts_op_text *r, int nr, int *piece) {
  ts_stage_rule *sr = malloc(sizeof *sr * (size_t)(nr + 1));
  for (int i = 0; i < nr; i++) sr[i] = (ts_stage_rule){r[i].op, atoi(r[i].text)};
  int rc = ts_stage_assign(g, np, sr, nr, piece);
  free(sr);
  return rc;
}

/* The rules of cut `want` into np pieces: they rebuild it, are few, distinct, in piece order. */
static void check_rules(const char *what, const ts_graph *g, int np, const int *want, int max_rules) {
  int n = ts_graph_num_nodes(g);
  ts_op_text *r = NULL;
  int nr = -1;
  int rc = ts_stage_rules_of(g, want, np, &r, &nr);
  CHECK_MSG(rc == TS_OK, "%s: %s", what, ts_last_error());
  if (rc) return;
  CHECK_MSG(nr >= np && nr <= max_rules, "%s: %d rules for %d pieces (at most %d expected)", what, nr, np, max_rules);
  int *got = malloc(sizeof(int) * (size_t)n);
  CHECK_OK(assign(g, np, r, nr, got));
  int same = 1, at = -1;
  for (int j = 0; j < n && same; j++)
    if (got[j] != want[j]) same = 0, at = j;
  CHECK_MSG(same, "%s: node %s on piece %d by the rules, %d in the cut", what, at >= 0 ? ts_graph_node_name(g, at) : "",
            at >= 0 ? got[at] : -1, at >= 0 ? want[at] : -1);
  for (int i = 0; i < nr; i++) {
    for (int k = 0; k < i; k++) CHECK_MSG(strcmp(r[i].op, r[k].op), "%s: prefix %s twice", what, r[i].op);
    CHECK_MSG(i == 0 || atoi(r[i].text) >= atoi(r[i - 1].text), "%s: rule %d (%s: %s) before a lower piece", what, i,
              r[i].op, r[i].text);
  }
  /* a whole block on one piece is one rule */
  for (int b = 0; b < LAYERS; b++) {
    char blk[32], pre[40];
    snprintf(blk, sizeof blk, "transformer.h.%d", b);
    snprintf(pre, sizeof pre, "%s.", blk);
    int first = -1, whole = 1, rule = 0, inner = 0;
    for (int j = 0; j < n; j++) {
      char k[512];
      ts_parallel_op_key(g, j, k, sizeof k);
      if (strcmp(k, blk) && strncmp(k, pre, strlen(pre))) continue;
      if (first < 0) first = want[j];
      whole &= want[j] == first;
    }
    for (int i = 0; i < nr; i++) {
      rule += !strcmp(r[i].op, blk);
      inner += !strncmp(r[i].op, pre, strlen(pre));
    }
    if (first >= 0 && whole)
      CHECK_MSG(rule == 1 && inner == 0, "%s: block %d is on one piece but has %d rules of its own and %d inside", what,
                b, rule, inner);
  }
  /* a fixed point: the cut the rules give reads back as the same rules */
  ts_op_text *r2 = NULL;
  int nr2 = -1;
  CHECK_OK(ts_stage_rules_of(g, got, np, &r2, &nr2));
  CHECK_MSG(nr2 == nr && r2 && !memcmp(r, r2, sizeof *r * (size_t)nr), "%s: read back as %d rules, not the same %d",
            what, nr2, nr);
  free(r2);
  free(got);
  free(r);
}

int main(void) {
  ts_params *ps;
  ts_graph *g = gpt(&ps);
  int n = ts_graph_num_nodes(g);
  int *piece = malloc(sizeof(int) * (size_t)n);
  /* the balanced cut into 2..8 pieces */
  for (int np = 2; np <= 8; np++) {
    char what[64];
    snprintf(what, sizeof what, "balanced cut into %d", np);
    CHECK_OK(ts_stage_assign(g, np, NULL, 0, piece));
    check_rules(what, g, np, piece, LAYERS + 24);
  }
  /* uneven blocks, and a cut inside block 5 between attention and the MLP */
  static const ts_op_text hand[] = {{"transformer.h.0", "0"}, {"transformer.h.1", "1"}, {"transformer.h.5.attn", "1"},
                                    {"transformer.h.5.mlp", "2"}, {"transformer.h.7", "2"}};
  CHECK_OK(assign(g, 3, hand, 5, piece));
  check_rules("hand-written cut", g, 3, piece, LAYERS + 24);
  ts_op_text *r = NULL;
  int nr = 0;
  CHECK_OK(ts_stage_rules_of(g, piece, 3, &r, &nr));
  int h5attn = -1, h5mlp = -1, h3 = -1;
  for (int i = 0; i < nr; i++) {
    if (!strcmp(r[i].op, "transformer.h.5.attn")) h5attn = atoi(r[i].text);
    if (!strcmp(r[i].op, "transformer.h.5.mlp")) h5mlp = atoi(r[i].text);
    if (!strcmp(r[i].op, "transformer.h.3")) h3 = atoi(r[i].text);
  }
  CHECK_MSG(h5attn == 1 && h5mlp == 2 && h3 == 1, "hand-written cut: h.5.attn %d, h.5.mlp %d, h.3 %d", h5attn, h5mlp,
            h3);
  free(r);
  /* one piece: nothing to say */
  for (int j = 0; j < n; j++) piece[j] = 0;
  r = (ts_op_text *)1;
  nr = -1;
  CHECK_OK(ts_stage_rules_of(g, piece, 1, &r, &nr));
  CHECK(r == NULL && nr == 0);
  free(piece);
  ts_graph_free(g);
  ts_params_free(ps);
  return ts_test_finish("test_stage_rules");
}
