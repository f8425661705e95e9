/* The device layer (src/device/):
 *   - the CPU device: memory, copies in every direction, zeroing, streams, events (timed);
 *   - `real` (the default): on a machine with a usable NVIDIA GPU, every GPU kernel of the table
 *     (gpu_kernels.h) but the convolution family's (test_device_conv.c) against the CPU kernels on
 *     the same inputs, f32 and bf16, with the stated tolerances (docs/gpu.md; bitwise for casts,
 *     dropout and embedding), the sum run twice and compared bitwise (determinism); elsewhere the
 *     GPU is refused with its one-line reason and the GPU part is SKIPPED with it;
 *   - `fake` (TESSERA_LIBCUDA = the stand-in driver, tests/device/fake_cuda.c, whose launches run
 *     the kernels compiled for the host on an emulator of CUDA's blocks and barriers): every
 *     comparison of `real` on any machine (not under ASan: launches only recorded there), and: the
 *     query and describe, compute capability and device_id refusals, memory and copies through the
 *     driver's entry points, streams and events, the embedded PTX loaded, every launcher's kernel
 *     found in it with the parameter count its .entry declares (a launcher passing one too many or
 *     too few is refused, not launched); with the stand-in cuBLAS (TESSERA_LIBCUBLAS,
 *     fake_cublas.c), which computes, the GEMMs' results against the CPU's (the row-major mapping
 *     onto cuBLAS's column-major calls; TF32 when asked; f16), then Tessera's own GEMM kernel too;
 *   - `fake-noinit`: cuInit failing (no device) is refused with the driver's words. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>

#include "device/dev.h"
#include "device/gpu_kernels.h"
#include "kernels/dropout.h"
#include "kernels/eltwise.h"
#include "kernels/embedding.h"
#include "kernels/matmul.h"
#include "kernels/lowp.h"
#include "kernels/attention.h"
#include "kernels/binary.h"
#include "kernels/reduce.h"
#include "kernels/norm.h"
#include "kernels/shape.h"
#include "kernels/softmax.h"
#include "tessera/device.h"
#include "tessera/optim.h"
#include "test_util.h"

static void test_cpu_device(void) {
  ts_device_info ci;
  CHECK_OK(ts_device_query(TS_DEVICE_CPU, 0, &ci));
  CHECK(ci.kind == TS_DEVICE_CPU && !strcmp(ci.name, "CPU"));
  int n = 0;
  CHECK_OK(ts_device_count(TS_DEVICE_CPU, &n));
  CHECK(n == 1);
  EXPECT_ERR(ts_device_query(TS_DEVICE_CPU, 1, &ci), TS_EUNSUPPORTED, "device_id 1", "the CPU is device 0");
  ts__dev *d;
  CHECK_OK(ts__dev_open(TS_DEVICE_CPU, 0, &d));
  float host[100], back[100];
  for (int i = 0; i < 100; i++) host[i] = (float)i * 0.5f;
  void *a, *b, *pin;
  CHECK_OK(ts__dev_alloc(d, sizeof host, &a));
  CHECK_OK(ts__dev_alloc(d, sizeof host, &b));
  CHECK_OK(ts__dev_host_alloc(d, sizeof host, &pin));
  void *none = NULL;
  EXPECT_ERR(ts__dev_alloc(d, 0, &none), TS_EINVAL, "0 bytes");
  ts__dev_stream *s;
  ts__dev_event *e0, *e1;
  CHECK_OK(ts__dev_stream_create(d, &s));
  CHECK_OK(ts__dev_event_create(d, &e0));
  CHECK_OK(ts__dev_event_create(d, &e1));
  CHECK_OK(ts__dev_event_record(d, e0, NULL));
  CHECK_OK(ts__dev_copy(d, a, host, sizeof host, TS__H2D, s));
  CHECK_OK(ts__dev_event_record(d, e1, s));
  CHECK_OK(ts__dev_stream_wait(d, NULL, e1));
  CHECK_OK(ts__dev_copy(d, b, a, sizeof host, TS__D2D, NULL));
  CHECK_OK(ts__dev_memset0(d, a, sizeof host, NULL));
  CHECK_OK(ts__dev_copy(d, back, b, sizeof host, TS__D2H, NULL));
  CHECK_OK(ts__dev_sync(d));
  CHECK_OK(ts__dev_stream_sync(d, s));
  CHECK(!memcmp(back, host, sizeof host));
  CHECK_OK(ts__dev_copy(d, back, a, sizeof host, TS__D2H, NULL));
  CHECK(back[0] == 0 && back[99] == 0);
  double ms = -1;
  CHECK_OK(ts__dev_event_elapsed(d, e0, e1, &ms));
  CHECK(ms >= 0 && ms < 1000);
  const unsigned g[3] = {1, 1, 1};
  EXPECT_ERR(ts__cuda_launch(d, "ts_k_fill_f32", g, g, 0, NULL, NULL, 0), TS_EUNSUPPORTED, "ts_k_fill_f32", "not a GPU");
  ts__dev_event_destroy(d, e0);
  ts__dev_event_destroy(d, e1);
  ts__dev_stream_destroy(d, s);
  ts__dev_host_free(d, pin);
  ts__dev_free(d, a);
  ts__dev_free(d, b);
  ts__dev_close(d);
}

#include "gpu_test.h"

#define N_ELT 4099 /* not a multiple of the block */

static void check_eltwise(gpu *G) {
  static float x[N_ELT], dy[N_ELT], y[N_ELT], dx[N_ELT], gy[N_ELT], gdx[N_ELT];
  ts_test_fill(x, N_ELT, 1, -4.0f, 4.0f);
  ts_test_fill(dy, N_ELT, 2, -1.0f, 1.0f);
  for (int alg = 0; alg < TS_ELT_COUNT; alg++) {
    float xin[N_ELT];
    for (int i = 0; i < N_ELT; i++) /* log and sqrt on positive inputs */
      xin[i] = alg == TS_ELT_LOG || alg == TS_ELT_SQRT ? fabsf(x[i]) + 0.01f : x[i];
    float alpha = alg == TS_ELT_RELU ? 0.1f : 0.0f;
    CHECK_OK(ts__eltwise_fwd_ref(alg, alpha, 0, xin, y, N_ELT));
    int use_dst = ts__eltwise_bwd_uses_dst(alg);
    CHECK_OK(ts__eltwise_bwd_ref(alg, alpha, 0, use_dst, dy, use_dst ? y : xin, dx, N_ELT));
    void *px = up(G, xin, sizeof xin), *py = up(G, NULL, sizeof y), *pdy = up(G, dy, sizeof dy), *pdx = up(G, NULL, sizeof dx);
    CHECK_OK(ts__gpu_eltwise_fwd(G->d, alg, alpha, TS_F32, px, py, N_ELT, NULL));
    CHECK_OK(ts__gpu_eltwise_bwd(G->d, alg, alpha, use_dst, TS_F32, pdy, use_dst ? py : px, pdx, N_ELT, NULL));
    down(G, gy, py, sizeof gy);
    down(G, gdx, pdx, sizeof gdx);
    char what[64];
    snprintf(what, sizeof what, "eltwise %d forward (f32)", alg);
    same(G, what, gy, y, N_ELT, 1e-6, 2e-6);
    snprintf(what, sizeof what, "eltwise %d backward (f32)", alg);
    same(G, what, gdx, dx, N_ELT, 1e-6, 4e-6);
    /* bf16: the CPU's 16-bit kernel on the same bf16 inputs; one bf16 ulp */
    uint16_t hx[N_ELT], hy[N_ELT], hyg[N_ELT];
    ts__lp_from_f32(xin, hx, TS_BF16, N_ELT);
    CHECK_OK(ts__eltwise_fwd_lp(alg, alpha, 0, TS_BF16, 0, hx, hy, N_ELT));
    CHECK_OK(ts__dev_copy(G->d, px, hx, sizeof hx, TS__H2D, NULL));
    CHECK_OK(ts__gpu_eltwise_fwd(G->d, alg, alpha, TS_BF16, px, py, N_ELT, NULL));
    down(G, hyg, py, sizeof hyg);
    float fy[N_ELT], fyg[N_ELT];
    ts__lp_to_f32(hy, TS_BF16, fy, N_ELT);
    ts__lp_to_f32(hyg, TS_BF16, fyg, N_ELT);
    snprintf(what, sizeof what, "eltwise %d forward (bf16)", alg);
    same(G, what, fyg, fy, N_ELT, 1e-5, 1.0 / 128);
    ts__dev_free(G->d, px), ts__dev_free(G->d, py), ts__dev_free(G->d, pdy), ts__dev_free(G->d, pdx);
  }
  /* casts: bitwise the CPU's rounding */
  uint16_t h[N_ELT], hg[N_ELT];
  ts__lp_from_f32(x, h, TS_BF16, N_ELT);
  void *px = up(G, x, sizeof x), *ph = up(G, NULL, sizeof h), *pf = up(G, NULL, sizeof x);
  CHECK_OK(ts__gpu_cast(G->d, TS_F32, TS_BF16, px, ph, N_ELT, NULL));
  CHECK_OK(ts__gpu_cast(G->d, TS_BF16, TS_F32, ph, pf, N_ELT, NULL));
  down(G, hg, ph, sizeof hg);
  down(G, gy, pf, sizeof gy);
  if (!G->fake) {
    CHECK_MSG(!memcmp(hg, h, sizeof h), "cast f32 -> bf16 differs from the CPU's rounding");
    float w[N_ELT];
    ts__lp_to_f32(h, TS_BF16, w, N_ELT);
    CHECK_MSG(!memcmp(gy, w, sizeof w), "cast bf16 -> f32 differs");
  }
  EXPECT_ERR(ts__gpu_cast(G->d, TS_F32, TS_I32, px, ph, N_ELT, NULL), TS_EDTYPE, "f32 -> i32");
  EXPECT_ERR(ts__gpu_eltwise_fwd(G->d, 0, 0, TS_I32, px, ph, 4, NULL), TS_EDTYPE, "eltwise", "i32");
  ts__dev_free(G->d, px), ts__dev_free(G->d, ph), ts__dev_free(G->d, pf);
}

