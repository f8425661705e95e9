#!/usr/bin/env bash
# The cost model from the command line: `tessera calibrate` writes a cluster description (to -o and
# to the cache "local" reads) that loads back; `tessera plan --cluster` prints the predicted step
# for a built-in, the calibrated machine and a file; an unknown cluster or a bad file is one line
# naming it, exit 2; a pipeline plan's stage cut is printed and, given back, is the same cut.
# Usage: planner_cli_test.sh path/to/tessera
set -u
bin=$1
fail=0
. "$(dirname "$0")/lib.sh"
plan_setup
small_gpt_cfg "$tmp/gpt.yaml"
run plan "$tmp/gpt.yaml" -n 1 --cluster local
if [ $rc = 0 ] && [ "$(echo "$out" | grep -c "not calibrated on this machine")" = 1 ] && echo "$out" | grep -q "^predicted step on local" &&
   echo "$out" | grep -q "a built-in estimate"; then ok "local before calibrating: a built-in estimate, said once"
else bad "local uncalibrated: rc $rc: $out"; fi
run calibrate -o "$tmp/mine.yaml"
if [ $rc = 0 ] && [ -s "$tmp/cache.yaml" ] && grep -q "^gemm_efficiency: " "$tmp/mine.yaml" && grep -q "^op_overhead: " "$tmp/mine.yaml"; then
  ok "calibrate wrote the cache and -o"
else bad "calibrate: rc $rc: $out"; fi
# the model's own operators: matmul and attention measured (the GPT has no convolution)
run calibrate "$tmp/gpt.yaml" --steps 2 -o "$tmp/model.yaml"
num() { sed -n "s/^$1: \([0-9.e+-]*\).*/\1/p" "$tmp/model.yaml"; }
if [ $rc = 0 ] && awk -v m="$(num efficiency_matmul)" -v a="$(num efficiency_attention)" -v c="$(num efficiency_conv)" \
     'BEGIN { exit !(m > 0 && m <= 1 && a > 0 && a <= 1 && c == 0) }' && echo "$out" | grep -q "^  matmul/dense .* of the peak" &&
   echo "$out" | grep -q "the cost model prices it"; then
  ok "calibrate CONFIG: matmul $(num efficiency_matmul), attention $(num efficiency_attention) of the peak; $(echo "$out" | grep "prices it" | sed 's/^ *//')"
else bad "calibrate CONFIG: rc $rc: $out"; fi
run calibrate "$tmp/gpt.yaml" --steps 0
if [ $rc = 2 ] && echo "$out" | grep -q -- "--steps needs"; then ok "calibrate --steps 0: exit 2"; else bad "calibrate --steps 0: rc $rc: $out"; fi
for c in local dgx-a100-80g dgx-h200 "$tmp/mine.yaml" "$tmp/model.yaml"; do
  run plan "$tmp/gpt.yaml" -n 2 --set parallel.mode=data_parallel --cluster "$c"
  if [ $rc = 0 ] && echo "$out" | grep -q "^predicted step on .*: [0-9.]* ms" && echo "$out" | grep -q "grad reduction"; then
    ok "plan --cluster $(basename "$c")"
  else bad "plan --cluster $c: rc $rc: $out"; fi
done
# a GPU cluster (h2d_bw): the batches' copies to the device priced, from its host link
run plan "$tmp/gpt.yaml" -n 2 --set parallel.mode=data_parallel --set train.batch_size=4096 --cluster dgx-h200
bt=$(echo "$out" | sed -n 's/^  batch to device *\([0-9.]*\) ms.*/\1/p')
if [ $rc = 0 ] && awk -v b="${bt:-0}" 'BEGIN { exit !(b > 0 && b < 1) }' && echo "$out" | grep -q "H200-SXM-141GB" &&
   echo "$out" | grep -q "host copies 55.0 GB/s in"; then ok "plan --cluster dgx-h200: batch to device $bt ms"
else bad "plan --cluster dgx-h200: rc $rc: $out"; fi
run plan "$tmp/gpt.yaml" -n 1 --cluster dgx-b200
if [ $rc = 2 ] && [ "$(echo "$out" | grep -c "^tessera:")" = 1 ] && echo "$out" | grep -q "dgx-b200"; then ok "unknown cluster: exit 2"
else bad "unknown cluster: rc $rc: $out"; fi
printf 'name: x\nnodes: 1\nflops: 3\n' > "$tmp/bad.yaml"
run plan "$tmp/gpt.yaml" -n 1 --cluster "$tmp/bad.yaml"
if [ $rc = 2 ] && echo "$out" | grep -q "bad.yaml:3: unknown cluster key 'flops'"; then ok "bad cluster file: exit 2 naming the line and key"
else bad "bad cluster file: rc $rc: $out"; fi
# the search: every plan priced, the fastest that fits chosen; deterministic; --json; --fix
run plan "$tmp/gpt.yaml" -n 4 --cluster dgx-a100-80g --search
if [ $rc = 0 ] && echo "$out" | grep -q "^search on 4 devices of dgx-a100-80g: [0-9]* candidate plans, [0-9]* built" && echo "$out" | grep -q "^chosen: dp="; then
  ok "plan --search: $(echo "$out" | grep '^chosen')"
