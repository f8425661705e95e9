/* Softmax / log-softmax kernels: reference vs double formula and vs oneDNN (last and middle
 * axes); backward vs finite differences; fused cross-entropy vs a double implementation of
 * PyTorch's CrossEntropyLoss(ignore_index=-100, label_smoothing=s), its gradient vs finite
 * differences, label validation; evaluation's per-row metrics and their GPU finishing. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/softmax.h"
#include "test_util.h"

/* double softmax of x (outer,len,inner) along len */
static void sm64(const float *x, double *y, int64_t outer, int64_t len, int64_t inner, int log_) {
  for (int64_t o = 0; o < outer; o++)
    for (int64_t c = 0; c < inner; c++) {
      const float *p = x + o * len * inner + c;
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < len; j++) m = p[j * inner] > m ? p[j * inner] : m;
      for (int64_t j = 0; j < len; j++) s += exp(p[j * inner] - m);
      for (int64_t j = 0; j < len; j++) {
        double v = p[j * inner] - m;
        y[o * len * inner + j * inner + c] = log_ ? v - log(s) : exp(v) / s;
      }
    }
}

static void test_softmax(int64_t outer, int64_t len, int64_t inner, int log_) {
  int64_t n = outer * len * inner;
  float *x = malloc(4 * n), *y = malloc(4 * n), *y2 = malloc(4 * n), *yd = malloc(4 * n),
        *dy = malloc(4 * n), *dx = malloc(4 * n), *dx2 = malloc(4 * n), *dxd = malloc(4 * n);
  double *t = malloc(8 * n), *tp = malloc(8 * n), *tm = malloc(8 * n);
  char what[160];
  ts_test_fill(x, n, 1 + len, -4, 4);
  ts_test_fill(dy, n, 2 + len, -1, 1);
  sm64(x, t, outer, len, inner, log_);
  for (int64_t i = 0; i < n; i++) yd[i] = (float)t[i];
  CHECK_OK(ts__softmax_fwd_ref(x, y, outer, len, inner, log_));
  snprintf(what, sizeof what, "%s (%lld,%lld,%lld) ref vs double", log_ ? "log_softmax" : "softmax",
           (long long)outer, (long long)len, (long long)inner);
  CHECK_CLOSE(y, yd, n, 1e-6, 1e-5, what);
  CHECK_OK(ts__softmax_fwd_dnnl(x, y2, outer, len, inner, log_));
  strcat(what, " [oneDNN]");
  CHECK_CLOSE(y2, yd, n, 1e-5, 1e-5, what); /* oneDNN's log is approximate to ~1e-6 */
  /* backward: finite differences of L = sum dy*y in double, on a few inputs (all when small) */
  CHECK_OK(ts__softmax_bwd_ref(dy, y, dx, outer, len, inner, log_));
  CHECK_OK(ts__softmax_bwd_dnnl(dy, y, dx2, outer, len, inner, log_));
  int64_t step = n > 400 ? n / 97 : 1;
  int bad = 0;
  for (int64_t i = 0; i < n; i += step) {
    float *xx = malloc(4 * n);
    memcpy(xx, x, 4 * n);
    double h = 1e-3;
    xx[i] = x[i] + (float)h;
    sm64(xx, tp, outer, len, inner, log_);
    xx[i] = x[i] - (float)h;
    sm64(xx, tm, outer, len, inner, log_);
    double hh = ((double)(x[i] + (float)h) - (double)(x[i] - (float)h));
    double g = 0;
    for (int64_t k = 0; k < n; k++) g += dy[k] * (tp[k] - tm[k]);
    g /= hh;
    if (fabs(g - dx[i]) > 1e-4 + 1e-3 * fabs(g)) bad++;
    free(xx);
  }
  CHECK_MSG(bad == 0, "%s backward: %d elements off vs finite differences", what, bad);
  snprintf(what, sizeof what, "%s bwd oneDNN vs ref", log_ ? "log_softmax" : "softmax");
  CHECK_CLOSE(dx2, dx, n, 1e-6, 1e-5, what);
  free(x), free(y), free(y2), free(yd), free(dy), free(dx), free(dx2), free(dxd), free(t), free(tp),
      free(tm);
}

