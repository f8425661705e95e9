#!/usr/bin/env bash
# checkpoint.async (docs/checkpoints.md, "Asynchronous saves"): a background writer's checkpoints
# are the synchronous saves' of the same steps, and a run killed while one is in flight resumes
# from the previous complete checkpoint.
#  1. one process, an MLP: whole files (steps 2, 4, 6) of an async run equal the sync run's tensor
#     for tensor and position (ckpt_compare, bitwise); the same with checkpoint.format sliced
#     (folders merged by `tessera ckpt merge`, then compared); the async run's log says the saves
#     were written in the background
#  2. a GPT under TP2 on 2 ranks (sliced, the default there), TP2 x DP2 with optimizer_shard 1 on
#     4 ranks (sliced) and DP2 with format whole (rank 0 writes the gathered copy in the
#     background): every async folder verifies, and every checkpoint equals the sync run's bitwise
#  3. killed in flight: TESSERA_IO_FAULT kills rank 0 at a call of the writer thread during the
#     step-4 save (the trace of an uninterrupted run says which, and that it is on the thread):
#     no step-4 checkpoint exists, resume=auto resumes from step 2, and the final checkpoint
#     equals the uninterrupted run's bitwise (TP2, and one process whole)
#  4. a failed background write (TESSERA_IO_FAULT kind:fail at rank 1's fsync of its step-4 file):
#     the run fails (exit 1) at the next save, every rank's line naming that file; no step-4
#     folder is left, the step-2 checkpoint still verifies
# Usage: ckpt_async_test.sh path/to/tessera path/to/ckpt_compare
set -u
bin=$(readlink -f "$1")
cmp=$(readlink -f "$2")
fail=0
. "$(dirname "$0")/lib.sh"
mpi_job 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
unset TESSERA_IO_FAULT TESSERA_IO_TRACE TESSERA_FAULT
cat /usr/share/common-licenses/GPL-3 > input.txt 2>/dev/null || seq 1 20000 > input.txt
idx_split d train 256 28 28
idx_split d t10k 64 28 28
mlp_cfg mlp.yaml d 6 32 "checkpoint: {save_steps: 2, keep_max: 0}"
gpt() { # d t [extra yaml lines under parallel:]: the small GPT, TP t x DP d
  local d=$1 t=$2; shift 2
  cat <<YAML
model: {name: gpt, n_layer: 2, n_head: 4, n_embd: 32, block_size: 16, vocab_size: 256, tie_weights: true}
data: {name: text, path: input.txt, seq_len: 16, val_fraction: 0.05, transforms: []}
train: {steps: 6, batch_size: 8, eval_every: -1, log_every: 1, eval_batch_size: 8, seed: 5}
optimizer: {name: adamw, lr: 2.0e-3, weight_decay: 0.01, clip_grad_norm: 1.0, schedule: {name: constant}}
log: {progress: lines}
checkpoint: {save_steps: 2, keep_max: 0}
parallel:
  mode: semi_auto_parallel
  full_batch: true
YAML
  gpt_strategies "$d" "$t"
  for l in "$@"; do echo "  $l"; done
}
gpt 1 2 > tp2.yaml
gpt 2 2 "optimizer_shard: 1" > tp2dp2.yaml
# same_ckpts A B STEPS...: every step's checkpoint of A equals B's (bitwise); prints the first difference
same_ckpts() {
  local a=$1 b=$2 s; shift 2
  for s in "$@"; do
    local pa pb
    pa=$(ls -d "$a"/ckpt-0000000"$s"* 2>/dev/null | head -1); pb=$(ls -d "$b"/ckpt-0000000"$s"* 2>/dev/null | head -1)
    [ -n "$pa" ] && [ -n "$pb" ] || { echo "step $s missing in $a or $b"; return 1; }
    [ -d "$pa" ] && { "$bin" ckpt verify "$pa" >/dev/null 2>&1 || { echo "$pa does not verify"; return 1; }; }
    as_file "$pa" x.st && as_file "$pb" y.st || { echo "cannot merge $pa or $pb"; return 1; }
    "$cmp" x.st y.st >/dev/null 2>&1 || { echo "step $s: $("$cmp" x.st y.st 2>&1)"; return 1; }
  done
}

