/* 16-bit layer norm and batch norm (norm_bf16.c) against the f32 kernels on the same (16-bit
 * representable) inputs.
 *
 * Layer norm: The native row loops do the f32 kernel's arithmetic on the widened
 * rows, so the tolerance is zero: y, dx (and dgamma/dbeta when gamma is 16-bit) equal the f32
 * outputs rounded once, mean/var/dgamma/dbeta (f32 gamma) equal them exactly. Sizes cover one
 * thread and the parallel path, short and long rows; bf16 and f16; gamma f32 or 16-bit.
 * The bf16 oneDNN path (fast backend) is compared with the f32 oneDNN kernel on the same inputs:
 * y and dgamma within 1e-2 + 2^-7 |b|, dx within 2e-2 + 2^-6 |b| (oneDNN computes dx from the
 * bf16 inputs in its own order; dx cancels), mean within 1e-5 relative.
 *
 * Batch norm (training and inference, (N,C,S) with odd C and planes, (N,C), planes longer than
 * a sum chunk, the parallel paths; bf16 and f16; gamma f32 or 16-bit):
 * - native loops (both backends) vs ts__batchnorm_{fwd,bwd}_ref: exact. y and dx equal the f32
 *   outputs rounded once; mean, var, the running mean/var and dgamma/dbeta (f32 gamma) equal the
 *   f32 ones bit for bit (16-bit gamma: rounded once).
 * - SyncBatchNorm: 3 shards of the batch on 3 threads with a reducer over them, 16-bit against
 *   the same shards in f32: exact (the exchange is the f32 kernel's double sums); asked with
 *   dnnl = 1 too, which must keep the loops (oneDNN has no cross-rank statistics).
 * - oneDNN bf16 (ncsp_bnorm) vs the f32 reference: y and dx within 1e-3 (dx 4e-3) + 2^-7 |b|
 *   (one rounding to bf16 is up to 2^-8 relative; measured up to 0.45 of this); mean, var,
 *   running mean/var within 1e-6 + 2e-5 |b| (f32 statistics of the same values in another
 *   order; measured <= 0.05 of it); dgamma, dbeta within 1e-4 + 1e-4 |b| (f32 sums of up to 1.3e4
 *   products; measured <= 0.04), plus 2^-8 |b| when they are rounded to a 16-bit gamma's dtype.
 * Each comparison is shown able to fail: one output element corrupted is caught. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/lowp.h"
#include "kernels/norm.h"
#include "test_util.h"

static uint64_t seed = 31;

static void *mk16(float *x, int64_t n, ts_dtype dt, float lo, float hi) {
  ts_test_fill(x, (size_t)n, seed++, lo, hi);
  void *h = malloc((size_t)n * ts_dtype_size(dt));
  ts__lp_narrow(x, h, dt, n);
  ts__lp_widen(h, dt, x, n);
  return h;
}

/* 1 if out (dtype dt) == ref rounded to dt, bit for bit */
static int same_bits(const void *out, ts_dtype dt, const float *ref, int64_t n) {
  void *want = malloc((size_t)n * ts_dtype_size(dt));
  ts__lp_narrow(ref, want, dt, n);
  const int eq = memcmp(out, want, (size_t)n * ts_dtype_size(dt)) == 0;
  free(want);
  return eq;
}
static void same(const void *out, ts_dtype dt, const float *ref, int64_t n, const char *what) {
  CHECK_MSG(same_bits(out, dt, ref, n), "%s: differs from the rounded f32 result", what);
}

