/* Layout algebra: device matrix + tensor map + partial mask (see include/tessera/layout.h). */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tessera/layout.h"
#include "../base/text.h"

char *ts_layout_str(const ts_layout *l, char *buf, size_t cap) {
  if (!buf || !cap) return buf;
  buf[0] = 0;
  if (!l) {
    snprintf(buf, cap, "(null layout)");
    return buf;
  }
  size_t n = 0;
  int nd = l->ndev < 0 ? 0 : l->ndev > TS_LAYOUT_MAX_AXES ? TS_LAYOUT_MAX_AXES : l->ndev;
  int ndim = l->ndim < 0 ? 0 : l->ndim > TS_MAX_DIMS ? TS_MAX_DIMS : l->ndim;
  ts__app(buf, cap, &n, "dev(");
  for (int a = 0; a < nd; a++) ts__app(buf, cap, &n, a ? ",%d" : "%d", l->dev[a]);
  ts__app(buf, cap, &n, ") map(");
  for (int i = 0; i < ndim; i++) ts__app(buf, cap, &n, i ? ",%d" : "%d", l->tmap[i]);
  ts__app(buf, cap, &n, ")");
  if (l->partial) {
    ts__app(buf, cap, &n, " partial{");
    int first = 1;
    for (int a = 0; a < 32; a++)
      if (l->partial & (1u << a)) {
        ts__app(buf, cap, &n, first ? "%d" : ",%d", a);
        first = 0;
      }
    ts__app(buf, cap, &n, "}");
  }
  buf[cap - 1] = 0;
  return buf;
}

int ts_layout_ndevices(const ts_layout *l) {
  if (!l || l->ndev < 1 || l->ndev > TS_LAYOUT_MAX_AXES) return 0;
  int64_t n = 1;
  for (int a = 0; a < l->ndev; a++) {
    if (l->dev[a] < 1) return 0;
    n *= l->dev[a];
    if (n > INT_MAX) return 0;
  }
  return (int)n;
}

int ts_layout_validate(const ts_layout *l) {
  if (!l) return ts_error_set(TS_EINVAL, "layout: NULL");
  if (l->ndev < 1 || l->ndev > TS_LAYOUT_MAX_AXES)
    return ts_error_set(TS_EINVAL, "layout: device matrix has %d axes (expected 1..%d)", l->ndev,
                        TS_LAYOUT_MAX_AXES);
  if (l->ndim < 0 || l->ndim > TS_MAX_DIMS)
    return ts_error_set(TS_EINVAL, "layout: tensor has %d dims (expected 0..%d)", l->ndim,
                        TS_MAX_DIMS);
  char s[160]; /* the layout as text, formatted only for a message */
  int64_t total = 1;
  for (int a = 0; a < l->ndev; a++) {
    if (l->dev[a] < 1)
      return ts_error_set(TS_EINVAL, "layout %s: device matrix axis %d has size %d (must be >= 1)",
                          ts_layout_str(l, s, sizeof s), a, l->dev[a]);
    total *= l->dev[a];
    if (total > INT_MAX)
      return ts_error_set(TS_EINVAL, "layout %s: device matrix has more than %d devices",
                          ts_layout_str(l, s, sizeof s),
                          INT_MAX);
  }
  int owner[TS_LAYOUT_MAX_AXES];
  for (int a = 0; a < TS_LAYOUT_MAX_AXES; a++) owner[a] = -1;
  for (int i = 0; i < l->ndim; i++) {
    int a = l->tmap[i];
    if (a < -1 || a >= l->ndev)
      return ts_error_set(TS_EINVAL,
                          "layout %s: tensor map entry %d (dim %d) is %d, outside -1..%d (the "
                          "device matrix has %d axes)",
                          ts_layout_str(l, s, sizeof s), i, i, a, l->ndev - 1, l->ndev);
    if (a < 0) continue;
    if (owner[a] >= 0)
      return ts_error_set(TS_EINVAL, "layout %s: device axis %d cuts both dim %d and dim %d",
                          ts_layout_str(l, s, sizeof s),
                          a, owner[a], i);
    owner[a] = i;
  }
  if (l->partial >> l->ndev)
    return ts_error_set(TS_EINVAL,
                        "layout %s: partial mask 0x%x names an axis beyond the device matrix's %d",
                        ts_layout_str(l, s, sizeof s), l->partial, l->ndev);
  for (int a = 0; a < l->ndev; a++)
    if ((l->partial & (1u << a)) && owner[a] >= 0)
      return ts_error_set(TS_EINVAL, "layout %s: device axis %d both cuts dim %d and is partial",
                          ts_layout_str(l, s, sizeof s), a, owner[a]);
  return TS_OK;
}

