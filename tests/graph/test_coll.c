/* Collectives as graph ops (src/graph/op_coll.c, src/runtime/run_coll.c), run through the
 * planner and executor on this job's ranks: ctest's test_coll (1 process), test_coll_np2 and
 * test_coll_np4 (mpirun).
 *
 * Every rank's input is a deterministic function of (world rank, index), so each rank computes
 * the reference for its own group from all members' inputs. Per op, dims, reduce op and dtype:
 *   forward: y against the reference, exactly (integer-valued floats);
 *   backward: loss = sum(w_r * y) with a rank-dependent w_r, ts_graph_backward, and dx against
 *   the adjoint computed locally from the definition (dx_q[i] = sum over receivers r and output
 *   elements j that x_q[i] feeds, of coef * w_r[j]), exactly; the backward uses the expected op.
 * Groups: no communicator with g = 1; the world communicator (slot 0); with 4 ranks also the
 * ts_comm_grid_axis groups of a (2,2) grid (slots 1 and 2), and a graph using both at once.
 * Composed: a Megatron-style MLP (column-parallel dense on rank_slice'd rows of w1, relu,
 * row-parallel dense on rank_slice'd columns of w2, allreduce) and its sequence-parallel form
 * (allgather of row-sharded x in front, reduce_scatter behind) against the single-process
 * dense -> relu -> dense on the same full weights, within 1e-5.
 * Errors: bad dims, indivisible sizes, equal alltoall dims, bad slot / group size / reduce op /
 * dtype, gradient of max/min, missing communicator, group-size mismatch: status and message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/tessera.h"
#include "grad_harness.h"
#include "test_util.h"

typedef struct {
  const char *name;
  ts_comm *c; /* NULL: g must be 1, no communicator in the slot */
  int slot;
  int g, q;         /* group size, this rank's rank in the group */
  int members[16];  /* world ranks of the group, in group order */
} grp;

enum { K_ALLREDUCE, K_ALLGATHER, K_REDUCE_SCATTER, K_ALLTOALL, K_RANK_SLICE, K_HALO };
static const char *kname[] = {"allreduce", "allgather", "reduce_scatter", "alltoall", "rank_slice", "halo"};
static const char *rname[] = {"sum", "mean", "max", "min"};

typedef struct {
  int k;
  int a; /* ALLREDUCE: reduce op; others: dim (split dim for ALLTOALL) */
  int b; /* REDUCE_SCATTER: reduce op; ALLTOALL: concat dim; HALO: lo */
  int c; /* HALO: hi */
} opspec;

static int g_wrank, g_cases, g_verbose;

static float xval(int wr, int64_t i) { return (float)((wr * 7 + i * 5 + 3) % 23 - 11); }
static float wval(int wr, int64_t i) { return (float)((wr * 5 + i * 3 + 1) % 19 - 9); }

static void unravel(int64_t f, const ts_shape *s, int64_t *idx) {
  for (int d = s->ndim - 1; d >= 0; d--) {
    idx[d] = f % s->dims[d];
    f /= s->dims[d];
  }
}
static int64_t ravel(const int64_t *idx, const ts_shape *s) {
  int64_t f = 0;
  for (int d = 0; d < s->ndim; d++) f = f * s->dims[d] + idx[d];
  return f;
}

static int norm_dim(int d, int nd) { return d < 0 ? d + nd : d; }

static ts_shape out_shape(const opspec *sp, ts_shape xs, int g) {
  ts_shape y = xs;
  switch (sp->k) {
    case K_ALLGATHER: y.dims[norm_dim(sp->a, xs.ndim)] *= g; break;
    case K_REDUCE_SCATTER:
    case K_RANK_SLICE: y.dims[norm_dim(sp->a, xs.ndim)] /= g; break;
    case K_ALLTOALL:
      y.dims[norm_dim(sp->a, xs.ndim)] /= g;
      y.dims[norm_dim(sp->b, xs.ndim)] *= g;
      break;
    case K_HALO: y.dims[norm_dim(sp->a, xs.ndim)] += sp->b + sp->c; break;
    default: break;
  }
  return y;
}

/* The inputs that output element j of group member q is made of: member ks[n]'s element is[n].
 * Returns their number. */
static int contrib(const opspec *sp, int g, int q, const ts_shape *xs, const ts_shape *ys, int64_t j,
                   int *ks, int64_t *is) {
  int64_t idx[TS_MAX_DIMS];
  unravel(j, ys, idx);
  const int nd = xs->ndim, d = sp->k == K_ALLREDUCE ? 0 : norm_dim(sp->a, nd);
  switch (sp->k) {
    case K_ALLREDUCE:
      for (int k = 0; k < g; k++) ks[k] = k, is[k] = j;
      return g;
    case K_ALLGATHER: {
      const int64_t L = xs->dims[d];
      ks[0] = (int)(idx[d] / L);
      idx[d] %= L;
      is[0] = ravel(idx, xs);
      return 1;
    }
    case K_REDUCE_SCATTER:
      idx[d] += q * ys->dims[d];
      for (int k = 0; k < g; k++) ks[k] = k, is[k] = ravel(idx, xs);
      return g;
    case K_ALLTOALL: {
      const int c = norm_dim(sp->b, nd);
      ks[0] = (int)(idx[c] / xs->dims[c]);
      idx[c] %= xs->dims[c];
      idx[d] += q * ys->dims[d];
      is[0] = ravel(idx, xs);
      return 1;
    }
    case K_RANK_SLICE:
      idx[d] += q * ys->dims[d];
      ks[0] = q;
      is[0] = ravel(idx, xs);
      return 1;
    case K_HALO: { /* rows [0, lo) from q-1's end, then q's own, then q+1's first hi (none past the ends) */
      const int64_t L = xs->dims[d], t = idx[d];
      int k = t < sp->b ? q - 1 : t < sp->b + L ? q : q + 1;
      if (k < 0 || k >= g) return 0;
      idx[d] = t < sp->b ? L - sp->b + t : t < sp->b + L ? t - sp->b : t - sp->b - L;
      ks[0] = k;
      is[0] = ravel(idx, xs);
      return 1;
    }
  }
  return 0;
}

