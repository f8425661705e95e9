/* The manifest of a sliced checkpoint (include/tessera/checkpoint.h, docs/checkpoints.md): built
 * from the ranks' records, checked, written atomically, read back and validated. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_impl.h"
#include "../base/afile.h"
#include "../base/rfile.h"
#include "../base/text.h"

#define MAX_INT53 ((int64_t)1 << 53)

typedef struct {
  int file;    /* index into files */
  char *entry; /* its name in the file */
  ts_region r;
} mpiece;

typedef struct {
  char *name;
  ts_dtype dt;
  ts_shape shape;
  mpiece *p;
  int np, cap;
} mtensor;

typedef struct {
  char *name;
  int rank; /* -1: not a rank file */
  uint64_t bytes;
  char sha[65];
} mfile;

struct ts_ckpt_manifest {
  char *dir;
  char id[64], version[32], model[64];
  int has_hash;
  uint64_t hash;
  char *config, *layout;
  ts_ckpt_position pos;
  int world;
  mfile *f;
  int nf, fcap;
  mtensor *t;
  int nt, tcap;
  int *slot; /* open-addressing table of tensor indices by name (hcap entries, -1 empty) */
  int hcap;
};

/* The error now set, prefixed with where: "where: reason", the reason copied first (the message
 * buffer is both the source and the destination) and its own "manifest: " dropped. */
static int with_where(int code, const char *where) {
  char why[1024];
  const char *e = ts_last_error();
  if (!strncmp(e, "manifest: ", 10)) e += 10;
  snprintf(why, sizeof why, "%s", e);
  return ts_error_set(code, "%s: %s", where, why);
}

/* ---- JSON helpers shared with the rank files (ckpt_impl.h) ---- */

static cJSON *jint(int64_t v) {
  char b[32];
  snprintf(b, sizeof b, "%" PRId64, v);
  return cJSON_CreateRaw(b);
}

static cJSON *jdims(int n, const int64_t *v) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, jint(v[i]));
  return a;
}

int ts__ckpt_json_int(const cJSON *j, int64_t lo, int64_t *out) {
  if (!cJSON_IsNumber(j)) return 0;
  double v = j->valuedouble;
  if (!(v >= (double)lo && v <= (double)MAX_INT53) || v != (double)(int64_t)v) return 0;
  *out = (int64_t)v;
  return 1;
}

int ts__ckpt_json_shape(const cJSON *j, ts_shape *out) {
  memset(out, 0, sizeof *out);
  if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) > TS_MAX_DIMS) return 0;
  out->ndim = cJSON_GetArraySize(j);
  int64_t n = 1;
  for (int d = 0; d < out->ndim; d++) {
    if (!ts__ckpt_json_int(cJSON_GetArrayItem(j, d), 0, &out->dims[d])) return 0;
    if (out->dims[d] && n > MAX_INT53 / out->dims[d]) return 0; /* every partial product fits: ts_shape_numel */
    n *= out->dims[d];
  }
  return 1;
}

int ts__ckpt_region_to_json(cJSON *o, const ts_shape *shape, const ts_region *r) {
  int same = r->ndim == shape->ndim, whole_box = 1;
  for (int d = 0; same && d < r->ndim; d++) same = r->dims[d] == shape->dims[d];
  for (int d = 0; d < r->ndim; d++) whole_box &= r->off[d] == 0 && r->ext[d] == r->dims[d];
  int64_t bn = 1;
  for (int d = 0; d < r->ndim; d++) bn *= r->ext[d];
  cJSON_AddItemToObject(o, "shape", jdims(shape->ndim, shape->dims));
  if (!same) cJSON_AddItemToObject(o, "view", jdims(r->ndim, r->dims));
  if (!whole_box) {
    cJSON_AddItemToObject(o, "offset", jdims(r->ndim, r->off));
    cJSON_AddItemToObject(o, "box", jdims(r->ndim, r->ext));
  }
  if (r->lo != 0 || r->hi != bn) {
    int64_t lh[2] = {r->lo, r->hi};
    cJSON_AddItemToObject(o, "range", jdims(2, lh));
  }
  return TS_OK;
}

int ts__ckpt_region_from_json(const cJSON *o, const ts_shape *shape, ts_region *r, const char *where) {
  ts_shape view = *shape, off, box;
  const cJSON *jv = cJSON_GetObjectItemCaseSensitive(o, "view"), *jo = cJSON_GetObjectItemCaseSensitive(o, "offset"),
              *jb = cJSON_GetObjectItemCaseSensitive(o, "box"), *jr = cJSON_GetObjectItemCaseSensitive(o, "range");
  if (jv && !ts__ckpt_json_shape(jv, &view))
    return ts_error_set(TS_EFORMAT, "%s: \"view\" is not a list of at most %d sizes of at most 2^53 elements", where,
                        TS_MAX_DIMS);
  if (ts_shape_numel(&view) != ts_shape_numel(shape))
    return ts_error_set(TS_EFORMAT, "%s: \"view\" has another element count than \"shape\"", where);
  if (!jo != !jb) return ts_error_set(TS_EFORMAT, "%s: \"offset\" and \"box\" go together", where);
  if (jo && (!ts__ckpt_json_shape(jo, &off) || !ts__ckpt_json_shape(jb, &box) || off.ndim != view.ndim ||
             box.ndim != view.ndim))
    return ts_error_set(TS_EFORMAT, "%s: \"offset\" and \"box\" must be lists of %d non-negative integers", where,
                        view.ndim);
  int rc = ts_region_box(r, &view, jo ? off.dims : NULL, jb ? box.dims : NULL);
  if (rc) return with_where(TS_EFORMAT, where);
  if (jr) {
    int64_t lo, hi;
    if (!cJSON_IsArray(jr) || cJSON_GetArraySize(jr) != 2 || !ts__ckpt_json_int(cJSON_GetArrayItem(jr, 0), 0, &lo) ||
        !ts__ckpt_json_int(cJSON_GetArrayItem(jr, 1), 0, &hi))
      return ts_error_set(TS_EFORMAT, "%s: \"range\" must be [begin, end]", where);
    if ((rc = ts_region_restrict(r, lo, hi))) return with_where(TS_EFORMAT, where);
  }
  return TS_OK;
}

