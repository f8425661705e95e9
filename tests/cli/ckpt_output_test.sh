#!/usr/bin/env bash
# ckpt merge / reshard / export never write into their own input nor over someone else's files (issue 33):
#  1. an output that is, lies inside or contains the checkpoint read is refused: exit 2, one line naming
#     both, nothing written (the source still verifies, byte for byte the same);
#  2. an existing folder that is not a checkpoint (a user's file in it) is refused and left untouched, with
#     or without --overwrite (no *.tmp.<pid> left beside it); an existing file that is not a checkpoint too;
#  3. an existing checkpoint output is replaced only with --overwrite (merge, reshard, export).
# Usage: ckpt_output_test.sh path/to/tessera
set -u
bin=$1
fail=0
. "$(dirname "$0")/lib.sh"
mnist_scratch 32 16
mlp_cfg "$tmp/c.yaml" "$tmp/d" 2 16 "checkpoint: {dir: '$tmp/ck', save_steps: 2, format: sliced}"
run train "$tmp/c.yaml"
[ $rc = 0 ] || { bad "sliced run: rc $rc: $out"; exit 1; }
src=$tmp/ck/ckpt-00000002
[ -f "$src/manifest.json" ] || { bad "no sliced checkpoint at $src"; exit 1; }
sums() { (cd "$1" && find . -type f | sort | xargs sha256sum); }
before=$(sums "$tmp/ck")

refused() { # what want-text args...: exit 2, one line with the text, naming the output
  local what=$1 want=$2; shift 2
  run "$@"
  if [ $rc = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -qF -- "$want"; then ok "$what: $out"
  else bad "$what: rc $rc, expected one line with '$want': $out"; fi
}
# 1. outputs that are, lie in, or contain the input
refused "merge into a rank file of its source" "lies inside the checkpoint $src" \
  ckpt merge "$src" -o "$src/rank00000.safetensors"
refused "merge onto its source" "is the checkpoint $src" ckpt merge "$src" -o "$src" --overwrite
refused "merge into a new folder inside its source" "lies inside the checkpoint $src" \
  ckpt merge "$src" -o "$src/sub/../new/m.safetensors"
refused "reshard onto its source" "is the checkpoint $src" ckpt reshard "$src" -n 1 -o "$src" --overwrite
refused "reshard into its source" "lies inside the checkpoint $src" ckpt reshard "$src" -n 1 -o "$src/r1"
refused "reshard over the folder holding its source" "contains the checkpoint $src" \
  ckpt reshard "$src" -n 1 -o "$tmp/ck" --overwrite
ln -s "$src" "$tmp/alias"
refused "reshard onto a link to its source" "is the checkpoint $src" ckpt reshard "$src" -n 1 -o "$tmp/alias" --overwrite
refused "export into its source" "lies inside the checkpoint $src" ckpt export "$src" -o "$src/p.safetensors"
[ "$(sums "$tmp/ck")" = "$before" ] && ok "the source is byte for byte as it was" || bad "the source changed"
run ckpt verify "$src"
[ $rc = 0 ] && ok "the source verifies" || bad "verify after the refusals: $out"

# 2. a user's folder and file are left as they are
mkdir "$tmp/user"
echo precious > "$tmp/user/notes.txt"
for o in "" --overwrite; do
  refused "reshard -o a user's folder $o" "is a folder that is not a checkpoint Tessera wrote (it holds 'notes.txt')" \
    ckpt reshard "$src" -n 1 -o "$tmp/user" $o
  [ "$(ls -A "$tmp/user")" = notes.txt ] && [ "$(cat "$tmp/user/notes.txt")" = precious ] &&
    ! ls -d "$tmp"/user.* >/dev/null 2>&1 && ok "the user's folder untouched, nothing beside it" ||
    bad "the user's folder: $(ls -A "$tmp" "$tmp/user")"
done
echo text > "$tmp/notes.safetensors"
refused "merge over a file that is not a checkpoint" "is not a checkpoint Tessera wrote" \
  ckpt merge "$src" -o "$tmp/notes.safetensors" --overwrite
[ "$(cat "$tmp/notes.safetensors")" = text ] && ok "the file untouched" || bad "the file changed"
refused "merge onto a folder" "is a folder" ckpt merge "$src" -o "$tmp/user" --overwrite

# 3. an existing checkpoint output: replaced with --overwrite only
mkdir "$tmp/empty"
run ckpt reshard "$src" -n 1 -o "$tmp/empty"
[ $rc = 0 ] && [ -f "$tmp/empty/manifest.json" ] && ok "reshard into an empty folder" || bad "reshard -o an empty folder: rc $rc: $out"
run ckpt reshard "$src" -n 1 -o "$tmp/r1"
[ $rc = 0 ] || bad "reshard: rc $rc: $out"
refused "reshard over a checkpoint without --overwrite" "already holds a checkpoint: nothing written (--overwrite" \
  ckpt reshard "$src" -n 1 -o "$tmp/r1"
run ckpt reshard "$src" -n 1 -o "$tmp/r1" --overwrite
[ $rc = 0 ] && ! ls -d "$tmp"/r1.* >/dev/null 2>&1 && ok "reshard --overwrite replaces a checkpoint" ||
  bad "reshard --overwrite: rc $rc: $out $(ls "$tmp")"
for c in merge export; do
  run ckpt $c "$src" -o "$tmp/$c.safetensors"
  [ $rc = 0 ] || bad "$c: rc $rc: $out"
  refused "$c over its earlier output without --overwrite" "already exists: nothing written (--overwrite" \
    ckpt $c "$src" -o "$tmp/$c.safetensors"
  run ckpt $c "$src" -o "$tmp/$c.safetensors" --overwrite
  [ $rc = 0 ] && ok "$c --overwrite" || bad "$c --overwrite: rc $rc: $out"
done
refused "export of a whole file onto itself" "is the checkpoint $tmp/merge.safetensors" \
  ckpt export "$tmp/merge.safetensors" -o "$tmp/merge.safetensors" --overwrite
exit $fail
