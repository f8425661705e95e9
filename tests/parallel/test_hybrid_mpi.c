/* Hybrid (manual) parallel, MindSpore's parallel_mode="hybrid_parallel", under mpirun (ctest: 1, 2
 * and 4 ranks). The user writes each rank's graph by hand with the C API: layer-wise parallel
 * parameters hold only the rank's slice (ts_params_add_sharded), the collectives are placed by
 * hand (ts_allreduce), and the framework adds only the gradient reduction of the parameters
 * several ranks hold (ts_grad_reducer). K SGD steps must match the same network trained on one
 * process (computed by every rank alone) in every step's loss and in every parameter slice.
 *
 * The network (MindSpore's hybrid-parallel tutorial), x (B,16), labels (B), M model-parallel ranks:
 *   h      = relu(x @ W1[:, block m])      W1 (16,32) cut by output columns (column-parallel)
 *   z_m    = h @ W2[block m, :]            W2 (32,10) cut by input rows (row-parallel): a partial sum
 *   z      = AllReduce_sum(z_m)            placed by hand, over the M model-parallel ranks
 *   loss   = softmax_ce(z + b, labels)     b (10) replicated: every rank holds all of it
 *
 * THE SEEDING RULE (verified below; see docs/parallel-pass.md "Hybrid parallel"). The collectives
 * differentiate as exact adjoints of the objective "SUM over every rank of its loss" (docs/
 * layout.md), and each rank's copy of a replicated parameter is its own variable. With D data-
 * parallel groups (each gets B/D rows and computes L_d, the mean loss over its rows) of M model-
 * parallel ranks (which all compute the same L_d), N = D*M, and seed s on every rank:
 *   objective = s * sum_r loss_r = s * M * sum_d L_d = s * M * D * L    (L = single-process loss)
 * so with s = 1/N the objective IS L, every rank's gradient is its exact part of dL, and the
 * gradient of a parameter held by several ranks is the SUM of its copies' gradients:
 *   seed 1/N (N = ALL ranks, data and model parallel) and ts_grad_reducer with mean = 0.
 * Checked per parameter: W2's gradient arrives through AllReduce's adjoint (AllReduce_sum of the M
 * ranks' dlogits, s*M*dL_d), W1's through W2, and b's on each rank is s*dL_d alone: summed over
 * the D*M holders it is dL; W1, W2 summed over the D holders of each slice are dL too.
 * A "mean over the data-parallel ranks" (mean = 1, seed 1/M: each data-parallel replica's loss
 * counted once) is right for W1 and W2 (their groups are the D data-parallel ranks) but NOT for
 * b: its group is all D*M ranks, so the mean divides by D*M where D is due, and b's gradient comes
 * out 1/M of the true one. The reducer has one `mean` for every group, so with mean = 1 the
 * caller must multiply the replicated-over-model-parallel gradients by M (case "mean" below,
 * which checks both the 1/M and the corrected training). Seed 1 with SUM gives N x the gradient.
 *
 * Cases: (a) model parallel over all N ranks, full batch on every rank; (b) (4 ranks) a 2x2 grid,
 * model parallel over axis 1, data parallel over axis 0; both with a bf16 wire too; (c) a store
 * whose sharded layout names more devices than the communicator. Tolerances: f32 1e-5 (losses,
 * relative; parameters and gradients, absolute); bf16 on the wire 3e-3. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distribution/dist.h"
#include "tessera/tessera.h"
#include "test_util.h"

#define B 8
#define IN 16
#define HID 32
#define NC 10
#define K_STEPS 3
#define LR 0.2f
#define TOL_F32 1e-5
#define TOL_BF16 3e-3

static ts_comm *world;
static int R, N;

enum { W1, W2, BIAS, NPARAM };
static const char *const pname[NPARAM] = {"fc1.weight", "fc2.weight", "bias"};

typedef struct {
  ts_graph *g;
  ts_params *p;
  ts_val x, y, loss;
  int id[NPARAM];
} net;

/* The parameter `k`, whole (l NULL) or this rank's slice of l (layer-wise parallel). The same
 * name, global shape, initialiser and seed give a slice equal to the whole tensor's block. */