/* ---- building ---- */

static uint64_t name_hash(const char *s) {
  return ts__fnv1a_str(TS__FNV1A_BASIS, s);
}

static int find_tensor(const ts_ckpt_manifest *m, const char *name) {
  if (!m->hcap) return -1;
  for (uint64_t i = name_hash(name) & (uint64_t)(m->hcap - 1);; i = (i + 1) & (uint64_t)(m->hcap - 1)) {
    int k = m->slot[i];
    if (k < 0) return -1;
    if (!strcmp(m->t[k].name, name)) return k;
  }
}

static int rehash(ts_ckpt_manifest *m, int cap) {
  int *s = malloc(sizeof(int) * (size_t)cap);
  if (!s) return ts_error_set(TS_ENOMEM, "manifest: out of memory");
  for (int i = 0; i < cap; i++) s[i] = -1;
  for (int k = 0; k < m->nt; k++) {
    uint64_t i = name_hash(m->t[k].name) & (uint64_t)(cap - 1);
    while (s[i] >= 0) i = (i + 1) & (uint64_t)(cap - 1);
    s[i] = k;
  }
  free(m->slot);
  m->slot = s;
  m->hcap = cap;
  return TS_OK;
}

void ts_ckpt_manifest_free(ts_ckpt_manifest *m) {
  if (!m) return;
  for (int i = 0; i < m->nt; i++) {
    for (int j = 0; j < m->t[i].np; j++) free(m->t[i].p[j].entry);
    free(m->t[i].p);
    free(m->t[i].name);
  }
  for (int i = 0; i < m->nf; i++) free(m->f[i].name);
  free(m->t);
  free(m->f);
  free(m->slot);
  free(m->config);
  free(m->layout);
  free(m->dir);
  free(m);
}

int ts_ckpt_manifest_create(const ts_ckpt_state *st, const char *id, int world_size, ts_ckpt_manifest **out) {
  *out = NULL;
  if (!st || !id) return ts_error_set(TS_EINVAL, "ts_ckpt_manifest_create: NULL argument");
  ts_ckpt_manifest *m = calloc(1, sizeof *m);
  if (!m) return ts_error_set(TS_ENOMEM, "manifest: out of memory");
  snprintf(m->id, sizeof m->id, "%s", id);
  snprintf(m->version, sizeof m->version, "%s", st->version ? st->version : ts_version());
  snprintf(m->model, sizeof m->model, "%s", st->model ? st->model : "");
  m->has_hash = st->config_hash != 0;
  m->hash = st->config_hash;
  m->pos = st->pos;
  m->world = world_size;
  if ((st->config_yaml && !(m->config = strdup(st->config_yaml))) || !(m->dir = strdup(""))) {
    ts_ckpt_manifest_free(m);
    return ts_error_set(TS_ENOMEM, "manifest: out of memory");
  }
  *out = m;
  return TS_OK;
}

int ts_ckpt_manifest_set_layout(ts_ckpt_manifest *m, const char *json) {
  cJSON *j = json ? cJSON_Parse(json) : NULL;
  int ok = cJSON_IsObject(j);
  cJSON_Delete(j);
  if (!ok) return ts_error_set(TS_EINVAL, "manifest: the layout is not a JSON object");
  char *c = strdup(json);
  if (!c) return ts_error_set(TS_ENOMEM, "manifest: out of memory");
  free(m->layout);
  m->layout = c;
  return TS_OK;
}

int ts_ckpt_manifest_add_tensor(ts_ckpt_manifest *m, const char *name, ts_dtype dt, const ts_shape *shape) {
  if (!name || !*name || !shape || !ts_dtype_size(dt))
    return ts_error_set(TS_EINVAL, "manifest: a tensor needs a name, a dtype and a shape");
  if (find_tensor(m, name) >= 0) return ts_error_set(TS_EINVAL, "manifest: tensor '%s' added twice", name);
  if (m->nt == m->tcap) {
    int nc = m->tcap ? 2 * m->tcap : 64;
    mtensor *t = realloc(m->t, sizeof *t * (size_t)nc);
    if (!t) return ts_error_set(TS_ENOMEM, "manifest: out of memory");
    m->t = t;
    m->tcap = nc;
  }
  mtensor *t = &m->t[m->nt];
  memset(t, 0, sizeof *t);
  if (!(t->name = strdup(name))) return ts_error_set(TS_ENOMEM, "manifest: out of memory");
  t->dt = dt;
  t->shape = *shape;
  m->nt++;
  if (2 * m->nt > m->hcap) return rehash(m, m->hcap ? 2 * m->hcap : 128);
  uint64_t i = name_hash(name) & (uint64_t)(m->hcap - 1);
  while (m->slot[i] >= 0) i = (i + 1) & (uint64_t)(m->hcap - 1);
  m->slot[i] = m->nt - 1;
  return TS_OK;
}

