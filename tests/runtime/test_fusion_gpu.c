/* The executor's fusions on a GPU plan (src/runtime/exec.c plan_fusions, run_gpu.c's adapters,
 * batchnorm.cu's fused BN+ReLU): the same graphs as test_fusion_bn_relu, test_fusion_matmul_gelu
 * and test_matmul_cast_fusion, each run on the GPU with the fusions on and off
 * (ts_plan_set_fusion) and on the CPU (FAST backend, fusions on). Asserted:
 *  - BN+ReLU (a ResNet basic block with a batch norm on its input: a = relu(bn1(x)); h =
 *    bn2(conv(a, w)); y = relu(h + x); loss = sum(y r)) at amp O0, O2 and O3 (x (4,8,8,8)): the
 *    GPU plan takes one BN+ReLU and one BN+ReLU backward fusion; fused and unfused GPU runs
 *    bitwise equal (loss, a, dx, dw, the gammas' and betas' gradients bound to caller memory, the
 *    running statistics) over two runs; the GPU against the CPU within 1e-4 (f32) / 3e-2 (bf16);
 *  - matmul+bias+gelu (an evaluation plan: dense (16,32) x (64,32) + bias, gelu_tanh) at O0, O1
 *    and O2: one fusion taken; O0 and O2 bitwise the unfused GPU plan (the GEMM written into the
 *    gelu's buffer, the gelu applied there), O1 the f32 GEMM result unrounded (one rounding fewer
 *    than unfused, as the CPU's); against the CPU within 1e-5 (f32) / 1e-2 (bf16);
 *  - matmul+cast (loss = sum(cast(dense(cast(x), cast(W)), f32) r), dW bound to caller memory):
 *    taken on the GPU; dW the f32 GEMM result (against the CPU's fused f32 result within 1e-5
 *    relative of sum |r x|), differing from the unfused (bf16-rounded) dW somewhere, the loss
 *    and dx bitwise the same either way.
 *   test_fusion_gpu        a real GPU (SKIPPED with the reason without one)
 *   test_fusion_gpu fake   the stand-in driver (its emulator runs the kernels; under ASan only
 *                          the plumbing: launches recorded, no numbers) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "device/dev.h"
#include "runtime/exec.h"
#include "tessera/runtime.h"
#include "test_util.h"

static int numbers = 1; /* the kernels run (a GPU, or the emulating stand-in) */

typedef ts_test_bound bnd;

/* Runs g (keeping keep[k], read back into kres[k], kbytes[k]) `runs` times on d (NULL: the CPU,
 * FAST backend) with the fusions on or off; taken: ts_plan_fusions_taken per kind. */
static void run_plan(ts__dev *d, ts_graph *g, const ts_val *keep, void **kres, const size_t *kbytes, int nkeep, bnd *b,
                     int nb, int fusion, int runs, int *taken) {
  ts_plan *p = NULL;
  void *mem[16] = {0};
  CHECK(nb <= 16);
  CHECK_OK(ts_plan_create(g, keep, nkeep, &p));
  ts_plan_set_fusion(p, fusion);
  if (d) CHECK_OK(ts_plan_set_device(p, d));
  ts_test_bind(p, d, b, nb, mem);
  for (int r = 0; r < runs; r++) {
    int rc = ts_plan_run(p, (uint64_t)r);
    CHECK_MSG(rc == TS_OK, "run %d (%s, fusion %d): %s", r, d ? "GPU" : "CPU", fusion, ts_last_error());
  }
  ts_test_bound kept[8];
  CHECK(nkeep <= 8);
  for (int k = 0; k < nkeep && k < 8; k++) kept[k] = (ts_test_bound){keep[k], NULL, kres[k], kbytes[k]};
  ts_test_read_kept(p, d, kept, nkeep < 8 ? nkeep : 8);
  ts_test_unbind(d, b, nb, mem);
  for (int k = 0; k < TS_FUSION_COUNT; k++) taken[k] = ts_plan_fusions_taken(p, (ts_fusion)k);
  ts_plan_free(p);
}

