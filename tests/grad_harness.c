/* Shared harness of the gradient tests: see grad_harness.h. */
#include "grad_harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/io.h"

static int gh_ncases;

int gh_cases(void) { return gh_ncases; }

ts_val gh_weighted_loss(ts_graph *g, ts_val y, ts_val *r) {
  const ts_shape ys = ts_val_shape(g, y);
  const int64_t ny = ts_shape_numel(&ys);
  *r = ts_input(g, "gh_r", TS_F32, ts_shape2(1, ny));
  ts_val_set_requires_grad(g, *r, 0);
  return ts_dense(g, ts_reshape(g, y, ts_shape2(1, ny)), *r, TS_NONE);
}

static uint32_t gh_all_axes(int ndim) { return ndim >= 32 ? 0xffffffffu : (1u << ndim) - 1u; }

static double gh_dot(const float *y, const float *r, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)y[i] * (double)r[i];
  return s;
}

/* sum(y * r) of the double forward at xd */
static double gh_fwd_loss(const gh_opts *o, double *const *xd, double *yd, const float *r,
                          size_t ny) {
  o->fwd(xd, yd, o->ctx);
  double s = 0;
  for (size_t t = 0; t < ny; t++) s += yd[t] * r[t];
  return s;
}

/* Central differences of the graph itself on plan p (REF), in float: fd[i] at element idx[i] of
 * input memory xv (bound to the plan); a failed run gives NaN. */
static void gh_graph_fd(ts_plan *p, ts_val y, const float *r, size_t ny, float *xv,
                        const size_t *idx, size_t ns, double eps, uint64_t step, float *fd) {
  for (size_t i = 0; i < ns; i++) {
    const size_t j = idx[i];
    const float keepv = xv[j];
    const double hh = eps * (fabs(keepv) > 1 ? fabs(keepv) : 1);
    const float xp = (float)(keepv + hh), xm = (float)(keepv - hh);
    double lp = NAN, lm = NAN;
    xv[j] = xp;
    if (ts_plan_run(p, step) == TS_OK) lp = gh_dot(ts_plan_data(p, y), r, ny);
    xv[j] = xm;
    if (ts_plan_run(p, step) == TS_OK) lm = gh_dot(ts_plan_data(p, y), r, ny);
    xv[j] = keepv;
    fd[i] = (float)((lp - lm) / ((double)xp - (double)xm));
  }
}

