/* Configuration: YAML (libyaml) -> ts_config, overrides, validation, dump and hash.
 * The key table lives in config_schema.c; this file is the machinery around it. The lists a
 * config owns (ts_config_free/copy, ts_cfg_strategies_*) are in config_lists.c; values as YAML text
 * (dump, hash, diff) in config_format.c. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <yaml.h>

#include "config_impl.h"
#include "../base/rfile.h"
#include "../base/text.h"
#include "tessera/strategy.h"

_Static_assert(sizeof(ts_model_kind) == sizeof(int) && sizeof(ts_optim_kind) == sizeof(int) &&
                   sizeof(ts_lr_kind) == sizeof(int) && sizeof(ts_log_level) == sizeof(int),
               "enum-typed config fields are stored as int");

/* ------------------------------------------------------------------ names */
int ts__cfg_enum_count(const char *const *names) {
  int n = 0;
  while (names[n]) n++;
  return n;
}
const char *ts__cfg_enum_name(const char *const *names, int v) {
  return v >= 0 && v < ts__cfg_enum_count(names) ? names[v] : "?";
}
const char *ts_model_kind_name(ts_model_kind k) { return ts__cfg_enum_name(ts__cfg_model_names, (int)k); }
const char *ts_data_kind_name(ts_data_kind k) { return ts__cfg_enum_name(ts__cfg_data_names, (int)k); }
const char *ts_parallel_mode_name(ts_parallel_mode m) {
  return ts__cfg_enum_name(ts__cfg_parallel_names, (int)m);
}
const char *ts_progress_mode_name(ts_progress_mode m) {
  return ts__cfg_enum_name(ts__cfg_progress_names, (int)m);
}
const char *ts_sched_unit_name(ts_sched_unit u) { return ts__cfg_enum_name(ts__cfg_unit_names, (int)u); }

/* ------------------------------------------------------------------ key lookup */
static const ts__cfg_key *find_key(const char *path) {
  for (int i = 0; i < ts__cfg_nkeys; i++)
    if (!strcmp(ts__cfg_keys[i].path, path)) return &ts__cfg_keys[i];
  return NULL;
}

static int is_section(const char *path) {
  size_t n = strlen(path);
  if (!n) return 1;
  for (int i = 0; i < ts__cfg_nkeys; i++)
    if (!strncmp(ts__cfg_keys[i].path, path, n) && ts__cfg_keys[i].path[n] == '.') return 1;
  return 0;
}

/* ------------------------------------------------------------------ edit distance */

/* " (did you mean 'x.y'?)" or " (valid keys in 'x': ...)" for an unknown full key path. */
static void suggest_key(const char *full, char *out, size_t cap) {
  out[0] = 0;
  const char *dot = strrchr(full, '.');
  size_t plen = dot ? (size_t)(dot - full) : 0;
  const char *leaf = dot ? dot + 1 : full;
  /* the children of the parent section (keys or sub-sections), deduplicated */
  const char *kids[128] = {0};
  char kbuf[128][64];
  int nk = 0;
  for (int i = 0; i < ts__cfg_nkeys; i++) {
    const char *p = ts__cfg_keys[i].path;
    if (plen && (strncmp(p, full, plen) || p[plen] != '.')) continue;
    const char *c = plen ? p + plen + 1 : p;
    size_t cl = strcspn(c, ".");
    if (cl >= sizeof kbuf[0]) continue;
    int dup = 0;
    for (int j = 0; j < nk; j++)
      if (strlen(kids[j]) == cl && !strncmp(kids[j], c, cl)) dup = 1;
    if (dup || nk == 128) continue;
    memcpy(kbuf[nk], c, cl);
    kbuf[nk][cl] = 0;
    kids[nk] = kbuf[nk];
    nk++;
  }
  const char *best = ts__text_closest(leaf, kids, nk);
  if (!best) /* a sibling that contains what was typed ("warmup" -> "warmup_steps") */
    for (int j = 0; j < nk && !best && strlen(leaf) >= 3; j++)
      if (strcasestr(kids[j], leaf)) best = kids[j];
  if (best) {
    snprintf(out, cap, " (did you mean '%.*s%s%s'?)", (int)plen, full, plen ? "." : "", best);
    return;
  }
  /* the same name in another section ("train.lr" -> "optimizer.lr") */
  for (int i = 0; i < ts__cfg_nkeys; i++) {
    const char *p = ts__cfg_keys[i].path, *l = strrchr(p, '.');
    if (l && !strcasecmp(l + 1, leaf)) {
      snprintf(out, cap, " (did you mean '%s'?)", p);
      return;
    }
  }
  ts__sb b = {0};
  ts__sb_printf(&b, plen ? " (valid keys in '%.*s': " : " (valid sections: ", (int)plen, full);
  for (int j = 0; j < nk; j++) ts__sb_printf(&b, "%s%s", j ? ", " : "", kids[j]);
  ts__sb_puts(&b, ")");
  if (!b.failed && b.s) snprintf(out, cap, "%s", b.s);
  free(b.s);
}

static void list_names(char *out, size_t cap, const char *const *names, int n) {
  size_t len = 0;
  out[0] = 0;
  for (int i = 0; i < n; i++) ts__app(out, cap, &len, "%s%s", i ? ", " : "", names[i]);
}

/* ------------------------------------------------------------------ parse context, errors */
typedef struct {
  const char *label; /* file name, or "--set k=v" */
  int marks;         /* prefix errors with line:column */
  yaml_document_t *doc;
  int *seen; /* per key of ts__cfg_keys: the line (1-based) that set it in this document, 0 if
                none yet; NULL: not tracked. A key may appear once however it is spelled. */
} pctx;

