#!/usr/bin/env bash
# ddp across machines, on a simulated cluster: nodes are network namespaces
# joined by links of a set bandwidth and one-way latency
# (benchmarks/cluster/cluster.sh). One command runs, per link speed:
#   1. all-reduce on 2 and 4 nodes (Gloo, one rank per node), and flat Gloo
#      against the hierarchical backend on 2 nodes x 2 ranks;
#   2. training, ddp against PyTorch's Python DDP (Debian's python3-torch,
#      Gloo), 2 nodes x 1 rank, same models, data, batches and seeds: the
#      toy (linear), the ConvNet and a 40 MB perceptron (mlp); and ddp's
#      hierarchical backend against flat Gloo on 2 nodes x 2 ranks;
#   3. on the slowest link, the mlp with the fp16, bf16 and PowerSGD comm
#      hooks on both sides (and, for the cost model, float16 all-reduce, and
#      the mlp with each hook on one node of 2 ranks, on both sides);
# and, on one node, all-reduce through shm and Gloo (the cost model's
# intra-node figures). Per training run: images/s, step time, no_sync step
# time (compute alone), the exposed communication (their difference) and
# the bytes node 0 sent per step (its interface's counter). Then it runs
# benchmarks/cost_model.py on what it measured.
#
# A job with one rank per node runs each node on a CPU of its own; the 2 x 2
# jobs float (Note [Pinned when a node has one rank]).
#
# The measurements go to $OUT (benchmarks/data/cluster): allreduce.csv,
# idle.csv (the smallest all-reduce after idle gaps of 0 to 3000 us, on 2
# nodes) and steps.csv, one row per run, and links.txt, the links as measured; the
# tables (benchmarks/cluster/report.py) show medians over ROUNDS runs, and
# benchmarks/cost_model.py reads the same files. Every namespace, interface and
# process is removed at the end, on failure and on Ctrl-C. Where namespaces
# cannot be made, it prints "skipped: <reason>" and exits 0. Exits non-zero
# when a ddp run fails, not when ddp is slower; a PyTorch run that fails is
# recorded in failures.txt and left out of the tables.
#
# Usage: sudo benchmarks/cluster_bench.sh
# Environment: RATES ("1gbit 10gbit", tc's units), HOOKS_ON (the rate the
# hooks run on; the first of RATES), DELAY_MS (one-way, 0.2),
# ROUNDS (3), STEP_SCALE (1: 1000 linear, 50 convnet, 10 mlp steps), OUT (benchmarks/data/cluster), DDP_BUILD_DIR (build), JOBS (2),
# FASHION_MNIST (/usr/share/datasets/fashion-mnist).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}
rates=${RATES:-1gbit 10gbit}
delay_ms=${DELAY_MS:-0.2}
rounds=${ROUNDS:-3}
out=${OUT:-$root/benchmarks/data/cluster}
data_dir=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
# shellcheck source=benchmarks/cluster/cluster.sh
source "$root/benchmarks/cluster/cluster.sh"
# shellcheck source=benchmarks/common.sh
source "$root/benchmarks/common.sh"
cluster_begin
require_torch
require_fashion_mnist "$data_dir"
build_benchmarks ddp_train_bench allreduce_bench ddprun link_router
export CLUSTER_ROUTER=$build/bin/link_router
cores=$(nproc)
export OMP_NUM_THREADS=1
logs=$(mktemp -d)
mkdir -p "$out"
allreduce_csv=$out/allreduce.csv
steps_csv=$out/steps.csv
echo "link,rate_gbit,delay_ms,nodes,ranks_per_node,backend,dtype,bytes,seconds" >"$allreduce_csv"
idle_csv=$out/idle.csv
echo "link,nodes,ranks_per_node,backend,bytes,idle_us,seconds" >"$idle_csv"
# The idle gaps before an all-reduce (us) that the 2-node runs time
# (Note [An all-reduce after idle time] in benchmarks/cost_model.py).
idle_gaps=0,10,30,100,300,1000,3000
rm -f "$out/links.txt" "$out/failures.txt"
echo "side,model,link,rate_gbit,delay_ms,nodes,ranks_per_node,backend,hook,param_bytes,buckets,step_ms,nosync_step_ms,images_per_s,tx_bytes_per_step,nosync_backward_ms" >"$steps_csv"

