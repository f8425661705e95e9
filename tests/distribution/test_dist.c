/* Distribution objects (src/distribution/dist.h): the layouts by name and their refusals; dry runs
 * for jobs that do not exist (the data cut, slices, describe, reduction bytes); and, in a real job
 * (this program under mpirun -n 1, 2, 4), one training step of data_parallel and
 * semi_auto_parallel against stand_alone on the whole batch: the step's loss, the reduced
 * gradients, and the whole model gathered from slices and cut back. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "distribution/dist.h"
#include "tessera/zoo.h"
#include "test_util.h"

enum { F = 8, K = 4, MB = 8, EB = 8 };

static int mlp(ts_nn *nn, ts_val x, ts_val y, const ts_model_info *info, ts_val *logits, ts_val *loss, void *u) {
  (void)info;
  (void)u;
  static const int hidden[] = {16};
  ts_mlp_config m = {K, hidden, 1, 0};
  return ts_zoo_mlp(nn, &m, x, y, logits, loss);
}

static ts_dist_config config(void) {
  ts_dist_config c;
  memset(&c, 0, sizeof c);
  c.micro_batch = MB;
  c.eval_batch = EB;
  c.accum = 1;
  c.seed = 7;
  c.gradients_mean = 1;
  c.wire = TS_F32;
  return c;
}

static ts_dist_model model(const ts_strategy_set *set) {
  ts_dist_model m;
  memset(&m, 0, sizeof m);
  m.fn = mlp;
  m.dtype = TS_F32;
  m.sample = ts_shape1(F);
  m.strategies = set;
  return m;
}

static void test_refusals_and_dry_runs(void) {
  CHECK(ts_dist_find("data_parallel") && ts_dist_find("stand_alone") && ts_dist_find("semi_auto_parallel") &&
        ts_dist_find("hybrid_parallel"));
  CHECK(ts_dist_find("auto_parallel") == NULL && ts_dist_find(NULL) == NULL);
  CHECK(!strcmp(ts_dist_name(ts_dist_find("hybrid_parallel")), "hybrid_parallel"));
  ts_dist_config c = config();
  ts_dist_model m = model(NULL);
  ts_dist *d = NULL;
  EXPECT_ERR(ts_dist_create(ts_dist_find("stand_alone"), &c, &m, 4, 0, &d), TS_ECONFIG, "stand_alone runs on one");
  EXPECT_ERR(ts_dist_create(ts_dist_find("hybrid_parallel"), &c, &m, 2, 0, &d), TS_ECONFIG, "C API");
  EXPECT_ERR(ts_dist_create(ts_dist_find("data_parallel"), &c, &m, 4, 4, &d), TS_EINVAL, "rank 4 of 4");
  c.lamb = 1; /* lamb under semi_auto_parallel: its norms are summed over the slices (dist_lamb.c) */
  CHECK_OK(ts_dist_create(ts_dist_find("semi_auto_parallel"), &c, &m, 2, 0, &d));
  ts_dist_free(d);
  d = NULL;
  c.lamb = 0;
  /* data_parallel planned for 4 devices, rank 1: a quarter of each batch, every parameter whole */
  CHECK_OK(ts_dist_create(ts_dist_find("data_parallel"), &c, &m, 4, 1, &d));
  CHECK(ts_dist_world(d) == NULL);
  CHECK_OK(ts_dist_build(d, &m));
  const ts_dist_run *r = ts_dist_get(d);
  CHECK(r->data_parts == 4 && r->data_index == 1 && r->micro_batch == MB / 4 && r->eval_split && !r->sliced);
  CHECK(r->rank == 1 && r->size == 4 && r->plan && r->plan_e);
  int64_t n = ts_dist_num_params(d);
  CHECK(n == (F * 16 + 16) + (16 * K + K) && (int64_t)ts_params_numel(r->params) == n);
  char *txt = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&txt, &len);
  double red = 0;
  CHECK_OK(ts_dist_describe(d, f, &red));
  fclose(f);
  CHECK_MSG(strstr(txt, "replicated") && strstr(txt, "cut over the ranks"), "%s", txt);
  CHECK(fabs(red - 2.0 * 3 / 4 * (double)n * 4) < 1e-6); /* ring all-reduce of every gradient */
  free(txt);
  ts_dist_free(d);
  /* a batch the ranks cannot share */
  c.micro_batch = 6;
  CHECK_OK(ts_dist_create(ts_dist_find("data_parallel"), &c, &m, 4, 0, &d));
  EXPECT_ERR(ts_dist_build(d, &m), TS_ECONFIG, "must divide", "4 ranks");
  ts_dist_free(d);
  c.micro_batch = MB;
  /* semi_auto_parallel planned for 4 devices: fc1 cut by its output features */
  ts_strategy_set *set;
  CHECK_OK(ts_strategy_set_create(4, 0, &set));
  CHECK_OK(ts_strategy_set_put_text(set, "fc1.dense", "((1,1),(4,1))"));
  m = model(set);
  CHECK_OK(ts_dist_create(ts_dist_find("semi_auto_parallel"), &c, &m, 4, 2, &d));
  CHECK_OK(ts_dist_build(d, &m));
  r = ts_dist_get(d);
  CHECK(r->sliced && ts_dist_num_params(d) == n);
  CHECK((int64_t)ts_params_numel(r->params) == F * 16 / 4 + 16 / 4 + 16 * K / 4 + K);
  CHECK(ts_dist_strategies(d) != NULL);
  f = open_memstream(&txt, &len);
  CHECK_OK(ts_dist_describe(d, f, &red));
  fclose(f);
  CHECK_MSG(strstr(txt, "fc1.dense") && strstr(txt, "user"), "%s", txt);
  free(txt);
  ts_dist_free(d);
  ts_strategy_set_free(set);
}

