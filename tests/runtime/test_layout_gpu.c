/* Channels last on a GPU plan (src/runtime/run_gpu_conv.c, exec.c plan_layouts): a small ResNet
 * trained two steps with its 4-d activations kept NHWC on the device and kept NCHW, and on the
 * CPU. The network touches every case: a convolution with a bias on the bound (NCHW) input, batch
 * norm + ReLU, a max pooling (its window indices NHWC) whose output feeds a dropout (NCHW only:
 * the pooling's y staged through scratch, the next convolution's x too), two 3x3 convolutions and
 * a residual add, a 3x3 average pooling, a 1x1 stride-2 convolution (its filter the same memory in
 * both layouts), a global average pooling (1x1: both layouts), a dense layer:
 *   x (2,3,12,12) -> conv+b -> bn relu -> maxpool 2 -> dropout -> [conv bn relu] = b0 -> conv bn
 *   relu -> conv bn, + b0, relu -> avgpool 3x3 -> conv 1x1 /2 bn relu -> global avgpool -> dense
 * Asserted, at amp O0 (f32, TESSERA_GPU_CHANNELS_LAST=1) and O2 (bf16, and f16: channels last by
 * default; f16's convolutions handed to cuDNN in f16, the rest through f32 copies):
 *  - the plan keeps values NHWC (ts_plan_channels_last_values > 0; none with =0) and the stand-in
 *    cuDNN ran convolutions on NHWC tensors;
 *  - the results, over two training runs, bitwise those of the NCHW plan: the loss, dx, every
 *    filter's, the bias's, the dense layer's and the batch norms' gradients, the running
 *    statistics (every kernel computes each element from the same terms in the same order in
 *    either layout; the stand-in cuDNN too);
 *  - against the CPU within 1e-4 (f32) / 5e-2 (bf16) of each array's largest magnitude.
 *   test_layout_gpu        a real GPU with cuDNN (SKIPPED with the reason without one): there the
 *                          NHWC algorithms may round otherwise, so NHWC is held to the CPU bound
 *   test_layout_gpu fake   the stand-in driver and cuDNN (under ASan only the plumbing) */
#include <dlfcn.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "device/dev.h"
#include "device/gpu_kernels.h"
#include "runtime/exec.h"
#include "tessera/runtime.h"
#include "test_util.h"

static int numbers = 1, fake = 0;

#define NB 2
#define CI 3
#define HW 12
#define C 8
#define C2 16
#define K 5
#define NX (NB * CI * HW * HW)
#define NBN 5

/* the bound arrays: inputs, then results */
static float X[NX], W1[C * CI * 9], B1[C], W2[C * C * 9], W3[C * C * 9], W4[C * C * 9], W5[C2 * C], WD[K * C2],
    BD[K], R[NB * K], GA[NBN][C2], BE[NBN][C2];
static const int bnc[NBN] = {C, C, C, C, C2};

typedef struct {
  float loss, gx[NX], gw1[C * CI * 9], gb1[C], gw2[C * C * 9], gw3[C * C * 9], gw4[C * C * 9], gw5[C2 * C],
      gwd[K * C2], gbd[K], gg[NBN][C2], gbe[NBN][C2], rs[NBN][2][C2];
  int ncl;
} res;

typedef ts_test_bound bnd;

/* batch norm k's parameters and running statistics: leaves, made before any node (ts_graph_amp
 * copies the graph: leaves made first keep their handles) */
static void bn_leaves(ts_graph *g, ts_val *gb, ts_val *rs) {
  for (int k = 0; k < NBN; k++) {
    char nm[32];
    snprintf(nm, sizeof nm, "g%d", k);
    gb[2 * k] = ts_input(g, nm, TS_F32, ts_shape1(bnc[k]));
    snprintf(nm, sizeof nm, "be%d", k);
    gb[2 * k + 1] = ts_input(g, nm, TS_F32, ts_shape1(bnc[k]));
    for (int j = 0; j < 2; j++) {
      snprintf(nm, sizeof nm, "rs%d%d", k, j);
      rs[2 * k + j] = ts_state_value(g, nm, TS_F32, ts_shape1(bnc[k]), 2 * k + j);
    }
  }
}
static ts_val bn(ts_graph *g, ts_val x, int k, const ts_val *gb, const ts_val *rs) {
  return ts_batchnorm(g, x, gb[2 * k], gb[2 * k + 1], rs[2 * k], rs[2 * k + 1], 0.1f, 1e-5f);
}

