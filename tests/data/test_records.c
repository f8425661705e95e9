/* Tessera record shards: round trips from several sources (CIFAR-10 files made here, an image
 * folder, text with targets, a callback source with mixed dtypes/shapes/labels) over 1..4 shards
 * (every sample identical, global order preserved, label() agreeing, shard files opened in any
 * order); and the failures: a corrupt record CRC (named by file and record), a truncated shard,
 * bad magic, corrupt header and index, incomplete or mixed sets, and a conversion that fails
 * half-way leaving no file behind. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <png.h>

#include "tessera/data.h"
#include "test_util.h"

static char g_dir[64];

static int has(const char *needle) {
  if (strstr(ts_last_error(), needle)) return 1;
  fprintf(stderr, "  message '%s' lacks '%s'\n", ts_last_error(), needle);
  return 0;
}

static void write_bytes(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  CHECK(fwrite(b, 1, n, f) == n);
  fclose(f);
}

static int count_files(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  if (d) closedir(d);
  return n;
}

static int same_tensor(const ts_tensor *a, const ts_tensor *b) {
  if (!a->data || !b->data) return !a->data && !b->data;
  return a->dtype == b->dtype && ts_shape_equal(&a->shape, &b->shape) &&
         !memcmp(a->data, b->data, ts_tensor_nbytes(a));
}

/* ---- a callback source with a bit of everything ---- */
static int64_t mix_len(void *self) { return 11; }
static int mix_get(void *self, int64_t i, ts_sample *out) {
  static const ts_dtype dts[] = {TS_F32, TS_U8, TS_I64, TS_BF16, TS_I32, TS_F16};
  ts_dtype dt = dts[i % 6];
  ts_shape sh = i == 4 ? ts_shape_make(0, NULL) /* scalar */
                : i == 5 ? ts_shape2(0, 3) /* empty */
                         : ts_shape3(1 + i % 3, 2, 1 + i % 2);
  int rc = ts_tensor_init(&out->data, dt, sh);
  if (rc) return rc;
  uint8_t *d = out->data.data;
  for (size_t k = 0; k < ts_tensor_nbytes(&out->data); k++) d[k] = (uint8_t)(i * 31 + k * 7);
  if (i % 3 == 0) {
    rc = ts_tensor_init(&out->target, TS_I32, ts_shape1(i + 1));
    if (rc) return rc;
    for (int64_t k = 0; k <= i; k++) ((int32_t *)out->target.data)[k] = (int32_t)(k - i);
  }
  out->label = i % 4 == 1 ? -1 : i % 7;
  return TS_OK;
}
static int mix_classes(void *self) { return 7; }

/* A source that fails at sample 5 (for the atomic-write check). */
static int64_t fail_len(void *self) { return 9; }
static int fail_get(void *self, int64_t i, ts_sample *out) {
  if (i == 5) return ts_error_set(TS_EIO, "flaky source: sample 5 is unreadable");
  int rc = ts_tensor_init(&out->data, TS_U8, ts_shape1(4));
  out->label = 0;
  return rc;
}
static int64_t empty_len(void *self) { return 0; }

static void make_cifar(const char *dir) {
  mkdir(dir, 0755);
  char p[512];
  for (int f = 0; f < 5; f++) {
    snprintf(p, sizeof p, "%s/data_batch_%d.bin", dir, f + 1);
    int nrec = 2 + f % 2;
    uint8_t *b = malloc(3073 * (size_t)nrec);
    for (int r = 0; r < nrec; r++) {
      b[3073 * r] = (uint8_t)((f + 3 * r) % 10);
      for (int k = 0; k < 3072; k++) b[3073 * r + 1 + k] = (uint8_t)(f * 13 + r * 5 + k * 3);
    }
    write_bytes(p, b, 3073 * (size_t)nrec);
    free(b);
  }
}

