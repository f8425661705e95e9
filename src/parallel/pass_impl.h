/* Internal: the parallel pass (src/parallel/parallel.h). Phase 1 (pass.c, pass_rules.c)
 * decides every value's layout and every operator's strategy on the global graph without
 * building anything; phase 2 (pass_emit.c) emits the rank's graph from those decisions. */
#ifndef TS_PASS_IMPL_H
#define TS_PASS_IMPL_H

#include "graph/graph_ir.h"
#include "tessera/graph.h"
#include "parallel/parallel.h"
#include "parallel/sharding.h"
#include "pass_rules.h"

/* A node of the global graph as the pass reads it (a copy, through the IR API). */
typedef struct {
  ts_op op;
  int nin, nout;
  int in[TS_GRAPH_MAX_IO], out[TS_GRAPH_MAX_IO]; /* value indices */
  ts_attrs a;
  const char *name;
  const char *strategy; /* ts_shard text or NULL */
  int is_backward;
} ts__pnode;

static inline ts__pnode ts__pnode_get(const ts_graph *g, int node) {
  ts__pnode n;
  n.op = ts_graph_node_op(g, node);
  n.nin = ts_graph_node_num_inputs(g, node);
  n.nout = ts_graph_node_num_outputs(g, node);
  for (int k = 0; k < n.nin; k++) n.in[k] = ts_graph_node_input(g, node, k);
  for (int k = 0; k < n.nout; k++) n.out[k] = ts_graph_node_output(g, node, k);
  n.a = *ts_graph_node_attrs(g, node);
  n.name = ts_graph_node_name(g, node);
  n.strategy = ts_graph_node_strategy(g, node);
  n.is_backward = ts_graph_node_is_backward(g, node);
  return n;
}

/* A value of the global graph as the pass reads it. */
typedef struct {
  ts_dtype dtype;
  ts_shape shape;
  ts_val_kind kind;
  int producer, param_id, no_grad;
  const char *name;
} ts__pval;

static inline ts__pval ts__pval_get(const ts_graph *g, int v) {
  ts__pval x;
  x.dtype = ts_graph_value_dtype(g, v);
  x.shape = *ts_graph_value_shape(g, v);
  x.kind = ts_graph_value_kind(g, v);
  x.producer = ts_graph_value_producer(g, v);
  x.param_id = ts_graph_value_param_id(g, v);
  x.no_grad = !ts_graph_value_requires_grad(g, v);
  x.name = ts_graph_value_name(g, v);
  return x;
}

/* How an operator's strategy was chosen. */
typedef enum {
  TS__HOW_NONE = 0,   /* leaves, nodes not visited */
  TS__HOW_USER,       /* the user's strategy */
  TS__HOW_FOLLOW,     /* the cuts its input already had */
  TS__HOW_DP,         /* data parallel default */
  TS__HOW_REPLICATED, /* everything whole */
  TS__HOW_VIEW,       /* shape op: layout carried through */
  TS__HOW_NORULE,     /* no sharding rule: inputs gathered, run replicated */
} ts__how;

#define TS__MAX_REACH 6 /* layouts one value is converted into */

typedef struct {
  int known;       /* layout decided */
  ts_layout L;     /* layout as produced */
  ts_shape gs;     /* global shape it stands for (a parameter may be held in a reshaped form) */
  int pending;     /* parameter (or a view of one) whose layout waits for its first consumer */
  int user_node;   /* parameters: node whose user strategy fixed the layout (-1 none) */
  int from_param;  /* pending views: the parameter value index at the root */
  /* layouts this value is converted into (phase 1: costs; phase 2: emitted values) */
  int nreach;
  ts_layout reach[TS__MAX_REACH];
  int reach_lv[TS__MAX_REACH];
  int lv;          /* phase 2: the rank's value index (-1: not emitted) */
} ts__vst;

typedef struct {
  ts__how how;
  int visited;
  int deferred;              /* shape op on a pending parameter (laid out later) */
  int sop;                   /* ts_shard_op used, -1 none */
  ts_op_strategy st;         /* the strategy in force (how USER/FOLLOW/DP/REPLICATED) */
  int nin;
  ts_layout req[TS_GRAPH_MAX_IO];  /* layout each input must have */
  int nout;
  ts_layout out[TS_GRAPH_MAX_IO];  /* layout of each output */
  int bias_after;            /* dense/conv: partial output, bias added after the reduction */
  int reduce_after;          /* the partial output reduced inside the node (bias_after, or
                                sequence_parallel's reduce-scatter onto the sequence) */
  int seq_cut;               /* sequence_parallel: reduce-scattered onto dim 1 */
  ts_layout pre_bias;        /* the partial layout before the reduction (and the bias) */
  char *key;
} ts__nst;

