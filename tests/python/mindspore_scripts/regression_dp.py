"""A regression under data parallel (run by test_ms_regression.py with mpirun -n 2, and on one
process): a Dense(4, 3) from given weights trained with MSELoss on float32 targets, the data
sharded with num_shards/shard_id as MindSpore scripts do (gradients_mean=True: each rank's 8 rows
are half of the one process's batch of 16). Prints one JSON line on rank 0: the step losses and
the final parameters. usage: regression_dp.py"""
import json
import os
import sys

import numpy as np
import tessera as ms
from tessera import nn
import tessera.dataset as ds
from tessera.communication import get_group_size, get_rank, init

init()
size, rank = get_group_size(), get_rank()
if size > 1:
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
rng = np.random.default_rng(11)
X = rng.standard_normal((64, 4)).astype(np.float32)
Y = (X @ rng.standard_normal((4, 3)) + 0.1 * rng.standard_normal((64, 3))).astype(np.float32)
W0 = (rng.standard_normal((3, 4)) * 0.3).astype(np.float32)


class Src:
    def __getitem__(self, i):
        return X[i], Y[i]

    def __len__(self):
        return len(X)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 3, weight_init=ms.Tensor(W0), bias_init="zeros")

    def construct(self, x):
        return self.fc(x)


net = Net()
model = ms.Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.05, 0.9))
losses = []


class Rec(ms.Callback):
    def on_train_step_end(self, rc):
        losses.append(float(rc.original_args().net_outputs))


data = ds.GeneratorDataset(Src(), ["data", "label"], shuffle=False, num_shards=size, shard_id=rank).batch(16 // size)
model.train(2, data, callbacks=[Rec()])
if rank == 0:
    p = net._trainer.params()
    os.write(1, (json.dumps({"losses": losses, "w": np.asarray(p["fc.weight"]).tolist(),
                             "b": np.asarray(p["fc.bias"]).tolist()}) + "\n").encode())
sys.stdout.flush()
