/* Tessera trainer: turns a ts_config into a training run (data pipeline, model, optimizer,
 * schedule, gradient accumulation, evaluation, metrics, progress, checkpoints, exact resume).
 *
 * Usage (compiled by tests/tools/header_examples_test.sh):
 *   ts_config cfg;  ts_config_load("examples/mlp_fashion.yaml", NULL, 0, &cfg);
 *   ts_trainer *t;
 *   if (ts_trainer_create(&cfg, &t)) fprintf(stderr, "%s\n", ts_last_error());
 *   ts_trainer_fit(t);                 // trains; evaluates; writes metrics and checkpoints
 *   ts_trainer_free(t);
 *   ts_config_free(&cfg);              // the trainer keeps its own copy (ts_config_copy)
 *
 * The trainer holds no assumption about world size: batch sizes in the config are global. */
#ifndef TESSERA_TRAIN_H
#define TESSERA_TRAIN_H

#include "tessera/autoparallel.h"
#include "tessera/config.h"
#include "tessera/cluster.h"
#include "tessera/comm.h"
#include "tessera/model.h"
#include "tessera/nn.h"
#include "tessera/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_trainer ts_trainer;

typedef struct {
  int64_t step;  /* optimizer steps done (1 after the first update) */
  int64_t epoch; /* 0-based epoch of this step */
  int64_t batch; /* batch index within the epoch */
  double loss;   /* mean training loss of the step (over its micro-batches) */
  double lr;
  double grad_norm;     /* global L2 norm of the step's gradients, before clipping (unscaled:
                           the true norm; inf or NaN when they overflowed) */
  double loss_scale;    /* the loss scale this step's gradients were computed with (1 without
                           train.loss_scale); after an overflow the next step's is lower (dynamic) */
  int overflow;         /* 1: some gradient of some rank was inf or NaN (the norm is not finite) */
  int skipped;          /* 1: the update was skipped for it (train.loss_scale fixed or dynamic):
                           parameters and optimizer state are those of the step before */
  double step_ms;       /* wall time of the step (data wait included) */
  double samples_per_s; /* global batch / step time */
  double comm_wait_ms;  /* data parallel: time the step waited for gradient all-reduces after
                           backward (communication not hidden behind it); 0 alone */
  /* log.profile on and the step recorded (profiled = 1): the step broken down, in ms */
  int profiled;
  double data_ms, forward_ms, backward_ms, optimizer_ms, comm_exposed_ms;
  /* pipeline (parallel.pipeline_stages > 1): this rank's idle time within the schedule (the
   * bubble: the schedule's wall time minus its forward/backward compute) and the part of it
   * spent blocked in receives, in ms, and the bubble as a fraction of the schedule's time */
  int pipelined;
  double bubble_ms, p2p_wait_ms, bubble_fraction;
} ts_step_info;

typedef struct {
  int64_t step, epoch;
  int64_t samples;
  double loss, top1, top5; /* top-k as fractions in [0,1] */
  double seconds;
} ts_eval_info;

/* Callbacks: each hook may be NULL. A non-zero return stops training with that status (the
 * message should be set with ts_error_set). ts_trainer_request_stop ends training cleanly. */
typedef struct {
  const char *name;
  int (*on_step_end)(ts_trainer *t, const ts_step_info *s, void *user);
  int (*on_eval_end)(ts_trainer *t, const ts_eval_info *e, void *user);
  int (*on_epoch_end)(ts_trainer *t, int64_t epoch, void *user);
  int (*on_train_end)(ts_trainer *t, void *user);
  void *user;
} ts_callback;

/* ts_trainer_create with the model from `model` instead of model.name (the config's model.*
 * keys other than num_classes are then ignored). A builder of the whole network runs under every
 * layout a zoo model does: pipeline stages (cut balanced or by parallel.stages) and auto_parallel
 * (every candidate plan built through it); under hybrid_parallel it writes one rank's part. */
int ts_trainer_create_custom(const ts_config *cfg, ts_model_fn model, void *user, ts_trainer **out);

/* What semi_auto_parallel makes of cfg on `ndevices` devices, without MPI and without training
 * (plans for clusters you do not have): every operator's strategy and layouts, the collectives
 * inserted with bytes per step, and rank `rank`'s memory for parameters, gradients, optimizer
 * state and activations (the planned arena of the training step), beside one process's, and the
 * rank's figures as the run measures them (ts_trainer_memory). Reads the first training sample
 * for its shape. model: NULL for cfg's zoo model. *text is malloc'ed. When the figures exceed
 * train.max_memory_mb the status is TS_ECONFIG (the message as ts_trainer_create's) and *text
 * still holds the report (free it). */
