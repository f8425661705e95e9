"""MindSpore-style checkpoint scripts under mpirun -n 2 (mindspore_scripts/ckpt_per_rank.py):
a checkpoint directory per rank (each gets every checkpoint, byte for byte the same file: data
parallel from each rank's own state, semi_auto_parallel gathered and copied from rank 0);
Model.eval on another data set on both ranks; save_checkpoint from rank 0 alone (data parallel:
written; semi_auto_parallel: the job ends within seconds naming the call and the missing rank,
not at the 300 s communication timeout); a collective call failing on one rank only ends the job
naming the rank and the cause; CheckpointConfig(integrated_save=True/False) deciding the format,
and per-rank directories refused for sliced checkpoints with a message saying why."""
import filecmp
import os
import shutil
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyutil  # noqa: E402

pyutil.require()
if not pyutil.mpirun(2):
    pyutil.skip_main("no mpirun in PATH")

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mindspore_scripts", "ckpt_per_rank.py")


class TestCheckpoints(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tessera-msckpt-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def job(self, mode, case, ok=True):
        t0 = time.time()
        rc, out = pyutil.run(pyutil.mpirun(2) + [sys.executable, SCRIPT, mode, case, pyutil.FASHION], self.dir)
        self.elapsed = time.time() - t0
        if ok:
            self.assertEqual(rc, 0, out)
        else:
            self.assertNotEqual(rc, 0, out)
        return out

    def files(self, d):
        return sorted(os.listdir(os.path.join(self.dir, d)))

    def same_dirs(self):
        a, b = self.files("ckpt_0"), self.files("ckpt_1")
        self.assertEqual(a, ["latest", "net-00000004.safetensors", "net-00000008.safetensors"])
        self.assertEqual(a, b)
        for d in ("ckpt_0", "ckpt_1"):  # the pointer to the newest, in every rank's directory
            with open(os.path.join(self.dir, d, "latest")) as f:
                self.assertEqual(f.read().strip(), "net-00000008.safetensors")
        for f in a:  # every tensor (data parallel: each rank's own file, its own config in the metadata)
            self.assertGreater(pyutil.ckpt_equal(self, os.path.join(self.dir, "ckpt_0", f),
                                                 os.path.join(self.dir, "ckpt_1", f)), 4)
        return a

    def test_dp_dirs_and_eval(self):
        out = self.job("data_parallel", "dirs")
        self.same_dirs()
        ev = sorted(line for line in out.splitlines() if " eval " in line)
        self.assertEqual(len(ev), 2, out)
        import ast  # one evaluation of the whole set (the metrics dict's order follows a set's)
        self.assertEqual(ast.literal_eval(ev[0].split(" eval ")[1]), ast.literal_eval(ev[1].split(" eval ")[1]))

    def test_semi_dirs_whole_copied(self):
        self.job("semi_auto_parallel", "whole")
        for f in self.same_dirs():  # rank 0's file, copied
            self.assertTrue(filecmp.cmp(os.path.join(self.dir, "ckpt_0", f), os.path.join(self.dir, "ckpt_1", f),
                                        shallow=False), f)

    def test_sliced_per_rank_dirs_refused(self):
        out = self.job("semi_auto_parallel", "sliced")
        self.assertIn("rank 0 refused", out)
        self.assertIn("rank 1 refused", out)
        self.assertIn("checkpoint.dir differs between the ranks", out)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "ckpt_0", "net-00000004")))

    def test_no_parallel_mode_refused(self):
        out = self.job("unset", "dirs")
        self.assertIn("rank 1 refused: Model: the job has 2 processes (mpirun -n 2) but parallel_mode is stand_alone "
                      "(not set)", out)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "ckpt_0")))

    def test_integrated_save_false_is_sliced(self):
        # data parallel writes whole files by default; integrated_save=False: sliced directories
        self.job("data_parallel", "sliced_same")
        self.assertTrue(os.path.isfile(os.path.join(self.dir, "ckpt", "net-00000008", "manifest.json")))

    def test_rank0_save_dp(self):
        self.job("data_parallel", "rank0")
        self.assertTrue(os.path.isfile(os.path.join(self.dir, "rank0.safetensors")))

    def test_rank0_save_semi_ends_promptly(self):
        out = self.job("semi_auto_parallel", "rank0", ok=False)
        self.assertLess(self.elapsed, 60, out)  # 5 s arrival + 5 s agreement here; the timeout is 300 s
        self.assertIn("every rank must call the save", out)
        self.assertIn("rank 1 of 2 never reached it", out)
        self.assertIn("rank 0 of 2: ending the job", out)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "rank0.safetensors")))

    def test_every_rank_saves_semi(self):
        self.job("semi_auto_parallel", "every")
        a, b = (os.path.join(self.dir, "every_%d.safetensors" % r) for r in (0, 1))
        self.assertTrue(filecmp.cmp(a, b, shallow=False))

    def test_one_rank_fails_ends_job(self):
        out = self.job("semi_auto_parallel", "load_one", ok=False)
        self.assertLess(self.elapsed, 60, out)
        self.assertIn("rank 1 of 2: loading a checkpoint failed on this rank", out)
        self.assertIn("missing.safetensors", out)

    def test_layouts_and_predict(self):
        import json
        import numpy as np
        script = os.path.join(os.path.dirname(SCRIPT), "layout_predict.py")
        rc, out = pyutil.run(pyutil.mpirun(2) + [sys.executable, script, pyutil.FASHION, self.dir], self.dir)
        self.assertEqual(rc, 0, out)
        self.assertIn("rank 0 reloaded predict equal: True", out)
        self.assertIn("rank 1 reloaded predict equal: True", out)
        self.assertIn("holds 2 rank files, the list names 1", out)
        with open(os.path.join(self.dir, "layout.json")) as f:
            lay = json.load(f)
        self.assertEqual(lay["train"], lay["predict"])
        w1, w2 = lay["train"]["fc1.weight"], lay["train"]["fc2.weight"]
        self.assertEqual(w1[1:3], [[0, -1], [16, 784]])  # rows cut over the 2 ranks (MindSpore's tensor map)
        self.assertEqual(w2[1:3], [[-1, 1], [10, 16]])   # its consumer's columns follow
        self.assertEqual(lay["train"]["fc2.bias"][:3], [[2], [-1], [10]])
        import tessera
        p = tessera.load_checkpoint(os.path.join(self.dir, "net.safetensors"))
        q = tessera.load_checkpoint(os.path.join(self.dir, "net.ckpt"))  # MindSpore's format, whole
        self.assertEqual(sorted(q), sorted(k for k in p if not k.startswith("optim.")))  # the network only
        for k in q:
            self.assertTrue(np.array_equal(q[k], p[k]), k)
        self.assertEqual([f for f in os.listdir(self.dir) if f.startswith(".")], [])  # no temporaries left
        x = np.load(os.path.join(self.dir, "x.npy")).reshape(20, -1)
        h = np.maximum(x @ p["fc1.weight"].T + p["fc1.bias"], 0)
        want = h @ p["fc2.weight"].T + p["fc2.bias"]
        got = np.load(os.path.join(self.dir, "logits.npy"))
        self.assertEqual(got.shape, (20, 10))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

    def test_train_one_step_cell_loop_dp(self):
        import ast
        script = os.path.join(os.path.dirname(SCRIPT), "loop_train.py")
        rc, out = pyutil.run(pyutil.mpirun(2) + [sys.executable, script, pyutil.FASHION], self.dir)
        self.assertEqual(rc, 0, out)
        got = {}
        for line in out.splitlines():
            if line.startswith("rank ") and (" loop " in line or " model " in line):
                r, kind, v = line.split(" ", 3)[1:]
                got[(int(r), kind)] = ast.literal_eval(v)
        self.assertEqual(len(got[(0, "loop")]), 6)  # 192 samples, 2 shards of batch 16
        for r in (0, 1):  # the per-batch loop is bitwise Model.train's run; the loss is the global batch's
            self.assertEqual(got[(r, "loop")], got[(r, "model")])
        self.assertEqual(got[(0, "loop")], got[(1, "loop")])


if __name__ == "__main__":
    unittest.main()
