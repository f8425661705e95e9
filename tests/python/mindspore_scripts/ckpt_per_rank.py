"""MindSpore's checkpoint habits under mpirun -n 2, written as a MindSpore user writes them (only
the import lines changed): a checkpoint directory per rank, saving from rank 0 only, evaluating
on another data set, and CheckpointConfig(integrated_save=...). Run by test_ms_checkpoints.py.

usage: ckpt_per_rank.py MODE CASE DATA   (MODE: data_parallel | semi_auto_parallel | unset)"""
import os
import sys

import tessera as ms
from tessera import nn
import tessera.dataset as ds
import tessera.dataset.vision as vision
from tessera.communication import init, get_rank, get_group_size


def say(line):
    """One line in one write: mpirun interleaves the ranks' print() output."""
    os.write(1, (line + "\n").encode())

mode, case = sys.argv[1], sys.argv[2]
init()
rank, size = get_rank(), get_group_size()
if mode != "unset":  # unset: MindSpore's stand_alone default on 2 ranks, refused by Model
    ms.set_auto_parallel_context(parallel_mode=mode, gradients_mean=True, full_batch=(mode != "data_parallel"))


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flat = nn.Flatten()
        self.fc1 = nn.Dense(784, 32)
        if mode == "semi_auto_parallel":
            self.fc1.matmul.shard(((1, 1), (size, 1)))  # the weight cut by rows over the ranks
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(32, 10)

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(self.flat(x))))


def data(usage, n, batch):
    if mode == "data_parallel":
        d = ds.FashionMnistDataset(sys.argv[3], usage=usage, num_samples=n, num_shards=size, shard_id=rank)
    else:
        d = ds.FashionMnistDataset(sys.argv[3], usage=usage, num_samples=n)
    return d.map([vision.Rescale(1 / 255), vision.HWC2CHW()], input_columns="image").batch(batch)


net = Net()
opt = nn.Momentum(net.trainable_params(), 0.01, 0.9)
model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), opt, metrics={"acc", "loss"},
                 config={"parallel.comm_timeout": 5})
integrated = {"whole": True, "sliced": False, "sliced_same": False}.get(case)
cfg = ms.CheckpointConfig(save_checkpoint_steps=4, keep_checkpoint_max=5, integrated_save=integrated)
if case in ("dirs", "whole", "sliced"):
    directory = "./ckpt_" + str(rank)              # the tutorials' advice: a directory per rank
else:
    directory = "./ckpt"
try:
    model.train(1, data("train", 256 if mode == "data_parallel" else 128, 16), callbacks=[ms.ModelCheckpoint("net", directory, cfg)])
except ValueError as e:
    say("rank %d refused: %s" % (rank, e))
    sys.exit(0)
if case == "dirs":
    say("rank %d eval %s" % (rank, model.eval(data("test", 64, 16))))
if case == "rank0":
    if rank == 0:                                  # the common MindSpore pattern
        ms.save_checkpoint(net, "rank0.safetensors")
if case == "every":
    ms.save_checkpoint(net, "every_%d.safetensors" % rank)
if case == "load_one":                           # a collective call failing on one rank only
    ms.save_checkpoint(net, "present.safetensors")
    net._trainer.load("present.safetensors" if rank == 0 else "missing.safetensors")
say("rank %d done" % rank)
