"""A MindSpore 2.x script's surface on Tessera, one process (`python3 surface.py`): the imports a
ported script has, the names it uses, and the refusals (each printed as `refused <what>: <message>`
for test_mindspore_scripts.py to check). Then a network with MindSpore's "same" padding (odd total
padding: the extra row/column at the bottom/right), explicit pool padding, ReLU6,
AdaptiveAvgPool2d and a Parameter made from numpy values, evaluated by the Model and by numpy with
MindSpore's semantics: the same accuracy and loss. The imports include MindSpore's module paths
(mindspore.nn.optim.momentum, nn.loss.loss, ops.operations as P, train.serialization, ...): each
gives the name Tessera has."""
import numpy as np

import tessera as ms
from tessera import nn, ops
from tessera import dtype as mstype
import tessera.common.dtype as mstype2
from tessera.communication import (GlobalComm, HCCL_WORLD_COMM_GROUP, NCCL_WORLD_COMM_GROUP, create_group,
                                   get_group_size, get_local_rank, get_local_rank_size, get_rank, init)
from tessera.communication.management import get_rank as mgmt_get_rank
import tessera.dataset as ds
import tessera.dataset.transforms as transforms
import tessera.dataset.transforms.c_transforms as C
import tessera.dataset.vision as vision
import tessera.dataset.vision.c_transforms as CV
import tessera.dataset.vision.py_transforms as PV

# MindSpore's module paths as the model zoo and tutorials import from them
from tessera.nn.optim.momentum import Momentum as ZooMomentum
from tessera.nn.optim import Adam as ZooAdam, Optimizer as ZooOptimizer
from tessera.nn.loss.loss import LossBase as ZooLossBase
from tessera.nn.loss import SoftmaxCrossEntropyWithLogits as ZooCE
from tessera.nn.wrap.cell_wrapper import TrainOneStepCell as ZooTOSC, WithLossCell as ZooWLC
from tessera.nn.cell import Cell as ZooCell
from tessera.nn.layer.basic import Dense as ZooDense
from tessera.ops import operations as P
from tessera.ops import functional as F
from tessera.ops import composite as Cmp
from tessera.common.tensor import Tensor as ZooTensor
from tessera.common.parameter import Parameter as ZooParameter
from tessera.common import set_seed as zoo_set_seed, Tensor as CommonTensor
from tessera.train.serialization import load_checkpoint as zoo_load, save_checkpoint as zoo_save
from tessera.train.loss_scale_manager import FixedLossScaleManager as ZooFLSM
from tessera.train.metrics import Accuracy as ZooAccuracy
import tessera.dataset.engine as de
from tessera.nn.wrap.loss_scale import TrainOneStepWithLossScaleCell, DynamicLossScaleUpdateCell

FASHION = "/usr/share/datasets/fashion-mnist"
assert (ZooMomentum, ZooAdam, ZooOptimizer, ZooLossBase, ZooCE, ZooTOSC, ZooWLC, ZooCell, ZooDense) == (
    nn.Momentum, nn.Adam, nn.Optimizer, nn.LossBase, nn.SoftmaxCrossEntropyWithLogits, nn.TrainOneStepCell,
    nn.WithLossCell, nn.Cell, nn.Dense)
assert (P.Softmax, P.ReduceMean, P.OneHot, F.cast, F.shape, Cmp.value_and_grad) == (
    ops.Softmax, ops.ReduceMean, ops.OneHot, ops.cast, ops.shape, ops.value_and_grad)
assert (ZooTensor, ZooParameter, CommonTensor, zoo_load, zoo_save, ZooFLSM, ZooAccuracy, de.GeneratorDataset) == (
    ms.Tensor, ms.Parameter, ms.Tensor, ms.load_checkpoint, ms.save_checkpoint, ms.FixedLossScaleManager,
    nn.Accuracy, ds.GeneratorDataset)
assert ms.ms_function is ms.jit
assert (TrainOneStepWithLossScaleCell, DynamicLossScaleUpdateCell) == (nn.TrainOneStepWithLossScaleCell,
                                                                     nn.DynamicLossScaleUpdateCell)
zoo_set_seed(1)
assert ms.get_seed() == 1


def refused(what, fn):
    try:
        fn()
    except (ValueError, TypeError) as e:  # TypeError: an argument of the wrong type (tessera._validator)
        print("refused %s: %s" % (what, e), flush=True)
        return
    raise AssertionError("%s was not refused" % what)


