#!/bin/sh
# The include-direction check on a small tree: clean -> exit 0 and a summary; with violations
# -> exit 1 and one line per violation naming file:line, the include and both layers.
# Usage: layers_detects_test.sh path/to/check_layers.sh
set -u
check=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
sh "$here/layers_fixture.sh" "$tmp/ok"
out=$(sh "$check" "$tmp/ok" 2>&1); rc=$?
if [ "$rc" = 0 ] && printf '%s\n' "$out" | grep -q "8 files, 11 includes, 3 layers"; then echo "ok: clean tree -> exit 0: $out"
else echo "FAIL: clean tree -> exit $rc: $out"; fail=1; fi
sh "$here/layers_fixture.sh" "$tmp/bad" violate
out=$(sh "$check" "$tmp/bad" 2>&1); rc=$?
want1='src/base/rng.c:4: base may not include tessera/graph.h (layer graph)'
want2='src/nn/layers.c:3: nn may not include ../graph/graph_impl.h (layer graph)'
if [ "$rc" = 1 ] && printf '%s\n' "$out" | grep -qF "$want1" && printf '%s\n' "$out" | grep -qF "$want2" &&
   [ "$(printf '%s\n' "$out" | grep -c 'may not include')" = 2 ]; then
  echo "ok: violations -> exit 1:"; printf '%s\n' "$out"
else echo "FAIL: violations -> exit $rc (want 1 naming both), output: $out"; fail=1; fi
# a folder that is no layer is reported, not skipped
mkdir -p "$tmp/ok/src/extra" && printf '#include "tessera/base.h"\n' > "$tmp/ok/src/extra/x.c"
out=$(sh "$check" "$tmp/ok" 2>&1); rc=$?
if [ "$rc" = 1 ] && printf '%s\n' "$out" | grep -q "src/extra/x.c: folder src/extra is not a layer"; then echo "ok: unknown folder -> exit 1"
else echo "FAIL: unknown folder -> exit $rc: $out"; fail=1; fi
exit $fail
