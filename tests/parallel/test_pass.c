/* The parallel pass without running anything (one process, every rank's graph built in turn):
 * operator names, the reshape rule, the decisions the pass makes for a Megatron GPT (where the
 * collectives go, what each rank holds), agreement between ranks, the strategies in force
 * round-tripping through a strategy file, and every refusal with its message. The numerics are
 * test_pass_mpi's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parallel/pass_impl.h"
#include "tessera/tessera.h"
#include "tessera/zoo.h"
#include "test_util.h"
#include "megatron.h"

typedef struct {
  ts_graph *g;
  ts_params *p;
  ts_val x, y, loss;
} model;

static void gpt(model *m, int tie) {
  CHECK_OK(ts_graph_create(&m->g));
  CHECK_OK(ts_params_create(&m->p));
  ts_nn nn = {m->g, m->p};
  m->x = ts_input(m->g, "x", TS_I32, ts_shape2(4, 8));
  m->y = ts_input(m->g, "y", TS_I32, ts_shape2(4, 8));
  ts_gpt_config c = {.vocab_size = 32, .block_size = 8, .n_layer = 2, .n_head = 4, .n_embd = 16, .tie_weights = tie};
  CHECK_OK(ts_zoo_gpt(&nn, &c, m->x, m->y, NULL, &m->loss));
}

static void model_free(model *m) {
  ts_graph_free(m->g);
  ts_params_free(m->p);
}

static void test_keys(void) {
  model m;
  gpt(&m, 0);
  char k[256];
  int found_attn = 0, found_reshape1 = 0, found_dense2 = 0;
  for (int j = 0; j < ts_graph_num_nodes(m.g); j++) {
    ts_parallel_op_key(m.g, j, k, sizeof k);
    CHECK_MSG(!strchr(k, '/'), "key %s has a '/'", k);
    found_attn |= !strcmp(k, "transformer.h.1.attn.attention");
    found_reshape1 |= !strcmp(k, "transformer.h.0.attn.reshape_1");
    found_dense2 |= !strcmp(k, "transformer.h.0.attn.c_attn.dense_2");
  }
  CHECK(found_attn && found_reshape1 && found_dense2);
  CHECK(!strcmp(ts_parallel_op_key(m.g, 99999, k, sizeof k), ""));
  model_free(&m);
  printf("operator keys: scopes joined by '.', repeats numbered\n");
}

/* The GPT cut Megatron-style: the report names the collectives and they are exactly the
 * embedding's and the row-parallel layers' all-reduces; every rank's graph has the same
 * structure; each rank holds its slice. */