static void make_images(const char *root) {
  char p[512];
  mkdir(root, 0755);
  for (int c = 0; c < 2; c++) {
    snprintf(p, sizeof p, "%s/class%d", root, c);
    mkdir(p, 0755);
    for (int k = 0; k < 3; k++) {
      png_image im;
      memset(&im, 0, sizeof im);
      im.version = PNG_IMAGE_VERSION;
      im.width = (png_uint_32)(3 + k);
      im.height = 4;
      im.format = c ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
      uint8_t buf[4 * 5 * 3];
      for (size_t q = 0; q < sizeof buf; q++) buf[q] = (uint8_t)(q * 5 + k + 40 * c);
      snprintf(p, sizeof p, "%s/class%d/img%d.png", root, c, k);
      CHECK(png_image_write_to_file(&im, p, 0, buf, 0, NULL) != 0);
    }
  }
}

/* Writes src to S shards, reopens them (file list reversed), compares everything. */
static void round_trip(ts_source *src, const char *name, int S) {
  char prefix[256];
  snprintf(prefix, sizeof prefix, "%s/%s-s%d", g_dir, name, S);
  char **paths = NULL;
  CHECK_OK(ts_records_write(src, prefix, S, &paths));
  if (!paths) return;
  char want[300];
  snprintf(want, sizeof want, "%s-%05d-of-%05d.tsr", prefix, S - 1, S);
  CHECK(!strcmp(paths[S - 1], want));
  const char *rev[8];
  for (int s = 0; s < S; s++) rev[s] = paths[S - 1 - s];
  ts_source *r;
  CHECK_OK(ts_source_records(rev, S, &r));
  int64_t n = ts_source_len(src);
  CHECK_MSG(r && ts_source_len(r) == n, "%s S=%d: length", name, S);
  CHECK(r && ts_source_num_classes(r) == ts_source_num_classes(src) && !strcmp(ts_source_kind(r), "records"));
  int64_t bad = 0;
  for (int64_t i = 0; r && i < n; i++) {
    ts_sample a, b;
    CHECK_OK(ts_source_get(src, i, &a));
    CHECK_OK(ts_source_get(r, i, &b));
    bad += !same_tensor(&a.data, &b.data) || !same_tensor(&a.target, &b.target) || a.label != b.label ||
           ts_source_label(r, i) != a.label;
    ts_sample_free(&a);
    ts_sample_free(&b);
  }
  CHECK_MSG(bad == 0, "%s S=%d: %lld samples differ", name, S, (long long)bad);
  ts_source_free(r);
  /* each shard on its own: records s, s+S, ... in file order; the header describes it */
  for (int s = 0; s < S; s++) {
    ts_records_info info;
    CHECK_OK(ts_records_info_read(paths[s], &info));
    CHECK(info.version == 1 && info.shard == s && info.num_shards == S && info.total == n &&
          info.count == (n > s ? (n - s + S - 1) / S : 0) && !strcmp(info.kind, ts_source_kind(src)) &&
          info.num_classes == ts_source_num_classes(src));
    ts_source *one;
    CHECK_OK(ts_source_records_shard(paths[s], &one));
    CHECK(one && ts_source_len(one) == info.count);
    for (int64_t k = 0; one && k < info.count; k++) {
      ts_sample a, b;
      CHECK_OK(ts_source_get(src, s + k * S, &a));
      CHECK_OK(ts_source_get(one, k, &b));
      CHECK(same_tensor(&a.data, &b.data) && a.label == b.label && ts_source_label(one, k) == a.label);
      ts_sample_free(&a);
      ts_sample_free(&b);
    }
    ts_source_free(one);
  }
  for (int s = 0; s < S; s++) free(paths[s]);
  free(paths);
}

static void flip_byte(const char *path, long off) {
  FILE *f = fopen(path, "r+b");
  CHECK(f != NULL);
  if (!f) return;
  fseek(f, off, SEEK_SET);
  int c = fgetc(f);
  fseek(f, off, SEEK_SET);
  fputc(c ^ 0x5a, f);
  fclose(f);
}

static uint64_t rd64(const char *path, long off) {
  uint8_t b[8] = {0};
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  fseek(f, off, SEEK_SET);
  CHECK(fread(b, 1, 8, f) == 8);
  fclose(f);
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
  return v;
}

