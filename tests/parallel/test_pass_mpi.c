/* The parallel pass end to end, under mpirun (ctest: 1, 2 and 4 ranks): models trained for K SGD
 * steps through the rank graphs the pass builds must match the same model trained on one process
 * (computed by every rank alone) in every step's loss and in every parameter slice at the end.
 *   - GPT-style model with Megatron-style strategies: column- then row-split MLP, attention split
 *     by heads (fused q|k|v weight cut by heads), vocabulary-parallel embedding and loss, as
 *     tensor-parallel N and (4 ranks) tensor-parallel 2 x data-parallel 2;
 *   - the same model with no strategy at all (data parallel through the pass);
 *   - the convnet with output-channel-split convolutions (batch-norm cut by channels, the flatten
 *     carrying the cut into a row-parallel classifier), and data parallel (SyncBatchNorm);
 *   - dropout over a tensor cut in one or two dims after the first: each rank's mask = its slice
 *     of the whole tensor's.
 * Parameter memory per rank is measured from the rank's store. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distribution/dist.h"
#include "tessera/tessera.h"
#include "tessera/zoo.h"
#include "test_util.h"
#include "megatron.h"

#define K_STEPS 3
#define LR 0.1f

static ts_comm *world;
static int R, N;

typedef struct {
  ts_graph *g;
  ts_params *p;
  ts_val x, y, loss;
} model;

typedef enum { GPT, CONVNET } kind;

/* GPT: vocab 32, T 8, 2 layers, 4 heads, width 16, batch 4. Convnet: 1x8x8 images, 8/8
 * channels, 10 classes, batch 8. */
static void build(kind k, model *m) {
  CHECK_OK(ts_graph_create(&m->g));
  CHECK_OK(ts_params_create(&m->p));
  ts_nn nn = {m->g, m->p};
  if (k == GPT) {
    m->x = ts_input(m->g, "x", TS_I32, ts_shape2(4, 8));
    m->y = ts_input(m->g, "y", TS_I32, ts_shape2(4, 8));
    ts_gpt_config c = {.vocab_size = 32, .block_size = 8, .n_layer = 2, .n_head = 4, .n_embd = 16};
    CHECK_OK(ts_zoo_gpt(&nn, &c, m->x, m->y, NULL, &m->loss));
  } else {
    m->x = ts_input(m->g, "x", TS_F32, ts_shape4(8, 1, 8, 8));
    m->y = ts_input(m->g, "y", TS_I32, ts_shape1(8));
    ts_val_set_requires_grad(m->g, m->x, 0);
    ts_convnet_config c = {.num_classes = 10, .c1 = 8, .c2 = 8};
    CHECK_OK(ts_zoo_convnet(&nn, &c, m->x, m->y, NULL, &m->loss));
  }
}

/* Step s's global batch. */
static void batch(kind k, int s, void *xb, int32_t *yb) {
  if (k == GPT) {
    int32_t *ids = xb;
    for (int i = 0; i < 32; i++) {
      ids[i] = (7 * (i / 8) + 3 * (i % 8) + 5 * s + (i * i) % 11) % 32;
      yb[i] = (ids[i] * 3 + 1) % 32;
    }
  } else {
    float *x = xb;
    for (int i = 0; i < 8 * 64; i++) x[i] = sinf(0.37f * (float)i + 1.3f * (float)s) + 0.1f * (float)(i % 7);
    for (int i = 0; i < 8; i++) yb[i] = (3 * i + s) % 10;
  }
}

static size_t xbytes(kind k) { return k == GPT ? 32 * sizeof(int32_t) : 8 * 64 * sizeof(float); }
static int nrows(kind k) { return k == GPT ? 4 : 8; }

static void sgd(ts_params *p) {
  float *w = ts_params_data(p), *g = ts_params_grads(p);
  for (size_t i = 0; i < ts_params_numel(p); i++) w[i] -= LR * g[i];
}

