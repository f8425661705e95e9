/* Every op family besides matmul/conv (test_lowp_matmul.c, test_lowp_conv.c) on bf16 and f16:
 * forward and backward through graph, autodiff, planner and executor on both backends, against
 * the same graph in f32 on the same 16-bit representable inputs (tests/lowp_harness.h). The
 * 16-bit graph rounds each op's output (and each gradient) once, 2^-9 relative for bf16, so
 * tolerances are stated per family as (atol, rtol) for bf16; f16 (unit roundoff 2^-11, 8x
 * smaller, but gradients sum several rounded terms) uses a quarter of them:
 *   eltwise, binary, scale, dropout, pooling, shape ops, cast   (1e-2, 1e-2)  one rounding
 *   reduce, softmax, log-softmax, embedding                     (2e-2, 1.5e-2) f32 sums, rounded once
 *   layernorm, batchnorm, attention, softmax_ce                 (4e-2, 2e-2)  dx sums several
 *                                                                           rounded terms
 *   2-layer MLP (dense-gelu-dense-CE), gradients of every parameter   (5e-2, 3e-2)
 *   conv-bn-relu-maxpool blocks: y (5e-2, 3e-2); gradients by relative L2 error <= 5e-2 (f16
 *   1.5e-2; measured 2.5e-2 and 8e-3: batch norm divides by small channel deviations), since a 16-bit rounding may flip a relu sign or a maxpool arg-max and reroute a few
 *   single gradients (element-wise they can differ by O(1) where that happens)
 * "Amp by hand" graphs (f32 parameters, ts_cast to 16-bit around the dense layers / the conv and
 * back to f32 for the loss / batch norm) train: the gradients of the f32 parameters are f32 and
 * match the all-f32 graph's (5e-2, 3e-2). */
#include <math.h>

#include "lowp_harness.h"

static ts_dtype g_dt;

static lh_case mk(int nin, double atol, double rtol) {
  lh_case c;
  memset(&c, 0, sizeof c);
  c.nin = nin;
  const double s = g_dt == TS_BF16 ? 1 : 0.25;
  c.fwd_atol = c.grad_atol = atol * s;
  c.fwd_rtol = c.grad_rtol = rtol * s;
  return c;
}

/* ---------------------------------------------------------------- builders */

static ts_val b_elt(ts_graph *g, const ts_val *x, const void *ctx) {
  return ts_eltwise(g, x[0], (ts_eltwise_alg)(intptr_t)ctx);
}
static ts_val b_bin(ts_graph *g, const ts_val *x, const void *ctx) {
  return ts_binary(g, x[0], x[1], (ts_binary_alg)(intptr_t)ctx);
}
static ts_val b_scale(ts_graph *g, const ts_val *x, const void *ctx) { return ts_scale(g, x[0], 1.5f, -0.25f); }
static ts_val b_softmax(ts_graph *g, const ts_val *x, const void *ctx) {
  return ctx ? ts_log_softmax(g, x[0], -1) : ts_softmax(g, x[0], 1);
}
static ts_val b_ln(ts_graph *g, const ts_val *x, const void *ctx) { return ts_layernorm(g, x[0], x[1], x[2], 1e-5f); }
static ts_val b_bn(ts_graph *g, const ts_val *x, const void *ctx) {
  return ts_batchnorm(g, x[0], x[1], x[2], x[3], x[4], 0.1f, 1e-5f);
}
static ts_val b_emb(ts_graph *g, const ts_val *x, const void *ctx) { return ts_embedding(g, x[0], x[1]); }
static ts_val b_pool(ts_graph *g, const ts_val *x, const void *ctx) {
  const int k = (int)(intptr_t)ctx;
  return k == 0 ? ts_maxpool2d(g, x[0], 2, 2, 2, 2, 0, 0)
         : k == 1 ? ts_avgpool2d(g, x[0], 3, 3, 2, 2, 1, 1)
                  : ts_global_avgpool(g, x[0]);
}
static ts_val b_red(ts_graph *g, const ts_val *x, const void *ctx) {
  return ts_reduce(g, x[0], (ts_reduce_alg)(intptr_t)ctx, 0x5, 0);
}
static ts_val b_drop(ts_graph *g, const ts_val *x, const void *ctx) { return ts_dropout(g, x[0], 0.3f, 42); }
static ts_val b_ce(ts_graph *g, const ts_val *x, const void *ctx) {
  return ts_softmax_cross_entropy(g, x[0], x[1], ctx ? 0.1f : 0.f);
}
static ts_val b_attn(ts_graph *g, const ts_val *x, const void *ctx) {
  if (ctx && !strcmp(ctx, "bthd")) return ts_attention_bthd(g, x[0], x[1], x[2], 0.f);
  return ctx ? ts_attention_qkv(g, x[0], 2, 0.f) : ts_attention(g, x[0], x[1], x[2], 0.f);
}
static ts_val b_shape(ts_graph *g, const ts_val *x, const void *ctx) {
  const int k = (int)(intptr_t)ctx;
  static const int perm[3] = {2, 0, 1};
  if (k == 0) return ts_permute(g, x[0], perm);
  if (k == 1) return ts_concat(g, x, 2, 1);
  if (k == 2) return ts_slice(g, x[0], 2, 1, 4);
  if (k == 3) {
    ts_val o[2];
    const int64_t sz[2] = {2, 3};
    ts_split(g, x[0], 1, sz, 2, o);
    return ts_mul(g, o[0], ts_slice(g, o[1], 1, 0, 2));
  }
  if (k == 4) return ts_copy(g, ts_reshape(g, x[0], ts_shape2(3, 30)));
  return ts_broadcast_to(g, ts_sum_to(g, x[0], ts_shape2(5, 6)), ts_shape3(2, 5, 6));
}
/* a 16-bit value cast to f32, used in f32, cast back: CAST's gradient both ways */
static ts_val b_cast(ts_graph *g, const ts_val *x, const void *ctx) {
  return ts_cast(g, ts_scale(g, ts_cast(g, x[0], TS_F32), 2.f, 0.f), ts_val_dtype(g, x[0]));
}