port=29600
job=0
# run_job NAME NODES CMD...: cluster_run with the next port; node 0's output
# is left in $logs/NAME.log. Exits the script with the nodes' errors when
# one fails.
run_job() {
  local name=$1 nodes=$2 i failed=0
  shift 2
  job=$((job + 1))
  port=$((port + 1))
  echo "running $name ..." >&2
  cluster_run "$logs" "$name" "$nodes" "$@" || failed=1
  cp "$logs/$name.node0.log" "$logs/$name.log"
  if ((failed)) && [[ $name == pytorch-* ]]; then
    # PyTorch's failure is a result (its PowerSGD hook on Gloo can abort:
    # benchmarks/cluster/report.py lists these): recorded, not fatal.
    echo "  $name failed: $(grep -h -o -m 1 -E "what\(\): .*|[A-Za-z]*Error: .*" \
      "$logs/$name".node*.log | head -n 1)" | tee -a "$out/failures.txt" >&2
    return 1
  fi
  if ((failed)); then
    echo "error: the $name run failed (all output kept in $logs); the end of each node's output:" >&2
    for ((i = 0; i < nodes; i++)); do
      echo "--- node $i" >&2
      grep -v ChildFailedError "$logs/$name.node$i.log" | tail -n 15 >&2
    done
    exit 1
  fi
}

# Note [Pinned when a node has one rank]
# A job with one rank per node runs each node on its own CPU (Note [A node
# owns its CPUs] in benchmarks/cluster/cluster.sh). A job with 2 ranks per
# node on 2 nodes cannot give each rank a core on this 2-core machine; pinned,
# each node's 2 ranks would share one core and every intra-node exchange of
# the hierarchical backend would become a context switch, which no real node
# makes. So those jobs float over all cores (CLUSTER_PIN=0), as the one-node
# shm all-reduces that the cost model composes them from do (--no-pin).
# allreduce_bench itself never pins here: the nodes' CPUs are cluster.sh's.

# ddp_job NAME NODES NPROC ARGS...: ddp_train_bench or allreduce_bench
# (the first of ARGS) under one ddprun per node.
ddp_job() {
  local name=$1 nodes=$2 nproc=$3
  local CLUSTER_PIN=$((nproc == 1)) # read by cluster_exec: Note [Pinned when a node has one rank]
  shift 3
  run_job "$name" "$nodes" "$build/bin/ddprun" --nnodes "$nodes" --node-rank @NODE@ \
    --nproc-per-node "$nproc" --master-addr 10.77.0.1 --master-port "$port" "$@"
}

# pytorch_job NAME NODES NPROC ARGS...: pytorch_ddp_bench.py under one
# torchrun per node (`--redirects 2 --tee 2`: Debian's torchrun 1.13 under
# Python 3.11 cannot parse its own default `--redirects 0`).
pytorch_job() {
  local name=$1 nodes=$2 nproc=$3
  local CLUSTER_PIN=$((nproc == 1)) # Note [Pinned when a node has one rank]
  shift 3
  run_job "$name" "$nodes" "$python" -m torch.distributed.run --nnodes "$nodes" \
    --node_rank @NODE@ --nproc_per_node "$nproc" --master_addr 10.77.0.1 \
    --master_port "$port" --redirects 2 --tee 2 --log_dir "$logs/torchrun-$job-@NODE@" \
    "$root/benchmarks/pytorch_ddp_bench.py" "$@"
}

gbit() { echo "${1%gbit}"; }