static void check(ts_dtype dt, ts_dtype gdt, int64_t R, int64_t D) {
  const int64_t n = R * D;
  float *x = malloc((size_t)n * 4), *dy = malloc((size_t)n * 4), *g = malloc((size_t)D * 4),
        *b = malloc((size_t)D * 4), *y = malloc((size_t)n * 4), *dx = malloc((size_t)n * 4),
        *m = malloc((size_t)R * 4), *v = malloc((size_t)R * 4), *m2 = malloc((size_t)R * 4),
        *v2 = malloc((size_t)R * 4), *dg = malloc((size_t)D * 4), *db = malloc((size_t)D * 4);
  void *xh = mk16(x, n, dt, -2, 3), *dyh = mk16(dy, n, dt, -1, 1), *gh = mk16(g, D, gdt, 0.5f, 1.5f),
       *bh = mk16(b, D, gdt, -0.5f, 0.5f);
  void *yh = malloc((size_t)n * 2), *dxh = malloc((size_t)n * 2), *dgh = malloc((size_t)D * 4), *dbh = malloc((size_t)D * 4);
  char what[128];
  snprintf(what, sizeof what, "layernorm %s gamma %s R%lld D%lld", ts_dtype_name(dt), ts_dtype_name(gdt), (long long)R,
           (long long)D);
  CHECK_OK(ts__layernorm_fwd_ref(x, g, b, y, m, v, R, D, 1e-5f));
  CHECK_OK(ts__layernorm_fwd_lp(dt, gdt, xh, gh, bh, yh, m2, v2, R, D, 1e-5f, 0));
  same(yh, dt, y, n, what);
  CHECK_MSG(!memcmp(m, m2, (size_t)R * 4) && !memcmp(v, v2, (size_t)R * 4), "%s: mean/var", what);
  CHECK_OK(ts__layernorm_bwd_ref(dy, x, g, m, v, dx, dg, db, R, D, 1e-5f));
  CHECK_OK(ts__layernorm_bwd_lp(dt, gdt, dyh, xh, gh, m, v, dxh, dgh, dbh, R, D, 1e-5f, 0));
  same(dxh, dt, dx, n, what);
  same(dgh, gdt, dg, D, what);
  same(dbh, gdt, db, D, what);
  if (dt == TS_BF16) { /* oneDNN bf16 vs oneDNN f32 on the same inputs */
    float *got = malloc((size_t)n * 4), *gd = malloc((size_t)D * 4);
    char w2[160];
    CHECK_OK(ts__layernorm_fwd_dnnl(x, g, b, y, m, v, R, D, 1e-5f));
    CHECK_OK(ts__layernorm_fwd_lp(dt, gdt, xh, gh, bh, yh, m2, v2, R, D, 1e-5f, 1));
    ts__lp_widen(yh, dt, got, n);
    snprintf(w2, sizeof w2, "%s: oneDNN bf16 y", what);
    CHECK_CLOSE(got, y, (size_t)n, 1e-2, 1.0 / 128, w2);
    snprintf(w2, sizeof w2, "%s: oneDNN bf16 mean", what);
    CHECK_CLOSE(m2, m, (size_t)R, 1e-5, 1e-5, w2);
    CHECK_OK(ts__layernorm_bwd_dnnl(dy, x, g, m, v, dx, dg, db, R, D, 1e-5f));
    CHECK_OK(ts__layernorm_bwd_lp(dt, gdt, dyh, xh, gh, m, v, dxh, dgh, dbh, R, D, 1e-5f, 1));
    ts__lp_widen(dxh, dt, got, n);
    snprintf(w2, sizeof w2, "%s: oneDNN bf16 dx", what);
    CHECK_CLOSE(got, dx, (size_t)n, 2e-2, 1.0 / 64, w2);
    ts__lp_widen(dgh, gdt, gd, D);
    snprintf(w2, sizeof w2, "%s: oneDNN bf16 dgamma", what);
    CHECK_CLOSE(gd, dg, (size_t)D, 1e-2, 1.0 / 128, w2);
    free(got), free(gd);
  }
  free(x), free(dy), free(g), free(b), free(y), free(dx), free(m), free(v), free(m2), free(v2), free(dg), free(db);
  free(xh), free(dyh), free(gh), free(bh), free(yh), free(dxh), free(dgh), free(dbh);
}

/* ---------------------------------------------------------------- batch norm */

