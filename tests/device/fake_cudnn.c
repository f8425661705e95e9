/* A stand-in for cuDNN (libcudnn.so.9) beside the stand-in driver (fake_cuda.c, whose "device
 * memory" is host memory), loaded through TESSERA_LIBCUDNN: the entry points src/device/cudnn.c
 * calls. It checks its arguments as cuDNN documents them (NCHW tensors and filters, or NHWC
 * tensors and filters: channels last; one format for all three, else NOT_SUPPORTED), the output
 * size of the convolution descriptor, groups, the workspace given against the one asked for)
 * and computes the convolutions on the host, so the mapping of cudnn.c is checked numerically on
 * a machine without a GPU. Its heuristics list four algorithms, in this order, to check the
 * choice cudnn.c makes: 1 on tensor cores (deterministic, 64 bytes of workspace: not for real
 * f32), 2 non-deterministic, 3 asking 1 TiB of workspace, 4 plain FMA (deterministic, 4 KiB).
 * Running 3 is refused (NOT_SUPPORTED), and so is f32 unless it runs 4 with CUDNN_FMA_MATH
 * (real f32) or asked for tensor cores (CUDNN_TENSOR_OP_MATH: TF32, float32_matmul_precision high;
 * then the operands are rounded to TF32's 10-bit mantissa, as the tensor cores take them); 2 runs
 * (as 4 does) only to be chosen under TESSERA_GPU_DETERMINISTIC=0: fake_cudnn_algo says which
 * ran, and the tests check it is never chosen otherwise. For
 * filters of 5x5 and larger it lists only algorithm 2: no deterministic choice, which cudnn.c
 * answers by running Tessera's direct kernel. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fake_bf16.h"

enum { SUCCESS = 0, NOT_INITIALIZED = 1, BAD_PARAM = 3, NOT_SUPPORTED = 9 };
enum { FLOAT = 0, HALF = 2, BFLOAT16 = 9, NCHW = 0, NHWC = 1, CROSS_CORRELATION = 1, TENSOR_OP = 1, FMA = 3 };

typedef struct {
  int algo, status;
  float time;
  size_t memory;
  int determinism, mathType, reserved[3];
} perf_t;
typedef struct {
  int dt, n, c, h, w, fmt;
} tdesc;
typedef struct {
  int ph, pw, sh, sw, dh, dw, groups, math;
} cdesc;

static int handle_token;
int fake_cudnn_calls;    /* convolutions run */
int fake_cudnn_algo[2];  /* the algorithm of the last f32 and bf16 convolution */
int fake_cudnn_nhwc;     /* convolutions run on NHWC tensors */
int fake_cudnn_half;     /* convolutions run on f16 tensors */

size_t cudnnGetVersion(void) { return 90100; }
const char *cudnnGetErrorString(int st) {
  return st == SUCCESS ? "CUDNN_STATUS_SUCCESS" : st == BAD_PARAM ? "CUDNN_STATUS_BAD_PARAM"
         : st == NOT_SUPPORTED                  ? "CUDNN_STATUS_NOT_SUPPORTED"
                                                : "CUDNN_STATUS_NOT_INITIALIZED";
}
int cudnnCreate(void **h) { *h = &handle_token; return SUCCESS; }
int cudnnDestroy(void *h) { return h == &handle_token ? SUCCESS : NOT_INITIALIZED; }
int cudnnSetStream(void *h, void *s) { (void)s; return h == &handle_token ? SUCCESS : NOT_INITIALIZED; }

static int mk(void **d, size_t n) { return (*d = calloc(1, n)) ? SUCCESS : BAD_PARAM; }
int cudnnCreateTensorDescriptor(void **d) { return mk(d, sizeof(tdesc)); }
int cudnnCreateFilterDescriptor(void **d) { return mk(d, sizeof(tdesc)); }
int cudnnCreateConvolutionDescriptor(void **d) {
  int rc = mk(d, sizeof(cdesc));
  if (!rc) ((cdesc *)*d)->groups = 1;
  return rc;
}
int cudnnDestroyTensorDescriptor(void *d) { free(d); return SUCCESS; }
int cudnnDestroyFilterDescriptor(void *d) { free(d); return SUCCESS; }
int cudnnDestroyConvolutionDescriptor(void *d) { free(d); return SUCCESS; }

