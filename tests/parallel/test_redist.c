/* Redistribution planner (ts_redist_plan_make) run on simulated ranks (tests/parallel/redist_sim.h).
 *
 * Exhaustive part: for the device matrices (2) (4) (8) (2,2) (2,4) (4,2) (2,2,2) and tensors 8x16
 * and 8x8x16, every pair (from, to) of layouts: every valid tensor map, every partial mask over
 * the axes the map leaves free. The global tensor holds distinct small integers (exact in f32);
 * each rank starts with its from-slice (a partial axis splits each value into integer parts whose
 * sum over the axis is the value); the plan's ops run on the simulated ranks; every rank must end
 * with exactly its to-slice (axes still partial in `to` are summed first). Per op: the layout
 * after it must be what the op does to the layout before, the sizes and the cost must follow the
 * ring formulas; per plan: the total is the sum, from == to is empty, and the ops per axis follow
 * the rules (a move between dims is one ALLTOALL unless the axes trade dims in a cycle, ...).
 * Pairs whose `to` is partial on an axis `from` is not must be refused with TS_EINVAL.
 *
 * Then: the same over pairs of different device matrices with a common refinement, hand-written
 * expected plans (ops, order, costs), and refused cases. */
#include <stdlib.h>
#include <string.h>

#include "redist_sim.h"
#include "tessera/layout.h"
#include "test_util.h"

typedef struct {
  int nd;
  int dev[3];
} devmat;

#define MAXL 128 /* layouts per (device matrix, ndim): at most 86 */

static int n_pairs, n_refused, n_ops, n_kind[TS_REDIST_KIND_COUNT], n_cycles, n_blocked_rs,
    n_blocked_rs_ar, n_blocked_move, n_blocked_move_ag;

/* Every valid layout of ndim dims on d: maps with distinct axes, partial masks over free axes. */
static int enum_layouts(const devmat *d, int ndim, ts_layout *out) {
  int n = 0, base = d->nd + 1, total = 1;
  for (int i = 0; i < ndim; i++) total *= base;
  for (int m = 0; m < total; m++) {
    int tmap[TS_MAX_DIMS], used = 0, ok = 1;
    for (int i = 0, x = m; i < ndim; i++, x /= base) {
      tmap[i] = x % base - 1;
      if (tmap[i] >= 0) {
        ok &= !(used & (1 << tmap[i]));
        used |= 1 << tmap[i];
      }
    }
    if (!ok) continue;
    for (unsigned p = 0; p < (1u << d->nd); p++) {
      if (p & (unsigned)used) continue;
      if (n >= MAXL) abort();
      CHECK_OK(ts_layout_init(&out[n], d->nd, d->dev, ndim, tmap, p));
      n++;
    }
  }
  return n;
}

static int64_t numel(const ts_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->ndim; i++) n *= s->dims[i];
  return n;
}

/* Integer part k of a partial value held by partial-subgrid position q > 0. */
static float kval(int q, int64_t e) { return (float)(1 + (q * 7 + e * 3) % 5); }

/* Every rank's from-buffer: its slice of glob under l; partial axes split each value into integer
 * parts: position 0 of the partial subgrid holds v - sum(others), the others small k's. */
static void make_start(const ts_layout *l, const ts_shape *g, const float *glob, float **bufs) {
  int P = sim_ndev(l);
  ts_shape ls = sim_local(l, g);
  int64_t n = numel(&ls);
  int npart = 1;
  for (int a = 0; a < l->ndev; a++)
    if (l->partial & (1u << a)) npart *= l->dev[a];
  for (int r = 0; r < P; r++) {
    sim_slice(l, g, glob, r, bufs[r]);
    if (!l->partial) continue;
    int c[TS_LAYOUT_MAX_AXES], q = 0;
    sim_coords(l, r, c);
    for (int a = 0; a < l->ndev; a++)
      if (l->partial & (1u << a)) q = q * l->dev[a] + c[a];
    for (int64_t e = 0; e < n; e++) {
      if (q) {
        bufs[r][e] = kval(q, e);
      } else {
        float v = bufs[r][e];
        for (int q2 = 1; q2 < npart; q2++) v -= kval(q2, e);
        bufs[r][e] = v;
      }
    }
  }
}

/* The layout op must produce from `before` (from the op's definition). 0 if the op does not
 * apply to `before`. */
static int expected_after(const ts_layout *before, const ts_redist_op *op, ts_layout *out) {
  ts_layout l = *before;
  int a = op->kind == TS_REDIST_SLICE ? op->slice_axis : op->axis;
  if (a < 0 || a >= l.ndev) return 0;
  int used = 0;
  for (int i = 0; i < l.ndim; i++) used |= l.tmap[i] == a;
  int part = (l.partial >> a) & 1;
  int dok = op->dim >= 0 && op->dim < l.ndim;
  switch (op->kind) {
    case TS_REDIST_SLICE:
      if (used || part || !dok || l.tmap[op->dim] >= 0 || op->axis != -1) return 0;
      l.tmap[op->dim] = a;
      break;
    case TS_REDIST_REDUCE_SCATTER:
      if (!part || !dok || l.tmap[op->dim] >= 0) return 0;
      l.partial &= ~(1u << a);
      l.tmap[op->dim] = a;
      break;
    case TS_REDIST_ALLREDUCE:
      if (!part || op->dim != -1) return 0;
      l.partial &= ~(1u << a);
      break;
    case TS_REDIST_ALLTOALL:
      if (!dok || op->dim2 < 0 || op->dim2 >= l.ndim || l.tmap[op->dim2] != a || l.tmap[op->dim] >= 0)
        return 0;
      l.tmap[op->dim2] = -1;
      l.tmap[op->dim] = a;
      break;
    case TS_REDIST_ALLGATHER:
      if (!dok || l.tmap[op->dim] != a) return 0;
      l.tmap[op->dim] = -1;
      break;
    default: return 0;
  }
  if (op->kind != TS_REDIST_ALLTOALL && op->dim2 != -1) return 0;
  if (op->kind != TS_REDIST_SLICE && op->slice_axis != -1) return 0;
  *out = l;
  return 1;
}

