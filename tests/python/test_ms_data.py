"""tessera.dataset.GeneratorDataset, the samplers and the shuffle buffer in iteration:
- random-access, iterable and generator sources iterated against their numpy arrays, Python
  functions in map (one column, several, renaming), project, column_types;
- shards partition the data, DistributedSampler = num_shards / shard_id, Sequential / Random
  samplers, and every refusal's message;
- iteration order with a shuffle buffer: differs from none, repeatable, and is the order the
  trainer consumes (the source logs the indices the trainer reads); built-in sets too;
- a Python exception in the source or a map function propagates with its type from iteration and
  from Model.train; a trainer freed while its workers wait in Python does not hang;
- under mpirun -n 2 (mindspore_scripts/data_generator_parallel.py: numpy arrays, a Python map,
  vision.* ops, DistributedSampler or num_shards, a shuffle buffer) against `mpirun -n 2 tessera
  train` on IDX files of the same (inverted) arrays: bitwise the same losses and checkpoint, and
  different from the run on the original arrays (the comparison can fail)."""
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyutil  # noqa: E402

pyutil.require()
import numpy as np  # noqa: E402

import tessera as ms  # noqa: E402
import tessera.dataset as ds  # noqa: E402
from tessera import nn  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "mindspore_scripts")


class Arrays:
    """A random-access source: data[i] = [i, i+0.5, -i, 1] (float32), label i % 10."""

    def __init__(self, n=40, log=None):
        self.x = np.stack([np.arange(n), np.arange(n) + 0.5, -np.arange(n), np.ones(n)], 1).astype(np.float32)
        self.y = (np.arange(n) % 10).astype(np.int64)
        self.log = log

    def __getitem__(self, i):
        if self.log is not None:
            self.log.append(int(i))
        return self.x[i], self.y[i]

    def __len__(self):
        return len(self.y)


def firsts(d):
    """The sample indices (data[:, 0]) of one pass, in order."""
    return [int(v) for row in d.create_tuple_iterator() for v in row[0][:, 0]]


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 10)

    def construct(self, x):
        return self.fc(x)


def model(**config):
    net = Net()
    return ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                    nn.Momentum(net.trainable_params(), 0.01, 0.9), config=config or None)


