/* The distribution layer's compatibility table (src/distribution/compat.h), row by row: every
 * row's own example is decided by that row (no row is shadowed by an earlier one of its phase),
 * refused with a message naming its key(s) or allowed; today's refusals word for word; the
 * object's phase over every (layout, shard stage, virtual stages, wire, shard group) against the
 * if-chain it replaced; ts_dist_create refusing through it; and the checkpoint manifest's layout
 * object (the layout's and the sync object's keys) byte for byte as the trainer wrote it. */
#include <stdlib.h>
#include <string.h>

#include "distribution/compat.h"
#include "distribution/query.h"
#include "distribution/dist.h"
#include "test_util.h"

static const char *const all_modes[] = {"stand_alone", "data_parallel", "semi_auto_parallel", "hybrid_parallel",
                                        "auto_parallel", "pipeline"};
#define NMODES (int)(sizeof all_modes / sizeof all_modes[0])

/* whether `mode` is one of a row's '|' list (or not one of a '!' list) */
static int in_list(const char *list, const char *mode) {
  if (!list) return 1;
  int neg = list[0] == '!';
  char buf[256];
  snprintf(buf, sizeof buf, "%s", list + neg);
  int in = 0;
  for (char *t = strtok(buf, "|"); t; t = strtok(NULL, "|")) in |= !strcmp(t, mode);
  return neg ? !in : in;
}

/* A key the row's pattern matches, built from its columns. */
static void example(const ts__compat_row *r, ts__compat_key *k) {
  memset(k, 0, sizeof *k);
  k->mode = "data_parallel";
  for (int m = 0; m < NMODES && r->modes; m++)
    if (in_list(r->modes, all_modes[m])) {
      k->mode = all_modes[m];
      break;
    }
  k->stages = r->pipeline == 1 || (r->pipeline < 0 && !strcmp(k->mode, "pipeline")) ? 2 : 1;
  k->semi = r->semi == 1;
  k->shard = r->shard_lo >= 0 ? r->shard_lo : 0;
  k->virtual_stages = r->vstages == 1 ? 2 : 1;
  k->interleaved = r->vstages == 1;
  k->wire = r->wire == 1 ? TS_BF16 : TS_F32;
  switch (r->extra) {
    case TS__COMPAT_X_SHARD_BAD: k->shard = 4; break;
    case TS__COMPAT_X_GROUP_NEG: k->shard_group = -1; break;
    case TS__COMPAT_X_GROUP_NOSHARD: k->shard_group = 2; break;
    case TS__COMPAT_X_MICRO: k->micro_batches = 4; break;
    case TS__COMPAT_X_RULES: k->stage_rules = 1; break;
    case TS__COMPAT_X_NOT_INTERLEAVED: k->interleaved = 0; break;
    case TS__COMPAT_X_FULL_BATCH: k->full_batch = 1; break;
    case TS__COMPAT_X_SEQ_PARALLEL: k->seq_parallel = 1; break;
    case TS__COMPAT_X_CONTEXT_PARALLEL: k->context_parallel = 2; break;
    default: break;
  }
}

/* every key named by the row (", "-separated) is in msg */
static int names_keys(const char *keys, const char *msg) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", keys);
  for (char *t = strtok(buf, ", "); t; t = strtok(NULL, ", "))
    if (!strstr(msg, t)) return 0;
  return 1;
}

static void test_rows(void) {
  int n = 0;
  const ts__compat_row *rows = ts__compat_rows(&n);
  CHECK(n > 10);
  int refused = 0, allowed = 0;
  for (int i = 0; i < n; i++) {
    const ts__compat_row *r = &rows[i];
    ts__compat_key k;
    example(r, &k);
    char msg[512];
    CHECK_MSG(ts__compat_match(r, &k), "row %d: its own example does not match it", i);
    CHECK_MSG(r->keys && r->keys[0] && r->reason && r->reason[0], "row %d: no keys or reason", i);
    int got = ts__compat_find(r->phase, &k, msg, sizeof msg);
    if (r->refused) {
      refused++;
      CHECK_MSG(got == i, "row %d (%s): decided by row %d", i, r->keys, got);
      CHECK_MSG(names_keys(r->keys, msg), "row %d: the message '%s' does not name %s", i, msg, r->keys);
      CHECK_MSG(ts__compat_check(r->phase, &k) == TS_ECONFIG && !strcmp(ts_last_error(), msg),
                "row %d: the status's message '%s' is not the row's '%s'", i, ts_last_error(), msg);
    } else {
      allowed++;
      CHECK_MSG(got == -1, "row %d (allowed, %s): refused by row %d: %s", i, r->keys, got, msg);
      CHECK_MSG(ts__compat_check(r->phase, &k) == TS_OK, "row %d: refused", i);
    }
  }
  CHECK(refused > 0 && allowed > 0);
  printf("compat: %d rows (%d refusals, %d allowed)\n", n, refused, allowed);
}

