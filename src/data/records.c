/* Reader of Tessera record shards (the format is in source_internal.h and docs/data.md).
 *
 * Opening a shard maps it read-only and verifies everything but the payloads: magic, version,
 * header CRC, the file size the header records (a truncated file is reported with the first
 * incomplete record), the index CRC and that every index entry points inside the file in order.
 * The index (offsets and labels) is copied to memory, so label() never touches the payload.
 * get() verifies the record's CRC32 and its structure before decoding it. */
#include <stdio.h>
#include <stdlib.h>
#include <zlib.h>

#include "source_internal.h"

typedef struct {
  char *path;
  ts__mapped map;
  ts_records_info info;
  uint64_t index_off;
  uint64_t *off; /* record offsets */
  int64_t *lab;  /* record labels */
} shard;

typedef struct {
  shard *sh;
  int ns;
  int64_t total;
} rec_src;

static uint32_t crc(const uint8_t *p, size_t n) {
  uLong c = crc32(0L, Z_NULL, 0);
  while (n) { /* zlib takes uInt lengths */
    uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
    c = crc32(c, p, k);
    p += k;
    n -= k;
  }
  return (uint32_t)c;
}

static void shard_close(shard *s) {
  ts__unmap_file(&s->map);
  free(s->path);
  free(s->off);
  free(s->lab);
  memset(s, 0, sizeof *s);
}

/* Number of records shard s of S holds when the set has `total`. */
static int64_t shard_count(int64_t total, int s, int S) { return total > s ? (total - s + S - 1) / S : 0; }

/* Describes where a truncated file stops: walks the records by their lengths. */
static void truncation_detail(const shard *s, char *buf, size_t cap) {
  const uint8_t *d = s->map.data;
  size_t size = s->map.size, p = TSR_HEADER;
  for (int64_t r = 0; r < s->info.count; r++) {
    if (p + 16 > size || p + 16 < p) {
      snprintf(buf, cap, "record %lld of %lld is the first incomplete one", (long long)r, (long long)s->info.count);
      return;
    }
    uint32_t L = ts__rd32(d + p + 8);
    if (L < TSR_REC_MIN || p + L > size) {
      snprintf(buf, cap, "record %lld of %lld is the first incomplete one", (long long)r, (long long)s->info.count);
      return;
    }
    p += ((size_t)L + 7) & ~(size_t)7;
  }
  snprintf(buf, cap, "all %lld records are present, the index is incomplete", (long long)s->info.count);
}

