/* The executor's matmul+bias+gelu fusion (src/runtime/exec.c, plan_fusions): a MATMUL or DENSE
 * whose output only feeds a gelu (directly, or through the bf16 -> f32 cast amp O1 puts between
 * them) writes the gelu's output itself, one oneDNN matmul primitive with a gelu post-op.
 *
 * Asserted, on the FAST backend, in plans without backward (evaluation):
 *  - single layers: dense+bias+gelu_tanh (x (96,64), w (256,64)), dense without bias + gelu_erf,
 *    a batched matmul (a (3,32,64) times a shared (64,256): the batch folds into M) + gelu_tanh,
 *    and a batched matmul with both operands batched and b transposed (the primitive's own batch)
 *    + gelu_erf; each at f32, amp O1 and O2 (bf16): 1 fusion planned and taken; fused and
 *    unfused (ts_plan_set_fusion(p, 0)) both within tolerance of a double reference (gelu of the
 *    sum of the operands as the plan sees them, bf16-rounded under amp). f32: 3e-6 of the sum of
 *    |terms| + 1e-6 (accumulation; a tanh/erf swap is ~5e-4, a dropped bias O(0.1)), and fused
 *    vs unfused within 1e-5 (bitwise as measured). bf16: fused within one rounding of y
 *    (|y|/256) + 1e-4 of the |terms| sum, unfused within two (z's and y's, |y|/128) + 1e-3, and
 *    the fused maximum error at most the unfused one (one rounding fewer: O1's f32 y has none);
 *    the same sequence of node-end hook events (the gelu and the cast still "run");
 *  - a GPT MLP block h = x + c_proj(gelu_tanh(c_fc(ln(x)))) (c_fc 64 -> 256), at O0, O1, O2:
 *    1 fusion planned and taken, fused vs unfused h within 1e-5 (f32) / 1/64 of max|h| (bf16);
 *    its training plan (loss = sum(h * r), backward: gelu's backward reads c_fc's output) plans
 *    no fusion and the loss, dx and every parameter gradient are bitwise equal with fusion on
 *    and off;
 *  - the zoo GPT (2 layers) evaluation graph plans one fusion per layer (c_fc), at O0 and O2;
 *    its training graph (the loss and every parameter gradient kept, as the trainer plans it)
 *    none;
 *  - no fusion when the pre-activation is kept, or has a second use; f16 is not fused;
 *  - the REF backend takes none and gives its unfused results bitwise. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec.h"
#include "tessera/runtime.h"
#include "tessera/zoo.h"
#include "test_util.h"

#define M 96
#define K 64
#define N 256

static double gelu_ref(double v, int tanh_approx) {
  if (tanh_approx) return 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  return 0.5 * v * (1.0 + erf(v * 0.7071067811865476));
}

/* ---------------------------------------------------------------- single layers */

enum { L_DENSE_BIAS_TANH, L_DENSE_ERF, L_MATMUL_FOLD_TANH, L_MATMUL_BATCH_ERF, L_COUNT };
static const char *lname[L_COUNT] = {"dense+bias+gelu_tanh", "dense+gelu_erf", "matmul(batch folded)+gelu_tanh",
                                     "matmul(batched, b^T)+gelu_erf"};

#define NA (M * K)
#define NB (3 * K * N) /* the largest b: 3 batched (N,K) */
static float A[NA], B[NB], BIAS[N];

typedef struct {
  ts_graph *g;
  ts_val a, b, bias, y, z; /* z: the pre-activation (before amp; only for the keep case) */
  int tanh_approx;
} layer;

