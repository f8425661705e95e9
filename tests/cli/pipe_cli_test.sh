#!/usr/bin/env bash
# Pipeline parallel from the command line (2 ranks under mpirun):
#  0. a GPT job cut into 2 stages trains and reports the per-step bubble in its metrics, and its
#     checkpoint evaluates alone as the job reported; `tessera plan` shows the stages, the
#     schedule drawn, the bubble and the per-stage memory;
#  1. bad input refused before anything runs, one line naming the key, exit 2: a stage left
#     empty, an operator given two stages, stages not dividing the ranks, an interleaved schedule
#     whose micro-batches are not a multiple of the stages, virtual stages without interleaving,
#     micro-batches disagreeing with train.micro_batch_size.
# Usage: pipe_cli_test.sh path/to/tessera
set -u
bin=$1
fail=0
. "$(dirname "$0")/lib.sh"
mpi_job 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk 'BEGIN { srand(3); for (i = 0; i < 20000; i++) printf "%c", substr("etaoin shrdlu\n", int(rand() * 14) + 1, 1) }' \
  > "$tmp/in.txt"
cat > "$tmp/gpt.yaml" <<YAML
model: {name: gpt, n_layer: 4, n_head: 2, n_embd: 32, block_size: 16, vocab_size: 256, tie_weights: true}
data: {name: text, path: '$tmp/in.txt', seq_len: 16, val_fraction: 0.1, transforms: []}
train: {steps: 6, batch_size: 16, seed: 2, eval_every: -1, log_every: 1}
optimizer: {name: adamw, lr: 0.003}
parallel: {mode: data_parallel, pipeline_stages: 2, micro_batches: 4}
checkpoint: {dir: '$tmp/ck', save_last: true}
log: {progress: lines, metrics: '$tmp/m.jsonl'}
YAML

# 0. a job, its metrics and its checkpoint
out=$("${mpi[@]}" "$bin" train "$tmp/gpt.yaml" 2>&1); rc=$?
if [ $rc = 0 ] && echo "$out" | grep -q "pipeline of 2 stages x 1 data_parallel replicas (1f1b, 4 micro-batches)"; then
  ok "2-stage job ran"
else bad "2-stage job: rc $rc: $out"; fi
n=$(grep -c '"bubble_fraction"' "$tmp/m.jsonl" 2>/dev/null)
[ "${n:-0}" -ge 6 ] && ok "bubble in every step record" || bad "bubble in the metrics: $n records"
acc=$(echo "$out" | sed -n 's/.*test accuracy \([0-9.]*\)%.*/\1/p')
ck=$(ls -d "$tmp"/ck/ckpt-* 2>/dev/null | tail -1) # a pipeline saves sliced checkpoints (folders)
run eval "$tmp/gpt.yaml" --checkpoint "$ck" --set parallel.pipeline_stages=1 --set parallel.micro_batches=0
if [ $rc = 0 ] && echo "$out" | grep -q "top1 $acc%"; then ok "checkpoint evaluates alone as the job reported ($acc%)"
else bad "eval of $ck: rc $rc, expected top1 $acc%: $out"; fi
run plan "$tmp/gpt.yaml" -n 2
if [ $rc = 0 ] && echo "$out" | grep -q "pipeline: 2 stages x 1" && echo "$out" | grep -q "^stage 1 " &&
   echo "$out" | grep -q "bubble 20.0% of the step" && echo "$out" | grep -q "activation sets in flight"; then
  ok "plan shows the stages, the schedule and the bubble"
else bad "plan: rc $rc: $out"; fi

# 1. refusals: exit 2, one line, the key named, before step 1
refuse() { # what key extra-sets...
  local what=$1 key=$2; shift 2
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  out=$("${mpi[@]}" "$bin" train "$tmp/gpt.yaml" "${sets[@]}" 2>&1); rc=$?
  if [ $rc != 0 ] && echo "$out" | grep -q "$key" && ! echo "$out" | grep -q "^step 1/"; then ok "$what refused"
  else bad "$what: rc $rc: $out"; fi
  mine=$(echo "$out" | grep "^tessera:" | head -1)
  [ -z "$mine" ] || [ "$(echo "$mine" | wc -l)" = 1 ] || bad "$what: more than one error line"
}
refuse "a stage left empty" "parallel.stages" "parallel.stages={transformer: 0}"
refuse "an operator given two stages" "assigned twice" "parallel.stages={transformer.h.0: 0, transformer.h.*: 1}"
refuse "3 stages on 2 ranks" "parallel.pipeline_stages" "parallel.pipeline_stages=3"
refuse "interleaved with M not a multiple of P" "parallel.micro_batches" "parallel.pipeline_schedule=interleaved_1f1b" \
  "parallel.virtual_stages=2" "parallel.micro_batches=3" "train.batch_size=15"
refuse "virtual stages without interleaving" "parallel.virtual_stages" "parallel.virtual_stages=2"
refuse "micro-batches disagreeing" "disagree" "train.micro_batch_size=8"
run train "$tmp/gpt.yaml" --set parallel.pipeline_stages=2
if [ $rc = 2 ] && echo "$out" | grep -q "parallel.pipeline_stages"; then ok "one process refused with exit 2"
else bad "one process: rc $rc: $out"; fi
exit $fail
