/* Graph IR: values, nodes, builder plumbing, sticky errors, op registry. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_ir.h"
#include "graph_impl.h"

ts__opdef ts__ops[TS_OP_COUNT];

/* Family registrars (src/graph/op_<family>.c). Strong references: they also make a static link
 * pull in every family's object file. */
#define X(e, name, fam) void ts__register_##fam(ts__opdef *tab);
#include "tessera/ops.def"
#undef X

static void ops_init_once(void) {
  static const char *names[] = {
#define X(e, name, fam) name,
#include "tessera/ops.def"
#undef X
  };
  for (int i = 0; i < TS_OP_COUNT; i++) ts__ops[i].name = names[i];
  /* Each family registers once even though ops.def lists it per op. */
  void (*seen[TS_OP_COUNT])(ts__opdef *);
  int nseen = 0;
#define X(e, name, fam)                                            \
  {                                                                \
    int dup = 0;                                                   \
    for (int k = 0; k < nseen; k++) dup |= seen[k] == ts__register_##fam; \
    if (!dup) {                                                    \
      seen[nseen++] = ts__register_##fam;                          \
      ts__register_##fam(ts__ops);                                 \
    }                                                              \
  }
#include "tessera/ops.def"
#undef X
}

void ts__ops_init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, ops_init_once);
}

static uint32_t g_next_graph_id = 1;

int ts_graph_create(ts_graph **out) {
  ts__ops_init();
  ts_graph *g = calloc(1, sizeof *g);
  if (!g) return ts_error_set(TS_ENOMEM, "ts_graph_create: out of memory");
  g->id = __atomic_fetch_add(&g_next_graph_id, 1, __ATOMIC_RELAXED) & 0x3ff;
  if (g->id == 0) g->id = 1;
  g->training = 1;
  *out = g;
  return TS_OK;
}

void ts_graph_free(ts_graph *g) {
  if (!g) return;
  for (int i = 0; i < g->nvals; i++) free(g->vals[i].name);
  for (int i = 0; i < g->nnodes; i++) {
    free(g->nodes[i].name);
    free(g->nodes[i].strategy);
  }
  free(g->vals);
  free(g->nodes);
  free(g->grad);
  free(g->pleaf);
  free(g);
}

int ts_graph_status(const ts_graph *g) { return g ? g->status : TS_EINVAL; }
const char *ts_graph_error(const ts_graph *g) { return g ? g->errmsg : "null graph"; }
void ts_graph_set_training(ts_graph *g, int training) { g->training = training; }
void ts_graph_set_batchnorm_sync(ts_graph *g, int slot) {
  if (g) g->bn_sync = slot >= 0 && slot < TS_GRAPH_MAX_COMM_SLOTS ? slot + 1 : 0;
}
int ts_graph_num_nodes(const ts_graph *g) { return g->nnodes; }
int ts_graph_num_values(const ts_graph *g) { return g->nvals; }

