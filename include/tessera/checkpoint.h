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
 *   ts_ckpt_state st = {.params = ps, .optim = opt, .model = "resnet",
 *                       .pos = {.step = step, .epoch = ep, .batch_index = b, .seed = cfg.train.seed},
 *                       .config_hash = ts_config_hash(&cfg), .config_yaml = yaml};
 *   char path[1024];
 *   ts_ckpt_path(path, sizeof path, cfg.checkpoint.dir, cfg.checkpoint.prefix, step);
 *   if (ts_ckpt_save(path, &st)) ...;            // atomic; creates the directory
 *   ts_ckpt_rotate(cfg.checkpoint.dir, cfg.checkpoint.prefix, cfg.checkpoint.keep_max);
 *   ...
 *   if (ts_ckpt_latest(dir, prefix, path, sizeof path) == TS_OK)
 *     rc = ts_ckpt_load(path, &st, 1);            // st.pos (step, epoch, ...) is filled in
 *
 * Library code never prints: non-strict loading reports differences through ts_log (WARN). */
#ifndef TESSERA_CHECKPOINT_H
#define TESSERA_CHECKPOINT_H

#include "tessera/io.h"
#include "tessera/params.h"
#include "tessera/optim.h"
#include "tessera/region.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TS_CKPT_FORMAT "checkpoint/1"

/* Where training stands, as a checkpoint records it (the tessera.* metadata; the same fields in
 * whole files and sliced checkpoints' manifests): step = optimizer steps done; (epoch,
 * batch_index) = where training continues; the data order's seed and the dropout stream's
 * counter; the loss scale and its growth tracker (train.loss_scale dynamic). */
typedef struct {
  int64_t step, epoch, batch_index;
  uint64_t seed, rng_counter;
  double loss_scale;
  int64_t loss_scale_growth_tracker;
} ts_ckpt_position;

typedef struct {
  /* What is saved / loaded into (either may be NULL: not saved; on load, the file's tensors of
   * that kind are ignored). The params store must be allocated (ts_params_alloc). */
  ts_params *params;
  ts_optim *optim;
  /* Training position: written by save; filled by load from the file's metadata (left as it is
   * when the file is not a tessera checkpoint, e.g. an exported parameters file). */
  ts_ckpt_position pos;
  /* Identity. Save: written (NULL = not stored). Load: the expected values; a checkpoint of
   * another model (model name) or another configuration (config hash) is refused in strict mode
   * and warned about otherwise. NULL / "" / 0 (here or in the file) = not checked; a hash of 0
   * is not stored. */
  const char *model;
  uint64_t config_hash;
  const char *config_yaml; /* save only */
  const char *version;     /* save only: the tessera.version written (NULL: ts_version(); a merge
                              keeps the version that wrote the sliced checkpoint) */
  /* Load report (filled by ts_ckpt_load): tensors copied, expected but absent, present but not
   * expected, present with another shape or dtype. */
  int nloaded, nmissing, nunexpected, nmismatched;
} ts_ckpt_state;

/* Writes the checkpoint atomically (temporary file, fsync, rename), creating missing parent
 * directories. TS_EINVAL if the params store is not allocated; TS_EIO naming the file. */
int ts_ckpt_save(const char *path, const ts_ckpt_state *st);

/* A copy of a whole checkpoint's tensors and metadata in host memory, so that a background
 * writer can write the state of one step while training changes the store (checkpoint.async).
 * take: copies every tensor st would save (ts_ckpt_save's list and order) into the snapshot's
 * buffer, which is kept and reused by the next take into the same snapshot (*io NULL: a new
 * one), and copies the metadata strings. save: writes that file as ts_ckpt_save would (the same
 * bytes); it reads only the snapshot, so it may run on another thread. bytes: the buffer's size. */
typedef struct ts_ckpt_snapshot ts_ckpt_snapshot;
int ts_ckpt_snapshot_take(const ts_ckpt_state *st, ts_ckpt_snapshot **io);
int ts_ckpt_snapshot_save(const ts_ckpt_snapshot *s, const char *path);
size_t ts_ckpt_snapshot_bytes(const ts_ckpt_snapshot *s);
void ts_ckpt_snapshot_free(ts_ckpt_snapshot *s);

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
  ts_ckpt_position pos;  /* the training position (zero if absent) */
  char *config_yaml;     /* malloc'd copy of tessera.config, NULL if absent */
  int ntensors;
  int64_t param_numel;   /* elements of "param.*" (or of every tensor of a plain file) */
  int64_t state_numel;   /* "state.*" */
  int64_t optim_numel;   /* "optim.*" */
  uint64_t data_bytes;   /* bytes of tensor data */
} ts_ckpt_info;

/* From an open file / from a path (a whole file, or a sliced checkpoint folder: its manifest).
 * TS_EFORMAT if a tessera metadata value is malformed. */