static void escape_text(const char *s, char *out, size_t cap);
static int perr(const pctx *c, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int perr(const pctx *c, const yaml_node_t *n, const char *fmt, ...) {
  char raw[900], msg[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(raw, sizeof raw, fmt, ap);
  va_end(ap);
  escape_text(raw, msg, sizeof msg); /* a key or value with a newline must not break the line */
  if (c->marks && n)
    return ts_error_set(TS_ECONFIG, "%s:%zu:%zu: %s", c->label, n->start_mark.line + 1,
                        n->start_mark.column + 1, msg);
  return ts_error_set(TS_ECONFIG, "%s: %s", c->label, msg);
}

static const char *sval(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

static int is_null(const yaml_node_t *n) {
  if (!n) return 1;
  if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
  const char *s = sval(n);
  return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
         !strcmp(s, "NULL");
}

static const char *describe(const yaml_node_t *n, char *buf, size_t cap) {
  if (is_null(n)) return "nothing (null)";
  if (n->type == YAML_SEQUENCE_NODE) return "a list";
  if (n->type == YAML_MAPPING_NODE) return "a mapping";
  char esc[64]; /* control characters escaped: a message is one line */
  escape_text(sval(n), esc, sizeof esc);
  snprintf(buf, cap, "'%s'", esc);
  return buf;
}

static yaml_node_t *node_at(const pctx *c, int idx) { return yaml_document_get_node(c->doc, idx); }

/* ------------------------------------------------------------------ scalars */
static int plain_scalar(const yaml_node_t *n) {
  return n && n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
         !is_null(n);
}

static int str_i64(const char *s, int64_t *out) {
  if (!*s || isspace((unsigned char)*s)) return -1;
  char *e;
  errno = 0;
  long long v = strtoll(s, &e, 10);
  if (*e || errno) return -1;
  *out = v;
  return 0;
}

static int str_u64(const char *s, uint64_t *out) {
  if (!*s || isspace((unsigned char)*s) || *s == '-') return -1;
  char *e;
  errno = 0;
  unsigned long long v = strtoull(s, &e, 10);
  if (*e || errno) return -1;
  *out = v;
  return 0;
}

static int str_f64(const char *s, double *out) {
  if (!*s || isspace((unsigned char)*s)) return -1;
  char *e;
  errno = 0;
  double v = strtod(s, &e);
  if (*e || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

static void fmt_range(char *buf, size_t cap, double lo, double hi, unsigned flags, int integer) {
  const char *lop = flags & CF_LO_OPEN ? "<" : "<=", *hip = flags & CF_HI_OPEN ? "<" : "<=";
  if (hi >= 1e17)
    snprintf(buf, cap, integer ? "an integer %s %.0f" : "a number %s %g",
             flags & CF_LO_OPEN ? ">" : ">=", lo);
  else if (integer)
    snprintf(buf, cap, "%.0f %s value %s %.0f", lo, lop, hip, hi);
  else
    snprintf(buf, cap, "%g %s value %s %g", lo, lop, hip, hi);
}

static int in_range(double v, double lo, double hi, unsigned flags) {
  if (flags & CF_LO_OPEN ? !(v > lo) : !(v >= lo)) return 0;
  if (flags & CF_HI_OPEN ? !(v < hi) : !(v <= hi)) return 0;
  return 1;
}

static int node_i64(const pctx *c, const yaml_node_t *n, const char *what, double lo, double hi,
                    unsigned flags, int64_t *out) {
  char d[96], r[96];
  int64_t v;
  if (!plain_scalar(n) || str_i64(sval(n), &v))
    return perr(c, n, "%s: expected an integer, got %s", what, describe(n, d, sizeof d));
  if (!in_range((double)v, lo, hi, flags)) {
    fmt_range(r, sizeof r, lo, hi, flags, 1);
    return perr(c, n, "%s: %lld is out of range (expected %s)", what, (long long)v, r);
  }
  *out = v;
  return TS_OK;
}

static int node_f64(const pctx *c, const yaml_node_t *n, const char *what, double lo, double hi,
                    unsigned flags, double *out) {
  char d[96], r[96];
  double v;
  if (!plain_scalar(n) || str_f64(sval(n), &v))
    return perr(c, n, "%s: expected a number, got %s", what, describe(n, d, sizeof d));
  if (!in_range(v, lo, hi, flags)) {
    fmt_range(r, sizeof r, lo, hi, flags, 0);
    return perr(c, n, "%s: %g is out of range (expected %s)", what, v, r);
  }
  *out = v;
  return TS_OK;
}

static int node_bool(const pctx *c, const yaml_node_t *n, const char *what, int *out) {
  char d[96];
  if (plain_scalar(n)) {
    const char *s = sval(n);
    static const char *const t[] = {"true", "yes", "on"}, *const f[] = {"false", "no", "off"};
    for (int i = 0; i < 3; i++) {
      if (!strcasecmp(s, t[i])) return *out = 1, TS_OK;
      if (!strcasecmp(s, f[i])) return *out = 0, TS_OK;
    }
  }
  return perr(c, n, "%s: expected true or false, got %s", what, describe(n, d, sizeof d));
}

static int node_enum(const pctx *c, const yaml_node_t *n, const char *what,
                     const char *const *names, int *out) {
  char d[96], list[512];
  int cnt = ts__cfg_enum_count(names);
  if (n && n->type == YAML_SCALAR_NODE && !is_null(n)) {
    for (int i = 0; i < cnt; i++)
      if (!strcasecmp(sval(n), names[i])) return *out = i, TS_OK;
  }
  list_names(list, sizeof list, names, cnt);
  const char *best = n && n->type == YAML_SCALAR_NODE ? ts__text_closest(sval(n), names, cnt) : NULL;
  if (n && n->type == YAML_SCALAR_NODE && !is_null(n)) {
    if (best)
      return perr(c, n, "%s: unknown value %s (did you mean '%s'? expected one of: %s)", what,
                  describe(n, d, sizeof d), best, list);
    return perr(c, n, "%s: unknown value %s (expected one of: %s)", what,
                describe(n, d, sizeof d), list);
  }
  return perr(c, n, "%s: expected one of: %s; got %s", what, list, describe(n, d, sizeof d));
}

/* Items of a list node (a single non-null scalar counts as a list of one). */
static int list_items(const pctx *c, const yaml_node_t *n, const char *what, const char *kind,
                      int minn, int maxn, const yaml_node_t **items, int *count) {
  char d[96];
  int cnt = 0;
  if (is_null(n)) {
    cnt = 0;
  } else if (n->type == YAML_SCALAR_NODE) {
    items[0] = n;
    cnt = 1;
  } else if (n->type == YAML_SEQUENCE_NODE) {
    cnt = (int)(n->data.sequence.items.top - n->data.sequence.items.start);
    for (int i = 0; i < cnt && i < maxn; i++)
      items[i] = node_at(c, n->data.sequence.items.start[i]);
  } else {
    return perr(c, n, "%s: expected a list of %s, got %s", what, kind, describe(n, d, sizeof d));
  }
  if (cnt < minn || cnt > maxn) {
    if (minn == maxn) return perr(c, n, "%s: expected %d values, got %d", what, minn, cnt);
    if (cnt < minn) return perr(c, n, "%s: expected at least %d values, got %d", what, minn, cnt);
    return perr(c, n, "%s: at most %d values allowed, got %d", what, maxn, cnt);
  }
  *count = cnt;
  return TS_OK;
}

static int node_f64_list(const pctx *c, const yaml_node_t *n, const char *what, double lo,
                         double hi, unsigned flags, int minn, int maxn, double *v, int *count) {
  const yaml_node_t *items[TS_CFG_MAX_LIST + 1];
  int cnt, rc;
  if (maxn > TS_CFG_MAX_LIST) maxn = TS_CFG_MAX_LIST;
  if ((rc = list_items(c, n, what, "numbers", minn, maxn, items, &cnt))) return rc;
  for (int i = 0; i < cnt; i++) {
    char w[160];
    snprintf(w, sizeof w, "%s[%d]", what, i);
    if ((rc = node_f64(c, items[i], w, lo, hi, flags, &v[i]))) return rc;
  }
  *count = cnt;
  return TS_OK;
}

static int node_int_list(const pctx *c, const yaml_node_t *n, const char *what, double lo,
                         double hi, unsigned flags, int minn, int maxn, int *v, int *count) {
  const yaml_node_t *items[TS_CFG_MAX_LIST + 1];
  int cnt, rc;
  if (maxn > TS_CFG_MAX_LIST) maxn = TS_CFG_MAX_LIST;
  if ((rc = list_items(c, n, what, "integers", minn, maxn, items, &cnt))) return rc;
  for (int i = 0; i < cnt; i++) {
    char w[160];
    int64_t x;
    snprintf(w, sizeof w, "%s[%d]", what, i);
    if ((rc = node_i64(c, items[i], w, lo, hi, flags, &x))) return rc;
    v[i] = (int)x;
  }
  *count = cnt;
  return TS_OK;
}

/* ------------------------------------------------------------------ transforms */

static const tfdef tfdefs[] = {
    {"random_crop", TS_TF_RANDOM_CROP, {"size", "padding", NULL}, "size", 1},
    {"center_crop", TS_TF_CENTER_CROP, {"size", NULL}, "size", 0},
    {"resize", TS_TF_RESIZE, {"size", NULL}, "size", 0},
    {"hflip", TS_TF_HFLIP, {"p", NULL}, "", 1},
    {"vflip", TS_TF_VFLIP, {"p", NULL}, "", 1},
    {"to_float", TS_TF_TO_FLOAT, {"scale", "shift", NULL}, "", 0},
    {"normalize", TS_TF_NORMALIZE, {"mean", "std", NULL}, "mean std", 0},
    {"hwc_to_chw", TS_TF_HWC_TO_CHW, {NULL}, "", 0},
    {"cast", TS_TF_CAST, {"dtype", NULL}, "dtype", 0},
    {"random_erasing", TS_TF_RANDOM_ERASING, {"p", "scale", "ratio", NULL}, "", 1},
};
#define NTF ((int)(sizeof tfdefs / sizeof tfdefs[0]))

const tfdef *ts__cfg_tf_by_kind(ts_transform_kind k) {
  for (int i = 0; i < NTF; i++)
    if (tfdefs[i].kind == k) return &tfdefs[i];
  return NULL;
}

/* A transform from its data.h constructor with default parameters. */
static ts_transform tf_default(const tfdef *d) {
  switch (d->kind) {
    case TS_TF_RANDOM_CROP: return ts_tf_random_crop(0, 0, 0);
    case TS_TF_CENTER_CROP: return ts_tf_center_crop(0, 0);
    case TS_TF_RESIZE: return ts_tf_resize(0, 0);
    case TS_TF_HFLIP: return ts_tf_hflip(0.5f);
    case TS_TF_VFLIP: return ts_tf_vflip(0.5f);
    case TS_TF_TO_FLOAT: return ts_tf_to_float(1.0f / 255.0f);
    case TS_TF_NORMALIZE: return ts_tf_normalize(0, NULL, NULL);
    case TS_TF_HWC_TO_CHW: return ts_tf_hwc_to_chw();
    case TS_TF_CAST: return ts_tf_cast(TS_F32);
    case TS_TF_RANDOM_ERASING: return ts_tf_random_erasing(0.5f);
  }
  return ts_tf_hwc_to_chw(); /* not reached */
}

static int parse_tf(const pctx *c, const yaml_node_t *item, const char *what, ts_transform *out,
                    int *chw) {
  char d[96], list[512];
  const yaml_node_t *name_node = NULL;
  if (item && item->type == YAML_SCALAR_NODE && !is_null(item)) {
    name_node = item;
  } else if (item && item->type == YAML_MAPPING_NODE) {
    for (yaml_node_pair_t *p = item->data.mapping.pairs.start; p < item->data.mapping.pairs.top;
         p++) {
      const yaml_node_t *k = node_at(c, p->key);
      if (k->type == YAML_SCALAR_NODE && !strcmp(sval(k), "name")) name_node = node_at(c, p->value);
    }
  } else {
    return perr(c, item, "%s: expected a transform ({name: ..., parameters}), got %s", what,
                describe(item, d, sizeof d));
  }
  const char *names[NTF + 1];
  for (int i = 0; i < NTF; i++) names[i] = tfdefs[i].name;
  names[NTF] = NULL;
  if (!name_node) {
    list_names(list, sizeof list, names, NTF);
    return perr(c, item, "%s: missing 'name' (one of: %s)", what, list);
  }
  int ki;
  char w[200];
  snprintf(w, sizeof w, "%s.name", what);
  int rc = node_enum(c, name_node, w, names, &ki);
  if (rc) return rc;
  const tfdef *def = &tfdefs[ki];
  ts_transform t = tf_default(def);
  int have_size = 0, nmean = 0, nstd = 0, have_dtype = 0;
  double mean[TS_CFG_MAX_LIST], stdv[TS_CFG_MAX_LIST];
  if (item->type == YAML_MAPPING_NODE) {
    for (yaml_node_pair_t *p = item->data.mapping.pairs.start; p < item->data.mapping.pairs.top;
         p++) {
      const yaml_node_t *k = node_at(c, p->key), *v = node_at(c, p->value);
      if (k->type != YAML_SCALAR_NODE)
        return perr(c, k, "%s: parameter names must be plain words", what);
      const char *pn = sval(k);
      for (yaml_node_pair_t *q = item->data.mapping.pairs.start; q < p; q++)
        if (!strcmp(sval(node_at(c, q->key)), pn))
          return perr(c, k, "%s: duplicate parameter '%s'", what, pn);
      if (!strcmp(pn, "name")) continue;
      int known = 0;
      for (int i = 0; def->params[i]; i++) known |= !strcmp(def->params[i], pn);
      if (!known) {
        int np = 0;
        while (def->params[np]) np++;
        const char *best = ts__text_closest(pn, def->params, np);
        if (best)
          return perr(c, k, "%s (%s): unknown parameter '%s' (did you mean '%s'?)", what,
                      def->name, pn, best);
        if (!np)
          return perr(c, k, "%s (%s): unknown parameter '%s' (%s takes none)", what, def->name,
                      pn, def->name);
        list_names(list, sizeof list, def->params, np);
        return perr(c, k, "%s (%s): unknown parameter '%s' (valid: %s)", what, def->name, pn,
                    list);
      }
      snprintf(w, sizeof w, "%s.%s", what, pn);
      if (!strcmp(pn, "size")) {
        int hw[2], cnt;
        if ((rc = node_int_list(c, v, w, 1, 1 << 20, 0, 1, 2, hw, &cnt))) return rc;
        t.h = hw[0];
        t.w = cnt == 2 ? hw[1] : hw[0];
        have_size = 1;
      } else if (!strcmp(pn, "padding")) {
        int64_t x;
        if ((rc = node_i64(c, v, w, 0, 1 << 20, 0, &x))) return rc;
        t.pad = (int)x;
      } else if (!strcmp(pn, "p")) {
        double x;
        if ((rc = node_f64(c, v, w, 0, 1, 0, &x))) return rc;
        t.p = (float)x;
      } else if (!strcmp(pn, "scale") && def->kind == TS_TF_TO_FLOAT) {
        double x;
        if ((rc = node_f64(c, v, w, -1e30, 1e30, 0, &x))) return rc;
        t.scale = (float)x;
      } else if (!strcmp(pn, "shift")) {
        double x;
        if ((rc = node_f64(c, v, w, -1e30, 1e30, 0, &x))) return rc;
        t.shift = (float)x;
      } else if (!strcmp(pn, "scale") || !strcmp(pn, "ratio")) { /* random_erasing ranges */
        double r[2];
        int cnt;
        int is_scale = pn[0] == 's';
        if ((rc = node_f64_list(c, v, w, 0, is_scale ? 1 : 1e6, CF_LO_OPEN, 2, 2, r, &cnt)))
          return rc;
        if (r[0] > r[1])
          return perr(c, v, "%s: expected [low, high] with low <= high, got [%g, %g]", w, r[0],
                      r[1]);
        float *dst = is_scale ? t.erase_scale : t.erase_ratio;
        dst[0] = (float)r[0], dst[1] = (float)r[1];
      } else if (!strcmp(pn, "mean")) {
        if ((rc = node_f64_list(c, v, w, -1e30, 1e30, 0, 1, 8, mean, &nmean))) return rc;
      } else if (!strcmp(pn, "std")) {
        if ((rc = node_f64_list(c, v, w, 0, 1e30, CF_LO_OPEN, 1, 8, stdv, &nstd))) return rc;
      } else if (!strcmp(pn, "dtype")) {
        ts_dtype dt;
        if (v->type != YAML_SCALAR_NODE || is_null(v) || ts_dtype_parse(sval(v), &dt))
          return perr(c, v, "%s: unknown dtype %s (expected one of: f32, bf16, f16, i32, i64, u8)",
                      w, describe(v, d, sizeof d));
        t.dtype = dt;
        have_dtype = 1;
      }
    }
  }
  if (strstr(def->required, "size") && !have_size)
    return perr(c, item, "%s (%s): missing parameter 'size'", what, def->name);
  if (def->kind == TS_TF_CAST && !have_dtype)
    return perr(c, item, "%s (cast): missing parameter 'dtype'", what);
  if (def->kind == TS_TF_NORMALIZE) {
    if (!nmean || !nstd)
      return perr(c, item, "%s (normalize): missing parameter '%s'", what, nmean ? "std" : "mean");
    if (nmean != nstd)
      return perr(c, item, "%s (normalize): mean has %d values but std has %d", what, nmean,
                  nstd);
    t.nch = nmean;
    for (int i = 0; i < nmean; i++) t.mean[i] = (float)mean[i], t.std[i] = (float)stdv[i];
    /* in the dtype it divides in (f32): a positive double can be 0 or denormal there, and 1/std inf */
    for (int i = 0; i < nmean; i++)
      if (!(t.std[i] >= FLT_MIN) || !isfinite(1.0f / t.std[i]))
        return perr(c, item, "%s (normalize): std[%d] is %g, which is %g in f32, where inputs are normalized "
                    "(below the smallest normal f32, %g: the inputs would be inf or NaN)", what, i, stdv[i],
                    (double)t.std[i], (double)FLT_MIN);
  }
  /* the layout the samples have at this point of the list */
  if (def->kind == TS_TF_HWC_TO_CHW)
    *chw = 1;
  else
    t.chw = *chw;
  *out = t;
  return TS_OK;
}

static int parse_transforms(const pctx *c, const ts__cfg_key *k, const yaml_node_t *n,
                            ts_cfg_transforms *out) {
  char d[96];
  memset(out, 0, sizeof *out);
  if (is_null(n)) return TS_OK;
  if (n->type == YAML_SCALAR_NODE) {
    if ((k->flags & CF_AUTO) && !strcasecmp(sval(n), "auto")) {
      out->n = -1;
      return TS_OK;
    }
    return perr(c, n, "%s: expected a list of transforms%s, got %s", k->path,
                k->flags & CF_AUTO ? " or auto" : "", describe(n, d, sizeof d));
  }
  if (n->type != YAML_SEQUENCE_NODE)
    return perr(c, n, "%s: expected a list of transforms%s, got %s", k->path,
                k->flags & CF_AUTO ? " or auto" : "", describe(n, d, sizeof d));
  int chw = 0, i = 0;
  for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
       it++, i++) {
    if (i == TS_CFG_MAX_TRANSFORMS)
      return perr(c, n, "%s: at most %d transforms allowed", k->path, TS_CFG_MAX_TRANSFORMS);
    char w[128];
    snprintf(w, sizeof w, "%s[%d]", k->path, i);
    int rc = parse_tf(c, node_at(c, *it), w, &out->v[i], &chw);
    if (rc) return rc;
  }
  out->n = i;
  return TS_OK;
}

/* ------------------------------------------------------------------ strategies
 * Parsing parallel.strategies / parallel.stages; the list functions are in config_lists.c. */
static int parse_strategies(const pctx *c, const ts__cfg_key *k, const yaml_node_t *n,
                            ts_cfg_strategies *out) {
  const int stages = k->type == CT_STAGES;
  char d[96];
  out->n = 0;
  if (is_null(n)) return TS_OK;
  if (n->type != YAML_MAPPING_NODE)
    return perr(c, n, "%s: expected a mapping of operator name to strategy, got %s", k->path,
                describe(n, d, sizeof d));
  for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
    const yaml_node_t *kn = node_at(c, p->key), *vn = node_at(c, p->value);
    if (kn->type != YAML_SCALAR_NODE || is_null(kn) || !*sval(kn))
      return perr(c, kn, "%s: operator names must be strings, got %s", k->path, describe(kn, d, sizeof d));
    const char *op = sval(kn);
    if (strlen(op) >= sizeof out->v[0].op)
      return perr(c, kn, "%s: operator name '%.40s...' is too long", k->path, op);
    for (int i = 0; i < out->n; i++)
      if (!strcmp(out->v[i].op, op)) return perr(c, kn, "%s: duplicate operator '%s'", k->path, op);
    if (vn->type != YAML_SCALAR_NODE || is_null(vn))
      return perr(c, vn, stages ? "%s.%s: expected a stage number, got %s"
                                : "%s.%s: expected a strategy such as \"((2,1),(1,4))\", got %s",
                  k->path, op, describe(vn, d, sizeof d));
    if (stages) {
      char *end = NULL;
      long v = strtol(sval(vn), &end, 10);
      if (end == sval(vn) || *end || v < 0 || v > 4095)
        return perr(c, vn, "%s.%s: expected a stage number 0..4095, got '%s'", k->path, op, sval(vn));
    }
    ts_op_strategy st;
    if (!stages && ts_op_strategy_parse(sval(vn), &st))
      return perr(c, vn, "%s.%s: %s", k->path, op, ts_last_error());
    if (strlen(sval(vn)) >= sizeof out->v[0].text)
      return perr(c, vn, "%s.%s: strategy text too long", k->path, op);
    int rc = ts_cfg_strategies_add(out, op, sval(vn));
    if (rc) return rc == TS_ENOMEM ? ts_error_set(TS_ENOMEM, "%s: %s: out of memory", c->label, k->path) : rc;
  }
  return TS_OK;
}

/* A list of numbers of any length (a scalar is a list of one) into a malloc'd array of `size`-byte
 * elements (*v; the caller owns it, also on error), each parsed within the key's range: integers
 * (int elements) or, with `real`, numbers (float elements). */
static int node_num_list(const pctx *c, const yaml_node_t *n, const ts__cfg_key *k, int real, size_t size, int *count,
                         void **v) {
  char d[96];
  *count = 0;
  *v = NULL;
  if (is_null(n)) return TS_OK;
  int cnt = 1;
  if (n->type == YAML_SEQUENCE_NODE) cnt = (int)(n->data.sequence.items.top - n->data.sequence.items.start);
  else if (n->type != YAML_SCALAR_NODE)
    return perr(c, n, "%s: expected a list of %s, got %s", k->path, real ? "numbers" : "integers",
                describe(n, d, sizeof d));
  if (cnt < k->minn) return perr(c, n, "%s: expected at least %d values, got %d", k->path, k->minn, cnt);
  if (cnt > 0 && !(*v = malloc(size * (size_t)cnt))) return ts_error_set(TS_ENOMEM, "%s: %s: out of memory", c->label, k->path);
  for (int i = 0; i < cnt; i++) {
    const yaml_node_t *it = n->type == YAML_SEQUENCE_NODE ? node_at(c, n->data.sequence.items.start[i]) : n;
    char w[160];
    snprintf(w, sizeof w, "%s[%d]", k->path, i);
    int rc;
    if (real) {
      double x;
      if ((rc = node_f64(c, it, w, k->lo, k->hi, k->flags, &x))) return rc;
      ((float *)*v)[i] = (float)x;
    } else {
      int64_t x;
      if ((rc = node_i64(c, it, w, k->lo, k->hi, k->flags, &x))) return rc;
      ((int *)*v)[i] = (int)x;
    }
    *count = i + 1;
  }
  return TS_OK;
}

static int node_int_ilist(const pctx *c, const yaml_node_t *n, const ts__cfg_key *k, ts_cfg_ilist *out) {
  void *v;
  int rc = node_num_list(c, n, k, 0, sizeof(int), &out->n, &v);
  out->v = v;
  return rc;
}

static int node_flist(const pctx *c, const yaml_node_t *n, const ts__cfg_key *k, ts_cfg_flist *out) {
  void *v;
  int rc = node_num_list(c, n, k, 1, sizeof(float), &out->n, &v);
  out->v = v;
  return rc;
}

/* A list of non-empty strings of any length into *out (malloc'd; the caller owns it, also on error). */
static int node_slist(const pctx *c, const yaml_node_t *n, const ts__cfg_key *k, ts_cfg_slist *out) {
  char d[96];
  out->n = 0;
  out->v = NULL;
  if (is_null(n)) return TS_OK;
  if (n->type != YAML_SEQUENCE_NODE)
    return perr(c, n, "%s: expected a list of strings, got %s", k->path, describe(n, d, sizeof d));
  int cnt = (int)(n->data.sequence.items.top - n->data.sequence.items.start);
  if (cnt > 0 && !(out->v = calloc((size_t)cnt, sizeof *out->v)))
    return ts_error_set(TS_ENOMEM, "%s: %s: out of memory", c->label, k->path);
  for (int i = 0; i < cnt; i++) {
    const yaml_node_t *e = node_at(c, n->data.sequence.items.start[i]);
    if (e->type != YAML_SCALAR_NODE || is_null(e) || !*sval(e))
      return perr(c, e, "%s[%d]: expected a non-empty string, got %s", k->path, i, describe(e, d, sizeof d));
    if (strlen(sval(e)) != e->data.scalar.length)
      return perr(c, e, "%s[%d]: contains a NUL byte", k->path, i);
    if (!(out->v[i] = strdup(sval(e)))) return ts_error_set(TS_ENOMEM, "%s: %s: out of memory", c->label, k->path);
    out->n = i + 1;
  }
  return TS_OK;
}

/* optimizer.param_groups: a mapping of name patterns to {lr_scale: X, weight_decay: Y} (either may
 * be left out: 1, and the optimizer's) into *out (malloc'd; the caller owns it, also on error). */
static int node_pgroups(const pctx *c, const yaml_node_t *n, const ts__cfg_key *k, ts_cfg_pgroups *out) {
  char d[96];
  out->n = 0;
  out->v = NULL;
  if (is_null(n)) return TS_OK;
  if (n->type != YAML_MAPPING_NODE)
    return perr(c, n, "%s: expected a mapping of parameter names or '*' patterns to {lr_scale: X, weight_decay: Y}, "
                "got %s", k->path, describe(n, d, sizeof d));
  int cnt = (int)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
  if (cnt > 0 && !(out->v = calloc((size_t)cnt, sizeof *out->v)))
    return ts_error_set(TS_ENOMEM, "%s: %s: out of memory", c->label, k->path);
  for (int i = 0; i < cnt; i++) {
    const yaml_node_t *kn = node_at(c, n->data.mapping.pairs.start[i].key);
    const yaml_node_t *vn = node_at(c, n->data.mapping.pairs.start[i].value);
    if (kn->type != YAML_SCALAR_NODE || is_null(kn) || !*sval(kn) || strlen(sval(kn)) != kn->data.scalar.length)
      return perr(c, kn, "%s: expected a parameter name or '*' pattern, got %s", k->path, describe(kn, d, sizeof d));
    const char *pat = sval(kn);
    for (int j = 0; j < out->n; j++)
      if (!strcmp(out->v[j].pattern, pat)) return perr(c, kn, "%s: '%s' appears twice", k->path, pat);
    if (vn->type != YAML_MAPPING_NODE)
      return perr(c, vn, "%s.'%s': expected {lr_scale: X, weight_decay: Y}, got %s", k->path, pat,
                  describe(vn, d, sizeof d));
    ts_cfg_pgroup g = {NULL, 1.0, -1.0};
    for (yaml_node_pair_t *q = vn->data.mapping.pairs.start; q < vn->data.mapping.pairs.top; q++) {
      const yaml_node_t *fk = node_at(c, q->key), *fv = node_at(c, q->value);
      const char *f = fk->type == YAML_SCALAR_NODE ? sval(fk) : "";
      char w[240];
      snprintf(w, sizeof w, "%s.'%.160s'.%s", k->path, pat, f);
      int rc;
      if (!strcmp(f, "lr_scale")) rc = node_f64(c, fv, w, 0, 1e6, 0, &g.lr_scale);
      else if (!strcmp(f, "weight_decay")) rc = node_f64(c, fv, w, 0, 1e6, 0, &g.weight_decay);
      else rc = perr(c, fk, "%s.'%s': unknown field %s (expected lr_scale, weight_decay)", k->path, pat,
                     describe(fk, d, sizeof d));
      if (rc) return rc;
    }
    if (!(g.pattern = strdup(pat))) return ts_error_set(TS_ENOMEM, "%s: %s: out of memory", c->label, k->path);
    out->v[out->n++] = g;
  }
  return TS_OK;
}

/* ------------------------------------------------------------------ string lists */
static int parse_strs(const pctx *c, const ts__cfg_key *k, const yaml_node_t *n, ts_cfg_strs *out) {
  char d[96];
  out->n = 0;
  if (is_null(n)) return TS_OK;
  if (n->type != YAML_SEQUENCE_NODE)
    return perr(c, n, "%s: expected a list of strings, got %s", k->path, describe(n, d, sizeof d));
  for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
    const yaml_node_t *e = node_at(c, *it);
    if (e->type != YAML_SCALAR_NODE || is_null(e) || !*sval(e))
      return perr(c, e, "%s[%d]: expected a non-empty string, got %s", k->path, out->n, describe(e, d, sizeof d));
    if (out->n == k->maxn) return perr(c, e, "%s: at most %d entries", k->path, k->maxn);
    if (strlen(sval(e)) != e->data.scalar.length || e->data.scalar.length >= sizeof out->v[0])
      return perr(c, e, "%s[%d]: too long or contains a NUL byte (at most %zu bytes)", k->path, out->n,
                  sizeof out->v[0] - 1);
    snprintf(out->v[out->n++], sizeof out->v[0], "%s", sval(e));
  }
  return TS_OK;
}

/* ------------------------------------------------------------------ applying nodes */
static void ilist_free(ts_cfg_ilist *l) { free(l->v); }
static void flist_free(ts_cfg_flist *l) { free(l->v); }

static int apply_key(const pctx *c, const ts__cfg_key *k, const yaml_node_t *n, ts_config *cfg) {
  char *p = (char *)cfg + k->off;
  char d[96];
  int rc = TS_OK;
  switch (k->type) {
    case CT_INT: {
      int64_t v;
      if (!(rc = node_i64(c, n, k->path, k->lo, k->hi, k->flags, &v))) *(int *)p = (int)v;
      break;
    }
    case CT_I64: {
      int64_t v;
      if (!(rc = node_i64(c, n, k->path, k->lo, k->hi, k->flags, &v))) memcpy(p, &v, sizeof v);
      break;
    }
    case CT_U64: {
      uint64_t v;
      if (!plain_scalar(n) || str_u64(sval(n), &v))
        return perr(c, n, "%s: expected a non-negative integer, got %s", k->path,
                    describe(n, d, sizeof d));
      memcpy(p, &v, sizeof v);
      break;
    }
    case CT_FLOAT: {
      double v;
      if (!(rc = node_f64(c, n, k->path, k->lo, k->hi, k->flags, &v))) memcpy(p, &v, sizeof v);
      break;
    }
    case CT_BOOL: {
      int v = 0;
      if (!(rc = node_bool(c, n, k->path, &v))) *(int *)p = v;
      break;
    }
    case CT_STR: {
      if (is_null(n)) {
        memset(p, 0, k->size);
        break;
      }
      if (n->type != YAML_SCALAR_NODE)
        return perr(c, n, "%s: expected a string, got %s", k->path, describe(n, d, sizeof d));
      size_t len = n->data.scalar.length;
      if (strlen(sval(n)) != len) return perr(c, n, "%s: the string contains a NUL byte", k->path);
      if (len >= k->size)
        return perr(c, n, "%s: too long (%zu bytes, at most %zu)", k->path, len, k->size - 1);
      memset(p, 0, k->size);
      memcpy(p, sval(n), len);
      break;
    }
    case CT_ENUM: {
      int v;
      if (!(rc = node_enum(c, n, k->path, k->names, &v))) *(int *)p = v;
      break;
    }
    case CT_INTS: {
      ts_cfg_ints v;
      memset(&v, 0, sizeof v);
      if (!(rc = node_int_list(c, n, k->path, k->lo, k->hi, k->flags, k->minn, k->maxn, v.v, &v.n)))
        memcpy(p, &v, sizeof v);
      break;
    }
    case CT_FLOATS: {
      ts_cfg_floats v;
      memset(&v, 0, sizeof v);
      if (!(rc = node_f64_list(c, n, k->path, k->lo, k->hi, k->flags, k->minn, k->maxn, v.v,
                               &v.n)))
        memcpy(p, &v, sizeof v);
      break;
    }
    case CT_TFS: {
      ts_cfg_transforms *v = malloc(sizeof *v);
      if (!v) return ts_error_set(TS_ENOMEM, "%s: out of memory", c->label);
      if (!(rc = parse_transforms(c, k, n, v))) memcpy(p, v, sizeof *v);
      free(v);
      break;
    }
    case CT_STAGES:
    case CT_STRATS: { /* the new list replaces (and frees) the old one */
      ts_cfg_strategies v = {0, 0, NULL};
      if (!(rc = parse_strategies(c, k, n, &v))) {
        ts_cfg_strategies_free((ts_cfg_strategies *)p);
        memcpy(p, &v, sizeof v);
      } else {
        ts_cfg_strategies_free(&v);
      }
      break;
    }
    /* a list or mapping value: parsed whole, then replacing the old one (freed), else freed itself */
#define REPLACE(T, parse, release)                                                                                     \
  {                                                                                                                    \
    T v = {0, NULL};                                                                                                   \
    if (!(rc = parse(c, n, k, &v))) {                                                                                  \
      release((T *)p);                                                                                                 \
      memcpy(p, &v, sizeof v);                                                                                         \
    } else {                                                                                                           \
      release(&v);                                                                                                     \
    }                                                                                                                  \
    break;                                                                                                             \
  }
    case CT_ILIST: REPLACE(ts_cfg_ilist, node_int_ilist, ilist_free)
    case CT_FLIST: REPLACE(ts_cfg_flist, node_flist, flist_free)
    case CT_SLIST: REPLACE(ts_cfg_slist, node_slist, ts__cfg_slist_free)
    case CT_PGROUPS: REPLACE(ts_cfg_pgroups, node_pgroups, ts__cfg_pgroups_free)
#undef REPLACE
    case CT_STRS: {
      ts_cfg_strs *v = calloc(1, sizeof *v); /* zeroed: configs compare with memcmp */
      if (!v) return ts_error_set(TS_ENOMEM, "%s: out of memory", c->label);
      if (!(rc = parse_strs(c, k, n, v))) memcpy(p, v, sizeof *v);
      free(v);
      break;
    }
  }
  if (!rc) cfg->given[k - ts__cfg_keys] = 1;
  return rc;
}

static int apply_mapping(const pctx *c, const char *prefix, const yaml_node_t *n, ts_config *cfg) {
  char d[96];
  if (is_null(n)) return TS_OK;
  if (n->type != YAML_MAPPING_NODE) {
    if (*prefix)
      return perr(c, n, "%s: expected a mapping of keys (a section), got %s", prefix,
                  describe(n, d, sizeof d));
    return perr(c, n, "expected a mapping of sections (model:, data:, train:, ...), got %s",
                describe(n, d, sizeof d));
  }
  for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
    const yaml_node_t *k = node_at(c, p->key), *v = node_at(c, p->value);
    if (k->type != YAML_SCALAR_NODE || is_null(k))
      return perr(c, k, "%s%skeys must be names, got %s", prefix, *prefix ? ": " : "",
                  describe(k, d, sizeof d));
    const char *name = sval(k);
    char full[256];
    snprintf(full, sizeof full, "%s%s%s", prefix, *prefix ? "." : "", name);
    for (yaml_node_pair_t *q = n->data.mapping.pairs.start; q < p; q++) {
      const yaml_node_t *kq = node_at(c, q->key);
      if (kq->type == YAML_SCALAR_NODE && !strcmp(sval(kq), name))
        return perr(c, k, "duplicate key '%s' (first at line %zu)", full,
                    kq->start_mark.line + 1);
    }
    const ts__cfg_key *key = find_key(full);
    int rc;
    if (key && c->seen) { /* nested, dotted or mixed spellings of one key */
      int ki = (int)(key - ts__cfg_keys);
      if (c->seen[ki])
        return perr(c, k, "duplicate key '%s' (first at line %d)", full, c->seen[ki]);
      c->seen[ki] = (int)k->start_mark.line + 1;
    }
    if (key)
      rc = apply_key(c, key, v, cfg);
    else if (is_section(full))
      rc = apply_mapping(c, full, v, cfg);
    else {
      char sug[600];
      suggest_key(full, sug, sizeof sug);
      rc = perr(c, k, "unknown key '%s'%s", full, sug);
    }
    if (rc) return rc;
  }
  return TS_OK;
}

/* ------------------------------------------------------------------ YAML documents */
static int yaml_fail(const char *label, const yaml_parser_t *y, int marks) {
  if (y->error == YAML_MEMORY_ERROR) return ts_error_set(TS_ENOMEM, "%s: out of memory", label);
  char ctx[200] = "";
  if (y->context)
    snprintf(ctx, sizeof ctx, " (%s at line %zu, column %zu)", y->context,
             y->context_mark.line + 1, y->context_mark.column + 1);
  if (marks)
    return ts_error_set(TS_ECONFIG, "%s:%zu:%zu: malformed YAML: %s%s", label,
                        y->problem_mark.line + 1, y->problem_mark.column + 1,
                        y->problem ? y->problem : "parse error", ctx);
  return ts_error_set(TS_ECONFIG, "%s: malformed value: %s", label,
                      y->problem ? y->problem : "parse error");
}

/* Limits on a config (a file or a --set value): libyaml's parser and loader take time
 * quadratic in the nesting depth, so a hostile or broken document is refused before it is
 * loaded. No real config comes near either. */
#define CFG_MAX_DEPTH 64
#define CFG_MAX_BYTES ((size_t)1 << 20)

/* Walks the document's events counting the nesting of mappings and sequences, and stops at the
 * first one deeper than CFG_MAX_DEPTH (so the cost is bounded by the limit, not by the input). */
static int check_depth(const char *text, size_t len, const char *label, int marks) {
  yaml_parser_t y;
  if (!yaml_parser_initialize(&y)) return ts_error_set(TS_ENOMEM, "%s: out of memory", label);
  yaml_parser_set_input_string(&y, (const unsigned char *)text, len);
  int depth = 0, rc = TS_OK;
  for (;;) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&y, &ev)) {
      rc = yaml_fail(label, &y, marks);
      break;
    }
    yaml_event_type_t t = ev.type;
    size_t line = ev.start_mark.line + 1;
    yaml_event_delete(&ev);
    if (t == YAML_STREAM_END_EVENT) break;
    if (t == YAML_MAPPING_START_EVENT || t == YAML_SEQUENCE_START_EVENT) {
      if (++depth > CFG_MAX_DEPTH) {
        if (marks)
          rc = ts_error_set(TS_ECONFIG, "%s:%zu: nested more than %d levels deep (a config has a few)",
                            label, line, CFG_MAX_DEPTH);
        else
          rc = ts_error_set(TS_ECONFIG, "%s: nested more than %d levels deep", label, CFG_MAX_DEPTH);
        break;
      }
    } else if (t == YAML_MAPPING_END_EVENT || t == YAML_SEQUENCE_END_EVENT) {
      depth--;
    }
  }
  yaml_parser_delete(&y);
  return rc;
}

