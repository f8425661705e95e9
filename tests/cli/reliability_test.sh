#!/usr/bin/env bash
# Bad inputs that used to give wrong numbers with exit 0, lost output or a misleading summary
# (issue: adversarial testing): each case fails loudly now, naming what is at fault.
#  1. a test split whose images differ in size from the training split (IDX 20x20 vs 28x28)
#  2. test transforms that change the size (resize in data.test_transforms only)
#  3. a checkpoint whose parameters are not finite: evaluation counts them wrong, says so
#  4. an impossible position (negative step) in a checkpoint header, on resume
#  5. metrics written to a full disk (/dev/full): exit 1 naming the file
#  6. log.plot without log.metrics: refused
#  7. no "done:" summary before a runtime error
#  8. tessera plan for 102,400 devices ends (linear in the device count: 0.3 s; quadratic took minutes)
# Usage: reliability_test.sh path/to/tessera
set -u
bin=$1
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

idx_split "$tmp/same" train 128 28 28
idx_split "$tmp/same" t10k 64 28 28
idx_split "$tmp/small" train 128 28 28
idx_split "$tmp/small" t10k 64 20 20

cfg() { mlp_cfg "$1" "$2" 4 32 "${@:3}"; } # file data_dir [extra yaml lines]

# 1. test images of another size than the training images
cfg "$tmp/small.yaml" "$tmp/small"
run train "$tmp/small.yaml"
if [ "$rc" = 1 ] && grep -q "test split: sample 0 .* is (1,20,20) f32 .*built for samples of (1,28,28) f32" <<<"$out" &&
   ! grep -q "^done:" <<<"$out" && [ "$(grep -c '^tessera:' <<<"$out")" = 1 ]; then
  ok "test split of 20x20 vs training 28x28 -> exit 1: $(grep '^tessera:' <<<"$out")"
else bad "test split of another size: exit $rc: $out"; fi

# 2. test transforms that change the size
cfg "$tmp/resize.yaml" "$tmp/same"
sed -i "s|^  transforms: \[|  test_transforms: [{name: resize, size: 24}, {name: to_float, scale: 0.00392156862745098}, hwc_to_chw]\n  transforms: [|" "$tmp/resize.yaml"
run train "$tmp/resize.yaml"
if [ "$rc" = 1 ] && grep -q "test split: sample 0 .*(1,24,24) f32.*(1,28,28) f32" <<<"$out" && ! grep -q "^done:" <<<"$out"; then
  ok "resize in test_transforms only -> exit 1"
else bad "resize in test_transforms only: exit $rc: $out"; fi

# a clean run with checkpoints, for the forged ones below
cfg "$tmp/ok.yaml" "$tmp/same" "checkpoint: {dir: $tmp/ck_ok, save_steps: 12}"
run train "$tmp/ok.yaml" --set train.steps=12
ck=$(ls "$tmp"/ck_ok/*.safetensors 2>/dev/null | tail -1)
[ "$rc" = 0 ] && [ -n "$ck" ] || { bad "the clean run failed: exit $rc: $out"; exit 1; }
hlen=$(od -An -tu8 -N8 "$ck" | tr -d ' ')
size=$(stat -c %s "$ck")

# 3. non-finite parameters: every data byte 0xff (NaN), the checksum key renamed so it is not checked
cp "$ck" "$tmp/nan.safetensors"
perl -0777 -pi -e 's/"tessera\.crc32"/"tessera.crc3x"/' "$tmp/nan.safetensors"
head -c $((size - 8 - hlen)) /dev/zero | tr '\000' '\377' |
  dd of="$tmp/nan.safetensors" bs=65536 seek=$((8 + hlen)) oflag=seek_bytes conv=notrunc status=none
run eval "$tmp/ok.yaml" --checkpoint "$tmp/nan.safetensors"
if [ "$rc" = 0 ] && grep -q "top1 0.00%" <<<"$out" && grep -qi "non-finite logits" <<<"$out"; then
  ok "NaN parameters evaluate as wrong, with a warning: $(grep -i 'non-finite' <<<"$out" | head -1)"
else bad "non-finite logits: exit $rc: $out"; fi

# 4. an impossible position (negative step) in the header, on resume; same length, checksum intact
cp "$ck" "$tmp/neg.safetensors"
perl -0777 -pi -e 's/("tessera\.step":\s*")12"/${1}-2"/' "$tmp/neg.safetensors"
if grep -aq '"tessera.step": *"-2"' "$tmp/neg.safetensors"; then
  run train "$tmp/ok.yaml" --set train.steps=16 --set checkpoint.resume="$tmp/neg.safetensors"
  if [ "$rc" != 0 ] && grep -q "neg.safetensors: impossible position in the header: step -2" <<<"$out" &&
     [ "$(grep -c '^tessera:' <<<"$out")" = 1 ]; then
    ok "a negative step in the header is refused on resume: $(grep '^tessera:' <<<"$out")"
  else bad "negative step: exit $rc: $out"; fi
else bad "could not forge the step in $ck"; fi

# 5. metrics to a full disk
if [ -w /dev/full ]; then
  run train "$tmp/ok.yaml" --set log.metrics=/dev/full --set checkpoint.save_steps=0
  if [ "$rc" = 1 ] && grep -q "log.metrics: writing '/dev/full' failed" <<<"$out" && ! grep -q "^done:" <<<"$out"; then
    ok "metrics on a full disk -> exit 1: $(grep '^tessera:' <<<"$out")"
  else bad "metrics on a full disk: exit $rc: $out"; fi
fi

# 6. log.plot without log.metrics
run train "$tmp/ok.yaml" --set log.plot="$tmp/c.png"
if [ "$rc" = 2 ] && grep -q "log.plot: .*set log.metrics" <<<"$out" && [ ! -e "$tmp/c.png" ]; then
  ok "log.plot without log.metrics refused: $out"
else bad "log.plot without log.metrics: exit $rc: $out"; fi
# 8. plan for a cluster of 102,400 devices (a guard against a hang, not a timing: linear takes well under
#    a second in Release, seconds under ASan; the quadratic code took minutes)
here=$(cd "$(dirname "$0")/../.." && pwd)
if [ -r /usr/share/common-licenses/GPL-3 ]; then
  out=$(timeout 90 "$bin" plan "$here/examples/gpt_tp.yaml" -n 102400 --set data.path=/usr/share/common-licenses/GPL-3 2>&1); rc=$?
  if [ "$rc" = 0 ] && grep -q "on 102400 devices" <<<"$out" && grep -q "activations (step)" <<<"$out"; then
    ok "tessera plan -n 102400 ends: $(grep '  parameters' <<<"$out" | tr -s ' ')"
  else bad "tessera plan -n 102400: exit $rc: $(tail -3 <<<"$out")"; fi
  run plan "$here/examples/gpt_tp.yaml" -n 1048577 --set data.path=/usr/share/common-licenses/GPL-3
  [ "$rc" = 2 ] && grep -q "from 0 to 1048576" <<<"$out" && ok "-n 1048577 refused: $out" || bad "-n 1048577: exit $rc: $out"
fi
exit $fail
