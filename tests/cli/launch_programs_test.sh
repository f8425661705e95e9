#!/usr/bin/env bash
# MindSpore's and torchrun's launch habits (issue #30): `tessera launch` runs any program (a Python
# script gets RANK_ID/RANK_SIZE/DEVICE_ID and RANK/WORLD_SIZE/LOCAL_RANK per rank, RANK_TABLE_FILE
# with --rank-table; `-- tessera profile ...` is the tessera command); processes started one by
# one with those variables (MindSpore's run.sh, torchrun's habits) are refused in one line saying
# how to start the job, as are variables that disagree with mpirun's ranks, while a job whose
# variables agree (or are unset) runs; several ranks without parallel.mode train data_parallel
# (said once), stand_alone on several ranks is refused; auto_parallel and `tessera plan --search`
# run on a machine never calibrated (an empty cache), saying so in one line on rank 0.
# Usage: launch_programs_test.sh path/to/tessera
set -u
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") # absolute: some runs are from $tmp
fail=0
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi_job 2
export TMPDIR=$tmp/t
mkdir -p "$TMPDIR" "$tmp/home" "$tmp/xdg"
unset RANK_ID RANK_SIZE DEVICE_ID RANK_TABLE_FILE RANK WORLD_SIZE LOCAL_RANK TESSERA_CLUSTER_CACHE
idx_split "$tmp/d" train 64 28 28
idx_split "$tmp/d" t10k 32 28 28
mlp_cfg "$tmp/c.yaml" "$tmp/d" 3 16 "checkpoint: {dir: '$tmp/ck'}"
cat > "$tmp/rt.json" <<'JSON'
{"version": "1.0", "server_count": "1", "server_list": [
 {"server_id": "localhost", "device": [{"device_id": "0", "rank_id": "0"}, {"device_id": "1", "rank_id": "1"}]}],
 "status": "completed"}
JSON
lines() { grep -c "$1" <<<"$out"; }

