/* Internal (not installed): the distribution layer, executing a parallel layout. Everything here runs over MPI communicators
 * (comm.h) and binds them into plans (runtime.h); the pure decisions (layouts, strategies, the
 * parallel pass) live in parallel.h.
 *
 *   gradient reduction: ts_grad_reducer, bucketed and overlapped with backward through a plan
 *   hook, for any store (data parallel: every parameter over every rank; semi_auto / hybrid:
 *   each parameter over the ranks holding the same slice);
 *   communicator slots of a pass's rank graph: ts_dist_slot_comms;
 *   distribution objects: one per parallel layout (stand_alone, data_parallel,
 *   semi_auto_parallel, hybrid_parallel) behind one interface, ts_dist: it builds this rank's
 *   training and evaluation graphs from a model builder, says which piece of each batch the rank
 *   reads, reduces gradients and the step's loss, clips by the global norm, moves parameters
 *   between the rank's store and a whole-model store for checkpoints, and describes itself for
 *   `tessera plan`. The trainer picks one by parallel.mode and never asks the mode again.
 *
 *   const ts_dist_vt *vt = ts_dist_find("data_parallel");
 *   ts_dist *d;  ts_dist_create(vt, &cfg, &model, 0, 0, &d);  // a real job (MPI started)
 *   ts_dist_build(d, &model);                             // graphs, store, plans, data cut
 *   const ts_dist_run *r = ts_dist_get(d);                 // r->plan, r->x, r->loss, ...
 *   ts_dist_optim_create(d, &ocfg, segs, nseg, &opt);     // the rank's optimizer (its shard)
 *   ts_dist_start(d);                                     // broadcast, gradient reduction
 *   per step: ts_dist_step_begin(d, grads); ...ts_plan_run(r->plan)...;
 *             ts_dist_step_end(d, grads, &loss, &wait); ts_dist_clip(d, grads, 1.0, &norm);
 *             ts_dist_optim_step(d, opt, params, grads, lr); */
#ifndef TS_DISTRIBUTION_DIST_H
#define TS_DISTRIBUTION_DIST_H

#include <stdio.h>

#include "tessera/comm.h"
#include "tessera/model.h"
#include "tessera/strategy.h"
#include "tessera/nn.h"
#include "tessera/optim.h"
#include "tessera/params.h"
#include "tessera/prof.h"
#include "parallel/parallel.h"
#include "kernels/softmax.h" /* ts__eval_row */
#include "tessera/region.h"
#include "tessera/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The gradient bucket size used when none is given (parallel.bucket_size_mb's default): 4 MiB
 * sits in MPI_Allreduce's best range measured here (128 KiB-4 MiB). */
#define TS_BUCKET_MB_DEFAULT 4.0
/* Recompute segment patterns a ts_dist_config holds. */
#define TS_DIST_MAX_RECOMPUTE 16

/* ---- gradient reduction for any store ----
 * A parameter registered whole (ts_params_add) is replicated on every rank; one registered with
 * ts_params_add_sharded (MindSpore's layer-wise parallel parameter) is held by the ranks its
 * layout says. The reducer groups the trainable parameters by the partition of the ranks into
 * those holding the same slice (ts_params_rank_partition) and reduces each group's gradients
 * over its part (sum, or mean); parameters every rank holds a different slice of are left alone.
 * Bucketed, and overlapped with backward when attached to the plan. */
/* Seconds of a flat, of a hierarchical and of a flat all-reduce from a separate send buffer
 * (HUGE_VAL: not measured) of `bytes` over `hosts` hosts of `local` ranks on the cluster
 * description `cluster` (a file or built-in name), and the description's name;
 * TS_OK, or a status with the reason (no such description). The trainer passes the planner's
 * (ts_cluster_allreduce_flat / _hier: distribution/ does not depend on planner/). */
typedef int (*ts_allreduce_price_fn)(const char *cluster, int hosts, int local, double bytes, double *flat, double *hier,
                                     double *flat_send, char *name, size_t cap);
