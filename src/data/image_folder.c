/* Image folder source: root/<class>/.../<file>.{png,jpg,jpeg} (extensions case-insensitive).
 *
 * Classes are the sub-folders of root in byte-wise sorted order (class index = position); the files
 * of a class are found recursively and sorted by path, and samples are numbered class by class.
 * Files with other extensions and names starting with '.' are skipped (as torchvision's
 * ImageFolder does); a class folder without any image is an error, as is a root without class
 * folders. Listing happens at open; decoding happens in get(), on whatever thread calls it (every
 * decode has its own libpng / libjpeg state, so get() is thread-safe).
 *
 * Decoding (the file's content decides, not its extension): PNG through libpng, JPEG through
 * libjpeg-turbo. Grayscale gives C=1, colour C=3 (palettes expanded); an alpha channel is dropped
 * (RGBA -> RGB, gray+alpha -> gray, as stored, not composited) so that a folder mixing RGB and RGBA
 * files yields one channel count; 16-bit PNGs keep their high byte. CMYK JPEGs are rejected.
 * Images larger than 32768 pixels on a side are rejected. */
#include <dirent.h>
#include <setjmp.h>
#include <stdio.h> /* before jpeglib.h, which uses FILE */
#include <stdlib.h>
#include <strings.h>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

#include "source_internal.h"
#include "../base/text.h"

#define IMG_MAX_SIDE 32768

typedef struct {
  char *path;
  int32_t label;
} img_file;

typedef struct {
  img_file *files;
  int64_t n, cap;
  char **classes;
  int nclasses;
} folder_src;

/* ---- decoding ---- */

typedef struct {
  const uint8_t *buf;
  size_t len, pos;
  char msg[256];
  png_bytep *rows;
} png_ctx;

static void png_err_fn(png_structp png, png_const_charp msg) {
  png_ctx *c = png_get_error_ptr(png);
  snprintf(c->msg, sizeof c->msg, "%s", msg);
  png_longjmp(png, 1);
}
static void png_warn_fn(png_structp png, png_const_charp msg) {} /* the library never prints */

static void png_read_mem(png_structp png, png_bytep out, png_size_t n) {
  png_ctx *c = png_get_io_ptr(png);
  if (n > c->len - c->pos) png_error(png, "file truncated");
  memcpy(out, c->buf + c->pos, n);
  c->pos += n;
}

