/* Checkpoints: training state <-> one safetensors file (see checkpoint.h). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tessera/checkpoint.h"
#include "ckpt_impl.h"
#include "../base/afile.h"
#include "../base/iofault.h"
#include "../base/rfile.h"
#include "../base/text.h"

#define P_PARAM "param."
#define P_STATE "state."
#define P_OPTIM "optim."
#define META(k) "tessera." k

/* ------------------------------------------------------------------ helpers */
static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static char *join(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  char *s = malloc(la + lb + 1);
  if (!s) return NULL;
  memcpy(s, a, la);
  memcpy(s + la, b, lb + 1);
  return s;
}


/* ------------------------------------------------------------------ temporary files */
/* Length of the run of decimal digits at s (0 if none, or more than 19). */
static size_t digit_run(const char *s) {
  size_t n = 0;
  while (s[n] >= '0' && s[n] <= '9') n++;
  return n <= 19 ? n : 0;
}

/* What a name of dir is for the series `prefix`. */
enum { NM_OTHER = 0, NM_FILE_TEMP, NM_STAGE, NM_DIR };
/* "<prefix>-<digits>.safetensors.tmp.<pid>.<counter>" (a whole save's temporary: NM_FILE_TEMP),
 * "<prefix>-<digits>.tmp.<pid>" or ".old.<pid>" (a sliced save's staging or replaced directory:
 * NM_STAGE), "<prefix>-<digits>" (a sliced checkpoint's name: NM_DIR); *pid_out = pid. */
static int name_kind(const char *name, const char *prefix, long *pid_out) {
  size_t pl = strlen(prefix);
  if (strncmp(name, prefix, pl) || name[pl] != '-') return NM_OTHER;
  const char *s = name + pl + 1;
  size_t nd = digit_run(s);
  if (!nd || nd > 18) return NM_OTHER;
  s += nd;
  if (!*s) return NM_DIR;
  const char *mid = ".safetensors.tmp.";
  int stage = 0;
  if (!strncmp(s, mid, strlen(mid))) s += strlen(mid);
  else if (!strncmp(s, ".tmp.", 5) || !strncmp(s, ".old.", 5)) s += 5, stage = 1;
  else return NM_OTHER;
  size_t np = digit_run(s);
  if (!np) return NM_OTHER;
  *pid_out = strtol(s, NULL, 10);
  if (stage) return s[np] ? NM_OTHER : NM_STAGE;
  if (s[np] != '.') return NM_OTHER;
  s += np + 1;
  size_t nc = digit_run(s);
  return nc && !s[nc] ? NM_FILE_TEMP : NM_OTHER;
}

/* "latest.tmp.<pid>.<counter>": the atomic writer's temporary of the `latest` pointer. */
static int latest_temp(const char *name, long *pid_out) {
  size_t l = strlen(TS_CKPT_LATEST);
  if (strncmp(name, TS_CKPT_LATEST, l) || strncmp(name + l, ".tmp.", 5)) return NM_OTHER;
  const char *s = name + l + 5;
  size_t np = digit_run(s);
  if (!np || s[np] != '.') return NM_OTHER;
  *pid_out = strtol(s, NULL, 10);
  size_t nc = digit_run(s + np + 1);
  return nc && !s[np + 1 + nc] ? NM_FILE_TEMP : NM_OTHER;
}

int ts_ckpt_clean_temps(const char *dir, const char *prefix) {
  if (!prefix || !*prefix) return ts_error_set(TS_EINVAL, "ts_ckpt_clean_temps: empty prefix");
  const char *d = dir && *dir ? dir : ".";
  DIR *dh = opendir(d);
  if (!dh) {
    if (errno == ENOENT) return 0;
    return ts_error_set(TS_EIO, "%s: cannot list the directory: %s", d, strerror(errno));
  }
  int removed = 0, rc = TS_OK;
  long self = (long)getpid();
  time_t now = time(NULL);
  struct dirent *e;
  while ((e = readdir(dh))) {
    long pid = 0;
    int kind = name_kind(e->d_name, prefix, &pid);
    if (kind == NM_OTHER) kind = latest_temp(e->d_name, &pid);
    if (kind == NM_OTHER || (kind != NM_DIR && pid == self)) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", d, e->d_name);
    struct stat sb;
    if (lstat(path, &sb) != 0 || (kind == NM_FILE_TEMP ? !S_ISREG(sb.st_mode) : !S_ISDIR(sb.st_mode))) continue;
    if (kind == NM_DIR) { /* a sliced checkpoint: only one without its manifest (a deletion cut short) */
      char man[4200];
      snprintf(man, sizeof man, "%s/%s", path, TS_CKPT_MANIFEST);
      if (lstat(man, &sb) == 0) continue;
      if (ts__ckpt_remove_dir(path) == TS_OK) removed++; /* foreign files in it: left alone */
      continue;
    }
    /* stale: its writer is gone (a killed save), or it has not been written to for a day (the
     * pid was reused since); a save in progress in another live process is left alone */
    int gone = pid <= 0 || pid > INT32_MAX || (kill((pid_t)pid, 0) != 0 && errno == ESRCH);
    if (!gone && now - sb.st_mtime < 24 * 3600) continue;
    if (kind == NM_STAGE) {
      if (ts__ckpt_remove_dir(path) == TS_OK) removed++;
      continue;
    }
    if (unlink(path) != 0 && errno != ENOENT) {
      rc = ts_error_set(TS_EIO, "%s: cannot delete a stale temporary file: %s", path, strerror(errno));
      break;
    }
    removed++;
  }
  closedir(dh);
  return rc ? rc : removed;
}

/* If path names a checkpoint of a series ("<dir>/<prefix>-<digits>.safetensors"), the stale
 * temporary files of that series are removed before it is written (failures only logged). */
