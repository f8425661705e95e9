"""The tessera Python package's cost against the CLI on the same training run: an MLP 784-512-256-10
(written as a Python Cell, with a Python step callback) on the first 25,600 Fashion-MNIST images,
batch 128, 1 epoch (200 steps), momentum, against `tessera train` of the zoo's mlp with the same
keys (the runs are bitwise identical: tests/python/test_pyapi.py). Timed from outside:

    OMP_NUM_THREADS=1 build/tessera --version >/dev/null
    /usr/bin/python3 bench/bench_python.py --write-yaml /tmp/bp.yaml
    PYTHONPATH=build/python OMP_NUM_THREADS=1 farm-bench -n 5 --timeout 300 \\
        --vs 'build/tessera train /tmp/bp.yaml' -- /usr/bin/python3 bench/bench_python.py

The ratio is the whole process (interpreter start, import, the callback per step) over the CLI's.
--callbacks 0 drops the Python step callback. --loop functional trains the same 200 steps as
MindSpore 2.x's quickstart does (value_and_grad, then optimizer(grads), over the data set's
create_tuple_iterator in Python), --loop onestep through nn.TrainOneStepCell; against Model.train:

    PYTHONPATH=build/python OMP_NUM_THREADS=1 farm-bench -n 5 --timeout 300 \
        --vs '/usr/bin/python3 bench/bench_python.py --callbacks 0' -- /usr/bin/python3 bench/bench_python.py --loop functional
"""
import argparse
import sys

DATA = "/usr/share/datasets/fashion-mnist"
YAML = """model: {name: mlp, hidden: [512, 256]}
data:
  name: fashion_mnist
  path: %s
  train_limit: 25600
  test_limit: 1000
  transforms: [{name: to_float, scale: 0.00392156862745098}, {name: normalize, mean: [0.2860], std: [0.3530]}, hwc_to_chw]
train: {epochs: 1, batch_size: 128, eval_batch_size: 128, seed: 1, eval_every: -1}
optimizer: {name: momentum, lr: 0.05, momentum: 0.9, nesterov: false, weight_decay: 0.0}
log: {progress: off}
""" % DATA


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--write-yaml")
    ap.add_argument("--callbacks", type=int, default=1)
    ap.add_argument("--loop", choices=("model", "functional", "onestep"), default="model")
    a = ap.parse_args()
    if a.write_yaml:
        with open(a.write_yaml, "w") as f:
            f.write(YAML)
        return 0
    import tessera as ts
    from tessera import dataset as ds, nn
    from tessera.dataset import vision

    class MLP(nn.Cell):
        def __init__(self):
            super().__init__()
            self.flatten = nn.Flatten()
            self.fc1 = nn.Dense(784, 512, activation="relu")
            self.fc2 = nn.Dense(512, 256, activation="relu")
            self.fc3 = nn.Dense(256, 10)

        def construct(self, x):
            return self.fc3(self.fc2(self.fc1(self.flatten(x))))

    class Count(ts.Callback):
        n = 0

        def step_end(self, rc):
            Count.n += 1
            rc.original_args().net_outputs

    ts.init()
    ts.set_seed(1)
    d = ds.FashionMnistDataset(DATA, usage="train", num_samples=25600, shuffle=True)
    d = d.map([vision.Rescale(1.0 / 255), vision.Normalize([0.2860], [0.3530]), vision.HWC2CHW()]).batch(128)
    net = MLP()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), 0.05, 0.9)
    if a.loop == "functional":
        grad_fn = ts.value_and_grad(lambda x, y: loss(net(x), y), None, opt.parameters)
        for x, y in d.create_tuple_iterator():
            _, grads = grad_fn(x, y)
            opt(grads)
        return 0
    if a.loop == "onestep":
        step = nn.TrainOneStepCell(nn.WithLossCell(net, loss), opt)
        for x, y in d.create_tuple_iterator():
            step(x, y)
        return 0
    m = ts.Model(net, loss, opt, config={"data.test_limit": 1000})
    m.train(1, d, callbacks=[Count()] if a.callbacks else [])
    return 0


if __name__ == "__main__":
    sys.exit(main())
