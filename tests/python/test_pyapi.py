"""The tessera Python package, one process: context and config-key errors, the graph surface
(parameter names, shapes, errors carrying the library's messages), layers against numpy, callbacks (arguments, exceptions propagating), eval against a numpy forward pass,
checkpoints (round trip, zero-copy views), data set iteration against the IDX files read by numpy
(and records, image folders). The YAML path: test_pyapi_yaml.py."""
import gzip
import os
import shutil
import subprocess
import sys
import sysconfig
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyutil  # noqa: E402

pyutil.require()
import numpy as np  # noqa: E402
import tessera as ts  # noqa: E402
from tessera import nn, ops  # noqa: E402
from tessera import dataset as ds  # noqa: E402
from tessera.dataset import vision  # noqa: E402
import models  # noqa: E402

ts.init()


def yaml_cfg(path, model, epochs, limit, batch, opt):
    with open(path, "w") as f:
        f.write(model + "\n")
        f.write(pyutil.YAML_BASE % dict(data=pyutil.FASHION, limit=limit, epochs=epochs, batch=batch))
        f.write("optimizer: %s\n" % opt)


Tmp = models.ScratchCase  # each test in its own scratch folder, the auto-parallel context reset


class TestImport(Tmp):
    def test_an_extension_that_does_not_load_names_both_interpreters(self):
        """python3 -m tessera under another interpreter than the build's (a venv's numpy, another
        Python) failed with numpy's bare "numpy.core.multiarray failed to import"; the package's
        copy here has an extension that cannot load, and the message names this interpreter and
        the one the build was made for (python/python.cmake writes _build.py)."""
        import tessera
        src = os.path.dirname(tessera.__file__)
        pkg = os.path.join(self.dir, "tessera")
        shutil.copytree(src, pkg, ignore=shutil.ignore_patterns("_C*.so", "__pycache__"))
        with open(os.path.join(pkg, "_C" + sysconfig.get_config_var("EXT_SUFFIX")), "wb") as f:
            f.write(b"not an ELF file")
        p = subprocess.run([sys.executable, "-c", "import tessera"], cwd=self.dir, env=dict(os.environ, PYTHONPATH=self.dir),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertNotEqual(p.returncode, 0)
        from tessera import _build
        self.assertIn("cannot be loaded by %s (Python %d.%d" % (sys.executable, *sys.version_info[:2]), p.stdout)
        self.assertIn("it was built for %s (Python %s, numpy %s)" % (_build.python, _build.version, _build.numpy), p.stdout)
        self.assertIn("-DPython3_EXECUTABLE=", p.stdout)


class TestContext(Tmp):
    def test_rank_and_size(self):
        self.assertEqual((ts.get_rank(), ts.get_group_size()), (0, 1))

    def test_parallel_context_errors_name_the_key(self):
        with self.assertRaisesRegex(ValueError, r"set_auto_parallel_context\(parallel_mode='data_paralel'\): unknown value 'data_paralel' \(did you mean 'data_parallel'"):
            ts.set_auto_parallel_context(parallel_mode="data_paralel")
        with self.assertRaisesRegex(ValueError, "unknown keyword 'gradient_mean' \\(did you mean 'gradients_mean'\\?\\)"):
            ts.set_auto_parallel_context(gradient_mean=True)
        with self.assertRaisesRegex(ValueError, "pipeline_stages"):
            ts.set_auto_parallel_context(pipeline_stages=0)
        with self.assertRaisesRegex(ValueError, r"set_auto_parallel_context\(device_num=4\): the job has 1 processes"):
            ts.set_auto_parallel_context(device_num=4)
        with self.assertRaisesRegex(ValueError, "search_mode"):
            ts.set_auto_parallel_context(search_mode="greedy")
        # a refused call sets nothing
        ts.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True, full_batch=False,
                                     enable_parallel_optimizer=False, search_mode="sharding_propagation",
                                     device_num=1, strategy_ckpt_save_file="s.json", pipeline_stages=1)
        self.assertEqual(ts.get_auto_parallel_context("parallel_mode"), "data_parallel")
        self.assertIs(ts.get_auto_parallel_context("gradients_mean"), True)
        self.assertEqual(ts.get_auto_parallel_context("optimizer_shard"), "off")  # the default when unset
        with self.assertRaisesRegex(ValueError, "set_context: unknown keyword 'device_id2' \\(did you mean 'device_id'\\?\\)"):
            ts.set_context(device_id2=1)
        with self.assertRaisesRegex(ValueError, r"set_context\(seed=-1\): expected a non-negative integer"):
            ts.set_context(seed=-1)

    def test_device_target(self):
        """set_context(device_target=...) as MindSpore spells it: an unknown target is refused at
        once; GPU is looked for when training starts and, without a usable one, the job is
        refused with the library's one line naming device_target; CPU trains."""
        with self.assertRaisesRegex(ValueError, r"set_context\(device_target='Ascend'\): Tessera runs on 'CPU' or 'GPU'"):
            ts.set_context(device_target="Ascend")
        with self.assertRaisesRegex(ValueError, "device_id"):
            ts.set_context(device_id=-5)
        ts.set_context(device_target="gpu")
        try:
            net = models.MLP(16, 16)
            model = ts.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                             nn.SGD(net.trainable_params(), 0.1))
            try:  # trains where there is a GPU (or TESSERA_LIBCUDA's stand-in), else says why not
                model.train(1, models.dataset(64, 32))
            except Exception as e:  # noqa: BLE001
                self.assertIn("device_target GPU: ", str(e))
        finally:
            ts.set_context(device_target="CPU")
        net = models.MLP(16, 16)
        model = ts.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                         nn.SGD(net.trainable_params(), 0.1))
        model.train(1, models.dataset(64, 32))

    def test_model_config_error(self):
        net = models.MLP()
        with self.assertRaisesRegex(ValueError, "optimizer.lrr"):
            ts.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.SGD(net.trainable_params(), 0.1), config={"optimizer.lrr": 0.1})
        with self.assertRaisesRegex(ValueError, "give reduction='mean'"):  # MindSpore's default 'none'
            ts.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True), nn.SGD(net.trainable_params(), 0.1))
        with self.assertRaisesRegex(ValueError, "metric 'f1'"):
            ts.Model(net, nn.CrossEntropyLoss(), metrics={"f1"})


