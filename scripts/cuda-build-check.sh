#!/usr/bin/env bash
# Builds ddp against Debian 13's CUDA LibTorch 2.6 (contrib's
# libtorch-cuda-dev: CUDA 12.4, NCCL 2.22 from non-free), with the NCCL
# backend and every CUDA code path compiled, in a Debian 13 root of its own
# (libgloo-cuda-dev and the CPU root's libgloo-dev conflict). Runs the test
# suite there when the binaries can load (CPU tests pass, GPU tests skip
# with a message); says why when they cannot. Not part of CI: the root
# needs about 2.4 GB of packages.
#
#   bash scripts/cuda-build-check.sh [--setup-only]
#
# Root: DDP_DEBIAN13_CUDA_ROOT (/var/cache/ddp/trixie-cuda), reused; build:
# build-cuda/. Prints a summary last; exits non-zero when the build fails.
#
# Note [cuDNN is not in Debian's archive]
# libtorch-cuda-2.6 depends on nvidia-cudnn, an installer package whose
# configure step downloads cuDNN from NVIDIA. Offline it fails, leaving
# nvidia-cudnn half-configured and LibTorch's CUDA packages unpacked: every
# header and library is on disk except libcudnn.so.9. The build links with
# --allow-shlib-undefined (libtorch_cuda.so's cuDNN symbols stay unresolved,
# as they are until run time anyway), and the binaries cannot be loaded.
# Where the download succeeded, nothing of this applies and the suite runs.
# Where this machine has a cuDNN 9 of its own (DDP_CUDNN_DIR, or the CUDA
# toolkit's lib directory under /usr/local), its libcudnn.so.9 is bind-mounted
# into the root at /opt/ddp-cudnn and put on the test run's library path: the
# binaries then link normally and load, the CPU tests run, and the GPU tests
# skip with their message. libcudnn.so.9 itself needs only the C and C++
# runtimes and is never called without a GPU; a cuDNN built for another CUDA
# major version is good for loading only, and the summary names the file.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
root=${DDP_DEBIAN13_CUDA_ROOT:-/var/cache/ddp/trixie-cuda}
build=build-cuda
packages=(
  cmake g++ make ninja-build ccache pkg-config
  libtorch-cuda-dev libgloo-cuda-dev nvidia-cuda-toolkit libnccl-dev
  libcli11-dev nlohmann-json3-dev zlib1g-dev libssl-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  gnuplot-nox dataset-fashion-mnist   # the examples' tests, as on the host
)
mode=all
case "${1:-}" in
  --setup-only) mode=setup ;;
  "") ;;
  *) echo "usage: $0 [--setup-only]" >&2; exit 2 ;;
esac
start=$(date +%s)
say() { echo "cuda-build-check: $* ($(( $(date +%s) - start )) s)"; }
source "$repo/scripts/debian13-root.sh"
root_open "$root" "$repo"

# --- Packages; only the cuDNN installer may stay unconfigured.
if ! root_install "$root" "${packages[@]}"; then
  in_root "$root" dpkg --configure -a >/dev/null 2>&1 || true
fi
unconfigured=$(in_root "$root" dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' |
  awk '$1 != "ii" {print $2}' | tr '\n' ' ')
for p in $unconfigured; do
  case "$p" in
    nvidia-cudnn | libtorch-cuda-* | libtorch-cuda-dev) ;;
    *) say "package $p is not installed properly; see $root/var/log/ddp-install.log"; exit 1 ;;
  esac
done
[[ -n "$unconfigured" ]] && say "left unconfigured (Note [cuDNN is not in Debian's archive]): $unconfigured"
for f in /usr/include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp /usr/include/nccl.h; do
  [[ -f "$root$f" ]] || { say "missing $f in the root"; exit 1; }
