/* tessera._C module: the context (MPI start, rank, size, threads), config-key checks, the error
 * mapping and the module table. */
#define TSP_MAIN
#include "tsp.h"

#include <time.h>

PyObject *tsp_Error;

PyObject *tsp_raise(int rc) {
  const char *msg = ts_last_error();
  if (!msg || !msg[0]) msg = ts_strerror(rc);
  PyObject *type = tsp_Error;
  switch (rc) {
    case TS_ECONFIG:
    case TS_EINVAL:
    case TS_ESHAPE:
    case TS_EDTYPE:
    case TS_ERANGE:
    case TS_EGRAPH:
    case TS_EUNSUPPORTED:
    case TS_EFORMAT:
      type = PyExc_ValueError;
      break;
    case TS_ENOTFOUND:
      type = PyExc_FileNotFoundError;
      break;
    case TS_EIO:
      type = PyExc_OSError;
      break;
    case TS_ENOMEM:
      type = PyExc_MemoryError;
      break;
    default:
      break;
  }
  PyErr_SetString(type, msg);
  return NULL;
}

static PyObject *pend_type, *pend_value, *pend_tb;

int tsp_pending_stash(const char *where) {
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  PyErr_NormalizeException(&t, &v, &tb);
  const char *s = "";
  PyObject *str = v ? PyObject_Str(v) : NULL;
  if (str) s = PyUnicode_AsUTF8(str);
  if (!s) {
    PyErr_Clear();
    s = "";
  }
  int rc = ts_error_set(TS_EINVAL, "%s: Python %s: %s", where, t ? ((PyTypeObject *)t)->tp_name : "error", s);
  Py_XDECREF(str);
  if (pend_type) { /* keep the first */
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
  } else {
    pend_type = t;
    pend_value = v;
    pend_tb = tb;
  }
  return rc;
}

int tsp_pending_restore(void) {
  if (!pend_type) return 0;
  PyErr_Restore(pend_type, pend_value, pend_tb);
  pend_type = pend_value = pend_tb = NULL;
  return 1;
}

void tsp_config_release(ts_config *cfg) {
  if (!cfg) return;
  ts_config_free(cfg);
  PyMem_Free(cfg);
}

int tsp_config_from_pairs(PyObject *pairs, ts_config *cfg) {
  ts_config_defaults(cfg);
  PyObject *seq = PySequence_Fast(pairs, "config: expected a sequence of (key, value) pairs");
  if (!seq) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  for (Py_ssize_t i = 0; i < n; i++) {
    const char *k, *v;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "ss", &k, &v)) {
      Py_DECREF(seq);
      return -1;
    }
    int rc = ts_config_set(cfg, k, v);
    if (rc) {
      Py_DECREF(seq);
      tsp_raise(rc);
      return -1;
    }
  }
  Py_DECREF(seq);
  return 0;
}

/* ---- context ---- */

/* A duplicate of the world made at init(): the ranks that saw a collective call fail agree on it
 * here (tsp_agree_failure), apart from whatever the others are waiting in on the world. */
static ts_comm *g_agree;

static PyObject *py_init(PyObject *self, PyObject *args) {
  (void)self;
  (void)args;
  int rc = ts_comm_initialized() ? TS_OK : ts_comm_init(NULL, NULL);
  ts_comm *w = NULL;
  if (!rc && !g_agree && !(rc = ts_comm_world(&w)) && ts_comm_size(w) > 1) rc = ts_comm_dup(w, &g_agree);
  if (rc) return tsp_raise(rc);
  Py_RETURN_NONE;
}

static PyObject *py_finalize(PyObject *self, PyObject *args) {
  (void)self;
  (void)args;
  ts_comm_free(g_agree);
  g_agree = NULL;
  if (ts_comm_initialized()) ts_comm_finalize();
  Py_RETURN_NONE;
}

void tsp_agree_failure(int rc, const char *what) {
  if (!g_agree || !rc) return;
  char msg[2048];
  snprintf(msg, sizeof msg, "%s", ts_last_error());
  int r = ts_comm_rank(g_agree), n = ts_comm_size(g_agree), done = 0, trc;
  int32_t one = 1, sum = 0;
  ts_comm_req *req = NULL;
  double grace = ts_comm_get_timeout();
  grace = grace > 0 && grace < 10 ? grace : 10;
  Py_BEGIN_ALLOW_THREADS
  trc = ts_comm_iallreduce(g_agree, &one, &sum, 1, TS_I32, TS_REDUCE_SUM, &req);
  double t0 = ts_time_now();
  while (!trc && !done && ts_time_now() - t0 < grace) {
    trc = ts_comm_test(req, &done);
    if (!done) {
      struct timespec ts = {0, 2000000L};
      nanosleep(&ts, NULL);
    }
  }
  Py_END_ALLOW_THREADS
  if (!trc && done) { /* every rank failed alike (a configuration error, ...): raised on each */
    ts_comm_req_free(req);
    ts_error_set(rc, "%s", msg);
    return;
  }
  PySys_WriteStderr("tessera: rank %d of %d: %s failed on this rank (the other ranks did not fail within %g s): %s\n"
                    "tessera: rank %d of %d: ending the job (MPI_Abort) so the other ranks do not wait for the "
                    "communication timeout\n", r, n, what, grace, msg, r, n);
  tsp_abort_job();
  ts_error_set(rc, "%s", msg);
}

void tsp_abort_job(void) {
  PyObject *o;
  if ((o = PySys_GetObject("stdout")) && o != Py_None && !PyObject_CallMethod(o, "flush", NULL)) PyErr_Clear();
  if ((o = PySys_GetObject("stderr")) && o != Py_None && !PyObject_CallMethod(o, "flush", NULL)) PyErr_Clear();
  fflush(stdout);
  fflush(stderr);
  ts_comm *w = NULL;
  if (ts_comm_world(&w) == TS_OK) ts_comm_abort(w, 1);
}

