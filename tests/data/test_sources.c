/* Data sources: CIFAR-10/100 binary files generated here in the exact distributed format (planar
 * R,G,B records read back as HWC), an image folder of PNG and JPEG files written through libpng and
 * libjpeg (decoded from two threads at once), the text source, the callback source, the real
 * Fashion-MNIST through ts_source_mnist, and the bad-input errors: CIFAR labels out of range and
 * truncated files, empty image folders, files that are not images. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>
#include <zlib.h>

#include "tessera/data.h"
#include "test_util.h"

static char g_dir[64];

static void write_bytes(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  CHECK(fwrite(b, 1, n, f) == n);
  fclose(f);
}

static int has(const char *needle) {
  if (strstr(ts_last_error(), needle)) return 1;
  fprintf(stderr, "  message '%s' lacks '%s'\n", ts_last_error(), needle);
  return 0;
}

/* ---- CIFAR ---- */

static uint8_t pix(int file, int rec, int c, int y, int x) { return (uint8_t)(file * 37 + rec * 11 + c * 85 + y * 3 + x * 7); }

/* Writes nrec records in the distributed layout: label byte(s) then R, G, B planes of 32x32. */
static void write_cifar(const char *path, int file, int nrec, int cifar100, const uint8_t *labels) {
  size_t rs = 3072 + (cifar100 ? 2 : 1);
  uint8_t *b = malloc(rs * (size_t)nrec);
  for (int r = 0; r < nrec; r++) {
    uint8_t *p = b + rs * (size_t)r;
    if (cifar100) {
      *p++ = labels[2 * r];
      *p++ = labels[2 * r + 1];
    } else {
      *p++ = labels[r];
    }
    for (int c = 0; c < 3; c++)
      for (int y = 0; y < 32; y++)
        for (int x = 0; x < 32; x++) p[c * 1024 + y * 32 + x] = pix(file, r, c, y, x);
  }
  write_bytes(path, b, rs * (size_t)nrec);
  free(b);
}

