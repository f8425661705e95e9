"""tessera.dataset: MindSpore's data set surface over Tessera's C data pipeline.

A data set here is a description (source, split, shard, transforms, batch) that the Model turns
into data.* config keys, so the trainer reads it with its own multi-threaded pipeline; iterating
one directly (create_tuple_iterator, create_dict_iterator, for) runs the same C pipeline and yields
numpy arrays. Differences from MindSpore: .batch(n) is the batch of ONE shard (as MindSpore's), so
the job's global batch is n x num_shards; transforms are Tessera's (vision.* below map onto them);
labels are always int32 (TypeCast on the label column is accepted and does nothing).
.shuffle(buffer_size) is MindSpore's buffer shuffle (data.shuffle_buffer) on top of the source's
own shuffle; .repeat(count) repeats the data set when iterated (as the Model's training set the
trainer's epoch is one pass: repeat(n > 1) there is refused, saying to train n times the epochs).
vision and transforms are packages as MindSpore's (c_transforms / py_transforms aliases).
GeneratorDataset (generator.py) is a source written in Python (random-access, iterable or a
generator), with Python functions in map run by the pipeline's workers under the GIL; samplers
(samplers.py) map onto Tessera's sampler keys."""
import copy
import os

from .. import _C
from .._validator import check_bool, check_int
from ..context import get_seed, yaml_value
from . import samplers as _samplers, transforms, vision
from ._op import Op as _Op
from .samplers import (DistributedSampler, PKSampler, RandomSampler, SequentialSampler, StratifiedSampler,
                       SubsetRandomSampler, SubsetSampler, WeightedRandomSampler)
from .transforms import Compose as _Compose, TypeCast as _TypeCast

__all__ = ["MnistDataset", "FashionMnistDataset", "Cifar10Dataset", "Cifar100Dataset", "ImageFolderDataset",
           "RecordDataset", "GeneratorDataset", "DistributedSampler", "RandomSampler", "SequentialSampler",
           "StratifiedSampler", "SubsetRandomSampler", "SubsetSampler", "WeightedRandomSampler", "PKSampler",
           "vision", "transforms"]

# keywords MindSpore's map / batch take that Tessera's pipeline accepts as performance hints (the
# pipeline's threads run every operation; results do not depend on them)
_HINTS = ("python_multiprocessing", "max_rowsize", "cache", "num_parallel_workers")


def _check_common(where, num_samples, shuffle, num_shards, shard_id, num_parallel_workers):
    """The arguments every source takes: ints are ints (no truncation), shuffle a bool or None.
    (num_shards, shard_id) as checked."""
    check_int(num_samples, "num_samples", where, 0, allow_none=True)
    check_bool(shuffle, "shuffle", where, allow_none=True)
    check_int(num_parallel_workers, "num_parallel_workers", where, 1, allow_none=True)
    num_shards = check_int(num_shards, "num_shards", where, 1, allow_none=True)
    shard_id = check_int(shard_id, "shard_id", where, 0, allow_none=True)
    if (num_shards is None) != (shard_id is None):
        raise ValueError("%s: num_shards and shard_id go together" % where)
    if num_shards is not None and not 0 <= shard_id < num_shards:
        raise ValueError("%s: shard_id %r not in [0, num_shards %r)" % (where, shard_id, num_shards))
    return num_shards, shard_id


def _check_kw(where, kw, refused):
    for k, v in kw.items():
        if k in _HINTS:
            continue
        if v is None or (k in ("offload",) and v is False):
            continue
        raise ValueError("%s(%s=%r): not supported%s" % (where, k, v, refused.get(k, "")))


