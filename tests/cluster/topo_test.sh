#!/usr/bin/env bash
# Topology across hosts (issue 18) on a test cluster of 2 hosts x 2 ranks (tests/cluster/lib.sh):
#  1. the job learns its hosts (MPI_Comm_split_type SHARED): "2 hosts: node0 (ranks 0-1), node1
#     (ranks 2-3)"; on one host the line is absent (one host, nothing to say);
#  2. parallel.allreduce hierarchical (inside each host, between the leaders, broadcast inside)
#     against flat: the final checkpoints (parameters and optimizer state) compared bitwise where
#     the order allows, else within 1e-6 (the order of the sum differs), and both against one
#     process within 1e-5; its buckets' all-reduces non-blocking, overlapped with backward (the
#     profiler's trace: every span an iallreduce_hier);
#  3. parallel.allreduce auto chooses by the cost model of parallel.cluster's links: a cluster
#     whose links between hosts are 100x slower than inside chooses hierarchical, one whose links
#     are equal chooses flat, and the choice is printed with both predictions; where the cluster
#     has the flat all-reduce from a separate send buffer measured (flat_allreduce_send_*) and
#     predicted faster, the buckets are all-reduced from one (issue 32), and the job equals flat.
#  3b. parallel.allreduce flat_send (every bucket from a separate send buffer) across the hosts and
#     on one host: equal to flat within 1e-6 and to one process within 1e-5.
#  3d. auto priced on a calibration `tessera calibrate` makes in the test across the hosts: the
#     start line's choice is the cheapest of its own predictions, and the job equals one process;
#     optimizer_shard 1's reduce-scatter on it: the one the calibration measured faster, and `tessera
#     plan` on it pricing that reduce-scatter and the all-gather after the update by their measured lines.
#  3c. optimizer_shard 1 across the hosts: parallel.reduce_scatter auto reduce-scatters the buckets
#     by the ring of point-to-point messages (the start line says so), mpi by MPI's; both equal one
#     process within 1e-5 and each other within 1e-6; on one host auto keeps MPI's.
#  4. test_topo (tests/comm/test_topo.c) on the 2 hosts: the topology's communicators and the
#     hierarchical all-reduce against the exact sums and the flat all-reduce, the non-blocking one
#     (several in flight, completing in different orders on different ranks) against both.
# Usage: topo_test.sh path/to/tessera path/to/ckpt_compare [path/to/test_topo]
set -u
bin=$1
cmp=$2
topo=${3:-}
fail=0
. "$(dirname "$0")/../cli/lib.sh"
. "$(dirname "$0")/lib.sh"
cluster_up 2 2
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
tmp=$cl_dir/work
mkdir -p "$tmp"
export TMPDIR=$tmp
idx_split "$tmp/d" train 256 28 28
idx_split "$tmp/d" t10k 64 28 28
mlp_cfg "$tmp/mlp.yaml" "$tmp/d" 6 16 "parallel: {mode: data_parallel, bucket_size_mb: 0.01}" \
  "optimizer: {name: adamw, lr: 0.01}"
