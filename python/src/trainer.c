/* tessera._C.Trainer: a ts_trainer made from config keys and, for a model written in Python, a
 * ts_model_fn that calls back into Python (builder(Builder, x, targets|None) -> (logits, loss)).
 * Python callbacks become ts_callbacks; an exception raised in one stops training and propagates
 * out of fit(). The C calls that run long (creation, which builds and may search a plan; fit;
 * evaluate) release the GIL, and every call back into Python takes it again
 * (PyGILState_Ensure), so other Python threads run meanwhile. In a job of several ranks, a Python
 * exception that ends creation or fit on one rank ends the whole job at once (the traceback
 * printed with the rank first, then MPI_Abort, as `tessera train` does for a failed rank): its
 * peers would otherwise wait in their next collective until parallel.comm_timeout. */
#include "tsp.h"

typedef struct pycb {
  PyObject *step_end, *epoch_end, *eval_end, *train_end;
  struct pycb *next;
} pycb;

typedef struct {
  PyObject_HEAD
  ts_trainer *t;
  PyObject *build; /* the model builder (NULL: the config's zoo model) */
  pycb *cbs;
  unsigned long busy; /* the thread running a C call that released the GIL on this trainer (0: none):
                         its callbacks may use the trainer, other threads may not */
  int mode;        /* the config's ts_parallel_mode (the builder's: collectives under hybrid_parallel) */
  char plan[512];  /* auto_parallel: the plan the trainer runs, described (ts_autoplan_describe; "" otherwise) */
  int grad_only;   /* tr_step_batch as grad_batch: the gradients kept for apply_grads */
} Trainer;

/* The log hook while a trainer is created: warnings and errors are written as the default hook
 * does, information is dropped (auto_parallel's plan is read from the trainer as a value:
 * ts_trainer_autoplan). Called without the GIL: no Python here. */
static void creation_log(ts_log_level level, const char *msg, void *user) {
  (void)user;
  if (level < TS_LOG_WARN) return;
  int r, n;
  ts_job_rank(&r, &n);
  char who[48] = "";
  if (n > 1) snprintf(who, sizeof who, "[rank %d of %d] ", r, n);
  fprintf(stderr, "tessera %s: %s%s\n", level == TS_LOG_WARN ? "warning" : "error", who, msg);
  fflush(stderr);
}

/* In a job of several ranks: prints the pending Python exception (its traceback, the rank first)
 * and ends the job with MPI_Abort; returns only when the job has one rank or none is pending. */
static void abort_job_on_exception(const char *what) {
  ts_comm *w = NULL;
  if (!PyErr_Occurred() || !ts_comm_initialized() || ts_comm_world(&w) != TS_OK || ts_comm_size(w) < 2) return;
  int r = ts_comm_rank(w), n = ts_comm_size(w);
  PySys_WriteStderr("tessera: rank %d of %d: a Python exception ended %s; ending the job (MPI_Abort) so the "
                    "other ranks do not wait for the communication timeout:\n", r, n, what);
  PyErr_Print();
  tsp_abort_job();
}

static int model_fn_locked(ts_nn *nn, ts_val x, ts_val targets, const ts_model_info *info, ts_val *logits,
                           ts_val *loss, void *user);

/* Called by the library (the GIL released by the caller of ts_trainer_create*): takes it. */
static int model_fn(ts_nn *nn, ts_val x, ts_val targets, const ts_model_info *info, ts_val *logits, ts_val *loss,
                    void *user) {
  PyGILState_STATE gs = PyGILState_Ensure();
  int rc = model_fn_locked(nn, x, targets, info, logits, loss, user);
  PyGILState_Release(gs);
  return rc;
}

