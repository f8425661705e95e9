#!/usr/bin/env bash
# data_parallel and semi_auto_parallel on GPU ranks (issue 29) against the same layouts on CPU ranks, on the
# stand-in driver (TS_FAKECUDA: its emulator runs the kernels) and the stand-in NCCL (TS_FAKENCCL:
# its ranks meet in shared memory), or on the machine's GPUs and NCCL where TS_FAKECUDA is unset:
#   1. 2 ranks sharing GPU 0: the collectives staged through pinned host memory over MPI (said at
#      the start, naming the ranks that share the GPU); 20 MLP steps (adamw, clipping, evaluation
#      every 10) follow 2 CPU ranks within 1e-4 relative, two runs bitwise the same;
#   2. a GPU per rank: NCCL chosen and said; the same 20 steps within 1e-4 of the CPU ranks', two
#      runs bitwise; the gradients' buckets all-reduced during backward (small buckets: several)
#      and one all-reduce after it (parallel.overlap false) agree within 1e-6;
#      parallel.comm_backend mpi forces the staged path there and agrees too;
#   3. gradient accumulation (2 micro-batches), gradients summed (gradients_mean false);
#   4. a ResNet-8 (batch norm: each rank's batch statistics, the running statistics averaged over
#      the ranks before evaluation and saving): 3 steps and the evaluation follow the CPU ranks;
#      its checkpoint (saved by rank 0 from the GPU) resumed on one CPU process; with SyncBatchNorm
#      (the statistics over both ranks' batches) it follows the CPU ranks too;
#   5. refused before training, one line, exit 2: comm_backend nccl with ranks sharing a GPU
#      (naming them), what does not run on GPUs yet (16-bit working weights under sharding);
#   6. semi_auto_parallel: a small GPT as tensor parallel 2 on a GPU each (NCCL) and sharing one
#      (staged) follows 2 CPU ranks (2e-4), its sliced checkpoint evaluated by one CPU process;
#      auto_parallel (the search's layout) follows the CPU ranks;
#      data parallel 2 x tensor parallel 2 on 4 GPU ranks follows 4 CPU ranks;
#   7. hybrid_parallel (examples/hybrid_mlp.c, the C API) on 2 GPU ranks follows 2 CPU ranks;
#   8. optimizer_shard 1 (ZeRO-1) under data_parallel (a GPU each, sharing one) and with the GPT's
#      tensor parallel 2 follows the CPU ranks; its checkpoint resumed on CPU ranks continues theirs;
#      optimizer_shard 2 (ZeRO-2: the gradients in staging slots on the device, reduce-scattered
#      during backward) with accumulation, and with the GPT's tensor parallel 2, the same;
#      optimizer_shard 3 (ZeRO-3: the parameters' buckets all-gathered on the device before use)
#      the same, its checkpoint resumed on CPU ranks; optimizer_shard_group 2 on 4 ranks the same;
#      LAMB with the GPT's tensor parallel 2 and with optimizer_shard 2 the same.
# Pipeline stages on GPU ranks: gpu_pipe_test.sh.
# Usage: gpu_ranks_test.sh path/to/tessera   (env TS_FAKECUDA, TS_FAKENCCL, TS_FAKECUDNN: the stand-ins;
#        on a GPU machine TS_GPU_COUNT: its GPUs, with one the "GPU each" jobs share it, staged)
set -u
bin=$1
fail=0
. "$(dirname "$0")/lib.sh"
mpi_job 2
command -v python3 >/dev/null || { echo "SKIP: no python3 in PATH (compares the loss listings)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gpu_ranks_env
idx_split "$tmp/d" train 256 28 28
idx_split "$tmp/d" t10k 64 28 28
mlp_cfg "$tmp/c.yaml" "$tmp/d" 20 16 "parallel: {mode: data_parallel}"
sed -i 's/^train: {steps: 20, batch_size: 16, eval_batch_size: 16, log_every: 1}/train: {steps: 20, batch_size: 16, eval_batch_size: 16, log_every: 1, eval_every: 10, seed: 7}/;
        s/^optimizer: {name: sgd, lr: 0.01}/optimizer: {name: adamw, lr: 0.003, clip_grad_norm: 0.5}/;
        s/^log: {progress: lines}/log: {progress: off}/' "$tmp/c.yaml"
gpu_ranks_usable "$tmp/c.yaml"
# 1. two ranks on one GPU: staged MPI
export FAKE_CUDA_COUNT=1
job cpu "$tmp/c.yaml" CPU
job shared "$tmp/c.yaml" GPU --set device_id=0
job shared2 "$tmp/c.yaml" GPU --set device_id=0
s=$(said shared)
echo "$s" | grep -q "MPI staged through pinned host memory (ranks 0 and 1 share GPU 0)" || bad "sharing GPU 0: '$s'"
close "$tmp/shared.txt" "$tmp/cpu.txt" && ok "2 ranks sharing one GPU ($s): 20 steps and 2 evaluations follow 2 CPU ranks: final loss $(grep '^20 ' "$tmp/shared.txt" | cut -d' ' -f2) vs $(grep '^20 ' "$tmp/cpu.txt" | cut -d' ' -f2)" ||
  bad "shared GPU vs CPU ranks: $(paste "$tmp/shared.txt" "$tmp/cpu.txt" | head -4)"
cmp -s "$tmp/shared.txt" "$tmp/shared2.txt" && ok "two runs sharing a GPU: bitwise the same" || bad "shared GPU runs differ"
# 2. a GPU per rank: NCCL (the local rank's GPU by default)
export FAKE_CUDA_COUNT=2
job nccl "$tmp/c.yaml" GPU
job nccl2 "$tmp/c.yaml" GPU
s=$(said nccl)
if [ -n "${TS_FAKECUDA:-}" ] && [ -z "${TS_FAKENCCL:-}" ]; then want="NCCL not found"
elif [ -z "${TS_FAKECUDA:-}" ] && [ "${TS_GPU_COUNT:-2}" -lt 2 ]; then want="ranks 0 and 1 share GPU 0" # one GPU: staged
else want="NCCL 2."; fi
echo "$s" | grep -q "$want" || bad "a GPU per rank: '$s' (expected $want)"
close "$tmp/nccl.txt" "$tmp/cpu.txt" && ok "2 ranks, a GPU each ($s): 20 steps follow 2 CPU ranks" ||
  bad "GPU per rank vs CPU ranks: $(paste "$tmp/nccl.txt" "$tmp/cpu.txt" | head -4)"
cmp -s "$tmp/nccl.txt" "$tmp/nccl2.txt" && ok "two runs, a GPU each: bitwise the same" || bad "GPU-per-rank runs differ"
# the gradients in buckets all-reduced as backward completes them (NCCL, parallel.overlap): small
# buckets (several), and none (parallel.overlap false: one all-reduce after backward) agree
if [ "$want" = "NCCL 2." ]; then
  job buckets "$tmp/c.yaml" GPU --set parallel.bucket_size_mb=0.01
  job whole "$tmp/c.yaml" GPU --set parallel.overlap=false
  nb=$(grep -o "gradients in [0-9]* buckets overlapped with backward" "$tmp/buckets.out" | head -1)
  case "$nb" in "gradients in "[2-9]*|"gradients in "[1-9][0-9]*) ;; *) bad "small buckets: '$(said buckets)'" ;; esac
  said whole | grep -q "overlapped" && bad "parallel.overlap false still overlaps: '$(said whole)'"
  close "$tmp/buckets.txt" "$tmp/nccl.txt" 1e-6 && close "$tmp/whole.txt" "$tmp/nccl.txt" 1e-6 &&
    ok "$nb (0.01 MiB each), and one all-reduce after backward (parallel.overlap false): the same losses" ||
    bad "buckets vs whole: $(paste "$tmp/buckets.txt" "$tmp/whole.txt" "$tmp/nccl.txt" | head -4)"
