/* Convolutions through cuDNN, loaded at run time like the driver and cuBLAS (no CUDA install at
 * build time): TESSERA_LIBCUDNN, else libcudnn.so.9 then .8 on the loader's path (a PyTorch
 * environment's nvidia/cudnn/lib: scripts/gpu-check.sh puts it on LD_LIBRARY_PATH); an entry
 * point the main library does not export is looked for in cuDNN 9's sub-libraries
 * (libcudnn_cnn, _ops, _graph). cuDNN's legacy convolution API, declared here with only what is
 * used (cudnn.h's C ABI, unchanged from 8 to 9): NCHW tensors and OIHW filters, or (channels
 * last: a GPU plan's NHWC activations, runtime/run_gpu.c) NHWC tensors and OHWI filters,
 * cross-correlation (PyTorch's and the CPU kernels' convolution), groups, dilation.
 *
 * Policies, as the rest of the GPU backend:
 *   - f32 is real f32: the descriptor's math type is CUDNN_FMA_MATH and an algorithm reported
 *     with tensor-op math is skipped (no TF32; PyTorch's cudnn.allow_tf32 defaults to on, ours
 *     is off unless float32_matmul_precision: high, ts__gpu_set_tf32, asks for it); bf16 and f16
 *     storage run with f32 compute and tensor cores (the algorithm's own math type).
 *   - Deterministic: of the algorithms cuDNN's heuristics list for a shape (an order that depends
 *     on the GPU and the shape only, not on timing), the first that reports
 *     CUDNN_DETERMINISTIC, succeeds and fits TS__CUDNN_WS_MAX of workspace; never a benchmark
 *     search (cudnnFind*), whose choice varies run to run. A shape and direction with none runs
 *     on Tessera's direct kernel (said once as a warning). TESSERA_GPU_DETERMINISTIC=0 lifts the
 *     determinism condition (PyTorch's default, cudnn.deterministic False: the heuristics' first
 *     algorithm that succeeds, which may sum with atomics; said once as a warning): for measuring
 *     what determinism costs, or for speed where bitwise repeatable runs do not matter.
 *   - The bias is not cuDNN's: its forward writes b into y first and the convolution adds
 *     (beta 1: one rounding of a bf16 output, as cublas.c does); its gradient is
 *     ts__gpu_conv_bias_grad (a fixed-order sum per channel).
 * Descriptors and each direction's chosen algorithm and workspace are built once per shape and
 * dtype and kept for the process (a small table; shapes beyond it get descriptors per call). */
#include <dlfcn.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/cudnn_abi.h"
#include "device/gpu_kernels.h"

/* the most workspace one convolution may take (an algorithm asking more is passed over) */
#define TS__CUDNN_WS_MAX ((size_t)1 << 30)

static ts__dnn_api dn;
static int dn_rc = 1;
static char dn_msg[400];
static pthread_once_t dn_once = PTHREAD_ONCE_INIT;

static void dn_load(void) {
  const char *env = getenv("TESSERA_LIBCUDNN");
  const char *names[] = {env && *env ? env : NULL, "libcudnn.so.9", "libcudnn.so.8"};
  void *h[4] = {NULL, NULL, NULL, NULL};
  for (int i = 0; i < 3 && !h[0]; i++)
    if (names[i]) h[0] = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!h[0]) {
    snprintf(dn_msg, sizeof dn_msg, "cuDNN not found (libcudnn.so.9/.8 or TESSERA_LIBCUDNN)");
    dn_rc = TS_EUNSUPPORTED;
    return;
  }
  static const struct {
    const char *name;
    size_t off;
  } want[] = {
#define F(field, sym) {#sym, offsetof(ts__dnn_api, field)},
      TS__DNN_SYMBOLS(F)
#undef F
  };
  const char *subs[] = {"libcudnn_cnn.so.9", "libcudnn_ops.so.9", "libcudnn_graph.so.9"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    void *sym = dlsym(h[0], want[i].name);
    for (int k = 1; !sym && k < 4; k++) { /* cuDNN 9's sub-libraries, opened when first needed */
      if (!h[k]) h[k] = dlopen(subs[k - 1], RTLD_NOW | RTLD_LOCAL);
      if (h[k]) sym = dlsym(h[k], want[i].name);
    }
    if (!sym) {
      snprintf(dn_msg, sizeof dn_msg, "cuDNN lacks %s", want[i].name);
      dn_rc = TS_EUNSUPPORTED;
      return;
    }
    memcpy((char *)&dn + want[i].off, &sym, sizeof sym);
  }
  size_t v = dn.GetVersion();
  if (v < 8000) {
    snprintf(dn_msg, sizeof dn_msg, "cuDNN %zu is older than 8.0", v);
    dn_rc = TS_EUNSUPPORTED;
    return;
  }
  dn_rc = TS_OK;
}

