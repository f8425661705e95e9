/* The compatibility table of the distribution layer (compat.h): one row per rule over (layout
 * mode, pipeline stages, semi_auto inside them, optimizer-sharding stage, virtual stages, wire
 * dtype) and the few keys that only mean something with one of them, each with its verdict, the
 * key(s) it names and the reason. The places that refuse a combination (config validation, the
 * trainer choosing the layout, ts_dist_create, the pipeline layout's check, tessera launch) ask
 * their phase of this table and nothing else; tests/distribution/test_compat.c walks every row. */
#include "compat.h"

#include <stdio.h>
#include <string.h>

/* how a row's message takes its arguments from the key */
enum {
  A_NONE = 0,
  A_SHARD,         /* %d: the stage */
  A_MODE,          /* %s: the mode */
  A_MODE_STAGES,   /* %s%s: the mode, and what is inside its stages */
  A_VSTAGES,       /* %d: virtual stages */
  A_GROUP,         /* %d: shard_group */
  A_STAGES_MODE,   /* %d %s: stages, mode */
  A_STAGES,        /* %d: stages */
  A_ELASTIC,       /* %s%s: the mode, " with pipeline stages" */
};

typedef struct {
  ts__compat_row row;
  int args;
  const char *msg;
} entry;

#define ANY -1
/* phase, modes, pipeline, semi, shard [lo, hi], vstages, wire, extra, refused, keys, reason */
static const entry table[] = {
    /* ---- config validation: parallel.micro_batches ---- */
    {{TS__COMPAT_CONFIG_MICRO, NULL, 0, ANY, ANY, ANY, ANY, ANY, TS__COMPAT_X_MICRO, 1, "parallel.micro_batches",
      "micro-batches are the pipeline's unit; without stages accumulation is train.micro_batch_size's"},
     A_NONE,
     "parallel.micro_batches: set for a pipeline (parallel.pipeline_stages > 1); use train.micro_batch_size for "
     "gradient accumulation"},
    /* ---- config validation: the pipeline's keys ---- */
    {{TS__COMPAT_CONFIG_PIPE, NULL, ANY, ANY, ANY, ANY, 1, ANY, TS__COMPAT_X_NOT_INTERLEAVED, 1,
      "parallel.virtual_stages, parallel.pipeline_schedule",
      "only the interleaved schedule runs several pieces per rank"},
     A_VSTAGES, "parallel.virtual_stages: %d pieces per rank need parallel.pipeline_schedule interleaved_1f1b"},
    {{TS__COMPAT_CONFIG_PIPE, NULL, 0, ANY, ANY, ANY, ANY, ANY, TS__COMPAT_X_RULES, 1,
      "parallel.stages, parallel.pipeline_stages",
      "stage patterns place operators in pipeline stages: without stages there is nothing to place"},
     A_STAGES, "parallel.stages: given, but parallel.pipeline_stages is %d"},
    /* ---- config validation: the sharding's keys ---- */
    {{TS__COMPAT_CONFIG_SHARD, NULL, ANY, ANY, 0, 0, ANY, ANY, TS__COMPAT_X_GROUP_NOSHARD, 1,
      "parallel.optimizer_shard_group, parallel.optimizer_shard",
      "shard groups cut the sharded optimizer's ranks: without sharding there are none"},
     A_GROUP,
     "parallel.optimizer_shard_group: %d ranks per shard group given without parallel.optimizer_shard (set a stage, "
     "or 0 here)"},
    /* ---- config validation: sequence parallelism ---- */
    {{TS__COMPAT_CONFIG_SEQ, "!semi_auto_parallel|auto_parallel", ANY, ANY, ANY, ANY, ANY, ANY,
      TS__COMPAT_X_SEQ_PARALLEL, 1, "parallel.sequence_parallel, parallel.mode",
      "the sequence is cut over a tensor-parallel axis, which only operator-level layouts have"},
     A_MODE,
     "parallel.sequence_parallel: cuts the sequence over the tensor-parallel axis of semi_auto_parallel or "
     "auto_parallel; parallel.mode is %s"},
    {{TS__COMPAT_CONFIG_SEQ, "!semi_auto_parallel|auto_parallel", ANY, ANY, ANY, ANY, ANY, ANY,
      TS__COMPAT_X_CONTEXT_PARALLEL, 1, "parallel.context_parallel, parallel.mode",
      "the sequence is cut by operator strategies (generated for the zoo's GPT), which only operator-level layouts "
      "have"},
     A_MODE,
     "parallel.context_parallel: cuts the sequence by operator strategies under semi_auto_parallel or auto_parallel; "
     "parallel.mode is %s"},
    /* ---- the trainer choosing the layout ---- */
    {{TS__COMPAT_LAYOUT, "!data_parallel|semi_auto_parallel", 1, ANY, ANY, ANY, ANY, ANY, TS__COMPAT_X_NONE, 1,
      "parallel.pipeline_stages, parallel.mode",
      "a stage runs data parallel replicas or a semi_auto cut; a model written per rank (hybrid) or one rank "
      "(stand_alone) has no stages to cut"},
     A_STAGES_MODE,
     "parallel.pipeline_stages: %d stages run with parallel.mode data_parallel (data parallel inside each stage) or "
     "semi_auto_parallel (each stage cut by the strategies), not %s"},
    {{TS__COMPAT_LAYOUT, "data_parallel|semi_auto_parallel", 1, ANY, ANY, ANY, ANY, ANY, TS__COMPAT_X_NONE, 0,
      "parallel.pipeline_stages", "the pipeline layout: data_parallel or semi_auto_parallel inside its stages"},
     A_NONE, NULL},
    /* ---- ts_dist_create: the optimizer sharding under the layout (the object's mode is the layout's
     * name: "pipeline" for stages) ---- */
    {{TS__COMPAT_OBJECT, NULL, ANY, ANY, ANY, ANY, ANY, ANY, TS__COMPAT_X_SHARD_BAD, 1, "parallel.optimizer_shard",
      "ZeRO has stages 1 (optimizer state), 2 (and gradients), 3 (and parameters)"},
     A_SHARD, "parallel.optimizer_shard: %d is not a stage (1, 2 or 3)"},
    {{TS__COMPAT_OBJECT, "!data_parallel|semi_auto_parallel|pipeline", ANY, ANY, 1, 3, ANY, ANY, TS__COMPAT_X_NONE, 1,
      "parallel.optimizer_shard, parallel.mode",
      "sharding partitions the data-parallel repeat of parameters: stand_alone has none, hybrid_parallel's "
      "parameters are the builder's (no layout to cut them by)"},
     A_MODE,
     "parallel.optimizer_shard: implemented for parallel.mode data_parallel and semi_auto_parallel (with or without "
     "parallel.pipeline_stages), not %s"},
    {{TS__COMPAT_OBJECT, "semi_auto_parallel|pipeline", ANY, ANY, 3, 3, ANY, ANY, TS__COMPAT_X_NONE, 1,
      "parallel.optimizer_shard, parallel.mode",
      "stage 3's parameter gathers are planned over whole parameters of one data-parallel group (not slices, not "
      "pieces of a pipeline)"},
     A_MODE_STAGES,
     "parallel.optimizer_shard: 3 (parameters sharded) is implemented for parallel.mode data_parallel without "
     "pipeline stages only (not %s%s); use 1 or 2"},
    {{TS__COMPAT_OBJECT, "pipeline", ANY, ANY, 2, 2, 1, ANY, TS__COMPAT_X_NONE, 1,
      "parallel.optimizer_shard, parallel.virtual_stages",
      "each micro-batch's reduce-scatter needs every piece's backward, which interleaving spreads over the step"},
     A_VSTAGES,
     "parallel.optimizer_shard: 2 with parallel.virtual_stages %d is not implemented (each micro-batch's "
     "reduce-scatter needs every piece's backward); use 1"},
    {{TS__COMPAT_OBJECT, NULL, ANY, ANY, 1, 3, ANY, ANY, TS__COMPAT_X_GROUP_NEG, 1, "parallel.optimizer_shard_group",
      "a shard group is a number of ranks"},
     A_GROUP,
     "parallel.optimizer_shard_group: %d is not a number of ranks (>= 1, or 0 for the whole data-parallel group)"},
    {{TS__COMPAT_OBJECT, "data_parallel", ANY, ANY, 1, 3, ANY, 0, TS__COMPAT_X_NONE, 0, "parallel.optimizer_shard",
      "ZeRO 1, 2 and 3 over data_parallel's ranks"},
     A_NONE, NULL},
    {{TS__COMPAT_OBJECT, "semi_auto_parallel|pipeline", ANY, ANY, 1, 2, ANY, 0, TS__COMPAT_X_NONE, 0,
      "parallel.optimizer_shard",
      "ZeRO 1 and 2 over each slice's data-parallel repeat, or a stage's ranks"},
     A_NONE, NULL},
    /* ---- the pipeline layout's check ---- */
    {{TS__COMPAT_STAGES, NULL, ANY, 0, ANY, ANY, ANY, ANY, TS__COMPAT_X_FULL_BATCH, 1,
      "parallel.full_batch, parallel.pipeline_stages",
      "a data-parallel stage's replicas read different rows of the batch"},
     A_NONE,
     "parallel.full_batch: with parallel.pipeline_stages under data_parallel the stage's replicas read different "
     "rows; full_batch is for semi_auto_parallel stages"},
    /* ---- tessera launch --min-ranks ---- */
    {{TS__COMPAT_ELASTIC, "!data_parallel", ANY, ANY, ANY, ANY, ANY, ANY, TS__COMPAT_X_NONE, 1, "parallel.mode",
      "other layouts cut the model for their rank count"},
     A_ELASTIC,
     "only a data_parallel job (without pipeline stages) can go on with fewer ranks; parallel.mode %s%s lays the "
     "model out"},
    {{TS__COMPAT_ELASTIC, NULL, 1, ANY, ANY, ANY, ANY, ANY, TS__COMPAT_X_NONE, 1, "parallel.mode",
      "pipeline stages are cut for the rank count (the message says \"with pipeline stages\")"},
     A_ELASTIC,
     "only a data_parallel job (without pipeline stages) can go on with fewer ranks; parallel.mode %s%s lays the "
     "model out"},
};

