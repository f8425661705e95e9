/* ONE_HOT (ts_one_hot, MindSpore's OneHot) through the graph and executor on both backends: the
 * values against a plain loop for i32 and i64 ids, every axis of 1-, 2- and 0-dim ids, other
 * on/off values and output dtypes (bf16, i32), ids outside [0, depth) giving rows of off_value;
 * ids get no gradient and a float value multiplied by the one-hot matrix gets the right one
 * (the gradient harness: central finite differences of a double-precision forward, and a sparse
 * cross-entropy written from one_hot, log_softmax, mul and reduce against SOFTMAX_CE's loss and
 * gradient); shape inference and its errors.
 *   test_one_hot        the above
 *   test_one_hot fake   the GPU kernel (run_gpu.c) through the stand-in driver (TESSERA_LIBCUDA),
 *                       whose emulator runs the kernels compiled for the host, against the CPU:
 *                       bitwise, i32/i64 ids, axes 0..2, f32/bf16/i32 outputs (a real GPU: `gpu`) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <dlfcn.h>

#include "device/dev.h"
#include "runtime/exec.h"
#include "tessera/tessera.h"
#include "grad_harness.h"

/* y (dims of ids with depth inserted at axis) from a plain loop, as doubles */
static void ref_one_hot(const int64_t *ids, const ts_shape *is, int64_t depth, int axis, double on, double off,
                        double *y) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < is->ndim; d++) *(d < axis ? &outer : &inner) *= is->dims[d];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t k = 0; k < depth; k++)
      for (int64_t i = 0; i < inner; i++) y[(o * depth + k) * inner + i] = ids[o * inner + i] == k ? on : off;
}

static void case_values(ts_dtype idt, ts_shape is, const int64_t *ids, int64_t depth, int axis, float on, float off,
                        ts_dtype dt) {
  for (int be = 0; be < 2; be++) {
    ts_backend_set(be ? TS_BACKEND_REF : TS_BACKEND_FAST);
    ts_graph *g;
    CHECK_OK(ts_graph_create(&g));
    ts_val x = ts_input(g, "ids", idt, is);
    ts_val y = ts_one_hot(g, x, depth, axis, on, off, dt);
    CHECK_OK(ts_graph_status(g));
    ts_shape ys = ts_val_shape(g, y);
    int ax = axis < 0 ? axis + is.ndim + 1 : axis;
    CHECK(ys.ndim == is.ndim + 1 && ys.dims[ax] == depth && ts_val_dtype(g, y) == dt);
    int64_t n = ts_shape_numel(&is), ny = ts_shape_numel(&ys);
    int32_t *i32 = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) i32[i] = (int32_t)ids[i];
    ts_plan *p = NULL;
    CHECK_OK(ts_plan_create(g, &y, 1, &p));
    if (p) {
      CHECK_OK(ts_plan_bind(p, x, idt == TS_I32 ? (void *)i32 : (void *)ids));
      CHECK_OK(ts_plan_run(p, 0));
      double *want = malloc(sizeof(double) * (size_t)ny);
      float *got = malloc(sizeof(float) * (size_t)ny);
      ref_one_hot(ids, &is, depth, ax, on, off, want);
      CHECK_OK(ts_convert(ts_plan_data(p, y), dt, got, TS_F32, (size_t)ny));
      int bad = 0;
      for (int64_t i = 0; i < ny; i++) bad += fabs(got[i] - want[i]) > 1e-2 * fabs(want[i]);
      char s[64];
      CHECK_MSG(!bad, "one_hot ids %s %s depth %lld axis %d -> %s (%s): %d wrong", ts_shape_str(&is, s, sizeof s),
                ts_dtype_name(idt), (long long)depth, axis, ts_dtype_name(dt), be ? "ref" : "fast", bad);
      free(want);
      free(got);
      ts_plan_free(p);
    }
    free(i32);
    ts_graph_free(g);
  }
  ts_backend_set(TS_BACKEND_FAST);
}

/* y = one_hot(ids, C) * x: x's gradient is the one-hot matrix, ids have none */
typedef struct {
  int64_t N, C;
} oh_ctx;

static void fwd_masked(double *const *x, double *y, const void *vc) {
  const oh_ctx *c = vc;
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t k = 0; k < c->C; k++) y[n * c->C + k] = ((int64_t)x[1][n] == k ? 2.0 : -0.5) * x[0][n * c->C + k];
}

