/* The graph builder a Python model records into: a Builder wraps the ts_nn (graph + parameter
 * store) of one ts_model_fn call and is closed when the call returns. Values are the graph's
 * ts_val integers; tessera.Tensor (python/tessera/tensor.py) wraps them. Every op raises
 * ValueError with the graph's message (naming the op and the shapes) as soon as it fails. */
#include "tsp.h"

typedef struct {
  PyObject_HEAD
  ts_nn *nn;
  int training, rank, size;
  int mode;        /* the job's ts_parallel_mode (hybrid_parallel: collectives and layer-wise slices) */
  char scope[512]; /* the pushed cell scopes joined with '.' (parameter names: ts_nn_param's) */
  int depth, mark[64]; /* scope lengths before each push (pushes past 64 are not tracked) */
} Builder;

PyObject *tsp_builder_new(ts_nn *nn, const ts_model_info *info, int mode) {
  Builder *b = PyObject_New(Builder, &tsp_BuilderType);
  if (!b) return NULL;
  b->nn = nn;
  b->training = info ? info->training : 1;
  b->rank = info ? info->rank : 0;
  b->size = info && info->size > 0 ? info->size : 1;
  b->mode = mode;
  b->scope[0] = 0;
  b->depth = 0;
  return (PyObject *)b;
}

void tsp_builder_close(PyObject *o) { ((Builder *)o)->nn = NULL; }

static ts_graph *G(Builder *b) {
  if (!b->nn) {
    PyErr_SetString(PyExc_RuntimeError, "tessera: graph ops run only inside Cell.construct while a model is built");
    return NULL;
  }
  return b->nn->g;
}

/* the op's result, or ValueError with the graph's sticky message */
static PyObject *ret(Builder *b, ts_val v) {
  ts_graph *g = b->nn->g;
  if (v == TS_NONE || ts_graph_status(g)) {
    const char *m = ts_graph_error(g);
    PyErr_SetString(PyExc_ValueError, m && m[0] ? m : ts_last_error());
    return NULL;
  }
  return PyLong_FromLong(v);
}

#define PRE(fmt, ...)                                   \
  ts_graph *g = G(b);                                   \
  if (!g || !PyArg_ParseTuple(args, fmt, __VA_ARGS__)) \
    return NULL

static PyObject *b_dense(Builder *b, PyObject *args) {
  const char *name;
  int x, bias;
  long long out;
  PRE("siLp", &name, &x, &out, &bias);
  (void)g;
  return ret(b, ts_nn_dense(b->nn, name, x, out, bias));
}

static PyObject *b_conv2d(Builder *b, PyObject *args) {
  const char *name;
  int x, k, s, p, d, gr, bias;
  long long out;
  PRE("siLiiiiip", &name, &x, &out, &k, &s, &p, &d, &gr, &bias);
  (void)g;
  return ret(b, ts_nn_conv2d(b->nn, name, x, out, k, s, p, d, gr, bias));
}

static PyObject *b_batchnorm(Builder *b, PyObject *args) {
  const char *name;
  int x;
  float m, e;
  PRE("siff", &name, &x, &m, &e);
  (void)g;
  return ret(b, ts_nn_batchnorm(b->nn, name, x, m, e));
}

static PyObject *b_layernorm(Builder *b, PyObject *args) {
  const char *name;
  int x;
  float e;
  PRE("sif", &name, &x, &e);
  (void)g;
  return ret(b, ts_nn_layernorm(b->nn, name, x, e));
}

static PyObject *b_embedding(Builder *b, PyObject *args) {
  const char *name;
  int x;
  long long v, d;
  PRE("siLL", &name, &x, &v, &d);
  (void)g;
  return ret(b, ts_nn_embedding(b->nn, name, x, v, d));
}

/* The initializer named init (Python's names, ts_init_kind's order) with arguments a, b; -1 with
 * ValueError naming the parameter when unknown. */
