#!/usr/bin/env bash
# `tessera plot` on hostile metrics files (what tests/fuzz/fuzz_metrics.c found): huge losses
# (an infinite axis span), steps out of range (a line walk of billions of pixels), a truncated
# last line (a run still writing), missing fields, a very long line. `timeout` turns a hang into
# a failure (rc 124). Then the options: --size (the PNG's size; a bad one is exit 2 with one line),
# --log-y / --log-lr (values <= 0 left out with a warning).
# Usage: plot_metrics_test.sh path/to/tessera
set -u
bin=$1
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
expect() { # expect CODE PATTERN FILE
  local out rc
  out=$(timeout 30 "$bin" plot "$3" -o "$tmp/out.png" 2>&1); rc=$?
  if [ "$rc" = "$1" ] && grep -qE -- "$2" <<<"$out"; then echo "ok: plot $(basename "$3") -> exit $rc: $out"
  else echo "FAIL: plot $(basename "$3") -> exit $rc (want $1, 124 = hung): $out"; fail=1; fi
}
printf '{"type":"step","step":1,"loss":2.3}\n{"type":"step","step":2,"loss":1e308}\n{"type":"step","step":3,"loss":-1e308}\n{"type":"eval","step":3,"loss":1e999,"top1":0.5}\n' > "$tmp/huge.jsonl"
expect 0 "wrote" "$tmp/huge.jsonl"
printf '{"type":"step","step":1,"loss":2.3}\n{"type":"step","step":1e300,"loss":1}\n' > "$tmp/farstep.jsonl"
expect 1 "farstep.jsonl:2: step 1e\+300: expected a step number" "$tmp/farstep.jsonl"
printf '{"type":"step","step":1,"loss":2.3}\n{"type":"step","step":2,"loss":2.1}\n{"type":"step","step":3,"lo' > "$tmp/trunc.jsonl"
expect 0 "trunc.jsonl:3: incomplete last line skipped" "$tmp/trunc.jsonl"
printf '{"type":"step","step":1,"loss":2.3}\n{"type":"step","step":2,"lo\n{"type":"step","step":3,"loss":2}\n' > "$tmp/mid.jsonl"
expect 1 "mid.jsonl:2: not a JSON object" "$tmp/mid.jsonl"
printf '{"type":"step"}\n{"step":2,"loss":1}\n{"type":"step","step":"3","loss":1}\n' > "$tmp/missing.jsonl"
expect 1 "no step or eval records with a loss" "$tmp/missing.jsonl"
{ printf '{"type":"step","step":1,"loss":2.3,"pad":"'; head -c 3000000 /dev/zero | tr '\0' x; printf '"}\n'; } > "$tmp/long.jsonl"
expect 0 "wrote" "$tmp/long.jsonl"
# a file from before metrics went through cJSON: printf's nan/-nan/inf as values plot as gaps
printf '{"type":"step","step":1,"loss":2.3}\n{"type":"step","step":2,"loss":-nan,"grad_norm":inf}\n{"type":"step","step":3,"loss":nan}\n{"type":"eval","step":3,"loss":-inf,"top1":0.1}\n' > "$tmp/legacy.jsonl"
expect 0 "wrote" "$tmp/legacy.jsonl"
# and what the trainer writes now: null, with the keys listed under "nonfinite"
printf '{"type":"run","title":"x"}\n{"type":"step","step":1,"loss":2.3}\n{"type":"step","step":2,"loss":null,"nonfinite":["loss"]}\n' > "$tmp/nulls.jsonl"
expect 0 "wrote" "$tmp/nulls.jsonl"

# options: expect_opt CODE PATTERN ARGS...
expect_opt() {
  local code=$1 pat=$2 out rc; shift 2
  out=$(timeout 30 "$bin" plot "$@" 2>&1); rc=$?
  if [ "$rc" = "$code" ] && grep -qE -- "$pat" <<<"$out"; then echo "ok: plot $* -> exit $rc: $out"
  else echo "FAIL: plot $* -> exit $rc (want $code): $out"; fail=1; fi
}
png_size() { od -An -tu1 -j16 -N8 "$1" | awk '{print $3*256+$4 "x" $7*256+$8}'; }
printf '{"type":"step","step":1,"loss":2.3,"lr":0.1}\n{"type":"step","step":2,"loss":0,"lr":0.05}\n{"type":"step","step":3,"loss":1.5,"lr":0}\n' > "$tmp/opt.jsonl"
rm -f "$tmp/s.png"
expect_opt 0 "wrote" "$tmp/opt.jsonl" -o "$tmp/s.png" --size 640x360
if [ "$(png_size "$tmp/s.png" 2>/dev/null)" = 640x360 ]; then echo "ok: --size 640x360 -> 640x360"
else echo "FAIL: --size 640x360 -> $(png_size "$tmp/s.png" 2>&1)"; fail=1; fi
expect_opt 0 "wrote" "$tmp/opt.jsonl" -o "$tmp/d.png"
if [ "$(png_size "$tmp/d.png" 2>/dev/null)" = 1000x420 ]; then echo "ok: default size 1000x420"
else echo "FAIL: default size -> $(png_size "$tmp/d.png" 2>&1)"; fail=1; fi
for bad in 640 640x 0x0 99999x360 abc 640x360x -640x360; do
  out=$(timeout 30 "$bin" plot "$tmp/opt.jsonl" -o "$tmp/b.png" --size "$bad" 2>&1); rc=$?
  if [ "$rc" = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -qF -- "--size '$bad': expected WIDTHxHEIGHT" <<<"$out"; then
    echo "ok: --size $bad -> exit 2: $out"
  else echo "FAIL: --size $bad -> exit $rc (want 2 and one line): $out"; fail=1; fi
done
expect_opt 2 "--size needs WIDTHxHEIGHT" "$tmp/opt.jsonl" -o "$tmp/b.png" --size
expect_opt 0 "log scale: 1 loss value <= 0 not drawn" "$tmp/opt.jsonl" -o "$tmp/l.png" --log-y
expect_opt 0 "log scale: 1 learning rate <= 0 not drawn" "$tmp/opt.jsonl" -o "$tmp/l.png" --log-lr
out=$(timeout 30 "$bin" plot "$tmp/opt.jsonl" -o "$tmp/l.png" 2>&1)
if grep -q "log scale" <<<"$out"; then echo "FAIL: a warning without --log-y: $out"; fail=1; fi
expect_opt 0 "--size WxH.*--log-y.*--log-lr" --help
exit $fail
