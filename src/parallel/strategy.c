/* Operator strategies as text, their validation, strategy sets and strategy files (see
 * include/tessera/strategy.h and docs/layout.md, "Strategies and strategy files"). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../base/text.h"
#include "tessera/strategy.h"
#include "../base/afile.h"
#include "../base/rfile.h"
#include "parallel_impl.h"

/* ---- text ---- */

static void skip_ws(const char *t, size_t *p) {
  while (t[*p] == ' ' || t[*p] == '\t' || t[*p] == '\n' || t[*p] == '\r') (*p)++;
}

static int parse_err(const char *text, size_t p, const char *what) {
  char got[16];
  if (!text[p])
    snprintf(got, sizeof got, "the end");
  else
    snprintf(got, sizeof got, "'%c'", text[p]);
  return ts_error_set(TS_EINVAL, "strategy \"%s\": column %zu: expected %s, got %s", text, p + 1,
                      what, got);
}

static int parse_into(const char *text, ts_op_strategy *out);

int ts_op_strategy_parse(const char *text, ts_op_strategy *out) {
  if (!text || !out) return ts_error_set(TS_EINVAL, "ts_op_strategy_parse: NULL argument");
  int rc = parse_into(text, out);
  if (rc) memset(out, 0, sizeof *out);
  return rc;
}

static int parse_into(const char *text, ts_op_strategy *out) {
  memset(out, 0, sizeof *out);
  size_t p = 0;
  skip_ws(text, &p);
  if (text[p] != '(') return parse_err(text, p, "'(' opening the strategy");
  p++;
  for (;;) {
    skip_ws(text, &p);
    if (text[p] == ')') {
      p++;
      break;
    }
    if (text[p] != '(') return parse_err(text, p, "'(' opening an input's cuts or ')'");
    if (out->ninputs == TS_STRATEGY_MAX_INPUTS)
      return ts_error_set(TS_EINVAL, "strategy \"%s\": column %zu: more than %d inputs", text,
                          p + 1, TS_STRATEGY_MAX_INPUTS);
    int in = out->ninputs++;
    p++;
    for (;;) {
      skip_ws(text, &p);
      if (text[p] == ')') {
        p++;
        break;
      }
      if (text[p] < '0' || text[p] > '9') return parse_err(text, p, "a cut (a number) or ')'");
      if (out->ndim[in] == TS_MAX_DIMS)
        return ts_error_set(TS_EINVAL, "strategy \"%s\": column %zu: input %d has more than %d dims",
                            text, p + 1, in, TS_MAX_DIMS);
      size_t start = p;
      int64_t v = 0;
      while (text[p] >= '0' && text[p] <= '9') {
        if (p - start >= 18)
          return ts_error_set(TS_EINVAL, "strategy \"%s\": column %zu: number too long", text,
                              start + 1);
        v = v * 10 + (text[p] - '0');
        p++;
      }
      out->cuts[in][out->ndim[in]++] = v;
      skip_ws(text, &p);
      if (text[p] == ',') {
        p++;
        continue;
      }
      if (text[p] != ')') return parse_err(text, p, "',' or ')'");
    }
    skip_ws(text, &p);
    if (text[p] == ',') {
      p++;
      continue;
    }
    if (text[p] != ')') return parse_err(text, p, "',' or ')' after an input");
  }
  skip_ws(text, &p);
  if (text[p]) return parse_err(text, p, "the end of the strategy");
  return TS_OK;
}

char *ts_op_strategy_str(const ts_op_strategy *st, char *buf, size_t cap) {
  if (!buf || !cap) return buf;
  buf[0] = 0;
  if (!st) {
    snprintf(buf, cap, "(null strategy)");
    return buf;
  }
  size_t n = 0;
  int ni = st->ninputs < 0 ? 0 : st->ninputs > TS_STRATEGY_MAX_INPUTS ? TS_STRATEGY_MAX_INPUTS : st->ninputs;
  ts__app(buf, cap, &n, "(");
  for (int i = 0; i < ni; i++) {
    int nd = st->ndim[i] < 0 ? 0 : st->ndim[i] > TS_MAX_DIMS ? TS_MAX_DIMS : st->ndim[i];
    ts__app(buf, cap, &n, i ? ",(" : "(");
    for (int d = 0; d < nd; d++) ts__app(buf, cap, &n, d ? ",%lld" : "%lld", (long long)st->cuts[i][d]);
    ts__app(buf, cap, &n, nd == 1 ? ",)" : ")");
  }
  ts__app(buf, cap, &n, ni == 1 ? ",)" : ")");
  return buf;
}

int ts_op_strategy_equal(const ts_op_strategy *a, const ts_op_strategy *b) {
  if (!a || !b || a->ninputs != b->ninputs) return 0;
  if (a->ninputs < 0 || a->ninputs > TS_STRATEGY_MAX_INPUTS) return 0;
  for (int i = 0; i < a->ninputs; i++) {
    if (a->ndim[i] != b->ndim[i] || a->ndim[i] < 0 || a->ndim[i] > TS_MAX_DIMS) return 0;
    for (int d = 0; d < a->ndim[i]; d++)
      if (a->cuts[i][d] != b->cuts[i][d]) return 0;
  }
  return 1;
}

