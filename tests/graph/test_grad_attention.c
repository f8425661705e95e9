/* Causal attention through the graph, autodiff and executor, on both backends (REF: naive
 * kernels, FAST: fused blocked kernels), against central finite differences of a double-precision
 * attention written here: (B,H,T,D) and (B,T,H,D) layouts, T not a multiple of the 64-row block,
 * T = 1, default and explicit scale, a GPT-style chain x -> split q,k,v -> reshape ->
 * attention_bthd -> reshape, and the packed op attention_qkv on x directly. Bad shapes, dtypes and scales give a status naming the op.
 * Tolerance: 1e-4 abs + rel. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/tessera.h"
#include "test_util.h"

/* ------------------------------------------------------------ gradient-check harness
 * y = graph output; loss = dense(reshape(y, (1,ny)), r) = sum(y * r) with a fixed random r (no
 * gradient). Float inputs get random values in [-1,1) unless fixed[k] gives them; integer
 * inputs take fixed[k] (i32/i64 data). The forward `fwd` in double sees every input as doubles.
 * Checks y and every wanted input gradient (up to 256 spread samples per input) against central
 * differences of the double forward, on the REF and FAST backends. */
#define MAXIN 6
typedef void (*fwd_fn)(double *const *x, double *y, const void *ctx);

static int ncases;
static uint64_t run_step = 0; /* step given to ts_plan_run (dropout stream) */

