/* Gradients of CONV2D (through CONV2D_BWD_DATA / CONV2D_BWD_WEIGHT) via the graph, autodiff
 * and executor, on both backends, against central finite differences of a double-precision
 * convolution written in this file. Each case builds y = conv2d(x, w[, b]) and
 * loss = dense(reshape(y, (1,ny)), r) = sum(y * r) with a fixed random r (no gradient), and
 * compares y, the loss and every input gradient (inputs over 256 elements on 256 samples).
 * Shapes cover stride, padding, dilation, groups (incl. depthwise), 1x1 downsample, odd sizes,
 * batch 1, an input marked no-grad (no CONV2D_BWD_DATA emitted), and a 32-channel 3x3 conv
 * that the fast backend runs with Winograd.
 * Tolerance: |a-b| <= 2e-4 + 2e-4 |b|. Also: bad shapes/attributes give a status and a message
 * naming the op, never a crash. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/tessera.h"
#include "grad_harness.h"

/* ------------------------------------------------------------ conv2d */

typedef struct {
  int64_t N, C, H, W, O, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw, g;
  int bias;
} conv_ctx;

static void conv_fwd(double *const *x, double *y, const void *vc) {
  const conv_ctx *c = vc;
  const int64_t Cg = c->C / c->g, Og = c->O / c->g;
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t o = 0; o < c->O; o++)
      for (int64_t oh = 0; oh < c->OH; oh++)
        for (int64_t ow = 0; ow < c->OW; ow++) {
          double s = c->bias ? x[2][o] : 0;
          for (int64_t ci = 0; ci < Cg; ci++)
            for (int64_t kh = 0; kh < c->KH; kh++)
              for (int64_t kw = 0; kw < c->KW; kw++) {
                int64_t ih = oh * c->sh - c->ph + kh * c->dh, iw = ow * c->sw - c->pw + kw * c->dw;
                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                int64_t cc = (o / Og) * Cg + ci;
                s += x[0][((n * c->C + cc) * c->H + ih) * c->W + iw] *
                     x[1][((o * Cg + ci) * c->KH + kh) * c->KW + kw];
              }
          y[((n * c->O + o) * c->OH + oh) * c->OW + ow] = s;
        }
}

static void case_conv(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t KH,
                      int64_t KW, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
                      int64_t dw, int64_t g, int bias, int want_x) {
  ts_graph *gr;
  CHECK_OK(ts_graph_create(&gr));
  conv_ctx c = {N, C, H, W, O, KH, KW, 0, 0, sh, sw, ph, pw, dh, dw, g, bias};
  c.OH = (H + 2 * ph - dh * (KH - 1) - 1) / sh + 1;
  c.OW = (W + 2 * pw - dw * (KW - 1) - 1) / sw + 1;
  ts_val x[3] = {ts_input(gr, "x", TS_F32, ts_shape4(N, C, H, W)),
                 ts_input(gr, "w", TS_F32, ts_shape4(O, C / g, KH, KW)),
                 bias ? ts_input(gr, "b", TS_F32, ts_shape1(O)) : TS_NONE};
  ts_val y = ts_conv2d(gr, x[0], x[1], bias ? x[2] : TS_NONE, (int)sh, (int)sw, (int)ph, (int)pw,
                       (int)dh, (int)dw, (int)g);
  ts_shape ys = ts_val_shape(gr, y);
  CHECK(ys.ndim == 4 && ys.dims[2] == c.OH && ys.dims[3] == c.OW);
  char what[200];
  snprintf(what, sizeof what,
           "conv2d x(%lld,%lld,%lld,%lld) w(%lld,%lld,%lld,%lld) s%lldx%lld p%lldx%lld d%lldx%lld g%lld%s%s",
           (long long)N, (long long)C, (long long)H, (long long)W, (long long)O,
           (long long)(C / g), (long long)KH, (long long)KW, (long long)sh, (long long)sw,
           (long long)ph, (long long)pw, (long long)dh, (long long)dw, (long long)g,
           bias ? " +bias" : "", want_x ? "" : " (x no-grad)");
  int want[3] = {want_x, 1, 1};
  gh_check(what, gr, y, bias ? 3 : 2, x,
           &(gh_opts){.fwd = conv_fwd, .ctx = &c, .want = want, .tol = 1e-4, .loss_tol = 1e-4,
                      .grad_atol = 2e-4});
  if (!want_x) { /* no CONV2D_BWD_DATA node may have been emitted */
    char *dump = malloc(1 << 16);
    ts_graph_dump(gr, dump, 1 << 16);
    CHECK_MSG(strstr(dump, "conv2d_bwd_data") == NULL, "%s: conv2d_bwd_data emitted", what);
    CHECK(strstr(dump, "conv2d_bwd_weight") != NULL);
    free(dump);
  }
  ts_graph_free(gr);
}

/* ------------------------------------------------------------ bad input */

