/* Eltwise ops through graph + executor: gradients vs finite differences for every algorithm,
 * forward/backward vs PyTorch fixtures, bad input. */
#include <stdlib.h>
#include <string.h>

#include "grad_harness.h"

static const char *names[TS_ELT_COUNT] = {"relu", "gelu_tanh", "gelu_erf", "sigmoid", "tanh", "exp",
                                          "log", "sqrt", "square", "abs", "neg"};
static int g_alg;

static ts_val build(ts_graph *g, const ts_val *in, int nin) {
  (void)nin;
  return ts_eltwise(g, in[0], (ts_eltwise_alg)g_alg);
}

int main(void) {
  for (int alg = 0; alg < TS_ELT_COUNT; alg++) {
    ts_graph *g;
    ts_graph_create(&g);
    ts_val x = ts_input(g, "x", TS_F32, ts_shape2(5, 9));
    ts_val y = alg == TS_ELT_RELU ? ts_relu(g, x)
               : alg == TS_ELT_SIGMOID ? ts_sigmoid(g, x)
               : alg == TS_ELT_TANH ? ts_tanh(g, x)
               : alg == TS_ELT_GELU_TANH ? ts_gelu(g, x, 1)
               : alg == TS_ELT_GELU_ERF ? ts_gelu(g, x, 0)
                                          : ts_eltwise(g, x, (ts_eltwise_alg)alg);
    float xd[45];
    int pos = alg == TS_ELT_LOG || alg == TS_ELT_SQRT;
    ts_test_fill(xd, 45, 50 + alg, pos ? 0.3f : -2.5f, 2.5f);
    for (int i = 0; i < 45; i++)
      if (fabsf(xd[i]) < 0.05f) xd[i] = 0.3f; /* away from the kinks of relu/abs */
    char what[64];
    snprintf(what, sizeof what, "%s (5,9)", names[alg]);
    gh_check(what, g, y, 1, &x,
             &(gh_opts){.data = (const void *[]){xd}, .grad_atol = 2e-3, .grad_rtol = 2e-3});
    ts_graph_free(g);
  }
  printf("eltwise: %d algorithms, gradient through graph+executor vs finite differences "
         "(2e-3), FAST vs REF\n", TS_ELT_COUNT);

  for (int alg = 0; alg < TS_ELT_COUNT; alg++) {
    g_alg = alg;
    gh_fixture(names[alg], 1, build, 1, 1e-5, 1e-4, 0);
  }
  printf("eltwise: %d PyTorch fixtures, forward and input gradient (1e-5 + 1e-4 rel)\n", TS_ELT_COUNT);

  /* a chain: gradient flows through several eltwise ops and uses y or x as each needs */
  {
    ts_graph *g;
    ts_graph_create(&g);
    ts_val x = ts_input(g, "x", TS_F32, ts_shape1(16));
    ts_val y = ts_tanh(g, ts_gelu(g, ts_eltwise(g, ts_sigmoid(g, x), TS_ELT_SQRT), 1));
    float xd[16];
    ts_test_fill(xd, 16, 7, -3, 3);
    gh_check("tanh(gelu(sqrt(sigmoid(x))))", g, y, 1, &x,
             &(gh_opts){.data = (const void *[]){xd}, .grad_atol = 1e-3, .grad_rtol = 2e-3});
    ts_graph_free(g);
  }

  /* bad input */
  {
    ts_graph *g;
    ts_graph_create(&g);
    ts_val i = ts_input(g, "ids", TS_I32, ts_shape1(4));
    CHECK_GRAPH_ERROR(g, ts_relu(g, i), TS_EDTYPE, "relu", "ids(4):i32", "relu of i32");
    ts_graph_free(g);
    ts_graph_create(&g);
    ts_val x = ts_input(g, "x", TS_F32, ts_shape1(4));
    CHECK_GRAPH_ERROR(g, ts_eltwise(g, x, (ts_eltwise_alg)99), TS_EINVAL, "unknown algorithm",
                      "x(4)", "unknown eltwise algorithm");
    ts_graph_free(g);
    ts_graph_create(&g);
    CHECK_GRAPH_ERROR(g, ts_sigmoid(g, TS_NONE), TS_EINVAL, "sigmoid", NULL, "sigmoid of TS_NONE");
    ts_graph_free(g);
  }
  printf("eltwise: bad input (i32 input, unknown algorithm, TS_NONE) gives a status and a message\n");
  return ts_test_finish("test_grad_eltwise");
}
