/* Tessera configuration: a typed C struct loaded from YAML (libyaml), with defaults for every
 * key, command-line overrides and validation. Every key is documented in docs/config.md.
 *
 * Usage (compiled by tests/tools/header_examples_test.sh):
 *   ts_config cfg;
 *   const char *sets[] = {"optimizer.lr=0.1", "optimizer.schedule.milestones=[10,20]"};
 *   if (ts_config_load("examples/mlp_fashion.yaml", sets, 2, &cfg))
 *     fprintf(stderr, "%s\n", ts_last_error());   // one line naming file, key and reason
 *   ts_config_dump_yaml(&cfg, stdout);            // the effective config
 *   ts_config_free(&cfg);                         // its lists (parallel.strategies, ...)
 *
 * Loading = defaults, then the file, then each override in order, then ts_config_validate.
 * Overrides are "key.path=value" strings (tessera train --set); the value is parsed as YAML, so
 * lists are flow sequences ("optimizer.betas=[0.9,0.95]") and a whole section can be given as a
 * flow mapping ("optimizer.schedule={name: cosine, warmup_steps: 100}").
 *
 * Every error is TS_ECONFIG (TS_ENOMEM aside) with a message of the form
 *   "cfg.yaml:12:5: train.epochs: expected an integer, got 'ten'"
 *   "cfg.yaml:7:3: unknown key 'optimizer.lrr' (did you mean 'optimizer.lr'?)"
 *   "cfg.yaml:2:7: model.name: unknown value 'resnt' (did you mean 'resnet'?; expected one of:
 *    mlp, lenet5, convnet, resnet, gpt)"
 *   "cfg.yaml:4:1: malformed YAML: could not find expected ':' (while scanning a simple key)"
 *   "--set train.epochs=ten: train.epochs: expected an integer, got 'ten'"
 *   "cfg.yaml: train.batch_size (100) must be divisible by train.micro_batch_size (32)"
 * (line:column are 1-based). Library code never prints. */
#ifndef TESSERA_CONFIG_H
#define TESSERA_CONFIG_H

#include <stdio.h>

#include "tessera/data.h"
#include "tessera/optim.h"
#include "tessera/strategy.h"
#include "tessera/zoo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Elements of a fixed list-valued key (model.hidden, model.channels, optimizer.betas,
 * optimizer.schedule.milestones up to TS_LR_MAX_MILESTONES): an MLP of up to 1024 hidden layers;
 * more is refused naming the key ("at most 1024 values allowed"). Lists sized by the model or the
 * job (parallel.strategies, parallel.stages, parallel.all_reduce_fusion_config) have no limit. */
#define TS_CFG_MAX_LIST 1024
#define TS_CFG_MAX_TRANSFORMS 16 /* transforms per list */
#define TS_CFG_PATH_MAX 1024     /* bytes of a path-valued key, NUL included */
#define TS_CFG_NAME_MAX 64       /* bytes of a short string key, NUL included */
#define TS_CFG_MAX_KEYS 256      /* keys the table may have (ts_config.given) */

typedef enum {
  TS_MODEL_MLP = 0,
  TS_MODEL_LENET5,
  TS_MODEL_CONVNET,
  TS_MODEL_RESNET,
  TS_MODEL_GPT,
  TS_MODEL_COUNT
} ts_model_kind;

typedef enum {
  TS_DATA_FASHION_MNIST = 0,
  TS_DATA_MNIST,
  TS_DATA_CIFAR10,
  TS_DATA_CIFAR100,
  TS_DATA_IMAGE_FOLDER,
  TS_DATA_RECORDS,
  TS_DATA_TEXT,
  TS_DATA_COUNT
} ts_data_kind;

/* MindSpore's parallel modes; the trainer runs all five: each is a distribution layout
 * (include/tessera/dist.h), and auto_parallel is the layout of the plan the search
 * (src/autoparallel/, include/tessera/autoparallel.h) returns for the job's devices. */
