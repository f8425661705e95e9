/* Batch-norm (training and eval) and layer-norm through graph + executor: gradients of x, gamma
 * and beta vs finite differences, running statistics, PyTorch fixtures, bad input. */
#include <stdlib.h>
#include <string.h>

#include "grad_harness.h"

static ts_val build_bn(ts_graph *g, const ts_val *in, int nin) {
  (void)nin;
  return ts_batchnorm(g, in[0], in[1], in[2], in[3], in[4], 0.1f, 1e-5f);
}
static ts_val build_ln(ts_graph *g, const ts_val *in, int nin) {
  (void)nin;
  return ts_layernorm(g, in[0], in[1], in[2], 1e-5f);
}

static void bn_case(ts_shape xs, int training) {
  ts_graph *g;
  ts_graph_create(&g);
  ts_graph_set_training(g, training);
  const int64_t C = xs.dims[1], n = ts_shape_numel(&xs);
  ts_val x = ts_input(g, "x", TS_F32, xs);
  ts_val gm = ts_param_value(g, "gamma", TS_F32, ts_shape1(C), 0);
  ts_val bt = ts_param_value(g, "beta", TS_F32, ts_shape1(C), 1);
  ts_val rm = ts_state_value(g, "rmean", TS_F32, ts_shape1(C), 2);
  ts_val rv = ts_state_value(g, "rvar", TS_F32, ts_shape1(C), 3);
  ts_val y = ts_batchnorm(g, x, gm, bt, rm, rv, 0.1f, 1e-5f);
  float *xd = malloc(4 * n), *gd = malloc(4 * C), *bd = malloc(4 * C), *rmd = malloc(4 * C),
        *rvd = malloc(4 * C);
  ts_test_fill(xd, n, 3 + n, -2, 2);
  ts_test_fill(gd, C, 4, 0.5f, 1.5f);
  ts_test_fill(bd, C, 5, -0.5f, 0.5f);
  ts_test_fill(rmd, C, 6, -0.5f, 0.5f);
  ts_test_fill(rvd, C, 7, 0.5f, 1.5f);
  char what[96], s[48];
  snprintf(what, sizeof what, "batchnorm %s %s", training ? "train" : "eval",
           ts_shape_str(&xs, s, sizeof s));
  gh_check(what, g, y, 5, (ts_val[]){x, gm, bt, rm, rv},
           &(gh_opts){.data = (const void *[]){xd, gd, bd, rmd, rvd},
                      .want = (int[]){1, 1, 1, 0, 0}, .grad_atol = 2e-3, .grad_rtol = 5e-3});
  ts_graph_free(g);
  free(xd), free(gd), free(bd), free(rmd), free(rvd);
}

static void ln_case(ts_shape xs) {
  ts_graph *g;
  ts_graph_create(&g);
  const int64_t D = xs.dims[xs.ndim - 1], n = ts_shape_numel(&xs);
  ts_val x = ts_input(g, "x", TS_F32, xs);
  ts_val gm = ts_param_value(g, "gamma", TS_F32, ts_shape1(D), 0);
  ts_val bt = ts_param_value(g, "beta", TS_F32, ts_shape1(D), 1);
  ts_val y = ts_layernorm(g, x, gm, bt, 1e-5f);
  float *xd = malloc(4 * n), *gd = malloc(4 * D), *bd = malloc(4 * D);
  ts_test_fill(xd, n, 8 + n, -2, 2);
  ts_test_fill(gd, D, 9, 0.5f, 1.5f);
  ts_test_fill(bd, D, 10, -0.5f, 0.5f);
  char what[96], s[48];
  snprintf(what, sizeof what, "layernorm %s", ts_shape_str(&xs, s, sizeof s));
  gh_check(what, g, y, 3, (ts_val[]){x, gm, bt},
           &(gh_opts){.data = (const void *[]){xd, gd, bd}, .grad_atol = 2e-3, .grad_rtol = 5e-3});
  ts_graph_free(g);
  free(xd), free(gd), free(bd);
}

