/* MindSpore's .ckpt files: the protobuf wire format by hand (three messages, two wire types);
 * see ms_ckpt.h for the format and the contract. */
#define _GNU_SOURCE /* strndup */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nettle/sha2.h>

#include "ms_ckpt.h"
#include "../base/afile.h"

/* ------------------------------------------------------------------ types */

typedef enum { MS_KEEP, MS_BOOL, MS_I8, MS_I16, MS_U16, MS_U32, MS_U64, MS_F64 } ms_conv;

static const struct {
  const char *name;
  ts_dtype dt;   /* what Tessera holds it as */
  int size;      /* MindSpore's bytes per element */
  ms_conv conv;
} k_types[] = {
    {"Float32", TS_F32, 4, MS_KEEP}, {"BFloat16", TS_BF16, 2, MS_KEEP}, {"Float16", TS_F16, 2, MS_KEEP},
    {"Int32", TS_I32, 4, MS_KEEP},   {"Int64", TS_I64, 8, MS_KEEP},     {"UInt8", TS_U8, 1, MS_KEEP},
    {"Bool", TS_U8, 1, MS_BOOL},     {"Int8", TS_I32, 1, MS_I8},        {"Int16", TS_I32, 2, MS_I16},
    {"UInt16", TS_I32, 2, MS_U16},   {"UInt32", TS_I64, 4, MS_U32},     {"UInt64", TS_I64, 8, MS_U64},
    {"Float64", TS_F32, 8, MS_F64},
};
#define NTYPES ((int)(sizeof k_types / sizeof k_types[0]))

static int type_of(const char *s, size_t n) {
  for (int i = 0; i < NTYPES; i++)
    if (strlen(k_types[i].name) == n && memcmp(k_types[i].name, s, n) == 0) return i;
  return -1;
}

static const char *ms_name(ts_dtype dt) {
  for (int i = 0; i < NTYPES; i++)
    if (k_types[i].dt == dt && k_types[i].conv == MS_KEEP) return k_types[i].name;
  return NULL;
}

int ts__msck_path(const char *path) {
  size_t n = path ? strlen(path) : 0;
  return n > 5 && strcmp(path + n - 5, ".ckpt") == 0;
}

int ts__msck_sniff(const unsigned char *b, uint64_t n) {
  if (n < 2 || b[0] != 0x0a) return 0; /* field 1, length-delimited: a Checkpoint's first value */
  if (n >= 9) {                        /* a plausible safetensors header wins */
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--) h = (h << 8) | b[i];
    if (h <= n - 8 && b[8] == '{') return 0;
  }
  return 1;
}

/* ------------------------------------------------------------------ reading */

typedef struct {
  const unsigned char *p, *end;
} rd;

static int get_varint(rd *r, uint64_t *v) {
  uint64_t x = 0;
  for (int s = 0; s < 64; s += 7) {
    if (r->p >= r->end) return -1;
    unsigned c = *r->p++;
    x |= (uint64_t)(c & 0x7f) << s;
    if (!(c & 0x80)) {
      *v = x;
      return 0;
    }
  }
  return -1;
}

/* Skips a field of wire type wt; -1 on a malformed or unknown wire type. */
static int skip_field(rd *r, unsigned wt) {
  uint64_t v;
  switch (wt) {
  case 0: return get_varint(r, &v);
  case 1: if (r->end - r->p < 8) return -1; r->p += 8; return 0;
  case 5: if (r->end - r->p < 4) return -1; r->p += 4; return 0;
  case 2:
    if (get_varint(r, &v) || v > (uint64_t)(r->end - r->p)) return -1;
    r->p += v;
    return 0;
  default: return -1;
  }
}

/* A length-delimited field's bytes. */
static int get_bytes(rd *r, rd *out) {
  uint64_t v;
  if (get_varint(r, &v) || v > (uint64_t)(r->end - r->p)) return -1;
  out->p = r->p;
  out->end = r->p + v;
  r->p += v;
  return 0;
}

