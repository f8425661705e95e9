/* Shared by the GPU micro-benchmarks (bench_gpu_bn.c, bench_gpu_conv.c; header-only: each is its
 * own executable): their command line (--reps N --batch B), the GPU opened or SKIPPED (exit 77),
 * medians, and TRY, which ends main naming the call that failed. */
#ifndef TS_BENCH_GPU_H
#define TS_BENCH_GPU_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/dev.h"
#include "device/gpu_kernels.h"

static const char *gpu_bench_prog = "bench_gpu";

#define TRY(x)                                                                                                         \
  do {                                                                                                                 \
    if ((x) != TS_OK) {                                                                                                \
      fprintf(stderr, "%s: %s: %s\n", gpu_bench_prog, #x, ts_last_error());                                           \
      return 1;                                                                                                        \
    }                                                                                                                  \
  } while (0)

static int gpu_bench_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
/* the median of v[0..n-1] (reorders v) */
static double gpu_bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, gpu_bench_cmp);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Parses [--reps N] [--batch B] into *reps, *B (defaults as given) and opens GPU 0 into *d, its
 * description into desc. Returns -1 to go on, else main's exit status: 2 bad arguments, 77 no GPU
 * (SKIPPED, with the reason). */
static int gpu_bench_start(const char *prog, int argc, char **argv, int *reps, int64_t *B, ts__dev **d, char *desc,
                           size_t cap) {
  gpu_bench_prog = prog;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) *reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--batch") && i + 1 < argc) *B = atoll(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--reps N] [--batch B]\n", prog);
      return 2;
    }
  }
  if (*reps < 1 || *reps > 100 || *B < 1) {
    fprintf(stderr, "%s: --reps 1..100, --batch >= 1\n", prog);
    return 2;
  }
  if (ts__dev_open(TS_DEVICE_GPU, 0, d)) {
    printf("SKIPPED: no GPU: %s\n", ts_last_error());
    return 77;
  }
  ts_device_describe(&(*d)->info, desc, cap);
  return -1;
}

#endif