# ---- communication ----
init("nccl")
assert (get_rank(), get_group_size(), mgmt_get_rank()) == (0, 1, 0)
assert (get_local_rank(), get_local_rank_size()) == (0, 1)
assert GlobalComm.WORLD_COMM_GROUP == NCCL_WORLD_COMM_GROUP and HCCL_WORLD_COMM_GROUP == "hccl_world_group"
refused("create_group", lambda: create_group("g0", [0, 1]))
refused("get_rank(group)", lambda: get_rank("g0"))

# ---- dtypes ----
assert mstype.float32 is ms.float32 is mstype2.float32 and str(ms.bfloat16) == "BFloat16"
t = ms.Tensor(np.arange(6).reshape(2, 3), mstype.float32)
assert t.dtype == ms.float32 and t.shape == (2, 3) and t.asnumpy().dtype == np.float32
assert ms.Tensor(np.array([1, 2]), ms.int32).asnumpy().dtype == np.int32
assert t.astype(ms.float16).asnumpy().dtype == np.float16
refused("Tensor float64", lambda: ms.Tensor(np.ones(2), mstype.float64))
refused("TypeCast float64", lambda: C.TypeCast(mstype.float64))

# ---- data set: shuffle, repeat, transforms packages ----
assert CV.Rescale is vision.Rescale and PV.HWC2CHW is vision.HWC2CHW and C.Compose is transforms.Compose
base = ds.FashionMnistDataset(FASHION, usage="test", num_samples=40, shuffle=False)
base = base.map(operations=transforms.Compose([vision.Rescale(1.0 / 255), vision.HWC2CHW()]), input_columns="image")
base = base.map(operations=transforms.TypeCast(mstype.int32), input_columns="label")
shuffled = base.shuffle(buffer_size=10)  # MindSpore's buffer shuffle; was a TypeError (an attribute shadowed it)
assert shuffled.keys()["data.shuffle_buffer"] == 10 and shuffled.keys()["data.shuffle"] is False
once = base.batch(8)
twice = base.repeat(2).batch(8)
assert twice.get_dataset_size() == 2 * once.get_dataset_size() == 10
a = np.concatenate([y for _, y in once.create_tuple_iterator()])
b = np.concatenate([y for _, y in twice.create_tuple_iterator()])
assert np.array_equal(b, np.concatenate([a, a])), (a, b)
refused("shuffle after batch", lambda: once.shuffle(4))
refused("repeat(0)", lambda: base.repeat(0))

# ---- layers: padding as MindSpore 2.x ----
refused("MaxPool2d padding", lambda: nn.MaxPool2d(3, 2, padding=1))
refused("AvgPool2d count_include_pad", lambda: nn.AvgPool2d(3, 2, pad_mode="pad", padding=1))
refused("Conv2d padding", lambda: nn.Conv2d(1, 4, 3, padding=1))
refused("OneHot axis", lambda: ops.OneHot(axis=1.5))  # OneHot itself is supported (test_ms_losses.py)

# ---- parallel context ----
ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True, parameter_broadcast=False,
                             all_reduce_fusion_config=[2], strategy_ckpt_config={"save_file": "s.json",
                                                                                 "only_trainable_params": True},
                             parallel_optimizer_config={"parallel_optimizer_threshold": 32,
                                                        "optimizer_weight_shard_size": -1},
                             pipeline_config={"pipeline_scheduler": "gpipe"}, search_mode="sharding_propagation",
                             enable_alltoall=True, force_fp32_communication=True, auto_pipeline=True)
assert ms.get_auto_parallel_context("strategy_ckpt_save_file") == "s.json"
assert ms.get_auto_parallel_context("pipeline_config")["pipeline_scheduler"] == "gpipe"
assert ms.get_auto_parallel_context("parallel_optimizer_config")["parallel_optimizer_threshold"] == 32
assert ms.get_auto_parallel_context("comm_fusion")["allreduce"] == {"mode": "index", "config": [2]}
refused("parallel_mode typo", lambda: ms.set_auto_parallel_context(parallel_mode="data_paralel"))
refused("enable_alltoall False", lambda: ms.set_auto_parallel_context(enable_alltoall=False))
refused("comm_dtype with fp32", lambda: ms.set_auto_parallel_context(comm_dtype="bf16"))
refused("group_ckpt_save_file", lambda: ms.set_auto_parallel_context(group_ckpt_save_file="g.ckpt"))
refused("dataset_strategy tuple", lambda: ms.set_auto_parallel_context(dataset_strategy=((2, 1), (2,))))
ms.reset_auto_parallel_context()
defaults = {k: ms.get_auto_parallel_context(k) for k in
            ("device_num", "global_rank", "gradients_mean", "parallel_mode", "full_batch", "dataset_strategy",
             "pipeline_stages", "enable_parallel_optimizer", "parameter_broadcast", "loss_repeated_mean",
             "gradient_fp32_sync", "strategy_ckpt_load_file", "all_reduce_fusion_config")}
