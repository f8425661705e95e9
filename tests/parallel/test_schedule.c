/* Pipeline schedules (src/parallel/schedule.h): every kind over P 1..8, M 1..32, V 1..4 is
 * valid (each op once, FIFO order per (phase, chunk), no deadlock), holds the activations the
 * algorithm promises (1f1b: min(P-s, M); gpipe: M), and its simulated bubble with uniform costs
 * and free transfers is the textbook (P-1)/(V*M+P-1) exactly (interleaved included: Megatron's
 * schedule reaches the formula); simulations with uneven costs and transfers against times worked
 * out by hand; the refusals name their config key; broken hand-made schedules (deadlocks across
 * ranks, through the interleaved wrap edge and within one rank, duplicates, wrong order, missing
 * and out-of-range ops) are caught; the drawing of 1f1b P=4 M=8 against a golden copy. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/schedule_internal.h"
#include "parallel/schedule.h"
#include "test_util.h"

/* The number of leading forwards of a stage's list (the warm-up plus the first steady forward). */
static int leading_forwards(const ts_sched_op *o, int n) {
  int i = 0;
  while (i < n && !o[i].bwd) i++;
  return i;
}

/* Independent checks of one generated schedule; returns 1 if all held. */
static int check_one(ts_sched_kind kind, int P, int M, int V) {
  int before = ts_test_failures;
  ts_schedule *s = NULL;
  CHECK_OK(ts_schedule_create(kind, P, M, V, &s));
  if (!s) return 0;
  CHECK(ts_schedule_stages(s) == P && ts_schedule_micro(s) == M && ts_schedule_virtual(s) == V &&
        ts_schedule_kind(s) == kind);
  int rc = ts_schedule_check(s);
  CHECK_MSG(rc == TS_OK, "%s P=%d M=%d V=%d: %s", ts_sched_kind_name(kind), P, M, V, ts_last_error());

  int *seen = calloc((size_t)2 * V * M, sizeof *seen), *last = malloc((size_t)2 * V * sizeof *last);
  for (int st = 0; st < P; st++) {
    const ts_sched_op *o;
    int n = ts_schedule_ops(s, st, &o);
    CHECK_MSG(n == 2 * M * V, "stage %d has %d ops", st, n);
    memset(seen, 0, (size_t)2 * V * M * sizeof *seen);
    for (int j = 0; j < 2 * V; j++) last[j] = -1;
    int inorder = 1, inrange = 1;
    for (int i = 0; i < n; i++) {
      if (o[i].bwd < 0 || o[i].bwd > 1 || o[i].micro < 0 || o[i].micro >= M || o[i].chunk < 0 || o[i].chunk >= V) {
        inrange = 0;
        continue;
      }
      int lane = o[i].bwd * V + o[i].chunk;
      seen[lane * M + o[i].micro]++;
      if (o[i].micro <= last[lane]) inorder = 0;
      last[lane] = o[i].micro;
    }
    CHECK(inrange);
    CHECK_MSG(inorder, "%s P=%d M=%d V=%d stage %d: micro-batches out of order", ts_sched_kind_name(kind), P, M, V, st);
    int once = 1;
    for (int j = 0; j < 2 * V * M; j++) once &= seen[j] == 1;
    CHECK_MSG(once, "%s P=%d M=%d V=%d stage %d: an op is missing or repeated", ts_sched_kind_name(kind), P, M, V, st);

    /* warm-up lengths and in-flight activations as the algorithms state them */
    int lead = leading_forwards(o, n);
    if (kind == TS_SCHED_GPIPE) {
      CHECK(lead == M);
      CHECK_MSG(ts_schedule_max_inflight(s, st, 0) == M, "gpipe P=%d M=%d stage %d: %d in flight", P, M, st,
                ts_schedule_max_inflight(s, st, 0));
    } else if (kind == TS_SCHED_1F1B) {
      int want = P - st < M ? P - st : M;
      CHECK_MSG(lead == want, "1f1b P=%d M=%d stage %d: %d leading forwards", P, M, st, lead);
      CHECK_MSG(ts_schedule_max_inflight(s, st, 0) == want, "1f1b P=%d M=%d stage %d: %d in flight, want %d", P, M,
                st, ts_schedule_max_inflight(s, st, 0), want);
    } else {
      int w = (P - st - 1) * 2 + (V - 1) * P;
      int want = w >= M * V ? M * V : w + 1;
      CHECK_MSG(lead == want, "interleaved P=%d M=%d V=%d stage %d: %d leading forwards, want %d", P, M, V, st, lead,
                want);
      /* forward order: groups of P micro-batches through chunk 0, 1, ... */
      CHECK(o[0].micro == 0 && o[0].chunk == 0);
      if (lead > P && V > 1) CHECK(o[P].chunk == 1 && o[P].micro == 0);
      for (int c = 0; c < V; c++) {
        int f = ts_schedule_max_inflight(s, st, c);
        CHECK(f >= 1 && f <= M);
      }
    }
  }
  free(seen);
  free(last);

  /* uniform costs (1, 2) and free transfers: exactly the textbook bubble */
  ts_sched_sim r;
  CHECK_OK(ts_schedule_simulate(s, NULL, NULL, 0, &r));
  double f = ts_schedule_bubble_formula(kind, P, M, V);
  CHECK_MSG(fabs(r.bubble - f) <= 1e-9, "%s P=%d M=%d V=%d: bubble %.12f, formula %.12f", ts_sched_kind_name(kind), P,
            M, V, r.bubble, f);
  CHECK_MSG(r.makespan == 3.0 * (V * M + P - 1), "%s P=%d M=%d V=%d: makespan %g", ts_sched_kind_name(kind), P, M, V,
            r.makespan);
  CHECK(r.busy_max == 3.0 * M * V && r.idle_max == r.makespan - r.busy_max);
  /* and so with backward as cheap as forward, or three times dearer */
  double ones[32], threes[32];
  for (int k = 0; k < P * V; k++) ones[k] = 1, threes[k] = 3;
  CHECK_OK(ts_schedule_simulate(s, ones, ones, 0, &r));
  CHECK_MSG(fabs(r.bubble - f) <= 1e-9, "%s P=%d M=%d V=%d, backward 1: bubble %.12f", ts_sched_kind_name(kind), P, M,
            V, r.bubble);
  CHECK_OK(ts_schedule_simulate(s, ones, threes, 0, &r));
  CHECK_MSG(fabs(r.bubble - f) <= 1e-9, "%s P=%d M=%d V=%d, backward 3: bubble %.12f", ts_sched_kind_name(kind), P, M,
            V, r.bubble);
  /* transfers only add time */
  CHECK_OK(ts_schedule_simulate(s, NULL, NULL, 0.25, &r));
  CHECK(r.makespan >= 3.0 * (V * M + P - 1) && (P == 1 || r.makespan > 3.0 * (V * M + P - 1)));
  ts_schedule_free(s);
  return ts_test_failures == before;
}

