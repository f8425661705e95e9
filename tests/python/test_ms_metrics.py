"""MindSpore's metric objects, one process: by hand against the values MindSpore's documentation
prints for the same inputs (Accuracy, TopKCategoricalAccuracy, Precision, Recall, MAE, MSE, Loss)
and F1 against its definition from those; in Model.eval as MindSpore's dict ({"Accuracy":
nn.Accuracy()}): the built-in figures equal the trainer's (the names' values), and the same
Accuracy computed in Python from each batch's logits (a subclass: not the trainer's) equals the
trainer's; Precision and a user's Metric subclass against numpy on Model.predict's logits."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyutil  # noqa: E402

pyutil.require()
import numpy as np  # noqa: E402
import tessera as ms  # noqa: E402
from tessera import nn  # noqa: E402
from tessera.train import Accuracy as TrainAccuracy  # noqa: E402
import models  # noqa: E402

ms.init()


def Net():
    return models.SmallNet(32)


class MyAccuracy(nn.Accuracy):
    """The same accuracy, as a user's subclass: computed in Python, not read from the trainer."""

    def update(self, *inputs):
        super().update(*inputs)


class Confident(nn.Metric):
    """A user's metric: the mean of the largest softmax probability."""

    def clear(self):
        self.s, self.n = 0.0, 0

    def update(self, logits, labels):
        z = self._convert_data(logits)
        p = np.exp(z - z.max(1, keepdims=True))
        self.s += float((p.max(1) / p.sum(1)).sum())
        self.n += len(z)

    def eval(self):
        return self.s / self.n


class TestByHand(unittest.TestCase):
    x = ms.Tensor(np.array([[0.2, 0.5], [0.3, 0.1], [0.9, 0.6]]))
    y = ms.Tensor(np.array([1, 0, 1]))

    def run_metric(self, m, *inputs):
        m.clear()
        m.update(*inputs)
        return m.eval()

    def test_as_mindspore_documents(self):
        self.assertAlmostEqual(self.run_metric(nn.Accuracy("classification"), self.x, self.y), 0.6666666666666666)
        np.testing.assert_allclose(self.run_metric(nn.Precision("classification"), self.x, self.y), [0.5, 1.0])
        np.testing.assert_allclose(self.run_metric(nn.Recall("classification"), self.x, self.y), [1.0, 0.5])
        x5 = ms.Tensor(np.array([[0.2, 0.5, 0.3, 0.6, 0.2], [0.1, 0.35, 0.5, 0.2, 0.], [0.9, 0.6, 0.2, 0.01, 0.3]]),
                       ms.float32)
        self.assertAlmostEqual(self.run_metric(nn.TopKCategoricalAccuracy(3), x5, ms.Tensor(np.array([2, 0, 1]))),
                               0.6666666666666666)
        xr = ms.Tensor(np.array([0.1, 0.2, 0.6, 0.9]), ms.float32)
        yr = ms.Tensor(np.array([0.1, 0.25, 0.7, 0.9]), ms.float32)
        self.assertAlmostEqual(self.run_metric(nn.MAE(), xr, yr), 0.037499990314245224, places=7)
        self.assertAlmostEqual(self.run_metric(nn.MSE(), xr, yr), 0.0031250009778887033, places=8)
        self.assertAlmostEqual(self.run_metric(nn.Loss(), ms.Tensor(np.array(0.2), ms.float32)), 0.20000000298023224)
        p, r = np.array([0.5, 1.0]), np.array([1.0, 0.5])
        np.testing.assert_allclose(self.run_metric(nn.F1(), self.x, self.y), 2 * p * r / (p + r))
        f1 = nn.F1()
        f1.update(self.x, self.y)
        self.assertAlmostEqual(f1.eval(average=True), float(np.mean(2 * p * r / (p + r))))
        # one-hot labels as class ids; mindspore.train's names are the same classes
        self.assertAlmostEqual(self.run_metric(TrainAccuracy(), self.x, np.eye(2)[[1, 0, 1]]), 0.6666666666666666)
        self.assertIs(nn.metrics.Accuracy, TrainAccuracy)

    def test_refusals(self):
        with self.assertRaisesRegex(ValueError, "2 inputs"):
            nn.Accuracy().update(self.x)
        with self.assertRaisesRegex(ValueError, "outside the 2 classes"):
            nn.Precision().update(self.x, np.array([1, 0, 2]))
        with self.assertRaisesRegex(RuntimeError, "number of samples is 0"):
            nn.Accuracy().eval()
        with self.assertRaisesRegex(ValueError, "eval_type"):
            nn.Accuracy("multilabel")


class TestModelEval(models.ScratchCase):
    prefix = "tessera-msmetrics-"

    def model(self, metrics):
        ms.set_seed(3)
        net = Net()
        m = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.Momentum(net.trainable_params(), 0.05, 0.9), metrics=metrics, config={})
        m.train(1, models.ms_data(96, 16))
        return m

    def test_dict_of_metric_objects(self):
        test = models.dataset(100, 16, usage="test")  # 100: a last batch of 4
        want = self.model({"acc", "top_5_accuracy", "loss"}).eval(test)
        m = self.model({"Accuracy": nn.Accuracy(), "Top5": nn.Top5CategoricalAccuracy(), "Loss": nn.Loss(),
                        "mine": MyAccuracy(), "P": nn.Precision(), "conf": Confident(), "named": "acc"})
        got = m.eval(test)
        self.assertEqual(list(got), ["Accuracy", "Top5", "Loss", "mine", "P", "conf", "named"])
        self.assertEqual((got["Accuracy"], got["Top5"], got["Loss"], got["named"]),
                         (want["acc"], want["top_5_accuracy"], want["loss"], want["acc"]))
        # computed here from each batch's logits: the trainer's accuracy again
        self.assertAlmostEqual(got["mine"], want["acc"], places=12)
        # against numpy on the logits of every test image at once (Model.predict)
        xs, ys = zip(*test.create_tuple_iterator())
        z, y = m.predict(np.concatenate(xs)), np.concatenate(ys)
        self.assertEqual(z.shape, (100, 10))
        pred = z.argmax(1)
        prec = np.array([((pred == c) & (y == c)).sum() / max((pred == c).sum(), 1) for c in range(10)])
        np.testing.assert_allclose(got["P"], prec, rtol=1e-12)
        e = np.exp(z - z.max(1, keepdims=True))
        self.assertAlmostEqual(got["conf"], float((e.max(1) / e.sum(1)).mean()), places=5)

    def test_bad_metrics(self):
        with self.assertRaisesRegex(ValueError, "metric 'top3' unknown"):
            self.model({"top3"})
        with self.assertRaisesRegex(ValueError, "string 'acc'"):
            self.model("acc")
        with self.assertRaisesRegex(ValueError, "expected a metric name or a Metric object"):
            self.model({"x": 3})


if __name__ == "__main__":
    unittest.main()