print("defaults %r" % (defaults,), flush=True)


# ---- a network with MindSpore's padding rules, evaluated against numpy ----
W = np.linspace(-1.0, 1.0, 40, dtype=np.float32).reshape(4, 10)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, stride=2, pad_mode="same", has_bias=True)   # 28 -> 14: pad 0 top, 1 bottom
        self.pool = nn.MaxPool2d(3, 2, pad_mode="same")                           # 14 -> 7: pad 0 top, 1 bottom
        self.pool2 = nn.MaxPool2d(3, 1, pad_mode="pad", padding=1)                # 7 -> 7
        self.relu6 = nn.ReLU6()
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.w = ms.Parameter(ms.Tensor(W), name="w", requires_grad=False)
        self.matmul = ops.MatMul()

    def construct(self, x):
        x = self.gap(self.pool2(self.relu6(self.pool(self.conv(x)))))
        return self.matmul(ops.flatten(x), self.w)


def conv_same(x, w, b, s):
    n, c, h, _ = x.shape
    k = w.shape[-1]
    out = -(-h // s)
    tot = max((out - 1) * s + k - h, 0)
    xp = np.pad(x, ((0, 0), (0, 0), (tot // 2, tot - tot // 2), (tot // 2, tot - tot // 2)))
    y = np.zeros((n, w.shape[0], out, out))
    for i in range(out):
        for j in range(out):
            patch = xp[:, :, i * s:i * s + k, j * s:j * s + k]
            y[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
    return y + b[None, :, None, None]


def maxpool(x, k, s, top, bottom):
    h = x.shape[2]
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (top, bottom)), constant_values=-np.inf)
    out = (h + top + bottom - k) // s + 1
    y = np.zeros(x.shape[:2] + (out, out))
    for i in range(out):
        for j in range(out):
            y[:, :, i, j] = xp[:, :, i * s:i * s + k, j * s:j * s + k].max((2, 3))
    return y


data = ds.FashionMnistDataset(FASHION, usage="test", num_samples=64, shuffle=False)
data = data.map(operations=[vision.Rescale(1.0), vision.HWC2CHW()], input_columns="image").batch(32)
net = Net()
model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), metrics={"acc", "loss"})
r = model.eval(data)
p = net._trainer.params()
assert np.array_equal(p["w"], W), "Parameter(Tensor(numpy)) values not loaded"
x = np.concatenate([x for x, _ in data.create_tuple_iterator()]).astype(np.float64)
y = np.concatenate([y for _, y in data.create_tuple_iterator()])
h = conv_same(x, p["conv.weight"].astype(np.float64), p["conv.bias"].astype(np.float64), 2)
h = np.clip(maxpool(h, 3, 2, 0, 1), 0, 6)
clipped = float((h >= 6).mean())
h = maxpool(h, 3, 1, 1, 1).mean((2, 3))
logits = h @ W.astype(np.float64)
z = logits - logits.max(1, keepdims=True)
nll = -(z[np.arange(len(y)), y] - np.log(np.exp(z).sum(1)))
acc, loss = float((logits.argmax(1) == y).mean()), float(nll.mean())
assert clipped > 0.05, "ReLU6 not exercised (%.3f clipped)" % clipped
assert abs(r["acc"] - acc) < 1e-9 and abs(r["loss"] - loss) < 1e-4, (r, acc, loss)
print("eval matches numpy: acc %.4f loss %.5f (ReLU6 clipped %.2f)" % (acc, loss, clipped), flush=True)

# ---- repeat on the training set: refused, saying what to use ----
train = ds.FashionMnistDataset(FASHION, usage="train", num_samples=64).map(
    operations=[vision.Rescale(1.0 / 255), vision.HWC2CHW()], input_columns="image").batch(32).repeat(3)
net2 = Net()
m2 = ms.Model(net2, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
              nn.Momentum(net2.trainable_params(), 0.01, 0.9))
refused("repeat(3) in Model.train", lambda: m2.train(1, train))
print("surface ok", flush=True)
