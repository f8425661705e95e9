/* model.recompute through the distribution objects (what the trainer runs): a GPT trained a few
 * SGD steps under stand_alone and semi_auto_parallel (one process) with recompute full and
 * selective gives bitwise the losses and parameters of recompute none, with a smaller arena for
 * full; a pattern that matches nothing is refused naming it. */
#include <stdlib.h>
#include <string.h>

#include "distribution/dist.h"
#include "tessera/zoo.h"
#include "test_util.h"

enum { B = 4, T = 16, V = 64, STEPS = 3 };

static int gpt(ts_nn *nn, ts_val x, ts_val y, const ts_model_info *info, ts_val *logits, ts_val *loss, void *u) {
  (void)info;
  (void)u;
  ts_gpt_config c = {.vocab_size = V, .n_layer = 2, .n_head = 2, .n_embd = 32, .dropout = 0.1f, .dropout_seed = 5};
  return ts_zoo_gpt(nn, &c, x, y, logits, loss);
}

static int run(const char *mode, int recompute, const char *pattern, float *losses, float **w, size_t *n,
               size_t *peak) {
  ts_dist_config c;
  memset(&c, 0, sizeof c);
  c.micro_batch = B;
  c.eval_batch = B;
  c.accum = 1;
  c.seed = 9;
  c.wire = TS_F32;
  c.recompute = recompute;
  if (pattern) snprintf(c.recompute_layers[c.n_recompute_layers++], sizeof c.recompute_layers[0], "%s", pattern);
  ts_dist_model m;
  memset(&m, 0, sizeof m);
  m.fn = gpt;
  m.dtype = TS_I32;
  m.sample = ts_shape1(T);
  m.text = 1;
  ts_dist *d = NULL;
  int rc = ts_dist_create(ts_dist_find(mode), &c, &m, 0, 0, &d);
  if (!rc) rc = ts_dist_build(d, &m);
  if (!rc) rc = ts_dist_start(d);
  if (rc) {
    ts_dist_free(d);
    return rc;
  }
  const ts_dist_run *r = ts_dist_get(d);
  *peak = ts_plan_peak_bytes(r->plan);
  int32_t x[B * T], y[B * T];
  CHECK_OK(ts_plan_bind(r->plan, r->x, x));
  CHECK_OK(ts_plan_bind(r->plan, r->y, y));
  *n = ts_params_numel(r->params);
  float *p = ts_params_data(r->params), *g = ts_params_grads(r->params);
  for (int s = 0; s < STEPS; s++) {
    for (int i = 0; i < B * T; i++) {
      x[i] = (i * 11 + s * 7) % V;
      y[i] = (i * 3 + s + 1) % V;
    }
    double loss, wait;
    ts_dist_step_begin(d, g);
    CHECK_OK(ts_plan_run(r->plan, (uint64_t)s));
    loss = *(const float *)ts_plan_data(r->plan, r->loss);
    CHECK_OK(ts_dist_step_end(d, g, &loss, &wait));
    losses[s] = (float)loss;
    for (size_t i = 0; i < *n; i++) p[i] -= 0.05f * g[i];
  }
  *w = malloc(sizeof(float) * *n);
  memcpy(*w, p, sizeof(float) * *n);
  ts_dist_free(d);
  return TS_OK;
}

static void compare(const char *mode) {
  float l[3][STEPS];
  float *w[3] = {NULL, NULL, NULL};
  size_t n[3] = {0, 0, 0}, peak[3] = {0, 0, 0};
  for (int k = 0; k < 3; k++) CHECK_OK(run(mode, k, k == 2 ? "transformer.h.*" : NULL, l[k], &w[k], &n[k], &peak[k]));
  for (int k = 1; k < 3; k++)
    if (w[0] && w[k]) {
      CHECK_MSG(!memcmp(l[0], l[k], sizeof l[0]), "%s recompute %d: losses differ", mode, k);
      CHECK_MSG(n[0] == n[k] && !memcmp(w[0], w[k], sizeof(float) * n[0]), "%s recompute %d: parameters differ",
                mode, k);
    }
  CHECK_MSG(peak[1] < peak[0], "%s: full recompute arena %zu, none %zu", mode, peak[1], peak[0]);
  printf("%s: arena none %zu full %zu selective %zu\n", mode, peak[0], peak[1], peak[2]);
  for (int k = 0; k < 3; k++) free(w[k]);
}

int main(void) {
  compare("stand_alone");
  compare("semi_auto_parallel");
  float l[STEPS];
  float *w = NULL;
  size_t n, peak;
  static const char *const subs[] = {"model.recompute_layers", "nosuch.*", NULL};
  ts_test_expect_err(__FILE__, __LINE__, run("stand_alone", 1, "nosuch.*", l, &w, &n, &peak), TS_ENOTFOUND, subs);
  free(w);
  return ts_test_finish("dist_recompute");
}