/* Max |a - b| over n. */
static double maxdiff(const float *a, const float *b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
  return m;
}

/* One step of layout `name` on this job vs stand_alone on the whole batch. */
static void test_step(const char *name, const ts_strategy_set *set) {
  ts_dist_config c = config();
  ts_dist_model m = model(set), m1 = model(NULL);
  ts_dist *d = NULL, *one = NULL;
  CHECK_OK(ts_dist_create(ts_dist_find(name), &c, &m, 0, 0, &d));
  CHECK_OK(ts_dist_create(ts_dist_find("stand_alone"), &c, &m1, 0, 0, &one));
  if (!d || !one) return;
  CHECK_OK(ts_dist_build(d, &m));
  CHECK_OK(ts_dist_build(one, &m1));
  CHECK_OK(ts_dist_start(d));
  CHECK_OK(ts_dist_start(one));
  const ts_dist_run *r = ts_dist_get(d), *r1 = ts_dist_get(one);
  float x[MB * F];
  int32_t y[MB];
  ts_test_fill(x, MB * F, 11, -1, 1);
  for (int i = 0; i < MB; i++) y[i] = (i * 3) % K;
  /* stand-alone: the whole batch */
  CHECK_OK(ts_plan_bind(r1->plan, r1->x, x));
  CHECK_OK(ts_plan_bind(r1->plan, r1->y, y));
  CHECK_OK(ts_plan_run(r1->plan, 0));
  double loss1 = *(const float *)ts_plan_data(r1->plan, r1->loss), wait = 0;
  /* the layout: this rank's piece */
  int64_t off = r->micro_batch * r->data_index;
  float *grads = ts_params_grads(r->params);
  ts_dist_step_begin(d, grads);
  CHECK_OK(ts_plan_bind(r->plan, r->x, x + off * F));
  CHECK_OK(ts_plan_bind(r->plan, r->y, y + off));
  CHECK_OK(ts_plan_run(r->plan, 0));
  double loss = *(const float *)ts_plan_data(r->plan, r->loss);
  CHECK_OK(ts_dist_step_end(d, grads, &loss, &wait));
  CHECK_MSG(fabs(loss - loss1) < 1e-5, "%s: loss %.7f vs one process %.7f", name, loss, loss1);
  /* the whole model's gradients: gather them as parameters of a whole store */
  ts_params *full = NULL;
  int owned = 0;
  CHECK_OK(ts_dist_whole_store(d, &full, &owned));
  CHECK(owned == r->sliced);
  size_t n = ts_params_numel(r1->params);
  CHECK(full && ts_params_numel(full) == n);
  if (full) {
    float *keep = malloc(sizeof(float) * ts_params_numel(r->params));
    memcpy(keep, ts_params_data(r->params), sizeof(float) * ts_params_numel(r->params));
    memcpy(ts_params_data(r->params), grads, sizeof(float) * ts_params_numel(r->params));
    CHECK_OK(ts_dist_move(d, full, NULL, NULL, 1));
    double gd = maxdiff(ts_params_data(full), ts_params_grads(r1->params), n);
    CHECK_MSG(gd < 1e-5, "%s: gradients differ from one process's by %g", name, gd);
    /* parameters: gathered = one process's initial ones; cut back = the rank's own */
    memcpy(ts_params_data(r->params), keep, sizeof(float) * ts_params_numel(r->params));
    CHECK_OK(ts_dist_move(d, full, NULL, NULL, 1));
    CHECK(maxdiff(ts_params_data(full), ts_params_data(r1->params), n) == 0);
    if (owned) { /* slices: cut the whole store back into this rank's */
      memset(ts_params_data(r->params), 0, sizeof(float) * ts_params_numel(r->params));
      CHECK_OK(ts_dist_move(d, full, NULL, NULL, 0));
      CHECK(maxdiff(ts_params_data(r->params), keep, ts_params_numel(r->params)) == 0);
    }
    free(keep);
  }
  if (owned) ts_params_free(full);
  float norm = 0, norm1 = 0;
  CHECK_OK(ts_dist_clip(d, grads, 1e-3f, &norm));
  CHECK_OK(ts_dist_clip(one, ts_params_grads(r1->params), 1e-3f, &norm1));
  CHECK_MSG(fabsf(norm - norm1) < 1e-5f * (1 + norm1), "%s: global norm %g vs %g", name, norm, norm1);
  ts_dist_free(d);
  ts_dist_free(one);
}

int main(void) {
  test_refusals_and_dry_runs();
  test_step("data_parallel", NULL);
  int N = 0;
  {
    ts_comm *w = NULL;
    if (!ts_comm_world(&w)) N = ts_comm_size(w);
    ts_comm_free(w);
  }
  ts_strategy_set *set = NULL;
  if (N > 0 && !ts_strategy_set_create(N, 0, &set) && !ts_strategy_set_put_text(set, "fc1.dense", N == 1 ? "((1,1),(1,1))" : N == 2 ? "((1,1),(2,1))" : "((1,1),(4,1))")) {
    test_step("semi_auto_parallel", set);
    ts_strategy_set_free(set);
  }
  printf("checked: layouts by name, refusals, dry runs (data cut, slices, describe, reduction bytes), one step of "
         "data_parallel and semi_auto_parallel on %d rank(s) vs one process (loss, gradients, gather/cut, clipping)\n", N);
  int rc = ts_test_finish("test_dist");
  ts_comm_finalize();
  return rc;
}
