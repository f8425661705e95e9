/* Recomputation pass (ts_graph_recompute): training with recompute full / selective gives
 * bitwise the losses and parameters of training without; the recomputed nodes are backward
 * nodes and the forward originals die earlier; the GPT example's arena shrinks. At every mode
 * the 16-bit casts of the weights (amp) are cast again in backward, not kept: bitwise the
 * training of the graph without the pass, in a smaller arena; all-gathers of activations are
 * gathered again under TS_RECOMPUTE_REGATHER, and full recomputation redoes all-reduces. */
#include <stdlib.h>
#include <string.h>

#include "graph/graph_ir.h"
#include "tessera/graph.h"
#include "tessera/nn.h"
#include "tessera/params.h"
#include "tessera/runtime.h"
#include "tessera/zoo.h"
#include "test_util.h"

enum { M_GPT, M_MLP, M_CONVNET };

typedef struct {
  int kind;
  int64_t B, T; /* T: gpt sequence length */
  ts_gpt_config gpt;
  int amp; /* 0, or the amp level run on the forward graph (bf16) */
} model;

enum { NO_PASS = -1 }; /* train(): ts_graph_recompute is not called */

static int build(const model *m, ts_graph **pg, ts_params **pp, ts_val *x, ts_val *y, ts_val *loss) {
  ts_graph *g;
  ts_params *p;
  CHECK_OK(ts_graph_create(&g));
  CHECK_OK(ts_params_create(&p));
  ts_nn nn = {g, p};
  ts_val logits;
  int rc;
  if (m->kind == M_GPT) {
    *x = ts_input(g, "x", TS_I32, ts_shape2(m->B, m->T));
    *y = ts_input(g, "y", TS_I32, ts_shape2(m->B, m->T));
    rc = ts_zoo_gpt(&nn, &m->gpt, *x, *y, &logits, loss);
  } else if (m->kind == M_MLP) {
    static const int hidden[] = {32, 24};
    ts_mlp_config c = {10, hidden, 2, 0};
    *x = ts_input(g, "x", TS_F32, ts_shape2(m->B, 48));
    *y = ts_input(g, "y", TS_I32, ts_shape1(m->B));
    rc = ts_zoo_mlp(&nn, &c, *x, *y, &logits, loss);
  } else {
    ts_convnet_config c = {10, 4, 8, 0, 0};
    *x = ts_input(g, "x", TS_F32, ts_shape4(m->B, 1, 12, 12));
    *y = ts_input(g, "y", TS_I32, ts_shape1(m->B));
    rc = ts_zoo_convnet(&nn, &c, *x, *y, &logits, loss);
  }
  CHECK_OK(rc);
  if (m->amp) CHECK_OK(ts_graph_amp(g, m->amp, TS_BF16, loss, 1));
  ts_val_set_requires_grad(g, *x, 0);
  *pg = g;
  *pp = p;
  return rc;
}

/* Trains `steps` SGD steps; losses[steps], final parameters into *params (malloc'd). */
static void train(const model *m, int mode, const char *const *pat, int npat, int steps, float *losses,
                  float **params, size_t *np, size_t *peak) {
  ts_graph *g;
  ts_params *p;
  ts_val x, y, loss;
  build(m, &g, &p, &x, &y, &loss);
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  if (mode != NO_PASS) CHECK_OK(ts_graph_recompute(g, pat, npat, mode));
  ts_plan *plan = ts_test_train_plan(g, p, loss, 7);
  if (!plan) return;
  *peak = ts_plan_peak_bytes(plan);
  size_t nx, ny;
  ts_shape xs = ts_val_shape(g, x), ys = ts_val_shape(g, y);
  nx = (size_t)ts_shape_numel(&xs);
  ny = (size_t)ts_shape_numel(&ys);
  float *xf = malloc(sizeof(float) * nx);
  int32_t *xi = malloc(sizeof(int32_t) * nx), *yi = malloc(sizeof(int32_t) * ny);
  CHECK_OK(ts_plan_bind(plan, x, m->kind == M_GPT ? (void *)xi : (void *)xf));
  CHECK_OK(ts_plan_bind(plan, y, yi));
  size_t n = ts_params_numel(p);
  float *w = ts_params_data(p), *gr = ts_params_grads(p);
  for (int s = 0; s < steps; s++) {
    ts_test_fill(xf, nx, 100 + (uint64_t)s, -1, 1);
    int vocab = m->kind == M_GPT ? m->gpt.vocab_size : 10;
    for (size_t i = 0; i < nx; i++) xi[i] = (int32_t)((i * 7 + (size_t)s * 13) % (size_t)vocab);
    for (size_t i = 0; i < ny; i++) yi[i] = (int32_t)((i * 5 + (size_t)s * 3 + 1) % (size_t)vocab);
    CHECK_OK(ts_plan_run(plan, (uint64_t)s));
    losses[s] = *(float *)ts_plan_data(plan, loss);
    for (size_t i = 0; i < n; i++) w[i] -= 0.05f * gr[i];
  }
  *params = malloc(sizeof(float) * n);
  memcpy(*params, w, sizeof(float) * n);
  *np = n;
  free(xf);
  free(xi);
  free(yi);
  ts_plan_free(plan);
  ts_params_free(p);
  ts_graph_free(g);
}

