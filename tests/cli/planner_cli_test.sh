#!/usr/bin/env bash
# The cost model from the command line: `tessera calibrate` writes a cluster description (to -o and
# to the cache "local" reads) that loads back; `tessera plan --cluster` prints the predicted step
# for a built-in, the calibrated machine and a file; an unknown cluster or a bad file is one line
# naming it, exit 2.
# Usage: planner_cli_test.sh path/to/tessera
set -u
bin=$1
fail=0
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export TESSERA_CLUSTER_CACHE=$tmp/cache.yaml OMP_NUM_THREADS=2
for i in $(seq 1 300); do echo "line $i: the quick brown fox jumps over the lazy dog."; done > "$tmp/in.txt"
cat > "$tmp/gpt.yaml" <<YAML
model: {name: gpt, n_layer: 2, n_head: 2, n_embd: 32, block_size: 16, vocab_size: 256}
data: {name: text, path: '$tmp/in.txt', seq_len: 16, val_fraction: 0.1, transforms: []}
train: {steps: 2, batch_size: 8}
YAML
run plan "$tmp/gpt.yaml" -n 1 --cluster local
if [ $rc = 2 ] && echo "$out" | grep -q "not calibrated on this machine"; then ok "local before calibrating: exit 2"
else bad "local uncalibrated: rc $rc: $out"; fi
run calibrate -o "$tmp/mine.yaml"
if [ $rc = 0 ] && [ -s "$tmp/cache.yaml" ] && grep -q "^gemm_efficiency: " "$tmp/mine.yaml" && grep -q "^op_overhead: " "$tmp/mine.yaml"; then
  ok "calibrate wrote the cache and -o"
else bad "calibrate: rc $rc: $out"; fi
for c in local dgx-a100-80g "$tmp/mine.yaml"; do
  run plan "$tmp/gpt.yaml" -n 2 --set parallel.mode=data_parallel --cluster "$c"
  if [ $rc = 0 ] && echo "$out" | grep -q "^predicted step on .*: [0-9.]* ms" && echo "$out" | grep -q "grad reduction"; then
    ok "plan --cluster $(basename "$c")"
  else bad "plan --cluster $c: rc $rc: $out"; fi
done
run plan "$tmp/gpt.yaml" -n 1 --cluster dgx-h100
if [ $rc = 2 ] && [ "$(echo "$out" | grep -c "^tessera:")" = 1 ] && echo "$out" | grep -q "dgx-h100"; then ok "unknown cluster: exit 2"
else bad "unknown cluster: rc $rc: $out"; fi
printf 'name: x\nnodes: 1\nflops: 3\n' > "$tmp/bad.yaml"
run plan "$tmp/gpt.yaml" -n 1 --cluster "$tmp/bad.yaml"
if [ $rc = 2 ] && echo "$out" | grep -q "bad.yaml:3: unknown cluster key 'flops'"; then ok "bad cluster file: exit 2 naming the line and key"
else bad "bad cluster file: rc $rc: $out"; fi
exit $fail
