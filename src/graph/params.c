/* The parameter store: flat buffers with named views. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph_ir.h"
#include "graph_impl.h"
#include "tessera/params.h"
#include "../base/text.h"

typedef struct {
  char *name;
  ts_shape shape;
  ts_init init;
  int flags;
  size_t offset; /* in data (trainable) or states */
  int grad_val;  /* gradient value index in the attached graph, -1 none */
  const ts_graph *grad_g; /* the graph it is attached in (ts_params_attach_grads) */
  /* sharded entries (ts_params_add_sharded): `shape` is the local shape of rank `rank`'s slice */
  int sharded;
  ts_shape global; /* == shape when unsharded */
  ts_layout layout;
  int rank;
  ts_shape init_shape; /* the shape the initialiser's fans come from (== global unless set) */
} entry;

struct ts_params {
  entry *e;
  int n, cap;
  size_t numel, state_numel;
  float *data, *grads, *states;
  int allocated;
  int external; /* ts_params_alloc_external: the trainable parameters are held elsewhere (data NULL) */
  int grads_external; /* ts_params_set_grads_external: no gradient buffer (grads NULL) */
  int dry;      /* ts_params_alloc_dry: laid out, nothing allocated (every buffer NULL) */
  int *hslot;   /* the entries by name (open addressing, -1 free): ts_params_find in O(1), where a
                 * scan per lookup made building a deep model's store quadratic (#33) */
  size_t hcap;
  void (*settle)(void *user); /* ts__params_set_settle: writes in flight into the parameters */
  void *settle_user;
};

void ts__params_set_settle(ts_params *p, void (*fn)(void *user), void *user) {
  p->settle = fn;
  p->settle_user = user;
}

/* Before the parameters are handed out: the writes in flight complete (once per arming). */
static void settle(ts_params *p) {
  void (*fn)(void *) = p->settle;
  if (!fn) return;
  p->settle = NULL;
  fn(p->settle_user);
}

static size_t name_slot(const char *s, size_t cap) {
  return (size_t)ts__fnv1a_str(TS__FNV1A_BASIS, s) & (cap - 1);
}

static void hash_put(ts_params *p, int id) {
  size_t h = name_slot(p->e[id].name, p->hcap);
  while (p->hslot[h] >= 0) h = (h + 1) & (p->hcap - 1);
  p->hslot[h] = id;
}

/* Room for one more entry in the index (rebuilt twice as large at half full); 0 on failure: then
 * ts_params_find scans. */
static int hash_grow(ts_params *p) {
  if (p->hslot && 2 * ((size_t)p->n + 1) <= p->hcap) return 1;
  size_t cap = p->hcap ? 2 * p->hcap : 64;
  int *ns = malloc(sizeof(int) * cap);
  free(p->hslot);
  p->hslot = ns;
  p->hcap = ns ? cap : 0;
  if (!ns) return 0;
  for (size_t i = 0; i < cap; i++) ns[i] = -1;
  for (int i = 0; i < p->n; i++) hash_put(p, i);
  return 1;
}

int ts_params_create(ts_params **out) {
  ts_params *p = calloc(1, sizeof *p);
  if (!p) return ts_error_set(TS_ENOMEM, "ts_params_create: out of memory");
  *out = p;
  return TS_OK;
}

void ts_params_free(ts_params *p) {
  if (!p) return;
  for (int i = 0; i < p->n; i++) free(p->e[i].name);
  free(p->e);
  free(p->hslot);
  ts_free(p->data);
  ts_free(p->grads);
  ts_free(p->states);
  free(p);
}

int ts_params_find(const ts_params *p, const char *name) {
  if (p->hslot) { /* the first entry of that name: insertion order along the probe chain */
    for (size_t h = name_slot(name, p->hcap); p->hslot[h] >= 0; h = (h + 1) & (p->hcap - 1))
      if (!strcmp(p->e[p->hslot[h]].name, name)) return p->hslot[h];
    return -1;
  }
  for (int i = 0; i < p->n; i++)
    if (!strcmp(p->e[i].name, name)) return i;
  return -1;
}

