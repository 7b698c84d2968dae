# shellcheck shell=bash
# A simulated cluster for benchmarks: N "nodes" on this machine, each a network namespace, joined
# by links of a chosen bandwidth and one-way latency. A bash library: `source` it, then call
# cluster_trap right away so that the cluster is torn down however the script ends:
#
#   source benchmarks/cluster/cluster.sh
#   cluster_trap
#   if ! reason=$(cluster_check 2>&1); then echo "skipped: $reason"; exit 0; fi
#   export CLUSTER_ROUTER=build/bin/link_router
#   cluster_up 2 1gbit 0.2                  # 2 nodes, 1 Gbit/s, 0.2 ms one way
#   cluster_link_check                      # rtt_ms=0.490 throughput_gbit=0.998
#   cluster_exec 0 rank0_command & cluster_exec 1 rank1_command &
#   wait                                    # Not in the foreground: see cluster_trap.
#   cluster_down
#
# What it builds. Node i is namespace ddpc<pid>-n<i> (<pid> is the sourcing script's, so runs
# don't collide) with one TUN device, ddp0, address 10.77.0.(i+1)/24, MTU 65000, txqueuelen
# 10000. The other end of every ddp0 is one process, link_router (link_router.cpp, path in
# $CLUSTER_ROUTER), the cluster's switch: it holds each packet for the one-way delay and then
# writes it into the destination node's ddp0. Bandwidth is a tbf qdisc on each ddp0, so it shapes
# what each node sends. The MTU is large because TUN has no segmentation offload: at 64 KB packets
# even 10 Gbit/s is only ~19k packets/s through the userspace router (at 1500 it would be ~830k,
# too many for one thread on a 2-core machine). Gloo finds the link through GLOO_SOCKET_IFNAME,
# which cluster_exec sets.
#
# Why a userspace router and not `tc qdisc ... netem delay`: the kernel this was written on has no
# sch_netem (nor fq/etf), only tbf/htb. Where netem exists, veth pairs with netem delay + tbf
# would give comparable results; the router just plays netem's part (a fixed delay per packet).
#
# Teardown. cluster_down stops the processes still running in the nodes and the router (its TUN
# devices are not persistent, so they vanish with it), then deletes the namespaces; it is
# idempotent and is what cluster_trap's EXIT/INT/TERM traps call. If a script is SIGKILLed, its
# router still dies (PR_SET_PDEATHSIG), and the next cluster_up's cluster_sweep deletes the
# namespaces it left, with whatever still runs in them.

_CLUSTER_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_CLUSTER_PREFIX="ddpc$$"
_CLUSTER_STATE="${TMPDIR:-/tmp}/$_CLUSTER_PREFIX.cluster"
_CLUSTER_ROUTER_PID=""
# Set by cluster_up, for the caller: node count, tc rate, one-way delay in ms.
CLUSTER_NODES=0
export CLUSTER_RATE="" CLUSTER_DELAY_MS=""

# Returns 0 if this machine can make the cluster, else prints a one-line reason to stderr.
cluster_check() {
  local probe="ddpc$$-probe" reason=""
  if [[ ! -c /dev/net/tun ]]; then
    reason="no /dev/net/tun (load the tun module)"
  elif ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    reason="needs ip and tc (iproute2)"
  elif ! ip netns add "$probe" 2>/dev/null; then
    reason="cannot create a network namespace (needs root or CAP_NET_ADMIN)"
  else
    if ! ip -n "$probe" link add ddpc-p0 type veth peer name ddpc-p1 2>/dev/null; then
      reason="cannot create a veth device in a network namespace"
    elif ! tc -n "$probe" qdisc add dev ddpc-p0 root tbf rate 1gbit burst 512kb limit 4mb \
      2>/dev/null; then
      reason="the tbf qdisc is not available (sch_tbf)"
    fi
    ip netns del "$probe" 2>/dev/null || true
  fi
  if [[ -n $reason ]]; then
    echo "$reason" >&2
    return 1
  fi
}

# For a benchmark script, right after sourcing this file: cluster_trap, then, where this machine
# cannot make the cluster, prints "skipped: <reason>" and exits the script with 0.
cluster_begin() {
  local reason
  cluster_trap
  if ! reason=$(cluster_check 2>&1); then
    echo "skipped: $reason"
    exit 0
  fi
}

