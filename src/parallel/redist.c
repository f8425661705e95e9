/* Redistribution planner: from one layout of a tensor to another (see include/tessera/layout.h and
 * docs/layout.md).
 *
 * 1. Rewrite. Equal device matrices: the layouts as given. Otherwise both layouts go onto the
 *    common refinement of the device matrices (an original axis becomes a run of refined axes),
 *    refined further while a cut point of one layout falls inside an axis of the other on some
 *    dim; a tensor dim cut by several refined axes is split into sub-dims (outermost first) so
 *    that in both layouts every (sub-)dim is cut by at most one axis.
 * 2. Classify the device axes whose role differs between from and to (the "changing" axes):
 *      P: partial in from, not in to      -> REDUCE_SCATTER onto its to-dim, or ALLREDUCE
 *      M: cuts dim i in from, not in to   -> ALLTOALL to its to-dim, or ALLGATHER
 *      N: unused in from, cuts dim j in to -> SLICE
 *    An axis P or M whose to-dim is set goes through FREE (neither cut nor partial) when it takes
 *    the ALLREDUCE / ALLGATHER road, then a SLICE finishes it.
 * 3. Every changing axis is in one of three states, ORIG (its from role), FREE, DONE (its to role);
 *    a state of the whole tensor is one digit per changing axis (base 3, at most 3^8 states), and
 *    fixes its tensor map, partial mask and local size. Every move raises one digit, so the states
 *    form a DAG in index order: a backward pass computes, from every state, the cheapest cost to
 *    the goal and the fewest ops at that cost; a forward walk from the start takes, at each step,
 *    the first move in the order SLICE < REDUCE_SCATTER < ALLREDUCE < ALLTOALL < ALLGATHER (then
 *    by axis) that stays on such a path. Costs are compared in units of 1/N byte (N = devices),
 *    where every ring formula is an integer, so ties are exact. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/layout.h"
#include "parallel_impl.h"

const char *ts_redist_kind_name(ts_redist_kind k) {
  switch (k) {
    case TS_REDIST_SLICE: return "slice";
    case TS_REDIST_REDUCE_SCATTER: return "reduce_scatter";
    case TS_REDIST_ALLREDUCE: return "allreduce";
    case TS_REDIST_ALLTOALL: return "alltoall";
    case TS_REDIST_ALLGATHER: return "allgather";
    default: return "?";
  }
}


/* ---- step 1: rewrite both layouts on a common device matrix and tensor shape ---- */

/* Refined axes [lo[x], hi[x]) of each axis x of the device matrix d[0..n-1] within r[0..nr-1]. */
static void axis_runs(int n, const int *d, int nr, const int *r, int *lo, int *hi) {
  int ri = 0;
  int64_t rp = 1, pp = 1;
  for (int x = 0; x < n; x++) {
    lo[x] = ri;
    pp *= d[x];
    while (rp < pp && ri < nr) rp *= r[ri++];
    hi[x] = ri;
  }
}

static void axes_str(int k, const int *ax, const int *r, char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = 0;
  if (!k) ts__app(buf, cap, &n, "nothing");
  for (int j = 0; j < k; j++) ts__app(buf, cap, &n, "%s%d (axis %d)", j ? " x " : "", r[ax[j]], ax[j]);
}

/* The refined axes cutting dim i in layout l (outermost first), given l's runs. */
static int dim_axes(const ts_layout *l, const int *lo, const int *hi, int i, int *ax) {
  int n = 0, x = l->tmap[i];
  if (x >= 0)
    for (int a = lo[x]; a < hi[x]; a++) ax[n++] = a;
  return n;
}

/* Cut points of a dim: the partial products before every axis but the first, in both layouts,
 * sorted, without repeats. */
