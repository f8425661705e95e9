"""The tessera package under `mpirun -n 2 /usr/bin/python3 script.py` against `mpirun -n 2 tessera
train` of the same model and config: data_parallel (the data sharded with num_shards/shard_id as
MindSpore scripts do; the per-shard batch times the shards is the YAML's global batch) and
semi_auto_parallel (the strategies given in Python with Dense.matmul.shard, in YAML as
parallel.strategies): bitwise identical step losses and checkpoints (the sliced one merged).
A zoo model in 2 pipeline stages (set_auto_parallel_context(pipeline_stages=2)) alike. Then the data-parallel run
against one process: the same losses within 1e-4 (reduction order). A transformer of Python cells under
tensor parallelism + sequence parallelism and under context parallelism (ring attention) against one
process."""
import json
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
import tessera as ts  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = "model: {name: mlp, hidden: [64, 32]}"
OPT = "optimizer: {name: momentum, lr: 0.05, momentum: 0.9, nesterov: false, weight_decay: 0.0}"


class TestMPI(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tessera-pympi-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def yaml(self, sub, parallel, epochs=1):
        d = os.path.join(self.dir, sub)
        os.makedirs(d)
        with open(os.path.join(d, "c.yaml"), "w") as f:
            f.write(MODEL + "\n" + pyutil.YAML_BASE % dict(data=pyutil.FASHION, limit=256, epochs=epochs, batch=32))
            f.write(OPT + "\n" + parallel + "\n")
        return d

    def both(self, mode, parallel):
        y = self.yaml("y", parallel)
        rc, out = pyutil.run(pyutil.mpirun(2) + [pyutil.tessera_bin(), "train", "c.yaml"], y)
        self.assertEqual(rc, 0, out)
        p = os.path.join(self.dir, "p")
        os.makedirs(p)
        rc, out = pyutil.run(pyutil.mpirun(2) + [sys.executable, os.path.join(HERE, "mpi_train.py"), mode, "1"], p)
        self.assertEqual(rc, 0, out)
        self.assertIn("rank 1 done", out)
        self.out = out
        a, b = pyutil.steps(y + "/ck/metrics.jsonl"), pyutil.steps(p + "/ck/metrics.jsonl")
        self.assertEqual(len(a), 8)
        self.assertEqual(a, b)
        return y, p, a

    def test_data_parallel(self):
        y, p, a = self.both("dp", "parallel: {mode: data_parallel, gradients_mean: true}")
        ev = sorted(re.findall(r"eval rank (\d): (acc [0-9.]+ loss [0-9.]+)", self.out))  # lines may interleave
        self.assertEqual([r for r, _ in ev], ["0", "1"], self.out)
        self.assertEqual(ev[0][1], ev[1][1])  # the job's evaluation: every rank the same
        pyutil.ckpt_equal(self, y + "/ck/run-00000008.safetensors", p + "/ck/run-00000008.safetensors")
        # one process, the same global batch: equal within the all-reduce's rounding
        one = self.yaml("one", "")
        rc, out = pyutil.run([pyutil.tessera_bin(), "train", "c.yaml"], one)
        self.assertEqual(rc, 0, out)
        for (s1, l1), (s2, l2) in zip(pyutil.steps(one + "/ck/metrics.jsonl"), a):
            self.assertEqual(s1, s2)
            self.assertAlmostEqual(float(l1), float(l2), delta=1e-4)

    def test_data_parallel_gpu(self):
        """set_context(device_target="GPU") with data_parallel on 2 ranks, a GPU each (the stand-in
        driver's emulated GPUs and the stand-in NCCL built beside TESSERA_BIN; skipped without
        them): the Python run equals `tessera train` of the same YAML on the GPUs bitwise, and
        follows the CPU ranks within 1e-4."""
        env = pyutil.gpu_standins(self)
        keep = dict(os.environ)
        os.environ.update(env)
        try:
            par = "parallel: {mode: data_parallel, gradients_mean: true}"
            y = self.yaml("y", par + "\ndevice_target: GPU")
            rc, out = pyutil.run(pyutil.mpirun(2) + [pyutil.tessera_bin(), "train", "c.yaml"], y)
            self.assertEqual(rc, 0, out)
            self.assertIn("collectives: NCCL", out)
            p = os.path.join(self.dir, "p")
            os.makedirs(p)
            rc, out = pyutil.run(pyutil.mpirun(2) + [sys.executable, os.path.join(HERE, "mpi_train.py"), "gpudp", "1"], p)
            self.assertEqual(rc, 0, out)
            self.assertIn("rank 1 done", out)
            a, g = pyutil.steps(y + "/ck/metrics.jsonl"), pyutil.steps(p + "/ck/metrics.jsonl")
            self.assertEqual(len(a), 8)
            self.assertEqual(a, g)
            with open(p + "/ck/metrics.jsonl") as f:  # the end record's device memory: the job ran on the GPUs
                self.assertRegex(f.read(), r'"device_peak_bytes":[1-9]')
        finally:
            os.environ.clear()
            os.environ.update(keep)
        c = self.yaml("c", par)
        rc, out = pyutil.run(pyutil.mpirun(2) + [pyutil.tessera_bin(), "train", "c.yaml"], c)
        self.assertEqual(rc, 0, out)
        for (s1, l1), (s2, l2) in zip(pyutil.steps(c + "/ck/metrics.jsonl"), a):
            self.assertEqual(s1, s2)
            self.assertAlmostEqual(float(l1), float(l2), delta=1e-4 * max(1.0, abs(float(l1))))

    def test_semi_auto_shard_strategies(self):
        y, p, a = self.both("semi", "parallel:\n  mode: semi_auto_parallel\n  strategies: "
                            "{fc1.dense: '((1,1),(2,1),(2,))', fc2.dense: '((1,2),(1,2),(1,))'}\n"
                            "  strategy_ckpt_save_file: strategy.json")
        # the strategies in force (saved by each run) are the same, and the ones given
        with open(y + "/strategy.json") as f:
            ys = f.read()
        with open(p + "/strategy.json") as f:
            self.assertEqual(ys, f.read())
        self.assertIn("fc1.dense", ys)
        self.assertIn("[[1, 1], [2, 1]]", ys)  # fc1: column-parallel, as given
        self.assertIn("[[1, 2], [1, 2]]", ys)  # fc2: row-parallel
        self.assertTrue(os.path.isdir(y + "/ck/run-00000008"))  # sliced: the layout holds slices
        ya = ts.load_checkpoint(y + "/ck/run-00000008", raw=True)
        pa = ts.load_checkpoint(p + "/ck/run-00000008", raw=True)
        self.assertEqual(sorted(ya), sorted(pa))
        for k in ya:
            self.assertTrue(ya[k].tobytes() == pa[k].tobytes(), k)
        self.assertEqual(ya["param.fc1.weight"].shape, (64, 784))  # merged whole

        # load_distributed_checkpoint into a network of a one-process Model: its trainer reads the
        # pieces of the sliced directory whatever layout wrote them
        import models
        net = models.MLP(64, 32)
        m = ts.Model(net, ts.nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     config={"data.test_limit": 64})
        m.eval(models.dataset(64, 32, usage="test"))
        ts.load_distributed_checkpoint(net, p + "/ck/run-00000008")
        got = net._trainer.params()
        for k in ("fc1.weight", "fc2.weight", "fc3.bias"):
            self.assertTrue(got[k].tobytes() == ya["param." + k].tobytes(), k)

    def test_pipeline_stages(self):
        y, p, a = self.both("pipe", "parallel: {mode: data_parallel, pipeline_stages: 2, micro_batches: 4}")
        ya = ts.load_checkpoint(y + "/ck/run-00000008", raw=True)
        pa = ts.load_checkpoint(p + "/ck/run-00000008", raw=True)
        self.assertEqual(sorted(ya), sorted(pa))
        for k in ya:
            self.assertTrue(ya[k].tobytes() == pa[k].tobytes(), k)

    def py(self, sub, mode, n=2):
        d = os.path.join(self.dir, sub)
        os.makedirs(d)
        cmd = (pyutil.mpirun(n) if n > 1 else []) + [sys.executable, os.path.join(HERE, "mpi_train.py"), mode, "1"]
        rc, out = pyutil.run(cmd, d)
        return d, rc, out

    def near(self, a, b, rel):
        self.assertEqual([s for s, _ in a], [s for s, _ in b])
        for (s, x), (_, y) in zip(a, b):
            self.assertLessEqual(abs(float(x) - float(y)), rel * abs(float(x)), "step %d: %s vs %s" % (s, x, y))

    def test_cell_pipeline_stages(self):
        """A network written in Python with pipeline_stage on its cells, in 2 stages: the losses of
        the zoo's mlp cut by the same parallel.stages rules (bitwise), and of one process (1e-5
        relative, the C pipeline tests' tolerance); each stage holds its cells' parameters."""
        y = self.yaml("y", "parallel: {mode: data_parallel, pipeline_stages: 2, micro_batches: 4, "
                      "stages: {fc1: 0, fc2: 1, fc3: 1}}")
        rc, out = pyutil.run(pyutil.mpirun(2) + [pyutil.tessera_bin(), "train", "c.yaml"], y)
        self.assertEqual(rc, 0, out)
        p, rc, out = self.py("p", "cellpipe")
        self.assertEqual(rc, 0, out)
        self.assertIn("rank 1 done", out)
        # values flowing from stage 1 back to stage 0: refused by the cut, naming the operators
        self.assertRegex(out, r"rank 0 refused: parallel.stages: op fc2\S* is on stage 0 but reads the output of "
                         r"op \S+ on the later stage 1")
        self.assertIn("rank 0 holds fc1.bias,fc1.weight\n", out)
        self.assertIn("rank 1 holds fc2.bias,fc2.weight,fc3.bias,fc3.weight\n", out)
        a, b = pyutil.steps(y + "/ck/metrics.jsonl"), pyutil.steps(p + "/ck/metrics.jsonl")
        self.assertEqual(len(a), 8)
        self.assertEqual(a, b)
        pyutil.ckpt_equal(self, y + "/ck/run-00000008", p + "/ck/run-00000008")
        one, rc, out = self.py("one", "cellpipe", n=1)
        self.assertEqual(rc, 0, out)
        self.near(pyutil.steps(one + "/ck/metrics.jsonl"), b, 1e-5)

    def test_auto_parallel_python_cell(self):
        """auto_parallel on a network written in Python: the plan is searched through its builder
        (printed), and with the tensor-parallel degree given its operators' strategies are searched
        and saved; both train to one process's losses (1e-4: reduction order)."""
        one, rc, out = self.py("one", "dp", n=1)
        self.assertEqual(rc, 0, out)
        ref = pyutil.steps(one + "/ck/metrics.jsonl")
        a, rc, out = self.py("auto", "auto")
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, r"tessera: auto_parallel on 2 devices of dgx-a100-80g: dp=\d+,tp=\d+,pp=\d+.*"
                         r"plans searched")
        self.near(pyutil.steps(a + "/ck/metrics.jsonl"), ref, 1e-4)
        t, rc, out = self.py("tp", "autotp")
        self.assertEqual(rc, 0, out)
        self.assertIn("tensor parallel 2", out)
        with open(t + "/strategy.json") as f:
            st = f.read()
        for op in ("fc1.dense", "fc2.dense", "fc3.dense"):
            self.assertIn('"%s"' % op, st)
        self.near(pyutil.steps(t + "/ck/metrics.jsonl"), ref, 1e-4)

    def test_transformer_cells_sequence_and_context_parallel(self):
        """A transformer written with Python cells (models.Transformer: MultiHeadAttention,
        LayerNorm, Dense, GELU): tensor-parallel 2 by shard() with Megatron's sequence parallelism
        (set_auto_parallel_context(sequence_parallel=True)), and context-parallel 2 with ring
        attention (the attention's sequence cut by shard()), each on 2 ranks: one process's losses
        (1e-4: reduction order)."""
        one, rc, out = self.py("one", "tpsp", n=1)
        self.assertEqual(rc, 0, out)
        ref = pyutil.steps(one + "/ck/metrics.jsonl")
        self.assertEqual(len(ref), 8)
        for name, mode in (("tpsp", "tpsp"), ("cpring", "cpring")):
            d, rc, out = self.py(name, mode)
            self.assertEqual(rc, 0, out)
            self.near(pyutil.steps(d + "/ck/metrics.jsonl"), ref, 1e-4)
            with open(d + "/strategy.json") as f:
                st = json.load(f)["strategies"]
            cut = [1, 1, 2, 1] if mode == "tpsp" else [1, 2, 1, 1]  # heads, or the sequence (B,T,H,D)
            self.assertEqual(st["attn.attention"]["inputs"], [cut] * 3, mode)

    def test_python_exception_on_one_rank_ends_the_job(self):
        """An exception in a callback (or construct) on rank 1 only: the job ends within seconds
        (under 120 s asserted; the communication timeout is 300 s), the exception's text printed, exit
        code non-zero."""
        import time
        for mode, text in (("raise_cb", "boom on rank 1 at step 3"), ("raise_construct", "boom on rank 1 in construct")):
            t0 = time.monotonic()
            _, rc, out = self.py(mode, mode)
            dt = time.monotonic() - t0
            self.assertNotEqual(rc, 0, out)
            self.assertIn("RuntimeError: " + text, out)
            self.assertIn("tessera: rank 1 of 2: a Python exception ended", out)
            self.assertNotIn("rank 0 done", out)
            self.assertLess(dt, 120, out)  # a loaded machine, ASan: still well under the timeout


if __name__ == "__main__":
    unittest.main()
