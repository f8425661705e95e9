/* Five training steps against PyTorch (part `train` of scripts/make_fixtures.py, format in
 * docs/fixtures.md): tests/fixtures/train_{mlp,cnn}_{momentum,adamw}.safetensors hold the initial
 * weights and BatchNorm running stats (init.<name>), five batches (x.<k>, y.<k>), torch's loss at
 * each step before the update (loss) and the weights and running stats after five updates
 * (final.<name>), computed by torch in float32.
 *
 * The same models are built with the nn layers (ts_nn_dense / ts_nn_conv2d / ts_nn_batchnorm)
 * and graph ops, the parameter store is overwritten from init.*, and each step binds the batch
 * (labels converted from int64 to int32), runs forward + backward through the executor and calls
 * ts_optim_step on the flat parameter / gradient buffers, with one segment per trainable
 * parameter and weight decay on all of them (torch's default: no exclusions). Both backends.
 *
 *   MLP: x (16,20) -> fc1 Linear(20,32) -> ReLU -> fc2 Linear(32,10) -> CrossEntropy(y)
 *   CNN: x (8,1,12,12) -> conv1 3x3 pad 1 (8) -> bn1 -> ReLU -> MaxPool 2 -> conv2 3x3 pad 1 (16)
 *        -> bn2 -> ReLU -> global avg pool -> flatten -> fc Linear(16,10) -> CrossEntropy(y)
 *   Momentum: SGD lr 0.1, momentum 0.9, weight decay 5e-4. AdamW: lr 1e-3, betas (0.9,0.999),
 *   eps 1e-8, weight decay 0.01. BatchNorm momentum 0.1, eps 1e-5, training mode.
 *
 * Tolerances (|got - want| <= atol + rtol |want|). Both sides compute in f32 with different
 * summation orders (oneDNN / blocked loops vs torch's kernels), so the first forward agrees to a
 * few ulp and differences then grow slowly through the updates. Observed on the development
 * machine (both backends): losses within 1.1e-7 relative, parameters and running stats within
 * 1.2e-7 absolute. The limits leave >= 10x room for other CPUs (different oneDNN ISA paths
 * change blocking and summation order) while still catching a real rule difference, which
 * typically shows up at 1e-5..1e-3 after 5 steps (weight decay coupled instead of decoupled,
 * a wrong bias correction, biased running variance, ...). Checked by mutation: weight decay
 * x1.5 fails all four cases (the AdamW ones through their losses, off by 1.2e-6..4e-6
 * relative); with losses rtol 1e-5 and params 1e-5 + 1e-4 both AdamW cases would pass.
 *   losses: rtol 1e-6.
 *   params and running stats: atol 2e-6 + rtol 2e-5.
 *   Exception, CNN + AdamW: conv1.bias and conv2.bias feed straight into training-mode
 *     BatchNorm, which subtracts the batch mean, so their gradient is mathematically zero; both
 *     frameworks compute rounding noise (|g| ~ 1e-8). SGD turns that into lr*1e-8 (nothing), but
 *     Adam normalises it (m/sqrt(v) ~ +-1), so each framework moves these biases by up to ~lr per
 *     step in a direction set by noise (torch moved them by 2.4e-3 in 5 steps). They are
 *     compared with atol 1e-2 (= 2 frameworks x 5 steps x lr x 1, the Adam step bound for a
 *     sign-noise gradient); the running means of bn1/bn2 (which include the bias, momentum
 *     0.1) with atol 2e-3 (sum over steps of 0.1 x 0.9^(4-k) x the bias bound). In addition the
 *     test checks the property that matters: these gradients are < 1e-6 in every step (both
 *     optimizers, both backends). */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tessera/tessera.h"
#include "tessera/io.h"
#include "tessera/nn.h"
#include "tessera/optim.h"
#include "runtime/run_impl.h"
#include "test_util.h"

#define STEPS 5
static const double LOSS_RTOL = 1e-6;
static const double P_ATOL = 2e-6, P_RTOL = 2e-5;
static const double NOISE_BIAS_ATOL = 1e-2, NOISE_RMEAN_ATOL = 2e-3, NOISE_GRAD_MAX = 1e-6;

typedef struct {
  ts_graph *g;
  ts_params *ps;
  ts_val x, y, loss;
  int64_t n;         /* batch */
  ts_shape xshape;
} model;