/* ---- validation ---- */

static char *cuts_str(const ts_op_strategy *st, int in, char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = 0;
  ts__app(buf, cap, &n, "(");
  for (int d = 0; d < st->ndim[in]; d++) ts__app(buf, cap, &n, d ? ",%lld" : "%lld", (long long)st->cuts[in][d]);
  ts__app(buf, cap, &n, ")");
  return buf;
}

int ts_op_strategy_validate(const char *op, const ts_op_strategy *st, int ndevices) {
  if (!op) op = "?";
  if (!st) return ts_error_set(TS_EINVAL, "op %s: NULL strategy", op);
  if (ndevices < 1) return ts_error_set(TS_EINVAL, "op %s: device count %d must be >= 1", op, ndevices);
  if (st->ninputs < 0 || st->ninputs > TS_STRATEGY_MAX_INPUTS)
    return ts_error_set(TS_EINVAL, "op %s: strategy has %d inputs (0..%d allowed)", op, st->ninputs,
                        TS_STRATEGY_MAX_INPUTS);
  for (int i = 0; i < st->ninputs; i++) {
    if (st->ndim[i] < 0 || st->ndim[i] > TS_MAX_DIMS)
      return ts_error_set(TS_EINVAL, "op %s: input %d: strategy has %d dims (0..%d allowed)", op, i,
                          st->ndim[i], TS_MAX_DIMS);
    int64_t prod = 1;
    for (int d = 0; d < st->ndim[i]; d++) {
      int64_t c = st->cuts[i][d];
      if (c < 1)
        return ts_error_set(TS_EINVAL, "op %s: input %d dim %d: cut %lld must be >= 1", op, i, d,
                            (long long)c);
      if (c > ndevices || prod > ndevices) prod = (int64_t)ndevices + 1; /* cannot divide */
      else prod *= c;
    }
    if (prod > ndevices || ndevices % prod != 0) {
      char b[128];
      long double p = 1;
      for (int d = 0; d < st->ndim[i]; d++) p *= (long double)st->cuts[i][d];
      return ts_error_set(TS_EINVAL,
                          "op %s: input %d: the product of its cuts %s is %.0Lf, which does not divide "
                          "the device count %d",
                          op, i, cuts_str(st, i, b, sizeof b), p, ndevices);
    }
  }
  return TS_OK;
}

int ts_op_strategy_check_shapes(const char *op, const ts_op_strategy *st, int nshapes,
                                const ts_shape *shapes) {
  if (!op) op = "?";
  if (!st || (nshapes > 0 && !shapes)) return ts_error_set(TS_EINVAL, "op %s: NULL argument", op);
  if (nshapes != st->ninputs)
    return ts_error_set(TS_ESHAPE, "op %s: strategy describes %d inputs, the op has %d", op,
                        st->ninputs, nshapes);
  for (int i = 0; i < nshapes; i++) {
    if (shapes[i].ndim != st->ndim[i]) {
      char b[128];
      return ts_error_set(TS_ESHAPE, "op %s: input %d: strategy %s has %d dims, the input has %d", op,
                          i, cuts_str(st, i, b, sizeof b), st->ndim[i], shapes[i].ndim);
    }
    for (int d = 0; d < st->ndim[i]; d++) {
      int64_t c = st->cuts[i][d];
      if (c < 1)
        return ts_error_set(TS_EINVAL, "op %s: input %d dim %d: cut %lld must be >= 1", op, i, d,
                            (long long)c);
      if (shapes[i].dims[d] % c != 0)
        return ts_error_set(TS_ESHAPE, "op %s: input %d dim %d: size %lld is not divisible by its cut %lld",
                            op, i, d, (long long)shapes[i].dims[d], (long long)c);
    }
  }
  return TS_OK;
}

/* ---- sets ---- */

typedef struct {
  char *name;
  uint64_t hash; /* name_hash of name */
  int is_rule;
  int literal; /* characters other than '*' */
  ts_op_strategy st;
} st_entry;

typedef struct {
  char *name;
  ts_layout l;
  ts_shape shape;
} lay_entry;

struct ts_strategy_set {
  int device_num, stage;
  int n, cap;
  st_entry *e;
  int nl, capl;
  lay_entry *le;
  int *hslot;    /* open addressing over e's names (index, -1 empty), hcap a power of two >= 2 n */
  size_t hcap;
  int nrules;    /* entries whose name has a '*' */
};

