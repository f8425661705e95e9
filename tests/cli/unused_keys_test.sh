#!/usr/bin/env bash
# Keys set but unused (issue 31): a key set explicitly to something other than its default that has
# no effect given another key's value is named, with why, in one warning line per run (rank 0's
# only under tessera launch); a key left at or set to its default, or one in use, is not.
# Usage: unused_keys_test.sh path/to/tessera
set -u
bin=$1
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
cd "$tmp" || exit 1
idx_split d train 64 8 8
idx_split d t10k 32 8 8
mlp_cfg c.yaml d 2 16
sed -i 's/^optimizer: .*/optimizer: {name: sgd, lr: 0.01, momentum: 0.5, schedule: {name: cosine, milestones: [2, 4], gamma: 0.5, min_lr: 0.001}}/' c.yaml

run train c.yaml --set checkpoint.dir=a --set train.amp_dtype=f16 --set train.loss_scale_window=10
want="^tessera warning: c.yaml: keys set but unused: optimizer.schedule.milestones (schedule cosine uses none), optimizer.schedule.gamma (schedule cosine has no decay steps), optimizer.momentum (optimizer sgd has none), train.amp_dtype (train.amp_level is O0: no mixed precision), train.loss_scale_window (the loss scale is none, not dynamic)$"
if [ "$rc" = 0 ] && grep -q "$want" <<<"$out" && [ "$(grep -c "keys set but unused" <<<"$out")" = 1 ]; then ok "one line: $(grep unused <<<"$out")"
else bad "unused keys -> $rc: $out"; fi

# the same keys where they are used (multistep with momentum; O1 f16's dynamic scale): nothing said;
# min_lr is then the one unused
run train c.yaml --set checkpoint.dir=b --set optimizer.name=momentum --set optimizer.schedule.name=multistep \
  --set train.amp_level=O1 --set train.amp_dtype=f16 --set train.loss_scale_window=10
if [ "$rc" = 0 ] && grep -q "keys set but unused: optimizer.schedule.min_lr (only cosine decays to it, not multistep)$" <<<"$out"
then ok "used keys not named: $(grep unused <<<"$out")"; else bad "used keys -> $rc: $out"; fi

# keys at their default (gamma 0.1, momentum 0.9) are not named; a config with nothing unused says nothing
sed -i 's/^optimizer: .*/optimizer: {name: adam, lr: 0.01, momentum: 0.9, schedule: {name: cosine, gamma: 0.1}}/' c.yaml
run train c.yaml --set checkpoint.dir=c
if [ "$rc" = 0 ] && ! grep -q "unused" <<<"$out"; then ok "defaults and used keys: nothing said"; else bad "nothing unused -> $rc: $out"; fi

# train.epochs beside train.steps
run train c.yaml --set checkpoint.dir=d --set train.epochs=3
if [ "$rc" = 0 ] && grep -q "keys set but unused: train.epochs (train.steps 2 sets the run's length)$" <<<"$out"
then ok "train.epochs beside train.steps"; else bad "epochs with steps -> $rc: $out"; fi

# one line for the job under tessera launch
if command -v mpirun >/dev/null; then
  export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
  out=$(timeout 120 "$bin" launch -n 2 -- train c.yaml --set checkpoint.dir=e --set parallel.mode=data_parallel \
        --set optimizer.schedule.milestones=[3] 2>&1); rc=$?
  if [ "$rc" = 0 ] && [ "$(grep -c "keys set but unused: optimizer.schedule.milestones" <<<"$out")" = 1 ]; then ok "launch -n 2: one line"
  else bad "launch -n 2 -> $rc: $out"; fi
fi
exit $fail