/* ---- BN+ReLU ---- */
#define N 4
#define C 8
#define H 8
#define W 8
#define NX (N * C * H * W)
#define NW (C * C * 9)

typedef struct {
  float loss, a[NX], gx[NX], gw[NW], gv[4][C], rs[4][C];
  int taken[TS_FUSION_COUNT];
} bres;

static float X[NX], WT[NW], R[NX], GA[2][C], BE[2][C];

static void bn_run(ts__dev *d, int level, int fusion, bres *o) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_graph_set_training(g, 1);
  ts_val x = ts_input(g, "x", TS_F32, ts_shape4(N, C, H, W)), w = ts_input(g, "w", TS_F32, ts_shape4(C, C, 3, 3));
  ts_val gb[4] = {ts_input(g, "g1", TS_F32, ts_shape1(C)), ts_input(g, "b1", TS_F32, ts_shape1(C)),
                  ts_input(g, "g2", TS_F32, ts_shape1(C)), ts_input(g, "b2", TS_F32, ts_shape1(C))};
  ts_val rs[4];
  for (int k = 0; k < 4; k++) {
    char nm[16];
    snprintf(nm, sizeof nm, "rs%d", k);
    rs[k] = ts_state_value(g, nm, TS_F32, ts_shape1(C), k);
  }
  ts_val r = ts_input(g, "r", TS_F32, ts_shape4(N, C, H, W));
  ts_val_set_requires_grad(g, r, 0);
  ts_val a = ts_relu(g, ts_batchnorm(g, x, gb[0], gb[1], rs[0], rs[1], 0.1f, 1e-5f));
  ts_val h = ts_batchnorm(g, ts_conv2d(g, a, w, TS_NONE, 1, 1, 1, 1, 1, 1, 1), gb[2], gb[3], rs[2], rs[3], 0.1f, 1e-5f);
  ts_val y = ts_relu(g, ts_add(g, h, x));
  ts_val v[2] = {ts_sum(g, ts_mul(g, y, r), 15u, 0), a};
  CHECK_OK(ts_graph_status(g));
  if (level) CHECK_OK(ts_graph_amp(g, level, TS_BF16, v, 2));
  CHECK_OK(ts_graph_backward(g, v[0], 1.0f));
  ts_val keep[4] = {v[0], v[1], ts_graph_grad(g, x), ts_graph_grad(g, w)};
  void *kres[4] = {&o->loss, o->a, o->gx, o->gw};
  const size_t kb[4] = {4, sizeof o->a, sizeof o->gx, sizeof o->gw};
  float rs0[4][C];
  for (int k = 0; k < 4; k++)
    for (int c = 0; c < C; c++) rs0[k][c] = k % 2 ? 1.0f : 0.1f;
  bnd b[15] = {{x, X, NULL, sizeof X}, {w, WT, NULL, sizeof WT}, {r, R, NULL, sizeof R}};
  int nb = 3;
  for (int k = 0; k < 4; k++) {
    b[nb++] = (bnd){gb[k], k % 2 ? BE[k / 2] : GA[k / 2], NULL, 4 * C};
    b[nb++] = (bnd){ts_graph_grad(g, gb[k]), NULL, o->gv[k], 4 * C}; /* as a parameter store's */
    b[nb++] = (bnd){rs[k], rs0[k], o->rs[k], 4 * C};
  }
  if (!d) ts_backend_set(TS_BACKEND_FAST);
  run_plan(d, g, keep, kres, kb, 4, b, nb, fusion, 2, o->taken);
  ts_graph_free(g);
}