int ts_layout_init(ts_layout *l, int ndev, const int *dev, int ndim, const int *tmap,
                   unsigned partial) {
  if (!l) return ts_error_set(TS_EINVAL, "layout_init: layout is NULL");
  memset(l, 0, sizeof *l);
  for (int i = 0; i < TS_MAX_DIMS; i++) l->tmap[i] = -1;
  l->ndev = ndev;
  l->ndim = ndim;
  l->partial = partial;
  if (ndev < 1 || ndev > TS_LAYOUT_MAX_AXES || !dev)
    return ts_error_set(TS_EINVAL, "layout_init: device matrix of %d axes%s (expected 1..%d)",
                        ndev, dev ? "" : " given as NULL", TS_LAYOUT_MAX_AXES);
  if (ndim < 0 || ndim > TS_MAX_DIMS || (ndim > 0 && !tmap))
    return ts_error_set(TS_EINVAL, "layout_init: tensor map of %d dims%s (expected 0..%d)", ndim,
                        tmap ? "" : " given as NULL", TS_MAX_DIMS);
  for (int a = 0; a < ndev; a++) l->dev[a] = dev[a];
  for (int i = 0; i < ndim; i++) l->tmap[i] = tmap[i];
  return ts_layout_validate(l);
}

int ts_layout_replicated(ts_layout *l, int ndev, const int *dev, int ndim) {
  int none[TS_MAX_DIMS];
  for (int i = 0; i < TS_MAX_DIMS; i++) none[i] = -1;
  return ts_layout_init(l, ndev, dev, ndim, none, 0);
}

int ts_layout_equal(const ts_layout *a, const ts_layout *b) {
  if (!a || !b) return a == b;
  if (a->ndev != b->ndev || a->ndim != b->ndim || a->partial != b->partial) return 0;
  if (a->ndev < 0 || a->ndev > TS_LAYOUT_MAX_AXES || a->ndim < 0 || a->ndim > TS_MAX_DIMS) return 0;
  for (int k = 0; k < a->ndev; k++)
    if (a->dev[k] != b->dev[k]) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->tmap[i] != b->tmap[i]) return 0;
  return 1;
}

int ts_layout_dim_cut(const ts_layout *l, int dim) {
  if (!l || dim < 0 || dim >= l->ndim || dim >= TS_MAX_DIMS) return 0;
  int a = l->tmap[dim];
  if (a < 0) return 1;
  if (a >= l->ndev || a >= TS_LAYOUT_MAX_AXES) return 0;
  return l->dev[a];
}

int ts_layout_check_shape(const ts_layout *l, const ts_shape *shape) {
  int rc = ts_layout_validate(l);
  if (rc) return rc;
  char s[160], sh[128]; /* the messages' strings, formatted only on the way out (the planner's search
                          * checks shapes by the million) */
  if (!shape) return ts_error_set(TS_EINVAL, "layout %s: shape is NULL", ts_layout_str(l, s, sizeof s));
  if (shape->ndim != l->ndim)
    return ts_error_set(TS_ESHAPE, "layout %s has %d dims but the tensor %s has %d", ts_layout_str(l, s, sizeof s),
                        l->ndim, ts_shape_str(shape, sh, sizeof sh), shape->ndim);
  for (int i = 0; i < l->ndim; i++) {
    int64_t n = shape->dims[i];
    if (n < 0)
      return ts_error_set(TS_ESHAPE, "layout %s: tensor %s has a negative dim %d", ts_layout_str(l, s, sizeof s),
                          ts_shape_str(shape, sh, sizeof sh), i);
    int a = l->tmap[i];
    if (a >= 0 && n % l->dev[a] != 0)
      return ts_error_set(TS_ESHAPE,
                          "layout %s: dim %d of tensor %s (size %lld) is not divisible by its cut "
                          "%d (device axis %d)",
                          ts_layout_str(l, s, sizeof s), i, ts_shape_str(shape, sh, sizeof sh), (long long)n,
                          l->dev[a], a);
  }
  return TS_OK;
}

