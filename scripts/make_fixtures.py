#!/usr/bin/python3
"""Generates Tessera's PyTorch reference fixtures as safetensors files in tests/fixtures/.

Run with Debian's python3-torch (1.13):   /usr/bin/python3 scripts/make_fixtures.py [part ...]
Parts: st (safetensors interop), optim (optimizers, LR schedules, clipping), mslr (MindSpore's
LearningRateSchedule cells against PyTorch's schedulers), ops (per-op
forward/backward), train (5 training steps of a small MLP and CNN), vision (torchvision
references for the data transforms: tf_*.safetensors, described in docs/data-pipeline.md).
Default: all. The format of every file is described in docs/fixtures.md.
Files are written by hand (json + struct, no safetensors package) and atomically.
"""
import json
import math
import os
import struct
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures")

# ----------------------------------------------------------------------------- safetensors

_ST_DTYPES = {
    torch.float32: ("F32", 4), torch.bfloat16: ("BF16", 2), torch.float16: ("F16", 2),
    torch.int32: ("I32", 4), torch.int64: ("I64", 8), torch.uint8: ("U8", 1),
}


def _tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    return t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()


def write_safetensors(path, tensors, metadata=None, crc=True):
    """tensors: dict name -> torch tensor (f32/bf16/f16/i32/i64/u8). Data laid out largest
    element size first (stable), header padded with spaces to a multiple of 8, CRC-32 of the
    data section in metadata "tessera.crc32" unless crc=False."""
    items = list(tensors.items())
    for name, t in items:
        if t.dtype not in _ST_DTYPES:
            raise TypeError("%s: unsupported dtype %s" % (name, t.dtype))
    order = sorted(range(len(items)), key=lambda i: -_ST_DTYPES[items[i][1].dtype][1])
    blobs, offs, pos = [], {}, 0
    for i in order:
        b = _tensor_bytes(items[i][1])
        offs[i] = (pos, pos + len(b))
        blobs.append(b)
        pos += len(b)
    data = b"".join(blobs)
    meta = {k: str(v) for k, v in (metadata or {}).items()}
    if crc:
        meta["tessera.crc32"] = "%08x" % (zlib.crc32(data) & 0xFFFFFFFF)
    header = {}
    if meta:
        header["__metadata__"] = meta
    for i, (name, t) in enumerate(items):
        header[name] = {"dtype": _ST_DTYPES[t.dtype][0], "shape": list(t.shape),
                        "data_offsets": list(offs[i])}
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp.%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return os.path.getsize(path)


def f32(x):
    """Rounds a Python float to the nearest f32 (as a Python float)."""
    return float(np.float32(x))


def jdump(x):
    return json.dumps(x, separators=(",", ":"), sort_keys=True)


WRITTEN = []


def save(name, tensors, metadata, crc=True):
    path = os.path.join(OUT, name)
    n = write_safetensors(path, tensors, metadata, crc)
    WRITTEN.append((name, n))


# ----------------------------------------------------------------------------- part: st

def part_st():
    """A file exercising every dtype, a scalar, an empty tensor, and metadata, without CRC
    (files from other tools have none). Values are simple formulas the C test recomputes."""
    x = torch.arange(6, dtype=torch.float64).reshape(2, 3) * 0.5 - 1.0  # -1, -0.5, ..., 1.5
    t = {
        "f32": x.float(),
        "bf16": x.to(torch.bfloat16),
        "f16": x.to(torch.float16),
        "i32": torch.tensor([[-3, 0, 7], [2147483647, -2147483648, 1]], dtype=torch.int32),
        "i64": torch.tensor([-(2 ** 40), 0, 2 ** 62 + 5], dtype=torch.int64),
        "u8": torch.tensor([0, 1, 128, 255], dtype=torch.uint8),
        "scalar": torch.tensor(3.25, dtype=torch.float32),
        "empty": torch.zeros(0, 4, dtype=torch.float32),
    }
    save("st_dtypes.safetensors", t, {"writer": "make_fixtures.py", "torch": torch.__version__},
         crc=False)


# ----------------------------------------------------------------------------- part: optim

SEGMENTS = [  # two parameter tensors in one flat buffer; the bias gets no weight decay
    {"name": "w", "shape": [3, 5], "offset": 0, "numel": 15, "no_decay": False},
    {"name": "b", "shape": [4], "offset": 15, "numel": 4, "no_decay": True},
]
NPARAM = 19
NSTEPS = 5
LRS = [f32(x) for x in (0.1, 0.05, 0.2, 0.025, 0.125)]


def _optim_inputs():
    g = torch.Generator().manual_seed(1234)
    w0 = torch.randn(3, 5, generator=g)
    b0 = torch.zeros(4)  # zero bias: exercises LAMB's ||w|| = 0 rule on the first step
    grads = []
    for k in range(NSTEPS):
        gw = torch.randn(3, 5, generator=g) * (0.5 + k * 0.3)
        gb = torch.randn(4, generator=g) * 0.1
        if k == 2:
            gw[0, 1] = 0.0  # an exact zero gradient
        grads.append((gw, gb))
    return w0, b0, grads


# The grouped cases: each tensor in a parameter group of its own (PyTorch param_groups with their
# own lr and weight_decay; Tessera's TS_SEG_GROUP(k) with groups[k - 1]), the bias decayed in its group.
GROUPS = [{"lr_scale": 0.3, "weight_decay": 0.02}, {"lr_scale": 2.5, "weight_decay": 0.05}]
GROUP_SEGMENTS = [dict(SEGMENTS[0], group=1), dict(SEGMENTS[1], no_decay=False, group=2)]


def _seg_lr_wd(segs, i, cfg):
    """Segment i's (lr factor, weight decay) under cfg (its group's where it has one)."""
    k = segs[i].get("group", 0)
    if k:
        return GROUPS[k - 1]["lr_scale"], GROUPS[k - 1]["weight_decay"]
    return 1.0, (0.0 if segs[i]["no_decay"] else cfg["weight_decay"])


