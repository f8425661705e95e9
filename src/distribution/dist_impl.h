/* Internal: the interface a parallel layout implements, and the object's shared state
 * (src/distribution/dist.h). Each layout keeps its own state behind d->priv: dist.c (the object,
 * and stand_alone, data_parallel, hybrid_parallel: models built per rank), dist_semi.c
 * (semi_auto_parallel: the whole model cut by the parallel pass, semi.h), dist_pipe.c (pipeline
 * stages). Every layout composes with one gradient synchronisation object (sync.h: all-reduce
 * buckets in sync_allreduce.c, or ZeRO stages 1-3 in dist_zero.c with its gathers in gather.c),
 * and the combinations they run in are one table (compat.h). dist_whole.c: whole-model
 * checkpoints and clipping over slices; dist_ckpt.c: pieces for sliced checkpoints;
 * dist_memory.c: the bytes a rank holds. */
#ifndef TS_DIST_IMPL_H
#define TS_DIST_IMPL_H

#include "query.h"
#include "sync.h"
#include "distribution/dist.h"

/* What an evaluation batch gives back (ts_dist_eval_rows, ts_dist_eval_forward): with rows, the
 * metrics of the batch's first nr rows against lab (nr, in range) into rows; else *logits pointed
 * at the whole batch's logits on the host, valid until the next call. */
typedef struct {
  const int32_t *lab;
  int64_t nr;
  ts__eval_row *rows;
  const float **logits;
} ts__eval_out;
/* The result of o from the whole batch's logits lg (host, rows of the logits' last dimension). */
void ts__dist_eval_out(const ts_dist *d, const float *lg, const ts__eval_out *o);

/* One global-norm clipping of gradients scaled by the loss scale (ts_dist_clip_scaled). Every
 * path computes the global sum of squares of the scaled gradients, each parameter counted once
 * over the job (all-reduced where parts of it live on other ranks), multiplied by inv_scale^2
 * before it is narrowed to f32, and ends in ts__dist_clip_finish. */
typedef struct ts__clip {
  float max_norm;  /* <= 0: no clipping */
  float inv_scale; /* 1 / the loss scale the gradients carry */
  float norm;      /* out: the true (unscaled) global norm */
  int overflow;    /* out: the norm is not finite (the same on every rank: it is global) */
} ts__clip;
/* From the global sum of squares of the true gradients sq (the same on every rank): c->norm,
 * c->overflow, and one pass over g[0..n) multiplying by inv_scale * the clipping coefficient of
 * the true norm (none when that is 1, nor on overflow: the step is skipped or the gradients are
 * not finite anyway). */
void ts__dist_clip_finish(double sq, float *g, size_t n, ts__clip *c);
/* The norm and overflow of ts__dist_clip_finish set in c, and the factor the reduced gradients
 * are to be multiplied by (1: nothing to do; also on overflow), for gradients held in pieces. */
float ts__dist_clip_factor(double sq, ts__clip *c);

