#!/usr/bin/env bash
# Megatron's sequence parallelism (parallel.sequence_parallel, issue 34) from the command line,
# against one process:
#  0. a small GPT with dropout (its masks on the sequence slices numbered as in the whole
#     tensor), cut Megatron's way without strategies for its norms (they follow the cut):
#     tensor-parallel 2 + SP on 2 ranks: every step's loss and the final evaluation equal the
#     single-process run (within 2e-4 relative: only the summation order differs); TP2 x DP2 + SP
#     with selective recomputation and optimizer_shard 1, and 2 pipeline stages of TP2 + SP, on 4
#     ranks: equal to the same layout without SP, and without dropout to one process;
#  1. `tessera plan`: the row-parallel denses' and the embedding's partial sums reduce-scattered
#     onto the sequence (no all-reduce left in the forward), the norms cut by the sequence, and the
#     activations per rank below TP2's without SP, as the job measures them (the end record);
#     `tessera plan --fix dp=1,tp=2,sp=1,recompute=selective` plans it (JSON: sequence_parallel),
#     TP2 and TP2 + SP with full recomputation (collectives redone) bitwise equal to without,
#     sp=1 without tp refused; TP2 + SP under amp O2 = TP2 under amp O2 (within 2e-3); GPT-530B's
#     layer under TP8, TP8 + SP and full recomputation planned within 10% of Korthikanti et al.'s
#     formulas, CP 8 (ring and Ulysses) cutting the layer's activations by 8, `plan --search`
#     pricing SP (the twin of its best Megatron plan, faster than it), and the paper's
#     step-time ratio of full recomputation to SP + selective (dry);
#  2. the TP2 + SP job's sliced checkpoint (the position embedding cut along the sequence) evaluated
#     by one process gives the job's accuracy, and resumed as TP2 without SP continues like one
#     process resumed from its own;
#  3. refused before anything runs, one line, exit 2: sequence_parallel under data_parallel;
#  4. context parallelism the Ulysses way, as strategies (the sequence cut from the ids on,
#     attention by heads over c x t, all-to-alls between): CP2 on 2 ranks (written by hand) and
#     TP2 x CP2 on 4 ranks (the strategies `tessera plan --fix cp=2,tp=2,cuts=megatron --json`
#     generates) equal one process with dropout on; the plan's all-to-alls; parallel.context_parallel
#     generating them: semi_auto_parallel CP2 (2 ranks) and DP2 x CP2 (4), auto_parallel's search
#     (its strategies cut the sequence 2 ways) equal one process; the search choosing DP2 x CP2 ring
#     itself (parallel.context_parallel 0) under a memory budget, = one process; at 131,072 tokens
#     `plan --search` choosing CP over every plan without it (none under context_parallel 1);
#     refused under data_parallel, with strategies, with SP (the sanitized run, TESSERA_TEST_SANITIZED=1,
#     skips the plan searches on GPT-530B and at 131,072 tokens: pure search compute there);
#  5. context parallelism with ring attention (parallel.context_parallel_algo: ring): CP2 (2 ranks),
#     TP2 x CP2 and DP2 x CP2 (4 ranks) equal one process, the plan has no all-to-all, CP2's measured
#     activations = the plan's, full recomputation (the ring redone) bitwise equal to without;
#     TP2 x CP2's sliced checkpoint evaluated by one process and resumed as CP2 the Ulysses way.
# Usage: seqpar_cli_test.sh path/to/tessera
set -u
bin=$1
fail=0
. "$(dirname "$0")/lib.sh"
mpi_job 4
command -v python3 >/dev/null || { echo "SKIP: no python3 in PATH (compares the loss listings)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat /usr/share/common-licenses/GPL-3 > "$tmp/input.txt" 2>/dev/null || seq 1 20000 > "$tmp/input.txt"
base() {
  cat <<YAML
model: {name: gpt, n_layer: 2, n_head: 4, n_embd: 32, block_size: 32, vocab_size: 256, dropout: 0.1}
data: {name: text, path: $tmp/input.txt, seq_len: 32, val_fraction: 0.05, transforms: []}
train: {steps: 6, batch_size: 8, eval_every: -1, log_every: 1, eval_batch_size: 8, seed: 5}
optimizer: {name: adamw, lr: 3.0e-3, weight_decay: 0.1, clip_grad_norm: 1.0, schedule: {name: constant}}
log: {progress: lines}
YAML
}
# Megatron's cuts (tests/cli/lib.sh) without the norms' strategies: under SP they follow the sequence cut
strat() { gpt_strategies "$@" | grep -v 'ln_'; }
base > "$tmp/one.yaml"
{ base; echo "parallel:"; echo "  mode: semi_auto_parallel"; echo "  full_batch: true"; strat 1 2; } > "$tmp/tp2.yaml"
{ base; echo "parallel:"; echo "  mode: semi_auto_parallel"; strat 2 2; } > "$tmp/tp2dp2.yaml"
{ base; echo "parallel:"; echo "  mode: semi_auto_parallel"; echo "  full_batch: true"; echo "  pipeline_stages: 2"
  echo "  micro_batches: 2"; strat 1 2; } > "$tmp/pp2tp2.yaml"
losses() { loss_listing "$1"; }
same() { same_listing "$1" "$2"; } # within 2e-4 relative (lib.sh)
run() { # name ranks config args...: trains with log.metrics $tmp/name.jsonl; sets out, rc
  local name=$1 n=$2 c=$3; shift 3
  local m=(); [ "$n" = 1 ] || { m=(mpirun --oversubscribe -n "$n"); [ "$(id -u)" = 0 ] && m+=(--allow-run-as-root); }
  out=$(timeout 300 "${m[@]}" "$bin" train "$c" --set log.metrics="$tmp/$name.jsonl" "$@" 2>&1); rc=$?
  losses "$tmp/$name.jsonl" > "$tmp/$name.txt" 2>/dev/null
}
run one 1 "$tmp/one.yaml" --set checkpoint.dir="$tmp/ck1" --set checkpoint.save_last=true
[ "$rc" = 0 ] || { echo "FAIL: one process: $out"; fail=1; }
check() { # name what
  if [ "$rc" = 0 ] && same "$tmp/$1.txt" "$tmp/one.txt"; then echo "ok: $2 = one process: $(tr '\n' ' ' < "$tmp/$1.txt" | cut -c1-120)"
  else echo "FAIL: $2 (exit $rc): $(paste "$tmp/$1.txt" "$tmp/one.txt" | tr '\n' ';') $out"; fail=1; fi
}
sp=(--set parallel.sequence_parallel=true)
# 0.
run tp2sp 2 "$tmp/tp2.yaml" "${sp[@]}" --set checkpoint.dir="$tmp/ck_tp2sp" --set checkpoint.save_last=true
check tp2sp "TP2 + SP on 2 ranks"
# on 4 ranks against the same layout without SP (with dropout, a batch cut by DP or into
# micro-batches draws other masks than one process's whole batch: layouts differ there, not SP)
check_vs() { # name base what
  if [ "$rc" = 0 ] && same "$tmp/$1.txt" "$tmp/$2.txt" && [ -s "$tmp/$2.txt" ]; then echo "ok: $3: $(tr '\n' ' ' < "$tmp/$1.txt" | cut -c1-120)"
  else echo "FAIL: $3 (exit $rc): $(paste "$tmp/$1.txt" "$tmp/$2.txt" | tr '\n' ';') $out"; fail=1; fi
}
run one0 1 "$tmp/one.yaml" --set model.dropout=0
for v in tp2dp2 pp2tp2; do
  extra=(); [ $v = tp2dp2 ] && extra=(--set model.recompute=selective --set parallel.optimizer_shard=1)
  run $v 4 "$tmp/$v.yaml" "${extra[@]}"
  [ "$rc" = 0 ] || { echo "FAIL: $v without SP: $out"; fail=1; }
  run ${v}sp 4 "$tmp/$v.yaml" "${sp[@]}" "${extra[@]}"
  check_vs ${v}sp $v "$v + SP${extra:+, selective recompute, optimizer_shard 1} on 4 ranks = without SP"
  run ${v}sp0 4 "$tmp/$v.yaml" "${sp[@]}" "${extra[@]}" --set model.dropout=0
  check_vs ${v}sp0 one0 "$v + SP, no dropout, on 4 ranks = one process"
done
# 1. the plan, and the activations the jobs measure
pl=$("$bin" plan "$tmp/tp2.yaml" -n 2 "${sp[@]}" 2>&1); prc=$?
pl0=$("$bin" plan "$tmp/tp2.yaml" -n 2 2>&1)
act() { sed -n 's/^  activations (step) *\([0-9.]*\) \([KM]\)iB.*/\1 \2/p' <<<"$1" | awk '{print $2 == "M" ? $1 * 1024 : $1}'; }
a1=$(act "$pl"); a0=$(act "$pl0")
fwd=$(sed -n '/^redistributions inserted/,/^communicator groups/p' <<<"$pl")
nrs=$(grep -c 'reduce_scatter axis' <<<"$fwd"); nar=$(grep -c 'allreduce axis' <<<"$fwd")
if [ "$prc" = 0 ] && [ "$nrs" = 5 ] && [ "$nar" = 0 ] && grep -q "transformer.h.1.attn.c_proj.dense .*(reduce-scattered onto the sequence, bias added after)" <<<"$pl" &&
   grep -q "transformer.h.0.ln_2.layernorm .*follow .*((1,2,1),(1,),(1,))" <<<"$pl" &&
   python3 -c "import sys; sys.exit(0 if float('$a1') < float('$a0') else 1)" 2>/dev/null; then
  echo "ok: tessera plan TP2 + SP: $nrs reduce-scatters onto the sequence, no all-reduce in the forward; activations $a1 KiB (TP2 alone $a0 KiB)"
else echo "FAIL: tessera plan TP2 + SP (exit $prc, $nrs reduce-scatters, $nar all-reduces, activations '$a1' vs '$a0'): $pl"; fail=1; fi
run tp2 2 "$tmp/tp2.yaml"
# full recomputation redoes the tensor-parallel all-reduces (TP2) and reduce-scatters and
# all-gathers (TP2 + SP) in backward: every loss bitwise that of the same layout without it
for v in tp2 tp2sp; do
  if [ $v = tp2 ]; then run ${v}full 2 "$tmp/tp2.yaml" --set model.recompute=full
  else run ${v}full 2 "$tmp/tp2.yaml" "${sp[@]}" --set model.recompute=full; fi
  if [ "$rc" = 0 ] && [ -s "$tmp/$v.txt" ] && cmp -s "$tmp/${v}full.txt" "$tmp/$v.txt"; then
    echo "ok: $v with full recomputation (its collectives redone) = without, bitwise: $(tr '\n' ' ' < "$tmp/${v}full.txt" | cut -c1-80)"
  else echo "FAIL: $v with full recomputation (exit $rc): $(paste "$tmp/${v}full.txt" "$tmp/$v.txt" | tr '\n' ';') $out"; fail=1; fi
done
m1=$(python3 -c "import json; print([json.loads(l) for l in open('$tmp/tp2sp.jsonl') if '\"end\"' in l][-1]['activation_peak_bytes'])" 2>/dev/null)
m0=$(python3 -c "import json; print([json.loads(l) for l in open('$tmp/tp2.jsonl') if '\"end\"' in l][-1]['activation_peak_bytes'])" 2>/dev/null)
if [ -n "$m1" ] && [ -n "$m0" ] && [ "$m1" -lt "$m0" ] && [ "$((m1 / 1024))" = "${a1%.*}" ]; then
  echo "ok: measured activations per rank: TP2 + SP $m1 bytes (the plan's $a1 KiB), TP2 alone $m0"
else echo "FAIL: measured activations: TP2 + SP '$m1', TP2 '$m0', plan '$a1' KiB"; fail=1; fi
# --fix sp=1 (tessera plan's and auto_parallel's plans): the plan says so and its graph has the cut
fx=$("$bin" plan "$tmp/one.yaml" -n 2 --fix "dp=1,tp=2,sp=1,recompute=selective,cuts=megatron" 2>&1); frc=$?
js=$("$bin" plan "$tmp/one.yaml" -n 2 --fix "dp=1,tp=2,sp=1,recompute=selective,cuts=megatron" --json 2>/dev/null)
if [ "$frc" = 0 ] && [ "$(grep -c 'reduce-scattered onto the sequence' <<<"$fx")" = 5 ] &&
   python3 -c "import json,sys; d=json.loads(sys.argv[1]); sys.exit(0 if d['sequence_parallel'] is True and d['recompute'] == 'selective' else 1)" "$js"
then echo "ok: tessera plan --fix sp=1,recompute=selective: 5 reduce-scatters onto the sequence; JSON sequence_parallel true"
else echo "FAIL: plan --fix sp=1 (exit $frc): $js $fx"; fail=1; fi
out=$("$bin" plan "$tmp/one.yaml" -n 2 --fix "dp=2,sp=1" 2>&1); rc=$?
if [ "$rc" = 2 ] && grep -q "sp=1 .*needs tp > 1" <<<"$out"; then echo "ok: refused: --fix dp=2,sp=1: $(tail -1 <<<"$out")"
else echo "FAIL: --fix dp=2,sp=1: exit $rc: $out"; fail=1; fi
# amp O2 under SP: the same run as TP2's amp O2 without SP (bf16 rounding: 2e-3)
run tp2amp 2 "$tmp/tp2.yaml" --set train.amp_level=O2
run tp2spamp 2 "$tmp/tp2.yaml" --set train.amp_level=O2 "${sp[@]}"
if [ "$rc" = 0 ] && python3 -c "
import sys
a=[l.split() for l in open(sys.argv[1])]; b=[l.split() for l in open(sys.argv[2])]
sys.exit(0 if len(a)==len(b)>0 and all(abs(float(u)-float(v))<=2e-3*max(1,abs(float(v))) for x,y in zip(a,b) for u,v in zip(x[1:],y[1:])) else 1)" "$tmp/tp2spamp.txt" "$tmp/tp2amp.txt"
then echo "ok: TP2 + SP under amp O2 = TP2 under amp O2 (2e-3): $(tr '\n' ' ' < "$tmp/tp2spamp.txt" | cut -c1-100)"
else echo "FAIL: amp O2 with SP: $(paste "$tmp/tp2spamp.txt" "$tmp/tp2amp.txt" | tr '\n' ';') $out"; fail=1; fi
# Korthikanti et al. 2022: a GPT-530B layer's stored activations (s 2048, b 1, h 20480, a 128,
# t 8; 16-bit activations, 1-byte dropout masks). Tessera's attention kernel never stores the
# a s^2 scores (it recomputes them from q, k and the log-sum-exp, as the paper's selective
# recomputation does), and its dropout keeps no mask (regenerated from the Philox key): so each
# setting is the paper's selective row less its masks: TP alone sbh(10 + 24/t) - 2sbh, TP + SP
# 34sbh/t - 2sbh/t; full recomputation keeps the layer's input, 2sbh (2sbh/t with SP). The plan's
# arena per layer (3 layers less 2, --json activation_bytes; dry, nothing allocated) within 10%.
cat > "$tmp/k530.yaml" <<YAML
model: {name: gpt, n_layer: 2, n_head: 128, n_embd: 20480, block_size: 2048, vocab_size: 51200, dropout: 0.1, tie_weights: true}
data: {name: text, path: none.txt, seq_len: 2048, transforms: []}
train: {steps: 1, batch_size: 1, micro_batch_size: 1, amp_level: O2}
optimizer: {name: adam, lr: 1.0e-4}
parallel: {mode: data_parallel}
YAML
k530() { # layers fix: the plan's activation_bytes
  "$bin" plan "$tmp/k530.yaml" -n 8 --cluster dgx-a100-80g --set model.n_layer="$1" --fix "dp=1,tp=8,cuts=megatron,$2"     --json 2>&1 | python3 -c "import json,sys; print(json.load(sys.stdin)['activation_bytes'])" 2>/dev/null
}
for row in "recompute=none:8+24/8:TP 8" "recompute=none,sp=1:32/8:TP 8 + SP" "recompute=full:2:TP 8 + full recompute" \
  "recompute=full,sp=1:2/8:TP 8 + SP + full recompute"; do
  fix=${row%%:*}; rest=${row#*:}; want=${rest%%:*}; what=${rest#*:}
  l2=$(k530 2 "$fix"); l3=$(k530 3 "$fix")
  if python3 -c "import sys; sbh = 2048 * 20480; per = ($l3 - $l2) / sbh; want = $want; print('%.3f sbh, the formula %.3f sbh (%.3f)' % (per, want, per / want)); sys.exit(0 if abs(per / want - 1) <= 0.10 else 1)" > "$tmp/k.txt" 2>&1
  then echo "ok: GPT-530B's layer under $what: $(cat "$tmp/k.txt") (Korthikanti et al.)"
  else echo "FAIL: GPT-530B's layer under $what: $(cat "$tmp/k.txt") ('$l2' '$l3')"; fail=1; fi
done
if [ -n "${TESSERA_TEST_SANITIZED:-}" ]; then # scripts/test.sh --asan: pure search compute there
  echo "skip: plan --search on GPT-530B's layers under the sanitizers (the Release run checks it)"
else
# the search prices sequence parallelism: GPT-530B's 2 layers on 8 A100s, the best Megatron plan
# (tp 8)'s twin with SP listed, faster and smaller than the same plan without it; the chosen plan is
# the fastest listed (the per-operator search's tp 8, a hair faster still: its dropouts cut in the
# sequence and the hidden dims)
srch=$("$bin" plan "$tmp/k530.yaml" -n 8 --cluster dgx-a100-80g --search 2>&1)
chosen=$(sed -n 's/^chosen: \(dp=[^:]*\): \([0-9.]*\) ms per step.*/\1 \2/p' <<<"$srch")
spl=$(grep -E '^  dp=1,tp=8,[^ ]*,cuts=megatron,sp=1 ' <<<"$srch" | awk '{print $1, $2, $3}')
plain=$(grep -F "  ${spl%%,sp=1 *} " <<<"$srch" | awk '{print $2, $3}')
first=$(grep -m1 '^  dp=' <<<"$srch" | awk '{print $1, $2}')
if [ -n "$spl" ] && [ -n "$plain" ] && [ "$first" = "$chosen" ] &&
   python3 -c "import sys; a = '$spl'.split(); b = '$plain'.split(); sys.exit(0 if float(a[1]) < float(b[0]) and float(a[2]) < float(b[1]) else 1)"; then
  echo "ok: plan --search priced sequence parallelism: $spl ms MiB (without it: $plain); chosen $chosen ms"
else echo "FAIL: plan --search and sequence parallelism: SP '$spl', without '$plain', chosen '$chosen', first '$first': $srch"; fail=1; fi
fi
# context parallelism cuts every activation of the layer by N: CP 8 (ring and Ulysses) against one device
k530n() { # layers devices fix
  "$bin" plan "$tmp/k530.yaml" -n "$2" --cluster dgx-a100-80g --set model.n_layer="$1" --fix "$3" --json 2>&1 |
    python3 -c "import json,sys; print(json.load(sys.stdin)['activation_bytes'])" 2>/dev/null
}
one2=$(k530n 2 1 "dp=1,tp=1"); one3=$(k530n 3 1 "dp=1,tp=1")
for algo in ring ulysses; do
  c2=$(k530n 2 8 "dp=1,cp=8,tp=1,cp_algo=$algo,cuts=megatron"); c3=$(k530n 3 8 "dp=1,cp=8,tp=1,cp_algo=$algo,cuts=megatron")
  if python3 -c "import sys; sbh = 2048 * 20480; a = ($one3 - $one2) / sbh; b = ($c3 - $c2) / sbh; print('%.3f sbh per layer, one device %.3f (1/%.2f)' % (b, a, a / b)); sys.exit(0 if abs(a / b / 8 - 1) <= 0.10 else 1)" > "$tmp/k.txt" 2>&1
  then echo "ok: GPT-530B's layer under CP 8 ($algo): $(cat "$tmp/k.txt")"
  else echo "FAIL: GPT-530B's layer under CP 8 ($algo): $(cat "$tmp/k.txt") ('$one2' '$one3' '$c2' '$c3')"; fail=1; fi
done
if [ -n "${TESSERA_TEST_SANITIZED:-}" ]; then
  echo "skip: GPT-530B's step times on 2,240 A100s under the sanitizers (the Release run checks them)"
else
# ...and their step times: full recomputation against SP + selective on 2,240 A100s (t 8, p 35,
# batch 2240, micro-batch 1): the paper's 54.2% / 42.1% MFU = 1.287, within 10%, both fitting
k530step() {
  "$bin" plan "$(cd "$(dirname "$0")/../.." && pwd)/examples/megatron/gpt-530b.yaml" -n 2240 --cluster dgx-a100-80g --set train.batch_size=2240 \
    --set train.micro_batch_size=2240 --set train.amp_level=O2 \
    --fix "dp=8,tp=8,pp=35,micro_batch_size=1,cuts=megatron,$1" --json 2>&1 |
    python3 -c "import json,sys; d = json.load(sys.stdin); print(d['step_time_s'] if d['fits'] else 'nofit')" 2>/dev/null
}
full=$(k530step recompute=full); sel=$(k530step recompute=selective,sp=1)
if python3 -c "import sys; r = $full / $sel; print('%.2f s / %.2f s = %.3f, the paper 1.287 (%.3f)' % ($full, $sel, r, r / 1.287)); sys.exit(0 if abs(r / 1.287 - 1) <= 0.10 else 1)" > "$tmp/k.txt" 2>&1
then echo "ok: GPT-530B step, full recompute / SP + selective: $(cat "$tmp/k.txt")"
else echo "FAIL: GPT-530B step, full recompute / SP + selective: '$full' '$sel' $(cat "$tmp/k.txt")"; fail=1; fi
fi
# 2. the sliced checkpoint, evaluated by one process
ck=$(ls -d "$tmp"/ck_tp2sp/ckpt-* 2>/dev/null | tail -1)
if [ -n "$ck" ]; then
  ev=$(OMP_NUM_THREADS=2 "$bin" eval "$tmp/one.yaml" --checkpoint "$ck" 2>&1)
  top1=$(sed -n 's/.*top1 \([0-9.]*\)%.*/\1/p' <<<"$ev" | head -1)
  want=$(python3 -c "print('%.2f'%(100*float(open('$tmp/tp2sp.txt').read().split('eval')[1].split()[1])))" 2>/dev/null)
  if [ -n "$top1" ] && [ "$top1" = "$want" ]; then echo "ok: the TP2 + SP checkpoint evaluated by one process: top1 $top1% (the job: $want%)"
  else echo "FAIL: eval alone '$top1' vs the job's '$want': $ev"; fail=1; fi
  # resumed as TP2 without SP (the position table's sequence cut re-cut whole): 3 more steps as
  # one process's 3 more from its own checkpoint
  run r_one 1 "$tmp/one.yaml" --set train.steps=9 --set checkpoint.resume="$(ls "$tmp"/ck1/*.safetensors | tail -1)" \
    --set checkpoint.strict=false
  run r_tp2 2 "$tmp/tp2.yaml" --set train.steps=9 --set checkpoint.resume="$ck" --set checkpoint.strict=false
  if [ "$rc" = 0 ] && grep -q "resumed from" <<<"$out" && same "$tmp/r_tp2.txt" "$tmp/r_one.txt"; then
    echo "ok: the TP2 + SP checkpoint resumed as TP2 without SP continues like one process: $(tr '\n' ' ' < "$tmp/r_tp2.txt" | cut -c1-80)"
  else echo "FAIL: resume without SP (exit $rc): $(paste "$tmp/r_tp2.txt" "$tmp/r_one.txt" | tr '\n' ';') $out"; fail=1; fi
else echo "FAIL: the TP2 + SP job wrote no sliced checkpoint: $(ls "$tmp/ck_tp2sp" 2>&1)"; fail=1; fi
# 4. context parallelism the Ulysses way, written as strategies: the sequence cut by c from the
# embedding's ids on (everything without a strategy follows the cut), attention cut by heads over
# c x t (all-to-alls from the sequence cut to the heads' and back before c_proj), Megatron's
# tensor-parallel cuts beside it: CP2 on 2 ranks and TP2 x CP2 on 4 ranks = one process (dropout on)
cpstrat() { # c t
  local c=$1 t=$2
  cat <<YAML
  strategies:
    transformer.embedding: "((1,$c),($t,1))"
    transformer.h.*.attn.c_attn.dense*: "((1,$c,1),($t,1),($t,))"
    transformer.h.*.attn.attention: "((1,$((c * t)),1,1),(1,$((c * t)),1,1),(1,$((c * t)),1,1))"
    transformer.h.*.attn.c_proj.dense: "((1,$c,$t),(1,$t))"
    transformer.h.*.mlp.c_fc.dense: "((1,$c,1),($t,1))"
    transformer.h.*.mlp.c_proj.dense: "((1,$c,$t),(1,$t))"
    dense: "((1,$c,1),($t,1))"
    softmax_ce: "(($c,$t),($c,))"
YAML
}
{ base; echo "parallel:"; echo "  mode: semi_auto_parallel"; echo "  full_batch: true"; cpstrat 2 1; } > "$tmp/cp2.yaml"
# TP2 x CP2: the strategies `tessera plan --fix cp=2,tp=2,cuts=megatron --json` generates
# (ts_gpt_context_strategies), pasted into the config
js=$("$bin" plan "$tmp/one.yaml" -n 4 --fix "dp=1,cp=2,tp=2,cuts=megatron" --json 2>/dev/null)
{ base; echo "parallel:"; echo "  mode: semi_auto_parallel"; echo "  full_batch: true"; echo "  strategies:"
  python3 -c "import json,sys; [print('    %s: \"%s\"' % kv) for kv in json.loads(sys.argv[1])['strategies'].items()]" "$js"
} > "$tmp/cp2tp2.yaml"
python3 -c "import json,sys; d=json.loads(sys.argv[1]); sys.exit(0 if d['cp'] == 2 and d['tp'] == 2 and d['dp'] == 1 and
  d['strategies']['transformer.h.*.attn.attention'] == '((1,4,1,1),(1,4,1,1),(1,4,1,1))' else 1)" "$js" 2>/dev/null \
  && echo "ok: plan --fix dp=1,cp=2,tp=2,cuts=megatron: attention cut by heads 4 ways" || { echo "FAIL: plan --fix cp=2: $js"; fail=1; }
for v in cp2:2 cp2tp2:4; do
  run ${v%:*} ${v#*:} "$tmp/${v%:*}.yaml"
  check ${v%:*} "${v%:*} (Ulysses) on ${v#*:} ranks"
done
# parallel.context_parallel: the same cuts generated (ts_gpt_context_strategies): semi_auto_parallel
# without strategies (CP2 on 2 ranks; DP2 x CP2 on 4), and auto_parallel's search with every plan
# taking it (4 ranks; its plan line says cp=2)
ctx=(--set parallel.mode=semi_auto_parallel --set parallel.context_parallel=2)
run cpkey 2 "$tmp/one.yaml" "${ctx[@]}"
check cpkey "parallel.context_parallel 2 (semi_auto_parallel, no strategies) on 2 ranks"
run cpkey4 4 "$tmp/one.yaml" "${ctx[@]}" --set model.dropout=0
check_vs cpkey4 one0 "parallel.context_parallel 2 x data parallel 2 on 4 ranks, no dropout = one process"
run cpauto 4 "$tmp/one.yaml" --set parallel.mode=auto_parallel --set parallel.context_parallel=2 \
  --set parallel.cluster=dgx-a100-80g --set model.dropout=0 --set parallel.strategy_ckpt_save_file="$tmp/auto.json"
emb=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['strategies']['transformer.embedding']['inputs'])" \
      "$tmp/auto.json" 2>/dev/null)
if [[ "$emb" == "[["[0-9]", 2], "* ]]; then
  check_vs cpauto one0 "auto_parallel with parallel.context_parallel 2 (its embedding $emb: the sequence cut 2 ways) = one process"
else echo "FAIL: auto_parallel with context_parallel 2: embedding '$emb': $(head -c 600 "$tmp/auto.json" 2>&1) $out"; fail=1; fi
# ...and the search choosing context parallelism itself (parallel.context_parallel 0, the default):
# batch 2 under a budget of 0.9 MiB a rank, which on 4 ranks only DP2 x CP2 with ring attention
# meets (the plan listing says so); the job = one process of batch 2
b2=(--set model.dropout=0 --set train.batch_size=2 --set train.eval_batch_size=2)
run one0b2 1 "$tmp/one.yaml" "${b2[@]}"
srch=$("$bin" plan "$tmp/one.yaml" -n 4 --cluster dgx-a100-80g --set parallel.mode=auto_parallel "${b2[@]}" \
       --set train.max_memory_mb=0.9 --search 2>&1)
run cpsearch 4 "$tmp/one.yaml" --set parallel.mode=auto_parallel --set parallel.cluster=dgx-a100-80g "${b2[@]}" \
  --set train.max_memory_mb=0.9 --set parallel.strategy_ckpt_save_file="$tmp/cpsearch.json"
att=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['strategies']['transformer.h.1.attn.attention']['inputs'])" \
      "$tmp/cpsearch.json" 2>/dev/null)