typedef struct {
  const unsigned char *tag, *type, *content;
  uint64_t ntag, ntype, ncontent;
  int ndims, map;
  int64_t dims[TS_MAX_DIMS + 1];
  int toomany;
} ms_value;

static int parse_tensor(rd t, ms_value *v) {
  while (t.p < t.end) {
    uint64_t key;
    if (get_varint(&t, &key)) return -1;
    unsigned f = (unsigned)(key >> 3), wt = (unsigned)(key & 7);
    if (f == 1 && wt == 0) { /* dims, unpacked (proto2's default) */
      uint64_t d;
      if (get_varint(&t, &d)) return -1;
      if (v->ndims <= TS_MAX_DIMS) v->dims[v->ndims++] = (int64_t)d;
      else v->toomany = 1;
    } else if (f == 1 && wt == 2) { /* dims, packed */
      rd pk;
      if (get_bytes(&t, &pk)) return -1;
      while (pk.p < pk.end) {
        uint64_t d;
        if (get_varint(&pk, &d)) return -1;
        if (v->ndims <= TS_MAX_DIMS) v->dims[v->ndims++] = (int64_t)d;
        else v->toomany = 1;
      }
    } else if ((f == 2 || f == 3) && wt == 2) {
      rd b;
      if (get_bytes(&t, &b)) return -1;
      if (f == 2) v->type = b.p, v->ntype = (uint64_t)(b.end - b.p);
      else v->content = b.p, v->ncontent = (uint64_t)(b.end - b.p);
    } else if (skip_field(&t, wt)) {
      return -1;
    }
  }
  return 0;
}

static int parse_value(rd r, ms_value *v) {
  memset(v, 0, sizeof *v);
  while (r.p < r.end) {
    uint64_t key;
    if (get_varint(&r, &key)) return -1;
    unsigned f = (unsigned)(key >> 3), wt = (unsigned)(key & 7);
    rd b;
    if (f == 1 && wt == 2) {
      if (get_bytes(&r, &b)) return -1;
      v->tag = b.p, v->ntag = (uint64_t)(b.end - b.p);
    } else if (f == 2 && wt == 2) {
      if (get_bytes(&r, &b) || parse_tensor(b, v)) return -1;
    } else if (f == 3 && wt == 2) {
      if (get_bytes(&r, &b)) return -1;
      v->map = 1;
    } else if (skip_field(&r, wt)) {
      return -1;
    }
  }
  return 0;
}

/* UTF-32LE (numpy's "U") to UTF-8, trailing NULs dropped. */
static char *utf32_to_utf8(const unsigned char *p, uint64_t n) {
  char *s = malloc(n + 1), *o = s; /* 4 bytes in -> at most 4 out */
  if (!s) return NULL;
  for (uint64_t i = 0; i + 4 <= n; i += 4) {
    uint32_t c = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 | (uint32_t)p[i + 3] << 24;
    if (c > 0x10ffff || (c >= 0xd800 && c < 0xe000)) c = 0xfffd;
    if (c < 0x80) *o++ = (char)c;
    else if (c < 0x800) *o++ = (char)(0xc0 | c >> 6), *o++ = (char)(0x80 | (c & 0x3f));
    else if (c < 0x10000)
      *o++ = (char)(0xe0 | c >> 12), *o++ = (char)(0x80 | ((c >> 6) & 0x3f)), *o++ = (char)(0x80 | (c & 0x3f));
    else
      *o++ = (char)(0xf0 | c >> 18), *o++ = (char)(0x80 | ((c >> 12) & 0x3f)),
      *o++ = (char)(0x80 | ((c >> 6) & 0x3f)), *o++ = (char)(0x80 | (c & 0x3f));
  }
  while (o > s && o[-1] == 0) o--;
  *o = 0;
  return s;
}

/* One tensor: values [a, b) of one tag, joined. */
typedef struct {
  int a, b, type;
  uint64_t bytes; /* MindSpore's bytes, all pieces */
  ts_shape shape;
} ms_group;

