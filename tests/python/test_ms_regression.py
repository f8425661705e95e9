"""Regression and MindSpore's other losses, one process: float32 targets from a GeneratorDataset
train a network's own loss. Each of MSELoss, L1Loss, RMSELoss, SmoothL1Loss (beta 0.5, mean),
BCEWithLogitsLoss (weight, pos_weight) and NLLLoss (class weights, int labels) against numpy: two
SGD steps of a Dense(4, 3) from given weights, every step's loss and the final parameters from
numpy's forward and hand-derived gradients; the same MSE run through value_and_grad (the user's
loop) and TrainOneStepCell; MindSpore's "linear function fitting" tutorial script
(mindspore_scripts/linear_fit.py: imports changed) fits y = 2x + 3; data parallel on 2 ranks
(mindspore_scripts/regression_dp.py) as one process; Parameter.asnumpy() is the
trained value and a second Model on the network starts from it; the refusals (a zoo network on
float targets, the classification evaluation of a regression)."""
import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pyutil  # noqa: E402

pyutil.require()
import numpy as np  # noqa: E402
import tessera as ms  # noqa: E402
from tessera import nn  # noqa: E402
import tessera.dataset as ds  # noqa: E402
import models  # noqa: E402

ms.init()

RNG = np.random.default_rng(7)
X = RNG.standard_normal((32, 4)).astype(np.float32)
Y = RNG.standard_normal((32, 3)).astype(np.float32)
YB = (RNG.random((32, 3)) > 0.5).astype(np.float32)
YC = (np.arange(32) * 7 % 3).astype(np.int64)
W0 = (RNG.standard_normal((3, 4)) * 0.5).astype(np.float32)
B0 = (RNG.standard_normal(3) * 0.1).astype(np.float32)
LR = 0.1
POS_W = np.array([1.0, 2.0, 0.5], np.float32)
BCE_W = np.array([0.5, 1.0, 2.0], np.float32)
NLL_W = np.array([1.0, 2.0, 0.5], np.float32)


class Src:
    def __init__(self, y):
        self.y = y

    def __getitem__(self, i):
        return X[i], self.y[i]

    def __len__(self):
        return len(X)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 3, weight_init=ms.Tensor(W0), bias_init=ms.Tensor(B0))

    def construct(self, x):
        return self.fc(x)


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


# per loss: (loss value, d loss / d logits) in float64
def np_mse(z, y):
    d = z - y
    return (d ** 2).mean(), 2 * d / d.size


def np_l1(z, y):
    d = z - y
    return np.abs(d).mean(), np.sign(d) / d.size


def np_rmse(z, y):
    d = z - y
    r = np.sqrt((d ** 2).mean())
    return r, d / (d.size * r)


def np_smooth_l1(z, y, beta=0.5):
    d = z - y
    a = np.abs(d)
    per = np.where(a < beta, 0.5 * d ** 2 / beta, a - 0.5 * beta)
    g = np.where(a < beta, d / beta, np.sign(d))
    return per.mean(), g / d.size


def np_bce(z, y):
    per = BCE_W * ((1 - y) * z + (1 + (POS_W - 1) * y) * (np.log1p(np.exp(-np.abs(z))) + np.maximum(-z, 0)))
    g = BCE_W * ((1 - y) - (1 + (POS_W - 1) * y) * sigmoid(-z))
    return per.mean(), g / per.size


def np_nll(z, y):
    w = NLL_W[y]
    per = -w * z[np.arange(len(y)), y]
    g = np.zeros_like(z)
    g[np.arange(len(y)), y] = -w / w.sum()
    return per.sum() / w.sum(), g


