/* Internal pieces of the trainer shared by its files. */
#ifndef TS_TRAIN_IMPL_H
#define TS_TRAIN_IMPL_H

#include <stdint.h>
#include <stdio.h>

#include "tessera/checkpoint.h"
#include "tessera/data.h"
#include "tessera/optim.h"
#include "distribution/dist.h"
#include "tessera/prof.h"
#include "tessera/train.h"
#include "tessera/zoo.h"
#include "../autoparallel/autoplan.h"

/* Train and test sources for a config (test may come back NULL: no test data). */
int ts__train_sources(const ts_config *cfg, ts_source **train, ts_source **test);
/* A view of samples [off, off+n) of base (which it then owns). */
int ts__source_subset(ts_source *base, int64_t off, int64_t n, ts_source **out);
/* The same without ownership: base must outlive the view. */
int ts__source_view(ts_source *base, int64_t off, int64_t n, ts_source **out);

/* TensorBoard event file (tensorboard.c): TFRecord framing, Event protobufs written directly. */
typedef struct {
  FILE *f;
  char path[1200];
} ts__tboard;
/* CRC32C (Castagnoli) of n bytes, and TFRecord's masked form of it. */
uint32_t ts__crc32c(const void *data, size_t n);
uint32_t ts__crc32c_masked(const void *data, size_t n);
/* Creates dir (and parents) and dir/events.out.tfevents.<time>.<host>.<pid> with its
 * file_version event. TS_EIO naming log.tensorboard and the path. */
int ts__tboard_open(ts__tboard *tb, const char *dir);
/* One scalar event (tag, step, value as float). Nothing when tb is not open. */
int ts__tboard_scalar(ts__tboard *tb, const char *tag, int64_t step, double value);
int ts__tboard_flush(ts__tboard *tb);
void ts__tboard_close(ts__tboard *tb);

/* Progress display and metrics file. */
typedef struct {
  ts_progress_mode mode;
  int tty;
  int columns; /* terminal width for the bar (TIOCGWINSZ, else $COLUMNS, else 80) */
  FILE *metrics;
  ts__tboard tb;
  char metrics_path[1024];
  double t_start, last_print;
  int64_t total_steps, steps_per_epoch, epochs;
  int64_t log_every;
  int bar_open;
} ts__progress;

int ts__progress_open(ts__progress *p, const ts_config *cfg, int64_t total_steps,
                      int64_t steps_per_epoch, int resumed);