class TestGraph(Tmp):
    def test_param_names_follow_attribute_paths(self):
        class Block(nn.Cell):
            def __init__(self):
                super().__init__()
                self.conv1 = nn.Conv2d(3, 4, 3)
                self.bn1 = nn.BatchNorm2d(4)

        class Net(nn.Cell):
            def __init__(self):
                super().__init__()
                self.layer1 = nn.SequentialCell([Block(), Block()])
                self.w = ts.Parameter((4, 2), "zeros")

        names = [p.name for p in Net().trainable_params()]
        # the cell's own parameters first, then its sub-cells' (MindSpore's order)
        self.assertEqual(names, ["w", "layer1.0.conv1.weight", "layer1.0.bn1.weight", "layer1.0.bn1.bias",
                                 "layer1.1.conv1.weight", "layer1.1.bn1.weight", "layer1.1.bn1.bias"])

    def _train_custom(self, net, epochs=1):
        model = ts.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                         nn.SGD(net.trainable_params(), 0.05), config={"data.test_limit": 64})
        model.train(epochs, models.dataset(128, 32))
        return model

    def test_bad_shape_raises_with_the_library_message(self):
        class Bad(nn.Cell):
            def __init__(self):
                super().__init__()
                self.w = ts.Parameter((5, 10), "normal")
                self.matmul = ops.MatMul()

            def construct(self, x):
                return self.matmul(ops.Flatten()(x), self.w)  # (N,784) @ (5,10)

        with self.assertRaisesRegex(ValueError, r"matmul.*\(32, ?784\).*\(5, ?10\)|matmul"):
            self._train_custom(Bad())
        try:
            self._train_custom(Bad())
        except ValueError as e:
            self.assertIn("784", str(e))

    def test_exception_in_construct_propagates(self):
        class Oops(Exception):
            pass

        class Net(nn.Cell):
            def construct(self, x):
                raise Oops("in construct")

        with self.assertRaises(Oops):
            self._train_custom(Net())

    def test_pipeline_stage_rules_and_checks(self):
        from tessera.train.model import _stage_rules
        net = models.MLP(16, 16)
        net.fc3.pipeline_stage = 1
        self.assertEqual(net.fc3.pipeline_stage, 1)
        with self.assertRaisesRegex(ValueError, "pipeline_stage"):
            net.fc3.pipeline_stage = -1
        # no pipeline: the stages are ignored (MindSpore's pipeline_stages 1); one process trains
        self._train_custom(net)
        # the rules: each largest subtree on one stage; sub-cells inherit, and may override
        net.fc1.pipeline_stage = 0
        self.assertEqual(_stage_rules(net, 2), {"fc1": 0, "fc3": 1})
        self.assertIsNone(_stage_rules(net, 1))

        class Blocks(nn.Cell):
            def __init__(self):
                super().__init__()
                self.a = models.MLP(16, 16)
                self.b = models.MLP(16, 16)

        blocks = Blocks()
        blocks.a.pipeline_stage = 0
        blocks.b.pipeline_stage = 1
        blocks.b.fc1.pipeline_stage = 0  # an override inside: b's other cells keep stage 1
        self.assertEqual(_stage_rules(blocks, 2), {"a": 0, "b.flatten": 1, "b.fc1": 0, "b.fc2": 1,
                                                   "b.relu": 1, "b.fc3": 1})
        blocks.pipeline_stage = 0  # the root assigned: every cell is on a stage
        blocks.b.fc1.pipeline_stage = 1
        self.assertEqual(_stage_rules(blocks, 2), {"a": 0, "b": 1})
        # MindSpore's refusals: a stage >= pipeline_stages, a stage no cell is on
        ts.set_auto_parallel_context(pipeline_stages=2)
        net.fc3.pipeline_stage = 2
        with self.assertRaisesRegex(ValueError, "cell 'fc3' is on stage 2.*pipeline_stages=2\\) has stages 0..1"):
            self._train_custom(net)
        net.fc3.pipeline_stage = 0
        with self.assertRaisesRegex(ValueError, "no cell is on stage 1 of the 2 pipeline stages"):
            self._train_custom(net)

    def test_custom_parameter_and_ops_train(self):
        class Net(nn.Cell):
            def __init__(self):
                super().__init__()
                self.w = ts.Parameter((10, 784), "torch_default")
                self.b = ts.Parameter((10,), "zeros", weight_decay=False)
                self.matmul = ops.MatMul(transpose_b=True)
                self.add = ops.Add()

            def construct(self, x):
                return self.add(self.matmul(ops.Flatten()(x), self.w), self.b)

        net = Net()
        m = self._train_custom(net, epochs=2)
        p = net._trainer.params()
        self.assertEqual(sorted(p), ["b", "w"])
        self.assertEqual(p["w"].shape, (10, 784))
        self.assertGreater(float(np.abs(p["b"]).sum()), 0.0)  # trained away from its zeros
        self.assertGreater(m.eval(models.dataset(None, 32, usage="test"))["acc"], 0.2)