static int red_of(const opspec *sp) {
  return sp->k == K_ALLREDUCE ? sp->a : sp->k == K_REDUCE_SCATTER ? sp->b : TS_REDUCE_SUM;
}

/* y of member q computed from every member's input. */
static void ref_forward(const opspec *sp, const grp *G, ts_shape xs, ts_shape ys, float *y) {
  const int red = red_of(sp);
  int ks[64];
  int64_t is[64];
  for (int64_t j = 0; j < ts_shape_numel(&ys); j++) {
    int n = contrib(sp, G->g, G->q, &xs, &ys, j, ks, is);
    if (n == 0) { /* nothing feeds it: a halo row past the group's ends */
      y[j] = 0;
      continue;
    }
    float acc = xval(G->members[ks[0]], is[0]);
    for (int t = 1; t < n; t++) {
      float v = xval(G->members[ks[t]], is[t]);
      acc = red == TS_REDUCE_MAX ? fmaxf(acc, v) : red == TS_REDUCE_MIN ? fminf(acc, v) : acc + v;
    }
    y[j] = red == TS_REDUCE_MEAN ? acc / (float)n : acc;
  }
}

/* The adjoint: dx_q[i] = sum over receivers r and their output elements j fed by x_q[i] of
 * coef * w_r[j] (coef 1/g for mean). Exact for these integer values. */
static void ref_adjoint(const opspec *sp, const grp *G, ts_shape xs, ts_shape ys, float *dx) {
  const int red = red_of(sp);
  const int64_t nx = ts_shape_numel(&xs), ny = ts_shape_numel(&ys);
  double *acc = calloc((size_t)nx, sizeof(double));
  int ks[64];
  int64_t is[64];
  for (int r = 0; r < G->g; r++)
    for (int64_t j = 0; j < ny; j++) {
      int n = contrib(sp, G->g, r, &xs, &ys, j, ks, is);
      for (int t = 0; t < n; t++)
        if (ks[t] == G->q) acc[is[t]] += (red == TS_REDUCE_MEAN ? 1.0 / n : 1.0) * wval(G->members[r], j);
    }
  for (int64_t i = 0; i < nx; i++) dx[i] = (float)acc[i];
  free(acc);
}

static void *to_dtype(const float *x, size_t n, ts_dtype dt) {
  void *b = malloc(n * ts_dtype_size(dt) + 1);
  for (size_t i = 0; i < n; i++) {
    if (dt == TS_F32) ((float *)b)[i] = x[i];
    else if (dt == TS_BF16) ((uint16_t *)b)[i] = ts_f32_to_bf16(x[i]);
    else ((uint16_t *)b)[i] = ts_f32_to_f16(x[i]);
  }
  return b;
}
static void from_dtype(const void *b, size_t n, ts_dtype dt, float *x) {
  for (size_t i = 0; i < n; i++)
    x[i] = dt == TS_F32 ? ((const float *)b)[i]
         : dt == TS_BF16 ? ts_bf16_to_f32(((const uint16_t *)b)[i]) : ts_f16_to_f32(((const uint16_t *)b)[i]);
}

static void check_equal(const float *got, const float *want, size_t n, const char *what) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (!(got[i] == want[i]) && bad++ == 0) first = i;
  ts_test_checks++;
  if (bad) {
    ts_test_failures++;
    fprintf(stderr, "rank %d: %s: %zu of %zu differ, first [%zu]: %g, expected %g\n", g_wrank, what, bad, n,
            first, (double)got[first], (double)want[first]);
  }
}

static ts_val build_op(ts_graph *g, const opspec *sp, ts_val x, int slot, int gs) {
  switch (sp->k) {
    case K_ALLREDUCE: return ts_allreduce(g, x, slot, gs, sp->a);
    case K_ALLGATHER: return ts_allgather(g, x, slot, gs, sp->a);
    case K_REDUCE_SCATTER: return ts_reduce_scatter(g, x, slot, gs, sp->a, sp->b);
    case K_ALLTOALL: return ts_alltoall(g, x, slot, gs, sp->a, sp->b);
    case K_HALO: return ts_halo(g, x, slot, gs, sp->a, sp->b, sp->c);
    default: return ts_rank_slice(g, x, slot, gs, sp->a);
  }
}

/* 1 if a backward node of the graph is op `name`. */
static int has_bwd_op(ts_graph *g, const char *name) {
  size_t n = ts_graph_dump(g, NULL, 0);
  char *buf = malloc(n), pat[64];
  ts_graph_dump(g, buf, n);
  snprintf(pat, sizeof pat, " = %s(", name);
  int found = 0;
  for (char *line = strtok(buf, "\n"); line && !found; line = strtok(NULL, "\n"))
    found = strstr(line, pat) && strstr(line, " bwd");
  free(buf);
  return found;
}

static uint32_t all_axes(int nd) { return (1u << nd) - 1u; }

