// Broadcasting element-wise kernels: y = a (op) b with numpy broadcasting (ts_binary_alg: add,
// sub, mul, div), the sum of x over the dimensions y keeps as 1 (SUM_TO: a broadcast's
// gradient), y = alpha x + beta, fill. f32 arithmetic on f32 or bf16 storage. Shapes come as a
// struct by value: y's dims and each operand's strides (0 along a broadcast dimension).
// CPU reference: src/kernels/binary.c, src/kernels/reduce.c.
#include "ts_cuda.h"

#define MAXD 8
struct bshape {
  int nd;
  i64 dims[MAXD];      // y's
  i64 sa[MAXD], sb[MAXD]; // elements, 0 where the operand is broadcast
};


// (the host merges the dims both operands walk as one: same-shape operands come as one
// contiguous dim, taken without any index arithmetic)
template <typename T>
DEV void binary(int alg, const T *a, const T *b, T *y, bshape s, i64 n) {
  if (s.nd == 1 && s.sa[0] == 1 && s.sb[0] == 1) {
    for (i64 i = gidx(); i < n; i += gstride()) {
      float u = ld(a, i), v = ld(b, i);
      st(y, i, alg == 0 ? u + v : alg == 1 ? u - v : alg == 2 ? u * v : u / v);
    }
    return;
  }
  for (i64 i = gidx(); i < n; i += gstride()) {
    i64 r = i, ia = 0, ib = 0;
    for (int d = s.nd - 1; d >= 0; d--) {
      i64 c = r % s.dims[d];
      r /= s.dims[d];
      ia += c * s.sa[d];
      ib += c * s.sb[d];
    }
    float u = ld(a, ia), v = ld(b, ib);
    st(y, i, alg == 0 ? u + v : alg == 1 ? u - v : alg == 2 ? u * v : u / v);
  }
}
KERNEL ts_k_binary_f32(int alg, const float *a, const float *b, float *y, bshape s, i64 n) { binary(alg, a, b, y, s, n); }
KERNEL ts_k_binary_bf16(int alg, const bf16 *a, const bf16 *b, bf16 *y, bshape s, i64 n) { binary(alg, a, b, y, s, n); }

// REDUCE / SUM_TO: x (s.dims: x's shape) reduced into y where y's dims are 1 (s.sa: 0 along a
// reduced dimension; s.sb[0]: the x elements per y element); alg 0 sum, 1 mean, 2 max. Each y
// element is reduced by one thread over its x elements in index order. ix_of gives the x index of
// y element o's k-th element.
DEV i64 ix_of(const bshape &s, i64 o, i64 k) {
  i64 ro = o, rk = k, ix = 0, stride = 1;
  for (int d = s.nd - 1; d >= 0; d--) {
    i64 c;
    if (s.sa[d] == 0 && s.dims[d] > 1) { // reduced
      c = rk % s.dims[d];
      rk /= s.dims[d];
    } else {
      c = ro % s.dims[d];
      ro /= s.dims[d];
    }
    ix += c * stride;
    stride *= s.dims[d];
  }
  return ix;
}
template <typename T>
DEV void reduce(const T *x, T *y, bshape s, i64 ny, int alg) {
  i64 per = s.sb[0];
  for (i64 o = gidx(); o < ny; o += gstride()) {
    float acc = alg == 2 ? -3.402823466e38f : 0.0f;
    for (i64 k = 0; k < per; k++) {
      float v = ld(x, ix_of(s, o, k));
      acc = alg == 2 ? fmax_(acc, v) : acc + v;
    }
    st(y, o, alg == 1 ? acc / (float)per : acc);
  }
}
KERNEL ts_k_reduce_f32(const float *x, float *y, bshape s, i64 ny, int alg) { reduce(x, y, s, ny, alg); }