# allreduce_rows LOG LINK NODES NPROC [DTYPE]: appends allreduce_bench's
# table in LOG to allreduce.csv, and its idle lines to idle.csv (backend auto
# is the hierarchical backend across nodes).
allreduce_rows() {
  local log=$1 link=$2 nodes=$3 nproc=$4 dtype=${5:-float32} rate="" delay=""
  if [[ $link != shm ]]; then
    rate=$(gbit "$CLUSTER_RATE")
    delay=$CLUSTER_DELAY_MS
  fi
  sed -n 's/^\[0\] //p' "$log" | awk -v link="$link" -v rate="$rate" -v delay="$delay" \
    -v nodes="$nodes" -v nproc="$nproc" -v dtype="$dtype" '
    $1 == "bytes" { n = 0; for (i = 2; i <= NF; ++i) if ($(i + 1) == "us") { e[++n] = $i; ++i } next }
    $1 ~ /^[0-9]+$/ { for (i = 1; i <= n; ++i) {
        backend = e[i] == "auto" ? (nodes > 1 ? "hierarchical" : "shm") : e[i]
        printf "%s,%s,%s,%d,%d,%s,%s,%s,%.9f\n", link, rate, delay, nodes, nproc, backend, dtype, $1, $(1 + i) / 1e6 } }' \
    >>"$allreduce_csv"
  # "idle backend=E bytes=B idle_us=G us=T" lines (allreduce_bench --idle-us).
  sed -n 's/^\[0\] idle //p' "$log" | awk -v link="$link" -v nodes="$nodes" -v nproc="$nproc" '{
      for (i = 1; i <= NF; ++i) { split($i, kv, "="); v[kv[1]] = kv[2] }
      backend = v["backend"] == "auto" ? (nodes > 1 ? "hierarchical" : "shm") : v["backend"]
      printf "%s,%d,%d,%s,%s,%s,%.9f\n", link, nodes, nproc, backend, v["bytes"], v["idle_us"], v["us"] / 1e6 }' \
    >>"$idle_csv"
}

# train SIDE NAME NODES NPROC MODEL BACKEND HOOK STEPS: one training run; its
# result goes to steps.csv (benchmarks/cluster/report.py makes the tables).
train() {
  local side=$1 name=$2 nodes=$3 nproc=$4 model=$5 backend=$6 hook=$7 steps=$8 result link
  local tag="$side-${name//\//_}-$((job + 1))"
  local common=(--model "$model" --hook "$hook" --steps "$steps" --data-dir "$data_dir"
    --net-interface ddp0)
  if [[ $side == ddp ]]; then
    ddp_job "$tag" "$nodes" "$nproc" "$build/bin/ddp_train_bench" "${common[@]}" \
      --backend "$backend"
  else
    pytorch_job "$tag" "$nodes" "$nproc" "${common[@]}" || return 0
  fi
  result=$(grep -o 'result side=.*' "$logs/$tag.log" | tail -n 1 || true)
  if [[ -z $result ]] && grep -q 'unavailable side=' "$logs/$tag.log"; then
    # A hook this PyTorch cannot run here: no row, the tables show n/a.
    echo "  $side $name unavailable: $(grep -o 'reason=.*' "$logs/$tag.log" | head -n 1)" >&2
    return 0
  fi
  if [[ -z $result ]]; then
    echo "error: the $side $name run printed no result line; its output:" >&2
    tail -n 30 "$logs/$tag.log" >&2
    exit 1
  fi
  echo "  $result" >&2
  link="$CLUSTER_RATE-${CLUSTER_DELAY_MS}ms"
  if [[ $backend == auto ]]; then
    backend=hierarchical
    ((nodes == 1)) && backend=shm
  fi
  echo "$side,$model,$link,$(gbit "$CLUSTER_RATE"),$CLUSTER_DELAY_MS,$nodes,$nproc,$backend,$hook,$(field "$result" param_bytes),$(field "$result" buckets),$(field "$result" step_ms),$(field "$result" nosync_step_ms),$(field "$result" images_per_s),$(field "$result" tx_bytes_per_step),$(field "$result" nosync_backward_ms)" >>"$steps_csv"
}

# Timed steps per run (and as many under no_sync); STEP_SCALE shortens them.
steps_of() {
  local steps
  case $1 in linear) steps=1000 ;; convnet) steps=50 ;; mlp) steps=10 ;; esac
  awk -v s="$steps" -v f="${STEP_SCALE:-1}" 'BEGIN { v = int(s * f); print v < 2 ? 2 : v }'
}

# Note [All-reduce in every round]
# On this kind of machine (a VM on 2 vCPUs) a small all-reduce's latency
# moves by 30% from one minute to the next: a Gloo call switches threads
# about 14 times (perf stat), and what that costs depends on what else the
# host runs meanwhile. Measured once per link, the cost model's latency term
# carried that one sample's luck into every prediction (the toy trainer, all
# latency, was off by 18-25% against an all-reduce measured 1.21 ms that
# later runs put at 1.30-1.43). So every round measures its all-reduces
# next to its training runs, and the model fits the median over rounds.

