/* The executor's matmul+cast fusion (src/runtime/exec.c, plan_fusions): under mixed precision a
 * weight's gradient is a bf16 matmul cast to f32; when the cast's result is caller memory and the
 * product has no other use, the matmul writes f32 directly.
 *
 * Model: loss = sum(cast(dense(cast(x), cast(W)), f32) * r) with x (M,K), W (N,K), r (M,N) all
 * bf16-representable, so dW = r^T x exactly in real arithmetic. Asserted, on the FAST backend:
 *  - fused: dW within f32 accumulation error of the double reference (|err| <= 1e-5 of
 *    sum |r x| per element: M = 96 terms, f32 eps 6e-8);
 *  - fusion off (ts_plan_set_fusion(p, 0)): dW is that product rounded to bf16, within 2^-8
 *    relative of the reference, and at least one element differs from the fused one (the fusion
 *    ran); the loss and dx (kept, not caller memory: not fused) are bit for bit the same
 *    either way;
 *  - the cast node's hooks fire as often fused as not (a data-parallel bucket waits for them);
 *  - no fusion, bit for bit as fusion off: dW only kept (not caller memory), the product read
 *    twice (W shared by two layers: the gradient is a sum), the REF backend. */
#include <math.h>
#include <string.h>

#include "tessera/runtime.h"
#include "test_util.h"

#define M 96
#define K 40
#define N 24

typedef struct {
  ts_graph *g;
  ts_val x, w, r, loss, gx, gw;
} model;

/* twice: W used by two dense layers (its gradient is the sum of two casts) */
static void build(model *m, int twice) {
  CHECK_OK(ts_graph_create(&m->g));
  ts_graph *g = m->g;
  m->x = ts_input(g, "x", TS_F32, ts_shape2(M, K));
  m->w = ts_input(g, "w", TS_F32, ts_shape2(N, K));
  m->r = ts_input(g, "r", TS_F32, ts_shape2(M, N));
  ts_val_set_requires_grad(g, m->r, 0);
  ts_val xb = ts_cast(g, m->x, TS_BF16), wb = ts_cast(g, m->w, TS_BF16);
  ts_val y = ts_cast(g, ts_dense(g, xb, wb, TS_NONE), TS_F32);
  if (twice) y = ts_add(g, y, ts_cast(g, ts_dense(g, xb, ts_cast(g, m->w, TS_BF16), TS_NONE), TS_F32));
  m->loss = ts_sum(g, ts_mul(g, y, m->r), 3u, 0);
  CHECK_OK(ts_graph_status(g));
  CHECK_OK(ts_graph_backward(g, m->loss, 1.0f));
  m->gx = ts_graph_grad(g, m->x);
  m->gw = ts_graph_grad(g, m->w);
  CHECK(m->gx != TS_NONE && m->gw != TS_NONE);
}

static int cast_ends;
static void count_casts(const ts_hook_info *e, void *user) {
  (void)user;
  if (e->event == TS_HOOK_NODE_END && !strcmp(e->op_name, "cast")) cast_ends++;
}

/* Runs m once with the fusion on or off; bind_gw: dW bound to caller memory (else only kept).
 * Fills loss, gx, gw; returns the number of cast-node end events. */
static int run(model *m, int fusion, int bind_gw, const float *x, const float *w, const float *r, float *loss,
               float *gx, float *gw) {
  ts_val keep[3] = {m->loss, m->gx, m->gw};
  ts_plan *p;
  CHECK_OK(ts_plan_create(m->g, keep, 3, &p));
  ts_plan_set_fusion(p, fusion);
  CHECK_OK(ts_plan_bind(p, m->x, (void *)x));
  CHECK_OK(ts_plan_bind(p, m->w, (void *)w));
  CHECK_OK(ts_plan_bind(p, m->r, (void *)r));
  if (bind_gw) CHECK_OK(ts_plan_bind(p, m->gw, gw));
  cast_ends = 0;
  CHECK_OK(ts_plan_add_hook(p, count_casts, NULL));
  CHECK_OK(ts_plan_run(p, 0));
  CHECK_OK(ts_plan_run(p, 1)); /* twice: the second run sees the fused state of the first reset */
  ts_plan_remove_hook(p, count_casts, NULL);
  *loss = *(const float *)ts_plan_data(p, m->loss);
  memcpy(gx, ts_plan_data(p, m->gx), sizeof(float) * M * K); /* kept only: never fused */
  if (!bind_gw) memcpy(gw, ts_plan_data(p, m->gw), sizeof(float) * N * K);
  ts_plan_free(p);
  return cast_ends;
}

