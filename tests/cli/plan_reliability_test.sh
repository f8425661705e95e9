#!/usr/bin/env bash
# Issue #33, the planner's and the data's checks: plan --search honours parallel.cluster (--cluster
# wins, said); cluster files refuse duplicated keys (file:line, as the config loader) and a missing
# file or folder is a configuration error (exit 2), as is a recompute pattern matching nothing;
# --device-memory out of range is refused; memory figures print in a unit that shows them; a
# memory budget is checked before parameters are allocated; a huge resize names the transform; a
# normalize std that is 0 in f32 is refused; non-finite inputs are found on the first batch.
# Usage: plan_reliability_test.sh path/to/tessera
set -u
bin=$1
fail=0
. "$(dirname "$0")/lib.sh"
plan_setup
small_gpt_cfg "$tmp/gpt.yaml"
cluster() { # file mem_bytes [extra line]
  { cat <<YAML
name: tiny
devices_per_node: 4
nodes: 1
peak_flops_f32: 1.0e12
gemm_efficiency: 0.5
mem_bandwidth: 1.0e11
mem_bytes: $2
intra_bw: 1.0e10
intra_latency: 1.0e-6
inter_bw: 1.0e9
inter_latency: 1.0e-5
YAML
    [ $# -gt 2 ] && echo "$3"; } > "$1"
}
cluster "$tmp/tiny.yaml" 8.0e9

# 1. plan --search reads parallel.cluster; --cluster wins and says so
run plan "$tmp/gpt.yaml" -n 2 --search --set parallel.cluster="$tmp/tiny.yaml"
if [ $rc = 0 ] && echo "$out" | grep -q "^search on 2 devices of tiny: .*the cluster from parallel.cluster)" &&
   ! echo "$out" | grep -q "not calibrated"; then ok "plan --search --set parallel.cluster=FILE plans for FILE"
else bad "plan --search parallel.cluster: rc $rc: $out"; fi
run plan "$tmp/gpt.yaml" -n 2 --search --set parallel.cluster="$tmp/tiny.yaml" --cluster dgx-a100-80g
if [ $rc = 0 ] && echo "$out" | grep -q "^search on 2 devices of dgx-a100-80g: .*the cluster from --cluster)" &&
   echo "$out" | grep -q "^plan: --cluster dgx-a100-80g is used, not parallel.cluster=$tmp/tiny.yaml"; then
  ok "--cluster wins over parallel.cluster, said"
else bad "plan --cluster over parallel.cluster: rc $rc: $out"; fi

# 2. cluster files: a duplicated key refused like the config loader's; missing file or folder exit 2
cluster "$tmp/dup.yaml" 8.0e9 "mem_bytes: 16.0e9"
run plan "$tmp/gpt.yaml" -n 2 --cluster "$tmp/dup.yaml"
if [ $rc = 2 ] && [ "$out" = "tessera: $tmp/dup.yaml:12:1: duplicate key 'mem_bytes' (first at line 7)" ]; then
  ok "a cluster file's duplicated key: $out"
else bad "cluster duplicate key: rc $rc: $out"; fi
printf 'model:\n  n_layer: 2\n  n_layer: 3\n' > "$tmp/dupcfg.yaml"
run plan "$tmp/dupcfg.yaml" -n 1
if [ $rc = 2 ] && echo "$out" | grep -q "^tessera: $tmp/dupcfg.yaml:3:3: duplicate key 'model.n_layer' (first at line 2)$"; then
  ok "the same shape as the config loader's: $out"
else bad "config duplicate key: rc $rc: $out"; fi
for c in "$tmp/missing.yaml" "$tmp"; do
  run plan "$tmp/gpt.yaml" -n 2 --search --cluster "$c"
  r1=$rc o1=$out
  # (auto_parallel starts MPI before it reads the cluster: OpenMPI's allocations left at exit are
  # suppressed by scripts/lsan.supp under ASan)
  run train "$tmp/gpt.yaml" --set parallel.mode=auto_parallel --set parallel.cluster="$c"
  if [ $r1 = 2 ] && [ $rc = 2 ] && echo "$o1" | grep -q "^tessera: $c: cluster file: " &&
     echo "$out" | grep -q "^tessera: parallel.cluster: $c: cluster file: "; then ok "cluster $c: exit 2 ($o1)"
  else bad "cluster $c: plan rc $r1 ($o1), train rc $rc ($out)"; fi
done
run train "$tmp/gpt.yaml" --set model.recompute=full --set 'model.recompute_layers=[nomatch]'
if [ $rc = 2 ] && echo "$out" | grep -q "pattern 'nomatch' matches no operator"; then ok "a recompute pattern matching nothing: exit 2"
else bad "recompute pattern: rc $rc: $out"; fi

# 3. --device-memory out of range refused; a 1-byte device's shortfall in a unit that shows it
for m in 99999999999999999999T 8E 0.5; do
  run plan "$tmp/gpt.yaml" -n 1 --device-memory "$m"
  if [ $rc = 2 ] && echo "$out" | grep -q -- "--device-memory"; then ok "--device-memory $m: exit 2 ($out)"
  else bad "--device-memory $m: rc $rc: $out"; fi
done
run plan "$tmp/gpt.yaml" -n 1 --device-memory 9999999T
if [ $rc = 2 ] && echo "$out" | grep -q "out of range"; then ok "--device-memory 9999999T (2^63 bytes and more): out of range"
else bad "--device-memory 9999999T: rc $rc: $out"; fi
cluster "$tmp/one.yaml" 1
run plan "$tmp/gpt.yaml" -n 2 --search --cluster "$tmp/one.yaml"
if [ $rc = 2 ] && echo "$out" | grep -q "the smallest needs .*[0-9.]* [KMG]iB per device, [0-9.]* [KMG]iB over the limit of 1 B$" &&
   ! echo "$out" | grep -q " 0\.0 MiB"; then ok "a 1-byte device: $(echo "$out" | tail -1)"
else bad "mem_bytes 1: rc $rc: $out"; fi

# 4. a 1 TB model under train.max_memory_mb: refused naming the budget before its parameters are
# allocated; a resize too large to allocate names the transform and its size
run train "$tmp/gpt.yaml" --set model.n_embd=16384 --set model.n_head=16 --set model.n_layer=77 --set train.max_memory_mb=1000
if [ $rc = 2 ] && echo "$out" | grep -q "^tessera: train.max_memory_mb: 1000 MiB per rank is less than the .* TiB the plan needs" &&
   ! echo "$out" | grep -q "cannot allocate"; then ok "a 1 TB model over the budget: $(echo "$out" | cut -c1-110)..."
else bad "1 TB model: rc $rc: $out"; fi
idx_split "$tmp/fm" train 32 28 28
idx_split "$tmp/fm" t10k 16 28 28
mlp_cfg "$tmp/mlp.yaml" "$tmp/fm" 2 8
# (under ASan, an allocation this size aborts instead of failing: let it return NULL, as malloc does)
ASAN_OPTIONS="${ASAN_OPTIONS:-}:allocator_may_return_null=1" \
  run train "$tmp/mlp.yaml" --set 'data.transforms=[{name: resize, size: [1048576, 1048576]}, to_float, hwc_to_chw]'
if [ $rc != 0 ] && echo "$out" | grep -q "data.transforms\[0\] (resize) .*resizing to 1048576x1048576 needs 1.00 TiB per sample"; then
  ok "a resize too large: $(echo "$out" | tail -1)"
else bad "huge resize: rc $rc: $out"; fi

# 5. a normalize std that is 0 in f32 refused (exit 2 naming the key); inf inputs found on the first batch
run train "$tmp/mlp.yaml" --set 'data.transforms=[to_float, {name: normalize, mean: [0.5], std: [1.0e-45]}, hwc_to_chw]'
if [ $rc = 2 ] && echo "$out" | grep -q "data.transforms\[1\] (normalize): std\[0\] is 1e-45, which is 1.4013e-45 in f32"; then
  ok "std 1e-45 (denormal in f32): exit 2"
else bad "std 1e-45: rc $rc: $out"; fi
run train "$tmp/mlp.yaml" --set 'data.transforms=[{name: to_float, scale: 1.0e30}, {name: normalize, mean: [0.5], std: [1.0e-30]}, hwc_to_chw]'
if [ $rc != 0 ] && echo "$out" | grep -q "^tessera: training split: sample [0-9]* (.*train-images-idx3-ubyte, image [0-9]*) (batch 0 of epoch 0) has a non-finite input after the transforms" &&
   ! echo "$out" | grep -q "^done"; then ok "inf inputs: found on the first batch, the sample named"
else bad "inf inputs: rc $rc: $out"; fi

exit $fail