static void check_sum_and_clip(gpu *G) {
  enum { N = 300001 };
  float *x = malloc(sizeof(float) * N);
  ts_test_fill(x, N, 3, -1.0f, 1.0f);
  double s = 0, q = 0;
  for (int i = 0; i < N; i++) s += x[i], q += (double)x[i] * x[i];
  int64_t ns = ts__gpu_sum_scratch(N);
  void *px = up(G, x, sizeof(float) * N), *sc = up(G, NULL, sizeof(float) * (size_t)ns), *out = up(G, NULL, 8);
  float r[2] = {0, 0}, r2[2] = {1, 1};
  CHECK_OK(ts__gpu_sum(G->d, 0, px, N, sc, out, NULL));
  down(G, r, out, 4);
  CHECK_OK(ts__gpu_sum(G->d, 1, px, N, sc, (float *)out + 1, NULL));
  down(G, r + 1, (float *)out + 1, 4);
  CHECK_OK(ts__gpu_sum(G->d, 0, px, N, sc, out, NULL)); /* again: the same bits */
  down(G, r2, out, 4);
  if (!G->fake) {
    CHECK_MSG(fabs(r[0] - s) <= 1e-3 + 1e-5 * fabs(s), "sum %.7g, double %.7g", r[0], s);
    CHECK_MSG(fabs(r[1] - q) <= 1e-5 * q, "sum of squares %.7g, double %.7g", r[1], q);
    CHECK_MSG(r2[0] == r[0], "sum not repeatable: %.9g vs %.9g", r2[0], r[0]);
  }
  /* clipping to max_norm 10 (the norm is ~316): g *= 10 / (norm + 1e-6) on the device */
  float fs[2];
  void *pfs = up(G, NULL, 8);
  CHECK_OK(ts__gpu_clip(G->d, px, N, 10.0f, sc, pfs, NULL));
  down(G, fs, pfs, 8);
  float *g = malloc(sizeof(float) * N);
  down(G, g, px, sizeof(float) * N);
  if (!G->fake) {
    double norm = sqrt(q), f = 10.0 / (norm + 1e-6);
    CHECK_MSG(fabs(fs[1] - norm) <= 1e-5 * norm && fabs(fs[0] - f) <= 1e-5 * f, "clip: norm %.7g factor %.7g, want %.7g %.7g",
              fs[1], fs[0], norm, f);
    for (int i = 0; i < N; i++) x[i] *= fs[0];
    same(G, "clip: scaled gradient", g, x, N, 1e-9, 1e-7);
  }
  free(g);
  free(x);
  ts__dev_free(G->d, px), ts__dev_free(G->d, sc), ts__dev_free(G->d, out), ts__dev_free(G->d, pfs);
}

static void check_softmax_ce(gpu *G) {
  enum { R = 37, C = 1000 };
  static float x[R * C], dx[R * C], gdx[R * C], lse[R], glse[R];
  int lab[R];
  ts_test_fill(x, R * C, 4, -6.0f, 6.0f);
  for (int i = 0; i < R; i++) lab[i] = (i * 7919) % C;
  lab[5] = -100; /* ignored */
  for (int sm = 0; sm < 2; sm++) {
    float s = sm ? 0.1f : 0.0f, loss = 0, gl[2] = {0, 0};
    CHECK_OK(ts__softmax_ce_fwd_ref(x, lab, 0, R, C, s, -100, &loss, lse));
    CHECK_OK(ts__softmax_ce_bwd_ref(2.0f, x, lab, 0, lse, R, C, s, -100, dx));
    void *px = up(G, x, sizeof x), *pl = up(G, lab, sizeof lab), *plse = up(G, NULL, sizeof lse), *sc = up(G, NULL, 16),
         *rows = up(G, NULL, sizeof(float) * (R + 1)), *bad = up(G, NULL, 8), *pdx = up(G, NULL, sizeof dx);
    float two = 2.0f;
    void *pd = up(G, &two, 4);
    CHECK_OK(ts__gpu_softmax_ce_fwd(G->d, TS_F32, px, pl, 0, R, C, s, -100, sc, plse, (float *)sc + 1, rows, bad, NULL));
    CHECK_OK(ts__gpu_softmax_ce_bwd(G->d, TS_F32, pd, px, pl, 0, plse, R, C, s, -100, (float *)sc + 1, pdx, NULL));
    down(G, gl, sc, 8);
    down(G, glse, plse, sizeof glse);
    down(G, gdx, pdx, sizeof gdx);
    int64_t b = -1;
    down(G, &b, bad, 8);
    if (!G->fake) {
      CHECK_MSG(fabsf(gl[0] - loss) <= 2e-6f * fabsf(loss) && gl[1] == R - 1 && b == 0, "ce: loss %.8g vs %.8g, count %g",
                gl[0], loss, gl[1]);
      same(G, "ce: lse", glse, lse, R, 1e-6, 1e-6);
      same(G, "ce: dlogits", gdx, dx, (size_t)R * C, 1e-9, 1e-5);
    }
    ts__dev_free(G->d, px), ts__dev_free(G->d, pl), ts__dev_free(G->d, plse), ts__dev_free(G->d, sc);
    ts__dev_free(G->d, rows), ts__dev_free(G->d, bad), ts__dev_free(G->d, pdx), ts__dev_free(G->d, pd);
  }
}

/* the class-sharded cross-entropy's steps: the (R, C) logits cut into two column blocks [0, 400)
 * and [400, C) held by two "ranks"; their maxima and statistics combined on the host as the
 * all-reduces would: the loss and lse those of the whole rows (the CPU's), each block's dlogits the
 * whole backward's columns */
static void check_softmax_ce_shard(gpu *G) {
  enum { R = 37, C = 1000, B0 = 400 };
  static float x[R * C], dx[R * C], blk[R * C], gdx[R * C], lse[R];
  int lab[R];
  ts_test_fill(x, R * C, 9, -6.0f, 6.0f);
  for (int i = 0; i < R; i++) lab[i] = (i * 7919) % C;
  lab[5] = -100;
  const int64_t off[2] = {0, B0}, cl[2] = {B0, C - B0};
  for (int sm = 0; sm < 2; sm++) {
    float s = sm ? 0.1f : 0.0f, loss = 0;
    CHECK_OK(ts__softmax_ce_fwd_ref(x, lab, 0, R, C, s, -100, &loss, lse));
    CHECK_OK(ts__softmax_ce_bwd_ref(2.0f, x, lab, 0, lse, R, C, s, -100, dx));
    void *pl = up(G, lab, sizeof lab), *bad = up(G, NULL, 8), *pM = up(G, NULL, 4 * R), *pst = up(G, NULL, 12 * R),
         *plse = up(G, NULL, 4 * R), *sc = up(G, NULL, 16), *pb[2], *pdx[2];
    float two = 2.0f, M[R], Mr[R], st[3 * R], str[3 * R], glse[R], gl[2] = {0, 0};
    void *pd = up(G, &two, 4);
    for (int r = 0; r < 2; r++) {
      for (int i = 0; i < R; i++) memcpy(blk + i * cl[r], x + i * C + off[r], sizeof(float) * (size_t)cl[r]);
      pb[r] = up(G, blk, sizeof(float) * R * cl[r]), pdx[r] = up(G, NULL, sizeof(float) * R * cl[r]);
      CHECK_OK(ts__gpu_softmax_ce_shard_max(G->d, TS_F32, pb[r], pl, 0, R, cl[r], C, -100, pM, bad, NULL));
      down(G, r ? Mr : M, pM, sizeof M);
    }
    for (int i = 0; i < R; i++) M[i] = M[i] > Mr[i] ? M[i] : Mr[i];
    CHECK_OK(ts__dev_copy(G->d, pM, M, sizeof M, TS__H2D, NULL));
    for (int r = 0; r < 2; r++) {
      CHECK_OK(ts__gpu_softmax_ce_shard_stats(G->d, TS_F32, pb[r], pl, 0, R, cl[r], off[r], -100, pM, pst, NULL));
      down(G, r ? str : st, pst, sizeof st);
    }
    for (int i = 0; i < 3 * R; i++) st[i] += str[i];
    CHECK_OK(ts__dev_copy(G->d, pst, st, sizeof st, TS__H2D, NULL));
    CHECK_OK(ts__gpu_softmax_ce_shard_loss(G->d, pl, 0, R, C, s, -100, pM, pst, sc, plse, (float *)sc + 1, NULL));
    for (int r = 0; r < 2; r++)
      CHECK_OK(ts__gpu_softmax_ce_shard_bwd(G->d, TS_F32, pd, pb[r], pl, 0, plse, R, cl[r], C, off[r], s, -100,
                                            (float *)sc + 1, pdx[r], NULL));
    down(G, gl, sc, 8), down(G, glse, plse, sizeof glse);
    for (int r = 0; r < 2; r++) { /* the blocks put back as whole rows */
      down(G, blk, pdx[r], sizeof(float) * R * cl[r]);
      for (int i = 0; i < R; i++) memcpy(gdx + i * C + off[r], blk + i * cl[r], sizeof(float) * (size_t)cl[r]);
    }
    int64_t b = -1;
    down(G, &b, bad, 8);
    if (!G->fake) {
      CHECK_MSG(fabsf(gl[0] - loss) <= 2e-6f * fabsf(loss) && gl[1] == R - 1 && b == 0,
                "class-sharded ce: loss %.8g vs the whole rows' %.8g, count %g, bad %lld", gl[0], loss, gl[1], (long long)b);
      same(G, "class-sharded ce: lse", glse, lse, R, 1e-6, 1e-6);
      same(G, "class-sharded ce: dlogits", gdx, dx, (size_t)R * C, 1e-9, 1e-5);
    }
    lab[9] = C; /* out of range (not ignored): named */
    CHECK_OK(ts__dev_copy(G->d, pl, lab, sizeof lab, TS__H2D, NULL));
    CHECK_OK(ts__gpu_softmax_ce_shard_max(G->d, TS_F32, pb[1], pl, 0, R, cl[1], C, -100, pM, bad, NULL));
    down(G, &b, bad, 8);
    if (!G->fake) CHECK_MSG(b == 10, "class-sharded ce: the label out of range at row 9 reported as %lld", (long long)b);
    lab[9] = (9 * 7919) % C;
    for (int r = 0; r < 2; r++) ts__dev_free(G->d, pb[r]), ts__dev_free(G->d, pdx[r]);
    ts__dev_free(G->d, pl), ts__dev_free(G->d, bad), ts__dev_free(G->d, pM), ts__dev_free(G->d, pst);
    ts__dev_free(G->d, plse), ts__dev_free(G->d, sc), ts__dev_free(G->d, pd);
  }
}

