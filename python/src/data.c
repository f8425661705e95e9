/* tessera._C.Data: one pass over a data set as the trainer reads it (the source of the config's
 * data.* keys, its transform list, a distributed sampler for the shard), batch by batch as
 * numpy arrays (copies: a pipeline's batch lives until the next one).
 *
 * Also the Python-backed source behind tessera.dataset.GeneratorDataset: a ts_source whose get
 * calls a Python callable `rows(i)` -> (data ndarray, label int, target ndarray or None), taking
 * the GIL for each sample (the pipeline's worker threads call it, several at once; the GIL
 * serialises them). It is registered under a name (ts_source_register), so that the trainer and
 * this iterator find it through the config's "source:NAME" split. A Python exception in rows(i)
 * is kept (tsp_pending_stash) and fails that sample with its text; the call that consumed the
 * batch (Model.train through the trainer, or iteration here) re-raises the exception itself.
 * Every call here that may wait for the pipeline's workers (create, next, seek, free) releases
 * the GIL first, as a worker may be waiting for it inside rows(i). */
#include <pthread.h>

#include "tsp.h"

/* ---- the Python-backed source ---- */

typedef struct {
  PyObject *rows; /* rows(i) -> (data, label, target|None); rows.num_classes() -> int */
  int64_t n;
  char what[96];  /* the Python source's class, for sample names: "MySource[7]" */
  int classes;    /* -1: not asked yet (under the GIL) */
} pysrc;

static int g_stashed; /* a rows(i) exception was stashed and not re-raised by an iterator (GIL held) */

static int py_gone(void) {
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsInitialized() || Py_IsFinalizing();
#else
  return !Py_IsInitialized() || _Py_IsFinalizing();
#endif
}

/* A copy of an ndarray into t (the Python side made it C-contiguous of a Tessera dtype). */
static int copy_array(PyObject *a, const char *col, int64_t i, ts_tensor *t) {
  if (!PyArray_Check(a))
    return ts_error_set(TS_EINVAL, "GeneratorDataset: sample %lld: column '%s' is not a numpy array", (long long)i, col);
  PyArrayObject *x = (PyArrayObject *)a;
  ts_dtype dt;
  if (tsp_dtype_from_npy(PyArray_TYPE(x), &dt) || dt == TS_BF16 || !PyArray_IS_C_CONTIGUOUS(x) ||
      PyArray_NDIM(x) >= TS_MAX_DIMS)
    return ts_error_set(TS_EDTYPE, "GeneratorDataset: sample %lld: column '%s' is not a C-contiguous array of "
                        "float32, float16, int32, int64 or uint8 with at most %d dimensions", (long long)i, col,
                        TS_MAX_DIMS - 1);
  ts_shape sh;
  sh.ndim = PyArray_NDIM(x);
  for (int d = 0; d < sh.ndim; d++) sh.dims[d] = (int64_t)PyArray_DIM(x, d);
  int rc = ts_tensor_init(t, dt, sh);
  if (rc) return rc;
  memcpy(t->data, PyArray_DATA(x), ts_tensor_nbytes(t));
  return TS_OK;
}

static int64_t ps_len(void *self) { return ((pysrc *)self)->n; }

/* The GIL for a pipeline worker, with a Python thread state of its own kept between calls. A
 * bare PyGILState_Ensure/Release pair on a thread Python does not know makes and deletes a thread
 * state each time, and with it CPython's frame stack (an mmap, then munmap and page faults): most
 * of a GeneratorDataset sample's cost (docs/python.md, "Cost per sample"). The state is made on the
 * thread's first call (PyThreadState_New also registers it for PyGILState_*, so code inside the
 * call that takes the GIL finds it) and deleted when the thread exits (a key's destructor: glibc
 * has cleared Python's own thread key by then, so it goes through PyEval_RestoreThread, never
 * PyGILState_*). The pipelines join their workers with the GIL released, as every ps_get needs.
 * Threads Python already knows (the main thread) use PyGILState_*. */
static pthread_key_t g_state_key;
static pthread_once_t g_state_once = PTHREAD_ONCE_INIT;

