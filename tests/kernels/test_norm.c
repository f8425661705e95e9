/* Batch-norm and layer-norm kernels: reference vs double formulas, oneDNN vs reference, running
 * statistics (unbiased variance, momentum), backward vs finite differences in double. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/norm.h"
#include "test_util.h"

/* ---- double reference: batch norm on (N,C,S), loss = sum w*y ---- */
static void bn64(const double *x, const double *gm, const double *bt, double *y, int64_t N,
                 int64_t C, int64_t S, double eps, int training, const double *rm, const double *rv,
                 double *mean, double *var) {
  for (int64_t c = 0; c < C; c++) {
    double m = 0, v = 0;
    if (training) {
      for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < S; j++) m += x[(n * C + c) * S + j];
      m /= N * S;
      for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < S; j++) v += pow(x[(n * C + c) * S + j] - m, 2);
      v /= N * S;
    } else {
      m = rm[c];
      v = rv[c];
    }
    if (mean) mean[c] = m, var[c] = v;
    for (int64_t n = 0; n < N; n++)
      for (int64_t j = 0; j < S; j++) {
        int64_t i = (n * C + c) * S + j;
        y[i] = (x[i] - m) / sqrt(v + eps) * gm[c] + bt[c];
      }
  }
}

static double *to64(const float *a, int64_t n) {
  double *d = malloc(8 * n);
  for (int64_t i = 0; i < n; i++) d[i] = a[i];
  return d;
}

static double bn_loss(const double *x, const double *gm, const double *bt, const double *w,
                      int64_t N, int64_t C, int64_t S, double eps, int tr, const double *rm,
                      const double *rv) {
  int64_t n = N * C * S;
  double *y = malloc(8 * n), L = 0;
  bn64(x, gm, bt, y, N, C, S, eps, tr, rm, rv, NULL, NULL);
  for (int64_t i = 0; i < n; i++) L += w[i] * y[i];
  free(y);
  return L;
}

/* central differences of the loss w.r.t. every element of p (double arrays), h relative */
static void fd_check(double *p, int64_t np, const float *grad, double (*loss)(void *), void *ctx,
                     const char *what) {
  int bad = 0;
  int64_t step = np > 200 ? np / 53 : 1;
  for (int64_t i = 0; i < np; i += step) {
    double keep = p[i], h = 1e-5 * (fabs(keep) > 1 ? fabs(keep) : 1);
    p[i] = keep + h;
    double lp = loss(ctx);
    p[i] = keep - h;
    double lm = loss(ctx);
    p[i] = keep;
    double g = (lp - lm) / (2 * h);
    if (fabs(g - grad[i]) > 2e-4 + 2e-3 * fabs(g)) {
      if (!bad) fprintf(stderr, "%s [%lld]: %.8g vs fd %.8g\n", what, (long long)i, grad[i], g);
      bad++;
    }
  }
  CHECK_MSG(bad == 0, "%s: %d elements off vs finite differences", what, bad);
}

typedef struct {
  double *x, *gm, *bt, *w, *rm, *rv;
  int64_t N, C, S;
  double eps;
  int tr;
} bnctx;
static double bn_lossf(void *p) {
  bnctx *c = p;
  return bn_loss(c->x, c->gm, c->bt, c->w, c->N, c->C, c->S, c->eps, c->tr, c->rm, c->rv);
}