/* Appends an entry of (local) `shape`; `fn` names the caller in messages. */
static int add_entry(ts_params *p, const char *fn, const char *name, ts_shape shape, ts_init init,
                     int flags) {
  if (p->n == p->cap) {
    int nc = p->cap ? 2 * p->cap : 32;
    entry *q = realloc(p->e, sizeof(entry) * (size_t)nc);
    if (!q) return ts_error_set(TS_ENOMEM, "%s: out of memory", fn);
    p->e = q;
    p->cap = nc;
  }
  entry *e = &p->e[p->n];
  memset(e, 0, sizeof *e);
  e->name = strdup(name);
  if (!e->name) return ts_error_set(TS_ENOMEM, "%s: out of memory", fn);
  e->shape = shape;
  e->global = shape;
  e->init_shape = shape;
  e->rank = -1;
  e->init = init;
  e->flags = flags;
  e->grad_val = -1;
  if (hash_grow(p)) hash_put(p, p->n);
  size_t n = (size_t)ts_shape_numel(&shape);
  if (flags & TS_PARAM_STATE) {
    e->offset = p->state_numel;
    p->state_numel += n;
  } else {
    e->offset = p->numel;
    p->numel += n;
  }
  return p->n++;
}

/* The checks shared by ts_params_add and ts_params_add_sharded (name, timing, dims > 0);
 * check_ndim (sharded only, keeping ts_params_add's behaviour as it was) also bounds ndim. */
static int check_new(ts_params *p, const char *fn, const char *name, ts_shape shape,
                     int check_ndim) {
  if (!name || !*name) return ts_error_set(TS_EINVAL, "%s: empty parameter name", fn);
  if (p->allocated)
    return ts_error_set(TS_EINVAL, "%s: '%s' added after ts_params_alloc", fn, name);
  if (ts_params_find(p, name) >= 0)
    return ts_error_set(TS_EINVAL, "%s: duplicate parameter name '%s'", fn, name);
  if (check_ndim && (shape.ndim < 0 || shape.ndim > TS_MAX_DIMS))
    return ts_error_set(TS_ESHAPE, "%s: '%s' has %d dimensions (expected 0..%d)", fn, name,
                        shape.ndim, TS_MAX_DIMS);
  for (int i = 0; i < shape.ndim; i++)
    if (shape.dims[i] <= 0) {
      char s[128];
      return ts_error_set(TS_ESHAPE, "%s: '%s' has a non-positive dimension in %s", fn, name,
                          ts_shape_str(&shape, s, sizeof s));
    }
  return TS_OK;
}

int ts_params_add(ts_params *p, const char *name, ts_shape shape, ts_init init, int flags) {
  int rc = check_new(p, "ts_params_add", name, shape, 0);
  if (rc) return rc;
  return add_entry(p, "ts_params_add", name, shape, init, flags);
}

int ts_params_add_sharded(ts_params *p, const char *name, ts_shape global_shape,
                          const ts_layout *layout, int rank, ts_init init, int flags) {
  static const char fn[] = "ts_params_add_sharded";
  int rc = check_new(p, fn, name, global_shape, 1);
  if (rc) return rc;
  char sh[128], ls[160];
  ts_shape_str(&global_shape, sh, sizeof sh);
  if (!layout) return ts_error_set(TS_EINVAL, "%s: '%s' %s: layout is NULL", fn, name, sh);
  ts_shape local;
  rc = ts_layout_local_shape(layout, &global_shape, &local); /* validates + checks the shape */
  if (rc) return ts_error_wrap(rc, "%s: '%s' %s", fn, name, sh);
  if (layout->partial)
    return ts_error_set(TS_EINVAL,
                        "%s: '%s' %s: layout %s has a partial mask; a parameter cannot hold "
                        "partial sums",
                        fn, name, sh, ts_layout_str(layout, ls, sizeof ls));
  int coords[TS_LAYOUT_MAX_AXES];
  rc = ts_layout_rank_coords(layout, rank, coords);
  if (rc) return ts_error_wrap(rc, "%s: '%s' %s", fn, name, sh);
  int id = add_entry(p, fn, name, local, init, flags);
  if (id < 0) return id;
  entry *e = &p->e[id];
  e->sharded = 1;
  e->global = global_shape;
  e->init_shape = global_shape;
  e->layout = *layout;
  e->rank = rank;
  return id;
}

/* Fills a sharded entry's slice: one ts_init_fill per contiguous run of the global row-major
 * order. The dims after the innermost cut dim j are whole, so each run is the local block of
 * dims j..ndim-1; the runs are enumerated over the local indices of dims 0..j-1. */
