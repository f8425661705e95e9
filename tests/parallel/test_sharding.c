/* Operator sharding rules (ts_shard_rule) checked by running the sharded op on simulated ranks.
 *
 * For each op and every strategy over a set of cuts (valid or not) and device counts: the rule
 * must accept exactly the strategies an independent oracle accepts (every cut divides its dim,
 * shared dims cut alike, forbidden dims uncut, the product of the cuts divides the device count)
 * and refuse the others with the expected code and a message naming op, input, dim and sizes.
 * When accepted: the device matrix and tensor maps must be MindSpore's construction (repeat axis
 * first when > 1, then the op's loop axes), and the numbers must work: each simulated rank gets
 * its slices of full random integer-valued inputs (tests/parallel/redist_sim.h, independent of
 * the library's slicing), computes the op locally with a tiny kernel of this file, the local
 * output must have the shape the output layout gives, and redistributing it to replicated with
 * ts_redist_plan_make run on the simulated ranks (partial sums settled by its allreduces) must
 * give every rank exactly the op applied to the full inputs, with the same bits on every rank
 * (softmax, layernorm, attention compute each row or head whole, in the same order on a rank as
 * on the full tensor, so they too compare exactly; batchnorm's synchronised statistics are sums
 * of integers). Where an op communicates inside (batchnorm's SyncBatchNorm over the batch axis,
 * cross-entropy's vocabulary-parallel collectives over the class axis), the kernel simulates
 * those collectives from each group member's own slice. Dense's bias is added after the partial
 * sums are settled. Cross-entropy alone is compared within a tolerance (sums of exps and the sum
 * over the row blocks round differently). */
#include <stdlib.h>
#include <string.h>

#include "redist_sim.h"
#include "parallel/sharding.h"
#include "test_util.h"

static int n_accepted, n_refused, n_sims, n_partial_sims;

/* ---------------------------------------------------------------- helpers */

static int64_t numel(const ts_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->ndim; i++) n *= s->dims[i];
  return n;
}

static ts_shape shp(int nd, const int64_t *d) {
  ts_shape s;
  memset(&s, 0, sizeof s);
  s.ndim = nd;
  for (int i = 0; i < nd; i++) s.dims[i] = d[i];
  return s;
}

/* Small random integers in [lo, hi] from (seed, index): exact in f32 through every sum here. */
static void fill_int(float *x, int64_t n, uint64_t seed, int lo, int hi) {
  for (int64_t i = 0; i < n; i++) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + (uint64_t)i * 0xBF58476D1CE4E5B9ull + 1;
    z ^= z >> 31;
    z *= 0x94D049BB133111EBull;
    z ^= z >> 29;
    x[i] = (float)(lo + (int)(z % (uint64_t)(hi - lo + 1)));
  }
}

static ts_op_strategy strat(int nin, const int *ndim, const int64_t *cuts_flat) {
  ts_op_strategy s;
  memset(&s, 0, sizeof s);
  s.ninputs = nin;
  for (int i = 0, k = 0; i < nin; i++) {
    s.ndim[i] = ndim[i];
    for (int d = 0; d < ndim[i]; d++) s.cuts[i][d] = cuts_flat[k++];
  }
  return s;
}

/* Every substring must occur in the last error message. */
static int msg_has(const char *const *subs) {
  for (int i = 0; subs && subs[i]; i++)
    if (!strstr(ts_last_error(), subs[i])) return 0;
  return 1;
}

/* Checks the layout has device matrix `dev` and map `tmap` and partial mask `partial`. */
static int layout_is(const ts_layout *l, int ndev, const int *dev, int ndim, const int *tmap,
                     unsigned partial) {
  ts_layout e;
  if (ts_layout_init(&e, ndev, dev, ndim, tmap, partial)) return 0;
  return ts_layout_equal(l, &e);
}

/* A rank's local computation: inputs in[i] of local shapes lsh[i] (layouts lin, for offsets);
 * writes the local output and its shape. */
typedef void (*local_fn)(const void *ctx, int rank, const ts_layout *lin, const ts_shape *lsh,
                         float *const *in, ts_shape *osh, float *out);

/* Global index offset of `rank`'s block of dim d of a tensor of local size n under l. */
static int64_t block_off(const ts_layout *l, int rank, int d, int64_t nlocal) {
  int c[TS_LAYOUT_MAX_AXES];
  sim_coords(l, rank, c);
  return l->tmap[d] >= 0 ? c[l->tmap[d]] * nlocal : 0;
}

/* After the output's partial sums are settled (same map, no partial axis), a rank's local
 * output `out` (local shape osh) gets a further local step with its input slices `in`
 * (the dense bias, added after the reduction as the parallel pass does). */
typedef void (*post_fn)(const void *ctx, const ts_shape *lsh, float *const *in,
                        const ts_shape *osh, float *out);

typedef struct {
  double tol;   /* 0: bitwise equal to the full op; else |got - want| <= tol * (1 + |want|) */
  post_fn post; /* NULL: none */
} sim_opts;

/* Runs the plan from -> to (same device matrix) on the simulated ranks' buffers, swapping
 * *cur and *nxt per op. Returns 1 if it made and applied. */
static int run_plan(const char *what, const ts_layout *from, const ts_layout *to,
                    const ts_shape *shape, float ***cur, float ***nxt) {
  static ts_redist_plan plan;
  int rc = ts_redist_plan_make(shape, sizeof(float), from, to, &plan);
  CHECK_MSG(rc == TS_OK, "%s: plan: %s", what, ts_last_error());
  if (rc != TS_OK || !ts_shape_equal(&plan.shape, shape)) return 0;
  ts_layout before = plan.from;
  ts_shape ls = sim_local(from, shape);
  for (int k = 0; k < plan.nops; k++) {
    int ok = sim_apply(&before, &ls, &plan.ops[k], *cur, *nxt) == 0;
    CHECK_MSG(ok, "%s: plan op %d does not apply", what, k);
    if (!ok) return 0;
    float **t = *cur;
    *cur = *nxt, *nxt = t;
    ls = sim_out_shape(&plan.ops[k], ls);
    before = plan.ops[k].after;
  }
  return 1;
}

/* Runs the op sharded on simulated ranks and compares with the op on the full inputs.
 * Returns 1 if every rank ends with the full output, and all ranks with the same bits. */
static int simulate_ex(const char *what, const ts_layout *lin, const ts_shape *shapes, int nin,
                       float *const *full, const ts_layout *lout, const ts_shape *oshape,
                       local_fn fn, const void *ctx, const sim_opts *opt) {
  static const sim_opts none = {0, NULL};
  if (!opt) opt = &none;
  int P = sim_ndev(lout), ok = 1;
  int64_t no = numel(oshape);
  float *want = malloc((size_t)(no ? no : 1) * sizeof(float));
  float **cur = malloc((size_t)P * sizeof(float *)), **nxt = malloc((size_t)P * sizeof(float *));
  float *loc[TS_STRATEGY_MAX_INPUTS] = {0};
  ts_shape lsh[TS_STRATEGY_MAX_INPUTS], osh;
  if (!want || !cur || !nxt) abort();
  /* reference: the same kernel on the full inputs, one device */
  ts_layout one[TS_STRATEGY_MAX_INPUTS];
  for (int i = 0; i < nin; i++) ts_layout_replicated(&one[i], 1, (int[]){1}, shapes[i].ndim);
  fn(ctx, 0, one, shapes, full, &osh, want);
  if (opt->post) opt->post(ctx, shapes, full, &osh, want);
  CHECK_MSG(ts_shape_equal(&osh, oshape), "%s: the rule's output shape differs from the op's",
            what);
  for (int i = 0; i < nin; i++) {
    loc[i] = malloc((size_t)(numel(&shapes[i]) ? numel(&shapes[i]) : 1) * sizeof(float));
    if (!loc[i]) abort();
  }
  ts_shape lo = sim_local(lout, oshape);
  for (int r = 0; r < P; r++) {
    cur[r] = malloc((size_t)(no ? no : 1) * sizeof(float));
    nxt[r] = malloc((size_t)(no ? no : 1) * sizeof(float));
    if (!cur[r] || !nxt[r]) abort();
    for (int i = 0; i < nin; i++) {
      lsh[i] = sim_local(&lin[i], &shapes[i]);
      sim_slice(&lin[i], &shapes[i], full[i], r, loc[i]);
    }
    fn(ctx, r, lin, lsh, loc, &osh, cur[r]);
    if (!ts_shape_equal(&osh, &lo)) {
      CHECK_MSG(0, "%s: rank %d's local output shape differs from the output layout's", what, r);
      ok = 0;
    }
  }
  ts_layout from = *lout, rep;
  if (ok && opt->post) { /* settle the partial sums, then the local step on every rank */
    ts_layout settled = *lout;
    settled.partial = 0;
    ok = run_plan(what, lout, &settled, oshape, &cur, &nxt);
    for (int r = 0; ok && r < P; r++) {
      for (int i = 0; i < nin; i++) {
        lsh[i] = sim_local(&lin[i], &shapes[i]);
        sim_slice(&lin[i], &shapes[i], full[i], r, loc[i]);
      }
      opt->post(ctx, lsh, loc, &lo, cur[r]);
    }
    from = settled;
  }
  if (ok) {
    ts_layout_replicated(&rep, lout->ndev, lout->dev, oshape->ndim);
    ok = run_plan(what, &from, &rep, oshape, &cur, &nxt);
    for (int r = 0; ok && r < P; r++)
      for (int64_t e = 0; e < no; e++) {
        float g = cur[r][e], w = want[e];
        int bad = opt->tol ? !(fabs((double)g - w) <= opt->tol * (1 + fabs((double)w))) : g != w;
        if (bad || memcmp(&cur[r][e], &cur[0][e], sizeof(float))) {
          CHECK_MSG(0, "%s: rank %d element %lld = %.9g (rank 0 %.9g), full op gives %.9g", what,
                    r, (long long)e, g, cur[0][e], w);
          ok = 0;
          break;
        }
      }
    if (ok) ts_test_checks++;
    n_sims++;
    if (lout->partial) n_partial_sims++;
  }
  for (int r = 0; r < P; r++) free(cur[r]), free(nxt[r]);
  for (int i = 0; i < nin; i++) free(loc[i]);
  free(cur), free(nxt), free(want);
  return ok;
}

static int simulate(const char *what, const ts_layout *lin, const ts_shape *shapes, int nin,
                    float *const *full, const ts_layout *lout, const ts_shape *oshape,
                    local_fn fn, const void *ctx) {
  return simulate_ex(what, lin, shapes, nin, full, lout, oshape, fn, ctx, NULL);
}

/* Calls the rule; when the oracle expects refusal (want_rc != 0), checks code and message. */
static int call_rule(const char *what, ts_shard_op op, const ts_op_strategy *s, int ndev,
                     const ts_shape *shapes, int nin, const int *attrs, int want_rc,
                     const char *const *subs, ts_layout *lin, ts_layout *lout, ts_shape *osh) {
  int rc = ts_shard_rule(op, s, ndev, shapes, nin, attrs, lin, lout, osh);
  if (want_rc) {
    n_refused++;
    CHECK_MSG(rc == want_rc && msg_has(subs), "%s: expected refusal %d, got %d (%s)", what,
              want_rc, rc, ts_last_error());
    if (rc == want_rc) CHECK_MSG(strstr(ts_last_error(), ts_shard_op_name(op)) == ts_last_error(),
                                 "%s: message does not start with the op: %s", what, ts_last_error());
    return 0;
  }
  CHECK_MSG(rc == TS_OK, "%s: refused: %s", what, ts_last_error());
  if (rc) return 0;
  n_accepted++;
  for (int i = 0; i < nin; i++) CHECK_OK(ts_layout_check_shape(&lin[i], &shapes[i]));
  CHECK_OK(ts_layout_check_shape(lout, osh));
  for (int i = 0; i < nin; i++) CHECK(ts_layout_ndevices(&lin[i]) == ndev);
  CHECK(ts_layout_ndevices(lout) == ndev);
  return 1;
}