static void test_enumerate(void) {
  int n[3] = {0, 0, 0}, refused = 0;
  for (int kind = 0; kind < 3; kind++)
    for (int P = 1; P <= 8; P++)
      for (int M = 1; M <= 32; M++)
        for (int V = 1; V <= 4; V++) {
          int valid = kind == TS_SCHED_INTERLEAVED ? M % P == 0 : V == 1;
          if (!valid) {
            ts_schedule *s = (ts_schedule *)&n; /* must come back NULL */
            int rc = ts_schedule_create((ts_sched_kind)kind, P, M, V, &s);
            CHECK_MSG(rc == TS_ECONFIG && !s, "%s P=%d M=%d V=%d accepted", ts_sched_kind_name(kind), P, M, V);
            refused++;
            continue;
          }
          check_one((ts_sched_kind)kind, P, M, V);
          n[kind]++;
        }
  CHECK(n[0] == 256 && n[1] == 256 && n[2] == 340);
  printf("enumerate: %d gpipe, %d 1f1b, %d interleaved schedules valid with the formula's bubble; %d refused\n", n[0],
         n[1], n[2], refused);
}

static void test_refusals(void) {
  ts_schedule *s = NULL;
  ts_sched_kind k = TS_SCHED_GPIPE;
  CHECK_OK(ts_sched_kind_parse("gpipe", &k));
  CHECK(k == TS_SCHED_GPIPE);
  CHECK_OK(ts_sched_kind_parse("1f1b", &k));
  CHECK(k == TS_SCHED_1F1B);
  CHECK_OK(ts_sched_kind_parse("interleaved_1f1b", &k));
  CHECK(k == TS_SCHED_INTERLEAVED);
  for (int i = 0; i < 3; i++) {
    CHECK_OK(ts_sched_kind_parse(ts_sched_kind_name((ts_sched_kind)i), &k));
    CHECK(k == (ts_sched_kind)i);
  }
  CHECK(strcmp(ts_sched_kind_name((ts_sched_kind)7), "?") == 0);
  EXPECT_ERR(ts_sched_kind_parse("interleaved", &k), TS_ECONFIG, "parallel.pipeline_schedule", "'interleaved'",
             "gpipe", "1f1b", "interleaved_1f1b");
  EXPECT_ERR(ts_sched_kind_parse("GPipe", &k), TS_ECONFIG, "parallel.pipeline_schedule");
  EXPECT_ERR(ts_sched_kind_parse(NULL, &k), TS_ECONFIG, "parallel.pipeline_schedule");

  EXPECT_ERR(ts_schedule_create(TS_SCHED_1F1B, 0, 4, 1, &s), TS_ECONFIG, "parallel.pipeline_stages", "0");
  EXPECT_ERR(ts_schedule_create(TS_SCHED_1F1B, -3, 4, 1, &s), TS_ECONFIG, "parallel.pipeline_stages", "-3");
  EXPECT_ERR(ts_schedule_create(TS_SCHED_1F1B, 4097, 4, 1, &s), TS_ECONFIG, "parallel.pipeline_stages", "4096");
  EXPECT_ERR(ts_schedule_create(TS_SCHED_GPIPE, 4, 0, 1, &s), TS_ECONFIG, "parallel.micro_batches", "0");
  EXPECT_ERR(ts_schedule_create(TS_SCHED_GPIPE, 4, (1 << 20) + 1, 1, &s), TS_ECONFIG, "parallel.micro_batches",
             "1048576");
  EXPECT_ERR(ts_schedule_create(TS_SCHED_INTERLEAVED, 4, 8, 0, &s), TS_ECONFIG, "parallel.virtual_stages", "0");
  EXPECT_ERR(ts_schedule_create(TS_SCHED_INTERLEAVED, 4, 8, 65, &s), TS_ECONFIG, "parallel.virtual_stages", "64");
  EXPECT_ERR(ts_schedule_create(TS_SCHED_GPIPE, 4, 8, 2, &s), TS_ECONFIG, "parallel.virtual_stages", "interleaved_1f1b",
             "gpipe");
  EXPECT_ERR(ts_schedule_create(TS_SCHED_1F1B, 4, 8, 2, &s), TS_ECONFIG, "parallel.virtual_stages", "interleaved_1f1b",
             "1f1b");
  EXPECT_ERR(ts_schedule_create(TS_SCHED_INTERLEAVED, 4, 6, 2, &s), TS_ECONFIG, "parallel.micro_batches", "6",
             "multiple of parallel.pipeline_stages 4");
  EXPECT_ERR(ts_schedule_create(TS_SCHED_INTERLEAVED, 4096, 1 << 20, 64, &s), TS_ECONFIG, "parallel.micro_batches",
             "parallel.pipeline_stages", "parallel.virtual_stages");
  CHECK(s == NULL);
  EXPECT_ERR(ts_schedule_create((ts_sched_kind)3, 4, 8, 1, &s), TS_EINVAL, "kind 3");
  EXPECT_ERR(ts_schedule_create(TS_SCHED_1F1B, 4, 8, 1, NULL), TS_EINVAL, "NULL");
  /* the bounds themselves are accepted */
  CHECK_OK(ts_schedule_create(TS_SCHED_1F1B, 4096, 8, 1, &s));
  CHECK_OK(ts_schedule_check(s));
  CHECK(ts_schedule_max_inflight(s, 0, 0) == 8 && ts_schedule_max_inflight(s, 4095, 0) == 1);
  ts_schedule_free(s);
  CHECK_OK(ts_schedule_create(TS_SCHED_INTERLEAVED, 2, 2, 64, &s));
  CHECK_OK(ts_schedule_check(s));
  ts_schedule_free(s);
  ts_schedule_free(NULL);

  /* bad arguments of the accessors */
  CHECK_OK(ts_schedule_create(TS_SCHED_INTERLEAVED, 2, 4, 2, &s));
  const ts_sched_op *o = (const ts_sched_op *)s;
  EXPECT_ERR(ts_schedule_ops(s, 2, &o), TS_EINVAL, "stage 2", "0..1");
  CHECK(o == NULL);
  EXPECT_ERR(ts_schedule_ops(s, -1, &o), TS_EINVAL, "stage -1");
  EXPECT_ERR(ts_schedule_max_inflight(s, 0, 2), TS_EINVAL, "chunk 2");
  EXPECT_ERR(ts_schedule_max_inflight(s, 5, 0), TS_EINVAL, "stage 5");
  ts_sched_sim r;
  double neg[4] = {1, 1, -1, 1}, nan4[4] = {1, NAN, 1, 1};
  EXPECT_ERR(ts_schedule_simulate(s, neg, NULL, 0, &r), TS_EINVAL, "piece 2");
  EXPECT_ERR(ts_schedule_simulate(s, NULL, nan4, 0, &r), TS_EINVAL, "piece 1");
  EXPECT_ERR(ts_schedule_simulate(s, NULL, NULL, -0.5, &r), TS_EINVAL, "p2p");
  EXPECT_ERR(ts_schedule_simulate(s, NULL, NULL, INFINITY, &r), TS_EINVAL, "p2p");
  EXPECT_ERR(ts_schedule_simulate_stage(s, NULL, NULL, 0, 2, NULL, NULL, NULL, NULL), TS_EINVAL, "stage 2");
  EXPECT_ERR(ts_schedule_draw(s, stdout, 10), TS_EINVAL, "max_cols 10");
  ts_schedule_free(s);

  CHECK(fabs(ts_schedule_bubble_formula(TS_SCHED_1F1B, 4, 8, 1) - 3.0 / 11) < 1e-15);
  CHECK(fabs(ts_schedule_bubble_formula(TS_SCHED_GPIPE, 4, 8, 2) - 3.0 / 11) < 1e-15); /* V ignored */
  CHECK(fabs(ts_schedule_bubble_formula(TS_SCHED_INTERLEAVED, 4, 8, 2) - 3.0 / 19) < 1e-15);
  CHECK(ts_schedule_bubble_formula(TS_SCHED_GPIPE, 1, 5, 1) == 0);
  CHECK(isnan(ts_schedule_bubble_formula(TS_SCHED_1F1B, 0, 8, 1)));
  CHECK(isnan(ts_schedule_bubble_formula(TS_SCHED_1F1B, 4, 0, 1)));
  CHECK(isnan(ts_schedule_bubble_formula((ts_sched_kind)5, 4, 8, 1)));
  printf("refusals: kind names, 11 refused sizes naming their key, accessor and cost arguments\n");
}

