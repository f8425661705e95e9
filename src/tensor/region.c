/* Regions of a tensor and their intersections (see include/tessera/region.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/region.h"
#include "../base/text.h"

static int64_t box_numel(const ts_region *r) {
  int64_t n = 1;
  for (int d = 0; d < r->ndim; d++) n *= r->ext[d];
  return n;
}

int64_t ts_region_numel(const ts_region *r) { return r->hi - r->lo; }

int64_t ts_region_space_numel(const ts_region *r) {
  int64_t n = 1;
  for (int d = 0; d < r->ndim; d++) n *= r->dims[d];
  return n;
}

int ts_region_check(const ts_region *r) {
  if (!r) return ts_error_set(TS_EINVAL, "region: NULL");
  if (r->ndim < 0 || r->ndim > TS_MAX_DIMS)
    return ts_error_set(TS_EINVAL, "region: %d dims (at most %d)", r->ndim, TS_MAX_DIMS);
  int64_t n = 1;
  for (int d = 0; d < r->ndim; d++) {
    if (r->dims[d] < 0 || r->off[d] < 0 || r->ext[d] < 0)
      return ts_error_set(TS_EINVAL, "region: dim %d: negative size, offset or extent (%lld, %lld, %lld)", d,
                          (long long)r->dims[d], (long long)r->off[d], (long long)r->ext[d]);
    if (r->off[d] > r->dims[d] || r->ext[d] > r->dims[d] - r->off[d])
      return ts_error_set(TS_EINVAL, "region: dim %d: the box [%lld, %lld) leaves the tensor's %lld", d,
                          (long long)r->off[d], (long long)(r->off[d] + r->ext[d]), (long long)r->dims[d]);
    if (__builtin_mul_overflow(n, r->dims[d], &n) || n > ((int64_t)1 << 53))
      return ts_error_set(TS_EINVAL, "region: the tensor's element count overflows");
  }
  int64_t bn = box_numel(r);
  if (r->lo < 0 || r->lo > r->hi || r->hi > bn)
    return ts_error_set(TS_EINVAL, "region: elements [%lld, %lld) are not within the box's %lld", (long long)r->lo,
                        (long long)r->hi, (long long)bn);
  return TS_OK;
}

int ts_region_box(ts_region *r, const ts_shape *dims, const int64_t *off, const int64_t *ext) {
  memset(r, 0, sizeof *r);
  if (!dims || dims->ndim < 0 || dims->ndim > TS_MAX_DIMS)
    return ts_error_set(TS_EINVAL, "region: bad shape");
  r->ndim = dims->ndim;
  for (int d = 0; d < r->ndim; d++) {
    r->dims[d] = dims->dims[d];
    r->off[d] = off ? off[d] : 0;
    r->ext[d] = ext ? ext[d] : dims->dims[d];
  }
  r->lo = 0;
  r->hi = 1;
  for (int d = 0; d < r->ndim; d++) r->hi *= r->ext[d] < 0 ? 0 : r->ext[d];
  return ts_region_check(r);
}

int ts_region_whole(ts_region *r, const ts_shape *dims) { return ts_region_box(r, dims, NULL, NULL); }

int ts_region_range(ts_region *r, const ts_shape *dims, int64_t begin, int64_t end) {
  int rc = ts_region_box(r, dims, NULL, NULL);
  if (rc) return rc;
  if (begin < 0 || begin > end || end > r->hi)
    return ts_error_set(TS_EINVAL, "region: the range [%lld, %lld) is not within the tensor's %lld elements",
                        (long long)begin, (long long)end, (long long)r->hi);
  r->lo = begin;
  r->hi = end;
  return TS_OK;
}

int ts_region_restrict(ts_region *r, int64_t lo, int64_t hi) {
  int64_t n = ts_region_numel(r);
  if (lo < 0 || lo > hi || hi > n)
    return ts_error_set(TS_EINVAL, "region: elements [%lld, %lld) are not within the piece's %lld", (long long)lo,
                        (long long)hi, (long long)n);
  r->hi = r->lo + hi;
  r->lo += lo;
  return TS_OK;
}

ts_shape ts_region_local_shape(const ts_region *r) {
  ts_shape s;
  memset(&s, 0, sizeof s);
  if (r->lo == 0 && r->hi == box_numel(r)) {
    s.ndim = r->ndim;
    for (int d = 0; d < r->ndim; d++) s.dims[d] = r->ext[d];
  } else {
    s.ndim = 1;
    s.dims[0] = r->hi - r->lo;
  }
  return s;
}

int ts_region_is_whole(const ts_region *r) {
  for (int d = 0; d < r->ndim; d++)
    if (r->off[d] || r->ext[d] != r->dims[d]) return 0;
  return r->lo == 0 && r->hi == ts_region_space_numel(r);
}

int ts_region_equal(const ts_region *a, const ts_region *b) {
  if (a->ndim != b->ndim || a->lo != b->lo || a->hi != b->hi) return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->dims[d] != b->dims[d] || a->off[d] != b->off[d] || a->ext[d] != b->ext[d]) return 0;
  return 1;
}

char *ts_region_str(const ts_region *r, char *buf, size_t cap) {
  if (!buf || !cap) return buf;
  buf[0] = 0;
  size_t n = 0;
  ts__app(buf, cap, &n, "(");
  for (int d = 0; d < r->ndim; d++) ts__app(buf, cap, &n, d ? ",%lld" : "%lld", (long long)r->dims[d]);
  ts__app(buf, cap, &n, ")");
  int whole_box = 1;
  for (int d = 0; d < r->ndim; d++) whole_box &= r->off[d] == 0 && r->ext[d] == r->dims[d];
  if (whole_box && r->lo == 0 && r->hi == box_numel(r)) {
    ts__app(buf, cap, &n, " whole");
    return buf;
  }
  if (!whole_box) {
    ts__app(buf, cap, &n, "[");
    for (int d = 0; d < r->ndim; d++)
      ts__app(buf, cap, &n, "%s%lld:%lld", d ? "," : "", (long long)r->off[d], (long long)(r->off[d] + r->ext[d]));
    ts__app(buf, cap, &n, "]");
  }
  if (r->lo != 0 || r->hi != box_numel(r))
    ts__app(buf, cap, &n, " elements [%lld, %lld)", (long long)r->lo, (long long)r->hi);
  return buf;
}

/* ---- runs ---- */

