/* Shared helpers for tests/graph/test_grad_*.c (header-only; each test is one executable).
 *
 * gc_check():  builds loss = sum(y * w) with a fixed random w on top of a forward graph, runs
 *   forward + backward through the planner/executor, and compares d loss / d leaf for every
 *   listed float leaf with central finite differences of the same forward (the loss summed in
 *   double from y), on both backends (FAST gradients are also compared with REF).
 * fx_check():  runs one PyTorch fixture (tests/fixtures/op_<name>.safetensors, docs/fixtures.md)
 *   through a graph built by a callback: forward output vs out0 and every grad_in<k> vs the
 *   gradient of sum(out0 * dout0), on both backends. */
#ifndef TS_TEST_GRAD_CHECK_H
#define TS_TEST_GRAD_CHECK_H

#include <stdlib.h>
#include <string.h>

#include "tessera/io.h"
#include "tessera/tessera.h"
#include "test_util.h"

#define GC_MAX 8

typedef struct {
  ts_val v;
  void *data; /* bound memory (f32 for checked leaves) */
  int check;  /* 1: compare its gradient with finite differences */
} gc_leaf;

static uint32_t gc_all_axes(int ndim) { return ndim >= 32 ? 0xffffffffu : (1u << ndim) - 1u; }

/* loss = sum(y * w); w is bound to wdata (numel of y). Returns TS_NONE on a graph error. */
static ts_val gc_weighted_loss(ts_graph *g, ts_val y, ts_val *wout) {
  ts_shape s = ts_val_shape(g, y);
  ts_val w = ts_input(g, "gc_w", TS_F32, s);
  ts_val_set_requires_grad(g, w, 0);
  *wout = w;
  ts_val p = ts_mul(g, y, w);
  return s.ndim ? ts_sum(g, p, gc_all_axes(s.ndim), 0) : p;
}

static double gc_dot(const float *y, const float *w, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)y[i] * (double)w[i];
  return s;
}

/* g: forward graph with output y (float). Leaves: every leaf of g except w must be listed.
 * h: finite-difference step (relative to max(1,|x|)); tolerance |g - fd| <= atol + rtol*|fd|. */
static void gc_check(ts_graph *g, ts_val y, gc_leaf *leaves, int n, double h, double atol,
                     double rtol, const char *what) {
  ts_val w;
  ts_val loss = gc_weighted_loss(g, y, &w);
  CHECK_MSG(ts_graph_status(g) == TS_OK, "%s: graph: %s", what, ts_graph_error(g));
  if (ts_graph_status(g)) return;
  for (int k = 0; k < n; k++)
    if (!leaves[k].check) ts_val_set_requires_grad(g, leaves[k].v, 0);
  int rc = ts_graph_backward(g, loss, 1.0f);
  CHECK_MSG(rc == TS_OK, "%s: backward: %s", what, ts_graph_error(g));
  if (rc) return;
  ts_val keep[GC_MAX + 2];
  int nk = 0;
  keep[nk++] = y;
  keep[nk++] = loss;
  ts_val grads[GC_MAX];
  for (int k = 0; k < n; k++) {
    grads[k] = leaves[k].check ? ts_graph_grad(g, leaves[k].v) : TS_NONE;
    if (leaves[k].check) {
      CHECK_MSG(grads[k] != TS_NONE, "%s: leaf %d has no gradient", what, k);
      if (grads[k] == TS_NONE) return;
      keep[nk++] = grads[k];
    }
  }
  ts_plan *p;
  rc = ts_plan_create(g, keep, nk, &p);
  CHECK_MSG(rc == TS_OK, "%s: plan: %s", what, ts_last_error());
  if (rc) return;
  const ts_shape ysh = ts_val_shape(g, y);
  const int64_t ny = ts_shape_numel(&ysh);
  float *wd = malloc(sizeof(float) * (size_t)ny);
  ts_test_fill(wd, (size_t)ny, 4242, -1, 1);
  CHECK_OK(ts_plan_bind(p, w, wd));
  for (int k = 0; k < n; k++) CHECK_OK(ts_plan_bind(p, leaves[k].v, leaves[k].data));
  /* analytic gradients, FAST and REF */
  float *ga[GC_MAX] = {0}, *gr[GC_MAX] = {0};
  for (int b = 0; b < 2; b++) {
    ts_backend_set(b ? TS_BACKEND_REF : TS_BACKEND_FAST);
    rc = ts_plan_run(p, 0);
    CHECK_MSG(rc == TS_OK, "%s: run: %s", what, ts_last_error());
    if (rc) goto out;
    for (int k = 0; k < n; k++) {
      if (!leaves[k].check) continue;
      ts_shape s = ts_val_shape(g, leaves[k].v);
      size_t nb = sizeof(float) * (size_t)ts_shape_numel(&s);
      float **dst = b ? &gr[k] : &ga[k];
      *dst = malloc(nb);
      memcpy(*dst, ts_plan_data(p, grads[k]), nb);
    }
  }
  for (int k = 0; k < n; k++) {
    if (!leaves[k].check) continue;
    ts_shape s = ts_val_shape(g, leaves[k].v);
    const int64_t nx = ts_shape_numel(&s);
    char m[256];
    snprintf(m, sizeof m, "%s: leaf %d gradient FAST vs REF", what, k);
    CHECK_CLOSE(ga[k], gr[k], (size_t)nx, 1e-4, 1e-3, m);
    /* finite differences (REF backend) */
    float *x = leaves[k].data;
    int64_t step = nx > 48 ? nx / 41 : 1;
    int bad = 0;
    for (int64_t i = 0; i < nx; i += step) {
      float keepv = x[i];
      double hh = h * (fabs(keepv) > 1 ? fabs(keepv) : 1);
      float xp = (float)(keepv + hh), xm = (float)(keepv - hh);
      x[i] = xp;
      ts_plan_run(p, 0);
      double lp = gc_dot(ts_plan_data(p, y), wd, ny);
      x[i] = xm;
      ts_plan_run(p, 0);
      double lm = gc_dot(ts_plan_data(p, y), wd, ny);
      x[i] = keepv;
      double fd = (lp - lm) / ((double)xp - (double)xm);
      if (!(fabs(fd - gr[k][i]) <= atol + rtol * fabs(fd))) {
        if (bad < 3)
          fprintf(stderr, "%s: leaf %d [%lld]: gradient %.7g vs finite difference %.7g\n", what, k,
                  (long long)i, gr[k][i], fd);
        bad++;
      }
    }
    CHECK_MSG(bad == 0, "%s: leaf %d: %d elements differ from finite differences", what, k, bad);
  }
out:
  ts_backend_set(TS_BACKEND_FAST);
  for (int k = 0; k < n; k++) free(ga[k]), free(gr[k]);
  free(wd);
  ts_plan_free(p);
}

