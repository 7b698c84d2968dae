#!/usr/bin/env bash
# The GPU check, in one command, for a GPU machine with PyTorch (CUDA),
# CMake and ninja but no network and no apt (the H100/H200 machines):
#   1. builds ddp against the installed PyTorch's LibTorch, NCCL included;
#   2. runs the GPU tests (build/bin/gpu_tests: NCCL, Gloo on CUDA tensors,
#      DDP, AMP, SyncBatchNorm, DataParallel);
#   3. runs the GPU benchmark (benchmarks/gpu_vs_pytorch.sh: ddp against PyTorch's
#      DDP on the same GPU);
#   4. with --full, builds everything else and runs the CPU test suite too;
# and prints a short table last. What the machine lacks (CLI11, nlohmann-json,
# zlib's and OpenSSL's headers, GoogleTest's sources, Fashion-MNIST) comes from .gpu-pack/,
# made beforehand on a Debian machine by scripts/gpu-pack.sh.
#
# Usage: bash scripts/gpu-check.sh [--full] [--rounds N] [--logs DIR]
# Environment: PYTHON (default python3, the one with torch), DDP_GPU_BUILD
# (build directory, default build-gpu).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
pack="$root/.gpu-pack"
build=${DDP_GPU_BUILD:-$root/build-gpu}
python=${PYTHON:-python3}
full=0
rounds=3
logs="$build/logs"
while [[ $# -gt 0 ]]; do
  case $1 in
    --full) full=1 ;;
    --rounds) rounds=$2; shift ;;
    --logs) logs=$2; shift ;;
    *) echo "usage: scripts/gpu-check.sh [--full] [--rounds N] [--logs DIR]" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$logs"
summary="$logs/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
stage_start=$(date +%s)
elapsed() { echo "$(( $(date +%s) - stage_start )) s"; }

if [[ ! -d "$pack/include/CLI" ]]; then
  echo "error: $pack is missing; run 'bash scripts/gpu-pack.sh' on a Debian machine first" >&2
  exit 2
fi
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "error: $python cannot import torch; set PYTHON to the Python that has PyTorch" >&2
  exit 2
fi

# --- The machine.
{
  date -u +"date: %Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
  "$python" -c 'import torch; print("pytorch:", torch.__version__, "cuda:", torch.version.cuda,
    "cudnn:", torch.backends.cudnn.version(), "nccl:", ".".join(map(str, torch.cuda.nccl.version())))'
  echo "cores: $(nproc); $(cmake --version | head -n 1); ninja $(ninja --version); $(c++ --version | head -n 1)"
} 2>&1 | tee "$logs/machine.txt" | tee -a "$summary"

