"""MindSpore 2.x scripts ported by changing only their imports (tests/python/mindspore_scripts/):
surface.py (one process: the communication / dtype / dataset packages, the refusals and their
messages, MindSpore's padding rules against numpy) and train_data_parallel.py under mpirun -n 2
against `mpirun -n 2 tessera train` of the same model and keys: bitwise the same checkpoint and
the same step losses, with .shuffle(buffer_size) (data.shuffle_buffer) and with gradients_mean
given (true) or omitted (MindSpore's default False = the YAML's gradients_mean: false)."""
import os
import re
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyutil  # noqa: E402

pyutil.require()
import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "mindspore_scripts")
MODEL = "model: {name: mlp, hidden: [64, 32]}"
OPT = "optimizer: {name: momentum, lr: 0.05, momentum: 0.9, nesterov: false, weight_decay: 0.0}"


class TestMindSporeScripts(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tessera-msscripts-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def sub(self, name):
        d = os.path.join(self.dir, name)
        os.makedirs(d)
        return d

    def test_surface(self):
        d = self.sub("surface")
        rc, out = pyutil.run([sys.executable, os.path.join(SCRIPTS, "surface.py")], d)
        self.assertEqual(rc, 0, out)
        self.assertIn("surface ok", out)
        self.assertIn("eval matches numpy", out)
        for text in (
                "refused MaxPool2d padding: MaxPool2d(padding=1, pad_mode='valid'): a non-zero padding needs "
                "pad_mode='pad'",
                "refused Conv2d padding: Conv2d(padding=1, pad_mode='same'): a non-zero padding needs pad_mode='pad'",
                "refused create_group: create_group('g0', [0, 1]): not supported; Tessera forms the communication "
                "groups",
                "refused parallel_mode typo: set_auto_parallel_context(parallel_mode='data_paralel'): unknown value "
                "'data_paralel' (did you mean 'data_parallel'?",
                "refused repeat(3) in Model.train: repeat(3) on the training set: Tessera's epoch is one pass over "
                "the data; drop the repeat and train 3 times the epochs",
                "refused TypeCast float64: TypeCast(data_type): Float64: Tessera has no tensors of this type",
                "refused comm_dtype with fp32: set_auto_parallel_context: comm_dtype='bf16' disagrees with "
                "force_fp32_communication=True"):
            self.assertIn(text, out)
        self.assertNotIn("--set", out)  # Python errors name Python arguments
        self.assertIn("'gradients_mean': False, 'parallel_mode': 'stand_alone'", out)  # MindSpore's defaults

    def cli(self, name, parallel, *sets):
        d = self.sub(name)
        with open(os.path.join(d, "c.yaml"), "w") as f:
            f.write(MODEL + "\n" + pyutil.YAML_BASE % dict(data=pyutil.FASHION, limit=256, epochs=1, batch=32))
            f.write(OPT + "\n" + parallel + "\n")
        cmd = pyutil.mpirun(2) + [pyutil.tessera_bin(), "train", "c.yaml"]
        for s in sets:
            cmd += ["--set", s]
        rc, out = pyutil.run(cmd, d)
        self.assertEqual(rc, 0, out)
        return d, [float(l) for _, l in pyutil.steps(os.path.join(d, "ck", "metrics.jsonl"))]

    def script(self, name, *args):
        d = self.sub(name)
        rc, out = pyutil.run(pyutil.mpirun(2) + [sys.executable, os.path.join(SCRIPTS, "train_data_parallel.py")] +
                             list(args), d)
        self.assertEqual(rc, 0, out)
        self.assertIn("rank 1 done", out)
        # mpirun may cut a rank's line with another's: the numbers as written
        steps = re.findall(r"step (\d+) loss (\d+\.\d+(?:e-?\d+)?)", out)
        self.assertEqual([int(s) for s, _ in steps], list(range(1, 9)), out)
        return d, [float(v) for _, v in steps]

    def same(self, cli, py):
        (yd, yl), (pd, pl) = cli, py
        self.assertEqual(len(yl), 8)
        self.assertEqual(np.float32(yl).tolist(), np.float32(pl).tolist())
        pyutil.ckpt_equal(self, os.path.join(yd, "ck", "run-00000008.safetensors"),
                          os.path.join(pd, "ck", "run-00000008.safetensors"))

    @unittest.skipUnless(pyutil.mpirun(2), "no mpirun in PATH")
    def test_data_parallel_script_as_cli(self):
        par = "parallel: {mode: data_parallel, gradients_mean: %s, parameter_broadcast: true, bucket_size_mb: 1}"
        mean = self.cli("y_mean", par % "true", "data.shuffle_buffer=40")
        py_mean = self.script("p_mean", "--buffer", "40")
        self.same(mean, py_mean)
        # gradients_mean omitted: MindSpore's default (sum), = the YAML's gradients_mean: false
        nomean = self.cli("y_sum", par % "false", "data.shuffle_buffer=40")
        self.same(nomean, self.script("p_sum", "--buffer", "40", "--no-mean"))
        self.assertNotEqual(mean[1][1:], nomean[1][1:])  # the setting changes the run
        # the buffer shuffle changes the order (so the comparisons above checked it reached the trainer)
        self.assertNotEqual(self.cli("y_nobuf", par % "true")[1], mean[1])


if __name__ == "__main__":
    unittest.main()
