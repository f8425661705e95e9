/* MindSpore checkpoints (.ckpt, src/io/mindspore_ckpt.c) through the safetensors API: a file
 * written by Google's protobuf library as MindSpore writes one (scripts/make_ms_ckpt_fixture.py:
 * a tensor in 4 values, BFloat16, 0-d and [0]-dims numbers, types Tessera converts, append_info
 * strings, a random_op value) read whole, lazily and from memory, equal to what the script says
 * it holds; Tessera's writer against the library's bytes (the same tensors, pieces of 256 bytes:
 * byte for byte); round trips of every dtype with pieces that cut elements; every truncation of
 * the fixture (an error naming the file, or the values before the cut); malformed values, each
 * error naming the file and the tag. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/ms_ckpt.h"
#include "tessera/io.h"
#include "test_util.h"

#ifndef TS_FIXTURE_DIR
#define TS_FIXTURE_DIR "tests/fixtures"
#endif
#define FIX TS_FIXTURE_DIR "/ms_checkpoint.ckpt"
#define EXPECT TS_FIXTURE_DIR "/ms_checkpoint_expect.safetensors"

static char g_dir[256];

static const char *tpath(const char *name) {
  static char buf[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
  return buf[k];
}

static int has(const char *s, const char *sub) { return s && sub && strstr(s, sub) != NULL; }

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return NULL;
  fseek(fp, 0, SEEK_END);
  long sz = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)sz + 1);
  if (b && fread(b, 1, (size_t)sz, fp) != (size_t)sz) {
    free(b);
    b = NULL;
  }
  fclose(fp);
  *n = (size_t)sz;
  return b;
}

static void spit(const char *path, const void *b, size_t n) {
  FILE *fp = fopen(path, "wb");
  CHECK(fp != NULL);
  if (!fp) return;
  CHECK(fwrite(b, 1, n, fp) == n);
  fclose(fp);
}

/* Every tensor and metadata entry of want is in got, the same. */
static void same_file(const ts_st_file *got, const ts_st_file *want, const char *what) {
  CHECK_MSG(ts_st_count(got) == ts_st_count(want), "%s: %d tensors, want %d", what, ts_st_count(got),
            ts_st_count(want));
  for (int i = 0; i < ts_st_count(want); i++) {
    const char *name = ts_st_name(want, i);
    ts_tensor a, b;
    CHECK_OK(ts_st_find(want, name, &b));
    if (ts_st_find(got, name, &a)) {
      CHECK_MSG(0, "%s: no tensor '%s': %s", what, name, ts_last_error());
      continue;
    }
    CHECK_MSG(a.dtype == b.dtype && ts_shape_equal(&a.shape, &b.shape), "%s: '%s' dtype/shape", what, name);
    size_t nb = (size_t)ts_tensor_numel(&b) * ts_dtype_size(b.dtype);
    CHECK_MSG(a.data && (!nb || memcmp(a.data, b.data, nb) == 0), "%s: '%s' bytes", what, name);
  }
  CHECK_MSG(ts_st_meta_count(got) == ts_st_meta_count(want), "%s: %d metadata entries, want %d", what,
            ts_st_meta_count(got), ts_st_meta_count(want));
  for (int i = 0; i < ts_st_meta_count(want); i++) {
    const char *k = ts_st_meta_key(want, i), *v = ts_st_meta(got, k);
    CHECK_MSG(v && strcmp(v, ts_st_meta(want, k)) == 0, "%s: metadata '%s' = '%s'", what, k, v ? v : "(none)");
  }
}