void gh_check(const char *what, ts_graph *g, ts_val y, int nin, const ts_val *x, const gh_opts *o) {
  static const gh_opts defaults;
  if (!o) o = &defaults;
  const double eps = o->eps > 0 ? o->eps : 1e-3;
  const double tol = o->tol > 0 ? o->tol : 1e-5;
  const double gatol = o->grad_atol > 0 ? o->grad_atol : tol;
  const double grtol = o->grad_rtol > 0 ? o->grad_rtol : gatol;
  CHECK_MSG(ts_graph_status(g) == TS_OK, "%s: %s", what, ts_graph_error(g));
  if (ts_graph_status(g) != TS_OK) return;
  if (nin < 0 || nin > GH_MAX_IN) {
    CHECK_MSG(0, "%s: %d inputs, at most %d", what, nin, GH_MAX_IN);
    return;
  }
  gh_ncases++;
  const uint64_t cs = (uint64_t)gh_ncases;
  const ts_shape ys = ts_val_shape(g, y);
  const size_t ny = (size_t)ts_shape_numel(&ys);
  ts_val r, loss = gh_weighted_loss(g, y, &r);
  int want[GH_MAX_IN];
  for (int k = 0; k < nin; k++) {
    want[k] = o->want ? o->want[k] != 0 : ts_val_dtype(g, x[k]) == TS_F32;
    if (!want[k]) ts_val_set_requires_grad(g, x[k], 0);
  }
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  if (ts_graph_status(g)) {
    fprintf(stderr, "%s: %s\n", what, ts_graph_error(g));
    return;
  }

  /* inputs, their gradients and the elements sampled for finite differences */
  ts_val gx[GH_MAX_IN];
  void *xv[GH_MAX_IN] = {0};
  double *xd[GH_MAX_IN] = {0};
  float *fd[GH_MAX_IN] = {0}, *gref[GH_MAX_IN] = {0};
  size_t *idx[GH_MAX_IN] = {0}, nx[GH_MAX_IN], ns[GH_MAX_IN];
  float *rv = malloc(ny * sizeof(float)), *yref = NULL;
  double *yd = NULL, lref = 0;
  ts_test_fill(rv, ny, 999 + cs, -1, 1);
  for (int k = 0; k < nin; k++) {
    const ts_shape s = ts_val_shape(g, x[k]);
    const ts_dtype dt = ts_val_dtype(g, x[k]);
    const void *src = o->data ? o->data[k] : NULL;
    nx[k] = (size_t)ts_shape_numel(&s);
    if (!(dt == TS_F32 || ((dt == TS_I32 || dt == TS_I64) && src))) {
      CHECK_MSG(0, "%s: input %d (%s) needs f32, or i32/i64 with data", what, k, ts_dtype_name(dt));
      goto out;
    }
    xv[k] = malloc(nx[k] * ts_dtype_size(dt));
    if (src) {
      memcpy(xv[k], src, nx[k] * ts_dtype_size(dt));
    } else if (o->distinct) { /* j -> j*7919 mod n permutes 0..n-1: 7919 is prime */
      float *f = xv[k];
      for (size_t j = 0; j < nx[k]; j++)
        f[j] = -1.f + 2.f * (float)((j * 7919 + (size_t)k) % nx[k]) / (float)nx[k];
    } else {
      ts_test_fill(xv[k], nx[k], 1000 + 17 * cs + (uint64_t)k, -1, 1);
    }
    if (o->fwd) {
      xd[k] = malloc(nx[k] * sizeof(double));
      for (size_t j = 0; j < nx[k]; j++)
        xd[k][j] = dt == TS_F32   ? (double)((const float *)xv[k])[j]
                   : dt == TS_I32 ? (double)((const int32_t *)xv[k])[j]
                                  : (double)((const int64_t *)xv[k])[j];
    }
    gx[k] = ts_graph_grad(g, x[k]);
    CHECK_MSG((gx[k] != TS_NONE) == (want[k] != 0), "%s: input %d gradient presence", what, k);
    if (gx[k] == TS_NONE) want[k] = 0;
    ns[k] = nx[k] > GH_SAMPLES ? GH_SAMPLES : nx[k];
    idx[k] = malloc(ns[k] * sizeof(size_t));
    for (size_t i = 0; i < ns[k]; i++) idx[k][i] = i * nx[k] / ns[k];
    fd[k] = calloc(ns[k], sizeof(float));
  }

  /* reference: finite differences and y of the double forward */
  if (o->fwd) {
    yd = malloc(ny * sizeof(double));
    for (int k = 0; k < nin; k++)
      for (size_t i = 0; i < ns[k] && want[k]; i++) {
        const size_t j = idx[k][i];
        const double s = xd[k][j];
        xd[k][j] = s + eps;
        const double lp = gh_fwd_loss(o, xd, yd, rv, ny);
        xd[k][j] = s - eps;
        const double lm = gh_fwd_loss(o, xd, yd, rv, ny);
        xd[k][j] = s;
        fd[k][i] = (float)((lp - lm) / (2 * eps));
      }
    lref = gh_fwd_loss(o, xd, yd, rv, ny);
    yref = malloc(ny * sizeof(float));
    for (size_t i = 0; i < ny; i++) yref[i] = (float)yd[i];
  }

  for (int be = 0; be < 2; be++) {
    const char *bn = be ? "fast" : "ref";
    ts_backend_set(be ? TS_BACKEND_FAST : TS_BACKEND_REF);
    ts_val keep[GH_MAX_IN + 2];
    int nk = 0;
    keep[nk++] = loss;
    keep[nk++] = y;
    for (int k = 0; k < nin; k++)
      if (gx[k] != TS_NONE) keep[nk++] = gx[k];
    ts_plan *p = NULL;
    CHECK_OK(ts_plan_create(g, keep, nk, &p));
    if (!p) continue;
    for (int k = 0; k < nin; k++) CHECK_OK(ts_plan_bind(p, x[k], xv[k]));
    CHECK_OK(ts_plan_bind(p, r, rv));
    int rc = ts_plan_run(p, o->step);
    CHECK_MSG(rc == TS_OK, "%s: run: %s", what, ts_last_error());
    char w[300];
    if (rc == TS_OK && o->fwd) { /* both backends vs the double forward */
      snprintf(w, sizeof w, "%s [%s] forward", what, bn);
      CHECK_CLOSE((const float *)ts_plan_data(p, y), yref, ny, tol, tol, w);
      if (o->loss_tol > 0) {
        const float lr = (float)lref;
        snprintf(w, sizeof w, "%s [%s] loss", what, bn);
        CHECK_CLOSE((const float *)ts_plan_data(p, loss), &lr, 1, o->loss_tol, o->loss_tol, w);
      }
      for (int k = 0; k < nin; k++) {
        if (!want[k]) continue;
        const float *gd = ts_plan_data(p, gx[k]);
        float *gs = malloc(ns[k] * sizeof(float));
        for (size_t i = 0; i < ns[k]; i++) gs[i] = gd[idx[k][i]];
        snprintf(w, sizeof w, "%s [%s] d input %d vs finite differences", what, bn, k);
        CHECK_CLOSE(gs, fd[k], ns[k], gatol, grtol, w);
        free(gs);
      }
    } else if (rc == TS_OK && !be) { /* REF vs finite differences of the graph itself */
      yref = malloc(ny * sizeof(float));
      memcpy(yref, ts_plan_data(p, y), ny * sizeof(float));
      for (int k = 0; k < nin; k++) {
        if (!want[k]) continue;
        gref[k] = malloc(nx[k] * sizeof(float));
        memcpy(gref[k], ts_plan_data(p, gx[k]), nx[k] * sizeof(float));
      }
      for (int k = 0; k < nin; k++) {
        if (!want[k]) continue;
        gh_graph_fd(p, y, rv, ny, xv[k], idx[k], ns[k], eps, o->step, fd[k]);
        float *gs = malloc(ns[k] * sizeof(float));
        for (size_t i = 0; i < ns[k]; i++) gs[i] = gref[k][idx[k][i]];
        snprintf(w, sizeof w, "%s [ref] d input %d vs finite differences of the graph", what, k);
        CHECK_CLOSE(gs, fd[k], ns[k], gatol, grtol, w);
        free(gs);
      }
    } else if (rc == TS_OK && yref) { /* FAST vs REF */
      snprintf(w, sizeof w, "%s [fast] forward vs ref", what);
      CHECK_CLOSE((const float *)ts_plan_data(p, y), yref, ny, GH_FAST_ATOL, GH_FAST_RTOL, w);
      for (int k = 0; k < nin; k++) {
        if (!want[k] || !gref[k]) continue;
        snprintf(w, sizeof w, "%s [fast] d input %d vs ref", what, k);
        CHECK_CLOSE((const float *)ts_plan_data(p, gx[k]), gref[k], nx[k], GH_FAST_ATOL,
                    GH_FAST_RTOL, w);
      }
    }
    ts_plan_free(p);
  }
out:
  ts_backend_set(TS_BACKEND_FAST);
  for (int k = 0; k < nin; k++) free(xv[k]), free(xd[k]), free(fd[k]), free(gref[k]), free(idx[k]);
  free(rv), free(yd), free(yref);
}

