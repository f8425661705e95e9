#!/usr/bin/env bash
# `tessera launch --rank-table`: the host file made from the table is removed when the job ends
# (it used to stay in /tmp after every run), mpirun's exit status is returned, SIGTERM sent to the
# launcher reaches mpirun, and a bad table is one line and exit 2 with nothing left behind.
# Usage: launch_test.sh path/to/tessera
set -u
bin=$1
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export TMPDIR=$tmp/t OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
mkdir -p "$TMPDIR"
# host files of the launcher of pid $1: any in the private $TMPDIR, and those in /tmp (where they
# used to be made) named for that pid and made since the run started (a machine's /tmp may hold a
# stale file of an earlier job whose pid the launcher happens to reuse)
left() {
  ls -d "$TMPDIR"/tessera-hosts-* 2>/dev/null
  find /tmp -maxdepth 1 -name "tessera-hosts-$1*" -newer "$tmp/mark" 2>/dev/null
}
# run ARGS...: runs tessera in the background (to know its pid), sets out, rc and pid
run() { touch "$tmp/mark"; "$bin" "$@" > "$tmp/run.log" 2>&1 & pid=$!; wait $pid; rc=$?; out=$(cat "$tmp/run.log"); }
cat > "$tmp/rt.json" <<'JSON'
{"version": "1.0", "server_count": "1", "server_list": [
 {"server_id": "localhost", "device": [{"device_id": "0", "rank_id": "0"}, {"device_id": "1", "rank_id": "1"}]}],
 "status": "completed"}
JSON

# a bad table: exit 2, one line naming the file, the server and the escaped value; no host file
printf '{"server_list":[{"server_id":"localhost\\nevil slots=64","device":[{"rank_id":"zero"}]}]}' > "$tmp/bad.json"
run launch --rank-table "$tmp/bad.json" -- --version
if [ "$rc" = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -qF 'bad.json: server_list[0]: server_id "localhost\nevil slots=64"' <<<"$out" && [ -z "$(left $pid)" ]
then echo "ok: bad rank table -> exit 2: $out"; else echo "FAIL: bad rank table -> exit $rc: $out; left: $(left $pid)"; fail=1; fi

# a malformed host file (issue 33): exit 2 in one line naming the file, line and token, before
# mpirun (whose own parse error is a multi-line box); a line without slots is OpenMPI's and passes
printf 'node0 slots=2\nthis is : not a hostfile ===\n' > "$tmp/bad-hosts"
run launch -n 2 --hostfile "$tmp/bad-hosts" --mpirun /bin/false -- --version
if [ "$rc" = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -qF "bad-hosts: line 2: 'is' after host this is not KEY=N" <<<"$out"
then echo "ok: malformed host file -> exit 2: $out"; else echo "FAIL: malformed host file -> exit $rc: $out"; fail=1; fi
printf 'localhost\n' > "$tmp/plain-hosts"
run launch -n 2 --hostfile "$tmp/plain-hosts" --dry-run -- --version
if [ "$rc" = 0 ] && grep -q -- "--hostfile $tmp/plain-hosts" <<<"$out"
then echo "ok: a host without slots passes to mpirun"; else echo "FAIL: plain host file -> exit $rc: $out"; fail=1; fi

# a fake mpirun: the host file exists while it runs; SIGTERM to the launcher reaches it
cat > "$tmp/fake-mpirun" <<EOF2
#!/usr/bin/env bash
while [ \$# -gt 0 ]; do [ "\$1" = --hostfile ] && cp "\$2" "$tmp/seen-hosts"; shift; done
trap 'echo term > "$tmp/got-term"; exit 7' TERM
touch "$tmp/started"
for _ in \$(seq 1 300); do sleep 0.1; done
exit 3
EOF2
chmod +x "$tmp/fake-mpirun"
touch "$tmp/mark"
"$bin" launch --rank-table "$tmp/rt.json" --mpirun "$tmp/fake-mpirun" -- --version > "$tmp/fake.log" 2>&1 &
job=$! pid=$!
for _ in $(seq 1 100); do [ -e "$tmp/started" ] && break; sleep 0.1; done
kill -TERM $job
wait $job; rc=$?
if [ "$rc" = 7 ] && [ -e "$tmp/got-term" ] && grep -qx "localhost slots=2" "$tmp/seen-hosts" 2>/dev/null && [ -z "$(left $pid)" ]
then echo "ok: SIGTERM forwarded to mpirun, its exit status 7 returned, host file removed"
else echo "FAIL: SIGTERM -> exit $rc, got-term: $(cat "$tmp/got-term" 2>/dev/null), hosts: $(cat "$tmp/seen-hosts" 2>/dev/null), left: $(left $pid)"; cat "$tmp/fake.log"; fail=1; fi

# real runs through mpirun
if ! command -v mpirun >/dev/null; then
  echo "SKIP: no mpirun in PATH"
  [ $fail = 0 ] && exit 77 || exit 1
fi
run launch -n 2 --rank-table "$tmp/rt.json" -- --version
if [ "$rc" = 0 ] && [ "$(grep -c '^tessera [0-9]' <<<"$out")" = 2 ] && [ -z "$(left $pid)" ]
then echo "ok: launch -n 2 --rank-table -- --version -> exit 0, no host file left"
else echo "FAIL: launch --rank-table -- --version -> exit $rc: $out; left: $(left $pid)"; fail=1; fi
run launch -n 2 --rank-table "$tmp/rt.json" -- train "$tmp/nonexistent.yaml"
if [ "$rc" = 2 ] && [ -z "$(left $pid)" ]
then echo "ok: launch --rank-table -- train nonexistent.yaml -> exit 2, no host file left"
else echo "FAIL: launch --rank-table -- train nonexistent.yaml -> exit $rc: $out; left: $(left $pid)"; fail=1; fi
exit $fail
