#!/bin/sh
# The usage examples in the public headers compile (tests/tools/header_examples_gen.sh puts each
# in a function of its own), with -Wall -Wextra -Werror, against include/ alone: a public header
# that needs an internal one fails here. Also: tessera.h includes every public header, and runtime.h has its example.
# Usage: header_examples_test.sh SOURCE_DIR [CC]
set -u
src=$1
cc=${2:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
command -v "$cc" >/dev/null 2>&1 || { echo "SKIP: no C compiler '$cc'"; exit 77; }
for h in "$src"/include/tessera/*.h; do
  b=$(basename "$h")
  [ "$b" = tessera.h ] && continue
  grep -q "#include \"tessera/$b\"" "$src/include/tessera/tessera.h" || { echo "FAIL: tessera.h does not include tessera/$b"; fail=1; }
done
out=$tmp/examples.c
sh "$(dirname "$0")/header_examples_gen.sh" "$src/include" > "$out"
n=$(grep -c '^void example_.*{$' "$out")
grep -q '^void example_runtime_.*{$' "$out" || { echo "FAIL: runtime.h has no compiled usage example"; fail=1; }
if "$cc" -std=gnu11 -Wall -Wextra -Werror -Wno-unused-function -Wno-unused-variable -Wno-unused-but-set-variable \
     -Wno-unused-parameter -I"$src/include" -c "$out" -o "$tmp/examples.o" 2> "$tmp/err"; then
  echo "ok: $n header examples compile"
else
  echo "FAIL: header examples do not compile:"; cat "$tmp/err"; fail=1
fi
exit $fail
