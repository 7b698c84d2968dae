#!/usr/bin/env bash
# Configures and builds ddp into build/ (executables in build/bin/).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${DDP_BUILD_JOBS:-$(nproc)}"
cmake -S . -B build -DCMAKE_BUILD_TYPE="${DDP_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
cmake --build build -j"$jobs"