static ts_val param(net *m, int k, ts_shape gs, const ts_layout *l) {
  static const ts_init init[NPARAM] = {{TS_INIT_NORMAL, 0.0f, 0.4f, 0},
                                       {TS_INIT_NORMAL, 0.0f, 0.3f, 0},
                                       {TS_INIT_UNIFORM, -0.5f, 0.5f, 0}};
  int id = l ? ts_params_add_sharded(m->p, pname[k], gs, l, R, init[k], 0)
             : ts_params_add(m->p, pname[k], gs, init[k], 0);
  CHECK_MSG(id >= 0, "%s: %s", pname[k], ts_last_error());
  m->id[k] = id;
  return ts_param_value(m->g, pname[k], TS_F32, ts_params_shape(m->p, id), id);
}

/* rows of the batch; l1, l2: W1's and W2's layouts (NULL: whole, the single process); mp: the
 * model-parallel group size (0: no collective, the single process), its communicator in slot 0. */
static void build(net *m, int rows, const ts_layout *l1, const ts_layout *l2, int mp) {
  CHECK_OK(ts_graph_create(&m->g));
  CHECK_OK(ts_params_create(&m->p));
  ts_graph *g = m->g;
  m->x = ts_input(g, "x", TS_F32, ts_shape2(rows, IN));
  m->y = ts_input(g, "y", TS_I32, ts_shape1(rows));
  ts_val_set_requires_grad(g, m->x, 0);
  ts_val w1 = param(m, W1, ts_shape2(IN, HID), l1);
  ts_val w2 = param(m, W2, ts_shape2(HID, NC), l2);
  ts_val b = param(m, BIAS, ts_shape1(NC), NULL);
  ts_val h = ts_relu(g, ts_matmul(g, m->x, w1, 0, 0)); /* (rows, HID/M): this rank's columns */
  ts_val z = ts_matmul(g, h, w2, 0, 0);                /* (rows, NC), partial over the group */
  if (mp) z = ts_allreduce(g, z, 0, mp, TS_REDUCE_SUM);
  m->loss = ts_softmax_cross_entropy(g, ts_add(g, z, b), m->y, 0.0f);
  CHECK_MSG(ts_graph_status(g) == TS_OK, "build: %s", ts_graph_error(g));
}

static void free_net(net *m) {
  ts_graph_free(m->g);
  ts_params_free(m->p);
}

/* Step s's global batch. */
static void batch(int s, float *x, int32_t *y) {
  for (int i = 0; i < B * IN; i++) x[i] = sinf(0.37f * (float)i + 1.3f * (float)s) + 0.1f * (float)(i % 7);
  for (int i = 0; i < B; i++) y[i] = (3 * i + i * i) % NC;
}

static void sgd(ts_params *p) {
  float *w = ts_params_data(p), *g = ts_params_grads(p);
  for (size_t i = 0; i < ts_params_numel(p); i++) w[i] -= LR * g[i];
}

typedef struct {
  net m;
  double loss[K_STEPS];
  float *grad0; /* step 0's gradients (flat, the store's offsets) */
} reference;

static void run_reference(reference *ref) {
  net *m = &ref->m;
  build(m, B, NULL, NULL, 0);
  CHECK_OK(ts_graph_backward(m->g, m->loss, 1.0f));
  ts_plan *plan = ts_test_train_plan(m->g, m->p, m->loss, 7);
  float xb[B * IN];
  int32_t yb[B];
  ref->grad0 = malloc(sizeof(float) * ts_params_numel(m->p));
  for (int s = 0; s < K_STEPS; s++) {
    batch(s, xb, yb);
    CHECK_OK(ts_plan_bind(plan, m->x, xb));
    CHECK_OK(ts_plan_bind(plan, m->y, yb));
    CHECK_OK(ts_plan_run(plan, (uint64_t)s));
    ref->loss[s] = *(float *)ts_plan_data(plan, m->loss);
    if (s == 0) memcpy(ref->grad0, ts_params_grads(m->p), sizeof(float) * ts_params_numel(m->p));
    sgd(m->p);
  }
  ts_plan_free(plan);
}

/* max |loc - scale * ref| over the slice of parameter k this rank holds in lp; ref is the
 * single-process tensor (whole). */