static void check_layernorm(gpu *G) {
  enum { R = 150, D = 768 }; /* dgamma, dbeta from 3 chunks of rows (64, 64, 22) */
  static float x[R * D], dy[R * D], y[R * D], dx[R * D], gy[R * D], gdx[R * D];
  float gam[D], bet[D], mean[R], var[R], gmean[R], gvar[R], dg[D], db[D], gdg[D], gdb[D];
  ts_test_fill(x, R * D, 5, -2.0f, 3.0f);
  ts_test_fill(dy, R * D, 6, -1.0f, 1.0f);
  ts_test_fill(gam, D, 7, 0.5f, 1.5f);
  ts_test_fill(bet, D, 8, -0.5f, 0.5f);
  CHECK_OK(ts__layernorm_fwd_ref(x, gam, bet, y, mean, var, R, D, 1e-5f));
  CHECK_OK(ts__layernorm_bwd_ref(dy, x, gam, mean, var, dx, dg, db, R, D, 1e-5f));
  void *px = up(G, x, sizeof x), *pdy = up(G, dy, sizeof dy), *pg = up(G, gam, sizeof gam), *pb = up(G, bet, sizeof bet),
       *py = up(G, NULL, sizeof y), *pm = up(G, NULL, sizeof mean), *pv = up(G, NULL, sizeof var),
       *pdx = up(G, NULL, sizeof dx), *pdg = up(G, NULL, sizeof dg), *pdb = up(G, NULL, sizeof db);
  CHECK_OK(ts__gpu_layernorm_fwd(G->d, TS_F32, px, pg, pb, py, pm, pv, R, D, 1e-5f, NULL));
  void *lws = up(G, NULL, ts__gpu_layernorm_bwd_workspace(R, D));
  CHECK_OK(ts__gpu_layernorm_bwd(G->d, TS_F32, pdy, px, pg, pm, pv, pdx, pdg, pdb, R, D, 1e-5f, lws, NULL));
  ts__dev_free(G->d, lws);
  down(G, gy, py, sizeof gy), down(G, gmean, pm, sizeof gmean), down(G, gvar, pv, sizeof gvar);
  down(G, gdx, pdx, sizeof gdx), down(G, gdg, pdg, sizeof gdg), down(G, gdb, pdb, sizeof gdb);
  same(G, "layernorm: y", gy, y, R * D, 1e-5, 1e-5);
  same(G, "layernorm: mean", gmean, mean, R, 1e-6, 1e-6);
  same(G, "layernorm: var", gvar, var, R, 1e-6, 1e-5);
  same(G, "layernorm: dx", gdx, dx, R * D, 1e-5, 1e-4);
  same(G, "layernorm: dgamma", gdg, dg, D, 1e-5, 1e-4);
  same(G, "layernorm: dbeta", gdb, db, D, 1e-5, 1e-5); /* 150 terms of |dy| <= 1 summed in f32 */
  ts__dev_free(G->d, px), ts__dev_free(G->d, pdy), ts__dev_free(G->d, pg), ts__dev_free(G->d, pb);
  ts__dev_free(G->d, py), ts__dev_free(G->d, pm), ts__dev_free(G->d, pv), ts__dev_free(G->d, pdx);
  ts__dev_free(G->d, pdg), ts__dev_free(G->d, pdb);
}

/* Adam(W) and SGD/momentum steps against ts_optim_step (the CPU's fused loops) */
static void check_optim(gpu *G) {
  enum { N = 5003 };
  static const ts_optim_kind kinds[] = {TS_OPTIM_SGD, TS_OPTIM_MOMENTUM, TS_OPTIM_ADAM, TS_OPTIM_ADAMW};
  for (int k = 0; k < 4; k++) {
    static float p[N], g[N], gp[N];
    ts_test_fill(p, N, 9, -1.0f, 1.0f);
    ts_test_fill(g, N, 10, -0.1f, 0.1f);
    ts_optim_config c = ts_optim_config_default(kinds[k]);
    if (kinds[k] != TS_OPTIM_ADAMW) c.weight_decay = 0.01;
    ts_optim_segment seg = {"w", 0, N, 0};
    ts_optim *o = NULL;
    CHECK_OK(ts_optim_create(&o, &c, &seg, 1));
    void *pp = up(G, p, sizeof p), *pg = up(G, g, sizeof g), *m = up(G, NULL, sizeof p), *v = up(G, NULL, sizeof p);
    float lr = 0.01f;
    for (int step = 1; step <= 3 && o; step++) {
      CHECK_OK(ts_optim_step(o, p, g, lr));
      double t = step, bc1 = 1.0 - pow(c.beta1, t), bc2 = 1.0 - pow(c.beta2, t);
      float neg_step = (float)(-((double)lr / bc1)), bc2s = (float)sqrt(bc2);
      float b1 = (float)c.beta1, b2 = (float)c.beta2, omb1 = (float)(1.0 - c.beta1), omb2 = (float)(1.0 - c.beta2);
      switch (kinds[k]) {
        case TS_OPTIM_SGD: CHECK_OK(ts__gpu_sgd(G->d, pp, pg, N, lr, (float)c.weight_decay, NULL)); break;
        case TS_OPTIM_MOMENTUM:
          CHECK_OK(ts__gpu_momentum(G->d, pp, pg, m, N, lr, (float)c.weight_decay, (float)c.momentum,
                                    (float)(1.0 - c.dampening), step == 1, c.nesterov, NULL));
          break;
        case TS_OPTIM_ADAM:
          CHECK_OK(ts__gpu_adam(G->d, pp, pg, m, v, N, (float)c.weight_decay, 1.0f, b1, omb1, b2, omb2, bc2s,
                                (float)c.eps, neg_step, NULL));
          break;
        default:
          CHECK_OK(ts__gpu_adam(G->d, pp, pg, m, v, N, 0.0f, (float)(1.0 - (double)lr * c.weight_decay), b1, omb1, b2,
                                omb2, bc2s, (float)c.eps, neg_step, NULL));
      }
    }
    down(G, gp, pp, sizeof gp);
    char what[64];
    snprintf(what, sizeof what, "optimizer %d: parameters after 3 steps", (int)kinds[k]);
    same(G, what, gp, p, N, 1e-7, 1e-6);
    ts_optim_free(o);
    ts__dev_free(G->d, pp), ts__dev_free(G->d, pg), ts__dev_free(G->d, m), ts__dev_free(G->d, v);
  }
  /* every segment in one launch (ts__gpu_optim_multi): a decayed segment of 9001 elements (3
   * chunks), an undecayed one of 7, a frozen one of 5, a decayed one of 4096 (one whole chunk):
   * against ts_optim_step over the same segments, and bitwise the per-segment kernels */
  enum { NM = 9001 + 7 + 5 + 4096 };
  for (int k = 0; k < 4; k++) {
    static float p[NM], g[NM], gp[NM], gs[NM];
    ts_test_fill(p, NM, 19, -1.0f, 1.0f);
    ts_test_fill(g, NM, 20, -0.1f, 0.1f);
    ts_optim_config c = ts_optim_config_default(kinds[k]);
    c.weight_decay = 0.05;
    const ts_optim_segment segs[4] = {{"w", 0, 9001, 0}, {"b", 9001, 7, TS_SEG_NO_DECAY}, {"f", 9008, 5, TS_SEG_FROZEN},
                                      {"w2", 9013, 4096, 0}};
    const int64_t off[3] = {0, 9001, 9013}, num[3] = {9001, 7, 4096};
    const int dec[3] = {1, 0, 1};
    ts_optim *o = NULL;
    CHECK_OK(ts_optim_create(&o, &c, segs, 4));
    const int64_t nch = ts__gpu_mchunks(off, num, dec, 3, NULL, 0);
    CHECK_MSG(nch == 3 + 1 + 1, "%lld chunks, expected 5", (long long)nch);
    ts__gpu_mchunk hch[5];
    ts__gpu_mchunks(off, num, dec, 3, hch, 5);
    CHECK(hch[2].lo == 8192 && hch[2].hi == 9001 && hch[3].decay == 0 && hch[4].lo == 9013 && hch[4].hi == 9013 + 4096);
    void *pp = up(G, p, sizeof p), *pg = up(G, g, sizeof g), *m = up(G, NULL, sizeof p), *v = up(G, NULL, sizeof p);
    void *sp = up(G, p, sizeof p), *sm = up(G, NULL, sizeof p), *sv = up(G, NULL, sizeof p), *pch = up(G, hch, sizeof hch);
    const float lr = 0.01f;
    const int kind = kinds[k] == TS_OPTIM_SGD ? 0 : kinds[k] == TS_OPTIM_MOMENTUM ? 1 : 2;
    for (int step = 1; step <= 3 && o; step++) {
      CHECK_OK(ts_optim_step(o, p, g, lr));
      double t = step, bc1 = 1.0 - pow(c.beta1, t), bc2 = 1.0 - pow(c.beta2, t), wd = c.weight_decay;
      ts__gpu_optim_args a = {lr, (float)wd, (float)c.momentum, (float)(1.0 - c.dampening), 0.0f, 1.0f, (float)c.beta1,
                              (float)(1.0 - c.beta1), (float)c.beta2, (float)(1.0 - c.beta2), (float)sqrt(bc2),
                              (float)c.eps, (float)(-((double)lr / bc1)), step == 1, c.nesterov};
      if (kinds[k] == TS_OPTIM_ADAM) a.l2 = (float)wd;
      if (kinds[k] == TS_OPTIM_ADAMW) a.decay_mul = (float)(1.0 - (double)lr * wd);
      CHECK_OK(ts__gpu_optim_multi(G->d, kind, pp, pg, m, v, pch, nch, &a, NULL));
      for (int sgi = 0; sgi < 3; sgi++) { /* the per-segment kernels, as ts__dist_dev_update calls them */
        float *ps = (float *)sp + off[sgi], *ms = (float *)sm + off[sgi], *vs = (float *)sv + off[sgi];
        const float *gsg = (const float *)pg + off[sgi];
        const double w = dec[sgi] ? wd : 0.0;
        if (kind == 0) CHECK_OK(ts__gpu_sgd(G->d, ps, gsg, num[sgi], lr, (float)w, NULL));
        else if (kind == 1)
          CHECK_OK(ts__gpu_momentum(G->d, ps, gsg, ms, num[sgi], lr, (float)w, a.mu, a.one_m_damp, a.first, a.nesterov, NULL));
        else if (kinds[k] == TS_OPTIM_ADAM)
          CHECK_OK(ts__gpu_adam(G->d, ps, gsg, ms, vs, num[sgi], (float)w, 1.0f, a.b1, a.omb1, a.b2, a.omb2, a.bc2_sqrt, a.eps,
                                a.neg_step, NULL));
        else
          CHECK_OK(ts__gpu_adam(G->d, ps, gsg, ms, vs, num[sgi], 0.0f, (float)(1.0 - (double)lr * w), a.b1, a.omb1, a.b2,
                                a.omb2, a.bc2_sqrt, a.eps, a.neg_step, NULL));
      }
    }
    down(G, gp, pp, sizeof gp), down(G, gs, sp, sizeof gs);
    char what[80];
    snprintf(what, sizeof what, "optimizer %d over 4 segments in one launch: parameters after 3 steps", (int)kinds[k]);
    same(G, what, gp, p, NM, 1e-7, 1e-6);
    if (!G->fake) CHECK_MSG(!memcmp(gp, gs, sizeof gp), "optimizer %d: one launch differs from the per-segment kernels",
                            (int)kinds[k]);
    ts_optim_free(o);
    ts__dev_free(G->d, pp), ts__dev_free(G->d, pg), ts__dev_free(G->d, m), ts__dev_free(G->d, v);
    ts__dev_free(G->d, sp), ts__dev_free(G->d, sm), ts__dev_free(G->d, sv), ts__dev_free(G->d, pch);
  }
}

