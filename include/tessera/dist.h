/* Tessera dist: executing a parallel layout. Everything here runs over MPI communicators
 * (comm.h) and binds them into plans (runtime.h); the pure decisions (layouts, strategies, the
 * parallel pass) live in parallel.h.
 *
 *   gradient reduction: ts_grad_reducer, bucketed and overlapped with backward through a plan
 *   hook, for any store (data parallel: every parameter over every rank; semi_auto / hybrid:
 *   each parameter over the ranks holding the same slice);
 *   communicator slots of a pass's rank graph: ts_dist_slot_comms. */
#ifndef TESSERA_DIST_H
#define TESSERA_DIST_H

#include "tessera/comm.h"
#include "tessera/params.h"
#include "tessera/parallel.h"
#include "tessera/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The gradient bucket size used when none is given (parallel.bucket_size_mb's default): 4 MiB
 * sits in MPI_Allreduce's best range measured here (128 KiB-4 MiB). */
#define TS_BUCKET_MB_DEFAULT 4.0

/* ---- gradient reduction for any store ----
 * A parameter registered whole (ts_params_add) is replicated on every rank; one registered with
 * ts_params_add_sharded (MindSpore's layer-wise parallel parameter) is held by the ranks its
 * layout says. The reducer groups the trainable parameters by the partition of the ranks into
 * those holding the same slice (ts_params_rank_partition) and reduces each group's gradients
 * over its part (sum, or mean); parameters every rank holds a different slice of are left alone.
 * Bucketed, and overlapped with backward when attached to the plan. */
typedef struct {
  double bucket_mb; /* bucket size in MiB (<= 0: TS_BUCKET_MB_DEFAULT) */
  int mean;         /* 1: average over the ranks of a group, 0: sum */
  ts_dtype wire;    /* TS_F32, TS_BF16 or TS_F16: dtype on the wire */
} ts_grad_reducer_config;

typedef struct ts_grad_reducer ts_grad_reducer;
/* Collective over world: every rank calls it with a store of the same entries. g is the graph
 * whose gradients are attached (ts_params_attach_grads). */
int ts_grad_reducer_create(ts_comm *world, ts_params *p, const ts_graph *g,
                           const ts_grad_reducer_config *cfg, ts_grad_reducer **out);
void ts_grad_reducer_free(ts_grad_reducer *r);
int ts_grad_reducer_num_groups(const ts_grad_reducer *r);
/* Buckets over all groups (for reports and tests). */
int ts_grad_reducer_num_buckets(const ts_grad_reducer *r);
/* Starts each bucket's reduction as soon as backward has written its gradients (plan hook). */
int ts_grad_reducer_attach(ts_grad_reducer *r, ts_plan *plan);
/* Before the run whose gradients (flat buffer `grads`) are to be reduced. */
void ts_grad_reducer_begin(ts_grad_reducer *r, float *grads);
/* Waits for (or runs) every bucket: gradients are then reduced in place. */
int ts_grad_reducer_finish(ts_grad_reducer *r);
/* Seconds the last finish spent waiting (communication not hidden behind backward). */
double ts_grad_reducer_wait_seconds(const ts_grad_reducer *r);

/* ---- communicators of a pass's rank graph ----
 * Creates the communicator of every slot of p (collective over `world`, which must have
 * ts_parallel_ndevices(p) ranks; comms[] gets ts_parallel_num_slots(p) entries) and, if plan is
 * not NULL, puts them in the plan's slots. Free them with ts_comm_free. */
int ts_dist_slot_comms(const ts_parallel *p, ts_comm *world, ts_plan *plan, ts_comm **comms);

#ifdef __cplusplus
}
#endif
#endif