/* the exact comparison fails on a copy of out with one bit of the middle element's high byte
 * flipped */
static void same_can_fail(const void *out, ts_dtype dt, const float *ref, int64_t n, const char *what) {
  const size_t es = ts_dtype_size(dt);
  unsigned char *bad = malloc((size_t)n * es);
  memcpy(bad, out, (size_t)n * es);
  bad[(size_t)(n / 2) * es + es - 1] ^= 0x01;
  CHECK_MSG(!same_bits(bad, dt, ref, n), "%s: a corrupted element was not caught", what);
  free(bad);
}

/* f32 arrays equal bit for bit */
static void eq32(const float *a, const float *b, int64_t n, const char *what) {
  CHECK_MSG(memcmp(a, b, (size_t)n * 4) == 0, "%s: differs from the f32 kernel", what);
}

static void check_bn(ts_dtype dt, ts_dtype gdt, int64_t N, int64_t C, int64_t S, int training) {
  const int64_t n = N * C * S;
  const float mom = 0.1f, eps = 1e-5f;
  float *x = malloc((size_t)n * 4), *dy = malloc((size_t)n * 4), *y = malloc((size_t)n * 4), *dx = malloc((size_t)n * 4),
        *got = malloc((size_t)n * 4);
  float *g = malloc((size_t)C * 4), *b = malloc((size_t)C * 4), *st = malloc((size_t)C * 4 * 16);
  float *rm = st, *rv = st + C, *m = st + 2 * C, *v = st + 3 * C, *dg = st + 4 * C, *db = st + 5 * C;
  float *rm2 = st + 6 * C, *rv2 = st + 7 * C, *m2 = st + 8 * C, *v2 = st + 9 * C, *rm0 = st + 10 * C, *rv0 = st + 11 * C;
  float *gd = st + 12 * C, *bd = st + 13 * C;
  void *xh = mk16(x, n, dt, -2, 3), *dyh = mk16(dy, n, dt, -1, 1), *gh = mk16(g, C, gdt, 0.5f, 1.5f),
       *bh = mk16(b, C, gdt, -0.5f, 0.5f);
  ts_test_fill(rm0, (size_t)C, seed++, -0.5f, 0.5f);
  ts_test_fill(rv0, (size_t)C, seed++, 0.5f, 2.0f);
  void *yh = malloc((size_t)n * 2), *dxh = malloc((size_t)n * 2), *dgh = malloc((size_t)C * 4), *dbh = malloc((size_t)C * 4);
  char what[160], w2[224];
  snprintf(what, sizeof what, "batchnorm %s %s gamma %s (%lld,%lld,%lld)", training ? "train" : "eval",
           ts_dtype_name(dt), ts_dtype_name(gdt), (long long)N, (long long)C, (long long)S);
  /* f32 reference on the representable values */
  memcpy(rm, rm0, (size_t)C * 4), memcpy(rv, rv0, (size_t)C * 4);
  CHECK_OK(ts__batchnorm_fwd_ref(x, g, b, rm, rv, y, m, v, N, C, S, mom, eps, training));
  CHECK_OK(ts__batchnorm_bwd_ref(dy, x, g, m, v, dx, dg, db, N, C, S, eps, training));
  /* native loops: exact */
  memcpy(rm2, rm0, (size_t)C * 4), memcpy(rv2, rv0, (size_t)C * 4);
  CHECK_OK(ts__batchnorm_fwd_lp(dt, gdt, xh, gh, bh, rm2, rv2, yh, m2, v2, N, C, S, mom, eps, training, NULL, 0));
  snprintf(w2, sizeof w2, "%s: y", what);
  same(yh, dt, y, n, w2);
  same_can_fail(yh, dt, y, n, w2);
  snprintf(w2, sizeof w2, "%s: mean, var", what);
  eq32(m2, m, C, w2), eq32(v2, v, C, w2);
  snprintf(w2, sizeof w2, "%s: running mean, var", what);
  eq32(rm2, rm, C, w2), eq32(rv2, rv, C, w2);
  CHECK_OK(ts__batchnorm_bwd_lp(dt, gdt, dyh, xh, gh, m, v, dxh, dgh, dbh, N, C, S, eps, training, NULL, 0));
  snprintf(w2, sizeof w2, "%s: dx", what);
  same(dxh, dt, dx, n, w2);
  same_can_fail(dxh, dt, dx, n, w2);
  snprintf(w2, sizeof w2, "%s: dgamma, dbeta", what);
  same(dgh, gdt, dg, C, w2);
  same(dbh, gdt, db, C, w2);
  same_can_fail(dgh, gdt, dg, C, w2);
  if (dt == TS_BF16) { /* oneDNN bf16 vs the f32 reference */
    memcpy(rm2, rm0, (size_t)C * 4), memcpy(rv2, rv0, (size_t)C * 4);
    CHECK_OK(ts__batchnorm_fwd_lp(dt, gdt, xh, gh, bh, rm2, rv2, yh, m2, v2, N, C, S, mom, eps, training, NULL, 1));
    ts__lp_widen(yh, dt, got, n);
    snprintf(w2, sizeof w2, "%s: oneDNN bf16 y", what);
    CHECK_CLOSE(got, y, (size_t)n, 1e-3, 1.0 / 128, w2);
    got[n / 3] += 0.125f;
    CHECK_MSG(ts_test_close(got, y, (size_t)n, 1e-3, 1.0 / 128, NULL) > 1, "%s: a corrupted element was not caught", w2);
    snprintf(w2, sizeof w2, "%s: oneDNN bf16 mean, var, running mean, var", what);
    CHECK_CLOSE(m2, m, (size_t)C, 1e-6, 2e-5, w2);
    CHECK_CLOSE(v2, v, (size_t)C, 1e-6, 2e-5, w2);
    CHECK_CLOSE(rm2, rm, (size_t)C, 1e-6, 2e-5, w2);
    CHECK_CLOSE(rv2, rv, (size_t)C, 1e-6, 2e-5, w2);
    CHECK_OK(ts__batchnorm_bwd_lp(dt, gdt, dyh, xh, gh, m, v, dxh, dgh, dbh, N, C, S, eps, training, NULL, 1));
    ts__lp_widen(dxh, dt, got, n);
    snprintf(w2, sizeof w2, "%s: oneDNN bf16 dx", what);
    CHECK_CLOSE(got, dx, (size_t)n, 4e-3, 1.0 / 128, w2);
    got[n / 2] -= 0.125f;
    CHECK_MSG(ts_test_close(got, dx, (size_t)n, 4e-3, 1.0 / 128, NULL) > 1, "%s: a corrupted element was not caught", w2);
    ts__lp_widen(dgh, gdt, gd, C);
    ts__lp_widen(dbh, gdt, bd, C);
    /* a 16-bit dgamma/dbeta is also rounded once: up to 2^-8 relative more */
    const double rt = gdt == TS_F32 ? 1e-4 : 1e-4 + 1.0 / 256;
    snprintf(w2, sizeof w2, "%s: oneDNN bf16 dgamma, dbeta", what);
    CHECK_CLOSE(gd, dg, (size_t)C, 1e-4, rt, w2);
    CHECK_CLOSE(bd, db, (size_t)C, 1e-4, rt, w2);
    gd[C / 2] *= 1.01f;
    CHECK_MSG(ts_test_close(gd, dg, (size_t)C, 1e-4, rt, NULL) > 1, "%s: a corrupted element was not caught", w2);
  }
  free(x), free(dy), free(y), free(dx), free(got), free(g), free(b), free(st);
  free(xh), free(dyh), free(gh), free(bh), free(yh), free(dxh), free(dgh), free(dbh);
}

