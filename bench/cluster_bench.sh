#!/usr/bin/env bash
# Measured links across hosts (docs/cluster.md): a test cluster of 2 hosts x 2 ranks (network
# namespaces, tests/cluster/lib.sh), every host's link shaped with tbf to RATE (default 1gbit,
# burst 128kb, latency 10ms), then the steps asked for (default all, in this order):
#  net        the raw TCP rate of the shaped link (iperf3 between the hosts, when installed);
#  calibrate  `tessera calibrate` across the hosts: flat and hierarchical all-reduces, reduce-scatters
#             and all-gathers (MPI's, the ring's) of 1-64 MiB,
#             alpha-beta per part fitted over the sizes (written to DIR/cluster.yaml);
#  allreduce  bench_cluster: all-reduce of 1, 8, 64 MiB flat in place, hierarchical and flat from a
#             separate send buffer, measured (rotating order, medians) against DIR/cluster.yaml's
#             prediction, PASS/FAIL per the 20% rule, and the cost model's choice against the one
#             measured fastest; where the calibration has optimizer sharding's lines, MPI's and the
#             ring's reduce-scatter and all-gather at the same sizes against them, and auto's choice;
#  tp         a TP2 x DP2 GPT step with the tensor-parallel pairs inside hosts (mpirun's by-slot
#             placement) and across hosts (--map-by node), each rank's host printed, interleaved
#             rounds, median step time of each;
#  han        bench_allreduce_variants across the hosts with coll/han off and on (priority 100):
#             blocking MPI_Allreduce, iallreduce in place and from a send buffer, 1-64 MiB;
#  dp         data-parallel GPT (6.5 M parameters) and ResNet-18 (11.2 M) on the 4 ranks, their
#             gradient buckets all-reduced flat in place, flat from a separate send buffer
#             (parallel.allreduce flat_send), hierarchically (overlapped with backward, and after it:
#             parallel.overlap false) and as auto chooses on DIR/cluster.yaml
#             (the calibrate step's), and the same job on one host (its step: the compute);
#             interleaved rounds, median step time and comm_wait_ms of each, and auto's step against
#             the bound compute + a ring all-reduce of the gradients at the link's rate (PASS within
#             15%; issue 32). DP_MODELS (default "gpt resnet18"), DP_ROUNDS (3).
#  zero       the dp step's GPT under optimizer_shard 1 and 2 with its buckets reduce-scattered by
#             MPI's reduce-scatter and by the ring (parallel.reduce_scatter mpi|ring), beside plain
#             data parallel: interleaved rounds (ZERO_ROUNDS, 3), median step and comm_wait;
#             ZERO_MODES picks modes (plain s1_mpi s1_ring s2_mpi s2_ring; add _bf16 for
#             parallel.comm_dtype bf16, e.g. "s1_ring s1_ring_bf16").
# Each step fits in a quiet window of under 6 minutes (run them one by one under
# /work/shared/bin/quiet on a shared machine). Needs root.
# CLUSTER_HOSTS=4: 4 hosts x 1 rank instead of 2 x 2 (every rank's link its own).
# Usage: bench/cluster_bench.sh BUILD_DIR [RATE] [REPS] [STEPS]   e.g. build 1gbit 5 calibrate,allreduce
#        DIR: $CLUSTER_BENCH_DIR (default /tmp/tessera-cluster-bench), kept between runs.
set -u
B=$(cd "${1:-build}" && pwd)
rate=${2:-1gbit}
reps=${3:-5}
steps=,${4:-net,calibrate,allreduce,tp,han,dp,zero},
dir=${CLUSTER_BENCH_DIR:-/tmp/tessera-cluster-bench}
mkdir -p "$dir"
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../tests/cluster/lib.sh"
# CLUSTER_HOSTS (2 or 4): 2 hosts x 2 ranks (default) or 4 hosts x 1 rank; 4 ranks either way
hosts=${CLUSTER_HOSTS:-2}
case $hosts in 2|4) ;; *) echo "CLUSTER_HOSTS is 2 or 4"; exit 2;; esac
cluster_up "$hosts" $((4 / hosts))
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
for ((i = 0; i < hosts; i++)); do cluster_shape $i "$rate" || { echo "cannot shape the links"; exit 1; }; done
echo "# $hosts hosts x $((4 / hosts)) ranks; links of every host: $(ip netns exec "${cl_ns[0]}" tc qdisc show dev eth0 | head -1); load: $(cut -d' ' -f1-3 /proc/loadavg)"
w=$cl_dir/work; mkdir -p "$w"
export TESSERA_CLUSTER_CACHE=$w/cluster-local.yaml # not the machine's own "local" calibration
mpi=(mpirun --allow-run-as-root -n 4 --hostfile "$cl_hostfile")
# the GPT of the dp and zero steps (6.5 M parameters, 26 MiB of gradients a step), buckets of 4 MiB,
# with the parallel keys given: gpt_yaml FILE KEYS
gpt_yaml() { cat > "$1" <<YAML
model: {name: gpt, n_layer: 8, n_head: 4, n_embd: 256, block_size: 64, vocab_size: 256}
data: {name: text, path: $w/in.txt, seq_len: 64, val_fraction: 0.05, transforms: []}
train: {steps: 8, batch_size: 16, eval_every: -2, log_every: 1, seed: 5}
optimizer: {name: adamw, lr: 1.0e-3}
log: {progress: lines}
parallel: {mode: data_parallel, bucket_size_mb: 4, $2}
YAML
}
# the text the GPT steps train on: 200,000 random letters of "etaoin shrdlu"
make_text() { awk 'BEGIN { srand(3); for (i = 0; i < 200000; i++) printf "%c", substr("etaoin shrdlu\n", int(rand() * 14) + 1, 1) }' > "$w/in.txt"; }

