#!/usr/bin/env bash
# README command 2: install, build, and run every test (ctest prints the
# summary; a failing test fails the script). Where CI is set, the suites
# below must also have run without a skip.
set -euo pipefail
cd "$(dirname "$0")/.."

# The suites this leg (Debian 12, LibTorch 1.13) must run, where CI is set
# (Note [A skip CI does not allow] in tests/common/required_suites.hpp):
# mpirun and Slurm come from scripts/install-deps.sh, and LauncherPython's
# training tests and SnapshotPyTorchInterop's checkpoints run Debian 12's
# python3-torch (1.13) from there too, as ExamplesGpt's reference model
# beside Debian's fortunes; ReadersFuzz's libFuzzer needs install-deps.sh's
# clang; the allocator suites, its tcmalloc and jemalloc; SnapshotFullDisk
# mounts a tmpfs, which the leg's root user may. Not
# InteropTorchrun: Debian 12's torchrun 1.13 does not start on its Python
# 3.11, so CI's LibTorch 2.6 leg runs it (scripts/libtorch2.sh).
required_suites=(InteropMpirun InteropSlurm LauncherPython SnapshotPyTorchInterop ExamplesGpt ReadersFuzz
  BaseAllocator CoreAllocatorChoice LauncherAllocator SnapshotFullDisk)

bash scripts/install-deps.sh
DDP_BUILD_BENCHMARKS=OFF bash scripts/build.sh  # benchmarks are no tests
junit=$PWD/build/ctest-junit.xml
rm -f "$junit"
status=0
DDP_REQUIRED_SUITES="${required_suites[*]}" ctest --test-dir build --output-on-failure \
  -j"${DDP_TEST_JOBS:-4}" --timeout 600 --output-junit "$junit" || status=$?
if [[ -n ${CI:-} ]]; then
  bash scripts/check-required-suites.sh "$junit" "${required_suites[@]}" || status=1
fi
exit "$status"
