/* safetensors reader and atomic writer; see include/tessera/io.h for the contract. */
#define _GNU_SOURCE /* qsort_r */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <nettle/sha2.h>
#include <zlib.h>

#include "tessera/io.h"
#include "ms_ckpt.h"
#include "../base/afile.h"
#include "../base/rfile.h"

#define ST_MAX_HEADER (100u << 20) /* the reference implementation's limit */
#define ST_MAX_INT 9007199254740992.0 /* 2^53: largest integer a JSON double holds exactly */

/* ------------------------------------------------------------------ dtypes */

static const struct {
  const char *name;
  ts_dtype dt;
} k_st_dtypes[] = {{"F32", TS_F32}, {"BF16", TS_BF16}, {"F16", TS_F16},
                   {"I32", TS_I32}, {"I64", TS_I64},   {"U8", TS_U8}};
#define ST_NDTYPES ((int)(sizeof k_st_dtypes / sizeof k_st_dtypes[0]))

const char *ts_st_dtype_name(ts_dtype dt) {
  for (int i = 0; i < ST_NDTYPES; i++)
    if (k_st_dtypes[i].dt == dt) return k_st_dtypes[i].name;
  return "?";
}

int ts_st_dtype_parse(const char *name, ts_dtype *out) {
  for (int i = 0; i < ST_NDTYPES; i++)
    if (name && strcmp(k_st_dtypes[i].name, name) == 0) {
      *out = k_st_dtypes[i].dt;
      return TS_OK;
    }
  return ts_error_set(TS_EDTYPE, "unsupported safetensors dtype '%s' (supported: F32, BF16, F16, "
                      "I32, I64, U8)", name ? name : "(null)");
}

