#!/usr/bin/env bash
# optimizer.param_groups from the command line (the update rules themselves are checked against
# PyTorch's param_groups in tests/optim/test_optim.c): a group's lr_scale and weight_decay reach
# the optimizer on one process, under data parallel with ZeRO-2 (the groups follow the sharded
# segments) and on 2 pipeline stages (an entry matching only the other stage's parameters; a
# parameter in two groups, seen by its stage only, ends both ranks), each
# checked bitwise (losses and the final checkpoint, optimizer state included) against the run
# that sets the same rate or decay for the whole optimizer; a group's own rate differs from the
# run without it; an entry matching nothing and a parameter in two groups are refused (exit 2).
# Usage: param_groups_test.sh path/to/tessera path/to/ckpt_compare
set -u
bin=$1
cmp=$2
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
cd "$tmp" || exit 1
idx_split d train 64 8 8
idx_split d t10k 32 8 8
cat > c.yaml <<YAML
model: {name: mlp, hidden: [16, 8]}
data:
  name: fashion_mnist
  path: d
  transforms: [{name: to_float, scale: 0.00392156862745098}, hwc_to_chw]
train: {steps: 4, batch_size: 16, eval_batch_size: 16, log_every: 1}
optimizer: {name: adamw, lr: 0.01, weight_decay: 0.05}
log: {progress: lines}
YAML

same() { # name a b [ranks]: the runs' losses and final checkpoints bitwise equal
  local a b
  a=$(loss_listing "$2.jsonl"); b=$(loss_listing "$3.jsonl")
  as_file "$(ls -d "$2"/ckpt-00000004* | head -1)" "$2.st"
  as_file "$(ls -d "$3"/ckpt-00000004* | head -1)" "$3.st"
  if [ -n "$a" ] && [ "$a" = "$b" ] && "$cmp" "$2.st" "$3.st" >/dev/null 2>&1; then ok "$1: bitwise (losses $(tr '\n' ' ' <<<"$a" | cut -c1-60)...)"
  else bad "$1: '$a' vs '$b'; $("$cmp" "$2.st" "$3.st" 2>&1 | head -3)"; fi
}
t() { # n name [--set ...]: a run on n ranks, metrics name.jsonl, checkpoints in name/
  local n=$1 nm=$2; shift 2
  train_in "$n" c.yaml "$nm" --set log.metrics="$nm.jsonl" "$@"
  [ "$rc" = 0 ] || bad "$nm -> $rc: $out"
}

# one process: every parameter in a group at half the rate = the optimizer at half the rate
t 1 half --set optimizer.lr=0.005
t 1 g_half --set 'optimizer.param_groups={"*": {lr_scale: 0.5}}'
same "lr_scale 0.5 on every parameter = lr 0.005" half g_half
# a group's weight decay = the optimizer's (biases undecayed both ways: exclude_bias_and_norm)
t 1 wd --set optimizer.weight_decay=0.2
t 1 g_wd --set 'optimizer.param_groups={"fc*": {weight_decay: 0.2}}'
same "weight_decay 0.2 in a group of every parameter = the optimizer's 0.2" wd g_wd
# groups of their own change the run (the rates reach the update)
t 1 base
t 1 g_fc1 --set 'optimizer.param_groups={"fc1.*": {lr_scale: 3}, "fc2.weight": {weight_decay: 0}}'
a=$(loss_listing base.jsonl); b=$(loss_listing g_fc1.jsonl)
if [ -n "$b" ] && [ "$a" != "$b" ] && [ "$(head -1 <<<"$a")" = "$(head -1 <<<"$b")" ]; then ok "own groups: same first loss, then other losses"
else bad "own groups: '$a' vs '$b'"; fi

if command -v mpirun >/dev/null; then
  # data parallel + ZeRO-2: the groups travel with the rank's optimizer segments
  t 2 z_half --set parallel.mode=data_parallel --set parallel.optimizer_shard=2 --set optimizer.lr=0.005
  t 2 z_g --set parallel.mode=data_parallel --set parallel.optimizer_shard=2 \
    --set 'optimizer.param_groups={"*": {lr_scale: 0.5}}'
  same "2 ranks, ZeRO-2: lr_scale 0.5 = lr 0.005" z_half z_g
  # 2 pipeline stages: fc1 on stage 0 only, fc3 on stage 1 only; each entry matches on some rank
  pp=(--set parallel.mode=semi_auto_parallel --set parallel.pipeline_stages=2 --set parallel.micro_batches=2)
  t 2 p_wd "${pp[@]}" --set optimizer.weight_decay=0.2
  t 2 p_g "${pp[@]}" --set 'optimizer.param_groups={"fc1.*": {weight_decay: 0.2}, "fc2.*": {weight_decay: 0.2}, "fc3.*": {weight_decay: 0.2}}'
  same "2 pipeline stages: groups on each stage = the optimizer's decay" p_wd p_g
  # a parameter in two groups seen only by the stage holding it: both ranks end (none waits for the other)
  mpi_job 2
  out=$(timeout 120 "${mpi[@]}" "$bin" train c.yaml "${pp[@]}" --set 'optimizer.param_groups={"fc1.*": {lr_scale: 2}, "fc1.weight": {}}' 2>&1); rc=$?
  if [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -q "parameter 'fc1.weight' matches both 'fc1.\*' and 'fc1.weight'" <<<"$out" &&
     grep -q "optimizer.param_groups: refused on another rank" <<<"$out"; then ok "2 stages: a parameter in two groups on one stage ends both ranks (exit $rc)"
  else bad "two groups on one stage -> $rc: $out"; fi
else
  echo "SKIP (part): mpirun not installed: the 2-rank cases"
fi

# refusals
run train c.yaml --set 'optimizer.param_groups={"fc9.*": {lr_scale: 2}}'
if [ "$rc" = 2 ] && grep -q "c.yaml: optimizer.param_groups: 'fc9.\*' matches no trainable parameter (the model's are named like 'fc1.weight')" <<<"$out"
then ok "an entry matching nothing refused"; else bad "fc9.* -> $rc: $out"; fi
run train c.yaml --set 'optimizer.param_groups={"fc1.*": {lr_scale: 2}, "*.weight": {}}'
if [ "$rc" = 2 ] && grep -q "parameter 'fc1.weight' matches both 'fc1.\*' and '\*.weight' (a parameter is in one group)" <<<"$out"
then ok "a parameter in two groups refused"; else bad "two groups -> $rc: $out"; fi
run train c.yaml --set 'optimizer.param_groups={"fc1.*": {lr: 2}}'
if [ "$rc" = 2 ] && grep -q "unknown field 'lr' (expected lr_scale, weight_decay)" <<<"$out"
then ok "an unknown field refused"; else bad "lr field -> $rc: $out"; fi
exit $fail
