"""The tessera Python package, one process: context and config-key errors, the graph surface
(parameter names, shapes, errors carrying the library's messages), the Python path against the
YAML path (bitwise identical losses and checkpoints for an MLP and a ConvNet written as Cells, and
for a zoo model), callbacks (arguments, exceptions propagating), eval against a numpy forward pass,
checkpoints (round trip, zero-copy views), data set iteration against the IDX files read by numpy."""
import gzip
import os
import shutil
import sys
import tempfile
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


class Tmp(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tessera-py-")
        self.cwd = os.getcwd()
        os.chdir(self.dir)
        ts.reset_auto_parallel_context()

    def tearDown(self):
        os.chdir(self.cwd)
        shutil.rmtree(self.dir, ignore_errors=True)


class TestContext(Tmp):
    def test_rank_and_size(self):
        self.assertEqual((ts.get_rank(), ts.get_group_size()), (0, 1))

    def test_parallel_context_errors_name_the_key(self):
        with self.assertRaisesRegex(ValueError, "parallel.mode.*data_paralel.*did you mean 'data_parallel'"):
            ts.set_auto_parallel_context(parallel_mode="data_paralel")
        with self.assertRaisesRegex(ValueError, "unknown key 'gradient_mean'"):
            ts.set_auto_parallel_context(gradient_mean=True)
        with self.assertRaisesRegex(ValueError, "pipeline_stages"):
            ts.set_auto_parallel_context(pipeline_stages=0)
        with self.assertRaisesRegex(ValueError, "device_num: 4, but the job has 1"):
            ts.set_auto_parallel_context(device_num=4)
        with self.assertRaisesRegex(ValueError, "search_mode"):
            ts.set_auto_parallel_context(search_mode="greedy")
        # a refused call sets nothing
        ts.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True, full_batch=False,
                                     enable_parallel_optimizer=False, search_mode="sharding_propagation",
                                     device_num=1, strategy_ckpt_save_file="s.json", pipeline_stages=1)
        self.assertEqual(ts.get_auto_parallel_context("parallel_mode"), "data_parallel")
        self.assertIs(ts.get_auto_parallel_context("gradients_mean"), True)
        self.assertIsNone(ts.get_auto_parallel_context("optimizer_shard"))
        with self.assertRaisesRegex(ValueError, "set_context: unknown key 'device_id2'"):
            ts.set_context(device_id2=1)
        with self.assertRaisesRegex(ValueError, "train.seed"):
            ts.set_context(seed=-1)

    def test_model_config_error(self):
        net = models.MLP()
        with self.assertRaisesRegex(ValueError, "optimizer.lrr"):
            ts.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.SGD(net.trainable_params(), 0.1), config={"optimizer.lrr": 0.1})
        with self.assertRaisesRegex(ValueError, "sparse=True, reduction='mean'"):
            nn.SoftmaxCrossEntropyWithLogits()
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

    def test_pipeline_stage_on_a_python_cell_is_refused(self):
        net = models.MLP(16, 16)
        net.fc3.pipeline_stage = 1
        self.assertEqual(net.fc3.pipeline_stage, 1)
        with self.assertRaisesRegex(ValueError, "pipeline_stage: .*zoo"):
            self._train_custom(net)
        with self.assertRaisesRegex(ValueError, "pipeline_stage"):
            net.fc3.pipeline_stage = -1

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