static double slice_diff(ts_params *lp, int id, const float *loc, ts_params *gp, const float *ref, double scale) {
  ts_shape ls = ts_params_shape(lp, id), gs = ts_params_global_shape(lp, id);
  int64_t off[TS_MAX_DIMS] = {0}, idx[TS_MAX_DIMS] = {0};
  if (ts_params_is_sharded(lp, id)) CHECK_OK(ts_layout_offsets(ts_params_layout(lp, id), &gs, R, off));
  int64_t n = ts_shape_numel(&ls);
  double worst = 0;
  for (int64_t e = 0; e < n; e++) {
    int64_t gi = 0;
    for (int d = 0; d < gs.ndim; d++) gi = gi * gs.dims[d] + off[d] + idx[d];
    double diff = fabs((double)loc[e] - scale * (double)ref[gi]);
    if (!(diff <= worst)) worst = diff; /* NaN sticks */
    for (int d = ls.ndim - 1; d >= 0; d--) {
      if (++idx[d] < ls.dims[d]) break;
      idx[d] = 0;
    }
  }
  return worst;
}

typedef struct {
  const char *what;
  int ndev, dev[2]; /* the device matrix (product N) */
  int mp_axis;      /* the axis W1's columns and W2's rows are cut over */
  int dp_axis;      /* the axis the batch is cut over; -1: every rank gets the full batch */
  int mean;         /* the reducer's reduction (0 sum, 1 mean) */
  ts_dtype wire;
  int seed_over_all; /* 1: seed 1/N; 0: seed 1/M (with mean = 1: each replica's loss once) */
  double tol;
} hcase;

typedef struct {
  double loss_diff, param_diff, seconds;
  double loss[K_STEPS];
  int groups;
} hresult;

