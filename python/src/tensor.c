/* Tessera tensors <-> numpy arrays: views without copies where the memory outlives the array
 * through its base object, copies otherwise. bf16 has no numpy type: it is shown as uint16. */
#include "tsp.h"

int tsp_npy_type(ts_dtype dt) {
  switch (dt) {
    case TS_F32: return NPY_FLOAT32;
    case TS_BF16: return NPY_UINT16;
    case TS_F16: return NPY_FLOAT16;
    case TS_I32: return NPY_INT32;
    case TS_I64: return NPY_INT64;
    case TS_U8: return NPY_UINT8;
    default: return -1;
  }
}

int tsp_dtype_from_npy(int npy, ts_dtype *out) {
  switch (npy) {
    case NPY_FLOAT32: *out = TS_F32; return 0;
    case NPY_FLOAT16: *out = TS_F16; return 0;
    case NPY_INT32: *out = TS_I32; return 0;
    case NPY_INT64: *out = TS_I64; return 0;
    case NPY_UINT8: *out = TS_U8; return 0;
    case NPY_UINT16: *out = TS_BF16; return 0;
    default: return -1;
  }
}

PyObject *tsp_array_view(ts_dtype dt, const ts_shape *shape, void *data, PyObject *owner) {
  npy_intp dims[TS_MAX_DIMS];
  for (int i = 0; i < shape->ndim; i++) dims[i] = (npy_intp)shape->dims[i];
  PyObject *a = PyArray_SimpleNewFromData(shape->ndim, dims, tsp_npy_type(dt), data);
  if (!a) return NULL;
  Py_INCREF(owner);
  if (PyArray_SetBaseObject((PyArrayObject *)a, owner) < 0) {
    Py_DECREF(a);
    return NULL;
  }
  return a;
}

PyObject *tsp_array_copy(const ts_tensor *t) {
  npy_intp dims[TS_MAX_DIMS];
  for (int i = 0; i < t->shape.ndim; i++) dims[i] = (npy_intp)t->shape.dims[i];
  PyObject *a = PyArray_SimpleNew(t->shape.ndim, dims, tsp_npy_type(t->dtype));
  if (!a) return NULL;
  if (t->data) memcpy(PyArray_DATA((PyArrayObject *)a), t->data, ts_tensor_nbytes(t));
  return a;
}

int tsp_shape_from_seq(PyObject *seq, ts_shape *out) {
  PyObject *f = PySequence_Fast(seq, "shape: expected a sequence of ints");
  if (!f) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(f);
  if (n > TS_MAX_DIMS) {
    Py_DECREF(f);
    PyErr_Format(PyExc_ValueError, "shape: %zd dims, at most %d", n, TS_MAX_DIMS);
    return -1;
  }
  out->ndim = (int)n;
  for (Py_ssize_t i = 0; i < n; i++) {
    out->dims[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(f, i));
    if (out->dims[i] == -1 && PyErr_Occurred()) {
      Py_DECREF(f);
      return -1;
    }
  }
  Py_DECREF(f);
  return 0;
}

PyObject *tsp_shape_to_tuple(const ts_shape *s) {
  PyObject *t = PyTuple_New(s->ndim);
  if (!t) return NULL;
  for (int i = 0; i < s->ndim; i++) PyTuple_SET_ITEM(t, i, PyLong_FromLongLong(s->dims[i]));
  return t;
}
