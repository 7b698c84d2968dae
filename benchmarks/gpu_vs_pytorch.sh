#!/usr/bin/env bash
# On one CUDA GPU, ddp against PyTorch: training step time of the tutorial
# ConvNet and ResNet-18 on Fashion-MNIST, in fp32 and with mixed precision
# (O1 autocast to bf16, or fp16 with a gradient scaler), for the bare model
# and for DDP at world size 1 on NCCL (whose difference is DDP's overhead);
# ddp's DDP also with its single-process shortcut off (the path every rank
# takes at world size 2 and more) and both sides' DDP with
# gradient_as_bucket_view, for the peak GPU memory table.
# Each round runs every configuration in one ddp process
# (build/bin/gpu_step_bench) and one PyTorch process
# (benchmarks/pytorch_gpu_step_bench.py), the two alternating which goes
# first; the table shows medians over the rounds. It builds nothing.
#
# Usage: benchmarks/gpu_vs_pytorch.sh
# Environment: MODELS (convnet,resnet18), PRECISIONS (fp32,bf16,fp16; the
# captured rows need fp32), KEEP_RESULTS (a file that gets the raw result lines after each
# round), DDP_BUILD_DIR (build), PYTHON (python3), FASHION_MNIST
# (/usr/share/datasets/fashion-mnist), ROUNDS (3), STEPS_SCALE (1: multiplies
# the timed steps, 300 ConvNet and 150 ResNet-18), TABLE_FROM (runs nothing:
# prints the table of a file KEEP_RESULTS wrote, on any machine).
# Exits non-zero when a run fails, not when a target is missed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}
python=${PYTHON:-python3}
data=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
rounds=${ROUNDS:-3}
scale=${STEPS_SCALE:-1}
bench="$build/bin/gpu_step_bench"
if [[ ! -x "$bench" && -z "${TABLE_FROM:-}" ]]; then
  echo "error: $bench not found; build it first (cmake --build $build --target gpu_step_bench)" >&2
  exit 2
fi
models=${MODELS:-convnet,resnet18}
precisions=${PRECISIONS:-fp32,bf16,fp16}
steps=(--convnet-steps $((300 * scale)) --resnet-steps $((150 * scale)) --data-dir "$data"
       --models "$models")
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

# Captured steps run in a process of their own: a capture that fails can
# leave CUDA's random generator inside a capture for the rest of the
# process. A failed run is reported, and the table shows "-" for it.
run_captured() {  # run_captured NAME COMMAND...
  local name=$1
  shift
  echo "running $name ..." >&2
  timeout 900 "$@" >"$logs/$name.log" 2>&1 ||
    { echo "warning: the $name run failed; the end of its output:" >&2; tail -n 12 "$logs/$name.log" >&2; }
  grep '^result ' "$logs/$name.log" >>"$logs/results" || true
}

if [[ -n "${TABLE_FROM:-}" ]]; then
  cp "$TABLE_FROM" "$logs/results"
  rounds="up to $(grep -c 'side=ddp model=convnet precision=fp32 mode=bare ' "$logs/results")"
fi
for round in $(if [[ -z "${TABLE_FROM:-}" ]]; then seq "$rounds"; fi); do
  ddp_side=(run "ddp-$round" "$bench" "${steps[@]}" --precisions "$precisions"
            --modes bare,ddp,ddp-full,ddp-view)
  py_side=(run "pytorch-$round" "$python" "$root/benchmarks/pytorch_gpu_step_bench.py" "${steps[@]}"
           --precisions "$precisions" --modes bare,ddp,ddp-view)
  if (( round % 2 )); then "${ddp_side[@]}"; "${py_side[@]}"; else "${py_side[@]}"; "${ddp_side[@]}"; fi
  if [[ ",$precisions," == *,fp32,* ]]; then
    run_captured "ddp-captured-$round" "$bench" "${steps[@]}" --precisions fp32 --modes captured,captured-full
    run_captured "pytorch-graphed-$round" "$python" "$root/benchmarks/pytorch_gpu_step_bench.py" \
      "${steps[@]}" --precisions fp32 --modes graphed
  fi
  [[ -n "${KEEP_RESULTS:-}" ]] && cp "$logs/results" "$KEEP_RESULTS"  # what a cut-short run keeps
done

if [[ -z "${TABLE_FROM:-}" ]]; then
  echo "date: $(date -u +'%Y-%m-%d %H:%M UTC')"
  echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
  "$python" -c 'import torch; print("PyTorch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())'
else
  echo "results from $TABLE_FROM"