def np_run(fn, y, steps=2, batch=16):
    """Losses of `steps` SGD steps over batches of the data, and the final W, b."""
    w, b = W0.astype(np.float64), B0.astype(np.float64)
    losses = []
    for s in range(steps):
        x, t = X[s * batch:(s + 1) * batch].astype(np.float64), y[s * batch:(s + 1) * batch]
        z = x @ w.T + b
        loss, g = fn(z, t.astype(np.float64) if t.dtype.kind == "f" else t)
        losses.append(loss)
        w, b = w - LR * (g.T @ x), b - LR * g.sum(0)
    return losses, w, b


CASES = [("MSELoss", lambda: nn.MSELoss(), np_mse, Y), ("L1Loss", lambda: nn.L1Loss(), np_l1, Y),
         ("RMSELoss", lambda: nn.RMSELoss(), np_rmse, Y),
         ("SmoothL1Loss", lambda: nn.SmoothL1Loss(beta=0.5, reduction="mean"), np_smooth_l1, Y),
         ("BCEWithLogitsLoss", lambda: nn.BCEWithLogitsLoss(weight=ms.Tensor(BCE_W), pos_weight=ms.Tensor(POS_W)),
          np_bce, YB),
         ("NLLLoss", lambda: nn.NLLLoss(weight=NLL_W), np_nll, YC)]


def train(loss, y, steps=2):
    net = Net()
    m = ms.Model(net, loss, nn.SGD(net.trainable_params(), LR))
    got = []

    class Rec(ms.Callback):
        def on_train_step_end(self, rc):
            got.append(float(rc.original_args().net_outputs))
    m.train(1, ds.GeneratorDataset(Src(y), ["data", "label"], shuffle=False).batch(16), callbacks=[Rec()])
    return got[:steps], net, m


