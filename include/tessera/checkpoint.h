/* Tessera checkpoints: the training state as one safetensors file (see io.h), loadable with
 * numpy / safetensors.torch.
 *
 * Tensors:   "param.<name>"  every trainable entry of the ts_params store (f32)
 *            "state.<name>"  every persistent buffer (BatchNorm running statistics; f32)
 *            "optim.<view>"  every optimizer state view (ts_optim_state_name: "step" (i64, ()),
 *                            "exp_avg.<param>", "exp_avg_sq.<param>", "momentum_buffer.<param>")
 * Metadata:  "tessera.format" = TS_CKPT_FORMAT, "tessera.version", "tessera.model",
 *            "tessera.config_hash" (16 hex digits), "tessera.config" (effective YAML),
 *            "tessera.step", "tessera.epoch", "tessera.batch_index", "tessera.seed",
 *            "tessera.rng_counter", "tessera.loss_scale", "tessera.loss_scale_growth_tracker"
 *            (decimal text; the loss scale with 17 significant digits, exact), and the CRC-32 of
 *            the data that ts_st_write adds.
 *
 *   ts_ckpt_state st = {.params = ps, .optim = opt, .step = step, .epoch = ep,
 *                       .batch_index = b, .seed = cfg.train.seed, .model = "resnet",
 *                       .config_hash = ts_config_hash(&cfg), .config_yaml = yaml};
 *   char path[1024];
 *   ts_ckpt_path(path, sizeof path, cfg.checkpoint.dir, cfg.checkpoint.prefix, step);
 *   if (ts_ckpt_save(path, &st)) ...;            // atomic; creates the directory
 *   ts_ckpt_rotate(cfg.checkpoint.dir, cfg.checkpoint.prefix, cfg.checkpoint.keep_max);
 *   ...
 *   if (ts_ckpt_latest(dir, prefix, path, sizeof path) == TS_OK)
 *     rc = ts_ckpt_load(path, &st, 1);            // st.step, st.epoch, ... are filled in
 *
 * Library code never prints: non-strict loading reports differences through ts_log (WARN). */
#ifndef TESSERA_CHECKPOINT_H
#define TESSERA_CHECKPOINT_H

#include "tessera/io.h"
#include "tessera/params.h"
#include "tessera/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TS_CKPT_FORMAT "checkpoint/1"

typedef struct {
  /* What is saved / loaded into (either may be NULL: not saved; on load, the file's tensors of
   * that kind are ignored). The params store must be allocated (ts_params_alloc). */
  ts_params *params;
  ts_optim *optim;
  /* Training position: written by save; filled by load from the file's metadata (left as they
   * are when the file is not a tessera checkpoint, e.g. an exported parameters file).
   * step = optimizer steps done; (epoch, batch_index) = where training continues. */
  int64_t step, epoch, batch_index;
  uint64_t seed, rng_counter;
  double loss_scale;
  int64_t loss_scale_growth_tracker;
  /* Identity. Save: written (NULL = not stored). Load: the expected values; a checkpoint of
   * another model (model name) or another configuration (config hash) is refused in strict mode
   * and warned about otherwise. NULL / "" / 0 (here or in the file) = not checked; a hash of 0
   * is not stored. */
  const char *model;
  uint64_t config_hash;
  const char *config_yaml; /* save only */
  /* Load report (filled by ts_ckpt_load): tensors copied, expected but absent, present but not
   * expected, present with another shape or dtype. */
  int nloaded, nmissing, nunexpected, nmismatched;
} ts_ckpt_state;

/* Writes the checkpoint atomically (temporary file, fsync, rename), creating missing parent
 * directories. TS_EINVAL if the params store is not allocated; TS_EIO naming the file. */
int ts_ckpt_save(const char *path, const ts_ckpt_state *st);

