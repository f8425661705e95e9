/* ResNet-50's convolutions on the GPU (torchvision's network at 224x224, batch 128, bf16): each
 * distinct shape's forward, backward data and backward filter timed with CUDA events, NCHW and
 * channels last (NHWC tensors, OHWI filters), through what a plan would use (cuDNN where it runs
 * the direction with a deterministic algorithm, else Tessera's direct kernels: the route is
 * printed), the repeats interleaved. Prints each shape's median times and TFLOP/s, then the sum
 * over one training step's 53 convolutions (each shape times its count; the stem's backward data
 * left out: the image needs no gradient) in both layouts: what channels last is worth to the
 * convolutions alone, and the share of the measured bf16 GEMM peak they reach.
 * Under TESSERA_GPU_DETERMINISTIC=0 cuDNN may pick non-deterministic algorithms (PyTorch's
 * default): a second run with it says what determinism costs.
 *
 *   bench_gpu_conv [--reps N] [--batch B]    (on a machine with a GPU; elsewhere: SKIPPED, exit 77)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_gpu.h"
#include "kernels/conv.h"

typedef struct {
  const char *name;
  int64_t C, H, O, K, s, count; /* in channels, in size, out channels, kernel, stride, in one network */
} shape;

static const shape k_shapes[] = {
    {"stem 7x7/2", 3, 224, 64, 7, 2, 1},     {"1x1 64-64 @56", 64, 56, 64, 1, 1, 1},
    {"3x3 64 @56", 64, 56, 64, 3, 1, 3},     {"1x1 64-256 @56", 64, 56, 256, 1, 1, 4},
    {"1x1 256-64 @56", 256, 56, 64, 1, 1, 2}, {"1x1 256-128 @56", 256, 56, 128, 1, 1, 1},
    {"3x3/2 128 @56", 128, 56, 128, 3, 2, 1}, {"1x1/2 256-512 @56", 256, 56, 512, 1, 2, 1},
    {"1x1 128-512 @28", 128, 28, 512, 1, 1, 4}, {"1x1 512-128 @28", 512, 28, 128, 1, 1, 3},
    {"3x3 128 @28", 128, 28, 128, 3, 1, 3},  {"1x1 512-256 @28", 512, 28, 256, 1, 1, 1},
    {"3x3/2 256 @28", 256, 28, 256, 3, 2, 1}, {"1x1/2 512-1024 @28", 512, 28, 1024, 1, 2, 1},
    {"1x1 256-1024 @14", 256, 14, 1024, 1, 1, 6}, {"1x1 1024-256 @14", 1024, 14, 256, 1, 1, 5},
    {"3x3 256 @14", 256, 14, 256, 3, 1, 5},  {"1x1 1024-512 @14", 1024, 14, 512, 1, 1, 1},
    {"3x3/2 512 @14", 512, 14, 512, 3, 2, 1}, {"1x1/2 1024-2048 @14", 1024, 14, 2048, 1, 2, 1},
    {"1x1 512-2048 @7", 512, 7, 2048, 1, 1, 3}, {"1x1 2048-512 @7", 2048, 7, 512, 1, 1, 2},
    {"3x3 512 @7", 512, 7, 512, 3, 1, 2},
};

