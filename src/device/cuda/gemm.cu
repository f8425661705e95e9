// Batched GEMM with transposes and a bias epilogue, the correctness path of the GPU's matrix
// products (cuBLASLt is the fast path, reached at run time where it is found; this kernel is
// what the GPU runs without it and what it is checked against): c[b] = op(a[b]) op(b[b]) + bias,
// row-major, as src/kernels/matmul.h's ts__mm_desc describes (a_batched/b_batched 0: one matrix
// for every batch entry). f32 arithmetic on f32 or bf16 storage; each output element is summed
// by one thread in k order: deterministic. 64x64 tiles of c per block of 256 threads, 4x4 per
// thread, k in steps of 16 through shared memory.
#include "ts_cuda.h"

#define TM 64
#define TN 64
#define TK 16


template <typename TA, typename TC>
DEV void gemm(const TA *a, const TA *b, const TA *bias, TC *c, i64 M, i64 N, i64 K, int ta, int tb, int ab, int bb) {
  __shared__ float As[TK][TM + 4], Bs[TK][TN + 4];
  i64 z = bidz();
  const TA *A = a + (ab ? z * M * K : 0), *B = b + (bb ? z * K * N : 0);
  TC *C = c + z * M * N;
  i64 m0 = (i64)bidy() * TM, n0 = (i64)bid() * TN;
  int t = tid(), tr = t / 16, tc = t % 16; // this thread's 4x4: rows tr*4.., cols tc*4..
  float acc[4][4];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
  for (i64 k0 = 0; k0 < K; k0 += TK) {
    for (int e = t; e < TM * TK; e += 256) { // op(A) tile: (m, k)
      int mm = e / TK, kk = e % TK;
      i64 m = m0 + mm, k = k0 + kk;
      float v = 0.0f;
      if (m < M && k < K) v = ld(A, ta ? k * M + m : m * K + k);
      As[kk][mm] = v;
    }
    for (int e = t; e < TK * TN; e += 256) { // op(B) tile: (k, n)
      int kk = e / TN, nn = e % TN;
      i64 k = k0 + kk, n = n0 + nn;
      float v = 0.0f;
      if (k < K && n < N) v = ld(B, tb ? n * K + k : k * N + n);
      Bs[kk][nn] = v;
    }
    __syncthreads();
    for (int kk = 0; kk < TK; kk++) {
      float av[4], bv[4];
      for (int i = 0; i < 4; i++) av[i] = As[kk][tr * 4 + i];
      for (int j = 0; j < 4; j++) bv[j] = Bs[kk][tc * 4 + j];
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) {
      i64 m = m0 + tr * 4 + i, n = n0 + tc * 4 + j;
      if (m < M && n < N) st(C, m * N + n, acc[i][j] + (bias ? ld(bias, n) : 0.0f));
    }
}

// grid (ceil(N/64), ceil(M/64), batch), block 256
KERNEL ts_k_gemm_f32(const float *a, const float *b, const float *bias, float *c, i64 M, i64 N, i64 K, int ta, int tb,
                     int ab, int bb) {
  gemm(a, b, bias, c, M, N, K, ta, tb, ab, bb);
}
KERNEL ts_k_gemm_bf16(const bf16 *a, const bf16 *b, const bf16 *bias, bf16 *c, i64 M, i64 N, i64 K, int ta, int tb,
                      int ab, int bb) {
  gemm(a, b, bias, c, M, N, K, ta, tb, ab, bb);
}
// bf16 operands, f32 result (the matmul+cast fusion: a weight gradient into its f32 master)
KERNEL ts_k_gemm_bf16_f32(const bf16 *a, const bf16 *b, const bf16 *bias, float *c, i64 M, i64 N, i64 K, int ta,
                          int tb, int ab, int bb) {
  gemm(a, b, bias, c, M, N, K, ta, tb, ab, bb);
}
// the column sums of dy (R, C): a bias's gradient, each column summed over the rows in order
KERNEL ts_k_col_sum_f32(const float *x, i64 R, i64 C, float *y) {
  for (i64 j = gidx(); j < C; j += gstride()) {
    float s = 0.0f;
    for (i64 r = 0; r < R; r++) s += x[r * C + j];
    y[j] = s;
  }
}
KERNEL ts_k_col_sum_bf16(const bf16 *x, i64 R, i64 C, bf16 *y) {
  for (i64 j = gidx(); j < C; j += gstride()) {
    float s = 0.0f;
    for (i64 r = 0; r < R; r++) s += bf2f(x[r * C + j]);
    y[j] = f2bf(s);
  }
}
// c (rows, N) = bias (N) on every row: a GEMM's bias before cuBLAS adds the product (beta 1)
template <typename TB, typename TC>
DEV void fill_rows(const TB *bias, TC *c, i64 rows, i64 N) {
  i64 n = rows * N;
  for (i64 i = gidx(); i < n; i += gstride()) st(c, i, ld(bias, i % N));
}
KERNEL ts_k_fill_rows_f32(const float *bias, float *c, i64 rows, i64 N) { fill_rows(bias, c, rows, N); }
KERNEL ts_k_fill_rows_bf16(const bf16 *bias, bf16 *c, i64 rows, i64 N) { fill_rows(bias, c, rows, N); }
KERNEL ts_k_fill_rows_bf16_f32(const bf16 *bias, float *c, i64 rows, i64 N) { fill_rows(bias, c, rows, N); }
KERNEL ts_k_fill_rows_f16(const half16 *bias, half16 *c, i64 rows, i64 N) { fill_rows(bias, c, rows, N); }
