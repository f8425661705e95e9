/* Causal attention kernels: fused blocked (dnnl_sgemm) forward and backward against the naive
 * double-accumulating reference, for both layouts, with T not a multiple of the 64-row block,
 * T = 1, and one (b,h) with more threads than heads; the packed q|k|v layout; the reference itself against a direct
 * softmax computed here; and the reference backward against central differences in double. */
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "test_util.h"

static float *randn(size_t n, uint64_t seed, float lo, float hi) {
  float *p = malloc(n * sizeof(float));
  ts_test_fill(p, n, seed, lo, hi);
  return p;
}

static void compare_case(int64_t B, int64_t H, int64_t T, int64_t D, int layout) {
  size_t n = (size_t)(B * H * T * D), nl = (size_t)(B * H * T);
  float scale = 1.0f / sqrtf((float)D);
  float *q = randn(n, 1, -2, 2), *k = randn(n, 2, -2, 2), *v = randn(n, 3, -1, 1);
  float *dout = randn(n, 4, -1, 1);
  float *o1 = malloc(n * 4), *o2 = malloc(n * 4), *l1 = malloc(nl * 4), *l2 = malloc(nl * 4);
  float *g1[3], *g2[3];
  for (int j = 0; j < 3; j++) {
    g1[j] = malloc(n * 4);
    g2[j] = malloc(n * 4);
    memset(g2[j], 0xff, n * 4); /* NaN garbage: the kernel must overwrite */
  }
  CHECK_OK(ts__attention_fwd_ref(q, k, v, o1, l1, B, H, T, D, scale, layout));
  CHECK_OK(ts__attention_fwd_dnnl(q, k, v, o2, l2, B, H, T, D, scale, layout));
  char what[96];
  snprintf(what, sizeof what, "o (%lld,%lld,%lld,%lld) layout %d", (long long)B, (long long)H,
           (long long)T, (long long)D, layout);
  CHECK_CLOSE(o2, o1, n, 1e-5, 1e-4, what);
  CHECK_CLOSE(l2, l1, nl, 1e-5, 1e-5, "lse");
  CHECK_OK(ts__attention_bwd_ref(dout, q, k, v, o1, l1, g1[0], g1[1], g1[2], B, H, T, D, scale, layout));
  CHECK_OK(ts__attention_bwd_dnnl(dout, q, k, v, o2, l2, g2[0], g2[1], g2[2], B, H, T, D, scale, layout));
  const char *nm[3] = {"dq", "dk", "dv"};
  for (int j = 0; j < 3; j++) CHECK_CLOSE(g2[j], g1[j], n, 2e-5, 1e-3, nm[j]);
  free(q); free(k); free(v); free(dout); free(o1); free(o2); free(l1); free(l2);
  for (int j = 0; j < 3; j++) {
    free(g1[j]);
    free(g2[j]);
  }
}

/* Packed q|k|v (B,T,3C) layout, both kernels, against the (B,H,T,D) reference on unpacked
 * copies (an independent check of the strides). */
