/* Operator sharding rules: strategy + device count -> device matrix and layouts
 * (see src/parallel/sharding.h and docs/layout.md, "Sharding rules"). */
#include <stdio.h>
#include <string.h>

#include "parallel/sharding.h"

#define MAXT (TS_STRATEGY_MAX_INPUTS + 1) /* inputs + the output */
#define MAXLOOP 16

/* A rule under construction: loop axes (cut, and who fixed it), every tensor's map in loop-axis
 * numbers (-1: not cut), the output's partial loop axes and shape. */
typedef struct {
  ts_shard_op op;
  const char *name;
  const char *const *inames;
  const ts_op_strategy *s;
  const ts_shape *in;
  int nin;
  int nloop;
  int64_t cut[MAXLOOP];
  const char *lname[MAXLOOP];
  int src_in[MAXLOOP], src_dim[MAXLOOP]; /* first input dim that fixed the cut, -1 if none */
  int map[MAXT][TS_MAX_DIMS];
  unsigned partial; /* loop axes the output is a partial sum over */
  ts_shape out;
} rule;

static const char *const OP_NAMES[TS_SHARD_OP_COUNT] = {
    "matmul", "dense", "elementwise", "binary", "reduce",
    "softmax", "layernorm", "embedding", "conv2d", "batchnorm",
    "attention", "softmax_ce", "pool"};

static const char *const IN_MATMUL[] = {"a", "b"};
static const char *const IN_DENSE[] = {"x", "w", "b"};
static const char *const IN_X[] = {"x"};
static const char *const IN_LN[] = {"x", "gamma", "beta"};
static const char *const IN_EMB[] = {"ids", "table"};
static const char *const IN_BN[] = {"x", "gamma", "beta", "mean", "var"};
static const char *const IN_ATTN[] = {"q", "k", "v"};
static const char *const IN_CE[] = {"logits", "labels"};

const char *ts_shard_op_name(ts_shard_op op) {
  return (int)op >= 0 && op < TS_SHARD_OP_COUNT ? OP_NAMES[op] : "?";
}

static int64_t cutof(const rule *R, int i, int d) { return R->s->cuts[i][d]; }

/* A new loop axis (cut 1 until an input dim sets it). */
static int loop_new(rule *R, const char *lname) {
  int a = R->nloop++;
  R->cut[a] = 1;
  R->lname[a] = lname;
  R->src_in[a] = R->src_dim[a] = -1;
  return a;
}

/* Input i's dim d is cut along loop axis a: its cut must equal the cut other inputs gave a. */
static int loop_bind(rule *R, int a, int i, int d) {
  int64_t c = cutof(R, i, d);
  R->map[i][d] = a;
  if (R->src_in[a] < 0) {
    R->src_in[a] = i;
    R->src_dim[a] = d;
    R->cut[a] = c;
    return TS_OK;
  }
  if (R->cut[a] != c) {
    int j = R->src_in[a], e = R->src_dim[a];
    return ts_error_set(TS_EUNSUPPORTED,
                        "%s: input %d (%s) dim %d (size %lld) is cut %lld, but input %d (%s) dim "
                        "%d, the same dimension %s, is cut %lld: shared dimensions must be cut "
                        "alike",
                        R->name, i, R->inames[i], d, (long long)R->in[i].dims[d], (long long)c, j,
                        R->inames[j], e, R->lname[a], (long long)R->cut[a]);
  }
  return TS_OK;
}

/* Input i's dim d may not be cut (`why` completes the message). */
static int forbid(rule *R, int i, int d, const char *why) {
  R->map[i][d] = -1;
  if (cutof(R, i, d) != 1)
    return ts_error_set(TS_EUNSUPPORTED, "%s: input %d (%s) dim %d (size %lld) is cut %lld: %s",
                        R->name, i, R->inames[i], d, (long long)R->in[i].dims[d],
                        (long long)cutof(R, i, d), why);
  return TS_OK;
}

