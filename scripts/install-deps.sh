#!/usr/bin/env bash
# Installs the Debian 12 packages ddp builds and tests with. Installs only
# what is missing, so a second run costs a second.
#
#   bash scripts/install-deps.sh          # everything: the tests' too
#   bash scripts/install-deps.sh --main   # what README's first command builds and runs
set -euo pipefail

# Building the libraries, ddprun and the examples, and running the main job.
packages=(
  cmake g++ make ccache pkg-config
  libtorch-dev libgloo-dev       # LibTorch 1.13.1 with c10d, and Gloo's headers
  libopenblas0-openmp            # libblas.so.3 for LibTorch: OpenBLAS, not the reference (docs/guide/performance.md)
  libtcmalloc-minimal4           # tcmalloc, which ddprun preloads into its workers (docs/guide/performance.md)
  libcli11-dev nlohmann-json3-dev zlib1g-dev
  libssl-dev                     # libcrypto: the rendezvous store's HMAC handshake
  gnuplot-nox                    # the examples' --plot (loss/accuracy curves)
  dataset-fashion-mnist          # the examples' data (/usr/share/datasets/fashion-mnist)
  fortunes                       # example_gpt_fortunes' text (/usr/share/games/fortunes)
)
# The tests and the benchmarks, and the real programs they run ddp beside.
test_packages=(
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  clang libclang-rt-dev          # libFuzzer: the store's and the readers' fuzz tests (scripts/fuzz-*.sh)
  openmpi-bin                    # mpirun: the InteropMpirun tests
  slurm-wlm munge                # a one-node Slurm cluster: the InteropSlurm tests
  python3-torch                  # PyTorch 1.13 for Python 3.11: LauncherPython, SnapshotPyTorchInterop
  libjemalloc2                   # a second allocator for ddprun's --allocator PATH (LauncherRun)
)
case "${1:-}" in
  --main) ;;
  "") packages+=("${test_packages[@]}") ;;
  *) echo "usage: $0 [--main]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