class TestGenerator(unittest.TestCase):
    def test_random_access(self):
        src = Arrays()
        d = ds.GeneratorDataset(src, ["data", "label"], shuffle=False)
        m = d.map(lambda x: x * 2 + 1, "data").batch(16)
        rows = list(m.create_tuple_iterator())
        self.assertEqual([r[0].shape for r in rows], [(16, 4), (16, 4), (8, 4)])
        np.testing.assert_array_equal(np.concatenate([r[0] for r in rows]), src.x * 2 + 1)
        np.testing.assert_array_equal(np.concatenate([r[1] for r in rows]), src.y)
        self.assertEqual(rows[0][1].dtype, np.int32)
        self.assertEqual(m.get_dataset_size(), 3)
        self.assertEqual(d.batch(16, drop_remainder=True).get_dataset_size(), 2)
        dicts = list(m.create_dict_iterator())
        self.assertEqual(sorted(dicts[0]), ["data", "label"])
        # several columns in, renamed out; a target column (not one integer per sample)
        two = d.map(lambda x, y: (x[:2], np.full(3, y, np.int32)), ["data", "label"], ["a", "t"]).batch(40)
        self.assertEqual(two.get_col_names(), ["a", "t"])
        a, t = next(two.create_tuple_iterator())
        np.testing.assert_array_equal(a, src.x[:, :2])
        np.testing.assert_array_equal(t, np.repeat(src.y[:, None], 3, 1).astype(np.int32))
        # project, one column
        only = d.project("data").batch(40)
        (x,), = list(only.create_tuple_iterator())
        np.testing.assert_array_equal(x, src.x)
        # shuffled by default (random access), the same data
        sh = firsts(ds.GeneratorDataset(src, ["data", "label"]).batch(8))
        self.assertNotEqual(sh, list(range(40)))
        self.assertEqual(sorted(sh), list(range(40)))

    def test_iterables(self):
        def gen():
            for i in range(7):
                yield np.array([i, 0], np.int32), i

        class It:
            def __iter__(self):
                return ((np.array([i, 1], np.int32), i) for i in range(7))

        for source in (gen, gen(), It(), [(np.array([i, 2], np.int32), i) for i in range(7)]):
            # a list is random-access: shuffled unless shuffle=False (MindSpore's default)
            d = ds.GeneratorDataset(source, ["data", "label"], shuffle=False if isinstance(source, list) else None)
            d = d.batch(3)
            rows = list(d.create_tuple_iterator())
            self.assertEqual(np.concatenate([r[0][:, 0] for r in rows]).tolist(), list(range(7)), source)
            self.assertEqual(np.concatenate([r[1] for r in rows]).tolist(), list(range(7)))
            self.assertEqual(d.get_dataset_size(), 3)
        # a generator object is read once and kept: iterating twice gives the data twice
        d = ds.GeneratorDataset(gen(), ["data", "label"]).batch(7)
        self.assertEqual(len(list(d)), 1)
        self.assertEqual(len(list(d)), 1)
        # column_types checked against the source
        ok = ds.GeneratorDataset(gen, ["data", "label"], column_types=[ms.int32, ms.int64]).batch(7)
        self.assertEqual(len(list(ok)), 1)
        with self.assertRaisesRegex(ValueError, "column 'data' is int32, column_types says float32"):
            list(ds.GeneratorDataset(gen, ["data", "label"], column_types=[ms.float32, ms.int64]).batch(7))

    def test_shards_and_samplers(self):
        src = Arrays(41)
        parts = [firsts(ds.GeneratorDataset(src, ["data", "label"], num_shards=2, shard_id=r).batch(8))
                 for r in range(2)]
        self.assertEqual(len(parts[0]), 21)
        self.assertEqual(len(parts[1]), 21)  # 41 samples: the last shard padded by wrapping, as the trainer's
        self.assertEqual(sorted(set(parts[0] + parts[1])), list(range(41)))
        for r in range(2):
            smp = ds.GeneratorDataset(src, ["data", "label"], sampler=ds.DistributedSampler(2, r))
            self.assertEqual(firsts(smp.batch(8)), parts[r])
            k1, k2 = smp.keys(), ds.GeneratorDataset(src, ["data", "label"], num_shards=2, shard_id=r).keys()
            del k1["data.train_split"], k2["data.train_split"]  # each data set its own source
            self.assertEqual(k1, k2)
        seq = ds.GeneratorDataset(src, ["data", "label"], sampler=ds.SequentialSampler(num_samples=5)).batch(2)
        self.assertEqual(firsts(seq), [0, 1, 2, 3, 4])
        rnd = ds.GeneratorDataset(src, ["data", "label"], shuffle=False).use_sampler(ds.RandomSampler()).batch(8)
        self.assertEqual(firsts(rnd), firsts(rnd))
        self.assertNotEqual(firsts(rnd), list(range(41)))
        self.assertEqual(sorted(firsts(rnd)), list(range(41)))
        strat = ds.GeneratorDataset(src, ["data", "label"], sampler=ds.StratifiedSampler(2, 0))
        self.assertEqual(strat.keys()["data.sampler"], "stratified")
        self.assertEqual(len(firsts(strat.batch(8))), 21)
        # built-in data sets take samplers too
        fm = ds.FashionMnistDataset(pyutil.FASHION, num_samples=64, sampler=ds.SequentialSampler())
        self.assertIs(fm.keys()["data.shuffle"], False)
        for make, msg in (
                (lambda: ds.RandomSampler(replacement=True), "RandomSampler(replacement=True): not supported"),
                (lambda: ds.RandomSampler(num_samples=4), "RandomSampler(num_samples=4): a random subset"),
                (lambda: ds.DistributedSampler(2, 0, num_samples=3), "Tessera caps the whole data set"),
                (lambda: ds.SequentialSampler(start_index=3), "SequentialSampler(start_index=3)"),
                (lambda: ds.SubsetRandomSampler([1, 2]), "SubsetRandomSampler: not supported"),
                (lambda: ds.WeightedRandomSampler([1.0], 1), "WeightedRandomSampler: not supported"),
                (lambda: ds.PKSampler(2), "PKSampler: not supported"),
                (lambda: ds.RandomSampler().add_child(ds.SequentialSampler()), "chained samplers"),
                (lambda: ds.GeneratorDataset(src, ["data", "label"], shuffle=True, sampler=ds.RandomSampler()),
                 "sampler and shuffle cannot both be given"),
                (lambda: ds.GeneratorDataset(src, ["data", "label"], num_shards=2, shard_id=0,
                                             sampler=ds.RandomSampler()), "sampler and num_shards"),
                (lambda: ds.GeneratorDataset(src, ["data", "label"], sampler=[1, 2]), "an iterable of indices")):
            with self.assertRaisesRegex(ValueError, re.escape(msg)):
                make()

    def test_shuffle_buffer_order(self):
        src = Arrays(64)
        plain = ds.GeneratorDataset(src, ["data", "label"]).batch(8)
        buf = ds.GeneratorDataset(src, ["data", "label"]).shuffle(16).batch(8)
        self.assertNotEqual(firsts(buf), firsts(plain))
        self.assertEqual(firsts(buf), firsts(buf))
        self.assertEqual(sorted(firsts(buf)), list(range(64)))
        # the order the trainer reads (no workers: the source is read exactly as batches are taken)
        log = []
        logged = ds.GeneratorDataset(Arrays(64, log), ["data", "label"]).shuffle(16).batch(8)
        model(**{"data.num_workers": 0, "model.num_classes": 10}).train(1, logged)
        self.assertEqual(log[0], 0)  # the trainer's probe of the first sample
        self.assertEqual(log[1:], firsts(buf))
        # built-in data sets iterate with their buffer too (it was refused)
        fm = ds.FashionMnistDataset(pyutil.FASHION, num_samples=64)
        a = [y.tolist() for _, y in fm.batch(16)]
        b = [y.tolist() for _, y in fm.shuffle(16).batch(16)]
        self.assertNotEqual(a, b)
        self.assertEqual(b, [y.tolist() for _, y in fm.shuffle(16).batch(16)])
        self.assertEqual(sorted(sum(a, [])), sorted(sum(b, [])))

    def test_training_and_eval(self):
        src = Arrays(64)
        train = ds.GeneratorDataset(src, ["data", "label"]).map(lambda x: x / 64).batch(16)
        m = model()
        m.train(2, train)
        test = ds.GeneratorDataset(src, ["data", "label"], shuffle=False).map(lambda x: x / 64).batch(16)
        r = m.eval(test)
        w = m.network._trainer.params()
        logits = src.x / 64 @ w["fc.weight"].T + w["fc.bias"]
        self.assertAlmostEqual(r["acc"], float(np.mean(logits.argmax(1) == src.y)), places=6)

    def test_refusals(self):
        src = Arrays()
        cases = (
            (lambda: list(ds.GeneratorDataset([(np.zeros(2),)], ["x"]).batch(1)),
             "column 'x' is float64: Tessera's tensors are float32, float16, int32, int64 or uint8 (return "
             ".astype(np.float32)"),
            (lambda: list(ds.GeneratorDataset(src, ["data", "label"]).map(lambda x: (x, x), "data", ["a", "b"])),
             "3 columns ['a', 'b', 'label']: Tessera's pipeline carries the data column and one label"),
            (lambda: ds.GeneratorDataset(src, ["data", "label"]).map(ds.vision.HWC2CHW()).map(lambda x: x),
             "Python functions run before vision.* transforms"),
            (lambda: ds.GeneratorDataset(src, ["data", "label"]).map(lambda x: x, "image"), "no column 'image'"),
            (lambda: ds.GeneratorDataset(src, ["data"]).batch(4).create_tuple_iterator().__next__(),
             "of the source has 2 column(s) but column_names ['data'] has 1"),
            (lambda: ds.GeneratorDataset(src, ["data", "label"], schema="s.json"), "schema=...): not supported"),
            (lambda: ds.GeneratorDataset(src, ["data", "label"]).batch(4, per_batch_map=len),
             "batch(per_batch_map=<built-in function len>): not supported"),
            (lambda: ds.FashionMnistDataset(pyutil.FASHION).map(lambda x: x),
             "Python functions run in map of a GeneratorDataset"),
            (lambda: ds.GeneratorDataset(3, ["data"]), "is neither random-access"),
            (lambda: model().train(1, ds.GeneratorDataset(src, ["data", "label"]).project("data").batch(4)),
             "GeneratorDataset with the one column ['data'] as the training set: the loss needs a label column"),
        )
        for make, msg in cases:
            with self.assertRaises((ValueError, TypeError)) as cm:
                make()
            self.assertIn(msg, str(cm.exception))
        # accepted: MindSpore's multiprocessing hints (Python runs in the pipeline's threads)
        ds.GeneratorDataset(src, ["data", "label"], python_multiprocessing=True, max_rowsize=16).map(
            lambda x: x, python_multiprocessing=True).batch(4, python_multiprocessing=False)

    def test_exceptions(self):
        class Boom(Exception):
            pass

        def bad(x):
            if x[0] == 13:
                raise Boom("sample thirteen")
            return x

        d = ds.GeneratorDataset(Arrays(), ["data", "label"]).map(bad).batch(4)
        with self.assertRaisesRegex(Boom, "sample thirteen"):
            list(d)
        with self.assertRaisesRegex(Boom, "sample thirteen"):
            model(**{"model.num_classes": 10}).train(1, d)
        # a later, clean run is not disturbed by it
        self.assertEqual(len(list(ds.GeneratorDataset(Arrays(), ["data", "label"]).batch(8))), 5)

    def test_free_while_workers_wait_in_python(self):
        code = """
import time, numpy as np, tessera as ms, tessera.dataset as ds
from tessera import nn
class S:
    def __getitem__(self, i):
        time.sleep(0.01)
        return np.ones(4, np.float32), i % 3
    def __len__(self):
        return 400
class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 3)
    def construct(self, x):
        return self.fc(x)
net = Net()
m = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
             nn.Momentum(net.trainable_params(), 0.1, 0.9), config={"model.num_classes": 3, "train.steps": 1})
m.train(1, ds.GeneratorDataset(S(), ["data", "label"], num_parallel_workers=4).batch(8))
t = m._trainer
m._trainer = None
net.__dict__.pop("_trainer", None)
del t
print("freed")
"""
        r = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("freed", r.stdout)