/* Checks common to every op: counts, dimensions, cuts >= 1 that divide their dimension. */
static int check_inputs(rule *R, int nmin, int nmax) {
  if (R->nin < nmin || R->nin > nmax) {
    if (nmin == nmax)
      return ts_error_set(TS_EINVAL, "%s: takes %d tensor input(s), got %d", R->name, nmin, R->nin);
    return ts_error_set(TS_EINVAL, "%s: takes %d to %d tensor inputs, got %d", R->name, nmin, nmax,
                        R->nin);
  }
  if (R->s->ninputs != R->nin)
    return ts_error_set(TS_EINVAL, "%s: the strategy describes %d input(s), the op has %d",
                        R->name, R->s->ninputs, R->nin);
  for (int i = 0; i < R->nin; i++) {
    const ts_shape *sh = &R->in[i];
    if (sh->ndim < 0 || sh->ndim > TS_MAX_DIMS)
      return ts_error_set(TS_EINVAL, "%s: input %d (%s) has %d dims (0..%d allowed)", R->name, i,
                          R->inames[i], sh->ndim, TS_MAX_DIMS);
    if (R->s->ndim[i] != sh->ndim)
      return ts_error_set(TS_EINVAL,
                          "%s: the strategy of input %d (%s) has %d cut(s), the input has %d "
                          "dimension(s)",
                          R->name, i, R->inames[i], R->s->ndim[i], sh->ndim);
    for (int d = 0; d < sh->ndim; d++) {
      int64_t c = R->s->cuts[i][d], n = sh->dims[d];
      R->map[i][d] = -1;
      if (n < 0)
        return ts_error_set(TS_ESHAPE, "%s: input %d (%s) dim %d has negative size %lld", R->name,
                            i, R->inames[i], d, (long long)n);
      if (c < 1)
        return ts_error_set(TS_EINVAL, "%s: input %d (%s) dim %d is cut %lld (cuts are >= 1)",
                            R->name, i, R->inames[i], d, (long long)c);
      if (n % c)
        return ts_error_set(TS_ESHAPE,
                            "%s: input %d (%s) dim %d of size %lld is cut %lld, which does not "
                            "divide it",
                            R->name, i, R->inames[i], d, (long long)n, (long long)c);
    }
  }
  return TS_OK;
}

/* Normalises a possibly negative axis of an ndim-dim tensor; -1 if out of range. */
static int norm_axis(int axis, int ndim) {
  if (axis < 0) axis += ndim;
  return axis >= 0 && axis < ndim ? axis : -1;
}

static int rule_matmul(rule *R) {
  int rc = check_inputs(R, 2, 2);
  if (rc) return rc;
  const ts_shape *a = &R->in[0], *b = &R->in[1];
  if (a->ndim != 2 || b->ndim != 2)
    return ts_error_set(TS_ESHAPE, "%s: a and b must be 2-d, got %d-d and %d-d", R->name, a->ndim,
                        b->ndim);
  if (a->dims[1] != b->dims[0])
    return ts_error_set(TS_ESHAPE, "%s: a is %lldx%lld and b %lldx%lld: K differs (%lld vs %lld)",
                        R->name, (long long)a->dims[0], (long long)a->dims[1],
                        (long long)b->dims[0], (long long)b->dims[1], (long long)a->dims[1],
                        (long long)b->dims[0]);
  int m = loop_new(R, "M"), k = loop_new(R, "K"), n = loop_new(R, "N");
  if ((rc = loop_bind(R, m, 0, 0)) || (rc = loop_bind(R, k, 0, 1)) || (rc = loop_bind(R, k, 1, 0)) ||
      (rc = loop_bind(R, n, 1, 1)))
    return rc;
  R->out.ndim = 2;
  R->out.dims[0] = a->dims[0];
  R->out.dims[1] = b->dims[1];
  R->map[R->nin][0] = m;
  R->map[R->nin][1] = n;
  R->partial = 1u << k;
  return TS_OK;
}

static int rule_dense(rule *R) {
  int rc = check_inputs(R, 2, 3);
  if (rc) return rc;
  const ts_shape *x = &R->in[0], *w = &R->in[1];
  if (x->ndim < 1 || w->ndim != 2)
    return ts_error_set(TS_ESHAPE, "%s: x must have >= 1 dims and w 2, got %d and %d", R->name,
                        x->ndim, w->ndim);
  int nx = x->ndim;
  if (x->dims[nx - 1] != w->dims[1])
    return ts_error_set(TS_ESHAPE,
                        "%s: x's last dim (%lld) differs from w's dim 1 (%lld): w is (out,in)",
                        R->name, (long long)x->dims[nx - 1], (long long)w->dims[1]);
  if (R->nin == 3 && (R->in[2].ndim != 1 || R->in[2].dims[0] != w->dims[0]))
    return ts_error_set(TS_ESHAPE, "%s: input 2 (b) must be (OUT) = (%lld), like w's dim 0",
                        R->name, (long long)w->dims[0]);
  for (int d = 0; d < nx - 1; d++)
    if ((rc = loop_bind(R, loop_new(R, "batch"), 0, d))) return rc;
  int k = loop_new(R, "IN"), o = loop_new(R, "OUT");
  if ((rc = loop_bind(R, k, 0, nx - 1)) || (rc = loop_bind(R, k, 1, 1)) ||
      (rc = loop_bind(R, o, 1, 0)) || (R->nin == 3 && (rc = loop_bind(R, o, 2, 0))))
    return rc;
  R->out = *x;
  R->out.dims[nx - 1] = w->dims[0];
  for (int d = 0; d < nx - 1; d++) R->map[R->nin][d] = d;
  R->map[R->nin][nx - 1] = o;
  R->partial = 1u << k;
  return TS_OK;
}

