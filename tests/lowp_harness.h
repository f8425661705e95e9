/* Harness of the 16-bit (bf16/f16) graph-op tests (tests/graph/test_lowp_*.c): header-only.
 *
 * lh_check(what, dt, build, ctx, c) builds the same graph twice, once with its float inputs f32
 * and once with them of dtype dt (bf16 or f16), on the same values (generated in [lo,hi) and
 * rounded to dt, so both graphs see identical inputs). Each graph is
 *   y = build(inputs); loss = sum(cast(y, f32) * r) (r fixed, f32, no gradient);
 *   ts_graph_backward(loss)
 * and runs through plan + executor on the REF and the FAST backend. Checks: y has dtype dt (or
 * f32 when c->y_f32: e.g. softmax_ce's loss), every float input's gradient exists and has its
 * input's dtype, and y and the gradients of the dt graph agree with the f32 graph's within
 *   |a - b| <= atol + rtol |b|   (fwd_* for y, grad_* for gradients)
 * on the same backend (or, with c->grad_l2, gradients by relative L2 error). Inputs of kind LH_INT are integer inputs whose values c->data[k] gives
 * (dtype c->idt[k]); inputs of kind LH_F32 stay f32 in both graphs (e.g. batch-norm statistics). */
#ifndef TS_TEST_LOWP_HARNESS_H
#define TS_TEST_LOWP_HARNESS_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/tessera.h"
#include "test_util.h"

#define LH_MAX 8
enum { LH_FLOAT = 0, LH_INT = 1, LH_F32 = 2 };

typedef ts_val (*lh_build_fn)(ts_graph *g, const ts_val *x, const void *ctx);
/* The dtype of the graph being built (f32 or the case's dt): builders that cast inside (an
 * "amp by hand" graph whose inputs stay f32) read it. */
static ts_dtype lh_cur_dt __attribute__((unused));

typedef struct {
  int nin;
  ts_shape shape[LH_MAX];
  int kind[LH_MAX];          /* LH_FLOAT (default), LH_INT, LH_F32 */
  ts_dtype idt[LH_MAX];      /* LH_INT: the integer dtype */
  const void *data[LH_MAX];  /* LH_INT: values; float kinds: NULL (generated) or f32 values */
  int no_grad[LH_MAX];       /* 1: requires_grad off (no gradient checked) */
  float lo, hi;              /* generated range; default [-1, 1) */
  double fwd_atol, fwd_rtol, grad_atol, grad_rtol;
  int y_f32;                 /* y stays f32 in the dt graph */
  double grad_l2;            /* > 0: gradients compared by relative L2 error
                              * ||g - g32|| / ||g32|| <= grad_l2 instead of element-wise: for
                              * blocks with relu/maxpool, where a 16-bit rounding can flip which
                              * element is positive or the maximum and reroute single gradients */
  uint64_t step;
} lh_case;

static float lh_round(float v, ts_dtype dt) {
  if (dt == TS_BF16) return ts_bf16_to_f32(ts_f32_to_bf16(v));
  if (dt == TS_F16) return ts_f16_to_f32(ts_f32_to_f16(v));
  return v;
}

/* Runs one graph (dtype D for float inputs) on backend be; fills y and grads (f32 copies). */
static void lh_run(const char *what, ts_dtype D, ts_backend be, lh_build_fn build, const void *ctx,
                   const lh_case *c, float *const *xv, float *yout, int64_t ny, float *const *gout,
                   const float *r) {
  ts_graph *g = NULL;
  CHECK_OK(ts_graph_create(&g));
  if (!g) return;
  ts_val x[LH_MAX], gx[LH_MAX];
  for (int k = 0; k < c->nin; k++) {
    char nm[16];
    snprintf(nm, sizeof nm, "x%d", k);
    ts_dtype dk = c->kind[k] == LH_INT ? c->idt[k] : c->kind[k] == LH_F32 ? TS_F32 : D;
    x[k] = ts_input(g, nm, dk, c->shape[k]);
    if (c->no_grad[k] || c->kind[k] == LH_INT) ts_val_set_requires_grad(g, x[k], 0);
  }
  lh_cur_dt = D;
  ts_val y = build(g, x, ctx);
  ts_val y32 = ts_cast(g, y, TS_F32);
  ts_val rv = ts_input(g, "lh_r", TS_F32, ts_shape2(1, ny));
  ts_val_set_requires_grad(g, rv, 0);
  ts_val loss = ts_dense(g, ts_reshape(g, y32, ts_shape2(1, ny)), rv, TS_NONE);
  int rc = ts_graph_status(g);
  CHECK_MSG(rc == TS_OK, "%s (%s): graph: %s", what, ts_dtype_name(D), ts_graph_error(g));
  if (rc) {
    ts_graph_free(g);
    return;
  }
  const ts_dtype ywant = c->y_f32 ? TS_F32 : D;
  CHECK_MSG(ts_val_dtype(g, y) == ywant, "%s: y is %s, expected %s", what,
            ts_dtype_name(ts_val_dtype(g, y)), ts_dtype_name(ywant));
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  ts_val keep[LH_MAX + 2];
  int nk = 0;
  keep[nk++] = y;
  keep[nk++] = loss;
  for (int k = 0; k < c->nin; k++) {
    gx[k] = TS_NONE;
    if (c->no_grad[k] || c->kind[k] == LH_INT) continue;
    gx[k] = ts_graph_grad(g, x[k]);
    CHECK_MSG(gx[k] != TS_NONE, "%s (%s): input %d has no gradient", what, ts_dtype_name(D), k);
    if (gx[k] == TS_NONE) continue;
    CHECK_MSG(ts_val_dtype(g, gx[k]) == ts_val_dtype(g, x[k]), "%s: gradient of input %d is %s, input %s",
              what, k, ts_dtype_name(ts_val_dtype(g, gx[k])), ts_dtype_name(ts_val_dtype(g, x[k])));
    keep[nk++] = gx[k];
  }
  ts_backend_set(be);
  ts_plan *p = NULL;
  rc = ts_plan_create(g, keep, nk, &p);
  CHECK_MSG(rc == TS_OK, "%s: plan: %s", what, ts_last_error());
  void *bufs[LH_MAX] = {0};
  for (int k = 0; p && k < c->nin; k++) {
    const int64_t n = ts_shape_numel(&c->shape[k]);
    const ts_dtype dk = ts_val_dtype(g, x[k]);
    bufs[k] = malloc((size_t)n * ts_dtype_size(dk));
    if (c->kind[k] == LH_INT) memcpy(bufs[k], c->data[k], (size_t)n * ts_dtype_size(dk));
    else ts_convert(xv[k], TS_F32, bufs[k], dk, (size_t)n);
    CHECK_OK(ts_plan_bind(p, x[k], bufs[k]));
  }
  if (p) {
    CHECK_OK(ts_plan_bind(p, rv, (void *)r));
    rc = ts_plan_run(p, c->step);
    CHECK_MSG(rc == TS_OK, "%s (%s, %s): run: %s", what, ts_dtype_name(D), be == TS_BACKEND_REF ? "ref" : "fast",
              ts_last_error());
    if (rc == TS_OK) {
      ts_convert(ts_plan_data(p, y), ts_val_dtype(g, y), yout, TS_F32, (size_t)ny);
      for (int k = 0; k < c->nin; k++)
        if (gx[k] != TS_NONE)
          ts_convert(ts_plan_data(p, gx[k]), ts_val_dtype(g, gx[k]), gout[k], TS_F32,
                     (size_t)ts_shape_numel(&c->shape[k]));
    }
    ts_plan_free(p);
  }
  for (int k = 0; k < c->nin; k++) free(bufs[k]);
  ts_backend_set(TS_BACKEND_FAST);
  ts_graph_free(g);
}

