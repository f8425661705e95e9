#!/usr/bin/env bash
# Measured links across hosts (docs/cluster.md): a test cluster of 2 hosts x 2 ranks (network
# namespaces, tests/cluster/lib.sh), every host's link shaped with tbf to RATE (default 1gbit),
# then
#  1. `tessera calibrate` across the hosts: the links inside a host and between hosts (alpha-beta);
#  2. bench_cluster: all-reduce of 1, 8, 64 MiB flat and hierarchical, measured (ABBA, medians)
#     against the calibrated prediction, and which one the cost model chooses;
#  3. a TP2 x DP2 GPT step: tensor-parallel pairs inside a host (mpirun's by-slot placement) vs
#     across hosts (--map-by node: ranks alternate hosts), median step time of each.
# Needs root. Usage: bench/cluster_bench.sh BUILD_DIR [RATE] [REPS]
set -u
B=$(cd "${1:-build}" && pwd)
rate=${2:-1gbit}
reps=${3:-5}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../tests/cluster/lib.sh"
cluster_up 2 2
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
cluster_shape 0 "$rate" && cluster_shape 1 "$rate" || { echo "cannot shape the links"; exit 1; }
echo "# links of both hosts: tbf rate $rate; load: $(uptime | sed 's/.*load/load/')"
w=$cl_dir/work; mkdir -p "$w"
export TESSERA_CLUSTER_CACHE=$w/cluster-local.yaml # not the machine's own "local" calibration
mpi=(mpirun --allow-run-as-root -n 4 --hostfile "$cl_hostfile")
on_host 0 "${mpi[@]}" "$B/tessera" calibrate -o "$w/cluster.yaml" 2>&1 | grep -v "^written"
on_host 0 "${mpi[@]}" "$B/bench_cluster" --cluster "$w/cluster.yaml" --reps "$reps"

awk 'BEGIN { srand(3); for (i = 0; i < 40000; i++) printf "%c", substr("etaoin shrdlu\n", int(rand() * 14) + 1, 1) }' > "$w/in.txt"
cat > "$w/tp.yaml" <<YAML
model: {name: gpt, n_layer: 2, n_head: 4, n_embd: 64, block_size: 64, vocab_size: 256}
data: {name: text, path: $w/in.txt, seq_len: 64, val_fraction: 0.05, transforms: []}
train: {steps: 10, batch_size: 16, eval_every: -1, log_every: 1, seed: 5}
optimizer: {name: adamw, lr: 3.0e-3}
log: {progress: lines}
parallel:
  mode: semi_auto_parallel
  strategies:
    transformer.embedding: "((2,1),(2,1))"
    transformer.h.*.ln_*.layernorm: "((2,1,1),(1,),(1,))"
    transformer.h.*.attn.c_attn.dense*: "((2,1,1),(2,1),(2,))"
    transformer.h.*.attn.attention: "((2,2,1,1),(2,2,1,1),(2,2,1,1))"
    transformer.h.*.attn.c_proj.dense: "((2,1,2),(1,2))"
    transformer.h.*.mlp.c_fc.dense: "((2,1,1),(2,1))"
    transformer.h.*.mlp.c_proj.dense: "((2,1,2),(1,2))"
    transformer.ln_f.layernorm: "((2,1,1),(1,),(1,))"
    dense: "((2,1,1),(2,1))"
    softmax_ce: "((2,2),(2,))"
YAML
step_ms() { /usr/bin/python3 -c "
import json,sys,statistics
t=[json.loads(l) for l in open(sys.argv[1])]
s=[r['step_ms'] if 'step_ms' in r else r.get('time_ms') for r in t if r.get('type')=='step']
s=[x for x in s[2:] if x is not None]
print('%.1f' % statistics.median(s) if s else 'n/a')" "$1"; }
for round in 1 2; do
  for place in inside across; do
    extra=(); [ $place = across ] && extra=(--map-by node)
    on_host 0 "${mpi[@]}" "${extra[@]}" "$B/tessera" train "$w/tp.yaml" --set log.metrics="$w/$place$round.jsonl" >/dev/null 2>&1 \
      || echo "TP $place: the job failed"
    echo "TP2 x DP2 GPT, tensor-parallel pairs $place hosts (round $round): median step $(step_ms "$w/$place$round.jsonl") ms"
  done
done
