#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job: training on Fashion-MNIST.
# Extra arguments go to `tessera train` (see build/tessera train --help).
set -eu
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh Release
exec build/tessera train --epochs 10 "$@"