static void compare_modes(const char *name, const model *m, const char *const *pat, int npat) {
  enum { STEPS = 4 };
  float l0[STEPS], l1[STEPS], l2[STEPS];
  float *w0 = NULL, *w1 = NULL, *w2 = NULL;
  size_t n0 = 0, n1 = 0, n2 = 0, p0 = 0, p1 = 0, p2 = 0;
  train(m, TS_RECOMPUTE_NONE, NULL, 0, STEPS, l0, &w0, &n0, &p0);
  train(m, TS_RECOMPUTE_FULL, pat, npat, STEPS, l1, &w1, &n1, &p1);
  train(m, TS_RECOMPUTE_SELECTIVE, pat, npat, STEPS, l2, &w2, &n2, &p2);
  CHECK(w0 && w1 && w2 && n0 == n1 && n0 == n2);
  if (w0 && w1 && w2) {
    CHECK_MSG(!memcmp(l0, l1, sizeof l0), "%s: full recompute losses differ (%.9g vs %.9g)", name, l0[STEPS - 1],
              l1[STEPS - 1]);
    CHECK_MSG(!memcmp(l0, l2, sizeof l0), "%s: selective recompute losses differ", name);
    CHECK_MSG(!memcmp(w0, w1, sizeof(float) * n0), "%s: full recompute parameters differ", name);
    CHECK_MSG(!memcmp(w0, w2, sizeof(float) * n0), "%s: selective recompute parameters differ", name);
    CHECK_MSG(l0[STEPS - 1] != l0[0], "%s: training did not move", name);
  }
  printf("%s: arena none %zu, full %zu (%.3f), selective %zu (%.3f)\n", name, p0, p1, (double)p1 / (double)p0, p2,
         (double)p2 / (double)p0);
  free(w0);
  free(w1);
  free(w2);
}

/* Graph-level: copies are backward nodes placed before their first reader; the forward
 * original's last reader is now a forward node. */