/* ---------------------------------------------------------------- PyTorch fixtures */

static int gh_fixture_no_grad(const ts_st_file *f, int k) {
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

void gh_fixture(const char *name, int nin, gh_build_fn build, int training, double atol,
                double rtol, int aux_stats) {
  char path[512], what[256];
  snprintf(path, sizeof path, "%s/op_%s.safetensors", TS_FIXTURE_DIR, name);
  if (nin < 0 || nin > GH_MAX_IN) {
    CHECK_MSG(0, "fixture %s: %d inputs, at most %d", name, nin, GH_MAX_IN);
    return;
  }
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
    ts_tensor tin[GH_MAX_IN];
    ts_val in[GH_MAX_IN];
    void *copy[GH_MAX_IN];
    for (int k = 0; k < nin; k++) {
      char key[16];
      snprintf(key, sizeof key, "in%d", k);
      CHECK_OK(ts_st_find(f, key, &tin[k]));
      in[k] = ts_input(g, key, tin[k].dtype, tin[k].shape);
      if (gh_fixture_no_grad(f, k) || !ts_dtype_is_float(tin[k].dtype))
        ts_val_set_requires_grad(g, in[k], 0);
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
    ts_val loss = out0.shape.ndim ? ts_sum(g, prod, gh_all_axes(out0.shape.ndim), 0) : prod;
    CHECK_MSG(ts_graph_status(g) == TS_OK, "%s: %s", what, ts_graph_error(g));
    if (ts_graph_status(g)) goto next;
    {
      ts_shape ys = ts_val_shape(g, y);
      CHECK_MSG(ts_shape_equal(&ys, &out0.shape), "%s: output shape differs from torch", what);
    }
    CHECK_OK(ts_graph_backward(g, loss, 1.0f));
    ts_val keep[GH_MAX_IN + 1], gv[GH_MAX_IN];
    int nk = 0;
    keep[nk++] = y;
    for (int k = 0; k < nin; k++) {
      char key[24];
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
        char key[24];
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
        CHECK_CLOSE((const float *)copy[3], (const float *)rm.data, (size_t)ts_tensor_numel(&rm),
                    atol, rtol, m);
        snprintf(m, sizeof m, "%s: running_var", what);
        CHECK_CLOSE((const float *)copy[4], (const float *)rv.data, (size_t)ts_tensor_numel(&rv),
                    atol, rtol, m);
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

/* ---------------------------------------------------------------- bad input */

void gh_check_graph_error(const char *file, int line, ts_graph *g, ts_val v, int code,
                          const char *n1, const char *n2, const char *what) {
  const char *m = ts_graph_error(g);
  if (!m) m = "";
  const int st = ts_graph_status(g);
  const char *w = what ? what : "graph error", *n1s = n1 ? n1 : "", *n2s = n2 ? n2 : "";
  const int ok[3] = {v == TS_NONE, st == code, (!n1 || strstr(m, n1)) && (!n2 || strstr(m, n2))};
  ts_test_checks += 3;
  if (!ok[0])
    fprintf(stderr, "%s:%d: CHECK failed: %s: result is not TS_NONE\n", file, line, w);
  if (!ok[1])
    fprintf(stderr, "%s:%d: CHECK failed: %s: status %d (%s), wanted %d (%s)\n", file, line, w,
            st, ts_strerror(st), code, ts_strerror(code));
  if (!ok[2])
    fprintf(stderr, "%s:%d: CHECK failed: %s: message '%s' lacks '%s'/'%s'\n", file, line, w, m,
            n1s, n2s);
  ts_test_failures += !ok[0] + !ok[1] + !ok[2];
}