static int rule_elementwise(rule *R) {
  int rc = check_inputs(R, 1, 1);
  if (rc) return rc;
  for (int d = 0; d < R->in[0].ndim; d++) {
    if ((rc = loop_bind(R, loop_new(R, "dim"), 0, d))) return rc;
    R->map[R->nin][d] = d;
  }
  R->out = R->in[0];
  return TS_OK;
}

static int rule_binary(rule *R) {
  int rc = check_inputs(R, 2, 2);
  if (rc) return rc;
  int na = R->in[0].ndim, nb = R->in[1].ndim, no = na > nb ? na : nb;
  R->out.ndim = no;
  for (int j = 0; j < no; j++) {
    int dim[2] = {j - (no - na), j - (no - nb)};
    int64_t size = 1;
    for (int i = 0; i < 2; i++) {
      if (dim[i] < 0) continue;
      int64_t n = R->in[i].dims[dim[i]];
      if (n == 1) continue;
      if (size != 1 && size != n)
        return ts_error_set(TS_ESHAPE,
                            "%s: a dim %d (size %lld) and b dim %d (size %lld) do not broadcast",
                            R->name, dim[0], (long long)R->in[0].dims[dim[0]], dim[1],
                            (long long)R->in[1].dims[dim[1]]);
      size = n;
    }
    R->out.dims[j] = size;
    int a = loop_new(R, "broadcast-matched");
    for (int i = 0; i < 2; i++) {
      if (dim[i] < 0) continue;
      if (R->in[i].dims[dim[i]] == 1 && size != 1) {
        R->map[i][dim[i]] = -1; /* broadcast: check_inputs made its cut 1 */
        continue;
      }
      if ((rc = loop_bind(R, a, i, dim[i]))) return rc;
    }
    R->map[R->nin][j] = a;
  }
  return TS_OK;
}

static int rule_reduce(rule *R, const int *attrs) {
  int rc = check_inputs(R, 1, 1);
  if (rc) return rc;
  int nd = R->in[0].ndim;
  unsigned all = nd ? (unsigned)((1u << nd) - 1) : 0u;
  unsigned mask = attrs ? (unsigned)attrs[0] : all;
  int keep = attrs ? attrs[1] : 0, kind = attrs ? attrs[2] : 0;
  if (attrs && (attrs[0] < 0 || (mask & ~all)))
    return ts_error_set(TS_EINVAL, "%s: axes mask 0x%x names axes beyond the %d dims of x",
                        R->name, (unsigned)attrs[0], nd);
  if (keep != 0 && keep != 1)
    return ts_error_set(TS_EINVAL, "%s: keepdims is %d (0 or 1)", R->name, keep);
  if (kind < 0 || kind > 2)
    return ts_error_set(TS_EINVAL, "%s: kind is %d (0 sum, 1 mean, 2 max/min)", R->name, kind);
  int j = 0;
  for (int d = 0; d < nd; d++) {
    int a = loop_new(R, "dim");
    if ((rc = loop_bind(R, a, 0, d))) return rc;
    if (mask & (1u << d)) {
      if (kind == 2 && R->cut[a] > 1)
        return ts_error_set(TS_EUNSUPPORTED,
                            "%s: input 0 (x) dim %d (size %lld) is cut %lld, but a max/min over "
                            "a cut axis has no partial-sum form",
                            R->name, d, (long long)R->in[0].dims[d], (long long)R->cut[a]);
      if (R->cut[a] > 1) R->partial |= 1u << a;
      if (keep) {
        R->out.dims[j] = 1;
        R->map[R->nin][j++] = -1;
      }
    } else {
      R->out.dims[j] = R->in[0].dims[d];
      R->map[R->nin][j++] = a;
    }
  }
  R->out.ndim = j;
  return TS_OK;
}