static void check_graph(void) {
  model m = {M_GPT, 2, 8, {.vocab_size = 32, .n_layer = 2, .n_head = 2, .n_embd = 16}, 0};
  ts_graph *g;
  ts_params *p;
  ts_val x, y, loss;
  build(&m, &g, &p, &x, &y, &loss);
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  int nb = ts_graph_num_nodes(g);
  /* the gelu of block 0 and the last reader of its output before the pass */
  int gelu = -1;
  for (int i = 0; i < nb && gelu < 0; i++)
    if (ts_graph_node_op(g, i) == TS_OP_ELTWISE && strstr(ts_graph_node_name(g, i), "h/0/mlp")) gelu = i;
  CHECK(gelu >= 0);
  if (gelu < 0) return;
  int gv = ts_graph_node_output(g, gelu, 0), last_before = -1;
  for (int i = 0; i < nb; i++)
    for (int k = 0; k < ts_graph_node_num_inputs(g, i); k++)
      if (ts_graph_node_input(g, i, k) == gv) last_before = i;
  CHECK(last_before >= 0 && ts_graph_node_is_backward(g, last_before));
  CHECK_OK(ts_graph_recompute(g, (const char *const[]){"transformer.h.*"}, 1, TS_RECOMPUTE_SELECTIVE));
  int n = ts_graph_num_nodes(g), copies = 0;
  CHECK(n > nb);
  /* gelu's original is a forward node still (forward prefix unchanged) */
  CHECK(ts_graph_node_output(g, gelu, 0) == gv && !ts_graph_node_is_backward(g, gelu));
  int last_after = -1;
  for (int i = 0; i < n; i++) {
    const char *nm = ts_graph_node_name(g, i);
    int copy = strstr(nm, ":recompute") != NULL;
    copies += copy;
    if (copy) {
      CHECK_MSG(ts_graph_node_is_backward(g, i), "copy %s is not marked backward", nm);
      ts_op op = ts_graph_node_op(g, i);
      CHECK_MSG(op != TS_OP_DENSE && op != TS_OP_ATTENTION, "selective recomputed %s", nm);
      /* every input of a copy is produced before it */
      for (int k = 0; k < ts_graph_node_num_inputs(g, i); k++)
        CHECK(ts_graph_value_producer(g, ts_graph_node_input(g, i, k)) < i);
    }
    for (int k = 0; k < ts_graph_node_num_inputs(g, i); k++)
      if (ts_graph_node_input(g, i, k) == gv) last_after = i;
  }
  CHECK(copies > 0);
  CHECK_MSG(last_after >= 0 && !ts_graph_node_is_backward(g, last_after),
            "the gelu output's last reader is still node %d (%s)", last_after,
            last_after >= 0 ? ts_graph_node_name(g, last_after) : "-");
  /* every node's inputs come before it after the reordering */
  for (int i = 0; i < n; i++)
    for (int k = 0; k < ts_graph_node_num_inputs(g, i); k++)
      CHECK(ts_graph_value_producer(g, ts_graph_node_input(g, i, k)) < i);
  /* errors: before backward, unknown pattern, bad mode */
  ts_graph_free(g);
  ts_params_free(p);
  build(&m, &g, &p, &x, &y, &loss);
  CHECK(ts_graph_recompute(g, NULL, 0, TS_RECOMPUTE_FULL) == TS_EGRAPH);
  ts_graph_free(g);
  ts_params_free(p);
  build(&m, &g, &p, &x, &y, &loss);
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  CHECK(ts_graph_recompute(g, (const char *const[]){"nosuch.*"}, 1, TS_RECOMPUTE_FULL) == TS_ENOTFOUND);
  CHECK(strstr(ts_graph_error(g), "nosuch.*") != NULL);
  ts_graph_free(g);
  ts_params_free(p);
  build(&m, &g, &p, &x, &y, &loss);
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  CHECK(ts_graph_recompute(g, NULL, 0, 7) == TS_EINVAL);
  ts_graph_free(g);
  ts_params_free(p);
}

/* Made from parameters alone by cheap ops: a parameter, or an output of a cast/view/split/... of
 * such values only (written out here, independently of the pass's list). */
static int from_params(const ts_graph *g, ts_val v) {
  if (ts_val_kind_of(g, v) == TS_VAL_PARAM) return 1;
  int p = ts_graph_value_producer(g, v);
  if (p < 0) return 0;
  ts_op op = ts_graph_node_op(g, p);
  if (op != TS_OP_CAST && op != TS_OP_RESHAPE && op != TS_OP_SPLIT && op != TS_OP_SLICE && op != TS_OP_PERMUTE &&
      op != TS_OP_COPY && op != TS_OP_CONCAT && op != TS_OP_BROADCAST_TO && op != TS_OP_CONST)
    return 0;
  for (int k = 0; k < ts_graph_node_num_inputs(g, p); k++)
    if (!from_params(g, ts_graph_node_input(g, p, k))) return 0;
  return 1;
}

/* amp O2: the weights' bf16 casts are cast again before their first backward reader at
 * TS_RECOMPUTE_NONE; training is bitwise that of the graph the pass never ran on, in a smaller
 * arena (each layer's bf16 weights live from its forward to its backward without the pass). */
