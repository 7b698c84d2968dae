#!/usr/bin/env bash
# Packs, on a Debian machine, what scripts/gpu-check.sh needs that a GPU
# machine without network or apt lacks, all from Debian's packages, into the
# git-ignored folder .gpu-pack/ (about 36 MB), which travels with the tree:
#   include/CLI, include/nlohmann   CLI11 and nlohmann-json (header-only)
#   share/cmake/CLI11               CLI11's CMake package (relocatable)
#   include/zlib.h, zconf.h         zlib's headers (the library is on every machine)
#   include/openssl                 OpenSSL's headers (libcrypto is on every machine;
#                                   the store's HMAC handshake uses it)
#   include/gloo                    Gloo's headers, which c10d's ProcessGroupGloo.hpp
#                                   includes and PyTorch's wheels do not ship; from
#                                   Debian 13's libgloo-dev (Debian 12's predates the
#                                   store API that LibTorch 2.x's header overrides),
#                                   taken from the Debian 13 root of scripts/libtorch2.sh
#   src/googletest                  GoogleTest's sources, built by ddp's tests
#   data/fashion-mnist              the Fashion-MNIST files
# Usage: bash scripts/gpu-pack.sh   (installs the Debian packages when missing)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pack="$root/.gpu-pack"
debian13=${DDP_DEBIAN13_ROOT:-/var/cache/ddp/trixie}
bash "$root/scripts/install-deps.sh"
if [[ ! -f "$debian13/usr/include/gloo/rendezvous/store.h" ]]; then
  echo "error: no Debian 13 root with Gloo's headers at $debian13; make it with" \
    "'bash scripts/libtorch2.sh --setup-only' or set DDP_DEBIAN13_ROOT" >&2
  exit 2
fi

rm -rf "$pack"
mkdir -p "$pack/include" "$pack/share/cmake" "$pack/src" "$pack/data"
cp -r /usr/include/CLI /usr/include/nlohmann "$pack/include/"
cp /usr/include/zlib.h /usr/include/zconf.h "$pack/include/"
cp -r /usr/include/openssl "$pack/include/"
cp /usr/include/x86_64-linux-gnu/openssl/*.h "$pack/include/openssl/"  # Debian's per-arch part
cp -r "$debian13/usr/include/gloo" "$pack/include/"
cp -r /usr/share/cmake/CLI11 "$pack/share/cmake/"
cp -r /usr/src/googletest "$pack/src/googletest"
cp -r /usr/share/datasets/fashion-mnist "$pack/data/fashion-mnist"
{
  echo "Packed $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release && echo "$PRETTY_NAME") from:"
  dpkg-query -W -f '  ${Package} ${Version}\n' libcli11-dev nlohmann-json3-dev zlib1g-dev \
    libssl-dev googletest dataset-fashion-mnist
  chroot "$debian13" dpkg-query -W -f '  ${Package} ${Version} (Debian 13)\n' libgloo-dev
} >"$pack/PACKED"
cat "$pack/PACKED"
echo "gpu-pack: $(du -sh "$pack" | cut -f1) in $pack"
