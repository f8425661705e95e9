#!/usr/bin/env bash
# Sliced checkpoints from the command line (docs/checkpoints.md), a small GPT on 4 ranks:
#  0. TP4 with checkpoint.format sliced and whole, every step saved: `tessera ckpt merge` of the
#     sliced checkpoint of step 3 is the whole file of step 3 byte for byte; `verify` passes;
#     `inspect` shows the layout, the files and every tensor's pieces (--json the manifest,
#     --config the YAML); keep_max removed the oldest folders; `eval --checkpoint DIR` = the file's;
#  1. `ckpt reshard` of the TP4 checkpoint for DP2 (-n 2) and for one process: both resume and
#     continue as the uninterrupted one-process run (steps 4-6 within 1e-6 relative), and the
#     re-cut folders verify and merge to the same whole file as the original;
#  2. refusals, each one line naming the file, exit non-zero: a flipped byte in a rank file
#     (verify: SHA-256; resume: the chunk's CRC-32), a missing rank file, a wrong hash in the
#     manifest (verify), a missing manifest (an explicit resume; resume=auto skips the folder and
#     takes the previous checkpoint), merge of something that is not a folder, reshard without -n;
#  3. a dead writer's staging folder and a folder without a manifest are removed when a job starts.
# Usage: ckpt_cli_test.sh path/to/tessera
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
model: {name: gpt, n_layer: 2, n_head: 4, n_embd: 32, block_size: 16, vocab_size: 256, tie_weights: true}
data: {name: text, path: $tmp/input.txt, seq_len: 16, val_fraction: 0.05, transforms: []}
train: {steps: 6, batch_size: 8, eval_every: -1, log_every: 1, eval_batch_size: 8, seed: 5}
optimizer: {name: adamw, lr: 2.0e-3, weight_decay: 0.01, clip_grad_norm: 1.0, schedule: {name: constant}}
log: {progress: lines}
YAML
}
base > "$tmp/one.yaml"
{ base; printf "parallel:\n  mode: semi_auto_parallel\n  full_batch: true\n"; gpt_strategies 1 4
} > "$tmp/tp4.yaml"
losses() { python3 -c "
import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l)
    if r.get('type')=='step' and r['step']>=int(sys.argv[2]): print('%d %.9g'%(r['step'],r['loss']))