if [[ $steps == *,net,* ]]; then
  if command -v iperf3 >/dev/null; then
    on_host 0 iperf3 -s -D -1 >/dev/null 2>&1; sleep 0.3
    on_host 1 iperf3 -c "${cl_ip[0]}" -t 4 -O 1 -J 2>/dev/null | /usr/bin/python3 -c '
import json, sys
e = json.load(sys.stdin)["end"]
print("net: TCP node1 -> node0 over the shaped link: %.1f MB/s (iperf3, 4 s, %s retransmits)" %
      (e["sum_received"]["bits_per_second"] / 8e6, e["sum_sent"].get("retransmits")))'
  else
    echo "net: iperf3 not installed (apt-get install iperf3): skipped"
  fi
fi

if [[ $steps == *,calibrate,* ]]; then
  on_host 0 "${mpi[@]}" "$B/tessera" calibrate -o "$dir/cluster.yaml" 2>&1 | grep -v "^written"
fi

if [[ $steps == *,allreduce,* ]]; then
  [ -f "$dir/cluster.yaml" ] || { echo "allreduce: no $dir/cluster.yaml: run the calibrate step first"; exit 1; }
  on_host 0 "${mpi[@]}" "$B/bench_cluster" --cluster "$dir/cluster.yaml" --reps "$reps"
fi

if [[ $steps == *,tp,* ]]; then
  make_text
  # big enough that the tensor-parallel all-reduces (4 a layer, forward and backward, of the
  # activations: 16 x 128 x 128 floats = 1 MiB each) outweigh the data-parallel gradients (half of
  # 0.8 M parameters a rank) over a 1 Gbit/s link
  cat > "$w/tp.yaml" <<YAML
model: {name: gpt, n_layer: 4, n_head: 4, n_embd: 128, block_size: 128, vocab_size: 256}
data: {name: text, path: $w/in.txt, seq_len: 128, val_fraction: 0.05, transforms: []}
train: {steps: 10, batch_size: 32, eval_every: -1, log_every: 1, seed: 5}
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
  place() { [ "$1" = across ] && echo "--map-by node"; }
  for p in inside across; do
    # the placement mpirun makes: rank -> host; TP pairs are ranks (0,1) and (2,3) (tp innermost)
    m=$(on_host 0 "${mpi[@]}" $(place $p) sh -c 'echo "$OMPI_COMM_WORLD_RANK $(hostname)"' 2>&1 | sort -n)
    echo "TP $p hosts: ranks on $(awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2}' <<<"$m"); TP pairs $(awk '
      { h[$1] = $2 } END { for (r = 0; r < 4; r += 2) printf "(%d %s, %d %s: %s) ", r, h[r], r + 1, h[r + 1],
        h[r] == h[r + 1] ? "one host" : "two hosts" }' <<<"$m")"
  done
  declare -A all
  for round in $(seq 1 "${TP_ROUNDS:-3}"); do
    for p in inside across; do
      on_host 0 "${mpi[@]}" $(place $p) "$B/tessera" train "$w/tp.yaml" --set log.metrics="$w/$p$round.jsonl" > "$w/$p$round.log" 2>&1 \
        || { echo "TP $p: the job failed:"; tail -5 "$w/$p$round.log"; }
      ms=$(step_ms "$w/$p$round.jsonl")
      all[$p]="${all[$p]:-} $ms"
      echo "TP2 x DP2 GPT (4 layers, n_embd 128, seq 128, batch 32), tensor-parallel pairs $p hosts (round $round): median step $ms ms"
    done
  done
  /usr/bin/python3 -c '
