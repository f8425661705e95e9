"""MindSpore's loss surface, one process: custom loss cells built from ops as MindSpore's tutorials
write them (the distributed-training tutorial's SoftmaxCrossEntropyExpand with ops.OneHot, Tensor /
scalar_to_array / scalar_to_tensor / Python-number constants, ops.shape) used as Model's loss_fn,
against the built-in sparse cross-entropy (every step's loss within 1e-5); a loss that is another
function (label-smoothed squared error on the softmax plus a logit penalty) against numpy: one SGD
step's loss and updated parameters from a float64 gradient; nn.SoftmaxCrossEntropyWithLogits
(sparse=False on ops.OneHot labels, sparse=True with reduction "sum") inside a cell; nn.LossBase's
get_loss; nn.WithLossCell with Model(net_with_loss, optimizer=opt), bitwise Model(net, loss, opt)
(losses and parameters); and the refusals (each message checked)."""
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyutil  # noqa: E402

pyutil.require()
import numpy as np  # noqa: E402
import tessera as ms  # noqa: E402
from tessera import nn, ops  # noqa: E402
import tessera.dataset as ds  # noqa: E402
import tessera.dataset.vision as vision  # noqa: E402

ms.init()


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flat = nn.Flatten()
        self.fc1 = nn.Dense(784, 32)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(32, 10)

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(self.flat(x))))


class SoftmaxCrossEntropyExpand(nn.Cell):
    """MindSpore's distributed-training tutorial's loss, as written there; `const` picks how the
    -1 is written (the tutorial's scalar_to_array, 2.x's scalar_to_tensor, a Tensor, a float)."""

    def __init__(self, sparse=False, const="scalar_to_array"):
        super().__init__()
        self.exp = ops.Exp()
        self.sum = ops.ReduceSum(keep_dims=True)
        self.onehot = ops.OneHot()
        self.on_value = ms.Tensor(1.0, ms.float32)
        self.off_value = ms.Tensor(0.0, ms.float32)
        self.div = ops.RealDiv()
        self.log = ops.Log()
        self.sum_cross_entropy = ops.ReduceSum(keep_dims=False)
        self.mul = ops.Mul()
        self.mul2 = ops.Mul()
        self.mean = ops.ReduceMean(keep_dims=False)
        self.sparse = sparse
        self.max = ops.ReduceMax(keep_dims=True)
        self.sub = ops.Sub()
        self.const = const

    def construct(self, logit, label):
        logit_max = self.max(logit, -1)
        exp = self.exp(self.sub(logit, logit_max))
        exp_sum = self.sum(exp, -1)
        softmax_result = self.div(exp, exp_sum)
        if self.sparse:
            label = self.onehot(label, ops.shape(logit)[1], self.on_value, self.off_value)
        softmax_result_log = self.log(softmax_result)
        loss = self.sum_cross_entropy((self.mul(softmax_result_log, label)), -1)
        minus = {"scalar_to_array": lambda: ops.scalar_to_array(-1.0),
                 "scalar_to_tensor": lambda: ops.scalar_to_tensor(-1.0, ms.float32),
                 "tensor": lambda: ms.Tensor(-1.0, ms.float32), "float": lambda: -1.0}[self.const]()
        loss = self.mul2(minus, loss)
        loss = self.mean(loss, -1)
        return loss


class DenseCEInCell(nn.Cell):
    """nn.SoftmaxCrossEntropyWithLogits(sparse=False) on one-hot labels made in the cell."""

    def __init__(self):
        super().__init__()
        self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=False, reduction="mean")
        self.onehot = ops.OneHot()

    def construct(self, logits, label):
        return self.ce(logits, self.onehot(label, 10, 1.0, 0.0))


class SumCE(nn.LossBase):
    """sparse=True, reduction="sum", divided by the batch through get_loss's weights."""

    def __init__(self, batch):
        super().__init__(reduction="mean")
        self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="sum")
        self.batch = batch

    def construct(self, logits, label):
        return self.get_loss(self.ce(logits, label), 1.0 / self.batch)


SMOOTH_ON, SMOOTH_OFF, PENALTY = 0.9, 0.1 / 9, 0.01


class SmoothedSquare(nn.Cell):
    """Not cross-entropy: 0.5 * mean over rows of sum((softmax(z) - smoothed one-hot)^2) plus
    PENALTY * mean(z^2), with constants written in three ways."""

    def __init__(self):
        super().__init__()
        self.onehot = ops.OneHot(axis=-1)
        self.softmax = ops.Softmax()
        self.square = ops.Square()

    def construct(self, logits, label):
        t = self.onehot(label, ops.shape(logits)[-1], ms.Tensor(SMOOTH_ON, ms.float32), SMOOTH_OFF)
        d = ops.Sub()(self.softmax(logits), t)
        rows = ops.ReduceSum()(self.square(d), 1)
        return ops.Mul()(0.5, ops.ReduceMean()(rows)) + ops.mul(ops.mean(self.square(logits)),
                                                                 ms.Tensor(np.full((1,), PENALTY, np.float32)))


