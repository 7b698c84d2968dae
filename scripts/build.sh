#!/usr/bin/env bash
# Configures and builds ddp into build/ (executables in build/bin/): every
# target, or only the TARGETs given (and what they need).
#
#   bash scripts/build.sh [TARGET...]
#
# Environment: DDP_BUILD_TYPE (RelWithDebInfo), DDP_BUILD_JOBS (all cores),
# DDP_BUILD_TESTS (ON; README's first command turns it OFF: it runs no
# test, and a configuration without tests needs no GoogleTest),
# DDP_BUILD_BENCHMARKS (ON; the test command turns it OFF: benchmarks are no
# tests, and each benchmark script builds its own target), DDP_DEBUG_INFO
# (OFF: Note [Debug information and build time] in CMakeLists.txt; ON for a
# build to debug).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${DDP_BUILD_JOBS:-$(nproc)}"
cmake -S . -B build -DCMAKE_BUILD_TYPE="${DDP_BUILD_TYPE:-RelWithDebInfo}" \
  -DDDP_BUILD_TESTS="${DDP_BUILD_TESTS:-ON}" -DDDP_BUILD_BENCHMARKS="${DDP_BUILD_BENCHMARKS:-ON}" \
  -DDDP_DEBUG_INFO="${DDP_DEBUG_INFO:-OFF}" >/dev/null
targets=()
for target in "$@"; do targets+=(--target "$target"); done
cmake --build build -j"$jobs" "${targets[@]}"