int ts_trainer_plan(const ts_config *cfg, int ndevices, int rank, ts_model_fn model, void *user,
                    char **text);

/* The figures ts_trainer_plan shows for rank `rank` of `ndevices` as numbers (the prediction of
 * what ts_trainer_memory measures in that rank of the job), without MPI and without training. */
int ts_trainer_plan_memory(const ts_config *cfg, int ndevices, int rank, ts_model_fn model, void *user,
                           ts_dist_memory_info *out);
/* ts_trainer_plan's report, and from the same dry build the rank's figures (*mem, may be NULL)
 * and *baseline (may be NULL): this process's resident set once the data sets are open, before
 * the model is built (libraries, MPI, the data sets as the run holds them; ts_mem_rss). What a
 * device running the rank needs is mem->total_bytes + *baseline (the report's peak_rss_bytes
 * line); `tessera plan --device-memory`'s verdict compares that sum. (One build: a second one in
 * the same process would count the first's heap in its baseline.) Both are filled whenever the
 * build succeeded, also when the status is the train.max_memory_mb refusal. */
int ts_trainer_plan_report(const ts_config *cfg, int ndevices, int rank, ts_model_fn model, void *user,
                           char **text, ts_dist_memory_info *mem, int64_t *baseline);

/* Measures this machine as a cluster description (`tessera calibrate`): the sgemm peak, the
 * fraction a model-sized GEMM reaches, the memory bandwidth, and with world (2 or more ranks;
 * collective, NULL alone) the all-reduce latency and bandwidth between the ranks. */
int ts_calibrate(ts_comm *world, ts_cluster *out);
/* The same for one GPU per rank (`tessera calibrate` with device_target GPU): the GPU of
 * device_id (-1: DEVICE_ID, else the local rank, modulo the GPUs, as a job's) measured: its f32
 * and bf16 GEMM peaks, a model-sized GEMM's share, the memory bandwidth, a kernel launch's cost
 * (op_overhead), the pinned host<->device copy rates (h2d_bw, d2h_bw), its memory, and with world
 * (collective) the all-reduce latency and bandwidth through the device collectives (NCCL or MPI
 * staged). TS_ECONFIG without a usable GPU, naming what is missing. */
int ts_calibrate_gpu(ts_comm *world, int device_id, ts_cluster *out);
/* What ts_calibrate_model measured on a model, per GEMM-like family (0 matmul/dense, 1 conv,
 * 2 attention) and for the memory-bound rest, over the timed steps. */
typedef struct {
  double family_s[3], family_flops[3]; /* seconds and FLOPs of each family's nodes per step */
  double other_s, other_bytes;         /* the other non-view nodes: seconds and bytes moved per step */
  int64_t other_nodes;                 /* how many of them run per step */
  double plan_s;                       /* the training plan's run (forward + backward) per step */
  double predicted_s;                  /* the cost model's price of that plan with the result */
  int steps;                           /* timed steps (after the warm-up ones) */
} ts_calibration_report;
/* Measures the operator families of the model of `cfg` as one process runs it (stand_alone, no
 * pipeline, at its train.micro_batch_size and train.amp_level): `warmup` + `steps` training steps
 * with a plan hook timing every node; sets in c (a cluster from ts_calibrate, whose peaks it uses)
 * efficiency_matmul / _conv / _attention to the achieved fraction of the peak of the dtype each
 * node runs in (families the model lacks keep 0: gemm_efficiency), and mem_bandwidth to the
 * bytes the other operators move per second net of c->op_overhead each; appends to c->source.
 * The model's data set is opened (the run is real). Fills *rep (may be NULL). */
int ts_calibrate_model(const ts_config *cfg, int warmup, int steps, ts_cluster *c, ts_calibration_report *rep);
/* The step time the cost model predicts for rank `rank` of cfg's job on cluster c (planner.h;
 * ts_step_prediction in autoparallel.h): the job's layout built dry and priced by the search's
 * predictor. Under auto_parallel, the searched plan's. */
int ts_trainer_predict(const ts_config *cfg, int ndevices, int rank, const ts_cluster *c, ts_step_prediction *out);
/* The same for plan p (its degrees, micro-batching, shard stage, recompute and strategies) in
 * place of cfg's layout keys. */