static int add_file(ts_ckpt_manifest *m, const char *name, int rank, uint64_t bytes, const char *sha) {
  for (int i = 0; i < m->nf; i++)
    if (!strcmp(m->f[i].name, name)) return ts_error_set(TS_EINVAL, "manifest: file '%s' listed twice", name);
  if (strchr(name, '/') || !strcmp(name, "..") || !strcmp(name, ".") || !*name)
    return ts_error_set(TS_EINVAL, "manifest: file name '%s' is not a name in the directory", name);
  if (strlen(sha) != 64 || strspn(sha, "0123456789abcdef") != 64)
    return ts_error_set(TS_EINVAL, "manifest: file '%s': the SHA-256 is not 64 lowercase hex digits", name);
  if (m->nf == m->fcap) {
    int nc = m->fcap ? 2 * m->fcap : 16;
    mfile *f = realloc(m->f, sizeof *f * (size_t)nc);
    if (!f) return ts_error_set(TS_ENOMEM, "manifest: out of memory");
    m->f = f;
    m->fcap = nc;
  }
  mfile *f = &m->f[m->nf];
  memset(f, 0, sizeof *f);
  if (!(f->name = strdup(name))) return ts_error_set(TS_ENOMEM, "manifest: out of memory");
  f->rank = rank;
  f->bytes = bytes;
  snprintf(f->sha, sizeof f->sha, "%s", sha);
  m->nf++;
  return TS_OK;
}

static int add_piece(ts_ckpt_manifest *m, int file, const char *tensor, const char *entry, const ts_region *r,
                     const char *where) {
  int k = find_tensor(m, tensor);
  if (k < 0) return ts_error_set(TS_EINVAL, "%s: piece of '%s', which is not a tensor of the checkpoint", where, tensor);
  mtensor *t = &m->t[k];
  if (ts_region_space_numel(r) != ts_shape_numel(&t->shape))
    return ts_error_set(TS_EINVAL, "%s: piece of '%s' is a region of another element count than the tensor's",
                        where, tensor);
  if (t->np == t->cap) {
    int nc = t->cap ? 2 * t->cap : 4;
    mpiece *p = realloc(t->p, sizeof *p * (size_t)nc);
    if (!p) return ts_error_set(TS_ENOMEM, "manifest: out of memory");
    t->p = p;
    t->cap = nc;
  }
  mpiece *p = &t->p[t->np];
  if (!(p->entry = strdup(entry))) return ts_error_set(TS_ENOMEM, "manifest: out of memory");
  p->file = file;
  p->r = *r;
  t->np++;
  return TS_OK;
}

/* The pieces of a record or of a manifest file entry: [{"name", "entry", "dtype", "shape", ...}]. */
static int add_pieces(ts_ckpt_manifest *m, int file, const cJSON *arr, const char *where) {
  if (!cJSON_IsArray(arr)) return ts_error_set(TS_EFORMAT, "%s: \"pieces\" is not a list", where);
  int rc = TS_OK, i = 0;
  for (const cJSON *p = arr->child; p && !rc; p = p->next, i++) {
    char w[512];
    snprintf(w, sizeof w, "%s: piece %d", where, i);
    const cJSON *jn = cJSON_GetObjectItemCaseSensitive(p, "name"), *je = cJSON_GetObjectItemCaseSensitive(p, "entry"),
                *jd = cJSON_GetObjectItemCaseSensitive(p, "dtype"), *js = cJSON_GetObjectItemCaseSensitive(p, "shape");
    ts_shape shape;
    ts_dtype dt;
    if (!cJSON_IsString(jn) || !cJSON_IsString(je) || !cJSON_IsString(jd) || !ts__ckpt_json_shape(js, &shape))
      return ts_error_set(TS_EFORMAT, "%s: needs \"name\", \"entry\", \"dtype\" and \"shape\"", w);
    if (ts_st_dtype_parse(jd->valuestring, &dt)) return with_where(TS_EFORMAT, w);
    int k = find_tensor(m, jn->valuestring);
    if (k >= 0 && (m->t[k].dt != dt || !ts_shape_equal(&m->t[k].shape, &shape)))
      return ts_error_set(TS_EFORMAT, "%s: '%s' is not of the tensor's dtype and shape", w, jn->valuestring);
    ts_region r;
    if ((rc = ts__ckpt_region_from_json(p, &shape, &r, w))) return rc;
    rc = add_piece(m, file, jn->valuestring, je->valuestring, &r, w);
  }
  return rc;
}