/* Seconds of MPI's and of the ring's reduce-scatter of a `bytes` buffer over `hosts` hosts of
 * `local` ranks as measured on the cluster description (HUGE_VAL: not measured), and its name;
 * the planner's ts_cluster_reduce_scatter_measured, passed in by the trainer. */
typedef int (*ts_reduce_scatter_price_fn)(const char *cluster, int hosts, int local, double bytes, double *mpi,
                                          double *ring, char *name, size_t cap);

typedef struct {
  double bucket_mb; /* bucket size in MiB (<= 0: TS_BUCKET_MB_DEFAULT) */
  int mean;         /* 1: average over the ranks of a group, 0: sum */
  ts_dtype wire;    /* TS_F32, TS_BF16 or TS_F16: dtype on the wire */
  const int *fusion_splits; /* MindSpore's all_reduce_fusion_config: increasing indices into the
                               trainable parameters where a bucket must end (then bucket_mb is
                               ignored); NULL / 0: buckets by size */
  int nfusion_splits;
  int allreduce;    /* TS_ALLREDUCE_*: a group spanning hosts reduced flat or hierarchically */
  const char *cluster; /* TS_ALLREDUCE_AUTO: the cluster description deciding (NULL: "local") */
  ts_allreduce_price_fn price; /* TS_ALLREDUCE_AUTO: prices the two (NULL: flat) */
} ts_grad_reducer_config;
/* How a data-parallel group spanning several hosts reduces its buckets (parallel.allreduce). */
enum { TS_ALLREDUCE_AUTO = 0, TS_ALLREDUCE_FLAT = 1, TS_ALLREDUCE_HIER = 2, TS_ALLREDUCE_FLAT_SEND = 3 };
/* How optimizer sharding reduce-scatters its buckets (parallel.reduce_scatter): auto (the ring
 * where the shard group spans hosts), MPI's, or the ring (ts_comm_ireduce_scatter_ring). */
enum { TS_REDUCE_SCATTER_AUTO = 0, TS_REDUCE_SCATTER_MPI = 1, TS_REDUCE_SCATTER_RING = 2 };
/* parallel.reduce_scatter's choice for a shard group spanning `hosts` hosts: forced (mpi, ring), or
 * under auto MPI's on one host, across hosts the one measured faster for a bucket (mpi_s, ring_s
 * seconds; not finite: unmeasured, the ring). 1: the ring. The job (dist_zero.c) and the
 * planner's prediction (predict.c) decide by it alike. */
int ts__reduce_scatter_ring(int mode, int hosts, double mpi_s, double ring_s);
/* parallel.optimizer_shard_weights: the working weights of optimizer sharding's stages 1 and 2 */
enum { TS_SHARD_WEIGHTS_AUTO = 0, TS_SHARD_WEIGHTS_F32 = 1, TS_SHARD_WEIGHTS_LOW = 2 };

typedef struct ts_grad_reducer ts_grad_reducer;
/* Collective over world: every rank calls it with a store of the same entries. g is the graph
 * whose gradients are attached (ts_params_attach_grads). */
int ts_grad_reducer_create(ts_comm *world, ts_params *p, const ts_graph *g,
                           const ts_grad_reducer_config *cfg, ts_grad_reducer **out);
void ts_grad_reducer_free(ts_grad_reducer *r);
int ts_grad_reducer_num_groups(const ts_grad_reducer *r);
/* On a job whose groups span several hosts (or parallel.allreduce hierarchical): "gradient
 * reduction over 4 ranks on 2 hosts: node0 (ranks 0-1), node1 (ranks 2-3): buckets all-reduced
 * flat (auto: ...)"; "" otherwise. */
const char *ts_grad_reducer_note(const ts_grad_reducer *r);
/* Buckets over all groups (for reports and tests). */
int ts_grad_reducer_num_buckets(const ts_grad_reducer *r);
/* Bytes of the buckets' send slots (parallel.allreduce flat_send, or auto where the send buffer was
 * chosen): two of the largest such bucket per group; 0 for in-place all-reduces. */