# --- 1. Configure and build the GPU targets.
torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
# nccl.h: the nvidia-nccl wheel's, beside PyTorch.
site=$("$python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
nccl_header=$(find "$site/nvidia" -name nccl.h 2>/dev/null | head -n 1)
nccl_include=${nccl_header%/nccl.h}
echo "nccl.h: ${nccl_header:-not found beside PyTorch}" | tee -a "$summary"
cuda_args=()
if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  cuda_args=(-DCUDAToolkit_ROOT=/usr/local/cuda -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
pack_args=()
if [[ ! -f /usr/include/zlib.h ]]; then
  zlib_so=$(ldconfig -p | sed -n 's/.*libz\.so\.1 (libc6,x86-64) => //p' | head -n 1)
  pack_args=(-DZLIB_INCLUDE_DIR="$pack/include" -DZLIB_LIBRARY="$zlib_so")
fi
if [[ ! -f /usr/include/openssl/hmac.h ]]; then
  crypto_so=$(ldconfig -p | sed -n 's/.*libcrypto\.so\.[0-9.]* (libc6,x86-64) => //p' | head -n 1)
  pack_args+=(-DOPENSSL_INCLUDE_DIR="$pack/include" -DOPENSSL_CRYPTO_LIBRARY="$crypto_so")
fi
gtest_args=()
if [[ ! -f /usr/include/gtest/gtest.h ]]; then
  gtest_args=(-DDDP_GTEST_SOURCE_DIR="$pack/src/googletest")
fi
# LibTorch 2.12 and later need C++20.
cxx_standard=$("$python" -c 'import torch; v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]); print(20 if v >= (2, 12) else 17)')
echo "== configure" | tee "$logs/build.txt"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD="$cxx_standard" \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$pack" -DCMAKE_CXX_FLAGS="-isystem $pack/include" \
  -DDDP_NCCL_INCLUDE_DIR="$nccl_include" -DDDP_USE_CCACHE=OFF \
  "${cuda_args[@]}" "${pack_args[@]}" "${gtest_args[@]}" >>"$logs/build.txt" 2>&1
configured=$?
grep -E "ddp: LibTorch" "$logs/build.txt" | tee -a "$summary"
if [[ $configured -ne 0 ]]; then
  note "configure: FAILED ($(elapsed)); see build.txt"
  tail -n 40 "$logs/build.txt"
  exit 1
fi
echo "== build the GPU targets" >>"$logs/build.txt"
targets=(gpu_tests gpu_test_worker)
targets+=(gpu_step_bench)
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >>"$logs/build.txt" 2>&1
built=$?
note "build of the GPU targets: $([[ $built -eq 0 ]] && echo ok || echo FAILED) ($(elapsed))"
if [[ $built -ne 0 ]]; then
  grep -E "error|FAILED" "$logs/build.txt" | head -n 40
fi

# --- 2. The GPU tests.
tests_rc=1
if [[ -x "$build/bin/gpu_tests" ]]; then
  stage_start=$(date +%s)
  (cd "$build" && timeout 600 bin/gpu_tests) >"$logs/gpu_tests.txt" 2>&1
  tests_rc=$?
  note "GPU tests: exit $tests_rc ($(elapsed))"
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\] Gpu' "$logs/gpu_tests.txt" | sort -u | tee -a "$summary"
  grep -E "Failure|check .*FAILED|error:" "$logs/gpu_tests.txt" | head -n 30
fi

# --- 3. The GPU benchmark.
bench_rc=1
if [[ -x "$build/bin/gpu_step_bench" && -f "$root/benchmarks/gpu_vs_pytorch.sh" ]]; then
  stage_start=$(date +%s)
  DDP_BUILD_DIR="$build" PYTHON="$python" FASHION_MNIST="$pack/data/fashion-mnist" \
    ROUNDS="$rounds" timeout 1200 bash "$root/benchmarks/gpu_vs_pytorch.sh" >"$logs/gpu_bench.txt" 2>&1
  bench_rc=$?
  note "GPU benchmark: exit $bench_rc ($(elapsed))"
fi

# --- 4. Everything else: the whole build and the CPU suite.
full_rc=0
if [[ $full -eq 1 ]]; then
  stage_start=$(date +%s)
  cmake --build "$build" -j"$(nproc)" -- -k 0 >"$logs/full_build.txt" 2>&1
  full_rc=$?
  note "full build: exit $full_rc ($(elapsed))"
  grep -E "error:|FAILED" "$logs/full_build.txt" | head -n 30
  stage_start=$(date +%s)
  ctest --test-dir "$build" -E '^Gpu' -j"$(( $(nproc) / 2 ))" --timeout 300 --output-on-failure \
    >"$logs/ctest.txt" 2>&1
  full_rc=$(( full_rc | $? ))
  note "CPU suite on this LibTorch: $(grep -E 'tests passed|tests failed' "$logs/ctest.txt" | tail -n 1) ($(elapsed))"
  grep -E '^\s+[0-9]+ - .*\((Failed|Timeout|Subprocess)' "$logs/ctest.txt" | head -n 20 | tee -a "$summary"
fi

echo
echo "== GPU check summary"
cat "$summary"
if [[ -f "$logs/gpu_bench.txt" ]]; then
  echo
  sed -n '/^model/,$p' "$logs/gpu_bench.txt" | head -n 20
  tail -n 5 "$logs/gpu_bench.txt"
fi
[[ $built -eq 0 && $tests_rc -eq 0 && $bench_rc -eq 0 && $full_rc -eq 0 ]]
