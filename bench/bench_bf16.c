/* f32 vs bf16 kernels, forward + backward, per op family, on realistic shapes, through the same
 * kernels the FAST backend runs (f32: the f32 fast paths; bf16: the 16-bit kernels, native where
 * docs/mixed-precision.md says so). For each family the f32 and the bf16 variant alternate in
 * every repeat (interleaved, so drift of the machine hits both), and the median time of --reps
 * repeats is reported: GFLOP/s for GEMM-like families (2*MACs of fwd + bwd data + bwd weights),
 * GB/s of the tensors read and written for the memory-bound ones, and the f32/bf16 time ratio.
 *
 *   OMP_NUM_THREADS=2 bench_bf16 [--reps N] [family...]
 *   families: dense conv gelu add layernorm softmax dropout batchnorm pool attention sum_to embedding
 *             softmax_ce (default: all); resnet_conv (ResNet-18 CIFAR's convolutions per layer, only
 *             when named)
 *
 * Shapes: dense = a GPT-2-small MLP matmul (B*T = 1024 tokens, 768 -> 3072); conv = a ResNet-18
 * 3x3 layer (32,64,56,56), stride 1, pad 1; the memory-bound ops on the GPT-2 / ResNet activation
 * sizes named in their rows. The conv family is timed twice: f32 with its default algorithm
 * (Winograd for this layer) and f32 forced to the direct algorithm, which is what bf16 runs
 * (oneDNN 2.6 has no bf16 Winograd).
 *
 * batchnorm = a ResNet-18 layer (32,64,56,56) in training (forward with batch statistics and the
 * running-stat update, backward through them), f32 as the executor runs it (the reference loops:
 * oneDNN's plain-NCHW batch norm is its generic ncsp kernel) against bf16 on the native loops and
 * on oneDNN's bf16 batch normalization, and oneDNN f32 against oneDNN bf16; the implementation
 * oneDNN picks is printed. pool = ResNet's stem max pooling (32,64,112,112) 3x3 stride 2 pad 1
 * and the global average pooling (32,512,7,7) before the classifier, fwd+bwd, oneDNN f32 vs
 * oneDNN bf16 (fast backend), plus the max pooling on the reference loops (ref backend).
 *
 * Attention: causal, (B,H,T,D) layout, the GPT example's
 * shape (32,4,128,32) and (8,12,256,64); sum_to, embedding and softmax_ce on the GPT example's
 * gradient, byte table and logits sizes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/binary.h"
#include "kernels/conv.h"
#include "kernels/dnnl_ctx.h"
#include "kernels/dropout.h"
#include "kernels/embedding.h"
#include "kernels/eltwise.h"
#include "kernels/lowp.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/pool.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"
#include "tessera/base.h"
#include "tessera/tensor.h"

static int g_reps = 7;
static double g_peak = 0;

static void die(const char *what) {
  fprintf(stderr, "bench_bf16: %s: %s\n", what, ts_last_error());
  exit(1);
}
#define OK(x) \
  do {        \
    if ((x) != TS_OK) die(#x); \
  } while (0)

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* A buffer of n floats in [-1,1) and its bf16 copy. */
typedef struct {
  float *f;
  uint16_t *h;
} buf;
static buf mk(int64_t n, uint64_t seed) {
  buf b = {ts_alloc((size_t)n * 4), ts_alloc((size_t)n * 2)};
  if (!b.f || !b.h) die("out of memory");
  uint64_t key = ts_hash_name("bench_bf16", seed);
  for (int64_t i = 0; i < n; i++) b.f[i] = 2.0f * ts_rng_uniform_at(key, (uint64_t)i) - 1.0f;
  ts__lp_from_f32(b.f, b.h, TS_BF16, n);
  return b;
}
static void rel(buf *b) { ts_free(b->f), ts_free(b->h); }

typedef void (*step_fn)(int bf16, void *ctx);

/* Times f32 and bf16 of one family interleaved; work = FLOPs (gemm) or bytes at f32 (memory). */
static void run(const char *name, step_fn fn, void *ctx, double work, int gemm) {
  double t[2][64];
  const int reps = g_reps < 64 ? g_reps : 64;
  for (int v = 0; v < 2; v++) fn(v, ctx); /* warm-up: primitives created, pages touched */
  for (int r = 0; r < reps; r++)
    for (int v = 0; v < 2; v++) {
      double t0 = ts_time_now();
      fn(v, ctx);
      t[v][r] = ts_time_now() - t0;
    }
  qsort(t[0], (size_t)reps, sizeof(double), cmpd);
  qsort(t[1], (size_t)reps, sizeof(double), cmpd);
  const double m32 = t[0][reps / 2], m16 = t[1][reps / 2];
  if (gemm) {
    const double g32 = work / m32 * 1e-9, g16 = work / m16 * 1e-9;
    if (g16 > g_peak) g_peak = g16;
    if (g32 > g_peak) g_peak = g32;
    printf("%-44s f32 %8.2f ms %7.1f GFLOP/s | bf16 %8.2f ms %7.1f GFLOP/s | speedup %.2fx\n", name, m32 * 1e3,
           g32, m16 * 1e3, g16, m32 / m16);
  } else {
    printf("%-44s f32 %8.2f ms %7.1f GB/s    | bf16 %8.2f ms %7.1f GB/s    | speedup %.2fx\n", name, m32 * 1e3,
           work / m32 * 1e-9, m16 * 1e3, work / 2 / m16 * 1e-9, m32 / m16);
  }
  fflush(stdout);
}