static void clean_series_temps(const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  const char *ext = ".safetensors", *dash = strrchr(base, '-');
  if (!dash || dash == base) return;
  size_t nd = digit_run(dash + 1);
  if (!nd || strcmp(dash + 1 + nd, ext)) return;
  char dir[4096], prefix[1024];
  size_t dl = base > path ? (size_t)(base - path - 1) : 0, pl = (size_t)(dash - base);
  if (dl >= sizeof dir || pl >= sizeof prefix) return;
  memcpy(dir, path, dl);
  dir[dl] = 0;
  if (base > path && !dl) snprintf(dir, sizeof dir, "/");
  memcpy(prefix, base, pl);
  prefix[pl] = 0;
  if (ts_ckpt_clean_temps(dir, prefix) < 0)
    ts_log(TS_LOG_WARN, "%s", ts_last_error()); /* the save itself can still succeed */
}

/* ------------------------------------------------------------------ save */
int ts__ckpt_write(const char *path, const ts_ckpt_state *st, const ts__ckpt_tensor *t, int n) {
  ts_st_writer *w;
  int rc = ts_st_writer_create(&w);
  if (rc) return rc;
  for (int i = 0; i < n && !rc; i++) rc = ts_st_writer_add(w, t[i].name, t[i].dt, t[i].shape, t[i].data);
  if (rc) {
    ts_error_wrap(rc, "%s", path);
    goto out;
  }
  char num[64];
#define SETM(key, val)                                               \
  do {                                                               \
    if (!rc) rc = ts_st_writer_set_meta(w, META(key), (val));        \
  } while (0)
  SETM("format", TS_CKPT_FORMAT);
  SETM("version", st->version ? st->version : ts_version());
  if (st->model) SETM("model", st->model);
  if (st->config_hash) {
    snprintf(num, sizeof num, "%016" PRIx64, st->config_hash);
    SETM("config_hash", num);
  }
  if (st->config_yaml) SETM("config", st->config_yaml);
  snprintf(num, sizeof num, "%" PRId64, st->pos.step);
  SETM("step", num);
  snprintf(num, sizeof num, "%" PRId64, st->pos.epoch);
  SETM("epoch", num);
  snprintf(num, sizeof num, "%" PRId64, st->pos.batch_index);
  SETM("batch_index", num);
  snprintf(num, sizeof num, "%" PRIu64, st->pos.seed);
  SETM("seed", num);
  snprintf(num, sizeof num, "%" PRIu64, st->pos.rng_counter);
  SETM("rng_counter", num);
  snprintf(num, sizeof num, "%.17g", st->pos.loss_scale);
  SETM("loss_scale", num);
  snprintf(num, sizeof num, "%" PRId64, st->pos.loss_scale_growth_tracker);
  SETM("loss_scale_growth_tracker", num);
#undef SETM
  if (rc) {
    ts_error_wrap(rc, "%s", path);
    goto out;
  }
  if ((rc = ts__mkdir_parents(path))) goto out;
  rc = ts_st_write(w, path);
out:
  ts_st_writer_free(w);
  return rc;
}

/* The tensors of st in a whole checkpoint's order (names malloc'd into names[], data pointing into
 * the store and the optimizer). */
static int list_tensors(const char *path, const ts_ckpt_state *st, char ***names_out, ts__ckpt_tensor **t_out, int *n_out) {
  ts_params *ps = st->params;
  *names_out = NULL;
  *t_out = NULL;
  *n_out = 0;
  if (ps && ts_params_count(ps) > 0 && !ts_params_ptr(ps, 0))
    return ts_error_set(TS_EINVAL, "%s: the parameter store is not allocated (ts_params_alloc)", path);
  int np = ps ? ts_params_count(ps) : 0, nv = st->optim ? ts_optim_state_count(st->optim) : 0, n = 0, rc = TS_OK;
  char **names = calloc((size_t)(np + nv) + 1, sizeof *names);
  ts__ckpt_tensor *t = calloc((size_t)(np + nv) + 1, sizeof *t);
  if (!names || !t) rc = ts_error_set(TS_ENOMEM, "%s: out of memory", path);
  for (int i = 0; i < np && !rc; i++, n++) {
    const char *pre = ts_params_flags(ps, i) & TS_PARAM_STATE ? P_STATE : P_PARAM;
    if (!(names[n] = join(pre, ts_params_name(ps, i)))) rc = ts_error_set(TS_ENOMEM, "%s: out of memory", path);
    t[n] = (ts__ckpt_tensor){names[n], TS_F32, ts_params_shape(ps, i), ts_params_ptr(ps, i)};
  }
  for (int i = 0; i < nv && !rc; i++, n++) {
    ts_tensor v;
    if ((rc = ts_optim_state_view(st->optim, i, &v))) {
      ts_error_wrap(rc, "%s", path);
      break;
    }
    if (!(names[n] = join(P_OPTIM, ts_optim_state_name(st->optim, i)))) rc = ts_error_set(TS_ENOMEM, "%s: out of memory", path);
    t[n] = (ts__ckpt_tensor){names[n], v.dtype, v.shape, v.data};
  }
  *names_out = names;
  *t_out = t;
  *n_out = n;
  return rc;
}

static void free_list(char **names, ts__ckpt_tensor *t, int n) {
  for (int i = 0; names && i < n; i++) free(names[i]);
  free(names);
  free(t);
}

int ts_ckpt_save(const char *path, const ts_ckpt_state *st) {
  if (!path || !st) return ts_error_set(TS_EINVAL, "ts_ckpt_save: NULL argument");
  clean_series_temps(path);
  char **names;
  ts__ckpt_tensor *t;
  int n, rc = list_tensors(path, st, &names, &t, &n);
  if (!rc) rc = ts__ckpt_write(path, st, t, n);
  free_list(names, t, n);
  return rc;
}

/* ------------------------------------------------------------------ snapshots */
struct ts_ckpt_snapshot {
  ts_ckpt_state st;            /* the metadata; params and optim NULL; strings below */
  char *model, *yaml, *version;
  char **names;
  ts__ckpt_tensor *t;
  int n;
  unsigned char *buf;          /* every tensor's bytes, one after the other (kept between takes) */
  size_t cap;
};