static double formula(ts_redist_kind k, double g, double s) {
  switch (k) {
    case TS_REDIST_ALLGATHER: return (g - 1) * s;
    case TS_REDIST_REDUCE_SCATTER: return (g - 1) / g * s;
    case TS_REDIST_ALLREDUCE: return 2 * (g - 1) / g * s;
    case TS_REDIST_ALLTOALL: return (g - 1) / g * s;
    default: return 0;
  }
}

static int close_enough(double a, double b) { return fabs(a - b) <= 1e-9 * (1 + fabs(b)); }

/* Independent optimum: depth-first search over layouts with the documented move set (per axis:
 * ALLREDUCE / REDUCE_SCATTER of a partial axis `to` does not keep partial, ALLGATHER / ALLTOALL
 * of an axis cutting a dim `to` does not cut with it, SLICE of a replicated axis onto the dim
 * `to` cuts with it, once free), branch and bound. Returns the cheapest total in bytes. */
static void oracle_dfs(const ts_layout *cur, const ts_layout *to, const ts_shape *g, double s,
                       double spent, int depth, double *best) {
  if (spent >= *best * (1 + 1e-12) + 1e-9 && *best < INFINITY) return;
  if (ts_layout_equal(cur, to)) {
    if (spent < *best) *best = spent;
    return;
  }
  if (depth > 2 * TS_LAYOUT_MAX_AXES) return;
  for (int a = 0; a < cur->ndev; a++) {
    int ci = -1, tj = -1;
    for (int i = 0; i < cur->ndim; i++) {
      if (cur->tmap[i] == a) ci = i;
      if (to->tmap[i] == a) tj = i;
    }
    double gsz = cur->dev[a];
    int pc = (cur->partial >> a) & 1, pt = (to->partial >> a) & 1;
    ts_layout nx = *cur;
    if (pc && !pt) {
      nx.partial &= ~(1u << a);
      oracle_dfs(&nx, to, g, s, spent + formula(TS_REDIST_ALLREDUCE, gsz, s), depth + 1, best);
      if (tj >= 0 && cur->tmap[tj] < 0) {
        nx.tmap[tj] = a;
        oracle_dfs(&nx, to, g, s / gsz, spent + formula(TS_REDIST_REDUCE_SCATTER, gsz, s), depth + 1,
                   best);
      }
    }
    nx = *cur;
    if (ci >= 0 && ci != tj) {
      nx.tmap[ci] = -1;
      oracle_dfs(&nx, to, g, s * gsz, spent + formula(TS_REDIST_ALLGATHER, gsz, s), depth + 1, best);
      if (tj >= 0 && cur->tmap[tj] < 0) {
        nx.tmap[tj] = a;
        oracle_dfs(&nx, to, g, s, spent + formula(TS_REDIST_ALLTOALL, gsz, s), depth + 1, best);
      }
    }
    nx = *cur;
    if (ci < 0 && !pc && tj >= 0 && cur->tmap[tj] < 0) {
      nx.tmap[tj] = a;
      oracle_dfs(&nx, to, g, s / gsz, spent, depth + 1, best);
    }
  }
}

static double oracle(const ts_layout *from, const ts_layout *to, const ts_shape *g, size_t esz) {
  ts_shape ls = sim_local(from, g);
  double best = INFINITY;
  oracle_dfs(from, to, g, (double)numel(&ls) * (double)esz, 0, 0, &best);
  return best;
}

/* Does axis a (moving between dims) belong to a cycle of axes each wanting the next one's dim? */
static int in_cycle(const ts_layout *from, const ts_layout *to, int a, int *cycle_min) {
  int tdim[TS_LAYOUT_MAX_AXES];
  for (int x = 0; x < from->ndev; x++) tdim[x] = -1;
  for (int i = 0; i < to->ndim; i++)
    if (to->tmap[i] >= 0) tdim[to->tmap[i]] = i;
  int b = a, mn = a;
  for (int step = 0; step <= from->ndev; step++) {
    int j = tdim[b];
    if (j < 0) return 0;
    int c = from->tmap[j];
    if (c < 0) return 0;
    if (c == a) {
      *cycle_min = mn;
      return 1;
    }
    if (c < mn) mn = c;
    b = c;
  }
  return 0;
}

