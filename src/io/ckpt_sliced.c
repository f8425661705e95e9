/* Sliced checkpoints: rank files, staging directories, reading the pieces a rank needs, merge
 * and verify (include/tessera/checkpoint.h, docs/checkpoints.md). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_impl.h"
#include "../base/afile.h"
#include "../base/iofault.h"
#include "../base/text.h"

#define META_PIECES "tessera.pieces"
#define META_ID "tessera.checkpoint_id"

/* ---- directories ---- */

int ts_ckpt_dir_path(char *buf, size_t cap, const char *dir, const char *prefix, int64_t step) {
  if (!buf || !cap || !prefix) return ts_error_set(TS_EINVAL, "ts_ckpt_dir_path: NULL argument");
  int n = dir && *dir ? snprintf(buf, cap, "%s/%s-%08" PRId64, dir, prefix, step)
                      : snprintf(buf, cap, "%s-%08" PRId64, prefix, step);
  if (n < 0 || (size_t)n >= cap)
    return ts_error_set(TS_ERANGE, "ts_ckpt_dir_path: the path does not fit in %zu bytes", cap);
  return TS_OK;
}

int ts_ckpt_is_sliced(const char *path) {
  struct stat sb;
  char r[4096]; /* DIR/latest: the checkpoint it names */
  if (path && ts_ckpt_resolve(path, r, sizeof r) == 1) path = r;
  return path && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* "<base><rest>" where rest is empty or ".tmp.<pid>.<counter>" (the atomic writer's temporary). */
static int own_with_temp(const char *name, const char *base) {
  size_t bl = strlen(base);
  if (strncmp(name, base, bl)) return 0;
  const char *s = name + bl;
  if (!*s) return 1;
  if (strncmp(s, ".tmp.", 5)) return 0;
  s += 5;
  size_t a = strspn(s, "0123456789");
  if (!a || s[a] != '.') return 0;
  s += a + 1;
  size_t b = strspn(s, "0123456789");
  return b && !s[b];
}

int ts__ckpt_dir_own(const char *name) {
  if (own_with_temp(name, TS_CKPT_MANIFEST) || own_with_temp(name, "strategy.json")) return 1;
  if (strncmp(name, "rank", 4)) return 0;
  size_t d = strspn(name + 4, "0123456789");
  if (d < 5) return 0;
  char base[64];
  if (4 + d + strlen(".safetensors") >= sizeof base) return 0;
  snprintf(base, sizeof base, "%.*s.safetensors", (int)(4 + d), name);
  return own_with_temp(name, base);
}

int ts__ckpt_remove_dir(const char *dir) {
  char p[4200];
  snprintf(p, sizeof p, "%s/%s", dir, TS_CKPT_MANIFEST);
  if ((ts__io_fault("unlink", p) || unlink(p) != 0) && errno != ENOENT) /* first: the directory stops being a checkpoint */
    return ts_error_set(TS_EIO, "%s: cannot delete: %s", p, strerror(errno));
  DIR *dh = opendir(dir);
  if (!dh) return errno == ENOENT ? TS_OK : ts_error_set(TS_EIO, "%s: cannot list: %s", dir, strerror(errno));
  int rc = TS_OK;
  char foreign[256] = "";
  struct dirent *e;
  while ((e = readdir(dh))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (!ts__ckpt_dir_own(e->d_name)) {
      snprintf(foreign, sizeof foreign, "%s", e->d_name);
      continue;
    }
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (unlink(p) != 0 && errno != ENOENT && !rc) rc = ts_error_set(TS_EIO, "%s: cannot delete: %s", p, strerror(errno));
  }
  closedir(dh);
  if (rc) return rc;
  if (foreign[0])
    return ts_error_set(TS_EIO, "%s: not removed: it holds '%s', which is not a checkpoint file", dir, foreign);
  if (rmdir(dir) != 0 && errno != ENOENT) return ts_error_set(TS_EIO, "%s: cannot remove: %s", dir, strerror(errno));
  return TS_OK;
}

static void fsync_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    if (!ts__io_fault("fsync_dir", path)) (void)fsync(fd);
    close(fd);
  }
}

