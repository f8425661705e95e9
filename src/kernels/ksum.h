/* Internal to kernels/: the one sum of a contiguous run of floats (a row of an (N,C) matrix, a
 * bias-gradient plane, a reduced segment). float partial sums, vectorised, flushed to a double
 * every TS__SUM_CHUNK elements: fast, and accurate over long rows. */
#ifndef TS_KERNELS_KSUM_H
#define TS_KERNELS_KSUM_H

#include <stdint.h>

#define TS__SUM_CHUNK 2048

static inline double ts__sum_run(const float *x, int64_t n) {
  double total = 0;
  for (int64_t j0 = 0; j0 < n; j0 += TS__SUM_CHUNK) {
    int64_t j1 = j0 + TS__SUM_CHUNK < n ? j0 + TS__SUM_CHUNK : n;
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = j0; j < j1; j++) s += x[j];
    total += s;
  }
  return total;
}

#endif