# ---- 1. tessera launch runs programs ----
run launch -n 2 -- tessera --version
if [ "$rc" = 0 ] && [ "$(lines '^tessera [0-9]')" = 2 ]; then ok "launch -- tessera --version on 2 ranks"
else bad "launch -- tessera --version -> $rc: $out"; fi
run launch -n 2 -- no-such-program-here x.py
if [ "$rc" = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q "'no-such-program-here' is not a tessera command" <<<"$out"
then ok "a missing program: exit 2, one line"; else bad "missing program -> $rc: $out"; fi
run launch -n 2 --restarts 1 -- sh -c true
if [ "$rc" = 2 ] && grep -q "a program ('sh') runs once" <<<"$out"; then ok "--restarts with a program refused"
else bad "--restarts with a program -> $rc: $out"; fi
run launch -n 2 -- tessera profile "$tmp/c.yaml" --steps 2:3 -o "$tmp/t.json"
if [ "$rc" = 0 ] && grep -q "profile: 2 steps (2..3)" <<<"$out" && grep -q "2 rank(s)" <<<"$out" && [ -s "$tmp/t.json" ]
then ok "launch -n 2 -- tessera profile"; else bad "launch -- tessera profile -> $rc: $out"; fi
py=$(command -v python3 || true)
if [ -n "$py" ]; then
  printf 'import os\nv = [os.environ.get(k, "-") for k in ("RANK_ID", "RANK_SIZE", "DEVICE_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "RANK_TABLE_FILE")]\nos.write(1, ("env " + " ".join(v) + "\\n").encode())\n' > "$tmp/env.py"
  run launch -n 2 -- "$py" "$tmp/env.py"
  if [ "$rc" = 0 ] && grep -qx "env 0 2 0 0 2 0 -" <<<"$out" && grep -qx "env 1 2 1 1 2 1 -" <<<"$out"
  then ok "launch -n 2 -- python3 script.py: each rank's variables"; else bad "launch -- python3 -> $rc: $out"; fi
  (cd "$tmp" && "$bin" launch --rank-table rt.json -- "$py" env.py > "$tmp/o" 2>&1); rc=$?; out=$(cat "$tmp/o")
  if [ "$rc" = 0 ] && grep -qx "env 0 2 0 0 2 0 $tmp/rt.json" <<<"$out" && grep -qx "env 1 2 1 1 2 1 $tmp/rt.json" <<<"$out"
  then ok "launch --rank-table -- python3: RANK_TABLE_FILE as an absolute path"; else bad "launch --rank-table -- python3 -> $rc: $out"; fi
else
  echo "SKIP: no python3: programs' variables not checked"
fi
pydir=$(dirname "$bin")/python
py=  # the first Python that imports the package (pyenv's may lack numpy)
for p in "${PYTHON:-}" /usr/bin/python3 "$(command -v python3)"; do
  [ -n "$p" ] && [ -x "$p" ] && PYTHONPATH=$pydir "$p" -c 'import tessera' 2>/dev/null && { py=$p; break; }
done
if [ -n "$py" ]; then
  init='import os, tessera; tessera.init(); os.write(1, b"world %d %d\n" % (tessera.get_rank(), tessera.get_group_size()))'
  out=$(PYTHONPATH=$pydir "$bin" launch -n 2 -- "$py" -c "$init" 2>&1); rc=$?
  if [ "$rc" = 0 ] && grep -qx "world 0 2" <<<"$out" && grep -qx "world 1 2" <<<"$out"; then ok "launch -- python3 -c 'tessera.init()': ranks 0 and 1 of 2"
  else bad "launch -- python3 tessera.init() -> $rc: $out"; fi
  # MindSpore's run.sh: one process per device, started alone: refused at init() saying how to start it
  out=$(cd "$tmp" && RANK_TABLE_FILE=rt.json RANK_ID=1 RANK_SIZE=2 DEVICE_ID=1 PYTHONPATH=$pydir "$py" -c "$init" 2>&1); rc=$?
  if [ "$rc" != 0 ] && grep -q "ValueError: RANK_SIZE=2 in the environment (MindSpore's), but this process was not started by mpirun.*start the job with \`tessera launch --rank-table rt.json -- " <<<"$out" &&
     ! grep -q "^world" <<<"$out"; then ok "python init() started alone with RANK_SIZE=2: refused"
  else bad "python init() with RANK_SIZE=2 -> $rc: $out"; fi
  out=$(WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 PYTHONPATH=$pydir "$py" -c "$init" 2>&1); rc=$?
  if [ "$rc" != 0 ] && grep -q "ValueError: WORLD_SIZE=2 in the environment (torchrun's).*tessera launch -n 2 -- " <<<"$out"
  then ok "python init() with torchrun's WORLD_SIZE=2: refused"; else bad "python init() with WORLD_SIZE=2 -> $rc: $out"; fi
else
  echo "SKIP: the tessera package is not importable from $pydir: Python's init() not checked"
fi

# ---- 2. the variables of other launchers, on tessera train ----
out=$(cd "$tmp" && RANK_TABLE_FILE=rt.json RANK_ID=0 RANK_SIZE=2 DEVICE_ID=0 "$bin" train c.yaml 2>&1); rc=$?
if [ "$rc" = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] &&
   grep -q "^tessera: RANK_SIZE=2 in the environment (MindSpore's), but this process was not started by mpirun: .*start the job with \`tessera launch --rank-table rt.json -- .*tessera train c.yaml\`" <<<"$out"
then ok "train started alone with RANK_SIZE=2: exit 2, one line"; else bad "train with RANK_SIZE=2 alone -> $rc: $out"; fi
out=$(WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 "$bin" train "$tmp/c.yaml" 2>&1); rc=$?
if [ "$rc" = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q "WORLD_SIZE=2 in the environment (torchrun's), but this process was not started by mpirun" <<<"$out"
then ok "train started alone with WORLD_SIZE=2: exit 2, one line"; else bad "train with WORLD_SIZE=2 alone -> $rc: $out"; fi
out=$(RANK_SIZE=two "$bin" train "$tmp/c.yaml" 2>&1); rc=$?
if [ "$rc" = 2 ] && grep -q "RANK_SIZE='two' in the environment is not a whole number" <<<"$out"; then ok "RANK_SIZE=two: exit 2"
else bad "RANK_SIZE=two -> $rc: $out"; fi
out=$(RANK_SIZE=1 RANK_ID=0 "$bin" train "$tmp/c.yaml" --set checkpoint.dir= 2>&1); rc=$?
[ "$rc" = 0 ] && ok "RANK_SIZE=1 RANK_ID=0 alone: trains" || bad "RANK_SIZE=1 alone -> $rc: $out"
out=$(timeout 120 "${mpi[@]}" -x RANK_SIZE=4 "$bin" train "$tmp/c.yaml" --set parallel.mode=data_parallel 2>&1); rc=$?
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -q "RANK_SIZE=4 in the environment (MindSpore's), but MPI started 2 ranks" <<<"$out"
then ok "mpirun -n 2 with RANK_SIZE=4: refused (exit $rc)"; else bad "mpirun with RANK_SIZE=4 -> $rc: $out"; fi
out=$(timeout 120 "${mpi[@]}" -x RANK=0 "$bin" train "$tmp/c.yaml" --set parallel.mode=data_parallel 2>&1); rc=$?
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -q "RANK=0 in the environment (torchrun's), but MPI made this process rank 1 of 2" <<<"$out"
then ok "mpirun -n 2 with RANK=0 on both ranks: refused (exit $rc)"; else bad "mpirun with RANK=0 -> $rc: $out"; fi
out=$(timeout 120 "${mpi[@]}" -x RANK_SIZE=2 -x WORLD_SIZE=2 "$bin" train "$tmp/c.yaml" --set parallel.mode=data_parallel \
      --set checkpoint.dir= 2>&1); rc=$?
if [ "$rc" = 0 ] && grep -q "data_parallel on 2 ranks" <<<"$out"; then ok "mpirun -n 2 with RANK_SIZE=2 WORLD_SIZE=2 (agreeing): trains"
else bad "mpirun with agreeing variables -> $rc: $out"; fi

# ---- 3. several ranks, no parallel.mode: data_parallel, said once; stand_alone refused ----
run launch -n 2 -- train "$tmp/c.yaml"
if [ "$rc" = 0 ] && [ "$(lines "c.yaml sets no parallel.mode: data_parallel on the job's 2 ranks")" = 1 ] &&
   grep -q "data_parallel on 2 ranks" <<<"$out" && [ "$(lines '^done: ')" = 1 ] && [ "$(ls "$tmp/ck" | grep -c safetensors)" = 1 ]
then ok "launch -n 2 -- train without parallel.mode: data_parallel, one job, one checkpoint"
else bad "launch -n 2 -- train without parallel.mode -> $rc: $out; $(ls "$tmp/ck")"; fi
out=$(timeout 120 "${mpi[@]}" "$bin" train "$tmp/c.yaml" --set parallel.mode=stand_alone --set checkpoint.dir="$tmp/ck2" 2>&1); rc=$?
if [ "$rc" = 2 ] && grep -q "parallel.mode stand_alone trains in one process, but the job has 2 ranks" <<<"$out" && [ ! -e "$tmp/ck2" ]
then ok "mpirun -n 2 with stand_alone: exit 2, nothing written"; else bad "mpirun -n 2 stand_alone -> $rc: $out"; fi

# ---- 4. auto_parallel and tessera plan on a machine never calibrated ----
export HOME=$tmp/home XDG_CACHE_HOME=$tmp/xdg
out=$(timeout 120 "${mpi[@]}" "$bin" train "$tmp/c.yaml" --set parallel.mode=auto_parallel --set checkpoint.dir= 2>&1); rc=$?
if [ "$rc" = 0 ] && [ "$(lines "not calibrated on this machine")" = 1 ] &&
   grep -q "^tessera warning: \[rank 0 of 2\] cluster 'local': not calibrated on this machine .*a built-in estimate" <<<"$out" &&
   grep -q "auto_parallel on 2 ranks" <<<"$out" && [ -z "$(ls -A "$tmp/xdg")" ]
then ok "auto_parallel uncalibrated: runs on a built-in estimate, said once on rank 0"
else bad "auto_parallel uncalibrated -> $rc: $out"; fi
run plan "$tmp/c.yaml" -n 2 --search
if [ "$rc" = 0 ] && [ "$(lines "not calibrated on this machine")" = 1 ] && grep -q "^chosen: dp=" <<<"$out"
then ok "plan --search uncalibrated: a built-in estimate"; else bad "plan --search uncalibrated -> $rc: $out"; fi
exit $fail