/* The protobuf library's file, read three ways. */
static void test_fixture(void) {
  ts_st_file *f = NULL, *want = NULL, *m = NULL, *lz = NULL;
  CHECK_OK(ts_st_open(EXPECT, &want));
  CHECK_OK(ts_st_open(FIX, &f));
  if (!f || !want) return;
  same_file(f, want, "ts_st_open");
  CHECK(ts_st_index(f, "random_op") < 0); /* MindSpore's graph RNG state: not kept */
  ts_tensor t;
  CHECK_OK(ts_st_find(f, "learning_rate", &t));
  CHECK(t.shape.ndim == 0 && *(float *)t.data == 0.01f);
  CHECK_OK(ts_st_find(f, "f64", &t)); /* dims [0], one Float64: a number, rounded to f32 */
  CHECK(t.dtype == TS_F32 && t.shape.ndim == 0 && *(float *)t.data == 0.1f);
  CHECK_OK(ts_st_find(f, "empty", &t));
  CHECK(t.shape.ndim == 1 && t.shape.dims[0] == 0);
  CHECK(has(ts_st_meta(f, "note"), "\xe2\x9c\x93 \xf0\x9f\x98\x80")); /* U+2713 U+1F600 */
  /* views of every tensor are aligned for their dtype */
  for (int i = 0; i < ts_st_count(f); i++) {
    ts_st_get(f, i, &t);
    CHECK_MSG(((uintptr_t)t.data % 64) == 0, "'%s' at %p", ts_st_name(f, i), t.data);
  }
  float w[6];
  CHECK_OK(ts_st_read(f, "bn1.gamma", TS_F32, &(ts_shape){1, {6}}, w));
  CHECK(w[0] == 1.0f && w[5] == 1.0f);
  /* from memory */
  size_t n;
  unsigned char *b = slurp(FIX, &n);
  CHECK(b != NULL);
  CHECK_OK(ts_st_open_memory(b, n, "mem.ckpt", &m));
  if (m) same_file(m, want, "ts_st_open_memory");
  /* lazily: views without data, the bytes by ranges */
  CHECK_OK(ts_st_open_header(FIX, &lz));
  if (lz) {
    CHECK(ts_st_is_lazy(lz));
    CHECK(ts_st_count(lz) == ts_st_count(want));
    for (int i = 0; i < ts_st_count(lz); i++) {
      ts_tensor v, x;
      CHECK_OK(ts_st_get(lz, i, &v));
      CHECK(v.data == NULL);
      CHECK_OK(ts_st_find(want, ts_st_name(lz, i), &x));
      size_t nb = (size_t)ts_tensor_numel(&v) * ts_dtype_size(v.dtype);
      unsigned char *buf = malloc(nb + 1);
      ts_st_range r[2] = {{i, 0, nb / 2, buf}, {i, nb / 2, nb - nb / 2, buf + nb / 2}};
      CHECK_OK(ts_st_read_ranges(lz, r, 2));
      CHECK_MSG(!nb || memcmp(buf, x.data, nb) == 0, "ranged '%s'", ts_st_name(lz, i));
      free(buf);
      ts_st_range out = {i, nb, 1, w};
      CHECK(ts_st_read_ranges(lz, &out, 1) == TS_EINVAL);
    }
    CHECK(ts_st_read(lz, "fc.weight", TS_F32, NULL, w) == TS_EINVAL); /* opened for ranged reads */
  }
  free(b);
  ts_st_close(lz);
  ts_st_close(m);
  ts_st_close(f);
  ts_st_close(want);
}

/* Tessera's writer, the fixture's first 8 tensors in pieces of 256 bytes: the protobuf library's
 * bytes for them (the fixture's prefix). Through ts_st_write: a path ending in .ckpt. */
static void test_writer_bytes(void) {
  ts_st_file *f = NULL;
  CHECK_OK(ts_st_open(FIX, &f));
  if (!f) return;
  const char *names[8] = {"conv1.weight", "bn1.gamma", "bn1.beta", "bn1.moving_mean", "bn1.moving_variance",
                          "fc.weight", "fc.bias", "emb.embedding_table"};
  ts__msck_wtensor t[8];
  for (int i = 0; i < 8; i++) {
    ts_tensor v;
    CHECK_OK(ts_st_find(f, names[i], &v));
    t[i] = (ts__msck_wtensor){names[i], v.dtype, v.shape, v.data, (uint64_t)ts_tensor_numel(&v) * ts_dtype_size(v.dtype)};
  }
  char sha[65], sha2[65];
  uint64_t bytes = 0, bytes2 = 0;
  CHECK_OK(ts__msck_write(tpath("prefix.ckpt"), t, 8, NULL, NULL, 0, 256, &bytes, sha));
  size_t n, nf;
  unsigned char *a = slurp(tpath("prefix.ckpt"), &n), *b = slurp(FIX, &nf);
  CHECK(a && b && n == bytes && n < nf);
  CHECK_MSG(a && b && memcmp(a, b, n) == 0, "the writer's bytes differ from the protobuf library's");
  CHECK_OK(ts_sha256_file(tpath("prefix.ckpt"), sha2, &bytes2));
  CHECK(strcmp(sha, sha2) == 0 && bytes2 == bytes);
  free(a);
  free(b);
  /* the public writer: a .ckpt path, metadata as str values, read back the same */
  ts_st_writer *w;
  CHECK_OK(ts_st_writer_create(&w));
  for (int i = 0; i < ts_st_count(f); i++) {
    ts_tensor v;
    ts_st_get(f, i, &v);
    CHECK_OK(ts_st_writer_add_tensor(w, ts_st_name(f, i), &v));
  }
  for (int i = 0; i < ts_st_meta_count(f); i++) CHECK_OK(ts_st_writer_set_meta(w, ts_st_meta_key(f, i), ts_st_meta(f, ts_st_meta_key(f, i))));
  CHECK_OK(ts_st_write_hashed(w, tpath("all.ckpt"), &bytes, sha));
  CHECK_OK(ts_sha256_file(tpath("all.ckpt"), sha2, &bytes2));
  CHECK(strcmp(sha, sha2) == 0 && bytes2 == bytes);
  ts_st_writer_free(w);
  ts_st_file *g = NULL;
  CHECK_OK(ts_st_open(tpath("all.ckpt"), &g));
  if (g) same_file(g, f, "written .ckpt");
  ts_st_close(g);
  /* and not a safetensors file */
  a = slurp(tpath("all.ckpt"), &n);
  CHECK(a && n > 1 && a[0] == 0x0a);
  free(a);
  ts_st_close(f);
}

