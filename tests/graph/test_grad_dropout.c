/* DROPOUT through the graph, autodiff and executor: gradient against central finite
 * differences of a double forward using the same Philox mask (both backends); the mask is
 * identical for the same (seed, step), different for another step or seed; the keep fraction is
 * 1-p; the backward regenerates exactly the forward's mask (gradient zero exactly where the
 * output is); inference graphs (training off) and p = 0 add no node. Bad p and dtypes give a
 * status naming the op. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/tessera.h"
#include "kernels/dropout.h"
#include "grad_harness.h"

typedef struct {
  int64_t n;
  float p;
  uint64_t seed, step; /* step given to ts_plan_run */
} drop_ctx;

static void fwd_dropout(double *const *x, double *y, const void *vc) {
  const drop_ctx *c = vc;
  for (int64_t i = 0; i < c->n; i++)
    y[i] = ts__dropout_keep(c->seed, c->step, (uint64_t)i, c->p) ? x[0][i] / (1.0 - c->p) : 0.0;
}

static void case_fd(ts_shape s, float p, uint64_t seed, uint64_t step) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_F32, s);
  ts_val y = ts_dropout(g, x, p, seed);
  CHECK(y != x);
  drop_ctx c = {ts_shape_numel(&s), p, seed, step};
  char what[96], b[64];
  snprintf(what, sizeof what, "dropout %s p=%.2f seed %llu step %llu", ts_shape_str(&s, b, sizeof b),
           (double)p, (unsigned long long)seed, (unsigned long long)step);
  gh_check(what, g, y, 1, &x, &(gh_opts){.fwd = fwd_dropout, .ctx = &c, .tol = 1e-5, .step = step});
  ts_graph_free(g);
}

/* y = dropout(x); loss = sum(y * r): checks masks across steps, keep fraction, and that the
 * gradient (= mask * r / (1-p)) uses the forward's mask. */
static void case_masks(void) {
  const int64_t R = 64, C = 1024, n = R * C;
  const float p = 0.25f;
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_F32, ts_shape2(R, C));
  ts_val y = ts_dropout(g, x, p, 1234);
  ts_val y2 = ts_dropout(g, x, p, 1235); /* another layer: another seed */
  ts_val r, loss = gh_weighted_loss(g, y, &r);
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  ts_val gx = ts_graph_grad(g, x);
  CHECK(gx != TS_NONE);
  float *xv = malloc((size_t)n * 4), *rv = malloc((size_t)n * 4), *y5 = malloc((size_t)n * 4),
        *y6 = malloc((size_t)n * 4), *g5 = malloc((size_t)n * 4);
  ts_test_fill(xv, (size_t)n, 3, 0.5f, 1.5f); /* nonzero */
  ts_test_fill(rv, (size_t)n, 4, 0.5f, 1.5f);
  ts_val keep[3] = {y, y2, gx};
  ts_plan *p5 = NULL;
  CHECK_OK(ts_plan_create(g, keep, 3, &p5));
  if (!p5) return;
  CHECK_OK(ts_plan_bind(p5, x, xv));
  CHECK_OK(ts_plan_bind(p5, r, rv));
  CHECK_OK(ts_plan_run(p5, 5));
  memcpy(y5, ts_plan_data(p5, y), (size_t)n * 4);
  memcpy(g5, ts_plan_data(p5, gx), (size_t)n * 4);
  const float *yo = ts_plan_data(p5, y2);
  size_t kept = 0, diff_seed = 0, bad_grad = 0;
  float scale = 1.0f / (1.0f - p);
  for (int64_t i = 0; i < n; i++) {
    kept += y5[i] != 0.0f;
    diff_seed += (y5[i] != 0.0f) != (yo[i] != 0.0f);
    float want = y5[i] != 0.0f ? rv[i] * scale : 0.0f;
    bad_grad += g5[i] != want;
  }
  double frac = (double)kept / (double)n, sd = sqrt(p * (1 - p) / (double)n);
  CHECK_MSG(fabs(frac - (1 - p)) < 5 * sd, "keep fraction %.4f, expected %.4f", frac, 1 - p);
  CHECK_MSG(bad_grad == 0, "%zu gradient elements not mask * r / (1-p)", bad_grad);
  CHECK_MSG(fabs((double)diff_seed / n - 2 * p * (1 - p)) < 0.01, "seeds differ in %.4f", (double)diff_seed / n);
  /* same step again: identical; next step: a different mask, gradient follows it */
  CHECK_OK(ts_plan_run(p5, 5));
  CHECK(memcmp(y5, ts_plan_data(p5, y), (size_t)n * 4) == 0);
  CHECK(memcmp(g5, ts_plan_data(p5, gx), (size_t)n * 4) == 0);
  CHECK_OK(ts_plan_run(p5, 6));
  memcpy(y6, ts_plan_data(p5, y), (size_t)n * 4);
  const float *g6 = ts_plan_data(p5, gx);
  size_t diff_step = 0;
  bad_grad = 0;
  for (int64_t i = 0; i < n; i++) {
    diff_step += (y5[i] != 0.0f) != (y6[i] != 0.0f);
    bad_grad += (g6[i] != 0.0f) != (y6[i] != 0.0f);
  }
  CHECK_MSG(fabs((double)diff_step / n - 2 * p * (1 - p)) < 0.01, "steps differ in %.4f", (double)diff_step / n);
  CHECK_MSG(bad_grad == 0, "step 6: gradient mask != forward mask at %zu elements", bad_grad);
  /* the reference backend gives the same bits (same kernel) */
  ts_backend_set(TS_BACKEND_REF);
  CHECK_OK(ts_plan_run(p5, 6));
  CHECK(memcmp(y6, ts_plan_data(p5, y), (size_t)n * 4) == 0);
  ts_backend_set(TS_BACKEND_FAST);
  ts_plan_free(p5);
  printf("masks: keep %.4f (p=%.2f), same step identical, step change %.4f, seed change %.4f, "
         "gradient == forward mask * r/(1-p)\n", frac, (double)p, (double)diff_step / n,
         (double)diff_seed / n);
  free(xv); free(rv); free(y5); free(y6); free(g5);
  ts_graph_free(g);
}

