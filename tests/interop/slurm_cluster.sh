#!/usr/bin/env bash
# A one-node Slurm cluster in a folder, for the InteropSlurm tests: Debian's
# slurm-wlm (22.05 on Debian 12) and munge, started and stopped by this
# script alone, nothing of the system's installation used or touched (no
# /etc/slurm, no /etc/munge, no systemd).
#
#   slurm_cluster.sh start DIR [CTLD_PORT SLURMD_PORT]
#       writes DIR/slurm.conf and a munge key, starts munged (its own socket
#       in DIR), slurmctld and slurmd, and waits until the node is idle.
#       Clients then need SLURM_CONF=DIR/slurm.conf.
#   slurm_cluster.sh stop DIR
#       cancels every job, stops the three daemons (by their pid files) and
#       waits until they are gone.
#   slurm_cluster.sh fixture-start DIR
#       ctest's setup of the InteropSlurm suite (Note [One Slurm cluster per
#       suite, stopped whatever happens] in tests/interop/CMakeLists.txt):
#       in $DDP_SLURM_CLUSTER_DIR when set, else DIR, stops what an earlier
#       run left, then starts on two free ports, trying three pairs (a port
#       found free may be taken before slurmctld binds it). Where no cluster
#       can start (exit 2 of start) it writes the reason to DIR/cannot-start
#       and exits 0: the tests then skip with it, or fail where CI requires
#       them.
#   slurm_cluster.sh fixture-stop DIR
#       ctest's cleanup of the suite: stop, in the same folder.
#
# Needs root: slurmd runs jobs as their user and munged's key must be its
# owner's. The plugins chosen need no cgroups (proctrack/linuxproc,
# task/none), so the cluster runs in containers and VMs without a cgroup
# hierarchy it may write to. Exit 2 means the cluster cannot start here (not
# root, or slurm-wlm/munge missing); 1 means it failed, with the logs' tails.
set -uo pipefail

# The worst cases (Note [One Slurm cluster per suite, stopped whatever
# happens] in tests/interop/CMakeLists.txt): a start waits at most
# 4 x kStartSeconds = 120 s; a stop at most kStopSeconds for the jobs and
# 2 x kStopSeconds for each daemon, 105 s; fixture-start stops, then tries
# while a failed try and its stop (225 s) still end within kFixtureSeconds
# of its start, so it ends well within ctest's 600 s.
readonly kStartSeconds=30  # for each daemon, and then for the node to be idle
readonly kStopSeconds=15
readonly kFixtureSeconds=540

die() {
  echo "slurm_cluster: $*" >&2
  exit 1
}