int ts_ckpt_snapshot_take(const ts_ckpt_state *st, ts_ckpt_snapshot **io) {
  if (!st || !io) return ts_error_set(TS_EINVAL, "ts_ckpt_snapshot_take: NULL argument");
  ts_ckpt_snapshot *s = *io;
  if (!s && !(s = calloc(1, sizeof *s))) return ts_error_set(TS_ENOMEM, "checkpoint snapshot: out of memory");
  *io = s;
  free_list(s->names, s->t, s->n);
  free(s->model);
  free(s->yaml);
  free(s->version);
  s->names = NULL;
  s->t = NULL;
  s->n = 0;
  s->model = s->yaml = s->version = NULL;
  int rc = list_tensors("checkpoint snapshot", st, &s->names, &s->t, &s->n);
  size_t total = 0;
  for (int i = 0; i < s->n && !rc; i++) total += (size_t)ts_shape_numel(&s->t[i].shape) * ts_dtype_size(s->t[i].dt);
  if (!rc && total > s->cap) {
    unsigned char *b = realloc(s->buf, total);
    if (!b) rc = ts_error_set(TS_ENOMEM, "checkpoint snapshot: out of memory (%zu bytes)", total);
    else s->buf = b, s->cap = total;
  }
  size_t off = 0;
  for (int i = 0; i < s->n && !rc; i++) {
    size_t b = (size_t)ts_shape_numel(&s->t[i].shape) * ts_dtype_size(s->t[i].dt);
    if (b) memcpy(s->buf + off, s->t[i].data, b);
    s->t[i].data = s->buf + off;
    off += b;
  }
  s->st = *st;
  s->st.params = NULL;
  s->st.optim = NULL;
  if (!rc && st->model && !(s->model = strdup(st->model))) rc = TS_ENOMEM;
  if (!rc && st->config_yaml && !(s->yaml = strdup(st->config_yaml))) rc = TS_ENOMEM;
  if (!rc && st->version && !(s->version = strdup(st->version))) rc = TS_ENOMEM;
  if (rc == TS_ENOMEM) ts_error_set(rc, "checkpoint snapshot: out of memory");
  s->st.model = s->model;
  s->st.config_yaml = s->yaml;
  s->st.version = s->version;
  return rc;
}

size_t ts_ckpt_snapshot_bytes(const ts_ckpt_snapshot *s) { return s ? s->cap : 0; }

int ts_ckpt_snapshot_save(const ts_ckpt_snapshot *s, const char *path) {
  if (!s || !path) return ts_error_set(TS_EINVAL, "ts_ckpt_snapshot_save: NULL argument");
  clean_series_temps(path);
  return ts__ckpt_write(path, &s->st, s->t, s->n);
}

void ts_ckpt_snapshot_free(ts_ckpt_snapshot *s) {
  if (!s) return;
  free_list(s->names, s->t, s->n);
  free(s->model);
  free(s->yaml);
  free(s->version);
  free(s->buf);
  free(s);
}

/* ------------------------------------------------------------------ info */
static int meta_i64(const ts_st_file *f, const char *key, int64_t *out) {
  const char *v = ts_st_meta(f, key);
  if (!v) return TS_OK;
  char *e;
  errno = 0;
  long long x = strtoll(v, &e, 10);
  if (!*v || *e || errno)
    return ts_error_set(TS_EFORMAT, "%s: metadata %s = '%.40s' is not an integer", ts_st_path(f),
                        key, v);
  *out = x;
  return TS_OK;
}

static int meta_u64(const ts_st_file *f, const char *key, int base, uint64_t *out) {
  const char *v = ts_st_meta(f, key);
  if (!v) return TS_OK;
  char *e;
  errno = 0;
  unsigned long long x = strtoull(v, &e, base);
  if (!*v || *e || errno || *v == '-')
    return ts_error_set(TS_EFORMAT, "%s: metadata %s = '%.40s' is not an unsigned integer",
                        ts_st_path(f), key, v);
  *out = x;
  return TS_OK;
}

static int meta_f64(const ts_st_file *f, const char *key, double *out) {
  const char *v = ts_st_meta(f, key);
  if (!v) return TS_OK;
  char *e;
  errno = 0;
  double x = strtod(v, &e);
  if (!*v || *e)
    return ts_error_set(TS_EFORMAT, "%s: metadata %s = '%.40s' is not a number", ts_st_path(f),
                        key, v);
  *out = x;
  return TS_OK;
}

int ts_ckpt_info_get(const ts_st_file *f, ts_ckpt_info *info) {
  if (!f || !info) return ts_error_set(TS_EINVAL, "ts_ckpt_info_get: NULL argument");
  memset(info, 0, sizeof *info);
  const char *fmt = ts_st_meta(f, META("format"));
  info->is_tessera = fmt != NULL;
  snprintf(info->format, sizeof info->format, "%s", fmt ? fmt : "");
  const char *s = ts_st_meta(f, META("version"));
  snprintf(info->version, sizeof info->version, "%s", s ? s : "");
  s = ts_st_meta(f, META("model"));
  snprintf(info->model, sizeof info->model, "%s", s ? s : "");
  int rc;
  info->has_config_hash = ts_st_meta(f, META("config_hash")) != NULL;
  if ((rc = meta_u64(f, META("config_hash"), 16, &info->config_hash)) ||
      (rc = meta_i64(f, META("step"), &info->pos.step)) ||
      (rc = meta_i64(f, META("epoch"), &info->pos.epoch)) ||
      (rc = meta_i64(f, META("batch_index"), &info->pos.batch_index)) ||
      (rc = meta_u64(f, META("seed"), 10, &info->pos.seed)) ||
      (rc = meta_u64(f, META("rng_counter"), 10, &info->pos.rng_counter)) ||
      (rc = meta_f64(f, META("loss_scale"), &info->pos.loss_scale)) ||
      (rc = meta_i64(f, META("loss_scale_growth_tracker"), &info->pos.loss_scale_growth_tracker)))
    return rc;
  /* a position no run can reach is a damaged or forged header, not a place to resume from */
  if (info->pos.step < 0 || info->pos.epoch < 0 || info->pos.batch_index < 0 || info->pos.epoch > info->pos.step)
    return ts_error_set(TS_EFORMAT, "%s: impossible position in the header: step %lld, epoch %lld, batch %lld",
                        ts_st_path(f), (long long)info->pos.step, (long long)info->pos.epoch, (long long)info->pos.batch_index);
  s = ts_st_meta(f, META("config"));
  if (s && !(info->config_yaml = strdup(s)))
    return ts_error_set(TS_ENOMEM, "%s: out of memory", ts_st_path(f));
  info->ntensors = ts_st_count(f);
  for (int i = 0; i < info->ntensors; i++) {
    ts_tensor v;
    if (ts_st_get(f, i, &v)) continue;
    const char *n = ts_st_name(f, i);
    int64_t ne = ts_tensor_numel(&v);
    info->data_bytes += ts_tensor_nbytes(&v);
    if (!info->is_tessera || starts(n, P_PARAM))
      info->param_numel += ne;
    else if (starts(n, P_STATE))
      info->state_numel += ne;
    else if (starts(n, P_OPTIM))
      info->optim_numel += ne;
  }
  return TS_OK;
}