static int model_fn_locked(ts_nn *nn, ts_val x, ts_val targets, const ts_model_info *info, ts_val *logits,
                           ts_val *loss, void *user) {
  Trainer *self = user;
  PyObject *b = tsp_builder_new(nn, info, self->mode);
  if (!b) return tsp_pending_stash("model builder");
  PyObject *tg = targets == TS_NONE ? Py_None : PyLong_FromLong(targets);
  if (targets == TS_NONE) Py_INCREF(Py_None);
  PyObject *r = PyObject_CallFunction(self->build, "OiN", b, (int)x, tg);
  tsp_builder_close(b);
  Py_DECREF(b);
  if (!r) return tsp_pending_stash("model builder");
  int lo = -1, ls = -1;
  PyObject *l1, *l2;
  if (!PyArg_ParseTuple(r, "OO", &l1, &l2)) {
    Py_DECREF(r);
    return tsp_pending_stash("model builder");
  }
  lo = l1 == Py_None ? -1 : (int)PyLong_AsLong(l1);
  ls = l2 == Py_None ? -1 : (int)PyLong_AsLong(l2);
  Py_DECREF(r);
  if (PyErr_Occurred()) return tsp_pending_stash("model builder");
  if (logits) *logits = lo;
  if (loss) *loss = ls;
  if (targets != TS_NONE && ls < 0)
    return ts_error_set(TS_EINVAL, "model builder: the training graph has no loss (loss_fn missing?)");
  return ts_graph_status(nn->g);
}

static PyObject *step_dict(const ts_step_info *s) {
  return Py_BuildValue("{s:L,s:L,s:L,s:d,s:d,s:d,s:d,s:i,s:i,s:d,s:d,s:d}", "step", (long long)s->step, "epoch",
                       (long long)s->epoch, "batch", (long long)s->batch, "loss", s->loss, "lr", s->lr, "grad_norm",
                       s->grad_norm, "loss_scale", s->loss_scale, "overflow", s->overflow, "skipped", s->skipped,
                       "step_ms", s->step_ms, "samples_per_s", s->samples_per_s, "comm_wait_ms", s->comm_wait_ms);
}

static PyObject *eval_dict(const ts_eval_info *e) {
  return Py_BuildValue("{s:L,s:L,s:L,s:d,s:d,s:d,s:d}", "step", (long long)e->step, "epoch", (long long)e->epoch,
                       "samples", (long long)e->samples, "loss", e->loss, "top1", e->top1, "top5", e->top5,
                       "seconds", e->seconds);
}

/* Calls fn(arg) holding the GIL (arg made by mk under it); a callback whose slot was cleared
 * (clear_callbacks: an earlier Model.train's) does nothing. */
typedef PyObject *(*mkarg)(const void *);
static int call(PyObject *const *slot, mkarg mk, const void *a, const char *where) {
  PyGILState_STATE gs = PyGILState_Ensure();
  int rc = TS_OK;
  PyObject *fn = *slot;
  if (fn) {
    PyObject *arg = mk ? mk(a) : NULL, *r = NULL;
    if (!mk || arg) r = arg ? PyObject_CallFunctionObjArgs(fn, arg, NULL) : PyObject_CallNoArgs(fn);
    Py_XDECREF(arg);
    if (!r) rc = tsp_pending_stash(where);
    Py_XDECREF(r);
  }
  PyGILState_Release(gs);
  return rc;
}

static PyObject *mk_step(const void *a) { return step_dict(a); }
static PyObject *mk_eval(const void *a) { return eval_dict(a); }
static PyObject *mk_epoch(const void *a) { return PyLong_FromLongLong(*(const int64_t *)a); }

static int cb_step(ts_trainer *t, const ts_step_info *s, void *user) {
  (void)t;
  return call(&((pycb *)user)->step_end, mk_step, s, "step_end callback");
}
static int cb_eval(ts_trainer *t, const ts_eval_info *e, void *user) {
  (void)t;
  return call(&((pycb *)user)->eval_end, mk_eval, e, "eval_end callback");
}
static int cb_epoch(ts_trainer *t, int64_t epoch, void *user) {
  (void)t;
  return call(&((pycb *)user)->epoch_end, mk_epoch, &epoch, "epoch_end callback");
}
static int cb_end(ts_trainer *t, void *user) {
  (void)t;
  return call(&((pycb *)user)->train_end, NULL, NULL, "train_end callback");
}

