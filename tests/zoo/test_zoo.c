/* Model zoo: output shapes, parameter counts (against PyTorch's), state_dict names, config
 * errors, and one forward + backward per model on tiny sizes (finite loss near ln(classes) at
 * initialisation, finite and non-zero gradients). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/tessera.h"
#include "tessera/zoo.h"
#include "test_util.h"

typedef struct {
  ts_graph *g;
  ts_params *ps;
  ts_nn nn;
} model;

static void model_init(model *m) {
  CHECK_OK(ts_graph_create(&m->g));
  CHECK_OK(ts_params_create(&m->ps));
  m->nn.g = m->g;
  m->nn.p = m->ps;
}

static void model_free(model *m) {
  ts_params_free(m->ps);
  ts_graph_free(m->g);
}

static int has_param(const model *m, const char *name) { return ts_params_find(m->ps, name) >= 0; }

static void check_shape(const model *m, ts_val v, ts_shape want, const char *what) {
  ts_shape s = ts_val_shape(m->g, v);
  char a[96], b[96];
  CHECK_MSG(ts_shape_equal(&s, &want), "%s: shape %s, want %s", what, ts_shape_str(&s, a, sizeof a),
            ts_shape_str(&want, b, sizeof b));
}

static void check_param_shape(const model *m, const char *name, ts_shape want) {
  int id = ts_params_find(m->ps, name);
  CHECK_MSG(id >= 0, "parameter '%s' missing", name);
  if (id < 0) return;
  ts_shape s = ts_params_shape(m->ps, id);
  char a[96], b[96];
  CHECK_MSG(ts_shape_equal(&s, &want), "%s: shape %s, want %s", name, ts_shape_str(&s, a, sizeof a),
            ts_shape_str(&want, b, sizeof b));
}

static void check_count(const model *m, int64_t want, const char *what) {
  int64_t n = (int64_t)ts_params_numel(m->ps);
  CHECK_MSG(n == want, "%s: %lld trainable parameters, want %lld", what, (long long)n, (long long)want);
}

/* Backward, allocate, plan, bind `nin` inputs and run once. Returns the loss (NaN on failure);
 * checks every gradient is finite and that some are non-zero. */
static float run_once(model *m, ts_val loss, const ts_val *ins, void *const *data, int nin,
                      const char *what) {
  float out = NAN;
  ts_plan *plan = NULL;
  int cap = ts_params_count(m->ps) + 1, nk = 0;
  ts_val *keep = malloc(sizeof(ts_val) * (size_t)cap);
  keep[0] = loss;
  int rc = ts_graph_backward(m->g, loss, 1.0f);
  if (!rc) rc = ts_params_attach_grads(m->ps, m->g, keep + 1, cap - 1, &nk);
  if (!rc) rc = ts_params_alloc(m->ps, 42);
  if (!rc) rc = ts_plan_create(m->g, keep, nk + 1, &plan);
  free(keep);
  if (!rc) rc = ts_params_bind(m->ps, m->g, plan);
  for (int i = 0; i < nin && !rc; i++) rc = ts_plan_bind(plan, ins[i], data[i]);
  if (!rc) rc = ts_plan_run(plan, 0);
  CHECK_MSG(rc == TS_OK, "%s: forward+backward failed (%s): %s", what, ts_strerror(rc), ts_last_error());
  if (!rc) {
    out = *(float *)ts_plan_data(plan, loss);
    fprintf(stderr, "%s: loss at init %.4f\n", what, (double)out);
    const float *gr = ts_params_grads(m->ps);
    size_t n = ts_params_numel(m->ps), bad = 0, nonzero = 0;
    for (size_t i = 0; i < n; i++) {
      bad += !isfinite(gr[i]);
      nonzero += gr[i] != 0.0f;
    }
    CHECK_MSG(bad == 0, "%s: %zu non-finite gradients", what, bad);
    CHECK_MSG(nonzero > n / 4, "%s: only %zu of %zu gradients are non-zero", what, nonzero, n);
  }
  ts_plan_free(plan);
  return out;
}