size_t ts_grad_reducer_send_bytes(const ts_grad_reducer *r);
/* Starts each bucket's reduction as soon as backward has written its gradients (plan hook). */
int ts_grad_reducer_attach(ts_grad_reducer *r, ts_plan *plan);
/* Before the run whose gradients (flat buffer `grads`) are to be reduced. */
void ts_grad_reducer_begin(ts_grad_reducer *r, float *grads);
/* Waits for (or runs) every bucket: gradients are then reduced in place. */
int ts_grad_reducer_finish(ts_grad_reducer *r);
/* Seconds the last finish spent waiting (communication not hidden behind backward). */
double ts_grad_reducer_wait_seconds(const ts_grad_reducer *r);
/* Each group's buckets recorded into p (ts__buckets_set_prof): numbered over the groups, bucket k
 * on track 1 + k; NULL: off. */
int ts_grad_reducer_set_prof(ts_grad_reducer *r, ts_prof *p);

/* ---- communicators of a pass's rank graph ----
 * Creates the communicator of every slot of p (collective over `world`, which must have
 * ts_parallel_ndevices(p) ranks; comms[] gets ts_parallel_num_slots(p) entries) and, if plan is
 * not NULL, puts them in the plan's slots. Free them with ts_comm_free. */
int ts_dist_slot_comms(const ts_parallel *p, ts_comm *world, ts_plan *plan, ts_comm **comms);

/* ---- distribution objects ---- */
typedef struct ts_dist_vt ts_dist_vt; /* the interface one layout implements (src/distribution/dist_impl.h) */
typedef struct ts_dist ts_dist;

/* device_target GPU (dist_device.c): the host copies of the store and the optimizer's state (o,
 * may be NULL) brought up to date with the device's (before a checkpoint is written or the store
 * is read), and the device's set from the host's (after a checkpoint is loaded or the store
 * written). Nothing to do on the CPU. */
int ts_dist_to_host(ts_dist *d, ts_optim *o);
int ts_dist_to_device(ts_dist *d, ts_optim *o);
/* 1 and the device's description in buf when d runs on a GPU, else 0 and "". */
int ts_dist_device_info(const ts_dist *d, char *buf, size_t cap);
/* 1 when d runs on a GPU, with *peak the most device memory its allocations (store, optimizer
 * state, the plans' arenas and scratch, batches) held at once and *used the driver's figure of the
 * device's memory in use now (every process and context on it; 0 if the driver does not say);
 * else 0 and zeros. */
int ts_dist_device_memory(ts_dist *d, int64_t *peak, int64_t *used);

/* The layout for a parallel.mode name ("stand_alone", "data_parallel", "semi_auto_parallel",
 * "hybrid_parallel"), NULL for others. */
const ts_dist_vt *ts_dist_find(const char *mode);
const char *ts_dist_name(const ts_dist_vt *vt);

