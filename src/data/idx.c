/* IDX reader (the MNIST file format): magic 0x0000 | type | ndim, then ndim big-endian u32 sizes,
 * then the data. Read through zlib's gz* API, which also reads uncompressed files. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "tessera/data.h"

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

int ts_idx_load(const char *path, ts_tensor *out) {
  memset(out, 0, sizeof *out);
  struct stat st;
  if (stat(path, &st) != 0) return ts_error_set(TS_ENOTFOUND, "%s: no such file", path);
  gzFile f = gzopen(path, "rb");
  if (!f) return ts_error_set(TS_EIO, "%s: cannot open", path);
  unsigned char hdr[4];
  int rc = read_full(f, hdr, 4, path, "header");
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
  ts_shape sh;
  memset(&sh, 0, sizeof sh);
  sh.ndim = ndim;
  int64_t total = 1;
  for (int i = 0; i < ndim; i++) {
    uint32_t d = ((uint32_t)db[4 * i] << 24) | ((uint32_t)db[4 * i + 1] << 16) |
                 ((uint32_t)db[4 * i + 2] << 8) | db[4 * i + 3];
    if (d == 0 || d > (1u << 30) || total > ((int64_t)1 << 40) / d) {
      rc = ts_error_set(TS_EFORMAT, "%s: implausible dimension %d size %u", path, i, d);
      goto fail;
    }
    sh.dims[i] = d;
    total *= d;
  }
  rc = ts_tensor_init(out, TS_U8, sh);
  if (rc) goto fail;
  rc = read_full(f, out->data, (size_t)total, path, "data");
  if (rc) {
    ts_tensor_free(out);
    goto fail;
  }
  gzclose(f);
  return TS_OK;
fail:
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

int ts_mnist_load(const char *dir, const char *split, ts_tensor *images, ts_tensor *labels) {
  char ip[1024], lp[1024];
  int rc = find_file(ip, sizeof ip, dir, split, "images-idx3-ubyte");
  if (rc) return rc;
  rc = find_file(lp, sizeof lp, dir, split, "labels-idx1-ubyte");
  if (rc) return rc;
  rc = ts_idx_load(ip, images);
  if (rc) return rc;
  rc = ts_idx_load(lp, labels);
  if (rc) {
    ts_tensor_free(images);
    return rc;
  }
  if (images->shape.ndim != 3 || labels->shape.ndim != 1 || images->shape.dims[0] != labels->shape.dims[0]) {
    char a[96], b[96];
    rc = ts_error_set(TS_EFORMAT, "%s / %s: images %s and labels %s do not match (expected (N,H,W) and (N))",
                      ip, lp, ts_shape_str(&images->shape, a, sizeof a),
                      ts_shape_str(&labels->shape, b, sizeof b));
  }
  const uint8_t *l = labels->data;
  for (int64_t i = 0; rc == TS_OK && i < labels->shape.dims[0]; i++)
    if (l[i] >= 10) rc = ts_error_set(TS_ERANGE, "%s: label %u at record %lld out of range 0..9", lp, l[i], (long long)i);
  if (rc) {
    ts_tensor_free(images);
    ts_tensor_free(labels);
  }
  return rc;
}