static char *dupstr(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

int ts_strategy_set_create(int device_num, int stage, ts_strategy_set **out) {
  if (!out) return ts_error_set(TS_EINVAL, "ts_strategy_set_create: NULL argument");
  *out = NULL;
  if (device_num < 1) return ts_error_set(TS_EINVAL, "strategy set: device_num %d must be >= 1", device_num);
  if (stage < 0) return ts_error_set(TS_EINVAL, "strategy set: stage %d must be >= 0", stage);
  ts_strategy_set *s = calloc(1, sizeof *s);
  if (!s) return ts_error_set(TS_ENOMEM, "strategy set: out of memory");
  s->device_num = device_num;
  s->stage = stage;
  *out = s;
  return TS_OK;
}

void ts_strategy_set_free(ts_strategy_set *s) {
  if (!s) return;
  for (int i = 0; i < s->n; i++) free(s->e[i].name);
  for (int i = 0; i < s->nl; i++) free(s->le[i].name);
  free(s->e);
  free(s->le);
  free(s->hslot);
  free(s);
}

int ts_strategy_set_device_num(const ts_strategy_set *s) { return s ? s->device_num : 0; }
int ts_strategy_set_stage(const ts_strategy_set *s) { return s ? s->stage : 0; }

static uint64_t name_hash(const char *op) {
  return ts__fnv1a_str(TS__FNV1A_BASIS, op);
}

/* (re)builds the name index for every entry, growing it to keep it at most half full; TS_ENOMEM */
static int index_rebuild(ts_strategy_set *s, size_t want) {
  size_t cap = 64;
  while (cap < 2 * want) cap *= 2;
  if (cap < s->hcap) cap = s->hcap; /* never shrinks: a rebuild in place cannot fail */
  if (cap != s->hcap) {
    int *h = malloc(sizeof *h * cap);
    if (!h) return ts_error_set(TS_ENOMEM, "strategy set: out of memory");
    free(s->hslot);
    s->hslot = h, s->hcap = cap;
  }
  for (size_t i = 0; i < s->hcap; i++) s->hslot[i] = -1;
  for (int i = 0; i < s->n; i++) {
    size_t h = (size_t)s->e[i].hash & (s->hcap - 1);
    while (s->hslot[h] >= 0) h = (h + 1) & (s->hcap - 1);
    s->hslot[h] = i;
  }
  return TS_OK;
}

/* the entry named op, whose name_hash is hash (a rule's pattern compared as text), -1 none */
static int find_hashed(const ts_strategy_set *s, const char *op, uint64_t hash) {
  if (!s->hslot) return -1; /* no entry yet */
  for (size_t h = (size_t)hash & (s->hcap - 1); s->hslot[h] >= 0; h = (h + 1) & (s->hcap - 1)) {
    const st_entry *e = &s->e[s->hslot[h]];
    if (e->hash == hash && strcmp(e->name, op) == 0) return s->hslot[h];
  }
  return -1;
}
static int find_exact(const ts_strategy_set *s, const char *op) { return find_hashed(s, op, name_hash(op)); }

int ts_strategy_set_put(ts_strategy_set *s, const char *op, const ts_op_strategy *st) {
  if (!s || !op || !st) return ts_error_set(TS_EINVAL, "ts_strategy_set_put: NULL argument");
  if (!op[0]) return ts_error_set(TS_EINVAL, "ts_strategy_set_put: empty op name");
  int rc = ts_op_strategy_validate(op, st, s->device_num);
  if (rc) return rc;
  const uint64_t hash = name_hash(op);
  int i = find_hashed(s, op, hash);
  if (i >= 0) {
    s->e[i].st = *st;
    return TS_OK;
  }
  if (s->n == s->cap) {
    int nc = s->cap ? 2 * s->cap : 16;
    st_entry *ne = realloc(s->e, (size_t)nc * sizeof *ne);
    if (!ne) return ts_error_set(TS_ENOMEM, "op %s: out of memory", op);
    s->e = ne;
    s->cap = nc;
  }
  if (2 * (size_t)(s->n + 1) > s->hcap && (rc = index_rebuild(s, (size_t)s->n + 1))) return rc;
  st_entry *e = &s->e[s->n];
  if (!(e->name = dupstr(op))) return ts_error_set(TS_ENOMEM, "op %s: out of memory", op);
  e->hash = hash;
  e->is_rule = strchr(op, '*') != NULL;
  e->literal = 0;
  for (const char *c = op; *c; c++) e->literal += *c != '*';
  e->st = *st;
  s->nrules += e->is_rule;
  size_t h = (size_t)hash & (s->hcap - 1);
  while (s->hslot[h] >= 0) h = (h + 1) & (s->hcap - 1);
  s->hslot[h] = s->n++;
  return TS_OK;
}

int ts_strategy_set_put_text(ts_strategy_set *s, const char *op, const char *text) {
  ts_op_strategy st;
  int rc = ts_op_strategy_parse(text, &st);
  if (rc) return ts_error_wrap(rc, "op %s", op ? op : "?");
  return ts_strategy_set_put(s, op, &st);
}

int ts_strategy_set_get(const ts_strategy_set *s, const char *op, ts_op_strategy *out) {
  if (!s || !op || !out) return ts_error_set(TS_EINVAL, "ts_strategy_set_get: NULL argument");
  int best = find_exact(s, op); /* an entry of that name wins over every rule */
  if (best >= 0 && s->e[best].is_rule) best = -1;
  for (int i = 0; best < 0 && s->nrules && i < s->n; i++) { /* else the rule with the most literal characters */
    const st_entry *e = &s->e[i];
    if (e->is_rule && (best < 0 || e->literal > s->e[best].literal) && ts__name_match(e->name, op)) best = i;
  }
  if (best < 0) return ts_error_set(TS_ENOTFOUND, "op %s: no strategy (no entry or rule matches)", op);
  *out = s->e[best].st;
  return TS_OK;
}

int ts_strategy_set_remove(ts_strategy_set *s, const char *op) {
  if (!s || !op) return ts_error_set(TS_EINVAL, "ts_strategy_set_remove: NULL argument");
  int i = find_exact(s, op);
  if (i < 0) return ts_error_set(TS_ENOTFOUND, "op %s: no strategy to remove", op);
  s->nrules -= s->e[i].is_rule;
  free(s->e[i].name);
  memmove(&s->e[i], &s->e[i + 1], (size_t)(s->n - i - 1) * sizeof *s->e);
  s->n--;
  return index_rebuild(s, (size_t)s->n); /* the indices after i moved */
}

int ts_strategy_set_count(const ts_strategy_set *s) { return s ? s->n : 0; }
const char *ts_strategy_set_name(const ts_strategy_set *s, int i) {
  return s && i >= 0 && i < s->n ? s->e[i].name : NULL;
}
const ts_op_strategy *ts_strategy_set_at(const ts_strategy_set *s, int i) {
  return s && i >= 0 && i < s->n ? &s->e[i].st : NULL;
}

static int find_layout(const ts_strategy_set *s, const char *p) {
  for (int i = 0; i < s->nl; i++)
    if (strcmp(s->le[i].name, p) == 0) return i;
  return -1;
}

int ts_strategy_set_put_layout(ts_strategy_set *s, const char *param, const ts_layout *l,
                               const ts_shape *shape) {
  if (!s || !param || !l || !shape)
    return ts_error_set(TS_EINVAL, "ts_strategy_set_put_layout: NULL argument");
  int rc = ts_layout_check_shape(l, shape);
  if (rc) return ts_error_wrap(rc, "parameter %s", param);
  if (ts_layout_ndevices(l) != s->device_num)
    return ts_error_set(TS_EINVAL, "parameter %s: layout is for %d devices, the set for %d", param,
                        ts_layout_ndevices(l), s->device_num);
  int i = find_layout(s, param);
  if (i < 0) {
    if (s->nl == s->capl) {
      int nc = s->capl ? 2 * s->capl : 16;
      lay_entry *ne = realloc(s->le, (size_t)nc * sizeof *ne);
      if (!ne) return ts_error_set(TS_ENOMEM, "parameter %s: out of memory", param);
      s->le = ne;
      s->capl = nc;
    }
    if (!(s->le[s->nl].name = dupstr(param)))
      return ts_error_set(TS_ENOMEM, "parameter %s: out of memory", param);
    i = s->nl++;
  }
  s->le[i].l = *l;
  s->le[i].shape = *shape;
  return TS_OK;
}

int ts_strategy_set_get_layout(const ts_strategy_set *s, const char *param, ts_layout *l,
                               ts_shape *shape) {
  if (!s || !param) return ts_error_set(TS_EINVAL, "ts_strategy_set_get_layout: NULL argument");
  int i = find_layout(s, param);
  if (i < 0) return ts_error_set(TS_ENOTFOUND, "parameter %s: no layout recorded", param);
  if (l) *l = s->le[i].l;
  if (shape) *shape = s->le[i].shape;
  return TS_OK;
}

int ts_strategy_set_layout_count(const ts_strategy_set *s) { return s ? s->nl : 0; }

int ts_strategy_set_layout_at(const ts_strategy_set *s, int i, const char **param, ts_layout *l,
                              ts_shape *shape) {
  if (!s || i < 0 || i >= s->nl)
    return ts_error_set(TS_EINVAL, "ts_strategy_set_layout_at: no layout entry %d", i);
  if (param) *param = s->le[i].name;
  if (l) *l = s->le[i].l;
  if (shape) *shape = s->le[i].shape;
  return TS_OK;
}

int ts_strategy_set_equal(const ts_strategy_set *a, const ts_strategy_set *b) {
  if (!a || !b) return 0;
  if (a->device_num != b->device_num || a->stage != b->stage || a->n != b->n || a->nl != b->nl) return 0;
  for (int i = 0; i < a->n; i++) {
    int j = find_exact(b, a->e[i].name);
    if (j < 0 || !ts_op_strategy_equal(&a->e[i].st, &b->e[j].st)) return 0;
  }
  for (int i = 0; i < a->nl; i++) {
    int j = find_layout(b, a->le[i].name);
    if (j < 0 || !ts_layout_equal(&a->le[i].l, &b->le[j].l) ||
        !ts_shape_equal(&a->le[i].shape, &b->le[j].shape))
      return 0;
  }
  return 1;
}

int ts_strategy_check_shared(const ts_strategy_set *s, int n, const ts_param_use *uses) {
  if (!s || (n > 0 && !uses)) return ts_error_set(TS_EINVAL, "ts_strategy_check_shared: NULL argument");
  for (int i = 0; i < n; i++) {
    if (!uses[i].op || !uses[i].param)
      return ts_error_set(TS_EINVAL, "ts_strategy_check_shared: use %d has a NULL name", i);
    ts_op_strategy a;
    if (ts_strategy_set_get(s, uses[i].op, &a))
      return ts_error_set(TS_ENOTFOUND, "parameter %s: op %s that uses it has no strategy",
                          uses[i].param, uses[i].op);
    if (uses[i].input < 0 || uses[i].input >= a.ninputs)
      return ts_error_set(TS_EINVAL, "parameter %s: op %s has no input %d (its strategy describes %d)",
                          uses[i].param, uses[i].op, uses[i].input, a.ninputs);
    for (int j = 0; j < i; j++) {
      if (strcmp(uses[j].param, uses[i].param) != 0) continue;
      ts_op_strategy b;
      (void)ts_strategy_set_get(s, uses[j].op, &b); /* found when use j was checked */
      int ia = uses[i].input, ib = uses[j].input;
      int same = a.ndim[ia] == b.ndim[ib];
      for (int d = 0; same && d < a.ndim[ia]; d++) same = a.cuts[ia][d] == b.cuts[ib][d];
      if (!same) {
        char sa[128], sb[128];
        return ts_error_set(TS_EINVAL,
                            "parameter %s is shared by ops %s (input %d, cuts %s) and %s (input %d, "
                            "cuts %s) with different strategies",
                            uses[i].param, uses[j].op, ib, cuts_str(&b, ib, sb, sizeof sb), uses[i].op,
                            ia, cuts_str(&a, ia, sa, sizeof sa));
      }
      break; /* equal to an earlier use, which was itself checked against the ones before it */
    }
  }
  return TS_OK;
}

/* ---- files: save ---- */

static cJSON *int_array(const int64_t *v, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < n; i++) {
    cJSON *x = cJSON_CreateNumber((double)v[i]);
    if (!x || !cJSON_AddItemToArray(a, x)) {
      cJSON_Delete(x);
      cJSON_Delete(a);
      return NULL;
    }
  }
  return a;
}