static int set4(tdesc *t, int fmt, int dt, int n, int c, int h, int w) {
  if ((fmt != NCHW && fmt != NHWC) || (dt != FLOAT && dt != BFLOAT16 && dt != HALF) || n <= 0 || c <= 0 || h <= 0 || w <= 0)
    return BAD_PARAM;
  *t = (tdesc){dt, n, c, h, w, fmt};
  return SUCCESS;
}
int cudnnSetTensor4dDescriptor(tdesc *t, int fmt, int dt, int n, int c, int h, int w) { return set4(t, fmt, dt, n, c, h, w); }
int cudnnSetFilter4dDescriptor(tdesc *t, int dt, int fmt, int k, int c, int h, int w) { return set4(t, fmt, dt, k, c, h, w); }
int cudnnSetConvolution2dDescriptor(cdesc *c, int ph, int pw, int sh, int sw, int dh, int dw, int mode, int compute) {
  if (ph < 0 || pw < 0 || sh < 1 || sw < 1 || dh < 1 || dw < 1) return BAD_PARAM;
  if (mode != CROSS_CORRELATION || compute != FLOAT) return NOT_SUPPORTED;
  c->ph = ph, c->pw = pw, c->sh = sh, c->sw = sw, c->dh = dh, c->dw = dw;
  return SUCCESS;
}
int cudnnSetConvolutionGroupCount(cdesc *c, int g) {
  if (g < 1) return BAD_PARAM;
  c->groups = g;
  return SUCCESS;
}
int cudnnSetConvolutionMathType(cdesc *c, int m) {
  if (m < 0 || m > 3) return BAD_PARAM;
  c->math = m;
  return SUCCESS;
}

/* x, w, y consistent with the convolution (cuDNN's cudnnGetConvolution2dForwardOutputDim) */
static int shapes_ok(const tdesc *x, const tdesc *w, const cdesc *c, const tdesc *y) {
  int oh = (x->h + 2 * c->ph - (c->dh * (w->h - 1) + 1)) / c->sh + 1;
  int ow = (x->w + 2 * c->pw - (c->dw * (w->w - 1) + 1)) / c->sw + 1;
  return x->dt == w->dt && y->dt == x->dt && x->c == w->c * c->groups && w->n % c->groups == 0 && y->n == x->n &&
         y->c == w->n && y->h == oh && y->w == ow;
}