sed -i '/^optimizer: {name: sgd/d' "$tmp/mlp.yaml"
# job NAME ARGS...: 2 hosts x 2 ranks, final checkpoint in $tmp/ck_NAME
job() {
  local n=$1; shift
  out=$(on_host 0 timeout 120 "$bin" launch -n 4 --hostfile "$cl_hostfile" -- train "$tmp/mlp.yaml" \
        --set checkpoint.dir="$tmp/ck_$n" --set checkpoint.save_last=true "$@" 2>&1); rc=$?
  ck=$(ls "$tmp/ck_$n"/*.safetensors 2>/dev/null | tail -1)
}
out1=$(timeout 120 "$bin" train "$tmp/mlp.yaml" --set parallel.mode=stand_alone --set checkpoint.dir="$tmp/ck_one" \
       --set checkpoint.save_last=true 2>&1) || bad "one process: $out1"
one=$(ls "$tmp/ck_one"/*.safetensors 2>/dev/null | tail -1)

# 1, 2
job flat --set parallel.allreduce=flat; flat=$ck
if [ $rc = 0 ] && grep -q "gradient reduction over 4 ranks on 2 hosts: node0 (ranks 0-1), node1 (ranks 2-3): buckets all-reduced flat" <<<"$out"
then ok "the job's hosts: $(grep -o '2 hosts: [^:]*' <<<"$out")"; else bad "flat job: exit $rc: $out"; fi
job hier --set parallel.allreduce=hierarchical --set log.profile=trace --set log.trace="$tmp/hier_trace.json"; hier=$ck
if [ $rc = 0 ] && grep -q "buckets all-reduced hierarchically .*overlapped with backward" <<<"$out"; then ok "hierarchical job ran"
else bad "hierarchical job: exit $rc: $out"; fi
# its buckets' all-reduces were non-blocking (started during backward, seen complete by a test
# between nodes or by the wait after backward), all but the tail's: the first layer's bucket,
# completed by the last node, is left to a blocking call after backward on the trainer's native
# communicators (src/distribution/buckets.c)
n_nb=$(grep -o '"call":"iallreduce_hier"' "$tmp/hier_trace.json" 2>/dev/null | wc -l)
n_bl=$(grep -o '"name":"allreduce bucket [0-9]*"[^}]*"call":"allreduce_hier"' "$tmp/hier_trace.json" 2>/dev/null | grep -vc '"allreduce bucket 0"')
[ "$n_nb" -gt 0 ] && [ "$n_bl" = 0 ] && ok "hierarchical buckets non-blocking, during backward: $n_nb spans (the tail's blocking)" \
  || bad "hierarchical trace: $n_nb non-blocking spans, $n_bl blocking ones of buckets other than the tail's"
if [ -n "$flat" ] && [ -n "$hier" ]; then
  if "$cmp" "$flat" "$hier" 0 >/dev/null 2>&1; then ok "hierarchical = flat bitwise (parameters and optimizer state)"
  elif r=$("$cmp" "$flat" "$hier" 1e-6 2>&1); then ok "hierarchical = flat within 1e-6 (not bitwise: the sum's order differs): $r"
  else bad "hierarchical vs flat: $r"; fi
  r=$("$cmp" "$one" "$hier" 1e-5 2>&1) && ok "hierarchical = one process within 1e-5" || bad "hierarchical vs one process: $r"
fi
# a single host says nothing of hosts
out=$(timeout 120 "$bin" launch -n 2 -- train "$tmp/mlp.yaml" 2>&1); rc=$?
[ $rc = 0 ] && ! grep -q "gradient reduction over" <<<"$out" && ok "one host: no hosts line" || bad "one host: exit $rc: $out"

# 3. auto, priced on two cluster descriptions
cluster_yaml() { # file inter_bw inter_latency
  cat > "$1" <<YAML
name: test-$(basename "$1" .yaml)
devices_per_node: 2
nodes: 2
peak_flops_f32: 1.0e11
gemm_efficiency: 0.5
mem_bandwidth: 1.0e10
mem_bytes: 1.0e9
intra_bw: 5.0e9
intra_latency: 2.0e-6
inter_bw: $2
inter_latency: $3
YAML
}
cluster_yaml "$tmp/slow.yaml" 5.0e7 5.0e-5
cluster_yaml "$tmp/even.yaml" 5.0e9 2.0e-6
job auto_slow --set parallel.cluster="$tmp/slow.yaml"
if [ $rc = 0 ] && grep -qE "all-reduced hierarchically .*\(auto: a 0.01 MiB bucket predicted [0-9.e+-]+ ms hierarchical vs [0-9.e+-]+ ms flat on cluster test-slow\)" <<<"$out"
then ok "auto, slow links between hosts: $(grep -o 'auto: [^)]*' <<<"$out")"; else bad "auto slow: exit $rc: $out"; fi
job auto_even --set parallel.cluster="$tmp/even.yaml"
if [ $rc = 0 ] && grep -qE "all-reduced flat \(auto: .* on cluster test-even; flat from a separate send buffer not measured\)" <<<"$out"
then ok "auto, links as fast between hosts as inside: $(grep -o 'auto: [^)]*' <<<"$out")"; else bad "auto even: exit $rc: $out"; fi
# the send buffer measured faster (as tessera calibrate writes it for this layout): every bucket from one
cluster_yaml "$tmp/send.yaml" 5.0e7 5.0e-5
printf 'flat_allreduce_latency: 1.0e-4\nflat_allreduce_bw: 1.0e8\nflat_allreduce_send_latency: 1.0e-4\nflat_allreduce_send_bw: 2.0e8\n' >> "$tmp/send.yaml"
job auto_send --set parallel.cluster="$tmp/send.yaml"; asend=$ck
if [ $rc = 0 ] && grep -qE "all-reduced flat \(auto: .* on cluster test-send; flat from a separate send buffer [0-9.e+-]+ ms: ([1-9][0-9]*) of \1 buckets from one" <<<"$out"
then ok "auto, send buffer measured faster: $(grep -o 'flat from a separate[^)]*' <<<"$out")"; else bad "auto send: exit $rc: $out"; fi
# 3b. flat_send forced
job send --set parallel.allreduce=flat_send; send=$ck
if [ $rc = 0 ] && grep -q "buckets all-reduced flat from a separate send buffer (parallel.allreduce flat_send)" <<<"$out"
then ok "flat_send across the hosts ran"; else bad "flat_send job: exit $rc: $out"; fi
for c in "$send" "$asend"; do
  if [ -n "$flat" ] && [ -n "$c" ]; then
    r=$("$cmp" "$flat" "$c" 1e-6 2>&1) && ok "from a send buffer = flat within 1e-6: $r" || bad "send buffer vs flat: $r"
    r=$("$cmp" "$one" "$c" 1e-5 2>&1) && ok "from a send buffer = one process within 1e-5" || bad "send buffer vs one process: $r"
  fi
done
out=$(timeout 120 "$bin" launch -n 2 -- train "$tmp/mlp.yaml" --set parallel.allreduce=flat_send \
      --set checkpoint.dir="$tmp/ck_send1" --set checkpoint.save_last=true 2>&1); rc=$?
c=$(ls "$tmp/ck_send1"/*.safetensors 2>/dev/null | tail -1)
if [ $rc = 0 ] && grep -q "over 2 ranks on 1 host: .*from a separate send buffer" <<<"$out" && r=$("$cmp" "$one" "$c" 1e-5 2>&1)
then ok "flat_send on one host = one process within 1e-5"; else bad "flat_send on one host: exit $rc: $out $r"; fi

# 3d. auto on a calibration made here: `tessera calibrate` across the 2 hosts (flat in place, from
# a send buffer and hierarchical, measured), then a job pricing its buckets on it: the start line's
# choice is the cheapest of its own predictions (hierarchical iff below both flat ones; flat from a
# send buffer for some bucket only where it was measured), and the job = one process
export TESSERA_CLUSTER_CACHE=$tmp/cluster-cache.yaml # not the machine's own "local" calibration
cal=$(on_host 0 timeout 120 mpirun --allow-run-as-root -n 4 --hostfile "$cl_hostfile" "$bin" calibrate -o "$tmp/cal.yaml" 2>&1); crc=$?
if [ $crc = 0 ] && grep -q "^flat_allreduce_send_bw: [1-9]" "$tmp/cal.yaml" && grep -q "^nodes: 2" "$tmp/cal.yaml"; then
  job auto_cal --set parallel.cluster="$tmp/cal.yaml"; acal=$ck
  line=$(grep -o 'buckets all-reduced.*' <<<"$out" | head -1)
  if [ $rc = 0 ] && python3 - "$line" <<'PY'
import re, sys
l = sys.argv[1]
m = re.search(r"predicted ([0-9.e+-]+) ms hierarchical vs ([0-9.e+-]+) ms flat on cluster \S+?(?:\)|;)", l)
h, f = float(m.group(1)), float(m.group(2))
s = re.search(r"flat from a separate send buffer ([0-9.e+-]+) ms: ([0-9]+) of ([0-9]+) buckets", l)
hier = l.startswith("buckets all-reduced hierarchically")
if hier != (h < min(f, float(s.group(1)) if s else f)): sys.exit("choice %s against h %g f %g s %s" % (hier, h, f, s and s.group(1)))
if not hier and not s: sys.exit("flat without the send buffer's price: " + l)
PY
  then ok "auto on a calibration made here: $line"
  else bad "auto on the test's calibration: exit $rc: $line $out"; fi
  r=$("$cmp" "$one" "$acal" 1e-5 2>&1) && ok "auto on the calibration = one process within 1e-5" || bad "auto on the calibration vs one process: $r"
  # optimizer sharding's reduce-scatter on the same calibration: the one measured faster
  job zcal --set parallel.cluster="$tmp/cal.yaml" --set parallel.optimizer_shard=1 --set parallel.optimizer_shard_threshold_kb=0
  line=$(grep -o 'optimizer_shard: [0-9]* buckets reduce-scattered.*' <<<"$out" | head -1)
  if [ $rc = 0 ] && python3 - "$line" <<'PY'
import re, sys
l = sys.argv[1]
m = re.search(r"measured ([0-9.e+-]+) ms by the ring vs ([0-9.e+-]+) ms MPI's on cluster", l)
ring = "by a ring" in l
sys.exit(0 if m and ring == (float(m.group(1)) < float(m.group(2))) else 1)
PY
  then ok "optimizer_shard's reduce-scatter on the calibration: $line"
  else bad "optimizer_shard's reduce-scatter on the test's calibration: exit $rc: '$line' $out"; fi
  # ...and `tessera plan` on it prices that reduce-scatter and the all-gather after the update as
  # the calibration measured them (each bucket on the lines of cal.yaml), by the algorithm the job ran
  pl=$("$bin" plan "$tmp/mlp.yaml" -n 4 --cluster "$tmp/cal.yaml" --set parallel.optimizer_shard=1 \
       --set parallel.optimizer_shard_threshold_kb=0 2>&1)
  pz=$(grep -o 'optimizer_shard: [0-9]* buckets\? reduce-scattered [0-9.]* ms + all-gathered .*' <<<"$pl")
  el=$(grep -o '[0-9]* parameter elements reduce-scattered' <<<"$pl" | awk '{print $1}')
  if python3 - "$tmp/cal.yaml" "$pz" "${el:-0}" "$line" <<'PY'
import re, sys
cal = dict(l.split(":", 1) for l in open(sys.argv[1]) if re.match(r"^(reduce_scatter|allgather)\w*: ", l))
cal = {k: float(v.split("#")[0]) for k, v in cal.items()}
m = re.match(r"optimizer_shard: (\d+) buckets? reduce-scattered ([0-9.]+) ms \+ all-gathered ([0-9.]+) ms by (the ring|MPI's)", sys.argv[2])
nb, rs, ag, ring = int(m.group(1)), float(m.group(2)), float(m.group(3)), m.group(4) == "the ring"
B = 4.0 * int(sys.argv[3])
sfx = "_ring" if ring else ""
want_rs = 1e3 * (nb * cal["reduce_scatter%s_latency" % sfx] + B / cal["reduce_scatter%s_bw" % sfx])
want_ag = 1e3 * (nb * cal["allgather%s_latency" % sfx] + B / cal["allgather%s_bw" % sfx])
ok = B > 0 and ring == ("by a ring" in sys.argv[4]) and abs(rs - want_rs) <= 0.002 + 1e-4 * want_rs and abs(ag - want_ag) <= 0.002 + 1e-4 * want_ag
print("%s: %d buckets, %.0f bytes: reduce-scatters %.3f ms (the lines: %.3f), all-gathers %.3f ms (%.3f)" % (m.group(4), nb, B, rs, want_rs, ag, want_ag))
sys.exit(0 if ok else 1)
PY
  then ok "tessera plan prices optimizer_shard's collectives as calibrated: $pz"
  else bad "tessera plan on the calibration, optimizer_shard 1: '$pz' ($el elements), the job: '$line': $pl"; fi
else bad "tessera calibrate across the hosts: exit $crc: $cal $(cat "$tmp/cal.yaml" 2>&1 | head -30)"; fi

# 3c. optimizer sharding's reduce-scatters across the hosts: auto takes the ring of point-to-point
# messages (parallel.reduce_scatter), mpi MPI's; both = one process, and on one host auto keeps MPI's
# (their checkpoints are sliced folders: merged into one file to compare)
merged() { local d; d=$(ls -d "$tmp/ck_$1"/ckpt-* 2>/dev/null | tail -1)
  [ -n "$d" ] && "$bin" ckpt merge "$d" -o "$tmp/$1.safetensors" >/dev/null 2>&1 && echo "$tmp/$1.safetensors"; }
# (on a description without measured reduce-scatters: the rule across hosts, the ring)
job zring --set parallel.optimizer_shard=1 --set parallel.optimizer_shard_threshold_kb=0 --set parallel.cluster="$tmp/slow.yaml"
zring=$(merged zring)
if [ $rc = 0 ] && grep -q "optimizer_shard: [0-9]* buckets reduce-scattered by a ring over 4 ranks (parallel.reduce_scatter auto: the ranks span several hosts)" <<<"$out"
then ok "optimizer_shard 1 across the hosts: $(grep -o 'optimizer_shard: [0-9]* buckets[^)]*' <<<"$out"))"
else bad "optimizer_shard 1, reduce_scatter auto, across the hosts: exit $rc: $out"; fi
job zmpi --set parallel.optimizer_shard=1 --set parallel.optimizer_shard_threshold_kb=0 --set parallel.reduce_scatter=mpi; zmpi=$(merged zmpi)
[ $rc = 0 ] && ! grep -q "reduce-scattered by a ring" <<<"$out" || bad "optimizer_shard 1, reduce_scatter mpi: exit $rc: $out"
for c in "$zring" "$zmpi"; do
  r=$("$cmp" "$one" "$c" 1e-5 2>&1) && ok "optimizer_shard 1 across the hosts ($(basename "$c" .safetensors)) = one process within 1e-5" \
    || bad "optimizer_shard 1 across the hosts vs one process: $r"
done
r=$("$cmp" "$zmpi" "$zring" 1e-6 2>&1) && ok "ring reduce-scatter = MPI's within 1e-6: $r" || bad "ring vs MPI's reduce-scatter: $r"
out=$(timeout 120 "$bin" launch -n 2 -- train "$tmp/mlp.yaml" --set parallel.optimizer_shard=1 2>&1); rc=$?
[ $rc = 0 ] && ! grep -q "reduce-scattered by a ring" <<<"$out" && ok "optimizer_shard 1 on one host: MPI's reduce-scatter" \
  || bad "optimizer_shard 1 on one host: exit $rc: $out"

# 4. the comm layer's own test across the hosts
if [ -n "$topo" ]; then
  out=$(TS_TOPO_EXPECT="2 hosts: node0 (ranks 0-1), node1 (ranks 2-3)" on_host 0 timeout 60 \
        mpirun --allow-run-as-root -n 4 --hostfile "$cl_hostfile" -x TS_TOPO_EXPECT "$topo" 2>&1); rc=$?
  [ $rc = 0 ] && ok "test_topo on 2 hosts x 2: $(tail -1 <<<"$out")" || bad "test_topo on 2 hosts: exit $rc: $out"
fi
exit $fail