if grep -q "^chosen: dp=2,tp=1,pp=1,.*,cp=2,cp_algo=ring,cuts=megatron:" <<<"$srch" && [ "$att" = "[[2, 1, 2, 1], [2, 1, 2, 1], [2, 1, 2, 1]]" ]; then
  check_vs cpsearch one0b2 "auto_parallel's search choosing DP2 x CP2 ring under max_memory_mb 0.9 (attention $att) = one process"
else echo "FAIL: the search choosing context parallelism: attention '$att': $srch $out"; fail=1; fi
if [ -n "${TESSERA_TEST_SANITIZED:-}" ]; then
  echo "skip: plan --search at 131,072 tokens under the sanitizers (the Release run checks it)"
else
# a long sequence: GPT of 4 layers x 2560 (20 heads) at 131,072 tokens, batch 8, on 8 A100s: the
# search takes the sequence cut (ring: 20 heads do not divide 8 ways), faster than every plan
# without it; parallel.context_parallel 1 keeps it out
long=(--set model.n_layer=4 --set model.n_head=20 --set model.n_embd=2560 --set model.block_size=131072
      --set data.seq_len=131072 --set model.vocab_size=51200 --set train.batch_size=8 --set train.amp_level=O2)
srch=$("$bin" plan "$tmp/one.yaml" -n 8 --cluster dgx-a100-80g "${long[@]}" --search 2>&1)
chosen=$(sed -n 's/^chosen: \(dp=[^:]*\): \([0-9.]*\) ms per step.*/\1 \2/p' <<<"$srch")
nocp=$(grep '^  dp=' <<<"$srch" | grep -v ',cp=' | awk 'NR == 1 {print $1, $2}')
srch1=$("$bin" plan "$tmp/one.yaml" -n 8 --cluster dgx-a100-80g "${long[@]}" --set parallel.context_parallel=1 --search 2>&1)
if [[ "$chosen" == *",cp_algo=ring,"* ]] && [ -n "$nocp" ] && ! grep -q ',cp=' <<<"$srch1" &&
   python3 -c "import sys; sys.exit(0 if float('${chosen##* }') < float('${nocp##* }') else 1)"; then
  echo "ok: plan --search at 131,072 tokens chose context parallelism: $chosen ms (the best without it: $nocp ms)"
