#!/usr/bin/env bash
# The `latest` pointer (docs/checkpoints.md, "The latest pointer"), as DeepSpeed writes it:
#  0. every save of a run writes CHECKPOINT_DIR/latest, one line naming the checkpoint saved last
#     (a whole file; no temporary left); `ckpt inspect|verify|export`, `eval --checkpoint` and
#     `checkpoint.resume` take DIR/latest for it, with a note naming what it resolved to, and give
#     what the explicit path gives;
#  1. keep_max never deletes the checkpoint `latest` names: a run resumed from step 2 in a folder
#     holding steps 1-6 saves step 3, which stays (keep_max 2 keeps 5 and 6 by step, and 3);
#  2. sliced checkpoints (GPT TP2 on 2 ranks, synchronous and checkpoint.async): latest names the
#     folder; verify, merge, inspect and reshard take DIR/latest;
#  3. refusals: a pointer naming a checkpoint that is gone is exit 2 naming both; a file called
#     latest that is not a pointer is not followed; a killed writer's latest.tmp.* is cleaned.
# Usage: ckpt_latest_test.sh path/to/tessera
set -u
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
fail=0
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
idx_split data train 64 8 8
idx_split data t10k 32 8 8
mlp_cfg m.yaml data 6 8 "checkpoint: {save_steps: 1, keep_max: 2}"

# ---- 0. whole files
run train m.yaml --set checkpoint.dir=ck
[ $rc = 0 ] || bad "train: rc $rc: $out"
if [ -f ck/latest ] && [ "$(cat ck/latest)" = "ckpt-00000006.safetensors" ] && [ "$(wc -l < ck/latest)" = 1 ]; then
  ok "ck/latest names the last save: $(cat ck/latest)"
else bad "ck/latest: '$(cat ck/latest 2>&1)'"; fi
ls ck | grep -q tmp && bad "a temporary left in ck: $(ls ck)"
[ "$(ls ck | grep -c safetensors)" = 2 ] || bad "keep_max 2: $(ls ck)"
run ckpt inspect ck/latest
if [ $rc = 0 ] && echo "$out" | grep -q "^checkpoint   ck/ckpt-00000006.safetensors" &&
   echo "$out" | grep -q "tessera: ck/latest: the checkpoint saved last, ck/ckpt-00000006.safetensors"; then
  ok "inspect ck/latest = ck/ckpt-00000006.safetensors, said in one line"
else bad "inspect ck/latest: rc $rc: $out"; fi
run ckpt verify ck/latest
[ $rc = 0 ] && echo "$out" | grep -q "ok: ck/ckpt-00000006.safetensors" && ok "verify ck/latest" || bad "verify: rc $rc: $out"
run ckpt export ck/latest -o exp.safetensors
[ $rc = 0 ] && [ -f exp.safetensors ] && ok "export ck/latest" || bad "export: rc $rc: $out"
e1=$("$bin" eval m.yaml --checkpoint ck/latest 2>/dev/null | sed 's/(.*//; s/^eval [^:]*://')
e2=$("$bin" eval m.yaml --checkpoint ck/ckpt-00000006.safetensors 2>/dev/null | sed 's/(.*//; s/^eval [^:]*://')
[ -n "$e1" ] && [ "$e1" = "$e2" ] && ok "eval ck/latest = eval of the file:$e1" || bad "eval: '$e1' vs '$e2'"

# ---- 1. keep_max spares what latest names
rm -rf ck
run train m.yaml --set checkpoint.dir=ck --set checkpoint.keep_max=0
run train m.yaml --set checkpoint.dir=ck --set checkpoint.resume=ck/ckpt-00000002.safetensors --set train.steps=3 \
  --set checkpoint.strict=false
[ $rc = 0 ] || bad "resumed run: rc $rc: $out"
have=$(ls ck | tr '\n' ' ')
if [ "$have" = "ckpt-00000003.safetensors ckpt-00000005.safetensors ckpt-00000006.safetensors latest " ] &&
   [ "$(cat ck/latest)" = ckpt-00000003.safetensors ]; then
  ok "keep_max 2 kept steps 5, 6 and the one latest names (3): $have"
else bad "after the resumed run: $have (latest: $(cat ck/latest 2>&1))"; fi
run train m.yaml --set checkpoint.dir=ck --set checkpoint.resume=ck/latest --set train.steps=4 --set checkpoint.strict=false
if [ $rc = 0 ] && echo "$out" | grep -q "resumed from ck/ckpt-00000003.safetensors at step 3" &&
   echo "$out" | grep -q "tessera: ck/latest: the checkpoint saved last, ck/ckpt-00000003.safetensors"; then
  ok "checkpoint.resume=ck/latest resumes from step 3"