# --- One node: shm and Gloo all-reduce (no namespaces needed).
for round in $(seq "$rounds"); do
  for nproc in 2 4; do
    echo "running shm all-reduce, $nproc ranks ..." >&2
    "$build/bin/ddprun" --standalone --nproc-per-node "$nproc" "$build/bin/allreduce_bench" \
      --backends gloo,shm --max-bytes $((64 << 20)) --no-pin >"$logs/shm-$nproc.log" 2>&1
    allreduce_rows "$logs/shm-$nproc.log" shm 1 "$nproc"
  done
done

for rate in $rates; do
  link="$rate-${delay_ms}ms"
  for round in $(seq "$rounds"); do
    # --- All-reduce, in every round (Note [All-reduce in every round]): 2
    # and 4 nodes on Gloo, then 2 x 2 flat against hierarchical.
    for nodes in 4 2; do
      cluster_up "$nodes" "$rate" "$delay_ms"
      idle=()
      ((nodes == 2)) && idle=(--idle-us "$idle_gaps")
      ddp_job "allreduce-$link-$nodes-$round" "$nodes" 1 "$build/bin/allreduce_bench" \
        --backends gloo --max-bytes $((64 << 20)) --seconds-per-size 0.5 --no-pin "${idle[@]}"
      allreduce_rows "$logs/allreduce-$link-$nodes-$round.log" "$link" "$nodes" 1
      if ((nodes == 4)); then cluster_down; fi
    done
    if ((round == 1)); then echo "$link: $(cluster_link_check 2)" >>"$out/links.txt"; fi
    # float16, as the fp16 hook sends it: Gloo reduces it far slower.
    ddp_job "allreduce-$link-2-fp16-$round" 2 1 "$build/bin/allreduce_bench" \
      --backends gloo --dtype float16 --max-bytes $((64 << 20)) --seconds-per-size 0.5 --no-pin
    allreduce_rows "$logs/allreduce-$link-2-fp16-$round.log" "$link" 2 1 float16
    ddp_job "allreduce-$link-2x2-$round" 2 2 "$build/bin/allreduce_bench" --backends gloo,auto \
      --max-bytes $((64 << 20)) --seconds-per-size 0.5 --no-pin --idle-us "$idle_gaps"
    allreduce_rows "$logs/allreduce-$link-2x2-$round.log" "$link" 2 2

    # --- Training, the two sides alternating.
    for model in linear convnet mlp; do
      train ddp "$link/$model" 2 1 "$model" gloo none "$(steps_of "$model")"
      train pytorch "$link/$model" 2 1 "$model" gloo none "$(steps_of "$model")"
    done
    for model in convnet mlp; do
      train ddp "$link/2x2-gloo/$model" 2 2 "$model" gloo none "$(steps_of "$model")"
      train ddp "$link/2x2-hier/$model" 2 2 "$model" auto none "$(steps_of "$model")"
    done
    if [[ $rate == "${HOOKS_ON:-${rates%% *}}" ]]; then
      # One node of 2 ranks (no link): the compute each hook adds to a step
      # (casts, PowerSGD's products), which the cost model takes as
      # measured (Note [A hook's compute is measured, not modelled]).
      for hook in none fp16 bf16 powersgd; do
        train ddp "$link/1x2/mlp-$hook" 1 2 mlp auto "$hook" "$(steps_of mlp)"
        train pytorch "$link/1x2/mlp-$hook" 1 2 mlp gloo "$hook" "$(steps_of mlp)"
      done
      for hook in fp16 bf16 powersgd; do
        train ddp "$link/mlp-$hook" 2 1 mlp gloo "$hook" "$(steps_of mlp)"
        train pytorch "$link/mlp-$hook" 2 1 mlp gloo "$hook" "$(steps_of mlp)"
      done
    fi
    cluster_down
  done
done

# --- Tables, from the measurements.
echo "machine: $cores cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1); ddp $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'); PyTorch $("$python" -c 'import torch; print(torch.__version__)'); one-way delay $delay_ms ms"
"$python" "$root/benchmarks/cluster/report.py" "$out"
echo
echo "measurements: $allreduce_csv, $idle_csv, $steps_csv, $out/links.txt"
"$python" "$root/benchmarks/cost_model.py" --measurements "$out"
rm -rf "$logs"
