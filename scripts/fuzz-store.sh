#!/usr/bin/env bash
# Builds the rendezvous store's fuzz target (tests/fuzz/store_wire_fuzz.cpp)
# with clang's libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer,
# and fuzzes the store server's wire protocol for a bounded time. Exits 0
# when no crash, hang, leak or oversized allocation was found; otherwise
# libFuzzer's report and the crashing input are in the work directory.
#   bash scripts/fuzz-store.sh [--seconds N] [--work DIR]
# CI runs 60 s of it as a test (label fuzz); docs/guide/tests.md records a
# 30-minute run.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
seconds=60
work="$repo/build/fuzz"
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    *) echo "usage: $0 [--seconds N] [--work DIR]" >&2; exit 2 ;;
  esac
done
cxx=$(command -v clang++ || true)
if [[ -z $cxx ]]; then
  echo "fuzz-store: clang++ is not installed (Debian: clang, libclang-rt-dev)" >&2
  exit 2
fi
launcher=()
command -v ccache >/dev/null && launcher=(ccache)
mkdir -p "$work/objects" "$work/corpus"
flags=(-std=c++17 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
       -I"$repo/include" -I"$repo/src")
objects=()
for source in tests/fuzz/store_wire_fuzz.cpp src/comm/store/store_server.cpp src/comm/store/socket.cpp \
              src/comm/store/handshake.cpp src/base/errors.cpp; do
  object="$work/objects/$(basename "$source" .cpp).o"
  "${launcher[@]}" "$cxx" "${flags[@]}" -c "$repo/$source" -o "$object"
  objects+=("$object")
done
"$cxx" -fsanitize=fuzzer,address,undefined "${objects[@]}" -lcrypto -lpthread -o "$work/store_wire_fuzz"

# Seeds: one valid frame of every request, from an admitted client (first
# byte odd) and from an intruder (first byte even).
seed() { printf '%b' "$1" >"$work/corpus/seed-$2"; }
seed '\x01\x0b\x00\x00\x00\x01\x01\x00\x00\x00k\x01\x00\x00\x00v' set
seed '\x01\x0e\x00\x00\x00\x02\x0a\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00k' get
seed '\x01\x0e\x00\x00\x00\x03\x01\x00\x00\x00c\x05\x00\x00\x00\x00\x00\x00\x00' add
seed '\x01\x0a\x00\x00\x00\x05\x01\x00\x00\x00\x01\x00\x00\x00k' check
seed '\x01\x12\x00\x00\x00\x08\x0a\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00k' wait
seed '\x00\x05\x00\x00\x00\x09\x00\x00\x00\x00' auth

# OpenSSL 3.0 keeps each thread's error queue and random generator (about
# 1 KB) until the process ends, also for a server thread that has ended;
# the target replaces its server every 5000 inputs, so LeakSanitizer would
# report that state. Only libcrypto's own allocations are suppressed.
echo "leak:libcrypto.so" >"$work/lsan.supp"
export LSAN_OPTIONS="suppressions=$work/lsan.supp:print_suppressions=0"

echo "fuzz-store: fuzzing the store's wire protocol for ${seconds} s"
cd "$work"
"$work/store_wire_fuzz" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
  -malloc_limit_mb=512 -print_final_stats=1 "$work/corpus" 2>"$work/fuzz.log" || {
  tail -n 60 "$work/fuzz.log"
  echo "fuzz-store: FAILED: libFuzzer found a problem (log: $work/fuzz.log)"
  exit 1
}
grep -E "^stat::(number_of_executed_units|peak_rss_mb)|cov: " "$work/fuzz.log" | tail -n 3
echo "fuzz-store: passed: no crash, hang or oversized allocation in ${seconds} s"
