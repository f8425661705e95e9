// Shape kernels on elements of 2, 4 or 8 bytes (any dtype of that size): a permutation of up to
// 8 dimensions, and the block copy that concat, split, slice and slice's backward are made of
// (rows of `len` elements, from a row stride to another, at an offset). CPU reference:
// src/kernels/shape.c.
#include "ts_cuda.h"

#define MAXD 8
struct pshape {
  int nd;
  i64 ydims[MAXD]; // the output's dims
  i64 xs[MAXD];    // the input's stride (elements) along each output dim
};

template <typename E> DEV void permute(const E *x, E *y, pshape s, i64 n) {
  for (i64 i = gidx(); i < n; i += gstride()) {
    i64 r = i, ix = 0;
    for (int d = s.nd - 1; d >= 0; d--) {
      ix += (r % s.ydims[d]) * s.xs[d];
      r /= s.ydims[d];
    }
    y[i] = x[ix];
  }
}
KERNEL ts_k_permute_1(const unsigned char *x, unsigned char *y, pshape s, i64 n) { permute(x, y, s, n); }
KERNEL ts_k_permute_2(const unsigned short *x, unsigned short *y, pshape s, i64 n) { permute(x, y, s, n); }
KERNEL ts_k_permute_4(const unsigned *x, unsigned *y, pshape s, i64 n) { permute(x, y, s, n); }
KERNEL ts_k_permute_8(const unsigned long long *x, unsigned long long *y, pshape s, i64 n) { permute(x, y, s, n); }

// rows (rows of len elements): y[r * ystride + yoff + c] = x[r * xstride + xoff + c]
template <typename E> DEV void blocks(const E *x, i64 xstride, i64 xoff, E *y, i64 ystride, i64 yoff, i64 rows, i64 len) {
  i64 n = rows * len;
  for (i64 i = gidx(); i < n; i += gstride()) {
    i64 r = i / len, c = i % len;
    y[r * ystride + yoff + c] = x[r * xstride + xoff + c];
  }
}
KERNEL ts_k_blocks_2(const unsigned short *x, i64 xs, i64 xo, unsigned short *y, i64 ys, i64 yo, i64 rows, i64 len) {
  blocks(x, xs, xo, y, ys, yo, rows, len);
}
KERNEL ts_k_blocks_4(const unsigned *x, i64 xs, i64 xo, unsigned *y, i64 ys, i64 yo, i64 rows, i64 len) {
  blocks(x, xs, xo, y, ys, yo, rows, len);
}
KERNEL ts_k_blocks_8(const unsigned long long *x, i64 xs, i64 xo, unsigned long long *y, i64 ys, i64 yo, i64 rows,
                     i64 len) {
  blocks(x, xs, xo, y, ys, yo, rows, len);
}