int ts_ckpt_manifest_add_record(ts_ckpt_manifest *m, const char *record) {
  cJSON *j = record ? cJSON_Parse(record) : NULL;
  int rc = TS_OK;
  int64_t rank = -1, bytes = 0;
  const cJSON *jr = cJSON_GetObjectItemCaseSensitive(j, "rank"), *je = cJSON_GetObjectItemCaseSensitive(j, "error"),
              *jf = cJSON_GetObjectItemCaseSensitive(j, "file"), *jb = cJSON_GetObjectItemCaseSensitive(j, "bytes"),
              *jh = cJSON_GetObjectItemCaseSensitive(j, "sha256"), *jp = cJSON_GetObjectItemCaseSensitive(j, "pieces");
  if (!cJSON_IsObject(j) || !ts__ckpt_json_int(jr, 0, &rank))
    rc = ts_error_set(TS_EINVAL, "manifest: a rank's record is not valid JSON with its rank");
  else if (cJSON_IsString(je))
    rc = ts_error_set(TS_EIO, "rank %" PRId64 ": %s", rank, je->valuestring);
  else if (jf) {
    char w[300];
    snprintf(w, sizeof w, "rank %" PRId64 "'s record", rank);
    if (!cJSON_IsString(jf) || !ts__ckpt_json_int(jb, 0, &bytes) || !cJSON_IsString(jh))
      rc = ts_error_set(TS_EINVAL, "%s: needs \"file\", \"bytes\" and \"sha256\"", w);
    else if (!(rc = add_file(m, jf->valuestring, (int)rank, (uint64_t)bytes, jh->valuestring)))
      rc = add_pieces(m, m->nf - 1, jp, w);
  }
  cJSON_Delete(j);
  return rc;
}

int ts_ckpt_manifest_add_file(ts_ckpt_manifest *m, const char *dir, const char *name) {
  char path[4096], sha[65];
  uint64_t bytes = 0;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int rc = ts_sha256_file(path, sha, &bytes);
  return rc ? rc : add_file(m, name, -1, bytes, sha);
}

/* ---- checking ---- */

typedef struct {
  int64_t pos, len;
  int piece;
} run;

static int cmp_run(const void *a, const void *b) {
  const run *x = a, *y = b;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}

int ts_ckpt_manifest_check(const ts_ckpt_manifest *m) {
  run *v = NULL;
  size_t cap = 0;
  int rc = TS_OK;
  for (int k = 0; k < m->nt && !rc; k++) {
    const mtensor *t = &m->t[k];
    int64_t numel = ts_shape_numel(&t->shape), sum = 0;
    size_t n = 0;
    for (int j = 0; j < t->np && !rc; j++) {
      if (__builtin_add_overflow(sum, ts_region_numel(&t->p[j].r), &sum)) sum = INT64_MAX; /* held twice anyway */
      ts_region_runs it;
      ts_region_runs_init(&it, &t->p[j].r);
      int64_t pos, local, len;
      while (ts_region_runs_next(&it, &pos, &local, &len)) {
        if (n == cap) {
          size_t nc = cap ? 2 * cap : 256;
          run *q = realloc(v, sizeof *q * nc);
          if (!q) {
            rc = ts_error_set(TS_ENOMEM, "manifest: out of memory");
            break;
          }
          v = q;
          cap = nc;
        }
        v[n++] = (run){pos, len, j};
      }
    }
    if (rc) break;
    if (n) qsort(v, n, sizeof *v, cmp_run); /* v is NULL until a run is seen */
    int64_t at = 0;
    for (size_t i = 0; i < n && !rc; i++) {
      if (v[i].pos > at)
        rc = ts_error_set(TS_EINVAL, "tensor '%s': no piece holds elements [%" PRId64 ", %" PRId64 ") (of %" PRId64 ")",
                          t->name, at, v[i].pos, numel);
      else if (v[i].pos < at)
        rc = ts_error_set(TS_EINVAL, "tensor '%s': elements from %" PRId64 " are held twice (the piece in %s and "
                          "another)", t->name, v[i].pos, m->f[t->p[v[i].piece].file].name);
      at = v[i].pos + v[i].len;
    }
    if (!rc && !t->np && numel) rc = ts_error_set(TS_EINVAL, "tensor '%s': no piece holds it", t->name);
    if (!rc && (at != numel || sum != numel))
      rc = ts_error_set(TS_EINVAL, "tensor '%s': no piece holds elements [%" PRId64 ", %" PRId64 ")", t->name, at,
                        numel);
  }
  free(v);
  return rc;
}

/* ---- writing ---- */

