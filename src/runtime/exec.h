/* Internal (not installed): the executor's interface for the layers above it: plans sized without
 * memory (dry runs of jobs that do not exist), partial runs and scratch shared between plans (a
 * pipeline's micro-batches in flight), per-plan constants (the loss scale's seed), and the
 * planner's measurements. The user-facing part of the executor is include/tessera/runtime.h. */
#ifndef TS_RUNTIME_EXEC_H
#define TS_RUNTIME_EXEC_H

#include "tessera/runtime.h"

/* The same plan for sizing only (planning a job on paper): liveness and the arena's layout are
 * computed as ts_plan_create's (ts_plan_peak_bytes, ts_plan_node_live give the same answers), but
 * the arena is never allocated; ts_plan_bind only records that a value lives in caller memory
 * (the pointer, NULL included, is never used); ts_plan_data gives NULL and ts_plan_run refuses
 * (TS_EINVAL). */
int ts_plan_create_dry(ts_graph *g, const ts_val *keep, int nkeep, ts_plan **out);
/* 1 for a plan made by ts_plan_create_dry. */
int ts_plan_is_dry(const ts_plan *p);
/* Runs nodes first..end-1 only (end < 0: to the last), e.g. a pipeline stage's forward now and
 * its backward later; the arena keeps what the later part reads as long as nothing else runs
 * this plan in between. */
int ts_plan_run_range(ts_plan *p, uint64_t step, int first, int end);
/* Makes p place the temporaries that do not live across node `split` (those produced before it
 * and read at or after it, and kept values, stay in p's own arena) in a scratch arena owned by
 * `owner` (p itself for the first) and shared by every plan given the same owner; those plans
 * must never run at the same time, and a run range must start at 0 or at `split` (a pipeline's
 * micro-batches in flight: each keeps only what its backward reads, the forward and backward
 * temporaries are shared). ts_plan_peak_bytes then gives p's own arena and ts_plan_scratch_bytes
 * its planned need of the scratch (the owner's holds the largest). TS_EINVAL for a bad split or
 * an owner that shares another's scratch. */
int ts_plan_share_scratch(ts_plan *p, int split, ts_plan *owner);
/* The planned scratch bytes of p (0 without ts_plan_share_scratch). */
size_t ts_plan_scratch_bytes(const ts_plan *p);
/* The scratch arena allocated by an owner (measured; 0 for other plans). */
size_t ts_plan_scratch_arena_bytes(const ts_plan *p);
/* Changes the value a CONST node fills its output v with, in this plan only (the graph keeps its
 * own; every other plan of the graph its own): from the next run on, v holds `value` everywhere.
 * The loss scale goes into a training plan's loss-gradient seed this way (ts_dist_set_loss_scale).
 * TS_EINVAL naming the value when v is not a value of the planned graph or not a CONST's output. */
int ts_plan_set_const(ts_plan *p, ts_val v, float value);
/* 1 if node `node` runs (plans the memory first if needed), 0 if it is skipped or out of range,
 * a negative status (message set) if planning failed. Binding a leaf (input, parameter, state)
 * never changes it. */
int ts_plan_node_live(const ts_plan *p, int node);
/* Nodes that actually run: the others only compute values nobody keeps or binds. */
int ts_plan_num_live_nodes(const ts_plan *p);
/* The sum of all temporaries' sizes without reuse (ts_plan_peak_bytes: after reuse). */
size_t ts_plan_naive_bytes(const ts_plan *p);
/* Bytes of the arena the plan has allocated (measured, not planned): 0 until it is planned (first
 * run or ts_plan_peak_bytes), then the largest planned peak so far (the arena never shrinks). */
size_t ts_plan_arena_bytes(const ts_plan *p);

/* Puts p on device d (src/device/dev.h; NULL or the CPU: host memory and the CPU kernels, the
 * default). On a GPU the arenas are allocated on it, every node runs through the GPU's kernel
 * table (src/runtime/run_gpu.c) on its compute stream, with the fusions and (bf16 convolutions)
 * channels last (ts_plan_channels_last_values); the caller binds
 * device memory (ts_plan_bind) and ts_plan_data gives device pointers. Planning (the next run or
 * ts_plan_peak_bytes) refuses with TS_EUNSUPPORTED, naming the node and its op, a live node whose
 * op has no GPU kernel yet. A run ends with one synchronisation: what the kernels flagged on the
 * device (a label or id out of range) is reported then, naming the node. The device must outlive
 * the plan. */
struct ts__dev;
int ts_plan_set_device(ts_plan *p, struct ts__dev *d);
/* A GPU plan's collectives: slot's device collectives (runtime/dcoll.h), over the same group as
 * the slot's communicator (ts_plan_set_comm); NULL clears it. The collective nodes of a plan on a
 * GPU run through them (run_gpu.c), a slot without one is refused naming the node. Not owned. */
struct ts__dcoll;
int ts_plan_set_dcoll(ts_plan *p, int slot, struct ts__dcoll *x);
/* The communicator of slot (ts_plan_set_comm), NULL where none is set or slot is out of range. */
ts_comm *ts_plan_comm(const ts_plan *p, int slot);
/* Channels last: how many of the values of a plan on a GPU it keeps NHWC in device memory
 * (run_gpu_conv.c; plans the memory first if needed: -1 with the message set if that fails);
 * 0 on the CPU, with TESSERA_GPU_CHANNELS_LAST=0, or (unset) without a bf16 convolution. */
int ts_plan_channels_last_values(const ts_plan *p);
/* The GPU p runs on, NULL on the CPU. */
struct ts__dev *ts_plan_device(const ts_plan *p);
/* Device timing (the profiler on a GPU): on a plan on a GPU, every run records a CUDA event at its
 * start and before and after each node on the compute stream, and after its synchronisation emits
 * TS_HOOK_NODE_TIMED per node with the node's span on the device (2 events per node, created at
 * the first such run). The CPU: nothing (its NODE_BEGIN/END are the node's span). */
int ts_plan_set_device_timing(ts_plan *p, int on);
/* 1 when p's runs emit NODE_TIMED (device timing on, the plan on a GPU), else 0. */
int ts_plan_device_timing(const ts_plan *p);

#endif