/* 2-layer MLP: x (8,32), w1 (48,32), b1 (48), w2 (10,48), b2 (10), labels (8) -> CE loss */
static ts_val b_mlp(ts_graph *g, const ts_val *x, const void *ctx) {
  ts_val h = ts_gelu(g, ts_dense(g, x[0], x[1], x[2]), 1);
  return ts_softmax_cross_entropy(g, ts_dense(g, h, x[3], x[4]), x[5], 0.f);
}
/* conv-bn-relu-maxpool: x (2,8,8,8), w (16,8,3,3), gamma, beta (16), rmean, rvar (16) f32 */
static ts_val b_block(ts_graph *g, const ts_val *x, const void *ctx) {
  ts_val y = ts_conv2d(g, x[0], x[1], TS_NONE, 1, 1, 1, 1, 1, 1, 1);
  y = ts_relu(g, ts_batchnorm(g, y, x[2], x[3], x[4], x[5], 0.1f, 1e-5f));
  return ts_maxpool2d(g, y, 2, 2, 2, 2, 0, 0);
}
/* amp by hand: f32 x, w1, b1, w2, b2; the dense layers run in the case's dtype between casts */
static ts_val b_amp(ts_graph *g, const ts_val *x, const void *ctx) {
  ts_val c[5];
  for (int k = 0; k < 5; k++) c[k] = ts_cast(g, x[k], lh_cur_dt);
  ts_val h = ts_relu(g, ts_dense(g, c[0], c[1], c[2]));
  ts_val z = ts_cast(g, ts_dense(g, h, c[3], c[4]), TS_F32);
  return ts_softmax_cross_entropy(g, z, x[5], 0.f);
}

/* amp by hand around a conv: f32 x, w, gamma, beta (rmean, rvar f32 state); the conv runs in the
 * case's dtype between casts, batch norm and relu in f32 (O2's split) */
static ts_val b_amp_conv(ts_graph *g, const ts_val *x, const void *ctx) {
  ts_val y = ts_conv2d(g, ts_cast(g, x[0], lh_cur_dt), ts_cast(g, x[1], lh_cur_dt), TS_NONE, 1, 1, 1, 1, 1, 1, 1);
  y = ts_batchnorm(g, ts_cast(g, y, TS_F32), x[2], x[3], x[4], x[5], 0.1f, 1e-5f);
  return ts_maxpool2d(g, ts_relu(g, y), 2, 2, 2, 2, 0, 0);
}

/* Trains the amp-by-hand MLP (f32 params, dense layers in dt between casts) and the same MLP in
 * f32 for 30 plain SGD steps on one fixed batch: the loss must fall below half its start in both,
 * and the two loss curves stay within 5e-2 + 5e-2 |loss| of each other (bf16; f16 a quarter). */
