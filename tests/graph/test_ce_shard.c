/* Class-sharded softmax cross-entropy (ts_softmax_cross_entropy_sharded; Megatron's
 * vocabulary-parallel loss) through the graph, autodiff and executor on this job's ranks:
 * ctest's test_ce_shard (1 process), test_ce_shard_np2 and test_ce_shard_np4 (mpirun).
 *
 * Every rank builds the same full logits (a function of the indices) and computes the reference
 * alone: the unsharded op's loss and dlogits. The sharded op on the rank's block of columns over
 * the world communicator must give the same loss (1e-5 relative; bitwise the same on every rank)
 * and its block of dlogits (1e-5), for: plain, label smoothing 0.1, some labels ignored (-100),
 * every label ignored (loss 0, dlogits 0), labels all on one rank's block, i32 and i64 labels, a
 * row of large logits. The adjoint: loss * w_r with a rank-dependent w_r, and dlogits = (sum_r
 * w_r) * the reference's (the objective is the sum of every rank's loss).
 * Group of one: the sharded op with g = 1 and no communicator equals the unsharded op bit for bit.
 * Errors: at build time C not divisible by g, a bad offset, wrong logits columns, bad slot /
 * group size (message checked); at run time an empty slot, a communicator of the wrong size and a
 * label outside [0,C) (status and message). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/tessera.h"
#include "test_util.h"

static int g_rank, g_size;

static float logit(int64_t i, int64_t j) {
  float v = (float)((i * 7 + j * 13) % 29 - 14) * 0.21f + 0.013f * (float)j;
  return i == 2 ? v + 40.0f : v; /* one row of large logits (max subtraction) */
}

typedef struct {
  const char *name;
  float s;       /* label smoothing */
  int i64;       /* label dtype */
  int64_t N, C;
  int64_t labels[16];
} ce_case;

static void *labels_buf(const ce_case *k) {
  void *b = malloc(sizeof(int64_t) * (size_t)k->N);
  for (int64_t i = 0; i < k->N; i++) {
    if (k->i64) ((int64_t *)b)[i] = k->labels[i];
    else ((int32_t *)b)[i] = (int32_t)k->labels[i];
  }
  return b;
}

/* Unsharded (sharded = 0) or sharded over `c` (g ranks, block `q`, slot) with the loss weighted by
 * w: loss and dlogits of the logits this rank holds. Returns the run status. */
static int run_ce(const ce_case *k, int sharded, ts_comm *c, int slot, int gs, int q, float w,
                  float *loss, float *dx) {
  const int64_t Cl = sharded ? k->C / gs : k->C, off = sharded ? q * Cl : 0;
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "logits", TS_F32, ts_shape2(k->N, Cl));
  ts_val y = ts_input(g, "labels", k->i64 ? TS_I64 : TS_I32, ts_shape1(k->N));
  ts_val l = sharded ? ts_softmax_cross_entropy_sharded(g, x, y, k->s, slot, gs, off, k->C)
                     : ts_softmax_cross_entropy(g, x, y, k->s);
  ts_val lw = w == 1.0f ? l : ts_scale(g, l, w, 0.0f);
  CHECK_OK(ts_graph_backward(g, lw, 1.0f));
  ts_val d = ts_graph_grad(g, x);
  CHECK_MSG(ts_graph_status(g) == TS_OK && d != TS_NONE, "%s: build: %s", k->name, ts_graph_error(g));
  float *xf = malloc(sizeof(float) * (size_t)(k->N * Cl));
  for (int64_t i = 0; i < k->N; i++)
    for (int64_t j = 0; j < Cl; j++) xf[i * Cl + j] = logit(i, off + j);
  void *lab = labels_buf(k);
  ts_val keep[2] = {l, d};
  ts_plan *p = NULL;
  int rc = ts_plan_create(g, keep, 2, &p);
  if (rc == TS_OK) {
    if (c) CHECK_OK(ts_plan_set_comm(p, slot, c));
    CHECK_OK(ts_plan_bind(p, x, xf));
    CHECK_OK(ts_plan_bind(p, y, lab));
    rc = ts_plan_run(p, 0);
    if (rc == TS_OK) {
      *loss = *(const float *)ts_plan_data(p, l);
      memcpy(dx, ts_plan_data(p, d), sizeof(float) * (size_t)(k->N * Cl));
    }
    ts_plan_free(p);
  }
  free(lab);
  free(xf);
  ts_graph_free(g);
  return rc;
}