/* Builds the network at amp `level` in `low` (bf16, f16), runs it twice on d (NULL: the CPU) with
 * channels last as `cl` says (TESSERA_GPU_CHANNELS_LAST: "0", "1", NULL unset) and reads everything
 * back into o. */
static void run(ts__dev *d, int level, ts_dtype low, const char *cl, res *o) {
  if (cl) setenv("TESSERA_GPU_CHANNELS_LAST", cl, 1);
  else unsetenv("TESSERA_GPU_CHANNELS_LAST");
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_graph_set_training(g, 1);
  ts_val x = ts_input(g, "x", TS_F32, ts_shape4(NB, CI, HW, HW));
  ts_val w1 = ts_input(g, "w1", TS_F32, ts_shape4(C, CI, 3, 3)), b1 = ts_input(g, "b1", TS_F32, ts_shape1(C));
  ts_val w2 = ts_input(g, "w2", TS_F32, ts_shape4(C, C, 3, 3)), w3 = ts_input(g, "w3", TS_F32, ts_shape4(C, C, 3, 3));
  ts_val w4 = ts_input(g, "w4", TS_F32, ts_shape4(C, C, 3, 3)), w5 = ts_input(g, "w5", TS_F32, ts_shape4(C2, C, 1, 1));
  ts_val wd = ts_input(g, "wd", TS_F32, ts_shape2(K, C2)), bd = ts_input(g, "bd", TS_F32, ts_shape1(K));
  ts_val r = ts_input(g, "r", TS_F32, ts_shape2(NB, K));
  ts_val_set_requires_grad(g, r, 0);
  ts_val gb[2 * NBN], rs[2 * NBN];
  bn_leaves(g, gb, rs);
  ts_val a = ts_relu(g, bn(g, ts_conv2d(g, x, w1, b1, 1, 1, 1, 1, 1, 1, 1), 0, gb, rs));
  ts_val m = ts_dropout(g, ts_maxpool2d(g, a, 2, 2, 2, 2, 0, 0), 0.25f, 77);
  ts_val b0 = ts_relu(g, bn(g, ts_conv2d(g, m, w2, TS_NONE, 1, 1, 1, 1, 1, 1, 1), 1, gb, rs));
  ts_val t = ts_relu(g, bn(g, ts_conv2d(g, b0, w3, TS_NONE, 1, 1, 1, 1, 1, 1, 1), 2, gb, rs));
  ts_val bb = ts_relu(g, ts_add(g, bn(g, ts_conv2d(g, t, w4, TS_NONE, 1, 1, 1, 1, 1, 1, 1), 3, gb, rs), b0));
  ts_val q = ts_avgpool2d(g, bb, 3, 3, 1, 1, 1, 1);
  ts_val z = ts_relu(g, bn(g, ts_conv2d(g, q, w5, TS_NONE, 2, 2, 0, 0, 1, 1, 1), 4, gb, rs));
  ts_val out = ts_dense(g, ts_flatten(g, ts_global_avgpool(g, z), 1), wd, bd);
  ts_val loss = ts_sum(g, ts_mul(g, out, r), 3u, 0);
  CHECK_OK(ts_graph_status(g));
  if (level) CHECK_OK(ts_graph_amp(g, level, low, &loss, 1));
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  ts_val keep[2] = {loss, ts_graph_grad(g, x)};
  bnd b[64] = {{x, X, NULL, sizeof X},    {w1, W1, NULL, sizeof W1}, {b1, B1, NULL, sizeof B1},
               {w2, W2, NULL, sizeof W2}, {w3, W3, NULL, sizeof W3}, {w4, W4, NULL, sizeof W4},
               {w5, W5, NULL, sizeof W5}, {wd, WD, NULL, sizeof WD}, {bd, BD, NULL, sizeof BD},
               {r, R, NULL, sizeof R}};
  int nb = 10;
  const ts_val gv[9] = {w1, b1, w2, w3, w4, w5, wd, bd};
  void *const gres[9] = {o->gw1, o->gb1, o->gw2, o->gw3, o->gw4, o->gw5, o->gwd, o->gbd};
  const size_t gbytes[9] = {sizeof o->gw1, sizeof o->gb1, sizeof o->gw2, sizeof o->gw3,
                            sizeof o->gw4, sizeof o->gw5, sizeof o->gwd, sizeof o->gbd};
  for (int k = 0; k < 8; k++) b[nb++] = (bnd){ts_graph_grad(g, gv[k]), NULL, gres[k], gbytes[k]}; /* a parameter store's */
  static float rs0[2][C2];
  for (int c = 0; c < C2; c++) rs0[0][c] = 0.1f, rs0[1][c] = 1.0f;
  for (int k = 0; k < NBN; k++) {
    const size_t nbytes = sizeof(float) * (size_t)bnc[k];
    b[nb++] = (bnd){gb[2 * k], GA[k], NULL, nbytes};
    b[nb++] = (bnd){gb[2 * k + 1], BE[k], NULL, nbytes};
    b[nb++] = (bnd){ts_graph_grad(g, gb[2 * k]), NULL, o->gg[k], nbytes};
    b[nb++] = (bnd){ts_graph_grad(g, gb[2 * k + 1]), NULL, o->gbe[k], nbytes};
    for (int j = 0; j < 2; j++) b[nb++] = (bnd){rs[2 * k + j], rs0[j], o->rs[k][j], nbytes};
  }
  ts_plan *p = NULL;
  void *mem[64] = {0};
  CHECK_OK(ts_plan_create(g, keep, 2, &p));
  if (d) CHECK_OK(ts_plan_set_device(p, d));
  else ts_backend_set(TS_BACKEND_FAST);
  ts_test_bind(p, d, b, nb, mem);
  for (int s = 0; s < 2; s++) {
    int rc = ts_plan_run(p, (uint64_t)s);
    CHECK_MSG(rc == TS_OK, "run %d (%s, O%d, channels last %s): %s", s, d ? "GPU" : "CPU", level, cl ? cl : "auto",
              ts_last_error());
  }
  const bnd kept[2] = {{keep[0], NULL, &o->loss, sizeof o->loss}, {keep[1], NULL, o->gx, sizeof o->gx}};
  ts_test_read_kept(p, d, kept, 2);
  ts_test_unbind(d, b, nb, mem);
  o->ncl = ts_plan_channels_last_values(p);
  ts_plan_free(p);
  ts_graph_free(g);
  unsetenv("TESSERA_GPU_CHANNELS_LAST");
}

