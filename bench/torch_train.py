#!/usr/bin/python3
"""PyTorch reference for the example recipes on Fashion-MNIST (examples/*_fashion.yaml).

Same models (layer sizes, initialisation conventions), optimizer (SGD momentum, Nesterov,
weight decay, optional exclusion of biases and norm parameters), schedule (per-step cosine with
linear warm-up from 0), batch size, epochs, normalisation and augmentation (random crop with
zero padding, horizontal flip) as Tessera's examples. The data order is PyTorch's own seeded
shuffle (Tessera's sampler uses Philox), so single runs differ by seed noise only.

usage: /usr/bin/python3 bench/torch_train.py mlp|convnet|resnet20 [--epochs N] [--threads T]
prints one JSON line per epoch and a final {"model":..,"test_accuracy":..,"wall_s":..}.
"""
import argparse, gzip, json, math, os, sys, time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"


def load(split):
    with gzip.open(f"{DATA}/{split}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(f"{DATA}/{split}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (torch.from_numpy(x.copy()).float() / 255.0 - 0.2860) / 0.3530
    return x, torch.from_numpy(y.astype(np.int64))


class MLP(nn.Module):
    def __init__(self, hidden=(512, 256)):
        super().__init__()
        dims = [784] + list(hidden)
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.out = nn.Linear(dims[-1], 10)

    def forward(self, x):
        x = x.flatten(1)
        for l in self.hidden:
            x = F.relu(l(x))
        return self.out(x)


class ConvNet(nn.Module):
    def __init__(self, c1=32, c2=64):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, c1, 3, padding=1, bias=False), nn.BatchNorm2d(c1)
        self.conv2, self.bn2 = nn.Conv2d(c1, c2, 3, padding=1, bias=False), nn.BatchNorm2d(c2)
        self.fc = nn.Linear(c2 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.flatten(1))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:  # option B projection shortcut
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.down(x) if self.down is not None else x))


class ResNetCifar(nn.Module):
    def __init__(self, depth=20, cin=1):
        super().__init__()
        n = (depth - 2) // 6
        self.conv1, self.bn1 = nn.Conv2d(cin, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16)
        layers, c = [], 16
        for i, w in enumerate((16, 32, 64)):
            for j in range(n):
                layers.append(Block(c, w, 2 if (i > 0 and j == 0) else 1))
                c = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, 10)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


RECIPES = {  # mirrors examples/<model>_fashion.yaml
    "mlp": dict(model=MLP, lr=0.1, wd=5e-4, epochs=5, warmup_epochs=0.25, aug=False, exclude=False),
    "convnet": dict(model=ConvNet, lr=0.05, wd=5e-4, epochs=5, warmup_epochs=0.25, aug=False, exclude=False),
    "resnet20": dict(model=ResNetCifar, lr=0.1, wd=5e-4, epochs=15, warmup_epochs=1, aug=True, exclude=True),
}


def augment(x, g):
    """Random crop 28 with zero padding 2 and horizontal flip with p = 0.5 (per sample)."""
    n = x.shape[0]
    p = F.pad(x, (2, 2, 2, 2))
    oy = torch.randint(0, 5, (n,), generator=g)
    ox = torch.randint(0, 5, (n,), generator=g)
    idx_y = (oy[:, None] + torch.arange(28)[None, :])  # (n,28)
    idx_x = (ox[:, None] + torch.arange(28)[None, :])
    rows = p[:, 0].gather(1, idx_y[:, :, None].expand(n, 28, 32))        # (n,28,32)
    crop = rows.gather(2, idx_x[:, None, :].expand(n, 28, 28))           # (n,28,28)
    flip = torch.rand(n, generator=g) < 0.5
    crop[flip] = crop[flip].flip(-1)
    return crop[:, None]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=sorted(RECIPES))
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    r = RECIPES[a.model]
    epochs = a.epochs or r["epochs"]
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    g = torch.Generator().manual_seed(a.seed)
    xtr, ytr = load("train")
    xte, yte = load("t10k")
    model = r["model"]()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if r["exclude"] and p.ndim <= 1 else decay).append(p)
    opt = torch.optim.SGD([{"params": decay, "weight_decay": r["wd"]},
                           {"params": no_decay, "weight_decay": 0.0}],
                          lr=r["lr"], momentum=0.9, nesterov=True)
    B = 128
    spe = len(xtr) // B
    total, warm = spe * epochs, int(r["warmup_epochs"] * spe)

    def lr_at(step):
        if step < warm:
            return r["lr"] * step / warm
        t = min(1.0, (step - warm) / max(1, total - warm))
        return 0.5 * r["lr"] * (1 + math.cos(math.pi * t))

    t0, step = time.time(), 0
    for ep in range(epochs):
        model.train()
        perm = torch.randperm(len(xtr), generator=g)
        for i in range(spe):
            idx = perm[i * B:(i + 1) * B]
            xb = xtr[idx]
            if r["aug"]:
                xb = augment(xb, g)
            for pg in opt.param_groups:
                pg["lr"] = lr_at(step)
            loss = F.cross_entropy(model(xb), ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(xte), 1000):
                correct += (model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item()
        acc = correct / len(xte)
        print(json.dumps({"model": a.model, "epoch": ep + 1, "loss": round(loss.item(), 4),
                          "test_accuracy": acc, "wall_s": round(time.time() - t0, 1)}), flush=True)
    print(json.dumps({"model": a.model, "framework": "pytorch " + torch.__version__, "epochs": epochs,
                      "test_accuracy": acc, "wall_s": round(time.time() - t0, 1), "threads": a.threads}))


if __name__ == "__main__":
    main()