typedef struct {
  int64_t micro_batch;    /* global rows of one forward/backward (train.micro_batch_size) */
  int64_t eval_batch;     /* global rows of one evaluation batch */
  int64_t accum;          /* micro-steps per optimizer step (the loss seed is divided by it) */
  uint64_t seed;          /* parameter initialisation */
  int gradients_mean;     /* data/hybrid: average the gradients over the ranks (else sum) */
  int overlap;            /* start bucket reductions during backward (when accum == 1) */
  int sync_batchnorm;     /* batch-norm statistics over the ranks' rows */
  int full_batch;         /* every rank reads the whole batch */
  int sequence_parallel;  /* ts_parallel_config's */
  int parameter_broadcast;/* rank 0's initial parameters to every rank */
  double bucket_mb;       /* gradient bucket size (<= 0: TS_BUCKET_MB_DEFAULT) */
  const int *fusion_splits; /* all_reduce_fusion_config: bucket split points (any number; not owned:
                             ts_dist_create copies them) */
  int nfusion_splits;     /* 0: buckets by bucket_mb */
  ts_dtype wire;          /* gradient dtype on the wire: f32, bf16, f16 */
  int allreduce;          /* TS_ALLREDUCE_AUTO / FLAT / HIER: the buckets' reduction across hosts */
  int reduce_scatter;     /* TS_REDUCE_SCATTER_*: optimizer sharding's bucket reduce-scatters */
  ts_reduce_scatter_price_fn reduce_scatter_price; /* auto: the measured prices (NULL: the hosts rule) */
  ts_allreduce_price_fn allreduce_price; /* auto: prices flat and hierarchical (NULL: flat) */
  char cluster[1024];     /* auto: the cluster description whose links decide (file or built-in) */
  int lamb;               /* the optimizer needs whole-parameter norms (refused where sliced) */
  int recompute;          /* ts_recompute_mode of the training graph (model.recompute) */
  int n_recompute_layers; /* patterns of its segments (model.recompute_layers; 0: default) */
  char recompute_layers[TS_DIST_MAX_RECOMPUTE][160];
  int amp_level;          /* train.amp_level: ts_amp_level of the forward graphs (ts_graph_amp) */
  ts_dtype amp_dtype;     /* its low dtype: TS_BF16 or TS_F16 */
  int dry_allocate;       /* dry runs (ts_dist_create with dry >= 1) allocate the store and the plans'
                             arenas as the job would; 0 (the default): they are sized, not allocated */
  int optimizer_shard;    /* data_parallel: 1 = optimizer state sharded over the ranks (ZeRO-1), 2 = and
                             accumulated gradients (ZeRO-2), 3 = and parameters (ZeRO-3) */
  double shard_threshold_kb; /* optimizer_shard: smaller parameters stay replicated */
  int shard_weights;      /* TS_SHARD_WEIGHTS_*: stages 1, 2 under amp O2/O3: 16-bit working weights and
                             gradients, the f32 masters sharded (dist_zero16.c) */
  int shard_group;        /* optimizer_shard: ranks per shard group (0: every rank holding the same
                             slice); the groups' parts are all-reduced across them (hybrid sharding) */
  /* pipeline parallel (layout "pipeline", src/distribution/dist_pipe.c): stages > 1; accum is then the
   * number of micro-batches; data parallel over the ranks / stages replicas of each stage */
  int pipeline_stages;
  int pipeline_semi;      /* semi_auto_parallel inside each stage (else data parallel replicas) */
  int pipeline_schedule;  /* ts_sched_kind */
  int virtual_stages;
  int n_stage_rules;      /* parallel.stages: pattern (op) -> stage (text, decimal); any number; not
                             owned: ts_dist_create copies them */
  const ts_op_text *stage_rules;
  int device;             /* device_target: 0 the CPU, 1 a GPU (stand_alone; src/distribution/dist_device.c) */
  int device_id;          /* the GPU (device_id; -1: 0) */
  int comm_backend;       /* the collectives on device buffers: ts__dcoll_backend (0 auto, 1 nccl, 2 mpi) */
} ts_dist_config;

/* What runs on GPUs: stand_alone; data_parallel without optimizer sharding and sync_batchnorm;
 * the rest TS_ECONFIG naming the key (ts_dist_create asks it before MPI starts; `tessera plan`
 * says it). mode: a layout's name (ts_dist_name). */
int ts__dist_dev_check(const char *mode, const ts_dist_config *cfg);

/* Optimizer sharding in mixed precision (dist_zero16.c): the dtype of the working weights and
 * gradients stages 1 and 2 keep under c for a job of layout `mode` (a parallel.mode name) on
 * `ranks` ranks: c->amp_dtype where parallel.optimizer_shard_weights (auto or low) applies, else
 * TS_F32 with *why (when not NULL) the condition it lacks (NULL when it applies). Pure: the job
 * (ts__zero16_dtype) and the planner's prediction decide alike. */
ts_dtype ts__zero16_config_dtype(const ts_dist_config *c, const char *mode, int ranks, const char **why);

/* The model: a builder (called for the training graph with targets and for the evaluation graph
 * without), and one sample's description. */