/* PyTorch CrossEntropyLoss(ignore_index=-100, label_smoothing=s, reduction='mean') in double */
static double ce64(const float *x, const int64_t *lab, int64_t N, int64_t C, double s) {
  double tot = 0;
  int64_t cnt = 0;
  for (int64_t i = 0; i < N; i++) {
    if (lab[i] == -100) continue;
    const float *p = x + i * C;
    double m = -INFINITY, z = 0, sumlp = 0;
    for (int64_t j = 0; j < C; j++) m = p[j] > m ? p[j] : m;
    for (int64_t j = 0; j < C; j++) z += exp(p[j] - m);
    double lse = m + log(z);
    for (int64_t j = 0; j < C; j++) sumlp += p[j] - lse;
    tot += (1 - s) * (lse - p[lab[i]]) - s / C * sumlp;
    cnt++;
  }
  return cnt ? tot / cnt : 0;
}

static void test_ce(int64_t N, int64_t C, float s, int use_i64) {
  float *x = malloc(4 * N * C), *dx = malloc(4 * N * C), *dx2 = malloc(4 * N * C), *lse = malloc(4 * N);
  int64_t *l64 = malloc(8 * N);
  int32_t *l32 = malloc(4 * N);
  ts_test_fill(x, N * C, 11 + C, -5, 5);
  for (int64_t i = 0; i < N; i++) {
    l64[i] = (int64_t)(ts_rng_uniform_at(99, i) * C);
    if (i % 5 == 3) l64[i] = -100;
    l32[i] = (int32_t)l64[i];
  }
  const void *lab = use_i64 ? (const void *)l64 : (const void *)l32;
  float loss = 0, loss2 = 0;
  CHECK_OK(ts__softmax_ce_fwd_ref(x, lab, use_i64, N, C, s, -100, &loss, lse));
  CHECK_OK(ts__softmax_ce_fwd_ref(x, lab, use_i64, N, C, s, -100, &loss2, NULL));
  double ref = ce64(x, l64, N, C, s);
  CHECK_MSG(fabs(loss - ref) <= 1e-6 + 1e-5 * fabs(ref), "CE (%lld,%lld) s=%g: %.8g vs %.8g",
            (long long)N, (long long)C, s, loss, ref);
  CHECK(loss == loss2);
  float dl = 1.7f;
  CHECK_OK(ts__softmax_ce_bwd_ref(dl, x, lab, use_i64, lse, N, C, s, -100, dx));
  CHECK_OK(ts__softmax_ce_bwd_ref(dl, x, lab, use_i64, NULL, N, C, s, -100, dx2));
  CHECK_CLOSE(dx2, dx, N * C, 1e-7, 1e-5, "CE bwd with saved lse vs recomputed");
  int64_t n = N * C, step = n > 300 ? n / 61 : 1;
  int bad = 0;
  for (int64_t i = 0; i < n; i += step) {
    float keep = x[i];
    double h = 1e-2;
    x[i] = keep + (float)h;
    double lp = ce64(x, l64, N, C, s);
    x[i] = keep - (float)h;
    double lm = ce64(x, l64, N, C, s);
    x[i] = keep;
    double g = dl * (lp - lm) / (2 * h);
    if (fabs(g - dx[i]) > 1e-5 + 1e-3 * fabs(g)) {
      if (!bad) fprintf(stderr, "CE grad [%lld]: %.8g vs fd %.8g\n", (long long)i, dx[i], g);
      bad++;
    }
  }
  CHECK_MSG(bad == 0, "CE (%lld,%lld) s=%g backward: %d elements off vs finite differences",
            (long long)N, (long long)C, s, bad);
  free(x), free(dx), free(dx2), free(lse), free(l64), free(l32);
}

/* evaluation's rows (ts__eval_rows_ref) against a long-double computation of each row; a row
 * with NaN, one with -Inf, ties with the label's logit (not counted as above it); the same rows
 * with 1 and 2 threads (bitwise); ts__eval_rows_finish from statistics computed in double */