/* Forward and backward of one op on group G, checked against the references. */
static void check_op(const grp *G, const opspec *sp, ts_shape xs, ts_dtype dt) {
  char what[200], sh[64];
  const int red = red_of(sp), diff = red == TS_REDUCE_SUM || red == TS_REDUCE_MEAN;
  snprintf(what, sizeof what, "%s %s %s(a=%d,b=%d,c=%d) x%s %s", G->name, kname[sp->k],
           sp->k == K_ALLREDUCE || sp->k == K_REDUCE_SCATTER ? rname[red] : "", sp->a, sp->b, sp->c,
           ts_shape_str(&xs, sh, sizeof sh), ts_dtype_name(dt));
  const ts_shape ys = out_shape(sp, xs, G->g);
  const size_t nx = (size_t)ts_shape_numel(&xs), ny = (size_t)ts_shape_numel(&ys);
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", dt, xs);
  ts_val y = build_op(g, sp, x, G->slot, G->g);
  ts_shape got = ts_val_shape(g, y);
  CHECK_MSG(ts_graph_status(g) == TS_OK && ts_shape_equal(&got, &ys), "%s: %s", what, ts_graph_error(g));
  ts_val w = ts_input(g, "w", TS_F32, ys);
  ts_val_set_requires_grad(g, w, 0);
  ts_val loss = ts_sum(g, ts_mul(g, ts_cast(g, y, TS_F32), w), all_axes(ys.ndim), 0);
  ts_val dx = TS_NONE;
  if (diff) {
    CHECK_OK(ts_graph_backward(g, loss, 1.0f));
    dx = ts_graph_grad(g, x);
    CHECK_MSG(dx != TS_NONE, "%s: no gradient", what);
    static const char *bwd_op[] = {"allreduce", "reduce_scatter", "allgather", "alltoall", "rank_slice_bwd", "halo_bwd"};
    CHECK_MSG(has_bwd_op(g, bwd_op[sp->k]), "%s: the backward has no %s node", what, bwd_op[sp->k]);
  } else {
    /* max / min: the gradient is refused; the forward is checked on a graph without backward */
    int rc = ts_graph_backward(g, loss, 1.0f);
    CHECK_MSG(rc == TS_EUNSUPPORTED && strstr(ts_graph_error(g), kname[sp->k]) &&
                  strstr(ts_graph_error(g), rname[red]) && strstr(ts_graph_error(g), "no gradient"),
              "%s: backward gave %d: %s", what, rc, ts_graph_error(g));
    ts_graph_free(g);
    CHECK_OK(ts_graph_create(&g));
    x = ts_input(g, "x", dt, xs);
    y = build_op(g, sp, x, G->slot, G->g);
    w = TS_NONE;
  }
  float *xf = malloc(sizeof(float) * nx), *wf = malloc(sizeof(float) * ny);
  float *yr = malloc(sizeof(float) * ny), *yg = malloc(sizeof(float) * ny);
  float *dr = malloc(sizeof(float) * nx), *dg = malloc(sizeof(float) * nx);
  for (size_t i = 0; i < nx; i++) xf[i] = xval(g_wrank, (int64_t)i);
  for (size_t i = 0; i < ny; i++) wf[i] = wval(g_wrank, (int64_t)i);
  void *xb = to_dtype(xf, nx, dt);
  ts_val keep[2] = {y, dx};
  ts_plan *p = NULL;
  CHECK_OK(ts_plan_create(g, keep, dx == TS_NONE ? 1 : 2, &p));
  if (p) {
    if (G->c) CHECK_OK(ts_plan_set_comm(p, G->slot, G->c));
    CHECK_OK(ts_plan_bind(p, x, xb));
    if (w != TS_NONE) CHECK_OK(ts_plan_bind(p, w, wf));
    int rc = ts_plan_run(p, 0);
    CHECK_MSG(rc == TS_OK, "%s: run: %s", what, ts_last_error());
    if (rc == TS_OK) {
      from_dtype(ts_plan_data(p, y), ny, dt, yg);
      ref_forward(sp, G, xs, ys, yr);
      snprintf(what + strlen(what), sizeof what - strlen(what), " forward");
      check_equal(yg, yr, ny, what);
      if (dx != TS_NONE) {
        from_dtype(ts_plan_data(p, dx), nx, dt, dg);
        ref_adjoint(sp, G, xs, ys, dr);
        what[strlen(what) - 7] = 0;
        snprintf(what + strlen(what), sizeof what - strlen(what), "backward");
        check_equal(dg, dr, nx, what);
      }
    }
    ts_plan_free(p);
  }
  g_cases++;
  free(xb);
  free(xf);
  free(wf);
  free(yr);
  free(yg);
  free(dr);
  free(dg);
  ts_graph_free(g);
}

/* Integer data: i32 allreduce (sum, max) and u8 allgather along dim 1, forward (no gradients). */
static void check_int(const grp *G) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val xi = ts_input(g, "xi", TS_I32, ts_shape1(6));
  ts_val xb = ts_input(g, "xb", TS_U8, ts_shape2(2, 4));
  ts_val ys = ts_allreduce(g, xi, G->slot, G->g, TS_REDUCE_SUM);
  ts_val ym = ts_allreduce(g, xi, G->slot, G->g, TS_REDUCE_MAX);
  ts_val yg = ts_allgather(g, xb, G->slot, G->g, 1);
  ts_val keep[3] = {ys, ym, yg};
  ts_plan *p = NULL;
  CHECK_OK(ts_plan_create(g, keep, 3, &p));
  int32_t xv[6];
  uint8_t bv[8];
  for (int i = 0; i < 6; i++) xv[i] = (int32_t)xval(g_wrank, i) * 1000003;
  for (int i = 0; i < 8; i++) bv[i] = (uint8_t)(g_wrank * 16 + i);
  if (p) {
    if (G->c) CHECK_OK(ts_plan_set_comm(p, G->slot, G->c));
    CHECK_OK(ts_plan_bind(p, xi, xv));
    CHECK_OK(ts_plan_bind(p, xb, bv));
    CHECK_OK(ts_plan_run(p, 0));
    const int32_t *s = ts_plan_data(p, ys), *m = ts_plan_data(p, ym);
    const uint8_t *b = ts_plan_data(p, yg);
    int ok = s && m && b;
    for (int i = 0; ok && i < 6; i++) {
      int32_t ws = 0, wm = INT32_MIN;
      for (int k = 0; k < G->g; k++) {
        int32_t v = (int32_t)xval(G->members[k], i) * 1000003;
        ws += v;
        wm = v > wm ? v : wm;
      }
      ok = s[i] == ws && m[i] == wm;
    }
    for (int r = 0; ok && r < 2; r++)
      for (int c = 0; ok && c < 4 * G->g; c++) ok = b[r * 4 * G->g + c] == (uint8_t)(G->members[c / 4] * 16 + r * 4 + c % 4);
    CHECK_MSG(ok, "%s: integer collectives", G->name);
    ts_plan_free(p);
  }
  ts_graph_free(g);
}

