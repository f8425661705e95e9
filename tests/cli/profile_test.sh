#!/usr/bin/env bash
# `tessera profile`: a short profiled run of the MLP on a slice of Fashion-MNIST writes a trace
# that parses (python3, when there) and a profile record in the metrics, prints the step
# breakdown and tables; --summary reads the trace back; bad arguments exit 2 with one line; the
# default window is clamped to a shorter run, an explicit one past the run's end refused.
# Usage: profile_test.sh path/to/tessera
set -u
bin=$1
fail=0
fm=${TS_TEST_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
expect() { # expect CODE PATTERN -- args...
  local code=$1 pat=$2; shift 3
  local out rc
  out=$("$bin" "$@" 2>&1); rc=$?
  if [ "$rc" != "$code" ] || ! grep -qzE -- "$pat" <<<"$out"; then # -z: the pattern may span lines
    echo "FAIL: tessera $* -> exit $rc (want $code), output: $out"; fail=1
  else
    echo "ok: tessera $* -> exit $rc"
  fi
}
expect 0 "usage: tessera profile" -- profile --help
expect 2 "--steps needs A:B" -- profile x.yaml --steps 5:2
expect 2 "--steps needs A:B" -- profile x.yaml --steps five
expect 2 "-o needs a value" -- profile x.yaml -o
expect 2 "none.json: cannot read the trace" -- profile --summary "$tmp/none.json"
printf '{"a": 1}\n' > "$tmp/notrace.json"
expect 2 "notrace.json: not a Chrome trace" -- profile --summary "$tmp/notrace.json"
if [ ! -r "$fm/train-images-idx3-ubyte" ] && [ ! -r "$fm/train-images-idx3-ubyte.gz" ]; then
  echo "SKIP: no Fashion-MNIST in $fm"; [ $fail = 0 ] && exit 77; exit 1
fi
cat > "$tmp/mlp.yaml" <<YAML
model: {name: mlp, hidden: [64]}
data: {name: fashion_mnist, path: '$fm', train_limit: 1024, test_limit: 128, num_workers: 1}
train: {batch_size: 64, seed: 1, eval_every: -1}
optimizer: {name: momentum, lr: 0.05}
checkpoint: {dir: '$tmp/ck'}
log: {metrics: '$tmp/m.jsonl'}
YAML
expect 2 "log.profile: unknown value 'full'" -- train "$tmp/mlp.yaml" --set log.profile=full
expect 0 "profile: 6 steps \(3\.\.8\).*step [0-9.]+ ms: data .* forward .* backward .*op type.*dense.*operator \(top by time\).*trace: $tmp/t.json" \
  -- profile "$tmp/mlp.yaml" --steps 3:8 -o "$tmp/t.json"
[ -e "$tmp/ck" ] && ls "$tmp/ck" | grep -q safetensors && { echo "FAIL: profile wrote a checkpoint"; fail=1; }
grep -q '"type":"profile"' "$tmp/m.jsonl" || { echo "FAIL: no profile record in the metrics"; fail=1; }
grep '"type":"step"' "$tmp/m.jsonl" | tail -1 | grep -q '"forward_ms"' || { echo "FAIL: no forward_ms in the step records"; fail=1; }
if command -v python3 >/dev/null; then
  python3 - "$tmp/t.json" <<'PY' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
xs = [e for e in d["traceEvents"] if e["ph"] == "X"]
assert xs and all(k in e for e in xs for k in ("ts", "dur", "pid", "tid", "name", "cat")), "X events lack fields"
steps = sorted({e["args"]["step"] for e in xs if e["cat"] == "step"})
assert steps == list(range(3, 9)), steps
print("ok: trace parses,", len(xs), "X events, steps", steps)
PY
fi
expect 0 "6 steps.*op type.*dense" -- profile --summary "$tmp/t.json"
# a run shorter than the default window 6:25: the window clamped to it, said in the header, and a
# table of the steps recorded (it was "steps 6..25 recorded" and an all-zero table); an explicit
# window past the run's last step: exit 2 naming both numbers
expect 0 "steps 3\.\.4 recorded of 4 \(the default 6:25 clamped to the run's 4 steps\).*profile: 2 steps \(3\.\.4\).*dense +4 " \
  -- profile "$tmp/mlp.yaml" --set train.steps=4 -o "$tmp/t4.json"
expect 2 "^tessera: profile: --steps 6:25 ends after the run's last step 4 \([^)]*train.steps 4\)" \
  -- profile "$tmp/mlp.yaml" --set train.steps=4 --steps 6:25
expect 2 "--steps 10:20 ends after the run's last step 16 \([^)]*train.epochs 1 x 16 steps per epoch\)" \
  -- profile "$tmp/mlp.yaml" --set train.epochs=1 --steps 10:20
# the default trace path: <checkpoint.dir>/trace.json
expect 0 "trace: $tmp/ck/trace.json" -- profile "$tmp/mlp.yaml" --steps 1:2
exit $fail
