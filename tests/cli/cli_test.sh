#!/usr/bin/env bash
# CLI behaviour: exit codes (0 ok, 2 usage, 1 runtime), one-line errors, and a short real run.
# Usage: cli_test.sh path/to/tessera
set -u
bin=$1
fail=0
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
expect 2 "unknown option '--bogus'" -- train --bogus
expect 2 "needs a value" -- train --epochs
expect 2 "optimizer" -- train --optimizer rmsprop
expect 1 "/nonexistent.*no such file" -- train --data /nonexistent
if [ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  expect 0 "final test accuracy" -- train --epochs 1 --limit 2048 --batch-size 64
fi
exit $fail