int ts_ckpt_read_info(const char *path, ts_ckpt_info *info) {
  if (!path || !info) return ts_error_set(TS_EINVAL, "ts_ckpt_read_info: NULL argument");
  memset(info, 0, sizeof *info);
  char rpath[4096]; /* DIR/latest: the checkpoint it names */
  int rr = ts_ckpt_resolve(path, rpath, sizeof rpath);
  if (rr < 0) return rr;
  path = rpath;
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) { /* a sliced checkpoint: its manifest */
    ts_ckpt_manifest *m = NULL;
    int rc = ts_ckpt_manifest_load(path, &m);
    if (!rc) rc = ts_ckpt_manifest_info(m, info);
    ts_ckpt_manifest_free(m);
    return rc;
  }
  ts_st_file *f;
  int rc = ts_st_open(path, &f);
  if (rc) return rc;
  rc = ts_ckpt_info_get(f, info);
  ts_st_close(f);
  return rc;
}

void ts_ckpt_info_free(ts_ckpt_info *info) {
  if (!info) return;
  free(info->config_yaml);
  info->config_yaml = NULL;
}

/* ------------------------------------------------------------------ load */
typedef struct {
  char *name;      /* full checkpoint name ("param.fc1.weight") */
  const char *key; /* name looked up in the file (without prefix for plain files) */
  char *alias;     /* MindSpore's name of it, where the file has that one (key points to it) */
  ts_dtype dtype;
  ts_shape shape;
  void *dst;
  int file_idx;    /* -1 if missing */
} want_t;

/* MindSpore's name for a layer's parameter that the file f holds under it (BatchNorm's weight,
 * bias, running_mean, running_var: gamma, beta, moving_mean, moving_variance; LayerNorm's gamma,
 * beta; Embedding's embedding_table), in *out (malloc'ed), else *out NULL. -1: out of memory. */
static int ms_alias(const ts_st_file *f, const char *name, char **out) {
  static const char *const k_alias[][2] = {{"weight", "gamma"},           {"bias", "beta"},
                                           {"running_mean", "moving_mean"}, {"running_var", "moving_variance"},
                                           {"weight", "embedding_table"}};
  *out = NULL;
  const char *dot = strrchr(name, '.');
  size_t pre = dot ? (size_t)(dot - name + 1) : 0;
  for (size_t k = 0; k < sizeof k_alias / sizeof k_alias[0]; k++) {
    if (strcmp(name + pre, k_alias[k][0])) continue;
    char *a = malloc(pre + strlen(k_alias[k][1]) + 1);
    if (!a) return -1;
    memcpy(a, name, pre);
    strcpy(a + pre, k_alias[k][1]);
    if (ts_st_index(f, a) >= 0) {
      *out = a;
      return 0;
    }
    free(a);
  }
  return 0;
}

/* A list of difference descriptions, kept for the message and the log. */
typedef struct {
  char **s;
  int n, cap;
} strlist;