static void state_drop(void *ts) {
  if (py_gone()) return; /* the interpreter frees its thread states itself */
  PyEval_RestoreThread(ts);
  PyThreadState_Clear(ts);
  PyThreadState_DeleteCurrent(); /* and the GIL released */
}

static void state_key(void) { pthread_key_create(&g_state_key, state_drop); }

typedef struct {
  PyThreadState *ts; /* the worker's own, or NULL: g from PyGILState_Ensure */
  PyGILState_STATE g;
} gil_hold;

static gil_hold gil_take(void) {
  gil_hold h = {NULL, PyGILState_UNLOCKED};
  pthread_once(&g_state_once, state_key);
  h.ts = pthread_getspecific(g_state_key);
  if (!h.ts && !PyGILState_GetThisThreadState()) {
    PyInterpreterState *in = PyInterpreterState_Main();
    if ((h.ts = in ? PyThreadState_New(in) : NULL) && pthread_setspecific(g_state_key, h.ts)) {
      PyEval_RestoreThread(h.ts); /* not kept (no key): deleted, under the GIL, and Ensure used */
      PyThreadState_Clear(h.ts);
      PyThreadState_DeleteCurrent();
      h.ts = NULL;
    }
  }
  if (h.ts) PyEval_RestoreThread(h.ts);
  else h.g = PyGILState_Ensure();
  return h;
}

static void gil_give(gil_hold h) {
  if (h.ts) (void)PyEval_SaveThread();
  else PyGILState_Release(h.g);
}

static int ps_get(void *self, int64_t i, ts_sample *out) {
  pysrc *p = self;
  if (py_gone()) return ts_error_set(TS_EINVAL, "GeneratorDataset: the Python interpreter is shutting down");
  gil_hold g = gil_take();
  int rc = TS_OK;
  PyObject *x, *tg, *r = PyObject_CallFunction(p->rows, "L", (long long)i);
  long long label = -1;
  if (!r || !PyArg_ParseTuple(r, "OLO", &x, &label, &tg)) {
    rc = tsp_pending_stash("GeneratorDataset");
    g_stashed = 1;
  } else {
    out->label = label;
    rc = copy_array(x, "data", i, &out->data);
    if (!rc && tg != Py_None) rc = copy_array(tg, "target", i, &out->target);
  }
  Py_XDECREF(r);
  gil_give(g);
  return rc;
}

static int ps_classes(void *self) {
  pysrc *p = self;
  if (py_gone()) return 0;
  PyGILState_STATE g = PyGILState_Ensure();
  if (p->classes < 0) {
    PyObject *r = PyObject_CallMethod(p->rows, "num_classes", NULL);
    long v = r ? PyLong_AsLong(r) : -1;
    Py_XDECREF(r);
    if (PyErr_Occurred()) {
      tsp_pending_stash("GeneratorDataset (its number of classes)");
      g_stashed = 1;
      v = 0;
    }
    p->classes = v > 0 && v < (1L << 30) ? (int)v : 0;
  }
  int c = p->classes;
  PyGILState_Release(g);
  return c;
}

static int ps_name(void *self, int64_t i, char *buf, size_t cap) {
  snprintf(buf, cap, "%s[%lld]", ((pysrc *)self)->what, (long long)i);
  return TS_OK;
}

static void ps_destroy(void *self) {
  pysrc *p = self;
  if (!py_gone()) {
    PyGILState_STATE g = PyGILState_Ensure();
    Py_XDECREF(p->rows);
    PyGILState_Release(g);
  }
  free(p);
}

/* Data.register_source(name, rows, n, what): a source of n samples over rows(i), registered as
 * name (the config's split "source:name"). */
static PyObject *da_register(PyObject *cls, PyObject *args) {
  (void)cls;
  const char *name, *what;
  PyObject *rows;
  long long n;
  if (!PyArg_ParseTuple(args, "sOLs", &name, &rows, &n, &what)) return NULL;
  if (n < 0) return PyErr_Format(PyExc_ValueError, "register_source: %lld samples", n);
  pysrc *p = calloc(1, sizeof *p);
  if (!p) return PyErr_NoMemory();
  Py_INCREF(rows);
  p->rows = rows;
  p->n = n;
  p->classes = -1;
  snprintf(p->what, sizeof p->what, "%s", what);
  static const ts_source_vtable vt = {"python", ps_len, ps_get, NULL, ps_classes, ps_destroy, ps_name};
  ts_source *s;
  int rc = ts_source_create(&vt, p, &s);
  if (rc) {
    Py_DECREF(rows);
    free(p);
    return tsp_raise(rc);
  }
  rc = ts_source_register(name, s);
  ts_source_free(s); /* the registry's reference keeps it */
  if (rc) return tsp_raise(rc);
  Py_RETURN_NONE;
}

