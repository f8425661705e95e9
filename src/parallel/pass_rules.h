/* Internal: what the parallel pass knows about one operator of a forward graph, shared with the
 * planner's strategy search (src/planner/costgraph.c) so both read the graph the same way:
 * which sharding rule cuts a graph op and which of its inputs the rule describes, the layouts a
 * strategy gives (as the pass uses them: repeat axis last, axes of size 1 dropped), and how the
 * ops without a rule that follow their input (reshape, permute, split, slice, concat, cast, copy,
 * scale, dropout) carry a layout through. Pure: nothing allocated, nothing printed. */
#ifndef TS_PASS_RULES_H
#define TS_PASS_RULES_H

#include "tessera/graph.h"
#include "parallel/sharding.h"

typedef struct {
  int sop;                          /* ts_shard_op, -1: none */
  int nin;                          /* rule inputs */
  int gin[TS_STRATEGY_MAX_INPUTS];  /* graph input of rule input k */
  int attrs[8];
  int has_attrs;
  int primary;                      /* rule input that carries the batch (follow/data parallel) */
} ts__opmap;

/* 1 and *m if graph node `node` has a sharding rule (the pass cuts it), else 0. */
int ts__pass_map_op(const ts_graph *g, int node, ts__opmap *m);
/* The layouts the pass gives an operator with rule `sop` and strategy st on N devices: the rule's
 * (ts_shard_rule), the pure repeat axis moved last, axes of size 1 dropped. req[0..nin-1], *out.
 * TS_OK or the rule's refusal (message set). */
int ts__pass_rule_layouts(int sop, const ts_op_strategy *st, int N, const ts_shape *shapes, int nin,
                          const int *attrs, ts_layout *req, ts_layout *out);
/* 1 for the ops without a rule that keep their input's layout (the pass's "view"/follow ops). */
int ts__pass_is_follow_op(ts_op op);
/* For follow op `node` whose input 0 (global shape in_shape) has layout `in`: the layout input 0
 * must be converted to (*req: partial sums settled, a dim the op cannot carry uncut) and the layout
 * of its outputs (*out, the same for every output). */
void ts__pass_view_layout(const ts_graph *g, int node, const ts_shape *in_shape, const ts_layout *in,
                          ts_layout *req, ts_layout *out);

#endif
