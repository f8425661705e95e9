/* Internal: the configuration key table shared by config.c and config_schema.c. */
#ifndef TS_CONFIG_IMPL_H
#define TS_CONFIG_IMPL_H

#include <stddef.h>

#include "tessera/config.h"
#include "../base/text.h"

enum {
  CT_INT,    /* int */
  CT_I64,    /* int64_t */
  CT_U64,    /* uint64_t */
  CT_FLOAT,  /* double */
  CT_BOOL,   /* int 0/1 */
  CT_STR,    /* char[size] */
  CT_ENUM,   /* int-sized enum, names[] */
  CT_INTS,   /* ts_cfg_ints */
  CT_FLOATS, /* ts_cfg_floats */
  CT_TFS,    /* ts_cfg_transforms */
  CT_STRATS, /* ts_cfg_strategies */
  CT_STRS,   /* ts_cfg_strs */
  CT_STAGES, /* ts_cfg_strategies holding stage numbers (parallel.stages) */
  CT_ILIST,  /* ts_cfg_ilist (any length, malloc'd) */
  CT_FLIST,  /* ts_cfg_flist (any length, malloc'd; f32) */
  CT_SLIST,  /* ts_cfg_slist (any length, malloc'd) */
  CT_PGROUPS, /* ts_cfg_pgroups (any length, malloc'd) */
};

enum {
  CF_HASH = 1,    /* part of ts_config_hash */
  CF_LO_OPEN = 2, /* value > lo (else >= lo) */
  CF_HI_OPEN = 4, /* value < hi (else <= hi) */
  CF_AUTO = 8,    /* transforms: "auto" allowed (n = -1) */
};

typedef struct {
  const char *path;
  int type;
  size_t off, size;
  const char *def;
  const char *const *names; /* enums, NULL-terminated */
  double lo, hi;            /* numbers and list elements (not for U64) */
  int minn, maxn;           /* list lengths */
  unsigned flags;
  const char *doc;
} ts__cfg_key;

extern const ts__cfg_key ts__cfg_keys[];
extern const int ts__cfg_nkeys;
extern const char *const *ts__cfg_model_names, *const *ts__cfg_data_names,
    *const *ts__cfg_parallel_names, *const *ts__cfg_progress_names, *const *ts__cfg_unit_names,
    *const *ts__cfg_optim_names, *const *ts__cfg_lr_names;

/* A transform kind's YAML name and parameters (config.c). */
typedef struct {
  const char *name;
  ts_transform_kind kind;
  const char *params[4]; /* NULL-terminated */
  const char *required;  /* comma-free list of required params, space-separated */
  int random;
} tfdef;
const tfdef *ts__cfg_tf_by_kind(ts_transform_kind k);
void ts__cfg_slist_free(ts_cfg_slist *s);     /* config_lists.c */
void ts__cfg_pgroups_free(ts_cfg_pgroups *g); /* config_lists.c */
int ts__cfg_enum_count(const char *const *names);
const char *ts__cfg_enum_name(const char *const *names, int v); /* "?" when out of range */
/* key k's value in cfg, in YAML flow style, appended to b (config_format.c) */
void ts__cfg_fmt_value(ts__sb *b, const ts__cfg_key *k, const ts_config *cfg);
/* The training-relevant keys that differ between a checkpoint's config and this run's (YAML
 * text), "key: A in the checkpoint, B now; ..." (at most max, then "... and K more"); returns the count. */
int ts__config_diff(const char *ckpt_yaml, const char *now_yaml, int max, char *out, size_t cap);
/* Keys set explicitly (given, not at their default) that have no effect given another key's value
 * (milestones under a cosine schedule, momentum under adam, ...): "key (why), ..." into out; the count. */
int ts__config_unused(const ts_config *cfg, char *out, size_t cap);

#endif
