#!/usr/bin/env bash
# The GPU check, in one command, for a GPU machine with PyTorch (CUDA),
# CMake and ninja but no network and no apt (the H100/H200 machines):
#   1. builds ddp against the installed PyTorch's LibTorch, NCCL included;
#   2. runs the GPU tests (build/bin/gpu_tests: NCCL, Gloo on CUDA tensors,
#      DDP, AMP, SyncBatchNorm, DataParallel);
#   3. runs the main job on the GPU (example_mnist_ddp, 5 epochs under ddprun,
#      one GPU: test accuracy at least 90%, and its time) and each of the
#      other examples briefly on the GPU;
#   4. runs the GPU benchmark (benchmarks/gpu_vs_pytorch.sh: ddp against PyTorch's
#      DDP on the same GPU) and the operator count on CUDA (benchmarks/op_count.sh);
#      stage fsdp: benchmarks/fsdp_bench.sh on CUDA (memory per rank with the
#      caching allocator's peak, step time, PyTorch's fully_shard beside);
#   5. with --full, builds everything else and runs the CPU test suite too;
# and prints a short table last. --stages picks which of 2-4 run (the build
# always does, and is a no-op when up to date), so that a GPU lent for two
# short commands can run the check in two parts on the same build. What the machine lacks (CLI11, nlohmann-json,
# zlib's and OpenSSL's headers, GoogleTest's sources, Fashion-MNIST) comes from .gpu-pack/,
# made beforehand on a Debian machine by scripts/gpu-pack.sh.
#
# Usage: bash scripts/gpu-check.sh [--full] [--no-examples] [--rounds N] [--logs DIR]
#                                  [--stages tests,examples,bench,opcount,fsdp]
# Environment: PYTHON (default python3, the one with torch), DDP_GPU_BUILD
# (build directory, default build-gpu), DDP_GPU_TARGETS (the targets to build,
# default all the GPU ones, the examples and ddprun).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
pack="$root/.gpu-pack"
build=${DDP_GPU_BUILD:-$root/build-gpu}
python=${PYTHON:-python3}
full=0
stages=tests,examples,bench,opcount,fsdp
rounds=3
logs="$build/logs"
while [[ $# -gt 0 ]]; do
  case $1 in
    --full) full=1 ;;
    --no-examples) stages=${stages//examples/} ;;
    --stages) stages=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --logs) logs=$2; shift ;;
    *) echo "usage: scripts/gpu-check.sh [--full] [--no-examples] [--rounds N] [--logs DIR]" \
         "[--stages tests,examples,bench,opcount,fsdp]" >&2; exit 2 ;;
  esac
  shift
done
wanted() { [[ ",$stages," == *",$1,"* ]]; }
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
targets=(gpu_tests gpu_test_worker gpu_step_bench ddprun)
examples=(example_mnist_ddp example_toy_trainer example_lenet_dp example_horovod)
targets+=("${examples[@]}")
[[ -f "$root/benchmarks/op_count_bench.cpp" ]] && targets+=(op_count_bench)
[[ -f "$root/benchmarks/fsdp_bench.cpp" ]] && targets+=(fsdp_bench)
# DDP_GPU_TARGETS: a shorter list, for a rerun with little GPU time left.
[[ -n "${DDP_GPU_TARGETS:-}" ]] && read -r -a targets <<<"$DDP_GPU_TARGETS"
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" -- -k 0 >>"$logs/build.txt" 2>&1
built=$?
note "build of the GPU targets: $([[ $built -eq 0 ]] && echo ok || echo FAILED) ($(elapsed))"
if [[ $built -ne 0 ]]; then
  grep -E "error|FAILED" "$logs/build.txt" | head -n 40
fi

# --- 2. The GPU tests.
tests_rc=1
wanted tests || tests_rc=0
if wanted tests && [[ -x "$build/bin/gpu_tests" ]]; then
  stage_start=$(date +%s)
  (cd "$build" && timeout 600 bin/gpu_tests) >"$logs/gpu_tests.txt" 2>&1
  tests_rc=$?
  note "GPU tests: exit $tests_rc ($(elapsed))"
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\] Gpu' "$logs/gpu_tests.txt" | sort -u | tee -a "$summary"
  grep -E "Failure|check .*FAILED|error:" "$logs/gpu_tests.txt" | head -n 30
fi

