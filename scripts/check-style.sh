#!/usr/bin/env bash
# CI's style check: every C++ file as .clang-format lays it out, and every
# name declared in the public headers (include/ddp/) as the naming rule of
# CONTRIBUTING.md says, checked by clang-tidy's readability-identifier-naming
# (.clang-tidy), every function name elsewhere in snake_case
# (scripts/check-naming.py), and the layout rule (scripts/check-layout.sh:
# parts in their folders and namespaces, no include cycle between parts),
# and every path a comment names existing (scripts/check-comment-paths.sh).
# Installs clang-format and clang-tidy (Debian 12's, 14) when missing. Exits
# non-zero, listing each finding, when a check fails.
#
#   bash scripts/check-style.sh
#
# Environment: DDP_TORCH_API_INCLUDE, LibTorch's C++ API headers
# (/usr/include/torch/csrc/api/include).
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
say() { echo "check-style: $*"; }

missing=()
for p in clang-format clang-tidy; do command -v "$p" >/dev/null || missing+=("$p"); done
if [[ ${#missing[@]} -gt 0 ]]; then
  sudo=""
  [[ "$(id -u)" -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

status=0
# The tracked C++ files (all of them under the source folders when this is
# not a git checkout).
mapfile -t sources < <(git ls-files '*.cpp' '*.hpp' '*.h' 2>/dev/null ||
  find src include tests tools examples benchmarks -name '*.cpp' -o -name '*.hpp' -o -name '*.h')
if ! clang-format --dry-run --Werror "${sources[@]}" 2>/tmp/ddp-clang-format.log; then
  grep -E "error:" /tmp/ddp-clang-format.log | head -n 40
  say "FAILED: $(grep -c "error:" /tmp/ddp-clang-format.log) place(s) not laid out as .clang-format says; run clang-format -i on the files named"
  status=1
else
  say "${#sources[@]} C++ files laid out as .clang-format says"
fi

# One translation unit that includes every public header: clang-tidy then
# sees every public declaration once (HeaderFilterRegex limits it to them).
unit=$(mktemp --suffix=.cpp)
trap 'rm -f "$unit"' EXIT
mapfile -t headers < <(cd include && find ddp -name '*.hpp' | sort)
for h in "${headers[@]}"; do echo "#include <$h>"; done >"$unit"
torch_api=${DDP_TORCH_API_INCLUDE:-/usr/include/torch/csrc/api/include}
if ! clang-tidy --quiet --config-file=.clang-tidy "$unit" -- -std=gnu++17 -I"$(pwd)/include" \
     -isystem "$torch_api" -DUSE_C10D_GLOO >/tmp/ddp-clang-tidy.log 2>&1; then
  grep -E "error:|warning:" /tmp/ddp-clang-tidy.log | sed "s|$(pwd)/||" | sort -u | head -n 60
  say "FAILED: names in the public headers that break the naming rule (CONTRIBUTING.md), or headers that do not compile on their own"
  status=1
else
  say "${#headers[@]} public headers follow the naming rule"
fi
# Function names outside the public headers (src/, tests/, benchmarks/,
# examples/, tools/), read from the sources: clang-tidy over every
# translation unit would take most of this leg.
python3 scripts/check-naming.py || status=1
bash scripts/check-layout.sh || status=1
bash scripts/check-comment-paths.sh || status=1
# One message style: messages are built with base::detail::str (src/base/str.hpp),
# not c10::str.
if git grep -n 'c10::str(' -- src include tools examples >/tmp/ddp-message-style.log; then
  cat /tmp/ddp-message-style.log
  say "FAILED: build these messages with base::detail::str, as every other message is"
  status=1
else
  say "every message is built with base::detail::str (no c10::str)"
fi
say "$([[ $status -eq 0 ]] && echo passed || echo FAILED) in $(( $(date +%s) - start )) s"
exit $status