def _lamb_reference_f64(w0, b0, grads, cfg, segs):
    """apex FusedLAMB in float64 numpy, as a cross-check of the f32 torch version below."""
    b1, b2, eps = cfg["beta1"], cfg["beta2"], cfg["eps"]
    ps = [w0.double().numpy().copy(), b0.double().numpy().copy()]
    ms = [np.zeros_like(p) for p in ps]
    vs = [np.zeros_like(p) for p in ps]
    for t, (gw, gb) in enumerate(grads, 1):
        for i, gr in enumerate((gw.double().numpy(), gb.double().numpy())):
            sc, d = _seg_lr_wd(segs, i, cfg)
            ms[i] = b1 * ms[i] + (1 - b1) * gr
            vs[i] = b2 * vs[i] + (1 - b2) * gr * gr
            u = (ms[i] / (1 - b1 ** t)) / (np.sqrt(vs[i] / (1 - b2 ** t)) + eps) + d * ps[i]
            pn, un = np.linalg.norm(ps[i]), np.linalg.norm(u)
            r = pn / un if (pn != 0 and un != 0 and (d != 0 or cfg["lamb_always_adapt"])) else 1.0
            ps[i] = ps[i] - LRS[t - 1] * sc * r * u
    return np.concatenate([p.reshape(-1) for p in ps])


class Lamb32:
    """LAMB as in apex FusedLAMB (adam_w_mode, grad averaging, bias correction, no internal
    clipping) in f32 torch ops, in the order Tessera evaluates them."""

    def __init__(self, params, cfg, segs):
        self.p, self.cfg, self.segs, self.t = params, cfg, segs, 0
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]

    @torch.no_grad()
    def step(self, lr):
        c = self.cfg
        self.t += 1
        ib1 = f32(1.0 / (1.0 - c["beta1"] ** self.t))
        ib2 = f32(1.0 / (1.0 - c["beta2"] ** self.t))
        for i, p in enumerate(self.p):
            g = p.grad
            sc, wd = _seg_lr_wd(self.segs, i, c)
            self.m[i] = self.m[i] * c["beta1"] + (1 - c["beta1"]) * g
            self.v[i] = self.v[i] * c["beta2"] + (1 - c["beta2"]) * (g * g)
            u = (self.m[i] * ib1) / (torch.sqrt(self.v[i] * ib2) + f32(c["eps"])) + f32(wd) * p
            pn = f32(p.double().norm().item())
            un = f32(u.double().norm().item())
            r = 1.0
            if (wd != 0 or c["lamb_always_adapt"]) and pn != 0 and un != 0:
                r = f32(pn / un)
            p.add_(u, alpha=-f32(f32(lr * sc) * r))


OPTIM_CASES = [
    # name, kind, config (Tessera ts_optim_config fields), torch constructor
    ("sgd", "sgd", {"weight_decay": 0.0}, None),
    ("sgd_wd", "sgd", {"weight_decay": 0.1}, None),
    ("momentum", "momentum", {"momentum": 0.9, "weight_decay": 0.05}, None),
    ("momentum_damp", "momentum", {"momentum": 0.8, "dampening": 0.25, "weight_decay": 0.0}, None),
    ("nesterov", "momentum", {"momentum": 0.9, "nesterov": 1, "weight_decay": 0.05}, None),
    ("adam", "adam", {"weight_decay": 0.0}, None),
    ("adam_wd", "adam", {"weight_decay": 0.1, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6}, None),
    ("adamw", "adamw", {"weight_decay": 0.1}, None),
    ("lamb", "lamb", {"weight_decay": 0.1}, None),
    ("lamb_always", "lamb", {"weight_decay": 0.1, "lamb_always_adapt": 1}, None),
]

OPTIM_GROUP_CASES = [  # the config's weight_decay is unused: every tensor is in a group of its own
    ("sgd_groups", "sgd", {"weight_decay": 0.7}, None),
    ("momentum_groups", "momentum", {"momentum": 0.9, "weight_decay": 0.7}, None),
    ("adam_groups", "adam", {"weight_decay": 0.7}, None),
    ("adamw_groups", "adamw", {"weight_decay": 0.7}, None),
    ("lamb_groups", "lamb", {"weight_decay": 0.7}, None),
]

