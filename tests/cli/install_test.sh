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
