// Reductions, deterministic: every block sums a fixed slice of the input in a fixed tree and
// writes its partial; a second launch of one block sums the partials the same way. The order
// depends only on the sizes and the launch shape (ts__gpu_sum picks both from n), never on
// timing: the same input gives the same bits run to run. CPU reference: src/kernels/reduce.c.
#include "ts_cuda.h"

// x (n) -> part (gridDim.x): each block's sum of the elements i = block + k * gridDim (strided),
// summed per thread in order, then the block's tree
KERNEL ts_k_sum_part_f32(const float *x, i64 n, float *part) {
  __shared__ float sh[32];
  float v = 0.0f;
  for (i64 i = gidx(); i < n; i += gstride()) v += x[i];
  v = block_sum(v, sh);
  if (tid() == 0) part[bid()] = v;
}
// sum of squares, the same way (global-norm clipping)
KERNEL ts_k_sumsq_part_f32(const float *x, i64 n, float *part) {
  __shared__ float sh[32];
  float v = 0.0f;
  for (i64 i = gidx(); i < n; i += gstride()) v += x[i] * x[i];
  v = block_sum(v, sh);
  if (tid() == 0) part[bid()] = v;
}
// rows: x (R, C) -> y (R) = each row's sum, one block per row (grid-stride over rows)
KERNEL ts_k_row_sum_f32(const float *x, i64 R, i64 C, float *y) {
  __shared__ float sh[32];
  for (i64 r = bid(); r < R; r += nbid()) {
    float v = 0.0f;
    for (i64 c = tid(); c < C; c += ntid()) v += x[r * C + c];
    v = block_sum(v, sh);
    if (tid() == 0) y[r] = v;
  }
}
// the non-finite check of loss scaling: flag[0] = 1 if any x is Inf or NaN (written only then:
// every writer writes the same 1, so the result does not depend on order)
KERNEL ts_k_nonfinite_f32(const float *x, i64 n, int *flag) {
  for (i64 i = gidx(); i < n; i += gstride()) {
    unsigned u = (unsigned)f2i(x[i]);
    if ((u & 0x7f800000u) == 0x7f800000u) flag[0] = 1;
  }
}
