#!/usr/bin/env bash
# Bad inputs found by adversarial testing (second round): each fails at once, in one line,
# naming what is at fault.
#  1. a 200k-deep YAML document: refused while parsing (depth limit), in well under a second
#  2. one key given twice however spelled (nested, dotted, mixed); --set may still replace it
#  3. a --set value with a newline: one line, with the reason
#  4. a failing transform is named as written (data.transforms[i] (name)); a sample of another
#     shape names its file
#  8. data.path of the wrong kind (a file where a folder is read, and the reverse)
# Usage: reliability2_test.sh path/to/tessera
set -u
bin=$1
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
one_line() { [ "$(grep -c '^tessera:' <<<"$out")" = 1 ] && [ "$(wc -l <<<"$out")" = 1 ]; }

idx_split "$tmp/same" train 64 28 28
idx_split "$tmp/same" t10k 32 28 28
idx_split "$tmp/small" train 64 28 28
idx_split "$tmp/small" t10k 32 20 20

cfg() { mlp_cfg "$1" "$2" 2 16 "${@:3}"; } # file data_dir [extra yaml lines]

# 1. deeply nested YAML: 200k levels of flow sequences (400 KB)
{ printf 'model: '; head -c 200000 /dev/zero | tr '\000' '['; head -c 200000 /dev/zero | tr '\000' ']'; echo; } > "$tmp/deep.yaml"
start=$(date +%s%N)
out=$(timeout 5 "$bin" train "$tmp/deep.yaml" 2>&1); rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
if [ "$rc" = 2 ] && grep -q "deep.yaml:1: nested more than 64 levels deep" <<<"$out" && one_line && [ "$ms" -lt 2000 ]; then
  ok "200k-deep YAML refused in ${ms} ms: $out"
else bad "deep YAML: exit $rc after ${ms} ms: $out"; fi
# block style, each level on its own line: the line is named
{ for ((i = 0; i < 70; i++)); do printf "%*sa:\n" $((2 * i)) ''; done; } > "$tmp/deep2.yaml"
run train "$tmp/deep2.yaml"
if [ "$rc" = 2 ] && grep -q "deep2.yaml:65: nested more than 64 levels deep" <<<"$out" && one_line; then
  ok "block-nested YAML refused at its line: $out"
else bad "block-nested YAML: exit $rc: $out"; fi
# a config file beyond 1 MiB (a comment), refused before it is read
cfg "$tmp/big.yaml" "$tmp/same"
head -c 1100000 /dev/zero | tr '\000' '#' >> "$tmp/big.yaml"
run train "$tmp/big.yaml"
if [ "$rc" = 2 ] && grep -q "big.yaml: .* bytes, more than a config may have" <<<"$out" && one_line; then
  ok "a config of more than 1 MiB refused: $out"
else bad "big config: exit $rc: $out"; fi

# 2. duplicate keys
cfg "$tmp/dup1.yaml" "$tmp/same" "optimizer.lr: 0.1"
run train "$tmp/dup1.yaml"
if [ "$rc" = 2 ] && grep -q "dup1.yaml:9:1: duplicate key 'optimizer.lr' (first at line 7)" <<<"$out" && one_line; then
  ok "nested then dotted: $out"
else bad "nested then dotted: exit $rc: $out"; fi
printf 'optimizer.lr: 0.1\noptimizer: {name: sgd, lr: 0.2}\n' > "$tmp/dup2.yaml"
run train "$tmp/dup2.yaml"
if [ "$rc" = 2 ] && grep -q "dup2.yaml:2:24: duplicate key 'optimizer.lr' (first at line 1)" <<<"$out" && one_line; then
  ok "dotted then nested: $out"
else bad "dotted then nested: exit $rc: $out"; fi
printf 'optimizer.lr: 0.1\noptimizer.lr: 0.2\n' > "$tmp/dup3.yaml"
run train "$tmp/dup3.yaml"
if [ "$rc" = 2 ] && grep -q "dup3.yaml:2:1: duplicate key 'optimizer.lr' (first at line 1)" <<<"$out"; then
  ok "dotted twice: $out"