static int dim_cuts(const int *r, int ax[2][TS_LAYOUT_MAX_AXES], const int *nax, int64_t *cut) {
  int ncut = 0;
  for (int k = 0; k < 2; k++) {
    int64_t p = 1;
    for (int j = 0; j + 1 < nax[k]; j++) {
      p *= r[ax[k][j]];
      int dup = 0;
      for (int c = 0; c < ncut; c++) dup |= cut[c] == p;
      if (!dup) cut[ncut++] = p;
    }
  }
  for (int c = 1; c < ncut; c++) /* insertion sort */
    for (int d = c; d > 0 && cut[d - 1] > cut[d]; d--) {
      int64_t t = cut[d];
      cut[d] = cut[d - 1];
      cut[d - 1] = t;
    }
  return ncut;
}

static int no_subdiv(const ts_shape *shape, const ts_layout *from, const ts_layout *to, int nr,
                     const int *r, int i, int ax[2][TS_LAYOUT_MAX_AXES], const int *nax) {
  char sf[160], st[160], rs[96], f1[128], t1[128], sh[96];
  size_t q = 0;
  rs[0] = 0;
  for (int a = 0; a < nr; a++) ts__app(rs, sizeof rs, &q, a ? ",%d" : "(%d", r[a]);
  ts__app(rs, sizeof rs, &q, ")");
  axes_str(nax[0], ax[0], r, f1, sizeof f1);
  axes_str(nax[1], ax[1], r, t1, sizeof t1);
  return ts_error_set(TS_EUNSUPPORTED,
                      "redistribution %s -> %s of %s: on the common device matrix %s, dim %d (size "
                      "%lld) is cut by %s in from and by %s in to, which no split of the dim into "
                      "sub-dims expresses with one axis per sub-dim",
                      ts_layout_str(from, sf, sizeof sf), ts_layout_str(to, st, sizeof st),
                      ts_shape_str(shape, sh, sizeof sh), rs, i, (long long)shape->dims[i], f1, t1);
}

