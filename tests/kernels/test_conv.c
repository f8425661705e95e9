/* Conv2d kernels: reference (fwd, bwd_data, bwd_weight + bias) vs a naive double-precision
 * implementation written straight from the definition, and oneDNN vs the same in both layout
 * modes (plain NCHW and format_any + reorders). Shapes cover odd sizes, batch 1, groups
 * (including depthwise), dilation, stride 2/3, asymmetric padding per axis, 1x1 downsample,
 * and Winograd forced on (it falls back to direct where oneDNN lacks it).
 * Tolerance: |a-b| <= 1e-4 (1 + sqrt(terms summed)) + 1e-4 |b| with inputs in [-1,1). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv.h"
#include "kernels/dnnl_ctx.h"
#include "test_util.h"

#define XI(n, c, h, w) ((((n) * d->C + (c)) * d->H + (h)) * d->W + (w))
#define YI(n, o, h, w) ((((n) * d->O + (o)) * d->OH + (h)) * d->OW + (w))
#define WI(o, c, h, w) ((((o) * Cg + (c)) * d->KH + (h)) * d->KW + (w))

/* Calls f(n, o, ci, c, oh, ow, kh, kw, ih, iw) for every valid (output, tap) pair. */
#define FOR_TAPS(body)                                                                   \
  for (int64_t n = 0; n < d->N; n++)                                                     \
    for (int64_t o = 0; o < d->O; o++)                                                   \
      for (int64_t ci = 0; ci < Cg; ci++)                                                \
        for (int64_t oh = 0; oh < d->OH; oh++)                                           \
          for (int64_t ow = 0; ow < d->OW; ow++)                                         \
            for (int64_t kh = 0; kh < d->KH; kh++)                                       \
              for (int64_t kw = 0; kw < d->KW; kw++) {                                   \
                int64_t c = (o / (d->O / d->groups)) * Cg + ci;                          \
                int64_t ih = oh * d->sh - d->ph + kh * d->dh;                            \
                int64_t iw = ow * d->sw - d->pw + kw * d->dw;                            \
                if (ih < 0 || ih >= d->H || iw < 0 || iw >= d->W) continue;              \
                body;                                                                    \
              }

static void naive_fwd(const ts__conv_desc *d, const float *x, const float *w, const float *b,
                      float *y) {
  const int64_t Cg = d->C / d->groups, ny = d->N * d->O * d->OH * d->OW;
  double *acc = calloc((size_t)ny, sizeof(double));
  FOR_TAPS(acc[YI(n, o, oh, ow)] += (double)x[XI(n, c, ih, iw)] * w[WI(o, ci, kh, kw)]);
  for (int64_t i = 0; i < ny; i++) y[i] = (float)(acc[i] + (b ? b[(i / (d->OH * d->OW)) % d->O] : 0));
  free(acc);
}

static void naive_bwd_data(const ts__conv_desc *d, const float *dy, const float *w, float *dx) {
  const int64_t Cg = d->C / d->groups, nx = d->N * d->C * d->H * d->W;
  double *acc = calloc((size_t)nx, sizeof(double));
  FOR_TAPS(acc[XI(n, c, ih, iw)] += (double)dy[YI(n, o, oh, ow)] * w[WI(o, ci, kh, kw)]);
  for (int64_t i = 0; i < nx; i++) dx[i] = (float)acc[i];
  free(acc);
}

static void naive_bwd_weight(const ts__conv_desc *d, const float *x, const float *dy, float *dw,
                             float *db) {
  const int64_t Cg = d->C / d->groups, nw = d->O * Cg * d->KH * d->KW;
  double *acc = calloc((size_t)nw, sizeof(double));
  FOR_TAPS(acc[WI(o, ci, kh, kw)] += (double)dy[YI(n, o, oh, ow)] * x[XI(n, c, ih, iw)]);
  for (int64_t i = 0; i < nw; i++) dw[i] = (float)acc[i];
  free(acc);
  for (int64_t o = 0; o < d->O; o++) {
    double s = 0;
    for (int64_t n = 0; n < d->N; n++)
      for (int64_t i = 0; i < d->OH * d->OW; i++) s += dy[YI(n, o, 0, 0) + i];
    db[o] = (float)s;
  }
}

static int nshapes, nwino;

