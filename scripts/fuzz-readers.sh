#!/usr/bin/env bash
# Builds the file readers' fuzz targets (tests/fuzz/*_fuzz.cpp: torch.save's
# zip and pickle, safetensors, ddp's snapshot format, the idx reader) with
# clang's libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer against
# LibTorch, and fuzzes each for a bounded time from its seed corpus
# (tests/fuzz/corpus/<reader>/: real files written by Python and by ddp, and
# every input that once found a fault). Exits 0 when no crash, leak, hang,
# foreign exception or allocation above 256 MB was found; otherwise the
# report and the input are in the work directory. Prints each reader's
# executions per second.
#   bash scripts/fuzz-readers.sh [--seconds N] [--work DIR] [--only READER]
# CI runs 45 s of each as a test (label fuzz).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
seconds=45
work="$repo/build/fuzz-readers"
only=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "usage: $0 [--seconds N] [--work DIR] [--only READER]" >&2; exit 2 ;;
  esac
done
cxx=$(command -v clang++ || true)
if [[ -z $cxx ]]; then
  echo "fuzz-readers: clang++ is not installed (Debian: clang, libclang-rt-dev)" >&2
  exit 2
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$repo/tests/fuzz" -B "$work/build" -DCMAKE_CXX_COMPILER="$cxx" "${launcher[@]}" \
  ${DDP_FUZZ_CMAKE_ARGS:-} >"$work.configure.log" 2>&1 || {
  cat "$work.configure.log"
  exit 1
}
cmake --build "$work/build" -j "$(nproc)" >"$work.build.log" 2>&1 || {
  tail -n 40 "$work.build.log"
  exit 1
}

# LibTorch's registries and thread pools live until the process ends.
printf 'leak:libtorch_cpu.so\nleak:libc10.so\n' >"$work/lsan.supp"
export LSAN_OPTIONS="suppressions=$work/lsan.supp:print_suppressions=0"
# LibTorch is not instrumented: std containers it fills would look overflowed.
export ASAN_OPTIONS="detect_container_overflow=0:detect_odr_violation=0"
export DDP_FUZZ_DIR="$work/inputs"
mkdir -p "$DDP_FUZZ_DIR"

status=0
printf '%-12s %10s %10s %8s %8s\n' reader seconds executions exec/s corpus
for reader in torch_file safetensors snapshot idx; do
  [[ -z $only || $only == "$reader" ]] || continue
  corpus="$work/corpus/$reader"
  mkdir -p "$corpus" "$work/findings/$reader"
  log="$work/$reader.log"
  dict=()
  [[ -f $repo/tests/fuzz/$reader.dict ]] && dict=(-dict="$repo/tests/fuzz/$reader.dict")
  # New inputs go to the work corpus; the seeds stay as they are.
  (cd "$work/findings/$reader" && "$work/build/${reader}_fuzz" -max_total_time="$seconds" \
    -timeout=10 -rss_limit_mb=3072 -malloc_limit_mb=256 -max_len=65536 -print_final_stats=1 \
    "${dict[@]}" "$corpus" "$repo/tests/fuzz/corpus/$reader") >"$log" 2>&1 || {
    tail -n 40 "$log"
    echo "fuzz-readers: FAILED: $reader: libFuzzer found a problem (log: $log, input in" \
      "$work/findings/$reader; keep it in tests/fuzz/corpus/$reader/ once fixed)"
    status=1
    continue
  }
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  printf '%-12s %10s %10s %8s %8s\n' "$reader" "$seconds" "$runs" "$((runs / seconds))" \
    "$(find "$corpus" "$repo/tests/fuzz/corpus/$reader" -type f | wc -l)"
done
[[ $status -eq 0 ]] && echo "fuzz-readers: passed: no crash, leak, hang, foreign exception or oversized allocation"
exit $status