void ts_region_runs_init(ts_region_runs *it, const ts_region *r) {
  memset(it, 0, sizeof *it);
  it->r = *r;
  int nd = r->ndim;
  int64_t s = 1;
  for (int d = nd - 1; d >= 0; d--) {
    it->stride[d] = s;
    s *= r->dims[d];
  }
  int k = nd - 1;
  while (k >= 0 && r->off[k] == 0 && r->ext[k] == r->dims[k]) k--;
  it->k = k;
  if (k < 0) { /* the box is the whole tensor: one run */
    it->run = s;
    it->nruns = s > 0 ? 1 : 0;
  } else {
    it->run = r->ext[k] * it->stride[k];
    int64_t w = 1;
    for (int d = k - 1; d >= 0; d--) {
      it->w[d] = w;
      w *= r->ext[d];
    }
    it->nruns = it->run > 0 ? w : 0;
  }
  if (it->run > 0) it->next = r->lo / it->run; /* runs before the range are skipped */
  if (r->lo >= r->hi) it->nruns = 0;
}

/* Position of run i's first element. */
static int64_t run_pos(const ts_region_runs *it, int64_t i) {
  if (it->k < 0) return 0;
  int64_t p = it->r.off[it->k] * it->stride[it->k];
  for (int d = 0; d < it->k; d++) {
    int64_t o = i / it->w[d];
    i -= o * it->w[d];
    p += (it->r.off[d] + o) * it->stride[d];
  }
  return p;
}

