/* Configuration: values as YAML text. A key's value in flow style (ts_config_get, the dump, the
 * hash and the diff all format through ts__cfg_fmt_value, so the dump reloads to the same config),
 * the whole config as block YAML, the hash of the training-relevant keys and the diff of two
 * configs' keys. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_impl.h"
#include "../base/text.h"

/* ------------------------------------------------------------------ formatting */
/* The shortest "%.*g" of v that reads back as v (as a float where single), written so YAML 1.1 readers
 * (PyYAML) see a float too: "1e-05" -> "1.0e-05". */
static void fmt_real(ts__sb *b, double v, int single) {
  char buf[40];
  for (int prec = 1; prec <= (single ? 9 : 17); prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    double r = strtod(buf, NULL);
    if (single ? (float)r == (float)v : r == v) break;
  }
  char *e = strchr(buf, 'e');
  if (e && !strchr(buf, '.')) {
    char tail[40];
    snprintf(tail, sizeof tail, "%s", e);
    snprintf(e, sizeof buf - (size_t)(e - buf), ".0%s", tail);
  }
  ts__sb_puts(b, buf);
}
static void fmt_double(ts__sb *b, double v) { fmt_real(b, v, 0); }
static void fmt_float(ts__sb *b, float v) { fmt_real(b, (double)v, 1); }

static void fmt_string(ts__sb *b, const char *s) {
  ts__sb_puts(b, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      ts__sb_printf(b, "\\%c", *p);
    else if (*p == '\n')
      ts__sb_puts(b, "\\n");
    else if (*p == '\t')
      ts__sb_puts(b, "\\t");
    else if (*p < 0x20 || *p == 0x7f)
      ts__sb_printf(b, "\\x%02x", *p);
    else
      ts__sb_put(b, (const char *)p, 1);
  }
  ts__sb_puts(b, "\"");
}

static void fmt_tf(ts__sb *b, const ts_transform *t) {
  const tfdef *d = ts__cfg_tf_by_kind(t->kind);
  ts__sb_printf(b, "{name: %s", d ? d->name : "?");
  switch (t->kind) {
    case TS_TF_RANDOM_CROP:
    case TS_TF_CENTER_CROP:
    case TS_TF_RESIZE:
      if (t->h == t->w)
        ts__sb_printf(b, ", size: %d", t->h);
      else
        ts__sb_printf(b, ", size: [%d, %d]", t->h, t->w);
      if (t->kind == TS_TF_RANDOM_CROP) ts__sb_printf(b, ", padding: %d", t->pad);
      break;
    case TS_TF_HFLIP:
    case TS_TF_VFLIP:
      ts__sb_puts(b, ", p: ");
      fmt_float(b, t->p);
      break;
    case TS_TF_TO_FLOAT:
      ts__sb_puts(b, ", scale: ");
      fmt_float(b, t->scale);
      ts__sb_puts(b, ", shift: ");
      fmt_float(b, t->shift);
      break;
    case TS_TF_NORMALIZE:
      ts__sb_puts(b, ", mean: [");
      for (int i = 0; i < t->nch && i < 8; i++) {
        if (i) ts__sb_puts(b, ", ");
        fmt_float(b, t->mean[i]);
      }
      ts__sb_puts(b, "], std: [");
      for (int i = 0; i < t->nch && i < 8; i++) {
        if (i) ts__sb_puts(b, ", ");
        fmt_float(b, t->std[i]);
      }
      ts__sb_puts(b, "]");
      break;
    case TS_TF_CAST: ts__sb_printf(b, ", dtype: %s", ts_dtype_name(t->dtype)); break;
    case TS_TF_RANDOM_ERASING:
      ts__sb_puts(b, ", p: ");
      fmt_float(b, t->p);
      ts__sb_puts(b, ", scale: [");
      fmt_float(b, t->erase_scale[0]);
      ts__sb_puts(b, ", ");
      fmt_float(b, t->erase_scale[1]);
      ts__sb_puts(b, "], ratio: [");
      fmt_float(b, t->erase_ratio[0]);
      ts__sb_puts(b, ", ");
      fmt_float(b, t->erase_ratio[1]);
      ts__sb_puts(b, "]");
      break;
    default: break;
  }
  ts__sb_puts(b, "}");
}

