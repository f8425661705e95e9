/* The GPU's convolution family (src/device/cuda/conv.cu, pool.cu, batchnorm.cu; src/device/
 * cudnn.c) against the CPU kernels on the same inputs, f32 and bf16, with the stated tolerances
 * (docs/gpu.md): convolution in its three directions (stride, padding, dilation, groups, bias),
 * max and average pooling (NCHW, and channels last bitwise NCHW), batch norm in training and
 * inference (several chunks a channel, the fused ReLU, SyncBatchNorm's steps; channels last, by
 * rows and strided, bitwise NCHW), softmax over a middle axis;
 *   - `real` (the default): on a machine with a usable NVIDIA GPU, through cuDNN where it is found,
 *     then through Tessera's direct kernels; elsewhere SKIPPED with the GPU's one-line reason;
 *   - `fake` (TESSERA_LIBCUDA = the stand-in driver, its emulator running the kernels; not under
 *     ASan, where launches are only recorded): the same comparisons through the stand-in cuDNN
 *     (TESSERA_LIBCUDNN, fake_cudnn.c, which computes: descriptors, workspace, the choice of a
 *     deterministic real-f32 algorithm, f16 in f16, NCHW and NHWC), a shape it has no deterministic
 *     algorithm for left to the direct kernels, then every check again on the direct kernels. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/dev.h"
#include "device/gpu_kernels.h"
#include "kernels/conv.h"
#include "kernels/lowp.h"
#include "kernels/norm.h"
#include "kernels/pool.h"
#include "kernels/shape.h"
#include "kernels/softmax.h"
#include "tessera/device.h"
#include "gpu_test.h"

/* (N, C, H, W) <-> (N, H, W, C) on the host (to_nhwc: the first into the second) */
static void nhwc_t(const float *a, float *b, int64_t N, int64_t C, int64_t H, int64_t W, int to_nhwc) {
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t i = 0; i < H * W; i++) {
        const int64_t f = (n * C + c) * H * W + i, l = (n * H * W + i) * C + c;
        if (to_nhwc) b[l] = a[f];
        else b[f] = a[l];
      }
}

/* Pooling channels last (cl 1): on x transposed to NHWC, the max (is_max: with its window
 * indices) or average pooling and its backward (dy = the forward's y), transposed back: bitwise
 * the NCHW kernels' y (ws) and dx */
static void pool_nhwc(gpu *G, const ts__pool_desc *pd, int is_max, const float *x, const float *y, const uint8_t *ws,
                      const float *dx) {
  const size_t nx = (size_t)(pd->N * pd->C * pd->H * pd->W), ny = (size_t)(pd->N * pd->C * pd->OH * pd->OW);
  float *xl = malloc(4 * nx), *yl = malloc(4 * ny), *yb = malloc(4 * ny), *dxl = malloc(4 * nx), *dxb = malloc(4 * nx);
  uint8_t *wl = malloc(ny), *wb = malloc(ny);
  nhwc_t(x, xl, pd->N, pd->C, pd->H, pd->W, 1);
  float *px = up(G, xl, 4 * nx), *py = up(G, NULL, 4 * ny), *pdx = up(G, NULL, 4 * nx);
  uint8_t *pws = up(G, NULL, ny);
  if (is_max) {
    CHECK_OK(ts__gpu_maxpool_fwd(G->d, pd, TS_F32, 1, px, py, pws, NULL));
    CHECK_OK(ts__gpu_maxpool_bwd(G->d, pd, TS_F32, 1, py, pws, pdx, NULL));
  } else {
    CHECK_OK(ts__gpu_avgpool_fwd(G->d, pd, TS_F32, 1, px, py, NULL));
    CHECK_OK(ts__gpu_avgpool_bwd(G->d, pd, TS_F32, 1, py, pdx, NULL));
  }
  down(G, yl, py, 4 * ny), down(G, dxl, pdx, 4 * nx), down(G, wl, pws, ny);
  nhwc_t(yl, yb, pd->N, pd->C, pd->OH, pd->OW, 0);
  nhwc_t(dxl, dxb, pd->N, pd->C, pd->H, pd->W, 0);
  for (size_t i = 0; is_max && i < ny; i++) { /* the window indices, laid out as y */
    const size_t n = i / (size_t)(pd->OH * pd->OW * pd->C), r = i % (size_t)(pd->OH * pd->OW * pd->C);
    wb[(n * (size_t)pd->C + r % (size_t)pd->C) * (size_t)(pd->OH * pd->OW) + r / (size_t)pd->C] = wl[i];
  }
  if (!G->fake) {
    CHECK_MSG(!memcmp(yb, y, 4 * ny), "%s pooling NHWC: y differs from NCHW's", is_max ? "max" : "average");
    CHECK_MSG(!memcmp(dxb, dx, 4 * nx), "%s pooling NHWC: dx differs from NCHW's", is_max ? "max" : "average");
    if (is_max) CHECK_MSG(!memcmp(wb, ws, ny), "max pooling NHWC: the window indices differ from NCHW's");
  }
  free(xl), free(yl), free(yb), free(dxl), free(dxb), free(wl), free(wb);
  ts__dev_free(G->d, px), ts__dev_free(G->d, py), ts__dev_free(G->d, pdx), ts__dev_free(G->d, pws);
}


/* the three directions of a convolution on the GPU, each with the workspace it asks for (cuDNN's;
 * none with the direct kernels) */
static void gpu_conv3(gpu *G, const ts__conv_desc *cd, ts_dtype dt, const void *x, const void *w, const void *b, void *y,
                      const void *dy, void *dx, void *dw, void *db) {
  for (int dir = 0; dir < 3; dir++) {
    size_t wsb = 0;
    void *ws = NULL;
    CHECK_OK(ts__gpu_conv2d_workspace(cd, dt, 0, dir, &wsb));
    if (wsb) CHECK_OK(ts__dev_alloc(G->d, wsb, &ws));
    if (dir == 0) CHECK_OK(ts__gpu_conv2d_fwd(G->d, cd, dt, 0, x, w, b, y, ws, wsb, NULL));
    if (dir == 1) CHECK_OK(ts__gpu_conv2d_bwd_data(G->d, cd, dt, 0, dy, w, dx, ws, wsb, NULL));
    if (dir == 2) CHECK_OK(ts__gpu_conv2d_bwd_weight(G->d, cd, dt, 0, x, dy, dw, db, ws, wsb, NULL));
    CHECK_OK(ts__dev_sync(G->d));
    if (ws) ts__dev_free(G->d, ws);
  }
}

/* convolution (stride, padding, dilation, groups, bias) in its three directions, max and average
 * pooling with padding, batch norm in training and inference, softmax and log_softmax, against
 * the CPU's reference kernels */
