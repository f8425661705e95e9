#!/usr/bin/env bash
# A model that does not fit (issue 14): a memory budget (train.max_memory_mb) that plain
# data_parallel on 2 ranks exceeds is refused before step 1 (exit 2, one line naming the key, the
# need, the budget and the settings that cut it), `tessera plan` says it would not fit (exit 2),
# and the same budget trains under parallel.optimizer_shard 2 + model.recompute full. The run
# header's memory/rank line and the metrics' end record carry the figures `tessera plan` predicts.
# Also: the alias parallel.enable_parallel_optimizer and model.recompute_layers without
# model.recompute from the command line.
# Usage: memory_cli_test.sh path/to/tessera
set -u
bin=$1
fail=0
. "$(dirname "$0")/lib.sh"
mpi_job 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq 1 400); do echo "line $i: the quick brown fox jumps over the lazy dog $((i * 7))."; done > "$tmp/input.txt"
cat > "$tmp/gpt.yaml" <<YAML
model: {name: gpt, n_layer: 2, n_head: 4, n_embd: 128, vocab_size: 256, dropout: 0.1}
data: {name: text, path: '$tmp/input.txt', seq_len: 64, val_fraction: 0.1, transforms: [], num_workers: 1}
train: {steps: 2, batch_size: 16, micro_batch_size: 8, eval_batch_size: 8, seed: 3, eval_every: -1, log_every: 1}
optimizer: {name: adamw, lr: 0.001}
parallel: {mode: data_parallel, optimizer_shard_threshold_kb: 0}
log: {progress: lines, metrics: '$tmp/m.jsonl'}
YAML
small=(--set parallel.optimizer_shard=2 --set model.recompute=full)

# bytes of a "  total   12.34 MiB" line of `tessera plan`
total_bytes() {
  awk '$1 == "total" { v = $2; u = $3; m = (u == "KiB") ? 1024 : (u == "MiB") ? 1048576 : (u == "GiB") ? 1073741824 : 1;
       printf "%.0f\n", v * m }' <<<"$1"
}
run plan "$tmp/gpt.yaml" -n 2; plain_out=$out
run plan "$tmp/gpt.yaml" -n 2 "${small[@]}"; small_out=$out
plain=$(total_bytes "$plain_out"); small_b=$(total_bytes "$small_out")
if [ -n "$plain" ] && [ -n "$small_b" ] && [ "$small_b" -lt "$plain" ]; then
  ok "plan: plain data_parallel needs $plain bytes per rank, optimizer_shard 2 + recompute full $small_b"
else bad "plan totals: plain '$plain', sharded + recompute '$small_b': $plain_out"; fi
# (to 3 decimals, written as the messages write it: %g, no trailing zeros)
budget=$(awk -v a="$plain" -v b="$small_b" 'BEGIN { printf "%.3f", (a + b) / 2 / 1048576 }')
budget=$(awk -v b="$budget" 'BEGIN { print b + 0 }')
budget_b=$(awk -v m="$budget" 'BEGIN { printf "%.0f", m * 1048576 }')

# tessera plan enforces the budget: the report, "does NOT fit", exit 2
run plan "$tmp/gpt.yaml" -n 2 --set train.max_memory_mb="$budget"
if [ "$rc" = 2 ] && grep -q "train.max_memory_mb .*does NOT fit" <<<"$out" && grep -q "optimizer_state_bytes" <<<"$out" &&
   grep -q "tessera: train.max_memory_mb: $budget MiB per rank is less than" <<<"$out"; then
  ok "plan: a budget of $budget MiB does not fit plain data_parallel (exit 2)"
else bad "plan with budget $budget -> exit $rc: $out"; fi
run plan "$tmp/gpt.yaml" -n 2 --set train.max_memory_mb="$budget" "${small[@]}"
if [ "$rc" = 0 ] && grep -q "train.max_memory_mb .* fits" <<<"$out"; then ok "plan: the budget fits optimizer_shard 2 + recompute"
else bad "plan sharded with budget -> exit $rc: $out"; fi

# the run: refused before step 1 on every rank, one line each, nothing written
rm -f "$tmp/m.jsonl"
out=$(timeout 300 "${mpi[@]}" "$bin" train "$tmp/gpt.yaml" --set train.max_memory_mb="$budget" 2>&1); rc=$?
# every rank refuses with the same line; the first to exit makes mpirun end the other, whose line
# may then be lost: one line of any rank
msg=$(grep -m1 "rank [01] of 2\] train.max_memory_mb" <<<"$out")
if [ "$rc" = 2 ] && ! grep -q "^step " <<<"$out" && [ ! -e "$tmp/m.jsonl" ] && [ "$(wc -l <<<"$msg")" = 1 ] &&
   grep -q "on the largest rank (params .*, grads .*, optimizer .*, activations .*, total .*); settings that cut it: parallel.optimizer_shard: 1 or 2 (the optimizer state, .* split over the 2 ranks); model.recompute: full or selective" <<<"$msg"; then
  ok "train: plain data_parallel refused before step 1 (exit 2): ${msg#*] }"