class Linear(nn.Cell):
    """x (N,1,28,28) -> x W + b, with the given initial values."""

    def __init__(self, w, b):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(w), name="w")
        self.b = ms.Parameter(ms.Tensor(b), name="b")
        self.matmul = ops.MatMul()

    def construct(self, x):
        return ops.add(self.matmul(ops.flatten(x), self.w), self.b)


def data(n=64, batch=16):
    d = ds.FashionMnistDataset(pyutil.FASHION, usage="train", num_samples=n, shuffle=False)
    return d.map([vision.Rescale(1 / 255), vision.HWC2CHW()], input_columns="image").batch(batch)


class Record(ms.Callback):
    def __init__(self):
        self.losses = []

    def on_train_step_end(self, rc):
        self.losses.append(rc.original_args().net_outputs)


def train(loss_fn, net=None, epochs=1, n=64, with_loss_cell=False):
    net = net or Net()
    r = Record()
    opt = nn.Momentum(net.trainable_params(), 0.01, 0.9)
    if with_loss_cell:
        m = ms.Model(nn.WithLossCell(net, loss_fn), optimizer=opt)
    else:
        m = ms.Model(net, loss_fn=loss_fn, optimizer=opt)
    m.train(epochs, data(n), callbacks=[r])
    return r.losses, {k: np.array(v) for k, v in net._trainer.params().items()}, m


def builtin():
    return nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")


