#!/usr/bin/env bash
# A training run's outputs in folders that do not exist yet: the run makes them (log.metrics,
# log.plot, log.tensorboard, log.trace), as it does checkpoint.dir; the curves of log.plot are
# drawn at the end, so their folder is made at the start. An output whose folder cannot be made
# (a file in the way) is refused before step 1 with one line naming the key and the path, and
# nothing is written or moved: the previous run's metrics file stays where it was, unchanged.
# (The quickstart with checkpoint.dir moved elsewhere trained for 7 minutes, then failed on
# runs/quickstart/curves.png: its folder had never been made.)
# Usage: train_outputs_test.sh path/to/tessera
set -u
bin=$1
fail=0
. "$(dirname "$0")/lib.sh"
mnist_scratch 32 16
mlp_cfg "$tmp/c.yaml" "$tmp/d" 2 16
cd "$tmp" || exit 1

# 1. every output in new folders, relative and absolute paths
run train c.yaml --set log.metrics=m/a/m.jsonl --set log.plot="$tmp/p/b/curves.png" --set log.tensorboard=tb/c \
  --set log.profile=trace --set log.trace=tr/d/trace.json --set checkpoint.dir=ck/e
if [ $rc = 0 ] && [ -s m/a/m.jsonl ] && [ -s p/b/curves.png ] && [ -n "$(ls tb/c/events.out.tfevents.* 2>/dev/null)" ] &&
   [ -s tr/d/trace.json ] && [ -n "$(ls ck/e/*.safetensors 2>/dev/null)" ]; then
  ok "outputs in new folders: metrics, curves, TensorBoard events, trace, checkpoint written"
else
  bad "outputs in new folders: rc $rc, files: $(find m p tb tr ck -type f 2>/dev/null | tr '\n' ' '): $(echo "$out" | tail -2)"
fi

# 2. a folder that cannot be made: refused before step 1, nothing written or moved
touch afile
before=$(sha256sum m/a/m.jsonl)
refused() { # key value
  run train c.yaml --set log.metrics=m/a/m.jsonl --set "$1=$2"
  if [ $rc != 0 ] && [ "$(echo "$out" | grep -c '^tessera: ')" = 1 ] && echo "$out" | grep -q "^tessera: $1: $2.*Not a directory" &&
     ! echo "$out" | grep -q "^step 1/" && [ "$(sha256sum m/a/m.jsonl)" = "$before" ] && [ ! -e m/a/m.1.jsonl ]; then
    ok "$1 under a file: refused before step 1, the previous metrics untouched: $(echo "$out" | grep '^tessera: ')"
  else
    bad "$1 under a file: rc $rc, metrics $(sha256sum m/a/m.jsonl | cut -c1-12) (was ${before:0:12}), $(ls m/a | tr '\n' ' '): $out"
  fi
}
refused log.plot afile/q/curves.png
refused log.tensorboard afile/tb
exit $fail