int ts__cudnn_available(void) {
  pthread_once(&dn_once, dn_load);
  return dn_rc == TS_OK;
}

const char *ts__cudnn_why(void) {
  pthread_once(&dn_once, dn_load);
  return dn_rc == TS_OK ? "" : dn_msg;
}

/* ---- one shape's descriptors and choices ---- */
typedef struct {
  ts__conv_desc c;
  ts_dtype dt;
  int cl; /* channels last: NHWC tensors, OHWI filters */
  ts__dnn_tensor x, y;
  ts__dnn_filter w;
  ts__dnn_conv conv;
  int algo[3], math[3], chosen[3]; /* per direction: forward, backward data, backward filter */
  size_t ws[3];
} shape_t;

static ts__dnn_handle handle;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
#define TS__CUDNN_SHAPES 256
static shape_t shapes[TS__CUDNN_SHAPES];
static int nshapes;

static int fail(ts__dnn_status st, const char *what, const ts__conv_desc *c, ts_dtype dt, int cl) {
  return ts_error_set(TS_EBACKEND,
                      "cuDNN %s (x %lldx%lldx%lldx%lld, w %lldx%lldx%lldx%lld, stride %lldx%lld, padding %lldx%lld, "
                      "dilation %lldx%lld, groups %lld, %s%s): %s (status %d)",
                      what, (long long)c->N, (long long)c->C, (long long)c->H, (long long)c->W, (long long)c->O,
                      (long long)(c->C / c->groups), (long long)c->KH, (long long)c->KW, (long long)c->sh,
                      (long long)c->sw, (long long)c->ph, (long long)c->pw, (long long)c->dh, (long long)c->dw,
                      (long long)c->groups, ts_dtype_name(dt), cl ? ", NHWC" : "",
                      dn.GetErrorString ? dn.GetErrorString(st) : "?", st);
}

static void shape_free(shape_t *s) {
  if (s->x) dn.DestroyTensorDescriptor(s->x);
  if (s->y) dn.DestroyTensorDescriptor(s->y);
  if (s->w) dn.DestroyFilterDescriptor(s->w);
  if (s->conv) dn.DestroyConvolutionDescriptor(s->conv);
  memset(s, 0, sizeof *s);
}

static int shape_init(shape_t *s, const ts__conv_desc *c, ts_dtype dt, int cl) {
  memset(s, 0, sizeof *s);
  s->c = *c;
  s->dt = dt;
  s->cl = cl;
  const int f = cl ? TS__DNN_NHWC : TS__DNN_NCHW;
  int t = dt == TS_BF16 ? TS__DNN_DATA_BFLOAT16 : dt == TS_F16 ? TS__DNN_DATA_HALF : TS__DNN_DATA_FLOAT;
  const int64_t big = 2147483647;
  if (c->N * c->C * c->H * c->W > big || c->N * c->O * c->OH * c->OW > big)
    return ts_error_set(TS_ERANGE, "cuDNN convolution: a tensor beyond 2^31 elements");
  ts__dnn_status st = dn.CreateTensorDescriptor(&s->x);
  if (!st) st = dn.CreateTensorDescriptor(&s->y);
  if (!st) st = dn.CreateFilterDescriptor(&s->w);
  if (!st) st = dn.CreateConvolutionDescriptor(&s->conv);
  if (!st) st = dn.SetTensor4dDescriptor(s->x, f, t, (int)c->N, (int)c->C, (int)c->H, (int)c->W);
  if (!st) st = dn.SetTensor4dDescriptor(s->y, f, t, (int)c->N, (int)c->O, (int)c->OH, (int)c->OW);
  if (!st) st = dn.SetFilter4dDescriptor(s->w, t, f, (int)c->O, (int)(c->C / c->groups), (int)c->KH, (int)c->KW);
  if (!st)
    st = dn.SetConvolution2dDescriptor(s->conv, (int)c->ph, (int)c->pw, (int)c->sh, (int)c->sw, (int)c->dh, (int)c->dw,
                                       TS__DNN_CROSS_CORRELATION, TS__DNN_DATA_FLOAT);
  if (!st) st = dn.SetConvolutionGroupCount(s->conv, (int)c->groups);
  if (!st)
    st = dn.SetConvolutionMathType(s->conv, dt != TS_F32 || ts__gpu_tf32() ? TS__DNN_TENSOR_OP_MATH : TS__DNN_FMA_MATH);
  if (st) {
    int rc = fail(st, "descriptors", c, dt, cl);
    shape_free(s);
    return rc;
  }
  return TS_OK;
}