static int init_from_name(const char *name, const char *init, float a, float b, ts_init *out) {
  static const char *kinds[] = {"zeros", "ones", "constant", "uniform", "normal", "xavier_uniform",
                                "xavier_normal", "he_uniform", "he_normal", "torch_default", "trunc_normal"};
  for (int i = 0; i < (int)(sizeof kinds / sizeof kinds[0]); i++)
    if (!strcmp(init, kinds[i])) {
      ts_init in = {(ts_init_kind)i, a, b, 0};
      *out = in;
      return 0;
    }
  PyErr_Format(PyExc_ValueError, "parameter '%s': unknown initializer '%s'", name, init);
  return -1;
}

/* param(name, shape, init, a, b, no_decay, state): a parameter in the current scope */
static PyObject *b_param(Builder *b, PyObject *args) {
  const char *name, *init;
  PyObject *shp;
  float a, bb;
  int nodecay, state;
  PRE("sOsffpp", &name, &shp, &init, &a, &bb, &nodecay, &state);
  (void)g;
  ts_shape s;
  if (tsp_shape_from_seq(shp, &s)) return NULL;
  ts_init in;
  if (init_from_name(name, init, a, bb, &in)) return NULL;
  return ret(b, ts_nn_param(b->nn, name, s, in, (nodecay ? TS_PARAM_NO_DECAY : 0) | (state ? TS_PARAM_STATE : 0)));
}

/* param_sharded(name, slice_shape, axis, init, a, b, no_decay, state): hybrid_parallel's
 * layer-wise parallel parameter: this rank's slice of a tensor whose global shape is the slice
 * stacked over the job's ranks along `axis` (ts_params_add_sharded on the device matrix (size,)),
 * initialised with exactly the values the unsharded parameter of the same name has there. */
static PyObject *b_param_sharded(Builder *b, PyObject *args) {
  const char *name, *init;
  PyObject *shp;
  int axis, nodecay, state;
  float a, bb;
  PRE("sOisffpp", &name, &shp, &axis, &init, &a, &bb, &nodecay, &state);
  if (b->mode != TS_PARALLEL_HYBRID)
    return PyErr_Format(PyExc_ValueError, "parameter '%s': layer-wise parallel parameters need parallel_mode "
                        "'hybrid_parallel', the job runs '%s'", name, ts_parallel_mode_name((ts_parallel_mode)b->mode));
  ts_shape local;
  if (tsp_shape_from_seq(shp, &local)) return NULL;
  if (axis < 0) axis += local.ndim;
  if (axis < 0 || axis >= local.ndim)
    return PyErr_Format(PyExc_ValueError, "parameter '%s': shard_axis out of range for %d dims", name, local.ndim);
  ts_init in;
  if (init_from_name(name, init, a, bb, &in)) return NULL;
  int flags = (nodecay ? TS_PARAM_NO_DECAY : 0) | (state ? TS_PARAM_STATE : 0);
  char full[600];
  snprintf(full, sizeof full, "%s%s%s", b->scope, b->scope[0] ? "." : "", name);
  ts_shape global = local;
  global.dims[axis] *= b->size;
  int id = ts_params_find(b->nn->p, full);
  if (id < 0) {
    int dev[1] = {b->size}, tmap[TS_MAX_DIMS];
    for (int i = 0; i < local.ndim; i++) tmap[i] = i == axis ? 0 : -1;
    ts_layout l;
    int rc = ts_layout_init(&l, 1, dev, local.ndim, tmap, 0);
    if (!rc) id = ts_params_add_sharded(b->nn->p, full, global, &l, b->rank, in, flags);
    if (rc || id < 0) return tsp_raise(rc ? rc : id);
  } else if (!ts_params_is_sharded(b->nn->p, id)) {
    return PyErr_Format(PyExc_ValueError, "parameter '%s': registered as a whole (replicated) parameter, used "
                        "again as a layer-wise parallel slice", full);
  }
  return ret(b, ts_nn_param(b->nn, name, local, in, flags));
}

/* collective(kind, x, op): hybrid_parallel's hand-placed collectives over every rank (plan
 * communicator slot 0): kind 0 AllReduce, 1 AllGather (dim 0), 2 ReduceScatter (dim 0). */
