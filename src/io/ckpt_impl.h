/* Internal: what the whole and the sliced checkpoint code share (src/io/checkpoint.c,
 * ckpt_manifest.c, ckpt_sliced.c). */
#ifndef TS_IO_CKPT_IMPL_H
#define TS_IO_CKPT_IMPL_H

#include <cjson/cJSON.h>

#include "tessera/checkpoint.h"
#include "ckpt_config.h"

/* The strict refusal of a checkpoint (`where`) written by another configuration: TS_ECONFIG with
 * both hashes, each differing key with both values (ts__ckpt_set_config_diff's) and the override. */
int ts__ckpt_config_refusal(const char *where, uint64_t ckpt_hash, uint64_t now_hash, const char *ckpt_yaml,
                            const char *now_yaml);

/* One tensor of a whole checkpoint. */
typedef struct {
  const char *name;
  ts_dtype dt;
  ts_shape shape;
  const void *data;
} ts__ckpt_tensor;

/* Writes a whole checkpoint of the n tensors, in that order, with st's metadata (ts_ckpt_save's
 * file, whoever gathered the tensors). Atomic; parents created. */
int ts__ckpt_write(const char *path, const ts_ckpt_state *st, const ts__ckpt_tensor *t, int n);
/* ts_ckpt_export_params of a sliced checkpoint: the parameters and buffers read whole from the
 * rank files (merged as they are read; optimizer state never read), written as a whole export. */
int ts__ckpt_sliced_export(const char *dir, const char *out);
#include "ckpt_files.h" /* ts__ckpt_dir_own */
/* Removes a sliced checkpoint directory's own files (the manifest first) and the directory when
 * that empties it. Returns TS_OK, or TS_EIO naming what could not be removed (foreign files left
 * in it: TS_EIO naming one of them). */
int ts__ckpt_remove_dir(const char *dir);

/* The index of the tensor named name in a manifest, or -1; the file index of piece j of tensor i. */
int ts__ckpt_manifest_find(const ts_ckpt_manifest *m, const char *name);
int ts__ckpt_manifest_piece_file(const ts_ckpt_manifest *m, int i, int j);

/* A piece's place as JSON members of o: "shape" (the tensor's), "view" (the region's dims when they
 * differ), "offset" and "box" (when the box is not the whole tensor), "range" (when not the
 * whole box). */
int ts__ckpt_region_to_json(cJSON *o, const ts_shape *shape, const ts_region *r);
/* The region of such an object for a tensor of the given shape; TS_EFORMAT naming `where`. */
int ts__ckpt_region_from_json(const cJSON *o, const ts_shape *shape, ts_region *r, const char *where);
/* A JSON integer in [lo, 2^53]. */
int ts__ckpt_json_int(const cJSON *j, int64_t lo, int64_t *out);
/* A JSON array of at most TS_MAX_DIMS non-negative integers as a shape, of at most 2^53 elements
 * (and so every product of its leading sizes). */
int ts__ckpt_json_shape(const cJSON *j, ts_shape *out);

#endif