int ts_ckpt_info_get(const ts_st_file *f, ts_ckpt_info *info);
int ts_ckpt_read_info(const char *path, ts_ckpt_info *info);
void ts_ckpt_info_free(ts_ckpt_info *info);

/* Writes the model tensors of checkpoint `in` ("param.*" and "state.*") to `out` under their
 * plain names ("fc1.weight", "bn1.running_mean": a PyTorch state_dict), without optimizer
 * state, with metadata {"format": "pt", "tessera.model", "tessera.step"}. Atomic. `in` may be a
 * whole file or a sliced checkpoint's folder (each tensor read whole from its pieces: the same
 * file as the export of the merged checkpoint). */
int ts_ckpt_export_params(const char *in, const char *out);

/* "<dir>/<prefix>-<step %08lld>.safetensors" ("<prefix>-..." if dir is empty). TS_ERANGE if it
 * does not fit. */
int ts_ckpt_path(char *buf, size_t cap, const char *dir, const char *prefix, int64_t step);
/* Deletes the checkpoints "<prefix>-<digits>.safetensors" and complete sliced directories
 * "<prefix>-<digits>/" in dir with the smallest steps beyond the newest keep_max (keep_max <= 0:
 * keeps all); a directory loses its manifest first, then its files. Returns the number deleted, or
 * a negative status (TS_EIO naming the file). A missing dir deletes nothing. The checkpoint that
 * "<dir>/latest" names (ts_ckpt_write_latest) is never deleted, wherever its step falls. */
int ts_ckpt_rotate(const char *dir, const char *prefix, int keep_max);
/* Deletes the temporary files that killed saves of the series left in dir: only the atomic
 * writer's own naming, "<prefix>-<digits>.safetensors.tmp.<pid>.<counter>", and sliced saves'
 * staging directories "<prefix>-<digits>.tmp.<pid>" (and ".old.<pid>"), whose writing process no
 * longer runs (or that have not changed for a day); never this process's; and sliced directories
 * "<prefix>-<digits>/" without a manifest (a deletion cut short). Of a directory only checkpoint
 * files are removed (manifest, rank files, strategy file, their temporaries), then the directory
 * if that empties it; and the `latest` pointer's temporaries "latest.tmp.<pid>.<counter>" of a
 * writer that is gone. ts_ckpt_save does it for the series of the path it writes. Returns the
 * number deleted, or a negative status (TS_EIO naming the file). A missing dir deletes nothing. */
int ts_ckpt_clean_temps(const char *dir, const char *prefix);
/* The path of the checkpoint with the largest step in dir, a whole file or a complete sliced
 * directory (one with its manifest; at equal steps the whole file); TS_ENOTFOUND if there is none
 * (or no dir). */
int ts_ckpt_latest(const char *dir, const char *prefix, char *buf, size_t cap);
/* The `latest` pointer (as DeepSpeed writes it): the file "<dir>/latest" (TS_CKPT_LATEST), one
 * line naming the checkpoint of dir saved last ("ckpt-00000500.safetensors", "ckpt-00000500"),
 * written atomically after the checkpoint itself is complete. ts_ckpt_rotate never deletes the
 * checkpoint it names. Every function here taking a checkpoint's path (load, read_info, export,
 * is_sliced, manifest_load, verify, merge) takes "<dir>/latest" for the checkpoint it names. */
#define TS_CKPT_LATEST "latest"
/* Writes "<dir>/latest" naming `name` (an entry of dir: no '/'); atomic. TS_EIO naming the file. */
int ts_ckpt_write_latest(const char *dir, const char *name);
/* The name "<dir>/latest" holds; TS_ENOTFOUND if there is none, TS_EFORMAT if the file is not
 * a pointer (one line naming an entry of its folder). */
int ts_ckpt_read_latest(const char *dir, char *name, size_t cap);
/* buf = the checkpoint a path names: for ".../latest" holding a pointer, ".../<the name in it>"
 * (1, or TS_ENOTFOUND naming both when that does not exist); any other path as it is (0; also a
 * file called latest that is not a pointer). A negative status on failure. */
int ts_ckpt_resolve(const char *path, char *buf, size_t cap);
/* After a save of the series in dir (path: the checkpoint just written, complete): writes the
 * `latest` pointer naming it, then rotates (ts_ckpt_rotate with keep_max). Returns the number of
 * checkpoints deleted, or a negative status. */
int ts_ckpt_series_saved(const char *dir, const char *prefix, const char *path, int keep_max);
/* The path of the checkpoint of the series with the largest step below `before` (INT64_MAX: the
 * newest, as ts_ckpt_latest), by its file name only (the file is not opened); *step (may be
 * NULL) gets that step. Walking down with before = the last step found lists the series newest
 * first (resume=auto skipping a corrupt checkpoint). TS_ENOTFOUND if there is none. */
