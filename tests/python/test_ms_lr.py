"""MindSpore's dynamic learning rates, one process: nn.dynamic_lr's lists against the values
MindSpore's own documentation prints for them; the LearningRateSchedule cells against PyTorch's
schedulers where the two define the same curve (CosineAnnealingLR, ExponentialLR, StepLR,
PolynomialLR, LinearLR: tests/fixtures/ms_lr_schedules.safetensors); a subclass written with ops (BERT's warm-up + polynomial decay, as MindSpore's model
zoo writes it) against the built-ins it combines. Training: an optimizer's learning_rate as a list
(Tessera's schedule table) follows it step by step and trains bitwise as Tessera's own cosine
schedule where the rates are the same; a LearningRateSchedule trains bitwise as its rates given as
a list, also across a second Model.train (its table lengthened) and in TrainOneStepCell; a list
shorter than the run, a 2-D one and a negative rate are refused naming learning_rate."""
import json
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyutil  # noqa: E402

pyutil.require()
import numpy as np  # noqa: E402
import tessera as ms  # noqa: E402
from tessera import nn, ops as P  # noqa: E402
from tessera.common import dtype as mstype  # noqa: E402
import models  # noqa: E402

ms.init()


def Net():
    return models.SmallNet(32)


class Record(ms.Callback):
    def __init__(self):
        self.lrs, self.losses = [], []

    def on_train_step_end(self, rc):
        a = rc.original_args()
        self.lrs.append(a.step_info["lr"])
        self.losses.append(float(a.net_outputs.asnumpy()) if hasattr(a.net_outputs, "asnumpy") else a.net_outputs)


def run(lr, epochs=1, n=96, batch=16, twice=False, **kw):
    """SGD (no momentum: the rate acts on every step alone) on n images; the recorded (lrs, losses)."""
    ms.set_seed(3)
    net = Net()
    opt = nn.SGD(net.trainable_params(), lr, **kw)
    m = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), opt, config={})
    r = Record()
    for _ in range(2 if twice else 1):
        m.train(epochs, models.ms_data(n, batch), callbacks=[r])
    return r.lrs, r.losses


class BertLR(nn.LearningRateSchedule):
    """MindSpore model zoo's BERT schedule: linear warm-up, then polynomial decay (ops on values)."""

    def __init__(self, learning_rate, end_learning_rate, warmup_steps, decay_steps, power):
        super().__init__()
        self.warmup_lr = nn.WarmUpLR(learning_rate, warmup_steps)
        self.decay_lr = nn.PolynomialDecayLR(learning_rate, end_learning_rate, decay_steps, power)
        self.warmup_steps = ms.Tensor(np.array([warmup_steps]).astype(np.float32))
        self.greater = P.Greater()
        self.one = ms.Tensor(np.array([1.0]).astype(np.float32))
        self.cast = P.Cast()

    def construct(self, global_step):
        decay_lr = self.decay_lr(global_step)
        is_warmup = self.cast(self.greater(self.warmup_steps, global_step), mstype.float32)
        warmup_lr = self.warmup_lr(global_step)
        return (self.one - is_warmup) * decay_lr + is_warmup * warmup_lr


def f32(x):
    return [float(np.float32(v)) for v in x]