static void check_bn_relu(ts__dev *d) {
  static bres fu, un, cpu;
  const int levels[3] = {0, 2, 3};
  for (int li = 0; li < 3; li++) {
    const int lv = levels[li];
    bn_run(d, lv, 1, &fu);
    bn_run(d, lv, 0, &un);
    CHECK_MSG(fu.taken[TS_FUSION_BN_RELU] == 1 && fu.taken[TS_FUSION_BN_RELU_BWD] == 1,
              "O%d: the GPU took %d BN+ReLU and %d BN+ReLU backward fusions, expected 1 and 1", lv,
              fu.taken[TS_FUSION_BN_RELU], fu.taken[TS_FUSION_BN_RELU_BWD]);
    CHECK_MSG(!un.taken[TS_FUSION_BN_RELU] && !un.taken[TS_FUSION_BN_RELU_BWD], "O%d: fusion off still fused", lv);
    if (!numbers) continue;
    CHECK_MSG(!memcmp(&fu.loss, &un.loss, 4) && !memcmp(fu.a, un.a, sizeof fu.a) && !memcmp(fu.gx, un.gx, sizeof fu.gx) &&
                  !memcmp(fu.gw, un.gw, sizeof fu.gw) && !memcmp(fu.gv, un.gv, sizeof fu.gv) &&
                  !memcmp(fu.rs, un.rs, sizeof fu.rs),
              "O%d: the GPU's fused BN+ReLU differs from its unfused nodes (loss %.9g vs %.9g)", lv, (double)fu.loss,
              (double)un.loss);
    bn_run(NULL, lv, 1, &cpu);
    const double tol = lv ? 3e-2 : 1e-4;
    char what[64];
    printf("BN+ReLU O%d: loss GPU %.7g, CPU %.7g\n", lv, (double)fu.loss, (double)cpu.loss);
    CHECK_MSG(fabs(fu.loss - cpu.loss) <= tol * (1 + fabs(cpu.loss)), "O%d: loss GPU %.9g, CPU %.9g", lv,
              (double)fu.loss, (double)cpu.loss);
    snprintf(what, sizeof what, "BN+ReLU O%d: a, GPU vs CPU", lv);
    CHECK_CLOSE(fu.a, cpu.a, NX, tol, tol, what);
    snprintf(what, sizeof what, "BN+ReLU O%d: dx, GPU vs CPU", lv);
    CHECK_CLOSE(fu.gx, cpu.gx, NX, tol, tol, what);
    snprintf(what, sizeof what, "BN+ReLU O%d: dw, GPU vs CPU", lv);
    CHECK_CLOSE(fu.gw, cpu.gw, NW, tol, tol, what);
    snprintf(what, sizeof what, "BN+ReLU O%d: dgamma, dbeta, GPU vs CPU", lv);
    CHECK_CLOSE(&fu.gv[0][0], &cpu.gv[0][0], 4 * C, tol, tol, what);
    snprintf(what, sizeof what, "BN+ReLU O%d: running statistics, GPU vs CPU", lv);
    CHECK_CLOSE(&fu.rs[0][0], &cpu.rs[0][0], 4 * C, 1e-5, 1e-4, what);
  }
}

/* ---- matmul+bias+gelu (evaluation) ---- */
#define BT 16
#define CI 32
#define HID 64

static float XI[BT * CI], W1[HID * CI], B1[HID];

static void gelu_run(ts__dev *d, int level, int fusion, float *y, int *taken) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_graph_set_training(g, 0);
  ts_val x = ts_input(g, "x", TS_F32, ts_shape2(BT, CI)), w = ts_input(g, "w", TS_F32, ts_shape2(HID, CI)),
         bias = ts_input(g, "bias", TS_F32, ts_shape1(HID));
  ts_val v[1] = {ts_gelu(g, ts_dense(g, x, w, bias), 1)};
  CHECK_OK(ts_graph_status(g));
  if (level) CHECK_OK(ts_graph_amp(g, level, TS_BF16, v, 1));
  void *kres[1] = {y};
  const size_t kb[1] = {sizeof(float) * BT * HID};
  bnd b[3] = {{x, XI, NULL, sizeof XI}, {w, W1, NULL, sizeof W1}, {bias, B1, NULL, sizeof B1}};
  if (!d) ts_backend_set(TS_BACKEND_FAST);
  run_plan(d, g, v, kres, kb, 1, b, 3, fusion, 1, taken);
  ts_graph_free(g);
}