/* A key's value in flow style. */
/* One element of a list-valued key (list = the list's array, i = the element). */
typedef void (*fmt_elem_fn)(ts__sb *b, const void *list, int i);
static void fmt_int_at(ts__sb *b, const void *list, int i) { ts__sb_printf(b, "%d", ((const int *)list)[i]); }
static void fmt_double_at(ts__sb *b, const void *list, int i) { fmt_double(b, ((const double *)list)[i]); }
static void fmt_float_at(ts__sb *b, const void *list, int i) { fmt_float(b, ((const float *)list)[i]); }
static void fmt_sptr_at(ts__sb *b, const void *list, int i) { fmt_string(b, ((char *const *)list)[i]); }
static void fmt_str_at(ts__sb *b, const void *list, int i) { fmt_string(b, ((const char (*)[160])list)[i]); }
static void fmt_tf_at(ts__sb *b, const void *list, int i) { fmt_tf(b, &((const ts_transform *)list)[i]); }
static void fmt_pair_at(ts__sb *b, const void *list, int i) {
  const ts_cfg_strategy *e = &((const ts_cfg_strategy *)list)[i];
  fmt_string(b, e->op);
  ts__sb_puts(b, ": ");
  fmt_string(b, e->text);
}
static void fmt_pgroup_at(ts__sb *b, const void *list, int i) {
  const ts_cfg_pgroup *e = &((const ts_cfg_pgroup *)list)[i];
  fmt_string(b, e->pattern);
  ts__sb_puts(b, ": {lr_scale: ");
  fmt_double(b, e->lr_scale);
  if (e->weight_decay >= 0) {
    ts__sb_puts(b, ", weight_decay: ");
    fmt_double(b, e->weight_decay);
  }
  ts__sb_puts(b, "}");
}
/* A YAML flow sequence ("[]") or mapping ("{}") of n elements, ", " between them. */
static void fmt_list(ts__sb *b, const char *brackets, const void *list, int n, fmt_elem_fn elem) {
  ts__sb_put(b, brackets, 1);
  for (int i = 0; i < n; i++) {
    if (i) ts__sb_puts(b, ", ");
    elem(b, list, i);
  }
  ts__sb_put(b, brackets + 1, 1);
}

void ts__cfg_fmt_value(ts__sb *b, const ts__cfg_key *k, const ts_config *cfg) {
  const char *p = (const char *)cfg + k->off;
  switch (k->type) {
    case CT_INT: ts__sb_printf(b, "%d", *(const int *)p); break;
    case CT_I64: {
      int64_t v;
      memcpy(&v, p, sizeof v);
      ts__sb_printf(b, "%lld", (long long)v);
      break;
    }
    case CT_U64: {
      uint64_t v;
      memcpy(&v, p, sizeof v);
      ts__sb_printf(b, "%llu", (unsigned long long)v);
      break;
    }
    case CT_FLOAT: {
      double v;
      memcpy(&v, p, sizeof v);
      fmt_double(b, v);
      break;
    }
    case CT_BOOL: ts__sb_puts(b, *(const int *)p ? "true" : "false"); break;
    case CT_STR: fmt_string(b, p); break;
    case CT_ENUM: ts__sb_puts(b, ts__cfg_enum_name(k->names, *(const int *)p)); break;
    case CT_INTS: fmt_list(b, "[]", ((const ts_cfg_ints *)p)->v, ((const ts_cfg_ints *)p)->n, fmt_int_at); break;
    case CT_FLOATS: fmt_list(b, "[]", ((const ts_cfg_floats *)p)->v, ((const ts_cfg_floats *)p)->n, fmt_double_at); break;
    case CT_ILIST: fmt_list(b, "[]", ((const ts_cfg_ilist *)p)->v, ((const ts_cfg_ilist *)p)->n, fmt_int_at); break;
    case CT_FLIST: fmt_list(b, "[]", ((const ts_cfg_flist *)p)->v, ((const ts_cfg_flist *)p)->n, fmt_float_at); break;
    case CT_SLIST: fmt_list(b, "[]", ((const ts_cfg_slist *)p)->v, ((const ts_cfg_slist *)p)->n, fmt_sptr_at); break;
    case CT_PGROUPS:
      fmt_list(b, "{}", ((const ts_cfg_pgroups *)p)->v, ((const ts_cfg_pgroups *)p)->n, fmt_pgroup_at);
      break;
    case CT_STAGES:
    case CT_STRATS: fmt_list(b, "{}", ((const ts_cfg_strategies *)p)->v, ((const ts_cfg_strategies *)p)->n, fmt_pair_at); break;
    case CT_STRS: fmt_list(b, "[]", ((const ts_cfg_strs *)p)->v, ((const ts_cfg_strs *)p)->n, fmt_str_at); break;
    case CT_TFS:
      if (((const ts_cfg_transforms *)p)->n < 0) ts__sb_puts(b, "auto");
      else fmt_list(b, "[]", ((const ts_cfg_transforms *)p)->v, ((const ts_cfg_transforms *)p)->n, fmt_tf_at);
      break;
  }
}