/* Every dtype, pieces that cut elements (7 bytes), a scalar and an empty tensor. */
static void test_round_trip(void) {
  float f32[5] = {1.5f, -2, 3, 0, 1e-30f};
  uint16_t h[5] = {0x3c00, 0xbc00, 0x7bff, 0, 1}; /* bf16 / f16 bit patterns */
  int32_t i32[3] = {INT32_MIN, -1, INT32_MAX};
  int64_t i64[3] = {INT64_MIN, 0, INT64_MAX};
  uint8_t u8[9] = {0, 1, 2, 3, 4, 5, 6, 7, 255};
  float s = 42;
  ts__msck_wtensor t[] = {
      {"a/f32", TS_F32, {1, {5}}, f32, sizeof f32},  {"b.bf16", TS_BF16, {2, {1, 5}}, h, sizeof h},
      {"c.f16", TS_F16, {1, {5}}, h, sizeof h},      {"d.i32", TS_I32, {1, {3}}, i32, sizeof i32},
      {"e.i64", TS_I64, {3, {3, 1, 1}}, i64, sizeof i64}, {"f.u8", TS_U8, {2, {3, 3}}, u8, sizeof u8},
      {"g.scalar", TS_F32, {0, {0}}, &s, 4},        {"h.empty", TS_I32, {2, {0, 4}}, NULL, 0},
  };
  char *mk[2] = {"k1", "\xc3\xa9t\xc3\xa9"}, *mv[2] = {"", "\xe6\x97\xa5\xe6\x9c\xac"};
  for (uint64_t piece = 1; piece <= 41; piece += 5) {
    CHECK_OK(ts__msck_write(tpath("rt.ckpt"), t, 8, mk, mv, 2, piece, NULL, NULL));
    ts_st_file *f = NULL;
    CHECK_OK(ts_st_open(tpath("rt.ckpt"), &f));
    if (!f) continue;
    CHECK(ts_st_count(f) == 8);
    for (int i = 0; i < 8; i++) {
      ts_tensor v;
      CHECK_OK(ts_st_find(f, t[i].name, &v));
      CHECK_MSG(v.dtype == t[i].dt && ts_shape_equal(&v.shape, &t[i].shape) &&
                    (!t[i].nbytes || memcmp(v.data, t[i].data, t[i].nbytes) == 0),
                "piece %llu: '%s'", (unsigned long long)piece, t[i].name);
    }
    CHECK(ts_st_meta(f, "k1") && strcmp(ts_st_meta(f, "k1"), "") == 0);
    CHECK(ts_st_meta(f, mk[1]) && strcmp(ts_st_meta(f, mk[1]), mv[1]) == 0);
    ts_st_close(f);
  }
  /* not written: a missing folder leaves nothing behind */
  CHECK(ts__msck_write("/nonexistent_dir_ts/x.ckpt", t, 8, NULL, NULL, 0, 16, NULL, NULL) < 0);
  CHECK(has(ts_last_error(), "/nonexistent_dir_ts/x.ckpt"));
}

/* Every cut of the fixture: an error naming the file, or (a cut between values) the values
 * before it. */
static void test_truncated(void) {
  size_t n;
  unsigned char *b = slurp(FIX, &n);
  CHECK(b != NULL);
  if (!b) return;
  int ok = 0, bad = 0;
  for (size_t k = 1; k < n; k++) {
    ts_st_file *f = NULL;
    int rc = ts_st_open_memory(b, k, "cut.ckpt", &f);
    if (rc) {
      bad++;
      CHECK_MSG(rc == TS_EFORMAT && has(ts_last_error(), "cut.ckpt"), "cut at %zu: %d %s", k, rc, ts_last_error());
    } else {
      ok++;
      CHECK(ts_st_count(f) < 19 || ts_st_meta_count(f) < 2);
    }
    ts_st_close(f);
  }
  CHECK(bad > ok && ok >= 19); /* about one clean cut per value */
  /* a cut inside a tensor's pieces names it */
  size_t cut = 0;
  for (size_t k = 0; k + 9 < n && !cut; k++)
    if (memcmp(b + k, "fc.weight", 9) == 0) cut = k + 300; /* inside its second value */
  spit(tpath("cut.ckpt"), b, cut);
  ts_st_file *f = NULL;
  CHECK(ts_st_open(tpath("cut.ckpt"), &f) == TS_EFORMAT);
  CHECK_MSG(has(ts_last_error(), "cut.ckpt") && has(ts_last_error(), "truncated"), "%s", ts_last_error());
  free(b);
}

