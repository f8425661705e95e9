#!/usr/bin/env bash
# device_target / device_id from the command line: GPU on a machine without a usable one is one
# line naming what is missing, exit 2, before anything is built (no metrics file written); with
# the stand-in driver (TS_FAKECUDA, tests/device/fake_cuda.c): a device_id beyond the GPUs, a
# compute capability below 8.0 and a driver that does not start each name themselves; a usable
# GPU trains the job (its kernels emulated) to the CPU's loss; 16-bit working weights under sharding there are refused;
# `tessera calibrate --device GPU` measures the GPU and times the model's operators there (refused
# in one line without a driver); CPU trains.
# Usage: device_cli_test.sh path/to/tessera   (env TS_FAKECUDA: the stand-in driver library)
set -u
bin=$1
fail=0
. "$(dirname "$0")/lib.sh"
mnist_scratch 64 32
mlp_cfg "$tmp/c.yaml" "$tmp/d" 2 16
sed -i "s|^log: {progress: lines}|log: {progress: off, metrics: '$tmp/m.jsonl'}|" "$tmp/c.yaml"
one_line() { [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q "^tessera: "; }

if [ -e /dev/nvidiactl ] || ldconfig -p 2>/dev/null | grep -q "libcuda.so.1"; then
  echo "SKIP part: this machine has an NVIDIA driver (the no-driver refusal is checked where there is none)"
else
  run train "$tmp/c.yaml" --set device_target=GPU
  if [ $rc = 2 ] && one_line && echo "$out" | grep -q "c.yaml: device_target GPU: no NVIDIA driver on this machine (libcuda.so.1" &&
     [ ! -e "$tmp/m.jsonl" ]; then ok "GPU without a driver: exit 2, one line, nothing written"
  else bad "GPU without a driver: rc $rc: $out"; fi
  run calibrate --device GPU -o "$tmp/none.yaml"
  if [ $rc = 2 ] && one_line && echo "$out" | grep -q "device_target GPU: no NVIDIA driver" && [ ! -e "$tmp/none.yaml" ]; then
    ok "calibrate --device GPU without a driver: exit 2, one line, nothing written"
  else bad "calibrate --device GPU without a driver: rc $rc: $out"; fi
fi
run train "$tmp/c.yaml" --set device_target=Ascend
if [ $rc = 2 ] && echo "$out" | grep -q "device_target: unknown value 'Ascend' (expected one of: CPU, GPU)"; then ok "device_target Ascend: exit 2"
else bad "device_target Ascend: rc $rc: $out"; fi
if [ -n "${TS_FAKECUDA:-}" ]; then
  export TESSERA_LIBCUDA=$TS_FAKECUDA
  run train "$tmp/c.yaml" --set device_target=GPU --set device_id=3
  if [ $rc = 2 ] && one_line && echo "$out" | grep -q "device_target GPU: GPU 3 of 1"; then ok "device_id 3 of 1 GPU: exit 2"
  else bad "device_id 3: rc $rc: $out"; fi
  # MindSpore's DEVICE_ID picks the GPU when device_id is not set (modulo the GPUs, as the local
  # rank: `tessera launch` sets it to the rank on its host), and must be a number
  out=$(DEVICE_ID=3 FAKE_CUDA_COUNT=2 "$bin" train "$tmp/c.yaml" --set device_target=GPU --set train.steps=1 --set log.metrics="" 2>&1)
  if echo "$out" | grep -q "^device: GPU 1: Fake GPU 1"; then ok "DEVICE_ID=3 with 2 GPUs: GPU 1"
  else bad "DEVICE_ID=3 with 2 GPUs: $(echo "$out" | head -3)"; fi
  out=$(DEVICE_ID=gpu0 "$bin" train "$tmp/c.yaml" --set device_target=GPU 2>&1); rc=$?
  if [ $rc = 2 ] && one_line && echo "$out" | grep -q "DEVICE_ID 'gpu0' (the environment's) is not a GPU ordinal"; then ok "DEVICE_ID=gpu0: exit 2"
  else bad "DEVICE_ID=gpu0: rc $rc: $out"; fi
  out=$(FAKE_CUDA_CC=7.5 "$bin" train "$tmp/c.yaml" --set device_target=GPU 2>&1); rc=$?
  if [ $rc = 2 ] && one_line && echo "$out" | grep -q "compute capability 7.5, below 8.0"; then ok "compute capability 7.5: exit 2"
  else bad "compute capability 7.5: rc $rc: $out"; fi
  out=$(FAKE_CUDA_INIT=100 "$bin" train "$tmp/c.yaml" --set device_target=GPU 2>&1); rc=$?
  if [ $rc = 2 ] && one_line && echo "$out" | grep -q "the NVIDIA driver does not start (cuInit: CUDA_ERROR_NO_DEVICE"; then
    ok "cuInit without a device: exit 2"
  else bad "cuInit NO_DEVICE: rc $rc: $out"; fi
  # a usable GPU: the job runs there (the stand-in's emulator computes the kernels), with the
  # CPU's losses; a layout it does not run yet is refused naming the key
  if [ "${TS_EMU:-1}" = 0 ]; then echo "SKIP part: the sanitizers' build does not emulate the kernels"; else
  out_cpu=$("$bin" train "$tmp/c.yaml" --set log.progress=lines 2>&1 | grep "^step 2/2" | awk '{print $6}')
  rm -f "$tmp/m.jsonl"
  out=$(TESSERA_GPU_GEMM=tessera "$bin" train "$tmp/c.yaml" --set device_target=GPU --set log.progress=lines 2>&1); rc=$?
  gpu_loss=$(echo "$out" | grep "^step 2/2" | awk '{print $6}')
  if [ $rc = 0 ] && [ -s "$tmp/m.jsonl" ] && [ -n "$gpu_loss" ] && [ "$gpu_loss" = "$out_cpu" ]; then
    ok "a usable GPU trains the job: step 2 loss $gpu_loss, the CPU's $out_cpu"
  else bad "usable GPU: rc $rc, loss '$gpu_loss' vs CPU '$out_cpu': $out"; fi
  fi
  run train "$tmp/c.yaml" --set device_target=GPU --set parallel.mode=data_parallel --set parallel.optimizer_shard=1 --set train.amp_level=O2 --set parallel.optimizer_shard_weights=low
  if [ $rc = 2 ] && one_line && echo "$out" | grep -q "parallel.optimizer_shard_weights: low .* needs device_target CPU"; then
    ok "16-bit working weights under sharding on the GPU: refused naming the keys (the layouts that run: tests/cli/gpu_ranks_test.sh)"
  else bad "optimizer_shard_weights low on the GPU: rc $rc: $out"; fi
  # calibrate on the GPU (the stand-in's figures are the emulator's: only their presence and the
  # file's use are checked): the GEMM peaks, host copies and launch cost measured, the model's
  # operators timed by device events; the file prices a plan, its batches' copies included
  out=$(TESSERA_GPU_GEMM=tessera TESSERA_CLUSTER_CACHE="$tmp/cache.yaml" "$bin" calibrate "$tmp/c.yaml" --device GPU --steps 2 -o "$tmp/gpu.yaml" 2>&1); rc=$?
  h2d=$(sed -n 's/^h2d_bw: *\([^ ]*\).*/\1/p' "$tmp/gpu.yaml" 2>/dev/null)
  if [ $rc = 0 ] && grep -q "^device: .*Fake GPU 0" "$tmp/gpu.yaml" && awk -v h="${h2d:-0}" 'BEGIN { exit !(h > 0) }' &&
     echo "$out" | grep -q "^  matmul/dense .* of the peak" && echo "$out" | grep -q "the cost model prices it"; then
    ok "calibrate --device GPU: $(grep -o '^device: "[^"]*"' "$tmp/gpu.yaml"), h2d_bw $h2d, the model's operators timed on the device"
  else bad "calibrate --device GPU: rc $rc: $out"; fi
  run plan "$tmp/c.yaml" -n 1 --cluster "$tmp/gpu.yaml"
  if [ $rc = 0 ] && echo "$out" | grep -q "^  batch to device"; then ok "plan --cluster (the GPU's file): prices the batch's copy"
  else bad "plan --cluster the GPU's file: rc $rc: $out"; fi
  unset TESSERA_LIBCUDA
else echo "SKIP part: TS_FAKECUDA not set (the stand-in driver)"; fi
run train "$tmp/c.yaml" --set device_target=CPU
if [ $rc = 0 ] && [ -s "$tmp/m.jsonl" ]; then ok "device_target CPU trains"; else bad "CPU: rc $rc: $out"; fi
# `tessera plan` of a GPU job (no GPU needed): which GPU each rank drives, what carries the collectives
plan_dev() { "$bin" plan "$tmp/c.yaml" --set device_target=GPU --set parallel.mode=data_parallel "$@" 2>/dev/null | grep "^devices: "; }
p=$(plan_dev -n 16 --set train.batch_size=32 --set parallel.cluster=dgx-a100-80g)
echo "$p" | grep -q "rank r on GPU r mod 8 of node r / 8 (dgx-a100-80g: 8 GPUs a node" && echo "$p" | grep -q "collectives: NCCL where every rank has a GPU of its own" &&
  echo "$p" | grep -q "buckets overlapped with backward" && ok "plan, 16 ranks on dgx-a100-80g: ${p:0:100}..." || bad "plan, 16 ranks: '$p'"
p=$(plan_dev -n 2 --set device_id=0)
echo "$p" | grep -q "every rank on GPU 0 (device_id); collectives: MPI staged through pinned host memory (ranks share a GPU)" &&
  ok "plan, 2 ranks on GPU 0: $p" || bad "plan, 2 ranks on GPU 0: '$p'"
p=$(plan_dev -n 2 --set parallel.comm_backend=mpi --set train.micro_batch_size=8)
echo "$p" | grep -q "collectives: MPI staged through pinned host memory (parallel.comm_backend mpi)" && ! echo "$p" | grep -q overlapped &&
  ok "plan, comm_backend mpi: the staged path" || bad "plan, comm_backend mpi: '$p'"
p=$(plan_dev -n 2 --set parallel.mode=semi_auto_parallel)
echo "$p" | grep -q "devices: each rank on its local rank's GPU.*collectives: NCCL where every rank has a GPU of its own" &&
  echo "$p" | grep -q "the gradients all-reduced over their holders" && ok "plan, semi_auto_parallel on GPUs: ${p:0:120}..." || bad "plan, semi_auto_parallel: '$p'"
p=$(plan_dev -n 2 --set parallel.pipeline_stages=2 --set train.micro_batch_size=8)
echo "$p" | grep -q "the gradients all-reduced over a stage's replicas; the activations between stages staged through host memory" &&
  ok "plan, pipeline stages on GPUs: ${p:0:60}... the activations staged" || bad "plan, pipeline: '$p'"
exit $fail