class TestModel(Tmp):
    def test_callbacks_and_eval_against_numpy(self):
        seen = []

        class Cb(ts.Callback):
            def on_train_begin(self, rc):
                seen.append(("begin", rc.original_args().cur_step_num))

            def step_end(self, rc):
                a = rc.original_args()
                seen.append(("step", a.cur_step_num, a.cur_epoch_num, a.batch_num))

            def epoch_end(self, rc):
                seen.append(("epoch", rc.original_args().cur_epoch_num))

            def end(self, rc):
                seen.append(("end",))

        net = models.MLP(16, 16)
        m = models.train(net, 2, 64, 32, callbacks=[Cb(), ts.LossMonitor(1), ts.TimeMonitor()])
        self.assertEqual(seen, [("begin", 0), ("step", 1, 1, 2), ("step", 2, 1, 2), ("epoch", 1),
                                ("step", 3, 2, 2), ("step", 4, 2, 2), ("epoch", 2), ("end",)])
        # eval on 100 test images against a numpy forward pass of the trained weights
        test = models.dataset(100, 25, usage="test")
        r = m.eval(test)
        self.assertEqual(set(r), {"acc", "loss"})
        p = ts.load_checkpoint("ck/run-00000004.safetensors")
        x = np.concatenate([b[0] for b in test]).reshape(100, -1).astype(np.float64)
        y = np.concatenate([b[1] for b in test])
        h = np.maximum(x @ p["fc1.weight"].T + p["fc1.bias"], 0)
        h = np.maximum(h @ p["fc2.weight"].T + p["fc2.bias"], 0)
        z = h @ p["fc3.weight"].T + p["fc3.bias"]
        lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
        self.assertAlmostEqual(r["acc"], float((z.argmax(1) == y).mean()), places=6)
        self.assertAlmostEqual(r["loss"], float((lse - z[np.arange(100), y]).mean()), places=4)

    def test_exception_in_callback_propagates(self):
        class Stop(Exception):
            pass

        class Cb(ts.Callback):
            def step_end(self, rc):
                if rc.original_args().cur_step_num == 2:
                    raise Stop("at step 2")

        with self.assertRaisesRegex(Stop, "at step 2"):
            models.train(models.MLP(16, 16), 1, 128, 32, callbacks=[Cb()])

    def test_train_twice_continues(self):
        """A second Model.train continues (MindSpore): the losses and parameters of 1 + 1 epochs
        bitwise those of one train of 2 epochs; callbacks count this call's steps."""
        class Rec(ts.Callback):
            def __init__(self):
                self.loss, self.steps = [], []

            def step_end(self, rc):
                a = rc.original_args()
                self.loss.append(a.net_outputs)
                self.steps.append((a.cur_epoch_num, a.cur_step_num))

        def make():
            ts.set_seed(3)
            net = models.MLP(16, 16)
            return net, ts.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                                 nn.Momentum(net.trainable_params(), 0.05, 0.9),
                                 config={"data.test_limit": 64})

        one_net, one = make()
        r1 = Rec()
        one.train(2, models.dataset(128, 32), callbacks=[r1])
        two_net, two = make()
        ra, rb = Rec(), Rec()
        two.train(1, models.dataset(128, 32), callbacks=[ra])
        two.train(1, models.dataset(128, 32), callbacks=[rb])
        self.assertEqual(len(r1.loss), 8)
        self.assertEqual(ra.loss + rb.loss, r1.loss)  # bitwise: the same floats
        self.assertEqual(ra.steps, [(1, 1), (1, 2), (1, 3), (1, 4)])
        self.assertEqual(rb.steps, ra.steps)  # per call, as MindSpore counts them
        self.assertEqual(two._trainer.info()["step"], 8)
        p1, p2 = one_net._trainer.params(), two_net._trainer.params()
        for k in p1:
            self.assertTrue(p1[k].tobytes() == p2[k].tobytes(), k)
        # another data set (another batch): a trainer resumed from the state reached continues
        rc_ = Rec()
        two.train(1, models.dataset(128, 16), callbacks=[rc_])
        self.assertEqual(len(rc_.loss), 8)
        self.assertEqual(two._trainer.info()["step"], 16)
        self.assertEqual(rc_.steps[0], (1, 1))

    def test_train_releases_the_gil(self):
        """Another Python thread keeps running while the C training loop runs (no Python
        callbacks in the loop: before, the thread stood still for the whole of fit)."""
        import threading
        import time
        ticks, stop, busy = [], threading.Event(), []
        net = models.MLP(256, 128)

        def count():
            while not stop.is_set():
                ticks.append(time.monotonic())
                t = net.__dict__.get("_trainer")
                if t is not None and not busy:
                    try:  # the trainer is not used from another thread while it runs
                        t.info()
                    except RuntimeError as e:
                        busy.append(str(e))
                time.sleep(0.001)

        th = threading.Thread(target=count)
        th.start()
        try:
            t0 = time.monotonic()
            models.train(net, 3, 1024, 32)  # 96 steps in C
            t1 = time.monotonic()
        finally:
            stop.set()
            th.join()
        inside = [t for t in ticks if t0 <= t <= t1]
        gaps = [b - a for a, b in zip(inside, inside[1:])]
        self.assertGreater(len(inside), 20)
        # the longest pause of the counting thread is a small part of train (a fit holding the
        # GIL stops it for all of the loop)
        self.assertLess(max(gaps), 0.5 * (t1 - t0), "thread stalled %.3f s of %.3f s" % (max(gaps), t1 - t0))
        self.assertEqual(busy, ["Trainer: busy (fit or evaluate is running in another thread)"])

    def test_request_stop(self):
        n = []

        class Cb(ts.Callback):
            def step_end(self, rc):
                n.append(1)
                rc.request_stop()

        models.train(models.MLP(16, 16), 2, 128, 32, callbacks=[Cb()])
        self.assertEqual(len(n), 1)