/* ---------------------------------------------------------------- PyTorch fixtures */

typedef ts_val (*fx_build_fn)(ts_graph *g, const ts_val *in, int nin);

static int fx_no_grad(const ts_st_file *f, int k) {
  const char *m = ts_st_meta(f, "no_grad_inputs");
  char key[16];
  snprintf(key, sizeof key, "%d", k);
  if (!m) return 0;
  /* compact JSON list of small ints: "[3,4]" */
  for (const char *s = m; *s; s++)
    if ((s == m || s[-1] == '[' || s[-1] == ',') && strncmp(s, key, strlen(key)) == 0 &&
        (s[strlen(key)] == ',' || s[strlen(key)] == ']'))
      return 1;
  return 0;
}

/* Runs fixture op_<name> with `nin` inputs. training: the graph's training flag. aux_stats: for
 * batch-norm training fixtures, also compares the updated running stats (inputs 3 and 4). */
static void fx_check(const char *name, int nin, fx_build_fn build, int training, double atol,
                     double rtol, int aux_stats) {
  char path[512], what[256];
  snprintf(path, sizeof path, "%s/op_%s.safetensors", TS_FIXTURE_DIR, name);
  ts_st_file *f;
  int rc = ts_st_open(path, &f);
  CHECK_MSG(rc == TS_OK, "fixture %s: %s", name, ts_last_error());
  if (rc) return;
  for (int b = 0; b < 2; b++) {
    snprintf(what, sizeof what, "fixture %s (%s)", name, b ? "REF" : "FAST");
    ts_backend_set(b ? TS_BACKEND_REF : TS_BACKEND_FAST);
    ts_graph *g;
    ts_graph_create(&g);
    ts_graph_set_training(g, training);
    ts_tensor tin[GC_MAX];
    ts_val in[GC_MAX];
    void *copy[GC_MAX];
    for (int k = 0; k < nin; k++) {
      char key[16];
      snprintf(key, sizeof key, "in%d", k);
      CHECK_OK(ts_st_find(f, key, &tin[k]));
      in[k] = ts_input(g, key, tin[k].dtype, tin[k].shape);
      if (fx_no_grad(f, k) || !ts_dtype_is_float(tin[k].dtype)) ts_val_set_requires_grad(g, in[k], 0);
      copy[k] = malloc(ts_tensor_nbytes(&tin[k]) + 1); /* running stats are updated in place */
      memcpy(copy[k], tin[k].data, ts_tensor_nbytes(&tin[k]));
    }
    ts_val y = build(g, in, nin);
    ts_tensor out0, dout0;
    CHECK_OK(ts_st_find(f, "out0", &out0));
    CHECK_OK(ts_st_find(f, "dout0", &dout0));
    ts_val dout = ts_input(g, "dout0", TS_F32, out0.shape);
    ts_val_set_requires_grad(g, dout, 0);
    ts_val prod = ts_mul(g, y, dout);
    ts_val loss = out0.shape.ndim ? ts_sum(g, prod, gc_all_axes(out0.shape.ndim), 0) : prod;
    CHECK_MSG(ts_graph_status(g) == TS_OK, "%s: %s", what, ts_graph_error(g));
    if (ts_graph_status(g)) goto next;
    {
      ts_shape ys = ts_val_shape(g, y);
      CHECK_MSG(ts_shape_equal(&ys, &out0.shape), "%s: output shape differs from torch", what);
    }
    CHECK_OK(ts_graph_backward(g, loss, 1.0f));
    ts_val keep[GC_MAX + 1], gv[GC_MAX];
    int nk = 0;
    keep[nk++] = y;
    for (int k = 0; k < nin; k++) {
      char key[16];
      snprintf(key, sizeof key, "grad_in%d", k);
      gv[k] = ts_st_index(f, key) >= 0 ? ts_graph_grad(g, in[k]) : TS_NONE;
      if (ts_st_index(f, key) >= 0) {
        CHECK_MSG(gv[k] != TS_NONE, "%s: no gradient for input %d", what, k);
        if (gv[k] != TS_NONE) keep[nk++] = gv[k];
      }
    }
    ts_plan *p;
    rc = ts_plan_create(g, keep, nk, &p);
    CHECK_MSG(rc == TS_OK, "%s: plan: %s", what, ts_last_error());
    if (rc) goto next;
    for (int k = 0; k < nin; k++) CHECK_OK(ts_plan_bind(p, in[k], copy[k]));
    CHECK_OK(ts_plan_bind(p, dout, dout0.data));
    rc = ts_plan_run(p, 0);
    CHECK_MSG(rc == TS_OK, "%s: run: %s", what, ts_last_error());
    if (rc == TS_OK) {
      char m[300];
      snprintf(m, sizeof m, "%s: out0", what);
      CHECK_CLOSE((const float *)ts_plan_data(p, y), (const float *)out0.data,
                  (size_t)ts_tensor_numel(&out0), atol, rtol, m);
      for (int k = 0; k < nin; k++) {
        if (gv[k] == TS_NONE) continue;
        char key[16];
        ts_tensor gt;
        snprintf(key, sizeof key, "grad_in%d", k);
        ts_st_find(f, key, &gt);
        snprintf(m, sizeof m, "%s: grad_in%d", what, k);
        CHECK_CLOSE((const float *)ts_plan_data(p, gv[k]), (const float *)gt.data,
                    (size_t)ts_tensor_numel(&gt), atol, rtol, m);
      }
      if (aux_stats) {
        ts_tensor rm, rv;
        CHECK_OK(ts_st_find(f, "aux.running_mean", &rm));
        CHECK_OK(ts_st_find(f, "aux.running_var", &rv));
        snprintf(m, sizeof m, "%s: running_mean", what);
        CHECK_CLOSE((const float *)copy[3], (const float *)rm.data, (size_t)ts_tensor_numel(&rm), atol, rtol, m);
        snprintf(m, sizeof m, "%s: running_var", what);
        CHECK_CLOSE((const float *)copy[4], (const float *)rv.data, (size_t)ts_tensor_numel(&rv), atol, rtol, m);
      }
    }
    ts_plan_free(p);
  next:
    for (int k = 0; k < nin; k++) free(copy[k]);
    ts_graph_free(g);
  }
  ts_backend_set(TS_BACKEND_FAST);
  ts_st_close(f);
}

/* Expects the graph's sticky error: status `code` and a message containing every needle. */
static void expect_error(ts_graph *g, ts_val v, int code, const char *n1, const char *n2,
                         const char *what) {
  const char *m = ts_graph_error(g);
  CHECK_MSG(v == TS_NONE && ts_graph_status(g) == code, "%s: expected status %d, got %d (%s)", what,
            code, ts_graph_status(g), m);
  CHECK_MSG((!n1 || strstr(m, n1)) && (!n2 || strstr(m, n2)), "%s: message '%s' lacks '%s'/'%s'",
            what, m, n1 ? n1 : "", n2 ? n2 : "");
}

#endif
