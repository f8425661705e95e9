"""tessera.dataset.GeneratorDataset: MindSpore 2.x's data set over a source written in Python.

The source is a random-access object (__getitem__ and __len__, e.g. a class over numpy arrays, a
list of tuples), an iterable (a class with __iter__, a Python generator) or a generator function.
An iterable is read once, the first time the data set is used, into a list of rows (Tessera's
pipeline reads by index: shuffling, sharding and seeking need it); a random-access source is read
by index as the pipeline asks.

The data set is a C source behind the same pipeline and trainer as the built-in ones: the
pipeline's worker threads call into Python for each sample (taking the GIL per sample), get the
source's row, run the Python functions given to map on it, and hand the result to the C side,
which applies the vision.* transforms, shuffles, shards and batches as for any other data set.
So a GeneratorDataset shuffles, shards (num_shards / shard_id, the job's size and rank) and is
ordered exactly as a file data set of the same samples is (tested against the IDX files of the
same arrays under mpirun -n 2: bitwise the same losses).

Columns: the first column is the data (the network's input); a second one is the label when it
is one integer per sample (class ids, int32 batches), else a target tensor. Values must be
float32, float16, int32, int64 or uint8 numpy arrays (or Python ints); float64 is refused with a
message (Tessera has no float64 tensors). More than two columns: project() two.

Python functions in map run before the vision.* transforms of the data column (the C pipeline
applies those after the sample leaves Python): a Python function on the data column after a
vision.* transform is refused. They must be deterministic functions of their inputs (Tessera's
order and augmentation are reproducible bit for bit; a function drawing from numpy's global
random state is not, and with several workers its draws interleave)."""
import copy
import itertools
import threading

import numpy as np

from .. import _C
from . import _check_common, _check_kw, _cols, _Dataset
from ._op import Op
from .transforms import Compose, TypeCast

__all__ = ["GeneratorDataset"]

_names = itertools.count(1)
_OK = {np.dtype(t) for t in (np.float32, np.float16, np.int32, np.int64, np.uint8)}


def _hint(dt):
    if dt == np.float64:
        return ".astype(np.float32)"
    if dt == np.bool_:
        return ".astype(np.uint8)"
    if dt.kind in "iu":
        return ".astype(np.int32) (or int64)"
    return "a numeric array"


def _tensor(v, col, i):
    if v.dtype not in _OK:
        raise ValueError("GeneratorDataset: sample %d: column '%s' is %s: Tessera's tensors are float32, float16, "
                         "int32, int64 or uint8 (return %s from the source or a map function)"
                         % (i, col, v.dtype, _hint(v.dtype)))
    if v.ndim > 7:
        raise ValueError("GeneratorDataset: sample %d: column '%s' has %d dimensions (at most 7)" % (i, col, v.ndim))
    return np.ascontiguousarray(v)


class _Source:
    """The user's source read by index (an iterable: once, into a list)."""

    def __init__(self, source):
        self.obj = source
        self.random = hasattr(source, "__getitem__") and hasattr(source, "__len__")
        if not self.random and not hasattr(source, "__iter__") and not callable(source):
            raise TypeError("GeneratorDataset: source %r is neither random-access (__getitem__ and __len__), "
                            "iterable, nor a generator function" % (source,))
        self.what = getattr(source, "__name__", None) or type(source).__name__
        self._rows = None
        self.lock = threading.RLock()
        self.registered = {}  # pipeline (Python ops, projection) -> _Registration

    def rows(self):
        with self.lock:
            if self._rows is None:
                it = iter(self.obj) if hasattr(self.obj, "__iter__") else iter(self.obj())
                self._rows = list(it)
            return self._rows

    def __len__(self):
        return len(self.obj) if self.random else len(self.rows())

    def fetch(self, i):
        return self.obj[i] if self.random else self.rows()[i]


