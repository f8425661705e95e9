"""MindSpore's initializers (tessera.common.initializer, weight_init= of the layers, set_data), one
process:
- a Dense / Conv2d with weight_init=Normal(0.02) starts with exactly the values of a Parameter of
  the same name initialised "normal" with sigma 0.02 (the recipe reaches the parameter store under
  the layer's own parameter name), and its bias as without weight_init (the layer's own);
- each initializer's values against its distribution on a 512 x 256 weight (bounds of the
  uniform ones exact, moments within 3%, TruncatedNormal within two sigmas with 0.88 sigma's
  spread), Zero / One / Constant / Identity / Dirac exact;
- the model zoo's init_weight loop (cells_and_names, cell.weight.set_data(initializer(...))),
  BatchNorm's gamma_init=0 (ResNet's last BN), moving_var_init, Embedding's embedding_table,
  set_data with values (loaded when the Model is built, also over a value given first), and
  MindSpore's LeNet-5 (weight_init=Normal(0.02)) training, and the model zoo's LeNet train.py +
  eval.py (mindspore_scripts/lenet_train.py, imports changed) run with its weights from Normal(0.02);
- refusals: set_data after the model is built, another shape, TruncatedNormal(a=-3), Orthogonal,
  an unknown name."""
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyutil  # noqa: E402

pyutil.require()
import numpy as np  # noqa: E402
import tessera as ms  # noqa: E402
from tessera import nn, ops  # noqa: E402
from tessera.common.initializer import (Constant, Dirac, HeNormal, HeUniform, Identity, Normal, One,  # noqa: E402
                                        Orthogonal, TruncatedNormal, Uniform, VarianceScaling, XavierNormal,
                                        XavierUniform, Zero, initializer)
import models  # noqa: E402

ms.init()


def values(net, shape=(1, 1, 28, 28)):
    """net's parameters (and states) as its trainer holds them once built, before any step."""
    ms.set_seed(5)
    m = models.ms_model(net, config={})
    m.predict(np.zeros(shape, np.float32))
    return {k: np.array(v) for k, v in net._trainer.params().items()}


class Wrap(nn.Cell):
    """layer (named "layer") on the flattened input (flat) or on the input, its output flattened."""

    def __init__(self, layer, flat=True):
        super().__init__()
        self.pre = flat
        self.flat = nn.Flatten()
        self.layer = layer

    def construct(self, x):
        return self.layer(self.flat(x)) if self.pre else self.flat(self.layer(x))


class Raw(nn.Cell):
    """A Dense written with Parameters: layer.weight 'normal' (sigma 0.02), layer.bias torch_default."""

    def __init__(self):
        super().__init__()
        self.flat = nn.Flatten()
        self.layer = _RawDense()

    def construct(self, x):
        return self.layer(self.flat(x))


class _RawDense(nn.Cell):
    def __init__(self):
        super().__init__()
        self.weight = ms.Parameter((10, 784), "normal", sigma=0.02)

    def construct(self, x):
        return ops.matmul(x, ops.transpose(self.weight, (1, 0)))


class LeNet5(nn.Cell):
    """MindSpore's model zoo LeNet-5, as its tutorial writes it (28 x 28 input: padded 'same')."""

    def __init__(self, num_class=10, num_channel=1):
        super().__init__()
        self.conv1 = nn.Conv2d(num_channel, 6, 5, pad_mode="same", weight_init=Normal(0.02))
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid", weight_init=Normal(0.02))
        self.fc1 = nn.Dense(16 * 5 * 5, 120, weight_init=Normal(0.02))
        self.fc2 = nn.Dense(120, 84, weight_init=Normal(0.02))
        self.fc3 = nn.Dense(84, num_class, weight_init=Normal(0.02))
        self.relu = nn.ReLU()
        self.max_pool2d = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()

    def construct(self, x):
        x = self.max_pool2d(self.relu(self.conv1(x)))
        x = self.max_pool2d(self.relu(self.conv2(x)))
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


