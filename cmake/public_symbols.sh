#!/bin/sh
# The functions the public headers declare (include/tessera/*.h): one name per line, sorted.
# CMake turns the list into libtessera.so's linker version script (only these are exported;
# every other symbol, the internal ts_ functions of src/<layer>/ headers and the ts__ ones, stays
# local), and tests/cli/install_test.sh compares `nm -D` of the installed library with it.
# A declaration is a ts_ name followed by "(" outside comments, preprocessor lines and the
# bodies of static inline functions (accessors defined in the header, never exported).
# Usage: cmake/public_symbols.sh INCLUDE_DIR   (the folder holding tessera/)
set -eu
dir=$1/tessera
for h in "$dir"/*.h; do
  [ "$(basename "$h")" = tessera.h ] && continue
  # comments out (C block and line comments), then the declarations
  sed -e ':a' -e 's#/\*[^*]*\*\+\([^/*][^*]*\*\+\)*/##g' -e '/\/\*/{N;ba' -e '}' "$h" | sed 's#//.*$##'
done | awk '
  /^[ \t]*#/ { next }                                   # preprocessor lines (macros included)
  /static[ \t]+inline/ { inl = 1 }
  {
    line = $0
    if (!inl) {
      while (match(line, /(^|[^A-Za-z0-9_])ts_[A-Za-z0-9_]+[ \t]*\(/)) {
        name = substr(line, RSTART, RLENGTH); sub(/^[^t]*/, "", name); sub(/[ \t]*\($/, "", name)
        print name
        line = substr(line, RSTART + RLENGTH)
      }
    }
    # a static inline function ends at the closing brace that balances its body
    if (inl) { o = gsub(/\{/, "{", $0); c = gsub(/\}/, "}", $0); depth += o - c; if (o > 0) opened = 1; if (opened && depth <= 0) { inl = 0; opened = 0; depth = 0 } }
  }' | LC_ALL=C sort -u
