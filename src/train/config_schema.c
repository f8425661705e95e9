/* The configuration key table: every key's path, type, storage, default, bounds and meaning.
 * Order = docs order = dump order; keys of one section must be contiguous. */
#include <float.h>
#include <stddef.h>

#include "config_impl.h"

static const char *const model_names[] = {"mlp", "lenet5", "convnet", "resnet", "gpt", NULL};
static const char *const data_names[] = {"fashion_mnist", "mnist", "cifar10", "cifar100",
                                         "image_folder", "records", "text", NULL};
static const char *const optim_names[] = {"sgd", "momentum", "adam", "adamw", "lamb", NULL};
static const char *const lr_names[] = {"constant", "step", "multistep", "cosine", "table", NULL};
static const char *const unit_names[] = {"steps", "epochs", NULL};
static const char *const parallel_names[] = {"stand_alone", "data_parallel", "semi_auto_parallel",
                                             "auto_parallel", "hybrid_parallel", NULL};
static const char *const comm_dtype_names[] = {"f32", "bf16", "f16", NULL};
static const char *const allreduce_names[] = {"auto", "flat", "hierarchical", "flat_send", NULL};
static const char *const reduce_scatter_names[] = {"auto", "mpi", "ring", NULL}; /* TS_REDUCE_SCATTER_* */
static const char *const shard_weights_names[] = {"auto", "f32", "low", NULL}; /* TS_SHARD_WEIGHTS_* */
static const char *const shard_names[] = {"off", "1", "2", "3", NULL};
static const char *const schedule_names[] = {"gpipe", "1f1b", "interleaved_1f1b", NULL};
static const char *const progress_names[] = {"auto", "bar", "lines", "off", NULL};
static const char *const level_names[] = {"debug", "info", "warn", "error", NULL};
static const char *const profile_names[] = {"off", "summary", "trace", NULL};
static const char *const recompute_names[] = {"none", "full", "selective", NULL};
static const char *const cp_algo_names[] = {"ulysses", "ring", "auto", NULL}; /* TS_CP_* */
static const char *const comm_backend_names[] = {"auto", "nccl", "mpi", NULL}; /* runtime/dcoll.h's order */
static const char *const search_names[] = {"dynamic_programming", "sharding_propagation", "recursive_programming", NULL};
static const char *const amp_level_names[] = {"O0", "O1", "O2", "O3", NULL};
static const char *const amp_dtype_names[] = {"bf16", "f16", NULL};
static const char *const loss_scale_names[] = {"auto", "none", "fixed", "dynamic", NULL};
static const char *const sampler_names[] = {"distributed", "stratified", NULL};
static const char *const device_names[] = {"CPU", "GPU", NULL};
static const char *const f32_precision_names[] = {"highest", "high", NULL};
static const char *const ckpt_format_names[] = {"auto", "whole", "sliced", NULL};

const char *const *ts__cfg_model_names = model_names;
const char *const *ts__cfg_data_names = data_names;
const char *const *ts__cfg_parallel_names = parallel_names;
const char *const *ts__cfg_progress_names = progress_names;
const char *const *ts__cfg_unit_names = unit_names;
const char *const *ts__cfg_optim_names = optim_names;
const char *const *ts__cfg_lr_names = lr_names;

#define FLD(f) offsetof(ts_config, f), sizeof(((ts_config *)0)->f)
#define BIG 1e18
#define I31 2147483647.0