/* The sharded op over the world against the local reference. */
static void check_case(const ce_case *k, ts_comm *world) {
  const int64_t N = k->N, C = k->C, Cl = C / g_size;
  float *dref = malloc(sizeof(float) * (size_t)(N * C)), *d = malloc(sizeof(float) * (size_t)(N * Cl));
  float *want = malloc(sizeof(float) * (size_t)(N * Cl));
  float lref = -1, l = -2;
  CHECK_OK(run_ce(k, 0, NULL, 0, 1, 0, 1.0f, &lref, dref));
  /* w_r = 1/g: the single-process objective; w_r rank-dependent: the adjoint of the sum */
  for (int pass = 0; pass < 2; pass++) {
    const float w = pass == 0 ? 1.0f / (float)g_size : 0.5f + 0.75f * (float)g_rank;
    float wsum = 0;
    for (int r = 0; r < g_size; r++) wsum += pass == 0 ? 1.0f / (float)g_size : 0.5f + 0.75f * (float)r;
    int rc = run_ce(k, 1, world, 0, g_size, g_rank, w, &l, d);
    CHECK_MSG(rc == TS_OK, "rank %d: %s: run: %s", g_rank, k->name, ts_last_error());
    if (rc) continue;
    char what[160];
    snprintf(what, sizeof what, "rank %d: %s (w %g): loss", g_rank, k->name, (double)w);
    CHECK_CLOSE(&l, &lref, 1, 1e-7, 1e-5, what);
    float lmin = 0, lmax = 0;
    CHECK_OK(ts_comm_allreduce(world, &l, &lmin, 1, TS_F32, TS_REDUCE_MIN));
    CHECK_OK(ts_comm_allreduce(world, &l, &lmax, 1, TS_F32, TS_REDUCE_MAX));
    CHECK_MSG(lmin == l && lmax == l, "%s: the loss differs between ranks (%.9g..%.9g)", what,
              (double)lmin, (double)lmax);
    for (int64_t i = 0; i < N; i++)
      for (int64_t j = 0; j < Cl; j++) want[i * Cl + j] = wsum * dref[i * C + g_rank * Cl + j];
    snprintf(what, sizeof what, "rank %d: %s (w %g): dlogits block", g_rank, k->name, (double)w);
    CHECK_CLOSE(d, want, (size_t)(N * Cl), 1e-6, 1e-5, what);
  }
  if (g_rank == 0) printf("  %-44s loss %.6f (reference %.6f)\n", k->name, (double)l, (double)lref);
  free(dref);
  free(d);
  free(want);
}

/* g = 1 without a communicator is the unsharded op, bit for bit. */
static void check_group_of_one(const ce_case *k) {
  const size_t n = (size_t)(k->N * k->C);
  float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
  float la = -1, lb = -2;
  CHECK_OK(run_ce(k, 0, NULL, 0, 1, 0, 1.0f, &la, a));
  CHECK_OK(run_ce(k, 1, NULL, 3, 1, 0, 1.0f, &lb, b));
  CHECK_MSG(memcmp(&la, &lb, sizeof la) == 0 && memcmp(a, b, n * sizeof(float)) == 0,
            "%s: g = 1 differs from the unsharded op (loss %.9g vs %.9g)", k->name, (double)lb, (double)la);
  free(a);
  free(b);
}

/* A build error: status and message fragments. */
static void build_err(int64_t cols, int slot, int gs, int64_t off, int64_t C, int code, const char *m1,
                      const char *m2) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "logits", TS_F32, ts_shape2(5, cols));
  ts_val y = ts_input(g, "labels", TS_I64, ts_shape1(5));
  ts_val l = ts_softmax_cross_entropy_sharded(g, x, y, 0.0f, slot, gs, off, C);
  const char *e = ts_graph_error(g);
  CHECK_MSG(l == TS_NONE && ts_graph_status(g) == code && strstr(e, "softmax_cross_entropy_sharded") &&
                strstr(e, m1) && (!m2 || strstr(e, m2)),
            "build error (cols %lld slot %d g %d offset %lld C %lld): %d %s", (long long)cols, slot, gs,
            (long long)off, (long long)C, ts_graph_status(g), e);
  ts_graph_free(g);
}

static void check_build_errors(void) {
  char sh[64];
  snprintf(sh, sizeof sh, "(5,3)");
  char s1[32], s2[32];
  snprintf(s1, sizeof s1, "slot %d", TS_PLAN_MAX_COMMS);
  snprintf(s2, sizeof s2, "0..%d", TS_PLAN_MAX_COMMS - 1);
  build_err(3, 0, 2, 0, 7, TS_ESHAPE, "7 classes are not divisible into 2", sh);
  build_err(3, 0, 2, 4, 6, TS_ESHAPE, "class offset 4", "[4,7)");
  build_err(3, 0, 2, -1, 6, TS_ESHAPE, "class offset -1", sh);
  build_err(4, 0, 2, 0, 6, TS_ESHAPE, "have 4 columns", "has 3");
  build_err(3, TS_PLAN_MAX_COMMS, 2, 0, 6, TS_EINVAL, s1, s2);
  build_err(3, -1, 2, 0, 6, TS_EINVAL, "slot -1", sh);
  build_err(3, 0, 0, 0, 6, TS_EINVAL, "group size 0", sh);
  if (g_rank == 0) {
    ts_graph *g;
    ts_graph_create(&g);
    ts_val x = ts_input(g, "logits", TS_F32, ts_shape2(5, 3));
    ts_val y = ts_input(g, "labels", TS_I64, ts_shape1(5));
    ts_softmax_cross_entropy_sharded(g, x, y, 0.0f, 0, 2, 0, 7);
    printf("build errors: C %% g, offset, columns, slot, group size; e.g.\n  \"%s\"\n", ts_graph_error(g));
    ts_graph_free(g);
  }
}

