"""ResNet-50 on CIFAR-10 with the tessera package: MindSpore's distributed-training tutorial
(data parallel, and automatic / semi-automatic parallel) ported nearly line for line.

    mpirun -n 4 /usr/bin/python3 examples/python/resnet50_cifar10.py --data DIR --parallel data
    mpirun -n 2 /usr/bin/python3 examples/python/resnet50_cifar10.py --data DIR --parallel semi
    mpirun -n 2 /usr/bin/python3 examples/python/resnet50_cifar10.py --data DIR --parallel auto
    /usr/bin/python3 examples/python/resnet50_cifar10.py --synthetic /tmp/cifar --samples 64 --epochs 1 --depth 20

DIR holds CIFAR-10's binary batches (data_batch_1..5.bin, test_batch.bin, from
cifar-10-binary.tar.gz). --synthetic DIR first writes CIFAR-10-shaped random batches there (the
machine has no CIFAR-10; for trying the program and for tests). The model is the C zoo's ResNet
(tessera.zoo.resnet50: torchvision's ResNet-50 with the CIFAR 3x3 stem); --depth picks another.
Differences from MindSpore's script: the per-device batch is .batch(n) as there, but the loss and
optimizer run in Tessera's C trainer; semi_auto's strategies are given for the classifier (the
zoo builds the network in C, so operator strategies come as parallel.strategies keys rather than
op.shard calls: see shard_custom_cell.py for op.shard on a network written in Python)."""
import argparse
import os
import sys

import numpy as np

import tessera as ts
from tessera import dataset as ds
from tessera import nn
from tessera.dataset import vision


def synthetic_cifar(d, n, seed=0):
    """CIFAR-10's binary layout: records of 1 label byte + 3072 pixel bytes (R, G, B planes); n
    training records over data_batch_1..5.bin and n/4 test records."""
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)

    def write(path, m):
        lab = rng.integers(0, 10, size=(m, 1), dtype=np.uint8)
        img = rng.integers(0, 256, size=(m, 3072), dtype=np.uint8)
        img[:, :1024] = np.clip(img[:, :1024].astype(int) // 2 + lab * 12, 0, 255)  # a learnable hint
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(np.concatenate([lab, img], axis=1).tobytes())
        os.replace(tmp, path)
    per = max(1, n // 5)
    for i in range(1, 6):
        write(os.path.join(d, "data_batch_%d.bin" % i), per)
    write(os.path.join(d, "test_batch.bin"), max(1, n // 4))


def create_dataset(path, usage, batch_size, rank_size, rank_id, samples=None):
    # MindSpore's create_dataset: shard over the devices, augment, normalize, HWC -> CHW, batch
    data = ds.Cifar10Dataset(path, usage=usage, num_shards=rank_size, shard_id=rank_id, shuffle=usage == "train",
                             num_samples=samples)
    trans = []
    if usage == "train":
        trans += [vision.RandomCrop((32, 32), (4, 4, 4, 4)), vision.RandomHorizontalFlip(prob=0.5)]
    trans += [vision.Rescale(1.0 / 255.0, 0.0), vision.Normalize([0.4914, 0.4822, 0.4465], [0.2023, 0.1994, 0.2010]),
              vision.HWC2CHW()]
    data = data.map(operations=trans, input_columns="image")
    data = data.map(operations=ds.transforms.TypeCast(np.int32), input_columns="label")
    return data.batch(batch_size, drop_remainder=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data")
    ap.add_argument("--synthetic")
    ap.add_argument("--samples", type=int, default=0,
                    help="use only the first N training samples and the first N test samples (a quick try)")
    ap.add_argument("--parallel", choices=["data", "semi", "auto"], default="data")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32, help="per device")
    ap.add_argument("--depth", type=int, default=50)
    ap.add_argument("--ckpt", default="")
    ap.add_argument("--cluster", default="local",
                    help="auto: the cluster searched for (local: `tessera calibrate`'s measurement, else a built-in estimate; or dgx-a100-80g, ...)")
    a = ap.parse_args()
    ts.init()
    rank, size = ts.get_rank(), ts.get_group_size()
    path = a.data
    if a.synthetic:
        if rank == 0:
            synthetic_cifar(a.synthetic, max(a.samples, 64))
        path = a.synthetic
        if size > 1:  # the other ranks wait for rank 0's files
            import time
            while not os.path.exists(os.path.join(path, "test_batch.bin")):
                time.sleep(0.05)
    if not path:
        ap.error("--data DIR or --synthetic DIR")
    ts.set_context(mode=ts.GRAPH_MODE, device_target="CPU", seed=1)
    config = {"train.log_every": 1}
    if a.parallel == "data":
        ts.set_auto_parallel_context(parallel_mode=ts.ParallelMode.DATA_PARALLEL, gradients_mean=True,
                                     device_num=size)
        shards, shard = size, rank
    elif a.parallel == "semi":
        ts.set_auto_parallel_context(parallel_mode=ts.ParallelMode.SEMI_AUTO_PARALLEL, device_num=size,
                                     full_batch=True)
        # the classifier column-parallel over the devices (model parallel), the rest replicated
        config["parallel.strategies"] = {"fc.dense": "((1,1),(%d,1),(%d,))" % (size, size)}
        shards, shard = None, None
    else:
        ts.set_auto_parallel_context(parallel_mode=ts.ParallelMode.AUTO_PARALLEL, device_num=size,
                                     search_mode="dynamic_programming", cluster=a.cluster)
        shards, shard = size, rank
    data = create_dataset(path, "train", a.batch, shards, shard, a.samples or None)
    net = ts.zoo.resnet(a.depth, class_num=10)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), 0.01, 0.9)
    model = ts.Model(net, loss_fn=loss, optimizer=opt, metrics={"acc"}, config=config)
    cbs = [ts.LossMonitor(1), ts.TimeMonitor()]
    if a.ckpt:
        cbs.append(ts.ModelCheckpoint(prefix="resnet", directory=a.ckpt,
                                      config=ts.CheckpointConfig(save_checkpoint_steps=0, keep_checkpoint_max=1)))
    model.train(a.epochs, data, callbacks=cbs)
    test = create_dataset(path, "test", a.batch, shards, shard, a.samples or None)
    r = model.eval(test)
    if rank == 0:
        print("accuracy: %.4f" % r["acc"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