static void compare_packed(int64_t B, int64_t H, int64_t T, int64_t D) {
  int64_t C = H * D;
  size_t n = (size_t)(B * T * C), nl = (size_t)(B * H * T);
  float scale = 1.0f / sqrtf((float)D);
  float *qkv = randn(3 * n, 31, -2, 2), *dout = randn(n, 32, -1, 1);
  float *x[3], *g[3], *ob = malloc(n * 4), *lb = malloc(nl * 4), *dob = malloc(n * 4);
  for (int j = 0; j < 3; j++) x[j] = malloc(n * 4), g[j] = malloc(n * 4);
  /* unpack: x[j][b,h,t,d] = qkv[b,t, j*C + h*D + d]; do likewise */
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t t = 0; t < T; t++)
        for (int64_t d = 0; d < D; d++) {
          size_t u = (size_t)(((b * H + h) * T + t) * D + d);
          for (int j = 0; j < 3; j++) x[j][u] = qkv[(b * T + t) * 3 * C + j * C + h * D + d];
          dob[u] = dout[(b * T + t) * C + h * D + d];
        }
  CHECK_OK(ts__attention_fwd_ref(x[0], x[1], x[2], ob, lb, B, H, T, D, scale, TS_ATTN_BHTD));
  CHECK_OK(ts__attention_bwd_ref(dob, x[0], x[1], x[2], ob, lb, g[0], g[1], g[2], B, H, T, D, scale, TS_ATTN_BHTD));
  for (int fused = 0; fused < 2; fused++) {
    float *o = malloc(n * 4), *l = malloc(nl * 4), *dqkv = malloc(3 * n * 4);
    memset(dqkv, 0xff, 3 * n * 4);
    int (*fwd)(const float *, const float *, const float *, float *, float *, int64_t, int64_t,
               int64_t, int64_t, float, int) = fused ? ts__attention_fwd_dnnl : ts__attention_fwd_ref;
    int (*bwd)(const float *, const float *, const float *, const float *, const float *,
               const float *, float *, float *, float *, int64_t, int64_t, int64_t, int64_t, float,
               int) = fused ? ts__attention_bwd_dnnl : ts__attention_bwd_ref;
    CHECK_OK(fwd(qkv, qkv + C, qkv + 2 * C, o, l, B, H, T, D, scale, TS_ATTN_QKV));
    CHECK_OK(bwd(dout, qkv, qkv + C, qkv + 2 * C, o, l, dqkv, dqkv + C, dqkv + 2 * C, B, H, T, D,
                 scale, TS_ATTN_QKV));
    /* repack the reference results */
    float *oref = malloc(n * 4), *gref = malloc(3 * n * 4);
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t t = 0; t < T; t++)
          for (int64_t d = 0; d < D; d++) {
            size_t u = (size_t)(((b * H + h) * T + t) * D + d);
            oref[(b * T + t) * C + h * D + d] = ob[u];
            for (int j = 0; j < 3; j++) gref[(b * T + t) * 3 * C + j * C + h * D + d] = g[j][u];
          }
    CHECK_CLOSE(o, oref, n, 1e-5, 1e-4, fused ? "packed o (fused)" : "packed o (ref)");
    CHECK_CLOSE(l, lb, nl, 1e-5, 1e-5, "packed lse");
    CHECK_CLOSE(dqkv, gref, 3 * n, 2e-5, 1e-3, fused ? "packed dqkv (fused)" : "packed dqkv (ref)");
    free(o); free(l); free(dqkv); free(oref); free(gref);
  }
  for (int j = 0; j < 3; j++) free(x[j]), free(g[j]);
  free(qkv); free(dout); free(ob); free(lb); free(dob);
}

/* the reference against an independent softmax for one row */
static void test_reference_row(void) {
  int64_t T = 5, D = 3;
  float *q = randn((size_t)(T * D), 11, -1, 1), *k = randn((size_t)(T * D), 12, -1, 1),
        *v = randn((size_t)(T * D), 13, -1, 1);
  float o[15], l[5];
  CHECK_OK(ts__attention_fwd_ref(q, k, v, o, l, 1, 1, T, D, 0.7f, TS_ATTN_BHTD));
  int64_t i = 3;
  double s[5], mx = -1e30, sum = 0;
  for (int64_t j = 0; j <= i; j++) {
    s[j] = 0;
    for (int64_t c = 0; c < D; c++) s[j] += (double)q[i * D + c] * k[j * D + c];
    s[j] *= 0.7;
    if (s[j] > mx) mx = s[j];
  }
  for (int64_t j = 0; j <= i; j++) sum += exp(s[j] - mx);
  for (int64_t c = 0; c < D; c++) {
    double oc = 0;
    for (int64_t j = 0; j <= i; j++) oc += exp(s[j] - mx) / sum * v[j * D + c];
    CHECK(fabs(oc - o[i * D + c]) < 1e-6);
  }
  CHECK(fabs(mx + log(sum) - l[i]) < 1e-5);
  /* row 0 attends only to key 0 */
  for (int64_t c = 0; c < D; c++) CHECK(fabs(o[c] - v[c]) < 1e-6);
  free(q); free(k); free(v);
}