int ts__progress_step(ts__progress *p, const ts_step_info *s);
int ts__progress_eval(ts__progress *p, const ts_eval_info *e);
void ts__progress_message(ts__progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Writes one JSON line (a record such as {"type":"profile",...}) to the metrics file, if any. */
int ts__progress_record(ts__progress *p, const char *json);
/* extra: JSON fields for the end record, each followed by a comma ("" for none). Non-finite
 * numbers are written as null and named in the record's "nonfinite" list (JSON has no NaN).
 * ran: the steps this run trained (0: it resumed at its end: "nothing trained", no final loss);
 * applied: those not skipped for an overflow (0 of ran > 0: a warning in the end line). */
int ts__progress_end(ts__progress *p, int64_t steps, double final_loss, double test_acc,
                     int have_acc, const char *extra, int64_t ran, int64_t applied);
void ts__progress_close(ts__progress *p);
/* The run's name (the config file's name without folder and extension) and the title line of
 * its plot ("name (file): model on data, optimizer lr, batch, parallel mode[, amp]"). */
void ts__run_name(const ts_config *cfg, char *out, size_t cap);
void ts__run_title(const ts_config *cfg, char *out, size_t cap);
/* The terminal's width on fd (TIOCGWINSZ), else $COLUMNS, else 80. */
int ts__terminal_columns(int fd);
/* The progress bar's text for a terminal `columns` wide (at most columns - 1 characters): the
 * bar shrinks, then throughput, the bar, eta and loss are dropped, in that order, to fit. */
void ts__progress_bar_line(char *out, size_t cap, int columns, int64_t epoch, int64_t epochs, double frac,
                           int64_t in_ep, int64_t per_epoch, double loss, double samples_per_s, const char *eta);

/* The profiler's trainer side (train_prof.c): NULL when log.profile is off. */
typedef struct ts__tprof ts__tprof;
/* log.profile on: the profiler, the per-node table of the training graph, the peak, clocks
 * aligned over the ranks (a barrier: collective), the plan hook. t->prof stays NULL when off. */
int ts__tprof_create(ts_trainer *t);
void ts__tprof_free(ts__tprof *tp);
/* The hook alone on any training plan of graph g, recording into p (not owned; a benchmark's
 * way to measure exactly what the trainer installs). Steps from 1 are recorded at once. */
int ts__tprof_attach(ts_prof *p, ts_plan *plan, const ts_graph *g, int world_size, ts__tprof **out);
/* A trainer span (kind: ts_prof_kind) from t0 to t1; nothing when tp is NULL or not recording. */
void ts__tprof_span(ts__tprof *tp, const char *name, int kind, double t0, double t1);
/* Step `step` (1-based) starts at t (recording starts at log.profile_start). */
void ts__tprof_step_begin(ts__tprof *tp, int64_t step, double t);
/* The step ends at t: its breakdown goes into info (profiled = 1). */
void ts__tprof_step_end(ts__tprof *tp, double t, ts_step_info *info);
/* End of fit (collective): the report (rank 0 prints it and writes it to the metrics), the trace. */
int ts__tprof_finish(ts_trainer *t);
/* The machine's sgemm GFLOP/s (512^3 through the kernels), measured on the first call. */
double ts__train_peak_gflops(void);
/* parallel.mode auto_parallel (trainer_auto.c): the plan for N devices of parallel.cluster
 * (searched, or with parallel.auto_tp the degrees given and the operators searched) into *out
 * (its strategies owned: ts_autoplan_free), its scalars applied to c (ts_config_apply_autoplan:
 * layout, stages, micro-batches, optimizer shard, recompute; no strategy text), logged. model: the
 * network's builder (a callback building the whole network: C API, Python cells), NULL for c's
 * zoo model; every candidate is built through it as the run would build it. */
int ts__train_auto(ts_config *c, int N, ts_model_fn model, void *user, ts_autoplan *out);
/* What the search needs of c's job (the model's builder and sample, the distribution config of
 * c's keys, the batch, budget and GPT dimensions; the config's validation as its check): valid
 * while c (not copied) lives. Free with ts__train_auto_job_free (also after a failure). */
typedef struct {
  ts_autoparallel_job job;
  ts_gpt_config gpt;
  struct ts_trainer *t; /* scratch: the config view, the sample, data sets opened for it */
} ts__auto_job;
int ts__train_auto_job(const ts_config *c, ts_model_fn fn, void *user, ts__auto_job *a);
void ts__train_auto_job_free(ts__auto_job *a);

/* The trainer (trainer.c; `tessera plan` in trainer_plan.c). */
#define MAX_CB 16

struct ts_trainer {
  ts_config cfg;
  ts_source *train_src, *test_src;
  ts_transform tf_train[TS_CFG_MAX_TRANSFORMS], tf_test[TS_CFG_MAX_TRANSFORMS];
  int ntf_train, ntf_test;
  ts_pipeline *train_pipe;
  ts_dist_model model;         /* the builder and one transformed sample's shape and dtype */
  ts_dist *dist;               /* the parallel layout: this rank's graphs, store, plans, reductions */
  const ts_dist_run *run;      /* what it built (owned by dist) */
  int64_t eb, accum;           /* eval batch, micro-steps per step */
  float *acc;                  /* gradient accumulator (accum > 1) */
  size_t acc_numel;            /* its floats (0: none, or the dist accumulates its shard) */
  int job_metrics;             /* the job writes a metrics file (rank 0 does; the others take part
                                  in its end record's maximum over the ranks) */
  ts_optim *opt;
  ts_optim_segment *segs;
  int nseg;
  ts_lr_schedule sched;
  ts_loss_scaler scaler;       /* train.loss_scale: the scale the plans' loss seeds carry */
  int64_t step, epoch, batch, steps_per_epoch, total_steps;
  /* ts_trainer_grad_batch's gradients awaiting ts_trainer_apply_grads: the reduced gradient
   * buffer, the step's loss and its timings so far */
  int grads_pending;
  float *pending_g;
  ts_step_info pending_info;
  double pending_t0;
  int64_t max_steps, cap_steps0; /* TESSERA_MAX_STEPS (0: none); train.steps before the cap applied it */
  int eval_capped_said;           /* TESSERA_MAX_STEPS's cap of the evaluations logged */
  int stop;
  double last_loss;
  ts_eval_info last_eval;
  int have_eval;
  ts_callback cb[MAX_CB];
  int ncb;
  ts__progress prog;
  char *cfg_yaml;
  ts__tprof *prof; /* log.profile; NULL when off */
  struct ts__ckpt_async *async; /* checkpoint.async: the background writer (NULL until the first save) */
  ts_autoplan plan;            /* auto_parallel: the plan the run follows (has_plan); its strategies
                                  are what the distribution object was built with */
  int has_plan;
  int ckpt_writer;             /* this rank writes the trainer's whole checkpoints into its checkpoint.dir
                                  (rank 0, and a rank whose directory no lower rank has) */
  int ckpt_copies;             /* some rank other than 0 does (per-rank directories) */
  int whole_local;             /* this rank's store and optimizer are the whole model's
                                  (ts_trainer_whole_is_local; set once the optimizer exists) */
};

/* The layout for c's parallel.mode (the one place the mode is read), the distribution config
 * from c's keys and the model (fn NULL: c's zoo model). TS_EUNSUPPORTED for auto_parallel, which has
 * no layout of its own: ts__train_auto first replaces it by the searched plan's. */
/* device_target GPU: TS_ECONFIG naming the config and why there is no usable GPU (no driver, no
 * device, device_id out of range, compute capability too old); else TS_OK and *device_id the GPU
 * this process uses (-1 for the CPU). */
int ts__train_device_check(const ts_config *c, int *device_id);
/* A warning where mixed precision in bf16 runs on a CPU that computes no bf16 (oneDNN 2.6 without
 * AVX-512): there the 16-bit ops are f32 kernels with conversions around them, slower than O0. */
void ts__train_amp_note(const ts_config *c);
int ts__train_layout(const ts_config *c, ts_model_fn fn, void *user, const ts_dist_vt **vt, ts_dist_config *dc,
                     ts_dist_model *m);
/* The user's operator strategies (strategy_ckpt_load_file, then parallel.strategies) for
 * ndevices; *out NULL when the config gives none. */
int ts__train_strategies(const ts_config *c, int ndevices, ts_strategy_set **out);
/* Sources, transforms and the first training sample's shape into t->model (t->cfg set). */
/* The training sample's shape and dtype (t->model.sample, dtype, text) from the config alone
 * where it tells them (GPT: data.seq_len; MNIST / CIFAR images through the transforms): *done = 1;
 * else *done = 0 and the caller opens the data set (ts__train_prepare). */
int ts__train_dry_sample(ts_trainer *t, int *done);
int ts__train_prepare(ts_trainer *t);
/* The optimizer over every trainable entry of p (config's optimizer; no decay where flagged, the
 * parameter groups of optimizer.param_groups); *segs (malloc'ed, outlives *opt) gets the *nseg
 * segments. With d: the rank's part through the distribution object (ts_dist_optim_create), and
 * every no_decay_params / param_groups entry checked to match a parameter of some rank (collective);
 * NULL: over the whole of p (checkpoints). */
int ts__train_optim(const ts_config *cfg, ts_params *p, ts_dist *d, ts_optim **opt, ts_optim_segment **segs,
                    int *nseg);
void ts__trainer_ckpt_state(ts_trainer *t, ts_ckpt_state *st);
/* Sliced checkpoints (trainer_ckpt.c). The format checkpoint.format resolves to for this job
 * (TS_CFG_CKPT_WHOLE or TS_CFG_CKPT_SLICED). */
int ts__trainer_ckpt_format(const ts_trainer *t);
/* Loads sliced checkpoint dir into the rank's store and optimizer (collective: every rank fails
 * if one does); st holds the expectations (ts__trainer_ckpt_state) and gets the position. */
int ts__trainer_load_sliced(ts_trainer *t, const char *dir, int strict, int with_optimizer, ts_ckpt_state *st);
/* A sliced save cut in its phases (trainer_ckpt.c): begin is phase 1 (collective over the world,
 * main thread); finish runs phases 2 and 3 over w (the world or the async writer's duplicate).
 * snapshot copies the pieces' data into buf (job_bytes of it) so that training may go on. */
typedef struct {
  char final[2200], id[64], staging[4096];
  int rank, N;
  int64_t step, optim_step;
  ts_piece_list own;     /* the pieces this rank writes */
  int rc;                /* this rank could not list its pieces (msg says why) */
  char msg[1200];
  ts_ckpt_manifest *m;   /* rank 0: the manifest's skeleton */
  int mrc, strategy;     /* rank 0: the skeleton's failure (mmsg); a strategy file was written */
  char mmsg[1200];
} ts__sliced_job;
int ts__sliced_begin(ts_trainer *t, const char *final, ts__sliced_job *j);
size_t ts__sliced_job_bytes(const ts__sliced_job *j);
void ts__sliced_job_snapshot(ts__sliced_job *j, unsigned char *buf);
int ts__sliced_finish(ts__sliced_job *j, ts_comm *w);
void ts__sliced_job_free(ts__sliced_job *j);
/* checkpoint.dir on every rank (collective over the world; at creation): sets t->ckpt_writer and
 * t->ckpt_copies. TS_ECONFIG on every rank when the directories differ and the checkpoint is
 * sliced (one directory every rank writes into). */
int ts__ckpt_dirs(ts_trainer *t);
/* After rank 0 wrote path (its status rc0): collective over w (NULL or one rank: returns rc0).
 * The file is copied from rank 0 to every rank whose path (made absolute) differs from those of
 * the ranks before it, and written there atomically. Every rank returns the same status; a
 * failing rank's message names it and its path. */
int ts__ckpt_copy_out(ts_comm *w, const char *path, int rc0);
/* The whole checkpoint's state gathered (collective, as ts_trainer_save) and, on rank 0, copied
 * into *snap (reused). */
int ts__trainer_whole_snapshot(ts_trainer *t, ts_ckpt_snapshot **snap);
/* checkpoint.async (trainer_async.c). save: waits for the previous background save (its status
 * agreed over the world: collective), then takes this one's snapshot on the main thread and
 * starts its writer. wait: joins the writer; agree = 1 (collective, every rank at the same
 * point): every rank returns the failure of any (the failing rank's message names the file);
 * agree = 0 (an error path): the writer's failure is logged, returned only locally. free: joins
 * and frees. rotate: rank 0's writer applies checkpoint.keep_max after the commit. */
int ts__ckpt_async_save(ts_trainer *t, const char *path, int sliced, int rotate);
int ts__ckpt_async_wait(ts_trainer *t, int agree);
void ts__ckpt_async_free(ts_trainer *t);

/* Rank `rank` of a job of ndevices under cfg built dry (sized, nothing allocated; trainer_plan.c):
 * the pieces it would hold with nslots optimizer slots (ts_dist_pieces) into *pieces and, when
 * tensors is not NULL, the whole model's tensors (ts_dist_tensors, with the optimizer). */
int ts__train_dry_pieces(const ts_config *cfg, int ndevices, int rank, int nslots, const char *const *slot_names,
                         ts_piece_list *pieces, ts_piece_list *tensors);

/* ts_trainer_plan_memory for a zoo model with the store and arenas sized only (allocate = 0, as
 * `tessera plan` builds) or allocated as the job would (1); *sized (may be NULL): the build
 * allocated nothing (a dry store and dry plans). For tests comparing the two. */
int ts__trainer_plan_memory(const ts_config *cfg, int ndevices, int rank, int allocate, ts_dist_memory_info *out,
                            int *sized);

/* Memory (train_memory.c). TS_ECONFIG naming train.max_memory_mb, the need, the budget, the
 * breakdown and the settings that would cut it when m's total exceeds c's budget (ranks: the
 * job's; max_over_ranks: m is the maximum over them). */
int ts__train_memory_budget(const ts_config *c, const ts_dist_memory_info *m, int ranks, int max_over_ranks);
/* After ts_dist_build, before the optimizer and the arenas exist: the budget against the largest
 * rank's planned figures (collective under MPI; nothing without a budget). */
int ts__train_memory_check(ts_trainer *t);
/* train.max_memory_mb against the figures predicted by a sized dry build of the rank (the largest
 * rank's), before the real build allocates the parameters: a 1 TB model is refused naming the budget. */
int ts__train_memory_precheck(ts_trainer *t, ts_model_fn fn, void *user);
/* The end record's memory fields into buf (see ts__progress_end), this rank's and, on several
 * ranks of a job writing metrics, each one's maximum over them (then collective). */
int ts__train_memory_record(ts_trainer *t, char *buf, size_t cap);

#endif