static void case_grad_masked(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x[2];
  x[0] = ts_param_value(g, "x", TS_F32, ts_shape2(5, 4), 0);
  x[1] = ts_input(g, "ids", TS_I32, ts_shape1(5));
  ts_val y = ts_mul(g, ts_one_hot(g, x[1], 4, -1, 2.0f, -0.5f, TS_F32), x[0]);
  int64_t ids[5] = {3, 0, 7, 1, 3}; /* 7: outside [0, 4): a row of off */
  const void *fixed[2] = {NULL, ids};
  oh_ctx c = {5, 4};
  gh_check("one_hot(ids, 4, on 2, off -0.5) * x", g, y, 2, x,
           &(gh_opts){.fwd = fwd_masked, .ctx = &c, .data = fixed, .tol = 1e-5});
  ts_graph_free(g);
}

/* MindSpore's SoftmaxCrossEntropyExpand written from ops: mean over rows of
 * -sum(one_hot(labels) * log(softmax(logits))) against the SOFTMAX_CE op, loss and gradient */
static void case_ce_from_ops(void) {
  const int64_t N = 6, C = 5;
  int32_t lab[6] = {4, 0, 2, 2, 1, 3};
  float logits[30];
  for (int i = 0; i < 30; i++) logits[i] = (float)sin(1.7 * i) * 3.0f;
  float loss[2], grad[2][30];
  for (int way = 0; way < 2; way++) {
    ts_graph *g;
    CHECK_OK(ts_graph_create(&g));
    ts_val z = ts_param_value(g, "z", TS_F32, ts_shape2(N, C), 0);
    ts_val l = ts_input(g, "labels", TS_I32, ts_shape1(N));
    ts_val L;
    if (way == 0) {
      L = ts_softmax_cross_entropy(g, z, l, 0.0f);
    } else {
      ts_val m = ts_max(g, z, 2u, 1);
      ts_val e = ts_eltwise(g, ts_sub(g, z, m), TS_ELT_EXP);
      ts_val sm = ts_div(g, e, ts_sum(g, e, 2u, 1));
      ts_val oh = ts_one_hot(g, l, C, -1, 1.0f, 0.0f, TS_F32);
      ts_val per = ts_sum(g, ts_mul(g, ts_eltwise(g, sm, TS_ELT_LOG), oh), 2u, 0);
      ts_val neg = ts_mul(g, ts_const(g, TS_F32, ts_shape_make(0, NULL), -1.0f), per);
      L = ts_mean(g, neg, 1u, 0);
    }
    CHECK_OK(ts_graph_backward(g, L, 1.0f));
    ts_val dz = ts_graph_grad(g, z);
    CHECK(ts_graph_grad(g, l) == TS_NONE);
    ts_val keep[2] = {L, dz};
    ts_plan *p = NULL;
    CHECK_OK(ts_plan_create(g, keep, 2, &p));
    if (p) {
      CHECK_OK(ts_plan_bind(p, z, logits));
      CHECK_OK(ts_plan_bind(p, l, lab));
      CHECK_OK(ts_plan_run(p, 0));
      loss[way] = *(float *)ts_plan_data(p, L);
      memcpy(grad[way], ts_plan_data(p, dz), sizeof grad[way]);
      ts_plan_free(p);
    }
    ts_graph_free(g);
  }
  CHECK_MSG(fabsf(loss[0] - loss[1]) < 1e-5f, "ce from ops: loss %g vs softmax_ce %g", loss[1], loss[0]);
  float worst = 0;
  for (int i = 0; i < 30; i++) worst = fmaxf(worst, fabsf(grad[0][i] - grad[1][i]));
  CHECK_MSG(worst < 1e-6f, "ce from ops: gradient differs from softmax_ce's by %g", worst);
  printf("cross-entropy from one_hot/log/softmax ops: loss %.6f (softmax_ce %.6f), gradients within %.1e\n", loss[1],
         loss[0], worst);
}