static void test_megatron(int d, int t) {
  int N = d * t;
  ts_strategy_set *s = ts_test_megatron(d, t);
  int nnodes0 = -1;
  for (int r = 0; r < N; r++) {
    model m;
    gpt(&m, 0);
    ts_parallel_config pc = {.ndevices = N, .rank = r, .strategies = s};
    ts_parallel *pp;
    CHECK_OK(ts_parallel_run(m.g, m.p, &m.loss, 1, NULL, &pc, &pp));
    if (!pp) {
      model_free(&m);
      continue;
    }
    ts_parallel_stats st;
    ts_parallel_get_stats(pp, &st);
    /* embedding + 2 layers x (attention's c_proj + mlp's c_proj) */
    CHECK_MSG(st.nredist == 5, "TP%d x DP%d: %d redistributions", t, d, st.nredist);
    CHECK_MSG(st.ncollectives == 5, "%d collectives", st.ncollectives);
    int n = ts_graph_num_nodes(ts_parallel_graph(pp));
    if (nnodes0 < 0) nnodes0 = n;
    CHECK_MSG(n == nnodes0, "rank %d's graph has %d nodes, rank 0's %d", r, n, nnodes0);
    /* the seed: the loss is replicated over the t tensor-parallel ranks */
    float seed = ts_parallel_loss_seed(pp, m.loss);
    CHECK_MSG(seed == 1.0f / (float)t, "seed %g", (double)seed);
    /* batch pieces: the data-parallel coordinate, outermost */
    int parts, index;
    CHECK_OK(ts_parallel_input_piece(pp, m.x, &parts, &index));
    CHECK(parts == d && index == r / t);
    /* each rank holds its slice of the fused q|k|v weight, as (3,C,C) cut by heads */
    ts_params *lp = ts_parallel_params(pp);
    int id = ts_params_find(lp, "transformer.h.0.attn.c_attn.weight");
    ts_shape ls = ts_params_shape(lp, id), gs = ts_params_global_shape(lp, id), own = ts_params_init_shape(lp, id);
    CHECK(ls.ndim == 3 && ls.dims[0] == 3 && ls.dims[1] == 16 / t && ls.dims[2] == 16);
    CHECK(gs.ndim == 3 && own.ndim == 2 && own.dims[0] == 48);
    /* row-parallel weights by columns, layer norms whole */
    id = ts_params_find(lp, "transformer.h.1.mlp.c_proj.weight");
    ls = ts_params_shape(lp, id);
    CHECK(ls.dims[0] == 16 && ls.dims[1] == 64 / t);
    CHECK(!ts_params_is_sharded(lp, ts_params_find(lp, "transformer.h.0.ln_1.weight")));
    if (r == 0) {
      char *rep = malloc(1 << 20);
      ts_parallel_report(pp, rep, 1 << 20);
      CHECK(strstr(rep, "transformer.h.0.attn.attention") && strstr(rep, "partial sums of transformer.h.1.mlp.c_proj.dense"));
      CHECK(!strstr(rep, "alltoall") && !strstr(rep, "allgather"));
      free(rep);
      /* the strategies in force round-trip through a file and give the same graph */
      char path[] = "/tmp/ts_pass_XXXXXX";
      int fd = mkstemp(path);
      close(fd);
      CHECK_OK(ts_strategy_set_save(ts_parallel_strategies(pp), path));
      ts_strategy_set *back;
      CHECK_OK(ts_strategy_set_load(path, N, &back));
      unlink(path);
      model m2;
      gpt(&m2, 0);
      ts_parallel_config pc2 = {.ndevices = N, .rank = 0, .strategies = back};
      ts_parallel *pp2;
      CHECK_OK(ts_parallel_run(m2.g, m2.p, &m2.loss, 1, NULL, &pc2, &pp2));
      CHECK(pp2 && ts_graph_num_nodes(ts_parallel_graph(pp2)) == n);
      ts_parallel_free(pp2);
      ts_strategy_set_free(back);
      model_free(&m2);
    }
    ts_parallel_free(pp);
    model_free(&m);
  }
  ts_strategy_set_free(s);
  printf("GPT TP%d x DP%d: 5 all-reduces, the same graph on every rank, slices and seed 1/%d\n", t, d, t);
}

static void test_reshape_rule(void) {
  ts_layout in, out;
  int dev[2] = {2, 4}, tm[3] = {0, -1, 1}, bad = -1;
  ts_shape a = ts_shape3(4, 8, 12), b = ts_shape4(4, 8, 4, 3), c = ts_shape2(32, 12), d = ts_shape3(4, 96, 1);
  CHECK_OK(ts_layout_init(&in, 2, dev, 3, tm, 0));
  /* (4,8,12) cut (2 on dim 0, 4 on dim 2) -> (4,8,4,3): dim 2 = 4x3, the cut of 4 goes to the 4 */
  CHECK(ts__reshape_layout(&a, &in, &b, &out, &bad) == 0);
  CHECK(out.tmap[0] == 0 && out.tmap[1] == -1 && out.tmap[2] == 1 && out.tmap[3] == -1);
  /* -> (32,12): dim 0 of 32 starts where dim 0 did (cut 2 of 32 = blocks of 2 batches); 12 kept */
  CHECK(ts__reshape_layout(&a, &in, &c, &out, &bad) == 0);
  CHECK(out.tmap[0] == 0 && out.tmap[1] == 1);
  /* -> (4,96,1): the cut of dim 2 would land inside dim 1 (offset 8): not expressible */
  CHECK(ts__reshape_layout(&a, &in, &d, &out, &bad) == -1 && bad == 2);
  printf("reshape rule: cuts follow the dim that starts at the same offset\n");
}