static int fill_sharded(const entry *e, uint64_t key, float *dst) {
  int64_t off[TS_MAX_DIMS];
  int rc = ts_layout_offsets(&e->layout, &e->global, e->rank, off);
  if (rc) return rc;
  int nd = e->global.ndim;
  int j = nd - 1;
  while (j >= 0 && e->shape.dims[j] == e->global.dims[j]) j--;
  if (j < 0) return ts_init_fill(&e->init, e->init_shape, key, dst, 0, ts_shape_numel(&e->global));
  int64_t gstride[TS_MAX_DIMS];
  int64_t st = 1;
  for (int i = nd - 1; i >= 0; i--) {
    gstride[i] = st;
    st *= e->global.dims[i];
  }
  int64_t run = 1;
  for (int i = j; i < nd; i++) run *= e->shape.dims[i];
  int64_t nruns = ts_shape_numel(&e->shape) / run;
  int64_t idx[TS_MAX_DIMS] = {0};
  for (int64_t r = 0; r < nruns; r++) {
    int64_t begin = off[j] * gstride[j];
    for (int i = 0; i < j; i++) begin += (off[i] + idx[i]) * gstride[i];
    rc = ts_init_fill(&e->init, e->init_shape, key, dst + r * run, begin, run);
    if (rc) return rc;
    for (int i = j - 1; i >= 0; i--) { /* odometer over the local outer dims */
      if (++idx[i] < e->shape.dims[i]) break;
      idx[i] = 0;
    }
  }
  return TS_OK;
}

static int alloc_store(ts_params *p, uint64_t seed, int external) {
  const char *fn = external ? "ts_params_alloc_external" : "ts_params_alloc";
  if (p->allocated && p->dry)
    return ts_error_set(TS_EINVAL, "%s: the store is laid out for sizing only (ts_params_alloc_dry)", fn);
  if (p->allocated && p->external != external)
    return ts_error_set(TS_EINVAL, "%s: the store is already allocated %s its parameters", fn,
                        p->external ? "without" : "with");
  if (!p->allocated) {
    p->data = external ? NULL : ts_calloc((p->numel ? p->numel : 1) * sizeof(float));
    p->grads = p->grads_external ? NULL : ts_calloc((p->numel ? p->numel : 1) * sizeof(float));
    p->states = ts_calloc((p->state_numel ? p->state_numel : 1) * sizeof(float));
    if ((!p->data && !external) || (!p->grads && !p->grads_external) || !p->states) {
      ts_free(p->data);
      ts_free(p->grads);
      ts_free(p->states);
      p->data = p->grads = p->states = NULL;
      return ts_error_set(TS_ENOMEM, "%s: cannot allocate %zu parameters", fn, p->numel + p->state_numel);
    }
    p->allocated = 1;
    p->external = external;
  }
  for (int i = 0; i < p->n; i++) {
    entry *e = &p->e[i];
    if (external && !(e->flags & TS_PARAM_STATE)) continue;
    int rc = ts_params_fill(p, i, seed, 0, ts_shape_numel(&e->shape), ts_params_ptr(p, i));
    if (rc) return rc;
  }
  return TS_OK;
}

int ts_params_alloc(ts_params *p, uint64_t seed) { return alloc_store(p, seed, 0); }

int ts_params_set_grads_external(ts_params *p, int external) {
  if (p->allocated)
    return ts_error_set(TS_EINVAL, "ts_params_set_grads_external: the store is already allocated");
  p->grads_external = external != 0;
  return TS_OK;
}

int ts_params_alloc_dry(ts_params *p) {
  if (p->allocated && !p->dry)
    return ts_error_set(TS_EINVAL, "ts_params_alloc_dry: the store is already allocated");
  p->allocated = 1; /* the layout is fixed: offsets and counts as ts_params_alloc leaves them */
  p->dry = 1;
  return TS_OK;
}

int ts_params_is_dry(const ts_params *p) { return p && p->dry; }

int ts_params_alloc_external(ts_params *p, uint64_t seed) { return alloc_store(p, seed, 1); }

