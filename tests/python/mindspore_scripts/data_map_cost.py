"""What a GeneratorDataset costs per sample: one pass over N Fashion-MNIST-shaped samples
(uint8 (28,28,1) + label) from numpy arrays, batch 64, against the C source of the same samples
(FashionMnistDataset, on uncompressed IDX copies of them). Prints microseconds per sample (median of --repeat passes; under
TESSERA_MAX_STEPS=N at most N passes over 64 (N + 1) samples, as the docs test runs it) for: the C
source; the Python source; the Python source + one Python map function (identity); + a numpy
map function (x.astype(np.float32) / 255). Run:
  PYTHONPATH=build/python OMP_NUM_THREADS=1 /usr/bin/python3 tests/python/mindspore_scripts/data_map_cost.py"""
import argparse
import atexit
import gzip
import os
import shutil
import struct
import tempfile
import time

import numpy as np

import tessera.dataset as ds

p = argparse.ArgumentParser()
p.add_argument("--n", type=int, default=20000)
p.add_argument("--repeat", type=int, default=5)
p.add_argument("--workers", type=int, default=1)
p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
a = p.parse_args()
cap = os.environ.get("TESSERA_MAX_STEPS", "")
if cap.isdigit() and int(cap) > 0:  # a shortened run (the docs test's): N passes of N batches
    a.repeat, a.n = min(a.repeat, int(cap)), min(a.n, 64 * (int(cap) + 1))
    print("TESSERA_MAX_STEPS=%s: %d passes over %d samples (figures not meaningful)" % (cap, a.repeat, a.n))


def read(name, off, shape):
    path = os.path.join(a.data, name)
    raw = open(path, "rb").read() if os.path.exists(path) else gzip.open(path + ".gz").read()
    return np.frombuffer(raw, np.uint8, a.n * int(np.prod(shape)), off).reshape((a.n,) + shape)


X, Y = read("train-images-idx3-ubyte", 16, (28, 28, 1)), read("train-labels-idx1-ubyte", 8, ())
# the C source reads uncompressed copies of the same N samples: its figure is the pipeline's cost
# per sample, not zlib's (the packaged files are gzip: inflating is about 4 us a sample, paid as
# the samples are first read)
PLAIN = tempfile.mkdtemp(prefix="data_map_cost-")
atexit.register(shutil.rmtree, PLAIN, True)
for split, n in (("train", a.n), ("t10k", 64)):  # (the test split: the data set's folder needs one)
    with open(os.path.join(PLAIN, split + "-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28) + X[:n].tobytes())
    with open(os.path.join(PLAIN, split + "-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + Y[:n].tobytes())


class Source:
    def __getitem__(self, i):
        return X[i], Y[i]

    def __len__(self):
        return a.n


def seconds(d, n):
    ts = []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        got = sum(len(row[1]) for row in d.create_tuple_iterator())
        ts.append(time.perf_counter() - t0)
        assert got == n, got
    return sorted(ts)[len(ts) // 2]


def per_sample(d):
    return seconds(d, a.n) / a.n * 1e6


w = a.workers
cases = [("C source (FashionMnistDataset)", ds.FashionMnistDataset(PLAIN, num_samples=a.n, shuffle=False,
                                                                    num_parallel_workers=w)),
         ("Python source", ds.GeneratorDataset(Source(), ["image", "label"], shuffle=False, num_parallel_workers=w)),
         ("Python source + map(identity)", ds.GeneratorDataset(Source(), ["image", "label"], shuffle=False,
                                                               num_parallel_workers=w).map(lambda x: x)),
         ("Python source + map(x.astype(float32) / 255)",
          ds.GeneratorDataset(Source(), ["image", "label"], shuffle=False, num_parallel_workers=w).map(
              lambda x: x.astype(np.float32) / 255))]
# the C source opens its files at every pass (headers, labels, the first images): that time,
# measured on a pass of 64 samples, is left out of its figure
fixed = seconds(ds.FashionMnistDataset(PLAIN, num_samples=64, shuffle=False).batch(64), 64)
c = (seconds(cases[0][1].batch(64), a.n) - fixed) / (a.n - 64) * 1e6
print("%-46s %6.2f us/sample (its files' loading, %.3f s a pass, left out)" % (cases[0][0], c, fixed))
for name, d in cases[1:]:
    print("%-46s %6.2f us/sample" % (name, per_sample(d.batch(64))), flush=True)