/* Parses one YAML document from text; *root is NULL for an empty document. On success the
 * caller deletes doc. */
static int parse_doc(const char *text, size_t len, const char *label, int marks,
                     yaml_document_t *doc, yaml_node_t **root) {
  if (len > CFG_MAX_BYTES)
    return ts_error_set(TS_ECONFIG, "%s: %zu bytes, more than a config may have (%zu, 1 MiB)", label,
                        len, CFG_MAX_BYTES);
  int rc0 = check_depth(text, len, label, marks);
  if (rc0) return rc0;
  yaml_parser_t y;
  if (!yaml_parser_initialize(&y)) return ts_error_set(TS_ENOMEM, "%s: out of memory", label);
  yaml_parser_set_input_string(&y, (const unsigned char *)text, len);
  if (!yaml_parser_load(&y, doc)) {
    int rc = yaml_fail(label, &y, marks);
    yaml_parser_delete(&y);
    return rc;
  }
  *root = yaml_document_get_root_node(doc);
  if (*root) {
    yaml_document_t d2;
    if (!yaml_parser_load(&y, &d2)) {
      int rc = yaml_fail(label, &y, marks);
      yaml_parser_delete(&y);
      yaml_document_delete(doc);
      return rc;
    }
    yaml_node_t *r2 = yaml_document_get_root_node(&d2);
    if (r2) {
      size_t line = r2->start_mark.line + 1;
      yaml_document_delete(&d2);
      yaml_document_delete(doc);
      yaml_parser_delete(&y);
      return ts_error_set(TS_ECONFIG, "%s:%zu: a second YAML document; a config is one document",
                          label, line);
    }
    yaml_document_delete(&d2);
  }
  yaml_parser_delete(&y);
  return TS_OK;
}

