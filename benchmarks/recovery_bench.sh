#!/usr/bin/env bash
# Recovery time after one SIGKILLed worker (issue 16, point 4): ddprun's disk
# recovery and memory recovery against torchrun restarting the same
# training in Python (Debian's python3-torch), on the toy model and the
# ConvNet, 2 ranks on Gloo. Prints one table (benchmarks/recovery_bench.py
# says what each column measures). Exits non-zero when a run fails.
#
# Usage: benchmarks/recovery_bench.sh
# Environment: ROUNDS (runs per cell, 3), KILL_AT (25), EVERY (steps between
# snapshots or commits, 10), MODELS (linear,convnet), DDP_BUILD_DIR (build),
# JOBS (build parallelism, 2), FASHION_MNIST (/usr/share/datasets/fashion-mnist).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}
# shellcheck source=benchmarks/common.sh
source "$root/benchmarks/common.sh"
require_torch
build_benchmarks ddprun recovery_bench
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); torch $("$python" -c 'import torch; print(torch.__version__)')"
exec "$python" "$root/benchmarks/recovery_bench.py" --build "$build" \
  --rounds "${ROUNDS:-3}" --kill-at "${KILL_AT:-25}" --every "${EVERY:-10}" \
  --models "${MODELS:-linear,convnet}" --data-dir "${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}"