static void bad_inputs(void) {
  ts_graph *g;
  ts_val x, w, b;
#define SETUP(xs, ws)                                  \
  ts_graph_create(&g);                                 \
  x = ts_input(g, "x", TS_F32, xs);                    \
  w = ts_input(g, "w", TS_F32, ws)
  SETUP(ts_shape4(2, 3, 8, 8), ts_shape4(4, 2, 3, 3)); /* C/groups 2 != 3 */
  CHECK_GRAPH_ERROR(g, ts_conv2d(g, x, w, TS_NONE, 1, 1, 1, 1, 1, 1, 1), TS_ESHAPE, "conv2d",
                    "(2,3,8,8)", NULL);
  ts_graph_free(g);
  SETUP(ts_shape4(2, 6, 8, 8), ts_shape4(4, 2, 3, 3)); /* groups 4 does not divide 6 */
  CHECK_GRAPH_ERROR(g, ts_conv2d(g, x, w, TS_NONE, 1, 1, 1, 1, 1, 1, 4), TS_ESHAPE, "conv2d",
                    "groups 4", NULL);
  ts_graph_free(g);
  SETUP(ts_shape3(3, 8, 8), ts_shape4(4, 3, 3, 3)); /* x not 4-D */
  CHECK_GRAPH_ERROR(g, ts_conv2d(g, x, w, TS_NONE, 1, 1, 1, 1, 1, 1, 1), TS_ESHAPE, "conv2d", "4-D",
                    NULL);
  ts_graph_free(g);
  SETUP(ts_shape4(1, 3, 4, 4), ts_shape4(4, 3, 5, 5)); /* kernel does not fit */
  CHECK_GRAPH_ERROR(g, ts_conv2d(g, x, w, TS_NONE, 1, 1, 0, 0, 1, 1, 1), TS_ESHAPE, "conv2d",
                    "does not fit", NULL);
  ts_graph_free(g);
  SETUP(ts_shape4(1, 3, 8, 8), ts_shape4(4, 3, 3, 3)); /* stride 0 */
  CHECK_GRAPH_ERROR(g, ts_conv2d(g, x, w, TS_NONE, 0, 1, 1, 1, 1, 1, 1), TS_EINVAL, "conv2d",
                    "stride 0x1", NULL);
  ts_graph_free(g);
  SETUP(ts_shape4(1, 3, 8, 8), ts_shape4(4, 3, 3, 3)); /* negative padding */
  CHECK_GRAPH_ERROR(g, ts_conv2d(g, x, w, TS_NONE, 1, 1, -1, 1, 1, 1, 1), TS_EINVAL, "conv2d",
                    "padding", NULL);
  ts_graph_free(g);
  SETUP(ts_shape4(1, 3, 8, 8), ts_shape4(4, 3, 3, 3)); /* dilation 0 */
  CHECK_GRAPH_ERROR(g, ts_conv2d(g, x, w, TS_NONE, 1, 1, 1, 1, 0, 1, 1), TS_EINVAL, "conv2d",
                    "dilation", NULL);
  ts_graph_free(g);
  SETUP(ts_shape4(1, 3, 8, 8), ts_shape4(4, 3, 3, 3)); /* bias size */
  b = ts_input(g, "b", TS_F32, ts_shape1(3));
  CHECK_GRAPH_ERROR(g, ts_conv2d(g, x, w, b, 1, 1, 1, 1, 1, 1, 1), TS_ESHAPE, "conv2d", "bias",
                    NULL);
  ts_graph_free(g);
  ts_graph_create(&g); /* dtype */
  x = ts_input(g, "x", TS_I32, ts_shape4(1, 3, 8, 8));
  w = ts_input(g, "w", TS_F32, ts_shape4(4, 3, 3, 3));
  CHECK_GRAPH_ERROR(g, ts_conv2d(g, x, w, TS_NONE, 1, 1, 1, 1, 1, 1, 1), TS_EDTYPE, "conv2d", "f32",
                    NULL);
  ts_graph_free(g);
  ts_graph_create(&g);
  CHECK_GRAPH_ERROR(g, ts_conv2d(g, TS_NONE, TS_NONE, TS_NONE, 1, 1, 1, 1, 1, 1, 1), TS_EINVAL,
                    "conv2d", NULL, NULL);
  ts_graph_free(g);
#undef SETUP
  printf("bad input: channels/groups mismatch, rank, kernel too big, stride/padding/dilation, "
         "bias size, dtype, TS_NONE -> status + message naming the op\n");
}

int main(void) {
  /*        N  C  H  W  O KH KW sh sw ph pw dh dw g bias want_x */
  case_conv(2, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1);  /* 3x3 same + bias */
  case_conv(1, 4, 7, 6, 6, 3, 2, 2, 1, 1, 0, 2, 1, 2, 0, 1);  /* groups, dilation, stride, pads */
  case_conv(2, 3, 4, 4, 3, 3, 3, 1, 1, 1, 1, 1, 1, 3, 1, 1);  /* depthwise */
  case_conv(2, 4, 5, 5, 3, 1, 1, 2, 2, 0, 0, 1, 1, 1, 0, 1);  /* 1x1 stride-2 downsample */
  case_conv(1, 2, 6, 7, 2, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1);  /* odd sizes, stride 3x2 */
  case_conv(2, 3, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0);  /* x no-grad (first layer) */
  case_conv(1, 32, 4, 4, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 1); /* Winograd on the fast backend */
  printf("conv2d: %d graphs ref+fast vs finite differences (x, w, b)\n", gh_cases());
  bad_inputs();
  return ts_test_finish("test_grad_conv");
}