static void convert(unsigned char *dst, const unsigned char *src, uint64_t nel, ms_conv c) {
  for (uint64_t i = 0; i < nel; i++) {
    switch (c) {
    case MS_BOOL: dst[i] = src[i] ? 1 : 0; break;
    case MS_I8: { int32_t v = (int8_t)src[i]; memcpy(dst + 4 * i, &v, 4); break; }
    case MS_I16: { int16_t h; memcpy(&h, src + 2 * i, 2); int32_t v = h; memcpy(dst + 4 * i, &v, 4); break; }
    case MS_U16: { uint16_t h; memcpy(&h, src + 2 * i, 2); int32_t v = h; memcpy(dst + 4 * i, &v, 4); break; }
    case MS_U32: { uint32_t h; memcpy(&h, src + 4 * i, 4); int64_t v = h; memcpy(dst + 8 * i, &v, 8); break; }
    case MS_U64: { uint64_t h; memcpy(&h, src + 8 * i, 8); int64_t v = (int64_t)h; memcpy(dst + 8 * i, &v, 8); break; }
    case MS_F64: { double h; memcpy(&h, src + 8 * i, 8); float v = (float)h; memcpy(dst + 4 * i, &v, 4); break; }
    case MS_KEEP: break;
    }
  }
}

void ts__msck_free(ts__msck *c) {
  if (!c) return;
  for (int i = 0; i < c->n; i++) free(c->t[i].name);
  for (int i = 0; i < c->nmeta; i++) {
    free(c->mkey[i]);
    free(c->mval[i]);
  }
  free(c->t);
  free(c->mkey);
  free(c->mval);
  ts_free(c->data);
  memset(c, 0, sizeof *c);
}

#define FAIL(...) do { rc = ts_error_set(TS_EFORMAT, __VA_ARGS__); goto done; } while (0)