static void __attribute__((unused)) lh_check(const char *what, ts_dtype dt, lh_build_fn build,
                                             const void *ctx, const lh_case *c, int64_t ny) {
  static uint64_t seed = 1000;
  float *xv[LH_MAX] = {0}, *g32[LH_MAX] = {0}, *g16[LH_MAX] = {0};
  for (int k = 0; k < c->nin; k++) {
    const int64_t n = ts_shape_numel(&c->shape[k]);
    xv[k] = calloc((size_t)n, sizeof(float));
    g32[k] = calloc((size_t)n, sizeof(float));
    g16[k] = calloc((size_t)n, sizeof(float));
    if (c->kind[k] == LH_INT) continue;
    if (c->data[k]) memcpy(xv[k], c->data[k], (size_t)n * sizeof(float));
    else ts_test_fill(xv[k], (size_t)n, seed++, c->lo != c->hi ? c->lo : -1.f, c->lo != c->hi ? c->hi : 1.f);
    for (int64_t i = 0; i < n; i++) xv[k][i] = lh_round(xv[k][i], dt);
  }
  float *r = malloc((size_t)ny * sizeof(float)), *y32 = calloc((size_t)ny, sizeof(float)),
        *y16 = calloc((size_t)ny, sizeof(float));
  ts_test_fill(r, (size_t)ny, seed++, -1.f, 1.f);
  for (int be = 0; be < 2; be++) {
    const ts_backend b = be ? TS_BACKEND_FAST : TS_BACKEND_REF;
    char w[200];
    lh_run(what, TS_F32, b, build, ctx, c, xv, y32, ny, g32, r);
    lh_run(what, dt, b, build, ctx, c, xv, y16, ny, g16, r);
    snprintf(w, sizeof w, "%s %s %s: y", what, ts_dtype_name(dt), be ? "fast" : "ref");
    CHECK_CLOSE(y16, y32, (size_t)ny, c->fwd_atol, c->fwd_rtol, w);
    for (int k = 0; k < c->nin; k++) {
      if (c->no_grad[k] || c->kind[k] == LH_INT) continue;
      snprintf(w, sizeof w, "%s %s %s: gradient of input %d", what, ts_dtype_name(dt), be ? "fast" : "ref", k);
      const int64_t nk = ts_shape_numel(&c->shape[k]);
      if (c->grad_l2 > 0) {
        double num = 0, den = 0;
        for (int64_t i = 0; i < nk; i++) {
          num += ((double)g16[k][i] - g32[k][i]) * ((double)g16[k][i] - g32[k][i]);
          den += (double)g32[k][i] * g32[k][i];
        }
        const double e = den > 0 ? sqrt(num / den) : sqrt(num);
        CHECK_MSG(e <= c->grad_l2, "%s: relative L2 error %.4g > %.4g", w, e, c->grad_l2);
      } else {
        CHECK_CLOSE(g16[k], g32[k], (size_t)nk, c->grad_atol, c->grad_rtol, w);
      }
    }
  }
  for (int k = 0; k < c->nin; k++) {
    free(xv[k]);
    free(g32[k]);
    free(g16[k]);
  }
  free(r);
  free(y32);
  free(y16);
}

#endif
