"""MindSpore's hybrid-parallel (manual) network written as a Cell, the way a MindSpore user writes
it with only the imports changed, plus Tessera's one extension (shard_axis=, the dimension the
ranks cut, so checkpoints hold the whole tensor):

    x (B,16) -> x @ w1[:, block r]  (column-parallel, layerwise_parallel: each rank its slice)
             -> relu -> @ w2[block r, :]  (row-parallel: a partial sum)
             -> AllReduce(SUM) placed by hand -> + bias (replicated) -> softmax cross-entropy

    mpirun -n N python3 hybrid_train.py hybrid OUT [--no-mean] [--lr LR] [--gather] [--device GPU]
    python3 hybrid_train.py single OUT [--lr LR] [--load CKPT]       (the same network, one process)
    python3 hybrid_train.py refusals OUT                              (every refusal's message)

`hybrid` trains under set_auto_parallel_context(parallel_mode="hybrid_parallel") (gradients_mean
and full_batch left unset: Tessera's hybrid defaults, every rank reads the whole batch, its loss
seeded 1/N, gradients of the bias summed over the ranks; --no-mean sets gradients_mean=False) and
writes OUT/losses.json (rank 0), OUT/whole.safetensors (save_checkpoint, every rank calls it),
OUT/ck/ (ModelCheckpoint, integrated_save=True: whole), OUT/eval.json (Model.eval) and
OUT/predict.npy (Model.predict). `single`
trains the unsharded network (the same parameter names, so the same initial values) and writes
the same files; with --load it loads CKPT into the one-process network first and only predicts."""
import argparse
import json
import os
import sys

import numpy as np

import tessera as ms
from tessera import nn, ops
from tessera.communication import GlobalComm, get_group_size, get_rank, init
import tessera.dataset as ds

parser = argparse.ArgumentParser()
parser.add_argument("mode", choices=["hybrid", "single", "refusals"])
parser.add_argument("out")
parser.add_argument("--no-mean", action="store_true")
parser.add_argument("--lr", type=float, default=0.2)
parser.add_argument("--load")
parser.add_argument("--gather", action="store_true", help="hybrid: GatherNet (AllGather, ReduceScatter)")
parser.add_argument("--device", default="CPU", choices=["CPU", "GPU"], help="set_context's device_target")
args = parser.parse_args()

ms.set_context(mode=ms.GRAPH_MODE, device_target=args.device)
init()
ms.set_seed(5)
RANK, SIZE = get_rank(), get_group_size()
B, IN, HID, NC = 8, 16, 32, 10


class Source:
    """48 samples: x ~ N(0, 1), labels from a fixed projection (random-access source)."""

    def __init__(self):
        rng = np.random.RandomState(0)
        self.x = rng.randn(48, IN).astype(np.float32)
        self.y = np.argmax(self.x @ rng.randn(IN, NC), axis=1).astype(np.int32)

    def __getitem__(self, i):
        return self.x[i], self.y[i]

    def __len__(self):
        return len(self.x)