/* s with control characters written as \n, \t, \xNN (so a message stays one line), cut to
 * fit cap with "..." */
static void escape_text(const char *s, char *out, size_t cap) {
  size_t n = 0;
  out[0] = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    char e[8];
    if (*p == '\n') snprintf(e, sizeof e, "\\n");
    else if (*p == '\t') snprintf(e, sizeof e, "\\t");
    else if (*p == '\r') snprintf(e, sizeof e, "\\r");
    else if (*p < 0x20 || *p == 0x7f) snprintf(e, sizeof e, "\\x%02x", *p);
    else e[0] = (char)*p, e[1] = 0;
    size_t el = strlen(e);
    if (n + el + 4 > cap) {
      if (cap >= 4) snprintf(out + (n + 3 < cap ? n : cap - 4), 4, "...");
      return;
    }
    memcpy(out + n, e, el + 1);
    n += el;
  }
}

/* Sets key (a key or a section) from YAML value text; label names the source in messages. */
/* Offset of the first byte of s that does not belong to a well-formed UTF-8 sequence (RFC 3629:
 * no overlong forms, no surrogates, nothing above U+10FFFF), or (size_t)-1 when s is valid. YAML
 * is UTF-8, so a string that is not could be set but never dumped and loaded again. */
static size_t utf8_invalid_at(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (p[i]) {
    unsigned c = p[i];
    int n = c < 0x80 ? 0 : c >= 0xc2 && c <= 0xdf ? 1 : c >= 0xe0 && c <= 0xef ? 2 : c >= 0xf0 && c <= 0xf4 ? 3 : -1;
    if (n < 0) return i;
    unsigned lo = 0x80, hi = 0xbf; /* the range of the second byte */
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
    for (int j = 1; j <= n; j++) {
      unsigned d = p[i + j];
      if (d < (j == 1 ? lo : 0x80) || d > (j == 1 ? hi : 0xbf)) return i;
    }
    i += 1 + (size_t)n;
  }
  return (size_t)-1;
}