/* The ops per axis follow the planner's rules (same device matrix only). */
static void check_rules(const ts_layout *from, const ts_layout *to, const ts_redist_plan *p,
                        const char *what) {
  int cnt[TS_LAYOUT_MAX_AXES][TS_REDIST_KIND_COUNT];
  memset(cnt, 0, sizeof cnt);
  for (int k = 0; k < p->nops; k++) {
    const ts_redist_op *op = &p->ops[k];
    int a = op->kind == TS_REDIST_SLICE ? op->slice_axis : op->axis;
    if (a >= 0 && a < TS_LAYOUT_MAX_AXES && op->kind < TS_REDIST_KIND_COUNT) cnt[a][op->kind]++;
  }
  int gathered_in_cycle[TS_LAYOUT_MAX_AXES] = {0}, has_cycle[TS_LAYOUT_MAX_AXES] = {0};
  for (int a = 0; a < from->ndev; a++) {
    int pf = (from->partial >> a) & 1, pt = (to->partial >> a) & 1, fd = -1, td = -1;
    for (int i = 0; i < from->ndim; i++) {
      if (from->tmap[i] == a) fd = i;
      if (to->tmap[i] == a) td = i;
    }
    int S = cnt[a][TS_REDIST_SLICE], RS = cnt[a][TS_REDIST_REDUCE_SCATTER],
        AR = cnt[a][TS_REDIST_ALLREDUCE], AT = cnt[a][TS_REDIST_ALLTOALL],
        AG = cnt[a][TS_REDIST_ALLGATHER], tot = S + RS + AR + AT + AG;
    const char *rule;
    int ok;
    if ((pf && pt) || (fd >= 0 && fd == td) || (!pf && fd < 0 && td < 0)) {
      rule = "unchanged axis: no op";
      ok = tot == 0;
    } else if (pf && td < 0) {
      rule = "partial, unused in to: one ALLREDUCE";
      ok = tot == 1 && AR == 1;
    } else if (pf && from->tmap[td] < 0) {
      rule = "partial, cuts a free dim in to: one REDUCE_SCATTER";
      ok = tot == 1 && RS == 1;
    } else if (pf) {
      rule = "partial, cuts a dim held by another axis: REDUCE_SCATTER, or ALLREDUCE + SLICE";
      ok = (tot == 1 && RS == 1) || (tot == 2 && AR == 1 && S == 1);
      n_blocked_rs++;
      n_blocked_rs_ar += AR;
    } else if (fd >= 0 && td < 0) {
      rule = "cut, unused in to: one ALLGATHER";
      ok = tot == 1 && AG == 1;
    } else if (fd >= 0 && from->tmap[td] < 0) {
      rule = "moves to a dim free in from: one ALLTOALL";
      ok = tot == 1 && AT == 1;
    } else if (fd >= 0) {
      int mn = -1;
      rule = "moves to a dim held by another axis: ALLTOALL, or ALLGATHER + SLICE";
      ok = (tot == 1 && AT == 1) || (tot == 2 && AG == 1 && S == 1);
      if (in_cycle(from, to, a, &mn)) {
        has_cycle[mn] = 1;
        gathered_in_cycle[mn] += AG;
      } else {
        n_blocked_move++;
        n_blocked_move_ag += AG;
      }
    } else {
      rule = "newly cuts a dim: one SLICE";
      ok = tot == 1 && S == 1;
    }
    CHECK_MSG(ok, "%s: axis %d: %s; got slice %d rs %d ar %d a2a %d ag %d", what, a, rule, S, RS,
              AR, AT, AG);
  }
  for (int a = 0; a < from->ndev; a++)
    if (has_cycle[a]) {
      n_cycles++;
      CHECK_MSG(gathered_in_cycle[a] == 1, "%s: the cycle of axis %d is broken by %d gathers", what,
                a, gathered_in_cycle[a]);
    }
}

/* Plans from -> to for a tensor of shape g, runs the plan on simulated ranks and checks every
 * rank's result. `rules`: also check the per-axis rules (same device matrix). Returns the plan's
 * op count, or -1 if it was (expectedly) refused. */