static int build(model *m, const char *kind) {
  ts_graph_create(&m->g);
  ts_params_create(&m->ps);
  ts_nn nn = {m->g, m->ps};
  ts_graph *g = m->g;
  ts_val logits;
  if (!strcmp(kind, "mlp")) {
    m->n = 16;
    m->xshape = ts_shape2(16, 20);
    m->x = ts_input(g, "x", TS_F32, m->xshape);
    ts_val h = ts_relu(g, ts_nn_dense(&nn, "fc1", m->x, 32, 1));
    logits = ts_nn_dense(&nn, "fc2", h, 10, 1);
  } else {
    m->n = 8;
    m->xshape = ts_shape4(8, 1, 12, 12);
    m->x = ts_input(g, "x", TS_F32, m->xshape);
    ts_val h = ts_nn_conv2d(&nn, "conv1", m->x, 8, 3, 1, 1, 1, 1, 1);
    h = ts_relu(g, ts_nn_batchnorm(&nn, "bn1", h, 0.1f, 1e-5f));
    h = ts_maxpool2d(g, h, 2, 2, 2, 2, 0, 0);
    h = ts_nn_conv2d(&nn, "conv2", h, 16, 3, 1, 1, 1, 1, 1);
    h = ts_relu(g, ts_nn_batchnorm(&nn, "bn2", h, 0.1f, 1e-5f));
    h = ts_flatten(g, ts_global_avgpool(g, h), 1);
    logits = ts_nn_dense(&nn, "fc", h, 10, 1);
  }
  ts_val_set_requires_grad(g, m->x, 0);
  m->y = ts_input(g, "y", TS_I32, ts_shape1(m->n));
  m->loss = ts_softmax_cross_entropy(g, logits, m->y, 0.0f);
  if (ts_graph_status(g)) return ts_graph_status(g);
  return ts_graph_backward(g, m->loss, 1.0f);
}

static void model_free(model *m) {
  ts_params_free(m->ps);
  ts_graph_free(m->g);
}

/* optimizer config from the fixture's metadata */
static int optim_config(const char *json, ts_optim_config *cfg, float *lr) {
  cJSON *o = cJSON_Parse(json ? json : "");
  if (!o) return TS_EFORMAT;
  const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "kind");
  ts_optim_kind kind;
  int rc = cJSON_IsString(k) ? ts_optim_kind_parse(k->valuestring, &kind) : TS_EFORMAT;
  if (rc == TS_OK) {
    *cfg = ts_optim_config_default(kind);
#define F(name, field)                                                   \
  {                                                                      \
    const cJSON *v_ = cJSON_GetObjectItemCaseSensitive(o, name);         \
    if (cJSON_IsNumber(v_)) cfg->field = v_->valuedouble;                \
  }
    F("weight_decay", weight_decay);
    F("momentum", momentum);
    F("dampening", dampening);
    F("beta1", beta1);
    F("beta2", beta2);
    F("eps", eps);
#undef F
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "nesterov");
    if (cJSON_IsNumber(v)) cfg->nesterov = (int)v->valuedouble;
    v = cJSON_GetObjectItemCaseSensitive(o, "lr");
    rc = cJSON_IsNumber(v) ? TS_OK : TS_EFORMAT;
    if (rc == TS_OK) *lr = (float)v->valuedouble;
  }
  cJSON_Delete(o);
  return rc;
}

/* Is this a conv bias feeding training-mode BatchNorm (gradient is rounding noise)? */
static int noise_bias(const char *model, const char *name) {
  return !strcmp(model, "cnn") && (!strcmp(name, "conv1.bias") || !strcmp(name, "conv2.bias"));
}

