/* Checkpoints as dicts of numpy arrays: safetensors files read with ts_st_open (the arrays are
 * views into the file's memory, no copy; they keep it open), written with ts_st_writer (atomic:
 * temporary file, fsync, rename), and sliced checkpoints merged with ts_ckpt_merge. */
#include "tsp.h"

static void close_file(PyObject *cap) { ts_st_close(PyCapsule_GetPointer(cap, "tessera.st_file")); }

/* st_load(path) -> (tensors, metadata, is_mindspore): is_mindspore, the reader's own verdict
 * (ts_st_is_mindspore: a MindSpore .ckpt rather than a safetensors file) */
static PyObject *py_st_load(PyObject *self, PyObject *args) {
  (void)self;
  const char *path;
  if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
  ts_st_file *f;
  int rc = ts_st_open(path, &f);
  if (rc) return tsp_raise(rc);
  PyObject *cap = PyCapsule_New(f, "tessera.st_file", close_file);
  if (!cap) {
    ts_st_close(f);
    return NULL;
  }
  PyObject *d = PyDict_New(), *meta = PyDict_New();
  if (!d || !meta) goto fail;
  for (int i = 0; i < ts_st_count(f); i++) {
    ts_tensor v;
    if ((rc = ts_st_get(f, i, &v))) {
      tsp_raise(rc);
      goto fail;
    }
    PyObject *a = tsp_array_view(v.dtype, &v.shape, v.data, cap);
    if (!a || PyDict_SetItemString(d, ts_st_name(f, i), a)) {
      Py_XDECREF(a);
      goto fail;
    }
    Py_DECREF(a);
  }
  for (int i = 0; i < ts_st_meta_count(f); i++) {
    const char *k = ts_st_meta_key(f, i);
    PyObject *s = PyUnicode_FromString(ts_st_meta(f, k));
    if (!s || PyDict_SetItemString(meta, k, s)) {
      Py_XDECREF(s);
      goto fail;
    }
    Py_DECREF(s);
  }
  Py_DECREF(cap);
  return Py_BuildValue("NNO", d, meta, ts_st_is_mindspore(f) ? Py_True : Py_False);
fail:
  Py_XDECREF(d);
  Py_XDECREF(meta);
  Py_DECREF(cap);
  return NULL;
}

/* st_save(path, tensors, metadata) */
static PyObject *py_st_save(PyObject *self, PyObject *args) {
  (void)self;
  const char *path;
  PyObject *tensors, *meta;
  if (!PyArg_ParseTuple(args, "sO!O!", &path, &PyDict_Type, &tensors, &PyDict_Type, &meta)) return NULL;
  ts_st_writer *w;
  int rc = ts_st_writer_create(&w);
  if (rc) return tsp_raise(rc);
  PyObject *keep = PyList_New(0), *k, *v;
  Py_ssize_t pos = 0;
  if (!keep) goto fail;
  while (PyDict_Next(tensors, &pos, &k, &v)) {
    const char *name = PyUnicode_AsUTF8(k);
    if (!name) goto fail;
    PyArrayObject *a = (PyArrayObject *)PyArray_FROM_OF(v, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
    if (!a) goto fail;
    PyList_Append(keep, (PyObject *)a);
    Py_DECREF(a);
    ts_dtype dt;
    if (tsp_dtype_from_npy(PyArray_TYPE(a), &dt)) {
      PyErr_Format(PyExc_ValueError, "save_checkpoint: tensor '%s': dtype %R has no safetensors type here (float32, "
                   "float16, int32, int64, uint8; uint16 = bf16 bits)", name, (PyObject *)PyArray_DESCR(a));
      goto fail;
    }
    ts_shape s = {PyArray_NDIM(a), {0}};
    if (s.ndim > TS_MAX_DIMS) {
      PyErr_Format(PyExc_ValueError, "save_checkpoint: tensor '%s' has %d dims (at most %d)", name, s.ndim, TS_MAX_DIMS);
      goto fail;
    }
    for (int i = 0; i < s.ndim; i++) s.dims[i] = PyArray_DIM(a, i);
    if ((rc = ts_st_writer_add(w, name, dt, s, PyArray_DATA(a)))) {
      tsp_raise(rc);
      goto fail;
    }
  }
  pos = 0;
  while (PyDict_Next(meta, &pos, &k, &v)) {
    const char *ks = PyUnicode_AsUTF8(k), *vs = PyUnicode_AsUTF8(v);
    if (!ks || !vs) goto fail;
    if ((rc = ts_st_writer_set_meta(w, ks, vs))) {
      tsp_raise(rc);
      goto fail;
    }
  }
  rc = ts_st_write(w, path);
  ts_st_writer_free(w);
  Py_DECREF(keep);
  if (rc) return tsp_raise(rc);
  Py_RETURN_NONE;
fail:
  ts_st_writer_free(w);
  Py_XDECREF(keep);
  return NULL;
}

/* ckpt_merge(dir, out): the whole checkpoint of a sliced checkpoint directory */
static PyObject *py_ckpt_merge(PyObject *self, PyObject *args) {
  (void)self;
  const char *dir, *out;
  if (!PyArg_ParseTuple(args, "ss", &dir, &out)) return NULL;
  int rc = ts_ckpt_merge(dir, out, NULL);
  if (rc) return tsp_raise(rc);
  Py_RETURN_NONE;
}

static PyObject *py_ckpt_is_sliced(PyObject *self, PyObject *args) {
  (void)self;
  const char *p;
  if (!PyArg_ParseTuple(args, "s", &p)) return NULL;
  return PyBool_FromLong(ts_ckpt_is_sliced(p));
}

/* ckpt_resolve(path): the checkpoint "<dir>/latest" names, or path itself (ts_ckpt_resolve) */
static PyObject *py_ckpt_resolve(PyObject *self, PyObject *args) {
  (void)self;
  const char *p;
  if (!PyArg_ParseTuple(args, "s", &p)) return NULL;
  char buf[4096];
  int rc = ts_ckpt_resolve(p, buf, sizeof buf);
  if (rc < 0) return tsp_raise(rc);
  return PyUnicode_FromString(buf);
}

PyMethodDef tsp_checkpoint_methods[] = {
    {"ckpt_resolve", py_ckpt_resolve, METH_VARARGS, "ckpt_resolve(path): the checkpoint DIR/latest names, else path"},
    {"st_load", py_st_load, METH_VARARGS, "st_load(path) -> (tensors as numpy views, metadata, is_mindspore)"},
    {"st_save", py_st_save, METH_VARARGS, "st_save(path, tensors, metadata): atomic safetensors write"},
    {"ckpt_merge", py_ckpt_merge, METH_VARARGS, "ckpt_merge(dir, out): merge a sliced checkpoint"},
    {"ckpt_is_sliced", py_ckpt_is_sliced, METH_VARARGS, "True for a sliced checkpoint directory"},
    {NULL, NULL, 0, NULL}};