/* kind's graph; extra: 1 keeps z, 2 gives z a second use (y = gelu(z) + z) */
static void build_layer(layer *l, int kind, int level, ts_dtype low, int extra) {
  memset(l, 0, sizeof *l);
  CHECK_OK(ts_graph_create(&l->g));
  ts_graph *g = l->g;
  ts_graph_set_training(g, 0);
  l->bias = TS_NONE;
  ts_val z;
  switch (kind) {
    case L_DENSE_BIAS_TANH:
    case L_DENSE_ERF:
      l->a = ts_input(g, "x", TS_F32, ts_shape3(2, M / 2, K));
      l->b = ts_input(g, "w", TS_F32, ts_shape2(N, K));
      if (kind == L_DENSE_BIAS_TANH) l->bias = ts_input(g, "bias", TS_F32, ts_shape1(N));
      z = ts_dense(g, l->a, l->b, l->bias);
      break;
    case L_MATMUL_FOLD_TANH:
      l->a = ts_input(g, "a", TS_F32, ts_shape3(3, 32, K));
      l->b = ts_input(g, "b", TS_F32, ts_shape2(K, N));
      z = ts_matmul(g, l->a, l->b, 0, 0);
      break;
    default:
      l->a = ts_input(g, "a", TS_F32, ts_shape3(3, 32, K));
      l->b = ts_input(g, "b", TS_F32, ts_shape3(3, N, K));
      z = ts_matmul(g, l->a, l->b, 0, 1);
      break;
  }
  l->tanh_approx = kind == L_DENSE_BIAS_TANH || kind == L_MATMUL_FOLD_TANH;
  l->y = ts_gelu(g, z, l->tanh_approx);
  if (extra == 2) l->y = ts_add(g, l->y, z);
  l->z = z;
  CHECK_OK(ts_graph_status(g));
  if (level) {
    ts_val v[1] = {l->y};
    CHECK_OK(ts_graph_amp(g, level, low, v, 1));
    l->y = v[0];
  }
}

/* y[r][n] of the double reference and sum |terms| (bf16-rounded operands when bf: amp casts them) */
static void layer_ref(int kind, int bf, double *y, double *mag) {
  const int tanh_approx = kind == L_DENSE_BIAS_TANH || kind == L_MATMUL_FOLD_TANH;
  for (int r = 0; r < M; r++)
    for (int n = 0; n < N; n++) {
      double s = 0, q = 0;
      for (int k = 0; k < K; k++) {
        float av = A[r * K + k], bv;
        switch (kind) {
          case L_DENSE_BIAS_TANH: case L_DENSE_ERF: bv = B[n * K + k]; break;
          case L_MATMUL_FOLD_TANH: bv = B[k * N + n]; break;
          default: bv = B[(r / 32) * N * K + n * K + k]; break;
        }
        if (bf) av = ts_test_bf16_round(av), bv = ts_test_bf16_round(bv);
        s += (double)av * bv;
        q += fabs((double)av * bv);
      }
      if (kind == L_DENSE_BIAS_TANH) {
        const float bb = bf ? ts_test_bf16_round(BIAS[n]) : BIAS[n];
        s += bb;
        q += fabs(bb);
      }
      y[r * N + n] = gelu_ref(s, tanh_approx);
      mag[r * N + n] = q;
    }
}

typedef struct {
  float y[M * N];
  int planned, taken, ends[256], nends;
} lres;

static void on_end(const ts_hook_info *e, void *user) {
  int *v = user; /* v[0] count, then node indices */
  if (e->event == TS_HOOK_NODE_END && v[0] < 255) v[1 + v[0]++] = e->node;
}

static void run_layer(layer *l, int fusion, int keep_z, lres *out) {
  ts_val keep[2] = {l->y, l->z};
  ts_plan *p;
  CHECK_OK(ts_plan_create(l->g, keep, keep_z ? 2 : 1, &p));
  ts_plan_set_fusion(p, fusion);
  CHECK_OK(ts_plan_bind(p, l->a, A));
  CHECK_OK(ts_plan_bind(p, l->b, B));
  if (l->bias != TS_NONE) CHECK_OK(ts_plan_bind(p, l->bias, BIAS));
  int ev[257] = {0};
  CHECK_OK(ts_plan_run(p, 0));
  CHECK_OK(ts_plan_add_hook(p, on_end, ev));
  CHECK_OK(ts_plan_run(p, 1));
  ts_plan_remove_hook(p, on_end, ev);
  out->nends = ev[0];
  memcpy(out->ends, ev + 1, sizeof(int) * (size_t)ev[0]);
  out->planned = ts_plan_num_fusions(p, TS_FUSION_MATMUL_BIAS_GELU);
  out->taken = ts_plan_fusions_taken(p, TS_FUSION_MATMUL_BIAS_GELU);
  memcpy(out->y, ts_plan_data(p, l->y), sizeof out->y);
  ts_plan_free(p);
}

static int same_ends(const lres *f, const lres *u) {
  return f->nends == u->nends && !memcmp(f->ends, u->ends, sizeof(int) * (size_t)f->nends);
}

