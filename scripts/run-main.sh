#!/usr/bin/env bash
# README command 1: install, build, and run the main job (a 2-rank
# all-reduce check on this machine).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
./build/bin/ddp_allreduce_check --nproc 2
