/* The per-operator strategy searches (src/planner/search.h) on the zoo's GPT and ResNet-20:
 * cost-graph size, the time to build it and to search it with each mode, the plan's predicted
 * cost, on D devices of dgx-a100-80g.
 *   build/bench_search [D...]          (default: 8 64)
 * GPT: 12 layers, 12 heads, 768 wide, T 1024, vocabulary 50304, batch 8 x D (GPT-2 small, tied
 * head); ResNet-20: CIFAR 3x32x32, batch 32 x D. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/nn.h"
#include "planner/search.h"
#include "tessera/tessera.h"
#include "tessera/zoo.h"

typedef struct {
  const char *name;
  ts_graph *g;
  ts_params *p;
} model;

static int build(model *m, int gpt, int D) {
  if (ts_graph_create(&m->g) || ts_params_create(&m->p)) return -1;
  ts_nn nn = {m->g, m->p};
  ts_val logits, loss;
  if (gpt) {
    m->name = "GPT-2 small";
    int64_t B = 8 * (int64_t)D, T = 1024;
    ts_val x = ts_input(m->g, "x", TS_I32, ts_shape2(B, T)), y = ts_input(m->g, "y", TS_I32, ts_shape2(B, T));
    ts_gpt_config c = {.vocab_size = 50304, .block_size = (int)T, .n_layer = 12, .n_head = 12, .n_embd = 768,
                       .tie_weights = 1};
    return ts_zoo_gpt(&nn, &c, x, y, &logits, &loss);
  }
  m->name = "ResNet-20";
  int64_t B = 32 * (int64_t)D;
  ts_val x = ts_input(m->g, "x", TS_F32, ts_shape4(B, 3, 32, 32)), y = ts_input(m->g, "y", TS_I32, ts_shape1(B));
  ts_resnet_config c = {.depth = 20, .num_classes = 10};
  return ts_zoo_resnet(&nn, &c, x, y, &logits, &loss);
}

int main(int argc, char **argv) {
  int Ds[8] = {8, 64}, nd = 2;
  if (argc > 1) {
    nd = 0;
    for (int i = 1; i < argc && nd < 8; i++) Ds[nd++] = atoi(argv[i]);
  }
  ts_cluster cl;
  if (ts_cluster_builtin("dgx-a100-80g", &cl)) return 1;
  cl.nodes = 64;
  printf("%-12s %5s %5s %6s %11s %9s | %-22s %10s %12s %10s\n", "model", "D", "ops", "edges", "candidates", "build s",
         "search", "search s", "cost ms", "memory MiB");
  for (int di = 0; di < nd; di++) {
    int D = Ds[di];
    for (int gpt = 1; gpt >= 0; gpt--) {
      model m;
      memset(&m, 0, sizeof m);
      if (build(&m, gpt, D)) {
        fprintf(stderr, "bench_search: building the model: %s\n", ts_last_error());
        return 1;
      }
      ts_costgraph_config cc = {.ndevices = D, .cluster = &cl, .mem_limit = cl.mem_bytes, .opt_slots = 2};
      double t0 = ts_time_now();
      ts_costgraph *cg;
      if (ts_costgraph_build(m.g, &cc, &cg)) {
        fprintf(stderr, "bench_search: %s\n", ts_last_error());
        return 1;
      }
      double tb = ts_time_now() - t0;
      long long cands = 0;
      for (int i = 0; i < ts_costgraph_num_ops(cg); i++) cands += ts_costgraph_num_candidates(cg, i);
      int *ch = calloc((size_t)ts_costgraph_num_ops(cg) + 1, sizeof(int));
      for (int mode = 0; mode <= 2; mode++) {
        ts_search_result r;
        t0 = ts_time_now();
        int rc = ts_search_run(cg, (ts_search_mode)mode, NULL, ch, &r);
        double ts = ts_time_now() - t0;
        printf("%-12s %5d %5d %6d %11lld %9.3f | %-22s ", m.name, D, ts_costgraph_num_ops(cg), ts_costgraph_num_edges(cg),
               cands, tb, ts_search_mode_name((ts_search_mode)mode));
        if (rc) printf("failed: %s\n", ts_last_error());
        else if (mode == 0)
          printf("%10.3f %12.3f %10.1f  eliminations: %d operator %d edge %d merge %d contract %d triangle %d star %d pick\n",
                 ts, 1e3 * r.cost, r.memory / 1048576.0, r.eliminated[0], r.eliminated[1], r.eliminated[2],
                 r.eliminated[3], r.eliminated[4], r.eliminated[5], r.eliminated[6]);
        else printf("%10.3f %12.3f %10.1f\n", ts, 1e3 * r.cost, r.memory / 1048576.0);
        fflush(stdout);
      }
      free(ch);
      ts_costgraph_free(cg);
      ts_graph_free(m.g);
      ts_params_free(m.p);
    }
  }
  return 0;
}
