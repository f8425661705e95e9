/* Kernel micro-benchmarks: conv2d (fwd / bwd_data / bwd_weight) on the ResNet-18 CIFAR shapes
 * in both oneDNN layout modes (plain NCHW vs format_any + reorders), and GEMMs (raw dnnl_sgemm
 * vs ts__matmul_dnnl vs the batched path). Prints GFLOP/s (best of --reps runs). Run briefly:
 *
 *   bench_kernels [conv|matmul|resnet|all] [--reps N] [--threads T] [--batch B]
 *                 [--alg default|direct|wino|auto]
 *
 * `resnet` sums the best times of every conv of a ResNet-18 (CIFAR variant) training step in
 * each layout mode, which is how the defaults in src/kernels/conv_dnnl.c were chosen (numbers
 * there). GFLOP/s counts 2*MACs of a direct convolution, also for Winograd. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dnnl.h>

#include "kernels/conv.h"
#include "kernels/matmul.h"
#include "tessera/base.h"
#include "tessera/tensor.h"

static int g_reps = 5;

typedef struct {
  const char *name;
  int64_t C, H, O, K, s, p, count; /* count: occurrences in one ResNet-18 forward */
} conv_shape;

static const conv_shape k_shapes[] = {
    {"stem 3->64 3x3 @32", 3, 32, 64, 3, 1, 1, 1},
    {"64->64 3x3 @32", 64, 32, 64, 3, 1, 1, 4},
    {"64->128 3x3 s2 @32", 64, 32, 128, 3, 2, 1, 1},
    {"64->128 1x1 s2 @32", 64, 32, 128, 1, 2, 0, 1},
    {"128->128 3x3 @16", 128, 16, 128, 3, 1, 1, 3},
    {"128->256 3x3 s2 @16", 128, 16, 256, 3, 2, 1, 1},
    {"128->256 1x1 s2 @16", 128, 16, 256, 1, 2, 0, 1},
    {"256->256 3x3 @8", 256, 8, 256, 3, 1, 1, 3},
    {"256->512 3x3 s2 @8", 256, 8, 512, 3, 2, 1, 1},
    {"256->512 1x1 s2 @8", 256, 8, 512, 1, 2, 0, 1},
    {"512->512 3x3 @4", 512, 4, 512, 3, 1, 1, 3},
};
#define NSHAPES ((int)(sizeof k_shapes / sizeof k_shapes[0]))

static float *rnd(size_t n, uint64_t seed) {
  float *p = ts_alloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) p[i] = ts_rng_uniform_at(seed, i) - 0.5f;
  return p;
}

/* Best time in seconds of `dir` (0 fwd, 1 bwd_data, 2 bwd_weight) in layout mode fmt. */
static double time_conv(const ts__conv_desc *d, int dir, int fmt, float *x, float *w, float *y) {
  ts__conv_dnnl_set_format(dir, fmt);
  double best = 1e30;
  for (int r = 0; r <= g_reps; r++) { /* r = 0 warms up (primitive creation) */
    double t0 = ts_time_now();
    int rc = dir == 0   ? ts__conv2d_fwd_dnnl(d, x, w, NULL, y)
             : dir == 1 ? ts__conv2d_bwd_data_dnnl(d, y, w, x)
                        : ts__conv2d_bwd_weight_dnnl(d, x, y, w, NULL);
    double t = ts_time_now() - t0;
    if (rc) {
      fprintf(stderr, "conv failed: %s\n", ts_last_error());
      return 1e30;
    }
    if (r && t < best) best = t;
  }
  return best;
}

static void bench_conv(int64_t batch, int resnet_only) {
  static const char *dirs[3] = {"fwd", "bwd_data", "bwd_weight"};
  double total[3][2] = {{0}};
  if (!resnet_only)
    printf("%-22s %-10s %10s %10s   %s\n", "conv (batch)", "direction", "plain", "any",
           "GFLOP/s; oneDNN impl (any)");
  for (int i = 0; i < NSHAPES; i++) {
    const conv_shape *s = &k_shapes[i];
    ts__conv_desc d = {batch, s->C, s->H, s->H, s->O, s->K, s->K, 0, 0, s->s, s->s, s->p, s->p,
                       1, 1, 1};
    d.OH = d.OW = ts__conv_out_size(s->H, s->K, s->s, s->p, 1);
    size_t nx = (size_t)(d.N * d.C * d.H * d.W), ny = (size_t)(d.N * d.O * d.OH * d.OW);
    size_t nw = (size_t)(d.O * d.C * d.KH * d.KW);
    float *x = rnd(nx, 1), *w = rnd(nw, 2), *y = rnd(ny, 3);
    double flop = 2.0 * (double)ny * (double)(d.C * d.KH * d.KW);
    for (int dir = 0; dir < 3; dir++) {
      if (i == 0 && dir == 1) continue; /* the stem's input needs no gradient */
      double t[2];
      for (int fmt = 0; fmt < 2; fmt++) {
        t[fmt] = time_conv(&d, dir, fmt, x, w, y);
        total[dir][fmt] += t[fmt] * (double)s->count;
      }
      if (!resnet_only)
        printf("%-22s %-10s %10.1f %10.1f   %s\n", s->name, dirs[dir], flop / t[0] * 1e-9,
               flop / t[1] * 1e-9, ts__conv_dnnl_impl(&d, dir));
    }
    ts_free(x), ts_free(w), ts_free(y);
  }
  printf("ResNet-18 (CIFAR) conv time per training step, batch %lld (ms):\n", (long long)batch);
  for (int dir = 0; dir < 3; dir++)
    printf("  %-10s plain %8.1f   any %8.1f   -> %s\n", dirs[dir], total[dir][0] * 1e3,
           total[dir][1] * 1e3, total[dir][0] < total[dir][1] ? "plain" : "any");
}

