#!/usr/bin/env bash
# Loss scaling from the command line:
#  0. a run with train.loss_scale fixed writes loss_scale 1024 and overflow 0 in every step record
#     and the scale into its checkpoint (tessera ckpt inspect --json);
#  1. bad loss-scale settings are refused before anything runs, exit 2, one line naming the key:
#     f16 mixed precision without a loss scale, a factor <= 1, a window < 1, a minimum <= 0, a
#     negative value, a dynamic start below its minimum, an unknown mode; no metrics file is left.
# Usage: loss_scale_cli_test.sh path/to/tessera
set -u
bin=$1
fail=0
. "$(dirname "$0")/lib.sh"
mnist_scratch 64 16
mlp_cfg "$tmp/c.yaml" "$tmp/d" 4 16 "checkpoint: {dir: '$tmp/ck', save_last: true}" \
  "log.metrics: '$tmp/m.jsonl'"

# 0. a run with a fixed scale
run train "$tmp/c.yaml" --set train.loss_scale=fixed
[ $rc = 0 ] && ok "fixed loss scale run" || bad "fixed loss scale run: rc $rc: $out"
n=$(grep '"type":"step"' "$tmp/m.jsonl" 2>/dev/null | grep -c '"loss_scale":1024,"overflow":0')
[ "${n:-0}" = 4 ] && ok "loss_scale 1024 and overflow 0 in the 4 step records" || bad "step records with the scale: $n"
ck=$(ls "$tmp"/ck/*.safetensors 2>/dev/null | tail -1)
run ckpt inspect "$ck" --json
echo "$out" | grep -q '"loss_scale":[[:space:]]*1024,' && ok "the checkpoint records the scale" || bad "ckpt inspect: $out"

# 1. refusals: exit 2, one line naming the key, nothing written
refused() { # what expected-text --set...
  local what=$1 want=$2; shift 2
  rm -f "$tmp/m.jsonl"
  local a=() s
  for s in "$@"; do a+=(--set "$s"); done
  run train "$tmp/c.yaml" "${a[@]}"
  if [ $rc = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -qF -- "$want" && [ ! -e "$tmp/m.jsonl" ]; then
    ok "$what: $out"
  else bad "$what: rc $rc, expected one line with '$want': $out"; fi
}
refused "f16 without a loss scale" "train.loss_scale: none is refused with train.amp_level O2 and train.amp_dtype f16" \
  train.amp_level=O2 train.amp_dtype=f16 train.loss_scale=none
refused "factor 1" "train.loss_scale_factor: 1 is out of range (expected 1 < value" train.loss_scale=dynamic \
  train.loss_scale_factor=1
refused "window 0" "train.loss_scale_window: 0 is out of range" train.loss_scale_window=0
refused "minimum 0" "train.loss_scale_min: 0 is out of range" train.loss_scale_min=0
refused "negative value" "train.loss_scale_value: -4 is out of range" train.loss_scale=fixed train.loss_scale_value=-4
refused "start below the minimum" "train.loss_scale_value (0.5) is below train.loss_scale_min (1)" \
  train.loss_scale=dynamic train.loss_scale_value=0.5
refused "unknown mode" "train.loss_scale: unknown value 'static'" train.loss_scale=static
exit $fail