static int rule_softmax(rule *R, const int *attrs) {
  int rc = check_inputs(R, 1, 1);
  if (rc) return rc;
  int nd = R->in[0].ndim, raw = attrs ? attrs[0] : -1, ax = norm_axis(raw, nd);
  if (ax < 0)
    return ts_error_set(TS_EINVAL, "%s: axis %d is outside the %d dims of x", R->name, raw, nd);
  for (int d = 0; d < nd; d++) {
    if (d == ax) {
      if ((rc = forbid(R, 0, d, "the softmax axis must not be cut (it is normalised whole)")))
        return rc;
    } else if ((rc = loop_bind(R, loop_new(R, "dim"), 0, d))) {
      return rc;
    }
    R->map[R->nin][d] = R->map[0][d];
  }
  R->out = R->in[0];
  return TS_OK;
}

static int rule_layernorm(rule *R, const int *attrs) {
  int rc = check_inputs(R, 1, 3);
  if (rc) return rc;
  if (R->nin == 2)
    return ts_error_set(TS_EINVAL, "%s: takes x, or x, gamma and beta (got 2 inputs)", R->name);
  int nd = R->in[0].ndim, raw = attrs ? attrs[0] : -1, begin = norm_axis(raw, nd);
  if (begin < 0)
    return ts_error_set(TS_EINVAL, "%s: begin_norm_axis %d is outside the %d dims of x", R->name,
                        raw, nd);
  for (int i = 1; i < R->nin; i++) {
    const ts_shape *p = &R->in[i];
    int ok = p->ndim == nd - begin;
    for (int d = 0; ok && d < p->ndim; d++) ok = p->dims[d] == R->in[0].dims[begin + d];
    if (!ok)
      return ts_error_set(TS_ESHAPE, "%s: input %d (%s) must have x's shape from dim %d on",
                          R->name, i, R->inames[i], begin);
    for (int d = 0; d < p->ndim; d++)
      if ((rc = forbid(R, i, d, "layernorm parameters are replicated"))) return rc;
  }
  for (int d = 0; d < nd; d++) {
    if (d >= begin) {
      if ((rc = forbid(R, 0, d, "a normalised axis must not be cut (begin_norm_axis)"))) return rc;
    } else if ((rc = loop_bind(R, loop_new(R, "dim"), 0, d))) {
      return rc;
    }
    R->map[R->nin][d] = R->map[0][d];
  }
  R->out = R->in[0];
  return TS_OK;
}

static int rule_embedding(rule *R) {
  int rc = check_inputs(R, 2, 2);
  if (rc) return rc;
  const ts_shape *ids = &R->in[0], *t = &R->in[1];
  if (t->ndim != 2)
    return ts_error_set(TS_ESHAPE, "%s: the table must be 2-d (V,D), got %d-d", R->name, t->ndim);
  if (ids->ndim + 1 > TS_MAX_DIMS)
    return ts_error_set(TS_ESHAPE, "%s: ids have %d dims; the output would have more than %d",
                        R->name, ids->ndim, TS_MAX_DIMS);
  for (int d = 0; d < ids->ndim; d++) {
    if ((rc = loop_bind(R, loop_new(R, "batch"), 0, d))) return rc;
    R->map[R->nin][d] = d;
    R->out.dims[d] = ids->dims[d];
  }
  int v = loop_new(R, "V"), dd = loop_new(R, "D");
  if ((rc = loop_bind(R, v, 1, 0)) || (rc = loop_bind(R, dd, 1, 1))) return rc;
  R->out.ndim = ids->ndim + 1;
  R->out.dims[ids->ndim] = t->dims[1];
  R->map[R->nin][ids->ndim] = dd;
  R->partial = 1u << v;
  return TS_OK;
}

