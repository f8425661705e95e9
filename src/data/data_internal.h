/* Private to the data layer and its benchmarks: the pipeline's non-finite check (pipeline.c),
 * which bench/bench_nonfinite.c times against a batch's transforms. Not installed. */
#ifndef TS_DATA_DATA_INTERNAL_H
#define TS_DATA_DATA_INTERNAL_H

#include <stdint.h>

/* The first element of x[0..n) that is inf or NaN, -1 if none: a branch-free scan of the exponent
 * bits in blocks of 64 (vectorised). Every f32 batch is scanned before it is stacked (issue #33). */
int64_t ts__first_nonfinite_f32(const float *x, int64_t n);

#endif
