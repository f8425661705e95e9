/* Batch norm on the GPU at ResNet-50's shapes (batch 128, bf16, training, the ReLU fused):
 * forward + backward timed with CUDA events, three ways in turn on the same data:
 *   - nchw:    the tensor as (N, C, H W): a block per (channel, chunk), reading along positions;
 *   - rows:    channels last as (N H W, C, 1), the sums by ts_k_bn_cl_psums (a block per 32
 *              channels reading whole rows: the default for NHWC plans);
 *   - strided: channels last with the per-channel kernels (TESSERA_GPU_BN_CL=strided).
 * The three compute the same sums bit for bit (test_device_conv); this says which reads faster.
 * Prints each shape's median time over the repeats (interleaved), the bytes moved per second
 * (forward: x read twice, y written; backward: x and dy read twice, dx written) and the ratios.
 *
 *   bench_gpu_bn [--reps N] [--batch B]      (on a machine with a GPU; elsewhere: SKIPPED, exit 77)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_gpu.h"

typedef struct {
  const char *name;
  int64_t C, HW;
} shape;

static const shape k_shapes[] = {
    {"stem 64 @112", 64, 112 * 112},  {"64 @56", 64, 56 * 56},      {"256 @56", 256, 56 * 56},
    {"128 @28", 128, 28 * 28},        {"512 @28", 512, 28 * 28},    {"256 @14", 256, 14 * 14},
    {"1024 @14", 1024, 14 * 14},      {"2048 @7", 2048, 7 * 7},
};

int main(int argc, char **argv) {
  int reps = 7;
  int64_t B = 128;
  ts__dev *d = NULL;
  char desc[256];
  const int st = gpu_bench_start("bench_gpu_bn", argc, argv, &reps, &B, &d, desc, sizeof desc);
  if (st >= 0) return st;
  printf("%s; batch %lld, bf16, training, ReLU fused; median of %d (interleaved)\n", desc, (long long)B, reps);
  printf("%-14s %10s %10s %10s %9s %9s %9s %8s %8s\n", "shape", "nchw ms", "rows ms", "strided ms", "nchw GB/s",
         "rows GB/s", "strd GB/s", "strd/rows", "rows/nchw");
  const ts_dtype dt = TS_BF16;
  ts__dev_event *e0, *e1;
  TRY(ts__dev_event_create(d, &e0));
  TRY(ts__dev_event_create(d, &e1));
  double tot[3] = {0, 0, 0};
  for (size_t si = 0; si < sizeof k_shapes / sizeof k_shapes[0]; si++) {
    const shape *sh = &k_shapes[si];
    const int64_t M = B * sh->HW, n = M * sh->C;
    const size_t bytes = (size_t)n * 2;
    void *x, *dy, *y, *dx, *ws;
    float *ga, *be, *rm, *rv, *mean, *var, *dg, *db, *ab;
    TRY(ts__dev_alloc(d, bytes, &x));
    TRY(ts__dev_alloc(d, bytes, &dy));
    TRY(ts__dev_alloc(d, bytes, &y));
    TRY(ts__dev_alloc(d, bytes, &dx));
    TRY(ts__dev_alloc(d, ts__gpu_bn_workspace(B, sh->C, sh->HW), &ws));
    float **cv[] = {&ga, &be, &rm, &rv, &mean, &var, &dg, &db, &ab};
    for (size_t k = 0; k < sizeof cv / sizeof cv[0]; k++) TRY(ts__dev_alloc(d, 8 * (size_t)sh->C, (void **)cv[k]));
    /* x and dy: bf16 values around 1 and 0 (their bits a fixed pattern: the layout does not matter
     * for the time) */
    uint16_t *h = malloc(bytes);
    for (int64_t i = 0; i < n; i++) h[i] = (uint16_t)(0x3f80 + (uint16_t)((i * 2654435761u) >> 26));
    TRY(ts__dev_copy(d, x, h, bytes, TS__H2D, NULL));
    for (int64_t i = 0; i < n; i++) h[i] = (uint16_t)(0x3c00 + (uint16_t)((i * 40503u) >> 10 & 0x3ff)) ^ (i & 1 ? 0x8000 : 0);
    TRY(ts__dev_copy(d, dy, h, bytes, TS__H2D, NULL));
    free(h);
    float *hc = malloc(8 * (size_t)sh->C);
    for (int64_t c = 0; c < 2 * sh->C; c++) hc[c] = 1.0f;
    TRY(ts__dev_copy(d, ga, hc, 4 * (size_t)sh->C, TS__H2D, NULL));
    TRY(ts__dev_copy(d, rv, hc, 4 * (size_t)sh->C, TS__H2D, NULL));
    TRY(ts__dev_memset0(d, be, 4 * (size_t)sh->C, NULL));
    TRY(ts__dev_memset0(d, rm, 4 * (size_t)sh->C, NULL));
    free(hc);
    const ts__gpu_bn_relu relu = {0.0f, ab};
    double *t[3];
    for (int v = 0; v < 3; v++) t[v] = calloc((size_t)reps + 1, sizeof(double));
    for (int r = 0; r <= reps; r++) /* r 0: warm-up */
      for (int v = 0; v < 3; v++) {
        const int64_t N = v ? M : B, S = v ? 1 : sh->HW;
        if (v == 2) setenv("TESSERA_GPU_BN_CL", "strided", 1);
        TRY(ts__dev_event_record(d, e0, NULL));
        TRY(ts__gpu_batchnorm_fwd(d, dt, TS_F32, x, ga, be, rm, rv, y, mean, var, N, sh->C, S, 0.1f, 1e-5f, 1, &relu,
                                  ws, NULL));
        TRY(ts__gpu_batchnorm_bwd(d, dt, TS_F32, dy, x, ga, mean, var, dx, dg, db, N, sh->C, S, 1e-5f, 1, &relu, ws,
                                  NULL));
        TRY(ts__dev_event_record(d, e1, NULL));
        TRY(ts__dev_sync(d));
        unsetenv("TESSERA_GPU_BN_CL");
        double ms = 0;
        TRY(ts__dev_event_elapsed(d, e0, e1, &ms));
        if (r) t[v][r - 1] = ms;
      }
    double med[3];
    for (int v = 0; v < 3; v++) {
      med[v] = gpu_bench_median(t[v], reps);
      tot[v] += med[v];
      free(t[v]);
    }
    const double moved = 8.0 * (double)bytes; /* forward 3 passes, backward 5 */
    printf("%-14s %10.3f %10.3f %10.3f %9.0f %9.0f %9.0f %8.2f %8.2f\n", sh->name, med[0], med[1], med[2],
           moved / med[0] / 1e6, moved / med[1] / 1e6, moved / med[2] / 1e6, med[2] / med[1], med[1] / med[0]);
    void *all[] = {x, dy, y, dx, ws, ga, be, rm, rv, mean, var, dg, db, ab};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) ts__dev_free(d, all[k]);
  }
  printf("bench_gpu_bn: every shape once (ms): nchw %.3f, channels last rows %.3f, strided %.3f; strided/rows %.2f, "
         "rows/nchw %.2f\n",
         tot[0], tot[1], tot[2], tot[2] / tot[1], tot[1] / tot[0]);
  ts__dev_event_destroy(d, e0);
  ts__dev_event_destroy(d, e1);
  ts__dev_close(d);
  return 0;
}