static int to_json(const ts_ckpt_manifest *m, char **out) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return ts_error_set(TS_ENOMEM, "manifest: out of memory");
  char num[64];
  cJSON_AddStringToObject(o, "format", TS_CKPT_MANIFEST_FORMAT);
  cJSON_AddStringToObject(o, "id", m->id);
  cJSON_AddStringToObject(o, "version", m->version);
  cJSON_AddStringToObject(o, "model", m->model);
  if (m->has_hash) {
    snprintf(num, sizeof num, "%016" PRIx64, m->hash);
    cJSON_AddStringToObject(o, "config_hash", num);
  }
  cJSON_AddItemToObject(o, "step", jint(m->pos.step));
  cJSON_AddItemToObject(o, "epoch", jint(m->pos.epoch));
  cJSON_AddItemToObject(o, "batch_index", jint(m->pos.batch_index));
  snprintf(num, sizeof num, "%" PRIu64, m->pos.seed);
  cJSON_AddStringToObject(o, "seed", num);
  snprintf(num, sizeof num, "%" PRIu64, m->pos.rng_counter);
  cJSON_AddStringToObject(o, "rng_counter", num);
  snprintf(num, sizeof num, "%.17g", m->pos.loss_scale);
  cJSON_AddItemToObject(o, "loss_scale", cJSON_CreateRaw(num));
  cJSON_AddItemToObject(o, "loss_scale_growth_tracker", jint(m->pos.loss_scale_growth_tracker));
  cJSON_AddItemToObject(o, "world_size", jint(m->world));
  cJSON *lay = m->layout ? cJSON_Parse(m->layout) : cJSON_CreateObject();
  cJSON_AddItemToObject(o, "layout", lay ? lay : cJSON_CreateObject());
  cJSON *fs = cJSON_AddArrayToObject(o, "files");
  for (int i = 0; i < m->nf; i++) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "name", m->f[i].name);
    if (m->f[i].rank >= 0) cJSON_AddItemToObject(f, "rank", jint(m->f[i].rank));
    cJSON_AddItemToObject(f, "bytes", jint((int64_t)m->f[i].bytes));
    cJSON_AddStringToObject(f, "sha256", m->f[i].sha);
    cJSON_AddItemToArray(fs, f);
  }
  cJSON *ts = cJSON_AddArrayToObject(o, "tensors");
  for (int k = 0; k < m->nt; k++) {
    const mtensor *t = &m->t[k];
    cJSON *jt = cJSON_CreateObject(), *ps;
    cJSON_AddStringToObject(jt, "name", t->name);
    cJSON_AddStringToObject(jt, "dtype", ts_st_dtype_name(t->dt));
    cJSON_AddItemToObject(jt, "shape", jdims(t->shape.ndim, t->shape.dims));
    ps = cJSON_AddArrayToObject(jt, "pieces");
    for (int j = 0; j < t->np; j++) {
      cJSON *p = cJSON_CreateObject();
      cJSON_AddStringToObject(p, "file", m->f[t->p[j].file].name);
      cJSON_AddStringToObject(p, "entry", t->p[j].entry);
      ts__ckpt_region_to_json(p, &t->shape, &t->p[j].r);
      cJSON_DeleteItemFromObjectCaseSensitive(p, "shape"); /* the tensor's, above */
      cJSON_AddItemToArray(ps, p);
    }
    cJSON_AddItemToArray(ts, jt);
  }
  if (m->config) cJSON_AddStringToObject(o, "config", m->config);
  *out = cJSON_Print(o);
  cJSON_Delete(o);
  return *out ? TS_OK : ts_error_set(TS_ENOMEM, "manifest: out of memory");
}

int ts_ckpt_manifest_write(const ts_ckpt_manifest *m, const char *dir) {
  char path[4096], *txt = NULL;
  snprintf(path, sizeof path, "%s/%s", dir, TS_CKPT_MANIFEST);
  int rc = to_json(m, &txt);
  ts__afile *af = NULL;
  if (!rc) rc = ts__afile_open(path, &af);
  if (!rc && !(rc = ts__afile_write(af, txt, strlen(txt))) && !(rc = ts__afile_write(af, "\n", 1)))
    rc = ts__afile_commit(af);
  else if (af)
    ts__afile_abort(af);
  cJSON_free(txt);
  return rc;
}

/* ---- reading ---- */

static int get_str(const cJSON *o, const char *key, const char *path, int required, const char **out) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
  *out = NULL;
  if (!j && !required) return TS_OK;
  if (!cJSON_IsString(j)) return ts_error_set(TS_EFORMAT, "%s: \"%s\" is missing or not a string", path, key);
  *out = j->valuestring;
  return TS_OK;
}

static int get_int(const cJSON *o, const char *key, const char *path, int64_t lo, int64_t *out) {
  if (!ts__ckpt_json_int(cJSON_GetObjectItemCaseSensitive(o, key), lo, out))
    return ts_error_set(TS_EFORMAT, "%s: \"%s\" is missing or not an integer >= %" PRId64, path, key, lo);
  return TS_OK;
}

static int get_u64(const cJSON *o, const char *key, const char *path, int base, uint64_t *out) {
  const char *s;
  int rc = get_str(o, key, path, 1, &s);
  if (rc) return rc;
  char *e;
  errno = 0;
  unsigned long long v = strtoull(s, &e, base);
  if (!*s || *e || errno || *s == '-')
    return ts_error_set(TS_EFORMAT, "%s: \"%s\" = \"%.40s\" is not an unsigned integer", path, key, s);
  *out = v;
  return TS_OK;
}

