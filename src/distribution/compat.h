/* Internal: the one compatibility table of the distribution layer (compat.c). Which combinations
 * of parallel.mode, pipeline stages (and semi_auto_parallel inside them), the optimizer-sharding
 * stage, virtual stages and the gradient wire dtype (plus the few keys that only mean something
 * with one of them) run, and the refusal of every other, with its reason. Every refusal of these
 * combinations, wherever it is asked (config validation, the trainer choosing the layout,
 * ts_dist_create, the pipeline layout's check, `tessera launch --min-ranks`), is a row here. */
#ifndef TS_DIST_COMPAT_H
#define TS_DIST_COMPAT_H

#include <stddef.h>

#include "distribution/dist.h"

/* Where a row is enforced: the rows of one phase are asked in table order at that place, the
 * first refusing row wins (so the message is the one each place gave before the table). */
typedef enum {
  TS__COMPAT_CONFIG_MICRO = 0, /* config validation (src/train/config_validate.c): micro-batches */
  TS__COMPAT_CONFIG_PIPE,  /* config validation: the pipeline's keys */
  TS__COMPAT_CONFIG_SHARD, /* config validation: the sharding's keys (after the alias is resolved) */
  TS__COMPAT_CONFIG_SEQ,   /* config validation: parallel.sequence_parallel */
  TS__COMPAT_LAYOUT,     /* the trainer choosing the layout from parallel.mode and the stages */
  TS__COMPAT_OBJECT,     /* ts_dist_create, before the layout's own check */
  TS__COMPAT_STAGES,     /* the pipeline layout's check (after its model check) */
  TS__COMPAT_ELASTIC,    /* `tessera launch --min-ranks`: going on with fewer ranks */
  TS__COMPAT_NPHASES
} ts__compat_phase;

/* One combination asked about. mode: the parallel.mode name (config, layout and elastic phases)
 * or the layout's name (object phase: "pipeline" for stages, with semi saying what is inside). */
typedef struct {
  const char *mode;
  int stages;         /* pipeline stages (<= 1: no pipeline) */
  int semi;           /* semi_auto_parallel inside the stages (else data-parallel replicas) */
  int shard;          /* the optimizer-sharding stage (0: off; 1, 2, 3: ZeRO's) */
  int shard_group;    /* ranks per shard group (0: the whole data-parallel group) */
  int virtual_stages; /* pieces per rank (<= 1: one) */
  int interleaved;    /* the pipeline schedule is interleaved_1f1b */
  ts_dtype wire;      /* the gradients' dtype on the wire (parallel.comm_dtype) */
  int micro_batches;  /* parallel.micro_batches given (> 0) */
  int stage_rules;    /* parallel.stages given (patterns) */
  int full_batch;     /* parallel.full_batch */
  int seq_parallel;   /* parallel.sequence_parallel */
  int context_parallel; /* parallel.context_parallel (> 1: on) */
} ts__compat_key;

/* The layout fields of a distribution configuration, for those who fill one from a plan (the
 * auto_parallel search, `tessera plan`'s one-process baseline): the pipeline stages and the
 * optimizer-sharding stage set, and the stages (1 without a pipeline). The table's file is the one
 * place outside the layouts and the sharding that names these fields. */
void ts__dist_config_set_layout(ts_dist_config *c, int stages, int shard_stage);
int ts__dist_config_stages(const ts_dist_config *c);

/* The key of a distribution object's configuration for layout `layout` (its name). */
void ts__compat_key_of(const char *layout, const ts_dist_config *c, ts__compat_key *k);

/* A row's own predicate over the fields its columns do not cover. */
enum {
  TS__COMPAT_X_NONE = 0,
  TS__COMPAT_X_SHARD_BAD,       /* the sharding stage is neither 0 nor 1..3 */
  TS__COMPAT_X_GROUP_NEG,       /* shard_group < 0 */
  TS__COMPAT_X_GROUP_NOSHARD,   /* shard_group given (the row's shard column says off) */
  TS__COMPAT_X_MICRO,           /* micro_batches given */
  TS__COMPAT_X_RULES,           /* stage patterns given */
  TS__COMPAT_X_NOT_INTERLEAVED, /* the schedule is not interleaved_1f1b */
  TS__COMPAT_X_FULL_BATCH,      /* full_batch */
  TS__COMPAT_X_SEQ_PARALLEL,    /* seq_parallel */
  TS__COMPAT_X_CONTEXT_PARALLEL, /* context_parallel > 1 */
};

/* One row: a pattern over the key (-1: any) and its verdict. */
typedef struct {
  ts__compat_phase phase;
  const char *modes;   /* names separated by '|' the row applies to; NULL: any */
  signed char pipeline;/* 1: stages > 1, 0: none, -1: any */
  signed char semi;    /* inside the stages: 1 semi_auto, 0 data parallel, -1 any */
  signed char shard_lo, shard_hi; /* the sharding stage in [lo, hi] (-1, -1: any) */
  signed char vstages; /* 1: virtual_stages > 1, 0: not, -1: any */
  signed char wire;    /* 1: compressed (not f32), 0: f32, -1: any */
  signed char extra;   /* TS__COMPAT_X_*: the row's own predicate on the other fields */
  int refused;         /* 1: refused with the message, 0: allowed (stops the phase's walk) */
  const char *keys;    /* the key(s) the refusal names */
  const char *reason;  /* why (for the table's reader; the message says it to the user) */
} ts__compat_row;

/* The table: *n rows, in the order each phase asks them. */
const ts__compat_row *ts__compat_rows(int *n);
/* Whether row `r` matches key k. */
int ts__compat_match(const ts__compat_row *r, const ts__compat_key *k);
/* The first refusing row of phase ph matching k (its index into the table, and the message in
 * msg), or -1 when the phase allows k (an allowing row matched first, or none matched). */
int ts__compat_find(ts__compat_phase ph, const ts__compat_key *k, char *msg, size_t cap);
/* ts__compat_find as a status: TS_OK, or TS_ECONFIG with the row's message set as the error. */
int ts__compat_check(ts__compat_phase ph, const ts__compat_key *k);

/* The layout that runs a configuration of parallel.mode `mode` with `stages` pipeline stages:
 * "pipeline" with stages, else mode itself. */
const char *ts__compat_layout(const char *mode, int stages);

/* `tessera launch --min-ranks`: whether a data-parallel job of global batch `batch` (micro-batch
 * micro_batch) runs on n ranks: both cut evenly, and a shard group (k->shard_group) divides n;
 * and the words the refusal adds when no count fits ("" without shard groups). */
int ts__compat_ranks_fit(const ts__compat_key *k, int batch, int micro_batch, int n);
const char *ts__compat_fit_note(const ts__compat_key *k);

#endif