/* Classifier on x (N,C,H,W) random, labels i % classes: loss within tol of ln(classes). */
static void run_classifier(model *m, ts_val x, ts_val y, ts_val loss, int classes, double tol,
                           const char *what) {
  ts_shape xs = ts_val_shape(m->g, x);
  int64_t n = ts_shape_numel(&xs), N = xs.dims[0];
  float *xd = malloc(sizeof(float) * (size_t)n);
  int32_t *yd = malloc(sizeof(int32_t) * (size_t)N);
  ts_test_fill(xd, (size_t)n, 5, -1.0f, 1.0f);
  for (int64_t i = 0; i < N; i++) yd[i] = (int32_t)(i % classes);
  ts_val ins[2] = {x, y};
  void *data[2] = {xd, yd};
  ts_val_set_requires_grad(m->g, x, 0);
  float l = run_once(m, loss, ins, data, 2, what);
  CHECK_MSG(isfinite(l) && fabs(l - log((double)classes)) < tol, "%s: loss %g, want ln(%d) = %g +- %g",
            what, (double)l, classes, log((double)classes), tol);
  free(xd);
  free(yd);
}

static void test_resnet18_cifar(void) {
  model m;
  model_init(&m);
  ts_val x = ts_input(m.g, "x", TS_F32, ts_shape4(2, 3, 32, 32));
  ts_val y = ts_input(m.g, "labels", TS_I32, ts_shape1(2));
  ts_resnet_config cfg = {.depth = 18, .num_classes = 10, .cifar = 1};
  ts_val logits = TS_NONE, loss = TS_NONE;
  CHECK_OK(ts_zoo_resnet(&m.nn, &cfg, x, y, &logits, &loss));
  check_shape(&m, logits, ts_shape2(2, 10), "resnet18 logits");
  check_shape(&m, loss, ts_shape_make(0, NULL), "resnet18 loss");
  check_count(&m, 11173962, "resnet18 cifar");
  check_param_shape(&m, "conv1.weight", ts_shape4(64, 3, 3, 3));
  check_param_shape(&m, "bn1.running_var", ts_shape1(64));
  check_param_shape(&m, "layer1.0.conv1.weight", ts_shape4(64, 64, 3, 3));
  check_param_shape(&m, "layer1.1.bn2.bias", ts_shape1(64));
  check_param_shape(&m, "layer2.0.conv1.weight", ts_shape4(128, 64, 3, 3));
  check_param_shape(&m, "layer2.0.downsample.0.weight", ts_shape4(128, 64, 1, 1));
  check_param_shape(&m, "layer2.0.downsample.1.running_mean", ts_shape1(128));
  check_param_shape(&m, "layer4.1.conv2.weight", ts_shape4(512, 512, 3, 3));
  check_param_shape(&m, "fc.weight", ts_shape2(10, 512));
  check_param_shape(&m, "fc.bias", ts_shape1(10));
  CHECK(!has_param(&m, "layer1.0.downsample.0.weight"));
  CHECK(!has_param(&m, "conv1.bias"));
  CHECK(ts_params_flags(m.ps, ts_params_find(m.ps, "bn1.running_mean")) & TS_PARAM_STATE);
  /* 20 BatchNorms x 2 running stats */
  CHECK_MSG(ts_params_state_numel(m.ps) == 2 * 4800, "state numel %zu", ts_params_state_numel(m.ps));
  run_classifier(&m, x, y, loss, 10, 1.0, "resnet18 cifar");
  model_free(&m);
}

