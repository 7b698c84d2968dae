#!/usr/bin/env bash
# On one CUDA GPU, ddp against PyTorch: training step time of the tutorial
# ConvNet and ResNet-18 on Fashion-MNIST, in fp32 and with mixed precision
# (O1 autocast to bf16, or fp16 with a gradient scaler), for the bare model
# and for DDP at world size 1 on NCCL (whose difference is DDP's overhead).
# Each round runs every configuration in one ddp process
# (build/bin/gpu_step_bench) and one PyTorch process
# (benchmarks/pytorch_gpu_step_bench.py), the two alternating which goes
# first; the table shows medians over the rounds. It builds nothing.
#
# Usage: benchmarks/gpu_vs_pytorch.sh
# Environment: DDP_BUILD_DIR (build), PYTHON (python3), FASHION_MNIST
# (/usr/share/datasets/fashion-mnist), ROUNDS (3), STEPS_SCALE (1: multiplies
# the timed steps, 300 ConvNet and 150 ResNet-18).
# Exits non-zero when a run fails, not when a target is missed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}
python=${PYTHON:-python3}
data=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
rounds=${ROUNDS:-3}
scale=${STEPS_SCALE:-1}
bench="$build/bin/gpu_step_bench"
if [[ ! -x "$bench" ]]; then
  echo "error: $bench not found; build it first (cmake --build $build --target gpu_step_bench)" >&2
  exit 2
fi
steps=(--convnet-steps $((300 * scale)) --resnet-steps $((150 * scale)) --data-dir "$data")
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

run() {  # run NAME COMMAND...
  local name=$1
  shift
  echo "running $name ..." >&2
  if ! timeout 900 "$@" >"$logs/$name.log" 2>&1; then
    echo "error: the $name run failed; the end of its output:" >&2
    tail -n 30 "$logs/$name.log" >&2
    exit 1
  fi
  grep '^result ' "$logs/$name.log" >>"$logs/results"
}

for round in $(seq "$rounds"); do
  ddp_side=(run "ddp-$round" "$bench" "${steps[@]}")
  py_side=(run "pytorch-$round" "$python" "$root/benchmarks/pytorch_gpu_step_bench.py" "${steps[@]}")
  if (( round % 2 )); then "${ddp_side[@]}"; "${py_side[@]}"; else "${py_side[@]}"; "${ddp_side[@]}"; fi
done

echo "date: $(date -u +'%Y-%m-%d %H:%M UTC')"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
"$python" -c 'import torch; print("PyTorch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())'
echo "ddp's LibTorch: $(grep -o 'libtorch=[^ ]*' "$logs/results" | head -n 1 | cut -d= -f2); medians of $rounds rounds; cuDNN autotuner on; ms per step"
awk '
  function median(key,   n, i, j, t, v) {
    n = split(values[key], v, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  {
    delete f
    for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
    key = f["side"] "|" f["model"] "|" f["precision"] "|" f["mode"]
    values[key] = values[key] " " f["step_ms"]
    loss[key] = f["loss"]
    if (!(f["model"] "|" f["precision"] in seen)) { seen[f["model"] "|" f["precision"]] = 1; order[++count] = f["model"] "|" f["precision"] }
  }
  END {
    printf "%-9s %-5s %9s %9s %9s %9s %9s %9s %11s %15s\n", "model", "prec", "ddp bare", "ddp DDP", "overhead", "PT bare", "PT DDP", "overhead", "DDP speed", "loss ddp/PT"
    for (i = 1; i <= count; i++) {
      split(order[i], mp, "|")
      db = median("ddp|" order[i] "|bare"); dd = median("ddp|" order[i] "|ddp")
      pb = median("pytorch|" order[i] "|bare"); pd = median("pytorch|" order[i] "|ddp")
      printf "%-9s %-5s %9.3f %9.3f %8.1f%% %9.3f %9.3f %8.1f%% %10.2fx %7.3f/%.3f\n", mp[1], mp[2], db, dd, 100 * (dd - db) / db, pb, pd, 100 * (pd - pb) / pb, pd / dd, loss["ddp|" order[i] "|ddp"], loss["pytorch|" order[i] "|ddp"]
    }
  }' "$logs/results"
echo "(overhead: DDP over the bare model of the same side; DDP speed: PyTorch DDP ms / ddp DDP ms, above 1 = ddp faster)"
echo "per-round step ms:"
sed 's/^result //' "$logs/results" | awk '{print "  " $1, $2, $3, $4, $7}'