int ts_trainer_predict_autoplan(const ts_config *cfg, const ts_autoplan *p, int ndevices, int rank,
                                const ts_cluster *c, ts_step_prediction *out);
/* `tessera plan`'s report (ts_trainer_plan_report) for plan p in place of cfg's layout keys. */
int ts_trainer_plan_report_autoplan(const ts_config *cfg, const ts_autoplan *p, int ndevices, int rank, char **text,
                                    ts_dist_memory_info *mem, int64_t *baseline);

/* The auto_parallel search (include/tessera/autoparallel.h, src/autoparallel/) for cfg's zoo
 * model on N devices of cluster c: every candidate plan into cands (up to cap, *n written;
 * without strategies) and the chosen one, with its strategies, into *chosen (free with
 * ts_autoplan_free). The chosen one also carries its stage cut (pp > 1: stage_rules).
 * TS_ECONFIG when none fits. */
int ts_trainer_autoplan_search(const ts_config *cfg, int N, const ts_cluster *c, ts_autoplan *cands, int cap, int *n,
                               ts_autoplan *chosen);
/* Plan p's strategies for cfg's zoo model (the degrees given: Megatron-LM's cuts, or the
 * per-operator search priced on c) into p->strategies and its stage cut (pp > 1) into
 * p->stage_rules (free both with ts_autoplan_free), and cfg's
 * keys with p applied validated (TS_ECONFIG naming the key). */
int ts_trainer_autoplan_build(const ts_config *cfg, const ts_cluster *c, ts_autoplan *p);
/* Sets cfg's layout keys to plan p's (parallel.mode, stages, micro-batches, schedule, optimizer
 * shard, model.recompute, the micro-batch and evaluation rows) and clears parallel.strategies:
 * the plan's strategies travel as its set, never as text. cfg must own its lists (ts_config_copy). */
int ts_config_apply_autoplan(ts_config *cfg, const ts_autoplan *p);
/* The plan a trainer runs (parallel.mode auto_parallel; its strategies are those the layout
 * was built with), NULL for the other modes. Owned by the trainer. */
const ts_autoplan *ts_trainer_autoplan(const ts_trainer *t);

/* The training and test sources cfg's data.* keys describe (the trainer's own: data.path, splits,
 * train_limit / test_limit applied), for a binding that iterates a data set by itself (the Python
 * package's datasets). *test may be NULL (no test split). Free both with ts_source_free. Errors
 * name the key and the file (TS_ECONFIG, TS_ENOTFOUND, TS_EFORMAT). A split "source:NAME" is the
 * source registered as NAME (ts_source_register, data.h: a program's own source for the trainer;
 * with data.name records, data.path is then not read); with a registered training split and no
 * data.test_split there is no test split. */
int ts_config_sources(const ts_config *cfg, ts_source **train, ts_source **test);

/* Builds data pipelines, model graphs, parameters and optimizer from a validated config (the
 * trainer keeps a deep copy: cfg may be freed after). Resumes from config.checkpoint.resume if set. Errors name the key, file or op at fault. */
int ts_trainer_create(const ts_config *cfg, ts_trainer **out);
void ts_trainer_free(ts_trainer *t);
/* Adds a callback (copied); called in the order added, after the built-in ones. */
int ts_trainer_add_callback(ts_trainer *t, const ts_callback *cb);
/* Trains to the configured number of steps/epochs. */
int ts_trainer_fit(ts_trainer *t);
/* Lengthens the run to `epochs` epochs' steps after the current step (train.epochs becomes the
 * run's length in epochs; the learning-rate schedule is re-made for it) and clears a stop
 * request, so the next ts_trainer_fit continues with the same parameters, optimizer state, step
 * count and data order: after a run of E1 epochs, as one run of E1 + epochs (MindSpore's second
 * Model.train). TS_EINVAL for epochs < 0 or a run whose length train.steps fixes. */
int ts_trainer_continue(ts_trainer *t, int64_t epochs);
/* Makes the learning rate of optimizer step i rates[i] from the next step on (schedule table:
 * optimizer.schedule.name table, values the n rates copied; checkpoints record them), for rates the
 * caller computes once the run's length is known (Python's LearningRateSchedule cells; lengthen
 * before ts_trainer_continue). TS_ECONFIG (nothing changed) if n is less than the run's steps or a
 * rate is negative or not finite; every rank must give the same rates. */
