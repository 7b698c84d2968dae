#!/usr/bin/env bash
# README command 2: install, build, and run every test (ctest prints the
# summary; a failing test fails the script).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
DDP_BUILD_BENCHMARKS=OFF bash scripts/build.sh  # benchmarks are no tests
ctest --test-dir build --output-on-failure -j"${DDP_TEST_JOBS:-4}" --timeout 600
