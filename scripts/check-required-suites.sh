#!/usr/bin/env bash
# Checks that a ctest run ran the suites its CI leg requires and skipped none
# of their tests: ctest counts a GTEST_SKIP as a pass, so a machine that lost
# mpirun, Slurm or PyTorch would otherwise go on passing (Note [A skip CI
# does not allow] in tests/common/required_suites.hpp).
#
#   bash scripts/check-required-suites.sh JUNIT SUITE...
#
# JUNIT is ctest's report (`ctest --output-junit JUNIT`, cmake 3.21 and
# later). A SUITE covers every test whose gtest suite (the name before the
# first '.', without a parameterised instantiation's "Prefix/") starts with
# it, as `ctest -R` matches a part: InteropMpirun covers InteropMpirunErrors.
# Prints, per suite, "required-suites: SUITE: N run, P passed, S skipped,
# F failed" (skipped: ctest's "notrun", a GTEST_SKIP or a test that did not
# start), then each skipped test; exits 1 when a suite ran no test or
# skipped one. Failed tests are ctest's to report, and fail the leg there.
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 JUNIT SUITE..." >&2
  exit 2
fi
junit=$1
shift
if [[ ! -s $junit ]]; then
  echo "required-suites: FAILED: no ctest report at $junit (did ctest run, with --output-junit $junit?), so none of $* is known to have run" >&2
  exit 1
fi

# One line per test case: "STATUS<tab>NAME<tab>REASON". ctest writes each
# <testcase ...> opening tag on one line, name= first and status= last; a
# skipped test's reason is the line after gtest's "FILE:LINE: Skipped" in
# its <system-out>.
cases=$(awk '
  function flush() { if (name != "") printf "%s\t%s\t%s\n", status, name, reason; name = "" }
  /^[[:space:]]*<testcase name="/ {
    flush()
    name = $0; sub(/^[[:space:]]*<testcase name="/, "", name); sub(/".*/, "", name)
    status = $0; sub(/.* status="/, "", status); sub(/".*/, "", status)
    reason = ""; want = 0
    next
  }
  want { reason = $0; want = 0 }
  /: Skipped$/ && reason == "" { want = 1 }
  END { flush() }
' "$junit" | sed 's/&lt;/</g; s/&gt;/>/g; s/&quot;/"/g; s/&apos;/'"'"'/g; s/&amp;/\&/g')

status=0
for suite in "$@"; do
  run=0 passed=0 skipped=0 failed=0 skips=()
  while IFS=$'\t' read -r result name reason; do
    [[ -n $name ]] || continue
    gtest_suite=${name%%.*}
    gtest_suite=${gtest_suite##*/}
    [[ $gtest_suite == "$suite"* ]] || continue
    run=$((run + 1))
    case $result in
      run) passed=$((passed + 1)) ;;
      fail) failed=$((failed + 1)) ;;
      *) skipped=$((skipped + 1)) skips+=("$name: ${reason:-did not run}") ;;
    esac
  done <<<"$cases"
  echo "required-suites: $suite: $run run, $passed passed, $skipped skipped, $failed failed"
  if [[ $run -eq 0 ]]; then
    echo "required-suites: FAILED: $suite ran no test; is its test binary built, the suite not left out by -R/-E/-L, and still named $suite?"
    status=1
  fi
  if [[ $skipped -gt 0 ]]; then
    echo "required-suites: FAILED: $suite skipped $skipped test(s); install what is missing, or take $suite out of the leg's list saying why:"
    printf 'required-suites:   skipped %s\n' "${skips[@]}"
    status=1
  fi
done
exit $status