/* Expected device matrix: [rep if > 1] + loop cuts. Returns the axis offset (0 or 1). */
static int exp_dev(int ndev, int nloop, const int64_t *cuts, int *nd, int *dev) {
  int64_t p = 1;
  for (int a = 0; a < nloop; a++) p *= cuts[a];
  int rep = ndev / (int)p, off = rep > 1;
  *nd = 0;
  if (off) dev[(*nd)++] = rep;
  for (int a = 0; a < nloop; a++) dev[(*nd)++] = (int)cuts[a];
  return off;
}

static int divides_dev(int ndev, int nloop, const int64_t *cuts) {
  int64_t p = 1;
  for (int a = 0; a < nloop; a++) p *= cuts[a];
  return p <= ndev && ndev % p == 0;
}

/* ---------------------------------------------------------------- local kernels
 * (each takes the local_fn arguments; some ignore ctx, rank or lin) */

static void k_matmul(const void *ctx, int rank, const ts_layout *lin, const ts_shape *sh,
                     float *const *in, ts_shape *osh, float *out) {
  (void)ctx, (void)rank, (void)lin;
  int64_t M = sh[0].dims[0], K = sh[0].dims[1], N = sh[1].dims[1];
  *osh = shp(2, (int64_t[]){M, N});
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      float acc = 0;
      for (int64_t k = 0; k < K; k++) acc += in[0][i * K + k] * in[1][k * N + j];
      out[i * N + j] = acc;
    }
}

static void k_dense(const void *ctx, int rank, const ts_layout *lin, const ts_shape *sh,
                    float *const *in, ts_shape *osh, float *out) {
  (void)ctx, (void)rank, (void)lin;
  int nd = sh[0].ndim;
  int64_t K = sh[0].dims[nd - 1], O = sh[1].dims[0], R = numel(&sh[0]) / K;
  *osh = sh[0];
  osh->dims[nd - 1] = O;
  for (int64_t r = 0; r < R; r++)
    for (int64_t o = 0; o < O; o++) {
      float acc = 0;
      for (int64_t k = 0; k < K; k++) acc += in[0][r * K + k] * in[1][o * K + k];
      out[r * O + o] = acc;
    }
}

typedef struct {
  unsigned mask;
  int keep;
} reduce_ctx;

static void k_reduce_sum(const void *ctx, int rank, const ts_layout *lin, const ts_shape *sh,
                         float *const *in, ts_shape *osh, float *out) {
  (void)ctx, (void)rank, (void)lin;
  const reduce_ctx *c = ctx;
  const ts_shape *x = &sh[0];
  int j = 0;
  for (int d = 0; d < x->ndim; d++)
    if (!(c->mask & (1u << d))) osh->dims[j++] = x->dims[d];
    else if (c->keep) osh->dims[j++] = 1;
  osh->ndim = j;
  int64_t no = numel(osh), n = numel(x);
  for (int64_t e = 0; e < no; e++) out[e] = 0;
  for (int64_t e = 0; e < n; e++) {
    int64_t rem = e, idx[TS_MAX_DIMS], oi = 0;
    for (int d = x->ndim - 1; d >= 0; d--) idx[d] = rem % x->dims[d], rem /= x->dims[d];
    for (int d = 0; d < x->ndim; d++) {
      if (!(c->mask & (1u << d))) oi = oi * x->dims[d] + idx[d];
    }
    out[oi] += in[0][e];
  }
}

static void k_binary_mul(const void *ctx, int rank, const ts_layout *lin, const ts_shape *sh,
                         float *const *in, ts_shape *osh, float *out) {
  (void)ctx, (void)rank, (void)lin;
  int na = sh[0].ndim, nb = sh[1].ndim, no = na > nb ? na : nb;
  osh->ndim = no;
  for (int j = 0; j < no; j++) {
    int64_t da = j - (no - na) >= 0 ? sh[0].dims[j - (no - na)] : 1;
    int64_t db = j - (no - nb) >= 0 ? sh[1].dims[j - (no - nb)] : 1;
    osh->dims[j] = da > db ? da : db;
  }
  int64_t n = numel(osh);
  for (int64_t e = 0; e < n; e++) {
    int64_t rem = e, idx[TS_MAX_DIMS], ia = 0, ib = 0;
    for (int j = no - 1; j >= 0; j--) idx[j] = rem % osh->dims[j], rem /= osh->dims[j];
    for (int j = no - na; j < no; j++) {
      int64_t s = sh[0].dims[j - (no - na)];
      ia = ia * s + (s == 1 ? 0 : idx[j]);
    }
    for (int j = no - nb; j < no; j++) {
      int64_t s = sh[1].dims[j - (no - nb)];
      ib = ib * s + (s == 1 ? 0 : idx[j]);
    }
    out[e] = in[0][ia] * in[1][ib];
  }
}

/* Vocabulary-parallel lookup: the local table holds rows [v0, v0+Vl); ids outside give zeros. */
static void k_embedding(const void *ctx, int rank, const ts_layout *lin, const ts_shape *sh,
                        float *const *in, ts_shape *osh, float *out) {
  (void)ctx, (void)rank, (void)lin;
  int64_t B = numel(&sh[0]), Vl = sh[1].dims[0], Dl = sh[1].dims[1];
  int64_t v0 = block_off(&lin[1], rank, 0, Vl);
  *osh = sh[0];
  osh->dims[osh->ndim++] = Dl;
  for (int64_t b = 0; b < B; b++) {
    int64_t id = (int64_t)in[0][b] - v0;
    for (int64_t d = 0; d < Dl; d++) out[b * Dl + d] = id >= 0 && id < Vl ? in[1][id * Dl + d] : 0;
  }
}

typedef struct {
  int sh, sw, ph, pw;
} conv_ctx;

static void k_conv2d(const void *ctx, int rank, const ts_layout *lin, const ts_shape *s,
                     float *const *in, ts_shape *osh, float *out) {
  (void)ctx, (void)rank, (void)lin;
  const conv_ctx *c = ctx;
  int64_t N = s[0].dims[0], C = s[0].dims[1], H = s[0].dims[2], W = s[0].dims[3];
  int64_t O = s[1].dims[0], KH = s[1].dims[2], KW = s[1].dims[3];
  int64_t OH = (H + 2 * c->ph - KH) / c->sh + 1, OW = (W + 2 * c->pw - KW) / c->sw + 1;
  *osh = shp(4, (int64_t[]){N, O, OH, OW});
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < O; o++)
      for (int64_t y = 0; y < OH; y++)
        for (int64_t x = 0; x < OW; x++) {
          float acc = 0;
          for (int64_t ci = 0; ci < C; ci++)
            for (int64_t i = 0; i < KH; i++)
              for (int64_t j = 0; j < KW; j++) {
                int64_t yy = y * c->sh - c->ph + i, xx = x * c->sw - c->pw + j;
                if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
                acc += in[0][((n * C + ci) * H + yy) * W + xx] * in[1][((o * C + ci) * KH + i) * KW + j];
              }
          out[((n * O + o) * OH + y) * OW + x] = acc;
        }
}

/* softmax over `axis` (ctx) or layernorm over the dims from `axis` on, with gamma/beta if given:
 * each row is computed in the same order whether whole on one rank or on the full tensor, so
 * the results are bitwise equal. */
typedef struct {
  int axis, layernorm;
} norm_ctx;

static void k_norm(const void *ctx, int rank, const ts_layout *lin, const ts_shape *sh,
                   float *const *in, ts_shape *osh, float *out) {
  (void)rank, (void)lin;
  const norm_ctx *c = ctx;
  const ts_shape *x = &sh[0];
  int64_t outer = 1, len = 1, inner = 1;
  if (c->layernorm) {
    for (int d = 0; d < c->axis; d++) outer *= x->dims[d];
    for (int d = c->axis; d < x->ndim; d++) len *= x->dims[d];
  } else {
    for (int d = 0; d < c->axis; d++) outer *= x->dims[d];
    len = x->dims[c->axis];
    for (int d = c->axis + 1; d < x->ndim; d++) inner *= x->dims[d];
  }
  *osh = *x;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      const float *r = in[0] + o * len * inner + i;
      float *w = out + o * len * inner + i;
      if (c->layernorm) {
        float mean = 0, var = 0;
        for (int64_t k = 0; k < len; k++) mean += r[k];
        mean /= (float)len;
        for (int64_t k = 0; k < len; k++) var += (r[k] - mean) * (r[k] - mean);
        float inv = 1.0f / sqrtf(var / (float)len + 1e-5f);
        for (int64_t k = 0; k < len; k++)
          w[k] = (r[k] - mean) * inv * (in[1] ? in[1][k] : 1) + (in[2] ? in[2][k] : 0);
      } else {
        float mx = r[0], sum = 0;
        for (int64_t k = 1; k < len; k++) mx = r[k * inner] > mx ? r[k * inner] : mx;
        for (int64_t k = 0; k < len; k++) sum += expf(r[k * inner] - mx);
        for (int64_t k = 0; k < len; k++) w[k * inner] = expf(r[k * inner] - mx) / sum;
      }
    }
}

/* dense's bias (input 2), added once the partial sums over IN are settled */
static void post_dense_bias(const void *ctx, const ts_shape *lsh, float *const *in,
                            const ts_shape *osh, float *out) {
  (void)ctx;
  int64_t O = osh->dims[osh->ndim - 1], R = numel(osh) / (O ? O : 1);
  if (lsh[2].dims[0] != O) abort(); /* the bias slice must match the output's OUT block */
  for (int64_t r = 0; r < R; r++)
    for (int64_t o = 0; o < O; o++) out[r * O + o] += in[2][o];
}

/* The members of `rank`'s group on the axis cutting dim d of l (just `rank` when no axis cuts
 * it); returns the group size. */
static int group_on_dim(const ts_layout *l, int rank, int d, int *members) {
  int a = l->tmap[d];
  if (a < 0) {
    members[0] = rank;
    return 1;
  }
  sim_group(l, rank, a, members);
  return l->dev[a];
}

/* Member m's slice of `full` (shape gs) under l: `own` (the rank's slice) if m is the rank,
 * else a fresh slice in buf. */
static const float *member_slice(const ts_layout *l, const ts_shape *gs, const float *full,
                                 int rank, int m, const float *own, float *buf) {
  if (m == rank) return own;
  sim_slice(l, gs, full, m, buf);
  return buf;
}

/* batchnorm over (N, spatial) per channel: training mode computes the statistics from sums and
 * sums of squares of the batch, allreduced over the rank's group on the N axis (SyncBatchNorm;
 * integer-valued data, so the sums are exact in any order); inference mode uses the running
 * mean and var (inputs 3, 4). */
typedef struct {
  const float *x;
  ts_shape xs;
  int nin, infer;
} bn_ctx;

static void k_batchnorm(const void *ctx, int rank, const ts_layout *lin, const ts_shape *sh,
                        float *const *in, ts_shape *osh, float *out) {
  const bn_ctx *c = ctx;
  int64_t N = sh[0].dims[0], C = sh[0].dims[1], S = numel(&sh[0]) / (N * C), n = numel(&sh[0]);
  double s1[16] = {0}, s2[16] = {0};
  /* the members: one rank per distinct block of the batch and spatial dims with our channels */
  int members[64], g = 0, nd = ts_layout_ndevices(&lin[0]);
  int64_t mine[TS_MAX_DIMS], seen[64][TS_MAX_DIMS];
  ts_layout_offsets(&lin[0], &c->xs, rank, mine);
  for (int r = 0; r < nd; r++) {
    int64_t o[TS_MAX_DIMS];
    ts_layout_offsets(&lin[0], &c->xs, r, o);
    if (o[1] != mine[1]) continue;
    int dup = 0;
    for (int k = 0; k < g && !dup; k++) dup = !memcmp(seen[k], o, sizeof(int64_t) * (size_t)c->xs.ndim);
    if (dup) continue;
    memcpy(seen[g], o, sizeof(int64_t) * (size_t)c->xs.ndim);
    members[g++] = r;
  }
  float *buf = malloc((size_t)n * sizeof(float));
  if (!buf || C > 16) abort();
  for (int k = 0; k < g && !c->infer; k++) {
    const float *xm = member_slice(&lin[0], &c->xs, c->x, rank, members[k], in[0], buf);
    for (int64_t b = 0; b < N; b++)
      for (int64_t ch = 0; ch < C; ch++)
        for (int64_t e = 0; e < S; e++) {
          float v = xm[(b * C + ch) * S + e];
          s1[ch] += v, s2[ch] += v * v;
        }
  }
  *osh = sh[0];
  for (int64_t ch = 0; ch < C; ch++) {
    float mean, var, cnt = (float)(N * g * S); /* equal blocks: g of them cover the batch and spatial dims */
    if (c->infer) mean = in[3][ch], var = in[4][ch];
    else mean = (float)s1[ch] / cnt, var = fmaxf((float)s2[ch] / cnt - mean * mean, 0);
    float inv = 1.0f / sqrtf(var + 1e-5f), gm = c->nin > 1 ? in[1][ch] : 1,
          bt = c->nin > 1 ? in[2][ch] : 0;
    for (int64_t b = 0; b < N; b++)
      for (int64_t e = 0; e < S; e++) {
        int64_t i = (b * C + ch) * S + e;
        out[i] = (in[0][i] - mean) * inv * gm + bt;
      }
  }
  free(buf);
}