else echo "FAIL: plan --search and context parallelism at 131,072 tokens: chosen '$chosen', without '$nocp': $srch"; fail=1; fi
fi
refuse() { # what fragment args...
  local what=$1 want=$2; shift 2
  # (the sanitized run's leak checker adds its summary of the MPI runtime's suppressed leaks)
  out=$(timeout 60 "$bin" train "$tmp/one.yaml" "$@" 2>&1); rc=$?
  out=$(sed '/^-\{20,\}$/,$d; /^==[0-9]*==/,$d' <<<"$out")
  if [ "$rc" = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q -- "$want" <<<"$out"; then echo "ok: refused: $what: $out"
  else echo "FAIL: $what: exit $rc: $out"; fail=1; fi
}
refuse "context_parallel under data_parallel" "parallel.context_parallel: .*parallel.mode is data_parallel" \
  --set parallel.mode=data_parallel --set parallel.context_parallel=2
refuse "context_parallel with strategies" "parallel.context_parallel: 2 with parallel.strategies given" "${ctx[@]}" \
  --set 'parallel.strategies={"dense": "((1,1,1),(1,1))"}'
refuse "context_parallel with sequence_parallel" "both cut the sequence" "${ctx[@]}" --set parallel.sequence_parallel=true
pl=$("$bin" plan "$tmp/cp2.yaml" -n 2 2>&1)
n_a2a=$(sed -n '/^redistributions inserted/,/^communicator groups/p' <<<"$pl" | grep -c 'alltoall axis')
[ "$n_a2a" = 8 ] && echo "ok: CP2's plan: $n_a2a all-to-alls (q, k, v to the heads' cut and back, per layer)" \
  || { echo "FAIL: CP2's plan: $n_a2a all-to-alls: $pl"; fail=1; }
# 5. context parallelism with ring attention (parallel.context_parallel_algo: ring): attention keeps
# the sequence cut, the key/value blocks pass around the ranks, no all-to-all: CP2 on 2 ranks from
# the config key, TP2 x CP2 on 4 from `tessera plan --fix ...,cp_algo=ring --json`'s strategies,
# DP2 x CP2 on 4 without dropout, and with full recomputation (the ring redone in backward): all
# equal one process
ring=(--set parallel.context_parallel_algo=ring)
run cpring 2 "$tmp/one.yaml" "${ctx[@]}" "${ring[@]}"
check cpring "ring attention, parallel.context_parallel 2 on 2 ranks"
js=$("$bin" plan "$tmp/one.yaml" -n 4 --fix "dp=1,cp=2,tp=2,cp_algo=ring,cuts=megatron" --json 2>/dev/null)
{ base; echo "parallel:"; echo "  mode: semi_auto_parallel"; echo "  full_batch: true"; echo "  strategies:"
  python3 -c "import json,sys; [print('    %s: \"%s\"' % kv) for kv in json.loads(sys.argv[1])['strategies'].items()]" "$js"
} > "$tmp/cp2tp2ring.yaml"
python3 -c "import json,sys; d=json.loads(sys.argv[1]); sys.exit(0 if d['cp_algo'] == 'ring' and
  d['strategies']['transformer.h.*.attn.attention'] == '((1,2,2,1),(1,2,2,1),(1,2,2,1))' else 1)" "$js" 2>/dev/null \
  && echo "ok: plan --fix cp=2,tp=2,cp_algo=ring: attention cut by heads 2 and the sequence 2" || { echo "FAIL: plan --fix cp_algo=ring: $js"; fail=1; }