/* the arrays of a result, for comparing field by field */
typedef struct {
  const char *name;
  size_t off, n;
} field;
#define F(nm, f) {nm, offsetof(res, f), sizeof(((res *)0)->f) / sizeof(float)}
static const field fields[] = {F("loss", loss), F("dx", gx),   F("dw1", gw1), F("db1", gb1), F("dw2", gw2),
                               F("dw3", gw3),   F("dw4", gw4), F("dw5", gw5), F("dwd", gwd), F("dbd", gbd),
                               F("dgamma", gg), F("dbeta", gbe), F("running stats", rs)};
#undef F

/* a against b: bitwise (tol < 0), or within tol of each array's largest magnitude in b (at least
 * 1e-2: a bias before a batch norm has a gradient of rounding noise only) */
static void compare(const res *a, const res *b, double tol, const char *what) {
  for (size_t f = 0; f < sizeof fields / sizeof *fields; f++) {
    const float *x = (const float *)((const char *)a + fields[f].off), *y = (const float *)((const char *)b + fields[f].off);
    double big = 0, worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < fields[f].n; i++) big = fmax(big, fabs(y[i]));
    for (size_t i = 0; i < fields[f].n; i++) {
      double e = tol < 0 ? (memcmp(&x[i], &y[i], 4) ? 1 : 0) : fabs((double)x[i] - y[i]);
      if (e > worst) worst = e, at = i;
    }
    if (tol < 0)
      CHECK_MSG(worst == 0, "%s: %s differs at %zu (%.9g vs %.9g)", what, fields[f].name, at, x[at], y[at]);
    else
      CHECK_MSG(worst <= tol * fmax(big, 1e-2), "%s: %s off by %.3e at %zu (largest %.3e, bound %.0e of it)",
                what, fields[f].name, worst, at, big, tol);
  }
}