/* causal attention per (batch, head): o_i = sum_{j<=i} softmax_j(q_i . k_j / sqrt(D)) v_j */
static void k_attention(const void *ctx, int rank, const ts_layout *lin, const ts_shape *sh,
                        float *const *in, ts_shape *osh, float *out) {
  (void)ctx, (void)rank, (void)lin;
  int64_t BH = sh[0].dims[0] * sh[0].dims[1], T = sh[0].dims[2], D = sh[0].dims[3];
  float sc[64], scale = 1.0f / sqrtf((float)D);
  if (T > 64) abort();
  *osh = sh[0];
  for (int64_t p = 0; p < BH; p++) {
    const float *q = in[0] + p * T * D, *k = in[1] + p * T * D, *v = in[2] + p * T * D;
    float *o = out + p * T * D;
    for (int64_t i = 0; i < T; i++) {
      float mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j <= i; j++) {
        float a = 0;
        for (int64_t d = 0; d < D; d++) a += q[i * D + d] * k[j * D + d];
        sc[j] = a * scale;
        mx = sc[j] > mx ? sc[j] : mx;
      }
      for (int64_t j = 0; j <= i; j++) sum += sc[j] = expf(sc[j] - mx);
      for (int64_t d = 0; d < D; d++) {
        float a = 0;
        for (int64_t j = 0; j <= i; j++) a += sc[j] / sum * v[j * D + d];
        o[i * D + d] = a;
      }
    }
  }
}

/* softmax cross-entropy, the mean over rows: each rank's value is the mean over its rows divided
 * by the number of row blocks (partial over N). A class cut runs Megatron's vocabulary-parallel
 * form, its collectives over the rank's group on the class axis simulated here from each
 * member's own slice: allreduce max of the row maxima, allreduce sum of the sums of exps, and
 * allreduce sum of the target logit (held by one member, 0 on the others). */
typedef struct {
  const float *logits;
  ts_shape ls;
  int64_t N;
} ce_ctx;

static void k_softmax_ce(const void *ctx, int rank, const ts_layout *lin, const ts_shape *sh,
                         float *const *in, ts_shape *osh, float *out) {
  const ce_ctx *c = ctx;
  int64_t Nl = sh[0].dims[0], Cl = sh[0].dims[1];
  int members[64], g = group_on_dim(&lin[0], rank, 1, members);
  float *buf = malloc((size_t)(g * Nl * Cl) * sizeof(float));
  const float *sl[64];
  if (!buf || sh[1].dims[0] != Nl) abort();
  for (int k = 0; k < g; k++)
    sl[k] = member_slice(&lin[0], &c->ls, c->logits, rank, members[k], in[0], buf + k * Nl * Cl);
  float total = 0;
  for (int64_t i = 0; i < Nl; i++) {
    float mx = -INFINITY, se = 0, tgt = 0;
    int64_t lab = (int64_t)in[1][i];
    for (int k = 0; k < g; k++) /* allreduce max */
      for (int64_t j = 0; j < Cl; j++) mx = sl[k][i * Cl + j] > mx ? sl[k][i * Cl + j] : mx;
    for (int k = 0; k < g; k++) { /* allreduce sum of the members' sums */
      float part = 0;
      for (int64_t j = 0; j < Cl; j++) part += expf(sl[k][i * Cl + j] - mx);
      se += part;
    }
    for (int k = 0; k < g; k++) { /* the member holding the label's column contributes it */
      int64_t j = lab - k * Cl;
      tgt += j >= 0 && j < Cl ? sl[k][i * Cl + j] : 0;
    }
    total += logf(se) + mx - tgt;
  }
  osh->ndim = 0;
  out[0] = total / (float)Nl / (float)(c->N / Nl);
  free(buf);
}

/* pooling to (OH, OW) with non-overlapping windows of (H/OH, W/OW): max or average */
typedef struct {
  int oh, ow, avg;
} pool_ctx;

static void k_pool(const void *ctx, int rank, const ts_layout *lin, const ts_shape *sh,
                   float *const *in, ts_shape *osh, float *out) {
  (void)rank;
  const pool_ctx *c = ctx;
  int64_t NC = sh[0].dims[0] * sh[0].dims[1], H = sh[0].dims[2], W = sh[0].dims[3];
  int64_t kh = H / c->oh, kw = W / c->ow;
  /* a global average over spatial bands: each band's mean over the bands (the parts sum to it) */
  int64_t bands = 1;
  for (int d = 2; d < 4; d++)
    if (lin[0].tmap[d] >= 0) bands *= lin[0].dev[lin[0].tmap[d]];
  *osh = shp(4, (int64_t[]){sh[0].dims[0], sh[0].dims[1], c->oh, c->ow});
  for (int64_t p = 0; p < NC; p++)
    for (int64_t y = 0; y < c->oh; y++)
      for (int64_t x = 0; x < c->ow; x++) {
        float acc = c->avg ? 0 : -INFINITY;
        for (int64_t i = 0; i < kh; i++)
          for (int64_t j = 0; j < kw; j++) {
            float v = in[0][(p * H + y * kh + i) * W + x * kw + j];
            acc = c->avg ? acc + v : (v > acc ? v : acc);
          }
        out[(p * c->oh + y) * c->ow + x] = c->avg ? acc / (float)(kh * kw * bands) : acc;
      }
}

/* ---------------------------------------------------------------- tests */

static const int64_t CUTS[] = {1, 2, 4, 8};

static void test_matmul(void) {
  int before = n_sims, bref = n_refused;
  static const int64_t SH[][3] = {{8, 8, 8}, {4, 8, 16}}; /* M, K, N */
  for (int si = 0; si < 2; si++) {
    int64_t M = SH[si][0], K = SH[si][1], N = SH[si][2];
    ts_shape shapes[2] = {shp(2, (int64_t[]){M, K}), shp(2, (int64_t[]){K, N})};
    float *full[2] = {malloc((size_t)(M * K) * sizeof(float)), malloc((size_t)(K * N) * sizeof(float))};
    fill_int(full[0], M * K, 11, -3, 3);
    fill_int(full[1], K * N, 12, -3, 3);
    for (int ndev = 1; ndev <= 8; ndev *= 2)
      for (int im = 0; im < 4; im++)
        for (int ika = 0; ika < 4; ika++)
          for (int ikb = 0; ikb < 4; ikb++)
            for (int in_ = 0; in_ < 4; in_++) {
              int64_t m = CUTS[im], ka = CUTS[ika], kb = CUTS[ikb], n = CUTS[in_];
              ts_op_strategy s = strat(2, (int[]){2, 2}, (int64_t[]){m, ka, kb, n});
              char what[128];
              snprintf(what, sizeof what, "matmul (%lldx%lld)x(%lldx%lld) ((%lld,%lld),(%lld,%lld)) on %d",
                       (long long)M, (long long)K, (long long)K, (long long)N, (long long)m,
                       (long long)ka, (long long)kb, (long long)n, ndev);
              int64_t loop[3] = {m, ka, n};
              int want = 0;
              const char *subs[6] = {0};
              char b1[64], b2[64];
              if (M % m) {
                want = TS_ESHAPE;
                snprintf(b1, sizeof b1, "dim 0 of size %lld is cut %lld", (long long)M, (long long)m);
                subs[0] = "input 0 (a)", subs[1] = b1;
              } else if (N % n) {
                want = TS_ESHAPE;
                snprintf(b1, sizeof b1, "dim 1 of size %lld is cut %lld", (long long)N, (long long)n);
                subs[0] = "input 1 (b)", subs[1] = b1;
              } else if (ka != kb) {
                want = TS_EUNSUPPORTED;
                snprintf(b1, sizeof b1, "is cut %lld", (long long)kb);
                snprintf(b2, sizeof b2, "dimension K, is cut %lld", (long long)ka);
                subs[0] = "input 1 (b) dim 0", subs[1] = b1, subs[2] = b2;
              } else if (!divides_dev(ndev, 3, loop)) {
                want = TS_EINVAL;
                snprintf(b1, sizeof b1, "divide %d devices", ndev);
                subs[0] = b1, subs[1] = "strategy ((";
              }
              ts_layout lin[2], lout;
              ts_shape osh;
              if (!call_rule(what, TS_SHARD_MATMUL, &s, ndev, shapes, 2, NULL, want, subs, lin,
                             &lout, &osh))
                continue;
              int dev[8], nd, o = exp_dev(ndev, 3, loop, &nd, dev);
              CHECK_MSG(layout_is(&lin[0], nd, dev, 2, (int[]){o, o + 1}, 0) &&
                            layout_is(&lin[1], nd, dev, 2, (int[]){o + 1, o + 2}, 0) &&
                            layout_is(&lout, nd, dev, 2, (int[]){o, o + 2},
                                      ka > 1 ? 1u << (o + 1) : 0),
                        "%s: layouts are not MindSpore's", what);
              simulate(what, lin, shapes, 2, full, &lout, &osh, k_matmul, NULL);
            }
    free(full[0]), free(full[1]);
  }
  printf("matmul: (8x8)x(8x8) and (4x8)x(8x16), cuts {1,2,4,8}^4 on 1/2/4/8 devices: %d simulated "
         "exactly, %d refused as the oracle says\n",
         n_sims - before, n_refused - bref);
}

/* dense without and with the bias b (4), whose cut must be w's OUT cut; with k > 1 the bias is
 * added after the partial sums are settled (post_dense_bias), as the parallel pass does */