/* One combination and today's verdict: NULL allowed, else the whole message. */
typedef struct {
  ts__compat_phase ph;
  const char *mode;
  int stages, semi, shard, group, vst, interleaved;
  ts_dtype wire;
  int micro, rules, full;
  const char *want;
  int seq, cp;
} combo;

static void test_messages(void) {
  static const combo c[] = {
      {TS__COMPAT_OBJECT, "data_parallel", 1, 0, 3, 0, 1, 0, TS_F32, 0, 0, 0, NULL, 0, 0},
      {TS__COMPAT_OBJECT, "data_parallel", 1, 0, 2, 2, 1, 0, TS_F32, 0, 0, 0, NULL, 0, 0},
      {TS__COMPAT_OBJECT, "data_parallel", 1, 0, 0, 0, 1, 0, TS_BF16, 0, 0, 0, NULL, 0, 0},
      {TS__COMPAT_OBJECT, "semi_auto_parallel", 1, 1, 3, 0, 1, 0, TS_F32, 0, 0, 0,
       "parallel.optimizer_shard: 3 (parameters sharded) is implemented for parallel.mode data_parallel without "
       "pipeline stages only (not semi_auto_parallel); use 1 or 2", 0, 0},
      {TS__COMPAT_OBJECT, "pipeline", 2, 0, 3, 0, 1, 0, TS_F32, 0, 0, 0,
       "parallel.optimizer_shard: 3 (parameters sharded) is implemented for parallel.mode data_parallel without "
       "pipeline stages only (not pipeline stages of data_parallel); use 1 or 2", 0, 0},
      {TS__COMPAT_OBJECT, "pipeline", 2, 1, 3, 0, 1, 0, TS_F32, 0, 0, 0,
       "parallel.optimizer_shard: 3 (parameters sharded) is implemented for parallel.mode data_parallel without "
       "pipeline stages only (not pipeline stages of semi_auto_parallel); use 1 or 2", 0, 0},
      {TS__COMPAT_OBJECT, "pipeline", 2, 0, 2, 0, 3, 1, TS_F32, 0, 0, 0,
       "parallel.optimizer_shard: 2 with parallel.virtual_stages 3 is not implemented (each micro-batch's "
       "reduce-scatter needs every piece's backward); use 1", 0, 0},
      {TS__COMPAT_OBJECT, "pipeline", 2, 0, 1, 0, 3, 1, TS_F32, 0, 0, 0, NULL, 0, 0},
      {TS__COMPAT_OBJECT, "stand_alone", 1, 0, 1, 0, 1, 0, TS_F32, 0, 0, 0,
       "parallel.optimizer_shard: implemented for parallel.mode data_parallel and semi_auto_parallel (with or "
       "without parallel.pipeline_stages), not stand_alone", 0, 0},
      {TS__COMPAT_OBJECT, "hybrid_parallel", 1, 0, 2, 0, 1, 0, TS_F32, 0, 0, 0,
       "parallel.optimizer_shard: implemented for parallel.mode data_parallel and semi_auto_parallel (with or "
       "without parallel.pipeline_stages), not hybrid_parallel", 0, 0},
      {TS__COMPAT_OBJECT, "data_parallel", 1, 0, 5, 0, 1, 0, TS_F32, 0, 0, 0,
       "parallel.optimizer_shard: 5 is not a stage (1, 2 or 3)", 0, 0},
      {TS__COMPAT_OBJECT, "data_parallel", 1, 0, 1, -2, 1, 0, TS_F32, 0, 0, 0,
       "parallel.optimizer_shard_group: -2 is not a number of ranks (>= 1, or 0 for the whole data-parallel "
       "group)", 0, 0},
      {TS__COMPAT_OBJECT, "data_parallel", 1, 0, 1, 0, 1, 0, TS_F16, 0, 0, 0, NULL, 0, 0}, /* 16-bit reduce-scatters */
      {TS__COMPAT_LAYOUT, "hybrid_parallel", 4, 0, 0, 0, 1, 0, TS_F32, 0, 0, 0,
       "parallel.pipeline_stages: 4 stages run with parallel.mode data_parallel (data parallel inside each "
       "stage) or semi_auto_parallel (each stage cut by the strategies), not hybrid_parallel", 0, 0},
      {TS__COMPAT_LAYOUT, "stand_alone", 2, 0, 0, 0, 1, 0, TS_F32, 0, 0, 0,
       "parallel.pipeline_stages: 2 stages run with parallel.mode data_parallel (data parallel inside each "
       "stage) or semi_auto_parallel (each stage cut by the strategies), not stand_alone", 0, 0},
      {TS__COMPAT_LAYOUT, "semi_auto_parallel", 2, 1, 0, 0, 1, 0, TS_F32, 0, 0, 0, NULL, 0, 0},
      {TS__COMPAT_LAYOUT, "hybrid_parallel", 1, 0, 0, 0, 1, 0, TS_F32, 0, 0, 0, NULL, 0, 0},
      {TS__COMPAT_STAGES, "pipeline", 2, 0, 0, 0, 1, 0, TS_F32, 0, 0, 1,
       "parallel.full_batch: with parallel.pipeline_stages under data_parallel the stage's replicas read "
       "different rows; full_batch is for semi_auto_parallel stages", 0, 0},
      {TS__COMPAT_STAGES, "pipeline", 2, 1, 0, 0, 1, 0, TS_F32, 0, 0, 1, NULL, 0, 0},
      {TS__COMPAT_CONFIG_MICRO, "data_parallel", 1, 0, 0, 0, 1, 0, TS_F32, 4, 0, 0,
       "parallel.micro_batches: set for a pipeline (parallel.pipeline_stages > 1); use train.micro_batch_size for "
       "gradient accumulation", 0, 0},
      {TS__COMPAT_CONFIG_MICRO, "data_parallel", 2, 0, 0, 0, 1, 0, TS_F32, 4, 0, 0, NULL, 0, 0},
      {TS__COMPAT_CONFIG_PIPE, "data_parallel", 2, 0, 0, 0, 2, 0, TS_F32, 0, 0, 0,
       "parallel.virtual_stages: 2 pieces per rank need parallel.pipeline_schedule interleaved_1f1b", 0, 0},
      {TS__COMPAT_CONFIG_PIPE, "data_parallel", 2, 0, 0, 0, 2, 1, TS_F32, 0, 1, 0, NULL, 0, 0},
      {TS__COMPAT_CONFIG_PIPE, "data_parallel", 1, 0, 0, 0, 1, 0, TS_F32, 0, 1, 0,
       "parallel.stages: given, but parallel.pipeline_stages is 1", 0, 0},
      {TS__COMPAT_CONFIG_SHARD, "data_parallel", 1, 0, 0, 4, 1, 0, TS_F32, 0, 0, 0,
       "parallel.optimizer_shard_group: 4 ranks per shard group given without parallel.optimizer_shard (set a "
       "stage, or 0 here)", 0, 0},
      {TS__COMPAT_CONFIG_SHARD, "data_parallel", 1, 0, 2, 4, 1, 0, TS_F32, 0, 0, 0, NULL, 0, 0},
      {TS__COMPAT_CONFIG_SEQ, "data_parallel", 1, 0, 0, 0, 1, 0, TS_F32, 0, 0, 0,
       "parallel.sequence_parallel: cuts the sequence over the tensor-parallel axis of semi_auto_parallel or "
       "auto_parallel; parallel.mode is data_parallel", 1, 0},
      {TS__COMPAT_CONFIG_SEQ, "semi_auto_parallel", 2, 1, 1, 0, 1, 0, TS_F32, 0, 0, 0, NULL, 1, 0},
      {TS__COMPAT_CONFIG_SEQ, "auto_parallel", 1, 0, 0, 0, 1, 0, TS_F32, 0, 0, 0, NULL, 1, 0},
      {TS__COMPAT_CONFIG_SEQ, "data_parallel", 1, 0, 0, 0, 1, 0, TS_F32, 0, 0, 0,
       "parallel.context_parallel: cuts the sequence by operator strategies under semi_auto_parallel or "
       "auto_parallel; parallel.mode is data_parallel", 0, 2},
      {TS__COMPAT_CONFIG_SEQ, "semi_auto_parallel", 1, 1, 0, 0, 1, 0, TS_F32, 0, 0, 0, NULL, 0, 4},
      {TS__COMPAT_ELASTIC, "semi_auto_parallel", 1, 1, 0, 0, 1, 0, TS_F32, 0, 0, 0,
       "only a data_parallel job (without pipeline stages) can go on with fewer ranks; parallel.mode "
       "semi_auto_parallel lays the model out", 0, 0},
      {TS__COMPAT_ELASTIC, "data_parallel", 2, 0, 0, 0, 1, 0, TS_F32, 0, 0, 0,
       "only a data_parallel job (without pipeline stages) can go on with fewer ranks; parallel.mode "
       "data_parallel with pipeline stages lays the model out", 0, 0},
      {TS__COMPAT_ELASTIC, "data_parallel", 1, 0, 3, 2, 1, 0, TS_F32, 0, 0, 0, NULL, 0, 0},
  };
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    ts__compat_key k = {c[i].mode, c[i].stages, c[i].semi, c[i].shard, c[i].group, c[i].vst, c[i].interleaved,
                        c[i].wire, c[i].micro, c[i].rules, c[i].full, c[i].seq, c[i].cp};
    char msg[512];
    int row = ts__compat_find(c[i].ph, &k, msg, sizeof msg);
    if (!c[i].want) CHECK_MSG(row < 0, "combination %zu: refused: %s", i, msg);
    else CHECK_MSG(row >= 0 && !strcmp(msg, c[i].want), "combination %zu: '%s', want '%s'", i, msg, c[i].want);
  }
  CHECK(!strcmp(ts__compat_layout("data_parallel", 2), "pipeline"));
  CHECK(!strcmp(ts__compat_layout("semi_auto_parallel", 1), "semi_auto_parallel"));
  ts__compat_key k = {.mode = "data_parallel", .shard = 1, .shard_group = 2};
  CHECK(ts__compat_ranks_fit(&k, 32, 32, 4) && !ts__compat_ranks_fit(&k, 32, 32, 3) &&
        strstr(ts__compat_fit_note(&k), "parallel.optimizer_shard_group"));
  k.shard_group = 0;
  CHECK(ts__compat_ranks_fit(&k, 30, 30, 3) && !ts__compat_fit_note(&k)[0]);
}

