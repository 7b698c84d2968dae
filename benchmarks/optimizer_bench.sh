#!/usr/bin/env bash
# LibTorch's Adam, AdamW and SGD with momentum beside ddp::optim's on one
# core, against this machine's memory bandwidth measured in the same run
# (a += s b in place, and Adam's own access pattern), over one 50 M-parameter
# tensor and over the same elements cut into FSDP-like pieces; then
# PyTorch's AdamW (benchmarks/pytorch_optimizer_bench.py) on the same core.
#
# Usage: benchmarks/optimizer_bench.sh [--params MILLIONS] [--steps N]
# Environment: DDP_BUILD_DIR (build), JOBS (2).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}
# shellcheck source=benchmarks/common.sh
source "$root/benchmarks/common.sh"
build_benchmarks optimizer_bench

echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1); $(date -u '+%Y-%m-%d %H:%M UTC')"
OMP_NUM_THREADS=1 "$build/bin/optimizer_bench" "$@"
# PyTorch's side, on the same core: Debian's python3-torch.
if "$python" -c 'import torch' 2>/dev/null; then
  OMP_NUM_THREADS=1 "$python" "$root/benchmarks/pytorch_optimizer_bench.py" "$@" 2>/dev/null | grep -v '^$' ||
    echo "(PyTorch's side did not run)"
fi
