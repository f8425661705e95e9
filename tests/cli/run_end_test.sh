#!/usr/bin/env bash
# The end line says what a run did (issue 33):
#  1. resuming a run that already finished (checkpoint.resume=auto after the last step) trains nothing and says
#     so: "done: nothing trained: the checkpoint resumed is at the run's end (step 4); it records no loss", exit 0,
#     no "final loss 0.0000"; the metrics end record has steps_run 0 and no final_loss;
#  2. a run whose every step overflowed and was skipped (train.loss_scale fixed at 1e30, f16 O2) ends with a
#     warning in the end line, "no step was applied: all 4 overflowed and were skipped", exit 0 (as PyTorch's
#     GradScaler and MindSpore's FixedLossScaleManager(drop_overflow_update) skip silently, a warning, not an
#     error); its end record has steps_applied 0. A normal run's end line has no such note.
# Usage: run_end_test.sh path/to/tessera
set -u
bin=$1
fail=0
. "$(dirname "$0")/lib.sh"
mnist_scratch 64 16
mlp_cfg "$tmp/c.yaml" "$tmp/d" 4 16 "checkpoint: {dir: '$tmp/ck', save_steps: 2}" "log.metrics: '$tmp/m.jsonl'"

run train "$tmp/c.yaml"
[ $rc = 0 ] && echo "$out" | grep -q "^done: 4 steps in .* final loss [0-9.]*, test accuracy [0-9.]*%$" &&
  ok "a normal run: $(echo "$out" | tail -1)" || bad "normal run: rc $rc: $out"
# 1. resumed at its end
run train "$tmp/c.yaml" --set checkpoint.resume=auto
last=$(echo "$out" | tail -1)
if [ $rc = 0 ] && [ "$last" = "done: nothing trained: the checkpoint resumed is at the run's end (step 4); it records no loss" ] &&
   ! echo "$out" | grep -q "final loss"; then ok "resumed at the end: $last"; else bad "resumed at the end: rc $rc: $out"; fi
end=$(grep '"type":"end"' "$tmp/m.jsonl" | tail -1)
echo "$end" | grep -q '"steps_run":0' && ! echo "$end" | grep -q final_loss && ok "end record: steps_run 0, no final_loss" ||
  bad "end record: $end"
# 2. every step skipped
rm -f "$tmp/m.jsonl"
run train "$tmp/c.yaml" --set checkpoint.dir= --set train.loss_scale=fixed --set train.loss_scale_value=1e30 \
  --set train.amp_level=O2 --set train.amp_dtype=f16
last=$(echo "$out" | tail -1)
if [ $rc = 0 ] && echo "$last" | grep -q "^done: 4 steps in .*; warning: no step was applied: all 4 overflowed and were skipped"; then
  ok "every step skipped: $last"; else bad "every step skipped: rc $rc: $out"; fi
grep '"type":"end"' "$tmp/m.jsonl" | grep -q '"steps_run":4,"steps_applied":0' && ok "end record: steps_applied 0" ||
  bad "end record: $(grep '"type":"end"' "$tmp/m.jsonl")"
# progress off: the same warning through the log
run train "$tmp/c.yaml" --set checkpoint.dir= --set train.loss_scale=fixed --set train.loss_scale_value=1e30 \
  --set train.amp_level=O2 --set train.amp_dtype=f16 --set log.progress=off
[ $rc = 0 ] && echo "$out" | grep -q "warning: no step was applied" && ok "progress off: the warning logged" ||
  bad "progress off: rc $rc: $out"
exit $fail
