#!/usr/bin/env bash
# Packs what the GPU check needs into gpu-bundle/ (ignored by git), for a GPU machine that has
# the NVIDIA driver but none of Debian's packages (docs/gpu.md: the lent H200 machine): the test
# and the command built here, every shared library they load but the driver, and Debian's own
# dynamic loader and C library, so the binaries run there whatever its distribution's glibc is
# (run through gpu-bundle/run, which starts them with the bundled loader). libcuda.so.1 is not
# packed: it comes from the GPU machine's driver (dlopen at run time).
#   scripts/gpu-bundle.sh [BUILD_DIR]      default build/; prints the bundle's size
# Then: device tool `run` with carry ["gpu-bundle"] and `bash scripts/gpu-check.sh OUT`.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
out=$root/gpu-bundle
bins="test_device test_exec_gpu test_cuda_math test_dcoll tessera"
for b in $bins; do
  [ -x "$build/$b" ] || { echo "gpu-bundle.sh: $build/$b is not built (cmake --build $build)" >&2; exit 1; }
done
rm -rf "$out.tmp"
mkdir -p "$out.tmp/bin" "$out.tmp/lib"
for b in $bins; do cp "$build/$b" "$out.tmp/bin/"; done
# every library the binaries load (ldd resolves the whole closure), the loader included
for b in $bins; do ldd "$build/$b"; done | awk '/=>/ {print $3} /^\t\/lib/ {print $1}' | sort -u | while read -r l; do
  [ -f "$l" ] && cp -L "$l" "$out.tmp/lib/"
done
loader=$(ls "$out.tmp/lib"/ld-linux-x86-64.so.2 2>/dev/null || true)
[ -n "$loader" ] || { echo "gpu-bundle.sh: no ld-linux-x86-64.so.2 among the libraries" >&2; exit 1; }
cat >"$out.tmp/run" <<'R'
#!/bin/sh
# gpu-bundle/run BINARY [ARGS...]: a bundled binary through the bundled loader and libraries;
# the NVIDIA driver's directories stay on the search path after them (libcuda.so.1 is dlopen'ed).
here=$(cd "$(dirname "$0")" && pwd)
drv=""
for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 /usr/lib/wsl/lib; do
  [ -e "$d/libcuda.so.1" ] && drv="$drv:$d"
done
b=$1; shift
exec "$here/lib/ld-linux-x86-64.so.2" --library-path "$here/lib$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$here/bin/$b" "$@"
R
chmod +x "$out.tmp/run"
for b in $bins; do # gpu-bundle/NAME: the binary as a command (what tests/cli scripts take as their tessera)
  printf '#!/bin/sh\nexec "$(dirname "$0")/run" %s "$@"\n' "$b" >"$out.tmp/$b"
  chmod +x "$out.tmp/$b"
done
# the test finds its fixtures and the CPU kernels' data by the source tree's paths: none needed
rm -rf "$out"
mv "$out.tmp" "$out"
echo "gpu-bundle.sh: $(du -sh "$out" | cut -f1) in $out ($(ls "$out/lib" | wc -l) libraries)"
