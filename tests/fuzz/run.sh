#!/usr/bin/env bash
# Builds the libFuzzer targets (clang -fsanitize=fuzzer,address,undefined) outside the normal
# build, into build-fuzz/, and runs each for a while on a copy of the committed seed corpus.
#   tests/fuzz/run.sh [SECONDS] [TARGET...]      SECONDS per target (default 120); TARGET: records,
#                                                idx, rank_table, metrics, safetensors, manifest,
#                                                config, strategy, cluster (default all)
#   tests/fuzz/run.sh --replay [TARGET...]       only runs every committed input once (no fuzzing);
#                                                without clang's libFuzzer it prints "SKIP: reason"
#                                                and exits 77 instead of installing it (the ctests
#                                                fuzz_<target>)
#   FUZZ_SEED=N tests/fuzz/run.sh ...          libFuzzer's -seed (default 0: a new one each run); CI
#                                                fixes it so that its short run repeats the same inputs
#   FUZZ_MERGE=1 tests/fuzz/run.sh ...           afterwards, merge what was found into the
#                                                committed corpus tests/fuzz/corpus/TARGET (minimised)
# The library sources the targets use are compiled once, instrumented, into build-fuzz/lib/
# libtessera.a (an object is rebuilt when its source is newer, all of them when a header is or the
# flags change; OpenMP pragmas are off: the fuzzed code runs on one thread). Which sources: when a
# normal build's objects are there (FUZZ_OBJS, default build/CMakeFiles/tessera_obj.dir, which CI
# builds first), those the targets reach through their symbols (about 50 of 170: a third of the
# compile); otherwise, or when a target then fails to link, every src/**/*.c but src/cli/.
# Installs clang, libclang-rt-14-dev and libomp-14-dev through scripts/install-deps.sh --fuzz when
# missing.
# Crashes are written to build-fuzz/artifacts/ and make the script exit 1; the final libFuzzer
# statistics (stat::number_of_executed_units, ...) are printed for each target.
set -eu
orig_args=("$@")
root=$(cd "$(dirname "$0")/../.." && pwd)
all="records idx rank_table metrics safetensors manifest config strategy cluster"
replay=0
if [ "${1:-}" = "--replay" ]; then
  replay=1
  shift
  secs=0
else
  secs=${1:-120}
  shift || true
fi
targets=${*:-$all}
for t in $targets; do
  case " $all " in *" $t "*) ;; *) echo "run.sh: unknown target '$t' (${all// /, })" >&2; exit 2 ;; esac
done
out=$root/build-fuzz
mkdir -p "$out/artifacts" "$out/lib"

# clang, its libFuzzer and sanitizer runtimes, and its omp.h (the kernels' sources include it)
probe() { printf '#include <omp.h>\nint LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' >"$out/probe.c" &&
          clang -fsanitize=fuzzer,address,undefined "$out/probe.c" -o "$out/probe" 2>/dev/null; }
if ! command -v clang >/dev/null || ! probe; then
  if [ $replay = 1 ]; then
    echo "SKIP: clang with libFuzzer is not installed (scripts/install-deps.sh --fuzz)"
    exit 77
  fi
  "$root/scripts/install-deps.sh" --fuzz
  probe || { echo "run.sh: clang cannot build a libFuzzer target" >&2; exit 1; }
fi

# Compiler and linker flags of the libraries the sources use (as CMakeLists.txt finds them); the
# few omp_* calls link to libgomp, as in the normal build.
mpi_cflags=$(pkg-config --cflags ompi-c 2>/dev/null || mpicc --showme:compile 2>/dev/null || true)
mpi_libs=$(pkg-config --libs ompi-c 2>/dev/null || mpicc --showme:link 2>/dev/null || echo -lmpi)
dnnl_inc=/usr/include
[ -f /usr/include/oneapi/dnnl/dnnl.h ] && dnnl_inc=/usr/include/oneapi/dnnl
flags="-g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
       -Wall -Wextra -Wno-unused-parameter -I$root/include -I$root/src"
libflags="$flags -march=native -fsanitize=fuzzer-no-link -Wno-unused-variable -I$dnnl_inc $mpi_cflags
          $(pkg-config --cflags yaml-0.1 libcjson zlib nettle libpng)"
libs="$(pkg-config --libs yaml-0.1 libcjson zlib nettle libpng) -ldnnl -ljpeg $mpi_libs -lgomp -lpthread -lm"

# One builder at a time (ctest runs the replays in parallel); the lock is released at exit.
exec 9>"$out/.lock"
flock 9