int ts__msck_parse(const char *label, const unsigned char *b, uint64_t n, ts__msck *out) {
  memset(out, 0, sizeof *out);
  int rc = TS_OK, nv = 0, cap = 0, ng = 0;
  ms_value *v = NULL;
  ms_group *g = NULL;
  /* pass 1: every value */
  rd r = {b, b + n};
  while (r.p < r.end) {
    uint64_t key, at = (uint64_t)(r.p - b);
    if (get_varint(&r, &key)) FAIL("%s: not a MindSpore checkpoint: bad field key at byte %llu", label, (unsigned long long)at);
    rd val;
    if (key != (1 << 3 | 2)) {
      if (skip_field(&r, (unsigned)(key & 7)))
        FAIL("%s: not a MindSpore checkpoint: unreadable field %llu at byte %llu (truncated?)", label,
             (unsigned long long)(key >> 3), (unsigned long long)at);
      continue;
    }
    if (get_bytes(&r, &val))
      FAIL("%s: MindSpore checkpoint truncated: value %d at byte %llu runs past the end of the file", label, nv,
           (unsigned long long)at);
    if (nv == cap) {
      cap = cap ? 2 * cap : 64;
      ms_value *nvp = realloc(v, (size_t)cap * sizeof *v);
      if (!nvp) { rc = ts_error_set(TS_ENOMEM, "%s: out of memory", label); goto done; }
      v = nvp;
    }
    if (parse_value(val, &v[nv]))
      FAIL("%s: MindSpore checkpoint: value %d at byte %llu is not a well-formed Checkpoint.Value", label, nv,
           (unsigned long long)at);
    if (!v[nv].tag || (!v[nv].map && (!v[nv].type || !v[nv].content))) /* proto2's required fields */
      FAIL("%s: MindSpore checkpoint: value %d at byte %llu has no %s", label, nv, (unsigned long long)at,
           !v[nv].tag ? "tag" : !v[nv].type ? "tensor_type" : "tensor_content");
    nv++;
  }
  /* pass 2: group the values of one tag; sizes and types */
  g = calloc((size_t)nv + 1, sizeof *g);
  if (!g) { rc = ts_error_set(TS_ENOMEM, "%s: out of memory", label); goto done; }
  uint64_t total = 0;
  int nmeta = 0;
  for (int i = 0; i < nv;) {
    int j = i + 1;
    while (j < nv && v[j].ntag == v[i].ntag && memcmp(v[j].tag, v[i].tag, v[i].ntag) == 0) j++;
    const ms_value *x = &v[i];
    int tl = x->ntag > 200 ? 200 : (int)x->ntag;
    const char *T = (const char *)x->tag;
    if (x->map) FAIL("%s: '%.*s' is a MindSpore map parameter (MapParameter): not supported", label, tl, T);
    if (x->ntype == 9 && memcmp(x->type, "random_op", 9) == 0) {
      out->skipped++;
      i = j;
      continue;
    }
    if (x->ntype == 3 && memcmp(x->type, "str", 3) == 0) {
      if (j - i > 1) FAIL("%s: string value '%.*s' is split over %d values", label, tl, T, j - i);
      g[ng++] = (ms_group){i, j, -1, x->ncontent, {0}};
      nmeta++;
      i = j;
      continue;
    }
    int ty = type_of((const char *)x->type, x->ntype);
    if (ty < 0)
      FAIL("%s: tensor '%.*s' has type '%.*s' (supported: Float32, BFloat16, Float16, Float64, Int8..Int64, "
           "UInt8..UInt64, Bool, str)", label, tl, T, x->ntype > 40 ? 40 : (int)x->ntype, (const char *)x->type);
    if (x->toomany || x->ndims > TS_MAX_DIMS) FAIL("%s: tensor '%.*s' has more than %d dims", label, tl, T, TS_MAX_DIMS);
    ms_group G = {i, j, ty, 0, {0}};
    G.shape.ndim = x->ndims;
    for (int d = 0; d < x->ndims; d++) {
      if (x->dims[d] < 0) FAIL("%s: tensor '%.*s' has a negative dim %lld", label, tl, T, (long long)x->dims[d]);
      G.shape.dims[d] = x->dims[d];
    }
    for (int k = i; k < j; k++) {
      if (v[k].ndims != x->ndims || memcmp(v[k].dims, x->dims, sizeof(int64_t) * (size_t)x->ndims) ||
          v[k].ntype != x->ntype || memcmp(v[k].type, x->type, x->ntype))
        FAIL("%s: tensor '%.*s': its pieces (values %d and %d) differ in dims or type", label, tl, T, i, k);
      G.bytes += v[k].ncontent;
    }
    uint64_t es = (uint64_t)k_types[ty].size;
    if (G.shape.ndim == 1 && G.shape.dims[0] == 0 && G.bytes == es) G.shape.ndim = 0; /* [0]: a number */
    uint64_t nel = 1;
    for (int d = 0; d < G.shape.ndim; d++) {
      if (G.shape.dims[d] && nel > UINT64_MAX / 16 / (uint64_t)G.shape.dims[d])
        FAIL("%s: tensor '%.*s': dims overflow", label, tl, T);
      nel *= (uint64_t)G.shape.dims[d];
    }
    if (nel * es != G.bytes) {
      char sh[128];
      FAIL("%s: tensor '%.*s' (%s, dims %s) should hold %llu bytes, its %d value(s) hold %llu (truncated or corrupt)",
           label, tl, T, k_types[ty].name, ts_shape_str(&G.shape, sh, sizeof sh), (unsigned long long)(nel * es),
           j - i, (unsigned long long)G.bytes);
    }
    total += (nel * ts_dtype_size(k_types[ty].dt) + 63) / 64 * 64;
    g[ng++] = G;
    i = j;
  }
  /* pass 3: the data, converted where Tessera holds another type */
  int nt = ng - nmeta;
  out->t = calloc((size_t)nt + 1, sizeof *out->t);
  out->mkey = calloc((size_t)nmeta + 1, sizeof(char *));
  out->mval = calloc((size_t)nmeta + 1, sizeof(char *));
  out->data = ts_alloc(total ? total : 1);
  if (!out->t || !out->mkey || !out->mval || !out->data) {
    rc = ts_error_set(TS_ENOMEM, "%s: cannot allocate %llu bytes for the tensors", label, (unsigned long long)total);
    goto done;
  }
  out->size = total;
  uint64_t pos = 0;
  for (int k = 0; k < ng; k++) {
    const ms_group *G = &g[k];
    const ms_value *x = &v[G->a];
    char *name = strndup((const char *)x->tag, x->ntag);
    if (!name) { rc = ts_error_set(TS_ENOMEM, "%s: out of memory", label); goto done; }
    if (G->type < 0) {
      out->mkey[out->nmeta] = name;
      if (!(out->mval[out->nmeta++] = utf32_to_utf8(x->content, x->ncontent))) {
        rc = ts_error_set(TS_ENOMEM, "%s: out of memory", label);
        goto done;
      }
      continue;
    }
    ts__msck_tensor *t = &out->t[out->n++];
    t->name = name;
    t->dt = k_types[G->type].dt;
    t->shape = G->shape;
    t->from = k_types[G->type].conv == MS_KEEP ? NULL : k_types[G->type].name;
    t->begin = pos;
    unsigned char *dst = out->data + pos;
    uint64_t es = (uint64_t)k_types[G->type].size, nel = G->bytes / es;
    for (int i = G->a; i < G->b; i++) {
      if (k_types[G->type].conv == MS_KEEP) {
        memcpy(dst, v[i].content, v[i].ncontent);
        dst += v[i].ncontent;
      } else {
        uint64_t m = v[i].ncontent / es;
        if (k_types[G->type].conv == MS_U64)
          for (uint64_t e = 0; e < m; e++)
            if (v[i].content[8 * e + 7] & 0x80)
              FAIL("%s: tensor '%s' (UInt64) holds a value of 2^63 or more (Tessera holds it as Int64)", label, name);
        convert(dst, v[i].content, m, k_types[G->type].conv);
        dst += m * ts_dtype_size(t->dt);
      }
    }
    t->end = pos + nel * ts_dtype_size(t->dt);
    pos += (t->end - pos + 63) / 64 * 64;
  }
done:
  free(v);
  free(g);
  if (rc) ts__msck_free(out);
  return rc;
}