int ts_conv2d_halo(int64_t in, int64_t k, int stride, int pad, int64_t cut, int *lo, int *hi) {
  *lo = *hi = 0;
  int64_t out = (in + 2 * (int64_t)pad - k) / stride + 1;
  if (cut < 1 || out < 1) return ts_error_set(TS_EINVAL, "cut %lld of a size-%lld dim", (long long)cut, (long long)in);
  if (cut == 1) return TS_OK;
  if (out % cut || out * stride != in)
    return ts_error_set(TS_EUNSUPPORTED,
                        "size %lld cut %lld: a spatial cut needs the output size (%lld) divisible by the cut "
                        "and times the stride (%d) equal to the input size, so every rank's input band is its "
                        "output band times the stride",
                        (long long)in, (long long)cut, (long long)out, stride);
  int64_t band = in / cut, l = pad, h = k - stride - pad;
  if (h < 0) h = 0; /* the band's last window ends inside it */
  if (l > band || h > band)
    return ts_error_set(TS_EUNSUPPORTED,
                        "size %lld cut %lld: bands of %lld rows are thinner than the halo (%lld before, %lld "
                        "after) the kernel of %lld needs",
                        (long long)in, (long long)cut, (long long)band, (long long)l, (long long)h, (long long)k);
  if ((band + l + h - k) / stride + 1 != out / cut)
    return ts_error_set(TS_EUNSUPPORTED, "size %lld cut %lld: the bands do not tile the output", (long long)in,
                        (long long)cut);
  *lo = (int)l, *hi = (int)h;
  return TS_OK;
}

static int rule_conv2d(rule *R, const int *attrs) {
  int rc = check_inputs(R, 2, 2);
  if (rc) return rc;
  const ts_shape *x = &R->in[0], *w = &R->in[1];
  if (x->ndim != 4 || w->ndim != 4)
    return ts_error_set(TS_ESHAPE, "%s: x (N,C,H,W) and w (O,C,KH,KW) must be 4-d, got %d-d and %d-d",
                        R->name, x->ndim, w->ndim);
  if (x->dims[1] != w->dims[1])
    return ts_error_set(TS_ESHAPE, "%s: x has %lld channels, w expects %lld", R->name,
                        (long long)x->dims[1], (long long)w->dims[1]);
  int st[2] = {1, 1}, pad[2] = {0, 0};
  if (attrs) st[0] = attrs[0], st[1] = attrs[1], pad[0] = attrs[2], pad[1] = attrs[3];
  if (st[0] < 1 || st[1] < 1 || pad[0] < 0 || pad[1] < 0)
    return ts_error_set(TS_EINVAL, "%s: strides (%d,%d) must be >= 1 and pads (%d,%d) >= 0",
                        R->name, st[0], st[1], pad[0], pad[1]);
  R->out.ndim = 4;
  R->out.dims[0] = x->dims[0];
  R->out.dims[1] = w->dims[0];
  for (int k = 0; k < 2; k++) {
    int64_t span = x->dims[2 + k] + 2 * pad[k] - w->dims[2 + k];
    if (span < 0)
      return ts_error_set(TS_ESHAPE, "%s: kernel dim %d (size %lld) exceeds the padded input (%lld)",
                          R->name, 2 + k, (long long)w->dims[2 + k],
                          (long long)(x->dims[2 + k] + 2 * pad[k]));
    R->out.dims[2 + k] = span / st[k] + 1;
  }
  for (int d = 2; d < 4; d++)
    if ((rc = forbid(R, 1, d, "conv2d cuts w by output and input channels: the kernel is not cut"))) return rc;
  /* loop axes (N, C, O) as dense's (batch, k, o), then the output rows and columns (H, W): input
   * channels are summed over, so a cut of C leaves the output partial over it (each rank
   * convolves its channels; the sums are reduced). A spatial cut gives each rank a band of output
   * rows; its input rows are its own band plus halo rows of its neighbours (ts_conv2d_halo). */
  int n = loop_new(R, "N"), c = loop_new(R, "C"), o = loop_new(R, "O"), h = loop_new(R, "H"), wl = loop_new(R, "W");
  if ((rc = loop_bind(R, n, 0, 0)) || (rc = loop_bind(R, c, 0, 1)) || (rc = loop_bind(R, c, 1, 1)) ||
      (rc = loop_bind(R, o, 1, 0)) || (rc = loop_bind(R, h, 0, 2)) || (rc = loop_bind(R, wl, 0, 3)))
    return rc;
  for (int k = 0; k < 2; k++) {
    int64_t cut = R->cut[k ? wl : h];
    if (cut <= 1) continue;
    int lo, hi;
    if ((rc = ts_conv2d_halo(x->dims[2 + k], w->dims[2 + k], st[k], pad[k], cut, &lo, &hi)))
      return ts_error_wrap(rc, "%s: input 0 (x) dim %d", R->name, 2 + k);
  }
  if (R->cut[c] > 1) R->partial |= 1u << c;
  int *om = R->map[R->nin];
  om[0] = n, om[1] = o, om[2] = h, om[3] = wl;
  return TS_OK;
}