/* SyncBatchNorm: SR shards of the batch, one thread each, a reducer summing over the threads in
 * shard order (as run_norm.c's sums over ranks). */
enum { SR = 3 };
typedef struct {
  pthread_barrier_t bar;
  double tab[SR][1024];
} sync_tab;
typedef struct {
  sync_tab *t;
  int r, dnnl;
  ts_dtype dt; /* x/y/dy/dx; gamma f32 */
  const void *x, *dy;
  const float *g, *b;
  float *rm, *rv, *m, *v, *dg, *db;
  void *y, *dx;
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
  if (s->dt == TS_F32) {
    s->rc = ts__batchnorm_fwd_sync(s->x, s->g, s->b, s->rm, s->rv, s->y, s->m, s->v, s->N, s->C, s->S, 0.1f, 1e-5f, 1,
                                   &red);
    if (!s->rc)
      s->rc = ts__batchnorm_bwd_sync(s->dy, s->x, s->g, s->m, s->v, s->dx, s->dg, s->db, s->N, s->C, s->S, 1e-5f, 1,
                                     &red);
  } else {
    s->rc = ts__batchnorm_fwd_lp(s->dt, TS_F32, s->x, s->g, s->b, s->rm, s->rv, s->y, s->m, s->v, s->N, s->C, s->S,
                                 0.1f, 1e-5f, 1, &red, s->dnnl);
    if (!s->rc)
      s->rc = ts__batchnorm_bwd_lp(s->dt, TS_F32, s->dy, s->x, s->g, s->m, s->v, s->dx, s->dg, s->db, s->N, s->C,
                                   s->S, 1e-5f, 1, &red, s->dnnl);
  }
  return NULL;
}