/* GEMMs: f32 against the reference (every transpose, a shared and a batched operand, sizes not
 * multiples of the tiles), bf16 against the CPU's 16-bit reference, dense with its bias, the
 * bias gradient's column sums */
static void check_gemm(gpu *G) {
  static const ts__mm_desc ds[] = {
      {1, 67, 129, 70, 0, 0, 0, 0}, {3, 33, 65, 17, 1, 0, 1, 1}, {2, 64, 64, 64, 0, 1, 1, 0},
      {4, 5, 200, 300, 1, 1, 0, 1}, {1, 1, 1, 1, 0, 0, 0, 0},
  };
  for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++) {
    const ts__mm_desc *m = &ds[k];
    size_t na = (size_t)(m->a_batched ? m->batch : 1) * m->M * m->K, nb = (size_t)(m->b_batched ? m->batch : 1) * m->K * m->N,
           nc = (size_t)m->batch * m->M * m->N;
    float *a = malloc(4 * na), *b = malloc(4 * nb), *c = malloc(4 * nc), *gc = malloc(4 * nc);
    ts_test_fill(a, na, 20 + k, -1.0f, 1.0f);
    ts_test_fill(b, nb, 30 + k, -1.0f, 1.0f);
    CHECK_OK(ts__matmul_ref(m, a, b, c));
    void *pa = up(G, a, 4 * na), *pb = up(G, b, 4 * nb), *pc = up(G, NULL, 4 * nc);
    CHECK_OK(ts__gpu_gemm(G->d, m, TS_F32, TS_F32, pa, pb, NULL, pc, NULL));
    down(G, gc, pc, 4 * nc);
    char what[96];
    snprintf(what, sizeof what, "gemm %zu (f32, batch %lld, %lldx%lldx%lld, trans %d%d, %s)", k, (long long)m->batch,
             (long long)m->M, (long long)m->N, (long long)m->K, m->trans_a, m->trans_b, G->cublas ? "cuBLAS" : "own kernel");
    if (G->fake && G->cublas) CHECK_CLOSE(gc, c, nc, 1e-5, 1e-5, what); /* the stand-in cuBLAS computes */
    same(G, what, gc, c, nc, 1e-5, 1e-5);
    /* bf16: the same bf16 inputs on both sides, one bf16 ulp apart at most */
    uint16_t *ha = malloc(2 * na), *hb = malloc(2 * nb), *hc = malloc(2 * nc), *hg = malloc(2 * nc);
    ts__lp_from_f32(a, ha, TS_BF16, (int64_t)na);
    ts__lp_from_f32(b, hb, TS_BF16, (int64_t)nb);
    CHECK_OK(ts__matmul_lp_ref(m, TS_BF16, ha, hb, hc));
    CHECK_OK(ts__dev_copy(G->d, pa, ha, 2 * na, TS__H2D, NULL));
    CHECK_OK(ts__dev_copy(G->d, pb, hb, 2 * nb, TS__H2D, NULL));
    CHECK_OK(ts__gpu_gemm(G->d, m, TS_BF16, TS_BF16, pa, pb, NULL, pc, NULL));
    down(G, hg, pc, 2 * nc);
    ts__lp_to_f32(hc, TS_BF16, c, (int64_t)nc);
    ts__lp_to_f32(hg, TS_BF16, gc, (int64_t)nc);
    snprintf(what, sizeof what, "gemm %zu (bf16)", k);
    if (G->fake && G->cublas) CHECK_CLOSE(gc, c, nc, 1e-3, 1.0 / 128, what);
    same(G, what, gc, c, nc, 1e-3, 1.0 / 128);
    free(a), free(b), free(c), free(gc), free(ha), free(hb), free(hc), free(hg);
    ts__dev_free(G->d, pa), ts__dev_free(G->d, pb), ts__dev_free(G->d, pc);
  }
  /* dense y = x w^T + b, and db = column sums of dy */
  enum { M = 50, N = 70, K = 90 };
  static float x[M * K], w[N * K], bias[N], y[M * N], gy[M * N], db[N], gdb[N];
  ts_test_fill(x, M * K, 40, -1, 1), ts_test_fill(w, N * K, 41, -1, 1), ts_test_fill(bias, N, 42, -1, 1);
  CHECK_OK(ts__dense_ref(M, N, K, x, w, bias, y));
  const ts__mm_desc dd = {1, M, N, K, 0, 1, 0, 0};
  void *px = up(G, x, sizeof x), *pw = up(G, w, sizeof w), *pbias = up(G, bias, sizeof bias), *py = up(G, NULL, sizeof y),
       *pdb = up(G, NULL, sizeof db);
  CHECK_OK(ts__gpu_gemm(G->d, &dd, TS_F32, TS_F32, px, pw, pbias, py, NULL));
  CHECK_OK(ts__gpu_col_sum(G->d, TS_F32, py, M, N, pdb, NULL));
  down(G, gy, py, sizeof gy), down(G, gdb, pdb, sizeof gdb);
  for (int j = 0; j < N; j++) {
    double t = 0;
    for (int i = 0; i < M; i++) t += y[i * N + j];
    db[j] = (float)t;
  }
  same(G, "dense with bias", gy, y, M * N, 1e-5, 1e-5);
  same(G, "bias gradient (column sums)", gdb, db, N, 1e-4, 1e-5);
  EXPECT_ERR(ts__gpu_gemm(G->d, &dd, TS_F32, TS_BF16, px, pw, NULL, py, NULL), TS_EDTYPE, "f32 operands -> bf16");
  ts__dev_free(G->d, px), ts__dev_free(G->d, pw), ts__dev_free(G->d, pbias), ts__dev_free(G->d, py), ts__dev_free(G->d, pdb);
}

/* dropout bitwise the CPU's (f32 and bf16, an offset not on a block boundary); embedding's
 * gather and its backward bitwise the CPU's (same order of additions) */