class TestYamlPath(Tmp):
    """The same model and config through `tessera train` (YAML) and through the package."""

    def _compare(self, yaml_model, py_net, opt_yaml, opt, epochs=2, limit=256, batch=32):
        os.makedirs("y")
        yaml_cfg("y/c.yaml", yaml_model, epochs, limit, batch, opt_yaml)
        rc, out = pyutil.run([pyutil.tessera_bin(), "train", "c.yaml"], "y")
        self.assertEqual(rc, 0, out)
        os.makedirs("p")
        os.chdir("p")
        losses = []

        class Rec(ts.Callback):
            def step_end(self, rc):
                losses.append(rc.original_args().net_outputs)

        m = models.train(py_net, epochs, limit, batch, opt=opt, callbacks=[Rec()])
        os.chdir("..")
        a, b = pyutil.steps("y/ck/metrics.jsonl"), pyutil.steps("p/ck/metrics.jsonl")
        self.assertEqual(len(a), epochs * limit // batch)
        self.assertEqual(a, b)  # every step's loss as written, bitwise
        self.assertEqual(len(losses), len(a))
        for (_, text), l in zip(a, losses):  # the callback's value is the logged one
            self.assertEqual(float("%.6g" % l), float(text))
        last = "run-%08d.safetensors" % len(a)
        self.assertGreater(pyutil.ckpt_equal(self, "y/ck/" + last, "p/ck/" + last), 3)
        return m

    def test_mlp(self):
        self._compare("model: {name: mlp, hidden: [64, 32]}", models.MLP(64, 32),
                      "{name: momentum, lr: 0.05, momentum: 0.9, nesterov: false, weight_decay: 0.0}", "momentum")

    def test_convnet(self):
        self._compare("model: {name: convnet, channels: [8, 16]}", models.ConvNet(8, 16),
                      "{name: adam, lr: 0.002, betas: [0.9, 0.999], eps: 1.0e-8, weight_decay: 0.0}", "adam",
                      epochs=1, limit=128)

    def test_zoo_model(self):
        self._compare("model: {name: convnet, channels: [8, 16]}", ts.zoo.convnet((8, 16)),
                      "{name: adam, lr: 0.002, betas: [0.9, 0.999], eps: 1.0e-8, weight_decay: 0.0}", "adam",
                      epochs=1, limit=128)

    def test_recompute_is_bitwise_neutral(self):
        os.makedirs("a")
        os.makedirs("b")
        os.chdir("a")
        models.train(models.MLP(64, 32), 1, 128, 32)
        os.chdir("../b")
        net = models.MLP(64, 32)
        net.fc2.recompute()
        m = models.train(net, 1, 128, 32)
        os.chdir("..")
        self.assertEqual(m._keys_used["model.recompute_layers"], ["fc2"])
        self.assertEqual(pyutil.steps("a/ck/metrics.jsonl"), pyutil.steps("b/ck/metrics.jsonl"))


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


class TestCommandLine(Tmp):
    def test_version(self):
        rc, out = pyutil.run([sys.executable, "-m", "tessera"], self.dir)
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, r"^tessera \d+\.\d+\.\d+ \(rank 0 of 1\)")

    def test_train_yaml_as_the_cli(self):
        yaml_cfg("c.yaml", "model: {name: mlp, hidden: [16]}", 1, 128, 32, "{name: sgd, lr: 0.1}")
        os.makedirs("a")
        os.makedirs("b")
        rc, out = pyutil.run([pyutil.tessera_bin(), "train", "../c.yaml", "--set", "train.seed=5"], "a")
        self.assertEqual(rc, 0, out)
        rc, out = pyutil.run([sys.executable, "-m", "tessera", "train", "../c.yaml", "--set", "train.seed=5"], "b")
        self.assertEqual(rc, 0, out)
        self.assertEqual(pyutil.steps("a/ck/metrics.jsonl"), pyutil.steps("b/ck/metrics.jsonl"))
        rc, out = pyutil.run([sys.executable, "-m", "tessera", "train", "../c.yaml", "--set", "train.epochs=ten"], "b")
        self.assertEqual(rc, 1)
        self.assertIn("train.epochs: expected an integer, got 'ten'", out)

    def test_cmake_install(self):
        build, site = os.environ.get("TESSERA_BUILD"), os.environ.get("TESSERA_PY_SITE")
        if not build or not site:
            self.skipTest("TESSERA_BUILD / TESSERA_PY_SITE not set (run by ctest)")
        rc, out = pyutil.run(["cmake", "--install", build, "--prefix", os.path.join(self.dir, "inst")], self.dir)
        self.assertEqual(rc, 0, out)
        env = dict(os.environ, PYTHONPATH=os.path.join(self.dir, "inst", site))
        import subprocess
        r = subprocess.run(["/usr/bin/python3", "-c", "import tessera, tessera._C; print(tessera._C.__file__); "
                            "print(tessera.get_group_size())"], env=env, cwd="/", stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertTrue(r.stdout.startswith(os.path.join(self.dir, "inst", site, "tessera")), r.stdout)
        # with the default prefix the package lands where Debian's python3 looks
        r = subprocess.run(["/usr/bin/python3", "-c", "import sys; print('\\n'.join(sys.path))"],
                           stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=""))
        self.assertIn(os.path.join("/usr/local", site), r.stdout.splitlines())


if __name__ == "__main__":
    unittest.main()
