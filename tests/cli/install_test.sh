#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then: a small program built and run against the
# installed headers and library through pkg-config; only the public headers installed; the shared
# library exporting exactly the public headers' functions (cmake/public_symbols.sh); and an outside
# CMake project (find_package(Tessera)) building the program, the public headers' usage examples
# and examples/*.c against the installed tree.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -eu
builddir=$1
srcdir=$2
for t in cc pkg-config; do # exit 77: skipped (SKIP_RETURN_CODE in CMakeLists.txt)
  command -v "$t" >/dev/null || { echo "SKIP: no $t in PATH"; exit 77; }
done
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$builddir" --prefix "$prefix" >/dev/null
pcdir=$(dirname "$(find "$prefix" -name tessera.pc | head -1)")
export PKG_CONFIG_PATH=$pcdir
cat > "$prefix/use.c" <<'C'
#include <stdio.h>
#include <tessera/tessera.h>
int main(void) {
  ts_graph *g; ts_graph_create(&g);
  ts_val x = ts_input(g, "x", TS_F32, ts_shape1(4));
  ts_val y = ts_sum(g, ts_relu(g, x), 1u, 0);
  ts_plan *p; if (ts_plan_create(g, &y, 1, &p)) return 1;
  float d[4] = {-1, 2, 3, -4}; ts_plan_bind(p, x, d);
  if (ts_plan_run(p, 0)) return 1;
  printf("%g\n", *(float *)ts_plan_data(p, y));
  ts_plan_free(p); ts_graph_free(g);
  return 0;
}
C
cc "$prefix/use.c" $(pkg-config --cflags --libs tessera) -Wl,-rpath,"$(pkg-config --variable=libdir tessera)" -o "$prefix/use"
out=$("$prefix/use")
[ "$out" = "5" ] || { echo "FAIL: installed program printed '$out', want 5"; exit 1; }
[ -x "$prefix/bin/tessera" ] || { echo "FAIL: tessera not installed"; exit 1; }
echo "ok: installed headers, library, pkg-config file and tessera command work (printed $out)"

# only the public headers are installed: include/tessera/ as in the source tree, nothing else
want=$(cd "$srcdir/include/tessera" && ls | LC_ALL=C sort | tr '\n' ' ')
got=$(cd "$prefix/include/tessera" && ls | LC_ALL=C sort | tr '\n' ' ')
[ "$want" = "$got" ] || { echo "FAIL: installed headers differ from include/tessera/: want '$want', got '$got'"; exit 1; }
[ "$(find "$prefix/include" -type f | wc -l)" = "$(echo $want | wc -w)" ] || { echo "FAIL: files beside include/tessera/ installed"; exit 1; }
echo "ok: only the $(echo $want | wc -w) public headers are installed"

# the shared library exports exactly the functions the public headers declare
so=$(find "$prefix" -name 'libtessera.so' | head -1)
if command -v nm >/dev/null; then
  pub=$(sh "$srcdir/cmake/public_symbols.sh" "$srcdir/include")
  syms=$(nm -D --defined-only "$so" | awk '$2 ~ /[TDBRW]/ && $3 ~ /^ts_/ {print $3}' | LC_ALL=C sort -u)
  extra=$(printf '%s\n' "$syms" | LC_ALL=C comm -23 - /dev/fd/3 3<<EOF2
$pub
EOF2
)
  [ -z "$extra" ] || { echo "FAIL: $(printf '%s\n' "$extra" | wc -l) exported ts_ symbols no public header declares, e.g. $(printf '%s\n' "$extra" | head -3 | tr '\n' ' ')"; exit 1; }
  missing=$(printf '%s\n' "$pub" | LC_ALL=C comm -23 - /dev/fd/3 3<<EOF2
$syms
EOF2
)
  [ -z "$missing" ] || { echo "FAIL: public functions not exported: $(printf '%s\n' "$missing" | head -5 | tr '\n' ' ')"; exit 1; }
  for f in ts_dist_create ts_graph_add_node ts_parallel_pass ts_cost_graph ts__dist_plans; do
    if printf '%s\n' "$syms" | grep -qx "$f"; then echo "FAIL: internal $f exported"; exit 1; fi
  done
  echo "ok: libtessera.so exports the $(printf '%s\n' "$syms" | wc -l) functions of the public headers and nothing else"
else
  echo "SKIP part: no nm, exported symbols not checked"
fi

# find_package(Tessera) from another CMake project, against the shared and the static library
if command -v cmake >/dev/null; then
  mkdir -p "$prefix/proj"
  cp "$prefix/use.c" "$prefix/proj/use.c"
  # the public headers' usage examples, generated from the INSTALLED headers, linked as a program
  sh "$srcdir/tests/tools/header_examples_gen.sh" "$prefix/include" main > "$prefix/proj/header_examples.c"
  cp "$srcdir"/examples/*.c "$prefix/proj/"
  {
    cat <<'CM'
cmake_minimum_required(VERSION 3.18)
project(use_tessera C)
find_package(Tessera 0.1 REQUIRED)
add_executable(use_shared use.c)
target_link_libraries(use_shared PRIVATE Tessera::tessera)
add_executable(use_static use.c)
target_link_libraries(use_static PRIVATE Tessera::tessera_static)
add_executable(header_examples header_examples.c)
target_link_libraries(header_examples PRIVATE Tessera::tessera)
CM
    for e in "$srcdir"/examples/*.c; do
      b=$(basename "$e" .c)
      printf 'add_executable(example_%s %s.c)\ntarget_link_libraries(example_%s PRIVATE Tessera::tessera)\n' "$b" "$b" "$b"
    done
  } > "$prefix/proj/CMakeLists.txt"
  if ! cmake -S "$prefix/proj" -B "$prefix/proj/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
       > "$prefix/cm.log" 2>&1 || ! cmake --build "$prefix/proj/build" -j2 >> "$prefix/cm.log" 2>&1; then
    echo "FAIL: find_package(Tessera) project did not build:"; tail -30 "$prefix/cm.log"; exit 1
  fi
  for v in shared static; do
    o=$("$prefix/proj/build/use_$v")
    [ "$o" = 5 ] || { echo "FAIL: find_package(Tessera) program ($v) printed '$o', want 5"; exit 1; }
  done
  echo "ok: find_package(Tessera): Tessera::tessera and Tessera::tessera_static build and run (printed 5);"
  echo "    the public headers' usage examples and examples/*.c ($(ls "$srcdir"/examples/*.c | wc -l)) build against the installed tree"
fi
