#!/usr/bin/env bash
# The toy trainer's missing 0.3 ms, probed (docs/design/cost-model.md,
# "Limits and doubts"). On 2 nodes joined by one link, per round: an
# all-reduce of 64 B and 4 KiB through ddp's Gloo engine with the caller
# idle between calls and after it spun 80, 300 and 1000 us
# (allreduce_bench --busy-us, Note [A busy caller]), then the toy trainer
# (84 bytes of gradients), whose synchronized backward includes waiting for
# its one all-reduce. Prints one line per measurement.
#
# Usage: sudo benchmarks/cluster/contention_probe.sh
# Environment: RATE (1gbit, tc's units), DELAY_MS (0.2), ROUNDS (2),
# DDP_BUILD_DIR (build), FASHION_MNIST (/usr/share/datasets/fashion-mnist).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}

# shellcheck source=benchmarks/cluster/cluster.sh
source "$root/benchmarks/cluster/cluster.sh"
cluster_trap
if ! reason=$(cluster_check 2>&1); then
  echo "skipped: $reason"
  exit 0
fi
cmake -S "$root" -B "$build" -DDDP_BUILD_BENCHMARKS=ON >/dev/null
cmake --build "$build" --target allreduce_bench ddp_train_bench ddprun link_router >&2
export CLUSTER_ROUTER=$build/bin/link_router OMP_NUM_THREADS=1
logs=$(mktemp -d)
cluster_up 2 "${RATE:-1gbit}" "${DELAY_MS:-0.2}"
port=29590

# on_both NAME CMD...: CMD under ddprun on both nodes; node 0's output in $logs/NAME.
on_both() {
  local name=$1 i pids=() failed=0
  shift
  port=$((port + 1))
  for i in 0 1; do
    cluster_exec "$i" timeout 300 "$build/bin/ddprun" --nnodes 2 --node-rank "$i" \
      --nproc-per-node 1 --master-addr 10.77.0.1 --master-port "$port" "$@" \
      >"$logs/$name.$i" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || failed=1; done
  cp "$logs/$name.0" "$logs/$name"
  if ((failed)); then
    echo "error: $name failed; the end of node 0's output:" >&2
    tail -n 20 "$logs/$name.0" >&2
    exit 1
  fi
}

echo "link: ${RATE:-1gbit}, ${DELAY_MS:-0.2} ms one way; all-reduce: median of 5 batches, us per call"
for round in $(seq "${ROUNDS:-2}"); do
  for busy in 0 80 300 1000; do
    on_both "ar-$round-$busy" "$build/bin/allreduce_bench" --engines gloo --min-bytes 64 \
      --max-bytes 4096 --seconds-per-size 1 --busy-us "$busy"
    sed -n 's/^\[0\] *\(64\|4096\) *\([0-9.]*\).*/\1 \2/p' "$logs/ar-$round-$busy" |
      while read -r bytes us; do
        echo "round=$round allreduce bytes=$bytes busy_us=$busy us=$us"
      done
  done
  on_both "toy-$round" "$build/bin/ddp_train_bench" --model linear --steps 1000 \
    --data-dir "${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}" --backend gloo
  line=$(grep -o 'step_ms=[^ ]* nosync_step_ms=[^ ]* nosync_backward_ms=[^ ]* backward_ms=[^ ]*' \
    "$logs/toy-$round")
  echo "round=$round toy $line"
done
cluster_down
rm -rf "$logs"
