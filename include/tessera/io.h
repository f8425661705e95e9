/* Tessera I/O: safetensors files (checkpoints, fixtures).
 *
 * Format (https://github.com/huggingface/safetensors): an 8-byte little-endian header length N,
 * N bytes of UTF-8 JSON
 *   {"__metadata__": {"key": "value", ...},
 *    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
 * then the raw little-endian tensor data; offsets are relative to the start of the data section.
 * Supported dtypes: F32, BF16, F16, I32, I64, U8.
 *
 * Reading:
 * Usage (compiled by tests/tools/header_examples_test.sh):
 *   ts_st_file *f;
 *   if (ts_st_open("model.safetensors", &f)) fprintf(stderr, "%s\n", ts_last_error());
 *   ts_tensor w;
 *   ts_st_find(f, "fc1.weight", &w);        // a view into f's memory, valid until ts_st_close
 *   ts_st_close(f);
 *
 * ts_st_open validates everything before returning: the header length, the JSON, every entry's
 * dtype, shape and data_offsets (within the data section, matching shape x dtype size, not
 * overlapping, and covering the data section without holes, as the safetensors spec requires),
 * metadata values being strings, duplicate names; and, when the metadata holds
 * "tessera.crc32" (8 hex digits, zlib CRC-32 of the whole data section), the checksum.
 * Every error message names the file and, where it applies, the tensor.
 *
 * Writing:
 *   ts_st_writer *w;
 *   ts_st_writer_create(&w);
 *   ts_st_writer_add(w, "fc1.weight", TS_F32, ts_shape2(128, 784), ptr);  // not copied
 *   ts_st_writer_set_meta(w, "step", "1000");
 *   int rc = ts_st_write(w, "ckpt.safetensors");
 *   ts_st_writer_free(w);
 *
 * ts_st_write writes atomically: a temporary file in the destination's directory, fsync, then
 * rename over the destination; on any error the temporary file is removed and the destination
 * is untouched. The writer always stores "tessera.crc32". Tensors are laid out in the data
 * section largest element size first (as the reference implementation does) and the header is
 * padded with spaces to a multiple of 8 bytes, so every tensor is naturally aligned. */
#ifndef TESSERA_IO_H
#define TESSERA_IO_H

#include "tessera/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Metadata key holding the CRC-32 of the data section ("%08x"). */
#define TS_ST_CRC_KEY "tessera.crc32"
/* Chunk checksums (ts_st_writer_set_chunk): the chunk size in bytes (decimal), and the CRC-32 of
 * every chunk of the data section in order, 8 lowercase hex digits each (the last chunk may be
 * shorter). A reader of a few byte ranges checks the chunks it reads (ts_st_read_ranges). */
#define TS_ST_CHUNK_KEY "tessera.chunk_bytes"
#define TS_ST_CHUNK_CRC_KEY "tessera.chunk_crc32"

/* ---- reading ---- */
typedef struct ts_st_file ts_st_file;

/* Reads and validates a whole file. On failure *out is NULL and the status is TS_EIO (cannot
 * read), TS_EFORMAT (malformed header/offsets/CRC), TS_EDTYPE (unsupported dtype) or TS_ENOMEM.
 * A MindSpore checkpoint (.ckpt: protobuf, told apart by its first bytes) opens too, as the same
 * kind of file: its tensors (a tensor MindSpore wrote in several values joined; Bool -> U8,
 * Int8/Int16/UInt16 -> I32, UInt32/UInt64 -> I64, Float64 -> F32), its append_info strings as
 * metadata (MindSpore's random_op state is dropped); it has no checksums. */
int ts_st_open(const char *path, ts_st_file **out);
/* 1 for a MindSpore checkpoint. */
int ts_st_is_mindspore(const ts_st_file *f);
/* Reads and validates the header only (everything ts_st_open checks but the data's checksums),
 * keeping the file open: the data is then read by ranges (ts_st_read_ranges), and views
 * (ts_st_get) have data NULL. For reading a few pieces of a large file. */
int ts_st_open_header(const char *path, ts_st_file **out);
/* 1 for a file opened with ts_st_open_header. */
int ts_st_is_lazy(const ts_st_file *f);
/* A range of one tensor's bytes to read into dst. */
typedef struct {
  int entry;       /* the tensor's index */
  uint64_t offset; /* bytes from the tensor's first byte */
  uint64_t nbytes;
  void *dst;
} ts_st_range;
/* Reads the ranges (any order, overlapping or not). From a ts_st_open_header file: sorted and
 * merged into few reads (pread) of at most 64 MiB; when the file has chunk checksums every chunk
 * a read touches is read whole and checked (TS_EFORMAT naming the file, the tensor and the bytes
 * on a mismatch; nothing else is read). From a file opened whole: copies. TS_EINVAL for a range
 * outside its tensor. */
