#!/usr/bin/env bash
# Keys MindSpore users look for (issue 19): data.sampler (distributed | stratified) reaches the
# trainer, parallel.device_num is checked against the world size, and
# parallel.all_reduce_fusion_config cuts the gradient buckets at the given gradient indices while
# the training stays bitwise the same as with size buckets (a bucket's elements are reduced the
# same way whatever bucket they are in). 1 and 2 ranks.
# Usage: mindspore_keys_test.sh path/to/tessera
set -u
bin=$1
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
mpi_job 2
cd "$tmp" || exit 1
idx_split d train 64 8 8
idx_split d t10k 32 8 8
mlp_cfg c.yaml d 6 16 "parallel: {mode: data_parallel}"
losses() { /usr/bin/python3 -c 'import json,sys
print(" ".join(repr(r["loss"]) for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "step"))' "$1"; }

# fusion split points: 3 buckets for [1, 2] on the MLP's 4 gradients, same losses as size buckets
out=$("${mpi[@]}" "$bin" train c.yaml --set log.metrics=size.jsonl 2>&1); rc=$?
[ "$rc" = 0 ] || bad "size buckets -> $rc: $out"
out=$("${mpi[@]}" "$bin" train c.yaml --set log.metrics=split.jsonl --set 'parallel.all_reduce_fusion_config=[1, 2]' 2>&1); rc=$?
if [ "$rc" = 0 ] && grep -q "^gradient buckets: 3, split at gradients \[1, 2\] (parallel.all_reduce_fusion_config)" <<<"$out"
then ok "fusion config: 3 buckets"; else bad "fusion [1, 2] -> $rc: $out"; fi
a=$(losses size.jsonl); b=$(losses split.jsonl)
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "losses bitwise equal with split buckets: $a"; else bad "losses differ: '$a' vs '$b'"; fi
out=$("${mpi[@]}" "$bin" train c.yaml --set 'parallel.all_reduce_fusion_config=[1, 9]' 2>&1); rc=$?
if [ "$rc" = 2 ] && grep -q "c.yaml: parallel.all_reduce_fusion_config\[1\] = 9: split points must increase and lie in 1..3 (the model has 4 gradients" <<<"$out"
then ok "split beyond the gradients refused"; else bad "fusion [1, 9] -> $rc: $out"; fi

# device_num against the world size
out=$("${mpi[@]}" "$bin" train c.yaml --set parallel.device_num=4 2>&1); rc=$?
if [ "$rc" = 2 ] && grep -q "c.yaml: parallel.device_num is 4, but the job has 2 ranks" <<<"$out"; then ok "device_num 4 on 2 ranks refused"
else bad "device_num 4 on 2 ranks -> $rc: $out"; fi
out=$("${mpi[@]}" "$bin" train c.yaml --set parallel.device_num=2 2>&1); rc=$?
[ "$rc" = 0 ] && ok "device_num 2 on 2 ranks runs" || bad "device_num 2 on 2 ranks -> $rc: $out"
out=$("$bin" plan c.yaml --set parallel.device_num=2 2>&1); rc=$?
if [ "$rc" = 0 ] && grep -q "data_parallel on 2 devices" <<<"$out"; then ok "plan takes -n from parallel.device_num"
else bad "plan with device_num 2, no -n -> $rc: $(head -c 300 <<<"$out")"; fi
out=$("$bin" plan c.yaml -n 4 --set parallel.device_num=2 2>&1); rc=$?
if [ "$rc" = 2 ] && grep -q "parallel.device_num is 2" <<<"$out"; then ok "plan -n 4 vs device_num 2 refused"
else bad "plan -n 4 device_num 2 -> $rc: $out"; fi

# data.sampler: stratified reads other batches than distributed (the key reaches the trainer);
# a data set without labels cannot be stratified
out=$("${mpi[@]}" "$bin" train c.yaml --set log.metrics=strat.jsonl --set data.sampler=stratified 2>&1); rc=$?
s=$(losses strat.jsonl)
if [ "$rc" = 0 ] && [ -n "$s" ] && [ "$s" != "$a" ]; then ok "stratified sampler: $s"
else bad "stratified -> $rc, losses '$s' (distributed: '$a'): $out"; fi
head -c 3000 /dev/zero | tr '\0' a > t.txt
cat > gpt.yaml <<YAML
model: {name: gpt, n_layer: 1, n_head: 2, n_embd: 16, block_size: 8, vocab_size: 256, dropout: 0}
data: {name: text, path: t.txt, seq_len: 8, transforms: [], sampler: stratified}
train: {steps: 1, batch_size: 4, eval_every: -1}
optimizer: {name: adamw, lr: 0.001}
log: {progress: lines}
YAML
out=$("$bin" train gpt.yaml 2>&1); rc=$?
if [ "$rc" != 0 ] && grep -qi "stratified" <<<"$out"; then ok "stratified without labels refused: $out"
else bad "stratified on text -> $rc: $(tail -c 300 <<<"$out")"; fi
exit $fail
