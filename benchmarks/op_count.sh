#!/usr/bin/env bash
# ddp against PyTorch: the ATen operator calls a DDP training step adds over
# the bare step (zero_grad, forward, cross entropy, backward, SGD step), for
# the tutorial ConvNet and ResNet-18 at world size 1, on CPU (Gloo) and, where
# `nvidia-smi` works and both sides see a GPU, on CUDA (NCCL). A count, not a
# time: any machine gives the same figures for the same LibTorch, PyTorch and
# ddp. ddp's side is build/bin/op_count_bench (built here), PyTorch's
# benchmarks/pytorch_op_count.py; what counts as an operator call is in
# op_count_bench.cpp's Note [What counts as an operator call], and why ddp
# has variants with single_process_shortcut=false in its Note [World size 1
# and the shortcut].
#
# Usage: benchmarks/op_count.sh
# Environment: DDP_BUILD_DIR (build), PYTHON (Debian's /usr/bin/python3),
# OPTIONS (the DDP variants, op_count_bench's --options; default:
# default, single_process_shortcut=false, gradient_as_bucket_view and
# single_process_shortcut=false+gradient_as_bucket_view), STEPS (3 counted
# steps), WARMUP (5), JOBS (2 build jobs), DDP_SKIP_BUILD (1: build nothing,
# use the op_count_bench already in the build directory, as
# scripts/gpu-check.sh does).
# Prints a table per device (ops per step, and what DDP adds, for both
# sides) and, per DDP variant, the operators whose calls per step DDP
# changes on either side. Exits non-zero when a run fails, not when ddp adds
# more calls than PyTorch.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}
# shellcheck source=benchmarks/common.sh
source "$root/benchmarks/common.sh"
python=${PYTHON:-$python}
options=${OPTIONS:-default,single_process_shortcut=false,gradient_as_bucket_view,single_process_shortcut=false+gradient_as_bucket_view}
counting=(--steps "${STEPS:-3}" --warmup "${WARMUP:-5}" --options "$options" --op-lines)

require_torch
if [[ ${DDP_SKIP_BUILD:-0} != 1 ]]; then
  build_benchmarks op_count_bench
fi
bench="$build/bin/op_count_bench"
if [[ ! -x "$bench" ]]; then
  echo "error: $bench not found; build it (cmake --build $build --target op_count_bench) or unset DDP_SKIP_BUILD" >&2
  exit 2
fi

devices=(cpu)
if nvidia-smi >/dev/null 2>&1; then
  if "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    devices+=(cuda)
  else
    echo "note: nvidia-smi works but $python's PyTorch sees no GPU; counting on CPU only" >&2
  fi
fi

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

run() {  # run NAME COMMAND...
  local name=$1
  shift
  echo "running $name ..." >&2
  if ! timeout 1800 "$@" >"$logs/$name.log" 2>"$logs/$name.err"; then
    echo "error: the $name run failed; the end of its output:" >&2
    tail -n 30 "$logs/$name.log" "$logs/$name.err" >&2
    exit 1
  fi
  grep -E '^(result|op) ' "$logs/$name.log" >>"$logs/lines"
}

for device in "${devices[@]}"; do
  if [[ $device == cuda ]]; then
    # ddp's build may lack CUDA (op_count_bench exits 2): then no CUDA rows.
    status=0
    timeout 1800 "$bench" --devices cuda "${counting[@]}" >"$logs/ddp-cuda.log" 2>"$logs/ddp-cuda.err" || status=$?
    if [[ $status == 2 ]]; then
      echo "note: $(head -n 1 "$logs/ddp-cuda.err"); no CUDA rows" >&2
      continue
    elif [[ $status != 0 ]]; then
      echo "error: the ddp-cuda run failed; the end of its output:" >&2
      tail -n 30 "$logs/ddp-cuda.log" "$logs/ddp-cuda.err" >&2
      exit 1
    fi
    grep -E '^(result|op) ' "$logs/ddp-cuda.log" >>"$logs/lines"
  else
    run "ddp-$device" "$bench" --devices "$device" "${counting[@]}"
  fi
  run "pytorch-$device" "$python" "$root/benchmarks/pytorch_op_count.py" --devices "$device" "${counting[@]}"
done

echo "date: $(date -u +'%Y-%m-%d %H:%M UTC')"
echo "cpu: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)"
if [[ " ${devices[*]} " == *" cuda "* ]]; then
  echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
fi
echo "ddp's LibTorch: $(grep -o 'libtorch=[^ ]*' "$logs/lines" | head -n 1 | cut -d= -f2);" \
  "PyTorch: $(grep -o ' torch=[^ ]*' "$logs/lines" | head -n 1 | cut -d= -f2);" \
  "ddp: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