static PyObject *da_unregister(PyObject *cls, PyObject *args) {
  (void)cls;
  const char *name;
  if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS /* the last reference: nothing waits, but a destroy takes the GIL itself */
  rc = ts_source_unregister(name);
  Py_END_ALLOW_THREADS
  if (rc) return tsp_raise(rc);
  Py_RETURN_NONE;
}

/* ---- iteration ---- */

typedef struct {
  PyObject_HEAD
  ts_source *train, *test;
  ts_pipeline *pipe;
  ts_transform tf[TS_CFG_MAX_TRANSFORMS];
  int64_t batches;
  int with_target; /* next() gives (data, labels, target or None) */
} Data;

/* Called with the GIL held. */
static void da_free(Data *self) {
  ts_pipeline *p = self->pipe;
  ts_source *a = self->train, *b = self->test;
  self->pipe = NULL;
  self->train = self->test = NULL;
  Py_BEGIN_ALLOW_THREADS /* the workers are joined; one may be waiting for the GIL in rows(i) */
  ts_pipeline_free(p);
  ts_source_free(a);
  ts_source_free(b);
  Py_END_ALLOW_THREADS
  if (g_stashed) { /* an exception of a batch read ahead and never consumed: not this call's */
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    if (tsp_pending_restore()) PyErr_Clear();
    PyErr_Restore(t, v, tb);
    g_stashed = 0;
  }
}

/* Data(pairs, usage_train, batch, num_shards, shard_id, shuffle, drop_remainder, seed, epoch,
 *      target=False, stratified=False): the data set's shuffle buffer and worker count are the
 * config's data.shuffle_buffer and data.num_workers, as the trainer's (the same order whatever
 * the worker count). */
static int da_init(Data *self, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"config", "train", "batch", "num_shards", "shard_id", "shuffle", "drop_remainder",
                        "seed", "epoch", "target", "stratified", NULL};
  PyObject *pairs;
  int train = 1, batch = 1, shards = 1, shard = 0, shuffle = 0, drop = 0, target = 0, strat = 0;
  unsigned long long seed = 1;
  long long epoch = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|piiippKLpp", kwl, &pairs, &train, &batch, &shards, &shard, &shuffle,
                                   &drop, &seed, &epoch, &target, &strat))
    return -1;
  self->with_target = target;
  da_free(self);
  ts_config *cfg = PyMem_Malloc(sizeof *cfg);
  if (!cfg) {
    PyErr_NoMemory();
    return -1;
  }
  int rc = 0, ntf = 0, buffer = 0, workers = 0;
  if (tsp_config_from_pairs(pairs, cfg)) {
    tsp_config_release(cfg);
    return -1;
  }
  if (!(rc = ts_config_validate(cfg)) && !(rc = ts_config_sources(cfg, &self->train, &self->test))) {
    ntf = ts_config_transforms(cfg, train, self->tf, TS_CFG_MAX_TRANSFORMS);
    if (ntf < 0) rc = ntf;
    buffer = train ? cfg->data.shuffle_buffer : 0; /* the trainer's test split has no buffer either */
    workers = cfg->data.num_workers;
  }
  tsp_config_release(cfg);
  ts_source *src = train ? self->train : self->test;
  if (!rc && !src) rc = ts_error_set(TS_ENOTFOUND, "data set: no test split");
  if (!rc && (shards < 1 || shard < 0 || shard >= shards))
    rc = ts_error_set(TS_EINVAL, "data set: shard_id %d of num_shards %d", shard, shards);
  if (!rc) {
    ts_pipeline_config pc = ts_pipeline_config_default();
    pc.source = src;
    pc.transforms = self->tf;
    pc.ntransforms = ntf;
    pc.batch_size = batch;
    pc.drop_remainder = drop;
    pc.epochs = epoch + 1;
    pc.seed = seed;
    pc.shuffle_buffer = buffer;
    pc.num_workers = workers;
    pc.sampler.kind = strat ? TS_SAMPLER_STRATIFIED : TS_SAMPLER_DISTRIBUTED;
    pc.sampler.shuffle = shuffle;
    pc.sampler.num_shards = shards;
    pc.sampler.shard_id = shard;
    pc.sampler.drop_last = 0;
    Py_BEGIN_ALLOW_THREADS /* a Python source's rows(i) takes the GIL in the workers */
    rc = ts_pipeline_create(&pc, &self->pipe);
    if (!rc) {
      self->batches = ts_pipeline_batches_per_epoch(self->pipe);
      if (epoch > 0) rc = ts_pipeline_seek(self->pipe, epoch, 0);
    }
    Py_END_ALLOW_THREADS
  }
  if (rc) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", ts_last_error());
    g_stashed = 0; /* kept for the restore below */
    da_free(self);
    if (tsp_pending_restore()) return -1; /* a Python source's exception (its class count, a sample) */
    ts_error_set(rc, "%s", msg);
    tsp_raise(rc);
    return -1;
  }
  return 0;
}