static void test_resnet_imagenet_counts(void) {
  struct {
    int depth;
    int64_t params;
  } cases[] = {{18, 11689512}, {34, 21797672}, {50, 25557032}, {101, 44549160}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    model m;
    model_init(&m);
    ts_val x = ts_input(m.g, "x", TS_F32, ts_shape4(1, 3, 64, 64));
    ts_resnet_config cfg = {.depth = cases[i].depth}; /* 1000 classes, ImageNet stem */
    ts_val logits = TS_NONE, loss = 0;
    CHECK_OK(ts_zoo_resnet(&m.nn, &cfg, x, TS_NONE, &logits, &loss));
    CHECK(loss == TS_NONE);
    check_shape(&m, logits, ts_shape2(1, 1000), "resnet logits");
    char what[32];
    snprintf(what, sizeof what, "resnet%d", cases[i].depth);
    check_count(&m, cases[i].params, what);
    check_param_shape(&m, "conv1.weight", ts_shape4(64, 3, 7, 7));
    if (cases[i].depth >= 50) {
      check_param_shape(&m, "layer1.0.conv3.weight", ts_shape4(256, 64, 1, 1));
      check_param_shape(&m, "layer1.0.downsample.0.weight", ts_shape4(256, 64, 1, 1));
      check_param_shape(&m, "layer4.2.bn3.weight", ts_shape1(2048));
      check_param_shape(&m, "fc.weight", ts_shape2(1000, 2048));
    }
    model_free(&m);
  }
}

static void test_resnet50_run(void) {
  model m;
  model_init(&m);
  ts_val x = ts_input(m.g, "x", TS_F32, ts_shape4(2, 3, 32, 32));
  ts_val y = ts_input(m.g, "labels", TS_I64, ts_shape1(2));
  ts_resnet_config cfg = {.depth = 50, .num_classes = 10};
  ts_val logits = TS_NONE, loss = TS_NONE;
  CHECK_OK(ts_zoo_resnet(&m.nn, &cfg, x, y, &logits, &loss));
  check_shape(&m, logits, ts_shape2(2, 10), "resnet50 logits");
  check_count(&m, 23528522, "resnet50 10 classes");
  if (loss == TS_NONE) {
    model_free(&m);
    return;
  }
  /* labels are i64 here */
  float *xd = malloc(sizeof(float) * 2 * 3 * 32 * 32);
  int64_t yd[2] = {3, 7};
  ts_test_fill(xd, 2 * 3 * 32 * 32, 9, -1.0f, 1.0f);
  ts_val ins[2] = {x, y};
  void *data[2] = {xd, yd};
  ts_val_set_requires_grad(m.g, x, 0);
  float l = run_once(&m, loss, ins, data, 2, "resnet50");
  CHECK_MSG(isfinite(l) && fabs(l - log(10.0)) < 1.5, "resnet50: loss %g", (double)l);
  free(xd);
  model_free(&m);
}

static void test_resnet20(void) {
  static const struct {
    int depth;
    int64_t params;
  } cases[] = {{20, 272474}, {32, 466906}, {56, 855770}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    model m;
    model_init(&m);
    ts_val x = ts_input(m.g, "x", TS_F32, ts_shape4(2, 3, 32, 32));
    ts_val y = ts_input(m.g, "labels", TS_I32, ts_shape1(2));
    ts_resnet_config cfg = {.depth = cases[i].depth, .cifar = 1}; /* 10 classes by default */
    ts_val logits = TS_NONE, loss = TS_NONE;
    CHECK_OK(ts_zoo_resnet(&m.nn, &cfg, x, y, &logits, &loss));
    check_shape(&m, logits, ts_shape2(2, 10), "resnet20 logits");
    char what[32];
    snprintf(what, sizeof what, "resnet%d (option B)", cases[i].depth);
    check_count(&m, cases[i].params, what);
    check_param_shape(&m, "conv1.weight", ts_shape4(16, 3, 3, 3));
    check_param_shape(&m, "layer3.0.downsample.0.weight", ts_shape4(64, 32, 1, 1));
    check_param_shape(&m, "fc.weight", ts_shape2(10, 64));
    CHECK(!has_param(&m, "layer4.0.conv1.weight"));
    if (cases[i].depth == 20) run_classifier(&m, x, y, loss, 10, 1.0, "resnet20");
    model_free(&m);
  }
}