static void check_conv_pool_bn(gpu *G) {
  const ts__conv_desc cd = {2, 4, 9, 7, 6, 3, 3, 5, 4, 2, 2, 1, 1, 1, 1, 2};
  CHECK_OK(ts__conv_check(&cd, "test"));
  size_t nx = 2 * 4 * 9 * 7, nw = 6 * 2 * 3 * 3, ny = 2 * 6 * 5 * 4;
  float *x = malloc(4 * nx), *w = malloc(4 * nw), *b = malloc(4 * 6), *y = malloc(4 * ny), *gy = malloc(4 * ny);
  float *dx = malloc(4 * nx), *gdx = malloc(4 * nx), *dw = malloc(4 * nw), *gdw = malloc(4 * nw), *db = malloc(24),
        *gdb = malloc(24);
  ts_test_fill(x, nx, 70, -1, 1), ts_test_fill(w, nw, 71, -1, 1), ts_test_fill(b, 6, 72, -1, 1);
  CHECK_OK(ts__conv2d_fwd_ref(&cd, x, w, b, y));
  CHECK_OK(ts__conv2d_bwd_data_ref(&cd, y, w, dx)); /* y as dy */
  CHECK_OK(ts__conv2d_bwd_weight_ref(&cd, x, y, dw, db));
  float *px = up(G, x, 4 * nx), *pw = up(G, w, 4 * nw), *pb = up(G, b, 24), *py = up(G, NULL, 4 * ny),
        *pdx = up(G, NULL, 4 * nx), *pdw = up(G, NULL, 4 * nw), *pdb = up(G, NULL, 24);
  gpu_conv3(G, &cd, TS_F32, px, pw, pb, py, py, pdx, pdw, pdb);
  down(G, gy, py, 4 * ny), down(G, gdx, pdx, 4 * nx), down(G, gdw, pdw, 4 * nw), down(G, gdb, pdb, 24);
  same(G, "conv2d forward", gy, y, ny, 1e-5, 1e-5);
  same(G, "conv2d backward data", gdx, dx, nx, 1e-5, 1e-5);
  same(G, "conv2d backward weight", gdw, dw, nw, 1e-5, 1e-5);
  same(G, "conv2d backward bias", gdb, db, 6, 1e-5, 1e-5);
  free(y), free(gy), free(dw), free(gdw), free(db), free(gdb), free(w), free(b);
  ts__dev_free(G->d, pw), ts__dev_free(G->d, pb), ts__dev_free(G->d, py), ts__dev_free(G->d, pdw), ts__dev_free(G->d, pdb);
  /* pooling on x (2,4,9,7): 3x3 windows, stride 2, padding 1 */
  const ts__pool_desc pd = {2, 4, 9, 7, 5, 4, 3, 3, 2, 2, 1, 1};
  size_t np = 2 * 4 * 5 * 4;
  float *pyh = malloc(4 * np), *pyg = malloc(4 * np);
  uint8_t *ws = malloc(np), *gws = malloc(np);
  float *pp = up(G, NULL, 4 * np);
  uint8_t *pws = up(G, NULL, np);
  CHECK_OK(ts__maxpool2d_fwd_ref(&pd, x, pyh, ws));
  CHECK_OK(ts__maxpool2d_bwd_ref(&pd, pyh, ws, dx));
  CHECK_OK(ts__gpu_maxpool_fwd(G->d, &pd, TS_F32, 0, px, pp, pws, NULL));
  CHECK_OK(ts__gpu_maxpool_bwd(G->d, &pd, TS_F32, 0, pp, pws, pdx, NULL));
  down(G, pyg, pp, 4 * np), down(G, gws, pws, np), down(G, gdx, pdx, 4 * nx);
  if (!G->fake) CHECK_MSG(!memcmp(pyg, pyh, 4 * np) && !memcmp(gws, ws, np), "max pooling differs from the CPU's");
  same(G, "max pooling backward", gdx, dx, nx, 1e-7, 1e-7);
  pool_nhwc(G, &pd, 1, x, pyg, gws, gdx);
  CHECK_OK(ts__avgpool2d_fwd_ref(&pd, x, pyh));
  CHECK_OK(ts__avgpool2d_bwd_ref(&pd, pyh, dx));
  CHECK_OK(ts__gpu_avgpool_fwd(G->d, &pd, TS_F32, 0, px, pp, NULL));
  CHECK_OK(ts__gpu_avgpool_bwd(G->d, &pd, TS_F32, 0, pp, pdx, NULL));
  down(G, pyg, pp, 4 * np), down(G, gdx, pdx, 4 * nx);
  same(G, "average pooling", pyg, pyh, np, 1e-6, 1e-6);
  same(G, "average pooling backward", gdx, dx, nx, 1e-6, 1e-6);
  pool_nhwc(G, &pd, 0, x, pyg, NULL, gdx);
  free(pyh), free(pyg), free(ws), free(gws);
  ts__dev_free(G->d, pp), ts__dev_free(G->d, pws);
  /* batch norm on x as (N 2, C 4, S 63), training then inference */
  for (int training = 1; training >= 0; training--) {
    float ga[4] = {1.1f, 0.9f, 1.3f, 0.7f}, be[4] = {0.1f, -0.2f, 0.3f, 0}, rm[4] = {0.1f, 0, -0.1f, 0.2f},
          rv[4] = {1, 0.8f, 1.2f, 0.9f}, mean[4], var[4], dg[4], dbb[4];
    float grm[4], grv[4], gmean[4], gvar[4], gdg[4], gdbb[4];
    float *by = malloc(4 * nx), *bdx = malloc(4 * nx), *gby = malloc(4 * nx);
    float *pga = up(G, ga, 16), *pbe = up(G, be, 16), *prm = up(G, rm, 16), *prv = up(G, rv, 16), *pby = up(G, NULL, 4 * nx),
          *pm = up(G, NULL, 16), *pv = up(G, NULL, 16), *pdg = up(G, NULL, 16), *pdbb = up(G, NULL, 16);
    CHECK_OK(ts__batchnorm_fwd_ref(x, ga, be, rm, rv, by, mean, var, 2, 4, 63, 0.1f, 1e-5f, training));
    CHECK_OK(ts__batchnorm_bwd_ref(by, x, ga, mean, var, bdx, dg, dbb, 2, 4, 63, 1e-5f, training));
    CHECK_OK(ts__gpu_batchnorm_fwd(G->d, TS_F32, TS_F32, px, pga, pbe, prm, prv, pby, pm, pv, 2, 4, 63, 0.1f, 1e-5f, training, NULL, G->bnws, NULL));
    CHECK_OK(ts__gpu_batchnorm_bwd(G->d, TS_F32, TS_F32, pby, px, pga, pm, pv, pdx, pdg, pdbb, 2, 4, 63, 1e-5f, training, NULL,
                                   G->bnws, NULL));
    down(G, gby, pby, 4 * nx), down(G, grm, prm, 16), down(G, grv, prv, 16), down(G, gmean, pm, 16);
    down(G, gvar, pv, 16), down(G, gdx, pdx, 4 * nx), down(G, gdg, pdg, 16), down(G, gdbb, pdbb, 16);
    char what[64];
    snprintf(what, sizeof what, "batch norm (training %d): y", training);
    same(G, what, gby, by, nx, 1e-5, 1e-5);
    snprintf(what, sizeof what, "batch norm (training %d): running mean, var", training);
    same(G, what, grm, rm, 4, 1e-6, 1e-5), same(G, what, grv, rv, 4, 1e-6, 1e-5);
    same(G, what, gmean, mean, 4, 1e-6, 1e-5), same(G, what, gvar, var, 4, 1e-6, 1e-5);
    snprintf(what, sizeof what, "batch norm (training %d): dx, dgamma, dbeta", training);
    same(G, what, gdx, bdx, nx, 1e-5, 1e-4), same(G, what, gdg, dg, 4, 1e-5, 1e-4), same(G, what, gdbb, dbb, 4, 1e-5, 1e-4);
    free(by), free(bdx), free(gby);
    ts__dev_free(G->d, pga), ts__dev_free(G->d, pbe), ts__dev_free(G->d, prm), ts__dev_free(G->d, prv);
    ts__dev_free(G->d, pby), ts__dev_free(G->d, pm), ts__dev_free(G->d, pv), ts__dev_free(G->d, pdg);
    ts__dev_free(G->d, pdbb);
  }
  /* SyncBatchNorm's steps: x as (2, 4, 63) held by two "ranks" of one sample each; their parts
   * concatenated as the all-gather would, summed in rank order: every rank's statistics, y, dx and
   * the sum of their dgamma/dbeta are those of one batch norm over both samples */
  {
    enum { Cn = 4, Sn = 63, Hn = Cn * Sn, Q = 2 * Cn + 1 };
    float ga[4] = {1.1f, 0.9f, 1.3f, 0.7f}, be[4] = {0.1f, -0.2f, 0.3f, 0}, rm[4] = {0.1f, 0, -0.1f, 0.2f},
          rv[4] = {1, 0.8f, 1.2f, 0.9f}, mean[4], var[4], dg[4], dbb[4];
    float by[2 * Hn], bdx[2 * Hn], gy[2 * Hn], gdx2[2 * Hn], grm[4], gdg[2][4], gdb[2][4], sdg[4], sdb[4];
    float rm0[4], rv0[4];
    memcpy(rm0, rm, sizeof rm), memcpy(rv0, rv, sizeof rv);
    CHECK_OK(ts__batchnorm_fwd_ref(x, ga, be, rm, rv, by, mean, var, 2, Cn, Sn, 0.1f, 1e-5f, 1));
    CHECK_OK(ts__batchnorm_bwd_ref(by, x, ga, mean, var, bdx, dg, dbb, 2, Cn, Sn, 1e-5f, 1)); /* y as dy */
    float *pga = up(G, ga, 16), *pbe = up(G, be, 16), *pall = up(G, NULL, 4 * 2 * Q), *ptot = up(G, NULL, 4 * Q),
          *py = up(G, NULL, 4 * 2 * Hn), *pdy = up(G, by, 4 * 2 * Hn), *pd = up(G, NULL, 4 * 2 * Hn);
    float *prm[2], *prv[2], *pm[2], *pv[2], *pdg[2], *pdb[2];
    for (int r = 0; r < 2; r++) {
      prm[r] = up(G, rm0, 16), prv[r] = up(G, rv0, 16), pm[r] = up(G, NULL, 16), pv[r] = up(G, NULL, 16);
      pdg[r] = up(G, NULL, 16), pdb[r] = up(G, NULL, 16);
      CHECK_OK(ts__gpu_bn_fwd_sums(G->d, TS_F32, (float *)px + r * Hn, prm[r], 1, Cn, Sn, pall + r * Q, G->bnws, NULL));
    }
    for (int r = 0; r < 2; r++) { /* each rank: the totals, its statistics, its half normalised */
      CHECK_OK(ts__gpu_sum_rows(G->d, pall, 2, Q, ptot, NULL));
      CHECK_OK(ts__gpu_bn_sync_stats(G->d, ptot, prm[r], Cn, 0.1f, prm[r], prv[r], pm[r], pv[r], NULL));
      CHECK_OK(ts__gpu_batchnorm_fwd(G->d, TS_F32, TS_F32, (float *)px + r * Hn, pga, pbe, pm[r], pv[r], py + r * Hn, pm[r],
                                     pv[r], 1, Cn, Sn, 0.1f, 1e-5f, 0, NULL, G->bnws, NULL));
    }
    for (int r = 0; r < 2; r++)
      CHECK_OK(ts__gpu_bn_bwd_sums(G->d, TS_F32, TS_F32, pdy + r * Hn, (float *)px + r * Hn, pm[r], pv[r], pdg[r], pdb[r], 1,
                                   Cn, Sn, 1e-5f, NULL, pall + r * Q, G->bnws, NULL));
    CHECK_OK(ts__gpu_sum_rows(G->d, pall, 2, Q, ptot, NULL));
    for (int r = 0; r < 2; r++)
      CHECK_OK(ts__gpu_bn_bwd_dx(G->d, TS_F32, TS_F32, pdy + r * Hn, (float *)px + r * Hn, pga, pm[r], pv[r], ptot,
                                 pd + r * Hn, 1, Cn, Sn, 1e-5f, NULL, G->bnws, NULL));
    down(G, gy, py, sizeof gy), down(G, gdx2, pd, sizeof gdx2);
    for (int r = 0; r < 2; r++) {
      float gm[4], gv[4];
      down(G, gm, pm[r], 16), down(G, gv, pv[r], 16), down(G, grm, prm[r], 16);
      down(G, gdg[r], pdg[r], 16), down(G, gdb[r], pdb[r], 16);
      same(G, "synchronised batch norm: every rank's mean", gm, mean, 4, 1e-6, 1e-5);
      same(G, "synchronised batch norm: every rank's variance", gv, var, 4, 1e-6, 1e-5);
      same(G, "synchronised batch norm: every rank's running mean", grm, rm, 4, 1e-6, 1e-5);
    }
    for (int c = 0; c < 4; c++) sdg[c] = gdg[0][c] + gdg[1][c], sdb[c] = gdb[0][c] + gdb[1][c];
    same(G, "synchronised batch norm: y", gy, by, 2 * Hn, 1e-5, 1e-5);
    same(G, "synchronised batch norm: dx", gdx2, bdx, 2 * Hn, 1e-5, 1e-4);
    same(G, "synchronised batch norm: the ranks' dgamma summed", sdg, dg, 4, 1e-5, 1e-4);
    same(G, "synchronised batch norm: the ranks' dbeta summed", sdb, dbb, 4, 1e-5, 1e-4);
    for (int r = 0; r < 2; r++) {
      ts__dev_free(G->d, prm[r]), ts__dev_free(G->d, prv[r]), ts__dev_free(G->d, pm[r]), ts__dev_free(G->d, pv[r]);
      ts__dev_free(G->d, pdg[r]), ts__dev_free(G->d, pdb[r]);
    }
    ts__dev_free(G->d, pga), ts__dev_free(G->d, pbe), ts__dev_free(G->d, pall), ts__dev_free(G->d, ptot);
    ts__dev_free(G->d, py), ts__dev_free(G->d, pdy), ts__dev_free(G->d, pd);
  }
  /* softmax and log_softmax over the middle axis of (6, 7, 9) (x's first 378 values), and over
   * the last axis of (6, 63) (a warp a row: lanes over 63 elements) */
  for (int run = 0; run < 4; run++) {
    const int lg = run & 1;
    const int64_t o = 6, l = run < 2 ? 7 : 63, in = run < 2 ? 9 : 1;
    float sy[378], sdx[378], gsy[378], gsdx[378];
    CHECK_OK(ts__softmax_fwd_ref(x, sy, o, l, in, lg));
    CHECK_OK(ts__softmax_bwd_ref(x, sy, sdx, o, l, in, lg)); /* x as dy */
    float *psy = up(G, NULL, sizeof sy), *psdx = up(G, NULL, sizeof sdx);
    CHECK_OK(ts__gpu_softmax_fwd(G->d, TS_F32, px, psy, o, l, in, lg, NULL));
    CHECK_OK(ts__gpu_softmax_bwd(G->d, TS_F32, px, psy, psdx, o, l, in, lg, NULL));
    down(G, gsy, psy, sizeof gsy), down(G, gsdx, psdx, sizeof gsdx);
    char what[64];
    snprintf(what, sizeof what, "%s over (%d, %d, %d)", lg ? "log_softmax" : "softmax", (int)o, (int)l, (int)in);
    same(G, what, gsy, sy, 378, 1e-6, 1e-5);
    snprintf(what, sizeof what, "%s backward over (%d, %d, %d)", lg ? "log_softmax" : "softmax", (int)o, (int)l, (int)in);
    same(G, what, gsdx, sdx, 378, 1e-6, 1e-5);
    ts__dev_free(G->d, psy), ts__dev_free(G->d, psdx);
  }
  free(x), free(dx), free(gdx);
  ts__dev_free(G->d, px), ts__dev_free(G->d, pdx);
}

