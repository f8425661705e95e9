"""Shared by bench/torch_*_gpu.py (PyTorch's side of the GPU benchmarks): the timed loop and the
bf16 GEMM peak the MFU figures divide by."""
import json
import statistics
import time

import torch


def run(name, step, warmup, steps, per_s_key, per_step_items, flops_per_step, peak):
    """Times `steps` calls of step() after `warmup` (each synchronised), prints one JSON line:
    name, the median ms, per_s_key = per_step_items / the median, and the MFU against peak."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    ms = 1e3 * statistics.median(times)
    print(json.dumps({"name": name, "ms": round(ms, 3), per_s_key: round(per_step_items / (ms / 1e3), 1),
                      "mfu": round(flops_per_step / (ms / 1e3) / peak, 4) if peak else None}), flush=True)


def bf16_peak(dev):
    """The bf16 GEMM peak (FLOP/s) of 8192^3 products, printed as {"name": "bf16_gemm_peak"}."""
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        a @ a
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        a @ a
    torch.cuda.synchronize()
    peak = 10 * 2 * 8192 ** 3 / (time.perf_counter() - t0)
    print(json.dumps({"name": "bf16_gemm_peak", "tflops": round(peak / 1e12, 1)}), flush=True)
    return peak
