#!/usr/bin/env bash
# README command 2: install, build, and run every test (ctest prints the
# summary; a failing test fails the script).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j"${DDP_TEST_JOBS:-2}" --timeout 600