static float train_mlp(ts_dtype dt, float *curve, int steps) {
  static int32_t labels[16];
  for (int i = 0; i < 16; i++) labels[i] = (i * 7) % 10;
  ts_graph *g;
  if (ts_graph_create(&g)) return NAN;
  static const int64_t shp[5][2] = {{16, 32}, {48, 32}, {48, 0}, {10, 48}, {10, 0}};
  ts_val x[6];
  float *buf[6];
  for (int k = 0; k < 5; k++) {
    ts_shape s = shp[k][1] ? ts_shape2(shp[k][0], shp[k][1]) : ts_shape1(shp[k][0]);
    char nm[8];
    snprintf(nm, sizeof nm, "p%d", k);
    x[k] = ts_input(g, nm, TS_F32, s);
    buf[k] = malloc((size_t)ts_shape_numel(&s) * 4);
    ts_test_fill(buf[k], (size_t)ts_shape_numel(&s), 500 + (uint64_t)k, k == 0 ? -1.f : -0.3f, k == 0 ? 1.f : 0.3f);
  }
  ts_val_set_requires_grad(g, x[0], 0);
  x[5] = ts_input(g, "labels", TS_I32, ts_shape1(16));
  lh_cur_dt = dt;
  ts_val loss = b_amp(g, x, NULL);
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  ts_val keep[5] = {loss};
  for (int k = 1; k < 5; k++) {
    keep[k] = ts_graph_grad(g, x[k]);
    CHECK(keep[k] != TS_NONE && ts_val_dtype(g, keep[k]) == TS_F32);
  }
  ts_plan *p = NULL;
  CHECK_OK(ts_plan_create(g, keep, 5, &p));
  for (int k = 0; p && k < 5; k++) CHECK_OK(ts_plan_bind(p, x[k], buf[k]));
  if (p) CHECK_OK(ts_plan_bind(p, x[5], labels));
  for (int st = 0; p && st < steps; st++) {
    CHECK_OK(ts_plan_run(p, (uint64_t)st));
    curve[st] = *(const float *)ts_plan_data(p, loss);
    for (int k = 1; k < 5; k++) {
      const float *gr = ts_plan_data(p, keep[k]);
      const int64_t n = shp[k][0] * (shp[k][1] ? shp[k][1] : 1);
      for (int64_t i = 0; i < n; i++) buf[k][i] -= 0.5f * gr[i];
    }
  }
  ts_plan_free(p);
  ts_graph_free(g);
  for (int k = 0; k < 5; k++) free(buf[k]);
  return curve[steps - 1];
}

static void check_training(ts_dtype dt) {
  enum { STEPS = 30 };
  float c32[STEPS], c16[STEPS];
  train_mlp(TS_F32, c32, STEPS);
  train_mlp(dt, c16, STEPS);
  CHECK_MSG(c16[STEPS - 1] < 0.5f * c16[0], "amp by hand (%s) training: loss %g -> %g", ts_dtype_name(dt), c16[0],
            c16[STEPS - 1]);
  CHECK_MSG(c32[STEPS - 1] < 0.5f * c32[0], "f32 training: loss %g -> %g", c32[0], c32[STEPS - 1]);
  printf("amp by hand %s: loss %.4f -> %.4f over %d SGD steps (f32 graph %.4f -> %.4f)\n", ts_dtype_name(dt), c16[0],
         c16[STEPS - 1], STEPS, c32[0], c32[STEPS - 1]);
  const double s = dt == TS_BF16 ? 1 : 0.25;
  char w[64];
  snprintf(w, sizeof w, "amp by hand (%s) loss curve vs f32", ts_dtype_name(dt));
  CHECK_CLOSE(c16, c32, STEPS, 5e-2 * s, 5e-2 * s, w);
}