static void check_dropout_embedding(gpu *G) {
  enum { N = 10007 };
  static float x[N], y[N], gy[N];
  ts_test_fill(x, N, 50, -1, 1);
  CHECK_OK(ts__dropout_ref(x, y, N, 0.3f, 1234, 7, 77));
  void *px = up(G, x, sizeof x), *py = up(G, NULL, sizeof y);
  CHECK_OK(ts__gpu_dropout(G->d, TS_F32, px, py, N, 0.3f, 1234, 7, 77, NULL));
  down(G, gy, py, sizeof gy);
  if (!G->fake) CHECK_MSG(!memcmp(gy, y, sizeof y), "dropout (f32) differs from the CPU's mask or scaling");
  uint16_t hx[N], hy[N], hg[N];
  ts__lp_from_f32(x, hx, TS_BF16, N);
  CHECK_OK(ts__dropout_lp(TS_BF16, hx, hy, N, 0.1f, 99, 3, 0));
  CHECK_OK(ts__dev_copy(G->d, px, hx, sizeof hx, TS__H2D, NULL));
  CHECK_OK(ts__gpu_dropout(G->d, TS_BF16, px, py, N, 0.1f, 99, 3, 0, NULL));
  down(G, hg, py, sizeof hg);
  if (!G->fake) CHECK_MSG(!memcmp(hg, hy, sizeof hy), "dropout (bf16) differs from the CPU's");
  EXPECT_ERR(ts__gpu_dropout(G->d, TS_F32, px, py, N, 1.5f, 1, 1, 0, NULL), TS_EINVAL, "probability 1.5");
  ts__dev_free(G->d, px), ts__dev_free(G->d, py);
  enum { V = 300, D = 96, T = 517 };
  static float table[V * D], e[T * D], ge[T * D], dt[V * D], gdt[V * D];
  int ids[T];
  ts_test_fill(table, V * D, 51, -1, 1);
  ts_test_fill(e, T * D, 52, -1, 1); /* dy */
  for (int t = 0; t < T; t++) ids[t] = (t * 37) % V;
  CHECK_OK(ts__embedding_bwd_ref(e, ids, TS_I32, T, V, D, dt));
  void *ptab = up(G, table, sizeof table), *pids = up(G, ids, sizeof ids), *pe = up(G, NULL, sizeof e),
       *pdy = up(G, e, sizeof e), *pdt = up(G, NULL, sizeof dt), *bad = up(G, NULL, 8);
  void *ews = up(G, NULL, ts__gpu_embedding_bwd_workspace(TS_F32, T, V, D));
  CHECK_OK(ts__gpu_embedding_bwd(G->d, TS_F32, pdy, pids, 0, T, V, D, 0, pdt, ews, NULL));
  down(G, gdt, pdt, sizeof gdt);
  if (!G->fake) CHECK_MSG(!memcmp(gdt, dt, sizeof dt), "embedding backward differs from the CPU's sums");
  { /* bf16: the CPU's f32 sums in token order rounded once, bitwise */
    static uint16_t e16[T * D], dt16[V * D], gdt16[V * D];
    ts__lp_from_f32(e, e16, TS_BF16, T * D);
    CHECK_OK(ts__embedding_bwd_lp(TS_BF16, e16, ids, TS_I32, T, V, D, dt16));
    void *pe16 = up(G, e16, sizeof e16), *pdt16 = up(G, NULL, sizeof dt16);
    CHECK_OK(ts__gpu_embedding_bwd(G->d, TS_BF16, pe16, pids, 0, T, V, D, 0, pdt16, ews, NULL));
    down(G, gdt16, pdt16, sizeof gdt16);
    if (!G->fake) CHECK_MSG(!memcmp(gdt16, dt16, sizeof dt16), "embedding backward (bf16) differs from the CPU's");
    ts__dev_free(G->d, pe16), ts__dev_free(G->d, pdt16);
  }
  { /* beyond the token lists' limit (65536 tokens): a thread per column, the same sums */
    enum { TL = 65536 + 37, VS = 50, DS = 3 };
    float *el = malloc(4 * (size_t)TL * DS), *dl = malloc(4 * VS * DS), *gl = malloc(4 * VS * DS);
    int *il = malloc(4 * (size_t)TL);
    ts_test_fill(el, (size_t)TL * DS, 54, -1, 1);
    for (int t = 0; t < TL; t++) il[t] = (t * 7) % VS;
    CHECK_OK(ts__embedding_bwd_ref(el, il, TS_I32, TL, VS, DS, dl));
    void *pel = up(G, el, 4 * (size_t)TL * DS), *pil = up(G, il, 4 * (size_t)TL), *pdl = up(G, NULL, 4 * VS * DS);
    void *wl = up(G, NULL, ts__gpu_embedding_bwd_workspace(TS_F32, TL, VS, DS) + 8);
    CHECK_OK(ts__gpu_embedding_bwd(G->d, TS_F32, pel, pil, 0, TL, VS, DS, 0, pdl, wl, NULL));
    down(G, gl, pdl, 4 * VS * DS);
    if (!G->fake) CHECK_MSG(!memcmp(gl, dl, 4 * VS * DS), "embedding backward of %d tokens differs from the CPU's", TL);
    ts__dev_free(G->d, pel), ts__dev_free(G->d, pil), ts__dev_free(G->d, pdl), ts__dev_free(G->d, wl);
    free(el), free(dl), free(gl), free(il);
  }
  CHECK_OK(ts__embedding_fwd_ref(table, 4, V, D, ids, TS_I32, T, e));
  CHECK_OK(ts__gpu_embedding_fwd(G->d, TS_F32, ptab, V, D, 0, 0, pids, 0, T, pe, bad, NULL));
  down(G, ge, pe, sizeof ge);
  int64_t b = -1;
  down(G, &b, bad, 8);
  if (!G->fake) CHECK_MSG(!memcmp(ge, e, sizeof e) && b == 0, "embedding forward differs (bad %lld)", (long long)b);
  ids[100] = V; /* out of range: named */
  CHECK_OK(ts__dev_copy(G->d, pids, ids, sizeof ids, TS__H2D, NULL));
  CHECK_OK(ts__gpu_embedding_fwd(G->d, TS_F32, ptab, V, D, 0, 0, pids, 0, T, pe, bad, NULL));
  down(G, &b, bad, 8);
  if (!G->fake) CHECK_MSG(b == 101, "embedding: an id out of range at 100 reported as %lld", (long long)b);
  /* vocabulary-sharded (rows [120, 220) of the table): other ids zero rows forward, nothing
   * backward, only a negative id bad; bitwise the CPU's sharded kernels */
  enum { OFF = 120, VL = 100 };
  ids[100] = -2; /* bad, at 100 */
  ids[7] = V + 50; /* beyond the whole table: another shard's (no upper bound when sharded) */
  CHECK_OK(ts__dev_copy(G->d, pids, ids, sizeof ids, TS__H2D, NULL));
  CHECK_OK(ts__gpu_embedding_fwd(G->d, TS_F32, (float *)ptab + OFF * D, VL, D, OFF, 1, pids, 0, T, pe, bad, NULL));
  down(G, &b, bad, 8);
  if (!G->fake) CHECK_MSG(b == 101, "sharded embedding: the negative id at 100 reported as %lld", (long long)b);
  ids[100] = 3;
  CHECK_OK(ts__dev_copy(G->d, pids, ids, sizeof ids, TS__H2D, NULL));
  CHECK_OK(ts__embedding_shard_fwd_ref(table + OFF * D, 4, VL, D, OFF, ids, TS_I32, T, e));
  CHECK_OK(ts__gpu_embedding_fwd(G->d, TS_F32, (float *)ptab + OFF * D, VL, D, OFF, 1, pids, 0, T, pe, bad, NULL));
  down(G, ge, pe, sizeof ge);
  down(G, &b, bad, 8);
  int nz = 0;
  for (int i = 0; i < T * D; i++) nz += e[i] != 0;
  if (!G->fake) CHECK_MSG(!memcmp(ge, e, sizeof e) && b == 0 && nz > 0 && nz < T * D,
                          "sharded embedding forward differs from the CPU's (bad %lld, %d non-zero)", (long long)b, nz);
  ts_test_fill(e, T * D, 53, -1, 1);
  CHECK_OK(ts__dev_copy(G->d, pdy, e, sizeof e, TS__H2D, NULL));
  CHECK_OK(ts__embedding_shard_bwd_ref(e, ids, TS_I32, T, VL, D, OFF, dt));
  CHECK_OK(ts__gpu_embedding_bwd(G->d, TS_F32, pdy, pids, 0, T, VL, D, OFF, pdt, ews, NULL));
  down(G, gdt, pdt, sizeof(float) * VL * D);
  if (!G->fake) CHECK_MSG(!memcmp(gdt, dt, sizeof(float) * VL * D), "sharded embedding backward differs from the CPU's");
  ts__dev_free(G->d, ptab), ts__dev_free(G->d, pids), ts__dev_free(G->d, pe), ts__dev_free(G->d, pdy);
  ts__dev_free(G->d, pdt), ts__dev_free(G->d, bad), ts__dev_free(G->d, ews);
}

/* permute and the block copies bitwise the CPU's; attention in its three layouts, forward and
 * backward, against the CPU's reference (double sums) */
static void check_shape_attention(gpu *G) {
  enum { A = 3, Bd = 4, Cd = 5, Dd = 6, N = A * Bd * Cd * Dd };
  static float x[N], y[N], gy[N];
  ts_test_fill(x, N, 60, -1, 1);
  const int64_t dims[4] = {A, Bd, Cd, Dd};
  const int perm[4] = {2, 0, 3, 1};
  CHECK_OK(ts__permute_ref(x, y, 4, 4, dims, perm));
  void *px = up(G, x, sizeof x), *py = up(G, NULL, sizeof y);
  CHECK_OK(ts__gpu_permute(G->d, 4, px, py, 4, dims, perm, NULL));
  down(G, gy, py, sizeof gy);
  if (!G->fake) CHECK_MSG(!memcmp(gy, y, sizeof y), "permute differs from the CPU's");
  { /* 1-byte elements (max pooling's window indices staged channels last) */
    static uint8_t bx[N], by[N], gby[N];
    for (int i = 0; i < N; i++) bx[i] = (uint8_t)(i * 7 + 3);
    CHECK_OK(ts__permute_ref(bx, by, 1, 4, dims, perm));
    void *pbx = up(G, bx, sizeof bx), *pby = up(G, NULL, sizeof by);
    CHECK_OK(ts__gpu_permute(G->d, 1, pbx, pby, 4, dims, perm, NULL));
    down(G, gby, pby, sizeof gby);
    if (!G->fake) CHECK_MSG(!memcmp(gby, by, sizeof by), "1-byte permute differs from the CPU's");
    ts__dev_free(G->d, pbx), ts__dev_free(G->d, pby);
  }
  /* rows 3 of 40 elements from a stride of 120 at 30 into a stride of 50 at 5 */
  CHECK_OK(ts__dev_memset0(G->d, py, sizeof y, NULL));
  CHECK_OK(ts__gpu_blocks(G->d, 4, px, 120, 30, py, 50, 5, 3, 40, NULL));
  down(G, gy, py, sizeof gy);
  int ok = 1;
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 40; c++) ok &= gy[r * 50 + 5 + c] == x[r * 120 + 30 + c];
  if (!G->fake) CHECK_MSG(ok && gy[0] == 0 && gy[4] == 0, "block copy");
  ts__dev_free(G->d, px), ts__dev_free(G->d, py);
  /* the tiled kernels (D <= 64; T = 70: two query tiles of 64, three key tiles of 32, a partial
   * one of each) and the row kernels (D 72, and D 40 under TESSERA_GPU_ATTENTION=rows) */
  for (int run = 0; run < 9; run++) {
    const int layout = run % 3, form = run / 3;
    const int64_t B = 2, H = 3, T = form == 0 ? 70 : 17, D = form == 1 ? 72 : 40, C = H * D;
    if (form == 2) setenv("TESSERA_GPU_ATTENTION", "rows", 1);
    size_t nq = (size_t)(B * H * T * D), nqkv = (size_t)(B * T * 3 * C);
    size_t nin = layout == 2 ? nqkv : nq; /* each of q, k, v's allocation (the packed tensor for QKV) */
    float *q = malloc(4 * nin), *k = malloc(4 * nin), *v = malloc(4 * nin), *o = malloc(4 * nq), *dout = malloc(4 * nq);
    float *lse = malloc(4 * (size_t)(B * H * T)), *dq = calloc(nin, 4), *dk = calloc(nin, 4), *dv = calloc(nin, 4);
    float *go = malloc(4 * nq), *glse = malloc(4 * (size_t)(B * H * T)), *gdq = malloc(4 * nin), *gdk = malloc(4 * nin),
          *gdv = malloc(4 * nin);
    ts_test_fill(q, nin, 61 + layout, -1, 1), ts_test_fill(k, nin, 64, -1, 1), ts_test_fill(v, nin, 65, -1, 1);
    ts_test_fill(dout, nq, 66, -1, 1);
    const float scale = 0.158f;
    const float *qq = q, *kk = layout == 2 ? q + C : k, *vv = layout == 2 ? q + 2 * C : v;
    float *dqq = dq, *dkk = layout == 2 ? dq + C : dk, *dvv = layout == 2 ? dq + 2 * C : dv;
    CHECK_OK(ts__attention_fwd_ref(qq, kk, vv, o, lse, B, H, T, D, scale, layout));
    CHECK_OK(ts__attention_bwd_ref(dout, qq, kk, vv, o, lse, dqq, dkk, dvv, B, H, T, D, scale, layout));
    float *pq = up(G, q, 4 * nin), *pk = up(G, k, 4 * nin), *pv = up(G, v, 4 * nin), *po = up(G, NULL, 4 * nq),
          *pdo = up(G, dout, 4 * nq), *plse = up(G, NULL, 4 * (size_t)(B * H * T)), *pdq = up(G, NULL, 4 * nin),
          *pdk = up(G, NULL, 4 * nin), *pdv = up(G, NULL, 4 * nin), *Dr = up(G, NULL, 4 * (size_t)(B * H * T));
    const float *gq = pq, *gk = layout == 2 ? pq + C : pk, *gv = layout == 2 ? pq + 2 * C : pv;
    float *gdqq = pdq, *gdkk = layout == 2 ? pdq + C : pdk, *gdvv = layout == 2 ? pdq + 2 * C : pdv;
    CHECK_OK(ts__gpu_attention_fwd(G->d, TS_F32, gq, gk, gv, po, plse, B, H, T, D, scale, layout, NULL));
    CHECK_OK(ts__gpu_attention_bwd(G->d, TS_F32, pdo, gq, gk, gv, po, plse, gdqq, gdkk, gdvv, Dr, B, H, T, D, scale,
                                   layout, NULL));
    down(G, go, po, 4 * nq), down(G, glse, plse, 4 * (size_t)(B * H * T));
    down(G, gdq, pdq, 4 * nin), down(G, gdk, pdk, 4 * nin), down(G, gdv, pdv, 4 * nin);
    unsetenv("TESSERA_GPU_ATTENTION");
    char what[96];
    const char *kind = form == 0 ? "tiled" : "rows";
    snprintf(what, sizeof what, "attention (%s, T %lld, D %lld) layout %d: o", kind, (long long)T, (long long)D, layout);
    same(G, what, go, o, nq, 1e-5, 1e-4);
    snprintf(what, sizeof what, "attention (%s) layout %d: lse", kind, layout);
    same(G, what, glse, lse, (size_t)(B * H * T), 1e-5, 1e-5);
    snprintf(what, sizeof what, "attention (%s) layout %d: dq (dq|dk|dv for QKV)", kind, layout);
    same(G, what, gdq, dq, nin, 1e-5, 1e-4);
    if (layout != 2) {
      snprintf(what, sizeof what, "attention (%s) layout %d: dk", kind, layout);
      same(G, what, gdk, dk, nin, 1e-5, 1e-4);
      snprintf(what, sizeof what, "attention (%s) layout %d: dv", kind, layout);
      same(G, what, gdv, dv, nin, 1e-5, 1e-4);
    }
    free(q), free(k), free(v), free(o), free(dout), free(lse), free(dq), free(dk), free(dv);
    free(go), free(glse), free(gdq), free(gdk), free(gdv);
    ts__dev_free(G->d, pq), ts__dev_free(G->d, pk), ts__dev_free(G->d, pv), ts__dev_free(G->d, po);
    ts__dev_free(G->d, pdo), ts__dev_free(G->d, plse), ts__dev_free(G->d, pdq), ts__dev_free(G->d, pdk);
    ts__dev_free(G->d, pdv), ts__dev_free(G->d, Dr);
  }
}