static void test_bn(int64_t N, int64_t C, int64_t S, int training) {
  int64_t n = N * C * S;
  const float eps = 1e-5f, mom = 0.1f;
  char what[160];
  float *x = malloc(4 * n), *y = malloc(4 * n), *y2 = malloc(4 * n), *g = malloc(4 * C),
        *b = malloc(4 * C), *rm = malloc(4 * C), *rv = malloc(4 * C), *rm2 = malloc(4 * C),
        *rv2 = malloc(4 * C), *mean = malloc(4 * C), *var = malloc(4 * C), *mean2 = malloc(4 * C),
        *var2 = malloc(4 * C), *dy = malloc(4 * n), *dx = malloc(4 * n), *dx2 = malloc(4 * n),
        *dg = malloc(4 * C), *db = malloc(4 * C), *dg2 = malloc(4 * C), *db2 = malloc(4 * C);
  ts_test_fill(x, n, 1 + n, -2, 3);
  for (int64_t i = 0; i < n; i++) x[i] += 100.0f; /* offset: tests the shifted variance */
  ts_test_fill(g, C, 2, 0.5f, 1.5f);
  ts_test_fill(b, C, 3, -0.5f, 0.5f);
  ts_test_fill(rm, C, 4, 99, 101);
  ts_test_fill(rv, C, 5, 0.5f, 2);
  ts_test_fill(dy, n, 6, -1, 1);
  memcpy(rm2, rm, 4 * C);
  memcpy(rv2, rv, 4 * C);
  double *X = to64(x, n), *G = to64(g, C), *B = to64(b, C), *W = to64(dy, n), *RM = to64(rm, C),
         *RV = to64(rv, C), *Y = malloc(8 * n), *M = malloc(8 * C), *V = malloc(8 * C);
  bn64(X, G, B, Y, N, C, S, eps, training, RM, RV, M, V);
  float *yd = malloc(4 * n);
  for (int64_t i = 0; i < n; i++) yd[i] = (float)Y[i];
  snprintf(what, sizeof what, "batchnorm %s (%lld,%lld,%lld)", training ? "train" : "eval",
           (long long)N, (long long)C, (long long)S);
  CHECK_OK(ts__batchnorm_fwd_ref(x, g, b, rm, rv, y, mean, var, N, C, S, mom, eps, training));
  CHECK_CLOSE(y, yd, n, 1e-4, 1e-4, what);
  CHECK_OK(ts__batchnorm_fwd_dnnl(x, g, b, rm2, rv2, y2, mean2, var2, N, C, S, mom, eps, training));
  /* oneDNN's variance loses ~1e-3 relative on data offset by 100 (ours is shifted) */
  CHECK_CLOSE(y2, y, n, 1e-3, 1e-3, "batchnorm fwd oneDNN vs ref");
  CHECK_CLOSE(mean2, mean, C, 1e-5, 1e-6, "batchnorm mean oneDNN vs ref");
  CHECK_CLOSE(var2, var, C, 1e-5, 2e-3, "batchnorm var oneDNN vs ref");
  CHECK_CLOSE(rm2, rm, C, 1e-5, 1e-6, "running mean oneDNN vs ref");
  CHECK_CLOSE(rv2, rv, C, 1e-5, 2e-3, "running var oneDNN vs ref");
  for (int64_t c = 0; c < C; c++) {
    double M_ = (double)(N * S);
    double erm = training ? 0.9 * RM[c] + 0.1 * M[c] : RM[c];
    double erv = training ? 0.9 * RV[c] + 0.1 * V[c] * M_ / (M_ - 1) : RV[c];
    CHECK_MSG(fabs(rm[c] - erm) < 1e-4 && fabs(rv[c] - erv) < 1e-4 * (1 + erv),
              "running stats c=%lld: %g %g vs %g %g", (long long)c, rm[c], rv[c], erm, erv);
    CHECK(fabs(mean[c] - M[c]) < 1e-4 && fabs(var[c] - V[c]) < 1e-4 * (1 + V[c]));
  }
  /* backward */
  CHECK_OK(ts__batchnorm_bwd_ref(dy, x, g, mean, var, dx, dg, db, N, C, S, eps, training));
  CHECK_OK(ts__batchnorm_bwd_dnnl(dy, x, g, mean, var, dx2, dg2, db2, N, C, S, eps, training));
  CHECK_CLOSE(dx2, dx, n, 2e-3, 2e-3, "batchnorm dx oneDNN vs ref");
  CHECK_CLOSE(dg2, dg, C, 1e-4, 1e-4, "batchnorm dgamma oneDNN vs ref");
  CHECK_CLOSE(db2, db, C, 1e-4, 1e-4, "batchnorm dbeta oneDNN vs ref");
  /* finite differences: in eval mode the statistics are the (constant) running ones */
  double *RMs = to64(mean, C), *RVs = to64(var, C);
  bnctx cx = {X, G, B, W, RMs, RVs, N, C, S, eps, training};
  char w2[200];
  snprintf(w2, sizeof w2, "%s dx", what);
  fd_check(X, n, dx, bn_lossf, &cx, w2);
  snprintf(w2, sizeof w2, "%s dgamma", what);
  fd_check(G, C, dg, bn_lossf, &cx, w2);
  snprintf(w2, sizeof w2, "%s dbeta", what);
  fd_check(B, C, db, bn_lossf, &cx, w2);
  free(RMs), free(RVs);
  free(x), free(y), free(y2), free(g), free(b), free(rm), free(rv), free(rm2), free(rv2), free(mean),
      free(var), free(mean2), free(var2), free(dy), free(dx), free(dx2), free(dg), free(db),
      free(dg2), free(db2), free(X), free(G), free(B), free(W), free(RM), free(RV), free(Y),
      free(M), free(V), free(yd);
}

