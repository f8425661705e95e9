/* Writer of Tessera record shards (format: source_internal.h, docs/data.md).
 *
 * Sample i of the source goes to shard i % S as its record i / S. Samples are fetched and
 * serialised by ts_threads_get() OpenMP threads a chunk at a time (decoding an image folder is the
 * slow part of a conversion) and written in order, so the output does not depend on the thread
 * count. Each shard is written to a temporary file next to its final name ("<name>.tmp-PID-N",
 * created with O_EXCL), then fsync'ed; only when every shard is complete are they renamed into
 * place and the folder fsync'ed. On any error every temporary (and any shard already renamed by
 * this call) is removed. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <zlib.h>

#include "source_internal.h"

typedef struct {
  uint8_t *buf;
  size_t len; /* padded to 8 */
  int64_t label;
  int rc;
  char msg[512];
} slot;

static uint32_t crc(const uint8_t *p, size_t n) {
  uLong c = crc32(0L, Z_NULL, 0);
  while (n) {
    uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
    c = crc32(c, p, k);
    p += k;
    n -= k;
  }
  return (uint32_t)c;
}

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

static size_t tensor_bytes(const ts_tensor *t) { return 16 + 8 * (size_t)t->shape.ndim + pad8(ts_tensor_nbytes(t)); }

static int check_tensor(const ts_tensor *t, const char *what, int64_t gi, const char *kind) {
  if (!ts_dtype_size(t->dtype) || t->shape.ndim < 0 || t->shape.ndim > TS_MAX_DIMS)
    return ts_error_set(TS_EINVAL, "%s source: sample %lld: %s tensor has an invalid dtype or rank", kind,
                        (long long)gi, what);
  for (int k = 0; k < t->shape.ndim; k++)
    if (t->shape.dims[k] < 0 || t->shape.dims[k] > ((int64_t)1 << 40))
      return ts_error_set(TS_EINVAL, "%s source: sample %lld: %s tensor has dimension %lld", kind, (long long)gi, what,
                          (long long)t->shape.dims[k]);
  if (ts_tensor_nbytes(t) && !t->data)
    return ts_error_set(TS_EINVAL, "%s source: sample %lld: %s tensor has no data", kind, (long long)gi, what);
  return TS_OK;
}

static uint8_t *put_tensor(uint8_t *p, const ts_tensor *t) {
  memset(p, 0, 8);
  p[0] = (uint8_t)t->dtype;
  p[1] = (uint8_t)t->shape.ndim;
  p += 8;
  for (int k = 0; k < t->shape.ndim; k++, p += 8) ts__wr64(p, (uint64_t)t->shape.dims[k]);
  size_t nb = ts_tensor_nbytes(t);
  ts__wr64(p, nb);
  p += 8;
  if (nb) memcpy(p, t->data, nb);
  memset(p + nb, 0, pad8(nb) - nb);
  return p + pad8(nb);
}

/* Fetches sample gi and serialises it into sl (on a worker thread). */
static void make_record(ts_source *src, int64_t gi, int num_classes, slot *sl) {
  ts_sample smp;
  const char *kind = ts_source_kind(src);
  int rc = ts_source_get(src, gi, &smp);
  if (rc == TS_OK) rc = check_tensor(&smp.data, "data", gi, kind);
  int has_t = smp.target.data != NULL;
  if (rc == TS_OK && has_t) rc = check_tensor(&smp.target, "target", gi, kind);
  if (rc == TS_OK && (smp.label < -1 || (num_classes > 0 && smp.label >= num_classes)))
    rc = ts_error_set(TS_ERANGE, "%s source: sample %lld: label %lld out of range -1..%d", kind, (long long)gi,
                      (long long)smp.label, num_classes > 0 ? num_classes - 1 : INT32_MAX);
  size_t L = 0;
  if (rc == TS_OK) {
    L = 16 + tensor_bytes(&smp.data) + (has_t ? tensor_bytes(&smp.target) : 0) + 4;
    if (L > UINT32_MAX)
      rc = ts_error_set(TS_EUNSUPPORTED, "%s source: sample %lld: %zu bytes, more than a record holds (4 GiB)", kind,
                        (long long)gi, L);
  }
  if (rc == TS_OK) {
    sl->len = pad8(L);
    sl->buf = malloc(sl->len);
    if (!sl->buf) rc = ts_error_set(TS_ENOMEM, "%s source: sample %lld: out of memory (%zu bytes)", kind, (long long)gi, L);
  }
  if (rc == TS_OK) {
    uint8_t *p = sl->buf;
    ts__wr64(p, (uint64_t)smp.label);
    ts__wr32(p + 8, (uint32_t)L);
    ts__wr32(p + 12, has_t ? 2 : 1);
    p = put_tensor(p + 16, &smp.data);
    if (has_t) p = put_tensor(p, &smp.target);
    ts__wr32(p, crc(sl->buf, L - 4));
    memset(p + 4, 0, sl->len - L);
    sl->label = smp.label;
  }
  ts_sample_free(&smp);
  sl->rc = rc;
  if (rc) snprintf(sl->msg, sizeof sl->msg, "%s", ts_last_error());
}