static void test_gpt(void) {
  ts_gpt_config cfg = {.vocab_size = 64, .block_size = 8, .n_layer = 2, .n_head = 4, .n_embd = 32};
  CHECK(ts_zoo_gpt_num_params(&cfg, 8) == 29824); /* the PyTorch model of torch_step.py */
  model m;
  model_init(&m);
  ts_val ids = ts_input(m.g, "ids", TS_I32, ts_shape2(2, 8));
  ts_val tgt = ts_input(m.g, "targets", TS_I32, ts_shape2(2, 8));
  ts_val logits = TS_NONE, loss = TS_NONE;
  CHECK_OK(ts_zoo_gpt(&m.nn, &cfg, ids, tgt, &logits, &loss));
  check_shape(&m, logits, ts_shape3(2, 8, 64), "gpt logits");
  check_shape(&m, loss, ts_shape_make(0, NULL), "gpt loss");
  check_count(&m, 29824, "gpt");
  check_param_shape(&m, "transformer.wte.weight", ts_shape2(64, 32));
  check_param_shape(&m, "transformer.wpe.weight", ts_shape2(8, 32));
  check_param_shape(&m, "transformer.h.0.ln_1.weight", ts_shape1(32));
  check_param_shape(&m, "transformer.h.0.ln_1.bias", ts_shape1(32));
  check_param_shape(&m, "transformer.h.0.attn.c_attn.weight", ts_shape2(96, 32));
  check_param_shape(&m, "transformer.h.0.attn.c_attn.bias", ts_shape1(96));
  check_param_shape(&m, "transformer.h.0.attn.c_proj.weight", ts_shape2(32, 32));
  check_param_shape(&m, "transformer.h.1.ln_2.weight", ts_shape1(32));
  check_param_shape(&m, "transformer.h.1.mlp.c_fc.weight", ts_shape2(128, 32));
  check_param_shape(&m, "transformer.h.1.mlp.c_proj.weight", ts_shape2(32, 128));
  check_param_shape(&m, "transformer.h.1.mlp.c_proj.bias", ts_shape1(32));
  check_param_shape(&m, "transformer.ln_f.weight", ts_shape1(32));
  check_param_shape(&m, "lm_head.weight", ts_shape2(64, 32));
  CHECK(!has_param(&m, "lm_head.bias"));
  CHECK(!has_param(&m, "transformer.h.2.ln_1.weight"));
  CHECK(ts_params_flags(m.ps, ts_params_find(m.ps, "transformer.h.0.attn.c_attn.bias")) & TS_PARAM_NO_DECAY);
  CHECK(!(ts_params_flags(m.ps, ts_params_find(m.ps, "transformer.h.0.attn.c_attn.weight")) & TS_PARAM_NO_DECAY));
  if (loss != TS_NONE) {
    int32_t id[16], td[16];
    for (int i = 0; i < 16; i++) {
      id[i] = (i * 37 + 5) % 64;
      td[i] = (i * 11 + 3) % 64;
    }
    ts_val ins[2] = {ids, tgt};
    void *data[2] = {id, td};
    float l = run_once(&m, loss, ins, data, 2, "gpt");
    CHECK_MSG(isfinite(l) && fabs(l - log(64.0)) < 0.1, "gpt: loss %g, want ln(64) = %g", (double)l,
              log(64.0));
    /* nanoGPT init: std 0.02, residual projections 0.02/sqrt(2 n_layer), LN ones, biases zero */
    int idw = ts_params_find(m.ps, "transformer.h.0.attn.c_attn.weight");
    int idp = ts_params_find(m.ps, "transformer.h.0.mlp.c_proj.weight");
    const float *w = ts_params_ptr(m.ps, idw), *pw = ts_params_ptr(m.ps, idp);
    double s2 = 0, p2 = 0;
    for (int i = 0; i < 96 * 32; i++) s2 += (double)w[i] * w[i];
    for (int i = 0; i < 32 * 128; i++) p2 += (double)pw[i] * pw[i];
    double sd = sqrt(s2 / (96 * 32)), pd = sqrt(p2 / (32 * 128));
    CHECK_MSG(fabs(sd - 0.02) < 0.002, "c_attn std %g, want 0.02", sd);
    CHECK_MSG(fabs(pd - 0.01) < 0.001, "c_proj std %g, want 0.01", pd);
    CHECK(ts_params_ptr(m.ps, ts_params_find(m.ps, "transformer.ln_f.weight"))[3] == 1.0f);
    CHECK(ts_params_ptr(m.ps, ts_params_find(m.ps, "transformer.h.1.mlp.c_fc.bias"))[5] == 0.0f);
  }
  model_free(&m);

  /* shorter sequence than block_size (wpe sliced), tied head, no bias */
  ts_gpt_config c2 = cfg;
  c2.block_size = 16;
  c2.tie_weights = 1;
  c2.no_bias = 1;
  model_init(&m);
  ids = ts_input(m.g, "ids", TS_I64, ts_shape2(3, 5));
  CHECK_OK(ts_zoo_gpt(&m.nn, &c2, ids, TS_NONE, &logits, &loss));
  CHECK(loss == TS_NONE);
  check_shape(&m, logits, ts_shape3(3, 5, 64), "gpt tied logits");
  CHECK(!has_param(&m, "lm_head.weight"));
  CHECK(!has_param(&m, "transformer.h.0.attn.c_attn.bias"));
  CHECK(!has_param(&m, "transformer.h.0.ln_1.bias"));
  check_param_shape(&m, "transformer.wpe.weight", ts_shape2(16, 32));
  CHECK((int64_t)ts_params_numel(m.ps) == ts_zoo_gpt_num_params(&c2, 5));
  CHECK(ts_zoo_gpt_num_params(&c2, 5) == 29824 - 64 * 32 + 8 * 32 - (2 * (32 + 96 + 32 + 32 + 128 + 32) + 32));
  model_free(&m);
}

