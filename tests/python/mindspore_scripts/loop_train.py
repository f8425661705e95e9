"""MindSpore's custom training loop under mpirun -n 2, data parallel (only the import lines
changed): nn.TrainOneStepCell(nn.WithLossCell(net, loss), opt) called per batch of the rank's
shard, then the same through Model.train; prints both runs' losses for test_ms_checkpoints.py.

usage: loop_train.py DATA"""
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

init()
rank, size = get_rank(), get_group_size()
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flat = nn.Flatten()
        self.fc1 = nn.Dense(784, 32)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(32, 10)

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(self.flat(x))))


def data():
    d = ds.FashionMnistDataset(sys.argv[1], usage="train", num_samples=192, shuffle=False, num_shards=size,
                               shard_id=rank)
    return d.map([vision.Rescale(1 / 255), vision.HWC2CHW()], input_columns="image").batch(16)


loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
net = Net()
train_net = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.Momentum(net.trainable_params(), 0.01, 0.9))
train_net.set_train()
a = [float(train_net(d["image"], d["label"]).asnumpy()) for d in data().create_dict_iterator(output_numpy=True)]


class Losses(ms.Callback):
    def __init__(self):
        self.v = []

    def on_train_step_end(self, rc):
        self.v.append(rc.original_args().net_outputs)


net2 = Net()
cb = Losses()
ms.Model(net2, loss, nn.Momentum(net2.trainable_params(), 0.01, 0.9)).train(1, data(), callbacks=[cb])
say("rank %d loop %r" % (rank, a))
say("rank %d model %r" % (rank, cb.v))