#define F(m, c) {0, m, c}
#define B(m, c) {1, m, c}

/* A hand-made schedule of P stages (lists of n[s] ops); NULL with a failed CHECK on error. */
static ts_schedule *hand(ts_sched_kind kind, int P, int M, int V, const ts_sched_op *const *lists, const int *n) {
  ts_schedule *s = NULL;
  CHECK_OK(ts__schedule_from_lists(kind, P, M, V, lists, n, &s));
  return s;
}

static void test_broken(void) {
  ts_sched_sim r;
  /* a valid one written by hand passes: 1f1b, P = 2, M = 2 */
  {
    const ts_sched_op s0[] = {F(0, 0), F(1, 0), B(0, 0), B(1, 0)}, s1[] = {F(0, 0), B(0, 0), F(1, 0), B(1, 0)};
    const ts_sched_op *l[] = {s0, s1};
    ts_schedule *s = hand(TS_SCHED_1F1B, 2, 2, 1, l, (int[]){4, 4});
    CHECK_OK(ts_schedule_check(s));
    /* and it is the generated one */
    ts_schedule *g = NULL;
    CHECK_OK(ts_schedule_create(TS_SCHED_1F1B, 2, 2, 1, &g));
    for (int st = 0; st < 2; st++) {
      const ts_sched_op *a, *b;
      CHECK(ts_schedule_ops(s, st, &a) == 4 && ts_schedule_ops(g, st, &b) == 4);
      CHECK(memcmp(a, b, 4 * sizeof *a) == 0);
    }
    ts_schedule_free(g);
    ts_schedule_free(s);
  }
  /* deadlock across ranks: stage 0 starts backward 0 before forward 1, stage 1 runs both forwards first */
  {
    const ts_sched_op s0[] = {F(0, 0), B(0, 0), F(1, 0), B(1, 0)}, s1[] = {F(0, 0), F(1, 0), B(0, 0), B(1, 0)};
    const ts_sched_op *l[] = {s0, s1};
    ts_schedule *s = hand(TS_SCHED_1F1B, 2, 2, 1, l, (int[]){4, 4});
    EXPECT_ERR(ts_schedule_check(s), TS_EINVAL, "deadlock",
               "stage 0 waits at op 1 (backward of micro-batch 0, chunk 0) for the backward of micro-batch 0 through "
               "piece 1 (stage 1)",
               "stage 1 waits at op 1 (forward of micro-batch 1, chunk 0) for the forward of micro-batch 1 through "
               "piece 0 (stage 0)");
    EXPECT_ERR(ts_schedule_simulate(s, NULL, NULL, 0, &r), TS_EINVAL, "deadlock");
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    EXPECT_ERR(ts_schedule_draw(s, mem, 0), TS_EINVAL, "deadlock");
    fclose(mem);
    CHECK(len == 0); /* nothing drawn */
    free(buf);
    ts_schedule_free(s);
  }
  /* deadlock through the interleaved wrap edge: stage 0 runs chunk 1 (piece 2) of micro-batch 0
     before chunk 0 (piece 0), and piece 2 needs piece 1 on stage 1, which needs piece 0 */
  {
    const ts_sched_op s0[] = {F(0, 1), F(0, 0), F(1, 0), F(1, 1), B(0, 1), B(1, 1), B(0, 0), B(1, 0)};
    const ts_sched_op s1[] = {F(0, 0), F(1, 0), F(0, 1), B(0, 1), F(1, 1), B(1, 1), B(0, 0), B(1, 0)};
    const ts_sched_op *l[] = {s0, s1};
    ts_schedule *s = hand(TS_SCHED_INTERLEAVED, 2, 2, 2, l, (int[]){8, 8});
    EXPECT_ERR(ts_schedule_check(s), TS_EINVAL, "deadlock", "stage 0 waits at op 0", "piece 1 (stage 1)",
               "stage 1 waits at op 0", "piece 0 (stage 0)");
    ts_schedule_free(s);
    /* swapped back, it runs */
    const ts_sched_op t0[] = {F(0, 0), F(1, 0), F(0, 1), F(1, 1), B(0, 1), B(1, 1), B(0, 0), B(1, 0)};
    const ts_sched_op *l2[] = {t0, s1};
    s = hand(TS_SCHED_INTERLEAVED, 2, 2, 2, l2, (int[]){8, 8});
    CHECK_OK(ts_schedule_check(s));
    ts_schedule_free(s);
  }
  /* deadlock within one rank: backward before its own forward */
  {
    const ts_sched_op s0[] = {B(0, 0), F(0, 0)};
    const ts_sched_op *l[] = {s0};
    ts_schedule *s = hand(TS_SCHED_GPIPE, 1, 1, 1, l, (int[]){2});
    EXPECT_ERR(ts_schedule_check(s), TS_EINVAL, "deadlock", "stage 0 waits at op 0", "for the forward of micro-batch 0 through piece 0");
    ts_schedule_free(s);
  }
  /* list errors, each naming stage and op */
  {
    const ts_sched_op dup[] = {F(0, 0), F(0, 0), B(0, 0), B(1, 0)}, ok[] = {F(0, 0), F(1, 0), B(0, 0), B(1, 0)};
    const ts_sched_op *l[] = {ok, dup};
    ts_schedule *s = hand(TS_SCHED_GPIPE, 2, 2, 1, l, (int[]){4, 4});
    EXPECT_ERR(ts_schedule_check(s), TS_EINVAL, "stage 1 op 1", "forward of micro-batch 0", "listed twice", "op 0");
    ts_schedule_free(s);

    const ts_sched_op order[] = {F(1, 0), F(0, 0), B(0, 0), B(1, 0)};
    l[1] = order;
    s = hand(TS_SCHED_GPIPE, 2, 2, 1, l, (int[]){4, 4});
    EXPECT_ERR(ts_schedule_check(s), TS_EINVAL, "stage 1 op 1", "forward of micro-batch 0", "after micro-batch 1",
               "increasing order");
    ts_schedule_free(s);

    const ts_sched_op border[] = {F(0, 0), F(1, 0), B(1, 0), B(0, 0)};
    l[1] = border;
    s = hand(TS_SCHED_GPIPE, 2, 2, 1, l, (int[]){4, 4});
    EXPECT_ERR(ts_schedule_check(s), TS_EINVAL, "stage 1 op 3", "backward of micro-batch 0", "increasing order");
    ts_schedule_free(s);

    l[1] = ok;
    s = hand(TS_SCHED_GPIPE, 2, 2, 1, l, (int[]){4, 3});
    EXPECT_ERR(ts_schedule_check(s), TS_EINVAL, "stage 1", "backward of micro-batch 1, chunk 0 is missing", "3 ops");
    ts_schedule_free(s);

    const ts_sched_op micro[] = {F(0, 0), F(2, 0), B(0, 0), B(1, 0)};
    l[1] = micro;
    s = hand(TS_SCHED_GPIPE, 2, 2, 1, l, (int[]){4, 4});
    EXPECT_ERR(ts_schedule_check(s), TS_EINVAL, "stage 1 op 1", "micro-batch out of 0..1");
    ts_schedule_free(s);

    const ts_sched_op chunk[] = {F(0, 0), F(1, 1), B(0, 0), B(1, 0)};
    l[1] = chunk;
    s = hand(TS_SCHED_GPIPE, 2, 2, 1, l, (int[]){4, 4});
    EXPECT_ERR(ts_schedule_check(s), TS_EINVAL, "stage 1 op 1", "chunk out of 0..0");
    EXPECT_ERR(ts_schedule_simulate(s, NULL, NULL, 0, &r), TS_EINVAL, "chunk out of");
    ts_schedule_free(s);

    const ts_sched_op phase[] = {F(0, 0), F(1, 0), {2, 0, 0}, B(1, 0)};
    l[1] = phase;
    s = hand(TS_SCHED_GPIPE, 2, 2, 1, l, (int[]){4, 4});
    EXPECT_ERR(ts_schedule_check(s), TS_EINVAL, "stage 1 op 2", "phase 2");
    ts_schedule_free(s);
  }
  ts_schedule *s = NULL;
  EXPECT_ERR(ts__schedule_from_lists(TS_SCHED_GPIPE, 0, 1, 1, NULL, NULL, &s), TS_EINVAL, "P=0");
  printf("broken schedules: 3 deadlocks (across ranks, the wrap edge, one rank) and 7 list errors caught\n");
}