static int decode_png(const char *path, png_ctx *c, ts_tensor *out) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, c, png_err_fn, png_warn_fn);
  if (!png) return ts_error_set(TS_ENOMEM, "%s: cannot create a PNG decoder", path);
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, NULL, NULL);
    return ts_error_set(TS_ENOMEM, "%s: cannot create a PNG decoder", path);
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, NULL);
    free(c->rows);
    c->rows = NULL;
    ts_tensor_free(out);
    return ts_error_set(TS_EFORMAT, "%s: cannot decode PNG: %s", path, c->msg);
  }
  png_set_read_fn(png, c, png_read_mem);
  png_set_user_limits(png, IMG_MAX_SIDE, IMG_MAX_SIDE);
  png_read_info(png, info);
  int ct = png_get_color_type(png, info), bd = png_get_bit_depth(png, info);
  if (bd == 16) png_set_strip_16(png);
  if (ct == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (ct == PNG_COLOR_TYPE_GRAY && bd < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (ct & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  int64_t w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  int ch = png_get_channels(png, info);
  if ((ch != 1 && ch != 3) || png_get_rowbytes(png, info) != (size_t)(w * ch)) {
    snprintf(c->msg, sizeof c->msg, "unexpected layout after conversion (%d channels)", ch);
    png_longjmp(png, 1);
  }
  if (ts_tensor_init(out, TS_U8, ts_shape3(h, w, ch))) {
    snprintf(c->msg, sizeof c->msg, "out of memory for %lldx%lld pixels", (long long)w, (long long)h);
    png_longjmp(png, 1);
  }
  c->rows = malloc(sizeof(png_bytep) * (size_t)h);
  if (!c->rows) {
    snprintf(c->msg, sizeof c->msg, "out of memory");
    png_longjmp(png, 1);
  }
  for (int64_t y = 0; y < h; y++) c->rows[y] = (uint8_t *)out->data + y * w * ch;
  png_read_image(png, c->rows);
  png_read_end(png, NULL);
  png_destroy_read_struct(&png, &info, NULL);
  free(c->rows);
  c->rows = NULL;
  return TS_OK;
}

typedef struct {
  struct jpeg_error_mgr pub;
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX];
} jpg_err;

static void jpg_error_exit(j_common_ptr ci) {
  jpg_err *e = (jpg_err *)ci->err;
  e->pub.format_message(ci, e->msg);
  longjmp(e->jb, 1);
}
static void jpg_output_message(j_common_ptr ci) {} /* the library never prints */
/* Warnings are ignored, except a premature end of data: a truncated JPEG is an error (as in PIL),
 * not an image padded with gray. */
static void jpg_emit_message(j_common_ptr ci, int level) {
  if (level < 0 && ci->err->msg_code == JWRN_JPEG_EOF) ci->err->error_exit(ci);
}

typedef struct {
  struct jpeg_decompress_struct ci;
  jpg_err err;
} jpg_ctx;

static int decode_jpeg(const char *path, const uint8_t *buf, size_t len, jpg_ctx *c, ts_tensor *out) {
  c->ci.err = jpeg_std_error(&c->err.pub);
  c->err.pub.error_exit = jpg_error_exit;
  c->err.pub.output_message = jpg_output_message;
  c->err.pub.emit_message = jpg_emit_message;
  c->err.msg[0] = 0;
  if (setjmp(c->err.jb)) {
    jpeg_destroy_decompress(&c->ci);
    ts_tensor_free(out);
    return ts_error_set(TS_EFORMAT, "%s: cannot decode JPEG: %s", path, c->err.msg);
  }
  jpeg_create_decompress(&c->ci);
  jpeg_mem_src(&c->ci, (unsigned char *)buf, (unsigned long)len);
  jpeg_read_header(&c->ci, TRUE);
  if (c->ci.jpeg_color_space == JCS_CMYK || c->ci.jpeg_color_space == JCS_YCCK) {
    snprintf(c->err.msg, sizeof c->err.msg, "CMYK JPEG images are not supported");
    longjmp(c->err.jb, 1);
  }
  if (c->ci.image_width > IMG_MAX_SIDE || c->ci.image_height > IMG_MAX_SIDE) {
    snprintf(c->err.msg, sizeof c->err.msg, "image %ux%u is larger than %d pixels on a side", c->ci.image_width,
             c->ci.image_height, IMG_MAX_SIDE);
    longjmp(c->err.jb, 1);
  }
  c->ci.out_color_space = c->ci.jpeg_color_space == JCS_GRAYSCALE ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&c->ci);
  int64_t w = c->ci.output_width, h = c->ci.output_height, ch = c->ci.output_components;
  if (ts_tensor_init(out, TS_U8, ts_shape3(h, w, ch))) {
    snprintf(c->err.msg, sizeof c->err.msg, "out of memory for %lldx%lld pixels", (long long)w, (long long)h);
    longjmp(c->err.jb, 1);
  }
  while (c->ci.output_scanline < c->ci.output_height) {
    JSAMPROW row = (uint8_t *)out->data + (int64_t)c->ci.output_scanline * w * ch;
    jpeg_read_scanlines(&c->ci, &row, 1);
  }
  jpeg_finish_decompress(&c->ci);
  jpeg_destroy_decompress(&c->ci);
  return TS_OK;
}

/* Decodes a PNG or JPEG file (by content) into u8 (H,W,C), C = 1 or 3. */
static int decode_image(const char *path, ts_tensor *out) {
  memset(out, 0, sizeof *out);
  char *text;
  size_t len;
  int rc = ts__file_read_all(path, "cannot open", &text, &len);
  if (rc) return rc;
  uint8_t *buf = (uint8_t *)text;
  static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (len >= 8 && !memcmp(buf, png_sig, 8)) {
    png_ctx *c = calloc(1, sizeof *c); /* on the heap: survives longjmp without volatile games */
    if (!c) rc = ts_error_set(TS_ENOMEM, "%s: out of memory", path);
    else {
      c->buf = buf;
      c->len = len;
      rc = decode_png(path, c, out);
      free(c);
    }
  } else if (len >= 3 && buf[0] == 0xff && buf[1] == 0xd8 && buf[2] == 0xff) {
    jpg_ctx *c = calloc(1, sizeof *c);
    if (!c) rc = ts_error_set(TS_ENOMEM, "%s: out of memory", path);
    else {
      rc = decode_jpeg(path, buf, len, c, out);
      free(c);
    }
  } else {
    rc = ts_error_set(TS_EFORMAT, "%s: not a PNG or JPEG image (%zu bytes, unknown signature)", path, len);
  }
  free(buf);
  return rc;
}

