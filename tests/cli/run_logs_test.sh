#!/usr/bin/env bash
# A run's logs as a user reads them (issue 31): under mpirun / tessera launch with stdout a file no
# progress-bar escapes (a rank's stdout is mpirun's pseudo-terminal whatever the launcher's is), the
# bar drawn only when the launcher's own stdout is a terminal (TESSERA_TTY); epochs numbered the
# same (1-based) in the metrics file and on the console; a rerun keeps the previous run's metrics
# file (numbered, said in the first line) and a resume appends to it.
# Usage: run_logs_test.sh path/to/tessera
set -u
bin=$1
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
cd "$tmp" || exit 1
idx_split d train 64 8 8
idx_split d t10k 32 8 8
mlp_cfg c.yaml d 8 16 # 4 steps per epoch
sed -i 's/^log: .*/log: {progress: auto, metrics: m\/metrics.jsonl}/' c.yaml
esc=$'\r\|\x1b'

# ---- the progress bar under MPI ----
if command -v mpirun >/dev/null; then
  mpi_job 2
  "$bin" launch -n 2 -- train c.yaml --set checkpoint.dir=l1 --set log.metrics= > launch.txt 2>&1; rc=$?
  if [ "$rc" = 0 ] && grep -q "^step 8/8 " launch.txt && ! grep -q "$esc" launch.txt; then ok "launch -n 2 > file: lines, no escapes"
  else bad "launch -n 2 > file -> $rc: $(cat -A launch.txt | head -20)"; fi
  "${mpi[@]}" "$bin" train c.yaml --set checkpoint.dir=l2 --set log.metrics= --set parallel.mode=data_parallel > mpirun.txt 2>&1; rc=$?
  if [ "$rc" = 0 ] && grep -q "^step 8/8 " mpirun.txt && ! grep -q "$esc" mpirun.txt; then ok "mpirun -n 2 > file: no escapes"
  else bad "mpirun -n 2 > file -> $rc: $(cat -A mpirun.txt | head -20)"; fi
  # what tessera launch passes when its own stdout is a terminal: rank 0 draws the bar
  "${mpi[@]}" -x TESSERA_TTY=1 "$bin" train c.yaml --set checkpoint.dir=l3 --set log.metrics= \
    --set parallel.mode=data_parallel > tty.txt 2>&1; rc=$?
  if [ "$rc" = 0 ] && grep -q $'\r\x1b\\[Kepoch 2/2' tty.txt; then ok "TESSERA_TTY=1: rank 0 draws the bar"
  else bad "TESSERA_TTY=1 -> $rc: $(cat -A tty.txt | head -20)"; fi
  # tessera launch on a terminal (script(1) gives it one) passes it on
  if command -v script >/dev/null; then
    script -qec "$bin launch -n 2 -- train c.yaml --set checkpoint.dir=l4 --set log.metrics=" script.txt >/dev/null 2>&1
    if grep -q $'\x1b\\[Kepoch 2/2' script.txt; then ok "launch on a terminal: the bar"
    else bad "launch on a terminal: no bar: $(cat -A script.txt | head -20)"; fi
  fi
else
  echo "(no mpirun: the MPI cases skipped)"
fi

# ---- epochs: the same numbers in the metrics file and on the console ----
run train c.yaml --set log.progress=lines --set train.eval_every=0 --set checkpoint.dir=ck
for s in 1 4 5 8; do
  con=$(grep -o "^step $s/8  epoch [0-9]*" <<<"$out" | awk '{print $4}')
  met=$(grep "\"type\":\"step\",\"step\":$s," m/metrics.jsonl | grep -o '"epoch":[0-9]*' | cut -d: -f2)
  if [ -n "$con" ] && [ "$con" = "$met" ]; then ok "step $s: epoch $con in both"; else bad "step $s: console epoch '$con', metrics '$met'"; fi
done
evc=$(grep -o "^eval  step 4  epoch [0-9]*" <<<"$out" | awk '{print $5}')
evm=$(grep '"type":"eval","step":4,' m/metrics.jsonl | grep -o '"epoch":[0-9]*' | cut -d: -f2)
if [ "$evc" = 1 ] && [ "$evm" = 1 ]; then ok "eval after epoch 1: epoch 1 in both"; else bad "eval epoch: console '$evc', metrics '$evm'"; fi

# ---- a rerun keeps the previous run's metrics; a resume appends ----
cp m/metrics.jsonl first.jsonl
run train c.yaml --set log.progress=lines --set train.steps=3 --set checkpoint.dir=ck2
first=$(head -n1 <<<"$out")
if [ "$rc" = 0 ] && [ "$first" = "metrics: m/metrics.jsonl (the previous run's kept as m/metrics.1.jsonl)" ] &&
   cmp -s first.jsonl m/metrics.1.jsonl && grep -q '"type":"end","steps":3,' m/metrics.jsonl && [ "$(grep -c '"type":"run"' m/metrics.jsonl)" = 1 ]
then ok "rerun: the previous run's file kept as metrics.1.jsonl, said first: $first"
else bad "rerun -> $rc ($first): $(ls m)"; fi
run train c.yaml --set log.progress=off --set train.steps=2 --set checkpoint.dir=ck3
if [ "$rc" = 0 ] && grep -q "log.metrics: m/metrics.jsonl exists (a previous run's): kept as m/metrics.2.jsonl" <<<"$out" &&
   grep -q '"type":"end","steps":3,' m/metrics.2.jsonl && grep -q '"type":"end","steps":2,' m/metrics.jsonl
then ok "a third run: metrics.2.jsonl (said with log.progress off too)"; else bad "third run -> $rc: $out; $(ls m)"; fi
run train c.yaml --set log.progress=lines --set train.steps=4 --set checkpoint.dir=ck3 --set checkpoint.resume=auto \
  --set checkpoint.strict=false
if [ "$rc" = 0 ] && [ ! -e m/metrics.3.jsonl ] && ! grep -q "kept as" <<<"$out" && [ "$(grep -c '"type":"end"' m/metrics.jsonl)" = 2 ]
then ok "a resume appends to the file"; else bad "resume -> $rc: $out; $(ls m)"; fi
exit $fail
