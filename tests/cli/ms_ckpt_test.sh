#!/usr/bin/env bash
# MindSpore's .ckpt files from the command line (docs/checkpoints.md, "MindSpore checkpoints"),
# read back by Google's protobuf library (tests/tools/ms_ckpt_proto.py, MindSpore's
# checkpoint.proto):
#  1. `tessera ckpt export CKPT -o model.ckpt` of a trained convnet (BatchNorm) is a MindSpore
#     checkpoint holding exactly the tensors of `-o model.safetensors` (names, dims, Float32,
#     bytes), `ckpt inspect` / `verify` say what it is, and `eval --checkpoint model.ckpt` gives the
#     safetensors export's figures;
#  2. a file written as MindSpore's ModelCheckpoint writes one (BatchNorm under MindSpore's names
#     gamma/beta/moving_mean/moving_variance, Momentum's moments.*, learning_rate, global_step,
#     append_info strings, a tensor in several values): `eval --checkpoint` gives the same figures,
#     and `train` resumes from it (checkpoint.resume, checkpoint.strict false: weights only) with
#     the same first loss as from the export (not a fresh run's); strictly, it is refused (it holds
#     no Tessera optimizer state);
#  3. a .ckpt cut short, or with a tensor's type unknown: one line naming the file, exit non-zero.
# Skipped (77) without Debian's python3-protobuf or the Fashion-MNIST package.
# Usage: ms_ckpt_test.sh path/to/tessera
set -u
bin=$1
fail=0
. "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
FM=/usr/share/datasets/fashion-mnist
/usr/bin/python3 -c 'import google.protobuf, numpy' 2>/dev/null || { echo "SKIP: no python3-protobuf / numpy"; exit 77; }
[ -f "$FM/train-images-idx3-ubyte.gz" ] || { echo "SKIP: no $FM (dataset-fashion-mnist)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
cfg() { # steps [extra yaml lines]
  local s=$1; shift
  cat <<YAML
model: {name: convnet, channels: [4, 8]}
data: {name: fashion_mnist, path: $FM, train_limit: 64, test_limit: 64}
train: {steps: $s, batch_size: 32, eval_every: -1, log_every: 1, seed: 3}
optimizer: {name: momentum, lr: 0.05, momentum: 0.9}
log: {progress: lines}
YAML
  for l in "$@"; do echo "$l"; done
}
cfg 2 "checkpoint: {dir: ck}" > c.yaml
run train c.yaml
[ "$rc" = 0 ] || { echo "FAIL: train -> $rc: $out"; exit 1; }
py() { PYTHONPATH="$here/../tools" /usr/bin/python3 -c "$@"; }

# 1. the export as a .ckpt
run ckpt export ck/latest -o model.ckpt
[ "$rc" = 0 ] || bad "export -o model.ckpt -> $rc: $out"
run ckpt export ck/latest -o model.safetensors
[ "$rc" = 0 ] || bad "export -o model.safetensors -> $rc: $out"
if r=$(py '
import json, struct, sys, numpy as np, ms_ckpt_proto as p
b = open("model.safetensors", "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
st = {k: v for k, v in h.items() if k != "__metadata__"}
ck = {t: (d, ty, c) for t, d, ty, c, _ in p.read("model.ckpt") if ty != "str"}
assert sorted(ck) == sorted(st), (sorted(ck), sorted(st))
for k, v in st.items():
    a, z = v["data_offsets"]
    assert ck[k] == (v["shape"], "Float32", b[8 + n + a:8 + n + z]), k
print(len(ck))' 2>&1); then ok "model.ckpt (protobuf library) = model.safetensors: $r tensors, names, dims, Float32, bytes"
else bad "model.ckpt differs from model.safetensors: $r"; fi
run ckpt inspect model.ckpt
grep -q "MindSpore checkpoint" <<<"$out" && ok "inspect: $(grep '^format' <<<"$out")" || bad "inspect: $out"
run ckpt verify model.ckpt
[ "$rc" = 0 ] && grep -q "MindSpore checkpoint read whole" <<<"$out" && ok "verify: ${out##*: }" || bad "verify -> $rc: $out"
figs() { grep -o "loss [0-9.]*  top1 [0-9.]*%  top5 [0-9.]*%" <<<"$1"; }
run eval c.yaml --checkpoint model.safetensors
want=$(figs "$out")
run eval c.yaml --checkpoint model.ckpt
if [ "$rc" = 0 ] && [ -n "$want" ] && [ "$(figs "$out")" = "$want" ]; then ok "eval model.ckpt = eval model.safetensors: $want"
else bad "eval model.ckpt -> $rc: $out (want $want)"; fi

# 2. as MindSpore writes one
py '
import json, struct, numpy as np, ms_ckpt_proto as p
b = open("model.safetensors", "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
ms = {"weight": "gamma", "bias": "beta", "running_mean": "moving_mean", "running_var": "moving_variance"}
bns = {k.rsplit(".", 1)[0] for k in h if k.endswith(".running_mean")}
out = []
for k, v in h.items():
    if k == "__metadata__":
        continue
    a, z = v["data_offsets"]
    arr = np.frombuffer(b[8 + n + a:8 + n + z], np.float32).reshape(v["shape"])
    pre, leaf = k.rsplit(".", 1)
    name = pre + "." + ms[leaf] if pre in bns else k
    out += [(name, arr), ("moments." + name, np.zeros_like(arr))]
out += [("learning_rate", np.array(0.05, np.float32)), ("momentum", np.array(0.9, np.float32)),
        ("global_step", np.array([2], np.int32)), ("epoch_num", np.array(1, np.int64)), ("note", "MindSpore")]
p.write("ms.ckpt", out, piece=256)'
run eval c.yaml --checkpoint ms.ckpt
if [ "$rc" = 0 ] && [ "$(figs "$out")" = "$want" ]; then ok "eval of MindSpore's names (gamma, moving_mean, ...) = the export's: $want"
else bad "eval ms.ckpt -> $rc: $out (want $want)"; fi
first() { grep -m1 -o "step 1 .*loss [0-9.]*" <<<"$1" | grep -o "loss [0-9.]*"; }
cfg 1 "checkpoint: {resume: model.ckpt, strict: false}" > r1.yaml
run train r1.yaml
l1=$(first "$out")
cfg 1 "checkpoint: {resume: ms.ckpt, strict: false}" > r2.yaml
run train r2.yaml
l2=$(first "$out")
cfg 1 > r0.yaml
run train r0.yaml
l0=$(first "$out")
if [ "$rc" = 0 ] && [ -n "$l1" ] && [ "$l1" = "$l2" ] && [ "$l0" != "$l1" ]; then
  ok "resume (weights only) from MindSpore's file = from the export: first $l2 (from scratch: $l0)"
else bad "resume from ms.ckpt -> $rc: [$l2] vs [$l1] (scratch [$l0]): $out"; fi
cfg 1 "checkpoint: {resume: ms.ckpt}" > r3.yaml
run train r3.yaml
[ "$rc" != 0 ] && grep -q "ms.ckpt.*no optimizer state" <<<"$out" && ok "strict resume refused: ${out##*: }" \
  || bad "strict resume from ms.ckpt -> $rc: $out"

# 3. refusals
head -c 5000 ms.ckpt > cut.ckpt
run eval c.yaml --checkpoint cut.ckpt
[ "$rc" != 0 ] && grep -q "cut.ckpt.*truncated" <<<"$out" && [ "$(grep -c . <<<"$out")" -le 2 ] \
  && ok "cut short: $(tail -1 <<<"$out")" || bad "cut.ckpt -> $rc: $out"
py '
import ms_ckpt_proto as p, numpy as np
p.write("ty.ckpt", [("conv1.weight", ("dims", [2], "Complex64", bytes(16)))])'
run ckpt inspect ty.ckpt
[ "$rc" != 0 ] && grep -q "ty.ckpt.*conv1.weight.*Complex64" <<<"$out" && ok "unknown type: $out" || bad "ty.ckpt -> $rc: $out"
exit $fail
