"""MindSpore layers composed from Tessera's ops, one process, against numpy: LeakyReLU(alpha) and
Identity on values (the evaluation graph, after a Dense initialised to the identity); BatchNorm1d on (N, C): in inference with its gamma_init
/ beta_init / moving_var_init, and after one training step its running statistics (MindSpore's
momentum 0.9: 0.9 old + 0.1 batch, the batch variance unbiased as PyTorch's) from the batch's
own mean and variance; its refusal of a 4-D input. Graph constants of several values (a Tensor
of values as an operand in construct, e.g. a mask or a scale per feature; an int32 one cast):
on values against numpy, unchanged by training (no gradient, not optimised), kept out of what
load_param_into_net asks for, and one of values float32 cannot hold refused. The shape and
elementwise ops composed from the library's (Tensor indexing x[:, a:b], x[:, k], None, ...;
Maximum, Minimum, Rsqrt, Pow and **, ReduceMin, ExpandDims, Squeeze, Stack, Split, Slice,
BroadcastTo) in a graph
against the same computation in numpy, training through them, and their refusals."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyutil  # noqa: E402

pyutil.require()
import numpy as np  # noqa: E402
import tessera as ms  # noqa: E402
from tessera import nn, ops  # noqa: E402
import models  # noqa: E402

ms.init()


class Net(nn.Cell):
    """layer on the flattened images, after an identity Dense (the trainer needs a parameter), or
    (classes) followed by a Dense classifier."""

    def __init__(self, layer, classes=False):
        super().__init__()
        self.flat = nn.Flatten()
        self.eye = None if classes else nn.Dense(784, 784, weight_init="identity", bias_init=0)
        self.layer = layer
        self.fc = nn.Dense(784, 10) if classes else None

    def construct(self, x):
        x = self.flat(x)
        if self.eye is not None:
            x = self.eye(x)
        y = self.layer(x)
        return self.fc(y) if self.fc is not None else y


def images(n=16):
    return np.stack([b[0] for b in models.ms_data(n, n).create_tuple_iterator(output_numpy=True)])[0]


class TestLayers(models.ScratchCase):
    prefix = "tessera-mslayers-"

    def test_leaky_relu_identity(self):
        x = (images(4) - 0.5).astype(np.float32)
        flat = x.reshape(4, -1)
        got = Net(nn.LeakyReLU(0.3))(x).asnumpy()
        np.testing.assert_allclose(got, np.where(flat >= 0, flat, 0.3 * flat), rtol=1e-6, atol=1e-7)
        self.assertLess(float(got.min()), 0.0)
        self.assertTrue(np.array_equal(Net(nn.Identity())(x).asnumpy(), flat))

    def test_batchnorm1d(self):
        x = images(16)
        flat = x.reshape(16, -1).astype(np.float64)
        eps = 1e-5
        net = Net(nn.BatchNorm1d(784, eps=eps, gamma_init=2.0, beta_init=0.5, moving_var_init=4.0))
        got = net(x).asnumpy()  # inference: the moving statistics (0, 4)
        np.testing.assert_allclose(got, 2.0 * flat / np.sqrt(4.0 + eps) + 0.5, rtol=1e-5, atol=1e-6)
        ms.set_seed(1)
        net = Net(nn.BatchNorm1d(784), classes=True)
        m = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.SGD(net.trainable_params(), 0.0), config={})
        m.train(1, models.ms_data(16, 16))
        p = {k: np.array(v) for k, v in net._trainer.params().items()}
        np.testing.assert_allclose(p["layer.running_mean"], 0.1 * flat.mean(0), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(p["layer.running_var"], 0.9 + 0.1 * flat.var(0, ddof=1), rtol=1e-4, atol=1e-6)
        self.assertGreater(float(flat.var(0).max()), 0.01)
        with self.assertRaisesRegex(ValueError, r"BatchNorm1d 'layer': input \(2, 1, 28, 28\), expected \(N, 4\)"):
            bad = Net(nn.BatchNorm1d(4))
            bad.construct = lambda v: bad.layer(v)
            bad(np.zeros((2, 1, 28, 28), np.float32))

    def test_constants_of_several_values(self):
        scale = np.linspace(-1, 1, 784).astype(np.float32)
        ids = np.arange(784, dtype=np.int32) % 7

        class Masked(nn.Cell):
            def __init__(self):
                super().__init__()
                self.flat = nn.Flatten()
                self.eye = nn.Dense(784, 784, weight_init="identity", bias_init=0)
                self.scale = ms.Tensor(scale)  # MindSpore scripts keep masks and scales as Tensors
                self.ids = ms.Tensor(ids)

            def construct(self, x):
                h = self.eye(self.flat(x)) * self.scale
                return h + ops.cast(self.ids, ms.float32)

        x = images(4)
        want = x.reshape(4, -1) * scale + ids.astype(np.float32)
        net = Masked()
        np.testing.assert_allclose(net(x).asnumpy(), want, rtol=1e-6, atol=1e-6)
        ms.set_seed(1)
        net = Masked()
        m = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.SGD(net.trainable_params(), 0.1), config={})
        m.train(1, models.ms_data(16, 16))
        p = {k: np.array(v) for k, v in net._trainer.params().items()}
        consts = sorted(k for k in p if k.rsplit(".", 1)[-1].startswith("_const_"))
        self.assertEqual(len(consts), 2, sorted(p))
        held = sorted((p[k] for k in consts), key=lambda a: float(a[1]))
        self.assertTrue(np.array_equal(held[0], scale) and np.array_equal(held[1], ids.astype(np.float32)))
        self.assertNotIn(consts[0], [q.name for q in net.trainable_params()])
        self.assertFalse(np.array_equal(p["eye.weight"], np.eye(784, dtype=np.float32)))  # it trained
        missing, unused = ms.load_param_into_net(net, {"eye.weight": p["eye.weight"], "moments.eye.weight": p["eye.weight"]})
        self.assertEqual((sorted(missing), unused), (["eye.bias"], ["moments.eye.weight"]))  # MindSpore's pair
        bad = ms.Tensor(np.array([1, 2 ** 25 + 1], np.int32))
        with self.assertRaisesRegex(ValueError, "float32, which does not hold these exactly"):
            from tessera.tensor import _const
            _const(bad.asnumpy())

    def test_constants_in_later_graphs(self):
        """A constant's values reach every trainer its network builds: net(x) after Model.train at
        another batch size (a new evaluation trainer), and value_and_grad's compiled step."""
        scale = np.linspace(-1, 1, 784).astype(np.float32)

        class Scaled(nn.Cell):
            def __init__(self):
                super().__init__()
                self.flat = nn.Flatten()
                self.fc = nn.Dense(784, 10)
                self.scale = ms.Tensor(scale)

            def construct(self, x):
                return self.fc(self.flat(x) * self.scale)

        def reference(net, x):
            p = {k: np.array(v) for k, v in net._trainer.params().items()}
            return (x.reshape(len(x), -1) * scale) @ p["fc.weight"].T + p["fc.bias"]

        net = Scaled()
        ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                 nn.SGD(net.trainable_params(), 0.1), config={}).train(1, models.ms_data(16, 16))
        x = images(8)
        np.testing.assert_allclose(net(x).asnumpy(), reference(net, x), rtol=1e-5, atol=1e-5)
        net = Scaled()
        opt, lossf = nn.SGD(net.trainable_params(), 0.1), nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

        def forward(d, label):
            logits = net(d)
            return lossf(logits, label), logits

        grad_fn = ms.value_and_grad(forward, None, opt.parameters, has_aux=True)
        x, y = images(4), np.array([1, 2, 3, 4], np.int32)
        (loss, _), _ = grad_fn(ms.Tensor(x), ms.Tensor(y))
        z = reference(net, x)
        z = z - z.max(1, keepdims=True)
        want = -(z[np.arange(4), y] - np.log(np.exp(z).sum(1))).mean()
        self.assertAlmostEqual(float(loss.asnumpy()), float(want), places=5)

    def test_shape_and_elementwise_ops(self):
        class OpsNet(nn.Cell):
            def __init__(self):
                super().__init__()
                self.flat = nn.Flatten()
                self.eye = nn.Dense(784, 784, weight_init="identity", bias_init=0)

            def construct(self, x):
                h = self.eye(self.flat(x))                           # (N, 784)
                a, c = h[:, 0:392], h[:, 392:]
                m = ops.maximum(a, c) + ops.minimum(a, 0.3)          # (N, 392)
                st = ops.squeeze(ops.expand_dims(ops.stack([m, a], 1), 2), 2)  # (N, 2, 392)
                p, q = ops.split(st, 1, 2)                           # (N, 1, 392) each
                r = ops.broadcast_to(ops.slice(p, (0, 0, 10), (-1, -1, 100)), (-1, 3, 100))
                k = h[..., 5][:, None] * ops.rsqrt(h[:, -8:] * h[:, -8:] + 1.0)  # (N, 8)
                pw = ops.pow(h[:, :4] * h[:, :4] + 1.0, 1.5) + h[:, 4:8] ** 2 + (h[:, 8:12] + 2.0) ** -0.5
                mn = ops.ReduceMin(keep_dims=True)(h, 1)
                return ops.concat([r.reshape(r.shape[0], 300), q[:, 0, :50], k, pw, mn], 1)

        def ref(x):
            h = x.reshape(x.shape[0], -1).astype(np.float64)
            a, c = h[:, :392], h[:, 392:]
            m = np.maximum(a, c) + np.minimum(a, 0.3)
            r = np.broadcast_to(m[:, None, 10:110], (x.shape[0], 3, 100))
            k = h[:, 5:6] / np.sqrt(h[:, -8:] ** 2 + 1.0)
            pw = (h[:, :4] ** 2 + 1.0) ** 1.5 + h[:, 4:8] ** 2 + (h[:, 8:12] + 2.0) ** -0.5
            return np.concatenate([r.reshape(x.shape[0], 300), a[:, :50], k, pw, h.min(1, keepdims=True)], 1)

        x = images(4) - 0.4
        np.testing.assert_allclose(OpsNet()(x).asnumpy(), ref(x), rtol=1e-5, atol=1e-6)
        ms.set_seed(1)
        net = OpsNet()
        m = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.SGD(net.trainable_params(), 0.1), config={})
        m.train(1, models.ms_data(16, 16))
        w = np.array(net._trainer.params()["eye.weight"])
        self.assertFalse(np.array_equal(w, np.eye(784, dtype=np.float32)))  # gradients flowed through them
        self.assertTrue(np.isfinite(w).all())
        for bad, msg in ((lambda t: t[:, ::2], "slices of step 1 only"), (lambda t: t[:, 1, 2], "too many indices"),
                         (lambda t: t[:, 9999], "out of bounds"),
                         (lambda t: ops.squeeze(t, 1), "must name dimensions of size 1"),
                         (lambda t: ops.split(t, 1, 5), "must divide into 5 equal parts")):
            class Bad(OpsNet):
                def construct(self, x, f=bad):
                    return f(self.eye(self.flat(x)))
            with self.assertRaisesRegex((IndexError, ValueError), msg):
                Bad()(x)


if __name__ == "__main__":
    unittest.main()
