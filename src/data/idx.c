/* IDX reader (the MNIST file format): magic 0x0000 | type | ndim, then ndim big-endian u32 sizes,
 * then the data. Read through zlib's gz* API, which also reads uncompressed files.
 * ts_source_mnist wraps a split as a source, reading its images as they are asked for. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include <zlib.h>

#include "tessera/data.h"
#include "../base/rfile.h"

static int read_full(gzFile f, void *buf, size_t n, const char *path, const char *what) {
  size_t got = 0;
  while (got < n) {
    unsigned chunk = (unsigned)((n - got) > (1u << 30) ? (1u << 30) : (n - got));
    int r = gzread(f, (char *)buf + got, chunk);
    if (r < 0) {
      int e;
      const char *m = gzerror(f, &e);
      return ts_error_set(TS_EIO, "%s: read error in %s: %s", path, what, m);
    }
    if (r == 0)
      return ts_error_set(TS_EFORMAT, "%s: truncated: %s needs %zu bytes, file ends after %zu", path,
                          what, n, got);
    got += (size_t)r;
  }
  return TS_OK;
}

/* Opens an IDX file and reads its header: *f positioned at the data, *sh its shape, *total the
 * data's bytes (checked against what the file can hold). */
static int idx_open(const char *path, gzFile *fo, ts_shape *sh, int64_t *total_out) {
  *fo = NULL;
  int fd;
  uint64_t fsize;
  int rc = ts__file_open_read(path, "cannot open", &fd, &fsize);
  if (rc) return rc;
  gzFile f = gzdopen(fd, "rb");
  if (!f) {
    close(fd);
    return ts_error_set(TS_ENOMEM, "%s: cannot open: out of memory", path);
  }
  unsigned char hdr[4];
  rc = read_full(f, hdr, 4, path, "header");
  if (rc) goto fail;
  if (hdr[0] != 0 || hdr[1] != 0) {
    rc = ts_error_set(TS_EFORMAT, "%s: bad IDX magic %02x%02x%02x%02x (expected 0000 type ndim)", path,
                      hdr[0], hdr[1], hdr[2], hdr[3]);
    goto fail;
  }
  if (hdr[2] != 0x08) {
    rc = ts_error_set(TS_EFORMAT, "%s: IDX element type 0x%02x unsupported (only 0x08 unsigned byte)",
                      path, hdr[2]);
    goto fail;
  }
  int ndim = hdr[3];
  if (ndim < 1 || ndim > TS_MAX_DIMS) {
    rc = ts_error_set(TS_EFORMAT, "%s: IDX header says %d dimensions (1..%d supported)", path, ndim,
                      TS_MAX_DIMS);
    goto fail;
  }
  unsigned char db[4 * TS_MAX_DIMS];
  rc = read_full(f, db, 4 * (size_t)ndim, path, "dimension sizes");
  if (rc) goto fail;
  memset(sh, 0, sizeof *sh);
  sh->ndim = ndim;
  int64_t total = 1;
  for (int i = 0; i < ndim; i++) {
    uint32_t d = ((uint32_t)db[4 * i] << 24) | ((uint32_t)db[4 * i + 1] << 16) |
                 ((uint32_t)db[4 * i + 2] << 8) | db[4 * i + 3];
    if (d == 0 || d > (1u << 30) || total > ((int64_t)1 << 40) / d) {
      rc = ts_error_set(TS_EFORMAT, "%s: implausible dimension %d size %u", path, i, d);
      goto fail;
    }
    sh->dims[i] = d;
    total *= d;
  }
  /* Never allocate more than the file can hold (a lying header must not exhaust memory): a plain
   * file has to contain the data; deflate expands at most ~1032:1. */
  if (gzdirect(f)) {
    int64_t have = (int64_t)fsize - 4 - 4 * (int64_t)ndim;
    if (total > have) {
      rc = ts_error_set(TS_EFORMAT, "%s: truncated: data needs %lld bytes, file ends after %lld", path,
                        (long long)total, (long long)(have > 0 ? have : 0));
      goto fail;
    }
  } else if (total > (int64_t)fsize * 1032 + 4096) {
    rc = ts_error_set(TS_EFORMAT, "%s: truncated: data needs %lld bytes, more than a %lld-byte gzip file holds",
                      path, (long long)total, (long long)fsize);
    goto fail;
  }
  *fo = f;
  *total_out = total;
  return TS_OK;
fail:
  gzclose(f);
  return rc;
}

