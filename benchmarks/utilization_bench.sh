#!/usr/bin/env bash
# Training against this machine's limits (issue 70): every figure over what
# the machine can do, measured in the same run with the BLAS in use and the
# allocator ddprun gives its workers (tcmalloc where installed; ALLOCATOR,
# passed as ddprun's --allocator, chooses another).
#   1. the limits: one core's sgemm GFLOP/s through LibTorch's BLAS, its
#      memory bandwidth (a += s b in place, and Adam's pattern of 4 arrays
#      read and 3 written) (optimizer_bench --limits);
#   2. the transformer of examples/common/gpt.hpp (fsdp_transformer_bench),
#      RANKS ranks on each of TF_BACKENDS, BATCH x LENGTH tokens a rank, at each of WIDTHS
#      with LAYERS blocks: DDP, FSDP and FSDP with checkpointing, each with
#      LibTorch's AdamW and with ddp::optim::AdamW; the step split into
#      forward, backward and optimizer, and its MFU as the benchmark prints
#      it: model FLOPs (three forwards', counted by ddp::training::
#      FlopCounter, every rank's) over the step time x sgemm GFLOP/s x cores
#      (checkpointing's recompute counts as waste), and the optimizer's
#      share of one core's bandwidth (glibc's own mmap threshold: the
#      benchmark's pin for exact RSS peaks costs time);
#   3. the MLP of fsdp_bench (51 M parameters, batch 8) at 2 ranks on shm
#      and Gloo: each of MLP_WAYS (DDP, FSDP, and FSDP kept gathered from
#      forward to backward), each optimizer, the step and its parts, its
#      MFU, and the optimizer's bytes (28 a parameter of the rank's share)
#      over its time against one core's bandwidth;
#   4. threads per rank (ddprun's default, cores / ranks, against one and
#      two): the transformer's DDP step at width 1024 at 1, 2 and 4 ranks,
#      each with OMP_NUM_THREADS 1 and 2, its tokens/s over all ranks and
#      its MFU.
#
# Usage: benchmarks/utilization_bench.sh
# Environment: PARTS ("transformer mlp threads"), RANKS (4), WIDTHS ("1024 2048"),
# LAYERS (4), HEADS (16), BATCH (1), LENGTH (128), STEPS (3), WAYS ("ddp
# fsdp fsdp-checkpoint"), TF_BACKENDS (shm), MLP_WAYS ("ddp fsdp
# fsdp-keep-gathered"), OPTIMIZERS ("torch ddp"), DDP_BUILD_DIR (build),
# DDP_SKIP_BUILD, JOBS (2), ALLOCATOR (auto).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDP_BUILD_DIR:-$root/build}
# shellcheck source=benchmarks/common.sh
source "$root/benchmarks/common.sh"
[[ -n ${DDP_SKIP_BUILD:-} ]] || build_benchmarks optimizer_bench fsdp_transformer_bench fsdp_bench ddprun

cores=$(nproc)
export OMP_NUM_THREADS=1
echo "cores: $cores; cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1); $(date -u '+%Y-%m-%d %H:%M UTC')"
"$build/bin/ddprun" --standalone --nproc-per-node 1 --allocator "${ALLOCATOR:-auto}" /bin/true 2>&1 | grep -E 'BLAS:|allocator:' || true
limits=$("$build/bin/optimizer_bench" --limits)
sgemm=$(field " $limits" sgemm_gflops)
echo "limits: one core's sgemm $sgemm GFLOP/s; memory (a += s b) $(field " $limits" memory_gbs) GB/s, Adam's pattern $(field " $limits" adam_pattern_gbs) GB/s; peak $cores x $sgemm GFLOP/s"

