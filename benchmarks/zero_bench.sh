#!/usr/bin/env bash
# ZeroRedundancyOptimizer against plain DistributedDataParallel, Adam on a
# ~10 M-parameter MLP, with 1, 2 and 4 ranks on this machine (ddprun, the
# default backend), in the same run: the optimizer-state bytes the fullest
# rank holds and the median step time of each way.
#
# Usage: benchmarks/zero_bench.sh
# Environment: RANKS ("1 2 4"), STEPS (10), DDP_BUILD_DIR (build), JOBS (2).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}
# shellcheck source=benchmarks/common.sh
source "$root/benchmarks/common.sh"
build_benchmarks zero_bench ddprun

cores=$(nproc)  # before OMP_NUM_THREADS, which nproc obeys
export OMP_NUM_THREADS=1
echo "cores: $cores; cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
printf '%-5s %-10s %-18s %12s %10s\n' ranks parameters way "state bytes" "step ms"
for ranks in ${RANKS:-1 2 4}; do
  "$build/bin/ddprun" --standalone --nproc-per-node "$ranks" "$build/bin/zero_bench" \
      --steps "${STEPS:-10}" | sed -n 's/^\[0\] //p'
done