/* ---------------------------------------------------------------- dense (GPT-2 MLP) */
typedef struct {
  int64_t M, K, N;
  buf x, w, b, y, dy, dx, dw;
} dense_ctx;
static void dense_step(int v, void *c_) {
  dense_ctx *c = c_;
  const int64_t M = c->M, K = c->K, N = c->N;
  ts__mm_desc dd = {1, M, K, N, 0, 0, 1, 1};  /* dx (M,K) = dy (M,N) w (N,K) */
  ts__mm_desc dw = {1, N, K, M, 1, 0, 1, 1};  /* dw (N,K) = dy^T (N,M) x (M,K) */
  if (!v) {
    OK(ts__dense_dnnl(M, N, K, c->x.f, c->w.f, c->b.f, c->y.f));
    OK(ts__matmul_dnnl(&dd, c->dy.f, c->w.f, c->dx.f));
    OK(ts__matmul_dnnl(&dw, c->dy.f, c->x.f, c->dw.f));
  } else {
    OK(ts__dense_lp_dnnl(M, N, K, TS_BF16, c->x.h, c->w.h, c->b.h, c->y.h));
    OK(ts__matmul_lp_dnnl(&dd, TS_BF16, c->dy.h, c->w.h, c->dx.h));
    OK(ts__matmul_lp_dnnl(&dw, TS_BF16, c->dy.h, c->x.h, c->dw.h));
  }
}
static void bench_dense(void) {
  dense_ctx c;
  memset(&c, 0, sizeof c);
  c.M = 1024, c.K = 768, c.N = 3072;
  c.x = mk(c.M * c.K, 1), c.w = mk(c.N * c.K, 2), c.b = mk(c.N, 3), c.y = mk(c.M * c.N, 4);
  c.dy = mk(c.M * c.N, 5), c.dx = mk(c.M * c.K, 6), c.dw = mk(c.N * c.K, 7);
  run("dense (1024,768)->3072 fwd+bwd", dense_step, &c, 3 * 2.0 * c.M * c.N * c.K, 1);
  rel(&c.x), rel(&c.w), rel(&c.b), rel(&c.y), rel(&c.dy), rel(&c.dx), rel(&c.dw);
}

/* ---------------------------------------------------------------- conv (ResNet-18 3x3) */
typedef struct {
  ts__conv_desc d;
  buf x, w, y, dy, dx, dw;
} conv_ctx;
static void conv_step(int v, void *c_) {
  conv_ctx *c = c_;
  if (!v) {
    OK(ts__conv2d_fwd_dnnl(&c->d, c->x.f, c->w.f, NULL, c->y.f));
    OK(ts__conv2d_bwd_data_dnnl(&c->d, c->dy.f, c->w.f, c->dx.f));
    OK(ts__conv2d_bwd_weight_dnnl(&c->d, c->x.f, c->dy.f, c->dw.f, NULL));
  } else {
    OK(ts__conv2d_fwd_lp(&c->d, TS_BF16, 1, c->x.h, c->w.h, NULL, c->y.h));
    OK(ts__conv2d_bwd_data_lp(&c->d, TS_BF16, 1, c->dy.h, c->w.h, c->dx.h));
    OK(ts__conv2d_bwd_weight_lp(&c->d, TS_BF16, 1, c->x.h, c->dy.h, c->dw.h, NULL));
  }
}
static void bench_conv(void) {
  conv_ctx c;
  c.d = (ts__conv_desc){32, 64, 56, 56, 64, 3, 3, 56, 56, 1, 1, 1, 1, 1, 1, 1};
  const int64_t nx = 32 * 64 * 56 * 56, nw = 64 * 64 * 9;
  c.x = mk(nx, 11), c.w = mk(nw, 12), c.y = mk(nx, 13), c.dy = mk(nx, 14), c.dx = mk(nx, 15), c.dw = mk(nw, 16);
  printf("  conv impls: f32 fwd %s | bf16 fwd %s, bwd_data %s, bwd_weight %s\n", ts__conv_dnnl_impl(&c.d, 0),
         ts__conv_dnnl_impl_bf16(&c.d, 0), ts__conv_dnnl_impl_bf16(&c.d, 1), ts__conv_dnnl_impl_bf16(&c.d, 2));
  run("conv 3x3 (32,64,56,56) fwd+bwd", conv_step, &c, 3 * 2.0 * nx * 64 * 9, 1);
  /* f32 direct (no Winograd) against the same bf16 direct kernels: the like-for-like ratio */
  for (int k = 0; k < 3; k++) ts__conv_dnnl_set_algo(k, TS_CONV_ALG_DIRECT);
  printf("  conv impls: f32 fwd %s (forced direct)\n", ts__conv_dnnl_impl(&c.d, 0));
  run("conv 3x3 (32,64,56,56) fwd+bwd, f32 direct", conv_step, &c, 3 * 2.0 * nx * 64 * 9, 1);
  for (int k = 0; k < 3; k++) ts__conv_dnnl_set_algo(k, TS_CONV_ALG_DEFAULT);
  rel(&c.x), rel(&c.w), rel(&c.y), rel(&c.dy), rel(&c.dx), rel(&c.dw);
}

