"""Shared by the Python package's tests: skips, the CLI and mpirun, the models written in Python
that mirror the zoo's (same layer names, so the same initial weights), tiny configs."""
import json
import os
import shutil
import subprocess
import sys
import unittest

FASHION = "/usr/share/datasets/fashion-mnist"
SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))


def skip_main(reason):
    print("SKIP: %s" % reason)
    sys.exit(SKIP)


def require():
    """Exits 77 (ctest: skipped) with the reason when the package or the data cannot be used."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        skip_main("python3-numpy not installed")
    try:
        import tessera  # noqa: F401
    except ImportError as e:
        skip_main("the tessera package is not importable: %s" % e)
    if not os.path.exists(os.path.join(FASHION, "train-images-idx3-ubyte.gz")) and \
            not os.path.exists(os.path.join(FASHION, "train-images-idx3-ubyte")):
        skip_main("no Fashion-MNIST at %s (Debian's dataset-fashion-mnist)" % FASHION)


def tessera_bin():
    return os.environ.get("TESSERA_BIN", "tessera")


def mpirun(n):
    exe = os.environ.get("MPIEXEC") or shutil.which("mpirun")
    if not exe:
        return None
    cmd = [exe, "--oversubscribe", "-n", str(n)]
    if os.getuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd


def gpu_standins(test, ngpus=2):
    """The stand-in driver's emulated GPUs and the stand-in NCCL built beside TESSERA_BIN as the
    environment a GPU job needs (to update os.environ with), or the test skipped saying why (none
    built, or the sanitizers' build, whose stand-in records launches without running them)."""
    b = os.path.dirname(os.path.abspath(shutil.which(tessera_bin()) or tessera_bin()))
    fc, fn = os.path.join(b, "libfakecuda.so"), os.path.join(b, "libfakenccl.so")
    if not (os.path.exists(fc) and os.path.exists(fn)):
        test.skipTest("no stand-in driver and NCCL beside %s" % tessera_bin())
    if os.environ.get("TS_EMU") == "0":  # (set by the build: python/python.cmake)
        test.skipTest("the sanitizers' build: its stand-in driver records launches without running them")
    return dict(TESSERA_LIBCUDA=fc, TESSERA_LIBNCCL=fn, FAKE_CUDA_COUNT=str(ngpus), TESSERA_GPU_GEMM="tessera")


def run(cmd, cwd, timeout=240):
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
    r = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    return r.returncode, r.stdout


def steps(jsonl):
    """[(step, loss text)] of a metrics file, the loss as written (bitwise comparisons)."""
    out = []
    with open(jsonl) as f:
        for line in f:
            if '"type":"step"' in line:
                d = json.loads(line)
                loss = line.split('"loss":')[1].split(",")[0]
                out.append((d["step"], loss))
    return out


def ckpt_equal(tc, a, b):
    """Every tensor of two checkpoints byte for byte (their metadata: config text, hash differ)."""
    import tessera
    x, y = tessera.load_checkpoint(a, raw=True), tessera.load_checkpoint(b, raw=True)
    tc.assertEqual(sorted(x), sorted(y))
    for k in x:
        tc.assertEqual(x[k].dtype, y[k].dtype, k)
        tc.assertEqual(x[k].shape, y[k].shape, k)
        tc.assertTrue(x[k].tobytes() == y[k].tobytes(), "tensor %s differs between %s and %s" % (k, a, b))
    return len(x)


YAML_BASE = """data:
  name: fashion_mnist
  path: %(data)s
  train_limit: %(limit)d
  test_limit: 128
  transforms: [{name: to_float, scale: 0.00392156862745098}, {name: normalize, mean: [0.2860], std: [0.3530]}, hwc_to_chw]
train: {epochs: %(epochs)d, batch_size: %(batch)d, eval_batch_size: %(batch)d, seed: 3, eval_every: -1, log_every: 1}
checkpoint: {dir: ck, prefix: run, save_last: true}
log: {progress: off, metrics: ck/metrics.jsonl}
"""