/* ---- layer norm ---- */
typedef struct {
  double *x, *g, *b, *w;
  int64_t R, D;
  double eps;
} lnctx;
static double ln_lossf(void *p) {
  lnctx *c = p;
  double L = 0;
  for (int64_t r = 0; r < c->R; r++) {
    const double *x = c->x + r * c->D;
    double m = 0, v = 0;
    for (int64_t j = 0; j < c->D; j++) m += x[j];
    m /= c->D;
    for (int64_t j = 0; j < c->D; j++) v += (x[j] - m) * (x[j] - m);
    v /= c->D;
    for (int64_t j = 0; j < c->D; j++)
      L += c->w[r * c->D + j] * ((x[j] - m) / sqrt(v + c->eps) * c->g[j] + c->b[j]);
  }
  return L;
}

static void test_ln(int64_t R, int64_t D) {
  int64_t n = R * D;
  const float eps = 1e-5f;
  float *x = malloc(4 * n), *y = malloc(4 * n), *y2 = malloc(4 * n), *g = malloc(4 * D),
        *b = malloc(4 * D), *m = malloc(4 * R), *v = malloc(4 * R), *m2 = malloc(4 * R),
        *v2 = malloc(4 * R), *dy = malloc(4 * n), *dx = malloc(4 * n), *dx2 = malloc(4 * n),
        *dg = malloc(4 * D), *db = malloc(4 * D), *dg2 = malloc(4 * D), *db2 = malloc(4 * D),
        *yd = malloc(4 * n);
  char what[128];
  snprintf(what, sizeof what, "layernorm (%lld,%lld)", (long long)R, (long long)D);
  ts_test_fill(x, n, 10 + n, -2, 2);
  ts_test_fill(g, D, 11, 0.5f, 1.5f);
  ts_test_fill(b, D, 12, -0.5f, 0.5f);
  ts_test_fill(dy, n, 13, -1, 1);
  lnctx c = {to64(x, n), to64(g, D), to64(b, D), to64(dy, n), R, D, eps};
  for (int64_t r = 0; r < R; r++) { /* y via the loss with one-hot weights would be slow: inline */
    double mm = 0, vv = 0;
    for (int64_t j = 0; j < D; j++) mm += x[r * D + j];
    mm /= D;
    for (int64_t j = 0; j < D; j++) vv += pow(x[r * D + j] - mm, 2);
    vv /= D;
    for (int64_t j = 0; j < D; j++) yd[r * D + j] = (float)((x[r * D + j] - mm) / sqrt(vv + eps) * g[j] + b[j]);
  }
  CHECK_OK(ts__layernorm_fwd_ref(x, g, b, y, m, v, R, D, eps));
  CHECK_CLOSE(y, yd, n, 1e-5, 1e-5, what);
  CHECK_OK(ts__layernorm_fwd_dnnl(x, g, b, y2, m2, v2, R, D, eps));
  CHECK_CLOSE(y2, y, n, 1e-5, 1e-5, "layernorm fwd oneDNN vs ref");
  CHECK_CLOSE(m2, m, R, 1e-6, 1e-5, "layernorm mean oneDNN vs ref");
  CHECK_CLOSE(v2, v, R, 1e-6, 1e-4, "layernorm var oneDNN vs ref");
  CHECK_OK(ts__layernorm_bwd_ref(dy, x, g, m, v, dx, dg, db, R, D, eps));
  CHECK_OK(ts__layernorm_bwd_dnnl(dy, x, g, m, v, dx2, dg2, db2, R, D, eps));
  CHECK_CLOSE(dx2, dx, n, 1e-4, 1e-3, "layernorm dx oneDNN vs ref");
  CHECK_CLOSE(dg2, dg, D, 1e-4, 1e-4, "layernorm dgamma oneDNN vs ref");
  CHECK_CLOSE(db2, db, D, 1e-4, 1e-4, "layernorm dbeta oneDNN vs ref");
  char w2[160];
  snprintf(w2, sizeof w2, "%s dx", what);
  fd_check(c.x, n, dx, ln_lossf, &c, w2);
  snprintf(w2, sizeof w2, "%s dgamma", what);
  fd_check(c.g, D, dg, ln_lossf, &c, w2);
  snprintf(w2, sizeof w2, "%s dbeta", what);
  fd_check(c.b, D, db, ln_lossf, &c, w2);
  free(c.x), free(c.g), free(c.b), free(c.w);
  free(x), free(y), free(y2), free(g), free(b), free(m), free(v), free(m2), free(v2), free(dy),
      free(dx), free(dx2), free(dg), free(db), free(dg2), free(db2), free(yd);
}