int ts_region_runs_next(ts_region_runs *it, int64_t *pos, int64_t *local, int64_t *len) {
  for (;;) {
    if (it->next >= it->nruns) return 0;
    int64_t i = it->next++;
    int64_t b = i * it->run, e = b + it->run; /* the run's elements of the box's order */
    int64_t lo = b > it->r.lo ? b : it->r.lo, hi = e < it->r.hi ? e : it->r.hi;
    if (lo >= it->r.hi) {
      it->next = it->nruns;
      return 0;
    }
    if (lo >= hi) continue;
    *pos = run_pos(it, i) + (lo - b);
    *local = lo - it->r.lo;
    *len = hi - lo;
    return 1;
  }
}

/* The index of the first run whose last element is at or after position pos (nruns if none). */
static int64_t first_run_ending_after(const ts_region_runs *it, int64_t pos) {
  const ts_region *r = &it->r;
  int k = it->k;
  if (pos < 0) return 0;
  int64_t total = 1;
  for (int d = 0; d < r->ndim; d++) total *= r->dims[d];
  if (pos >= total) return it->nruns;
  if (k < 0) return 0;
  int64_t c[TS_MAX_DIMS], idx = 0;
  for (int d = 0; d <= k; d++) c[d] = pos / it->stride[d] % r->dims[d];
  for (int d = 0; d < k; d++) {
    if (c[d] < r->off[d]) return idx; /* the box starts after pos along d: its next run is after pos */
    if (c[d] >= r->off[d] + r->ext[d]) /* past the box along d: the next index of the dims before d */
      return d == 0 ? it->nruns : idx + it->w[d - 1];
    idx += (c[d] - r->off[d]) * it->w[d];
  }
  return c[k] < r->off[k] + r->ext[k] ? idx : idx + 1;
}

void ts_region_runs_seek(ts_region_runs *it, int64_t pos) {
  int64_t i = first_run_ending_after(it, pos);
  /* the range may cut run i short of pos (only the last run of the range is cut at its end) */
  if (i < it->nruns && it->run > 0) {
    int64_t b = i * it->run, e = b + it->run < it->r.hi ? b + it->run : it->r.hi;
    if (e <= b || run_pos(it, i) + (e - b) <= pos) i++;
  }
  if (i > it->next) it->next = i < it->nruns ? i : it->nruns;
}

int64_t ts_region_intersect(const ts_region *a, const ts_region *b, ts_region_fn fn, void *user) {
  if (ts_region_space_numel(a) != ts_region_space_numel(b))
    return ts_error_set(TS_ESHAPE, "region: intersecting regions of tensors of %lld and %lld elements",
                        (long long)ts_region_space_numel(a), (long long)ts_region_space_numel(b));
  ts_region_runs ia, ib;
  ts_region_runs_init(&ia, a);
  ts_region_runs_init(&ib, b);
  int64_t pa, la, na, pb, lb, nb, total = 0;
  int ha = ts_region_runs_next(&ia, &pa, &la, &na), hb = ts_region_runs_next(&ib, &pb, &lb, &nb);
  while (ha && hb) {
    if (pa + na <= pb) {
      ts_region_runs_seek(&ia, pb);
      ha = ts_region_runs_next(&ia, &pa, &la, &na);
      continue;
    }
    if (pb + nb <= pa) {
      ts_region_runs_seek(&ib, pa);
      hb = ts_region_runs_next(&ib, &pb, &lb, &nb);
      continue;
    }
    int64_t s = pa > pb ? pa : pb, e = pa + na < pb + nb ? pa + na : pb + nb;
    if (fn) {
      int rc = fn(la + (s - pa), lb + (s - pb), e - s, user);
      if (rc) return rc < 0 ? rc : TS_EINVAL;
    }
    total += e - s;
    int adv_a = pa + na == e, adv_b = pb + nb == e;
    if (adv_a) ha = ts_region_runs_next(&ia, &pa, &la, &na);
    if (adv_b) hb = ts_region_runs_next(&ib, &pb, &lb, &nb);
  }
  return total;
}

