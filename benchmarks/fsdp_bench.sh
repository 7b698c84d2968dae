#!/usr/bin/env bash
# DistributedDataParallel, ZeRO-1, ZeRO-2 and FullyShardedDataParallel side by
# side, AdamW in fp32 on a ~51 M-parameter MLP (5 Linear layers of 3200, each
# one FSDP unit), one way per ddprun job so that each peak RSS is its own:
#   1. memory with 1, 2 and 4 ranks over Gloo: the bytes each rank holds in
#      parameters, gradients and optimizer state (distinct storages, after
#      the step), against the formula (16 Psi for DDP, 8 Psi + 8 Psi/N for
#      ZeRO-1, 4 Psi + 12 Psi/N for ZeRO-2, 16 Psi/N for FSDP); FSDP's peak of
#      full parameters and gradients against the two largest units'
#      parameters and the largest one's gradient;
#      the peak RSS;
#   2. step time with 2 ranks on shm and on Gloo: DDP, ZeRO-2, FSDP with
#      prefetch and without, and with overlap_reduction, in ROUNDS
#      alternating rounds (the median; each job's step split into forward,
#      backward and optimizer);
#   3. (PARTS=timeline) the timeline of one FSDP step, 2 ranks on shm with
#      prefetch on and off (DDP_TIMELINE; rank 0's fsdp.gather and
#      fsdp.reduce events of the last step, from issue to wait()'s return);
#   4. (PARTS=pytorch) ddp's FSDP beside PyTorch's fully_shard (FSDP2) on the
#      same model at world size 1: step time and, on a GPU, the CUDA caching
#      allocator's peak.
# With DEVICE=cuda (a GPU machine; every rank on cuda:0) the memory part adds
# the caching allocator's peak of allocated bytes over the timed steps per
# rank (1 rank over NCCL; more ranks share the one GPU over Gloo, which moves
# CUDA tensors through the host), and the speed part runs 1 rank over NCCL.
#
# Usage: benchmarks/fsdp_bench.sh
# Environment: PARTS ("memory speed"; add "pytorch"), RANKS ("1 2 4"), ROUNDS (3), STEPS
# (3; the median of these, after one untimed), WIDTH (3200), LAYERS (5),
# DEVICE (cpu), PYTHON (Debian's /usr/bin/python3), DDP_BUILD_DIR (build),
# DDP_SKIP_BUILD (set: use the build as it is), JOBS (2).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}
# shellcheck source=benchmarks/common.sh
source "$root/benchmarks/common.sh"
[[ -n ${DDP_SKIP_BUILD:-} ]] || build_benchmarks fsdp_bench ddprun
python=${PYTHON:-$python}
device=${DEVICE:-cpu}

width=${WIDTH:-3200}
layers=${LAYERS:-5}
cores=$(nproc)
export OMP_NUM_THREADS=1
echo "cores: $cores; cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"

run() {  # run RANKS WAY BACKEND: the result line of rank 0
  "$build/bin/ddprun" --standalone --nproc-per-node "$1" "$build/bin/fsdp_bench" --way "$2" \
    --backend "$3" --device "$device" --steps "${STEPS:-3}" --width "$width" --layers "$layers" |
    sed -n 's/^\[0\] //p'
}
# On a GPU one rank runs over NCCL; ranks sharing the GPU over Gloo.
backend_for() { [[ $device == cuda && $1 -eq 1 ]] && echo nccl || echo gloo; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

parts=${PARTS:-memory speed}
if [[ $parts == *memory* ]]; then
echo
echo "memory: parameters, gradients and AdamW state per rank (MiB), on $device" \
  "$([[ $device == cuda ]] && echo "(1 rank: NCCL; more: Gloo, the ranks sharing one GPU)" || echo "over Gloo")"
printf '%-5s %-8s %12s %12s %8s %14s %12s %12s %12s\n' ranks way held formula ratio peak_gathered bound \
  peak_rss cuda_peak
unit=$((width * width + width))
bound=$((3 * 4 * unit))  # two units' full parameters and one's gradient, fp32
for ranks in ${RANKS:-1 2 4}; do
  for way in ddp zero1 zero2 fsdp; do
    line=$(run "$ranks" "$way" "$(backend_for "$ranks")")
    psi=$(field "$line" parameters)
    case $way in
      ddp) formula=$((16 * psi)) ;;
      zero1) formula=$((8 * psi + 8 * psi / ranks)) ;;
      zero2) formula=$((4 * psi + 12 * psi / ranks)) ;;
      fsdp) formula=$((16 * psi / ranks)) ;;
    esac
    held=$(field "$line" held_bytes)
    gathered=$(field "$line" peak_gathered_bytes)
    cuda_peak=$(field "$line" cuda_peak_bytes)
    printf '%-5s %-8s %12s %12s %8s %14s %12s %12s %12s\n' "$ranks" "$way" "$(mib "$held")" \
      "$(mib "$formula")" "$(awk -v h="$held" -v f="$formula" 'BEGIN { printf "%.3f", h / f }')" \
      "$([[ $way == fsdp ]] && mib "$gathered" || echo -)" "$([[ $way == fsdp ]] && mib "$bound" || echo -)" \
      "$(mib "$(field "$line" peak_rss_bytes)")" \
      "$([[ ${cuda_peak:--1} -ge 0 ]] && mib "$cuda_peak" || echo -)"
  done