DEFAULTS = {"weight_decay": 0.0, "momentum": 0.0, "dampening": 0.0, "nesterov": 0,
            "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "lamb_always_adapt": 0}


def _make_torch_opt(kind, cfg, w, b, segs):
    groups = [{"params": [p], "weight_decay": _seg_lr_wd(segs, i, cfg)[1]} for i, p in enumerate((w, b))]
    if kind == "sgd":
        return torch.optim.SGD(groups, lr=0.1)
    if kind == "momentum":
        return torch.optim.SGD(groups, lr=0.1, momentum=cfg["momentum"],
                               dampening=cfg["dampening"], nesterov=bool(cfg["nesterov"]))
    betas = (cfg["beta1"], cfg["beta2"])
    if kind == "adam":
        return torch.optim.Adam(groups, lr=0.1, betas=betas, eps=cfg["eps"])
    if kind == "adamw":
        return torch.optim.AdamW(groups, lr=0.1, betas=betas, eps=cfg["eps"])
    raise ValueError(kind)


def _optim_case(name, kind, over, segs=SEGMENTS):
    cfg = dict(DEFAULTS)
    if kind == "lamb":
        cfg["eps"] = 1e-6
    cfg.update(over)
    w0, b0, grads = _optim_inputs()
    w = w0.clone().requires_grad_(True)
    b = b0.clone().requires_grad_(True)
    flat = lambda a, c: torch.cat([a.detach().reshape(-1), c.detach().reshape(-1)])
    t = {"params_0": flat(w, b), "lr": torch.tensor(LRS, dtype=torch.float32)}
    opt = Lamb32([w, b], cfg, segs) if kind == "lamb" else _make_torch_opt(kind, cfg, w, b, segs)
    for k in range(NSTEPS):
        w.grad, b.grad = grads[k][0].clone(), grads[k][1].clone()
        t["grad_%d" % (k + 1)] = flat(w.grad, b.grad)
        if kind == "lamb":
            opt.step(LRS[k])
        else:
            for i, gr in enumerate(opt.param_groups):
                gr["lr"] = LRS[k] * _seg_lr_wd(segs, i, cfg)[0]
            opt.step()
        t["params_%d" % (k + 1)] = flat(w, b)
    # final optimizer state, flat with the params' offsets
    if kind == "lamb":
        t["state.exp_avg"] = flat(*opt.m)
        t["state.exp_avg_sq"] = flat(*opt.v)
        ref = _lamb_reference_f64(w0, b0, grads, cfg, segs)
        err = np.max(np.abs(ref - t["params_%d" % NSTEPS].double().numpy()))
        assert err < 1e-5, "LAMB f32 vs f64 reference differ by %g" % err
    elif kind == "momentum":
        t["state.momentum_buffer"] = flat(opt.state[w]["momentum_buffer"],
                                          opt.state[b]["momentum_buffer"])
    elif kind in ("adam", "adamw"):
        t["state.exp_avg"] = flat(opt.state[w]["exp_avg"], opt.state[b]["exp_avg"])
        t["state.exp_avg_sq"] = flat(opt.state[w]["exp_avg_sq"], opt.state[b]["exp_avg_sq"])
    src = {"sgd": "torch.optim.SGD", "momentum": "torch.optim.SGD(momentum)",
           "adam": "torch.optim.Adam", "adamw": "torch.optim.AdamW",
           "lamb": "apex FusedLAMB formula (script implementation, checked in float64)"}[kind]
    meta = {"kind": kind, "config": jdump(cfg), "segments": jdump(segs), "steps": str(NSTEPS)}
    if segs is not SEGMENTS:
        meta["groups"] = jdump(GROUPS)
    save("optim_%s.safetensors" % name, t, dict(meta, **{
        "source": "%s, torch %s, f32" % (src, torch.__version__)}))


LR_STEPS = 60
LR_CASES = [
    {"name": "constant", "kind": "constant", "base_lr": 0.1},
    {"name": "step", "kind": "step", "base_lr": 0.1, "step_size": 7, "gamma": 0.5},
    {"name": "multistep", "kind": "multistep", "base_lr": 0.1, "milestones": [10, 25, 40],
     "gamma": 0.1},
    {"name": "cosine", "kind": "cosine", "base_lr": 0.1, "warmup_steps": 10, "total_steps": 50,
     "min_lr": 0.001},
    {"name": "cosine_nowarm", "kind": "cosine", "base_lr": 0.05, "warmup_steps": 0,
     "total_steps": 40, "min_lr": 0.0},
    {"name": "step_warmup", "kind": "step", "base_lr": 0.2, "warmup_steps": 5, "step_size": 20,
     "gamma": 0.3},
]


def _lr_lambda(c):
    base, wu = c["base_lr"], c.get("warmup_steps", 0)

    def f(s):
        if s < wu:
            return s / wu
        if c["kind"] == "constant":
            return 1.0
        if c["kind"] == "step":
            return c["gamma"] ** (s // c["step_size"])
        if c["kind"] == "multistep":
            return c["gamma"] ** sum(1 for m in c["milestones"] if m <= s)
        prog = min(1.0, (s - wu) / max(1, c["total_steps"] - wu))
        return (c["min_lr"] + (base - c["min_lr"]) * 0.5 * (1 + math.cos(math.pi * prog))) / base
    return f


def _lr_values(c):
    """Steps a real torch scheduler: StepLR / MultiStepLR / CosineAnnealingLR where torch has the
    schedule, LambdaLR (the formula in docs/fixtures.md) where it has not; both are compared."""
    p = torch.nn.Parameter(torch.zeros(1))

    def run(make):
        opt = torch.optim.SGD([p], lr=c["base_lr"])
        sch = make(opt)
        out = []
        for _ in range(LR_STEPS):
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            sch.step()
        return out

    lam = run(lambda o: torch.optim.lr_scheduler.LambdaLR(o, _lr_lambda(c)))
    native = None
    if c.get("warmup_steps", 0) == 0:
        if c["kind"] == "step":
            native = run(lambda o: torch.optim.lr_scheduler.StepLR(o, c["step_size"], c["gamma"]))
        elif c["kind"] == "multistep":
            native = run(lambda o: torch.optim.lr_scheduler.MultiStepLR(o, c["milestones"],
                                                                        c["gamma"]))
        elif c["kind"] == "cosine":
            native = [c["min_lr"] if s >= c["total_steps"] else None for s in range(LR_STEPS)]
            cos = run(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, c["total_steps"],
                                                                           c["min_lr"]))
            native = [cos[s] if s <= c["total_steps"] else native[s] for s in range(LR_STEPS)]
    if native is not None:
        for s, (a, b) in enumerate(zip(lam, native)):
            assert abs(a - b) <= 1e-9 * max(1.0, abs(b)), (c["name"], s, a, b)
    return lam


def _clip_case():
    g = torch.Generator().manual_seed(99)
    t = {}
    meta = {}
    for name, max_norm, scale in (("clip", 1.0, 1.0), ("noclip", 100.0, 1.0)):
        w = torch.nn.Parameter(torch.zeros(3, 5))
        b = torch.nn.Parameter(torch.zeros(4))
        w.grad = torch.randn(3, 5, generator=g) * scale
        b.grad = torch.randn(4, generator=g) * scale
        t[name + ".grad"] = torch.cat([w.grad.reshape(-1), b.grad.reshape(-1)])
        total = torch.nn.utils.clip_grad_norm_([w, b], max_norm)
        t[name + ".total_norm"] = total.reshape(()).float()
        t[name + ".clipped"] = torch.cat([w.grad.reshape(-1), b.grad.reshape(-1)])
        meta[name + ".max_norm"] = repr(max_norm)
    meta["source"] = "torch.nn.utils.clip_grad_norm_, torch %s" % torch.__version__
    save("optim_clip.safetensors", t, meta)


def part_optim():
    for name, kind, over, _ in OPTIM_CASES:
        _optim_case(name, kind, over)
    for name, kind, over, _ in OPTIM_GROUP_CASES:
        _optim_case(name, kind, over, GROUP_SEGMENTS)
    t, meta = {}, {}
    for c in LR_CASES:
        t[c["name"]] = torch.tensor(_lr_values(c), dtype=torch.float32)
        meta[c["name"]] = jdump({k: v for k, v in c.items() if k != "name"})
    meta["steps"] = str(LR_STEPS)
    save("lr_schedules.safetensors", t, meta)
    _clip_case()


# ----------------------------------------------------------------------------- part: ops

_GEN = torch.Generator()


def rnd(*shape, lo=-1.0, hi=1.0):
    """f32 uniform in [lo, hi), returned as float64 holding f32 values."""
    return (torch.rand(tuple(shape), generator=_GEN) * (hi - lo) + lo).float().double()


def away(*shape, lo=0.5, hi=2.0):
    """f32 values with magnitude in [lo, hi) and random sign (away from 0 for div, abs, ...)."""
    m = rnd(*shape, lo=lo, hi=hi)
    s = torch.where(torch.rand(tuple(shape), generator=_GEN) < 0.5, -1.0, 1.0).double()
    return m * s


def op_fixture(fname, op, fn, inputs, attrs=None, no_grad=(), aux=None, in_names=None,
               out_dtypes=None):
    """Runs fn(*inputs) in float64 (inputs hold f32-representable values), seeds each float
    output with a fixed random upstream gradient, and stores inputs, outputs, upstream
    gradients and input gradients as f32 (integer inputs keep their dtype)."""
    xs = []
    for i, x in enumerate(inputs):
        if x.is_floating_point() and i not in no_grad:
            x = x.detach().double().requires_grad_(True)
        xs.append(x)
    outs = fn(*xs)
    if not isinstance(outs, (tuple, list)):
        outs = (outs,)
    t = {}
    for i, x in enumerate(inputs):
        t["in%d" % i] = x.detach().float() if x.is_floating_point() else x.detach()
    douts = []
    for i, o in enumerate(outs):
        dt = (out_dtypes or {}).get(i, torch.float32)
        t["out%d" % i] = o.detach().to(dt)
        d = rnd(*o.shape).to(dt).double()
        t["dout%d" % i] = d.to(dt)
        douts.append(d)
    want = [x for i, x in enumerate(xs) if x.requires_grad]
    if want:
        grads = torch.autograd.grad(outs, want, douts, allow_unused=True)
        gi = iter(grads)
        for i, x in enumerate(xs):
            if x.requires_grad:
                g = next(gi)
                t["grad_in%d" % i] = (torch.zeros_like(x) if g is None else g).detach().float()
    for k, v in (aux or {}).items():
        t["aux." + k] = v.detach().float() if v.is_floating_point() else v.detach()
    meta = {"op": op, "attrs": jdump(attrs or {}), "no_grad_inputs": jdump(sorted(no_grad)),
            "source": "torch %s, float64, stored as f32" % torch.__version__}
    if in_names:
        meta["inputs"] = jdump(in_names)
    save("op_%s.safetensors" % fname, t, meta)


def _ops_matmul():
    def mm(ta, tb):
        def f(a, b):
            return torch.matmul(a.transpose(-1, -2) if ta else a, b.transpose(-1, -2) if tb else b)
        return f
    for name, sa, sb, ta, tb in (
            ("matmul", (3, 4), (4, 5), 0, 0), ("matmul_ta", (4, 3), (4, 5), 1, 0),
            ("matmul_tb", (3, 4), (5, 4), 0, 1), ("matmul_tab", (4, 3), (5, 4), 1, 1),
            ("matmul_batch", (2, 3, 4), (2, 4, 5), 0, 0),
            ("matmul_batch_shared_b", (2, 3, 4), (4, 5), 0, 0),
            ("matmul_batch4d_tb", (2, 2, 3, 4), (2, 2, 5, 4), 0, 1)):
        op_fixture(name, "matmul", mm(ta, tb), [rnd(*sa), rnd(*sb)],
                   {"trans_a": ta, "trans_b": tb}, in_names=["a", "b"])
    op_fixture("dense", "dense", lambda x, w, b: F.linear(x, w, b),
               [rnd(4, 6), rnd(5, 6), rnd(5)], {"has_bias": 1}, in_names=["x", "w", "b"])
    op_fixture("dense_nobias", "dense", lambda x, w: F.linear(x, w), [rnd(4, 6), rnd(5, 6)],
               {"has_bias": 0}, in_names=["x", "w"])
    op_fixture("dense_3d", "dense", lambda x, w, b: F.linear(x, w, b),
               [rnd(2, 3, 6), rnd(5, 6), rnd(5)], {"has_bias": 1}, in_names=["x", "w", "b"])


def _ops_conv_pool():
    for name, xs, ws, bias, st, pad, dil, groups in (
            ("conv2d", (2, 3, 6, 6), (4, 3, 3, 3), 1, (1, 1), (1, 1), (1, 1), 1),
            ("conv2d_stride", (2, 3, 7, 6), (4, 3, 3, 2), 0, (2, 1), (1, 0), (1, 1), 1),
            ("conv2d_dilation", (1, 2, 7, 7), (3, 2, 3, 3), 1, (1, 1), (2, 2), (2, 2), 1),
            ("conv2d_groups", (2, 4, 5, 5), (6, 2, 3, 3), 1, (1, 1), (1, 1), (1, 1), 2),
            ("conv2d_depthwise", (1, 3, 5, 5), (3, 1, 3, 3), 1, (2, 2), (1, 1), (1, 1), 3),
            ("conv2d_1x1", (2, 4, 3, 3), (5, 4, 1, 1), 1, (1, 1), (0, 0), (1, 1), 1)):
        attrs = {"stride_h": st[0], "stride_w": st[1], "pad_h": pad[0], "pad_w": pad[1],
                 "dil_h": dil[0], "dil_w": dil[1], "groups": groups, "has_bias": bias}
        ins = [rnd(*xs), rnd(*ws)] + ([rnd(ws[0])] if bias else [])

        def f(x, w, b=None, st=st, pad=pad, dil=dil, groups=groups):
            return F.conv2d(x, w, b, st, pad, dil, groups)
        op_fixture(name, "conv2d", f, ins, attrs, in_names=["x", "w", "b"][:len(ins)])
    for kind in ("maxpool2d", "avgpool2d"):
        for sfx, xs, k, s, p in (("", (2, 3, 6, 6), (2, 2), (2, 2), (0, 0)),
                                 ("_pad", (2, 2, 7, 6), (3, 3), (2, 2), (1, 1)),
                                 ("_rect", (1, 2, 5, 7), (2, 3), (1, 2), (0, 1))):
            attrs = {"kh": k[0], "kw": k[1], "sh": s[0], "sw": s[1], "ph": p[0], "pw": p[1]}
            if kind == "maxpool2d":
                def f(x, k=k, s=s, p=p):
                    return F.max_pool2d(x, k, s, p)
            else:
                attrs["count_include_pad"] = 0

                def f(x, k=k, s=s, p=p):
                    return F.avg_pool2d(x, k, s, p, count_include_pad=False)
            op_fixture(kind + sfx, kind, f, [rnd(*xs)], attrs, in_names=["x"])
    op_fixture("global_avgpool", "global_avgpool", lambda x: F.adaptive_avg_pool2d(x, 1),
               [rnd(2, 3, 4, 5)], {}, in_names=["x"])


def _ops_norm():
    for name, xs in (("batchnorm_train", (4, 3, 5, 5)), ("batchnorm_train_2d", (6, 4))):
        c = xs[1]
        rm0, rv0 = rnd(c, lo=-0.5, hi=0.5), rnd(c, lo=0.5, hi=1.5)
        rm, rv = rm0.clone(), rv0.clone()

        def f(x, g, b, rm_, rv_, rm=rm, rv=rv):
            return F.batch_norm(x, rm, rv, g, b, training=True, momentum=0.1, eps=1e-5)
        x = rnd(*xs, lo=-2.0, hi=2.0)
        dims = [0] + list(range(2, len(xs)))
        op_fixture(name, "batchnorm", f, [x, rnd(c, lo=0.5, hi=1.5), rnd(c), rm0, rv0],
                   {"momentum": 0.1, "eps": 1e-5, "training": 1}, no_grad=(3, 4),
                   aux={"running_mean": rm, "running_var": rv,
                        "batch_mean": x.mean(dims), "batch_var": x.var(dims, unbiased=False)},
                   in_names=["x", "gamma", "beta", "running_mean", "running_var"])
    c = 3
    op_fixture("batchnorm_eval", "batchnorm",
               lambda x, g, b, rm, rv: F.batch_norm(x, rm, rv, g, b, training=False, eps=1e-5),
               [rnd(2, c, 4, 4, lo=-2.0, hi=2.0), rnd(c, lo=0.5, hi=1.5), rnd(c),
                rnd(c, lo=-0.5, hi=0.5), rnd(c, lo=0.5, hi=1.5)],
               {"momentum": 0.1, "eps": 1e-5, "training": 0}, no_grad=(3, 4),
               in_names=["x", "gamma", "beta", "running_mean", "running_var"])
    x = rnd(3, 4, 8, lo=-2.0, hi=2.0)
    op_fixture("layernorm", "layernorm", lambda x, g, b: F.layer_norm(x, (8,), g, b, 1e-5),
               [x, rnd(8, lo=0.5, hi=1.5), rnd(8)], {"eps": 1e-5},
               aux={"mean": x.mean(-1), "rstd": 1.0 / torch.sqrt(x.var(-1, unbiased=False) + 1e-5)},
               in_names=["x", "gamma", "beta"])


def _ops_eltwise_softmax():
    elt = {
        "relu": (F.relu, rnd), "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), rnd),
        "gelu_erf": (F.gelu, rnd), "sigmoid": (torch.sigmoid, rnd), "tanh": (torch.tanh, rnd),
        "exp": (torch.exp, rnd), "log": (torch.log, lambda *s: rnd(*s, lo=0.5, hi=2.0)),
        "sqrt": (torch.sqrt, lambda *s: rnd(*s, lo=0.5, hi=2.0)), "square": (torch.square, rnd),
        "abs": (torch.abs, away), "neg": (torch.neg, rnd),
    }
    for name, (fn, gen) in elt.items():
        x = gen(3, 7) * (3.0 if name in ("relu", "gelu_tanh", "gelu_erf", "sigmoid", "tanh")
                         else 1.0)
        op_fixture(name, "eltwise", fn, [x], {"alg": name}, in_names=["x"])
    for name, fn in (("softmax", F.softmax), ("log_softmax", F.log_softmax)):
        for sfx, xs, ax in (("", (4, 6), -1), ("_axis1", (2, 5, 3), 1)):
            op_fixture(name + sfx, name, lambda x, fn=fn, ax=ax: fn(x, dim=ax),
                       [rnd(*xs, lo=-3.0, hi=3.0)], {"axis": ax}, in_names=["x"])
    for sfx, sm, ign in (("", 0.0, False), ("_smooth", 0.1, False), ("_ignore", 0.0, True),
                         ("_smooth_ignore", 0.1, True)):
        labels = torch.randint(0, 7, (5,), generator=_GEN, dtype=torch.int64)
        if ign:
            labels[2] = -100
        op_fixture("cross_entropy" + sfx, "softmax_ce",
                   lambda z, y, sm=sm: F.cross_entropy(z, y, label_smoothing=sm),
                   [rnd(5, 7, lo=-3.0, hi=3.0), labels], {"label_smoothing": sm,
                                                          "ignore_index": -100},
                   no_grad=(1,), in_names=["logits", "labels"])


def _ops_binary_shape():
    fns = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}
    for name, fn in fns.items():
        for sfx, sa, sb in (("", (3, 4), (3, 4)), ("_bcast", (2, 3, 4), (3, 1)),
                            ("_bcast2", (2, 1, 4), (3, 1)), ("_bcast_left", (4,), (2, 3, 4))):
            b = away(*sb) if name == "div" else rnd(*sb)
            op_fixture(name + sfx, "binary", fn, [rnd(*sa), b], {"alg": name}, in_names=["a", "b"])
    op_fixture("scale", "scale", lambda x: 1.5 * x - 0.25, [rnd(3, 4)],
               {"alpha": 1.5, "beta": -0.25}, in_names=["x"])
    op_fixture("sum_to", "sum_to", lambda x: x.sum(dim=(0, 2), keepdim=True).reshape(3, 1),
               [rnd(2, 3, 4)], {"shape": [3, 1]}, in_names=["x"])
    op_fixture("broadcast_to", "broadcast_to", lambda x: x.expand(2, 3, 4), [rnd(3, 1)],
               {"shape": [2, 3, 4]}, in_names=["x"])
    op_fixture("reshape", "reshape", lambda x: x.reshape(4, 6), [rnd(2, 3, 4)],
               {"shape": [4, 6]}, in_names=["x"])
    op_fixture("permute", "permute", lambda x: x.permute(0, 2, 3, 1), [rnd(2, 3, 4, 5)],
               {"perm": [0, 2, 3, 1]}, in_names=["x"])
    op_fixture("permute_3d", "permute", lambda x: x.permute(2, 0, 1), [rnd(2, 3, 4)],
               {"perm": [2, 0, 1]}, in_names=["x"])
    op_fixture("concat", "concat", lambda a, b, c: torch.cat([a, b, c], 1),
               [rnd(2, 3, 4), rnd(2, 1, 4), rnd(2, 2, 4)], {"axis": 1},
               in_names=["x0", "x1", "x2"])
    op_fixture("concat_last", "concat", lambda a, b: torch.cat([a, b], -1),
               [rnd(3, 2), rnd(3, 5)], {"axis": -1}, in_names=["x0", "x1"])
    op_fixture("split", "split", lambda x: torch.split(x, [1, 2, 3], 1), [rnd(2, 6, 3)],
               {"axis": 1, "sizes": [1, 2, 3]}, in_names=["x"])
    op_fixture("slice", "slice", lambda x: x[:, 1:5], [rnd(4, 6)],
               {"axis": 1, "start": 1, "end": 5}, in_names=["x"])
    op_fixture("slice_axis0", "slice", lambda x: x[2:3], [rnd(4, 2, 3)],
               {"axis": 0, "start": 2, "end": 3}, in_names=["x"])
    ids = torch.tensor([[1, 4, 1], [6, 0, 4]], dtype=torch.int64)  # repeats: grads accumulate
    op_fixture("embedding", "embedding", lambda t, i: F.embedding(i, t), [rnd(7, 4), ids], {},
               no_grad=(1,), in_names=["table", "ids"])
    op_fixture("embedding_i32", "embedding", lambda t, i: F.embedding(i.long(), t),
               [rnd(5, 3), torch.tensor([0, 4, 4, 2], dtype=torch.int32)], {}, no_grad=(1,),
               in_names=["table", "ids"])