typedef enum {
  TS_PARALLEL_STAND_ALONE = 0,
  TS_PARALLEL_DATA,      /* data_parallel */
  TS_PARALLEL_SEMI_AUTO, /* semi_auto_parallel */
  TS_PARALLEL_AUTO,      /* auto_parallel */
  TS_PARALLEL_HYBRID,    /* hybrid_parallel */
  TS_PARALLEL_COUNT
} ts_parallel_mode;

typedef enum {
  TS_PROGRESS_AUTO = 0, /* a bar on a terminal, periodic lines otherwise */
  TS_PROGRESS_BAR,
  TS_PROGRESS_LINES,
  TS_PROGRESS_OFF,
  TS_PROGRESS_COUNT
} ts_progress_mode;

/* Unit of optimizer.schedule.step_size and .milestones. */
typedef enum { TS_SCHED_UNIT_STEPS = 0, TS_SCHED_UNIT_EPOCHS, TS_SCHED_UNIT_COUNT } ts_sched_unit;

/* Names as written in YAML ("fashion_mnist", "semi_auto_parallel", ...); "?" if out of range. */
const char *ts_model_kind_name(ts_model_kind k);
const char *ts_data_kind_name(ts_data_kind k);
const char *ts_parallel_mode_name(ts_parallel_mode m);
const char *ts_progress_mode_name(ts_progress_mode m);
const char *ts_sched_unit_name(ts_sched_unit u);

typedef struct {
  int n;
  int v[TS_CFG_MAX_LIST];
} ts_cfg_ints;

typedef struct {
  int n;
  double v[TS_CFG_MAX_LIST];
} ts_cfg_floats;

/* A transform list. Elements are made by the ts_tf_* constructors of data.h, with `chw` = 1
 * exactly when an hwc_to_chw precedes them in the list. n == -1 (test_transforms
 * only) means "auto": the training list without its random transforms (random_crop, hflip,
 * vflip, random_erasing); see ts_config_transforms. */
typedef struct {
  int n;
  ts_transform v[TS_CFG_MAX_TRANSFORMS];
} ts_cfg_transforms;

/* parallel.strategies: operator name (or '*' rule) -> MindSpore shard tuple text; parallel.stages:
 * name pattern -> stage number (text). Any number of entries: v is malloc'd and owned by the
 * ts_config holding it (ts_config_free releases it, ts_config_copy duplicates it); n entries,
 * room for cap. */
typedef ts_op_text ts_cfg_strategy; /* strategy.h: op[160], text[96] */
typedef struct {
  int n, cap;
  ts_cfg_strategy *v;
} ts_cfg_strategies;

/* A list of integers of any length (parallel.all_reduce_fusion_config: split points into the
 * gradient list, which grows with the model). v is malloc'd and owned like ts_cfg_strategies. */
typedef struct {
  int n;
  int *v;
} ts_cfg_ilist;

/* A list of strings of any length (optimizer.no_decay_params: parameter names). v and each string
 * are malloc'd and owned like ts_cfg_ilist. */
typedef struct {
  int n;
  char **v;
} ts_cfg_slist;

/* optimizer.param_groups: the parameters matching `pattern` (a name, or a '*' pattern) form a
 * parameter group with its own learning-rate factor (the schedule's rate times lr_scale) and weight
 * decay (< 0: the optimizer's). v and each pattern are malloc'd and owned like ts_cfg_ilist. */
typedef struct {
  char *pattern;
  double lr_scale;
  double weight_decay;
} ts_cfg_pgroup;
typedef struct {
  int n;
  ts_cfg_pgroup *v;
} ts_cfg_pgroups;

/* A list of f32 numbers of any length (optimizer.schedule.values: one learning rate per step).
 * v is malloc'd and owned like ts_cfg_ilist. */
typedef struct {
  int n;
  float *v;
} ts_cfg_flist;

/* A list of strings (model.recompute_layers). */
#define TS_CFG_MAX_STRS 16
typedef struct {
  int n;
  char v[TS_CFG_MAX_STRS][160];
} ts_cfg_strs;