/* bf16 storage (the ResNets under amp O2/O3) of the same: each GPU kernel against the CPU's
 * 16-bit kernels on the reference path (dnnl = 0: widened, the f32 kernel, rounded once) on the
 * same bf16 inputs. The f32 sums run in another order, so an output may round to the neighbouring
 * bf16 value: within 1e-2 absolute + relative (bf16's step is 2^-8 relative); the max pooling's
 * values and window indices bitwise. Batch norm with gamma/beta f32 and bf16. f16 is refused
 * naming the op. */
static void check_conv_pool_bn_bf16(gpu *G) {
  const ts__conv_desc cd = {2, 4, 9, 7, 6, 3, 3, 5, 4, 2, 2, 1, 1, 1, 1, 2};
  const ts_dtype B = TS_BF16;
  size_t nx = 2 * 4 * 9 * 7, nw = 6 * 2 * 3 * 3, ny = 2 * 6 * 5 * 4;
  float *f = malloc(4 * nx), *gf = malloc(4 * nx), *hf = malloc(4 * nx);
  uint16_t *x = malloc(2 * nx), *w = malloc(2 * nw), *b = malloc(12), *y = malloc(2 * ny), *dx = malloc(2 * nx),
           *dw = malloc(2 * nw), *db = malloc(12), *g16 = malloc(2 * nx);
  ts_test_fill(f, nx, 90, -1, 1), ts__lp_from_f32(f, x, B, (int64_t)nx);
  ts_test_fill(f, nw, 91, -1, 1), ts__lp_from_f32(f, w, B, (int64_t)nw);
  ts_test_fill(f, 6, 92, -1, 1), ts__lp_from_f32(f, b, B, 6);
  CHECK_OK(ts__conv2d_fwd_lp(&cd, B, 0, x, w, b, y));
  CHECK_OK(ts__conv2d_bwd_data_lp(&cd, B, 0, y, w, dx)); /* y as dy */
  CHECK_OK(ts__conv2d_bwd_weight_lp(&cd, B, 0, x, y, dw, db));
  void *px = up(G, x, 2 * nx), *pw = up(G, w, 2 * nw), *pb = up(G, b, 12), *py = up(G, NULL, 2 * ny),
       *pdx = up(G, NULL, 2 * nx), *pdw = up(G, NULL, 2 * nw), *pdb = up(G, NULL, 12);
  gpu_conv3(G, &cd, B, px, pw, pb, py, py, pdx, pdw, pdb);
  /* GPU bf16 (down into g16) vs the CPU's bf16 (h), both widened */
#define SAME16(what, p, h, n)                                                                                          \
  do {                                                                                                                 \
    down(G, g16, p, 2 * (n));                                                                                          \
    ts__lp_to_f32(g16, B, gf, (int64_t)(n)), ts__lp_to_f32(h, B, hf, (int64_t)(n));                                    \
    same(G, what, gf, hf, n, 1e-2, 1e-2);                                                                              \
  } while (0)
  SAME16("bf16 conv2d forward", py, y, ny);
  SAME16("bf16 conv2d backward data", pdx, dx, nx);
  SAME16("bf16 conv2d backward weight", pdw, dw, nw);
  SAME16("bf16 conv2d backward bias", pdb, db, 6);
  if (strcmp(ts__gpu_conv_impl(NULL), "cudnn")) /* f16 runs on cuDNN only (there: the f16 check below) */
    CHECK(ts__gpu_conv2d_fwd(G->d, &cd, TS_F16, 0, px, pw, pb, py, NULL, 0, NULL) == TS_EUNSUPPORTED &&
          strstr(ts_last_error(), "conv2d") && strstr(ts_last_error(), "f16"));
  /* pooling: 3x3 windows, stride 2, padding 1 */
  const ts__pool_desc pd = {2, 4, 9, 7, 5, 4, 3, 3, 2, 2, 1, 1};
  size_t np = 2 * 4 * 5 * 4;
  uint16_t *pyh = malloc(2 * np), *pyg = malloc(2 * np);
  uint8_t *ws = malloc(np), *gws = malloc(np), *pws = up(G, NULL, np);
  void *pp = up(G, NULL, 2 * np);
  CHECK_OK(ts__maxpool2d_fwd_lp(&pd, B, 0, x, pyh, ws));
  CHECK_OK(ts__maxpool2d_bwd_lp(&pd, B, 0, pyh, ws, dx));
  CHECK_OK(ts__gpu_maxpool_fwd(G->d, &pd, B, 0, px, pp, pws, NULL));
  CHECK_OK(ts__gpu_maxpool_bwd(G->d, &pd, B, 0, pp, pws, pdx, NULL));
  down(G, pyg, pp, 2 * np), down(G, gws, pws, np);
  if (!G->fake) CHECK_MSG(!memcmp(pyg, pyh, 2 * np) && !memcmp(gws, ws, np), "bf16 max pooling differs from the CPU's");
  SAME16("bf16 max pooling backward", pdx, dx, nx);
  CHECK_OK(ts__avgpool2d_fwd_lp(&pd, B, 0, x, pyh));
  CHECK_OK(ts__avgpool2d_bwd_lp(&pd, B, 0, pyh, dx));
  CHECK_OK(ts__gpu_avgpool_fwd(G->d, &pd, B, 0, px, pp, NULL));
  CHECK_OK(ts__gpu_avgpool_bwd(G->d, &pd, B, 0, pp, pdx, NULL));
  SAME16("bf16 average pooling", pp, pyh, np);
  SAME16("bf16 average pooling backward", pdx, dx, nx);
  /* batch norm on x as (N 2, C 4, S 63), gamma/beta f32 then bf16, training then inference */
  for (int gb = 0; gb < 2; gb++)
    for (int training = 1; training >= 0; training--) {
      const ts_dtype gdt = gb ? TS_BF16 : TS_F32;
      float ga[4] = {1.1f, 0.9f, 1.3f, 0.7f}, be[4] = {0.1f, -0.2f, 0.3f, 0}, rm[4] = {0.1f, 0, -0.1f, 0.2f},
            rv[4] = {1, 0.8f, 1.2f, 0.9f}, mean[4], var[4], grm[4], grv[4], gmean[4], gvar[4];
      float dgf[4], dbf[4], gdg[4], gdb[4];
      uint16_t ga16[4], be16[4], dg16[4], db16[4], gdg16[4], gdb16[4];
      ts__lp_from_f32(ga, ga16, B, 4), ts__lp_from_f32(be, be16, B, 4);
      const void *hga = gb ? (const void *)ga16 : (const void *)ga, *hbe = gb ? (const void *)be16 : (const void *)be;
      void *hdg = gb ? (void *)dg16 : (void *)dgf, *hdb = gb ? (void *)db16 : (void *)dbf;
      size_t gs = gb ? 8 : 16;
      uint16_t *by = malloc(2 * nx), *bdx = malloc(2 * nx);
      void *pga = up(G, hga, gs), *pbe = up(G, hbe, gs), *pdg = up(G, NULL, gs), *pdbb = up(G, NULL, gs);
      float *prm = up(G, rm, 16), *prv = up(G, rv, 16), *pm = up(G, NULL, 16), *pv = up(G, NULL, 16);
      void *pby = up(G, NULL, 2 * nx);
      CHECK_OK(ts__batchnorm_fwd_lp(B, gdt, x, hga, hbe, rm, rv, by, mean, var, 2, 4, 63, 0.1f, 1e-5f, training, NULL, 0));
      CHECK_OK(ts__batchnorm_bwd_lp(B, gdt, by, x, hga, mean, var, bdx, hdg, hdb, 2, 4, 63, 1e-5f, training, NULL, 0));
      CHECK_OK(ts__gpu_batchnorm_fwd(G->d, B, gdt, px, pga, pbe, prm, prv, pby, pm, pv, 2, 4, 63, 0.1f, 1e-5f, training,
                                     NULL, G->bnws, NULL));
      CHECK_OK(ts__gpu_batchnorm_bwd(G->d, B, gdt, pby, px, pga, pm, pv, pdx, pdg, pdbb, 2, 4, 63, 1e-5f, training, NULL,
                                     G->bnws, NULL));
      char what[80];
      snprintf(what, sizeof what, "bf16 batch norm (gamma %s, training %d): y", ts_dtype_name(gdt), training);
      SAME16(what, pby, by, nx);
      down(G, grm, prm, 16), down(G, grv, prv, 16), down(G, gmean, pm, 16), down(G, gvar, pv, 16);
      snprintf(what, sizeof what, "bf16 batch norm (gamma %s, training %d): statistics", ts_dtype_name(gdt), training);
      same(G, what, grm, rm, 4, 1e-5, 1e-4), same(G, what, grv, rv, 4, 1e-5, 1e-4);
      same(G, what, gmean, mean, 4, 1e-5, 1e-4), same(G, what, gvar, var, 4, 1e-5, 1e-4);
      snprintf(what, sizeof what, "bf16 batch norm (gamma %s, training %d): dx", ts_dtype_name(gdt), training);
      SAME16(what, pdx, bdx, nx);
      snprintf(what, sizeof what, "bf16 batch norm (gamma %s, training %d): dgamma, dbeta", ts_dtype_name(gdt), training);
      if (gb) {
        down(G, gdg16, pdg, 8), down(G, gdb16, pdbb, 8);
        ts__lp_to_f32(gdg16, B, gdg, 4), ts__lp_to_f32(gdb16, B, gdb, 4);
        ts__lp_to_f32(dg16, B, dgf, 4), ts__lp_to_f32(db16, B, dbf, 4);
      } else {
        down(G, gdg, pdg, 16), down(G, gdb, pdbb, 16);
      }
      same(G, what, gdg, dgf, 4, 2e-2, 1e-2), same(G, what, gdb, dbf, 4, 2e-2, 1e-2);
      free(by), free(bdx);
      ts__dev_free(G->d, pga), ts__dev_free(G->d, pbe), ts__dev_free(G->d, pdg), ts__dev_free(G->d, pdbb);
      ts__dev_free(G->d, prm), ts__dev_free(G->d, prv), ts__dev_free(G->d, pm), ts__dev_free(G->d, pv);
      ts__dev_free(G->d, pby);
    }
  /* softmax and log_softmax over the middle axis of (6, 7, 9) (x's first 378 values) */
  for (int lg = 0; lg < 2; lg++) {
    uint16_t sy[378], sdx[378];
    CHECK_OK(ts__softmax_fwd_lp(B, x, sy, 6, 7, 9, lg, 0));
    CHECK_OK(ts__softmax_bwd_lp(B, x, sy, sdx, 6, 7, 9, lg, 0)); /* x as dy */
    void *psy = up(G, NULL, sizeof sy), *psdx = up(G, NULL, sizeof sdx);
    CHECK_OK(ts__gpu_softmax_fwd(G->d, B, px, psy, 6, 7, 9, lg, NULL));
    CHECK_OK(ts__gpu_softmax_bwd(G->d, B, px, psy, psdx, 6, 7, 9, lg, NULL));
    SAME16(lg ? "bf16 log_softmax" : "bf16 softmax", psy, sy, 378);
    SAME16(lg ? "bf16 log_softmax backward" : "bf16 softmax backward", psdx, sdx, 378);
    ts__dev_free(G->d, psy), ts__dev_free(G->d, psdx);
  }
#undef SAME16
  free(f), free(gf), free(hf), free(x), free(w), free(b), free(y), free(dx), free(dw), free(db), free(g16);
  free(pyh), free(pyg), free(ws), free(gws);
  ts__dev_free(G->d, px), ts__dev_free(G->d, pw), ts__dev_free(G->d, pb), ts__dev_free(G->d, py);
  ts__dev_free(G->d, pdx), ts__dev_free(G->d, pdw), ts__dev_free(G->d, pdb), ts__dev_free(G->d, pp);
  ts__dev_free(G->d, pws);
}

