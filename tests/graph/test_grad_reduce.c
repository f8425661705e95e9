/* Reductions, sum_to and broadcast_to through graph + executor: gradients vs finite
 * differences, max ties, PyTorch fixtures, bad input (axis out of range, incompatible shapes). */
#include <stdlib.h>
#include <string.h>

#include "grad_harness.h"

static int g_alg, g_keep;
static uint32_t g_mask;
static ts_val build_reduce(ts_graph *g, const ts_val *in, int nin) {
  (void)nin;
  return ts_reduce(g, in[0], (ts_reduce_alg)g_alg, g_mask, g_keep);
}
static ts_val build_sum_to(ts_graph *g, const ts_val *in, int nin) {
  (void)nin;
  return ts_sum_to(g, in[0], ts_shape2(3, 1));
}
static ts_val build_bcast(ts_graph *g, const ts_val *in, int nin) {
  (void)nin;
  return ts_broadcast_to(g, in[0], ts_shape3(2, 3, 4));
}

static const char *names[3] = {"sum", "mean", "max"};

int main(void) {
  int ncase = 0;
  const uint32_t masks[] = {1, 2, 4, 5, 6, 7};
  for (int alg = 0; alg < 3; alg++)
    for (size_t m = 0; m < sizeof masks / sizeof *masks; m++)
      for (int keep = 0; keep <= 1; keep++) {
        ts_graph *g;
        ts_graph_create(&g);
        ts_val x = ts_input(g, "x", TS_F32, ts_shape3(3, 4, 5));
        ts_val y = alg == 0 ? ts_sum(g, x, masks[m], keep) : alg == 1 ? ts_mean(g, x, masks[m], keep)
                                                                       : ts_max(g, x, masks[m], keep);
        float xd[60];
        ts_test_fill(xd, 60, 9 + m, -2, 2); /* distinct values: no ties for max */
        char what[96];
        snprintf(what, sizeof what, "%s (3,4,5) mask 0x%x keepdim %d", names[alg], masks[m], keep);
        gh_check(what, g, y, 1, &x,
                 &(gh_opts){.data = (const void *[]){xd}, .grad_atol = 2e-3, .grad_rtol = 2e-3});
        ts_graph_free(g);
        ncase++;
      }
  {
    ts_graph *g;
    ts_graph_create(&g);
    ts_val x = ts_input(g, "x", TS_F32, ts_shape3(2, 3, 4));
    ts_val y = ts_broadcast_to(g, ts_sum_to(g, x, ts_shape2(3, 1)), ts_shape4(2, 2, 3, 5));
    float xd[24];
    ts_test_fill(xd, 24, 3, -1, 1);
    gh_check("broadcast_to(sum_to(x,(3,1)),(2,2,3,5))", g, y, 1, &x,
             &(gh_opts){.data = (const void *[]){xd}, .grad_atol = 2e-3, .grad_rtol = 2e-3});
    ts_graph_free(g);
    ncase++;
  }
  printf("reduce: %d cases (sum/mean/max over 6 axis sets, keepdim 0/1; sum_to; broadcast_to), "
         "gradient vs finite differences (2e-3), FAST vs REF\n", ncase);

  /* max with ties: the gradient is shared equally (torch.amax) */
  {
    ts_graph *g;
    ts_graph_create(&g);
    ts_val x = ts_input(g, "x", TS_F32, ts_shape2(2, 3));
    ts_val y = ts_max(g, x, 2, 0);
    ts_val loss = ts_sum(g, ts_scale(g, y, 2, 0), 1, 0);
    CHECK_OK(ts_graph_backward(g, loss, 1.0f));
    ts_val gx = ts_graph_grad(g, x);
    ts_plan *p = NULL;
    ts_val keep[] = {y, gx};
    CHECK_OK(ts_plan_create(g, keep, 2, &p));
    if (p) {
      float xd[6] = {1, 3, 3, 5, 5, 5};
      ts_plan_bind(p, x, xd);
      CHECK_OK(ts_plan_run(p, 0));
      const float *gd = ts_plan_data(p, gx), *yd = ts_plan_data(p, y);
      CHECK(gd && yd);
      if (gd && yd) {
        CHECK(yd[0] == 3 && yd[1] == 5);
        CHECK(gd[0] == 0 && gd[1] == 1 && gd[2] == 1);
        CHECK(fabsf(gd[3] - 2.0f / 3) < 1e-6f && fabsf(gd[5] - 2.0f / 3) < 1e-6f);
      }
      ts_plan_free(p);
    }
    ts_graph_free(g);
  }
  printf("reduce: max ties share the gradient equally\n");

  const char *sfx[3] = {"_ax1", "_ax02_keep", "_all"};
  const uint32_t fmask[3] = {2, 5, 7};
  const int fkeep[3] = {0, 1, 0};
  for (int alg = 0; alg < 3; alg++)
    for (int k = 0; k < 3; k++) {
      char name[64];
      snprintf(name, sizeof name, "%s%s", names[alg], sfx[k]);
      g_alg = alg, g_mask = fmask[k], g_keep = fkeep[k];
      gh_fixture(name, 1, build_reduce, 1, 1e-6, 1e-5, 0);
    }
  gh_fixture("sum_to", 1, build_sum_to, 1, 1e-6, 1e-5, 0);
  gh_fixture("broadcast_to", 1, build_bcast, 1, 1e-6, 1e-5, 0);
  printf("reduce: 11 PyTorch fixtures (sum/mean/max x 3 axis sets, sum_to, broadcast_to)\n");

  /* bad input */
  {
    ts_graph *g;
    ts_graph_create(&g);
    ts_val x = ts_input(g, "x", TS_F32, ts_shape3(2, 3, 4));
    CHECK_GRAPH_ERROR(g, ts_sum(g, x, 0x21, 0), TS_EINVAL, "sum: x x(2,3,4):f32", "axis 5",
                      "reduce axis out of range");
    ts_graph_free(g);
    ts_graph_create(&g);
    x = ts_input(g, "x", TS_F32, ts_shape3(2, 3, 4));
    CHECK_GRAPH_ERROR(g, ts_mean(g, x, 0, 1), TS_EINVAL, "mean", "empty axes mask", "empty mask");
    ts_graph_free(g);
    ts_graph_create(&g);
    x = ts_input(g, "x", TS_F32, ts_shape3(2, 3, 4));
    CHECK_GRAPH_ERROR(g, ts_sum_to(g, x, ts_shape2(2, 4)), TS_ESHAPE, "sum_to: x x(2,3,4):f32",
                      "(2,4)", "sum_to incompatible");
    ts_graph_free(g);
    ts_graph_create(&g);
    x = ts_input(g, "x", TS_F32, ts_shape2(3, 2));
    CHECK_GRAPH_ERROR(g, ts_broadcast_to(g, x, ts_shape2(3, 4)), TS_ESHAPE, "broadcast_to", "(3,4)",
                      "broadcast_to incompatible");
    ts_graph_free(g);
    ts_graph_create(&g);
    x = ts_input(g, "x", TS_I32, ts_shape2(3, 2));
    CHECK_GRAPH_ERROR(g, ts_max(g, x, 1, 0), TS_EDTYPE, "max", "x(3,2):i32", "max of i32");
    ts_graph_free(g);
  }
  printf("reduce: bad input (axis out of range, empty mask, incompatible sum_to/broadcast_to, "
         "i32) gives a status and a message\n");
  return ts_test_finish("test_grad_reduce");
}
