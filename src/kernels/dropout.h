/* Dropout kernel: inverted dropout whose mask is regenerated, never stored.
 * Element i is kept iff ts_u32_to_unit(w) >= p, where
 *   w = ts_philox4x32(seed, step, (i / 64) * 16 + i % 16).v[(i / 16) % 4]
 * (blocks of 64 elements take the 4 words of 16 consecutive counters, which vectorises); kept
 * elements are scaled by 1/(1-p). The mask is a pure function of
 * (seed, step, i): the backward (dropout of dy with the same seed and step) reproduces it, and
 * any slice of a tensor can be processed independently given its element offset. */
#ifndef TS_KERNELS_DROPOUT_H
#define TS_KERNELS_DROPOUT_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/tensor.h"

/* Keep bit of element i (1 kept, 0 dropped). */
int ts__dropout_keep(uint64_t seed, uint64_t step, uint64_t i, float p);

/* x (n) f32 -> y (n): y[i] = keep(i) ? x[i]/(1-p) : 0, elements numbered from `offset`
 * (0 for a whole tensor). p in [0,1]: p = 0 copies, p = 1 zeroes. x may equal y. */
int ts__dropout_ref(const float *x, float *y, size_t n, float p, uint64_t seed, uint64_t step,
                    uint64_t offset);

/* The same on 16-bit x and y (dt TS_BF16 or TS_F16): the same mask, x/(1-p) computed in f32 and
 * rounded once; a native loop (16-bit reads and writes). */
int ts__dropout_lp(ts_dtype dt, const void *x, void *y, size_t n, float p, uint64_t seed,
                   uint64_t step, uint64_t offset);

#endif
