/* CIFAR-10 / CIFAR-100 binary version, exactly as distributed:
 *   cifar-10-batches-bin/data_batch_1.bin .. data_batch_5.bin, test_batch.bin:
 *     records of 1 label byte (0..9) + 3072 pixel bytes
 *   cifar-100-binary/train.bin, test.bin:
 *     records of 1 coarse label byte (0..19) + 1 fine label byte (0..99) + 3072 pixel bytes
 * The pixels are three 32x32 planes (R, then G, then B), each row-major. Samples are u8 (32,32,3)
 * (HWC); the label is the fine label for CIFAR-100. The files are memory-mapped; every label is
 * checked when the source is opened. `dir` may also be the folder that contains the extracted
 * cifar-10-batches-bin / cifar-100-binary folder. */
#include <stdio.h>
#include <stdlib.h>

#include "source_internal.h"

#define CIFAR_PIX 3072

typedef struct {
  int nfiles;
  ts__mapped map[5];
  int64_t first[6]; /* first global index of each file; first[nfiles] = total */
  int cifar100;
  size_t rec; /* record size */
  char paths[5][4352]; /* the files, for messages */
} cifar_src;

static int64_t cifar_len(void *self) {
  cifar_src *c = self;
  return c->first[c->nfiles];
}

static const uint8_t *cifar_record(cifar_src *c, int64_t i) {
  int f = 0;
  while (i >= c->first[f + 1]) f++;
  return c->map[f].data + (size_t)(i - c->first[f]) * c->rec;
}

static int cifar_get(void *self, int64_t i, ts_sample *out) {
  cifar_src *c = self;
  const uint8_t *r = cifar_record(c, i);
  int rc = ts_tensor_init(&out->data, TS_U8, ts_shape3(32, 32, 3));
  if (rc) return rc;
  const uint8_t *px = r + c->rec - CIFAR_PIX;
  uint8_t *d = out->data.data;
  for (int p = 0; p < 1024; p++) {
    d[3 * p + 0] = px[p];
    d[3 * p + 1] = px[1024 + p];
    d[3 * p + 2] = px[2048 + p];
  }
  out->label = r[c->cifar100 ? 1 : 0];
  return TS_OK;
}

static int64_t cifar_label(void *self, int64_t i) {
  cifar_src *c = self;
  return cifar_record(c, i)[c->cifar100 ? 1 : 0];
}

static int cifar_sample_name(void *self, int64_t i, char *buf, size_t cap) {
  cifar_src *c = self;
  int f = 0;
  while (i >= c->first[f + 1]) f++;
  snprintf(buf, cap, "%s, record %lld", c->paths[f], (long long)(i - c->first[f]));
  return TS_OK;
}

static int cifar_classes(void *self) { return ((cifar_src *)self)->cifar100 ? 100 : 10; }

static void cifar_destroy(void *self) {
  cifar_src *c = self;
  for (int f = 0; f < c->nfiles; f++) ts__unmap_file(&c->map[f]);
  free(c);
}

/* Resolves the folder holding the batch files: dir itself, or dir/<sub> (the archive's folder). */
static const char *cifar_dir(const char *dir, const char *probe, const char *sub, char *buf, size_t cap) {
  struct stat st;
  snprintf(buf, cap, "%s/%s", dir, probe);
  if (stat(buf, &st) == 0) return dir;
  snprintf(buf, cap, "%s/%s/%s", dir, sub, probe);
  if (stat(buf, &st) == 0) {
    snprintf(buf, cap, "%s/%s", dir, sub);
    return buf;
  }
  return dir;
}

int ts_source_cifar(const char *dir, int cifar100, int train, ts_source **out) {
  *out = NULL;
  if (!dir) return ts_error_set(TS_EINVAL, "ts_source_cifar: NULL directory");
  cifar_src *c = calloc(1, sizeof *c);
  if (!c) return ts_error_set(TS_ENOMEM, "ts_source_cifar: out of memory");
  c->cifar100 = cifar100 != 0;
  c->rec = CIFAR_PIX + (cifar100 ? 2 : 1);
  const char *names[5];
  int n = 0;
  if (cifar100) {
    names[n++] = train ? "train.bin" : "test.bin";
  } else if (train) {
    static const char *b[5] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                               "data_batch_4.bin", "data_batch_5.bin"};
    for (; n < 5; n++) names[n] = b[n];
  } else {
    names[n++] = "test_batch.bin";
  }
  char dbuf[4096], path[4352];
  const char *d = cifar_dir(dir, names[0], cifar100 ? "cifar-100-binary" : "cifar-10-batches-bin", dbuf, sizeof dbuf);
  int rc = TS_OK;
  for (int f = 0; f < n && rc == TS_OK; f++) {
    snprintf(path, sizeof path, "%s/%s", d, names[f]);
    snprintf(c->paths[f], sizeof c->paths[f], "%s", path);
    rc = ts__map_file(path, &c->map[f]);
    if (rc) {
      if (rc == TS_ENOTFOUND)
        ts_error_set(rc, "%s: no such file (CIFAR-%d binary %s split: %s)", path, cifar100 ? 100 : 10,
                     train ? "train" : "test", cifar100 ? "train.bin / test.bin" : "data_batch_1..5.bin / test_batch.bin");
      break;
    }
    c->nfiles = f + 1;
    size_t sz = c->map[f].size;
    if (sz == 0 || sz % c->rec) {
      rc = ts_error_set(TS_EFORMAT, "%s: size %zu bytes is not a positive multiple of the %zu-byte CIFAR-%d record%s",
                        path, sz, c->rec, cifar100 ? 100 : 10,
                        sz % c->rec ? " (truncated, or not CIFAR binary?)" : "");
      break;
    }
    int64_t nrec = (int64_t)(sz / c->rec);
    const uint8_t *p = c->map[f].data;
    for (int64_t r = 0; r < nrec; r++, p += c->rec) {
      if (!cifar100 && p[0] >= 10) {
        rc = ts_error_set(TS_ERANGE, "%s: record %lld: label %u out of range 0..9", path, (long long)r, p[0]);
        break;
      }
      if (cifar100 && (p[0] >= 20 || p[1] >= 100)) {
        rc = ts_error_set(TS_ERANGE, "%s: record %lld: %s label %u out of range 0..%d", path, (long long)r,
                          p[0] >= 20 ? "coarse" : "fine", p[0] >= 20 ? p[0] : p[1], p[0] >= 20 ? 19 : 99);
        break;
      }
    }
    c->first[f + 1] = c->first[f] + nrec;
  }
  if (rc == TS_OK) {
    static const ts_source_vtable vt10 = {"cifar10", cifar_len, cifar_get, cifar_label, cifar_classes, cifar_destroy,
                                          cifar_sample_name};
    static const ts_source_vtable vt100 = {"cifar100", cifar_len, cifar_get, cifar_label, cifar_classes, cifar_destroy,
                                           cifar_sample_name};
    rc = ts_source_create(cifar100 ? &vt100 : &vt10, c, out);
  }
  if (rc) cifar_destroy(c);
  return rc;
}