static void check_case(const char *what, ts_graph *g, int nin, const ts_val *x, const int *want,
                       const void *const *fixed, ts_val y, fwd_fn fwd, const void *ctx,
                       double eps, double tol) {
  CHECK_MSG(ts_graph_status(g) == TS_OK, "%s: %s", what, ts_graph_error(g));
  if (ts_graph_status(g) != TS_OK) return;
  ncases++;
  const ts_shape ys = ts_val_shape(g, y);
  const size_t ny = (size_t)ts_shape_numel(&ys);
  ts_val r = ts_input(g, "r", TS_F32, ts_shape2(1, (int64_t)ny));
  ts_val_set_requires_grad(g, r, 0);
  for (int k = 0; k < nin; k++)
    if (!want[k]) ts_val_set_requires_grad(g, x[k], 0);
  ts_val loss = ts_dense(g, ts_reshape(g, y, ts_shape2(1, (int64_t)ny)), r, TS_NONE);
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  if (ts_graph_status(g)) {
    fprintf(stderr, "%s: %s\n", what, ts_graph_error(g));
    return;
  }
  ts_val gx[MAXIN];
  void *xv[MAXIN];
  double *xd[MAXIN];
  size_t nx[MAXIN];
  float *rv = malloc(ny * sizeof(float));
  double *yd = malloc(ny * sizeof(double));
  ts_test_fill(rv, ny, 999 + (uint64_t)ncases, -1, 1);
  for (int k = 0; k < nin; k++) {
    ts_shape s = ts_val_shape(g, x[k]);
    ts_dtype dt = ts_val_dtype(g, x[k]);
    nx[k] = (size_t)ts_shape_numel(&s);
    xv[k] = malloc(nx[k] * ts_dtype_size(dt));
    xd[k] = malloc(nx[k] * sizeof(double));
    if (dt == TS_F32) {
      float *f = xv[k];
      if (fixed && fixed[k])
        memcpy(f, fixed[k], nx[k] * sizeof(float));
      else
        ts_test_fill(f, nx[k], 1000 + 17 * (uint64_t)ncases + (uint64_t)k, -1, 1);
      for (size_t j = 0; j < nx[k]; j++) xd[k][j] = f[j];
    } else {
      memcpy(xv[k], fixed[k], nx[k] * ts_dtype_size(dt));
      for (size_t j = 0; j < nx[k]; j++)
        xd[k][j] = dt == TS_I32 ? (double)((int32_t *)xv[k])[j] : (double)((int64_t *)xv[k])[j];
    }
    gx[k] = ts_graph_grad(g, x[k]);
    CHECK_MSG((gx[k] != TS_NONE) == (want[k] != 0), "%s: input %d gradient presence", what, k);
  }
  float *fd[MAXIN];
  size_t *idx[MAXIN], ns[MAXIN];
  for (int k = 0; k < nin; k++) {
    ns[k] = nx[k] > 256 ? 256 : nx[k];
    idx[k] = malloc(ns[k] * sizeof(size_t));
    for (size_t i = 0; i < ns[k]; i++) idx[k][i] = i * nx[k] / ns[k];
    fd[k] = malloc(ns[k] * sizeof(float));
    for (size_t i = 0; i < ns[k] && want[k]; i++) {
      const size_t j = idx[k][i];
      double s = xd[k][j], lp = 0, lm = 0;
      xd[k][j] = s + eps;
      fwd(xd, yd, ctx);
      for (size_t t = 0; t < ny; t++) lp += yd[t] * rv[t];
      xd[k][j] = s - eps;
      fwd(xd, yd, ctx);
      for (size_t t = 0; t < ny; t++) lm += yd[t] * rv[t];
      xd[k][j] = s;
      fd[k][i] = (float)((lp - lm) / (2 * eps));
    }
  }
  fwd(xd, yd, ctx);
  float *yref = malloc(ny * sizeof(float));
  for (size_t i = 0; i < ny; i++) yref[i] = (float)yd[i];
  for (int be = 0; be < 2; be++) {
    ts_backend_set(be ? TS_BACKEND_FAST : TS_BACKEND_REF);
    ts_val keep[MAXIN + 2];
    int nk = 0;
    keep[nk++] = loss;
    keep[nk++] = y;
    for (int k = 0; k < nin; k++)
      if (gx[k] != TS_NONE) keep[nk++] = gx[k];
    ts_plan *p = NULL;
    CHECK_OK(ts_plan_create(g, keep, nk, &p));
    if (!p) continue;
    for (int k = 0; k < nin; k++) CHECK_OK(ts_plan_bind(p, x[k], xv[k]));
    CHECK_OK(ts_plan_bind(p, r, rv));
    int rc = ts_plan_run(p, run_step);
    CHECK_MSG(rc == TS_OK, "%s: run: %s", what, ts_last_error());
    if (rc == TS_OK) {
      char w[256];
      snprintf(w, sizeof w, "%s [%s] forward", what, be ? "fast" : "ref");
      CHECK_CLOSE((const float *)ts_plan_data(p, y), yref, ny, tol, tol, w);
      for (int k = 0; k < nin; k++) {
        if (gx[k] == TS_NONE) continue;
        snprintf(w, sizeof w, "%s [%s] d input %d vs finite differences", what,
                 be ? "fast" : "ref", k);
        const float *gd = ts_plan_data(p, gx[k]);
        float *gs = malloc(ns[k] * sizeof(float));
        for (size_t i = 0; i < ns[k]; i++) gs[i] = gd[idx[k][i]];
        CHECK_CLOSE(gs, fd[k], ns[k], tol, tol, w);
        free(gs);
      }
    }
    ts_plan_free(p);
  }
  ts_backend_set(TS_BACKEND_FAST);
  for (int k = 0; k < nin; k++) free(xv[k]), free(xd[k]), free(fd[k]), free(idx[k]);
  free(rv), free(yd), free(yref);
}

static void expect_fail(ts_graph *g, ts_val v, int code, const char *needle1, const char *needle2) {
  CHECK(v == TS_NONE);
  CHECK_MSG(ts_graph_status(g) == code, "status %d (%s), wanted %d", ts_graph_status(g),
            ts_graph_error(g), code);
  const char *m = ts_graph_error(g);
  CHECK_MSG(strstr(m, needle1) && (!needle2 || strstr(m, needle2)), "message: %s", m);
}

typedef struct {
  int64_t B, H, T, D;
  double scale;
  int layout; /* 0: (B,H,T,D), 1: (B,T,H,D) */
  int fused;  /* 1: a single input x (B,T,3*H*D) split into q,k,v; output (B,T,H*D) */
} attn_ctx;