class TestDynamicLR(unittest.TestCase):
    def test_lists_as_mindspore_documents_them(self):
        # the Examples sections of mindspore.nn.dynamic_lr (MindSpore 2.x), printed values
        self.assertEqual(nn.piecewise_constant_lr([2, 5, 10], [0.1, 0.05, 0.01]),
                         [0.1, 0.1, 0.05, 0.05, 0.05, 0.01, 0.01, 0.01, 0.01, 0.01])
        self.assertEqual(nn.exponential_decay_lr(0.1, 0.9, 6, 2, 1),
                         [0.1, 0.1, 0.09000000000000001, 0.09000000000000001, 0.08100000000000002, 0.08100000000000002])
        self.assertEqual(nn.natural_exp_decay_lr(0.1, 0.9, 6, 2, 2, True),
                         [0.1, 0.1, 0.1, 0.1, 0.016529888822158657, 0.016529888822158657])
        self.assertEqual(nn.inverse_decay_lr(0.1, 0.5, 6, 1, 1, True),
                         [0.1, 0.06666666666666667, 0.05, 0.04, 0.03333333333333333, 0.028571428571428574])
        self.assertEqual(nn.cosine_decay_lr(0.01, 0.1, 6, 2, 2), [0.1, 0.1, 0.05500000000000001, 0.05500000000000001,
                                                                    0.01, 0.01])
        self.assertEqual(nn.polynomial_decay_lr(0.1, 0.01, 6, 2, 2, 0.5),
                         [0.1, 0.1, 0.07363961030678928, 0.07363961030678928, 0.01, 0.01])
        self.assertEqual(nn.warmup_lr(0.1, 6, 2, 2), [0.0, 0.0, 0.05, 0.05, 0.1, 0.1])
        self.assertIs(nn.dynamic_lr.warmup_lr, nn.warmup_lr)

    def test_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "milestone"):
            nn.piecewise_constant_lr([2, 5], [0.1])
        with self.assertRaisesRegex(TypeError, "total_step"):
            nn.cosine_decay_lr(0.01, 0.1, 6.0, 2, 2)
        with self.assertRaisesRegex(ValueError, "max_lr"):
            nn.cosine_decay_lr(0.1, 0.01, 6, 2, 2)
        with self.assertRaisesRegex(ValueError, "decay_steps"):
            nn.CosineDecayLR(0.0, 0.1, 0)