else bad "plan --search: rc $rc: $out"; fi
first=$out
run plan "$tmp/gpt.yaml" -n 4 --cluster dgx-a100-80g --search
# (the search's progress lines on stderr, after 3 s: under the sanitizers, depend on the clock)
prog='^search on\|^tessera warning: auto_parallel: searching '
[ "$(echo "$out" | grep -v "$prog")" = "$(echo "$first" | grep -v "$prog")" ] && ok "the search is deterministic" ||
  bad "two searches differ"
run plan "$tmp/gpt.yaml" -n 4 --cluster dgx-a100-80g --json
if [ $rc = 0 ] && echo "$out" | grep -v "$prog" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["dp"]*d["tp"]*d["pp"]==4 and d["fits"]' 2>/dev/null; then
  ok "plan --json: one object"
else bad "plan --json: rc $rc: $out"; fi
run plan "$tmp/gpt.yaml" -n 4 --cluster dgx-a100-80g --fix dp=1,tp=2,pp=2,micro_batches=4
if [ $rc = 0 ] && echo "$out" | grep -q "pipeline: 2 stages of 2 semi_auto_parallel ranks" && echo "$out" | grep -q "^predicted step"; then
  ok "plan --fix dp=1,tp=2,pp=2"
else bad "plan --fix: rc $rc: $out"; fi
# a pipeline plan carries its stage cut: --json's "stages" (parallel.stages' form) covers both
# pieces, and given back as parallel.stages it is the same cut (the same pieces, the same price)
run plan "$tmp/gpt.yaml" -n 2 --cluster dgx-a100-80g --fix dp=1,tp=1,pp=2,micro_batches=4 --json
stages=$(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin)["stages"]; assert sorted(set(d.values()))==[0,1]; print("{"+", ".join("%s: %d" % (k, v) for k, v in d.items())+"}")' 2>/dev/null)
if [ $rc = 0 ] && [ -n "$stages" ]; then
  first=$out
  run plan "$tmp/gpt.yaml" -n 2 --cluster dgx-a100-80g --fix dp=1,tp=1,pp=2,micro_batches=4 --json --set parallel.pipeline_stages=2 --set "parallel.stages=$stages"
  if [ $rc = 0 ] && [ "$out" = "$first" ]; then ok "plan --fix pp=2: its stage cut ($stages) given back is the same plan"
  else bad "the stage cut given back: rc $rc: $out (first: $first)"; fi
else bad "plan --fix pp=2 --json stages: rc $rc: $out"; fi
if [ -n "${TESSERA_TEST_SANITIZED:-}" ]; then # scripts/test.sh --asan: 130 s there, pure search compute
  echo "skip: plan --search of gpt-18b on 16 devices under the sanitizers (the Release run checks it; the same search code runs on the small model above)"
else
run plan "$(dirname "$0")/../../examples/megatron/gpt-18b.yaml" -n 16 --cluster dgx-a100-80g --search
if [ $rc = 0 ] && echo "$out" | grep -q "^chosen: .*pp=[2-9]" && echo "$out" | grep -q "^stage cuts ([0-9]* rules, as parallel.stages):" &&
   echo "$out" | grep -q "^  piece 0 on stage 0: transformer.embedding" && echo "$out" | grep -q "^  piece 1 on stage 1: "; then
  ok "plan --search prints the chosen pipeline's stage cut: $(echo "$out" | grep '^stage cuts')"
else bad "plan --search stage cuts: rc $rc: $out"; fi
fi
run plan "$tmp/gpt.yaml" -n 4 --cluster dgx-a100-80g --fix dp=3,tp=2
if [ $rc = 2 ] && echo "$out" | grep -q "is not the 4 devices"; then ok "--fix not matching the devices: exit 2"
else bad "--fix mismatch: rc $rc: $out"; fi
run plan "$tmp/gpt.yaml" -n 2 --cluster dgx-a100-80g --search --set train.max_memory_mb=0.01
if [ $rc = 2 ] && echo "$out" | grep -q "no plan fits 2 devices of dgx-a100-80g: the smallest needs .* [KMGT]*i*B over the limit"; then
  ok "nothing fits: exit 2 saying by how much"
else bad "nothing fits: rc $rc: $out"; fi
# auto_parallel trains the searched plan, as the single process does
if command -v mpirun >/dev/null; then
  mpi_job 2
  export OMP_NUM_THREADS=1
  one=$("$bin" train "$tmp/gpt.yaml" --set log.progress=lines 2>&1 | grep "^step 2/2")
  two=$("${mpi[@]}" "$bin" train "$tmp/gpt.yaml" --set parallel.mode=auto_parallel --set log.progress=lines 2>&1 | grep "^step 2/2")
  if [ -n "$one" ] && [ "$(echo "$one" | awk '{print $6}')" = "$(echo "$two" | awk '{print $6}')" ]; then
    ok "auto_parallel on 2 ranks: the single process's loss ($(echo "$two" | awk '{print $6}'))"
  else bad "auto_parallel: '$two' vs '$one'"; fi
else echo "SKIP part: no mpirun for the auto_parallel job"; fi
exit $fail