static hresult run_hybrid(const hcase *c, reference *ref) {
  hresult res = {0};
  double t0 = ts_time_now();
  int coords[2] = {0, 0};
  CHECK_OK(ts_comm_grid_coords(R, c->ndev, c->dev, coords));
  int M = c->dev[c->mp_axis], D = c->dp_axis >= 0 ? c->dev[c->dp_axis] : 1;
  int d = c->dp_axis >= 0 ? coords[c->dp_axis] : 0, rows = B / D;
  /* W1 (IN,HID) by columns, W2 (HID,NC) by rows, over the model-parallel axis; replicated over
   * the data-parallel one */
  ts_layout l1, l2;
  int t1[2] = {-1, c->mp_axis}, t2[2] = {c->mp_axis, -1};
  CHECK_OK(ts_layout_init(&l1, c->ndev, c->dev, 2, t1, 0));
  CHECK_OK(ts_layout_init(&l2, c->ndev, c->dev, 2, t2, 0));
  net m;
  build(&m, rows, &l1, &l2, M);
  float seed = c->seed_over_all ? 1.0f / (float)N : 1.0f / (float)M;
  CHECK_OK(ts_graph_backward(m.g, m.loss, seed));
  ts_plan *plan = ts_test_train_plan(m.g, m.p, m.loss, 7);
  ts_comm *mp;
  CHECK_OK(ts_comm_grid_axis(world, c->ndev, c->dev, c->mp_axis, &mp));
  CHECK_OK(ts_plan_set_comm(plan, 0, mp));
  /* small buckets (several per group), overlapped with backward */
  ts_grad_reducer_config rcfg = {.bucket_mb = 0.001, .mean = c->mean, .wire = c->wire};
  ts_grad_reducer *red = NULL;
  CHECK_OK(ts_grad_reducer_create(world, m.p, m.g, &rcfg, &red));
  if (!red) return res;
  res.groups = ts_grad_reducer_num_groups(red);
  CHECK_OK(ts_grad_reducer_attach(red, plan));
  float xb[B * IN];
  int32_t yb[B];
  for (int s = 0; s < K_STEPS; s++) {
    batch(s, xb, yb);
    CHECK_OK(ts_plan_bind(plan, m.x, xb + (size_t)(d * rows) * IN));
    CHECK_OK(ts_plan_bind(plan, m.y, yb + d * rows));
    ts_grad_reducer_begin(red, ts_params_grads(m.p));
    CHECK_OK(ts_plan_run(plan, (uint64_t)s));
    CHECK_OK(ts_grad_reducer_finish(red));
    float own = *(float *)ts_plan_data(plan, m.loss), l = own;
    /* the single-process loss is the mean of the data-parallel groups' losses (and so of all
     * ranks'); with the full batch (D = 1) each rank's own loss is it */
    CHECK_OK(ts_comm_allreduce(world, &l, &l, 1, TS_F32, TS_REDUCE_MEAN));
    res.loss[s] = l;
    double dl = fabs(l - ref->loss[s]) / fmax(1.0, fabs(ref->loss[s]));
    if (D == 1) dl = fmax(dl, fabs(own - ref->loss[s]) / fmax(1.0, fabs(ref->loss[s])));
    if (!(dl <= res.loss_diff)) res.loss_diff = dl;
    CHECK_MSG(dl <= c->tol, "%s rank %d step %d: loss %.7f (own %.7f), single process %.7f (tolerance %g)",
              c->what, R, s, l, own, ref->loss[s], c->tol);
    /* the mean: b's gradient is 1/M of the true one (its group is all D*M ranks, the mean
     * divides by D*M); W1's and W2's are right. Checked at step 0, then corrected by hand. */
    for (int k = 0; k < NPARAM && s == 0; k++) {
      int id = m.id[k], gid = ref->m.id[k];
      double scale = c->mean && k == BIAS ? 1.0 / M : 1.0;
      double gd = slice_diff(m.p, id, ts_params_grad_ptr(m.p, id), ref->m.p,
                             ref->grad0 + ts_params_offset(ref->m.p, gid), scale);
      CHECK_MSG(gd <= c->tol, "%s rank %d: step 0 gradient of %s differs from %g x the single process's by %g (tolerance %g)",
                c->what, R, pname[k], scale, gd, c->tol);
    }
    if (c->mean && M > 1) {
      float *gb = ts_params_grad_ptr(m.p, m.id[BIAS]);
      for (int i = 0; i < NC; i++) gb[i] *= (float)M;
    }
    sgd(m.p);
  }
  for (int k = 0; k < NPARAM; k++) {
    int id = m.id[k];
    double pd = slice_diff(m.p, id, ts_params_ptr(m.p, id), ref->m.p, ts_params_ptr(ref->m.p, ref->m.id[k]), 1.0);
    if (!(pd <= res.param_diff)) res.param_diff = pd;
    CHECK_MSG(pd <= c->tol, "%s rank %d: %s differs from the single process by %g after %d steps (tolerance %g)",
              c->what, R, pname[k], pd, K_STEPS, c->tol);
  }
  /* the worst over the ranks, for the report */
  float w[2] = {(float)res.loss_diff, (float)res.param_diff};
  CHECK_OK(ts_comm_allreduce(world, w, w, 2, TS_F32, TS_REDUCE_MAX));
  res.loss_diff = w[0];
  res.param_diff = w[1];
  ts_grad_reducer_free(red);
  ts_comm_free(mp);
  ts_plan_free(plan);
  free_net(&m);
  res.seconds = ts_time_now() - t0;
  return res;
}

static void report(const hcase *c, const hresult *r) {
  if (R)
    return;
  printf("%-40s N=%d: losses %.6f %.6f %.6f, worst loss diff %.2g, parameter diff %.2g (tolerance %g), "
         "%d reducer group(s), %.3f s\n",
         c->what, N, r->loss[0], r->loss[1], r->loss[2], r->loss_diff, r->param_diff, c->tol, r->groups,
         r->seconds);
}

