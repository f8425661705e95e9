/* safetensors reader/writer: round trips of every dtype, atomic writes, malformed files (each
 * error must name the file and, where it applies, the tensor), a file written by the
 * PyTorch-side fixture script, and ranged reads: chunk checksums (every chunk size from 1 byte to
 * past the data, random ranges against the whole file, a flipped byte refused only by the reads
 * that touch its chunk, naming the file and the tensor), SHA-256 of written files (the known
 * digest of "abc"; the hash given while writing = the file's). */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tessera/io.h"
#include "test_util.h"

#ifndef TS_FIXTURE_DIR
#define TS_FIXTURE_DIR "tests/fixtures"
#endif

static char g_dir[256];

static const char *tpath(const char *name) {
  static char buf[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
  return buf[k];
}

static int has(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* Writes a file from a header JSON text and raw data bytes. */
static void write_raw(const char *path, const char *hdr, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  uint64_t len = strlen(hdr);
  unsigned char pre[8];
  for (int i = 0; i < 8; i++) pre[i] = (unsigned char)(len >> (8 * i));
  fwrite(pre, 1, 8, f);
  fwrite(hdr, 1, len, f);
  if (n) fwrite(data, 1, n, f);
  fclose(f);
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc(*n + 1);
  if (fread(b, 1, *n, f) != *n) *n = 0;
  fclose(f);
  return b;
}

static void spit(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(b, 1, n, f);
  fclose(f);
}

/* Number of directory entries whose name contains ".tmp." (left-over temporaries). */
static int count_tmp(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strstr(e->d_name, ".tmp.")) n++;
  if (d) closedir(d);
  return n;
}

/* Expects ts_st_open to fail with `code` and a message naming the file and `what`. */
static void expect_fail(const char *path, int code, const char *what, const char *what2) {
  ts_st_file *f = (ts_st_file *)1;
  int rc = ts_st_open(path, &f);
  CHECK_MSG(rc == code, "%s: got %d (%s), want %d: %s", path, rc, ts_strerror(rc), code,
            ts_last_error());
  CHECK(f == NULL);
  CHECK_MSG(has(ts_last_error(), path), "message does not name the file: %s", ts_last_error());
  if (what) CHECK_MSG(has(ts_last_error(), what), "message lacks '%s': %s", what, ts_last_error());
  if (what2)
    CHECK_MSG(has(ts_last_error(), what2), "message lacks '%s': %s", what2, ts_last_error());
  if (rc == TS_OK) ts_st_close(f);
}

static void test_round_trip(void) {
  float f32[6] = {-1.5f, 0.f, 1.f, 3.25f, -0.0f, 1e-30f};
  uint16_t bf16[5], f16[5];
  for (int i = 0; i < 5; i++) {
    bf16[i] = ts_f32_to_bf16(f32[i] * 2);
    f16[i] = ts_f32_to_f16(f32[i] * 3);
  }
  int32_t i32[4] = {INT32_MIN, -1, 0, INT32_MAX};
  int64_t i64[3] = {INT64_MIN, 42, INT64_MAX};
  uint8_t u8[7] = {0, 1, 2, 127, 128, 254, 255};
  float scalar = 7.5f;
  ts_st_writer *w;
  CHECK_OK(ts_st_writer_create(&w));
  /* u8 first, so that the layout (largest element first) differs from insertion order */
  CHECK_OK(ts_st_writer_add(w, "u8", TS_U8, ts_shape1(7), u8));
  CHECK_OK(ts_st_writer_add(w, "layer.0/f32", TS_F32, ts_shape2(2, 3), f32));
  CHECK_OK(ts_st_writer_add(w, "bf16", TS_BF16, ts_shape1(5), bf16));
  CHECK_OK(ts_st_writer_add_copy(w, "f16", TS_F16, ts_shape1(5), f16));
  CHECK_OK(ts_st_writer_add(w, "i32", TS_I32, ts_shape4(1, 2, 1, 2), i32));
  CHECK_OK(ts_st_writer_add(w, "i64", TS_I64, ts_shape1(3), i64));
  CHECK_OK(ts_st_writer_add(w, "scalar", TS_F32, ts_shape_make(0, NULL), &scalar));
  CHECK_OK(ts_st_writer_add(w, "empty", TS_F32, ts_shape2(0, 3), NULL));
  CHECK_OK(ts_st_writer_set_meta(w, "step", "12"));
  CHECK_OK(ts_st_writer_set_meta(w, "note", "quotes \" and \\ and \xc3\xa9"));
  CHECK_OK(ts_st_writer_set_meta(w, "step", "13")); /* replaces */
  CHECK(ts_st_writer_add(w, "i64", TS_I64, ts_shape1(3), i64) == TS_EINVAL);
  CHECK(ts_st_writer_add(w, "__metadata__", TS_I64, ts_shape1(3), i64) == TS_EINVAL);
  CHECK(ts_st_writer_add(w, "", TS_I64, ts_shape1(3), i64) == TS_EINVAL);
  CHECK(ts_st_writer_add(w, "x", TS_F32, ts_shape1(3), NULL) == TS_EINVAL);
  CHECK(ts_st_writer_add(w, "x", (ts_dtype)99, ts_shape1(3), f32) == TS_EDTYPE);
  CHECK(ts_st_writer_set_meta(w, TS_ST_CRC_KEY, "0") == TS_EINVAL);
  memset(f16, 0, sizeof f16); /* the copy must be unaffected */
  for (int i = 0; i < 5; i++) f16[i] = ts_f32_to_f16(f32[i] * 3);
  const char *p = tpath("rt.safetensors");
  CHECK_OK(ts_st_write(w, p));
  CHECK_OK(ts_st_write(w, p)); /* overwrite in place */
  ts_st_writer_free(w);
  CHECK(count_tmp(g_dir) == 0);

  size_t n;
  unsigned char *raw = slurp(p, &n);
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = (hl << 8) | raw[i];
  CHECK(hl % 8 == 0);
  CHECK(raw[8] == '{');
  free(raw);

  ts_st_file *f;
  CHECK_OK(ts_st_open(p, &f));
  if (!f) return;
  CHECK(ts_st_count(f) == 8);
  const char *order[8] = {"u8", "layer.0/f32", "bf16", "f16", "i32", "i64", "scalar", "empty"};
  for (int i = 0; i < 8 && i < ts_st_count(f); i++)
    CHECK_MSG(strcmp(ts_st_name(f, i), order[i]) == 0, "name %d: %s", i, ts_st_name(f, i));
  CHECK(ts_st_name(f, 8) == NULL);
  CHECK(strcmp(ts_st_meta(f, "step"), "13") == 0);
  CHECK(strcmp(ts_st_meta(f, "note"), "quotes \" and \\ and \xc3\xa9") == 0);
  CHECK(ts_st_meta(f, TS_ST_CRC_KEY) != NULL && strlen(ts_st_meta(f, TS_ST_CRC_KEY)) == 8);
  CHECK(ts_st_meta(f, "nope") == NULL);
  CHECK(ts_st_meta_count(f) == 3);
  struct {
    const char *name;
    ts_dtype dt;
    const void *data;
    size_t nb;
    int ndim;
  } want[] = {{"u8", TS_U8, u8, sizeof u8, 1},        {"layer.0/f32", TS_F32, f32, sizeof f32, 2},
              {"bf16", TS_BF16, bf16, sizeof bf16, 1}, {"f16", TS_F16, f16, sizeof f16, 1},
              {"i32", TS_I32, i32, sizeof i32, 4},     {"i64", TS_I64, i64, sizeof i64, 1},
              {"scalar", TS_F32, &scalar, 4, 0},       {"empty", TS_F32, NULL, 0, 2}};
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
    ts_tensor t;
    CHECK_OK(ts_st_find(f, want[k].name, &t));
    CHECK_MSG(t.dtype == want[k].dt, "%s dtype", want[k].name);
    CHECK_MSG(t.shape.ndim == want[k].ndim, "%s ndim %d", want[k].name, t.shape.ndim);
    CHECK_MSG(ts_tensor_nbytes(&t) == want[k].nb, "%s nbytes", want[k].name);
    CHECK_MSG(((uintptr_t)t.data % ts_dtype_size(t.dtype)) == 0, "%s misaligned", want[k].name);
    CHECK(t.owns == 0);
    if (want[k].nb) CHECK_MSG(memcmp(t.data, want[k].data, want[k].nb) == 0, "%s data", want[k].name);
  }
  ts_tensor t;
  CHECK(ts_st_find(f, "missing", &t) == TS_ENOTFOUND);
  CHECK(has(ts_last_error(), p) && has(ts_last_error(), "missing"));
  /* conversion and shape checking */
  float conv[5];
  CHECK_OK(ts_st_read(f, "bf16", TS_F32, NULL, conv));
  for (int i = 0; i < 5; i++) CHECK(conv[i] == ts_bf16_to_f32(bf16[i]));
  ts_shape bad = ts_shape1(4), good = ts_shape1(5);
  CHECK(ts_st_read(f, "bf16", TS_F32, &bad, conv) == TS_ESHAPE);
  CHECK(has(ts_last_error(), "bf16") && has(ts_last_error(), "(5)") && has(ts_last_error(), "(4)"));
  CHECK_OK(ts_st_read(f, "bf16", TS_F32, &good, conv));
  ts_st_close(f);

  /* the same bytes through the memory reader */
  raw = slurp(p, &n);
  CHECK_OK(ts_st_open_memory(raw, n, "mem", &f));
  if (f) {
    CHECK(ts_st_count(f) == 8 && strcmp(ts_st_path(f), "mem") == 0);
    ts_st_close(f);
  }
  free(raw);
}