int ts_ckpt_find(const char *dir, const char *prefix, int64_t before, char *buf, size_t cap,
                 int64_t *step);

/* ---- sliced checkpoints ----
 * A sliced checkpoint is a directory "<dir>/<prefix>-<step %08>/" (ts_ckpt_dir_path) holding one
 * safetensors file per writing rank ("rank<r %05d>.safetensors") and a manifest (TS_CKPT_MANIFEST,
 * JSON) written last: a directory without a manifest is not a checkpoint. Every piece of a rank
 * file carries, in the file's header metadata ("tessera.pieces"), its tensor's name and whole shape
 * and its region (region.h): a box of a cut and/or a range of a ZeRO part. The manifest lists the
 * files (bytes, SHA-256), the training position and identity (as a whole checkpoint's metadata),
 * the layout and strategies in force, and every tensor of the whole checkpoint, in the order a
 * whole checkpoint holds them, with its pieces. docs/checkpoints.md describes both formats.
 *
 * Writing (the trainer does it collectively, src/train/trainer_ckpt.c; `tessera ckpt reshard` in
 * one process):
 *   ts_ckpt_stage_begin(final, staging)        one writer: "<final>.tmp.<pid>" made empty
 *   ts_ckpt_slice_write(staging, r, id, ...)   each rank: its pieces -> its file, a record
 *   ts_ckpt_manifest_create / _add_tensor / _add_record / _check / _write(staging)
 *   ts_ckpt_stage_commit(staging, final)       the directory renamed into place (atomically)
 * Reading: ts_ckpt_manifest_load, ts_ckpt_manifest_match, ts_ckpt_sliced_read. */
#define TS_CKPT_SLICE_FORMAT "checkpoint-slice/1"   /* tessera.format of a rank file */
#define TS_CKPT_MANIFEST_FORMAT "tessera-sliced/1" /* "format" of a manifest */
#define TS_CKPT_MANIFEST "manifest.json"
/* Bytes per checksum chunk of a rank file: a rank reading a few pieces reads and checks whole
 * chunks (TS_ST_CHUNK_KEY). */
#define TS_CKPT_CHUNK_BYTES (1u << 20)

/* "<dir>/<prefix>-<step %08lld>" ("<prefix>-..." if dir is empty). TS_ERANGE if it does not fit. */
int ts_ckpt_dir_path(char *buf, size_t cap, const char *dir, const char *prefix, int64_t step);
/* 1 if path is a directory (a sliced checkpoint, complete or not), else 0. */
int ts_ckpt_is_sliced(const char *path);

/* Makes the empty staging directory "<final>.tmp.<pid>" into buf (removing a stale one of this
 * process first), creating final's missing parents. TS_EIO naming the directory. */
int ts_ckpt_stage_begin(const char *final, char *staging, size_t cap);
/* Puts a staging directory (its manifest written) in place as `final`: a rename, or when final
 * exists an atomic exchange (renameat2) and the old directory removed; the parent fsync'ed.
 * TS_EIO naming both. */
int ts_ckpt_stage_commit(const char *staging, const char *final);
/* Removes a staging directory and the checkpoint files in it (nothing else; failures ignored). */
void ts_ckpt_stage_abort(const char *staging);

/* Writes one rank's file "rank<rank %05d>.safetensors" into dir (atomic, chunk checksums of
 * TS_CKPT_CHUNK_BYTES) holding the n pieces (their data read now), tagged with the checkpoint's
 * id and step, and returns in *record (malloc'd JSON text) what the manifest needs: the file's
 * name, size and SHA-256 and every piece's tensor, entry and region. n = 0 writes no file (the
 * record says so). Errors name the file and the piece. */
int ts_ckpt_slice_write(const char *dir, int rank, const char *id, int64_t step, const ts_piece *pieces, int n,
                        char **record);
/* The record of a rank whose write failed (its message), for the manifest's writer to report. */
int ts_ckpt_error_record(int rank, const char *message, char **record);

typedef struct ts_ckpt_manifest ts_ckpt_manifest;
/* A manifest to fill: identity and position from st (model, config_hash, config_yaml, version,
 * step, epoch, batch_index, seed, rng_counter, loss_scale and tracker), the checkpoint's id and the
 * job's ranks. */
int ts_ckpt_manifest_create(const ts_ckpt_state *st, const char *id, int world_size, ts_ckpt_manifest **out);
/* The layout in force, a JSON object's text (mode, stages, optimizer shard...; shown by inspect). */
int ts_ckpt_manifest_set_layout(ts_ckpt_manifest *m, const char *json);
/* A tensor of the whole checkpoint, in the whole checkpoint's order. TS_EINVAL for a duplicate. */
int ts_ckpt_manifest_add_tensor(ts_ckpt_manifest *m, const char *name, ts_dtype dt, const ts_shape *shape);
/* A rank's record (ts_ckpt_slice_write): its file and pieces. A record of a failed write gives
 * TS_EIO "rank R: <its message>"; a piece of a tensor not added, or another dtype or shape, TS_EINVAL. */