static void check_layers(void) {
  static double ref[M * N], mag[M * N];
  static lres fu, un;
  static const int levels[3] = {0, 1, 2};
  for (int kind = 0; kind < L_COUNT; kind++)
    for (int li = 0; li < 3; li++) {
      const int level = levels[li], bf = level > 0;
      char what[96];
      snprintf(what, sizeof what, "%s O%d", lname[kind], level);
      layer l;
      build_layer(&l, kind, level, TS_BF16, 0);
      layer_ref(kind, bf, ref, mag);
      run_layer(&l, 1, 0, &fu);
      run_layer(&l, 0, 0, &un);
      CHECK_MSG(fu.planned == 1 && fu.taken == 1, "%s: planned %d, taken %d (expected 1, 1)", what, fu.planned,
                fu.taken);
      CHECK_MSG(un.planned == 0 && un.taken == 0, "%s: fusion off planned %d, taken %d", what, un.planned, un.taken);
      CHECK_MSG(same_ends(&fu, &un), "%s: node-end hooks differ (%d fused, %d unfused events)", what, fu.nends,
                un.nends);
      double ef = 0, eu = 0, efu = 0, bad = 0;
      int ibad = -1;
      for (int i = 0; i < M * N; i++) {
        const double r = ref[i];
        /* f32: accumulation; bf16: y's rounding + z's (unfused O2: gelu' <= 1.13) + accumulation */
        const double tf = bf ? fabs(r) / 256 + 1e-4 * mag[i] + 1e-6 : 3e-6 * mag[i] + 1e-6;
        const double tu = bf ? fabs(r) / 128 + 1e-3 * mag[i] + 1e-6 : tf;
        const double df = fabs(fu.y[i] - r), du = fabs(un.y[i] - r);
        ef = fmax(ef, df), eu = fmax(eu, du);
        efu = fmax(efu, fabs((double)fu.y[i] - un.y[i]));
        if (fmax(df / tf, du / tu) > bad) bad = fmax(df / tf, du / tu), ibad = i;
      }
      printf("%s: max |fused - ref| %.3g, max |unfused - ref| %.3g, max |fused - unfused| %.3g\n", what, ef, eu, efu);
      CHECK_MSG(bad <= 1.0, "%s: [%d] off the double reference %.9g: fused %.9g, unfused %.9g", what, ibad,
                ibad >= 0 ? ref[ibad] : 0.0, ibad >= 0 ? (double)fu.y[ibad] : 0.0,
                ibad >= 0 ? (double)un.y[ibad] : 0.0);
      if (!bf) CHECK_MSG(efu <= 1e-5, "%s: fused vs unfused %.3g (tolerance 1e-5)", what, efu);
      if (bf) CHECK_MSG(ef <= eu * 1.0001 + 1e-7, "%s: fused error %.3g above unfused %.3g", what, ef, eu);
      /* REF: nothing taken, its unfused result bitwise */
      ts_backend_set(TS_BACKEND_REF);
      run_layer(&l, 1, 0, &fu);
      run_layer(&l, 0, 0, &un);
      ts_backend_set(TS_BACKEND_FAST);
      CHECK_MSG(fu.planned == 1 && fu.taken == 0, "%s REF: planned %d, taken %d (expected 1, 0)", what, fu.planned,
                fu.taken);
      CHECK_MSG(!memcmp(fu.y, un.y, sizeof fu.y), "%s REF: fusion on and off differ", what);
      ts_graph_free(l.g);
    }
  /* not fused: z kept, z read twice, f16 */
  layer l;
  build_layer(&l, L_DENSE_BIAS_TANH, 0, TS_BF16, 1);
  run_layer(&l, 1, 1, &fu);
  CHECK_MSG(fu.planned == 0 && fu.taken == 0, "z kept: planned %d, taken %d", fu.planned, fu.taken);
  ts_graph_free(l.g);
  build_layer(&l, L_DENSE_BIAS_TANH, 0, TS_BF16, 2);
  run_layer(&l, 1, 0, &fu);
  CHECK_MSG(fu.planned == 0 && fu.taken == 0, "z used twice: planned %d, taken %d", fu.planned, fu.taken);
  ts_graph_free(l.g);
  build_layer(&l, L_DENSE_BIAS_TANH, 2, TS_F16, 0);
  run_layer(&l, 1, 0, &fu);
  CHECK_MSG(fu.planned == 0 && fu.taken == 0, "f16: planned %d, taken %d", fu.planned, fu.taken);
  ts_graph_free(l.g);
}

/* ---------------------------------------------------------------- GPT MLP block */

#define BT 96 /* B*T rows: (2,48) */
#define C 64
#define HID 256

typedef struct {
  ts_graph *g;
  ts_val x, lg, lb, w1, b1, w2, b2, r;
  ts_val h, loss, grad[7];
} block;

static float X[BT * C], LG[C], LB[C], W1[HID * C], B1[HID], W2[C * HID], B2[C], R[BT * C];