else bad "resume=ck/latest: rc $rc: $out"; fi
[ "$(cat ck/latest)" = ckpt-00000004.safetensors ] || bad "latest after step 4: $(cat ck/latest)"

# ---- 3. refusals and a killed writer's temporary
echo ckpt-00000099.safetensors > ck/latest
run ckpt inspect ck/latest
if [ $rc = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q "ck/latest names ckpt-00000099.safetensors, which does not exist"; then
  ok "a pointer to nothing: exit 2, one line: $out"
else bad "pointer to nothing: rc $rc: $out"; fi
run eval m.yaml --checkpoint ck/latest
[ $rc = 2 ] && echo "$out" | grep -q "ck/latest names" && ok "eval: the same" || bad "eval of a dangling latest: rc $rc: $out"
run train m.yaml --set checkpoint.dir=ck --set checkpoint.resume=ck/latest
[ $rc = 2 ] && echo "$out" | grep -q "ck/latest names" && ok "resume: the same" || bad "resume of a dangling latest: rc $rc: $out"
cp ck/ckpt-00000004.safetensors ck/latest # a file called latest that is not a pointer: used as it is
run ckpt inspect ck/latest
[ $rc = 0 ] && echo "$out" | grep -q "^checkpoint   ck/latest" && ok "a checkpoint file called latest is read as itself" ||
  bad "latest as a file: rc $rc: $out"
dead=$(sh -c 'echo $$')
echo half > "ck/latest.tmp.$dead.0"
run train m.yaml --set checkpoint.dir=ck --set train.steps=1 --set checkpoint.resume=
[ -e "ck/latest.tmp.$dead.0" ] && bad "a dead writer's latest.tmp left: $(ls ck)" || ok "a dead writer's latest.tmp.* removed at the start"

# ---- 2. sliced folders, synchronous and asynchronous
if command -v mpirun >/dev/null; then
  cat /usr/share/common-licenses/GPL-3 > input.txt 2>/dev/null || seq 1 20000 > input.txt
  { cat <<YAML
model: {name: gpt, n_layer: 1, n_head: 2, n_embd: 16, block_size: 8, vocab_size: 256, tie_weights: true}
data: {name: text, path: $tmp/input.txt, seq_len: 8, val_fraction: 0.05, transforms: []}
train: {steps: 3, batch_size: 4, eval_every: -1, log_every: 1, eval_batch_size: 4, seed: 5}
optimizer: {name: adamw, lr: 2.0e-3, schedule: {name: constant}}
log: {progress: lines}
checkpoint: {save_steps: 1, keep_max: 2}
parallel:
  mode: semi_auto_parallel
  full_batch: true
YAML
    gpt_strategies 1 2; } > tp2.yaml
  for async in false true; do
    train_in 2 tp2.yaml "tp_$async" --set checkpoint.async=$async
    [ $rc = 0 ] || bad "TP2 (async $async): rc $rc: $out"
    [ "$(cat tp_$async/latest 2>&1)" = ckpt-00000003 ] && [ -d tp_$async/ckpt-00000003 ] &&
      ok "TP2 (checkpoint.async $async): latest names the folder ckpt-00000003" ||
      bad "TP2 async $async: latest '$(cat tp_$async/latest 2>&1)', $(ls tp_$async)"
  done
  run ckpt verify tp_true/latest
  [ $rc = 0 ] && echo "$out" | grep -q "ok: tp_true/ckpt-00000003:" && ok "verify tp/latest" || bad "verify sliced: $out"
  run ckpt merge tp_true/latest -o merged.safetensors
  [ $rc = 0 ] && "$bin" ckpt inspect merged.safetensors | grep -q "step         3" && ok "merge tp/latest" ||
    bad "merge sliced: rc $rc: $out"
  run ckpt inspect tp_true/latest
  [ $rc = 0 ] && echo "$out" | grep -q "^checkpoint   tp_true/ckpt-00000003 (sliced" && ok "inspect tp/latest" ||
    bad "inspect sliced: $out"
  run ckpt reshard tp_true/latest -n 1 --set parallel.mode=stand_alone --set 'parallel.strategies={}' -o one
  [ $rc = 0 ] && [ -f one/manifest.json ] && [ ! -e tp_true/one ] && ok "reshard tp/latest" || bad "reshard: rc $rc: $out"
else
  echo "note: no mpirun: the sliced cases skipped"
fi
[ $fail = 0 ] && echo "PASS" || echo "FAILED"
exit $fail