static void test_atomic(void) {
  float x[4] = {1, 2, 3, 4};
  ts_st_writer *w;
  CHECK_OK(ts_st_writer_create(&w));
  CHECK_OK(ts_st_writer_add(w, "x", TS_F32, ts_shape1(4), x));
  /* a directory that does not exist: error names the path; nothing created */
  const char *p = tpath("no/such/dir/a.safetensors");
  int rc = ts_st_write(w, p);
  CHECK(rc == TS_EIO);
  CHECK(has(ts_last_error(), p));
  /* destination is a directory: rename fails, the temporary file is removed */
  const char *d = tpath("adir");
  mkdir(d, 0755);
  rc = ts_st_write(w, d);
  CHECK(rc == TS_EIO);
  CHECK(has(ts_last_error(), d));
  CHECK(count_tmp(g_dir) == 0);
  rmdir(d);
  /* an existing good file stays intact when a later write fails */
  const char *good = tpath("keep.safetensors");
  CHECK_OK(ts_st_write(w, good));
  chmod(g_dir, 0555);
  if (access(g_dir, W_OK) != 0) { /* not root: the directory is really read-only */
    x[0] = 99;
    CHECK(ts_st_write(w, good) == TS_EIO);
    ts_st_file *f;
    CHECK_OK(ts_st_open(good, &f));
    ts_tensor t;
    if (f && ts_st_find(f, "x", &t) == TS_OK) CHECK(((float *)t.data)[0] == 1.0f);
    ts_st_close(f);
  }
  chmod(g_dir, 0755);
  CHECK(count_tmp(g_dir) == 0);
  ts_st_writer_free(w);
}