/* element (b,h,t,d) of a tensor in the context's layout */
static inline int64_t at(const attn_ctx *c, int64_t b, int64_t h, int64_t t, int64_t d) {
  return c->layout ? ((b * c->T + t) * c->H + h) * c->D + d : ((b * c->H + h) * c->T + t) * c->D + d;
}

static void attn_d(const attn_ctx *c, const double *q, const double *k, const double *v,
                   int64_t ldx, double *o) {
  /* q,k,v addressed by at() scaled for a row stride ldx per (b,t) when fused */
  double *s = malloc(sizeof(double) * (size_t)c->T);
  for (int64_t b = 0; b < c->B; b++)
    for (int64_t h = 0; h < c->H; h++)
      for (int64_t i = 0; i < c->T; i++) {
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; j++) {
          double dot = 0;
          for (int64_t d = 0; d < c->D; d++) {
            int64_t qi = ldx ? (b * c->T + i) * ldx + h * c->D + d : at(c, b, h, i, d);
            int64_t kj = ldx ? (b * c->T + j) * ldx + h * c->D + d : at(c, b, h, j, d);
            dot += q[qi] * k[kj];
          }
          s[j] = dot * c->scale;
          if (s[j] > mx) mx = s[j];
        }
        for (int64_t j = 0; j <= i; j++) sum += exp(s[j] - mx);
        for (int64_t d = 0; d < c->D; d++) {
          double acc = 0;
          for (int64_t j = 0; j <= i; j++) {
            int64_t vj = ldx ? (b * c->T + j) * ldx + h * c->D + d : at(c, b, h, j, d);
            acc += exp(s[j] - mx) / sum * v[vj];
          }
          o[at(c, b, h, i, d)] = acc;
        }
      }
  free(s);
}

static void fwd_attention(double *const *x, double *y, const void *vc) {
  const attn_ctx *c = vc;
  if (c->fused) {
    int64_t C = c->H * c->D;
    attn_d(c, x[0], x[0] + C, x[0] + 2 * C, 3 * C, y);
  } else {
    attn_d(c, x[0], x[1], x[2], 0, y);
  }
}

static void case_attention(int64_t B, int64_t H, int64_t T, int64_t D, int layout, float scale) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_shape s = layout ? ts_shape4(B, T, H, D) : ts_shape4(B, H, T, D);
  ts_val x[3] = {ts_input(g, "q", TS_F32, s), ts_input(g, "k", TS_F32, s),
                 ts_input(g, "v", TS_F32, s)};
  ts_val y = layout ? ts_attention_bthd(g, x[0], x[1], x[2], scale)
                    : ts_attention(g, x[0], x[1], x[2], scale);
  attn_ctx c = {B, H, T, D, scale > 0 ? scale : 1.0 / sqrt((double)D), layout, 0};
  int want[3] = {1, 1, 1};
  char what[128], b[64];
  snprintf(what, sizeof what, "attention %s %s scale %g", layout ? "bthd" : "bhtd",
           ts_shape_str(&s, b, sizeof b), (double)scale);
  check_case(what, g, 3, x, want, NULL, y, fwd_attention, &c, 1e-4, 1e-4);
  ts_graph_free(g);
}

/* x (B,T,3C) -> split q,k,v (B,T,C) -> reshape (B,T,H,D) -> attention_bthd -> (B,T,C) */
static void case_gpt_chain(int64_t B, int64_t T, int64_t H, int64_t D) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  int64_t C = H * D;
  ts_val x = ts_input(g, "x", TS_F32, ts_shape3(B, T, 3 * C));
  ts_val qkv[3];
  CHECK_OK(ts_split(g, x, 2, (int64_t[]){C, C, C}, 3, qkv));
  for (int j = 0; j < 3; j++) qkv[j] = ts_reshape(g, qkv[j], ts_shape4(B, T, H, -1));
  ts_val o = ts_attention_bthd(g, qkv[0], qkv[1], qkv[2], 0.0f);
  ts_val y = ts_reshape(g, o, ts_shape3(B, T, C));
  attn_ctx c = {B, H, T, D, 1.0 / sqrt((double)D), 1, 1};
  int want[1] = {1};
  check_case("gpt chain x -> split -> reshape -> attention_bthd -> reshape", g, 1, &x, want, NULL,
             y, fwd_attention, &c, 1e-4, 1e-4);
  ts_graph_free(g);
}