class TestSchedules(unittest.TestCase):
    def test_against_pytorch(self):
        # tests/fixtures/ms_lr_schedules.safetensors (scripts/make_fixtures.py mslr): PyTorch's
        # CosineAnnealingLR, ExponentialLR, StepLR, PolynomialLR and LinearLR rates, the cells'
        # arguments in the metadata
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "ms_lr_schedules.safetensors")
        with open(path, "rb") as f:
            b = f.read()
        n = int.from_bytes(b[:8], "little")
        head = json.loads(b[8:8 + n])
        meta = head.pop("__metadata__")
        self.assertEqual(len(head), 5)
        for name, h in sorted(head.items()):
            case = json.loads(meta[name])
            cell = getattr(nn, case["cell"])(**case["args"])
            lo, hi = h["data_offsets"]
            want = np.frombuffer(b[8 + n + lo:8 + n + hi], np.float32)
            got = cell.rates(len(want))
            self.assertEqual(got.dtype, np.float32)
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-9, err_msg="%s %s" % (name, case))
            # called on a step as MindSpore's examples call it: the same value
            self.assertEqual(float(cell(ms.Tensor(3, ms.int32)).asnumpy()), float(got[3]))

    def test_the_other_formulas(self):
        s = np.arange(9)
        np.testing.assert_allclose(nn.NaturalExpDecayLR(0.1, 0.2, 3).rates(9), 0.1 * np.exp(-0.2 * s), rtol=1e-6)
        np.testing.assert_allclose(nn.NaturalExpDecayLR(0.1, 0.2, 3, True).rates(9), 0.1 * np.exp(-0.2 * (s // 3 * 3)),
                                   rtol=1e-6)
        np.testing.assert_allclose(nn.InverseDecayLR(0.1, 0.5, 2).rates(9), 0.1 / (1 + 0.5 * s / 2), rtol=1e-6)
        np.testing.assert_allclose(nn.InverseDecayLR(0.1, 0.5, 2, True).rates(9), 0.1 / (1 + 0.5 * (s // 2)), rtol=1e-6)
        d = 3 * np.maximum(np.ceil(s / 3), 1)
        np.testing.assert_allclose(nn.PolynomialDecayLR(0.1, 0.01, 3, 1.0, update_decay_steps=True).rates(9),
                                   0.09 * (1 - s / d) + 0.01, rtol=1e-6)

    def test_a_subclass_written_with_ops(self):
        b = BertLR(1e-4, 0.0, 3, 10, 1.0).rates(13)
        w, p = nn.WarmUpLR(1e-4, 3).rates(13), nn.PolynomialDecayLR(1e-4, 0.0, 10, 1.0).rates(13)
        np.testing.assert_array_equal(b, np.where(np.arange(13) < 3, w, p))

        class Graphy(nn.LearningRateSchedule):
            def construct(self, global_step):
                return P.MatMul()(global_step, global_step)
        with self.assertRaisesRegex(ValueError, "Graphy.construct.*could not be computed on values"):
            Graphy().rates(2)


class TestTraining(models.ScratchCase):
    prefix = "tessera-mslr-"

    def test_a_list_is_followed_step_by_step(self):
        lrs = nn.piecewise_constant_lr([2, 4, 6], [0.1, 0.05, 0.01])
        got, _ = run(lrs)
        self.assertEqual(got, f32(lrs))
        # numpy array and 1-D Tensor: the same run
        self.assertEqual(run(np.array(lrs))[0], f32(lrs))
        self.assertEqual(run(ms.Tensor(np.array(lrs, np.float32)))[0], f32(lrs))

    def test_a_table_trains_as_the_same_schedule_built_in(self):
        # Tessera's cosine (computed in C, in double) and the same rates given as a list: bitwise
        n = 6
        cos = [0.1 * 0.5 * (1 + math.cos(math.pi * i / n)) for i in range(n)]
        a_lr, a_loss = run(0.1, schedule={"name": "cosine"})
        b_lr, b_loss = run(cos)
        self.assertEqual(a_lr, b_lr)
        self.assertEqual(a_loss, b_loss)
        self.assertNotEqual(a_loss, run(0.1)[1])  # and the rates matter

    def test_a_schedule_cell_trains_as_its_rates(self):
        cell = nn.CosineDecayLR(0.005, 0.1, 5)
        a_lr, a_loss = run(cell)
        b_lr, b_loss = run(list(cell.rates(6)))
        self.assertEqual(a_lr, f32(cell.rates(6)))
        self.assertEqual((a_lr, a_loss), (b_lr, b_loss))
        # a second train continues the run: its table lengthened, as one train of 2 epochs
        c = run(BertLR(0.1, 0.0, 2, 9, 1.0), twice=True)
        d = run(BertLR(0.1, 0.0, 2, 9, 1.0), epochs=2)
        self.assertEqual(len(c[0]), 12)
        self.assertEqual(c, d)
        self.assertEqual(c[0], f32(BertLR(0.1, 0.0, 2, 9, 1.0).rates(12)))

    def test_train_one_step_cell(self):
        # the user's loop: the table grows with the steps taken (no run length bounds them)
        ms.set_seed(3)
        net = Net()
        cell = nn.ExponentialDecayLR(0.1, 0.5, 2)
        step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True,
                                                                                         reduction="mean")),
                                   nn.SGD(net.trainable_params(), cell))
        losses = [float(step(d["image"], d["label"]).asnumpy()) for _ in range(2)
                  for d in models.ms_data(96, 16).create_dict_iterator()]
        self.assertEqual(len(losses), 12)
        _, want = run(list(cell.rates(12)), epochs=2)
        self.assertEqual(losses, [float(np.float32(x)) for x in want])

    def test_refusals(self):
        with self.assertRaisesRegex(ValueError, r"5 rates for a run of 6 steps.*learning_rate"):
            run([0.1] * 5)
        with self.assertRaisesRegex(ValueError, "1 dimension"):
            run([[0.1, 0.1]])
        with self.assertRaisesRegex(ValueError, "finite rates >= 0"):
            run([0.1, -0.1])
        with self.assertRaisesRegex(TypeError, "learning_rate"):
            run("0.1")
        with self.assertRaisesRegex(ValueError, "schedule="):
            run([0.1] * 6, schedule={"name": "cosine"})


if __name__ == "__main__":
    unittest.main()