static void test_corruption(ts_source *src) {
  char prefix[256], p[300];
  snprintf(prefix, sizeof prefix, "%s/bad", g_dir);
  char **paths;
  CHECK_OK(ts_records_write(src, prefix, 2, &paths));
  ts_source *r;
  /* flip one payload byte of record 3 of shard 1 (= sample 7) */
  uint64_t index_off = rd64(paths[1], 40);
  uint64_t rec3 = rd64(paths[1], (long)(index_off + 16 * 3));
  flip_byte(paths[1], (long)rec3 + 100);
  CHECK_OK(ts_source_records((const char *const *)paths, 2, &r));
  ts_sample smp;
  CHECK(ts_source_get(r, 7, &smp) == TS_EFORMAT && smp.data.data == NULL);
  CHECK(has(paths[1]) && has("record 3") && has("sample 7") && has("checksum"));
  CHECK_OK(ts_source_get(r, 6, &smp));
  ts_sample_free(&smp);
  CHECK_OK(ts_source_get(r, 9, &smp));
  ts_sample_free(&smp);
  CHECK(ts_source_label(r, 7) >= 0); /* labels come from the verified index */
  ts_source_free(r);
  flip_byte(paths[1], (long)rec3 + 100);

  /* truncated shard: named, with the first incomplete record */
  uint64_t rec4 = rd64(paths[0], (long)(rd64(paths[0], 40) + 16 * 4));
  CHECK(truncate(paths[0], (off_t)rec4 + 10) == 0);
  CHECK(ts_source_records((const char *const *)paths, 2, &r) == TS_EFORMAT && r == NULL);
  CHECK(has(paths[0]) && has("truncated") && has("record 4 of 6"));
  CHECK(truncate(paths[0], 40) == 0);
  CHECK(ts_source_records((const char *const *)paths, 2, &r) == TS_EFORMAT);
  CHECK(has(paths[0]) && has("truncated in the header"));
  CHECK(truncate(paths[0], 0) == 0);
  CHECK(ts_source_records_shard(paths[0], &r) == TS_EFORMAT);
  CHECK(has(paths[0]));

  /* bad magic, corrupt header, corrupt index, unknown version */
  CHECK(ts_source_records_shard(paths[1], &r) == TS_OK);
  ts_source_free(r);
  flip_byte(paths[1], 0);
  CHECK(ts_source_records_shard(paths[1], &r) == TS_EFORMAT && has(paths[1]) && has("bad magic"));
  flip_byte(paths[1], 0);
  flip_byte(paths[1], 17); /* record count */
  CHECK(ts_source_records_shard(paths[1], &r) == TS_EFORMAT && has(paths[1]) && has("header checksum"));
  flip_byte(paths[1], 17);
  flip_byte(paths[1], (long)index_off + 20); /* an index entry */
  CHECK(ts_source_records_shard(paths[1], &r) == TS_EFORMAT && has(paths[1]) && has("index checksum"));
  flip_byte(paths[1], (long)index_off + 20);
  flip_byte(paths[1], 8);
  CHECK(ts_source_records_shard(paths[1], &r) == TS_EFORMAT && has("version"));
  flip_byte(paths[1], 8);
  CHECK_OK(ts_source_records_shard(paths[1], &r));
  ts_source_free(r);
  /* a file that is not a record file at all */
  snprintf(p, sizeof p, "%s/notes.tsr", g_dir);
  write_bytes(p, "just some text, not a record shard, long enough to hold a header....................", 84);
  CHECK(ts_source_records_shard(p, &r) == TS_EFORMAT && has("notes.tsr") && has("bad magic"));
  CHECK(ts_records_info_read("/nonexistent/x.tsr", &(ts_records_info){0}) == TS_ENOTFOUND);

  /* incomplete, duplicated and mixed sets */
  CHECK(ts_source_records((const char *const *)paths + 1, 1, &r) == TS_EINVAL && has("shard 0 of 2 is missing"));
  const char *dup[2] = {paths[1], paths[1]};
  CHECK(ts_source_records(dup, 2, &r) == TS_EINVAL && has("both shard 1 of 2"));
  char **other;
  snprintf(prefix, sizeof prefix, "%s/other", g_dir);
  CHECK_OK(ts_records_write(src, prefix, 3, &other));
  const char *mixed[2] = {paths[1], other[0]};
  CHECK(ts_source_records(mixed, 2, &r) == TS_EFORMAT && has("not from the same set"));
  CHECK(ts_source_records(NULL, 0, &r) == TS_EINVAL);
  for (int s = 0; s < 3; s++) free(other[s]);
  free(other);
  for (int s = 0; s < 2; s++) free(paths[s]);
  free(paths);
}