# The tail of each log in DIR, to say why something did not start.
show_logs() {
  local log
  for log in "$1"/*.log; do
    [ -f "$log" ] || continue
    echo "--- $log (last 20 lines)" >&2
    tail -n 20 "$log" >&2
  done
}

# Waits until the command succeeds, for at most SECONDS.
wait_for() {
  local seconds=$1
  shift
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
node_idle() { sinfo -h -N -o '%T' 2>/dev/null | grep -qx idle; }

start() {
  local dir=$1 ctld_port=${2:-6817} slurmd_port=${3:-6818}
  if [ "$(id -u)" -ne 0 ]; then
    echo "slurm_cluster: needs root (slurmd runs jobs as their user; uid is $(id -u))" >&2
    exit 2
  fi
  local program
  for program in munged slurmctld slurmd srun sbatch sinfo squeue scancel; do
    if ! command -v "$program" >/dev/null; then
      echo "slurm_cluster: '$program' is not on PATH: install Debian's slurm-wlm and munge" \
        "(scripts/install-deps.sh)" >&2
      exit 2
    fi
  done
  mkdir -p "$dir" || die "cannot create $dir"
  dir=$(cd "$dir" && pwd)
  # munged wants its socket's folder searchable by all and writable by none
  # but its owner.
  chmod 0755 "$dir"
  mkdir -p "$dir/state" "$dir/spool"
  local host cpus
  host=$(hostname -s)
  cpus=$(nproc)
  [ "$cpus" -ge 4 ] || cpus=4  # room for -n 3 on small machines; see config_overrides

  dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none || die "cannot write the key"
  chmod 0400 "$dir/munge.key"

  # SlurmdParameters=config_overrides: the node has the CPUs written here,
  # even where this machine has fewer, rather than being drained.
  cat >"$dir/slurm.conf" <<EOF
ClusterName=ddpinterop
SlurmctldHost=$host
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.socket
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  export SLURM_CONF=$dir/slurm.conf

  # Each daemon forks away from this script: none keeps its output pipes.
  munged --key-file="$dir/munge.key" --socket="$dir/munge.socket" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" \
    --seed-file="$dir/munged.seed" </dev/null >>"$dir/daemons.out" 2>&1 ||
    { show_logs "$dir"; cat "$dir/daemons.out" >&2; die "munged did not start"; }
  wait_for "$kStartSeconds" pid_alive "$dir/munged.pid" ||
    { show_logs "$dir"; die "munged wrote no pid file within ${kStartSeconds}s"; }

  slurmctld -f "$dir/slurm.conf" </dev/null >>"$dir/daemons.out" 2>&1 ||
    { show_logs "$dir"; cat "$dir/daemons.out" >&2; die "slurmctld did not start"; }
  wait_for "$kStartSeconds" pid_alive "$dir/slurmctld.pid" ||
    { show_logs "$dir"; die "slurmctld wrote no pid file within ${kStartSeconds}s"; }

  slurmd -f "$dir/slurm.conf" </dev/null >>"$dir/daemons.out" 2>&1 ||
    { show_logs "$dir"; cat "$dir/daemons.out" >&2; die "slurmd did not start"; }
  wait_for "$kStartSeconds" pid_alive "$dir/slurmd.pid" ||
    { show_logs "$dir"; die "slurmd wrote no pid file within ${kStartSeconds}s"; }

  # A daemon that wrote its pid file may still die (slurmctld on a port
  # taken meanwhile): that ends the wait at once.
  local deadline=$((SECONDS + kStartSeconds)) daemon
  until node_idle; do
    for daemon in munged slurmctld slurmd; do
      pid_alive "$dir/$daemon.pid" || { show_logs "$dir"; die "$daemon exited"; }
    done
    if [ "$SECONDS" -ge "$deadline" ]; then
      sinfo -N >&2
      show_logs "$dir"
      die "node $host was not idle within ${kStartSeconds}s"
    fi
    sleep 0.2
  done
  echo "slurm_cluster: node $host idle ($cpus CPUs), SLURM_CONF=$dir/slurm.conf"
}

# Stops the daemon of PIDFILE: SIGTERM, then SIGKILL after kStopSeconds.
stop_daemon() {
  local pidfile=$1 pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
    rm -f "$pidfile"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null
  if ! wait_for "$kStopSeconds" bash -c "! kill -0 $pid 2>/dev/null"; then
    echo "slurm_cluster: $(basename "$pidfile" .pid) ($pid) ignored SIGTERM; killing it" >&2
    kill -KILL "$pid" 2>/dev/null
    wait_for "$kStopSeconds" bash -c "! kill -0 $pid 2>/dev/null" ||
      { echo "slurm_cluster: $pid is still there" >&2; return 1; }
  fi
  rm -f "$pidfile"
}

no_jobs() { [ -z "$(squeue -h -o %i 2>/dev/null)" ]; }

stop() {
  local dir=$1 status=0
  [ -d "$dir" ] || return 0
  export SLURM_CONF=$dir/slurm.conf
  # Jobs first, while slurmctld and slurmd can still end their steps.
  if pid_alive "$dir/slurmctld.pid" && ! no_jobs; then
    scancel --full --quiet --user=root 2>/dev/null
    wait_for "$kStopSeconds" no_jobs || echo "slurm_cluster: jobs still queued: $(squeue -h)" >&2
  fi
  stop_daemon "$dir/slurmd.pid" || status=1
  stop_daemon "$dir/slurmctld.pid" || status=1
  stop_daemon "$dir/munged.pid" || status=1
  return $status
}

# A TCP port nothing listens on, from the range above the usual daemons'.
free_port() {
  local port
  while :; do
    port=$((20000 + RANDOM % 40000))
    [ -z "$(ss -Htln "sport = :$port" 2>/dev/null)" ] && { echo "$port"; return; }
  done
}

fixture_start() {
  local dir=${DDP_SLURM_CLUSTER_DIR:-$1} attempt status
  stop "$dir" || die "a cluster left in $dir by an earlier run does not stop"
  mkdir -p "$dir" || die "cannot create $dir"
  rm -f "$dir/cannot-start"
  for attempt in 1 2 3; do
    if [ $((SECONDS + 4 * kStartSeconds + 7 * kStopSeconds)) -gt "$kFixtureSeconds" ]; then
      die "no cluster started in $dir in $((attempt - 1)) tries and ${SECONDS}s: no time for another"
    fi
    (start "$dir" "$(free_port)" "$(free_port)") 2>"$dir/start.err"
    status=$?
    cat "$dir/start.err" >&2
    case $status in
      0) return 0 ;;
      2) cp "$dir/start.err" "$dir/cannot-start"; return 0 ;;
    esac
    echo "slurm_cluster: start failed (try $attempt of 3); stopping what started" >&2
    stop "$dir"
  done
  die "no cluster started in $dir after 3 tries"
}

case "${1:-}" in
  fixture-start) [ $# -eq 2 ] || die "usage: $0 fixture-start DIR"; fixture_start "$2" ;;
  fixture-stop) [ $# -eq 2 ] || die "usage: $0 fixture-stop DIR"; stop "${DDP_SLURM_CLUSTER_DIR:-$2}" ;;
  start) [ $# -ge 2 ] || die "usage: $0 start DIR [CTLD_PORT SLURMD_PORT]"; start "$2" "${3:-}" "${4:-}" ;;
  stop) [ $# -eq 2 ] || die "usage: $0 stop DIR"; stop "$2" ;;
  *) die "usage: $0 start DIR [CTLD_PORT SLURMD_PORT] | stop DIR | fixture-start DIR | fixture-stop DIR" ;;
esac