static void test_dense(void) {
  int before = n_sims, bref = n_refused, npart = n_partial_sims;
  ts_shape shapes[3] = {shp(3, (int64_t[]){2, 4, 8}), shp(2, (int64_t[]){4, 8}),
                        shp(1, (int64_t[]){4})};
  float *full[3] = {malloc(64 * sizeof(float)), malloc(32 * sizeof(float)),
                    malloc(4 * sizeof(float))};
  fill_int(full[0], 64, 21, -3, 3);
  fill_int(full[1], 32, 22, -3, 3);
  fill_int(full[2], 4, 23, -9, 9);
  for (int ndev = 1; ndev <= 8; ndev *= 2)
    for (int code = 0; code < 4 * 4 * 4 * 4 * 2 * 5; code++) {
      int c = code;
      int64_t b0 = CUTS[c % 4], b1 = CUTS[(c / 4) % 4], k = CUTS[(c / 16) % 4],
              o = CUTS[(c / 64) % 4];
      int64_t kw = (c / 256) % 2 ? (k == 8 ? 1 : k * 2) : k; /* odd half: w's k differs */
      int bias = c / 512;                                     /* 0: none, else b's cut */
      int64_t bc = bias ? CUTS[bias - 1] : 1;
      int nin = bias ? 3 : 2;
      ts_op_strategy s = strat(nin, (int[]){3, 2, 1}, (int64_t[]){b0, b1, k, o, kw, bc});
      char what[128];
      snprintf(what, sizeof what, "dense x(2,4,8) w(4,8)%s ((%lld,%lld,%lld),(%lld,%lld)%s%lld%s) on %d",
               bias ? " b(4)" : "", (long long)b0, (long long)b1, (long long)k, (long long)o,
               (long long)kw, bias ? ",(" : "", (long long)(bias ? bc : 0), bias ? ",)" : "", ndev);
      int64_t loop[4] = {b0, b1, k, o};
      int want = 0;
      const char *subs[4] = {0};
      char m1[80], m2[80];
      if (2 % b0 || 4 % b1) want = TS_ESHAPE, subs[0] = "input 0 (x)", subs[1] = "does not divide";
      else if (4 % o) want = TS_ESHAPE, subs[0] = "input 1 (w) dim 0 of size 4", subs[1] = "does not divide";
      else if (bias && 4 % bc) want = TS_ESHAPE, subs[0] = "input 2 (b) dim 0 of size 4", subs[1] = "does not divide";
      else if (k != kw) want = TS_EUNSUPPORTED, subs[0] = "input 1 (w) dim 1 (size 8)", subs[1] = "dimension IN";
      else if (bias && bc != o) {
        want = TS_EUNSUPPORTED;
        snprintf(m1, sizeof m1, "dense: input 2 (b) dim 0 (size 4) is cut %lld", (long long)bc);
        snprintf(m2, sizeof m2, "input 1 (w) dim 0, the same dimension OUT, is cut %lld", (long long)o);
        subs[0] = m1, subs[1] = m2;
      } else if (!divides_dev(ndev, 4, loop)) want = TS_EINVAL, subs[0] = "devices";
      ts_layout lin[3], lout;
      ts_shape osh;
      if (!call_rule(what, TS_SHARD_DENSE, &s, ndev, shapes, nin, NULL, want, subs, lin, &lout, &osh))
        continue;
      int dev[8], nd, f = exp_dev(ndev, 4, loop, &nd, dev);
      CHECK_MSG(layout_is(&lin[0], nd, dev, 3, (int[]){f, f + 1, f + 2}, 0) &&
                    layout_is(&lin[1], nd, dev, 2, (int[]){f + 3, f + 2}, 0) &&
                    (!bias || layout_is(&lin[2], nd, dev, 1, (int[]){f + 3}, 0)) &&
                    layout_is(&lout, nd, dev, 3, (int[]){f, f + 1, f + 3}, k > 1 ? 1u << (f + 2) : 0),
                "%s: layouts are not MindSpore's", what);
      sim_opts so = {0, post_dense_bias};
      simulate_ex(what, lin, shapes, nin, full, &lout, &osh, k_dense, NULL, bias ? &so : NULL);
    }
  /* the bias must be (OUT) */
  ts_layout lin[3], lout;
  ts_shape bad[3] = {shapes[0], shapes[1], shp(1, (int64_t[]){8})};
  ts_op_strategy s = strat(3, (int[]){3, 2, 1}, (int64_t[]){1, 1, 1, 1, 1, 1});
  EXPECT_ERR(ts_shard_rule(TS_SHARD_DENSE, &s, 2, bad, 3, NULL, lin, &lout, NULL), TS_ESHAPE,
             "dense: input 2 (b) must be (OUT) = (4)");
  free(full[0]), free(full[1]), free(full[2]);
  printf("dense: x(2,4,8) w(4,8), without and with b(4), cuts {1,2,4,8}^4 (+ mismatched IN cuts, "
         "every bias cut) on 1/2/4/8 devices: %d simulated exactly (%d with a partial output, the "
         "bias added after settling it), %d refused\n",
         n_sims - before, n_partial_sims - npart, n_refused - bref);
}

/* batchnorm x (4,4,2,2), without and with gamma, beta, mean, var (4): x cut by batch, channels
 * and spatial dims (cuts of 2), the parameters like the channels (one of them mismatched in some
 * strategies); training mode (statistics synchronised over the batch and spatial axes) and
 * inference mode (running statistics) simulated */
static void test_batchnorm(void) {
  int before = n_sims, bref = n_refused;
  static const char *const PN[5] = {"x", "gamma", "beta", "mean", "var"};
  ts_shape shapes[5] = {shp(4, (int64_t[]){4, 4, 2, 2})};
  float *full[5];
  full[0] = malloc(64 * sizeof(float));
  fill_int(full[0], 64, 91, -4, 4);
  for (int i = 1; i < 5; i++) {
    shapes[i] = shp(1, (int64_t[]){4});
    full[i] = malloc(4 * sizeof(float));
    fill_int(full[i], 4, 91 + i, i == 4 ? 1 : -3, i == 4 ? 4 : 3); /* var > 0 */
  }
  for (int ndev = 1; ndev <= 8; ndev *= 2)
    for (int code = 0; code < 64 * 21; code++) {
      int64_t n = CUTS[code % 4], cc = CUTS[(code / 4) % 4], h = code / 16 % 2 ? 2 : 1,
              w = code / 32 % 2 ? 2 : 1;
      int pv = code / 64, nin = pv ? 5 : 1;  /* 0: x alone; else params' cut and the odd one */
      int64_t p = pv ? CUTS[(pv - 1) % 4] : 1;
      int odd = pv ? (pv - 1) / 4 : 0;       /* 0: none, else input `odd` is cut differently */
      int64_t c[8] = {n, cc, h, w, p, p, p, p};
      if (odd) c[3 + odd] = p == 1 ? 2 : 1;
      ts_op_strategy s = strat(nin, (int[]){4, 1, 1, 1, 1}, c);
      char what[160];
      snprintf(what, sizeof what, "batchnorm x(4,4,2,2)%s ((%lld,%lld,%lld,%lld)%s) params %lld,%lld,%lld,%lld on %d",
               nin > 1 ? " + 4 params" : "", (long long)n, (long long)cc, (long long)h,
               (long long)w, nin > 1 ? ",..." : "", (long long)c[4], (long long)c[5],
               (long long)c[6], (long long)c[7], ndev);
      int64_t loop[4] = {n, cc, h, w};
      int want = 0;
      const char *subs[4] = {0};
      char m1[96], m2[96];
      if (4 % n || 4 % cc) want = TS_ESHAPE, subs[0] = "input 0 (x) dim", subs[1] = "does not divide";
      for (int i = 1; i < nin && !want; i++)
        if (4 % c[3 + i]) {
          want = TS_ESHAPE;
          snprintf(m1, sizeof m1, "input %d (%s) dim 0 of size 4 is cut %lld", i, PN[i], (long long)c[3 + i]);
          subs[0] = m1;
        }
      for (int i = 1; i < nin && !want; i++)
        if (c[3 + i] != cc) {
          want = TS_EUNSUPPORTED;
          snprintf(m1, sizeof m1, "batchnorm: input %d (%s) dim 0 (size 4) is cut %lld", i, PN[i],
                   (long long)c[3 + i]);
          snprintf(m2, sizeof m2, "input 0 (x) dim 1, the same dimension C, is cut %lld", (long long)cc);
          subs[0] = m1, subs[1] = m2;
        }
      if (!want && !divides_dev(ndev, 4, loop)) want = TS_EINVAL, subs[0] = "devices";
      ts_layout lin[5], lout;
      ts_shape osh;
      if (!call_rule(what, TS_SHARD_BATCHNORM, &s, ndev, shapes, nin, NULL, want, subs, lin, &lout,
                     &osh))
        continue;
      int dev[8], nd, f = exp_dev(ndev, 4, loop, &nd, dev), okp = 1;
      for (int i = 1; i < nin; i++) okp &= layout_is(&lin[i], nd, dev, 1, (int[]){f + 1}, 0);
      CHECK_MSG(okp && layout_is(&lin[0], nd, dev, 4, (int[]){f, f + 1, f + 2, f + 3}, 0) &&
                    ts_layout_equal(&lin[0], &lout),
                "%s: layouts are not MindSpore's", what);
      for (int infer = 0; infer < (nin > 1 ? 2 : 1); infer++) {
        bn_ctx bc = {full[0], shapes[0], nin, infer};
        simulate(what, lin, shapes, nin, full, &lout, &osh, k_batchnorm, &bc);
      }
    }
  for (int i = 0; i < 5; i++) free(full[i]);
  printf("batchnorm: x(4,4,2,2) alone and with gamma/beta/mean/var (4), batch x channel x spatial cuts, "
         "mismatched parameter cuts, on 1/2/4/8 devices: %d simulated exactly (training with statistics "
         "synchronised over the batch and spatial axes, and inference), %d refused\n",
         n_sims - before, n_refused - bref);
}

/* causal attention q, k, v (2,4,4,2): q cut (b,h,t,d) with b in {1,2,4}, h in {1,2,4,8},
 * t in {1,2}, d in {1,2}; k, v cut (b,h,t,1) or one of their cuts changed. A sequence cut (t 2)
 * is ring attention: accepted, its device axis before the heads'; its numerics are
 * tests/runtime/test_ring_attention.c's (the simulation here runs each rank's piece alone) */