/* One hand-made value, encoded here (not by the writer under test):
 * Checkpoint.value { tag, tensor { dims..., tensor_type, tensor_content } }. */
static size_t varint(unsigned char *o, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) o[n++] = (unsigned char)(v | 0x80), v >>= 7;
  o[n++] = (unsigned char)v;
  return n;
}

static size_t field(unsigned char *o, int num, const void *p, size_t len) {
  size_t n = 0;
  o[n++] = (unsigned char)(num << 3 | 2);
  n += varint(o + n, len);
  memcpy(o + n, p, len);
  return n + len;
}

static size_t value(unsigned char *o, const char *tag, const int64_t *dims, int nd, const char *type,
                    const void *c, size_t nc) {
  unsigned char tensor[1024], val[1200];
  size_t nt = 0, nv = 0;
  for (int i = 0; i < nd; i++) {
    tensor[nt++] = 1 << 3 | 0;
    nt += varint(tensor + nt, (uint64_t)dims[i]);
  }
  nt += field(tensor + nt, 2, type, strlen(type));
  nt += field(tensor + nt, 3, c, nc);
  nv += field(val, 1, tag, strlen(tag));
  nv += field(val + nv, 2, tensor, nt);
  return field(o, 1, val, nv);
}

static void expect_bad(const unsigned char *b, size_t n, const char *what, const char *s1, const char *s2) {
  ts_st_file *f = NULL;
  int rc = ts_st_open_memory(b, n, "bad.ckpt", &f);
  CHECK_MSG(rc == TS_EFORMAT && f == NULL, "%s: rc %d", what, rc);
  CHECK_MSG(has(ts_last_error(), "bad.ckpt") && has(ts_last_error(), s1) && (!s2 || has(ts_last_error(), s2)),
            "%s: '%s'", what, ts_last_error());
  ts_st_close(f);
}

static void test_malformed(void) {
  unsigned char b[4096];
  float x[4] = {1, 2, 3, 4};
  size_t n = value(b, "w.bad", (int64_t[]){4}, 1, "Cmplx64", x, 16);
  expect_bad(b, n, "unknown type", "w.bad", "Cmplx64");
  n = value(b, "w.short", (int64_t[]){5}, 1, "Float32", x, 16);
  expect_bad(b, n, "dims against bytes", "w.short", "should hold 20 bytes");
  n = value(b, "w.again", (int64_t[]){4}, 1, "Float32", x, 16);
  n += value(b + n, "other", (int64_t[]){4}, 1, "Float32", x, 16);
  n += value(b + n, "w.again", (int64_t[]){4}, 1, "Float32", x, 16);
  expect_bad(b, n, "a tag twice", "w.again", "twice");
  n = value(b, "u.big", (int64_t[]){2}, 1, "UInt64", (uint64_t[]){1, 1ull << 63}, 16);
  expect_bad(b, n, "UInt64 past Int64", "u.big", "2^63");
  n = value(b, "pieces", (int64_t[]){4}, 1, "Float32", x, 8);
  n += value(b + n, "pieces", (int64_t[]){2, 2}, 2, "Float32", x + 2, 8);
  expect_bad(b, n, "pieces of other dims", "pieces", "differ");
  n = value(b, "neg", (int64_t[]){-4}, 1, "Float32", x, 16);
  expect_bad(b, n, "negative dim", "neg", "negative");
  int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 4};
  n = value(b, "deep", nine, 9, "Float32", x, 16);
  expect_bad(b, n, "too many dims", "deep", "dims");
  /* a map parameter (Value field 3) */
  n = value(b, "mp", (int64_t[]){4}, 1, "Float32", x, 16);
  b[1] += 2; /* the value grows by the 2-byte empty field 3 */
  b[n++] = 3 << 3 | 2;
  b[n++] = 0;
  expect_bad(b, n, "map parameter", "mp", "MapParameter");
  /* garbage after a 0x0a: not a checkpoint, a message, no crash */
  unsigned char g[12] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
  expect_bad(g, sizeof g, "bad varint", "bad.ckpt", "MindSpore");
}

static void cleanup(void) {
  const char *f[] = {"prefix.ckpt", "all.ckpt", "rt.ckpt", "cut.ckpt"};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) unlink(tpath(f[i]));
  rmdir(g_dir);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ts_msck_XXXXXX");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_fixture();
  test_writer_bytes();
  test_round_trip();
  test_truncated();
  test_malformed();
  if (!getenv("TS_KEEP")) cleanup();
  return ts_test_finish("test_ms_ckpt");
}