# --- 3. The examples on the GPU: the main job in full, the others briefly.
examples_rc=0
data="$pack/data/fashion-mnist"
run_example() {  # run_example NAME SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  stage_start=$(date +%s)
  (cd "$build" && timeout "$limit" "$@") >"$logs/$name.txt" 2>&1
  local rc=$?
  note "$name: exit $rc ($(elapsed)); $(grep -E 'accuracy|digest|error' "$logs/$name.txt" | tail -n 1)"
  [[ $rc -eq 0 ]] || examples_rc=1
}
if wanted examples && [[ -x "$build/bin/ddprun" && -x "$build/bin/example_mnist_ddp" ]]; then
  ddprun1=(bin/ddprun --standalone --nproc-per-node 1)
  run_example mnist_gpu 400 "${ddprun1[@]}" bin/example_mnist_ddp --device cuda --epochs 5 \
    --data-dir "$data" --metrics-csv "$logs/mnist_gpu.csv"
  accuracy=$(tail -n 1 "$logs/mnist_gpu.csv" 2>/dev/null | cut -d, -f3)
  seconds=$(awk -F, 'NR > 1 {s += $5} END {print s}' "$logs/mnist_gpu.csv" 2>/dev/null)
  if awk -v a="${accuracy:-0}" 'BEGIN {exit !(a >= 0.90)}'; then
    note "main job on the GPU: test accuracy ${accuracy} >= 0.90 after 5 epochs, ${seconds} s of training"
  else
    note "main job on the GPU: FAILED, test accuracy '${accuracy}' (need >= 0.90)"
    examples_rc=1
  fi
  run_example mnist_gpu_amp 120 "${ddprun1[@]}" bin/example_mnist_ddp --device cuda --amp O1 \
    --epochs 1 --max-steps 200 --data-dir "$data"
  run_example toy_trainer_gpu 120 "${ddprun1[@]}" bin/example_toy_trainer --device cuda --epochs 1
  run_example lenet_dp_gpu 120 bin/example_lenet_dp --device cuda --epochs 1 --max-steps 200 \
    --data-dir "$data"
  run_example horovod_gpu 120 "${ddprun1[@]}" bin/example_horovod --device cuda --epochs 1 \
    --max-steps 200 --data-dir "$data"
fi

# --- 4. The GPU benchmark.
bench_rc=1
wanted bench || bench_rc=0
if wanted bench && [[ -x "$build/bin/gpu_step_bench" && -f "$root/benchmarks/gpu_vs_pytorch.sh" ]]; then
  stage_start=$(date +%s)
  DDP_BUILD_DIR="$build" PYTHON="$python" FASHION_MNIST="$pack/data/fashion-mnist" \
    ROUNDS="$rounds" KEEP_RESULTS="$logs/gpu_bench_results.txt" \
    timeout 1200 bash "$root/benchmarks/gpu_vs_pytorch.sh" >"$logs/gpu_bench.txt" 2>&1
  bench_rc=$?
  note "GPU benchmark: exit $bench_rc ($(elapsed))"
fi

# The operator count on CUDA beside the CPU one (no timing: exact counts).
if wanted opcount && [[ -x "$build/bin/op_count_bench" && -f "$root/benchmarks/op_count.sh" ]]; then
  stage_start=$(date +%s)
  DDP_BUILD_DIR="$build" PYTHON="$python" DDP_SKIP_BUILD=1 timeout 300 \
    bash "$root/benchmarks/op_count.sh" >"$logs/op_count.txt" 2>&1
  note "operator count: exit $? ($(elapsed))"
fi

# FullyShardedDataParallel on CUDA beside DDP, ZeRO-1/2 and PyTorch's fully_shard.
if wanted fsdp && [[ -x "$build/bin/fsdp_bench" && -f "$root/benchmarks/fsdp_bench.sh" ]]; then
  stage_start=$(date +%s)
  DDP_BUILD_DIR="$build" PYTHON="$python" DDP_SKIP_BUILD=1 DEVICE=cuda STEPS="${FSDP_STEPS:-10}" \
    PARTS="${FSDP_PARTS:-memory speed pytorch}" timeout "${FSDP_TIMEOUT:-240}" \
    bash "$root/benchmarks/fsdp_bench.sh" >"$logs/fsdp_bench.txt" 2>&1
  note "FSDP benchmark on CUDA: exit $? ($(elapsed))"
fi

# --- 5. Everything else: the whole build and the CPU suite.
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
if [[ -f "$logs/fsdp_bench.txt" ]]; then
  echo
  grep -v '^building' "$logs/fsdp_bench.txt" | tail -n 30
fi
if [[ -f "$logs/gpu_bench.txt" ]]; then
  echo
  sed -n '/^Step time/,$p' "$logs/gpu_bench.txt" | head -n 24
fi
[[ $built -eq 0 && $tests_rc -eq 0 && $bench_rc -eq 0 && $examples_rc -eq 0 && $full_rc -eq 0 ]]