/* Every op on group G. */
static void check_ops(const grp *G) {
  const int before = g_cases, fails = ts_test_failures;
  const ts_shape s235 = ts_shape3(2, 3, 5), s8412 = ts_shape3(8, 4, 12), s7 = ts_shape1(7),
                 s8 = ts_shape1(8), s4d = ts_shape4(2, 4, 3, 8);
  const ts_dtype dts[3] = {TS_F32, TS_BF16, TS_F16};
  for (int red = 0; red < 4; red++)
    for (int t = 0; t < 3; t++) {
      opspec sp = {K_ALLREDUCE, red, 0, 0};
      check_op(G, &sp, s235, dts[t]);
      if (t == 0) check_op(G, &sp, s7, TS_F32);
    }
  for (int d = -1; d < 3; d++) {
    opspec sp = {K_ALLGATHER, d, 0, 0};
    check_op(G, &sp, s235, TS_F32);
  }
  {
    opspec sp = {K_ALLGATHER, 0, 0, 0}, sp1 = {K_ALLGATHER, 1, 0, 0};
    check_op(G, &sp, s7, TS_F32);
    check_op(G, &sp1, s235, TS_BF16);
    check_op(G, &sp1, s235, TS_F16);
  }
  for (int red = 0; red < 4; red++)
    for (int d = 0; d < 3; d++) {
      opspec sp = {K_REDUCE_SCATTER, d, red, 0};
      check_op(G, &sp, s8412, TS_F32);
      if (d == 1 && red < 2) check_op(G, &sp, s8412, TS_BF16);
      if (d == 2 && red == 0) check_op(G, &sp, s8412, TS_F16);
    }
  {
    opspec sp = {K_REDUCE_SCATTER, 0, TS_REDUCE_SUM, 0};
    check_op(G, &sp, s8, TS_F32);
  }
  for (int s = 0; s < 3; s++)
    for (int c = 0; c < 3; c++) {
      if (s == c) continue;
      opspec sp = {K_ALLTOALL, s, c, 0};
      check_op(G, &sp, s8412, TS_F32);
    }
  {
    opspec a = {K_ALLTOALL, 1, 3, 0}, b = {K_ALLTOALL, 3, 0, 0}, c = {K_ALLTOALL, 2, 1, 0}, n = {K_ALLTOALL, -1, 0, 0};
    check_op(G, &a, s4d, TS_F32);
    check_op(G, &b, s4d, TS_F32);
    check_op(G, &c, s8412, TS_BF16);
    check_op(G, &n, s8412, TS_F32);
  }
  check_int(G);
  for (int d = 0; d < 3; d++) {
    opspec sp = {K_RANK_SLICE, d, 0, 0};
    check_op(G, &sp, s8412, TS_F32);
    if (d == 2) check_op(G, &sp, s8412, TS_BF16);
  }
  {
    opspec sp = {K_RANK_SLICE, 0, 0, 0};
    check_op(G, &sp, s8, TS_F32);
  }
  /* halo exchange: every dim, lo/hi from 0 to all the rows, f32 and bf16 */
  for (int d = 0; d < 3; d++)
    for (int lo = 0; lo <= 2; lo++)
      for (int hi = 0; hi <= 2; hi++) {
        opspec sp = {K_HALO, d, lo, hi};
        check_op(G, &sp, s235, TS_F32);
      }
  {
    opspec all = {K_HALO, 0, 2, 2}, b = {K_HALO, -1, 1, 3};
    check_op(G, &all, s235, TS_F32);
    check_op(G, &b, s235, TS_BF16);
  }
  if (g_wrank == 0 || g_verbose)
    printf("rank %d, %-28s g=%d slot %d: %d op cases (allreduce sum/mean/max/min, allgather, "
           "reduce_scatter sum/mean/max/min, alltoall all dim pairs, rank_slice, halo; f32/bf16/f16; "
           "+ i32 allreduce, u8 allgather): "
           "forward and adjoint exact%s\n",
           g_wrank, G->name, G->g, G->slot, g_cases - before, ts_test_failures == fails ? "" : " -- FAILURES");
}

/* ---------------------------------------------------------------- composed: Megatron-style MLP */

#define MN 8 /* batch */
#define MD 6 /* model width */
#define MH 8 /* hidden width (cut over the group) */

