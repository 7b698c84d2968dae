#!/usr/bin/env bash
# A transformer too large for any one rank, trained at 4 ranks (issue #58):
# the decoder-only transformer of examples/common/gpt.hpp, AdamW in fp32,
# one way per ddprun job so that each peak RSS is its own.
#   1. At small sizes (WIDTH_SMALL, LAYERS_SMALL) every way runs: DDP,
#      ZeRO-2, FSDP and FSDP with activation checkpointing (both built under
#      ddp::ShardedConstruction). What each rank holds beyond its training
#      state's formula (16 Psi for DDP, 4 Psi + 12 Psi/N for ZeRO-2,
#      16 Psi/N for FSDP) is that way's overhead: the process's fixed part,
#      activations, communication buffers. DDP and ZeRO-2 run at a second
#      width (WIDTH_FIT) too, and their overhead is taken as linear in Psi
#      through the two points (ZeRO-2's grows with the model); the estimate
#      is printed beside a measured run at WIDTH_CHECK.
#   2. At the large size (WIDTH, LAYERS), where 16 Psi exceeds a rank's share
#      of the machine and DDP's 4 x 16 Psi exceeds all of it, DDP and ZeRO-2
#      are not run: their need per rank is the formula at this size plus the
#      extrapolated overhead. FSDP with and without checkpointing run, their
#      peak RSS per rank against the bound, term by term (Note [The order
#      of a sharded step]): 16 Psi/N; the unit in backward, its full
#      gradient and the unit prefetched (3 units), the root's parameters and
#      gradient; the reduced shard of the unit in flight and, above two
#      ranks, the Gloo ring's scratch chunk (a shard each); the backward's
#      pool (Note [The backward's large blocks from a pool]: the gradient
#      LibTorch computes for a parameter before it is added into the unit's
#      and the blocks kept, twice the largest parameter, 4W x W); the fixed
#      part (the RSS after ddp::init() and the libraries' pages faulted in
#      after it); activations (every block's input, plus one block's
#      internals with checkpointing or every block's without: 4 bytes x
#      (18 BLW + 3 BHL^2) a block); 8 MiB for the rest (LibTorch's, Gloo's
#      and malloc's own, as FsdpShardedConstruction's kStepPeakAsAllocated
#      allows).
#
# Usage: benchmarks/fsdp_transformer_bench.sh
# Environment: RANKS (4), WIDTH (2048), LAYERS (9), HEADS (16), WIDTH_SMALL
# (512), WIDTH_FIT (768), WIDTH_CHECK (1024), LAYERS_SMALL (4), BATCH (1), LENGTH (32), STEPS (2; the median of
# these, after one untimed), ALLOCATOR (unset: glibc's malloc, its mmap
# threshold pinned for exact peaks; glibc, tcmalloc or auto: ddprun's
# --allocator, nothing pinned, the allocator as a user's job has it),
# DDP_BUILD_DIR (build), DDP_SKIP_BUILD (set: use the build as it is), JOBS (2).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}
# shellcheck source=benchmarks/common.sh
source "$root/benchmarks/common.sh"
[[ -n ${DDP_SKIP_BUILD:-} ]] || build_benchmarks fsdp_transformer_bench ddprun

ranks=${RANKS:-4}
width=${WIDTH:-2048}
layers=${LAYERS:-9}
heads=${HEADS:-16}
width_small=${WIDTH_SMALL:-512}
width_fit=${WIDTH_FIT:-768}
width_check=${WIDTH_CHECK:-1024}
layers_small=${LAYERS_SMALL:-4}
batch=${BATCH:-1}
length=${LENGTH:-32}
export OMP_NUM_THREADS=1
machine_bytes=$(($(awk '/^MemTotal:/ { print $2 }' /proc/meminfo) * 1024))
echo "cores: $(nproc --all); memory: $((machine_bytes >> 30)) GiB; cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"

run() {  # run WAY WIDTH LAYERS: the result line of rank 0
  # Unless ALLOCATOR is set: glibc's malloc, its mmap threshold pinned by the
  # benchmark for exact peaks.
  "$build/bin/ddprun" --standalone --nproc-per-node "$ranks" --allocator "${ALLOCATOR:-glibc}" \
    "$build/bin/fsdp_transformer_bench" --way "$1" --width "$2" --layers "$3" --heads "$heads" --batch "$batch" --length "$length" \
    --steps "${STEPS:-2}" --pin-mmap-threshold "$([[ -n ${ALLOCATOR:-} ]] && echo false || echo true)" |
    sed -n 's/^\[0\] //p'
}
gib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1073741824 }'; }
state() {  # state WAY PSI: the training state per rank, by the formula
  case $1 in
    ddp) echo $((16 * $2)) ;;
    zero2) echo $((4 * $2 + 12 * $2 / ranks)) ;;
    *) echo $((16 * $2 / ranks)) ;;
  esac
}
activations() {  # activations WAY WIDTH LAYERS: bytes per rank, estimated
  awk -v b="$batch" -v l="$length" -v w="$2" -v h="$heads" -v n="$3" -v c="$([[ $1 == *checkpoint ]] && echo 1 || echo 0)" \
    'BEGIN { block = 4 * (18 * b * l * w + 3 * b * h * l * l); inputs = 4 * n * b * l * w;
             printf "%.0f", inputs + (c ? block : n * block) }'
}
psi_of() { awk -v w="$1" -v n="$2" 'BEGIN { printf "%.0f", (256 + 128) * w + n * (12 * w * w + 13 * w) + 2 * w }'; }

