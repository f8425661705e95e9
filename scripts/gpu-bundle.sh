#!/usr/bin/env bash
# Packs what the GPU check needs into gpu-bundle/ (ignored by git), for a GPU machine that has
# the NVIDIA driver but none of Debian's packages (docs/gpu.md: the lent H200 machine): the test
# and the command built here, every shared library they load but the driver, and Debian's own
# dynamic loader and C library, so the binaries run there whatever its distribution's glibc is
# (run through gpu-bundle/run, which starts them with the bundled loader). libcuda.so.1 is not
# packed: it comes from the GPU machine's driver (dlopen at run time).
# Also OpenMPI's runtime, relocated (OPAL_PREFIX=gpu-bundle/openmpi, a copy of the /usr paths it
# was built for): mpirun and orted (wrappers through the bundled loader), its plugins (those
# needing UCX, libfabric, PSM or verbs left out: the machine's ranks meet in shared memory) with
# their libraries, its help files, and PMIx's plugins (PMIX_INSTALL_PREFIX=gpu-bundle/pmix); so
# several ranks run there (gpu-bundle/mpirun -n 2 gpu-bundle/tessera train ...).
# The bundle is then packed into gpu-bundle.tar.xz (about 45 MiB with Fashion-MNIST; the device tool carries 64 MiB
# at most): gpu-check.sh unpacks it on the GPU machine.
#   scripts/gpu-bundle.sh [BUILD_DIR]      default build/; prints the sizes
# Then: device tool `run` with carry ["gpu-bundle.tar.xz"] and `bash scripts/gpu-check.sh OUT`.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
out=$root/gpu-bundle
bins="test_device test_device_conv bench_gpu_bn bench_gpu_conv test_exec_gpu test_fusion_gpu test_layout_gpu test_cuda_math test_dcoll tessera example_hybrid_mlp"
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
# OpenMPI and PMIx relocated into the bundle (scripts/gpu-bundle.sh); mpirun's and a singleton's
# orted found there
export OPAL_PREFIX="$here/openmpi" PMIX_INSTALL_PREFIX="$here/pmix" PATH="$here/openmpi/bin:$PATH"
ompi=$(ls -d "$here"/openmpi/lib/*/openmpi/lib 2>/dev/null | head -1)
exec "$here/lib/ld-linux-x86-64.so.2" --library-path "$here/lib${ompi:+:$ompi}$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$here/bin/$b" "$@"
R
chmod +x "$out.tmp/run"
for b in $bins; do # gpu-bundle/NAME: the binary as a command (what tests/cli scripts take as their tessera)
  printf '#!/bin/sh\nexec "$(dirname "$0")/run" %s "$@"\n' "$b" >"$out.tmp/$b"
  chmod +x "$out.tmp/$b"
done
# OpenMPI's runtime under a relocated prefix: Debian built it for /usr, so OPAL_PREFIX=P finds
# its plugins, help files and orted at P + (each path less /usr)
ompi_path() { ompi_info --path all --parsable 2>/dev/null | sed -n "s|^path:$1:/usr||p" | head -1; }
pkglib=$(ompi_path pkglibdir) libdir=$(ompi_path libdir) pkgdata=$(ompi_path pkgdatadir)
[ -n "$pkglib" ] && [ -n "$libdir" ] && [ -n "$pkgdata" ] ||
  { echo "gpu-bundle.sh: ompi_info does not give OpenMPI's paths under /usr (package openmpi-bin)" >&2; exit 1; }
P=$out.tmp/openmpi
mkdir -p "$P$pkglib" "$P$libdir" "$P$pkgdata" "$P/bin"
for f in /usr$pkglib/*.so; do
  case "$(basename "$f")" in *ucx*|*ofi*|*psm*|*openib*|*verbs*|*flux*) continue ;; esac
  ldd "$f" | grep -q "not found" && continue
  cp "$f" "$P$pkglib/"
done
cp -L /usr$libdir/libmca_common_*.so* "$P$libdir/" 2>/dev/null || true
rm -f "$P$libdir"/libmca_common_{ucx,ofi,verbs}* # (their plugins are not packed)
cp /usr$pkgdata/*.txt "$P$pkgdata/" 2>/dev/null || true
# PMIx (Debian's pmix2): its plugins and help files under PMIX_INSTALL_PREFIX
pmix=$(dirname "$(readlink -f "$(ldd /usr$pkglib/mca_pmix_ext3x.so | awk '/libpmix.so/ {print $3}')")")
pmix=${pmix%/lib}
mkdir -p "$out.tmp/pmix/lib"
if [ -d "$pmix/lib/pmix" ]; then cp -r "$pmix/lib/pmix" "$out.tmp/pmix/lib/"; fi
if [ -d "$pmix/share" ]; then cp -r "$pmix/share" "$out.tmp/pmix/"; fi
# the plugins' libraries (the closure), beside the others
for f in "$P$pkglib"/*.so "$P$libdir"/*.so* "$out.tmp/pmix/lib/pmix"/*.so; do [ -f "$f" ] && ldd "$f"; done |
  awk '/=>/ {print $3}' | sort -u | while read -r l; do
    if [ -f "$l" ] && [ ! -e "$out.tmp/lib/$(basename "$l")" ]; then cp -L "$l" "$out.tmp/lib/"; fi
  done
cp /usr/bin/orted "$out.tmp/bin/orted"
cp "$(readlink -f /usr/bin/orterun)" "$out.tmp/bin/mpirun"
# orted as OpenMPI starts it (a singleton's daemon: P/bin/orted), through the bundled loader
cat >"$P/bin/orted" <<'W'
#!/bin/sh
exec "$(dirname "$0")/../../run" orted "$@"
W
chmod +x "$P/bin/orted"
# gpu-bundle/mpirun: root allowed (the machine's containers run as root)
cat >"$out.tmp/mpirun" <<'W'
#!/bin/sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec "$(dirname "$0")/run" mpirun "$@"
W
chmod +x "$out.tmp/mpirun"
# the test finds its fixtures and the CPU kernels' data by the source tree's paths: none needed;
# Fashion-MNIST (Debian's dataset-fashion-mnist, ~30 MB already compressed) for the quickstart
# recipe's accuracy on the GPU (gpu-check.sh's quickstart step), when installed here
fm=/usr/share/datasets/fashion-mnist
if [ -f "$fm/train-images-idx3-ubyte.gz" ]; then mkdir -p "$out.tmp/data" && cp -r "$fm" "$out.tmp/data/"; fi
rm -rf "$out"
mv "$out.tmp" "$out"
tar -C "$root" -cf - gpu-bundle | xz -T2 -6 >"$out.tar.xz.tmp"
mv "$out.tar.xz.tmp" "$out.tar.xz"
echo "gpu-bundle.sh: $(du -sh "$out" | cut -f1) in $out ($(ls "$out/lib" | wc -l) libraries, OpenMPI's runtime), packed: $(du -h "$out.tar.xz" | cut -f1) in $out.tar.xz"