static void check_conv(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t KH,
                       int64_t KW, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
                       int64_t dw, int64_t g) {
  ts__conv_desc dd = {N, C, H, W, O, KH, KW, 0, 0, sh, sw, ph, pw, dh, dw, g};
  dd.OH = ts__conv_out_size(H, KH, sh, ph, dh);
  dd.OW = ts__conv_out_size(W, KW, sw, pw, dw);
  const ts__conv_desc *d = &dd;
  CHECK_OK(ts__conv_check(d, "test"));
  size_t nx = (size_t)(N * C * H * W), ny = (size_t)(N * O * dd.OH * dd.OW);
  size_t nw = (size_t)(O * (C / g) * KH * KW);
  float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc((size_t)O * 4), *dy = malloc(ny * 4);
  float *y0 = malloc(ny * 4), *y1 = malloc(ny * 4), *dx0 = malloc(nx * 4), *dx1 = malloc(nx * 4);
  float *dw0 = malloc(nw * 4), *dw1 = malloc(nw * 4), *db0 = malloc((size_t)O * 4),
        *db1 = malloc((size_t)O * 4);
  ts_test_fill(x, nx, 11 + nshapes, -1, 1);
  ts_test_fill(w, nw, 22 + nshapes, -1, 1);
  ts_test_fill(b, (size_t)O, 33 + nshapes, -1, 1);
  ts_test_fill(dy, ny, 44 + nshapes, -1, 1);
  nshapes++;
  naive_fwd(d, x, w, b, y0);
  naive_bwd_data(d, dy, w, dx0);
  naive_bwd_weight(d, x, dy, dw0, db0);
  const double tf = 1e-4 * (1 + sqrt((double)(C / g * KH * KW)));
  const double td = 1e-4 * (1 + sqrt((double)(O / g * KH * KW)));
  const double tw = 1e-4 * (1 + sqrt((double)(N * dd.OH * dd.OW)));
  char tag[200];
  snprintf(tag, sizeof tag, "N%lld C%lld %lldx%lld O%lld k%lldx%lld s%lldx%lld p%lldx%lld d%lldx%lld g%lld",
           (long long)N, (long long)C, (long long)H, (long long)W, (long long)O, (long long)KH,
           (long long)KW, (long long)sh, (long long)sw, (long long)ph, (long long)pw,
           (long long)dh, (long long)dw, (long long)g);
  char what[300];
  for (int impl = 0; impl < 4; impl++) { /* 0 ref, 1 dnnl plain, 2 dnnl any, 3 any+winograd */
    const char *iname = impl == 0 ? "ref" : impl == 1 ? "dnnl-plain" : impl == 2 ? "dnnl-any" : "dnnl-wino";
    for (int dir = 0; dir < 3; dir++) {
      ts__conv_dnnl_set_format(dir, impl == 1 ? TS_CONV_FMT_PLAIN : TS_CONV_FMT_ANY);
      ts__conv_dnnl_set_algo(dir, impl == 3 ? TS_CONV_ALG_WINOGRAD : TS_CONV_ALG_DIRECT);
    }
    if (impl == 3 && strstr(ts__conv_dnnl_impl(d, 0), "wino")) nwino++;
    for (int with_bias = 0; with_bias < 2; with_bias++) {
      memset(y1, 0xff, ny * 4);
      CHECK_OK(impl ? ts__conv2d_fwd_dnnl(d, x, w, with_bias ? b : NULL, y1)
                    : ts__conv2d_fwd_ref(d, x, w, with_bias ? b : NULL, y1));
      if (!with_bias) /* compare against naive minus bias */
        for (size_t i = 0; i < ny; i++) y1[i] += b[(i / (size_t)(dd.OH * dd.OW)) % (size_t)O];
      snprintf(what, sizeof what, "fwd %s bias=%d %s", iname, with_bias, tag);
      CHECK_CLOSE(y1, y0, ny, tf, 1e-4, what);
    }
    memset(dx1, 0xff, nx * 4);
    CHECK_OK(impl ? ts__conv2d_bwd_data_dnnl(d, dy, w, dx1) : ts__conv2d_bwd_data_ref(d, dy, w, dx1));
    snprintf(what, sizeof what, "bwd_data %s %s", iname, tag);
    CHECK_CLOSE(dx1, dx0, nx, td, 1e-4, what);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
      memset(dw1, 0xff, nw * 4);
      memset(db1, 0xff, (size_t)O * 4);
      float *dbp = with_bias ? db1 : NULL;
      CHECK_OK(impl ? ts__conv2d_bwd_weight_dnnl(d, x, dy, dw1, dbp)
                    : ts__conv2d_bwd_weight_ref(d, x, dy, dw1, dbp));
      snprintf(what, sizeof what, "bwd_weight %s bias=%d %s", iname, with_bias, tag);
      CHECK_CLOSE(dw1, dw0, nw, tw, 1e-4, what);
      if (with_bias) CHECK_CLOSE(db1, db0, (size_t)O, tw, 1e-4, what);
    }
  }
  free(x), free(w), free(b), free(dy), free(y0), free(y1), free(dx0), free(dx1);
  free(dw0), free(dw1), free(db0), free(db1);
}