/* Reads a checkpoint into st->params / st->optim and the training position.
 * The file is validated first (ts_st_open: truncated or corrupt files, CRC mismatch ->
 * TS_EFORMAT / TS_EIO naming the file); then every expected tensor is checked by name, dtype and
 * shape against the file.
 *   strict = 1: any missing, unexpected or mismatched tensor, another model or another config
 *               hash -> TS_ECONFIG with a one-line message naming the file and the differences
 *               ("2 missing (param.fc3.weight, ...); 1 shape mismatch (param.fc1.weight: (256,784)
 *               in the file vs (512,784) in the model)"); nothing is modified.
 *   strict = 0: the tensors present in both with the same shape are loaded (a different dtype is
 *               converted); every difference is reported through ts_log(TS_LOG_WARN).
 * A plain safetensors file without tessera metadata (an export, or PyTorch's save_file) loads
 * as parameters: its names are matched without the "param." / "state." prefix.
 * Data is copied bitwise when the dtypes agree. */
int ts_ckpt_load(const char *path, ts_ckpt_state *st, int strict);

/* Summary of a checkpoint (for inspection and for choosing a config at eval time). */
typedef struct {
  int is_tessera;        /* the file has tessera.format metadata */
  char format[32];       /* tessera.format ("" if absent) */
  char version[32];      /* library version that wrote it */
  char model[64];        /* "" if absent */
  int has_config_hash;
  uint64_t config_hash;
  int64_t step, epoch, batch_index;
  uint64_t seed, rng_counter;
  double loss_scale;
  int64_t loss_scale_growth_tracker;
  char *config_yaml;     /* malloc'd copy of tessera.config, NULL if absent */
  int ntensors;
  int64_t param_numel;   /* elements of "param.*" (or of every tensor of a plain file) */
  int64_t state_numel;   /* "state.*" */
  int64_t optim_numel;   /* "optim.*" */
  uint64_t data_bytes;   /* bytes of tensor data */
} ts_ckpt_info;

/* From an open file / from a path. TS_EFORMAT if a tessera metadata value is malformed. */
int ts_ckpt_info_get(const ts_st_file *f, ts_ckpt_info *info);
int ts_ckpt_read_info(const char *path, ts_ckpt_info *info);
void ts_ckpt_info_free(ts_ckpt_info *info);

/* Writes the model tensors of checkpoint `in` ("param.*" and "state.*") to `out` under their
 * plain names ("fc1.weight", "bn1.running_mean": a PyTorch state_dict), without optimizer
 * state, with metadata {"format": "pt", "tessera.model", "tessera.step"}. Atomic. */
int ts_ckpt_export_params(const char *in, const char *out);

/* "<dir>/<prefix>-<step %08lld>.safetensors" ("<prefix>-..." if dir is empty). TS_ERANGE if it
 * does not fit. */
int ts_ckpt_path(char *buf, size_t cap, const char *dir, const char *prefix, int64_t step);
/* Deletes the checkpoints "<prefix>-<digits>.safetensors" in dir with the smallest steps beyond
 * the newest keep_max (keep_max <= 0: keeps all). Returns the number deleted, or a negative
 * status (TS_EIO naming the file). A missing dir deletes nothing. */
int ts_ckpt_rotate(const char *dir, const char *prefix, int keep_max);
/* Deletes the temporary files that killed saves of the series left in dir: only the atomic
 * writer's own naming, "<prefix>-<digits>.safetensors.tmp.<pid>.<counter>", whose writing
 * process no longer runs (or that have not changed for a day); never this process's. ts_ckpt_save
 * does it for the series of the path it writes. Returns the number deleted, or a negative status
 * (TS_EIO naming the file). A missing dir deletes nothing. */
int ts_ckpt_clean_temps(const char *dir, const char *prefix);
/* The path of the checkpoint with the largest step in dir; TS_ENOTFOUND if there is none (or no
 * dir). */
int ts_ckpt_latest(const char *dir, const char *prefix, char *buf, size_t cap);
/* The path of the checkpoint of the series with the largest step below `before` (INT64_MAX: the
 * newest, as ts_ckpt_latest), by its file name only (the file is not opened); *step (may be
 * NULL) gets that step. Walking down with before = the last step found lists the series newest
 * first (resume=auto skipping a corrupt checkpoint). TS_ENOTFOUND if there is none. */
int ts_ckpt_find(const char *dir, const char *prefix, int64_t before, char *buf, size_t cap,
                 int64_t *step);

#ifdef __cplusplus
}
#endif
#endif
