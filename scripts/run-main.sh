#!/usr/bin/env bash
# README command 1: install the Debian packages, build, check the backend with
# a 2-rank all-reduce, then train the DDP tutorial's ConvNet on Fashion-MNIST
# with 2 ranks on this machine's CPU for 5 epochs (example_mnist_ddp under
# ddprun), writing the metrics and the loss/accuracy curves. It installs and
# builds only what it runs (no test, no benchmark); scripts/run-tests.sh
# adds the rest.
#
#   bash scripts/run-main.sh                 # the full run (several minutes)
#   bash scripts/run-main.sh --epochs 1      # extra flags go to the example
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --main
DDP_BUILD_TESTS=OFF DDP_BUILD_BENCHMARKS=OFF bash scripts/build.sh ddp_main
./build/bin/ddp_allreduce_check --nproc 2

out=build/runs/mnist_ddp
rm -rf "$out"  # A fresh run; the snapshots serve restarts within it.
mkdir -p "$out"
start=$(date +%s)
# 5 epochs unless the arguments say how many.
epochs=(--epochs 5)
for arg in "$@"; do [[ $arg == --epochs || $arg == --epochs=* ]] && epochs=(); done
./build/bin/ddprun --standalone --nproc-per-node 2 --max-restarts 2 \
  ./build/bin/example_mnist_ddp "${epochs[@]}" \
  --metrics-csv "$out/metrics.csv" --plot "$out/curves.png" \
  --snapshot-dir "$out/snapshots" "$@"
echo "run-main: trained in $(( $(date +%s) - start )) s; curves in $out/curves.png, metrics in $out/metrics.csv"
