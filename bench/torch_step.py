#!/usr/bin/python3
"""PyTorch reference for bench/bench_step.c: times one full training step (forward, backward,
optimizer update) of the same two models Tessera's bench builds, and prints one JSON object per
line:  {"name": "resnet18_cifar_b64_step", "ms": <median>, ...}.

  (a) ResNet-18, CIFAR stem (3x3 conv stride 1, no max-pool), torchvision layout and init,
      batch B x 3 x 32 x 32, 10 classes, SGD momentum 0.9, lr 0.1, weight decay 5e-4.
  (b) GPT (nanoGPT-like): 6 layers, d_model 384, 6 heads, MLP 4x (GELU tanh), seq 256, batch 8,
      vocab 8192, learned positions, pre-LayerNorm, lm_head without bias; attention with an
      explicit causal mask (torch 1.13 has no scaled_dot_product_attention); AdamW lr 6e-4,
      betas (0.9, 0.95), weight decay 0.1.

With --amp bf16, each model is also timed a second time (a fresh model, same seed) with its
forward under torch.autocast("cpu", dtype=torch.bfloat16) -- PyTorch's CPU mixed precision:
matmul/linear/conv in bf16, f32 weights and optimizer, backward through the autocast casts --
printed as {"name": "<name>_autocast_bf16", ...}.

Both use warm-up steps, then the median of --steps individually timed steps. Inputs are fixed
random tensors (the step cost does not depend on the values). Run with Debian's /usr/bin/python3
(torch 1.13); bench_step sets OMP_NUM_THREADS, OMP_WAIT_POLICY, GLIBC_TUNABLES and
OPENBLAS_CORETYPE in the environment.
"""
import argparse
import contextlib
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------- ResNet (torchvision layout)
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, layers=(2, 2, 2, 2), num_classes=10, cifar=True):
        super().__init__()
        self.inplanes = 64
        if cifar:
            self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
            self.maxpool = nn.Identity()
        else:
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(64, layers[0], 1)
        self.layer2 = self._make_layer(128, layers[1], 2)
        self.layer3 = self._make_layer(256, layers[2], 2)
        self.layer4 = self._make_layer(512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, planes, blocks, stride):
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride, bias=False),
                                       nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        for _ in range(1, blocks):
            layers.append(BasicBlock(planes, planes))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ---------------------------------------------------------------- GPT (nanoGPT layout)
class CausalSelfAttention(nn.Module):
    def __init__(self, d, n_head, block_size):
        super().__init__()
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.n_head = n_head
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, n_head, block_size)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, block_size, n_layer, n_head, d):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, d),
            wpe=nn.Embedding(block_size, d),
            h=nn.ModuleList([Block(d, n_head, block_size) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(d)))
        self.lm_head = nn.Linear(d, vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
                if getattr(m, "bias", None) is not None and isinstance(m, nn.Linear):
                    nn.init.zeros_(m.bias)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))

    def forward(self, idx, targets):
        B, T = idx.size()
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for blk in self.transformer.h:
            x = blk(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def time_steps(step, warmup, steps):
    loss = None
    for _ in range(warmup):
        loss = step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), float(loss)


def forward_ctx(amp):
    """The forward's context: bf16 autocast on the CPU, or nothing (f32)."""
    if amp:
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def bench_resnet(args, amp=False):
    torch.manual_seed(0)
    model = ResNet(num_classes=10, cifar=True).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    x = torch.rand(args.resnet_batch, 3, 32, 32) * 2 - 1
    y = torch.arange(args.resnet_batch) % 10

    def step():
        opt.zero_grad(set_to_none=True)
        with forward_ctx(amp):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    ms, loss = time_steps(step, args.warmup, args.steps)
    return {"name": "resnet18_cifar_b%d_step" % args.resnet_batch + ("_autocast_bf16" if amp else ""),
            "ms": ms, "threads": args.threads,
            "batch": args.resnet_batch, "params": n_params(model), "loss": loss}


def bench_gpt(args, amp=False):
    torch.manual_seed(0)
    V, L, H, D, T, B = 8192, 6, 6, 384, args.gpt_seq, args.gpt_batch
    model = GPT(V, T, L, H, D).train()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
    idx = torch.randint(0, V, (B, T))
    tgt = torch.randint(0, V, (B, T))

    def step():
        opt.zero_grad(set_to_none=True)
        with forward_ctx(amp):
            loss = model(idx, tgt)
        loss.backward()
        opt.step()
        return loss.detach()

    ms, loss = time_steps(step, args.warmup, args.steps)
    return {"name": "gpt_6l_384d_step" + ("_autocast_bf16" if amp else ""), "ms": ms, "threads": args.threads, "batch": B, "seq": T,
            "params": n_params(model), "loss": loss}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--only", default="resnet,gpt", help="comma-separated: resnet, gpt")
    ap.add_argument("--resnet-batch", type=int, default=64)
    ap.add_argument("--gpt-batch", type=int, default=8)
    ap.add_argument("--gpt-seq", type=int, default=256)
    ap.add_argument("--amp", choices=["bf16"], default=None,
                    help="also time each model with its forward under torch.autocast (bf16)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.backends.mkldnn.enabled = True
    only = set(s.strip() for s in args.only.split(",") if s.strip())
    amps = [False, True] if args.amp else [False]
    if "resnet" in only:
        for amp in amps:
            print(json.dumps(bench_resnet(args, amp)), flush=True)
    if "gpt" in only:
        for amp in amps:
            print(json.dumps(bench_gpt(args, amp)), flush=True)


if __name__ == "__main__":
    main()
