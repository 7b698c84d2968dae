#!/usr/bin/env bash
# On one CUDA GPU, ddp against PyTorch: training step time of the tutorial
# ConvNet and ResNet-18 on Fashion-MNIST, in fp32 and with mixed precision
# (O1 autocast to bf16, or fp16 with a gradient scaler), for the bare model
# and for DDP at world size 1 on NCCL (whose difference is DDP's overhead).
#
# The same semantics on both sides: world size 1, one GPU; buffers broadcast
# on neither side. PyTorch's DDP broadcasts buffers (BatchNorm's running
# statistics) at every forward by default, even at world size 1, and ddp's
# skips that broadcast at world size 1, so both run with broadcast_buffers
# off (Note [Buffers broadcast on neither side] in gpu_step_bench.cpp).
# The headline compares ddp's full path (its single-process shortcut off:
# bucket copies, the NCCL all-reduce, the copies back, the path every rank
# runs at world size 2 and more) with PyTorch's DDP; ddp with the shortcut
# (no collective at world size 1) is a column of its own. Beside them: the
# bare-step ratio (PyTorch bare / ddp bare: no DDP on either side, so the
# Python interpreter's and the optimizer's share of the gap) and each side's
# DDP overhead over its own bare step. Both sides' DDP also run with
# gradient_as_bucket_view, for the peak GPU memory table, and with the whole
# step in a CUDA graph (fp32).
# Each round runs every configuration in one ddp process
# (build/bin/gpu_step_bench) and one PyTorch process
# (benchmarks/pytorch_gpu_step_bench.py), the two alternating which goes
# first; the table shows medians over the rounds. It builds nothing.
#
# Usage: benchmarks/gpu_vs_pytorch.sh
# Environment: MODELS (convnet,resnet18), PRECISIONS (fp32,bf16,fp16; the
# captured rows need fp32), KEEP_RESULTS (a file that gets the raw result lines after each
# round), DDP_BUILD_DIR (build), PYTHON (python3), FASHION_MNIST
# (/usr/share/datasets/fashion-mnist), ROUNDS (3; 0 with PROFILE: the profile
# alone), STEPS_SCALE (1: multiplies
# the timed steps, 300 ConvNet and 150 ResNet-18), TABLE_FROM (runs nothing:
# prints the table of a file KEEP_RESULTS wrote, on any machine).
# PROFILE (a path prefix; empty: no profile): before the rounds, profiles one
# configuration, ddp's full path (ddp-full) and PyTorch's DDP, each after
# its warm-up and timed steps, for PROFILE_STEPS (20) steps, and keeps
# PREFIX.ddp.trace.json and PREFIX.pytorch.trace.json (Chrome traces, for
# chrome://tracing or Perfetto) and PREFIX.ddp.txt and PREFIX.pytorch.txt
# (the top 15 operators and kernels by device time and by CPU time, with
# counts). The configuration: PROFILE_MODEL (convnet), PROFILE_PRECISION
# (fp16); PROFILE_SIDES (ddp,pytorch) picks the sides.
# Exits non-zero when a run fails, not when a target is missed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}
python=${PYTHON:-python3}
data=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
rounds=${ROUNDS:-3}
scale=${STEPS_SCALE:-1}
profile=${PROFILE:-}
bench="$build/bin/gpu_step_bench"
if [[ ! -x "$bench" && -z "${TABLE_FROM:-}" ]]; then
  echo "error: $bench not found; build it first (cmake --build $build --target gpu_step_bench)" >&2
  exit 2
fi
models=${MODELS:-convnet,resnet18}
precisions=${PRECISIONS:-fp32,bf16,fp16}
steps=(--convnet-steps $((300 * scale)) --resnet-steps $((150 * scale)) --data-dir "$data")
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
: >"$logs/results"

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

# The profile: one configuration per side, its output kept beside the trace
# (its result line is not one of the rounds'). A failed profile is reported
# and the rounds still run.
profile_side() {  # profile_side SIDE COMMAND...
  local side=$1
  shift
  echo "profiling $side ..." >&2
  if timeout 600 "$@" --profile "$profile.$side.trace.json" >"$profile.$side.txt" 2>&1; then
    echo "profile of $side: $profile.$side.txt$([[ -f "$profile.$side.trace.json" ]] &&
      echo ", $profile.$side.trace.json" || echo " (no trace: see the file)")" >&2
  else
    echo "warning: the $side profile failed; the end of its output ($profile.$side.txt):" >&2
    tail -n 12 "$profile.$side.txt" >&2
  fi
}
if [[ -n "$profile" && -z "${TABLE_FROM:-}" ]]; then
  mkdir -p "$(dirname "$profile")"
  profile_sides=${PROFILE_SIDES:-ddp,pytorch}
  profiled=("${steps[@]}" --models "${PROFILE_MODEL:-convnet}" --precisions "${PROFILE_PRECISION:-fp16}"
            --profile-steps "${PROFILE_STEPS:-20}")
  if [[ ",$profile_sides," == *,ddp,* ]]; then
    profile_side ddp "$bench" "${profiled[@]}" --modes ddp-full
  fi
  if [[ ",$profile_sides," == *,pytorch,* ]]; then
    profile_side pytorch "$python" "$root/benchmarks/pytorch_gpu_step_bench.py" "${profiled[@]}" --modes ddp
  fi
