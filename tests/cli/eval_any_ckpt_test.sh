#!/usr/bin/env bash
# `tessera eval` and `tessera ckpt export` take any checkpoint on one process, with the job's own
# config and no overrides: a small GPT trained 3 steps on 2 ranks under TP2 (semi_auto_parallel),
# a 2-stage pipeline and ZeRO-1 (data_parallel, optimizer_shard 1), each saving a sliced folder.
# For each: `eval CONFIG --checkpoint DIR` on one process falls back to stand_alone (one note line)
# and gives the figures of the job's own evaluation, of eval of the merged whole file, and of eval
# of the folder under mpirun -n 2 (printed once, by rank 0); `ckpt export DIR` is byte for byte
# the export of the merged file.
# Usage: eval_any_ckpt_test.sh path/to/tessera
set -u
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
fail=0
. "$(dirname "$0")/lib.sh"
mpi_job 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
cat /usr/share/common-licenses/GPL-3 > input.txt 2>/dev/null || seq 1 20000 > input.txt
base() {
  cat <<YAML
model: {name: gpt, n_layer: 2, n_head: 2, n_embd: 16, block_size: 8, vocab_size: 256, tie_weights: true}
data: {name: text, path: $tmp/input.txt, seq_len: 8, val_fraction: 0.05, transforms: []}
train: {steps: 3, batch_size: 4, eval_every: -1, log_every: 1, eval_batch_size: 4, seed: $1}
optimizer: {name: adamw, lr: 3.0e-3, schedule: {name: constant}}
log: {progress: lines}
checkpoint: {save_steps: 3}
YAML
}
{ base 5; printf "parallel:\n  mode: semi_auto_parallel\n  full_batch: true\n"; gpt_strategies 1 2; } > tp.yaml
{ base 6; printf "parallel: {mode: data_parallel, pipeline_stages: 2, micro_batches: 2}\n"; } > pp.yaml
{ base 7; printf "parallel: {mode: data_parallel, optimizer_shard: 1}\n"; } > zero.yaml
figures() { sed -n 's/.*loss \([0-9.]*\) *top1 \([0-9.]*%\).*/loss \1 top1 \2/p' | tail -1; }
for k in tp pp zero; do
  train_in 2 $k.yaml ck_$k
  job=$(figures <<<"$out")
  if [ $rc != 0 ] || [ ! -f ck_$k/ckpt-00000003/manifest.json ] || [ -z "$job" ]; then
    bad "$k: the job: rc $rc: $out"; continue
  fi
  run eval $k.yaml --checkpoint ck_$k/ckpt-00000003
  one=$(figures <<<"$out")
  if [ $rc = 0 ] && [ "$one" = "$job" ] && [ "$(grep -c "^tessera: eval: $k.yaml's layout .* is cut for several ranks: evaluating the whole model on this one process" <<<"$out")" = 1 ]; then
    ok "$k: eval of the folder on one process, no overrides: $one (the job's: $job)"
  else bad "$k: eval on one process: rc $rc, '$one' vs the job's '$job': $out"; fi
  "$bin" ckpt merge ck_$k/ckpt-00000003 -o $k.whole.safetensors >/dev/null 2>&1 || bad "$k: merge"
  run eval $k.yaml --checkpoint $k.whole.safetensors
  whole=$(figures <<<"$out")
  [ $rc = 0 ] && [ "$whole" = "$one" ] && ok "$k: = eval of the merged whole file" || bad "$k: merged: rc $rc, '$whole': $out"
  out=$("${mpi[@]}" "$bin" eval $k.yaml --checkpoint ck_$k/ckpt-00000003 2>&1); rc=$?
  both=$(figures <<<"$out")
  if [ $rc = 0 ] && [ "$both" = "$one" ] && [ "$(grep -c "^eval " <<<"$out")" = 1 ]; then ok "$k: = eval under mpirun -n 2 (printed once)"
  else bad "$k: eval under mpirun: rc $rc, '$both': $out"; fi
  run ckpt export ck_$k/ckpt-00000003 -o $k.exp.safetensors
  "$bin" ckpt export $k.whole.safetensors -o $k.exp2.safetensors >/dev/null 2>&1
  if [ $rc = 0 ] && cmp -s $k.exp.safetensors $k.exp2.safetensors; then ok "$k: ckpt export of the folder = export of the merged file"
  else bad "$k: export: rc $rc: $out"; fi
done
# a one-process layout is left alone: no note
run eval tp.yaml --checkpoint tp.whole.safetensors --set parallel.mode=stand_alone --set 'parallel.strategies={}'
[ $rc = 0 ] && ! grep -q "cut for several ranks" <<<"$out" && ok "stand_alone: no fallback note" || bad "stand_alone: $out"
[ $fail = 0 ] && echo "PASS" || echo "FAILED"
exit $fail
