/* The profiler: the ring buffer (wrap, dropped count), the aggregation and report on synthetic
 * events, the straggler choice; then real runs of the MLP on a slice of Fashion-MNIST: the
 * trace parses, every X event has ts, dur, pid, tid and name, the top-level spans of each step
 * do not overlap and sum to the step time the trainer measured (within 5%); an operator slowed
 * by 20 ms through a plan hook is the top operator at about 20 ms; under mpirun -n 2 with rank 1
 * slowed, rank 0's report names rank 1. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tessera/comm.h"
#include "graph/graph_ir.h"
#include "tessera/prof.h"
#include "tessera/train.h"
#include "test_util.h"

static ts_prof_event ev(const char *name, const char *cat, int kind, double t0, double t1) {
  ts_prof_event e;
  memset(&e, 0, sizeof e);
  e.name = name;
  e.cat = cat;
  e.kind = (uint8_t)kind;
  e.t0 = t0;
  e.t1 = t1;
  return e;
}

static cJSON *parse_events(const char *buf, size_t len) {
  char *w = malloc(len + 3);
  w[0] = '[';
  memcpy(w + 1, buf, len);
  w[len + 1] = ']';
  w[len + 2] = 0;
  cJSON *a = cJSON_Parse(w);
  free(w);
  return a;
}

static int count_ph(const cJSON *a, const char *ph) {
  int n = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, a) {
    const cJSON *p = cJSON_GetObjectItem(e, "ph");
    n += cJSON_IsString(p) && !strcmp(p->valuestring, ph);
  }
  return n;
}

static void test_ring(void) {
  ts_prof_config pc = ts_prof_config_default();
  pc.mode = TS_PROF_TRACE;
  pc.ring_events = 8;
  ts_prof *p;
  CHECK_OK(ts_prof_create(&pc, 0, &p));
  ts_prof_event e = ev("n", "dense", TS_PROF_NODE, 1.0, 1.5);
  ts_prof_record(p, &e); /* not active: ignored */
  CHECK(ts_prof_recorded(p) == 0);
  ts_prof_set_active(p, 1);
  static const char *names[20] = {"e0", "e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8", "e9",
                                  "e10", "e11", "e12", "e13", "e14", "e15", "e16", "e17", "e18", "e19"};
  for (int i = 0; i < 20; i++) {
    e = ev(names[i], "dense", TS_PROF_NODE, i, i + 0.5);
    ts_prof_record(p, &e);
  }
  CHECK(ts_prof_recorded(p) == 20);
  CHECK(ts_prof_dropped(p) == 12); /* trace mode: the 12 oldest are gone */
  char *buf;
  size_t len;
  CHECK_OK(ts_prof_trace_events(p, &buf, &len));
  cJSON *a = parse_events(buf, len);
  CHECK(a != NULL);
  CHECK(count_ph(a, "X") == 8);
  /* the newest 8 remain, oldest first */
  const cJSON *x;
  int k = 12;
  cJSON_ArrayForEach(x, a) {
    if (strcmp(cJSON_GetObjectItem(x, "ph")->valuestring, "X")) continue;
    CHECK(!strcmp(cJSON_GetObjectItem(x, "name")->valuestring, names[k]));
    k++;
  }
  cJSON_Delete(a);
  free(buf);
  ts_prof_free(p);

  /* summary mode: events aggregated at each step end are not lost when the ring wraps later */
  pc.mode = TS_PROF_SUMMARY;
  CHECK_OK(ts_prof_create(&pc, 0, &p));
  ts_prof_set_active(p, 1);
  for (int s = 1; s <= 5; s++) {
    ts_prof_step_begin(p, s, s);
    for (int i = 0; i < 6; i++) {
      e = ev("op", "dense", TS_PROF_NODE, s + 0.1 * i, s + 0.1 * i + 0.05);
      ts_prof_record(p, &e);
    }
    ts_prof_step_end(p, s + 0.9, NULL);
  }
  CHECK(ts_prof_dropped(p) == 0);
  char *text, *json;
  CHECK_OK(ts_prof_report(p, NULL, &text, &json));
  cJSON *j = cJSON_Parse(json);
  const cJSON *ops = cJSON_GetObjectItem(j, "ops");
  CHECK(cJSON_GetArraySize(ops) == 1);
  CHECK(cJSON_GetObjectItem(cJSON_GetArrayItem(ops, 0), "calls")->valuedouble == 30);
  cJSON_Delete(j);
  free(text);
  free(json);
  /* overflowing one ring between two step ends is counted */
  ts_prof_step_begin(p, 6, 6);
  for (int i = 0; i < 20; i++) {
    e = ev("op", "dense", TS_PROF_NODE, 6, 6.01);
    ts_prof_record(p, &e);
  }
  ts_prof_step_end(p, 6.5, NULL);
  CHECK(ts_prof_dropped(p) == 13); /* 21 events (with the step's), 8 slots */
  ts_prof_free(p);
  EXPECT_ERR(ts_prof_create(&(ts_prof_config){.mode = 7}, 0, &p), TS_EINVAL, "mode");
}