class _Rows:
    """rows(i) for the C source: row i of the source through the Python map functions, as
    (data, label, target or None)."""

    def __init__(self, src, columns, types, pyops, project):
        self.src, self.columns, self.types, self.pyops, self.project = src, columns, types, pyops, project
        # the columns are the same for every row: each map's inputs and the columns after it, as
        # positions, worked out once (_apply_cols on names) instead of by name for every sample
        names, self._plan = list(columns), []
        for fn, ic, oc in pyops:
            tagged = [("v", k) for k in range(len(names))]
            after_names, after = _apply_cols(names, tagged, ic, oc, [("o", k) for k in range(len(oc))])
            self._plan.append((fn, [names.index(c) for c in ic], oc,
                               [(src_ == "o", k) for src_, k in after]))
            names = after_names
        self._names = names
        self._project = [names.index(c) for c in project] if project else None

    def row(self, i):
        raw = self.src.fetch(i)
        vals = list(raw) if isinstance(raw, tuple) else [raw]
        if len(vals) != len(self.columns):
            raise ValueError("GeneratorDataset: row %d of the source has %d column(s) but column_names %r has %d "
                             "(a row is a tuple of columns)" % (i, len(vals), self.columns, len(self.columns)))
        vals = [np.asarray(v) for v in vals]
        if self.types:
            for n, v, t in zip(self.columns, vals, self.types):
                if t is not None and v.dtype != t:
                    raise ValueError("GeneratorDataset: row %d: column '%s' is %s, column_types says %s"
                                     % (i, n, v.dtype, t))
        for fn, ins, oc, layout in self._plan:
            res = fn(*[vals[k] for k in ins])
            res = list(res) if isinstance(res, tuple) else [res]
            if len(res) != len(oc):
                raise ValueError("GeneratorDataset: map: %s returned %d value(s) for the %d column(s) %r"
                                 % (getattr(fn, "__name__", repr(fn)), len(res), len(oc), oc))
            res = [np.asarray(r) for r in res]
            vals = [res[k] if out else vals[k] for out, k in layout]
        if self._project is not None:
            return list(self.project), [vals[k] for k in self._project]
        return list(self._names), vals

    def __call__(self, i):
        names, vals = self.row(i)
        data, label, target = _tensor(vals[0], names[0], i), -1, None
        if len(vals) > 1:
            v = vals[1]
            if v.dtype.kind in "iu" and v.size == 1 and v.ndim <= 1:
                label = int(v.reshape(-1)[0])
            else:
                target = _tensor(v, names[1], i)
        return data, label, target

    def num_classes(self):
        """Max label + 1 over the source (asked by the trainer for a network with no class count)."""
        top = -1
        for i in range(len(self.src)):
            names, vals = self.row(i)
            if len(vals) > 1 and vals[1].dtype.kind in "iu" and vals[1].size == 1:
                top = max(top, int(vals[1].reshape(-1)[0]))
        return top + 1


def _apply_cols(names, vals, ic, oc, outs):
    """The columns after an operation read ic and wrote oc: the outputs in place of the inputs (at
    the first input's position), the other columns as they were."""
    pos = min(names.index(c) for c in ic)
    before = [(n, v) for n, v in zip(names[:pos], vals[:pos]) if n not in ic]
    after = [(n, v) for n, v in zip(names[pos:], vals[pos:]) if n not in ic and n not in oc]
    before = [(n, v) for n, v in before if n not in oc]
    cols = before + list(zip(oc, outs)) + after
    return [n for n, _ in cols], [v for _, v in cols]


class _Registration:
    """A source registered with the library under a name (the config's split "source:NAME") for
    as long as this object lives; a trainer that looked it up keeps its own reference."""

    def __init__(self, rows, n, what):
        self.name = "generator-%d" % next(_names)
        _C.Data.register_source(self.name, rows, n, what)

    def __del__(self):
        try:
            _C.Data.unregister_source(self.name)
        except Exception:  # interpreter shutdown
            pass


