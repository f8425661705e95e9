/* A stand-in for cuBLAS (libcublas.so) beside the stand-in driver (fake_cuda.c, whose "device
 * memory" is host memory), loaded through TESSERA_LIBCUBLAS by tests/device/test_device.c: the
 * four entry points src/device/cublas.c calls. cublasGemmStridedBatchedEx checks its arguments as
 * cuBLAS documents them (sizes, leading dimensions against the operations, types) and computes
 * the column-major product on the host, so the row-major <-> column-major mapping of cublas.c is
 * checked numerically on a machine without a GPU. */
#include <stdint.h>
#include <string.h>

#include "fake_bf16.h"

enum { OK = 0, NOT_INITIALIZED = 1, INVALID_VALUE = 7, NOT_SUPPORTED = 15 };
enum { R_32F = 0, R_16F = 2, R_16BF = 14, COMPUTE_32F = 68, COMPUTE_32F_FAST_TF32 = 77 };

static int handle_token;
int fake_cublas_calls;
int fake_cublas_last_compute; /* the compute type of the last GEMM */

int cublasCreate_v2(void **h) { *h = &handle_token; return OK; }
int cublasDestroy_v2(void *h) { return h == &handle_token ? OK : NOT_INITIALIZED; }
int cublasSetStream_v2(void *h, void *s) { (void)s; return h == &handle_token ? OK : NOT_INITIALIZED; }

static int kind(int t) { return t == R_16F ? FAKE_F16 : t == R_32F; }
static float ld(const void *p, int t, long long i) { return fake_ld(p, kind(t), i); }
/* f32 to TF32 (1 + 8 + 10 bits) as the tensor cores take it: round to nearest, ties away */
static float to_tf32(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  memcpy(&v, &u, 4);
  return v;
}
static void st(void *p, int t, long long i, float v) { fake_st(p, kind(t), i, v); }

int cublasGemmStridedBatchedEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A, int At,
                               int lda, long long sA, const void *B, int Bt, int ldb, long long sB, const void *beta,
                               void *C, int Ct, int ldc, long long sC, int batch, int compute, int algo) {
  (void)algo;
  if (h != &handle_token) return NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || batch < 0 || (ta != 0 && ta != 1) || (tb != 0 && tb != 1)) return INVALID_VALUE;
  if (lda < (ta ? (k > 1 ? k : 1) : (m > 1 ? m : 1)) || ldb < (tb ? (n > 1 ? n : 1) : (k > 1 ? k : 1)) ||
      ldc < (m > 1 ? m : 1))
    return INVALID_VALUE;
  if ((compute != COMPUTE_32F && !(compute == COMPUTE_32F_FAST_TF32 && At == R_32F)) || (At != R_32F && At != R_16BF && At != R_16F) ||
      At != Bt || (Ct != R_32F && Ct != At))
    return NOT_SUPPORTED;
  const int tf32 = compute == COMPUTE_32F_FAST_TF32; /* the operands rounded to TF32's 10-bit mantissa */
  float al = *(const float *)alpha, be = *(const float *)beta;
  for (int b = 0; b < batch; b++)
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) {
        float s = 0.0f;
        for (int l = 0; l < k; l++) {
          float x = ld(A, At, b * sA + (ta ? l + (long long)i * lda : i + (long long)l * lda));
          float y = ld(B, Bt, b * sB + (tb ? j + (long long)l * ldb : l + (long long)j * ldb));
          if (tf32) x = to_tf32(x), y = to_tf32(y);
          s += x * y;
        }
        long long o = b * sC + i + (long long)j * ldc;
        st(C, Ct, o, al * s + (be != 0.0f ? be * ld(C, Ct, o) : 0.0f));
      }
  fake_cublas_calls++;
  fake_cublas_last_compute = compute;
  return OK;
}