typedef struct {
  ts_model_fn fn;
  void *user;
  ts_dtype dtype;    /* of the input samples */
  ts_shape sample;   /* one sample (no batch dim) */
  int text;          /* targets are (rows, sample...) token ids, else (rows) labels */
  int values;        /* targets are (rows, target...) f32 values (a regression: a custom model's own
                        loss), else as text says */
  ts_shape target;   /* values: one sample's target */
  int custom;        /* built by a user's callback (ts_trainer_create_custom: the C API, Python
                        cells), not the config's zoo model */
  int per_rank;      /* that callback writes one rank's part (hybrid_parallel), not the whole
                        network: such a model cannot be cut into stages or searched */
  const ts_strategy_set *strategies; /* shard strategies for its operators (semi_auto_parallel;
                                        not owned, read during ts_dist_build; NULL: none) */
} ts_dist_model;

/* What the trainer runs: this rank's graphs, store and plans (owned by the object). Under
 * data_parallel with parallel.optimizer_shard 3 the store holds the gradients and states but no
 * parameter values (ts_params_data is NULL): each rank keeps its shard and the plans read gather
 * slots; ts_dist_whole_store + ts_dist_move give the whole model. */
typedef struct {
  ts_graph *g, *ge;          /* training (forward + backward) and evaluation graphs */
  ts_params *params;         /* this rank's store (slices where the layout cuts parameters) */
  ts_plan *plan, *plan_e;    /* planned, bound to the store; NULL in dry runs */
  ts_val x, y, loss;         /* of g */
  ts_val xe, logits;         /* of ge; logits come back whole */
  int64_t micro_batch;       /* rows this rank feeds per micro-step */
  int data_parts, data_index;/* the global batch is cut in data_parts pieces; this rank reads
                                piece data_index (the sampler's shard) */
  int eval_parts, eval_index;/* of each evaluation batch the rank feeds rows piece eval_index of
                                eval_parts (it reads the whole batch) */
  int eval_split;            /* 1: each rank evaluates its own part of the test set and the
                                metrics are summed (ts_dist_sum); 0: every rank all of it */
  int sliced;                /* some parameter is held as slices (checkpoints gather them) */
  int rank, size;
  ts_shape logits_shape;     /* of one evaluation batch's logits (every rank, whichever computes them) */
} ts_dist_run;

/* Creates a distribution object for model m (its builder; the sample may be filled in later,
 * before ts_dist_build). dry = 0: a real job: layouts that run over several processes start MPI
 * (singleton without mpirun) and take the world communicator. dry = N >= 1: plan for N devices
 * as rank `rank` without MPI (no communicators; the graphs, store and plans are built as the
 * job would, so the memory figures are the job's). Refusals of the layout (TS_ECONFIG) come
 * before anything starts. A real job switches the world communicator to native blocking calls
 * (ts_comm_set_blocking; process-wide, and inherited by every communicator made from it): its
 * blocking collectives then end the job through the watchdog when they outlive the timeout
 * instead of returning TS_ECOMM (non-blocking ones, the buckets overlapped with backward
 * included, still return it). TESSERA_COMM_BLOCKING=polled keeps every call polled. */
int ts_dist_create(const ts_dist_vt *vt, const ts_dist_config *cfg, const ts_dist_model *m, int dry, int rank,
                   ts_dist **out);
void ts_dist_free(ts_dist *d);
/* The world communicator of a real job (NULL for stand_alone and dry runs). */
ts_comm *ts_dist_world(ts_dist *d);
/* Builds this rank's graphs with the model (parameters allocated and initialised from cfg.seed,
 * plans created and bound, communicators in their slots), and decides the data cut. */
int ts_dist_build(ts_dist *d, const ts_dist_model *m);
const ts_dist_run *ts_dist_get(const ts_dist *d);
/* After the optimizer exists: parameter broadcast and the gradient reduction (collective). */
int ts_dist_start(ts_dist *d);
/* One step's forward and backward over cfg.accum micro-batches: x holds this rank's rows of the
 * batch (data_parts piece: accum * micro_batch rows of the model's samples), y their targets.
 * The layout runs its micro-steps (in order; a pipeline by its schedule), accumulating into acc
 * (ts_dist_accum_numel floats, may be NULL when that is 0); *loss is this rank's mean loss over
 * the micro-steps (0 on ranks that do not compute it) and *g the gradients to reduce (acc, or
 * the store's buffer). `step` numbers the step for dropout's stream. Call between
 * ts_dist_step_begin and ts_dist_step_end. */