static void test_eval_rows(int64_t N, int64_t C) {
  float *x = malloc(sizeof(float) * (size_t)(N * C));
  int32_t *lab = malloc(sizeof(int32_t) * (size_t)N);
  ts__eval_row *r = malloc(sizeof(ts__eval_row) * (size_t)N), *r1 = malloc(sizeof(ts__eval_row) * (size_t)N),
               *rf = malloc(sizeof(ts__eval_row) * (size_t)N);
  float *st = malloc(sizeof(float) * 4 * (size_t)N);
  ts_test_fill(x, N * C, 77, -8, 8);
  for (int64_t i = 0; i < N; i++) lab[i] = (int32_t)((i * 7919 + 3) % C);
  if (N > 3 && C > 3) {
    x[1 * C + 2] = NAN;
    x[2 * C + C - 1] = -INFINITY;
    for (int64_t k = 0; k < C; k += 2) x[3 * C + k] = 9; /* ties with the label, the row's largest */
    x[3 * C + lab[3]] = 9;
  }
  ts__eval_rows_ref(x, lab, N, C, r);
  int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  ts__eval_rows_ref(x, lab, N, C, r1);
  omp_set_num_threads(nt);
  CHECK_MSG(!memcmp(r, r1, sizeof(ts__eval_row) * (size_t)N), "eval rows differ between 1 and %d threads", nt);
  for (int64_t i = 0; i < N; i++) {
    const float *z = x + i * C;
    int fin = 1;
    long double m = -INFINITY, s = 0;
    for (int64_t k = 0; k < C; k++) fin &= isfinite(z[k]) != 0, m = z[k] > m ? z[k] : m;
    int above = 0;
    for (int64_t k = 0; k < C; k++) s += expl((long double)z[k] - m), above += z[k] > z[lab[i]];
    CHECK_MSG(r[i].finite == fin, "eval row %lld: finite %d, want %d", (long long)i, r[i].finite, fin);
    if (!fin) {
      CHECK(r[i].nll == 0 && r[i].above == 0);
      st[4 * i] = st[4 * i + 1] = st[4 * i + 2] = 0, st[4 * i + 3] = -1;
      continue;
    }
    const double want = (double)(m + logl(s) - z[lab[i]]);
    CHECK_MSG(fabs(r[i].nll - want) <= 1e-12 * (1 + fabs(want)) && r[i].above == above,
              "eval row %lld: nll %.17g above %d, want %.17g %d", (long long)i, r[i].nll, r[i].above, want, above);
    st[4 * i] = (float)m, st[4 * i + 1] = (float)s, st[4 * i + 2] = z[lab[i]], st[4 * i + 3] = (float)above;
  }
  if (N > 3 && C > 3) CHECK(!r[1].finite && !r[2].finite && r[3].finite && r[3].above == 0);
  ts__eval_rows_finish(st, N, rf);
  for (int64_t i = 0; i < N; i++)
    CHECK_MSG(rf[i].finite == r[i].finite && rf[i].above == r[i].above && fabs(rf[i].nll - r[i].nll) <= 1e-6 * (1 + fabs(r[i].nll)),
              "eval row %lld from statistics: %d %d %.9g, want %d %d %.9g", (long long)i, rf[i].finite, rf[i].above,
              rf[i].nll, r[i].finite, r[i].above, r[i].nll);
  free(x), free(lab), free(r), free(r1), free(rf), free(st);
}