static void test_cifar(void) {
  char d10[128], d100[128], p[256];
  snprintf(d10, sizeof d10, "%s/cifar-10-batches-bin", g_dir);
  snprintf(d100, sizeof d100, "%s/cifar-100-binary", g_dir);
  mkdir(d10, 0755);
  mkdir(d100, 0755);
  int counts[6] = {3, 2, 1, 2, 4, 5}; /* data_batch_1..5, test_batch */
  uint8_t lab[6][8];
  for (int f = 0; f < 6; f++) {
    for (int r = 0; r < counts[f]; r++) lab[f][r] = (uint8_t)((f * 3 + r) % 10);
    if (f < 5) snprintf(p, sizeof p, "%s/data_batch_%d.bin", d10, f + 1);
    else snprintf(p, sizeof p, "%s/test_batch.bin", d10);
    write_cifar(p, f, counts[f], 0, lab[f]);
  }
  ts_source *s;
  CHECK_OK(ts_source_cifar(d10, 0, 1, &s));
  CHECK(ts_source_len(s) == 12);
  CHECK(!strcmp(ts_source_kind(s), "cifar10") && ts_source_num_classes(s) == 10);
  int64_t gi = 0, bad = 0;
  for (int f = 0; f < 5; f++)
    for (int r = 0; r < counts[f]; r++, gi++) {
      ts_sample smp;
      CHECK_OK(ts_source_get(s, gi, &smp));
      CHECK(smp.data.dtype == TS_U8 && smp.data.shape.ndim == 3 && smp.data.shape.dims[0] == 32 &&
            smp.data.shape.dims[1] == 32 && smp.data.shape.dims[2] == 3);
      CHECK(smp.label == lab[f][r] && ts_source_label(s, gi) == lab[f][r]);
      CHECK(smp.target.data == NULL);
      const uint8_t *d = smp.data.data;
      for (int y = 0; y < 32; y++)
        for (int x = 0; x < 32; x++)
          for (int c = 0; c < 3; c++) bad += d[(y * 32 + x) * 3 + c] != pix(f, r, c, y, x);
      ts_sample_free(&smp);
    }
  CHECK_MSG(bad == 0, "%lld pixels differ from the planar file", (long long)bad);
  ts_sample smp;
  CHECK(ts_source_get(s, 12, &smp) == TS_ERANGE);
  ts_source_free(s);
  /* test split, found through the parent folder */
  CHECK_OK(ts_source_cifar(g_dir, 0, 0, &s));
  CHECK(ts_source_len(s) == 5 && ts_source_label(s, 4) == lab[5][4]);
  CHECK_OK(ts_source_get(s, 3, &smp));
  CHECK(((uint8_t *)smp.data.data)[(5 * 32 + 6) * 3 + 2] == pix(5, 3, 2, 5, 6));
  ts_sample_free(&smp);
  ts_source_free(s);

  /* CIFAR-100: coarse + fine label bytes; label = fine */
  uint8_t l100[8] = {3, 77, 19, 99, 0, 0, 7, 42};
  snprintf(p, sizeof p, "%s/train.bin", d100);
  write_cifar(p, 7, 4, 1, l100);
  snprintf(p, sizeof p, "%s/test.bin", d100);
  write_cifar(p, 8, 1, 1, l100);
  CHECK_OK(ts_source_cifar(d100, 1, 1, &s));
  CHECK(ts_source_len(s) == 4 && ts_source_num_classes(s) == 100 && !strcmp(ts_source_kind(s), "cifar100"));
  for (int r = 0; r < 4; r++) {
    CHECK_OK(ts_source_get(s, r, &smp));
    CHECK(smp.label == l100[2 * r + 1] && ts_source_label(s, r) == l100[2 * r + 1]);
    CHECK(((uint8_t *)smp.data.data)[(31 * 32 + 30) * 3 + 1] == pix(7, r, 1, 31, 30));
    ts_sample_free(&smp);
  }
  ts_source_free(s);
  CHECK_OK(ts_source_cifar(g_dir, 1, 0, &s));
  CHECK(ts_source_len(s) == 1);
  ts_source_free(s);

  /* bad input */
  uint8_t badl[4] = {1, 2, 10, 3};
  snprintf(p, sizeof p, "%s/data_batch_3.bin", d10);
  write_cifar(p, 2, 4, 0, badl);
  CHECK(ts_source_cifar(d10, 0, 1, &s) == TS_ERANGE && s == NULL);
  CHECK(has("data_batch_3.bin") && has("record 2") && has("label 10"));
  write_cifar(p, 2, 1, 0, badl);
  CHECK(truncate(p, 3073 + 100) == 0);
  CHECK(ts_source_cifar(d10, 0, 1, &s) == TS_EFORMAT);
  CHECK(has("data_batch_3.bin") && has("3173") && has("3073"));
  CHECK(truncate(p, 0) == 0);
  CHECK(ts_source_cifar(d10, 0, 1, &s) == TS_EFORMAT);
  CHECK(has("data_batch_3.bin"));
  write_cifar(p, 2, 1, 0, badl);
  snprintf(p, sizeof p, "%s/data_batch_4.bin", d10);
  unlink(p);
  CHECK(ts_source_cifar(d10, 0, 1, &s) == TS_ENOTFOUND);
  CHECK(has("data_batch_4.bin"));
  uint8_t badc[4] = {3, 5, 20, 5};
  snprintf(p, sizeof p, "%s/train.bin", d100);
  write_cifar(p, 7, 2, 1, badc);
  CHECK(ts_source_cifar(d100, 1, 1, &s) == TS_ERANGE);
  CHECK(has("train.bin") && has("record 1") && has("coarse label 20"));
  uint8_t badf[2] = {3, 100};
  write_cifar(p, 7, 1, 1, badf);
  CHECK(ts_source_cifar(d100, 1, 1, &s) == TS_ERANGE);
  CHECK(has("record 0") && has("fine label 100"));
  /* a CIFAR-10 file read as CIFAR-100: 3073 is not a multiple of 3074 */
  snprintf(p, sizeof p, "%s/c100x", g_dir);
  mkdir(p, 0755);
  char q[300];
  snprintf(q, sizeof q, "%s/train.bin", p);
  write_cifar(q, 0, 3, 0, lab[0]);
  CHECK(ts_source_cifar(p, 1, 1, &s) == TS_EFORMAT);
  CHECK(has("train.bin") && has("3074"));
}

