/* The cost of the data pipeline's non-finite check (ts__first_nonfinite_f32, src/data/pipeline.c:
 * every f32 batch is scanned for inf/NaN before it is stacked, issue #33) next to what the batch
 * costs anyway: the transforms that made it. Batches of 64 CIFAR-shaped images (32x32x3 u8 -> random
 * crop 32 pad 4, hflip, to_float, normalize, HWC->CHW: bench_data's chain) and of 64 Fashion-MNIST
 * ones (28x28x1 -> to_float, normalize); the scan is the pipeline's own function (src/data/
 * data_internal.h). One JSON line per shape: microseconds per batch for each, and the ratio.
 *
 *   bench_nonfinite [--reps R]
 *
 * Numbers are wall-clock medians on whatever else the machine is doing. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"
#include "tessera/tessera.h"

static void die(const char *what) {
  fprintf(stderr, "bench_nonfinite: %s: %s\n", what, ts_last_error());
  exit(1);
}
static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void one(const char *name, int h, int w, int ch, const ts_transform *tf, int ntf, int reps) {
  enum { B = 64 };
  ts_sample s[B];
  double tt[64], ts_[64];
  volatile int64_t sink = 0;
  if (reps > 64) reps = 64;
  for (int r = 0; r < reps; r++) {
    double t0 = ts_time_now();
    for (int i = 0; i < B; i++) {
      memset(&s[i], 0, sizeof s[i]);
      if (ts_tensor_init(&s[i].data, TS_U8, ts_shape3(h, w, ch))) die("tensor");
      uint8_t *p = s[i].data.data;
      for (int k = 0; k < h * w * ch; k++) p[k] = (uint8_t)(k * 7 + i * 13 + r);
      if (ts_transforms_apply(tf, ntf, &s[i], (uint64_t)(r * B + i))) die("transforms");
    }
    double t1 = ts_time_now();
    for (int i = 0; i < B; i++) sink += ts__first_nonfinite_f32(s[i].data.data, ts_tensor_numel(&s[i].data));
    double t2 = ts_time_now();
    tt[r] = t1 - t0, ts_[r] = t2 - t1;
    for (int i = 0; i < B; i++) ts_sample_free(&s[i]);
  }
  double a = median(tt, reps), c = median(ts_, reps);
  printf("{\"bench\":\"nonfinite\",\"batch\":\"64x%dx%dx%d %s\",\"transforms_us\":%.1f,\"check_us\":%.2f,"
         "\"check_over_transforms\":%.4f,\"sink\":%lld}\n", ch, h, w, name, 1e6 * a, 1e6 * c, c / a, (long long)sink);
}

int main(int argc, char **argv) {
  int reps = 31;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
  if (reps < 1) reps = 1;
  static const float mean3[3] = {0.4914f, 0.4822f, 0.4465f}, std3[3] = {0.2470f, 0.2435f, 0.2616f};
  static const float mean1[1] = {0.2860f}, std1[1] = {0.3530f};
  ts_transform cifar[5] = {ts_tf_random_crop(32, 32, 4), ts_tf_hflip(0.5f), ts_tf_to_float(1.0f / 255),
                           ts_tf_normalize(3, mean3, std3), ts_tf_hwc_to_chw()};
  ts_transform fm[2] = {ts_tf_to_float(1.0f / 255), ts_tf_normalize(1, mean1, std1)};
  one("cifar", 32, 32, 3, cifar, 5, reps);
  one("fashion-mnist", 28, 28, 1, fm, 2, reps);
  return 0;
}