static int sl_add(strlist *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int sl_add(strlist *l, const char *fmt, ...) {
  if (l->n == l->cap) {
    int nc = l->cap ? 2 * l->cap : 16;
    char **q = realloc(l->s, (size_t)nc * sizeof *q);
    if (!q) return TS_ENOMEM;
    l->s = q;
    l->cap = nc;
  }
  va_list ap;
  va_start(ap, fmt);
  l->s[l->n] = ts__str_vprintf(fmt, ap);
  va_end(ap);
  if (!l->s[l->n]) return TS_ENOMEM;
  l->n++;
  return TS_OK;
}

static void sl_free(strlist *l) {
  for (int i = 0; i < l->n; i++) free(l->s[i]);
  free(l->s);
}

/* Appends "<count> <what> (a, b, c, ... and N more)" to buf. */
static void summarize(char *buf, size_t cap, const strlist *l, const char *what, int *first) {
  if (!l->n) return;
  size_t len = strlen(buf);
  ts__app(buf, cap, &len, "%s%d %s (", *first ? "" : "; ", l->n, what);
  int shown = 0;
  for (int i = 0; i < l->n && len < cap; i++) {
    if (len + strlen(l->s[i]) + 24 > cap || shown == 4) break;
    ts__app(buf, cap, &len, "%s%s", i ? ", " : "", l->s[i]);
    shown++;
  }
  if (shown < l->n) ts__app(buf, cap, &len, "%s... and %d more", shown ? ", " : "", l->n - shown);
  ts__app(buf, cap, &len, ")");
  *first = 0;
}

static ts__ckpt_config_diff_fn g_config_diff;
void ts__ckpt_set_config_diff(ts__ckpt_config_diff_fn fn) { g_config_diff = fn; }

int ts__ckpt_config_refusal(const char *where, uint64_t ckpt_hash, uint64_t now_hash, const char *ckpt_yaml,
                            const char *now_yaml) {
  char keys[1400] = "";
  int n = g_config_diff && ckpt_yaml && now_yaml ? g_config_diff(ckpt_yaml, now_yaml, 8, keys, sizeof keys) : 0;
  return ts_error_set(TS_ECONFIG,
                      "%s: written by another configuration (config hash %016" PRIx64 ", this run %016" PRIx64
                      "): its training-relevant keys differ%s%s; `--set checkpoint.strict=false` resumes anyway",
                      where, ckpt_hash, now_hash, n ? ": " : " (see tessera ckpt inspect --config)", keys);
}

int ts_ckpt_load(const char *path, ts_ckpt_state *st, int strict) {
  if (!path || !st) return ts_error_set(TS_EINVAL, "ts_ckpt_load: NULL argument");
  char rpath[4096]; /* DIR/latest: the checkpoint it names */
  int rr = ts_ckpt_resolve(path, rpath, sizeof rpath);
  if (rr < 0) return rr;
  path = rpath;
  st->nloaded = st->nmissing = st->nunexpected = st->nmismatched = 0;
  ts_params *ps = st->params;
  if (ps && ts_params_count(ps) > 0 && !ts_params_ptr(ps, 0))
    return ts_error_set(TS_EINVAL, "%s: the parameter store is not allocated (ts_params_alloc)",
                        path);
  ts_st_file *f;
  int rc = ts_st_open(path, &f);
  if (rc) return rc;
  ts_ckpt_info info;
  want_t *want = NULL;
  int nwant = 0;
  char *used = NULL;
  strlist missing = {0}, unexpected = {0}, mism = {0};
  if ((rc = ts_ckpt_info_get(f, &info))) goto out;
  if (info.is_tessera && !strcmp(info.format, TS_CKPT_SLICE_FORMAT)) {
    rc = ts_error_set(TS_EFORMAT, "%s: one rank's file of a sliced checkpoint: load the checkpoint's directory",
                      path);
    goto out;
  }
  if (info.is_tessera && strcmp(info.format, TS_CKPT_FORMAT)) {
    rc = ts_error_set(TS_EFORMAT, "%s: checkpoint format '%s' is not supported (this build "
                      "reads %s)", path, info.format, TS_CKPT_FORMAT);
    goto out;
  }
  /* identity */
  if (info.is_tessera && st->model && *st->model && info.model[0] &&
      strcmp(st->model, info.model)) {
    if (strict) {
      rc = ts_error_set(TS_ECONFIG, "%s: a checkpoint of model '%s', not of '%s'", path,
                        info.model, st->model);
      goto out;
    }
    ts_log(TS_LOG_WARN, "%s: a checkpoint of model '%s', loading it into '%s'", path, info.model,
           st->model);
  }
  if (info.is_tessera && st->config_hash && info.has_config_hash && info.config_hash &&
      st->config_hash != info.config_hash) {
    if (strict) {
      rc = ts__ckpt_config_refusal(path, info.config_hash, st->config_hash, info.config_yaml, st->config_yaml);
      goto out;
    }
    ts_log(TS_LOG_WARN, "%s: written by another configuration (config hash %016" PRIx64
           ", this run %016" PRIx64 ")", path, info.config_hash, st->config_hash);
  }
  /* the expected tensors */
  int np = ps ? ts_params_count(ps) : 0, nv = st->optim ? ts_optim_state_count(st->optim) : 0;
  want = calloc((size_t)(np + nv) + 1, sizeof *want);
  used = calloc((size_t)ts_st_count(f) + 1, 1);
  if (!want || !used) goto oom;
  for (int i = 0; i < np; i++) {
    want_t *w = &want[nwant];
    const char *pre = ts_params_flags(ps, i) & TS_PARAM_STATE ? P_STATE : P_PARAM;
    if (!(w->name = join(pre, ts_params_name(ps, i)))) goto oom;
    nwant++;
    /* a plain file: the plain name (a state_dict), else Tessera's own name (a checkpoint whose
     * metadata was lost, re-saved by numpy or safetensors.torch) */
    const char *plain = ts_params_name(ps, i);
    w->key = info.is_tessera ? w->name
             : ts_st_index(f, plain) >= 0 || ts_st_index(f, w->name) < 0 ? plain
                                                                          : w->name;
    if (!info.is_tessera && ts_st_index(f, w->key) < 0) { /* a MindSpore file's name of a layer's parameter */
      if (ms_alias(f, plain, &w->alias)) goto oom;
      if (w->alias) w->key = w->alias;
    }
    w->dtype = TS_F32;
    w->shape = ts_params_shape(ps, i);
    w->dst = ts_params_ptr(ps, i);
  }
  int plain_optim = 0; /* a plain file that holds Tessera's optimizer tensors all the same */
  int ms_unused = 0;   /* a MindSpore file's tensors that are not the model's */
  if (!info.is_tessera)
    for (int i = 0; i < ts_st_count(f) && !plain_optim; i++) plain_optim = starts(ts_st_name(f, i), P_OPTIM);
  if (info.is_tessera || plain_optim)
    for (int i = 0; i < nv; i++) {
      want_t *w = &want[nwant];
      ts_tensor v;
      if ((rc = ts_optim_state_view(st->optim, i, &v))) goto out;
      if (!(w->name = join(P_OPTIM, ts_optim_state_name(st->optim, i)))) goto oom;
      nwant++;
      w->key = w->name;
      w->dtype = v.dtype;
      w->shape = v.shape;
      w->dst = v.data;
    }
  /* else: a parameters-only file has no optimizer state (said once below, not name by name) */
  int no_optim = !info.is_tessera && !plain_optim && nv > 0;
  /* compare */
  for (int i = 0; i < nwant; i++) {
    want_t *w = &want[i];
    w->file_idx = ts_st_index(f, w->key);
    if (w->file_idx < 0) { /* named as the file would name it, so never also "unexpected" */
      if (sl_add(&missing, "%s", w->key)) goto oom;
      continue;
    }
    used[w->file_idx] = 1;
    ts_tensor v;
    if ((rc = ts_st_get(f, w->file_idx, &v))) goto out;
    char a[128], b[128];
    if (!ts_shape_equal(&v.shape, &w->shape)) {
      if (sl_add(&mism, "%s: shape %s in the file vs %s in the model", w->name,
                 ts_shape_str(&v.shape, a, sizeof a), ts_shape_str(&w->shape, b, sizeof b)))
        goto oom;
      w->file_idx = -2;
    } else if (v.dtype != w->dtype) {
      if (sl_add(&mism, "%s: dtype %s in the file vs %s in the model", w->name,
                 ts_dtype_name(v.dtype), ts_dtype_name(w->dtype)))
        goto oom;
      if (strict) w->file_idx = -2; /* non-strict: converted */
    }
  }
  for (int i = 0; i < ts_st_count(f); i++) {
    if (used[i]) continue;
    const char *n = ts_st_name(f, i);
    if (info.is_tessera) {
      if (starts(n, P_PARAM) || starts(n, P_STATE)) {
        if (!ps) continue; /* not asked for */
      } else if (starts(n, P_OPTIM)) {
        if (!st->optim) continue;
      }
    } else if (!ps) {
      continue;
    } else if (ts_st_is_mindspore(f)) { /* MindSpore's optimizer state and bookkeeping (moments.*, global_step) */
      ms_unused++;
      continue;
    }
    if (sl_add(&unexpected, "%s", n)) goto oom;
  }
  if (ms_unused)
    ts_log(TS_LOG_INFO, "%s: a MindSpore checkpoint: %d of its tensors are not the model's (its optimizer state "
           "and bookkeeping, such as moments.* and global_step): not loaded", path, ms_unused);
  st->nmissing = missing.n + (no_optim ? nv : 0);
  st->nunexpected = unexpected.n;
  st->nmismatched = mism.n;
  if (strict && (missing.n || unexpected.n || mism.n || no_optim)) {
    char msg[900] = "";
    int first = 1;
    if (no_optim) {
      snprintf(msg, sizeof msg, "no optimizer state (%d tensors expected)", nv);
      first = 0;
    }
    summarize(msg, sizeof msg, &missing, "missing", &first);
    summarize(msg, sizeof msg, &unexpected, "unexpected", &first);
    summarize(msg, sizeof msg, &mism, mism.n == 1 ? "mismatch" : "mismatches", &first);
    for (int i = 0; i < missing.n; i++) ts_log(TS_LOG_INFO, "%s: missing %s", path, missing.s[i]);
    for (int i = 0; i < unexpected.n; i++)
      ts_log(TS_LOG_INFO, "%s: unexpected %s", path, unexpected.s[i]);
    for (int i = 0; i < mism.n; i++) ts_log(TS_LOG_INFO, "%s: %s", path, mism.s[i]);
    if (info.is_tessera)
      rc = ts_error_set(TS_ECONFIG, "%s: does not match the model: %s", path, msg);
    else
      rc = ts_error_set(TS_ECONFIG, "%s: not a Tessera checkpoint (no tessera.format metadata; "
                        "a plain safetensors file is matched to the model by tensor name) and "
                        "it does not match the model: %s", path, msg);
    goto out;
  }
  if (no_optim)
    ts_log(TS_LOG_WARN, "%s: not a Tessera checkpoint: no optimizer state, no training position "
           "(the optimizer starts afresh)", path);
  for (int i = 0; i < missing.n; i++)
    ts_log(TS_LOG_WARN, "%s: missing %s (left as it is)", path, missing.s[i]);
  for (int i = 0; i < unexpected.n; i++)
    ts_log(TS_LOG_WARN, "%s: unexpected %s (ignored)", path, unexpected.s[i]);
  for (int i = 0; i < mism.n; i++)
    ts_log(TS_LOG_WARN, "%s: %s (%s)", path, mism.s[i],
           strstr(mism.s[i], ": shape ") ? "not loaded" : "converted");
  /* copy */
  for (int i = 0; i < nwant; i++) {
    want_t *w = &want[i];
    if (w->file_idx < 0) continue;
    ts_tensor v;
    if ((rc = ts_st_get(f, w->file_idx, &v))) goto out;
    if (v.dtype == w->dtype)
      memcpy(w->dst, v.data, ts_tensor_nbytes(&v));
    else if ((rc = ts_convert(v.data, v.dtype, w->dst, w->dtype, (size_t)ts_tensor_numel(&v)))) {
      ts_error_wrap(rc, "%s: %s", path, w->name);
      goto out;
    }
    st->nloaded++;
  }
  if (info.is_tessera) {
    st->pos = info.pos;
  }
  if (!strict && (missing.n || unexpected.n || mism.n))
    ts_log(TS_LOG_WARN, "%s: loaded %d of %d tensors (%d missing, %d unexpected, %d mismatched)",
           path, st->nloaded, nwant, missing.n, unexpected.n, mism.n);
  goto out;
oom:
  rc = ts_error_set(TS_ENOMEM, "%s: out of memory", path);
out:
  for (int i = 0; i < nwant; i++) {
    free(want[i].name);
    free(want[i].alias);
  }
  free(want);
  free(used);
  sl_free(&missing);
  sl_free(&unexpected);
  sl_free(&mism);
  ts_ckpt_info_free(&info);
  ts_st_close(f);
  return rc;
}

/* ------------------------------------------------------------------ export */
int ts_ckpt_export_params(const char *in, const char *out) {
  if (!in || !out) return ts_error_set(TS_EINVAL, "ts_ckpt_export_params: NULL argument");
  char rin[4096]; /* DIR/latest: the checkpoint it names */
  int rr = ts_ckpt_resolve(in, rin, sizeof rin);
  if (rr < 0) return rr;
  in = rin;
  if (ts_ckpt_is_sliced(in)) return ts__ckpt_sliced_export(in, out); /* merged as it is read */
  ts_st_file *f;
  int rc = ts_st_open(in, &f);
  if (rc) return rc;
  const char *fmt = ts_st_meta(f, META("format"));
  if (!fmt) {
    ts_st_close(f);
    return ts_error_set(TS_EFORMAT, "%s: not a tessera checkpoint (no %s metadata)", in,
                        META("format"));
  }
  ts_st_writer *w;
  if ((rc = ts_st_writer_create(&w))) {
    ts_st_close(f);
    return rc;
  }
  int n = 0;
  for (int i = 0; i < ts_st_count(f) && !rc; i++) {
    const char *name = ts_st_name(f, i);
    const char *plain = starts(name, P_PARAM)   ? name + strlen(P_PARAM)
                        : starts(name, P_STATE) ? name + strlen(P_STATE)
                                                : NULL;
    if (!plain) continue;
    ts_tensor v;
    if (!(rc = ts_st_get(f, i, &v))) rc = ts_st_writer_add(w, plain, v.dtype, v.shape, v.data);
    n++;
  }
  if (!rc && n == 0)
    rc = ts_error_set(TS_EFORMAT, "%s: the checkpoint holds no parameters", in);
  if (!rc) rc = ts_st_writer_set_meta(w, "format", "pt");
  const char *model = ts_st_meta(f, META("model")), *step = ts_st_meta(f, META("step"));
  if (!rc && model) rc = ts_st_writer_set_meta(w, META("model"), model);
  if (!rc && step) rc = ts_st_writer_set_meta(w, META("step"), step);
  if (rc)
    ts_error_wrap(rc, "exporting %s", in);
  else if (!(rc = ts__mkdir_parents(out)))
    rc = ts_st_write(w, out);
  ts_st_writer_free(w);
  ts_st_close(f);
  return rc;
}

/* ------------------------------------------------------------------ files in a directory */
int ts_ckpt_path(char *buf, size_t cap, const char *dir, const char *prefix, int64_t step) {
  if (!buf || !cap || !prefix) return ts_error_set(TS_EINVAL, "ts_ckpt_path: NULL argument");
  int n = dir && *dir ? snprintf(buf, cap, "%s/%s-%08" PRId64 ".safetensors", dir, prefix, step)
                      : snprintf(buf, cap, "%s-%08" PRId64 ".safetensors", prefix, step);
  if (n < 0 || (size_t)n >= cap)
    return ts_error_set(TS_ERANGE, "ts_ckpt_path: the path does not fit in %zu bytes", cap);
  return TS_OK;
}

typedef struct {
  int64_t step;
  char *name;
  int is_dir; /* a complete sliced checkpoint */
} ck_entry;

static int cmp_step(const void *a, const void *b) {
  const ck_entry *x = a, *y = b;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Checkpoints in dir, sorted by step (oldest first): files "<prefix>-<digits>.safetensors" and
 * directories "<prefix>-<digits>" holding a manifest. */
static int list_ckpts(const char *dir, const char *prefix, ck_entry **out, int *count) {
  *out = NULL;
  *count = 0;
  const char *d = dir && *dir ? dir : ".";
  DIR *dh = opendir(d);
  if (!dh) {
    if (errno == ENOENT) return TS_OK;
    return ts_error_set(TS_EIO, "%s: cannot list the directory: %s", d, strerror(errno));
  }
  size_t pl = strlen(prefix);
  const char *ext = ".safetensors";
  size_t el = strlen(ext);
  ck_entry *v = NULL;
  int n = 0, cap = 0, rc = TS_OK;
  struct dirent *e;
  while ((e = readdir(dh))) {
    const char *s = e->d_name;
    size_t l = strlen(s);
    if (l <= pl + 1 || strncmp(s, prefix, pl) || s[pl] != '-') continue;
    const char *digits = s + pl + 1;
    int is_file = l > pl + 1 + el && !strcmp(s + l - el, ext);
    size_t nd = is_file ? l - el - pl - 1 : l - pl - 1;
    int ok = nd > 0 && nd <= 18;
    for (size_t i = 0; i < nd && ok; i++) ok = digits[i] >= '0' && digits[i] <= '9';
    if (!ok) continue;
    if (!is_file) { /* a sliced checkpoint exists once its manifest does */
      char man[4200];
      struct stat sb;
      snprintf(man, sizeof man, "%s/%s/%s", d, s, TS_CKPT_MANIFEST);
      if (stat(man, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
    }
    if (n == cap) {
      int nc = cap ? 2 * cap : 16;
      ck_entry *q = realloc(v, (size_t)nc * sizeof *q);
      if (!q) {
        rc = ts_error_set(TS_ENOMEM, "%s: out of memory", d);
        break;
      }
      v = q;
      cap = nc;
    }
    v[n].step = strtoll(digits, NULL, 10);
    v[n].is_dir = !is_file;
    if (!(v[n].name = strdup(s))) {
      rc = ts_error_set(TS_ENOMEM, "%s: out of memory", d);
      break;
    }
    n++;
  }
  closedir(dh);
  if (rc) {
    for (int i = 0; i < n; i++) free(v[i].name);
    free(v);
    return rc;
  }
  if (n) qsort(v, (size_t)n, sizeof *v, cmp_step);
  *out = v;
  *count = n;
  return TS_OK;
}

int ts_ckpt_rotate(const char *dir, const char *prefix, int keep_max) {
  if (!prefix || !*prefix) return ts_error_set(TS_EINVAL, "ts_ckpt_rotate: empty prefix");
  ck_entry *v;
  int n, rc = list_ckpts(dir, prefix, &v, &n);
  if (rc) return rc;
  char keep[256] = ""; /* the checkpoint the `latest` pointer names is never deleted */
  if (keep_max > 0 && ts_ckpt_read_latest(dir, keep, sizeof keep) != TS_OK) keep[0] = 0;
  int deleted = 0;
  for (int i = 0; keep_max > 0 && i < n - keep_max; i++) {
    if (keep[0] && !strcmp(v[i].name, keep)) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : ".", v[i].name);
    if (v[i].is_dir) {
      if ((rc = ts__ckpt_remove_dir(path))) {
        ts_error_wrap(rc, "deleting an old checkpoint");
        break;
      }
    } else if ((ts__io_fault("unlink", path) || unlink(path) != 0) && errno != ENOENT) {
      rc = ts_error_set(TS_EIO, "%s: cannot delete an old checkpoint: %s", path, strerror(errno));
      break;
    }
    deleted++;
  }
  for (int i = 0; i < n; i++) free(v[i].name);
  free(v);
  return rc ? rc : deleted;
}

int ts_ckpt_find(const char *dir, const char *prefix, int64_t before, char *buf, size_t cap,
                 int64_t *step) {
  if (!prefix || !*prefix || !buf || !cap)
    return ts_error_set(TS_EINVAL, "ts_ckpt_find: NULL argument");
  buf[0] = 0;
  ck_entry *v;
  int n, rc = list_ckpts(dir, prefix, &v, &n);
  if (rc) return rc;
  int k = n - 1; /* sorted oldest first: the last one below `before` */
  while (k >= 0 && v[k].step >= before) k--;
  if (k < 0) {
    if (before == INT64_MAX)
      rc = ts_error_set(TS_ENOTFOUND, "no checkpoint %s-*.safetensors or complete %s-*/ in %s", prefix, prefix,
                        dir && *dir ? dir : ".");
    else
      rc = ts_error_set(TS_ENOTFOUND, "no checkpoint %s-*.safetensors or complete %s-*/ before step %" PRId64 " in %s",
                        prefix, prefix, before, dir && *dir ? dir : ".");
  } else {
    int w = dir && *dir ? snprintf(buf, cap, "%s/%s", dir, v[k].name)
                        : snprintf(buf, cap, "%s", v[k].name);
    if (w < 0 || (size_t)w >= cap)
      rc = ts_error_set(TS_ERANGE, "ts_ckpt_find: the path does not fit in %zu bytes", cap);
    else if (step)
      *step = v[k].step;
  }
  for (int i = 0; i < n; i++) free(v[i].name);
  free(v);
  if (rc) buf[0] = 0;
  return rc;
}

int ts_ckpt_latest(const char *dir, const char *prefix, char *buf, size_t cap) {
  return ts_ckpt_find(dir, prefix, INT64_MAX, buf, cap, NULL);
}

/* ------------------------------------------------------------------ the `latest` pointer */
#define LATEST_MAX 4096 /* bytes: a longer file is not a pointer */

/* The pointer's text: one line naming an entry of its own directory (no '/', not "." or "..",
 * printable, shorter than 256 bytes); name gets it without the line end. 0, or -1 when the text
 * is not such a line. */
static int parse_pointer(const char *txt, size_t len, char *name, size_t cap) {
  while (len && (txt[len - 1] == '\n' || txt[len - 1] == '\r')) len--;
  if (!len || len >= 256 || len >= cap) return -1;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)txt[i];
    if (c < 0x20 || c == 0x7f || c == '/') return -1;
  }
  if ((len == 1 && txt[0] == '.') || (len == 2 && txt[0] == '.' && txt[1] == '.')) return -1;
  memcpy(name, txt, len);
  name[len] = 0;
  return 0;
}

/* Reads the pointer file at path into name: TS_ENOTFOUND when there is none, TS_EFORMAT when the
 * file is not a pointer (binary, several lines, a path). */
static int read_pointer(const char *path, char *name, size_t cap) {
  struct stat sb;
  if (stat(path, &sb) != 0) return ts_error_set(TS_ENOTFOUND, "%s: no such file", path);
  if (!S_ISREG(sb.st_mode) || sb.st_size > LATEST_MAX)
    return ts_error_set(TS_EFORMAT, "%s: not a `latest` pointer (a one-line file naming a checkpoint)", path);
  char *txt = NULL;
  size_t len = 0;
  int rc = ts__file_read_all(path, "cannot read the pointer", &txt, &len);
  if (rc) return rc;
  if (memchr(txt, 0, len) || parse_pointer(txt, len, name, cap))
    rc = ts_error_set(TS_EFORMAT, "%s: not a `latest` pointer (a one-line file naming a checkpoint of its folder)",
                      path);
  free(txt);
  return rc;
}

int ts_ckpt_read_latest(const char *dir, char *name, size_t cap) {
  if (!name || !cap) return ts_error_set(TS_EINVAL, "ts_ckpt_read_latest: NULL argument");
  name[0] = 0;
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : ".", TS_CKPT_LATEST);
  int rc = read_pointer(path, name, cap);
  if (rc) name[0] = 0;
  return rc;
}