class TestRegression(models.ScratchCase):
    prefix = "tessera-regression-"

    def test_losses_against_numpy(self):
        for name, make, fn, y in CASES:
            got, net, _ = train(make(), y)
            want, w, b = np_run(fn, y)
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6, err_msg=name)
            p = net._trainer.params()
            np.testing.assert_allclose(p["fc.weight"], w, rtol=2e-5, atol=2e-6, err_msg=name)
            np.testing.assert_allclose(p["fc.bias"], b, rtol=2e-5, atol=2e-6, err_msg=name)
            # Parameter.asnumpy(): the trained values, as MindSpore's after training
            self.assertTrue(np.array_equal(net.fc.weight.asnumpy(), np.array(p["fc.weight"])), name)

    def test_smooth_l1_default_and_none(self):
        """MindSpore's SmoothL1Loss defaults to reduction 'none': its per-element loss inside a
        custom loss cell (summed there), against numpy."""
        class Summed(nn.LossBase):
            def __init__(self):
                super().__init__()
                self.inner = nn.SmoothL1Loss()

            def construct(self, logits, labels):
                return self.inner(logits, labels).sum()

        got, _, _ = train(Summed(), Y, steps=1)
        z = X[:16].astype(np.float64) @ W0.T.astype(np.float64) + B0
        d = np.abs(z - Y[:16])
        want = np.where(d < 1, 0.5 * d ** 2, d - 0.5).sum()
        np.testing.assert_allclose(got, [want], rtol=2e-6)

    def test_user_loops(self):
        """value_and_grad in the user's loop and TrainOneStepCell, on float targets: the losses and
        parameters of Model.train."""
        want, w, b = np_run(np_mse, Y)
        net = Net()
        loss_fn = nn.MSELoss()
        opt = nn.SGD(net.trainable_params(), LR)
        grad_fn = ms.value_and_grad(lambda d, l: loss_fn(net(d), l), None, opt.parameters)
        got = []
        for s in range(2):
            loss, grads = grad_fn(ms.Tensor(X[s * 16:(s + 1) * 16]), ms.Tensor(Y[s * 16:(s + 1) * 16]))
            opt(grads)
            got.append(float(loss.asnumpy()))
        np.testing.assert_allclose(got, want, rtol=2e-5)
        np.testing.assert_allclose(net.fc.weight.asnumpy(), w, rtol=2e-5, atol=2e-6)
        net2 = Net()
        step = nn.TrainOneStepCell(nn.WithLossCell(net2, nn.MSELoss()), nn.SGD(net2.trainable_params(), LR))
        got2 = [float(np.asarray(step(ms.Tensor(X[s * 16:(s + 1) * 16]), ms.Tensor(Y[s * 16:(s + 1) * 16]))))
                for s in range(2)]
        np.testing.assert_allclose(got2, want, rtol=2e-5)

    def test_second_model_and_metrics(self):
        """A second Model on the trained network evaluates its trained parameters (MindSpore's:
        they are the network's); nn.MSE / nn.MAE from the predictions; the classification
        evaluation of a regression is refused, saying what to use."""
        _, net, m = train(nn.MSELoss(), Y)
        data = ds.GeneratorDataset(Src(Y), ["data", "label"], shuffle=False).batch(16)
        pred = np.asarray(m.predict(ms.Tensor(X)))
        r = ms.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), LR),
                     metrics={"mse": nn.MSE(), "mae": nn.MAE()}).eval(data)
        err = pred.astype(np.float64) - Y
        self.assertAlmostEqual(r["mae"], np.abs(err).sum(1).mean(), places=4)  # MindSpore's: per-sample sums
        self.assertAlmostEqual(r["mse"], (err ** 2).sum(1).mean(), places=4)
        with self.assertRaisesRegex(ValueError, "float32 values \\(a regression\\).*nn.MSE"):
            ms.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), LR), metrics={"acc"}).eval(data)

    def test_zoo_network_refused(self):
        net = ms.zoo.mlp([8], 3)  # (the zoo's networks train with their own cross-entropy)
        m = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.SGD(net.trainable_params(), LR))
        with self.assertRaisesRegex(ValueError, "trains on class labels, but the samples' targets are float32 values"):
            m.train(1, ds.GeneratorDataset(Src(Y), ["data", "label"], shuffle=False).batch(16))

    def test_data_parallel(self):
        """mpirun -n 2, the data sharded: the one process's losses and parameters within 1e-5."""
        cmd = pyutil.mpirun(2)
        if not cmd:
            self.skipTest("no mpirun in PATH")
        script = os.path.join(HERE, "mindspore_scripts", "regression_dp.py")
        outs = []
        for c in ([sys.executable, script], cmd + [sys.executable, script]):
            rc, out = pyutil.run(c, self.dir)
            self.assertEqual(rc, 0, out)
            outs.append(json.loads([l for l in out.splitlines() if l.startswith("{")][0]))
        one, two = outs
        self.assertEqual(len(one["losses"]), 8)
        np.testing.assert_allclose(two["losses"], one["losses"], rtol=1e-5)
        np.testing.assert_allclose(two["w"], one["w"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(two["b"], one["b"], rtol=1e-5, atol=1e-6)
        self.assertLess(one["losses"][-1], one["losses"][0] / 2)  # it learns

    def test_linear_fit_tutorial(self):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        r = subprocess.run([sys.executable, os.path.join(HERE, "mindspore_scripts", "linear_fit.py")], cwd=self.dir,
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
        self.assertEqual(r.returncode, 0, r.stdout)
        vals = [l.rsplit(") ", 1)[-1].strip("[] ") for l in r.stdout.splitlines() if l.startswith("Parameter (name=fc.")]
        self.assertEqual(len(vals), 4, r.stdout)  # printed before and after training
        w, b = float(vals[2]), float(vals[3])
        self.assertLess(abs(w - 2.0), 0.15, r.stdout)
        self.assertLess(abs(b - 3.0), 0.3, r.stdout)
        losses = [float(l.rsplit(" ", 1)[1]) for l in r.stdout.splitlines() if ", loss is " in l]
        self.assertEqual(len(losses), 10)
        self.assertLess(losses[-1], 3.0)


if __name__ == "__main__":
    unittest.main()
