#!/usr/bin/env bash
# Checkpoint export and import, ddp against PyTorch in the same run: for
# about 10 MB, 100 MB and 1 GB of state (parameters and SGD momentum), ddp's
# export_checkpoint (torch.save's format, and safetensors) and
# import_checkpoint, then PyTorch's torch.save (+ fsync) and torch.load of
# the same state, and torch.load of ddp's file. Median of REPEAT runs, each
# after a sync (untimed); the files go to DIR (a real disk, not tmpfs, to
# measure the disk).
#
# Usage: benchmarks/checkpoint_bench.sh
# Environment: SIZES ("10 100 1000", MB), REPEAT (3), DIR
# (/var/tmp/ddp-checkpoint-bench), DDP_BUILD_DIR (build), JOBS (2).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}
# shellcheck source=benchmarks/common.sh
source "$root/benchmarks/common.sh"
require_torch
build_benchmarks checkpoint_bench

dir=${DIR:-/var/tmp/ddp-checkpoint-bench}
mkdir -p "$dir"
cores=$(nproc)  # before OMP_NUM_THREADS, which nproc obeys
export OMP_NUM_THREADS=1
echo "cores: $cores; cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1); dir: $dir ($(df -T "$dir" | awk 'NR==2 {print $2}'))"
printf '%-30s %10s %12s %13s\n' "side and step" state time throughput
for mb in ${SIZES:-10 100 1000}; do
  "$build/bin/checkpoint_bench" --mb "$mb" --dir "$dir" --repeat "${REPEAT:-3}"
  "$python" "$root/benchmarks/pytorch_checkpoint_bench.py" "$mb" "$dir" "${REPEAT:-3}"
done
rm -rf "$dir"