static uint32_t st_crc32(const unsigned char *p, uint64_t n) {
  uLong c = crc32(0L, Z_NULL, 0);
  while (n > 0) {
    uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
    c = crc32(c, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return (uint32_t)c;
}

/* ------------------------------------------------------------------ reader */

typedef struct {
  char *name;
  ts_dtype dt;
  ts_shape shape;
  uint64_t begin, end;
  void *ptr;  /* where the data is: inside f->data, or `copy` if that was misaligned */
  void *copy;
} st_entry;

struct ts_st_file {
  char *path;
  int n;
  st_entry *e;
  int *by_name; /* indices sorted by name, for bsearch */
  int nmeta;
  char **mkey, **mval;
  unsigned char *data; /* 64-byte aligned copy of the data section (NULL when lazy) */
  uint64_t data_size;
  int lazy;            /* ts_st_open_header: the data stays in the file, read by ranges */
  int mindspore;       /* a MindSpore .ckpt (ms_ckpt.h): parsed whole, data in memory even when lazy */
  int fd;              /* lazy: the open file */
  uint64_t data_start; /* lazy: the data section's offset in the file */
  uint64_t chunk;      /* TS_ST_CHUNK_KEY: chunk bytes (0: no chunk checksums) */
  uint32_t *chunk_crc; /* one per chunk of the data section */
  uint64_t nchunks;
};

void ts_st_close(ts_st_file *f) {
  if (!f) return;
  if (f->lazy && f->fd >= 0) close(f->fd);
  free(f->chunk_crc);
  for (int i = 0; i < f->n; i++) {
    free(f->e[i].name);
    ts_free(f->e[i].copy);
  }
  for (int i = 0; i < f->nmeta; i++) {
    free(f->mkey[i]);
    free(f->mval[i]);
  }
  free(f->e);
  free(f->by_name);
  free(f->mkey);
  free(f->mval);
  ts_free(f->data);
  free(f->path);
  free(f);
}

const char *ts_st_path(const ts_st_file *f) { return f ? f->path : ""; }
int ts_st_count(const ts_st_file *f) { return f ? f->n : 0; }
const char *ts_st_name(const ts_st_file *f, int i) {
  return (f && i >= 0 && i < f->n) ? f->e[i].name : NULL;
}
int ts_st_meta_count(const ts_st_file *f) { return f ? f->nmeta : 0; }
const char *ts_st_meta_key(const ts_st_file *f, int i) {
  return (f && i >= 0 && i < f->nmeta) ? f->mkey[i] : NULL;
}
const char *ts_st_meta(const ts_st_file *f, const char *key) {
  if (!f || !key) return NULL;
  for (int i = 0; i < f->nmeta; i++)
    if (strcmp(f->mkey[i], key) == 0) return f->mval[i];
  return NULL;
}

static int cmp_by_name_r(const void *a, const void *b, void *ctx) {
  const st_entry *e = ctx;
  return strcmp(e[*(const int *)a].name, e[*(const int *)b].name);
}
static int cmp_by_offset_r(const void *a, const void *b, void *ctx) {
  const st_entry *e = ctx;
  const st_entry *x = &e[*(const int *)a], *y = &e[*(const int *)b];
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

int ts_st_index(const ts_st_file *f, const char *name) {
  if (!f || !name) return -1;
  int lo = 0, hi = f->n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    int c = strcmp(f->e[f->by_name[mid]].name, name);
    if (c == 0) return f->by_name[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

int ts_st_get(const ts_st_file *f, int i, ts_tensor *view) {
  if (!f || !view) return ts_error_set(TS_EINVAL, "ts_st_get: NULL argument");
  if (i < 0 || i >= f->n)
    return ts_error_set(TS_ENOTFOUND, "%s: tensor index %d out of range (file has %d)", f->path,
                        i, f->n);
  ts_tensor_view(view, f->e[i].dt, f->e[i].shape, f->lazy ? NULL : f->e[i].ptr);
  return TS_OK;
}

int ts_st_find(const ts_st_file *f, const char *name, ts_tensor *view) {
  if (!f || !name || !view) return ts_error_set(TS_EINVAL, "ts_st_find: NULL argument");
  int i = ts_st_index(f, name);
  if (i < 0) return ts_error_set(TS_ENOTFOUND, "%s: no tensor named '%s'", f->path, name);
  return ts_st_get(f, i, view);
}

int ts_st_read(const ts_st_file *f, const char *name, ts_dtype dt, const ts_shape *expect,
               void *dst) {
  ts_tensor t;
  int rc = ts_st_find(f, name, &t);
  if (rc) return rc;
  if (f->lazy) return ts_error_set(TS_EINVAL, "%s: opened for ranged reads (ts_st_read_ranges)", f->path);
  if (expect && !ts_shape_equal(expect, &t.shape)) {
    char a[128], b[128];
    return ts_error_set(TS_ESHAPE, "%s: tensor '%s' has shape %s, expected %s", f->path, name,
                        ts_shape_str(&t.shape, a, sizeof a), ts_shape_str(expect, b, sizeof b));
  }
  if (!ts_dtype_size(dt)) return ts_error_set(TS_EDTYPE, "ts_st_read: invalid dtype %d", (int)dt);
  rc = ts_convert(t.data, t.dtype, dst, dt, (size_t)ts_tensor_numel(&t));
  if (rc) return ts_error_wrap(rc, "%s: tensor '%s'", f->path, name);
  return TS_OK;
}

/* A JSON number that is a non-negative integer below 2^53. */
static int st_json_uint(const cJSON *j, uint64_t *out) {
  if (!cJSON_IsNumber(j)) return 0;
  double v = j->valuedouble;
  if (!(v >= 0 && v <= ST_MAX_INT) || v != (double)(uint64_t)v) return 0;
  *out = (uint64_t)v;
  return 1;
}

static int st_parse_entry(ts_st_file *f, const cJSON *j, st_entry *e) {
  const char *P = f->path, *N = e->name;
  if (!cJSON_IsObject(j))
    return ts_error_set(TS_EFORMAT, "%s: tensor '%s': header entry is not a JSON object", P, N);
  const cJSON *jd = cJSON_GetObjectItemCaseSensitive(j, "dtype");
  const cJSON *js = cJSON_GetObjectItemCaseSensitive(j, "shape");
  const cJSON *jo = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
  if (!cJSON_IsString(jd))
    return ts_error_set(TS_EFORMAT, "%s: tensor '%s': missing or non-string \"dtype\"", P, N);
  if (ts_st_dtype_parse(jd->valuestring, &e->dt))
    return ts_error_set(TS_EDTYPE, "%s: tensor '%s': unsupported dtype '%s' (supported: F32, "
                        "BF16, F16, I32, I64, U8)", P, N, jd->valuestring);
  if (!cJSON_IsArray(js))
    return ts_error_set(TS_EFORMAT, "%s: tensor '%s': missing or non-array \"shape\"", P, N);
  int nd = cJSON_GetArraySize(js);
  if (nd > TS_MAX_DIMS)
    return ts_error_set(TS_EUNSUPPORTED, "%s: tensor '%s': %d dimensions (at most %d supported)",
                        P, N, nd, TS_MAX_DIMS);
  e->shape.ndim = nd;
  uint64_t numel = 1;
  for (int d = 0; d < nd; d++) {
    uint64_t v;
    if (!st_json_uint(cJSON_GetArrayItem(js, d), &v))
      return ts_error_set(TS_EFORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer",
                          P, N, d);
    e->shape.dims[d] = (int64_t)v;
    if (__builtin_mul_overflow(numel, v, &numel) || numel > (uint64_t)ST_MAX_INT)
      return ts_error_set(TS_EFORMAT, "%s: tensor '%s': element count overflows", P, N);
  }
  if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 ||
      !st_json_uint(cJSON_GetArrayItem(jo, 0), &e->begin) ||
      !st_json_uint(cJSON_GetArrayItem(jo, 1), &e->end))
    return ts_error_set(TS_EFORMAT, "%s: tensor '%s': \"data_offsets\" must be [begin, end] with "
                        "non-negative integers", P, N);
  if (e->begin > e->end)
    return ts_error_set(TS_EFORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] end before they "
                        "begin", P, N, (unsigned long long)e->begin, (unsigned long long)e->end);
  if (e->end > f->data_size)
    return ts_error_set(TS_EFORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] run past the end "
                        "of the data section (%llu bytes; file truncated?)", P, N,
                        (unsigned long long)e->begin, (unsigned long long)e->end,
                        (unsigned long long)f->data_size);
  uint64_t want = numel * ts_dtype_size(e->dt);
  if (e->end - e->begin != want) {
    char s[128];
    return ts_error_set(TS_EFORMAT, "%s: tensor '%s': shape %s x %s needs %llu bytes but "
                        "data_offsets [%llu, %llu] span %llu", P, N,
                        ts_shape_str(&e->shape, s, sizeof s), jd->valuestring,
                        (unsigned long long)want, (unsigned long long)e->begin,
                        (unsigned long long)e->end, (unsigned long long)(e->end - e->begin));
  }
  return TS_OK;
}

static int st_parse_meta(ts_st_file *f, const cJSON *j) {
  if (!cJSON_IsObject(j))
    return ts_error_set(TS_EFORMAT, "%s: \"__metadata__\" is not a JSON object", f->path);
  int n = cJSON_GetArraySize(j);
  f->mkey = calloc((size_t)n + 1, sizeof *f->mkey);
  f->mval = calloc((size_t)n + 1, sizeof *f->mval);
  if (!f->mkey || !f->mval) return ts_error_set(TS_ENOMEM, "%s: out of memory", f->path);
  for (const cJSON *m = j->child; m; m = m->next) {
    if (!cJSON_IsString(m))
      return ts_error_set(TS_EFORMAT, "%s: metadata value of '%s' is not a string", f->path,
                          m->string);
    for (int k = 0; k < f->nmeta; k++)
      if (strcmp(f->mkey[k], m->string) == 0)
        return ts_error_set(TS_EFORMAT, "%s: duplicate metadata key '%s'", f->path, m->string);
    f->mkey[f->nmeta] = strdup(m->string);
    f->mval[f->nmeta] = strdup(m->valuestring);
    if (!f->mkey[f->nmeta] || !f->mval[f->nmeta]) {
      free(f->mkey[f->nmeta]);
      free(f->mval[f->nmeta]);
      return ts_error_set(TS_ENOMEM, "%s: out of memory", f->path);
    }
    f->nmeta++;
  }
  return TS_OK;
}

/* The chunk checksums of TS_ST_CHUNK_KEY / TS_ST_CHUNK_CRC_KEY, when the metadata has them. */
static int st_parse_chunks(ts_st_file *f) {
  const char *cb = ts_st_meta(f, TS_ST_CHUNK_KEY), *cc = ts_st_meta(f, TS_ST_CHUNK_CRC_KEY);
  if (!cb && !cc) return TS_OK;
  char *ep = NULL;
  unsigned long long c = cb ? strtoull(cb, &ep, 10) : 0;
  if (!cb || !cc || !*cb || *ep || c == 0 || c > (1ull << 40))
    return ts_error_set(TS_EFORMAT, "%s: metadata \"%s\" and \"%s\" must both be there, a chunk size in bytes and "
                        "8 hex digits per chunk", f->path, TS_ST_CHUNK_KEY, TS_ST_CHUNK_CRC_KEY);
  uint64_t n = (f->data_size + c - 1) / c;
  if (strlen(cc) != 8 * n)
    return ts_error_set(TS_EFORMAT, "%s: metadata \"%s\" holds %zu hex digits, not 8 for each of the %llu chunks of "
                        "%llu bytes", f->path, TS_ST_CHUNK_CRC_KEY, strlen(cc), (unsigned long long)n, c);
  if (!(f->chunk_crc = malloc(sizeof(uint32_t) * (n + 1)))) return ts_error_set(TS_ENOMEM, "%s: out of memory", f->path);
  for (uint64_t k = 0; k < n; k++) {
    uint32_t v = 0;
    for (int j = 0; j < 8; j++) {
      char h = cc[8 * k + (uint64_t)j];
      int x = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : -1;
      if (x < 0)
        return ts_error_set(TS_EFORMAT, "%s: metadata \"%s\": '%c' is not a lowercase hex digit", f->path,
                            TS_ST_CHUNK_CRC_KEY, h);
      v = v << 4 | (uint32_t)x;
    }
    f->chunk_crc[k] = v;
  }
  f->chunk = c;
  f->nchunks = n;
  return TS_OK;
}

/* f->by_name: the entries sorted by name; a name found twice is TS_EFORMAT. */
static int st_index(ts_st_file *f, const char *where) {
  for (int i = 0; i < f->n; i++) f->by_name[i] = i;
  qsort_r(f->by_name, (size_t)f->n, sizeof(int), cmp_by_name_r, f->e);
  for (int i = 1; i < f->n; i++)
    if (strcmp(f->e[f->by_name[i - 1]].name, f->e[f->by_name[i]].name) == 0)
      return ts_error_set(TS_EFORMAT, "%s: tensor '%s' appears twice %s", f->path, f->e[f->by_name[i]].name, where);
  return TS_OK;
}

/* Parses and validates the header; f->data/data_size must already be set. */
static int st_parse_header(ts_st_file *f, const char *hdr, size_t hlen) {
  const char *end = NULL;
  if (hlen == 0 || hdr[0] != '{')
    return ts_error_set(TS_EFORMAT, "%s: header does not start with '{' (not a safetensors file?)",
                        f->path);
  cJSON *root = cJSON_ParseWithLengthOpts(hdr, hlen, &end, 0);
  if (!root) {
    size_t pos = end ? (size_t)(end - hdr) : 0;
    return ts_error_set(TS_EFORMAT, "%s: header is not valid JSON (error near byte %zu of %zu)",
                        f->path, pos, hlen);
  }
  int rc = TS_OK;
  for (const char *p = end; p && p < hdr + hlen; p++)
    if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
      rc = ts_error_set(TS_EFORMAT, "%s: trailing garbage after the header JSON at byte %zu",
                        f->path, (size_t)(p - hdr));
      goto done;
    }
  if (!cJSON_IsObject(root)) {
    rc = ts_error_set(TS_EFORMAT, "%s: header is not a JSON object", f->path);
    goto done;
  }
  int total = cJSON_GetArraySize(root);
  f->e = calloc((size_t)total + 1, sizeof *f->e);
  f->by_name = calloc((size_t)total + 1, sizeof *f->by_name);
  if (!f->e || !f->by_name) {
    rc = ts_error_set(TS_ENOMEM, "%s: out of memory", f->path);
    goto done;
  }
  int have_meta = 0;
  for (const cJSON *j = root->child; j; j = j->next) {
    if (strcmp(j->string, "__metadata__") == 0) {
      if (have_meta++) {
        rc = ts_error_set(TS_EFORMAT, "%s: duplicate \"__metadata__\"", f->path);
        goto done;
      }
      if ((rc = st_parse_meta(f, j))) goto done;
      continue;
    }
    st_entry *e = &f->e[f->n];
    if (!(e->name = strdup(j->string))) {
      rc = ts_error_set(TS_ENOMEM, "%s: out of memory", f->path);
      goto done;
    }
    f->n++;
    if ((rc = st_parse_entry(f, j, e))) goto done;
  }
  if ((rc = st_index(f, "in the header"))) goto done;
  /* overlaps and holes: sorted by offset, each tensor must start where the previous ended */
  int *ord = malloc(((size_t)f->n + 1) * sizeof *ord);
  if (!ord) {
    rc = ts_error_set(TS_ENOMEM, "%s: out of memory", f->path);
    goto done;
  }
  for (int i = 0; i < f->n; i++) ord[i] = i;
  qsort_r(ord, (size_t)f->n, sizeof(int), cmp_by_offset_r, f->e);
  uint64_t pos = 0;
  for (int k = 0; k < f->n && !rc; k++) {
    const st_entry *e = &f->e[ord[k]];
    if (e->begin < pos) {
      const st_entry *p = &f->e[ord[k - 1]];
      rc = ts_error_set(TS_EFORMAT, "%s: tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap",
                        f->path, p->name, (unsigned long long)p->begin,
                        (unsigned long long)p->end, e->name, (unsigned long long)e->begin,
                        (unsigned long long)e->end);
    } else if (e->begin > pos) {
      rc = ts_error_set(TS_EFORMAT, "%s: tensor '%s' starts at data offset %llu, leaving a hole "
                        "at [%llu, %llu) that no tensor covers", f->path, e->name,
                        (unsigned long long)e->begin, (unsigned long long)pos,
                        (unsigned long long)e->begin);
    }
    pos = e->end;
  }
  free(ord);
  if (rc) goto done;
  if (pos != f->data_size) {
    rc = ts_error_set(TS_EFORMAT, "%s: data section is %llu bytes but the tensors cover %llu "
                      "(trailing bytes or truncated header)", f->path,
                      (unsigned long long)f->data_size, (unsigned long long)pos);
    goto done;
  }
  if ((rc = st_parse_chunks(f))) goto done;
  if (f->lazy) goto done; /* the data is read later, by ranges */
  /* views; copy the rare tensor whose offset is not a multiple of its element size */
  for (int i = 0; i < f->n; i++) {
    st_entry *e = &f->e[i];
    size_t es = ts_dtype_size(e->dt);
    e->ptr = f->data + e->begin;
    if (e->begin % es) {
      size_t nb = (size_t)(e->end - e->begin);
      if (!(e->copy = ts_alloc(nb ? nb : 1))) {
        rc = ts_error_set(TS_ENOMEM, "%s: tensor '%s': out of memory", f->path, e->name);
        goto done;
      }
      memcpy(e->copy, e->ptr, nb);
      e->ptr = e->copy;
    }
  }
  /* checksum */
  const char *crc = ts_st_meta(f, TS_ST_CRC_KEY);
  if (crc) {
    char *ep = NULL;
    unsigned long want = strtoul(crc, &ep, 16);
    if (strlen(crc) != 8 || !ep || *ep) {
      rc = ts_error_set(TS_EFORMAT, "%s: metadata \"%s\" = \"%s\" is not 8 hex digits", f->path,
                        TS_ST_CRC_KEY, crc);
      goto done;
    }
    uint32_t got = st_crc32(f->data, f->data_size);
    if (got != (uint32_t)want) {
      rc = ts_error_set(TS_EFORMAT, "%s: CRC-32 mismatch: header records %08lx, data section has "
                        "%08x (file corrupted)", f->path, want, (unsigned)got);
      goto done;
    }
  }
  for (uint64_t c = 0; c < f->nchunks && !rc; c++) { /* what ranged reads will check */
    uint64_t a = c * f->chunk, b = a + f->chunk < f->data_size ? a + f->chunk : f->data_size;
    if (st_crc32(f->data + a, b - a) != f->chunk_crc[c])
      rc = ts_error_set(TS_EFORMAT, "%s: data bytes [%llu, %llu) (chunk %llu) fail their CRC-32 (file corrupted)",
                        f->path, (unsigned long long)a, (unsigned long long)b, (unsigned long long)c);
  }
done:
  cJSON_Delete(root);
  return rc;
}

static int st_from_mindspore(ts_st_file *f, const unsigned char *b, uint64_t n, int lazy);

static ts_st_file *st_new(const char *label) {
  ts_st_file *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  f->fd = -1;
  if (!(f->path = strdup(label ? label : "(memory)"))) {
    free(f);
    return NULL;
  }
  return f;
}

static uint64_t st_le64(const unsigned char *b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | b[i];
  return v;
}

/* Checks the 8-byte length prefix against the total size; returns the header length. */
static int st_check_len(const char *label, const unsigned char *prefix, uint64_t size,
                        uint64_t *hlen) {
  if (size < 8)
    return ts_error_set(TS_EFORMAT, "%s: file is %llu bytes, too short for a safetensors header "
                        "(truncated or empty)", label, (unsigned long long)size);
  *hlen = st_le64(prefix);
  if (*hlen > size - 8)
    return ts_error_set(TS_EFORMAT, "%s: header length %llu exceeds the %llu bytes after the "
                        "length prefix (truncated, or not a safetensors file)", label,
                        (unsigned long long)*hlen, (unsigned long long)(size - 8));
  if (*hlen > ST_MAX_HEADER)
    return ts_error_set(TS_EFORMAT, "%s: header length %llu exceeds the %u-byte limit", label,
                        (unsigned long long)*hlen, ST_MAX_HEADER);
  return TS_OK;
}

int ts_st_open_memory(const void *bytes, size_t size, const char *label, ts_st_file **out) {
  if (!out) return ts_error_set(TS_EINVAL, "ts_st_open_memory: NULL out");
  *out = NULL;
  if (!bytes && size) return ts_error_set(TS_EINVAL, "ts_st_open_memory: NULL bytes");
  ts_st_file *f = st_new(label);
  if (!f) return ts_error_set(TS_ENOMEM, "ts_st_open_memory: out of memory");
  const unsigned char *b = bytes;
  uint64_t hlen;
  int rc;
  if (ts__msck_sniff(b, size)) {
    if ((rc = st_from_mindspore(f, b, size, 0))) goto fail;
    *out = f;
    return TS_OK;
  }
  rc = st_check_len(f->path, b, size, &hlen);
  if (rc) goto fail;
  f->data_size = size - 8 - hlen;
  if (!(f->data = ts_alloc(f->data_size ? f->data_size : 1))) {
    rc = ts_error_set(TS_ENOMEM, "%s: cannot allocate %llu bytes", f->path,
                      (unsigned long long)f->data_size);
    goto fail;
  }
  memcpy(f->data, b + 8 + hlen, f->data_size);
  if ((rc = st_parse_header(f, (const char *)b + 8, hlen))) goto fail;
  *out = f;
  return TS_OK;
fail:
  ts_st_close(f);
  return rc;
}

/* A MindSpore checkpoint (ms_ckpt.h) of n bytes as a file of views: its tensors, and its strings
 * as metadata. Parsed whole (its pieces are joined and some types converted, so there are no file
 * offsets to read by ranges): lazy = 1 keeps ts_st_open_header's contract (views without data,
 * ranged reads) served from memory (fd -1). */
static int st_from_mindspore(ts_st_file *f, const unsigned char *b, uint64_t n, int lazy) {
  ts__msck c;
  int rc = ts__msck_parse(f->path, b, n, &c);
  if (rc) return rc;
  f->e = calloc((size_t)c.n + 1, sizeof *f->e);
  f->by_name = calloc((size_t)c.n + 1, sizeof *f->by_name);
  if (!f->e || !f->by_name) {
    ts__msck_free(&c);
    return ts_error_set(TS_ENOMEM, "%s: out of memory", f->path);
  }
  for (int i = 0; i < c.n; i++) {
    st_entry *e = &f->e[f->n++];
    e->name = c.t[i].name;
    c.t[i].name = NULL;
    e->dt = c.t[i].dt;
    e->shape = c.t[i].shape;
    e->begin = c.t[i].begin;
    e->end = c.t[i].end;
    e->ptr = c.data + e->begin;
  }
  f->mkey = c.mkey, f->mval = c.mval, f->nmeta = c.nmeta;
  c.mkey = c.mval = NULL, c.nmeta = 0;
  f->data = c.data, f->data_size = c.size;
  c.data = NULL;
  f->lazy = lazy;
  f->mindspore = 1;
  ts__msck_free(&c);
  return st_index(f, "in the MindSpore checkpoint (two values of that tag, not one after the other)");
}

/* Opens path: the whole file (lazy = 0), or its header only with the file kept open for ranged
 * reads (lazy = 1). */
static int st_open(const char *path, int lazy, ts_st_file **out) {
  if (!out) return ts_error_set(TS_EINVAL, "ts_st_open: NULL out");
  *out = NULL;
  if (!path) return ts_error_set(TS_EINVAL, "ts_st_open: NULL path");
  int fd;
  uint64_t size;
  int rc = ts__file_open_read(path, "cannot open", &fd, &size);
  if (rc) return rc == TS_ENOTFOUND ? TS_EIO : rc; /* a missing file is TS_EIO here (the message says which) */
  ts_st_file *f = st_new(path);
  char *hdr = NULL;
  int r;
  if (!f) {
    close(fd);
    return ts_error_set(TS_ENOMEM, "%s: out of memory", path);
  }
  uint64_t hlen = 0;
  unsigned char prefix[16] = {0};
  if (pread(fd, prefix, size < 16 ? (size_t)size : 16, 0) >= 0 && ts__msck_sniff(prefix, size)) {
    unsigned char *all = malloc(size ? size : 1);
    if (!all) {
      rc = ts_error_set(TS_ENOMEM, "%s: cannot allocate %llu bytes", path, (unsigned long long)size);
      goto fail;
    }
    if ((r = ts__read_full(fd, all, size))) {
      free(all);
      goto read_err;
    }
    rc = st_from_mindspore(f, all, size, lazy);
    free(all);
    if (rc) goto fail;
    close(fd);
    *out = f;
    return TS_OK;
  }
  if (size >= 8 && (r = ts__read_full(fd, prefix, 8))) goto read_err;
  if ((rc = st_check_len(path, prefix, size, &hlen))) goto fail;
  if (!(hdr = malloc(hlen + 1))) {
    rc = ts_error_set(TS_ENOMEM, "%s: cannot allocate the %llu-byte header", path,
                      (unsigned long long)hlen);
    goto fail;
  }
  if ((r = ts__read_full(fd, hdr, hlen))) goto read_err;
  hdr[hlen] = 0;
  f->data_size = size - 8 - hlen;
  if (lazy) {
    f->lazy = 1;
    f->fd = fd;
    f->data_start = 8 + hlen;
    fd = -1;
  } else {
    if (!(f->data = ts_alloc(f->data_size ? f->data_size : 1))) {
      rc = ts_error_set(TS_ENOMEM, "%s: cannot allocate %llu bytes for the data", path,
                        (unsigned long long)f->data_size);
      goto fail;
    }
    if ((r = ts__read_full(fd, f->data, f->data_size))) goto read_err;
    close(fd);
    fd = -1;
  }
  if ((rc = st_parse_header(f, hdr, hlen))) goto fail;
  free(hdr);
  *out = f;
  return TS_OK;
read_err:
  rc = r == -2 ? ts_error_set(TS_EIO, "%s: file shrank while being read", path)
               : ts_error_set(TS_EIO, "%s: read failed: %s", path, strerror(errno));
fail:
  if (fd >= 0) close(fd);
  free(hdr);
  ts_st_close(f);
  return rc;
}

int ts_st_open(const char *path, ts_st_file **out) { return st_open(path, 0, out); }
int ts_st_open_header(const char *path, ts_st_file **out) { return st_open(path, 1, out); }

int ts_st_is_lazy(const ts_st_file *f) { return f && f->lazy; }
int ts_st_is_mindspore(const ts_st_file *f) { return f && f->mindspore; }

/* ------------------------------------------------------------------ ranged reads */

#define ST_WINDOW_MAX (64ull << 20) /* bytes one pread reads at most */
#define ST_GAP_MERGE (64ull << 10)  /* without chunk checksums: gaps read through rather than split */

typedef struct {
  uint64_t a0, a, b; /* data-section offsets of the range: its start, where reading resumes, its end */
  int i;             /* its index in the caller's array */
} st_span;

static int cmp_span(const void *x, const void *y) {
  const st_span *p = x, *q = y;
  if (p->a != q->a) return p->a < q->a ? -1 : 1;
  return p->i < q->i ? -1 : p->i > q->i;
}

static int st_pread(ts_st_file *f, void *buf, uint64_t off, uint64_t n) {
  unsigned char *p = buf;
  while (n) {
    ssize_t k = pread(f->fd, p, n > (1u << 30) ? (1u << 30) : (size_t)n, (off_t)(f->data_start + off));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return ts_error_set(TS_EIO, "%s: read failed: %s", f->path, strerror(errno));
    if (k == 0) return ts_error_set(TS_EIO, "%s: file shrank while being read", f->path);
    p += k;
    off += (uint64_t)k;
    n -= (uint64_t)k;
  }
  return TS_OK;
}

int ts_st_read_ranges(ts_st_file *f, const ts_st_range *r, int n) {
  if (!f || (n && !r)) return ts_error_set(TS_EINVAL, "ts_st_read_ranges: NULL argument");
  if (!f->lazy || f->fd < 0) { /* the data is in memory already (a MindSpore checkpoint's, lazy or not) */
    for (int k = 0; k < n; k++) {
      if (r[k].entry < 0 || r[k].entry >= f->n || r[k].offset + r[k].nbytes > f->e[r[k].entry].end - f->e[r[k].entry].begin)
        return ts_error_set(TS_EINVAL, "%s: range %d is outside its tensor", f->path, k);
      memcpy(r[k].dst, (const unsigned char *)f->e[r[k].entry].ptr + r[k].offset, r[k].nbytes);
    }
    return TS_OK;
  }
  st_span *sp = malloc(sizeof *sp * ((size_t)n + 1));
  if (!sp) return ts_error_set(TS_ENOMEM, "%s: out of memory", f->path);
  int m = 0, rc = TS_OK;
  for (int k = 0; k < n && !rc; k++) {
    const st_entry *e = r[k].entry >= 0 && r[k].entry < f->n ? &f->e[r[k].entry] : NULL;
    if (!e || r[k].offset > e->end - e->begin || r[k].nbytes > e->end - e->begin - r[k].offset)
      rc = ts_error_set(TS_EINVAL, "%s: tensor '%s': bytes [%llu, +%llu) are outside the tensor", f->path,
                        e ? e->name : "(no tensor)", (unsigned long long)r[k].offset, (unsigned long long)r[k].nbytes);
    else if (r[k].nbytes)
      sp[m++] = (st_span){e->begin + r[k].offset, e->begin + r[k].offset, e->begin + r[k].offset + r[k].nbytes, k};
  }
  if (rc) {
    free(sp);
    return rc;
  }
  qsort(sp, (size_t)m, sizeof *sp, cmp_span);
  unsigned char *buf = NULL;
  uint64_t cap = 0;
  int first = 0; /* spans before it are copied whole */
  while (first < m && !rc) {
    /* the window: chunk-aligned (with checksums) from the first span still to copy, grown over the
     * spans it reaches, at most ST_WINDOW_MAX */
    uint64_t C = f->chunk ? f->chunk : 1, wa = sp[first].a / C * C, wb = wa;
    for (int k = first; k < m; k++) {
      uint64_t a = sp[k].a < wb ? wb : sp[k].a;
      if (a > wb + (f->chunk ? 0 : ST_GAP_MERGE) && k > first) break;
      uint64_t b = (sp[k].b + C - 1) / C * C;
      if (b > f->data_size) b = f->data_size;
      if (b > wb) wb = b;
      if (wb - wa >= ST_WINDOW_MAX) {
        wb = wa + (ST_WINDOW_MAX > C ? ST_WINDOW_MAX / C * C : C);
        if (wb > f->data_size) wb = f->data_size;
        break;
      }
    }
    if (wb - wa > cap) {
      ts_free(buf);
      cap = wb - wa;
      if (!(buf = ts_alloc(cap))) {
        rc = ts_error_set(TS_ENOMEM, "%s: out of memory reading %llu bytes", f->path, (unsigned long long)cap);
        break;
      }
    }
    if ((rc = st_pread(f, buf, wa, wb - wa))) break;
    for (uint64_t c = wa / C; f->chunk && c * C < wb && !rc; c++) {
      uint64_t a = c * C, b = a + C < f->data_size ? a + C : f->data_size;
      if (st_crc32(buf + (a - wa), b - a) != f->chunk_crc[c]) {
        const char *who = "";
        for (int k = first; k < m && !*who; k++)
          if (sp[k].a < b && sp[k].b > a) who = f->e[r[sp[k].i].entry].name;
        rc = ts_error_set(TS_EFORMAT, "%s: tensor '%s': data bytes [%llu, %llu) (chunk %llu) fail their CRC-32 "
                          "(file corrupted)", f->path, who, (unsigned long long)a, (unsigned long long)b,
                          (unsigned long long)c);
      }
    }
    /* copy what the window holds of every span that reaches it */
    for (int k = first; k < m && !rc && sp[k].a < wb; k++) {
      uint64_t a = sp[k].a > wa ? sp[k].a : wa, b = sp[k].b < wb ? sp[k].b : wb;
      if (a < b) memcpy((unsigned char *)r[sp[k].i].dst + (a - sp[k].a0), buf + (a - wa), b - a);
    }
    while (first < m && sp[first].b <= wb) first++;
    if (first < m && sp[first].a < wb) sp[first].a = wb; /* a span the window cut: on from its end */
  }
  ts_free(buf);
  free(sp);
  return rc;
}

/* ------------------------------------------------------------------ writer */

typedef struct {
  char *name;
  ts_dtype dt;
  ts_shape shape;
  const void *data;
  void *owned;
  size_t nbytes;
} st_wentry;

struct ts_st_writer {
  st_wentry *e;
  int n, cap;
  char **mkey, **mval;
  int nmeta, mcap;
  uint64_t chunk; /* ts_st_writer_set_chunk: checksum chunks of this many bytes (0: none) */
};

int ts_st_writer_create(ts_st_writer **out) {
  if (!out) return ts_error_set(TS_EINVAL, "ts_st_writer_create: NULL out");
  *out = calloc(1, sizeof **out);
  return *out ? TS_OK : ts_error_set(TS_ENOMEM, "ts_st_writer_create: out of memory");
}

void ts_st_writer_free(ts_st_writer *w) {
  if (!w) return;
  for (int i = 0; i < w->n; i++) {
    free(w->e[i].name);
    ts_free(w->e[i].owned);
  }
  for (int i = 0; i < w->nmeta; i++) {
    free(w->mkey[i]);
    free(w->mval[i]);
  }
  free(w->e);
  free(w->mkey);
  free(w->mval);
  free(w);
}

static int st_writer_add(ts_st_writer *w, const char *name, ts_dtype dt, ts_shape shape,
                         const void *data, int copy) {
  if (!w || !name) return ts_error_set(TS_EINVAL, "ts_st_writer_add: NULL argument");
  if (!name[0] || strcmp(name, "__metadata__") == 0)
    return ts_error_set(TS_EINVAL, "ts_st_writer_add: invalid tensor name '%s'", name);
  if (strcmp(ts_st_dtype_name(dt), "?") == 0)
    return ts_error_set(TS_EDTYPE, "ts_st_writer_add: tensor '%s': invalid dtype %d", name,
                        (int)dt);
  if (shape.ndim < 0 || shape.ndim > TS_MAX_DIMS)
    return ts_error_set(TS_ESHAPE, "ts_st_writer_add: tensor '%s': bad ndim %d", name, shape.ndim);
  uint64_t numel = 1;
  for (int d = 0; d < shape.ndim; d++)
    if (shape.dims[d] < 0 || __builtin_mul_overflow(numel, (uint64_t)shape.dims[d], &numel) ||
        numel > (uint64_t)ST_MAX_INT)
      return ts_error_set(TS_ESHAPE, "ts_st_writer_add: tensor '%s': bad dimension %lld", name,
                          (long long)shape.dims[d]);
  size_t nb = (size_t)numel * ts_dtype_size(dt);
  if (nb && !data)
    return ts_error_set(TS_EINVAL, "ts_st_writer_add: tensor '%s': NULL data", name);
  for (int i = 0; i < w->n; i++)
    if (strcmp(w->e[i].name, name) == 0)
      return ts_error_set(TS_EINVAL, "ts_st_writer_add: tensor '%s' added twice", name);
  if (w->n == w->cap) {
    int nc = w->cap ? 2 * w->cap : 16;
    st_wentry *ne = realloc(w->e, (size_t)nc * sizeof *ne);
    if (!ne) return ts_error_set(TS_ENOMEM, "ts_st_writer_add: out of memory");
    w->e = ne;
    w->cap = nc;
  }
  st_wentry *e = &w->e[w->n];
  memset(e, 0, sizeof *e);
  if (!(e->name = strdup(name))) return ts_error_set(TS_ENOMEM, "ts_st_writer_add: out of memory");
  e->dt = dt;
  e->shape = shape;
  e->nbytes = nb;
  e->data = data;
  if (copy && nb) {
    if (!(e->owned = ts_alloc(nb))) {
      free(e->name);
      return ts_error_set(TS_ENOMEM, "ts_st_writer_add: tensor '%s': out of memory", name);
    }
    memcpy(e->owned, data, nb);
    e->data = e->owned;
  }
  w->n++;
  return TS_OK;
}

int ts_st_writer_add(ts_st_writer *w, const char *name, ts_dtype dt, ts_shape shape,
                     const void *data) {
  return st_writer_add(w, name, dt, shape, data, 0);
}
int ts_st_writer_add_copy(ts_st_writer *w, const char *name, ts_dtype dt, ts_shape shape,
                          const void *data) {
  return st_writer_add(w, name, dt, shape, data, 1);
}
int ts_st_writer_add_tensor(ts_st_writer *w, const char *name, const ts_tensor *t) {
  if (!t) return ts_error_set(TS_EINVAL, "ts_st_writer_add_tensor: NULL tensor");
  return st_writer_add(w, name, t->dtype, t->shape, t->data, 0);
}

static int st_set_meta(ts_st_writer *w, const char *key, const char *value) {
  for (int i = 0; i < w->nmeta; i++)
    if (strcmp(w->mkey[i], key) == 0) {
      char *v = strdup(value);
      if (!v) return ts_error_set(TS_ENOMEM, "ts_st_writer_set_meta: out of memory");
      free(w->mval[i]);
      w->mval[i] = v;
      return TS_OK;
    }
  if (w->nmeta == w->mcap) {
    int nc = w->mcap ? 2 * w->mcap : 8;
    char **k = realloc(w->mkey, (size_t)nc * sizeof *k);
    if (!k) return ts_error_set(TS_ENOMEM, "ts_st_writer_set_meta: out of memory");
    w->mkey = k;
    char **v = realloc(w->mval, (size_t)nc * sizeof *v);
    if (!v) return ts_error_set(TS_ENOMEM, "ts_st_writer_set_meta: out of memory");
    w->mval = v;
    w->mcap = nc;
  }
  char *k = strdup(key), *v = strdup(value);
  if (!k || !v) {
    free(k);
    free(v);
    return ts_error_set(TS_ENOMEM, "ts_st_writer_set_meta: out of memory");
  }
  w->mkey[w->nmeta] = k;
  w->mval[w->nmeta] = v;
  w->nmeta++;
  return TS_OK;
}

int ts_st_writer_set_meta(ts_st_writer *w, const char *key, const char *value) {
  if (!w || !key || !value) return ts_error_set(TS_EINVAL, "ts_st_writer_set_meta: NULL argument");
  if (strcmp(key, TS_ST_CRC_KEY) == 0 || strcmp(key, TS_ST_CHUNK_KEY) == 0 || strcmp(key, TS_ST_CHUNK_CRC_KEY) == 0)
    return ts_error_set(TS_EINVAL, "ts_st_writer_set_meta: key '%s' is reserved", key);
  return st_set_meta(w, key, value);
}


static int cmp_layout_r(const void *a, const void *b, void *ctx) {
  const st_wentry *e = ctx;
  int x = *(const int *)a, y = *(const int *)b;
  size_t sx = ts_dtype_size(e[x].dt), sy = ts_dtype_size(e[y].dt);
  if (sx != sy) return sx > sy ? -1 : 1;
  return x < y ? -1 : x > y;
}

/* Builds the padded header text (8-byte length prefix included) for the given layout. */
static int st_build_header(ts_st_writer *w, const int *ord, uint32_t crc, char **out,
                           size_t *out_len) {
  uint64_t *off = calloc((size_t)w->n + 1, sizeof *off);
  cJSON *root = cJSON_CreateObject(), *meta = cJSON_CreateObject();
  int rc = TS_OK;
  char num[32], crcs[16];
  if (!off || !root || !meta) goto oom;
  uint64_t pos = 0;
  for (int k = 0; k < w->n; k++) {
    off[ord[k]] = pos;
    pos += w->e[ord[k]].nbytes;
  }
  cJSON_AddItemToObject(root, "__metadata__", meta);
  for (int i = 0; i < w->nmeta; i++)
    if (!cJSON_AddStringToObject(meta, w->mkey[i], w->mval[i])) goto oom_nometa;
  snprintf(crcs, sizeof crcs, "%08x", (unsigned)crc);
  if (!cJSON_AddStringToObject(meta, TS_ST_CRC_KEY, crcs)) goto oom_nometa;
  for (int i = 0; i < w->n; i++) {
    const st_wentry *e = &w->e[i];
    cJSON *t = cJSON_CreateObject(), *sh = cJSON_CreateArray(), *of = cJSON_CreateArray();
    if (!t || !sh || !of) {
      cJSON_Delete(t);
      cJSON_Delete(sh);
      cJSON_Delete(of);
      goto oom_nometa;
    }
    cJSON_AddItemToObject(root, e->name, t);
    cJSON_AddStringToObject(t, "dtype", ts_st_dtype_name(e->dt));
    cJSON_AddItemToObject(t, "shape", sh);
    cJSON_AddItemToObject(t, "data_offsets", of);
    for (int d = 0; d < e->shape.ndim; d++) {
      snprintf(num, sizeof num, "%lld", (long long)e->shape.dims[d]);
      cJSON_AddItemToArray(sh, cJSON_CreateRaw(num));
    }
    snprintf(num, sizeof num, "%llu", (unsigned long long)off[i]);
    cJSON_AddItemToArray(of, cJSON_CreateRaw(num));
    snprintf(num, sizeof num, "%llu", (unsigned long long)(off[i] + e->nbytes));
    cJSON_AddItemToArray(of, cJSON_CreateRaw(num));
    if (cJSON_GetArraySize(sh) != e->shape.ndim || cJSON_GetArraySize(of) != 2) goto oom_nometa;
  }
  char *txt = cJSON_PrintUnformatted(root);
  if (!txt) goto oom_nometa;
  size_t len = strlen(txt), padded = (len + 7) & ~(size_t)7;
  char *buf = malloc(8 + padded);
  if (!buf) {
    cJSON_free(txt);
    goto oom_nometa;
  }
  for (int i = 0; i < 8; i++) buf[i] = (char)((uint64_t)padded >> (8 * i));
  memcpy(buf + 8, txt, len);
  memset(buf + 8 + len, ' ', padded - len);
  cJSON_free(txt);
  *out = buf;
  *out_len = 8 + padded;
  goto done;
oom:
  cJSON_Delete(meta);
oom_nometa:
  rc = ts_error_set(TS_ENOMEM, "ts_st_write: out of memory building the header");
done:
  cJSON_Delete(root);
  free(off);
  return rc;
}

int ts_st_writer_set_chunk(ts_st_writer *w, uint64_t bytes) {
  if (!w) return ts_error_set(TS_EINVAL, "ts_st_writer_set_chunk: NULL writer");
  if (bytes > (1ull << 40)) return ts_error_set(TS_EINVAL, "ts_st_writer_set_chunk: chunks of %llu bytes",
                                                 (unsigned long long)bytes);
  w->chunk = bytes;
  return TS_OK;
}

/* CRC-32 of data[0..n) continued from crc, in pieces zlib's uInt can take. */
static uLong crc_more(uLong crc, const unsigned char *p, size_t n) {
  while (n) {
    uInt c = n > (1u << 30) ? (1u << 30) : (uInt)n;
    crc = crc32(crc, p, c);
    p += c;
    n -= c;
  }
  return crc;
}

/* A path ending in ".ckpt": MindSpore's format, the tensors in the order they were added. */
static int st_write_mindspore(ts_st_writer *w, const char *path, uint64_t *bytes, char *sha256_hex) {
  ts__msck_wtensor *t = calloc((size_t)w->n + 1, sizeof *t);
  if (!t) return ts_error_set(TS_ENOMEM, "%s: out of memory", path);
  for (int i = 0; i < w->n; i++)
    t[i] = (ts__msck_wtensor){w->e[i].name, w->e[i].dt, w->e[i].shape, w->e[i].data, w->e[i].nbytes};
  int rc = ts__msck_write(path, t, w->n, w->mkey, w->mval, w->nmeta, TS__MSCK_PIECE, bytes, sha256_hex);
  free(t);
  return rc;
}

static int st_write(ts_st_writer *w, const char *path, uint64_t *bytes, char *sha256_hex) {
  if (!w || !path) return ts_error_set(TS_EINVAL, "ts_st_write: NULL argument");
  if (ts__msck_path(path)) return st_write_mindspore(w, path, bytes, sha256_hex);
  int *ord = malloc(((size_t)w->n + 1) * sizeof *ord);
  char *hdr = NULL, *chunks = NULL;
  size_t hlen = 0;
  int rc = TS_OK;
  if (!ord) return ts_error_set(TS_ENOMEM, "%s: out of memory", path);
  for (int i = 0; i < w->n; i++) ord[i] = i;
  qsort_r(ord, (size_t)w->n, sizeof(int), cmp_layout_r, w->e);
  uLong crc = crc32(0L, Z_NULL, 0);
  uint64_t total = 0;
  for (int k = 0; k < w->n; k++) total += w->e[ord[k]].nbytes;
  uint64_t nch = w->chunk ? (total + w->chunk - 1) / w->chunk : 0, ci = 0, cfill = 0;
  if (w->chunk && !(chunks = malloc(8 * nch + 1))) {
    free(ord);
    return ts_error_set(TS_ENOMEM, "%s: out of memory", path);
  }
  uLong cc = crc32(0L, Z_NULL, 0);
  for (int k = 0; k < w->n; k++) {
    const st_wentry *e = &w->e[ord[k]];
    const unsigned char *p = e->data;
    size_t n = e->nbytes;
    crc = crc_more(crc, p, n);
    while (w->chunk && n) { /* the chunks' checksums, chunks running across tensors */
      size_t t = w->chunk - cfill < n ? (size_t)(w->chunk - cfill) : n;
      cc = crc_more(cc, p, t);
      p += t;
      n -= t;
      cfill += t;
      if (cfill == w->chunk) {
        snprintf(chunks + 8 * ci++, 9, "%08x", (unsigned)cc);
        cc = crc32(0L, Z_NULL, 0);
        cfill = 0;
      }
    }
  }
  if (w->chunk && cfill) snprintf(chunks + 8 * ci++, 9, "%08x", (unsigned)cc);
  if (w->chunk) {
    chunks[8 * nch] = 0;
    char num[32];
    snprintf(num, sizeof num, "%llu", (unsigned long long)w->chunk);
    if ((rc = st_set_meta(w, TS_ST_CHUNK_KEY, num)) || (rc = st_set_meta(w, TS_ST_CHUNK_CRC_KEY, chunks))) goto out;
  }
  if ((rc = st_build_header(w, ord, (uint32_t)crc, &hdr, &hlen))) {
    ts_error_wrap(rc, "%s", path);
    goto out;
  }
  struct sha256_ctx sh;
  sha256_init(&sh);
  ts__afile *af = NULL;
  if ((rc = ts__afile_open(path, &af))) goto out;
  rc = ts__afile_write(af, hdr, hlen);
  if (sha256_hex) sha256_update(&sh, hlen, (const uint8_t *)hdr);
  for (int k = 0; k < w->n && !rc; k++) {
    rc = ts__afile_write(af, w->e[ord[k]].data, w->e[ord[k]].nbytes);
    if (sha256_hex && w->e[ord[k]].nbytes) sha256_update(&sh, w->e[ord[k]].nbytes, w->e[ord[k]].data);
  }
  if (rc) ts__afile_abort(af);
  else rc = ts__afile_commit(af);
  if (!rc && bytes) *bytes = hlen + total;
  if (!rc && sha256_hex) {
    uint8_t dg[SHA256_DIGEST_SIZE];
    sha256_digest(&sh, sizeof dg, dg);
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++) snprintf(sha256_hex + 2 * i, 3, "%02x", dg[i]);
  }
out:
  free(chunks);
  free(hdr);
  free(ord);
  return rc;
}