static void bad_inputs(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val f = ts_input(g, "ids", TS_F32, ts_shape1(3));
  CHECK_GRAPH_ERROR(g, ts_one_hot(g, f, 4, -1, 1, 0, TS_F32), TS_EDTYPE, "one_hot", "i32 or i64", NULL);
  ts_graph_free(g);
  CHECK_OK(ts_graph_create(&g));
  ts_val i = ts_input(g, "ids", TS_I32, ts_shape1(3));
  CHECK_GRAPH_ERROR(g, ts_one_hot(g, i, 0, -1, 1, 0, TS_F32), TS_EINVAL, "one_hot", "depth 0", NULL);
  ts_graph_free(g);
  CHECK_OK(ts_graph_create(&g));
  i = ts_input(g, "ids", TS_I32, ts_shape1(3));
  CHECK_GRAPH_ERROR(g, ts_one_hot(g, i, 4, 2, 1, 0, TS_F32), TS_EINVAL, "one_hot", "axis 2", NULL);
  ts_graph_free(g);
  CHECK_OK(ts_graph_create(&g));
  i = ts_input(g, "ids", TS_I32, ts_shape1(3));
  CHECK_GRAPH_ERROR(g, ts_one_hot(g, i, 4, -3, 1, 0, TS_F32), TS_EINVAL, "one_hot", "out of range", NULL);
  ts_graph_free(g);
  CHECK_OK(ts_graph_create(&g));
  int64_t d7[7] = {1, 1, 1, 1, 1, 1, 2};
  i = ts_input(g, "ids", TS_I32, ts_shape_make(7, d7));
  CHECK(ts_one_hot(g, i, 4, -1, 1, 0, TS_F32) != TS_NONE); /* 8 dims: the most a value has */
  int64_t d8[8] = {1, 1, 1, 1, 1, 1, 1, 2};
  i = ts_input(g, "ids8", TS_I32, ts_shape_make(8, d8));
  CHECK_GRAPH_ERROR(g, ts_one_hot(g, i, 4, -1, 1, 0, TS_F32), TS_ESHAPE, "one_hot", "more than 7 dims", NULL);
  ts_graph_free(g);
  printf("bad input: float ids, depth 0, axis past the end either way, 8-dim ids\n");
}

/* the same one-hot on the GPU and on the CPU: bitwise */
static void gpu_case(ts__dev *d, ts_dtype idt, ts_shape is, int64_t depth, int axis, float on, float off, ts_dtype dt) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "ids", idt, is);
  ts_val y = ts_one_hot(g, x, depth, axis, on, off, dt);
  int64_t n = ts_shape_numel(&is);
  ts_shape ys = ts_val_shape(g, y);
  size_t ybytes = (size_t)ts_shape_numel(&ys) * ts_dtype_size(dt), ibytes = (size_t)n * ts_dtype_size(idt);
  char *ids = malloc(ibytes), *hy = malloc(ybytes), *gy = malloc(ybytes);
  for (int64_t i = 0; i < n; i++) {
    int64_t v = (i * 5) % (depth + 2) - 1; /* -1 and depth: out of range */
    if (idt == TS_I32) ((int32_t *)ids)[i] = (int32_t)v;
    else ((int64_t *)ids)[i] = v;
  }
  ts_plan *cpu = NULL, *gp = NULL;
  CHECK_OK(ts_plan_create(g, &y, 1, &cpu));
  CHECK_OK(ts_plan_bind(cpu, x, ids));
  CHECK_OK(ts_plan_run(cpu, 0));
  memcpy(hy, ts_plan_data(cpu, y), ybytes);
  CHECK_OK(ts_plan_create(g, &y, 1, &gp));
  CHECK_OK(ts_plan_set_device(gp, d));
  void *dids = NULL;
  CHECK_OK(ts__dev_alloc(d, ibytes, &dids));
  CHECK_OK(ts__dev_copy(d, dids, ids, ibytes, TS__H2D, NULL));
  CHECK_OK(ts_plan_bind(gp, x, dids));
  int rc = ts_plan_run(gp, 0);
  CHECK_MSG(rc == TS_OK, "GPU one_hot: %s", ts_last_error());
  CHECK_OK(ts__dev_copy(d, gy, ts_plan_data(gp, y), ybytes, TS__D2H, NULL));
  CHECK_OK(ts__dev_sync(d));
  char s[64];
  CHECK_MSG(!memcmp(hy, gy, ybytes), "GPU one_hot ids %s %s depth %lld axis %d -> %s differs from the CPU's",
            ts_shape_str(&is, s, sizeof s), ts_dtype_name(idt), (long long)depth, axis, ts_dtype_name(dt));
  ts__dev_free(d, dids);
  ts_plan_free(gp);
  ts_plan_free(cpu);
  free(ids), free(hy), free(gy);
  ts_graph_free(g);
}

