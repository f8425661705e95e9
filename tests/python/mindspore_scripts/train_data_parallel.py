"""MindSpore's data-parallel tutorial, ported by changing only the imports (`import tessera as ms`):
run as `mpirun -n 2 python3 train_data_parallel.py [--no-mean] [--buffer N]`. The MLP's cells are
named as Tessera's zoo mlp (fc1, fc2, fc3), so test_mindspore_scripts.py compares this run with
`tessera train` of the same model and keys. --no-mean: gradients_mean not given (MindSpore's
default, False)."""
import os
import argparse

import tessera as ms
from tessera import nn
from tessera import dtype as mstype
from tessera.communication import get_group_size, get_rank, init
import tessera.dataset as ds
import tessera.dataset.transforms as transforms
import tessera.dataset.vision as vision

parser = argparse.ArgumentParser()
parser.add_argument("--no-mean", action="store_true")
parser.add_argument("--buffer", type=int, default=0)
args = parser.parse_args()

ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
init()
ms.set_seed(3)
context = dict(parallel_mode=ms.ParallelMode.DATA_PARALLEL, device_num=get_group_size(), parameter_broadcast=True,
               comm_fusion={"allreduce": {"mode": "size", "config": 1}}, dataset_strategy="data_parallel",
               gradient_fp32_sync=True, loss_repeated_mean=True)
if not args.no_mean:
    context["gradients_mean"] = True
ms.set_auto_parallel_context(**context)


def create_dataset(batch_size):
    rank_id, rank_size = get_rank(), get_group_size()
    data = ds.FashionMnistDataset("/usr/share/datasets/fashion-mnist", usage="train", num_samples=256,
                                  num_shards=rank_size, shard_id=rank_id)
    image_transforms = transforms.Compose([vision.Rescale(1.0 / 255.0, 0), vision.Normalize(mean=(0.2860,), std=(0.3530,)),
                                           vision.HWC2CHW()])
    data = data.map(operations=image_transforms, input_columns="image")
    data = data.map(operations=transforms.TypeCast(mstype.int32), input_columns="label")
    if args.buffer:
        data = data.shuffle(buffer_size=args.buffer)
    data = data.batch(batch_size, drop_remainder=True)
    return data.repeat(1)


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
