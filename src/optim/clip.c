/* Global-norm gradient clipping (torch.nn.utils.clip_grad_norm_ semantics, L2 norm) with a
 * reduction that is bitwise identical for any number of threads. */
#include <math.h>
#include <stdlib.h>

#include "tessera/optim.h"

#define CLIP_BLOCK 4096
#define CLIP_PAR_MIN 32768

static double block_sumsq(const float *restrict x, size_t n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
  return s;
}

double ts_sum_squares(const float *x, size_t n) {
  if (!x || n == 0) return 0.0;
  size_t nb = (n + CLIP_BLOCK - 1) / CLIP_BLOCK;
  double *part = nb > 1 ? malloc(nb * sizeof *part) : NULL;
  double s = 0;
  if (!part) { /* same block order, one thread */
    for (size_t b = 0; b < nb; b++) {
      size_t lo = b * CLIP_BLOCK;
      s += block_sumsq(x + lo, n - lo < CLIP_BLOCK ? n - lo : CLIP_BLOCK);
    }
    return s;
  }
#pragma omp parallel for if (n >= CLIP_PAR_MIN) schedule(static)
  for (size_t b = 0; b < nb; b++) {
    size_t lo = b * CLIP_BLOCK;
    part[b] = block_sumsq(x + lo, n - lo < CLIP_BLOCK ? n - lo : CLIP_BLOCK);
  }
  for (size_t b = 0; b < nb; b++) s += part[b];
  free(part);
  return s;
}

void ts_scale_f32(float *x, size_t n, float s) {
  if (!x) return;
#pragma omp parallel for simd if (n >= CLIP_PAR_MIN) schedule(static)
  for (size_t i = 0; i < n; i++) x[i] *= s;
}

float ts_clip_coef(float total_norm, float max_norm) {
  float c = max_norm / (total_norm + 1e-6f);
  return c < 1.0f || isnan(c) ? c : 1.0f;
}

int ts_clip_grad_norm(float *grads, size_t n, float max_norm, float *total_norm_out) {
  if (!grads && n) return ts_error_set(TS_EINVAL, "ts_clip_grad_norm: NULL grads");
  if (!(max_norm > 0))
    return ts_error_set(TS_EINVAL, "ts_clip_grad_norm: max_norm %g must be > 0", (double)max_norm);
  float total = (float)sqrt(ts_sum_squares(grads, n));
  if (total_norm_out) *total_norm_out = total;
  float c = ts_clip_coef(total, max_norm);
  if (c != 1.0f) ts_scale_f32(grads, n, c);
  return TS_OK;
}