static int rule_batchnorm(rule *R) {
  int rc = check_inputs(R, 1, 5);
  if (rc) return rc;
  if (R->nin != 1 && R->nin != 5)
    return ts_error_set(TS_EINVAL, "%s: takes x, or x, gamma, beta, mean and var (got %d inputs)",
                        R->name, R->nin);
  const ts_shape *x = &R->in[0];
  if (x->ndim < 2)
    return ts_error_set(TS_ESHAPE, "%s: x must be (N,C,...), got %d-d", R->name, x->ndim);
  for (int i = 1; i < R->nin; i++)
    if (R->in[i].ndim != 1 || R->in[i].dims[0] != x->dims[1])
      return ts_error_set(TS_ESHAPE, "%s: input %d (%s) must be (C) = (%lld)", R->name, i,
                          R->inames[i], (long long)x->dims[1]);
  /* loop axes (N, C, spatial...): statistics are per channel, summed over the batch and the
   * spatial dims, so those cuts synchronise them (SyncBatchNorm over each cut axis) */
  int n = loop_new(R, "N"), c = loop_new(R, "C");
  if ((rc = loop_bind(R, n, 0, 0)) || (rc = loop_bind(R, c, 0, 1))) return rc;
  int nsync = R->cut[n] > 1;
  for (int d = 2; d < x->ndim; d++) {
    if ((rc = loop_bind(R, loop_new(R, d == 2 ? "H" : d == 3 ? "W" : "S"), 0, d))) return rc;
    nsync += R->cut[R->map[0][d]] > 1;
  }
  if (nsync > 3)
    return ts_error_set(TS_EUNSUPPORTED, "%s: x is cut on %d of its batch and spatial dims; the statistics are "
                        "synchronised over at most 3", R->name, nsync);
  for (int i = 1; i < R->nin; i++)
    if ((rc = loop_bind(R, c, i, 0))) return rc;
  for (int d = 0; d < x->ndim; d++) R->map[R->nin][d] = R->map[0][d];
  R->out = *x;
  return TS_OK;
}

/* attrs {layout} (NULL: 0): 0 = q, k, v (B,H,T,D), 1 = (B,T,H,D). */
static int rule_attention(rule *R, const int *attrs) {
  int rc = check_inputs(R, 3, 3);
  if (rc) return rc;
  const int layout = attrs ? attrs[0] : 0, hd = layout == 1 ? 2 : 1, td = layout == 1 ? 1 : 2;
  const char *form = layout == 1 ? "(B,T,H,D)" : "(B,H,T,D)";
  const ts_shape *q = &R->in[0];
  for (int i = 0; i < 3; i++)
    if (R->in[i].ndim != 4)
      return ts_error_set(TS_ESHAPE, "%s: input %d (%s) must be 4-d %s, got %d-d", R->name, i, R->inames[i], form,
                          R->in[i].ndim);
  for (int i = 1; i < 3; i++)
    if (!ts_shape_equal(&R->in[i], q))
      return ts_error_set(TS_ESHAPE,
                          "%s: input %d (%s) is (%lld,%lld,%lld,%lld) but q is "
                          "(%lld,%lld,%lld,%lld): q, k and v must have the same shape %s",
                          R->name, i, R->inames[i], (long long)R->in[i].dims[0],
                          (long long)R->in[i].dims[1], (long long)R->in[i].dims[2],
                          (long long)R->in[i].dims[3], (long long)q->dims[0],
                          (long long)q->dims[1], (long long)q->dims[2], (long long)q->dims[3], form);
  /* a sequence cut (T) runs as ring attention: the key/value blocks pass around the cut's ranks;
   * its device axis comes before the heads' (as the sequence cut of a dense's input comes before
   * its tensor-parallel cut: the heads' ranks neighbours, the ring across them) */
  int seq = cutof(R, 0, td) > 1 || cutof(R, 1, td) > 1 || cutof(R, 2, td) > 1;
  int b = loop_new(R, "B"), t = seq ? loop_new(R, "T") : -1, h = loop_new(R, "H");
  for (int i = 0; i < 3; i++) {
    if ((rc = loop_bind(R, b, i, 0)) || (rc = loop_bind(R, h, i, hd))) return rc;
    if (seq && (rc = loop_bind(R, t, i, td))) return rc;
    R->map[i][td] = seq ? t : -1;
    R->map[i][3] = -1;
    if (cutof(R, i, 3) != 1)
      return ts_error_set(TS_EUNSUPPORTED,
                          "%s: input %d (%s) dim 3 (D) is cut %lld: attention cuts q, k and v by batch (dim 0), "
                          "heads (dim %d) and the sequence (dim %d, ring attention) only; the head dim (size %lld) is "
                          "contracted whole in every score (a cut would make the scores partial sums before the "
                          "softmax)",
                          R->name, i, R->inames[i], (long long)cutof(R, i, 3), hd, td, (long long)R->in[i].dims[3]);
  }
  int *om = R->map[R->nin];
  om[0] = b, om[hd] = h, om[td] = t, om[3] = -1;
  R->out = *q;
  return TS_OK;
}