int ts_ckpt_write_latest(const char *dir, const char *name) {
  if (!name) return ts_error_set(TS_EINVAL, "ts_ckpt_write_latest: NULL name");
  char path[4200], line[300];
  snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : ".", TS_CKPT_LATEST);
  char check[256];
  if (parse_pointer(name, strlen(name), check, sizeof check) || strcmp(check, name))
    return ts_error_set(TS_EINVAL, "%s: '%s' is not a checkpoint name of the folder", path, name);
  int n = snprintf(line, sizeof line, "%s\n", name);
  ts__afile *f = NULL;
  int rc = ts__afile_open(path, &f);
  if (!rc && (rc = ts__afile_write(f, line, (size_t)n))) ts__afile_abort(f);
  else if (!rc) rc = ts__afile_commit(f);
  return rc ? ts_error_wrap(rc, "writing the `latest` pointer") : TS_OK;
}

int ts_ckpt_resolve(const char *path, char *buf, size_t cap) {
  if (!path || !buf || !cap) return ts_error_set(TS_EINVAL, "ts_ckpt_resolve: NULL argument");
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  struct stat sb;
  int is_ptr = !strcmp(base, TS_CKPT_LATEST) && stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
  char name[256];
  if (is_ptr) {
    int rc = read_pointer(path, name, sizeof name);
    if (rc == TS_EFORMAT) is_ptr = 0; /* another file that happens to be called so: used as it is */
    else if (rc) return rc;
  }
  if (!is_ptr) {
    if ((size_t)snprintf(buf, cap, "%s", path) >= cap)
      return ts_error_set(TS_ERANGE, "%s: the path does not fit in %zu bytes", path, cap);
    return 0;
  }
  int w = snprintf(buf, cap, "%.*s%s", (int)(base - path), path, name);
  if (w < 0 || (size_t)w >= cap) return ts_error_set(TS_ERANGE, "%s: the path does not fit in %zu bytes", path, cap);
  if (stat(buf, &sb) != 0)
    return ts_error_set(TS_ENOTFOUND, "%s names %s, which does not exist (deleted since?): %s: %s", path, name, buf,
                        strerror(errno));
  return 1;
}

int ts_ckpt_series_saved(const char *dir, const char *prefix, const char *path, int keep_max) {
  if (!path) return ts_error_set(TS_EINVAL, "ts_ckpt_series_saved: NULL path");
  const char *base = strrchr(path, '/');
  int rc = ts_ckpt_write_latest(dir, base ? base + 1 : path);
  if (rc) return rc;
  return keep_max > 0 ? ts_ckpt_rotate(dir, prefix, keep_max) : 0;
}
