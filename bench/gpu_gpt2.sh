#!/usr/bin/env bash
# GPT-2 124M training steps on the GPU, Tessera against PyTorch in the same run (issue 28's speed
# check; docs/gpu.md): Tessera's zoo GPT with device_target GPU under amp O2 (bf16 compute, f32
# masters; AdamW as below), batch 8 x sequence 1024 of synthetic text, then
# bench/torch_gpt2_gpu.py (eager with bf16 autocast, and torch.compile). Prints each side's median
# step, tokens/s, and Tessera's time over each PyTorch figure; JSON lines into OUT/gpu_gpt2.jsonl;
# then a profiled run's per-op tables into OUT/gpu_gpt2_profile.txt (GPT2_PROFILE=0: not).
#   bench/gpu_gpt2.sh TESSERA OUT [STEPS]     TESSERA: the binary (or gpu-bundle/tessera); STEPS:
#                                             Tessera's timed steps after 2 warm-up (default 20;
#                                             PyTorch times 20 after 5)
set -u
bin=$1
out=$2
steps=${3:-20}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -c "
import random
random.seed(0)
w = ['the', 'quick', 'brown', 'fox', 'jumps', 'over', 'lazy', 'dog', 'and', 'runs', 'away', 'far']
open('$tmp/text.txt', 'w').write(' '.join(random.choice(w) for _ in range(800000)))"
cat > "$tmp/gpt2.yaml" <<YAML
model: {name: gpt, n_layer: 12, n_head: 12, n_embd: 768, block_size: 1024, vocab_size: 50257, tie_weights: true, dropout: 0.0}
data: {name: text, path: '$tmp/text.txt', seq_len: 1024, val_fraction: 0.0002, transforms: []}
train: {steps: $((steps + 2)), batch_size: 8, eval_every: -1, amp_level: O2, log_every: 1}
optimizer: {name: adamw, lr: 0.0006, betas: [0.9, 0.95], weight_decay: 0.1}
device_target: GPU
log: {progress: off, metrics: '$tmp/m.jsonl'}
YAML
if ! "$bin" train "$tmp/gpt2.yaml" > "$tmp/t.out" 2>&1; then
  echo "tessera: $(tail -2 "$tmp/t.out")"
  grep -q "device_target GPU: no NVIDIA\|does not start\|sees no GPU" "$tmp/t.out" && exit 77
  exit 1
fi
python3 - "$tmp/m.jsonl" "$steps" > "$out/gpu_gpt2.jsonl" <<'PY'
import json, statistics, sys
ms = [r["step_ms"] for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "step"][2:]  # 2 warm-up
med = statistics.median(ms)
print(json.dumps({"name": "tessera_gpu_amp_O2", "ms": round(med, 3), "tokens_per_s": round(8 * 1024 / (med / 1e3)), "steps": len(ms)}))
PY
# where the time goes (GPT2_PROFILE=0: skipped): 4 more steps with the profiler on the last 2
# (each node timed with CUDA events): its per-op-type and per-operator tables (GFLOP/s, % of the
# measured peak) into OUT/gpu_gpt2_profile.txt, for the next round of kernel work
if [ "${GPT2_PROFILE:-1}" != 0 ]; then
  "$bin" train "$tmp/gpt2.yaml" --set train.steps=4 --set log.profile=summary --set log.profile_start=3 \
    --set log.metrics="$tmp/p.jsonl" > "$out/gpu_gpt2_profile.txt" 2>&1 || echo "tessera (profiled): $(tail -2 "$out/gpu_gpt2_profile.txt")"
fi
python3 "$root/bench/torch_gpt2_gpu.py" --steps 20 >> "$out/gpu_gpt2.jsonl" 2> "$tmp/torch.err"
rc=$?
[ $rc = 0 ] || [ $rc = 77 ] || echo "torch: $(tail -3 "$tmp/torch.err")"
python3 - "$out/gpu_gpt2.jsonl" <<'PY'
import json, sys
r = {d["name"]: d for d in map(json.loads, open(sys.argv[1]))}
t = r.get("tessera_gpu_amp_O2")
for k, d in r.items():
    if "ms" in d:
        print("%-30s %9.2f ms/step %10d tokens/s%s" % (k, d["ms"], d["tokens_per_s"],
              "" if k == "tessera_gpu_amp_O2" or not t else "   tessera / this = %.2f" % (t["ms"] / d["ms"])))
if "bf16_gemm_peak" in r:
    print("bf16 GEMM peak measured: %.1f TFLOP/s" % r["bf16_gemm_peak"]["tflops"])
PY