/* A layout: each entry may be NULL where the layout has nothing to do. */
struct ts_dist_vt {
  const char *name;
  int world; /* runs over several processes (MPI) */
  /* refusals of the configuration, before anything starts */
  int (*check)(const ts_dist_config *c, const ts_dist_model *m);
  /* this rank's graphs, store and plans; sets the run's data cut, seed and loss reduction */
  int (*build)(ts_dist *d, const ts_dist_model *m);
  /* gradient reduction and parameter broadcast, after the optimizer exists */
  int (*start)(ts_dist *d);
  /* states every rank must agree on before evaluation or a checkpoint */
  int (*sync_states)(ts_dist *d);
  /* what the layout decided, for `tessera plan` */
  int (*describe)(ts_dist *d, FILE *out);
  /* the layout's own parts (graphs it owns, communicators) */
  void (*free)(ts_dist *d);
  /* optional overrides of the shared behaviour (NULL: dist.c / dist_whole.c's) */
  int (*forward_backward)(ts_dist *d, const void *x, const void *y, int64_t step, float *acc, double *loss,
                          float **g);
  int (*eval)(ts_dist *d, const void *x, const ts__eval_out *o);
  int (*reduce)(ts_dist *d, float *g);                    /* after the gradient reducer */
  int (*clip)(ts_dist *d, float *g, ts__clip *c);
  int (*move)(ts_dist *d, ts_params *full, ts_optim *opt, ts_optim *fopt, int gather);
  /* Queries about the layout's own state (NULL: the answer of a layout with one training graph
   * over the whole job, given beside each wrapper below). */
  int (*stages)(const ts_dist *d);                       /* pipeline stages (1) */
  int (*stage_rules)(const ts_dist *d, ts_op_text **rules, int *n); /* the cut as rules (none) */
  int (*set_seed)(ts_dist *d, float seed);               /* every training plan's loss seed (r.plan's) */
  int (*reduce_bytes)(const ts_dist *d, double *bytes);  /* the gradient reduction's (the sync object's) */
  void (*activation_bytes)(const ts_dist *d, int measured, int64_t *train, int64_t *eval); /* r.plan's, r.plan_e's */
  const ts_graph *(*train_piece)(const ts_dist *d, int i, const ts_plan **plan); /* r.g */
  const ts_strategy_set *(*strategies)(const ts_dist *d); /* operator strategies in force (NULL) */
  ts_params *(*whole_params)(const ts_dist *d);          /* the whole model's store, when built (NULL) */
  int (*times)(const ts_dist *d, double *wall, double *bubble, double *recv_wait); /* a schedule's (0) */
  /* what the sync object needs of the layout: the training plans backward runs in (r.plan), the
   * ranks sharding partitions (the world), parameters several stages hold (none), and each
   * entry's weight in the global norm */
  int (*train_plans)(const ts_dist *d, ts_plan ***plans);
  void (*shard_base)(const ts_dist *d, ts_comm **c, int *n, int *r);
  int (*tied)(const ts_dist *d, int i);
  int (*tied_shardable)(const ts_dist *d);
  float (*norm_weight)(const ts_dist *d, int i);
  /* LAMB: the group over which parameters are sliced (1 with *c, *n), 0: whole on every rank
   * (NULL: the world where the store is sliced) */
  int (*norm_group)(ts_dist *d, ts_comm **c, int *n);
};

struct ts_dist {
  const ts_dist_vt *vt;
  ts_dist_config cfg;
  int *own_splits;             /* cfg.fusion_splits and cfg.stage_rules point here (copies) */
  ts_op_text *own_rules;
  int dry;          /* devices planned for without MPI (0: a real job) */
  ts_comm *world;   /* real jobs of layouts that run over MPI */
  ts_dist_run r;
  ts_dist_model model;
  float seed;                  /* loss seed of one micro-step's backward (without the loss scale) */
  ts_val seed_val;             /* the CONST of r.g's backward holding it (not under a pipeline:
                                  each piece has its own, dist_pipe.c) */
  float loss_scale;            /* ts_dist_set_loss_scale: the plans' seeds are seed * loss_scale */
  ts_reduce_op loss_op;        /* the step's loss: loss_op over ranks of (mean loss * loss_weight) */
  float loss_weight;
  ts__sync sync;               /* gradient synchronisation across replicas (sync.h) */
  void *priv;                  /* the layout's own state (its file's private struct; freed by vt->free) */
  ts_dist_span_fn span;
  void *span_user;
  struct ts__dist_dev *gpu;    /* device_target GPU: the device and its copies (dist_device.c), else NULL */
};

/* dist_device.c (device_target GPU): the device opened at create (the layouts it runs), the plans
 * and store put on it after the build, the step's parts on it, its end with the object. */