" "$1" "$2"; }
same() { python3 -c "
import sys
a=[l.split() for l in open(sys.argv[1])]; b=[l.split() for l in open(sys.argv[2])]
ok=len(a)==len(b) and len(a)>0
for x,y in zip(a,b): ok=ok and x[0]==y[0] and abs(float(x[1])-float(y[1]))<=1e-6*abs(float(y[1]))
sys.exit(0 if ok else 1)" "$1" "$2"; }
# one line on stderr naming $2, exit non-zero
refused() { # what fragment
  if [ "$rc" != 0 ] && grep -q -- "$2" <<<"$out" && [ "$(grep -c '^tessera' <<<"$out")" -ge 1 ] &&
     [ "$(grep '^tessera' <<<"$out" | head -1 | wc -l)" = 1 ]; then ok "refused: $1: $(grep '^tessera' <<<"$out" | head -1)"
  else bad "$1: exit $rc: $out"; fi
}

# 0. the uninterrupted one-process run; TP4 sliced and whole
"$bin" train "$tmp/one.yaml" --set log.metrics="$tmp/one.jsonl" > "$tmp/one.out" 2>&1 || bad "one process: $(cat "$tmp/one.out")"
losses "$tmp/one.jsonl" 4 > "$tmp/one.txt"
for f in sliced whole; do # the same config but the format (the same paths, moved after)
  timeout 300 "${mpi[@]}" "$bin" train "$tmp/tp4.yaml" --set checkpoint.dir="$tmp/ck" --set checkpoint.format=$f \
    --set checkpoint.save_steps=1 --set checkpoint.keep_max=4 --set log.metrics="$tmp/m.jsonl" > "$tmp/$f.out" 2>&1 ||
    bad "TP4 $f: $(cat "$tmp/$f.out")"
  mv "$tmp/ck" "$tmp/$f"
  mv "$tmp/m.jsonl" "$tmp/$f.jsonl"
done
s3=$tmp/sliced/ckpt-00000003
if [ -f "$s3/manifest.json" ] && [ -f "$tmp/whole/ckpt-00000003.safetensors" ]; then
  run ckpt merge "$s3" -o "$tmp/merged3.safetensors"
  if [ $rc = 0 ] && cmp -s "$tmp/merged3.safetensors" "$tmp/whole/ckpt-00000003.safetensors"; then
    ok "merge of the sliced TP4 checkpoint of step 3 = the whole one, byte for byte ($(stat -c %s "$tmp/merged3.safetensors") bytes)"
  else bad "merge: exit $rc: $out; $(cmp "$tmp/merged3.safetensors" "$tmp/whole/ckpt-00000003.safetensors" 2>&1)"; fi
else bad "TP4 wrote no step-3 checkpoints: $(ls "$tmp/sliced" "$tmp/whole" 2>&1 | tr '\n' ' ')"; fi
n=$(ls -d "$tmp"/sliced/ckpt-* 2>/dev/null | wc -l)
[ "$n" = 4 ] && ok "keep_max 4 kept 4 sliced folders (steps $(ls "$tmp/sliced" | tr '\n' ' '))" || bad "keep_max: $n folders: $(ls "$tmp/sliced")"
run ckpt verify "$s3"
[ $rc = 0 ] && grep -q "^ok: .*5 files" <<<"$out" && ok "verify: $out" || bad "verify: exit $rc: $out"
run ckpt inspect "$s3"
if [ $rc = 0 ] && grep -q '"mode":"semi_auto_parallel"' <<<"$out" && grep -q "rank00003.safetensors *rank 3" <<<"$out" &&
   grep -q "param.transformer.h.0.attn.c_attn.weight  F32  (96,32)  4 pieces" <<<"$out" &&
   grep -q "rank00002.safetensors *(3,32,32)\[0:3,16:24,0:32\]" <<<"$out"; then
  ok "inspect shows the layout, the files and the pieces (e.g. $(grep -m1 'rank00002.safetensors *(3,32,32)' <<<"$out" | tr -s ' '))"
else bad "inspect: exit $rc: $out"; fi
run ckpt inspect "$s3" --json
python3 -c "import json,sys; m=json.loads(sys.stdin.read()); sys.exit(0 if m['format']=='tessera-sliced/1' and m['step']==3 else 1)" <<<"$out" \
  && ok "inspect --json is the manifest" || bad "inspect --json: $out"
run ckpt inspect "$s3" --config
grep -q "format: sliced" <<<"$out" && ok "inspect --config: the run's YAML" || bad "inspect --config: $out"
run eval "$tmp/one.yaml" --checkpoint "$tmp/sliced/ckpt-00000006"
e1=$(sed -n 's/.*\(loss [0-9.]*  top1 [0-9.]*%\).*/\1/p' <<<"$out")
run eval "$tmp/one.yaml" --checkpoint "$tmp/whole/ckpt-00000006.safetensors"
e2=$(sed -n 's/.*\(loss [0-9.]*  top1 [0-9.]*%\).*/\1/p' <<<"$out")
[ -n "$e1" ] && [ "$e1" = "$e2" ] && ok "eval of the folder = eval of the file: $e1" || bad "eval: '$e1' vs '$e2'"

# 1. reshard for DP2 and for one process; both resume like the uninterrupted run
run ckpt reshard "$s3" -n 2 --set parallel.mode=data_parallel -o "$tmp/dp2" # keeps the TP4 strategies: refused
if [ $rc = 2 ] && grep -q "does not divide the device count 2" <<<"$out"; then refused "reshard keeping strategies that do not fit" "parallel.strategies"
else bad "reshard with TP4's strategies on 2 ranks: exit $rc: $out"; fi
run ckpt reshard "$s3" -n 2 --set parallel.mode=data_parallel --set 'parallel.strategies={}' -o "$tmp/dp2"
[ $rc = 0 ] && [ -f "$tmp/dp2/manifest.json" ] && ok "reshard -n 2: $out" || bad "reshard -n 2: exit $rc: $out"
run ckpt reshard "$s3" -n 2 --config "$tmp/one.yaml" --set parallel.mode=data_parallel -o "$tmp/dp2c"
[ $rc = 0 ] && "$bin" ckpt verify "$tmp/dp2c" > /dev/null 2>&1 && ok "reshard -n 2 --config (the new job's config): verified" ||
  bad "reshard --config: exit $rc: $out"
run ckpt reshard "$s3" -n 1 --set parallel.mode=stand_alone --set 'parallel.strategies={}' -o "$tmp/r1"
[ $rc = 0 ] && [ -f "$tmp/r1/manifest.json" ] && ok "reshard -n 1: $out" || bad "reshard -n 1: exit $rc: $out"
for d in dp2 r1; do
  run ckpt verify "$tmp/$d"; [ $rc = 0 ] || bad "verify $d: $out"
  run ckpt merge "$tmp/$d" -o "$tmp/m_$d.safetensors"
  python3 - "$tmp/m_$d.safetensors" "$tmp/merged3.safetensors" <<'PY' && ok "$d: re-cut folder verifies and merges to the original's tensors" || bad "$d: merged tensors differ"
import json,struct,sys
def ts(p):
    b=open(p,'rb').read(); n=struct.unpack('<Q',b[:8])[0]; h=json.loads(b[8:8+n]); d=b[8+n:]
    return {k:d[v['data_offsets'][0]:v['data_offsets'][1]] for k,v in h.items() if k!='__metadata__'}
a,b=ts(sys.argv[1]),ts(sys.argv[2]); sys.exit(0 if a==b else 1)
PY
done
mpi2=(mpirun --oversubscribe -n 2)
[ "$(id -u)" = 0 ] && mpi2+=(--allow-run-as-root)
timeout 300 "${mpi2[@]}" "$bin" train "$tmp/one.yaml" --set parallel.mode=data_parallel --set checkpoint.resume="$tmp/dp2" \
  --set log.metrics="$tmp/dp2.jsonl" > "$tmp/dp2.out" 2>&1 || bad "resume DP2: $(cat "$tmp/dp2.out")"
"$bin" train "$tmp/one.yaml" --set checkpoint.resume="$tmp/r1" --set log.metrics="$tmp/r1.jsonl" > "$tmp/r1.out" 2>&1 ||
  bad "resume one: $(cat "$tmp/r1.out")"
for d in dp2 r1; do
  losses "$tmp/$d.jsonl" 4 > "$tmp/$d.txt" 2>/dev/null
  same "$tmp/$d.txt" "$tmp/one.txt" && ok "resumed from the re-cut $d folder: steps 4-6 as one process: $(tr '\n' ' ' < "$tmp/$d.txt")" ||
    bad "resumed $d: $(paste "$tmp/$d.txt" "$tmp/one.txt" | tr '\n' ';')"
done

# 2. refusals
cp -r "$s3" "$tmp/bad"
python3 - "$tmp/bad/rank00001.safetensors" <<'PY'
import sys
p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[-100]^=0x40; open(p,'wb').write(b)
PY
run ckpt verify "$tmp/bad"
refused "verify of a flipped byte" "rank00001.safetensors.*SHA-256"
run train "$tmp/one.yaml" --set checkpoint.resume="$tmp/bad"
refused "resume from a flipped byte" "rank00001.safetensors.*CRC-32"
cp "$s3/rank00001.safetensors" "$tmp/bad/"
rm "$tmp/bad/rank00002.safetensors"
run train "$tmp/one.yaml" --set checkpoint.resume="$tmp/bad"
refused "resume with a rank file missing" "rank00002.safetensors.*missing"
run ckpt verify "$tmp/bad"
refused "verify with a rank file missing" "rank00002.safetensors"
cp "$s3/rank00002.safetensors" "$tmp/bad/"
python3 - "$tmp/bad/manifest.json" <<'PY'
import json,sys
p=sys.argv[1]; m=json.load(open(p)); h=m['files'][0]['sha256']
m['files'][0]['sha256']=('1' if h[0]=='0' else '0')+h[1:]; json.dump(m,open(p,'w'),indent=1)
PY
run ckpt verify "$tmp/bad"
refused "verify with a wrong hash in the manifest" "rank00000.safetensors.*SHA-256.*differs"
rm "$tmp/bad/manifest.json"
run train "$tmp/one.yaml" --set checkpoint.resume="$tmp/bad"
refused "resume from a folder without a manifest" "bad: no manifest.json"
run ckpt merge "$tmp/merged3.safetensors" -o "$tmp/x.safetensors"
if [ $rc = 2 ]; then refused "merge of a file" "not a sliced checkpoint"; else bad "merge of a file: exit $rc: $out"; fi
run ckpt reshard "$s3" -o "$tmp/x"
if [ $rc = 2 ]; then refused "reshard without -n" "usage"; else bad "reshard without -n: exit $rc: $out"; fi
# resume=auto: the newest complete checkpoint; a folder without its manifest does not exist
mkdir -p "$tmp/auto"
cp -r "$tmp/sliced/ckpt-00000004" "$tmp/auto/"; cp -r "$tmp/sliced/ckpt-00000005" "$tmp/auto/"
rm "$tmp/auto/ckpt-00000005/manifest.json"
mkdir "$tmp/auto/ckpt-00000009.tmp.999999999"; cp "$s3/rank00000.safetensors" "$tmp/auto/ckpt-00000009.tmp.999999999/"
run train "$tmp/one.yaml" --set checkpoint.dir="$tmp/auto" --set checkpoint.resume=auto --set checkpoint.save_last=false
if [ $rc = 0 ] && grep -q "resumed from $tmp/auto/ckpt-00000004 at step 4" <<<"$out"; then
  ok "resume=auto took step 4 (step 5's folder has no manifest)"
else bad "resume=auto: exit $rc: $out"; fi
# 3. the job removed the dead writer's staging folder and the folder without a manifest
[ ! -e "$tmp/auto/ckpt-00000009.tmp.999999999" ] && [ ! -e "$tmp/auto/ckpt-00000005" ] && [ -d "$tmp/auto/ckpt-00000004" ] &&
  ok "a job's start removed a dead writer's staging folder and a folder without a manifest" ||
  bad "cleaning: $(ls "$tmp/auto" | tr '\n' ' ')"
exit $fail
