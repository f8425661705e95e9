#!/bin/sh
# Writes to stdout a C file holding every usage example of the public headers in INCLUDE_DIR
# (INCLUDE_DIR/tessera/*.h): each block of ' *   ' lines that follows a
# ' * Usage (compiled by tests/tools/header_examples_test.sh):' line becomes a function of its own
# (inside a block, so it may declare what it uses) with tessera.h included and a few inputs every
# example may take as given (a graph g, values x and loss, a batch pointer, a seed and a step,
# params/grads and their count n). The functions are external (example_<header>_<k>), so linking
# the file resolves every library function the examples call. With "main", a main() that calls
# none of them is appended (a program to link against an installed library).
# Usage: header_examples_gen.sh INCLUDE_DIR [main]
set -eu
inc=$1
echo '#include <stdint.h>'
echo '#include <stdio.h>'
echo '#include <stdlib.h>'
echo '#include "tessera/tessera.h"'
for h in "$inc"/tessera/*.h; do
  awk -v name="$(basename "$h")" -v id="$(basename "$h" .h | tr -c 'a-z0-9\n' '_')" '
    /^ \* Usage \(compiled by tests\/tools\/header_examples_test.sh\):/ { on = 1; k++; printf "void example_%s_%d(ts_graph *g, ts_val x, ts_val loss, void *batch_ptr, uint64_t seed, uint64_t step, float *params, float *grads, size_t n);\nvoid example_%s_%d(ts_graph *g, ts_val x, ts_val loss, void *batch_ptr, uint64_t seed, uint64_t step, float *params, float *grads, size_t n) {\n{\n#line %d \"%s\"\n", id, k, id, k, NR + 1, name; next }
    on && /^ \*   / { print substr($0, 4); next }
    on { print "}\n(void)g; (void)x; (void)loss; (void)batch_ptr; (void)seed; (void)step; (void)params; (void)grads; (void)n;\n}"; on = 0 }
  ' "$h"
done
[ "${2:-}" = main ] && echo 'int main(void) { return 0; }'
exit 0