def np_eval(z, y):
    lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
    return float((z.argmax(1) == y).mean()), float((lse - z[np.arange(len(y)), y]).mean())


class TestLayers(Tmp):
    """Layers without a YAML twin, trained briefly, then evaluated against numpy forward passes of
    the trained weights (the test split, 60 images)."""

    def train_eval(self, net, transforms=None):
        tf = transforms or [vision.Rescale(1.0 / 255), vision.HWC2CHW()]
        mk = lambda usage, n: ds.FashionMnistDataset(pyutil.FASHION, usage=usage, num_samples=n).map(tf).batch(20)
        m = ts.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.Adam(net.trainable_params(), 0.003), metrics={"acc", "loss"},
                     config={"data.test_limit": 60})
        m.train(1, mk("train", 200), callbacks=[ts.ModelCheckpoint("run", "ck")])
        r = m.eval(mk("test", 60))
        test = mk("test", 60)
        x = np.concatenate([b[0] for b in test])
        y = np.concatenate([b[1] for b in test])
        return r, ts.load_checkpoint("ck/run-00000010.safetensors"), x, y

    def test_layernorm_attention_gelu_dropout(self):
        class Net(nn.Cell):
            def __init__(self):
                super().__init__()
                self.ln = nn.LayerNorm(28, epsilon=1e-5)
                self.attn = nn.MultiHeadAttention(28, 4)
                self.gelu = nn.GELU()
                self.drop = nn.Dropout(p=0.1)
                self.flatten = nn.Flatten()
                self.fc = nn.Dense(784, 10)

            def construct(self, x):
                h = self.attn(self.ln(x.reshape(x.shape[0], 28, 28)))
                return self.fc(self.drop(self.flatten(self.gelu(h))))

        net = Net()
        self.assertEqual([p.name for p in net.trainable_params()][:4],
                         ["ln.weight", "ln.bias", "attn.q_proj.weight", "attn.q_proj.bias"])
        r, p, x, y = self.train_eval(net)
        x = x.reshape(-1, 28, 28).astype(np.float64)
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        h = (x - mu) / np.sqrt(var + 1e-5) * p["ln.weight"] + p["ln.bias"]
        lin = lambda t, n: t @ p[n + ".weight"].T.astype(np.float64) + p[n + ".bias"]
        B, T, H, D = h.shape[0], 28, 4, 7
        q, k, v = (lin(h, "attn." + n).reshape(B, T, H, D).transpose(0, 2, 1, 3) for n in ("q_proj", "k_proj", "v_proj"))
        a = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D) + np.triu(np.full((T, T), -np.inf), 1)
        a = np.exp(a - a.max(-1, keepdims=True))
        o = ((a / a.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(B, T, 28)
        o = lin(o, "attn.out_proj")
        g = 0.5 * o * (1 + np.tanh(np.sqrt(2 / np.pi) * (o + 0.044715 * o ** 3)))
        acc, loss = np_eval(lin(g.reshape(B, -1), "fc"), y)
        self.assertAlmostEqual(r["acc"], acc, places=6)
        self.assertAlmostEqual(r["loss"], loss, places=4)

    def test_embedding_avgpool_sequential(self):
        class Net(nn.Cell):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(256, 2)
                self.pool = nn.AvgPool2d(2, 2)
                self.head = nn.SequentialCell([nn.Flatten(), nn.Dense(2 * 14 * 14, 16), nn.Tanh(), nn.Dense(16, 10)])

            def construct(self, x):  # pixel values 0..255 as f32: the trainer feeds float samples
                ids = x.reshape(x.shape[0], 28, 28).astype("int32")
                e = self.emb(ids)                                     # (N, 28, 28, 2)
                return self.head(self.pool(e.transpose(0, 3, 1, 2)))

        net = Net()
        r, p, x, y = self.train_eval(net, [vision.Rescale(1.0), vision.HWC2CHW()])
        e = p["emb.weight"].astype(np.float64)[x.reshape(-1, 28, 28).astype(np.int64)].transpose(0, 3, 1, 2)
        pooled = e.reshape(-1, 2, 14, 2, 14, 2).mean((3, 5))
        h = np.tanh(pooled.reshape(len(y), -1) @ p["head.1.weight"].T + p["head.1.bias"])
        acc, loss = np_eval(h @ p["head.3.weight"].T + p["head.3.bias"], y)
        self.assertAlmostEqual(r["acc"], acc, places=6)
        self.assertAlmostEqual(r["loss"], loss, places=4)


class TestCheckpoint(Tmp):
    def test_round_trip_and_zero_copy(self):
        d = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.array([1, 2, 3], dtype=np.int64),
             "c": np.ones((2, 2), dtype=np.float16), "d": np.arange(5, dtype=np.uint8)}
        ts.save_checkpoint(d, "x.safetensors", append_dict={"epoch": 3})
        e = ts.load_checkpoint("x.safetensors")
        for k in d:
            self.assertEqual(e[k].dtype, d[k].dtype)
            self.assertTrue(np.array_equal(e[k], d[k]), k)
            self.assertFalse(e[k].flags["OWNDATA"])  # a view into the file's memory
        with self.assertRaisesRegex(ValueError, "dtype"):
            ts.save_checkpoint({"z": np.zeros(2, dtype=np.complex64)}, "z.safetensors")
        self.assertFalse(os.path.exists("z.safetensors"))
        with self.assertRaisesRegex(OSError, "nope.safetensors: cannot open"):
            ts.load_checkpoint("nope.safetensors")

    def test_load_param_into_net(self):
        net = models.MLP(16, 16)
        m = models.train(net, 1, 64, 32)
        p = {k: np.array(v) for k, v in ts.load_checkpoint("ck/run-00000002.safetensors").items()}
        before = m.eval(models.dataset(64, 32, usage="test"))
        net2 = models.MLP(16, 16)
        ts.load_param_into_net(net2, p)
        m2 = ts.Model(net2, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), metrics={"acc", "loss"},
                      config={"data.test_limit": 64})
        self.assertEqual(m2.eval(models.dataset(64, 32, usage="test")), before)
        w = net2._trainer.params()["fc1.weight"]
        self.assertTrue(np.array_equal(w, p["fc1.weight"]))
        self.assertFalse(w.flags["OWNDATA"])  # the trainer's store, viewed


