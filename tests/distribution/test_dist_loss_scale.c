/* Loss scaling in the distribution objects (src/distribution/dist.h): ts_dist_set_loss_scale puts
 * the scale into the plan's loss-gradient seed (ts_plan_set_const), ts_dist_clip_scaled unscales,
 * clips and reports overflow. For stand_alone, data_parallel and semi_auto_parallel (fc1 cut over
 * the ranks: the sliced path) on this job (mpirun -n 1, 2, 4), one step with the scale against the
 * same layout without it, on the same batch:
 *   - the raw gradients are exactly 1024 x the unscaled ones (a power of two scales exactly);
 *   - after ts_dist_clip_scaled(1/1024) they are bitwise the unscaled ones, the norm bitwise the
 *     same; with clipping on too; a scale of 1000 within 1e-6 relative;
 *   - an inf in ONE rank's gradient (before the reduction) is an overflow on every rank, the
 *     gradients are left as they were and the step's norm is not finite;
 * and the refusals: a non-const value, a scale of 0 or inf. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec.h"
#include "tessera/comm.h"
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

static ts_dist *make(const char *name, const ts_strategy_set *set) {
  ts_dist_config c;
  memset(&c, 0, sizeof c);
  c.micro_batch = MB;
  c.eval_batch = EB;
  c.accum = 1;
  c.seed = 7;
  c.gradients_mean = 1;
  c.wire = TS_F32;
  ts_dist_model m;
  memset(&m, 0, sizeof m);
  m.fn = mlp;
  m.dtype = TS_F32;
  m.sample = ts_shape1(F);
  m.strategies = set;
  ts_dist *d = NULL;
  CHECK_OK(ts_dist_create(ts_dist_find(name), &c, &m, 0, 0, &d));
  if (!d) return NULL;
  CHECK_OK(ts_dist_build(d, &m));
  CHECK_OK(ts_dist_start(d));
  return d;
}

/* One forward/backward and the reduction; inject: this rank puts an inf into its first gradient
 * before the reduction. The gradients (reduced) stay in the store. */
static void step(ts_dist *d, int inject) {
  const ts_dist_run *r = ts_dist_get(d);
  float x[MB * F];
  int32_t y[MB];
  ts_test_fill(x, MB * F, 11, -1, 1);
  for (int i = 0; i < MB; i++) y[i] = (i * 3) % K;
  int64_t off = r->micro_batch * r->data_index;
  float *grads = ts_params_grads(r->params);
  ts_dist_step_begin(d, grads);
  CHECK_OK(ts_plan_bind(r->plan, r->x, x + off * F));
  CHECK_OK(ts_plan_bind(r->plan, r->y, y + off));
  CHECK_OK(ts_plan_run(r->plan, 0));
  if (inject) grads[0] = INFINITY;
  double loss = *(const float *)ts_plan_data(r->plan, r->loss), wait = 0;
  CHECK_OK(ts_dist_step_end(d, grads, &loss, &wait));
}

static int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