int main(void) {
  for (int tr = 1; tr >= 0; tr--) {
    bn_case(ts_shape4(4, 3, 2, 2), tr);
    bn_case(ts_shape2(6, 4), tr);
    bn_case(ts_shape3(3, 2, 5), tr);
  }
  printf("batchnorm: train and eval on (N,C,H,W), (N,C), (N,C,L): dx, dgamma, dbeta vs finite "
         "differences (2e-3 + 5e-3 rel), FAST vs REF\n");
  ln_case(ts_shape3(3, 4, 8));
  ln_case(ts_shape1(10));
  ln_case(ts_shape2(5, 33));
  printf("layernorm: (3,4,8), (10), (5,33): dx, dgamma, dbeta vs finite differences\n");

  /* running statistics: two training steps, PyTorch's update rule with unbiased variance */
  {
    ts_graph *g;
    ts_graph_create(&g);
    ts_val x = ts_input(g, "x", TS_F32, ts_shape3(4, 2, 3));
    ts_val gm = ts_input(g, "g", TS_F32, ts_shape1(2)), bt = ts_input(g, "b", TS_F32, ts_shape1(2));
    ts_val rm = ts_state_value(g, "rm", TS_F32, ts_shape1(2), 0);
    ts_val rv = ts_state_value(g, "rv", TS_F32, ts_shape1(2), 1);
    ts_val y = ts_batchnorm(g, x, gm, bt, rm, rv, 0.25f, 1e-5f);
    ts_plan *p = NULL;
    CHECK_OK(ts_plan_create(g, &y, 1, &p));
    if (p) {
      float xd[24], gd[2] = {1, 1}, bd[2] = {0, 0}, rmd[2] = {0, 1}, rvd[2] = {1, 2};
      ts_test_fill(xd, 24, 1, -1, 3);
      ts_plan_bind(p, x, xd), ts_plan_bind(p, gm, gd), ts_plan_bind(p, bt, bd);
      ts_plan_bind(p, rm, rmd), ts_plan_bind(p, rv, rvd);
      double em[2] = {0, 1}, ev[2] = {1, 2};
      for (int step = 0; step < 2; step++) {
        CHECK_OK(ts_plan_run(p, step));
        for (int c = 0; c < 2; c++) {
          double m = 0, v = 0;
          for (int n = 0; n < 4; n++)
            for (int j = 0; j < 3; j++) m += xd[(n * 2 + c) * 3 + j];
          m /= 12;
          for (int n = 0; n < 4; n++)
            for (int j = 0; j < 3; j++) v += pow(xd[(n * 2 + c) * 3 + j] - m, 2);
          em[c] = 0.75 * em[c] + 0.25 * m;
          ev[c] = 0.75 * ev[c] + 0.25 * v / 11;
          CHECK_MSG(fabs(rmd[c] - em[c]) < 1e-5 && fabs(rvd[c] - ev[c]) < 1e-5,
                    "running stats step %d c %d: %g %g vs %g %g", step, c, rmd[c], rvd[c], em[c], ev[c]);
        }
      }
      ts_plan_free(p);
    }
    ts_graph_free(g);
  }
  printf("batchnorm: running stats after 2 steps (momentum 0.25, unbiased variance)\n");

  gh_fixture("batchnorm_train", 5, build_bn, 1, 1e-5, 1e-4, 1);
  gh_fixture("batchnorm_train_2d", 5, build_bn, 1, 1e-5, 1e-4, 1);
  gh_fixture("batchnorm_eval", 5, build_bn, 0, 1e-5, 1e-4, 0);
  gh_fixture("layernorm", 3, build_ln, 1, 1e-5, 1e-4, 0);
  printf("norm: 4 PyTorch fixtures (batchnorm train 4-D and 2-D with running stats, eval; "
         "layernorm), forward and gradients (1e-5 + 1e-4 rel)\n");

  /* bad input */
  {
    ts_graph *g;
    ts_graph_create(&g);
    ts_val x = ts_input(g, "x", TS_F32, ts_shape4(2, 3, 4, 4));
    ts_val g4 = ts_input(g, "gamma", TS_F32, ts_shape1(4)), c3 = ts_input(g, "c", TS_F32, ts_shape1(3));
    CHECK_GRAPH_ERROR(g, ts_batchnorm(g, x, g4, c3, c3, c3, 0.1f, 1e-5f), TS_ESHAPE,
                      "batchnorm: x x(2,3,4,4):f32 has 3 channels", "gamma(4)",
                      "gamma of the wrong length");
    ts_graph_free(g);
    ts_graph_create(&g);
    x = ts_input(g, "x", TS_F32, ts_shape2(1, 3));
    c3 = ts_input(g, "c", TS_F32, ts_shape1(3));
    CHECK_GRAPH_ERROR(g, ts_batchnorm(g, x, c3, c3, c3, c3, 0.1f, 1e-5f), TS_ESHAPE,
                      "more than 1 value per channel", "x(1,3)", "training on a batch of 1");
    ts_graph_free(g);
    ts_graph_create(&g);
    x = ts_input(g, "x", TS_F32, ts_shape2(4, 3));
    c3 = ts_input(g, "c", TS_F32, ts_shape1(3));
    ts_val tmp = ts_scale(g, c3, 1, 0);
    CHECK_GRAPH_ERROR(g, ts_batchnorm(g, x, c3, c3, tmp, c3, 0.1f, 1e-5f), TS_EGRAPH,
                      "running_mean", "state value", "computed running stats in training");
    ts_graph_free(g);
    ts_graph_create(&g);
    x = ts_input(g, "x", TS_F32, ts_shape2(4, 3));
    c3 = ts_input(g, "c", TS_F32, ts_shape1(3));
    CHECK_GRAPH_ERROR(g, ts_batchnorm(g, x, c3, c3, c3, c3, 1.5f, 1e-5f), TS_EINVAL, "momentum",
                      NULL, "momentum > 1");
    ts_graph_free(g);
    ts_graph_create(&g);
    x = ts_input(g, "x", TS_F32, ts_shape2(4, 6));
    g4 = ts_input(g, "gamma", TS_F32, ts_shape1(4));
    CHECK_GRAPH_ERROR(g, ts_layernorm(g, x, g4, g4, 1e-5f), TS_ESHAPE, "layernorm: x x(4,6):f32",
                      "gamma(4)", "layernorm gamma of the wrong length");
    ts_graph_free(g);
    ts_graph_create(&g);
    x = ts_input(g, "x", TS_I32, ts_shape2(4, 6));
    g4 = ts_input(g, "gamma", TS_F32, ts_shape1(6));
    CHECK_GRAPH_ERROR(g, ts_layernorm(g, x, g4, g4, 1e-5f), TS_EDTYPE, "layernorm", "x(4,6):i32",
                      "layernorm of i32");
    ts_graph_free(g);
  }
  printf("norm: bad input (channel mismatch, batch of 1 in training, computed running stats, "
         "momentum, layernorm dims and dtype) gives a status and a message\n");
  return ts_test_finish("test_grad_norm");
}