static void test_attention(void) {
  int before = n_sims, bref = n_refused, n_ring = 0;
  static const char *const QN[3] = {"q", "k", "v"};
  static const char *const DN[4] = {"B", "H", "T", "D"};
  const int64_t dims[4] = {2, 4, 4, 2};
  ts_shape shapes[3];
  float *full[3];
  for (int i = 0; i < 3; i++) {
    shapes[i] = shp(4, dims);
    full[i] = malloc(64 * sizeof(float));
    fill_int(full[i], 64, 101 + i, -2, 2);
  }
  static const int64_t BC[3] = {1, 2, 4}, TC[2] = {1, 2}, DC[2] = {1, 2};
  for (int ndev = 1; ndev <= 8; ndev *= 2)
    for (int code = 0; code < 3 * 4 * 2 * 2 * 7; code++) {
      int64_t b = BC[code % 3], h = CUTS[code / 3 % 4], t = TC[code / 12 % 2], d = DC[code / 24 % 2];
      int var = code / 48;
      int64_t c[12] = {b, h, t, d, b, h, t, 1, b, h, t, 1};
      switch (var) {
        case 1: c[4] = b == 1 ? 2 : 1; break; /* k's B */
        case 2: c[5] = h == 1 ? 2 : 1; break; /* k's H */
        case 3: c[8] = b == 1 ? 2 : 1; break; /* v's B */
        case 4: c[9] = h == 1 ? 2 : 1; break; /* v's H */
        case 5: c[6] = t == 1 ? 2 : 1; break; /* k's T */
        case 6: c[11] = 2; break;             /* v's D */
        default: break;
      }
      ts_op_strategy s = strat(3, (int[]){4, 4, 4}, c);
      char what[160];
      snprintf(what, sizeof what, "attention (2,4,4,2) ((%lld,%lld,%lld,%lld),(%lld,%lld,%lld,%lld),(%lld,%lld,%lld,%lld)) on %d",
               (long long)c[0], (long long)c[1], (long long)c[2], (long long)c[3], (long long)c[4],
               (long long)c[5], (long long)c[6], (long long)c[7], (long long)c[8], (long long)c[9],
               (long long)c[10], (long long)c[11], ndev);
      int want = 0;
      const char *subs[4] = {0};
      char m1[96], m2[96];
      for (int i = 0; i < 3 && !want; i++)
        for (int e = 0; e < 4 && !want; e++)
          if (dims[e] % c[i * 4 + e]) {
            want = TS_ESHAPE;
            snprintf(m1, sizeof m1, "attention: input %d (%s) dim %d of size %lld is cut %lld", i,
                     QN[i], e, (long long)dims[e], (long long)c[i * 4 + e]);
            subs[0] = m1, subs[1] = "does not divide";
          }
      for (int i = 0; i < 3 && !want; i++)
        for (int e = 0; e < 4 && !want; e++) {
          int64_t x = c[i * 4 + e];
          if (e < 3 && x != c[e]) {
            want = TS_EUNSUPPORTED;
            snprintf(m1, sizeof m1, "attention: input %d (%s) dim %d (size %lld) is cut %lld", i,
                     QN[i], e, (long long)dims[e], (long long)x);
            snprintf(m2, sizeof m2, "input 0 (q) dim %d, the same dimension %s, is cut %lld", e,
                     DN[e], (long long)c[e]);
            subs[0] = m1, subs[1] = m2;
          } else if (e == 3 && x > 1) {
            want = TS_EUNSUPPORTED;
            snprintf(m1, sizeof m1, "attention: input %d (%s) dim %d (%s) is cut %lld: ", i, QN[i],
                     e, DN[e], (long long)x);
            subs[0] = m1, subs[1] = "heads (dim 1) and the sequence (dim 2, ring attention) only";
          }
        }
      int seq = t > 1 || c[6] > 1 || c[10] > 1;
      int64_t loop[3] = {b, h, 1}, loop3[3] = {b, t, h};
      if (!want && !divides_dev(ndev, seq ? 3 : 2, seq ? loop3 : loop)) want = TS_EINVAL, subs[0] = "devices";
      ts_layout lin[3], lout;
      ts_shape osh;
      if (!call_rule(what, TS_SHARD_ATTENTION, &s, ndev, shapes, 3, NULL, want, subs, lin, &lout,
                     &osh))
        continue;
      int dev[8], nd, f = seq ? exp_dev(ndev, 3, loop3, &nd, dev) : exp_dev(ndev, 2, loop, &nd, dev), ok = 1;
      for (int i = 0; i < 3; i++)
        ok &= layout_is(&lin[i], nd, dev, 4, seq ? (int[]){f, f + 2, f + 1, -1} : (int[]){f, f + 1, -1, -1}, 0);
      CHECK_MSG(ok && ts_layout_equal(&lin[0], &lout) && ts_shape_equal(&osh, &shapes[0]),
                "%s: layouts are not MindSpore's", what);
      if (!seq) simulate(what, lin, shapes, 3, full, &lout, &osh, k_attention, NULL);
      else n_ring++;
    }
  /* shapes: 4-d, all alike */
  ts_layout lin[3], lout;
  ts_shape bad[3] = {shapes[0], shp(4, (int64_t[]){2, 4, 8, 2}), shapes[0]};
  ts_op_strategy s = strat(3, (int[]){4, 4, 4}, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  EXPECT_ERR(ts_shard_rule(TS_SHARD_ATTENTION, &s, 2, bad, 3, NULL, lin, &lout, NULL), TS_ESHAPE,
             "attention: input 1 (k) is (2,4,8,2) but q is (2,4,4,2)");
  bad[1] = shp(3, (int64_t[]){2, 4, 4});
  s.ndim[1] = 3;
  EXPECT_ERR(ts_shard_rule(TS_SHARD_ATTENTION, &s, 2, bad, 3, NULL, lin, &lout, NULL), TS_ESHAPE,
             "attention: input 1 (k) must be 4-d");
  EXPECT_ERR(ts_shard_rule(TS_SHARD_ATTENTION, &s, 2, bad, 2, NULL, lin, &lout, NULL), TS_EINVAL,
             "attention: takes 3 tensor input(s), got 2");
  /* the (B,T,H,D) layout (attrs {1}): heads are dim 2, the sequence dim 1 */
  const int bthd[1] = {1};
  ts_shape sh[3] = {shp(4, (int64_t[]){2, 4, 4, 2}), shp(4, (int64_t[]){2, 4, 4, 2}), shp(4, (int64_t[]){2, 4, 4, 2})};
  ts_op_strategy hs = strat(3, (int[]){4, 4, 4}, (int64_t[]){1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1});
  CHECK_OK(ts_shard_rule(TS_SHARD_ATTENTION, &hs, 2, sh, 3, bthd, lin, &lout, NULL));
  CHECK(layout_is(&lin[0], 2, (int[]){1, 2}, 4, (int[]){0, -1, 1, -1}, 0) && ts_layout_equal(&lin[0], &lout));
  ts_op_strategy ts2 = strat(3, (int[]){4, 4, 4}, (int64_t[]){1, 2, 2, 1, 1, 2, 2, 1, 1, 2, 2, 1});
  CHECK_OK(ts_shard_rule(TS_SHARD_ATTENTION, &ts2, 4, sh, 3, bthd, lin, &lout, NULL));
  CHECK(layout_is(&lin[2], 3, (int[]){1, 2, 2}, 4, (int[]){0, 1, 2, -1}, 0) && ts_layout_equal(&lin[0], &lout));
  ts_op_strategy ds = strat(3, (int[]){4, 4, 4}, (int64_t[]){1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1});
  EXPECT_ERR(ts_shard_rule(TS_SHARD_ATTENTION, &ds, 2, sh, 3, bthd, lin, &lout, NULL), TS_EUNSUPPORTED,
             "heads (dim 2) and the sequence (dim 1, ring attention) only");
  for (int i = 0; i < 3; i++) free(full[i]);
  printf("attention (causal): q,k,v (2,4,4,2), batch x head x sequence cuts, D cuts and mismatched k/v cuts, on 1/2/4/8 "
         "devices: %d simulated exactly, %d sequence cuts accepted (ring attention), %d refused\n", n_sims - before, n_ring, n_refused - bref);
  CHECK(n_ring > 0);
}

/* softmax cross-entropy: logits (4,8), labels (4), cuts {1,2,4,8}^3 */
static void test_softmax_ce(void) {
  int before = n_sims, bref = n_refused, npart = n_partial_sims;
  ts_shape shapes[2] = {shp(2, (int64_t[]){4, 8}), shp(1, (int64_t[]){4})};
  float *full[2] = {malloc(32 * sizeof(float)), malloc(4 * sizeof(float))};
  fill_int(full[0], 32, 111, -4, 4);
  fill_int(full[1], 4, 112, 0, 7);
  ce_ctx cx = {full[0], shapes[0], 4};
  for (int ndev = 1; ndev <= 8; ndev *= 2)
    for (int code = 0; code < 64; code++) {
      int64_t n = CUTS[code % 4], c = CUTS[code / 4 % 4], l = CUTS[code / 16];
      ts_op_strategy s = strat(2, (int[]){2, 1}, (int64_t[]){n, c, l});
      char what[128];
      snprintf(what, sizeof what, "softmax_ce logits(4,8) labels(4) ((%lld,%lld),(%lld,)) on %d",
               (long long)n, (long long)c, (long long)l, ndev);
      int64_t loop[2] = {n, c};
      int want = 0;
      const char *subs[4] = {0};
      char m1[96], m2[96];
      if (4 % n || 8 % c) want = TS_ESHAPE, subs[0] = "softmax_ce: input 0 (logits)", subs[1] = "does not divide";
      else if (4 % l) want = TS_ESHAPE, subs[0] = "softmax_ce: input 1 (labels)", subs[1] = "does not divide";
      else if (l != n) {
        want = TS_EUNSUPPORTED;
        snprintf(m1, sizeof m1, "softmax_ce: input 1 (labels) dim 0 (size 4) is cut %lld", (long long)l);
        snprintf(m2, sizeof m2, "input 0 (logits) dim 0, the same dimension N, is cut %lld", (long long)n);
        subs[0] = m1, subs[1] = m2;
      } else if (!divides_dev(ndev, 2, loop)) want = TS_EINVAL, subs[0] = "devices";
      ts_layout lin[2], lout;
      ts_shape osh;
      if (!call_rule(what, TS_SHARD_SOFTMAX_CE, &s, ndev, shapes, 2, NULL, want, subs, lin, &lout,
                     &osh))
        continue;
      int dev[8], nd, f = exp_dev(ndev, 2, loop, &nd, dev);
      CHECK_MSG(layout_is(&lin[0], nd, dev, 2, (int[]){f, f + 1}, 0) &&
                    layout_is(&lin[1], nd, dev, 1, (int[]){f}, 0) &&
                    layout_is(&lout, nd, dev, 0, NULL, n > 1 ? 1u << f : 0) && osh.ndim == 0,
                "%s: layouts are not MindSpore's", what);
      /* the class-group sums of exps and the partial-over-N sum differ from the one-device
       * order by rounding: compared within 1e-5 relative, and bitwise identical on all ranks */
      sim_opts so = {1e-5, NULL};
      simulate_ex(what, lin, shapes, 2, full, &lout, &osh, k_softmax_ce, &cx, &so);
    }
  ts_layout lin[2], lout;
  ts_shape bad[2] = {shapes[0], shp(1, (int64_t[]){8})};
  ts_op_strategy s = strat(2, (int[]){2, 1}, (int64_t[]){1, 1, 1});
  EXPECT_ERR(ts_shard_rule(TS_SHARD_SOFTMAX_CE, &s, 2, bad, 2, NULL, lin, &lout, NULL), TS_ESHAPE,
             "softmax_ce: 8 labels for 4 rows of logits");
  bad[1] = shp(2, (int64_t[]){4, 1});
  s = strat(2, (int[]){2, 2}, (int64_t[]){1, 1, 1, 1});
  EXPECT_ERR(ts_shard_rule(TS_SHARD_SOFTMAX_CE, &s, 2, bad, 2, NULL, lin, &lout, NULL), TS_ESHAPE,
             "softmax_ce: logits must be 2-d (N,C) and labels 1-d (N)");
  free(full[0]), free(full[1]);
  printf("softmax cross-entropy: logits(4,8) labels(4), cuts {1,2,4,8}^3 on 1/2/4/8 devices: %d "
         "simulated within 1e-5 (%d partial over N; class cuts through simulated vocabulary-"
         "parallel collectives), %d refused\n",
         n_sims - before, n_partial_sims - npart, n_refused - bref);
}

/* pooling x (4,4,4,4): 2x2 max, 2x2 average, global average (attrs NULL); cuts {1,2,4,8}^4 */
static void test_pool(void) {
  int before = n_sims, bref = n_refused;
  ts_shape x = shp(4, (int64_t[]){4, 4, 4, 4});
  float *full[1] = {malloc(256 * sizeof(float))};
  fill_int(full[0], 256, 121, -9, 9);
  static const pool_ctx PC[3] = {{2, 2, 0}, {2, 2, 1}, {1, 1, 1}};
  for (int pi = 0; pi < 3; pi++)
    for (int ndev = 1; ndev <= 8; ndev *= 2)
      for (int code = 0; code < 256; code++) {
        int64_t c[4] = {CUTS[code % 4], CUTS[code / 4 % 4], CUTS[code / 16 % 4], CUTS[code / 64]};
        ts_op_strategy s = strat(1, (int[]){4}, c);
        int attrs[3] = {PC[pi].oh, PC[pi].ow, pi == 2}; /* pi 2: a global average, spatial cuts allowed */
        char what[128];
        snprintf(what, sizeof what, "pool %d x(4,4,4,4) ((%lld,%lld,%lld,%lld),) on %d", pi,
                 (long long)c[0], (long long)c[1], (long long)c[2], (long long)c[3], ndev);
        int want = 0;
        const char *subs[4] = {0};
        char m1[96];
        for (int d = 0; d < 4 && !want; d++)
          if (4 % c[d]) {
            want = TS_ESHAPE;
            snprintf(m1, sizeof m1, "pool: input 0 (x) dim %d of size 4 is cut 8", d);
            subs[0] = m1;
          }
        for (int d = 2; d < 4 && !want && pi != 2; d++)
          if (c[d] > 1) {
            want = TS_EUNSUPPORTED;
            snprintf(m1, sizeof m1, "pool: input 0 (x) dim %d (size 4) is cut %lld", d, (long long)c[d]);
            subs[0] = m1, subs[1] = "halo exchange";
          }
        if (!want && !divides_dev(ndev, pi == 2 ? 4 : 2, c)) want = TS_EINVAL, subs[0] = "devices";
        ts_layout lin[1], lout;
        ts_shape osh;
        if (!call_rule(what, TS_SHARD_POOL, &s, ndev, &x, 1, attrs, want, subs, lin, &lout, &osh))
          continue;
        int dev[8], nd, f = exp_dev(ndev, pi == 2 ? 4 : 2, c, &nd, dev);
        ts_shape eo = shp(4, (int64_t[]){4, 4, PC[pi].oh, PC[pi].ow});
        /* a global average over cut spatial dims: partial over their axes */
        unsigned part = pi == 2 ? (c[2] > 1 ? 1u << (f + 2) : 0) | (c[3] > 1 ? 1u << (f + 3) : 0) : 0;
        CHECK_MSG(layout_is(&lin[0], nd, dev, 4, pi == 2 ? (int[]){f, f + 1, f + 2, f + 3} : (int[]){f, f + 1, -1, -1}, 0) &&
                      layout_is(&lout, nd, dev, 4, (int[]){f, f + 1, -1, -1}, part) &&
                      ts_shape_equal(&osh, &eo),
                  "%s: layouts are not MindSpore's", what);
        simulate(what, lin, &x, 1, full, &lout, &osh, k_pool, &PC[pi]);
      }
  ts_layout lin[1], lout;
  ts_op_strategy s = strat(1, (int[]){4}, (int64_t[]){1, 1, 1, 1});
  EXPECT_ERR(ts_shard_rule(TS_SHARD_POOL, &s, 2, &x, 1, (int[]){0, 2, 0}, lin, &lout, NULL),
             TS_EINVAL, "pool: output size (0,2) must be >= 1");
  ts_shape x3 = shp(3, (int64_t[]){4, 4, 4});
  s = strat(1, (int[]){3}, (int64_t[]){1, 1, 1});
  EXPECT_ERR(ts_shard_rule(TS_SHARD_POOL, &s, 2, &x3, 1, NULL, lin, &lout, NULL), TS_ESHAPE,
             "pool: x must be 4-d (N,C,H,W)");
  free(full[0]);
  printf("pool: x(4,4,4,4), 2x2 max, 2x2 average and global average, cuts {1,2,4,8}^4 on 1/2/4/8 "
         "devices: %d simulated exactly, %d refused\n",
         n_sims - before, n_refused - bref);
}

static void test_reduce(void) {
  int before = n_sims, bref = n_refused, npart = n_partial_sims;
  ts_shape x = shp(3, (int64_t[]){4, 8, 2});
  float *full[1] = {malloc(64 * sizeof(float))};
  fill_int(full[0], 64, 31, -5, 5);
  for (int ndev = 4; ndev <= 8; ndev *= 2)
    for (unsigned mask = 0; mask < 8; mask++)
      for (int keep = 0; keep < 2; keep++)
        for (int code = 0; code < 64; code++) {
          int64_t c[3] = {CUTS[code % 4], CUTS[(code / 4) % 4], CUTS[(code / 16) % 4]};
          ts_op_strategy s = strat(1, (int[]){3}, c);
          int attrs[3] = {(int)mask, keep, 0};
          char what[128];
          snprintf(what, sizeof what, "reduce_sum x(4,8,2) mask 0x%x keep %d ((%lld,%lld,%lld),) on %d",
                   mask, keep, (long long)c[0], (long long)c[1], (long long)c[2], ndev);
          int want = 0;
          const char *subs[3] = {0};
          if (4 % c[0] || 2 % c[2]) want = TS_ESHAPE, subs[0] = "input 0 (x) dim", subs[1] = "does not divide";
          else if (!divides_dev(ndev, 3, c)) want = TS_EINVAL, subs[0] = "devices";
          ts_layout lin[1], lout;
          ts_shape osh;
          if (!call_rule(what, TS_SHARD_REDUCE, &s, ndev, &x, 1, attrs, want, subs, lin, &lout, &osh))
            continue;
          int dev[8], nd, f = exp_dev(ndev, 3, c, &nd, dev), omap[3], j = 0;
          unsigned part = 0;
          for (int d = 0; d < 3; d++) {
            if (!(mask & (1u << d))) omap[j++] = f + d;
            else {
              if (keep) omap[j++] = -1;
              if (c[d] > 1) part |= 1u << (f + d);
            }
          }
          CHECK_MSG(layout_is(&lin[0], nd, dev, 3, (int[]){f, f + 1, f + 2}, 0) &&
                        layout_is(&lout, nd, dev, j, omap, part),
                    "%s: layouts are not MindSpore's", what);
          reduce_ctx rc = {mask, keep};
          simulate(what, lin, &x, 1, full, &lout, &osh, k_reduce_sum, &rc);
        }
  free(full[0]);
  /* max over a cut axis has no partial form; over uncut axes it is fine */
  ts_layout lin[1], lout;
  ts_shape osh;
  ts_op_strategy s = strat(1, (int[]){3}, (int64_t[]){2, 2, 1});
  CHECK(ts_shard_rule(TS_SHARD_REDUCE, &s, 8, &x, 1, (int[]){2, 0, 2}, lin, &lout, &osh) ==
            TS_EUNSUPPORTED &&
        strstr(ts_last_error(), "reduce: input 0 (x) dim 1 (size 8) is cut 2") &&
        strstr(ts_last_error(), "max/min"));
  CHECK_OK(ts_shard_rule(TS_SHARD_REDUCE, &s, 8, &x, 1, (int[]){4, 0, 2}, lin, &lout, &osh));
  CHECK(lout.partial == 0 && osh.ndim == 2);
  CHECK(ts_shard_rule(TS_SHARD_REDUCE, &s, 8, &x, 1, (int[]){8, 0, 0}, lin, &lout, &osh) ==
            TS_EINVAL && strstr(ts_last_error(), "mask 0x8"));
  printf("reduce sum: x(4,8,2), all 8 axis sets x keepdims x cuts {1,2,4,8}^3 on 4/8 devices: %d "
         "simulated exactly (%d with a partial output), %d refused; max over a cut axis refused\n",
         n_sims - before, n_partial_sims - npart, n_refused - bref);
}

static void test_binary(void) {
  int before = n_sims, bref = n_refused;
  static const struct {
    int na, nb;
    int64_t a[3], b[3];
  } CASES[] = {{3, 1, {4, 1, 8}, {8}},    {2, 2, {4, 8}, {4, 1}}, {2, 2, {1, 8}, {4, 1}},
               {3, 2, {2, 4, 8}, {4, 8}}, {2, 3, {4, 1}, {2, 1, 8}}};
  for (size_t ci = 0; ci < sizeof CASES / sizeof CASES[0]; ci++) {
    int na = CASES[ci].na, nb = CASES[ci].nb, no = na > nb ? na : nb, nc = na + nb;
    ts_shape shapes[2] = {shp(na, CASES[ci].a), shp(nb, CASES[ci].b)};
    float *full[2] = {malloc((size_t)numel(&shapes[0]) * sizeof(float)),
                      malloc((size_t)numel(&shapes[1]) * sizeof(float))};
    fill_int(full[0], numel(&shapes[0]), 41 + ci, -4, 4);
    fill_int(full[1], numel(&shapes[1]), 51 + ci, -4, 4);
    int total = 1;
    for (int i = 0; i < nc; i++) total *= 3;
    for (int code = 0; code < total; code++) {
      int64_t cf[6];
      for (int i = 0, x = code; i < nc; i++, x /= 3) cf[i] = CUTS[x % 3];
      ts_op_strategy s = strat(2, (int[]){na, nb}, cf);
      const int64_t *ca = cf, *cb = cf + na;
      char what[160];
      snprintf(what, sizeof what, "binary case %zu code %d", ci, code);
      /* oracle */
      int want = 0;
      const char *subs[3] = {0};
      int64_t loop[3];
      for (int i = 0; i < na && !want; i++)
        if (CASES[ci].a[i] % ca[i]) want = TS_ESHAPE, subs[0] = "input 0 (a)";
      for (int i = 0; i < nb && !want; i++)
        if (CASES[ci].b[i] % cb[i]) want = TS_ESHAPE, subs[0] = "input 1 (b)";
      for (int j = 0; j < no && !want; j++) {
        int ia = j - (no - na), ib = j - (no - nb);
        int64_t sa = ia >= 0 ? CASES[ci].a[ia] : 1, sb = ib >= 0 ? CASES[ci].b[ib] : 1;
        int64_t xa = ia >= 0 ? ca[ia] : 1, xb = ib >= 0 ? cb[ib] : 1;
        if (sa > 1 && sb > 1 && xa != xb) want = TS_EUNSUPPORTED, subs[0] = "cut alike";
        loop[j] = sa > 1 ? xa : xb;
      }
      if (!want && !divides_dev(8, no, loop)) want = TS_EINVAL, subs[0] = "8 devices";
      ts_layout lin[2], lout;
      ts_shape osh;
      if (!call_rule(what, TS_SHARD_BINARY, &s, 8, shapes, 2, NULL, want, subs, lin, &lout, &osh))
        continue;
      int dev[8], nd, f = exp_dev(8, no, loop, &nd, dev), ma[3], mb[3], mo[3];
      for (int j = 0; j < no; j++) {
        int ia = j - (no - na), ib = j - (no - nb);
        mo[j] = f + j;
        if (ia >= 0) ma[ia] = CASES[ci].a[ia] == 1 && osh.dims[j] > 1 ? -1 : f + j;
        if (ib >= 0) mb[ib] = CASES[ci].b[ib] == 1 && osh.dims[j] > 1 ? -1 : f + j;
      }
      CHECK_MSG(layout_is(&lin[0], nd, dev, na, ma, 0) && layout_is(&lin[1], nd, dev, nb, mb, 0) &&
                    layout_is(&lout, nd, dev, no, mo, 0),
                "%s: layouts are not MindSpore's", what);
      simulate(what, lin, shapes, 2, full, &lout, &osh, k_binary_mul, NULL);
    }
    free(full[0]), free(full[1]);
  }
  /* messages of the two broadcasting refusals */
  ts_shape sh[2] = {shp(2, (int64_t[]){4, 8}), shp(2, (int64_t[]){4, 1})};
  ts_layout lin[2], lout;
  ts_op_strategy s = strat(2, (int[]){2, 2}, (int64_t[]){2, 1, 1, 2});
  CHECK(ts_shard_rule(TS_SHARD_BINARY, &s, 8, sh, 2, NULL, lin, &lout, NULL) == TS_ESHAPE &&
        strstr(ts_last_error(), "binary: input 1 (b) dim 1 of size 1 is cut 2"));
  s = strat(2, (int[]){2, 2}, (int64_t[]){2, 2, 4, 1});
  CHECK(ts_shard_rule(TS_SHARD_BINARY, &s, 8, sh, 2, NULL, lin, &lout, NULL) == TS_EUNSUPPORTED &&
        strstr(ts_last_error(), "binary: input 1 (b) dim 0 (size 4) is cut 4, but input 0 (a) dim 0"));
  sh[1] = shp(1, (int64_t[]){4});
  s = strat(2, (int[]){2, 1}, (int64_t[]){1, 1, 1});
  CHECK(ts_shard_rule(TS_SHARD_BINARY, &s, 8, sh, 2, NULL, lin, &lout, NULL) == TS_ESHAPE &&
        strstr(ts_last_error(), "do not broadcast"));
  printf("binary (mul) with broadcasting: 5 shape pairs, cuts {1,2,4} per dim on 8 devices: %d "
         "simulated exactly, %d refused\n",
         n_sims - before, n_refused - bref);
}

static void test_embedding(void) {
  int before = n_sims, bref = n_refused;
  enum { V = 16, D = 4 };
  ts_shape shapes[2] = {shp(2, (int64_t[]){4, 2}), shp(2, (int64_t[]){V, D})};
  float *full[2] = {malloc(8 * sizeof(float)), malloc(V * D * sizeof(float))};
  fill_int(full[0], 8, 61, 0, V - 1);
  fill_int(full[1], V * D, 62, -9, 9);
  for (int ndev = 2; ndev <= 8; ndev *= 2)
    for (int code = 0; code < 256; code++) {
      int64_t c[4] = {CUTS[code % 4], CUTS[(code / 4) % 4], CUTS[(code / 16) % 4],
                      CUTS[(code / 64) % 4]};
      ts_op_strategy s = strat(2, (int[]){2, 2}, c);
      char what[128];
      snprintf(what, sizeof what, "embedding ids(4,2) table(16,4) ((%lld,%lld),(%lld,%lld)) on %d",
               (long long)c[0], (long long)c[1], (long long)c[2], (long long)c[3], ndev);
      int want = 0;
      const char *subs[3] = {0};
      if (4 % c[0] || 2 % c[1]) want = TS_ESHAPE, subs[0] = "input 0 (ids)";
      else if (V % c[2] || D % c[3]) want = TS_ESHAPE, subs[0] = "input 1 (table)";
      else if (!divides_dev(ndev, 4, c)) want = TS_EINVAL, subs[0] = "devices";
      ts_layout lin[2], lout;
      ts_shape osh;
      if (!call_rule(what, TS_SHARD_EMBEDDING, &s, ndev, shapes, 2, NULL, want, subs, lin, &lout,
                     &osh))
        continue;
      int dev[8], nd, f = exp_dev(ndev, 4, c, &nd, dev);
      CHECK_MSG(layout_is(&lin[0], nd, dev, 2, (int[]){f, f + 1}, 0) &&
                    layout_is(&lin[1], nd, dev, 2, (int[]){f + 2, f + 3}, 0) &&
                    layout_is(&lout, nd, dev, 3, (int[]){f, f + 1, f + 3},
                              c[2] > 1 ? 1u << (f + 2) : 0),
                "%s: layouts are not MindSpore's", what);
      simulate(what, lin, shapes, 2, full, &lout, &osh, k_embedding, NULL);
    }
  free(full[0]), free(full[1]);
  printf("embedding (vocabulary-parallel): ids(4,2) table(16,4), cuts {1,2,4,8}^4 on 2/4/8 "
         "devices: %d simulated exactly, %d refused\n",
         n_sims - before, n_refused - bref);
}

static void test_conv2d(void) {
  int before = n_sims, bref = n_refused;
  ts_shape shapes[2] = {shp(4, (int64_t[]){4, 4, 6, 6}), shp(4, (int64_t[]){4, 4, 3, 3})};
  float *full[2] = {malloc(576 * sizeof(float)), malloc(144 * sizeof(float))};
  fill_int(full[0], 576, 71, -3, 3);
  fill_int(full[1], 144, 72, -2, 2);
  static const conv_ctx CC[2] = {{1, 1, 1, 1}, {2, 1, 0, 2}};
  for (int ci = 0; ci < 2; ci++)
    for (int ndev = 2; ndev <= 8; ndev *= 2)
      for (int code = 0; code < 256; code++) {
        int64_t n = CUTS[code % 4], c = CUTS[(code / 4) % 4], o = CUTS[code / 16 % 4], hc = code / 64 % 2 + 1,
                wc = code / 128 + 1;
        ts_op_strategy s = strat(2, (int[]){4, 4}, (int64_t[]){n, c, hc, wc, o, c, 1, 1});
        int attrs[4] = {CC[ci].sh, CC[ci].sw, CC[ci].ph, CC[ci].pw};
        char what[128];
        snprintf(what, sizeof what, "conv2d attrs %d ((%lld,%lld,%lld,%lld),(%lld,%lld,1,1)) on %d", ci, (long long)n,
                 (long long)c, (long long)hc, (long long)wc, (long long)o, (long long)c, ndev);
        int64_t loop[5] = {n, c, o, hc, wc};
        int want = 0;
        const char *subs[3] = {0};
        /* attrs 0 (stride 1, pad 1, 3x3 on 6x6: 6 output rows, bands of 3 with a halo of 1 each side)
         * takes spatial cuts of 2; attrs 1 (stride 2 and no padding on H: 2 rows from 6) refuses H's,
         * and its W (stride 1, pad 2: 8 columns from 6) too */
        if (4 % n) want = TS_ESHAPE, subs[0] = "input 0 (x) dim 0 of size 4";
        else if (4 % c) want = TS_ESHAPE, subs[0] = "input 0 (x) dim 1 of size 4";
        else if (4 % o) want = TS_ESHAPE, subs[0] = "input 1 (w) dim 0 of size 4";
        else if (ci == 1 && hc > 1) want = TS_EUNSUPPORTED, subs[0] = "input 0 (x) dim 2: size 6 cut 2: a spatial cut";
        else if (ci == 1 && wc > 1) want = TS_EUNSUPPORTED, subs[0] = "input 0 (x) dim 3: size 6 cut 2: a spatial cut";
        else if (!divides_dev(ndev, 5, loop)) want = TS_EINVAL, subs[0] = "devices";
        ts_layout lin[2], lout;
        ts_shape osh;
        if (!call_rule(what, TS_SHARD_CONV2D, &s, ndev, shapes, 2, attrs, want, subs, lin, &lout,
                       &osh))
          continue;
        int dev[8], nd, f = exp_dev(ndev, 5, loop, &nd, dev);
        /* device matrix (N, C, O, H, W) after the repeat; input channels are summed: partial over C */
        CHECK_MSG(layout_is(&lin[0], nd, dev, 4, (int[]){f, f + 1, f + 3, f + 4}, 0) &&
                      layout_is(&lin[1], nd, dev, 4, (int[]){f + 2, f + 1, -1, -1}, 0) &&
                      layout_is(&lout, nd, dev, 4, (int[]){f, f + 2, f + 3, f + 4}, c > 1 ? 1u << (f + 1) : 0),
                  "%s: layouts are not MindSpore's", what);
        /* spatial cuts read the neighbours' rows (the HALO op, tested in test_coll and end to end
         * in test_pass_mpi): simulated locally only without them */
        if (hc == 1 && wc == 1) simulate(what, lin, shapes, 2, full, &lout, &osh, k_conv2d, &CC[ci]);
      }
  free(full[0]), free(full[1]);
  /* kernel cuts are refused, naming the dim */
  int nforb = 0;
  for (int d = 2; d < 4; d++) {
    int64_t c[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    c[4 + d] = 3; /* 3 divides KH = KW = 3 */
    ts_op_strategy s = strat(2, (int[]){4, 4}, c);
    ts_layout lin[2], lout;
    char want[64];
    snprintf(want, sizeof want, "conv2d: input 1 (w) dim %d", d);
    int rc = ts_shard_rule(TS_SHARD_CONV2D, &s, 6, shapes, 2, NULL, lin, &lout, NULL);
    CHECK_MSG(rc == TS_EUNSUPPORTED && strstr(ts_last_error(), want) && strstr(ts_last_error(), "kernel is not cut"),
              "cut 3 of w dim %d: %d %s", d, rc, ts_last_error());
    nforb++;
  }
  /* the halo arithmetic: ResNet's convolutions (3x3 stride 1 and 2 pad 1, 1x1 stride 2, the 7x7
   * stem) on 2 and 4 bands, and the refusals */
  {
    static const struct {
      int64_t in, k;
      int st, pad;
      int64_t cut;
      int lo, hi, ok;
    } H[] = {{28, 3, 1, 1, 2, 1, 1, 1}, {28, 3, 2, 1, 2, 1, 0, 1}, {28, 1, 2, 0, 2, 0, 0, 1}, {224, 7, 2, 3, 4, 3, 2, 1},
             {14, 3, 2, 1, 2, 0, 0, 0} /* 7 output rows in 2 */, {8, 5, 1, 2, 8, 0, 0, 0} /* bands of 1 < halo 2 */,
             {6, 3, 1, 0, 2, 0, 0, 0} /* 4 output rows from 6: not the input times the stride */};
    for (size_t i = 0; i < sizeof H / sizeof H[0]; i++) {
      int lo = -1, hi = -1, rc = ts_conv2d_halo(H[i].in, H[i].k, H[i].st, H[i].pad, H[i].cut, &lo, &hi);
      CHECK_MSG(H[i].ok ? rc == TS_OK && lo == H[i].lo && hi == H[i].hi : rc == TS_EUNSUPPORTED,
                "conv2d halo in %lld k %lld stride %d pad %d cut %lld: rc %d lo %d hi %d (%s)", (long long)H[i].in,
                (long long)H[i].k, H[i].st, H[i].pad, (long long)H[i].cut, rc, lo, hi, ts_last_error());
      nforb += !H[i].ok;
    }
  }
  { /* x's and w's input channels are one loop axis: cut alike */
    ts_op_strategy s = strat(2, (int[]){4, 4}, (int64_t[]){1, 2, 1, 1, 1, 1, 1, 1});
    ts_layout lin[2], lout;
    int rc = ts_shard_rule(TS_SHARD_CONV2D, &s, 2, shapes, 2, NULL, lin, &lout, NULL);
    CHECK_MSG(rc == TS_EUNSUPPORTED && strstr(ts_last_error(), "cut alike"), "unequal C cuts: %d %s", rc,
              ts_last_error());
    nforb++;
  }
  printf("conv2d: x(4,4,6,6) w(4,4,3,3), two stride/pad settings, batch x in-channel x out-channel x spatial "
         "cuts on 2/4/8 devices: %d simulated exactly, %d refused; %d forbidden cuts and halos refused\n",
         n_sims - before, n_refused - bref, nforb);
}

/* softmax over each axis and layernorm from each begin axis (with gamma, beta), every cut of
 * x (4,8,2): refused iff a normalised dim is cut; otherwise simulated (no partial output) */
static void test_norm_sim(void) {
  int before = n_sims, bref = n_refused;
  ts_shape shapes[3] = {shp(3, (int64_t[]){4, 8, 2})};
  float *full[3] = {malloc(64 * sizeof(float)), malloc(64 * sizeof(float)), malloc(64 * sizeof(float))};
  fill_int(full[0], 64, 81, -4, 4);
  fill_int(full[1], 64, 82, -2, 2);
  fill_int(full[2], 64, 83, -2, 2);
  for (int ln = 0; ln < 2; ln++)
    for (int axis = 0; axis < 3; axis++)
      for (int code = 0; code < 64; code++) {
        int64_t c[9] = {CUTS[code % 4], CUTS[(code / 4) % 4], CUTS[(code / 16) % 4], 1, 1, 1, 1, 1, 1};
        int nin = ln ? 3 : 1, nd[3] = {3, 3 - axis, 3 - axis};
        for (int i = 1; i < nin; i++) shapes[i] = shp(3 - axis, shapes[0].dims + axis);
        ts_op_strategy s = strat(nin, nd, c);
        char what[128];
        snprintf(what, sizeof what, "%s axis %d x(4,8,2) cuts (%lld,%lld,%lld) on 8",
                 ln ? "layernorm" : "softmax", axis, (long long)c[0], (long long)c[1],
                 (long long)c[2]);
        int want = 0;
        const char *subs[3] = {0};
        char b1[64];
        int64_t loop[3];
        int nl = 0, d_bad = -1;
        for (int d = 0; d < 3; d++) {
          if (shapes[0].dims[d] % c[d] && !want) want = TS_ESHAPE, subs[0] = "does not divide";
          int normed = ln ? d >= axis : d == axis;
          if (normed && c[d] > 1 && d_bad < 0) d_bad = d;
          if (!normed) loop[nl++] = c[d];
        }
        if (!want && d_bad >= 0) {
          want = TS_EUNSUPPORTED;
          snprintf(b1, sizeof b1, "input 0 (x) dim %d (size %lld) is cut %lld", d_bad,
                   (long long)shapes[0].dims[d_bad], (long long)c[d_bad]);
          subs[0] = b1;
        }
        if (!want && !divides_dev(8, nl, loop)) want = TS_EINVAL, subs[0] = "8 devices";
        ts_layout lin[3], lout;
        ts_shape osh;
        if (!call_rule(what, ln ? TS_SHARD_LAYERNORM : TS_SHARD_SOFTMAX, &s, 8, shapes, nin,
                       (int[]){axis}, want, subs, lin, &lout, &osh))
          continue;
        int dev[8], ndv, f = exp_dev(8, nl, loop, &ndv, dev), m[3], k = 0;
        for (int d = 0; d < 3; d++) m[d] = (ln ? d >= axis : d == axis) ? -1 : f + k++;
        CHECK_MSG(layout_is(&lin[0], ndv, dev, 3, m, 0) && ts_layout_equal(&lin[0], &lout) &&
                      (!ln || layout_is(&lin[1], ndv, dev, 3 - axis, (int[]){-1, -1, -1}, 0)),
                  "%s: layouts are not MindSpore's", what);
        norm_ctx nc = {axis, ln};
        float *fin[3] = {full[0], ln ? full[1] : NULL, ln ? full[2] : NULL};
        simulate(what, lin, shapes, nin, fin, &lout, &osh, k_norm, &nc);
      }
  free(full[0]), free(full[1]), free(full[2]);
  printf("softmax / layernorm (with gamma, beta): x(4,8,2), every axis, cuts {1,2,4,8}^3 on 8 "
         "devices: %d simulated exactly, %d refused\n",
         n_sims - before, n_refused - bref);
}

/* softmax, layernorm, batchnorm, elementwise: layouts and refusals */
static void test_normalisations(void) {
  ts_layout lin[5], lout;
  ts_shape osh;
  ts_shape x = shp(3, (int64_t[]){4, 8, 16});
  /* softmax: the axis may not be cut, the others may */
  ts_op_strategy s = strat(1, (int[]){3}, (int64_t[]){2, 4, 1});
  CHECK_OK(ts_shard_rule(TS_SHARD_SOFTMAX, &s, 16, &x, 1, NULL, lin, &lout, &osh));
  CHECK(layout_is(&lin[0], 3, (int[]){2, 2, 4}, 3, (int[]){1, 2, -1}, 0) &&
        ts_layout_equal(&lin[0], &lout) && ts_shape_equal(&osh, &x));
  s = strat(1, (int[]){3}, (int64_t[]){1, 1, 2});
  CHECK(ts_shard_rule(TS_SHARD_SOFTMAX, &s, 8, &x, 1, NULL, lin, &lout, &osh) == TS_EUNSUPPORTED &&
        strstr(ts_last_error(), "softmax: input 0 (x) dim 2 (size 16) is cut 2") &&
        strstr(ts_last_error(), "softmax axis"));
  CHECK_OK(ts_shard_rule(TS_SHARD_SOFTMAX, &s, 8, &x, 1, (int[]){1}, lin, &lout, &osh));
  CHECK(layout_is(&lout, 3, (int[]){4, 1, 2}, 3, (int[]){1, -1, 2}, 0));
  s = strat(1, (int[]){3}, (int64_t[]){1, 2, 1});
  CHECK(ts_shard_rule(TS_SHARD_SOFTMAX, &s, 8, &x, 1, (int[]){-2}, lin, &lout, &osh) ==
            TS_EUNSUPPORTED && strstr(ts_last_error(), "dim 1 (size 8) is cut 2"));
  CHECK(ts_shard_rule(TS_SHARD_SOFTMAX, &s, 8, &x, 1, (int[]){3}, lin, &lout, &osh) == TS_EINVAL &&
        strstr(ts_last_error(), "axis 3"));
  /* layernorm with gamma, beta over the last two dims */
  ts_shape ln[3] = {x, shp(2, (int64_t[]){8, 16}), shp(2, (int64_t[]){8, 16})};
  ts_op_strategy sl = strat(3, (int[]){3, 2, 2}, (int64_t[]){4, 1, 1, 1, 1, 1, 1});
  CHECK_OK(ts_shard_rule(TS_SHARD_LAYERNORM, &sl, 8, ln, 3, (int[]){-2}, lin, &lout, &osh));
  CHECK(layout_is(&lin[0], 2, (int[]){2, 4}, 3, (int[]){1, -1, -1}, 0) &&
        layout_is(&lin[1], 2, (int[]){2, 4}, 2, (int[]){-1, -1}, 0) && ts_layout_equal(&lin[0], &lout));
  sl.cuts[0][1] = 2;
  CHECK(ts_shard_rule(TS_SHARD_LAYERNORM, &sl, 8, ln, 3, (int[]){1}, lin, &lout, &osh) ==
            TS_EUNSUPPORTED && strstr(ts_last_error(), "layernorm: input 0 (x) dim 1 (size 8) is cut 2") &&
        strstr(ts_last_error(), "normalised"));
  sl.cuts[0][1] = 1, sl.cuts[2][0] = 2;
  CHECK(ts_shard_rule(TS_SHARD_LAYERNORM, &sl, 8, ln, 3, (int[]){1}, lin, &lout, &osh) ==
            TS_EUNSUPPORTED && strstr(ts_last_error(), "input 2 (beta) dim 0 (size 8) is cut 2"));
  ln[2] = shp(1, (int64_t[]){16});
  sl = strat(3, (int[]){3, 2, 1}, (int64_t[]){1, 1, 1, 1, 1, 1});
  CHECK(ts_shard_rule(TS_SHARD_LAYERNORM, &sl, 8, ln, 3, (int[]){1}, lin, &lout, &osh) ==
            TS_ESHAPE && strstr(ts_last_error(), "input 2 (beta)"));
  /* batchnorm: batch, channels and spatial dims; parameters cut like the channels */
  ts_shape bn[5] = {shp(4, (int64_t[]){8, 4, 2, 2}), shp(1, (int64_t[]){4}), shp(1, (int64_t[]){4}),
                    shp(1, (int64_t[]){4}), shp(1, (int64_t[]){4})};
  ts_op_strategy sb = strat(5, (int[]){4, 1, 1, 1, 1}, (int64_t[]){4, 1, 1, 1, 1, 1, 1, 1});
  CHECK_OK(ts_shard_rule(TS_SHARD_BATCHNORM, &sb, 8, bn, 5, NULL, lin, &lout, &osh));
  CHECK(layout_is(&lin[0], 5, (int[]){2, 4, 1, 1, 1}, 4, (int[]){1, 2, 3, 4}, 0) &&
        layout_is(&lin[4], 5, (int[]){2, 4, 1, 1, 1}, 1, (int[]){2}, 0) && ts_layout_equal(&lin[0], &lout));
  sb = strat(5, (int[]){4, 1, 1, 1, 1}, (int64_t[]){2, 2, 1, 1, 2, 2, 2, 2});
  CHECK_OK(ts_shard_rule(TS_SHARD_BATCHNORM, &sb, 8, bn, 5, NULL, lin, &lout, &osh));
  CHECK(layout_is(&lin[0], 5, (int[]){2, 2, 2, 1, 1}, 4, (int[]){1, 2, 3, 4}, 0) &&
        layout_is(&lin[1], 5, (int[]){2, 2, 2, 1, 1}, 1, (int[]){2}, 0) && ts_layout_equal(&lin[0], &lout));
  sb.cuts[3][0] = 1;
  EXPECT_ERR(ts_shard_rule(TS_SHARD_BATCHNORM, &sb, 8, bn, 5, NULL, lin, &lout, &osh),
             TS_EUNSUPPORTED, "batchnorm: input 3 (mean) dim 0 (size 4) is cut 1",
             "input 0 (x) dim 1, the same dimension C, is cut 2");
  sb.cuts[3][0] = 2, sb.cuts[0][2] = 2, sb.cuts[0][0] = 1; /* a spatial cut: synchronised like the batch */
  CHECK_OK(ts_shard_rule(TS_SHARD_BATCHNORM, &sb, 8, bn, 5, NULL, lin, &lout, &osh));
  CHECK(layout_is(&lin[0], 5, (int[]){2, 1, 2, 2, 1}, 4, (int[]){1, 2, 3, 4}, 0));
  CHECK(ts_shard_rule(TS_SHARD_BATCHNORM, &sb, 8, bn, 3, NULL, lin, &lout, &osh) == TS_EINVAL &&
        strstr(ts_last_error(), "batchnorm"));
  /* elementwise: the strategy itself, repeat axis first */
  s = strat(1, (int[]){3}, (int64_t[]){2, 1, 4});
  CHECK_OK(ts_shard_rule(TS_SHARD_ELEMENTWISE, &s, 32, &x, 1, NULL, lin, &lout, &osh));
  CHECK(layout_is(&lin[0], 4, (int[]){4, 2, 1, 4}, 3, (int[]){1, 2, 3}, 0) &&
        ts_layout_equal(&lin[0], &lout));
  printf("softmax/layernorm/batchnorm/elementwise: layouts and %s refusals checked\n",
         "axis, parameter and shape");
}

/* MindSpore's documented example and general refusals */
static void test_misc(void) {
  ts_layout lin[2], lout;
  ts_shape osh;
  ts_shape mm[2] = {shp(2, (int64_t[]){8, 8}), shp(2, (int64_t[]){8, 8})};
  /* MatMul.shard(((2,1),(1,4))) on 8 devices: dev (2,1,4); MindSpore's tensor maps (2,1), (1,0),
   * (2,0) counted from the right */
  ts_op_strategy s = strat(2, (int[]){2, 2}, (int64_t[]){2, 1, 1, 4});
  CHECK_OK(ts_shard_rule(TS_SHARD_MATMUL, &s, 8, mm, 2, NULL, lin, &lout, &osh));
  int ms[2];
  CHECK(layout_is(&lout, 3, (int[]){2, 1, 4}, 2, (int[]){0, 2}, 0));
  ts_layout_tmap_to_mindspore(3, 2, lin[0].tmap, ms);
  CHECK(ms[0] == 2 && ms[1] == 1);
  ts_layout_tmap_to_mindspore(3, 2, lin[1].tmap, ms);
  CHECK(ms[0] == 1 && ms[1] == 0);
  ts_layout_tmap_to_mindspore(3, 2, lout.tmap, ms);
  CHECK(ms[0] == 2 && ms[1] == 0);
  /* on 16 devices the repeat axis comes first */
  CHECK_OK(ts_shard_rule(TS_SHARD_MATMUL, &s, 16, mm, 2, NULL, lin, &lout, &osh));
  CHECK(layout_is(&lout, 4, (int[]){2, 2, 1, 4}, 2, (int[]){1, 3}, 0));
  /* refusals common to all ops */
  ts_op_strategy bad = s;
  bad.ninputs = 1;
  CHECK(ts_shard_rule(TS_SHARD_MATMUL, &bad, 8, mm, 2, NULL, lin, &lout, &osh) == TS_EINVAL &&
        strstr(ts_last_error(), "describes 1 input"));
  bad = s;
  bad.ndim[1] = 3;
  CHECK(ts_shard_rule(TS_SHARD_MATMUL, &bad, 8, mm, 2, NULL, lin, &lout, &osh) == TS_EINVAL &&
        strstr(ts_last_error(), "input 1 (b) has 3 cut(s)"));
  bad = s;
  bad.cuts[0][0] = 0;
  CHECK(ts_shard_rule(TS_SHARD_MATMUL, &bad, 8, mm, 2, NULL, lin, &lout, &osh) == TS_EINVAL &&
        strstr(ts_last_error(), "input 0 (a) dim 0 is cut 0"));
  CHECK(ts_shard_rule(TS_SHARD_MATMUL, &s, 0, mm, 2, NULL, lin, &lout, &osh) == TS_EINVAL);
  CHECK(ts_shard_rule(TS_SHARD_MATMUL, &s, 12, mm, 2, NULL, lin, &lout, &osh) == TS_EINVAL &&
        strstr(ts_last_error(), "strategy ((2,1),(1,4)) cuts the computation into 8 pieces, which "
                                "does not divide 12 devices"));
  CHECK(ts_shard_rule(TS_SHARD_OP_COUNT, &s, 8, mm, 2, NULL, lin, &lout, &osh) == TS_EINVAL);
  ts_shape mk[2] = {shp(2, (int64_t[]){8, 4}), shp(2, (int64_t[]){8, 8})};
  CHECK(ts_shard_rule(TS_SHARD_MATMUL, &s, 8, mk, 2, NULL, lin, &lout, &osh) == TS_ESHAPE &&
        strstr(ts_last_error(), "K differs (4 vs 8)"));
  /* outputs untouched on refusal */
  ts_layout keep = lout;
  CHECK(ts_shard_rule(TS_SHARD_MATMUL, &s, 12, mm, 2, NULL, lin, &lout, &osh) != TS_OK &&
        ts_layout_equal(&keep, &lout));
  /* too many device axes: dense on a 7-d x */
  ts_shape dx[2] = {shp(7, (int64_t[]){1, 1, 1, 1, 1, 1, 4}), shp(2, (int64_t[]){4, 4})};
  ts_op_strategy sd = strat(2, (int[]){7, 2}, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1});
  CHECK(ts_shard_rule(TS_SHARD_DENSE, &sd, 2, dx, 2, NULL, lin, &lout, &osh) == TS_ERANGE &&
        strstr(ts_last_error(), "9 axes"));
  printf("misc: MindSpore's MatMul ((2,1),(1,4)) example, repeat axis, common refusals checked\n");
}

int main(void) {
  double t0 = ts_time_now();
  test_misc();
  test_matmul();
  test_dense();
  test_reduce();
  test_binary();
  test_embedding();
  test_conv2d();
  test_norm_sim();
  test_batchnorm();
  test_attention();
  test_softmax_ce();
  test_pool();
  test_normalisations();
  printf("total: %d strategies accepted, %d refused as expected, %d simulations (%d with partial "
         "outputs), %.2f s\n",
         n_accepted, n_refused, n_sims, n_partial_sims, ts_time_now() - t0);
  return ts_test_finish("test_sharding");
}
