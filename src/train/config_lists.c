/* Configuration: the lists a ts_config owns (include/tessera/config.h). parallel.strategies and
 * parallel.stages (ts_cfg_strategies), parallel.all_reduce_fusion_config (ts_cfg_ilist),
 * optimizer.schedule.values (ts_cfg_flist), optimizer.no_decay_params (ts_cfg_slist) and
 * optimizer.param_groups (ts_cfg_pgroups) have
 * no length limit, so they live in malloc'd arrays outside the struct: a config owns them,
 * ts_config_free releases them, ts_config_copy duplicates them (a plain struct copy is a view
 * that must not be freed or have a list key set). Parsing them from YAML stays in config.c. */
#include <stdlib.h>
#include <string.h>

#include "tessera/config.h"

int ts_cfg_strategies_add(ts_cfg_strategies *s, const char *op, const char *text) {
  if (!s || !op || !text) return ts_error_set(TS_EINVAL, "ts_cfg_strategies_add: NULL argument");
  if (strlen(op) >= sizeof s->v[0].op)
    return ts_error_set(TS_ECONFIG, "operator name '%.40s...' is too long (at most %zu bytes)", op, sizeof s->v[0].op - 1);
  if (strlen(text) >= sizeof s->v[0].text)
    return ts_error_set(TS_ECONFIG, "%s: strategy text '%.40s...' too long (at most %zu bytes)", op, text,
                        sizeof s->v[0].text - 1);
  if (s->n == s->cap) {
    int nc = s->cap ? 2 * s->cap : 16;
    ts_cfg_strategy *nv = realloc(s->v, sizeof *nv * (size_t)nc);
    if (!nv) return ts_error_set(TS_ENOMEM, "%s: out of memory", op);
    s->v = nv, s->cap = nc;
  }
  ts_cfg_strategy *e = &s->v[s->n++];
  memset(e, 0, sizeof *e);
  memcpy(e->op, op, strlen(op) + 1);
  memcpy(e->text, text, strlen(text) + 1);
  return TS_OK;
}

void ts_cfg_strategies_free(ts_cfg_strategies *s) {
  if (!s) return;
  free(s->v);
  memset(s, 0, sizeof *s);
}

int ts_cfg_strategies_assign(ts_cfg_strategies *dst, const ts_cfg_strategies *src) {
  if (!dst || !src) return ts_error_set(TS_EINVAL, "ts_cfg_strategies_assign: NULL argument");
  if (dst == src || (dst->v == src->v && dst->n == src->n)) return TS_OK;
  ts_cfg_strategies c = {0, 0, NULL};
  if (src->n > 0) {
    if (!(c.v = malloc(sizeof *c.v * (size_t)src->n))) return ts_error_set(TS_ENOMEM, "strategies: out of memory");
    memcpy(c.v, src->v, sizeof *c.v * (size_t)src->n);
    c.n = c.cap = src->n;
  }
  ts_cfg_strategies_free(dst);
  *dst = c;
  return TS_OK;
}

static int ilist_copy(ts_cfg_ilist *dst, const ts_cfg_ilist *src) {
  dst->n = 0;
  dst->v = NULL;
  if (src->n <= 0) return TS_OK;
  if (!(dst->v = malloc(sizeof(int) * (size_t)src->n))) return ts_error_set(TS_ENOMEM, "config: out of memory");
  memcpy(dst->v, src->v, sizeof(int) * (size_t)src->n);
  dst->n = src->n;
  return TS_OK;
}

static int flist_copy(ts_cfg_flist *dst, const ts_cfg_flist *src) {
  dst->n = 0;
  dst->v = NULL;
  if (src->n <= 0) return TS_OK;
  if (!(dst->v = malloc(sizeof(float) * (size_t)src->n))) return ts_error_set(TS_ENOMEM, "config: out of memory");
  memcpy(dst->v, src->v, sizeof(float) * (size_t)src->n);
  dst->n = src->n;
  return TS_OK;
}

static void slist_free(ts_cfg_slist *s) {
  for (int i = 0; i < s->n; i++) free(s->v[i]);
  free(s->v);
  s->v = NULL;
  s->n = 0;
}