static const size_t mem[5] = {0, 64, 4096, (size_t)1 << 40, 4096};
static int heuristics(const tdesc *x, const tdesc *w, const cdesc *c, const tdesc *y, int want, int *got, perf_t *p) {
  if (!shapes_ok(x, w, c, y) || want < 1) return BAD_PARAM;
  if (x->fmt != w->fmt || y->fmt != x->fmt) return NOT_SUPPORTED;
  perf_t all[4] = {{1, 0, 0, mem[1], 1, TENSOR_OP, {0}}, {2, 0, 0, mem[2], 0, FMA, {0}},
                   {3, 0, 0, mem[3], 1, FMA, {0}}, {4, 0, 0, mem[4], 1, FMA, {0}}};
  if (w->h >= 5) { /* 5x5 filters and larger: only the non-deterministic one (cudnn.c falls back) */
    *got = 1;
    p[0] = all[1];
    return SUCCESS;
  }
  *got = want < 4 ? want : 4;
  memcpy(p, all, sizeof *p * (size_t)*got);
  return SUCCESS;
}
int cudnnGetConvolutionForwardAlgorithm_v7(void *h, tdesc *x, tdesc *w, cdesc *c, tdesc *y, int want, int *got, perf_t *p) {
  return h != &handle_token ? NOT_INITIALIZED : heuristics(x, w, c, y, want, got, p);
}
int cudnnGetConvolutionBackwardDataAlgorithm_v7(void *h, tdesc *w, tdesc *dy, cdesc *c, tdesc *dx, int want, int *got,
                                                perf_t *p) {
  return h != &handle_token ? NOT_INITIALIZED : heuristics(dx, w, c, dy, want, got, p);
}
int cudnnGetConvolutionBackwardFilterAlgorithm_v7(void *h, tdesc *x, tdesc *dy, cdesc *c, tdesc *dw, int want, int *got,
                                                  perf_t *p) {
  return h != &handle_token ? NOT_INITIALIZED : heuristics(x, dw, c, dy, want, got, p);
}
static int ws_size(const tdesc *x, const tdesc *w, const cdesc *c, const tdesc *y, int algo, size_t *b) {
  if (!shapes_ok(x, w, c, y) || algo < 1 || algo > 4) return BAD_PARAM;
  *b = mem[algo];
  return SUCCESS;
}
int cudnnGetConvolutionForwardWorkspaceSize(void *h, tdesc *x, tdesc *w, cdesc *c, tdesc *y, int algo, size_t *b) {
  return h != &handle_token ? NOT_INITIALIZED : ws_size(x, w, c, y, algo, b);
}
int cudnnGetConvolutionBackwardDataWorkspaceSize(void *h, tdesc *w, tdesc *dy, cdesc *c, tdesc *dx, int algo, size_t *b) {
  return h != &handle_token ? NOT_INITIALIZED : ws_size(dx, w, c, dy, algo, b);
}
int cudnnGetConvolutionBackwardFilterWorkspaceSize(void *h, tdesc *x, tdesc *dy, cdesc *c, tdesc *dw, int algo, size_t *b) {
  return h != &handle_token ? NOT_INITIALIZED : ws_size(x, dw, c, dy, algo, b);
}

