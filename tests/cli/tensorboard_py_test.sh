#!/usr/bin/env bash
# log.tensorboard read back by Python's protobuf (tests/tools/tb_events_check.py; the C reading of
# the same format always runs in tests/train/test_progress.c): a short run's event file has both
# CRCs right, parses as tensorflow.Event, and its train/loss scalars are the metrics file's losses
# as float32. Skipped (77) without Debian's python3-protobuf.
# Usage: tensorboard_py_test.sh path/to/tessera
set -u
bin=$1
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
/usr/bin/python3 -c 'import google.protobuf' 2>/dev/null || { echo "SKIP: no python3-protobuf (google.protobuf)"; exit 77; }
cd "$tmp" || exit 1
idx_split d train 64 8 8
idx_split d t10k 32 8 8
mlp_cfg c.yaml d 8 16 "log: {progress: off, metrics: m.jsonl, tensorboard: tb}"
sed -i '/^log: {progress: lines}$/d; s/log_every: 1}/log_every: 1, eval_every: 4}/' c.yaml
run train c.yaml
[ "$rc" = 0 ] || { echo "FAIL: train -> $rc: $out"; exit 1; }
ev=$(ls tb/events.out.tfevents.* 2>/dev/null | head -1)
[ -n "$ev" ] || { echo "FAIL: no event file in tb/"; exit 1; }
scal=$(/usr/bin/python3 "$here/../tools/tb_events_check.py" "$ev"); prc=$?
[ "$prc" = 0 ] || { echo "FAIL: tb_events_check.py -> $prc: $scal"; exit 1; }
want=$(/usr/bin/python3 -c 'import json,struct,sys
for r in map(json.loads, open(sys.argv[1])):
    if r.get("type") == "step": print("train/loss", r["step"], repr(struct.unpack("f", struct.pack("f", r["loss"]))[0]))
    if r.get("type") == "eval": print("eval/top1", r["step"], repr(struct.unpack("f", struct.pack("f", r["top1"]))[0]))' m.jsonl)
got=$(grep -E '^(train/loss|eval/top1) ' <<<"$scal")
if [ -n "$want" ] && [ "$got" = "$want" ]; then ok "python protobuf reads the event file: $(wc -l <<<"$scal") scalars, train/loss and eval/top1 = the metrics file's"
else bad "scalars differ: got [$got] want [$want]"; fi
exit $fail