int ts_layout_rank_coords(const ts_layout *l, int rank, int *coords) {
  int rc = ts_layout_validate(l);
  if (rc) return rc;
  int n = ts_layout_ndevices(l);
  if (rank < 0 || rank >= n) {
    char s[160];
    return ts_error_set(TS_EINVAL, "layout %s: rank %d outside 0..%d", ts_layout_str(l, s, sizeof s),
                        rank, n - 1);
  }
  for (int a = l->ndev - 1; a >= 0; a--) {
    coords[a] = rank % l->dev[a];
    rank /= l->dev[a];
  }
  return TS_OK;
}

int ts_layout_axis_group(const ts_layout *l, int rank, int axis, int *ranks) {
  int coords[TS_LAYOUT_MAX_AXES];
  int rc = ts_layout_rank_coords(l, rank, coords);
  if (rc) return rc;
  if (axis < 0 || axis >= l->ndev) {
    char s[160];
    return ts_error_set(TS_EINVAL, "layout %s: device axis %d outside 0..%d",
                        ts_layout_str(l, s, sizeof s), axis, l->ndev - 1);
  }
  int stride = 1;
  for (int a = l->ndev - 1; a > axis; a--) stride *= l->dev[a];
  int base = rank - coords[axis] * stride;
  for (int c = 0; c < l->dev[axis]; c++) ranks[c] = base + c * stride;
  return TS_OK;
}

int ts_layout_local_shape(const ts_layout *l, const ts_shape *global, ts_shape *local) {
  int rc = ts_layout_check_shape(l, global);
  if (rc) return rc;
  ts_shape s = *global;
  for (int i = 0; i < l->ndim; i++)
    if (l->tmap[i] >= 0) s.dims[i] /= l->dev[l->tmap[i]];
  *local = s;
  return TS_OK;
}

int ts_layout_offsets(const ts_layout *l, const ts_shape *global, int rank, int64_t *offsets) {
  int rc = ts_layout_check_shape(l, global);
  if (rc) return rc;
  int coords[TS_LAYOUT_MAX_AXES];
  rc = ts_layout_rank_coords(l, rank, coords);
  if (rc) return rc;
  for (int i = 0; i < l->ndim; i++) {
    int a = l->tmap[i];
    offsets[i] = a < 0 ? 0 : coords[a] * (global->dims[i] / l->dev[a]);
  }
  return TS_OK;
}

/* ---- MindSpore conventions ---- */

static int convert_ms(const char *fn, int ndev, int ndim, const int *in, int *out) {
  if (ndev < 1 || ndev > TS_LAYOUT_MAX_AXES)
    return ts_error_set(TS_EINVAL, "%s: device matrix of %d axes (expected 1..%d)", fn, ndev,
                        TS_LAYOUT_MAX_AXES);
  if (ndim < 0 || ndim > TS_MAX_DIMS || (ndim > 0 && (!in || !out)))
    return ts_error_set(TS_EINVAL, "%s: tensor map of %d dims (expected 0..%d, non-NULL)", fn,
                        ndim, TS_MAX_DIMS);
  for (int i = 0; i < ndim; i++)
    if (in[i] < -1 || in[i] >= ndev)
      return ts_error_set(TS_EINVAL, "%s: tensor map entry %d (dim %d) is %d, outside -1..%d", fn,
                          i, i, in[i], ndev - 1);
  for (int i = 0; i < ndim; i++) out[i] = in[i] < 0 ? -1 : ndev - 1 - in[i];
  return TS_OK;
}

