#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job: ResNet-20 trained on the real
# Fashion-MNIST data (examples/quickstart.yaml; results under runs/quickstart/).
# Extra arguments go to `tessera train` (e.g. --set train.epochs=1).
set -eu
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh Release
exec build/tessera train examples/quickstart.yaml "$@"