# ---- the library ----
lib=$out/lib/libtessera.a
objs=$out/lib/objs
mkdir -p "$objs"
if [ -f "$lib" ] && [ -n "$(find "$root/include" "$root/src" -name '*.h' -newer "$lib" | head -1)" ]; then
  rm -f "$objs"/*.o # a header changed: everything again
fi
if [ "$(cat "$objs/flags" 2>/dev/null)" != "$(echo $libflags src/kernels:-O0)" ]; then
  rm -f "$objs"/*.o # other flags (or compiler, libraries): everything again
  echo $libflags src/kernels:-O0 >"$objs/flags"
fi
declare -A extra=([rank_table]="$root/src/cli/rank_table.c")
# closure_sources: the src/*.c files whose objects the targets reach, from the normal build's
# objects in $FUZZ_OBJS (each target's undefined symbols, then those of every object that defines
# one, and so on, as the linker takes archive members); nothing when they are not there. Kept in
# build-fuzz/closure.list and reused while no target, no object there and not $FUZZ_OBJS changed
# (every fuzz_* ctest and both of .ci/run's calls ask: 2 s each to find it again).
closure_sources() {
  local dir=${FUZZ_OBJS:-$root/build/CMakeFiles/tessera_obj.dir} tmp=$out/closure list=$out/closure.list
  [ -d "$dir/src" ] || return 0
  if [ -s "$list" ] && [ "$(head -1 "$list")" = "$dir" ] &&
     [ -z "$(find "$root/tests/fuzz" "$root/src/cli/rank_table.c" "$dir/src" -newer "$list" \( -name '*.c' -o -name '*.c.o' \) | head -1)" ]; then
    tail -n +2 "$list"
    return 0
  fi
  rm -rf "$tmp" && mkdir -p "$tmp"
  for t in $all; do
    # shellcheck disable=SC2086
    clang -c -O0 -w -I"$root/include" -I"$root/src" $mpi_cflags "$root/tests/fuzz/fuzz_$t.c" -o "$tmp/fuzz_$t.o" || return 0
  done
  clang -c -O0 -w -I"$root/include" -I"$root/src" $mpi_cflags "$root/src/cli/rank_table.c" -o "$tmp/rank_table.o" || return 0
  { find "$dir/src" -name '*.c.o' -exec nm -A --defined-only {} + | awk '$(NF-1) != "U" {print "D", $1, $NF}'
    find "$dir/src" -name '*.c.o' -exec nm -A --undefined-only {} + | awk '{print "U", $1, $NF}'
    nm -A --undefined-only "$tmp"/*.o | awk '{print "T", $1, $NF}'; } |
  awk -v dir="$dir/" '
    { f = $2; sub(/:.*/, "", f) }
    $1 == "D" { if (!($3 in def)) def[$3] = f; next }
    $1 == "U" { und[f] = und[f] " " $3; next }
    { q[++n] = $3 }
    END {
      for (i = 1; i <= n; i++) {
        o = def[q[i]]
        if (o == "" || (o in seen)) continue
        seen[o] = 1
        m = split(und[o], u, " ")
        for (j = 1; j <= m; j++) q[++n] = u[j]
      }
      for (o in seen) { s = substr(o, length(dir) + 1); sub(/\.o$/, "", s); print s }
    }' | sort >"$tmp/list"
  [ -s "$tmp/list" ] || return 0
  { echo "$dir"; cat "$tmp/list"; } >"$list.tmp" && mv "$list.tmp" "$list"
  cat "$tmp/list"
}
if [ "${FUZZ_ALL_SOURCES:-0}" = 1 ]; then sources=""; else sources=$(closure_sources); fi
[ -n "$sources" ] || sources=$(cd "$root" && find src -name '*.c' ! -path 'src/cli/*' | sort)
declare -A want=()
stale=""
for s in $sources; do
  o=$objs/$(echo "${s%.c}" | tr / _).o
  want[$o]=1
  if [ ! -f "$o" ] || [ "$root/$s" -nt "$o" ]; then stale="$stale $s"; fi