/* Trainer(pairs, build=None) */
static int tr_init(Trainer *self, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"config", "build", "yaml", NULL};
  PyObject *pairs, *build = Py_None;
  const char *yaml = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Oz", kwl, &pairs, &build, &yaml)) return -1;
  if (self->t) {
    PyErr_SetString(PyExc_RuntimeError, "Trainer already created");
    return -1;
  }
  ts_config *cfg = PyMem_Malloc(sizeof *cfg);
  if (!cfg) {
    PyErr_NoMemory();
    return -1;
  }
  int rc;
  if (yaml) { /* the file, then the pairs as overrides (tessera train FILE --set k=v) */
    if ((rc = ts_config_load(yaml, NULL, 0, cfg))) {
      tsp_config_release(cfg);
      tsp_raise(rc);
      return -1;
    }
    PyObject *seq = PySequence_Fast(pairs, "config: expected a sequence of (key, value) pairs");
    for (Py_ssize_t i = 0; seq && i < PySequence_Fast_GET_SIZE(seq); i++) {
      const char *k, *v;
      if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "ss", &k, &v) || ((rc = ts_config_set(cfg, k, v)) &&
                                                                                !tsp_raise(rc))) {
        Py_DECREF(seq);
        tsp_config_release(cfg);
        return -1;
      }
    }
    Py_XDECREF(seq);
    if (!seq) {
      tsp_config_release(cfg);
      return -1;
    }
  } else if (tsp_config_from_pairs(pairs, cfg)) {
    tsp_config_release(cfg);
    return -1;
  }
  ts_trainer *t = NULL;
  if (build != Py_None) {
    Py_INCREF(build);
    self->build = build;
  }
  self->busy = PyThread_get_thread_ident();
  self->plan[0] = 0;
  self->mode = (int)cfg->parallel.mode;
  ts_log_set_hook(creation_log, NULL);
  Py_BEGIN_ALLOW_THREADS /* the builder (and a plan search's builds) take the GIL back */
  rc = self->build ? ts_trainer_create_custom(cfg, model_fn, self, &t) : ts_trainer_create(cfg, &t);
  Py_END_ALLOW_THREADS
  ts_log_set_hook(NULL, NULL); /* the library's default */
  self->busy = 0;
  self->t = t;
  const ts_autoplan *plan = t ? ts_trainer_autoplan(t) : NULL; /* Trainer.info()["plan"] */
  if (plan) ts_autoplan_describe(plan, self->plan, sizeof self->plan);
  tsp_config_release(cfg);
  if (tsp_pending_restore()) {
    abort_job_on_exception("building the model (construct)");
    return -1;
  }
  if (rc) {
    tsp_agree_failure(rc, "creating the trainer");
    tsp_raise(rc);
    return -1;
  }
  return 0;
}

static void tr_dealloc(Trainer *self) {
  ts_trainer *t = self->t;
  Py_BEGIN_ALLOW_THREADS /* its data pipeline's workers are joined: one may wait for the GIL (GeneratorDataset) */
  ts_trainer_free(t);
  Py_END_ALLOW_THREADS
  for (pycb *c = self->cbs, *n; c; c = n) {
    n = c->next;
    Py_XDECREF(c->step_end);
    Py_XDECREF(c->epoch_end);
    Py_XDECREF(c->eval_end);
    Py_XDECREF(c->train_end);
    PyMem_Free(c);
  }
  Py_XDECREF(self->build);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static ts_trainer *T(Trainer *self) {
  if (!self->t) {
    PyErr_SetString(PyExc_RuntimeError, "Trainer: not created");
    return NULL;
  }
  if (self->busy && self->busy != PyThread_get_thread_ident()) {
    PyErr_SetString(PyExc_RuntimeError, "Trainer: busy (fit or evaluate is running in another thread)");
    return NULL;
  }
  return self->t;
}

/* The trainer for a call that runs it (fit, evaluate): not from inside one (a callback). */
static ts_trainer *T_idle(Trainer *self) {
  if (self->busy && self->busy == PyThread_get_thread_ident()) {
    PyErr_SetString(PyExc_RuntimeError, "Trainer: fit or evaluate called from inside fit or evaluate (a callback)");
    return NULL;
  }
  return T(self);
}

/* add_callback(step_end=None, epoch_end=None, eval_end=None, train_end=None) */
static PyObject *tr_add_callback(Trainer *self, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"step_end", "epoch_end", "eval_end", "train_end", NULL};
  PyObject *f[4] = {Py_None, Py_None, Py_None, Py_None};
  if (!T(self) || !PyArg_ParseTupleAndKeywords(args, kw, "|OOOO", kwl, &f[0], &f[1], &f[2], &f[3])) return NULL;
  /* a set emptied by clear_callbacks is refilled (the trainer keeps its registration) */
  pycb *c = self->cbs;
  while (c && (c->step_end || c->epoch_end || c->eval_end || c->train_end)) c = c->next;
  int fresh = c == NULL;
  if (fresh && !(c = PyMem_Calloc(1, sizeof *c))) return PyErr_NoMemory();
  PyObject **slots[4] = {&c->step_end, &c->epoch_end, &c->eval_end, &c->train_end};
  for (int i = 0; i < 4; i++)
    if (f[i] != Py_None) {
      Py_INCREF(f[i]);
      *slots[i] = f[i];
    }
  if (!fresh) Py_RETURN_NONE;
  c->next = self->cbs;
  self->cbs = c;
  ts_callback cb = {"python", cb_step, cb_eval, cb_epoch, cb_end, c};
  int rc = ts_trainer_add_callback(self->t, &cb);
  if (rc) return tsp_raise(rc);
  Py_RETURN_NONE;
}