/* ---- pieces ---- */

static int list_add(ts_piece_list *l, const char *name, ts_dtype dt, const ts_shape *shape, const ts_region *r,
                    void *data, int copy) {
  if (!l || !name || !shape || !r) return ts_error_set(TS_EINVAL, "ts_piece_list_add: NULL argument");
  if (!ts_dtype_size(dt)) return ts_error_set(TS_EINVAL, "piece '%s': invalid dtype %d", name, (int)dt);
  int rc = ts_region_check(r);
  if (rc) return ts_error_wrap(rc, "piece '%s'", name);
  if (ts_region_space_numel(r) != ts_shape_numel(shape)) {
    char a[96], b[160];
    return ts_error_set(TS_EINVAL, "piece '%s': region %s is not of a tensor of shape %s", name,
                        ts_region_str(r, b, sizeof b), ts_shape_str(shape, a, sizeof a));
  }
  if (l->n == l->cap) {
    int nc = l->cap ? 2 * l->cap : 32;
    ts_piece *v = realloc(l->v, sizeof *v * (size_t)nc);
    if (!v) return ts_error_set(TS_ENOMEM, "piece list: out of memory");
    l->v = v;
    l->cap = nc;
  }
  ts_piece *p = &l->v[l->n];
  memset(p, 0, sizeof *p);
  p->dtype = dt;
  p->shape = *shape;
  p->region = *r;
  p->data = data;
  if (!(p->name = strdup(name))) return ts_error_set(TS_ENOMEM, "piece list: out of memory");
  if (copy) {
    size_t nb = ts_piece_nbytes(p);
    void *c = ts_alloc(nb ? nb : 1);
    if (!c) {
      free(p->name);
      return ts_error_set(TS_ENOMEM, "piece '%s': out of memory", name);
    }
    if (data && nb) memcpy(c, data, nb);
    else memset(c, 0, nb ? nb : 1);
    p->data = c;
    p->owned = 1;
  }
  l->n++;
  return TS_OK;
}

int ts_piece_list_add(ts_piece_list *l, const char *name, ts_dtype dt, const ts_shape *shape, const ts_region *r,
                      void *data) {
  return list_add(l, name, dt, shape, r, data, 0);
}

int ts_piece_list_add_copy(ts_piece_list *l, const char *name, ts_dtype dt, const ts_shape *shape,
                           const ts_region *r, const void *data) {
  return list_add(l, name, dt, shape, r, (void *)data, 1);
}

int ts_piece_list_find(const ts_piece_list *l, const char *name) {
  for (int i = 0; l && i < l->n; i++)
    if (!strcmp(l->v[i].name, name)) return i;
  return -1;
}

void ts_piece_list_free(ts_piece_list *l) {
  if (!l) return;
  for (int i = 0; i < l->n; i++) {
    free(l->v[i].name);
    if (l->v[i].owned) ts_free(l->v[i].data);
  }
  free(l->v);
  memset(l, 0, sizeof *l);
}

size_t ts_piece_nbytes(const ts_piece *p) { return (size_t)ts_region_numel(&p->region) * ts_dtype_size(p->dtype); }

uint64_t ts_piece_hash(const ts_piece *p) {
  uint64_t h = ts__fnv1a(TS__FNV1A_BASIS, p->name, strlen(p->name) + 1);
  int64_t v[8 + 4 * TS_MAX_DIMS];
  int n = 0;
  v[n++] = p->dtype;
  v[n++] = p->shape.ndim;
  for (int d = 0; d < p->shape.ndim; d++) v[n++] = p->shape.dims[d];
  const ts_region *r = &p->region;
  v[n++] = r->ndim;
  for (int d = 0; d < r->ndim; d++) {
    v[n++] = r->dims[d];
    v[n++] = r->off[d];
    v[n++] = r->ext[d];
  }
  v[n++] = r->lo;
  v[n++] = r->hi;
  return ts__fnv1a(h, v, sizeof(int64_t) * (size_t)n);
}