fi

steps+=(--models "$models")
if [[ -n "${TABLE_FROM:-}" ]]; then
  cp "$TABLE_FROM" "$logs/results"
  rounds="up to $(grep -c 'side=ddp model=convnet precision=fp32 mode=bare ' "$logs/results" || true)"
fi
for round in $(if [[ -z "${TABLE_FROM:-}" ]]; then seq "$rounds"; fi); do
  ddp_side=(run "ddp-$round" "$bench" "${steps[@]}" --precisions "$precisions"
            --modes "bare,ddp,ddp-full,ddp-view")
  py_side=(run "pytorch-$round" "$python" "$root/benchmarks/pytorch_gpu_step_bench.py" "${steps[@]}"
           --precisions "$precisions" --modes "bare,ddp,ddp-view")
  if (( round % 2 )); then "${ddp_side[@]}"; "${py_side[@]}"; else "${py_side[@]}"; "${ddp_side[@]}"; fi
  if [[ ",$precisions," == *,fp32,* ]]; then
    run_captured "ddp-captured-$round" "$bench" "${steps[@]}" --precisions fp32 --modes "captured,captured-full"
    run_captured "pytorch-graphed-$round" "$python" "$root/benchmarks/pytorch_gpu_step_bench.py" \
      "${steps[@]}" --precisions fp32 --modes graphed
  fi
  [[ -n "${KEEP_RESULTS:-}" ]] && cp "$logs/results" "$KEEP_RESULTS"  # what a cut-short run keeps
done

if [[ ! -s "$logs/results" ]]; then
  echo "no rounds run (ROUNDS=$rounds): no table"
  exit 0
