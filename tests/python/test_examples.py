"""examples/python/ at tiny settings: the ResNet example (CIFAR-10-shaped synthetic data, a
ResNet-20 instead of -50 to stay fast) under mpirun -n 2 as data_parallel, semi_auto_parallel and
auto_parallel (searched for a built-in cluster: this machine is not calibrated in tests), and the
custom-cell example with op.shard strategies under mpirun -n 2 against one process (the
strategies change only how the work is cut: every step's loss within 1e-4, and the evaluation)."""
import json
import math
import os
import re
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyutil  # noqa: E402

pyutil.require()
if not pyutil.mpirun(2):
    pyutil.skip_main("no mpirun in PATH")

EX = os.path.join(os.environ.get("TESSERA_SRC", os.path.join(pyutil.HERE, "..", "..")), "examples", "python")


class TestExamples(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tessera-pyex-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def resnet(self, mode, *extra):
        cmd = pyutil.mpirun(2) + [sys.executable, os.path.join(EX, "resnet50_cifar10.py"), "--synthetic",
                                  os.path.join(self.dir, "cifar"), "--samples", "40", "--batch", "4", "--depth",
                                  "20", "--parallel", mode] + list(extra)
        rc, out = pyutil.run(cmd, self.dir)
        self.assertEqual(rc, 0, out)
        # both ranks print (their lines may interleave): 40 samples / 4 per step
        losses = [float(x) for x in re.findall(r"loss is (-?\d+\.\d+(?:e[-+]\d+)?)", out)]
        self.assertGreaterEqual(len(losses), 10, out)
        self.assertTrue(all(math.isfinite(x) for x in losses))
        self.assertRegex(out, r"accuracy: 0\.\d+")
        return out

    def test_resnet_data_parallel(self):
        self.resnet("data")

    def test_resnet_semi_auto(self):
        self.resnet("semi")

    def test_resnet_auto(self):
        self.resnet("auto", "--cluster", "dgx-a100-80g")

    def test_custom_cell_shards(self):
        ex = os.path.join(EX, "shard_custom_cell.py")
        rc, one = pyutil.run([sys.executable, ex, "--samples", "320", "--metrics", "one.jsonl"], self.dir)
        self.assertEqual(rc, 0, one)
        rc, two = pyutil.run(pyutil.mpirun(2) + [sys.executable, ex, "--samples", "320", "--metrics", "two.jsonl"],
                             self.dir)
        self.assertEqual(rc, 0, two)
        a = pyutil.steps(os.path.join(self.dir, "one.jsonl"))
        b = pyutil.steps(os.path.join(self.dir, "two.jsonl"))
        self.assertEqual(len(a), 5)
        self.assertEqual([s for s, _ in a], [s for s, _ in b])
        for (_, x), (_, y) in zip(a, b):
            self.assertAlmostEqual(float(x), float(y), delta=1e-4)
        e1 = eval(re.search(r"eval: (\{.*\})", one).group(1))
        e2 = eval(re.search(r"eval: (\{.*\})", two).group(1))
        self.assertAlmostEqual(e1["acc"], e2["acc"], delta=2e-3)
        self.assertAlmostEqual(e1["loss"], e2["loss"], delta=1e-4)


if __name__ == "__main__":
    unittest.main()