/* the stand-in cuDNN's count of convolutions on NHWC (what 0) or f16 (what 1) tensors (-1: not it) */
static int fake_convs(int what) {
  const char *lib = getenv("TESSERA_LIBCUDNN");
  void *fd = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
  int *n = fd ? dlsym(fd, what ? "fake_cudnn_half" : "fake_cudnn_nhwc") : NULL;
  int v = n ? *n : -1;
  if (fd) dlclose(fd);
  return v;
}

static void check(ts__dev *d, int level, ts_dtype low) {
  static res cl, nchw, cpu;
  const char *lname = level ? ts_dtype_name(low) : "f32";
  const int before = fake_convs(0), half0 = fake_convs(1);
  run(d, level, low, level ? NULL : "1", &cl);
  const int after = fake_convs(0), half1 = fake_convs(1);
  run(d, level, low, "0", &nchw);
  CHECK_MSG(cl.ncl > 0, "O%d %s: no value kept channels last", level, lname);
  CHECK_MSG(nchw.ncl == 0, "O%d %s: TESSERA_GPU_CHANNELS_LAST=0 kept %d values NHWC", level, lname, nchw.ncl);
  if (fake) {
    CHECK_MSG(after - before >= 8, "O%d %s: %d convolutions ran on NHWC tensors in the stand-in cuDNN", level, lname,
              after - before);
    if (low == TS_F16 && level) /* f16 convolutions to cuDNN as they are (run_gpu_lowp.c), not through f32 copies */
      CHECK_MSG(half1 - half0 >= 8, "O%d f16: %d convolutions ran on f16 tensors in the stand-in cuDNN", level,
                half1 - half0);
  }
  printf("O%d %s: %d values NHWC, %d NHWC convolutions in cuDNN\n", level, lname, cl.ncl, after - before);
  if (!numbers) return;
  char what[64];
  snprintf(what, sizeof what, "O%d %s NHWC vs NCHW on the GPU", level, lname);
  compare(&cl, &nchw, fake ? -1.0 : (level ? 5e-2 : 1e-4), what);
  run(NULL, level, low, NULL, &cpu);
  snprintf(what, sizeof what, "O%d %s NHWC GPU vs the CPU", level, lname);
  compare(&cl, &cpu, level ? 5e-2 : 1e-4, what);
}

int main(int argc, char **argv) {
  fake = argc > 1 && !strcmp(argv[1], "fake");
  ts__dev *d = NULL;
  if (ts__dev_open(TS_DEVICE_GPU, 0, &d)) {
    CHECK_MSG(!fake, "the stand-in driver did not open: %s", ts_last_error());
    ts_test_skip("no GPU: %s", ts_last_error());
    return ts_test_finish("test_layout_gpu");
  }
  const char *why = NULL;
  if (strcmp(ts__gpu_conv_impl(&why), "cudnn")) {
    CHECK_MSG(!fake, "the stand-in cuDNN was not loaded: %s", why ? why : "");
    ts_test_skip("no cuDNN (channels last runs on cuDNN's convolutions): %s", why ? why : "");
    ts__dev_close(d);
    return ts_test_finish("test_layout_gpu");
  }
  if (fake) numbers = ts_test_stand_in_emulates();
  ts_test_fill(X, NX, 1, -2, 2);
  ts_test_fill(W1, C * CI * 9, 2, -0.4f, 0.4f);
  ts_test_fill(B1, C, 3, -0.2f, 0.2f);
  ts_test_fill(W2, C * C * 9, 4, -0.3f, 0.3f);
  ts_test_fill(W3, C * C * 9, 5, -0.3f, 0.3f);
  ts_test_fill(W4, C * C * 9, 6, -0.3f, 0.3f);
  ts_test_fill(W5, C2 * C, 7, -0.5f, 0.5f);
  ts_test_fill(WD, K * C2, 8, -0.5f, 0.5f);
  ts_test_fill(BD, K, 9, -0.2f, 0.2f);
  ts_test_fill(R, NB * K, 10, -1, 1);
  for (int k = 0; k < NBN; k++)
    ts_test_fill(GA[k], C2, 11 + (uint64_t)k, 0.5f, 1.5f), ts_test_fill(BE[k], C2, 21 + (uint64_t)k, -0.5f, 0.5f);
  check(d, 0, TS_F32);
  check(d, 2, TS_BF16);
  check(d, 2, TS_F16);
  ts__dev_close(d);
  return ts_test_finish("test_layout_gpu");
}