/* ---------------------------------------------------------------- memory-bound families */
typedef struct {
  int64_t n, R, D;
  buf a, b, c, d, e, f;
  float *m, *v;
} mem_ctx;

static void gelu_step(int v, void *c_) {
  mem_ctx *c = c_;
  if (!v) {
    OK(ts__eltwise_fwd_dnnl(TS_ELT_GELU_TANH, 0, 0, c->a.f, c->b.f, c->n));
    OK(ts__eltwise_bwd_dnnl(TS_ELT_GELU_TANH, 0, 0, 0, c->c.f, c->a.f, c->d.f, c->n));
  } else {
    OK(ts__eltwise_fwd_lp(TS_ELT_GELU_TANH, 0, 0, TS_BF16, 1, c->a.h, c->b.h, c->n));
    OK(ts__eltwise_bwd_lp(TS_ELT_GELU_TANH, 0, 0, 0, TS_BF16, 1, c->c.h, c->a.h, c->d.h, c->n));
  }
}
static void add_step(int v, void *c_) {
  mem_ctx *c = c_;
  const ts_shape s = ts_shape1(c->n);
  if (!v) OK(ts__binary_ref(0, c->a.f, &s, c->b.f, &s, c->c.f, &s));
  else OK(ts__binary_lp(0, TS_BF16, c->a.h, &s, c->b.h, &s, c->c.h, &s));
}
static void ln_step(int v, void *c_) {
  mem_ctx *c = c_;
  if (!v) {
    OK(ts__layernorm_fwd_dnnl(c->a.f, c->e.f, c->f.f, c->b.f, c->m, c->v, c->R, c->D, 1e-5f));
    OK(ts__layernorm_bwd_dnnl(c->c.f, c->a.f, c->e.f, c->m, c->v, c->d.f, c->f.f, c->f.f + c->D, c->R, c->D, 1e-5f));
  } else {
    OK(ts__layernorm_fwd_lp(TS_BF16, TS_F32, c->a.h, c->e.f, c->f.f, c->b.h, c->m, c->v, c->R, c->D, 1e-5f, 1));
    OK(ts__layernorm_bwd_lp(TS_BF16, TS_F32, c->c.h, c->a.h, c->e.f, c->m, c->v, c->d.h, c->f.f, c->f.f + c->D, c->R,
                            c->D, 1e-5f, 1));
  }
}
static void softmax_step(int v, void *c_) {
  mem_ctx *c = c_;
  if (!v) {
    OK(ts__softmax_fwd_dnnl(c->a.f, c->b.f, c->R, c->D, 1, 0));
    OK(ts__softmax_bwd_dnnl(c->c.f, c->b.f, c->d.f, c->R, c->D, 1, 0));
  } else {
    OK(ts__softmax_fwd_lp(TS_BF16, c->a.h, c->b.h, c->R, c->D, 1, 0, 1));
    OK(ts__softmax_bwd_lp(TS_BF16, c->c.h, c->b.h, c->d.h, c->R, c->D, 1, 0, 1));
  }
}
static void dropout_step(int v, void *c_) {
  mem_ctx *c = c_;
  if (!v) {
    OK(ts__dropout_ref(c->a.f, c->b.f, (size_t)c->n, 0.1f, 1, 2, 0));
    OK(ts__dropout_ref(c->c.f, c->d.f, (size_t)c->n, 0.1f, 1, 2, 0));
  } else {
    OK(ts__dropout_lp(TS_BF16, c->a.h, c->b.h, (size_t)c->n, 0.1f, 1, 2, 0));
    OK(ts__dropout_lp(TS_BF16, c->c.h, c->d.h, (size_t)c->n, 0.1f, 1, 2, 0));
  }
}
static void bench_mem(const char *fam) {
  mem_ctx c;
  memset(&c, 0, sizeof c);
  const int is_ln = !strcmp(fam, "layernorm"), is_sm = !strcmp(fam, "softmax");
  c.R = is_ln ? 1024 : 4096, c.D = is_ln ? 768 : 1024;
  c.n = is_ln ? c.R * c.D : is_sm ? c.R * c.D : !strcmp(fam, "add") ? 32 * 64 * 56 * 56 : 1024 * 3072;
  c.a = mk(c.n, 21), c.b = mk(c.n, 22), c.c = mk(c.n, 23), c.d = mk(c.n, 24);
  c.e = mk(c.D, 25), c.f = mk(3 * c.D, 26);
  c.m = ts_alloc((size_t)c.R * 4), c.v = ts_alloc((size_t)c.R * 4);
  const double B = 4.0 * (double)c.n; /* bytes of one f32 tensor */
  char name[96];
  if (!strcmp(fam, "gelu")) {
    snprintf(name, sizeof name, "gelu_tanh (1024,3072) fwd+bwd");
    run(name, gelu_step, &c, 5 * B, 0); /* fwd x->y, bwd dy,x->dx */
  } else if (!strcmp(fam, "add")) {
    snprintf(name, sizeof name, "add residual (32,64,56,56)");
    run(name, add_step, &c, 3 * B, 0);
  } else if (is_ln) {
    snprintf(name, sizeof name, "layernorm (1024,768) fwd+bwd");
    run(name, ln_step, &c, 5 * B, 0);
  } else if (is_sm) {
    snprintf(name, sizeof name, "softmax (4096,1024) fwd+bwd");
    run(name, softmax_step, &c, 5 * B, 0);
  } else {
    snprintf(name, sizeof name, "dropout (1024,3072) fwd+bwd");
    run(name, dropout_step, &c, 4 * B, 0);
  }
  rel(&c.a), rel(&c.b), rel(&c.c), rel(&c.d), rel(&c.e), rel(&c.f);
  ts_free(c.m), ts_free(c.v);
}

