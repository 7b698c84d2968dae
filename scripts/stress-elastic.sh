#!/usr/bin/env bash
# Runs the elastic suites (recovery in memory: the tests whose names start
# with "Elastic") N times under load, and reports the failures of each run:
# a stress command, not a timed test (issue #57). Each run is one
# `ctest -j JOBS` over the suites, beside BUSY busy loops (one per core by
# default), so that the 2-core machine is oversubscribed as a loaded CI
# machine is. A failing run's ctest output, and the sample logs and
# launchers' outputs its tests kept (Note [Accounting for every sample] in
# tests/elastic/sample_accounting.hpp), stay in OUT/run-K/.
#
#   bash scripts/stress-elastic.sh [N]          # N runs (default 50)
#
# Environment: DDP_STRESS_REGEX ((^|/)Elastic: with the parameterized ones), DDP_STRESS_JOBS (8),
# DDP_STRESS_BUSY (nproc), DDP_STRESS_OUT (build/stress-elastic),
# DDP_STRESS_KEEP_ALL (set: keep the passing runs' folders too). Build
# first (bash scripts/build.sh or run-tests.sh): it runs what build/ holds.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-50}"
regex="${DDP_STRESS_REGEX:-(^|/)Elastic}"
jobs="${DDP_STRESS_JOBS:-8}"
busy="${DDP_STRESS_BUSY:-$(nproc)}"
out="${DDP_STRESS_OUT:-$PWD/build/stress-elastic}"
[[ -d build ]] || { echo "stress-elastic: no build/; run bash scripts/build.sh first" >&2; exit 2; }
tests=$(ctest --test-dir build -N -R "$regex" | sed -n 's/^Total Tests: //p')
[[ ${tests:-0} -gt 0 ]] || { echo "stress-elastic: no test matches $regex" >&2; exit 2; }
rm -rf "$out" && mkdir -p "$out"

loops=()
stop_loops() { for pid in "${loops[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap stop_loops EXIT
for ((i = 0; i < busy; i++)); do
  (while :; do :; done) &
  loops+=($!)
done

echo "stress-elastic: $runs run(s) of $tests test(s) matching $regex, ctest -j$jobs beside $busy busy loop(s)"
failed_runs=0
declare -A failures_of
for ((k = 1; k <= runs; k++)); do
  dir="$out/run-$k"
  mkdir -p "$dir/tmp"
  start=$SECONDS
  status=0
  # TMPDIR: the tests' kept evidence (::testing::TempDir()) lands in the run's folder.
  TMPDIR="$dir/tmp" DDP_KEEP_EVIDENCE=1 ctest --test-dir build -R "$regex" -j"$jobs" \
    --timeout 600 --output-on-failure >"$dir/ctest.log" 2>&1 || status=$?
  failed=$(sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\) (.*/\1/p' "$dir/ctest.log" | tr '\n' ' ')
  if [[ $status -eq 0 ]]; then
    [[ -n ${DDP_STRESS_KEEP_ALL:-} ]] || rm -rf "$dir"
    printf 'run %3d: passed (%d s)\n' "$k" $((SECONDS - start))
  else
    failed_runs=$((failed_runs + 1))
    for t in $failed; do failures_of[$t]=$((${failures_of[$t]:-0} + 1)); done
    printf 'run %3d: FAILED %s(%d s; kept in %s)\n' "$k" "$failed" $((SECONDS - start)) "$dir"
  fi
done

echo
echo "stress-elastic: $failed_runs of $runs run(s) failed"
for t in "${!failures_of[@]}"; do printf '  %-80s failed in %d run(s)\n' "$t" "${failures_of[$t]}"; done
[[ $failed_runs -eq 0 ]]
