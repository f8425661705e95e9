"""The tessera package against the YAML path, one process: the same model and config through
`tessera train` and through the package give bitwise identical step losses and checkpoints (an
MLP and a ConvNet written as Cells, the zoo convnet, momentum/Adam/AdamW/LAMB; recompute
neutral); `python3 -m tessera` as the CLI; `cmake --install` into the interpreter's site dir."""
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyutil  # noqa: E402

pyutil.require()
import tessera as ts  # noqa: E402
from tessera import nn  # noqa: E402
import models  # noqa: E402
import test_pyapi as base  # noqa: E402  (its helpers; its tests are not collected here)

yaml_cfg = base.yaml_cfg


class TestYamlPath(base.Tmp):
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
            self.assertEqual(np.float32(l), np.float32(float(text)))  # the f32 loss, written by cJSON (>= 15 digits)
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

    def test_adamw_and_lamb(self):
        for name, opt in (("adamw", nn.AdamWeightDecay), ("lamb", nn.Lamb)):
            with self.subTest(name):
                os.makedirs(name)
                os.chdir(name)
                try:
                    net = models.MLP(32, 16)
                    self._compare("model: {name: mlp, hidden: [32, 16]}", net,
                                  "{name: %s, lr: 0.002, betas: [0.9, 0.98], eps: 1.0e-6, weight_decay: 0.01}" % name,
                                  opt(net.trainable_params(), 0.002, beta2=0.98, eps=1e-6, weight_decay=0.01),
                                  epochs=1, limit=128)
                finally:
                    os.chdir("..")

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


class TestCommandLine(base.Tmp):
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
