#!/usr/bin/env bash
# Step time of ddp::DataParallel (replicas kept across steps) against
# LibTorch's data-parallel steps (replicas cloned at every step), CPU
# replicas on this machine, printed as one Markdown table.
# See the note at the top of benchmarks/data_parallel_bench.cpp for what the
# LibTorch side runs, and docs/benchmarks.md for the latest figures.
#
# Usage: benchmarks/data_parallel_bench.sh
# Environment: DDP_BUILD_DIR (build), JOBS (build parallelism, 2), ROUNDS (5),
# STEPS (timed steps per round, 20), MODELS ("mlp convnet"), THREADS
# (intra-op threads for the 2-replica rows, "1 2").
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}
# shellcheck source=benchmarks/common.sh
source "$root/benchmarks/common.sh"
build_benchmarks data_parallel_bench
bench="$build/bin/data_parallel_bench"

echo "| model | batch | replicas | intra-op threads | ddp side | ddp::DataParallel ms/step | LibTorch-style clones ms/step | speed-up | max parameter difference |"
echo "|---|---:|---:|---:|---|---:|---:|---:|---:|"
run() {  # model replicas threads [--balanced]
  OMP_NUM_THREADS=$3 "$bench" --model "$1" --replicas "$2" --threads "$3" \
    --rounds "${ROUNDS:-5}" --steps "${STEPS:-20}" "${@:4}"
}
for model in ${MODELS:-mlp convnet}; do
  run "$model" 1 1                 # one replica: both sides call the module; a noise check
  for threads in ${THREADS:-1 2}; do
    run "$model" 2 "$threads"
    run "$model" 2 "$threads" --balanced
  done
done