int ts_trainer_set_lr_table(ts_trainer *t, const float *rates, int64_t n);
/* The steps the learning-rate schedule spans (train.steps, or train.epochs x steps per epoch):
 * the rates ts_trainer_set_lr_table needs at least. */
int64_t ts_trainer_lr_steps(const ts_trainer *t);
/* One optimizer step on a batch the caller gives (a Python loop calling TrainOneStepCell): b
 * holds this rank's rows of the global batch as the trainer's own pipeline would feed them
 * (train.batch_size / the data-parallel parts; the sample shape and dtype the model was built
 * for; labels, or targets for text). The step counter, learning-rate schedule, loss scaling,
 * clipping and the step callbacks run as in ts_trainer_fit; evaluation, epochs and checkpoints
 * do not (the caller's loop owns them). TS_ESHAPE naming both shapes for a wrong batch.
 * Collective. */
int ts_trainer_step_batch(ts_trainer *t, const ts_batch *b, ts_step_info *info);
/* ts_trainer_step_batch in two halves (MindSpore's value_and_grad then optimizer(grads); PyTorch's
 * backward() then step()): grad_batch runs forward and backward of b and reduces the gradients
 * over the ranks, keeping them (info->loss set); apply_grads then clips, unscales and updates
 * with them, counts the step and runs the step callbacks (info complete). Together bitwise one
 * ts_trainer_step_batch. TS_EINVAL for a second grad_batch (or a step_batch, a fit) while
 * gradients are pending, and for apply_grads without them. Collective, both. */
int ts_trainer_grad_batch(ts_trainer *t, const ts_batch *b, ts_step_info *info);
int ts_trainer_apply_grads(ts_trainer *t, ts_step_info *info);
/* The evaluation graph's forward on n samples x (the model's sample shape and dtype, n at most
 * ts_trainer_forward_batch): their logits (ts_trainer_logits_per_sample floats each) into
 * logits (cap floats). Where the layout cuts the model every rank must call it with the same
 * rows (collective); in data parallel each rank computes its own. */
int ts_trainer_forward(ts_trainer *t, const void *x, int64_t n, float *logits, size_t cap);
int64_t ts_trainer_forward_batch(const ts_trainer *t);
size_t ts_trainer_logits_per_sample(const ts_trainer *t);
/* The shape and dtype of one input sample the model was built for. */
void ts_trainer_sample(const ts_trainer *t, ts_shape *shape, ts_dtype *dtype);
/* Evaluates the current parameters on the test split. TS_ENOTFOUND if there is no test data. */
int ts_trainer_evaluate(ts_trainer *t, ts_eval_info *out);
/* Loads parameters (and with_optimizer: optimizer state and position) from a checkpoint: a whole
 * file (gathered into a whole-model store, then cut into the rank's slices) or a sliced
 * checkpoint's directory (each rank reads only the pieces it holds, whatever layout wrote them;
 * collective: every rank fails when one does). Any layout loads either. */
int ts_trainer_load(ts_trainer *t, const char *path, int strict, int with_optimizer);
/* Saves a whole checkpoint (parameters, optimizer, position) to the file path. Where every rank
 * holds the whole state (ts_trainer_whole_is_local: stand-alone, data parallel without optimizer
 * sharding), the calling rank writes path from its own state, without the others (any rank may
 * call it alone). Otherwise collective: every rank's slices are gathered, rank 0 writes, and a
 * rank whose path differs from those of the ranks before it gets a copy at its path; a rank that
 * does not call it within min(parallel.comm_timeout, 30 s) makes it fail on the others, naming
 * the missing ranks and the call. */
int ts_trainer_save(ts_trainer *t, const char *path);
/* 1 when this rank holds the whole state itself (nothing cut: one rank, or data parallel without
 * optimizer sharding, one pipeline stage): ts_trainer_save and loading a whole file need no other
 * rank. */
int ts_trainer_whole_is_local(ts_trainer *t);
/* Saves a sliced checkpoint as the directory `dir` (collective; docs/checkpoints.md): each rank
 * writes its own pieces (a piece several ranks hold, by the lowest of them) into a staging
 * directory, rank 0 writes the manifest last and renames the directory into place (an existing
 * one is replaced atomically). Every rank returns the same status; a failing rank's message
 * names it. */