/* path, type, field, default, enum names, lo, hi, min count, max count, flags, doc */
const ts__cfg_key ts__cfg_keys[] = {
    /* ---- the device (MindSpore's context keys) ---- */
    {"device_target", CT_ENUM, FLD(device_target), "CPU", device_names, 0, 0, 0, 0, 0,
     "where the job runs: CPU (the reference) or GPU (an NVIDIA GPU through CUDA, found at run time; "
     "refused before step 1 with the reason where there is none; docs/gpu.md)"},
    {"device_id", CT_INT, FLD(device_id), "-1", NULL, -1, 1023, 0, 0, 0,
     "device_target GPU: the GPU this process uses; -1 = the local rank's (one GPU per process "
     "under mpirun, or GPU 0)"},
    {"float32_matmul_precision", CT_ENUM, FLD(float32_matmul_precision), "highest", f32_precision_names, 0, 0, 0, 0, 0,
     "device_target GPU: f32 GEMMs and convolutions in real f32 (highest, PyTorch's default) or on TF32 tensor "
     "cores through cuBLAS and cuDNN (high: PyTorch's set_float32_matmul_precision('high')); the CPU's f32 is "
     "real f32 either way"},
    /* ---- model ---- */
    {"model.name", CT_ENUM, FLD(model.name), "mlp", model_names, 0, 0, 0, 0, CF_HASH,
     "model architecture"},
    {"model.num_classes", CT_INT, FLD(model.num_classes), "0", NULL, 0, 1e7, 0, 0, CF_HASH,
     "number of classes; 0 = from the data set (10 for mnist/fashion_mnist/cifar10, 100 for "
     "cifar100, the source's count for image_folder/records)"},
    {"model.hidden", CT_INTS, FLD(model.hidden), "[512, 256]", NULL, 1, I31, 0, TS_CFG_MAX_LIST,
     CF_HASH, "mlp: hidden layer sizes (each followed by ReLU)"},
    {"model.depth", CT_INT, FLD(model.depth), "20", NULL, 1, 10000, 0, 0, CF_HASH,
     "resnet: 18, 34, 50, 101, 152 (torchvision) or 6n+2 (20, 32, 44, 56, 110: CIFAR ResNet)"},
    {"model.cifar_stem", CT_BOOL, FLD(model.cifar_stem), "true", NULL, 0, 0, 0, 0, CF_HASH,
     "resnet 18..152: 3x3 stride-1 stem without max-pool (false: the ImageNet 7x7/2 stem)"},
    {"model.zero_init_residual", CT_BOOL, FLD(model.zero_init_residual), "false", NULL, 0, 0, 0,
     0, CF_HASH, "resnet: the last BatchNorm of each block starts at weight 0"},
    {"model.channels", CT_INTS, FLD(model.channels), "[32, 64]", NULL, 1, I31, 2, 2, CF_HASH,
     "convnet: output channels of conv1 and conv2"},
    {"model.bn_momentum", CT_FLOAT, FLD(model.bn_momentum), "0.1", NULL, 0, 1, 0, 0, CF_HASH,
     "BatchNorm running-statistics momentum (PyTorch convention)"},
    {"model.bn_eps", CT_FLOAT, FLD(model.bn_eps), "1e-5", NULL, 0, 1, 0, 0, CF_HASH | CF_LO_OPEN,
     "BatchNorm epsilon"},
    {"model.label_smoothing", CT_FLOAT, FLD(model.label_smoothing), "0", NULL, 0, 1, 0, 0,
     CF_HASH | CF_HI_OPEN, "label smoothing of the cross-entropy loss (classifiers)"},
    {"model.n_layer", CT_INT, FLD(model.n_layer), "4", NULL, 1, 10000, 0, 0, CF_HASH,
     "gpt: transformer blocks"},
    {"model.n_head", CT_INT, FLD(model.n_head), "4", NULL, 1, 10000, 0, 0, CF_HASH,
     "gpt: attention heads (must divide n_embd)"},
    {"model.n_embd", CT_INT, FLD(model.n_embd), "128", NULL, 1, 1 << 20, 0, 0, CF_HASH,
     "gpt: model width (d_model)"},
    {"model.block_size", CT_INT, FLD(model.block_size), "0", NULL, 0, 1 << 24, 0, 0, CF_HASH,
     "gpt: maximum sequence length (position table rows); 0 = data.seq_len"},
    {"model.vocab_size", CT_INT, FLD(model.vocab_size), "256", NULL, 1, 1 << 24, 0, 0, CF_HASH,
     "gpt: vocabulary size (the text source yields byte ids, so at least 256)"},
    {"model.mlp_ratio", CT_INT, FLD(model.mlp_ratio), "4", NULL, 1, 64, 0, 0, CF_HASH,
     "gpt: MLP hidden width / n_embd"},
    {"model.bias", CT_BOOL, FLD(model.bias), "true", NULL, 0, 0, 0, 0, CF_HASH,
     "gpt: Linear and LayerNorm layers have biases"},
    {"model.tie_weights", CT_BOOL, FLD(model.tie_weights), "false", NULL, 0, 0, 0, 0, CF_HASH,
     "gpt: lm_head shares transformer.wte.weight"},
    {"model.dropout", CT_FLOAT, FLD(model.dropout), "0", NULL, 0, 1, 0, 0, CF_HASH | CF_HI_OPEN,
     "gpt: dropout on the embeddings and residual branches"},
    {"model.recompute", CT_ENUM, FLD(model.recompute), "none", recompute_names, 0, 0, 0, 0, 0,
     "activation recomputation (checkpointing): full re-runs the forward of each segment in "
     "backward, selective only its cheap ops (elementwise, softmax, dropout, layernorm); results "
     "are bitwise unchanged (docs/memory.md)"},
    {"model.recompute_layers", CT_STRS, FLD(model.recompute_layers), "[]", NULL, 0, 0, 0,
     TS_CFG_MAX_STRS, 0,
     "name patterns of the recompute segments, as parallel.strategies' operator names "
     "(transformer.h.*: one segment per block); [] = every block (names up to their first "
     "number) and the rest of the model"},
    /* ---- data ---- */
    {"data.name", CT_ENUM, FLD(data.name), "fashion_mnist", data_names, 0, 0, 0, 0, CF_HASH,
     "data source"},
    {"data.path", CT_STR, FLD(data.path), "\"\"", NULL, 0, 0, 0, 0, 0,
     "directory (mnist, fashion_mnist, cifar*, image_folder, records) or file (text); empty for "
     "fashion_mnist = " TS_FASHION_MNIST_DIR},
    {"data.train_split", CT_STR, FLD(data.train_split), "\"\"", NULL, 0, 0, 0, 0, 0,
     "training split; empty = the source's default (\"train\"; image_folder/records: the "
     "sub-folder / shard prefix \"train\")"},
    {"data.test_split", CT_STR, FLD(data.test_split), "\"\"", NULL, 0, 0, 0, 0, 0,
     "evaluation split; empty = the source's default (mnist: \"t10k\", cifar: the test batch, "
     "image_folder/records: \"test\")"},
    {"data.train_limit", CT_I64, FLD(data.train_limit), "0", NULL, 0, BIG, 0, 0, CF_HASH,
     "use only the first N training samples (0 = all)"},
    {"data.test_limit", CT_I64, FLD(data.test_limit), "0", NULL, 0, BIG, 0, 0, 0,
     "use only the first N evaluation samples (0 = all)"},
    {"data.val_fraction", CT_FLOAT, FLD(data.val_fraction), "0.1", NULL, 0, 1, 0, 0,
     CF_HASH | CF_HI_OPEN, "text: fraction at the end of the file held out for evaluation"},
    {"data.seq_len", CT_INT, FLD(data.seq_len), "128", NULL, 1, 1 << 24, 0, 0, CF_HASH,
     "text: tokens per training sequence"},
    {"data.stride", CT_INT, FLD(data.stride), "0", NULL, 0, 1 << 24, 0, 0, CF_HASH,
     "text: distance between sequence starts (0 = seq_len)"},
    {"data.transforms", CT_TFS, FLD(data.transforms),
     "[{name: to_float, scale: 0.00392156862745098}, {name: hwc_to_chw}]", NULL, 0, 0, 0,
     TS_CFG_MAX_TRANSFORMS, CF_HASH,
     "transforms of training samples, in order (see Transforms)"},
    {"data.test_transforms", CT_TFS, FLD(data.test_transforms), "auto", NULL, 0, 0, 0,
     TS_CFG_MAX_TRANSFORMS, CF_AUTO,
     "transforms of evaluation samples; auto = data.transforms without the random ones"},
    {"data.num_workers", CT_INT, FLD(data.num_workers), "2", NULL, 0, 1024, 0, 0, 0,
     "decoding/augmentation threads (0 = in the training thread); never changes results"},
    {"data.sampler", CT_ENUM, FLD(data.sampler), "distributed", sampler_names, 0, 0, 0, 0, CF_HASH,
     "which samples each rank reads: distributed (like torch's DistributedSampler) or stratified "
     "(each rank gets the same class proportions; labelled data sets only)"},
    {"data.shuffle", CT_BOOL, FLD(data.shuffle), "true", NULL, 0, 0, 0, 0, CF_HASH,
     "a new random order of the training samples every epoch"},
    {"data.shuffle_buffer", CT_INT, FLD(data.shuffle_buffer), "0", NULL, 0, 1 << 28, 0, 0,
     CF_HASH, "extra seeded reservoir shuffle of this many samples (0 = off)"},
    {"data.prefetch", CT_INT, FLD(data.prefetch), "2", NULL, 0, 1024, 0, 0, 0,
     "batches prepared ahead"},
    {"data.drop_last", CT_BOOL, FLD(data.drop_last), "true", NULL, 0, 0, 0, 0, CF_HASH,
     "drop the last incomplete training batch of each epoch"},
    /* ---- train ---- */
    {"train.epochs", CT_INT, FLD(train.epochs), "5", NULL, 0, 1e9, 0, 0, CF_HASH,
     "passes over the training data (ignored when train.steps > 0)"},
    {"train.steps", CT_I64, FLD(train.steps), "0", NULL, 0, BIG, 0, 0, CF_HASH,
     "> 0: train for exactly this many optimizer steps instead of epochs"},
    {"train.batch_size", CT_INT, FLD(train.batch_size), "128", NULL, 1, 1 << 30, 0, 0, CF_HASH,
     "GLOBAL batch: samples per optimizer step over all devices and micro-batches"},
    {"train.micro_batch_size", CT_INT, FLD(train.micro_batch_size), "0", NULL, 0, 1 << 30, 0, 0,
     0, "samples per forward/backward (gradient accumulation); must divide batch_size; 0 = "
        "batch_size"},
    {"train.eval_batch_size", CT_INT, FLD(train.eval_batch_size), "0", NULL, 0, 1 << 30, 0, 0, 0,
     "evaluation batch size; 0 = batch_size"},
    {"train.seed", CT_U64, FLD(train.seed), "1", NULL, 0, 0, 0, 0, CF_HASH,
     "seed of parameter initialisation, data order, augmentation and dropout"},
    {"train.eval_every", CT_I64, FLD(train.eval_every), "0", NULL, -2, BIG, 0, 0, 0,
     "evaluate every N steps; 0 = at the end of every epoch; -1 = only at the end; -2 = never (Python's Model.train, "
     "as MindSpore's)"},
    {"train.log_every", CT_I64, FLD(train.log_every), "50", NULL, 1, BIG, 0, 0, 0,
     "steps between progress lines and metrics records"},
    {"train.threads", CT_INT, FLD(train.threads), "0", NULL, 0, 4096, 0, 0, 0,
     "compute threads; 0 = OMP_NUM_THREADS or the number of cores"},
    {"train.max_memory_mb", CT_FLOAT, FLD(train.max_memory_mb), "0", NULL, 0, 1e12, 0, 0, 0,
     "per-rank memory budget in MiB: the rank's parameters, gradients, optimizer state and "
     "activation arenas as planned are checked against it before step 1 (and by tessera plan), "
     "a refusal naming the settings that cut them; 0 = no budget (docs/memory.md)"},
    {"train.amp_level", CT_ENUM, FLD(train.amp_level), "O0", amp_level_names, 0, 0, 0, 0, CF_HASH,
     "mixed precision (MindSpore's levels, a graph pass that inserts casts; docs/mixed-precision.md): "
     "O0 f32; O1 matmul, dense, conv2d and attention in amp_dtype; O2 the whole model in amp_dtype "
     "except softmax, the loss and reductions (f32), batch/layer norm with f32 gamma/beta and "
     "statistics; O3 everything in amp_dtype. Parameters, gradients and optimizer state stay f32 "
     "(the master weights)"},
    {"train.amp_dtype", CT_ENUM, FLD(train.amp_dtype), "bf16", amp_dtype_names, 0, 0, 0, 0, CF_HASH,
     "the low-precision dtype of train.amp_level O1-O3"},
    {"train.loss_scale", CT_ENUM, FLD(train.loss_scale), "auto", loss_scale_names, 0, 0, 0, 0, CF_HASH,
     "loss scaling (docs/mixed-precision.md): fixed = the gradients computed at loss_scale_value "
     "times the loss and divided back, a step whose gradients overflow (inf/NaN) skipped; dynamic = "
     "the same, the scale halved (loss_scale_factor) on overflow and grown after loss_scale_window "
     "steps without; auto = dynamic with amp_level O1-O3 and amp_dtype f16, else none"},
    {"train.loss_scale_value", CT_FLOAT, FLD(train.loss_scale_value), "0", NULL, 0, 3.4e38, 0, 0, CF_HASH,
     "fixed: the scale; dynamic: the first scale; 0 = the mode's default (fixed 1024, dynamic 65536)"},
    {"train.loss_scale_factor", CT_FLOAT, FLD(train.loss_scale_factor), "2", NULL, 1, 1e6, 0, 0,
     CF_HASH | CF_LO_OPEN, "dynamic: the scale is divided by it on overflow and multiplied by it after "
     "loss_scale_window steps without"},
    {"train.loss_scale_window", CT_I64, FLD(train.loss_scale_window), "2000", NULL, 1, BIG, 0, 0, CF_HASH,
     "dynamic: overflow-free steps before the scale grows"},
    {"train.loss_scale_min", CT_FLOAT, FLD(train.loss_scale_min), "1", NULL, 0, 3.4e38, 0, 0,
     CF_HASH | CF_LO_OPEN, "dynamic: the scale never drops below it (may be below 1)"},
    {"train.loss_scale_drop_overflow", CT_BOOL, FLD(train.loss_scale_drop_overflow), "true", NULL, 0, 0, 0, 0,
     CF_HASH, "fixed: a step whose gradients overflowed (inf/NaN) is skipped; false = applied anyway "
     "(MindSpore's FixedLossScaleManager(drop_overflow_update=False))"},
    {"train.restarts", CT_INT, FLD(train.restarts), "0", NULL, 0, 1000, 0, 0, 0,
     "tessera launch: times a job that lost a rank (killed, crashed, or stuck past "
     "parallel.comm_timeout) is restarted from its newest readable checkpoint (the default of "
     "launch --restarts; plain mpirun cannot restart a job: docs/parallel.md)"},
    /* ---- optimizer ---- */
    {"optimizer.name", CT_ENUM, FLD(optimizer.name), "momentum", optim_names, 0, 0, 0, 0, CF_HASH,
     "update rule (PyTorch semantics; lamb as apex FusedLAMB)"},
    {"optimizer.lr", CT_FLOAT, FLD(optimizer.lr), "0.05", NULL, 0, 1e6, 0, 0, CF_HASH,
     "base learning rate (the schedule's peak)"},
    {"optimizer.momentum", CT_FLOAT, FLD(optimizer.momentum), "0.9", NULL, 0, 1, 0, 0,
     CF_HASH | CF_HI_OPEN, "momentum: momentum factor"},
    {"optimizer.dampening", CT_FLOAT, FLD(optimizer.dampening), "0", NULL, 0, 1, 0, 0, CF_HASH,
     "momentum: PyTorch's dampening"},
    {"optimizer.nesterov", CT_BOOL, FLD(optimizer.nesterov), "false", NULL, 0, 0, 0, 0, CF_HASH,
     "momentum: Nesterov momentum"},
    {"optimizer.weight_decay", CT_FLOAT, FLD(optimizer.weight_decay), "0", NULL, 0, 1e6, 0, 0,
     CF_HASH, "L2 penalty (sgd, momentum, adam) or decoupled decay (adamw, lamb)"},
    {"optimizer.betas", CT_FLOATS, FLD(optimizer.betas), "[0.9, 0.999]", NULL, 0, 1, 2, 2,
     CF_HASH | CF_HI_OPEN, "adam, adamw, lamb: moment decay rates (beta1, beta2)"},
    {"optimizer.eps", CT_FLOAT, FLD(optimizer.eps), "1e-8", NULL, 0, 1, 0, 0,
     CF_HASH | CF_LO_OPEN, "adam, adamw, lamb: denominator epsilon (apex's LAMB default is 1e-6)"},
    {"optimizer.exclude_bias_and_norm", CT_BOOL, FLD(optimizer.exclude_bias_and_norm), "true",
     NULL, 0, 0, 0, 0, CF_HASH, "no weight decay for biases and normalisation parameters"},
    {"optimizer.no_decay_params", CT_SLIST, FLD(optimizer.no_decay_params), "[]", NULL, 0, 0, 0, 0, CF_HASH,
     "parameters without weight decay, by name or '*' pattern (MindSpore's parameter groups: a group with "
     "weight_decay 0), besides biases and norm parameters under exclude_bias_and_norm; each must match a "
     "trainable parameter"},
    {"optimizer.param_groups", CT_PGROUPS, FLD(optimizer.param_groups), "{}", NULL, 0, 0, 0, 0, CF_HASH,
     "parameter groups (PyTorch's param_groups, MindSpore's group_params, mmengine's custom_keys): "
     "{PATTERN: {lr_scale: X, weight_decay: Y}, ...}, the parameters a name or '*' pattern matches updated at the "
     "schedule's rate times X (default 1) with weight decay Y (default optimizer.weight_decay; biases and norm "
     "parameters under exclude_bias_and_norm and no_decay_params stay undecayed); a parameter in two groups, "
     "or a pattern matching none, is refused"},
    {"optimizer.lamb_always_adapt", CT_BOOL, FLD(optimizer.lamb_always_adapt), "false", NULL, 0,
     0, 0, 0, CF_HASH, "lamb: trust ratio also for parameters without weight decay (NVLAMB)"},
    {"optimizer.clip_grad_norm", CT_FLOAT, FLD(optimizer.clip_grad_norm), "0", NULL, 0, 1e12, 0,
     0, CF_HASH, "clip the global L2 norm of the gradients to this value (0 = off)"},
    {"optimizer.schedule.name", CT_ENUM, FLD(optimizer.schedule.name), "constant", lr_names, 0,
     0, 0, 0, CF_HASH, "learning-rate schedule"},
    {"optimizer.schedule.warmup_steps", CT_I64, FLD(optimizer.schedule.warmup_steps), "0", NULL,
     0, BIG, 0, 0, CF_HASH, "linear warm-up from 0 over this many steps"},
    {"optimizer.schedule.warmup_epochs", CT_FLOAT, FLD(optimizer.schedule.warmup_epochs), "0",
     NULL, 0, 1e9, 0, 0, CF_HASH,
     "warm-up length in epochs (rounded to steps) instead of warmup_steps"},
    {"optimizer.schedule.unit", CT_ENUM, FLD(optimizer.schedule.unit), "steps", unit_names, 0, 0,
     0, 0, CF_HASH, "unit of step_size and milestones"},
    {"optimizer.schedule.step_size", CT_I64, FLD(optimizer.schedule.step_size), "0", NULL, 0, BIG,
     0, 0, CF_HASH, "step: multiply the rate by gamma every step_size units"},
    {"optimizer.schedule.gamma", CT_FLOAT, FLD(optimizer.schedule.gamma), "0.1", NULL, 0, 1e6, 0,
     0, CF_HASH, "step, multistep: decay factor"},
    {"optimizer.schedule.milestones", CT_INTS, FLD(optimizer.schedule.milestones), "[]", NULL, 1,
     I31, 0, TS_LR_MAX_MILESTONES, CF_HASH,
     "multistep: increasing points (in units) where the rate is multiplied by gamma"},
    {"optimizer.schedule.min_lr", CT_FLOAT, FLD(optimizer.schedule.min_lr), "0", NULL, 0, 1e6, 0,
     0, CF_HASH, "cosine: final learning rate"},
    {"optimizer.schedule.values", CT_FLIST, FLD(optimizer.schedule.values), "[]", NULL, 0, 1e6, 0,
     0, CF_HASH,
     "table: the learning rate of each optimizer step, the first step's first (MindSpore's list or "
     "1-D Tensor learning_rate); at least as many as the run has steps"},
    /* ---- parallel ---- */
    {"parallel.mode", CT_ENUM, FLD(parallel.mode), "stand_alone", parallel_names, 0, 0, 0, 0, 0,
     "how work is split across devices (MindSpore's names); the trainer runs stand_alone and "
     "data_parallel, semi_auto_parallel and hybrid_parallel (C API models)"},
    {"parallel.gradients_mean", CT_BOOL, FLD(parallel.gradients_mean), "true", NULL, 0, 0, 0, 0, 0,
     "data_parallel: average gradients over ranks (false: sum)"},
    {"parallel.bucket_size_mb", CT_FLOAT, FLD(parallel.bucket_size_mb), "4", NULL, 0, 1024, 0, 0,
     CF_LO_OPEN, "data_parallel: gradient bucket size in MiB (MindSpore's comm_fusion)"},
    {"parallel.all_reduce_fusion_config", CT_ILIST, FLD(parallel.all_reduce_fusion_config), "[]", NULL, 1, I31, 0,
     0, 0,
     "MindSpore's all_reduce_fusion_config: increasing split points, indices into the trainable "
     "parameters (gradients) in registration order, e.g. [20, 35] = buckets [0,20), [20,35), [35,end); "
     "when set, bucket_size_mb is not used; [] = buckets by size"},
    {"parallel.device_num", CT_INT, FLD(parallel.device_num), "0", NULL, 0, 1 << 20, 0, 0, 0,
     "MindSpore's device_num: the number of ranks the job must have (checked against the world size "
     "of mpirun / tessera launch, and -n of tessera plan when -n is not given); 0 = whatever the job has"},
    {"parallel.comm_dtype", CT_ENUM, FLD(parallel.comm_dtype), "f32", comm_dtype_names, 0, 0, 0, 0,
     0, "data_parallel: dtype gradients travel in (bf16/f16 compress; sums accumulate in f32)"},
    {"parallel.allreduce", CT_ENUM, FLD(parallel.allreduce), "auto", allreduce_names, 0, 0, 0, 0, 0,
     "data_parallel on several hosts: the buckets' all-reduce flat (one over every rank) or "
     "hierarchical (inside each host, between hosts, broadcast inside; f32, after backward); flat_send: "
     "flat from a separate send buffer (f32; MPI may then run a ring or Rabenseifner's algorithm); auto: "
     "the faster by the cost model of parallel.cluster's links, per bucket size (flat on one host)"},
    {"parallel.comm_backend", CT_ENUM, FLD(parallel.comm_backend), "auto", comm_backend_names, 0, 0, 0, 0, 0,
     "device_target GPU with several ranks: what carries the collectives on device buffers: nccl "
     "(NCCL, every rank on a GPU of its own), mpi (MPI staged through pinned host memory: ranks "
     "sharing a GPU), auto (NCCL where every rank has its own GPU and NCCL loads, else mpi); the "
     "choice is printed at the start (docs/gpu.md)"},
    {"parallel.reduce_scatter", CT_ENUM, FLD(parallel.reduce_scatter), "auto", reduce_scatter_names, 0, 0, 0, 0, 0,
     "optimizer_shard's bucket reduce-scatters: mpi (MPI's non-blocking reduce-scatter: OpenMPI's is a "
     "binomial reduce of the whole bucket to one rank and a scatter from it) or ring (point-to-point "
     "messages around the ranks: each sends (N-1)/N of the bucket once; the updated parameters' "
     "all-gather then a ring too); auto: across hosts the one parallel.cluster measured faster (tessera "
     "calibrate), else ring; mpi on one host"},
    {"parallel.overlap", CT_BOOL, FLD(parallel.overlap), "true", NULL, 0, 0, 0, 0, 0,
     "data_parallel: all-reduce each bucket as soon as its gradients are ready, during backward"},
    {"parallel.parameter_broadcast", CT_BOOL, FLD(parallel.parameter_broadcast), "false", NULL, 0, 0,
     0, 0, 0, "broadcast parameters from rank 0 at start (for weights loaded on one rank)"},
    {"parallel.sync_batchnorm", CT_BOOL, FLD(parallel.sync_batchnorm), "false", NULL, 0, 0, 0, 0, 0,
     "BatchNorm training statistics over the global batch of all ranks (SyncBatchNorm)"},
    {"parallel.comm_timeout", CT_FLOAT, FLD(parallel.comm_timeout), "300", NULL, 0, 1e7, 0, 0, 0,
     "seconds a collective may wait before the job fails naming the rank and collective; 0 = no "
     "limit"},
    {"parallel.debug_check", CT_BOOL, FLD(parallel.debug_check), "false", NULL, 0, 0, 0, 0, 0,
     "check that all ranks issue the same collectives in the same order (slower)"},
    {"parallel.strategies", CT_STRATS, FLD(parallel.strategies), "{}", NULL, 0, 0, 0,
     0, 0,
     "semi_auto_parallel: operator name (scopes joined by '.', then the op: "
     "\"transformer.h.0.mlp.c_fc.dense\"; '*' matches one name part; `tessera plan` lists them) -> "
     "its shard strategy as MindSpore writes it, \"((1,1,1),(4,1))\"; operators without one follow "
     "their input's cuts or run data parallel"},
    {"parallel.strategy_ckpt_load_file", CT_STR, FLD(parallel.strategy_ckpt_load_file), "", NULL,
     0, 0, 0, 0, 0,
     "semi_auto_parallel: strategy file (JSON, as saved) whose strategies are used; entries of "
     "parallel.strategies override it"},
    {"parallel.strategy_ckpt_save_file", CT_STR, FLD(parallel.strategy_ckpt_save_file), "", NULL,
     0, 0, 0, 0, 0, "semi_auto_parallel: save the strategies and parameter layouts in force here"},
    {"parallel.full_batch", CT_BOOL, FLD(parallel.full_batch), "false", NULL, 0, 0, 0, 0, 0,
     "semi_auto_parallel/hybrid_parallel: every rank reads the whole global batch (false: the "
     "batch is cut as the first operator's strategy cuts it, else over all ranks)"},
    {"parallel.sequence_parallel", CT_BOOL, FLD(parallel.sequence_parallel), "false", NULL, 0, 0, 0, 0, 0,
     "semi_auto_parallel/auto_parallel with tensor parallelism: Megatron's sequence parallelism: "
     "the partial sums of a row-parallel dense or a vocabulary-parallel embedding over a "
     "(batch, sequence, hidden) activation are reduce-scattered onto the sequence instead of "
     "all-reduced, so the norms, residual adds and dropouts between tensor-parallel blocks run "
     "on 1/t of the sequence, and the column-parallel inputs are all-gathered along it"},
    {"parallel.context_parallel", CT_INT, FLD(parallel.context_parallel), "0", NULL, 0, 4096, 0, 0, 0,
     "the zoo's GPT with its sequence cut this many ways (the operators on their slice of the "
     "sequence; attention as parallel.context_parallel_algo says): semi_auto_parallel without "
     "parallel.strategies: data parallel over ranks / N x context parallel N; auto_parallel: every "
     "plan takes it beside its tensor and pipeline degrees (Megatron's cuts); 1 = none; 0 = "
     "auto_parallel's search chooses (none elsewhere)"},
    {"parallel.context_parallel_algo", CT_ENUM, FLD(parallel.context_parallel_algo), "auto", cp_algo_names, 0, 0, 0,
     0, 0,
     "how attention runs over context parallelism's sequence cut: ulysses (DeepSpeed-Ulysses: "
     "all-to-alls from the sequence cut to the heads' and back, attention cut by heads; the heads "
     "must divide context x tensor parallel) or ring (ring attention: each rank keeps its rows, "
     "the key/value blocks pass around the ranks, each exchange overlapped with a block's "
     "attention; any head count) or auto (ulysses where the heads divide, else ring; "
     "auto_parallel's search prices both)"},
    {"parallel.optimizer_shard", CT_ENUM, FLD(parallel.optimizer_shard), "off", shard_names, 0, 0, 0, 0,
     0, "data_parallel: optimizer-state sharding (MindSpore's enable_parallel_optimizer, ZeRO): 1 = "
     "gradients reduce-scattered, each rank keeps the optimizer state of 1/N of the parameters and "
     "updates them, then the parameters are all-gathered; 2 = also, with gradient accumulation, each "
     "micro-step's gradients reduce-scattered and only the rank's shard accumulated; 3 = also the "
     "parameters sharded: each rank keeps 1/N of them, and each layer's are all-gathered before its "
     "forward and again before its backward (ZeRO-3)"},
    {"parallel.optimizer_shard_threshold_kb", CT_FLOAT, FLD(parallel.optimizer_shard_threshold_kb),
     "64", NULL, 0, 1e12, 0, 0, 0,
     "optimizer_shard: parameters smaller than this (KiB of f32) stay replicated: all-reduced and "
     "updated by every rank"},
    {"parallel.optimizer_shard_weights", CT_ENUM, FLD(parallel.optimizer_shard_weights), "auto", shard_weights_names, 0,
     0, 0, 0, 0,
     "optimizer_shard 1 and 2 under train.amp_level O2/O3 (DeepSpeed's mixed-precision ZeRO): low keeps the "
     "working weights and gradients in train.amp_dtype only (2 + 2 bytes a parameter, no f32 copy of either) and "
     "shards the f32 master weights with the optimizer state (12/N with Adam); f32 keeps f32 parameters and "
     "gradients cast per use; auto: low where it applies (data_parallel, one micro-step per update, not LAMB, no "
     "optimizer_shard_group, the CPU), else f32"},
    {"parallel.optimizer_shard_group", CT_INT, FLD(parallel.optimizer_shard_group), "0", NULL, 0, 1048576, 0, 0, 0,
     "optimizer_shard: hybrid sharding (FSDP's HYBRID_SHARD, MindSpore's optimizer_weight_shard_size): "
     "the N ranks holding the same parameters are cut into N/G shard groups of G consecutive ranks; "
     "the optimizer state (stage 3: the parameters) is sharded over the G ranks of a group and "
     "replicated across groups, whose reduced parts are all-reduced; G must divide N; 0 = the whole "
     "data-parallel group, 1 = no sharding"},
    {"parallel.cluster", CT_STR, FLD(parallel.cluster), "local", NULL, 0, 0, 0, 0, 0,
     "auto_parallel: the cluster the plan is searched for (a YAML file, or dgx-a100-80g, dgx-h100, dgx-h200, p3.16xlarge, "
     "local = this machine as `tessera calibrate` measured it; docs/auto-parallel.md)"},
    {"parallel.search_mode", CT_ENUM, FLD(parallel.search_mode), "dynamic_programming", search_names, 0, 0, 0, 0, 0,
     "auto_parallel: how the per-operator strategies of a tensor-parallel plan are searched (MindSpore's "
     "names): dynamic_programming (the cost graph's exact optimum by elimination), sharding_propagation "
     "(from the operators in parallel.strategies to their neighbours), recursive_programming (fast "
     "symbolic cuts); docs/auto-parallel.md"},
    {"parallel.search_time_budget", CT_FLOAT, FLD(parallel.search_time_budget), "0", NULL, 0, 1e7, 0, 0, 0,
     "auto_parallel and `tessera plan --search`: seconds the plan search may take; when they are spent "
     "the best plan priced so far is taken and the search says so (the plans not built yet are listed "
     "as such); 0 = no limit. The search logs its progress every few seconds once it has run 3 s"},
    {"parallel.auto_tp", CT_INT, FLD(parallel.auto_tp), "0", NULL, 0, 1048576, 0, 0, 0,
     "auto_parallel: 0 = the outer search picks the data, tensor and pipeline degrees; T > 0 = the plan is "
     "data parallel N/(T P) x tensor parallel T x parallel.pipeline_stages P with the operator strategies "
     "from parallel.search_mode (T = N: MindSpore's auto_parallel, the per-operator search decides every "
     "cut, the batch's too); T P must divide N"},
    {"parallel.pipeline_stages", CT_INT, FLD(parallel.pipeline_stages), "1", NULL, 1, 4096, 0, 0, 0,
     "pipeline parallel (MindSpore's pipeline_stages): the model is cut into this many stages, one "
     "per group of ranks (ranks / stages of them, data parallel inside a stage); 1 = no pipeline"},
    {"parallel.micro_batches", CT_INT, FLD(parallel.micro_batches), "0", NULL, 0, 1 << 20, 0, 0, 0,
     "pipeline: micro-batches each step's batch is cut into (MindSpore's micro_size); 0 = "
     "train.batch_size / train.micro_batch_size"},
    {"parallel.pipeline_schedule", CT_ENUM, FLD(parallel.pipeline_schedule), "1f1b", schedule_names, 0, 0,
     0, 0, 0,
     "pipeline: gpipe (all forwards, then all backwards: M micro-batches of activations held), 1f1b "
     "(one forward one backward after a warm-up: at most `stages` held), interleaved_1f1b (each rank "
     "holds parallel.virtual_stages pieces; the bubble shrinks by that factor)"},
    {"parallel.virtual_stages", CT_INT, FLD(parallel.virtual_stages), "1", NULL, 1, 64, 0, 0, 0,
     "interleaved_1f1b: model pieces per rank (Megatron's virtual pipeline size)"},
    {"parallel.stages", CT_STAGES, FLD(parallel.stages), "{}", NULL, 0, 0, 0, 0, 0,
     "pipeline: operator name pattern (as parallel.strategies names operators: "
     "\"transformer.h.0\" covers that block) -> stage number; unnamed operators follow their inputs. "
     "{} = balanced automatically by cost, cut between blocks"},
    {"parallel.enable_parallel_optimizer", CT_BOOL, FLD(parallel.enable_parallel_optimizer), "false", NULL, 0,
     0, 0, 0, 0,
     "MindSpore's name for optimizer_shard: true = optimizer_shard 1 (or the stage optimizer_shard "
     "gives), false = off; given with an optimizer_shard that disagrees (false with 1 or 2, true "
     "with off) it is an error naming both"},
    /* ---- checkpoint ---- */
    {"checkpoint.dir", CT_STR, FLD(checkpoint.dir), "\"\"", NULL, 0, 0, 0, 0, 0,
     "directory of the checkpoints (created if missing); empty = no checkpoints"},
    {"checkpoint.prefix", CT_STR, FLD(checkpoint.prefix), "ckpt", NULL, 0, 0, 0, 0, 0,
     "file names are <dir>/<prefix>-<step, 8 digits>.safetensors (whole) or the folder "
     "<dir>/<prefix>-<step, 8 digits>/ (sliced)"},
    {"checkpoint.format", CT_ENUM, FLD(checkpoint.format), "auto", ckpt_format_names, 0, 0, 0, 0, 0,
     "whole = one file of the whole model, gathered to rank 0 and written by it; sliced = a folder "
     "with one file per writing rank (its own slices, optimizer shards and pipeline stage; a "
     "replicated piece written once) and a manifest written last; auto = sliced when some "
     "parameter is held as slices, the optimizer state is sharded (parallel.optimizer_shard) or "
     "the model is cut into pipeline stages, else whole (docs/checkpoints.md). Either loads into "
     "any layout"},
    {"checkpoint.async", CT_BOOL, FLD(checkpoint.async), "false", NULL, 0, 0, 0, 0, 0,
     "true = a save copies the step's state (each rank's pieces; the gathered whole model on rank 0 "
     "for format whole) to host memory and a background thread writes it (hashes, fsync, rename, "
     "the manifest last) while training goes on; the next save and the end of training wait for "
     "it, and a failed background write is an error there naming the file (docs/checkpoints.md)"},
    {"checkpoint.save_steps", CT_I64, FLD(checkpoint.save_steps), "0", NULL, 0, BIG, 0, 0, 0,
     "> 0: save every N optimizer steps"},
    {"checkpoint.save_epochs", CT_INT, FLD(checkpoint.save_epochs), "1", NULL, 0, 1e9, 0, 0, 0,
     "> 0: save every N epochs (when save_steps is 0)"},
    {"checkpoint.save_last", CT_BOOL, FLD(checkpoint.save_last), "true", NULL, 0, 0, 0, 0, 0,
     "also save at the end of training"},
    {"checkpoint.keep_max", CT_INT, FLD(checkpoint.keep_max), "5", NULL, 0, 1e9, 0, 0, 0,
     "keep only the newest N checkpoints in dir (0 = keep all)"},
    {"checkpoint.resume", CT_STR, FLD(checkpoint.resume), "\"\"", NULL, 0, 0, 0, 0, 0,
     "empty = start fresh; auto = the newest checkpoint in dir if any (a whole file, or a sliced "
     "folder with its manifest); else a checkpoint path (a file or a sliced folder)"},
    {"checkpoint.strict", CT_BOOL, FLD(checkpoint.strict), "true", NULL, 0, 0, 0, 0, 0,
     "resume only from a checkpoint of the same model and config hash with identical tensors"},
    /* ---- log ---- */
    {"log.metrics", CT_STR, FLD(log.metrics), "\"\"", NULL, 0, 0, 0, 0, 0,
     "JSON-lines metrics file (one record per logged step and eval, then an end record); empty "
     "= none"},
    {"log.progress", CT_ENUM, FLD(log.progress), "auto", progress_names, 0, 0, 0, 0, 0,
     "progress display: auto = a bar on a terminal, lines otherwise"},
    {"log.plot", CT_STR, FLD(log.plot), "\"\"", NULL, 0, 0, 0, 0, 0,
     "PNG of the loss and accuracy curves written at the end; empty = none"},
    {"log.plot_size", CT_STR, FLD(log.plot_size), "\"\"", NULL, 0, 0, 0, 0, 0,
     "size of log.plot's PNG, WIDTHxHEIGHT in pixels (e.g. 1600x600); empty = 1000x420"},
    {"log.level", CT_ENUM, FLD(log.level), "info", level_names, 0, 0, 0, 0, 0,
     "least severe library log message shown"},
    {"log.profile", CT_ENUM, FLD(log.profile), "off", profile_names, 0, 0, 0, 0, 0,
     "profiler (docs/profiling.md): summary = step breakdown, per-op tables and ranks at the end "
     "(printed and in log.metrics); trace = the same plus a Chrome/Perfetto trace in log.trace"},
    {"log.trace", CT_STR, FLD(log.trace), "\"\"", NULL, 0, 0, 0, 0, 0,
     "trace file of log.profile: trace; empty = <checkpoint.dir>/trace.json, or ./trace.json "
     "without checkpoint.dir"},
    {"log.profile_start", CT_I64, FLD(log.profile_start), "1", NULL, 1, BIG, 0, 0, 0,
     "first profiled step (earlier steps run unrecorded: warm-up)"},
    {"log.tensorboard", CT_STR, FLD(log.tensorboard), "\"\"", NULL, 0, 0, 0, 0, 0,
     "folder for TensorBoard event files (scalars: train/loss, lr, grad_norm, samples_per_s, "
     "eval/loss, top1, top5), written by rank 0; empty = none"},
};

const int ts__cfg_nkeys = (int)(sizeof ts__cfg_keys / sizeof ts__cfg_keys[0]);
_Static_assert(sizeof ts__cfg_keys / sizeof ts__cfg_keys[0] <= TS_CFG_MAX_KEYS, "ts_config.given has a byte per key");