/* ---- image folder ---- */

static uint8_t ipix(int img, int y, int x, int c) { return (uint8_t)(img * 40 + y * 9 + x * 5 + c * 60); }

static void write_png(const char *path, int img, int w, int h, int fmt, int ch) {
  png_image im;
  memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  im.width = (png_uint_32)w;
  im.height = (png_uint_32)h;
  im.format = (png_uint_32)fmt;
  uint8_t *b = malloc((size_t)(w * h * ch));
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < ch; c++) b[(y * w + x) * ch + c] = ipix(img, y, x, c);
  CHECK(png_image_write_to_file(&im, path, 0, b, 0, NULL) != 0);
  free(b);
}

/* Smooth content so that JPEG at quality 95 stays close. */
static uint8_t jpix(int y, int x, int c) { return (uint8_t)(40 + 4 * y + 3 * x + 30 * c); }

static void write_jpeg(const char *path, int w, int h, int ch) {
  struct jpeg_compress_struct ci;
  struct jpeg_error_mgr err;
  ci.err = jpeg_std_error(&err);
  jpeg_create_compress(&ci);
  FILE *f = fopen(path, "wb");
  jpeg_stdio_dest(&ci, f);
  ci.image_width = (JDIMENSION)w;
  ci.image_height = (JDIMENSION)h;
  ci.input_components = ch;
  ci.in_color_space = ch == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&ci);
  jpeg_set_quality(&ci, 95, TRUE);
  jpeg_start_compress(&ci, TRUE);
  uint8_t *row = malloc((size_t)(w * ch));
  while (ci.next_scanline < ci.image_height) {
    int y = (int)ci.next_scanline;
    for (int x = 0; x < w; x++)
      for (int c = 0; c < ch; c++) row[x * ch + c] = jpix(y, x, c);
    JSAMPROW r = row;
    jpeg_write_scanlines(&ci, &r, 1);
  }
  jpeg_finish_compress(&ci);
  jpeg_destroy_compress(&ci);
  fclose(f);
  free(row);
}

/* Expected decoded sample per file, in source order. */
typedef struct {
  int h, w, c, png_img, jpeg; /* png_img: pixel pattern id (alpha-dropped RGBA uses the RGB values) */
  int label;
} expect_img;

static const expect_img k_exp[] = {
    {4, 5, 3, 0, 0, 0},   /* ant/a.png: RGB */
    {8, 16, 3, -1, 1, 0}, /* ant/b.JPG: RGB JPEG */
    {3, 3, 1, 2, 0, 1},   /* bee/c.png: gray */
    {6, 2, 3, 3, 0, 1},   /* bee/d.png: RGBA -> RGB */
    {9, 7, 1, -1, 1, 1},  /* bee/e.jpeg: gray JPEG */
    {2, 2, 1, 5, 0, 1},   /* bee/sub/f.png: gray + alpha -> gray, found recursively */
    {3, 4, 3, 6, 0, 2},   /* cow/g.png */
};

typedef struct {
  ts_source *src;
  int rounds, failures;
} thread_arg;