static int from_json(ts_ckpt_manifest *m, const cJSON *o, const char *path) {
  const char *s;
  int rc;
  int64_t v;
  if (!cJSON_IsObject(o)) return ts_error_set(TS_EFORMAT, "%s: not a JSON object", path);
  if ((rc = get_str(o, "format", path, 1, &s))) return rc;
  if (strcmp(s, TS_CKPT_MANIFEST_FORMAT))
    return ts_error_set(TS_EFORMAT, "%s: format '%s' is not supported (this build reads %s)", path, s,
                        TS_CKPT_MANIFEST_FORMAT);
  if ((rc = get_str(o, "id", path, 1, &s))) return rc;
  snprintf(m->id, sizeof m->id, "%s", s);
  if ((rc = get_str(o, "version", path, 1, &s))) return rc;
  snprintf(m->version, sizeof m->version, "%s", s);
  if ((rc = get_str(o, "model", path, 1, &s))) return rc;
  snprintf(m->model, sizeof m->model, "%s", s);
  if (cJSON_GetObjectItemCaseSensitive(o, "config_hash")) {
    if ((rc = get_u64(o, "config_hash", path, 16, &m->hash))) return rc;
    m->has_hash = 1;
  }
  if ((rc = get_int(o, "step", path, 0, &m->pos.step)) || (rc = get_int(o, "epoch", path, 0, &m->pos.epoch)) ||
      (rc = get_int(o, "batch_index", path, 0, &m->pos.batch_index)) || (rc = get_u64(o, "seed", path, 10, &m->pos.seed)) ||
      (rc = get_u64(o, "rng_counter", path, 10, &m->pos.rng_counter)) ||
      (rc = get_int(o, "loss_scale_growth_tracker", path, -MAX_INT53, &m->pos.loss_scale_growth_tracker)) ||
      (rc = get_int(o, "world_size", path, 1, &v)))
    return rc;
  if (v > INT_MAX) return ts_error_set(TS_EFORMAT, "%s: \"world_size\" %" PRId64 " is too large", path, v);
  m->world = (int)v;
  if (m->pos.epoch > m->pos.step)
    return ts_error_set(TS_EFORMAT, "%s: impossible position: step %" PRId64 ", epoch %" PRId64, path, m->pos.step, m->pos.epoch);
  const cJSON *ls = cJSON_GetObjectItemCaseSensitive(o, "loss_scale");
  if (!cJSON_IsNumber(ls) || !isfinite(ls->valuedouble)) /* 1e999 parses as infinity, which JSON cannot hold */
    return ts_error_set(TS_EFORMAT, "%s: \"loss_scale\" is missing or not a finite number", path);
  m->pos.loss_scale = ls->valuedouble;
  const cJSON *lay = cJSON_GetObjectItemCaseSensitive(o, "layout");
  if (lay) {
    if (!cJSON_IsObject(lay)) return ts_error_set(TS_EFORMAT, "%s: \"layout\" is not an object", path);
    if (!(m->layout = cJSON_PrintUnformatted(lay))) return ts_error_set(TS_ENOMEM, "%s: out of memory", path);
  }
  if ((rc = get_str(o, "config", path, 0, &s))) return rc;
  if (s && !(m->config = strdup(s))) return ts_error_set(TS_ENOMEM, "%s: out of memory", path);
  const cJSON *fs = cJSON_GetObjectItemCaseSensitive(o, "files"), *ts = cJSON_GetObjectItemCaseSensitive(o, "tensors");
  if (!cJSON_IsArray(fs) || !cJSON_IsArray(ts)) return ts_error_set(TS_EFORMAT, "%s: \"files\" and \"tensors\" must be lists", path);
  int i = 0;
  for (const cJSON *f = fs->child; f; f = f->next, i++) {
    char w[4200];
    snprintf(w, sizeof w, "%s: files[%d]", path, i);
    const char *name, *sha;
    int64_t rank = -1, bytes;
    if ((rc = get_str(f, "name", w, 1, &name)) || (rc = get_str(f, "sha256", w, 1, &sha)) ||
        (rc = get_int(f, "bytes", w, 0, &bytes)))
      return rc;
    if (cJSON_GetObjectItemCaseSensitive(f, "rank") && (rc = get_int(f, "rank", w, 0, &rank))) return rc;
    if (rank > INT_MAX) return ts_error_set(TS_EFORMAT, "%s: \"rank\" %" PRId64 " is too large", w, rank);
    if ((rc = add_file(m, name, (int)rank, (uint64_t)bytes, sha))) return with_where(TS_EFORMAT, w);
  }
  i = 0;
  int64_t total = 0; /* elements of all tensors: at most 2^53, so that sums of them fit (info) */
  for (const cJSON *t = ts->child; t; t = t->next, i++) {
    char w[4200];
    snprintf(w, sizeof w, "%s: tensors[%d]", path, i);
    const char *name, *dts;
    ts_shape shape;
    ts_dtype dt;
    if ((rc = get_str(t, "name", w, 1, &name)) || (rc = get_str(t, "dtype", w, 1, &dts))) return rc;
    if (!ts__ckpt_json_shape(cJSON_GetObjectItemCaseSensitive(t, "shape"), &shape))
      return ts_error_set(TS_EFORMAT, "%s: \"shape\" is not a list of at most %d sizes of at most 2^53 elements", w,
                          TS_MAX_DIMS);
    if (ts_st_dtype_parse(dts, &dt)) return with_where(TS_EFORMAT, w);
    if (ts_shape_numel(&shape) > MAX_INT53 - total)
      return ts_error_set(TS_EFORMAT, "%s: the tensors up to this one hold more than 2^53 elements", w);
    total += ts_shape_numel(&shape);
    if ((rc = ts_ckpt_manifest_add_tensor(m, name, dt, &shape))) return with_where(TS_EFORMAT, w);
    snprintf(w, sizeof w, "%s: tensor '%s'", path, name);
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(t, "pieces");
    if (!cJSON_IsArray(ps)) return ts_error_set(TS_EFORMAT, "%s: \"pieces\" is not a list", w);
    int j = 0;
    for (const cJSON *p = ps->child; p; p = p->next, j++) {
      char wp[4300];
      snprintf(wp, sizeof wp, "%s: piece %d", w, j);
      const char *file, *entry;
      if ((rc = get_str(p, "file", wp, 1, &file)) || (rc = get_str(p, "entry", wp, 1, &entry))) return rc;
      int fi = -1;
      for (int q = 0; q < m->nf && fi < 0; q++)
        if (!strcmp(m->f[q].name, file)) fi = q;
      if (fi < 0 || m->f[fi].rank < 0)
        return ts_error_set(TS_EFORMAT, "%s: file '%s' is not a rank file of \"files\"", wp, file);
      ts_region r;
      if ((rc = ts__ckpt_region_from_json(p, &shape, &r, wp)) || (rc = add_piece(m, fi, name, entry, &r, wp)))
        return rc;
    }
  }
  return TS_OK;
}

