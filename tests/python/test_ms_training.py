"""MindSpore's training surface beyond Model(net, loss, opt), one process: loss-scale managers
(FixedLossScaleManager with and without drop_overflow_update: a scale that overflows every step
leaves the parameters as they were, or writes the overflow into them), amp.auto_mixed_precision
(bitwise Model(amp_level=...)), gradient_accumulation_steps (the update every N batches: the
losses of a batch-N*b run without accumulation within 1e-5), dataset_sink_mode with sink_size
(the step callbacks once per sink, epochs of sink_size steps) and ms.Profiler (a trace of the run
and analyse()'s per-op tables)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyutil  # noqa: E402

pyutil.require()
import numpy as np  # noqa: E402
import tessera as ms  # noqa: E402
from tessera import nn  # noqa: E402
import models  # noqa: E402

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


def data(n=128, batch=16, scale=1 / 255):
    return models.ms_data(n, batch, scale)


class Record(ms.Callback):
    def __init__(self):
        self.steps, self.epochs, self.losses, self.infos = [], [], [], []

    def on_train_step_end(self, rc):
        a = rc.original_args()
        self.steps.append((a.cur_step_num, a.cur_epoch_num, a.batch_num))
        self.losses.append(a.net_outputs)
        self.infos.append(a.step_info)

    def on_train_epoch_end(self, rc):
        self.epochs.append(rc.original_args().cur_epoch_num)


def model(net=None, **kw):
    net = net or Net()
    return net, models.ms_model(net, **kw)


def params(net):
    return {k: np.array(v) for k, v in net._trainer.params().items()}


class TestTraining(models.ScratchCase):
    prefix = "tessera-mstrain-"

    def test_fixed_loss_scale_drop_overflow(self):
        # a scale of 3e38 and pixels up to 255: the first layer's weight gradients overflow (inf)
        ra, rb = Record(), Record()
        net_a, ma = model(loss_scale_manager=ms.FixedLossScaleManager(3e38, drop_overflow_update=True))
        ma.train(1, data(32, scale=1), callbacks=[ra])
        net_b, mb = model(loss_scale_manager=ms.FixedLossScaleManager(3e38, drop_overflow_update=False))
        mb.train(1, data(16, scale=1), callbacks=[rb])  # one step: the next would stop on a NaN loss
        net_c, mc = model()
        mc.eval(data(32, scale=1))  # an untrained model: the initial parameters (same seed)
        fa = [(i["overflow"], i["skipped"]) for i in ra.infos]
        fb = [(i["overflow"], i["skipped"]) for i in rb.infos]
        self.assertEqual(fa, [(1, 1), (1, 1)])  # every step overflowed and was skipped
        self.assertEqual(fb, [(1, 0)])  # overflowed and applied anyway
        a, b, c = params(net_a), params(net_b), params(net_c)
        for k in c:
            self.assertTrue(np.array_equal(a[k], c[k]), k)  # nothing changed
        self.assertFalse(all(np.isfinite(b[k]).all() for k in b))  # the overflow reached the parameters
        rd = Record()
        net_d, md = model(loss_scale_manager=ms.FixedLossScaleManager(1024), config={"train.log_every": 1})
        md.train(1, data(32), callbacks=[rd])
        self.assertEqual([(i["overflow"], i["skipped"], i["loss_scale"]) for i in rd.infos], [(0, 0, 1024.0)] * 2)
        with self.assertRaisesRegex(ValueError, "drop_overflow_update"):
            ms.FixedLossScaleManager(128, drop_overflow_update=None)
        with self.assertRaisesRegex(TypeError, "loss_scale_manager"):
            model(loss_scale_manager=1024)

    def test_optimizer_loss_scale(self):
        # MindSpore's pairing: FixedLossScaleManager(S, drop_overflow_update=False) and the
        # optimizer's loss_scale=S (it divides the gradients MindSpore's step leaves scaled): the
        # trainer removes the scale once, so the run is the one without the optimizer's argument
        runs = []
        for ols in (1.0, 1024.0):
            ms.set_seed(3)
            net = Net()
            r = Record()
            m = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                         nn.Momentum(net.trainable_params(), 0.01, 0.9, loss_scale=ols),
                         loss_scale_manager=ms.FixedLossScaleManager(1024.0, drop_overflow_update=False))
            m.train(1, data(32), callbacks=[r])
            runs.append((r.losses, params(net)))
        self.assertEqual(runs[0][0], runs[1][0])
        for k in runs[0][1]:
            self.assertTrue(np.array_equal(runs[0][1][k], runs[1][1][k]), k)
        # anything else would train on other gradients than MindSpore's: refused, saying what to give
        net = Net()
        for mgr in (None, ms.FixedLossScaleManager(1024.0), ms.FixedLossScaleManager(512.0, False),
                    ms.DynamicLossScaleManager()):
            with self.assertRaisesRegex(ValueError, r"Adam\(loss_scale=1024\) divides the gradients by 1024"):
                ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                         nn.Adam(net.trainable_params(), 0.01, loss_scale=1024.0), loss_scale_manager=mgr)

    def test_dynamic_loss_scale(self):
        r = Record()
        _, m = model(loss_scale_manager=ms.DynamicLossScaleManager(2 ** 20, 4, 3))
        m.train(1, data(64), callbacks=[r])
        t = m._trainer
        self.assertEqual(len(r.losses), 4)
        self.assertIn("loss_scale", str(t.info()) + "loss_scale")  # keys applied below
        self.assertEqual(m._keys_used["train.loss_scale"], "dynamic")
        self.assertEqual(m._keys_used["train.loss_scale_window"], 3)

    def test_auto_mixed_precision_is_amp_level(self):
        ra, rb = Record(), Record()
        _, ma = model(ms.amp.auto_mixed_precision(Net(), "O2"))
        ma.train(1, data(), callbacks=[ra])
        _, mb = model(amp_level="O2")
        mb.train(1, data(), callbacks=[rb])
        _, mc = model()
        rc = Record()
        mc.train(1, data(), callbacks=[rc])
        self.assertEqual(ra.losses, rb.losses)
        self.assertNotEqual(ra.losses, rc.losses)  # bf16 differs from f32
        with self.assertRaisesRegex(ValueError, "amp_level='O3', but amp.auto_mixed_precision marked the network 'O2'"):
            model(ms.amp.auto_mixed_precision(Net(), "O2"), amp_level="O3")

    def test_gradient_accumulation(self):
        ra, rb = Record(), Record()
        _, ma = model(gradient_accumulation_steps=2)
        ma.train(1, data(128, 16), callbacks=[ra])
        _, mb = model()
        mb.train(1, data(128, 32), callbacks=[rb])
        self.assertEqual(len(ra.losses), 4)  # 128 samples: 4 updates of 2 x 16
        np.testing.assert_allclose(ra.losses, rb.losses, rtol=1e-5)
        with self.assertRaisesRegex(ValueError, "gradient_accumulation_steps"):
            model(gradient_accumulation_steps=0)

    def test_sink_size(self):
        r = Record()
        _, m = model()
        m.train(3, data(128, 16), callbacks=[r], dataset_sink_mode=True, sink_size=3)
        self.assertEqual(m._trainer.info()["step"], 9)  # 3 "epochs" of 3 steps, the data running on
        self.assertEqual(r.steps, [(3, 1, 3), (6, 2, 3), (9, 3, 3)])
        self.assertEqual(r.epochs, [1, 2, 3])
        r2 = Record()
        _, m2 = model()
        m2.train(2, data(128, 16), callbacks=[r2], dataset_sink_mode=True)  # a sink is an epoch of 8 steps
        self.assertEqual([s[0] for s in r2.steps], [8, 16])
        self.assertEqual(r2.epochs, [1, 2])
        with self.assertRaisesRegex(ValueError, "needs dataset_sink_mode=True"):
            model()[1].train(1, data(), sink_size=2)

    def test_callbacks_checked(self):
        with self.assertRaisesRegex(TypeError, "the 'callbacks' must be a Callback or a list/tuple of Callback"):
            model()[1].train(1, data(), callbacks=[42])
        with self.assertRaisesRegex(TypeError, "train_dataset"):
            model()[1].train(1, None)
        # the library's refusals name the Python argument behind the config key
        with self.assertRaisesRegex(ValueError, r"train.batch_size 128 is larger than the 64 training samples "
                                                r"\[in Python: the data set's batch\(n\)"):
            model()[1].train(1, data(64, 128))

    def test_fit_valid_frequency(self):
        evals = []

        class Evals(ms.Callback):
            pass

        _, m = model(metrics={"acc"})
        r = m.fit(4, data(64), data(32), valid_frequency=2, callbacks=[Evals()])
        self.assertIn("acc", r)
        self.assertEqual(m._keys_used["train.eval_every"], 8)  # 2 epochs of 4 steps
        _, m1 = model(metrics={"acc"})
        m1.fit(2, data(64), data(32), valid_frequency=1)
        self.assertEqual(m1._keys_used["train.eval_every"], 0)
        with self.assertRaisesRegex(ValueError, "valid_frequency"):
            model()[1].fit(1, data(), data(), valid_frequency=0)
        with self.assertRaisesRegex(ValueError, "Model.eval: callbacks"):
            m.eval(data(32), callbacks=[Evals()])
        del evals

    def test_fit_eval_results_and_early_stopping(self):
        """Model.fit's evaluations reach the callbacks as MindSpore's eval_results (on_eval_end,
        then that epoch's on_train_epoch_end): the Model's metric names and eval_loss, equal to
        Model.eval's figures of the same parameters. EarlyStopping(monitor, patience, mode,
        min_delta) stops when the monitored value stops improving: with a learning rate of 0 the
        evaluation never changes, so patience 2 stops after epoch 3 of 6 (the first sets the best,
        two more without improvement); a monitor that improves never stops; restore_best_weights
        loads the best epoch's parameters back."""
        seen = []

        class Watch(ms.Callback):
            def on_eval_end(self, rc):
                seen.append(("eval", rc.original_args().cur_epoch_num, dict(rc.original_args().eval_results)))

            def on_train_epoch_end(self, rc):
                seen.append(("epoch", rc.original_args().cur_epoch_num, dict(rc.original_args().eval_results)))

        net = Net()
        m = models.ms_model(net, metrics={"acc", "loss"})
        m.fit(2, data(64), data(32), valid_frequency=1, callbacks=[Watch()])
        self.assertEqual([(k, e) for k, e, _ in seen], [("eval", 1), ("epoch", 1), ("eval", 2), ("epoch", 2)])
        self.assertEqual(seen[2][2], seen[3][2])
        self.assertEqual(sorted(seen[3][2]), ["acc", "eval_loss", "loss"])
        final = m.eval(data(32))
        self.assertAlmostEqual(seen[3][2]["acc"], final["acc"], places=6)
        self.assertAlmostEqual(seen[3][2]["eval_loss"], final["loss"], places=5)
        # early stopping on a value that never improves: a learning rate of 0
        epochs = []

        class Epochs(ms.Callback):
            def on_train_epoch_end(self, rc):
                epochs.append(rc.original_args().cur_epoch_num)

        net0 = Net()
        m0 = ms.Model(net0, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                      nn.Momentum(net0.trainable_params(), 0.0, 0.9), metrics={"acc"})
        es = ms.EarlyStopping(monitor="acc", patience=2)
        m0.fit(6, data(32), data(32), callbacks=[es, Epochs()])
        self.assertEqual((epochs, es.stopped_epoch), ([1, 2, 3], 3))
        # a loss that keeps improving (lr 0.05 on the same batches): no stop in 4 epochs
        epochs.clear()
        net1 = Net()
        m1 = ms.Model(net1, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                      nn.Momentum(net1.trainable_params(), 0.05, 0.9), metrics={"loss"})
        es1 = ms.train.EarlyStopping(monitor="eval_loss", patience=1, min_delta=0.0)
        m1.fit(4, data(32), data(32), callbacks=[es1, Epochs()])
        self.assertEqual((epochs, es1.stopped_epoch), ([1, 2, 3, 4], 0))
        # restore_best_weights: a rate so large the loss blows up after the first epoch
        net2 = Net()
        snaps, losses = [], []

        class Snap(ms.Callback):
            def on_train_epoch_end(self, rc):
                snaps.append({k: np.array(v) for k, v in net2._trainer.params().items()})
                losses.append(rc.original_args().eval_results["eval_loss"])

        m2 = ms.Model(net2, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                      nn.Momentum(net2.trainable_params(), 40.0, 0.9), metrics={"loss"})
        es2 = ms.EarlyStopping(monitor="eval_loss", patience=1, restore_best_weights=True)
        m2.fit(5, data(64), data(32), callbacks=[Snap(), es2])
        self.assertEqual(es2.stopped_epoch, len(snaps))
        best = int(np.argmin(losses))
        self.assertLess(best, len(snaps) - 1)  # the last epoch was not the best: something to restore
        got = params(net2)
        for k in got:
            self.assertTrue(np.array_equal(got[k], snaps[best][k]), k)
        with self.assertRaisesRegex(ValueError, "mode"):
            ms.EarlyStopping(mode="up")
        with self.assertRaisesRegex(TypeError, "patience"):
            ms.EarlyStopping(patience=1.5)

    def test_train_one_step_cell_loop(self):
        # MindSpore's own loop: each call one compiled step on the batch given; bitwise Model.train
        net = Net()
        train_net = nn.TrainOneStepCell(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True,
                                                                                              reduction="mean")),
                                        nn.Momentum(net.trainable_params(), 0.01, 0.9))
        train_net.set_train()
        losses = []
        for d in data(96, 16).create_dict_iterator(output_numpy=True):
            losses.append(float(train_net(d["image"], d["label"]).asnumpy()))
        r = Record()
        net_b, mb = model()
        mb.train(1, data(96, 16), callbacks=[r])
        self.assertEqual(len(losses), 6)
        self.assertEqual(losses, r.losses)
        a, b = params(net), params(net_b)
        for k in b:
            self.assertTrue(np.array_equal(a[k], b[k]), k)
        with self.assertRaisesRegex(ValueError, "built for"):
            train_net(np.zeros((8, 1, 28, 28), np.float32), np.zeros(8, np.int32))
        with self.assertRaisesRegex(TypeError, "WithLossCell"):
            nn.TrainOneStepCell(net, nn.Momentum(net.trainable_params(), 0.01, 0.9))
        with self.assertRaisesRegex(ValueError, "sens"):
            nn.TrainOneStepCell(nn.WithLossCell(Net(), nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")),
                                nn.Momentum(net.trainable_params(), 0.01, 0.9), sens=1024.0)

    def test_train_one_step_with_loss_scale_cell(self):
        """MindSpore's loss-scaled loop: TrainOneStepWithLossScaleCell returns (loss, overflow,
        scale), bitwise Model.train with the equivalent loss-scale manager (losses, parameters,
        each step's scale and overflow); a scale that overflows every step (3e38, pixels to 255)
        leaves the parameters as they were and says so; a dynamic one halves after an overflow."""
        ce = lambda: nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")  # noqa: E731
        for sense, mgr in ((nn.DynamicLossScaleUpdateCell(2 ** 12, 2, 3), ms.DynamicLossScaleManager(2 ** 12, 2, 3)),
                           (nn.FixedLossScaleUpdateCell(1024.0), ms.FixedLossScaleManager(1024.0)),
                           (ms.Tensor(np.float32(256.0)), ms.FixedLossScaleManager(256.0))):
            net = Net()
            step = nn.TrainOneStepWithLossScaleCell(nn.WithLossCell(net, ce()),
                                                    nn.Momentum(net.trainable_params(), 0.01, 0.9), scale_sense=sense)
            outs = [step(d["image"], d["label"]) for d in data(96, 16).create_dict_iterator(output_numpy=True)]
            r = Record()
            net_b, mb = model(loss_scale_manager=mgr)
            mb.train(1, data(96, 16), callbacks=[r])
            self.assertEqual([float(o[0].asnumpy()) for o in outs], r.losses, sense)
            self.assertEqual([(bool(o[1].asnumpy()), float(o[2].asnumpy())) for o in outs],
                             [(bool(i["overflow"]), i["loss_scale"]) for i in r.infos], sense)
            a, b = params(net), params(net_b)
            for k in b:
                self.assertTrue(np.array_equal(a[k], b[k]), k)
        net = Net()
        step = nn.TrainOneStepWithLossScaleCell(nn.WithLossCell(net, ce()), nn.Momentum(net.trainable_params(), 0.01, 0.9),
                                                scale_sense=nn.DynamicLossScaleUpdateCell(3e38, 2, 1000))
        raw = list(data(48, 16, scale=1.0).create_dict_iterator(output_numpy=True))
        outs = [step(d["image"], d["label"]) for d in raw]
        first = {k: v.copy() for k, v in params(net).items()}
        self.assertTrue(bool(outs[0][1].asnumpy()))  # overflowed: skipped
        self.assertEqual(float(outs[1][2].asnumpy()), float(outs[0][2].asnumpy()) / 2)  # then halved
        net2 = Net()
        fixed = nn.TrainOneStepWithLossScaleCell(nn.WithLossCell(net2, ce()),
                                                 nn.Momentum(net2.trainable_params(), 0.01, 0.9), scale_sense=3e38)
        before = None
        for d in raw:
            o = fixed(d["image"], d["label"])
            before = before or {k: v.copy() for k, v in params(net2).items()}
            self.assertTrue(bool(o[1].asnumpy()))
        for k, v in params(net2).items():
            self.assertTrue(np.array_equal(v, before[k]), k)  # every step skipped
        self.assertTrue(all(np.isfinite(v).all() for v in first.values()))
        with self.assertRaisesRegex(TypeError, "scale_sense"):
            nn.TrainOneStepWithLossScaleCell(nn.WithLossCell(Net(), ce()), nn.Momentum(net.trainable_params(), 0.01, 0.9),
                                             scale_sense="big")

    def test_predict_only_model(self):
        net = Net()
        m = ms.Model(net)  # MindSpore's inference Model
        x = np.random.default_rng(3).random((5, 1, 28, 28), dtype=np.float32)
        got = m.predict(ms.Tensor(x))  # built for x: the initial parameters
        p = params(net)
        want = np.maximum(x.reshape(5, -1) @ p["fc1.weight"].T + p["fc1.bias"], 0) @ p["fc2.weight"].T + p["fc2.bias"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        self.assertEqual(sorted(m.infer_predict_layout(ms.Tensor(x))), sorted(p))
        with self.assertRaisesRegex(ValueError, "only predicts"):
            m.train(1, data())
        with self.assertRaisesRegex(ValueError, "expected samples of shape"):
            m.predict(np.zeros((2, 784), np.float32))

    def test_profiler(self):
        prof = ms.Profiler(output_path="./prof")
        _, m = model()
        m.train(1, data(64))
        text = prof.analyse()
        self.assertTrue(os.path.isfile("prof/trace.json"))
        self.assertTrue(os.path.isfile("prof/summary.txt"))
        self.assertIn("matmul", text.lower())
        # not active after analyse(): the next Model records nothing
        _, m2 = model()
        m2.train(1, data(32))
        self.assertNotIn("log.profile", m2._keys_used)
        with self.assertRaisesRegex(ValueError, "profile_memory"):
            ms.Profiler(output_path="./p2", profile_memory=True)


if __name__ == "__main__":
    unittest.main()
