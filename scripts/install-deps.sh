#!/usr/bin/env bash
# Installs, through apt-get, what Tessera needs and is missing. Idempotent; fast when nothing is
# missing (dpkg-query only). python3-protobuf: the TensorBoard event file read back by Python
# (tests/cli/tensorboard_py_test.sh). clang: compiles the GPU kernels to PTX (src/device/cuda/; no
# CUDA install is needed). Usage: scripts/install-deps.sh [--fixtures] [--bench] [--fuzz]
#   --fixtures, --bench  also install python3-torch, python3-torchvision and OpenBLAS (only needed
#               to regenerate the PyTorch fixtures under tests/fixtures and for the PyTorch side of
#               bench/: without OpenBLAS, Debian's torch falls back to the reference BLAS, ~25x
#               slower, which would make every comparison meaningless). --bench also iperf3 (the
#               raw TCP rate of the test cluster's shaped link, bench/cluster_bench.sh's net step).
#   --fuzz      also install clang, its libFuzzer runtime and its omp.h (tests/fuzz/run.sh).
set -eu
pkgs="build-essential cmake pkg-config libdnnl-dev libopenmpi-dev openmpi-bin libyaml-dev
      libcjson-dev zlib1g-dev nettle-dev libpng-dev libjpeg-dev dataset-fashion-mnist
      python3-dev python3-numpy python3-protobuf clang"
for a in "$@"; do
  case "$a" in
    --fixtures) pkgs="$pkgs python3-torch python3-torchvision libopenblas0-openmp" ;;
    --bench) pkgs="$pkgs python3-torch python3-torchvision libopenblas0-openmp iperf3" ;;
    --fuzz) pkgs="$pkgs clang libclang-rt-14-dev libomp-14-dev" ;;
    *) echo "install-deps.sh: unknown option '$a'" >&2; exit 2 ;;
  esac
done
missing=""
for p in $pkgs; do
  st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ "$st" = "installed" ] || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "install-deps.sh: installing:$missing" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
