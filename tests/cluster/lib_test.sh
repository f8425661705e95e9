#!/usr/bin/env bash
# The test cluster itself (tests/cluster/lib.sh): hosts made, each with its own name and address,
# an MPI job placed by the host file through the rsh agent, the agent refusing an unknown host,
# teardown leaving nothing behind when the script exits, and a killed run's leftovers removed by
# the next one's sweep.
# Usage: lib_test.sh
set -u
fail=0
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../cli/lib.sh"
. "$here/lib.sh"
leftover() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$1-"; ls -d /etc/netns/$1-* 2>/dev/null; }

# a run killed before its trap: its namespaces stay until the next cluster_up sweeps them
bash -c ". '$here/lib.sh'; cluster_up 2 1; echo \$cl_id > '/tmp/tsc-lib-test-$$'; kill -9 \$\$" >/dev/null 2>&1
dead=$(cat "/tmp/tsc-lib-test-$$" 2>/dev/null); rm -f "/tmp/tsc-lib-test-$$"
[ -n "$dead" ] || { out=$(bash -c ". '$here/lib.sh'; cluster_up 1 1" 2>&1); [ $? = 77 ] && { echo "$out"; exit 77; }; }
[ -n "$dead" ] && [ -n "$(leftover "$dead")" ] && ok "a killed run leaves $dead behind" || bad "the killed run ($dead) left nothing to sweep"

cluster_up 3 2
[ -z "$(leftover "$dead")" ] && ok "cluster_up swept the killed run's namespaces" || bad "left over: $(leftover "$dead")"
names=$(for i in 0 1 2; do on_host $i sh -c 'echo "$(hostname) $(ip -4 -br addr show eth0 | awk "{print \$3}")"'; done | tr '\n' ' ')
[ "$names" = "node0 10.77.0.1/24 node1 10.77.0.2/24 node2 10.77.0.3/24 " ] && ok "hosts: $names" || bad "hosts: $names"
out=$(on_host 0 timeout 60 mpirun --allow-run-as-root -n 6 --hostfile "$cl_hostfile" sh -c 'echo "$OMPI_COMM_WORLD_RANK $(hostname)"' 2>/dev/null | sort -n | tr '\n' ' ')
[ "$out" = "0 node0 1 node0 2 node1 3 node1 4 node2 5 node2 " ] && ok "mpirun through the agent: $out" || bad "mpirun through the agent: $out"
out=$("$cl_agent" nosuchhost true 2>&1); rc=$?
[ $rc = 255 ] && grep -q "unknown host nosuchhost" <<<"$out" && ok "agent refuses an unknown host" || bad "agent: rc $rc: $out"
# the link of host 2 down: node0 can no longer reach it (a TCP connect fails), up again it can
reach() { on_host 0 timeout 3 bash -c "exec 3<>/dev/tcp/$1/22" 2>&1; }
on_host 2 sh -c 'exit 0'
cluster_link 2 down
r=$(reach 10.77.0.3); rc=$?
cluster_link 2 up
[ $rc != 0 ] && ok "link of host 2 down: unreachable (${r:-timeout})" || bad "link down but reachable"
me=$cl_id
cluster_down
trap - EXIT INT TERM
[ -z "$(leftover "$me")" ] && [ ! -d "$cl_dir" ] && ok "teardown left nothing" || bad "teardown left: $(leftover "$me")"
exit $fail
