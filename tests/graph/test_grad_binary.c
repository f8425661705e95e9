/* Binary ops and scale through graph + executor: gradients (with broadcasting on either side)
 * vs finite differences, PyTorch fixtures, bad input. */
#include <stdlib.h>
#include <string.h>

#include "grad_harness.h"

static const char *names[4] = {"add", "sub", "mul", "div"};
static int g_alg;

static ts_val build_bin(ts_graph *g, const ts_val *in, int nin) {
  (void)nin;
  return ts_binary(g, in[0], in[1], (ts_binary_alg)g_alg);
}
static ts_val build_scale(ts_graph *g, const ts_val *in, int nin) {
  (void)nin;
  return ts_scale(g, in[0], 1.5f, -0.25f);
}

static void fd_case(int alg, ts_shape as, ts_shape bs) {
  ts_graph *g;
  ts_graph_create(&g);
  ts_val a = ts_input(g, "a", TS_F32, as), b = ts_input(g, "b", TS_F32, bs);
  ts_val y = alg == 0 ? ts_add(g, a, b) : alg == 1 ? ts_sub(g, a, b) : alg == 2 ? ts_mul(g, a, b)
                                                                              : ts_div(g, a, b);
  int64_t na = ts_shape_numel(&as), nb = ts_shape_numel(&bs);
  float *ad = malloc(4 * na), *bd = malloc(4 * nb);
  ts_test_fill(ad, na, 1, -2, 2);
  ts_test_fill(bd, nb, 2, 0.5f, 2); /* positive: away from 0 for div */
  char what[128], s1[48], s2[48];
  snprintf(what, sizeof what, "%s %s %s", names[alg], ts_shape_str(&as, s1, sizeof s1),
           ts_shape_str(&bs, s2, sizeof s2));
  gh_check(what, g, y, 2, (ts_val[]){a, b},
           &(gh_opts){.data = (const void *[]){ad, bd}, .grad_atol = 2e-3, .grad_rtol = 2e-3});
  ts_graph_free(g);
  free(ad), free(bd);
}

int main(void) {
  const ts_shape pat[][2] = {
      {ts_shape2(3, 4), ts_shape2(3, 4)},          {ts_shape3(2, 3, 4), ts_shape2(3, 1)},
      {ts_shape1(4), ts_shape3(2, 3, 4)},          {ts_shape3(2, 1, 4), ts_shape2(3, 1)},
      {ts_shape4(2, 3, 2, 2), ts_shape3(3, 1, 1)}, {ts_shape_make(0, NULL), ts_shape2(2, 3)},
  };
  const int npat = sizeof pat / sizeof *pat;
  for (int alg = 0; alg < 4; alg++)
    for (int k = 0; k < npat; k++) fd_case(alg, pat[k][0], pat[k][1]);
  printf("binary: 4 ops x %d broadcast patterns (either side, scalar), both input gradients vs "
         "finite differences (2e-3), FAST vs REF\n", npat);

  /* x used twice (x*x) and scale: gradients accumulate */
  {
    ts_graph *g;
    ts_graph_create(&g);
    ts_val x = ts_input(g, "x", TS_F32, ts_shape2(4, 5));
    ts_val y = ts_scale(g, ts_div(g, ts_mul(g, x, x), ts_add(g, x, ts_scale(g, x, 0, 3))), -2, 1);
    float xd[20];
    ts_test_fill(xd, 20, 5, 0.2f, 2);
    gh_check("scale(x*x / (x + 3)) with x used 3 times", g, y, 1, &x,
             &(gh_opts){.data = (const void *[]){xd}, .grad_atol = 2e-3, .grad_rtol = 2e-3});
    ts_graph_free(g);
  }

  int nfx = 0;
  const char *sfx[] = {"", "_bcast", "_bcast2", "_bcast_left"};
  for (int alg = 0; alg < 4; alg++)
    for (int k = 0; k < 4; k++) {
      char name[64];
      snprintf(name, sizeof name, "%s%s", names[alg], sfx[k]);
      g_alg = alg;
      gh_fixture(name, 2, build_bin, 1, 1e-6, 1e-5, 0);
      nfx++;
    }
  gh_fixture("scale", 1, build_scale, 1, 1e-6, 1e-5, 0);
  printf("binary: %d PyTorch fixtures, forward and both input gradients (1e-6 + 1e-5 rel)\n", nfx + 1);

  /* bad input */
  {
    ts_graph *g;
    ts_graph_create(&g);
    ts_val a = ts_input(g, "a", TS_F32, ts_shape2(3, 4)), b = ts_input(g, "b", TS_F32, ts_shape2(2, 4));
    CHECK_GRAPH_ERROR(g, ts_add(g, a, b), TS_ESHAPE, "add: a a(3,4):f32 and b b(2,4):f32",
                      "broadcast", "incompatible broadcast");
    ts_graph_free(g);
    ts_graph_create(&g);
    a = ts_input(g, "a", TS_F32, ts_shape1(4));
    ts_val l = ts_input(g, "l", TS_I64, ts_shape1(4));
    CHECK_GRAPH_ERROR(g, ts_div(g, a, l), TS_EDTYPE, "div", "l(4):i64", "div by i64");
    ts_graph_free(g);
    ts_graph_create(&g);
    l = ts_input(g, "l", TS_I32, ts_shape1(4));
    CHECK_GRAPH_ERROR(g, ts_scale(g, l, 2, 0), TS_EDTYPE, "scale", "l(4):i32", "scale of i32");
    ts_graph_free(g);
    ts_graph_create(&g);
    a = ts_input(g, "a", TS_F32, ts_shape1(4));
    CHECK_GRAPH_ERROR(g, ts_binary(g, a, a, (ts_binary_alg)7), TS_EINVAL, "unknown algorithm", NULL,
                      "unknown binary algorithm");
    ts_graph_free(g);
  }
  printf("binary: bad input (incompatible broadcast, integer operands, unknown alg) gives a "
         "status and a message\n");
  return ts_test_finish("test_grad_binary");
}
