#!/bin/sh
# The include-direction and public/internal check on a small tree (tests/tools/layers_fixture.sh):
# clean -> exit 0 and a summary; with violations -> exit 1 and one line per violation naming
# file:line, the include and both layers: an include pointing up the table, a private header of
# another layer, an internal header in a public one, a public header no layer owns, an
# allow-list row no include uses; a folder that is no layer is reported, not skipped.
# Usage: layers_detects_test.sh path/to/check_layers.sh
set -u
check=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
sh "$here/layers_fixture.sh" "$tmp/ok"
out=$(sh "$check" "$tmp/ok" 2>&1); rc=$?
if [ "$rc" = 0 ] && printf '%s\n' "$out" | grep -q "10 files, 15 includes, 3 layers (2 internal headers, 1 allow-list rows)"; then echo "ok: clean tree -> exit 0: $out"
else echo "FAIL: clean tree -> exit $rc: $out"; fail=1; fi
sh "$here/layers_fixture.sh" "$tmp/bad" violate
out=$(sh "$check" "$tmp/bad" 2>&1); rc=$?
n=0
for want in 'src/base/rng.c:4: base may not include tessera/graph.h (layer graph)' \
            'src/nn/init.c:2: nn may not include ../graph/graph_impl.h (layer graph): a private header of its layer' \
            'include/tessera/nn.h:3: a public header may include only public headers ("tessera/..."), not graph/graph_ir.h' \
            'include/tessera/extra.h: no layer owns this public header' \
            'docs/architecture.md: allow-list row src/nn/gone.c -> graph/graph_impl.h matches no include'; do
  if printf '%s\n' "$out" | grep -qF "$want"; then n=$((n + 1)); else echo "FAIL: not reported: $want"; fail=1; fi
done
if [ "$rc" = 1 ] && [ "$n" = 5 ] && [ "$(printf '%s\n' "$out" | grep -vc '^check_layers:')" = 5 ]; then
  echo "ok: violations -> exit 1:"; printf '%s\n' "$out"
else echo "FAIL: violations -> exit $rc (want 1 and exactly the 5 lines), output: $out"; fail=1; fi
# a folder that is no layer is reported, not skipped
mkdir -p "$tmp/ok/src/extra" && printf '#include "tessera/base.h"\n' > "$tmp/ok/src/extra/x.c"
out=$(sh "$check" "$tmp/ok" 2>&1); rc=$?
if [ "$rc" = 1 ] && printf '%s\n' "$out" | grep -q "src/extra/x.c: folder src/extra is not a layer"; then echo "ok: unknown folder -> exit 1"
else echo "FAIL: unknown folder -> exit $rc: $out"; fail=1; fi
exit $fail