static void case_inference(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_F32, ts_shape2(3, 4));
  CHECK(ts_dropout(g, x, 0.0f, 1) == x);
  int nn = ts_graph_num_nodes(g);
  ts_graph_set_training(g, 0);
  CHECK(ts_dropout(g, x, 0.5f, 1) == x);
  CHECK(ts_graph_num_nodes(g) == nn);
  CHECK(ts_graph_status(g) == TS_OK);
  ts_graph_free(g);
  printf("inference mode and p = 0: identity, no node\n");
}

static void bad_inputs(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_F32, ts_shape2(3, 4));
  CHECK_GRAPH_ERROR(g, ts_dropout(g, x, 1.5f, 1), TS_EINVAL, "dropout", "outside [0,1]", NULL);
  ts_graph_free(g);
  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_F32, ts_shape2(3, 4));
  CHECK_GRAPH_ERROR(g, ts_dropout(g, x, NAN, 1), TS_EINVAL, "dropout", "x(3,4)", NULL);
  ts_graph_free(g);
  CHECK_OK(ts_graph_create(&g));
  x = ts_input(g, "x", TS_I32, ts_shape2(3, 4));
  CHECK_GRAPH_ERROR(g, ts_dropout(g, x, 0.5f, 1), TS_EDTYPE, "dropout", "f32", NULL);
  ts_graph_free(g);
  CHECK_OK(ts_graph_create(&g));
  CHECK_GRAPH_ERROR(g, ts_dropout(g, TS_NONE, 0.5f, 1), TS_EINVAL, "dropout", NULL, NULL);
  ts_graph_free(g);
  printf("bad input: p = 1.5, p = NaN, i32 input, TS_NONE\n");
}

int main(void) {
  case_fd(ts_shape2(5, 7), 0.3f, 42, 5);
  case_fd(ts_shape3(2, 3, 50), 0.5f, 7, 123456789);
  case_fd(ts_shape1(1000), 0.1f, 0xDEADBEEFCAFEull, 0);
  printf("dropout: %d graphs ref+fast vs FD with the Philox mask\n", gh_cases());
  case_masks();
  case_inference();
  bad_inputs();
  return ts_test_finish("test_grad_dropout");
}
