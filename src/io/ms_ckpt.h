/* Internal: MindSpore's checkpoint files (.ckpt), read and written without MindSpore.
 *
 * The format (mindspore/ccsrc/utils/checkpoint.proto, proto2):
 *   message Checkpoint { message Value { required string tag = 1; required TensorProto tensor = 2;
 *                                        optional MapTensorProto maptensor = 3; }
 *                        repeated Value value = 1; }
 *   message TensorProto { repeated int64 dims = 1; required string tensor_type = 2;
 *                         required bytes tensor_content = 3; }
 * MindSpore writes one Checkpoint message per value, one after the other (the concatenation is
 * one message with the values in order), and a tensor of more than 512 MiB as several values
 * of the same tag, each with the whole dims and a piece of the bytes. tensor_type is the dtype's
 * name ("Float32", "BFloat16", ...); "str" values (append_info strings) hold the string as
 * numpy's UTF-32LE with dims [0].
 *
 * ts_st_open reads these files (the sniff below tells them from safetensors), ts_st_write writes
 * one when the path ends in ".ckpt": to the rest of Tessera they are one more container of named
 * tensors and string metadata. */
#ifndef TS_IO_MS_CKPT_H
#define TS_IO_MS_CKPT_H

#include <stdint.h>

#include "tessera/tensor.h"

/* The largest piece of one tensor in one value (MindSpore's 1024 * SLICE_SIZE KiB). */
#define TS__MSCK_PIECE (512ull << 20)

typedef struct {
  char *name;
  ts_dtype dt;
  ts_shape shape;
  uint64_t begin, end; /* the bytes in ts__msck.data (64-byte aligned) */
  const char *from;    /* MindSpore's type name when it was converted ("Float64", "Bool", ...), else NULL */
} ts__msck_tensor;

typedef struct {
  ts__msck_tensor *t;
  int n;
  char **mkey, **mval; /* the "str" values: tag and UTF-8 string */
  int nmeta;
  unsigned char *data; /* ts_alloc'ed */
  uint64_t size;
  int skipped; /* "random_op" values (MindSpore's graph RNG state): not kept */
} ts__msck;

/* 1 when the first bytes (n: the file's size; b holds at least min(n, 16) of them) are a
 * MindSpore checkpoint rather than a safetensors file. */
int ts__msck_sniff(const unsigned char *b, uint64_t n);

/* Parses a whole file's bytes. Values of one tag that follow each other are joined; a tag seen
 * again later, unknown types, map parameters, dims that do not match the bytes are TS_EFORMAT
 * naming label and the tag. Types Tessera does not hold are converted exactly: Bool -> U8,
 * Int8/Int16/UInt16 -> I32, UInt32 -> I64, UInt64 -> I64 (values below 2^63); Float64 -> F32 (rounded).
 * dims [0] with one element's bytes is a scalar (MindSpore's form for numbers). */
int ts__msck_parse(const char *label, const unsigned char *b, uint64_t n, ts__msck *out);
void ts__msck_free(ts__msck *c);

typedef struct {
  const char *name;
  ts_dtype dt;
  ts_shape shape;
  const void *data;
  uint64_t nbytes;
} ts__msck_wtensor;

/* Writes the tensors (in this order) then the metadata as "str" values to path, atomically; a
 * tensor of more than `piece` bytes (TS__MSCK_PIECE as MindSpore; smaller in tests) goes in
 * several values. bytes / sha256_hex (may be NULL): the file's size and SHA-256. */
int ts__msck_write(const char *path, const ts__msck_wtensor *t, int n, char *const *mkey,
                   char *const *mval, int nmeta, uint64_t piece, uint64_t *bytes, char *sha256_hex);

/* 1 when path names a MindSpore checkpoint to write (ends in ".ckpt"). */
int ts__msck_path(const char *path);

#endif