/* One process: losses[K] and the trained store. */
static void reference(kind k, model *m, double *losses) {
  build(k, m);
  CHECK_OK(ts_graph_backward(m->g, m->loss, 1.0f));
  ts_plan *plan = ts_test_train_plan(m->g, m->p, m->loss, 7);
  char xb[8 * 64 * 4];
  int32_t yb[32];
  for (int s = 0; s < K_STEPS; s++) {
    batch(k, s, xb, yb);
    CHECK_OK(ts_plan_bind(plan, m->x, xb));
    CHECK_OK(ts_plan_bind(plan, m->y, yb));
    CHECK_OK(ts_plan_run(plan, (uint64_t)s));
    losses[s] = *(float *)ts_plan_data(plan, m->loss);
    sgd(m->p);
  }
  ts_plan_free(plan);
}

/* The element of the reference parameter at each local position of a slice. */
static void check_slice(const char *what, ts_params *lp, int id, ts_params *gp, double tol) {
  const char *name = ts_params_name(lp, id);
  int gid = ts_params_find(gp, name);
  CHECK_MSG(gid >= 0, "%s: parameter %s missing in the reference", what, name);
  const float *ref = ts_params_ptr(gp, gid), *loc = ts_params_ptr(lp, id);
  ts_shape ls = ts_params_shape(lp, id), gs = ts_params_global_shape(lp, id);
  int64_t off[TS_MAX_DIMS] = {0};
  if (ts_params_is_sharded(lp, id)) CHECK_OK(ts_layout_offsets(ts_params_layout(lp, id), &gs, R, off));
  int64_t n = ts_shape_numel(&ls), idx[TS_MAX_DIMS] = {0};
  double worst = 0;
  for (int64_t e = 0; e < n; e++) {
    int64_t gi = 0;
    for (int d = 0; d < gs.ndim; d++) gi = gi * gs.dims[d] + off[d] + idx[d];
    double diff = fabs((double)loc[e] - (double)ref[gi]);
    if (diff > worst) worst = diff;
    for (int d = ls.ndim - 1; d >= 0; d--) {
      if (++idx[d] < ls.dims[d]) break;
      idx[d] = 0;
    }
  }
  CHECK_MSG(worst <= tol, "%s rank %d: %s differs from the single process by %g (tolerance %g)", what,
            R, name, worst, tol);
}

/* Trains K steps through the pass with the strategies `set` (NULL: none; freed here) and
 * compares with the reference. Returns this rank's parameter bytes. */