static PyObject *b_collective(Builder *b, PyObject *args) {
  int kind, x, op;
  PRE("iii", &kind, &x, &op);
  static const char *names[] = {"AllReduce", "AllGather", "ReduceScatter"};
  if (kind < 0 || kind > 2 || op < 0 || op >= TS_REDUCE_COUNT)
    return PyErr_Format(PyExc_ValueError, "collective: bad kind %d or op %d", kind, op);
  if (b->mode != TS_PARALLEL_HYBRID)
    return PyErr_Format(PyExc_ValueError, "ops.%s: collectives placed by hand need parallel_mode 'hybrid_parallel', "
                        "the job runs '%s'", names[kind], ts_parallel_mode_name((ts_parallel_mode)b->mode));
  ts_val y = kind == 0 ? ts_allreduce(g, x, 0, b->size, op)
             : kind == 1 ? ts_allgather(g, x, 0, b->size, 0)
                         : ts_reduce_scatter(g, x, 0, b->size, 0, op);
  return ret(b, y);
}

static PyObject *b_eltwise(Builder *b, PyObject *args) {
  int x, alg;
  PRE("ii", &x, &alg);
  if (alg < 0 || alg >= TS_ELT_COUNT) return PyErr_Format(PyExc_ValueError, "eltwise: bad algorithm %d", alg);
  return ret(b, ts_eltwise(g, x, (ts_eltwise_alg)alg));
}

static PyObject *b_softmax(Builder *b, PyObject *args) {
  int x, axis, lg;
  PRE("iip", &x, &axis, &lg);
  return ret(b, lg ? ts_log_softmax(g, x, axis) : ts_softmax(g, x, axis));
}

static PyObject *b_binary(Builder *b, PyObject *args) {
  int x, y, alg;
  PRE("iii", &x, &y, &alg);
  if (alg < 0 || alg >= TS_BIN_COUNT) return PyErr_Format(PyExc_ValueError, "binary: bad algorithm %d", alg);
  return ret(b, ts_binary(g, x, y, (ts_binary_alg)alg));
}

static PyObject *b_scale(Builder *b, PyObject *args) {
  int x;
  float al, be;
  PRE("iff", &x, &al, &be);
  return ret(b, ts_scale(g, x, al, be));
}

static PyObject *b_matmul(Builder *b, PyObject *args) {
  int x, y, ta, tb;
  PRE("iipp", &x, &y, &ta, &tb);
  return ret(b, ts_matmul(g, x, y, ta, tb));
}

static PyObject *b_dense_op(Builder *b, PyObject *args) {
  int x, w, bias;
  PRE("iii", &x, &w, &bias);
  return ret(b, ts_dense(g, x, w, bias < 0 ? TS_NONE : bias));
}

static PyObject *b_reshape(Builder *b, PyObject *args) {
  int x;
  PyObject *shp;
  PRE("iO", &x, &shp);
  ts_shape s;
  if (tsp_shape_from_seq(shp, &s)) return NULL;
  return ret(b, ts_reshape(g, x, s));
}

static PyObject *b_flatten(Builder *b, PyObject *args) {
  int x, d;
  PRE("ii", &x, &d);
  return ret(b, ts_flatten(g, x, d));
}

static PyObject *b_permute(Builder *b, PyObject *args) {
  int x;
  PyObject *perm;
  PRE("iO", &x, &perm);
  ts_shape s;
  if (tsp_shape_from_seq(perm, &s)) return NULL;
  if (s.ndim != ts_val_shape(g, x).ndim) return PyErr_Format(PyExc_ValueError, "permute: %d axes for a %d-dim value", s.ndim, ts_val_shape(g, x).ndim);
  int p[TS_MAX_DIMS];
  for (int i = 0; i < s.ndim; i++) p[i] = (int)s.dims[i];
  return ret(b, ts_permute(g, x, p));
}

static PyObject *b_transpose(Builder *b, PyObject *args) {
  int x, d0, d1;
  PRE("iii", &x, &d0, &d1);
  return ret(b, ts_transpose(g, x, d0, d1));
}