int ts_trainer_save_sliced(ts_trainer *t, const char *dir);
/* checkpoint.async from the C API: saves a checkpoint as ts_trainer_save (sliced = 0) or
 * ts_trainer_save_sliced (sliced = 1) would, but returns once the state is copied to host memory
 * (the whole model gathered to rank 0, or each rank's pieces; the copy's buffer is kept for the
 * next save) and the files are written by a background thread while the caller goes on
 * (collective). It first waits for the previous background save: its failure (naming the file)
 * is returned here on every rank, and then nothing new is saved. ts_trainer_save_wait waits for
 * the background save and returns its status on every rank (collective; TS_OK if none). The
 * trainer's own saves (ts_trainer_fit with checkpoint.async: true) use the same writer, and
 * ts_trainer_free joins it. */
int ts_trainer_save_async(ts_trainer *t, const char *path, int sliced);
int ts_trainer_save_wait(ts_trainer *t);
/* Re-cuts sliced checkpoint src for a job of ndevices under cfg (its layout: parallel.* keys,
 * strategies) into the sliced checkpoint out, in one process: each target rank's pieces (from a
 * dry build of that rank, as `tessera plan` does) are read from src and written. The model, its
 * optimizer and the training-relevant keys must be src's (TS_ECONFIG otherwise). */
int ts_trainer_reshard(const ts_config *cfg, int ndevices, const char *src, const char *out);
void ts_trainer_request_stop(ts_trainer *t);
/* This rank's parameter store. Under parallel.optimizer_shard 3 it holds no parameter values
 * (ts_params_data is NULL; each rank keeps its shard): save a checkpoint for the whole model. */
ts_params *ts_trainer_params(ts_trainer *t);
/* This process's rank and the job's ranks (0 and 1 alone). */
int ts_trainer_rank(const ts_trainer *t);
int ts_trainer_world_size(const ts_trainer *t);
/* The hosts of a job spanning several and how its gradients are reduced across them ("" else). */
const char *ts_trainer_reduction_note(const ts_trainer *t);
/* The device this rank trains on, for a person: 0 and "" on the CPU; 1 and, on a GPU, its
 * description and what runs the heavy ops ("GPU 0: NVIDIA H200, compute capability 9.0, ...;
 * GEMMs: cuBLAS; convolutions: cuDNN", or "Tessera's kernels (why the library is not used)"),
 * cut to cap. */
int ts_trainer_device_info(const ts_trainer *t, char *buf, size_t cap);
/* Trainable parameters of the whole model (ts_params_numel(ts_trainer_params(t)) counts only
 * this rank's slices under semi_auto_parallel). */
int64_t ts_trainer_num_params(const ts_trainer *t);
int64_t ts_trainer_step(const ts_trainer *t);
/* Floats of optimizer state this rank holds (slots x extent): the whole model's under plain data
 * parallel, about 1/N of the sharded parameters' plus the replicated ones' under
 * parallel.optimizer_shard. */
int64_t ts_trainer_optim_state_numel(const ts_trainer *t);
/* Floats of the whole-model gradient accumulation buffer (0 without accumulation, and under
 * parallel.optimizer_shard 2 and 3, where each rank accumulates its reduced shard instead). */
int64_t ts_trainer_accum_numel(const ts_trainer *t);
/* The memory this rank holds for training, measured where it was allocated: parameters, states
 * and gradients of its store (and under parallel.optimizer_shard its working copies), the
 * accumulation buffer, the optimizer's slots, the training and evaluation arenas (planned now if
 * they were not yet). The run header prints it; the metrics end record has it with the peak
 * resident set (ts_mem_peak_rss). `tessera plan` predicts the same fields. */
int ts_trainer_memory(ts_trainer *t, ts_dist_memory_info *out);
/* The training plan (owned by the trainer), for a plan hook a tool or test adds after the
 * trainer's own (ts_plan_add_hook; the profiler's hook, with log.profile on, comes first). */
ts_plan *ts_trainer_plan_handle(ts_trainer *t);
int64_t ts_trainer_steps_per_epoch(const ts_trainer *t);

/* Built-in callbacks (the CLI uses them too). */
/* Stops with TS_EDIVERGED when the loss is not finite. */
ts_callback ts_callback_loss_monitor(void);
/* Early stop: stops when eval top-1 has not improved by min_delta for `patience` evaluations.
 * `state` must outlive the trainer (zero it first). */
typedef struct { int patience; double min_delta; double best; int bad; } ts_early_stop_state;
ts_callback ts_callback_early_stop(ts_early_stop_state *state);

#ifdef __cplusplus
}
#endif
#endif