static double time_gemm(int mode, const ts__mm_desc *d, const float *a, const float *b, float *c) {
  double best = 1e30;
  for (int r = 0; r <= g_reps; r++) {
    double t0 = ts_time_now();
    if (mode == 0)
      dnnl_sgemm(d->trans_a ? 'T' : 'N', d->trans_b ? 'T' : 'N', d->M, d->N, d->K, 1.f, a,
                 d->trans_a ? d->M : d->K, b, d->trans_b ? d->K : d->N, 0.f, c, d->N);
    else if (ts__matmul_dnnl(d, a, b, c))
      fprintf(stderr, "matmul failed: %s\n", ts_last_error());
    double t = ts_time_now() - t0;
    if (r && t < best) best = t;
  }
  return best;
}

static void bench_matmul(void) {
  static const struct {
    const char *name;
    int64_t batch, M, N, K;
    int ta, tb, ab, bb;
  } mm[] = {
      {"sgemm 1024^3", 1, 1024, 1024, 1024, 0, 0, 1, 1},
      {"sgemm 1024^3 (A^T)", 1, 1024, 1024, 1024, 1, 0, 1, 1},
      {"sgemm 1024^3 (B^T)", 1, 1024, 1024, 1024, 0, 1, 1, 1},
      {"gpt qkv 512x768x2304", 1, 512, 2304, 768, 0, 0, 1, 1},
      {"gpt mlp 512x3072x768", 1, 512, 768, 3072, 0, 0, 1, 1},
      {"gpt dW 768x2304x512", 1, 768, 2304, 512, 1, 0, 1, 1},
      {"dense 64x10x512 (B^T)", 1, 64, 10, 512, 0, 1, 1, 1},
      {"x(8,64,768)@W(768,768)", 8, 64, 768, 768, 0, 0, 1, 0},
      {"attn 48x(128x64x128)", 48, 128, 128, 64, 0, 1, 1, 1},
      {"attn 48x(128x128x64)", 48, 128, 64, 128, 0, 0, 1, 1},
  };
  printf("%-26s %12s %12s\n", "matmul", "raw sgemm", "ts dnnl");
  for (size_t i = 0; i < sizeof mm / sizeof mm[0]; i++) {
    ts__mm_desc d = {mm[i].batch, mm[i].M, mm[i].N, mm[i].K, mm[i].ta, mm[i].tb, mm[i].ab, mm[i].bb};
    size_t na = (size_t)(d.batch * d.M * d.K), nb = (size_t)(d.batch * d.K * d.N);
    float *a = rnd(na, 4), *b = rnd(nb, 5), *c = rnd((size_t)(d.batch * d.M * d.N), 6);
    double flop = 2.0 * (double)(d.batch * d.M * d.N * d.K);
    double t1 = time_gemm(1, &d, a, b, c);
    if (d.batch == 1)
      printf("%-26s %12.1f %12.1f\n", mm[i].name, flop / time_gemm(0, &d, a, b, c) * 1e-9,
             flop / t1 * 1e-9);
    else
      printf("%-26s %12s %12.1f\n", mm[i].name, "-", flop / t1 * 1e-9);
    ts_free(a), ts_free(b), ts_free(c);
  }
}

int main(int argc, char **argv) {
  const char *what = "all";
  int64_t batch = 64;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) g_reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) ts_threads_set(atoi(argv[++i]));
    else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--alg") && i + 1 < argc) {
      const char *a = argv[++i];
      int alg = !strcmp(a, "wino")     ? TS_CONV_ALG_WINOGRAD
                : !strcmp(a, "auto")   ? TS_CONV_ALG_AUTO
                : !strcmp(a, "direct") ? TS_CONV_ALG_DIRECT
                                       : TS_CONV_ALG_DEFAULT;
      for (int dir = 0; dir < 3; dir++) ts__conv_dnnl_set_algo(dir, alg);
    }
    else if (argv[i][0] != '-') what = argv[i];
    else {
      fprintf(stderr, "usage: %s [conv|matmul|resnet|all] [--reps N] [--threads T] [--batch B] [--alg default|direct|wino|auto]\n",
              argv[0]);
      return 2;
    }
  }
  if (g_reps < 1) g_reps = 1;
  printf("threads %d, reps %d (best of)\n", ts_threads_get(), g_reps);
  if (!strcmp(what, "matmul") || !strcmp(what, "all")) bench_matmul();
  if (!strcmp(what, "conv") || !strcmp(what, "all")) bench_conv(batch, 0);
  if (!strcmp(what, "resnet")) bench_conv(batch, 1);
  return 0;
}