static void build_block(block *b, int level, int train) {
  memset(b, 0, sizeof *b);
  CHECK_OK(ts_graph_create(&b->g));
  ts_graph *g = b->g;
  ts_graph_set_training(g, train);
  b->r = b->loss = TS_NONE;
  b->x = ts_input(g, "x", TS_F32, ts_shape3(2, BT / 2, C));
  if (train) { /* every input before the first node: the amp copy keeps the inputs' handles */
    b->r = ts_input(g, "r", TS_F32, ts_shape3(2, BT / 2, C));
    ts_val_set_requires_grad(g, b->r, 0);
  }
  b->lg = ts_input(g, "ln_2.weight", TS_F32, ts_shape1(C));
  b->lb = ts_input(g, "ln_2.bias", TS_F32, ts_shape1(C));
  b->w1 = ts_input(g, "c_fc.weight", TS_F32, ts_shape2(HID, C));
  b->b1 = ts_input(g, "c_fc.bias", TS_F32, ts_shape1(HID));
  b->w2 = ts_input(g, "c_proj.weight", TS_F32, ts_shape2(C, HID));
  b->b2 = ts_input(g, "c_proj.bias", TS_F32, ts_shape1(C));
  ts_val m = ts_layernorm(g, b->x, b->lg, b->lb, 1e-5f);
  m = ts_dense(g, ts_gelu(g, ts_dense(g, m, b->w1, b->b1), 1), b->w2, b->b2);
  b->h = ts_add(g, b->x, m);
  if (train) {
    b->loss = ts_sum(g, ts_mul(g, b->h, b->r), 7u, 0);
  }
  CHECK_OK(ts_graph_status(g));
  ts_val v[2] = {b->h, b->loss};
  if (level) CHECK_OK(ts_graph_amp(g, level, TS_BF16, v, train ? 2 : 1));
  b->h = v[0], b->loss = v[1];
  if (train) {
    CHECK_OK(ts_graph_backward(g, b->loss, 1.0f));
    const ts_val w[7] = {b->x, b->lg, b->lb, b->w1, b->b1, b->w2, b->b2};
    for (int k = 0; k < 7; k++) {
      b->grad[k] = ts_graph_grad(g, w[k]);
      CHECK(b->grad[k] != TS_NONE);
    }
  }
}

static const int64_t gsz[7] = {BT * C, C, C, HID * C, HID, C * HID, C};

typedef struct {
  float h[BT * C], loss, gx[BT * C], gl[2][C], gw1[HID * C], gb1[HID], gw2[C * HID], gb2[C];
  int planned, taken;
} bres;

static void run_block(block *b, int fusion, bres *out) {
  ts_val keep[9] = {b->h};
  int nk = 1;
  if (b->loss != TS_NONE) {
    keep[nk++] = b->loss;
    for (int k = 0; k < 7; k++) keep[nk++] = b->grad[k];
  }
  ts_plan *p;
  CHECK_OK(ts_plan_create(b->g, keep, nk, &p));
  ts_plan_set_fusion(p, fusion);
  const ts_val in[8] = {b->x, b->lg, b->lb, b->w1, b->b1, b->w2, b->b2, b->r};
  float *data[8] = {X, LG, LB, W1, B1, W2, B2, R};
  for (int k = 0; k < 8; k++)
    if (in[k] != TS_NONE) CHECK_OK(ts_plan_bind(p, in[k], data[k]));
  CHECK_OK(ts_plan_run(p, 0));
  CHECK_OK(ts_plan_run(p, 1));
  out->planned = ts_plan_num_fusions(p, TS_FUSION_MATMUL_BIAS_GELU);
  out->taken = ts_plan_fusions_taken(p, TS_FUSION_MATMUL_BIAS_GELU);
  memcpy(out->h, ts_plan_data(p, b->h), sizeof out->h);
  if (b->loss != TS_NONE) {
    out->loss = *(const float *)ts_plan_data(p, b->loss);
    float *dst[7] = {out->gx, out->gl[0], out->gl[1], out->gw1, out->gb1, out->gw2, out->gb2};
    for (int k = 0; k < 7; k++) memcpy(dst[k], ts_plan_data(p, b->grad[k]), sizeof(float) * (size_t)gsz[k]);
  }
  ts_plan_free(p);
}

