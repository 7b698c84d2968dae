#!/usr/bin/env bash
# InteropSlurmLeftovers.AKilledTestLeavesNoDaemon: a test of the InteropSlurm
# suite killed mid-run leaves nothing of its cluster behind (Note [One Slurm
# cluster per suite, stopped whatever happens] in tests/interop/CMakeLists.txt).
#
#   slurm_leftovers_check.sh BUILD_DIR
#
# Runs ctest on InteropSlurm.SrunTrainsAsUnderDdprun with the cluster in a
# folder of its own (DDP_SLURM_CLUSTER_DIR), waits until its job runs,
# SIGKILLs the test's process, and checks from ctest's report that the
# fixture started the cluster, the test died, and the cleanup fixture ran;
# then that no process names the folder on its command line (munged,
# slurmctld, slurmd) or has SLURM_CONF in it (srun, the job's tasks).
# Exit 77 (ctest: skipped) where no cluster can start: not root, or no
# slurm-wlm; CI's host leg requires the suite, so there that is a failure.
set -uo pipefail
build=$1
if [ "$(id -u)" -ne 0 ] || ! command -v slurmctld >/dev/null; then
  echo "skipped: no Slurm cluster can start here (needs root and Debian's slurm-wlm and munge)"
  exit 77
fi
dir=$(mktemp -d /tmp/ddp-slurm-leftovers-XXXXXX)
log=$dir.ctest.log
failures=0
check() {  # check NAME CONDITION...
  local name=$1
  shift
  if "$@"; then echo "ok: $name"; else echo "FAILED: $name"; failures=$((failures + 1)); fi
}
# Processes of this cluster: by command line, or by SLURM_CONF in their environment.
leftovers() {
  local pid found=()
  for pid in $(pgrep -f -- "$dir/"); do
    [ "$pid" != $$ ] && found+=("$pid:$(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null)")
  done
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    grep -qz "^SLURM_CONF=$dir/" /proc/"$pid"/environ 2>/dev/null &&
      found+=("$pid:$(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null)")
  done
  printf '%s\n' "${found[@]}"
}

# The test's tasks wait (DDP_SLURM_HOLD_SECONDS) before training, so that
# its job is seen running however fast it would train.
DDP_SLURM_HOLD_SECONDS=120 DDP_SLURM_CLUSTER_DIR=$dir ctest --test-dir "$build" -R '^InteropSlurm\.SrunTrainsAsUnderDdprun$' \
  --output-on-failure >"$log" 2>&1 &
ctest_pid=$!
# Mid-run: once the job's step runs in the cluster (the fixture took its
# time to start it before that).
deadline=$((SECONDS + 300))
until SLURM_CONF=$dir/slurm.conf squeue -h -t R 2>/dev/null | grep -q .; do
  if ! kill -0 "$ctest_pid" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
    echo "FAILED: the job never ran (ctest's report follows)"
    cat "$log"
    exit 1
  fi
  sleep 0.2
done
test_pid=$(pgrep -f "interop_slurm_tests.*SrunTrainsAsUnderDdprun" | head -n 1)
check "the running test found (pid ${test_pid:-none})" test -n "$test_pid"
[ -n "$test_pid" ] && kill -KILL "$test_pid"
echo "killed the test's process $test_pid mid-run"
# ctest then runs the cleanup fixture: at most 105 s (slurm_cluster.sh).
deadline=$((SECONDS + 240))
while kill -0 "$ctest_pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.5; done
kill -0 "$ctest_pid" 2>/dev/null && { kill -KILL "$ctest_pid"; echo "FAILED: ctest did not end"; failures=$((failures + 1)); }
echo "--- ctest's report"
cat "$log"
echo "---"
check "the fixture started the cluster" grep -qE "InteropSlurmCluster\.Start \.+ +Passed" "$log"
check "the killed test failed" grep -qE "InteropSlurm\.SrunTrainsAsUnderDdprun \.+Subprocess killed" "$log"
check "the cleanup fixture ran and passed" grep -qE "InteropSlurmCluster\.Stop \.+ +Passed" "$log"
remaining=$(leftovers)
check "no process of the cluster remains${remaining:+: $remaining}" test -z "$remaining"
if [ -n "$remaining" ]; then  # leave nothing behind for the next test either
  bash "$(dirname "$0")/slurm_cluster.sh" stop "$dir"
  pkill -KILL -f -- "$dir/"
fi
rm -rf "$dir" "$log"
[ "$failures" -eq 0 ] && echo "all checks passed" || exit 1