static int64_t run_parallel(const char *what, kind k, ts_strategy_set *set, int dataset_cut,
                            const double *ref_losses, ts_params *ref_params) {
  model m;
  build(k, &m);
  ts_parallel_config pc = {.ndevices = N, .rank = R, .strategies = set, .dataset_cut = dataset_cut};
  ts_parallel *pp;
  CHECK_OK(ts_parallel_run(m.g, m.p, &m.loss, 1, NULL, &pc, &pp));
  ts_graph *lg = ts_parallel_graph(pp);
  ts_params *lp = ts_parallel_params(pp);
  ts_val lloss = ts_parallel_value(pp, m.loss), lx = ts_parallel_value(pp, m.x), ly = ts_parallel_value(pp, m.y);
  CHECK(lloss != TS_NONE && lx != TS_NONE && ly != TS_NONE);
  float seed = ts_parallel_loss_seed(pp, m.loss);
  CHECK_OK(ts_graph_backward(lg, lloss, seed));
  ts_plan *plan = ts_test_train_plan(lg, lp, lloss, 7);
  int ns = ts_parallel_num_slots(pp);
  ts_comm **comms = calloc((size_t)ns + 1, sizeof *comms); /* as many as the pass's groups */
  CHECK(comms != NULL);
  CHECK_OK(ts_dist_slot_comms(pp, world, plan, comms));
  /* gradients summed over the ranks holding the same slice, bucketed (small buckets: several
   * per group) and overlapped with backward */
  ts_grad_reducer_config rcfg = {.bucket_mb = 0.004, .mean = 0, .wire = TS_F32};
  ts_grad_reducer *red;
  CHECK_OK(ts_grad_reducer_create(world, lp, lg, &rcfg, &red));
  CHECK_OK(ts_grad_reducer_attach(red, plan));
  int np = ts_params_count(lp);
  int parts, index, parts_y, index_y;
  CHECK_OK(ts_parallel_input_piece(pp, m.x, &parts, &index));
  CHECK_OK(ts_parallel_input_piece(pp, m.y, &parts_y, &index_y));
  CHECK(parts == parts_y && index == index_y);
  char xb[8 * 64 * 4];
  int32_t yb[32];
  size_t xrow = xbytes(k) / (size_t)nrows(k), yrow = (k == GPT ? 8 : 1) * sizeof(int32_t);
  int rows = nrows(k) / parts;
  for (int s = 0; s < K_STEPS; s++) {
    batch(k, s, xb, yb);
    CHECK_OK(ts_plan_bind(plan, lx, xb + (size_t)(index * rows) * xrow));
    CHECK_OK(ts_plan_bind(plan, ly, (char *)yb + (size_t)(index * rows) * yrow));
    ts_grad_reducer_begin(red, ts_params_grads(lp));
    CHECK_OK(ts_plan_run(plan, (uint64_t)s));
    CHECK_OK(ts_grad_reducer_finish(red));
    float l = *(float *)ts_plan_data(plan, lloss) * seed;
    CHECK_OK(ts_comm_allreduce(world, &l, &l, 1, TS_F32, TS_REDUCE_SUM));
    CHECK_MSG(fabs(l - ref_losses[s]) <= 2e-5 * fmax(1.0, fabs(ref_losses[s])),
              "%s rank %d step %d: loss %.7f, single process %.7f", what, R, s, l, ref_losses[s]);
    sgd(lp);
  }
  for (int i = 0; i < np; i++)
    if (!(ts_params_flags(lp, i) & TS_PARAM_STATE)) check_slice(what, lp, i, ref_params, 2e-5);
  int64_t bytes = (int64_t)ts_params_numel(lp) * 4;
  if (R == 0) {
    ts_parallel_stats st;
    ts_parallel_get_stats(pp, &st);
    printf("%-34s N=%d: %d steps match; parameters per rank %lld of %lld bytes (%.3f), %d slots, "
           "%d forward redistributions (%lld bytes per rank), %d gradient groups\n",
           what, N, K_STEPS, (long long)bytes, (long long)ts_params_numel(ref_params) * 4,
           (double)bytes / (double)(ts_params_numel(ref_params) * 4), ns, st.nredist,
           (long long)st.fwd_comm_bytes, ts_grad_reducer_num_groups(red));
  }
  ts_grad_reducer_free(red);
  for (int s = 0; s < ns; s++) ts_comm_free(comms[s]);
  free(comms);
  ts_plan_free(plan);
  ts_parallel_free(pp);
  ts_strategy_set_free(set);
  ts_graph_free(m.g);
  ts_params_free(m.p);
  return bytes;
}

/* Dropout cut in one or two dims after the first (sequence x hidden, batch x hidden, ...), taking
 * its input's cut: every rank's mask (its graph run with the pass's communicators) equals its
 * slice of the whole tensor's dropout on one process: the pass's offset, runs and groups of runs
 * number the slice as in the whole tensor. */