/* ------------------------------------------------------------------ writing */

typedef struct {
  unsigned char b[64 + 16 * TS_MAX_DIMS + 4096];
  size_t n;
} pbuf;

static void put_varint(pbuf *p, uint64_t v) {
  while (v >= 0x80) {
    p->b[p->n++] = (unsigned char)(v | 0x80);
    v >>= 7;
  }
  p->b[p->n++] = (unsigned char)v;
}

static size_t varint_len(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) v >>= 7, n++;
  return n;
}

typedef struct {
  ts__afile *af;
  struct sha256_ctx sh;
  uint64_t bytes;
} wr;

static int emit(wr *w, const void *p, size_t n) {
  if (!n) return TS_OK;
  sha256_update(&w->sh, n, p);
  w->bytes += n;
  return ts__afile_write(w->af, p, n);
}

/* One Checkpoint message of one value: its prefix through the content's length, then the
 * content itself (never copied). */
static int emit_value(wr *w, const char *tag, const int64_t *dims, int ndims, const char *type,
                      const void *content, uint64_t ncontent) {
  size_t ntag = strlen(tag), ntype = strlen(type);
  if (ntag > 4096 - 64) return ts_error_set(TS_EINVAL, "tensor name of %zu bytes is too long for a .ckpt", ntag);
  uint64_t tensor = 0;
  for (int d = 0; d < ndims; d++) tensor += 1 + varint_len((uint64_t)dims[d]);
  tensor += 1 + varint_len(ntype) + ntype + 1 + varint_len(ncontent) + ncontent;
  uint64_t value = 1 + varint_len(ntag) + ntag + 1 + varint_len(tensor) + tensor;
  pbuf p = {.n = 0};
  p.b[p.n++] = 1 << 3 | 2; /* Checkpoint.value */
  put_varint(&p, value);
  p.b[p.n++] = 1 << 3 | 2; /* Value.tag */
  put_varint(&p, ntag);
  memcpy(p.b + p.n, tag, ntag);
  p.n += ntag;
  p.b[p.n++] = 2 << 3 | 2; /* Value.tensor */
  put_varint(&p, tensor);
  for (int d = 0; d < ndims; d++) {
    p.b[p.n++] = 1 << 3 | 0; /* TensorProto.dims */
    put_varint(&p, (uint64_t)dims[d]);
  }
  p.b[p.n++] = 2 << 3 | 2; /* TensorProto.tensor_type */
  put_varint(&p, ntype);
  memcpy(p.b + p.n, type, ntype);
  p.n += ntype;
  p.b[p.n++] = 3 << 3 | 2; /* TensorProto.tensor_content */
  put_varint(&p, ncontent);
  int rc = emit(w, p.b, p.n);
  return rc ? rc : emit(w, content, (size_t)ncontent);
}