def write_idx(path, arr):
    with gzip.open(path + ".gz", "wb") as f:
        f.write(bytes([0, 0, 8, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape))
        f.write(arr.astype(np.uint8).tobytes())


def read_idx(name, offset, count, shape):
    p = os.path.join(pyutil.FASHION, name)
    raw = open(p, "rb").read() if os.path.exists(p) else gzip.open(p + ".gz").read()
    return np.frombuffer(raw, np.uint8, count * int(np.prod(shape)), offset).reshape((count,) + shape)


@unittest.skipUnless(pyutil.mpirun(2), "no mpirun in PATH")
class TestDataParallel(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tessera-msdata-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def cli(self, name, data, buffer):
        d = os.path.join(self.dir, name)
        os.makedirs(d)
        with open(os.path.join(d, "c.yaml"), "w") as f:
            f.write("model: {name: mlp, hidden: [64, 32]}\n")
            f.write((pyutil.YAML_BASE % dict(data=data, limit=256, epochs=1, batch=32)).replace(
                "name: fashion_mnist", "name: mnist"))
            f.write("optimizer: {name: momentum, lr: 0.05, momentum: 0.9, nesterov: false, weight_decay: 0.0}\n")
            f.write("parallel: {mode: data_parallel, gradients_mean: true, parameter_broadcast: true, "
                    "bucket_size_mb: 1}\n")
        rc, out = pyutil.run(pyutil.mpirun(2) + [pyutil.tessera_bin(), "train", "c.yaml", "--set",
                                                 "data.shuffle_buffer=%d" % buffer], d)
        self.assertEqual(rc, 0, out)
        return d, [float(l) for _, l in pyutil.steps(os.path.join(d, "ck", "metrics.jsonl"))]

    def script(self, name, *args):
        d = os.path.join(self.dir, name)
        os.makedirs(d)
        rc, out = pyutil.run(pyutil.mpirun(2) + [sys.executable, os.path.join(SCRIPTS, "data_generator_parallel.py")]
                             + list(args), d)
        self.assertEqual(rc, 0, out)
        self.assertIn("rank 1 done", out)
        steps = re.findall(r"step (\d+) loss (\d+\.\d+(?:e-?\d+)?)", out)
        self.assertEqual([int(s) for s, _ in steps], list(range(1, 9)), out)
        return d, [float(v) for _, v in steps]

    def test_generator_as_idx_files(self):
        inv = os.path.join(self.dir, "inverted")
        os.makedirs(inv)
        images = read_idx("train-images-idx3-ubyte", 16, 256, (28, 28))
        labels = read_idx("train-labels-idx1-ubyte", 8, 256, ())
        for split in ("train", "t10k"):
            write_idx(os.path.join(inv, "%s-images-idx3-ubyte" % split), 255 - images)
            write_idx(os.path.join(inv, "%s-labels-idx1-ubyte" % split), labels)
        yd, yl = self.cli("y", inv, 24)
        pd, pl = self.script("p", "--buffer", "24")
        self.assertEqual(len(yl), 8)
        self.assertEqual(np.float32(yl).tolist(), np.float32(pl).tolist())
        pyutil.ckpt_equal(self, os.path.join(yd, "ck", "run-00000008.safetensors"),
                          os.path.join(pd, "ck", "run-00000008.safetensors"))
        # the comparison can fail: the original images (no Python map) train differently
        self.assertNotEqual(self.cli("plain", pyutil.FASHION, 24)[1], yl)


if __name__ == "__main__":
    unittest.main()