/* batch norm with a channel's positions in several chunks (N 3, S 1500: 4500 positions, 2 chunks),
 * x offset by 40 (the shifted sums keep their digits), f32 and bf16 (gamma/beta f32), with the
 * ReLU fused (plain; and leaky, f32): against the CPU's fused loops (ts__batchnorm_relu_fwd/_bwd),
 * and bitwise against the GPU's unfused pair (batch norm, then the ReLU and its backward from the
 * output, as the executor runs them without the fusion) */
static void check_bn_chunks_relu(gpu *G) {
  enum { Nn = 3, Cn = 5, Sn = 1500, NX = Nn * Cn * Sn };
  float *x = malloc(4 * NX), *dy = malloc(4 * NX), *fy = malloc(4 * NX), *fdx = malloc(4 * NX);
  float *gy = malloc(4 * NX), *gdx = malloc(4 * NX), *uy = malloc(4 * NX), *udx = malloc(4 * NX);
  uint16_t *h16 = malloc(2 * NX), *d16 = malloc(2 * NX), *y16 = malloc(2 * NX), *dx16 = malloc(2 * NX), *g16 = malloc(4 * NX);
  ts_test_fill(x, NX, 90, 39, 41);
  ts_test_fill(dy, NX, 91, -1, 1);
  for (int run = 0; run < 3; run++) {
    const ts_dtype dt = run == 1 ? TS_BF16 : TS_F32;
    const float alpha = run == 2 ? 0.1f : 0.0f;
    const size_t es = dt == TS_F32 ? 4 : 2;
    const void *hx = x, *hdy = dy;
    if (dt == TS_BF16) {
      ts__lp_from_f32(x, h16, dt, NX), ts__lp_from_f32(dy, d16, dt, NX);
      hx = h16, hdy = d16;
    }
    float ga[Cn] = {1.1f, 0.9f, 1.3f, 0.7f, 1.0f}, be[Cn] = {0.1f, -0.2f, 0.3f, 0, -0.05f}, rm[Cn] = {0}, rv[Cn] = {1, 1, 1, 1, 1};
    float mean[Cn], var[Cn], dg[Cn], db[Cn], ab[2 * Cn], gm[Cn], gv[Cn], gdg[Cn], gdb[Cn], udg[Cn], udb[Cn];
    const ts__bn_relu hr = {alpha, ab};
    CHECK_OK(ts__batchnorm_relu_fwd(dt, TS_F32, hx, ga, be, rm, rv, dt == TS_F32 ? (void *)fy : (void *)y16, mean, var, Nn, Cn,
                                    Sn, 0.1f, 1e-5f, 1, NULL, &hr));
    CHECK_OK(ts__batchnorm_relu_bwd(dt, TS_F32, hdy, hx, ga, mean, var, dt == TS_F32 ? (void *)fdx : (void *)dx16, dg, db, Nn,
                                    Cn, Sn, 1e-5f, 1, NULL, &hr));
    if (dt == TS_BF16) ts__lp_to_f32(y16, dt, fy, NX), ts__lp_to_f32(dx16, dt, fdx, NX);
    const float rm0[Cn] = {0}, rv0[Cn] = {1, 1, 1, 1, 1};
    void *px = up(G, hx, es * NX), *pdy = up(G, hdy, es * NX), *pz = up(G, NULL, es * NX), *py = up(G, NULL, es * NX),
         *pdz = up(G, NULL, es * NX), *pdx = up(G, NULL, es * NX);
    float *pga = up(G, ga, sizeof ga), *pbe = up(G, be, sizeof be), *prm = up(G, rm0, sizeof rm0), *prv = up(G, rv0, sizeof rv0);
    float *pm = up(G, NULL, sizeof mean), *pv = up(G, NULL, sizeof var), *pdg = up(G, NULL, sizeof dg),
          *pdb = up(G, NULL, sizeof db), *pab = up(G, NULL, sizeof ab);
    /* unfused: z = bn(x), y = relu(z); dz from y; bn backward of dz */
    CHECK_OK(ts__gpu_batchnorm_fwd(G->d, dt, TS_F32, px, pga, pbe, prm, prv, pz, pm, pv, Nn, Cn, Sn, 0.1f, 1e-5f, 1, NULL,
                                   G->bnws, NULL));
    CHECK_OK(ts__gpu_eltwise_fwd(G->d, TS_ELT_RELU, alpha, dt, pz, py, NX, NULL));
    CHECK_OK(ts__gpu_eltwise_bwd(G->d, TS_ELT_RELU, alpha, 1, dt, pdy, py, pdz, NX, NULL));
    CHECK_OK(ts__gpu_batchnorm_bwd(G->d, dt, TS_F32, pdz, px, pga, pm, pv, pdx, pdg, pdb, Nn, Cn, Sn, 1e-5f, 1, NULL,
                                   G->bnws, NULL));
    down(G, g16, py, es * NX);
    if (dt == TS_F32) memcpy(uy, g16, 4 * NX); else ts__lp_to_f32(g16, dt, uy, NX);
    down(G, g16, pdx, es * NX);
    if (dt == TS_F32) memcpy(udx, g16, 4 * NX); else ts__lp_to_f32(g16, dt, udx, NX);
    down(G, udg, pdg, sizeof udg), down(G, udb, pdb, sizeof udb);
    /* fused */
    const ts__gpu_bn_relu gr = {alpha, pab};
    CHECK_OK(ts__dev_copy(G->d, prm, rm0, sizeof rm0, TS__H2D, NULL));
    CHECK_OK(ts__dev_copy(G->d, prv, rv0, sizeof rv0, TS__H2D, NULL));
    CHECK_OK(ts__dev_memset0(G->d, py, es * NX, NULL));
    CHECK_OK(ts__gpu_batchnorm_fwd(G->d, dt, TS_F32, px, pga, pbe, prm, prv, py, pm, pv, Nn, Cn, Sn, 0.1f, 1e-5f, 1, &gr,
                                   G->bnws, NULL));
    CHECK_OK(ts__gpu_batchnorm_bwd(G->d, dt, TS_F32, pdy, px, pga, pm, pv, pdx, pdg, pdb, Nn, Cn, Sn, 1e-5f, 1, &gr,
                                   G->bnws, NULL));
    down(G, g16, py, es * NX);
    if (dt == TS_F32) memcpy(gy, g16, 4 * NX); else ts__lp_to_f32(g16, dt, gy, NX);
    down(G, g16, pdx, es * NX);
    if (dt == TS_F32) memcpy(gdx, g16, 4 * NX); else ts__lp_to_f32(g16, dt, gdx, NX);
    down(G, gm, pm, sizeof gm), down(G, gv, pv, sizeof gv), down(G, gdg, pdg, sizeof gdg), down(G, gdb, pdb, sizeof gdb);
    char what[96];
    const double tol = dt == TS_F32 ? 1e-4 : 1e-2;
    snprintf(what, sizeof what, "batch norm + relu (%s, alpha %g, 2 chunks): y against the CPU's", ts_dtype_name(dt), alpha);
    same(G, what, gy, fy, NX, tol, tol);
    snprintf(what, sizeof what, "batch norm + relu (%s, alpha %g): mean, var", ts_dtype_name(dt), alpha);
    same(G, what, gm, mean, Cn, 1e-5, 1e-5), same(G, what, gv, var, Cn, 1e-5, 1e-3);
    snprintf(what, sizeof what, "batch norm + relu (%s, alpha %g): dx, dgamma, dbeta", ts_dtype_name(dt), alpha);
    same(G, what, gdx, fdx, NX, tol, tol), same(G, what, gdg, dg, Cn, 1e-3, 1e-3), same(G, what, gdb, db, Cn, 1e-3, 1e-3);
    if (!G->fake)
      CHECK_MSG(!memcmp(gy, uy, 4 * NX) && !memcmp(gdx, udx, 4 * NX) && !memcmp(gdg, udg, sizeof gdg) &&
                    !memcmp(gdb, udb, sizeof gdb),
                "batch norm + relu (%s, alpha %g): the fused pair differs from the unfused nodes", ts_dtype_name(dt),
                alpha);
    ts__dev_free(G->d, px), ts__dev_free(G->d, pdy), ts__dev_free(G->d, pz), ts__dev_free(G->d, py);
    ts__dev_free(G->d, pdz), ts__dev_free(G->d, pdx), ts__dev_free(G->d, pga), ts__dev_free(G->d, pbe);
    ts__dev_free(G->d, prm), ts__dev_free(G->d, prv), ts__dev_free(G->d, pm), ts__dev_free(G->d, pv);
    ts__dev_free(G->d, pdg), ts__dev_free(G->d, pdb), ts__dev_free(G->d, pab);
  }
  free(x), free(dy), free(fy), free(fdx), free(gy), free(gdx), free(uy), free(udx);
  free(h16), free(d16), free(y16), free(dx16), free(g16);
}