static char *build_json(const ts_strategy_set *s) {
  cJSON *root = cJSON_CreateObject(), *strat = NULL, *lays = NULL;
  int ok = root && cJSON_AddNumberToObject(root, "version", 1) &&
           cJSON_AddNumberToObject(root, "device_num", s->device_num) &&
           cJSON_AddNumberToObject(root, "stage", s->stage) &&
           (strat = cJSON_AddObjectToObject(root, "strategies")) &&
           (lays = cJSON_AddObjectToObject(root, "layouts"));
  for (int i = 0; ok && i < s->n; i++) {
    const ts_op_strategy *st = &s->e[i].st;
    cJSON *o = cJSON_AddObjectToObject(strat, s->e[i].name), *in = NULL;
    ok = o && (in = cJSON_AddArrayToObject(o, "inputs"));
    for (int k = 0; ok && k < st->ninputs; k++) {
      cJSON *a = int_array(st->cuts[k], st->ndim[k]);
      ok = a && cJSON_AddItemToArray(in, a);
      if (!ok) cJSON_Delete(a);
    }
  }
  for (int i = 0; ok && i < s->nl; i++) {
    const ts_layout *l = &s->le[i].l;
    int64_t dev[TS_LAYOUT_MAX_AXES], tm[TS_MAX_DIMS], part[TS_LAYOUT_MAX_AXES];
    int ms[TS_MAX_DIMS], np = 0;
    for (int a = 0; a < l->ndev; a++) dev[a] = l->dev[a];
    ok = ts_layout_tmap_to_mindspore(l->ndev, l->ndim, l->tmap, ms) == TS_OK;
    for (int d = 0; d < l->ndim; d++) tm[d] = ms[d];
    for (int a = l->ndev - 1; a >= 0; a--) /* right-counted, ascending */
      if (l->partial & (1u << a)) part[np++] = l->ndev - 1 - a;
    cJSON *o = ok ? cJSON_AddObjectToObject(lays, s->le[i].name) : NULL;
    cJSON *x[4] = {int_array(dev, l->ndev), int_array(tm, l->ndim), int_array(part, np),
                   int_array(s->le[i].shape.dims, s->le[i].shape.ndim)};
    static const char *const keys[4] = {"dev_matrix", "tensor_map", "partial", "shape"};
    for (int k = 0; k < 4; k++) {
      if (ok && o && x[k] && cJSON_AddItemToObject(o, keys[k], x[k])) continue;
      ok = 0;
      cJSON_Delete(x[k]);
    }
  }
  char *txt = ok ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  return txt;
}