/* Single process in double: y = relu(x w1^T) w2^T, loss = sum(wl * y); gradients. */
static void mlp_ref(const float *x, const float *w1, const float *w2, const double *wl, double *y,
                    double *dx, double *dw1, double *dw2, double *dh) {
  double h[MN * MH], a[MN * MH];
  for (int n = 0; n < MN; n++)
    for (int k = 0; k < MH; k++) {
      double s = 0;
      for (int d = 0; d < MD; d++) s += (double)x[n * MD + d] * w1[k * MD + d];
      h[n * MH + k] = s;
      a[n * MH + k] = s > 0 ? s : 0;
    }
  for (int n = 0; n < MN; n++)
    for (int d = 0; d < MD; d++) {
      double s = 0;
      for (int k = 0; k < MH; k++) s += a[n * MH + k] * w2[d * MH + k];
      y[n * MD + d] = s;
    }
  for (int n = 0; n < MN; n++)
    for (int k = 0; k < MH; k++) {
      double s = 0;
      for (int d = 0; d < MD; d++) s += wl[n * MD + d] * w2[d * MH + k];
      dh[n * MH + k] = h[n * MH + k] > 0 ? s : 0;
    }
  for (int n = 0; n < MN; n++)
    for (int d = 0; d < MD; d++) {
      double s = 0;
      for (int k = 0; k < MH; k++) s += dh[n * MH + k] * w1[k * MD + d];
      dx[n * MD + d] = s;
    }
  for (int k = 0; k < MH; k++)
    for (int d = 0; d < MD; d++) {
      double s = 0;
      for (int n = 0; n < MN; n++) s += dh[n * MH + k] * x[n * MD + d];
      dw1[k * MD + d] = s;
    }
  for (int d = 0; d < MD; d++)
    for (int k = 0; k < MH; k++) {
      double s = 0;
      for (int n = 0; n < MN; n++) s += wl[n * MD + d] * a[n * MH + k];
      dw2[d * MH + k] = s;
    }
}

static void to_f(const double *a, float *b, int n) {
  for (int i = 0; i < n; i++) b[i] = (float)a[i];
}

/* dw of a rank_slice'd weight (rows, cols) cut along `dim`: block q equals the reference's, the
 * rest is exactly 0. */
static void check_sliced_grad(const float *got, const double *ref, int rows, int cols, int dim, int g,
                              int q, const char *what) {
  float want[MH * MD];
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      int idx = dim == 0 ? r : c, len = dim == 0 ? rows : cols;
      int in = idx >= q * len / g && idx < (q + 1) * len / g;
      want[r * cols + c] = in ? (float)ref[r * cols + c] : 0.0f;
    }
  CHECK_CLOSE(got, want, (size_t)(rows * cols), 1e-5, 1e-5, what);
}

/* seq = 0: tensor parallel, x replicated, output allreduced. seq = 1: sequence parallel, x and y
 * cut by rows (allgather in, reduce_scatter out). */
static void check_mlp(const grp *G, int seq) {
  const int g = G->g, q = G->q, NL = seq ? MN / g : MN;
  char what[160];
  float x[MN * MD], w1[MH * MD], w2[MD * MH], wl[MN * MD];
  double wt[MN * MD], y[MN * MD], dx[MN * MD], dw1[MH * MD], dw2[MD * MH], dh[MN * MH];
  ts_test_fill(x, MN * MD, 11, -1, 1);
  ts_test_fill(w1, MH * MD, 12, -1, 1);
  ts_test_fill(w2, MD * MH, 13, -1, 1);
  /* the objective: sum over ranks of sum(wl_r * y_r). Tensor parallel: every rank has all of y,
   * so the single process weighs y by sum_r wl_r. Sequence parallel: rank r has rows block r of y
   * and weighs them with rows block r of one wl. */
  memset(wt, 0, sizeof wt);
  if (seq) {
    ts_test_fill(wl, MN * MD, 14, -1, 1);
    for (int i = 0; i < MN * MD; i++) wt[i] = wl[i];
  } else {
    for (int k = 0; k < g; k++) {
      ts_test_fill(wl, MN * MD, 100 + (uint64_t)G->members[k], -1, 1);
      for (int i = 0; i < MN * MD; i++) wt[i] += wl[i];
    }
    ts_test_fill(wl, MN * MD, 100 + (uint64_t)g_wrank, -1, 1);
  }
  mlp_ref(x, w1, w2, wt, y, dx, dw1, dw2, dh);

  ts_graph *gr;
  CHECK_OK(ts_graph_create(&gr));
  ts_val xv = ts_input(gr, "x", TS_F32, ts_shape2(NL, MD));
  ts_val w1v = ts_input(gr, "w1", TS_F32, ts_shape2(MH, MD));
  ts_val w2v = ts_input(gr, "w2", TS_F32, ts_shape2(MD, MH));
  ts_val wlv = ts_input(gr, "wl", TS_F32, ts_shape2(NL, MD));
  ts_val_set_requires_grad(gr, wlv, 0);
  ts_val xin = seq ? ts_allgather(gr, xv, G->slot, g, 0) : xv;
  ts_val h = ts_relu(gr, ts_dense(gr, xin, ts_rank_slice(gr, w1v, G->slot, g, 0), TS_NONE));
  ts_val z = ts_dense(gr, h, ts_rank_slice(gr, w2v, G->slot, g, 1), TS_NONE);
  ts_val out = seq ? ts_reduce_scatter(gr, z, G->slot, g, 0, TS_REDUCE_SUM) : ts_allreduce(gr, z, G->slot, g, TS_REDUCE_SUM);
  ts_val loss = ts_sum(gr, ts_mul(gr, out, wlv), 3, 0);
  CHECK_OK(ts_graph_backward(gr, loss, 1.0f));
  CHECK_MSG(ts_graph_status(gr) == TS_OK, "mlp: %s", ts_graph_error(gr));
  ts_val keep[4] = {out, ts_graph_grad(gr, xv), ts_graph_grad(gr, w1v), ts_graph_grad(gr, w2v)};
  ts_plan *p = NULL;
  CHECK_OK(ts_plan_create(gr, keep, 4, &p));
  if (!p) {
    ts_graph_free(gr);
    return;
  }
  if (G->c) CHECK_OK(ts_plan_set_comm(p, G->slot, G->c));
  CHECK_OK(ts_plan_bind(p, xv, x + (seq ? q * NL * MD : 0)));
  CHECK_OK(ts_plan_bind(p, w1v, w1));
  CHECK_OK(ts_plan_bind(p, w2v, w2));
  CHECK_OK(ts_plan_bind(p, wlv, wl + (seq ? q * NL * MD : 0)));
  int rc = ts_plan_run(p, 0);
  CHECK_MSG(rc == TS_OK, "mlp run: %s", ts_last_error());
  if (rc == TS_OK) {
    const char *mode = seq ? "sequence-parallel mlp" : "tensor-parallel mlp";
    float want[MN * MD], wantd[MN * MD];
    const int off = seq ? q * NL * MD : 0;
    to_f(y + off, want, NL * MD);
    snprintf(what, sizeof what, "%s on %s: output", mode, G->name);
    CHECK_CLOSE((const float *)ts_plan_data(p, keep[0]), want, (size_t)(NL * MD), 1e-5, 1e-5, what);
    const float *gx = ts_plan_data(p, keep[1]);
    if (seq) {
      to_f(dx + off, wantd, NL * MD);
      snprintf(what, sizeof what, "%s on %s: dx (its rows of the single-process dx)", mode, G->name);
      CHECK_CLOSE(gx, wantd, (size_t)(NL * MD), 1e-5, 1e-5, what);
    } else {
      /* x is replicated: each rank's dx is its hidden block's part, dh[:, blk q] w1[blk q, :]; the
       * sum over the group (what the gradient reduction of a replicated value makes) is dx */
      const int B = MH / g;
      for (int n = 0; n < MN; n++)
        for (int d = 0; d < MD; d++) {
          double s = 0;
          for (int k = q * B; k < (q + 1) * B; k++) s += dh[n * MH + k] * w1[k * MD + d];
          wantd[n * MD + d] = (float)s;
        }
      snprintf(what, sizeof what, "%s on %s: dx (this rank's part)", mode, G->name);
      CHECK_CLOSE(gx, wantd, (size_t)(MN * MD), 1e-5, 1e-5, what);
      float sum[MN * MD];
      if (G->c)
        CHECK_OK(ts_comm_allreduce(G->c, gx, sum, MN * MD, TS_F32, TS_REDUCE_SUM));
      else
        memcpy(sum, gx, sizeof sum);
      to_f(dx, wantd, MN * MD);
      snprintf(what, sizeof what, "%s on %s: dx summed over the group", mode, G->name);
      CHECK_CLOSE(sum, wantd, (size_t)(MN * MD), 1e-5, 1e-5, what);
    }
    snprintf(what, sizeof what, "%s on %s: dw1", mode, G->name);
    check_sliced_grad(ts_plan_data(p, keep[2]), dw1, MH, MD, 0, g, q, what);
    snprintf(what, sizeof what, "%s on %s: dw2", mode, G->name);
    check_sliced_grad(ts_plan_data(p, keep[3]), dw2, MD, MH, 1, g, q, what);
    if (g_wrank == 0 || g_verbose)
      printf("rank %d, %-28s g=%d: %s (%dx%d -> %d -> %d): output, dx, dw1, dw2 match the "
             "single-process dense->relu->dense within 1e-5\n",
             g_wrank, G->name, g, mode, MN, MD, MH, MD);
  }
  ts_plan_free(p);
  ts_graph_free(gr);
}

