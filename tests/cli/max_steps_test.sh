#!/usr/bin/env bash
# TESSERA_MAX_STEPS=N shortens any run (issue 31): the run stops after min(its steps, N) steps with
# one warning line, its checkpoints and metrics those of that shorter run, bitwise the run that
# sets train.steps=N; each evaluation covers the test split's first N batches;
# an epoch-based run too; N not shorter changes nothing; a malformed value is
# a configuration error naming the variable (exit 2); under `tessera launch` every rank stops there.
# Usage: max_steps_test.sh path/to/tessera path/to/ckpt_compare
set -u
bin=$1
cmp=$2
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
cd "$tmp" || exit 1
idx_split d train 64 8 8
idx_split d t10k 32 8 8
# 10 steps (4 per epoch), momentum and a cosine schedule: the run's length is in the lr
mlp_cfg c.yaml d 10 16 "checkpoint: {dir: ck, save_steps: 2, keep_max: 0}"
sed -i 's/^optimizer: .*/optimizer: {name: momentum, lr: 0.05, momentum: 0.9, schedule: {name: cosine, warmup_steps: 2}}/; s/^log: .*/log: {progress: lines, metrics: ck\/m.jsonl}/' c.yaml

out=$(TESSERA_MAX_STEPS=3 "$bin" train c.yaml 2>&1); rc=$?
warn="TESSERA_MAX_STEPS=3: the run stops after 3 of its 10 steps"
if [ "$rc" = 0 ] && [ "$(grep -c "$warn" <<<"$out")" = 1 ] && grep -q "^step 3/3 " <<<"$out" && ! grep -q "^step 4" <<<"$out"
then ok "TESSERA_MAX_STEPS=3 stops at step 3 with one warning"; else bad "TESSERA_MAX_STEPS=3 -> $rc: $out"; fi
ls ck/ckpt-*.safetensors > list 2>/dev/null
if [ "$(tail -n1 list)" = ck/ckpt-00000003.safetensors ] && [ "$(wc -l < list)" = 2 ]; then ok "checkpoints 2 and 3 (the last: step 3)"
else bad "checkpoints: $(cat list)"; fi
if /usr/bin/python3 - ck/m.jsonl <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
steps = [r["step"] for r in recs if r["type"] == "step"]
end = [r for r in recs if r["type"] == "end"]
assert steps == [1, 2, 3], steps
assert len(end) == 1 and end[0]["steps"] == 3, end
PY
then ok "metrics: steps 1..3, end record 3 steps"; else bad "metrics: $(cat ck/m.jsonl)"; fi
# the same as train.steps=3, bitwise (the cosine schedule built for 3 steps)
run train c.yaml --set train.steps=3 --set checkpoint.dir=ref --set log.metrics=
if [ "$rc" = 0 ] && "$cmp" ck/ckpt-00000003.safetensors ref/ckpt-00000003.safetensors 0 >cmp.txt; then ok "bitwise train.steps=3: $(cat cmp.txt)"
else bad "against train.steps=3 -> $rc: $out $(cat cmp.txt)"; fi
# not the uncapped run: its step 3 differs (the schedule is the 10-step run's)
run train c.yaml --set checkpoint.dir=full --set log.metrics=
if [ "$rc" = 0 ] && ! "$cmp" ck/ckpt-00000003.safetensors full/ckpt-00000004.safetensors 0 >/dev/null 2>&1 &&
   ! "$cmp" ck/ckpt-00000003.safetensors full/ckpt-00000003.safetensors 0 >/dev/null 2>&1; then ok "the uncapped run differs"
else bad "uncapped -> $rc: $out"; fi