static int run_case(const ts_shape *g, const ts_layout *from, const ts_layout *to,
                    int expect_refuse, int rules) {
  static ts_redist_plan plan, again;
  char sf[160], st[160], what[400];
  snprintf(what, sizeof what, "%s -> %s", ts_layout_str(from, sf, sizeof sf),
           ts_layout_str(to, st, sizeof st));
  int rc = ts_redist_plan_make(g, sizeof(float), from, to, &plan);
  n_pairs++;
  if (expect_refuse) {
    n_refused++;
    CHECK_MSG(rc == TS_EINVAL && strstr(ts_last_error(), "partial in to"),
              "%s: expected refusal, got %d (%s)", what, rc, ts_last_error());
    CHECK_MSG(plan.nops == 0, "%s: refused plan has %d ops", what, plan.nops);
    return -1;
  }
  CHECK_MSG(rc == TS_OK, "%s: %s", what, ts_last_error());
  if (rc) return -1;
  if (ts_layout_equal(from, to)) CHECK_MSG(plan.nops == 0, "%s: from == to gives %d ops", what, plan.nops);
  CHECK_MSG(numel(&plan.shape) == numel(g), "%s: plan shape changes the element count", what);
  CHECK_OK(ts_layout_check_shape(&plan.from, &plan.shape));
  CHECK_OK(ts_layout_check_shape(&plan.to, &plan.shape));
  CHECK(ts_shape_equal(&plan.orig_shape, g));

  int P = sim_ndev(from);
  int64_t N = numel(g);
  float *glob = malloc((size_t)N * sizeof(float));
  float **cur = malloc((size_t)P * sizeof(float *)), **nxt = malloc((size_t)P * sizeof(float *));
  float *want = malloc((size_t)N * sizeof(float));
  if (!glob || !cur || !nxt || !want) abort();
  for (int64_t e = 0; e < N; e++) glob[e] = (float)(e * 3 - 1000);
  for (int r = 0; r < P; r++) {
    cur[r] = malloc((size_t)N * sizeof(float));
    nxt[r] = malloc((size_t)N * sizeof(float));
    if (!cur[r] || !nxt[r]) abort();
  }
  make_start(from, g, glob, cur);
  ts_shape ls0 = sim_local(from, g), ls = sim_local(&plan.from, &plan.shape);
  CHECK_MSG(numel(&ls) == numel(&ls0), "%s: plan's from-local size %lld != %lld", what,
            (long long)numel(&ls), (long long)numel(&ls0));
  ts_layout before = plan.from;
  double sum = 0;
  int ok = 1;
  for (int k = 0; k < plan.nops && ok; k++) {
    const ts_redist_op *op = &plan.ops[k];
    char os_[200];
    ts_redist_op_str(op, os_, sizeof os_);
    ts_layout want_after;
    ok = expected_after(&before, op, &want_after);
    CHECK_MSG(ok, "%s: op %d (%s) does not apply to %s", what, k, os_,
              ts_layout_str(&before, sf, sizeof sf));
    if (!ok) break;
    CHECK_MSG(ts_layout_equal(&want_after, &op->after), "%s: op %d (%s) leaves %s, expected %s",
              what, k, os_, ts_layout_str(&op->after, sf, sizeof sf),
              ts_layout_str(&want_after, st, sizeof st));
    int ax = op->kind == TS_REDIST_SLICE ? op->slice_axis : op->axis;
    CHECK_MSG(op->group == before.dev[ax], "%s: op %d group %d", what, k, op->group);
    double s = (double)numel(&ls) * sizeof(float), f = formula(op->kind, op->group, s);
    CHECK_MSG(op->in_bytes == (int64_t)s, "%s: op %d in_bytes %lld, expected %.0f", what, k,
              (long long)op->in_bytes, s);
    CHECK_MSG(close_enough(op->cost, f), "%s: op %d (%s) cost %.17g, formula %.17g", what, k, os_,
              op->cost, f);
    sum += f;
    ok = sim_apply(&before, &ls, op, cur, nxt) == 0;
    CHECK_MSG(ok, "%s: op %d (%s) malformed for the simulator", what, k, os_);
    ts_shape os = sim_out_shape(op, ls), la = sim_local(&op->after, &plan.shape);
    CHECK_MSG(ts_shape_equal(&os, &la), "%s: op %d output shape differs from its layout's", what, k);
    CHECK_MSG(op->out_bytes == numel(&os) * (int64_t)sizeof(float), "%s: op %d out_bytes", what, k);
    float **t = cur;
    cur = nxt;
    nxt = t;
    ls = os;
    before = op->after;
    n_ops++;
    n_kind[op->kind]++;
  }
  if (ok) {
    CHECK_MSG(ts_layout_equal(&before, &plan.to), "%s: the plan ends at %s, not at plan.to", what,
              ts_layout_str(&before, sf, sizeof sf));
    CHECK_MSG(close_enough(plan.total_cost, sum), "%s: total %.17g, sum of formulas %.17g", what,
              plan.total_cost, sum);
    /* sum the axes still partial in `to`, then compare with the to-slices */
    for (int a = 0; a < plan.to.ndev && ok; a++)
      if (plan.to.partial & (1u << a)) {
        ts_redist_op ar = {.kind = TS_REDIST_ALLREDUCE, .axis = a, .dim = -1, .dim2 = -1,
                           .slice_axis = -1, .group = plan.to.dev[a]};
        ok = sim_apply(&plan.to, &ls, &ar, cur, nxt) == 0;
        float **t = cur;
        cur = nxt;
        nxt = t;
      }
    ts_layout full = *to;
    full.partial = 0;
    ts_shape lt = sim_local(to, g);
    int64_t nt = numel(&lt);
    CHECK_MSG(nt == numel(&ls), "%s: final local size %lld, to-slice %lld", what,
              (long long)numel(&ls), (long long)nt);
    int bad_rank = -1;
    int64_t bad_e = -1;
    for (int r = 0; r < P && bad_rank < 0 && nt == numel(&ls); r++) {
      sim_slice(&full, g, glob, r, want);
      for (int64_t e = 0; e < nt; e++)
        if (cur[r][e] != want[e]) {
          bad_rank = r, bad_e = e;
          break;
        }
    }
    if (bad_rank >= 0) {
      char pl[2048];
      CHECK_MSG(0, "%s: rank %d element %lld = %g, expected %g\n%s", what, bad_rank,
                (long long)bad_e, cur[bad_rank][bad_e], want[bad_e],
                ts_redist_plan_str(&plan, pl, sizeof pl));
    } else {
      ts_test_checks++;
    }
    if (rules) {
      check_rules(from, to, &plan, what);
      double best = oracle(from, to, g, sizeof(float));
      CHECK_MSG(close_enough(plan.total_cost, best), "%s: plan costs %.17g, the optimum is %.17g",
                what, plan.total_cost, best);
    }
    /* deterministic */
    CHECK_OK(ts_redist_plan_make(g, sizeof(float), from, to, &again));
    int same = again.nops == plan.nops;
    for (int k = 0; same && k < plan.nops; k++)
      same = again.ops[k].kind == plan.ops[k].kind && again.ops[k].axis == plan.ops[k].axis &&
             again.ops[k].dim == plan.ops[k].dim && again.ops[k].dim2 == plan.ops[k].dim2 &&
             again.ops[k].slice_axis == plan.ops[k].slice_axis;
    CHECK_MSG(same, "%s: a second planning differs", what);
  }
  for (int r = 0; r < P; r++) free(cur[r]), free(nxt[r]);
  free(cur);
  free(nxt);
  free(glob);
  free(want);
  return plan.nops;
}

static const devmat DM[] = {{1, {2}},    {1, {4}},    {1, {8}},      {2, {2, 2}},
                            {2, {2, 4}}, {2, {4, 2}}, {3, {2, 2, 2}}};
#define NDM (int)(sizeof DM / sizeof DM[0])

static void test_exhaustive(void) {
  static ts_layout L[MAXL];
  const ts_shape shapes[2] = {ts_shape2(8, 16), ts_shape3(8, 8, 16)};
  int pairs0 = n_pairs, maxops = 0;
  for (int d = 0; d < NDM; d++)
    for (int s = 0; s < 2; s++) {
      int n = enum_layouts(&DM[d], shapes[s].ndim, L);
      int p0 = n_pairs;
      for (int f = 0; f < n; f++)
        for (int t = 0; t < n; t++) {
          int refuse = (L[t].partial & ~L[f].partial) != 0;
          int k = run_case(&shapes[s], &L[f], &L[t], refuse, 1);
          if (k > maxops) maxops = k;
        }
      char b[64];
      printf("  dev(");
      for (int a = 0; a < DM[d].nd; a++) printf(a ? ",%d" : "%d", DM[d].dev[a]);
      printf(") tensor %s: %d layouts, %d pairs\n", ts_shape_str(&shapes[s], b, sizeof b), n,
             n_pairs - p0);
    }
  printf("exhaustive: %d pairs (%d refused: to partial where from is not), %d ops run "
         "(slice %d, reduce_scatter %d, allreduce %d, alltoall %d, allgather %d), longest plan %d "
         "ops; every plan as cheap as a brute-force search; %d axis cycles (each broken by one gather), "
         "%d reduce-scatters onto a dim held by another axis (%d done as allreduce + slice), %d moves "
         "onto a held dim outside cycles (%d done as allgather + slice)\n",
         n_pairs - pairs0, n_refused, n_ops, n_kind[0], n_kind[1], n_kind[2], n_kind[3], n_kind[4],
         maxops, n_cycles, n_blocked_rs, n_blocked_rs_ar, n_blocked_move, n_blocked_move_ag);
}