static void check_run_errors(ts_comm *world) {
  ce_case k = {"errors", 0.0f, 1, 4, 0, {1, 0, 3, 2}};
  float l, d[64];
  char n1[64], n2[64];
  /* an empty slot with g = 2 */
  k.C = 6;
  int rc = run_ce(&k, 1, NULL, 3, 2, 0, 1.0f, &l, d);
  const char *m = ts_last_error();
  CHECK_MSG(rc == TS_EINVAL && strstr(m, "node ") && strstr(m, "softmax_ce") && strstr(m, "slot 3") &&
                strstr(m, "holds no communicator") && strstr(m, "group of 2"),
            "empty slot: %d %s", rc, m);
  if (g_rank == 0) printf("run errors, e.g.\n  \"%s\"\n", m);
  /* the world communicator where a group of size+1 was built for */
  k.C = 2 * (g_size + 1);
  rc = run_ce(&k, 1, world, 5, g_size + 1, 0, 1.0f, &l, d);
  m = ts_last_error();
  snprintf(n1, sizeof n1, "has %d rank(s)", g_size);
  snprintf(n2, sizeof n2, "group of %d", g_size + 1);
  CHECK_MSG(rc == TS_EINVAL && strstr(m, "softmax_ce") && strstr(m, "slot 5") && strstr(m, n1) && strstr(m, n2),
            "group size mismatch: %d %s", rc, m);
  if (g_rank == 0) printf("  \"%s\"\n", m);
  /* a label outside [0,C): every rank fails before communicating */
  k.C = 4 * g_size;
  k.labels[2] = k.C;
  rc = run_ce(&k, 1, world, 0, g_size, g_rank, 1.0f, &l, d);
  m = ts_last_error();
  snprintf(n1, sizeof n1, "label %lld", (long long)k.C);
  CHECK_MSG(rc == TS_ERANGE && strstr(m, "softmax_ce") && strstr(m, n1) && strstr(m, "row 2"),
            "label out of range: %d %s", rc, m);
}

int main(int argc, char **argv) {
  CHECK_OK(ts_comm_init(&argc, &argv));
  ts_comm *world = NULL;
  CHECK_OK(ts_comm_world(&world));
  g_rank = ts_comm_rank(world);
  g_size = ts_comm_size(world);
  if (g_rank == 0) printf("class-sharded cross-entropy on %d rank(s)\n", g_size);

  const int64_t C = 12; /* divisible by 1, 2, 3, 4 */
  ce_case cases[] = {
      {"plain, i64 labels", 0.0f, 1, 7, C, {3, 11, 0, 5, 8, 1, 6}},
      {"plain, i32 labels", 0.0f, 0, 7, C, {7, 2, 9, 10, 4, 0, 11}},
      {"label smoothing 0.1", 0.1f, 1, 7, C, {3, 11, 0, 5, 8, 1, 6}},
      {"some labels ignored, smoothing 0.1", 0.1f, 0, 7, C, {3, -100, 0, -100, 8, 1, -100}},
      {"every label ignored", 0.0f, 1, 5, C, {-100, -100, -100, -100, -100}},
      {"labels all in the first block", 0.0f, 1, 6, C, {0, 1, 2, 0, 1, 2}},
      {"labels all in the last block, smoothing 0.1", 0.1f, 0, 6, C, {11, 10, 9, 11, 10, 9}},
      {"wide (C = 96), smoothing 0.2", 0.2f, 1, 9, 96, {95, 0, 47, 48, 23, 72, 1, 94, 50}},
  };
  const int ncase = (int)(sizeof cases / sizeof cases[0]);
  for (int c = 0; c < ncase; c++) {
    check_case(&cases[c], world);
    check_group_of_one(&cases[c]);
  }
  { /* every label ignored: loss 0 and dlogits 0 exactly */
    float l = -1, d[96];
    CHECK_OK(run_ce(&cases[4], 1, world, 0, g_size, g_rank, 1.0f, &l, d));
    int zero = l == 0.0f;
    for (int64_t i = 0; i < 5 * C / g_size; i++) zero &= d[i] == 0.0f;
    CHECK_MSG(zero, "rank %d: every label ignored: loss %g, dlogits not all 0", g_rank, (double)l);
  }
  check_build_errors();
  check_run_errors(world);

  ts_comm_free(world);
  return ts_test_finish_job("test_ce_shard");
}