int ts__dist_dev_open(ts_dist *d);
int ts__dist_dev_bind(ts_dist *d);
struct ts__dev *ts__dist_dev_device(const ts_dist *d); /* the job's GPU (d->gpu set) */
void ts__dist_dev_free(ts_dist *d);
int ts__dist_dev_fwd_bwd(ts_dist *d, const void *x, const void *y, int64_t step, double *loss, float **g);
int ts__dist_dev_eval(ts_dist *d, const void *x, const ts__eval_out *o);
int ts__dist_dev_clip(ts_dist *d, float *g, ts__clip *c);
int ts__dist_dev_optim_create(ts_dist *d, const ts_optim_segment *segs, int nseg, ts_optim *o);
int ts__dist_dev_optim_step(ts_dist *d, ts_optim *o, const float *g, float lr);
/* data_parallel on GPU ranks: the parameter broadcast on the devices (start), the gradients'
 * all-reduce (the step's end), the running statistics' mean (before evaluation and saving) */
int ts__dist_dev_start(ts_dist *d);
/* parallel.parameter_broadcast refused where the parameters are held as slices (dist.c). */
int ts__dist_broadcast_check(const ts_dist *d);
int ts__dist_dev_reduce(ts_dist *d, float *g, double *wait_ms);
int ts__dist_dev_sync_states(ts_dist *d);

extern const ts_dist_vt ts__dist_semi_auto;
extern const ts_dist_vt ts__dist_pipeline;
/* The layout's answers (its vtable's queries, or the defaults of one training graph over the whole
 * job): pipeline stages (1 without); the training plan instances backward runs in (*plans; their
 * number); the ranks optimizer sharding partitions (the world: *c NULL in dry runs, *n ranks,
 * this one *r); whether rank-store entry i is held by several stages (its gradient summed over the
 * pipeline) and whether such parameters may be sharded (stages of data_parallel: every stage's
 * replicas cut them alike); entry i's weight in the global norm (1 / the stage's ranks holding
 * its slice, 0 when an earlier stage counts it; NULL layouts: 1); the whole model's store (NULL
 * when the rank's store is it). */
int ts__dist_train_plans(const ts_dist *d, ts_plan ***plans);
void ts__dist_shard_base(const ts_dist *d, ts_comm **c, int *n, int *r);
int ts__dist_tied(const ts_dist *d, int i);
int ts__dist_tied_shardable(const ts_dist *d);
float ts__dist_norm_weight(const ts_dist *d, int i);
ts_params *ts__dist_whole_params(const ts_dist *d);
/* The pipeline layout's manifest key of a configuration: its stages (1 without), as
 * trainer_ckpt.c always wrote it (dist_pipe.c). */
void ts__pipe_manifest_key(const ts_dist_config *c, char *buf, size_t cap);

/* Calls the model builder (with this object's rank, size and groups) on *x and the targets *y
 * (y NULL for the evaluation graph), checks it gave logits (and a loss), and runs the amp pass
 * (cfg.amp_level), which remaps *x and *y. */
int ts__dist_build_model(ts_dist *d, ts_nn *nn, ts_val *x, ts_val *y, ts_val *logits, ts_val *loss);
/* The input values of a graph for `rows` rows of the model's samples (y TS_NONE when !targets). */
void ts__dist_inputs(ts_dist *d, ts_graph *g, int64_t rows, int targets, ts_val *x, ts_val *y);
int ts__dist_graph_fail(ts_graph *g, const char *what);
/* Bytes of one sample's data (xs) and of its targets (ys) as the trainer passes batches. */
void ts__dist_row_bytes(const ts_dist *d, size_t *xs, size_t *ys);
/* Allocates r.params, attaches the gradients of r.g and plans r.g (keeping r.loss) and r.ge
 * (keeping r.logits), both bound to the store. */
/* A dry run that sizes without allocating (d->dry and not cfg.dry_allocate). */
int ts__dist_sizing(const ts_dist *d);
/* ZeRO in mixed precision (dist_zero16.c): the dtype of the plans' weights and gradients for d's
 * configuration: cfg.amp_dtype where parallel.optimizer_shard_weights is low, or auto under
 * train.amp_level O2/O3 with stage 1 or 2 where the layout allows it (data_parallel, no
 * accumulation, not LAMB, no shard groups, the CPU); else TS_F32. low where the layout does not
 * allow it: TS_ECONFIG naming the key and the reason. */