#define EXPECT_RUN_ERR(m, set, N, code, ...)                                   \
  do {                                                                        \
    ts_parallel_config pc_ = {.ndevices = (N), .rank = 0, .strategies = (set)}; \
    ts_parallel *pp_ = (ts_parallel *)1;                                      \
    int rc_ = ts_parallel_run((m).g, (m).p, &(m).loss, 1, NULL, &pc_, &pp_);  \
    CHECK(pp_ == NULL);                                                       \
    EXPECT_ERR(rc_, code, __VA_ARGS__);                                       \
  } while (0)

static void test_refusals(void) {
  model m;
  gpt(&m, 0);
  ts_strategy_set *s;
  CHECK_OK(ts_strategy_set_create(4, 0, &s));
  /* a dimension not divisible by its cut: 4 heads cut 8 ways is refused by the rule (8 devices) */
  ts_strategy_set *s8;
  CHECK_OK(ts_strategy_set_create(8, 0, &s8));
  CHECK_OK(ts_strategy_set_put_text(s8, "transformer.h.*.attn.attention", "((1,8,1,1),(1,8,1,1),(1,8,1,1))"));
  EXPECT_RUN_ERR(m, s8, 8, TS_ESHAPE, "transformer.h.0.attn.attention", "dim 1 of size 4 is cut 8");
  ts_strategy_set_free(s8);
  /* an operator name that matches nothing */
  CHECK_OK(ts_strategy_set_put_text(s, "transformer.h.*.mlp.c_fcc.dense", "((1,1,1),(4,1))"));
  EXPECT_RUN_ERR(m, s, 4, TS_ECONFIG, "transformer.h.*.mlp.c_fcc.dense", "matches no operator");
  CHECK_OK(ts_strategy_set_remove(s, "transformer.h.*.mlp.c_fcc.dense"));
  /* a strategy on an operator without a sharding rule */
  CHECK_OK(ts_strategy_set_put_text(s, "transformer.h.0.attn.permute", "((1,1,1,1),)"));
  EXPECT_RUN_ERR(m, s, 4, TS_EUNSUPPORTED, "transformer.h.0.attn.permute", "no sharding rule");
  CHECK_OK(ts_strategy_set_remove(s, "transformer.h.0.attn.permute"));
  /* strategies for another device count */
  EXPECT_RUN_ERR(m, s, 2, TS_ECONFIG, "4 devices", "2");
  /* rank outside */
  {
    ts_parallel_config pc = {.ndevices = 4, .rank = 4};
    ts_parallel *pp;
    EXPECT_ERR(ts_parallel_run(m.g, m.p, &m.loss, 1, NULL, &pc, &pp), TS_EINVAL, "rank 4 of 4");
  }
  ts_strategy_set_free(s);
  model_free(&m);
  /* a parameter shared by two operators with different strategies: tied embedding and head */
  gpt(&m, 1);
  s = ts_test_megatron(1, 4);
  CHECK_OK(ts_strategy_set_put_text(s, "dense", "((1,1,1),(2,1))"));
  EXPECT_RUN_ERR(m, s, 4, TS_EINVAL, "transformer.wte.weight", "transformer.embedding", "'dense'",
                 "the same strategy");
  /* ... with the same strategy it is one parameter, cut once */
  CHECK_OK(ts_strategy_set_put_text(s, "dense", "((1,1,1),(4,1))"));
  ts_parallel_config pc = {.ndevices = 4, .rank = 1, .strategies = s};
  ts_parallel *pp;
  CHECK_OK(ts_parallel_run(m.g, m.p, &m.loss, 1, NULL, &pc, &pp));
  ts_parallel_free(pp);
  ts_strategy_set_free(s);
  model_free(&m);
  /* a graph that already has its backward; a graph with collectives (hybrid mode's) */
  gpt(&m, 0);
  CHECK_OK(ts_graph_backward(m.g, m.loss, 1.0f));
  EXPECT_RUN_ERR(m, NULL, 2, TS_EINVAL, "already has a backward");
  model_free(&m);
  CHECK_OK(ts_graph_create(&m.g));
  CHECK_OK(ts_params_create(&m.p));
  ts_val x = ts_input(m.g, "x", TS_F32, ts_shape2(4, 4));
  m.loss = ts_sum(m.g, ts_allreduce(m.g, x, 0, 2, TS_REDUCE_SUM), 3, 0);
  EXPECT_RUN_ERR(m, NULL, 2, TS_EUNSUPPORTED, "allreduce", "hybrid_parallel");
  model_free(&m);
  printf("refusals: cut vs dimension, unknown operator, no rule, device count, rank, shared "
         "parameter, backward present, collectives present\n");
}

