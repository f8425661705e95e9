/* Tessera parallel pass: semi-automatic operator-level parallelism (MindSpore's
 * semi_auto_parallel). From the single-process forward graph, the parameter store that describes
 * its parameters, and per-operator shard strategies, it builds the graph ONE rank runs: local
 * shapes, parameters cut to the rank's slice, and the collectives that convert each value into
 * the layout its consumer needs (docs/parallel-pass.md).
 *
 *   ts_parallel_config pc = {.ndevices = 4, .rank = r, .strategies = set};
 *   ts_parallel *pp;
 *   ts_val outs[] = {loss};
 *   if (ts_parallel_run(g, params, outs, 1, NULL, &pc, &pp)) fprintf(stderr, "%s\n", ts_last_error());
 *   ts_graph *lg = ts_parallel_graph(pp);          // this rank's forward graph
 *   ts_val lloss = ts_parallel_value(pp, loss);
 *   ts_graph_backward(lg, lloss, ts_parallel_loss_seed(pp, loss));
 *   ts_params *lp = ts_parallel_params(pp);        // this rank's slices; ts_params_alloc as usual
 *   ... ts_plan_create(lg, ...); ts_dist_slot_comms(pp, world, comms) (dist.h) ...
 *
 * How each operator is cut: its user strategy (the set's entry for the operator's name, see
 * ts_parallel_op_key), else it FOLLOWS its input (keeps the cuts its first input already has, so
 * chains of elementwise and shape ops need no communication), else DATA PARALLEL (dim 0 cut by
 * the device count, or the largest divisor of it that divides dim 0), else REPLICATED. Operators
 * without a sharding rule run replicated. Parameters take the layout their first consumer asks
 * for; a parameter reached through reshapes/splits (GPT's fused q|k|v weight) is cut in the
 * reshaped form. Every decision is made before anything runs: invalid strategies are refused
 * with the operator, the input, the dimension and the reason.
 *
 * Gradients: collectives differentiate as exact adjoints with the objective = the SUM of every
 * rank's loss. A scalar loss that is partial over some device axes and replicated over the rest
 * is therefore seeded with ts_parallel_loss_seed (1 / number of replicas), and the gradient of a
 * parameter is the SUM over the ranks holding the same slice (ts_grad_reducer in dist.h, mean = 0). */
#ifndef TS_PARALLEL_PARALLEL_H
#define TS_PARALLEL_PARALLEL_H

#include "tessera/graph.h"
#include "tessera/params.h"
#include "tessera/strategy.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int ndevices;                       /* N >= 1 */
  int rank;                           /* 0..N-1: the rank whose graph is built */
  const ts_strategy_set *strategies;  /* user strategies (NULL: none); device_num must be N */
  int dataset_cut;                    /* parts dim 0 of every graph input is cut into (the same
                                         for all inputs, so x and labels stay paired): N = data
                                         parallel (MindSpore's default dataset strategy), 1 =
                                         every rank gets the full batch (full_batch), 0 = auto:
                                         the cut the user's strategy of the first operator
                                         reading an input gives its dim 0, else the largest
                                         divisor of N dividing the batch */
  int allow_unmatched;                /* 1: strategies that match no operator are fine (a
                                         training set reused for the evaluation graph);
                                         0: refused (a typo would be silently ignored) */
  int sequence_parallel;              /* 1: Megatron's sequence parallelism: an operator whose
                                         output is a (batch, sequence, hidden) activation of
                                         partial sums over one device axis (row-parallel dense,
                                         vocabulary-parallel embedding) reduce-scatters it onto
                                         the sequence (cut by that axis; a bias added to the
                                         slice) instead of leaving it partial or all-reducing it,
                                         so the norms, adds and dropouts after it follow the cut
                                         (1/t of the activations) and the column-parallel
                                         operators' inputs are all-gathered along it: the same
                                         volume as the all-reduce it replaces */
} ts_parallel_config;

typedef struct ts_parallel ts_parallel;

/* Runs the pass. g: the forward graph of one process (global shapes; not modified); gp: the store
 * its parameters were registered in (not necessarily allocated); outs[0..nout-1]: values the
 * caller needs on every rank (loss, logits); replicate[i] != 0 asks for output i gathered whole on
 * every rank (else it keeps the layout it is produced in, possibly partial). On error nothing is
 * returned (*out NULL) and the message names the operator (its key), the input and the reason. */
