/* The matmul+bias+gelu fusion (src/runtime/exec.c) in the plans the distribution objects make
 * for the trainer: a 2-layer GPT under stand_alone and semi_auto_parallel (one process), f32 and
 * amp O2 (bf16). Asserted:
 *  - the evaluation plan (r->plan_e: the trainer's eval pass, `tessera eval`, Python's predict)
 *    plans one fusion per layer (c_fc + gelu) and a run takes both; its logits with the fusion
 *    on and off (ts_plan_set_fusion) agree within 1e-5 (f32; bitwise as measured) and 2^-6 of
 *    the largest logit (O2: gelu of the f32 sum instead of its bf16 rounding), and are finite;
 *  - the training plan (r->plan: forward + backward, gelu's backward reads c_fc's output)
 *    plans none. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "distribution/dist.h"
#include "tessera/zoo.h"
#include "test_util.h"

enum { B = 4, T = 16, V = 64 };

static int gpt(ts_nn *nn, ts_val x, ts_val y, const ts_model_info *info, ts_val *logits, ts_val *loss, void *u) {
  (void)info;
  (void)u;
  ts_gpt_config c = {.vocab_size = V, .n_layer = 2, .n_head = 2, .n_embd = 32};
  return ts_zoo_gpt(nn, &c, x, y, logits, loss);
}

static void check(const char *mode, int amp) {
  char what[64];
  snprintf(what, sizeof what, "%s O%d", mode, amp);
  ts_dist_config c;
  memset(&c, 0, sizeof c);
  c.micro_batch = B;
  c.eval_batch = B;
  c.accum = 1;
  c.seed = 9;
  c.wire = TS_F32;
  c.amp_level = amp;
  c.amp_dtype = TS_BF16;
  ts_dist_model m;
  memset(&m, 0, sizeof m);
  m.fn = gpt;
  m.dtype = TS_I32;
  m.sample = ts_shape1(T);
  m.text = 1;
  ts_dist *d = NULL;
  CHECK_OK(ts_dist_create(ts_dist_find(mode), &c, &m, 0, 0, &d));
  CHECK_OK(ts_dist_build(d, &m));
  CHECK_OK(ts_dist_start(d));
  const ts_dist_run *r = ts_dist_get(d);
  const int nt = ts_plan_num_fusions(r->plan, TS_FUSION_MATMUL_BIAS_GELU);
  const int ne = ts_plan_num_fusions(r->plan_e, TS_FUSION_MATMUL_BIAS_GELU);
  printf("%s: training plan %d matmul+bias+gelu, evaluation plan %d\n", what, nt, ne);
  CHECK_MSG(nt == 0, "%s: the training plan plans %d matmul+bias+gelu fusions (expected 0)", what, nt);
  CHECK_MSG(ne == 2, "%s: the evaluation plan plans %d matmul+bias+gelu fusions (expected 2, one per layer)", what, ne);
  int32_t x[B * T];
  for (int i = 0; i < B * T; i++) x[i] = (i * 11 + 3) % V;
  CHECK_OK(ts_plan_bind(r->plan_e, r->xe, x));
  const size_t nl = (size_t)B * T * V;
  float *lo[2] = {malloc(nl * 4), malloc(nl * 4)};
  CHECK(lo[0] && lo[1]);
  for (int f = 1; f >= 0; f--) {
    ts_plan_set_fusion(r->plan_e, f);
    CHECK_OK(ts_plan_run(r->plan_e, 0));
    const int taken = ts_plan_fusions_taken(r->plan_e, TS_FUSION_MATMUL_BIAS_GELU);
    CHECK_MSG(taken == 2 * f, "%s: fusion %s: %d taken", what, f ? "on" : "off", taken);
    const float *lg = ts_plan_data(r->plan_e, r->logits);
    CHECK(lg != NULL);
    if (lg) memcpy(lo[f], lg, nl * 4);
  }
  double diff = 0, mx = 0;
  int finite = 1;
  for (size_t i = 0; i < nl; i++) {
    diff = fmax(diff, fabs((double)lo[1][i] - lo[0][i]));
    mx = fmax(mx, fabs((double)lo[0][i]));
    finite &= isfinite(lo[1][i]) != 0;
  }
  const double tol = amp ? mx / 64 : 1e-5;
  printf("%s: logits fused vs unfused max |diff| %.3g (max |logit| %.3g)\n", what, diff, mx);
  CHECK_MSG(finite && mx > 0, "%s: fused logits not finite or all zero", what);
  CHECK_MSG(diff <= tol, "%s: logits fused vs unfused %.3g (tolerance %.3g)", what, diff, tol);
  free(lo[0]);
  free(lo[1]);
  ts_dist_free(d);
}

int main(void) {
  for (int amp = 0; amp <= 2; amp += 2) {
    check("stand_alone", amp);
    check("semi_auto_parallel", amp);
  }
  return ts_test_finish("dist_eval_fusion");
}