/* bf16 attention: the tensor-core kernels (the default for bf16 heads up to 64 wide: T = 70 two
 * query tiles and a partial one, D 40 padded to 64; T 130 with D 64 and D 16) and the SIMT tiled
 * kernels (TESSERA_GPU_ATTENTION=simt) against the f32 reference (double sums) on the same
 * bf16-rounded inputs. The GPU rounds o, dq, dk, dv once and P, dS to bf16 as GEMM operands
 * (as the CPU's bf16 kernel): within 1e-2 absolute + relative, lse within 2e-3 (an extra or missing
 * key in a causal row moves lse by log(1 + 1/t): caught). */
static void check_attention_bf16(gpu *G) {
  for (int run = 0; run < 6; run++) {
    const int layout = run < 3 ? run : run == 3 ? 1 : run == 4 ? 0 : 2, simt = run == 5;
    const int64_t B = 2, H = 3, T = run == 3 || run == 4 ? 130 : 70, D = run == 3 ? 64 : run == 4 ? 16 : 40, C = H * D;
    if (simt) setenv("TESSERA_GPU_ATTENTION", "simt", 1);
    size_t nq = (size_t)(B * H * T * D), nqkv = (size_t)(B * T * 3 * C), nl = (size_t)(B * H * T);
    size_t nin = layout == 2 ? nqkv : nq;
    float *f = malloc(4 * (3 * nin + nq)), *o = malloc(4 * nq), *lse = malloc(4 * nl), *dg = calloc(3 * nin, 4);
    float *got = malloc(4 * (3 * nin + nq + nl));
    uint16_t *h = malloc(2 * (3 * nin + nq)), *g16 = malloc(2 * (3 * nin + nq));
    ts_test_fill(f, 3 * nin + nq, 70 + run, -1, 1);
    ts__lp_from_f32(f, h, TS_BF16, (int64_t)(3 * nin + nq)); /* q | k | v | do, rounded */
    ts__lp_to_f32(h, TS_BF16, f, (int64_t)(3 * nin + nq));
    const float scale = D == 64 ? 0.125f : 0.158f;
    float *q = f, *k = f + nin, *v = f + 2 * nin, *dout = f + 3 * nin;
    const float *qq = q, *kk = layout == 2 ? q + C : k, *vv = layout == 2 ? q + 2 * C : v;
    float *dq = dg, *dk = dg + nin, *dv = dg + 2 * nin;
    float *dqq = dq, *dkk = layout == 2 ? dq + C : dk, *dvv = layout == 2 ? dq + 2 * C : dv;
    CHECK_OK(ts__attention_fwd_ref(qq, kk, vv, o, lse, B, H, T, D, scale, layout));
    CHECK_OK(ts__attention_bwd_ref(dout, qq, kk, vv, o, lse, dqq, dkk, dvv, B, H, T, D, scale, layout));
    uint16_t *pin = up(G, h, 2 * (3 * nin + nq)), *po = up(G, NULL, 2 * nq), *pd = up(G, NULL, 2 * 3 * nin);
    float *plse = up(G, NULL, 4 * nl), *Dr = up(G, NULL, 4 * nl);
    const uint16_t *gq = pin, *gk = layout == 2 ? pin + C : pin + nin, *gv = layout == 2 ? pin + 2 * C : pin + 2 * nin;
    uint16_t *gdq = pd, *gdk = layout == 2 ? pd + C : pd + nin, *gdv = layout == 2 ? pd + 2 * C : pd + 2 * nin;
    CHECK_OK(ts__gpu_attention_fwd(G->d, TS_BF16, gq, gk, gv, po, plse, B, H, T, D, scale, layout, NULL));
    CHECK_OK(ts__gpu_attention_bwd(G->d, TS_BF16, pin + 3 * nin, gq, gk, gv, po, plse, gdq, gdk, gdv, Dr, B, H, T, D,
                                   scale, layout, NULL));
    unsetenv("TESSERA_GPU_ATTENTION");
    down(G, g16, po, 2 * nq), down(G, got + 3 * nin + nq, plse, 4 * nl);
    ts__lp_to_f32(g16, TS_BF16, got + 3 * nin, (int64_t)nq);
    down(G, g16, pd, 2 * 3 * nin);
    ts__lp_to_f32(g16, TS_BF16, got, (int64_t)(3 * nin));
    char what[112];
    const char *kind = simt ? "SIMT" : "tensor cores";
#define SAME_ATTN(name, g, w, n, tol)                                                                                  \
  do {                                                                                                                 \
    snprintf(what, sizeof what, "bf16 attention (%s, T %lld, D %lld) layout %d: %s", kind, (long long)T, (long long)D, \
             layout, name);                                                                                            \
    same(G, what, g, w, n, tol, tol);                                                                                  \
  } while (0)
    SAME_ATTN("o", got + 3 * nin, o, nq, 1e-2);
    SAME_ATTN("lse", got + 3 * nin + nq, lse, nl, 2e-3);
    SAME_ATTN(layout == 2 ? "dq|dk|dv" : "dq", got, dq, nin, 1e-2);
    if (layout != 2) {
      SAME_ATTN("dk", got + nin, dk, nin, 1e-2);
      SAME_ATTN("dv", got + 2 * nin, dv, nin, 1e-2);
    }
#undef SAME_ATTN
    free(f), free(o), free(lse), free(dg), free(got), free(h), free(g16);
    ts__dev_free(G->d, pin), ts__dev_free(G->d, po), ts__dev_free(G->d, pd), ts__dev_free(G->d, plse);
    ts__dev_free(G->d, Dr);
  }
}

/* reductions (sum, mean, max over axes 0 and 2 of (3,4,5)), max's backward with ties, and
 * broadcast_to, against the CPU's */