static int rewrite(const ts_shape *shape, const ts_layout *from, const ts_layout *to, ts_shape *xs,
                   ts_layout *xf, ts_layout *xt) {
  int same = from->ndev == to->ndev;
  for (int a = 0; same && a < from->ndev; a++) same = from->dev[a] == to->dev[a];
  if (same) {
    *xs = *shape;
    *xf = *from;
    *xt = *to;
    return TS_OK;
  }
  char sf[160], st[160], sh[96];
  int r[TS_LAYOUT_MAX_AXES], nr = 0;
  int rc = ts_layout_common_devmat(from->ndev, from->dev, to->ndev, to->dev, &nr, r);
  if (rc)
    return ts_error_wrap(rc, "redistribution %s -> %s", ts_layout_str(from, sf, sizeof sf),
                         ts_layout_str(to, st, sizeof st));
  const ts_layout *L[2] = {from, to};
  ts_layout *X[2] = {xf, xt};
  int lo[2][TS_LAYOUT_MAX_AXES], hi[2][TS_LAYOUT_MAX_AXES];
  int ax[2][TS_LAYOUT_MAX_AXES], nax[2];
  int64_t cut[2 * TS_LAYOUT_MAX_AXES];

  /* Refine further while a cut point of one layout falls inside an axis of the other on some dim
   * (e.g. (8) map(0) vs (2,4) map(1): the 8 pieces are 2x4 on (2,4), whose cut point 2 splits
   * to's axis of 4, so the device matrix becomes (2,2,2)). */
  for (;;) {
    int split_axis = -1, split_at = 0;
    for (int k = 0; k < 2; k++) axis_runs(L[k]->ndev, L[k]->dev, nr, r, lo[k], hi[k]);
    for (int i = 0; i < shape->ndim && split_axis < 0; i++) {
      for (int k = 0; k < 2; k++) nax[k] = dim_axes(L[k], lo[k], hi[k], i, ax[k]);
      int ncut = dim_cuts(r, ax, nax, cut);
      for (int k = 0; k < 2 && split_axis < 0; k++) {
        int64_t p = 1;
        for (int j = 0; j < nax[k] && split_axis < 0; j++) {
          int64_t e = p * r[ax[k][j]];
          for (int c = 0; c < ncut && split_axis < 0; c++)
            if (cut[c] > p && cut[c] < e) {
              if (cut[c] % p || e % cut[c]) return no_subdiv(shape, from, to, nr, r, i, ax, nax);
              split_axis = ax[k][j];
              split_at = (int)(cut[c] / p);
            }
          p = e;
        }
      }
    }
    if (split_axis < 0) break;
    if (nr >= TS_LAYOUT_MAX_AXES)
      return ts_error_set(TS_EUNSUPPORTED,
                          "redistribution %s -> %s of %s: expressing both layouts needs more than "
                          "%d device axes",
                          ts_layout_str(from, sf, sizeof sf), ts_layout_str(to, st, sizeof st),
                          ts_shape_str(shape, sh, sizeof sh), TS_LAYOUT_MAX_AXES);
    for (int a = nr; a > split_axis + 1; a--) r[a] = r[a - 1];
    r[split_axis + 1] = r[split_axis] / split_at;
    r[split_axis] = split_at;
    nr++;
  }

  for (int k = 0; k < 2; k++) {
    memset(X[k], 0, sizeof *X[k]);
    X[k]->ndev = nr;
    for (int a = 0; a < nr; a++) X[k]->dev[a] = r[a];
    for (int i = 0; i < TS_MAX_DIMS; i++) X[k]->tmap[i] = -1;
    for (int x = 0; x < L[k]->ndev; x++)
      if (L[k]->partial & (1u << x))
        for (int a = lo[k][x]; a < hi[k][x]; a++) X[k]->partial |= 1u << a;
  }
  ts_shape s;
  memset(&s, 0, sizeof s);
  for (int i = 0; i < shape->ndim; i++) {
    for (int k = 0; k < 2; k++) nax[k] = dim_axes(L[k], lo[k], hi[k], i, ax[k]);
    int ncut = dim_cuts(r, ax, nax, cut);
    int64_t n = shape->dims[i];
    int ok = 1;
    for (int c = 0; c < ncut && ok; c++) ok = (c ? cut[c] % cut[c - 1] : 0) == 0 && n % cut[c] == 0;
    if (!ok) return no_subdiv(shape, from, to, nr, r, i, ax, nax);
    int first = s.ndim;
    if (first + ncut + 1 > TS_MAX_DIMS)
      return ts_error_set(TS_EUNSUPPORTED,
                          "redistribution %s -> %s of %s: on the common device matrix the tensor "
                          "needs more than %d (sub-)dims",
                          ts_layout_str(from, sf, sizeof sf), ts_layout_str(to, st, sizeof st),
                          ts_shape_str(shape, sh, sizeof sh), TS_MAX_DIMS);
    int64_t prev = 1;
    for (int c = 0; c < ncut; c++) s.dims[s.ndim++] = cut[c] / prev, prev = cut[c];
    s.dims[s.ndim++] = n / prev;
    /* place each layout's axes: axis j starts at the sub-dim after the partial product of the
     * axes before it, and must divide that sub-dim */
    for (int k = 0; k < 2 && ok; k++) {
      int64_t p = 1;
      for (int j = 0; j < nax[k] && ok; j++) {
        int sub = 0;
        if (p > 1) {
          while (sub < ncut && cut[sub] != p) sub++;
          sub++;
        }
        int a = ax[k][j];
        ok = s.dims[first + sub] % r[a] == 0;
        X[k]->tmap[first + sub] = a;
        p *= r[a];
      }
    }
    if (!ok) return no_subdiv(shape, from, to, nr, r, i, ax, nax);
  }
  xf->ndim = xt->ndim = s.ndim;
  *xs = s;
  rc = ts_layout_check_shape(xf, xs);
  if (!rc) rc = ts_layout_check_shape(xt, xs);
  return rc;
}

/* ---- steps 2 and 3: search over the states of the changing axes ---- */