/* The object's refusals before the table (dist.c's check_shard and the pipeline's full_batch). */
static const char *old_object(const char *vt, const ts__compat_key *c, char *buf, size_t cap) {
  if (!c->shard) return NULL;
  if (c->shard < 0 || c->shard > 3) return snprintf(buf, cap, "%d is not a stage", c->shard), buf;
  int dp = !strcmp(vt, "data_parallel"), pipe = !strcmp(vt, "pipeline");
  if (!dp && !pipe && strcmp(vt, "semi_auto_parallel")) return snprintf(buf, cap, "not %s", vt), buf;
  if (c->shard >= 3 && !dp)
    return snprintf(buf, cap, "(not %s%s)", vt,
                    pipe && !c->semi ? " stages of data_parallel" : pipe ? " stages of semi_auto_parallel" : ""),
           buf;
  if (c->shard == 2 && pipe && c->virtual_stages > 1) return "2 with parallel.virtual_stages";
  if (c->shard_group < 0) return "is not a number of ranks";
  return NULL; /* (a 16-bit parallel.comm_dtype was refused here before its reduce-scatters) */
}

static void test_object_exhaustive(void) {
  static const ts_dtype wires[] = {TS_F32, TS_BF16, TS_F16};
  int n = 0;
  for (int m = 0; m < NMODES; m++)
    for (int semi = 0; semi < 2; semi++)
      for (int shard = -1; shard <= 4; shard++)
        for (int v = 1; v <= 3; v++)
          for (int w = 0; w < 3; w++)
            for (int g = -1; g <= 2; g++) {
              ts__compat_key k = {all_modes[m], m == 5 ? 2 : 1, semi, shard, g, v, 1, wires[w], 0, 0, 0, 0, 0};
              char want[256], msg[512];
              const char *o = old_object(all_modes[m], &k, want, sizeof want);
              int row = ts__compat_find(TS__COMPAT_OBJECT, &k, msg, sizeof msg);
              CHECK_MSG(o ? row >= 0 && strstr(msg, o) : row < 0, "%s semi %d shard %d v %d wire %d group %d: "
                        "'%s', before '%s'", all_modes[m], semi, shard, v, w, g, row >= 0 ? msg : "allowed",
                        o ? o : "allowed");
              n++;
            }
  printf("compat: %d object combinations as before\n", n);
}