static int check_sample(ts_source *src, int64_t i, int verbose) {
  ts_sample s;
  const expect_img *e = &k_exp[i];
  if (ts_source_get(src, i, &s)) {
    if (verbose) fprintf(stderr, "  sample %lld: %s\n", (long long)i, ts_last_error());
    return 1;
  }
  int bad = s.data.dtype != TS_U8 || s.data.shape.ndim != 3 || s.data.shape.dims[0] != e->h ||
            s.data.shape.dims[1] != e->w || s.data.shape.dims[2] != e->c || s.label != e->label;
  if (!bad) {
    const uint8_t *d = s.data.data;
    int maxdiff = 0;
    for (int y = 0; y < e->h; y++)
      for (int x = 0; x < e->w; x++)
        for (int c = 0; c < e->c; c++) {
          int want = e->jpeg ? jpix(y, x, c) : ipix(e->png_img, y, x, c);
          int diff = abs((int)d[(y * e->w + x) * e->c + c] - want);
          if (diff > maxdiff) maxdiff = diff;
        }
    bad = e->jpeg ? maxdiff > 6 : maxdiff != 0;
    if (bad && verbose) fprintf(stderr, "  sample %lld: max pixel difference %d\n", (long long)i, maxdiff);
  } else if (verbose) {
    char b[96];
    fprintf(stderr, "  sample %lld: shape %s label %lld\n", (long long)i, ts_shape_str(&s.data.shape, b, sizeof b),
            (long long)s.label);
  }
  ts_sample_free(&s);
  return bad;
}

static void *decode_thread(void *p) {
  thread_arg *a = p;
  for (int r = 0; r < a->rounds; r++)
    for (int64_t i = 0; i < (int64_t)(sizeof k_exp / sizeof k_exp[0]); i++) a->failures += check_sample(a->src, i, 0);
  return NULL;
}

static void test_image_folder(void) {
  char root[128], p[256];
  snprintf(root, sizeof root, "%s/images", g_dir);
  mkdir(root, 0755);
  const char *dirs[] = {"ant", "bee", "bee/sub", "cow", ".hidden"};
  for (int i = 0; i < 5; i++) {
    snprintf(p, sizeof p, "%s/%s", root, dirs[i]);
    mkdir(p, 0755);
  }
  snprintf(p, sizeof p, "%s/ant/a.png", root);
  write_png(p, 0, 5, 4, PNG_FORMAT_RGB, 3);
  snprintf(p, sizeof p, "%s/ant/b.JPG", root);
  write_jpeg(p, 16, 8, 3);
  snprintf(p, sizeof p, "%s/bee/c.png", root);
  write_png(p, 2, 3, 3, PNG_FORMAT_GRAY, 1);
  snprintf(p, sizeof p, "%s/bee/d.png", root);
  write_png(p, 3, 2, 6, PNG_FORMAT_RGBA, 4);
  snprintf(p, sizeof p, "%s/bee/e.jpeg", root);
  write_jpeg(p, 7, 9, 1);
  snprintf(p, sizeof p, "%s/bee/sub/f.png", root);
  write_png(p, 5, 2, 2, PNG_FORMAT_GA, 2);
  snprintf(p, sizeof p, "%s/cow/g.png", root);
  write_png(p, 6, 4, 3, PNG_FORMAT_RGB, 3);
  snprintf(p, sizeof p, "%s/bee/notes.txt", root); /* skipped: not an image extension */
  write_bytes(p, "hello", 5);
  snprintf(p, sizeof p, "%s/bee/.x.png", root); /* skipped: hidden */
  write_bytes(p, "junk", 4);
  snprintf(p, sizeof p, "%s/.hidden/h.png", root); /* skipped: hidden class folder */
  write_png(p, 6, 4, 3, PNG_FORMAT_RGB, 3);
  snprintf(p, sizeof p, "%s/README", root); /* files at the root are not classes */
  write_bytes(p, "x", 1);

  ts_source *s;
  CHECK_OK(ts_source_image_folder(root, &s));
  int64_t n = (int64_t)(sizeof k_exp / sizeof k_exp[0]);
  CHECK(ts_source_len(s) == n && ts_source_num_classes(s) == 3 && !strcmp(ts_source_kind(s), "image-folder"));
  for (int64_t i = 0; i < n; i++) {
    CHECK_MSG(check_sample(s, i, 1) == 0, "image sample %lld", (long long)i);
    CHECK(ts_source_label(s, i) == k_exp[i].label);
  }
  /* decoding runs on worker threads: two threads at once must give the same results */
  thread_arg ta[2] = {{s, 20, 0}, {s, 20, 0}};
  pthread_t th[2];
  for (int t = 0; t < 2; t++) pthread_create(&th[t], NULL, decode_thread, &ta[t]);
  for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
  CHECK(ta[0].failures == 0 && ta[1].failures == 0);

  /* a file with an image extension but other content: error at get() naming the file */
  snprintf(p, sizeof p, "%s/cow/z.png", root);
  write_bytes(p, "this is not a PNG file at all", 29);
  ts_source_free(s);
  CHECK_OK(ts_source_image_folder(root, &s));
  ts_sample smp;
  CHECK(ts_source_get(s, n, &smp) == TS_EFORMAT && smp.data.data == NULL);
  CHECK(has("cow/z.png") && has("not a PNG or JPEG"));
  /* a truncated PNG and a truncated JPEG */
  snprintf(p, sizeof p, "%s/cow/g.png", root);
  struct stat st;
  stat(p, &st);
  CHECK(truncate(p, st.st_size - 20) == 0);
  CHECK(ts_source_get(s, n - 1, &smp) == TS_EFORMAT);
  CHECK(has("cow/g.png") && has("PNG"));
  snprintf(p, sizeof p, "%s/ant/b.JPG", root);
  stat(p, &st);
  CHECK(truncate(p, st.st_size / 2) == 0);
  CHECK(ts_source_get(s, 1, &smp) == TS_EFORMAT);
  CHECK(has("ant/b.JPG") && has("JPEG"));
  ts_source_free(s);

  /* a class folder with no image */
  snprintf(p, sizeof p, "%s/dog", root);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/dog/readme.txt", root);
  write_bytes(p, "x", 1);
  CHECK(ts_source_image_folder(root, &s) == TS_EFORMAT && s == NULL);
  CHECK(has("images/dog") && has("no image"));
  /* a root without class folders */
  snprintf(p, sizeof p, "%s/empty", g_dir);
  mkdir(p, 0755);
  CHECK(ts_source_image_folder(p, &s) == TS_EFORMAT);
  CHECK(has("empty") && has("no class sub-folders"));
  snprintf(p, sizeof p, "%s/nonexistent", g_dir);
  CHECK(ts_source_image_folder(p, &s) == TS_ENOTFOUND);
  CHECK(has("nonexistent"));
}