static void dump(ts__sb *b, const ts_config *cfg) {
  const char *prev = "";
  for (int i = 0; i < ts__cfg_nkeys; i++) {
    const ts__cfg_key *k = &ts__cfg_keys[i];
    /* components of this path and of the previous one */
    const char *comp[8], *pc[8];
    size_t cl[8], pcl[8];
    int nc = 0, np = 0;
    for (const char *s = k->path; nc < 8;) {
      comp[nc] = s;
      cl[nc] = strcspn(s, ".");
      s += cl[nc++];
      if (!*s) break;
      s++;
    }
    for (const char *s = prev; *s && np < 8;) {
      pc[np] = s;
      pcl[np] = strcspn(s, ".");
      s += pcl[np++];
      if (!*s) break;
      s++;
    }
    int common = 0; /* shared leading sections */
    while (common < nc - 1 && common < np - 1 && cl[common] == pcl[common] &&
           !strncmp(comp[common], pc[common], cl[common]))
      common++;
    for (int l = common; l < nc - 1; l++)
      ts__sb_printf(b, "%*s%.*s:\n", 2 * l, "", (int)cl[l], comp[l]);
    int ind = 2 * (nc - 1);
    ts__sb_printf(b, "%*s%.*s:", ind, "", (int)cl[nc - 1], comp[nc - 1]);
    const ts_cfg_transforms *tf = (const ts_cfg_transforms *)((const char *)cfg + k->off);
    if (k->type == CT_TFS && tf->n > 0) {
      ts__sb_puts(b, "\n");
      for (int j = 0; j < tf->n; j++) {
        ts__sb_printf(b, "%*s- ", ind + 2, "");
        fmt_tf(b, &tf->v[j]);
        ts__sb_puts(b, "\n");
      }
    } else {
      ts__sb_puts(b, " ");
      ts__cfg_fmt_value(b, k, cfg);
      ts__sb_puts(b, "\n");
    }
    prev = k->path;
  }
}

int ts_config_dump_string(const ts_config *cfg, char **out) {
  if (!cfg || !out) return ts_error_set(TS_EINVAL, "ts_config_dump_string: NULL argument");
  ts__sb b = {0};
  dump(&b, cfg);
  if (b.failed || !b.s) {
    free(b.s);
    *out = NULL;
    return ts_error_set(TS_ENOMEM, "ts_config_dump_string: out of memory");
  }
  *out = b.s;
  return TS_OK;
}

int ts_config_dump_yaml(const ts_config *cfg, FILE *f) {
  if (!f) return ts_error_set(TS_EINVAL, "ts_config_dump_yaml: NULL file");
  char *s;
  int rc = ts_config_dump_string(cfg, &s);
  if (rc) return rc;
  size_t n = strlen(s);
  rc = fwrite(s, 1, n, f) == n ? TS_OK : ts_error_set(TS_EIO, "writing the config: %s",
                                                      strerror(errno));
  free(s);
  return rc;
}

uint64_t ts_config_hash(const ts_config *cfg) {
  uint64_t h = ts__fnv1a_str(TS__FNV1A_BASIS_V0, "tessera-config-hash-v1\n");
  ts_config *def = malloc(sizeof *def);
  if (!def) return 0;
  ts_config_defaults(def);
  (void)ts_config_validate(def); /* resolved like a loaded config */
  for (int i = 0; i < ts__cfg_nkeys; i++) {
    const ts__cfg_key *k = &ts__cfg_keys[i];
    if (!(k->flags & CF_HASH)) continue;
    ts__sb a = {0}, d = {0};
    ts__cfg_fmt_value(&a, k, cfg);
    ts__cfg_fmt_value(&d, k, def);
    if (a.s && d.s && strcmp(a.s, d.s)) {
      h = ts__fnv1a_str(ts__fnv1a_str(ts__fnv1a_str(h, k->path), "="), a.s);
      h = ts__fnv1a_str(h, "\n");
    }
    free(a.s);
    free(d.s);
  }
  ts_config_free(def);
  free(def);
  return h;
}

/* The training-relevant keys (those of the hash) whose values differ between two configs' YAML
 * (a checkpoint's and this run's): "key: A in the checkpoint, B now; ..." in out, at most `max`
 * of them, then "... and K more". Returns how many differ (0 when either text does not load). */
int ts__config_diff(const char *ckpt_yaml, const char *now_yaml, int max, char *out, size_t cap) {
  if (cap) out[0] = 0;
  if (!ckpt_yaml || !now_yaml) return 0;
  ts_config *a = calloc(2, sizeof *a);
  if (!a) return 0;
  int ndiff = 0;
  if (!ts_config_load_string(ckpt_yaml, "checkpoint", NULL, 0, &a[0]) &&
      !ts_config_load_string(now_yaml, "this run", NULL, 0, &a[1])) {
    size_t len = 0;
    for (int i = 0; i < ts__cfg_nkeys; i++) {
      const ts__cfg_key *k = &ts__cfg_keys[i];
      if (!(k->flags & CF_HASH)) continue;
      ts__sb x = {0}, y = {0};
      ts__cfg_fmt_value(&x, k, &a[0]);
      ts__cfg_fmt_value(&y, k, &a[1]);
      if (x.s && y.s && strcmp(x.s, y.s)) {
        if (ndiff < max)
          ts__app(out, cap, &len, "%s%s: %.80s in the checkpoint, %.80s now", ndiff ? "; " : "", k->path, x.s, y.s);
        ndiff++;
      }
      free(x.s);
      free(y.s);
    }
    if (ndiff > max) ts__app(out, cap, &len, "; ... and %d more", ndiff - max);
  }
  ts_config_free(&a[0]);
  ts_config_free(&a[1]);
  free(a);
  return ndiff;
}