/* ts_dist_create refuses through the table before anything starts (a dry run: no MPI). */
static int no_model(ts_nn *nn, ts_val x, ts_val y, const ts_model_info *i, ts_val *l, ts_val *s, void *u) {
  (void)nn, (void)x, (void)y, (void)i, (void)l, (void)s, (void)u;
  return TS_OK;
}

static void test_create(void) {
  ts_dist_config c;
  memset(&c, 0, sizeof c);
  c.micro_batch = c.eval_batch = 8;
  c.accum = 1;
  c.wire = TS_F32;
  ts_dist_model m = {.fn = no_model, .dtype = TS_F32};
  ts_dist *d = NULL;
  c.optimizer_shard = 3;
  EXPECT_ERR(ts_dist_create(ts_dist_find("semi_auto_parallel"), &c, &m, 2, 0, &d), TS_ECONFIG,
             "parallel.optimizer_shard: 3 (parameters sharded)", "(not semi_auto_parallel)");
  CHECK(!d);
  c.optimizer_shard = 1;
  c.pipeline_stages = 2;
  c.full_batch = 1;
  EXPECT_ERR(ts_dist_create(ts_dist_find("pipeline"), &c, &m, 2, 0, &d), TS_ECONFIG, "parallel.full_batch: with");
  c.full_batch = 0;
  CHECK_OK(ts_dist_create(ts_dist_find("pipeline"), &c, &m, 2, 0, &d));
  ts_dist_free(d);
}

