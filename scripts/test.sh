#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test with ctest.
# Usage: scripts/test.sh [--asan]   (--asan: AddressSanitizer + UBSan build in build-asan/)
set -eu
cd "$(dirname "$0")/.."
scripts/install-deps.sh
type=Release; dir=build
if [ "${1:-}" = "--asan" ]; then type=Asan; dir=build-asan; fi
# The sanitized run skips the few checks that are pure search compute on big models (130 s each
# there; the Release run makes them): tests/cli/planner_cli_test.sh, megatron_cli_test.sh.
if [ "$type" = Asan ]; then export TESSERA_TEST_SANITIZED=1; fi
scripts/build.sh "$type"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# The suite's MPI jobs run on this one host, where Open MPI ends up with its ob1 messaging layer
# anyway; left to choose, every MPI_Init first probes UCX and the OFI/PSM fabrics, which waits
# 0.2 s in each process (0.25 -> 0.04 s per MPI_Init here; hundreds of MPI processes in the suite).
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
# ASan: oneDNN's JIT and OpenMP runtime are not instrumented; leaks in them are not ours.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/scripts/lsan.supp}
cd "$dir" && ctest --output-on-failure -j 2