int main(void) {
  const ts_dtype dts[2] = {TS_BF16, TS_F16};
  static int32_t ids[12], labels[8];
  for (int i = 0; i < 12; i++) ids[i] = (i * 7) % 10;
  for (int i = 0; i < 8; i++) labels[i] = (i * 3) % 10;
  labels[5] = -100; /* ignored row */
  for (int di = 0; di < 2; di++) {
    g_dt = dts[di];
    const ts_dtype dt = g_dt;
    lh_case c;
    /* eltwise */
    for (int alg = 0; alg < TS_ELT_COUNT; alg++) {
      c = mk(1, 1e-2, 1e-2);
      c.shape[0] = ts_shape2(7, 33);
      if (alg == TS_ELT_LOG || alg == TS_ELT_SQRT) c.lo = 0.25f, c.hi = 2.f;
      char w[64];
      snprintf(w, sizeof w, "eltwise alg %d", alg);
      lh_check(w, dt, b_elt, (void *)(intptr_t)alg, &c, 7 * 33);
    }
    /* binary with broadcasting, scale */
    for (int alg = 0; alg < TS_BIN_COUNT; alg++) {
      c = mk(2, 1e-2, 1e-2);
      c.shape[0] = ts_shape3(2, 5, 6), c.shape[1] = ts_shape2(1, 6);
      if (alg == TS_BIN_DIV) c.lo = 0.5f, c.hi = 2.f;
      lh_check("binary (2,5,6) op (1,6)", dt, b_bin, (void *)(intptr_t)alg, &c, 60);
      c.shape[0] = ts_shape2(5, 1), c.shape[1] = ts_shape3(2, 5, 6);
      lh_check("binary (5,1) op (2,5,6)", dt, b_bin, (void *)(intptr_t)alg, &c, 60);
      c.shape[0] = c.shape[1] = ts_shape2(9, 17);
      lh_check("binary same shape", dt, b_bin, (void *)(intptr_t)alg, &c, 9 * 17);
    }
    c = mk(1, 1e-2, 1e-2);
    c.shape[0] = ts_shape2(4, 9);
    lh_check("scale", dt, b_scale, NULL, &c, 36);
    /* softmax, log-softmax */
    c = mk(1, 2e-2, 1.5e-2);
    c.shape[0] = ts_shape3(3, 10, 4);
    lh_check("softmax axis 1", dt, b_softmax, NULL, &c, 120);
    c.shape[0] = ts_shape2(6, 50);
    lh_check("log_softmax", dt, b_softmax, "log", &c, 300);
    /* layernorm: gamma/beta of x's dtype, or f32 */
    c = mk(3, 4e-2, 2e-2);
    c.shape[0] = ts_shape3(2, 3, 32), c.shape[1] = c.shape[2] = ts_shape1(32);
    lh_check("layernorm", dt, b_ln, NULL, &c, 192);
    c.kind[1] = c.kind[2] = LH_F32;
    lh_check("layernorm f32 gamma", dt, b_ln, NULL, &c, 192);
    /* batchnorm (training), running statistics f32 */
    c = mk(5, 4e-2, 2e-2);
    c.shape[0] = ts_shape4(4, 3, 5, 5);
    for (int k = 1; k < 5; k++) c.shape[k] = ts_shape1(3);
    c.kind[3] = c.kind[4] = LH_F32, c.no_grad[3] = c.no_grad[4] = 1;
    static const float ones[3] = {1, 1, 1};
    c.data[4] = ones;
    lh_check("batchnorm", dt, b_bn, NULL, &c, 300);
    c.kind[1] = c.kind[2] = LH_F32;
    lh_check("batchnorm f32 gamma", dt, b_bn, NULL, &c, 300);
    /* embedding */
    c = mk(2, 2e-2, 1.5e-2);
    c.shape[0] = ts_shape2(10, 16), c.shape[1] = ts_shape2(3, 4);
    c.kind[1] = LH_INT, c.idt[1] = TS_I32, c.data[1] = ids;
    lh_check("embedding", dt, b_emb, NULL, &c, 12 * 16);
    /* pooling */
    for (int k = 0; k < 3; k++) {
      c = mk(1, 1e-2, 1e-2);
      c.shape[0] = ts_shape4(2, 3, 8, 8);
      lh_check(k == 0 ? "maxpool" : k == 1 ? "avgpool" : "global avgpool", dt, b_pool, (void *)(intptr_t)k, &c,
               k == 0 ? 96 : k == 1 ? 96 : 6);
    }
    /* reduce over axes 0 and 2 */
    for (int alg = 0; alg < TS_RED_COUNT; alg++) {
      c = mk(1, 2e-2, 1.5e-2);
      c.shape[0] = ts_shape3(4, 5, 6);
      lh_check("reduce", dt, b_red, (void *)(intptr_t)alg, &c, 5);
    }
    /* dropout */
    c = mk(1, 1e-2, 1e-2);
    c.shape[0] = ts_shape2(16, 40);
    c.step = 3;
    lh_check("dropout", dt, b_drop, NULL, &c, 640);
    /* softmax cross-entropy: the loss stays f32 */
    c = mk(2, 4e-2, 2e-2);
    c.shape[0] = ts_shape2(8, 10), c.shape[1] = ts_shape1(8);
    c.kind[1] = LH_INT, c.idt[1] = TS_I32, c.data[1] = labels;
    c.y_f32 = 1;
    lh_check("softmax_ce", dt, b_ce, NULL, &c, 1);
    lh_check("softmax_ce smoothing", dt, b_ce, "s", &c, 1);
    /* attention */
    c = mk(3, 4e-2, 2e-2);
    c.shape[0] = c.shape[1] = c.shape[2] = ts_shape4(1, 2, 8, 16);
    lh_check("attention", dt, b_attn, NULL, &c, 256);
    c.nin = 1;
    c.shape[0] = ts_shape3(2, 6, 3 * 32);
    lh_check("attention qkv", dt, b_attn, "qkv", &c, 2 * 6 * 32);
    c.nin = 3;
    c.shape[0] = c.shape[1] = c.shape[2] = ts_shape4(2, 80, 2, 16); /* (B,T,H,D): two query blocks */
    lh_check("attention bthd T=80", dt, b_attn, "bthd", &c, 2 * 80 * 2 * 16);
    /* shape ops, copy, sum_to/broadcast_to, cast */
    for (int k = 0; k < 6; k++) {
      c = mk(k == 1 ? 2 : 1, 1e-2, 1e-2);
      c.shape[0] = k == 3 ? ts_shape2(4, 5) : k == 5 ? ts_shape3(2, 5, 6) : ts_shape3(2, 5, 9);
      c.shape[1] = ts_shape3(2, 3, 9);
      static const int64_t ny[6] = {90, 144, 30, 8, 90, 60};
      if (k == 3) c.shape[0] = ts_shape2(4, 5);
      char w[32];
      snprintf(w, sizeof w, "shape op %d", k);
      lh_check(w, dt, b_shape, (void *)(intptr_t)k, &c, ny[k]);
    }
    c = mk(1, 1e-2, 1e-2);
    c.shape[0] = ts_shape2(3, 7);
    lh_check("cast round trip", dt, b_cast, NULL, &c, 21);
    /* whole blocks */
    c = mk(6, 5e-2, 3e-2);
    c.shape[0] = ts_shape2(8, 32), c.shape[1] = ts_shape2(48, 32), c.shape[2] = ts_shape1(48);
    c.shape[3] = ts_shape2(10, 48), c.shape[4] = ts_shape1(10), c.shape[5] = ts_shape1(8);
    c.kind[5] = LH_INT, c.idt[5] = TS_I32, c.data[5] = labels;
    c.y_f32 = 1;
    lh_check("mlp", dt, b_mlp, NULL, &c, 1);
    for (int k = 0; k < 5; k++) c.kind[k] = LH_F32;
    lh_check("amp by hand (f32 params, 16-bit dense)", dt, b_amp, NULL, &c, 1);
    c = mk(6, 5e-2, 3e-2);
    c.shape[0] = ts_shape4(2, 8, 8, 8), c.shape[1] = ts_shape4(16, 8, 3, 3);
    for (int k = 2; k < 6; k++) c.shape[k] = ts_shape1(16);
    c.kind[4] = c.kind[5] = LH_F32, c.no_grad[4] = c.no_grad[5] = 1;
    static float ones16[16];
    for (int k = 0; k < 16; k++) ones16[k] = 1;
    c.data[5] = ones16;
    c.grad_l2 = dt == TS_BF16 ? 5e-2 : 1.5e-2;
    lh_check("conv-bn-relu-maxpool", dt, b_block, NULL, &c, 2 * 16 * 4 * 4);
    for (int k = 0; k < 4; k++) c.kind[k] = LH_F32;
    c.y_f32 = 1;
    lh_check("amp by hand (f32 params, 16-bit conv, f32 bn)", dt, b_amp_conv, NULL, &c, 2 * 16 * 4 * 4);
  }
  check_training(TS_BF16);
  check_training(TS_F16);
  /* mixed dtypes name the op and both values */
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val a = ts_input(g, "a", TS_BF16, ts_shape2(2, 3)), b = ts_input(g, "b", TS_F32, ts_shape2(2, 3));
  CHECK(ts_add(g, a, b) == TS_NONE);
  EXPECT_ERR(ts_graph_status(g), TS_EDTYPE, "add", "a(2,3):bf16", "b(2,3):f32");
  ts_graph_free(g);
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_BF16, ts_shape2(2, 4)), gm = ts_input(g, "gamma", TS_F16, ts_shape1(4));
  CHECK(ts_layernorm(g, x, gm, gm, 1e-5f) == TS_NONE);
  EXPECT_ERR(ts_graph_status(g), TS_EDTYPE, "layernorm", "x(2,4):bf16", "gamma(4):f16");
  ts_graph_free(g);
  return ts_test_finish("test_lowp_ops");
}
