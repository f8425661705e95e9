#!/usr/bin/env bash
# Configures and builds Tessera. Usage: scripts/build.sh [Release|Debug|Asan] (default Release).
# Build directories: build/ (Release), build-debug/, build-asan/.
set -eu
cd "$(dirname "$0")/.."
type=${1:-Release}
case "$type" in
  Release) dir=build ;;
  Debug) dir=build-debug ;;
  Asan) dir=build-asan ;;
  *) echo "build.sh: unknown build type '$type' (Release, Debug, Asan)" >&2; exit 2 ;;
esac
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="$type" >/dev/null
cmake --build "$dir" -j "$(nproc)"