/* ---- text ---- */

static void test_text(void) {
  char p[256];
  snprintf(p, sizeof p, "%s/text.txt", g_dir);
  const char *txt = "hello, tessera world!\n\xff"; /* 23 bytes, one of them >= 128 */
  write_bytes(p, txt, 23);
  ts_source *s;
  CHECK_OK(ts_source_text(p, 5, 0, &s));
  CHECK(ts_source_len(s) == 4 && !strcmp(ts_source_kind(s), "text")); /* (23 - 6) / 5 + 1 */
  for (int64_t i = 0; i < 4; i++) {
    ts_sample smp;
    CHECK_OK(ts_source_get(s, i, &smp));
    CHECK(smp.data.dtype == TS_I32 && smp.data.shape.ndim == 1 && smp.data.shape.dims[0] == 5);
    CHECK(smp.target.dtype == TS_I32 && smp.target.shape.dims[0] == 5 && smp.label == -1);
    const int32_t *d = smp.data.data, *t = smp.target.data;
    for (int k = 0; k < 5; k++) {
      CHECK(d[k] == (uint8_t)txt[i * 5 + k]);
      CHECK(t[k] == (uint8_t)txt[i * 5 + k + 1]);
    }
    ts_sample_free(&smp);
  }
  CHECK(ts_source_label(s, 0) == -1);
  ts_source_free(s);
  CHECK_OK(ts_source_text(p, 4, 3, &s));
  CHECK(ts_source_len(s) == 7); /* starts 0,3,...,18; 18+4 = 22 < 23 */
  ts_sample smp;
  CHECK_OK(ts_source_get(s, 6, &smp));
  CHECK(((int32_t *)smp.target.data)[3] == 255);
  ts_sample_free(&smp);
  ts_source_free(s);
  CHECK(ts_source_text(p, 23, 0, &s) == TS_EFORMAT && has("text.txt") && has("too short"));
  CHECK(ts_source_text(p, 0, 0, &s) == TS_EINVAL);
  snprintf(p, sizeof p, "%s/missing.txt", g_dir);
  CHECK(ts_source_text(p, 4, 0, &s) == TS_ENOTFOUND && has("missing.txt"));
}