static int rule_softmax_ce(rule *R) {
  int rc = check_inputs(R, 2, 2);
  if (rc) return rc;
  const ts_shape *lg = &R->in[0], *lb = &R->in[1];
  if (lg->ndim != 2 || lb->ndim != 1)
    return ts_error_set(TS_ESHAPE, "%s: logits must be 2-d (N,C) and labels 1-d (N), got %d-d and "
                        "%d-d", R->name, lg->ndim, lb->ndim);
  if (lb->dims[0] != lg->dims[0])
    return ts_error_set(TS_ESHAPE, "%s: %lld labels for %lld rows of logits", R->name,
                        (long long)lb->dims[0], (long long)lg->dims[0]);
  int n = loop_new(R, "N"), c = loop_new(R, "C");
  if ((rc = loop_bind(R, n, 0, 0)) || (rc = loop_bind(R, c, 0, 1)) || (rc = loop_bind(R, n, 1, 0)))
    return rc;
  R->out.ndim = 0; /* the scalar mean loss: partial over n, replicated over c */
  R->partial = 1u << n;
  return TS_OK;
}

static int rule_pool(rule *R, const int *attrs) {
  int rc = check_inputs(R, 1, 1);
  if (rc) return rc;
  const ts_shape *x = &R->in[0];
  if (x->ndim != 4)
    return ts_error_set(TS_ESHAPE, "%s: x must be 4-d (N,C,H,W), got %d-d", R->name, x->ndim);
  int oh = attrs ? attrs[0] : 1, ow = attrs ? attrs[1] : 1, global = attrs ? attrs[2] : 0;
  if (oh < 1 || ow < 1)
    return ts_error_set(TS_EINVAL, "%s: output size (%d,%d) must be >= 1 (attrs {OH, OW, global})",
                        R->name, oh, ow);
  int n = loop_new(R, "N"), c = loop_new(R, "C");
  if ((rc = loop_bind(R, n, 0, 0)) || (rc = loop_bind(R, c, 0, 1))) return rc;
  if (global) { /* a global average: each rank averages its band, the output is partial over the cuts */
    for (int d = 2; d < 4; d++) {
      int a = loop_new(R, d == 2 ? "H" : "W");
      if ((rc = loop_bind(R, a, 0, d))) return rc;
      if (R->cut[a] > 1) R->partial |= 1u << a;
    }
  } else {
    for (int d = 2; d < 4; d++)
      if ((rc = forbid(R, 0, d,
                       "pool cuts x by batch (dim 0) and channels (dim 1) only: cutting a spatial "
                       "dim of a windowed pooling needs halo exchange (only a global average's are cut)")))
        return rc;
  }
  R->out = *x;
  R->out.dims[2] = oh;
  R->out.dims[3] = ow;
  int *om = R->map[R->nin];
  om[0] = n, om[1] = c, om[2] = -1, om[3] = -1;
  return TS_OK;
}