pl=$("$bin" plan "$tmp/cp2tp2ring.yaml" -n 4 2>&1)
n_a2a=$(sed -n '/^redistributions inserted/,/^communicator groups/p' <<<"$pl" | grep -c 'alltoall axis')
n_ring=$(grep -c 'ring attention over the sequence cut: key/value blocks passed around 2 ranks' <<<"$pl")
[ "$n_a2a" = 0 ] && [ "$n_ring" = 2 ] && echo "ok: TP2 x CP2 ring's plan: ring attention in both layers, no all-to-all" \
  || { echo "FAIL: TP2 x CP2 ring's plan: $n_ring ring, $n_a2a all-to-alls: $pl"; fail=1; }
# the activations the job measures (end record) = the plan's, and below one process's
a_r=$(act "$("$bin" plan "$tmp/one.yaml" -n 2 "${ctx[@]}" "${ring[@]}" 2>&1)")
a_1=$(act "$("$bin" plan "$tmp/one.yaml" -n 1 --set parallel.mode=semi_auto_parallel 2>&1)")
m_r=$(python3 -c "import json; print([json.loads(l) for l in open('$tmp/cpring.jsonl') if '\"end\"' in l][-1]['activation_peak_bytes'])" 2>/dev/null)
# (the plan prints MiB to 2 decimals: equal to that)
if [ -n "$m_r" ] && [ -n "$a_r" ] && [ -n "$a_1" ] && python3 -c "import sys; sys.exit(0 if abs($m_r / 1024 - $a_r) <= 5.2 and $a_r < 0.8 * $a_1 else 1)"; then
  echo "ok: ring CP2's activations: measured $m_r bytes = the plan's $a_r KiB (one process: $a_1 KiB)"