/* ---- callback ---- */

typedef struct {
  int n, destroyed;
} user_data;

static int64_t u_len(void *self) { return ((user_data *)self)->n; }
static int u_get(void *self, int64_t i, ts_sample *out) {
  if (i == 3) return ts_error_set(TS_EIO, "user source: sample 3 is unavailable");
  int rc = ts_tensor_init(&out->data, TS_F32, ts_shape2(2, 3));
  if (rc) return rc;
  for (int k = 0; k < 6; k++) ((float *)out->data.data)[k] = (float)(i * 10 + k);
  out->label = i % 2;
  return TS_OK;
}
static void u_destroy(void *self) { ((user_data *)self)->destroyed = 1; }
static int u_nolabel(void *self, int64_t i, ts_sample *out) { return TS_OK; } /* forgets the data */

static void test_callback(void) {
  user_data u = {5, 0};
  ts_source_vtable vt = {NULL, u_len, u_get, NULL, NULL, u_destroy, NULL};
  ts_source *s;
  CHECK_OK(ts_source_create(&vt, &u, &s));
  CHECK(!strcmp(ts_source_kind(s), "callback") && ts_source_len(s) == 5 && ts_source_num_classes(s) == 0);
  ts_sample smp;
  CHECK_OK(ts_source_get(s, 2, &smp));
  CHECK(smp.data.shape.dims[1] == 3 && ((float *)smp.data.data)[5] == 25.0f && smp.label == 0);
  ts_sample_free(&smp);
  CHECK(smp.data.data == NULL && smp.label == -1);
  CHECK(ts_source_label(s, 1) == 1); /* no label function: decodes */
  CHECK(ts_source_get(s, 3, &smp) == TS_EIO && has("sample 3 is unavailable"));
  CHECK(ts_source_label(s, 3) == TS_EIO);
  CHECK(ts_source_get(s, 5, &smp) == TS_ERANGE && has("callback") && has("out of range"));
  CHECK(ts_source_get(s, -1, &smp) == TS_ERANGE);
  ts_source_free(s);
  CHECK(u.destroyed == 1);
  vt.get = NULL;
  CHECK(ts_source_create(&vt, &u, &s) == TS_EINVAL && s == NULL);
  vt.get = u_nolabel;
  vt.kind = "mine";
  CHECK_OK(ts_source_create(&vt, &u, &s));
  CHECK(!strcmp(ts_source_kind(s), "mine"));
  CHECK(ts_source_get(s, 0, &smp) == TS_EFORMAT && has("mine") && has("no data"));
  ts_source_free(s);
  ts_sample_free(NULL);
}

/* ---- MNIST ---- */

/* An IDX header claiming far more data than the file holds must fail before allocating it (the
 * fuzzer found the reader allocating a 1 GiB tensor for a 20-byte file). */
static void test_idx_lying_header(void) {
  char p[256];
  snprintf(p, sizeof p, "%s/liar-idx", g_dir);
  const uint8_t hdr[] = {0, 0, 8, 3, 0x00, 0x01, 0, 0, 0, 0, 0x04, 0, 0, 0, 0x04, 0, 1, 2, 3, 4}; /* 65536x1024x1024 */
  write_bytes(p, hdr, sizeof hdr);
  ts_tensor t;
  CHECK(ts_idx_load(p, &t) == TS_EFORMAT && t.data == NULL);
  CHECK(has("liar-idx") && has("truncated"));
}

/* ts_source_mnist reads its images as they are asked for: from several threads at once, in any
 * order, each sample equals the whole load's (ts_mnist_load); a gzip file cut short still serves
 * the samples before the cut, and a sample after it fails naming the file, every time it is
 * asked for. A synthetic split of 9000 4x3 images (three of the source's 4096-image steps). */
