#!/usr/bin/env bash
# A file that does not exist, in every subcommand: exit 2 (a bad command line or configuration),
# one line naming the path, nothing written. The config of train/eval/plan/profile/calibrate/
# launch, the checkpoint of eval, checkpoint.resume and every `ckpt` subcommand (and ckpt
# reshard's --config), a folder without its manifest, the input of `data convert` and `data
# inspect`, plot's metrics file, plan's --cluster file, launch's --hostfile and --rank-table, and
# paths in the config (data.path, parallel.strategy_ckpt_load_file).
# Usage: missing_file_test.sh path/to/tessera
set -u
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
fail=0
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
idx_split data train 32 8 8
idx_split data t10k 16 8 8
mlp_cfg m.yaml data 2 8
no=$tmp/gone # never created

# missing WHAT -- ARGS...: exit 2, exactly one line, naming WHAT; nothing new in the folder
missing() {
  local what=$1; shift 2
  local before after
  before=$(ls -A | sort | tr '\n' ' ')
  run "$@"
  after=$(ls -A | sort | tr '\n' ' ')
  if [ "$rc" = 2 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && grep -qF -- "$what" <<<"$out" &&
     [ "$before" = "$after" ]; then
    ok "$* -> 2: $out"
  else
    bad "$*: rc $rc (want 2, one line naming $what)${after:+; files: $after}: $out"
  fi
}

missing "$no.yaml" -- train "$no.yaml"
missing "$no.yaml" -- eval "$no.yaml" --checkpoint x.safetensors
missing "$no.safetensors" -- eval m.yaml --checkpoint "$no.safetensors"
missing "$no/ckpt-00000001" -- eval m.yaml --checkpoint "$no/ckpt-00000001"
missing "$no.yaml" -- plan "$no.yaml" -n 2
missing "$no.yaml" -- profile "$no.yaml"
missing "$no.yaml" -- calibrate "$no.yaml"
missing "$no.safetensors" -- train m.yaml --set checkpoint.resume="$no.safetensors"
missing "$no/ckpt-00000001" -- train m.yaml --set checkpoint.resume="$no/ckpt-00000001"
missing "$no/fm" -- train m.yaml --set data.path="$no/fm"
missing "$no/fm" -- profile m.yaml --set data.path="$no/fm"
missing "$no.json" -- train m.yaml --set parallel.strategy_ckpt_load_file="$no.json"
for sub in inspect verify; do
  missing "$no" -- ckpt $sub "$no"
done
missing "$no" -- ckpt export "$no" -o out.safetensors
missing "$no" -- ckpt merge "$no" -o out.safetensors
missing "$no" -- ckpt reshard "$no" -n 2 -o out
mkdir half # a folder without its manifest (a save that did not finish)
missing "half: no manifest.json" -- ckpt inspect half
missing "half: no manifest.json" -- ckpt reshard half -n 2 -o out
missing "half: cannot open the checkpoint: is a directory without a manifest.json" -- eval m.yaml --checkpoint half
rmdir half
run train m.yaml --set checkpoint.dir=ck --set checkpoint.save_steps=2
[ $rc = 0 ] || bad "train: rc $rc: $out"
missing "$no.yaml" -- ckpt reshard ck/ckpt-00000002.safetensors -n 2 --config "$no.yaml" -o out
missing "$no.tsr" -- data inspect "$no.tsr"
missing "$no" -- data convert --source cifar10 --input "$no" --output out/c --shards 1
missing "$no.txt" -- data convert --source text --input "$no.txt" --output out/t --shards 1 --seq-len 8
missing "$no" -- data convert --source mnist --input "$no" --output out/m --shards 1
missing "$no.jsonl" -- plot "$no.jsonl" -o out.png
missing "$no.yaml" -- plan m.yaml -n 2 --set parallel.mode=data_parallel --cluster "$no.yaml"
missing "$no.hosts" -- launch -n 2 --hostfile "$no.hosts" -- train m.yaml
missing "$no.json" -- launch --rank-table "$no.json" -- train m.yaml
if command -v mpirun >/dev/null; then
  missing "$no.yaml" -- launch -n 1 -- train "$no.yaml"
else echo "note: no mpirun: launch -- train skipped"; fi
[ $fail = 0 ] && echo "PASS" || echo "FAILED"
exit $fail
