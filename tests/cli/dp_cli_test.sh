#!/usr/bin/env bash
# Data-parallel jobs from the command line (2 ranks under mpirun).
#  0. `tessera launch -n 2 -- train` with data_parallel: one progress stream (rank 0), a
#     checkpoint whose single-process evaluation gives the accuracy the job reported, and resume;
# Failure handling: never a silent hang.
#  1. a rank killed mid-training: the job exits non-zero within a bounded time;
#  2. a rank stopped (alive but silent): the others' timeout (parallel.comm_timeout) reports the
#     collective it was waiting in and names the stopped rank, and the job exits non-zero; without
#     overlap (2b) every collective of the step is native and the watchdog thread ends the job
#     (exit 75, TS_COMM_EXIT_TIMEOUT);
#  3. a configuration error seen by every rank: exit 2 at once.
# Usage: dp_fail_test.sh path/to/tessera
set -u
bin=$1
fail=0
# exit 77: skipped (SKIP_RETURN_CODE in CMakeLists.txt)
fm=${TS_TEST_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
command -v mpirun >/dev/null || { echo "SKIP: no mpirun in PATH"; exit 77; }
[ -r "$fm/train-images-idx3-ubyte.gz" ] || { echo "SKIP: Fashion-MNIST not installed in $fm"; exit 77; }
mpi=(mpirun --oversubscribe -n 2)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
cat > "$tmp/long.yaml" <<YAML
model: {name: mlp, hidden: [32]}
data: {name: fashion_mnist, path: '$fm', train_limit: 2048, test_limit: 256, num_workers: 1}
train: {steps: 1000000, batch_size: 32, eval_every: -1, log_every: 20}
parallel: {mode: data_parallel}
log: {progress: lines}
YAML

# 0. a short data-parallel run through the launcher, then the same checkpoint evaluated alone
cat > "$tmp/dp.yaml" <<YAML
model: {name: mlp, hidden: [32]}
data:
  name: fashion_mnist
  path: '$fm'
  train_limit: 1024
  test_limit: 500
  transforms: [{name: to_float, scale: 0.00392156862745098}, hwc_to_chw]
train: {epochs: 2, batch_size: 64, log_every: 8}
optimizer: {name: momentum, lr: 0.05}
parallel: {mode: data_parallel}
checkpoint: {dir: $tmp/ck, save_epochs: 1}
log: {metrics: $tmp/m.jsonl, progress: lines}
YAML
out=$(timeout 300 "$bin" launch -n 2 -- train "$tmp/dp.yaml" 2>&1); rc=$?
ck=$(ls "$tmp"/ck/*.safetensors 2>/dev/null | tail -1)
acc=$(grep -o 'test accuracy [0-9.]*%' <<<"$out" | head -1)
if [ "$rc" = 0 ] && [ "$(grep -c 'test accuracy' <<<"$out")" = 1 ] && [ -n "$ck" ] && grep -q '"type":"end"' "$tmp/m.jsonl"; then
  echo "ok: launch -n 2 data_parallel -> $acc, $(basename "$ck")"
else echo "FAIL: launch -n 2 data_parallel -> exit $rc: $out"; fail=1; fi
if [ -n "$ck" ]; then
  ev=$(OMP_NUM_THREADS=2 "$bin" eval "$tmp/dp.yaml" --set parallel.mode=stand_alone --checkpoint "$ck" 2>&1)
  top1=$(sed -n 's/.*top1 \([0-9.]*\)%.*/\1/p' <<<"$ev" | head -1)
  want=$(sed -n 's/.*accuracy \([0-9.]*\)%.*/\1/p' <<<"$acc")
  if [ -n "$top1" ] && [ "$top1" = "$want" ]; then echo "ok: the checkpoint evaluated alone: top1 $top1% (the job said $want%)"
  else echo "FAIL: eval alone top1 '$top1' vs the job's '$want': $ev"; fail=1; fi
  out=$(timeout 300 "$bin" launch -n 2 -- train "$tmp/dp.yaml" --set train.epochs=3 --set checkpoint.resume=auto \
        --set checkpoint.strict=false 2>&1); rc=$?
  if [ "$rc" = 0 ] && grep -q "resumed from" <<<"$out"; then echo "ok: data-parallel resume"
  else echo "FAIL: data-parallel resume -> exit $rc: $out"; fail=1; fi
fi

# pid of the tessera process of world rank $1 (OpenMPI puts the rank in each process's environment)
rank_pid() {
  for p in $(pgrep -f "tessera train $tmp/long.yaml"); do
    if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then echo "$p"; return; fi
  done
}
# waits until rank $1 exists and has trained for a while (the job's log shows steps)
wait_running() {
  for _ in $(seq 1 300); do
    if [ -n "$(rank_pid "$1")" ] && grep -q "loss" "$2" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

# 1. kill -9 one rank
t0=$(date +%s)
"${mpi[@]}" "$bin" train "$tmp/long.yaml" > "$tmp/kill.log" 2>&1 &
job=$!
if wait_running 1 "$tmp/kill.log"; then
  kill -9 "$(rank_pid 1)"
  ( sleep 120; kill -9 $job ) >/dev/null 2>&1 & guard=$!  # no pipe of ctest held open
  wait $job; rc=$?
  pkill -P $guard sleep 2>/dev/null; kill $guard 2>/dev/null
  dt=$(( $(date +%s) - t0 ))
  if [ "$rc" != 0 ] && [ "$dt" -lt 120 ]; then echo "ok: killed rank -> job exit $rc after ${dt} s"
  else echo "FAIL: killed rank -> exit $rc after ${dt} s"; cat "$tmp/kill.log"; fail=1; fi
else
  echo "FAIL: the job did not start"; cat "$tmp/kill.log"; fail=1
fi

# 2. SIGSTOP one rank: rank 0's watchdog names the rank and the collective
"${mpi[@]}" "$bin" train "$tmp/long.yaml" --set parallel.comm_timeout=3 > "$tmp/stop.log" 2>&1 &
job=$!
if wait_running 1 "$tmp/stop.log"; then
  p1=$(rank_pid 1)
  kill -STOP "$p1"
  t0=$(date +%s)
  ( sleep 120; kill -9 $job ) >/dev/null 2>&1 & guard=$!  # no pipe of ctest held open
  wait $job; rc=$?
  pkill -P $guard sleep 2>/dev/null; kill $guard 2>/dev/null
  kill -9 "$p1" 2>/dev/null
  dt=$(( $(date +%s) - t0 ))
  if [ "$rc" != 0 ] && [ "$dt" -lt 60 ] &&
     grep -qE "rank 0.*(allreduce|allgather).*#[0-9]+.*did not complete within 3 s.*: rank 1 of 2 never reached it \(stalled or dead\)" "$tmp/stop.log"; then
    echo "ok: stopped rank -> exit $rc after ${dt} s: $(grep -m1 'did not complete' "$tmp/stop.log")"
  else echo "FAIL: stopped rank -> exit $rc after ${dt} s"; cat "$tmp/stop.log"; fail=1; fi
else
  echo "FAIL: the job did not start"; cat "$tmp/stop.log"; fail=1
fi

# 2b. the same without overlap: every collective of a step is a native blocking call (the
# buckets after backward, the loss), so the watchdog thread ends the job: exit 75, its message
"${mpi[@]}" "$bin" train "$tmp/long.yaml" --set parallel.comm_timeout=3 --set parallel.overlap=false > "$tmp/stop2.log" 2>&1 &
job=$!
if wait_running 1 "$tmp/stop2.log"; then
  p1=$(rank_pid 1)
  kill -STOP "$p1"
  t0=$(date +%s)
  ( sleep 120; kill -9 $job ) >/dev/null 2>&1 & guard=$!  # no pipe of ctest held open
  wait $job; rc=$?
  pkill -P $guard sleep 2>/dev/null; kill $guard 2>/dev/null
  kill -9 "$p1" 2>/dev/null
  dt=$(( $(date +%s) - t0 ))
  if [ "$rc" = 75 ] && [ "$dt" -lt 60 ] &&
     grep -qE "rank 0: allreduce\((mean|sum)\) #[0-9]+ \(f32 x [0-9]+\) did not complete within 3 s: rank 1 of 2 never reached it \(stalled or dead\); the watchdog ends the job \(exit 75" "$tmp/stop2.log"; then
    echo "ok: stopped rank, no overlap -> exit $rc after ${dt} s: $(grep -m1 'did not complete' "$tmp/stop2.log")"
  else echo "FAIL: stopped rank, no overlap -> exit $rc after ${dt} s (want 75 and the watchdog's message)"; cat "$tmp/stop2.log"; fail=1; fi
else
  echo "FAIL: the job did not start"; cat "$tmp/stop2.log"; fail=1
fi

# 3. a configuration error seen by every rank: exit 2, one line per rank, no hang
out=$(timeout 120 "${mpi[@]}" "$bin" train "$tmp/long.yaml" --set train.batch_size=33 2>&1); rc=$?
if [ "$rc" = 2 ] && grep -q "must divide by the 2 ranks" <<<"$out"; then echo "ok: indivisible batch -> exit 2"
else echo "FAIL: indivisible batch -> exit $rc: $out"; fail=1; fi
exit $fail