static void check_gelu(ts__dev *d) {
  static float fu[BT * HID], un[BT * HID], cpu[BT * HID];
  int tf[TS_FUSION_COUNT], tu[TS_FUSION_COUNT], tc[TS_FUSION_COUNT];
  for (int lv = 0; lv <= 2; lv++) {
    gelu_run(d, lv, 1, fu, tf);
    gelu_run(d, lv, 0, un, tu);
    CHECK_MSG(tf[TS_FUSION_MATMUL_BIAS_GELU] == 1 && !tu[TS_FUSION_MATMUL_BIAS_GELU],
              "O%d: the GPU took %d matmul+bias+gelu fusions (fused), %d (off)", lv, tf[TS_FUSION_MATMUL_BIAS_GELU],
              tu[TS_FUSION_MATMUL_BIAS_GELU]);
    if (!numbers) continue;
    if (lv != 1) CHECK_MSG(!memcmp(fu, un, sizeof fu), "O%d: the GPU's fused dense+gelu differs from its unfused nodes", lv);
    gelu_run(NULL, lv, 1, cpu, tc);
    char what[64];
    snprintf(what, sizeof what, "dense+bias+gelu O%d: GPU fused vs CPU fused", lv);
    CHECK_CLOSE(fu, cpu, BT * HID, lv ? 1e-2 : 1e-5, lv ? 1e-2 : 1e-5, what);
    if (lv == 1) { /* the f32 GEMM result, unrounded: closer to the CPU's fused f32 than the unfused */
      double ef = 0, eu = 0;
      for (int i = 0; i < BT * HID; i++) ef += fabs(fu[i] - cpu[i]), eu += fabs(un[i] - cpu[i]);
      printf("dense+bias+gelu O1: sum |GPU - CPU| fused %.3g, unfused %.3g\n", ef, eu);
      CHECK_MSG(ef < eu, "O1: the fused GPU result (%.3g off the CPU's) is not the unrounded one (unfused %.3g)", ef, eu);
    }
  }
}

/* ---- matmul+cast ---- */
#define MM 48
#define KK 40
#define NN 24

static float XM[MM * KK], WM[NN * KK], RM[MM * NN];

static void cast_run(ts__dev *d, int fusion, float *loss, float *gx, float *gw, int *taken) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_F32, ts_shape2(MM, KK)), w = ts_input(g, "w", TS_F32, ts_shape2(NN, KK)),
         r = ts_input(g, "r", TS_F32, ts_shape2(MM, NN));
  ts_val_set_requires_grad(g, r, 0);
  ts_val y = ts_cast(g, ts_dense(g, ts_cast(g, x, TS_BF16), ts_cast(g, w, TS_BF16), TS_NONE), TS_F32);
  ts_val loss_v = ts_sum(g, ts_mul(g, y, r), 3u, 0);
  CHECK_OK(ts_graph_status(g));
  CHECK_OK(ts_graph_backward(g, loss_v, 1.0f));
  ts_val keep[2] = {loss_v, ts_graph_grad(g, x)};
  void *kres[2] = {loss, gx};
  const size_t kb[2] = {4, sizeof(float) * MM * KK};
  bnd b[4] = {{x, XM, NULL, sizeof XM}, {w, WM, NULL, sizeof WM}, {r, RM, NULL, sizeof RM},
              {ts_graph_grad(g, w), NULL, gw, sizeof(float) * NN * KK}};
  if (!d) ts_backend_set(TS_BACKEND_FAST);
  run_plan(d, g, keep, kres, kb, 2, b, 4, fusion, 2, taken);
  ts_graph_free(g);
}