/* double-precision forward loss L = sum(w * o) for the finite-difference check */
static double loss_d(const double *q, const double *k, const double *v, const double *w,
                     int64_t T, int64_t D, double scale) {
  double L = 0;
  for (int64_t i = 0; i < T; i++) {
    double s[16], mx = -1e300, sum = 0;
    for (int64_t j = 0; j <= i; j++) {
      s[j] = 0;
      for (int64_t c = 0; c < D; c++) s[j] += q[i * D + c] * k[j * D + c];
      s[j] *= scale;
      if (s[j] > mx) mx = s[j];
    }
    for (int64_t j = 0; j <= i; j++) sum += exp(s[j] - mx);
    for (int64_t c = 0; c < D; c++) {
      double oc = 0;
      for (int64_t j = 0; j <= i; j++) oc += exp(s[j] - mx) / sum * v[j * D + c];
      L += w[i * D + c] * oc;
    }
  }
  return L;
}

static void test_fd(void) {
  enum { T = 7, D = 4, N = T * D };
  float scale = 0.6f;
  float *qf = randn(N, 21, -1, 1), *kf = randn(N, 22, -1, 1), *vf = randn(N, 23, -1, 1),
        *wf = randn(N, 24, -1, 1);
  float o[N], l[T], g[3][N];
  CHECK_OK(ts__attention_fwd_dnnl(qf, kf, vf, o, l, 1, 1, T, D, scale, TS_ATTN_BHTD));
  CHECK_OK(ts__attention_bwd_dnnl(wf, qf, kf, vf, o, l, g[0], g[1], g[2], 1, 1, T, D, scale, TS_ATTN_BHTD));
  double x[3][N], w[N];
  for (int i = 0; i < N; i++) {
    x[0][i] = qf[i]; x[1][i] = kf[i]; x[2][i] = vf[i]; w[i] = wf[i];
  }
  double worst = 0;
  for (int a = 0; a < 3; a++)
    for (int i = 0; i < N; i++) {
      double h = 1e-5, keep = x[a][i];
      x[a][i] = keep + h;
      double lp = loss_d(x[0], x[1], x[2], w, T, D, scale);
      x[a][i] = keep - h;
      double lm = loss_d(x[0], x[1], x[2], w, T, D, scale);
      x[a][i] = keep;
      double fd = (lp - lm) / (2 * h), err = fabs(fd - g[a][i]) / (1e-4 + fabs(fd));
      if (err > worst) worst = err;
      CHECK_MSG(err < 1e-3, "fd input %d elem %d: fd %.7g kernel %.7g", a, i, fd, (double)g[a][i]);
    }
  printf("fused backward vs central differences in double: worst rel err %.2e\n", worst);
  free(qf); free(kf); free(vf); free(wf);
}

int main(void) {
  test_reference_row();
  compare_case(2, 3, 37, 16, TS_ATTN_BHTD);
  compare_case(2, 3, 37, 16, TS_ATTN_BTHD);
  compare_case(1, 2, 130, 64, TS_ATTN_BHTD); /* three blocks, ragged last */
  compare_case(2, 2, 129, 24, TS_ATTN_BTHD);
  compare_case(1, 1, 200, 32, TS_ATTN_BHTD); /* one head: backward runs sgemm multi-threaded */
  compare_case(3, 1, 1, 8, TS_ATTN_BHTD);    /* T = 1 */
  printf("attention fused vs naive: o, lse, dq, dk, dv for 6 shapes (both layouts)\n");
  compare_packed(2, 3, 37, 16);
  compare_packed(1, 2, 100, 8);
  printf("packed q|k|v layout (fused and naive) vs unpacked naive: 2 shapes\n");
  test_fd();
  /* bad arguments give a status, not a crash */
  float z[4];
  CHECK(ts__attention_fwd_dnnl(z, z, z, z, z, 1, 1, 1, 4, 1.0f, 7) == TS_EINVAL);
  CHECK(ts__attention_fwd_ref(z, z, z, z, z, -1, 1, 1, 4, 1.0f, 0) == TS_EINVAL);
  return ts_test_finish("test_attention");
}
