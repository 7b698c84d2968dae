#!/usr/bin/env bash
# Trains with ddp and with PyTorch's Python DDP (Debian's python3-torch, Gloo)
# on this machine, same ranks, models, data and one intra-op thread per rank,
# and prints images/s side by side:
#   (a) linear:  the torchrun tutorial's toy (Linear(20,1), 2048 random
#                samples, batch 32 per rank, SGD lr 1e-3, MSE loss);
#   (b) convnet: examples/common/models.hpp's ConvNet on Fashion-MNIST,
#                batch 100 per rank, SGD lr 0.01.
# The last line reads `ratio linear=X convnet=Y` (ddp images/s over
# PyTorch's). Exits non-zero when a run fails, not when a target is missed.
#
# Usage: benchmarks/ddp_vs_pytorch.sh
# Environment: BACKEND (ddp's backend: auto, shm or gloo; default auto, which
# is shm on one node), NPROC (ranks, default 2), LINEAR_STEPS (2000), CONVNET_STEPS
# (100), ROUNDS (5), DDP_BUILD_DIR (build), JOBS (build parallelism, 2),
# FASHION_MNIST (/usr/share/datasets/fashion-mnist).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}
nproc_per_node=${NPROC:-2}
linear_steps=${LINEAR_STEPS:-2000}
convnet_steps=${CONVNET_STEPS:-100}
rounds=${ROUNDS:-5}
data_dir=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
# shellcheck source=benchmarks/common.sh
source "$root/benchmarks/common.sh"
require_torch
require_fashion_mnist "$data_dir"
build_benchmarks ddp_train_bench
bench="$build/bin/ddp_train_bench"

cores=$(nproc)  # Before OMP_NUM_THREADS=1, which nproc would report instead.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
export OMP_NUM_THREADS=1

# Torchrun of Debian's PyTorch 1.13 under Python 3.11 cannot parse its own
# default `--redirects 0` (IntFlag no longer lists the zero member), so
# stderr is redirected to its log and tee'd back instead: same output.
# Both sides allocate with the same malloc (comparison_preload in common.sh).
preload=$(comparison_preload)
torchrun() {
  env ${preload:+LD_PRELOAD="$preload"} "$python" -m torch.distributed.run --standalone --nproc_per_node "$nproc_per_node" \
    --redirects 2 --tee 2 --log_dir "$logs/torchrun" "$@"
}

# run NAME COMMAND...: runs one side, keeps its `result` line in $result.
run() {
  local name=$1
  shift
  echo "running $name ..." >&2
  if ! "$@" >"$logs/$name.log" 2>&1; then
    # The ranks' own messages first: torchrun's report that follows is long.
    echo "error: the $name run failed; the ranks' errors:" >&2
    grep -E '(^|[]:] ?)error: |Error: ' "$logs/$name.log" | grep -v ChildFailedError | head -n 10 >&2
    echo "the end of its output:" >&2
    tail -n 25 "$logs/$name.log" >&2
    exit 1
  fi
  result=$(grep -o 'result side=.*' "$logs/$name.log" | tail -n 1)
  if [[ -z "$result" ]]; then
    echo "error: the $name run printed no result line; its output:" >&2
    tail -n 40 "$logs/$name.log" >&2
    exit 1
  fi
  echo "  $result" >&2
}


# median V...: the median of numbers (the mean of the middle two for an even count).
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# This machine's speed drifts by tens of percent from minute to minute (a
# shared host), so each model runs `rounds` times, the two sides alternating,
# and the table shows medians.
declare -A values
for model in linear convnet; do
  steps=$linear_steps
  [[ $model == convnet ]] && steps=$convnet_steps
  for round in $(seq "$rounds"); do
    run "ddp-$model-$round" torchrun --no_python "$bench" --model "$model" --steps "$steps" \
      --data-dir "$data_dir" --backend "${BACKEND:-auto}"
    ddp=$result
    run "pytorch-$model-$round" torchrun "$root/benchmarks/pytorch_ddp_bench.py" --model "$model" \
      --steps "$steps" --data-dir "$data_dir"
    py=$result
    for key in images_per_s step_ms nosync_step_ms; do
      values[ddp-$model-$key]+=" $(field "$ddp" $key)"
      values[pytorch-$model-$key]+=" $(field "$py" $key)"
    done
    values[ddp-$model-loss]=$(field "$ddp" loss)
    values[pytorch-$model-loss]=$(field "$py" loss)
    libtorch=$(field "$ddp" libtorch)
  done
done

echo "ddp backend: $(field "$ddp" backend); ranks: $nproc_per_node; cores: $cores; cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
# Both sides' matrix products run on the libblas.so.3 their LibTorch links.
echo "both sides' $("$build/bin/ddprun" --standalone --nproc-per-node 1 /bin/true 2>&1 | sed -n 's/^ddprun: //p' | grep '^BLAS:' || echo 'BLAS: not named')"
allocator_line "$preload"
echo "PyTorch $("$python" -c 'import torch; print(torch.__version__)'); LibTorch $libtorch; medians of $rounds rounds"
printf '%-8s %12s %14s %7s %12s %20s %16s %24s\n' model "ddp img/s" "PyTorch img/s" ratio \
  "ddp step ms" "ddp no_sync step ms" "PyTorch step ms" "PyTorch no_sync step ms"
ratios=()
for model in linear convnet; do
  m() { median ${values[$1-$model-$2]}; }
  ratio=$(awk -v a="$(m ddp images_per_s)" -v b="$(m pytorch images_per_s)" 'BEGIN { printf "%.2f", a / b }')
  ratios+=("$model=$ratio")
  printf '%-8s %12.0f %14.0f %7s %12.3f %20.3f %16.3f %24.3f\n' "$model" \
    "$(m ddp images_per_s)" "$(m pytorch images_per_s)" "$ratio" \
    "$(m ddp step_ms)" "$(m ddp nosync_step_ms)" "$(m pytorch step_ms)" "$(m pytorch nosync_step_ms)"
done
for model in linear convnet; do
  echo "$model images/s per round: ddp${values[ddp-$model-images_per_s]}; PyTorch${values[pytorch-$model-images_per_s]}"
done
# With the same seed both sides draw the same initial weights, data and
# shuffles, so their losses after the synchronized steps should agree.
echo "loss after the synchronized steps (ddp/PyTorch): linear ${values[ddp-linear-loss]}/${values[pytorch-linear-loss]}, convnet ${values[ddp-convnet-loss]}/${values[pytorch-convnet-loss]}"
echo "ratio ${ratios[*]}"