/* ---------------------------------------------------------------- two groups in one graph */

/* (2,2) grid, rank (i,j) = 2i+j: y = allreduce over the column {j, 2+j} (slot 2) of the allgather
 * along dim 1 over the row {2i, 2i+1} (slot 1) of x_ij (3,2). Every rank: y = sum_i concat_j x_ij;
 * dx_ij = block j along dim 1 of sum over all 4 ranks of w_r. */
static void check_two_axes(ts_comm *row, ts_comm *col) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x = ts_input(g, "x", TS_F32, ts_shape2(3, 2));
  ts_val y = ts_allreduce(g, ts_allgather(g, x, 1, 2, 1), 2, 2, TS_REDUCE_SUM);
  ts_val w = ts_input(g, "w", TS_F32, ts_shape2(3, 4));
  ts_val_set_requires_grad(g, w, 0);
  CHECK_OK(ts_graph_backward(g, ts_sum(g, ts_mul(g, y, w), 3, 0), 1.0f));
  ts_val keep[2] = {y, ts_graph_grad(g, x)};
  ts_plan *p = NULL;
  CHECK_OK(ts_plan_create(g, keep, 2, &p));
  float xf[6], wf[12], yw[12], dw[6];
  for (int i = 0; i < 6; i++) xf[i] = xval(g_wrank, i);
  for (int i = 0; i < 12; i++) wf[i] = wval(g_wrank, i);
  const int j = g_wrank % 2;
  for (int n = 0; n < 3; n++)
    for (int c = 0; c < 4; c++) {
      float s = 0;
      for (int i = 0; i < 2; i++) s += xval(2 * i + c / 2, n * 2 + c % 2);
      yw[n * 4 + c] = s;
    }
  for (int n = 0; n < 3; n++)
    for (int c = 0; c < 2; c++) {
      float s = 0;
      for (int r = 0; r < 4; r++) s += wval(r, n * 4 + j * 2 + c);
      dw[n * 2 + c] = s;
    }
  if (p) {
    CHECK_OK(ts_plan_set_comm(p, 1, row));
    CHECK_OK(ts_plan_set_comm(p, 2, col));
    CHECK_OK(ts_plan_bind(p, x, xf));
    CHECK_OK(ts_plan_bind(p, w, wf));
    CHECK_OK(ts_plan_run(p, 0));
    check_equal(ts_plan_data(p, keep[0]), yw, 12, "grid rows+columns: forward");
    check_equal(ts_plan_data(p, keep[1]), dw, 6, "grid rows+columns: backward");
    ts_plan_free(p);
  }
  ts_graph_free(g);
  if (g_wrank == 0)
    printf("rank 0, grid (2,2): allgather over the row (slot 1) then allreduce over the column "
           "(slot 2) in one graph: forward and backward exact\n");
}