static float ld(const void *p, int t, long long i) { return fake_ld(p, t == HALF ? FAKE_F16 : t == FLOAT, i); }
/* an operand as the tensor cores take it under TF32 (round to nearest, ties away, 10-bit mantissa) */
static float op(float v, int tf32) {
  if (!tf32) return v;
  uint32_t u;
  memcpy(&u, &v, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  memcpy(&v, &u, 4);
  return v;
}
static void st(void *p, int t, long long i, float v) { fake_st(p, t == HALF ? FAKE_F16 : t == FLOAT, i, v); }

/* the offsets of one step in (a, b, i, j) of a 4-d descriptor's tensor, in its format */
static void strides(const tdesc *t, size_t s[4]) {
  if (t->fmt == NHWC) s[1] = 1, s[3] = (size_t)t->c, s[2] = s[3] * t->w, s[0] = s[2] * t->h;
  else s[3] = 1, s[2] = (size_t)t->w, s[1] = s[2] * t->h, s[0] = s[1] * t->c;
}

/* dir 0: y = conv(x, w); 1: dx from dy, w; 2: dw from x, dy; out = alpha acc + beta out */
static int conv(int dir, const tdesc *x, const tdesc *w, const cdesc *c, const tdesc *y, const void *X, const void *Wt,
                const void *Y, void *out, int algo, const void *ws, size_t wsb, const float *alpha, const float *beta) {
  if (!shapes_ok(x, w, c, y) || algo < 1 || algo > 4 || wsb < mem[algo] || (mem[algo] && !ws) || !out) return BAD_PARAM;
  if (algo == 3 || x->fmt != w->fmt || y->fmt != x->fmt ||
      (x->dt == FLOAT && !(c->math == TENSOR_OP || ((algo == 4 || algo == 2) && c->math == FMA))))
    return NOT_SUPPORTED;
  const int tf32 = x->dt == FLOAT && c->math == TENSOR_OP;
  const tdesc *o = dir == 0 ? y : dir == 1 ? x : w;
  size_t no = (size_t)o->n * o->c * o->h * o->w;
  /* the two operands as f32 (as the tensor cores take them), read once, not once per product */
  const tdesc *ad = dir == 2 ? x : dir == 0 ? x : y, *bd = dir == 2 ? y : w;
  const void *A = dir == 1 ? Y : X, *Bv = dir == 2 ? Y : Wt;
  size_t na = (size_t)ad->n * ad->c * ad->h * ad->w, nb = (size_t)bd->n * bd->c * bd->h * bd->w;
  float *acc = calloc(no, sizeof *acc), *fa = malloc(na * sizeof *fa), *fb = malloc(nb * sizeof *fb);
  if (!acc || !fa || !fb) {
    free(acc), free(fa), free(fb);
    return BAD_PARAM;
  }
  for (size_t i = 0; i < na; i++) fa[i] = op(ld(A, ad->dt, (long long)i), tf32);
  for (size_t i = 0; i < nb; i++) fb[i] = op(ld(Bv, bd->dt, (long long)i), tf32);
  size_t sx[4], sw[4], sy[4]; /* strides of (a, b, i, j) in each tensor's format */
  strides(x, sx), strides(w, sw), strides(y, sy);
  int cg = w->c, og = w->n / c->groups;
  /* every product in the same order as the textbook loop (n, k, oh, ow, cl, kh, kw) */
  for (int n = 0; n < x->n; n++)
    for (int k = 0; k < y->c; k++)
      for (int oh = 0; oh < y->h; oh++)
        for (int ow = 0; ow < y->w; ow++) {
          size_t yi = n * sy[0] + k * sy[1] + oh * sy[2] + ow * sy[3];
          float s = dir == 0 ? acc[yi] : 0.0f;
          for (int cl = 0; cl < cg; cl++) {
            int ch = (k / og) * cg + cl;
            for (int kh = 0; kh < w->h; kh++) {
              int ih = oh * c->sh - c->ph + kh * c->dh;
              if (ih < 0 || ih >= x->h) continue;
              size_t xr = n * sx[0] + ch * sx[1] + ih * sx[2], wr = k * sw[0] + cl * sw[1] + kh * sw[2];
              for (int kw = 0; kw < w->w; kw++) {
                int iw = ow * c->sw - c->pw + kw * c->dw;
                if (iw < 0 || iw >= x->w) continue;
                size_t xi = xr + iw * sx[3], wi = wr + kw * sw[3];
                if (dir == 0) s += fa[xi] * fb[wi];
                else if (dir == 1) acc[xi] += fa[yi] * fb[wi];
                else acc[wi] += fa[xi] * fb[yi];
              }
            }
          }
          if (dir == 0) acc[yi] = s;
        }
  free(fa), free(fb);
  for (size_t i = 0; i < no; i++) st(out, o->dt, i, *alpha * acc[i] + (*beta != 0.0f ? *beta * ld(out, o->dt, i) : 0.0f));
  free(acc);
  fake_cudnn_calls++;
  fake_cudnn_nhwc += x->fmt == NHWC;
  fake_cudnn_algo[x->dt == FLOAT ? 0 : 1] = algo;
  fake_cudnn_half += x->dt == HALF;
  return SUCCESS;
}
int cudnnConvolutionForward(void *h, const float *alpha, tdesc *xd, const void *x, tdesc *wd, const void *w, cdesc *c,
                            int algo, void *ws, size_t wsb, const float *beta, tdesc *yd, void *y) {
  return h != &handle_token ? NOT_INITIALIZED : conv(0, xd, wd, c, yd, x, w, NULL, y, algo, ws, wsb, alpha, beta);
}
int cudnnConvolutionBackwardData(void *h, const float *alpha, tdesc *wd, const void *w, tdesc *dyd, const void *dy,
                                 cdesc *c, int algo, void *ws, size_t wsb, const float *beta, tdesc *dxd, void *dx) {
  return h != &handle_token ? NOT_INITIALIZED : conv(1, dxd, wd, c, dyd, NULL, w, dy, dx, algo, ws, wsb, alpha, beta);
}
int cudnnConvolutionBackwardFilter(void *h, const float *alpha, tdesc *xd, const void *x, tdesc *dyd, const void *dy,
                                   cdesc *c, int algo, void *ws, size_t wsb, const float *beta, tdesc *dwd, void *dw) {
  return h != &handle_token ? NOT_INITIALIZED : conv(2, xd, dwd, c, dyd, x, NULL, dy, dw, algo, ws, wsb, alpha, beta);
}