enum { LZ_N = 9000, LZ_HW = 12 };
static void write_idx_gz(const char *path, int ndim, const uint32_t *dims, const uint8_t *data, size_t n, int level) {
  gzFile f = gzopen(path, level ? "wb9" : "wb0");
  CHECK(f != NULL);
  if (!f) return;
  uint8_t hdr[16] = {0, 0, 8, (uint8_t)ndim};
  for (int i = 0; i < ndim; i++)
    hdr[4 + 4 * i] = (uint8_t)(dims[i] >> 24), hdr[5 + 4 * i] = (uint8_t)(dims[i] >> 16),
                hdr[6 + 4 * i] = (uint8_t)(dims[i] >> 8), hdr[7 + 4 * i] = (uint8_t)dims[i];
  CHECK(gzwrite(f, hdr, 4 + 4 * (unsigned)ndim) == 4 + 4 * ndim && gzwrite(f, data, (unsigned)n) == (int)n);
  CHECK(gzclose(f) == Z_OK);
}

typedef struct {
  ts_source *s;
  const uint8_t *im, *lb;
  unsigned seed;
  int bad;
} lazy_reader;

static void *lazy_read(void *arg) {
  lazy_reader *r = arg;
  unsigned x = r->seed;
  for (int k = 0; k < 3000; k++) {
    x = x * 1103515245u + 12345u;
    int64_t i = (int64_t)((x >> 8) % LZ_N);
    ts_sample smp;
    if (ts_source_get(r->s, i, &smp) != TS_OK) {
      r->bad++;
      continue;
    }
    if (memcmp(smp.data.data, r->im + i * LZ_HW, LZ_HW) || smp.label != r->lb[i]) r->bad++;
    ts_sample_free(&smp);
  }
  return NULL;
}

static void test_mnist_lazy(void) {
  static uint8_t im[LZ_N * LZ_HW], lb[LZ_N];
  for (int i = 0; i < LZ_N * LZ_HW; i++) im[i] = (uint8_t)((i * 2654435761u) >> 13);
  for (int i = 0; i < LZ_N; i++) lb[i] = (uint8_t)(i * 7 % 10);
  char dir[300], ip[400], lp[400];
  snprintf(dir, sizeof dir, "%s/lazy", g_dir);
  CHECK(mkdir(dir, 0755) == 0);
  snprintf(ip, sizeof ip, "%s/train-images-idx3-ubyte.gz", dir);
  snprintf(lp, sizeof lp, "%s/train-labels-idx1-ubyte.gz", dir);
  const uint32_t di[3] = {LZ_N, 4, 3}, dl[1] = {LZ_N};
  write_idx_gz(ip, 3, di, im, sizeof im, 9);
  write_idx_gz(lp, 1, dl, lb, sizeof lb, 9);
  ts_tensor eim, elb;
  CHECK_OK(ts_mnist_load(dir, "train", &eim, &elb));
  CHECK(eim.data && !memcmp(eim.data, im, sizeof im) && elb.data && !memcmp(elb.data, lb, sizeof lb));
  ts_tensor_free(&eim);
  ts_tensor_free(&elb);
  ts_source *s;
  CHECK_OK(ts_source_mnist(dir, "train", &s));
  CHECK(ts_source_len(s) == LZ_N && ts_source_label(s, LZ_N - 1) == lb[LZ_N - 1]);
  int bad = 0;
  for (int64_t i = 0; i < LZ_N; i++) { /* in order: every step's first and last image */
    ts_sample smp;
    if (ts_source_get(s, i, &smp) != TS_OK) {
      bad++;
      continue;
    }
    bad += memcmp(smp.data.data, im + i * LZ_HW, LZ_HW) != 0 || smp.label != lb[i];
    ts_sample_free(&smp);
  }
  CHECK_MSG(bad == 0, "read in order: %d samples differ from the whole load", bad);
  ts_source_free(s);
  CHECK_OK(ts_source_mnist(dir, "train", &s));
  lazy_reader r[4];
  pthread_t th[4];
  for (int t = 0; t < 4; t++) {
    r[t] = (lazy_reader){s, im, lb, 17u + 31u * (unsigned)t, 0};
    CHECK(pthread_create(&th[t], NULL, lazy_read, &r[t]) == 0);
  }
  for (int t = 0; t < 4; t++) {
    pthread_join(th[t], NULL);
    CHECK_MSG(r[t].bad == 0, "reader %d: %d samples differ from the whole load", t, r[t].bad);
  }
  ts_source_free(s);

  /* stored (level 0) so that the cut falls at a known image: the file holds the header and the
   * first 5000.5 images */
  write_idx_gz(ip, 3, di, im, sizeof im, 0);
  struct stat st;
  CHECK(stat(ip, &st) == 0);
  CHECK(truncate(ip, 10 + 16 + 5 + 5000 * LZ_HW + LZ_HW / 2) == 0); /* gzip header 10, a stored block's 5 */
  CHECK(ts_mnist_load(dir, "train", &eim, &elb) == TS_EFORMAT && has("train-images-idx3-ubyte.gz"));
  CHECK_OK(ts_source_mnist(dir, "train", &s));
  ts_sample smp;
  CHECK_OK(ts_source_get(s, 4095, &smp));
  CHECK(!memcmp(smp.data.data, im + 4095 * LZ_HW, LZ_HW));
  ts_sample_free(&smp);
  for (int k = 0; k < 2; k++) {
    ts_source *none; /* another error in between: the second call says it again */
    CHECK(ts_source_mnist("/nonexistent", "train", &none) == TS_ENOTFOUND && !strstr(ts_last_error(), "truncated"));
    CHECK(ts_source_get(s, 4999 + k * 4000, &smp) == TS_EFORMAT && has("train-images-idx3-ubyte.gz") &&
          has("truncated"));
  }
  CHECK_OK(ts_source_get(s, 17, &smp)); /* what was read stays readable */
  CHECK(!memcmp(smp.data.data, im + 17 * LZ_HW, LZ_HW));
  ts_sample_free(&smp);
  ts_source_free(s);
}