int ts_params_fill(const ts_params *p, int id, uint64_t seed, int64_t begin, int64_t count, float *dst) {
  if (id < 0 || id >= p->n) return ts_error_set(TS_EINVAL, "ts_params_fill: no entry %d", id);
  const entry *e = &p->e[id];
  int64_t n = ts_shape_numel(&e->shape);
  if (begin < 0 || count < 0 || begin + count > n || (count && !dst))
    return ts_error_set(TS_ERANGE, "ts_params_fill: '%s': range [%lld, %lld) outside its %lld elements", e->name,
                        (long long)begin, (long long)(begin + count), (long long)n);
  uint64_t key = ts_hash_name(e->name, seed);
  int rc;
  if (e->sharded) {
    if (begin != 0 || count != n)
      return ts_error_set(TS_EINVAL, "ts_params_fill: '%s' is a slice: only the whole of it can be filled", e->name);
    rc = fill_sharded(e, key, dst);
  } else {
    rc = ts_init_fill(&e->init, e->shape, key, dst, begin, count);
  }
  return rc ? ts_error_wrap(rc, "initialising '%s'", e->name) : TS_OK;
}

int ts_params_count(const ts_params *p) { return p->n; }

ts_init ts_params_init_of(const ts_params *p, int id) {
  ts_init z = {TS_INIT_ZEROS, 0, 0, 0};
  return id >= 0 && id < p->n ? p->e[id].init : z;
}

int ts_params_set_init_shape(ts_params *p, int id, ts_shape shape) {
  if (id < 0 || id >= p->n || !p->e[id].sharded)
    return ts_error_set(TS_EINVAL, "ts_params_set_init_shape: %d is not a sharded entry", id);
  entry *e = &p->e[id];
  if (ts_shape_numel(&shape) != ts_shape_numel(&e->global)) {
    char a[128], b[128];
    return ts_error_set(TS_ESHAPE, "ts_params_set_init_shape: '%s': %s has not the %lld elements of %s",
                        e->name, ts_shape_str(&shape, a, sizeof a), (long long)ts_shape_numel(&e->global),
                        ts_shape_str(&e->global, b, sizeof b));
  }
  e->init_shape = shape;
  return TS_OK;
}

ts_shape ts_params_init_shape(const ts_params *p, int id) {
  ts_shape z = {0, {0}};
  return id >= 0 && id < p->n ? p->e[id].init_shape : z;
}
const char *ts_params_name(const ts_params *p, int id) { return id >= 0 && id < p->n ? p->e[id].name : NULL; }
ts_shape ts_params_shape(const ts_params *p, int id) {
  ts_shape z = {0, {0}};
  return id >= 0 && id < p->n ? p->e[id].shape : z;
}
int ts_params_flags(const ts_params *p, int id) { return id >= 0 && id < p->n ? p->e[id].flags : 0; }
ts_shape ts_params_global_shape(const ts_params *p, int id) {
  ts_shape z = {0, {0}};
  return id >= 0 && id < p->n ? p->e[id].global : z;
}
int ts_params_is_sharded(const ts_params *p, int id) { return id >= 0 && id < p->n && p->e[id].sharded; }
const ts_layout *ts_params_layout(const ts_params *p, int id) {
  return id >= 0 && id < p->n && p->e[id].sharded ? &p->e[id].layout : NULL;
}
int ts_params_shard_rank(const ts_params *p, int id) {
  return id >= 0 && id < p->n && p->e[id].sharded ? p->e[id].rank : -1;
}
size_t ts_params_offset(const ts_params *p, int id) { return id >= 0 && id < p->n ? p->e[id].offset : 0; }
float *ts_params_ptr(ts_params *p, int id) {
  if (id < 0 || id >= p->n || !p->allocated) return NULL;
  settle(p);
  float *base = p->e[id].flags & TS_PARAM_STATE ? p->states : p->data;
  return base ? base + p->e[id].offset : NULL; /* NULL: held elsewhere (ts_params_alloc_external) */
}
float *ts_params_grad_ptr(ts_params *p, int id) {
  if (id < 0 || id >= p->n || !p->allocated || !p->grads || (p->e[id].flags & TS_PARAM_STATE)) return NULL;
  return p->grads + p->e[id].offset;
}
float *ts_params_data(ts_params *p) {
  settle(p);
  return p->data;
}
float *ts_params_grads(ts_params *p) { return p->grads; }
float *ts_params_states(ts_params *p) { return p->states; }
size_t ts_params_numel(const ts_params *p) { return p->numel; }
size_t ts_params_state_numel(const ts_params *p) { return p->state_numel; }

/* The gradient copies ts_params_attach_grads emitted (nodes n0..) moved from the end of the graph
 * to right after the backward node producing what they copy, so a gradient is complete (and its
 * bucket can be reduced) as early as backward computes it; a copy of a value no backward node
 * produces stays last. Node order is run order; value handles do not change. */
