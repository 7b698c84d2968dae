#!/usr/bin/env bash
# Builds ddp against LibTorch 2.6 (Debian 13 "trixie"'s libtorch-dev) and
# runs the whole test suite there, in a Debian 13 root made with debootstrap.
#
#   bash scripts/libtorch2.sh [--setup-only] [--build-only]
#
# The root lives outside the work tree, in DDP_DEBIAN13_ROOT
# (/var/cache/ddp/trixie), and is reused when present: a second run costs
# only the build and the tests. The work tree is bind-mounted into the root
# at its own path, with /proc, /dev and /dev/shm; the build goes to
# build-libtorch2/ (DDP_LIBTORCH2_BUILD), without the benchmarks (not
# tests). Needs root (debootstrap, mount, chroot) and Debian's archive (apt);
# scripts/debian13-root.sh does that part.
#   --setup-only  make or update the root, then stop
#   --build-only  also build, but run no test
# Environment: DDP_TEST_JOBS (4), DDP_BUILD_JOBS (all cores); CI, where set,
# also requires the suites below to have run without a skip.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
root=${DDP_DEBIAN13_ROOT:-/var/cache/ddp/trixie}
build=${DDP_LIBTORCH2_BUILD:-build-libtorch2}
mode=all
case "${1:-}" in
  --setup-only) mode=setup ;;
  --build-only) mode=build ;;
  "") ;;
  *) echo "usage: $0 [--setup-only|--build-only]" >&2; exit 2 ;;
esac

# What the suite needs, as scripts/install-deps.sh installs on Debian 12 (the
# Debian 13 names are the same); ninja for a faster build; python3-torch for
# PyTorch 2.6's torchrun, which the InteropTorchrun tests run (Debian 12's
# torchrun does not start, so only this leg runs them).
packages=(
  cmake g++ make ninja-build ccache pkg-config
  libtorch-dev libgloo-dev libopenblas0-openmp libtcmalloc-minimal4t64 libjemalloc2
  libcli11-dev nlohmann-json3-dev zlib1g-dev libssl-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  gnuplot-nox dataset-fashion-mnist fortunes
  python3-torch python3-safetensors
)

# The suites this leg must run, where CI is set (Note [A skip CI does not
# allow] in tests/common/required_suites.hpp): torchrun 2.6 and PyTorch 2.6
# from the root's python3-torch, which also loads and saves the checkpoints
# of SnapshotPyTorchInterop* and the distributed checkpoints of
# SnapshotDcpInterop and SnapshotTrainableOnly (torch.distributed.checkpoint,
# which Debian 12's 1.13 lacks), and runs ExamplesGpt's reference model
# beside the root's fortunes, and the allocator suites its tcmalloc and
# jemalloc.
# Not InteropMpirun or InteropSlurm: the root
# has neither Open MPI nor Slurm, and the host leg runs both
# (scripts/run-tests.sh).
required_suites=(InteropTorchrun LauncherPython SnapshotPyTorchInterop SnapshotDcpInterop SnapshotTrainableOnly ExamplesGpt
  BaseAllocator CoreAllocatorChoice LauncherAllocator)

start=$(date +%s)
say() { echo "libtorch2: $* ($(( $(date +%s) - start )) s)"; }
source "$repo/scripts/debian13-root.sh"
root_open "$root" "$repo"
root_install "$root" "${packages[@]}"
say "root ready: $(in_root "$root" dpkg-query -W -f='libtorch-dev ${Version}' libtorch-dev)"
[[ $mode == setup ]] && exit 0

# --- Build.
jobs=${DDP_BUILD_JOBS:-$(nproc)}
say "building into $build"
mkdir -p "$repo/$build"
log="$repo/$build/build.log"
in_root "$root" bash -c "cd '$repo' && cmake -S . -B '$build' -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDP_BUILD_BENCHMARKS=OFF -DDDP_DEBUG_INFO=OFF \
  && cmake --build '$build' -j$jobs" >"$log" 2>&1 || {
  tail -n 40 "$log" >&2
  say "build FAILED (the whole log: $build/build.log)"
  exit 1
}
say "built: $(grep -o 'ddp: LibTorch [0-9.]*' "$log" | head -n 1)"
[[ $mode == build ]] && exit 0

# --- The whole suite, but for the accuracy tests (label "accuracy": whole
# 5-epoch trainings, minutes each): they measure training, not the LibTorch
# version, and the host leg of CI runs them. DDP_ACCURACY_TESTS=1 keeps them.
say "running the test suite"
exclude=(-LE accuracy)
[[ ${DDP_ACCURACY_TESTS:-0} == 1 ]] && exclude=()
# in_root passes no variable on, so CI and the required suites are given here.
junit=$repo/$build/ctest-junit.xml
rm -f "$junit"
status=0
in_root "$root" bash -c "cd '$repo' && CI='${CI:-}' DDP_REQUIRED_SUITES='${required_suites[*]}' \
  ctest --test-dir '$build' --output-on-failure -j${DDP_TEST_JOBS:-4} --timeout 600 ${exclude[*]} \
  --output-junit '$junit'" || status=$?
if [[ -n ${CI:-} ]]; then
  bash "$repo/scripts/check-required-suites.sh" "$junit" "${required_suites[@]}" || status=1
fi
if [[ $status -ne 0 ]]; then
  say "LibTorch 2.6: FAILED"
  exit "$status"
fi
say "LibTorch 2.6: the whole suite passed${exclude:+ (accuracy tests left to the host leg)}"