/* ---- different device matrices with a common refinement ---- */

/* Refined axes (own computation) of each axis of d within the refinement r. */
static void runs(const devmat *d, const int *r, int nr, int *lo, int *hi) {
  int ri = 0;
  long pp = 1, rp = 1;
  for (int x = 0; x < d->nd; x++) {
    lo[x] = ri;
    pp *= d->dev[x];
    while (rp < pp && ri < nr) rp *= r[ri++];
    hi[x] = ri;
  }
}

static unsigned refined_mask(const devmat *d, unsigned m, const int *r, int nr) {
  int lo[8], hi[8];
  unsigned out = 0;
  runs(d, r, nr, lo, hi);
  for (int x = 0; x < d->nd; x++)
    if (m & (1u << x))
      for (int a = lo[x]; a < hi[x]; a++) out |= 1u << a;
  return out;
}

static void test_refinement(void) {
  static ts_layout A[MAXL], B[MAXL];
  const int pairs[][2] = {{1, 3}, {2, 4}, {2, 5}, {2, 6}, {4, 5}, {4, 6}, {5, 6}};
  const int refined[][3] = {{2, 2}, {2, 4}, {4, 2}, {2, 2, 2}, {2, 2, 2}, {2, 2, 2}, {2, 2, 2}};
  const int nref[] = {2, 2, 2, 3, 3, 3, 3};
  const ts_shape shapes[2] = {ts_shape2(8, 16), ts_shape3(8, 8, 16)};
  int p0 = n_pairs, r0 = n_refused, expanded = 0, further = 0;
  for (int k = 0; k < 7; k++)
    for (int dir = 0; dir < 2; dir++)
      for (int s = 0; s < 2; s++) {
        const devmat *df = &DM[pairs[k][dir]], *dt = &DM[pairs[k][1 - dir]];
        int nf = enum_layouts(df, shapes[s].ndim, A), nt = enum_layouts(dt, shapes[s].ndim, B);
        for (int f = 0; f < nf; f++)
          for (int t = 0; t < nt; t++) {
            unsigned pf = refined_mask(df, A[f].partial, refined[k], nref[k]);
            unsigned pt = refined_mask(dt, B[t].partial, refined[k], nref[k]);
            int refuse = (pt & ~pf) != 0;
            static ts_redist_plan pl;
            run_case(&shapes[s], &A[f], &B[t], refuse, 0);
            if (!refuse && ts_redist_plan_make(&shapes[s], 4, &A[f], &B[t], &pl) == TS_OK) {
              /* the plan's device matrix refines the common one (further where a dim needs) */
              int okd = pl.to.ndev == pl.from.ndev;
              for (int a = 0; okd && a < pl.from.ndev; a++) okd = pl.to.dev[a] == pl.from.dev[a];
              long pc = 1, pr = 1;
              for (int a = 0, b = 0; okd && a < nref[k]; a++) {
                pr *= refined[k][a];
                while (pc < pr && b < pl.from.ndev) pc *= pl.from.dev[b++];
                okd = pc == pr;
              }
              CHECK_MSG(okd, "plan device matrix does not refine the common one");
              further += pl.from.ndev > nref[k];
              expanded += pl.shape.ndim > shapes[s].ndim;
            }
          }
      }
  printf("refinement: (4)<->(2,2), (8)<->(2,4)/(4,2)/(2,2,2), (2,4)/(4,2)<->(2,2,2), (2,4)<->(4,2): "
         "%d pairs (%d refused), %d planned on an expanded shape, %d on a device matrix finer than the "
         "common one\n",
         n_pairs - p0, n_refused - r0, expanded, further);

  /* a few by hand: (8) map(0,-1) -> (2,4) map(0,1): the dim of 8 becomes sub-dims (2,4) */
  ts_layout f, t;
  ts_redist_plan p;
  ts_shape g = ts_shape2(8, 16);
  CHECK_OK(ts_layout_init(&f, 1, (int[]){8}, 2, (int[]){0, -1}, 0));
  CHECK_OK(ts_layout_init(&t, 2, (int[]){2, 4}, 2, (int[]){0, 1}, 0));
  CHECK_OK(ts_redist_plan_make(&g, 4, &f, &t, &p));
  CHECK_MSG(p.shape.ndim == 3 && p.shape.dims[0] == 2 && p.shape.dims[1] == 4 && p.shape.dims[2] == 16,
            "expanded shape");
  CHECK(p.from.tmap[0] == 0 && p.from.tmap[1] == 1 && p.from.tmap[2] == -1);
  CHECK(p.to.tmap[0] == 0 && p.to.tmap[1] == -1 && p.to.tmap[2] == 1);
  /* axis 1 moves from sub-dim 1 to the column dim: one alltoall of 16 floats, 3/4 of it sent */
  CHECK_MSG(p.nops == 1 && p.ops[0].kind == TS_REDIST_ALLTOALL && p.ops[0].axis == 1 &&
                p.ops[0].dim == 2 && p.ops[0].dim2 == 1 && close_enough(p.total_cost, 48),
            "%d ops, cost %g", p.nops, p.total_cost);
  /* (4) map(0,-1) -> (2,2) replicated: a gather on each refined axis */
  CHECK_OK(ts_layout_init(&f, 1, (int[]){4}, 2, (int[]){0, -1}, 0));
  CHECK_OK(ts_layout_init(&t, 2, (int[]){2, 2}, 2, (int[]){-1, -1}, 0));
  CHECK_OK(ts_redist_plan_make(&g, 4, &f, &t, &p));
  CHECK_MSG(p.nops == 2 && p.ops[0].kind == TS_REDIST_ALLGATHER && p.ops[1].kind == TS_REDIST_ALLGATHER,
            "(4) map(0,-1) -> (2,2) replicated: %d ops", p.nops);
  /* (4) partial{0} -> (2,2) partial{0,1}: still the same sum, nothing to do */
  CHECK_OK(ts_layout_init(&f, 1, (int[]){4}, 2, (int[]){-1, -1}, 1u));
  CHECK_OK(ts_layout_init(&t, 2, (int[]){2, 2}, 2, (int[]){-1, -1}, 3u));
  CHECK_OK(ts_redist_plan_make(&g, 4, &f, &t, &p));
  CHECK_MSG(p.nops == 0, "(4) partial -> (2,2) partial{0,1}: %d ops", p.nops);
  /* (8) map(0,-1) -> (2,4) map(1,-1): on (2,4) to's axis of 4 would straddle from's cut point 2,
   * so the device matrix is refined to (2,2,2) and rows to sub-dims 2x2x2 */
  CHECK_OK(ts_layout_init(&f, 1, (int[]){8}, 2, (int[]){0, -1}, 0));
  CHECK_OK(ts_layout_init(&t, 2, (int[]){2, 4}, 2, (int[]){1, -1}, 0));
  CHECK_OK(ts_redist_plan_make(&g, 4, &f, &t, &p));
  CHECK_MSG(p.from.ndev == 3 && p.shape.ndim == 4 && p.shape.dims[0] == 2 && p.shape.dims[1] == 2 &&
                p.shape.dims[2] == 2 && p.shape.dims[3] == 16,
            "(8)->(2,4) map(1,-1): %d device axes, %d dims", p.from.ndev, p.shape.ndim);
  run_case(&g, &f, &t, 0, 0);
  /* (4,4) map(0,-1) -> (2,2,4) map(2,-1) on 16x16: refined to (2,2,2,2) */
  g = ts_shape2(16, 16);
  CHECK_OK(ts_layout_init(&f, 2, (int[]){4, 4}, 2, (int[]){0, -1}, 0));
  CHECK_OK(ts_layout_init(&t, 3, (int[]){2, 2, 4}, 2, (int[]){2, -1}, 0));
  CHECK_OK(ts_redist_plan_make(&g, 4, &f, &t, &p));
  CHECK_MSG(p.from.ndev == 4, "(4,4)->(2,2,4): %d device axes", p.from.ndev);
  run_case(&g, &f, &t, 0, 0);
  printf("refinement by hand: (8)->(2,4) expanded to 2x4x16 with one alltoall; (4)->(2,2) gathers; "
         "equivalent partial masks need nothing; (8)->(2,4) map(1,-1) and (4,4)->(2,2,4) refined "
         "beyond the common matrix\n");
}