class GeneratorDataset(_Dataset):
    """mindspore.dataset.GeneratorDataset(source, column_names, column_types=None, schema=None,
    num_samples=None, num_parallel_workers=1, shuffle=None, sampler=None, num_shards=None,
    shard_id=None, python_multiprocessing=True, max_rowsize=6).

    shuffle: None = shuffled for a random-access source, in order for an iterable (MindSpore's);
    num_samples: the first N samples (data.train_limit; MindSpore with shuffle takes a random N);
    num_shards / shard_id: the job's size and this rank, as for every data set;
    num_parallel_workers: the pipeline's threads (data.num_workers); python_multiprocessing and
    max_rowsize: accepted, with no effect (Python runs in the pipeline's threads under the GIL);
    column_types: each source column's dtype is checked against it; schema: refused."""
    kind = "generator"

    def __init__(self, source, column_names=None, column_types=None, schema=None, num_samples=None,
                 num_parallel_workers=1, shuffle=None, sampler=None, num_shards=None, shard_id=None,
                 python_multiprocessing=True, max_rowsize=6, **kw):
        _check_kw("GeneratorDataset", kw, {"batch_sampler": " (batch with .batch(n))",
                                           "collate_fn": " (Tessera stacks samples itself)"})
        if schema is not None:
            raise ValueError("GeneratorDataset(schema=...): not supported; give column_names (and column_types)")
        if column_names is None:
            raise ValueError("GeneratorDataset: column_names is required (e.g. ['image', 'label'])")
        names = [column_names] if isinstance(column_names, str) else list(column_names)
        if not names or len(set(names)) != len(names) or not all(isinstance(n, str) for n in names):
            raise ValueError("GeneratorDataset(column_names=%r): expected distinct column names" % (column_names,))
        num_shards, shard_id = _check_common("GeneratorDataset", num_samples, shuffle, num_shards, shard_id,
                                             num_parallel_workers)
        if num_parallel_workers is None:
            num_parallel_workers = 1
        self._src = _Source(source)
        self._columns = names
        self._types = None
        if column_types is not None:
            from ..common.dtype import to_tessera
            ct = list(column_types)
            if len(ct) != len(names):
                raise ValueError("GeneratorDataset: %d column_types for %d column_names" % (len(ct), len(names)))
            np_of = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i64": np.int64, "u8": np.uint8}
            self._types = []
            for t in ct:
                tt = to_tessera(t, "GeneratorDataset(column_types)")
                if tt not in np_of:
                    raise ValueError("GeneratorDataset(column_types): %s has no numpy type (bfloat16)" % t)
                self._types.append(np.dtype(np_of[tt]))
        self.usage = "train"
        self.num_samples = num_samples or None
        self._shuffle = self._src.random if shuffle is None else bool(shuffle)
        self._buffer = 0
        self._repeat = 1
        self._batched = False
        self.num_shards, self.shard_id = num_shards, shard_id
        self.workers = num_parallel_workers
        self.ops = []
        self._pyops = []
        self._project = None
        self.batch_size = 1
        self.drop_remainder = False
        self._stratified = False
        self.sampler = None
        if sampler is not None:
            self._set_sampler(sampler, shuffle)

    # ---- columns ----
    def get_col_names(self):
        """The column names after the map operations and project."""
        names = list(self._columns)
        for _, ic, oc in self._pyops:
            names, _ = _apply_cols(names, [None] * len(names), ic, oc, [None] * len(oc))
        return list(self._project) if self._project else names

    def project(self, columns):
        """Only these columns, in this order (MindSpore's project)."""
        cols = _cols(columns)
        have = self.get_col_names()
        for c in cols:
            if c not in have:
                raise ValueError("project: no column '%s' (columns: %r)" % (c, have))
        d = copy.copy(self)
        d._project = cols
        return d

    def map(self, operations=None, input_columns=None, output_columns=None, num_parallel_workers=None, **kw):
        """operations (vision.* / transforms.* and Python functions, in order) on input_columns
        (default: the first column); a Python function gets one numpy array per input column and
        returns one per output column (a tuple for several). output_columns renames (default:
        input_columns)."""
        _check_kw("map", kw, {"column_order": " (use project(columns))", "callbacks": ""})
        if self._batched:
            raise ValueError("map after batch: Tessera's pipeline maps samples (map before batch)")
        ops = operations if isinstance(operations, (list, tuple)) else [operations]
        flat = []
        for op in ops:
            flat += op.flat() if isinstance(op, Compose) else [op]
        names = self.get_col_names()
        ic = _cols(input_columns) if input_columns is not None else [names[0]]
        for c in ic:
            if c not in names:
                raise ValueError("map(input_columns=%r): no column '%s' (columns: %r)" % (input_columns, c, names))
        oc = _cols(output_columns) if output_columns is not None else list(ic)
        d = copy.copy(self)
        d._pyops, d.ops = list(self._pyops), list(self.ops)
        for j, op in enumerate(flat):
            last = j == len(flat) - 1
            if isinstance(op, Op):
                if oc != ic and last:
                    raise ValueError("map(output_columns=%r): renaming columns needs a Python function as the last "
                                     "operation (%s is a C transform)" % (output_columns, type(op).__name__))
                if ic == [names[0]]:
                    if d._project:
                        raise ValueError("map: %s after project: map the data column before project"
                                         % type(op).__name__)
                    d.ops.append(op)
                elif len(ic) == 1 and len(names) > 1 and ic[0] == names[1] and isinstance(op, TypeCast):
                    if op.dtype not in ("i32", "i64"):
                        raise ValueError("map(input_columns='%s'): TypeCast to %s: the second column is the label "
                                         "(class ids: int32 or int64); cast a target in a Python function"
                                         % (ic[0], op.dtype))
                else:
                    raise ValueError("map(input_columns=%r): %s runs in the C pipeline on the data column ('%s') only; "
                                     "use a Python function for other columns" % (input_columns, type(op).__name__,
                                                                                 names[0]))
            elif callable(op):
                if d.ops and names[0] in ic:
                    raise ValueError("map: the Python function %s reads the data column '%s' after the C transform "
                                     "%s: Python functions run before vision.* transforms (the C pipeline applies "
                                     "those after the sample leaves Python); map it first, or do that transform in "
                                     "Python too" % (getattr(op, "__name__", repr(op)), names[0],
                                                     type(d.ops[-1]).__name__))
                if d._project:
                    raise ValueError("map after project: map before project(columns)")
                out = oc if last else ic
                d._pyops.append((op, list(ic), list(out)))
                names, _ = _apply_cols(names, [None] * len(names), ic, out, [None] * len(out))
                if not last:
                    ic = list(out)
            else:
                raise ValueError("map: %r is neither a tessera.dataset transform nor a Python function" % (op,))
        if num_parallel_workers:
            d.workers = num_parallel_workers
        return d

    # ---- the C source ----
    def _register(self):
        names = self.get_col_names()
        if len(names) > 2:
            raise ValueError("GeneratorDataset: %d columns %r: Tessera's pipeline carries the data column and one "
                             "label (or target) column; project(...) two of them" % (len(names), names))
        key = (tuple((id(f), tuple(i), tuple(o)) for f, i, o in self._pyops), tuple(self._project or ()))
        with self._src.lock:
            reg = self._src.registered.get(key)
            if reg is None:
                rows = _Rows(self._src, list(self._columns), self._types, list(self._pyops), self._project)
                reg = _Registration(rows, len(self._src), self._src.what)
                self._src.registered[key] = reg
        return reg.name

    def _split_keys(self, train):
        if not train and self.usage == "test":
            raise ValueError("GeneratorDataset has no test split of its own (give Model.eval a data set)")
        name = "source:" + self._register()
        if not train:
            return {"data.test_split": name}
        return {"data.name": "records", "data.path": "(GeneratorDataset)", "data.train_split": name}

    def keys(self, train=True):
        """The data.* keys as the Model's training (train=True) or evaluation set: the loss needs a
        label (or target) column."""
        names = self.get_col_names()
        if len(names) < 2:
            raise ValueError("GeneratorDataset with the one column %r as %s set: the loss needs a label column "
                             "(column_names=['data', 'label'])" % (names, "the training" if train else "an evaluation"))
        return super().keys(train)

    def _pairs(self, train):  # iteration: any number of columns up to two
        from ..context import yaml_value
        return [(k, yaml_value(v)) for k, v in _Dataset.keys(self, train).items()]

    # ---- iteration ----
    def create_tuple_iterator(self, columns=None, num_epochs=1, output_numpy=True, do_copy=True):
        """[column, ...] numpy arrays per batch, num_epochs times the data set, in the order the
        trainer reads it (same seed, shards, shuffle buffer)."""
        names = self.get_col_names()
        pick = None if columns is None else [names.index(c) for c in _cols(columns)]
        for e in self._passes(num_epochs):
            for x, y, t in self._data(e, target=True):
                row = [x] if len(names) == 1 else [x, t if t is not None else y]
                yield row if pick is None else [row[k] for k in pick]

    def create_dict_iterator(self, num_epochs=1, output_numpy=True):
        names = self.get_col_names()
        for row in self.create_tuple_iterator(num_epochs=num_epochs):
            yield dict(zip(names, row))

    def get_dataset_size(self):
        """Batches per epoch of this shard (times the repeat count), without reading samples."""
        if self._repeat == -1:
            raise ValueError("get_dataset_size: the data set repeats endlessly (repeat(None))")
        n = len(self._src)
        if self.num_samples:
            n = min(n, self.num_samples)
        s = self.num_shards or 1
        per = -(-n // s)
        b = per // self.batch_size if self.drop_remainder else -(-per // self.batch_size)
        return b * self._repeat

    def source_len(self):
        return len(self._src)
