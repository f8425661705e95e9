/* Data-movement kernels for the shape family: permute, concat, split, slice (and its zero-padding
 * backward), plain copies. Dtype-agnostic: they move elements of `esize` bytes (1, 2, 4 or 8;
 * other sizes fall back to memcpy per element). Row-major, contiguous. OpenMP-parallel above a
 * small size threshold. */
#ifndef TS_KERNELS_SHAPE_H
#define TS_KERNELS_SHAPE_H

#include <stddef.h>
#include <stdint.h>

/* Parallel memcpy of `bytes` (x and y must not overlap). */
int ts__copy_ref(const void *x, void *y, size_t bytes);
/* Parallel fill of y with zero bytes. */
int ts__zero_ref(void *y, size_t bytes);

/* x (dims[0..ndim-1]) -> y with y.dims[k] = dims[perm[k]]:
 * y[i_0..i_{n-1}] = x[j] where j_{perm[k]} = i_k. perm must be a permutation of 0..ndim-1. */
int ts__permute_ref(const void *x, void *y, size_t esize, int ndim, const int64_t *dims,
                    const int *perm);

/* n inputs xs[k] viewed as (outer, lens[k], inner) -> y (outer, sum lens, inner). */
int ts__concat_ref(const void *const *xs, const int64_t *lens, int n, void *y, size_t esize,
                   int64_t outer, int64_t inner);
/* x (outer, sum lens, inner) -> n outputs ys[k] (outer, lens[k], inner). */
int ts__split_ref(const void *x, void *const *ys, const int64_t *lens, int n, size_t esize,
                  int64_t outer, int64_t inner);

/* x (outer, len, inner) -> y (outer, end-start, inner) = x[:, start:end, :]. */
int ts__slice_ref(const void *x, void *y, size_t esize, int64_t outer, int64_t len, int64_t inner,
                  int64_t start, int64_t end);
/* dy (outer, end-start, inner) -> dx (outer, len, inner): dy placed at [start,end), zeros
 * elsewhere. */
int ts__slice_bwd_ref(const void *dy, void *dx, size_t esize, int64_t outer, int64_t len,
                      int64_t inner, int64_t start, int64_t end);

#endif