class _Dataset:
    kind = None

    def __init__(self, dataset_dir, usage=None, num_samples=None, shuffle=None, num_shards=None, shard_id=None,
                 num_parallel_workers=None, sampler=None, decode=None, **kw):
        """decode (ImageFolderDataset's) is accepted: Tessera's sources always decode."""
        _check_kw(type(self).__name__, kw, {
            "extensions": " (image folders read .png, .jpg and .jpeg)",
            "class_indexing": " (classes are the sub-folders in sorted order)"})
        if not isinstance(dataset_dir, (str, bytes)) and not hasattr(dataset_dir, "__fspath__"):
            raise TypeError("For '%s', the 'dataset_dir' must be a str, but got %s %r."
                            % (type(self).__name__, type(dataset_dir).__name__, dataset_dir))
        if not os.path.isdir(dataset_dir):
            raise FileNotFoundError("%s: dataset_dir '%s' is not a directory" % (type(self).__name__, dataset_dir))
        num_shards, shard_id = _check_common(type(self).__name__, num_samples, shuffle, num_shards, shard_id,
                                             num_parallel_workers)
        self.dir = os.path.abspath(dataset_dir)
        self.usage = usage or "train"
        if self.usage not in ("train", "test"):
            raise ValueError("%s: usage: 'train' or 'test', got %r" % (type(self).__name__, usage))
        self.num_samples = num_samples
        self._shuffle = True if shuffle is None else bool(shuffle)
        self._buffer = 0       # .shuffle(buffer_size): data.shuffle_buffer
        self._repeat = 1       # .repeat(count): passes when iterated (-1: endless)
        self._batched = False  # .batch called (shuffle/repeat after it are refused)
        self.num_shards, self.shard_id = num_shards, shard_id
        self.workers = num_parallel_workers
        self.ops = []
        self.batch_size = 1
        self.drop_remainder = False
        self._stratified = False
        self.sampler = None
        if sampler is not None:
            self._set_sampler(sampler, shuffle)

    def _set_sampler(self, sampler, shuffle=None):
        where = type(self).__name__
        if shuffle is not None:
            raise ValueError("%s: sampler and shuffle cannot both be given (the sampler decides the order)" % where)
        if self.num_shards is not None:
            raise ValueError("%s: sampler and num_shards / shard_id cannot both be given (DistributedSampler("
                             "num_shards, shard_id) shards)" % where)
        _samplers.apply(self, sampler, where)

    def use_sampler(self, new_sampler):
        """MindSpore's use_sampler: this data set read through new_sampler (a new data set)."""
        d = copy.copy(self)
        d.num_shards = d.shard_id = None
        _samplers.apply(d, new_sampler, "use_sampler")
        return d

    # ---- pipeline operations (each returns a new data set, like MindSpore's) ----
    def map(self, operations=None, input_columns=None, output_columns=None, num_parallel_workers=None, **kw):
        """The transforms (vision.*, transforms.TypeCast, transforms.Compose of them) applied to
        input_columns ("image" by default; on "label" only TypeCast, labels being class ids).
        Python functions: GeneratorDataset's map."""
        _check_kw("map", kw, {"column_order": " (use project(columns))", "callbacks": ""})
        if output_columns is not None and _cols(output_columns) != _cols(input_columns):
            raise ValueError("map(output_columns=%r): %s's columns are image and label (renaming columns: "
                             "GeneratorDataset)" % (output_columns, type(self).__name__))
        ops = operations if isinstance(operations, (list, tuple)) else [operations]
        flat = []
        for op in ops:
            flat += op.flat() if isinstance(op, _Compose) else [op]
        d = copy.copy(self)
        col = input_columns[0] if isinstance(input_columns, (list, tuple)) else input_columns
        if col == "label":
            for op in flat:
                if not isinstance(op, _TypeCast):
                    raise ValueError("map(input_columns='label'): only transforms.TypeCast (labels are class ids), "
                                     "got %s" % type(op).__name__)
                if op.dtype not in ("i32", "i64"):
                    raise ValueError("map(input_columns='label'): TypeCast to %s: labels are class ids (int32 or "
                                     "int64)" % op.dtype)
            return d
        if self._batched:
            raise ValueError("map after batch: Tessera's transforms act on samples (map before batch)")
        for op in flat:
            if not isinstance(op, _Op):
                raise ValueError("map: %r is not a tessera.dataset transform (vision.*, transforms.TypeCast, "
                                 "transforms.Compose): %s is read by the C pipeline; Python functions run in map "
                                 "of a GeneratorDataset (a source written in Python)" % (op, type(self).__name__))
        d.ops = self.ops + flat
        if check_int(num_parallel_workers, "num_parallel_workers", "map", 1, allow_none=True):
            d.workers = num_parallel_workers
        return d

    def batch(self, batch_size, drop_remainder=False, num_parallel_workers=None, **kw):
        """Batches of batch_size samples of this shard (the job's batch: times num_shards)."""
        _check_kw("batch", kw, {"per_batch_map": " (Tessera stacks samples in C: do the work per sample in map)",
                                "pad_info": " (samples of a batch must have one shape)",
                                "input_columns": "", "output_columns": "", "column_order": ""})
        if self._batched:
            raise ValueError("batch: this data set is batched already (one batch per pipeline)")
        batch_size = check_int(batch_size, "batch_size", "batch", 1)
        drop_remainder = check_bool(drop_remainder, "drop_remainder", "batch")
        check_int(num_parallel_workers, "num_parallel_workers", "batch", 1, allow_none=True)
        d = copy.copy(self)
        d.batch_size, d.drop_remainder = batch_size, drop_remainder
        d._batched = True
        return d

    def repeat(self, count=None):
        """The data set repeated count times (None or -1: endlessly) when iterated, each pass in a
        new shuffled order, as MindSpore's. As the Model's training set only repeat(1) (the
        trainer's epoch is one pass: train n times the epochs instead), see keys()."""
        if count is None:
            count = -1
        count = check_int(count, "count", "repeat", 1, also=(-1,))
        d = copy.copy(self)
        if count == -1 or self._repeat == -1:
            d._repeat = -1
        else:
            d._repeat = self._repeat * count
        return d

    def shuffle(self, buffer_size):
        """MindSpore's buffer shuffle: samples pass through a buffer of buffer_size from which each
        next one is drawn at random (data.shuffle_buffer), after the source's own order (shuffled
        unless the source was made with shuffle=False). buffer_size 1 changes nothing."""
        buffer_size = check_int(buffer_size, "buffer_size", "shuffle", 1)
        if self._batched:
            raise ValueError("shuffle after batch: Tessera shuffles samples, not batches (shuffle before batch)")
        d = copy.copy(self)
        d._buffer = max(self._buffer, buffer_size) if buffer_size > 1 else self._buffer
        return d

    # ---- config keys ----
    def _split_keys(self, train):
        """data.name, data.path and the split keys for use as the training (train=True) or
        evaluation set."""
        raise NotImplementedError

    def transform_items(self):
        items, have_float = [], False
        for op in self.ops:
            its = op.items(have_float)
            items += its
            have_float = have_float or any(i["name"] == "to_float" for i in its)
        return items

    def keys(self, train=True):
        """The data.* / train.* config keys of this data set as the training set (train=True) or
        the evaluation set."""
        k = self._split_keys(train)
        items = self.transform_items()
        if train:
            k["data.transforms"] = items
            if self._repeat != 1:
                raise ValueError("repeat(%s) on the training set: Tessera's epoch is one pass over the data; "
                                 "drop the repeat and train %s the epochs (Model.train(epoch * count, ...))"
                                 % ("None" if self._repeat == -1 else self._repeat,
                                    "endlessly many" if self._repeat == -1 else "%d times" % self._repeat))
            k["data.shuffle"] = self._shuffle
            if self._stratified:
                k["data.sampler"] = "stratified"
            if self._buffer > 1:
                k["data.shuffle_buffer"] = int(self._buffer)
            k["data.drop_last"] = self.drop_remainder
            if self.num_samples:
                k["data.train_limit"] = int(self.num_samples)
            if self.workers:
                k["data.num_workers"] = int(self.workers)
        else:
            k["data.test_transforms"] = items
            if self.num_samples:
                k["data.test_limit"] = int(self.num_samples)
        return k

    def _pairs(self, train):
        return [(k, yaml_value(v)) for k, v in self.keys(train).items()]

    # ---- iteration (the C pipeline, numpy out) ----
    def _data(self, epoch=0, target=False):
        """The C pipeline over one epoch (the trainer's order: its seed, sampler, shuffle buffer)."""
        train = self.usage == "train"
        shards = self.num_shards or 1
        shard = self.shard_id or 0
        pairs = self._pairs(train) if self._repeat == 1 else _no_repeat(self)._pairs(train)
        return _C.Data(pairs, train, self.batch_size, shards, shard, self._shuffle and train, self.drop_remainder,
                       get_seed(), epoch, target, self._stratified)

    def _passes(self, num_epochs):
        """The passes over the source, epoch by epoch: (epoch index) of each, repeat included."""
        e = 0
        for _ in range(num_epochs if num_epochs and num_epochs > 0 else 1):
            r = 0
            while self._repeat == -1 or r < self._repeat:
                yield e
                e += 1
                r += 1

    def create_tuple_iterator(self, columns=None, num_epochs=1, output_numpy=True, do_copy=True):
        """(data, label) numpy arrays, batch by batch, num_epochs times the data set (each pass of a
        repeated set in a new order)."""
        for e in self._passes(num_epochs):
            yield from self._data(e)

    def create_dict_iterator(self, num_epochs=1, output_numpy=True):
        for x, y in self.create_tuple_iterator(num_epochs=num_epochs):
            yield {"image": x, "label": y}

    def __iter__(self):
        return self.create_tuple_iterator()

    def get_dataset_size(self):
        """Batches per epoch of this shard (times the repeat count)."""
        if self._repeat == -1:
            raise ValueError("get_dataset_size: the data set repeats endlessly (repeat(None))")
        return self._data(0).batches() * self._repeat

    def get_batch_size(self):
        return self.batch_size


