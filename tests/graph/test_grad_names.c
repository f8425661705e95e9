/* Backward nodes are named after the forward node they differentiate (src/graph/grad.c): after
 * ts_graph_backward and ts_params_attach_grads, every backward node of a GPT, an MLP and a small
 * convnet is "<a forward node's name>:bwd" (or "<a parameter's name>:bwd" for the gradient
 * copies), and none keeps the generic "<op>_<index>" name the profiler used to show. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_ir.h"
#include "tessera/graph.h"
#include "tessera/nn.h"
#include "tessera/params.h"
#include "tessera/zoo.h"
#include "test_util.h"

enum { M_GPT, M_MLP, M_CONVNET };

/* "<op>_<digits>" as a whole: the generic name ts__add_node gives (with or without a scope). */
static int generic(const char *nm) {
  const char *leaf = strrchr(nm, '/');
  leaf = leaf ? leaf + 1 : nm;
  const char *u = strrchr(leaf, '_');
  if (!u || !u[1] || u == leaf) return 0;
  for (const char *c = u + 1; *c; c++)
    if (!isdigit((unsigned char)*c)) return 0;
  for (const char *c = leaf; c < u; c++)
    if (!islower((unsigned char)*c) && *c != '_') return 0;
  return 1;
}

static void check_model(int kind, const char *what) {
  ts_graph *g;
  ts_params *p;
  CHECK_OK(ts_graph_create(&g));
  CHECK_OK(ts_params_create(&p));
  ts_nn nn = {g, p};
  ts_val x, y, logits, loss;
  int rc;
  if (kind == M_GPT) {
    ts_gpt_config c = {.vocab_size = 64, .n_layer = 2, .n_head = 2, .n_embd = 32, .dropout = 0.1f, .block_size = 16};
    x = ts_input(g, "x", TS_I32, ts_shape2(2, 16));
    y = ts_input(g, "y", TS_I32, ts_shape2(2, 16));
    rc = ts_zoo_gpt(&nn, &c, x, y, &logits, &loss);
  } else if (kind == M_MLP) {
    static const int hidden[] = {32, 24};
    ts_mlp_config c = {10, hidden, 2, 0};
    x = ts_input(g, "x", TS_F32, ts_shape2(4, 48));
    y = ts_input(g, "y", TS_I32, ts_shape1(4));
    rc = ts_zoo_mlp(&nn, &c, x, y, &logits, &loss);
  } else {
    ts_convnet_config c = {10, 4, 8, 0, 0};
    x = ts_input(g, "x", TS_F32, ts_shape4(2, 1, 12, 12));
    y = ts_input(g, "y", TS_I32, ts_shape1(2));
    rc = ts_zoo_convnet(&nn, &c, x, y, &logits, &loss);
  }
  CHECK_OK(rc);
  ts_val_set_requires_grad(g, x, 0);
  int nf = ts_graph_num_nodes(g);
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  CHECK_OK(ts_params_attach_grads(p, g, NULL, 0, NULL));
  int n = ts_graph_num_nodes(g), nb = 0, bad = 0;
  for (int i = 0; i < n; i++) {
    const char *nm = ts_graph_node_name(g, i);
    CHECK(nm != NULL);
    if (!nm || !ts_graph_node_is_backward(g, i)) {
      CHECK_MSG(i < nf, "%s: node %d %s after backward is not marked backward", what, i, nm ? nm : "-");
      continue;
    }
    nb++;
    size_t L = strlen(nm);
    int ok = L > 4 && !strcmp(nm + L - 4, ":bwd") && !generic(nm);
    if (ok) { /* the prefix names a forward node, or a parameter (its gradient's copy) */
      int found = 0;
      for (int j = 0; j < nf && !found; j++)
        found = strlen(ts_graph_node_name(g, j)) == L - 4 && !strncmp(ts_graph_node_name(g, j), nm, L - 4);
      for (int v = 0; v < ts_graph_num_values(g) && !found; v++) {
        const char *vn = ts_graph_value_name(g, v);
        found = vn && strlen(vn) == L - 4 && !strncmp(vn, nm, L - 4);
      }
      ok = found;
    }
    if (!ok && bad++ < 5) CHECK_MSG(0, "%s: backward node %d is named '%s' (%s)", what, i, nm, ts_op_name(ts_graph_node_op(g, i)));
  }
  CHECK_MSG(bad == 0, "%s: %d of %d backward nodes without a forward node's name + ':bwd'", what, bad, nb);
  CHECK_MSG(nb > nf / 2, "%s: only %d backward nodes", what, nb);
  ts_graph_free(g);
  ts_params_free(p);
}

int main(void) {
  check_model(M_GPT, "gpt");
  check_model(M_MLP, "mlp");
  check_model(M_CONVNET, "convnet");
  return ts_test_finish("test_grad_names");
}