int ts_strategy_set_save(const ts_strategy_set *s, const char *path) {
  if (!s || !path) return ts_error_set(TS_EINVAL, "ts_strategy_set_save: NULL argument");
  char *txt = build_json(s);
  if (!txt) return ts_error_set(TS_ENOMEM, "%s: out of memory building the strategy file", path);
  ts__afile *af = NULL;
  int rc = ts__afile_open(path, &af);
  if (!rc) {
    rc = ts__afile_write(af, txt, strlen(txt));
    if (!rc) rc = ts__afile_write(af, "\n", 1);
    if (rc) ts__afile_abort(af);
    else rc = ts__afile_commit(af);
  }
  free(txt);
  return rc;
}

/* ---- files: load ---- */

/* "-1", "1.5", "a string", "an array", ... for "got ..." in messages. */
static const char *describe(const cJSON *j, char *buf, size_t cap) {
  if (!j) snprintf(buf, cap, "nothing");
  else if (cJSON_IsNumber(j)) snprintf(buf, cap, "%.17g", j->valuedouble);
  else if (cJSON_IsString(j)) snprintf(buf, cap, "the string \"%.40s\"", j->valuestring);
  else if (cJSON_IsBool(j)) snprintf(buf, cap, "%s", cJSON_IsTrue(j) ? "true" : "false");
  else if (cJSON_IsNull(j)) snprintf(buf, cap, "null");
  else if (cJSON_IsArray(j)) snprintf(buf, cap, "an array");
  else if (cJSON_IsObject(j)) snprintf(buf, cap, "an object");
  else snprintf(buf, cap, "an invalid value");
  return buf;
}

