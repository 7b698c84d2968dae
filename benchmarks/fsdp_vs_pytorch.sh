#!/usr/bin/env bash
# ddp's FSDP and DDP beside PyTorch's FSDP1 and DDP on the CPU, in the same
# run, on the same kernels: ddp built against LibTorch 2.6 in the Debian 13
# root of scripts/libtorch2.sh, PyTorch 2.6 from that root's python3-torch
# under its torchrun. The model of benchmarks/fsdp_bench.sh (5 Linear
# layers of 3200, ~51 M parameters, each Linear one FSDP unit; FSDP1's
# ModuleWrapPolicy({Linear}), device_id=cpu), AdamW in fp32, 8 rows per
# rank, one thread per rank, 2 and 4 ranks over Gloo (ddp's also over its
# shared-memory backend). Each way is one job; ROUNDS rounds alternate the
# ways, and the table gives the median over the rounds of each job's median
# step (after one untimed step) with its forward, backward and optimizer
# parts, and of the peak RSS (the largest over the ranks).
#
# Usage: benchmarks/fsdp_vs_pytorch.sh   (as root: everything runs in the root)
# Environment: RANKS ("2 4"), ROUNDS (3), STEPS (3), WIDTH (3200), LAYERS
# (5), DDP_DEBIAN13_ROOT (/var/cache/ddp/trixie), DDP_BUILD_DIR
# (build-libtorch2-bench, built in the root), DDP_SKIP_BUILD (set: use the
# build as it is), JOBS (2).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)  # the repository, as common.sh names it
build=${DDP_BUILD_DIR:-$root/build-libtorch2-bench}
# shellcheck source=benchmarks/common.sh
source "$root/benchmarks/common.sh"
debian13=${DDP_DEBIAN13_ROOT:-/var/cache/ddp/trixie}
DDP_DEBIAN13_ROOT=$debian13 bash "$root/scripts/libtorch2.sh" --setup-only >&2
# shellcheck source=scripts/debian13-root.sh
source "$root/scripts/debian13-root.sh"
root_open "$debian13" "$root"
if [[ -z ${DDP_SKIP_BUILD:-} ]]; then
  echo "building fsdp_bench and ddprun against LibTorch 2.6 in $build ..." >&2
  in_root "$debian13" bash -c "cd '$root' && cmake -S . -B '$build' -G Ninja \
    -DDDP_BUILD_TESTS=OFF -DDDP_BUILD_BENCHMARKS=ON -DDDP_DEBUG_INFO=OFF >/dev/null \
    && cmake --build '$build' --target fsdp_bench ddprun -j${JOBS:-2}" >&2
fi

width=${WIDTH:-3200} layers=${LAYERS:-5} steps=${STEPS:-3}
echo "cores: $(nproc); cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1);" \
  "$(in_root "$debian13" dpkg-query -W -f='python3-torch ${Version}' python3-torch)"
# Both sides' matrix products run on the root's libblas.so.3.
echo "both sides' $(in_root "$debian13" "$build/bin/ddprun" --standalone --nproc-per-node 1 /bin/true 2>&1 | sed -n 's/^ddprun: //p' | grep '^BLAS:' || echo 'BLAS: not named')"

# Both sides allocate with the same malloc (comparison_preload in common.sh).
preload=$(comparison_preload "$debian13")
allocator_line "$preload" "$debian13"

# One job; prints rank 0's result line.
ddp_job() {  # ddp_job RANKS WAY BACKEND
  in_root "$debian13" env OMP_NUM_THREADS=1 "$build/bin/ddprun" --standalone --nproc-per-node "$1" \
    --allocator "${preload:-glibc}" "$build/bin/fsdp_bench" --way "$2" --backend "$3" --steps "$steps" --width "$width" \
    --layers "$layers" | sed -n 's/^\[0\] //p'
}
pytorch_job() {  # pytorch_job RANKS WAY
  in_root "$debian13" env OMP_NUM_THREADS=1 ${preload:+LD_PRELOAD="$preload"} PYTHONPATH="$root/tests/interop/torchrun_site" \
    WAY="$2" WIDTH="$width" LAYERS="$layers" STEPS="$steps" \
    python3 -m torch.distributed.run --standalone --nproc-per-node "$1" \
    "$root/benchmarks/pytorch_fsdp_bench.py" 2>&1 | grep -E '^way=' || true
}

ways=("ddp ddp gloo" "ddp ddp shm" "ddp fsdp gloo" "ddp fsdp shm" "pytorch ddp gloo"
  "pytorch fsdp1 gloo")
keys=(step_ms forward_ms backward_ms optimizer_ms peak_rss_bytes)
declare -A results  # "ranks|way|key" -> values, one per round
for round in $(seq "${ROUNDS:-3}"); do
  for ranks in ${RANKS:-2 4}; do
    for way in "${ways[@]}"; do
      read -r side name backend <<<"$way"
      if [[ $side == ddp ]]; then
        line=$(ddp_job "$ranks" "$name" "$backend")
      else
        line=$(pytorch_job "$ranks" "$name")
      fi
      if [[ $line == *error=* || -z $line ]]; then
        echo "round $round, $ranks ranks, $way: ${line:-no result}" >&2
        continue
      fi
      for key in "${keys[@]}"; do
        results["$ranks|$way|$key"]+="$(field " $line" "$key") "
      done
    done
  done
  echo "round $round done" >&2
done

echo
echo "median ms per step over ${ROUNDS:-3} rounds (each the median of $steps steps); peak RSS of a rank"
printf '%-6s %-22s %9s %9s %9s %9s %9s %10s %10s\n' ranks way step forward backward optimizer \
  rss_MiB vs_pt_fsdp vs_own_ddp
for ranks in ${RANKS:-2 4}; do
  pt_fsdp=$(median <<<"${results["$ranks|pytorch fsdp1 gloo|step_ms"]:-}")
  for way in "${ways[@]}"; do
    read -r side name backend <<<"$way"
    step=$(median <<<"${results["$ranks|$way|step_ms"]:-}")
    [[ $step == - ]] && continue
    own_ddp=$(median <<<"${results["$ranks|$side ddp $backend|step_ms"]:-}")
    rss=$(median <<<"${results["$ranks|$way|peak_rss_bytes"]:-}")
    printf '%-6s %-22s %9.1f %9.1f %9.1f %9.1f %9.1f %10.2f %10.2f\n' "$ranks" "$way" "$step" \
      "$(median <<<"${results["$ranks|$way|forward_ms"]}")" \
      "$(median <<<"${results["$ranks|$way|backward_ms"]}")" \
      "$(median <<<"${results["$ranks|$way|optimizer_ms"]}")" \
      "$(awk -v b="$rss" 'BEGIN { print b / 1048576 }')" \
      "$(awk -v a="$step" -v b="$pt_fsdp" 'BEGIN { print (b == "-" ? 0 : a / b) }')" \
      "$(awk -v a="$step" -v b="$own_ddp" 'BEGIN { print (b == "-" ? 0 : a / b) }')"
  done
done