int ts_idx_load(const char *path, ts_tensor *out) {
  memset(out, 0, sizeof *out);
  gzFile f;
  ts_shape sh;
  int64_t total;
  int rc = idx_open(path, &f, &sh, &total);
  if (rc) return rc;
  rc = ts_tensor_init(out, TS_U8, sh);
  if (!rc) rc = read_full(f, out->data, (size_t)total, path, "data");
  if (rc) ts_tensor_free(out);
  gzclose(f);
  return rc;
}

static int find_file(char *buf, size_t cap, const char *dir, const char *split, const char *kind) {
  struct stat st;
  snprintf(buf, cap, "%s/%s-%s.gz", dir, split, kind);
  if (stat(buf, &st) == 0) return TS_OK;
  snprintf(buf, cap, "%s/%s-%s", dir, split, kind);
  if (stat(buf, &st) == 0) return TS_OK;
  return ts_error_set(TS_ENOTFOUND, "%s/%s-%s[.gz]: no such file", dir, split, kind);
}

/* Finds a split's files, reads the images' header (*f left at their data) and every label, and
 * checks that they match: the common start of ts_mnist_load and the source. */
static int mnist_open(const char *dir, const char *split, char *ip, size_t ipcap, gzFile *f, ts_shape *ish,
                      ts_tensor *labels) {
  char lp[1024];
  int64_t total;
  int rc = find_file(ip, ipcap, dir, split, "images-idx3-ubyte");
  if (rc) return rc;
  rc = find_file(lp, sizeof lp, dir, split, "labels-idx1-ubyte");
  if (rc) return rc;
  rc = idx_open(ip, f, ish, &total);
  if (rc) return rc;
  rc = ts_idx_load(lp, labels);
  if (!rc && (ish->ndim != 3 || labels->shape.ndim != 1 || ish->dims[0] != labels->shape.dims[0])) {
    char a[96], b[96];
    rc = ts_error_set(TS_EFORMAT, "%s / %s: images %s and labels %s do not match (expected (N,H,W) and (N))",
                      ip, lp, ts_shape_str(ish, a, sizeof a), ts_shape_str(&labels->shape, b, sizeof b));
  }
  const uint8_t *l = labels->data;
  for (int64_t i = 0; rc == TS_OK && i < labels->shape.dims[0]; i++)
    if (l[i] >= 10) rc = ts_error_set(TS_ERANGE, "%s: label %u at record %lld out of range 0..9", lp, l[i], (long long)i);
  if (rc) {
    ts_tensor_free(labels);
    gzclose(*f);
    *f = NULL;
  }
  return rc;
}

int ts_mnist_load(const char *dir, const char *split, ts_tensor *images, ts_tensor *labels) {
  memset(images, 0, sizeof *images);
  char ip[1024];
  gzFile f;
  ts_shape sh;
  int rc = mnist_open(dir, split, ip, sizeof ip, &f, &sh, labels);
  if (rc) return rc;
  rc = ts_tensor_init(images, TS_U8, sh);
  if (!rc) rc = read_full(f, images->data, (size_t)ts_tensor_numel(images), ip, "data");
  gzclose(f);
  if (rc) {
    ts_tensor_free(images);
    ts_tensor_free(labels);
  }
  return rc;
}

/* ---- the MNIST source: samples u8 (H,W,1) from the (N,H,W) images ----
 * The images are read (inflated) on demand, in file order, up to the last one asked for: a split
 * that is never read costs its header and labels, and one limited to its first N samples
 * (data.train_limit, data.test_limit, an evaluation under TESSERA_MAX_STEPS) reads those only.
 * Samples are asked for from several threads (the pipeline's workers): `ready` is read without
 * the lock, and extended under it. A read error is kept and returned to every later call. */