echo "ATen operator calls per step (every call, nested ones included; in brackets the top-level calls)"
awk '
  function get(line, key,   i, n, f, kv) {
    n = split(line, f, " ")
    for (i = 2; i <= n; i++) {
      kv = index(f[i], "=")
      if (substr(f[i], 1, kv - 1) == key) return substr(f[i], kv + 1)
    }
    return ""
  }
  function fmt(x) { return x == int(x) ? sprintf("%d", x) : sprintf("%.2f", x) }
  $1 == "result" {
    side = get($0, "side"); key = get($0, "model") "|" get($0, "device") "|" get($0, "mode")
    ops[side "|" key] = get($0, "ops_per_step"); top[side "|" key] = get($0, "top_level_per_step")
    if (!(key in seen)) { seen[key] = 1; order[++count] = key }
  }
  $1 == "op" {
    side = get($0, "side"); key = get($0, "model") "|" get($0, "device") "|" get($0, "mode")
    name = get($0, "name")
    calls[side "|" key "|" name] = get($0, "per_step")
    if (!((key "|" name) in named)) { named[key "|" name] = 1; names[key] = names[key] " " name }
  }
  END {
    printf "%-9s %-6s %-58s %16s %16s %15s %16s %16s %15s %7s\n", "model", "device", "mode", "ddp bare", "ddp DDP", "ddp added", "PyTorch bare", "PyTorch DDP", "PyTorch added", "fewer"
    for (i = 1; i <= count; i++) {
      split(order[i], k, "|")
      if (k[3] == "bare") continue
      bare = k[1] "|" k[2] "|bare"
      d = "ddp|" order[i]; p = "pytorch|" order[i]; db = "ddp|" bare; pb = "pytorch|" bare
      dadd = ops[d] - ops[db]; dtop = top[d] - top[db]
      if (ops[p] == "na" || ops[p] == "") {
        padd = "n/a"; ptxt = "n/a"; fewer = "-"
      } else {
        padd = ops[p] - ops[pb]; ptxt = fmt(padd) " (" fmt(top[p] - top[pb]) ")"
        fewer = dadd < padd ? "yes" : "no"
      }
      printf "%-9s %-6s %-58s %16s %16s %15s %16s %16s %15s %7s\n", k[1], k[2], k[3], \
        ops[db] " (" top[db] ")", ops[d] " (" top[d] ")", fmt(dadd) " (" fmt(dtop) ")", \
        ops[pb] " (" top[pb] ")", (ops[p] == "na" ? "n/a" : ops[p] " (" top[p] ")"), ptxt, fewer
    }
    print "(added: the DDP step less the bare step of the same side; fewer: ddp adds fewer calls than PyTorch)"
    for (i = 1; i <= count; i++) {
      split(order[i], k, "|")
      if (k[3] == "bare") continue
      bare = k[1] "|" k[2] "|bare"
      printf "\noperators whose calls per step DDP changes: %s on %s, mode %s\n", k[1], k[2], k[3]
      printf "  %-46s %10s %14s\n", "operator", "ddp added", "PyTorch added"
      split(names[order[i]] " " names[bare], list, " ")
      delete done
      rows = 0
      for (j in list) {
        name = list[j]
        if (name == "" || name in done) continue
        done[name] = 1
        dv = calls["ddp|" order[i] "|" name] - calls["ddp|" bare "|" name]
        pv = calls["pytorch|" order[i] "|" name] - calls["pytorch|" bare "|" name]
        if (ops["pytorch|" order[i]] == "na") pv = "n/a"
        if (dv == 0 && (pv == 0 || pv == "n/a")) continue
        row[++rows] = sprintf("  %-46s %10s %14s", name, fmt(dv), pv == "n/a" ? pv : fmt(pv))
        weight[rows] = dv < 0 ? -dv : dv
        pweight[rows] = pv == "n/a" ? 0 : (pv < 0 ? -pv : pv)
      }
      # ddp-s largest changes first, then PyTorch-s
      for (a = 1; a <= rows; a++) for (b = a + 1; b <= rows; b++)
        if (weight[b] > weight[a] || (weight[b] == weight[a] && pweight[b] > pweight[a])) {
          t = row[a]; row[a] = row[b]; row[b] = t
          t = weight[a]; weight[a] = weight[b]; weight[b] = t
          t = pweight[a]; pweight[a] = pweight[b]; pweight[b] = t
        }
      for (a = 1; a <= rows; a++) print row[a]
      if (rows == 0) print "  (none)"
    }
  }' "$logs/lines"