static void test_summary(void) {
  ts_prof_config pc = ts_prof_config_default();
  pc.mode = TS_PROF_SUMMARY;
  ts_prof *p;
  CHECK_OK(ts_prof_create(&pc, 0, &p));
  ts_prof_set_active(p, 1);
  for (int s = 1; s <= 2; s++) { /* a 10 ms step: data 1, forward 3, backward 4, comm 1, optimizer 0.5 */
    double b = 100.0 * s;
    ts_prof_step_begin(p, s, b);
    ts_prof_event es[] = {
        ev("data", "trainer", TS_PROF_DATA, b, b + 0.001),
        ev("forward", "trainer", TS_PROF_FORWARD, b + 0.001, b + 0.004),
        ev("fc1/dense", "dense", TS_PROF_NODE, b + 0.001, b + 0.003),
        ev("relu", "eltwise", TS_PROF_NODE, b + 0.003, b + 0.004),
        ev("backward", "trainer", TS_PROF_BACKWARD, b + 0.004, b + 0.008),
        ev("fc1/dense_bwd", "matmul", TS_PROF_NODE, b + 0.004, b + 0.008),
        ev("ar", "allreduce", TS_PROF_NODE, b + 0.005, b + 0.006),
        ev("grad_reduce_wait", "trainer", TS_PROF_COMM, b + 0.008, b + 0.009),
        ev("optimizer", "trainer", TS_PROF_OPTIMIZER, b + 0.009, b + 0.0095),
        ev("fc2/matmul", "matmul", TS_PROF_NODE, b + 0.004, b + 0.006),
    };
    es[2].flops = 2e7; /* 2e7 in 2 ms: 10 GFLOP/s */
    es[9].flops = 4e7; /* in bf16: against the 16-bit peak */
    es[9].low = 1;
    es[6].coll = 1;
    es[6].bytes = 1000000; /* 1 MB in 1 ms: 1 GB/s */
    es[6].group = 4;
    es[7].bytes = 2000000;
    for (size_t i = 0; i < sizeof es / sizeof es[0]; i++) ts_prof_record(p, &es[i]);
    ts_prof_breakdown bd;
    ts_prof_step_end(p, b + 0.010, &bd);
    CHECK(fabs(bd.total_ms - 10) < 1e-6 && fabs(bd.data_ms - 1) < 1e-6 && fabs(bd.forward_ms - 3) < 1e-6);
    CHECK(fabs(bd.backward_ms - 4) < 1e-6 && fabs(bd.comm_ms - 1) < 1e-6 && fabs(bd.optimizer_ms - 0.5) < 1e-6);
    CHECK(fabs(bd.other_ms - 0.5) < 1e-6);
  }
  ts_prof_event between = ev("evaluation", "trainer", TS_PROF_EVAL, 300, 301); /* not in a step */
  ts_prof_record(p, &between);
  ts_prof_breakdown m;
  ts_prof_mean_breakdown(p, &m);
  CHECK(m.steps == 2 && fabs(m.total_ms - 10) < 1e-6 && fabs(m.comm_ms - 1) < 1e-6);
  ts_prof_breakdown ranks[3] = {{.total_ms = 10, .comm_ms = 4}, {.total_ms = 10, .comm_ms = 0.5},
                                {.total_ms = 10, .comm_ms = 4}};
  CHECK(ts_prof_straggler(ranks, 3) == 1); /* the rank the others wait for */
  CHECK(ts_prof_straggler(ranks, 1) == -1);
  ts_prof_report_info ri = {.peak_gflops = 20, .peak_gflops_low = 80, .peak_what = "a test's peaks", .arena_bytes = 1 << 20, .naive_bytes = 2 << 20, .nranks = 3, .ranks = ranks};
  char *text, *json;
  CHECK_OK(ts_prof_report(p, &ri, &text, &json));
  CHECK(strstr(text, "slowest rank: rank 1") != NULL);
  CHECK(strstr(text, "fc1/dense") != NULL);
  CHECK(strstr(text, "peak 20.0 GFLOP/s f32, 80.0 GFLOP/s bf16 (a test's peaks)") != NULL);
  cJSON *j = cJSON_Parse(json);
  CHECK(j != NULL);
  CHECK(!strcmp(cJSON_GetObjectItem(j, "type")->valuestring, "profile"));
  CHECK(cJSON_GetObjectItem(j, "steps")->valuedouble == 2);
  CHECK(cJSON_GetObjectItem(j, "straggler")->valuedouble == 1);
  const cJSON *ops = cJSON_GetObjectItem(j, "ops"), *o;
  int seen = 0;
  cJSON_ArrayForEach(o, ops) {
    const char *op = cJSON_GetObjectItem(o, "op")->valuestring;
    double calls = cJSON_GetObjectItem(o, "calls")->valuedouble, tot = cJSON_GetObjectItem(o, "total_ms")->valuedouble;
    double share = cJSON_GetObjectItem(o, "share")->valuedouble;
    if (!strcmp(op, "dense")) {
      seen++;
      CHECK(calls == 2 && fabs(tot - 4) < 1e-6 && fabs(share - 0.2) < 1e-6);
      CHECK(fabs(cJSON_GetObjectItem(o, "gflops")->valuedouble - 10) < 1e-6);
      CHECK(fabs(cJSON_GetObjectItem(o, "peak_share")->valuedouble - 0.5) < 1e-9); /* 10 of 20 */
    }
    if (!strcmp(op, "matmul")) { /* 4 ms without FLOPs and 2 ms of bf16 ones: 8e7 FLOPs in 12 ms */
      seen++;
      CHECK(fabs(tot - 12) < 1e-6 && fabs(cJSON_GetObjectItem(o, "gflops")->valuedouble - 8e7 / 12e-3 / 1e9) < 1e-6);
      /* 8e7 FLOPs take 1 ms at the bf16 peak of 80 GFLOP/s (not 4 ms at the f32 peak): 1 of 12 */
      CHECK(fabs(cJSON_GetObjectItem(o, "peak_share")->valuedouble - 1.0 / 12) < 1e-9);
    }
  }
  CHECK(seen == 2);
  CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(ops, 0), "op")->valuestring, "matmul")); /* by time */
  const cJSON *comm = cJSON_GetObjectItem(j, "comm");
  CHECK(cJSON_GetArraySize(comm) == 2);
  cJSON_ArrayForEach(o, comm) {
    const char *k = cJSON_GetObjectItem(o, "kind")->valuestring;
    double gbs = cJSON_GetObjectItem(o, "gb_per_s")->valuedouble;
    if (!strcmp(k, "allreduce")) CHECK(fabs(gbs - 1) < 1e-6 && cJSON_GetObjectItem(o, "group")->valuedouble == 4);
    else CHECK(!strcmp(k, "grad_reduce_wait") && fabs(gbs - 2) < 1e-6);
  }
  cJSON_Delete(j);
  free(text);
  free(json);
  ts_prof_free(p);
}