static void check_reduce(gpu *G) {
  float x[60], y[4], gy[4], dx[60], gdx[60], b[60], gb[60];
  ts_test_fill(x, 60, 80, -1, 1);
  x[7] = x[3] = 2.0f; /* a tie for the max of one group (both in column 3: (0,0,3)? and (0,1,2)) */
  const ts_shape xs = ts_shape3(3, 4, 5), ys = ts_shape3(1, 4, 1);
  float *px = up(G, x, sizeof x), *py = up(G, NULL, sizeof y), *pdx = up(G, NULL, sizeof dx), *pb = up(G, NULL, sizeof b);
  for (int alg = 0; alg < 3; alg++) {
    CHECK_OK(ts__reduce_ref(alg, x, &xs, y, &ys));
    CHECK_OK(ts__gpu_reduce(G->d, alg, TS_F32, px, &xs, py, &ys, NULL, NULL));
    down(G, gy, py, sizeof gy);
    same(G, alg == 0 ? "reduce sum" : alg == 1 ? "reduce mean" : "reduce max", gy, y, 4, 1e-6, 1e-6);
  }
  { /* the leading dims reduced (3 x 130 rows of 7: 7 chunks of 64 rows, then the chunks), the
     * trailing ones (a warp per row of 50), SUM_TO to fewer dims (a bias's gradient) */
    enum { NL = 3 * 130 * 7 };
    static float xl[NL], yl[NL], gl[NL];
    ts_test_fill(xl, NL, 81, -1, 1);
    const ts_shape xl3 = ts_shape3(3, 130, 7), ycol = ts_shape3(1, 1, 7), xr = ts_shape2(54, 50), yrow = ts_shape2(54, 1);
    const ts_shape xb = ts_shape2(390, 7), yb = ts_shape1(7), yb2 = ts_shape2(1, 7);
    float *pxl = up(G, xl, sizeof xl), *pyl = up(G, NULL, sizeof yl);
    void *rws = up(G, NULL, ts__gpu_reduce_workspace(&xl3, &ycol) + 4);
    CHECK(ts__gpu_reduce_workspace(&xl3, &ycol) == 4 * 7 * 7 && ts__gpu_reduce_workspace(&xr, &yrow) == 0);
    for (int alg = 0; alg < 3; alg++) {
      char what[64];
      CHECK_OK(ts__reduce_ref(alg, xl, &xl3, yl, &ycol));
      CHECK_OK(ts__gpu_reduce(G->d, alg, TS_F32, pxl, &xl3, pyl, &ycol, rws, NULL));
      down(G, gl, pyl, 4 * 7);
      snprintf(what, sizeof what, "reduce %d over the leading dims (7 chunks)", alg);
      same(G, what, gl, yl, 7, 1e-5, 1e-5);
      CHECK_OK(ts__reduce_ref(alg, xl, &xr, yl, &yrow));
      CHECK_OK(ts__gpu_reduce(G->d, alg, TS_F32, pxl, &xr, pyl, &yrow, NULL, NULL));
      down(G, gl, pyl, 4 * 54);
      snprintf(what, sizeof what, "reduce %d over the trailing dim (a warp a row)", alg);
      same(G, what, gl, yl, 54, 1e-5, 1e-5);
    }
    CHECK_OK(ts__reduce_ref(0, xl, &xb, yl, &yb2));
    CHECK_OK(ts__gpu_sum_to(G->d, TS_F32, pxl, &xb, pyl, &yb, rws, NULL));
    down(G, gl, pyl, 4 * 7);
    same(G, "sum_to (390, 7) -> (7)", gl, yl, 7, 1e-5, 1e-5);
    ts__dev_free(G->d, pxl), ts__dev_free(G->d, pyl), ts__dev_free(G->d, rws);
  }
  float dyv[4] = {1, 2, 3, 4};
  float *pdy = up(G, dyv, sizeof dyv);
  CHECK_OK(ts__reduce_max_bwd_ref(dyv, x, &xs, y, &ys, dx));
  CHECK_OK(ts__gpu_reduce_max_bwd(G->d, TS_F32, pdy, px, &xs, py, &ys, pdx, NULL));
  down(G, gdx, pdx, sizeof gdx);
  same(G, "reduce max backward", gdx, dx, 60, 1e-7, 1e-6);
  CHECK_OK(ts__broadcast_ref(y, &ys, b, &xs));
  CHECK_OK(ts__gpu_broadcast(G->d, TS_F32, py, &ys, pb, &xs, NULL));
  down(G, gb, pb, sizeof gb);
  if (!G->fake) CHECK_MSG(!memcmp(gb, b, sizeof b), "broadcast_to differs");
  ts__dev_free(G->d, px), ts__dev_free(G->d, py), ts__dev_free(G->d, pdx), ts__dev_free(G->d, pb), ts__dev_free(G->d, pdy);
}

/* broadcasting binary ops against the CPU's reference, bitwise (one f32 operation per element):
 * same shapes (one contiguous dim after the host merges dims), a bias over the last dim, a
 * column, both operands broadcast, a leading-dims operand */
static void check_binary(gpu *G) {
  static const int64_t shp[5][2][4] = {{{2, 3, 4, 5}, {2, 3, 4, 5}}, {{2, 3, 4, 5}, {1, 1, 1, 5}},
                                       {{2, 3, 4, 5}, {1, 3, 4, 1}}, {{2, 1, 4, 1}, {1, 3, 1, 5}},
                                       {{2, 3, 4, 5}, {1, 1, 4, 5}}};
  enum { NY = 120 };
  static float a[NY], b[NY], y[NY], gy[NY];
  ts_test_fill(a, NY, 80, -2, 2), ts_test_fill(b, NY, 81, 0.5f, 2);
  const ts_shape ys = ts_shape4(2, 3, 4, 5);
  void *pa = up(G, a, sizeof a), *pb = up(G, b, sizeof b), *py = up(G, NULL, sizeof y);
  for (int c = 0; c < 5; c++)
    for (int alg = 0; alg < TS_BIN_COUNT; alg++) {
      ts_shape as = ts_shape4(shp[c][0][0], shp[c][0][1], shp[c][0][2], shp[c][0][3]);
      ts_shape bs = ts_shape4(shp[c][1][0], shp[c][1][1], shp[c][1][2], shp[c][1][3]);
      CHECK_OK(ts__binary_ref(alg, a, &as, b, &bs, y, &ys));
      CHECK_OK(ts__gpu_binary(G->d, alg, TS_F32, pa, &as, pb, &bs, py, &ys, NULL));
      down(G, gy, py, sizeof gy);
      if (!G->fake) CHECK_MSG(!memcmp(gy, y, sizeof y), "binary %d, case %d differs from the CPU's", alg, c);
    }
  ts__dev_free(G->d, pa), ts__dev_free(G->d, pb), ts__dev_free(G->d, py);
}

/* evaluation's per-row statistics on the GPU (ts__gpu_eval_rows, finished on the host) against
 * the CPU's rows (ts__eval_rows_ref): finiteness and ranks exact, losses within 2e-6 relative (f32
 * exponentials and sums on the GPU, double on the CPU); a row with NaN, one with +Inf, ties with
 * the label's logit; the statistics bitwise the same twice; classes beyond the kernel refused */
static void check_eval_rows(gpu *G) {
  static const int64_t shapes[3][2] = {{37, 1000}, {70, 10}, {9, 3001}};
  for (int c = 0; c < 3; c++) {
    const int64_t R = shapes[c][0], C = shapes[c][1];
    float *x = malloc(sizeof(float) * (size_t)(R * C)), *st = malloc(16 * (size_t)R), *st2 = malloc(16 * (size_t)R);
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)R);
    ts__eval_row *want = malloc(sizeof(ts__eval_row) * (size_t)R), *got = malloc(sizeof(ts__eval_row) * (size_t)R);
    ts_test_fill(x, R * C, 90 + c, -7, 7);
    for (int64_t i = 0; i < R; i++) lab[i] = (int32_t)((i * 7919 + c) % C);
    x[1 * C + C / 2] = NAN;
    x[2 * C] = INFINITY;
    for (int64_t k = 1; k < C; k += 3) x[4 * C + k] = 8; /* ties with the label, the row's largest */
    x[4 * C + lab[4]] = 8;
    lab[5] = (int32_t)(C - 1);
    ts__eval_rows_ref(x, lab, R, C, want);
    void *px = up(G, x, sizeof(float) * (size_t)(R * C)), *pl = up(G, lab, sizeof(int32_t) * (size_t)R),
         *ps = up(G, NULL, 16 * (size_t)R);
    CHECK_OK(ts__gpu_eval_rows(G->d, px, pl, R, C, ps, NULL));
    down(G, st, ps, 16 * (size_t)R);
    CHECK_OK(ts__gpu_eval_rows(G->d, px, pl, R, C, ps, NULL));
    down(G, st2, ps, 16 * (size_t)R);
    if (!G->fake) {
      CHECK_MSG(!memcmp(st, st2, 16 * (size_t)R), "eval rows (%lld x %lld): two runs differ", (long long)R, (long long)C);
      ts__eval_rows_finish(st, R, got);
      for (int64_t i = 0; i < R; i++)
        CHECK_MSG(got[i].finite == want[i].finite && got[i].above == want[i].above &&
                      fabs(got[i].nll - want[i].nll) <= 2e-6 * (1 + fabs(want[i].nll)),
                  "eval rows (%lld x %lld), row %lld: finite %d above %d nll %.9g, the CPU's %d %d %.9g", (long long)R,
                  (long long)C, (long long)i, got[i].finite, got[i].above, got[i].nll, want[i].finite, want[i].above,
                  want[i].nll);
      CHECK(!got[1].finite && !got[2].finite && got[4].finite && got[4].above == 0);
    }
    ts__dev_free(G->d, px), ts__dev_free(G->d, pl), ts__dev_free(G->d, ps);
    free(x), free(st), free(st2), free(lab), free(want), free(got);
  }
  EXPECT_ERR(ts__gpu_eval_rows(G->d, NULL, NULL, 4, TS__GPU_EVAL_MAX_C, NULL, NULL), TS_EUNSUPPORTED, "16777216 classes");
}

static void gpu_suite(gpu *G) {
  check_binary(G);
  check_reduce(G);
  check_shape_attention(G);
  check_attention_bf16(G);
  check_gemm(G);
  check_dropout_embedding(G);
  check_eltwise(G);
  check_sum_and_clip(G);
  check_softmax_ce(G);
  check_softmax_ce_shard(G);
  check_eval_rows(G);
  check_layernorm(G);
  check_optim(G);
}

