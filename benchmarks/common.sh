# shellcheck shell=bash
# What the benchmark scripts share: `source` it after setting root (the
# repository) and build (the build directory).
#
#   build_benchmarks TARGET...   configures $build with the benchmarks on
#                                (the test command turns them off) and builds
#                                the targets with $JOBS (2) jobs
#   require_torch                exits 2 unless $python (Debian's
#                                /usr/bin/python3) imports torch
#   require_fashion_mnist DIR    exits 2 unless DIR holds Fashion-MNIST
#   field LINE KEY               the value of KEY=value in a result line
#   median                       the median of the numbers on stdin (spaces
#                                or lines; the mean of the middle two for an
#                                even count; - for none)

python=/usr/bin/python3 # Debian's PyTorch; the first python3 on PATH may lack torch.

build_benchmarks() {
  cmake -S "$root" -B "$build" -DDDP_BUILD_BENCHMARKS=ON >/dev/null
  echo "building $* in $build ..." >&2
  cmake --build "$build" --target "$@" -j"${JOBS:-2}" >&2
}

require_torch() {
  if ! "$python" -c 'import torch' 2>/dev/null; then
    echo "error: $python cannot import torch; install Debian's PyTorch: sudo apt-get install python3-torch" >&2
    exit 2
  fi
}

require_fashion_mnist() {
  if [[ ! -f "$1/train-images-idx3-ubyte.gz" && ! -f "$1/train-images-idx3-ubyte" ]]; then
    echo "error: Fashion-MNIST not found in $1; install dataset-fashion-mnist or set FASHION_MNIST" >&2
    exit 2
  fi
}

# comparison_preload [ROOT]: the allocator both sides of a comparison with
# PyTorch run on (Note [The host allocator] in include/ddp/base/allocator.hpp):
# tcmalloc where it is installed (under ROOT, a Debian 13 root's folder), as
# ddprun preloads it into ddp's workers, given to PyTorch's too; "" (glibc's
# malloc on both sides) with ALLOCATOR=glibc or without tcmalloc.
comparison_preload() {
  local path=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
  [[ ${ALLOCATOR:-tcmalloc} == glibc || ! -f ${1:-}$path ]] || echo "$path"
}
# allocator_line PRELOAD: the table's line naming both sides' allocator.
allocator_line() {
  if [[ -n $1 ]]; then
    echo "both sides' allocator: tcmalloc $(readlink -f "${2:-}$1" | sed "s|^${2:-}||") (LD_PRELOAD)"
  else
    echo "both sides' allocator: glibc's malloc"
  fi
}

field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }

median() {
  tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