static PyObject *b_concat(Builder *b, PyObject *args) {
  PyObject *xs;
  int axis;
  PRE("Oi", &xs, &axis);
  PyObject *f = PySequence_Fast(xs, "concat: expected a sequence of values");
  if (!f) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(f);
  ts_val *v = PyMem_Malloc(sizeof(ts_val) * (size_t)(n ? n : 1));
  for (Py_ssize_t i = 0; v && i < n; i++) v[i] = (ts_val)PyLong_AsLong(PySequence_Fast_GET_ITEM(f, i));
  Py_DECREF(f);
  if (!v) return PyErr_NoMemory();
  if (PyErr_Occurred()) {
    PyMem_Free(v);
    return NULL;
  }
  ts_val y = ts_concat(g, v, (int)n, axis);
  PyMem_Free(v);
  return ret(b, y);
}

static PyObject *b_slice(Builder *b, PyObject *args) {
  int x, axis;
  long long s0, e0;
  PRE("iiLL", &x, &axis, &s0, &e0);
  return ret(b, ts_slice(g, x, axis, s0, e0));
}

static PyObject *b_reduce(Builder *b, PyObject *args) {
  int x, alg, keep;
  PyObject *axes;
  PRE("iiOp", &x, &alg, &axes, &keep);
  if (alg < 0 || alg >= TS_RED_COUNT) return PyErr_Format(PyExc_ValueError, "reduce: bad algorithm %d", alg);
  ts_shape s;
  if (tsp_shape_from_seq(axes, &s)) return NULL;
  int nd = ts_val_shape(g, x).ndim;
  uint32_t mask = 0;
  for (int i = 0; i < s.ndim; i++) {
    int64_t a = s.dims[i] < 0 ? s.dims[i] + nd : s.dims[i];
    if (a < 0 || a >= nd) return PyErr_Format(PyExc_ValueError, "reduce: axis %lld out of range for %d dims", (long long)s.dims[i], nd);
    mask |= 1u << a;
  }
  return ret(b, ts_reduce(g, x, (ts_reduce_alg)alg, mask, keep));
}

static PyObject *b_pool(Builder *b, PyObject *args) {
  int x, avg, kh, kw, sh, sw, ph, pw;
  PRE("ipiiiiii", &x, &avg, &kh, &kw, &sh, &sw, &ph, &pw);
  return ret(b, avg ? ts_avgpool2d(g, x, kh, kw, sh, sw, ph, pw) : ts_maxpool2d(g, x, kh, kw, sh, sw, ph, pw));
}

static PyObject *b_global_avgpool(Builder *b, PyObject *args) {
  int x;
  PRE("i", &x);
  return ret(b, ts_global_avgpool(g, x));
}

static PyObject *b_dropout(Builder *b, PyObject *args) {
  int x;
  float p;
  unsigned long long seed;
  PRE("ifK", &x, &p, &seed);
  return ret(b, ts_dropout(g, x, p, seed));
}

static PyObject *b_attention(Builder *b, PyObject *args) {
  int q, k, v, bthd;
  float sc;
  PRE("iiifp", &q, &k, &v, &sc, &bthd);
  return ret(b, bthd ? ts_attention_bthd(g, q, k, v, sc) : ts_attention(g, q, k, v, sc));
}

static PyObject *b_softmax_ce(Builder *b, PyObject *args) {
  int x, y;
  float s;
  PRE("iif", &x, &y, &s);
  return ret(b, ts_softmax_cross_entropy(g, x, y, s));
}

static PyObject *b_cast(Builder *b, PyObject *args) {
  int x;
  const char *dt;
  PRE("is", &x, &dt);
  ts_dtype d;
  if (ts_dtype_parse(dt, &d)) return PyErr_Format(PyExc_ValueError, "cast: unknown dtype '%s'", dt);
  return ret(b, ts_cast(g, x, d));
}

/* const(dtype, shape, value): a tensor of one value (ts_const) */
static PyObject *b_const(Builder *b, PyObject *args) {
  const char *dt;
  PyObject *shp;
  float v;
  PRE("sOf", &dt, &shp, &v);
  ts_dtype d;
  if (ts_dtype_parse(dt, &d)) return PyErr_Format(PyExc_ValueError, "const: unknown dtype '%s'", dt);
  ts_shape s;
  if (tsp_shape_from_seq(shp, &s)) return NULL;
  return ret(b, ts_const(g, d, s, v));
}

