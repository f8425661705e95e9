# A test cluster on one machine (sourced): K "hosts" as network namespaces joined by veth pairs to
# a bridge in a hub namespace, TCP only between them, an rsh agent for OpenMPI that starts a
# command inside the named host's namespace, and teardown that always runs.
#
#   cluster_up K [RANKS_PER_HOST]   creates the hosts; sets
#       cl_id      this run's unique prefix (tsc<pid>); namespaces ${cl_id}-node0..K-1, ${cl_id}-hub
#       cl_ns[i]   namespace of host i; cl_ip[i] its address (10.77.0.(i+1)/24), cl_name[i] "node<i>"
#       cl_dir     a private folder: hosts (the /etc/hosts every host sees), hostfile, agent, mca
#       cl_hostfile  "node<i> slots=R" per host
#       cl_agent   the rsh agent (plm_rsh_agent): `agent [-l user] HOST CMD...` runs CMD in HOST's namespace
#     and exports the OMPI_MCA_* variables (rsh agent, TCP between hosts, the veth subnet only).
#   on_host I CMD...               runs CMD inside host I (its namespace; /etc/hosts is the cluster's)
#   cluster_link I up|down         the link of host I (its veth end in the hub)
#   cluster_shape I RATE [BURST LATENCY]  tbf on host I's link, both directions (e.g. 1gbit; burst
#                                  128kb, latency 10ms by default: the full rate, and a 1 MiB message
#                                  no longer slips through as one burst)
#   cluster_down                   removes everything of this run (also from the EXIT trap)
#   cluster_sweep                  removes what killed earlier runs left (prefix tsc<pid>, pid dead)
# Requirements: root, iproute2 (ip netns), the kernel's veth and bridge; otherwise cluster_up
# prints "SKIP: <reason>" and exits 77 (ctest SKIP_RETURN_CODE).
# Names: the ctest entries run at the same time, so every name carries this run's pid (tsc<pid>);
# interface names stay under 15 characters. Addresses repeat across runs: each hub is its own
# namespace, nothing is added to the machine's own network.

cl_sub=10.77.0
cl_pids_of_ns() { ip netns pids "$1" 2>/dev/null; }

# removes namespace $1 after killing what still runs inside it
cl_rm_ns() {
  local p
  for p in $(cl_pids_of_ns "$1"); do kill -9 "$p" 2>/dev/null; done
  ip netns delete "$1" 2>/dev/null
  rm -rf "/etc/netns/$1"
}

