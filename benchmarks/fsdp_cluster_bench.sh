#!/usr/bin/env bash
# FSDP across machines, on the simulated cluster (benchmarks/cluster/cluster.sh):
# 2 nodes x 2 ranks joined by a link of a set bandwidth and one-way latency.
# Per link speed and round, one ddprun job per node and per way, each way
# in turn:
#   ddp          DistributedDataParallel (the hierarchical backend: shared
#                memory in the node, Gloo between the nodes' leaders);
#   fsdp         FullyShardedDataParallel sharded across the 4 ranks (the
#                same backend);
#   fsdp-hybrid  sharded within each node, replicated across them
#                (device_mesh = DeviceMesh::by_node);
#   fsdp-hpz     sharded across the 4 ranks, resharded to the node after
#                forward (reshard_after_forward_mesh = DeviceMesh::by_node);
# on fsdp_bench's MLP (MLP_WIDTH x MLP_LAYERS Linear layers) and on the
# transformer of examples/common/gpt.hpp (TF_WIDTH, TF_LAYERS blocks; built
# under ShardedConstruction, hybrid's over the node's group). Each run reports the
# median step time and the bytes node 0 sent over its link per step (its
# interface's counter). Then benchmarks/fsdp_cluster_model.py prints the
# table with the cost model's prediction beside each measured figure.
#
# Usage: sudo benchmarks/fsdp_cluster_bench.sh
# Environment: RATES ("1gbit 10gbit", tc's units; the model predicts each
# rate's step from the fastest one's), DELAY_MS (one-way, 0.2), ROUNDS (1),
# STEPS (3 timed steps per run), MODELS ("mlp transformer"), WAYS ("ddp fsdp
# fsdp-hybrid fsdp-hpz"), MLP_WIDTH (3200), MLP_LAYERS (5), TF_WIDTH
# (1024), TF_LAYERS (6), OUT (benchmarks/data/fsdp-cluster), DDP_BUILD_DIR
# (build). Prints "skipped: <reason>" and exits 0 where namespaces cannot be
# made; exits non-zero when a run fails.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}
rates=${RATES:-1gbit 10gbit}
delay_ms=${DELAY_MS:-0.2}
rounds=${ROUNDS:-1}
steps=${STEPS:-3}
models=${MODELS:-mlp transformer}
ways=${WAYS:-ddp fsdp fsdp-hybrid fsdp-hpz}
out=${OUT:-$root/benchmarks/data/fsdp-cluster}
# shellcheck source=benchmarks/cluster/cluster.sh
source "$root/benchmarks/cluster/cluster.sh"
# shellcheck source=benchmarks/common.sh
source "$root/benchmarks/common.sh"
cluster_begin
build_benchmarks fsdp_bench fsdp_transformer_bench ddprun link_router
export CLUSTER_ROUTER=$build/bin/link_router
export OMP_NUM_THREADS=1
logs=$(mktemp -d)
mkdir -p "$out"
runs_csv=$out/runs.csv
echo "model,way,link,rate_gbit,delay_ms,nodes,ranks_per_node,parameters,step_ms,tx_bytes_per_step,last_unit_bytes" >"$runs_csv"
rm -f "$out/links.txt"
port=29700

# run MODEL WAY: one job of 2 nodes x 2 ranks; appends its row to runs.csv.
run() {
  local model=$1 way=$2 name result i step_ms last_unit
  local CLUSTER_PIN=0 # 2 ranks per node on 2 cores: Note [Pinned when a node has one rank]
  name="$model-$way-$CLUSTER_RATE-$round"
  port=$((port + 1))
  local program=("$build/bin/fsdp_bench" --way "$way" --steps "$steps"
    --width "${MLP_WIDTH:-3200}" --layers "${MLP_LAYERS:-5}" --batch 8)
  if [[ $model == transformer ]]; then
    program=("$build/bin/fsdp_transformer_bench" --way "$way" --steps "$steps"
      --width "${TF_WIDTH:-1024}" --layers "${TF_LAYERS:-6}" --heads 16 --batch 1 --length 32)
  fi
  echo "running $name ..." >&2
  # glibc's malloc: fsdp_transformer_bench pins its mmap threshold.
  if ! cluster_run "$logs" "$name" 2 "$build/bin/ddprun" --nnodes 2 --node-rank @NODE@ \
    --allocator glibc --nproc-per-node 2 --master-addr 10.77.0.1 --master-port "$port" \
    "${program[@]}" --backend auto --net-interface ddp0; then
    echo "error: the $name run failed; the end of each node's output:" >&2
    for i in 0 1; do
      echo "--- node $i" >&2
      tail -n 15 "$logs/$name.node$i.log" >&2
    done
    exit 1
  fi
  result=$(grep -o 'way=.*' "$logs/$name.node0.log" | tail -n 1)
  echo "  $result" >&2
  step_ms=$(field " $result" step_ms)
  [[ -z $step_ms ]] && step_ms=$(awk -v s="$(field " $result" step_s)" 'BEGIN { print s * 1000 }')
  # The unit the forward runs last, which the backward finds gathered: a
  # Linear of the MLP, a block of the transformer (GptConfig's 12 w^2 + 13 w).
  local w=${MLP_WIDTH:-3200}
  last_unit=$((4 * w * (w + 1)))
  if [[ $model == transformer ]]; then
    w=${TF_WIDTH:-1024}
    last_unit=$((4 * (12 * w * w + 13 * w)))
  fi
  echo "$model,$way,$CLUSTER_RATE-${CLUSTER_DELAY_MS}ms,${CLUSTER_RATE%gbit},$CLUSTER_DELAY_MS,2,2,$(field " $result" parameters),$step_ms,$(field " $result" tx_bytes_per_step),$last_unit" >>"$runs_csv"
}

for rate in $rates; do
  cluster_up 2 "$rate" "$delay_ms"
  echo "$rate-${delay_ms}ms: $(cluster_link_check 2)" >>"$out/links.txt"
  for round in $(seq "$rounds"); do
    for model in $models; do
      for way in $ways; do run "$model" "$way"; done
    done
  done
  cluster_down
done

echo "machine: $(nproc --all) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1); ddp $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'); one-way delay $delay_ms ms; medians of $steps steps, $rounds round(s)"
python3 "$root/benchmarks/fsdp_cluster_model.py" "$out"
rm -rf "$logs"