static void test_dropout_cuts(void) {
  const char *c2[] = {"((1,2,1),)", "((1,1,2),)", "((2,1,1),)"};
  const char *c4[] = {"((1,2,2),)", "((2,1,2),)", "((1,4,1),)", "((2,2,1),)", "((1,1,4),)", "((4,1,1),)"};
  const char **cuts = N == 4 ? c4 : c2;
  int ncut = N == 4 ? 6 : N == 2 ? 3 : 0;
  const int64_t B = 4, T = 8, H = 12, n = B * T * H;
  float *x = malloc(sizeof(float) * n), *want = malloc(sizeof(float) * n);
  for (int64_t i = 0; i < n; i++) x[i] = 1.0f + (float)(i % 7);
  for (int c = 0; c < ncut; c++) {
    ts_graph *g;
    ts_params *gp;
    CHECK_OK(ts_graph_create(&g));
    CHECK_OK(ts_params_create(&gp));
    ts_val gx = ts_input(g, "x", TS_F32, ts_shape3(B, T, H));
    ts_val u = ts_relu(g, gx); /* cut by its strategy; dropout follows its input's cut */
    CHECK_OK(ts_shard(g, u, cuts[c]));
    ts_val y = ts_dropout(g, u, 0.5f, 77);
    ts_val loss = ts_sum(g, y, 7, 0);
    ts_plan *pl = NULL; /* the whole tensor on one process */
    CHECK_OK(ts_plan_create(g, &y, 1, &pl));
    CHECK_OK(ts_plan_bind(pl, gx, x));
    CHECK_OK(ts_plan_run(pl, 3));
    memcpy(want, ts_plan_data(pl, y), sizeof(float) * n);
    ts_plan_free(pl);
    ts_parallel_config pc = {.ndevices = N, .rank = R, .dataset_cut = 1};
    ts_parallel *pp = NULL;
    CHECK_OK(ts_parallel_run(g, gp, &loss, 1, NULL, &pc, &pp));
    ts_graph *lg = ts_parallel_graph(pp);
    ts_val lx = ts_parallel_value(pp, gx), ly = ts_parallel_value(pp, y);
    ts_shape gs, ls = ts_val_shape(lg, ly);
    const ts_layout *l = ts_parallel_layout(pp, y, &gs);
    int64_t off[TS_MAX_DIMS] = {0};
    CHECK(l != NULL);
    if (l) CHECK_OK(ts_layout_offsets(l, &gs, R, off));
    CHECK_OK(ts_plan_create(lg, &ly, 1, &pl));
    int ns = ts_parallel_num_slots(pp);
    ts_comm **comms = calloc((size_t)ns + 1, sizeof *comms);
    CHECK_OK(ts_dist_slot_comms(pp, world, pl, comms));
    CHECK_OK(ts_plan_bind(pl, lx, x)); /* the input whole (dataset_cut 1): sliced in the graph */
    CHECK_OK(ts_plan_run(pl, 3));
    const float *got = ts_plan_data(pl, ly);
    int bad = 0;
    for (int64_t b = 0; b < ls.dims[0]; b++)
      for (int64_t t = 0; t < ls.dims[1]; t++)
        for (int64_t h = 0; h < ls.dims[2]; h++)
          bad += got[(b * ls.dims[1] + t) * ls.dims[2] + h] != want[((b + off[0]) * T + t + off[1]) * H + h + off[2]];
    CHECK_MSG(bad == 0, "rank %d: dropout cut %s: %d of %lld elements differ from one process's", R, cuts[c], bad,
              (long long)ts_shape_numel(&ls));
    for (int s = 0; s < ns; s++) ts_comm_free(comms[s]);
    free(comms);
    ts_plan_free(pl);
    ts_parallel_free(pp);
    ts_graph_free(g);
    ts_params_free(gp);
  }
  free(x);
  free(want);
  if (R == 0 && ncut) printf("dropout cut %d ways in one or two dims after the first (%d cuts): every rank's mask = its slice "
                             "of one process's\n", N, ncut);
}

