#!/usr/bin/env bash
# All-reduce through Gloo and through ddp's shared-memory backend, in the same
# run, 4 KiB to 256 MiB of float32, with 2 and then 4 ranks on this machine.
# Prints a table per rank count; the last line reads
#   shm/gloo busbw@64MiB=X latency@256KiB=Y slower-than-larger=Z
# (with 2 ranks: shm's bus bandwidth over Gloo's at 64 MiB, Gloo's latency
# over shm's at 256 KiB, and the first size shm took longer at than at the
# next larger one, or "none"). Exits non-zero when a run fails, not when
# a target is missed.
#
# Usage: benchmarks/allreduce_bench.sh
# Environment: RANKS ("2 4"), SECONDS_PER_SIZE (0.25), DDP_BUILD_DIR (build),
# JOBS (build parallelism, 2).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}
# shellcheck source=benchmarks/common.sh
source "$root/benchmarks/common.sh"
build_benchmarks allreduce_bench ddprun

cores=$(nproc)
export OMP_NUM_THREADS=1
echo "cores: $cores; cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
summary=""
for ranks in ${RANKS:-2 4}; do
  out=$("$build/bin/ddprun" --standalone --nproc-per-node "$ranks" "$build/bin/allreduce_bench" \
        --seconds-per-size "${SECONDS_PER_SIZE:-0.25}")
  # Rank 0's table, without ddprun's "[0] " prefixes.
  table=$(sed -n 's/^\[0\] //p' <<<"$out")
  [[ -n "$table" ]] || table=$out
  echo "$table"
  # The first size at which shm took longer than at the next larger size, or "none".
  slower=$(awk '$1 ~ /^[0-9]+$/ { if (seen && prev_us > $3 && first == "") first = prev
    prev = $1; prev_us = $3; seen = 1 } END { print (first == "" ? "none" : first) }' <<<"$table")
  echo "shm slower than at a larger size: $slower"
  if [[ $ranks == 2 ]]; then
    bw=$(awk '$1 == 67108864 { print $6 }' <<<"$table")
    lat=$(awk '$1 == 262144 { print $7 }' <<<"$table")
    summary="shm/gloo busbw@64MiB=$bw latency@256KiB=$lat slower-than-larger=$slower"
  fi
done
[[ -n "$summary" ]] && echo "$summary"