enum { T_P, T_M, T_N };           /* classes of changing axes */
enum { ORIG = 0, FREE = 1, DONE = 2 };

typedef struct {
  const ts_layout *from, *to;
  const ts_shape *shape;
  size_t esz;
  int nd;          /* devices */
  int nax;         /* changing axes */
  int ax[TS_LAYOUT_MAX_AXES], type[TS_LAYOUT_MAX_AXES];
  int fdim[TS_LAYOUT_MAX_AXES], tdim[TS_LAYOUT_MAX_AXES];
  int pow3[TS_LAYOUT_MAX_AXES + 1];
  ts_layout base;  /* the unchanging axes only */
} search;

static int digit(const search *S, int st, int k) { return st / S->pow3[k] % 3; }

/* The layout of state st; 0 if the state is impossible (two axes on one dim, or a digit the
 * axis never takes). */
static int state_layout(const search *S, int st, ts_layout *out) {
  ts_layout l = S->base;
  for (int k = 0; k < S->nax; k++) {
    int d = digit(S, st, k), a = S->ax[k];
    if (S->type[k] == T_N && d == ORIG) return 0;
    if (S->type[k] != T_N && d == FREE && S->tdim[k] < 0) return 0;
    if (d == ORIG && S->type[k] == T_P) l.partial |= 1u << a;
    int dim = d == ORIG && S->type[k] == T_M ? S->fdim[k] : d == DONE ? S->tdim[k] : -1;
    if (dim >= 0) {
      if (l.tmap[dim] >= 0) return 0;
      l.tmap[dim] = a;
    }
  }
  *out = l;
  return 1;
}

static int64_t local_bytes(const search *S, const ts_layout *l) {
  int64_t n = (int64_t)S->esz;
  for (int i = 0; i < S->shape->ndim; i++)
    n *= l->tmap[i] >= 0 ? S->shape->dims[i] / l->dev[l->tmap[i]] : S->shape->dims[i];
  return n;
}

typedef struct {
  ts_redist_kind kind;
  int k;      /* changing axis index */
  int next;   /* state after */
  double units; /* cost in 1/N bytes */
} move;

/* The moves of state st (whose layout is cur), in tie-break order; returns their count. */
static int moves(const search *S, int st, const ts_layout *cur, move *mv) {
  int n = 0;
  double s = (double)local_bytes(S, cur);
  for (int kind = 0; kind < TS_REDIST_KIND_COUNT; kind++)
    for (int k = 0; k < S->nax; k++) {
      int d = digit(S, st, k), t = S->type[k], j = S->tdim[k];
      int g = S->from->dev[S->ax[k]];
      double per = (double)(S->nd / g); /* N/g: an integer */
      int to_done = -1;
      double units = 0;
      switch ((ts_redist_kind)kind) {
        case TS_REDIST_SLICE:
          if (d == FREE && cur->tmap[j] < 0) to_done = DONE, units = 0;
          break;
        case TS_REDIST_REDUCE_SCATTER:
          if (d == ORIG && t == T_P && j >= 0 && cur->tmap[j] < 0)
            to_done = DONE, units = (g - 1) * s * per;
          break;
        case TS_REDIST_ALLREDUCE:
          if (d == ORIG && t == T_P) to_done = j >= 0 ? FREE : DONE, units = 2.0 * (g - 1) * s * per;
          break;
        case TS_REDIST_ALLTOALL:
          if (d == ORIG && t == T_M && j >= 0 && cur->tmap[j] < 0)
            to_done = DONE, units = (g - 1) * s * per;
          break;
        case TS_REDIST_ALLGATHER:
          if (d == ORIG && t == T_M) to_done = j >= 0 ? FREE : DONE, units = (g - 1) * s * S->nd;
          break;
        default: break;
      }
      if (to_done < 0) continue;
      mv[n].kind = (ts_redist_kind)kind;
      mv[n].k = k;
      mv[n].next = st + (to_done - d) * S->pow3[k];
      mv[n].units = units;
      n++;
    }
  return n;
}

