#!/usr/bin/env python3
"""A CIFAR-10-format folder from Debian's Fashion-MNIST, for the CIFAR examples without a download.

Writes OUT/data_batch_1.bin .. data_batch_5.bin and OUT/test_batch.bin in CIFAR-10's binary format
(each record: 1 label byte, then 1024 red, 1024 green, 1024 blue bytes of a 32x32 image): each
28x28 Fashion-MNIST image padded by 2 pixels of 0 and repeated in the three planes, its label
(0-9) kept. The real CIFAR-10 (https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz) is read
the same way; this one trains and evaluates the CIFAR configs (examples/resnet*_cifar10.yaml) on a
machine with no network. Written whole or not at all (temp names, renamed at the end).

Usage: scripts/make-cifar.py [OUT] [--train N] [--test N] [--input DIR]
  OUT      the folder (default data/cifar-10-batches-bin)
  --train  training images, split over the five batches (default 50000, at most 60000)
  --test   test images (default 10000)
  --input  the Fashion-MNIST folder (default /usr/share/datasets/fashion-mnist, Debian's
           dataset-fashion-mnist package)
"""
import argparse
import gzip
import os
import sys


def read_idx(path, magic):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        d = f.read()
    if int.from_bytes(d[:4], "big") != magic:
        sys.exit("make-cifar: %s: not an IDX file (magic %08x)" % (path, int.from_bytes(d[:4], "big")))
    n = int.from_bytes(d[4:8], "big")
    return n, d


def find(folder, stem):
    for name in (stem, stem + ".gz"):
        p = os.path.join(folder, name)
        if os.path.exists(p):
            return p
    sys.exit("make-cifar: %s has no %s[.gz] (install Debian's dataset-fashion-mnist, or pass --input)"
             % (folder, stem))


def records(folder, split, count):
    n, img = read_idx(find(folder, "%s-images-idx3-ubyte" % split), 0x803)
    m, lab = read_idx(find(folder, "%s-labels-idx1-ubyte" % split), 0x801)
    if count > n or n != m:
        sys.exit("make-cifar: %s split has %d images and %d labels, %d asked" % (split, n, m, count))
    zero_rows = bytes(32 * 2)
    for i in range(count):
        px = img[16 + i * 784: 16 + (i + 1) * 784]
        plane = bytearray(zero_rows)
        for r in range(28):
            plane += b"\0\0" + px[r * 28:(r + 1) * 28] + b"\0\0"
        plane += zero_rows
        yield bytes([lab[8 + i]]) + bytes(plane) * 3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?", default="data/cifar-10-batches-bin")
    ap.add_argument("--train", type=int, default=50000)
    ap.add_argument("--test", type=int, default=10000)
    ap.add_argument("--input", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    if not 5 <= a.train <= 60000 or not 1 <= a.test <= 10000:
        sys.exit("make-cifar: --train must be in [5, 60000] and --test in [1, 10000]")
    os.makedirs(a.out, exist_ok=True)
    tr = records(a.input, "train", a.train)
    files = []
    per = [a.train // 5 + (1 if k < a.train % 5 else 0) for k in range(5)]
    jobs = [("data_batch_%d.bin" % (k + 1), tr, per[k]) for k in range(5)]
    jobs.append(("test_batch.bin", records(a.input, "t10k", a.test), a.test))
    try:
        for name, it, cnt in jobs:
            tmp = os.path.join(a.out, ".%s.tmp" % name)
            files.append((tmp, os.path.join(a.out, name)))
            with open(tmp, "wb") as f:
                for _ in range(cnt):
                    f.write(next(it))
        for tmp, final in files:
            os.replace(tmp, final)
    except BaseException:
        for tmp, _ in files:
            if os.path.exists(tmp):
                os.unlink(tmp)
        raise
    print("%s: %d training images in data_batch_1..5.bin, %d in test_batch.bin (Fashion-MNIST as CIFAR-10 "
          "records, 32x32x3)" % (a.out, a.train, a.test))


if __name__ == "__main__":
    main()