/* model.recompute */
typedef enum { TS_CFG_RECOMPUTE_NONE = 0, TS_CFG_RECOMPUTE_FULL = 1, TS_CFG_RECOMPUTE_SELECTIVE = 2 } ts_cfg_recompute;
/* train.loss_scale (auto: dynamic with train.amp_level O1-O3 and amp_dtype f16, else none) */
typedef enum {
  TS_CFG_LOSS_SCALE_AUTO = 0,
  TS_CFG_LOSS_SCALE_NONE = 1,
  TS_CFG_LOSS_SCALE_FIXED = 2,
  TS_CFG_LOSS_SCALE_DYNAMIC = 3
} ts_cfg_loss_scale;
/* checkpoint.format (auto: sliced when the layout holds some parameter as slices, shards the
 * optimizer state or cuts the model into pipeline stages; whole otherwise; docs/checkpoints.md) */
typedef enum { TS_CFG_CKPT_AUTO = 0, TS_CFG_CKPT_WHOLE = 1, TS_CFG_CKPT_SLICED = 2 } ts_cfg_ckpt_format;

/* device_target (MindSpore's context key): where the job's graphs run. */
typedef enum { TS_CFG_DEVICE_CPU = 0, TS_CFG_DEVICE_GPU = 1 } ts_cfg_device;
/* float32_matmul_precision (PyTorch's torch.set_float32_matmul_precision): f32 GEMMs and
 * convolutions on a GPU in real f32 (highest) or on TF32 tensor cores (high) */
typedef enum { TS_CFG_F32_HIGHEST = 0, TS_CFG_F32_HIGH = 1 } ts_cfg_f32_precision;