/* Runs the SR shards of (N,C,S) x/dy (f32 copies xf/dyf, 16-bit xh/dyh) in dtype dt; outputs
 * per shard: y/dx (dt), mean, var, running mean/var, dgamma, dbeta (C each, f32). */
static void run_shards(ts_dtype dt, int dnnl, const void *x, const void *dy, const float *g, const float *b, int64_t N,
                       int64_t C, int64_t S, void *y, void *dx, float *stats /* 6*C*SR */) {
  const int64_t per = N / SR * C * S;
  const size_t es = ts_dtype_size(dt);
  sync_tab t;
  pthread_barrier_init(&t.bar, NULL, SR);
  shard sh[SR];
  pthread_t th[SR];
  for (int r = 0; r < SR; r++) {
    float *q = stats + (size_t)r * 6 * (size_t)C;
    for (int64_t c = 0; c < C; c++) q[2 * C + c] = 0.25f, q[3 * C + c] = 1.5f; /* running stats */
    sh[r] = (shard){&t, r, dnnl, dt, (const char *)x + (size_t)(r * per) * es, (const char *)dy + (size_t)(r * per) * es,
                    g, b, q + 2 * C, q + 3 * C, q, q + C, q + 4 * C, q + 5 * C,
                    (char *)y + (size_t)(r * per) * es, (char *)dx + (size_t)(r * per) * es, N / SR, C, S, 0};
    pthread_create(&th[r], NULL, shard_run, &sh[r]);
  }
  for (int r = 0; r < SR; r++) pthread_join(th[r], NULL);
  pthread_barrier_destroy(&t.bar);
  for (int r = 0; r < SR; r++) CHECK_OK(sh[r].rc);
}