/* ---------------------------------------------------------------- batchnorm (ResNet-18 layer) */
typedef struct {
  int64_t N, C, S;
  int mode; /* 0: f32 loops vs bf16 loops; 1: f32 loops vs bf16 oneDNN; 2: f32 oneDNN vs bf16 oneDNN */
  buf x, y, dy, dx;
  float *g, *b, *rm, *rv, *m, *v, *dg, *db;
} bn_ctx;
static void bn_step(int v, void *c_) {
  bn_ctx *c = c_;
  if (!v && c->mode < 2) {
    OK(ts__batchnorm_fwd_ref(c->x.f, c->g, c->b, c->rm, c->rv, c->y.f, c->m, c->v, c->N, c->C, c->S, 0.1f, 1e-5f, 1));
    OK(ts__batchnorm_bwd_ref(c->dy.f, c->x.f, c->g, c->m, c->v, c->dx.f, c->dg, c->db, c->N, c->C, c->S, 1e-5f, 1));
  } else if (!v) {
    OK(ts__batchnorm_fwd_dnnl(c->x.f, c->g, c->b, c->rm, c->rv, c->y.f, c->m, c->v, c->N, c->C, c->S, 0.1f, 1e-5f, 1));
    OK(ts__batchnorm_bwd_dnnl(c->dy.f, c->x.f, c->g, c->m, c->v, c->dx.f, c->dg, c->db, c->N, c->C, c->S, 1e-5f, 1));
  } else {
    const int dnnl = c->mode > 0;
    OK(ts__batchnorm_fwd_lp(TS_BF16, TS_F32, c->x.h, c->g, c->b, c->rm, c->rv, c->y.h, c->m, c->v, c->N, c->C, c->S,
                            0.1f, 1e-5f, 1, NULL, dnnl));
    OK(ts__batchnorm_bwd_lp(TS_BF16, TS_F32, c->dy.h, c->x.h, c->g, c->m, c->v, c->dx.h, c->dg, c->db, c->N, c->C,
                            c->S, 1e-5f, 1, NULL, dnnl));
  }
}
static void bench_bn(void) {
  bn_ctx c;
  memset(&c, 0, sizeof c);
  c.N = 32, c.C = 64, c.S = 56 * 56;
  const int64_t n = c.N * c.C * c.S;
  c.x = mk(n, 31), c.y = mk(n, 32), c.dy = mk(n, 33), c.dx = mk(n, 34);
  float *p = ts_alloc((size_t)c.C * 8 * sizeof(float));
  if (!p) die("out of memory");
  c.g = p, c.b = p + c.C, c.rm = p + 2 * c.C, c.rv = p + 3 * c.C, c.m = p + 4 * c.C, c.v = p + 5 * c.C,
  c.dg = p + 6 * c.C, c.db = p + 7 * c.C;
  for (int64_t k = 0; k < c.C; k++) c.g[k] = 1, c.b[k] = 0, c.rm[k] = 0, c.rv[k] = 1;
  printf("  batchnorm impls (oneDNN): f32 fwd %s bwd %s | bf16 fwd %s bwd %s\n",
         ts__batchnorm_dnnl_impl(0, 1, c.N, c.C, c.S, 0), ts__batchnorm_dnnl_impl(1, 1, c.N, c.C, c.S, 0),
         ts__batchnorm_dnnl_impl(0, 1, c.N, c.C, c.S, 1), ts__batchnorm_dnnl_impl(1, 1, c.N, c.C, c.S, 1));
  const double B = 4.0 * (double)n; /* fwd x->y, bwd dy,x->dx */
  c.mode = 0;
  run("batchnorm (32,64,56,56) fwd+bwd, loops", bn_step, &c, 5 * B, 0);
  c.mode = 1;
  run("batchnorm ..., f32 loops | bf16 oneDNN", bn_step, &c, 5 * B, 0);
  c.mode = 2;
  run("batchnorm ..., f32 oneDNN | bf16 oneDNN", bn_step, &c, 5 * B, 0);
  rel(&c.x), rel(&c.y), rel(&c.dy), rel(&c.dx);
  ts_free(p);
}