static int set_text(ts_config *cfg, const char *key, const char *value, const char *label) {
  const ts__cfg_key *k = find_key(key);
  pctx c = {label, 0, NULL, NULL};
  if (!k && (!*key || !is_section(key))) {
    char sug[600];
    suggest_key(key, sug, sizeof sug);
    return ts_error_set(TS_ECONFIG, "%s: unknown key '%s'%s", label, key, sug);
  }
  if (k && k->type == CT_STR && value[0] != '"' && value[0] != '\'') {
    /* strings (paths) are taken verbatim unless quoted; a control character in one is a slip of
     * the shell (a pasted newline), not a name anybody means */
    for (const unsigned char *q = (const unsigned char *)value; *q; q++)
      if (*q < 0x20 || *q == 0x7f)
        return ts_error_set(TS_ECONFIG, "%s: %s: the value contains a control character (byte 0x%02x "
                            "at offset %zu)", label, key, *q, (size_t)(q - (const unsigned char *)value));
    size_t bad = utf8_invalid_at(value);
    if (bad != (size_t)-1)
      return ts_error_set(TS_ECONFIG, "%s: %s: the value is not valid UTF-8 (byte 0x%02x at offset %zu)",
                          label, key, (unsigned char)value[bad], bad);
    size_t len = strlen(value);
    if (len >= k->size)
      return ts_error_set(TS_ECONFIG, "%s: %s: too long (%zu bytes, at most %zu)", label, key, len,
                          k->size - 1);
    char *p = (char *)cfg + k->off;
    memset(p, 0, k->size);
    memcpy(p, value, len);
    cfg->given[k - ts__cfg_keys] = 1;
    return TS_OK;
  }
  yaml_document_t doc;
  yaml_node_t *root;
  int rc = parse_doc(value, strlen(value), label, 0, &doc, &root);
  if (rc) return rc;
  c.doc = &doc;
  yaml_node_t null_node; /* an empty value: a plain empty scalar */
  memset(&null_node, 0, sizeof null_node);
  if (!root) {
    null_node.type = YAML_SCALAR_NODE;
    null_node.data.scalar.value = (yaml_char_t *)"";
    null_node.data.scalar.length = 0;
    null_node.data.scalar.style = YAML_PLAIN_SCALAR_STYLE;
    root = &null_node;
  }
  rc = k ? apply_key(&c, k, root, cfg) : apply_mapping(&c, key, root, cfg);
  yaml_document_delete(&doc);
  return rc;
}