int ts__zero16_dtype(const ts_dist *d, ts_dtype *dt);
/* The rank's store allocated as the layout needs it, or laid out only when sizing. */
int ts__dist_alloc_store(ts_dist *d, ts_params *p);
/* ts_plan_create, or ts_plan_create_dry when sizing. */
int ts__dist_plan_create(const ts_dist *d, ts_graph *g, const ts_val *keep, int nkeep, ts_plan **out);
/* Backward of the training graph (seed d->seed), then the recompute pass of cfg.recompute. */
int ts__dist_backward(ts_dist *d);
int ts__dist_plans(ts_dist *d);
/* Parameter broadcast (refused when parameters are sliced), then the reduction of the gradients
 * of parameters several ranks hold (sum, or mean by d->sync.mean), attached for overlap. */
int ts__dist_start_world(ts_dist *d);
/* One sharded entry i of lp between the rank's slice l and the whole tensor w: gather = 1
 * all-gathers every rank's slice over c (N ranks: the layout's devices) into w; 0 cuts rank
 * `rank`'s slice out of w (local). */
int ts__dist_move_slices(ts_comm *c, int N, int rank, ts_params *lp, int i, float *l, float *w, int gather);
/* Global-norm clipping over slices: each parameter counted once over the ranks holding it. */
int ts__dist_clip_sliced(ts_dist *d, float *g, ts__clip *c);

/* ---- LAMB over pieces (dist_lamb.c) ---- */
/* Makes the LAMB optimizer opt sum its per-segment norms over communicator c: local segment s
 * (of nloc) is global segment glob[s] (of nglob, the same list on every rank of c), its sums
 * weighted by w[s] (1 / the ranks of c holding the same piece). No-op for other optimizers. */
int ts__lamb_install(ts_dist *d, ts_optim *opt, ts_comm *c, int nglob, int nloc, const int *glob, const float *w);
/* The same for an optimizer over the rank's store (segments at the parameters' offsets) where
 * parameters are sliced (semi_auto, hybrid, pipeline stages under semi_auto). */
int ts__lamb_install_sliced(ts_dist *d, ts_optim *opt, const ts_optim_segment *segs, int nseg);
void ts__lamb_free(struct ts__lamb *L);
/* ---- the whole store (dist_whole.c) ---- */
/* For each entry of kind `states` (0 trainable, 1 state): whole[...] (laid out as full) <-> the
 * rank's slice loc[...] (laid out as its store). Gathering is collective (every rank's slice
 * travels); scattering is local. */
int ts__dist_move_flat(ts_dist *d, ts_params *full, float *loc, float *whole, int states, int gather);
/* Global-norm clipping of g, the layout's reduced gradient buffer, without a layout override:
 * over slices where the store holds them (ts__dist_clip_sliced), else locally. */
int ts__dist_clip_default(ts_dist *d, float *g, ts__clip *c);

/* ---- ZeRO's own figures (dist_zero.c), for tests and benchmarks: 0 / nothing without it ---- */
/* Bytes of parameters the rank holds persistently (the store's without sharding). */
size_t ts__zero_param_bytes(const ts_dist *d);
/* Stage 3's gather slots (0 otherwise). */
size_t ts__zero_slot_bytes(const ts_dist *d);
/* Bytes one rank sends per step through the reduction and gathers (ring algorithms; without
 * sharding the all-reduce's). */
double ts__zero_comm_bytes(const ts_dist *d);
/* The line(s) of `tessera plan` for the sharding (nothing without it). */
void ts__zero_describe(const ts_dist *d, FILE *out);
/* Stage 3: seconds the plans' hooks waited for parameter gathers since the last call. */
double ts__zero_take_gather_wait(ts_dist *d);

#endif