else bad "train with budget $budget -> exit $rc: $out"; fi

# ...and the same budget trains under optimizer_shard 2 + recompute full
out=$(timeout 300 "${mpi[@]}" "$bin" train "$tmp/gpt.yaml" --set train.max_memory_mb="$budget" "${small[@]}" 2>&1); rc=$?
end=$(grep '"type":"end"' "$tmp/m.jsonl" 2>/dev/null)
tot=$(sed -n 's/.*"memory_total_bytes":\([0-9]*\).*/\1/p' <<<"$end" | head -1)
if [ "$rc" = 0 ] && grep -q "^memory/rank (rank 0): params .*, grads .*, optimizer .*, activations .* (+ eval .*), total" <<<"$out" &&
   grep -q "^step 2/2" <<<"$out" && [ -n "$tot" ] && [ "$tot" -le "$budget_b" ] &&
   awk -v a="$tot" -v b="$small_b" 'BEGIN { exit !(a - b < 0.01 * b && b - a < 0.01 * b) }' &&
   grep -q '"memory_max_over_ranks":{"ranks":2' <<<"$end" && grep -q '"peak_rss_bytes":[1-9]' <<<"$end"; then
  ok "train: optimizer_shard 2 + recompute full within $budget MiB (measured $tot bytes, plan said $small_b to its 2 decimals)"
else bad "train sharded with budget -> exit $rc (total '$tot', budget $budget_b, predicted $small_b): $out $end"; fi
# parameter sharding: a budget between stage 3's and stage 2's totals (both with recompute full)
# refuses stage 2 and trains under optimizer_shard 3, measured within it (buckets of 0.25 MiB:
# stage 3 gathers one bucket at a time into two slots, so the model must span several)
z3=(--set parallel.optimizer_shard=3 --set model.recompute=full --set parallel.bucket_size_mb=0.25)
run plan "$tmp/gpt.yaml" -n 2 "${z3[@]}"; z3_b=$(total_bytes "$out")
if [ -n "$z3_b" ] && [ "$z3_b" -lt "$small_b" ]; then
  b3=$(awk -v a="$small_b" -v b="$z3_b" 'BEGIN { printf "%.3f", (a + b) / 2 / 1048576 }')
  b3_b=$(awk -v m="$b3" 'BEGIN { printf "%.0f", m * 1048576 }')
  out=$(timeout 300 "${mpi[@]}" "$bin" train "$tmp/gpt.yaml" --set train.max_memory_mb="$b3" "${small[@]}" 2>&1); rc=$?
  if [ "$rc" = 2 ] && grep -q "train.max_memory_mb" <<<"$out" && ! grep -q "^step " <<<"$out"; then
    ok "train: optimizer_shard 2 + recompute refused under $b3 MiB"
  else bad "stage 2 under $b3 MiB -> exit $rc: $out"; fi
  rm -f "$tmp/m.jsonl"
  out=$(timeout 300 "${mpi[@]}" "$bin" train "$tmp/gpt.yaml" --set train.max_memory_mb="$b3" "${z3[@]}" 2>&1); rc=$?
  tot=$(sed -n 's/.*"memory_total_bytes":\([0-9]*\).*/\1/p' "$tmp/m.jsonl" 2>/dev/null | head -1)
  if [ "$rc" = 0 ] && grep -q "^step 2/2" <<<"$out" && [ -n "$tot" ] && [ "$tot" -le "$b3_b" ]; then
    ok "train: optimizer_shard 3 + recompute full within $b3 MiB (measured $tot bytes, plan said $z3_b)"
  else bad "stage 3 under $b3 MiB -> exit $rc (total '$tot'): $out"; fi
else bad "plan: optimizer_shard 3 + recompute full needs '$z3_b' bytes, not below stage 2's $small_b"; fi

# the alias, MindSpore's enable_parallel_optimizer, and its disagreement with optimizer_shard
run plan "$tmp/gpt.yaml" -n 2 --set parallel.enable_parallel_optimizer=true
if [ "$rc" = 0 ] && grep -q "sharded over the 2 ranks (optimizer_shard 1)" <<<"$out"; then ok "plan: enable_parallel_optimizer: true = optimizer_shard 1"
else bad "alias -> exit $rc: $out"; fi
run plan "$tmp/gpt.yaml" -n 2 --set parallel.enable_parallel_optimizer=false --set parallel.optimizer_shard=1
if [ "$rc" = 2 ] && grep -q "parallel.enable_parallel_optimizer: false disagrees with parallel.optimizer_shard: 1" <<<"$out"; then
  ok "alias disagreeing with optimizer_shard: exit 2 naming both"
else bad "alias disagreement -> exit $rc: $out"; fi
# recompute patterns without recompute
run train "$tmp/gpt.yaml" --set parallel.mode=stand_alone --set 'model.recompute_layers=[transformer.h.*]'
if [ "$rc" = 2 ] && grep -q "model.recompute_layers is given .* but model.recompute is none" <<<"$out"; then
  ok "model.recompute_layers without model.recompute: exit 2"
else bad "recompute_layers alone -> exit $rc: $out"; fi
exit $fail