/* Compares two costs in units; equal within rounding (they are integers below 2^53 for any
 * realistic tensor, so normally exact). */
static int cost_cmp(double a, double b) {
  double tol = 1e-12 * (fabs(a) > fabs(b) ? fabs(a) : fabs(b));
  return a < b - tol ? -1 : a > b + tol ? 1 : 0;
}

static void fill_op(const search *S, const move *m, const ts_layout *cur, ts_redist_op *op) {
  int k = m->k, a = S->ax[k];
  memset(op, 0, sizeof *op);
  op->kind = m->kind;
  op->axis = m->kind == TS_REDIST_SLICE ? -1 : a;
  op->slice_axis = m->kind == TS_REDIST_SLICE ? a : -1;
  op->dim = -1;
  op->dim2 = -1;
  op->group = S->from->dev[a];
  switch (m->kind) {
    case TS_REDIST_SLICE:
    case TS_REDIST_REDUCE_SCATTER: op->dim = S->tdim[k]; break;
    case TS_REDIST_ALLTOALL: op->dim = S->tdim[k], op->dim2 = S->fdim[k]; break;
    case TS_REDIST_ALLGATHER: op->dim = S->fdim[k]; break;
    default: break;
  }
  state_layout(S, m->next, &op->after);
  op->in_bytes = local_bytes(S, cur);
  op->out_bytes = local_bytes(S, &op->after);
  double g = op->group, s = (double)op->in_bytes;
  switch (m->kind) {
    case TS_REDIST_ALLGATHER: op->cost = (g - 1) * s; break;
    case TS_REDIST_REDUCE_SCATTER:
    case TS_REDIST_ALLTOALL: op->cost = (g - 1) * s / g; break;
    case TS_REDIST_ALLREDUCE: op->cost = 2 * (g - 1) * s / g; break;
    default: op->cost = 0; break;
  }
}

