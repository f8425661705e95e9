/* tessera._C: the CPython extension behind the `tessera` package (python/tessera/). One file per
 * area: module.c (context: MPI, config keys, errors), graph.c (the graph builder a Python Cell's
 * construct records into), trainer.c (model/trainer, callbacks), data.c (data sets iterated to
 * numpy), checkpoint.c (safetensors <-> dicts of numpy arrays), tensor.c (ts_tensor <-> numpy).
 * Thin by design: every call goes to Tessera's public C API; no training logic lives here. */
#ifndef TSP_H
#define TSP_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tsp_ARRAY_API
#ifndef TSP_MAIN
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#include "tessera/checkpoint.h"
#include "tessera/comm.h"
#include "tessera/config.h"
#include "tessera/io.h"
#include "tessera/tessera.h"
#include "tessera/train.h"
#include "tessera/zoo.h"

/* module.c: raises the Python exception for a Tessera status (ValueError for configuration,
 * shape and argument errors, FileNotFoundError / OSError for files, tessera._C.Error otherwise)
 * with ts_last_error()'s message; returns NULL. */
PyObject *tsp_raise(int rc);
extern PyObject *tsp_Error;
/* A Python exception raised inside a C callback (model builder, trainer callback) is kept here
 * while the C call unwinds, then re-raised by tsp_pending_restore (returns 1 if it did). */
int tsp_pending_stash(const char *where);
int tsp_pending_restore(void);
/* After a call that is collective over the job's ranks (trainer creation, fit, evaluate, save,
 * load) failed with rc on this rank: waits up to min(parallel.comm_timeout, 10 s) for every other
 * rank to report a failure too (a configuration error fails on each alike: returns, the message
 * kept, and the caller raises); a rank that fails alone prints the rank and the message and ends
 * the job with MPI_Abort, as the others would otherwise wait in the call's collectives until the
 * communication timeout. Nothing in a job of one rank or before init(). */
void tsp_agree_failure(int rc, const char *what);
/* Flushes Python's and C's stdout and stderr, then ends the whole job (MPI_Abort; nothing when
 * MPI is not up). */
void tsp_abort_job(void);
/* A ts_config from a list of (key, YAML value) pairs over the defaults; not validated. */
int tsp_config_from_pairs(PyObject *pairs, ts_config *cfg);
/* Frees a PyMem_Malloc'd config and the lists it owns (ts_config_free). */
void tsp_config_release(ts_config *cfg);

/* tensor.c */
int tsp_npy_type(ts_dtype dt);
int tsp_dtype_from_npy(int npy, ts_dtype *out);
/* A numpy array viewing data (no copy) that keeps `owner` alive. */
PyObject *tsp_array_view(ts_dtype dt, const ts_shape *shape, void *data, PyObject *owner);
/* A numpy array holding a copy of t. */
PyObject *tsp_array_copy(const ts_tensor *t);
int tsp_shape_from_seq(PyObject *seq, ts_shape *out);
PyObject *tsp_shape_to_tuple(const ts_shape *s);

/* graph.c */
extern PyTypeObject tsp_BuilderType;
/* mode: the job's ts_parallel_mode (what the model may record: collectives under hybrid_parallel) */
PyObject *tsp_builder_new(ts_nn *nn, const ts_model_info *info, int mode);
void tsp_builder_close(PyObject *b);
/* trainer.c, data.c, checkpoint.c */
extern PyTypeObject tsp_TrainerType;
extern PyTypeObject tsp_DataType;
extern PyMethodDef tsp_checkpoint_methods[];

#endif
