/* The executor's BN+ReLU fusion (src/runtime/exec.c, plan_fusions): a BATCHNORM whose output
 * only feeds a relu writes the relu's output itself, and the relu's gradient is applied inside
 * the BATCHNORM_BWD (its ELTWISE_BWD does nothing).
 *
 * Model, a ResNet basic block with a batch norm on its input (x (8,16,16,16): the kernels' omp
 * paths run):  a = relu(bn1(x)); h = bn2(conv(a, w)); y = relu(h + x); loss = sum(y * r).
 * bn1+relu is fused (forward and backward); bn2 is not (its output feeds the add), nor is the
 * relu after the add. At amp O0 (f32), O2 (bf16 x/y, f32 gamma/beta) and O3 (bf16 gamma/beta
 * too), on the FAST backend, asserted:
 *  - the plan makes 1 fusion of each kind and a run takes both (ts_plan_fusions_taken);
 *  - fused vs ts_plan_set_fusion(p, 0): the loss, a, every gradient (x, w, gamma1/2, beta1/2,
 *    gamma/beta bound to caller memory as a parameter store's would be) and the updated running
 *    statistics are bitwise equal (memcmp), over two runs (the second reuses the first's state);
 *  - the sequence of node-end hook events is the same (a data-parallel bucket becomes ready
 *    after the same node either way: the fused-away relu and its gradient still "run");
 *  - a (f32) against relu((x - mean)/sqrt(var + eps)*gamma + beta) computed in double, within
 *    1e-5 absolute (f32 rounding of x*scale + shift, |x*scale| <= ~8: a few 1e-7);
 *  - the REF backend takes no fusion and gives the unfused REF results bitwise. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/runtime.h"
#include "test_util.h"

#define N 8
#define C 16
#define H 16
#define W 16
#define NX (N * C * H * W)
#define NW (C * C * 9)
#define EPS 1e-5f

typedef struct {
  ts_graph *g;
  ts_val x, w, g1, b1, g2, b2, rm1, rv1, rm2, rv2, r;
  ts_val loss, a;
  ts_val gx, gw, gg1, gb1, gg2, gb2;
} model;

static ts_val vec_in(ts_graph *g, const char *nm) { return ts_input(g, nm, TS_F32, ts_shape1(C)); }

static void build(model *m, int level) {
  CHECK_OK(ts_graph_create(&m->g));
  ts_graph *g = m->g;
  ts_graph_set_training(g, 1);
  m->x = ts_input(g, "x", TS_F32, ts_shape4(N, C, H, W));
  m->w = ts_input(g, "w", TS_F32, ts_shape4(C, C, 3, 3));
  m->g1 = vec_in(g, "g1"), m->b1 = vec_in(g, "b1"), m->g2 = vec_in(g, "g2"), m->b2 = vec_in(g, "b2");
  /* running statistics: state (amp keeps it f32) */
  m->rm1 = ts_state_value(g, "rm1", TS_F32, ts_shape1(C), 0), m->rv1 = ts_state_value(g, "rv1", TS_F32, ts_shape1(C), 1);
  m->rm2 = ts_state_value(g, "rm2", TS_F32, ts_shape1(C), 2), m->rv2 = ts_state_value(g, "rv2", TS_F32, ts_shape1(C), 3);
  m->r = ts_input(g, "r", TS_F32, ts_shape4(N, C, H, W));
  ts_val_set_requires_grad(g, m->r, 0);
  ts_val a = ts_relu(g, ts_batchnorm(g, m->x, m->g1, m->b1, m->rm1, m->rv1, 0.1f, EPS));
  ts_val h = ts_batchnorm(g, ts_conv2d(g, a, m->w, TS_NONE, 1, 1, 1, 1, 1, 1, 1), m->g2, m->b2, m->rm2, m->rv2,
                          0.1f, EPS);
  ts_val y = ts_relu(g, ts_add(g, h, m->x));
  ts_val loss = ts_sum(g, ts_mul(g, y, m->r), 15u, 0);
  CHECK_OK(ts_graph_status(g));
  ts_val v[2] = {loss, a};
  if (level) CHECK_OK(ts_graph_amp(g, level, TS_BF16, v, 2));
  m->loss = v[0];
  m->a = v[1];
  CHECK_OK(ts_graph_backward(g, m->loss, 1.0f));
  m->gx = ts_graph_grad(g, m->x), m->gw = ts_graph_grad(g, m->w);
  m->gg1 = ts_graph_grad(g, m->g1), m->gb1 = ts_graph_grad(g, m->b1);
  m->gg2 = ts_graph_grad(g, m->g2), m->gb2 = ts_graph_grad(g, m->b2);
  CHECK(m->gx != TS_NONE && m->gw != TS_NONE && m->gg1 != TS_NONE && m->gb1 != TS_NONE && m->gg2 != TS_NONE &&
        m->gb2 != TS_NONE);
}

