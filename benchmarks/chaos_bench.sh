#!/usr/bin/env bash
# The chaos table (issue 35, point 5): a ddp job under the real ddprun with a
# worker, a hot spare, two workers within one step, a worker inside a commit
# (plain and ZeRO), a node and the store's host killed, the store's host
# hung (SIGSTOP), and a node joining; for each, what the job did, the time
# from the kill to the next step, and the final digest against an
# uninterrupted run. Prints one Markdown table
# (benchmarks/chaos_bench.py says how each case is run and measured).
#
# Usage: benchmarks/chaos_bench.sh
# Environment: DDP_BUILD_DIR (build), JOBS (build parallelism, 2).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}
# shellcheck source=benchmarks/common.sh
source "$root/benchmarks/common.sh"
build_benchmarks ddprun example_toy_trainer
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); ddp $(git -C "$root" rev-parse --short HEAD)"
exec /usr/bin/python3 "$root/benchmarks/chaos_bench.py" --build "$build"
