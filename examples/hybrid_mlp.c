/* Hybrid (manual) parallel training of an MLP on Fashion-MNIST: MindSpore's
 * parallel_mode="hybrid_parallel" through the trainer (ts_trainer_create_custom).
 *
 *   mpirun -n 2 build/example_hybrid_mlp examples/hybrid_mlp.yaml
 *   mpirun -n 4 build/example_hybrid_mlp examples/hybrid_mlp.yaml --dp 2    (2 data x 2 model)
 *   build/example_hybrid_mlp examples/hybrid_mlp.yaml --set train.epochs=1  (one process)
 *
 * Options: --set key=value (any config key, as `tessera train`), --hidden H (default 512),
 * --dp D (data-parallel groups; the other N/D ranks of each group split the model; default 1).
 *
 * The builder writes THIS RANK's graph, 784 -> H -> 10 (the zoo's `mlp` with hidden [H], same
 * parameter names and initialisers, so it starts from the same weights as `tessera train` of
 * model.name: mlp, hidden: [H]):
 *
 *   h      = relu(x @ fc1.weight[block m]^T + fc1.bias[block m])   column-parallel: the rank's
 *                                                                  H/M hidden units (sharded)
 *   z_m    = h @ fc2.weight[:, block m]^T                          row-parallel: a partial sum
 *   logits = AllReduce_sum(z_m) + fc2.bias                         placed here by hand; the bias
 *                                                                  is replicated on every rank
 *
 * fc1.weight (H,784) is cut by rows (output units), fc1.bias (H) alike, fc2.weight (10,H) by
 * columns (input units), on the device matrix (D, M) along axis 1 (model parallel), replicated
 * along axis 0 (data parallel). ts_params_add_sharded allocates and initialises only the rank's
 * slice, exactly as that block of the whole tensor.
 *
 * The loss (docs/parallel-pass.md "Hybrid parallel"): collectives differentiate with the
 * objective = the SUM of every rank's loss, so the trainer (parallel.gradients_mean: true) seeds
 * each rank's loss with 1/N and sums the gradients of parameters several ranks hold (fc2.bias:
 * all N; with D > 1 every slice: its D holders): the N ranks' seeded losses sum to the
 * single-process loss and every gradient is exact. The builder returns its plain loss (the mean
 * over its rows); the trainer logs the mean over the ranks, the model's loss.
 *
 * Every rank reads the whole batch (parallel.full_batch: true): model-parallel ranks must see the
 * same samples. With --dp D each data-parallel group keeps its block of rows of it
 * (ts_rank_slice over the data-parallel axis), so the D groups split the global batch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/comm.h"
#include "tessera/config.h"
#include "tessera/layout.h"
#include "tessera/tessera.h"
#include "tessera/train.h"

typedef struct {
  int hidden, dp;
  double last_loss; /* the last logged training loss */
} hybrid_mlp;

/* The rank's slice of a parameter cut by `layout` (registered on the first call, the training
 * graph; found by name on the second, the evaluation graph). */
static ts_val slice_param(ts_nn *nn, const char *name, ts_shape global, const ts_layout *layout, int rank,
                          ts_init init, int flags, int *err) {
  int id = ts_params_find(nn->p, name);
  if (id < 0) id = ts_params_add_sharded(nn->p, name, global, layout, rank, init, flags);
  if (id < 0) {
    if (!*err) *err = id;
    return TS_NONE;
  }
  return ts_param_value(nn->g, name, TS_F32, ts_params_shape(nn->p, id), id);
}

static ts_val whole_param(ts_nn *nn, const char *name, ts_shape shape, ts_init init, int flags, int *err) {
  int id = ts_params_find(nn->p, name);
  if (id < 0) id = ts_params_add(nn->p, name, shape, init, flags);
  if (id < 0) {
    if (!*err) *err = id;
    return TS_NONE;
  }
  return ts_param_value(nn->g, name, TS_F32, shape, id);
}