static int place_copies(ts_graph *g, int n0) {
  int n = g->nnodes;
  int *order = malloc(sizeof(int) * (size_t)n), *after = malloc(sizeof(int) * (size_t)n);
  ts__node *tmp = malloc(sizeof(ts__node) * (size_t)n);
  if (!order || !after || !tmp) {
    free(order);
    free(after);
    free(tmp);
    return ts_graph_fail(g, TS_ENOMEM, "ts_params_attach_grads: out of memory");
  }
  for (int c = n0; c < n; c++) {
    int pr = g->vals[g->nodes[c].in[0]].producer;
    after[c] = pr >= 0 && pr < n0 && g->nodes[pr].is_backward ? pr : -1;
  }
  int m = 0;
  for (int i = 0; i < n0; i++) {
    order[m++] = i;
    for (int c = n0; c < n; c++)
      if (after[c] == i) order[m++] = c;
  }
  for (int c = n0; c < n; c++)
    if (after[c] < 0) order[m++] = c;
  for (int k = 0; k < n; k++) tmp[k] = g->nodes[order[k]];
  memcpy(g->nodes, tmp, sizeof(ts__node) * (size_t)n);
  for (int k = 0; k < n; k++)
    for (int o = 0; o < g->nodes[k].nout; o++) g->vals[g->nodes[k].out[o]].producer = k;
  free(order);
  free(after);
  free(tmp);
  return TS_OK;
}

int ts_params_attach_grads(ts_params *p, ts_graph *g, ts_val *keep, int cap, int *nkeep) {
  int nk = 0;
  /* a store may serve several graphs with disjoint parameters (a pipeline rank's pieces): only
   * this graph's attachments are redone */
  for (int i = 0; i < p->n; i++)
    if (p->e[i].grad_g == g || !p->e[i].grad_g) {
      p->e[i].grad_val = -1;
      p->e[i].grad_g = NULL;
    }
  /* room for the copies emitted below too (one value per parameter at most) */
  char *owned = calloc((size_t)g->nvals + (size_t)p->n + 1, 1);
  if (!owned) return ts_error_set(TS_ENOMEM, "ts_params_attach_grads: out of memory");
  int rc = TS_OK;
  int nvals0 = g->nvals, nodes0 = g->nnodes;
  for (int v = 0; v < nvals0 && rc == TS_OK; v++) {
    const ts__value *x = &g->vals[v];
    if (x->kind != TS_VAL_PARAM || x->param_id < 0) continue;
    if (x->param_id >= p->n) {
      rc = ts_error_set(TS_EINVAL, "ts_params_attach_grads: value '%s' refers to parameter %d of %d",
                        x->name ? x->name : "?", x->param_id, p->n);
      break;
    }
    const int id = x->param_id; /* x points into g->vals, which ts_copy below may move */
    ts_val gv = ts_graph_grad(g, ts__handle(g, v));
    if (gv == TS_NONE) continue;
    int gi = gv & ((1 << TS__VAL_BITS) - 1);
    const ts__value *gx = &g->vals[gi];
    int needs_copy = gx->producer < 0 || gx->alias_of >= 0 || owned[gi];
    if (needs_copy) {
      ts_val c = ts_copy(g, gv);
      if (c == TS_NONE) {
        rc = g->status ? g->status : TS_EGRAPH;
        break;
      }
      gi = c & ((1 << TS__VAL_BITS) - 1);
      ts__node *cn = &g->nodes[g->nnodes - 1];
      cn->is_backward = 1;
      /* named as backward nodes are (graph/grad.c): the parameter's name + ":bwd" */
      const char *pn = g->vals[v].name;
      size_t pl = pn ? strlen(pn) : 0;
      char *nm = pn ? malloc(pl + sizeof ":bwd") : NULL;
      if (nm) {
        memcpy(nm, pn, pl);
        memcpy(nm + pl, ":bwd", sizeof ":bwd");
        free(cn->name);
        cn->name = nm;
      }
    }
    owned[gi] = 1;
    p->e[id].grad_val = gi;
    p->e[id].grad_g = g;
    if (keep && nk < cap) keep[nk] = ts__handle(g, gi);
    nk++;
  }
  free(owned);
  if (rc == TS_OK && g->nnodes > nodes0) rc = place_copies(g, nodes0);
  if (nkeep) *nkeep = nk;
  if (rc == TS_OK && keep && nk > cap)
    rc = ts_error_set(TS_ERANGE, "ts_params_attach_grads: %d gradients, room for %d", nk, cap);
  return rc;
}