typedef struct {
  float loss, a[NX], gx[NX], gw[NW], gv[4][C], rs[4][C]; /* gv: dg1 db1 dg2 db2; rs: rm1 rv1 rm2 rv2 */
  int ends[4096], nends;
  int taken[TS_FUSION_COUNT], planned[TS_FUSION_COUNT];
} result;

static void on_end(const ts_hook_info *e, void *user) {
  result *r = user;
  if (e->event == TS_HOOK_NODE_END && r->nends < 4096) r->ends[r->nends++] = e->node;
}

static float X[NX], Wt[NW], R[NX], G[2][C], B[2][C];

/* Two runs of m (fusion on or off) from the same running statistics; the second's results. */
static void run(model *m, int fusion, result *out) {
  ts_val keep[4] = {m->loss, m->a, m->gx, m->gw};
  ts_plan *p;
  memset(out, 0, sizeof *out);
  CHECK_OK(ts_plan_create(m->g, keep, 4, &p));
  ts_plan_set_fusion(p, fusion);
  for (int k = 0; k < 4; k++) /* running means 0.1, variances 1 */
    for (int c = 0; c < C; c++) out->rs[k][c] = k % 2 ? 1.0f : 0.1f;
  CHECK_OK(ts_plan_bind(p, m->x, X));
  CHECK_OK(ts_plan_bind(p, m->w, Wt));
  CHECK_OK(ts_plan_bind(p, m->r, R));
  CHECK_OK(ts_plan_bind(p, m->g1, G[0]));
  CHECK_OK(ts_plan_bind(p, m->b1, B[0]));
  CHECK_OK(ts_plan_bind(p, m->g2, G[1]));
  CHECK_OK(ts_plan_bind(p, m->b2, B[1]));
  const ts_val rs[4] = {m->rm1, m->rv1, m->rm2, m->rv2}, gv[4] = {m->gg1, m->gb1, m->gg2, m->gb2};
  for (int k = 0; k < 4; k++) CHECK_OK(ts_plan_bind(p, rs[k], out->rs[k]));
  for (int k = 0; k < 4; k++) CHECK_OK(ts_plan_bind(p, gv[k], out->gv[k])); /* as a parameter store's */
  CHECK_OK(ts_plan_run(p, 0));
  CHECK_OK(ts_plan_add_hook(p, on_end, out));
  CHECK_OK(ts_plan_run(p, 1));
  ts_plan_remove_hook(p, on_end, out);
  for (int k = 0; k < TS_FUSION_COUNT; k++) {
    out->planned[k] = ts_plan_num_fusions(p, (ts_fusion)k);
    out->taken[k] = ts_plan_fusions_taken(p, (ts_fusion)k);
  }
  out->loss = *(const float *)ts_plan_data(p, m->loss);
  /* a is f32 at O0, bf16 (remapped through a cast to f32) otherwise: kept either way */
  memcpy(out->a, ts_plan_data(p, m->a), sizeof out->a);
  memcpy(out->gx, ts_plan_data(p, m->gx), sizeof out->gx);
  memcpy(out->gw, ts_plan_data(p, m->gw), sizeof out->gw);
  ts_plan_free(p);
}

static int same(const void *a, const void *b, size_t n) { return !memcmp(a, b, n); }

static void compare(const result *f, const result *u, const char *what) {
  CHECK_MSG(same(&f->loss, &u->loss, sizeof f->loss), "%s: loss %.9g fused vs %.9g", what, f->loss, u->loss);
  int ia = -1;
  for (int i = 0; i < NX && ia < 0; i++)
    if (memcmp(&f->a[i], &u->a[i], sizeof(float))) ia = i;
  CHECK_MSG(ia < 0, "%s: relu(bn1(x)) differs first at [%d]: %a fused vs %a", what, ia, ia < 0 ? 0.0 : (double)f->a[ia],
            ia < 0 ? 0.0 : (double)u->a[ia]);
  CHECK_MSG(same(f->gx, u->gx, sizeof f->gx), "%s: dx differs", what);
  CHECK_MSG(same(f->gw, u->gw, sizeof f->gw), "%s: dw differs", what);
  static const char *gn[4] = {"dgamma1", "dbeta1", "dgamma2", "dbeta2"}, *rn[4] = {"rmean1", "rvar1", "rmean2", "rvar2"};
  for (int k = 0; k < 4; k++) {
    CHECK_MSG(same(f->gv[k], u->gv[k], sizeof f->gv[k]), "%s: %s differs", what, gn[k]);
    CHECK_MSG(same(f->rs[k], u->rs[k], sizeof f->rs[k]), "%s: %s differs", what, rn[k]);
  }
  CHECK_MSG(f->nends == u->nends && same(f->ends, u->ends, sizeof(int) * (size_t)f->nends),
            "%s: node-end hooks differ (%d fused, %d unfused events)", what, f->nends, u->nends);
}

