#!/usr/bin/env bash
# Builds the libFuzzer targets (clang -fsanitize=fuzzer,address,undefined) outside the normal
# build, into build-fuzz/, and runs each for a while on a copy of the committed seed corpus.
#   tests/fuzz/run.sh [SECONDS] [TARGET...]      SECONDS per target (default 120);
#                                                TARGET: records, idx, rank_table, metrics
#                                                (default all)
#   FUZZ_MERGE=1 tests/fuzz/run.sh ...           afterwards, merge what was found into the
#                                                committed corpus tests/fuzz/corpus/TARGET (minimised)
# Installs clang and libclang-rt-14-dev through scripts/install-deps.sh --fuzz when missing.
# Crashes are written to build-fuzz/artifacts/ and make the script exit 1; the final libFuzzer
# statistics (stat::number_of_executed_units, ...) are printed for each target.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
secs=${1:-120}
shift || true
targets=${*:-records idx rank_table metrics}
out=$root/build-fuzz
mkdir -p "$out/artifacts"

probe() { printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' >"$out/probe.c" &&
          clang -fsanitize=fuzzer "$out/probe.c" -o "$out/probe" 2>/dev/null; }
if ! command -v clang >/dev/null || ! probe; then
  "$root/scripts/install-deps.sh" --fuzz
  probe || { echo "run.sh: clang cannot build a libFuzzer target" >&2; exit 1; }
fi

flags="-g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -Wall -Wextra -Wno-unused-parameter -I$root/include -I$root/src"
lib="$root/src/base/status.c $root/src/base/text.c $root/src/base/rfile.c $root/src/tensor/tensor.c $root/src/tensor/dtype.c $root/src/data/source.c"
declare -A extra=([records]="$root/src/data/records.c" [idx]="$root/src/data/idx.c"
                  [rank_table]="$root/src/cli/rank_table.c -lcjson"
                  [metrics]="$root/src/train/plot.c $root/src/base/log.c -lcjson -lpng -lm")

status=0
for t in $targets; do
  [ -n "${extra[$t]:-}" ] || { echo "run.sh: unknown target '$t' (records, idx, rank_table, metrics)" >&2; exit 2; }
  # shellcheck disable=SC2086
  clang $flags "$root/tests/fuzz/fuzz_$t.c" ${extra[$t]} $lib -lz -o "$out/fuzz_$t"
  work=$out/corpus/$t
  mkdir -p "$work"
  cp -n "$root/tests/fuzz/corpus/$t/"* "$work/" 2>/dev/null || true
  echo "== fuzz_$t for ${secs}s (corpus $work)"
  if ! UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 nice "$out/fuzz_$t" "$work" \
      -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 \
      -artifact_prefix="$out/artifacts/$t-" 2>"$out/fuzz_$t.log"; then
    status=1
    echo "run.sh: fuzz_$t found a failure; see $out/fuzz_$t.log and $out/artifacts/" >&2
  fi
  grep -E "^(stat::|#[0-9]+ +DONE|INFO: Loaded|==[0-9]+==ERROR|SUMMARY)" "$out/fuzz_$t.log" || true
  if [ "${FUZZ_MERGE:-0}" = 1 ]; then
    "$out/fuzz_$t" -merge=1 "$root/tests/fuzz/corpus/$t" "$work" 2>/dev/null
  fi
done
exit $status