/* Simulations with uneven costs and transfers, worked out by hand. */
static void test_simulate(void) {
  ts_schedule *s = NULL;
  ts_sched_sim r;
  /* gpipe P=2 M=1, costs 1/2, p2p 0.5: F s0 [0,1], F s1 [1.5,2.5], B s1 [2.5,4.5], B s0 [5,7] */
  CHECK_OK(ts_schedule_create(TS_SCHED_GPIPE, 2, 1, 1, &s));
  CHECK_OK(ts_schedule_simulate(s, NULL, NULL, 0.5, &r));
  CHECK(r.makespan == 7 && fabs(r.bubble - 4.0 / 7) < 1e-15 && r.busy_max == 3 && r.idle_max == 4);
  double st[2], en[2], busy = 0, idle = 0;
  CHECK_OK(ts_schedule_simulate_stage(s, NULL, NULL, 0.5, 1, st, en, &busy, &idle));
  CHECK(st[0] == 1.5 && en[0] == 2.5 && st[1] == 2.5 && en[1] == 4.5 && busy == 3 && idle == 4);
  CHECK_OK(ts_schedule_simulate_stage(s, NULL, NULL, 0.5, 0, st, en, NULL, NULL));
  CHECK(st[0] == 0 && en[0] == 1 && st[1] == 5 && en[1] == 7);
  ts_schedule_free(s);

  /* 1f1b P=2 M=2 with a slow second piece (forward 1 / 3, backward 2 / 6): stage 0 F0 [0,1] F1 [1,2]
     B0 [10,12] B1 [19,21]; stage 1 F0 [1,4] B0 [4,10] F1 [10,13] B1 [13,19] */
  CHECK_OK(ts_schedule_create(TS_SCHED_1F1B, 2, 2, 1, &s));
  double f[2] = {1, 3}, b[2] = {2, 6}, s4[4], e4[4];
  CHECK_OK(ts_schedule_simulate(s, f, b, 0, &r));
  CHECK(r.makespan == 21 && fabs(r.bubble - 18.0 / 42) < 1e-15 && r.busy_max == 18 && r.idle_max == 15);
  CHECK_OK(ts_schedule_simulate_stage(s, f, b, 0, 0, s4, e4, &busy, &idle));
  CHECK(s4[0] == 0 && s4[1] == 1 && s4[2] == 10 && s4[3] == 19 && e4[3] == 21 && busy == 6 && idle == 15);
  CHECK_OK(ts_schedule_simulate_stage(s, f, b, 0, 1, s4, e4, NULL, NULL));
  CHECK(s4[0] == 1 && s4[1] == 4 && s4[2] == 10 && s4[3] == 13 && e4[3] == 19);
  ts_schedule_free(s);

  /* interleaved P=2 M=2 V=2 with p2p 1: the wrap edge (piece 1 on stage 1 -> piece 2 on stage 0)
     costs a transfer, chunk to chunk on one rank does not (P = 1 below) */
  CHECK_OK(ts_schedule_create(TS_SCHED_INTERLEAVED, 1, 2, 2, &s));
  CHECK_OK(ts_schedule_simulate(s, NULL, NULL, 1, &r));
  CHECK(r.makespan == 12 && r.bubble == 0);
  ts_schedule_free(s);
  CHECK_OK(ts_schedule_create(TS_SCHED_INTERLEAVED, 2, 2, 2, &s));
  double s8[8], e8[8];
  CHECK_OK(ts_schedule_simulate_stage(s, NULL, NULL, 1, 1, s8, e8, NULL, NULL));
  CHECK(s8[0] == 2 && e8[0] == 3); /* piece 1 of micro-batch 0 waits one transfer after piece 0 ends at 1 */
  CHECK_OK(ts_schedule_simulate_stage(s, NULL, NULL, 1, 0, s8, e8, NULL, NULL));
  CHECK(s8[2] == 4); /* piece 2 of micro-batch 0 (stage 0, chunk 1): piece 1 ends at 3, +1 transfer */
  ts_schedule_free(s);
  printf("simulate: gpipe with transfers, 1f1b with a slow piece, interleaved wrap edge, by hand\n");
}