class TestInit(models.ScratchCase):
    prefix = "tessera-msinit-"

    def test_same_stream_as_a_parameter(self):
        a = values(Wrap(nn.Dense(784, 10, weight_init=Normal(0.02))))
        raw = values(Raw())
        plain = values(Wrap(nn.Dense(784, 10)))
        self.assertTrue(np.array_equal(a["layer.weight"], raw["layer.weight"]))
        self.assertTrue(np.array_equal(a["layer.bias"], plain["layer.bias"]))  # the layer's own bias init
        self.assertFalse(np.array_equal(a["layer.weight"], plain["layer.weight"]))
        self.assertAlmostEqual(float(a["layer.weight"].std()), 0.02, delta=0.001)
        c = values(Wrap(nn.Conv2d(4, 16, 3, weight_init=Normal(0.02), has_bias=True, bias_init="zeros"), flat=False),
                   (1, 4, 8, 8))
        self.assertAlmostEqual(float(c["layer.weight"].std()), 0.02, delta=0.003)
        self.assertTrue(np.array_equal(c["layer.bias"], np.zeros(16, np.float32)))

    def test_distributions(self):
        fi, fo = 256, 512

        def w(init):
            return values(Wrap(nn.Dense(fi, fo, weight_init=init, has_bias=False)), (1, fi))["layer.weight"]

        cases = [  # (init, uniform bound or None, std)
            (Uniform(0.1), 0.1, 0.1 / math.sqrt(3)),
            (XavierUniform(), math.sqrt(6 / (fi + fo)), math.sqrt(2 / (fi + fo))),
            (XavierNormal(gain=2), None, 2 * math.sqrt(2 / (fi + fo))),
            (HeUniform(), math.sqrt(6 / fi), math.sqrt(2 / fi)),
            (HeUniform(negative_slope=math.sqrt(5)), 1 / math.sqrt(fi), 1 / math.sqrt(3 * fi)),  # PyTorch's Linear
            (HeNormal(mode="fan_out", nonlinearity="relu"), None, math.sqrt(2 / fo)),
            ("he_normal", None, math.sqrt(2 / fi)),
            (Normal(0.05, mean=0.5), None, 0.05),
            ("normal", None, 0.01),
            (VarianceScaling(2.0, "fan_avg", "untruncated_normal"), None, math.sqrt(2 / ((fi + fo) / 2))),
            (VarianceScaling(1.0, "fan_in", "uniform"), math.sqrt(3 / fi), math.sqrt(1 / fi)),
        ]
        for init, bound, std in cases:
            v = w(init)
            self.assertEqual(v.shape, (fo, fi))
            self.assertAlmostEqual(float(v.std()), std, delta=0.03 * std, msg=repr(init))
            if bound is not None:
                self.assertLessEqual(float(np.abs(v).max()), bound * (1 + 1e-6), repr(init))
                self.assertGreater(float(np.abs(v).max()), 0.99 * bound, repr(init))
        v = w(Normal(0.05, mean=0.5))
        self.assertAlmostEqual(float(v.mean()), 0.5, delta=0.001)
        for t, sg in ((TruncatedNormal(0.02), 0.02), ("truncatedNormal", 0.01)):  # two sigmas, spread 0.8796 sigma
            v = w(t)
            self.assertLessEqual(float(np.abs(v).max()), 2 * sg * (1 + 1e-6))
            self.assertGreater(float(np.abs(v).max()), 1.995 * sg)
            self.assertAlmostEqual(float(v.std()), sg * 0.8796256610342398, delta=0.015 * sg)
        v = w(VarianceScaling())  # truncated normal: divided by 0.8796, so its spread is sqrt(1 / fan_in)
        self.assertAlmostEqual(float(v.std()), math.sqrt(1 / fi), delta=0.03 * math.sqrt(1 / fi))
        self.assertTrue(np.array_equal(w(Zero()), np.zeros((fo, fi), np.float32)))
        self.assertTrue(np.array_equal(w(One()), np.ones((fo, fi), np.float32)))
        self.assertTrue(np.array_equal(w(Constant(0.25)), np.full((fo, fi), 0.25, np.float32)))
        self.assertTrue(np.array_equal(w(0.5), np.full((fo, fi), 0.5, np.float32)))
        self.assertTrue(np.array_equal(w(Identity()), np.eye(fo, fi, dtype=np.float32)))
        d = values(Wrap(nn.Conv2d(2, 4, 3, weight_init=Dirac(groups=2)), flat=False), (1, 2, 8, 8))["layer.weight"]
        want = np.zeros((4, 2, 3, 3), np.float32)
        want[0, 0, 1, 1] = want[1, 1, 1, 1] = want[2, 0, 1, 1] = want[3, 1, 1, 1] = 1
        self.assertTrue(np.array_equal(d, want))

    def test_set_data_and_layers(self):
        net = models.ConvNet()
        for _, cell in net.cells_and_names():  # the model zoo's init_weight
            if isinstance(cell, nn.Conv2d):
                cell.weight.set_data(initializer(XavierUniform(), cell.weight.shape, cell.weight.dtype))
            if isinstance(cell, nn.Dense):
                cell.weight.set_data(initializer(TruncatedNormal(0.02), cell.weight.shape, ms.float32))
                cell.bias.set_data(initializer("zeros", cell.bias.shape, cell.bias.dtype))
        net.bn2.gamma.set_data(initializer("zeros", net.bn2.gamma.shape))
        net.bn1.moving_variance.set_data(ms.Tensor(np.full(8, 2.0, np.float32)))
        fc = np.arange(10 * 784, dtype=np.float32).reshape(10, 784) / 1e4
        v = values(net)
        b = math.sqrt(6 / (1 * 9 + 8 * 9))
        self.assertLessEqual(float(np.abs(v["conv1.weight"]).max()), b * (1 + 1e-6))
        self.assertGreater(float(np.abs(v["conv1.weight"]).max()), 0.9 * b)
        self.assertLessEqual(float(np.abs(v["fc.weight"]).max()), 0.04 * (1 + 1e-6))
        self.assertTrue(np.array_equal(v["fc.bias"], np.zeros(10, np.float32)))
        self.assertTrue(np.array_equal(v["bn2.weight"], np.zeros(16, np.float32)))
        self.assertTrue(np.array_equal(v["bn1.weight"], np.ones(8, np.float32)))
        self.assertTrue(np.array_equal(v["bn1.running_var"], np.full(8, 2.0, np.float32)))
        # values: loaded when the Model is built; a later set_data (initializer) replaces values given first
        net = Wrap(nn.Dense(784, 10, weight_init=ms.Tensor(fc)))
        self.assertTrue(np.array_equal(values(net)["layer.weight"], fc))
        net = Wrap(nn.Dense(784, 10, weight_init=ms.Tensor(fc)))
        net.layer.weight.set_data(initializer(Normal(0.02), (10, 784)))
        self.assertTrue(np.array_equal(values(net)["layer.weight"], values(Raw())["layer.weight"]))
        p = ms.Parameter(initializer("he_uniform", (3, 4)), name="w")
        self.assertEqual(p.shape, (3, 4))
        # BatchNorm's gamma_init, Embedding's table, LayerNorm's beta_init
        bn = values(Wrap(nn.BatchNorm2d(3, gamma_init=0, beta_init=Constant(0.5)), flat=False), (2, 3, 4, 4))
        self.assertTrue(np.array_equal(bn["layer.weight"], np.zeros(3, np.float32)))
        self.assertTrue(np.array_equal(bn["layer.bias"], np.full(3, 0.5, np.float32)))

    def test_lenet_trains(self):
        ms.set_seed(1)
        net = LeNet5()
        m = models.ms_model(net, metrics={"loss"}, config={"train.log_every": 1})
        m.train(1, models.ms_data(64, 16))
        w = {k: np.array(v) for k, v in net._trainer.params().items()}
        self.assertAlmostEqual(float(w["fc1.weight"].std()), 0.02, delta=0.002)
        self.assertTrue(all(np.isfinite(a).all() for a in w.values()))
        loss = m.eval(models.ms_data(64, 16))["loss"]
        self.assertTrue(math.isfinite(loss) and loss < 2.5, loss)

    def test_model_zoo_lenet_script(self):
        # the model zoo's LeNet train.py + eval.py (tests/python/mindspore_scripts/lenet_train.py)
        import subprocess
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mindspore_scripts", "lenet_train.py")
        r = subprocess.run([sys.executable, script, models.FASHION, "256", "64", "ck"], cwd=self.dir,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertEqual(len([ln for ln in r.stdout.splitlines() if ", loss is " in ln]), 8, r.stdout)
        acc = float(r.stdout.split("{'Accuracy': ")[1].split("}")[0])
        self.assertTrue(0 <= acc <= 1, r.stdout)
        w = ms.load_checkpoint(os.path.join(self.dir, "ck", "latest"))
        for k in ("conv1.weight", "conv2.weight", "fc1.weight", "fc3.weight"):  # Normal(0.02), 8 steps later
            self.assertAlmostEqual(float(np.std(w[k])), 0.02, delta=0.004, msg=k)

    def test_refusals(self):
        net = Wrap(nn.Dense(784, 10))
        values(net)
        with self.assertRaisesRegex(RuntimeError, "set_data: the model using it is built"):
            net.layer.weight.set_data(initializer("zeros", (10, 784)))
        d = nn.Dense(4, 3)
        with self.assertRaisesRegex(ValueError, r"shape \(3, 5\) differs from the parameter's \(3, 4\)"):
            d.weight.set_data(initializer("zeros", (3, 5)))
        with self.assertRaisesRegex(ValueError, "truncates at two sigmas"):
            TruncatedNormal(0.02, a=-3.0, b=3.0)
        with self.assertRaisesRegex(ValueError, "Orthogonal: MindSpore draws it from NumPy's generator"):
            nn.Dense(4, 3, weight_init=Orthogonal())
        with self.assertRaisesRegex(ValueError, "the class corresponding to 'kaiming' was not found"):
            nn.Dense(4, 3, weight_init="kaiming")
        with self.assertRaisesRegex(ValueError, "can not be computed for a tensor of shape \\(3,\\)"):
            nn.Dense(4, 3, bias_init=XavierUniform())
        self.assertIs(nn.Dense(4, 3, has_bias=False).__dict__.get("_leafp"), None)


if __name__ == "__main__":
    unittest.main()