fi
job mpi "$tmp/c.yaml" GPU --set parallel.comm_backend=mpi
said mpi | grep -q "MPI staged through pinned host memory (parallel.comm_backend mpi)" || bad "comm_backend mpi: '$(said mpi)'"
close "$tmp/mpi.txt" "$tmp/cpu.txt" && ok "parallel.comm_backend mpi on a GPU per rank: $(said mpi | cut -c1-60)...: follows the CPU ranks" ||
  bad "comm_backend mpi: $(paste "$tmp/mpi.txt" "$tmp/cpu.txt" | head -4)"
# 3. accumulation, summed gradients
acc=(--set train.micro_batch_size=8 --set parallel.gradients_mean=false --set optimizer.name=momentum --set optimizer.lr=0.01)
job acc_cpu "$tmp/c.yaml" CPU "${acc[@]}"
job acc_gpu "$tmp/c.yaml" GPU "${acc[@]}"
close "$tmp/acc_gpu.txt" "$tmp/acc_cpu.txt" && ok "2 micro-batches, gradients summed: the GPU ranks follow the CPU ranks" ||
  bad "accumulation: $(paste "$tmp/acc_gpu.txt" "$tmp/acc_cpu.txt" | head -4)"
# 4. a ResNet-8: batch norm's running statistics averaged over the ranks; its checkpoint on the CPU
idx_split "$tmp/r" train 64 12 12 # the ResNet's: 12 x 12, a fifth of 28 x 28's work on the emulator
idx_split "$tmp/r" t10k 32 12 12
resnet8_cfg "$tmp/res.yaml" "$tmp/r" "parallel: {mode: data_parallel}"
job res_cpu "$tmp/res.yaml" CPU
job res_gpu "$tmp/res.yaml" GPU --set checkpoint.dir="$tmp/ck" --set checkpoint.save_last=true
close "$tmp/res_gpu.txt" "$tmp/res_cpu.txt" 1e-3 && ok "ResNet-8 on 2 GPU ranks: 3 steps and the evaluation follow 2 CPU ranks (1e-3)" ||
  bad "ResNet: $(paste "$tmp/res_gpu.txt" "$tmp/res_cpu.txt" | head -4)"