# Deletes what scripts that no longer run left behind (namespaces ddpc<pid>-*, the processes still
# in them, their routers and state directories), e.g. after a SIGKILL.
cluster_sweep() {
  local ns pid dir pids
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^ddpc[0-9]+-' || true); do
    pid=${ns#ddpc}
    pid=${pid%%-*}
    if [[ $pid != "$$" ]] && ! kill -0 "$pid" 2>/dev/null; then
      _cluster_kill_router "${TMPDIR:-/tmp}/ddpc$pid.cluster"
      mapfile -t pids < <(ip netns pids "$ns" 2>/dev/null || true)
      _cluster_stop "${pids[@]}"
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
  for dir in "${TMPDIR:-/tmp}"/ddpc*.cluster; do
    [[ -d $dir ]] || continue
    pid=${dir##*/ddpc}
    pid=${pid%.cluster}
    if [[ $pid != "$$" ]] && ! kill -0 "$pid" 2>/dev/null; then
      _cluster_kill_router "$dir"
      rm -rf "$dir"
    fi
  done
}

# Kills the router recorded in state directory $1, if it still runs (checking that the pid is
# still a link_router, not a reused pid).
_cluster_kill_router() {
  local pid
  pid=$(cat "$1/router.pid" 2>/dev/null) || return 0
  if [[ -n $pid ]] && tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -q link_router; then
    kill -KILL "$pid" 2>/dev/null || true
  fi
}

_cluster_ns() { echo "$_CLUSTER_PREFIX-n$1"; }

# cluster_up NODES RATE DELAY_MS, e.g. cluster_up 2 1gbit 0.2 (RATE in tc's units).
cluster_up() {
  local nodes=$1 rate=$2 delay_ms=$3 i ns delay_us deadline
  if [[ -z ${CLUSTER_ROUTER:-} || ! -x $CLUSTER_ROUTER ]]; then
    echo "cluster_up: set CLUSTER_ROUTER to the link_router executable (now '${CLUSTER_ROUTER:-}')" >&2
    return 1
  fi
  if ((_CLUSTER_ROUTER_PID != 0 || CLUSTER_NODES != 0)); then
    echo "cluster_up: a cluster is already up; call cluster_down first" >&2
    return 1
  fi
  cluster_sweep
  delay_us=$(awk -v ms="$delay_ms" 'BEGIN { printf "%d", ms * 1000 + 0.5 }')
  rm -rf "$_CLUSTER_STATE"
  mkdir -p "$_CLUSTER_STATE"
  local names=()
  for ((i = 0; i < nodes; i++)); do
    ns=$(_cluster_ns "$i")
    names+=("$ns")
    CLUSTER_NODES=$((i + 1)) # So that cluster_down deletes what exists if we fail midway.
    ip netns add "$ns"
  done
  "$CLUSTER_ROUTER" --delay-us "$delay_us" --ready-file "$_CLUSTER_STATE/ready" "${names[@]}" &
  _CLUSTER_ROUTER_PID=$!
  echo "$_CLUSTER_ROUTER_PID" >"$_CLUSTER_STATE/router.pid"
  deadline=$((SECONDS + 10))
  while [[ ! -s $_CLUSTER_STATE/ready ]]; do
    if ! kill -0 "$_CLUSTER_ROUTER_PID" 2>/dev/null; then
      echo "cluster_up: link_router exited (see its message above)" >&2
      cluster_down
      return 1
    fi
    if ((SECONDS >= deadline)); then
      echo "cluster_up: link_router not ready after 10 s" >&2
      cluster_down
      return 1
    fi
    sleep 0.02
  done
  for ((i = 0; i < nodes; i++)); do
    ns=$(_cluster_ns "$i")
    ip -n "$ns" link set lo up
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.ddp0.disable_ipv6=1 2>/dev/null || true
    # TCP buffers up to 32 MB: 10 Gbit/s x 2 ms RTT is 2.5 MB in flight (tcp_* sysctls are per
    # namespace; net.core.*mem_max are not and are left alone).
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_rmem="4096 131072 33554432" \
      net.ipv4.tcp_wmem="4096 16384 33554432" >/dev/null
    ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev ddp0
    ip -n "$ns" link set ddp0 mtu 65000 txqueuelen 10000 up
    # burst must hold a 64 KB packet; limit is the queue the sender may build (a few ms).
    tc -n "$ns" qdisc add dev ddp0 root tbf rate "$rate" burst 512kb limit 8mb
  done
  CLUSTER_RATE=$rate
  CLUSTER_DELAY_MS=$delay_ms
}

# Idempotent: stops the router and every process still in the nodes (TERM, then KILL after 2 s),
# deletes the namespaces and the state directory.
cluster_down() {
  local i pids=()
  for ((i = 0; i < ${CLUSTER_NODES:-0}; i++)); do
    mapfile -t -O "${#pids[@]}" pids < <(ip netns pids "$(_cluster_ns "$i")" 2>/dev/null || true)
  done
  [[ -n $_CLUSTER_ROUTER_PID ]] && pids+=("$_CLUSTER_ROUTER_PID")
  _cluster_stop "${pids[@]}"
  if [[ -n $_CLUSTER_ROUTER_PID ]]; then
    wait "$_CLUSTER_ROUTER_PID" 2>/dev/null || true
    _CLUSTER_ROUTER_PID=""
  fi
  for ((i = 0; i < ${CLUSTER_NODES:-0}; i++)); do
    ip netns del "$(_cluster_ns "$i")" 2>/dev/null || true
  done
  CLUSTER_NODES=0
  rm -rf "$_CLUSTER_STATE"
}

# _cluster_stop PID...: SIGTERM, then SIGKILL to those still alive after 2 s.
_cluster_stop() {
  local pid i alive state
  (($# > 0)) || return 0
  kill -TERM "$@" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    alive=0
    for pid in "$@"; do
      # A zombie (our child not yet waited for) counts as gone.
      state=$(sed -n 's/^.*) \(.\).*/\1/p' "/proc/$pid/stat" 2>/dev/null || true)
      [[ -n $state && $state != Z ]] && alive=1
    done
    ((alive)) || return 0
    sleep 0.02
  done
  kill -KILL "$@" 2>/dev/null || true
}

# Installs traps so that the cluster goes down when the script exits or gets INT/TERM; call it
# right after sourcing this file. bash runs a trap only once the foreground command has ended, so
# run long commands in the background and `wait` for them (wait returns at once on a signal);
# cluster_down then stops whatever still runs in the nodes.
cluster_trap() {
  trap 'cluster_down' EXIT
  trap 'cluster_down; trap - EXIT; exit 130' INT
  trap 'cluster_down; trap - EXIT; exit 143' TERM
}

# cluster_exec I CMD...: runs CMD in node I's namespace, with Gloo told to use ddp0, on node I's
# CPUs (Note [A node owns its CPUs]; CLUSTER_PIN=0 lets it run anywhere).
#
# Note [A node owns its CPUs]
# A real node computes on its own cores. Unpinned, the nodes' processes share this machine's cores
# as the scheduler likes, and what a gap of work before an all-reduce costs then depends on the
# kind of work: benchmarks/step_gap_bench.cpp measured an all-reduce after 60 us of spinning as
# 75 us cheaper than back to back, and one after a toy training step as 64 us dearer. Pinned,
# every kind of gap costs alike (spinning, a memory sweep, a toy step: +55 to +150 us), so the cost
# model can measure the cost with a spin and use it (Note [An all-reduce after idle time] in
# benchmarks/cost_model.py). So the nodes of a job split the CPUs this process may use: with N
# nodes and C CPUs, node I gets the CPUs whose index is I modulo N (one node gets them all), or,
# with more nodes than CPUs, CPU I modulo C. The link router stays unpinned, as the switch is no
# node's. Within a node, its ranks share its CPUs.
cluster_exec() {
  local i=$1 pin=() cpus mine=() j nodes=${_CLUSTER_JOB_NODES:-$CLUSTER_NODES}
  shift
  if [[ ${CLUSTER_PIN:-1} == 1 ]] && ((nodes > 0)); then
    mapfile -t cpus < <(_cluster_cpus)
    if ((nodes >= ${#cpus[@]})); then
      mine=("${cpus[i % ${#cpus[@]}]}")
    else
      for ((j = i; j < ${#cpus[@]}; j += nodes)); do mine+=("${cpus[j]}"); done
    fi
    pin=(taskset -c "$(
      IFS=,
      echo "${mine[*]}"
    )")
  fi
  ip netns exec "$(_cluster_ns "$i")" env GLOO_SOCKET_IFNAME=ddp0 "${pin[@]}" "$@"
}

# Prints the CPUs this process may run on, one per line (not nproc's count, which follows
# OMP_NUM_THREADS, and not 0..n-1, which need not be the allowed ones).
_cluster_cpus() {
  local part
  for part in $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status | tr ',' ' '); do
    if [[ $part == *-* ]]; then seq "${part%-*}" "${part#*-}"; else echo "$part"; fi
  done
}

# cluster_run LOGDIR NAME NODES CMD...: runs CMD on nodes 0..NODES-1 at once (@NODE@ in an
# argument becomes the node's index), each under a 15-minute deadline and on its share of the
# CPUs among NODES nodes, node i's output in LOGDIR/NAME.node<i>.log. In the background, so that a
# signal's trap runs at once (see cluster_trap). Returns 1 when the command failed on any node.
cluster_run() {
  local logs=$1 name=$2 nodes=$3 i pids=() failed=0
  local _CLUSTER_JOB_NODES=$nodes  # read by cluster_exec
  shift 3
  for ((i = 0; i < nodes; i++)); do
    cluster_exec "$i" timeout 900 "${@//@NODE@/$i}" >"$logs/$name.node$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || failed=1; done
  return "$failed"
}

cluster_addr() { echo "10.77.0.$(($1 + 1))"; }

cluster_tx_bytes() {
  ip netns exec "$(_cluster_ns "$1")" cat /sys/class/net/ddp0/statistics/tx_bytes
}

# cluster_link_check [SECONDS] [FROM TO]: measures what the emulated link delivers from node FROM
# (default 0) to node TO (default 1); prints "rtt_ms=... throughput_gbit=...".
cluster_link_check() {
  local seconds=${1:-2} from=${2:-0} to=${3:-1} port=29577 server client rc=0
  cluster_exec "$to" python3 "$_CLUSTER_LIB_DIR/link_check.py" server "$port" &
  server=$!
  # In the background too, so that a signal's trap runs at once (see cluster_trap).
  cluster_exec "$from" python3 "$_CLUSTER_LIB_DIR/link_check.py" client "$(cluster_addr "$to")" \
    "$port" --seconds "$seconds" &
  client=$!
  wait "$client" || rc=$?
  if ! wait "$server"; then ((rc != 0)) || rc=1; fi
  return "$rc"
}