/* ---- the source ---- */

static int64_t folder_len(void *self) { return ((folder_src *)self)->n; }

static int folder_get(void *self, int64_t i, ts_sample *out) {
  folder_src *f = self;
  int rc = decode_image(f->files[i].path, &out->data);
  if (rc) return rc;
  out->label = f->files[i].label;
  return TS_OK;
}

static int64_t folder_label(void *self, int64_t i) { return ((folder_src *)self)->files[i].label; }
static int folder_classes(void *self) { return ((folder_src *)self)->nclasses; }
static int folder_sample_name(void *self, int64_t i, char *buf, size_t cap) {
  snprintf(buf, cap, "%s", ((folder_src *)self)->files[i].path);
  return TS_OK;
}

static void folder_destroy(void *self) {
  folder_src *f = self;
  if (!f) return;
  for (int64_t i = 0; i < f->n; i++) free(f->files[i].path);
  for (int c = 0; c < f->nclasses; c++) free(f->classes[c]);
  free(f->files);
  free(f->classes);
  free(f);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int has_image_ext(const char *name) {
  const char *dot = strrchr(name, '.');
  return dot && (!strcasecmp(dot, ".png") || !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

/* Sorted names of the entries of dir, skipping names that start with '.'. */
static int list_dir(const char *dir, char ***names, int *count) {
  *names = NULL;
  *count = 0;
  DIR *d = opendir(dir);
  if (!d) {
    int e = errno;
    return ts_error_set(e == ENOENT ? TS_ENOTFOUND : TS_EIO, "%s: cannot open folder: %s", dir, strerror(e));
  }
  char **v = NULL;
  int n = 0, cap = 0, rc = TS_OK;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      char **nv = realloc(v, sizeof *v * (size_t)cap);
      if (!nv) {
        rc = ts_error_set(TS_ENOMEM, "%s: out of memory listing the folder", dir);
        break;
      }
      v = nv;
    }
    if (!(v[n] = strdup(de->d_name))) {
      rc = ts_error_set(TS_ENOMEM, "%s: out of memory listing the folder", dir);
      break;
    }
    n++;
  }
  closedir(d);
  if (rc) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
    return rc;
  }
  if (n) qsort(v, (size_t)n, sizeof *v, cmp_str);
  *names = v;
  *count = n;
  return TS_OK;
}

static void free_names(char **v, int n) {
  for (int i = 0; i < n; i++) free(v[i]);
  free(v);
}

static int add_file(folder_src *f, char *path, int32_t label) {
  if (f->n == f->cap) {
    int64_t nc = f->cap ? 2 * f->cap : 256;
    img_file *nf = realloc(f->files, sizeof *nf * (size_t)nc);
    if (!nf) {
      free(path);
      return ts_error_set(TS_ENOMEM, "image folder: out of memory");
    }
    f->files = nf;
    f->cap = nc;
  }
  f->files[f->n].path = path;
  f->files[f->n].label = label;
  f->n++;
  return TS_OK;
}

/* Adds the images under dir (recursively, sorted) with `label`. */
static int scan_class(folder_src *f, const char *dir, int32_t label, int depth) {
  if (depth > 32) return ts_error_set(TS_EFORMAT, "%s: folders nested too deeply (symlink loop?)", dir);
  char **names;
  int n;
  int rc = list_dir(dir, &names, &n);
  for (int i = 0; rc == TS_OK && i < n; i++) {
    size_t len = strlen(dir) + strlen(names[i]) + 2;
    char *p = malloc(len);
    if (!p) {
      rc = ts_error_set(TS_ENOMEM, "image folder: out of memory");
      break;
    }
    snprintf(p, len, "%s/%s", dir, names[i]);
    struct stat st;
    if (stat(p, &st) != 0) { /* dangling link: skip like other non-images */
      free(p);
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      rc = scan_class(f, p, label, depth + 1);
      free(p);
    } else if (S_ISREG(st.st_mode) && has_image_ext(names[i])) {
      rc = add_file(f, p, label);
    } else {
      free(p);
    }
  }
  free_names(names, n);
  return rc;
}