int ts_shard_rule(ts_shard_op op, const ts_op_strategy *s, int ndevices, const ts_shape *in_shapes,
                  int nin, const int *attrs, ts_layout *in_layouts, ts_layout *out_layout,
                  ts_shape *out_shape) {
  if ((int)op < 0 || op >= TS_SHARD_OP_COUNT)
    return ts_error_set(TS_EINVAL, "ts_shard_rule: unknown op %d", (int)op);
  const char *name = OP_NAMES[op];
  if (!s || !in_shapes || !in_layouts || !out_layout)
    return ts_error_set(TS_EINVAL, "%s: NULL strategy, shapes or layouts", name);
  if (nin < 0 || nin > TS_STRATEGY_MAX_INPUTS)
    return ts_error_set(TS_EINVAL, "%s: %d inputs (0..%d)", name, nin, TS_STRATEGY_MAX_INPUTS);
  if (ndevices < 1)
    return ts_error_set(TS_EINVAL, "%s: %d devices (must be >= 1)", name, ndevices);
  static const char *const *const INAMES[TS_SHARD_OP_COUNT] = {
      IN_MATMUL, IN_DENSE, IN_X, IN_MATMUL, IN_X, IN_X, IN_LN, IN_EMB, IN_DENSE, IN_BN,
      IN_ATTN, IN_CE, IN_X};
  rule R;
  memset(&R, 0, sizeof R);
  R.op = op;
  R.name = name;
  R.inames = INAMES[op];
  R.s = s;
  R.in = in_shapes;
  R.nin = nin;
  for (int t = 0; t < MAXT; t++)
    for (int d = 0; d < TS_MAX_DIMS; d++) R.map[t][d] = -1;
  int rc;
  switch (op) {
    case TS_SHARD_MATMUL: rc = rule_matmul(&R); break;
    case TS_SHARD_DENSE: rc = rule_dense(&R); break;
    case TS_SHARD_ELEMENTWISE: rc = rule_elementwise(&R); break;
    case TS_SHARD_BINARY: rc = rule_binary(&R); break;
    case TS_SHARD_REDUCE: rc = rule_reduce(&R, attrs); break;
    case TS_SHARD_SOFTMAX: rc = rule_softmax(&R, attrs); break;
    case TS_SHARD_LAYERNORM: rc = rule_layernorm(&R, attrs); break;
    case TS_SHARD_EMBEDDING: rc = rule_embedding(&R); break;
    case TS_SHARD_CONV2D: rc = rule_conv2d(&R, attrs); break;
    case TS_SHARD_BATCHNORM: rc = rule_batchnorm(&R); break;
    case TS_SHARD_ATTENTION: rc = rule_attention(&R, attrs); break;
    case TS_SHARD_SOFTMAX_CE: rc = rule_softmax_ce(&R); break;
    default: rc = rule_pool(&R, attrs); break;
  }
  if (rc) return rc;

  /* The device matrix: [repeat] + loop cuts. Every cut divides its dimension, so the product
   * is at most the number of elements; stop as soon as it exceeds ndevices. */
  int64_t prod = 1;
  for (int a = 0; a < R.nloop; a++) {
    prod *= R.cut[a];
    if (prod > ndevices) break;
  }
  if (prod > ndevices || ndevices % prod) {
    char buf[256];
    ts_op_strategy_str(s, buf, sizeof buf);
    return ts_error_set(TS_EINVAL,
                        "%s: strategy %s cuts the computation into %s%lld pieces, which does not "
                        "divide %d devices",
                        name, buf, prod > ndevices ? "more than " : "",
                        (long long)(prod > ndevices ? ndevices : prod), ndevices);
  }
  int rep = ndevices / (int)prod, off = rep > 1;
  if (R.nloop + off > TS_LAYOUT_MAX_AXES)
    return ts_error_set(TS_ERANGE, "%s: the device matrix would need %d axes (at most %d)", name,
                        R.nloop + off, TS_LAYOUT_MAX_AXES);
  int dev[TS_LAYOUT_MAX_AXES], ndev = 0;
  if (off) dev[ndev++] = rep;
  for (int a = 0; a < R.nloop; a++) dev[ndev++] = (int)R.cut[a];
  if (ndev == 0) dev[ndev++] = 1; /* one device, an op with no loop axes (scalar) */
  unsigned partial = 0;
  for (int a = 0; a < R.nloop; a++)
    if ((R.partial & (1u << a)) && R.cut[a] > 1) partial |= 1u << (a + off);

  ts_layout lin[TS_STRATEGY_MAX_INPUTS], lout;
  for (int t = 0; t <= nin; t++) {
    const ts_shape *sh = t < nin ? &in_shapes[t] : &R.out;
    int tmap[TS_MAX_DIMS];
    for (int d = 0; d < sh->ndim; d++) tmap[d] = R.map[t][d] < 0 ? -1 : R.map[t][d] + off;
    ts_layout *l = t < nin ? &lin[t] : &lout;
    if ((rc = ts_layout_init(l, ndev, dev, sh->ndim, tmap, t < nin ? 0u : partial)) ||
        (rc = ts_layout_check_shape(l, sh)))
      return rc; /* not expected: the rule checked cuts and shapes */
  }
  memcpy(in_layouts, lin, (size_t)nin * sizeof *lin);
  *out_layout = lout;
  if (out_shape) *out_shape = R.out;
  return TS_OK;
}
