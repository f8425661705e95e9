/* Internal: the cost graph's representation (src/planner/costgraph.c), read by the searches
 * (src/planner/search.c). */
#ifndef TS_SEARCH_IMPL_H
#define TS_SEARCH_IMPL_H

#include "../parallel/pass_rules.h"
#include "planner/search.h"

typedef struct {
  int node;                  /* graph node */
  char *key;                 /* ts_parallel_op_key */
  ts__opmap m;               /* its rule and rule inputs */
  ts_shape shapes[TS_STRATEGY_MAX_INPUTS];
  int dataset_input;         /* the rule input that fixes the dataset cut (the dataset op), else -1 */
  unsigned owns;             /* rule inputs that are parameters this op owns (lays out first) */
  int owns_bias;             /* dense/conv: owns its bias */
  int ncand;
  ts_op_strategy *cand;      /* [ncand] */
  ts_layout *req;            /* [ncand][TS_STRATEGY_MAX_INPUTS]: layout each rule input needs */
  ts_layout *out;            /* [ncand]: layout of output 0 (partial sums settled before a bias) */
  double *cost, *mem;        /* [ncand]: own cost (s) and memory (bytes) */
} ts__cg_op;

typedef struct {
  int u, v;    /* ops */
  double *m;   /* [ncand(u)][ncand(v)] */
} ts__cg_edge;

typedef struct ts__cg_memo ts__cg_memo;

struct ts_costgraph {
  const ts_graph *g;
  ts_costgraph_config cfg;
  ts_cluster cl;
  int nops;
  ts__cg_op *ops;
  int nedges, capedges;
  ts__cg_edge *edges;
  int *op_of_node;           /* graph node -> op, -1 */
  int *chain, *chain_rev;    /* scratch of trace(): a chain of follow ops, up to the graph's nodes */
  int dataset_op;            /* the op whose candidate cuts the inputs' batch, -1 */
  int dataset_default;       /* the cut when there is none */
  ts__cg_memo *memo;         /* conversion times already computed (costgraph.c) */
};

/* Seconds to convert a tensor of global shape gs from layout `from` to `to` on c (the redistribution
 * planner's ops priced by the alpha-beta model; INFINITY if the planner refuses). */
double ts__cg_redist_time(const ts_cluster *c, const ts_shape *gs, size_t es, const ts_layout *from,
                          const ts_layout *to);

/* The loop axes of a rule op (sharding.h; attrs: the rule's, NULL for none): ax[k][d] = the loop
 * axis cutting dim d of rule input k, or -1; returns the number of loop axes. The searches cut
 * these only (attention's sequence, ring attention, is not searched). */
int ts__cg_loop_axes(int sop, const ts_shape *sh, int nin, const int *attrs, int ax[TS_STRATEGY_MAX_INPUTS][TS_MAX_DIMS]);

#endif