static void test_mnist(void) {
  if (!ts_test_have_fashion_mnist()) return;
  ts_source *s;
  CHECK_OK(ts_source_mnist(ts_test_fashion_mnist_dir(), "train", &s));
  CHECK(ts_source_len(s) == 60000 && ts_source_num_classes(s) == 10 && !strcmp(ts_source_kind(s), "mnist"));
  int64_t hist[10] = {0};
  for (int64_t i = 0; i < 60000; i++) {
    int64_t l = ts_source_label(s, i);
    CHECK(l >= 0 && l < 10);
    if (l >= 0 && l < 10) hist[l]++;
  }
  for (int c = 0; c < 10; c++) CHECK_MSG(hist[c] == 6000, "class %d has %lld", c, (long long)hist[c]);
  ts_tensor im, lb;
  CHECK_OK(ts_mnist_load(ts_test_fashion_mnist_dir(), "train", &im, &lb));
  ts_sample smp;
  CHECK_OK(ts_source_get(s, 59999, &smp));
  CHECK(smp.data.dtype == TS_U8 && smp.data.shape.ndim == 3 && smp.data.shape.dims[0] == 28 &&
        smp.data.shape.dims[1] == 28 && smp.data.shape.dims[2] == 1);
  CHECK(!memcmp(smp.data.data, (uint8_t *)im.data + 59999 * 784, 784) && smp.label == ((uint8_t *)lb.data)[59999]);
  ts_sample_free(&smp);
  ts_tensor_free(&im);
  ts_tensor_free(&lb);
  ts_source_free(s);
  CHECK_OK(ts_source_mnist(ts_test_fashion_mnist_dir(), "test", &s));
  CHECK(ts_source_len(s) == 10000);
  ts_source_free(s);
  printf("real Fashion-MNIST through ts_source_mnist: 60000 (6000 per class) + 10000\n");
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ts_sources_XXXXXX");
  CHECK(mkdtemp(g_dir) != NULL);
  test_cifar();
  test_image_folder();
  test_text();
  test_callback();
  test_idx_lying_header();
  test_mnist_lazy();
  test_mnist();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  CHECK(system(cmd) == 0);
  return ts_test_finish("test_sources");
}