typedef struct {
  ts_cfg_device device_target; /* CPU (the default and the reference) or GPU (NVIDIA, CUDA) */
  int device_id;               /* the GPU of this process (0-based; under mpirun, rank % GPUs when -1) */
  ts_cfg_f32_precision float32_matmul_precision; /* GPU: real f32 (highest) or TF32 (high) */
  struct {
    ts_model_kind name;
    int num_classes;        /* 0 = from the data set (resolved by validation where known) */
    ts_cfg_ints hidden;     /* mlp: hidden layer sizes */
    int depth;              /* resnet */
    int cifar_stem;         /* resnet 18..152: 3x3 stem without max-pool */
    int zero_init_residual; /* resnet */
    ts_cfg_ints channels;   /* convnet: c1, c2 */
    double bn_momentum, bn_eps;
    double label_smoothing;
    int n_layer, n_head, n_embd; /* gpt */
    int block_size;         /* gpt: position table rows; 0 = data.seq_len (resolved) */
    int vocab_size;         /* gpt */
    int mlp_ratio;          /* gpt */
    int bias;               /* gpt: Linear/LayerNorm biases */
    int tie_weights;        /* gpt */
    double dropout;         /* gpt */
    ts_cfg_recompute recompute;   /* activation recomputation (docs/memory.md) */
    ts_cfg_strs recompute_layers; /* name patterns of the recomputed segments ([] = default) */
  } model;
  struct {
    ts_data_kind name;
    char path[TS_CFG_PATH_MAX]; /* resolved to TS_FASHION_MNIST_DIR for fashion_mnist if empty */
    char train_split[TS_CFG_NAME_MAX], test_split[TS_CFG_NAME_MAX]; /* "" = source default */
    int64_t train_limit, test_limit; /* use only the first N samples (0 = all) */
    double val_fraction;             /* text: tail of the file held out for evaluation */
    int seq_len, stride;             /* text */
    ts_cfg_transforms transforms;      /* training samples */
    ts_cfg_transforms test_transforms; /* evaluation samples (n == -1: auto) */
    int num_workers;
    int shuffle;
    int shuffle_buffer;
    int prefetch;
    int drop_last;
    int sampler;              /* 0 distributed, 1 stratified (class-balanced shards) */
  } data;
  struct {
    int epochs;
    int64_t steps; /* > 0: train for this many optimizer steps (epochs ignored) */
    int batch_size;       /* GLOBAL batch (all devices, all micro-batches) */
    int micro_batch_size; /* divides batch_size; resolved to batch_size if 0 */
    int eval_batch_size;  /* resolved to batch_size if 0 */
    uint64_t seed;
    int64_t eval_every; /* steps; 0 = at the end of every epoch; -1 = only at the end */
    int64_t log_every;  /* steps */
    int threads;        /* 0 = OMP_NUM_THREADS or the core count */
    double max_memory_mb; /* per-rank memory budget checked before step 1 (docs/memory.md); 0 = none */
    int amp_level;        /* 0..3: O0 (f32) .. O3; O1-O3 are planned (tessera plan), not trained yet */
    int amp_dtype;        /* 0 bf16, 1 f16 */
    int loss_scale;           /* ts_cfg_loss_scale */
    double loss_scale_value;  /* fixed: the scale; dynamic: the first one; 0 = the mode's default */
    double loss_scale_factor; /* dynamic: growth / back-off factor (> 1) */
    int64_t loss_scale_window;/* dynamic: overflow-free steps before the scale grows */
    double loss_scale_min;    /* dynamic: the lowest scale (> 0) */
    int loss_scale_drop_overflow; /* fixed: 0 = a step whose gradients overflowed is applied anyway */
    int restarts;             /* `tessera launch`: restarts after a lost rank (--restarts's default) */
  } train;
  struct {
    ts_optim_kind name;
    double lr, momentum, dampening;
    int nesterov;
    double weight_decay;
    ts_cfg_floats betas; /* exactly 2 */
    double eps;
    int exclude_bias_and_norm; /* no weight decay on biases and norm parameters */
    ts_cfg_slist no_decay_params; /* names (or '*' patterns) of parameters without weight decay */
    ts_cfg_pgroups param_groups;  /* parameter groups with their own lr factor and weight decay */
    int lamb_always_adapt;
    double clip_grad_norm; /* 0 = off */
    struct {
      ts_lr_kind name;
      int64_t warmup_steps;
      double warmup_epochs; /* > 0: warm-up length in epochs (instead of warmup_steps) */
      ts_sched_unit unit;   /* of step_size and milestones */
      int64_t step_size;
      double gamma;
      ts_cfg_ints milestones;
      double min_lr;
      ts_cfg_flist values; /* table: the rate of each step */
    } schedule;
  } optimizer;
  struct {
    ts_parallel_mode mode;
    int gradients_mean;      /* data parallel: average (1) or sum (0) gradients over ranks */
    double bucket_size_mb;   /* gradient buckets (MindSpore's comm_fusion), MiB */
    ts_cfg_ilist all_reduce_fusion_config; /* bucket split points: indices into the gradients */
    int device_num;          /* 0: the job's world size; else checked against it (MindSpore's) */
    int comm_dtype;          /* 0 f32, 1 bf16, 2 f16: dtype of gradient reduction (compression) */
    int overlap;             /* start each bucket's all-reduce as soon as its gradients are ready */
    int allreduce;           /* 0 auto, 1 flat, 2 hierarchical: the buckets' all-reduce across hosts */
    int reduce_scatter;      /* 0 auto, 1 mpi, 2 ring: optimizer sharding's bucket reduce-scatters */
    int comm_backend;        /* device_target GPU with several ranks: 0 auto, 1 nccl, 2 mpi (staged
                                through pinned host memory) for the collectives on device buffers */
    int parameter_broadcast; /* broadcast parameters from rank 0 at start (loaded weights) */
    int sync_batchnorm;      /* BatchNorm training statistics over all ranks (SyncBatchNorm) */
    double comm_timeout;     /* seconds a collective may take before the job fails; 0 = forever */
    int debug_check;         /* verify all ranks issue the same collectives in the same order */
    ts_cfg_strategies strategies;             /* semi_auto_parallel: per-operator shard strategies */
    char strategy_ckpt_load_file[TS_CFG_PATH_MAX]; /* strategies (JSON) to use ("" none) */
    char strategy_ckpt_save_file[TS_CFG_PATH_MAX]; /* where to save the strategies in force */
    int full_batch;          /* every rank reads the whole global batch (MindSpore's full_batch) */
    int sequence_parallel;   /* Megatron's sequence parallelism over the tensor-parallel axis */
    int context_parallel;    /* the sequence cut this many ways (1: none; 0: auto_parallel's search
                                chooses, none elsewhere) */
    int context_parallel_algo; /* how attention runs over the cut: TS_CP_ULYSSES (0), TS_CP_RING (1),
                                  TS_CP_AUTO (2: ulysses where the heads divide, else ring) */
    int optimizer_shard;     /* 0 off, 1: optimizer state sharded over the ranks (ZeRO-1), 2: and the
                                accumulated gradients (ZeRO-2), 3: and the parameters (ZeRO-3) */
    int enable_parallel_optimizer; /* MindSpore's alias: true = optimizer_shard on (1 unless a stage
                                      is given), false = off; validation keeps it equal to
                                      optimizer_shard != off */
    double optimizer_shard_threshold_kb; /* parameters smaller than this stay replicated */
    int optimizer_shard_weights; /* 0 auto, 1 f32, 2 low: stages 1, 2 under amp O2/O3 keep 16-bit working weights */
    int optimizer_shard_group; /* ranks per shard group (hybrid sharding); 0: the whole data-parallel group */
    char cluster[TS_CFG_PATH_MAX]; /* auto_parallel: the cluster searched for (file or built-in name) */
    int search_mode;         /* auto_parallel: ts_search_mode (0 dynamic_programming, 1 sharding_propagation,
                                2 recursive_programming) */
    double search_time_budget; /* auto_parallel: seconds the plan search may take; at the end the best plan
                                  found so far (0: no limit) */
    int auto_tp;             /* auto_parallel: 0 = the outer search picks the degrees; T > 0 = the plan is
                                data parallel N/T x tensor parallel T, the operators searched */
    int pipeline_stages;     /* pipeline parallel: stages (1 = none) */
    int micro_batches;       /* pipeline: micro-batches per step (0: batch_size / micro_batch_size) */
    int pipeline_schedule;   /* 0 gpipe, 1 1f1b, 2 interleaved_1f1b (ts_sched_kind) */
    int virtual_stages;      /* interleaved_1f1b: model pieces per rank */
    ts_cfg_strategies stages; /* pipeline: operator name pattern -> stage number (text) */
  } parallel;
  struct {
    char dir[TS_CFG_PATH_MAX]; /* "" = no checkpoints */
    char prefix[TS_CFG_NAME_MAX];
    int64_t save_steps; /* > 0: every N steps */
    int save_epochs;    /* > 0: every N epochs (when save_steps is 0) */
    int save_last;      /* also at the end of training */
    int keep_max;       /* 0 = keep all */
    char resume[TS_CFG_PATH_MAX]; /* "" (fresh start), "auto" (latest in dir, if any), or a path */
    int strict;
    int format;         /* ts_cfg_ckpt_format */
    int async;          /* write in a background thread from a host copy of the step's state */
  } checkpoint;
  struct {
    char metrics[TS_CFG_PATH_MAX]; /* JSON-lines file, "" = none */
    ts_progress_mode progress;
    char plot[TS_CFG_PATH_MAX]; /* PNG of the curves at the end, "" = none */
    char plot_size[32];         /* its size "WIDTHxHEIGHT" in pixels, "" = 1000x420 */
    ts_log_level level;
    int profile;               /* ts_prof_mode: 0 off, 1 summary, 2 trace (tessera/prof.h) */
    char trace[TS_CFG_PATH_MAX]; /* Chrome trace file (profile: trace); "" = <checkpoint.dir or .>/trace.json */
    int64_t profile_start;     /* first profiled step (1-based) */
    char tensorboard[TS_CFG_PATH_MAX]; /* folder of TensorBoard event files, "" = none */
  } log;
  char source[TS_CFG_PATH_MAX]; /* the file the config was loaded from ("" if none); not a key */
  unsigned char given[TS_CFG_MAX_KEYS]; /* bookkeeping, not a key: which keys the file or an
                                           override set (ts_config_given) */
} ts_config;