/* ---------------------------------------------------------------- pooling (ResNet stem, head) */
typedef struct {
  ts__pool_desc d;
  int is_max, dnnl;
  buf x, y, dy, dx;
  uint8_t *ws;
} pool_ctx;
static void pool_step(int v, void *c_) {
  pool_ctx *c = c_;
  const ts__pool_desc *d = &c->d;
  if (c->is_max) {
    if (!v) {
      OK(c->dnnl ? ts__maxpool2d_fwd_dnnl(d, c->x.f, c->y.f, c->ws) : ts__maxpool2d_fwd_ref(d, c->x.f, c->y.f, c->ws));
      OK(c->dnnl ? ts__maxpool2d_bwd_dnnl(d, c->dy.f, c->ws, c->dx.f) : ts__maxpool2d_bwd_ref(d, c->dy.f, c->ws, c->dx.f));
    } else {
      OK(ts__maxpool2d_fwd_lp(d, TS_BF16, c->dnnl, c->x.h, c->y.h, c->ws));
      OK(ts__maxpool2d_bwd_lp(d, TS_BF16, c->dnnl, c->dy.h, c->ws, c->dx.h));
    }
  } else {
    if (!v) {
      OK(c->dnnl ? ts__avgpool2d_fwd_dnnl(d, c->x.f, c->y.f) : ts__avgpool2d_fwd_ref(d, c->x.f, c->y.f));
      OK(c->dnnl ? ts__avgpool2d_bwd_dnnl(d, c->dy.f, c->dx.f) : ts__avgpool2d_bwd_ref(d, c->dy.f, c->dx.f));
    } else {
      OK(ts__avgpool2d_fwd_lp(d, TS_BF16, c->dnnl, c->x.h, c->y.h));
      OK(ts__avgpool2d_bwd_lp(d, TS_BF16, c->dnnl, c->dy.h, c->dx.h));
    }
  }
}
static void bench_pool(void) {
  for (int k = 0; k < 3; k++) {
    pool_ctx c;
    memset(&c, 0, sizeof c);
    c.is_max = k < 2, c.dnnl = k != 1;
    if (c.is_max) c.d = (ts__pool_desc){32, 64, 112, 112, 56, 56, 3, 3, 2, 2, 1, 1};
    else c.d = (ts__pool_desc){32, 512, 7, 7, 1, 1, 7, 7, 1, 1, 0, 0};
    const int64_t nx = c.d.N * c.d.C * c.d.H * c.d.W, ny = c.d.N * c.d.C * c.d.OH * c.d.OW;
    c.x = mk(nx, 41), c.dx = mk(nx, 42), c.y = mk(ny, 43), c.dy = mk(ny, 44);
    c.ws = ts_alloc((size_t)ny);
    if (!c.ws) die("out of memory");
    if (k == 0)
      printf("  maxpool impls (oneDNN): f32 fwd %s bwd %s | bf16 fwd %s bwd %s\n", ts__pool_dnnl_impl(&c.d, 1, 0, 0),
             ts__pool_dnnl_impl(&c.d, 1, 1, 0), ts__pool_dnnl_impl(&c.d, 1, 0, 1), ts__pool_dnnl_impl(&c.d, 1, 1, 1));
    const double B = 4.0 * (double)(2 * nx + 2 * ny); /* float tensors: fwd x->y, bwd dy->dx */
    run(k == 0   ? "maxpool 3x3/2 (32,64,112,112) fwd+bwd"
        : k == 1 ? "maxpool 3x3/2 (32,64,112,112), ref loops"
                 : "global avgpool (32,512,7,7) fwd+bwd",
        pool_step, &c, B, 0);
    rel(&c.x), rel(&c.dx), rel(&c.y), rel(&c.dy);
    ts_free(c.ws);
  }
}
/* ---------------------------------------------------------------- causal attention */
typedef struct {
  int64_t B, H, T, D;
  buf q, k, v, o, dout, dq, dk, dv;
  float *lse;
} attn_ctx;
static void attn_step(int v, void *c_) {
  attn_ctx *c = c_;
  const float s = 1.0f / sqrtf((float)c->D);
  if (!v) {
    OK(ts__attention_fwd_dnnl(c->q.f, c->k.f, c->v.f, c->o.f, c->lse, c->B, c->H, c->T, c->D, s, TS_ATTN_BHTD));
    OK(ts__attention_bwd_dnnl(c->dout.f, c->q.f, c->k.f, c->v.f, c->o.f, c->lse, c->dq.f, c->dk.f, c->dv.f, c->B,
                              c->H, c->T, c->D, s, TS_ATTN_BHTD));
  } else {
    OK(ts__attention_fwd_lp(TS_BF16, c->q.h, c->k.h, c->v.h, c->o.h, c->lse, c->B, c->H, c->T, c->D, s, TS_ATTN_BHTD, 1));
    OK(ts__attention_bwd_lp(TS_BF16, c->dout.h, c->q.h, c->k.h, c->v.h, c->o.h, c->lse, c->dq.h, c->dk.h, c->dv.h,
                            c->B, c->H, c->T, c->D, s, TS_ATTN_BHTD, 1));
  }
}
static void bench_attention(int64_t B, int64_t H, int64_t T, int64_t D) {
  attn_ctx c;
  memset(&c, 0, sizeof c);
  c.B = B, c.H = H, c.T = T, c.D = D;
  const int64_t n = B * H * T * D;
  c.q = mk(n, 31), c.k = mk(n, 32), c.v = mk(n, 33), c.o = mk(n, 34), c.dout = mk(n, 35);
  c.dq = mk(n, 36), c.dk = mk(n, 37), c.dv = mk(n, 38);
  c.lse = ts_alloc((size_t)(B * H * T) * 4);
  if (!c.lse) die("out of memory");
  char name[96];
  snprintf(name, sizeof name, "attention (%lld,%lld,%lld,%lld) fwd+bwd", (long long)B, (long long)H, (long long)T,
           (long long)D);
  /* causal products: 2 forward (q k^T, P v), 5 backward, each 2 * B*H * T(T+1)/2 * D flops */
  run(name, attn_step, &c, 7 * 2.0 * (double)(B * H) * (double)(T * (T + 1) / 2) * (double)D, 1);
  rel(&c.q), rel(&c.k), rel(&c.v), rel(&c.o), rel(&c.dout), rel(&c.dq), rel(&c.dk), rel(&c.dv);
  ts_free(c.lse);
}