# SyncBatchNorm: the statistics over both ranks' batches (each rank's sums gathered on the
# devices, summed in rank order), forward and backward
job sbn_cpu "$tmp/res.yaml" CPU --set parallel.sync_batchnorm=true
job sbn_gpu "$tmp/res.yaml" GPU --set parallel.sync_batchnorm=true
close "$tmp/sbn_gpu.txt" "$tmp/sbn_cpu.txt" 1e-3 && ! cmp -s "$tmp/sbn_cpu.txt" "$tmp/res_cpu.txt" &&
  ok "ResNet-8 with SyncBatchNorm on 2 GPU ranks follows 2 CPU ranks (1e-3; not the unsynchronised run's figures)" ||
  bad "SyncBatchNorm: $(paste "$tmp/sbn_gpu.txt" "$tmp/sbn_cpu.txt" "$tmp/res_cpu.txt" | head -4)"
ck=$(ls "$tmp"/ck/*.safetensors 2>/dev/null | tail -1)
ev=$("$bin" eval "$tmp/res.yaml" --set parallel.mode=stand_alone --checkpoint "$ck" 2>&1 | grep -o "loss [0-9.]*  top1 [0-9.]*%")
want=$(grep '^eval' "$tmp/res_cpu.txt" | tail -1)
python3 -c "
import sys
e=sys.argv[1].split(); w=sys.argv[2].split()
sys.exit(0 if abs(float(e[1])-float(w[1]))<=6e-5*max(1,abs(float(w[1]))) and abs(float(e[3].rstrip('%'))/100-float(w[2]))<=5.1e-5 else 1)" \
  "${ev:-x 0 x 0%}" "${want:-eval 1 1}" 2>/dev/null &&
  ok "the GPU ranks' checkpoint evaluated by one CPU process: $ev (the CPU ranks' last evaluation: $want)" ||
  bad "GPU ranks' checkpoint on the CPU: '$ev' vs '$want' ($ck)"
# 6. semi_auto_parallel: a small GPT cut Megatron's way (tests/cli/lib.sh gpt_strategies): the
# plans' collectives, the vocabulary-sharded embedding and cross-entropy on the devices, the
# replicated parameters' gradients summed over their holders there, clipping with the slices
# counted once; against the same layout on CPU ranks (2e-4, lib.sh same_listing)
head -c 30000 /usr/share/common-licenses/GPL-3 > "$tmp/in.txt" 2>/dev/null || seq 1 6000 > "$tmp/in.txt"
ranks_gpt "$tmp/one.yaml"
ranks_gpt "$tmp/tp2.yaml" 1 2
export FAKE_CUDA_COUNT=2
job tp2_cpu "$tmp/tp2.yaml" CPU --set checkpoint.dir="$tmp/ck_cpu" --set checkpoint.save_last=true
job tp2_gpu "$tmp/tp2.yaml" GPU --set checkpoint.dir="$tmp/ck_gpu" --set checkpoint.save_last=true
job tp2_shared "$tmp/tp2.yaml" GPU --set device_id=0
same_listing "$tmp/tp2_gpu.txt" "$tmp/tp2_cpu.txt" && same_listing "$tmp/tp2_shared.txt" "$tmp/tp2_cpu.txt" &&
  ok "GPT tensor-parallel 2 on GPU ranks ($(said tp2_gpu | cut -c1-40)...; and sharing GPU 0, staged): 3 steps and the evaluation follow 2 CPU ranks: $(tr '\n' ' ' < "$tmp/tp2_gpu.txt" | cut -c1-90)" ||
  bad "GPT TP2 on GPUs vs CPU ranks: $(paste "$tmp/tp2_gpu.txt" "$tmp/tp2_shared.txt" "$tmp/tp2_cpu.txt" | tr '\n' ';')"
# its sliced checkpoint (each rank's slices, from the GPUs) evaluated by one CPU process
ck=$(ls -d "$tmp"/ck_gpu/ckpt-* 2>/dev/null | tail -1)
ev=$("$bin" eval "$tmp/one.yaml" --checkpoint "${ck:-none}" 2>&1 | grep -o "loss [0-9.]*  top1 [0-9.]*%")
want=$(grep '^eval' "$tmp/tp2_cpu.txt" | tail -1)
python3 -c "
import sys
e=sys.argv[1].split(); w=sys.argv[2].split()
sys.exit(0 if abs(float(e[1])-float(w[1]))<=2e-4*max(1,abs(float(w[1]))) and abs(float(e[3].rstrip('%'))/100-float(w[2]))<=5.1e-5 else 1)" \
  "${ev:-x 0 x 0%}" "${want:-eval 1 1}" 2>/dev/null &&
  ok "the GPU ranks' sliced checkpoint ($(basename "${ck:-none}")) evaluated by one CPU process: $ev (the CPU ranks': $want)" ||
  bad "GPU ranks' sliced checkpoint on the CPU: '$ev' vs '$want' ($ck)"
# auto_parallel: the search's layout, run on the GPU ranks as on the CPU ranks
job ap_cpu "$tmp/one.yaml" CPU --set parallel.mode=auto_parallel --set train.steps=2
job ap_gpu "$tmp/one.yaml" GPU --set parallel.mode=auto_parallel --set train.steps=2
same_listing "$tmp/ap_gpu.txt" "$tmp/ap_cpu.txt" && ok "auto_parallel on 2 GPU ranks follows 2 CPU ranks" ||
  bad "auto_parallel on GPUs vs CPU ranks: $(paste "$tmp/ap_gpu.txt" "$tmp/ap_cpu.txt" | tr '\n' ';')"
# 4 ranks, data parallel 2 x tensor parallel 2: the slots' groups and the replicated parameters'
# gradients over their data-parallel pairs (communicators of their own on the devices)
ranks_gpt "$tmp/dp2tp2.yaml" 2 2
mpi4=("${mpi[@]}"); mpi4[3]=4
export FAKE_CUDA_COUNT=4
for dev in CPU GPU; do
  "${mpi4[@]}" "$bin" train "$tmp/dp2tp2.yaml" --set device_target=$dev --set train.steps=2 --set log.metrics="$tmp/dt_$dev.jsonl" > "$tmp/dt_$dev.out" 2>&1 ||
    bad "DP2 x TP2 on 4 $dev ranks: $(grep -v '^-\|^$' "$tmp/dt_$dev.out" | tail -3)"
  loss_listing "$tmp/dt_$dev.jsonl" > "$tmp/dt_$dev.txt" 2>/dev/null
done
same_listing "$tmp/dt_GPU.txt" "$tmp/dt_CPU.txt" &&
  ok "GPT data parallel 2 x tensor parallel 2 on 4 GPU ranks ($(grep -o 'collectives: [^;]*' "$tmp/dt_GPU.out" | head -1)): follows 4 CPU ranks" ||
  bad "DP2 x TP2 on GPUs vs CPU ranks: $(paste "$tmp/dt_GPU.txt" "$tmp/dt_CPU.txt" | tr '\n' ';')"
# 7. hybrid_parallel: the C API's model of one rank (examples/hybrid_mlp.c: sharded parameters, a
# hand-placed all-reduce) on 2 GPU ranks follows 2 CPU ranks
hyb=$(dirname "$bin")/example_hybrid_mlp
if [ -x "$hyb" ]; then
  export FAKE_CUDA_COUNT=2
  for dev in CPU GPU; do
    "${mpi[@]}" "$hyb" "$(dirname "$0")/../../examples/hybrid_mlp.yaml" --hidden 32 --set data.path="$tmp/d" --set train.epochs=1 \
      --set train.batch_size=32 --set optimizer.clip_grad_norm=0.5 --set device_target=$dev --set log.progress=off \
      --set train.log_every=1 --set log.metrics="$tmp/hy_$dev.jsonl" > "$tmp/hy_$dev.out" 2>&1 ||
      bad "hybrid_parallel on $dev ranks: $(grep -v '^-\|^$' "$tmp/hy_$dev.out" | tail -3)"
    loss_listing "$tmp/hy_$dev.jsonl" > "$tmp/hy_$dev.txt" 2>/dev/null
  done
  same_listing "$tmp/hy_GPU.txt" "$tmp/hy_CPU.txt" &&
    ok "hybrid_parallel (examples/hybrid_mlp.c) on 2 GPU ranks: 8 steps and the evaluation follow 2 CPU ranks" ||
    bad "hybrid_parallel on GPUs vs CPU ranks: $(paste "$tmp/hy_GPU.txt" "$tmp/hy_CPU.txt" | tr '\n' ';')"
else bad "no $hyb (built with the tests)"; fi
# 8. optimizer_shard 1 (ZeRO-1; small buckets, every parameter sharded): each bucket
# reduce-scattered and all-gathered on the devices, the optimizer over the rank's parts; against
# the same on CPU ranks; its checkpoint (the optimizer state in the CPU's shard layout) resumed on
# CPU ranks continues the CPU's run
z1=(--set parallel.optimizer_shard=1 --set parallel.bucket_size_mb=0.01 --set parallel.optimizer_shard_threshold_kb=0)
export FAKE_CUDA_COUNT=2
zero_case() { # name what [--set ...]: the MLP on CPU ranks; 10 steps on a GPU each, checkpointed; 20 sharing
              # GPU 0; the checkpoint resumed on CPU ranks (steps 11-20): each follows the CPU ranks
  local n=$1 what=$2; shift 2
  job ${n}_cpu "$tmp/c.yaml" CPU "$@"
  job ${n}_gpu "$tmp/c.yaml" GPU "$@" --set train.steps=10 --set checkpoint.dir="$tmp/${n}ck" --set checkpoint.save_last=true
  job ${n}_shared "$tmp/c.yaml" GPU "$@" --set device_id=0
  job ${n}_res "$tmp/c.yaml" CPU "$@" --set checkpoint.dir="$tmp/${n}ck" --set checkpoint.resume=auto --set checkpoint.strict=false
  grep -v '^eval' "$tmp/${n}_gpu.txt" > "$tmp/${n}_gpu10.txt"
  head -10 "$tmp/${n}_cpu.txt" | grep -v '^eval' > "$tmp/${n}_cpu10.txt"
  close "$tmp/${n}_gpu10.txt" "$tmp/${n}_cpu10.txt" && close "$tmp/${n}_shared.txt" "$tmp/${n}_cpu.txt" && grep -q '^20 ' "$tmp/${n}_res.txt" &&
    close <(grep -E '^(1[1-9]|20) ' "$tmp/${n}_res.txt") <(grep -E '^(1[1-9]|20) ' "$tmp/${n}_cpu.txt") &&
    ok "$what on GPU ranks (a GPU each, and sharing one) follows the CPU ranks; its checkpoint resumed on CPU ranks continues their run (steps 11-20)" ||
    bad "$what: $(paste "$tmp/${n}_gpu.txt" "$tmp/${n}_shared.txt" "$tmp/${n}_res.txt" "$tmp/${n}_cpu.txt" | tr '\n' ';' | cut -c1-600)"
}
zero_case z "optimizer_shard 1" "${z1[@]}"
job zt_cpu "$tmp/tp2.yaml" CPU "${z1[@]}"
job zt_gpu "$tmp/tp2.yaml" GPU "${z1[@]}"
same_listing "$tmp/zt_gpu.txt" "$tmp/zt_cpu.txt" && ok "GPT tensor parallel 2 with optimizer_shard 1 on GPU ranks follows the CPU ranks" ||
  bad "GPT TP2 + optimizer_shard 1: $(paste "$tmp/zt_gpu.txt" "$tmp/zt_cpu.txt" | tr '\n' ';')"
# optimizer_shard 2 (ZeRO-2): no whole gradient buffer; backward writes each bucket into a staging
# slot on the device, reduce-scattered from there as soon as the node completing it is queued;
# with accumulation (2 micro-batches) the reduced parts added up, some parameters replicated
# (the 10 biases, under the 0.05 KiB threshold), a bucket a parameter so that the two slots are
# reused within backward; a GPU each and sharing one; the GPT TP2 (sliced parameters unreduced, the
# replicated ones over both ranks) on a GPU each; checkpoint resumed on CPU ranks continues theirs
z2=(--set parallel.optimizer_shard=2 --set parallel.bucket_size_mb=0.0001 --set parallel.optimizer_shard_threshold_kb=0.05 --set train.micro_batch_size=8)
export FAKE_CUDA_COUNT=2
zero_case z2 "optimizer_shard 2 with 2 micro-batches" "${z2[@]}"
# optimizer_shard 3 (ZeRO-3): the rank's parameters only, each bucket all-gathered into its gather
# slot on the device before the node reading it first (forward, and again in backward), the
# gradients as ZeRO-2's; a GPU each and sharing one; its checkpoint resumed on CPU ranks
z3=("${z2[@]}" --set parallel.optimizer_shard=3)
zero_case z3 "optimizer_shard 3 with 2 micro-batches" "${z3[@]}"
# optimizer_shard_group 2 on 4 ranks (FSDP's hybrid shard): ZeRO-2 within pairs of ranks, the
# reduced parts all-reduced across the pairs, the replicated gradients over all four, each part
# counted once in the norm
for dev in CPU GPU; do
  FAKE_CUDA_COUNT=4 "${mpi4[@]}" "$bin" train "$tmp/c.yaml" --set device_target=$dev "${z2[@]}" --set parallel.optimizer_shard_group=2 \
    --set train.steps=6 --set train.eval_every=3 --set log.metrics="$tmp/hs_$dev.jsonl" > "$tmp/hs_$dev.out" 2>&1 ||
    bad "optimizer_shard_group 2 on 4 $dev ranks: $(grep -v '^-\|^$' "$tmp/hs_$dev.out" | tail -3)"
  loss_listing "$tmp/hs_$dev.jsonl" > "$tmp/hs_$dev.txt" 2>/dev/null
done
close "$tmp/hs_GPU.txt" "$tmp/hs_CPU.txt" && ok "optimizer_shard 2 with optimizer_shard_group 2 on 4 GPU ranks follows 4 CPU ranks" ||
  bad "optimizer_shard_group 2 on GPUs vs CPU ranks: $(paste "$tmp/hs_GPU.txt" "$tmp/hs_CPU.txt" | tr '\n' ';')"
# LAMB, whose trust ratios need each parameter's whole norms: summed over the slices (the GPT's
# tensor parallel 2) and over the shards (ZeRO-2) between its two phases on the devices
lamb=(--set optimizer.name=lamb --set optimizer.lr=0.05 --set optimizer.weight_decay=0.01)
job lt_cpu "$tmp/tp2.yaml" CPU "${lamb[@]}"
job lt_gpu "$tmp/tp2.yaml" GPU "${lamb[@]}"
job lz_cpu "$tmp/c.yaml" CPU "${z2[@]}" "${lamb[@]}" --set train.steps=6 --set train.eval_every=3
job lz_gpu "$tmp/c.yaml" GPU "${z2[@]}" "${lamb[@]}" --set train.steps=6 --set train.eval_every=3
close "$tmp/lt_gpu.txt" "$tmp/lt_cpu.txt" 1e-5 && close "$tmp/lz_gpu.txt" "$tmp/lz_cpu.txt" 1e-5 &&
  ok "lamb on GPU ranks with the GPT's tensor parallel 2 and with optimizer_shard 2 follows the CPU ranks (norms summed over slices and shards)" ||
  bad "lamb on GPU ranks: $(paste "$tmp/lt_gpu.txt" "$tmp/lt_cpu.txt" "$tmp/lz_gpu.txt" "$tmp/lz_cpu.txt" | tr '\n' ';')"
job z2t_cpu "$tmp/tp2.yaml" CPU "${z1[@]}" --set parallel.optimizer_shard=2
job z2t_gpu "$tmp/tp2.yaml" GPU "${z1[@]}" --set parallel.optimizer_shard=2
same_listing "$tmp/z2t_gpu.txt" "$tmp/z2t_cpu.txt" && ok "GPT tensor parallel 2 with optimizer_shard 2 on GPU ranks follows the CPU ranks" ||
  bad "GPT TP2 + optimizer_shard 2: $(paste "$tmp/z2t_gpu.txt" "$tmp/z2t_cpu.txt" | tr '\n' ';')"
# 5. refusals: one line, exit 2, nothing trained
export FAKE_CUDA_COUNT=1
refuse() { # what expected-text [--set ...]
  local what=$1 want=$2; shift 2
  out=$("${mpi[@]}" "$bin" train "$tmp/c.yaml" --set device_target=GPU "$@" 2>&1); local rc=$?
  if [ $rc = 2 ] && echo "$out" | grep -q "$want" && ! echo "$out" | grep -q '"type": *"step"'; then ok "$what: exit 2 ($(echo "$out" | grep -m1 "$want" | cut -c1-150))"
  else bad "$what: exit $rc: $(echo "$out" | grep -v '^-\|^$' | head -3)"; fi
}
refuse "comm_backend nccl, ranks sharing GPU 0" "parallel.comm_backend nccl: ranks 0 and 1 share GPU 0" --set device_id=0 --set parallel.comm_backend=nccl
refuse "16-bit working weights under sharding on GPUs" "parallel.optimizer_shard_weights: low (16-bit working weights and gradients, f32 master weights sharded) needs device_target CPU" --set parallel.optimizer_shard=1 --set train.amp_level=O2 --set parallel.optimizer_shard_weights=low
exit $fail
