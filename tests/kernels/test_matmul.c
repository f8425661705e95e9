/* Matmul / dense kernels: reference vs a double-precision naive product, and oneDNN vs
 * reference, over random shapes (odd sizes, batch 1, every transpose combination, a shared
 * operand on either side). Tolerance: |a-b| <= 1e-4 * (1 + sqrt(K)) + 1e-4 |b| (inputs in
 * [-1,1), f32 accumulation in different orders). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul.h"
#include "kernels/dnnl_ctx.h"
#include "test_util.h"

/* c = op(a) op(b) in double. */
static void naive(const ts__mm_desc *d, const float *a, const float *b, float *c) {
  const int64_t M = d->M, N = d->N, K = d->K;
  for (int64_t i = 0; i < d->batch; i++) {
    const float *A = a + (d->a_batched ? i * M * K : 0);
    const float *B = b + (d->b_batched ? i * K * N : 0);
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        double s = 0;
        for (int64_t k = 0; k < K; k++) {
          double av = d->trans_a ? A[k * M + m] : A[m * K + k];
          double bv = d->trans_b ? B[n * K + k] : B[k * N + n];
          s += av * bv;
        }
        c[(i * M + m) * N + n] = (float)s;
      }
  }
}

static int case_no;

static void check_mm(int64_t batch, int64_t M, int64_t N, int64_t K, int ta, int tb, int ab,
                     int bb) {
  ts__mm_desc d = {batch, M, N, K, ta, tb, ab, bb};
  size_t na = (size_t)((ab ? batch : 1) * M * K), nb = (size_t)((bb ? batch : 1) * K * N);
  size_t nc = (size_t)(batch * M * N);
  float *a = malloc(na * 4), *b = malloc(nb * 4), *c0 = malloc(nc * 4), *c1 = malloc(nc * 4),
        *c2 = malloc(nc * 4);
  ts_test_fill(a, na, 100 + case_no, -1, 1);
  ts_test_fill(b, nb, 200 + case_no, -1, 1);
  case_no++;
  naive(&d, a, b, c0);
  memset(c1, 0xff, nc * 4); /* NaN garbage: kernels must overwrite every element */
  memset(c2, 0xff, nc * 4);
  CHECK_OK(ts__matmul_ref(&d, a, b, c1));
  CHECK_OK(ts__matmul_dnnl(&d, a, b, c2));
  double atol = 1e-4 * (1 + sqrt((double)K));
  char what[160];
  snprintf(what, sizeof what, "matmul ref vs naive B=%lld M=%lld N=%lld K=%lld ta=%d tb=%d ab=%d bb=%d",
           (long long)batch, (long long)M, (long long)N, (long long)K, ta, tb, ab, bb);
  CHECK_CLOSE(c1, c0, nc, atol, 1e-4, what);
  memcpy(what, "matmul dnnl vs naive", 20);
  CHECK_CLOSE(c2, c0, nc, atol, 1e-4, what);
  free(a), free(b), free(c0), free(c1), free(c2);
}

static void check_dense(int64_t M, int64_t N, int64_t K, int with_bias) {
  size_t nx = (size_t)(M * K), nw = (size_t)(N * K), ny = (size_t)(M * N);
  float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc((size_t)N * 4),
        *y0 = malloc(ny * 4), *y1 = malloc(ny * 4), *y2 = malloc(ny * 4);
  ts_test_fill(x, nx, 300 + case_no, -1, 1);
  ts_test_fill(w, nw, 400 + case_no, -1, 1);
  ts_test_fill(b, (size_t)N, 500 + case_no, -1, 1);
  case_no++;
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double s = with_bias ? b[n] : 0;
      for (int64_t k = 0; k < K; k++) s += (double)x[m * K + k] * w[n * K + k];
      y0[m * N + n] = (float)s;
    }
  memset(y1, 0xff, ny * 4);
  memset(y2, 0xff, ny * 4);
  CHECK_OK(ts__dense_ref(M, N, K, x, w, with_bias ? b : NULL, y1));
  CHECK_OK(ts__dense_dnnl(M, N, K, x, w, with_bias ? b : NULL, y2));
  double atol = 1e-4 * (1 + sqrt((double)K));
  CHECK_CLOSE(y1, y0, ny, atol, 1e-4, "dense ref vs naive");
  CHECK_CLOSE(y2, y0, ny, atol, 1e-4, "dense dnnl vs naive");
  free(x), free(w), free(b), free(y0), free(y1), free(y2);
}

int main(void) {
  int n_mm = 0;
  /* every transpose combination on odd sizes, 2-D */
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      check_mm(1, 7, 5, 3, ta, tb, 1, 1);
      check_mm(1, 1, 1, 1, ta, tb, 1, 1);
      check_mm(1, 33, 65, 130, ta, tb, 1, 1);
      n_mm += 3;
    }
  /* batched: equal batches, shared b (folds into one GEMM when !ta), shared a (broadcast) */
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      check_mm(4, 9, 11, 13, ta, tb, 1, 1);
      check_mm(3, 17, 6, 10, ta, tb, 1, 0);
      check_mm(5, 8, 19, 7, ta, tb, 0, 1);
      check_mm(2, 1, 3, 64, ta, tb, 1, 1);
      n_mm += 4;
    }
  check_mm(12, 16, 16, 32, 0, 1, 1, 1); /* attention-like */
  check_mm(1, 128, 96, 257, 0, 0, 1, 1);
  n_mm += 2;
  printf("matmul: %d shapes (all transposes, batch 1/2-12, shared a or b, odd sizes) "
         "ref and oneDNN vs double-precision naive\n", n_mm);

  check_dense(1, 1, 1, 1);
  check_dense(5, 7, 3, 1);
  check_dense(64, 10, 784, 1);
  check_dense(13, 31, 17, 0);
  check_dense(128, 96, 65, 1);
  printf("dense: 5 shapes with/without bias, ref and oneDNN vs naive\n");

  /* bad input: an error status and a message, never a crash */
  ts__mm_desc bad = {1, 0, 3, 4, 0, 0, 1, 1};
  float z[16] = {0};
  CHECK(ts__matmul_ref(&bad, z, z, z) == TS_EINVAL);
  CHECK(ts__matmul_dnnl(&bad, z, z, z) == TS_EINVAL);
  CHECK(strstr(ts_last_error(), "matmul") != NULL);
  ts__mm_desc badf = {1, 2, 2, 2, 2, 0, 1, 1};
  CHECK(ts__matmul_ref(&badf, z, z, z) == TS_EINVAL);
  ts__mm_desc ok = {1, 2, 2, 2, 0, 0, 1, 1};
  CHECK(ts__matmul_dnnl(&ok, NULL, z, z) == TS_EINVAL);
  CHECK(ts__dense_ref(2, -1, 2, z, z, NULL, z) == TS_EINVAL);
  CHECK(ts__dense_dnnl(2, 2, 2, z, NULL, NULL, z) == TS_EINVAL);
  CHECK(strstr(ts_last_error(), "dense") != NULL);
  printf("bad input: invalid sizes, flags, NULL buffers -> TS_EINVAL with op name\n");

  ts__dnnl_cache_clear();
  return ts_test_finish("test_matmul");
}