int main(int argc, char **argv) {
  CHECK_OK(ts_comm_init(&argc, &argv));
  CHECK_OK(ts_comm_world(&world));
  R = ts_comm_rank(world);
  N = ts_comm_size(world);
  ts_threads_set(1);
  test_dropout_cuts();

  double gl[K_STEPS], cl[K_STEPS];
  model gref, cref;
  reference(GPT, &gref, gl);
  reference(CONVNET, &cref, cl);
  if (R == 0) printf("single process: gpt losses %.5f %.5f %.5f, convnet %.5f %.5f %.5f\n", gl[0], gl[1], gl[2], cl[0], cl[1], cl[2]);

  /* tensor parallel N */
  int64_t tp = run_parallel("gpt tensor-parallel", GPT, ts_test_megatron(1, N), 0, gl, gref.p);
  if (N > 1) {
    /* the matrices and the column-parallel biases are cut N ways (measured from the rank's store);
     the position table, the layer norms and the row-parallel biases stay whole, as in Megatron */
    int64_t full = (int64_t)ts_params_numel(gref.p) * 4, whole = 0;
    for (int i = 0; i < ts_params_count(gref.p); i++) {
      ts_shape s = ts_params_shape(gref.p, i);
      const char *nm = ts_params_name(gref.p, i);
      int cut = s.ndim == 2 || strstr(nm, "c_attn.bias") || strstr(nm, "mlp.c_fc.bias");
      if (!cut || !strcmp(nm, "transformer.wpe.weight")) whole += ts_shape_numel(&s) * 4;
    }
    CHECK_MSG(tp == (full - whole) / N + whole, "tensor-parallel %d: %lld bytes per rank, expected %lld", N,
              (long long)tp, (long long)((full - whole) / N + whole));
  }
  if (N == 4) {
    run_parallel("gpt tensor-parallel 2 x data 2", GPT, ts_test_megatron(2, 2), 0, gl, gref.p);
  }
  run_parallel("gpt data parallel (no strategy)", GPT, NULL, 0, gl, gref.p);
  run_parallel("gpt full batch, no strategy", GPT, NULL, 1, gl, gref.p);

  /* convnet: output-channel-split convolutions, channel-cut batch-norm, row-parallel classifier */
  char c1[64];
  snprintf(c1, sizeof c1, "((1,1,1,1),(%d,1,1,1))", N);
  ts_strategy_set *conv_oc;
  CHECK_OK(ts_strategy_set_create(N, 0, &conv_oc));
  CHECK_OK(ts_strategy_set_put_text(conv_oc, "conv1.conv2d", c1));
  CHECK_OK(ts_strategy_set_put_text(conv_oc, "conv2.conv2d", c1));
  int64_t cb = run_parallel("convnet output-channel split", CONVNET, conv_oc, 0, cl, cref.p);
  (void)cb;
  run_parallel("convnet data parallel (SyncBN)", CONVNET, NULL, 0, cl, cref.p);
  /* input-channel split: each rank convolves its channels, the partial sums are all-reduced and
   * the bias added after; the first conv's output channels feed it cut alike (no redistribution) */
  char c2[64];
  snprintf(c2, sizeof c2, "((1,%d,1,1),(1,%d,1,1))", N, N);
  ts_strategy_set *conv_ic;
  CHECK_OK(ts_strategy_set_create(N, 0, &conv_ic));
  CHECK_OK(ts_strategy_set_put_text(conv_ic, "conv1.conv2d", c1));
  CHECK_OK(ts_strategy_set_put_text(conv_ic, "conv2.conv2d", c2));
  run_parallel("convnet output- then input-channel split", CONVNET, conv_ic, 0, cl, cref.p);
  /* spatial split: the convolutions cut by rows (halo exchange with the neighbours), batch-norm
   * statistics synchronised over the row bands; the pooling gathers the rows back */
  char c3[64], c4[64];
  snprintf(c3, sizeof c3, "((1,1,%d,1),(1,1,1,1))", N);
  snprintf(c4, sizeof c4, "((1,1,1,%d),(1,1,1,1))", N);
  ts_strategy_set *conv_sp;
  CHECK_OK(ts_strategy_set_create(N, 0, &conv_sp));
  CHECK_OK(ts_strategy_set_put_text(conv_sp, "conv1.conv2d", c3));
  CHECK_OK(ts_strategy_set_put_text(conv_sp, "conv2.conv2d", N == 2 ? c4 : c3));
  run_parallel("convnet spatial (row / column bands) split", CONVNET, conv_sp, 0, cl, cref.p);

  ts_graph_free(gref.g);
  ts_params_free(gref.p);
  ts_graph_free(cref.g);
  ts_params_free(cref.p);
  ts_comm_free(world);
  ts_comm_finalize();
  return ts_test_finish("test_pass_mpi");
}
