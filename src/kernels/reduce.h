/* Reductions (sum / mean / max over any set of axes), sum-to-shape and broadcast-to-shape,
 * and the backward of max (f32 and 16-bit, contiguous).
 *
 * Reduced shapes are given in "keepdim" form: ys has ndim <= xs.ndim (missing leading dims
 * count as 1, as in NumPy) and each dim equals x's or is 1; dims where ys is 1 and xs is not are
 * reduced. This one form serves REDUCE (any axes), SUM_TO (down to a broadcast-compatible
 * shape) and their gradients. */
#ifndef TS_KERNELS_REDUCE_H
#define TS_KERNELS_REDUCE_H

#include <stdint.h>
#include "tessera/tensor.h"

/* alg: ts_reduce_alg (SUM=0 MEAN=1 MAX=2). Sums accumulate in double over contiguous runs;
 * results are deterministic for a fixed thread count. */
// x (xs) -> y (ys, keepdim form)
int ts__reduce_ref(int alg, const float *x, const ts_shape *xs, float *y, const ts_shape *ys);
/* oneDNN reduction primitive (sum, mean, max). */
int ts__reduce_dnnl(int alg, const float *x, const ts_shape *xs, float *y, const ts_shape *ys);
// x (xs) -> y (ys): x broadcast up to ys (NumPy rules)
int ts__broadcast_ref(const float *x, const ts_shape *xs, float *y, const ts_shape *ys);
/* Gradient of max: ties share the gradient equally (like torch.amax):
 *   dx = dy * (x == y) / #{ties} */
// dy (ys), x (xs), y (ys) -> dx (xs)
int ts__reduce_max_bwd_ref(const float *dy, const float *x, const ts_shape *xs, const float *y,
                           const ts_shape *ys, float *dx);

/* 16-bit variants: every float tensor of dtype dt (TS_BF16, TS_F16; TS_F32 calls the f32 kernel),
 * native loops on 16-bit memory (no f32 copies of the tensors). Reductions widen what they read
 * into L1-sized f32 buffers for the f32 engine's helpers and round each output once: the f32
 * results on the widened inputs, rounded (sums accumulate as the f32 kernel's). broadcast_to
 * moves 16-bit elements. max_bwd runs the f32 kernel's steps (tie mask, f32 tie counts,
 * dy / count, times the mask) on 16-bit memory, dx rounded once. */
// x (xs) dt -> y (ys, keepdim form) dt
int ts__reduce_lp(int alg, ts_dtype dt, const void *x, const ts_shape *xs, void *y, const ts_shape *ys);
// x (xs) dt -> y (ys) dt
int ts__broadcast_lp(ts_dtype dt, const void *x, const ts_shape *xs, void *y, const ts_shape *ys);
// dy (ys) dt, x (xs) dt, y (ys) dt -> dx (xs) dt
int ts__reduce_max_bwd_lp(ts_dtype dt, const void *dy, const void *x, const ts_shape *xs, const void *y,
                          const ts_shape *ys, void *dx);

#endif