/* The parent directory of path ("." when none). */
static void parent_of(const char *path, char *buf, size_t cap) {
  const char *sl = strrchr(path, '/');
  if (!sl) snprintf(buf, cap, ".");
  else if (sl == path) snprintf(buf, cap, "/");
  else snprintf(buf, cap, "%.*s", (int)(sl - path), path);
}

int ts_ckpt_stage_begin(const char *final, char *staging, size_t cap) {
  if (!final || !*final || !staging) return ts_error_set(TS_EINVAL, "ts_ckpt_stage_begin: NULL argument");
  int n = snprintf(staging, cap, "%s.tmp.%ld", final, (long)getpid());
  if (n < 0 || (size_t)n >= cap) return ts_error_set(TS_ERANGE, "%s: the path is too long", final);
  int rc = ts__mkdir_parents(staging);
  if (rc) return rc;
  struct stat sb;
  if (lstat(staging, &sb) == 0 && (rc = ts__ckpt_remove_dir(staging))) return rc;
  if (ts__io_fault("mkdir", staging) || mkdir(staging, 0777) != 0)
    return ts_error_set(TS_EIO, "%s: cannot create the checkpoint's staging directory: %s", staging, strerror(errno));
  return TS_OK;
}

int ts_ckpt_stage_commit(const char *staging, const char *final) {
  char parent[4096];
  parent_of(final, parent, sizeof parent);
  fsync_dir(staging);
  struct stat sb;
  if (lstat(final, &sb) != 0) {
    if (ts__io_fault("rename", final) || rename(staging, final) != 0)
      return ts_error_set(TS_EIO, "%s: cannot rename %s into place: %s", final, staging, strerror(errno));
    fsync_dir(parent);
    return TS_OK;
  }
  if (!S_ISDIR(sb.st_mode)) return ts_error_set(TS_EIO, "%s: exists and is not a directory", final);
  /* only a checkpoint folder is replaced: one holding anything else is left where it is, untouched */
  DIR *dh = opendir(final);
  if (!dh) return ts_error_set(TS_EIO, "%s: cannot list: %s", final, strerror(errno));
  char foreign[256] = "";
  for (struct dirent *e; !foreign[0] && (e = readdir(dh));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && !ts__ckpt_dir_own(e->d_name))
      snprintf(foreign, sizeof foreign, "%s", e->d_name);
  closedir(dh);
  if (foreign[0])
    return ts_error_set(TS_EIO, "%s: exists and holds '%s', which is not a checkpoint file: not replaced",
                        final, foreign);
  /* the step was saved before (a resumed run saving it again): swap atomically, drop the old */
  if (!ts__io_fault("exchange", final) && renameat2(AT_FDCWD, staging, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
    fsync_dir(parent);
    return ts__ckpt_remove_dir(staging); /* the old checkpoint, now under the staging name */
  }
  if (errno != EINVAL && errno != ENOSYS)
    return ts_error_set(TS_EIO, "%s: cannot exchange it with %s: %s", final, staging, strerror(errno));
  /* no exchange on this file system: the old one aside, the new one in, the old one removed */
  char old[4200];
  snprintf(old, sizeof old, "%s.old.%ld", final, (long)getpid());
  if (rename(final, old) != 0) return ts_error_set(TS_EIO, "%s: cannot move it aside: %s", final, strerror(errno));
  if (rename(staging, final) != 0) {
    int e = errno;
    (void)rename(old, final);
    return ts_error_set(TS_EIO, "%s: cannot rename %s into place: %s", final, staging, strerror(e));
  }
  fsync_dir(parent);
  return ts__ckpt_remove_dir(old);
}

void ts_ckpt_stage_abort(const char *staging) {
  if (staging && *staging) (void)ts__ckpt_remove_dir(staging);
}

/* ---- one rank's file ---- */

int ts_ckpt_error_record(int rank, const char *message, char **record) {
  cJSON *o = cJSON_CreateObject();
  if (o) {
    cJSON_AddNumberToObject(o, "rank", rank);
    cJSON_AddStringToObject(o, "error", message ? message : "failed");
  }
  *record = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  return *record ? TS_OK : ts_error_set(TS_ENOMEM, "checkpoint: out of memory");
}

int ts_ckpt_slice_write(const char *dir, int rank, const char *id, int64_t step, const ts_piece *pieces, int n,
                        char **record) {
  *record = NULL;
  char file[64], path[4200], num[32];
  snprintf(file, sizeof file, "rank%05d.safetensors", rank);
  snprintf(path, sizeof path, "%s/%s", dir, file);
  cJSON *rec = cJSON_CreateObject(), *meta = cJSON_CreateObject(), *jp = cJSON_CreateArray();
  char **entries = calloc((size_t)n + 1, sizeof *entries);
  ts_st_writer *w = NULL;
  char *mtxt = NULL;
  int rc = !rec || !meta || !jp || !entries ? ts_error_set(TS_ENOMEM, "%s: out of memory", path) : TS_OK;
  if (!rc) {
    cJSON_AddNumberToObject(rec, "rank", rank);
    cJSON_AddItemToObject(rec, "pieces", jp);
  }
  if (!rc && n > 0) rc = ts_st_writer_create(&w);
  for (int i = 0; i < n && !rc; i++) {
    const ts_piece *p = &pieces[i];
    /* the entry: the tensor's name, numbered when the rank holds several pieces of it */
    int k = 1;
    for (int j = 0; j < i; j++) k += !strcmp(pieces[j].name, p->name);
    if (k == 1) entries[i] = strdup(p->name);
    else entries[i] = ts__str_printf("%s#%d", p->name, k);
    if (!entries[i]) {
      rc = ts_error_set(TS_ENOMEM, "%s: out of memory", path);
      break;
    }
    if (!p->data && ts_piece_nbytes(p)) {
      rc = ts_error_set(TS_EINVAL, "%s: piece '%s' has no data", path, p->name);
      break;
    }
    if ((rc = ts_st_writer_add(w, entries[i], p->dtype, ts_region_local_shape(&p->region), p->data))) {
      ts_error_wrap(rc, "%s", path);
      break;
    }
    cJSON *o = cJSON_CreateObject(), *r = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", p->name);
    cJSON_AddStringToObject(o, "entry", entries[i]);
    cJSON_AddStringToObject(o, "dtype", ts_st_dtype_name(p->dtype));
    ts__ckpt_region_to_json(o, &p->shape, &p->region);
    cJSON_AddStringToObject(r, "name", p->name);
    cJSON_AddStringToObject(r, "dtype", ts_st_dtype_name(p->dtype));
    ts__ckpt_region_to_json(r, &p->shape, &p->region);
    cJSON_AddItemToArray(jp, o);
    cJSON_AddItemToObject(meta, entries[i], r);
  }
  if (!rc && n > 0) {
    if (!(mtxt = cJSON_PrintUnformatted(meta))) rc = ts_error_set(TS_ENOMEM, "%s: out of memory", path);
    snprintf(num, sizeof num, "%" PRId64, step);
    if (!rc) rc = ts_st_writer_set_meta(w, "tessera.format", TS_CKPT_SLICE_FORMAT);
    if (!rc) rc = ts_st_writer_set_meta(w, META_ID, id);
    if (!rc) rc = ts_st_writer_set_meta(w, "tessera.step", num);
    snprintf(num, sizeof num, "%d", rank);
    if (!rc) rc = ts_st_writer_set_meta(w, "tessera.rank", num);
    if (!rc) rc = ts_st_writer_set_meta(w, META_PIECES, mtxt);
    if (!rc) rc = ts_st_writer_set_chunk(w, TS_CKPT_CHUNK_BYTES);
    uint64_t bytes = 0;
    char sha[65];
    if (!rc) rc = ts_st_write_hashed(w, path, &bytes, sha);
    if (!rc) {
      cJSON_AddStringToObject(rec, "file", file);
      snprintf(num, sizeof num, "%" PRIu64, bytes);
      cJSON_AddItemToObject(rec, "bytes", cJSON_CreateRaw(num));
      cJSON_AddStringToObject(rec, "sha256", sha);
    }
  }
  if (!rc && !(*record = cJSON_PrintUnformatted(rec))) rc = ts_error_set(TS_ENOMEM, "%s: out of memory", path);
  ts_st_writer_free(w);
  for (int i = 0; entries && i < n; i++) free(entries[i]);
  free(entries);
  cJSON_free(mtxt);
  cJSON_Delete(rec);
  cJSON_Delete(meta);
  return rc;
}

/* ---- reading the pieces a rank needs ---- */

typedef struct {
  int tensor, piece;  /* the manifest's */
  uint64_t off, n;    /* bytes of the piece's entry */
  void *dst;
} want_range;

typedef struct {
  want_range *v;
  int n, cap;
} range_list;

typedef struct {
  range_list *per_file;
  int tensor, piece;
  size_t es;
  unsigned char *dst;
} collect_ctx;

/* Records that elements [b_local, b_local + n) of manifest piece (tensor, piece) go to the wanted
 * piece's data at a_local (the callback of the intersection with the wanted region). */
static int collect_range(int64_t a_local, int64_t b_local, int64_t n, void *user) {
  collect_ctx *c = user;
  range_list *l = c->per_file;
  if (l->n == l->cap) {
    int nc = l->cap ? 2 * l->cap : 64;
    want_range *v = realloc(l->v, sizeof *v * (size_t)nc);
    if (!v) return ts_error_set(TS_ENOMEM, "checkpoint: out of memory");
    l->v = v;
    l->cap = nc;
  }
  l->v[l->n++] = (want_range){c->tensor, c->piece, (uint64_t)b_local * c->es, (uint64_t)n * c->es,
                              c->dst + (size_t)a_local * c->es};
  return TS_OK;
}

/* Opens rank file fi of the manifest for ranged reads and checks it is the manifest's: its size,
 * the checkpoint id, and the pieces of its header against the manifest's for the entries read. */
static int open_rank_file(const ts_ckpt_manifest *m, int fi, ts_st_file **out) {
  const char *name, *dir = ts_ckpt_manifest_dir(m);
  uint64_t bytes;
  ts_ckpt_manifest_file(m, fi, &name, NULL, &bytes, NULL);
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  struct stat sb;
  if (stat(path, &sb) != 0)
    return ts_error_set(TS_EIO, "%s: cannot open: %s (a piece of the checkpoint is missing)", path, strerror(errno));
  if ((uint64_t)sb.st_size != bytes)
    return ts_error_set(TS_EFORMAT, "%s: %llu bytes, but the manifest says %llu (truncated or replaced)", path,
                        (unsigned long long)sb.st_size, (unsigned long long)bytes);
  int rc = ts_st_open_header(path, out);
  if (rc) return rc;
  const char *fmt = ts_st_meta(*out, "tessera.format"), *id = ts_st_meta(*out, META_ID);
  if (!fmt || strcmp(fmt, TS_CKPT_SLICE_FORMAT) || !id || strcmp(id, ts_ckpt_manifest_id(m))) {
    ts_st_close(*out);
    *out = NULL;
    return ts_error_set(TS_EFORMAT, "%s: not a rank file of checkpoint %s (format '%s', id '%s')", path,
                        ts_ckpt_manifest_id(m), fmt ? fmt : "", id ? id : "");
  }
  return TS_OK;
}

/* The entry of manifest piece (k, j) in an open rank file: its index, checked against the header's
 * record of it. */
static int resolve_entry(const ts_ckpt_manifest *m, ts_st_file *f, const cJSON *meta, int k, int j, int *idx) {
  const char *tname, *entry;
  ts_dtype dt;
  ts_shape shape;
  ts_region r, hr;
  ts_ckpt_manifest_tensor(m, k, &tname, &dt, &shape, NULL);
  ts_ckpt_manifest_piece(m, k, j, NULL, &entry, &r);
  *idx = ts_st_index(f, entry);
  ts_tensor v;
  if (*idx < 0 || ts_st_get(f, *idx, &v) || v.dtype != dt || ts_tensor_numel(&v) != ts_region_numel(&r))
    return ts_error_set(TS_EFORMAT, "%s: no entry '%s' of %s with %lld elements, as the manifest says", ts_st_path(f),
                        entry, ts_dtype_name(dt), (long long)ts_region_numel(&r));
  const cJSON *h = cJSON_GetObjectItemCaseSensitive(meta, entry), *hn = cJSON_GetObjectItemCaseSensitive(h, "name");
  ts_shape hs;
  char where[600];
  snprintf(where, sizeof where, "%s: header of '%s'", ts_st_path(f), entry);
  if (!cJSON_IsString(hn) || strcmp(hn->valuestring, tname) ||
      !ts__ckpt_json_shape(cJSON_GetObjectItemCaseSensitive(h, "shape"), &hs) || !ts_shape_equal(&hs, &shape) ||
      ts__ckpt_region_from_json(h, &shape, &hr, where) || !ts_region_equal(&hr, &r))
    return ts_error_set(TS_EFORMAT, "%s: entry '%s' is not the piece of '%s' the manifest lists", ts_st_path(f), entry,
                        tname);
  return TS_OK;
}

/* Reads every range of one rank file. */
static int read_file(const ts_ckpt_manifest *m, int fi, range_list *l) {
  ts_st_file *f = NULL;
  int rc = open_rank_file(m, fi, &f);
  if (rc) return rc;
  const char *mt = ts_st_meta(f, META_PIECES);
  cJSON *meta = mt ? cJSON_Parse(mt) : NULL;
  ts_st_range *rr = malloc(sizeof *rr * ((size_t)l->n + 1));
  if (!cJSON_IsObject(meta)) rc = ts_error_set(TS_EFORMAT, "%s: metadata %s is missing or not a JSON object",
                                               ts_st_path(f), META_PIECES);
  else if (!rr) rc = ts_error_set(TS_ENOMEM, "checkpoint: out of memory");
  int lastk = -1, lastj = -1, idx = -1;
  for (int i = 0; i < l->n && !rc; i++) {
    if (l->v[i].tensor != lastk || l->v[i].piece != lastj) {
      rc = resolve_entry(m, f, meta, l->v[i].tensor, l->v[i].piece, &idx);
      lastk = l->v[i].tensor;
      lastj = l->v[i].piece;
    }
    rr[i] = (ts_st_range){idx, l->v[i].off, l->v[i].n, l->v[i].dst};
  }
  if (!rc) rc = ts_st_read_ranges(f, rr, l->n);
  free(rr);
  cJSON_Delete(meta);
  ts_st_close(f);
  return rc;
}

int ts_ckpt_sliced_read(const ts_ckpt_manifest *m, ts_piece *want, int n, int strict) {
  int nf = ts_ckpt_manifest_num_files(m), rc = TS_OK;
  const char *dir = ts_ckpt_manifest_dir(m);
  range_list *per = calloc((size_t)nf + 1, sizeof *per);
  if (!per) return ts_error_set(TS_ENOMEM, "checkpoint: out of memory");
  for (int i = 0; i < n && !rc; i++) {
    ts_piece *w = &want[i];
    int k = ts__ckpt_manifest_find(m, w->name), np = 0;
    ts_dtype dt;
    ts_shape shape;
    if (k >= 0) ts_ckpt_manifest_tensor(m, k, NULL, &dt, &shape, &np);
    if (k < 0 || dt != w->dtype || !ts_shape_equal(&shape, &w->shape)) {
      if (strict)
        rc = ts_error_set(TS_ECONFIG, "%s: %s '%s'", dir, k < 0 ? "holds no tensor" : "another dtype or shape for",
                          w->name);
      continue;
    }
    if (!w->data && ts_piece_nbytes(w)) {
      rc = ts_error_set(TS_EINVAL, "checkpoint: the piece of '%s' to load has no memory", w->name);
      break;
    }
    int64_t got = 0;
    for (int j = 0; j < np && !rc; j++) {
      ts_region r;
      ts_ckpt_manifest_piece(m, k, j, NULL, NULL, &r);
      collect_ctx c = {&per[ts__ckpt_manifest_piece_file(m, k, j)], k, j, ts_dtype_size(dt), w->data};
      int64_t x = ts_region_intersect(&w->region, &r, collect_range, &c);
      if (x < 0) rc = (int)x;
      else got += x;
    }
    if (!rc && got != ts_region_numel(&w->region)) {
      char b[200];
      rc = ts_error_set(TS_EFORMAT, "%s/%s: the pieces of '%s' hold %lld of the %lld elements of %s this rank needs "
                        "(a piece is missing or listed twice)", dir, TS_CKPT_MANIFEST, w->name, (long long)got,
                        (long long)ts_region_numel(&w->region), ts_region_str(&w->region, b, sizeof b));
    }
  }
  for (int fi = 0; fi < nf && !rc; fi++)
    if (per[fi].n) rc = read_file(m, fi, &per[fi]);
  for (int fi = 0; fi < nf; fi++) free(per[fi].v);
  free(per);
  return rc;
}

/* ---- merge ---- */

int ts_ckpt_merge(const char *dir, const char *out, const char *config_yaml) {
  if (!dir || !out) return ts_error_set(TS_EINVAL, "ts_ckpt_merge: NULL argument");
  ts_ckpt_manifest *m;
  int rc = ts_ckpt_manifest_load(dir, &m);
  if (rc) return rc;
  int nt = ts_ckpt_manifest_num_tensors(m);
  ts_piece *want = calloc((size_t)nt + 1, sizeof *want);
  ts__ckpt_tensor *t = calloc((size_t)nt + 1, sizeof *t);
  if (!want || !t) rc = ts_error_set(TS_ENOMEM, "%s: out of memory", out);
  for (int k = 0; k < nt && !rc; k++) {
    ts_piece *w = &want[k];
    const char *name;
    ts_ckpt_manifest_tensor(m, k, &name, &w->dtype, &w->shape, NULL);
    w->name = (char *)name;
    ts_region_whole(&w->region, &w->shape);
    size_t nb = ts_piece_nbytes(w);
    if (!(w->data = ts_alloc(nb ? nb : 1))) rc = ts_error_set(TS_ENOMEM, "%s: out of memory for '%s'", out, name);
    t[k] = (ts__ckpt_tensor){name, w->dtype, w->shape, w->data};
  }
  if (!rc) rc = ts_ckpt_sliced_read(m, want, nt, 1);
  ts_ckpt_info info;
  memset(&info, 0, sizeof info);
  if (!rc) rc = ts_ckpt_manifest_info(m, &info);
  if (!rc) {
    ts_ckpt_state st;
    memset(&st, 0, sizeof st);
    st.model = info.model[0] ? info.model : NULL;
    st.config_hash = info.has_config_hash ? info.config_hash : 0;
    st.config_yaml = config_yaml ? config_yaml : info.config_yaml;
    st.version = info.version;
    st.pos = info.pos;
    rc = ts__ckpt_write(out, &st, t, nt);
  }
  ts_ckpt_info_free(&info);
  for (int k = 0; want && k < nt; k++) ts_free(want[k].data);
  free(want);
  free(t);
  ts_ckpt_manifest_free(m);
  return rc;
}

/* ---- export ---- */

int ts__ckpt_sliced_export(const char *dir, const char *out) {
  ts_ckpt_manifest *m;
  int rc = ts_ckpt_manifest_load(dir, &m);
  if (rc) return rc;
  int nt = ts_ckpt_manifest_num_tensors(m), n = 0;
  ts_piece *want = calloc((size_t)nt + 1, sizeof *want);
  const char **plain = calloc((size_t)nt + 1, sizeof *plain);
  if (!want || !plain) rc = ts_error_set(TS_ENOMEM, "%s: out of memory", out);
  for (int k = 0; k < nt && !rc; k++) { /* the model's tensors, whole: parameters and buffers */
    const char *name;
    ts_dtype dt;
    ts_shape shape;
    ts_ckpt_manifest_tensor(m, k, &name, &dt, &shape, NULL);
    const char *p = !strncmp(name, "param.", 6) ? name + 6 : !strncmp(name, "state.", 6) ? name + 6 : NULL;
    if (!p) continue;
    ts_piece *w = &want[n];
    w->name = (char *)name;
    w->dtype = dt;
    w->shape = shape;
    ts_region_whole(&w->region, &w->shape);
    size_t nb = ts_piece_nbytes(w);
    if (!(w->data = ts_alloc(nb ? nb : 1))) rc = ts_error_set(TS_ENOMEM, "%s: out of memory for '%s'", out, name);
    plain[n++] = p;
  }
  if (!rc && !n) rc = ts_error_set(TS_EFORMAT, "%s: the checkpoint holds no parameters", dir);
  if (!rc) rc = ts_ckpt_sliced_read(m, want, n, 1); /* only the chunks holding them */
  ts_ckpt_info info;
  memset(&info, 0, sizeof info);
  if (!rc) rc = ts_ckpt_manifest_info(m, &info);
  ts_st_writer *w = NULL;
  if (!rc) rc = ts_st_writer_create(&w);
  for (int k = 0; k < n && !rc; k++) rc = ts_st_writer_add(w, plain[k], want[k].dtype, want[k].shape, want[k].data);
  char step[32];
  snprintf(step, sizeof step, "%" PRId64, info.pos.step);
  if (!rc) rc = ts_st_writer_set_meta(w, "format", "pt");
  if (!rc && info.model[0]) rc = ts_st_writer_set_meta(w, "tessera.model", info.model);
  if (!rc) rc = ts_st_writer_set_meta(w, "tessera.step", step);
  if (rc) ts_error_wrap(rc, "exporting %s", dir);
  else if (!(rc = ts__mkdir_parents(out))) rc = ts_st_write(w, out);
  ts_st_writer_free(w);
  ts_ckpt_info_free(&info);
  for (int k = 0; want && k < n; k++) ts_free(want[k].data);
  free(want);
  free(plain);
  ts_ckpt_manifest_free(m);
  return rc;
}

/* ---- verify ---- */

/* The pieces of rank file fi's header equal the manifest's pieces in that file (both ways). */
static int check_header(const ts_ckpt_manifest *m, int fi, ts_st_file *f) {
  const char *mt = ts_st_meta(f, META_PIECES), *fmt = ts_st_meta(f, "tessera.format"), *id = ts_st_meta(f, META_ID);
  if (!fmt || strcmp(fmt, TS_CKPT_SLICE_FORMAT) || !id || strcmp(id, ts_ckpt_manifest_id(m)))
    return ts_error_set(TS_EFORMAT, "%s: not a rank file of checkpoint %s", ts_st_path(f), ts_ckpt_manifest_id(m));
  cJSON *meta = mt ? cJSON_Parse(mt) : NULL;
  int rc = cJSON_IsObject(meta) ? TS_OK
                                : ts_error_set(TS_EFORMAT, "%s: metadata %s is missing or not an object", ts_st_path(f),
                                               META_PIECES);
  int listed = 0;
  for (int k = 0; k < ts_ckpt_manifest_num_tensors(m) && !rc; k++) {
    int np;
    ts_ckpt_manifest_tensor(m, k, NULL, NULL, NULL, &np);
    for (int j = 0; j < np && !rc; j++) {
      if (ts__ckpt_manifest_piece_file(m, k, j) != fi) continue;
      int idx;
      rc = resolve_entry(m, f, meta, k, j, &idx);
      listed++;
    }
  }
  if (!rc && (listed != ts_st_count(f) || cJSON_GetArraySize(meta) != listed))
    rc = ts_error_set(TS_EFORMAT, "%s: holds %d pieces, the manifest lists %d in it", ts_st_path(f), ts_st_count(f),
                      listed);
  cJSON_Delete(meta);
  return rc;
}

int ts_ckpt_verify(const char *path, char *summary, size_t cap) {
  if (!path) return ts_error_set(TS_EINVAL, "ts_ckpt_verify: NULL path");
  if (summary && cap) summary[0] = 0;
  char rpath[4096]; /* DIR/latest: the checkpoint it names */
  int rr = ts_ckpt_resolve(path, rpath, sizeof rpath);
  if (rr < 0) return rr;
  path = rpath;
  if (!ts_ckpt_is_sliced(path)) {
    ts_st_file *f;
    int rc = ts_st_open(path, &f);
    if (rc) return rc;
    if (summary)
      snprintf(summary, cap, ts_st_is_mindspore(f) ? "%s: %d tensors, a MindSpore checkpoint read whole (it has no checksums)"
                                                    : "%s: %d tensors, header and checksums verified", path, ts_st_count(f));
    ts_st_close(f);
    return TS_OK;
  }
  ts_ckpt_manifest *m;
  int rc = ts_ckpt_manifest_load(path, &m);
  if (rc) return rc;
  uint64_t total = 0;
  for (int i = 0; i < ts_ckpt_manifest_num_files(m) && !rc; i++) {
    const char *name, *sha;
    int rank;
    uint64_t bytes, got = 0;
    ts_ckpt_manifest_file(m, i, &name, &rank, &bytes, &sha);
    char fp[4200], hex[65];
    snprintf(fp, sizeof fp, "%s/%s", path, name);
    if ((rc = ts_sha256_file(fp, hex, &got))) {
      char why[600];
      snprintf(why, sizeof why, "%s", ts_last_error());
      rc = ts_error_set(TS_EIO, "%s (a file the manifest lists)", why);
      break;
    }
    if (got != bytes) rc = ts_error_set(TS_EFORMAT, "%s: %llu bytes, the manifest says %llu", fp, (unsigned long long)got,
                                        (unsigned long long)bytes);
    else if (strcmp(hex, sha))
      rc = ts_error_set(TS_EFORMAT, "%s: SHA-256 %s differs from the manifest's %s (corrupted or replaced)", fp, hex, sha);
    total += got;
    if (rc || rank < 0) continue;
    ts_st_file *f;
    if ((rc = ts_st_open(fp, &f))) break; /* header, CRC-32 and chunk checksums */
    rc = check_header(m, i, f);
    ts_st_close(f);
  }
  if (!rc && (rc = ts_ckpt_manifest_check(m))) ts_error_wrap(rc, "%s/%s", path, TS_CKPT_MANIFEST);
  if (!rc && summary)
    snprintf(summary, cap, "%s: %d files (%llu bytes), %d tensors: sizes, SHA-256, headers, checksums and pieces "
             "verified", path, ts_ckpt_manifest_num_files(m), (unsigned long long)total, ts_ckpt_manifest_num_tensors(m));
  ts_ckpt_manifest_free(m);
  return rc;
}