import sys, statistics
i = [float(x) for x in sys.argv[1].split() if x != "n/a"]; a = [float(x) for x in sys.argv[2].split() if x != "n/a"]
if i and a:
    mi, ma = statistics.median(i), statistics.median(a)
    print("TP inside hosts %.1f ms, across hosts %.1f ms a step (medians of the rounds): across/inside %.2f: %s" %
          (mi, ma, ma / mi, "PASS, inside wins" if mi < ma else "FAIL, inside does not win"))' "${all[inside]}" "${all[across]}"
fi

if [[ $steps == *,han,* ]]; then
  for p in 0 100; do
    echo "han: coll_han_priority $p"
    on_host 0 "${mpi[@]}" --mca coll_han_priority $p "$B/bench_allreduce_variants" 2>&1 | grep -E 'MiB|signal|abort' | head -5
  done
fi

if [[ $steps == *,dp,* ]]; then
  [ -f "$dir/cluster.yaml" ] || { echo "dp: no $dir/cluster.yaml: run the calibrate step first"; exit 1; }
  [ -f "$w/in.txt" ] || make_text
  # GPT: 6.5 M parameters (26 MiB of gradients a step); ResNet-18 (CIFAR stem) on Fashion-MNIST:
  # 11.2 M (43 MiB); buckets of 4 MiB over the shaped link
  gpt_yaml "$w/dp_gpt.yaml" "cluster: $dir/cluster.yaml"
  cat > "$w/dp_resnet18.yaml" <<YAML