/* clear_callbacks(): the Python callbacks added so far are no longer called. */
static PyObject *tr_clear_callbacks(Trainer *self, PyObject *args) {
  (void)args;
  if (!T(self)) return NULL;
  for (pycb *c = self->cbs; c; c = c->next) {
    Py_CLEAR(c->step_end);
    Py_CLEAR(c->epoch_end);
    Py_CLEAR(c->eval_end);
    Py_CLEAR(c->train_end);
  }
  Py_RETURN_NONE;
}

/* set_lr_table(rates): a contiguous float32 numpy array (or buffer) of per-step learning rates
 * (ts_trainer_set_lr_table). */
static PyObject *tr_set_lr_table(Trainer *self, PyObject *args) {
  Py_buffer b;
  if (!T(self) || !PyArg_ParseTuple(args, "y*", &b)) return NULL;
  int rc = b.len % (Py_ssize_t)sizeof(float) ? ts_error_set(TS_EINVAL, "set_lr_table: %zd bytes are not float32 rates", b.len)
                                             : ts_trainer_set_lr_table(self->t, b.buf, (int64_t)(b.len / (Py_ssize_t)sizeof(float)));
  PyBuffer_Release(&b);
  if (rc) return tsp_raise(rc);
  Py_RETURN_NONE;
}

/* continue_epochs(n): the run lengthened by n epochs from where it is (ts_trainer_continue). */
static PyObject *tr_continue(Trainer *self, PyObject *args) {
  long long n;
  if (!T(self) || !PyArg_ParseTuple(args, "L", &n)) return NULL;
  int rc = ts_trainer_continue(self->t, n);
  if (rc) return tsp_raise(rc);
  Py_RETURN_NONE;
}

static PyObject *tr_fit(Trainer *self, PyObject *args) {
  (void)args;
  if (!T_idle(self)) return NULL;
  int rc;
  self->busy = PyThread_get_thread_ident();
  Py_BEGIN_ALLOW_THREADS /* callbacks take the GIL back */
  rc = ts_trainer_fit(self->t);
  Py_END_ALLOW_THREADS
  self->busy = 0;
  if (tsp_pending_restore()) {
    abort_job_on_exception("training (a callback)");
    return NULL;
  }
  if (rc) tsp_agree_failure(rc, "training (fit)");
  if (rc) return tsp_raise(rc);
  Py_RETURN_NONE;
}

static PyObject *tr_evaluate(Trainer *self, PyObject *args) {
  (void)args;
  if (!T_idle(self)) return NULL;
  ts_eval_info e;
  int rc;
  self->busy = PyThread_get_thread_ident();
  Py_BEGIN_ALLOW_THREADS
  rc = ts_trainer_evaluate(self->t, &e);
  Py_END_ALLOW_THREADS
  self->busy = 0;
  if (tsp_pending_restore()) return NULL;
  if (rc) tsp_agree_failure(rc, "evaluating");
  if (rc) return tsp_raise(rc);
  return eval_dict(&e);
}

static PyObject *tr_save(Trainer *self, PyObject *args) {
  const char *path;
  int sliced = 0;
  if (!T(self) || !PyArg_ParseTuple(args, "s|p", &path, &sliced)) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = sliced ? ts_trainer_save_sliced(self->t, path) : ts_trainer_save(self->t, path);
  Py_END_ALLOW_THREADS
  if (rc && (sliced || !ts_trainer_whole_is_local(self->t))) tsp_agree_failure(rc, "saving a checkpoint");
  if (rc) return tsp_raise(rc);
  Py_RETURN_NONE;
}