def _ops_reduce_attention():
    for alg, fn in (("sum", torch.sum), ("mean", torch.mean), ("max", None)):
        for sfx, axes, keep in (("_ax1", [1], 0), ("_ax02_keep", [0, 2], 1), ("_all", [0, 1, 2], 0)):
            if alg == "max":
                def f(x, axes=axes, keep=keep):
                    y = x
                    for a in sorted(axes, reverse=True):
                        y = y.amax(dim=a, keepdim=bool(keep))
                    return y
            else:
                def f(x, fn=fn, axes=axes, keep=keep):
                    return fn(x, dim=axes, keepdim=bool(keep))
            op_fixture(alg + sfx, "reduce", f, [rnd(2, 3, 4)],
                       {"alg": alg, "axes": axes, "axes_mask": sum(1 << a for a in axes),
                        "keepdim": keep}, in_names=["x"])

    def attn(scale):
        def f(q, k, v):
            d = q.shape[-1]
            s = scale if scale else 1.0 / math.sqrt(d)
            sc = torch.matmul(q, k.transpose(-1, -2)) * s
            t = q.shape[-2]
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            sc = sc.masked_fill(~mask, float("-inf"))
            return torch.matmul(torch.softmax(sc, -1), v)
        return f
    for name, shp, scale in (("attention", (2, 2, 5, 4), 0.0), ("attention_scale", (1, 3, 4, 8), 0.5)):
        q, k, v = rnd(*shp, lo=-2, hi=2), rnd(*shp, lo=-2, hi=2), rnd(*shp)
        s = scale if scale else 1.0 / math.sqrt(shp[-1])
        sc = (q @ k.transpose(-1, -2) * s).masked_fill(
            ~torch.ones(shp[2], shp[2], dtype=torch.bool).tril(), float("-inf"))
        op_fixture(name, "attention", attn(scale), [q, k, v], {"scale": scale, "causal": 1},
                   aux={"lse": torch.logsumexp(sc, -1)}, in_names=["q", "k", "v"])