model: {name: resnet, depth: 18, cifar_stem: true}
data: {name: fashion_mnist, transforms: [{name: to_float, scale: 0.00392156862745098}, hwc_to_chw]}
train: {steps: 8, batch_size: 8, eval_every: -2, log_every: 1, seed: 5}
optimizer: {name: momentum, lr: 0.01, momentum: 0.9}
log: {progress: lines}
parallel: {mode: data_parallel, bucket_size_mb: 4, cluster: $dir/cluster.yaml}
YAML
  # median step_ms and comm_wait_ms over steps 3.., and the gradient bytes (the end record)
  dp_stat() { /usr/bin/python3 -c "
import json,sys,statistics
t=[json.loads(l) for l in open(sys.argv[1])]
s=[r for r in t if r.get('type')=='step'][2:]
e=[r for r in t if r.get('type')=='end']
print('%.1f %.1f %d' % (statistics.median(r['step_ms'] for r in s), statistics.median(r.get('comm_wait_ms', 0) for r in s),
      e[0]['grad_bytes'] if e else 0) if s else 'n/a n/a 0')" "$1" 2>/dev/null || echo "n/a n/a 0"; }
  # the link's rate in bytes/s from tc's notation (1gbit, 500mbit, ...)
  rate_bps=$(/usr/bin/python3 -c "
import re,sys
m=re.fullmatch(r'([0-9.]+)([kmg]?)(bit|bps)', sys.argv[1].lower())
print(float(m.group(1)) * {'':1,'k':1e3,'m':1e6,'g':1e9}[m.group(2)] / (8 if m.group(3)=='bit' else 1) if m else 0)" "$rate")
  # the same job on one host (4 ranks on this machine's cores, as on the test cluster, shared
  # memory instead of the shaped link): its step time is the compute term of the bound
  local_mpi() { env $(env | grep -o '^OMPI_MCA_[A-Za-z0-9_]*' | sed 's/^/-u /') mpirun --oversubscribe --allow-run-as-root -n 4 "$@"; }
  # hier_after: hierarchical with parallel.overlap false, every bucket after backward (as it ran
  # before it was chained during backward)
  modes="flat flat_send hierarchical hier_after auto"
  mode_sets() { case $1 in hier_after) echo "--set parallel.allreduce=hierarchical --set parallel.overlap=false";;
                *) echo "--set parallel.allreduce=$1";; esac; }
  for model in ${DP_MODELS:-gpt resnet18}; do
    declare -A dpall=()
    for round in $(seq 1 "${DP_ROUNDS:-3}"); do
      for m in local $modes; do
        log=$w/dp_${model}_$m$round
        if [ $m = local ]; then
          local_mpi "$B/tessera" train "$w/dp_$model.yaml" --set log.metrics="$log.jsonl" > "$log.log" 2>&1
        else
          on_host 0 "${mpi[@]}" "$B/tessera" train "$w/dp_$model.yaml" $(mode_sets $m) \
            --set log.metrics="$log.jsonl" > "$log.log" 2>&1
        fi || { echo "DP $model $m: the job failed:"; tail -5 "$log.log"; }
        read -r ms wt gb <<<"$(dp_stat "$log.jsonl")"
        dpall[$m]="${dpall[$m]:-} $ms"
        [ $m = local ] && [ "$gb" -gt 0 ] 2>/dev/null && grad=$gb # the gradients (no send slots on one host)
        how=$(grep -o 'buckets all-reduced.*' "$log.log" | head -1 | cut -c1-200)
        [ $m = local ] && how="one host, shared memory"
        echo "DP $model on $hosts hosts x $((4 / hosts)), parallel.allreduce $m (round $round): median step $ms ms, comm_wait $wt ms; $how"
      done
    done
    # the bound: compute (the one-host step) + a ring all-reduce of the gradients at the link's
    # rate: with 2 ranks a host each link carries 2 (N - 1) / N of the bytes each way (N = 4)
    /usr/bin/python3 -c '
import sys, statistics
model, grad, rate = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
med = {}
for kv in sys.argv[4:]:
    k, v = kv.split("=", 1)
    x = [float(y) for y in v.split() if y != "n/a"]
    med[k] = statistics.median(x) if x else float("nan")
link = 2 * 3 / 4 * grad / rate * 1e3 if rate > 0 else float("nan")
bound = med["local"] + link
print("DP %s, medians of the rounds: one host %.1f ms (compute); %s" % (model, med["local"], ", ".join(
      "%s %.1f ms" % (m, med[m]) for m in med if m != "local")))
print("DP %s bound: compute %.1f ms + ring all-reduce of %.1f MiB of gradients over a %.0f MB/s link %.1f ms = %.1f ms; "
      "auto %.1f ms = %.2fx the bound (%s: within 15%%), flat in place %.2fx" % (model, med["local"], grad / 2**20,
      rate / 1e6, link, bound, med["auto"], med["auto"] / bound, "PASS" if med["auto"] <= 1.15 * bound else "FAIL",
      med["flat"] / bound))' "$model" "${grad:-0}" "$rate_bps" "local=${dpall[local]}" "flat=${dpall[flat]}" \
      "flat_send=${dpall[flat_send]}" "hierarchical=${dpall[hierarchical]}" "hier_after=${dpall[hier_after]}" \
      "auto=${dpall[auto]}"
    unset dpall
  done
fi