fi
echo "ddp's LibTorch: $(grep -o 'libtorch=[^ ]*' "$logs/results" | head -n 1 | cut -d= -f2); medians of $rounds rounds; cuDNN autotuner on; ms per step"
awk '
  function median(key,   n, i, j, t, v) {
    if (!(key in values)) return -1
    n = split(values[key], v, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  function pct(a, b) { return (a < 0 || b <= 0) ? "-" : sprintf("%.1f%%", 100 * (a - b) / b) }
  function ms(a) { return a < 0 ? "-" : sprintf("%.3f", a) }
  function mib(a) { return a < 0 ? "-" : sprintf("%.0f", a) }
  {
    delete f
    for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
    key = f["side"] "|" f["model"] "|" f["precision"] "|" f["mode"]
    values[key] = values[key] " " f["step_ms"]
    peaks[key] = peaks[key] " " (("peak_mib" in f) ? f["peak_mib"] : -1)
    loss[key] = f["loss"]
    if (!(f["model"] "|" f["precision"] in seen)) { seen[f["model"] "|" f["precision"]] = 1; order[++count] = f["model"] "|" f["precision"] }
  }
  END {
    print "Step time, ms (medians); overhead = DDP over the same side'"'"'s bare model; speed = PyTorch DDP ms / ddp ms (above 1: ddp faster)"
    printf "%-9s %-5s %9s %9s %8s %9s %8s %9s %9s %8s %7s %7s %15s\n", "model", "prec", "ddp bare", "ddp DDP", "ovh", "ddp full", "ovh", "PT bare", "PT DDP", "ovh", "speed", "full", "loss ddp/PT"
    for (i = 1; i <= count; i++) {
      split(order[i], mp, "|")
      db = median("ddp|" order[i] "|bare"); dd = median("ddp|" order[i] "|ddp"); df = median("ddp|" order[i] "|ddp-full")
      pb = median("pytorch|" order[i] "|bare"); pd = median("pytorch|" order[i] "|ddp")
      printf "%-9s %-5s %9s %9s %8s %9s %8s %9s %9s %8s %6.2fx %6.2fx %7.3f/%.3f\n", mp[1], mp[2], ms(db), ms(dd), pct(dd, db), ms(df), pct(df, db), ms(pb), ms(pd), pct(pd, pb), (dd > 0 ? pd / dd : 0), (df > 0 ? pd / df : 0), loss["ddp|" order[i] "|ddp"], loss["pytorch|" order[i] "|ddp"]
    }
    print ""
    print "Peak allocated GPU memory over the timed steps, MiB (last round; view = gradient_as_bucket_view)"
    printf "%-9s %-5s %9s %9s %9s %9s %9s %9s %9s\n", "model", "prec", "ddp bare", "ddp DDP", "ddp full", "ddp view", "PT bare", "PT DDP", "PT view"
    for (i = 1; i <= count; i++) {
      split(order[i], mp, "|")
      line = sprintf("%-9s %-5s", mp[1], mp[2])
      n = split("ddp|bare ddp|ddp ddp|ddp-full ddp|ddp-view pytorch|bare pytorch|ddp pytorch|ddp-view", cols, " ")
      for (c = 1; c <= n; c++) {
        split(cols[c], sm, "|"); key = sm[1] "|" order[i] "|" sm[2]
        k = split(peaks[key], pv, " ")
        line = line sprintf(" %9s", k ? mib(pv[k]) : "-")
      }
      print line
    }
    print ""
    print "Captured steps (fp32), ms: ddp::CapturedStep against eager PyTorch DDP and the PyTorch CUDA-graph recipe for DDP"
    printf "%-9s %9s %9s %9s %9s %9s %12s %12s\n", "model", "ddp DDP", "captured", "capt full", "PT DDP", "PT graph", "vs PT eager", "vs PT graph"
    for (i = 1; i <= count; i++) {
      split(order[i], mp, "|")
      if (mp[2] != "fp32") continue
      dd = median("ddp|" order[i] "|ddp"); dc = median("ddp|" order[i] "|captured"); dcf = median("ddp|" order[i] "|captured-full")
      pd = median("pytorch|" order[i] "|ddp"); pg = median("pytorch|" order[i] "|graphed")
      printf "%-9s %9s %9s %9s %9s %9s %11s %11s\n", mp[1], ms(dd), ms(dc), ms(dcf), ms(pd), ms(pg), (dc > 0 && pd > 0) ? sprintf("%.2fx", pd / dc) : "-", (dc > 0 && pg > 0) ? sprintf("%.2fx", pg / dc) : "-"
    }
  }' "$logs/results"
echo "(ddp full: ddp's DDP with the single-process shortcut off, the path of every rank at world size 2+)"
echo "per-round step ms:"
sed 's/^result //' "$logs/results" | awk '{print "  " $1, $2, $3, $4, $7}'