const ts__compat_row *ts__compat_rows(int *n) {
  static ts__compat_row rows[sizeof table / sizeof table[0]];
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) rows[i] = table[i].row;
  *n = (int)(sizeof table / sizeof table[0]);
  return rows;
}

void ts__dist_config_set_layout(ts_dist_config *c, int stages, int shard_stage) {
  c->pipeline_stages = stages;
  c->optimizer_shard = shard_stage;
}

int ts__dist_config_stages(const ts_dist_config *c) { return c->pipeline_stages > 1 ? c->pipeline_stages : 1; }

void ts__compat_key_of(const char *layout, const ts_dist_config *c, ts__compat_key *k) {
  memset(k, 0, sizeof *k);
  k->mode = layout;
  k->stages = c->pipeline_stages;
  k->semi = c->pipeline_semi;
  k->shard = c->optimizer_shard;
  k->shard_group = c->shard_group;
  k->virtual_stages = c->virtual_stages;
  k->interleaved = c->pipeline_schedule == 2; /* TS_SCHED_INTERLEAVED */
  k->wire = c->wire;
  k->full_batch = c->full_batch;
  k->seq_parallel = c->sequence_parallel;
}

const char *ts__compat_layout(const char *mode, int stages) { return stages > 1 ? "pipeline" : mode; }