/* Integer in [lo, hi] or an error "<file>: <key>: expected <what>, got ...". */
static int get_int(const char *file, const char *key, const cJSON *j, int64_t lo, int64_t hi,
                   const char *what, int64_t *out) {
  char g[96];
  /* in range before the cast: a double beyond int64 (1e300) does not convert */
  if (!cJSON_IsNumber(j) || !(j->valuedouble >= (double)lo && j->valuedouble <= (double)hi) ||
      j->valuedouble != (double)(int64_t)j->valuedouble)
    return ts_error_set(TS_EFORMAT, "%s: %s: expected %s, got %s", file, key, what, describe(j, g, sizeof g));
  *out = (int64_t)j->valuedouble;
  return TS_OK;
}

static int get_array(const char *file, const char *key, const cJSON *j, int maxn, int *n) {
  char g[96];
  if (!cJSON_IsArray(j))
    return ts_error_set(TS_EFORMAT, "%s: %s: expected an array, got %s", file, key, describe(j, g, sizeof g));
  *n = cJSON_GetArraySize(j);
  if (*n > maxn)
    return ts_error_set(TS_EFORMAT, "%s: %s: %d entries, at most %d allowed", file, key, *n, maxn);
  return TS_OK;
}

static int check_keys(const char *file, const char *where, const cJSON *obj,
                      const char *const *allowed) {
  for (const cJSON *c = obj->child; c; c = c->next) {
    int ok = 0;
    for (int k = 0; allowed[k] && !ok; k++) ok = strcmp(c->string, allowed[k]) == 0;
    if (!ok) return ts_error_set(TS_EFORMAT, "%s: %s%s%s: unknown key", file, where, where[0] ? "." : "", c->string);
  }
  return TS_OK;
}

static int load_ints(const char *file, const char *key, const cJSON *j, int maxn, int64_t lo,
                     int64_t hi, const char *what, int *n, int64_t *v) {
  int rc = get_array(file, key, j, maxn, n);
  if (rc) return rc;
  int i = 0;
  char k2[600];
  for (const cJSON *c = j->child; c; c = c->next, i++) {
    snprintf(k2, sizeof k2, "%s[%d]", key, i);
    if ((rc = get_int(file, k2, c, lo, hi, what, &v[i]))) return rc;
  }
  return TS_OK;
}

