/* Internal: the interface a parallel layout implements, and the object's state
 * (src/distribution/dist.h). One file per layout family: dist.c (the object, stand_alone,
 * data_parallel, hybrid_parallel: models built per rank), dist_semi.c (semi_auto_parallel: the
 * whole model cut by the parallel pass), dist_whole.c (whole-model checkpoints and clipping over
 * slices), dist_zero.c (optimizer-state sharding, parallel.optimizer_shard, under data_parallel,
 * semi_auto_parallel and pipeline stages; parameter sharding, stage 3, under data_parallel, its
 * gathers in gather.c). */
#ifndef TS_DIST_IMPL_H
#define TS_DIST_IMPL_H

#include "distribution/dist.h"

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
  int (*eval_forward)(ts_dist *d, const void *x, const float **logits);
  int (*reduce)(ts_dist *d, float *g);                    /* after the gradient reducer */
  int (*clip)(ts_dist *d, float *g, ts__clip *c);
  int (*move)(ts_dist *d, ts_params *full, ts_optim *opt, ts_optim *fopt, int gather);
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
  ts_grad_reducer *red;        /* NULL: nothing to reduce */
  int reduce_mean;             /* the reducer averages (data parallel) or sums */
  int overlap;
  /* models built per rank: the groups a hybrid model asked for (ts_model_group) */
  int ngroups, groups_cap;     /* any number (grown by ts_model_group) */
  struct ts__dist_group {
    int ndev, dev[TS_LAYOUT_MAX_AXES], axis;
  } *group;
  ts_comm **group_comm;        /* ngroups, made by the start */
  /* semi_auto_parallel: the pass over the whole model's graphs */
  ts_parallel *pp, *pe;
  ts_graph *gg, *gge;
  ts_params *gp;
  ts_comm **slots, **eslots;   /* the passes' slot communicators (nslots, neslots; malloc'd) */
  int nslots, neslots;
  /* parallel.optimizer_shard (dist_zero.c); NULL: off */
  struct ts__zero *zero;
  /* pipeline (dist_pipe.c) */
  struct ts__pipe *pipe;
  /* LAMB's norms over pieces of parameters (dist_lamb.c); NULL: not needed */
  struct ts__lamb *lamb;
  ts_dist_span_fn span;
  void *span_user;
};

extern const ts_dist_vt ts__dist_semi_auto;
extern const ts_dist_vt ts__dist_pipeline;
/* The arenas of every plan a pipeline rank holds (ts_dist_activation_bytes). */
void ts__pipe_activation_bytes(const ts_dist *d, int measured, int64_t *train, int64_t *eval);
/* Every training plan instance of every piece of a pipeline rank seeded with `seed`. */
int ts__pipe_set_seed(ts_dist *d, float seed);
/* Piece i of a pipeline rank (its virtual stages in order) and its first plan; NULL past them. */
const ts_graph *ts__pipe_piece(const ts_dist *d, int i, const ts_plan **plan);
/* Bytes a pipeline rank sends per step reducing gradients: ring all-reduce over the stage's
 * replicas, and the parameters several stages hold summed over the pipeline. */
double ts__pipe_reduce_bytes(const ts_dist *d);

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
/* The rank's store allocated as the layout needs it, or laid out only when sizing. */
int ts__dist_alloc_store(ts_dist *d, ts_params *p);
/* ts_plan_create, or ts_plan_create_dry when sizing. */
int ts__dist_plan_create(const ts_dist *d, ts_graph *g, const ts_val *keep, int nkeep, ts_plan **out);
/* Backward of the training graph (seed d->seed), then the recompute pass of cfg.recompute. */
int ts__dist_backward(ts_dist *d);
int ts__dist_plans(ts_dist *d);
/* Parameter broadcast (refused when parameters are sliced), then the reduction of the gradients
 * of parameters several ranks hold (sum, or mean by d->reduce_mean), attached for overlap. */
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
/* A pipeline's group over which parameters are sliced (its stage's semi_auto ranks): 1 with *c
 * and its size *n, 0 when every rank holds its parameters whole. */
int ts__pipe_norm_group(ts_dist *d, ts_comm **c, int *n);
/* The ranks optimizer sharding partitions under a pipeline: the stage's (its data-parallel
 * replicas, or its semi_auto ranks): their communicator *c (NULL in dry runs), *n of them, this
 * rank's place *r. */
void ts__pipe_shard_base(const ts_dist *d, ts_comm **c, int *n, int *r);
/* The training plan instances of the rank's first piece (every instance of d->r.g: the
 * schedule's micro-batches in flight), *plans pointing at them; their number. */
int ts__pipe_train_plans(const ts_dist *d, ts_plan ***plans);
/* The parameters several stages hold may be sharded by optimizer_shard: stages of data_parallel
 * (every stage's replicas cut them alike), not of semi_auto_parallel. */
int ts__pipe_tied_shardable(const ts_dist *d);
/* Rank-store entry i is held by several stages (its gradient summed over the pipeline). */
int ts__pipe_tied(const ts_dist *d, int i);
/* Rank-store entry i's weight in the global norm: 1 / the stage's ranks holding its slice, 0 when
 * an earlier stage counts it. */