/* mode is one of the '|'-separated names of list (or none of them after a leading '!') */
static int mode_in(const char *list, const char *mode) {
  if (!list) return 1;
  int neg = list[0] == '!', in = 0;
  const char *p = list + neg;
  size_t ml = mode ? strlen(mode) : 0;
  while (*p) {
    const char *e = strchr(p, '|');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (mode && n == ml && !strncmp(p, mode, n)) in = 1;
    p += n + (e != NULL);
  }
  return neg ? !in : in;
}

static int extra_holds(int x, const ts__compat_key *k) {
  switch (x) {
    case TS__COMPAT_X_SHARD_BAD: return k->shard != 0 && (k->shard < 0 || k->shard > 3);
    case TS__COMPAT_X_GROUP_NEG: return k->shard_group < 0;
    case TS__COMPAT_X_GROUP_NOSHARD: return k->shard_group != 0;
    case TS__COMPAT_X_MICRO: return k->micro_batches > 0;
    case TS__COMPAT_X_RULES: return k->stage_rules;
    case TS__COMPAT_X_NOT_INTERLEAVED: return !k->interleaved;
    case TS__COMPAT_X_FULL_BATCH: return k->full_batch;
    case TS__COMPAT_X_SEQ_PARALLEL: return k->seq_parallel;
    case TS__COMPAT_X_CONTEXT_PARALLEL: return k->context_parallel > 1;
    default: return 1;
  }
}