int ts_ckpt_manifest_load(const char *dir, ts_ckpt_manifest **out) {
  *out = NULL;
  if (!dir) return ts_error_set(TS_EINVAL, "ts_ckpt_manifest_load: NULL directory");
  char rdir[4000]; /* DIR/latest: the checkpoint it names */
  int rr = ts_ckpt_resolve(dir, rdir, sizeof rdir);
  if (rr < 0) return rr;
  dir = rdir;
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, TS_CKPT_MANIFEST);
  char *txt = NULL;
  size_t len = 0;
  int rc = ts__file_read_all(path, "cannot read the manifest", &txt, &len);
  if (rc == TS_ENOTFOUND)
    return ts_error_set(TS_ENOTFOUND, "%s: no %s: not a complete checkpoint (a save that did not finish, or not a "
                        "checkpoint directory)", dir, TS_CKPT_MANIFEST);
  if (rc) return rc;
  const char *end = NULL;
  cJSON *j = cJSON_ParseWithLengthOpts(txt, len, &end, 0);
  if (!j) {
    rc = ts_error_set(TS_EFORMAT, "%s: not valid JSON (error near byte %zu of %zu; a damaged manifest)", path,
                      end ? (size_t)(end - txt) : 0, len);
    free(txt);
    return rc;
  }
  ts_ckpt_manifest *m = calloc(1, sizeof *m);
  if (!m || !(m->dir = strdup(dir))) rc = ts_error_set(TS_ENOMEM, "%s: out of memory", path);
  if (!rc) rc = from_json(m, j, path);
  cJSON_Delete(j);
  free(txt);
  if (rc) {
    ts_ckpt_manifest_free(m);
    return rc;
  }
  *out = m;
  return TS_OK;
}

/* ---- accessors ---- */

const char *ts_ckpt_manifest_dir(const ts_ckpt_manifest *m) { return m->dir ? m->dir : ""; }
const char *ts_ckpt_manifest_id(const ts_ckpt_manifest *m) { return m->id; }
const char *ts_ckpt_manifest_layout(const ts_ckpt_manifest *m) { return m->layout ? m->layout : "{}"; }
int ts_ckpt_manifest_world_size(const ts_ckpt_manifest *m) { return m->world; }
int ts_ckpt_manifest_num_files(const ts_ckpt_manifest *m) { return m->nf; }
int ts_ckpt_manifest_num_tensors(const ts_ckpt_manifest *m) { return m->nt; }

int ts_ckpt_manifest_file(const ts_ckpt_manifest *m, int i, const char **name, int *rank, uint64_t *bytes,
                          const char **sha256) {
  if (i < 0 || i >= m->nf) return ts_error_set(TS_ERANGE, "manifest: file %d of %d", i, m->nf);
  if (name) *name = m->f[i].name;
  if (rank) *rank = m->f[i].rank;
  if (bytes) *bytes = m->f[i].bytes;
  if (sha256) *sha256 = m->f[i].sha;
  return TS_OK;
}

int ts_ckpt_manifest_tensor(const ts_ckpt_manifest *m, int i, const char **name, ts_dtype *dt, ts_shape *shape,
                            int *npieces) {
  if (i < 0 || i >= m->nt) return ts_error_set(TS_ERANGE, "manifest: tensor %d of %d", i, m->nt);
  if (name) *name = m->t[i].name;
  if (dt) *dt = m->t[i].dt;
  if (shape) *shape = m->t[i].shape;
  if (npieces) *npieces = m->t[i].np;
  return TS_OK;
}

int ts_ckpt_manifest_piece(const ts_ckpt_manifest *m, int i, int j, const char **file, const char **entry,
                           ts_region *region) {
  if (i < 0 || i >= m->nt || j < 0 || j >= m->t[i].np)
    return ts_error_set(TS_ERANGE, "manifest: piece %d of tensor %d", j, i);
  if (file) *file = m->f[m->t[i].p[j].file].name;
  if (entry) *entry = m->t[i].p[j].entry;
  if (region) *region = m->t[i].p[j].r;
  return TS_OK;
}