static int load_strategy(const char *file, ts_strategy_set *s, const cJSON *o) {
  char key[512], g[96];
  const char *op = o->string;
  if (!op[0]) return ts_error_set(TS_EFORMAT, "%s: strategies: empty op name", file);
  if (!cJSON_IsObject(o))
    return ts_error_set(TS_EFORMAT, "%s: strategies.%s: expected an object, got %s", file, op, describe(o, g, sizeof g));
  static const char *const keys[] = {"inputs", NULL};
  snprintf(key, sizeof key, "strategies.%s", op);
  int rc = check_keys(file, key, o, keys);
  if (rc) return rc;
  const cJSON *in = cJSON_GetObjectItemCaseSensitive(o, "inputs");
  if (!in) return ts_error_set(TS_EFORMAT, "%s: strategies.%s: missing key \"inputs\"", file, op);
  ts_op_strategy st;
  memset(&st, 0, sizeof st);
  snprintf(key, sizeof key, "strategies.%s.inputs", op);
  if ((rc = get_array(file, key, in, TS_STRATEGY_MAX_INPUTS, &st.ninputs))) return rc;
  int i = 0;
  for (const cJSON *a = in->child; a; a = a->next, i++) {
    snprintf(key, sizeof key, "strategies.%s.inputs[%d]", op, i);
    if ((rc = load_ints(file, key, a, TS_MAX_DIMS, 1, INT_MAX, "a positive integer", &st.ndim[i], st.cuts[i])))
      return rc;
  }
  rc = ts_strategy_set_put(s, op, &st);
  return rc ? ts_error_wrap(rc, "%s: strategies.%s", file, op) : TS_OK;
}

static int load_layout(const char *file, ts_strategy_set *s, const cJSON *o) {
  char key[512], g[96];
  const char *p = o->string;
  if (!p[0]) return ts_error_set(TS_EFORMAT, "%s: layouts: empty parameter name", file);
  if (!cJSON_IsObject(o))
    return ts_error_set(TS_EFORMAT, "%s: layouts.%s: expected an object, got %s", file, p, describe(o, g, sizeof g));
  static const char *const keys[] = {"dev_matrix", "tensor_map", "partial", "shape", NULL};
  snprintf(key, sizeof key, "layouts.%s", p);
  int rc = check_keys(file, key, o, keys);
  if (rc) return rc;
  for (int k = 0; keys[k]; k++)
    if (!cJSON_GetObjectItemCaseSensitive(o, keys[k]) && strcmp(keys[k], "partial") != 0)
      return ts_error_set(TS_EFORMAT, "%s: layouts.%s: missing key \"%s\"", file, p, keys[k]);
  int64_t dev[TS_LAYOUT_MAX_AXES], tm[TS_MAX_DIMS], part[TS_LAYOUT_MAX_AXES], shp[TS_MAX_DIMS];
  int ndev, ndim, np = 0, nshape;
  snprintf(key, sizeof key, "layouts.%s.dev_matrix", p);
  if ((rc = load_ints(file, key, cJSON_GetObjectItemCaseSensitive(o, "dev_matrix"), TS_LAYOUT_MAX_AXES, 1,
                      INT_MAX, "a positive integer", &ndev, dev)))
    return rc;
  if (ndev < 1) return ts_error_set(TS_EFORMAT, "%s: %s: expected at least one axis", file, key);
  snprintf(key, sizeof key, "layouts.%s.tensor_map", p);
  if ((rc = load_ints(file, key, cJSON_GetObjectItemCaseSensitive(o, "tensor_map"), TS_MAX_DIMS, -1,
                      ndev - 1, "-1 or a device axis counted from the right (0..ndev-1)", &ndim, tm)))
    return rc;
  const cJSON *jp = cJSON_GetObjectItemCaseSensitive(o, "partial");
  snprintf(key, sizeof key, "layouts.%s.partial", p);
  if (jp && (rc = load_ints(file, key, jp, TS_LAYOUT_MAX_AXES, 0, ndev - 1,
                            "a device axis counted from the right (0..ndev-1)", &np, part)))
    return rc;
  snprintf(key, sizeof key, "layouts.%s.shape", p);
  if ((rc = load_ints(file, key, cJSON_GetObjectItemCaseSensitive(o, "shape"), TS_MAX_DIMS, 0, INT64_MAX / 2,
                      "a non-negative integer", &nshape, shp)))
    return rc;
  if (nshape != ndim)
    return ts_error_set(TS_ESHAPE, "%s: layouts.%s: shape has %d dims, tensor_map %d", file, p, nshape, ndim);
  int idev[TS_LAYOUT_MAX_AXES], itm[TS_MAX_DIMS];
  unsigned partial = 0;
  for (int a = 0; a < ndev; a++) idev[a] = (int)dev[a];
  for (int d = 0; d < ndim; d++) itm[d] = (int)tm[d];
  for (int k = 0; k < np; k++) partial |= 1u << (ndev - 1 - (int)part[k]);
  if ((rc = ts_layout_tmap_from_mindspore(ndev, ndim, itm, itm)))
    return ts_error_wrap(rc, "%s: layouts.%s", file, p);
  ts_layout l;
  ts_shape shape = ts_shape_make(ndim, shp);
  rc = ts_layout_init(&l, ndev, idev, ndim, itm, partial);
  if (!rc) rc = ts_strategy_set_put_layout(s, p, &l, &shape);
  return rc ? ts_error_wrap(rc, "%s: layouts.%s", file, p) : TS_OK;
}