class HybridNet(nn.Cell):
    def __init__(self):
        super().__init__()
        n = get_group_size()
        self.w1 = ms.Parameter((IN, HID // n), "normal", sigma=0.4, layerwise_parallel=True, shard_axis=1)
        self.w2 = ms.Parameter((HID // n, NC), "normal", sigma=0.3, layerwise_parallel=True, shard_axis=0)
        self.bias = ms.Parameter((NC,), "uniform", scale=0.5)
        self.matmul1 = ops.MatMul()
        self.matmul2 = ops.MatMul()
        self.relu = ops.ReLU()
        self.all_reduce = ops.AllReduce(ops.ReduceOp.SUM, GlobalComm.WORLD_COMM_GROUP)
        self.add = ops.Add()

    def construct(self, x):
        h = self.relu(self.matmul1(x, self.w1))
        z = self.all_reduce(self.matmul2(h, self.w2))
        return self.add(z, self.bias)


class GatherNet(nn.Cell):
    """The same function through AllGather and ReduceScatter: the column-parallel hidden units
    gathered whole (AllGather concatenates along dim 0, so along the transposed units), a whole
    (replicated) w2, then the logits' rows scattered (ReduceScatter MEAN of the ranks' equal
    logits: this rank's block of rows) and gathered back."""

    def __init__(self):
        super().__init__()
        n = get_group_size()
        self.w1 = ms.Parameter((IN, HID // n), "normal", sigma=0.4, layerwise_parallel=True, shard_axis=1)
        self.w2 = ms.Parameter((HID, NC), "normal", sigma=0.3)
        self.bias = ms.Parameter((NC,), "uniform", scale=0.5)
        self.matmul = ops.MatMul()
        self.relu = ops.ReLU()
        self.transpose = ops.Transpose()
        self.gather = ops.AllGather()
        self.scatter = ops.ReduceScatter(ops.ReduceOp.MEAN)

    def construct(self, x):
        h = self.relu(self.matmul(x, self.w1))                                    # (B, HID/n)
        h = self.transpose(self.gather(self.transpose(h, (1, 0))), (1, 0))        # (B, HID)
        z = self.matmul(h, self.w2) + self.bias                                   # (B, NC), equal on every rank
        return self.gather(self.scatter(z))


class SingleNet(nn.Cell):
    """The same network on one process: whole w1, w2, no AllReduce."""

    def __init__(self):
        super().__init__()
        self.w1 = ms.Parameter((IN, HID), "normal", sigma=0.4)
        self.w2 = ms.Parameter((HID, NC), "normal", sigma=0.3)
        self.bias = ms.Parameter((NC,), "uniform", scale=0.5)
        self.matmul = ops.MatMul()
        self.relu = ops.ReLU()

    def construct(self, x):
        return self.matmul(self.relu(self.matmul(x, self.w1)), self.w2) + self.bias


class Losses(ms.Callback):
    def __init__(self):
        self.losses = []

    def on_train_step_end(self, run_context):
        self.losses.append(float(run_context.original_args().net_outputs))


def dataset():
    return ds.GeneratorDataset(Source(), column_names=["data", "label"], shuffle=False).batch(B)


def model_of(net):
    return ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                    nn.Momentum(net.trainable_params(), learning_rate=args.lr, momentum=0.9),
                    metrics={"acc", "loss"}, config={"model.num_classes": NC})


def write(name, obj):
    if RANK == 0:
        with open(os.path.join(args.out, name), "w") as f:
            json.dump(obj, f)


def train(net):
    model = model_of(net)
    rec = Losses()
    cfg = ms.CheckpointConfig(save_checkpoint_steps=6, integrated_save=True)
    model.train(1, dataset(), callbacks=[rec, ms.ModelCheckpoint(prefix="net", directory=os.path.join(args.out, "ck"),
                                                                 config=cfg)])
    write("losses.json", rec.losses)
    ms.save_checkpoint(net, os.path.join(args.out, "whole.safetensors"))  # every rank: gathered via the layouts
    write("eval.json", model.eval(dataset()))
    pred = model.predict(ms.Tensor(Source().x[:B]))
    if RANK == 0:
        np.save(os.path.join(args.out, "predict.npy"), pred)
    return model


def expect_error(fn, *needles):
    try:
        fn()
    except (ValueError, TypeError) as e:
        for n in needles:
            assert n in str(e), "%r not in %r" % (n, str(e))
        os.write(1, ("refused: %s" % e + "\n").encode())  # one write: mpirun interleaves print()
        return
    raise AssertionError("not refused: %s" % (needles,))


if args.mode == "hybrid":
    ctx = dict(parallel_mode=ms.ParallelMode.HYBRID_PARALLEL, device_num=SIZE)
    if args.no_mean:
        ctx["gradients_mean"] = False
    ms.set_auto_parallel_context(**ctx)
    assert ms.get_auto_parallel_context("full_batch") is True
    assert ms.get_auto_parallel_context("gradients_mean") is (not args.no_mean)
    net = GatherNet() if args.gather else HybridNet()
    model = train(net)
    p = net._trainer.params()  # this rank's slices
    w2 = (HID, NC) if args.gather else (HID // SIZE, NC)
    assert p["w1"].shape == (IN, HID // SIZE) and p["w2"].shape == w2 and p["bias"].shape == (NC,), \
        {k: v.shape for k, v in p.items()}
    os.write(1, ("rank %d done" % RANK + "\n").encode())  # one write: mpirun interleaves print()
elif args.mode == "single":
    net = SingleNet()
    if args.load:
        ms.load_param_into_net(net, ms.load_checkpoint(args.load))
        model = ms.Model(net)
        np.save(os.path.join(args.out, "predict_loaded.npy"), model.predict(ms.Tensor(Source().x[:B])))
    else:
        train(net)
    os.write(1, ("done" + "\n").encode())  # one write: mpirun interleaves print()
else:  # refusals, one process
    # layerwise_parallel outside hybrid_parallel, collectives outside hybrid_parallel
    for mode in ("stand_alone", "semi_auto_parallel"):
        ms.reset_auto_parallel_context()
        ms.set_auto_parallel_context(parallel_mode=mode)

        class Sliced(SingleNet):
            def __init__(self):
                super().__init__()
                self.w1 = ms.Parameter((IN, HID), "normal", layerwise_parallel=True, shard_axis=1)

        expect_error(lambda: model_of(Sliced()).train(1, dataset()), "layerwise_parallel=True", "hybrid_parallel",
                     repr(mode))

        class Reduced(SingleNet):
            def construct(self, x):
                return ops.AllReduce()(super().construct(x))

        expect_error(lambda: model_of(Reduced()).train(1, dataset()), "ops.AllReduce", "hybrid_parallel", repr(mode))
    expect_error(lambda: ms.Parameter((IN, HID), "normal", layerwise_parallel=True), "shard_axis=0..1")
    expect_error(lambda: ms.Parameter((IN, HID), "normal", shard_axis=1), "layerwise_parallel=True")
    expect_error(lambda: ms.Parameter((IN, HID), "normal", layerwise_parallel=True, shard_axis=2), "out of range")
    expect_error(lambda: ms.Parameter(ms.Tensor(np.arange(4, dtype=np.float32)), layerwise_parallel=True),
                 "initializer")
    expect_error(lambda: ops.AllReduce(group="my_group"), "only the world group")
    expect_error(lambda: ops.AllGather("my_group"), "only the world group")
    expect_error(lambda: ops.AllReduce(ops.ReduceOp.PROD), "PROD")
    expect_error(lambda: ops.AllReduce().shard(((1,),)), "no strategy")
    # under hybrid_parallel: MAX has no gradient (refused when the training graph is differentiated)
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="hybrid_parallel")

    class Maxed(SingleNet):
        def construct(self, x):
            return ops.AllReduce(ops.ReduceOp.MAX)(super().construct(x))

    expect_error(lambda: model_of(Maxed()).train(1, dataset()), "allreduce")
    # a 1-dim layer-wise slice needs no shard_axis; ReduceScatter's dim 0 must divide by the ranks
    assert ms.Parameter((4,), "zeros", layerwise_parallel=True).shard_axis == 0
    os.write(1, ("refusals done" + "\n").encode())  # one write: mpirun interleaves print()
