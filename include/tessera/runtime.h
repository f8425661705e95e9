/* Tessera runtime: memory planning and execution of a graph on one process.
 *
 * Usage (compiled by tests/tools/header_examples_test.sh):
 *   ts_plan *p;
 *   ts_val outs[] = {loss};
 *   ts_plan_create(g, outs, 1, &p);      // plans buffers by liveness
 *   ts_plan_bind(p, x, batch_ptr);        // inputs, params, states: caller-owned memory
 *   ts_plan_run(p, step);                 // runs every node in order; step: the training step
 *                                         // (plan hooks see it; dropout's RNG is keyed by it)
 *   float l = *(float *)ts_plan_data(p, loss);
 *   ts_plan_free(p);
 */
#ifndef TESSERA_RUNTIME_H
#define TESSERA_RUNTIME_H

#include "tessera/comm.h"
#include "tessera/graph.h"
#include "tessera/params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  TS_BACKEND_FAST = 0, /* oneDNN where it has the op, reference kernels elsewhere */
  TS_BACKEND_REF = 1,  /* plain-C reference kernels only */
} ts_backend;

/* Selects the kernel backend for plans run afterwards on this process. */
void ts_backend_set(ts_backend b);
ts_backend ts_backend_get(void);

typedef struct ts_plan ts_plan;

/* Communicator slots a plan may hold (ts_plan_set_comm): one for every slot an op may record.
 * The table is allocated to the highest slot set, not to this bound. */
#define TS_PLAN_MAX_COMMS TS_GRAPH_MAX_COMM_SLOTS
#ifndef __cplusplus
_Static_assert(TS_PLAN_MAX_COMMS == TS_GRAPH_MAX_COMM_SLOTS, "a plan holds every graph comm slot");
#endif

/* Plan events, delivered to every hook on the plan's list in the order they were added. */
typedef enum {
  TS_HOOK_NODE_BEGIN = 0, /* before a node runs */
  TS_HOOK_NODE_END = 1,   /* after it ran (also when it failed) */
  TS_HOOK_RUN_BEGIN = 2,  /* ts_plan_run starts (after validation, before the first node) */
  TS_HOOK_RUN_END = 3,    /* ts_plan_run ends (also on failure) */
  TS_HOOK_NODE_TIMED = 4, /* a plan on a GPU with device timing on: after the run's last node (before
                             RUN_END), once per node that ran, in order, with its span on the device */
} ts_hook_event;

typedef struct {
  ts_hook_event event;
  const ts_graph *g;
  int node;              /* node index; -1 for run events */
  const char *op_name;   /* "dense"; NULL for run events */
  const char *node_name; /* the node's scoped name; NULL for run events */
  uint64_t step;         /* the step given to ts_plan_run */
  double t0, t1;         /* NODE_TIMED: the node's start and end on the device (CUDA events), on
                            ts_time_now()'s clock (the run's start event taken as its start); else 0 */
} ts_hook_info;

/* A listener: profilers, the gradient overlap of data parallel, pipeline send/recv. */
typedef void (*ts_plan_hook)(const ts_hook_info *e, void *user);
#define TS_PLAN_MAX_HOOKS 8

/* Plans execution of every node of g. Values listed in `keep` (e.g. the loss, metrics, and
 * parameter gradients) stay readable after ts_plan_run; other temporaries share buffers by
 * liveness. The graph must outlive the plan and must not change after planning. */
int ts_plan_create(ts_graph *g, const ts_val *keep, int nkeep, ts_plan **out);
void ts_plan_free(ts_plan *p);
/* Binds caller-owned memory to a value (input, param, state, or a kept value such as a gradient,
 * which is then written in place). Must be bound before run for inputs/params/states. */
int ts_plan_bind(ts_plan *p, ts_val v, void *data);
/* Fusions the executor makes when it plans memory (default on; taken on the FAST backend):
 *   TS_FUSION_MATMUL_CAST  a bf16 MATMUL whose only use is a CAST to f32 into caller memory (a
 *                          mixed-precision weight gradient) writes the f32 result directly;
 *   TS_FUSION_BN_RELU      a BATCHNORM (f32/bf16, with spatial dims) whose output only feeds a
 *                          relu writes the relu's output (bitwise the two nodes);
 *   TS_FUSION_BN_RELU_BWD  and that relu's gradient feeds only the BATCHNORM_BWD: the
 *                          BATCHNORM_BWD applies it itself (bitwise the two nodes);
 *   TS_FUSION_MATMUL_BIAS_GELU  a MATMUL or DENSE (+ its bias; f32 or bf16) whose output only
 *                          feeds a gelu (directly, or through a bf16 -> f32 cast at amp O1)
 *                          writes the gelu's output, one oneDNN matmul with a gelu post-op. The
 *                          pre-activation is never written, so only where nothing else reads
 *                          it: plans without backward (evaluation, predict; gelu's backward
 *                          reads it). f32: bitwise the two nodes in every shape measured (not
 *                          guaranteed: another GEMM kernel); bf16: one rounding fewer (gelu of
 *                          the f32 sum, not of its bf16 rounding; docs/mixed-precision.md).
 * The nodes whose work a fusion does still run (their hooks fire in their place) but do nothing.
 * Off runs every node as written (as the REF backend does). */
typedef enum {
  TS_FUSION_MATMUL_CAST = 0,
  TS_FUSION_BN_RELU = 1,
  TS_FUSION_BN_RELU_BWD = 2,
  TS_FUSION_MATMUL_BIAS_GELU = 3,
  TS_FUSION_COUNT
} ts_fusion;
void ts_plan_set_fusion(ts_plan *p, int on);
/* Fusions of `kind` the plan makes (plans the memory first if needed; 0 when off or failed). */
int ts_plan_num_fusions(const ts_plan *p, ts_fusion kind);
/* Fusions of `kind` taken by the last ts_plan_run (or the run ranges since the last one that
 * started at node 0): 0 on the REF backend. */
int ts_plan_fusions_taken(const ts_plan *p, ts_fusion kind);
/* Runs all nodes. `step` feeds dropout's random stream. */
int ts_plan_run(ts_plan *p, uint64_t step);
/* Memory of a value after a run (bound or planned); NULL if the value was not kept. */
void *ts_plan_data(ts_plan *p, ts_val v);
/* Planned arena size for temporaries (the peak of live temporary bytes, after reuse). */
size_t ts_plan_peak_bytes(const ts_plan *p);
/* Adds hook (fn, user) to the plan's list (the same pair twice is one entry); TS_ERANGE beyond
 * TS_PLAN_MAX_HOOKS, TS_EINVAL for a NULL fn. */
int ts_plan_add_hook(ts_plan *p, ts_plan_hook fn, void *user);
/* Removes (fn, user) from the list; absent pairs are ignored. */
void ts_plan_remove_hook(ts_plan *p, ts_plan_hook fn, void *user);
/* Puts communicator c (NULL to clear; not owned) in slot 0..TS_PLAN_MAX_COMMS-1, for the ops
 * that communicate (synchronised batch-norm); the plan's table grows to hold it. TS_EINVAL for a
 * bad slot, TS_ENOMEM. */
int ts_plan_set_comm(ts_plan *p, int slot, ts_comm *c);


/* Binds every param/state value of g to the store's flat buffers, and, if g is the graph passed to
 * ts_params_attach_grads, every attached gradient to the gradient buffer (params.h). */
int ts_params_bind(ts_params *p, ts_graph *g, ts_plan *plan);

#ifdef __cplusplus
}
#endif
#endif