/* Attribute slots declared in ops.def must fit in ts_attrs. */
#define TS__ATTR_FITS_i(idx) ((idx) >= 0 && (idx) < TS_ATTRS_MAX_I)
#define TS__ATTR_FITS_f(idx) ((idx) >= 0 && (idx) < TS_ATTRS_MAX_F)
#define TS__ATTR_FITS_shape(idx) ((idx) >= 0 && (idx) + TS_MAX_DIMS < TS_ATTRS_MAX_I)
#define TS__ATTR_FITS_ivec(idx) ((idx) >= 0 && (idx) < TS_ATTRS_MAX_I)
#define A(grp, nm, kind, idx) \
  _Static_assert(TS__ATTR_FITS_##kind(idx), "ops.def: attribute " #grp "." #nm " outside ts_attrs");
#include "tessera/ops.def"
#undef A

/* ---- reading the IR (graph/graph_ir.h) ---- */
ts_val ts_graph_value(const ts_graph *g, int index) {
  return g && index >= 0 && index < g->nvals ? ts__handle(g, index) : TS_NONE;
}
int ts_graph_value_index(const ts_graph *g, ts_val v) {
  if (!g || v < 0) return -1;
  int idx = v & ((1 << TS__VAL_BITS) - 1);
  if ((((uint32_t)v >> TS__VAL_BITS) & 0x3ff) != (g->id & 0x3ff) || idx >= g->nvals) return -1;
  return idx;
}
ts_op ts_graph_node_op(const ts_graph *g, int node) { return g->nodes[node].op; }
int ts_graph_node_num_inputs(const ts_graph *g, int node) { return g->nodes[node].nin; }
int ts_graph_node_input(const ts_graph *g, int node, int k) { return g->nodes[node].in[k]; }
int ts_graph_node_num_outputs(const ts_graph *g, int node) { return g->nodes[node].nout; }
int ts_graph_node_output(const ts_graph *g, int node, int k) { return g->nodes[node].out[k]; }
const ts_attrs *ts_graph_node_attrs(const ts_graph *g, int node) { return &g->nodes[node].a; }
const char *ts_graph_node_name(const ts_graph *g, int node) { return g->nodes[node].name; }
int ts_graph_node_is_backward(const ts_graph *g, int node) { return g->nodes[node].is_backward; }
const char *ts_graph_node_strategy(const ts_graph *g, int node) { return g->nodes[node].strategy; }
const char *ts_op_name(ts_op op) {
  ts__ops_init();
  return (unsigned)op < TS_OP_COUNT ? ts__ops[op].name : "?";
}
ts_val_kind ts_graph_value_kind(const ts_graph *g, int v) { return g->vals[v].kind; }
ts_dtype ts_graph_value_dtype(const ts_graph *g, int v) { return g->vals[v].dtype; }
const ts_shape *ts_graph_value_shape(const ts_graph *g, int v) { return &g->vals[v].shape; }
int ts_graph_value_producer(const ts_graph *g, int v) { return g->vals[v].producer; }
int ts_graph_value_param_id(const ts_graph *g, int v) { return g->vals[v].param_id; }
int ts_graph_param_leaf(ts_graph *g, int param_id) {
  if (!g || param_id < 0) return -1;
  for (; g->pleaf_upto < g->nvals; g->pleaf_upto++) { /* values are only appended; leaves stay leaves */
    const ts__value *v = &g->vals[g->pleaf_upto];
    if (v->producer >= 0 || v->param_id < 0) continue;
    if (v->param_id >= g->npleaf) {
      int n = g->npleaf ? g->npleaf : 64;
      while (n <= v->param_id) n *= 2;
      int *p = realloc(g->pleaf, sizeof *p * (size_t)n);
      if (!p) return -1;
      for (int k = g->npleaf; k < n; k++) p[k] = -1;
      g->pleaf = p, g->npleaf = n;
    }
    if (g->pleaf[v->param_id] < 0) g->pleaf[v->param_id] = g->pleaf_upto;
  }
  return param_id < g->npleaf ? g->pleaf[param_id] : -1;
}
int ts_graph_value_alias_of(const ts_graph *g, int v) { return g->vals[v].alias_of; }
const char *ts_graph_value_name(const ts_graph *g, int v) { return g->vals[v].name; }
int ts_graph_value_requires_grad(const ts_graph *g, int v) { return !g->vals[v].no_grad; }
int ts_graph_training(const ts_graph *g) { return g->training; }
const char *ts_graph_scope(const ts_graph *g) { return g->scope; }
void ts_graph_set_scope(ts_graph *g, const char *scope) {
  snprintf(g->scope, sizeof g->scope, "%s", scope ? scope : "");
}
int ts_graph_set_node_name(ts_graph *g, int node, const char *name) {
  if (!g || node < 0 || node >= g->nnodes || !name) return ts_error_set(TS_EINVAL, "ts_graph_set_node_name: bad node");
  char *c = strdup(name);
  if (!c) return ts_error_set(TS_ENOMEM, "ts_graph_set_node_name: out of memory");
  free(g->nodes[node].name);
  g->nodes[node].name = c;
  return TS_OK;
}

int ts_graph_add_node(ts_graph *g, ts_op op, const int *ins, int nin, int nout, const ts_attrs *a) {
  return ts__add_node(g, op, ins, nin, nout, a);
}

static int graph_vfail(ts_graph *g, int code, const char *fmt, va_list ap) {
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  if (g && g->status == TS_OK) {
    g->status = code;
    snprintf(g->errmsg, sizeof g->errmsg, "%s", msg);
  }
  ts_error_set(code, "%s", msg);
  return code;
}

int ts__graph_fail(ts_graph *g, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = graph_vfail(g, code, fmt, ap);
  va_end(ap);
  return rc;
}

int ts_graph_fail(ts_graph *g, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = graph_vfail(g, code, fmt, ap);
  va_end(ap);
  return rc;
}

int ts__vidx(ts_graph *g, ts_val v, const char *op) {
  if (v == TS_NONE) {
    if (g->status == TS_OK)
      ts__graph_fail(g, TS_EINVAL, "%s: input is TS_NONE (an earlier op failed?)", op);
    return -1;
  }
  uint32_t gid = ((uint32_t)v >> TS__VAL_BITS) & 0x3ff;
  int idx = v & ((1 << TS__VAL_BITS) - 1);
  if (v < 0 || gid != (g->id & 0x3ff)) {
    ts__graph_fail(g, TS_EGRAPH, "%s: value %d belongs to another graph", op, (int)v);
    return -1;
  }
  if (idx >= g->nvals) {
    ts__graph_fail(g, TS_EGRAPH, "%s: value %d does not exist (graph has %d values)", op, idx,
                   g->nvals);
    return -1;
  }
  return idx;
}

const char *ts__vstr(const ts_graph *g, int v, char *buf, size_t cap) {
  char s[128];
  if (v < 0 || v >= g->nvals) {
    snprintf(buf, cap, "<none>");
    return buf;
  }
  const ts__value *x = &g->vals[v];
  snprintf(buf, cap, "%s%s:%s", x->name ? x->name : "", ts_shape_str(&x->shape, s, sizeof s),
           ts_dtype_name(x->dtype));
  return buf;
}

int ts__same_float(ts_graph *g, const char *op, const int *vals, const char *const *names, int n,
                   ts_dtype *dt) {
  char b1[160], b2[160];
  for (int k = 0; k < n; k++) {
    const ts_dtype d = g->vals[vals[k]].dtype;
    if (!ts_dtype_is_float(d))
      return ts__graph_fail(g, TS_EDTYPE, "%s: %s %s: expected a float dtype (f32, bf16 or f16)", op,
                            names[k], ts__vstr(g, vals[k], b1, sizeof b1));
    if (k > 0 && d != g->vals[vals[0]].dtype)
      return ts__graph_fail(g, TS_EDTYPE,
                            "%s: %s %s and %s %s: mixed dtypes (%s, %s); the float inputs of one op "
                            "must share one dtype (insert ts_cast)",
                            op, names[0], ts__vstr(g, vals[0], b1, sizeof b1), names[k],
                            ts__vstr(g, vals[k], b2, sizeof b2), ts_dtype_name(g->vals[vals[0]].dtype),
                            ts_dtype_name(d));
  }
  if (dt) *dt = n > 0 ? g->vals[vals[0]].dtype : TS_F32;
  return TS_OK;
}

static int grow(void **p, int *cap, int need, size_t elt) {
  if (need <= *cap) return 0;
  int nc = *cap ? *cap * 2 : 64;
  while (nc < need) nc *= 2;
  void *q = realloc(*p, (size_t)nc * elt);
  if (!q) return -1;
  memset((char *)q + (size_t)*cap * elt, 0, (size_t)(nc - *cap) * elt);
  *p = q;
  *cap = nc;
  return 0;
}

static char *scoped_name(ts_graph *g, const char *name) {
  size_t n = strlen(g->scope) + (name ? strlen(name) : 0) + 2;
  char *s = malloc(n);
  if (!s) return NULL;
  if (g->scope[0])
    snprintf(s, n, "%s/%s", g->scope, name ? name : "");
  else
    snprintf(s, n, "%s", name ? name : "");
  return s;
}

int ts__new_value(ts_graph *g, ts_dtype dt, ts_shape sh, ts_val_kind kind, const char *name) {
  if (grow((void **)&g->vals, &g->cap_vals, g->nvals + 1, sizeof(ts__value))) {
    ts__graph_fail(g, TS_ENOMEM, "graph: out of memory adding value");
    return -1;
  }
  if (g->nvals >= (1 << TS__VAL_BITS) - 1) {
    ts__graph_fail(g, TS_EGRAPH, "graph: too many values");
    return -1;
  }
  int i = g->nvals++;
  ts__value *v = &g->vals[i];
  memset(v, 0, sizeof *v);
  v->dtype = dt;
  v->shape = sh;
  v->kind = kind;
  v->producer = -1;
  v->param_id = -1;
  v->alias_of = -1;
  v->no_grad = !ts_dtype_is_float(dt);
  v->name = name ? scoped_name(g, name) : NULL;
  return i;
}

static int check_shape(ts_graph *g, const char *what, const char *name, ts_dtype dt, ts_shape sh) {
  if ((unsigned)dt >= TS_DTYPE_COUNT)
    return ts__graph_fail(g, TS_EDTYPE, "%s '%s': invalid dtype %d", what, name ? name : "", (int)dt);
  if (sh.ndim < 0 || sh.ndim > TS_MAX_DIMS)
    return ts__graph_fail(g, TS_ESHAPE, "%s '%s': ndim %d out of range 0..%d", what,
                          name ? name : "", sh.ndim, TS_MAX_DIMS);
  for (int i = 0; i < sh.ndim; i++)
    if (sh.dims[i] <= 0) {
      char s[128];
      return ts__graph_fail(g, TS_ESHAPE, "%s '%s': dimension %d of %s must be positive", what,
                            name ? name : "", i, ts_shape_str(&sh, s, sizeof s));
    }
  return TS_OK;
}

static ts_val leaf(ts_graph *g, const char *what, const char *name, ts_dtype dt, ts_shape sh,
                   ts_val_kind kind, int pid) {
  if (!g || g->status) return TS_NONE;
  if (check_shape(g, what, name, dt, sh)) return TS_NONE;
  int i = ts__new_value(g, dt, sh, kind, name);
  if (i < 0) return TS_NONE;
  g->vals[i].param_id = pid;
  if (kind == TS_VAL_STATE) g->vals[i].no_grad = 1;
  return ts__handle(g, i);
}

ts_val ts_input(ts_graph *g, const char *name, ts_dtype dt, ts_shape shape) {
  return leaf(g, "input", name, dt, shape, TS_VAL_INPUT, -1);
}
ts_val ts_param_value(ts_graph *g, const char *name, ts_dtype dt, ts_shape shape, int param_id) {
  return leaf(g, "param", name, dt, shape, TS_VAL_PARAM, param_id);
}
ts_val ts_state_value(ts_graph *g, const char *name, ts_dtype dt, ts_shape shape, int param_id) {
  return leaf(g, "state", name, dt, shape, TS_VAL_STATE, param_id);
}

int ts_val_param_id(const ts_graph *g, ts_val v) {
  int i = v & ((1 << TS__VAL_BITS) - 1);
  return (v >= 0 && i < g->nvals) ? g->vals[i].param_id : -1;
}

#define VGET(g, v, field, dflt)                                  \
  int i = v & ((1 << TS__VAL_BITS) - 1);                         \
  if (!g || v < 0 || i >= g->nvals) return dflt;                 \
  return g->vals[i].field

ts_shape ts_val_shape(const ts_graph *g, ts_val v) {
  ts_shape z = {0, {0}};
  VGET(g, v, shape, z);
}
ts_dtype ts_val_dtype(const ts_graph *g, ts_val v) { VGET(g, v, dtype, TS_F32); }
int ts_graph_producer(const ts_graph *g, ts_val v) { VGET(g, v, producer, -1); }
const char *ts_val_name(const ts_graph *g, ts_val v) { VGET(g, v, name, NULL); }
ts_val_kind ts_val_kind_of(const ts_graph *g, ts_val v) { VGET(g, v, kind, TS_VAL_TEMP); }

int ts_shard(ts_graph *g, ts_val v, const char *strategy) {
  if (!g || !strategy) return ts_error_set(TS_EINVAL, "ts_shard: NULL argument");
  int i = v & ((1 << TS__VAL_BITS) - 1);
  if (v < 0 || i >= g->nvals || (uint32_t)(v >> TS__VAL_BITS) != (g->id & 0x3ff))
    return ts_error_set(TS_EINVAL, "ts_shard: not a value of this graph");
  int nd = g->vals[i].producer;
  if (nd < 0)
    return ts_error_set(TS_EINVAL, "ts_shard: '%s' is not an operator's output (inputs and parameters take "
                        "the layout their consumers ask for)", g->vals[i].name ? g->vals[i].name : "value");
  char *c = strdup(strategy);
  if (!c) return ts_error_set(TS_ENOMEM, "ts_shard: out of memory");
  free(g->nodes[nd].strategy);
  g->nodes[nd].strategy = c;
  return TS_OK;
}

void ts_graph_push_scope(ts_graph *g, const char *scope) {
  size_t n = strlen(g->scope);
  snprintf(g->scope + n, sizeof g->scope - n, "%s%s", n ? "/" : "", scope);
}

void ts_graph_pop_scope(ts_graph *g) {
  char *s = strrchr(g->scope, '/');
  if (s)
    *s = 0;
  else
    g->scope[0] = 0;
}

int ts__add_node(ts_graph *g, ts_op op, const int *ins, int nin, int nout, const ts_attrs *a) {
  if (g->status) return -1;
  if ((unsigned)op >= TS_OP_COUNT || !ts__ops[op].infer) {
    ts__graph_fail(g, TS_EUNSUPPORTED, "op %d (%s) has no implementation registered", (int)op,
                   (unsigned)op < TS_OP_COUNT ? ts__ops[op].name : "?");
    return -1;
  }
  if (nin > TS_GRAPH_MAX_IO || nout > TS_GRAPH_MAX_IO || nin < 0 || nout < 1) {
    ts__graph_fail(g, TS_EINVAL, "%s: %d inputs / %d outputs out of range (max %d)",
                   ts__ops[op].name, nin, nout, TS_GRAPH_MAX_IO);
    return -1;
  }
  for (int k = 0; k < nin; k++)
    if (ins[k] < 0 || ins[k] >= g->nvals) {
      ts__graph_fail(g, TS_EGRAPH, "%s: input %d is not a value of this graph", ts__ops[op].name, k);
      return -1;
    }
  ts__node n;
  memset(&n, 0, sizeof n);
  n.op = op;
  n.nin = nin;
  n.nout = nout;
  for (int k = 0; k < nin; k++) n.in[k] = ins[k];
  if (a) n.a = *a;
  ts_dtype odt[TS_GRAPH_MAX_IO];
  ts_shape osh[TS_GRAPH_MAX_IO];
  memset(osh, 0, sizeof osh);
  for (int k = 0; k < nout; k++) odt[k] = TS_F32;
  if (ts__ops[op].infer(g, &n, odt, osh) != TS_OK) {
    if (g->status == TS_OK) ts__graph_fail(g, TS_ESHAPE, "%s: shape inference failed", ts__ops[op].name);
    return -1;
  }
  if (grow((void **)&g->nodes, &g->cap_nodes, g->nnodes + 1, sizeof(ts__node))) {
    ts__graph_fail(g, TS_ENOMEM, "graph: out of memory adding node");
    return -1;
  }
  int ni = g->nnodes;
  char nm[64];
  snprintf(nm, sizeof nm, "%s_%d", ts__ops[op].name, ni);
  n.name = scoped_name(g, nm);
  for (int k = 0; k < n.nout; k++) {
    int v = ts__new_value(g, odt[k], osh[k], TS_VAL_TEMP, NULL);
    if (v < 0) {
      free(n.name);
      return -1;
    }
    g->vals[v].producer = ni;
    g->vals[v].out_index = k;
    if (k == 0 && ts__ops[op].view) g->vals[v].alias_of = ins[0];
    n.out[k] = v;
  }
  g->nodes[ni] = n;
  g->nnodes++;
  return ni;
}

ts_val ts__add1(ts_graph *g, ts_op op, const int *ins, int nin, const ts_attrs *a) {
  int n = ts__add_node(g, op, ins, nin, 1, a);
  return n < 0 ? TS_NONE : ts__handle(g, g->nodes[n].out[0]);
}

int ts__emit(ts_graph *g, ts_op op, const int *ins, int nin, const ts_attrs *a) {
  int n = ts__add_node(g, op, ins, nin, 1, a);
  return n < 0 ? -1 : g->nodes[n].out[0];
}

int ts__emit_sum_to(ts_graph *g, int x, const ts_shape *shape) {
  if (x < 0) return -1;
  if (ts_shape_equal(&g->vals[x].shape, shape)) return x;
  ts_val r = ts_sum_to(g, ts__handle(g, x), *shape);
  return r == TS_NONE ? -1 : (r & ((1 << TS__VAL_BITS) - 1));
}

int ts__emit_reshape(ts_graph *g, int x, const ts_shape *shape) {
  if (x < 0) return -1;
  if (ts_shape_equal(&g->vals[x].shape, shape)) return x;
  ts_val r = ts_reshape(g, ts__handle(g, x), *shape);
  return r == TS_NONE ? -1 : (r & ((1 << TS__VAL_BITS) - 1));
}

int ts__emit_add(ts_graph *g, int a, int b) {
  if (a < 0) return b;
  if (b < 0) return a;
  ts_val r = ts_add(g, ts__handle(g, a), ts__handle(g, b));
  return r == TS_NONE ? -1 : (r & ((1 << TS__VAL_BITS) - 1));
}

size_t ts_graph_dump(const ts_graph *g, char *buf, size_t cap) {
  size_t n = 0;
  char s[160];
#define OUT(...) n += (size_t)snprintf(buf + (n < cap ? n : cap), n < cap ? cap - n : 0, __VA_ARGS__)
  if (cap) buf[0] = 0;
  for (int i = 0; i < g->nvals; i++)
    if (g->vals[i].producer < 0)
      OUT("%%%d = %s %s\n", i,
          g->vals[i].kind == TS_VAL_PARAM ? "param" : g->vals[i].kind == TS_VAL_STATE ? "state" : "input",
          ts__vstr(g, i, s, sizeof s));
  for (int i = 0; i < g->nnodes; i++) {
    const ts__node *nd = &g->nodes[i];
    OUT("%s", "");
    for (int k = 0; k < nd->nout; k++) OUT("%s%%%d", k ? ", " : "", nd->out[k]);
    OUT(" = %s(", ts__ops[nd->op].name);
    for (int k = 0; k < nd->nin; k++) OUT("%s%%%d", k ? ", " : "", nd->in[k]);
    OUT(") -> %s  [%s]%s\n", ts__vstr(g, nd->out[0], s, sizeof s), nd->name ? nd->name : "",
        nd->is_backward ? " bwd" : "");
  }
#undef OUT
  return n + 1;
}
