/* Tessera planner: per-operator strategy search (MindSpore's auto_parallel search modes).
 *
 * A COST GRAPH is built from a forward graph (global shapes), a device count D and a cluster:
 * one node per operator the parallel pass cuts (an op with a sharding rule), each with its
 * candidate strategies (every assignment of divisors of D to its loop axes whose product divides
 * D and that divide the dimensions: the rest of the devices are the repeat / data-parallel axis)
 * and per candidate a cost in seconds (its compute at 1/product of the cuts, forward + backward;
 * its own communication: partial sums reduced before a bias, synchronised batch-norm statistics,
 * a class-cut loss's collectives, the gradient reduction of the parameters it owns over their
 * repeat ranks) and a memory in bytes (its parameters' slices with gradients and optimizer state,
 * its output); EDGES carry a cost matrix [producer candidate][consumer candidate]: the time to
 * redistribute the producer's output (through the ops without a rule between them, which keep
 * their input's layout as the pass does) into the layout the consumer needs, forward and the
 * backward adjoint. Shared parameters give edges too: the first operator using a parameter
 * fixes its layout (as the pass does); a later operator using the same parameter directly must
 * cut it the same way (an infinite cost otherwise, as the pass refuses it), one using it through
 * views pays the redistribution. Graph inputs arrive as the first operator reading them cuts
 * their batch (the pass's automatic dataset cut): edges from that operator to the other readers.
 *
 * Searches (ts_search_run), deterministic (same inputs, same plan):
 *  - TS_SEARCH_DP ("dynamic_programming"): MindSpore's elimination on the cost graph; exact
 *    (the minimum of the cost graph's total over every combination of candidates) when that plan
 *    fits mem_limit; else the cheapest plan found that fits, memory priced;
 *  - TS_SEARCH_PROPAGATION ("sharding_propagation"): operators the user fixed keep their
 *    strategy; the others are decided breadth-first from them, each taking the candidate of
 *    least own cost + redistribution to its already decided neighbours;
 *  - TS_SEARCH_RECURSIVE ("recursive_programming"): MindSpore's symbolic partitioning: each
 *    operator in order cuts by 2, log2(D) times, the dimension whose cut costs least by a simple
 *    symbolic cost; linear in the graph.
 *
 * Pure: no MPI, no tensors, nothing printed. Errors set ts_last_error() naming the op or key. */
#ifndef TS_PLANNER_SEARCH_H
#define TS_PLANNER_SEARCH_H

#include "graph/graph_ir.h"
#include "planner/planner.h"
#include "tessera/strategy.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  TS_SEARCH_DP = 0,          /* dynamic_programming */
  TS_SEARCH_PROPAGATION = 1, /* sharding_propagation */
  TS_SEARCH_RECURSIVE = 2,   /* recursive_programming */
} ts_search_mode;

/* "dynamic_programming", "sharding_propagation", "recursive_programming" ("?" if invalid). */
const char *ts_search_mode_name(ts_search_mode m);
/* The mode named `name`; TS_ECONFIG listing the names otherwise. */
int ts_search_mode_parse(const char *name, ts_search_mode *out);

typedef struct {
  int ndevices;              /* D >= 1 */
  const ts_cluster *cluster; /* prices (required) */
  double mem_limit;          /* bytes per device (0: no limit): candidates whose own memory exceeds
                                it are dropped, and dynamic_programming keeps the plan's total
                                memory under it when it can (memory priced, search.c) */
  int batch_cut;             /* > 0: the graph inputs' batch is cut exactly this many ways (the
                                first reader's candidates are restricted); 0: free */
  int opt_slots;             /* optimizer state slots per parameter element (Adam: 2) */
  int max_candidates;        /* per operator, the first ones in enumeration order (0: 4096) */
  int full_devices;          /* 1: only candidates whose cuts use all D devices (MindSpore's
                                fully_use_devices); 0: any product dividing D */
} ts_costgraph_config;

typedef struct ts_costgraph ts_costgraph;

/* Builds the cost graph of forward graph g (global shapes, no backward) for cfg. TS_EINVAL for
 * a bad argument; an op with no valid candidate gets the all-ones strategy (replicated). */
int ts_costgraph_build(const ts_graph *g, const ts_costgraph_config *cfg, ts_costgraph **out);
void ts_costgraph_free(ts_costgraph *cg);

/* The operators (cost-graph nodes), in graph order: count, graph node, key (ts_parallel_op_key),
 * candidate count, candidate c's strategy, own cost (s) and memory (bytes). */
int ts_costgraph_num_ops(const ts_costgraph *cg);
int ts_costgraph_op_node(const ts_costgraph *cg, int i);
const char *ts_costgraph_op_key(const ts_costgraph *cg, int i);
int ts_costgraph_num_candidates(const ts_costgraph *cg, int i);
const ts_op_strategy *ts_costgraph_candidate(const ts_costgraph *cg, int i, int c);
double ts_costgraph_candidate_cost(const ts_costgraph *cg, int i, int c);
double ts_costgraph_candidate_memory(const ts_costgraph *cg, int i, int c);
/* Edges: count; the two operators (u < v not guaranteed; the matrix is [u's][v's]); the cost of
 * the pair of candidates (INFINITY for an incompatible pair). */
int ts_costgraph_num_edges(const ts_costgraph *cg);
void ts_costgraph_edge(const ts_costgraph *cg, int e, int *u, int *v);
double ts_costgraph_edge_cost(const ts_costgraph *cg, int e, int cu, int cv);
/* The total cost (every node's own cost + every edge's) and memory (sum of the nodes') of the
 * choice choice[0..num_ops-1] of candidates. */
double ts_costgraph_total(const ts_costgraph *cg, const int *choice);
double ts_costgraph_memory(const ts_costgraph *cg, const int *choice);

typedef struct {
  double cost;        /* ts_costgraph_total of the choice, seconds per step */
  double memory;      /* ts_costgraph_memory of the choice, bytes per device */
  double elim_cost;   /* dynamic_programming: the minimum the elimination found (== cost) */
  int nops, nedges;   /* the cost graph's size */
  int eliminated[7];  /* dynamic_programming: steps by kind: operator, edge, merge, contract,
                         triangle, star, pick */
} ts_search_result;

/* Runs search `mode` on cg. choice[0..num_ops-1] receives each operator's candidate. fixed
 * (sharding_propagation; may be NULL): the user's strategies (ts_strategy_set_get on the op
 * keys); an operator whose fixed strategy is not one of its candidates is refused (TS_ECONFIG
 * naming the key). TS_ERANGE if an elimination would need a table above 2^26 entries. */
int ts_search_run(const ts_costgraph *cg, ts_search_mode mode, const ts_strategy_set *fixed, int *choice,
                  ts_search_result *res);
/* Records the chosen strategies (exact op keys) in s (device_num must be D). */
int ts_costgraph_put_strategies(const ts_costgraph *cg, const int *choice, ts_strategy_set *s);

#ifdef __cplusplus
}
#endif
#endif