static void check_bn_sync(ts_dtype dt, int dnnl, int64_t N, int64_t C, int64_t S) {
  const int64_t n = N * C * S;
  float *x = malloc((size_t)n * 4), *dy = malloc((size_t)n * 4), *y = malloc((size_t)n * 4), *dx = malloc((size_t)n * 4);
  float *g = malloc((size_t)C * 4), *b = malloc((size_t)C * 4);
  float *s32 = malloc((size_t)(6 * C * SR) * 4), *s16 = malloc((size_t)(6 * C * SR) * 4);
  void *xh = mk16(x, n, dt, 1, 4), *dyh = mk16(dy, n, dt, -1, 1);
  void *yh = malloc((size_t)n * 2), *dxh = malloc((size_t)n * 2);
  ts_test_fill(g, (size_t)C, seed++, 0.5f, 1.5f);
  ts_test_fill(b, (size_t)C, seed++, -0.5f, 0.5f);
  run_shards(TS_F32, 0, x, dy, g, b, N, C, S, y, dx, s32);
  run_shards(dt, dnnl, xh, dyh, g, b, N, C, S, yh, dxh, s16);
  char what[160];
  snprintf(what, sizeof what, "sync batchnorm %s%s (%lld,%lld,%lld), %d shards", ts_dtype_name(dt),
           dnnl ? " (dnnl asked)" : "", (long long)N, (long long)C, (long long)S, SR);
  same(yh, dt, y, n, what);
  same(dxh, dt, dx, n, what);
  same_can_fail(yh, dt, y, n, what);
  eq32(s16, s32, 6 * C * SR, what); /* mean, var, running stats, dgamma, dbeta of every shard */
  /* the shards did share their statistics: shard 0's mean is not its own batch's */
  float *ml = malloc((size_t)C * 4 * 4), *vl = ml + C, *rml = ml + 2 * C, *rvl = ml + 3 * C;
  float *yl = malloc((size_t)(n / SR) * 4);
  for (int64_t c = 0; c < C; c++) rml[c] = 0.25f, rvl[c] = 1.5f;
  CHECK_OK(ts__batchnorm_fwd_ref(x, g, b, rml, rvl, yl, ml, vl, N / SR, C, S, 0.1f, 1e-5f, 1));
  CHECK_MSG(ts_test_close(s16, ml, (size_t)C, 1e-6, 1e-6, NULL) > 1, "%s: shard 0 kept local statistics", what);
  free(ml), free(yl);
  free(x), free(dy), free(y), free(dx), free(g), free(b), free(s32), free(s16), free(xh), free(dyh), free(yh), free(dxh);
}

int main(void) {
  const ts_dtype dts[2] = {TS_BF16, TS_F16};
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 2; k++) {
      const ts_dtype gdt = k ? dts[i] : TS_F32;
      check(dts[i], gdt, 3, 7);
      check(dts[i], gdt, 64, 768);   /* GPT-2 rows: parallel */
      check(dts[i], gdt, 5, 5000);   /* rows longer than a sum chunk */
    }
  printf("layernorm 16-bit: row loops exact vs f32 ref, oneDNN bf16 vs oneDNN f32\n");
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 2; k++)
      for (int tr = 1; tr >= 0; tr--) {
        const ts_dtype gdt = k ? dts[i] : TS_F32;
        check_bn(dts[i], gdt, 4, 3, 5 * 7, tr);     /* odd C, H, W */
        check_bn(dts[i], gdt, 2, 5, 9 * 13, tr);
        check_bn(dts[i], gdt, 16, 7, 1, tr);        /* BatchNorm1d (N,C) */
        check_bn(dts[i], gdt, 5, 301, 1, tr);       /* (N,C), more channels than a chunk */
        check_bn(dts[i], gdt, 3, 3, 67 * 61, tr);   /* planes longer than a sum chunk */
        check_bn(dts[i], gdt, 8, 17, 15 * 11, tr);  /* parallel (N*C*S > 16384) */
      }
  printf("batchnorm 16-bit: loops exact vs f32 ref (train/eval, (N,C,S) and (N,C)), oneDNN bf16 vs f32 ref\n");
  for (int i = 0; i < 2; i++)
    for (int dnnl = 0; dnnl < 2; dnnl++) {
      check_bn_sync(dts[i], dnnl, 6, 5, 3 * 7);
      check_bn_sync(dts[i], dnnl, 9, 5, 1);
    }
  printf("sync batchnorm 16-bit: %d shards exact vs the same shards in f32\n", SR);
  return ts_test_finish("test_norm_bf16");
}