int main(void) {
  int saved[3], saved_alg[3];
  for (int i = 0; i < 3; i++) saved[i] = ts__conv_dnnl_get_format(i);
  for (int i = 0; i < 3; i++) saved_alg[i] = ts__conv_dnnl_get_algo(i);
  /*         N   C   H   W   O  KH KW sh sw ph pw dh dw g */
  check_conv(2, 3, 7, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1);    /* basic 3x3 same */
  check_conv(1, 4, 9, 8, 6, 3, 2, 2, 1, 1, 0, 2, 1, 2);    /* groups, dilation, stride, pads */
  check_conv(3, 6, 6, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 6);    /* depthwise */
  check_conv(2, 8, 8, 8, 16, 1, 1, 2, 2, 0, 0, 1, 1, 1);   /* 1x1 stride-2 downsample */
  check_conv(1, 16, 5, 5, 16, 3, 3, 1, 1, 2, 2, 2, 2, 1);  /* dilation 2, pad 2 */
  check_conv(2, 3, 11, 13, 5, 5, 3, 3, 2, 2, 1, 1, 1, 1);  /* odd sizes, stride 3x2 */
  check_conv(4, 64, 8, 8, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1);  /* ResNet-like, blocked layouts */
  check_conv(2, 32, 8, 8, 64, 3, 3, 2, 2, 1, 1, 1, 1, 1);  /* strided 3x3 */
  check_conv(1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1);    /* 1x1x1x1 */
  check_conv(2, 12, 6, 7, 8, 3, 3, 1, 2, 0, 1, 1, 1, 4);   /* groups 4, no h padding */
  printf("conv2d: %d shapes x {ref, oneDNN plain, oneDNN any, oneDNN any+Winograd (%d shapes "
         "have it)} x {fwd +/- bias, bwd_data, bwd_weight +/- bias} vs double-precision naive\n",
         nshapes, nwino);
  /* oneDNN 2.x has Winograd where it has bf16: on AVX-512 cores */
  CHECK_MSG(nwino >= 2 || !ts__dnnl_bf16(), "%d shapes with oneDNN's Winograd", nwino);
  for (int i = 0; i < 3; i++) ts__conv_dnnl_set_format(i, saved[i]);
  for (int i = 0; i < 3; i++) ts__conv_dnnl_set_algo(i, saved_alg[i]);

  /* bad descriptors: an error status naming the op, never a crash */
  ts__conv_desc bad = {1, 3, 4, 4, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1};
  float z[256] = {0};
  CHECK(ts__conv2d_fwd_ref(&bad, z, z, NULL, z) == TS_EINVAL); /* OH/OW of 2 is wrong */
  CHECK(strstr(ts_last_error(), "conv2d") != NULL);
  bad.OH = bad.OW = 4;
  bad.groups = 2; /* does not divide C=3 */
  CHECK(ts__conv2d_fwd_dnnl(&bad, z, z, NULL, z) == TS_EINVAL);
  CHECK(ts__conv2d_bwd_data_dnnl(&bad, z, z, z) == TS_EINVAL);
  bad.groups = 1;
  CHECK(ts__conv2d_bwd_weight_dnnl(&bad, z, NULL, z, NULL) == TS_EINVAL);
  CHECK(ts__conv2d_bwd_weight_ref(&bad, z, z, z, NULL) == TS_OK);
  printf("bad input: inconsistent output size, groups not dividing C, NULL buffers\n");
  ts__dnnl_cache_clear();
  return ts_test_finish("test_conv");
}