/* ---- real runs ---- */
typedef struct {
  int slow_rank; /* -1: every rank */
  int rank;
  const char *target; /* the first forward dense node (its graph-owned name) */
  char name[128];     /* a copy: the graph goes with the trainer */
  int slept;
} slow_ctx;

static void slow_hook(const ts_hook_info *e, void *u) {
  slow_ctx *s = u;
  if (e->event != TS_HOOK_NODE_BEGIN) return;
  if (!s->target && e->op_name && !strcmp(e->op_name, "dense") && !ts_graph_node_is_backward(e->g, e->node)) {
    s->target = e->node_name;
    snprintf(s->name, sizeof s->name, "%s", e->node_name);
  }
  if (e->node_name == s->target && (s->slow_rank < 0 || s->slow_rank == s->rank)) {
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    s->slept++;
  }
}

/* par: more keys of the parallel section (", key: value ..."), or "" */
static int run_par(const char *dir, const char *mode, const char *par, const char *profile, int steps, slow_ctx *slow) {
  char y[2048];
  snprintf(y, sizeof y,
           "model: {name: mlp, hidden: [128]}\n"
           "data: {name: fashion_mnist, path: '%s', train_limit: 2048, test_limit: 256, num_workers: 1}\n"
           "train: {steps: %d, batch_size: 64, seed: 3, eval_every: -1, log_every: 1}\n"
           "optimizer: {name: momentum, lr: 0.05}\n"
           "parallel: {mode: %s%s}\n"
           "log: {progress: off, metrics: '%s/m.jsonl', profile: %s, trace: '%s/t.json', profile_start: 3}\n",
           ts_test_fashion_mnist_dir(), steps, mode, par, dir, profile, dir);
  ts_config cfg;
  int rc = ts_config_load_string(y, "prof-test.yaml", NULL, 0, &cfg);
  CHECK_OK(rc);
  ts_trainer *t = NULL;
  if (!rc) CHECK_OK(rc = ts_trainer_create(&cfg, &t));
  if (rc) return rc;
  if (slow) CHECK_OK(ts_plan_add_hook(ts_trainer_plan_handle(t), slow_hook, slow));
  CHECK_OK(rc = ts_trainer_fit(t));
  ts_trainer_free(t);
  return rc;
}