static void check_cast(ts__dev *d) {
  static float gxf[MM * KK], gxu[MM * KK], gxc[MM * KK], gwf[NN * KK], gwu[NN * KK], gwc[NN * KK];
  float lf, lu, lc;
  int tf[TS_FUSION_COUNT], tu[TS_FUSION_COUNT], tc[TS_FUSION_COUNT];
  cast_run(d, 1, &lf, gxf, gwf, tf);
  cast_run(d, 0, &lu, gxu, gwu, tu);
  CHECK_MSG(tf[TS_FUSION_MATMUL_CAST] >= 1 && !tu[TS_FUSION_MATMUL_CAST], "the GPU took %d matmul+cast fusions (off: %d)",
            tf[TS_FUSION_MATMUL_CAST], tu[TS_FUSION_MATMUL_CAST]);
  if (!numbers) return;
  CHECK_MSG(!memcmp(&lf, &lu, 4) && !memcmp(gxf, gxu, sizeof gxf), "matmul+cast: the loss or dx moved with the fusion");
  CHECK_MSG(memcmp(gwf, gwu, sizeof gwf), "matmul+cast: dW the same fused and unfused (the f32 result not written?)");
  cast_run(NULL, 1, &lc, gxc, gwc, tc);
  double worst = 0;
  for (int n = 0; n < NN; n++)
    for (int k = 0; k < KK; k++) { /* dW[n][k] = sum_m r[m][n] x[m][k] on the bf16 operands */
      double mag = 0;
      for (int m = 0; m < MM; m++) mag += fabs((double)RM[m * NN + n] * XM[m * KK + k]);
      worst = fmax(worst, fabs(gwf[n * KK + k] - gwc[n * KK + k]) / (mag + 1e-30));
    }
  printf("matmul+cast: dW GPU vs CPU worst %.2e of sum |r x|\n", worst);
  CHECK_MSG(worst <= 1e-5, "matmul+cast: dW GPU vs CPU %.3e of sum |r x|", worst);
}

int main(int argc, char **argv) {
  int fake = argc > 1 && !strcmp(argv[1], "fake");
  ts__dev *d = NULL;
  if (ts__dev_open(TS_DEVICE_GPU, 0, &d)) {
    CHECK_MSG(!fake, "the stand-in driver did not open: %s", ts_last_error());
    ts_test_skip("no GPU: %s", ts_last_error());
    return ts_test_finish("test_fusion_gpu");
  }
  if (fake) numbers = ts_test_stand_in_emulates();
  ts_test_fill(X, NX, 1, -2, 2);
  ts_test_fill(WT, NW, 2, -0.3f, 0.3f);
  ts_test_fill(R, NX, 3, -1, 1);
  for (int k = 0; k < 2; k++) ts_test_fill(GA[k], C, 4 + (uint64_t)k, 0.5f, 1.5f), ts_test_fill(BE[k], C, 6 + (uint64_t)k, -0.5f, 0.5f);
  ts_test_fill(XI, BT * CI, 8, -1, 1);
  ts_test_fill(W1, HID * CI, 9, -0.3f, 0.3f);
  ts_test_fill(B1, HID, 10, -0.2f, 0.2f);
  ts_test_fill(XM, MM * KK, 11, -1, 1);
  ts_test_fill(WM, NN * KK, 12, -1, 1);
  ts_test_fill(RM, MM * NN, 13, -1, 1);
  for (int i = 0; i < MM * KK; i++) XM[i] = ts_test_bf16_round(XM[i]); /* bf16-representable: the casts exact */
  for (int i = 0; i < NN * KK; i++) WM[i] = ts_test_bf16_round(WM[i]);
  for (int i = 0; i < MM * NN; i++) RM[i] = ts_test_bf16_round(RM[i]);
  check_bn_relu(d);
  check_gelu(d);
  check_cast(d);
  ts__dev_close(d);
  return ts_test_finish("test_fusion_gpu");
}