int ts__compat_match(const ts__compat_row *r, const ts__compat_key *k) {
  if (!mode_in(r->modes, k->mode)) return 0;
  if (r->pipeline >= 0 && r->pipeline != (k->stages > 1)) return 0;
  if (r->semi >= 0 && r->semi != (k->semi != 0)) return 0;
  if (r->shard_lo >= 0 && (k->shard < r->shard_lo || k->shard > r->shard_hi)) return 0;
  if (r->vstages >= 0 && r->vstages != (k->virtual_stages > 1)) return 0;
  if (r->wire >= 0 && r->wire != (k->wire != TS_F32)) return 0;
  return extra_holds(r->extra, k);
}

static void format(const entry *e, const ts__compat_key *k, char *msg, size_t cap) {
  const char *mode = k->mode ? k->mode : "?";
  const char *inside = strcmp(mode, "pipeline") ? ""
                       : !k->semi               ? " stages of data_parallel"
                                                : " stages of semi_auto_parallel";
  if (!cap) return;
  switch (e->args) {
    case A_SHARD: snprintf(msg, cap, e->msg, k->shard); break;
    case A_MODE: snprintf(msg, cap, e->msg, mode); break;
    case A_MODE_STAGES: snprintf(msg, cap, e->msg, mode, inside); break;
    case A_VSTAGES: snprintf(msg, cap, e->msg, k->virtual_stages); break;
    case A_GROUP: snprintf(msg, cap, e->msg, k->shard_group); break;
    case A_STAGES_MODE: snprintf(msg, cap, e->msg, k->stages, mode); break;
    case A_STAGES: snprintf(msg, cap, e->msg, k->stages); break;
    case A_ELASTIC: snprintf(msg, cap, e->msg, mode, k->stages > 1 ? " with pipeline stages" : ""); break;
    default: snprintf(msg, cap, "%s", e->msg); break;
  }
}

int ts__compat_find(ts__compat_phase ph, const ts__compat_key *k, char *msg, size_t cap) {
  if (cap) msg[0] = 0;
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    const entry *e = &table[i];
    if (e->row.phase != ph || !ts__compat_match(&e->row, k)) continue;
    if (!e->row.refused) return -1;
    format(e, k, msg, cap);
    return (int)i;
  }
  return -1;
}

int ts__compat_check(ts__compat_phase ph, const ts__compat_key *k) {
  char msg[512];
  if (ts__compat_find(ph, k, msg, sizeof msg) < 0) return TS_OK;
  return ts_error_set(TS_ECONFIG, "%s", msg);
}

int ts__compat_ranks_fit(const ts__compat_key *k, int batch, int micro_batch, int n) {
  int g = k->shard_group;
  return n >= 1 && batch % n == 0 && micro_batch % n == 0 && (g <= 0 || n % g == 0);
}

const char *ts__compat_fit_note(const ts__compat_key *k) {
  return k->shard_group > 0 ? " and is a multiple of parallel.optimizer_shard_group" : "";
}
