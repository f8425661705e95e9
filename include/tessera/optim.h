/* Tessera optimizers, learning-rate schedules and gradient clipping.
 *
 * Optimizers work on FLAT f32 buffers: all parameters in one array, all gradients in another
 * with the same offsets (the layout of ts_params, see nn.h), described by a segment table (one
 * segment per parameter tensor). State (momentum buffers, Adam moments) lives in flat buffers
 * with the same offsets, so sharding the optimizer is a matter of passing the segments (or
 * parts of segments) a rank owns, with offsets relative to its shard.
 *
 * Usage (compiled by tests/tools/header_examples_test.sh):
 *   ts_optim_segment segs[] = {{"fc.weight", 0, 784 * 10, 0}, {"fc.bias", 7840, 10, TS_SEG_NO_DECAY}};
 *   ts_optim_config cfg = ts_optim_config_default(TS_OPTIM_ADAMW);
 *   ts_optim *opt;
 *   ts_optim_create(&opt, &cfg, segs, 2);
 *   ts_lr_schedule sched = {.kind = TS_LR_COSINE, .base_lr = 1e-3, .warmup_steps = 100, .total_steps = 1000};
 *   for (step = 0; step < 1000; step++) {
 *     // run forward and backward into grads (runtime.h)
 *     ts_clip_grad_norm(grads, n, 1.0f, NULL);
 *     ts_optim_step(opt, params, grads, ts_lr_at(&sched, step));
 *   }
 *
 * Update rules are those of PyTorch 1.13 (torch.optim, foreach=False), in f32, with scalar
 * coefficients (bias corrections, step sizes) computed in double as PyTorch does in Python:
 *   SGD       p -= lr * (g + wd p)
 *   MOMENTUM  d = g + wd p; b = d on the first step, else b = mu b + (1 - dampening) d;
 *             p -= lr * (nesterov ? d + mu b : b)
 *   ADAM      d = g + wd p (L2); m = b1 m + (1-b1) d; v = b2 v + (1-b2) d^2;
 *             p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
 *   ADAMW     p *= 1 - lr wd; then ADAM with wd = 0 (decoupled decay)
 *   LAMB      (apex FusedLAMB, adam_w_mode, grad averaging, bias correction)
 *             m, v as ADAM with d = g; u = (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps) + wd p;
 *             r = ||p|| / ||u|| per segment (1 if either norm is 0); p -= lr r u.
 *             As in apex (and timm), a segment whose weight decay is 0 (TS_SEG_NO_DECAY, or
 *             cfg.weight_decay == 0) is not layer-adapted (r = 1) unless cfg.lamb_always_adapt
 *             is set (apex's use_nvlamb). apex's built-in global-norm clipping is NOT part of
 *             the step: call ts_clip_grad_norm first if wanted.
 * Weight decay is skipped for segments flagged TS_SEG_NO_DECAY; TS_SEG_FROZEN segments are not
 * touched at all (parameters nor state). A segment flagged TS_SEG_GROUP(k) is in parameter group
 * k (PyTorch's param_groups, MindSpore's group_params): its learning rate is the step's lr times
 * cfg.groups[k - 1].lr_scale (the product in double, rounded to f32) and its weight decay that
 * group's weight_decay instead of cfg.weight_decay (NO_DECAY still wins); in every formula above
 * lr and wd are the segment's.
 *
 * Reductions (LAMB norms, clipping) sum fixed-size blocks in double and add the block sums in
 * order, so results are bitwise identical for any number of threads. */
#ifndef TESSERA_OPTIM_H
#define TESSERA_OPTIM_H

#include "tessera/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  TS_OPTIM_SGD = 0,
  TS_OPTIM_MOMENTUM = 1,
  TS_OPTIM_ADAM = 2,
  TS_OPTIM_ADAMW = 3,
  TS_OPTIM_LAMB = 4,
  TS_OPTIM_COUNT
} ts_optim_kind;

/* "sgd", "momentum", "adam", "adamw", "lamb" (parse is case-insensitive; TS_ENOTFOUND if unknown). */
const char *ts_optim_kind_name(ts_optim_kind k);
int ts_optim_kind_parse(const char *name, ts_optim_kind *out);