/* the same chain with the packed op: x (B,T,3C) -> attention_qkv -> (B,T,C) */
static void case_packed(int64_t B, int64_t T, int64_t H, int64_t D, float scale) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  int64_t C = H * D;
  ts_val x = ts_input(g, "x", TS_F32, ts_shape3(B, T, 3 * C));
  ts_val y = ts_attention_qkv(g, x, (int)H, scale);
  ts_shape ys = ts_val_shape(g, y);
  CHECK(ys.ndim == 3 && ys.dims[2] == C);
  attn_ctx c = {B, H, T, D, scale > 0 ? scale : 1.0 / sqrt((double)D), 1, 1};
  int want[1] = {1};
  char what[96];
  snprintf(what, sizeof what, "attention_qkv (%lld,%lld,3*%lld) heads %lld", (long long)B,
           (long long)T, (long long)C, (long long)H);
  check_case(what, g, 1, &x, want, NULL, y, fwd_attention, &c, 1e-4, 1e-4);
  ts_graph_free(g);
}

static void bad_inputs(void) {
  ts_graph *g;
  ts_val q, k, v;
  CHECK_OK(ts_graph_create(&g));
  q = ts_input(g, "q", TS_F32, ts_shape4(2, 3, 5, 8));
  k = ts_input(g, "k", TS_F32, ts_shape4(2, 3, 6, 8));
  expect_fail(g, ts_attention(g, q, k, q, 0.0f), TS_ESHAPE, "attention", "(2,3,6,8)");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  q = ts_input(g, "q", TS_F32, ts_shape3(2, 5, 8));
  expect_fail(g, ts_attention(g, q, q, q, 0.0f), TS_ESHAPE, "attention", "4-D");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  q = ts_input(g, "q", TS_F32, ts_shape4(1, 1, 4, 4));
  v = ts_input(g, "v", TS_BF16, ts_shape4(1, 1, 4, 4));
  expect_fail(g, ts_attention(g, q, q, v, 0.0f), TS_EDTYPE, "attention", "f32");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  q = ts_input(g, "q", TS_F32, ts_shape4(1, 1, 4, 4));
  expect_fail(g, ts_attention(g, q, q, q, -1.0f), TS_EINVAL, "attention", "scale");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  q = ts_input(g, "q", TS_F32, ts_shape4(1, 1, 4, 4));
  expect_fail(g, ts_attention(g, q, TS_NONE, q, 0.0f), TS_EINVAL, "attention", NULL);
  ts_graph_free(g);
  CHECK_OK(ts_graph_create(&g));
  q = ts_input(g, "qkv", TS_F32, ts_shape3(2, 5, 20));
  expect_fail(g, ts_attention_qkv(g, q, 3, 0.0f), TS_ESHAPE, "attention", "n_head (3)");
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  q = ts_input(g, "qkv", TS_F32, ts_shape4(2, 5, 3, 8));
  expect_fail(g, ts_attention_qkv(g, q, 1, 0.0f), TS_ESHAPE, "attention", "3-D");
  ts_graph_free(g);
  printf("bad input: k shape, 3-D q, bf16 v, negative scale, TS_NONE, packed qkv width/rank\n");
}

int main(void) {
  case_attention(2, 3, 37, 16, 0, 0.0f);
  case_attention(1, 2, 70, 8, 1, 0.0f);  /* two query blocks in the fused kernels */
  case_attention(2, 1, 1, 4, 0, 0.5f);   /* T = 1 */
  case_attention(1, 2, 9, 5, 1, 0.9f);
  case_gpt_chain(2, 11, 2, 4);
  case_packed(2, 11, 2, 4, 0.0f);
  case_packed(1, 67, 3, 5, 0.3f); /* two query blocks */
  printf("attention: %d graphs ref+fast vs FD in double\n", ncases);
  bad_inputs();
  return ts_test_finish("test_grad_attention");
}