done
for o in "$objs"/*.o; do # objects of sources that are gone
  if [ -e "$o" ] && [ -z "${want[$o]:-}" ]; then rm -f "$o" "$lib"; fi
done
if [ -n "$stale" ] || [ ! -f "$lib" ]; then
  echo "== compiling $(echo $stale | wc -w) library sources into $lib"
  # the kernels at -O0: no target reaches them, and their SIMD code takes ASan at -O1 over a minute
  export ROOT=$root OBJS=$objs LIBFLAGS=$libflags
  # shellcheck disable=SC2016
  if [ -n "$stale" ] && ! echo $stale | tr ' ' '\n' | nice xargs -P "$(nproc)" -I{} sh -c \
      'o=$OBJS/$(echo "{}" | sed "s/\.c$//" | tr / _).o; case "{}" in src/kernels/*) O=-O0 ;; *) O=-O1 ;; esac
       clang $LIBFLAGS $O -c "$ROOT/{}" -o "$o.tmp" && mv "$o.tmp" "$o"'; then
    echo "run.sh: the library does not compile" >&2
    exit 1
  fi
  rm -f "$lib" "$lib.tmp"
  ar rcs "$lib.tmp" "$objs"/*.o && mv "$lib.tmp" "$lib"
fi

# ---- the targets ----
for t in $targets; do
  if [ ! -f "$out/fuzz_$t" ] || [ "$out/fuzz_$t" -ot "$lib" ] || [ "$root/tests/fuzz/fuzz_$t.c" -nt "$out/fuzz_$t" ]; then
    # shellcheck disable=SC2086
    if ! clang $flags -fsanitize=fuzzer "$root/tests/fuzz/fuzz_$t.c" ${extra[$t]:-} "$lib" $libs -o "$out/fuzz_$t.tmp"; then
      if [ "${FUZZ_ALL_SOURCES:-0}" = 1 ]; then echo "run.sh: fuzz_$t does not link" >&2; exit 1; fi
      # the normal build's objects were older than the sources: every source, then again
      echo "== fuzz_$t needs more of the library than the normal build's objects said: compiling all of it"
      flock -u 9
      rm -f "$out/closure.list"
      FUZZ_ALL_SOURCES=1 exec "$0" "${orig_args[@]}"
    fi
    mv "$out/fuzz_$t.tmp" "$out/fuzz_$t"
  fi
done
flock -u 9

export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
opts="-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -seed=${FUZZ_SEED:-0}"
# run_one TARGET: replays or fuzzes it into build-fuzz/fuzz_TARGET.log, its status into .rc
run_one() {
  local t=$1 seeds=$root/tests/fuzz/corpus/$1 work=$out/corpus/$1 rc=0
  if [ $replay = 1 ]; then # every committed input once
    # shellcheck disable=SC2086
    "$out/fuzz_$t" $opts -runs=0 -artifact_prefix="$out/artifacts/$t-" "$seeds" >"$out/fuzz_$t.log" 2>&1 || rc=$?
  else
    mkdir -p "$work"
    cp -n "$seeds/"* "$work/" 2>/dev/null || true
    # shellcheck disable=SC2086
    nice "$out/fuzz_$t" "$work" -max_total_time="$secs" $opts -print_final_stats=1 \
      -artifact_prefix="$out/artifacts/$t-" >"$out/fuzz_$t.log" 2>&1 || rc=$?
  fi
  echo $rc >"$out/fuzz_$t.rc"
}
# FUZZ_JOBS targets at a time (default: one per core)
jobs_max=${FUZZ_JOBS:-$(nproc)}
for t in $targets; do
  rm -f "$out/fuzz_$t.rc"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  run_one "$t" &
done
wait
status=0
for t in $targets; do
  if [ $replay = 1 ]; then
    echo "== fuzz_$t: replayed the $(ls "$root/tests/fuzz/corpus/$t" | wc -l) inputs of tests/fuzz/corpus/$t"
  else
    echo "== fuzz_$t for ${secs}s (corpus $out/corpus/$t)"
    grep -E "^(stat::|#[0-9]+ +DONE|INFO: Loaded)" "$out/fuzz_$t.log" || true
  fi
  if [ "$(cat "$out/fuzz_$t.rc" 2>/dev/null)" != 0 ]; then
    status=1
    grep -E "==[0-9]+==ERROR|SUMMARY|runtime error|Test unit written|^fuzz_$t: " "$out/fuzz_$t.log" >&2 || true
    echo "run.sh: fuzz_$t failed; see $out/fuzz_$t.log and $out/artifacts/" >&2
  elif [ $replay = 0 ] && [ "${FUZZ_MERGE:-0}" = 1 ]; then
    "$out/fuzz_$t" -merge=1 "$root/tests/fuzz/corpus/$t" "$out/corpus/$t" 2>/dev/null
  fi
done
exit $status
