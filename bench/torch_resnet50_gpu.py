#!/usr/bin/env python3
"""PyTorch's side of bench/gpu_resnet50.sh (issue 28's second speed check): a ResNet-50 training
step on the GPU (torchvision's architecture, written out here so torchvision is not needed:
7x7 stem, max pooling, bottleneck blocks [3, 4, 6, 3] with the stride on the 3x3 convolution,
1000 classes; SGD momentum 0.9, lr 0.1, weight decay 1e-4), batch 128 of 224x224 images already
on the GPU, in bf16 autocast eager with channels_last (the issue's reference), in bf16 autocast
eager with NCHW (Tessera's layout), and under torch.compile (channels_last) unless --no-compile.
Prints one JSON object per line: {"name": ..., "ms": <median>, "images_per_s": ..., "mfu": ...}.
Needs CUDA; exits 77 (skipped) without it.
  python3 bench/torch_resnet50_gpu.py [--batch 128] [--steps 20] [--warmup 5] [--no-compile]
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


class Bottleneck(nn.Module):
    def __init__(self, cin, planes, stride):
        super().__init__()
        cout = 4 * planes
        self.conv1, self.bn1 = nn.Conv2d(cin, planes, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv3, self.bn3 = nn.Conv2d(planes, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (self.down(x) if self.down is not None else x))


class ResNet50(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
        layers, cin = [], 64
        for planes, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(n):
                layers.append(Bottleneck(cin, planes, stride if i == 0 else 1))
                cin = 4 * planes
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layers(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def run(name, step, args, flops_per_step, peak):
    torch_gpu_util.run(name, step, args.warmup, args.steps, "images_per_s", args.batch, flops_per_step, peak)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--peak", type=float, default=0, help="bf16 FLOP/s of the GPU (0: measured here)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: torch sees no GPU")
        sys.exit(77)
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True  # PyTorch's fastest setting (Tessera's choice is deterministic)
    peak = args.peak
    if not peak:  # bf16 GEMM peak measured: 8192^3 products
        peak = torch_gpu_util.bf16_peak(dev)
    # 4.1 G multiply-adds per 224x224 image forward; training about 3x the forward
    flops = 3 * 2 * 4.1e9 * (args.size / 224) ** 2 * args.batch
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(args.batch, 3, args.size, args.size, generator=g).to(dev)
    y = torch.randint(0, 1000, (args.batch,), generator=g).to(dev)

    def make(channels_last):
        torch.manual_seed(0)
        m = ResNet50().to(dev)
        if channels_last:
            m = m.to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        return m, opt

    def stepper(m, opt, inp):
        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(m(inp), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return step

    xl = x.to(memory_format=torch.channels_last)
    m, opt = make(True)
    run("torch_eager_autocast_bf16_channels_last", stepper(m, opt, xl), args, flops, peak)
    m, opt = make(False)
    run("torch_eager_autocast_bf16_nchw", stepper(m, opt, x), args, flops, peak)
    if not args.no_compile:
        m, opt = make(True)
        run("torch_compile_autocast_bf16_channels_last", stepper(torch.compile(m), opt, xl), args, flops, peak)


if __name__ == "__main__":
    main()
