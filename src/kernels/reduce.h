/* Reductions (sum / mean / max over any set of axes), sum-to-shape and broadcast-to-shape,
 * and the backward of max (f32, contiguous).
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

#endif