typedef struct {
  ts_optim_kind kind;
  /* Hyper-parameters are doubles, like PyTorch's Python floats; the kernels round the derived
   * coefficients to f32 where PyTorch does. */
  double weight_decay; /* L2 (SGD, MOMENTUM, ADAM) or decoupled (ADAMW, LAMB) */
  double momentum;     /* MOMENTUM: mu */
  double dampening;    /* MOMENTUM: PyTorch's dampening (0 by default; must be 0 with nesterov) */
  int nesterov;        /* MOMENTUM */
  double beta1, beta2, eps; /* ADAM, ADAMW, LAMB */
  int lamb_always_adapt;   /* LAMB: trust ratio also for segments without weight decay */
  int ngroups;             /* parameter groups other than the default one (0..TS_OPTIM_MAX_GROUPS) */
  const struct ts_optim_group *groups; /* [ngroups]; ts_optim_create copies them */
} ts_optim_config;

/* A parameter group's own learning-rate factor and weight decay (both finite, >= 0). */
typedef struct ts_optim_group {
  double lr_scale;
  double weight_decay;
} ts_optim_group;

/* PyTorch's defaults (apex's for LAMB): SGD wd 0; MOMENTUM mu 0.9; ADAM betas (0.9, 0.999),
 * eps 1e-8, wd 0; ADAMW same with wd 1e-2; LAMB betas (0.9, 0.999), eps 1e-6, wd 1e-2. */
ts_optim_config ts_optim_config_default(ts_optim_kind kind);

/* Segment flags. */
#define TS_SEG_NO_DECAY 1u /* no weight decay (biases, norm parameters) */
#define TS_SEG_FROZEN 2u   /* not updated */
/* In parameter group k >= 1 (cfg.groups[k - 1]); 0 (no bits): the config's lr and weight decay */
#define TS_SEG_GROUP(k) ((uint32_t)(k) << 8)
#define TS_SEG_GROUP_OF(flags) ((int)((flags) >> 8))
#define TS_OPTIM_MAX_GROUPS 65535

typedef struct {
  const char *name; /* unique; copied; names the state views ("exp_avg.<name>") */
  size_t offset;    /* into the flat params / grads / state buffers, in elements */
  size_t numel;
  uint32_t flags;
} ts_optim_segment;

/* The learning rate and weight decay segment sg is updated with under cfg at step learning rate
 * lr (see TS_SEG_GROUP; the GPU update and the sharded optimizers use the same two). */
float ts_optim_segment_lr(const ts_optim_config *cfg, const ts_optim_segment *sg, float lr);
double ts_optim_segment_wd(const ts_optim_config *cfg, const ts_optim_segment *sg);

typedef struct ts_optim ts_optim;

/* Validates the config (TS_EINVAL naming the field) and the segments (unique non-empty names,
 * no overlaps) and allocates zeroed state covering [0, max(offset + numel)). */
int ts_optim_create(ts_optim **out, const ts_optim_config *cfg, const ts_optim_segment *segs,
                    int nseg);
void ts_optim_free(ts_optim *opt);
const ts_optim_config *ts_optim_get_config(const ts_optim *opt);
/* Extent of the flat buffers (elements) the optimizer reads and writes. */
size_t ts_optim_extent(const ts_optim *opt);

/* One update of every segment with learning rate lr. Increments the step count first. */
int ts_optim_step(ts_optim *opt, float *params, const float *grads, float lr);
/* The same update where segment s's parameters and gradients are params[s] and grads[s] (numel
 * floats each) instead of the flat buffers at its offset; the state stays at the offsets. For an
 * optimizer over a shard whose parameters live apart (ZeRO: the rank's parts of a whole store). */
int ts_optim_step_segments(ts_optim *opt, float *const *params, const float *const *grads, float lr);
/* The segments, in the order given to ts_optim_create (names owned by the optimizer). */
int ts_optim_num_segments(const ts_optim *opt);
const ts_optim_segment *ts_optim_segment_at(const ts_optim *opt, int s);
/* Number of steps taken (PyTorch's state["step"]); settable when resuming. */
int64_t ts_optim_get_step(const ts_optim *opt);
void ts_optim_set_step(ts_optim *opt, int64_t step);
/* Zeroes all state and the step count. */
void ts_optim_reset(ts_optim *opt);

/* ---- state, for checkpoints ----
 * Slots are the flat state buffers: none (SGD), "momentum_buffer" (MOMENTUM), "exp_avg" and
 * "exp_avg_sq" (ADAM, ADAMW, LAMB); each has ts_optim_extent() floats at the params' offsets.
 * Named views: view 0 is "step" (I64, shape ()), then for each slot and each segment
 * "<slot>.<segment name>" (F32, shape (numel)). Loading a checkpoint = copying every view's
 * data back (views are writable). */