static int shard_open(const char *path, shard *s) {
  memset(s, 0, sizeof *s);
  int rc = ts__map_file(path, &s->map);
  if (rc) return rc;
  s->path = strdup(path);
  if (!s->path) {
    ts__unmap_file(&s->map);
    return ts_error_set(TS_ENOMEM, "%s: out of memory", path);
  }
  const uint8_t *d = s->map.data;
  size_t size = s->map.size;
  ts_records_info *in = &s->info;
  if (size < TSR_HEADER) {
    rc = ts_error_set(TS_EFORMAT, "%s: %s (%zu bytes, a header has %d)", path,
                      size >= 8 && !memcmp(d, TSR_MAGIC, 8) ? "truncated in the header" : "not a Tessera record file",
                      size, TSR_HEADER);
    goto fail;
  }
  if (memcmp(d, TSR_MAGIC, 8)) {
    rc = ts_error_set(TS_EFORMAT, "%s: bad magic (not a Tessera record file; expected \"TSREC\\0\\0\\1\")", path);
    goto fail;
  }
  in->version = (int)ts__rd32(d + 8);
  if (in->version != TSR_VERSION) {
    rc = ts_error_set(TS_EFORMAT, "%s: record format version %u is not supported (this build reads %d)", path,
                      ts__rd32(d + 8), TSR_VERSION);
    goto fail;
  }
  uint32_t hcrc = crc(d, 76);
  if (hcrc != ts__rd32(d + 76)) {
    rc = ts_error_set(TS_EFORMAT, "%s: header checksum mismatch (stored %08x, computed %08x): the header is corrupt",
                      path, ts__rd32(d + 76), hcrc);
    goto fail;
  }
  uint64_t count = ts__rd64(d + 16), total = ts__rd64(d + 24), fsize = ts__rd64(d + 48);
  uint32_t hsz = ts__rd32(d + 12), shard_i = ts__rd32(d + 32), nshards = ts__rd32(d + 36), ncls = ts__rd32(d + 56);
  s->index_off = ts__rd64(d + 40);
  if (hsz != TSR_HEADER || nshards == 0 || nshards > 99999 || shard_i >= nshards || total > ((uint64_t)1 << 60) ||
      count != (uint64_t)shard_count((int64_t)total, (int)shard_i, (int)nshards) || ncls > (1u << 30)) {
    rc = ts_error_set(TS_EFORMAT,
                      "%s: inconsistent header (header size %u, shard %u of %u, %llu records of %llu, %u classes)",
                      path, hsz, shard_i, nshards, (unsigned long long)count, (unsigned long long)total, ncls);
    goto fail;
  }
  in->shard = (int)shard_i;
  in->num_shards = (int)nshards;
  in->count = (int64_t)count;
  in->total = (int64_t)total;
  in->num_classes = (int)ncls;
  in->file_size = (int64_t)fsize;
  memcpy(in->kind, d + 60, 16);
  in->kind[16] = 0;
  for (int i = 0; i < 16 && in->kind[i]; i++)
    if (in->kind[i] < 0x20 || in->kind[i] > 0x7e) in->kind[i] = '?';
  if (fsize != size) {
    char detail[160];
    if (fsize > size) {
      truncation_detail(s, detail, sizeof detail);
      rc = ts_error_set(TS_EFORMAT, "%s: truncated: the header says %llu bytes, the file has %zu (%s)", path,
                        (unsigned long long)fsize, size, detail);
    } else {
      rc = ts_error_set(TS_EFORMAT, "%s: %zu bytes of trailing data after the %llu bytes the header describes",
                        path, size - (size_t)fsize, (unsigned long long)fsize);
    }
    goto fail;
  }
  if (s->index_off < TSR_HEADER || s->index_off % 8 || s->index_off > size || size - s->index_off < 4 ||
      (size - s->index_off - 4) / 16 < count ||
      s->index_off + 16 * count + 4 != size) {
    rc = ts_error_set(TS_EFORMAT, "%s: index offset %llu does not fit %llu records in %zu bytes", path,
                      (unsigned long long)s->index_off, (unsigned long long)count, size);
    goto fail;
  }
  const uint8_t *ix = d + s->index_off;
  uint32_t icrc = crc(ix, 16 * count);
  if (icrc != ts__rd32(ix + 16 * count)) {
    rc = ts_error_set(TS_EFORMAT, "%s: index checksum mismatch (stored %08x, computed %08x): the index is corrupt",
                      path, ts__rd32(ix + 16 * count), icrc);
    goto fail;
  }
  s->off = malloc(sizeof *s->off * (count ? count : 1));
  s->lab = malloc(sizeof *s->lab * (count ? count : 1));
  if (!s->off || !s->lab) {
    rc = ts_error_set(TS_ENOMEM, "%s: out of memory for the index of %llu records", path, (unsigned long long)count);
    goto fail;
  }
  uint64_t prev_end = TSR_HEADER;
  for (uint64_t r = 0; r < count; r++) {
    uint64_t o = ts__rd64(ix + 16 * r);
    int64_t l = (int64_t)ts__rd64(ix + 16 * r + 8);
    if (o < prev_end || o % 8 || o > s->index_off || s->index_off - o < TSR_REC_MIN) {
      rc = ts_error_set(TS_EFORMAT, "%s: record %llu: index offset %llu out of place", path, (unsigned long long)r,
                        (unsigned long long)o);
      goto fail;
    }
    if (l < -1 || (ncls && l >= (int64_t)ncls)) {
      rc = ts_error_set(TS_EFORMAT, "%s: record %llu: label %lld out of range -1..%d", path, (unsigned long long)r,
                        (long long)l, ncls ? (int)ncls - 1 : INT32_MAX);
      goto fail;
    }
    s->off[r] = o;
    s->lab[r] = l;
    prev_end = o + TSR_REC_MIN;
  }
  return TS_OK;
fail:
  shard_close(s);
  return rc;
}