/* (c) a sharded layout on 2N devices, the reducer over N ranks: refused, naming the parameter. */
static void bad_layout(void) {
  ts_graph *g;
  ts_params *p;
  CHECK_OK(ts_graph_create(&g));
  CHECK_OK(ts_params_create(&p));
  int wide = 2 * N, tmap[2] = {-1, 0};
  ts_layout l;
  CHECK_OK(ts_layout_init(&l, 1, &wide, 2, tmap, 0));
  ts_init init = {TS_INIT_NORMAL, 0.0f, 0.1f, 0};
  int bid = ts_params_add(p, "head.bias", ts_shape1(2), init, 0);
  int wid = ts_params_add_sharded(p, "wide.weight", ts_shape2(IN, 2 * wide), &l, R, init, 0);
  CHECK(bid >= 0 && wid >= 0);
  ts_val x = ts_input(g, "x", TS_F32, ts_shape2(2, IN));
  ts_val w = ts_param_value(g, "wide.weight", TS_F32, ts_params_shape(p, wid), wid);
  ts_val b = ts_param_value(g, "head.bias", TS_F32, ts_shape1(2), bid);
  ts_val loss = ts_mean(g, ts_add(g, ts_matmul(g, x, w, 0, 0), ts_sum(g, b, 1, 0)), 3, 0);
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  CHECK_OK(ts_params_alloc(p, 7));
  ts_val keep[4];
  int nk = 0;
  CHECK_OK(ts_params_attach_grads(p, g, keep, 4, &nk));
  ts_grad_reducer_config cfg = {.bucket_mb = 1, .mean = 0, .wire = TS_F32};
  ts_grad_reducer *red = (ts_grad_reducer *)&cfg; /* must come back NULL */
  char devs[32];
  snprintf(devs, sizeof devs, "%d devices", wide);
  EXPECT_ERR(ts_grad_reducer_create(world, p, g, &cfg, &red), TS_EINVAL, "wide.weight", devs);
  CHECK(red == NULL);
  ts_graph_free(g);
  ts_params_free(p);
}

int main(int argc, char **argv) {
  CHECK_OK(ts_comm_init(&argc, &argv));
  CHECK_OK(ts_comm_world(&world));
  R = ts_comm_rank(world);
  N = ts_comm_size(world);
  ts_threads_set(1);
  double t0 = ts_time_now();

  reference ref;
  run_reference(&ref);
  if (R == 0)
    printf("single process: losses %.6f %.6f %.6f\n", ref.loss[0], ref.loss[1], ref.loss[2]);

  /* (a) model parallel over all N ranks, every rank the full batch */
  hcase a = {"(a) model parallel N, full batch", 1, {N, 1}, 0, -1, 0, TS_F32, 1, TOL_F32};
  hresult ra = run_hybrid(&a, &ref);
  report(&a, &ra);
  hcase abf = a;
  abf.what = "(a) model parallel N, bf16 wire";
  abf.wire = TS_BF16;
  abf.tol = TOL_BF16;
  hresult rabf = run_hybrid(&abf, &ref);
  report(&abf, &rabf);
  /* with N > 1 b's gradient goes over the wire in bf16: the result must not be the f32 one */
  if (N > 1) CHECK_MSG(rabf.param_diff > 0, "bf16 wire: parameters identical to the single process's");
  /* the mean rule on the 1-d grid (D = 1): b's group is the M model-parallel ranks */
  hcase am = a;
  am.what = "(a) model parallel N, mean, seed 1/M";
  am.mean = 1;
  am.seed_over_all = 0;
  hresult ram = run_hybrid(&am, &ref);
  report(&am, &ram);

  if (N == 4) {
    /* (b) 2x2: data parallel over axis 0 ({0,2}, {1,3}), model parallel over axis 1 ({0,1},
     * {2,3}); W1, W2 reduced over the data-parallel pairs, b over all four */
    hcase b = {"(b) data 2 x model 2, sum, seed 1/N", 2, {2, 2}, 1, 0, 0, TS_F32, 1, TOL_F32};
    hresult rb = run_hybrid(&b, &ref);
    report(&b, &rb);
    CHECK_MSG(rb.groups == 2, "2x2: %d reducer groups, expected 2 (the data-parallel pairs, all ranks)", rb.groups);
    hcase bm = b;
    bm.what = "(b) data 2 x model 2, mean, seed 1/M";
    bm.mean = 1;
    bm.seed_over_all = 0;
    hresult rbm = run_hybrid(&bm, &ref);
    report(&bm, &rbm);
    hcase bbf = b;
    bbf.what = "(b) data 2 x model 2, sum, bf16 wire";
    bbf.wire = TS_BF16;
    bbf.tol = TOL_BF16;
    hresult rbbf = run_hybrid(&bbf, &ref);
    report(&bbf, &rbbf);
    CHECK_MSG(rbbf.param_diff > 0, "bf16 wire: parameters identical to the single process's");
  }

  /* (c) */
  bad_layout();

  free(ref.grad0);
  free_net(&ref.m);
  if (R == 0) printf("total %.3f s\n", ts_time_now() - t0);
  ts_comm_free(world);
  ts_comm_finalize();
  return ts_test_finish("test_hybrid_mpi");
}