parts=${PARTS:-transformer mlp threads}
if [[ $parts == *transformer* ]]; then
  ranks=${RANKS:-4}
  echo
  echo "transformer: $ranks ranks, ${BATCH:-1} x ${LENGTH:-128} tokens a rank, ${LAYERS:-4} blocks"
  printf '%-6s %-16s %6s %-9s %12s %8s %8s %8s %8s %7s %8s\n' backend way width optimizer parameters step_s fwd_s bwd_s opt_s MFU opt/mem
  for backend in ${TF_BACKENDS:-shm}; do
    for width in ${WIDTHS:-1024 2048}; do
      for way in ${WAYS:-ddp fsdp fsdp-checkpoint}; do
        for optimizer in ${OPTIMIZERS:-torch ddp}; do
          line=$("$build/bin/ddprun" --standalone --nproc-per-node "$ranks" --allocator "${ALLOCATOR:-auto}" "$build/bin/fsdp_transformer_bench" \
            --way "$way" --backend "$backend" --width "$width" --layers "${LAYERS:-4}" --heads "${HEADS:-16}" \
            --batch "${BATCH:-1}" --length "${LENGTH:-128}" --steps "${STEPS:-3}" --optimizer "$optimizer" --pin-mmap-threshold false 2>/dev/null |
            sed -n 's/^\[0\] //p')
          if [[ -z $line ]]; then
            printf '%-6s %-16s %6s %-9s %12s\n' "$backend" "$way" "$width" "$optimizer" "failed"
            continue
          fi
          printf '%-6s %-16s %6s %-9s %12s %8s %8s %8s %8s %7s %8s\n' "$backend" "$way" "$width" "$optimizer" \
            "$(field " $line" parameters)" "$(field " $line" step_s)" "$(field " $line" forward_s)" \
            "$(field " $line" backward_s)" "$(field " $line" optimizer_s)" \
            "$(field " $line" mfu)" "$(field " $line" optimizer_bandwidth)"
        done
      done
    done
  done
fi

if [[ $parts == *mlp* ]]; then
  echo
  echo "MLP (fsdp_bench, 51 M parameters, batch 8 a rank): 2 ranks"
  printf '%-6s %-18s %-9s %9s %9s %9s %9s %7s %8s\n' backend way optimizer step_ms fwd_ms bwd_ms opt_ms MFU opt/mem
  for backend in shm gloo; do
    for way in ${MLP_WAYS:-ddp fsdp fsdp-keep-gathered}; do
      for optimizer in ${OPTIMIZERS:-torch ddp}; do
        line=$("$build/bin/ddprun" --standalone --nproc-per-node 2 --allocator "${ALLOCATOR:-auto}" "$build/bin/fsdp_bench" --way "$way" \
          --backend "$backend" --steps "${STEPS:-3}" --optimizer "$optimizer" 2>/dev/null | sed -n 's/^\[0\] //p')
        printf '%-6s %-18s %-9s %9s %9s %9s %9s %7s %8s\n' "$backend" "$way" "$optimizer" \
          "$(field " $line" step_ms)" "$(field " $line" forward_ms)" "$(field " $line" backward_ms)" \
          "$(field " $line" optimizer_ms)" "$(field " $line" mfu)" "$(field " $line" optimizer_bandwidth)"
      done
    done
  done
fi

if [[ $parts == *threads* ]]; then
  echo
  echo "threads per rank: DDP, transformer width 1024, ${LAYERS:-4} blocks, ${BATCH:-1} x ${LENGTH:-128} tokens a rank, shm (ddprun's default: $cores cores / ranks)"
  printf '%-6s %-8s %8s %10s %7s\n' ranks threads step_s tokens/s MFU
  for ranks in 1 2 4; do
    for threads in 1 2; do
      line=$(OMP_NUM_THREADS=$threads "$build/bin/ddprun" --standalone --nproc-per-node "$ranks" --allocator "${ALLOCATOR:-auto}" \
        "$build/bin/fsdp_transformer_bench" --way ddp --backend shm --width 1024 --layers "${LAYERS:-4}" \
        --heads "${HEADS:-16}" --batch "${BATCH:-1}" --length "${LENGTH:-128}" --steps "${STEPS:-3}" \
        --optimizer ddp --pin-mmap-threshold false 2>/dev/null | sed -n 's/^\[0\] //p')
      step=$(field " $line" step_s)
      printf '%-6s %-8s %8s %10s %7s\n' "$ranks" "$threads" "$step" \
        "$(awk -v r="$ranks" -v t="$(( ${BATCH:-1} * ${LENGTH:-128} ))" -v s="$step" 'BEGIN { printf "%.0f", r * t / s }')" \
        "$(field " $line" mfu)"
    done
  done
fi
