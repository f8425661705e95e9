/* tessera._C.Data: one pass over a data set as the trainer reads it (the source of the config's
 * data.* keys, its transform list, a distributed sampler for the shard), batch by batch as
 * numpy arrays (copies: a pipeline's batch lives until the next one). */
#include "tsp.h"

typedef struct {
  PyObject_HEAD
  ts_source *train, *test;
  ts_pipeline *pipe;
  ts_transform tf[TS_CFG_MAX_TRANSFORMS];
  int64_t batches;
} Data;

static void da_free(Data *self) {
  ts_pipeline_free(self->pipe);
  ts_source_free(self->train);
  ts_source_free(self->test);
  self->pipe = NULL;
  self->train = self->test = NULL;
}

/* Data(pairs, usage_train, batch, num_shards, shard_id, shuffle, drop_remainder, seed, epoch) */
static int da_init(Data *self, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"config", "train", "batch", "num_shards", "shard_id", "shuffle", "drop_remainder",
                        "seed", "epoch", NULL};
  PyObject *pairs;
  int train = 1, batch = 1, shards = 1, shard = 0, shuffle = 0, drop = 0;
  unsigned long long seed = 1;
  long long epoch = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|piiippKL", kwl, &pairs, &train, &batch, &shards, &shard, &shuffle,
                                   &drop, &seed, &epoch))
    return -1;
  da_free(self);
  ts_config *cfg = PyMem_Malloc(sizeof *cfg);
  if (!cfg) {
    PyErr_NoMemory();
    return -1;
  }
  int rc = 0, ntf = 0;
  if (tsp_config_from_pairs(pairs, cfg)) {
    tsp_config_release(cfg);
    return -1;
  }
  if (!(rc = ts_config_validate(cfg)) && !(rc = ts_config_sources(cfg, &self->train, &self->test))) {
    ntf = ts_config_transforms(cfg, train, self->tf, TS_CFG_MAX_TRANSFORMS);
    if (ntf < 0) rc = ntf;
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
    pc.sampler.kind = TS_SAMPLER_DISTRIBUTED;
    pc.sampler.shuffle = shuffle;
    pc.sampler.num_shards = shards;
    pc.sampler.shard_id = shard;
    pc.sampler.drop_last = 0;
    rc = ts_pipeline_create(&pc, &self->pipe);
    if (!rc) {
      self->batches = ts_pipeline_batches_per_epoch(self->pipe);
      if (epoch > 0) rc = ts_pipeline_seek(self->pipe, epoch, 0);
    }
  }
  if (rc) {
    da_free(self);
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
  int rc = ts_pipeline_next(self->pipe, &b);
  if (rc) return tsp_raise(rc);
  if (b.size == 0) return NULL; /* StopIteration */
  PyObject *x = tsp_array_copy(&b.data), *y = tsp_array_copy(&b.labels);
  if (!x || !y) {
    Py_XDECREF(x);
    Py_XDECREF(y);
    return NULL;
  }
  return Py_BuildValue("NN", x, y);
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

static PyMethodDef dmethods[] = {{"batches", (PyCFunction)da_len, METH_NOARGS, "batches per epoch of this shard"},
                                 {"source_len", (PyCFunction)da_source_len, METH_VARARGS, "samples in the split"},
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