class TestLosses(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ref_losses, cls.ref_params, _ = train(builtin())

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tessera-mslosses-")
        self.cwd = os.getcwd()
        os.chdir(self.dir)
        ms.reset_auto_parallel_context()

    def tearDown(self):
        os.chdir(self.cwd)
        shutil.rmtree(self.dir, ignore_errors=True)

    def assert_same_run(self, losses, params, tol):
        self.assertEqual(len(losses), len(self.ref_losses))
        for a, b in zip(losses, self.ref_losses):
            self.assertLess(abs(a - b), tol, (losses, self.ref_losses))
        for k, v in self.ref_params.items():
            self.assertLess(float(np.abs(params[k] - v).max()), tol, k)

    def test_tutorial_expand_equals_builtin(self):
        for const in ("scalar_to_array", "scalar_to_tensor", "tensor", "float"):
            losses, params, _ = train(SoftmaxCrossEntropyExpand(sparse=True, const=const))
            self.assert_same_run(losses, params, 1e-5)

    def test_ce_in_cell(self):
        for loss in (DenseCEInCell(), SumCE(16)):
            losses, params, _ = train(loss)
            self.assert_same_run(losses, params, 1e-5)

    def test_with_loss_cell_bitwise(self):
        losses, params, m = train(builtin(), with_loss_cell=True)
        self.assertEqual(losses, self.ref_losses)
        for k, v in self.ref_params.items():
            self.assertTrue(params[k].tobytes() == v.tobytes(), k)
        self.assertEqual(sorted(params), sorted(self.ref_params))  # the backbone's names, no prefix
        wl = nn.WithLossCell(Net(), builtin())
        self.assertEqual([n for n, _ in wl.parameters_and_names()],
                         ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"])
        # a custom loss cell inside WithLossCell, the same run as Model(net, loss_fn=it)
        a, pa, _ = train(SoftmaxCrossEntropyExpand(sparse=True), with_loss_cell=True)
        b, pb, _ = train(SoftmaxCrossEntropyExpand(sparse=True))
        self.assertEqual(a, b)
        # save_checkpoint of the WithLossCell after training: the backbone's trained parameters
        net = Net()
        wl = nn.WithLossCell(net, builtin())
        ms.Model(wl, optimizer=nn.Momentum(net.trainable_params(), 0.01, 0.9)).train(1, data(32))
        ms.save_checkpoint(wl, "wl.ckpt")
        ck = ms.load_checkpoint("wl.ckpt")
        for k, v in net._trainer.params().items():
            self.assertTrue(np.array_equal(ck[k], np.array(v)), k)

    def test_numpy_gradient(self):
        """One SGD step of a non-CE loss: the loss and the updated parameters against numpy."""
        rng = np.random.default_rng(3)
        w0 = (rng.standard_normal((784, 10)) * 0.05).astype(np.float32)
        b0 = (rng.standard_normal(10) * 0.1).astype(np.float32)
        lr = 0.5
        net = Linear(w0, b0)
        r = Record()
        m = ms.Model(net, loss_fn=SmoothedSquare(), optimizer=nn.SGD(net.trainable_params(), lr))
        m.train(1, data(16, 16), callbacks=[r])
        x, y = next(iter(data(16, 16)))
        x = x.reshape(16, -1).astype(np.float64)
        z = x @ w0 + b0
        e = np.exp(z - z.max(1, keepdims=True))
        s = e / e.sum(1, keepdims=True)
        t = np.full((16, 10), SMOOTH_OFF)
        t[np.arange(16), y] = SMOOTH_ON
        loss = 0.5 * ((s - t) ** 2).sum(1).mean() + PENALTY * (z ** 2).mean()
        ds_ = (s - t) / 16  # d loss / d s
        dz = s * (ds_ - (ds_ * s).sum(1, keepdims=True)) + 2 * PENALTY * z / z.size
        w1, b1 = w0 - lr * (x.T @ dz), b0 - lr * dz.sum(0)
        self.assertEqual(len(r.losses), 1)
        self.assertLess(abs(r.losses[0] - loss), 1e-5 * max(1, abs(loss)), (r.losses, loss))
        p = net._trainer.params()
        self.assertLess(float(np.abs(np.array(p["w"]) - w1).max()), 1e-6)
        self.assertLess(float(np.abs(np.array(p["b"]) - b1).max()), 1e-6)
        self.assertGreater(float(np.abs(w1 - w0).max()), 1e-4)  # the step moved them

    def test_refusals(self):
        net = Net()
        opt = nn.Momentum(net.trainable_params(), 0.01, 0.9)
        cases = [
            (lambda: ms.Model(net, optimizer=opt), "WithLossCell(backbone, loss_fn)"),
            (lambda: ms.Model(nn.WithLossCell(net, builtin()), optimizer=opt, metrics={"acc"}),
             "need an eval_network"),
            (lambda: ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True), opt), "reduction='none'"),
            (lambda: ms.Model(net, SoftmaxCrossEntropyExpand(True), opt, metrics={"loss"}), "metrics 'loss'"),
            (lambda: ms.Model(net, lambda a, b: a, opt), "must be an nn.Cell"),
            (lambda: ms.Model(ms.zoo.mlp(), SoftmaxCrossEntropyExpand(True), opt), "tessera.zoo network"),
        ]
        for make, needle in cases:
            with self.assertRaises(ValueError) as c:
                make()
            self.assertIn(needle, str(c.exception))
        # accepted with metrics: acc with a custom loss, loss with the built-in
        ms.Model(net, SoftmaxCrossEntropyExpand(True), opt, metrics={"acc"})

    def test_construct_refusals(self):
        """Errors found while the graph is recorded: raised out of train with their message."""

        class PerSample(nn.Cell):
            def construct(self, z, y):
                return nn.SoftmaxCrossEntropyWithLogits(sparse=True)(z, y)  # reduction 'none': (N,)

        class Vector(nn.Cell):
            def construct(self, z, y):
                return ops.Mul()(ms.Tensor(np.arange(10, dtype=np.float32)), z).mean()

        class OnGraph(nn.Cell):
            def construct(self, z, y):
                return ops.ReduceMean()(ops.OneHot()(y, 10, z, 0.0))

        class DenseIds(nn.Cell):
            def construct(self, z, y):
                return nn.SoftmaxCrossEntropyWithLogits(sparse=False, reduction="mean")(z, y)

        class FloatIds(nn.Cell):
            def construct(self, z, y):
                return ops.ReduceMean()(ops.OneHot()(z, 10, 1.0, 0.0))

        train(Vector(), n=16)  # a Tensor of several values in construct: a graph constant (no longer refused)
        for cell, needle in ((PerSample(), "shape (16,)"), (OnGraph(), "constant"),
                             (DenseIds(), "sparse=True"), (FloatIds(), "int32 or int64")):
            with self.assertRaises(ValueError) as c:
                train(cell, n=16)
            self.assertIn(needle, str(c.exception), type(cell).__name__)

    def test_ops_surface(self):
        self.assertEqual(ops.scalar_to_tensor(2).dtype, ms.float32)
        self.assertEqual(ops.scalar_to_tensor(2, ms.int32).asnumpy().dtype, np.int32)
        self.assertEqual(ops.scalar_to_array(3).asnumpy(), np.float32(3))
        self.assertEqual(ops.fill(ms.float32, (2, 3), 1.5).shape, (2, 3))
        self.assertEqual((ms.Tensor(2.0) * 3).asnumpy(), np.float32(6))
        self.assertEqual((1 - ms.Tensor(np.ones(2, np.float32))).asnumpy().tolist(), [0, 0])
        self.assertEqual(ops.shape(ms.Tensor(np.zeros((2, 5), np.float32))), (2, 5))


if __name__ == "__main__":
    unittest.main()