int ts_dist_forward_backward(ts_dist *d, const void *x, const void *y, int64_t step, float *acc, double *loss,
                             float **g);
/* One evaluation batch: runs the evaluation graph on x (eval_batch rows; the rank feeds its
 * eval_index piece) and computes the metrics of the first nr rows of the whole batch's logits
 * (r->logits_shape as rows of C) against labels lab (nr, each in [0, C): the caller checks them)
 * into rows (nr), as ts__eval_rows_ref: where the logits are (a GPU's on the device, 16 bytes a
 * row copied out; a pipeline's on its last stage, the rows sent to the other stages). */
int ts_dist_eval_rows(ts_dist *d, const void *x, const int32_t *lab, int64_t nr, ts__eval_row *rows);
/* The same forward, pointing *logits at the whole batch's logits (r->logits_shape) on the host,
 * valid until the next call (ts_trainer_forward: predictions). */
int ts_dist_eval_forward(ts_dist *d, const void *x, const float **logits);
/* A pipeline's last step on this rank: the schedule's wall time, its idle part (the bubble: wall
 * time minus forward/backward compute) and the time blocked in receives, in seconds; 0 for
 * layouts without a pipeline (returns 0), else returns 1. */
int ts_dist_pipeline_times(const ts_dist *d, double *wall, double *bubble, double *recv_wait);
/* Time spans the layout reports (gradient accumulation, pipeline p2p waits): fn(name, comm, t0,
 * t1, user) with comm = 1 for time spent waiting on other ranks. NULL to stop. */
typedef void (*ts_dist_span_fn)(const char *name, int comm, double t0, double t1, void *user);
void ts_dist_set_span(ts_dist *d, ts_dist_span_fn fn, void *user);

/* Before the micro-steps of one step (grads: the store's gradient buffer): reductions that
 * overlap backward are armed. */
void ts_dist_step_begin(ts_dist *d, float *grads);
/* After the micro-steps: reduces the gradients in g (the store's buffer, or the accumulator)
 * over the ranks holding the same parameters, and *loss (this rank's mean over the micro-steps)
 * into the step's loss of the whole model; *wait_ms: time spent waiting for communication. */
int ts_dist_step_end(ts_dist *d, float *g, double *loss, double *wait_ms);
/* The global L2 norm of g into *norm (before clipping), each parameter counted once over the
 * ranks (collective where parameters are sliced), and clipping of g to max_norm when > 0:
 * ts_dist_clip_scaled(d, g, max_norm, 1, norm, NULL). */
int ts_dist_clip(ts_dist *d, float *g, float max_norm, float *norm);
/* Loss scaling (optim.h, ts_loss_scaler): from the next run on, the loss gradient of every
 * training plan the rank runs (each pipeline piece's every instance too) is seeded with the
 * layout's own seed (1 / micro-steps, and the layout's share) times `scale`, so the gradients
 * come out multiplied by it. TS_EINVAL when the seed times scale is not a finite positive f32.
 * The object starts at 1. */
int ts_dist_set_loss_scale(ts_dist *d, float scale);
/* The scale in force (1 until ts_dist_set_loss_scale). */
float ts_dist_loss_scale(const ts_dist *d);
/* Global-norm clipping of gradients carrying a loss scale (g as for ts_dist_clip, or under
 * parallel.optimizer_shard the reduced parts the object keeps): the global norm of g times
 * inv_scale (the true norm) into *norm, and one pass multiplying g by inv_scale times the
 * clipping coefficient of the true norm (min(1, max_norm / (norm + 1e-6)) when max_norm > 0, else
 * 1): the gradients come out unscaled and clipped; no pass when that factor is 1. *overflow (may
 * be NULL) = 1 when the norm is not finite (inf or NaN in some gradient of some rank, or a norm
 * beyond f32): then g is left as it is (skip the step). The norm is global, so every rank gets
 * the same *norm and *overflow without any communication beyond the norm's own (one all-reduce
 * of one float where parameters are sliced, sharded or cut into pipeline stages; none for plain
 * data parallel, whose reduced gradients are identical on every rank). Collective where
 * ts_dist_clip is. TS_EINVAL for inv_scale not finite and > 0. */