/* Batch norm channels last: x as (N S, C, 1) (NHWC), its per-channel sums by the row-reading
 * kernel (ts_k_bn_cl_psums, a block per 32 channels) and by the NCHW kernels run on it
 * (TESSERA_GPU_BN_CL=strided): y, dx (transposed back), the statistics, the running ones, dgamma
 * and dbeta bitwise those of the NCHW call on (N, C, S); 40 channels (a block's 32 and 8 more),
 * 4500 positions (2 chunks, each not a whole number of 256-position rounds), with the ReLU fused;
 * f32 (leaky) and bf16. */
static void check_bn_channels_last(gpu *G) {
  enum { Nn = 3, Cn = 40, Sn = 1500, NX = Nn * Cn * Sn };
  float *x = malloc(4 * NX), *dy = malloc(4 * NX), *xl = malloc(4 * NX), *dyl = malloc(4 * NX), *h = malloc(4 * NX);
  uint16_t *h16 = malloc(2 * NX);
  float *res[3][2]; /* [layout][y, dx] as NCHW f32 */
  float st[3][6][Cn]; /* mean, var, running mean, running var, dgamma, dbeta */
  size_t wsb = ts__gpu_bn_workspace(Nn, Cn, Sn);
  void *ws = NULL;
  CHECK_OK(ts__dev_alloc(G->d, wsb, &ws));
  ts_test_fill(x, NX, 93, 39, 41);
  ts_test_fill(dy, NX, 94, -1, 1);
  nhwc_t(x, xl, Nn, Cn, Sn, 1, 1), nhwc_t(dy, dyl, Nn, Cn, Sn, 1, 1);
  float ga[Cn], be[Cn], rm0[Cn], rv0[Cn];
  for (int c = 0; c < Cn; c++) ga[c] = 0.8f + 0.01f * (float)c, be[c] = 0.05f * (float)(c % 7) - 0.1f, rm0[c] = 0, rv0[c] = 1;
  for (int run = 0; run < 2; run++) {
    const ts_dtype dt = run ? TS_BF16 : TS_F32;
    const float alpha = run ? 0.0f : 0.1f;
    const size_t es = run ? 2 : 4;
    for (int lay = 0; lay < 3; lay++) { /* NCHW; NHWC rows; NHWC strided */
      const float *hx = lay ? xl : x, *hdy = lay ? dyl : dy;
      void *px, *pdy;
      if (run) {
        ts__lp_from_f32(hx, h16, dt, NX), px = up(G, h16, es * NX);
        ts__lp_from_f32(hdy, h16, dt, NX), pdy = up(G, h16, es * NX);
      } else px = up(G, hx, es * NX), pdy = up(G, hdy, es * NX);
      void *py = up(G, NULL, es * NX), *pdx = up(G, NULL, es * NX);
      float *pga = up(G, ga, sizeof ga), *pbe = up(G, be, sizeof be), *prm = up(G, rm0, sizeof rm0),
            *prv = up(G, rv0, sizeof rv0), *pm = up(G, NULL, 4 * Cn), *pv = up(G, NULL, 4 * Cn),
            *pdg = up(G, NULL, 4 * Cn), *pdb = up(G, NULL, 4 * Cn), *pab = up(G, NULL, 8 * Cn);
      const ts__gpu_bn_relu gr = {alpha, pab};
      const int64_t N = lay ? Nn * Sn : Nn, S = lay ? 1 : Sn;
      if (lay == 2) setenv("TESSERA_GPU_BN_CL", "strided", 1);
      CHECK_OK(ts__gpu_batchnorm_fwd(G->d, dt, TS_F32, px, pga, pbe, prm, prv, py, pm, pv, N, Cn, S, 0.1f, 1e-5f, 1, &gr,
                                     ws, NULL));
      CHECK_OK(ts__gpu_batchnorm_bwd(G->d, dt, TS_F32, pdy, px, pga, pm, pv, pdx, pdg, pdb, N, Cn, S, 1e-5f, 1, &gr, ws,
                                     NULL));
      unsetenv("TESSERA_GPU_BN_CL");
      for (int o = 0; o < 2; o++) {
        res[lay][o] = malloc(4 * NX);
        if (run) down(G, h16, o ? pdx : py, es * NX), ts__lp_to_f32(h16, dt, h, NX);
        else down(G, h, o ? pdx : py, es * NX);
        if (lay) nhwc_t(h, res[lay][o], Nn, Cn, Sn, 1, 0);
        else memcpy(res[lay][o], h, 4 * NX);
      }
      float *from[6] = {pm, pv, prm, prv, pdg, pdb};
      for (int k = 0; k < 6; k++) down(G, st[lay][k], from[k], 4 * Cn);
      void *all[] = {px, pdy, py, pdx, pga, pbe, prm, prv, pm, pv, pdg, pdb, pab};
      for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) ts__dev_free(G->d, all[k]);
    }
    if (!G->fake) {
      static const char *lname[3] = {"NCHW", "channels last (rows)", "channels last (strided)"};
      for (int lay = 1; lay < 3; lay++) {
        CHECK_MSG(!memcmp(res[lay][0], res[0][0], 4 * NX) && !memcmp(res[lay][1], res[0][1], 4 * NX),
                  "batch norm + relu %s %s: y or dx differs from NCHW's", ts_dtype_name(dt), lname[lay]);
        CHECK_MSG(!memcmp(st[lay], st[0], sizeof st[0]),
                  "batch norm + relu %s %s: the statistics, running statistics or dgamma/dbeta differ from NCHW's",
                  ts_dtype_name(dt), lname[lay]);
      }
    }
    for (int lay = 0; lay < 3; lay++) free(res[lay][0]), free(res[lay][1]);
  }
  ts__dev_free(G->d, ws);
  free(x), free(dy), free(xl), free(dyl), free(h), free(h16);
}