cluster_sweep() {
  local ns id pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^tsc[0-9]+-'); do
    id=${ns%%-*}; pid=${id#tsc}
    if ! kill -0 "$pid" 2>/dev/null; then cl_rm_ns "$ns"; fi
  done
}

cluster_down() {
  [ -n "${cl_id:-}" ] || return 0
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${cl_id}-"); do cl_rm_ns "$ns"; done
  [ -n "${cl_dir:-}" ] && rm -rf "$cl_dir"
  cl_id=
}

cl_skip() { echo "SKIP: $*"; exit 77; }

cluster_up() {
  local k=$1 r=${2:-2} i
  [ "$(id -u)" = 0 ] || cl_skip "the test cluster needs root (network namespaces)"
  command -v ip >/dev/null || cl_skip "no ip command (iproute2)"
  command -v mpirun >/dev/null || cl_skip "no mpirun in PATH"
  cluster_sweep
  cl_id=tsc$$
  trap 'cluster_down' EXIT
  trap 'cluster_down; exit 130' INT
  trap 'cluster_down; exit 143' TERM
  cl_dir=$(mktemp -d /tmp/${cl_id}.XXXXXX)
  local hub=${cl_id}-hub
  ip netns add "$hub" 2>"$cl_dir/err" || cl_skip "cannot create a network namespace: $(head -1 "$cl_dir/err")"
  ip -n "$hub" link set lo up
  ip -n "$hub" link add br0 type bridge 2>"$cl_dir/err" || cl_skip "cannot create a bridge: $(head -1 "$cl_dir/err")"
  ip -n "$hub" link set br0 up
  : > "$cl_dir/hosts"; : > "$cl_dir/hostfile"
  echo "127.0.0.1 localhost" >> "$cl_dir/hosts"
  for ((i = 0; i < k; i++)); do
    cl_ns[i]=${cl_id}-node$i; cl_ip[i]=$cl_sub.$((i + 1)); cl_name[i]=node$i
    echo "${cl_ip[i]} ${cl_name[i]}" >> "$cl_dir/hosts"
    echo "${cl_name[i]} slots=$r" >> "$cl_dir/hostfile"
  done
  for ((i = 0; i < k; i++)); do
    local ns=${cl_ns[i]}
    ip netns add "$ns" || cl_skip "cannot create a network namespace $ns"
    mkdir -p "/etc/netns/$ns" && cp "$cl_dir/hosts" "/etc/netns/$ns/hosts"
    # veth: "h<i>" in the hub (on the bridge), "eth0" in the host
    ip link add "${cl_id}h$i" type veth peer name "${cl_id}e$i" 2>"$cl_dir/err" || cl_skip "cannot create a veth pair: $(head -1 "$cl_dir/err")"
    ip link set "${cl_id}h$i" netns "$hub"
    ip link set "${cl_id}e$i" netns "$ns"
    ip -n "$hub" link set "${cl_id}h$i" name "h$i"
    ip -n "$hub" link set "h$i" master br0 up
    ip -n "$ns" link set "${cl_id}e$i" name eth0
    ip -n "$ns" addr add "${cl_ip[i]}/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
  cl_hostfile=$cl_dir/hostfile
  cl_agent=$cl_dir/agent
  # the rsh agent: OpenMPI runs `agent [-l user] HOST COMMAND...` to start its daemon on HOST
  cat > "$cl_agent" <<AGENT
#!/bin/sh
# rsh agent of the test cluster $cl_id: runs the command inside the named host's namespace
[ "\$1" = -l ] && shift 2
host=\$1; shift
case "\$host" in
$(for ((i = 0; i < k; i++)); do echo "  ${cl_name[i]}|${cl_ip[i]}) ns=${cl_ns[i]} ;;"; done)
  *) echo "agent: unknown host \$host" >&2; exit 255 ;;
esac
# its own host name too (a UTS namespace), as a real host has: OpenMPI tells hosts apart by name
exec ip netns exec "\$ns" unshare --uts /bin/sh -c 'hostname "\$0"; exec /bin/sh -c "\$1"' "\$host" "\$*"
AGENT
  chmod +x "$cl_agent"
  export OMPI_MCA_plm_rsh_agent=$cl_agent
  export OMPI_MCA_plm_rsh_no_tree_spawn=1
  export OMPI_MCA_btl=tcp,vader,self
  export OMPI_MCA_btl_tcp_if_include=$cl_sub.0/24
  export OMPI_MCA_oob_tcp_if_include=$cl_sub.0/24
  export OMPI_MCA_rmaps_base_oversubscribe=1
  # (vader's single copy left to its default, CMA: with it off (=none) every large message inside a
  # host crawled through 32 KiB fragments, a 64 MiB broadcast 710 ms instead of 12; docs/cluster.md)
  for ((i = 0; i < k; i++)); do cl_wait_link "$i" || { echo "FAIL: host $i's link did not come up within 10 s"; exit 1; }; done
}

on_host() {
  local i=$1; shift
  ip netns exec "${cl_ns[i]}" unshare --uts /bin/sh -c 'hostname "$0"; exec "$@"' "${cl_name[i]}" "$@"
}

# (up: returns once the link is ready, cl_wait_link)
cluster_link() {
  ip -n "${cl_id}-hub" link set "h$1" "$2" || return 1
  [ "$2" = up ] || return 0
  cl_wait_link "$1"
}

# cl_wait_link I: waits until host I's link has carrier on both ends and the bridge forwards on its
# port (a job started before that loses its daemon's first connection to the host, and mpirun
# waits for that daemon forever)
cl_wait_link() {
  local _i
  for _i in $(seq 1 100); do
    if ip -n "${cl_id}-hub" -o link show "h$1" | grep -q "state UP" &&
       ip -n "${cl_ns[$1]}" -o link show eth0 | grep -q "state UP" &&
       { ! command -v bridge >/dev/null || bridge -n "${cl_id}-hub" link show dev "h$1" | grep -q "state forwarding"; }; then
      sleep 0.5
      return 0
    fi
    sleep 0.1
  done
  echo "cluster: host $1's link not up after 10 s" >&2
  return 1
}

# tbf on both directions of host $1's link: egress of the hub side (towards the host) and of the
# host's eth0 (from the host)
cluster_shape() {
  local i=$1 rate=$2 burst=${3:-128kb} lat=${4:-10ms}
  command -v tc >/dev/null || { echo "cluster_shape: no tc (iproute2)" >&2; return 1; }
  ip netns exec "${cl_id}-hub" tc qdisc replace dev "h$i" root tbf rate "$rate" burst "$burst" latency "$lat" &&
    ip netns exec "${cl_ns[i]}" tc qdisc replace dev eth0 root tbf rate "$rate" burst "$burst" latency "$lat"
}