int ts_redist_plan_make(const ts_shape *shape, size_t elem_size, const ts_layout *from,
                        const ts_layout *to, ts_redist_plan *plan) {
  if (!plan) return ts_error_set(TS_EINVAL, "redist_plan_make: plan is NULL");
  memset(plan, 0, sizeof *plan);
  if (!shape || !from || !to)
    return ts_error_set(TS_EINVAL, "redist_plan_make: shape, from or to is NULL");
  if (elem_size == 0) return ts_error_set(TS_EINVAL, "redist_plan_make: element size is 0");
  char sf[160], st[160], sh[96]; /* the messages' names, formatted only on the way out (NAMES(): the
                                  * planner's search makes plans by the hundred thousand) */
#define NAMES() (ts_layout_str(from, sf, sizeof sf), ts_layout_str(to, st, sizeof st), ts_shape_str(shape, sh, sizeof sh))
  int rc = ts_layout_validate(from);
  if (!rc) rc = ts_layout_validate(to);
  if (rc) return ts_error_wrap(rc, "redistribution");
  if (from->ndim != to->ndim)
    return NAMES(), ts_error_set(TS_EINVAL, "redistribution %s -> %s: from has %d dims, to has %d", sf, st,
                        from->ndim, to->ndim);
  if (ts_layout_ndevices(from) != ts_layout_ndevices(to))
    return NAMES(), ts_error_set(TS_EINVAL, "redistribution %s -> %s: from has %d devices, to has %d", sf,
                        st, ts_layout_ndevices(from), ts_layout_ndevices(to));
  rc = ts_layout_check_shape(from, shape);
  if (!rc) rc = ts_layout_check_shape(to, shape);
  if (rc) return NAMES(), ts_error_wrap(rc, "redistribution %s -> %s", sf, st);

  ts_shape xs;
  ts_layout xf, xt;
  rc = rewrite(shape, from, to, &xs, &xf, &xt);
  if (rc) return rc;
  for (int a = 0; a < xf.ndev; a++)
    if ((xt.partial & (1u << a)) && !(xf.partial & (1u << a))) {
      char on[400] = "", xl[160], xl2[160];
      int same = xf.ndev == from->ndev;
      for (int x = 0; same && x < xf.ndev; x++) same = xf.dev[x] == from->dev[x];
      if (!same)
        snprintf(on, sizeof on, " (on the common device matrix: %s -> %s)",
                 ts_layout_str(&xf, xl, sizeof xl), ts_layout_str(&xt, xl2, sizeof xl2));
      return NAMES(), ts_error_set(TS_EINVAL,
                          "redistribution %s -> %s of %s: device axis %d%s is partial in to but "
                          "not in from (partial sums come from compute, not from redistribution)",
                          sf, st, sh, a, on);
    }
  plan->shape = xs;
  plan->orig_shape = *shape;
  plan->from = xf;
  plan->to = xt;

  search S;
  memset(&S, 0, sizeof S);
  S.from = &xf;
  S.to = &xt;
  S.shape = &xs;
  S.esz = elem_size;
  S.nd = ts_layout_ndevices(&xf);
  S.base = xf;
  S.base.partial = xf.partial & xt.partial;
  for (int i = 0; i < xs.ndim; i++) S.base.tmap[i] = -1;
  int fdim[TS_LAYOUT_MAX_AXES], tdim[TS_LAYOUT_MAX_AXES];
  for (int a = 0; a < xf.ndev; a++) fdim[a] = tdim[a] = -1;
  for (int i = 0; i < xs.ndim; i++) {
    if (xf.tmap[i] >= 0) fdim[xf.tmap[i]] = i;
    if (xt.tmap[i] >= 0) tdim[xt.tmap[i]] = i;
  }
  int start = 0;
  S.pow3[0] = 1;
  for (int a = 0; a < xf.ndev; a++) {
    int pf = (xf.partial >> a) & 1, pt = (xt.partial >> a) & 1;
    if (pf && pt) continue;               /* stays partial */
    if (fdim[a] >= 0 && fdim[a] == tdim[a]) { /* stays on its dim */
      S.base.tmap[fdim[a]] = a;
      continue;
    }
    if (!pf && fdim[a] < 0 && tdim[a] < 0) continue; /* unused in both */
    int k = S.nax++;
    S.ax[k] = a;
    S.type[k] = pf ? T_P : fdim[a] >= 0 ? T_M : T_N;
    S.fdim[k] = fdim[a];
    S.tdim[k] = tdim[a];
    S.pow3[k + 1] = S.pow3[k] * 3;
    if (S.type[k] == T_N) start += S.pow3[k]; /* starts FREE */
  }
  int nstates = S.pow3[S.nax], goal = nstates - 1;
  /* togo[s]: cheapest cost (units) from s to the goal; nop[s]: fewest ops among those plans */
  double *togo = malloc((size_t)nstates * sizeof *togo);
  unsigned char *nop = malloc((size_t)nstates);
  if (!togo || !nop) {
    free(togo);
    free(nop);
    return NAMES(), ts_error_set(TS_ENOMEM, "redistribution %s -> %s: out of memory", sf, st);
  }
  move mv[4 * TS_LAYOUT_MAX_AXES];
  for (int s = nstates - 1; s >= 0; s--) {
    togo[s] = INFINITY;
    nop[s] = 255;
    ts_layout cur;
    if (!state_layout(&S, s, &cur)) continue;
    if (s == goal) {
      togo[s] = 0;
      nop[s] = 0;
      continue;
    }
    int nm = moves(&S, s, &cur, mv);
    for (int m = 0; m < nm; m++) {
      int nx = mv[m].next;
      if (!(togo[nx] < INFINITY)) continue;
      double c = mv[m].units + togo[nx];
      int cmp = cost_cmp(c, togo[s]);
      if (cmp < 0 || (cmp == 0 && nop[nx] + 1 < nop[s])) togo[s] = c, nop[s] = (unsigned char)(nop[nx] + 1);
    }
  }
  int s = start;
  rc = TS_OK;
  if (!(togo[s] < INFINITY)) /* cannot happen: an ORIG axis can always be gathered/reduced */
    rc = (NAMES(), ts_error_set(TS_EUNSUPPORTED, "redistribution %s -> %s of %s: no plan found", sf, st, sh));
  while (!rc && s != goal) {
    ts_layout cur;
    state_layout(&S, s, &cur);
    int nm = moves(&S, s, &cur, mv), pick = -1;
    for (int m = 0; m < nm && pick < 0; m++) {
      int nx = mv[m].next;
      if (togo[nx] < INFINITY && cost_cmp(mv[m].units + togo[nx], togo[s]) == 0 &&
          nop[nx] + 1 == nop[s])
        pick = m;
    }
    if (pick < 0 || plan->nops >= TS_REDIST_MAX_OPS) { /* cannot happen */
      rc = (NAMES(), ts_error_set(TS_EUNSUPPORTED, "redistribution %s -> %s of %s: planner lost its way", sf,
                        st, sh));
      break;
    }
    ts_redist_op *op = &plan->ops[plan->nops++];
    fill_op(&S, &mv[pick], &cur, op);
    plan->total_cost += op->cost;
    s = mv[pick].next;
  }
  free(togo);
  free(nop);
  if (rc) {
    plan->nops = 0;
    plan->total_cost = 0;
  }
  return rc;
#undef NAMES
}