// The two layouts most reductions have, without ix_of's divisions per element (ts__gpu_reduce picks):
// columns: x (R, n) row-major reduced over its rows (a bias's gradient: dy (B T, N) -> (N)) in two
// steps: a block per (256 columns, chunk of L rows) reduces its columns over the chunk's rows in
// order into part (P, n), then each column's chunks in chunk order (the chunks from the shape only)
template <typename T> DEV void red_cols_part(const T *x, i64 R, i64 n, i64 L, i64 P, int alg, float *part) {
  for (i64 p = bidy(); p < P; p += nbidy())
    for (i64 j = gidx(); j < n; j += gstride()) {
      const i64 r1 = (p + 1) * L < R ? (p + 1) * L : R;
      float acc = alg == 2 ? -3.402823466e38f : 0.0f;
      for (i64 r = p * L; r < r1; r++) {
        float v = ld(x, r * n + j);
        acc = alg == 2 ? fmax_(acc, v) : acc + v;
      }
      part[p * n + j] = acc;
    }
}
template <typename T> DEV void red_cols_fold(const float *part, i64 R, i64 n, i64 P, int alg, T *y) {
  for (i64 j = gidx(); j < n; j += gstride()) {
    float acc = alg == 2 ? -3.402823466e38f : 0.0f;
    for (i64 p = 0; p < P; p++) acc = alg == 2 ? fmax_(acc, part[p * n + j]) : acc + part[p * n + j];
    st(y, j, alg == 1 ? acc / (float)R : acc);
  }
}
KERNEL ts_k_reduce_cols_part_f32(const float *x, i64 R, i64 n, i64 L, i64 P, int alg, float *part) {
  red_cols_part(x, R, n, L, P, alg, part);
}
KERNEL ts_k_reduce_cols_part_bf16(const bf16 *x, i64 R, i64 n, i64 L, i64 P, int alg, float *part) {
  red_cols_part(x, R, n, L, P, alg, part);
}
KERNEL ts_k_reduce_cols_fold_f32(const float *part, i64 R, i64 n, i64 P, int alg, float *y) {
  red_cols_fold(part, R, n, P, alg, y);
}
KERNEL ts_k_reduce_cols_fold_bf16(const float *part, i64 R, i64 n, i64 P, int alg, bf16 *y) {
  red_cols_fold(part, R, n, P, alg, y);
}
// rows: x (ny, per) row-major reduced over each row's per elements: a warp per row, each lane over
// elements lane, lane + 32, ..., then the lanes in a fixed tree
template <typename T> DEV void red_rows(const T *x, T *y, i64 ny, i64 per, int alg) {
  const i64 nw = (i64)nbid() * (ntid() >> 5);
  const int lane = tid() & 31;
  for (i64 o = (i64)bid() * (ntid() >> 5) + (tid() >> 5); o < ny; o += nw) {
    float acc = alg == 2 ? -3.402823466e38f : 0.0f;
    for (i64 k = lane; k < per; k += 32) {
      float v = ld(x, o * per + k);
      acc = alg == 2 ? fmax_(acc, v) : acc + v;
    }
    acc = alg == 2 ? warp_max(acc) : warp_sum(acc);
    if (lane == 0) st(y, o, alg == 1 ? acc / (float)per : acc);
  }
}
KERNEL ts_k_reduce_rows_f32(const float *x, float *y, i64 ny, i64 per, int alg) { red_rows(x, y, ny, per, alg); }
KERNEL ts_k_reduce_rows_bf16(const bf16 *x, bf16 *y, i64 ny, i64 per, int alg) { red_rows(x, y, ny, per, alg); }

KERNEL ts_k_reduce_bf16(const bf16 *x, bf16 *y, bshape s, i64 ny, int alg) { reduce(x, y, s, ny, alg); }
// max's backward: dx = dy * (x == y) / (ties in the group), one thread per y element writing its group
template <typename T>
DEV void max_bwd(const T *dy, const T *x, const T *y, T *dx, bshape s, i64 ny) {
  i64 per = s.sb[0];
  for (i64 o = gidx(); o < ny; o += gstride()) {
    float m = ld(y, o), g = ld(dy, o), ties = 0.0f;
    for (i64 k = 0; k < per; k++) ties += ld(x, ix_of(s, o, k)) == m ? 1.0f : 0.0f;
    for (i64 k = 0; k < per; k++) {
      i64 ix = ix_of(s, o, k);
      st(dx, ix, ld(x, ix) == m ? g / ties : 0.0f);
    }
  }
}
KERNEL ts_k_reduce_max_bwd_f32(const float *dy, const float *x, const float *y, float *dx, bshape s, i64 ny) {
  max_bwd(dy, x, y, dx, s, ny);
}
KERNEL ts_k_reduce_max_bwd_bf16(const bf16 *dy, const bf16 *x, const bf16 *y, bf16 *dx, bshape s, i64 ny) {
  max_bwd(dy, x, y, dx, s, ny);
}
// BROADCAST_TO: y (s.dims) from x with strides s.sa (0 along a broadcast dimension)
template <typename T> DEV void bcast(const T *x, T *y, bshape s, i64 n) {
  for (i64 i = gidx(); i < n; i += gstride()) {
    i64 r = i, ix = 0;
    for (int d = s.nd - 1; d >= 0; d--) {
      ix += (r % s.dims[d]) * s.sa[d];
      r /= s.dims[d];
    }
    y[i] = x[ix];
  }
}
KERNEL ts_k_broadcast_f32(const float *x, float *y, bshape s, i64 n) { bcast(x, y, s, n); }
KERNEL ts_k_broadcast_bf16(const bf16 *x, bf16 *y, bshape s, i64 n) { bcast(x, y, s, n); }

// y (n) = alpha x + beta
KERNEL ts_k_scale_f32(const float *x, float *y, i64 n, float alpha, float beta) {
  for (i64 i = gidx(); i < n; i += gstride()) y[i] = alpha * x[i] + beta;
}
KERNEL ts_k_scale_bf16(const bf16 *x, bf16 *y, i64 n, float alpha, float beta) {
  for (i64 i = gidx(); i < n; i += gstride()) y[i] = f2bf(alpha * bf2f(x[i]) + beta);
}
KERNEL ts_k_fill_bf16(bf16 *y, float v, i64 n) {
  bf16 h = f2bf(v);
  for (i64 i = gidx(); i < n; i += gstride()) y[i] = h;
}
KERNEL ts_k_fill_f16(unsigned short *y, float v, i64 n) {
  const unsigned short h = f2h(v);
  for (i64 i = gidx(); i < n; i += gstride()) y[i] = h;
}
// the rows whose label is not ignore_index (softmax_ce's backward), one block: count[0]
KERNEL ts_k_label_count(const void *labels, int i64l, i64 N, i64 ignore, float *count) {
  __shared__ float sh[32];
  float k = 0.0f;
  for (i64 r = tid(); r < N; r += ntid()) {
    i64 y = i64l ? ((const i64 *)labels)[r] : (i64)((const int *)labels)[r];
    k += y != ignore ? 1.0f : 0.0f;
  }
  k = block_sum(k, sh);
  if (tid() == 0) count[0] = k;
}
