#!/usr/bin/env bash
# Every file path a comment names exists: a path under include/ (written
# from ddp/), a path from the repository's root (src/..., tests/...), or a
# path relative to the commenting file's part, in the tracked C++, CMake,
# shell and Python files (#include lines are the compiler's to check).
# Upstream trees a comment may cite (PyTorch's torch/..., aten/..., c10/...,
# caffe2/..., CPython's Lib/...) are not in this repository and are skipped.
#
#   bash scripts/check-comment-paths.sh      # exit 1 naming each missing path
set -uo pipefail
cd "$(dirname "$0")/.."
upstream='^(torch|aten|c10|caffe2|Lib)/'
missing=0
checked=0
while IFS= read -r file; do
  part=$(echo "$file" | cut -d/ -f2)
  while IFS= read -r hit; do
    line=${hit%%:*}
    path=${hit#*:}
    [[ $path =~ $upstream ]] && continue
    checked=$((checked + 1))
    found=0
    for base in "" include/ include/ddp/ src/ tests/ examples/ "src/$part/" "$(dirname "$file")/" \
      /usr/include/ /usr/include/torch/csrc/api/include/; do
      [[ -e $base$path ]] && { found=1; break; }
    done
    if [[ $found -eq 0 ]]; then
      echo "check-comment-paths: $file:$line names $path, which does not exist; name the file where it is now"
      missing=$((missing + 1))
    fi
  done < <(grep -n -E '^\s*(//|#|\*)|[^:"]//' "$file" | grep -v -E '^[0-9]+:\s*#\s*include' |
    grep -o -E '^[0-9]+:|\b[A-Za-z0-9_]+(/[A-Za-z0-9_.-]+)+\.(hpp|cpp|h|sh|py|md|cmake)\b' |
    awk '/^[0-9]+:$/ { line = $0; next } { print line $0 }')
done < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.sh' '*.py' '*.cmake' '*CMakeLists.txt' | grep -v '^include/moved/')
if [[ $missing -gt 0 ]]; then
  echo "check-comment-paths: FAILED: $missing path(s) named in comments do not exist"
  exit 1
fi
echo "check-comment-paths: the $checked paths named in comments exist"