/* ------------------------------------------------------------------ public API */
void ts_config_defaults(ts_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  for (int i = 0; i < ts__cfg_nkeys; i++) {
    const ts__cfg_key *k = &ts__cfg_keys[i];
    char label[300];
    snprintf(label, sizeof label, "default of %s", k->path);
    (void)set_text(cfg, k->path, k->def, label); /* cannot fail: the defaults are tested */
  }
  memset(cfg->given, 0, sizeof cfg->given); /* defaults are not given */
}

int ts_config_given(const ts_config *cfg, const char *key) {
  const ts__cfg_key *k = cfg && key ? find_key(key) : NULL;
  return k ? cfg->given[k - ts__cfg_keys] != 0 : 0;
}

static int apply_overrides(ts_config *cfg, const char *const *ov, int n) {
  for (int i = 0; i < n; i++) {
    int rc = ts_config_override(cfg, ov[i]);
    if (rc) return rc;
  }
  return TS_OK;
}

static int load_text(const char *text, size_t len, const char *label, const char *const *ov,
                     int n, ts_config *cfg) {
  ts_config_defaults(cfg);
  snprintf(cfg->source, sizeof cfg->source, "%s", label);
  yaml_document_t doc;
  yaml_node_t *root;
  int rc = parse_doc(text, len, label, 1, &doc, &root);
  if (rc) return rc;
  pctx c = {label, 1, &doc, calloc((size_t)ts__cfg_nkeys, sizeof(int))};
  if (!c.seen) rc = ts_error_set(TS_ENOMEM, "%s: out of memory", label);
  else if (root) rc = apply_mapping(&c, "", root, cfg);
  free(c.seen);
  yaml_document_delete(&doc);
  if (rc) return rc;
  if ((rc = apply_overrides(cfg, ov, n))) return rc;
  return ts_config_validate(cfg);
}