/* ---- ownership ----
 * A ts_config is a plain struct except for its lists of any length (parallel.strategies,
 * parallel.stages, parallel.all_reduce_fusion_config), which live in malloc'd arrays the config
 * owns. So:
 *   - ts_config_defaults / ts_config_load* treat *cfg as uninitialised (they do not free what it
 *     held): call ts_config_free first when reloading into a config that owned lists;
 *   - ts_config_free(cfg) releases them (the lists read empty after; calling it twice is fine);
 *   - a copy by value (`ts_config c = *cfg`) shares the arrays: it is a read-only view, valid
 *     while *cfg lives; do not ts_config_free it, nor ts_config_set a list key on it (setting a
 *     list frees the list it replaces). Give a copy of its own with ts_config_copy.
 * A config that never had such a list set owns nothing; ts_config_free is still the rule. */
void ts_config_free(ts_config *cfg);
/* *dst = a deep copy of *src (dst treated as uninitialised); TS_ENOMEM leaves *dst owning
 * nothing (its lists empty). dst == src is a no-op. */
int ts_config_copy(ts_config *dst, const ts_config *src);
/* Lists of a config: appends (op, text), growing the array (TS_ENOMEM; TS_ECONFIG for an op
 * longer than 159 bytes or text longer than 95, naming them); replaces *dst's entries with a
 * copy of src's (frees dst's old array); frees the array (n = 0). */