static int parse_doc(const char *file, const char *text, size_t len, int device_num,
                     ts_strategy_set **out) {
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (!root) {
    size_t off = end && end >= text ? (size_t)(end - text) : 0, line = 1, col = 1;
    for (size_t i = 0; i < off && i < len; i++) {
      if (text[i] == '\n') {
        line++;
        col = 1;
      } else
        col++;
    }
    size_t rest = off;
    while (rest < len && (text[rest] == ' ' || text[rest] == '\t' || text[rest] == '\n' || text[rest] == '\r'))
      rest++;
    return ts_error_set(TS_EFORMAT, "%s: malformed JSON near line %zu column %zu%s", file, line, col,
                        rest >= len ? " (the file ends too early)" : "");
  }
  int rc = TS_OK;
  ts_strategy_set *s = NULL;
  char g[96];
  {
    size_t off = end && end >= text ? (size_t)(end - text) : len;
    while (off < len && (text[off] == ' ' || text[off] == '\t' || text[off] == '\n' || text[off] == '\r')) off++;
    if (off < len) {
      rc = ts_error_set(TS_EFORMAT, "%s: unexpected text after the JSON object at byte %zu", file, off);
      cJSON_Delete(root);
      return rc;
    }
  }
  int64_t ver, dn, stage;
  static const char *const keys[] = {"version", "device_num", "stage", "strategies", "layouts", NULL};
  const cJSON *jst, *jl;
  if (!cJSON_IsObject(root)) {
    rc = ts_error_set(TS_EFORMAT, "%s: expected a JSON object at the top, got %s", file, describe(root, g, sizeof g));
    goto out;
  }
  if ((rc = check_keys(file, "", root, keys))) goto out;
  for (int k = 0; k < 4; k++)
    if (!cJSON_GetObjectItemCaseSensitive(root, keys[k])) {
      rc = ts_error_set(TS_EFORMAT, "%s: missing key \"%s\"", file, keys[k]);
      goto out;
    }
  if ((rc = get_int(file, "version", cJSON_GetObjectItemCaseSensitive(root, "version"), INT_MIN, INT_MAX,
                    "an integer", &ver)))
    goto out;
  if (ver != 1) {
    rc = ts_error_set(TS_EUNSUPPORTED, "%s: version %lld is not supported (this build reads version 1)", file,
                      (long long)ver);
    goto out;
  }
  if ((rc = get_int(file, "device_num", cJSON_GetObjectItemCaseSensitive(root, "device_num"), 1, INT_MAX,
                    "a positive integer", &dn)) ||
      (rc = get_int(file, "stage", cJSON_GetObjectItemCaseSensitive(root, "stage"), 0, INT_MAX,
                    "a non-negative integer", &stage)))
    goto out;
  if (device_num > 0 && dn != device_num) {
    rc = ts_error_set(TS_ECONFIG, "%s: device_num is %lld in the file, but the job has %d devices", file,
                      (long long)dn, device_num);
    goto out;
  }
  jst = cJSON_GetObjectItemCaseSensitive(root, "strategies");
  jl = cJSON_GetObjectItemCaseSensitive(root, "layouts");
  if (!cJSON_IsObject(jst)) {
    rc = ts_error_set(TS_EFORMAT, "%s: strategies: expected an object, got %s", file, describe(jst, g, sizeof g));
    goto out;
  }
  if (jl && !cJSON_IsObject(jl)) {
    rc = ts_error_set(TS_EFORMAT, "%s: layouts: expected an object, got %s", file, describe(jl, g, sizeof g));
    goto out;
  }
  if ((rc = ts_strategy_set_create((int)dn, (int)stage, &s))) goto out;
  for (const cJSON *o = jst->child; o && !rc; o = o->next) {
    if (find_exact(s, o->string) >= 0)
      rc = ts_error_set(TS_EFORMAT, "%s: strategies.%s: duplicate op", file, o->string);
    else
      rc = load_strategy(file, s, o);
  }
  for (const cJSON *o = jl ? jl->child : NULL; o && !rc; o = o->next) {
    if (find_layout(s, o->string) >= 0)
      rc = ts_error_set(TS_EFORMAT, "%s: layouts.%s: duplicate parameter", file, o->string);
    else
      rc = load_layout(file, s, o);
  }
out:
  cJSON_Delete(root);
  if (rc) ts_strategy_set_free(s);
  else *out = s;
  return rc;
}

int ts_strategy_set_load(const char *path, int device_num, ts_strategy_set **out) {
  if (!path || !out) return ts_error_set(TS_EINVAL, "ts_strategy_set_load: NULL argument");
  *out = NULL;
  char *buf = NULL;
  size_t n = 0;
  int rc = ts__file_read_all(path, "cannot open", &buf, &n);
  if (!rc) rc = parse_doc(path, buf, n, device_num, out);
  free(buf);
  return rc;
}