static int build(ts_nn *nn, ts_val x, ts_val labels, const ts_model_info *info, ts_val *logits, ts_val *loss,
                 void *user) {
  hybrid_mlp *u = user;
  ts_graph *g = nn->g;
  int N = info->size, D = u->dp, M = N / D, H = u->hidden, C = 10;
  if (N % D) return ts_error_set(TS_EINVAL, "--dp %d does not divide the %d ranks", D, N);
  if (H % M)
    return ts_error_set(TS_EINVAL, "--hidden %d is not divisible by the %d ranks of a model-parallel "
                        "group", H, M);
  int dev[2] = {D, M}; /* axis 0: data parallel, axis 1: model parallel (rank = d*M + m) */
  /* the plan communicator slots of the model-parallel and data-parallel groups (one process:
   * groups of one, which run without a communicator) */
  int mp_slot = N > 1 ? ts_model_group(info, 2, dev, 1) : 0;
  int dp_slot = N > 1 ? ts_model_group(info, 2, dev, 0) : 0;
  if (mp_slot < 0) return mp_slot;
  if (dp_slot < 0) return dp_slot;

  /* the training graph: this data-parallel group's rows of the (whole) batch */
  if (labels != TS_NONE && D > 1) {
    x = ts_rank_slice(g, x, dp_slot, D, 0);
    labels = ts_rank_slice(g, labels, dp_slot, D, 0);
  }
  x = ts_flatten(g, x, 1);
  int64_t in = ts_val_shape(g, x).dims[1];

  ts_layout rows, cols, vec;
  int t_rows[2] = {1, -1}, t_cols[2] = {-1, 1}, t_vec[1] = {1};
  int rc = ts_layout_init(&rows, 2, dev, 2, t_rows, 0);
  if (!rc) rc = ts_layout_init(&cols, 2, dev, 2, t_cols, 0);
  if (!rc) rc = ts_layout_init(&vec, 2, dev, 1, t_vec, 0);
  if (rc) return rc;
  /* PyTorch's Linear defaults, as ts_nn_dense: the fans come from the whole shapes */
  ts_init w_init = {TS_INIT_TORCH_DEFAULT, 0, 0, 0};
  ts_init b1_init = {TS_INIT_TORCH_DEFAULT, 0, 0, in}, b2_init = {TS_INIT_TORCH_DEFAULT, 0, 0, H};
  ts_val w1 = slice_param(nn, "fc1.weight", ts_shape2(H, in), &rows, info->rank, w_init, 0, &rc);
  ts_val b1 = slice_param(nn, "fc1.bias", ts_shape1(H), &vec, info->rank, b1_init, TS_PARAM_NO_DECAY, &rc);
  ts_val w2 = slice_param(nn, "fc2.weight", ts_shape2(C, H), &cols, info->rank, w_init, 0, &rc);
  ts_val b2 = whole_param(nn, "fc2.bias", ts_shape1(C), b2_init, TS_PARAM_NO_DECAY, &rc);
  if (rc) return rc; /* the message names the parameter */

  ts_val h = ts_relu(g, ts_dense(g, x, w1, b1));                         /* (rows, H/M) */
  ts_val z = ts_allreduce(g, ts_dense(g, h, w2, TS_NONE), mp_slot, M, TS_REDUCE_SUM);
  *logits = ts_add(g, z, b2);                                            /* (rows, 10) */
  if (labels != TS_NONE) *loss = ts_softmax_cross_entropy(g, *logits, labels, 0.0f);
  return ts_graph_status(g);
}

static int on_step(ts_trainer *t, const ts_step_info *s, void *user) {
  ((hybrid_mlp *)user)->last_loss = s->loss;
  return TS_OK;
}

int main(int argc, char **argv) {
  hybrid_mlp u = {512, 1, 0};
  const char *path = NULL;
  const char **sets = calloc((size_t)argc, sizeof *sets);
  int nsets = 0, bad = !sets;
  for (int i = 1; i < argc && !bad; i++) {
    if (!strcmp(argv[i], "--set") && i + 1 < argc) sets[nsets++] = argv[++i];
    else if (!strcmp(argv[i], "--hidden") && i + 1 < argc) u.hidden = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--dp") && i + 1 < argc) u.dp = atoi(argv[++i]);
    else if (argv[i][0] != '-' && !path) path = argv[i];
    else bad = 1;
  }
  if (bad || !path || u.hidden < 1 || u.dp < 1) {
    fprintf(stderr, "usage: [mpirun -n N] %s CONFIG.yaml [--set key=value ...] [--hidden H] [--dp D]\n", argv[0]);
    free(sets);
    return 2;
  }
  ts_comm_init(&argc, &argv);
  ts_config cfg;
  int rc = ts_config_load(path, sets, nsets, &cfg);
  free(sets);
  ts_trainer *t = NULL;
  if (!rc) rc = ts_trainer_create_custom(&cfg, build, &u, &t);
  ts_config_free(&cfg); /* the trainer keeps its own copy */
  int N = t ? ts_trainer_world_size(t) : 1, R = t ? ts_trainer_rank(t) : 0;
  if (!rc && R == 0) {
    ts_params *p = ts_trainer_params(t);
    int64_t whole = 0; /* the whole model: the slices' global shapes */
    for (int i = 0; i < ts_params_count(p); i++) {
      ts_shape s = ts_params_global_shape(p, i);
      whole += ts_shape_numel(&s);
    }
    printf("hybrid_mlp: 784-%d-10 on %d rank(s): %d data-parallel x %d model-parallel; %lld parameters, "
           "%lld on rank 0\n",
           u.hidden, N, u.dp, N / u.dp, (long long)whole, (long long)ts_params_numel(p));
    fflush(stdout);
  }
  ts_callback cb = {.name = "hybrid_mlp", .on_step_end = on_step, .user = &u};
  if (!rc) rc = ts_trainer_add_callback(t, &cb);
  if (!rc) rc = ts_trainer_fit(t);
  ts_eval_info ev;
  if (!rc) rc = ts_trainer_evaluate(t, &ev);
  if (!rc && R == 0)
    printf("hybrid_mlp: last training loss %.4f; test loss %.4f, top-1 %.2f%%\n", u.last_loss, ev.loss,
           100 * ev.top1);
  if (rc) fprintf(stderr, "hybrid_mlp: [rank %d] %s\n", R, ts_last_error());
  ts_trainer_free(t);
  if (ts_comm_initialized()) {
    ts_comm *w = NULL;
    if (rc && ts_comm_world(&w) == TS_OK && ts_comm_size(w) > 1) {
      fflush(stdout);
      ts_comm_abort(w, 1); /* the other ranks would wait in their next collective */
    }
    ts_comm_finalize();
  }
  return rc ? (rc == TS_ECONFIG ? 2 : 1) : 0;
}