/* The stand-in driver: the host side of the GPU device on any machine. */
static void test_fake(void) {
  int n = 0;
  CHECK_OK(ts_device_count(TS_DEVICE_GPU, &n));
  CHECK(n == 1);
  ts_device_info gi;
  CHECK_OK(ts_device_query(TS_DEVICE_GPU, 0, &gi));
  char s[256];
  ts_device_describe(&gi, s, sizeof s);
  CHECK_MSG(!strcmp(s, "GPU 0: Fake GPU 0, compute capability 9.0, 4 SMs, 1.0 GiB (driver 13.0)"), "%s", s);
  EXPECT_ERR(ts_device_query(TS_DEVICE_GPU, 1, &gi), TS_EUNSUPPORTED, "GPU 1 of 1");
  setenv("FAKE_CUDA_CC", "7.0", 1);
  EXPECT_ERR(ts_device_query(TS_DEVICE_GPU, 0, &gi), TS_EUNSUPPORTED, "compute capability 7.0, below 8.0", "sm_80");
  ts__dev *d = NULL;
  EXPECT_ERR(ts__dev_open(TS_DEVICE_GPU, 0, &d), TS_EUNSUPPORTED, "compute capability 7.0");
  setenv("FAKE_CUDA_COUNT", "0", 1);
  EXPECT_ERR(ts_device_count(TS_DEVICE_GPU, &n), TS_EUNSUPPORTED, "sees no GPU");
  unsetenv("FAKE_CUDA_CC");
  unsetenv("FAKE_CUDA_COUNT");
  CHECK_OK(ts__dev_open(TS_DEVICE_GPU, 0, &d));
  if (!d) return;
  CHECK(d->info.free_bytes == (int64_t)1 << 29);
  /* memory through the driver: a round trip H2D, D2D, D2H; zeroing; a stream and events */
  float h[64], back[64];
  for (int i = 0; i < 64; i++) h[i] = (float)i;
  void *a, *b;
  CHECK_OK(ts__dev_alloc(d, sizeof h, &a));
  CHECK_OK(ts__dev_alloc(d, sizeof h, &b));
  ts__dev_stream *st;
  ts__dev_event *e0, *e1;
  CHECK_OK(ts__dev_stream_create(d, &st));
  CHECK_OK(ts__dev_event_create(d, &e0));
  CHECK_OK(ts__dev_event_create(d, &e1));
  CHECK_OK(ts__dev_event_record(d, e0, st));
  CHECK_OK(ts__dev_copy(d, a, h, sizeof h, TS__H2D, st));
  CHECK_OK(ts__dev_event_record(d, e1, st));
  CHECK_OK(ts__dev_stream_wait(d, NULL, e1));
  CHECK_OK(ts__dev_copy(d, b, a, sizeof h, TS__D2D, NULL));
  CHECK_OK(ts__dev_copy(d, back, b, sizeof h, TS__D2H, NULL));
  CHECK_OK(ts__dev_sync(d));
  CHECK(!memcmp(back, h, sizeof h));
  double ms = -1;
  CHECK_OK(ts__dev_event_elapsed(d, e0, e1, &ms));
  CHECK(ms >= 0);
  void *huge = NULL;
  EXPECT_ERR(ts__dev_alloc(d, (size_t)1 << 31, &huge), TS_ENOMEM, "allocating 2147483648 bytes", "out of memory",
             "MiB free of");
  /* launches: the kernel found in the PTX, the parameter count checked */
  int v = 7;
  void *args[] = {&b, &v, &v, &v};
  const unsigned g1[3] = {1, 1, 1}, b1[3] = {32, 1, 1};
  EXPECT_ERR(ts__cuda_launch(d, "ts_k_fill_f32", g1, b1, 0, NULL, args, 2), TS_EINVAL, "ts_k_fill_f32 takes 3 parameters, given 2");
  EXPECT_ERR(ts__cuda_launch(d, "ts_k_fill_f32", g1, b1, 0, NULL, args, 4), TS_EINVAL, "given 4");
  EXPECT_ERR(ts__cuda_launch(d, "ts_k_no_such", g1, b1, 0, NULL, args, 1), TS_ENOTFOUND, "no kernel ts_k_no_such");
  void *fk = dlopen(getenv("TESSERA_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
  int *launches = fk ? dlsym(fk, "fake_cuda_launches") : NULL, *emulates = fk ? dlsym(fk, "fake_cuda_emulates") : NULL;
  const char *last = fk ? dlsym(fk, "fake_cuda_last_kernel") : NULL;
  CHECK(launches && last && emulates);
  int before = launches ? *launches : 0;
  const char *why = NULL;
  /* the stand-in runs the kernels on its emulator (not under ASan): then every comparison with
   * the CPU is made, as on a GPU */
  int emu = emulates && *emulates && !(getenv("FAKE_CUDA_EMULATE") && !strcmp(getenv("FAKE_CUDA_EMULATE"), "0"));
  printf("the stand-in driver %s the kernels\n", emu ? "emulates" : "only records");
  gpu G = {d, !emu, !strcmp(ts__gpu_gemm_impl(&why), "cublas"), NULL};
  CHECK_MSG(G.cublas, "the stand-in cuBLAS was not loaded: %s", why ? why : "");
  gpu_suite(&G); /* every launcher: its kernel and parameter count checked, nothing run */
  void *fb = dlopen(getenv("TESSERA_LIBCUBLAS"), RTLD_NOW | RTLD_NOLOAD);
  int *calls = fb ? dlsym(fb, "fake_cublas_calls") : NULL, *compute = fb ? dlsym(fb, "fake_cublas_last_compute") : NULL;
  CHECK_MSG(calls && *calls >= 10, "%d cuBLAS calls", calls ? *calls : -1);
  { /* float32_matmul_precision high: f32 GEMMs as CUBLAS_COMPUTE_32F_FAST_TF32 (the stand-in rounds the
     * operands to TF32's 10-bit mantissa: not the real f32 product, within TF32's error of it); bf16 as
     * before; off again: real f32 */
    enum { M = 33, K = 70, N = 21 };
    static float a[M * K], b[K * N], c[M * N], c32[M * N];
    ts_test_fill(a, M * K, 95, -1, 1), ts_test_fill(b, K * N, 96, -1, 1);
    const ts__mm_desc md = {1, M, N, K, 0, 0, 0, 0};
    CHECK_OK(ts__matmul_ref(&md, a, b, c32));
    void *pa = up(&G, a, sizeof a), *pb = up(&G, b, sizeof b), *pc = up(&G, NULL, sizeof c);
    CHECK(!ts__gpu_tf32());
    ts__gpu_set_tf32(1);
    CHECK_OK(ts__gpu_gemm(d, &md, TS_F32, TS_F32, pa, pb, NULL, pc, NULL));
    down(&G, c, pc, sizeof c);
    CHECK_MSG(compute && *compute == 77, "f32 GEMM with TF32 asked for: compute type %d", compute ? *compute : -1);
    CHECK_CLOSE(c, c32, M * N, 2e-2, 5e-3, "f32 GEMM on TF32 against the real f32 product");
    CHECK_MSG(memcmp(c, c32, sizeof c), "f32 GEMM on TF32: bitwise the real f32 product (not rounded to TF32?)");
    ts__gpu_set_tf32(0);
    CHECK_OK(ts__gpu_gemm(d, &md, TS_F32, TS_F32, pa, pb, NULL, pc, NULL));
    down(&G, c, pc, sizeof c);
    CHECK_MSG(compute && *compute == 68, "f32 GEMM by default: compute type %d (real f32: 68)", compute ? *compute : -1);
    CHECK_CLOSE(c, c32, M * N, 1e-5, 1e-5, "f32 GEMM (real f32) against the reference");
    /* f16 (amp_dtype f16): cuBLAS runs the GEMM itself (CUDA_R_16F, f32 products and sums), the
     * bias filled first (ts_k_fill_rows_f16): against the f32 product of the same f16 values plus
     * the bias, rounded once to f16 (src/tensor/dtype.c), within one f16 ulp */
    static uint16_t ha[M * K], hb[K * N], hbias[N], hc[M * N];
    static float fa[M * K], fb16[K * N], fbias[N], want[M * N], got[M * N];
    ts__lp_from_f32(a, ha, TS_F16, M * K), ts__lp_from_f32(b, hb, TS_F16, K * N);
    for (int j = 0; j < N; j++) hbias[j] = ts_f32_to_f16(0.25f * (float)(j % 7) - 0.75f);
    ts__lp_to_f32(ha, TS_F16, fa, M * K), ts__lp_to_f32(hb, TS_F16, fb16, K * N), ts__lp_to_f32(hbias, TS_F16, fbias, N);
    CHECK_OK(ts__matmul_ref(&md, fa, fb16, want));
    for (int i = 0; i < M * N; i++) want[i] = ts_f16_to_f32(ts_f32_to_f16(want[i] + fbias[i % N]));
    void *pbias = up(&G, hbias, sizeof hbias);
    CHECK_OK(ts__dev_copy(d, pa, ha, sizeof ha, TS__H2D, NULL));
    CHECK_OK(ts__dev_copy(d, pb, hb, sizeof hb, TS__H2D, NULL));
    const int before16 = calls ? *calls : 0;
    CHECK_OK(ts__gpu_gemm(d, &md, TS_F16, TS_F16, pa, pb, pbias, pc, NULL));
    down(&G, hc, pc, sizeof hc);
    ts__lp_to_f32(hc, TS_F16, got, M * N);
    CHECK_MSG(calls && *calls == before16 + 1, "the f16 GEMM did not go through cuBLAS");
    if (!G.fake) /* the bias's fill is a kernel: emulated (not under ASan) */
      CHECK_CLOSE(got, want, M * N, 1e-3, 1.0 / 512, "f16 GEMM with bias (cuBLAS) against the f32 product rounded to f16");
    ts__dev_free(d, pa), ts__dev_free(d, pb), ts__dev_free(d, pc), ts__dev_free(d, pbias);
  }
  if (fb) dlclose(fb);
  if (emu) { /* and Tessera's own GEMM kernel, emulated */
    setenv("TESSERA_GPU_GEMM", "tessera", 1);
    G.cublas = 0;
    check_gemm(&G);
    unsetenv("TESSERA_GPU_GEMM");
  }
  int after = launches ? *launches : 0;
  printf("the stand-in driver took %d launches of the GPU kernel table (last %s)\n", after - before, last ? last : "?");
  CHECK_MSG(after - before >= 40, "%d launches", after - before);
  ts__dev_event_destroy(d, e0);
  ts__dev_event_destroy(d, e1);
  ts__dev_stream_destroy(d, st);
  ts__dev_free(d, a);
  ts__dev_free(d, b);
  gpu_fake_close(d, fk);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "real";
  test_cpu_device();
  if (!strcmp(mode, "fake")) {
    test_fake();
  } else if (!strcmp(mode, "fake-noinit")) {
    int n = -1;
    EXPECT_ERR(ts_device_count(TS_DEVICE_GPU, &n), TS_EUNSUPPORTED, "the NVIDIA driver does not start",
               "CUDA_ERROR_NO_DEVICE", "no GPU on this machine");
    CHECK(n == 0);
  } else {
    int n = 0, rc = ts_device_count(TS_DEVICE_GPU, &n);
    if (rc) {
      CHECK_MSG(rc == TS_EUNSUPPORTED && ts_last_error()[0] && !strchr(ts_last_error(), '\n'), "%d %s", rc,
                ts_last_error());
      ts_test_skip("no GPU: %s", ts_last_error());
    } else {
      ts__dev *d = NULL;
      rc = ts__dev_open(TS_DEVICE_GPU, 0, &d);
      if (rc) ts_test_skip("GPU 0 refused: %s", ts_last_error());
      else {
        char s[256];
        ts_device_describe(&d->info, s, sizeof s);
        printf("%s\n", s);
        const char *why = NULL;
        gpu G = {d, 0, !strcmp(ts__gpu_gemm_impl(&why), "cublas"), NULL};
        printf("GEMM: %s%s%s\n", G.cublas ? "cuBLAS" : "Tessera's kernel", why && *why ? ": " : "", why ? why : "");
        gpu_suite(&G);
        if (G.cublas) { /* and the own kernel, which runs where cuBLAS is not found */
          setenv("TESSERA_GPU_GEMM", "tessera", 1);
          G.cublas = 0;
          check_gemm(&G);
          unsetenv("TESSERA_GPU_GEMM");
        }
        ts__dev_close(d);
      }
    }
  }
  return ts_test_finish("test_device");
}