int ts_st_read_ranges(ts_st_file *f, const ts_st_range *r, int n);
/* Same, from a memory image of a whole file (copied); `label` names it in error messages. */
int ts_st_open_memory(const void *bytes, size_t size, const char *label, ts_st_file **out);
void ts_st_close(ts_st_file *f);

/* Path (or label) the file was opened from. */
const char *ts_st_path(const ts_st_file *f);
/* Number of tensors and their names, in header order (NULL if i is out of range). */
int ts_st_count(const ts_st_file *f);
const char *ts_st_name(const ts_st_file *f, int i);
/* Index of a tensor by name, or -1. */
int ts_st_index(const ts_st_file *f, const char *name);
/* View of tensor i / of a named tensor into the file's memory (owns = 0; valid until
 * ts_st_close; writable, but changes are not written back). TS_ENOTFOUND names the file. */
int ts_st_get(const ts_st_file *f, int i, ts_tensor *view);
int ts_st_find(const ts_st_file *f, const char *name, ts_tensor *view);
/* Copies a named tensor into dst converting to dtype `dt`. If `expect` is not NULL the stored
 * shape must equal it (TS_ESHAPE naming file, tensor and both shapes); otherwise dst must hold
 * the stored element count. */
int ts_st_read(const ts_st_file *f, const char *name, ts_dtype dt, const ts_shape *expect,
               void *dst);

/* Metadata value for a key (NULL if absent), and the metadata entries in header order. */
const char *ts_st_meta(const ts_st_file *f, const char *key);
int ts_st_meta_count(const ts_st_file *f);
const char *ts_st_meta_key(const ts_st_file *f, int i);

/* safetensors dtype names ("F32", "BF16", ...) <-> ts_dtype. */
const char *ts_st_dtype_name(ts_dtype dt);
int ts_st_dtype_parse(const char *name, ts_dtype *out); /* TS_EDTYPE if unknown/unsupported */

/* ---- writing ---- */
typedef struct ts_st_writer ts_st_writer;

int ts_st_writer_create(ts_st_writer **out);
void ts_st_writer_free(ts_st_writer *w);
/* Adds a tensor. `data` is NOT copied and must stay valid until ts_st_write returns. Names
 * must be unique, non-empty and not "__metadata__" (TS_EINVAL). */
int ts_st_writer_add(ts_st_writer *w, const char *name, ts_dtype dt, ts_shape shape,
                     const void *data);
/* Same, but copies the data now. */
int ts_st_writer_add_copy(ts_st_writer *w, const char *name, ts_dtype dt, ts_shape shape,
                          const void *data);
int ts_st_writer_add_tensor(ts_st_writer *w, const char *name, const ts_tensor *t);
/* Sets (or replaces) a metadata string; both copied. TS_ST_CRC_KEY is reserved. */
int ts_st_writer_set_meta(ts_st_writer *w, const char *key, const char *value);
/* Writes the file atomically (see above). The writer can be written again or freed. A path
 * ending in ".ckpt" is written in MindSpore's checkpoint format instead (readable by
 * mindspore.load_checkpoint): the tensors in the order added (one of more than 512 MiB in several
 * values, as MindSpore), then the metadata as "str" values; no checksums, chunks ignored. */
int ts_st_write(ts_st_writer *w, const char *path);
/* Makes ts_st_write store chunk checksums (TS_ST_CHUNK_KEY) of `bytes`-byte chunks (0: none, the
 * default). TS_EINVAL above 2^40. */
int ts_st_writer_set_chunk(ts_st_writer *w, uint64_t bytes);
/* ts_st_write, also giving the file's size and the SHA-256 of its bytes (64 lowercase hex digits
 * and a NUL), computed while writing. */
int ts_st_write_hashed(ts_st_writer *w, const char *path, uint64_t *bytes, char sha256_hex[65]);
/* The SHA-256 of a file's bytes (64 lowercase hex digits and a NUL) and its size (may be NULL).
 * TS_ENOTFOUND / TS_EIO naming the file. */
int ts_sha256_file(const char *path, char sha256_hex[65], uint64_t *bytes);

#ifdef __cplusplus
}
#endif
#endif