/* One redistribution, for the report. */
typedef struct {
  int node, input;  /* consumer (-1: an output of the pass) */
  int value;        /* global value index */
  ts_shape gs;
  ts_layout from, to;
  int nops;
  double cost;
  char *text;       /* the plan's ops, one per line */
} ts__redist_rec;

typedef struct {
  int ndev;
  int dev[TS_LAYOUT_MAX_AXES];
  int axis;
  int group;        /* dev[axis] */
  int *part;        /* part[r]: index of rank r's group (first-appearance numbering) */
} ts__slot;

struct ts_parallel {
  const ts_graph *g;
  const ts_params *gp;
  ts_parallel_config cfg;
  int N, rank;
  ts__vst *v;       /* per global value */
  ts__nst *n;       /* per global node */
  int nfwd;         /* forward nodes (all nodes of g) */
  int def_lo, def_hi; /* every deferred node lies in [def_lo, def_hi] (empty: lo > hi), so a flush
                         scans that range, not the graph: a scan per parameter was quadratic (#33) */
  ts__redist_rec *rd;
  int nrd, caprd;
  ts__slot *slots;
  int nslots;
  int nouts;
  int *outs;        /* global value indices */
  int *replicate;
  int *out_lv;      /* phase 2: rank value of each output */
  ts_layout *out_L; /* final layout of each output */
  /* phase 2 */
  ts_graph *lg;
  ts_params *lp;
  int *param_lp;    /* global param id -> local id */
  ts_strategy_set *inforce;
  ts_parallel_stats stats;
};

/* pass_rules.c: the user's strategy for node ni (its ts_shard text, else the set's entry for
 * its key): 1 and *st, 0 if none, a negative status if the text does not parse. */
int ts__pass_user_strategy(const ts_parallel *p, int ni, ts_op_strategy *st);
/* pass_rules.c: decides node `ni`'s strategy and layouts (fills p->n[ni]); inputs' states known
 * or pending. */
int ts__pass_node(ts_parallel *p, int ni);
/* The layout an op's rule gives for strategy st (repeat axis moved last); TS_OK or refusal. */
int ts__pass_apply_rule(ts_parallel *p, int ni, int sop, const ts_op_strategy *st,
                        const ts_shape *shapes, int nin, const int *attrs, ts_layout *req,
                        ts_layout *out, int report);
/* Forward layout of a reshape: maps the cuts of `in` (on shape a) to shape b. Returns 0 and
 * fills *outl, or -1 if a cut dim cannot be carried (its index in *bad). */
int ts__reshape_layout(const ts_shape *a, const ts_layout *in, const ts_shape *b, ts_layout *outl,
                       int *bad);

static inline int64_t ts__gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* pass.c helpers */
void ts__layout_repl(ts_layout *l, int N, int ndim);
/* Axes of size 1 cut nothing: their map entries and partial bits are dropped. */
void ts__layout_canon(ts_layout *l);
void ts__layout_cuts(const ts_layout *l, int64_t *cuts); /* per dim */
/* ts_parallel_op_key of nodes 0..n-1 of g at once, in linear time (keys[j] malloc'ed). */
int ts__parallel_op_keys(const ts_graph *g, int n, char **keys);
/* *equiv = 1 if layouts a and b of a tensor of global shape gs put the same data on every rank
 * (equal, or differing only in ways the redistribution planner needs no op for). */
int ts__layout_same(const ts_shape *gs, const ts_layout *a, const ts_layout *b, int *equiv);
/* Records (phase 1) that value vi must also exist in layout `to` (cost bookkeeping). */
int ts__pass_need(ts_parallel *p, int vi, const ts_layout *to, int node, int input);
/* Fixes pending value vi to layout `to` (walking back to its parameter). */
/* Records a redistribution for the report and the statistics, and its communicator slots. */
int ts__pass_record(ts_parallel *p, int node, int input, int vi, const ts_redist_plan *pl);
int ts__pass_resolve(ts_parallel *p, int vi, const ts_layout *to, int node);
int ts__slot_for(ts_parallel *p, const ts_layout *l, int axis);

/* pass_emit.c */
int ts__pass_emit(ts_parallel *p);

#endif