int ts_optim_num_slots(const ts_optim *opt);
/* The slots an optimizer of kind k has (0 SGD, 1 MOMENTUM, 2 ADAM/ADAMW/LAMB), before it exists. */
int ts_optim_kind_num_slots(ts_optim_kind k);
const char *ts_optim_slot_name(const ts_optim *opt, int k);
/* The name of slot `slot` of an optimizer of kind k, before it exists (NULL past its slots). */
const char *ts_optim_kind_slot_name(ts_optim_kind k, int slot);
float *ts_optim_slot_data(ts_optim *opt, int k);
int ts_optim_state_count(const ts_optim *opt);
const char *ts_optim_state_name(const ts_optim *opt, int i);
int ts_optim_state_view(ts_optim *opt, int i, ts_tensor *view);
/* TS_ENOTFOUND if no view has that name. */
int ts_optim_state_find(ts_optim *opt, const char *name, ts_tensor *view);

/* LAMB under optimizer sharding: called once per step with 2*nseg partial sums of squares
 * (sums[2s] = ||p_s||^2, sums[2s+1] = ||u_s||^2 over this rank's part of segment s), to be
 * summed in place across the ranks sharing the segments (e.g. MPI_Allreduce). A non-zero return
 * aborts the step before any parameter changes (state has been updated). */
typedef int (*ts_optim_reduce_fn)(double *sums, int n, void *user);
void ts_optim_set_norm_reduce(ts_optim *opt, ts_optim_reduce_fn fn, void *user);

/* ---- learning-rate schedules ----
 * ts_lr_at(s, step) is the rate for optimizer step `step` (0-based: the first step is 0).
 *   CONSTANT   base_lr
 *   STEP       base_lr * gamma^floor(step / step_size)                    (torch StepLR)
 *   MULTISTEP  base_lr * gamma^(number of milestones <= step)             (torch MultiStepLR)
 *   COSINE     min_lr + (base_lr - min_lr) * (1 + cos(pi * min(1, (step - warmup) /
 *              max(1, total_steps - warmup)))) / 2
 *   TABLE      table[step]: one rate per step (MindSpore's list / 1-D Tensor learning rates,
 *              nn.dynamic_lr); steps past the table keep its last rate (a trainer refuses a table
 *              shorter than its run); base_lr is not used and warmup_steps must be 0
 * For every kind, steps before warmup_steps use base_lr * step / warmup_steps (linear warm-up
 * from 0, as transformers' get_cosine_schedule_with_warmup); STEP and MULTISTEP count steps
 * from 0 regardless of warm-up. */
typedef enum { TS_LR_CONSTANT = 0, TS_LR_STEP, TS_LR_MULTISTEP, TS_LR_COSINE, TS_LR_TABLE, TS_LR_COUNT } ts_lr_kind;
#define TS_LR_MAX_MILESTONES 16

typedef struct {
  ts_lr_kind kind;
  double base_lr;
  int64_t warmup_steps;
  int64_t step_size; /* STEP */
  double gamma;      /* STEP, MULTISTEP */
  int nmilestones;   /* MULTISTEP: increasing steps */
  int64_t milestones[TS_LR_MAX_MILESTONES];
  int64_t total_steps; /* COSINE */
  double min_lr;       /* COSINE */
  const float *table;  /* TABLE: ntable rates, borrowed (the caller keeps them alive) */
  int64_t ntable;
} ts_lr_schedule;

/* "constant", "step", "multistep", "cosine", "table". */
const char *ts_lr_kind_name(ts_lr_kind k);
int ts_lr_kind_parse(const char *name, ts_lr_kind *out);
/* TS_EINVAL naming the field if the schedule is inconsistent. */
int ts_lr_check(const ts_lr_schedule *s);
float ts_lr_at(const ts_lr_schedule *s, int64_t step);

/* ---- gradient clipping (torch.nn.utils.clip_grad_norm_, L2) ----
 * total = ||grads||_2; if max_norm / (total + 1e-6) < 1, grads are scaled by it. The total
 * (before clipping) goes to *total_norm_out if not NULL; a non-finite total propagates into the
 * gradients as in PyTorch (check it to skip the step). TS_EINVAL if max_norm <= 0. */
