"""hybrid_parallel from Python (mindspore_scripts/hybrid_train.py): MindSpore's hybrid-parallel
network written as a Cell (column-parallel w1 and row-parallel w2 as layerwise_parallel slices,
ops.AllReduce placed by hand, a replicated bias) under mpirun -n 2 and -n 4 against the same
network trained in one process: every step's loss within 1e-5 relative, the gathered checkpoint
(save_checkpoint and ModelCheckpoint(integrated_save=True): whole tensors), Model.eval and
Model.predict within 1e-5; the checkpoint loaded into the one-process network predicts the same; with
gradients_mean=False (each rank's loss seeded 1, so every gradient is N times the one process's)
the run equals the one process with N times the learning rate (Momentum is linear in the
gradient; its buffers hold N times the gradients); the same network through AllGather and
ReduceScatter(MEAN) under -n 2 against one process too; every refusal's message (hybrid_train.py refusals);
the -n 2 run on GPUs (device_target="GPU", the stand-ins) against the one CPU process."""
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyutil  # noqa: E402

try:
    import numpy as np
    import tessera as ms
except ImportError as e:
    pyutil.skip_main("numpy or the tessera package is not importable: %s" % e)
if not pyutil.mpirun(2):
    pyutil.skip_main("no mpirun in PATH")

SCRIPT = os.path.join(pyutil.HERE, "mindspore_scripts", "hybrid_train.py")
TOL = 1e-5


class TestHybrid(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tessera-hybrid-")
        cls.single = cls.job(None, "single", "s")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def job(cls, n, mode, out, *extra):
        d = os.path.join(cls.dir, out)
        os.makedirs(d, exist_ok=True)
        cmd = (pyutil.mpirun(n) if n else []) + [sys.executable, SCRIPT, mode, d] + list(extra)
        rc, log = pyutil.run(cmd, cls.dir, timeout=120)
        if rc:
            raise AssertionError("%s failed (%d):\n%s" % (" ".join(cmd), rc, log))
        return d

    def losses(self, d):
        with open(os.path.join(d, "losses.json")) as f:
            return json.load(f)

    def close(self, a, b, what):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        self.assertEqual(a.shape, b.shape, what)
        err = float(np.max(np.abs(a - b))) if a.size else 0.0
        self.assertLessEqual(err, TOL, "%s: max |diff| %g" % (what, err))

    def same_run(self, d, single=None, buf_scale=1.0):
        """buf_scale: the momentum buffers' ratio (they hold the gradients' running sum)."""
        single = single or self.single
        la, lb = self.losses(single), self.losses(d)
        self.assertEqual(len(la), 6)
        self.close(np.array(lb) / np.array(la), np.ones(len(la)), "losses (relative)")
        for f in ("whole.safetensors", os.path.join("ck", "net-00000006.safetensors")):
            a = ms.load_checkpoint(os.path.join(single, f))
            b = ms.load_checkpoint(os.path.join(d, f))
            self.assertEqual(sorted(a), sorted(b), f)
            self.assertEqual(b["w1"].shape, (16, 32))  # whole: gathered from the slices
            self.assertEqual(b["w2"].shape, (32, 10))
            for k in a:
                self.close(b[k], a[k] * (buf_scale if "momentum_buffer" in k else 1.0), "%s: %s" % (f, k))
        self.close(np.load(os.path.join(d, "predict.npy")), np.load(os.path.join(single, "predict.npy")), "predict")
        with open(os.path.join(single, "eval.json")) as f, open(os.path.join(d, "eval.json")) as g:
            ea, eb = json.load(f), json.load(g)
        self.assertEqual(sorted(ea), sorted(eb))
        self.assertEqual(ea["acc"], eb["acc"])
        self.close(eb["loss"], ea["loss"], "eval loss")

    def test_np2(self):
        d = self.job(2, "hybrid", "h2")
        self.same_run(d)
        # the hybrid run's checkpoint loaded into the one-process network predicts as the run did
        self.job(None, "single", "h2", "--load", os.path.join(d, "whole.safetensors"))
        self.close(np.load(os.path.join(d, "predict_loaded.npy")), np.load(os.path.join(d, "predict.npy")),
                   "one process loading the hybrid checkpoint")

    def test_np4(self):
        self.same_run(self.job(4, "hybrid", "h4"))

    def test_gradients_mean_false(self):
        # seed 1 and SUM: every gradient N (= 2) times the single process's, as lr x 2 there
        d = self.job(2, "hybrid", "nomean", "--no-mean")
        self.same_run(d, self.job(None, "single", "s_lr2", "--lr", "0.4"), buf_scale=2.0)
        self.assertGreater(abs(self.losses(d)[2] - self.losses(self.single)[2]), 1e-3)

    def test_gather_scatter(self):
        # the same function through AllGather (the hidden units) and ReduceScatter(MEAN) + AllGather
        self.same_run(self.job(2, "hybrid", "g2", "--gather"))

    def test_refusals(self):
        self.job(None, "refusals", "r")

    def test_gpu_np2(self):
        """set_context(device_target="GPU") under -n 2, a GPU each (the stand-in driver's emulated
        GPUs and the stand-in NCCL built beside TESSERA_BIN; skipped without them): the hand-placed
        AllReduce and the bias's gradient sum on the devices; the same run as one CPU process
        (losses, the gathered checkpoints, eval, predict); without a driver the script is refused
        naming device_target (so the GPU run did run there)."""
        env = pyutil.gpu_standins(self)
        keep = dict(os.environ)
        os.environ.update(env)
        try:
            self.same_run(self.job(2, "hybrid", "gpu2", "--device", "GPU"))
            os.environ["TESSERA_LIBCUDA"] = os.path.join(self.dir, "no-driver.so")
            d = os.path.join(self.dir, "nodrv")
            os.makedirs(d, exist_ok=True)
            rc, log = pyutil.run(pyutil.mpirun(2) + [sys.executable, SCRIPT, "hybrid", d, "--device", "GPU"], self.dir,
                                 timeout=120)
            self.assertNotEqual(rc, 0)
            self.assertIn("device_target GPU: no NVIDIA driver", log)
        finally:
            os.environ.clear()
            os.environ.update(keep)


if __name__ == "__main__":
    unittest.main()
