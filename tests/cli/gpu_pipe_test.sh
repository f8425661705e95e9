#!/usr/bin/env bash
# Pipeline stages on GPU ranks (issue 29) against the same layouts on CPU ranks, on the stand-in
# driver (TS_FAKECUDA: its emulator runs the kernels) and the stand-in NCCL (TS_FAKENCCL), or on the
# machine's GPUs and NCCL where TS_FAKECUDA is unset (gpu_ranks_test.sh has the other layouts):
#   1. a GPT with tied embeddings in 2 stages (1f1b, a GPU each; interleaved_1f1b with 2 virtual
#      stages, sharing one) follows 2 CPU ranks (2e-4), its sliced checkpoint evaluated by one CPU
#      process as the CPU ranks evaluated; 2 stages x 2 replicas (with and without optimizer_shard
#      2) and 2 stages of tensor parallel 2 on 4 GPU ranks follow 4 CPU ranks;
#   2. a ResNet-8 (batch norm) in 2 stages x 2 replicas on 4 GPU ranks: the running statistics
#      averaged over each stage's replicas, and with SyncBatchNorm the batch statistics over them,
#      follow 4 CPU ranks (1e-4).
# Usage: gpu_pipe_test.sh path/to/tessera   (env TS_FAKECUDA, TS_FAKENCCL, TS_FAKECUDNN: the stand-ins)
set -u
bin=$1
fail=0
. "$(dirname "$0")/lib.sh"
mpi_job 2
command -v python3 >/dev/null || { echo "SKIP: no python3 in PATH (compares the loss listings)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gpu_ranks_env
head -c 30000 /usr/share/common-licenses/GPL-3 > "$tmp/in.txt" 2>/dev/null || seq 1 6000 > "$tmp/in.txt"
ranks_gpt "$tmp/one.yaml"
gpu_ranks_usable "$tmp/one.yaml"
mpi4=("${mpi[@]}"); mpi4[3]=4
# 1. a GPT with tied embeddings (their gradients summed over the stages on the devices) cut in 2
# stages, 4 micro-batches (1f1b; the activations between the GPUs staged through host memory),
# clipping and evaluation: a GPU each, and interleaved_1f1b (2 virtual stages) sharing one;
# against the same on CPU ranks; the GPU job's sliced checkpoint evaluated by one CPU process
ranks_gpt "$tmp/pp.yaml"
sed -i 's/^model: {name: gpt, n_layer: 2,/model: {name: gpt, tie_weights: true, n_layer: 4,/; s/eval_every: -1/eval_every: 2/; s/steps: 3,/steps: 4,/' "$tmp/pp.yaml"
printf 'parallel: {mode: data_parallel, pipeline_stages: 2, micro_batches: 4}\n' >> "$tmp/pp.yaml"
export FAKE_CUDA_COUNT=2
job pp_cpu "$tmp/pp.yaml" CPU
job pp_gpu "$tmp/pp.yaml" GPU --set checkpoint.dir="$tmp/ppck" --set checkpoint.save_last=true
iv=(--set parallel.pipeline_schedule=interleaved_1f1b --set parallel.virtual_stages=2)
job ppv_cpu "$tmp/pp.yaml" CPU "${iv[@]}"
job ppv_shared "$tmp/pp.yaml" GPU "${iv[@]}" --set device_id=0
grep -q "the pipeline's activations staged through host memory" "$tmp/pp_gpu.out" || bad "pipeline on GPUs: not said at the start: $(grep -m1 'collectives:' "$tmp/pp_gpu.out")"
same_listing "$tmp/pp_gpu.txt" "$tmp/pp_cpu.txt" && same_listing "$tmp/ppv_shared.txt" "$tmp/ppv_cpu.txt" &&
  ok "GPT in 2 pipeline stages on GPU ranks (tied embeddings, 4 micro-batches, a GPU each; interleaved sharing one): 4 steps and 2 evaluations follow the CPU ranks: $(tr '\n' ' ' < "$tmp/pp_gpu.txt" | cut -c1-80)" ||
  bad "pipeline on GPUs vs CPU ranks: $(paste "$tmp/pp_gpu.txt" "$tmp/pp_cpu.txt" "$tmp/ppv_shared.txt" "$tmp/ppv_cpu.txt" | tr '\n' ';')"
ck=$(ls -d "$tmp"/ppck/ckpt-* 2>/dev/null | tail -1)
ev=$("$bin" eval "$tmp/pp.yaml" --checkpoint "${ck:-none}" --set parallel.mode=stand_alone --set parallel.pipeline_stages=1 --set parallel.micro_batches=0 2>&1 | grep -o 'loss [0-9.]*')
want=$(grep '^eval' "$tmp/pp_cpu.txt" | tail -1 | awk '{printf "loss %.4f", $2}')
[ -n "$ev" ] && [ "$ev" = "$want" ] && ok "the GPU pipeline's sliced checkpoint evaluated by one CPU process: $ev (the CPU ranks' last evaluation)" ||
  bad "GPU pipeline's checkpoint on the CPU: '$ev' vs '$want' ($ck)"
# 2 stages x 2 data-parallel replicas on 4 GPU ranks, and 2 stages of tensor parallel 2 (semi_auto_parallel inside the stages: the pass's slots on the
# devices, the replicated parameters' gradients over their holders in the stage) on 4 GPU ranks
{ sed '/^parallel:/d; s/tie_weights: true, //' "$tmp/pp.yaml"; printf 'parallel:\n  mode: semi_auto_parallel\n  pipeline_stages: 2\n  micro_batches: 2\n'; gpt_strategies 1 2; } > "$tmp/pptp.yaml"
# and the 2 x 2 with optimizer_shard 2 over each stage's replicas (the tied embeddings' parts
# summed over the pipeline)
{ sed '/^parallel:/d' "$tmp/pp.yaml"; printf 'parallel: {mode: data_parallel, pipeline_stages: 2, micro_batches: 4, optimizer_shard: 2, bucket_size_mb: 0.01, optimizer_shard_threshold_kb: 1}\n'; } > "$tmp/ppz.yaml"
export FAKE_CUDA_COUNT=4
for c in pp pptp ppz; do
  for dev in CPU GPU; do
    "${mpi4[@]}" "$bin" train "$tmp/$c.yaml" --set device_target=$dev --set train.steps=2 --set train.eval_every=-1 --set log.metrics="$tmp/${c}4_$dev.jsonl" > "$tmp/${c}4_$dev.out" 2>&1 ||
      bad "$c on 4 $dev ranks: $(grep -v '^-\|^$' "$tmp/${c}4_$dev.out" | tail -3)"
    loss_listing "$tmp/${c}4_$dev.jsonl" > "$tmp/${c}4_$dev.txt" 2>/dev/null
  done
done
same_listing "$tmp/ppz4_GPU.txt" "$tmp/ppz4_CPU.txt" && ok "2 pipeline stages x 2 replicas with optimizer_shard 2 on 4 GPU ranks follow 4 CPU ranks" ||
  bad "pipeline x DP2 + optimizer_shard 2 on GPUs vs CPU ranks: $(paste "$tmp/ppz4_GPU.txt" "$tmp/ppz4_CPU.txt" | tr '\n' ';')"
same_listing "$tmp/pp4_GPU.txt" "$tmp/pp4_CPU.txt" && ok "2 pipeline stages x 2 data-parallel replicas on 4 GPU ranks follow 4 CPU ranks" ||
  bad "pipeline x DP2 on GPUs vs CPU ranks: $(paste "$tmp/pp4_GPU.txt" "$tmp/pp4_CPU.txt" | tr '\n' ';')"
same_listing "$tmp/pptp4_GPU.txt" "$tmp/pptp4_CPU.txt" && ok "2 pipeline stages of tensor parallel 2 on 4 GPU ranks follow 4 CPU ranks" ||
  bad "pipeline x TP2 on GPUs vs CPU ranks: $(paste "$tmp/pptp4_GPU.txt" "$tmp/pptp4_CPU.txt" | tr '\n' ';')"
# 2. ResNet-8 in 2 stages x 2 replicas: batch norm's running statistics averaged over each stage's
# replicas on the devices (the evaluation reads them), and SyncBatchNorm over the replicas
idx_split "$tmp/d" train 64 12 12 # 12 x 12: a fifth of 28 x 28's work on the stand-in's emulator
idx_split "$tmp/d" t10k 32 12 12
resnet8_cfg "$tmp/rn.yaml" "$tmp/d" "parallel: {mode: data_parallel, pipeline_stages: 2, micro_batches: 2}"
sed -i 's/^train: {steps: 3, batch_size: 8,/train: {steps: 3, batch_size: 8, log_every: 1, eval_every: 3,/' "$tmp/rn.yaml"
export FAKE_CUDA_COUNT=4
for s in false true; do
  for dev in CPU GPU; do
    "${mpi4[@]}" "$bin" train "$tmp/rn.yaml" --set device_target=$dev --set parallel.sync_batchnorm=$s --set log.metrics="$tmp/rn${s}_$dev.jsonl" > "$tmp/rn${s}_$dev.out" 2>&1 ||
      bad "ResNet-8 PP2 x DP2 (sync_batchnorm $s) on 4 $dev ranks: $(grep -v '^-\|^$' "$tmp/rn${s}_$dev.out" | tail -3)"
    loss_listing "$tmp/rn${s}_$dev.jsonl" > "$tmp/rn${s}_$dev.txt" 2>/dev/null
  done
  close "$tmp/rn${s}_GPU.txt" "$tmp/rn${s}_CPU.txt" && ok "ResNet-8 in 2 pipeline stages x 2 replicas on 4 GPU ranks (sync_batchnorm $s): 3 steps and the evaluation follow 4 CPU ranks" ||
    bad "ResNet-8 pipeline (sync_batchnorm $s) on GPUs vs CPU ranks: $(paste "$tmp/rn${s}_GPU.txt" "$tmp/rn${s}_CPU.txt" | tr '\n' ';')"
done
exit $fail