static const ts_source_vtable folder_vt = {"image-folder", folder_len,     folder_get,
                                           folder_label,   folder_classes, folder_destroy,
                                           folder_sample_name};

/* given == NULL: the classes are root's sub-folders; else the class list is given (a copy is
 * kept) and every sub-folder must be one of them. */
static int open_folder(const char *root, const char *const *given, int ngiven, ts_source **out) {
  *out = NULL;
  if (!root) return ts_error_set(TS_EINVAL, "ts_source_image_folder: NULL root");
  if (given && ngiven <= 0) return ts_error_set(TS_EINVAL, "ts_source_image_folder_classes: no classes");
  folder_src *f = calloc(1, sizeof *f);
  if (!f) return ts_error_set(TS_ENOMEM, "image folder: out of memory");
  char **names;
  int n;
  int rc = list_dir(root, &names, &n);
  if (rc) {
    free(f);
    return rc;
  }
  f->classes = calloc((size_t)(given ? ngiven : n ? n : 1), sizeof *f->classes);
  if (!f->classes) rc = ts_error_set(TS_ENOMEM, "image folder: out of memory");
  for (int c = 0; given && rc == TS_OK && c < ngiven; c++) {
    if (!(f->classes[c] = strdup(given[c] ? given[c] : "")))
      rc = ts_error_set(TS_ENOMEM, "image folder: out of memory");
    f->nclasses = c + 1;
  }
  for (int i = 0; rc == TS_OK && i < n; i++) {
    size_t len = strlen(root) + strlen(names[i]) + 2;
    char *p = malloc(len);
    if (!p) {
      rc = ts_error_set(TS_ENOMEM, "image folder: out of memory");
      break;
    }
    snprintf(p, len, "%s/%s", root, names[i]);
    struct stat st;
    if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
      int64_t before = f->n;
      int label = f->nclasses;
      if (given) { /* the class of this name in the given list */
        for (label = 0; label < ngiven && strcmp(f->classes[label], names[i]); label++) {}
        if (label == ngiven) {
          char list[512];
          size_t len = 0;
          list[0] = 0;
          for (int c = 0; c < ngiven; c++) ts__app(list, sizeof list, &len, "%s%s", c ? ", " : "", f->classes[c]);
          rc = ts_error_set(TS_EFORMAT, "%s: class '%s' is not a class of the training split (%d: %s)", root,
                            names[i], ngiven, list);
          free(p);
          break;
        }
      } else {
        f->classes[f->nclasses++] = names[i];
        names[i] = NULL;
      }
      rc = scan_class(f, p, label, 0);
      if (rc == TS_OK && f->n == before)
        rc = ts_error_set(TS_EFORMAT, "%s: class folder '%s' holds no image (.png, .jpg, .jpeg)", p,
                          f->classes[label]);
    }
    free(p);
  }
  free_names(names, n);
  if (rc == TS_OK && f->n == 0)
    rc = ts_error_set(TS_EFORMAT, "%s: image folder has no class sub-folders (expected %s/<class>/<image>)", root,
                      root);
  if (rc == TS_OK && given) { /* samples class by class in the given order, like the training split */
    for (int64_t i = 1; i < f->n; i++) {
      img_file x = f->files[i];
      int64_t j = i;
      for (; j > 0 && f->files[j - 1].label > x.label; j--) f->files[j] = f->files[j - 1];
      f->files[j] = x;
    }
  }
  if (rc == TS_OK) rc = ts_source_create(&folder_vt, f, out);
  if (rc) folder_destroy(f);
  return rc;
}

int ts_source_image_folder(const char *root, ts_source **out) { return open_folder(root, NULL, 0, out); }

int ts_source_image_folder_classes(const char *root, const char *const *classes, int nclasses,
                                   ts_source **out) {
  if (!classes) {
    if (out) *out = NULL;
    return ts_error_set(TS_EINVAL, "ts_source_image_folder_classes: NULL classes");
  }
  return open_folder(root, classes, nclasses, out);
}

const char *const *ts_source_class_names(const ts_source *s, int *n) {
  const ts_source_vtable *vt;
  folder_src *f = ts__source_self(s, &vt);
  if (n) *n = 0;
  if (!f || vt->get != folder_get) return NULL;
  if (n) *n = f->nclasses;
  return (const char *const *)f->classes;
}