int ts_layout_tmap_from_mindspore(int ndev, int ndim, const int *ms, int *tmap) {
  return convert_ms("layout_tmap_from_mindspore", ndev, ndim, ms, tmap);
}

int ts_layout_tmap_to_mindspore(int ndev, int ndim, const int *tmap, int *ms) {
  return convert_ms("layout_tmap_to_mindspore", ndev, ndim, tmap, ms);
}

/* ---- common refinement of two device matrices ---- */

static void devmat_str(int n, const int *d, char *buf, size_t cap) {
  size_t k = 0;
  buf[0] = 0;
  ts__app(buf, cap, &k, "(");
  for (int a = 0; a < n; a++) ts__app(buf, cap, &k, a ? ",%d" : "%d", d[a]);
  ts__app(buf, cap, &k, ")");
  buf[cap - 1] = 0;
}

int ts_layout_common_devmat(int na, const int *a, int nb, const int *b, int *nout, int *out) {
  const int *m[2] = {a, b};
  int nm[2] = {na, nb};
  int64_t tot[2];
  char sa[96] = "", sb[96] = "";
  if (!nout || !out) return ts_error_set(TS_EINVAL, "layout_common_devmat: output is NULL");
  for (int k = 0; k < 2; k++) {
    if (nm[k] < 1 || nm[k] > TS_LAYOUT_MAX_AXES || !m[k])
      return ts_error_set(TS_EINVAL, "layout_common_devmat: device matrix %c has %d axes "
                          "(expected 1..%d)", 'a' + k, nm[k], TS_LAYOUT_MAX_AXES);
    tot[k] = 1;
    for (int x = 0; x < nm[k]; x++) {
      if (m[k][x] < 1)
        return ts_error_set(TS_EINVAL, "layout_common_devmat: device matrix %c axis %d has size %d",
                            'a' + k, x, m[k][x]);
      tot[k] *= m[k][x];
      if (tot[k] > INT_MAX)
        return ts_error_set(TS_EINVAL, "layout_common_devmat: device matrix %c is too large",
                            'a' + k);
    }
  }
  devmat_str(na, a, sa, sizeof sa);
  devmat_str(nb, b, sb, sizeof sb);
  if (tot[0] != tot[1])
    return ts_error_set(TS_EINVAL, "device matrices %s (%lld devices) and %s (%lld devices) differ "
                        "in device count", sa, (long long)tot[0], sb, (long long)tot[1]);
  /* Merge the two increasing sequences of partial products; each must divide the next. */
  int ia = 0, ib = 0, n = 0;
  int64_t pa = 1, pb = 1, prev = 1;
  for (;;) {
    while (ia < na && a[ia] == 1) ia++;
    while (ib < nb && b[ib] == 1) ib++;
    int64_t na_ = ia < na ? pa * a[ia] : INT64_MAX, nb_ = ib < nb ? pb * b[ib] : INT64_MAX;
    if (na_ == INT64_MAX && nb_ == INT64_MAX) break;
    int64_t next = na_ < nb_ ? na_ : nb_;
    if (next % prev != 0 || (na_ != INT64_MAX && na_ % next != 0) ||
        (nb_ != INT64_MAX && nb_ % next != 0)) {
      return ts_error_set(TS_EUNSUPPORTED,
                          "device matrices %s and %s have no common refinement (the partial "
                          "products %lld and %lld do not divide one another)",
                          sa, sb, (long long)(na_ < nb_ ? na_ : nb_),
                          (long long)(na_ < nb_ ? nb_ : na_));
    }
    if (n >= TS_LAYOUT_MAX_AXES)
      return ts_error_set(TS_ERANGE, "the common refinement of device matrices %s and %s has more "
                          "than %d axes", sa, sb, TS_LAYOUT_MAX_AXES);
    out[n++] = (int)(next / prev);
    prev = next;
    if (na_ == next) pa = next, ia++;
    if (nb_ == next) pb = next, ib++;
  }
  if (n == 0) out[n++] = 1;
  *nout = n;
  return TS_OK;
}