#define MNIST_CHUNK 4096 /* images read at least at a time once reading starts */

typedef struct {
  ts_tensor labels;
  uint8_t *images; /* n * h * w bytes, the first `ready` images read */
  int64_t n, h, w;
  _Atomic int64_t ready;
  pthread_mutex_t mu;
  gzFile f; /* at image `ready`; closed once every image is read or on an error */
  int err;
  char errmsg[512];
  char path[1024]; /* the images file, for messages */
} mnist_src;

static int64_t mnist_len(void *self) { return ((mnist_src *)self)->n; }

/* Reads images up to (and including) i. */
static int mnist_fill(mnist_src *m, int64_t i) {
  pthread_mutex_lock(&m->mu);
  int rc = m->err;
  int64_t at = atomic_load_explicit(&m->ready, memory_order_relaxed), sz = m->h * m->w;
  if (!rc && at <= i) {
    if (!m->images && !(m->images = malloc((size_t)(m->n * sz))))
      rc = ts_error_set(TS_ENOMEM, "%s: out of memory for %lld images", m->path, (long long)m->n);
    int64_t to = i + 1 > at + MNIST_CHUNK ? i + 1 : at + MNIST_CHUNK;
    if (to > m->n) to = m->n;
    if (!rc) rc = read_full(m->f, m->images + at * sz, (size_t)((to - at) * sz), m->path, "data");
    if (rc) {
      m->err = rc;
      snprintf(m->errmsg, sizeof m->errmsg, "%s", ts_last_error());
    } else {
      atomic_store_explicit(&m->ready, to, memory_order_release);
    }
    if (rc || to == m->n) {
      gzclose(m->f);
      m->f = NULL;
    }
  } else if (rc) {
    ts_error_set(rc, "%s", m->errmsg);
  }
  pthread_mutex_unlock(&m->mu);
  return rc;
}

static int mnist_get(void *self, int64_t i, ts_sample *out) {
  mnist_src *m = self;
  int rc = i < atomic_load_explicit(&m->ready, memory_order_acquire) ? TS_OK : mnist_fill(m, i);
  if (!rc) rc = ts_tensor_init(&out->data, TS_U8, ts_shape3(m->h, m->w, 1));
  if (rc) return rc;
  memcpy(out->data.data, m->images + i * m->h * m->w, (size_t)(m->h * m->w));
  out->label = ((const uint8_t *)m->labels.data)[i];
  return TS_OK;
}

static int64_t mnist_label(void *self, int64_t i) { return ((const uint8_t *)((mnist_src *)self)->labels.data)[i]; }
static int mnist_classes(void *self) { return 10; }
static int mnist_sample_name(void *self, int64_t i, char *buf, size_t cap) {
  snprintf(buf, cap, "%s, image %lld", ((mnist_src *)self)->path, (long long)i);
  return TS_OK;
}

static void mnist_destroy(void *self) {
  mnist_src *m = self;
  if (m->f) gzclose(m->f);
  pthread_mutex_destroy(&m->mu);
  free(m->images);
  ts_tensor_free(&m->labels);
  free(m);
}

int ts_source_mnist(const char *dir, const char *split, ts_source **out) {
  *out = NULL;
  if (!dir) dir = TS_FASHION_MNIST_DIR;
  if (!split || !strcmp(split, "test")) split = split ? "t10k" : "train";
  mnist_src *m = calloc(1, sizeof *m);
  if (!m) return ts_error_set(TS_ENOMEM, "ts_source_mnist: out of memory");
  ts_shape sh;
  int rc = mnist_open(dir, split, m->path, sizeof m->path, &m->f, &sh, &m->labels);
  if (rc) {
    free(m);
    return rc;
  }
  pthread_mutex_init(&m->mu, NULL);
  m->n = sh.dims[0];
  m->h = sh.dims[1];
  m->w = sh.dims[2];
  static const ts_source_vtable vt = {"mnist",       mnist_len,     mnist_get,        mnist_label,
                                      mnist_classes, mnist_destroy, mnist_sample_name};
  rc = ts_source_create(&vt, m, out);
  if (rc) mnist_destroy(m);
  return rc;
}