int ts__ckpt_manifest_find(const ts_ckpt_manifest *m, const char *name) { return find_tensor(m, name); }
int ts__ckpt_manifest_piece_file(const ts_ckpt_manifest *m, int i, int j) { return m->t[i].p[j].file; }

int ts_ckpt_manifest_info(const ts_ckpt_manifest *m, ts_ckpt_info *info) {
  memset(info, 0, sizeof *info);
  info->is_tessera = 1;
  snprintf(info->format, sizeof info->format, "%s", TS_CKPT_MANIFEST_FORMAT);
  snprintf(info->version, sizeof info->version, "%s", m->version);
  snprintf(info->model, sizeof info->model, "%s", m->model);
  info->has_config_hash = m->has_hash;
  info->config_hash = m->hash;
  info->pos = m->pos;
  if (m->config && !(info->config_yaml = strdup(m->config))) return ts_error_set(TS_ENOMEM, "manifest: out of memory");
  info->ntensors = m->nt;
  for (int k = 0; k < m->nt; k++) {
    int64_t n = ts_shape_numel(&m->t[k].shape);
    info->data_bytes += (uint64_t)n * ts_dtype_size(m->t[k].dt);
    if (!strncmp(m->t[k].name, "param.", 6)) info->param_numel += n;
    else if (!strncmp(m->t[k].name, "state.", 6)) info->state_numel += n;
    else if (!strncmp(m->t[k].name, "optim.", 6)) info->optim_numel += n;
  }
  return TS_OK;
}

/* ---- matching a model ---- */

typedef struct {
  ts__sb b;
  int n, shown;
} diffs;

static void diff_add(diffs *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void diff_add(diffs *d, const char *fmt, ...) {
  d->n++;
  if (d->shown >= 4) return;
  char tmp[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  ts__sb_printf(&d->b, "%s%s", d->shown++ ? ", " : "", tmp);
}

static void diff_summary(ts__sb *out, const diffs *d, const char *what) {
  if (!d->n) return;
  ts__sb_printf(out, "%s%d %s (%s%s)", out->n ? "; " : "", d->n, what, d->b.s ? d->b.s : "",
                d->n > d->shown ? ", ..." : "");
}

int ts_ckpt_manifest_match(const ts_ckpt_manifest *m, const ts_ckpt_state *expect, const ts_piece *tensors, int n,
                           int with_optimizer, int strict) {
  const char *dir = ts_ckpt_manifest_dir(m);
  if (expect && expect->model && *expect->model && m->model[0] && strcmp(expect->model, m->model)) {
    if (strict) return ts_error_set(TS_ECONFIG, "%s: a checkpoint of model '%s', not of '%s'", dir, m->model, expect->model);
    ts_log(TS_LOG_WARN, "%s: a checkpoint of model '%s', loading it into '%s'", dir, m->model, expect->model);
  }
  if (expect && expect->config_hash && m->has_hash && m->hash && expect->config_hash != m->hash) {
    if (strict)
      return ts__ckpt_config_refusal(dir, m->hash, expect->config_hash, m->config, expect->config_yaml);
    ts_log(TS_LOG_WARN, "%s: written by another configuration (config hash %016" PRIx64 ", this run %016" PRIx64 ")", dir,
           m->hash, expect->config_hash);
  }
  diffs miss = {0}, unexp = {0}, mism = {0};
  char *seen = calloc((size_t)m->nt + 1, 1);
  if (!seen) return ts_error_set(TS_ENOMEM, "%s: out of memory", dir);
  for (int i = 0; i < n; i++) {
    if (!with_optimizer && !strncmp(tensors[i].name, "optim.", 6)) continue;
    int k = find_tensor(m, tensors[i].name);
    if (k < 0) {
      diff_add(&miss, "%s", tensors[i].name);
      continue;
    }
    seen[k] = 1;
    char a[96], b[96];
    if (m->t[k].dt != tensors[i].dtype || !ts_shape_equal(&m->t[k].shape, &tensors[i].shape))
      diff_add(&mism, "%s: %s %s in the checkpoint vs %s %s in the model", tensors[i].name, ts_dtype_name(m->t[k].dt),
               ts_shape_str(&m->t[k].shape, a, sizeof a), ts_dtype_name(tensors[i].dtype),
               ts_shape_str(&tensors[i].shape, b, sizeof b));
  }
  for (int k = 0; k < m->nt; k++)
    if (!seen[k] && (with_optimizer || strncmp(m->t[k].name, "optim.", 6))) diff_add(&unexp, "%s", m->t[k].name);
  free(seen);
  int rc = TS_OK;
  if (miss.n || unexp.n || mism.n) {
    ts__sb msg = {0};
    diff_summary(&msg, &miss, "missing");
    diff_summary(&msg, &unexp, "unexpected");
    diff_summary(&msg, &mism, mism.n == 1 ? "mismatch" : "mismatches");
    if (strict) rc = ts_error_set(TS_ECONFIG, "%s: does not match the model: %s", dir, msg.s ? msg.s : "");
    else ts_log(TS_LOG_WARN, "%s: does not match the model (loading what matches): %s", dir, msg.s ? msg.s : "");
    free(msg.s);
  }
  free(miss.b.s);
  free(unexp.b.s);
  free(mism.b.s);
  return rc;
}
