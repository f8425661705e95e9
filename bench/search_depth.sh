#!/usr/bin/env bash
# How the plan search's time grows with a model's depth (the growth issue #33 fixed): `tessera plan
# --search` of a GPT of width 16 (1 head, block 128, vocabulary 256) on 4 devices of dgx-a100-80g
# at each depth given, REPEAT times each, the depths interleaved (hosts drift), printing each
# depth's median wall time, the search's own clock, the plan chosen, and the ratio of the time to
# the previous depth's (2.0 per doubling is linear; the candidates do not grow with depth: 156).
# Usage: bench/search_depth.sh [path/to/tessera] [REPEAT] [DEPTH...]   (default: build/tessera 1 25 50 100 200)
set -u
bin=${1:-build/tessera}
rep=${2:-1}
shift 2 2>/dev/null || shift $#
depths=${*:-25 50 100 200}
[ -x "$bin" ] || { echo "search_depth.sh: no tessera binary at $bin (build it, or give its path)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
head -c 200000 /usr/share/common-licenses/GPL-3 > "$tmp/in.txt"
declare -A times=() chosen=()
for ((r = 0; r < rep; r++)); do
  for L in $depths; do
    cat > "$tmp/d$L.yaml" <<YAML
model: {name: gpt, n_layer: $L, n_head: 1, n_embd: 16, block_size: 128, vocab_size: 256}
data: {name: text, path: '$tmp/in.txt', seq_len: 128, val_fraction: 0.1, transforms: []}
train: {steps: 2, batch_size: 32}
YAML
    t0=$EPOCHREALTIME
    out=$("$bin" plan "$tmp/d$L.yaml" -n 4 --search --cluster dgx-a100-80g 2>/dev/null) ||
      { echo "search_depth.sh: the $L-layer search failed" >&2; exit 1; }
    dt=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
    times[$L]="${times[$L]:-} $dt"
    chosen[$L]="$(grep '^search on' <<<"$out" | sed 's/.*candidate plans, \([0-9]*\) built.* in \([0-9.]* s\).*/\1 priced, \2 by its clock/') | $(grep '^chosen:' <<<"$out" | sed 's/^chosen: //')"
  done
done
echo "plan --search, GPT width 16 on 4 devices of dgx-a100-80g, $rep run(s) per depth, load $(cut -d' ' -f1 /proc/loadavg) at the end"
printf "%7s %10s %8s  %s\n" layers "median s" "x prev" "plans | chosen"
prev=
for L in $depths; do
  med=$(tr ' ' '\n' <<<"${times[$L]}" | grep . | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')
  ratio=$([ -n "$prev" ] && awk -v a="$med" -v b="$prev" 'BEGIN { printf "%.2f", a / b }' || echo -)
  printf "%7s %10s %8s  %s\n" "$L" "$med" "$ratio" "${chosen[$L]}"
  prev=$med
done