/* ---------------------------------------------------------------- errors */

static void check_build_errors(void) {
  ts_graph *g;
  ts_val x, y;
#define FRESH()                          \
  do {                                   \
    ts_graph_create(&g);                 \
    x = ts_input(g, "x", TS_F32, ts_shape3(8, 4, 6)); \
  } while (0)
  FRESH();
  y = ts_allgather(g, x, 0, 2, 3);
  CHECK_GRAPH_ERROR(g, y, TS_ESHAPE, "allgather", "dim 3 out of range", "allgather dim 3 of a 3-d x");
  ts_graph_free(g);
  FRESH();
  y = ts_rank_slice(g, x, 0, 2, -4);
  CHECK_GRAPH_ERROR(g, y, TS_ESHAPE, "rank_slice", "dim -4 out of range", "rank_slice dim -4");
  ts_graph_free(g);
  FRESH();
  y = ts_reduce_scatter(g, x, 0, 3, 1, TS_REDUCE_SUM);
  CHECK_GRAPH_ERROR(g, y, TS_ESHAPE, "reduce_scatter", "not divisible by the group size 3", "reduce_scatter 4 / 3");
  ts_graph_free(g);
  FRESH();
  y = ts_rank_slice(g, x, 0, 5, 2);
  CHECK_GRAPH_ERROR(g, y, TS_ESHAPE, "rank_slice", "length 6 along dim 2", "rank_slice 6 / 5");
  ts_graph_free(g);
  FRESH();
  y = ts_halo(g, x, 0, 2, 1, 5, 0);
  CHECK_GRAPH_ERROR(g, y, TS_ESHAPE, "halo", "lo 5, hi 0 along dim 1", "halo of 5 rows from 4");
  ts_graph_free(g);
  FRESH();
  y = ts_halo(g, x, 0, 2, 2, 0, -1);
  CHECK_GRAPH_ERROR(g, y, TS_ESHAPE, "halo", "must be in 0..6", "halo of -1 rows");
  ts_graph_free(g);
  FRESH();
  y = ts_alltoall(g, x, 0, 3, 1, 0);
  CHECK_GRAPH_ERROR(g, y, TS_ESHAPE, "alltoall", "split dim 1", "alltoall split 4 / 3");
  ts_graph_free(g);
  FRESH();
  y = ts_alltoall(g, x, 0, 2, 1, -2);
  CHECK_GRAPH_ERROR(g, y, TS_EINVAL, "alltoall", "must differ", "alltoall split == concat");
  ts_graph_free(g);
  FRESH();
  y = ts_alltoall(g, x, 0, 2, 0, 5);
  CHECK_GRAPH_ERROR(g, y, TS_ESHAPE, "alltoall", "concat dim 5", "alltoall concat dim 5");
  ts_graph_free(g);
  FRESH();
  y = ts_allreduce(g, x, TS_PLAN_MAX_COMMS, 2, TS_REDUCE_SUM);
  CHECK_GRAPH_ERROR(g, y, TS_EINVAL, "allreduce", "slot 65536", "slot 65536"); /* TS_PLAN_MAX_COMMS: a bound, not a table */
  ts_graph_free(g);
  FRESH();
  y = ts_allgather(g, x, -1, 2, 0);
  CHECK_GRAPH_ERROR(g, y, TS_EINVAL, "allgather", "slot -1", "slot -1");
  ts_graph_free(g);
  FRESH();
  y = ts_reduce_scatter(g, x, 0, 0, 0, TS_REDUCE_SUM);
  CHECK_GRAPH_ERROR(g, y, TS_EINVAL, "reduce_scatter", "group size 0", "group size 0");
  ts_graph_free(g);
  FRESH();
  y = ts_allreduce(g, x, 0, 2, 7);
  CHECK_GRAPH_ERROR(g, y, TS_EINVAL, "allreduce", "reduce op 7", "reduce op 7");
  ts_graph_free(g);
  FRESH();
  y = ts_allreduce(g, ts_input(g, "b", TS_U8, ts_shape1(4)), 0, 2, TS_REDUCE_SUM);
  CHECK_GRAPH_ERROR(g, y, TS_EDTYPE, "allreduce", "u8", "allreduce of u8");
  ts_graph_free(g);
  /* u8 moves fine */
  FRESH();
  y = ts_allgather(g, ts_input(g, "b", TS_U8, ts_shape1(4)), 0, 2, 0);
  CHECK(y != TS_NONE && ts_val_shape(g, y).dims[0] == 8 && ts_val_dtype(g, y) == TS_U8);
  ts_graph_free(g);
  /* max / min: no gradient (reduce_scatter here; allreduce in check_op) */
  FRESH();
  y = ts_reduce_scatter(g, x, 0, 2, 0, TS_REDUCE_MIN);
  CHECK_OK(ts_graph_status(g));
  CHECK(ts_graph_backward(g, ts_sum(g, y, 7, 0), 1.0f) == TS_EUNSUPPORTED);
  CHECK_MSG(strstr(ts_graph_error(g), "reduce_scatter") && strstr(ts_graph_error(g), "min"), "%s",
            ts_graph_error(g));
  ts_graph_free(g);
  /* TS_NONE propagates */
  FRESH();
  y = ts_rank_slice(g, ts_allgather(g, x, 0, 2, 9), 0, 2, 0);
  CHECK(y == TS_NONE && ts_graph_status(g) == TS_ESHAPE);
  ts_graph_free(g);
#undef FRESH
  if (g_wrank == 0)
    printf("rank 0, build errors: bad dims, indivisible sizes, equal alltoall dims, slot, group size, "
           "reduce op, dtype, max/min gradient: refused with the op named\n");
}