int ts_config_load_string(const char *yaml, const char *label, const char *const *overrides,
                          int n, ts_config *cfg) {
  if (!cfg || !yaml) return ts_error_set(TS_EINVAL, "ts_config_load_string: NULL argument");
  return load_text(yaml, strlen(yaml), label ? label : "<string>", overrides, n, cfg);
}

int ts_config_load(const char *path, const char *const *overrides, int n, ts_config *cfg) {
  if (!cfg) return ts_error_set(TS_EINVAL, "ts_config_load: NULL config");
  if (!path) {
    ts_config_defaults(cfg);
    int rc = apply_overrides(cfg, overrides, n);
    return rc ? rc : ts_config_validate(cfg);
  }
  char *text = NULL;
  size_t len = 0;
  int fd;
  uint64_t size = 0;
  int rc = ts__file_open_read(path, "cannot read the config", &fd, &size);
  if (!rc) {
    close(fd);
    if (size > CFG_MAX_BYTES) { /* not read at all */
      ts_config_defaults(cfg);
      return ts_error_set(TS_ECONFIG, "%s: %llu bytes, more than a config may have (%zu, 1 MiB)",
                          path, (unsigned long long)size, CFG_MAX_BYTES);
    }
    rc = ts__file_read_all(path, "cannot read the config", &text, &len);
  }
  if (rc) { /* a file that cannot be read is a configuration error (exit 2 in the CLI) */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", ts_last_error());
    ts_config_defaults(cfg);
    return ts_error_set(rc == TS_ENOMEM ? TS_ENOMEM : TS_ECONFIG, "%s", msg);
  }
  rc = load_text(text, len, path, overrides, n, cfg);
  free(text);
  return rc;
}