int main(void) {
  for (int log_ = 0; log_ <= 1; log_++) {
    test_softmax(1, 1, 1, log_);
    test_softmax(7, 10, 1, log_);
    test_softmax(3, 5000, 1, log_);
    test_softmax(4, 9, 13, log_);
    test_softmax(2, 6, 300, log_);
  }
  printf("softmax/log_softmax: last and middle axes, ref and oneDNN vs double (1e-6/1e-5, oneDNN 1e-5), "
         "backward vs finite differences (1e-4/1e-3)\n");
  test_ce(6, 4, 0.0f, 0);
  test_ce(6, 4, 0.1f, 1);
  test_ce(33, 17, 0.25f, 1);
  test_ce(40, 1000, 0.0f, 0);
  printf("cross-entropy: i32/i64 labels, ignore_index -100, label smoothing 0/0.1/0.25, vs double "
         "PyTorch formula (1e-5), gradient vs finite differences (1e-3)\n");
  test_eval_rows(5, 3);
  test_eval_rows(37, 1000);
  test_eval_rows(300, 256); /* threads share the rows */
  printf("evaluation rows: loss, rank and finiteness vs long double (1e-12), 1 vs 2 threads bitwise, "
         "from per-row statistics (1e-6)\n");
  /* all rows ignored: loss 0, gradient 0 */
  {
    float x[6] = {1, 2, 3, 4, 5, 6}, loss = 1, dx[6];
    int32_t lab[2] = {-100, -100};
    CHECK_OK(ts__softmax_ce_fwd_ref(x, lab, 0, 2, 3, 0.1f, -100, &loss, NULL));
    CHECK(loss == 0.0f);
    CHECK_OK(ts__softmax_ce_bwd_ref(1, x, lab, 0, NULL, 2, 3, 0.1f, -100, dx));
    for (int i = 0; i < 6; i++) CHECK(dx[i] == 0.0f);
  }
  /* extreme logits stay finite */
  {
    float x[3] = {1000, -1000, 0}, loss, y[3];
    int64_t lab[1] = {0};
    CHECK_OK(ts__softmax_ce_fwd_ref(x, lab, 1, 1, 3, 0, -100, &loss, NULL));
    CHECK(isfinite(loss) && loss < 1e-6f);
    CHECK_OK(ts__softmax_fwd_ref(x, y, 1, 3, 1, 0));
    CHECK(y[0] == 1.0f && y[1] == 0.0f);
    CHECK_OK(ts__softmax_fwd_ref(x, y, 1, 3, 1, 1));
    CHECK(isfinite(y[1]) && fabsf(y[1] + 2000) < 1e-3f);
  }
  /* bad labels: status naming the op and the row, no crash */
  {
    float x[6] = {0}, loss, dx[6];
    int32_t lab[2] = {1, 3};
    CHECK(ts__softmax_ce_fwd_ref(x, lab, 0, 2, 3, 0, -100, &loss, NULL) == TS_ERANGE);
    CHECK(strstr(ts_last_error(), "softmax_ce") && strstr(ts_last_error(), "row 1"));
    int64_t lab2[2] = {-1, 0};
    CHECK(ts__softmax_ce_bwd_ref(1, x, lab2, 1, NULL, 2, 3, 0, -100, dx) == TS_ERANGE);
    CHECK(ts__softmax_fwd_ref(x, x, 1, 0, 1, 0) == TS_ESHAPE);
  }
  /* timing, informational, with TS_TEST_TIMING=1: GPT-like logits */
  if (getenv("TS_TEST_TIMING")) {
    int64_t N = 256, C = 50257;
    float *x = malloc(4 * N * C), *dx = malloc(4 * N * C), *lse = malloc(4 * N), loss;
    int32_t *lab = malloc(4 * N);
    ts_test_fill(x, N * C, 5, -3, 3);
    for (int64_t i = 0; i < N; i++) lab[i] = (int32_t)(i * 7 % C);
    ts__softmax_ce_fwd_ref(x, lab, 0, N, C, 0, -100, &loss, lse);
    ts__softmax_ce_bwd_ref(1, x, lab, 0, lse, N, C, 0, -100, dx);
    double t0 = ts_time_now();
    ts__softmax_ce_fwd_ref(x, lab, 0, N, C, 0, -100, &loss, lse);
    double t1 = ts_time_now();
    ts__softmax_ce_bwd_ref(1, x, lab, 0, lse, N, C, 0, -100, dx);
    double t2 = ts_time_now();
    ts__softmax_fwd_ref(x, dx, N, C, 1, 0);
    double t3 = ts_time_now();
    ts__softmax_fwd_dnnl(x, dx, N, C, 1, 0);
    ts__softmax_fwd_dnnl(x, dx, N, C, 1, 0);
    double t4 = ts_time_now();
    printf("  CE (256,50257): fwd %.1f ms, bwd %.1f ms; softmax fwd ref %.1f ms, oneDNN %.1f ms\n",
           (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3, (t4 - t3) * 0.5e3);
    free(x), free(dx), free(lse), free(lab);
  }
  return ts_test_finish("test_softmax");
}