/* every check above, on the library the plans would use (cuDNN where found) */
static void conv_suite(gpu *G) {
  CHECK_OK(ts__dev_alloc(G->d, ts__gpu_bn_workspace(3, 5, 1500), &G->bnws)); /* the largest batch norm above */
  check_conv_pool_bn(G);
  check_conv_pool_bn_bf16(G);
  check_bn_chunks_relu(G);
  check_bn_channels_last(G);
  ts__dev_free(G->d, G->bnws);
}

/* the same on Tessera's direct kernels (what runs where cuDNN is not found) */
static void direct_suite(gpu *G) {
  setenv("TESSERA_GPU_CONV", "tessera", 1);
  conv_suite(G);
  unsetenv("TESSERA_GPU_CONV");
}

/* The stand-in driver and cuDNN. */
static void test_fake(void) {
  ts__dev *d = NULL;
  CHECK_OK(ts__dev_open(TS_DEVICE_GPU, 0, &d));
  if (!d) return;
  void *fk = dlopen(getenv("TESSERA_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
  int *emulates = fk ? dlsym(fk, "fake_cuda_emulates") : NULL;
  const int emu = emulates && *emulates && !(getenv("FAKE_CUDA_EMULATE") && !strcmp(getenv("FAKE_CUDA_EMULATE"), "0"));
  printf("the stand-in driver %s the kernels\n", emu ? "emulates" : "only records");
  gpu G = {d, !emu, 0, NULL};
  const char *why = NULL;
  CHECK_MSG(!strcmp(ts__gpu_conv_impl(&why), "cudnn"), "the stand-in cuDNN was not loaded: %s", why ? why : "");
  conv_suite(&G);
  /* the convolutions went through the stand-in cuDNN (fake_cudnn.c), which computes them: of its
   * four algorithms, the one a real-f32 deterministic choice within the workspace bound allows
   * (4, plain FMA) for f32, the first deterministic one (1, tensor cores) for bf16 */
  CHECK_MSG(!strcmp(ts__gpu_conv_impl(&why), "cudnn"), "the stand-in cuDNN was not loaded: %s", why ? why : "");
  void *fd = dlopen(getenv("TESSERA_LIBCUDNN"), RTLD_NOW | RTLD_NOLOAD);
  int *dcalls = fd ? dlsym(fd, "fake_cudnn_calls") : NULL, *algo = fd ? dlsym(fd, "fake_cudnn_algo") : NULL;
  CHECK_MSG(dcalls && *dcalls >= 6, "%d cuDNN convolutions", dcalls ? *dcalls : -1);
  CHECK_MSG(algo && algo[0] == 4 && algo[1] == 1, "cuDNN algorithms %d (f32), %d (bf16)", algo ? algo[0] : -1,
            algo ? algo[1] : -1);
  /* a shape the stand-in has no deterministic algorithm for (5x5): the direct kernels run it,
   * the stand-in is not called */
  {
    const ts__conv_desc c5 = {1, 2, 8, 8, 3, 5, 5, 4, 4, 1, 1, 0, 0, 1, 1, 1};
    float x[128], w[150], y[48], gy[48];
    ts_test_fill(x, 128, 95, -1, 1), ts_test_fill(w, 150, 96, -1, 1);
    CHECK_OK(ts__conv2d_fwd_ref(&c5, x, w, NULL, y));
    int before5 = dcalls ? *dcalls : 0;
    void *px = up(&G, x, sizeof x), *pw = up(&G, w, sizeof w), *py = up(&G, NULL, sizeof y);
    size_t wsb = 1;
    CHECK_OK(ts__gpu_conv2d_workspace(&c5, TS_F32, 0, 0, &wsb));
    CHECK(wsb == 0);
    CHECK_OK(ts__gpu_conv2d_fwd(d, &c5, TS_F32, 0, px, pw, NULL, py, NULL, 0, NULL));
    down(&G, gy, py, sizeof gy);
    same(&G, "conv2d 5x5 forward (no deterministic cuDNN algorithm: the direct kernel)", gy, y, 48, 1e-5, 1e-5);
    CHECK_MSG(dcalls && *dcalls == before5, "the stand-in cuDNN ran a convolution it has no deterministic algorithm for");
    /* f16 runs on cuDNN only: refused for this shape, naming why */
    CHECK(ts__gpu_conv2d_fwd(d, &c5, TS_F16, 0, px, pw, NULL, py, NULL, 0, NULL) == TS_EUNSUPPORTED &&
          strstr(ts_last_error(), "f16 runs on cuDNN only") != NULL);
    ts__dev_free(d, px), ts__dev_free(d, pw), ts__dev_free(d, py);
  }
  { /* TESSERA_GPU_DETERMINISTIC=0: cuDNN's non-deterministic algorithm allowed (the stand-in's 2,
     * listed before its deterministic real-f32 one and alone for 5x5 filters), for shapes not yet
     * chosen for: both run on it (not the direct kernel), against the CPU */
    setenv("TESSERA_GPU_DETERMINISTIC", "0", 1);
    const ts__conv_desc cs[2] = {{1, 2, 9, 8, 3, 5, 5, 5, 4, 1, 1, 0, 0, 1, 1, 1}, {1, 3, 6, 6, 2, 3, 3, 6, 6, 1, 1, 1, 1, 1, 1, 1}};
    for (int k = 0; k < 2; k++) {
      const ts__conv_desc *c = &cs[k];
      enum { MX = 256, MW = 160, MY = 80 };
      float x[MX], w[MW], y[MY], gy[MY];
      ts_test_fill(x, MX, 100 + k, -1, 1), ts_test_fill(w, MW, 102 + k, -1, 1);
      CHECK_OK(ts__conv2d_fwd_ref(c, x, w, NULL, y));
      const size_t nx = (size_t)(c->N * c->C * c->H * c->W), nw = (size_t)(c->O * c->C * c->KH * c->KW),
                   ny = (size_t)(c->N * c->O * c->OH * c->OW);
      CHECK(nx <= MX && nw <= MW && ny <= MY);
      const int beforek = dcalls ? *dcalls : 0;
      void *px = up(&G, x, 4 * nx), *pw = up(&G, w, 4 * nw), *py = up(&G, NULL, 4 * ny), *ws = NULL;
      size_t wsb = 0;
      CHECK_OK(ts__gpu_conv2d_workspace(c, TS_F32, 0, 0, &wsb));
      if (wsb) CHECK_OK(ts__dev_alloc(d, wsb, &ws));
      CHECK_OK(ts__gpu_conv2d_fwd(d, c, TS_F32, 0, px, pw, NULL, py, ws, wsb, NULL));
      down(&G, gy, py, 4 * ny);
      same(&G, k ? "conv2d 3x3, non-deterministic cuDNN allowed" : "conv2d 5x5, non-deterministic cuDNN allowed", gy,
           y, ny, 1e-5, 1e-5);
      CHECK_MSG(dcalls && *dcalls == beforek + 1 && algo && algo[0] == 2,
                "TESSERA_GPU_DETERMINISTIC=0, %dx%d: cuDNN ran %d convolutions, algorithm %d (want 1, 2)", (int)c->KH,
                (int)c->KW, dcalls ? *dcalls - beforek : -1, algo ? algo[0] : -1);
      ts__dev_free(d, px), ts__dev_free(d, pw), ts__dev_free(d, py), ts__dev_free(d, ws);
    }
    unsetenv("TESSERA_GPU_DETERMINISTIC");
  }
  { /* f16 (amp_dtype f16): cuDNN runs the convolution in f16 (CUDNN_DATA_HALF), the bias filled
     * first (ts_k_conv_bias_fill_f16), NCHW and NHWC: against the f32 convolution of the same f16
     * values plus the bias, rounded once to f16, within one f16 ulp */
    const ts__conv_desc c3 = {2, 3, 7, 6, 4, 3, 3, 7, 6, 1, 1, 1, 1, 1, 1, 1};
    enum { NX = 2 * 3 * 7 * 6, NW = 4 * 3 * 9, NY = 2 * 4 * 7 * 6 };
    static float x[NX], w[NW], b[4], y[NY], got[NY];
    static uint16_t hx[NX], hw[NW], hb[4], hy[NY], tx[NX], tw[NW], ty[NY];
    ts_test_fill(x, NX, 97, -1, 1), ts_test_fill(w, NW, 98, -1, 1), ts_test_fill(b, 4, 99, -1, 1);
    ts__lp_from_f32(x, hx, TS_F16, NX), ts__lp_from_f32(w, hw, TS_F16, NW), ts__lp_from_f32(b, hb, TS_F16, 4);
    ts__lp_to_f32(hx, TS_F16, x, NX), ts__lp_to_f32(hw, TS_F16, w, NW), ts__lp_to_f32(hb, TS_F16, b, 4);
    CHECK_OK(ts__conv2d_fwd_ref(&c3, x, w, b, y));
    for (int i = 0; i < NY; i++) y[i] = ts_f16_to_f32(ts_f32_to_f16(y[i]));
    CHECK(ts__gpu_conv2d_on_cudnn(&c3, TS_F16, 0, 0) && ts__gpu_conv2d_on_cudnn(&c3, TS_F16, 1, 0));
    const int before = dcalls ? *dcalls : 0;
    for (int cl = 0; cl < 2; cl++) {
      const int64_t dx[4] = {2, 3, 7, 6}, dw[4] = {4, 3, 3, 3}, dy[4] = {2, 7, 6, 4};
      static const int to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};
      if (cl) {
        CHECK_OK(ts__permute_ref(hx, tx, 2, 4, dx, to_nhwc));
        CHECK_OK(ts__permute_ref(hw, tw, 2, 4, dw, to_nhwc));
      }
      void *px = up(&G, cl ? tx : hx, sizeof hx), *pw = up(&G, cl ? tw : hw, sizeof hw), *pb = up(&G, hb, sizeof hb),
           *py = up(&G, NULL, sizeof hy), *ws = NULL;
      size_t wsb = 0;
      CHECK_OK(ts__gpu_conv2d_workspace(&c3, TS_F16, cl, 0, &wsb));
      if (wsb) CHECK_OK(ts__dev_alloc(d, wsb, &ws));
      CHECK_OK(ts__gpu_conv2d_fwd(d, &c3, TS_F16, cl, px, pw, pb, py, ws, wsb, NULL));
      down(&G, cl ? ty : hy, py, sizeof hy);
      if (cl) {
        CHECK_OK(ts__permute_ref(ty, hy, 2, 4, dy, to_nchw));
      }
      ts__lp_to_f32(hy, TS_F16, got, NY);
      if (!G.fake) /* the bias's fill is a kernel: emulated (not under ASan) */
        CHECK_CLOSE(got, y, NY, 1e-3, 1.0 / 512, cl ? "f16 convolution NHWC (cuDNN)" : "f16 convolution (cuDNN)");
      ts__dev_free(d, px), ts__dev_free(d, pw), ts__dev_free(d, pb), ts__dev_free(d, py), ts__dev_free(d, ws);
    }
    CHECK_MSG(dcalls && *dcalls == before + 2, "the f16 convolutions did not go through cuDNN");
  }
  if (fd) dlclose(fd);
  if (emu) direct_suite(&G); /* and Tessera's own convolution kernels, emulated */
  gpu_fake_close(d, fk);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "real";
  if (!strcmp(mode, "fake")) {
    test_fake();
    return ts_test_finish("test_device_conv");
  }
  int n = 0, rc = ts_device_count(TS_DEVICE_GPU, &n);
  ts__dev *d = NULL;
  if (rc) {
    CHECK_MSG(rc == TS_EUNSUPPORTED && ts_last_error()[0] && !strchr(ts_last_error(), '\n'), "%d %s", rc,
              ts_last_error());
    ts_test_skip("no GPU: %s", ts_last_error());
  } else if (ts__dev_open(TS_DEVICE_GPU, 0, &d)) {
    ts_test_skip("GPU 0 refused: %s", ts_last_error());
  } else {
    gpu G = {d, 0, 0, NULL};
    const char *cwhy = NULL;
    const int cudnn = !strcmp(ts__gpu_conv_impl(&cwhy), "cudnn");
    printf("convolutions: %s%s%s\n", cudnn ? "cuDNN" : "Tessera's kernels", cwhy && *cwhy ? ": " : "", cwhy ? cwhy : "");
    conv_suite(&G);
    if (cudnn) direct_suite(&G);
    ts__dev_close(d);
  }
  return ts_test_finish("test_device_conv");
}