# 1. one process
for fmt in whole sliced; do
  train_in 1 mlp.yaml s1$fmt --set checkpoint.format=$fmt; r1=$rc
  train_in 1 mlp.yaml a1$fmt --set checkpoint.format=$fmt --set checkpoint.async=true
  [ "$r1" = 0 ] && [ "$rc" = 0 ] && grep -q "checkpoint a1$fmt/ckpt-00000004.* (written in the background" <<<"$out" &&
    why=$(same_ckpts s1$fmt a1$fmt 2 4 6) && ok "one process, $fmt: async = sync at steps 2, 4, 6 (bitwise)" ||
    bad "one process, $fmt: exit $r1/$rc: ${why:-}: $out"
done

# 2. several ranks
for job in "2 tp2.yaml sliced" "4 tp2dp2.yaml sliced" "2 mlp.yaml whole"; do
  set -- $job
  extra=(); [ "$2" = mlp.yaml ] && extra=(--set parallel.mode=data_parallel)
  train_in "$1" "$2" s$1$3 "${extra[@]}"; r1=$rc
  train_in "$1" "$2" a$1$3 "${extra[@]}" --set checkpoint.async=true
  kind=$( [ "$3" = sliced ] && echo "folder" || echo "file" )
  [ "$r1" = 0 ] && [ "$rc" = 0 ] && { [ "$3" = whole ] || [ -f a$1$3/ckpt-00000006/manifest.json ]; } &&
    why=$(same_ckpts s$1$3 a$1$3 2 4 6) && ok "$1 ranks, $2 ($3 ${kind}s): async = sync at steps 2, 4, 6 (bitwise)" ||
    bad "$1 ranks, $2 $3: exit $r1/$rc: ${why:-}: $out"
done

# 3. killed while an async save is in flight
for job in "2 tp2.yaml" "1 mlp.yaml"; do
  set -- $job
  rm -f trace.txt
  TESSERA_IO_TRACE=$tmp/trace.txt train_in "$1" "$2" ref$1 --set checkpoint.async=true; r1=$rc
  # rank 0's first call of the writer thread on the step-4 save's files
  line=$(awk '$1 == 0 && $4 == "thread" && $5 ~ /ckpt-00000004/ { print; exit }' trace.txt)
  k=$(awk '{print $2}' <<<"$line")
  [ "$r1" = 0 ] && [ -n "$k" ] || { bad "$2: no writer-thread call found in the trace (exit $r1): $out"; continue; }
  TESSERA_IO_FAULT="call:$k,rank:0" train_in "$1" "$2" k$1 --set checkpoint.async=true; rk=$rc
  left=$(ls k$1 | tr '\n' ' ')
  train_in "$1" "$2" k$1 --set checkpoint.async=true --set checkpoint.resume=auto; rr=$rc
  [ "$rk" != 0 ] && [[ "$left" != *"ckpt-00000004 "* && "$left" != *"ckpt-00000004.safetensors "* ]] &&
    [ "$rr" = 0 ] && grep -q "resumed from k$1/ckpt-00000002.* at step 2" <<<"$out" &&
    why=$(same_ckpts ref$1 k$1 6) &&
    ok "$1 rank(s), $2: killed at call $k ($(awk '{print $3, $4}' <<<"$line"): $(basename "$(awk '{print $5}' <<<"$line")")) of the step-4 save: left '$left', resumed from step 2, final = uninterrupted (bitwise)" ||
    bad "$2 killed in flight at call $k: exit $rk, left '$left', resume exit $rr: ${why:-}: $out"
done

# 4. a failed background write: an error at the next save, naming the file
rm -f trace.txt
TESSERA_IO_TRACE=$tmp/trace.txt train_in 2 tp2.yaml tr2 --set checkpoint.async=true
k=$(awk '$1 == 1 && $3 == "fsync" && $4 == "thread" && $5 ~ /ckpt-00000004.*rank00001/ { print $2; exit }' trace.txt)
TESSERA_IO_FAULT="call:$k,rank:1,kind:fail" train_in 2 tp2.yaml f2 --set checkpoint.async=true
named=$(grep -c "f2/ckpt-00000004.tmp.[0-9]*/rank00001.safetensors: write failed" <<<"$out")
[ -n "$k" ] && [ "$rc" = 1 ] && [ "$named" -ge 2 ] && [ ! -e f2/ckpt-00000004 ] && [ ! -e f2/ckpt-00000006 ] &&
  "$bin" ckpt verify f2/ckpt-00000002 >/dev/null 2>&1 &&
  ok "a failed background write (rank 1's fsync, call $k): exit 1 at the next save, both ranks name the file; no step-4 folder; step 2 verifies" ||
  bad "failed background write at call ${k:-?}: exit $rc, $named lines naming the file: $(ls f2): $out"

exit $fail
