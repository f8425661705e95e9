#!/usr/bin/env bash
# What a new user trips over first (issue 19, "Rough edges"), each as the user meets it:
# `data convert` into a folder that does not exist yet, config errors naming the file and key
# path, a missing data set saying where it comes from, a run's metrics file plotted, TensorBoard
# event files beside it, the progress line's ETA, a one-epoch plot, `plan` under each
# parallel.mode with a fit verdict and without the data file.
# Usage: rough_edges_test.sh path/to/tessera
set -u
bin=$1
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
cd "$tmp" || exit 1
idx_split d train 64 8 8
idx_split d t10k 32 8 8

# data convert creates the folders of --output (the README's own `--output data/fm-train`)
run data convert --source mnist --input d --output data/sub/fm-train --shards 2
if [ "$rc" = 0 ] && [ -f data/sub/fm-train-00000-of-00002.tsr ]; then ok "data convert created data/sub/"
else bad "data convert --output data/sub/fm-train -> $rc: $out"; fi
touch afile
run data convert --source mnist --input d --output afile/fm --shards 2
if [ "$rc" = 1 ] && grep -q "'afile' is not a folder" <<<"$out"; then ok "data convert under a file: $out"
else bad "data convert under a file -> $rc: $out"; fi

# a warm-up longer than the run (issue 31: a run shortened with --set train.steps) is clipped to
# the run, said once naming the file, both key paths and the values; the lr reaches 0.1 * 5/6
mlp_cfg sched.yaml d 6 16 "optimizer: {name: sgd, lr: 0.1, schedule: {name: cosine, warmup_epochs: 3}}"
sed -i '/^optimizer: {name: sgd, lr: 0.01}$/d' sched.yaml
run train sched.yaml
if [ "$rc" = 0 ] && [ "$(grep -c "warning: sched.yaml: optimizer.schedule (cosine): optimizer.schedule.warmup_epochs 3 x 4 steps per epoch = 12 warm-up steps is longer than the run (train.steps 6): the warm-up is clipped to the run's 6 steps" <<<"$out")" = 1 ] &&
   grep -q "^step 6/6 .* lr 0.08333 " <<<"$out"
then ok "warm-up clipped to the run: $(grep warning <<<"$out")"; else bad "warm-up longer than the run -> $rc: $out"; fi

# a missing data set says where it comes from
mlp_cfg miss.yaml nowhere 6 16
run train miss.yaml
if [ "$rc" != 0 ] && grep -q "miss.yaml: data: nowhere/train-images-idx3-ubyte.*dataset-fashion-mnist.*/usr/share/datasets/fashion-mnist" <<<"$out"
then ok "missing Fashion-MNIST: $out"; else bad "missing Fashion-MNIST -> $rc: $out"; fi
run train miss.yaml --set data.name=cifar10 --set 'data.transforms=[]'
if [ "$rc" != 0 ] && grep -q "data_batch_1.bin" <<<"$out"; then ok "missing CIFAR-10: $out"; else bad "missing CIFAR-10 -> $rc: $out"; fi

# a run's metrics file: every line JSON (python3 reads it), plotted; line mode shows the ETA;
# TensorBoard event files written
mlp_cfg run.yaml d 8 16 "log: {progress: lines, metrics: out/m.jsonl, tensorboard: out/tb, plot: out/curves.png}"
sed -i '/^log: {progress: lines}$/d; s/log_every: 1}/log_every: 1, eval_every: 4}/' run.yaml
run train run.yaml
if [ "$rc" = 0 ] && grep -qE "^step 8/8 .*\[00:0[0-9], eta 00:00\]" <<<"$out"; then ok "line mode has the ETA"
else bad "train run.yaml -> $rc (want a line with eta): $out"; fi
if /usr/bin/python3 -c 'import json,sys
for l in open(sys.argv[1]): json.loads(l)' out/m.jsonl; then ok "metrics lines parse as JSON"; else bad "metrics not JSON"; fi
[ -s out/curves.png ] && ok "curves drawn" || bad "no out/curves.png"
ls out/tb/events.out.tfevents.* >/dev/null 2>&1 && ok "event file in out/tb" || bad "no event file in out/tb"

# more than 1,023 gradients: a 128-layer GPT with biases (12 tensors a layer) is planned without
# its data file (`plan` reads only the sequence length), and trains a step
cat > gpt128.yaml <<YAML
model: {name: gpt, n_layer: 128, n_head: 2, n_embd: 16, block_size: 16, vocab_size: 256, bias: true, dropout: 0}
data: {name: text, path: not-here.txt, seq_len: 16, transforms: []}
train: {steps: 1, batch_size: 2, eval_every: -1}
optimizer: {name: adamw, lr: 0.001}
log: {progress: lines}
YAML
run plan gpt128.yaml -n 2 --set parallel.mode=data_parallel
if [ "$rc" = 0 ] && grep -q "plan: gpt on text, data_parallel on 2 devices" <<<"$out"; then ok "128-layer GPT planned without its data file"
else bad "plan gpt128 -> $rc: $(head -c 600 <<<"$out")"; fi
# plan follows parallel.mode and gives a verdict against one device's memory
run plan gpt128.yaml -n 1
if [ "$rc" = 0 ] && grep -q "plan: gpt on text, stand_alone on 1 devices" <<<"$out"; then ok "plan stand_alone"
else bad "plan stand_alone -> $rc: $(head -c 400 <<<"$out")"; fi
run plan gpt128.yaml -n 2
if [ "$rc" = 2 ] && grep -q "stand_alone runs on one device" <<<"$out"; then ok "plan stand_alone -n 2 refused: $(tail -1 <<<"$out")"
else bad "plan stand_alone -n 2 -> $rc: $(tail -c 400 <<<"$out")"; fi
run plan gpt128.yaml -n 2 --set parallel.mode=data_parallel --device-memory 16G
if [ "$rc" = 0 ] && grep -qE "^device memory 16.00 GiB \(--device-memory\): fits: rank 0 needs [0-9.]+ MiB" <<<"$out"; then ok "fits 16G"
else bad "plan --device-memory 16G -> $rc: $(tail -c 400 <<<"$out")"; fi
run plan gpt128.yaml -n 2 --set parallel.mode=data_parallel --device-memory 4M
if [ "$rc" = 2 ] && grep -q "^device memory 4.00 MiB (--device-memory): does NOT fit: rank 0 needs" <<<"$out" &&
   grep -q "^tessera: plan: rank 0's memory does not fit the device" <<<"$out"; then ok "does not fit 4M (exit 2)"
else bad "plan --device-memory 4M -> $rc: $(tail -c 400 <<<"$out")"; fi
run plan gpt128.yaml -n 2 --set parallel.mode=data_parallel --device-memory 4Q
if [ "$rc" = 2 ] && grep -q "device-memory needs a size" <<<"$out"; then ok "bad size refused"; else bad "--device-memory 4Q -> $rc: $out"; fi
head -c 2000 /dev/zero | tr '\0' a > small.txt
run train gpt128.yaml --set data.path=small.txt
if [ "$rc" = 0 ] && grep -q "^done: 1 steps" <<<"$out"; then ok "128-layer GPT trained a step"
else bad "train gpt128 -> $rc: $(tail -c 600 <<<"$out")"; fi

exit $fail
