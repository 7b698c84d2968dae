#!/usr/bin/env bash
# PyTorch's Distributed Checkpoint (DCP): ddp's save_distributed_checkpoint
# and load_distributed_checkpoint against PyTorch 2.6's own dcp.save and
# dcp.load (FSDP1 on CPU over Gloo, in the Debian 13 root of
# scripts/libtorch2.sh; Debian 12's PyTorch 1.13 has no DCP), in the same
# run, on the same disk: 2 ranks, each holding its FSDP shard of about 10
# MB, 100 MB and 1 GB of state (Linear(1024, 1024) layers and AdamW's two
# moments). Median of REPEAT runs, each after an untimed sync. ddp is the
# host's build (LibTorch 1.13); both write through LibTorch's zip writer.
#
# Usage: benchmarks/dcp_bench.sh   (as root: the PyTorch side runs in the root)
# Environment: SIZES ("10 100 1000", MB), REPEAT (3), DDP_BUILD_DIR (build),
# DDP_DEBIAN13_ROOT (/var/cache/ddp/trixie).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)  # the repository, as common.sh names it
build=${DDP_BUILD_DIR:-$root/build}
# shellcheck source=benchmarks/common.sh
source "$root/benchmarks/common.sh"
build_benchmarks dcp_bench ddprun
debian13=${DDP_DEBIAN13_ROOT:-/var/cache/ddp/trixie}
# shellcheck source=scripts/debian13-root.sh
source "$root/scripts/debian13-root.sh"
root_open "$debian13" "$root"
root_install "$debian13" python3-torch >/dev/null

# One directory on one disk, seen as /var/tmp/... inside the root.
inside=/var/tmp/ddp-dcp-bench
outside=$debian13$inside
rm -rf "$outside"
mkdir -p "$outside"
cores=$(nproc)
export OMP_NUM_THREADS=1
echo "cores: $cores; cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1);" \
  "dir: $outside ($(df -T "$outside" | awk 'NR==2 {print $2}')); 2 ranks over Gloo"
printf '%-30s %10s %12s %13s\n' "side and step" state time throughput
for mb in ${SIZES:-10 100 1000}; do
  "$build/bin/ddprun" --standalone --nproc-per-node 2 "$build/bin/dcp_bench" --mb "$mb" \
    --dir "$outside/ddp-$mb" --repeat "${REPEAT:-3}" | sed -n 's/^\[0\] //p'
  in_root "$debian13" env OMP_NUM_THREADS=1 python3 "$root/benchmarks/pytorch_dcp_bench.py" "$mb" \
    "$inside/pytorch-$mb" "${REPEAT:-3}" 2>/dev/null
  du -sh "$outside/ddp-$mb" "$outside/pytorch-$mb" | awk '{printf "  on disk: %s %s\n", $2, $1}'
  rm -rf "$outside/ddp-$mb" "$outside/pytorch-$mb"
done
