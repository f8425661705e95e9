"""tessera.dataset: MindSpore's data set surface over Tessera's C data pipeline.

A data set here is a description (source, split, shard, transforms, batch) that the Model turns
into data.* config keys, so the trainer reads it with its own multi-threaded pipeline; iterating
one directly (create_tuple_iterator, create_dict_iterator, for) runs the same C pipeline and yields
numpy arrays. Differences from MindSpore: .batch(n) is the batch of ONE shard (as MindSpore's), so
the job's global batch is n x num_shards; transforms are Tessera's (vision.* below map onto them);
labels are always int32 (TypeCast on the label column is accepted and does nothing)."""
import copy
import os

from . import _C
from .context import yaml_value

__all__ = ["MnistDataset", "FashionMnistDataset", "Cifar10Dataset", "Cifar100Dataset", "ImageFolderDataset",
           "RecordDataset", "vision", "transforms"]


class _Op:
    """A transform: its data.transforms items (dicts) given whether a to_float came before."""

    def items(self, have_float):
        raise NotImplementedError


class _Simple(_Op):
    def __init__(self, **item):
        self.item = item

    def items(self, have_float):
        return [dict(self.item)]


class _Vision:
    """vision.*: MindSpore's image transforms that Tessera's pipeline has."""

    class Rescale(_Op):
        def __init__(self, rescale, shift=0.0):
            self.rescale, self.shift = float(rescale), float(shift)

        def items(self, have_float):
            return [{"name": "to_float", "scale": self.rescale, "shift": self.shift}]

    class Normalize(_Op):
        """Per-channel (x - mean) / std; on u8 images (MindSpore's usual place, mean/std in pixel
        units) a to_float with scale 1 is inserted first."""

        def __init__(self, mean, std, is_hwc=True):
            if not is_hwc:
                raise ValueError("Normalize: only is_hwc=True (put HWC2CHW after it)")
            self.mean, self.std = [float(m) for m in mean], [float(s) for s in std]

        def items(self, have_float):
            pre = [] if have_float else [{"name": "to_float", "scale": 1.0}]
            return pre + [{"name": "normalize", "mean": self.mean, "std": self.std}]

    class HWC2CHW(_Op):
        def items(self, have_float):
            return [{"name": "hwc_to_chw"}]

    class ToTensor(_Op):
        """u8 HWC -> f32 CHW in [0, 1]."""

        def items(self, have_float):
            return [{"name": "to_float", "scale": 1.0 / 255}, {"name": "hwc_to_chw"}]

    class RandomCrop(_Op):
        def __init__(self, size, padding=0, pad_if_needed=False, fill_value=0):
            p = padding if isinstance(padding, int) else padding[0]
            if fill_value != 0:
                raise ValueError("RandomCrop: fill_value: only 0")
            self.size, self.p = size, p

        def items(self, have_float):
            s = self.size if isinstance(self.size, int) else list(self.size)
            return [{"name": "random_crop", "size": s, "padding": self.p}]

    class CenterCrop(_Op):
        def __init__(self, size):
            self.size = size

        def items(self, have_float):
            return [{"name": "center_crop", "size": self.size if isinstance(self.size, int) else list(self.size)}]

    class Resize(_Op):
        def __init__(self, size, interpolation=None):
            self.size = size

        def items(self, have_float):
            return [{"name": "resize", "size": self.size if isinstance(self.size, int) else list(self.size)}]

    class RandomHorizontalFlip(_Op):
        def __init__(self, prob=0.5):
            self.p = float(prob)

        def items(self, have_float):
            return [{"name": "hflip", "p": self.p}]

    class RandomVerticalFlip(RandomHorizontalFlip):
        def items(self, have_float):
            return [{"name": "vflip", "p": self.p}]

    class RandomErasing(_Op):
        def __init__(self, prob=0.5):
            self.p = float(prob)

        def items(self, have_float):
            return [{"name": "random_erasing", "p": self.p}]