/* ---------------------------------------------------------------- sum_to, embedding, softmax_ce */
typedef struct {
  int64_t N, V, D;
  buf x, y, t, g;
  void *ids;
  float *lse;
} rows_ctx;
static void sum_to_step(int v, void *c_) {
  rows_ctx *c = c_;
  const ts_shape xs = ts_shape2(c->N, c->D), ys = ts_shape1(c->D);
  if (!v) OK(ts__reduce_ref(0, c->x.f, &xs, c->y.f, &ys));
  else OK(ts__reduce_lp(0, TS_BF16, c->x.h, &xs, c->y.h, &ys));
}
static void emb_step(int v, void *c_) {
  rows_ctx *c = c_;
  if (!v) {
    OK(ts__embedding_fwd_ref(c->t.f, 4, c->V, c->D, c->ids, TS_I32, c->N, c->x.f));
    OK(ts__embedding_bwd_ref(c->y.f, c->ids, TS_I32, c->N, c->V, c->D, c->g.f));
  } else {
    OK(ts__embedding_fwd_ref(c->t.h, 2, c->V, c->D, c->ids, TS_I32, c->N, c->x.h));
    OK(ts__embedding_bwd_lp(TS_BF16, c->y.h, c->ids, TS_I32, c->N, c->V, c->D, c->g.h));
  }
}
static void ce_step(int v, void *c_) {
  rows_ctx *c = c_;
  float loss;
  if (!v) {
    OK(ts__softmax_ce_fwd_ref(c->x.f, c->ids, 0, c->N, c->V, 0.0f, TS_CE_IGNORE_INDEX, &loss, c->lse));
    OK(ts__softmax_ce_bwd_ref(1.0f, c->x.f, c->ids, 0, c->lse, c->N, c->V, 0.0f, TS_CE_IGNORE_INDEX, c->y.f));
  } else {
    OK(ts__softmax_ce_fwd_lp(TS_BF16, c->x.h, c->ids, 0, c->N, c->V, 0.0f, TS_CE_IGNORE_INDEX, &loss, c->lse));
    OK(ts__softmax_ce_bwd_lp(TS_BF16, 1.0f, c->x.h, c->ids, 0, c->lse, c->N, c->V, 0.0f, TS_CE_IGNORE_INDEX, c->y.h));
  }
}
/* fam: sum_to (a (4096,512) gradient to its bias), embedding (the GPT example's byte table
 * (256,128), 32x128 tokens), softmax_ce (its (4096,256) logits) */
static void bench_rows(const char *fam) {
  rows_ctx c;
  memset(&c, 0, sizeof c);
  const int is_sum = !strcmp(fam, "sum_to"), is_emb = !strcmp(fam, "embedding");
  c.N = 4096, c.V = 256, c.D = is_sum ? 512 : 128;
  const int64_t cols = is_emb ? c.D : is_sum ? c.D : c.V;
  c.x = mk(c.N * cols, 41), c.y = mk(c.N * cols, 42), c.t = mk(c.V * c.D, 43), c.g = mk(c.V * c.D, 44);
  c.ids = ts_alloc((size_t)c.N * 4);
  c.lse = ts_alloc((size_t)c.N * 4);
  if (!c.ids || !c.lse) die("out of memory");
  for (int64_t n = 0; n < c.N; n++) ((int32_t *)c.ids)[n] = (int32_t)((n * 7919 + 3) % c.V);
  const double B4 = 4.0 * (double)(c.N * cols); /* bytes of one f32 (N, cols) tensor */
  if (is_sum) {
    run("sum_to (4096,512)->(512)", sum_to_step, &c, B4 + 4.0 * (double)c.D, 0);
  } else if (is_emb) { /* fwd: gather N rows (read, write); bwd: read dy, write the table */
    run("embedding (256,128) x 4096 ids fwd+bwd", emb_step, &c, 3 * B4 + 4.0 * (double)(c.V * c.D), 0);
  } else { /* fwd: read logits; bwd: read logits, write dlogits */
    run("softmax_ce (4096,256) fwd+bwd", ce_step, &c, 3 * B4, 0);
  }
  rel(&c.x), rel(&c.y), rel(&c.t), rel(&c.g);
  ts_free(c.ids), ts_free(c.lse);
}

