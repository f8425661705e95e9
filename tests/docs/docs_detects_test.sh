#!/usr/bin/env bash
# The docs test fails when a documented command is broken (issue 31): tests/docs/fixtures/broken.md
# has a working block, a marked refusal (exit 2), a misspelt subcommand, a fence without a
# language, a console transcript and a skipped block; docs_test.py must pass the first, second,
# fifth (the working one, the refusal, the transcript), skip the last with its reason, and fail on the third and fourth naming their lines.
# Usage: docs_detects_test.sh SRC_DIR BUILD_DIR
set -u
src=$1 build=$2 fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
out=$(cd "$src/tests/docs/fixtures" && TESSERA_MAX_STEPS=1 /usr/bin/python3 "$src/tests/docs/docs_test.py" --repo "$src" \
      --build "$build" broken.md 2>&1); rc=$?
echo "$out" | sed 's/^/  | /'
[ $rc = 1 ] && ok "exit 1" || bad "exit $rc, expected 1"
grep -q "^ok   tests/docs/fixtures/broken.md:5 " <<<"$out" && ok "the working block passes" || bad "the working block"
grep -q "^ok   tests/docs/fixtures/broken.md:12 " <<<"$out" && ok "the marked refusal (exit 2) passes" || bad "the marked refusal"
grep -q "^FAIL tests/docs/fixtures/broken.md:18: exit 2, expected 0" <<<"$out" && grep -q "unknown command 'trian'" <<<"$out" &&
  ok "the misspelt subcommand fails, naming its line and showing the output" || bad "the broken block not reported"
grep -q "^FAIL tests/docs/fixtures/broken.md:24: a fenced block without a language" <<<"$out" && ok "an untagged fence fails" || bad "untagged fence"
grep -q "^ok   tests/docs/fixtures/broken.md:30 " <<<"$out" && ok "a console block runs only its \$ lines (with continuation)" || bad "console block"
grep -q "^SKIP tests/docs/fixtures/broken.md:37: a reason that is printed" <<<"$out" && ok "skip prints its reason" || bad "skip"
grep -q "^docs_test: 4 blocks run, 1 failed, 1 skipped, 1 fence errors" <<<"$out" && ok "summary" || bad "summary line"
exit $fail