# evaluations: the test split's first N batches (as Lightning's fast_dev_run), said once; the same
# figures as a run evaluating the first 16 samples (data.test_limit): bitwise on 1 process, on 2
# ranks (each evaluating half of them) the same count and accuracy, the loss within 1e-5
ev() { /usr/bin/python3 -c "
import json, sys
e = [json.loads(l) for l in open(sys.argv[1]) if '\"eval\"' in l]
print(' '.join('%d %.9g %.9g' % (r['samples'], r['loss'], r['top1']) for r in e))" "$1"; }
capped=$(TESSERA_MAX_STEPS=1 "$bin" train c.yaml --set train.eval_every=1 --set checkpoint.dir= --set log.metrics=e1.jsonl 2>&1); crc=$?
run train c.yaml --set train.steps=1 --set data.test_limit=16 --set checkpoint.dir= --set log.metrics=e0.jsonl
warn="TESSERA_MAX_STEPS=1: evaluations cover the test split's first 16 of its 32 samples"
if [ "$crc" = 0 ] && [ "$rc" = 0 ] && [ "$(grep -c "$warn" <<<"$capped")" = 1 ] &&
   [ -n "$(ev e0.jsonl)" ] && [ "$(ev e1.jsonl)" = "$(ev e0.jsonl)" ]; then ok "evaluations capped to 1 batch, said once: $(ev e1.jsonl)"
else bad "evaluations under TESSERA_MAX_STEPS=1 -> $crc (test_limit run $rc): '$(ev e1.jsonl)' vs test_limit 16 '$(ev e0.jsonl)': $capped"; fi
if command -v mpirun >/dev/null; then
  m=(mpirun --oversubscribe -n 2); [ "$(id -u)" = 0 ] && m+=(--allow-run-as-root)
  out=$(TESSERA_MAX_STEPS=1 OMP_NUM_THREADS=1 "${m[@]}" "$bin" train c.yaml --set checkpoint.dir= --set log.metrics=e2.jsonl 2>&1); rc=$?
  run train c.yaml --set train.steps=1 --set data.test_limit=16 --set checkpoint.dir= --set log.metrics=e3.jsonl
  if [ "$rc" = 0 ] && [ -n "$(ev e2.jsonl)" ] && awk -v a="$(ev e2.jsonl)" -v b="$(ev e3.jsonl)" 'BEGIN { split(a, x, " ");
       split(b, y, " "); d = x[2] - y[2]; exit !(x[1] == 16 && y[1] == 16 && x[3] == y[3] && d * d < 1e-10 * y[2] * y[2]) }'
  then ok "2 ranks: the capped evaluation split over the ranks: $(ev e2.jsonl)"
  else bad "2 ranks under TESSERA_MAX_STEPS=1 -> $rc: '$(ev e2.jsonl)' vs '$(ev e3.jsonl)': $out"; fi
fi

# an epoch-based run: 3 epochs x 4 steps, capped at 5
out=$(TESSERA_MAX_STEPS=5 "$bin" train c.yaml --set train.steps=0 --set train.epochs=3 --set checkpoint.dir=ep \
      --set log.metrics= 2>&1); rc=$?
if [ "$rc" = 0 ] && grep -q "TESSERA_MAX_STEPS=5: the run stops after 5 of its 12 steps" <<<"$out" && grep -q "^step 5/5 " <<<"$out" &&
   [ -f ep/ckpt-00000005.safetensors ]; then ok "epoch-based run capped at 5 of 12"
else bad "epochs capped -> $rc: $out"; fi

# N not shorter than the run: no warning, the whole run
out=$(TESSERA_MAX_STEPS=10 "$bin" train c.yaml --set checkpoint.dir=same --set log.metrics= 2>&1); rc=$?
if [ "$rc" = 0 ] && ! grep -q TESSERA_MAX_STEPS <<<"$out" && grep -q "^step 10/10 " <<<"$out"; then ok "N >= steps: no warning"
else bad "TESSERA_MAX_STEPS=10 -> $rc: $out"; fi

# tessera profile: an explicit window past the cap is clamped to it (not refused), steps 2..3 profiled
out=$(TESSERA_MAX_STEPS=3 "$bin" profile c.yaml --steps 3:8 -o tr.json 2>&1); rc=$?
if [ "$rc" = 0 ] && grep -q "steps 2..3 recorded of 3 (3:8 clamped to TESSERA_MAX_STEPS=3)" <<<"$out" &&
   grep -q "^profile: 2 steps (2..3)" <<<"$out" && ! grep -q "^step 4" <<<"$out"; then ok "profile clamped to the cap"
else bad "profile under TESSERA_MAX_STEPS=3 -> $rc: $out"; fi

# malformed values: exit 2, the variable named
for v in abc 0 -3 3x 1.5; do
  out=$(TESSERA_MAX_STEPS=$v "$bin" train c.yaml --set checkpoint.dir=bad 2>&1); rc=$?
  if [ "$rc" = 2 ] && grep -q "TESSERA_MAX_STEPS: '$v' is not a positive integer" <<<"$out" && [ ! -e bad ]
  then ok "TESSERA_MAX_STEPS=$v: exit 2"; else bad "TESSERA_MAX_STEPS=$v -> $rc: $out"; fi
done

# every rank under tessera launch (data parallel: both ranks stop at 3, or the job would hang)
if command -v mpirun >/dev/null; then
  export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
  out=$(TESSERA_MAX_STEPS=3 timeout 120 "$bin" launch -n 2 -- train c.yaml --set parallel.mode=data_parallel \
        --set checkpoint.dir=dp --set log.metrics= 2>&1); rc=$?
  if [ "$rc" = 0 ] && [ "$(grep -c "the run stops after 3 of its 10 steps" <<<"$out")" = 1 ] && grep -q "^step 3/3 " <<<"$out" &&
     [ -f dp/ckpt-00000003.safetensors ] && [ ! -e dp/ckpt-00000004.safetensors ]; then ok "launch -n 2: stops at 3"
  else bad "launch -n 2 -> $rc: $out"; fi
else
  echo "(no mpirun: the launch case skipped)"
fi
exit $fail