static int slist_copy(ts_cfg_slist *dst, const ts_cfg_slist *src) {
  dst->n = 0;
  dst->v = NULL;
  if (src->n <= 0) return TS_OK;
  if (!(dst->v = calloc((size_t)src->n, sizeof *dst->v))) return ts_error_set(TS_ENOMEM, "config: out of memory");
  for (; dst->n < src->n; dst->n++)
    if (!(dst->v[dst->n] = strdup(src->v[dst->n]))) {
      slist_free(dst);
      return ts_error_set(TS_ENOMEM, "config: out of memory");
    }
  return TS_OK;
}

void ts__cfg_slist_free(ts_cfg_slist *s) { slist_free(s); }

void ts__cfg_pgroups_free(ts_cfg_pgroups *g) {
  for (int i = 0; i < g->n; i++) free(g->v[i].pattern);
  free(g->v);
  g->v = NULL;
  g->n = 0;
}

static int pgroups_copy(ts_cfg_pgroups *dst, const ts_cfg_pgroups *src) {
  dst->n = 0;
  dst->v = NULL;
  if (src->n <= 0) return TS_OK;
  if (!(dst->v = calloc((size_t)src->n, sizeof *dst->v))) return ts_error_set(TS_ENOMEM, "config: out of memory");
  for (; dst->n < src->n; dst->n++) {
    dst->v[dst->n] = src->v[dst->n];
    if (!(dst->v[dst->n].pattern = strdup(src->v[dst->n].pattern))) {
      ts__cfg_pgroups_free(dst);
      return ts_error_set(TS_ENOMEM, "config: out of memory");
    }
  }
  return TS_OK;
}

/* The keys whose values live outside the struct (lists of any length). */
#define OWNED_KEYS(X) X(parallel.strategies) X(parallel.stages)

void ts_config_free(ts_config *cfg) {
  if (!cfg) return;
#define FREE_ONE(f) ts_cfg_strategies_free(&cfg->f);
  OWNED_KEYS(FREE_ONE)
#undef FREE_ONE
  free(cfg->parallel.all_reduce_fusion_config.v);
  cfg->parallel.all_reduce_fusion_config.v = NULL;
  cfg->parallel.all_reduce_fusion_config.n = 0;
  slist_free(&cfg->optimizer.no_decay_params);
  ts__cfg_pgroups_free(&cfg->optimizer.param_groups);
  free(cfg->optimizer.schedule.values.v);
  cfg->optimizer.schedule.values.v = NULL;
  cfg->optimizer.schedule.values.n = 0;
}

int ts_config_copy(ts_config *dst, const ts_config *src) {
  if (!dst || !src) return ts_error_set(TS_EINVAL, "ts_config_copy: NULL argument");
  if (dst == src) return TS_OK;
  *dst = *src;
  int rc = TS_OK;
#define COPY_ONE(f)                                                  \
  dst->f.v = NULL, dst->f.n = dst->f.cap = 0;                       \
  if (!rc) rc = ts_cfg_strategies_assign(&dst->f, &src->f);
  OWNED_KEYS(COPY_ONE)
#undef COPY_ONE
  dst->parallel.all_reduce_fusion_config.v = NULL;
  dst->parallel.all_reduce_fusion_config.n = 0;
  if (!rc) rc = ilist_copy(&dst->parallel.all_reduce_fusion_config, &src->parallel.all_reduce_fusion_config);
  dst->optimizer.schedule.values.v = NULL;
  dst->optimizer.schedule.values.n = 0;
  if (!rc) rc = flist_copy(&dst->optimizer.schedule.values, &src->optimizer.schedule.values);
  dst->optimizer.no_decay_params.v = NULL;
  dst->optimizer.no_decay_params.n = 0;
  if (!rc) rc = slist_copy(&dst->optimizer.no_decay_params, &src->optimizer.no_decay_params);
  dst->optimizer.param_groups.v = NULL;
  dst->optimizer.param_groups.n = 0;
  if (!rc) rc = pgroups_copy(&dst->optimizer.param_groups, &src->optimizer.param_groups);
  if (rc) ts_config_free(dst);
  return rc;
}
