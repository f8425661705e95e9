#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then build and run a small program against the
# installed headers and library through pkg-config.
set -eu
builddir=$1
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

# internal ts__ names are hidden from the shared library; the public ts_ ones are there
so=$(find "$prefix" -name 'libtessera.so' | head -1)
if command -v nm >/dev/null; then
  syms=$(nm -D --defined-only "$so" | awk '{print $3}')
  nint=$(grep -c '^ts__' <<<"$syms" || true)
  npub=$(grep -c '^ts_[a-zA-Z0-9]' <<<"$syms" || true)
  [ "$nint" = 0 ] || { echo "FAIL: $nint internal ts__ symbols exported, e.g. $(grep '^ts__' <<<"$syms" | head -3 | tr '\n' ' ')"; exit 1; }
  [ "$npub" -gt 300 ] || { echo "FAIL: only $npub public ts_ symbols exported"; exit 1; }
  grep -qx ts_plan_run <<<"$syms" || { echo "FAIL: ts_plan_run not exported"; exit 1; }
  echo "ok: libtessera.so exports $npub public ts_ symbols and no internal ts__ one"
else
  echo "SKIP part: no nm, exported symbols not checked"
fi

# find_package(Tessera) from another CMake project, against the shared and the static library
if command -v cmake >/dev/null; then
  mkdir -p "$prefix/proj"
  cp "$prefix/use.c" "$prefix/proj/use.c"
  cat > "$prefix/proj/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.18)
project(use_tessera C)
find_package(Tessera 0.1 REQUIRED)
add_executable(use_shared use.c)
target_link_libraries(use_shared PRIVATE Tessera::tessera)
add_executable(use_static use.c)
target_link_libraries(use_static PRIVATE Tessera::tessera_static)
CM
  if ! cmake -S "$prefix/proj" -B "$prefix/proj/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
       > "$prefix/cm.log" 2>&1 || ! cmake --build "$prefix/proj/build" -j2 >> "$prefix/cm.log" 2>&1; then
    echo "FAIL: find_package(Tessera) project did not build:"; tail -30 "$prefix/cm.log"; exit 1
  fi
  for v in shared static; do
    o=$("$prefix/proj/build/use_$v")
    [ "$o" = 5 ] || { echo "FAIL: find_package(Tessera) program ($v) printed '$o', want 5"; exit 1; }
  done
  echo "ok: find_package(Tessera): Tessera::tessera and Tessera::tessera_static build and run (printed 5)"
fi