/* ---------------------------------------------------------------- resnet_conv: ResNet-18 CIFAR per layer */
/* Each distinct convolution of ResNet-18 (CIFAR stem, batch 64) once per direction, f32 (default
 * algorithm) and bf16 interleaved; per direction the median time and, from ts__conv_dnnl_stats,
 * the primitive's share (the rest: reorders between plain NCHW/OIHW and oneDNN's blocked layouts).
 * Times are multiplied by the layer's count in the network, so the rows add up to the step's conv
 * time; the f32 and bf16 primitive names are printed. */
static void bench_resnet_conv(void) {
  typedef struct { int64_t C, H, O, K, s, n; } layer;
  static const layer L[] = {{3, 32, 64, 3, 1, 1},    {64, 32, 64, 3, 1, 4},    {64, 32, 128, 3, 2, 1},
                            {128, 16, 128, 3, 1, 3}, {64, 32, 128, 1, 2, 1},   {128, 16, 256, 3, 2, 1},
                            {256, 8, 256, 3, 1, 3},  {128, 16, 256, 1, 2, 1},  {256, 8, 512, 3, 2, 1},
                            {512, 4, 512, 3, 1, 3},  {256, 8, 512, 1, 2, 1}};
  static const char *vn[4] = {"f32", "bf16", "bf16f", "lp"};
  const int nl = (int)(sizeof L / sizeof L[0]), reps = g_reps < 64 ? g_reps : 64;
  const int64_t N = 64;
  double tot[4][3] = {{0}}, totp[4][3] = {{0}};
  printf("resnet_conv: ResNet-18 CIFAR batch %lld, ms per step (x count), (oneDNN primitive; the rest are reorders)\n"
         "  f32: f32 default (Winograd on 3x3 s1) | bf16: bf16 direct | bf16f: bf16 buffers on the f32 Winograd\n"
         "  or direct primitive (f32's choice) between converting reorders | lp: the 16-bit default (the bf16\n"
         "  Winograd kernel, wino_f2x2, on 3x3 stride-1 layers; its transforms count as reorders, GEMMs as prim)\n",
         (long long)N);
  printf("%-26s %-5s %22s %22s %22s  %s\n", "layer (C,H->O,k,s) x n", "", "fwd ms (prim)", "bwd_data ms (prim)",
         "bwd_weight ms (prim)", "impl fwd");
  for (int l = 0; l < nl; l++) {
    const layer *y = &L[l];
    const int64_t p = y->K / 2, OH = (y->H + 2 * p - y->K) / y->s + 1;
    ts__conv_desc d = {N, y->C, y->H, y->H, y->O, y->K, y->K, OH, OH, y->s, y->s, p, p, 1, 1, 1};
    const int64_t nx = N * y->C * y->H * y->H, ny = N * y->O * OH * OH, nw = y->O * y->C * y->K * y->K;
    buf x = mk(nx, 1), w = mk(nw, 2), yy = mk(ny, 3), dy = mk(ny, 4), dx = mk(nx, 5), dw = mk(nw, 6);
    double t[4][3][64], pr[4][3][64], st[2][3][3];
    ts__conv_dnnl_set_lp_mode(0, TS_CONV_LP_NATIVE);
    const char *impl[4] = {ts__conv_dnnl_impl(&d, 0), ts__conv_dnnl_impl_bf16(&d, 0), "", ""};
    ts__conv_dnnl_set_lp_mode(0, TS_CONV_LP_DEFAULT);
    for (int r = -1; r < reps; r++)
      for (int v = 0; v < 4; v++)
        for (int dir = 0; dir < 3; dir++) {
          for (int k = 0; k < 3; k++)
            ts__conv_dnnl_set_lp_mode(k, v == 1 ? TS_CONV_LP_NATIVE : v == 2 ? TS_CONV_LP_F32 : TS_CONV_LP_DEFAULT);
          if (r < 0 && dir == 0 && v >= 2) impl[v] = ts__conv_dnnl_impl_bf16(&d, 0);
          ts__conv_dnnl_stats(NULL, 1);
          double t0 = ts_time_now();
          if (dir == 0)
            OK(v ? ts__conv2d_fwd_lp(&d, TS_BF16, 1, x.h, w.h, NULL, yy.h) : ts__conv2d_fwd_dnnl(&d, x.f, w.f, NULL, yy.f));
          else if (dir == 1)
            OK(v ? ts__conv2d_bwd_data_lp(&d, TS_BF16, 1, dy.h, w.h, dx.h) : ts__conv2d_bwd_data_dnnl(&d, dy.f, w.f, dx.f));
          else
            OK(v ? ts__conv2d_bwd_weight_lp(&d, TS_BF16, 1, x.h, dy.h, dw.h, NULL)
                 : ts__conv2d_bwd_weight_dnnl(&d, x.f, dy.f, dw.f, NULL));
          double dt = ts_time_now() - t0;
          ts__conv_dnnl_stats(st, 1);
          if (r < 0) continue; /* warm-up: primitives created */
          t[v][dir][r] = dt;
          pr[v][dir][r] = st[v > 0][dir][1];
        }
    for (int k = 0; k < 3; k++) ts__conv_dnnl_set_lp_mode(k, TS_CONV_LP_DEFAULT);
    char nm[40];
    snprintf(nm, sizeof nm, "%lld,%lld->%lld,%lld,%lld x%lld", (long long)y->C, (long long)y->H, (long long)y->O,
             (long long)y->K, (long long)y->s, (long long)y->n);
    double med[4][3];
    for (int v = 0; v < 4; v++) {
      printf("%-26s %-5s", v ? "" : nm, vn[v]);
      for (int dir = 0; dir < 3; dir++) {
        qsort(t[v][dir], (size_t)reps, sizeof(double), cmpd);
        qsort(pr[v][dir], (size_t)reps, sizeof(double), cmpd);
        const double a = t[v][dir][reps / 2] * 1e3 * (double)y->n, b = pr[v][dir][reps / 2] * 1e3 * (double)y->n;
        med[v][dir] = a;
        tot[v][dir] += a, totp[v][dir] += b;
        printf("      %7.2f (%7.2f)", a, b);
      }
      printf("  %s\n", impl[v]);
    }
    printf("%-26s %-5s", "", "f32/lp");
    for (int dir = 0; dir < 3; dir++) printf("      %7.2fx         ", med[0][dir] / med[3][dir]);
    printf("\n");
    rel(&x), rel(&w), rel(&yy), rel(&dy), rel(&dx), rel(&dw);
  }
  for (int v = 0; v < 4; v++) {
    double a = 0, ap = 0;
    for (int dir = 0; dir < 3; dir++) a += tot[v][dir], ap += totp[v][dir];
    printf("resnet_conv total %-5s %8.1f ms (primitives %8.1f): fwd %.1f (%.1f) bwd_data %.1f (%.1f) bwd_weight %.1f "
           "(%.1f); f32/this %.2fx\n",
           vn[v], a, ap, tot[v][0], totp[v][0], tot[v][1], totp[v][1], tot[v][2], totp[v][2],
           (tot[0][0] + tot[0][1] + tot[0][2]) / a);
  }
  fflush(stdout);
}