int ts_config_set(ts_config *cfg, const char *key, const char *value) {
  if (!cfg || !key || !value) return ts_error_set(TS_EINVAL, "ts_config_set: NULL argument");
  char label[400], esc[300];
  escape_text(value, esc, sizeof esc);
  snprintf(label, sizeof label, "--set %.80s=%s", key, esc);
  return set_text(cfg, key, value, label);
}

int ts_config_override(ts_config *cfg, const char *assignment) {
  if (!cfg || !assignment) return ts_error_set(TS_EINVAL, "ts_config_override: NULL argument");
  const char *eq = strchr(assignment, '=');
  if (!eq || eq == assignment)
    return ts_error_set(TS_ECONFIG, "--set %s: expected key.path=value", assignment);
  char key[256];
  size_t kl = (size_t)(eq - assignment);
  if (kl >= sizeof key) return ts_error_set(TS_ECONFIG, "--set %.60s...: key too long", assignment);
  memcpy(key, assignment, kl);
  key[kl] = 0;
  /* trim spaces around the key ("a.b = 1" from a shell is unusual but harmless) */
  while (kl && key[kl - 1] == ' ') key[--kl] = 0;
  const char *kp = key;
  while (*kp == ' ') kp++;
  char label[400];
  memcpy(label, "--set ", 6);
  escape_text(assignment, label + 6, sizeof label - 6);
  return set_text(cfg, kp, eq + 1, label);
}

int ts_config_get(const ts_config *cfg, const char *key, char *buf, size_t cap) {
  if (!cfg || !key || !buf || !cap) return ts_error_set(TS_EINVAL, "ts_config_get: NULL argument");
  const ts__cfg_key *k = find_key(key);
  if (!k) {
    char sug[600];
    suggest_key(key, sug, sizeof sug);
    buf[0] = 0;
    return ts_error_set(TS_ECONFIG, "unknown key '%s'%s", key, sug);
  }
  ts__sb b = {0};
  ts__cfg_fmt_value(&b, k, cfg);
  if (b.failed) {
    free(b.s);
    return ts_error_set(TS_ENOMEM, "ts_config_get: out of memory");
  }
  int rc = TS_OK;
  if (b.n >= cap) {
    rc = ts_error_set(TS_ERANGE, "ts_config_get: %s needs %zu bytes, buffer has %zu", key, b.n + 1,
                      cap);
    memcpy(buf, b.s, cap - 1);
    buf[cap - 1] = 0;
  } else {
    memcpy(buf, b.s, b.n + 1);
  }
  free(b.s);
  return rc;
}

int ts_config_key_count(void) { return ts__cfg_nkeys; }

int ts_config_key_info(int i, ts_config_key *out) {
  if (i < 0 || i >= ts__cfg_nkeys || !out)
    return ts_error_set(TS_ERANGE, "ts_config_key_info: index %d out of range (%d keys)", i,
                        ts__cfg_nkeys);
  static const char *const tn[] = {"int",  "int",  "int",      "float",     "bool",
                                   "string", "enum", "int list", "float list", "transforms", "strategies", "string list", "stages", "int list",
                                   "float list", "string list", "parameter groups"};
  static _Thread_local char values[512];
  const ts__cfg_key *k = &ts__cfg_keys[i];
  out->path = k->path;
  out->type = tn[k->type];
  out->def = k->def;
  out->values = NULL;
  if (k->names) {
    size_t len = 0;
    values[0] = 0;
    for (int j = 0; k->names[j]; j++) ts__app(values, sizeof values, &len, "%s%s", j ? "|" : "", k->names[j]);
    out->values = values;
  }
  out->doc = k->doc;
  out->hashed = (k->flags & CF_HASH) != 0;
  return TS_OK;
}

