"""MindSpore's data-parallel tutorial fed from numpy through GeneratorDataset, ported by changing
only the imports: run as `mpirun -n 2 python3 data_generator_parallel.py [--buffer N] [--shards]`.
The first 256 Fashion-MNIST images are read with numpy; a random-access source class serves
them; a Python function inverts each image (map, run by the pipeline's workers); vision.* ops
rescale, normalise and transpose; the set is sharded with DistributedSampler (--shards:
num_shards / shard_id instead). test_ms_data.py compares the losses and the checkpoint with
`tessera train` on IDX files of the inverted images: bitwise the same."""
import argparse
import gzip
import os

import numpy as np

import tessera as ms
from tessera import nn
from tessera import dtype as mstype
from tessera.communication import get_group_size, get_rank, init
import tessera.dataset as ds
import tessera.dataset.transforms as transforms
import tessera.dataset.vision as vision

parser = argparse.ArgumentParser()
parser.add_argument("--buffer", type=int, default=0)
parser.add_argument("--shards", action="store_true")
parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
args = parser.parse_args()

ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
init()
ms.set_seed(3)
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True,
                             device_num=get_group_size(), parameter_broadcast=True,
                             comm_fusion={"allreduce": {"mode": "size", "config": 1}})


def read_idx(name, offset, count, shape):
    path = os.path.join(args.data, name)
    op = gzip.open if not os.path.exists(path) else open
    with op(path if os.path.exists(path) else path + ".gz", "rb") as f:
        raw = f.read()
    return np.frombuffer(raw, np.uint8, count * int(np.prod(shape)), offset).reshape((count,) + shape)


class FashionSource:
    """A random-access source over numpy arrays, as MindSpore's tutorials write them."""

    def __init__(self, n):
        self.images = read_idx("train-images-idx3-ubyte", 16, n, (28, 28, 1))
        self.labels = read_idx("train-labels-idx1-ubyte", 8, n, ()).astype(np.int32)

    def __getitem__(self, index):
        return self.images[index], self.labels[index]

    def __len__(self):
        return len(self.labels)


def invert(image):
    return 255 - image


def create_dataset(batch_size):
    rank_id, rank_size = get_rank(), get_group_size()
    if args.shards:
        data = ds.GeneratorDataset(FashionSource(256), ["image", "label"], shuffle=True, num_shards=rank_size,
                                   shard_id=rank_id)
    else:
        sampler = ds.DistributedSampler(num_shards=rank_size, shard_id=rank_id, shuffle=True)
        data = ds.GeneratorDataset(FashionSource(256), ["image", "label"], sampler=sampler)
    data = data.map(operations=invert, input_columns="image")
    data = data.map(operations=[vision.Rescale(1.0 / 255.0, 0), vision.Normalize(mean=(0.2860,), std=(0.3530,)),
                                vision.HWC2CHW()], input_columns="image")
    data = data.map(operations=transforms.TypeCast(mstype.int32), input_columns="label")
    if args.buffer:
        data = data.shuffle(buffer_size=args.buffer)
    return data.batch(batch_size, drop_remainder=True)


class Network(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(28 * 28, 64)
        self.fc2 = nn.Dense(64, 32)
        self.fc3 = nn.Dense(32, 10)
        self.relu = nn.ReLU()

    def construct(self, x):
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


class StepLoss(ms.Callback):
    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        if get_rank() == 0:
            os.write(1, ("step %d loss %r" % (cb.cur_step_num, float(cb.net_outputs)) + "\n").encode())  # one write: mpirun interleaves print()


data_set = create_dataset(32 // get_group_size())
net = Network()
loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9)
model = ms.Model(net, loss_fn=loss_fn, optimizer=optimizer)
config = ms.CheckpointConfig(save_checkpoint_steps=8)
model.train(1, data_set, callbacks=[StepLoss(), ms.ModelCheckpoint(prefix="run", directory="ck", config=config)])
os.write(1, ("rank %d done" % get_rank() + "\n").encode())  # one write: mpirun interleaves print()
