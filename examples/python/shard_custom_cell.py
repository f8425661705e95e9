"""Operator-level parallelism on a network written in Python: MindSpore's operator-parallel
tutorial (a 3-layer MLP on Fashion-MNIST whose MatMuls carry shard strategies) with the tessera
package.

    mpirun -n 2 /usr/bin/python3 examples/python/shard_custom_cell.py
    mpirun -n 4 /usr/bin/python3 examples/python/shard_custom_cell.py --epochs 2
    /usr/bin/python3 examples/python/shard_custom_cell.py          (one process: the strategies are ignored)

With N ranks: matmul1 is column-parallel ((1, 1), (1, N)) (fc1's 512 outputs cut N ways), relu1
follows its cut ((1, N),), matmul2 row-parallel ((1, N), (N, 1)) (the partial sums all-reduced by
the parallel pass), the rest replicated. Parameters are MindSpore's (in, out) matrices created
with Parameter(shape, "normal"), named by attribute (fc1, fc2, fc3). --samples/--batch keep it tiny."""
import argparse
import sys

import tessera as ts
from tessera import dataset as ds
from tessera import nn, ops
from tessera.dataset import vision


class Network(nn.Cell):
    def __init__(self, n):
        super().__init__()
        self.flatten = ops.Flatten()
        self.fc1 = ts.Parameter((28 * 28, 512), "normal", sigma=0.05)
        self.fc2 = ts.Parameter((512, 512), "normal", sigma=0.05)
        self.fc3 = ts.Parameter((512, 10), "normal", sigma=0.05)
        self.matmul1 = ops.MatMul().shard(((1, 1), (1, n)))
        self.relu1 = ops.ReLU().shard(((1, n),))
        self.matmul2 = ops.MatMul().shard(((1, n), (n, 1)))
        self.relu2 = ops.ReLU()
        self.matmul3 = ops.MatMul()

    def construct(self, x):
        x = self.flatten(x)
        x = self.relu1(self.matmul1(x, self.fc1))
        x = self.relu2(self.matmul2(x, self.fc2))
        return self.matmul3(x, self.fc3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64, help="global (every rank reads the whole batch: full_batch)")
    ap.add_argument("--samples", type=int, default=0)
    ap.add_argument("--metrics", default="")
    a = ap.parse_args()
    ts.init()
    n = ts.get_group_size()
    ts.set_context(mode=ts.GRAPH_MODE, seed=1)
    if n > 1:
        ts.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=n, full_batch=True)
    data = ds.FashionMnistDataset(a.data, usage="train", shuffle=True, num_samples=a.samples or None)
    data = data.map([vision.Rescale(1.0 / 255), vision.Normalize([0.2860], [0.3530]), vision.HWC2CHW()],
                    input_columns="image").batch(a.batch)
    net = Network(n)
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    cfg = {"train.log_every": 1, "data.test_limit": 1000}
    if a.metrics:
        cfg["log.metrics"] = a.metrics
    model = ts.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), opt,
                     metrics={"acc", "loss"}, config=cfg)
    model.train(a.epochs, data, callbacks=[ts.LossMonitor(10)])
    test = ds.FashionMnistDataset(a.data, usage="test", num_samples=1000).map(
        [vision.Rescale(1.0 / 255), vision.Normalize([0.2860], [0.3530]), vision.HWC2CHW()]).batch(a.batch)
    r = model.eval(test)
    if ts.get_rank() == 0:
        print("eval: %s" % r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