static const char golden_1f1b_4_8[] =
    "1f1b: 4 stages, 8 micro-batches; makespan 33 (forward 1, backward 2), bubble 0.273 (formula 0.273)\n"
    "stage 0 F0 F1 F2 F3 ..................B0    F4 B1    F5 B2    F6 B3    F7 B4    ...B5    ...B6    ...B7\n"
    "stage 1 ...F0 F1 F2 ............B0    F3 B1    F4 B2    F5 B3    F6 B4    F7 B5    ...B6    ...B7    ......\n"
    "stage 2 ......F0 F1 ......B0    F2 B1    F3 B2    F4 B3    F5 B4    F6 B5    F7 B6    ...B7    ............\n"
    "stage 3 .........F0 B0    F1 B1    F2 B2    F3 B3    F4 B4    F5 B5    F6 B6    F7 B7    ..................\n"
    "legend: Fm / Bm forward / backward of micro-batch m, one time unit = 3 columns, '.' idle\n";

static char *draw(ts_sched_kind kind, int P, int M, int V, int max_cols) {
  ts_schedule *s = NULL;
  char *buf = NULL;
  size_t len = 0;
  CHECK_OK(ts_schedule_create(kind, P, M, V, &s));
  FILE *mem = open_memstream(&buf, &len);
  CHECK_OK(ts_schedule_draw(s, mem, max_cols));
  fclose(mem);
  ts_schedule_free(s);
  return buf;
}

