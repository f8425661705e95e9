/* Softmax, log-softmax and softmax cross-entropy through graph + executor: gradients vs finite
 * differences, PyTorch fixtures, bad input (label dtype/shape, axis, out-of-range labels). */
#include <stdlib.h>
#include <string.h>

#include "grad_harness.h"

static int g_axis, g_log;
static float g_smooth;
static ts_val build_sm(ts_graph *g, const ts_val *in, int nin) {
  (void)nin;
  return g_log ? ts_log_softmax(g, in[0], g_axis) : ts_softmax(g, in[0], g_axis);
}
static ts_val build_ce(ts_graph *g, const ts_val *in, int nin) {
  (void)nin;
  return ts_softmax_cross_entropy(g, in[0], in[1], g_smooth);
}

static void ce_case(int64_t N, int64_t C, float smooth, ts_dtype ldt) {
  ts_graph *g;
  ts_graph_create(&g);
  ts_val z = ts_input(g, "logits", TS_F32, ts_shape2(N, C));
  ts_val l = ts_input(g, "labels", ldt, ts_shape1(N));
  ts_val loss = ts_softmax_cross_entropy(g, z, l, smooth);
  float *zd = malloc(4 * N * C);
  int64_t lab64[64];
  int32_t lab32[64];
  ts_test_fill(zd, N * C, 77, -3, 3);
  for (int64_t i = 0; i < N; i++) {
    lab64[i] = i % 4 == 1 ? -100 : (int64_t)(ts_rng_uniform_at(5, i) * C);
    lab32[i] = (int32_t)lab64[i];
  }
  char what[128];
  snprintf(what, sizeof what, "cross-entropy (%lld,%lld) smoothing %g labels %s", (long long)N,
           (long long)C, smooth, ts_dtype_name(ldt));
  gh_check(what, g, loss, 2, (ts_val[]){z, l},
           &(gh_opts){.data = (const void *[]){zd, ldt == TS_I64 ? (void *)lab64 : (void *)lab32},
                      .eps = 1e-2, .grad_atol = 1e-4, .grad_rtol = 2e-3});
  ts_graph_free(g);
  free(zd);
}