else echo "FAIL: ring CP2's activations: measured '$m_r', plan '$a_r' KiB, one process '$a_1' KiB"; fail=1; fi
run cp2tp2ring 4 "$tmp/cp2tp2ring.yaml" --set checkpoint.dir="$tmp/ck_cpr" --set checkpoint.save_last=true
check cp2tp2ring "ring attention, TP2 x CP2 on 4 ranks"
# its sliced checkpoint: evaluated by one process (the job's accuracy), and resumed as CP2 the
# Ulysses way on 2 ranks: 3 more steps as one process's 3 more from its own checkpoint
ck=$(ls -d "$tmp"/ck_cpr/ckpt-* 2>/dev/null | tail -1)
ev=$([ -n "$ck" ] && OMP_NUM_THREADS=2 "$bin" eval "$tmp/one.yaml" --checkpoint "$ck" 2>&1)
top1=$(sed -n 's/.*top1 \([0-9.]*\)%.*/\1/p' <<<"$ev" | head -1)
want=$(python3 -c "print('%.2f'%(100*float(open('$tmp/cp2tp2ring.txt').read().split('eval')[1].split()[1])))" 2>/dev/null)
if [ -n "$top1" ] && [ "$top1" = "$want" ]; then echo "ok: the TP2 x CP2 ring checkpoint evaluated by one process: top1 $top1% (the job: $want%)"
else echo "FAIL: the TP2 x CP2 ring checkpoint: eval alone '$top1' vs the job's '$want': $ev"; fail=1; fi
run r_cpu 2 "$tmp/one.yaml" "${ctx[@]}" --set train.steps=9 --set checkpoint.resume="$ck" --set checkpoint.strict=false
if [ -n "$ck" ] && [ "$rc" = 0 ] && grep -q "resumed from" <<<"$out" && same "$tmp/r_cpu.txt" "$tmp/r_one.txt"; then
  echo "ok: the TP2 x CP2 ring checkpoint resumed as CP2 (Ulysses) continues like one process: $(tr '\n' ' ' < "$tmp/r_cpu.txt" | cut -c1-80)"
