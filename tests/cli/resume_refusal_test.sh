#!/usr/bin/env bash
# A resume refused because the checkpoint's training-relevant keys differ (issue 31) names each key
# with both values (at most 8, then how many more) and ends with the override; whole files and
# sliced checkpoints alike; the override resumes.
# Usage: resume_refusal_test.sh path/to/tessera
set -u
bin=$1
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
cd "$tmp" || exit 1
idx_split d train 64 8 8
idx_split d t10k 32 8 8
mlp_cfg c.yaml d 4 16
override='`--set checkpoint.strict=false` resumes anyway'

run train c.yaml --set checkpoint.dir=ck
[ "$rc" = 0 ] && [ -f ck/ckpt-00000004.safetensors ] || bad "the first run -> $rc: $out"
# a run lengthened and its lr changed
run train c.yaml --set checkpoint.dir=ck --set checkpoint.resume=ck/ckpt-00000004.safetensors --set train.steps=20 \
  --set optimizer.lr=0.2
want="^tessera: ck/ckpt-00000004.safetensors: written by another configuration (config hash [0-9a-f]*, this run [0-9a-f]*): its training-relevant keys differ: train.steps: 4 in the checkpoint, 20 now; optimizer.lr: 0.01 in the checkpoint, 0.2 now; $override\$"
if [ "$rc" = 2 ] && grep -q "$want" <<<"$out"; then ok "whole file: $out"; else bad "whole file -> $rc: $out"; fi
# the override resumes (from step 4 to 20)
run train c.yaml --set checkpoint.dir=ck --set checkpoint.resume=ck/ckpt-00000004.safetensors --set train.steps=20 \
  --set optimizer.lr=0.2 --set checkpoint.strict=false
if [ "$rc" = 0 ] && grep -q "resumed from ck/ckpt-00000004.safetensors at step 4" <<<"$out" && grep -q "^step 20/20 " <<<"$out"
then ok "checkpoint.strict=false resumes"; else bad "strict=false -> $rc: $out"; fi

# more than 8 keys: the first 8, then how many more
run train c.yaml --set checkpoint.dir=ck --set checkpoint.resume=ck/ckpt-00000004.safetensors --set train.steps=6 \
  --set optimizer.lr=0.2 --set train.seed=5 --set optimizer.weight_decay=0.001 --set optimizer.eps=1e-6 \
  --set optimizer.schedule.min_lr=0.001 --set optimizer.schedule.gamma=0.5 --set data.shuffle=false \
  --set optimizer.momentum=0.5 --set optimizer.dampening=0.1
n=$(grep -o " in the checkpoint, " <<<"$out" | wc -l)
if [ "$rc" = 2 ] && [ "$n" = 8 ] && grep -q "now; ... and 2 more; $override\$" <<<"$out"; then ok "10 keys: 8 named and 2 more"
else bad "10 keys -> $rc ($n named): $out"; fi

# a sliced checkpoint (checkpoint.resume: auto)
run train c.yaml --set checkpoint.dir=cs --set checkpoint.format=sliced
[ "$rc" = 0 ] && [ -d cs/ckpt-00000004 ] || bad "the sliced run -> $rc: $out"
run train c.yaml --set checkpoint.dir=cs --set checkpoint.format=sliced --set checkpoint.resume=auto --set train.steps=20
want="^tessera: cs/ckpt-00000004: written by another configuration (config hash [0-9a-f]*, this run [0-9a-f]*): its training-relevant keys differ: train.steps: 4 in the checkpoint, 20 now; $override\$"
if [ "$rc" = 2 ] && grep -q "$want" <<<"$out"; then ok "sliced: $out"; else bad "sliced -> $rc: $out"; fi
exit $fail