int main(void) {
  int ncase = 0;
  for (int lg = 0; lg <= 1; lg++)
    for (int ax = -1; ax <= 2; ax++) {
      ts_graph *g;
      ts_graph_create(&g);
      ts_val x = ts_input(g, "x", TS_F32, ts_shape3(3, 4, 5));
      ts_val y = lg ? ts_log_softmax(g, x, ax) : ts_softmax(g, x, ax);
      float xd[60];
      ts_test_fill(xd, 60, 31 + ax, -3, 3);
      char what[64];
      snprintf(what, sizeof what, "%s (3,4,5) axis %d", lg ? "log_softmax" : "softmax", ax);
      gh_check(what, g, y, 1, &x,
               &(gh_opts){.data = (const void *[]){xd}, .grad_atol = 1e-3, .grad_rtol = 2e-3});
      ts_graph_free(g);
      ncase++;
    }
  printf("softmax/log_softmax: %d cases (axes -1,0,1,2), gradient vs finite differences (2e-3), "
         "FAST vs REF\n", ncase);
  ce_case(8, 5, 0.0f, TS_I32);
  ce_case(8, 5, 0.1f, TS_I64);
  ce_case(13, 30, 0.3f, TS_I32);
  printf("cross-entropy: 3 cases (i32/i64 labels, ignore index -100, smoothing 0/0.1/0.3), "
         "logits gradient vs finite differences\n");

  /* softmax feeding cross-entropy-like use: the gradient of log_softmax + gather via mul/sum */
  {
    ts_graph *g;
    ts_graph_create(&g);
    ts_val x = ts_input(g, "x", TS_F32, ts_shape2(4, 6));
    ts_val t = ts_input(g, "t", TS_F32, ts_shape2(4, 6));
    ts_val y = ts_mean(g, ts_mul(g, ts_log_softmax(g, x, 1), t), 3, 0);
    float xd[24], td[24];
    ts_test_fill(xd, 24, 1, -2, 2);
    ts_test_fill(td, 24, 2, 0, 1);
    gh_check("mean(log_softmax(x) * t)", g, y, 2, (ts_val[]){x, t},
             &(gh_opts){.data = (const void *[]){xd, td}, .grad_atol = 1e-4, .grad_rtol = 2e-3});
    ts_graph_free(g);
  }

  const char *smn[4] = {"softmax", "softmax_axis1", "log_softmax", "log_softmax_axis1"};
  for (int k = 0; k < 4; k++) {
    g_log = k >= 2, g_axis = k % 2 ? 1 : -1;
    gh_fixture(smn[k], 1, build_sm, 1, 1e-6, 1e-5, 0);
  }
  const char *cen[4] = {"cross_entropy", "cross_entropy_smooth", "cross_entropy_ignore",
                        "cross_entropy_smooth_ignore"};
  for (int k = 0; k < 4; k++) {
    g_smooth = k % 2 ? 0.1f : 0.0f;
    gh_fixture(cen[k], 2, build_ce, 1, 1e-6, 1e-5, 0);
  }
  printf("softmax: 8 PyTorch fixtures (softmax/log_softmax on 2 axes, cross-entropy with "
         "smoothing and ignore index), forward and gradients (1e-6 + 1e-5 rel)\n");

  /* bad input */
  {
    ts_graph *g;
    ts_graph_create(&g);
    ts_val z = ts_input(g, "z", TS_F32, ts_shape2(4, 3));
    ts_val lf = ts_input(g, "y", TS_F32, ts_shape1(4));
    CHECK_GRAPH_ERROR(g, ts_softmax_cross_entropy(g, z, lf, 0), TS_EDTYPE, "softmax_cross_entropy",
                      "must be i32 or i64", "float labels");
    ts_graph_free(g);
    ts_graph_create(&g);
    z = ts_input(g, "z", TS_F32, ts_shape2(4, 3));
    ts_val l5 = ts_input(g, "y", TS_I64, ts_shape1(5));
    CHECK_GRAPH_ERROR(g, ts_softmax_cross_entropy(g, z, l5, 0), TS_ESHAPE, "y(5):i64", "z(4,3):f32",
                      "labels of the wrong length");
    ts_graph_free(g);
    ts_graph_create(&g);
    ts_val z3 = ts_input(g, "z", TS_F32, ts_shape3(2, 4, 3));
    ts_val l2 = ts_input(g, "y", TS_I64, ts_shape1(2));
    CHECK_GRAPH_ERROR(g, ts_softmax_cross_entropy(g, z3, l2, 0), TS_ESHAPE, "(N,C)", "z(2,4,3)",
                      "3-D logits");
    ts_graph_free(g);
    ts_graph_create(&g);
    z = ts_input(g, "z", TS_F32, ts_shape2(4, 3));
    ts_val l4 = ts_input(g, "y", TS_I64, ts_shape1(4));
    CHECK_GRAPH_ERROR(g, ts_softmax_cross_entropy(g, z, l4, 1.5f), TS_EINVAL, "label smoothing",
                      NULL, "smoothing > 1");
    ts_graph_free(g);
    ts_graph_create(&g);
    z = ts_input(g, "z", TS_F32, ts_shape2(4, 3));
    CHECK_GRAPH_ERROR(g, ts_softmax(g, z, 2), TS_EINVAL, "softmax: x z(4,3):f32",
                      "axis 2 out of range", "softmax axis out of range");
    ts_graph_free(g);
    /* a label out of range is only known at run time: status + message, no crash */
    ts_graph_create(&g);
    z = ts_input(g, "z", TS_F32, ts_shape2(4, 3));
    l4 = ts_input(g, "y", TS_I32, ts_shape1(4));
    ts_val loss = ts_softmax_cross_entropy(g, z, l4, 0);
    ts_plan *p = NULL;
    CHECK_OK(ts_plan_create(g, &loss, 1, &p));
    if (p) {
      float zd[12] = {0};
      int32_t ld[4] = {0, 1, 3, 2};
      ts_plan_bind(p, z, zd);
      ts_plan_bind(p, l4, ld);
      int rc = ts_plan_run(p, 0);
      CHECK_MSG(rc == TS_ERANGE && strstr(ts_last_error(), "softmax_ce") && strstr(ts_last_error(), "row 2"),
                "rc %d: %s", rc, ts_last_error());
      ts_plan_free(p);
    }
    ts_graph_free(g);
  }
  printf("softmax: bad input (label dtype, label length, 3-D logits, smoothing, axis, label "
         "value at run time) gives a status and a message\n");
  return ts_test_finish("test_grad_softmax");
}