int ts_cfg_strategies_add(ts_cfg_strategies *s, const char *op, const char *text);
int ts_cfg_strategies_assign(ts_cfg_strategies *dst, const ts_cfg_strategies *src);
void ts_cfg_strategies_free(ts_cfg_strategies *s);

/* Every key at its default (see docs/config.md). The struct is zeroed first, so two configs
 * with equal keys compare equal with memcmp, lists aside (compare those by content or through
 * ts_config_dump_string). */
void ts_config_defaults(ts_config *cfg);

/* Defaults, then `path` (may be NULL: defaults only), then overrides[0..n), then validation.
 * On error *cfg holds what was loaded so far and the status is TS_ECONFIG (or TS_ENOMEM). */
int ts_config_load(const char *path, const char *const *overrides, int n, ts_config *cfg);
/* (Both: on success and on error the caller ts_config_free's *cfg.) */
/* Same from YAML text in memory; `label` names it in messages (e.g. a file name). */
int ts_config_load_string(const char *yaml, const char *label, const char *const *overrides,
                          int n, ts_config *cfg);

/* Sets one key (or a whole section, given a flow mapping) from YAML value text. Type and range
 * of the key are checked; cross-key constraints only by ts_config_validate. */
int ts_config_set(ts_config *cfg, const char *key, const char *value);
/* Applies one "key.path=value" override (the --set syntax). */
int ts_config_override(ts_config *cfg, const char *assignment);
/* Formats a key's value as YAML (flow style: "[10, 20]", "\"path\"", "0.05") into buf (always
 * NUL-terminated). TS_ECONFIG for an unknown key, TS_ERANGE if buf is too small. */
int ts_config_get(const ts_config *cfg, const char *key, char *buf, size_t cap);

/* 1 if `key` was set by the loaded file, an override or ts_config_set (not left at its default);
 * 0 otherwise or for an unknown key. Aliases are told apart from their key this way. */
int ts_config_given(const ts_config *cfg, const char *key);

/* Cross-key checks (batch_size divisible by micro_batch_size, schedule consistency, model vs
 * data, transform order, ...) and resolution of derived defaults (micro/eval batch size,
 * num_classes for known data sets, block_size, the Fashion-MNIST path). Idempotent. */
int ts_config_validate(ts_config *cfg);