/* MindSpore's MatMul.shard(((1,1),(1,2))) through ts_shard on the operator's output. */
static void test_shard_api(void) {
  model m;
  CHECK_OK(ts_graph_create(&m.g));
  CHECK_OK(ts_params_create(&m.p));
  ts_nn nn = {m.g, m.p};
  ts_val x = ts_input(m.g, "x", TS_F32, ts_shape2(8, 16));
  ts_val w = ts_nn_param(&nn, "w", ts_shape2(16, 8), (ts_init){TS_INIT_NORMAL, 0, 1, 0}, 0);
  ts_val h = ts_matmul(m.g, x, w, 0, 0);
  CHECK_OK(ts_shard(m.g, h, "((1,1),(1,2))"));
  m.loss = ts_sum(m.g, ts_relu(m.g, h), 3, 0);
  EXPECT_ERR(ts_shard(m.g, x, "((2,1),)"), TS_EINVAL, "'x'", "not an operator's output");
  for (int r = 0; r < 2; r++) {
    ts_parallel_config pc = {.ndevices = 2, .rank = r};
    ts_parallel *pp;
    CHECK_OK(ts_parallel_run(m.g, m.p, &m.loss, 1, NULL, &pc, &pp));
    if (!pp) continue;
    ts_params *lp = ts_parallel_params(pp);
    ts_shape ws = ts_params_shape(lp, ts_params_find(lp, "w"));
    CHECK(ws.dims[0] == 16 && ws.dims[1] == 4); /* the columns cut in 2 */
    char rep[8192];
    ts_parallel_report(pp, rep, sizeof rep);
    CHECK_MSG(strstr(rep, "matmul         user           ((1,1),(1,2))") != NULL, "%s", rep);
    CHECK(ts_parallel_loss_seed(pp, m.loss) == 1.0f); /* the sum is partial over the column cut */
    ts_parallel_free(pp);
  }
  CHECK_OK(ts_shard(m.g, h, "((1,1),(1,x))"));
  ts_parallel_config pc = {.ndevices = 2, .rank = 0};
  ts_parallel *pp;
  EXPECT_ERR(ts_parallel_run(m.g, m.p, &m.loss, 1, NULL, &pc, &pp), TS_EINVAL, "operator 'matmul' (ts_shard)",
             "column 11");
  CHECK_OK(ts_shard(m.g, h, "((1,1),(1,3))"));
  EXPECT_ERR(ts_parallel_run(m.g, m.p, &m.loss, 1, NULL, &pc, &pp), TS_EINVAL, "matmul", "does not divide");
  model_free(&m);
  printf("ts_shard: MindSpore's MatMul.shard(((1,1),(1,2))) on the operator; bad texts refused\n");
}

/* Dropout cut in three dims after the first: refused naming the op (one and two: test_pass_mpi's
 * numerics). */
static void test_dropout_cuts(void) {
  /* a third cut after the first: refused naming the op */
  model m;
  CHECK_OK(ts_graph_create(&m.g));
  CHECK_OK(ts_params_create(&m.p));
  ts_val gx = ts_input(m.g, "x", TS_F32, ts_shape4(2, 4, 4, 4));
  ts_val u = ts_relu(m.g, gx);
  CHECK_OK(ts_shard(m.g, u, "((1,2,2,2),)"));
  ts_val y = ts_dropout(m.g, u, 0.5f, 77);
  m.loss = ts_sum(m.g, y, 15, 0);
  ts_parallel_config pc = {.ndevices = 8, .rank = 0, .dataset_cut = 1};
  ts_parallel *pp = NULL;
  EXPECT_ERR(ts_parallel_run(m.g, m.p, &m.loss, 1, NULL, &pc, &pp), TS_EUNSUPPORTED, "dropout", "cut in 3 dims after the first");
  model_free(&m);
  printf("dropout cut in three dims after the first: refused\n");
}

int main(void) {
  test_dropout_cuts();
  test_shard_api();
  test_keys();
  test_reshape_rule();
  test_megatron(1, 4);
  test_megatron(2, 2);
  test_megatron(1, 2);
  test_refusals();
  return ts_test_finish("test_pass");
}
