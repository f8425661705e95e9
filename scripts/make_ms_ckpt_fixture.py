#!/usr/bin/env python3
"""Writes tests/fixtures/ms_checkpoint.ckpt, a MindSpore checkpoint written through Google's
protobuf library the way MindSpore saves one (tests/tools/ms_ckpt_proto.py), and
tests/fixtures/ms_checkpoint_expect.safetensors, what Tessera must read from it (the same
tensors, converted where Tessera holds another type; the strings as metadata). Needs numpy and
python3-protobuf only. Run from the repository root: python3 scripts/make_ms_ckpt_fixture.py"""
import json
import os
import struct
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
import ms_ckpt_proto as ms  # noqa: E402


def safetensors(path, tensors, meta):
    """A plain safetensors file (the format's own rules; no Tessera CRC)."""
    hdr, data = {"__metadata__": meta}, b""
    for name, (code, shape, raw) in tensors.items():
        hdr[name] = {"dtype": code, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def main():
    rng = np.random.default_rng(20261207)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    conv1 = f32(6, 1, 5, 5)
    fc_w = f32(10, 24)
    emb = f32(4, 3)
    emb_bf16 = ((emb.view(np.uint32) >> 16) << 16).view(np.float32)  # what BFloat16 keeps
    fc_b = f32(10).astype(np.float16)
    i8 = np.array([[-128, -1], [0, 127]], np.int8)
    u16 = np.array([0, 65535, 7], np.uint16)
    u32 = np.array([4294967295, 1], np.uint32)
    u64 = np.array([9223372036854775807, 3], np.uint64)
    flag = np.array([True, False, True])
    entries = [
        ("conv1.weight", conv1),
        ("bn1.gamma", np.ones(6, np.float32)), ("bn1.beta", np.zeros(6, np.float32)),
        ("bn1.moving_mean", f32(6)), ("bn1.moving_variance", np.abs(f32(6)) + 1),
        ("fc.weight", fc_w), ("fc.bias", fc_b),
        ("emb.embedding_table", ("BFloat16", emb)),
        ("moments.conv1.weight", f32(6, 1, 5, 5)),
        ("learning_rate", np.array(0.01, np.float32)),       # a 0-d tensor: dims []
        ("global_step", np.array([1875], np.int32)),
        ("epoch_num", np.array(3, np.int64)),                 # append_info's int: Int64, dims []
        ("f64", ("dims", [0], "Float64", struct.pack("<d", 0.1))),  # MindSpore's [0]-dims number
        ("empty", np.zeros(0, np.float32)),
        ("flag", flag), ("i8", i8), ("u16", u16), ("u32", u32), ("u64", u64),
        ("random_op", ("random_op", b"\x01\x02\x03\x04")),
        ("note", "r\u00e9sum\u00e9 \u2713 \U0001F600"),
        ("step_num", "1875"),
    ]
    ms.write(os.path.join(ROOT, "tests/fixtures/ms_checkpoint.ckpt"), entries, piece=256)  # fc.weight: 4 values
    bf = (emb_bf16.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    t = {
        "conv1.weight": ("F32", conv1.shape, conv1.tobytes()),
        "bn1.gamma": ("F32", (6,), np.ones(6, np.float32).tobytes()),
        "bn1.beta": ("F32", (6,), np.zeros(6, np.float32).tobytes()),
        "bn1.moving_mean": ("F32", (6,), entries[3][1].tobytes()),
        "bn1.moving_variance": ("F32", (6,), entries[4][1].tobytes()),
        "fc.weight": ("F32", fc_w.shape, fc_w.tobytes()),
        "fc.bias": ("F16", (10,), fc_b.tobytes()),
        "emb.embedding_table": ("BF16", (4, 3), bf),
        "moments.conv1.weight": ("F32", (6, 1, 5, 5), entries[8][1].tobytes()),
        "learning_rate": ("F32", (), np.array(0.01, np.float32).tobytes()),
        "global_step": ("I32", (1,), np.array([1875], np.int32).tobytes()),
        "epoch_num": ("I64", (), np.array(3, np.int64).tobytes()),
        "f64": ("F32", (), np.array(0.1, np.float32).tobytes()),
        "empty": ("F32", (0,), b""),
        "flag": ("U8", (3,), flag.astype(np.uint8).tobytes()),
        "i8": ("I32", (2, 2), i8.astype(np.int32).tobytes()),
        "u16": ("I32", (3,), u16.astype(np.int32).tobytes()),
        "u32": ("I64", (2,), u32.astype(np.int64).tobytes()),
        "u64": ("I64", (2,), u64.astype(np.int64).tobytes()),
    }
    safetensors(os.path.join(ROOT, "tests/fixtures/ms_checkpoint_expect.safetensors"), t,
                {"note": "r\u00e9sum\u00e9 \u2713 \U0001F600", "step_num": "1875"})


if __name__ == "__main__":
    main()