/* The checkpoint manifest's layout object, written by the layout and the sync object, has the bytes
 * the trainer wrote before (the same keys, order and values). */
static void test_manifest(void) {
  static const int cases[][5] = {{1, 0, 0, 8, 0}, {4, 2, 2, 16, 1}, {2, 1, 0, 4, 0}, {0, 3, 4, 8, 1}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ts_dist_config c;
    memset(&c, 0, sizeof c);
    c.pipeline_stages = cases[i][0];
    c.optimizer_shard = cases[i][1];
    c.shard_group = cases[i][2];
    char got[600], want[600];
    ts__dist_manifest_layout(&c, "data_parallel", cases[i][3], cases[i][4], cases[i][4], got, sizeof got);
    snprintf(want, sizeof want,
             "{\"mode\": \"%s\", \"world_size\": %d, \"pipeline_stages\": %d, \"optimizer_shard\": %d, "
             "\"optimizer_shard_group\": %d, \"sliced_parameters\": %s%s}",
             "data_parallel", cases[i][3], c.pipeline_stages > 1 ? c.pipeline_stages : 1, c.optimizer_shard,
             c.shard_group, cases[i][4] ? "true" : "false",
             cases[i][4] ? ", \"strategy_file\": \"strategy.json\"" : "");
    CHECK_MSG(!strcmp(got, want), "manifest layout '%s', before '%s'", got, want);
  }
}

int main(void) {
  test_manifest();
  test_rows();
  test_messages();
  test_object_exhaustive();
  test_create();
  return ts_test_finish("test_compat");
}