static int same(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

int main(void) {
  static float x[M * K], w[N * K], r[M * N];
  static float gx0[M * K], gx1[M * K], gw0[N * K], gw1[N * K], gw2[N * K], ref[N * K], scale[N * K];
  ts_test_fill(x, M * K, 1, -2, 2);
  ts_test_fill(w, N * K, 2, -1, 1);
  ts_test_fill(r, M * N, 3, -1, 1);
  for (int i = 0; i < M * K; i++) x[i] = ts_test_bf16_round(x[i]);
  for (int i = 0; i < N * K; i++) w[i] = ts_test_bf16_round(w[i]);
  for (int i = 0; i < M * N; i++) r[i] = ts_test_bf16_round(r[i]);
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++) {
      double s = 0, a = 0;
      for (int i = 0; i < M; i++) s += (double)r[i * N + n] * x[i * K + k], a += fabs((double)r[i * N + n] * x[i * K + k]);
      ref[n * K + k] = (float)s;
      scale[n * K + k] = (float)a;
    }
  ts_backend_set(TS_BACKEND_FAST);
  model m;
  build(&m, 0);
  float l0, l1;
  int c1 = run(&m, 1, 1, x, w, r, &l1, gx1, gw1);
  int c0 = run(&m, 0, 1, x, w, r, &l0, gx0, gw0);
  double e1 = 0, e0 = 0;
  int differ = 0;
  for (int i = 0; i < N * K; i++) {
    double s = scale[i] > 1e-6 ? scale[i] : 1e-6;
    double a = fabs(gw1[i] - ref[i]) / s, b = fabs(gw0[i] - ref[i]) / fmax(fabs(ref[i]), s * 1e-3);
    if (a > e1) e1 = a;
    if (b > e0) e0 = b;
    differ += gw1[i] != gw0[i];
  }
  printf("fused dW: worst error %.2e of sum|r x|; unfused (bf16-rounded) dW: worst %.2e relative; %d of %d elements differ\n",
         e1, e0, differ, N * K);
  CHECK_MSG(e1 <= 1e-5, "fused dW off the f32 product: %.3e", e1);
  CHECK_MSG(e0 <= 1.0 / 256, "unfused dW off the bf16-rounded product: %.3e", e0);
  CHECK_MSG(differ > 0, "fusion on and off gave the same dW bit for bit: the fusion did not run");
  for (int i = 0; i < N * K; i++) /* unfused = the fused one rounded to bf16, but for sums near a tie */
    CHECK_MSG(fabsf(gw0[i] - ts_test_bf16_round(gw1[i])) <= fabsf(gw1[i]) * (1.0f / 128) + 1e-30f, "dW[%d] %g vs %g", i,
              gw0[i], gw1[i]);
  CHECK_MSG(l0 == l1 && same(gx0, gx1, M * K), "the loss or dx changed with the fusion");
  CHECK_MSG(c0 == c1 && c0 > 0, "cast hooks: %d fused, %d unfused", c1, c0);

  /* dW only kept: no caller memory, no fusion */
  run(&m, 1, 0, x, w, r, &l1, gx1, gw2);
  CHECK_MSG(same(gw2, gw0, N * K), "kept-only dW was fused");
  /* REF backend: no fusion */
  ts_backend_set(TS_BACKEND_REF);
  run(&m, 0, 1, x, w, r, &l0, gx0, gw0);
  run(&m, 1, 1, x, w, r, &l1, gx1, gw1);
  CHECK_MSG(same(gw0, gw1, N * K) && same(gx0, gx1, M * K) && l0 == l1, "REF backend: fusion changed results");
  ts_backend_set(TS_BACKEND_FAST);
  ts_graph_free(m.g);

  /* W shared by two layers: its gradient is a sum of two casts (temporaries): no fusion */
  build(&m, 1);
  run(&m, 0, 1, x, w, r, &l0, gx0, gw0);
  run(&m, 1, 1, x, w, r, &l1, gx1, gw1);
  CHECK_MSG(same(gw0, gw1, N * K) && l0 == l1, "a shared weight's gradient changed with the fusion");
  ts_graph_free(m.g);
  return ts_test_finish("matmul_cast_fusion");
}
