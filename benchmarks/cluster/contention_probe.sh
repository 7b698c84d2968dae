#!/usr/bin/env bash
# The toy trainer's missing 0.1-0.3 ms, probed (docs/design/cost-model.md,
# "Limits and doubts"): benchmarks/step_gap_bench.cpp on 2 nodes of the
# simulated cluster joined by one link. It times, interleaved in one
# process per rank, an 84-byte all-reduce back to back and after a spin, a
# memory sweep, a fixed amount of arithmetic or a toy training step, and the
# toy's step through DDP, and prints one line per case; then the stragglers
# among no_sync steps. Each node runs on its own CPU (Note [A node owns its
# CPUs] in cluster.sh; CLUSTER_PIN=0 to compare with floating nodes).
#
# Usage: sudo benchmarks/cluster/contention_probe.sh
# Environment: RATE (1gbit, tc's units), DELAY_MS (0.2), ROUNDS (4),
# SPIN_US (60, the spin before spin+all_reduce), DDP_BUILD_DIR (build),
# CLUSTER_PIN (1).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}

# shellcheck source=benchmarks/cluster/cluster.sh
source "$root/benchmarks/cluster/cluster.sh"
cluster_begin
# shellcheck source=benchmarks/common.sh
source "$root/benchmarks/common.sh"
build_benchmarks step_gap_bench ddprun link_router
export CLUSTER_ROUTER=$build/bin/link_router OMP_NUM_THREADS=1
logs=$(mktemp -d)
cluster_up 2 "${RATE:-1gbit}" "${DELAY_MS:-0.2}"
failed=0
cluster_run "$logs" probe 2 "$build/bin/ddprun" --nnodes 2 --node-rank @NODE@ \
  --nproc-per-node 1 --master-addr 10.77.0.1 --master-port 29590 \
  "$build/bin/step_gap_bench" --rounds "${ROUNDS:-4}" --spin-us "${SPIN_US:-60}" || failed=1
cluster_down
if ((failed)); then
  echo "error: step_gap_bench failed; the end of node 0's output:" >&2
  tail -n 20 "$logs/probe.node0.log" >&2
  exit 1
fi
echo "link: ${RATE:-1gbit}, ${DELAY_MS:-0.2} ms one way; nodes pinned: ${CLUSTER_PIN:-1}"
sed -n 's/^\[0\] //p' "$logs/probe.node0.log" | grep -E '^(ranks|case|stragglers)[ =]'
rm -rf "$logs"