/* ---- synchronised batch-norm: R shards of the batch, one thread each, with a reducer that
 * sums over the threads (a barrier and a shared table, summed in shard order), must give every
 * shard the rows of the unsplit batch: y, mean, var, running stats, dx; and dgamma/dbeta that
 * add up to the unsplit ones. ---- */
enum { SR = 3 };
typedef struct {
  pthread_barrier_t bar;
  double tab[SR][1024];
} sync_tab;
typedef struct {
  sync_tab *t;
  int r;
  const float *x, *dy, *g, *b;
  float *rm, *rv, *y, *m, *v, *dx, *dg, *db;
  int64_t N, C, S;
  int rc;
} shard;
static int tab_sum(double *v, int64_t n, void *user) {
  shard *s = user;
  if (n > 1024) return TS_ERANGE;
  memcpy(s->t->tab[s->r], v, sizeof(double) * (size_t)n);
  pthread_barrier_wait(&s->t->bar);
  for (int64_t i = 0; i < n; i++) {
    double a = 0;
    for (int r = 0; r < SR; r++) a += s->t->tab[r][i];
    v[i] = a;
  }
  pthread_barrier_wait(&s->t->bar); /* the table is reused by the next call */
  return TS_OK;
}
static void *shard_run(void *arg) {
  shard *s = arg;
  ts__bn_reducer red = {tab_sum, s};
  s->rc = ts__batchnorm_fwd_sync(s->x, s->g, s->b, s->rm, s->rv, s->y, s->m, s->v, s->N, s->C, s->S, 0.1f,
                                 1e-5f, 1, &red);
  if (!s->rc)
    s->rc = ts__batchnorm_bwd_sync(s->dy, s->x, s->g, s->m, s->v, s->dx, s->dg, s->db, s->N, s->C, s->S,
                                   1e-5f, 1, &red);
  return NULL;
}