static void test_atomic(void) {
  char dir[128], prefix[200];
  snprintf(dir, sizeof dir, "%s/atomic", g_dir);
  mkdir(dir, 0755);
  snprintf(prefix, sizeof prefix, "%s/x", dir);
  ts_source_vtable vt = {"flaky", fail_len, fail_get, NULL, NULL, NULL, NULL};
  ts_source *src;
  CHECK_OK(ts_source_create(&vt, NULL, &src));
  char **paths = (char **)1;
  for (int S = 1; S <= 3; S++) {
    CHECK(ts_records_write(src, prefix, S, &paths) == TS_EIO && paths == NULL);
    CHECK(has("sample 5 is unreadable"));
    CHECK_MSG(count_files(dir) == 0, "S=%d: %d files left behind", S, count_files(dir));
  }
  snprintf(prefix, sizeof prefix, "%s/no/such/dir/x", g_dir);
  CHECK(ts_records_write(src, prefix, 2, NULL) == TS_EIO && has("no/such/dir/x-00000-of-00002.tsr"));
  CHECK(ts_records_write(src, prefix, 0, NULL) == TS_EINVAL);
  ts_source_free(src);
  /* an empty source gives valid empty shards */
  ts_source_vtable ve = {"empty", empty_len, fail_get, NULL, NULL, NULL, NULL};
  CHECK_OK(ts_source_create(&ve, NULL, &src));
  snprintf(prefix, sizeof prefix, "%s/empty", dir);
  CHECK_OK(ts_records_write(src, prefix, 2, &paths));
  ts_source *r;
  CHECK_OK(ts_source_records((const char *const *)paths, 2, &r));
  CHECK(r && ts_source_len(r) == 0);
  ts_source_free(r);
  for (int s = 0; s < 2; s++) free(paths[s]);
  free(paths);
  ts_source_free(src);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ts_records_XXXXXX");
  CHECK(mkdtemp(g_dir) != NULL);
  char p[256];
  ts_source *src[4];
  const char *names[4] = {"cifar", "images", "text", "mixed"};
  snprintf(p, sizeof p, "%s/cifar-10-batches-bin", g_dir);
  make_cifar(p);
  CHECK_OK(ts_source_cifar(p, 0, 1, &src[0]));
  snprintf(p, sizeof p, "%s/images", g_dir);
  make_images(p);
  CHECK_OK(ts_source_image_folder(p, &src[1]));
  snprintf(p, sizeof p, "%s/text.txt", g_dir);
  write_bytes(p, "The quick brown fox jumps over the lazy dog. 0123456789", 55);
  CHECK_OK(ts_source_text(p, 8, 5, &src[2]));
  ts_source_vtable vt = {"mixed", mix_len, mix_get, NULL, mix_classes, NULL, NULL};
  CHECK_OK(ts_source_create(&vt, NULL, &src[3]));
  for (int k = 0; k < 4; k++)
    for (int S = 1; S <= 4; S++)
      if (src[k]) round_trip(src[k], names[k], S);
  if (src[0]) test_corruption(src[0]);
  test_atomic();
  for (int k = 0; k < 4; k++) ts_source_free(src[k]);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  CHECK(system(cmd) == 0);
  printf("checked: round trips of 4 sources over 1..4 shards; corrupt record CRC, truncation, bad magic, "
         "header/index corruption, incomplete/duplicate/mixed sets, atomic write\n");
  return ts_test_finish("test_records");
}
