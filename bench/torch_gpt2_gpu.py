#!/usr/bin/env python3
"""PyTorch's side of bench/gpu_gpt2.sh (issue 28's speed check): a GPT-2 124M training step on
the GPU (12 layers, d_model 768, 12 heads, sequence 1024, vocabulary 50257, MLP 4x with GELU
tanh, learned positions, pre-LayerNorm, tied embedding and head, no dropout; AdamW lr 6e-4,
betas (0.9, 0.95), weight decay 0.1), timed in bf16 autocast eager, and under torch.compile.
Prints one JSON object per line: {"name": "torch_eager_autocast_bf16", "ms": <median>,
"tokens_per_s": ..., "mfu": ...}. Needs CUDA; exits 77 (skipped) without it.
  python3 bench/torch_gpt2_gpu.py [--batch 8] [--steps 20] [--warmup 5] [--no-compile]
"""
import argparse
import sys

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    import torch_gpu_util  # bench/, beside this script
except ImportError:
    print("SKIP: no torch")
    sys.exit(77)


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj2 = nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.c_proj2(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=50257, T=1024, d=768, L=12, h=12):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(T, d)
        self.h = nn.ModuleList([Block(d, h) for _ in range(L)])
        self.ln_f = nn.LayerNorm(d)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def run(name, step, args, flops_per_step, peak):
    torch_gpu_util.run(name, step, args.warmup, args.steps, "tokens_per_s", args.batch * 1024, flops_per_step, peak)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--peak", type=float, default=0, help="bf16 FLOP/s of the GPU (0: measured here)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: torch sees no GPU")
        sys.exit(77)
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    peak = args.peak
    if not peak:  # bf16 GEMM peak measured: 8192^3 products
        peak = torch_gpu_util.bf16_peak(dev)
    n_params = 124e6
    flops = 6 * n_params * args.batch * 1024 + 12 * 12 * 2 * args.batch * 1024 * 1024 * 768  # + attention
    g = torch.Generator(device="cpu").manual_seed(0)
    idx = torch.randint(0, 50257, (args.batch, 1024), generator=g).to(dev)
    tgt = torch.randint(0, 50257, (args.batch, 1024), generator=g).to(dev)

    def make():
        torch.manual_seed(0)
        m = GPT().to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
        return m, opt

    m, opt = make()

    def step_eager():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = m(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    run("torch_eager_autocast_bf16", step_eager, args, flops, peak)
    if not args.no_compile:
        m, opt = make()
        cm = torch.compile(m)

        def step_compiled():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = cm(idx, tgt)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        run("torch_compile_autocast_bf16", step_compiled, args, flops, peak)


if __name__ == "__main__":
    main()
