#!/usr/bin/env bash
# CI's layout check, the layout rule of CONTRIBUTING.md made mechanical:
#   1. every layer and part (a folder of include/ddp/) has src/<part>/,
#      tests/<part>/, the umbrella include/ddp/<part>.hpp, a library
#      (ddp_add_library(<part> ...) in src/<part>/sources.cmake), and its
#      public headers declare namespace ddp::<part>; no code sits outside a
#      part (include/ddp/ holds only the umbrellas, src/ only folders);
#   2. every #include "ddp/..." names a public header that exists (private
#      headers live under src/ and are never included with a ddp/ prefix);
#   3. the layers keep their direction: base includes no other part; comm
#      includes only base; parallel and launch include only comm and base;
#      formats (PyTorch's file formats) includes only base, so that snapshot
#      and any part may read them but they know no training state;
#      the parts above them include the layers and each other without a
#      cycle, and never the launcher.
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

mapfile -t parts < <(find include/ddp -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort)

# --- 1. Each part in its four places.
for part in "${parts[@]}"; do
  [[ -d src/$part ]] || fail "part $part: no src/$part/"
  [[ -d tests/$part ]] || fail "part $part: no tests/$part/"
  [[ -f include/ddp/$part.hpp ]] || fail "part $part: no umbrella include/ddp/$part.hpp"
  grep -qE "^ddp_add_library\($part( |\))" "src/$part/sources.cmake" 2>/dev/null ||
    fail "part $part: src/$part/sources.cmake adds no library (ddp_add_library($part ...))"
  for header in include/ddp/"$part"/*.hpp; do
    grep -qE "^namespace ddp::$part( |::|\{)|^namespace $part \{" "$header" ||
      fail "$header: declares no namespace ddp::$part"
  done
done

for header in include/ddp/*.hpp; do
  name=$(basename "$header" .hpp)
  [[ $name == ddp || -d include/ddp/$name ]] ||
    fail "$header: a public header outside every part (move it to include/ddp/<part>/)"
done
for file in src/*; do
  [[ -d $file ]] || fail "$file: a source outside every part (move it to src/<part>/)"
done

# --- 2. ddp/ includes name public headers.
mapfile -t files < <(git ls-files 'src/*' 'include/*' 'tests/*' 'tools/*' 'examples/*' \
  'benchmarks/*' 2>/dev/null | grep -E '\.(cpp|hpp)$' ||
  find src include tests tools examples benchmarks -name '*.cpp' -o -name '*.hpp')
while IFS=: read -r file included; do
  [[ -f include/$included ]] || fail "$file: includes \"$included\", which is not a public header"
done < <(grep -oE '^#include "ddp/[^"]+"' "${files[@]}" | sed 's/:#include "/:/; s/"$//')

# --- 3. The layers' direction, and no cycle between parts.
part_of_path() {
  local p=$1
  case $p in
    include/ddp/*/*) p=${p#include/ddp/}; echo "${p%%/*}" ;;
    src/*/*) p=${p#src/}; echo "${p%%/*}" ;;
  esac
}
part_of_include() {
  local i=$1 d
  case $i in
    ddp/*/*) i=${i#ddp/}; echo "${i%%/*}" ;;
    ddp/*.hpp) d=${i#ddp/}; d=${d%.hpp}; [[ -d include/ddp/$d ]] && echo "$d" ;;
    */*) d=${i%%/*}; [[ -d src/$d ]] && echo "$d" ;;
  esac
}
may_include() {  # may_include FROM TO: the direction of the layers
  case $1 in
    base) return 1 ;;
    comm | formats) [[ $2 == base ]] ;;
    parallel | launch) [[ $2 == comm || $2 == base ]] ;;
    *) [[ $2 != launch ]] ;;
  esac
}
edges=$(mktemp)
wrong_way=$(mktemp)
trap 'rm -f "$edges" "$wrong_way"' EXIT
for file in "${files[@]}"; do
  [[ $file == src/* || $file == include/* ]] || continue
  from=$(part_of_path "$file")
  [[ -n $from ]] || continue
  while read -r included; do
    to=$(part_of_include "$included")
    [[ -n $to && $to != "$from" ]] || continue
    may_include "$from" "$to" ||
      echo "$file: includes \"$included\", but $from may not depend on $to" >>"$wrong_way"
    echo "$from $to"
  done < <(grep -oE '^#include "[^"]+"' "$file" | sed 's/#include "//; s/"$//')
done | sort -u >"$edges"
while read -r line; do fail "$line"; done <"$wrong_way"
if ! tsort "$edges" >/dev/null 2>/tmp/ddp-tsort.log; then
  fail "the parts include each other in a cycle: $(grep -v '^tsort: -: input contains a loop' /tmp/ddp-tsort.log | sed 's/^tsort: //' | tr '\n' ' ')"
fi

if [[ $status -eq 0 ]]; then
  say "${#parts[@]} layers and parts (${parts[*]}) each in include/ddp/, src/, tests/, its namespace and library; ddp/ includes all public; base <- comm <- parallel, launch <- parts, base <- formats, acyclic ($(wc -l <"$edges") edges)"
else
  say "FAILED: the layout rule of CONTRIBUTING.md is broken at the places above"
fi
exit $status