static void amp_recast(void) {
  model m = {M_GPT, 2, 16, {.vocab_size = 64, .n_layer = 3, .n_head = 2, .n_embd = 64, .dropout = 0.1f,
                            .dropout_seed = 3}, 2};
  ts_graph *g;
  ts_params *p;
  ts_val x, y, loss;
  build(&m, &g, &p, &x, &y, &loss);
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  int nb = ts_graph_num_nodes(g);
  CHECK_OK(ts_graph_recompute(g, NULL, 0, TS_RECOMPUTE_NONE));
  int n = ts_graph_num_nodes(g), recast = 0, kept = 0, other = 0;
  for (int i = 0; i < n; i++) {
    int bwd = ts_graph_node_is_backward(g, i), copy = strstr(ts_graph_node_name(g, i), ":recompute") != NULL;
    if (copy) {
      int ok = 1;
      for (int k = 0; k < ts_graph_node_num_inputs(g, i); k++) ok &= from_params(g, ts_graph_node_input(g, i, k));
      other += !ok;
      recast += ts_graph_node_op(g, i) == TS_OP_CAST;
      continue;
    }
    if (!bwd) continue;
    /* a backward node reads no forward cast of the weights */
    for (int k = 0; k < ts_graph_node_num_inputs(g, i); k++) {
      ts_val v = ts_graph_node_input(g, i, k);
      int pr = ts_graph_value_producer(g, v);
      kept += pr >= 0 && ts_graph_node_op(g, pr) == TS_OP_CAST && !ts_graph_node_is_backward(g, pr) &&
              from_params(g, v);
    }
  }
  CHECK_MSG(n > nb && recast >= 3 * 6, "%d nodes before, %d after, %d casts again (want >= 18: 6 weights a layer)",
            nb, n, recast);
  CHECK_MSG(kept == 0, "%d backward reads of forward casts of weights remain", kept);
  CHECK_MSG(other == 0, "%d copies at TS_RECOMPUTE_NONE read something else than parameters", other);
  ts_graph_free(g);
  ts_params_free(p);
  enum { STEPS = 3 };
  float l0[STEPS], l1[STEPS];
  float *w0 = NULL, *w1 = NULL;
  size_t n0 = 0, n1 = 0, p0 = 0, p1 = 0;
  train(&m, NO_PASS, NULL, 0, STEPS, l0, &w0, &n0, &p0);
  train(&m, TS_RECOMPUTE_NONE, NULL, 0, STEPS, l1, &w1, &n1, &p1);
  CHECK(w0 && w1 && n0 == n1);
  if (w0 && w1 && n0 == n1) {
    CHECK_MSG(!memcmp(l0, l1, sizeof l0), "amp recast: losses differ (%.9g vs %.9g)", l0[STEPS - 1], l1[STEPS - 1]);
    CHECK_MSG(!memcmp(w0, w1, sizeof(float) * n0), "amp recast: parameters differ");
  }
  /* 2 of the 3 layers' bf16 weights (12 * 64^2 * 2 bytes each) no longer held through backward */
  CHECK_MSG(p1 + 2 * 12 * 64 * 64 * 2 * 9 / 10 <= p0, "amp recast: arena %zu, without the pass %zu", p1, p0);
  printf("amp O2 gpt: arena %zu bytes, %zu without the weights' casts again (%.3f)\n", p1, p0, (double)p1 / (double)p0);
  free(w0);
  free(w1);
}

/* Collectives: with TS_RECOMPUTE_REGATHER the backward of a dense reads an all-gather of its
 * input made again, not the forward one; full recomputation redoes an all-reduce, selective does
 * not. */
static int reads_copy_of(const ts_graph *g, ts_op reader_op, ts_op op) {
  for (int i = 0; i < ts_graph_num_nodes(g); i++) {
    if (!ts_graph_node_is_backward(g, i) || ts_graph_node_op(g, i) != reader_op) continue;
    for (int k = 0; k < ts_graph_node_num_inputs(g, i); k++) {
      int pr = ts_graph_value_producer(g, ts_graph_node_input(g, i, k));
      if (pr >= 0 && ts_graph_node_op(g, pr) == op) return strstr(ts_graph_node_name(g, pr), ":recompute") != NULL;
    }
  }
  return -1;
}