int ts_clip_grad_norm(float *grads, size_t n, float max_norm, float *total_norm_out);
/* Building blocks for sharded clipping: deterministic sum of squares (double) and scaling. */
double ts_sum_squares(const float *x, size_t n);
void ts_scale_f32(float *x, size_t n, float s);
/* The factor clip_grad_norm_ applies for a total norm: min(1, max_norm / (total + 1e-6)). */
float ts_clip_coef(float total_norm, float max_norm);

/* ---- loss scaling (mixed precision) ----
 * The loss gradient is seeded with `scale` instead of 1, so the gradients come out multiplied by
 * it (small f16 gradients no longer underflow); they are divided by it before the update, and a
 * step whose gradients are not finite (overflow) is skipped. This is the pure state machine
 * deciding the scale, with the semantics of PyTorch's GradScaler and MindSpore's
 * DynamicLossScaleManager / FixedLossScaleManager(drop_overflow_update=True):
 *   NONE     scale 1; nothing is ever skipped.
 *   FIXED    scale = init_scale for ever; a step that overflows is skipped.
 *   DYNAMIC  starts at init_scale; a step that overflows is skipped and the scale becomes
 *            max(scale / factor, min_scale), the growth tracker 0; a step that does not
 *            increments the tracker, and when it reaches `window` the scale becomes
 *            scale * factor (only when that is finite as an f32) and the tracker 0.
 *
 *   ts_loss_scaler s;  ts_loss_scaler_init(&s, &cfg);
 *   per step: seed the loss gradient with s.scale; norm = ||grads|| / s.scale;
 *             int skip = ts_loss_scaler_update(&s, !isfinite(norm));
 *             if (!skip) unscale and step the optimizer. */
typedef enum { TS_LOSS_SCALE_NONE = 0, TS_LOSS_SCALE_FIXED, TS_LOSS_SCALE_DYNAMIC, TS_LOSS_SCALE_COUNT } ts_loss_scale_kind;

typedef struct {
  ts_loss_scale_kind kind;
  double init_scale; /* FIXED: the scale; DYNAMIC: the first scale (> 0, finite) */
  double factor;     /* DYNAMIC: growth and back-off factor (> 1) */
  int64_t window;    /* DYNAMIC: overflow-free steps before the scale grows (>= 1) */
  double min_scale;  /* DYNAMIC: the scale never drops below it (> 0, may be < 1; <= init_scale) */
  int keep_overflow; /* FIXED: 1 = a step whose gradients overflowed is applied anyway (MindSpore's
                        FixedLossScaleManager(drop_overflow_update=False)); 0 = skipped */
} ts_loss_scale_config;

typedef struct {
  ts_loss_scale_config cfg;
  double scale;    /* the scale of the next step's loss gradient */
  int64_t growth;  /* DYNAMIC: overflow-free steps since the scale last changed (the growth tracker) */
} ts_loss_scaler;

/* "none", "fixed", "dynamic" (parse is case-insensitive; TS_ENOTFOUND if unknown). */
const char *ts_loss_scale_kind_name(ts_loss_scale_kind k);
int ts_loss_scale_kind_parse(const char *name, ts_loss_scale_kind *out);
/* Validates cfg (TS_EINVAL naming the field: a bad kind, init_scale <= 0, factor <= 1,
 * window < 1, min_scale <= 0 or above init_scale under DYNAMIC) and starts s at its first
 * scale (1 under NONE) with the tracker at 0. */
int ts_loss_scaler_init(ts_loss_scaler *s, const ts_loss_scale_config *cfg);
/* After a step whose gradients were (overflow = 1) or were not (0) non-finite: returns 1 when
 * the step's update must be skipped (an overflow under DYNAMIC, or FIXED without keep_overflow), else 0, and advances
 * the scale and the tracker as above. */
int ts_loss_scaler_update(ts_loss_scaler *s, int overflow);
/* Resuming: puts the scale and tracker a checkpoint recorded back (DYNAMIC only: FIXED keeps its
 * configured scale, NONE 1; the scale is raised to min_scale if below it, the tracker clamped into
 * [0, window)). TS_EINVAL for a scale that is not a finite positive f32. */
int ts_loss_scaler_restore(ts_loss_scaler *s, double scale, int64_t growth);

#ifdef __cplusplus
}
#endif
#endif