static void da_dealloc(Data *self) {
  da_free(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *da_iter(PyObject *self) {
  Py_INCREF(self);
  return self;
}

/* next batch: (data, labels) numpy arrays; StopIteration at the end of the epoch */
static PyObject *da_next(Data *self) {
  if (!self->pipe) return NULL;
  ts_batch b;
  int rc;
  Py_BEGIN_ALLOW_THREADS /* the workers take the GIL for a Python source */
  rc = ts_pipeline_next(self->pipe, &b);
  Py_END_ALLOW_THREADS
  if (rc) {
    if (tsp_pending_restore()) { /* the Python exception of the failed sample */
      g_stashed = 0;
      return NULL;
    }
    return tsp_raise(rc);
  }
  if (b.size == 0) return NULL; /* StopIteration */
  PyObject *x = tsp_array_copy(&b.data), *y = tsp_array_copy(&b.labels), *t = NULL;
  if (self->with_target) {
    t = b.target.data ? tsp_array_copy(&b.target) : Py_NewRef(Py_None);
  }
  if (!x || !y || (self->with_target && !t)) {
    Py_XDECREF(x);
    Py_XDECREF(y);
    Py_XDECREF(t);
    return NULL;
  }
  return self->with_target ? Py_BuildValue("NNN", x, y, t) : Py_BuildValue("NN", x, y);
}

static PyObject *da_len(Data *self, PyObject *args) {
  (void)args;
  return PyLong_FromLongLong(self->batches);
}

static PyObject *da_source_len(Data *self, PyObject *args) {
  int train = 1;
  if (!PyArg_ParseTuple(args, "|p", &train)) return NULL;
  ts_source *s = train ? self->train : self->test;
  return PyLong_FromLongLong(s ? ts_source_len(s) : 0);
}

static PyMethodDef dmethods[] = {
    {"batches", (PyCFunction)da_len, METH_NOARGS, "batches per epoch of this shard"},
    {"source_len", (PyCFunction)da_source_len, METH_VARARGS, "samples in the split"},
    {"register_source", (PyCFunction)da_register, METH_VARARGS | METH_STATIC,
     "register_source(name, rows, n, what): a source of n samples over rows(i) -> (data, label, target|None), "
     "the config's split 'source:name'"},
    {"unregister_source", (PyCFunction)da_unregister, METH_VARARGS | METH_STATIC, "unregister_source(name)"},
    {NULL, NULL, 0, NULL}};

PyTypeObject tsp_DataType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tessera._C.Data",
    .tp_basicsize = sizeof(Data),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Data(config_pairs, train, batch, num_shards, shard_id, shuffle, drop_remainder, seed, epoch)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)da_init,
    .tp_dealloc = (destructor)da_dealloc,
    .tp_iter = da_iter,
    .tp_iternext = (iternextfunc)da_next,
    .tp_methods = dmethods,
};