int main(int argc, char **argv) {
  const char *fams[16];
  int nf = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) g_reps = atoi(argv[++i]);
    else if (nf < 16) fams[nf++] = argv[i];
  }
  static const char *all[] = {"dense", "conv", "gelu", "add", "layernorm", "softmax", "dropout", "batchnorm", "pool",
                              "attention", "sum_to", "embedding", "softmax_ce"};
  if (!nf)
    for (nf = 0; nf < 13; nf++) fams[nf] = all[nf];
  if (g_reps < 1) g_reps = 1;
  printf("bench_bf16: median of %d interleaved repeats; memory-bound GB/s count the bytes each variant moves\n",
         g_reps);
  for (int i = 0; i < nf; i++) {
    if (!strcmp(fams[i], "dense")) bench_dense();
    else if (!strcmp(fams[i], "conv")) bench_conv();
    else if (!strcmp(fams[i], "resnet_conv")) bench_resnet_conv();
    else if (!strcmp(fams[i], "batchnorm")) bench_bn();
    else if (!strcmp(fams[i], "pool")) bench_pool();
    else if (!strcmp(fams[i], "sum_to") || !strcmp(fams[i], "embedding") || !strcmp(fams[i], "softmax_ce"))
      bench_rows(fams[i]);
    else if (!strcmp(fams[i], "attention")) {
      bench_attention(32, 4, 128, 32); /* the GPT example (examples/gpt_text.yaml) */
      bench_attention(8, 12, 256, 64);
    }
    else if (!strcmp(fams[i], "gelu") || !strcmp(fams[i], "add") || !strcmp(fams[i], "layernorm") ||
             !strcmp(fams[i], "softmax") || !strcmp(fams[i], "dropout"))
      bench_mem(fams[i]);
    else {
      fprintf(stderr,
              "bench_bf16: unknown family '%s' (dense conv gelu add layernorm softmax dropout batchnorm pool attention "
              "sum_to embedding softmax_ce)\n",
              fams[i]);
      return 2;
    }
  }
  if (g_peak > 0) printf("measured peak (best GEMM-like rate above): %.1f GFLOP/s\n", g_peak);
  ts__dnnl_cache_clear();
  return 0;
}