/* UTF-8 to UTF-32LE (invalid bytes become U+FFFD); *n: bytes written. */
static unsigned char *utf8_to_utf32(const char *s, uint64_t *n) {
  size_t len = strlen(s);
  unsigned char *o = malloc(4 * len + 4), *q = o;
  if (!o) return NULL;
  const unsigned char *p = (const unsigned char *)s, *e = p + len;
  while (p < e) {
    uint32_t c = *p;
    int k = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (k < 0 || (uint64_t)(e - p) <= (uint64_t)k) {
      c = 0xfffd, k = 0;
    } else if (k) {
      c &= 0x3fu >> k;
      for (int i = 1; i <= k; i++) {
        if ((p[i] & 0xc0) != 0x80) { c = 0xfffd, k = 0; break; }
        c = c << 6 | (p[i] & 0x3f);
      }
    }
    p += k + 1;
    q[0] = (unsigned char)c, q[1] = (unsigned char)(c >> 8), q[2] = (unsigned char)(c >> 16), q[3] = (unsigned char)(c >> 24);
    q += 4;
  }
  *n = (uint64_t)(q - o);
  return o;
}

int ts__msck_write(const char *path, const ts__msck_wtensor *t, int n, char *const *mkey,
                   char *const *mval, int nmeta, uint64_t piece, uint64_t *bytes, char *sha256_hex) {
  if (!piece) return ts_error_set(TS_EINVAL, "ts__msck_write: pieces of 0 bytes");
  for (int i = 0; i < n; i++)
    if (!ms_name(t[i].dt))
      return ts_error_set(TS_EDTYPE, "%s: tensor '%s' has dtype %s, which a .ckpt cannot hold", path, t[i].name,
                          ts_dtype_name(t[i].dt));
  wr w = {0};
  sha256_init(&w.sh);
  int rc = ts__afile_open(path, &w.af);
  if (rc) return rc;
  for (int i = 0; i < n && !rc; i++) {
    uint64_t off = 0;
    do { /* pieces of at most `piece` bytes, each with the whole dims (as MindSpore writes) */
      uint64_t k = t[i].nbytes - off < piece ? t[i].nbytes - off : piece;
      rc = emit_value(&w, t[i].name, t[i].shape.dims, t[i].shape.ndim, ms_name(t[i].dt),
                      (const unsigned char *)t[i].data + off, k);
      off += k;
    } while (!rc && off < t[i].nbytes);
    if (rc) ts_error_wrap(rc, "%s: tensor '%s'", path, t[i].name);
  }
  for (int i = 0; i < nmeta && !rc; i++) {
    uint64_t nb;
    unsigned char *u = utf8_to_utf32(mval[i], &nb);
    if (!u) rc = ts_error_set(TS_ENOMEM, "%s: out of memory", path);
    else rc = emit_value(&w, mkey[i], (const int64_t[]){0}, 1, "str", u, nb);
    free(u);
  }
  if (rc) {
    ts__afile_abort(w.af);
    return rc;
  }
  if ((rc = ts__afile_commit(w.af))) return rc;
  if (bytes) *bytes = w.bytes;
  if (sha256_hex) {
    uint8_t dg[SHA256_DIGEST_SIZE];
    sha256_digest(&w.sh, sizeof dg, dg);
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++) snprintf(sha256_hex + 2 * i, 3, "%02x", dg[i]);
  }
  return TS_OK;
}
