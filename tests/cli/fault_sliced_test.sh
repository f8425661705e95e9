#!/usr/bin/env bash
# TESSERA_FAULT kind corrupt_ckpt with sliced checkpoints (issue 33): the fault flips bytes in a rank file of the
# folder saved at that step (the run goes on, exit 0), and that checkpoint no longer verifies, naming the file.
# Usage: fault_sliced_test.sh path/to/tessera
set -u
bin=$1
fail=0
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset TESSERA_RESTART
idx_split "$tmp/d" train 64 28 28
idx_split "$tmp/d" t10k 16 28 28
mlp_cfg "$tmp/c.yaml" "$tmp/d" 4 16 "checkpoint: {dir: '$tmp/ck', save_steps: 1, format: sliced}"
out=$(TESSERA_FAULT="rank:0,step:2,kind:corrupt_ckpt" "$bin" train "$tmp/c.yaml" 2>&1); rc=$?
[ $rc = 0 ] && echo "$out" | grep -q "TESSERA_FAULT: flipped 16 bytes at offset .* of $tmp/ck/ckpt-00000002/rank00000.safetensors" &&
  ok "corrupt_ckpt on a sliced run: $(echo "$out" | grep TESSERA_FAULT)" || bad "corrupt_ckpt on a sliced run: rc $rc: $out"
run ckpt verify "$tmp/ck/ckpt-00000002"
[ $rc = 1 ] && echo "$out" | grep -q "ckpt-00000002/rank00000.safetensors" && ok "the corrupted folder is refused: $out" ||
  bad "verify of the corrupted folder: rc $rc: $out"
run ckpt verify "$tmp/ck/ckpt-00000003"
[ $rc = 0 ] && ok "the next checkpoint verifies" || bad "verify step 3: rc $rc: $out"
exit $fail