static void test_bn_sync(int64_t N, int64_t C, int64_t S) {
  const int64_t n = N * C * S, per = N / SR * C * S;
  float *x = malloc(4 * n), *dy = malloc(4 * n), *y = malloc(4 * n), *dx = malloc(4 * n);
  float *ys = malloc(4 * n), *dxs = malloc(4 * n);
  float *g = malloc(4 * C), *b = malloc(4 * C), *rm = malloc(4 * C), *rv = malloc(4 * C), *m = malloc(4 * C),
        *v = malloc(4 * C), *dg = malloc(4 * C), *db = malloc(4 * C);
  float *rms = malloc(4 * C * SR), *rvs = malloc(4 * C * SR), *ms = malloc(4 * C * SR), *vs = malloc(4 * C * SR),
        *dgs = malloc(4 * C * SR), *dbs = malloc(4 * C * SR);
  for (int64_t i = 0; i < n; i++) x[i] = 3.0f + (float)((i * 37 % 101) - 50) / 25.0f, dy[i] = (float)((i * 53 % 89) - 44) / 30.0f;
  for (int64_t c = 0; c < C; c++) g[c] = 1.0f + 0.1f * (float)c, b[c] = 0.05f * (float)c, rm[c] = 0.5f, rv[c] = 2.0f;
  for (int r = 0; r < SR; r++) memcpy(rms + r * C, rm, 4 * C), memcpy(rvs + r * C, rv, 4 * C);
  /* the unsplit batch (N/SR per shard; the split is along N) */
  CHECK_OK(ts__batchnorm_fwd_ref(x, g, b, rm, rv, y, m, v, N, C, S, 0.1f, 1e-5f, 1));
  CHECK_OK(ts__batchnorm_bwd_ref(dy, x, g, m, v, dx, dg, db, N, C, S, 1e-5f, 1));
  sync_tab t;
  pthread_barrier_init(&t.bar, NULL, SR);
  shard sh[SR];
  pthread_t th[SR];
  for (int r = 0; r < SR; r++) {
    sh[r] = (shard){&t, r, x + r * per, dy + r * per, g, b, rms + r * C, rvs + r * C, ys + r * per, ms + r * C,
                    vs + r * C, dxs + r * per, dgs + r * C, dbs + r * C, N / SR, C, S, 0};
    pthread_create(&th[r], NULL, shard_run, &sh[r]);
  }
  for (int r = 0; r < SR; r++) pthread_join(th[r], NULL);
  pthread_barrier_destroy(&t.bar);
  for (int r = 0; r < SR; r++) {
    CHECK_OK(sh[r].rc);
    CHECK_CLOSE(ms + r * C, m, C, 1e-5, 1e-5, "sync batchnorm mean");
    CHECK_CLOSE(vs + r * C, v, C, 1e-5, 1e-4, "sync batchnorm var");
    CHECK_CLOSE(rms + r * C, rm, C, 1e-5, 1e-5, "sync batchnorm running mean");
    CHECK_CLOSE(rvs + r * C, rv, C, 1e-5, 1e-4, "sync batchnorm running var (unbiased over the union)");
  }
  CHECK_CLOSE(ys, y, n, 1e-5, 1e-4, "sync batchnorm y");
  CHECK_CLOSE(dxs, dx, n, 1e-5, 1e-4, "sync batchnorm dx");
  for (int64_t c = 0; c < C; c++) {
    for (int r = 1; r < SR; r++) dgs[c] += dgs[r * C + c], dbs[c] += dbs[r * C + c];
  }
  CHECK_CLOSE(dgs, dg, C, 1e-4, 1e-4, "sync batchnorm dgamma (sum of shards)");
  CHECK_CLOSE(dbs, db, C, 1e-4, 1e-4, "sync batchnorm dbeta (sum of shards)");
  /* local statistics differ: the test can tell */
  float *yl = malloc(4 * per), *ml = malloc(4 * C), *vl = malloc(4 * C), *rml = malloc(4 * C), *rvl = malloc(4 * C);
  for (int64_t c = 0; c < C; c++) rml[c] = 0.5f, rvl[c] = 2.0f;
  CHECK_OK(ts__batchnorm_fwd_sync(x, g, b, rml, rvl, yl, ml, vl, N / SR, C, S, 0.1f, 1e-5f, 1, NULL));
  CHECK(ts_test_close(yl, y, (size_t)per, 1e-5, 1e-4, NULL) > 1);
  free(yl), free(ml), free(vl), free(rml), free(rvl);
  free(x), free(dy), free(y), free(dx), free(ys), free(dxs), free(g), free(b), free(rm), free(rv), free(m),
      free(v), free(dg), free(db), free(rms), free(rvs), free(ms), free(vs), free(dgs), free(dbs);
}