def _cols(c):
    return list(c) if isinstance(c, (list, tuple)) else [c]


def _no_repeat(ds):
    d = copy.copy(ds)
    d._repeat = 1
    return d


class MnistDataset(_Dataset):
    """MNIST-format IDX files in dataset_dir (train-*, t10k-*; gzip or plain)."""
    kind = "mnist"

    def _split_keys(self, train):
        split = "train" if self.usage == "train" else "t10k"
        k = {"data.name": self.kind, "data.path": self.dir}
        k["data.train_split" if train else "data.test_split"] = split
        return k


class FashionMnistDataset(MnistDataset):
    kind = "fashion_mnist"


class Cifar10Dataset(_Dataset):
    """CIFAR-10 binary batches (data_batch_1..5.bin, test_batch.bin) in dataset_dir."""
    kind = "cifar10"

    def _split_keys(self, train):
        if train != (self.usage == "train"):
            raise ValueError("%s: usage %r: Tessera trains on the training batches and evaluates on the test batch"
                             % (type(self).__name__, self.usage))
        return {"data.name": self.kind, "data.path": self.dir}


class Cifar100Dataset(Cifar10Dataset):
    kind = "cifar100"


class ImageFolderDataset(_Dataset):
    """dataset_dir/<class>/<image>.{png,jpg}: dataset_dir is one split folder (its parent holds
    the others: Tessera's image_folder reads <parent>/<split>)."""
    kind = "image_folder"

    def _split_keys(self, train):
        k = {"data.name": self.kind, "data.path": os.path.dirname(self.dir)}
        k["data.train_split" if train else "data.test_split"] = os.path.basename(self.dir)
        return k


class RecordDataset(_Dataset):
    """Tessera record shards <dataset_dir>/<usage>-SSSSS-of-NNNNN.tsr (tessera data convert); the
    folder must hold the train shards whatever the usage (the source opens the training split)."""
    kind = "records"

    def _split_keys(self, train):
        k = {"data.name": self.kind, "data.path": self.dir}
        k["data.train_split" if train else "data.test_split"] = self.usage
        return k


from .generator import GeneratorDataset  # noqa: E402