int ts_dist_clip_scaled(ts_dist *d, float *g, float max_norm, float inv_scale, float *norm, int *overflow);
/* The rank's optimizer over the trainable parameters described by segs (one segment per whole
 * parameter at its offset in the rank's store, as for ts_optim_create). Without
 * parallel.optimizer_shard it is ts_optim_create(segs). With it (data_parallel) the optimizer
 * works on the rank's part only (src/distribution/dist_zero.c): the replicated small parameters and its
 * chunk of the sharded ones, so its state is about (replicated + sharded / ranks) per slot; use
 * it only through ts_dist_optim_step and ts_dist_move. Call after ts_dist_build. */
int ts_dist_optim_create(ts_dist *d, const ts_optim_config *cfg, const ts_optim_segment *segs, int nseg,
                         ts_optim **out);
/* One optimizer step after ts_dist_step_end and ts_dist_clip: ts_optim_step(opt, params, grads,
 * lr), or under parallel.optimizer_shard the update of the rank's part from the reduced gradients
 * ts_dist_step_end kept (grads is then not read) and the all-gather of the updated parameters
 * into params on every rank (collective); under optimizer_shard 3 the rank's parameters are
 * updated where the object holds them and params is not read either (the next runs of the plans
 * gather them). */
int ts_dist_optim_step(ts_dist *d, ts_optim *opt, float *params, const float *grads, float lr);
/* Gradient accumulation over cfg.accum micro-steps: the floats of the accumulation buffer the
 * caller must provide to ts_dist_accumulate (0 without accumulation, and under
 * parallel.optimizer_shard 2 or 3 in a real job, where the rank's reduced shard is accumulated
 * instead; call after ts_dist_start). */
size_t ts_dist_accum_numel(const ts_dist *d);
/* After micro-step k (0-based) wrote its gradients into grads: acc = grads (k = 0) or acc +=
 * grads; under parallel.optimizer_shard 2 or 3 the gradients are reduce-scattered now and the rank's
 * shard accumulated (collective; acc is not used). Then ts_dist_step_end(d, acc, ...). */
int ts_dist_accumulate(ts_dist *d, const float *grads, float *acc, int64_t k);
/* Whether the optimizer state is sharded (1) or not (0); the trainable elements that stay
 * replicated and those sharded over the ranks (0 and 0 when not sharded; under optimizer_shard 3
 * the parameters themselves are cut the same way). */
int ts_dist_optim_sharded(const ts_dist *d, size_t *replicated, size_t *sharded);
/* Gradient buckets this rank reduces (all-reduce, or the sharded optimizer's reduce-scatter),
 * after ts_dist_start; 0 when nothing is reduced. */
int ts_dist_grad_buckets(const ts_dist *d);
/* Profiling (after ts_dist_start): each gradient bucket's collective (all-reduce, or the sharded
 * optimizer's reduce-scatter and all-gather) recorded into p while it is active, as a span from
 * issue to completion on a track of its own (buckets.h); NULL: off (before p is freed). */
int ts_dist_set_prof(ts_dist *d, ts_prof *p);
/* Before evaluation or a checkpoint: states every rank should agree on (BatchNorm running
 * statistics under data parallel without sync_batchnorm) are averaged. */
int ts_dist_sync_states(ts_dist *d);
/* Sums n int64 counters and one double over the ranks (evaluation metrics under eval_split). */
int ts_dist_sum(ts_dist *d, int64_t *cnt, int n, double *x);
/* The whole model's store for checkpoints: the rank's own store when nothing is sliced, else a
 * new store of the whole parameters (allocated; free it with ts_params_free); *owned says which. */
int ts_dist_whole_store(ts_dist *d, ts_params **full, int *owned);
/* Moves parameters, states and optimizer slots between the rank's store (opt: its optimizer,
 * may be NULL) and the whole store `full` (fopt: an optimizer over full with the same slots, may
 * be NULL): gather = 1 collects every rank's slices into full (collective), 0 cuts full into the
 * rank's slices. No-op when full is the rank's own store. */