class TestDataset(Tmp):
    @staticmethod
    def idx(name):
        p = os.path.join(pyutil.FASHION, name)
        raw = gzip.open(p + ".gz").read() if os.path.exists(p + ".gz") else open(p, "rb").read()
        return raw

    def test_batches_against_the_idx_files(self):
        img = np.frombuffer(self.idx("t10k-images-idx3-ubyte")[16:], dtype=np.uint8).reshape(-1, 28, 28)
        lab = np.frombuffer(self.idx("t10k-labels-idx1-ubyte")[8:], dtype=np.uint8)
        d = ds.FashionMnistDataset(pyutil.FASHION, usage="test", num_samples=50, shuffle=False)
        d = d.map([vision.Rescale(1.0 / 255), vision.HWC2CHW()]).map(ds.transforms.TypeCast(np.int32),
                                                                      input_columns="label").batch(20)
        self.assertEqual(d.get_dataset_size(), 3)
        got = list(d.create_tuple_iterator())
        self.assertEqual([b[0].shape for b in got], [(20, 1, 28, 28), (20, 1, 28, 28), (10, 1, 28, 28)])
        x = np.concatenate([b[0] for b in got])
        y = np.concatenate([b[1] for b in got])
        self.assertEqual(y.dtype, np.int32)
        self.assertTrue(np.array_equal(y, lab[:50]))
        np.testing.assert_allclose(x[:, 0], img[:50].astype(np.float32) * np.float32(1 / 255.0), rtol=0, atol=1e-7)

    def test_shards_partition_the_data(self):
        def labels(shard):
            d = ds.FashionMnistDataset(pyutil.FASHION, usage="test", num_samples=40, shuffle=True, num_shards=2,
                                       shard_id=shard).map([vision.ToTensor()]).batch(5)
            return [list(b[1]) for b in d]
        a, b = labels(0), labels(1)
        self.assertEqual(len(a), 4)
        lab = np.frombuffer(self.idx("t10k-labels-idx1-ubyte")[8:], dtype=np.uint8)[:40]
        self.assertEqual(sorted(sum(a, []) + sum(b, [])), sorted(lab.tolist()))

    def test_record_dataset_as_its_source(self):
        os.makedirs("rec")
        for prefix in ("train", "test"):  # the records source opens the training split too
            rc, out = pyutil.run([pyutil.tessera_bin(), "data", "convert", "--source", "mnist", "--input",
                                  pyutil.FASHION, "--split", "test", "--output", "rec/" + prefix, "--shards", "3"],
                                 self.dir)
            self.assertEqual(rc, 0, out)
        tf = [vision.Rescale(1.0 / 255), vision.HWC2CHW()]
        a = ds.RecordDataset(os.path.join(self.dir, "rec"), usage="test", num_samples=45, shuffle=False).map(tf).batch(15)
        b = ds.FashionMnistDataset(pyutil.FASHION, usage="test", num_samples=45, shuffle=False).map(tf).batch(15)
        got, want = list(a), list(b)
        self.assertEqual(len(got), 3)
        for (x1, y1), (x2, y2) in zip(got, want):
            self.assertTrue(np.array_equal(x1, x2) and np.array_equal(y1, y2))

    def test_image_folder(self):
        import struct
        import zlib

        def png(path, a):  # 8-bit RGB, no filter
            raw = b"".join(b"\x00" + a[i].tobytes() for i in range(a.shape[0]))
            chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
            with open(path, "wb") as f:
                f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", a.shape[1], a.shape[0], 8, 2, 0, 0, 0))
                        + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
        rng = np.random.default_rng(0)
        want = {}
        for c in ("cat", "dog"):
            os.makedirs(os.path.join("imgs", "train", c))
            for i in range(3):
                a = rng.integers(0, 256, size=(6, 5, 3), dtype=np.uint8)
                png(os.path.join("imgs", "train", c, "%d.png" % i), a)
                want[a.tobytes()] = ("cat", "dog").index(c)
        d = ds.ImageFolderDataset(os.path.join(self.dir, "imgs", "train"), shuffle=False).map(
            [vision.Rescale(1.0), vision.HWC2CHW()]).batch(6)
        (x, y), = list(d)
        self.assertEqual(x.shape, (6, 3, 6, 5))
        got = {x[i].transpose(1, 2, 0).astype(np.uint8).tobytes(): int(y[i]) for i in range(6)}
        self.assertEqual(got, want)

    def test_bad_dataset_errors(self):
        with self.assertRaises(FileNotFoundError):
            ds.MnistDataset("/nonexistent/dir")
        with self.assertRaisesRegex(ValueError, "usage"):
            ds.MnistDataset(pyutil.FASHION, usage="val")
        d = ds.MnistDataset(self.dir).batch(4)  # an empty folder: the library names the file
        with self.assertRaisesRegex(FileNotFoundError, "train-images"):
            list(d)
        with self.assertRaisesRegex(ValueError, "Python functions"):
            ds.MnistDataset(pyutil.FASHION).map([lambda x: x])


if __name__ == "__main__":
    unittest.main()