int ts_parallel_run(const ts_graph *g, const ts_params *gp, const ts_val *outs, int nout,
                    const int *replicate, const ts_parallel_config *cfg, ts_parallel **out);
void ts_parallel_free(ts_parallel *p);

/* This rank's graph (forward only; owned by p) and its parameter store (owned by p; entries are
 * sharded with ts_params_add_sharded, in the order of gp; call ts_params_alloc). */
ts_graph *ts_parallel_graph(ts_parallel *p);
ts_params *ts_parallel_params(ts_parallel *p);
/* The rank's value standing for global value v (an input or one of outs), TS_NONE if none. */
ts_val ts_parallel_value(const ts_parallel *p, ts_val v);
/* The layout (on the global shape *gshape, if not NULL) of the rank's value for v. NULL if v has
 * no value on the rank. */
const ts_layout *ts_parallel_layout(const ts_parallel *p, ts_val v, ts_shape *gshape);
/* For global input v: dim 0 is cut into *parts pieces and this rank holds piece *index (so it
 * must be fed rows [index*B/parts, (index+1)*B/parts) of the global batch, in any fixed order of
 * the samples). TS_EINVAL if v is not an input. */
int ts_parallel_input_piece(const ts_parallel *p, ts_val v, int *parts, int *index);
/* Seed for ts_graph_backward of scalar output v: 1 / (ranks holding a copy of the same value),
 * the product of the device axes the loss is replicated over. */
float ts_parallel_loss_seed(const ts_parallel *p, ts_val v);

/* ---- communicators ----
 * The rank's graph uses plan communicator slots 0..ts_parallel_num_slots()-1; slot s is the
 * group of ranks along one axis of a device matrix. */
int ts_parallel_num_slots(const ts_parallel *p);
/* Device matrix and axis of slot s (dev has room for TS_LAYOUT_MAX_AXES); TS_EINVAL outside. */
int ts_parallel_slot(const ts_parallel *p, int s, int *ndev, int *dev, int *axis);
/* The colour of this rank in slot s's group split (ranks with the same colour form the group);
 * TS_EINVAL outside. ts_dist_slot_comms (dist.h) creates the communicators from it. */
int ts_parallel_slot_color(const ts_parallel *p, int s);
int ts_parallel_ndevices(const ts_parallel *p);
int ts_parallel_rank(const ts_parallel *p);

/* ---- what the pass decided ---- */
/* The strategies in force (each operator with a sharding rule, by key) and every parameter's
 * layout, as a strategy set for ts_strategy_set_save (MindSpore's strategy checkpoint). Owned by p. */
const ts_strategy_set *ts_parallel_strategies(const ts_parallel *p);
/* The key of node `node` of a forward graph: its scope with '.' separators and the op name
 * ("transformer.h.0.mlp.c_fc.dense"); the k-th further node with the same key gets "_k"
 * appended ("..attn.reshape_1"). Writes at most cap bytes; returns buf. */
char *ts_parallel_op_key(const ts_graph *g, int node, char *buf, size_t cap);
/* The keys of nodes 0..n-1 at once in linear time (keys[j] malloc'ed, the caller frees them):
 * ts_parallel_op_key per node rescans the nodes before it, quadratic over a graph. */
int ts__parallel_op_keys(const ts_graph *g, int n, char **keys);

/* Bytes one rank sends per run of g through its collective ops (ring formulas of
 * docs/layout.md with each op's group size): which = 0 forward ops only, 1 backward ops only
 * (those autodiff emitted), 2 all. Class-sharded cross-entropy and synchronised batch-norm
 * statistics (a few floats per row or channel) are not counted. */
int64_t ts_parallel_comm_bytes(const ts_graph *g, int which);

typedef struct {
  int64_t param_bytes;      /* this rank's parameter slices (f32) */
  int64_t param_full_bytes; /* the same parameters unsharded */
  int64_t fwd_comm_bytes;   /* bytes sent per rank by forward redistributions, one step */
  int nredist;              /* redistributions inserted (forward) */
  int ncollectives;         /* collective ops emitted (forward) */
} ts_parallel_stats;
void ts_parallel_get_stats(const ts_parallel *p, ts_parallel_stats *st);
/* A readable report: per operator its key, how its strategy was chosen, the strategy and the
 * layouts; per redistribution the value, the two layouts and the collectives with bytes. Returns
 * the bytes needed (like snprintf). */
size_t ts_parallel_report(const ts_parallel *p, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