static int run(const char *dir, const char *mode, const char *profile, int steps, slow_ctx *slow) {
  return run_par(dir, mode, "", profile, steps, slow);
}

/* The metrics file's records: step_ms per step into ms[], the profile record returned. */
static cJSON *read_metrics(const char *dir, double *ms, int max) {
  char path[512], line[65536];
  snprintf(path, sizeof path, "%s/m.jsonl", dir);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL);
  if (!f) return NULL;
  cJSON *prof = NULL;
  while (fgets(line, sizeof line, f)) {
    cJSON *j = cJSON_Parse(line);
    CHECK_MSG(j != NULL, "metrics line is not JSON: %.80s", line);
    if (!j) continue;
    const char *type = cJSON_GetObjectItem(j, "type")->valuestring;
    if (!strcmp(type, "step")) {
      int s = (int)cJSON_GetObjectItem(j, "step")->valuedouble;
      if (s >= 0 && s < max) ms[s] = cJSON_GetObjectItem(j, "step_ms")->valuedouble;
      CHECK(cJSON_GetObjectItem(j, "grad_norm")->valuedouble > 0); /* computed without clipping */
      CHECK((s >= 3) == (cJSON_GetObjectItem(j, "forward_ms") != NULL)); /* profiled from step 3 */
    }
    if (!strcmp(type, "profile")) {
      cJSON_Delete(prof);
      prof = j;
      continue;
    }
    cJSON_Delete(j);
  }
  fclose(f);
  return prof;
}

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItem(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* "<op>_<digits>" as a whole (the leaf after the last '/'): the generic node name. */
static int generic_name(const char *nm) {
  const char *leaf = strrchr(nm, '/');
  leaf = leaf ? leaf + 1 : nm;
  const char *u = strrchr(leaf, '_');
  if (!u || !u[1] || u == leaf) return 0;
  for (const char *c = u + 1; *c; c++)
    if (*c < '0' || *c > '9') return 0;
  return 1;
}

/* A backward operator's name: "<forward>:bwd" where <forward> is the name of a forward node
 * event of the trace (or a parameter's, for its gradient's copy: "fc1/weight:bwd"), not generic. */
static int backward_named(const char *nm, const cJSON *evs) {
  size_t L = strlen(nm);
  if (L <= 4 || strcmp(nm + L - 4, ":bwd") || generic_name(nm)) return 0;
  if (strstr(nm, ".weight:bwd") || strstr(nm, ".bias:bwd")) return 1; /* fc1.weight:bwd */
  const cJSON *e;
  cJSON_ArrayForEach(e, evs) {
    const cJSON *args = cJSON_GetObjectItem(e, "args"), *ph = cJSON_GetObjectItem(args, "phase");
    const char *fn = cJSON_GetObjectItem(e, "name")->valuestring;
    if (cJSON_IsString(ph) && !strcmp(ph->valuestring, "forward") && strlen(fn) == L - 4 && !strncmp(fn, nm, L - 4))
      return 1;
  }
  return 0;
}

static void test_trace_run(const char *dir) {
  const int steps = 10;
  if (run(dir, "stand_alone", "trace", steps, NULL)) return;
  double ms[32] = {0};
  cJSON *prof = read_metrics(dir, ms, 32);
  CHECK(prof && num(prof, "steps") == steps - 2);
  cJSON *profops = prof ? cJSON_DetachItemFromObject(prof, "operators") : NULL;
  cJSON_Delete(prof);
  char path[512];
  snprintf(path, sizeof path, "%s/t.json", dir);
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  if (!f) return;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *buf = malloc((size_t)n + 1);
  CHECK(fread(buf, 1, (size_t)n, f) == (size_t)n);
  buf[n] = 0;
  fclose(f);
  cJSON *root = cJSON_Parse(buf);
  free(buf);
  CHECK_MSG(root != NULL, "%s does not parse as JSON", path);
  if (!root) return;
  const cJSON *evs = cJSON_GetObjectItem(root, "traceEvents"), *e;
  CHECK(cJSON_IsArray(evs));
  double top_sum[32] = {0}, step_dur[32] = {0}, last_end[32];
  int nx = 0, nodes = 0, bad = 0, overlap = 0, outside = 0;
  for (int s = 0; s < 32; s++) last_end[s] = -1e300;
  double fb_t0[4096], fb_t1[4096];
  int nfb = 0;
  cJSON_ArrayForEach(e, evs) {
    if (strcmp(cJSON_GetObjectItem(e, "ph")->valuestring, "X")) continue;
    nx++;
    const cJSON *ts = cJSON_GetObjectItem(e, "ts"), *dur = cJSON_GetObjectItem(e, "dur");
    if (!cJSON_IsNumber(ts) || !cJSON_IsNumber(dur) || !cJSON_IsNumber(cJSON_GetObjectItem(e, "pid")) ||
        !cJSON_IsNumber(cJSON_GetObjectItem(e, "tid")) || !cJSON_IsString(cJSON_GetObjectItem(e, "name"))) {
      bad++;
      continue;
    }
    const cJSON *args = cJSON_GetObjectItem(e, "args");
    int step = (int)num(args, "step");
    const char *cat = cJSON_GetObjectItem(e, "cat")->valuestring, *kind = cJSON_GetObjectItem(args, "kind")->valuestring;
    if (step < 0 || step >= 32) continue;
    if (!strcmp(kind, "step")) step_dur[step] = dur->valuedouble;
    if (!strcmp(kind, "node")) nodes++;
    if (!strcmp(kind, "forward") || !strcmp(kind, "backward")) {
      if (nfb < 4096) fb_t0[nfb] = ts->valuedouble, fb_t1[nfb++] = ts->valuedouble + dur->valuedouble;
    }
    if (!strcmp(cat, "trainer") && strcmp(kind, "eval") && strcmp(kind, "checkpoint") &&
        (int)num(e, "tid") == 0) { /* the main thread's top-level spans, in time order */
      top_sum[step] += dur->valuedouble;
      if (ts->valuedouble < last_end[step] - 0.01) overlap++;
      last_end[step] = ts->valuedouble + dur->valuedouble;
    }
  }
  CHECK(bad == 0);
  CHECK(overlap == 0);
  CHECK(nodes > 0 && nx > nodes);
  /* backward nodes carry their forward node's name + ":bwd" (not "matmul_12") */
  int nbwd = 0, misnamed = 0;
  cJSON_ArrayForEach(e, evs) {
    const cJSON *args = cJSON_GetObjectItem(e, "args"), *ph = cJSON_GetObjectItem(args, "phase");
    if (strcmp(cJSON_GetObjectItem(e, "ph")->valuestring, "X") || !cJSON_IsString(ph) || strcmp(ph->valuestring, "backward"))
      continue;
    nbwd++;
    const char *nm = cJSON_GetObjectItem(e, "name")->valuestring;
    if (!backward_named(nm, evs) && misnamed++ < 3) CHECK_MSG(0, "backward event named '%s'", nm);
  }
  CHECK_MSG(nbwd > 0 && misnamed == 0, "%d of %d backward events without a forward name + ':bwd'", misnamed, nbwd);
  /* every node event lies inside a forward or backward span */
  cJSON_ArrayForEach(e, evs) {
    if (strcmp(cJSON_GetObjectItem(e, "ph")->valuestring, "X")) continue;
    const cJSON *args = cJSON_GetObjectItem(e, "args");
    if (strcmp(cJSON_GetObjectItem(args, "kind")->valuestring, "node")) continue;
    double t0 = num(e, "ts"), t1 = t0 + num(e, "dur");
    int in = 0;
    for (int i = 0; i < nfb && !in; i++) in = t0 >= fb_t0[i] - 0.01 && t1 <= fb_t1[i] + 0.01;
    outside += !in;
  }
  CHECK(outside == 0);
  /* the top-level spans cover the step: within 5% of the trainer's time in the best step (a
   * preemption between two spans of a sub-millisecond step is time no span covers: every step
   * within half its time plus 0.1 ms, so a loaded host does not fail it) */
  double best = 1e30;
  for (int s = 3; s <= steps; s++) {
    CHECK_MSG(step_dur[s] > 0, "no step event for step %d", s);
    const double gap = fabs(top_sum[s] / 1e3 - ms[s]);
    if (ms[s] > 0 && gap / ms[s] < best) best = gap / ms[s];
    CHECK_MSG(gap <= 0.5 * ms[s] + 0.1, "step %d: top-level spans sum to %.3f ms, the trainer measured %.3f ms", s,
              top_sum[s] / 1e3, ms[s]);
    CHECK(fabs(step_dur[s] / 1e3 - ms[s]) <= 0.01 * ms[s] + 0.002);
  }
  CHECK_MSG(best <= 0.05, "the top-level spans sum %.1f%% away from the trainer's step time in the best step", 100 * best);
  CHECK(step_dur[1] == 0 && step_dur[2] == 0); /* before log.profile_start */
  /* the summary's per-operator rows (the profile record) of backward: named the same way */
  int nrows = 0, brows = 0;
  const cJSON *o;
  cJSON_ArrayForEach(o, profops) {
    nrows++;
    const char *nm = cJSON_GetObjectItem(o, "name")->valuestring;
    if (strcmp(cJSON_GetObjectItem(o, "phase")->valuestring, "backward")) continue;
    brows++;
    CHECK_MSG(backward_named(nm, evs), "summary row '%s' (backward)", nm);
  }
  CHECK(nrows > 0 && brows > 0);
  cJSON_Delete(profops);
  cJSON_Delete(root);
  char *text = NULL;
  CHECK_OK(ts_prof_trace_summary(path, 10, &text));
  CHECK(text && strstr(text, "dense") && strstr(text, "op type"));
  free(text);
  snprintf(path, sizeof path, "%s/m.jsonl", dir);
  EXPECT_ERR(ts_prof_trace_summary(path, 10, &text), TS_EFORMAT, "m.jsonl", "not a Chrome trace");
}

static void test_slow_op(const char *dir) {
  slow_ctx s = {-1, 0, NULL, "", 0};
  if (run(dir, "stand_alone", "summary", 6, &s)) return;
  CHECK(s.slept == 6);
  double ms[32] = {0};
  cJSON *prof = read_metrics(dir, ms, 32);
  CHECK(prof != NULL);
  if (!prof) return;
  const cJSON *top = cJSON_GetArrayItem(cJSON_GetObjectItem(prof, "operators"), 0);
  CHECK_MSG(top && s.target && !strcmp(cJSON_GetObjectItem(top, "name")->valuestring, s.name), "top %s, slowed %s",
            top ? cJSON_GetObjectItem(top, "name")->valuestring : "-", s.name);
  double mean = num(top, "mean_ms");
  CHECK_MSG(mean >= 19.5 && mean < 35, "the slowed operator %s: %.3f ms per call, expected about 20", s.name, mean);
  CHECK(num(top, "calls") == 4);
  cJSON_Delete(prof);
}

static void test_straggler(const char *dir, int rank) {
  slow_ctx s = {1, rank, NULL, "", 0};
  if (run(dir, "data_parallel", "summary", 8, &s)) return;
  CHECK(s.slept == (rank == 1 ? 8 : 0));
  if (rank != 0) return;
  double ms[32] = {0};
  cJSON *prof = read_metrics(dir, ms, 32);
  CHECK(prof != NULL);
  if (!prof) return;
  CHECK(num(prof, "straggler") == 1);
  const cJSON *txt = cJSON_GetObjectItem(prof, "straggler_text");
  CHECK(cJSON_IsString(txt) && strstr(txt->valuestring, "rank 1"));
  if (cJSON_IsString(txt)) printf("  %s\n", txt->valuestring);
  const cJSON *r0 = cJSON_GetArrayItem(cJSON_GetObjectItem(prof, "ranks"), 0);
  CHECK(num(r0, "comm_exposed_ms") > 10); /* rank 0 waits for rank 1 in the gradient reduction */
  cJSON_Delete(prof);
}

static cJSON *read_trace(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/t.json", dir);
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *buf = malloc((size_t)n + 1);
  CHECK(fread(buf, 1, (size_t)n, f) == (size_t)n);
  buf[n] = 0;
  fclose(f);
  cJSON *root = cJSON_Parse(buf);
  free(buf);
  CHECK_MSG(root != NULL, "%s does not parse as JSON", path);
  return root;
}

/* Data parallel on 2 ranks with small buckets (the MLP 784-128-10 in several): on each rank, every
 * step has one span per bucket of `cat` (allreduce, reduce_scatter, allgather), each on its
 * bucket's own track, from issue to completion inside the step, with the bucket's payload as bytes
 * (summing to the gradients' bytes) and args dtype, ranks and observed_at. */
#define MLP_GRAD_BYTES (4 * (784 * 128 + 128 + 128 * 10 + 10))
static void check_bucket_spans(const cJSON *evs, const char *cat, int steps) {
  enum { MAXB = 64, MAXS = 32 };
  double st0[2][MAXS], st1[2][MAXS];
  memset(st0, 0, sizeof st0);
  memset(st1, 0, sizeof st1);
  const cJSON *e;
  cJSON_ArrayForEach(e, evs) { /* the steps' intervals, per rank */
    const cJSON *args = cJSON_GetObjectItem(e, "args");
    if (strcmp(cJSON_GetObjectItem(e, "ph")->valuestring, "X") || strcmp(cJSON_GetObjectItem(args, "kind")->valuestring, "step"))
      continue;
    int pid = (int)num(e, "pid"), s = (int)num(args, "step");
    if (pid < 0 || pid > 1 || s < 0 || s >= MAXS) continue;
    st0[pid][s] = num(e, "ts");
    st1[pid][s] = num(e, "ts") + num(e, "dur");
  }
  int count[2][MAXS][MAXB], tid_of[2][MAXB], nbk[2] = {0, 0}, bad_args = 0, outside = 0, negative = 0, bad_tid = 0;
  int prefetched = 0;
  double bytes[2][MAXS];
  memset(count, 0, sizeof count);
  memset(bytes, 0, sizeof bytes);
  for (int r = 0; r < 2; r++)
    for (int k = 0; k < MAXB; k++) tid_of[r][k] = -1;
  cJSON_ArrayForEach(e, evs) {
    const cJSON *args = cJSON_GetObjectItem(e, "args");
    if (strcmp(cJSON_GetObjectItem(e, "ph")->valuestring, "X") || strcmp(cJSON_GetObjectItem(e, "cat")->valuestring, cat))
      continue;
    int pid = (int)num(e, "pid"), s = (int)num(args, "step"), k = (int)num(args, "bucket"), tid = (int)num(e, "tid");
    char want[64];
    snprintf(want, sizeof want, "%s bucket %d", cat, k);
    CHECK_MSG(!strcmp(cJSON_GetObjectItem(e, "name")->valuestring, want), "span '%s', want '%s'",
              cJSON_GetObjectItem(e, "name")->valuestring, want);
    CHECK(!strcmp(cJSON_GetObjectItem(args, "kind")->valuestring, "collective"));
    if (pid < 0 || pid > 1 || s < 3 || s > steps || k < 0 || k >= MAXB) {
      CHECK_MSG(0, "%s span of rank %d step %d bucket %d", cat, pid, s, k);
      continue;
    }
    count[pid][s][k]++;
    if (k + 1 > nbk[pid]) nbk[pid] = k + 1;
    bytes[pid][s] += num(args, "bytes");
    const cJSON *dt = cJSON_GetObjectItem(args, "dtype"), *ob = cJSON_GetObjectItem(args, "observed_at");
    bad_args += !cJSON_IsString(dt) || strcmp(dt->valuestring, "f32") || num(args, "ranks") != 2 || !cJSON_IsString(ob) ||
                (strcmp(ob->valuestring, "test") && strcmp(ob->valuestring, "wait") && strcmp(ob->valuestring, "blocking"));
    double t0 = num(e, "ts"), d = num(e, "dur");
    negative += !(d >= 0);
    /* ZeRO's all-gathers of the updated parameters run into the next step's forward (prefetched):
     * issued at the end of the previous step, completed in the step they are recorded in (the
     * last step's own complete after it, when the run ends) */
    const cJSON *pf = cJSON_GetObjectItem(args, "prefetched");
    int pre = cJSON_IsTrue(pf);
    prefetched += pre;
    if (pre) outside += !(st1[pid][s] > 0 && t0 >= (s > 0 && st0[pid][s - 1] > 0 ? st0[pid][s - 1] : st0[pid][s] - 1e4) - 0.01 &&
                          (t0 + d <= st1[pid][s] + 0.01 || s == steps));
    else outside += !(st1[pid][s] > 0 && t0 >= st0[pid][s] - 0.01 && t0 + d <= st1[pid][s] + 0.01);
    if (tid_of[pid][k] < 0) tid_of[pid][k] = tid;
    bad_tid += tid < TS_PROF_TRACK_TID || tid != tid_of[pid][k];
  }
  CHECK_MSG(bad_args == 0, "%s: %d spans without dtype f32, ranks 2 and observed_at", cat, bad_args);
  CHECK_MSG(negative == 0 && outside == 0, "%s: %d spans of negative duration, %d outside their step", cat, negative, outside);
  CHECK_MSG(bad_tid == 0, "%s: %d spans not on their bucket's own track", cat, bad_tid);
  for (int r = 0; r < 2; r++) {
    CHECK_MSG(nbk[r] >= 2, "%s: rank %d has %d buckets (want several)", cat, r, nbk[r]);
    CHECK(nbk[r] == nbk[0]);
    for (int k = 0; k < nbk[r]; k++)
      for (int j = 0; j < k; j++) CHECK(tid_of[r][k] != tid_of[r][j]);
    for (int s = 3; s <= steps; s++) {
      /* prefetched, the last step also holds its own update's gathers, completed after it */
      int per = prefetched && s == steps ? 2 : 1;
      for (int k = 0; k < nbk[r]; k++)
        CHECK_MSG(count[r][s][k] == per, "%s: rank %d step %d bucket %d: %d spans (want %d)", cat, r, s, k,
                  count[r][s][k], per);
      CHECK_MSG(bytes[r][s] == per * MLP_GRAD_BYTES, "%s: rank %d step %d: buckets of %.0f bytes, the gradients are %d",
                cat, r, s, bytes[r][s], MLP_GRAD_BYTES);
    }
  }
}

static void test_bucket_spans(const char *dir, int rank, ts_comm *w) {
  static const char *const par[] = {", bucket_size_mb: 0.1", ", bucket_size_mb: 0.1, optimizer_shard: 1, optimizer_shard_threshold_kb: 0"};
  const int steps = 5;
  for (int v = 0; v < 2; v++) {
    if (run_par(dir, "data_parallel", par[v], "trace", steps, NULL)) return;
    if (rank == 0) {
      cJSON *root = read_trace(dir);
      const cJSON *evs = root ? cJSON_GetObjectItem(root, "traceEvents") : NULL;
      if (evs) {
        check_bucket_spans(evs, v ? "reduce_scatter" : "allreduce", steps);
        if (v) check_bucket_spans(evs, "allgather", steps);
      }
      cJSON_Delete(root);
    }
    ts_comm_barrier(w); /* the trace read before the next run rewrites it */
  }
}

int main(int argc, char **argv) {
  test_ring();
  test_summary();
  if (!ts_test_have_fashion_mnist()) return ts_test_finish("test_prof");
  CHECK_OK(ts_comm_init(&argc, &argv));
  ts_comm *w;
  CHECK_OK(ts_comm_world(&w));
  int rank = ts_comm_rank(w), size = ts_comm_size(w);
  char dir[256] = "/tmp/tessera-prof-XXXXXX";
  if (rank == 0 && !mkdtemp(dir)) CHECK(0);
  CHECK_OK(ts_comm_broadcast(w, dir, sizeof dir, TS_U8, 0));
  if (size == 1) {
    test_trace_run(dir);
    test_slow_op(dir);
  } else {
    test_straggler(dir, rank);
    if (size == 2) test_bucket_spans(dir, rank, w);
  }
  ts_comm_barrier(w);
  if (rank == 0) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
  }
  ts_comm_free(w);
  return ts_test_finish_job("test_prof");
}