def _ops_cast():
    x = torch.cat([rnd(12, lo=-4, hi=4), torch.tensor([1.00390625, 1.01171875, 65504.0, -0.0,
                                                        1e-7, 3.0e38]).double()])
    for name, dt in (("cast_bf16", torch.bfloat16), ("cast_f16", torch.float16)):
        op_fixture(name, "cast", lambda x, dt=dt: x.to(dt), [x],
                   {"dtype": "bf16" if dt == torch.bfloat16 else "f16"}, in_names=["x"],
                   out_dtypes={0: dt})


def part_ops():
    _GEN.manual_seed(20240601)
    _ops_matmul()
    _ops_conv_pool()
    _ops_norm()
    _ops_eltwise_softmax()
    _ops_binary_shape()
    _ops_reduce_attention()
    _ops_cast()


# ----------------------------------------------------------------------------- part: train

TRAIN_STEPS = 5
TRAIN_OPTIMS = {
    # name: (Tessera ts_optim_config fields, torch constructor); weight decay on every param
    "momentum": ({"kind": "momentum", "lr": 0.1, "momentum": 0.9, "dampening": 0.0,
                  "nesterov": 0, "weight_decay": 5e-4},
                 lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=5e-4)),
    "adamw": ({"kind": "adamw", "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
               "weight_decay": 0.01},
              lambda ps: torch.optim.AdamW(ps, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                           weight_decay=0.01)),
}


class TrainMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(20, 32)
        self.fc2 = torch.nn.Linear(32, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class TrainCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, 3, padding=1, bias=True)
        self.bn1 = torch.nn.BatchNorm2d(8, eps=1e-5, momentum=0.1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = torch.nn.BatchNorm2d(16, eps=1e-5, momentum=0.1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        h = F.relu(self.bn2(self.conv2(h)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


TRAIN_MODELS = {
    # name: (module class, x shape per batch, seed)
    "mlp": (TrainMLP, (16, 20), 7001),
    "cnn": (TrainCNN, (8, 1, 12, 12), 7002),
}


def _train_state(model):
    """Parameters and BatchNorm running stats by name (num_batches_tracked is not used: the
    momentum is fixed)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()
            if not k.endswith("num_batches_tracked")}


def _train_case(mname, oname):
    cls, xshape, seed = TRAIN_MODELS[mname]
    cfg, make_opt = TRAIN_OPTIMS[oname]
    torch.manual_seed(seed)  # same seed for both optimizers: same init and batches
    model = cls().float().train()
    batches = [(torch.randn(xshape), torch.randint(0, 10, (xshape[0],), dtype=torch.int64))
               for _ in range(TRAIN_STEPS)]
    t = {}
    for k, v in _train_state(model).items():
        t["init." + k] = v
    opt = make_opt(list(model.parameters()))
    losses = []
    for k, (x, y) in enumerate(batches):
        t["x.%d" % k], t["y.%d" % k] = x, y
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    t["loss"] = torch.tensor(losses, dtype=torch.float32)
    for k, v in _train_state(model).items():
        t["final." + k] = v
    params = [n for n, _ in model.named_parameters()]
    states = [n for n in _train_state(model) if n not in params]
    save("train_%s_%s.safetensors" % (mname, oname), t, {
        "model": mname, "optimizer": jdump(cfg), "steps": str(TRAIN_STEPS),
        "params": jdump(params), "states": jdump(states),
        "source": "torch %s, float32, %s, %s, train mode, seed %d" % (
            torch.__version__, type(opt).__name__, cls.__name__, seed)})


def part_train():
    for m in TRAIN_MODELS:
        for o in TRAIN_OPTIMS:
            _train_case(m, o)


# ----------------------------------------------------------------------------- part: vision

def _hwc(t):
    """(C,H,W) -> (H,W,C), contiguous."""
    return t.permute(1, 2, 0).contiguous()


def part_vision():
    """torchvision (functional, on tensors) references for the data transforms
    (tests/data/test_transform.c; docs/data-pipeline.md). Images are stored HWC as Tessera's
    sources decode them; torchvision is called on contiguous CHW copies. The random transforms are
    covered through their deterministic functional op at every parameter the C code can draw
    (crops) or at fixed parameters (erase)."""
    import torchvision
    import torchvision.transforms.functional as TF
    src = "torch %s, torchvision %s" % (torch.__version__, torchvision.__version__)
    g = torch.Generator().manual_seed(9001)
    img = torch.randint(0, 256, (10, 12, 3), generator=g, dtype=torch.uint8)  # HWC
    chw = img.permute(2, 0, 1).contiguous()
    img32 = torch.randint(0, 256, (32, 32, 3), generator=g, dtype=torch.uint8)
    imgf = (torch.randn(9, 11, 2, generator=g) * 2.0).float()

    # random crop: F.crop(F.pad(img, pad), top, left, h, w) for every (top, left)
    t = {"img": img}
    crops = {"crop_pad2": (2, 8, 9), "crop_pad0": (0, 6, 7), "crop_pad4_full": (4, 10, 12)}
    for name, (pad, h, w) in crops.items():
        padded = TF.pad(chw, [pad, pad, pad, pad], fill=0) if pad else chw
        H, W = padded.shape[1], padded.shape[2]
        out = torch.empty(H - h + 1, W - w + 1, h, w, 3, dtype=torch.uint8)
        for top in range(H - h + 1):
            for left in range(W - w + 1):
                out[top, left] = _hwc(TF.crop(padded, top, left, h, w))
        t[name] = out
    save("tf_crop.safetensors", t, {
        "cases": jdump({k: {"pad": v[0], "h": v[1], "w": v[2]} for k, v in crops.items()}),
        "layout": "out[top][left] = HWC crop of F.pad(img, pad) at (top, left)", "source": src})

    # center crop (zero padding when larger; round((H-h)/2) is Python's half-to-even round)
    t = {"img": img}
    sizes = [(5, 7), (4, 4), (7, 9), (13, 15), (12, 9), (8, 14), (10, 12), (1, 1)]
    for h, w in sizes:
        t["out_%dx%d" % (h, w)] = _hwc(TF.center_crop(chw, [h, w]))
    save("tf_center_crop.safetensors", t, {"sizes": jdump(sizes), "source": src})

    # resize: bilinear, antialias False (u8: computed in f32, torch.round, cast)
    t = {"img": img, "img32": img32, "imgf": imgf}
    cases = {"u8_5x6": ("img", 5, 6), "u8_17x23": ("img", 17, 23), "u8_10x7": ("img", 10, 7),
             "u8_4x12": ("img", 4, 12), "u8_1x1": ("img", 1, 1), "u8big_24x24": ("img32", 24, 24),
             "u8big_48x40": ("img32", 48, 40), "u8big_7x33": ("img32", 7, 33),
             "f32_7x9": ("imgf", 7, 9), "f32_15x4": ("imgf", 15, 4), "f32_20x22": ("imgf", 20, 22)}
    for name, (inp, h, w) in cases.items():
        # contiguous CHW, as decoded images are (a channels-last view takes another torch kernel
        # whose f32 results differ in the last bit)
        x = t[inp].permute(2, 0, 1).contiguous()
        y = TF.resize(x, [h, w], interpolation=TF.InterpolationMode.BILINEAR, antialias=False)
        t[name] = _hwc(y)
    save("tf_resize.safetensors", t, {"cases": jdump({k: list(v) for k, v in cases.items()}),
                                      "source": src})

    # flips
    save("tf_flip.safetensors", {"img": img, "hflip": _hwc(TF.hflip(chw)), "vflip": _hwc(TF.vflip(chw))},
         {"source": src})

    # to_float (ConvertImageDtype: x / 255) and normalize (sub_(mean).div_(std)), CHW output
    mean, std = [0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]
    xf = TF.convert_image_dtype(chw, torch.float32)
    save("tf_normalize.safetensors", {
        "img": img, "to_float": _hwc(xf),
        "normalized_chw": TF.normalize(xf, mean, std).contiguous(),
        "mean": torch.tensor(mean, dtype=torch.float32), "std": torch.tensor(std, dtype=torch.float32)},
        {"source": src})

    # erase with value 0 at fixed (i, j, h, w) on a CHW f32 image
    xe = (torch.rand(3, 10, 12, generator=g) + 0.5).float()
    t = {"img": xe}
    boxes = [(2, 3, 4, 5), (0, 0, 9, 11), (5, 7, 5, 5), (3, 0, 1, 12)]
    for i, j, h, w in boxes:
        t["erase_%d_%d_%d_%d" % (i, j, h, w)] = TF.erase(xe, i, j, h, w, torch.tensor([0.0])[:, None, None])
    save("tf_erase.safetensors", t, {"boxes": jdump(boxes), "source": src})


# ----------------------------------------------------------------------------- part: mslr

# MindSpore's LearningRateSchedule cells (python/tessera/learning_rate_schedule.py) where PyTorch
# has the same curve: the cell's arguments in the metadata, PyTorch's rates as the tensor.
MSLR_CASES = [
    ("CosineDecayLR", dict(min_lr=0.01, max_lr=0.1, decay_steps=10), 11,
     lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 10, eta_min=0.01), 0.1),
    ("ExponentialDecayLR", dict(learning_rate=0.1, decay_rate=0.9, decay_steps=1, is_stair=True), 12,
     lambda o: torch.optim.lr_scheduler.ExponentialLR(o, 0.9), 0.1),
    ("ExponentialDecayLR", dict(learning_rate=0.1, decay_rate=0.5, decay_steps=3, is_stair=True), 12,
     lambda o: torch.optim.lr_scheduler.StepLR(o, 3, 0.5), 0.1),
    ("PolynomialDecayLR", dict(learning_rate=0.1, end_learning_rate=0.0, decay_steps=8, power=2.0), 12,
     lambda o: torch.optim.lr_scheduler.PolynomialLR(o, 8, 2.0), 0.1),
    ("WarmUpLR", dict(learning_rate=0.1, warmup_steps=4), 8,
     lambda o: torch.optim.lr_scheduler.LinearLR(o, 1e-30, 1.0, 4), 0.1),
]


def part_mslr():
    t, meta = {}, {}
    for i, (cell, args, n, make, lr) in enumerate(MSLR_CASES):
        opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
        s = make(opt)
        rates = []
        for _ in range(n):
            rates.append(opt.param_groups[0]["lr"])
            opt.step()
            s.step()
        name = "case%d" % i
        t[name] = torch.tensor(rates, dtype=torch.float32)
        meta[name] = jdump({"cell": cell, "args": args})
    save("ms_lr_schedules.safetensors", t, meta)


PARTS = {"st": part_st, "optim": part_optim, "ops": part_ops, "train": part_train, "vision": part_vision,
         "mslr": part_mslr}


def main(argv):
    parts = argv[1:] or list(PARTS)
    for p in parts:
        if p not in PARTS:
            sys.exit("unknown part '%s' (expected: %s)" % (p, ", ".join(PARTS)))
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    for p in parts:
        PARTS[p]()
    total = sum(n for _, n in WRITTEN)
    print("wrote %d files, %d bytes, to %s" % (len(WRITTEN), total, OUT))


if __name__ == "__main__":
    main(sys.argv)