static int gpu_main(int fake) {
  ts__dev *d = NULL;
  if (ts__dev_open(TS_DEVICE_GPU, 0, &d)) {
    CHECK_MSG(!fake, "the stand-in driver did not open: %s", ts_last_error());
    ts_test_skip("no GPU: %s", ts_last_error());
    return ts_test_finish("test_one_hot (GPU)");
  }
  int numbers = !fake;
  if (fake) {
    void *fk = dlopen(getenv("TESSERA_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
    int *emu = fk ? dlsym(fk, "fake_cuda_emulates") : NULL;
    const char *off = getenv("FAKE_CUDA_EMULATE");
    numbers = emu && *emu && !(off && !strcmp(off, "0"));
    if (fk) dlclose(fk);
  }
  if (!numbers) { /* the stand-in only records launches (ASan): nothing to compare */
    ts__dev_close(d);
    ts_test_skip("the stand-in driver does not emulate the kernels here");
    return ts_test_finish("test_one_hot (GPU)");
  }
  gpu_case(d, TS_I32, ts_shape1(40), 7, -1, 1.0f, 0.0f, TS_F32);
  gpu_case(d, TS_I64, ts_shape2(6, 5), 4, 0, 0.9f, 0.025f, TS_F32);
  gpu_case(d, TS_I32, ts_shape2(6, 5), 9, 1, 1.0f, -1.0f, TS_BF16);
  gpu_case(d, TS_I64, ts_shape2(3, 4), 3, 2, 7.0f, 1.0f, TS_I32);
  gpu_case(d, TS_I32, ts_shape2(64, 64), 13, 1, 1.0f, 0.0f, TS_F16);
  printf("one_hot on the GPU%s: bitwise the CPU's (i32/i64 ids, axes 0..2, f32/bf16/i32/f16)\n",
         fake ? " (the stand-in driver's emulator)" : "");
  ts__dev_close(d);
  return ts_test_finish("test_one_hot (GPU)");
}

int main(int argc, char **argv) {
  if (argc > 1 && (!strcmp(argv[1], "fake") || !strcmp(argv[1], "gpu"))) return gpu_main(!strcmp(argv[1], "fake"));
  int64_t ids6[6] = {3, 0, 3, 9, -1, 2};
  case_values(TS_I32, ts_shape1(6), ids6, 4, -1, 1.0f, 0.0f, TS_F32);
  case_values(TS_I64, ts_shape1(6), ids6, 4, 0, 1.0f, 0.0f, TS_F32);
  case_values(TS_I32, ts_shape2(2, 3), ids6, 5, 0, 0.9f, 0.025f, TS_F32);
  case_values(TS_I64, ts_shape2(2, 3), ids6, 5, 1, 1.0f, -1.0f, TS_F32);
  case_values(TS_I32, ts_shape2(2, 3), ids6, 5, -1, 1.0f, 0.0f, TS_F32);
  case_values(TS_I32, ts_shape2(3, 2), ids6, 4, 2, 0.5f, 0.0f, TS_BF16);
  case_values(TS_I64, ts_shape2(3, 2), ids6, 4, 1, 7.0f, 1.0f, TS_I32);
  case_values(TS_I32, ts_shape_make(0, NULL), ids6, 6, 0, 1.0f, 0.0f, TS_F32);
  int64_t big[4096];
  for (int i = 0; i < 4096; i++) big[i] = (i * 37) % 13;
  case_values(TS_I32, ts_shape2(64, 64), big, 13, 1, 1.0f, 0.0f, TS_F32); /* 53k elements: the parallel loop */
  printf("one_hot values: i32/i64 ids of 0-2 dims, every axis, f32/bf16/i32 output, ids out of range, ref+fast\n");
  case_grad_masked();
  case_ce_from_ops();
  printf("one_hot: %d gradient graphs vs finite differences\n", gh_cases());
  bad_inputs();
  return ts_test_finish("test_one_hot");
}
