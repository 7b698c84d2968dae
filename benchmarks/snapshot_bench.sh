#!/usr/bin/env bash
# Saving without stopping (#47): for models of about 10 MB, 100 MB and 1 GB
# of state (four square Linear layers, SGD with momentum), one process on
# this machine: how long training stops per save, SnapshotManager::save()
# against save_async() (its first call, which allocates the staging buffer,
# and the median of the others), how long the background write takes, and
# the median training step without a write and while one runs. One table.
#
# Usage: benchmarks/snapshot_bench.sh
# Environment: SIZES_MB ("10,100,1000"), REPEATS (3), STEPS (5), THREADS
# (the step's intra-op threads; 0: LibTorch's default, 1 here), DIR (a
# directory on a real disk, removed after; /tmp/ddp-snapshot-bench),
# DDP_BUILD_DIR (build), JOBS (2).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}
# shellcheck source=benchmarks/common.sh
source "$root/benchmarks/common.sh"
build_benchmarks snapshot_bench

dir=${DIR:-/tmp/ddp-snapshot-bench}
echo "cores: $(nproc); cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
echo "disk: $(df -h --output=source,fstype "$(dirname "$dir")" | tail -n 1); load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bin/snapshot_bench" --sizes-mb "${SIZES_MB:-10,100,1000}" --repeats "${REPEATS:-3}" \
  --steps "${STEPS:-5}" --threads "${THREADS:-0}" --dir "$dir"