if [[ $steps == *,zero,* ]]; then
  [ -f "$w/in.txt" ] || make_text
  gpt_yaml "$w/zero_gpt.yaml" "allreduce: flat_send"
  zstat() { /usr/bin/python3 -c "
import json,sys,statistics
t=[json.loads(l) for l in open(sys.argv[1])]
s=[r for r in t if r.get('type')=='step'][2:]
l=[r['loss'] for r in t if r.get('type')=='step']
print('%.1f %.1f %.6f' % (statistics.median(r['step_ms'] for r in s), statistics.median(r.get('comm_wait_ms', 0) for r in s), l[-1]) if s else 'n/a n/a n/a')" "$1" 2>/dev/null || echo "n/a n/a n/a"; }
  # the GPT of the dp step under optimizer_shard 1 and 2, its buckets reduce-scattered by MPI's
  # reduce-scatter and by the ring (parallel.reduce_scatter), beside plain data parallel (buckets
  # all-reduced from a send buffer): interleaved rounds, median step and comm_wait of each
  # (ZERO_MODES picks some; a mode ending in _bf16 sends the gradients in bf16: parallel.comm_dtype)
  zmodes=${ZERO_MODES:-plain s1_mpi s1_ring s2_mpi s2_ring}
  zsets() { local m=${1%_bf16} w=""; [ "$m" != "$1" ] && w="--set parallel.comm_dtype=bf16"
            case $m in plain) echo "$w";; s1_*) echo "--set parallel.optimizer_shard=1 --set parallel.reduce_scatter=${m#s1_} $w";;
            s2_*) echo "--set parallel.optimizer_shard=2 --set parallel.reduce_scatter=${m#s2_} $w";; esac; }
  declare -A zall=()
  for round in $(seq 1 "${ZERO_ROUNDS:-3}"); do
    for m in $zmodes; do
      log=$w/zero_$m$round
      on_host 0 "${mpi[@]}" "$B/tessera" train "$w/zero_gpt.yaml" $(zsets $m) --set log.metrics="$log.jsonl" > "$log.log" 2>&1 \
        || { echo "ZeRO $m: the job failed:"; tail -5 "$log.log"; }
      read -r ms wt loss <<<"$(zstat "$log.jsonl")"
      zall[$m]="${zall[$m]:-} $ms"
      echo "ZeRO GPT on $hosts hosts x $((4 / hosts)), $m (round $round): median step $ms ms, comm_wait $wt ms, final loss $loss; $(grep -o 'optimizer_shard: .*' "$log.log" | head -1)"
    done
  done
  zargs=(); for m in $zmodes; do zargs+=("$m=${zall[$m]}"); done
  /usr/bin/python3 -c '
import sys, statistics
med = {}
for kv in sys.argv[1:]:
    k, v = kv.split("=", 1)
    x = [float(y) for y in v.split() if y != "n/a"]
    med[k] = statistics.median(x) if x else float("nan")
print("ZeRO GPT, medians of the rounds: " + ", ".join("%s %.1f ms" % (m, med[m]) for m in med))
for s in ("s1", "s2"):
    if s + "_ring" in med and s + "_mpi" in med and "plain" in med:
        print("ZeRO stage %s: ring %.1f ms vs MPI reduce-scatter %.1f ms (%.2fx); vs plain data parallel %.2fx" % (s[1],
              med[s + "_ring"], med[s + "_mpi"], med[s + "_mpi"] / med[s + "_ring"], med[s + "_ring"] / med["plain"]))
    for m in ("ring", "mpi"):
        k = "%s_%s" % (s, m)
        if k in med and k + "_bf16" in med:
            print("ZeRO stage %s, %s: bf16 on the wire %.1f ms vs f32 %.1f ms (%.2fx)" % (s[1], m, med[k + "_bf16"], med[k],
                  med[k] / med[k + "_bf16"]))' \
    "${zargs[@]}"
  # the planner's prediction of each on the calibrate step's description (its reduce-scatters and
  # all-gathers on their measured lines), beside the medians
  if [ -f "$dir/cluster.yaml" ]; then
    for m in $zmodes; do
      pl=$("$B/tessera" plan "$w/zero_gpt.yaml" -n 4 --cluster "$dir/cluster.yaml" $(zsets $m) 2>&1)
      read -r med <<<"$(/usr/bin/python3 -c 'import statistics,sys; x=[float(y) for y in sys.argv[1:] if y != "n/a"]; print("%.1f" % statistics.median(x) if x else "nan")' ${zall[$m]})"
      pred=$(sed -n 's/^predicted step on [^:]*: \([0-9.]*\) ms.*/\1/p' <<<"$pl")
      echo "ZeRO GPT $m: measured $med ms, predicted ${pred:-?} ms on the calibration ($(grep -o 'grad reduction.*' <<<"$pl" | tr -s ' ')$(grep -o '; *optimizer_shard: [0-9]* buckets.*' <<<"$(tr '\n' ';' <<<"$pl")" | cut -d';' -f2 | tr -s ' '))"
    done
  fi
fi