static PyObject *tr_load(Trainer *self, PyObject *args) {
  const char *path;
  int strict = 1, opt = 0;
  if (!T(self) || !PyArg_ParseTuple(args, "s|pp", &path, &strict, &opt)) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = ts_trainer_load(self->t, path, strict, opt);
  Py_END_ALLOW_THREADS
  if (rc && (ts_ckpt_is_sliced(path) || !ts_trainer_whole_is_local(self->t))) tsp_agree_failure(rc, "loading a checkpoint");
  if (rc) return tsp_raise(rc);
  Py_RETURN_NONE;
}

static PyObject *tr_request_stop(Trainer *self, PyObject *args) {
  (void)args;
  if (!T(self)) return NULL;
  ts_trainer_request_stop(self->t);
  Py_RETURN_NONE;
}

/* params(): {name: numpy view of this rank's values in the store} (no copy; valid while the
 * trainer lives; the arrays keep it alive). States (BatchNorm running statistics) included. */
static PyObject *tr_params(Trainer *self, PyObject *args) {
  (void)args;
  if (!T(self)) return NULL;
  ts_params *p = ts_trainer_params(self->t);
  PyObject *d = PyDict_New();
  if (!d) return NULL;
  for (int i = 0; i < ts_params_count(p); i++) {
    float *ptr = ts_params_ptr(p, i);
    if (!ptr) continue; /* ZeRO-3: the rank holds a shard elsewhere */
    ts_shape s = ts_params_shape(p, i);
    PyObject *a = tsp_array_view(TS_F32, &s, ptr, (PyObject *)self);
    if (!a || PyDict_SetItemString(d, ts_params_name(p, i), a)) {
      Py_XDECREF(a);
      Py_DECREF(d);
      return NULL;
    }
    Py_DECREF(a);
  }
  return d;
}

static PyObject *tr_info(Trainer *self, PyObject *args) {
  (void)args;
  if (!T(self)) return NULL;
  return Py_BuildValue("{s:i,s:i,s:L,s:L,s:L,s:L,s:s}", "rank", ts_trainer_rank(self->t), "world_size",
                       ts_trainer_world_size(self->t), "step", (long long)ts_trainer_step(self->t), "num_params",
                       (long long)ts_trainer_num_params(self->t), "steps_per_epoch",
                       (long long)ts_trainer_steps_per_epoch(self->t), "lr_steps",
                       (long long)ts_trainer_lr_steps(self->t), "plan", self->plan);
}

/* layouts(): {name: (device matrix, tensor map (MindSpore's: axes counted from the right, -1
 * replicated), slice shape, full shape)} of the trainable parameters, as this rank holds them */
static PyObject *tr_layouts(Trainer *self, PyObject *args) {
  (void)args;
  if (!T(self)) return NULL;
  ts_params *p = ts_trainer_params(self->t);
  int N = ts_trainer_world_size(self->t);
  PyObject *d = PyDict_New();
  for (int i = 0; d && i < ts_params_count(p); i++) {
    ts_shape ls = ts_params_shape(p, i), gs = ts_params_global_shape(p, i);
    const ts_layout *L = ts_params_is_sharded(p, i) ? ts_params_layout(p, i) : NULL;
    int ms[TS_MAX_DIMS];
    PyObject *dev, *tm, *o;
    if (L) {
      ts_layout_tmap_to_mindspore(L->ndev, L->ndim, L->tmap, ms);
      dev = PyList_New(L->ndev);
      for (int k = 0; dev && k < L->ndev; k++) PyList_SET_ITEM(dev, k, PyLong_FromLong(L->dev[k]));
    } else {
      for (int k = 0; k < gs.ndim; k++) ms[k] = -1;
      dev = Py_BuildValue("[i]", N);
    }
    tm = PyList_New(gs.ndim);
    for (int k = 0; tm && k < gs.ndim; k++) PyList_SET_ITEM(tm, k, PyLong_FromLong(ms[k]));
    o = dev && tm ? Py_BuildValue("(OONN)", dev, tm, tsp_shape_to_tuple(&ls), tsp_shape_to_tuple(&gs)) : NULL;
    Py_XDECREF(dev);
    Py_XDECREF(tm);
    if (!o || PyDict_SetItemString(d, ts_params_name(p, i), o)) {
      Py_XDECREF(o);
      Py_DECREF(d);
      return NULL;
    }
    Py_DECREF(o);
  }
  return d;
}

/* step_batch(x, labels) -> step dict: one optimizer step on this rank's rows (numpy arrays of the
 * model's sample dtype and shape, and int32 labels / targets, or float32 targets: a regression) */