int main(int argc, char **argv) {
  int reps = 5;
  int64_t B = 128;
  ts__dev *d = NULL;
  char desc[256];
  const int st = gpu_bench_start("bench_gpu_conv", argc, argv, &reps, &B, &d, desc, sizeof desc);
  if (st >= 0) return st;
  const char *why = NULL, *det = getenv("TESSERA_GPU_DETERMINISTIC");
  const char *impl = ts__gpu_conv_impl(&why);
  double peak = 0; /* GFLOP/s */
  int64_t pn = 0;
  if (ts__gpu_gemm_peak(d, TS_BF16, &pn, &peak)) peak = 0;
  printf("%s; batch %lld, bf16; convolutions: %s%s%s; %s algorithms; bf16 GEMM peak %.1f TFLOP/s; median of %d\n",
         desc, (long long)B, impl, why && *why ? ": " : "", why ? why : "",
         det && !strcmp(det, "0") ? "non-deterministic allowed" : "deterministic", peak / 1e3, reps);
  printf("%-20s %5s | %-28s | %-28s | %s\n", "shape", "count", "NCHW ms (fwd, bwd data, bwd w)",
         "NHWC ms (fwd, bwd data, bwd w)", "NHWC TFLOP/s, route");
  ts__dev_event *e0, *e1;
  TRY(ts__dev_event_create(d, &e0));
  TRY(ts__dev_event_create(d, &e1));
  double step[2] = {0, 0}, flops_step = 0;
  for (size_t si = 0; si < sizeof k_shapes / sizeof k_shapes[0]; si++) {
    const shape *sh = &k_shapes[si];
    const int64_t p = sh->K / 2, OH = (sh->H + 2 * p - sh->K) / sh->s + 1;
    const ts__conv_desc cd = {B, sh->C, sh->H, sh->H, sh->O, sh->K, sh->K, OH, OH, sh->s, sh->s, p, p, 1, 1, 1};
    TRY(ts__conv_check(&cd, "bench"));
    const size_t nx = (size_t)(B * sh->C * sh->H * sh->H), nw = (size_t)(sh->O * sh->C * sh->K * sh->K),
                 ny = (size_t)(B * sh->O * OH * OH);
    const double flops = 2.0 * (double)ny * (double)(sh->C * sh->K * sh->K); /* each direction */
    void *x, *w, *y, *dx, *dw;
    TRY(ts__dev_alloc(d, 2 * nx, &x));
    TRY(ts__dev_alloc(d, 2 * nw, &w));
    TRY(ts__dev_alloc(d, 2 * ny, &y));
    TRY(ts__dev_alloc(d, 2 * nx, &dx));
    TRY(ts__dev_alloc(d, 2 * nw, &dw));
    TRY(ts__dev_memset0(d, x, 2 * nx, NULL));
    TRY(ts__dev_memset0(d, w, 2 * nw, NULL));
    TRY(ts__dev_memset0(d, y, 2 * ny, NULL));
    size_t wsb = 0;
    for (int cl = 0; cl < 2; cl++)
      for (int dir = 0; dir < 3; dir++) {
        size_t b = 0;
        TRY(ts__gpu_conv2d_workspace(&cd, TS_BF16, cl && ts__gpu_conv2d_on_cudnn(&cd, TS_BF16, 1, dir), dir, &b));
        if (b > wsb) wsb = b;
      }
    void *ws = NULL;
    if (wsb) TRY(ts__dev_alloc(d, wsb, &ws));
    double *t = calloc((size_t)6 * (size_t)(reps + 1), sizeof(double)), med[2][3];
    char route[2][3];
    for (int r = 0; r <= reps; r++) /* r 0: warm-up (cuDNN's choice made) */
      for (int cl = 0; cl < 2; cl++)
        for (int dir = 0; dir < 3; dir++) {
          /* channels last where cuDNN runs it so, as a plan would; else NCHW (a plan transposes) */
          const int c = cl && ts__gpu_conv2d_on_cudnn(&cd, TS_BF16, 1, dir);
          route[cl][dir] = ts__gpu_conv2d_on_cudnn(&cd, TS_BF16, c, dir) ? (c ? 'n' : 'c') : 'd';
          TRY(ts__dev_event_record(d, e0, NULL));
          if (dir == 0) TRY(ts__gpu_conv2d_fwd(d, &cd, TS_BF16, c, x, w, NULL, y, ws, wsb, NULL));
          if (dir == 1) TRY(ts__gpu_conv2d_bwd_data(d, &cd, TS_BF16, c, y, w, dx, ws, wsb, NULL));
          if (dir == 2) TRY(ts__gpu_conv2d_bwd_weight(d, &cd, TS_BF16, c, x, y, dw, NULL, ws, wsb, NULL));
          TRY(ts__dev_event_record(d, e1, NULL));
          TRY(ts__dev_sync(d));
          double ms = 0;
          TRY(ts__dev_event_elapsed(d, e0, e1, &ms));
          if (r) t[(size_t)(cl * 3 + dir) * (size_t)reps + (size_t)(r - 1)] = ms;
        }
    for (int cl = 0; cl < 2; cl++)
      for (int dir = 0; dir < 3; dir++) {
        med[cl][dir] = gpu_bench_median(t + (size_t)(cl * 3 + dir) * (size_t)reps, reps);
        if (!(si == 0 && dir == 1)) step[cl] += (double)sh->count * med[cl][dir];
      }
    flops_step += (double)sh->count * flops * (si == 0 ? 2 : 3);
    printf("%-20s %5lld | %8.3f %8.3f %8.3f   | %8.3f %8.3f %8.3f   | %5.0f %5.0f %5.0f  %c%c%c\n", sh->name,
           (long long)sh->count, med[0][0], med[0][1], med[0][2], med[1][0], med[1][1], med[1][2],
           flops / med[1][0] / 1e9, flops / med[1][1] / 1e9, flops / med[1][2] / 1e9, route[1][0], route[1][1],
           route[1][2]);
    free(t);
    void *all[] = {x, w, y, dx, dw, ws};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) ts__dev_free(d, all[k]);
  }
  printf("(route: n cuDNN channels last, c cuDNN NCHW, d Tessera's direct kernel)\n");
  printf("bench_gpu_conv: a step's 53 convolutions: NCHW %.2f ms, channels last %.2f ms (%.2fx); %.1f TFLOP/s "
         "channels last%s\n",
         step[0], step[1], step[0] / step[1], flops_step / step[1] / 1e9,
         peak > 0 ? "" : " (no GEMM peak measured)");
  if (peak > 0) printf("channels last reaches %.0f%% of the bf16 GEMM peak\n", 100.0 * (flops_step / step[1] / 1e6) / peak);
  ts__dev_event_destroy(d, e0);
  ts__dev_event_destroy(d, e1);
  ts__dev_close(d);
  return 0;
}