/* ---- hand-written expected plans ---- */
typedef struct {
  ts_redist_kind kind;
  int axis, dim, dim2, slice_axis;
  double cost;
} want_op;

static void expect_plan(int line, const char *name, const ts_shape *g, size_t esz,
                        const ts_layout *f, const ts_layout *t, int n, const want_op *w,
                        double total) {
  ts_redist_plan p;
  char buf[2048];
  int rc = ts_redist_plan_make(g, esz, f, t, &p);
  int ok = rc == TS_OK && p.nops == n && close_enough(p.total_cost, total);
  for (int k = 0; ok && k < n; k++)
    ok = p.ops[k].kind == w[k].kind && p.ops[k].axis == w[k].axis && p.ops[k].dim == w[k].dim &&
         p.ops[k].dim2 == w[k].dim2 && p.ops[k].slice_axis == w[k].slice_axis &&
         close_enough(p.ops[k].cost, w[k].cost);
  ts_test_checks++;
  if (!ok) {
    ts_test_failures++;
    fprintf(stderr, "%s:%d: %s: rc %d (%s); got\n%s\n", __FILE__, line, name, rc, ts_last_error(),
            ts_redist_plan_str(&p, buf, sizeof buf));
  } else {
    printf("  %s\n    %s\n", name, ts_redist_plan_str(&p, buf, sizeof buf));
  }
}
#define L2(l, d0, d1, m0, m1, part) \
  CHECK_OK(ts_layout_init(&(l), 2, (int[]){d0, d1}, 2, (int[]){m0, m1}, part))
#define S_ TS_REDIST_SLICE
#define RS_ TS_REDIST_REDUCE_SCATTER
#define AR_ TS_REDIST_ALLREDUCE
#define AT_ TS_REDIST_ALLTOALL
#define AG_ TS_REDIST_ALLGATHER