float ts__pipe_norm_weight(const ts_dist *d, int i);

/* ---- optimizer-state sharding (dist_zero.c) ---- */
/* The shard layout over the rank's store (idempotent; needs the built store). */
int ts__zero_plan(ts_dist *d);
void ts__zero_free(struct ts__zero *z);
/* Gradient buckets of the sharded optimizer's reduce-scatter, over all its groups. */
int ts__zero_num_buckets(const struct ts__zero *z);
/* The reduce-scatter buckets attached to the plan for overlap (start). */
int ts__zero_start(ts_dist *d);
/* Arms the overlapped reduce-scatter of a run writing its gradients into grads. */
void ts__zero_begin(ts_dist *d, float *grads);
/* Waits for (or runs) the reduce-scatter of the sharded gradients of g and all-reduces the
 * replicated ones, into the optimizer's work buffer. */
int ts__zero_reduce(ts_dist *d, const float *g);
/* Stages 2 and 3: micro-step k's gradients (reduce-scattered during its backward) accumulated
 * into the work buffer; the next micro-step armed. */
int ts__zero_accumulate(ts_dist *d, const float *grads, int64_t k);
/* The global norm over the work buffer (shards summed over the ranks, replicated once), and
 * clipping of it. */
int ts__zero_clip(ts_dist *d, ts__clip *c);
/* One slot of the rank's optimizer (loc) <-> the same slot over the rank's store (whole: the
 * store's layout; gathering is collective over the groups). full, when not NULL, is checked to
 * have the store's layout. */
int ts__zero_move_slot(ts_dist *d, ts_params *full, float *loc, float *whole, int gather);
/* A sharded optimizer slot (the work buffer loc) <-> the whole model's (whole) where the store
 * holds slices (semi_auto_parallel; dist_whole.c). */
int ts__dist_zero_move_sliced(ts_dist *d, ts_params *full, float *loc, float *whole, int gather);
/* Under a pipeline of data-parallel stages, a parameter several stages hold (store offset flat,
 * numel elements) is sharded in a bucket of its own: the rank's reduced part of its gradient in the
 * work buffer, elements [*lo, *lo + *n) of the parameter (the same on every stage at this rank's
 * replica place); NULL when it is not sharded. */
float *ts__zero_tied_part(ts_dist *d, size_t flat, size_t numel, size_t *lo, size_t *n);
/* The reduced gradient of the replicated parameter at store offset flat in the work buffer (NULL:
 * sharded, or no sharding). */
float *ts__zero_rep_grad(ts_dist *d, size_t flat);
/* Stage 3: the rank's parameters (the layout of an optimizer slot: replicated, then its parts),
 * moved to and from a whole store like a slot; NULL under other stages (the store holds them). */
float *ts__zero_held_params(ts_dist *d);
/* fn(user, flat, n, work) for every range of the rank's store its optimizer's work buffer holds:
 * each replicated (or unreduced) parameter whole, then the rank's part of every bucket (store
 * elements [flat, flat + n) at `work` in the work buffer); stops at the first non-zero return. */
int ts__zero_each_range(const ts_dist *d, int (*fn)(void *user, size_t flat, size_t n, size_t work), void *user);
/* Bytes of parameters the rank holds persistently: the store's (the whole model) without
 * sharding; plus the optimizer's copy of its part under stages 1 and 2; under stage 3 its part
 * and the replicated parameters plus the gather slots (no whole copy). Dry runs: the job's. */
size_t ts__zero_param_bytes(const ts_dist *d);
/* Stages 2 and 3: bytes of gradients the rank holds besides the optimizer's work buffer (whose
 * R + P floats take the reduced gradients): the buckets' staging slots (with accumulation, each
 * with room for a reduced part) and, with accumulation, the replicated gradients of a
 * micro-step (R). No whole-model gradient buffer exists. 0 under stage 1 or without sharding. */
size_t ts__zero_staged_grad_bytes(const ts_dist *d);
/* Of which the gather slots (stage 3; 0 otherwise). */
size_t ts__zero_slot_bytes(const ts_dist *d);
/* Bytes one rank sends per optimizer step through the data-parallel gradient reduction and
 * parameter gathers, counted as ring algorithms send them ((N-1)/N of an all-gather's or a
 * reduce-scatter's elements, 2(N-1)/N of an all-reduce's): plain data parallel's all-reduce
 * without sharding; stages 1 and 2 the same volume; stage 3 the gathers of the training plan's
 * runs instead of one all-gather (about 1.5x). */
double ts__zero_comm_bytes(const ts_dist *d);
/* Stages 2 and 3: seconds backward waited for a staging slot (its previous bucket's
 * reduce-scatter) since the last call; 0 otherwise. */
double ts__zero_take_slot_wait(ts_dist *d);
/* Stage 3: seconds the plans' hooks waited for parameter gathers since the last call (the
 * gathers' communication not hidden behind compute); 0 otherwise. */
double ts__zero_take_gather_wait(ts_dist *d);
/* The line(s) of `tessera plan` for the sharding (nothing without it). */
void ts__zero_describe(const ts_dist *d, FILE *out);

#endif