static PyObject *py_initialized(PyObject *self, PyObject *args) {
  (void)self;
  (void)args;
  return PyBool_FromLong(ts_comm_initialized());
}

static PyObject *py_rank_size(PyObject *self, PyObject *args) {
  (void)self;
  (void)args;
  int r = 0, n = 1;
  ts_comm *w;
  if (ts_comm_initialized() && ts_comm_world(&w) == TS_OK) {
    r = ts_comm_rank(w);
    n = ts_comm_size(w);
  } else {
    ts_job_rank(&r, &n);
  }
  return Py_BuildValue("ii", r, n);
}

/* barrier(): every rank of the job waits for the others (nothing alone, or before init) */
static PyObject *py_barrier(PyObject *self, PyObject *args) {
  (void)self;
  (void)args;
  ts_comm *w;
  if (ts_comm_initialized() && ts_comm_world(&w) == TS_OK && ts_comm_size(w) > 1) {
    int rc = ts_comm_barrier(w);
    if (rc) return tsp_raise(rc);
  }
  Py_RETURN_NONE;
}

static PyObject *py_set_threads(PyObject *self, PyObject *args) {
  (void)self;
  int n;
  if (!PyArg_ParseTuple(args, "i", &n)) return NULL;
  ts_threads_set(n);
  Py_RETURN_NONE;
}

/* check_key(key, value): sets one config key on a default config; ValueError with the library's
 * message naming the key on an unknown key or a bad value. */
static PyObject *py_check_key(PyObject *self, PyObject *args) {
  (void)self;
  const char *k, *v;
  if (!PyArg_ParseTuple(args, "ss", &k, &v)) return NULL;
  ts_config *cfg = PyMem_Malloc(sizeof *cfg);
  if (!cfg) return PyErr_NoMemory();
  ts_config_defaults(cfg);
  int rc = ts_config_set(cfg, k, v);
  tsp_config_release(cfg);
  if (rc) return tsp_raise(rc);
  Py_RETURN_NONE;
}

/* config_yaml(pairs): the validated effective config as YAML text (what the trainer would run). */
static PyObject *py_config_yaml(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *pairs;
  if (!PyArg_ParseTuple(args, "O", &pairs)) return NULL;
  ts_config *cfg = PyMem_Malloc(sizeof *cfg);
  if (!cfg) return PyErr_NoMemory();
  char *text = NULL;
  int rc = 0;
  if (tsp_config_from_pairs(pairs, cfg)) {
    tsp_config_release(cfg);
    return NULL;
  }
  if (!(rc = ts_config_validate(cfg))) rc = ts_config_dump_string(cfg, &text);
  tsp_config_release(cfg);
  if (rc) return tsp_raise(rc);
  PyObject *r = PyUnicode_FromString(text);
  free(text);
  return r;
}

/* trace_summary(path, top): the per-op tables of a trace file (tessera profile --summary) */
static PyObject *py_trace_summary(PyObject *self, PyObject *args) {
  (void)self;
  const char *path;
  int top = 30;
  if (!PyArg_ParseTuple(args, "s|i", &path, &top)) return NULL;
  char *text = NULL;
  int rc = ts_prof_trace_summary(path, top, &text);
  if (rc) return tsp_raise(rc);
  PyObject *r = PyUnicode_FromString(text);
  free(text);
  return r;
}

static PyObject *py_version(PyObject *self, PyObject *args) {
  (void)self;
  (void)args;
  return PyUnicode_FromString(ts_version());
}

static PyMethodDef methods[] = {
    {"init", py_init, METH_NOARGS, "Starts MPI through the library (a singleton job outside mpirun)."},
    {"finalize", py_finalize, METH_NOARGS, "Finalises MPI if the library started it."},
    {"initialized", py_initialized, METH_NOARGS, "True between init and finalize."},
    {"rank_size", py_rank_size, METH_NOARGS, "(rank, size) of the job (from the launcher before init)."},
    {"barrier", py_barrier, METH_NOARGS, "Waits for every rank of the job."},
    {"set_threads", py_set_threads, METH_VARARGS, "Threads the kernels use."},
    {"check_key", py_check_key, METH_VARARGS, "Checks one config key and value; ValueError naming the key."},
    {"config_yaml", py_config_yaml, METH_VARARGS, "The validated effective config of (key, value) pairs."},
    {"version", py_version, METH_NOARGS, "Library version."},
    {"trace_summary", py_trace_summary, METH_VARARGS, "trace_summary(path, top): per-op tables of a trace."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_C", "Tessera's C API for the tessera package.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__C(void) {
  import_array();
  PyObject *m = PyModule_Create(&moddef);
  if (!m) return NULL;
  tsp_Error = PyErr_NewException("tessera._C.Error", PyExc_RuntimeError, NULL);
  if (!tsp_Error || PyModule_AddObject(m, "Error", tsp_Error)) return NULL;
  Py_INCREF(tsp_Error);
  PyTypeObject *types[] = {&tsp_BuilderType, &tsp_TrainerType, &tsp_DataType};
  const char *names[] = {"Builder", "Trainer", "Data"};
  for (int i = 0; i < 3; i++) {
    if (PyType_Ready(types[i]) < 0) return NULL;
    Py_INCREF(types[i]);
    if (PyModule_AddObject(m, names[i], (PyObject *)types[i])) return NULL;
  }
  if (PyModule_AddFunctions(m, tsp_checkpoint_methods)) return NULL;
  return m;
}
