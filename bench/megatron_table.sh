#!/usr/bin/env bash
# Megatron-LM's published weak-scaling table (Narayanan et al. 2021, "Efficient Large-Scale
# Language Model Training on GPU Clusters Using Megatron-LM", Table 1: GPT 1.7B..1T on 32..3072
# A100 80 GB GPUs, sequence 2048, vocabulary 51,200) next to what `tessera plan` predicts on the
# dgx-a100-80g cluster, planned as Megatron trains (train.amp_level O2: bf16 compute, fp32 master
# weights and Adam): --fix of each published (t, p, batch) with 1 row per micro-batch, recompute
# full and the plain 1F1B schedule, then --search for a plan of its own (tensor parallelism inside
# a node). Per-GPU TFLOP/s are counted as Megatron counts them (its formula, Appendix: 96 B s l h^2
# (1 + s/6h + V/16lh) per step, recomputation included) over the predicted step.
# Columns: published TFLOP/s per GPU, --fix's (Megatron's count over the predicted step), their
# ratio, the published step (their count over their rate) and --fix's predicted step in seconds,
# its GB per GPU ('!': over 80 GB); the searched plan (dp x tp x pp, pieces per rank, rows per
# micro-batch, recompute, shard stage), its predicted step, the speed-up over the published plan's prediction,
# its GB and the search's wall time.
# Usage: bench/megatron_table.sh [path/to/tessera] [row names...]   (rows: 1.7b 3.6b ... 1t)
set -u
bin=${1:-build/tessera}
shift || true
dir=$(cd "$(dirname "$0")/.." && pwd)/examples/megatron
# name heads hidden layers t p gpus batch published-TFLOP/s
table="1.7b 24 2304 24 1 1 32 512 137
3.6b 32 3072 30 2 1 64 512 138
7.5b 32 4096 36 4 1 128 512 142
18b 48 6144 40 8 1 256 1024 135
39b 64 8192 48 8 2 512 1536 138
76b 80 10240 60 8 4 1024 1792 140
145b 96 12288 80 8 8 1536 2304 148
310b 128 16384 96 8 16 1920 2160 155
530b 128 20480 105 8 35 2520 2520 163
1t 160 25600 128 8 64 3072 3072 163"
want="$*"
field() { echo "$1" | sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" | tr -d '"'; }
printf "%-5s %5s %2s %2s %5s | %6s %6s %6s %5s %5s %5s  | %-31s %6s %6s %5s %5s\n" model gpus t p batch \
  pub.TF "fix.TF" "ratio" "pub.s" "fix.s" "GB" "--search: plan (fits 80 GB)" "s" "x fix" "GB" "time"
echo "$table" | while read -r name heads hidden layers t p gpus batch pub; do
  if [ -n "$want" ] && ! echo " $want " | grep -q " $name "; then continue; fi
  cfg=$dir/gpt-$name.yaml
  dp=$((gpus / t / p))
  flops=$(awk -v B=$batch -v s=2048 -v l=$layers -v h=$hidden -v V=51200 \
    'BEGIN { printf "%.6e", 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)) }')
  fix=$("$bin" plan "$cfg" -n "$gpus" --cluster dgx-a100-80g --set train.amp_level=O2 \
    --fix "dp=$dp,tp=$t,pp=$p,micro_batch_size=1,recompute=full,cuts=megatron" --json 2>&1)
  st=$(field "$fix" step_time_s)
  mem=$(field "$fix" memory_per_device_bytes)
  fits=$(field "$fix" fits)
  t0=$(date +%s.%N)
  srch=$("$bin" plan "$cfg" -n "$gpus" --cluster dgx-a100-80g --set train.amp_level=O2 --search --json 2>&1)
  t1=$(date +%s.%N)
  sst=$(field "$srch" step_time_s)
  if [ -n "$sst" ]; then
    plan="$(field "$srch" dp)x$(field "$srch" tp)x$(field "$srch" pp) v$(field "$srch" virtual_stages) mbs $(field "$srch" micro_batch_size) rc $(field "$srch" recompute) z$(field "$srch" zero_stage)"
    smem=$(field "$srch" memory_per_device_bytes)
    sfits=$(field "$srch" fits)
  else plan="none fits"; smem=0; sfits=false; sst=0; fi
  awk -v n=$name -v g=$gpus -v t=$t -v p=$p -v b=$batch -v pub=$pub -v F=$flops -v st="${st:-0}" -v mem="${mem:-0}" \
    -v fits="${fits:-error}" -v plan="$plan" -v sst=$sst -v smem=$smem -v sfits=$sfits -v dt="$(echo "$t1 - $t0" | bc)" \
    'BEGIN { tf = st > 0 ? F / g / st / 1e12 : 0; ps = F / g / pub / 1e12;
             printf "%-5s %5d %2d %2d %5d | %6.0f %6.1f %6.2f %5.1f %5.1f %5.1f%s| %-31s %6.1f %6.2f %5.1f %5.1f\n",
               n, g, t, p, b, pub, tf, tf / pub, ps, st, mem / 1e9, (fits == "true" ? " " : "!"), plan, sst,
               (sst > 0 ? st / sst : 0), smem / 1e9, dt }'
done