static void run_case(const char *mname, const char *oname, int be) {
  const char *bname = be ? "fast" : "ref";
  char path[1024], what[256];
  snprintf(path, sizeof path, "%s/train_%s_%s.safetensors", TS_FIXTURE_DIR, mname, oname);
  ts_st_file *f = NULL;
  int rc = ts_st_open(path, &f);
  CHECK_MSG(rc == TS_OK, "%s", ts_last_error());
  if (rc) return;
  ts_backend_set(be ? TS_BACKEND_FAST : TS_BACKEND_REF);
  model m;
  memset(&m, 0, sizeof m);
  rc = build(&m, mname);
  CHECK_MSG(rc == TS_OK, "%s: building the model: %s", mname, ts_graph_error(m.g));
  ts_plan *plan = NULL;
  ts_optim *opt = NULL;
  float *xb = NULL;
  int32_t *yb = NULL;
  int64_t *y64 = NULL;
  ts_optim_segment *segs = NULL;
  if (rc) goto done;

  /* parameters: allocate, then overwrite every entry from init.<name> */
  CHECK_OK(ts_params_alloc(m.ps, 1));
  const int np = ts_params_count(m.ps);
  int ninit = 0;
  for (int i = 0; i < ts_st_count(f); i++) ninit += !strncmp(ts_st_name(f, i), "init.", 5);
  CHECK_MSG(ninit == np, "%s: fixture has %d init.* tensors, the model %d entries", path, ninit, np);
  for (int id = 0; id < np; id++) {
    char nm[300];
    snprintf(nm, sizeof nm, "init.%s", ts_params_name(m.ps, id));
    ts_shape s = ts_params_shape(m.ps, id);
    rc = ts_st_read(f, nm, TS_F32, &s, ts_params_ptr(m.ps, id));
    CHECK_MSG(rc == TS_OK, "%s", ts_last_error());
    if (rc) goto done;
  }
  ts_val keep[64];
  int nk = 0;
  CHECK_OK(ts_params_attach_grads(m.ps, m.g, keep, 63, &nk));
  keep[nk++] = m.loss;
  rc = ts_plan_create(m.g, keep, nk, &plan);
  CHECK_MSG(rc == TS_OK, "plan: %s", ts_last_error());
  if (rc) goto done;
  CHECK_OK(ts_params_bind(m.ps, m.g, plan));
  const size_t nx = (size_t)ts_shape_numel(&m.xshape);
  xb = malloc(nx * sizeof(float));
  yb = malloc((size_t)m.n * sizeof(int32_t));
  y64 = malloc((size_t)m.n * sizeof(int64_t));
  CHECK_OK(ts_plan_bind(plan, m.x, xb));
  CHECK_OK(ts_plan_bind(plan, m.y, yb));

  /* optimizer: one segment per trainable parameter, weight decay on all */
  ts_optim_config cfg;
  float lr = 0;
  rc = optim_config(ts_st_meta(f, "optimizer"), &cfg, &lr);
  CHECK_MSG(rc == TS_OK, "%s: metadata 'optimizer' malformed", path);
  if (rc) goto done;
  segs = calloc((size_t)np, sizeof *segs);
  int nseg = 0;
  for (int id = 0; id < np; id++) {
    if (ts_params_flags(m.ps, id) & TS_PARAM_STATE) continue;
    ts_shape s = ts_params_shape(m.ps, id);
    segs[nseg++] = (ts_optim_segment){ts_params_name(m.ps, id), ts_params_offset(m.ps, id),
                                      (size_t)ts_shape_numel(&s), 0};
  }
  CHECK_OK(ts_optim_create(&opt, &cfg, segs, nseg));
  if (!opt) goto done;

  float losses[STEPS], want_loss[STEPS];
  double noise_g = 0;
  CHECK_OK(ts_st_read(f, "loss", TS_F32, &(ts_shape){1, {STEPS}}, want_loss));
  for (int k = 0; k < STEPS; k++) {
    char nm[32];
    snprintf(nm, sizeof nm, "x.%d", k);
    CHECK_OK(ts_st_read(f, nm, TS_F32, &m.xshape, xb));
    snprintf(nm, sizeof nm, "y.%d", k);
    ts_shape ys = ts_shape1(m.n);
    CHECK_OK(ts_st_read(f, nm, TS_I64, &ys, y64));
    for (int64_t i = 0; i < m.n; i++) {
      CHECK(y64[i] >= 0 && y64[i] < 10);
      yb[i] = (int32_t)y64[i];
    }
    rc = ts_plan_run(plan, (uint64_t)k);
    CHECK_MSG(rc == TS_OK, "%s/%s [%s] step %d: %s", mname, oname, bname, k, ts_last_error());
    if (rc) goto done;
    losses[k] = *(const float *)ts_plan_data(plan, m.loss);
    for (int id = 0; id < np; id++)
      if (noise_bias(mname, ts_params_name(m.ps, id))) {
        ts_shape s = ts_params_shape(m.ps, id);
        const float *gp = ts_params_grad_ptr(m.ps, id);
        for (int64_t i = 0; i < ts_shape_numel(&s); i++)
          if (fabs(gp[i]) > noise_g) noise_g = fabs(gp[i]);
      }
    CHECK_OK(ts_optim_step(opt, ts_params_data(m.ps), ts_params_grads(m.ps), lr));
  }
  double lrel = 0;
  for (int k = 0; k < STEPS; k++) {
    double r = fabs((double)losses[k] - want_loss[k]) / fabs((double)want_loss[k]);
    if (!(r <= lrel)) lrel = r;
  }
  snprintf(what, sizeof what, "%s/%s [%s] losses", mname, oname, bname);
  CHECK_CLOSE(losses, want_loss, STEPS, 0, LOSS_RTOL, what);
  printf("%-13s [%-4s] losses  ts:", "", bname);
  for (int k = 0; k < STEPS; k++) printf(" %.7f", losses[k]);
  printf("\n%-13s        torch:", "");
  for (int k = 0; k < STEPS; k++) printf(" %.7f", want_loss[k]);
  printf("   max rel err %.2e (tol %g)\n", lrel, LOSS_RTOL);
  if (!strcmp(mname, "cnn")) {
    CHECK_MSG(noise_g <= NOISE_GRAD_MAX, "%s/%s [%s]: conv bias gradient %g should be ~0",
              mname, oname, bname, noise_g);
    printf("%-13s [%-4s] conv1/conv2 bias gradients (0 in exact arithmetic): max |g| %.2e over 5 steps (limit %g)\n",
           "", bname, noise_g, NOISE_GRAD_MAX);
  }

  /* final parameters and running statistics */
  const int adam = cfg.kind == TS_OPTIM_ADAMW;
  double worst_abs = 0, worst_ratio = 0;
  char worst_name[200] = "";
  for (int id = 0; id < np; id++) {
    const char *name = ts_params_name(m.ps, id);
    char nm[300];
    snprintf(nm, sizeof nm, "final.%s", name);
    ts_shape s = ts_params_shape(m.ps, id);
    size_t n = (size_t)ts_shape_numel(&s);
    float *want = malloc(n * sizeof(float));
    rc = ts_st_read(f, nm, TS_F32, &s, want);
    CHECK_MSG(rc == TS_OK, "%s", ts_last_error());
    if (rc) {
      free(want);
      continue;
    }
    double atol = P_ATOL, rtol = P_RTOL;
    const char *note = "";
    if (adam && noise_bias(mname, name)) {
      atol = NOISE_BIAS_ATOL, rtol = 0, note = "  (noise-driven under Adam, see header)";
    } else if (adam && !strcmp(mname, "cnn") && strstr(name, "running_mean")) {
      atol = NOISE_RMEAN_ATOL, rtol = 0, note = "  (includes the noise-driven conv bias)";
    }
    const float *got = ts_params_ptr(m.ps, id);
    double ma = 0;
    for (size_t i = 0; i < n; i++)
      if (fabs((double)got[i] - want[i]) > ma) ma = fabs((double)got[i] - want[i]);
    size_t w = 0;
    double ratio = ts_test_close(got, want, n, atol, rtol, &w);
    snprintf(what, sizeof what, "%s/%s [%s] final %s", mname, oname, bname, name);
    CHECK_CLOSE(got, want, n, atol, rtol, what);
    printf("%-13s [%-4s] %-18s max abs err %.2e (%.2f of tol %g+%g)%s\n", "", bname, name, ma,
           ratio, atol, rtol, note);
    if (!*note && ratio > worst_ratio) {
      worst_ratio = ratio;
      snprintf(worst_name, sizeof worst_name, "%s", name);
    }
    if (!*note && ma > worst_abs) worst_abs = ma;
    free(want);
  }
  printf("%-13s [%-4s] %s: losses max rel err %.2e; params/stats max abs err %.2e (worst ratio %.2f, %s)\n",
         mname, bname, oname, lrel, worst_abs, worst_ratio, worst_name);
done:
  ts_optim_free(opt);
  ts_plan_free(plan);
  model_free(&m);
  free(segs);
  free(xb);
  free(yb);
  free(y64);
  ts_st_close(f);
  ts_backend_set(TS_BACKEND_FAST);
}

int main(void) {
  static const char *const models[] = {"mlp", "cnn"}, *const optims[] = {"momentum", "adamw"};
  for (int mi = 0; mi < 2; mi++)
    for (int oi = 0; oi < 2; oi++) {
      printf("== train_%s_%s\n", models[mi], optims[oi]);
      for (int be = 0; be < 2; be++) run_case(models[mi], optims[oi], be);
    }
  return ts_test_finish("test_torch_train");
}