ts_val ts_params_grad_value(const ts_params *p, int id) {
  if (id < 0 || id >= p->n || p->e[id].grad_val < 0 || !p->e[id].grad_g) return TS_NONE;
  return ts__handle(p->e[id].grad_g, p->e[id].grad_val);
}

int ts_params_each_binding(ts_params *p, const ts_graph *g, ts_params_binding_fn fn, void *user) {
  if (!p->allocated) return ts_error_set(TS_EINVAL, "ts_params_bind: call ts_params_alloc first");
  for (int v = 0; v < g->nvals; v++) {
    const ts__value *x = &g->vals[v];
    if ((x->kind != TS_VAL_PARAM && x->kind != TS_VAL_STATE) || x->param_id < 0) continue;
    int id = x->param_id;
    if (id >= p->n)
      return ts_error_set(TS_EINVAL, "ts_params_bind: value '%s' refers to parameter %d of %d",
                          x->name ? x->name : "?", id, p->n);
    if ((int64_t)ts_shape_numel(&x->shape) != ts_shape_numel(&p->e[id].shape)) {
      char a[128], b[128];
      return ts_error_set(TS_ESHAPE, "ts_params_bind: value '%s' %s does not match parameter '%s' %s",
                          x->name ? x->name : "?", ts_shape_str(&x->shape, a, sizeof a),
                          p->e[id].name, ts_shape_str(&p->e[id].shape, b, sizeof b));
    }
    int rc = fn(ts__handle(g, v), ts_params_ptr(p, id), user);
    if (rc) return rc;
  }
  for (int i = 0; i < p->n; i++) { /* an inference graph has none attached */
    if (p->e[i].grad_val < 0 || p->e[i].grad_g != g) continue;
    int rc = fn(ts__handle(g, p->e[i].grad_val), ts_params_grad_ptr(p, i), user);
    if (rc) return rc;
  }
  return TS_OK;
}

int ts_params_rank_partition(const ts_params *p, int id, int nranks, int *part) {
  if (id < 0 || id >= ts_params_count(p) || nranks < 1)
    return ts_error_set(TS_EINVAL, "ts_params_rank_partition: parameter %d, %d ranks", id, nranks);
  const ts_layout *L = ts_params_layout(p, id);
  if (L && ts_layout_ndevices(L) != nranks)
    return ts_error_set(TS_EINVAL, "parameter '%s' is laid out on %d devices, the job has %d ranks",
                        ts_params_name(p, id), ts_layout_ndevices(L), nranks);
  /* the key (the slice's coordinates on the axes the layout cuts, mixed radix) is below the
   * product of those axes, so below nranks: pieces numbered by first appearance in one pass */
  int *first = malloc(sizeof(int) * (size_t)nranks);
  if (!first) return ts_error_set(TS_ENOMEM, "ts_params_rank_partition: out of memory");
  for (int r = 0; r < nranks; r++) first[r] = -1;
  int nparts = 0;
  for (int r = 0; r < nranks; r++) {
    int64_t key = 0;
    if (L) {
      int coords[TS_LAYOUT_MAX_AXES];
      ts_layout_rank_coords(L, r, coords);
      for (int d = 0; d < L->ndim; d++)
        if (L->tmap[d] >= 0) key = key * L->dev[L->tmap[d]] + coords[L->tmap[d]];
    }
    if (key < 0 || key >= nranks) { /* a layout the store validated cannot get here */
      free(first);
      return ts_error_set(TS_EINVAL, "parameter '%s': slice key %lld outside %d ranks", ts_params_name(p, id),
                          (long long)key, nranks);
    }
    if (first[key] < 0) first[key] = nparts++;
    part[r] = first[key];
  }
  free(first);
  return nparts;
}

int ts_params_holders(const ts_params *p, int id, int nranks, int rank) {
  if (rank < 0 || rank >= nranks) return ts_error_set(TS_EINVAL, "ts_params_holders: rank %d of %d", rank, nranks);
  int *part = malloc(sizeof(int) * (size_t)nranks);
  if (!part) return ts_error_set(TS_ENOMEM, "ts_params_holders: out of memory");
  int rc = ts_params_rank_partition(p, id, nranks, part), h = 0;
  for (int k = 0; rc >= 0 && k < nranks; k++) h += part[k] == part[rank];
  free(part);
  return rc < 0 ? rc : h;
}