static void test_errors(void) {
  float d12[3] = {1, 2, 3};
  const char *p;
  p = tpath("missing.safetensors");
  expect_fail(p, TS_EIO, NULL, NULL);

  p = tpath("short.safetensors");
  spit(p, "abc", 3);
  expect_fail(p, TS_EFORMAT, "too short", NULL);

  p = tpath("hugelen.safetensors");
  write_raw(p, "{}", NULL, 0);
  {
    size_t n;
    unsigned char *b = slurp(p, &n);
    b[0] = 0xff;
    b[3] = 0x7f;
    spit(p, b, n);
    free(b);
  }
  expect_fail(p, TS_EFORMAT, "header length", NULL);

  p = tpath("badjson.safetensors");
  write_raw(p, "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}#", d12, 12);
  expect_fail(p, TS_EFORMAT, "JSON", NULL);

  p = tpath("badjson2.safetensors");
  write_raw(p, "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]", d12, 12);
  expect_fail(p, TS_EFORMAT, "JSON", NULL);

  p = tpath("notobj.safetensors");
  write_raw(p, "[1,2]   ", NULL, 0);
  expect_fail(p, TS_EFORMAT, NULL, NULL);

  p = tpath("baddtype.safetensors");
  write_raw(p, "{\"w\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", d12, 8);
  expect_fail(p, TS_EDTYPE, "'w'", "F64");

  p = tpath("nodtype.safetensors");
  write_raw(p, "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", d12, 4);
  expect_fail(p, TS_EFORMAT, "'w'", "dtype");

  p = tpath("badshape.safetensors");
  write_raw(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", d12, 4);
  expect_fail(p, TS_EFORMAT, "'w'", "shape");

  p = tpath("fracshape.safetensors");
  write_raw(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", d12, 4);
  expect_fail(p, TS_EFORMAT, "'w'", "shape");

  p = tpath("sizemismatch.safetensors");
  write_raw(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", d12, 12);
  expect_fail(p, TS_EFORMAT, "'w'", "needs 8 bytes");

  p = tpath("truncated.safetensors");
  write_raw(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}", d12, 8);
  expect_fail(p, TS_EFORMAT, "'w'", "truncated");

  p = tpath("overlap.safetensors");
  write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", d12, 12);
  expect_fail(p, TS_EFORMAT, "overlap", "'b'");

  p = tpath("hole.safetensors");
  write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", d12, 12);
  expect_fail(p, TS_EFORMAT, "hole", "'b'");

  p = tpath("trailing.safetensors");
  write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", d12, 12);
  expect_fail(p, TS_EFORMAT, "trailing", NULL);

  p = tpath("reversed.safetensors");
  write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", d12, 12);
  expect_fail(p, TS_EFORMAT, "'a'", NULL);

  p = tpath("dup.safetensors");
  write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", d12, 8);
  expect_fail(p, TS_EFORMAT, "'a'", "twice");

  p = tpath("metanum.safetensors");
  write_raw(p, "{\"__metadata__\":{\"k\":1},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", d12, 4);
  expect_fail(p, TS_EFORMAT, "'k'", NULL);

  p = tpath("toomanydims.safetensors");
  write_raw(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
            d12, 1);
  expect_fail(p, TS_EUNSUPPORTED, "'a'", NULL);

  p = tpath("badcrc.safetensors");
  write_raw(p, "{\"__metadata__\":{\"tessera.crc32\":\"xyz\"},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", d12, 4);
  expect_fail(p, TS_EFORMAT, "hex", NULL);

  /* valid hand-written file without CRC, misaligned tensor (offset 1 for an F32) */
  p = tpath("misaligned.safetensors");
  {
    unsigned char data[5] = {7};
    memcpy(data + 1, &d12[2], 4);
    write_raw(p, "{\"u\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                 "\"f\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[1,5]}}", data, 5);
    ts_st_file *f;
    CHECK_OK(ts_st_open(p, &f));
    ts_tensor t;
    if (f && ts_st_find(f, "f", &t) == TS_OK) {
      CHECK((uintptr_t)t.data % 4 == 0);
      CHECK(*(float *)t.data == 3.0f);
      CHECK(t.shape.ndim == 0);
    }
    ts_st_close(f);
  }

  /* CRC mismatch and truncation of a file the writer produced */
  float big[64];
  for (int i = 0; i < 64; i++) big[i] = (float)i;
  ts_st_writer *w;
  CHECK_OK(ts_st_writer_create(&w));
  CHECK_OK(ts_st_writer_add(w, "big", TS_F32, ts_shape2(8, 8), big));
  p = tpath("crc.safetensors");
  CHECK_OK(ts_st_write(w, p));
  ts_st_writer_free(w);
  size_t n;
  unsigned char *b = slurp(p, &n);
  b[n - 9] ^= 0x10; /* flip one bit in the data */
  const char *q = tpath("crcbad.safetensors");
  spit(q, b, n);
  expect_fail(q, TS_EFORMAT, "CRC", NULL);
  b[n - 9] ^= 0x10;
  q = tpath("cut.safetensors");
  spit(q, b, n - 4);
  expect_fail(q, TS_EFORMAT, "'big'", "truncated");
  spit(q, b, 20); /* cut inside the header */
  expect_fail(q, TS_EFORMAT, "header length", NULL);
  free(b);

  ts_st_file *f = NULL;
  CHECK(ts_st_open_memory("12345678", 8, "membad", &f) == TS_EFORMAT);
  CHECK(f == NULL && has(ts_last_error(), "membad"));
  ts_dtype dt;
  CHECK(ts_st_dtype_parse("BOOL", &dt) == TS_EDTYPE);
  CHECK(ts_st_dtype_parse("BF16", &dt) == TS_OK && dt == TS_BF16);
  CHECK(strcmp(ts_st_dtype_name(TS_I64), "I64") == 0);
}

/* Written by scripts/make_fixtures.py (Python json + struct, no CRC). */
static void test_python_file(void) {
  ts_st_file *f;
  const char *p = TS_FIXTURE_DIR "/st_dtypes.safetensors";
  CHECK_OK(ts_st_open(p, &f));
  if (!f) return;
  CHECK(ts_st_count(f) == 8);
  CHECK(ts_st_meta(f, "writer") && strcmp(ts_st_meta(f, "writer"), "make_fixtures.py") == 0);
  CHECK(ts_st_meta(f, TS_ST_CRC_KEY) == NULL);
  float want[6], got[6];
  for (int i = 0; i < 6; i++) want[i] = (float)i * 0.5f - 1.0f;
  ts_shape s23 = ts_shape2(2, 3);
  const char *fl[3] = {"f32", "bf16", "f16"};
  for (int k = 0; k < 3; k++) {
    CHECK_OK(ts_st_read(f, fl[k], TS_F32, &s23, got));
    CHECK_MSG(memcmp(got, want, sizeof got) == 0, "%s values", fl[k]);
  }
  ts_tensor t;
  CHECK_OK(ts_st_find(f, "i32", &t));
  int32_t wi32[6] = {-3, 0, 7, INT32_MAX, INT32_MIN, 1};
  CHECK(t.dtype == TS_I32 && memcmp(t.data, wi32, sizeof wi32) == 0);
  CHECK_OK(ts_st_find(f, "i64", &t));
  int64_t wi64[3] = {-(1LL << 40), 0, (1LL << 62) + 5};
  CHECK(t.dtype == TS_I64 && memcmp(t.data, wi64, sizeof wi64) == 0);
  CHECK_OK(ts_st_find(f, "u8", &t));
  uint8_t wu8[4] = {0, 1, 128, 255};
  CHECK(t.dtype == TS_U8 && memcmp(t.data, wu8, 4) == 0);
  CHECK_OK(ts_st_find(f, "scalar", &t));
  CHECK(t.shape.ndim == 0 && *(float *)t.data == 3.25f);
  CHECK_OK(ts_st_find(f, "empty", &t));
  CHECK(t.shape.ndim == 2 && t.shape.dims[0] == 0 && t.shape.dims[1] == 4);
  ts_st_close(f);
  /* and a fixture carrying a CRC written by Python */
  CHECK_OK(ts_st_open(TS_FIXTURE_DIR "/optim_adam.safetensors", &f));
  if (f) CHECK(ts_st_meta(f, TS_ST_CRC_KEY) != NULL);
  ts_st_close(f);
}

/* Every committed fixture must open and validate (CRC included where present); op fixtures
 * must follow the in<k>/out<k>/dout<k>/grad_in<k> convention of docs/fixtures.md. */
static void test_all_fixtures(void) {
  DIR *d = opendir(TS_FIXTURE_DIR);
  CHECK(d != NULL);
  struct dirent *e;
  int n = 0;
  char path[1024];
  while (d && (e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l < 12 || strcmp(e->d_name + l - 12, ".safetensors") != 0) continue;
    snprintf(path, sizeof path, "%s/%s", TS_FIXTURE_DIR, e->d_name);
    ts_st_file *f;
    CHECK_OK(ts_st_open(path, &f));
    if (!f) continue;
    n++;
    if (strncmp(e->d_name, "op_", 3) == 0) {
      ts_tensor t, u;
      CHECK_MSG(ts_st_meta(f, "op") && ts_st_meta(f, "attrs"), "%s: metadata", path);
      CHECK_MSG(ts_st_find(f, "in0", &t) == TS_OK && ts_st_find(f, "out0", &t) == TS_OK, "%s", path);
      for (int k = 0; k < 8; k++) { /* every out<k> has a dout<k> of the same shape */
        char a[16], b[16];
        snprintf(a, sizeof a, "out%d", k);
        snprintf(b, sizeof b, "dout%d", k);
        if (ts_st_find(f, a, &t) != TS_OK) break;
        CHECK_MSG(ts_st_find(f, b, &u) == TS_OK && ts_shape_equal(&t.shape, &u.shape), "%s: %s",
                  path, b);
      }
      for (int k = 0; k < 8; k++) { /* grad_in<k> has the shape of in<k> */
        char a[24], b[24];
        snprintf(a, sizeof a, "in%d", k);
        snprintf(b, sizeof b, "grad_in%d", k);
        if (ts_st_find(f, a, &t) != TS_OK) break;
        if (ts_st_find(f, b, &u) == TS_OK) CHECK_MSG(ts_shape_equal(&t.shape, &u.shape), "%s: %s", path, b);
      }
    }
    ts_st_close(f);
  }
  if (d) closedir(d);
  CHECK_MSG(n >= 13, "only %d fixtures found in %s", n, TS_FIXTURE_DIR);
}

/* Chunk checksums, header-only opens and ranged reads; SHA-256. */
static void test_ranges(void) {
  /* SHA-256 of a known text */
  spit(tpath("abc.txt"), "abc", 3);
  char hex[65];
  uint64_t nb = 0;
  CHECK_OK(ts_sha256_file(tpath("abc.txt"), hex, &nb));
  CHECK(nb == 3 && !strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  /* three tensors of 1000, 333 and 7 floats and one i64 */
  float a[1000], b[333], c[7];
  int64_t st = 12345;
  ts_test_fill(a, 1000, 1, -1, 1);
  ts_test_fill(b, 333, 2, -1, 1);
  ts_test_fill(c, 7, 3, -1, 1);
  const uint64_t chunks[] = {1, 3, 64, 1000, 4096, 1u << 20};
  for (int ci = 0; ci < (int)(sizeof chunks / sizeof chunks[0]); ci++) {
    ts_st_writer *w;
    CHECK_OK(ts_st_writer_create(&w));
    CHECK_OK(ts_st_writer_add(w, "a", TS_F32, ts_shape2(10, 100), a));
    CHECK_OK(ts_st_writer_add(w, "b", TS_F32, ts_shape1(333), b));
    CHECK_OK(ts_st_writer_add(w, "c", TS_F32, ts_shape1(7), c));
    CHECK_OK(ts_st_writer_add(w, "step", TS_I64, ts_shape_make(0, NULL), &st));
    EXPECT_ERR(ts_st_writer_set_meta(w, TS_ST_CHUNK_KEY, "1"), TS_EINVAL, "reserved");
    CHECK_OK(ts_st_writer_set_chunk(w, chunks[ci]));
    const char *p = tpath("chunked.safetensors");
    uint64_t bytes = 0;
    char h1[65], h2[65];
    CHECK_OK(ts_st_write_hashed(w, p, &bytes, h1));
    ts_st_writer_free(w);
    uint64_t fb = 0;
    CHECK_OK(ts_sha256_file(p, h2, &fb));
    CHECK_MSG(!strcmp(h1, h2) && fb == bytes, "chunk %llu: hash while writing %s, of the file %s", (unsigned long long)chunks[ci], h1, h2);
    ts_st_file *whole, *f;
    CHECK_OK(ts_st_open(p, &whole)); /* checks every chunk too */
    CHECK_OK(ts_st_open_header(p, &f));
    if (!whole || !f) break;
    CHECK(ts_st_is_lazy(f) && !ts_st_is_lazy(whole));
    ts_tensor v;
    CHECK_OK(ts_st_find(f, "a", &v));
    CHECK(v.data == NULL && v.shape.dims[1] == 100);
    /* 200 random ranges of random tensors, read together, against the whole file */
    ts_st_range rr[200];
    unsigned char *dst[200];
    unsigned s = 7 + (unsigned)ci;
    for (int k = 0; k < 200; k++) {
      s = s * 1103515245u + 12345u;
      int e = (int)(s >> 16) % 4;
      ts_tensor t;
      ts_st_get(whole, e, &t);
      uint64_t n = ts_tensor_nbytes(&t);
      s = s * 1103515245u + 12345u;
      uint64_t off = (s >> 8) % n;
      s = s * 1103515245u + 12345u;
      uint64_t len = 1 + (s >> 8) % (n - off);
      dst[k] = malloc(len);
      rr[k] = (ts_st_range){e, off, len, dst[k]};
    }
    CHECK_OK(ts_st_read_ranges(f, rr, 200));
    int same = 1;
    for (int k = 0; k < 200; k++) {
      ts_tensor t;
      ts_st_get(whole, rr[k].entry, &t);
      same &= !memcmp(dst[k], (unsigned char *)t.data + rr[k].offset, rr[k].nbytes);
    }
    CHECK_MSG(same, "chunk %llu: ranged reads differ from the file", (unsigned long long)chunks[ci]);
    ts_st_range out = {0, 3990, 20, dst[0]};
    EXPECT_ERR(ts_st_read_ranges(f, &out, 1), TS_EINVAL, "chunked.safetensors", "'a'", "outside");
    ts_st_close(f);
    for (int k = 0; k < 200; k++) free(dst[k]);
    /* a flipped byte in tensor b: ranges touching its chunk are refused, others still read */
    size_t n = 0;
    unsigned char *raw = slurp(p, &n);
    ts_st_close(whole);
    /* find b's bytes in the raw file by content */
    unsigned char *hit = memmem(raw, n, b, sizeof b);
    CHECK(hit != NULL);
    if (hit) {
      hit[100] ^= 0x40;
      spit(p, raw, n);
      expect_fail(p, TS_EFORMAT, "CRC", NULL);
      CHECK_OK(ts_st_open_header(p, &f));
      unsigned char tmp[400];
      int ib = ts_st_index(f, "b");
      ts_st_range bad = {ib, 90, 20, tmp}, good = {ts_st_index(f, "c"), 0, 28, tmp};
      EXPECT_ERR(ts_st_read_ranges(f, &bad, 1), TS_EFORMAT, "chunked.safetensors", "'b'", "CRC-32");
      if (chunks[ci] <= 64) CHECK_OK(ts_st_read_ranges(f, &good, 1)); /* c's chunks are not b's */
      ts_st_close(f);
    }
    free(raw);
  }
}

static void cleanup(void) {
  DIR *d = opendir(g_dir);
  struct dirent *e;
  char path[600];
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", g_dir, e->d_name);
    unlink(path);
  }
  if (d) closedir(d);
  rmdir(g_dir);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ts_st_XXXXXX");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_round_trip();
  test_atomic();
  test_errors();
  test_python_file();
  test_all_fixtures();
  test_ranges();
  if (!getenv("TS_KEEP")) cleanup();
  return ts_test_finish("test_safetensors");
}
