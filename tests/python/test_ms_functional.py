"""MindSpore 2.x's functional training, one process: the quickstart's loop (value_and_grad of a
forward_fn, then optimizer(grads), per batch of the user's iterator) trains bitwise as Model.train
of the same network, optimizer and data (every step's loss, every parameter); its test loop on
values (model(data), loss_fn(pred, label).asnumpy(), (pred.argmax(1) == label).asnumpy().sum())
gives Model.eval's accuracy and loss; mindspore_scripts/quickstart.py (the tutorial, imports
changed) runs and prints those losses; grad() and has_aux=False; misuse refused with its reason
(gradients not applied before the next, applied twice, another optimizer, inputs' gradients)."""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyutil  # noqa: E402

pyutil.require()
import numpy as np  # noqa: E402
import tessera as ms  # noqa: E402
from tessera import nn  # noqa: E402
from tessera.dataset import vision, transforms  # noqa: E402
import models  # noqa: E402

ms.init()
HERE = os.path.dirname(os.path.abspath(__file__))


class Network(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.dense_relu_sequential = nn.SequentialCell(nn.Dense(28 * 28, 64), nn.ReLU(), nn.Dense(64, 64), nn.ReLU(),
                                                       nn.Dense(64, 10))

    def construct(self, x):
        return self.dense_relu_sequential(self.flatten(x))


def pipe(usage, n, batch=16):
    d = ms.dataset.FashionMnistDataset(models.FASHION, usage=usage, num_samples=n, shuffle=False)
    d = d.map([vision.Rescale(1.0 / 255.0, 0), vision.Normalize(mean=(0.1307,), std=(0.3081,)), vision.HWC2CHW()],
              "image")
    return d.map(transforms.TypeCast(ms.int32), "label").batch(batch)


class Losses(ms.Callback):
    def __init__(self):
        self.v = []

    def on_train_step_end(self, rc):
        self.v.append(rc.original_args().step_info["loss"])


def reference(epochs=2):
    ms.set_seed(3)
    net = Network()
    m = ms.Model(net, nn.CrossEntropyLoss(), nn.SGD(net.trainable_params(), 1e-2), metrics={"acc", "loss"}, config={})
    cb = Losses()
    m.train(epochs, pipe("train", 64), callbacks=[cb])
    return net, m, cb.v


def params(net):
    return {k: np.array(v) for k, v in net._trainer.params().items()}


class TestFunctional(models.ScratchCase):
    prefix = "tessera-msfunc-"

    def test_quickstart_loop(self):
        ms.set_seed(3)
        model = Network()
        loss_fn = nn.CrossEntropyLoss()
        optimizer = nn.SGD(model.trainable_params(), 1e-2)

        def forward_fn(data, label):
            logits = model(data)
            return loss_fn(logits, label), logits

        grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters, has_aux=True)
        losses = []
        for _ in range(2):
            model.set_train()
            for data, label in pipe("train", 64).create_tuple_iterator():
                (loss, aux), grads = grad_fn(data, label)
                self.assertTrue(optimizer(grads))
                losses.append(float(loss.asnumpy()))
        net_b, m_b, want = reference()
        self.assertEqual(len(losses), 8)
        self.assertEqual(losses, [float(np.float32(v)) for v in want])
        pa, pb = params(model), params(net_b)
        self.assertEqual(sorted(pa), sorted(pb))
        for k in pa:
            self.assertTrue(np.array_equal(pa[k], pb[k]), k)
        with self.assertRaisesRegex(RuntimeError, "aux output 1 stays in the compiled step"):
            aux.asnumpy()
        # the tutorial's test loop, on values: Model.eval's figures
        model.set_train(False)
        total, loss_sum, correct, nb = 0, 0.0, 0, 0
        for data, label in pipe("test", 40).create_tuple_iterator():
            pred = model(data)
            self.assertEqual(pred.shape, (len(data), 10))
            total += len(data)
            loss_sum += float(loss_fn(pred, label).asnumpy()) * len(data)
            correct += (pred.argmax(1) == label).asnumpy().sum()
            nb += 1
        ev = m_b.eval(pipe("test", 40))
        self.assertEqual((total, nb), (40, 3))  # a last batch of 8
        self.assertEqual(correct / total, ev["acc"])
        self.assertAlmostEqual(loss_sum / total, ev["loss"], places=5)

    def test_the_tutorial_script(self):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        r = subprocess.run([sys.executable, os.path.join(HERE, "mindspore_scripts", "quickstart.py"), models.FASHION,
                            "64", "40"], cwd=self.dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=240)
        self.assertEqual(r.returncode, 0, r.stdout)
        got = [float(l.split()[1]) for l in r.stdout.splitlines() if l.startswith("loss: ")]
        _, _, want = reference()
        self.assertEqual(len(got), 8)
        np.testing.assert_allclose(got, want, rtol=0, atol=5e-7)  # printed with 6 decimals
        self.assertEqual(r.stdout.count("Accuracy: "), 2)
        self.assertIn("Done!", r.stdout)
        # the tutorial's save and load: model.ckpt in MindSpore's format, every parameter loaded
        # (param_not_load printed as []), the reloaded network's predictions printed as MindSpore
        # prints a Tensor (its values)
        self.assertIn("Saved Model to model.ckpt\n[]\n", r.stdout)
        with open(os.path.join(self.dir, "model.ckpt"), "rb") as f:
            self.assertEqual(f.read(1), b"\x0a")
        pred = [l for l in r.stdout.splitlines() if l.startswith("Predicted: ")]
        self.assertEqual(len(pred), 1)
        self.assertRegex(pred[0], r'^Predicted: "\[(\d ){9}\d\]", Actual: "\[(\d ){9}\d\]"$')

    def test_grad_and_no_aux(self):
        ms.set_seed(3)
        model = Network()
        loss_fn = nn.CrossEntropyLoss()
        optimizer = nn.SGD(model.trainable_params(), 1e-2)
        g = ms.grad(lambda d, l: loss_fn(model(d), l), None, model.trainable_params())  # weights by name
        for data, label in pipe("train", 64).create_tuple_iterator():
            optimizer(g(data, label))
        for data, label in pipe("train", 64).create_tuple_iterator():
            optimizer(g(data, label))
        net_b, _, _ = reference()
        pa, pb = params(model), params(net_b)
        for k in pa:
            self.assertTrue(np.array_equal(pa[k], pb[k]), k)

    def test_misuse(self):
        model = Network()
        loss_fn = nn.CrossEntropyLoss()
        opt = nn.SGD(model.trainable_params(), 1e-2)
        other = nn.SGD(Network().trainable_params(), 1e-2)
        f = ms.value_and_grad(lambda d, l: loss_fn(model(d), l), None, opt.parameters)
        data, label = next(iter(pipe("train", 32).create_tuple_iterator()))
        _, grads = f(data, label)
        with self.assertRaisesRegex(ValueError, "were not applied"):
            f(data, label)
        with self.assertRaisesRegex(ValueError, "another optimizer"):
            other(grads)
        opt(grads)
        with self.assertRaisesRegex(ValueError, "applied already"):
            opt(grads)
        with self.assertRaisesRegex(TypeError, "gradients stay in Tessera's compiled step"):
            grads[0]
        with self.assertRaisesRegex(TypeError, "value_and_grad"):
            opt((np.zeros(3),))
        with self.assertRaisesRegex(ValueError, "gradients with respect to the inputs"):
            ms.value_and_grad(lambda d, l: loss_fn(model(d), l))
        with self.assertRaisesRegex(ValueError, "a batch of shape"):
            f(data[:8], label[:8])
        # Tessera's run-long schedules have no run here: refused, saying what to give
        cos = nn.SGD(Network().trainable_params(), 0.1, schedule={"name": "cosine"})
        g = ms.value_and_grad(lambda d, l: loss_fn(model(d), l), None, cos.parameters)
        with self.assertRaisesRegex(ValueError, "schedules span the run's length"):
            g(data, label)

    def test_pynative_mode(self):
        # MindSpore 2.x's default mode, often set explicitly: accepted (every step is compiled)
        ms.set_context(mode=ms.PYNATIVE_MODE)
        try:
            self.assertEqual(ms.get_context("mode"), ms.PYNATIVE_MODE)
            with self.assertRaisesRegex(ValueError, "GRAPH_MODE .0. or PYNATIVE_MODE .1."):
                ms.set_context(mode=2)
        finally:
            ms.set_context(mode=ms.GRAPH_MODE)
        self.assertEqual(ms.get_context("mode"), ms.GRAPH_MODE)


if __name__ == "__main__":
    unittest.main()