int ts_dist_move(ts_dist *d, ts_params *full, ts_optim *opt, ts_optim *fopt, int gather);
/* ---- checkpoints as pieces (sliced checkpoints: checkpoint.h, docs/checkpoints.md) ----
 * The training state THIS rank holds, as pieces of the whole model's tensors (region.h), appended
 * to out: every parameter ("param.<name>") and persistent state ("state.<name>") of its store,
 * the slice's box where the layout cuts it (semi_auto, hybrid, a pipeline stage's entries only),
 * the whole tensor where it does not (replicated: every holder lists the same piece); and for
 * each of nslots optimizer slots, named slot_names[k] with data slot_data[k] (the rank's
 * optimizer's ts_optim_slot_data), "optim.<slot>.<name>" pieces: the store's layout, or under
 * parallel.optimizer_shard the work buffer's (whole replicated parameters and the rank's part of
 * every bucket, cut at parameter boundaries into ranges of each parameter's slice); under
 * optimizer_shard 3 the parameters are such ranges too. The tensors' shapes are the whole
 * checkpoint's (a slot's tensor is 1-d). Data point into the rank's memory (NULL for a dry run, or
 * slot_data NULL). Works on dry runs (tessera ckpt reshard). The optimizer's step is not a piece
 * of the object's: the caller adds "optim.step". */
int ts_dist_pieces(ts_dist *d, int nslots, const char *const *slot_names, float *const *slot_data, ts_piece_list *out);
/* The whole model's tensors in the order ts_ckpt_save writes them for this layout's whole store
 * (ts_dist_whole_store): parameters and states, then with the optimizer "optim.step" (i64, ()) and
 * every slot of every trainable parameter (1-d); regions whole, data NULL. The same list on every
 * rank. */
int ts_dist_tensors(ts_dist *d, int with_optimizer, int nslots, const char *const *slot_names, ts_piece_list *out);
/* Writes what the layout decided for `tessera plan`: the header line, per-operator strategies,
 * collectives and layouts where there are any; and the bytes the gradient reduction moves per
 * step per rank into *reduce_bytes. */
int ts_dist_describe(ts_dist *d, FILE *out, double *reduce_bytes);
/* The note of the job's gradient reducer ("" without one). */
const char *ts_dist_reduction_note(const ts_dist *d);
/* The bytes the gradient reduction moves per step per rank (ts_dist_describe's figure). */
int ts_dist_reduce_bytes(const ts_dist *d, double *reduce_bytes);
/* Trainable parameters of the whole model (not only this rank's slices). */
int64_t ts_dist_num_params(const ts_dist *d);
/* The arenas of the rank's training and evaluation plans, summed over every plan it runs (a
 * pipeline holds one training plan per micro-batch in flight): planned sizes (measured = 0) or
 * the memory the plans hold (measured = 1, ts_plan_arena_bytes). */
void ts_dist_activation_bytes(const ts_dist *d, int measured, int64_t *train, int64_t *eval);
/* The training graphs the rank runs for one micro-batch, i = 0, 1, ...: a pipeline rank's pieces
 * (one per virtual stage, in order), else its one training graph; *plan (may be NULL) the piece's
 * (first) plan. NULL past the last. The cost model prices a micro-batch as the sum over them. */
const ts_graph *ts_dist_train_piece(const ts_dist *d, int i, const ts_plan **plan);
/* The strategies in force (semi_auto_parallel; NULL for layouts without operator strategies). */
const ts_strategy_set *ts_dist_strategies(const ts_dist *d);
/* Bytes one rank sends per micro-step through the collectives of its training graph: forward ops
 * and the backward ops autodiff emitted. */
void ts_dist_comm_bytes(const ts_dist *d, int64_t *fwd, int64_t *bwd);

/* Fills *out for this rank after ts_dist_build; optim_slots: the optimizer's slots per element
 * (ts_optim_kind_num_slots). Plans the arenas if they are not yet (ts_plan_peak_bytes). */
int ts_dist_memory(ts_dist *d, int optim_slots, ts_dist_memory_info *out);

#ifdef __cplusplus
}
#endif
#endif