int main(void) {
  for (int tr = 1; tr >= 0; tr--) {
    test_bn(4, 3, 5, tr);
    test_bn(16, 6, 1, tr);  /* BatchNorm1d (N,C) */
    test_bn(3, 300, 1, tr); /* (N,C), more channels than one chunk */
    test_bn(2, 8, 49, tr);
  }
  test_bn_sync(6, 4, 7);
  test_bn_sync(9, 5, 1);
  printf("sync batchnorm: %d shards vs the unsplit batch (y, stats, running stats, dx; dgamma/dbeta sum)\n", SR);
  printf("batchnorm: train/eval, (N,C,S) and (N,C), ref vs double (1e-4), oneDNN vs ref, running "
         "stats (unbiased var, momentum 0.1), dx/dgamma/dbeta vs finite differences (2e-3)\n");
  test_ln(5, 7);
  test_ln(33, 64);
  test_ln(4, 3000);
  printf("layernorm: ref vs double (1e-5), oneDNN vs ref, dx/dgamma/dbeta vs finite differences\n");
  /* bad input */
  {
    float x[4] = {0}, p[4] = {1, 1, 1, 1};
    CHECK(ts__batchnorm_fwd_ref(x, p, p, p, p, x, p, p, 1, 2, 1, 0.1f, 1e-5f, 1) == TS_ESHAPE);
    CHECK(strstr(ts_last_error(), "more than 1 value per channel") != NULL);
    CHECK(ts__batchnorm_fwd_dnnl(x, p, p, p, p, x, p, p, 1, 2, 1, 0.1f, 1e-5f, 1) == TS_ESHAPE);
    CHECK(ts__layernorm_fwd_ref(x, p, p, x, p, p, 2, 0, 1e-5f) == TS_ESHAPE);
  }
  /* timing, informational, with TS_TEST_TIMING=1: ResNet-18 first BN layer at batch 32 */
  if (getenv("TS_TEST_TIMING")) {
    int64_t N = 32, C = 64, S = 56 * 56, n = N * C * S;
    float *x = malloc(4 * n), *y = malloc(4 * n), *dx = malloc(4 * n), p[64], m[64], v[64], r1[64],
          r2[64], dg[64], db[64];
    ts_test_fill(x, n, 1, -1, 1);
    for (int c = 0; c < 64; c++) p[c] = 1, r1[c] = 0, r2[c] = 1;
    double t[4];
    for (int k = 0; k < 2; k++) {
      (k ? ts__batchnorm_fwd_dnnl : ts__batchnorm_fwd_ref)(x, p, p, r1, r2, y, m, v, N, C, S, 0.1f, 1e-5f, 1);
      double t0 = ts_time_now();
      (k ? ts__batchnorm_fwd_dnnl : ts__batchnorm_fwd_ref)(x, p, p, r1, r2, y, m, v, N, C, S, 0.1f, 1e-5f, 1);
      double t1 = ts_time_now();
      (k ? ts__batchnorm_bwd_dnnl : ts__batchnorm_bwd_ref)(y, x, p, m, v, dx, dg, db, N, C, S, 1e-5f, 1);
      double t2 = ts_time_now();
      (k ? ts__batchnorm_bwd_dnnl : ts__batchnorm_bwd_ref)(y, x, p, m, v, dx, dg, db, N, C, S, 1e-5f, 1);
      t[2 * k] = t1 - t0;
      t[2 * k + 1] = ts_time_now() - t2;
    }
    printf("  batchnorm (32,64,56,56) train: fwd ref %.2f / oneDNN %.2f ms, bwd ref %.2f / oneDNN %.2f ms\n",
           t[0] * 1e3, t[2] * 1e3, t[1] * 1e3, t[3] * 1e3);
    free(x), free(y), free(dx);
  }
  if (getenv("TS_TEST_TIMING")) {
    int64_t R = 8192, D = 768, n = R * D;
    float *x = malloc(4 * n), *y = malloc(4 * n), *dx = malloc(4 * n), *p = malloc(4 * D),
          *m = malloc(4 * R), *v = malloc(4 * R), *dg = malloc(4 * D), *db = malloc(4 * D);
    ts_test_fill(x, n, 1, -1, 1);
    for (int j = 0; j < D; j++) p[j] = 1;
    double t[4];
    for (int k = 0; k < 2; k++) {
      (k ? ts__layernorm_fwd_dnnl : ts__layernorm_fwd_ref)(x, p, p, y, m, v, R, D, 1e-5f);
      (k ? ts__layernorm_bwd_dnnl : ts__layernorm_bwd_ref)(y, x, p, m, v, dx, dg, db, R, D, 1e-5f);
      double t0 = ts_time_now();
      (k ? ts__layernorm_fwd_dnnl : ts__layernorm_fwd_ref)(x, p, p, y, m, v, R, D, 1e-5f);
      double t1 = ts_time_now();
      (k ? ts__layernorm_bwd_dnnl : ts__layernorm_bwd_ref)(y, x, p, m, v, dx, dg, db, R, D, 1e-5f);
      t[2 * k] = t1 - t0;
      t[2 * k + 1] = ts_time_now() - t1;
    }
    printf("  layernorm (8192,768): fwd ref %.2f / oneDNN %.2f ms, bwd ref %.2f / oneDNN %.2f ms\n",
           t[0] * 1e3, t[2] * 1e3, t[1] * 1e3, t[3] * 1e3);
    free(x), free(y), free(dx), free(p), free(m), free(v), free(dg), free(db);
  }
  return ts_test_finish("test_norm");
}
