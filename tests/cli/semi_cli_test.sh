#!/usr/bin/env bash
# semi_auto_parallel from the command line (4 ranks under mpirun), against one process:
#  0. a small GPT on a text file with Megatron-style strategies, as tensor-parallel 4 and as
#     tensor-parallel 2 x data-parallel 2: every step's loss and the final evaluation equal the
#     single-process run (within 2e-4 relative: only summation order differs);
#  1. its checkpoint (sliced, checkpoint.format auto: each rank wrote its slices) evaluated by one process gives the
#     job's accuracy; resuming it under another layout (TP2 x DP2) continues the same run;
#  2. the strategy checkpoint saved by one job, loaded by another, gives the same run;
#  3. `tessera plan` on the GPT: strategies, the collectives and per-rank memory;
#  4. refusals before anything runs, one line each, exit 2: a cut that does not divide its
#     dimension, a product that does not divide the device count, a shared parameter cut two
#     ways, an operator name that matches nothing.
# Usage: semi_cli_test.sh path/to/tessera
set -u
bin=$1
fail=0
# exit 77: skipped (SKIP_RETURN_CODE in CMakeLists.txt)
. "$(dirname "$0")/lib.sh"
mpi_job 4
command -v python3 >/dev/null || { echo "SKIP: no python3 in PATH (compares the loss listings)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# any text will do; Debian always has its licence texts
cat /usr/share/common-licenses/GPL-3 > "$tmp/input.txt" 2>/dev/null || seq 1 20000 > "$tmp/input.txt"

strat() { gpt_strategies "$@"; } # D T (tests/cli/lib.sh)
base() {
  cat <<YAML
model: {name: gpt, n_layer: 2, n_head: 4, n_embd: 32, block_size: 32, vocab_size: 256}
data: {name: text, path: $tmp/input.txt, seq_len: 32, val_fraction: 0.05, transforms: []}
train: {steps: 6, batch_size: 8, eval_every: -1, log_every: 1, eval_batch_size: 8, seed: 5}
optimizer: {name: adamw, lr: 3.0e-3, weight_decay: 0.1, clip_grad_norm: 1.0, schedule: {name: constant}}
log: {progress: lines}
YAML
}
base > "$tmp/one.yaml"
{ base; echo "parallel:"; echo "  mode: semi_auto_parallel"; strat 1 4; } > "$tmp/tp4.yaml"
{ base; echo "parallel:"; echo "  mode: semi_auto_parallel"; strat 2 2; } > "$tmp/tp2dp2.yaml"

losses() { loss_listing "$1"; }
same() { same_listing "$1" "$2"; } # within 2e-4 relative (lib.sh)

out=$(timeout 300 "$bin" train "$tmp/one.yaml" --set log.metrics="$tmp/one.jsonl" --set checkpoint.dir="$tmp/ck1" --set checkpoint.save_last=true 2>&1) \
  || { echo "FAIL: one process: $out"; fail=1; }
losses "$tmp/one.jsonl" > "$tmp/one.txt"
for lay in tp4 tp2dp2; do
  out=$(timeout 300 "${mpi[@]}" "$bin" train "$tmp/$lay.yaml" --set log.metrics="$tmp/$lay.jsonl" \
        --set checkpoint.dir="$tmp/ck_$lay" --set checkpoint.save_last=true \
        --set parallel.strategy_ckpt_save_file="$tmp/$lay.json" 2>&1); rc=$?
  losses "$tmp/$lay.jsonl" > "$tmp/$lay.txt" 2>/dev/null
  if [ "$rc" = 0 ] && same "$tmp/$lay.txt" "$tmp/one.txt"; then
    echo "ok: $lay on 4 ranks = one process: $(tr '\n' ' ' < "$tmp/$lay.txt" | cut -c1-150)"
  else echo "FAIL: $lay (exit $rc): $(paste "$tmp/$lay.txt" "$tmp/one.txt" | tr '\n' ';') $out"; fail=1; fi
done
# 1. the checkpoint of the TP4 job, alone, and resumed as TP2 x DP2
ck=$(ls -d "$tmp"/ck_tp4/ckpt-* 2>/dev/null | tail -1) # sliced (a folder): TP4 holds slices
if [ -n "$ck" ]; then
  ev=$(OMP_NUM_THREADS=2 "$bin" eval "$tmp/one.yaml" --checkpoint "$ck" 2>&1)
  top1=$(sed -n 's/.*top1 \([0-9.]*\)%.*/\1/p' <<<"$ev" | head -1)
  want=$(python3 -c "print('%.2f'%(100*float(open('$tmp/tp4.txt').read().split('eval')[1].split()[1])))" 2>/dev/null)
  if [ -n "$top1" ] && [ "$top1" = "$want" ]; then echo "ok: the TP4 checkpoint evaluated by one process: top1 $top1% (the job: $want%)"
  else echo "FAIL: eval alone '$top1' vs the job's '$want': $ev"; fail=1; fi
  # 3 more steps from the TP4 checkpoint as TP2 x DP2 = 3 more steps from the one-process one
  for lay in one tp2dp2; do
    run=("$bin"); [ $lay = tp2dp2 ] && run=("${mpi[@]}" "$bin")
    src=$ck; [ $lay = one ] && src=$(ls "$tmp"/ck1/*.safetensors | tail -1)
    timeout 300 "${run[@]}" train "$tmp/$lay.yaml" --set train.steps=9 --set checkpoint.resume="$src" --set checkpoint.strict=false \
      --set log.metrics="$tmp/r_$lay.jsonl" > "$tmp/r_$lay.out" 2>&1 || { echo "FAIL: resume $lay: $(cat "$tmp/r_$lay.out")"; fail=1; }
    losses "$tmp/r_$lay.jsonl" > "$tmp/r_$lay.txt" 2>/dev/null
  done
  if same "$tmp/r_tp2dp2.txt" "$tmp/r_one.txt" && grep -q "resumed from" "$tmp/r_tp2dp2.out"; then
    echo "ok: a TP4 checkpoint resumed as TP2 x DP2 continues like one process: $(tr '\n' ' ' < "$tmp/r_tp2dp2.txt" | cut -c1-80)"
  else echo "FAIL: resume across layouts: $(paste "$tmp/r_tp2dp2.txt" "$tmp/r_one.txt" | tr '\n' ';')"; fail=1; fi
else echo "FAIL: the TP4 job wrote no checkpoint"; fail=1; fi
# 2. the saved strategy checkpoint drives another job
if [ -s "$tmp/tp4.json" ]; then
  { base; echo "parallel: {mode: semi_auto_parallel, strategy_ckpt_load_file: $tmp/tp4.json}"; } > "$tmp/fromfile.yaml"
  timeout 300 "${mpi[@]}" "$bin" train "$tmp/fromfile.yaml" --set log.metrics="$tmp/ff.jsonl" > "$tmp/ff.out" 2>&1
  losses "$tmp/ff.jsonl" > "$tmp/ff.txt" 2>/dev/null
  if same "$tmp/ff.txt" "$tmp/tp4.txt" && grep -q '"transformer.h.0.mlp.c_fc.dense"' "$tmp/tp4.json"; then
    echo "ok: strategy_ckpt_save_file -> strategy_ckpt_load_file reproduces the TP4 run"
  else echo "FAIL: strategy file round trip: $(cat "$tmp/ff.out")"; fail=1; fi
else echo "FAIL: no strategy checkpoint saved"; fail=1; fi
# 3. tessera plan
pl=$("$bin" plan "$tmp/tp4.yaml" -n 4 2>&1); rc=$?
if [ "$rc" = 0 ] && grep -q "transformer.h.1.attn.attention .*user .*((1,4,1,1)" <<<"$pl" &&
   grep -q "partial sums of transformer.h.0.mlp.c_proj.dense" <<<"$pl" &&
   grep -q "parameters .* of .*(0.2" <<<"$pl" && grep -q "activations (step)" <<<"$pl"; then
  echo "ok: tessera plan -n 4: $(grep -c 'allreduce' <<<"$pl") all-reduces listed, $(grep '  parameters' <<<"$pl" | tr -s ' ')"
else echo "FAIL: tessera plan (exit $rc): $pl"; fail=1; fi
# 4. refusals
refuse() { # name, expected fragment, extra --set
  local name=$1 want=$2; shift 2
  out=$(timeout 120 "$bin" plan "$tmp/tp4.yaml" -n 4 "$@" 2>&1); rc=$?
  if [ "$rc" = 2 ] && grep -q -- "$want" <<<"$out" && [ "$(wc -l <<<"$out")" = 1 ]; then echo "ok: refused: $name: $out"
  else echo "FAIL: $name: exit $rc: $out"; fail=1; fi
}
refuse "cut not dividing" "dim 1 of size 2 is cut 4" --set model.n_head=2
refuse "product vs devices" "does not divide the device count 4" --set 'parallel.strategies={"transformer.h.*.mlp.c_fc.dense": "((1,1,1),(8,1))"}'
refuse "unknown operator" "matches no operator" --set 'parallel.strategies={"transformer.h.*.mlp.c_fcc.dense": "((1,1,1),(4,1))"}'
{ base | sed 's/vocab_size: 256}/vocab_size: 256, tie_weights: true}/'; echo "parallel:"; echo "  mode: semi_auto_parallel"; strat 1 4 | sed 's/    dense: .*/    dense: "((1,1,1),(2,1))"/'; } > "$tmp/tied.yaml"
out=$(timeout 120 "$bin" plan "$tmp/tied.yaml" -n 4 2>&1); rc=$?
if [ "$rc" = 2 ] && grep -q "parameter 'transformer.wte.weight' is cut as" <<<"$out"; then echo "ok: refused: shared parameter cut two ways: $out"
else echo "FAIL: shared parameter: exit $rc: $out"; fail=1; fi
exit $fail