static void test_draw(void) {
  char *d = draw(TS_SCHED_1F1B, 4, 8, 1, 0);
  CHECK_MSG(strcmp(d, golden_1f1b_4_8) == 0, "1f1b P=4 M=8 drawn as\n%s", d);
  free(d);
  /* truncated: every stage row is exactly max_cols wide and ends in "..." */
  d = draw(TS_SCHED_1F1B, 4, 8, 1, 40);
  int rows = 0;
  for (char *line = strtok(d, "\n"); line; line = strtok(NULL, "\n"))
    if (strncmp(line, "stage ", 6) == 0) {
      rows++;
      CHECK_MSG(strlen(line) == 40 && strcmp(line + 37, "...") == 0, "truncated row '%s'", line);
    }
  CHECK(rows == 4);
  free(d);
  /* interleaved cells carry the chunk letter; one time unit is 4 columns ("F0a ") */
  d = draw(TS_SCHED_INTERLEAVED, 2, 4, 2, 0);
  CHECK(strstr(d, "\nstage 0 F0a F1a F0b F1b F2a ") != NULL);
  CHECK(strstr(d, "\nstage 1 ....F0a F1a F0b B0b     F1b") != NULL);
  CHECK(strstr(d, "chunk c runs piece c*2 + s") != NULL);
  free(d);
  /* beyond 26 chunks the chunk is a number */
  d = draw(TS_SCHED_INTERLEAVED, 1, 1, 27, 0);
  CHECK(strstr(d, "F0c26") != NULL && strstr(d, "B0c0") != NULL);
  free(d);
  printf("draw: 1f1b P=4 M=8 golden, truncation, chunk labels\n");
}

int main(void) {
  test_enumerate();
  test_refusals();
  test_broken();
  test_simulate();
  test_draw();
  return ts_test_finish("test_schedule");
}