/* one_hot(ids, depth, axis, on, off, dtype) (ts_one_hot) */
static PyObject *b_one_hot(Builder *b, PyObject *args) {
  int x, axis;
  long long depth;
  float on, off;
  const char *dt;
  PRE("iLiffs", &x, &depth, &axis, &on, &off, &dt);
  ts_dtype d;
  if (ts_dtype_parse(dt, &d)) return PyErr_Format(PyExc_ValueError, "one_hot: unknown dtype '%s'", dt);
  return ret(b, ts_one_hot(g, x, depth, axis, on, off, d));
}

static PyObject *b_shard(Builder *b, PyObject *args) {
  int x;
  const char *st;
  PRE("is", &x, &st);
  int rc = ts_shard(g, x, st);
  if (rc) return tsp_raise(rc);
  Py_RETURN_NONE;
}

static PyObject *b_push_scope(Builder *b, PyObject *args) {
  const char *s;
  PRE("s", &s);
  ts_graph_push_scope(g, s);
  if (b->depth < 64) b->mark[b->depth] = (int)strlen(b->scope);
  b->depth++;
  size_t n = strlen(b->scope);
  snprintf(b->scope + n, sizeof b->scope - n, "%s%s", n ? "." : "", s);
  Py_RETURN_NONE;
}

static PyObject *b_pop_scope(Builder *b, PyObject *args) {
  ts_graph *g = G(b);
  (void)args;
  if (!g) return NULL;
  ts_graph_pop_scope(g);
  if (b->depth > 0 && --b->depth < 64) b->scope[b->mark[b->depth]] = 0;
  Py_RETURN_NONE;
}

static PyObject *b_info(Builder *b, PyObject *args) {
  int x;
  PRE("i", &x);
  ts_shape s = ts_val_shape(g, x);
  PyObject *t = tsp_shape_to_tuple(&s);
  if (!t) return NULL;
  return Py_BuildValue("Ns", t, ts_dtype_name(ts_val_dtype(g, x)));
}

static PyObject *b_get(Builder *b, void *which) {
  intptr_t w = (intptr_t)which;
  if (w == 3) return PyUnicode_FromString(ts_parallel_mode_name((ts_parallel_mode)b->mode));
  if (w == 4) return PyUnicode_FromString(b->scope);
  return PyLong_FromLong(w == 0 ? b->training : w == 1 ? b->rank : b->size);
}

#define M(n) {#n, (PyCFunction)b_##n, METH_VARARGS, NULL}
static PyMethodDef bmethods[] = {M(dense),    M(conv2d),   M(batchnorm),  M(layernorm), M(embedding),
                                 M(param),    M(param_sharded), M(collective), M(eltwise),  M(softmax),    M(binary),    M(scale),
                                 M(matmul),   M(dense_op), M(reshape),    M(flatten),   M(permute),
                                 M(transpose), M(concat),  M(slice),      M(reduce),    M(pool),
                                 M(global_avgpool), M(dropout), M(attention), M(softmax_ce), M(cast), M(const), M(one_hot),
                                 M(shard),    M(push_scope), {"pop_scope", (PyCFunction)b_pop_scope, METH_NOARGS, NULL},
                                 M(info),     {NULL, NULL, 0, NULL}};
static PyGetSetDef bgetset[] = {{"training", (getter)b_get, NULL, "1: the training graph", (void *)0},
                                {"rank", (getter)b_get, NULL, "this rank", (void *)1},
                                {"size", (getter)b_get, NULL, "the job's ranks", (void *)2},
                                {"mode", (getter)b_get, NULL, "the job's parallel_mode", (void *)3},
                                {"scope", (getter)b_get, NULL, "the pushed cell scopes, '.'-joined", (void *)4},
                                {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject tsp_BuilderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tessera._C.Builder",
    .tp_basicsize = sizeof(Builder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A model's graph while it is built (valid only inside the build call).",
    .tp_methods = bmethods,
    .tp_getset = bgetset,
};