static void test_hand_plans(void) {
  ts_layout f, t;
  ts_shape g = ts_shape2(8, 16); /* f32: 512 bytes */
  printf("hand-written plans (8x16 f32 unless stated):\n");
  L2(f, 2, 4, 0, -1, 0);
  L2(t, 2, 4, -1, 1, 0);
  expect_plan(__LINE__, "un-cut rows, cut columns: free slice first, then the gather", &g, 4, &f, &t, 2,
              (want_op[]){{S_, -1, 1, -1, 1, 0}, {AG_, 0, 0, -1, -1, 64}}, 64);
  L2(f, 2, 4, 1, -1, 0);
  L2(t, 2, 4, -1, 1, 0);
  expect_plan(__LINE__, "axis 1 moves from rows to columns: one alltoall", &g, 4, &f, &t, 1,
              (want_op[]){{AT_, 1, 1, 0, -1, 96}}, 96);
  L2(f, 2, 4, 0, 1, 0);
  L2(t, 2, 4, 1, 0, 0);
  expect_plan(__LINE__, "axes trade dims: gather the smaller axis, alltoall, slice", &g, 4, &f, &t, 3,
              (want_op[]){{AG_, 0, 0, -1, -1, 64}, {AT_, 1, 0, 1, -1, 96}, {S_, -1, 1, -1, 0, 0}},
              160);
  L2(f, 2, 4, -1, -1, 1u);
  L2(t, 2, 4, 0, -1, 0);
  expect_plan(__LINE__, "partial axis cuts rows in to: reduce-scatter, not allreduce + slice", &g, 4,
              &f, &t, 1, (want_op[]){{RS_, 0, 0, -1, -1, 256}}, 256);
  L2(f, 2, 4, -1, -1, 1u);
  L2(t, 2, 4, -1, -1, 0);
  expect_plan(__LINE__, "partial axis unused in to: allreduce", &g, 4, &f, &t, 1,
              (want_op[]){{AR_, 0, -1, -1, -1, 512}}, 512);
  L2(f, 2, 4, -1, -1, 1u);
  L2(t, 2, 4, -1, 1, 0);
  expect_plan(__LINE__, "partial + new cut: the free slice shrinks the allreduce", &g, 4, &f, &t, 2,
              (want_op[]){{S_, -1, 1, -1, 1, 0}, {AR_, 0, -1, -1, -1, 128}}, 128);
  L2(f, 2, 4, -1, -1, 1u);
  L2(t, 2, 4, 0, 1, 0);
  expect_plan(__LINE__, "slice, then reduce-scatter", &g, 4, &f, &t, 2,
              (want_op[]){{S_, -1, 1, -1, 1, 0}, {RS_, 0, 0, -1, -1, 64}}, 64);
  L2(f, 2, 4, -1, -1, 3u);
  L2(t, 2, 4, 1, 0, 0);
  expect_plan(__LINE__, "two partial axes, equal costs either way: axis order", &g, 4, &f, &t, 2,
              (want_op[]){{RS_, 0, 1, -1, -1, 256}, {RS_, 1, 0, -1, -1, 192}}, 448);
  L2(f, 2, 4, 1, -1, 1u);
  L2(t, 2, 4, -1, -1, 0);
  expect_plan(__LINE__, "partial sums before gathers", &g, 4, &f, &t, 2,
              (want_op[]){{AR_, 0, -1, -1, -1, 128}, {AG_, 1, 0, -1, -1, 384}}, 512);
  L2(f, 2, 4, 1, -1, 1u);
  L2(t, 2, 4, 0, -1, 0);
  /* rows held by axis 1 (4 pieces), wanted by the partial axis 0: gathering first would
   * reduce-scatter 4x the data; allreduce at 128 B then gather costs 128 + 384 = 512 vs 384 + 256 */
  expect_plan(__LINE__, "blocked reduce-scatter: allreduce, gather, slice", &g, 4, &f, &t, 3,
              (want_op[]){{AR_, 0, -1, -1, -1, 128}, {AG_, 1, 0, -1, -1, 384}, {S_, -1, 0, -1, 0, 0}},
              512);
  L2(f, 2, 4, 0, -1, 0);
  L2(t, 2, 4, 0, -1, 0);
  expect_plan(__LINE__, "from == to: empty", &g, 4, &f, &t, 0, NULL, 0);
  L2(f, 2, 4, 0, -1, 0);
  L2(t, 2, 4, -1, 1, 0);
  expect_plan(__LINE__, "bf16 halves the bytes", &g, 2, &f, &t, 2,
              (want_op[]){{S_, -1, 1, -1, 1, 0}, {AG_, 0, 0, -1, -1, 32}}, 32);
  /* dev(2,2,4), local 4x8 = 128 B: axis 0 moves dim 1 -> dim 0, held by axis 1 (to be gathered),
   * axis 2 (4) newly cuts dim 1. Alltoall road: gather axis 1 (128) + alltoall at 256 B (128) =
   * 256. Cheaper: gather axis 0 (128), slice dim 1 by 4 (-> 64 B), gather axis 1 (64), slice. */
  CHECK_OK(ts_layout_init(&f, 3, (int[]){2, 2, 4}, 2, (int[]){1, 0}, 0));
  CHECK_OK(ts_layout_init(&t, 3, (int[]){2, 2, 4}, 2, (int[]){0, 2}, 0));
  expect_plan(__LINE__, "a move onto a held dim: allgather + slice when strictly cheaper", &g, 4, &f,
              &t, 4,
              (want_op[]){{AG_, 0, 1, -1, -1, 128},
                          {S_, -1, 1, -1, 2, 0},
                          {AG_, 1, 0, -1, -1, 64},
                          {S_, -1, 0, -1, 0, 0}},
              192);
  run_case(&g, &f, &t, 0, 1);
  ts_shape g3 = ts_shape3(8, 8, 16);
  CHECK_OK(ts_layout_init(&f, 3, (int[]){2, 2, 2}, 3, (int[]){0, 1, 2}, 0));
  CHECK_OK(ts_layout_init(&t, 3, (int[]){2, 2, 2}, 3, (int[]){1, 2, 0}, 0));
  expect_plan(__LINE__, "3-cycle of axes on 8x8x16 (local 4x4x8 = 512 B)", &g3, 4, &f, &t, 4,
              (want_op[]){{AG_, 0, 0, -1, -1, 512},
                          {AT_, 1, 0, 1, -1, 512},
                          {AT_, 2, 1, 2, -1, 512},
                          {S_, -1, 2, -1, 0, 0}},
              1536);
}

