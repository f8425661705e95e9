/* libFuzzer target for the safetensors reader (src/io/safetensors.c): the bytes are opened three
 * ways, from memory (ts_st_open_memory), as a file read whole (ts_st_open) and as a file read by
 * ranges (ts_st_open_header + ts_st_read_ranges). For every file that opens, every tensor's view,
 * name, index and data are read (ts_st_get, ts_st_index, ts_st_read converting to f32), every
 * metadata entry is looked up, and ranged reads (whole tensors, halves, a last byte, one range
 * outside its tensor that must be refused) must give the same bytes as the file read whole.
 * Invariants: a failure is a negative status with a message (never a crash, a leak or an abort),
 * the three ways agree on what they read, and names look themselves up. The header is the target:
 * data bytes mutated fail the CRC-32 the writer stores ("tessera.crc32"), so the seeds also hold
 * files without it. MindSpore checkpoints (.ckpt, protobuf: src/io/mindspore_ckpt.c) go through the
 * same calls (seeds mindspore-*). Built by tests/fuzz/run.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/io.h"

static char g_path[128];

static void check_failure(int rc) {
  if (rc >= 0 || !ts_last_error()[0]) {
    fprintf(stderr, "fuzz_safetensors: failure status %d without a message\n", rc);
    abort();
  }
}

/* Reads everything through the in-memory views; returns the checksum of the data bytes. */
static uint64_t walk(const ts_st_file *f) {
  uint64_t sum = 0;
  int n = ts_st_count(f);
  for (int i = 0; i < n; i++) {
    const char *name = ts_st_name(f, i);
    if (!name || ts_st_index(f, name) != i) abort(); /* names are unique and look themselves up */
    ts_tensor v;
    if (ts_st_get(f, i, &v) != TS_OK) abort();
    size_t nb = (size_t)ts_tensor_numel(&v) * ts_dtype_size(v.dtype);
    for (size_t k = 0; k < nb && v.data; k++) sum = sum * 31 + ((const unsigned char *)v.data)[k];
    float *dst = malloc(sizeof(float) * (size_t)ts_tensor_numel(&v) + 1);
    if (dst) {
      int rc = ts_st_read(f, name, TS_F32, &v.shape, dst);
      if (rc) check_failure(rc);
      free(dst);
    }
  }
  for (int i = 0; i < ts_st_meta_count(f); i++) {
    const char *k = ts_st_meta_key(f, i);
    if (!k || !ts_st_meta(f, k)) abort();
  }
  if (ts_st_name(f, n) || ts_st_name(f, -1)) abort();
  return sum;
}

/* The ranged reads of a lazily opened file against the whole file's views (whole may be NULL). */
static void ranges(ts_st_file *lz, const ts_st_file *whole) {
  int n = ts_st_count(lz);
  for (int i = 0; i < n; i++) {
    ts_tensor v;
    if (ts_st_get(lz, i, &v) != TS_OK || v.data) abort(); /* lazy views have no data */
    uint64_t nb = (uint64_t)ts_tensor_numel(&v) * ts_dtype_size(v.dtype);
    unsigned char *a = malloc(nb + 1), *b = malloc(nb + 1);
    if (!a || !b) {
      free(a);
      free(b);
      continue;
    }
    ts_st_range r[3] = {{i, 0, nb, a}, {i, nb / 2, nb - nb / 2, b + nb / 2}, {i, 0, nb / 2, b}};
    int rc = ts_st_read_ranges(lz, r, 3);
    if (rc) {
      check_failure(rc);
      if (whole) abort(); /* a file that checks out whole reads by ranges */
    } else if (memcmp(a, b, nb)) {
      abort(); /* overlapping ranges read the same bytes */
    }
    if (!rc && whole) {
      ts_tensor w;
      if (ts_st_find(whole, ts_st_name(lz, i), &w) != TS_OK) abort();
      if (nb && memcmp(a, w.data, nb)) abort(); /* the two readers agree */
    }
    ts_st_range out = {i, nb ? nb - 1 : 0, 2, a};
    if (ts_st_read_ranges(lz, &out, 1) != TS_EINVAL) abort(); /* outside the tensor */
    free(a);
    free(b);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_path[0])
    snprintf(g_path, sizeof g_path, "%s/ts_fuzz_st_%d.safetensors", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp",
             (int)getpid());
  ts_error_set(TS_OK, "%s", "");
  ts_st_file *m = NULL, *w = NULL, *lz = NULL;
  int rc = ts_st_open_memory(data, size, "fuzz.safetensors", &m);
  if (rc) {
    check_failure(rc);
    if (m) abort();
  }
  uint64_t sm = m ? walk(m) : 0;

  FILE *fp = fopen(g_path, "wb");
  if (!fp) abort();
  if (size && fwrite(data, 1, size, fp) != size) abort();
  fclose(fp);
  ts_error_set(TS_OK, "%s", "");
  if ((rc = ts_st_open(g_path, &w))) check_failure(rc);
  if (!m != !w) abort(); /* memory and file: the same verdict */
  if (w && walk(w) != sm) abort();
  ts_error_set(TS_OK, "%s", "");
  if ((rc = ts_st_open_header(g_path, &lz))) check_failure(rc);
  if (w && !lz) abort(); /* what opens whole opens lazily (fewer checks) */
  if (lz) {
    if (!ts_st_is_lazy(lz)) abort();
    ranges(lz, w);
  }
  ts_st_close(lz);
  ts_st_close(w);
  ts_st_close(m);
  unlink(g_path); /* libFuzzer may end the process without running atexit handlers */
  return 0;
}