fi
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
  function diff(a, b) { return (a < 0 || b < 0) ? "-" : sprintf("%+.3f", a - b) }
  function ratio(a, b) { return (a <= 0 || b <= 0) ? "-" : sprintf("%.2fx", a / b) }
  function mib(a) { return a < 0 ? "-" : sprintf("%.0f", a) }
  {
    delete f
    for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
    key = f["side"] "|" f["model"] "|" f["precision"] "|" f["mode"]
    values[key] = values[key] " " f["step_ms"]
    peaks[key] = peaks[key] " " (("peak_mib" in f) ? f["peak_mib"] : -1)
    loss[key] = f["loss"]
    # Results written before both sides ran with broadcast_buffers off
    # have no broadcast_buffers field: PyTorch broadcast buffers there.
    if (f["mode"] != "bare" && f["broadcast_buffers"] != "0") old[f["side"]] = 1
    if (!(f["model"] "|" f["precision"] in seen)) { seen[f["model"] "|" f["precision"]] = 1; order[++count] = f["model"] "|" f["precision"] }
  }
  END {
    scope = "world size 1, one GPU; buffers broadcast on neither side"
    if ("pytorch" in old) scope = "world size 1, one GPU; PyTorch'"'"'s DDP broadcast buffers at every forward in these results (written before broadcast_buffers=False), ddp'"'"'s did not"
    print "Step time, ms (medians; " scope ")"
    printf "%-9s %-5s %9s %9s %8s %9s %8s %9s %9s %8s %9s %9s %9s %15s\n", "model", "prec", "ddp bare", "ddp full", "ovh", "ddp short", "ovh", "PT bare", "PT DDP", "ovh", "DDP speed", "short spd", "bare rat", "loss ddp/PT"
    for (i = 1; i <= count; i++) {
      split(order[i], mp, "|")
      db = median("ddp|" order[i] "|bare"); dd = median("ddp|" order[i] "|ddp"); df = median("ddp|" order[i] "|ddp-full")
      pb = median("pytorch|" order[i] "|bare"); pd = median("pytorch|" order[i] "|ddp")
      lf = ("ddp|" order[i] "|ddp-full" in loss) ? loss["ddp|" order[i] "|ddp-full"] : "-"
      lp = ("pytorch|" order[i] "|ddp" in loss) ? loss["pytorch|" order[i] "|ddp"] : "-"
      printf "%-9s %-5s %9s %9s %8s %9s %8s %9s %9s %8s %9s %9s %9s %15s\n", mp[1], mp[2], ms(db), ms(df), pct(df, db), ms(dd), pct(dd, db), ms(pb), ms(pd), pct(pd, pb), ratio(pd, df), ratio(pd, dd), ratio(pb, db), lf "/" lp
    }
    print "  ddp full:  ddp'"'"'s DDP with the single-process shortcut off, the path every rank runs at world size 2+"
    print "             (bucket copies, the NCCL all-reduce, the copies back); ddp short: with the shortcut (no collective)"
    print "  ovh:       DDP'"'"'s own overhead, that side'"'"'s DDP step over that side'"'"'s bare step"
    print "  DDP speed: PT DDP / ddp full (world size 1, one GPU; above 1: ddp faster), the headline"
    print "  short spd: PT DDP / ddp short (world size 1, one GPU; ddp skips the collective, PyTorch does not)"
    print "  bare rat:  PT bare / ddp bare (world size 1, one GPU; no DDP on either side: the Python interpreter'"'"'s"
    print "             and the optimizer'"'"'s share of the DDP speed)"
    print ""
    print "DDP'"'"'s own cost, ms per step over the same side'"'"'s bare step (medians; " scope ")"
    printf "%-9s %-5s %11s %11s %11s\n", "model", "prec", "ddp full", "ddp short", "PT DDP"
    for (i = 1; i <= count; i++) {
      split(order[i], mp, "|")
      db = median("ddp|" order[i] "|bare"); dd = median("ddp|" order[i] "|ddp"); df = median("ddp|" order[i] "|ddp-full")
      pb = median("pytorch|" order[i] "|bare"); pd = median("pytorch|" order[i] "|ddp")
      printf "%-9s %-5s %11s %11s %11s\n", mp[1], mp[2], diff(df, db), diff(dd, db), diff(pd, pb)
    }
    print ""
    print "Peak allocated GPU memory over the timed steps, MiB (last round; " scope "; view = gradient_as_bucket_view)"
    printf "%-9s %-5s %9s %9s %9s %9s %9s %9s %9s\n", "model", "prec", "ddp bare", "ddp full", "ddp short", "ddp view", "PT bare", "PT DDP", "PT view"
    for (i = 1; i <= count; i++) {
      split(order[i], mp, "|")
      line = sprintf("%-9s %-5s", mp[1], mp[2])
      n = split("ddp|bare ddp|ddp-full ddp|ddp ddp|ddp-view pytorch|bare pytorch|ddp pytorch|ddp-view", cols, " ")
      for (c = 1; c <= n; c++) {
        split(cols[c], sm, "|"); key = sm[1] "|" order[i] "|" sm[2]
        k = split(peaks[key], pv, " ")
        line = line sprintf(" %9s", k ? mib(pv[k]) : "-")
      }
      print line
    }
    print ""
    print "Captured steps (fp32), ms (medians; " scope "): ddp::CapturedStep against eager PyTorch DDP and the PyTorch CUDA-graph recipe for DDP"
    printf "%-9s %9s %10s %10s %9s %9s %10s %10s %10s\n", "model", "ddp full", "capt full", "capt short", "PT DDP", "PT graph", "graph spd", "eager spd", "short spd"
    for (i = 1; i <= count; i++) {
      split(order[i], mp, "|")
      if (mp[2] != "fp32") continue
      df = median("ddp|" order[i] "|ddp-full"); dc = median("ddp|" order[i] "|captured"); dcf = median("ddp|" order[i] "|captured-full")
      pd = median("pytorch|" order[i] "|ddp"); pg = median("pytorch|" order[i] "|graphed")
      printf "%-9s %9s %10s %10s %9s %9s %10s %10s %10s\n", mp[1], ms(df), ms(dcf), ms(dc), ms(pd), ms(pg), ratio(pg, dcf), ratio(pd, dcf), ratio(pg, dc)
    }
    print "  graph spd: PT graph / capt full (world size 1, one GPU; both replay one graph with the all-reduce), the headline"
    print "  eager spd: PT DDP (eager) / capt full (world size 1, one GPU)"
    print "  short spd: PT graph / capt short (world size 1, one GPU; ddp'"'"'s graph has no collective)"
  }' "$logs/results"
echo "per-round step ms:"
sed 's/^result //' "$logs/results" | awk '{print "  " $1, $2, $3, $4, $7}'