int ts_st_write(ts_st_writer *w, const char *path) { return st_write(w, path, NULL, NULL); }

int ts_st_write_hashed(ts_st_writer *w, const char *path, uint64_t *bytes, char sha256_hex[65]) {
  return st_write(w, path, bytes, sha256_hex);
}

int ts_sha256_file(const char *path, char sha256_hex[65], uint64_t *bytes) {
  if (!path || !sha256_hex) return ts_error_set(TS_EINVAL, "ts_sha256_file: NULL argument");
  int fd;
  uint64_t size;
  int rc = ts__file_open_read(path, "cannot open", &fd, &size);
  if (rc) return rc;
  struct sha256_ctx sh;
  sha256_init(&sh);
  size_t cap = 1u << 20;
  unsigned char *buf = malloc(cap);
  uint64_t seen = 0;
  if (!buf) rc = ts_error_set(TS_ENOMEM, "%s: out of memory", path);
  for (;;) {
    if (rc) break;
    ssize_t k = read(fd, buf, cap);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) rc = ts_error_set(TS_EIO, "%s: read failed: %s", path, strerror(errno));
    if (k <= 0) break;
    sha256_update(&sh, (size_t)k, buf);
    seen += (uint64_t)k;
  }
  close(fd);
  free(buf);
  if (rc) return rc;
  uint8_t dg[SHA256_DIGEST_SIZE];
  sha256_digest(&sh, sizeof dg, dg);
  for (int i = 0; i < SHA256_DIGEST_SIZE; i++) snprintf(sha256_hex + 2 * i, 3, "%02x", dg[i]);
  if (bytes) *bytes = seen;
  return TS_OK;
}
