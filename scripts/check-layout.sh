#!/usr/bin/env bash
# CI's layout check, the layout rule of CONTRIBUTING.md made mechanical:
#   1. every part (a folder of include/ddp/) has src/<part>/, tests/<part>/,
#      the umbrella include/ddp/<part>.hpp, and its public headers declare
#      namespace ddp::<part>;
#   2. every #include "ddp/..." names a public header that exists (private
#      headers live under src/ and are never included with a ddp/ prefix);
#   3. the parts include each other without a cycle. The core is the root
#      (include/ddp/*.hpp, src/*.cpp and src/'s private folders listed in
#      core_private below).
# Prints each finding and exits non-zero when one is found.
#
#   bash scripts/check-layout.sh
set -uo pipefail
cd "$(dirname "$0")/.."
say() { echo "check-layout: $*"; }
status=0
fail() {
  echo "  $*"
  status=1
}

core_private=" backends shm store compat launch distributed_data_parallel data_parallel flight_recorder "
mapfile -t parts < <(find include/ddp -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort)

# --- 1. Each part in its four places.
for part in "${parts[@]}"; do
  [[ -d src/$part ]] || fail "part $part: no src/$part/"
  [[ -d tests/$part ]] || fail "part $part: no tests/$part/"
  [[ -f include/ddp/$part.hpp ]] || fail "part $part: no umbrella include/ddp/$part.hpp"
  for header in include/ddp/"$part"/*.hpp; do
    grep -qE "^namespace ddp::$part( |::|\{)|^namespace $part \{" "$header" ||
      fail "$header: declares no namespace ddp::$part"
  done
done

# --- 2. ddp/ includes name public headers.
mapfile -t files < <(git ls-files 'src/*' 'include/*' 'tests/*' 'tools/*' 'examples/*' \
  'benchmarks/*' 2>/dev/null | grep -E '\.(cpp|hpp)$' ||
  find src include tests tools examples benchmarks -name '*.cpp' -o -name '*.hpp')
while IFS=: read -r file included; do
  [[ -f include/$included ]] || fail "$file: includes \"$included\", which is not a public header"
done < <(grep -oE '^#include "ddp/[^"]+"' "${files[@]}" | sed 's/:#include "/:/; s/"$//')

# --- 3. No cycle between parts.
part_of_path() {
  local p=$1 d
  case $p in
    include/ddp/ddp.hpp) echo "" ;;
    include/ddp/*/*) p=${p#include/ddp/}; echo "${p%%/*}" ;;
    include/ddp/*.hpp) d=${p#include/ddp/}; d=${d%.hpp}; [[ -d include/ddp/$d ]] && echo "$d" || echo core ;;
    src/*/*) d=${p#src/}; d=${d%%/*}; [[ $core_private == *" $d "* ]] && echo core || echo "$d" ;;
    src/*) echo core ;;
  esac
}
part_of_include() {
  local i=$1 d
  case $i in
    ddp/ddp.hpp) echo "" ;;
    ddp/*/*) i=${i#ddp/}; echo "${i%%/*}" ;;
    ddp/*.hpp) d=${i#ddp/}; d=${d%.hpp}; [[ -d include/ddp/$d ]] && echo "$d" || echo core ;;
    */*) d=${i%%/*}; [[ -d src/$d ]] || return 0
      [[ $core_private == *" $d "* ]] && echo core || echo "$d" ;;
  esac
}
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
for file in "${files[@]}"; do
  [[ $file == src/* || $file == include/* ]] || continue
  from=$(part_of_path "$file")
  [[ -n $from ]] || continue
  while read -r included; do
    to=$(part_of_include "$included")
    [[ -n $to && $to != "$from" ]] && echo "$from $to"
  done < <(grep -oE '^#include "[^"]+"' "$file" | sed 's/#include "//; s/"$//')
done | sort -u >"$edges"
if ! tsort "$edges" >/dev/null 2>/tmp/ddp-tsort.log; then
  fail "the parts include each other in a cycle: $(grep -v '^tsort: -: input contains a loop' /tmp/ddp-tsort.log | sed 's/^tsort: //' | tr '\n' ' ')"
fi

if [[ $status -eq 0 ]]; then
  say "${#parts[@]} parts (${parts[*]}) each in include/ddp/, src/, tests/ and its namespace; ddp/ includes all public; part graph acyclic ($(wc -l <"$edges") edges)"
else
  say "FAILED: the layout rule of CONTRIBUTING.md is broken at the places above"
fi
exit $status