static void check_block(void) {
  static bres fu, un;
  static const int levels[3] = {0, 1, 2};
  for (int li = 0; li < 3; li++) {
    const int level = levels[li];
    char what[64];
    block b;
    snprintf(what, sizeof what, "MLP block eval O%d", level);
    build_block(&b, level, 0);
    run_block(&b, 1, &fu);
    run_block(&b, 0, &un);
    CHECK_MSG(fu.planned == 1 && fu.taken == 1, "%s: planned %d, taken %d (expected 1, 1)", what, fu.planned,
              fu.taken);
    CHECK_MSG(un.planned == 0 && un.taken == 0, "%s: fusion off planned %d, taken %d", what, un.planned, un.taken);
    double mx = 0, d = 0;
    for (int i = 0; i < BT * C; i++) mx = fmax(mx, fabs(un.h[i])), d = fmax(d, fabs((double)fu.h[i] - un.h[i]));
    const double tol = level ? mx / 64 : 1e-5;
    printf("%s: max |fused - unfused| %.3g (max |h| %.3g)\n", what, d, mx);
    CHECK_MSG(d <= tol && mx > 0.5, "%s: fused vs unfused %.3g (tolerance %.3g)", what, d, tol);
    ts_graph_free(b.g);

    snprintf(what, sizeof what, "MLP block training O%d", level);
    build_block(&b, level, 1);
    run_block(&b, 1, &fu);
    run_block(&b, 0, &un);
    CHECK_MSG(fu.planned == 0 && fu.taken == 0, "%s: planned %d, taken %d (expected none)", what, fu.planned,
              fu.taken);
    CHECK_MSG(!memcmp(&fu, &un, sizeof fu), "%s: fusion on and off differ", what);
    CHECK(isfinite(fu.loss));
    ts_graph_free(b.g);
  }
}

/* ---------------------------------------------------------------- the zoo GPT */

static void check_gpt(void) {
  for (int train = 0; train < 2; train++)
    for (int level = 0; level <= 2; level += 2) {
      ts_graph *g;
      ts_params *ps;
      CHECK_OK(ts_graph_create(&g));
      CHECK_OK(ts_params_create(&ps));
      ts_graph_set_training(g, train);
      ts_nn nn = {g, ps};
      ts_val ids = ts_input(g, "ids", TS_I32, ts_shape2(2, 16)), tg = ts_input(g, "targets", TS_I32, ts_shape2(2, 16));
      ts_gpt_config cfg = {.vocab_size = 64, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 32};
      ts_val logits, loss;
      CHECK_OK(ts_zoo_gpt(&nn, &cfg, ids, tg, &logits, &loss));
      ts_val v[1] = {train ? loss : logits};
      if (level) CHECK_OK(ts_graph_amp(g, level, TS_BF16, v, 1));
      ts_val keep[64] = {v[0]};
      int nk = 0;
      if (train) { /* the trainer's plan: the loss and every parameter's gradient */
        CHECK_OK(ts_graph_backward(g, v[0], 1.0f));
        CHECK_OK(ts_params_attach_grads(ps, g, keep + 1, 63, &nk));
        CHECK(nk > 20);
      }
      ts_plan *p;
      CHECK_OK(ts_plan_create_dry(g, keep, nk + 1, &p));
      const int n = ts_plan_num_fusions(p, TS_FUSION_MATMUL_BIAS_GELU);
      printf("zoo GPT 2 layers, %s O%d: %d matmul+bias+gelu planned\n", train ? "training" : "eval", level, n);
      CHECK_MSG(n == (train ? 0 : 2), "zoo GPT %s O%d: %d fusions planned (expected %d)", train ? "training" : "eval",
                level, n, train ? 0 : 2);
      ts_plan_free(p);
      ts_params_free(ps);
      ts_graph_free(g);
    }
}

int main(void) {
  ts_test_fill(A, NA, 1, -1, 1);
  ts_test_fill(B, NB, 2, -0.25f, 0.25f);
  ts_test_fill(BIAS, N, 3, -0.5f, 0.5f);
  ts_test_fill(X, BT * C, 4, -2, 2);
  ts_test_fill(LG, C, 5, 0.5f, 1.5f);
  ts_test_fill(LB, C, 6, -0.2f, 0.2f);
  ts_test_fill(W1, HID * C, 7, -0.2f, 0.2f);
  ts_test_fill(B1, HID, 8, -0.5f, 0.5f);
  ts_test_fill(W2, C * HID, 9, -0.1f, 0.1f);
  ts_test_fill(B2, C, 10, -0.1f, 0.1f);
  ts_test_fill(R, BT * C, 11, -1, 1);
  ts_backend_set(TS_BACKEND_FAST);
  check_layers();
  check_block();
  check_gpt();
  return ts_test_finish("fusion_matmul_gelu");
}