echo
echo "1. small sizes: width $width_small and $width_fit, $layers_small blocks, $ranks ranks over Gloo (GiB per rank)"
printf '%-16s %6s %12s %10s %12s %12s %10s %8s\n' way width parameters state construction peak_rss overhead step_s
declare -A overhead slope small_psi
for way in ddp zero2 fsdp fsdp-checkpoint; do
  widths=$width_small
  [[ $way == ddp || $way == zero2 ]] && widths="$width_small $width_fit"
  for w in $widths; do
    line=$(run "$way" "$w" "$layers_small")
    psi=$(field "$line" parameters)
    formula=$(state "$way" "$psi")
    peak=$(field "$line" step_rss_bytes)
    if [[ $w == "$width_small" ]]; then
      overhead[$way]=$((peak - formula)) small_psi[$way]=$psi slope[$way]=0
    else  # the overhead's growth per parameter, from the two sizes
      slope[$way]=$(awk -v o1="${overhead[$way]}" -v o2="$((peak - formula))" -v p1="${small_psi[$way]}" \
        -v p2="$psi" 'BEGIN { printf "%.6f", (o2 - o1) / (p2 - p1) }')
    fi
    printf '%-16s %6s %12s %10s %12s %12s %10s %8s\n' "$way" "$w" "$psi" "$(gib "$formula")" \
      "$(gib "$(field "$line" construction_rss_bytes)")" "$(gib "$peak")" "$(gib $((peak - formula)))" \
      "$(field "$line" step_s)"
  done
done
need_of() {  # need_of WAY PSI: the formula plus the overhead, linear in Psi from the two small sizes
  awk -v f="$(state "$1" "$2")" -v o="${overhead[$1]}" -v s="${slope[$1]}" -v p="$2" -v p0="${small_psi[$1]}" \
    'BEGIN { printf "%.0f", f + o + s * (p - p0) }'
}
echo
echo "   the estimate checked at width $width_check, $layers_small blocks (measured beside predicted, GiB per rank)"
for way in ddp zero2; do
  line=$(run "$way" "$width_check" "$layers_small")
  psi=$(field "$line" parameters)
  printf '   %-13s predicted %s, measured %s\n' "$way" "$(gib "$(need_of "$way" "$psi")")" \
    "$(gib "$(field "$line" step_rss_bytes)")"
done

psi=$(psi_of "$width" "$layers")
unit=$((12 * width * width + 13 * width))
echo
echo "2. large size: width $width, $layers blocks, $psi parameters (16 Psi = $(gib $((16 * psi))) GiB;" \
  "this machine: $(gib "$machine_bytes") GiB, $(gib $((machine_bytes / ranks))) GiB a rank), $ranks ranks"
printf '%-16s %10s %12s %12s %12s %12s %10s %8s\n' way state need/rank need_total bound peak_rss construction step_s
for way in ddp zero2; do
  formula=$(state "$way" "$psi")
  need=$(need_of "$way" "$psi")
  # Never run where it does not fit: an overhead taken as constant once
  # estimated ZeRO-2 at 12.9 GiB in all, and the OOM killer ended a rank at
  # 6.2 GB (docs/benchmarks.md).
  printf '%-16s %10s %12s %12s %12s %12s %10s %8s\n' "$way" "$(gib "$formula")" "$(gib "$need")" \
    "$(gib $((need * ranks)))" - "not run" - -
done
for way in fsdp fsdp-checkpoint; do
  line=$(run "$way" "$width" "$layers")
  formula=$(state "$way" "$psi")
  fixed=$(($(field "$line" fixed_rss_bytes) + $(field "$line" code_rss_bytes)))
  shard=$((4 * ((unit + ranks - 1) / ranks)))  # a unit's reduced shard, padded
  scratch=$((ranks > 2 ? shard : 0))
  gathered=$((3 * shard * ranks + 8 * (psi - layers * unit)))
  pool=$((2 * 16 * width * width))
  bound=$((formula + gathered + shard + scratch + pool + fixed + $(activations "$way" "$width" "$layers") + 8388608))
  peak=$(field "$line" step_rss_bytes)
  printf '%-16s %10s %12s %12s %12s %12s %10s %8s\n' "$way" "$(gib "$formula")" - - "$(gib "$bound")" \
    "$(gib "$peak")$([[ $peak -le $bound ]] && echo "" || echo "!")" \
    "$(gib "$(field "$line" construction_rss_bytes)")" "$(field "$line" step_s)"
done
echo "(need: the formula plus the overhead, linear in Psi from the two small sizes; a peak marked ! is above its bound)"
