#!/usr/bin/python3
"""PyTorch DistributedDataParallel (gloo, CPU) reference for Tessera's data-parallel scaling
benchmark: times one full training step (forward, loss, backward with gradient all-reduce,
optimizer update) of one model on --world processes, each with its own batch of --batch samples.

Models (the same setups as bench/torch_step.py, whose model classes are reused):
  resnet18  ResNet-18, CIFAR stem, random B x 3 x 32 x 32 inputs, 10 classes,
            SGD momentum 0.9, lr 0.1, weight decay 5e-4.
  gpt       GPT, vocab 8192, 6 layers, 6 heads, d_model 384, seq --seq,
            AdamW lr 6e-4, betas (0.9, 0.95), weight decay 0.1.
  mlp       Fashion-MNIST MLP 784-512-256-10 (ReLU), random B x 784 inputs, labels i % 10,
            SGD momentum 0.9, lr 0.05.

--world 1 is the single-process baseline: the plain model, no DDP, no process group.
--world N > 1 spawns N processes (torch.multiprocessing.spawn) that join a gloo process group
over tcp://127.0.0.1 and wrap the model in DDP(bucket_cap_mb=--bucket-mb); all start from the
same weights (same seed), each rank draws its own random batch (seeded by rank). After --warmup
steps, --steps steps are timed one by one, each preceded by dist.barrier(); a step's time is the
maximum over the ranks, and the result is the median over the steps. Rank 0 prints one JSON line
on stdout:
  {"framework": "pytorch <version> ddp gloo", "model": ..., "world": N, "batch_per_rank": B,
   "threads": t, "step_ms": ..., "samples_per_s": N*B*1000/step_ms, "params": ...}

Meant to be called by build/bench_dp, which runs it with --world 1 and --world 2 in the same
invocation as the Tessera runs, with Debian's /usr/bin/python3 (torch 1.13):
  torch_ddp.py --model resnet18|gpt|mlp --world N --batch B --warmup W --steps S
               [--seq T] [--bucket-mb M] [--threads 1]
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# torch (and torch_step, which imports it) is imported lazily, after OMP_NUM_THREADS is set.


def build(args, rank):
    """Model, optimizer and a loss closure over this rank's fixed random batch."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torch_step

    torch.manual_seed(0)  # identical initial weights on every rank
    B = args.batch
    if args.model == "resnet18":
        model = torch_step.ResNet(num_classes=10, cifar=True)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    elif args.model == "gpt":
        model = torch_step.GPT(8192, args.seq, 6, 6, 384)
        opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
    else:
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                              nn.Linear(256, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model.train()

    torch.manual_seed(1000 + rank)  # each rank its own batch
    if args.model == "gpt":
        idx = torch.randint(0, 8192, (B, args.seq))
        tgt = torch.randint(0, 8192, (B, args.seq))
        return model, opt, lambda net: net(idx, tgt)
    x = torch.rand(B, 3, 32, 32) * 2 - 1 if args.model == "resnet18" else torch.rand(B, 784)
    y = torch.arange(B) % 10
    return model, opt, lambda net: F.cross_entropy(net(x), y)


def worker(rank, args, port):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(args.threads)
    ddp = args.world > 1
    if ddp:
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                                rank=rank, world_size=args.world)
    model, opt, loss_of = build(args, rank)
    net = DDP(model, bucket_cap_mb=args.bucket_mb) if ddp else model

    def step():
        opt.zero_grad(set_to_none=True)
        loss_of(net).backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    times = torch.zeros(args.steps, dtype=torch.float64)
    for i in range(args.steps):
        if ddp:
            dist.barrier()
        t0 = time.perf_counter()
        step()
        times[i] = (time.perf_counter() - t0) * 1e3
    if ddp:
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
    if rank == 0:
        ms = statistics.median(times.tolist())
        print(json.dumps({
            "framework": "pytorch %s ddp gloo" % torch.__version__, "model": args.model,
            "world": args.world, "batch_per_rank": args.batch, "threads": args.threads,
            "step_ms": ms, "samples_per_s": args.world * args.batch * 1000.0 / ms,
            "params": sum(p.numel() for p in model.parameters())}), flush=True)
    if ddp:
        dist.barrier()  # no rank tears gloo down while another is still in a collective (seen hanging)
        dist.destroy_process_group()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, choices=["resnet18", "gpt", "mlp"])
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--batch", type=int, required=True, help="per-rank batch")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seq", type=int, default=256, help="gpt sequence length")
    ap.add_argument("--bucket-mb", type=float, default=25, help="DDP bucket_cap_mb")
    ap.add_argument("--threads", type=int, default=1, help="threads per process")
    args = ap.parse_args()
    if args.world < 1 or args.batch < 1 or args.steps < 1 or args.warmup < 0:
        ap.error("--world, --batch and --steps must be >= 1, --warmup >= 0")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before torch loads; children inherit it

    if args.world == 1:
        worker(0, args, None)
    else:
        import torch.multiprocessing as mp
        mp.spawn(worker, args=(args, free_port()), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