char *ts_redist_op_str(const ts_redist_op *op, char *buf, size_t cap) {
  if (!buf || !cap) return buf;
  size_t n = 0;
  buf[0] = 0;
  if (!op) {
    ts__app(buf, cap, &n, "(null op)");
    return buf;
  }
  ts__app(buf, cap, &n, "%s", ts_redist_kind_name(op->kind));
  switch (op->kind) {
    case TS_REDIST_SLICE: ts__app(buf, cap, &n, " dim %d by axis %d", op->dim, op->slice_axis); break;
    case TS_REDIST_ALLREDUCE: ts__app(buf, cap, &n, " axis %d", op->axis); break;
    case TS_REDIST_REDUCE_SCATTER:
    case TS_REDIST_ALLGATHER: ts__app(buf, cap, &n, " axis %d dim %d", op->axis, op->dim); break;
    case TS_REDIST_ALLTOALL:
      ts__app(buf, cap, &n, " axis %d split dim %d concat dim %d", op->axis, op->dim, op->dim2);
      break;
    default: break;
  }
  ts__app(buf, cap, &n, " (g=%d, %lld B -> %lld B, cost %.10g)", op->group, (long long)op->in_bytes,
      (long long)op->out_bytes, op->cost);
  return buf;
}

char *ts_redist_plan_str(const ts_redist_plan *plan, char *buf, size_t cap) {
  if (!buf || !cap) return buf;
  size_t n = 0;
  buf[0] = 0;
  if (!plan) {
    ts__app(buf, cap, &n, "(null plan)");
    return buf;
  }
  char a[160], b[160], s1[96], s2[96], o[192];
  ts__app(buf, cap, &n, "%s %s -> %s", ts_shape_str(&plan->shape, s1, sizeof s1),
      ts_layout_str(&plan->from, a, sizeof a), ts_layout_str(&plan->to, b, sizeof b));
  if (!ts_shape_equal(&plan->shape, &plan->orig_shape))
    ts__app(buf, cap, &n, " (tensor %s)", ts_shape_str(&plan->orig_shape, s2, sizeof s2));
  ts__app(buf, cap, &n, ": %d op%s, %.10g bytes per rank", plan->nops, plan->nops == 1 ? "" : "s",
      plan->total_cost);
  for (int k = 0; k < plan->nops; k++)
    ts__app(buf, cap, &n, "\n  %d. %s", k + 1, ts_redist_op_str(&plan->ops[k], o, sizeof o));
  return buf;
}
