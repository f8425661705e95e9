#!/bin/sh
# The usage examples in the public headers compile: every block of ' *   ' lines that follows a
# ' * Usage (compiled by tests/tools/header_examples_test.sh):' line in include/tessera/*.h is
# put in a function of its own (inside a block, so it may declare what it uses) with tessera.h
# included and a few inputs every example may take as given (a graph g, values x and loss, a
# batch pointer, a seed and a step, params/grads and their count n), and compiled with -Wall
# -Wextra -Werror. Also: tessera.h includes every public header, and runtime.h has its example.
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
{
  echo '#include <stdint.h>'
  echo '#include <stdio.h>'
  echo '#include <stdlib.h>'
  echo '#include "tessera/tessera.h"'
} > "$out"
n=0
for h in "$src"/include/tessera/*.h; do
  awk -v name="$(basename "$h")" -v id="$(basename "$h" .h | tr -c 'a-z0-9\n' '_')" '
    /^ \* Usage \(compiled by tests\/tools\/header_examples_test.sh\):/ { on = 1; k++; printf "static void example_%s_%d(ts_graph *g, ts_val x, ts_val loss, void *batch_ptr, uint64_t seed, uint64_t step, float *params, float *grads, size_t n) {\n{\n#line %d \"%s\"\n", id, k, NR + 1, name; next }
    on && /^ \*   / { print substr($0, 4); next }
    on { print "}\n(void)g; (void)x; (void)loss; (void)batch_ptr; (void)seed; (void)step; (void)params; (void)grads; (void)n;\n}"; on = 0 }
  ' "$h" >> "$out"
done
n=$(grep -c '^static void example_' "$out")
grep -q '^static void example_runtime_' "$out" || { echo "FAIL: runtime.h has no compiled usage example"; fail=1; }
if "$cc" -std=gnu11 -Wall -Wextra -Werror -Wno-unused-function -Wno-unused-variable -Wno-unused-but-set-variable \
     -Wno-unused-parameter -I"$src/include" -c "$out" -o "$tmp/examples.o" 2> "$tmp/err"; then
  echo "ok: $n header examples compile"
else
  echo "FAIL: header examples do not compile:"; cat "$tmp/err"; fail=1
fi
exit $fail