static int write_all(FILE *f, const void *p, size_t n, const char *path) {
  if (n && fwrite(p, 1, n, f) != n)
    return ts_error_set(TS_EIO, "%s: cannot write: %s", path, strerror(errno));
  return TS_OK;
}

static atomic_uint g_tmp_counter;

/* Creates a fresh temporary next to `final`; its name goes to tmp. */
static int create_tmp(const char *final, char *tmp, size_t cap, FILE **out) {
  for (int tries = 0; tries < 100; tries++) {
    snprintf(tmp, cap, "%s.tmp-%d-%u", final, (int)getpid(), atomic_fetch_add(&g_tmp_counter, 1));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) return ts_error_set(TS_EIO, "%s: cannot create: %s", final, strerror(errno));
    *out = fdopen(fd, "wb");
    if (!*out) {
      close(fd);
      unlink(tmp);
      return ts_error_set(TS_EIO, "%s: cannot open a stream: %s", final, strerror(errno));
    }
    return TS_OK;
  }
  return ts_error_set(TS_EIO, "%s: cannot find a free temporary name", final);
}

/* Writes shard s of S into the (open) temporary f. */
static int write_shard(ts_source *src, int s, int S, int64_t total, FILE *f, const char *final) {
  int num_classes = ts_source_num_classes(src);
  if (num_classes < 0) num_classes = 0;
  int64_t count = total > s ? (total - s + S - 1) / S : 0;
  int nt = ts_threads_get();
  if (nt < 1) nt = 1;
  int64_t chunk = 8 * (int64_t)nt;
  uint8_t *index = malloc((size_t)(16 * count + 4));
  slot *slots = calloc((size_t)chunk, sizeof *slots);
  int rc = TS_OK;
  if (!index || !slots) rc = ts_error_set(TS_ENOMEM, "%s: out of memory for %lld records", final, (long long)count);
  static char zeros[TSR_HEADER];
  if (rc == TS_OK) rc = write_all(f, zeros, TSR_HEADER, final);
  uint64_t pos = TSR_HEADER;
  for (int64_t r0 = 0; rc == TS_OK && r0 < count; r0 += chunk) {
    int64_t m = count - r0 < chunk ? count - r0 : chunk;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1 && m > 1)
    for (int64_t j = 0; j < m; j++) make_record(src, s + (r0 + j) * S, num_classes, &slots[j]);
    for (int64_t j = 0; j < m; j++) {
      if (rc == TS_OK && slots[j].rc) rc = ts_error_set(slots[j].rc, "%s", slots[j].msg);
      if (rc == TS_OK) {
        ts__wr64(index + 16 * (r0 + j), pos);
        ts__wr64(index + 16 * (r0 + j) + 8, (uint64_t)slots[j].label);
        rc = write_all(f, slots[j].buf, slots[j].len, final);
        pos += slots[j].len;
      }
      free(slots[j].buf);
      memset(&slots[j], 0, sizeof slots[j]);
    }
  }
  if (rc == TS_OK) {
    uint64_t index_off = pos;
    ts__wr32(index + 16 * count, crc(index, (size_t)(16 * count)));
    rc = write_all(f, index, (size_t)(16 * count + 4), final);
    uint64_t fsize = index_off + 16 * (uint64_t)count + 4;
    uint8_t h[TSR_HEADER];
    memset(h, 0, sizeof h);
    memcpy(h, TSR_MAGIC, 8);
    ts__wr32(h + 8, TSR_VERSION);
    ts__wr32(h + 12, TSR_HEADER);
    ts__wr64(h + 16, (uint64_t)count);
    ts__wr64(h + 24, (uint64_t)total);
    ts__wr32(h + 32, (uint32_t)s);
    ts__wr32(h + 36, (uint32_t)S);
    ts__wr64(h + 40, index_off);
    ts__wr64(h + 48, fsize);
    ts__wr32(h + 56, (uint32_t)num_classes);
    const char *kind = ts_source_kind(src);
    size_t kl = strlen(kind);
    memcpy(h + 60, kind, kl > 16 ? 16 : kl);
    ts__wr32(h + 76, crc(h, 76));
    if (rc == TS_OK && fflush(f) != 0) rc = ts_error_set(TS_EIO, "%s: cannot write: %s", final, strerror(errno));
    if (rc == TS_OK && pwrite(fileno(f), h, TSR_HEADER, 0) != TSR_HEADER)
      rc = ts_error_set(TS_EIO, "%s: cannot write the header: %s", final, strerror(errno));
    if (rc == TS_OK && fsync(fileno(f)) != 0) rc = ts_error_set(TS_EIO, "%s: fsync failed: %s", final, strerror(errno));
  }
  free(index);
  free(slots);
  return rc;
}

