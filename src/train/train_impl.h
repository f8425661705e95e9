/* Internal pieces of the trainer shared by its files. */
#ifndef TS_TRAIN_IMPL_H
#define TS_TRAIN_IMPL_H

#include <stdio.h>

#include "tessera/checkpoint.h"
#include "tessera/data.h"
#include "tessera/optim.h"
#include "tessera/dist.h"
#include "tessera/train.h"

struct ts__dp;

/* Train and test sources for a config (test may come back NULL: no test data). */
int ts__train_sources(const ts_config *cfg, ts_source **train, ts_source **test);
/* A view of samples [off, off+n) of base (which it then owns). */
int ts__source_subset(ts_source *base, int64_t off, int64_t n, ts_source **out);
/* The same without ownership: base must outlive the view. */
int ts__source_view(ts_source *base, int64_t off, int64_t n, ts_source **out);

/* Progress display and metrics file. */
typedef struct {
  ts_progress_mode mode;
  int tty;
  FILE *metrics;
  char metrics_path[1024];
  double t_start, last_print;
  int64_t total_steps, steps_per_epoch, epochs;
  int64_t log_every;
  int bar_open;
} ts__progress;

int ts__progress_open(ts__progress *p, const ts_config *cfg, int64_t total_steps,
                      int64_t steps_per_epoch, int resumed);
void ts__progress_step(ts__progress *p, const ts_step_info *s);
void ts__progress_eval(ts__progress *p, const ts_eval_info *e);
void ts__progress_message(ts__progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ts__progress_end(ts__progress *p, int64_t steps, double final_loss, double test_acc,
                      int have_acc);
void ts__progress_close(ts__progress *p);

/* The trainer (trainer.c; semi_auto_parallel in trainer_semi.c). */
#define MAX_CB 16

struct ts_trainer {
  ts_config cfg;
  ts_source *train_src, *test_src;
  ts_transform tf_train[TS_CFG_MAX_TRANSFORMS], tf_test[TS_CFG_MAX_TRANSFORMS];
  int ntf_train, ntf_test;
  ts_pipeline *train_pipe;
  ts_params *params;
  /* training graph (micro-batch) and evaluation graph (eval batch) */
  ts_graph *g, *ge;
  ts_plan *plan, *plan_e;
  ts_val x, y, loss, xe, logits_e;
  int64_t mb, eb, accum;       /* micro-batch, eval batch, micro-steps per step */
  ts_shape sample_shape;       /* of one transformed sample */
  ts_dtype sample_dtype;
  int text;                    /* samples carry targets (language model) */
  float *acc;                  /* gradient accumulator (accum > 1) */
  ts_optim *opt;
  ts_optim_segment *segs;
  int nseg;
  ts_lr_schedule sched;
  int64_t step, epoch, batch, steps_per_epoch, total_steps;
  int stop;
  double last_loss;
  ts_eval_info last_eval;
  int have_eval;
  ts_callback cb[MAX_CB];
  int ncb;
  ts__progress prog;
  char *cfg_yaml;
  /* data parallel */
  ts_comm *comm; /* NULL in stand-alone mode */
  int rank, size;
  struct ts__dp *dp;
  int overlap;
  int dshards, dshard; /* the batch is cut in dshards pieces; this rank reads piece dshard */
  /* custom models (ts_trainer_create_custom) */
  ts_model_fn model_fn;
  void *model_user;
  /* semi_auto_parallel (trainer_semi.c) and hybrid_parallel */
  ts_parallel *pp, *pe;       /* the pass over the training / evaluation graph */
  ts_graph *gg, *gge;         /* the global graphs the pass read */
  ts_params *gp;              /* their parameters (registry: not allocated) */
  ts_comm *slots[TS_PLAN_MAX_COMMS], *eslots[TS_PLAN_MAX_COMMS];
  int nslots, neslots;
  ts_grad_reducer *red;
  int sliced;                 /* some parameter is held as slices: checkpoints gather/re-cut them,
                                 clipping sums the slices' norms */
  float seed;                 /* loss seed (1 / replicas of the loss) */
  int eparts, eindex;         /* evaluation batch pieces */
  ts_comm *hybrid_slots[TS_PLAN_MAX_COMMS]; /* groups a custom model asked for */
  int nhybrid;
  struct { int ndev, dev[TS_LAYOUT_MAX_AXES], axis; } hybrid_req[TS_PLAN_MAX_COMMS];
};


/* trainer_semi.c */
int ts__semi_build(ts_trainer *t); /* also sets t->logits_e */
int ts__semi_setup_reduction(ts_trainer *t);
/* Global gradient norm of the rank's flat gradient buffer (each slice counted once) and the
 * clipping of it to max_norm (0: no clipping), collective. */
int ts__semi_clip(ts_trainer *t, float *grads, float max_norm, float *norm);
/* Checkpoints of the whole model from the ranks' slices (collective; rank 0 writes). */
int ts__semi_save(ts_trainer *t, const char *path, int write);
int ts__semi_load(ts_trainer *t, const char *path, int strict, int with_optimizer);
void ts__semi_free(ts_trainer *t);
/* Strategy and layout refusals (TS_EINVAL, TS_ESHAPE, TS_EUNSUPPORTED) are configuration errors
 * of the job: returns TS_ECONFIG with the same message for those, rc otherwise. */
int ts__semi_config_error(int rc);
/* The strategy set of the config (strategy_ckpt_load_file, then parallel.strategies). */
int ts__semi_strategies(const ts_config *c, int ndevices, ts_strategy_set **out);
/* trainer.c pieces trainer_semi.c uses */
/* Allocates t->params, attaches the gradients of t->g and plans t->g (keeping t->loss) and t->ge
 * (keeping t->logits_e), both bound to the store. */
int ts__train_plans(ts_trainer *t);
/* The optimizer over every trainable entry of p (config's optimizer; no decay where flagged);
 * *segs (malloc'ed, outlives *opt) gets the *nseg segments. */
int ts__train_optim(const ts_config *cfg, ts_params *p, ts_optim **opt, ts_optim_segment **segs, int *nseg);
int ts__train_build_model(ts_trainer *t, ts_nn *nn, ts_val x, ts_val y, ts_val *logits, ts_val *loss);
ts_shape ts__batch_shape(int64_t b, const ts_shape *s);
/* Reads the first training sample: sample shape, dtype, text or not (t->train_src, t->tf_test). */
int ts__train_probe(ts_trainer *t);
int ts__graph_fail_msg(ts_graph *g, const char *what);
void ts__trainer_ckpt_state(ts_trainer *t, ts_ckpt_state *st);

#endif