static void collectives(void) {
  for (int c = 0; c < 4; c++) {
    ts_graph *g;
    ts_params *p;
    CHECK_OK(ts_graph_create(&g));
    CHECK_OK(ts_params_create(&p));
    ts_nn nn = {g, p};
    ts_val x = ts_input(g, "x", TS_F32, ts_shape2(4, 8));
    ts_val w = ts_nn_param(&nn, "w", ts_shape2(6, 8), (ts_init){TS_INIT_TORCH_DEFAULT, 0, 0, 0}, 0);
    ts_val h = c < 2 ? ts_dense(g, ts_allgather(g, ts_gelu(g, x, 1), 0, 2, 0), w, TS_NONE)
                     : ts_gelu(g, ts_allreduce(g, ts_dense(g, x, w, TS_NONE), 0, 2, 0), 1);
    ts_val loss = ts_sum(g, ts_mul(g, h, h), 3u, 0);
    CHECK_OK(ts_graph_status(g));
    CHECK_OK(ts_graph_backward(g, loss, 1.0f));
    static const int mode[4] = {TS_RECOMPUTE_NONE, TS_RECOMPUTE_NONE | TS_RECOMPUTE_REGATHER, TS_RECOMPUTE_SELECTIVE,
                                TS_RECOMPUTE_FULL};
    CHECK_OK(ts_graph_recompute(g, NULL, 0, mode[c]));
    int r = c < 2 ? reads_copy_of(g, TS_OP_MATMUL, TS_OP_ALLGATHER) : reads_copy_of(g, TS_OP_ELTWISE_BWD, TS_OP_ALLREDUCE);
    int want = c == 1 || c == 3;
    CHECK_MSG(r == want, "case %d: the backward reads %s (want %s)", c, r < 0 ? "nothing gathered/reduced"
              : r ? "a copy" : "the forward collective", want ? "a copy" : "the forward one");
    ts_graph_free(g);
    ts_params_free(p);
  }
}

/* The GPT of examples/gpt_text.yaml (4 layers, 128 wide, T 128, batch 32): planned arena. */
static void gpt_example_arena(void) {
  model m = {M_GPT, 32, 128, {.vocab_size = 256, .block_size = 128, .n_layer = 4, .n_head = 4, .n_embd = 128,
                              .dropout = 0.1f, .dropout_seed = 1337}, 0};
  size_t peak[3];
  for (int mode = 0; mode < 3; mode++) {
    ts_graph *g;
    ts_params *p;
    ts_val x, y, loss;
    build(&m, &g, &p, &x, &y, &loss);
    CHECK_OK(ts_graph_backward(g, loss, 1.0f));
    CHECK_OK(ts_graph_recompute(g, NULL, 0, mode));
    ts_plan *plan = ts_test_train_plan(g, p, loss, 1);
    peak[mode] = plan ? ts_plan_peak_bytes(plan) : 0;
    ts_plan_free(plan);
    ts_params_free(p);
    ts_graph_free(g);
  }
  printf("gpt_text example arena: none %.2f MiB, full %.2f MiB (%.1f%%), selective %.2f MiB (%.1f%%)\n",
         peak[0] / 1048576.0, peak[1] / 1048576.0, 100.0 * peak[1] / peak[0], peak[2] / 1048576.0,
         100.0 * peak[2] / peak[0]);
  CHECK(peak[1] < peak[0]);
  CHECK(peak[2] < peak[0]);
}

int main(void) {
  check_graph();
  model gpt = {M_GPT, 2, 16, {.vocab_size = 64, .n_layer = 2, .n_head = 2, .n_embd = 32, .dropout = 0.1f,
                              .dropout_seed = 3}, 0};
  compare_modes("gpt", &gpt, NULL, 0);
  compare_modes("gpt h.*", &gpt, (const char *const[]){"transformer.h.*"}, 1);
  model mlp = {M_MLP, 8, 0, {0}, 0};
  compare_modes("mlp", &mlp, NULL, 0);
  model conv = {M_CONVNET, 4, 0, {0}, 0};
  compare_modes("convnet", &conv, NULL, 0);
  gpt_example_arena();
  amp_recast();
  collectives();
  return ts_test_finish("recompute");
}