/* Decodes record r of shard s (verifying its CRC and structure); `gi` is its global index. */
static int shard_get(shard *s, int64_t r, int64_t gi, ts_sample *out) {
  const uint8_t *d = s->map.data;
  uint64_t o = s->off[r], lim = r + 1 < s->info.count ? s->off[r + 1] : s->index_off;
  const uint8_t *p = d + o;
  uint64_t L = ts__rd32(p + 8);
  if (L < TSR_REC_MIN || L > lim - o)
    return ts_error_set(TS_EFORMAT, "%s: record %lld (sample %lld): length %llu does not fit its %llu-byte slot",
                        s->path, (long long)r, (long long)gi, (unsigned long long)L, (unsigned long long)(lim - o));
  uint32_t c = crc(p, L - 4), stored = ts__rd32(p + L - 4);
  if (c != stored)
    return ts_error_set(TS_EFORMAT, "%s: record %lld (sample %lld): checksum mismatch (stored %08x, computed %08x): "
                        "the record is corrupt", s->path, (long long)r, (long long)gi, stored, c);
  int64_t label = (int64_t)ts__rd64(p);
  uint32_t nt = ts__rd32(p + 12);
  const char *bad = NULL;
  if (label != s->lab[r]) bad = "label differs from the index";
  else if (nt < 1 || nt > 2) bad = "tensor count is not 1 or 2";
  uint64_t q = 16, end = L - 4;
  for (uint32_t t = 0; !bad && t < nt; t++) {
    if (q > end || end - q < 16) {
      bad = "tensor header overruns the record";
      break;
    }
    int dt = p[q], nd = p[q + 1];
    if (!ts_dtype_size((ts_dtype)dt)) {
      bad = "invalid dtype";
      break;
    }
    if (nd > TS_MAX_DIMS || end - q - 8 < 8 * (uint64_t)nd + 8) {
      bad = "invalid number of dimensions";
      break;
    }
    ts_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.ndim = nd;
    uint64_t numel = 1;
    int zero = 0;
    for (int k = 0; k < nd; k++) {
      int64_t v = (int64_t)ts__rd64(p + q + 8 + 8 * k);
      if (v < 0 || v > ((int64_t)1 << 40)) {
        bad = "invalid dimension";
        break;
      }
      sh.dims[k] = v;
      if (v == 0) zero = 1;
      else if (!zero && numel > ((uint64_t)1 << 40) / (uint64_t)v) {
        bad = "too many elements";
        break;
      } else if (!zero) numel *= (uint64_t)v;
    }
    if (bad) break;
    if (zero) numel = 0;
    q += 8 + 8 * (uint64_t)nd;
    uint64_t nb = ts__rd64(p + q);
    q += 8;
    if (nb != numel * ts_dtype_size((ts_dtype)dt) || nb > end - q) {
      bad = "byte count does not match the shape or overruns the record";
      break;
    }
    ts_tensor *dst = t == 0 ? &out->data : &out->target;
    int rc = ts_tensor_init(dst, (ts_dtype)dt, sh);
    if (rc) return ts_error_wrap(rc, "%s: record %lld (sample %lld)", s->path, (long long)r, (long long)gi);
    if (nb) memcpy(dst->data, p + q, nb);
    q += (nb + 7) & ~(uint64_t)7;
  }
  if (!bad && q != end) bad = "tensors do not fill the record exactly";
  if (bad) {
    ts_tensor_free(&out->data);
    ts_tensor_free(&out->target);
    return ts_error_set(TS_EFORMAT, "%s: record %lld (sample %lld): malformed record: %s", s->path, (long long)r,
                        (long long)gi, bad);
  }
  out->label = label;
  return TS_OK;
}

static int64_t rec_len(void *self) { return ((rec_src *)self)->total; }

static int rec_get(void *self, int64_t i, ts_sample *out) {
  rec_src *rs = self;
  return shard_get(&rs->sh[i % rs->ns], i / rs->ns, i, out);
}

static int64_t rec_label(void *self, int64_t i) {
  rec_src *rs = self;
  return rs->sh[i % rs->ns].lab[i / rs->ns];
}

static int rec_classes(void *self) { return ((rec_src *)self)->sh[0].info.num_classes; }
static int rec_sample_name(void *self, int64_t i, char *buf, size_t cap) {
  rec_src *rs = self;
  snprintf(buf, cap, "%s, record %lld", rs->sh[i % rs->ns].path, (long long)(i / rs->ns));
  return TS_OK;
}

static void rec_destroy(void *self) {
  rec_src *rs = self;
  if (!rs) return;
  for (int i = 0; i < rs->ns; i++) shard_close(&rs->sh[i]);
  free(rs->sh);
  free(rs);
}

/* One shard alone: global index gi = shard + r * num_shards. */
typedef struct {
  shard sh;
} one_src;

