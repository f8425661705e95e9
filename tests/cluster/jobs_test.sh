#!/usr/bin/env bash
# Jobs across hosts (issue 18): a test cluster of 2 hosts x 2 ranks (network namespaces, TCP only
# between them, OpenMPI's daemons started through the cluster's rsh agent; tests/cluster/lib.sh),
# each job against the same model trained by one process (every step's loss and the final
# evaluation within 2e-4 relative: only the summation order differs):
#  1. data parallel through `tessera launch --hostfile` (mpirun runs in host 0, two ranks there and
#     two in host 1, the job's topology line names 2 hosts);
#  2. the same through a MindSpore-style rank table (server_id = host name);
#  3. TP2 x DP2 of a small GPT, the tensor-parallel pairs inside a host (ranks 0,1 on node0);
#  4. pipeline PP2 across hosts (one rank per host: stage 0 on node0, stage 1 on node1).
# Usage: jobs_test.sh path/to/tessera
set -u
bin=$1
fail=0
. "$(dirname "$0")/../cli/lib.sh"
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || { echo "SKIP: no python3 in PATH (compares the loss listings)"; exit 77; }
cluster_up 2 2
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
tmp=$cl_dir/work
mkdir -p "$tmp"
export TMPDIR=$tmp

losses() { python3 -c "
import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l)
    if r.get('type')=='step': print('%d %.9g'%(r['step'],r['loss']))
    if r.get('type')=='eval': print('eval %.9g %.9g'%(r['loss'],r['top1']))
" "$1"; }
same() { python3 -c "
import sys
a=[l.split() for l in open(sys.argv[1])]; b=[l.split() for l in open(sys.argv[2])]
ok=len(a)==len(b) and len(a)>0
worst=0
for x,y in zip(a,b):
    ok=ok and x[0]==y[0]
    for u,v in zip(x[1:],y[1:]):
        u,v=float(u),float(v); d=abs(u-v)/max(1,abs(v)); worst=max(worst,d); ok=ok and d<=2e-4
print('%d lines, worst relative difference %.2g'%(len(a),worst))
sys.exit(0 if ok else 1)" "$1" "$2"; }
# check NAME REF.jsonl GOT.jsonl: the two runs' losses agree
check() {
  losses "$2" > "$2.txt" 2>/dev/null; losses "$3" > "$3.txt" 2>/dev/null
  local s; s=$(same "$2.txt" "$3.txt" 2>&1) && ok "$1 = one process ($s)" || bad "$1 vs one process: $s; $(paste "$2.txt" "$3.txt" | head -20)"
}
# across NAME RC OUT [PROCS]: the job succeeded and mpirun's map put PROCS (2) ranks on each host
export OMPI_MCA_rmaps_base_display_map=1
across() {
  local p=${4:-2}
  if [ "$2" != 0 ]; then bad "$1: exit $2: $3"; return 1; fi
  if ! grep -qE "Data for node: node0.*Num procs: $p" <<<"$3" || ! grep -qE "Data for node: node1.*Num procs: $p" <<<"$3"; then
    bad "$1: the ranks were not $p on each host: $3"; return 1
  fi
}

# ---- 1, 2: data parallel MLP ----
idx_split "$tmp/d" train 256 28 28
idx_split "$tmp/d" t10k 64 28 28
mlp_cfg "$tmp/mlp.yaml" "$tmp/d" 8 16 "parallel: {mode: stand_alone}"
out=$(timeout 240 "$bin" train "$tmp/mlp.yaml" --set log.metrics="$tmp/mlp1.jsonl" 2>&1) || bad "one process MLP: $out"
out=$(on_host 0 timeout 240 "$bin" launch -n 4 --hostfile "$cl_hostfile" -- train "$tmp/mlp.yaml" \
      --set parallel.mode=data_parallel --set log.metrics="$tmp/mlp_hf.jsonl" 2>&1); rc=$?
across "hostfile data_parallel" $rc "$out" && check "launch --hostfile, data_parallel 2 hosts x 2" "$tmp/mlp1.jsonl" "$tmp/mlp_hf.jsonl"
cat > "$tmp/rt.json" <<JSON
{"version": "1.0", "server_count": "2", "status": "completed", "server_list": [
 {"server_id": "node0", "device": [{"device_id": "0", "rank_id": "0"}, {"device_id": "1", "rank_id": "1"}]},
 {"server_id": "node1", "device": [{"device_id": "0", "rank_id": "2"}, {"device_id": "1", "rank_id": "3"}]}]}
JSON
out=$(on_host 0 timeout 240 "$bin" launch --rank-table "$tmp/rt.json" -- train "$tmp/mlp.yaml" \
      --set parallel.mode=data_parallel --set log.metrics="$tmp/mlp_rt.jsonl" 2>&1); rc=$?
across "rank table data_parallel" $rc "$out" && check "launch --rank-table, data_parallel 2 hosts x 2" "$tmp/mlp1.jsonl" "$tmp/mlp_rt.jsonl"

# ---- 3: TP2 x DP2 GPT, tensor-parallel pairs inside a host ----
awk 'BEGIN { srand(3); for (i = 0; i < 20000; i++) printf "%c", substr("etaoin shrdlu\n", int(rand() * 14) + 1, 1) }' \
  > "$tmp/in.txt"
gpt() {
  cat <<YAML
model: {name: gpt, n_layer: 2, n_head: 2, n_embd: 32, block_size: 16, vocab_size: 256}
data: {name: text, path: $tmp/in.txt, seq_len: 16, val_fraction: 0.05, transforms: []}
train: {steps: 5, batch_size: 8, eval_every: -1, log_every: 1, eval_batch_size: 8, seed: 5}
optimizer: {name: adamw, lr: 3.0e-3, weight_decay: 0.1, clip_grad_norm: 1.0, schedule: {name: constant}}
log: {progress: lines}
YAML
}
gpt > "$tmp/gpt1.yaml"
{ gpt; printf "parallel:\n  mode: semi_auto_parallel\n"; gpt_strategies 2 2
} > "$tmp/tp2dp2.yaml"
out=$(timeout 240 "$bin" train "$tmp/gpt1.yaml" --set log.metrics="$tmp/gpt1.jsonl" 2>&1) || bad "one process GPT: $out"
out=$(on_host 0 timeout 240 "$bin" launch -n 4 --hostfile "$cl_hostfile" -- train "$tmp/tp2dp2.yaml" \
      --set log.metrics="$tmp/tp2dp2.jsonl" 2>&1); rc=$?
across "TP2 x DP2" $rc "$out" && check "TP2 x DP2 (TP inside a host) on 2 hosts x 2" "$tmp/gpt1.jsonl" "$tmp/tp2dp2.jsonl"

# ---- 4: pipeline PP2 across hosts, one rank per host ----
printf 'node0 slots=1\nnode1 slots=1\n' > "$tmp/hosts1"
gpt > "$tmp/pp1.yaml"
echo "parallel: {mode: data_parallel, pipeline_stages: 2, micro_batches: 4}" >> "$tmp/pp1.yaml"
out=$(on_host 0 timeout 240 "$bin" launch -n 2 --hostfile "$tmp/hosts1" -- train "$tmp/pp1.yaml" \
      --set log.metrics="$tmp/pp2.jsonl" 2>&1); rc=$?
across "PP2" $rc "$out" 1 && check "pipeline PP2 across 2 hosts" "$tmp/gpt1.jsonl" "$tmp/pp2.jsonl"
exit $fail