static void test_small(void) {
  /* MLP 784 -> 32 -> 16 -> 10 on (4,1,28,28) */
  model m;
  model_init(&m);
  ts_val x = ts_input(m.g, "x", TS_F32, ts_shape4(4, 1, 28, 28));
  ts_val y = ts_input(m.g, "labels", TS_I32, ts_shape1(4));
  int hidden[2] = {32, 16};
  ts_mlp_config mc = {.num_classes = 10, .hidden = hidden, .nhidden = 2};
  ts_val logits = TS_NONE, loss = TS_NONE;
  CHECK_OK(ts_zoo_mlp(&m.nn, &mc, x, y, &logits, &loss));
  check_shape(&m, logits, ts_shape2(4, 10), "mlp logits");
  check_count(&m, 784 * 32 + 32 + 32 * 16 + 16 + 16 * 10 + 10, "mlp");
  check_param_shape(&m, "fc1.weight", ts_shape2(32, 784));
  check_param_shape(&m, "fc3.bias", ts_shape1(10));
  run_classifier(&m, x, y, loss, 10, 0.5, "mlp");
  model_free(&m);

  /* LeNet-5 on 1x28x28 (61,706 parameters) and 3x32x32 */
  for (int k = 0; k < 2; k++) {
    model_init(&m);
    int C = k ? 3 : 1, H = k ? 32 : 28;
    x = ts_input(m.g, "x", TS_F32, ts_shape4(4, C, H, H));
    y = ts_input(m.g, "labels", TS_I32, ts_shape1(4));
    ts_lenet5_config lc = {0};
    CHECK_OK(ts_zoo_lenet5(&m.nn, &lc, x, y, &logits, &loss));
    check_shape(&m, logits, ts_shape2(4, 10), "lenet5 logits");
    check_count(&m, k ? 62006 : 61706, "lenet5");
    check_param_shape(&m, "conv2.weight", ts_shape4(16, 6, 5, 5));
    check_param_shape(&m, "fc1.weight", ts_shape2(120, 400));
    if (k == 0) run_classifier(&m, x, y, loss, 10, 0.5, "lenet5");
    model_free(&m);
  }

  /* ConvNet on 1x28x28 and 3x32x32 */
  for (int k = 0; k < 2; k++) {
    model_init(&m);
    int C = k ? 3 : 1, H = k ? 32 : 28;
    x = ts_input(m.g, "x", TS_F32, ts_shape4(4, C, H, H));
    y = ts_input(m.g, "labels", TS_I32, ts_shape1(4));
    ts_convnet_config cc = {.num_classes = 10};
    CHECK_OK(ts_zoo_convnet(&m.nn, &cc, x, y, &logits, &loss));
    check_shape(&m, logits, ts_shape2(4, 10), "convnet logits");
    int64_t sp = (H / 4) * (H / 4);
    check_count(&m, 32 * C * 9 + 64 + 64 * 32 * 9 + 128 + 64 * sp * 10 + 10, "convnet");
    check_param_shape(&m, "bn2.running_var", ts_shape1(64));
    check_param_shape(&m, "fc.weight", ts_shape2(10, 64 * sp));
    CHECK(!has_param(&m, "conv1.bias"));
    if (k == 1) run_classifier(&m, x, y, loss, 10, 1.0, "convnet");
    model_free(&m);
  }
}