static const char *dir_name[3] = {"forward", "backward data", "backward filter"};

/* 0 when TESSERA_GPU_DETERMINISTIC=0 allows non-deterministic algorithms (said once) */
static int deterministic_only(void) {
  static int warned;
  const char *e = getenv("TESSERA_GPU_DETERMINISTIC");
  if (!(e && !strcmp(e, "0"))) return 1;
  if (!warned) {
    warned = 1;
    ts_log(TS_LOG_WARN, "TESSERA_GPU_DETERMINISTIC=0: cuDNN may run non-deterministic convolution algorithms "
                        "(runs are then not bitwise repeatable)");
  }
  return 0;
}

/* The direction's algorithm: the heuristics' first deterministic (unless deterministic_only says
 * otherwise), successful one within the workspace bound (and, in f32, not on tensor cores), with
 * its workspace. */
static int choose(shape_t *s, int dir) {
  if (s->chosen[dir] > 0) return TS_OK;
  if (s->chosen[dir] < 0) return TS_ENOTFOUND; /* none, said once (below) */
  ts__dnn_perf perf[16];
  int got = 0;
  ts__dnn_status st = dir == 0   ? dn.GetFwdAlgo(handle, s->x, s->w, s->conv, s->y, 16, &got, perf)
                     : dir == 1 ? dn.GetBwdDataAlgo(handle, s->w, s->y, s->conv, s->x, 16, &got, perf)
                                : dn.GetBwdFilterAlgo(handle, s->x, s->y, s->conv, s->w, 16, &got, perf);
  if (st) return fail(st, dir_name[dir], &s->c, s->dt, s->cl);
  const int det = deterministic_only();
  for (int i = 0; i < got && i < 16; i++) {
    const ts__dnn_perf *p = &perf[i];
    if (p->status || (det && p->determinism != TS__DNN_DETERMINISTIC) || p->memory > TS__CUDNN_WS_MAX) continue;
    if (s->dt == TS_F32 && !ts__gpu_tf32() &&
        (p->mathType == TS__DNN_TENSOR_OP_MATH || p->mathType == TS__DNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
      continue; /* real f32 unless TF32 was asked for */
    size_t ws = 0;
    st = dir == 0   ? dn.GetFwdWs(handle, s->x, s->w, s->conv, s->y, p->algo, &ws)
         : dir == 1 ? dn.GetBwdDataWs(handle, s->w, s->y, s->conv, s->x, p->algo, &ws)
                    : dn.GetBwdFilterWs(handle, s->x, s->y, s->conv, s->w, p->algo, &ws);
    if (st || ws > TS__CUDNN_WS_MAX) continue;
    s->algo[dir] = p->algo;
    s->math[dir] = s->dt == TS_F32 && !ts__gpu_tf32() ? TS__DNN_FMA_MATH : p->mathType; /* f32: TF32 only if asked */
    s->ws[dir] = ws;
    s->chosen[dir] = 1;
    return TS_OK;
  }
  s->chosen[dir] = -1;
  const ts__conv_desc *c = &s->c;
  ts_log(TS_LOG_WARN,
         "cuDNN %s (x %lldx%lldx%lldx%lld, w %lldx%lldx%lldx%lld, groups %lld, %s%s): none of its %d algorithms is "
         "%s%s within %zu MiB of workspace: %s",
         dir_name[dir], (long long)c->N, (long long)c->C, (long long)c->H, (long long)c->W, (long long)c->O,
         (long long)(c->C / c->groups), (long long)c->KH, (long long)c->KW, (long long)c->groups, ts_dtype_name(s->dt),
         s->cl ? ", NHWC" : "", got, det ? "deterministic" : "usable", s->dt == TS_F32 ? " and real f32" : "",
         TS__CUDNN_WS_MAX >> 20,
         s->cl ? "it runs in NCHW (its tensors transposed around it)" : "Tessera's direct kernel runs it");
  return TS_ENOTFOUND;
}

/* The shape's entry (locked by the caller): found, made, or (table full) made into *tmp */
static int entry(const ts__conv_desc *c, ts_dtype dt, int cl, shape_t *tmp, shape_t **out) {
  for (int i = 0; i < nshapes; i++)
    if (shapes[i].dt == dt && shapes[i].cl == cl && !memcmp(&shapes[i].c, c, sizeof *c)) return *out = &shapes[i], TS_OK;
  shape_t *s = nshapes < TS__CUDNN_SHAPES ? &shapes[nshapes] : tmp;
  int rc = shape_init(s, c, dt, cl);
  if (rc) return rc;
  if (s != tmp) nshapes++;
  *out = s;
  return TS_OK;
}

static int ready(void) {
  if (!ts__cudnn_available()) return ts_error_set(TS_EUNSUPPORTED, "%s", dn_msg);
  ts__dnn_status st = 0;
  if (!handle && (st = dn.Create(&handle))) {
    handle = NULL;
    return ts_error_set(TS_EBACKEND, "cuDNN: cudnnCreate failed (%s, status %d): a cuDNN that does not match the "
                        "driver? (TESSERA_GPU_CONV=tessera runs Tessera's own kernels)", dn.GetErrorString(st), st);
  }
  return TS_OK;
}

/* The shape's entry with the direction's algorithm chosen, locked: *s is the table's entry or tmp
 * (free it with done()); the lock is held on return whatever rc is. */
static int prepared(const ts__conv_desc *c, ts_dtype dt, int cl, int dir, shape_t *tmp, shape_t **s) {
  *s = NULL;
  memset(tmp, 0, sizeof *tmp);
  pthread_mutex_lock(&lock);
  if (dir < 0 || dir > 2) return ts_error_set(TS_EINVAL, "cuDNN convolution: direction %d", dir);
  int rc = ready();
  if (!rc) rc = entry(c, dt, cl != 0, tmp, s);
  if (!rc) rc = choose(*s, dir);
  return rc;
}
static int done(shape_t *tmp, shape_t *s, int rc) {
  if (s == tmp) shape_free(tmp);
  pthread_mutex_unlock(&lock);
  return rc;
}

int ts__cudnn_conv_has_algo(const ts__conv_desc *c, ts_dtype dt, int cl, int dir) {
  shape_t tmp, *s;
  int rc = prepared(c, dt, cl, dir, &tmp, &s);
  done(&tmp, s, rc);
  return rc != TS_ENOTFOUND;
}

int ts__cudnn_conv_workspace(const ts__conv_desc *c, ts_dtype dt, int cl, int dir, size_t *bytes) {
  shape_t tmp, *s;
  int rc = prepared(c, dt, cl, dir, &tmp, &s);
  *bytes = rc ? 0 : s->ws[dir];
  return done(&tmp, s, rc);
}

int ts__cudnn_conv(ts__dev *d, const ts__conv_desc *c, ts_dtype dt, int cl, int dir, const void *a, const void *b,
                   void *out, float beta, void *ws, size_t ws_bytes, ts__dev_stream *strm) {
  void *stream = ts__cuda_stream(d, strm);
  shape_t tmp, *s;
  int rc = prepared(c, dt, cl, dir, &tmp, &s);
  if (!rc && ws_bytes < s->ws[dir])
    rc = ts_error_set(TS_EINVAL, "cuDNN %s: %zu bytes of workspace given, %zu needed", dir_name[dir], ws_bytes,
                      s->ws[dir]);
  ts__dnn_status st = 0;
  if (!rc) st = dn.SetStream(handle, stream);
  if (!rc && !st) st = dn.SetConvolutionMathType(s->conv, s->math[dir]);
  const float one = 1.0f;
  if (!rc && !st) {
    if (dir == 0) /* x (a), w (b) -> y */
      st = dn.Fwd(handle, &one, s->x, a, s->w, b, s->conv, s->algo[0], ws, s->ws[0], &beta, s->y, out);
    else if (dir == 1) /* dy (a), w (b) -> dx */
      st = dn.BwdData(handle, &one, s->w, b, s->y, a, s->conv, s->algo[1], ws, s->ws[1], &beta, s->x, out);
    else /* x (a), dy (b) -> dw */
      st = dn.BwdFilter(handle, &one, s->x, a, s->y, b, s->conv, s->algo[2], ws, s->ws[2], &beta, s->w, out);
  }
  if (!rc && st) rc = fail(st, dir_name[dir], c, dt, cl);
  return done(&tmp, s, rc);
}
