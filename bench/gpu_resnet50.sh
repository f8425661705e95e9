#!/usr/bin/env bash
# ResNet-50 training steps on the GPU, Tessera against PyTorch in the same run (issue 28's second
# speed check; docs/gpu.md): Tessera's zoo ResNet-50 (torchvision's architecture, 1000 classes)
# with device_target GPU under amp O2 (bf16 compute, f32 masters; convolutions through cuDNN where
# found), SGD momentum, batch 128 of 224x224 RGB images (random pixels written as PNG files here,
# decoded and batched by the image-folder pipeline with 8 workers, prefetched), then
# bench/torch_resnet50_gpu.py (bf16 autocast eager with channels_last: the issue's reference;
# eager NCHW; torch.compile), whose input sits on the GPU already; Tessera's activations NHWC
# (channels last, its default in bf16) and, RN50_NCHW=1, NCHW too. Prints each side's median step,
# images/s, and Tessera's time over each PyTorch figure; JSON lines into OUT/gpu_resnet50.jsonl.
#   bench/gpu_resnet50.sh TESSERA OUT [STEPS]   TESSERA: the binary (or gpu-bundle/tessera); STEPS:
#                                               Tessera's timed steps after 2 warm-up (default 20;
#                                               PyTorch times 20 after 5)
# Env: RN50_SIZE (224), RN50_BATCH (128), RN50_TORCH (1: run PyTorch's side), RN50_COMPILE (1),
#      RN50_NCHW (1: Tessera again with TESSERA_GPU_CHANNELS_LAST=0)
set -u
bin=$1
out=$2
steps=${3:-20}
size=${RN50_SIZE:-224}
batch=${RN50_BATCH:-128}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# 2 batches of images (the pipeline repeats them), 4 classes, plus a small test split; PNG written
# with zlib alone (no imaging library needed)
python3 - "$tmp/img" "$size" $((2 * batch)) <<'PY'
import os, random, struct, sys, zlib
root, size, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
rnd = random.Random(0)
rb = getattr(rnd, "randbytes", None) or (lambda k: bytes(rnd.getrandbits(8) for _ in range(k)))
for split, count in (("train", n), ("test", 8)):
    for i in range(count):
        d = os.path.join(root, split, "class%d" % (i % 4))
        os.makedirs(d, exist_ok=True)
        raw = b"".join(b"\x00" + rb(3 * size) for _ in range(size))
        png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)) +
               chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b""))
        open(os.path.join(d, "%05d.png" % i), "wb").write(png)
PY
cat > "$tmp/rn50.yaml" <<YAML
model: {name: resnet, depth: 50, num_classes: 1000, cifar_stem: false}
data:
  name: image_folder
  path: '$tmp/img'
  num_workers: 8
  transforms: [{name: to_float, scale: 0.00392156862745098}, hwc_to_chw]
train: {steps: $((steps + 2)), batch_size: $batch, eval_every: -1, amp_level: O2, log_every: 1}
optimizer: {name: momentum, lr: 0.1, momentum: 0.9, weight_decay: 0.0001}
device_target: GPU
log: {progress: off, metrics: '$tmp/m.jsonl'}
YAML
# Tessera's channels-last run (the default for bf16 convolutions), then (RN50_NCHW=1, the
# default) the same with its activations NCHW (TESSERA_GPU_CHANNELS_LAST=0): what NHWC is worth
: > "$out/gpu_resnet50.jsonl"
for v in cl nchw; do
  [ $v = nchw ] && [ "${RN50_NCHW:-1}" != 1 ] && continue
  name=tessera_gpu_amp_O2; [ $v = nchw ] && name=tessera_gpu_amp_O2_nchw
  rm -f "$tmp/m.jsonl"
  if ! env $([ $v = nchw ] && echo TESSERA_GPU_CHANNELS_LAST=0) "$bin" train "$tmp/rn50.yaml" > "$tmp/t.out" 2>&1; then
    echo "tessera ($v): $(tail -2 "$tmp/t.out")"
    grep -q "device_target GPU: no NVIDIA\|does not start\|sees no GPU" "$tmp/t.out" && exit 77
    exit 1
  fi
  grep "^device: " "$tmp/t.out"
  python3 - "$tmp/m.jsonl" "$batch" "$size" "$name" >> "$out/gpu_resnet50.jsonl" <<'PY'
import json, statistics, sys
batch, size = int(sys.argv[2]), int(sys.argv[3])
ms = [r["step_ms"] for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "step"][2:]  # 2 warm-up
med = statistics.median(ms)
print(json.dumps({"name": sys.argv[4], "ms": round(med, 3), "images_per_s": round(batch / (med / 1e3), 1),
                  "steps": len(ms), "batch": batch, "size": size}))
PY
done
if [ "${RN50_TORCH:-1}" = 1 ]; then
  extra=""; [ "${RN50_COMPILE:-1}" = 1 ] || extra=--no-compile
  python3 "$root/bench/torch_resnet50_gpu.py" --steps 20 --batch "$batch" --size "$size" $extra >> "$out/gpu_resnet50.jsonl" 2> "$tmp/torch.err"
  rc=$?
  [ $rc = 0 ] || [ $rc = 77 ] || echo "torch: $(tail -3 "$tmp/torch.err")"
fi
python3 - "$out/gpu_resnet50.jsonl" <<'PY'
import json, sys
r = {d["name"]: d for d in map(json.loads, open(sys.argv[1])) if "name" in d}
t = r.get("tessera_gpu_amp_O2")
for k, d in r.items():
    if "ms" in d:
        print("%-42s %9.2f ms/step %9.1f images/s%s" % (k, d["ms"], d["images_per_s"],
              "" if k == "tessera_gpu_amp_O2" or not t else "   tessera / this = %.2f" % (t["ms"] / d["ms"])))
if "bf16_gemm_peak" in r:
    print("bf16 GEMM peak measured: %.1f TFLOP/s" % r["bf16_gemm_peak"]["tflops"])
PY