static void test_errors(void) {
  model m;
  model_init(&m);
  ts_val x = ts_input(m.g, "x", TS_F32, ts_shape4(2, 3, 32, 32));
  ts_val logits = 0, loss = 0;
  ts_resnet_config rc = {.depth = 19};
  CHECK(ts_zoo_resnet(&m.nn, &rc, x, TS_NONE, &logits, &loss) == TS_ECONFIG);
  CHECK(strstr(ts_last_error(), "depth 19") != NULL);
  CHECK(logits == TS_NONE && loss == TS_NONE);
  CHECK(ts_graph_status(m.g) == TS_OK); /* config errors do not poison the graph */
  ts_val bad = ts_input(m.g, "flat", TS_F32, ts_shape2(2, 3));
  ts_resnet_config r18 = {.depth = 18};
  CHECK(ts_zoo_resnet(&m.nn, &r18, bad, TS_NONE, &logits, NULL) == TS_ESHAPE);
  ts_val ids = ts_input(m.g, "ids", TS_I32, ts_shape2(2, 9));
  ts_gpt_config gc = {.vocab_size = 64, .block_size = 8, .n_layer = 1, .n_head = 3, .n_embd = 32};
  CHECK(ts_zoo_gpt(&m.nn, &gc, ids, TS_NONE, &logits, NULL) == TS_ECONFIG); /* 32 % 3 */
  CHECK(strstr(ts_last_error(), "n_head") != NULL);
  gc.n_head = 4;
  CHECK(ts_zoo_gpt(&m.nn, &gc, ids, TS_NONE, &logits, NULL) == TS_ECONFIG); /* T 9 > 8 */
  CHECK(strstr(ts_last_error(), "block_size") != NULL);
  CHECK(ts_zoo_gpt(&m.nn, &gc, x, TS_NONE, &logits, NULL) == TS_ESHAPE); /* f32 ids */
  CHECK(ts_zoo_gpt_num_params(&gc, 8) > 0);
  gc.n_layer = 0;
  CHECK(ts_zoo_gpt_num_params(&gc, 8) == -1);
  ts_mlp_config mc = {.num_classes = 0};
  CHECK(ts_zoo_mlp(&m.nn, &mc, x, TS_NONE, &logits, NULL) == TS_ECONFIG);
  ts_lenet5_config lc = {0};
  ts_val odd = ts_input(m.g, "odd", TS_F32, ts_shape4(2, 1, 30, 30));
  CHECK(ts_zoo_lenet5(&m.nn, &lc, odd, TS_NONE, &logits, NULL) == TS_ESHAPE);
  CHECK(ts_zoo_resnet(NULL, &r18, x, TS_NONE, &logits, NULL) == TS_EINVAL);
  CHECK(ts_graph_status(m.g) == TS_OK);
  model_free(&m);
}

int main(void) {
  double t0 = ts_time_now();
  test_errors();
  test_resnet_imagenet_counts();
  test_resnet20();
  test_gpt();
  test_small();
  test_resnet18_cifar();
  test_resnet50_run();
  fprintf(stderr, "test_zoo: %.2f s\n", ts_time_now() - t0);
  return ts_test_finish("test_zoo");
}