done

fi

if [[ $parts == *speed* ]]; then
echo
speed_ranks=2 speed_backends="shm gloo"
[[ $device == cuda ]] && speed_ranks=1 speed_backends=nccl
rounds=${ROUNDS:-3}
echo "step time, $speed_ranks rank(s) on $device (ms; the median over $rounds alternating rounds" \
  "of each job's median step, and of its parts)"
speed_ways=(ddp zero2 fsdp fsdp-no-prefetch fsdp-overlap)
declare -A speed  # "backend way key" -> one value per round
for _ in $(seq "$rounds"); do
  for backend in $speed_backends; do
    for way in "${speed_ways[@]}"; do
      line=$(run "$speed_ranks" "$way" "$backend")
      for key in step_ms forward_ms backward_ms optimizer_ms; do
        speed["$backend $way $key"]+="$(field "$line" "$key") "
      done
    done
  done
done
printf '%-8s %-18s %10s %10s %10s %10s %8s\n' backend way step_ms forward backward optimizer "/ddp"
for backend in $speed_backends; do
  ddp_step=$(median <<<"${speed["$backend ddp step_ms"]}")
  for way in "${speed_ways[@]}"; do
    step=$(median <<<"${speed["$backend $way step_ms"]}")
    printf '%-8s %-18s %10.1f %10.1f %10.1f %10.1f %8.3f\n' "$backend" "$way" "$step" \
      "$(median <<<"${speed["$backend $way forward_ms"]}")" \
      "$(median <<<"${speed["$backend $way backward_ms"]}")" \
      "$(median <<<"${speed["$backend $way optimizer_ms"]}")" \
      "$(awk -v a="$step" -v b="$ddp_step" 'BEGIN { print a / b }')"
  done
done
fi

if [[ $parts == *timeline* ]]; then
trace_dir=$(mktemp -d)
for way in fsdp fsdp-no-prefetch; do
  echo
  echo "timeline of one step, $way, 2 ranks on shm, rank 0 (ms from the step's first gather;" \
    "lane: collectives in flight at once get different lanes)"
  DDP_TIMELINE="$trace_dir/$way-%r.json" run 2 "$way" shm >/dev/null
  python3 - "$trace_dir/$way-0.json" <<'PY'
import json, sys
events = [e for e in json.load(open(sys.argv[1])) if e.get("name", "").startswith("fsdp.")]
# The last step: after the step before's reduction of unit 0, its last.
ends = sorted(e["ts"] for e in events if e["name"] == "fsdp.reduce 0")
step = sorted((e for e in events if e["ts"] > ends[-2]), key=lambda e: e["ts"])
first = step[0]["ts"]
print(f"{'collective':<16} {'lane':>4} {'start':>9} {'end':>9} {'ms':>8}")
for e in step:
    start, dur = (e["ts"] - first) / 1000, e["dur"] / 1000
    print(f"{e['name']:<16} {e['tid']:>4} {start:9.1f} {start + dur:9.1f} {dur:8.1f}")
PY
done
rm -rf "$trace_dir"
fi

if [[ $parts == *pytorch* ]]; then
echo
echo "ddp's FSDP and PyTorch's fully_shard (FSDP2), world size 1 on $device, the same model" \
  "(each Linear a unit), AdamW fp32; median ms per step, peak allocated MiB"
printf '%-22s %10s %12s\n' way step_ms cuda_peak
line=$(run 1 fsdp "$(backend_for 1)")
printf '%-22s %10s %12s\n' "ddp fsdp" "$(field "$line" step_ms)" \
  "$(mib "$(field "$line" cuda_peak_bytes)")"
line=$(DEVICE=$device WIDTH=$width LAYERS=$layers STEPS=${STEPS:-3} \
  "$python" -m torch.distributed.run --standalone --nproc-per-node 1 \
  "$root/benchmarks/pytorch_fsdp_bench.py" 2>&1 | grep -E '^way=' || true)
if [[ $line == *error=* ]]; then
  echo "pytorch fully_shard: ${line#*error=}"
else
  printf '%-22s %10s %12s\n' "pytorch fully_shard" "$(field " $line" step_ms)" \
    "$(mib "$(field " $line" cuda_peak_bytes)")"
fi
fi