int ts_ckpt_manifest_add_record(ts_ckpt_manifest *m, const char *record);
/* Another file of the directory (the strategy file), its size and SHA-256 taken from dir/name. */
int ts_ckpt_manifest_add_file(ts_ckpt_manifest *m, const char *dir, const char *name);
/* Every tensor's pieces cover it exactly once (TS_EINVAL naming the tensor and what is missing or
 * held twice). */
int ts_ckpt_manifest_check(const ts_ckpt_manifest *m);
/* Writes dir/TS_CKPT_MANIFEST atomically. */
int ts_ckpt_manifest_write(const ts_ckpt_manifest *m, const char *dir);
/* Reads and validates dir/TS_CKPT_MANIFEST (structure, types, regions, files). A directory
 * without one: TS_ENOTFOUND "DIR: no manifest.json: not a complete checkpoint". */
int ts_ckpt_manifest_load(const char *dir, ts_ckpt_manifest **out);
void ts_ckpt_manifest_free(ts_ckpt_manifest *m);
/* The directory it was loaded from ("" when built), its id, its layout's JSON text ("{}" if none). */
const char *ts_ckpt_manifest_dir(const ts_ckpt_manifest *m);
const char *ts_ckpt_manifest_id(const ts_ckpt_manifest *m);
const char *ts_ckpt_manifest_layout(const ts_ckpt_manifest *m);
int ts_ckpt_manifest_world_size(const ts_ckpt_manifest *m);
/* Identity, position and sizes as a whole checkpoint's (ts_ckpt_info_free it). */
int ts_ckpt_manifest_info(const ts_ckpt_manifest *m, ts_ckpt_info *info);
/* Files: name, writing rank (-1 for other files), bytes, SHA-256. */
int ts_ckpt_manifest_num_files(const ts_ckpt_manifest *m);
int ts_ckpt_manifest_file(const ts_ckpt_manifest *m, int i, const char **name, int *rank, uint64_t *bytes,
                          const char **sha256);
/* Tensors in the whole checkpoint's order, and their pieces. */
int ts_ckpt_manifest_num_tensors(const ts_ckpt_manifest *m);
int ts_ckpt_manifest_tensor(const ts_ckpt_manifest *m, int i, const char **name, ts_dtype *dt, ts_shape *shape,
                            int *npieces);
int ts_ckpt_manifest_piece(const ts_ckpt_manifest *m, int i, int j, const char **file, const char **entry,
                           ts_region *region);

/* Compares a checkpoint with what the job expects, as ts_ckpt_load does: identity (expect->model,
 * expect->config_hash; 0 / NULL not checked) and the whole model's tensors (names, dtypes,
 * shapes; region and data ignored). with_optimizer = 0: the manifest's "optim.*" tensors are
 * neither expected nor unexpected. strict: any difference -> TS_ECONFIG naming the directory and
 * the differences; else each is logged (WARN) and TS_OK. */
int ts_ckpt_manifest_match(const ts_ckpt_manifest *m, const ts_ckpt_state *expect, const ts_piece *tensors, int n,
                           int with_optimizer, int strict);
/* Fills each wanted piece's data (its region of its tensor) from the checkpoint, reading from
 * each rank file only the checksum chunks holding the bytes it needs (ts_st_read_ranges). A wanted
 * piece whose tensor is absent or of another dtype or shape is an error (strict) or skipped
 * (non-strict; ts_ckpt_manifest_match reports it). Refused, naming the file: a missing or
 * unreadable file, one of another size or checkpoint, a header whose pieces differ from the
 * manifest's, a failed checksum; naming the tensor: pieces that do not hold all of the wanted
 * region. */
int ts_ckpt_sliced_read(const ts_ckpt_manifest *m, ts_piece *want, int n, int strict);
/* The whole checkpoint of sliced checkpoint dir written to out (atomic): the file the same run
 * writes with checkpoint.format whole at that step, byte for byte, when config_yaml is that run's
 * config text (NULL: the manifest's). The whole model is read into memory. */
int ts_ckpt_merge(const char *dir, const char *out, const char *config_yaml);
/* Checks a checkpoint: a whole file (ts_st_open: header, checksums) or a sliced directory (the
 * manifest, every file's size and SHA-256, every rank file's header, checksums and pieces against
 * the manifest, every tensor covered exactly once). One line into summary (may be NULL) on
 * success; the first problem found as the error, naming the file. */
int ts_ckpt_verify(const char *path, char *summary, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
