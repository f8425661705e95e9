#!/usr/bin/env bash
# CLI behaviour: exit codes (0 ok, 2 usage, 1 runtime), one-line errors, and a short real run.
# Usage: cli_test.sh path/to/tessera
set -u
bin=$1
fail=0
skipped="" # parts that could not run: exit 77 (SKIP_RETURN_CODE) if nothing failed
fm=${TS_TEST_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
expect() { # expect CODE PATTERN -- args...
  local code=$1 pat=$2; shift 3
  local out rc
  out=$("$bin" "$@" 2>&1); rc=$?
  if [ "$rc" != "$code" ] || ! grep -qE -- "$pat" <<<"$out"; then
    echo "FAIL: tessera $* -> exit $rc (want $code), output: $out"; fail=1
  else
    echo "ok: tessera $* -> exit $rc"
  fi
}
expect 0 "tessera [0-9]+\.[0-9]+\.[0-9]+" -- --version
expect 0 "usage" -- --help
expect 0 "example" -- train --help
expect 2 "unknown command 'frobnicate'" -- frobnicate
expect 2 "unknown command 'tarin' \(did you mean 'train'\?" -- tarin
expect 2 "unknown command 'porfile' \(did you mean 'profile'\?" -- porfile
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
expect 2 "missing CONFIG" -- train
expect 2 "unknown option '--bogus'" -- train --bogus
expect 2 "needs key=value" -- train x.yaml --set
printf 'model: {name: mlp\n' > "$tmp/bad.yaml"
expect 2 "bad.yaml:[0-9]+:[0-9]+: malformed YAML" -- train "$tmp/bad.yaml"
printf 'model: {name: resnt}\n' > "$tmp/model.yaml"
expect 2 "model.name: unknown value 'resnt' \(did you mean 'resnet'" -- train "$tmp/model.yaml"
printf 'train: {epochs: ten}\n' > "$tmp/type.yaml"
expect 2 "train.epochs: expected an integer, got 'ten'" -- train "$tmp/type.yaml"
printf 'optimizer: {lrr: 0.1}\n' > "$tmp/key.yaml"
expect 2 "unknown key 'optimizer.lrr' \(did you mean 'optimizer.lr'" -- train "$tmp/key.yaml"
expect 2 "none.yaml: cannot read the config: No such file" -- train "$tmp/none.yaml"
printf 'model: {name: mlp, hidden: [16]}\ndata: {name: fashion_mnist, path: /nonexistent/fm}\n' > "$tmp/nodata.yaml"
expect 2 "/nonexistent/fm" -- train "$tmp/nodata.yaml"
expect 2 "usage" -- plot
# a FIFO or a folder given as a config or a checkpoint: one line naming it, exit 2, at once
# (opening a FIFO used to block forever; `timeout` turns a regression into a failure, rc 124)
expect_fast() { # expect_fast CODE PATTERN -- args...
  local code=$1 pat=$2; shift 3
  local out rc
  out=$(timeout 10 "$bin" "$@" 2>&1); rc=$?
  if [ "$rc" != "$code" ] || ! grep -qE -- "$pat" <<<"$out" || [ "$(wc -l <<<"$out")" != 1 ]; then
    echo "FAIL: tessera $* -> exit $rc (want $code, one line, 124 = hung), output: $out"; fail=1
  else
    echo "ok: tessera $* -> exit $rc: $out"
  fi
}
mkfifo "$tmp/fifo.yaml" "$tmp/fifo.safetensors"
mkdir "$tmp/dir.yaml" "$tmp/dir.safetensors"
expect_fast 2 "fifo.yaml: cannot read the config: is a FIFO" -- train "$tmp/fifo.yaml"
expect_fast 2 "dir.yaml: cannot read the config: is a directory" -- train "$tmp/dir.yaml"
expect_fast 2 "fifo.safetensors: cannot open the checkpoint: is a FIFO" -- eval "$tmp/nodata.yaml" --checkpoint "$tmp/fifo.safetensors"
expect_fast 2 "dir.safetensors: cannot open the checkpoint: is a directory" -- eval "$tmp/nodata.yaml" --checkpoint "$tmp/dir.safetensors"
expect_fast 2 "fifo.safetensors: cannot open the checkpoint: is a FIFO" -- ckpt inspect "$tmp/fifo.safetensors"
expect_fast 2 "dir.safetensors: no manifest.json: not a complete checkpoint" -- ckpt export "$tmp/dir.safetensors" -o "$tmp/x.safetensors"
# launcher: mpirun command line, MindSpore rank table, errors
here=$(cd "$(dirname "$0")" && pwd)
expect 0 "mpirun .*-n 2 .*train x.yaml" -- launch -n 2 --dry-run -- train x.yaml
expect 0 "-n 4 --hostfile" -- launch --rank-table "$here/../fixtures/cli/rank_table_4.json" --dry-run -- train x.yaml
expect 2 "-n 3 but the rank table has 4 ranks" -- launch -n 3 --rank-table "$here/../fixtures/cli/rank_table_4.json" -- train x.yaml
expect 2 "missing '-- COMMAND'" -- launch -n 2
expect 2 "-n N" -- launch -- train x.yaml
if command -v mpirun >/dev/null; then expect 0 "tessera [0-9.]+" -- launch -n 2 -- --version
else echo "SKIP: no mpirun in PATH: launch -n 2 not run"; skipped="$skipped mpirun"; fi
expect 2 "none.jsonl: cannot open the metrics file: No such file" -- plot "$tmp/none.jsonl" -o "$tmp/x.png"
if [ -r "$fm/train-images-idx3-ubyte.gz" ]; then
  cat > "$tmp/mlp.yaml" <<YAML
model: {name: mlp, hidden: [32]}
data:
  name: fashion_mnist
  path: '$fm'
  train_limit: 1024
  test_limit: 500
  transforms: [{name: to_float, scale: 0.00392156862745098}, hwc_to_chw]
train: {epochs: 2, batch_size: 64, log_every: 4}
optimizer: {name: momentum, lr: 0.05}
checkpoint: {dir: $tmp/ck, save_epochs: 1}
log: {metrics: $tmp/m.jsonl, plot: $tmp/curves.png, progress: lines}
YAML
  expect 0 "test accuracy" -- train "$tmp/mlp.yaml"
  [ -s "$tmp/curves.png" ] && head -c 8 "$tmp/curves.png" | grep -q PNG || { echo "FAIL: no PNG written"; fail=1; }
  grep -q '"type":"end"' "$tmp/m.jsonl" && grep -q '"test_accuracy"' "$tmp/m.jsonl" || { echo "FAIL: metrics end record"; fail=1; }
  ck=$(ls "$tmp"/ck/*.safetensors | tail -1)
  expect 0 "top1" -- eval "$tmp/mlp.yaml" --checkpoint "$ck"
  expect 0 "wrote" -- plot "$tmp/m.jsonl" -o "$tmp/c2.png"
  expect 0 "config hash" -- ckpt inspect "$ck"
  expect 2 "checkpoint FILE is required" -- eval "$tmp/mlp.yaml"
  head -c 1000 "$ck" > "$tmp/trunc.safetensors"
  expect 1 "trunc.safetensors" -- eval "$tmp/mlp.yaml" --checkpoint "$tmp/trunc.safetensors"
  sed 's/hidden: \[32\]/hidden: [48]/' "$tmp/mlp.yaml" > "$tmp/other.yaml"
  expect 2 "fc1.weight" -- eval "$tmp/other.yaml" --checkpoint "$ck"
  expect 0 "resumed from" -- train "$tmp/mlp.yaml" --set train.epochs=3 --set checkpoint.resume=auto --set checkpoint.strict=false
else
  echo "SKIP: Fashion-MNIST not installed in $fm: the real training run not run"; skipped="$skipped fashion-mnist"
fi
[ "$fail" = 0 ] && [ -n "$skipped" ] && { echo "SKIPPED parts:$skipped"; exit 77; }
exit $fail