else bad "dotted twice: exit $rc: $out"; fi
printf 'data:\n  transforms: [hwc_to_chw]\ndata.transforms: [hwc_to_chw]\n' > "$tmp/dup4.yaml"
run train "$tmp/dup4.yaml"
if [ "$rc" = 2 ] && grep -q "dup4.yaml:3:1: duplicate key 'data.transforms' (first at line 2)" <<<"$out"; then
  ok "a list key, nested then dotted: $out"
else bad "list key twice: exit $rc: $out"; fi
# --set replaces a file value (and the dotted and nested forms of different keys mix freely)
cfg "$tmp/set.yaml" "$tmp/same" "optimizer.momentum: 0.5"
run train "$tmp/set.yaml" --set optimizer.lr=0.05 --set 'optimizer={lr: 0.02}'
if [ "$rc" = 0 ]; then
  ok "--set replaces a value of the file"
else bad "--set over a file value: exit $rc: $out"; fi

# 3. --set values with control characters
cfg "$tmp/ok.yaml" "$tmp/same"
run train "$tmp/ok.yaml" --set "data.path=$tmp/same
evil"
if [ "$rc" = 2 ] && grep -q "data.path: the value contains a control character (byte 0x0a" <<<"$out" &&
   grep -q 'same\\nevil' <<<"$out" && one_line; then
  ok "a newline in a string --set value refused in one line: $out"
else bad "newline in --set data.path: exit $rc: $out"; fi
run train "$tmp/ok.yaml" --set 'optimizer.name="sg\nd"'
if [ "$rc" = 2 ] && grep -q "unknown value 'sg\\\\nd'" <<<"$out" && one_line; then
  ok "an escaped newline in a YAML value stays one line: $out"
else bad "YAML newline: exit $rc: $out"; fi
run train "$tmp/ok.yaml" --set "$(printf 'opti\tmizer.lr=1')"
if [ "$rc" = 2 ] && grep -q "unknown key 'opti\\\\tmizer.lr'" <<<"$out" && one_line; then
  ok "a tab in a key: $out"
else bad "tab in a key: exit $rc: $out"; fi

# 4. transforms named as written; samples named by their file
cfg "$tmp/crop.yaml" "$tmp/same"
sed -i 's|^  transforms: \[|  transforms: [{name: random_crop, size: 40, padding: 0}, |' "$tmp/crop.yaml"
run train "$tmp/crop.yaml"
if [ "$rc" = 1 ] && grep -q "data.transforms\[0\] (random_crop) on a (28,28,1) u8 sample: crop (40,40) is larger" <<<"$out" && one_line; then
  ok "a failing transform named as written: $out"
else bad "failing transform: exit $rc: $out"; fi
cfg "$tmp/small.yaml" "$tmp/small"
run train "$tmp/small.yaml"
if [ "$rc" = 1 ] && grep -q "test split: sample 0 (.*/small/t10k-images-idx3-ubyte, image 0) (batch 0 of epoch 0) is (1,20,20) f32" <<<"$out"; then
  ok "a sample of another shape names its file: $(grep '^tessera:' <<<"$out")"
else bad "sample of another shape: exit $rc: $out"; fi

# 8. data.path of the wrong kind
run train "$tmp/ok.yaml" --set "data.path=$tmp/same/train-images-idx3-ubyte"
if [ "$rc" = 2 ] && grep -q "data.path: '.*train-images-idx3-ubyte' is a file, but data.name 'fashion_mnist' reads a folder" <<<"$out" && one_line; then
  ok "a file where a folder is read: $out"
else bad "file for a folder: exit $rc: $out"; fi
run train "$tmp/ok.yaml" --set model.name=gpt --set data.name=text --set "data.path=$tmp/same" --set data.transforms=[]
if [ "$rc" = 2 ] && grep -q "data.path: '.*/same' is a folder, but data.name 'text' reads one file" <<<"$out" && one_line; then
  ok "a folder where a file is read: $out"
else bad "folder for a file: exit $rc: $out"; fi
exit $fail