done
cudnn=present
test_env=()
if ! in_root "$root" bash -c 'ls /usr/lib/*/libcudnn.so.9* >/dev/null 2>&1'; then
  cudnn=absent
  machine_cudnn=""
  for dir in ${DDP_CUDNN_DIR:-} /usr/local/cuda*/lib /usr/local/cuda*/lib64 /usr/lib/x86_64-linux-gnu; do
    [[ -f "$dir/libcudnn.so.9" ]] && { machine_cudnn=$dir; break; }
  done
  if [[ -n "$machine_cudnn" ]]; then
    mkdir -p "$root/opt/ddp-cudnn"
    if ! mountpoint -q "$root/opt/ddp-cudnn"; then
      mount --bind "$machine_cudnn" "$root/opt/ddp-cudnn"
      root_mounted+=("$root/opt/ddp-cudnn")
    fi
    cudnn="this machine's ($(readlink -f "$machine_cudnn/libcudnn.so.9"), for loading only)"
    test_env=(LD_LIBRARY_PATH=/opt/ddp-cudnn)
  fi
fi
say "root ready: $(in_root "$root" dpkg-query -W -f='libtorch-cuda-dev ${Version}, ' libtorch-cuda-dev)$(in_root "$root" dpkg-query -W -f='libnccl-dev ${Version}' libnccl-dev); libcudnn.so.9: $cudnn"
[[ $mode == setup ]] && exit 0

# --- Build everything, NCCL required.
flags=(-DDDP_NCCL=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
       -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST)
if [[ $cudnn == absent ]]; then
  flags+=(-DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined
          -DCMAKE_SHARED_LINKER_FLAGS=-Wl,--allow-shlib-undefined)
elif [[ ${#test_env[@]} -gt 0 ]]; then
  flags+=(-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,/opt/ddp-cudnn
          -DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath-link,/opt/ddp-cudnn)
fi
mkdir -p "$repo/$build"
log="$repo/$build/build.log"
say "building everything into $build"
if ! in_root "$root" bash -c "cd '$repo' && cmake -S . -B '$build' -G Ninja ${flags[*]} \
     && cmake --build '$build' -j${DDP_BUILD_JOBS:-$(nproc)}" >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  say "build FAILED (the whole log: $build/build.log)"
  exit 1
fi
configured=$(grep -o 'ddp: LibTorch [0-9.]*; nccl backend: [A-Z]*' "$log" | head -n 1)
nccl_symbols=$(nm -C "$repo/$build/lib/libddp_comm.a" 2>/dev/null | grep -c 'ProcessGroupNCCL' || true)
targets=$(grep -c 'Linking CXX' "$log" || true)
say "built: $configured; $targets targets linked; libddp_comm.a references c10d::ProcessGroupNCCL $nccl_symbols times"
[[ "$configured" == *"nccl backend: ON"* && $nccl_symbols -gt 0 ]] || { say "the NCCL backend was not compiled in"; exit 1; }

# --- The suite, where the binaries can load.
unresolved=$(in_root "$root" env "${test_env[@]}" ldd "$repo/$build/bin/comm_tests" | awk '/not found/ {print $1}' | tr '\n' ' ')
if [[ -n "$unresolved" ]]; then
  say "summary: the CUDA build compiles and links; its binaries cannot load here (missing: $unresolved), so no test ran"
  exit 0
fi
say "running the test suite (no GPU: GPU tests skip)"
tests=0
in_root "$root" env "${test_env[@]}" bash -c "cd '$repo' && ctest --test-dir '$build' --output-on-failure -j${DDP_TEST_JOBS:-2} --timeout 600" |
  tee "$repo/$build/ctest.log" || tests=$?
skipped=$(grep -cE '^\s+[0-9]+ - Gpu.*\(Skipped\)' "$repo/$build/ctest.log" || true)
say "summary: the CUDA build compiles, links, and $(grep -E 'tests passed' "$repo/$build/ctest.log" | tail -n 1) ($skipped GPU tests skipped: no GPU)"
exit $tests