int main(void) {
  static result fu, un;
  ts_test_fill(X, NX, 1, -2, 2);
  ts_test_fill(Wt, NW, 2, -0.3f, 0.3f);
  ts_test_fill(R, NX, 3, -1, 1);
  for (int k = 0; k < 2; k++) {
    ts_test_fill(G[k], C, 4 + (uint64_t)k, 0.5f, 1.5f);
    ts_test_fill(B[k], C, 6 + (uint64_t)k, -0.5f, 0.5f);
  }
  const int levels[3] = {0, 2, 3};
  for (int li = 0; li < 3; li++) {
    char what[32];
    snprintf(what, sizeof what, "O%d", levels[li]);
    model m;
    build(&m, levels[li]);
    ts_backend_set(TS_BACKEND_FAST);
    run(&m, 1, &fu);
    run(&m, 0, &un);
    printf("%s: planned %d bn+relu, %d bn+relu bwd; taken %d, %d; loss %.6g\n", what,
           fu.planned[TS_FUSION_BN_RELU], fu.planned[TS_FUSION_BN_RELU_BWD], fu.taken[TS_FUSION_BN_RELU],
           fu.taken[TS_FUSION_BN_RELU_BWD], (double)fu.loss);
    CHECK_MSG(fu.planned[TS_FUSION_BN_RELU] == 1 && fu.planned[TS_FUSION_BN_RELU_BWD] == 1,
              "%s: planned %d/%d fusions, expected 1/1 (bn1+relu only)", what, fu.planned[TS_FUSION_BN_RELU],
              fu.planned[TS_FUSION_BN_RELU_BWD]);
    CHECK_MSG(fu.taken[TS_FUSION_BN_RELU] == 1 && fu.taken[TS_FUSION_BN_RELU_BWD] == 1, "%s: taken %d/%d", what,
              fu.taken[TS_FUSION_BN_RELU], fu.taken[TS_FUSION_BN_RELU_BWD]);
    CHECK_MSG(un.planned[TS_FUSION_BN_RELU] == 0 && un.taken[TS_FUSION_BN_RELU] == 0 &&
                  un.taken[TS_FUSION_BN_RELU_BWD] == 0,
              "%s: fusion off still fused", what);
    CHECK(isfinite(fu.loss));
    compare(&fu, &un, what);
    if (levels[li] == 0) { /* a against a double reference with the batch statistics */
      double worst = 0;
      for (int c = 0; c < C; c++) {
        double s = 0, q = 0;
        for (int n = 0; n < N; n++)
          for (int j = 0; j < H * W; j++) s += X[(n * C + c) * H * W + j];
        const double mean = s / (N * H * W);
        for (int n = 0; n < N; n++)
          for (int j = 0; j < H * W; j++) q += pow(X[(n * C + c) * H * W + j] - mean, 2);
        const double rstd = 1.0 / sqrt(q / (N * H * W) + EPS);
        for (int n = 0; n < N; n++)
          for (int j = 0; j < H * W; j++) {
            const int i = (n * C + c) * H * W + j;
            double v = (X[i] - mean) * rstd * G[0][c] + B[0][c];
            v = v > 0 ? v : 0;
            worst = fmax(worst, fabs(fu.a[i] - v));
          }
      }
      printf("O0: relu(bn(x)) worst absolute error %.2e against double\n", worst);
      CHECK_MSG(worst < 1e-5, "fused relu(bn(x)) off the double reference: %.3e", worst);
    }
    /* REF backend: no fusion taken, unfused results */
    ts_backend_set(TS_BACKEND_REF);
    run(&m, 1, &fu);
    run(&m, 0, &un);
    CHECK_MSG(fu.taken[TS_FUSION_BN_RELU] == 0 && fu.taken[TS_FUSION_BN_RELU_BWD] == 0, "%s REF: fusion taken",
              what);
    snprintf(what, sizeof what, "O%d REF", levels[li]);
    compare(&fu, &un, what);
    ts_backend_set(TS_BACKEND_FAST);
    ts_graph_free(m.g);
  }
  return ts_test_finish("fusion_bn_relu");
}
