#!/usr/bin/env bash
# Errors of a job whose every rank fails: one line per message, each starting with
# "tessera: [rank r of N] " (before MPI starts too: the rank comes from the launcher's
# environment), written with one write(2) so no line is a mix of two ranks' messages.
# Usage: rank_errors_test.sh path/to/tessera
set -u
bin=$1
fail=0
command -v mpirun >/dev/null || { echo "SKIP: no mpirun in PATH"; exit 77; }
mpi=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# check NAME NP WANT_RC OUTPUT: every tessera line prefixed and whole, every rank heard from
# (WANT_ALL=1: a line from every rank; mpirun may kill a rank before it prints once another failed)
check() {
  local name=$1 np=$2 want=$3 rc=$4 out=$5 all=$6 bad="" r
  local lines; lines=$(grep 'tessera' <<<"$out")
  [ -n "$lines" ] || bad="no tessera line"
  while IFS= read -r l; do
    [ -z "$l" ] && continue
    if ! grep -qE "^tessera: \[rank [0-9]+ of $np\] [^[]" <<<"$l" || [ "$(grep -o 'tessera' <<<"$l" | wc -l)" != 1 ] ||
       [ "$(grep -o '\[rank ' <<<"$l" | wc -l)" != 1 ]; then bad="$bad | $l"; fi
  done <<<"$lines"
  if [ "$all" = 1 ]; then
    for ((r = 0; r < np; r++)); do grep -q "^tessera: \[rank $r of $np\]" <<<"$lines" || bad="$bad | no line of rank $r"; done
  fi
  if [ "$rc" = "$want" ] && [ -z "$bad" ]; then echo "ok: $name -> exit $rc, $(wc -l <<<"$lines") prefixed lines"
  else echo "FAIL: $name -> exit $rc (want $want): $bad"; echo "$out"; fail=1; fi
}
# 1. a config error every rank sees before MPI starts (several times: interleaving is timing)
for np in 2 4; do
  for i in 1 2 3; do
    out=$(timeout 120 "${mpi[@]}" -n $np "$bin" train "$tmp/nonexistent.yaml" 2>&1); rc=$?
    check "missing config, $np ranks, run $i" $np 2 $rc "$out" 0
  done
done
# 2. a data error every rank sees after MPI started (the job is aborted by the first; a missing
#    path is a usage error, exit 2)
cat > "$tmp/nodata.yaml" <<YAML
model: {name: mlp, hidden: [16]}
data: {name: fashion_mnist, path: '$tmp/none', train_limit: 256, test_limit: 64}
train: {steps: 4, batch_size: 32}
parallel: {mode: data_parallel}
YAML
out=$(timeout 120 "${mpi[@]}" -n 2 "$bin" train "$tmp/nodata.yaml" 2>&1); rc=$?
check "missing data after MPI start, 2 ranks" 2 2 $rc "$out" 0   # a path that does not exist: exit 2 in every command
exit $fail
