/* GEMMs through cuBLAS, loaded at run time like the driver (no CUDA install at build time): the
 * library is looked for as TESSERA_LIBCUBLAS, then libcublas.so.13, .12, .11 on the loader's path
 * (a PyTorch environment's nvidia/cublas/lib: put it on LD_LIBRARY_PATH, as scripts/gpu-check.sh
 * does). Row-major products are column-major ones transposed: c = op(a) op(b) is computed as
 * c^T = op(b)^T op(a)^T. f32 runs in real f32 (CUBLAS_COMPUTE_32F, no TF32, as PyTorch's default
 * for matmul) unless asked (float32_matmul_precision: high, ts__gpu_set_tf32: _FAST_TF32); bf16
 * with f32 accumulation. A bias is written into every row of c first and the
 * product added (beta 1). cuBLAS's results are bitwise repeatable on one GPU model with one stream
 * (its documented guarantee), so the plans stay deterministic. */
#include <dlfcn.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/cublas_abi.h"
#include "device/cuda_api.h"
#include "device/gpu_kernels.h"

enum { OP_N = TS__CUBLAS_OP_N, OP_T = TS__CUBLAS_OP_T, R_32F = TS__CUDA_R_32F, R_16BF = TS__CUDA_R_16BF, R_16F = TS__CUDA_R_16F };
enum { COMPUTE_32F = TS__CUBLAS_COMPUTE_32F, GEMM_DEFAULT = TS__CUBLAS_GEMM_DEFAULT };
typedef ts__cublas_status cublasStatus_t;

static ts__cublas_api cb;
static int cb_rc = 1;
static char cb_msg[400];
static pthread_once_t cb_once = PTHREAD_ONCE_INIT;

static void cb_load(void) {
  const char *env = getenv("TESSERA_LIBCUBLAS");
  const char *names[] = {env && *env ? env : NULL, "libcublas.so.13", "libcublas.so.12", "libcublas.so.11"};
  void *h = NULL;
  for (int i = 0; i < 4 && !h; i++)
    if (names[i]) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(cb_msg, sizeof cb_msg, "cuBLAS not found (libcublas.so.13/.12/.11 or TESSERA_LIBCUBLAS)");
    cb_rc = TS_EUNSUPPORTED;
    return;
  }
  static const ts__dl_sym want[] = {
#define F(field, sym) {#sym, offsetof(ts__cublas_api, field)},
      TS__CUBLAS_SYMBOLS(F)
#undef F
  };
  const char *miss = ts__dl_fill(h, want, sizeof want / sizeof want[0], &cb);
  if (miss) {
    snprintf(cb_msg, sizeof cb_msg, "cuBLAS lacks %s", miss);
    cb_rc = TS_EUNSUPPORTED;
    return;
  }
  cb_rc = TS_OK;
}

int ts__cublas_available(void) {
  pthread_once(&cb_once, cb_load);
  return cb_rc == TS_OK;
}

const char *ts__cublas_why(void) {
  pthread_once(&cb_once, cb_load);
  return cb_rc == TS_OK ? "" : cb_msg;
}

/* one handle per process (the GPU of this process), bound to the stream of each call */
static ts__cublas_handle handle;
static pthread_mutex_t hlock = PTHREAD_MUTEX_INITIALIZER;

int ts__cublas_gemm(ts__dev *d, const ts__mm_desc *m, ts_dtype ab_dt, ts_dtype c_dt, const void *a, const void *b,
                    const void *bias, void *c, ts__dev_stream *s) {
  CUstream stream = (CUstream)ts__cuda_stream(d, s);
  if (!ts__cublas_available()) return ts_error_set(TS_EUNSUPPORTED, "%s", cb_msg);
  int at = ab_dt == TS_F32 ? R_32F : ab_dt == TS_BF16 ? R_16BF : ab_dt == TS_F16 ? R_16F : -1;
  int ct = c_dt == TS_F32 ? R_32F : c_dt == TS_BF16 ? R_16BF : c_dt == TS_F16 ? R_16F : -1;
  if (at < 0 || ct < 0 || (ab_dt == TS_F32 && c_dt != TS_F32) || (ab_dt == TS_F16 && c_dt != TS_F16))
    return ts_error_set(TS_EDTYPE, "cuBLAS gemm: %s -> %s", ts_dtype_name(ab_dt), ts_dtype_name(c_dt));
  const int64_t M = m->M, N = m->N, K = m->K;
  if (M > 2147483647 || N > 2147483647 || K > 2147483647 || m->batch > 2147483647)
    return ts_error_set(TS_ERANGE, "cuBLAS gemm: %lld x %lld x %lld beyond 32-bit sizes", (long long)M, (long long)N,
                        (long long)K);
  int rc = TS_OK;
  float one = 1.0f, beta = 0.0f;
  if (bias) { /* every row of c = bias, then c += the product */
    const char *k = ab_dt == TS_F32    ? "ts_k_fill_rows_f32"
                    : ab_dt == TS_F16  ? "ts_k_fill_rows_f16"
                    : c_dt == TS_BF16  ? "ts_k_fill_rows_bf16"
                                       : "ts_k_fill_rows_bf16_f32";
    int64_t rows = m->batch * M;
    void *args[] = {&bias, &c, &rows, (void *)&N};
    int64_t n = rows * N, g = (n + 255) / 256;
    const unsigned grid[3] = {(unsigned)(g > 4096 ? 4096 : g < 1 ? 1 : g), 1, 1}, block[3] = {256, 1, 1};
    if ((rc = ts__cuda_launch(d, k, grid, block, 0, s, args, 4))) return rc;
    beta = 1.0f;
  }
  pthread_mutex_lock(&hlock);
  cublasStatus_t st = 0;
  if (!handle && (st = cb.Create(&handle))) {
    handle = NULL;
    pthread_mutex_unlock(&hlock);
    return ts_error_set(TS_EBACKEND, "cuBLAS: cublasCreate failed (status %d): a cuBLAS that does not match the "
                        "driver? (TESSERA_GPU_GEMM=tessera runs Tessera's own GEMM)", st);
  }
  if (!st) st = cb.SetStream(handle, stream);
  /* column-major: c^T (N x M, ld N) = op(b)^T (N x K) op(a)^T (K x M) */
  int opb = m->trans_b ? OP_T : OP_N, opa = m->trans_a ? OP_T : OP_N;
  int ldb = m->trans_b ? (int)K : (int)N, lda = m->trans_a ? (int)M : (int)K;
  long long sb = m->b_batched ? (long long)K * N : 0, sa = m->a_batched ? (long long)M * K : 0, sc = (long long)M * N;
  if (!st)
    st = cb.GemmStridedBatchedEx(handle, opb, opa, (int)N, (int)M, (int)K, &one, b, at, ldb, sb, a, at, lda, sa, &beta, c,
                                 ct, (int)N, sc, (int)m->batch,
                                 ab_dt == TS_F32 && ts__gpu_tf32() ? TS__CUBLAS_COMPUTE_32F_FAST_TF32 : COMPUTE_32F,
                                 GEMM_DEFAULT);
  pthread_mutex_unlock(&hlock);
  if (st)
    return ts_error_set(TS_EBACKEND, "cuBLAS gemm (batch %lld, %lld x %lld x %lld, trans %d%d, %s): status %d",
                        (long long)m->batch, (long long)M, (long long)N, (long long)K, m->trans_a, m->trans_b,
                        ts_dtype_name(ab_dt), st);
  return TS_OK;
}