static int64_t one_len(void *self) { return ((one_src *)self)->sh.info.count; }
static int one_get(void *self, int64_t r, ts_sample *out) {
  shard *s = &((one_src *)self)->sh;
  return shard_get(s, r, s->info.shard + r * s->info.num_shards, out);
}
static int64_t one_label(void *self, int64_t r) { return ((one_src *)self)->sh.lab[r]; }
static int one_classes(void *self) { return ((one_src *)self)->sh.info.num_classes; }
static int one_sample_name(void *self, int64_t r, char *buf, size_t cap) {
  snprintf(buf, cap, "%s, record %lld", ((one_src *)self)->sh.path, (long long)r);
  return TS_OK;
}
static void one_destroy(void *self) {
  one_src *o = self;
  shard_close(&o->sh);
  free(o);
}

int ts_records_info_read(const char *path, ts_records_info *out) {
  memset(out, 0, sizeof *out);
  if (!path) return ts_error_set(TS_EINVAL, "ts_records_info_read: NULL path");
  shard s;
  int rc = shard_open(path, &s);
  if (rc) return rc;
  *out = s.info;
  shard_close(&s);
  return TS_OK;
}

int ts_source_records_shard(const char *path, ts_source **out) {
  *out = NULL;
  if (!path) return ts_error_set(TS_EINVAL, "ts_source_records_shard: NULL path");
  one_src *o = calloc(1, sizeof *o);
  if (!o) return ts_error_set(TS_ENOMEM, "%s: out of memory", path);
  int rc = shard_open(path, &o->sh);
  if (rc) {
    free(o);
    return rc;
  }
  static const ts_source_vtable vt = {"records", one_len, one_get, one_label, one_classes, one_destroy, one_sample_name};
  rc = ts_source_create(&vt, o, out);
  if (rc) one_destroy(o);
  return rc;
}

int ts_source_records(const char *const *paths, int npaths, ts_source **out) {
  *out = NULL;
  if (!paths || npaths <= 0) return ts_error_set(TS_EINVAL, "ts_source_records: no shard files given");
  rec_src *rs = calloc(1, sizeof *rs);
  shard *tmp = calloc((size_t)npaths, sizeof *tmp);
  if (!rs || !tmp) {
    free(rs);
    free(tmp);
    return ts_error_set(TS_ENOMEM, "ts_source_records: out of memory");
  }
  int rc = TS_OK, opened = 0;
  for (; opened < npaths && rc == TS_OK; opened++) {
    if (!paths[opened]) {
      rc = ts_error_set(TS_EINVAL, "ts_source_records: shard path %d is NULL", opened);
      break;
    }
    rc = shard_open(paths[opened], &tmp[opened]);
    if (rc) break;
  }
  if (rc == TS_OK) {
    const ts_records_info *a = &tmp[0].info;
    int S = a->num_shards;
    rs->total = a->total;
    rs->sh = calloc((size_t)S, sizeof *rs->sh);
    if (!rs->sh) rc = ts_error_set(TS_ENOMEM, "ts_source_records: out of memory");
    for (int i = 1; rc == TS_OK && i < npaths; i++) {
      const ts_records_info *b = &tmp[i].info;
      if (b->num_shards != a->num_shards || b->total != a->total || b->num_classes != a->num_classes ||
          strcmp(a->kind, b->kind))
        rc = ts_error_set(TS_EFORMAT,
                          "%s (shard %d of %d, %lld records, %s) and %s (shard %d of %d, %lld records, %s) are not "
                          "from the same set",
                          tmp[0].path, a->shard, a->num_shards, (long long)a->total, a->kind, tmp[i].path, b->shard,
                          b->num_shards, (long long)b->total, b->kind);
    }
    for (int i = 0; rc == TS_OK && i < npaths; i++) {
      int k = tmp[i].info.shard;
      if (rs->sh[k].path) {
        rc = ts_error_set(TS_EINVAL, "%s and %s are both shard %d of %d", rs->sh[k].path, tmp[i].path, k, S);
        break;
      }
      rs->sh[k] = tmp[i];
      memset(&tmp[i], 0, sizeof tmp[i]);
    }
    rs->ns = S;
    for (int k = 0; rc == TS_OK && k < S; k++)
      if (!rs->sh[k].path)
        rc = ts_error_set(TS_EINVAL, "shard %d of %d is missing (given %d file%s, first %s): pass every file of the set",
                          k, S, npaths, npaths == 1 ? "" : "s", paths[0]);
  }
  for (int i = 0; i < npaths; i++) shard_close(&tmp[i]);
  free(tmp);
  if (rc == TS_OK) {
    static const ts_source_vtable vt = {"records",   rec_len,     rec_get,        rec_label,
                                        rec_classes, rec_destroy, rec_sample_name};
    rc = ts_source_create(&vt, rs, out);
  }
  if (rc) rec_destroy(rs);
  return rc;
}