/* Stable 64-bit hash (FNV-1a) of the training-relevant keys (model.*, optimizer.*, train.epochs
 * / steps / batch_size / seed, data.name / transforms / limits / shuffling; not paths, logging,
 * checkpointing, parallel mode, micro-batching, workers), over the keys that differ from their
 * defaults, so that adding a key later leaves existing hashes unchanged. */
uint64_t ts_config_hash(const ts_config *cfg);

/* The effective config as YAML (block style, every key, in docs order), loadable again. */
int ts_config_dump_yaml(const ts_config *cfg, FILE *f);
/* Same into a malloc'd string (*out; caller frees). */
int ts_config_dump_string(const ts_config *cfg, char **out);

/* ---- the key table (for docs, help and tests) ---- */
typedef struct {
  const char *path;   /* "optimizer.schedule.milestones" */
  const char *type;   /* "int", "float", "bool", "string", "enum", "int list", "float list",
                         "transforms", "strategies", "string list" */
  const char *def;    /* default, as YAML text */
  const char *values; /* enums: "mlp|lenet5|..."; else NULL */
  const char *doc;    /* one-line meaning */
  int hashed;         /* part of ts_config_hash */
} ts_config_key;

int ts_config_key_count(void);
/* TS_ERANGE if i is out of range. */
int ts_config_key_info(int i, ts_config_key *out);

/* ---- conversions for the trainer ---- */
/* The optimizer config: kind, weight decay, momentum, betas, eps, ... */
int ts_config_optim(const ts_config *cfg, ts_optim_config *out);
/* The loss scaler's config (optim.h) from train.loss_scale*: auto resolved (dynamic with
 * train.amp_level O1-O3 and amp_dtype f16, else none), loss_scale_value 0 resolved to the mode's
 * default (fixed: TS_LOSS_SCALE_FIXED_DEFAULT, dynamic: TS_LOSS_SCALE_DYNAMIC_DEFAULT). */
#define TS_LOSS_SCALE_FIXED_DEFAULT 1024.0    /* MindSpore's FixedLossScaleManager examples */
#define TS_LOSS_SCALE_DYNAMIC_DEFAULT 65536.0 /* 2^16: PyTorch's GradScaler, MindSpore's dynamic manager */
void ts_config_loss_scale(const ts_config *cfg, ts_loss_scale_config *out);
/* Optimizer steps of the whole run: train.steps, or train.epochs * steps_per_epoch. */
int64_t ts_config_total_steps(const ts_config *cfg, int64_t steps_per_epoch);
/* TESSERA_MAX_STEPS (environment): the most optimizer steps any run takes (the trainer runs as if
 * train.steps = min(the run's steps, N) were set). *n = 0 when unset or empty; a value that is not a
 * positive integer is TS_ECONFIG naming the variable. */
int ts_config_max_steps(int64_t *n);
/* The learning-rate schedule in optimizer steps (epoch units converted with steps_per_epoch;
 * cosine's total_steps = ts_config_total_steps). A warm-up longer than the run is clipped to the run
 * (one warning through ts_log, naming the keys and values). Checked with ts_lr_check. */
int ts_config_lr_schedule(const ts_config *cfg, int64_t steps_per_epoch, ts_lr_schedule *out);
/* The transforms for training (train = 1) or evaluation (train = 0, "auto" resolved) into
 * out[0..cap); returns the count (>= 0) or a negative status. */
int ts_config_transforms(const ts_config *cfg, int train, ts_transform *out, int cap);
/* Model configs for the zoo builders (mlp's hidden pointer points into cfg). */
void ts_config_mlp(const ts_config *cfg, ts_mlp_config *out);
void ts_config_lenet5(const ts_config *cfg, ts_lenet5_config *out);
void ts_config_convnet(const ts_config *cfg, ts_convnet_config *out);
void ts_config_resnet(const ts_config *cfg, ts_resnet_config *out);
void ts_config_gpt(const ts_config *cfg, ts_gpt_config *out);

#ifdef __cplusplus
}
#endif
#endif