int ts_records_write(ts_source *src, const char *prefix, int num_shards, char ***paths_out) {
  if (paths_out) *paths_out = NULL;
  if (!src || !prefix || !*prefix) return ts_error_set(TS_EINVAL, "ts_records_write: NULL source or empty prefix");
  if (num_shards < 1 || num_shards > 99999)
    return ts_error_set(TS_EINVAL, "%s: number of shards %d out of range 1..99999", prefix, num_shards);
  int64_t total = ts_source_len(src);
  if (total < 0) return ts_error_set(TS_EINVAL, "%s: source length %lld is negative", prefix, (long long)total);
  int S = num_shards;
  char **finals = calloc((size_t)S, sizeof *finals), **tmps = calloc((size_t)S, sizeof *tmps);
  int rc = TS_OK, renamed = 0;
  if (!finals || !tmps) rc = ts_error_set(TS_ENOMEM, "%s: out of memory", prefix);
  for (int s = 0; rc == TS_OK && s < S; s++) {
    size_t cap = strlen(prefix) + 64;
    finals[s] = malloc(cap);
    tmps[s] = malloc(cap);
    if (!finals[s] || !tmps[s]) {
      rc = ts_error_set(TS_ENOMEM, "%s: out of memory", prefix);
      break;
    }
    tmps[s][0] = 0;
    snprintf(finals[s], cap, "%s-%05d-of-%05d.tsr", prefix, s, S);
    FILE *f = NULL;
    rc = create_tmp(finals[s], tmps[s], cap, &f);
    if (rc) {
      free(tmps[s]);
      tmps[s] = NULL;
      break;
    }
    rc = write_shard(src, s, S, total, f, finals[s]);
    if (fclose(f) != 0 && rc == TS_OK) rc = ts_error_set(TS_EIO, "%s: cannot close: %s", finals[s], strerror(errno));
  }
  for (int s = 0; rc == TS_OK && s < S; s++) {
    if (rename(tmps[s], finals[s]) != 0) {
      rc = ts_error_set(TS_EIO, "%s: cannot rename the temporary into place: %s", finals[s], strerror(errno));
      break;
    }
    renamed = s + 1;
  }
  if (rc == TS_OK) { /* make the renames durable */
    const char *slash = strrchr(prefix, '/');
    char *dir = slash ? strndup(prefix, slash == prefix ? 1 : (size_t)(slash - prefix)) : strdup(".");
    int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (dfd >= 0) {
      fsync(dfd);
      close(dfd);
    }
    free(dir);
  }
  for (int s = 0; finals && tmps && s < S; s++) {
    if (rc != TS_OK) {
      if (s < renamed) unlink(finals[s]);
      else if (tmps[s] && tmps[s][0]) unlink(tmps[s]);
    }
    free(tmps[s]);
  }
  free(tmps);
  if (rc == TS_OK && paths_out) {
    *paths_out = finals;
  } else {
    for (int s = 0; finals && s < S; s++) free(finals[s]);
    free(finals);
  }
  return rc;
}