else echo "FAIL: ring checkpoint resumed as CP2 Ulysses (exit $rc): $(paste "$tmp/r_cpu.txt" "$tmp/r_one.txt" | tr '\n' ';') $out"; fail=1; fi
run cpring4 4 "$tmp/one.yaml" "${ctx[@]}" "${ring[@]}" --set model.dropout=0
check_vs cpring4 one0 "ring attention, DP2 x CP2 on 4 ranks, no dropout = one process"
run cpringfull 2 "$tmp/one.yaml" "${ctx[@]}" "${ring[@]}" --set model.recompute=full
if [ "$rc" = 0 ] && cmp -s "$tmp/cpringfull.txt" "$tmp/cpring.txt"; then echo "ok: ring attention with full recomputation = without, bitwise"
else echo "FAIL: ring attention with full recomputation (exit $rc): $(paste "$tmp/cpringfull.txt" "$tmp/cpring.txt" | tr '\n' ';') $out"; fail=1; fi
# 3. refusal
out=$(timeout 60 "$bin" train "$tmp/one.yaml" --set parallel.mode=data_parallel "${sp[@]}" 2>&1); rc=$?
if [ "$rc" = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q "parallel.sequence_parallel: .*parallel.mode is data_parallel" <<<"$out"
then echo "ok: refused: $out"; else echo "FAIL: sequence_parallel under data_parallel: exit $rc: $out"; fail=1; fi
exit $fail