/* ---- the limits: 8 device axes, 8 dims, all 8 axes changing (3^8 planner states) ---- */
static void test_limits(void) {
  ts_layout f, t;
  ts_redist_plan p;
  int dev[8] = {2, 2, 2, 2, 2, 2, 2, 2}, fm[8], tm[8];
  int64_t dims[8] = {2, 2, 2, 2, 2, 2, 2, 4};
  ts_shape g = ts_shape_make(8, dims); /* 512 elements on 256 ranks: 2 floats each */
  for (int i = 0; i < 8; i++) fm[i] = i, tm[i] = (i + 1) % 8; /* one cycle through all 8 axes */
  CHECK_OK(ts_layout_init(&f, 8, dev, 8, fm, 0));
  CHECK_OK(ts_layout_init(&t, 8, dev, 8, tm, 0));
  double t0 = ts_time_now();
  CHECK_OK(ts_redist_plan_make(&g, 4, &f, &t, &p));
  double dt = ts_time_now() - t0;
  /* break the cycle with one gather (8 B -> 16 B), 7 alltoalls at 16 B (8 B each), one slice */
  CHECK_MSG(p.nops == 9 && p.ops[0].kind == TS_REDIST_ALLGATHER && p.ops[8].kind == TS_REDIST_SLICE &&
                close_enough(p.total_cost, 8 + 7 * 8),
            "8-cycle: %d ops, cost %g", p.nops, p.total_cost);
  run_case(&g, &f, &t, 0, 1);
  /* every axis partial -> every axis cutting a dim: 8 reduce-scatters */
  int none[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  CHECK_OK(ts_layout_init(&f, 8, dev, 8, none, 0xffu));
  CHECK_OK(ts_redist_plan_make(&g, 4, &f, &t, &p));
  int rs = 0;
  for (int k = 0; k < p.nops; k++) rs += p.ops[k].kind == TS_REDIST_REDUCE_SCATTER;
  CHECK_MSG(p.nops == 8 && rs == 8, "8 partial axes: %d ops, %d reduce-scatters", p.nops, rs);
  run_case(&g, &f, &t, 0, 0);
  printf("limits: 8 axes x 8 dims, an 8-cycle (9 ops, planned in %.1f ms) and 8 reduce-scatters, "
         "run on 256 simulated ranks\n", dt * 1e3);
}

/* ---- refused ---- */
static void test_refused(void) {
  ts_layout f, t;
  ts_redist_plan p;
  ts_shape g = ts_shape2(6, 12);
  CHECK_OK(ts_layout_init(&f, 2, (int[]){2, 3}, 2, (int[]){0, 1}, 0));
  CHECK_OK(ts_layout_init(&t, 2, (int[]){3, 2}, 2, (int[]){0, 1}, 0));
  int rc = ts_redist_plan_make(&g, 4, &f, &t, &p);
  CHECK_MSG(rc == TS_EUNSUPPORTED && strstr(ts_last_error(), "(2,3)") &&
                strstr(ts_last_error(), "(3,2)") && strstr(ts_last_error(), "no common refinement"),
            "(2,3) vs (3,2): %d %s", rc, ts_last_error());
  CHECK(p.nops == 0);

  /* (2,3) cuts rows in thirds, (6) in sixths whose index is 3*c0 + c1 on the refinement (2,3):
   * its first axis (2) would split the axis of 3 */
  g = ts_shape2(6, 6);
  CHECK_OK(ts_layout_init(&f, 2, (int[]){2, 3}, 2, (int[]){1, -1}, 0));
  CHECK_OK(ts_layout_init(&t, 1, (int[]){6}, 2, (int[]){0, -1}, 0));
  rc = ts_redist_plan_make(&g, 4, &f, &t, &p);
  CHECK_MSG(rc == TS_EUNSUPPORTED && strstr(ts_last_error(), "dim 0") &&
                strstr(ts_last_error(), "(2,3)") && strstr(ts_last_error(), "sub-dims"),
            "(2,3) map(1,-1) vs (6) map(0,-1): %d %s", rc, ts_last_error());

  g = ts_shape2(8, 16);
  CHECK_OK(ts_layout_init(&f, 1, (int[]){4}, 2, (int[]){0, -1}, 0));
  CHECK_OK(ts_layout_init(&t, 1, (int[]){8}, 2, (int[]){0, -1}, 0));
  rc = ts_redist_plan_make(&g, 4, &f, &t, &p);
  CHECK_MSG(rc == TS_EINVAL && strstr(ts_last_error(), "4 devices") && strstr(ts_last_error(), "8"),
            "4 vs 8 devices: %d %s", rc, ts_last_error());

  CHECK_OK(ts_layout_init(&t, 1, (int[]){4}, 3, (int[]){0, -1, -1}, 0));
  rc = ts_redist_plan_make(&g, 4, &f, &t, &p);
  CHECK_MSG(rc == TS_EINVAL && strstr(ts_last_error(), "2 dims"), "ndim: %d %s", rc, ts_last_error());

  CHECK_OK(ts_layout_init(&t, 1, (int[]){4}, 2, (int[]){-1, -1}, 1u));
  CHECK_OK(ts_layout_init(&f, 1, (int[]){4}, 2, (int[]){-1, -1}, 0));
  rc = ts_redist_plan_make(&g, 4, &f, &t, &p);
  CHECK_MSG(rc == TS_EINVAL && strstr(ts_last_error(), "axis 0") &&
                strstr(ts_last_error(), "partial in to"),
            "partial only in to: %d %s", rc, ts_last_error());

  g = ts_shape2(6, 16);
  CHECK_OK(ts_layout_init(&f, 1, (int[]){4}, 2, (int[]){0, -1}, 0));
  CHECK_OK(ts_layout_init(&t, 1, (int[]){4}, 2, (int[]){-1, 0}, 0));
  rc = ts_redist_plan_make(&g, 4, &f, &t, &p);
  CHECK_MSG(rc == TS_ESHAPE && strstr(ts_last_error(), "dim 0") && strstr(ts_last_error(), "size 6"),
            "indivisible: %d %s", rc, ts_last_error());

  g = ts_shape2(8, 16);
  rc = ts_redist_plan_make(&g, 0, &f, &t, &p);
  CHECK_MSG(rc == TS_EINVAL && strstr(ts_last_error(), "element size"), "esz 0: %d %s", rc,
            ts_last_error());
  f.tmap[1] = 0;
  rc = ts_redist_plan_make(&g, 4, &f, &t, &p);
  CHECK_MSG(rc == TS_EINVAL && strstr(ts_last_error(), "device axis 0"), "bad layout: %d %s", rc,
            ts_last_error());
  printf("refused: (2,3) vs (3,2), (2,3) vs (6) (a dim no sub-division expresses), device counts, ndim, partial "
         "only in to, indivisible, element size, invalid layout\n");
}

int main(void) {
  double t0 = ts_time_now();
  test_hand_plans();
  test_exhaustive();
  test_refinement();
  test_limits();
  test_refused();
  printf("%.2f s\n", ts_time_now() - t0);
  return ts_test_finish("test_redist");
}
