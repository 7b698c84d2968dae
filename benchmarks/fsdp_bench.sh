#!/usr/bin/env bash
# DistributedDataParallel, ZeRO-1, ZeRO-2 and FullyShardedDataParallel side by
# side, AdamW in fp32 on a ~51 M-parameter MLP (5 Linear layers of 3200, each
# one FSDP unit), one way per ddprun job so that each peak RSS is its own:
#   1. memory with 1, 2 and 4 ranks over Gloo: the bytes each rank holds in
#      parameters, gradients and optimizer state (distinct storages, after
#      the step), against the formula (16 Psi for DDP, 8 Psi + 8 Psi/N for
#      ZeRO-1, 4 Psi + 12 Psi/N for ZeRO-2, 16 Psi/N for FSDP); FSDP's peak of
#      full parameters and gradients against the two largest units' worth;
#      the peak RSS;
#   2. step time with 2 ranks on shm and on Gloo: DDP, ZeRO-2, FSDP with
#      prefetch and without.
#
# Usage: benchmarks/fsdp_bench.sh
# Environment: PARTS ("memory speed"), RANKS ("1 2 4"), STEPS (3; the
# median of these, after one untimed), WIDTH (3200), LAYERS (5),
# DDP_BUILD_DIR (build), JOBS (2).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}
# shellcheck source=benchmarks/common.sh
source "$root/benchmarks/common.sh"
build_benchmarks fsdp_bench ddprun

width=${WIDTH:-3200}
layers=${LAYERS:-5}
cores=$(nproc)
export OMP_NUM_THREADS=1
echo "cores: $cores; cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"

run() {  # run RANKS WAY BACKEND: the result line of rank 0
  "$build/bin/ddprun" --standalone --nproc-per-node "$1" "$build/bin/fsdp_bench" --way "$2" \
    --backend "$3" --steps "${STEPS:-3}" --width "$width" --layers "$layers" | sed -n 's/^\[0\] //p'
}
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

parts=${PARTS:-memory speed}
if [[ $parts == *memory* ]]; then
echo
echo "memory: parameters, gradients and AdamW state per rank (MiB), Gloo"
printf '%-5s %-8s %12s %12s %8s %14s %12s %12s\n' ranks way held formula ratio peak_gathered bound peak_rss
unit=$((width * width + width))
bound=$((2 * 2 * 4 * unit))  # two largest units, full parameters and gradients, fp32
for ranks in ${RANKS:-1 2 4}; do
  for way in ddp zero1 zero2 fsdp; do
    line=$(run "$ranks" "$way" gloo)
    psi=$(field "$line" parameters)
    case $way in
      ddp) formula=$((16 * psi)) ;;
      zero1) formula=$((8 * psi + 8 * psi / ranks)) ;;
      zero2) formula=$((4 * psi + 12 * psi / ranks)) ;;
      fsdp) formula=$((16 * psi / ranks)) ;;
    esac
    held=$(field "$line" held_bytes)
    gathered=$(field "$line" peak_gathered_bytes)
    printf '%-5s %-8s %12s %12s %8s %14s %12s %12s\n' "$ranks" "$way" "$(mib "$held")" \
      "$(mib "$formula")" "$(awk -v h="$held" -v f="$formula" 'BEGIN { printf "%.3f", h / f }')" \
      "$([[ $way == fsdp ]] && mib "$gathered" || echo -)" "$([[ $way == fsdp ]] && mib "$bound" || echo -)" \
      "$(mib "$(field "$line" peak_rss_bytes)")"
  done
done

fi

if [[ $parts == *speed* ]]; then
echo
echo "step time, 2 ranks (median ms)"
printf '%-8s %-18s %10s\n' backend way step_ms
for backend in shm gloo; do
  for way in ddp zero2 fsdp fsdp-no-prefetch; do
    line=$(run 2 "$way" "$backend")
    printf '%-8s %-18s %10s\n' "$backend" "$way" "$(field "$line" step_ms)"
  done
done
fi
