#!/usr/bin/env bash
# A damaged manifest is refused in one whole line naming the manifest once (issue 33): a file entry outside its
# folder ('../A/rank00000.safetensors'), a piece whose box lies at 2^52 in a tensor of 16 rows, a bad dtype and
# a tensor listed twice, each through verify, inspect, merge and export: exit 1, one line, the manifest's path
# once, the reason whole.
# Usage: ckpt_manifest_msg_test.sh path/to/tessera
set -u
bin=$1
fail=0
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v python3 >/dev/null || { echo "SKIP: no python3 to edit the manifests"; exit 77; }
idx_split "$tmp/d" train 32 28 28
idx_split "$tmp/d" t10k 16 28 28
mlp_cfg "$tmp/c.yaml" "$tmp/d" 2 16 "checkpoint: {dir: '$tmp/ck', save_steps: 2, format: sliced}"
run train "$tmp/c.yaml"
[ $rc = 0 ] && [ -f "$tmp/ck/ckpt-00000002/manifest.json" ] || { bad "sliced run: rc $rc: $out"; exit 1; }
for k in A outside huge dtype twice; do cp -r "$tmp/ck/ckpt-00000002" "$tmp/$k"; done
python3 - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
def edit(d, f):
    p = t + "/" + d + "/manifest.json"
    m = json.load(open(p)); f(m); json.dump(m, open(p, "w"))
def outside(m):
    m["files"][0]["name"] = "../A/rank00000.safetensors"
    for x in m["tensors"]:
        for p in x["pieces"]: p["file"] = "../A/rank00000.safetensors"
def huge(m):
    p = m["tensors"][0]["pieces"][0]
    p["offset"] = [2**52, 0]; p["box"] = [1, 1]
def dtype(m): m["tensors"][0]["dtype"] = "F99"
def twice(m): m["tensors"][1]["name"] = m["tensors"][0]["name"]
edit("outside", outside); edit("huge", huge); edit("dtype", dtype); edit("twice", twice)
PY
check() { # folder reason
  local k=$1 want=$2 c
  for c in verify inspect merge export; do
    case $c in merge|export) run ckpt $c "$tmp/$k" -o "$tmp/$k.$c.safetensors" ;; *) run ckpt $c "$tmp/$k" ;; esac
    local n; n=$(echo "$out" | grep -o "$tmp/$k/manifest.json" | wc -l)
    if [ $rc = 1 ] && [ "$(echo "$out" | wc -l)" = 1 ] && [ "$n" = 1 ] && echo "$out" | grep -qF -- "$want"; then
      ok "$k, ckpt $c: $out"
    else bad "$k, ckpt $c: rc $rc, $n times the manifest's path, expected one line ending '$want': $out"; fi
  done
}
check outside "manifest.json: files[0]: file name '../A/rank00000.safetensors' is not a name in the directory"
check huge "manifest.json: tensor 'param.fc1.weight': piece 0: region: dim 0: the box [4503599627370496, 4503599627370497) leaves the tensor's 16"
check dtype "manifest.json: tensors[0]: "
check twice "manifest.json: tensors[1]: tensor 'param.fc1.weight' added twice"
exit $fail