static PyObject *tr_step_batch(Trainer *self, PyObject *args) {
  PyObject *xo, *yo;
  if (!T_idle(self) || !PyArg_ParseTuple(args, "OO", &xo, &yo)) return NULL;
  PyArrayObject *x = (PyArrayObject *)PyArray_FROM_OF(xo, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
  int yf = PyArray_Check(yo) && PyArray_ISFLOAT((PyArrayObject *)yo); /* float targets stay float32 */
  PyArrayObject *y = x ? (PyArrayObject *)PyArray_FROMANY(yo, yf ? NPY_FLOAT32 : NPY_INT32, 0, 0,
                                                          NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED)
                       : NULL;
  ts_batch b;
  memset(&b, 0, sizeof b);
  ts_dtype dt;
  int rc = TS_OK;
  if (!x || !y) goto fail;
  if (tsp_dtype_from_npy(PyArray_TYPE(x), &dt)) {
    PyErr_SetString(PyExc_ValueError, "step: the input's dtype has no Tessera dtype");
    goto fail;
  }
  b.data.dtype = dt;
  b.data.shape.ndim = PyArray_NDIM(x);
  for (int k = 0; k < b.data.shape.ndim && k < TS_MAX_DIMS; k++) b.data.shape.dims[k] = PyArray_DIM(x, k);
  b.data.data = PyArray_DATA(x);
  b.size = b.data.shape.ndim ? (int)b.data.shape.dims[0] : 0;
  b.labels.dtype = b.target.dtype = yf ? TS_F32 : TS_I32;
  b.labels.shape.ndim = b.target.shape.ndim = PyArray_NDIM(y);
  for (int k = 0; k < PyArray_NDIM(y) && k < TS_MAX_DIMS; k++) b.labels.shape.dims[k] = b.target.shape.dims[k] = PyArray_DIM(y, k);
  b.labels.data = b.target.data = PyArray_DATA(y);
  if (PyArray_NDIM(y) < 1 || PyArray_DIM(y, 0) != b.size) {
    PyErr_Format(PyExc_ValueError, "step: %d samples but labels of %d rows", b.size,
                 PyArray_NDIM(y) ? (int)PyArray_DIM(y, 0) : 0);
    goto fail;
  }
  ts_step_info info;
  self->busy = PyThread_get_thread_ident();
  Py_BEGIN_ALLOW_THREADS
  rc = self->grad_only ? ts_trainer_grad_batch(self->t, &b, &info) : ts_trainer_step_batch(self->t, &b, &info);
  Py_END_ALLOW_THREADS
  self->busy = 0;
  Py_DECREF(x);
  Py_DECREF(y);
  if (tsp_pending_restore()) {
    abort_job_on_exception("training (a callback)");
    return NULL;
  }
  if (rc) {
    if (rc != TS_ESHAPE) tsp_agree_failure(rc, "a training step");
    return tsp_raise(rc);
  }
  return step_dict(&info);
fail:
  Py_XDECREF(x);
  Py_XDECREF(y);
  return NULL;
}

/* grad_batch(x, labels) -> step dict (its loss): forward, backward and the gradient reduction of
 * one step, the gradients kept for apply_grads (ts_trainer_grad_batch) */
static PyObject *tr_grad_batch(Trainer *self, PyObject *args) {
  self->grad_only = 1;
  PyObject *r = tr_step_batch(self, args);
  self->grad_only = 0;
  return r;
}

/* apply_grads() -> step dict: the pending gradients applied (ts_trainer_apply_grads) */
static PyObject *tr_apply_grads(Trainer *self, PyObject *args) {
  (void)args;
  if (!T_idle(self)) return NULL;
  ts_step_info info;
  int rc;
  self->busy = PyThread_get_thread_ident();
  Py_BEGIN_ALLOW_THREADS
  rc = ts_trainer_apply_grads(self->t, &info);
  Py_END_ALLOW_THREADS
  self->busy = 0;
  if (tsp_pending_restore()) {
    abort_job_on_exception("training (a callback)");
    return NULL;
  }
  if (rc) {
    if (rc != TS_EINVAL) tsp_agree_failure(rc, "a training step");
    return tsp_raise(rc);
  }
  return step_dict(&info);
}

/* forward(x) -> logits: the evaluation graph on x (numpy, n samples of the model's shape), in
 * pieces of the evaluation batch */
static PyObject *tr_forward(Trainer *self, PyObject *args) {
  PyObject *xo;
  if (!T_idle(self) || !PyArg_ParseTuple(args, "O", &xo)) return NULL;
  PyArrayObject *x = (PyArrayObject *)PyArray_FROM_OF(xo, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
  if (!x) return NULL;
  ts_shape ss;
  ts_dtype sd, xd;
  ts_trainer_sample(self->t, &ss, &sd);
  int same = !tsp_dtype_from_npy(PyArray_TYPE(x), &xd) && xd == sd && PyArray_NDIM(x) == ss.ndim + 1;
  for (int k = 0; same && k < ss.ndim; k++) same = PyArray_DIM(x, k + 1) == ss.dims[k];
  if (!same) {
    char want[96];
    ts_shape_str(&ss, want, sizeof want);
    PyErr_Format(PyExc_ValueError, "predict: expected samples of shape (n, %s and dtype %s (the network's input), "
                 "got an array of %d dimensions and numpy type %d", want + 1, ts_dtype_name(sd), PyArray_NDIM(x),
                 PyArray_TYPE(x));
    Py_DECREF(x);
    return NULL;
  }
  int64_t n = PyArray_NDIM(x) ? PyArray_DIM(x, 0) : 0, eb = ts_trainer_forward_batch(self->t);
  size_t per = ts_trainer_logits_per_sample(self->t);
  size_t row = n ? (size_t)PyArray_NBYTES(x) / (size_t)n : 0;
  npy_intp dims[2] = {(npy_intp)n, (npy_intp)per};
  PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_FLOAT32);
  if (!out) {
    Py_DECREF(x);
    return NULL;
  }
  int rc = TS_OK;
  const char *src = PyArray_DATA(x);
  float *dst = PyArray_DATA(out);
  self->busy = PyThread_get_thread_ident();
  Py_BEGIN_ALLOW_THREADS
  for (int64_t i = 0; i < n && !rc; i += eb) {
    int64_t k = n - i < eb ? n - i : eb;
    rc = ts_trainer_forward(self->t, src + (size_t)i * row, k, dst + (size_t)i * per, per * (size_t)k);
  }
  Py_END_ALLOW_THREADS
  self->busy = 0;
  Py_DECREF(x);
  if (rc) {
    Py_DECREF(out);
    tsp_agree_failure(rc, "a forward pass");
    return tsp_raise(rc);
  }
  return (PyObject *)out;
}

static PyMethodDef tmethods[] = {
    {"add_callback", (PyCFunction)(void (*)(void))tr_add_callback, METH_VARARGS | METH_KEYWORDS, NULL},
    {"clear_callbacks", (PyCFunction)tr_clear_callbacks, METH_NOARGS, NULL},
    {"continue_epochs", (PyCFunction)tr_continue, METH_VARARGS, NULL},
    {"set_lr_table", (PyCFunction)tr_set_lr_table, METH_VARARGS, NULL},
    {"fit", (PyCFunction)tr_fit, METH_NOARGS, NULL},
    {"evaluate", (PyCFunction)tr_evaluate, METH_NOARGS, NULL},
    {"save", (PyCFunction)tr_save, METH_VARARGS, NULL},
    {"load", (PyCFunction)tr_load, METH_VARARGS, NULL},
    {"request_stop", (PyCFunction)tr_request_stop, METH_NOARGS, NULL},
    {"params", (PyCFunction)tr_params, METH_NOARGS, NULL},
    {"info", (PyCFunction)tr_info, METH_NOARGS, NULL},
    {"layouts", (PyCFunction)tr_layouts, METH_NOARGS, NULL},
    {"step_batch", (PyCFunction)tr_step_batch, METH_VARARGS, NULL},
    {"grad_batch", (PyCFunction)tr_grad_batch, METH_VARARGS, NULL},
    {"apply_grads", (PyCFunction)tr_apply_grads, METH_NOARGS, NULL},
    {"forward", (PyCFunction)tr_forward, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

PyTypeObject tsp_TrainerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tessera._C.Trainer",
    .tp_basicsize = sizeof(Trainer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Trainer(config_pairs, build=None): ts_trainer_create[_custom].",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)tr_init,
    .tp_dealloc = (destructor)tr_dealloc,
    .tp_methods = tmethods,
};