static void test_layout(const char *name, const ts_strategy_set *set, ts_comm *w) {
  int rank = w ? ts_comm_rank(w) : 0, size = w ? ts_comm_size(w) : 1;
  ts_dist *d0 = make(name, set), *d = make(name, set);
  if (!d0 || !d) {
    ts_dist_free(d0);
    ts_dist_free(d);
    return;
  }
  const ts_dist_run *r0 = ts_dist_get(d0), *r = ts_dist_get(d);
  size_t n = ts_params_numel(r->params);
  float *g0 = ts_params_grads(r0->params), *g = ts_params_grads(r->params);
  float *ref = malloc(n * sizeof(float)), *raw = malloc(n * sizeof(float));
  /* the refusals */
  CHECK(ts_dist_loss_scale(d) == 1.0f);
  EXPECT_ERR(ts_dist_set_loss_scale(d, 0), TS_EINVAL, "loss scale 0");
  EXPECT_ERR(ts_dist_set_loss_scale(d, INFINITY), TS_EINVAL, "finite positive");
  EXPECT_ERR(ts_plan_set_const(r->plan, r->x, 2.0f), TS_EINVAL, "not the output of a const node");
  float nrm = 0;
  int ovf = 0;
  EXPECT_ERR(ts_dist_clip_scaled(d, g, 0, 0.0f, &nrm, &ovf), TS_EINVAL, "loss scale");
  /* unscaled reference: its gradients and norm, clipping off */
  step(d0, 0);
  float norm0 = 0, norm = 0;
  int ov0 = 1, ov = 1;
  CHECK_OK(ts_dist_clip_scaled(d0, g0, 0, 1.0f, &norm0, &ov0));
  CHECK(ov0 == 0 && norm0 > 0 && isfinite(norm0));
  memcpy(ref, g0, n * sizeof(float));
  /* x 1024: the raw gradients exactly 1024 x, then unscaled bitwise */
  CHECK_OK(ts_dist_set_loss_scale(d, 1024.0f));
  CHECK(ts_dist_loss_scale(d) == 1024.0f);
  step(d, 0);
  size_t bad = n;
  for (size_t i = 0; i < n; i++)
    if (g[i] != 1024.0f * ref[i]) {
      bad = i;
      break;
    }
  CHECK_MSG(bad == n, "%s: raw gradient %zu is %.9g, not 1024 x %.9g", name, bad, bad < n ? g[bad] : 0.0,
            bad < n ? ref[bad] : 0.0);
  memcpy(raw, g, n * sizeof(float));
  CHECK_OK(ts_dist_clip_scaled(d, g, 0, 1.0f / 1024, &norm, &ov));
  CHECK_MSG(ov == 0 && norm == norm0, "%s: norm %.9g (overflow %d) vs unscaled %.9g", name, norm, ov, norm0);
  CHECK_MSG(same_bits(g, ref, n), "%s: unscaled gradients differ from the reference", name);
  /* with clipping: the same as clipping the unscaled gradients */
  float cnorm0 = 0, cnorm = 0;
  memcpy(g0, ref, n * sizeof(float));
  CHECK_OK(ts_dist_clip(d0, g0, 0.25f * norm0, &cnorm0));
  memcpy(g, raw, n * sizeof(float));
  CHECK_OK(ts_dist_clip_scaled(d, g, 0.25f * norm0, 1.0f / 1024, &cnorm, &ov));
  CHECK(cnorm == cnorm0 && ov == 0);
  CHECK_MSG(same_bits(g, g0, n), "%s: clipped gradients differ from the unscaled run's", name);
  float c2 = 0;
  CHECK_OK(ts_dist_clip(d, g, 1e30f, &c2)); /* clipped to a quarter of the norm */
  CHECK_MSG(fabsf(c2 - 0.25f * norm0) <= 1e-5f * norm0, "%s: clipped norm %g vs %g", name, c2, 0.25f * norm0);
  /* a scale that is not a power of two: within rounding */
  CHECK_OK(ts_dist_set_loss_scale(d, 1000.0f));
  step(d, 0);
  CHECK_OK(ts_dist_clip_scaled(d, g, 0, 1.0f / 1000, &norm, &ov));
  CHECK(ov == 0 && fabsf(norm - norm0) <= 1e-6f * norm0);
  CHECK_CLOSE(g, ref, n, 1e-6 * norm0, 1e-6, "scale 1000, unscaled");
  /* an inf in the last rank's gradient only: every rank sees the overflow; gradients untouched */
  CHECK_OK(ts_dist_set_loss_scale(d, 65536.0f));
  step(d, rank == size - 1);
  memcpy(raw, g, n * sizeof(float));
  CHECK_OK(ts_dist_clip_scaled(d, g, 1.0f, 1.0f / 65536, &norm, &ov));
  CHECK_MSG(ov == 1 && !isfinite(norm), "%s, rank %d: overflow %d, norm %g", name, rank, ov, norm);
  CHECK_MSG(memcmp(g, raw, n * sizeof(float)) == 0, "%s: the gradients were changed on overflow", name);
  if (w) { /* and the same on every rank */
    int32_t mn = ov, mx = ov;
    CHECK_OK(ts_comm_allreduce(w, &mn, &mn, 1, TS_I32, TS_REDUCE_MIN));
    CHECK_OK(ts_comm_allreduce(w, &mx, &mx, 1, TS_I32, TS_REDUCE_MAX));
    CHECK_MSG(mn == 1 && mx == 1, "%s: overflow differs over the ranks (min %d, max %d)", name, mn, mx);
  }
  /* back to finite: no overflow again */
  step(d, 0);
  CHECK_OK(ts_dist_clip_scaled(d, g, 0, 1.0f / 65536, &norm, &ov));
  CHECK(ov == 0 && same_bits(g, ref, n));
  if (rank == 0) printf("%-20s on %d rank(s): x1024 exact and unscaled bitwise (norm %.6g), clipped bitwise, x1000 "
                        "within 1e-6, one rank's inf an overflow everywhere\n", name, size, norm0);
  free(ref);
  free(raw);
  ts_dist_free(d0);
  ts_dist_free(d);
}

int main(void) {
  test_layout("stand_alone", NULL, NULL);
  ts_comm *w = NULL;
  CHECK_OK(ts_comm_init(NULL, NULL));
  CHECK_OK(ts_comm_world(&w));
  int N = w ? ts_comm_size(w) : 1;
  test_layout("data_parallel", NULL, w);
  ts_strategy_set *set = NULL;
  if (!ts_strategy_set_create(N, 0, &set) &&
      !ts_strategy_set_put_text(set, "fc1.dense", N == 1 ? "((1,1),(1,1))" : N == 2 ? "((1,1),(2,1))" : "((1,1),(4,1))"))
    test_layout("semi_auto_parallel", set, w); /* fc1 sliced: the norm's all-reduce carries the overflow */
  ts_strategy_set_free(set);
  ts_comm_free(w);
  return ts_test_finish_job("test_dist_loss_scale");
}