class _Transforms:
    class TypeCast(_Op):
        """On the label column: accepted, labels are int32 already. On images: a cast."""

        def __init__(self, data_type):
            self.dtype = getattr(data_type, "__name__", str(data_type)).lower().replace("mindspore.", "")

        def items(self, have_float):
            m = dict(float32="f32", float16="f16", bfloat16="bf16", int32="i32", int64="i64", uint8="u8")
            return [{"name": "cast", "dtype": m.get(self.dtype, self.dtype)}]


vision = _Vision
transforms = _Transforms


class _Dataset:
    kind = None

    def __init__(self, dataset_dir, usage=None, num_samples=None, shuffle=None, num_shards=None, shard_id=None,
                 num_parallel_workers=None):
        if not os.path.isdir(dataset_dir):
            raise FileNotFoundError("%s: dataset_dir '%s' is not a directory" % (type(self).__name__, dataset_dir))
        if (num_shards is None) != (shard_id is None):
            raise ValueError("%s: num_shards and shard_id go together" % type(self).__name__)
        if num_shards is not None and not 0 <= shard_id < num_shards:
            raise ValueError("%s: shard_id %r not in [0, num_shards %r)" % (type(self).__name__, shard_id, num_shards))
        self.dir = os.path.abspath(dataset_dir)
        self.usage = usage or "train"
        if self.usage not in ("train", "test"):
            raise ValueError("%s: usage: 'train' or 'test', got %r" % (type(self).__name__, usage))
        self.num_samples = num_samples
        self.shuffle = True if shuffle is None else bool(shuffle)
        self.num_shards, self.shard_id = num_shards, shard_id
        self.workers = num_parallel_workers
        self.ops = []
        self.batch_size = 1
        self.drop_remainder = False

    # ---- pipeline operations (each returns a new data set, like MindSpore's) ----
    def map(self, operations, input_columns=None, output_columns=None, num_parallel_workers=None, **kw):
        ops = operations if isinstance(operations, (list, tuple)) else [operations]
        d = copy.copy(self)
        col = input_columns[0] if isinstance(input_columns, (list, tuple)) else input_columns
        if col == "label":
            for op in ops:
                if not isinstance(op, _Transforms.TypeCast):
                    raise ValueError("map on 'label': only TypeCast (labels are class ids)")
            return d
        for op in ops:
            if not isinstance(op, _Op):
                raise ValueError("map: %r is not a tessera.dataset transform (vision.*, transforms.TypeCast); "
                                 "Python functions cannot run in the C pipeline" % (op,))
        d.ops = self.ops + list(ops)
        if num_parallel_workers:
            d.workers = num_parallel_workers
        return d

    def batch(self, batch_size, drop_remainder=False, num_parallel_workers=None):
        d = copy.copy(self)
        d.batch_size, d.drop_remainder = int(batch_size), bool(drop_remainder)
        return d

    def repeat(self, count=None):
        return self  # epochs are Model.train's

    def shuffle(self, buffer_size):
        d = copy.copy(self)
        d.shuffle = True
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
            k["data.shuffle"] = self.shuffle
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
    def _data(self, epoch=0):
        train = self.usage == "train"
        shards = self.num_shards or 1
        shard = self.shard_id or 0
        pairs = self._pairs(train)  # as the training set, or (usage "test") as the evaluation set
        return _C.Data(pairs, train, self.batch_size, shards, shard, self.shuffle and train, self.drop_remainder,
                       1, epoch)

    def create_tuple_iterator(self, columns=None, num_epochs=1, output_numpy=True, do_copy=True):
        for e in range(num_epochs if num_epochs and num_epochs > 0 else 1):
            yield from self._data(e)

    def create_dict_iterator(self, num_epochs=1, output_numpy=True):
        for x, y in self.create_tuple_iterator(num_epochs=num_epochs):
            yield {"image": x, "label": y}

    def __iter__(self):
        return iter(self._data(0))

    def get_dataset_size(self):
        """Batches per epoch of this shard."""
        return self._data(0).batches()

    def get_batch_size(self):
        return self.batch_size


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
