#!/usr/bin/env bash
# A rank that never reaches a native blocking all-reduce (tests/comm/test_watchdog.c --stuck):
# the others' watchdog must end the job within a bounded time, exit 75 (TS_COMM_EXIT_TIMEOUT),
# with one message naming the collective, its sequence number, the timeout and the missing rank
# (or, when MPI was initialised below MPI_THREAD_MULTIPLE, saying why it cannot be named).
# Usage: watchdog_test.sh path/to/test_watchdog
set -u
bin=$1
fail=0
command -v mpirun >/dev/null || { echo "SKIP: no mpirun in PATH"; exit 77; }
mpi=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
W='the watchdog ends the job \(exit 75: a blocking MPI call cannot be interrupted\)'
# case NAME NP MODE REGEX: the job ends with exit 75 in under 20 s (timeout 2 s; the stuck rank
# would sleep 60 s) and prints a line matching REGEX
case_() {
  local name=$1 np=$2 mode=$3 want=$4 t0 dt out rc
  t0=$(date +%s)
  out=$(timeout 90 "${mpi[@]}" -n "$np" "$bin" --stuck "$mode" 2>&1); rc=$?
  dt=$(( $(date +%s) - t0 ))
  if [ "$rc" = 75 ] && [ "$dt" -lt 20 ] && grep -qE "$want" <<<"$out"; then
    echo "ok: $name -> exit $rc after ${dt} s: $(grep -m1 -E "$want" <<<"$out")"
  else
    echo "FAIL: $name -> exit $rc after ${dt} s (want 75, < 20 s, a line matching: $want)"; echo "$out"; fail=1
  fi
}
case_ "rank 1 asleep" 2 sleep \
  "^tessera error: \[rank 0 of 2\] rank 0: allreduce\(sum\) #1 \(f32 x 1000\) did not complete within 2 s: rank 1 of 2 never reached it \(stalled or dead\); $W"
case_ "rank 1 stopped (SIGSTOP)" 2 stop \
  "rank 0: allreduce\(sum\) #1 \(f32 x 1000\) did not complete within 2 s: rank 1 of 2 never reached it \(stalled or dead\); $W"
case_ "rank 1 asleep, 4 ranks" 4 sleep \
  "rank [023]: allreduce\(sum\) #1 \(f32 x 1000\) did not complete within 2 s: rank 1 of 4 never reached it \(stalled or dead\); $W"
case_ "rank 3 asleep in a group of 2" 4 group \
  "rank 1 \(0 of 2 in its group\): allreduce\(sum\) #1 \(f32 x 1000\) did not complete within 2 s: rank 3 \(1 in the group\) of the group of 2 never reached it \(stalled or dead\); $W"
case_ "MPI at MPI_THREAD_FUNNELED" 2 funneled \
  "rank 0: allreduce\(sum\) #1 \(f32 x 1000\) did not complete within 2 s \(which of the other 1 rank of the job never reached it cannot be told: MPI provides MPI_THREAD_FUNNELED, not MPI_THREAD_MULTIPLE, so the watchdog may not ask them\); $W"
# ts_comm_abort_all (what the CLI calls when a rank fails): when every rank fails, each one's line
# is out before the job ends (rank 3 reports 2.1 s after rank 0 aborts: ts_comm_abort would have
# ended the job first); when one rank fails, the job still ends (after its 3 s grace), exit 5
out=$(timeout 120 "${mpi[@]}" -n 4 "$bin" --abort all 2>&1); rc=$?
n=$(grep -c "^rank [0-3] failed" <<<"$out")
if [ "$rc" = 5 ] && [ "$n" = 4 ]; then echo "ok: every rank fails -> exit 5, all 4 lines out"
else echo "FAIL: every rank fails -> exit $rc, $n of 4 lines (want exit 5, 4 lines)"; echo "$out"; fail=1; fi
out=$(timeout 120 "${mpi[@]}" -n 2 "$bin" --abort one 2>&1); rc=$?
if [ "$rc" = 5 ] && grep -q "^rank 1 failed" <<<"$out"; then echo "ok: one rank fails -> exit 5 after the grace"
else echo "FAIL: one rank fails -> exit $rc (want 5 and rank 1's line)"; echo "$out"; fail=1; fi
exit $fail