/* Runs op k built for group size gs on slot `slot` holding c (may be NULL); returns the status. */
static int run_one(int k, int slot, int gs, ts_comm *c) {
  ts_graph *g;
  ts_graph_create(&g);
  const int64_t L = 2 * (int64_t)gs;
  ts_val x = ts_input(g, "x", TS_F32, ts_shape2(L, L));
  opspec sp = {k, 0, k == K_ALLTOALL ? 1 : 0, 0};
  if (k == K_ALLREDUCE) sp.a = TS_REDUCE_SUM;
  ts_val y = build_op(g, &sp, x, slot, gs);
  ts_plan *p = NULL;
  int rc = ts_plan_create(g, &y, 1, &p);
  float *xf = calloc((size_t)(L * L), sizeof(float));
  if (rc == TS_OK) {
    if (c) ts_plan_set_comm(p, slot, c);
    ts_plan_bind(p, x, xf);
    rc = ts_plan_run(p, 0);
    ts_plan_free(p);
  }
  free(xf);
  ts_graph_free(g);
  return rc;
}

static void check_run_errors(ts_comm *world) {
  const int size = ts_comm_size(world);
  char n1[64], n2[64];
  for (int k = 0; k < 5; k++) {
    /* no communicator in the slot */
    int rc = run_one(k, 3, 2, NULL);
    const char *m = ts_last_error();
    CHECK_MSG(rc == TS_EINVAL && strstr(m, kname[k]) && strstr(m, "slot 3") && strstr(m, "holds no communicator"),
              "missing communicator: %d %s", rc, m);
    /* the world communicator where a group of size+1 was built for */
    rc = run_one(k, 5, size + 1, world);
    m = ts_last_error();
    snprintf(n1, sizeof n1, "has %d rank(s)", size);
    snprintf(n2, sizeof n2, "group of %d", size + 1);
    CHECK_MSG(rc == TS_EINVAL && strstr(m, kname[k]) && strstr(m, "slot 5") && strstr(m, n1) && strstr(m, n2),
              "group size mismatch: %d %s", rc, m);
    if (size > 1) { /* g = 1 runs without a communicator, but not with a wrong one */
      rc = run_one(k, 0, 1, world);
      m = ts_last_error();
      snprintf(n2, sizeof n2, "group of 1");
      CHECK_MSG(rc == TS_EINVAL && strstr(m, kname[k]) && strstr(m, n1) && strstr(m, n2), "g=1 with %d ranks: %d %s",
                size, rc, m);
    }
    CHECK_OK(run_one(k, 0, 1, NULL));
    if (size == 1) CHECK_OK(run_one(k, 0, 1, world));
  }
  if (g_wrank == 0) {
    printf("rank 0, run errors: missing communicator, group-size mismatch (every op): TS_EINVAL naming the op, slot and sizes\n");
    printf("  e.g. \"%s\"\n", (run_one(K_ALLGATHER, 5, size + 1, world), ts_last_error()));
  }
}

/* ---------------------------------------------------------------- main */

static grp make_group(const char *name, ts_comm *c, int slot, int ndim, const int *dims, int axis) {
  grp G;
  memset(&G, 0, sizeof G);
  G.name = name;
  G.c = c;
  G.slot = slot;
  G.g = c ? ts_comm_size(c) : 1;
  G.q = c ? ts_comm_rank(c) : 0;
  G.members[0] = g_wrank;
  if (c && ndim == 0)
    for (int r = 0; r < G.g; r++) G.members[r] = r;
  if (c && ndim > 0) {
    int coords[TS_MAX_DIMS];
    ts_comm_grid_coords(g_wrank, ndim, dims, coords);
    for (int k = 0; k < G.g; k++) {
      coords[axis] = k;
      int r = 0;
      for (int a = 0; a < ndim; a++) r = r * dims[a] + coords[a];
      G.members[k] = r;
    }
  }
  return G;
}

int main(int argc, char **argv) {
  CHECK_OK(ts_comm_init(&argc, &argv));
  ts_comm *world = NULL;
  CHECK_OK(ts_comm_world(&world));
  g_wrank = ts_comm_rank(world);
  g_verbose = getenv("TS_TEST_VERBOSE") != NULL;
  const int size = ts_comm_size(world);
  if (g_wrank == 0) printf("collective graph ops on %d rank(s)\n", size);

  check_build_errors();
  check_run_errors(world);

  grp none = make_group("no communicator", NULL, 4, 0, NULL, 0);
  grp wg = make_group("world", world, 0, 0, NULL, 0);
  check_ops(&none);
  check_ops(&wg);
  check_mlp(&none, 0);
  check_mlp(&wg, 0);
  check_mlp(&wg, 1);
  if (size == 4) {
    const int dims[2] = {2, 2};
    ts_comm *row = NULL, *col = NULL;
    CHECK_OK(ts_comm_grid_axis(world, 2, dims, 1, &row));
    CHECK_OK(ts_comm_grid_axis(world, 2, dims, 0, &col));
    grp rg = make_group("grid (2,2) axis 1 (rows)", row, 1, 2, dims, 1);
    grp cg = make_group("grid (2,2) axis 0 (columns)", col, 2, 2, dims, 0);
    check_ops(&rg);
    check_ops(&cg);
    check_mlp(&rg, 0);
    check_mlp(&cg, 1);
    check_two_axes(row, col);
    ts_comm_free(row);
    ts_comm_free(col);
  }
  ts_comm_free(world);
  return ts_test_finish_job("test_coll");
}
